//! The rules the service proxy wants, built from Services and Endpoints as plain text per
//! chain (the model is Kubernetes' iptables proxier):
//!
//! ```text
//! nat PREROUTING, OUTPUT -> SKIFF-SERVICES
//!   SKIFF-SERVICES: per ClusterIP port with endpoints -> SKIFF-SVC-<hash>;
//!                   last: local destinations -> SKIFF-NODEPORTS
//!   SKIFF-NODEPORTS: per NodePort: mark for masquerade, then -> SKIFF-SVC-<hash>;
//!                    per LoadBalancer port this node serves: the same, matching the
//!                    node's address and the Service's own port
//!   SKIFF-SVC-<hash>: off-cluster sources marked; (ClientIP affinity: recent checks);
//!                     statistic 1/n, 1/(n-1), ..., last unconditional -> SKIFF-SVC-<hash>-<ep>
//!   SKIFF-SVC-<hash>-<ep>: (one per endpoint) hairpin marked; DNAT to the endpoint
//!   SKIFF-MARK-MASQ: sets the 0x4000 mark
//! nat POSTROUTING -> SKIFF-POSTROUTING-SVC: masquerades marked packets
//! filter INPUT, FORWARD, OUTPUT (new connections) -> SKIFF-SERVICES-REJECT:
//!   REJECT for ports of Services with no ready endpoint (refused at once, not hung)
//! ```
//!
//! Rules are written exactly as `iptables-save` prints them back, so what is in the kernel can
//! be compared with what is wanted, chain by chain.
//!
//! Endpoint chains are named after their Service chain (`SKIFF-SVC-<hash>-<ep>`), so a Service's
//! chains sort next to each other. [`restore_input`] writes chains in descending name order
//! (endpoint chains before the Service chain that jumps to them): iptables-nft (1.8.x) keeps the
//! chain names an input mentions in a sorted list it walks from the front for every rule, and in
//! this order the names a rule mentions are always near that front. With 4,000 chains in random
//! order that walk was half of the time of a full `iptables-restore`.

use std::collections::BTreeMap;

use api::core::{Endpoints, Service};

/// The nat chain every service packet passes (from PREROUTING and OUTPUT).
pub const SERVICES_CHAIN: &str = "SKIFF-SERVICES";
pub const NODEPORTS_CHAIN: &str = "SKIFF-NODEPORTS";
pub const MARK_MASQ_CHAIN: &str = "SKIFF-MARK-MASQ";
pub const POSTROUTING_CHAIN: &str = "SKIFF-POSTROUTING-SVC";
/// The filter chain that refuses connections to Services without endpoints.
pub const REJECT_CHAIN: &str = "SKIFF-SERVICES-REJECT";
/// Service chains, `SKIFF-SVC-<10 chars>`, and their endpoint chains, `SKIFF-SVC-<10>-<7>`.
pub const SVC_PREFIX: &str = "SKIFF-SVC-";
/// Endpoint chains of earlier skiff versions: still owned, so they are cleaned up.
pub const SEP_PREFIX: &str = "SKIFF-SEP-";
/// The mark of packets to masquerade.
pub const MASQ_MARK: &str = "0x4000";

/// The builtin-chain rules that lead into skiff's chains: (table, builtin chain, rule).
pub const JUMPS: &[(Table, &str, &str)] = &[
    (
        Table::Nat,
        "PREROUTING",
        "-m comment --comment \"skiff service portals\" -j SKIFF-SERVICES",
    ),
    (
        Table::Nat,
        "OUTPUT",
        "-m comment --comment \"skiff service portals\" -j SKIFF-SERVICES",
    ),
    (
        Table::Nat,
        "POSTROUTING",
        "-m comment --comment \"skiff service masquerade\" -j SKIFF-POSTROUTING-SVC",
    ),
    (
        Table::Filter,
        "INPUT",
        "-m conntrack --ctstate NEW -m comment --comment \"skiff services without endpoints\" -j SKIFF-SERVICES-REJECT",
    ),
    (
        Table::Filter,
        "FORWARD",
        "-m conntrack --ctstate NEW -m comment --comment \"skiff services without endpoints\" -j SKIFF-SERVICES-REJECT",
    ),
    (
        Table::Filter,
        "OUTPUT",
        "-m conntrack --ctstate NEW -m comment --comment \"skiff services without endpoints\" -j SKIFF-SERVICES-REJECT",
    ),
];

/// The iptables tables the proxy writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Nat,
    Filter,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Nat => "nat",
            Table::Filter => "filter",
        }
    }
}

/// Whether `chain` is one the proxy owns (it may flush and delete it).
pub fn owned_chain(table: Table, chain: &str) -> bool {
    match table {
        Table::Nat => {
            chain.starts_with(SVC_PREFIX)
                || chain.starts_with(SEP_PREFIX)
                || [
                    SERVICES_CHAIN,
                    NODEPORTS_CHAIN,
                    MARK_MASQ_CHAIN,
                    POSTROUTING_CHAIN,
                ]
                .contains(&chain)
        }
        Table::Filter => chain == REJECT_CHAIN,
    }
}

