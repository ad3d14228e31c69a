//! The filter-table chains that enforce NetworkPolicies on this node, built from the policies,
//! the cluster's pods and the namespaces' labels, as plain text per chain (the rules written
//! exactly as `iptables-save` prints them back, so the kernel's chains can be compared with
//! the wanted ones).
//!
//! ```text
//! FORWARD -> SKIFF-FORWARD (the pod network's) -> first: SKIFF-NETPOL
//!   SKIFF-NETPOL: established and related packets return at once; the allow mark is
//!                 cleared;
//!                 -s <pod>/32 -> SKIFF-NP-E-<pod>   per local pod isolated for egress
//!                 the mark cleared again;
//!                 -d <pod>/32 -> SKIFF-NP-I-<pod>   per local pod isolated for ingress
//!                 last: the mark cleared
//!   SKIFF-NP-I-<pod> (and -E-): per policy that selects the pod for that direction:
//!                 -> SKIFF-NP-PI-<policy> (-PE-); last: DROP unless one set the mark
//!   SKIFF-NP-PI-<policy>: per rule, peer and port: sets the allow mark (0x10000)
//!   SKIFF-NP-PE-<policy>: the same for the policy's egress rules
//! ```
//!
//! A policy's chains are shared by every local pod it selects; only policies that select a
//! pod of this node have chains here. Ingress is checked on the destination pod's node and
//! egress on the source pod's, so traffic between nodes is filtered once at each end. Only
//! forwarded traffic passes: the node's own traffic to its pods (probes, the node's DNS
//! answers, the ingress proxy to local pods) and the pods' traffic to their node (the node's
//! DNS server on the bridge address) are never filtered, as Kubernetes wants for the node a
//! pod runs on.
//!
//! Peers: a podSelector's pods in the policy's namespace, a namespaceSelector's namespaces'
//! pods, both together, each pod by its address; an ipBlock as its CIDR minus its excepts,
//! cut into the prefixes that remain (IPv6 blocks match nothing: the pod network is IPv4).
//! Ports: a number, a range (`endPort`), a protocol alone, or a named port, resolved on the
//! destination pod (the selected pod for ingress, each destination pod for egress).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use api::cidr::Ipv4Cidr;
use api::core::Pod;
use api::meta::{IntOrString, LabelSelector};
use api::networking::{IpCidr, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use api::selector::Selector;

/// The chain the pod network's SKIFF-FORWARD jumps to first.
pub const TOP_CHAIN: &str = "SKIFF-NETPOL";
/// Every other chain of the enforcer starts with this.
pub const CHAIN_PREFIX: &str = "SKIFF-NP-";
/// The packet mark bit a policy chain sets on traffic it allows.
pub const ALLOW_MARK: &str = "0x10000";

/// Whether `chain` (of the filter table) is the enforcer's: it may flush and delete it.
pub fn owned_chain(chain: &str) -> bool {
    chain == TOP_CHAIN || chain.starts_with(CHAIN_PREFIX)
}

/// The wanted contents of every owned chain: chain -> rules (each the text after
/// `-A CHAIN `), in order.
pub type Chains = BTreeMap<String, Vec<String>>;

/// A container port with a name, which policies may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub port: u16,
}

/// What the enforcer keeps of a pod: a pod on the pod network with an address, not finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub ip: Ipv4Addr,
    pub labels: BTreeMap<String, String>,
    pub named_ports: Vec<NamedPort>,
}

