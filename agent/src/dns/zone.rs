//! The cluster zone: what Services and Endpoints say, and the answers for names under the
//! cluster domain (Kubernetes' DNS specification, as CoreDNS's `kubernetes` plugin serves it):
//!
//! ```text
//! SVC.NS.svc.DOMAIN                 A/AAAA: the ClusterIPs; headless: ready endpoint IPs;
//!                                   ExternalName: CNAME to the external name
//! HOST.SVC.NS.svc.DOMAIN            A: the endpoint with that hostname (or dashed IP)
//! _PORT._PROTO.SVC.NS.svc.DOMAIN    SRV: the named port (headless: one per ready endpoint)
//! A-B-C-D.NS.pod.DOMAIN             A: A.B.C.D
//! D.C.B.A.in-addr.arpa              PTR for ClusterIPs (other addresses go upstream)
//! ```
//!
//! The rest of the domain is NXDOMAIN; names that exist without records of the asked type
//! answer NOERROR with no records (both with the zone's SOA in the authority section).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use api::core::{Endpoints, Service};

/// The TTL of cluster records (CoreDNS's default): changes show within seconds.
pub const RECORD_TTL: u32 = 5;

/// Record types this zone answers (numeric, as on the wire).
pub mod qtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const ANY: u16 = 255;
}

/// One resource record of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Lower case, without the trailing dot.
    pub name: String,
    pub ttl: u32,
    pub data: RecordData,
}

/// The data of a [`Record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(String),
    Ptr(String),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Soa {
        mname: String,
        rname: String,
        serial: u32,
        refresh: i32,
        retry: i32,
        expire: i32,
        minimum: u32,
    },
}

/// What the zone says about a question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Not a name of this zone: ask the upstream resolvers.
    Outside,
    /// A cluster name, but the zone has not been filled from the API yet.
    NotReady,
    /// The name does not exist (NXDOMAIN).
    NxDomain,
    /// The name exists; `answers` empty means it has no records of the asked type.
    Found {
        answers: Vec<Record>,
        additional: Vec<Record>,
    },
}

impl Lookup {
    fn found(answers: Vec<Record>) -> Lookup {
        Lookup::Found {
            answers,
            additional: Vec::new(),
        }
    }
}