/// Settings of rule generation.
#[derive(Clone, Debug)]
pub struct RuleConfig {
    /// The pod network (`--cluster-cidr`); traffic to a ClusterIP from outside it is
    /// masqueraded so replies come back through this node.
    pub cluster_cidr: Option<String>,
    /// The Service range (the server's `--service-cidr`): a new connection to an address in
    /// it that no rule took (an unallocated ClusterIP, or a port the Service does not have)
    /// is refused on this node instead of following the default route off it.
    pub service_cidr: Option<String>,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            cluster_cidr: Some("10.42.0.0/16".into()),
            service_cidr: None,
        }
    }
}

/// The wanted contents of every owned chain, per table: chain -> rules (each the text after
/// `-A CHAIN `), in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    pub chains: BTreeMap<(Table, String), Vec<String>>,
}

impl Ruleset {
    pub fn chain(&self, table: Table, name: &str) -> Option<&Vec<String>> {
        self.chains.get(&(table, name.to_string()))
    }

    /// How many rules in all.
    pub fn rule_count(&self) -> usize {
        self.chains.values().map(Vec::len).sum()
    }

    fn push(&mut self, table: Table, chain: &str, rule: String) {
        self.chains
            .entry((table, chain.to_string()))
            .or_default()
            .push(rule);
    }

    fn declare(&mut self, table: Table, chain: &str) {
        self.chains.entry((table, chain.to_string())).or_default();
    }
}

/// RFC 4648 base32 of the first bytes of `data`, as many characters as asked.
fn base32(data: &[u8], chars: usize) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::with_capacity(chars);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for b in data {
        buffer = (buffer << 8) | u32::from(*b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
            if out.len() == chars {
                return out;
            }
        }
    }
    if bits > 0 && out.len() < chars {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

pub(crate) fn hash(text: &str, chars: usize) -> String {
    base32(
        ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref(),
        chars,
    )
}

/// `SKIFF-SVC-` and 10 base32 characters (50 bits) of sha256("namespace/name:portname/protocol").
pub fn service_chain(port_id: &str, protocol: &str) -> String {
    format!("{SVC_PREFIX}{}", hash(&format!("{port_id}/{protocol}"), 10))
}

/// The Service chain's name, `-` and 7 base32 characters of the hash of the service port and
/// the endpoint `ip:port` (28 characters, the most iptables allows). [`build_from_ports`]
/// rehashes the rare name that two endpoints of one Service would share.
pub fn endpoint_chain(port_id: &str, protocol: &str, endpoint: &str) -> String {
    endpoint_chain_salted(port_id, protocol, endpoint, 0)
}

fn endpoint_chain_salted(port_id: &str, protocol: &str, endpoint: &str, salt: u32) -> String {
    let text = if salt == 0 {
        format!("{port_id}/{protocol}{endpoint}")
    } else {
        format!("{port_id}/{protocol}{endpoint}#{salt}")
    };
    format!("{}-{}", service_chain(port_id, protocol), hash(&text, 7))
}

/// A statistic match probability as iptables prints it back: the kernel keeps
/// `round(p * 2^31)`, shown with 11 decimals.
fn probability(p: f64) -> String {
    let scaled = (p * 2_147_483_648.0).round();
    format!("{:.11}", scaled / 2_147_483_648.0)
}

/// One Service port as the proxy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePortInfo {
    /// `namespace/name:portname`.
    pub id: String,
    pub cluster_ip: String,
    pub port: i32,
    /// Lower case, as iptables spells it.
    pub protocol: String,
    pub node_port: Option<i32>,
    /// ClientIP affinity timeout.
    pub affinity_seconds: Option<i32>,
    /// The node addresses on which this node serves the port as a LoadBalancer Service
    /// (the Service's own port on each of them); empty when it does not.
    pub load_balancer: Vec<String>,
    /// Ready endpoints, `ip:port`, sorted.
    pub endpoints: Vec<String>,
}

/// The Service ports the proxy programs: ClusterIP, NodePort and LoadBalancer Services with an
/// address (headless and ExternalName Services have nothing to proxy), each with its ready
/// endpoints from the Endpoints object of the same name.
pub fn service_ports<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    endpoints: &BTreeMap<(String, String), &'a Endpoints>,
) -> Vec<ServicePortInfo> {
    let mut out = Vec::new();
    for s in services {
        let Some(ip) = s.spec.cluster_ip.as_deref() else {
            continue;
        };
        if ip.is_empty()
            || ip == "None"
            || s.spec.type_or_default() == "ExternalName"
            || ip.parse::<std::net::Ipv4Addr>().is_err()
        {
            continue;
        }
        let ns = s.metadata.namespace();
        let name = &s.metadata.name;
        let ep = endpoints.get(&(ns.to_string(), name.clone()));
        let affinity = (s.spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            s.spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .unwrap_or(10800)
        });
        let node_ports = matches!(s.spec.type_or_default(), "NodePort" | "LoadBalancer");
        for p in &s.spec.ports {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            if protocol == "SCTP" {
                continue;
            }
            let port_name = p.name.clone().unwrap_or_default();
            let mut eps: Vec<String> = ep
                .map(|e| {
                    e.subsets
                        .iter()
                        .flat_map(|sub| {
                            sub.ports
                                .iter()
                                .filter(|ep| {
                                    ep.name.clone().unwrap_or_default() == port_name
                                        && ep.protocol.as_deref().unwrap_or("TCP") == protocol
                                })
                                .flat_map(move |ep| {
                                    sub.addresses
                                        .iter()
                                        .map(move |a| format!("{}:{}", a.ip, ep.port))
                                })
                        })
                        .collect()
                })
                .unwrap_or_default();
            eps.sort();
            eps.dedup();
            out.push(ServicePortInfo {
                id: format!("{ns}/{name}:{port_name}"),
                cluster_ip: ip.to_string(),
                port: p.port,
                protocol: protocol.to_ascii_lowercase(),
                node_port: p.node_port.filter(|n| node_ports && *n > 0),
                affinity_seconds: affinity,
                load_balancer: Vec::new(),
                endpoints: eps,
            });
        }
    }
    out
}