impl PodInfo {
    /// None for a pod that holds no address of the pod network: not yet started, on the
    /// host's network, or finished (its address may already be another pod's).
    pub fn of(pod: &Pod) -> Option<PodInfo> {
        if pod.spec.host_network == Some(true)
            || matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed"))
        {
            return None;
        }
        let ip = pod.status.pod_ip.as_deref()?.parse().ok()?;
        let named_ports = pod
            .spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone().filter(|n| !n.is_empty())?,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    port: u16::try_from(p.container_port).ok().filter(|n| *n > 0)?,
                })
            })
            .collect();
        Some(PodInfo {
            namespace: pod.metadata.namespace().to_string(),
            name: pod.metadata.name.clone(),
            node: pod.spec.node_name.clone().unwrap_or_default(),
            ip,
            labels: pod.metadata.labels.clone(),
            named_ports,
        })
    }

    fn port_named(&self, name: &str, protocol: &str) -> Option<u16> {
        self.named_ports
            .iter()
            .find(|p| p.name == name && p.protocol.eq_ignore_ascii_case(protocol))
            .map(|p| p.port)
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What the rules are built from.
pub struct Inputs<'a> {
    /// This node's name: only its pods get chains.
    pub node: &'a str,
    /// The cluster's pods ([`PodInfo::of`]).
    pub pods: &'a [PodInfo],
    /// Namespace name -> its labels.
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub policies: &'a [NetworkPolicy],
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

/// `SKIFF-NP-` + kind + a hash of `key` (27 characters in all; iptables allows 28).
fn chain_name(kind: &str, key: &str) -> String {
    let chars = 27 - CHAIN_PREFIX.len() - kind.len() - 1;
    format!(
        "{CHAIN_PREFIX}{kind}-{}",
        crate::proxy::rules::hash(key, chars)
    )
}

/// The chain of a pod's ingress (`I`) or egress (`E`) checks.
fn pod_chain(pod: &PodInfo, dir: Direction) -> String {
    match dir {
        Direction::Ingress => chain_name("I", &pod.key()),
        Direction::Egress => chain_name("E", &pod.key()),
    }
}

/// The chain of a policy's ingress (`PI`) or egress (`PE`) rules.
fn policy_chain(ns: &str, name: &str, dir: Direction) -> String {
    let key = format!("{ns}/{name}");
    match dir {
        Direction::Ingress => chain_name("PI", &key),
        Direction::Egress => chain_name("PE", &key),
    }
}

fn selector(sel: &LabelSelector) -> Option<Selector> {
    // An invalid selector (validation refuses them) selects nothing.
    Selector::from_label_selector(sel).ok()
}

/// The pods and namespaces, indexed.
struct Cluster<'a> {
    by_namespace: BTreeMap<&'a str, Vec<&'a PodInfo>>,
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    pods: &'a [PodInfo],
}

impl<'a> Cluster<'a> {
    fn pods_in(&self, ns: &str) -> &[&'a PodInfo] {
        self.by_namespace.get(ns).map_or(&[], Vec::as_slice)
    }

    /// The namespaces `sel` selects, by their labels (a namespace known only from its pods
    /// has none).
    fn namespaces_matching(&self, sel: &Selector) -> Vec<&'a str> {
        let none = BTreeMap::new();
        self.by_namespace
            .keys()
            .copied()
            .filter(|ns| sel.matches(self.namespaces.get(*ns).unwrap_or(&none)))
            .collect()
    }

    /// The pods a peer with selectors selects (none for an ipBlock peer).
    fn peer_pods(&self, policy_ns: &str, peer: &NetworkPolicyPeer) -> Vec<&'a PodInfo> {
        let pod_sel = match &peer.pod_selector {
            Some(s) => match selector(s) {
                Some(s) => Some(s),
                None => return Vec::new(),
            },
            None => None,
        };
        let namespaces = match &peer.namespace_selector {
            Some(s) => match selector(s) {
                Some(s) => self.namespaces_matching(&s),
                None => return Vec::new(),
            },
            None if pod_sel.is_some() => vec![policy_ns],
            None => return Vec::new(),
        };
        namespaces
            .into_iter()
            .flat_map(|ns| self.pods_in(ns).iter().copied())
            .filter(|p| pod_sel.as_ref().is_none_or(|s| s.matches(&p.labels)))
            .collect()
    }
}

/// A CIDR as iptables prints it in `-s`/`-d` (`/32` included); None for `0.0.0.0/0`, which
/// iptables leaves out.
fn net_text(c: &Ipv4Cidr) -> Option<String> {
    (c.prefix() > 0).then(|| c.to_string())
}

/// The two halves of a block (prefix < 32).
fn halves(c: Ipv4Cidr) -> [Ipv4Cidr; 2] {
    let p = c.prefix() + 1;
    let lo = Ipv4Cidr::new(c.network(), p).expect("prefix <= 32");
    let hi_addr = Ipv4Addr::from(u32::from(c.network()) | (1u32 << (32 - u32::from(p))));
    let hi = Ipv4Cidr::new(hi_addr, p).expect("prefix <= 32");
    [lo, hi]
}