/// A port of a Service or endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NamedPort {
    name: String,
    /// Lower case: `tcp`, `udp`, `sctp`.
    protocol: String,
    port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ServiceKind {
    /// ClusterIPs (empty while none is allocated).
    Cluster(Vec<IpAddr>),
    Headless,
    External(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ServiceEntry {
    kind: ServiceKind,
    ports: Vec<NamedPort>,
    publish_not_ready: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Address {
    ip: IpAddr,
    /// Lower case.
    hostname: Option<String>,
    ready: bool,
    ports: Vec<NamedPort>,
}

impl Address {
    /// The endpoint's own label: its hostname, or its IP with dashes (as CoreDNS names it).
    fn label(&self) -> String {
        self.hostname.clone().unwrap_or_else(|| dashed(&self.ip))
    }
}

fn dashed(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

type Key = (String, String);

fn key(meta: &api::meta::ObjectMeta) -> Key {
    (
        meta.namespace().to_ascii_lowercase(),
        meta.name.to_ascii_lowercase(),
    )
}

fn ports_of<'a>(
    ports: impl Iterator<Item = (Option<&'a str>, Option<&'a str>, i32)>,
) -> Vec<NamedPort> {
    ports
        .filter_map(|(name, protocol, port)| {
            Some(NamedPort {
                name: name.filter(|n| !n.is_empty())?.to_ascii_lowercase(),
                protocol: protocol.unwrap_or("TCP").to_ascii_lowercase(),
                port: u16::try_from(port).ok()?,
            })
        })
        .collect()
}

fn service_entry(svc: &Service) -> ServiceEntry {
    let spec = &svc.spec;
    let kind = if spec.type_or_default() == "ExternalName" {
        ServiceKind::External(
            spec.external_name
                .as_deref()
                .unwrap_or("")
                .trim_end_matches('.')
                .to_ascii_lowercase(),
        )
    } else if spec.is_headless() {
        ServiceKind::Headless
    } else {
        let mut ips: Vec<IpAddr> = spec
            .cluster_ips
            .iter()
            .chain(spec.cluster_ip.iter())
            .filter_map(|ip| ip.parse().ok())
            .collect();
        ips.sort();
        ips.dedup();
        ServiceKind::Cluster(ips)
    };
    ServiceEntry {
        kind,
        ports: ports_of(
            spec.ports
                .iter()
                .map(|p| (p.name.as_deref(), p.protocol.as_deref(), p.port)),
        ),
        publish_not_ready: spec.publish_not_ready_addresses == Some(true),
    }
}

fn addresses(eps: &Endpoints) -> Vec<Address> {
    let mut out = Vec::new();
    for subset in &eps.subsets {
        let ports = ports_of(
            subset
                .ports
                .iter()
                .map(|p| (p.name.as_deref(), p.protocol.as_deref(), p.port)),
        );
        let all = subset
            .addresses
            .iter()
            .map(|a| (a, true))
            .chain(subset.not_ready_addresses.iter().map(|a| (a, false)));
        for (a, ready) in all {
            let Ok(ip) = a.ip.parse() else { continue };
            out.push(Address {
                ip,
                hostname: a
                    .hostname
                    .as_deref()
                    .filter(|h| !h.is_empty())
                    .map(str::to_ascii_lowercase),
                ready,
                ports: ports.clone(),
            });
        }
    }
    out
}

/// The records of the cluster domain, kept from Services and Endpoints.
#[derive(Clone, Debug)]
pub struct Zone {
    domain: String,
    services: BTreeMap<Key, ServiceEntry>,
    endpoints: BTreeMap<Key, Vec<Address>>,
    /// The EndpointSlices the endpoints come from.
    slices: api::discovery::SliceIndex,
    services_synced: bool,
    endpoints_synced: bool,
    serial: u32,
}

impl Zone {
    /// An empty zone for `domain` (e.g. `cluster.local`), not yet synced.
    pub fn new(domain: &str) -> Zone {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        Zone {
            domain: normalize(domain),
            services: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            slices: Default::default(),
            services_synced: false,
            endpoints_synced: false,
            serial: u32::try_from(now % u64::from(u32::MAX)).unwrap_or(1),
        }
    }

    /// The cluster domain, lower case, without dots at either end.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Whether both Services and Endpoints have been listed once.
    pub fn is_synced(&self) -> bool {
        self.services_synced && self.endpoints_synced
    }

    /// The SOA serial: changes with every change of the zone.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    fn touch(&mut self) {
        self.serial = self.serial.wrapping_add(1);
    }

    /// Replaces every Service (after a list).
    pub fn set_services(&mut self, services: &[Service]) {
        self.services = services
            .iter()
            .map(|s| (key(&s.metadata), service_entry(s)))
            .collect();
        self.services_synced = true;
        self.touch();
    }

    /// A Service was added or changed.
    pub fn put_service(&mut self, svc: &Service) {
        self.services.insert(key(&svc.metadata), service_entry(svc));
        self.touch();
    }

    /// A Service was deleted.
    pub fn remove_service(&mut self, svc: &Service) {
        self.services.remove(&key(&svc.metadata));
        self.touch();
    }

    /// Replaces every Endpoints object (after a list).
    pub fn set_endpoints(&mut self, all: &[Endpoints]) {
        self.endpoints = all
            .iter()
            .map(|e| (key(&e.metadata), addresses(e)))
            .collect();
        self.endpoints_synced = true;
        self.touch();
    }

    /// An Endpoints object was added or changed.
    pub fn put_endpoints(&mut self, eps: &Endpoints) {
        self.endpoints.insert(key(&eps.metadata), addresses(eps));
        self.touch();
    }

    /// An Endpoints object was deleted.
    pub fn remove_endpoints(&mut self, eps: &Endpoints) {
        self.endpoints.remove(&key(&eps.metadata));
        self.touch();
    }

    /// Replaces every EndpointSlice (after a list).
    pub fn set_slices(&mut self, all: Vec<api::discovery::EndpointSlice>) {
        self.slices.set_all(all);
        let all = self.slices.all_endpoints();
        self.set_endpoints(&all);
    }

    /// An EndpointSlice was added or changed.
    pub fn put_slice(&mut self, slice: api::discovery::EndpointSlice) {
        for service in self.slices.put(slice) {
            self.refresh(&service);
        }
    }

    /// An EndpointSlice was deleted.
    pub fn remove_slice(&mut self, slice: &api::discovery::EndpointSlice) {
        if let Some(service) = self.slices.remove(slice) {
            self.refresh(&service);
        }
    }

    /// Recomputes a Service's addresses from its slices.
    fn refresh(&mut self, service: &api::discovery::ServiceKey) {
        match self.slices.endpoints(service) {
            Some(e) => self.put_endpoints(&e),
            None => {
                self.endpoints.remove(service);
                self.touch();
            }
        }
    }

    /// The zone's SOA record (also the authority of negative answers).
    pub fn soa(&self) -> Record {
        Record {
            name: self.domain.clone(),
            ttl: RECORD_TTL,
            data: RecordData::Soa {
                mname: format!("ns.dns.{}", self.domain),
                rname: format!("hostmaster.{}", self.domain),
                serial: self.serial,
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: RECORD_TTL,
            },
        }
    }

    /// Whether `name` is the cluster domain or under it.
    pub fn contains(&self, name: &str) -> bool {
        let name = normalize(name);
        self.relative(&name).is_some()
    }

    /// The labels of `name` (normalized) below the domain, innermost last:
    /// `web.default.svc.cluster.local` -> `["web", "default", "svc"]`.
    fn relative<'n>(&self, name: &'n str) -> Option<Vec<&'n str>> {
        if name == self.domain {
            return Some(Vec::new());
        }
        let head = name.strip_suffix(&self.domain)?.strip_suffix('.')?;
        Some(head.split('.').collect())
    }

    /// Answers a question for `name` (any case, trailing dot or not) of type `qtype`.
    pub fn lookup(&self, name: &str, qtype: u16) -> Lookup {
        let name = normalize(name);
        if let Some(ip) = reverse_v4(&name) {
            return self.reverse(&name, ip, qtype);
        }
        let Some(labels) = self.relative(&name) else {
            return Lookup::Outside;
        };
        if !self.is_synced() {
            return Lookup::NotReady;
        }
        match labels.as_slice() {
            [] => match qtype {
                qtype::SOA | qtype::ANY => Lookup::found(vec![self.soa()]),
                _ => Lookup::found(Vec::new()),
            },
            ["svc"] | ["pod"] => Lookup::found(Vec::new()),
            [ns, "svc"] | [ns, "pod"] => {
                if self.services.keys().any(|(n, _)| n == ns) {
                    Lookup::found(Vec::new())
                } else {
                    Lookup::NxDomain
                }
            }
            [svc, ns, "svc"] => self.service(&name, ns, svc, qtype),
            [endpoint, svc, ns, "svc"] => self.endpoint(&name, ns, svc, endpoint, qtype),
            [port, proto, svc, ns, "svc"] => self.srv(&name, ns, svc, port, proto, qtype),
            [ip, _ns, "pod"] => match parse_dashed_v4(ip) {
                Some(v4) => Lookup::found(addr_records(&name, &[IpAddr::V4(v4)], qtype)),
                None => Lookup::NxDomain,
            },
            _ => Lookup::NxDomain,
        }
    }

    fn fqdn(&self, ns: &str, svc: &str) -> String {
        format!("{svc}.{ns}.svc.{}", self.domain)
    }

    /// The endpoint addresses DNS publishes for a Service.
    fn published<'s>(&'s self, entry: &ServiceEntry, k: &Key) -> Vec<&'s Address> {
        self.endpoints.get(k).map_or_else(Vec::new, |all| {
            all.iter()
                .filter(|a| a.ready || entry.publish_not_ready)
                .collect()
        })
    }

    fn service(&self, name: &str, ns: &str, svc: &str, qtype: u16) -> Lookup {
        let k = (ns.to_string(), svc.to_string());
        let Some(entry) = self.services.get(&k) else {
            return Lookup::NxDomain;
        };
        match &entry.kind {
            ServiceKind::Cluster(ips) => Lookup::found(addr_records(name, ips, qtype)),
            ServiceKind::Headless => {
                let mut ips: Vec<IpAddr> = self.published(entry, &k).iter().map(|a| a.ip).collect();
                ips.sort();
                ips.dedup();
                Lookup::found(addr_records(name, &ips, qtype))
            }
            ServiceKind::External(target) => {
                if target.is_empty()
                    || !matches!(qtype, qtype::A | qtype::AAAA | qtype::CNAME | qtype::ANY)
                {
                    return Lookup::found(Vec::new());
                }
                Lookup::found(vec![Record {
                    name: name.to_string(),
                    ttl: RECORD_TTL,
                    data: RecordData::Cname(target.clone()),
                }])
            }
        }
    }

    fn endpoint(&self, name: &str, ns: &str, svc: &str, label: &str, qtype: u16) -> Lookup {
        let k = (ns.to_string(), svc.to_string());
        let Some(entry) = self.services.get(&k) else {
            return Lookup::NxDomain;
        };
        let ips: BTreeSet<IpAddr> = self
            .published(entry, &k)
            .into_iter()
            .filter(|a| a.label() == label)
            .map(|a| a.ip)
            .collect();
        if ips.is_empty() {
            return Lookup::NxDomain;
        }
        let ips: Vec<IpAddr> = ips.into_iter().collect();
        Lookup::found(addr_records(name, &ips, qtype))
    }

    fn srv(&self, name: &str, ns: &str, svc: &str, port: &str, proto: &str, qtype: u16) -> Lookup {
        let k = (ns.to_string(), svc.to_string());
        let (Some(entry), Some(port), Some(proto)) = (
            self.services.get(&k),
            port.strip_prefix('_'),
            proto.strip_prefix('_'),
        ) else {
            return Lookup::NxDomain;
        };
        let matches = |p: &NamedPort| p.name == port && p.protocol == proto;
        let Some(service_port) = entry.ports.iter().find(|p| matches(p)) else {
            return Lookup::NxDomain;
        };
        if !matches!(qtype, qtype::SRV | qtype::ANY) {
            return Lookup::found(Vec::new());
        }
        let fqdn = self.fqdn(ns, svc);
        let srv = |port: u16, target: String| Record {
            name: name.to_string(),
            ttl: RECORD_TTL,
            data: RecordData::Srv {
                priority: 0,
                weight: 100,
                port,
                target,
            },
        };
        let mut answers = Vec::new();
        let mut additional = Vec::new();
        match &entry.kind {
            ServiceKind::Cluster(ips) => {
                answers.push(srv(service_port.port, fqdn.clone()));
                additional.extend(addr_records(&fqdn, ips, qtype::ANY));
            }
            ServiceKind::Headless => {
                for a in self.published(entry, &k) {
                    let Some(p) = a.ports.iter().find(|p| matches(p)) else {
                        continue;
                    };
                    let target = format!("{}.{fqdn}", a.label());
                    answers.push(srv(p.port, target.clone()));
                    additional.extend(addr_records(&target, &[a.ip], qtype::ANY));
                }
            }
            ServiceKind::External(target) => {
                answers.push(srv(service_port.port, target.clone()));
            }
        }
        Lookup::Found {
            answers,
            additional,
        }
    }

    fn reverse(&self, name: &str, ip: Ipv4Addr, qtype: u16) -> Lookup {
        let ip = IpAddr::V4(ip);
        let owner = self.services.iter().find(|(_, e)| match &e.kind {
            ServiceKind::Cluster(ips) => ips.contains(&ip),
            _ => false,
        });
        match owner {
            None => Lookup::Outside,
            Some(_) if !matches!(qtype, qtype::PTR | qtype::ANY) => Lookup::found(Vec::new()),
            Some(((ns, svc), _)) => Lookup::found(vec![Record {
                name: name.to_string(),
                ttl: RECORD_TTL,
                data: RecordData::Ptr(self.fqdn(ns, svc)),
            }]),
        }
    }
}