/// Builds every owned chain from Services and Endpoints.
pub fn build(services: &[Service], endpoints: &[Endpoints], cfg: &RuleConfig) -> Ruleset {
    build_with_load_balancers(services, endpoints, cfg, &BTreeMap::new())
}

/// [`build`], with the LoadBalancer Services this node serves: (namespace, name) -> the
/// node addresses to serve their ports on.
pub fn build_with_load_balancers(
    services: &[Service],
    endpoints: &[Endpoints],
    cfg: &RuleConfig,
    load_balancers: &BTreeMap<(String, String), Vec<String>>,
) -> Ruleset {
    let by_name: BTreeMap<(String, String), &Endpoints> = endpoints
        .iter()
        .map(|e| {
            (
                (e.metadata.namespace().to_string(), e.metadata.name.clone()),
                e,
            )
        })
        .collect();
    let mut ports = service_ports(services, &by_name);
    if !load_balancers.is_empty() {
        for p in &mut ports {
            // `namespace/name:portname`: names and namespaces hold no `/` or `:`.
            let service = p.id.rsplit_once(':').map_or(p.id.as_str(), |(s, _)| s);
            if let Some((ns, name)) = service.split_once('/') {
                if let Some(addrs) = load_balancers.get(&(ns.to_string(), name.to_string())) {
                    p.load_balancer = addrs.clone();
                }
            }
        }
    }
    build_from_ports(&ports, cfg)
}