/// `block` without the `excepts`, as the fewest prefixes that cover what remains.
pub fn subtract(block: Ipv4Cidr, excepts: &[Ipv4Cidr]) -> Vec<Ipv4Cidr> {
    let mut out = vec![block];
    for e in excepts {
        let mut next = Vec::new();
        for c in out {
            if e.contains_cidr(&c) {
                continue;
            }
            if !c.contains_cidr(e) {
                next.push(c);
                continue;
            }
            // `c` strictly holds `e`: keep the half without it, cut the other again.
            let mut rest = c;
            while rest != *e {
                let [lo, hi] = halves(rest);
                if lo.contains_cidr(e) {
                    next.push(hi);
                    rest = lo;
                } else {
                    next.push(lo);
                    rest = hi;
                }
            }
        }
        out = next;
    }
    out.sort();
    out
}

/// The IPv4 prefixes of an ipBlock (nothing for an IPv6 or malformed one).
fn block_prefixes(block: &api::networking::IPBlock) -> Vec<Ipv4Cidr> {
    let Some(cidr) = IpCidr::parse(&block.cidr).and_then(|c| c.v4()) else {
        return Vec::new();
    };
    let excepts: Vec<Ipv4Cidr> = block
        .except
        .iter()
        .filter_map(|e| IpCidr::parse(e).and_then(|c| c.v4()))
        .collect();
    subtract(cidr, &excepts)
}

/// The peers of one rule: any address, or these networks and these pods.
struct Peers<'a> {
    any: bool,
    nets: BTreeSet<Ipv4Cidr>,
    pods: Vec<&'a PodInfo>,
}

