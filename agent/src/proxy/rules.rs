//! The rules the service proxy wants, built from Services and Endpoints as plain text per
//! chain (the model is Kubernetes' iptables proxier):
//!
//! ```text
//! nat PREROUTING, OUTPUT -> SKIFF-SERVICES
//!   SKIFF-SERVICES: per ClusterIP port with endpoints -> SKIFF-SVC-<hash>;
//!                   last: local destinations -> SKIFF-NODEPORTS
//!   SKIFF-NODEPORTS: per NodePort: mark for masquerade, then -> SKIFF-SVC-<hash>
//!   SKIFF-SVC-<hash>: off-cluster sources marked; (ClientIP affinity: recent checks);
//!                     statistic 1/n, 1/(n-1), ..., last unconditional -> SKIFF-SEP-<hash>
//!   SKIFF-SEP-<hash>: hairpin marked; DNAT to the endpoint
//!   SKIFF-MARK-MASQ: sets the 0x4000 mark
//! nat POSTROUTING -> SKIFF-POSTROUTING-SVC: masquerades marked packets
//! filter INPUT, FORWARD, OUTPUT (new connections) -> SKIFF-SERVICES-REJECT:
//!   REJECT for ports of Services with no ready endpoint (refused at once, not hung)
//! ```

use std::collections::BTreeMap;

use api::core::{Endpoints, Service};

/// The nat chain every service packet passes (from PREROUTING and OUTPUT).
pub const SERVICES_CHAIN: &str = "SKIFF-SERVICES";
pub const NODEPORTS_CHAIN: &str = "SKIFF-NODEPORTS";
pub const MARK_MASQ_CHAIN: &str = "SKIFF-MARK-MASQ";
pub const POSTROUTING_CHAIN: &str = "SKIFF-POSTROUTING-SVC";
/// The filter chain that refuses connections to Services without endpoints.
pub const REJECT_CHAIN: &str = "SKIFF-SERVICES-REJECT";
pub const SVC_PREFIX: &str = "SKIFF-SVC-";
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
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            cluster_cidr: Some("10.42.0.0/16".into()),
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

fn hash16(text: &str) -> String {
    base32(
        ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref(),
        16,
    )
}

/// `SKIFF-SVC-` and 16 base32 characters of sha256("namespace/name:portname/protocol").
pub fn service_chain(port_id: &str, protocol: &str) -> String {
    format!("{SVC_PREFIX}{}", hash16(&format!("{port_id}/{protocol}")))
}

/// `SKIFF-SEP-` and the hash of the service port and the endpoint `ip:port`.
pub fn endpoint_chain(port_id: &str, protocol: &str, endpoint: &str) -> String {
    format!(
        "{SEP_PREFIX}{}",
        hash16(&format!("{port_id}/{protocol}{endpoint}"))
    )
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
                endpoints: eps,
            });
        }
    }
    out
}