/// Builds every owned chain from the Service ports.
pub fn build_from_ports(ports: &[ServicePortInfo], cfg: &RuleConfig) -> Ruleset {
    let mut r = Ruleset::default();
    for c in [
        SERVICES_CHAIN,
        NODEPORTS_CHAIN,
        MARK_MASQ_CHAIN,
        POSTROUTING_CHAIN,
    ] {
        r.declare(Table::Nat, c);
    }
    r.declare(Table::Filter, REJECT_CHAIN);
    r.push(
        Table::Nat,
        MARK_MASQ_CHAIN,
        format!("-j MARK --set-xmark {MASQ_MARK}/{MASQ_MARK}"),
    );
    r.push(
        Table::Nat,
        POSTROUTING_CHAIN,
        format!("-m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN"),
    );
    // Clear the mark so a packet that is masqueraded is not masqueraded again elsewhere.
    r.push(
        Table::Nat,
        POSTROUTING_CHAIN,
        format!("-j MARK --set-xmark {MASQ_MARK}/0x0"),
    );
    r.push(
        Table::Nat,
        POSTROUTING_CHAIN,
        "-m comment --comment \"skiff service traffic requiring SNAT\" -j MASQUERADE".into(),
    );
    for p in ports {
        let proto = &p.protocol;
        let dest = format!(
            "-d {}/32 -p {proto} -m {proto} --dport {}",
            p.cluster_ip, p.port
        );
        if p.endpoints.is_empty() {
            r.push(
                Table::Filter,
                REJECT_CHAIN,
                format!(
                    "{dest} -m comment --comment \"{} has no endpoints\" -j REJECT --reject-with icmp-port-unreachable",
                    p.id
                ),
            );
            if let Some(np) = p.node_port {
                r.push(
                    Table::Filter,
                    REJECT_CHAIN,
                    format!(
                        "-p {proto} -m addrtype --dst-type LOCAL -m {proto} --dport {np} -m comment --comment \"{} has no endpoints\" -j REJECT --reject-with icmp-port-unreachable",
                        p.id
                    ),
                );
            }
            for addr in &p.load_balancer {
                r.push(
                    Table::Filter,
                    REJECT_CHAIN,
                    format!(
                        "-d {addr}/32 -p {proto} -m {proto} --dport {} -m comment --comment \"{} has no endpoints\" -j REJECT --reject-with icmp-port-unreachable",
                        p.port, p.id
                    ),
                );
            }
            continue;
        }
        let svc = service_chain(&p.id, proto);
        r.push(
            Table::Nat,
            SERVICES_CHAIN,
            format!(
                "{dest} -m comment --comment \"{} cluster IP\" -j {svc}",
                p.id
            ),
        );
        if let Some(np) = p.node_port {
            let match_np = format!("-p {proto} -m {proto} --dport {np}");
            r.push(
                Table::Nat,
                NODEPORTS_CHAIN,
                format!(
                    "{match_np} -m comment --comment \"{}\" -j {MARK_MASQ_CHAIN}",
                    p.id
                ),
            );
            r.push(
                Table::Nat,
                NODEPORTS_CHAIN,
                format!("{match_np} -m comment --comment \"{}\" -j {svc}", p.id),
            );
        }
        for addr in &p.load_balancer {
            // Like a node port (masqueraded, so replies come back through this node), on the
            // node's address and the Service's own port.
            let match_lb = format!("-d {addr}/32 -p {proto} -m {proto} --dport {}", p.port);
            r.push(
                Table::Nat,
                NODEPORTS_CHAIN,
                format!(
                    "{match_lb} -m comment --comment \"{} loadbalancer\" -j {MARK_MASQ_CHAIN}",
                    p.id
                ),
            );
            r.push(
                Table::Nat,
                NODEPORTS_CHAIN,
                format!(
                    "{match_lb} -m comment --comment \"{} loadbalancer\" -j {svc}",
                    p.id
                ),
            );
        }
        r.declare(Table::Nat, &svc);
        if let Some(cidr) = &cfg.cluster_cidr {
            r.push(
                Table::Nat,
                &svc,
                format!("! -s {cidr} {dest} -m comment --comment \"{} cluster IP\" -j {MARK_MASQ_CHAIN}", p.id),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        let seps: Vec<(String, &String)> = p
            .endpoints
            .iter()
            .map(|e| {
                let mut salt = 0;
                let mut name = endpoint_chain(&p.id, proto, e);
                while !names.insert(name.clone()) {
                    salt += 1;
                    name = endpoint_chain_salted(&p.id, proto, e, salt);
                }
                (name, e)
            })
            .collect();
        if let Some(secs) = p.affinity_seconds {
            for (sep, _) in &seps {
                r.push(
                    Table::Nat,
                    &svc,
                    format!("-m comment --comment \"{}\" -m recent --rcheck --seconds {secs} --reap --name {sep} --mask 255.255.255.255 --rsource -j {sep}", p.id),
                );
            }
        }
        let n = seps.len();
        for (i, (sep, ep)) in seps.iter().enumerate() {
            let left = n - i;
            if left > 1 {
                r.push(
                    Table::Nat,
                    &svc,
                    format!(
                        "-m comment --comment \"{} -> {ep}\" -m statistic --mode random --probability {} -j {sep}",
                        p.id,
                        probability(1.0 / left as f64)
                    ),
                );
            } else {
                r.push(
                    Table::Nat,
                    &svc,
                    format!("-m comment --comment \"{} -> {ep}\" -j {sep}", p.id),
                );
            }
            let ip = ep.rsplit_once(':').map_or(ep.as_str(), |(ip, _)| ip);
            r.declare(Table::Nat, sep);
            // Hairpin: an endpoint reaching itself through the Service. The endpoint chains'
            // rules have no comments (the Service chain's jump to them says which Service
            // and endpoint they are for): a comment is one more match per rule, and for
            // 1,000 Services of 3 endpoints these 6,000 comments cost 11% of a full restore.
            r.push(Table::Nat, sep, format!("-s {ip}/32 -j {MARK_MASQ_CHAIN}"));
            let recent = if p.affinity_seconds.is_some() {
                format!(" -m recent --set --name {sep} --mask 255.255.255.255 --rsource")
            } else {
                String::new()
            };
            r.push(
                Table::Nat,
                sep,
                format!("-p {proto}{recent} -m {proto} -j DNAT --to-destination {ep}"),
            );
        }
    }
    // Last: whatever is still addressed to the Service range was not DNATed (the filter
    // table comes after nat's DNAT in OUTPUT and FORWARD), so no Service serves it.
    if let Some(cidr) = &cfg.service_cidr {
        r.push(
            Table::Filter,
            REJECT_CHAIN,
            format!("-d {cidr} -m comment --comment \"skiff service range: no such Service port\" -j REJECT --reject-with icmp-port-unreachable"),
        );
    }
    // The top chain's and the node-port chain's rules each match their own address and port,
    // so their order does not matter: they go in descending order of the chain they jump to,
    // the order iptables-nft handles fastest (see the module documentation).
    if let Some(top) = r.chains.get_mut(&(Table::Nat, SERVICES_CHAIN.to_string())) {
        top.sort_by(|a, b| jump_target(b).cmp(jump_target(a)));
    }
    if let Some(np) = r.chains.get_mut(&(Table::Nat, NODEPORTS_CHAIN.to_string())) {
        // Pairs: mark for masquerade, then the jump.
        let mut pairs: Vec<Vec<String>> = np.chunks(2).map(<[String]>::to_vec).collect();
        pairs.sort_by(|a, b| jump_target(&b[b.len() - 1]).cmp(jump_target(&a[a.len() - 1])));
        *np = pairs.concat();
    }
    // Node ports come last so ClusterIP matches are tried first; they apply to any local
    // address of the node.
    r.push(
        Table::Nat,
        SERVICES_CHAIN,
        format!("-m comment --comment \"skiff service nodeports\" -m addrtype --dst-type LOCAL -j {NODEPORTS_CHAIN}"),
    );
    r
}

/// The chain a rule jumps to (the text after its last `-j `).
fn jump_target(rule: &str) -> &str {
    rule.rsplit("-j ").next().unwrap_or("")
}

/// The `iptables-restore --noflush` input that moves the kernel from `current` (the owned
/// chains known to be there, with their rules) to `desired`: changed and new chains are
/// declared (which flushes them) and filled, chains that are no longer wanted are flushed and
/// deleted, unchanged chains are not mentioned, and the jump rules in `missing_jumps` are
/// inserted. Empty when nothing changes.
///
/// Chains are written in dependency order (a chain after the chains it jumps to): the fixed
/// helper chains, then the Service and endpoint chains in descending name order (an endpoint
/// chain's name extends its Service chain's, so it comes first), then the node-port chain and
/// the top chain. See the module documentation for why the order is descending.
pub fn restore_input(
    desired: &Ruleset,
    current: &BTreeMap<(Table, String), Vec<String>>,
    missing_jumps: &[(Table, &str, &str)],
) -> String {
    let mut out = String::new();
    for table in [Table::Nat, Table::Filter] {
        let mut changed: Vec<(&String, &Vec<String>)> = desired
            .chains
            .iter()
            .filter(|((t, _), _)| *t == table)
            .filter(|(key, rules)| current.get(*key) != Some(*rules))
            .map(|((_, c), rules)| (c, rules))
            .collect();
        changed.sort_by(|(a, _), (b, _)| write_rank(a).cmp(&write_rank(b)).then_with(|| b.cmp(a)));
        let mut stale: Vec<&String> = current
            .keys()
            .filter(|(t, c)| *t == table && !desired.chains.contains_key(&(*t, c.clone())))
            .map(|(_, c)| c)
            .collect();
        stale.sort_by(|a, b| b.cmp(a));
        let jumps: Vec<_> = missing_jumps.iter().filter(|j| j.0 == table).collect();
        if changed.is_empty() && stale.is_empty() && jumps.is_empty() {
            continue;
        }
        out.push('*');
        out.push_str(table.name());
        out.push('\n');
        for (c, rules) in &changed {
            out.push_str(&format!(":{c} - [0:0]\n"));
            for rule in *rules {
                out.push_str(&format!("-A {c} {rule}\n"));
            }
        }
        for c in &stale {
            out.push_str(&format!(":{c} - [0:0]\n"));
        }
        for c in &stale {
            out.push_str(&format!("-X {c}\n"));
        }
        for (_, builtin, rule) in jumps {
            out.push_str(&format!("-I {builtin} 1 {rule}\n"));
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// Where a chain goes in [`restore_input`]'s output: helpers, Service and endpoint chains,
/// node ports, the top chain.
fn write_rank(chain: &str) -> u8 {
    if chain == SERVICES_CHAIN {
        3
    } else if chain == NODEPORTS_CHAIN {
        2
    } else if chain.starts_with(SVC_PREFIX) {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(id: &str, ip: &str, eps: &[&str]) -> ServicePortInfo {
        ServicePortInfo {
            id: id.into(),
            cluster_ip: ip.into(),
            port: 80,
            protocol: "tcp".into(),
            node_port: None,
            affinity_seconds: None,
            load_balancer: Vec::new(),
            endpoints: eps.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn chain_names_are_stable_hashes() {
        let a = service_chain("default/web:http", "tcp");
        assert_eq!(a.len(), SVC_PREFIX.len() + 10);
        assert!(a[SVC_PREFIX.len()..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || ('2'..='7').contains(&c)));
        assert_eq!(a, service_chain("default/web:http", "tcp"));
        assert_ne!(a, service_chain("default/web:http", "udp"));
        assert_ne!(
            endpoint_chain("default/web:http", "tcp", "10.42.0.1:80"),
            endpoint_chain("default/web:http", "tcp", "10.42.0.2:80")
        );
        // Known vector: base32 of "foobar" is MZXW6YTBOI.
        assert_eq!(base32(b"foobar", 10), "MZXW6YTBOI");
        assert_eq!(base32(b"fooba", 16), "MZXW6YTB");
    }

    #[test]
    fn three_endpoints_share_the_load_evenly() {
        let p = port(
            "default/web:",
            "10.43.0.10",
            &["10.42.0.1:8080", "10.42.0.2:8080", "10.42.0.3:8080"],
        );
        let r = build_from_ports(std::slice::from_ref(&p), &RuleConfig::default());
        let svc = service_chain("default/web:", "tcp");
        let top = r.chain(Table::Nat, SERVICES_CHAIN).expect("top");
        assert_eq!(top.len(), 2);
        assert!(
            top[0].starts_with("-d 10.43.0.10/32 -p tcp -m tcp --dport 80 "),
            "{}",
            top[0]
        );
        assert!(top[0].ends_with(&format!("-j {svc}")));
        assert!(top[1].contains("--dst-type LOCAL -j SKIFF-NODEPORTS"));
        let rules = r.chain(Table::Nat, &svc).expect("svc chain");
        assert_eq!(rules.len(), 4, "{rules:#?}");
        assert!(rules[0].starts_with("! -s 10.42.0.0/16 -d 10.43.0.10/32"));
        assert!(rules[0].ends_with("-j SKIFF-MARK-MASQ"));
        assert!(rules[1].contains(&format!(
            "--mode random --probability 0.33333333349 -j {svc}-"
        )));
        assert!(rules[2].contains(&format!(
            "--mode random --probability 0.50000000000 -j {svc}-"
        )));
        assert!(!rules[3].contains("statistic"));
        for (i, ep) in p.endpoints.iter().enumerate() {
            let sep = endpoint_chain("default/web:", "tcp", ep);
            assert!(rules[i + 1].ends_with(&format!("-j {sep}")));
            let sep_rules = r.chain(Table::Nat, &sep).expect("sep chain");
            let ip = ep.split(':').next().expect("ip");
            assert_eq!(sep_rules[0], format!("-s {ip}/32 -j SKIFF-MARK-MASQ"));
            assert_eq!(
                sep_rules[1],
                format!("-p tcp -m tcp -j DNAT --to-destination {ep}")
            );
        }
        assert!(r
            .chain(Table::Filter, REJECT_CHAIN)
            .expect("reject")
            .is_empty());
        let post = r.chain(Table::Nat, POSTROUTING_CHAIN).expect("post");
        assert!(post.last().expect("rule").ends_with("-j MASQUERADE"));
    }

    #[test]
    fn no_endpoints_reject_and_node_ports() {
        let mut empty = port("default/empty:", "10.43.0.20", &[]);
        empty.node_port = Some(30020);
        let mut np = port("default/np:http", "10.43.0.21", &["10.42.0.5:80"]);
        np.node_port = Some(30021);
        let r = build_from_ports(&[empty, np], &RuleConfig::default());
        let reject = r.chain(Table::Filter, REJECT_CHAIN).expect("reject");
        assert_eq!(reject.len(), 2);
        assert!(reject[0].starts_with("-d 10.43.0.20/32 -p tcp -m tcp --dport 80 "));
        assert!(reject[0].ends_with("-j REJECT --reject-with icmp-port-unreachable"));
        assert!(reject[1].starts_with("-p tcp -m addrtype --dst-type LOCAL -m tcp --dport 30020 "));
        // No SVC chain and no jump for the empty one.
        assert!(!r
            .chains
            .keys()
            .any(|(_, c)| *c == service_chain("default/empty:", "tcp")));
        let nps = r.chain(Table::Nat, NODEPORTS_CHAIN).expect("nodeports");
        let svc = service_chain("default/np:http", "tcp");
        assert_eq!(nps.len(), 2);
        assert!(
            nps[0].starts_with("-p tcp -m tcp --dport 30021 ")
                && nps[0].ends_with("-j SKIFF-MARK-MASQ")
        );
        assert!(nps[1].ends_with(&format!("-j {svc}")));
        // One endpoint: a single unconditional jump.
        let rules = r.chain(Table::Nat, &svc).expect("svc");
        assert_eq!(rules.len(), 2);
        assert!(!rules[1].contains("statistic"));
    }

    #[test]
    fn load_balancer_ports_on_the_node_address() {
        let mut lb = port("default/lb:", "10.43.0.40", &["10.42.0.7:8080"]);
        lb.port = 8081;
        lb.load_balancer = vec!["172.31.1.11".into()];
        let mut empty = port("default/lb-empty:", "10.43.0.41", &[]);
        empty.port = 8082;
        empty.load_balancer = vec!["172.31.1.11".into()];
        let r = build_from_ports(&[lb, empty], &RuleConfig::default());
        let svc = service_chain("default/lb:", "tcp");
        let nps = r.chain(Table::Nat, NODEPORTS_CHAIN).expect("nodeports");
        assert_eq!(
            nps,
            &[
                "-d 172.31.1.11/32 -p tcp -m tcp --dport 8081 -m comment --comment \"default/lb: loadbalancer\" -j SKIFF-MARK-MASQ".to_string(),
                format!("-d 172.31.1.11/32 -p tcp -m tcp --dport 8081 -m comment --comment \"default/lb: loadbalancer\" -j {svc}"),
            ]
        );
        let reject = r.chain(Table::Filter, REJECT_CHAIN).expect("reject");
        assert_eq!(reject.len(), 2);
        assert!(reject[1].starts_with("-d 172.31.1.11/32 -p tcp -m tcp --dport 8082 "));
    }

    #[test]
    fn the_rest_of_the_service_range_is_refused_last() {
        let cfg = RuleConfig {
            service_cidr: Some("10.43.0.0/16".into()),
            ..RuleConfig::default()
        };
        let r = build_from_ports(&[port("default/empty:", "10.43.0.20", &[])], &cfg);
        let reject = r.chain(Table::Filter, REJECT_CHAIN).expect("reject");
        assert_eq!(reject.len(), 2);
        assert!(reject[0].starts_with("-d 10.43.0.20/32 "));
        assert_eq!(
            reject[1],
            "-d 10.43.0.0/16 -m comment --comment \"skiff service range: no such Service port\" -j REJECT --reject-with icmp-port-unreachable"
        );
        let none = build_from_ports(&[], &RuleConfig::default());
        assert!(none
            .chain(Table::Filter, REJECT_CHAIN)
            .expect("reject")
            .is_empty());
    }

    #[test]
    fn client_ip_affinity() {
        let mut p = port(
            "default/sticky:",
            "10.43.0.30",
            &["10.42.0.1:80", "10.42.0.2:80"],
        );
        p.affinity_seconds = Some(600);
        let r = build_from_ports(
            std::slice::from_ref(&p),
            &RuleConfig {
                cluster_cidr: None,
                service_cidr: None,
            },
        );
        let svc = service_chain("default/sticky:", "tcp");
        let rules = r.chain(Table::Nat, &svc).expect("svc");
        // No masquerade rule without a cluster CIDR; two recent checks, then the balancing.
        assert_eq!(rules.len(), 4, "{rules:#?}");
        for (i, ep) in p.endpoints.iter().enumerate() {
            let sep = endpoint_chain("default/sticky:", "tcp", ep);
            assert!(rules[i].contains(&format!(
                "-m recent --rcheck --seconds 600 --reap --name {sep} --mask 255.255.255.255 --rsource -j {sep}"
            )));
            let dnat = &r.chain(Table::Nat, &sep).expect("sep")[1];
            assert!(dnat.contains(&format!(
                "-m recent --set --name {sep} --mask 255.255.255.255 --rsource -m tcp -j DNAT"
            )));
        }
    }

    #[test]
    fn restore_input_touches_only_what_changed() {
        let cfg = RuleConfig::default();
        let before = build_from_ports(
            &[
                port("default/a:", "10.43.0.1", &["10.42.0.1:80", "10.42.0.2:80"]),
                port("default/b:", "10.43.0.2", &["10.42.0.3:80"]),
            ],
            &cfg,
        );
        let full = restore_input(&before, &BTreeMap::new(), JUMPS);
        assert!(full.starts_with("*nat\n"));
        assert!(full.contains(":SKIFF-SERVICES - [0:0]\n"));
        assert!(full.contains(
            "-I PREROUTING 1 -m comment --comment \"skiff service portals\" -j SKIFF-SERVICES\n"
        ));
        assert!(full.contains("*filter\n:SKIFF-SERVICES-REJECT - [0:0]\n"));
        assert_eq!(full.matches("COMMIT\n").count(), 2);
        assert!(
            !full.contains("-F") && !full.contains("-X"),
            "never flushes by command"
        );

        // Dependency order: a chain is written after every chain it jumps to.
        let order: Vec<&str> = full
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for line in full.lines().filter(|l| l.starts_with("-A ")) {
            let mut words = line.split(' ');
            let chain = words.nth(1).expect("chain");
            let target = jump_target(line);
            if target.starts_with("SKIFF-") {
                let pos = |c: &str| order.iter().position(|o| *o == c).expect("declared");
                assert!(pos(target) < pos(chain), "{chain} before {target}:\n{full}");
            }
        }
        // Service and endpoint chains in descending name order, the top chain last.
        let svcs: Vec<&str> = order
            .iter()
            .copied()
            .filter(|c| c.starts_with(SVC_PREFIX))
            .collect();
        assert_eq!(svcs.len(), 5);
        assert!(svcs.windows(2).all(|w| w[0] > w[1]), "{svcs:?}");
        assert_eq!(order[order.len() - 2], SERVICES_CHAIN);

        let known = before.chains.clone();
        assert_eq!(restore_input(&before, &known, &[]), "");

        // One endpoint of a replaced: its SVC chain, the new SEP, the old SEP's removal.
        let after = build_from_ports(
            &[
                port("default/a:", "10.43.0.1", &["10.42.0.1:80", "10.42.0.9:80"]),
                port("default/b:", "10.43.0.2", &["10.42.0.3:80"]),
            ],
            &cfg,
        );
        let delta = restore_input(&after, &known, &[]);
        let old_sep = endpoint_chain("default/a:", "tcp", "10.42.0.2:80");
        let new_sep = endpoint_chain("default/a:", "tcp", "10.42.0.9:80");
        let svc_a = service_chain("default/a:", "tcp");
        let declared: Vec<&str> = delta.lines().filter(|l| l.starts_with(':')).collect();
        assert_eq!(declared.len(), 3, "{delta}");
        assert!(delta.contains(&format!(":{svc_a} - [0:0]")));
        assert!(delta.contains(&format!(":{new_sep} - [0:0]")));
        assert!(delta.contains(&format!(":{old_sep} - [0:0]\n")));
        assert!(delta.contains(&format!("-X {old_sep}\n")));
        assert!(!delta.contains("*filter"));
        assert!(!delta.contains(":SKIFF-SERVICES "));

        // Chains left by an earlier version are flushed, then deleted.
        let mut old = known.clone();
        old.insert(
            (Table::Nat, format!("{SEP_PREFIX}ABCDEFGHIJKLMNOP")),
            vec![],
        );
        let delta = restore_input(&before, &old, &[]);
        assert_eq!(
            delta,
            "*nat\n:SKIFF-SEP-ABCDEFGHIJKLMNOP - [0:0]\n-X SKIFF-SEP-ABCDEFGHIJKLMNOP\nCOMMIT\n"
        );
    }

    #[test]
    fn endpoint_chains_extend_their_service_chain() {
        let svc = service_chain("default/web:http", "tcp");
        let sep = endpoint_chain("default/web:http", "tcp", "10.42.0.1:80");
        assert_eq!(svc.len(), 20);
        assert_eq!(sep.len(), 28, "iptables' longest chain name");
        assert!(sep.starts_with(&format!("{svc}-")));
        assert!(owned_chain(Table::Nat, &sep) && owned_chain(Table::Nat, &svc));
        assert!(owned_chain(Table::Nat, "SKIFF-SEP-ABCDEFGHIJKLMNOP"));
        assert!(!owned_chain(Table::Nat, "KUBE-SVC-ABCDEFGHIJKLMNOP"));
        // The fixed chains sort before every Service chain.
        for c in [
            SERVICES_CHAIN,
            NODEPORTS_CHAIN,
            MARK_MASQ_CHAIN,
            POSTROUTING_CHAIN,
        ] {
            assert!(c < svc.as_str());
        }
        // iptables-save's spelling of the statistic match.
        assert_eq!(probability(1.0 / 3.0), "0.33333333349");
        assert_eq!(probability(0.5), "0.50000000000");
    }

    #[test]
    fn top_chain_rules_sorted_by_target_node_ports_last() {
        let mut ports: Vec<ServicePortInfo> = (0..20)
            .map(|i| {
                port(
                    &format!("default/s{i}:"),
                    &format!("10.43.0.{i}"),
                    &["10.42.0.1:80"],
                )
            })
            .collect();
        ports[3].node_port = Some(30003);
        ports[7].node_port = Some(30007);
        let r = build_from_ports(&ports, &RuleConfig::default());
        let top = r.chain(Table::Nat, SERVICES_CHAIN).expect("top");
        assert_eq!(top.len(), 21);
        assert!(top[20].ends_with(&format!("-j {NODEPORTS_CHAIN}")));
        let targets: Vec<&str> = top[..20].iter().map(|r| jump_target(r)).collect();
        assert!(targets.windows(2).all(|w| w[0] > w[1]), "{targets:?}");
        let np = r.chain(Table::Nat, NODEPORTS_CHAIN).expect("nodeports");
        assert_eq!(np.len(), 4);
        for pair in np.chunks(2) {
            let port = pair[0].split(' ').nth(5).expect("port");
            assert!(
                pair[0].ends_with(MARK_MASQ_CHAIN) && pair[1].contains(port),
                "{np:?}"
            );
        }
        assert!(jump_target(&np[1]) > jump_target(&np[3]));
    }

    #[test]
    fn services_and_endpoints_become_ports() {
        use api::core::{EndpointAddress, EndpointPort, EndpointSubset, ServicePort};
        use api::object::Resource;
        let mut s = Service::default();
        s.metadata.name = "web".into();
        s.metadata.namespace = Some("ns".into());
        s.spec.cluster_ip = Some("10.43.0.9".into());
        s.spec.type_ = Some("NodePort".into());
        s.spec.session_affinity = Some("ClientIP".into());
        s.spec.ports = vec![
            ServicePort {
                name: Some("http".into()),
                port: 80,
                node_port: Some(30080),
                ..Default::default()
            },
            ServicePort {
                name: Some("dns".into()),
                port: 53,
                protocol: Some("UDP".into()),
                ..Default::default()
            },
        ];
        s.set_defaults();
        let mut headless = s.clone();
        headless.metadata.name = "headless".into();
        headless.spec.cluster_ip = Some("None".into());
        let mut e = Endpoints::default();
        e.metadata.name = "web".into();
        e.metadata.namespace = Some("ns".into());
        e.subsets = vec![EndpointSubset {
            addresses: vec![
                EndpointAddress {
                    ip: "10.42.1.2".into(),
                    ..Default::default()
                },
                EndpointAddress {
                    ip: "10.42.1.1".into(),
                    ..Default::default()
                },
            ],
            not_ready_addresses: vec![EndpointAddress {
                ip: "10.42.1.3".into(),
                ..Default::default()
            }],
            ports: vec![EndpointPort {
                name: Some("http".into()),
                port: 8080,
                protocol: Some("TCP".into()),
                ..Default::default()
            }],
        }];
        let by_name = BTreeMap::from([(("ns".to_string(), "web".to_string()), &e)]);
        let ports = service_ports([&s, &headless], &by_name);
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[0].id, "ns/web:http");
        assert_eq!(ports[0].endpoints, ["10.42.1.1:8080", "10.42.1.2:8080"]);
        assert_eq!(ports[0].node_port, Some(30080));
        assert_eq!(ports[0].affinity_seconds, Some(10800));
        assert_eq!(ports[1].protocol, "udp");
        assert!(ports[1].endpoints.is_empty());
    }
}