impl<'a> Peers<'a> {
    fn of(cluster: &Cluster<'a>, policy_ns: &str, peers: &[NetworkPolicyPeer]) -> Peers<'a> {
        let mut out = Peers {
            any: peers.is_empty(),
            nets: BTreeSet::new(),
            pods: Vec::new(),
        };
        for peer in peers {
            if let Some(block) = &peer.ip_block {
                out.nets.extend(block_prefixes(block));
            } else {
                out.pods.extend(cluster.peer_pods(policy_ns, peer));
            }
        }
        if out.nets.iter().any(|n| n.prefix() == 0) {
            out.any = true;
        }
        out
    }

    /// Each peer as the text of an address match (`-s X` or `-d X`), sorted; `[""]` for any.
    fn matches(&self, flag: &str) -> Vec<String> {
        if self.any {
            return vec![String::new()];
        }
        let mut nets: BTreeSet<Ipv4Cidr> = self.nets.clone();
        nets.extend(
            self.pods
                .iter()
                .filter_map(|p| Ipv4Cidr::new(p.ip, 32).ok()),
        );
        nets.iter()
            .filter_map(net_text)
            .map(|n| format!("{flag} {n} "))
            .collect()
    }

    /// The pods among the peers' addresses: for named ports, which live on pods. Any
    /// address holds every pod; a network holds the pods whose address is inside it.
    fn pods_for_named_ports(&self, cluster: &Cluster<'a>) -> Vec<&'a PodInfo> {
        let mut out: Vec<&PodInfo> = if self.any {
            cluster.pods.iter().collect()
        } else {
            let mut v = self.pods.clone();
            v.extend(
                cluster
                    .pods
                    .iter()
                    .filter(|p| self.nets.iter().any(|n| n.contains(p.ip))),
            );
            v
        };
        out.sort_by_key(|p| p.ip);
        out.dedup_by_key(|p| p.ip);
        out
    }
}

/// A port of a rule.
enum PortMatch {
    /// Every port of every protocol (a rule without ports).
    All,
    /// Every port of one protocol (lower case).
    Protocol(String),
    /// A port or a range of one protocol.
    Range(String, u16, u16),
    /// A named port of one protocol: the destination pod's.
    Named(String, String),
}

impl PortMatch {
    fn of(ports: &[NetworkPolicyPort]) -> Vec<PortMatch> {
        if ports.is_empty() {
            return vec![PortMatch::All];
        }
        ports
            .iter()
            .filter_map(|p| {
                let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
                Some(match &p.port {
                    None => PortMatch::Protocol(proto),
                    Some(IntOrString::Int(n)) => {
                        let first = u16::try_from(*n).ok().filter(|n| *n > 0)?;
                        let last = match p.end_port {
                            Some(e) => u16::try_from(e).ok().filter(|e| *e >= first)?,
                            None => first,
                        };
                        PortMatch::Range(proto, first, last)
                    }
                    Some(IntOrString::String(name)) => PortMatch::Named(proto, name.clone()),
                })
            })
            .collect()
    }
}

/// `-p tcp -m tcp --dport N` (or `N:M`), as iptables prints it.
fn dport(proto: &str, first: u16, last: u16) -> String {
    if first == last {
        format!("-p {proto} -m {proto} --dport {first} ")
    } else {
        format!("-p {proto} -m {proto} --dport {first}:{last} ")
    }
}

fn allow(matches: &str) -> String {
    format!("{matches}-j MARK --set-xmark {ALLOW_MARK}/{ALLOW_MARK}")
}

/// The rules of one policy chain: a rule per allowed (peer, port) pair.
fn policy_rules(
    cluster: &Cluster<'_>,
    policy: &NetworkPolicy,
    dir: Direction,
    selected: &[&PodInfo],
) -> Vec<String> {
    let ns = policy.metadata.namespace();
    let rules: Vec<(&[NetworkPolicyPort], &[NetworkPolicyPeer])> = match dir {
        Direction::Ingress => policy
            .spec
            .ingress
            .iter()
            .map(|r| (r.ports.as_slice(), r.from.as_slice()))
            .collect(),
        Direction::Egress => policy
            .spec
            .egress
            .iter()
            .map(|r| (r.ports.as_slice(), r.to.as_slice()))
            .collect(),
    };
    let peer_flag = match dir {
        Direction::Ingress => "-s",
        Direction::Egress => "-d",
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |rule: String| {
        if seen.insert(rule.clone()) {
            out.push(rule);
        }
    };
    for (ports, peers) in rules {
        let peers = Peers::of(cluster, ns, peers);
        let addresses = peers.matches(peer_flag);
        for port in PortMatch::of(ports) {
            match &port {
                PortMatch::All => {
                    for a in &addresses {
                        push(allow(a));
                    }
                }
                PortMatch::Protocol(proto) => {
                    for a in &addresses {
                        push(allow(&format!("{a}-p {proto} ")));
                    }
                }
                PortMatch::Range(proto, first, last) => {
                    for a in &addresses {
                        push(allow(&format!("{a}{}", dport(proto, *first, *last))));
                    }
                }
                PortMatch::Named(proto, name) => match dir {
                    // The selected pod's own port of that name: per pod, with its address.
                    Direction::Ingress => {
                        for pod in selected {
                            let Some(n) = pod.port_named(name, proto) else {
                                continue;
                            };
                            for a in &addresses {
                                push(allow(&format!(
                                    "{a}-d {}/32 {}",
                                    pod.ip,
                                    dport(proto, n, n)
                                )));
                            }
                        }
                    }
                    // Each destination pod's port of that name.
                    Direction::Egress => {
                        for pod in peers.pods_for_named_ports(cluster) {
                            let Some(n) = pod.port_named(name, proto) else {
                                continue;
                            };
                            push(allow(&format!("-d {}/32 {}", pod.ip, dport(proto, n, n))));
                        }
                    }
                },
            }
        }
    }
    out
}

/// A rule's comment: iptables keeps 255 bytes at most (a pod's name alone may have 253).
fn comment(text: &str) -> &str {
    let mut end = text.len().min(255);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Builds every owned chain.
pub fn build(inputs: &Inputs<'_>) -> Chains {
    let mut by_namespace: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
    for p in inputs.pods {
        by_namespace
            .entry(p.namespace.as_str())
            .or_default()
            .push(p);
    }
    // Namespaces without pods still count for selection (they add no peers).
    for ns in inputs.namespaces.keys() {
        by_namespace.entry(ns.as_str()).or_default();
    }
    let cluster = Cluster {
        by_namespace,
        namespaces: inputs.namespaces,
        pods: inputs.pods,
    };
    let mut chains = Chains::new();
    chains.insert(TOP_CHAIN.to_string(), Vec::new());
    // Local pod (by address) -> the policy chains that apply to it, per direction.
    let mut isolated: BTreeMap<(Ipv4Addr, String), [BTreeSet<String>; 2]> = BTreeMap::new();
    let mut local: BTreeMap<(Ipv4Addr, String), &PodInfo> = BTreeMap::new();
    let mut policies: Vec<&NetworkPolicy> = inputs.policies.iter().collect();
    policies.sort_by(|a, b| {
        (a.metadata.namespace(), &a.metadata.name).cmp(&(b.metadata.namespace(), &b.metadata.name))
    });
    for policy in policies {
        let ns = policy.metadata.namespace();
        let Some(sel) = selector(&policy.spec.pod_selector) else {
            continue;
        };
        let selected: Vec<&PodInfo> = cluster
            .pods_in(ns)
            .iter()
            .copied()
            .filter(|p| p.node == inputs.node && sel.matches(&p.labels))
            .collect();
        if selected.is_empty() {
            continue;
        }
        for (dir, applies) in [
            (Direction::Ingress, policy.affects_ingress()),
            (Direction::Egress, policy.affects_egress()),
        ] {
            if !applies {
                continue;
            }
            let chain = policy_chain(ns, &policy.metadata.name, dir);
            chains.insert(
                chain.clone(),
                policy_rules(&cluster, policy, dir, &selected),
            );
            for p in &selected {
                let key = (p.ip, p.key());
                local.insert(key.clone(), p);
                let slot = usize::from(dir == Direction::Egress);
                isolated.entry(key).or_default()[slot].insert(chain.clone());
            }
        }
    }
    if isolated.is_empty() {
        return chains;
    }
    let clear = format!("-j MARK --set-xmark 0x0/{ALLOW_MARK}");
    let mut top = vec![
        "-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN".to_string(),
        clear.clone(),
    ];
    let mut ingress_jumps = Vec::new();
    for (key, [ingress, egress]) in &isolated {
        let pod = local[key];
        for (dir, policy_chains) in [(Direction::Egress, egress), (Direction::Ingress, ingress)] {
            if policy_chains.is_empty() {
                continue;
            }
            let chain = pod_chain(pod, dir);
            let (what, flag) = match dir {
                Direction::Ingress => ("ingress", "-d"),
                Direction::Egress => ("egress", "-s"),
            };
            let mut rules: Vec<String> =
                policy_chains.iter().map(|pc| format!("-j {pc}")).collect();
            rules.push(format!(
                "-m mark ! --mark {ALLOW_MARK}/{ALLOW_MARK} -m comment --comment \"{}\" -j DROP",
                comment(&format!(
                    "{} {what} not allowed by any NetworkPolicy",
                    pod.key()
                ))
            ));
            chains.insert(chain.clone(), rules);
            let jump = format!(
                "{flag} {}/32 -m comment --comment \"{}\" -j {chain}",
                pod.ip,
                comment(&format!("{} {what}", pod.key()))
            );
            // Egress checks first: a packet between two local pods passes both.
            match dir {
                Direction::Egress => top.push(jump),
                Direction::Ingress => ingress_jumps.push(jump),
            }
        }
    }
    // The mark an egress check left is cleared before the ingress checks, and at the end.
    top.push(clear.clone());
    top.extend(ingress_jumps);
    top.push(clear);
    chains.insert(TOP_CHAIN.to_string(), top);
    chains
}

/// The `iptables-restore --noflush` input that moves the kernel's owned chains from
/// `current` to `desired`: changed and new chains are declared (which flushes them) and
/// filled, chains no longer wanted are flushed and deleted, unchanged chains are not
/// mentioned. Empty when nothing changes.
pub fn restore_input(desired: &Chains, current: &Chains) -> String {
    let changed: Vec<(&String, &Vec<String>)> = desired
        .iter()
        .filter(|(c, rules)| current.get(*c) != Some(*rules))
        .collect();
    let stale: Vec<&String> = current
        .keys()
        .filter(|c| !desired.contains_key(*c))
        .collect();
    if changed.is_empty() && stale.is_empty() {
        return String::new();
    }
    let mut out = String::from("*filter\n");
    // Every chain is declared before any rule names it.
    for (c, _) in &changed {
        out.push_str(&format!(":{c} - [0:0]\n"));
    }
    for c in &stale {
        out.push_str(&format!(":{c} - [0:0]\n"));
    }
    for (c, rules) in &changed {
        for r in *rules {
            out.push_str(&format!("-A {c} {r}\n"));
        }
    }
    for c in &stale {
        out.push_str(&format!("-X {c}\n"));
    }
    out.push_str("COMMIT\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "n1";

    fn pod(ns: &str, name: &str, node: &str, ip: &str, labels: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            namespace: ns.into(),
            name: name.into(),
            node: node.into(),
            ip: ip.parse().unwrap(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            named_ports: Vec::new(),
        }
    }

    fn policy(ns: &str, name: &str, spec: serde_json::Value) -> NetworkPolicy {
        let mut p: NetworkPolicy = api::codec::from_json(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns}, "spec": spec,
        }))
        .expect("a policy");
        api::object::Resource::set_defaults(&mut p);
        p
    }

    fn namespaces(list: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, BTreeMap<String, String>> {
        list.iter()
            .map(|(ns, labels)| {
                let mut l: BTreeMap<String, String> = labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                l.insert("kubernetes.io/metadata.name".into(), ns.to_string());
                (ns.to_string(), l)
            })
            .collect()
    }

    fn build_with(
        pods: &[PodInfo],
        ns: &BTreeMap<String, BTreeMap<String, String>>,
        policies: &[NetworkPolicy],
    ) -> Chains {
        build(&Inputs {
            node: NODE,
            pods,
            namespaces: ns,
            policies,
        })
    }

    fn cluster() -> (Vec<PodInfo>, BTreeMap<String, BTreeMap<String, String>>) {
        let pods = vec![
            pod("a", "web", NODE, "10.42.0.10", &[("app", "web")]),
            pod("a", "client", "n2", "10.42.1.20", &[("app", "client")]),
            pod("a", "other", NODE, "10.42.0.11", &[("app", "other")]),
            pod("b", "client", "n2", "10.42.1.21", &[("app", "client")]),
            pod("c", "client", NODE, "10.42.0.12", &[("app", "client")]),
        ];
        let ns = namespaces(&[("a", &[]), ("b", &[("team", "blue")]), ("c", &[])]);
        (pods, ns)
    }

    fn allow_rules(chains: &Chains, ns: &str, name: &str, dir: Direction) -> Vec<String> {
        chains
            .get(&policy_chain(ns, name, dir))
            .unwrap_or_else(|| panic!("no chain for {ns}/{name} in {chains:#?}"))
            .iter()
            .map(|r| {
                r.strip_suffix("-j MARK --set-xmark 0x10000/0x10000")
                    .unwrap_or_else(|| panic!("{r}"))
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn without_policies_only_the_empty_top_chain() {
        let (pods, ns) = cluster();
        let chains = build_with(&pods, &ns, &[]);
        assert_eq!(chains.len(), 1);
        assert!(chains[TOP_CHAIN].is_empty());
    }

    #[test]
    fn default_deny_ingress_isolates_the_local_pods_of_its_namespace() {
        let (pods, ns) = cluster();
        let deny = policy(
            "a",
            "default-deny-ingress",
            serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        );
        let chains = build_with(&pods, &ns, &[deny]);
        // The two local pods of `a` (not the remote one, not `c`'s).
        let web_in = pod_chain(&pods[0], Direction::Ingress);
        let other_in = pod_chain(&pods[2], Direction::Ingress);
        let pc = policy_chain("a", "default-deny-ingress", Direction::Ingress);
        assert_eq!(chains.len(), 4, "{chains:#?}");
        assert!(chains[&pc].is_empty(), "no rule allows anything");
        assert_eq!(
            chains[TOP_CHAIN],
            [
                "-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN".to_string(),
                "-j MARK --set-xmark 0x0/0x10000".to_string(),
                "-j MARK --set-xmark 0x0/0x10000".to_string(),
                format!("-d 10.42.0.10/32 -m comment --comment \"a/web ingress\" -j {web_in}"),
                format!("-d 10.42.0.11/32 -m comment --comment \"a/other ingress\" -j {other_in}"),
                "-j MARK --set-xmark 0x0/0x10000".to_string(),
            ]
        );
        assert_eq!(
            chains[&web_in],
            [
                format!("-j {pc}"),
                "-m mark ! --mark 0x10000/0x10000 -m comment --comment \"a/web ingress not allowed by any NetworkPolicy\" -j DROP"
                    .to_string(),
            ]
        );
        // Names fit iptables' 28 characters.
        assert!(chains.keys().all(|c| c.len() <= 28 && owned_chain(c)));
    }

    #[test]
    fn pod_and_namespace_selectors_alone_and_together() {
        let (pods, ns) = cluster();
        let p = policy(
            "a",
            "allow",
            serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]},
                {"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}]},
                {"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "client"}}}]},
                {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "c"}},
                           "podSelector": {"matchLabels": {"app": "nobody"}}}]},
            ]}),
        );
        let chains = build_with(&pods, &ns, &[p]);
        assert_eq!(
            allow_rules(&chains, "a", "allow", Direction::Ingress),
            [
                // The podSelector alone: a's client only.
                "-s 10.42.1.20/32",
                // The namespaceSelector alone: every pod of b.
                "-s 10.42.1.21/32",
                // Both: the clients of every namespace (a's and b's already allowed).
                "-s 10.42.0.12/32",
            ]
        );
        // Only web is isolated; `other` is not.
        assert!(chains[TOP_CHAIN].iter().all(|r| !r.contains("10.42.0.11")));
    }

    #[test]
    fn ip_blocks_ports_ranges_and_named_ports() {
        let (mut pods, ns) = cluster();
        pods[0].named_ports = vec![NamedPort {
            name: "http".into(),
            protocol: "TCP".into(),
            port: 8080,
        }];
        pods[1].named_ports = vec![NamedPort {
            name: "dns".into(),
            protocol: "UDP".into(),
            port: 5353,
        }];
        let p = policy(
            "a",
            "web",
            serde_json::json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{
                "from": [{"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.1.0/24", "192.168.128.0/17"]}}],
                "ports": [{"port": 80}, {"port": 9000, "endPort": 9010, "protocol": "UDP"},
                          {"protocol": "SCTP"}, {"port": "http"}, {"port": "nope"}],
            }],
            "egress": [
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]},
                {"ports": [{"port": "dns", "protocol": "UDP"}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443}]},
            ]}),
        );
        let chains = build_with(&pods, &ns, &[p]);
        let blocks = [
            "192.168.0.0/24",
            "192.168.2.0/23",
            "192.168.4.0/22",
            "192.168.8.0/21",
            "192.168.16.0/20",
            "192.168.32.0/19",
            "192.168.64.0/18",
        ];
        let mut want = Vec::new();
        for b in blocks {
            want.push(format!("-s {b} -p tcp -m tcp --dport 80"));
        }
        for b in blocks {
            want.push(format!("-s {b} -p udp -m udp --dport 9000:9010"));
        }
        for b in blocks {
            want.push(format!("-s {b} -p sctp"));
        }
        // The named port: web's own http port, with web's address.
        for b in blocks {
            want.push(format!(
                "-s {b} -d 10.42.0.10/32 -p tcp -m tcp --dport 8080"
            ));
        }
        assert_eq!(allow_rules(&chains, "a", "web", Direction::Ingress), want);
        let egress = allow_rules(&chains, "a", "web", Direction::Egress);
        assert_eq!(
            egress,
            [
                "-d 0.0.0.0/5",
                "-d 8.0.0.0/7",
                "-d 11.0.0.0/8",
                "-d 12.0.0.0/6",
                "-d 16.0.0.0/4",
                "-d 32.0.0.0/3",
                "-d 64.0.0.0/2",
                "-d 128.0.0.0/1",
                // Any destination's port named dns (UDP): the one pod that has it.
                "-d 10.42.1.20/32 -p udp -m udp --dport 5353",
                // 0.0.0.0/0 is any address: iptables prints no -d.
                "-p tcp -m tcp --dport 443",
            ]
        );
        let top = &chains[TOP_CHAIN];
        assert!(
            top[2].starts_with("-s 10.42.0.10/32 "),
            "egress first: {top:#?}"
        );
        assert!(top[4].starts_with("-d 10.42.0.10/32 "), "{top:#?}");
    }

    #[test]
    fn an_empty_rule_allows_everything_and_remote_pods_get_no_chains() {
        let (pods, ns) = cluster();
        let all = policy(
            "a",
            "allow-all",
            serde_json::json!({"podSelector": {}, "ingress": [{}], "egress": [{}]}),
        );
        let remote = policy(
            "b",
            "deny",
            serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        );
        let chains = build_with(&pods, &ns, &[all, remote]);
        assert_eq!(
            allow_rules(&chains, "a", "allow-all", Direction::Ingress),
            [""]
        );
        assert_eq!(
            allow_rules(&chains, "a", "allow-all", Direction::Egress),
            [""]
        );
        assert!(!chains.contains_key(&policy_chain("b", "deny", Direction::Ingress)));
        // Two local pods, each isolated both ways: 4 pod chains, 2 policy chains, the top.
        assert_eq!(chains.len(), 7, "{chains:#?}");
    }

    #[test]
    fn comments_fit_iptables_for_the_longest_names() {
        let long = "x".repeat(253);
        let pods = vec![pod("a", &long, NODE, "10.42.0.10", &[])];
        let ns = namespaces(&[("a", &[])]);
        let deny = policy("a", "deny", serde_json::json!({"podSelector": {}}));
        let chains = build_with(&pods, &ns, &[deny]);
        for rule in chains.values().flatten() {
            if let Some((_, rest)) = rule.split_once("--comment \"") {
                let text = rest.split('"').next().unwrap();
                assert!(text.len() <= 255, "{} bytes", text.len());
            }
        }
        assert_eq!(comment("short"), "short");
    }

    #[test]
    fn pods_off_the_pod_network_are_left_out() {
        let mut p = Pod::default();
        p.metadata.name = "x".into();
        p.metadata.namespace = Some("a".into());
        assert!(PodInfo::of(&p).is_none(), "no address yet");
        p.status.pod_ip = Some("10.42.0.5".into());
        p.spec.containers = vec![api::core::Container {
            name: "c".into(),
            ports: vec![api::core::ContainerPort {
                name: Some("http".into()),
                container_port: 80,
                ..Default::default()
            }],
            ..Default::default()
        }];
        let info = PodInfo::of(&p).expect("a pod with an address");
        assert_eq!(info.port_named("http", "tcp"), Some(80));
        assert_eq!(info.port_named("http", "UDP"), None);
        p.status.phase = Some("Succeeded".into());
        assert!(PodInfo::of(&p).is_none(), "finished");
        p.status.phase = Some("Running".into());
        p.spec.host_network = Some(true);
        assert!(PodInfo::of(&p).is_none(), "on the host's network");
    }

    #[test]
    fn subtracting_excepts_leaves_exactly_the_rest() {
        let c = |s: &str| s.parse::<Ipv4Cidr>().unwrap();
        assert_eq!(subtract(c("10.0.0.0/8"), &[]), [c("10.0.0.0/8")]);
        let rest = subtract(c("10.0.0.0/8"), &[c("10.1.0.0/16"), c("10.200.3.0/24")]);
        // Every address of a sample is covered by the rest exactly when it is not excepted.
        for a in [
            "10.0.0.1",
            "10.1.0.1",
            "10.1.255.255",
            "10.2.0.0",
            "10.200.3.9",
            "10.200.4.1",
            "10.255.255.255",
            "11.0.0.0",
        ] {
            let a: Ipv4Addr = a.parse().unwrap();
            let covered = rest.iter().filter(|r| r.contains(a)).count();
            let want = c("10.0.0.0/8").contains(a)
                && !c("10.1.0.0/16").contains(a)
                && !c("10.200.3.0/24").contains(a);
            assert_eq!(covered, usize::from(want), "{a} in {rest:?}");
        }
        let size: u64 = rest.iter().map(Ipv4Cidr::size).sum();
        assert_eq!(size, (1 << 24) - (1 << 16) - (1 << 8));
        assert!(subtract(c("10.0.0.0/8"), &[c("10.0.0.0/8")]).is_empty());
    }

    #[test]
    fn restore_input_writes_changes_and_removes_stale_chains() {
        let mut current = Chains::new();
        current.insert(TOP_CHAIN.into(), vec!["-j SKIFF-NP-I-OLD".into()]);
        current.insert("SKIFF-NP-I-OLD".into(), vec!["-j DROP".into()]);
        current.insert("SKIFF-NP-I-SAME".into(), vec!["-j DROP".into()]);
        let mut desired = Chains::new();
        desired.insert(TOP_CHAIN.into(), vec!["-j SKIFF-NP-I-SAME".into()]);
        desired.insert("SKIFF-NP-I-SAME".into(), vec!["-j DROP".into()]);
        assert_eq!(
            restore_input(&desired, &current),
            "*filter\n:SKIFF-NETPOL - [0:0]\n:SKIFF-NP-I-OLD - [0:0]\n-A SKIFF-NETPOL -j SKIFF-NP-I-SAME\n-X SKIFF-NP-I-OLD\nCOMMIT\n"
        );
        assert_eq!(restore_input(&desired, &desired), "");
    }
}