/// A and AAAA records of `name` for `ips`, those `qtype` asks for.
fn addr_records(name: &str, ips: &[IpAddr], qtype: u16) -> Vec<Record> {
    ips.iter()
        .filter_map(|ip| {
            let data = match ip {
                IpAddr::V4(v4) if matches!(qtype, qtype::A | qtype::ANY) => RecordData::A(*v4),
                IpAddr::V6(v6) if matches!(qtype, qtype::AAAA | qtype::ANY) => {
                    RecordData::Aaaa(*v6)
                }
                _ => return None,
            };
            Some(Record {
                name: name.to_string(),
                ttl: RECORD_TTL,
                data,
            })
        })
        .collect()
}

/// Lower case, without a trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// `10-42-0-7` -> 10.42.0.7.
fn parse_dashed_v4(label: &str) -> Option<Ipv4Addr> {
    label.replace('-', ".").parse().ok()
}

/// `7.0.42.10.in-addr.arpa` -> 10.42.0.7.
fn reverse_v4(name: &str) -> Option<Ipv4Addr> {
    let head = name.strip_suffix(".in-addr.arpa")?;
    let mut octets: Vec<u8> = head
        .split('.')
        .map(|o| o.parse().ok())
        .collect::<Option<_>>()?;
    if octets.len() != 4 {
        return None;
    }
    octets.reverse();
    Some(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{EndpointAddress, EndpointPort, EndpointSubset, ServicePort, ServiceSpec};
    use api::meta::ObjectMeta;

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: name.into(),
            namespace: Some(ns.into()),
            ..Default::default()
        }
    }

    fn service(ns: &str, name: &str, cluster_ip: &str) -> Service {
        Service {
            metadata: meta(ns, name),
            spec: ServiceSpec {
                cluster_ip: Some(cluster_ip.into()),
                ports: vec![ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    port: 80,
                    ..Default::default()
                }],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn endpoints(
        ns: &str,
        name: &str,
        ready: &[(&str, Option<&str>)],
        not_ready: &[&str],
    ) -> Endpoints {
        let addr = |ip: &str, host: Option<&str>| EndpointAddress {
            ip: ip.into(),
            hostname: host.map(str::to_string),
            ..Default::default()
        };
        Endpoints {
            metadata: meta(ns, name),
            subsets: vec![EndpointSubset {
                addresses: ready.iter().map(|(ip, h)| addr(ip, *h)).collect(),
                not_ready_addresses: not_ready.iter().map(|ip| addr(ip, None)).collect(),
                ports: vec![EndpointPort {
                    name: Some("http".into()),
                    port: 8080,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }],
            }],
        }
    }

    fn zone() -> Zone {
        let mut z = Zone::new("cluster.local.");
        let mut headless = service("db", "pg", "None");
        headless.spec.ports[0].name = Some("sql".into());
        let mut ext = service("default", "search", "");
        ext.spec.type_ = Some("ExternalName".into());
        ext.spec.external_name = Some("search.example.com.".into());
        z.set_services(&[service("default", "web", "10.43.0.10"), headless, ext]);
        let mut pg = endpoints(
            "db",
            "pg",
            &[("10.42.0.7", Some("pg-0")), ("10.42.1.3", None)],
            &["10.42.2.9"],
        );
        pg.subsets[0].ports[0].name = Some("sql".into());
        pg.subsets[0].ports[0].port = 5432;
        z.set_endpoints(&[endpoints("default", "web", &[("10.42.0.5", None)], &[]), pg]);
        z
    }

    fn a(name: &str, ip: [u8; 4]) -> Record {
        Record {
            name: name.into(),
            ttl: RECORD_TTL,
            data: RecordData::A(Ipv4Addr::from(ip)),
        }
    }

    fn answers(l: Lookup) -> Vec<Record> {
        match l {
            Lookup::Found { answers, .. } => answers,
            other => panic!("not found: {other:?}"),
        }
    }

    #[test]
    fn cluster_ip_services_answer_their_cluster_ip_in_any_case() {
        let z = zone();
        let name = "web.default.svc.cluster.local";
        assert_eq!(
            answers(z.lookup(name, qtype::A)),
            vec![a(name, [10, 43, 0, 10])]
        );
        assert_eq!(
            answers(z.lookup("WEB.Default.svc.cluster.local.", qtype::A)),
            vec![a(name, [10, 43, 0, 10])]
        );
        // The name exists without IPv6 addresses: NOERROR, no records.
        assert_eq!(answers(z.lookup(name, qtype::AAAA)), vec![]);
        assert_eq!(answers(z.lookup(name, qtype::SRV)), vec![]);
    }

    #[test]
    fn headless_services_answer_ready_endpoints_and_endpoint_names() {
        let z = zone();
        let name = "pg.db.svc.cluster.local";
        assert_eq!(
            answers(z.lookup(name, qtype::A)),
            vec![a(name, [10, 42, 0, 7]), a(name, [10, 42, 1, 3])]
        );
        let host = "pg-0.pg.db.svc.cluster.local";
        assert_eq!(
            answers(z.lookup(host, qtype::A)),
            vec![a(host, [10, 42, 0, 7])]
        );
        let dashed = "10-42-1-3.pg.db.svc.cluster.local";
        assert_eq!(
            answers(z.lookup(dashed, qtype::A)),
            vec![a(dashed, [10, 42, 1, 3])]
        );
        // The not-ready address is not published.
        assert_eq!(
            z.lookup("10-42-2-9.pg.db.svc.cluster.local", qtype::A),
            Lookup::NxDomain
        );
        assert_eq!(
            z.lookup("pg-1.pg.db.svc.cluster.local", qtype::A),
            Lookup::NxDomain
        );
    }

    #[test]
    fn publish_not_ready_addresses_includes_them() {
        let mut z = zone();
        let mut pg = service("db", "pg", "None");
        pg.spec.publish_not_ready_addresses = Some(true);
        z.put_service(&pg);
        assert_eq!(
            answers(z.lookup("pg.db.svc.cluster.local", qtype::A)).len(),
            3
        );
    }

    #[test]
    fn srv_records_for_named_ports() {
        let z = zone();
        let name = "_http._tcp.web.default.svc.cluster.local";
        let Lookup::Found {
            answers,
            additional,
        } = z.lookup(name, qtype::SRV)
        else {
            panic!("no SRV");
        };
        assert_eq!(
            answers,
            vec![Record {
                name: name.into(),
                ttl: RECORD_TTL,
                data: RecordData::Srv {
                    priority: 0,
                    weight: 100,
                    port: 80,
                    target: "web.default.svc.cluster.local".into()
                }
            }]
        );
        assert_eq!(
            additional,
            vec![a("web.default.svc.cluster.local", [10, 43, 0, 10])]
        );
        // Headless: one per ready endpoint, with the endpoint's port.
        let answers = answers_of(z.lookup("_sql._tcp.pg.db.svc.cluster.local", qtype::SRV));
        let targets: Vec<(u16, String)> = answers
            .iter()
            .map(|r| match &r.data {
                RecordData::Srv { port, target, .. } => (*port, target.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            targets,
            vec![
                (5432, "pg-0.pg.db.svc.cluster.local".to_string()),
                (5432, "10-42-1-3.pg.db.svc.cluster.local".to_string())
            ]
        );
        assert_eq!(
            z.lookup("_http._udp.web.default.svc.cluster.local", qtype::SRV),
            Lookup::NxDomain
        );
        assert_eq!(
            z.lookup("_dns._tcp.web.default.svc.cluster.local", qtype::SRV),
            Lookup::NxDomain
        );
    }

    fn answers_of(l: Lookup) -> Vec<Record> {
        answers(l)
    }

    #[test]
    fn unknown_names_inside_the_domain_do_not_exist() {
        let z = zone();
        for name in [
            "nope.default.svc.cluster.local",
            "web.other.svc.cluster.local",
            "a.b.c.d.e.f.cluster.local",
            "google.com.default.svc.cluster.local",
            "web.default.cluster.local",
            "nothing.cluster.local",
        ] {
            assert_eq!(z.lookup(name, qtype::A), Lookup::NxDomain, "{name}");
        }
        // Intermediate names exist.
        assert_eq!(answers(z.lookup("svc.cluster.local", qtype::A)), vec![]);
        assert_eq!(
            answers(z.lookup("default.svc.cluster.local", qtype::A)),
            vec![]
        );
        assert_eq!(answers(z.lookup("cluster.local", qtype::A)), vec![]);
        assert_eq!(
            answers(z.lookup("cluster.local", qtype::SOA)),
            vec![z.soa()]
        );
    }

    #[test]
    fn names_outside_the_domain_go_upstream() {
        let z = zone();
        assert_eq!(z.lookup("example.com", qtype::A), Lookup::Outside);
        assert_eq!(z.lookup("notcluster.local", qtype::A), Lookup::Outside);
        assert_eq!(z.lookup("local", qtype::A), Lookup::Outside);
        assert_eq!(
            z.lookup("1.2.168.192.in-addr.arpa", qtype::PTR),
            Lookup::Outside
        );
        assert!(!z.contains("xcluster.local"));
        assert!(z.contains("a.cluster.local."));
    }

    #[test]
    fn nothing_is_answered_before_the_first_list() {
        let mut z = Zone::new("cluster.local");
        assert_eq!(
            z.lookup("web.default.svc.cluster.local", qtype::A),
            Lookup::NotReady
        );
        z.set_services(&[]);
        assert_eq!(
            z.lookup("web.default.svc.cluster.local", qtype::A),
            Lookup::NotReady
        );
        z.set_endpoints(&[]);
        assert_eq!(
            z.lookup("web.default.svc.cluster.local", qtype::A),
            Lookup::NxDomain
        );
        assert_eq!(z.lookup("example.com", qtype::A), Lookup::Outside);
    }

    #[test]
    fn pod_names_and_reverse_lookups() {
        let z = zone();
        let name = "10-42-0-9.default.pod.cluster.local";
        assert_eq!(
            answers(z.lookup(name, qtype::A)),
            vec![a(name, [10, 42, 0, 9])]
        );
        assert_eq!(
            z.lookup("not-an-ip.default.pod.cluster.local", qtype::A),
            Lookup::NxDomain
        );
        let rev = "10.0.43.10.in-addr.arpa";
        assert_eq!(
            answers(z.lookup(rev, qtype::PTR)),
            vec![Record {
                name: rev.into(),
                ttl: RECORD_TTL,
                data: RecordData::Ptr("web.default.svc.cluster.local".into())
            }]
        );
    }

    #[test]
    fn external_name_services_answer_a_cname() {
        let z = zone();
        let name = "search.default.svc.cluster.local";
        assert_eq!(
            answers(z.lookup(name, qtype::A)),
            vec![Record {
                name: name.into(),
                ttl: RECORD_TTL,
                data: RecordData::Cname("search.example.com".into())
            }]
        );
    }

    #[test]
    fn changes_show_and_bump_the_serial() {
        let mut z = zone();
        let before = z.serial();
        z.put_service(&service("default", "web", "10.43.0.11"));
        assert_ne!(z.serial(), before);
        let name = "web.default.svc.cluster.local";
        assert_eq!(
            answers(z.lookup(name, qtype::A)),
            vec![a(name, [10, 43, 0, 11])]
        );
        z.remove_service(&service("default", "web", ""));
        assert_eq!(z.lookup(name, qtype::A), Lookup::NxDomain);
        z.remove_endpoints(&endpoints("db", "pg", &[], &[]));
        assert_eq!(
            answers(z.lookup("pg.db.svc.cluster.local", qtype::A)),
            vec![]
        );
    }
}