/// Builds every owned chain from Services and Endpoints.
pub fn build(services: &[Service], endpoints: &[Endpoints], cfg: &RuleConfig) -> Ruleset {
    let by_name: BTreeMap<(String, String), &Endpoints> = endpoints
        .iter()
        .map(|e| {
            (
                (e.metadata.namespace().to_string(), e.metadata.name.clone()),
                e,
            )
        })
        .collect();
    build_from_ports(&service_ports(services, &by_name), cfg)
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
        format!("-j MARK --or-mark {MASQ_MARK}"),
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
        format!("-j MARK --xor-mark {MASQ_MARK}"),
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
                        "-m addrtype --dst-type LOCAL -p {proto} -m {proto} --dport {np} -m comment --comment \"{} has no endpoints\" -j REJECT --reject-with icmp-port-unreachable",
                        p.id
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
        r.declare(Table::Nat, &svc);
        if let Some(cidr) = &cfg.cluster_cidr {
            r.push(
                Table::Nat,
                &svc,
                format!("! -s {cidr} {dest} -m comment --comment \"{} cluster IP\" -j {MARK_MASQ_CHAIN}", p.id),
            );
        }
        let seps: Vec<(String, &String)> = p
            .endpoints
            .iter()
            .map(|e| (endpoint_chain(&p.id, proto, e), e))
            .collect();
        if let Some(secs) = p.affinity_seconds {
            for (sep, _) in &seps {
                r.push(
                    Table::Nat,
                    &svc,
                    format!("-m comment --comment \"{}\" -m recent --name {sep} --mask 255.255.255.255 --rsource --rcheck --seconds {secs} --reap -j {sep}", p.id),
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
                        "-m comment --comment \"{} -> {ep}\" -m statistic --mode random --probability {:.10} -j {sep}",
                        p.id,
                        1.0 / left as f64
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
            // Hairpin: an endpoint reaching itself through the Service.
            r.push(
                Table::Nat,
                sep,
                format!(
                    "-s {ip}/32 -m comment --comment \"{}\" -j {MARK_MASQ_CHAIN}",
                    p.id
                ),
            );
            let recent = if p.affinity_seconds.is_some() {
                format!(" -m recent --name {sep} --mask 255.255.255.255 --rsource --set")
            } else {
                String::new()
            };
            r.push(
                Table::Nat,
                sep,
                format!(
                    "-m comment --comment \"{}\"{recent} -p {proto} -m {proto} -j DNAT --to-destination {ep}",
                    p.id
                ),
            );
        }
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

/// The `iptables-restore --noflush` input that moves the kernel from `previous` (what is
/// known to be there: chain names with their rules, or None when unknown) to `desired`:
/// changed and new chains are declared (which flushes them) and filled, chains that are no
/// longer wanted are flushed and deleted, unchanged chains are not mentioned, and the jump
/// rules in `missing_jumps` are inserted. Empty when nothing changes.
pub fn restore_input(
    desired: &Ruleset,
    previous: &BTreeMap<(Table, String), Option<Vec<String>>>,
    missing_jumps: &[(Table, &str, &str)],
) -> String {
    let mut out = String::new();
    for table in [Table::Nat, Table::Filter] {
        let changed: Vec<(&String, &Vec<String>)> = desired
            .chains
            .iter()
            .filter(|((t, _), _)| *t == table)
            .filter(|(key, rules)| match previous.get(*key) {
                Some(Some(old)) => old != *rules,
                _ => true,
            })
            .map(|((_, c), rules)| (c, rules))
            .collect();
        let stale: Vec<&String> = previous
            .keys()
            .filter(|(t, c)| *t == table && !desired.chains.contains_key(&(*t, c.clone())))
            .map(|(_, c)| c)
            .collect();
        let jumps: Vec<_> = missing_jumps.iter().filter(|j| j.0 == table).collect();
        if changed.is_empty() && stale.is_empty() && jumps.is_empty() {
            continue;
        }
        out.push('*');
        out.push_str(table.name());
        out.push('\n');
        for c in changed.iter().map(|(c, _)| *c).chain(stale.iter().copied()) {
            out.push_str(&format!(":{c} - [0:0]\n"));
        }
        for (c, rules) in &changed {
            for rule in *rules {
                out.push_str(&format!("-A {c} {rule}\n"));
            }
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
            endpoints: eps.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn chain_names_are_stable_hashes() {
        let a = service_chain("default/web:http", "tcp");
        assert_eq!(a.len(), SVC_PREFIX.len() + 16);
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
        assert!(rules[1].contains("--mode random --probability 0.3333333333 -j SKIFF-SEP-"));
        assert!(rules[2].contains("--mode random --probability 0.5000000000 -j SKIFF-SEP-"));
        assert!(!rules[3].contains("statistic"));
        for (i, ep) in p.endpoints.iter().enumerate() {
            let sep = endpoint_chain("default/web:", "tcp", ep);
            assert!(rules[i + 1].ends_with(&format!("-j {sep}")));
            let sep_rules = r.chain(Table::Nat, &sep).expect("sep chain");
            let ip = ep.split(':').next().expect("ip");
            assert_eq!(
                sep_rules[0],
                format!("-s {ip}/32 -m comment --comment \"default/web:\" -j SKIFF-MARK-MASQ")
            );
            assert!(sep_rules[1].ends_with(&format!("-p tcp -m tcp -j DNAT --to-destination {ep}")));
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
        assert!(reject[1].contains("--dst-type LOCAL -p tcp -m tcp --dport 30020"));
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
    fn client_ip_affinity() {
        let mut p = port(
            "default/sticky:",
            "10.43.0.30",
            &["10.42.0.1:80", "10.42.0.2:80"],
        );
        p.affinity_seconds = Some(600);
        let r = build_from_ports(std::slice::from_ref(&p), &RuleConfig { cluster_cidr: None });
        let svc = service_chain("default/sticky:", "tcp");
        let rules = r.chain(Table::Nat, &svc).expect("svc");
        // No masquerade rule without a cluster CIDR; two recent checks, then the balancing.
        assert_eq!(rules.len(), 4, "{rules:#?}");
        for (i, ep) in p.endpoints.iter().enumerate() {
            let sep = endpoint_chain("default/sticky:", "tcp", ep);
            assert!(rules[i].contains(&format!(
                "-m recent --name {sep} --mask 255.255.255.255 --rsource --rcheck --seconds 600 --reap -j {sep}"
            )));
            let dnat = &r.chain(Table::Nat, &sep).expect("sep")[1];
            assert!(dnat.contains(&format!(
                "-m recent --name {sep} --mask 255.255.255.255 --rsource --set"
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

        let known: BTreeMap<_, _> = before
            .chains
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
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
