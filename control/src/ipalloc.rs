//! ClusterIP and NodePort allocation for Services.
//!
//! Allocation runs inside the Service's create or update write transaction and reads every
//! stored Service to learn what is taken, so two concurrent creates can never receive the same
//! address or port (their closures run one after the other and each sees the other's write),
//! and a deleted Service releases what it held with no bookkeeping at all.
//!
//! As Kubernetes does, dynamic ClusterIPs come from the upper part of the range first, keeping
//! the low addresses (such as `.1` and `.10`) for Services that ask for a fixed one (the API
//! and DNS Services).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use api::core::Service;
use api::validation::FieldError;
use api::Kind;

use crate::error::ApiError;
use crate::store::Txn;

/// The default `--service-cidr`.
pub const DEFAULT_SERVICE_CIDR: &str = "10.43.0.0/16";
/// The default `--service-node-port-range`.
pub const DEFAULT_NODE_PORT_RANGE: &str = "30000-32767";

/// A flag that does not describe a usable range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RangeError {
    #[error("invalid service CIDR {0:?}: want an IPv4 network such as 10.43.0.0/16")]
    Cidr(String),
    #[error("service CIDR {0:?} is too small: it needs a prefix of /30 or shorter")]
    TooSmall(String),
    #[error("invalid node port range {0:?}: want FIRST-LAST, such as 30000-32767")]
    Ports(String),
}

/// Where ClusterIPs and NodePorts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRanges {
    /// The network address of the service CIDR.
    network: u32,
    prefix: u8,
    /// First and last NodePort, inclusive.
    pub node_ports: (i32, i32),
}

impl Default for ServiceRanges {
    fn default() -> Self {
        ServiceRanges {
            network: u32::from(Ipv4Addr::new(10, 43, 0, 0)),
            prefix: 16,
            node_ports: (30000, 32767),
        }
    }
}

/// A parsed `--service-cidr`: network address and prefix length (bytes, so that the flag
/// struct stays small).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCidr(pub [u8; 4], pub u8);

/// A parsed `--service-node-port-range`, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePortRange(pub u16, pub u16);

/// clap's parser of `--service-cidr`.
pub fn parse_service_cidr(s: &str) -> Result<ServiceCidr, RangeError> {
    let r = ServiceRanges::parse(s, DEFAULT_NODE_PORT_RANGE)?;
    Ok(ServiceCidr(r.network.to_be_bytes(), r.prefix))
}

/// clap's parser of `--service-node-port-range`.
pub fn parse_node_port_range(s: &str) -> Result<NodePortRange, RangeError> {
    let r = ServiceRanges::parse(DEFAULT_SERVICE_CIDR, s)?;
    Ok(NodePortRange(r.node_ports.0 as u16, r.node_ports.1 as u16))
}

impl ServiceRanges {
    /// The ranges of parsed flags.
    pub fn new(cidr: ServiceCidr, ports: NodePortRange) -> ServiceRanges {
        ServiceRanges {
            network: u32::from_be_bytes(cidr.0),
            prefix: cidr.1,
            node_ports: (i32::from(ports.0), i32::from(ports.1)),
        }
    }

    /// Parses `--service-cidr` (`10.43.0.0/16`) and `--service-node-port-range`
    /// (`30000-32767`).
    pub fn parse(cidr: &str, node_ports: &str) -> Result<ServiceRanges, RangeError> {
        let bad = || RangeError::Cidr(cidr.to_string());
        let (addr, prefix) = cidr.trim().split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 30 {
            return Err(if prefix <= 32 {
                RangeError::TooSmall(cidr.to_string())
            } else {
                bad()
            });
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        let bad_ports = || RangeError::Ports(node_ports.to_string());
        let (first, last) = node_ports.trim().split_once('-').ok_or_else(bad_ports)?;
        let first: i32 = first.trim().parse().map_err(|_| bad_ports())?;
        let last: i32 = last.trim().parse().map_err(|_| bad_ports())?;
        if first < 1 || last > 65535 || first > last {
            return Err(bad_ports());
        }
        Ok(ServiceRanges {
            network: u32::from(addr) & mask,
            prefix,
            node_ports: (first, last),
        })
    }

    /// The CIDR as text, `10.43.0.0/16`.
    pub fn cidr(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }

    fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    /// Whether `ip` may be a ClusterIP: inside the CIDR, not its network or broadcast address.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let offset = u64::from(u32::from(ip).wrapping_sub(self.network));
        offset >= 1 && offset < self.size() - 1
    }

    /// The usable offsets kept for explicit requests: Kubernetes' static band,
    /// min(max(16, size/16), 256) addresses.
    fn static_band(&self) -> u64 {
        (self.size() / 16).clamp(16, 256).min(self.size() - 2)
    }

    fn address(&self, offset: u64) -> Ipv4Addr {
        Ipv4Addr::from(self.network.wrapping_add(offset as u32))
    }

    /// A free address: a random start in the dynamic band, scanning upwards and wrapping, then
    /// the static band.
    fn pick_ip(&self, taken: &BTreeSet<Ipv4Addr>, seed: u64) -> Option<Ipv4Addr> {
        let usable = self.size() - 2; // offsets 1..=usable
        let band = self.static_band();
        let dynamic = usable - band; // offsets band+1..=usable
        if dynamic > 0 {
            let start = seed % dynamic;
            for i in 0..dynamic {
                let ip = self.address(band + 1 + (start + i) % dynamic);
                if !taken.contains(&ip) {
                    return Some(ip);
                }
            }
        }
        (1..=band)
            .map(|o| self.address(o))
            .find(|ip| !taken.contains(ip))
    }

    fn pick_port(&self, taken: &BTreeSet<i32>, seed: u64) -> Option<i32> {
        let (first, last) = self.node_ports;
        let n = (last - first + 1) as u64;
        let start = seed % n;
        (0..n)
            .map(|i| first + ((start + i) % n) as i32)
            .find(|p| !taken.contains(p))
    }
}

fn random_seed() -> u64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // Any start works; randomness only spreads allocations.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    }
    u64::from_le_bytes(b)
}

/// What the other Services hold.
#[derive(Debug, Default)]
pub struct Taken {
    pub ips: BTreeSet<Ipv4Addr>,
    pub node_ports: BTreeSet<i32>,
}

impl Taken {
    /// What `services` hold, leaving out `namespace/name` (the Service being written).
    pub fn from_services<'a>(
        services: impl IntoIterator<Item = &'a Service>,
        namespace: &str,
        name: &str,
    ) -> Taken {
        let mut t = Taken::default();
        for s in services {
            if s.metadata.namespace() == namespace && s.metadata.name == name {
                continue;
            }
            if let Some(ip) = s.spec.cluster_ip.as_deref().and_then(|i| i.parse().ok()) {
                t.ips.insert(ip);
            }
            t.node_ports.extend(
                s.spec
                    .ports
                    .iter()
                    .filter_map(|p| p.node_port)
                    .filter(|p| *p != 0),
            );
        }
        t
    }
}

fn needs_node_ports(s: &Service) -> bool {
    match s.spec.type_or_default() {
        "NodePort" => true,
        "LoadBalancer" => s.spec.allocate_load_balancer_node_ports != Some(false),
        _ => false,
    }
}

/// Fills in `svc`'s ClusterIP and NodePorts (keeping what `old`, the stored version, had when
/// the new one leaves them out) and checks the ones it asks for against `ranges` and `taken`.
pub fn assign(
    ranges: &ServiceRanges,
    taken: &Taken,
    svc: &mut Service,
    old: Option<&Service>,
    seed: u64,
) -> Result<(), ApiError> {
    let name = svc.metadata.name.clone();
    let invalid = |field: &str, value: &str, why: String| {
        ApiError::invalid(
            Kind::Service,
            &name,
            vec![FieldError::invalid(field, value, why)],
        )
    };
    let spec = &mut svc.spec;
    if spec.type_or_default() == "ExternalName" {
        spec.cluster_ip = None;
        spec.cluster_ips.clear();
        return Ok(());
    }
    // A write that leaves out what the stored object has keeps it (Kubernetes does the same,
    // so a PUT of a manifest without clusterIP works).
    if let Some(o) = old.filter(|o| o.spec.type_or_default() != "ExternalName") {
        if spec.cluster_ip.as_deref().unwrap_or("").is_empty() {
            spec.cluster_ip = o.spec.cluster_ip.clone();
        }
    }
    let requested = spec.cluster_ip.clone().unwrap_or_default();
    let requested = if requested.is_empty() {
        spec.cluster_ips.first().cloned().unwrap_or_default()
    } else {
        requested
    };
    let unchanged = old.and_then(|o| o.spec.cluster_ip.as_deref()) == Some(requested.as_str());
    let ip = match requested.as_str() {
        "" => match ranges.pick_ip(&taken.ips, seed) {
            Some(ip) => ip.to_string(),
            None => {
                return Err(ApiError::internal(format!(
                    "failed to allocate a serviceIP: range is full ({})",
                    ranges.cidr()
                )))
            }
        },
        "None" => "None".to_string(),
        text if unchanged => text.to_string(),
        text => {
            let Ok(ip) = text.parse::<Ipv4Addr>() else {
                // The spec validation reports a malformed address.
                return Ok(());
            };
            if !ranges.contains(ip) {
                return Err(invalid(
                    "spec.clusterIPs",
                    text,
                    format!(
                        "failed to allocate IP {text}: provided IP is not in the valid range. The range of valid IPs is {}",
                        ranges.cidr()
                    ),
                ));
            }
            if taken.ips.contains(&ip) {
                return Err(invalid(
                    "spec.clusterIPs",
                    text,
                    format!("failed to allocate IP {text}: provided IP is already allocated"),
                ));
            }
            text.to_string()
        }
    };
    spec.cluster_ip = Some(ip.clone());
    spec.cluster_ips = vec![ip];
    if spec.ip_families.is_empty() {
        spec.ip_families = vec!["IPv4".into()];
    }
    spec.ip_family_policy
        .get_or_insert_with(|| "SingleStack".into());

    if !needs_node_ports(svc) {
        return Ok(());
    }
    let keep_old = old.filter(|o| needs_node_ports(o));
    let mut used = taken.node_ports.clone();
    // Ports this Service asked for by number go first so a random pick cannot take them.
    let mut own: BTreeSet<(i32, String)> = BTreeSet::new();
    for (i, p) in svc.spec.ports.iter_mut().enumerate() {
        if p.node_port.unwrap_or(0) == 0 {
            p.node_port = keep_old.and_then(|o| {
                o.spec
                    .ports
                    .iter()
                    .find(|q| q.port == p.port && q.protocol == p.protocol)
                    .and_then(|q| q.node_port)
            });
        }
        let Some(np) = p.node_port.filter(|n| *n != 0) else {
            continue;
        };
        let field = format!("spec.ports[{i}].nodePort");
        let proto = p.protocol.clone().unwrap_or_default();
        let (first, last) = ranges.node_ports;
        let was_ours =
            keep_old.is_some_and(|o| o.spec.ports.iter().any(|q| q.node_port == Some(np)));
        if !was_ours && !(first..=last).contains(&np) {
            return Err(invalid(
                &field,
                &np.to_string(),
                format!("provided port is not in the valid range. The range of valid ports is {first}-{last}"),
            ));
        }
        if taken.node_ports.contains(&np) || !own.insert((np, proto)) {
            return Err(invalid(
                &field,
                &np.to_string(),
                "provided port is already allocated".into(),
            ));
        }
        used.insert(np);
    }
    let mut seed = seed;
    for p in &mut svc.spec.ports {
        if p.node_port.unwrap_or(0) != 0 {
            continue;
        }
        let Some(np) = ranges.pick_port(&used, seed) else {
            return Err(ApiError::internal(format!(
                "failed to allocate a nodePort: range is full ({}-{})",
                ranges.node_ports.0, ranges.node_ports.1
            )));
        };
        used.insert(np);
        p.node_port = Some(np);
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    Ok(())
}

/// [`assign`] against the Services stored in `txn`.
pub fn assign_in_txn(
    txn: &Txn,
    ranges: &ServiceRanges,
    svc: &mut Service,
    old: Option<&Service>,
) -> Result<(), ApiError> {
    let all: Vec<Service> = txn
        .list(Kind::Service, None)?
        .into_iter()
        .filter_map(|o| match o {
            api::AnyObject::Service(s) => Some(s),
            _ => None,
        })
        .collect();
    let taken = Taken::from_services(&all, svc.metadata.namespace(), &svc.metadata.name);
    assign(ranges, &taken, svc, old, random_seed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::ServicePort;
    use api::meta::ObjectMeta;

    fn svc(name: &str, ty: &str, ip: Option<&str>, node_ports: &[Option<i32>]) -> Service {
        let mut s = Service {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        s.spec.type_ = Some(ty.into());
        s.spec.cluster_ip = ip.map(str::to_string);
        for (i, np) in node_ports.iter().enumerate() {
            s.spec.ports.push(ServicePort {
                name: Some(format!("p{i}")),
                port: 80 + i as i32,
                protocol: Some("TCP".into()),
                node_port: *np,
                ..Default::default()
            });
        }
        s
    }

    fn small() -> ServiceRanges {
        ServiceRanges::parse("10.96.0.0/28", "30000-30002").expect("ranges")
    }

    #[test]
    fn parses_flags() {
        let r = ServiceRanges::parse("10.43.7.9/16", "30000-32767").expect("parse");
        assert_eq!(r.cidr(), "10.43.0.0/16");
        assert_eq!(r, ServiceRanges::default());
        assert!(r.contains("10.43.0.1".parse().expect("ip")));
        assert!(r.contains("10.43.255.254".parse().expect("ip")));
        assert!(!r.contains("10.43.0.0".parse().expect("ip")));
        assert!(!r.contains("10.43.255.255".parse().expect("ip")));
        assert!(!r.contains("10.44.0.1".parse().expect("ip")));
        assert!(matches!(
            ServiceRanges::parse("10.43.0.0", "1-2"),
            Err(RangeError::Cidr(_))
        ));
        assert!(matches!(
            ServiceRanges::parse("10.43.0.0/31", "1-2"),
            Err(RangeError::TooSmall(_))
        ));
        assert!(matches!(
            ServiceRanges::parse("10.43.0.0/16", "3-2"),
            Err(RangeError::Ports(_))
        ));
    }

    #[test]
    fn dynamic_ips_avoid_the_static_band_until_it_is_all_that_is_left() {
        let r = ServiceRanges::default();
        let mut taken = Taken::default();
        for seed in 0..200 {
            let mut s = svc("a", "ClusterIP", None, &[None]);
            assign(&r, &taken, &mut s, None, seed * 7919).expect("assign");
            let ip: Ipv4Addr = s
                .spec
                .cluster_ip
                .as_deref()
                .expect("ip")
                .parse()
                .expect("v4");
            assert!(r.contains(ip));
            assert!(
                u32::from(ip) - r.network > 256,
                "{ip} is in the static band"
            );
            assert!(taken.ips.insert(ip), "{ip} given twice");
            assert_eq!(s.spec.cluster_ips, vec![ip.to_string()]);
        }
        // A /28 has 14 usable addresses, all in the static band (16 at least).
        let r = small();
        let mut taken = Taken::default();
        for seed in 0..14 {
            let mut s = svc("a", "ClusterIP", None, &[None]);
            assign(&r, &taken, &mut s, None, seed).expect("assign");
            taken.ips.insert(
                s.spec
                    .cluster_ip
                    .as_deref()
                    .expect("ip")
                    .parse()
                    .expect("v4"),
            );
        }
        assert_eq!(taken.ips.len(), 14);
        let mut s = svc("full", "ClusterIP", None, &[None]);
        let e = assign(&r, &taken, &mut s, None, 0).expect_err("full");
        assert!(e.to_string().contains("range is full"), "{e}");
    }

    #[test]
    fn explicit_ips_are_checked() {
        let r = small();
        let mut taken = Taken::default();
        taken.ips.insert("10.96.0.5".parse().expect("ip"));
        let mut s = svc("a", "ClusterIP", Some("10.96.0.6"), &[None]);
        assign(&r, &taken, &mut s, None, 0).expect("free address");
        assert_eq!(s.spec.cluster_ip.as_deref(), Some("10.96.0.6"));

        let mut s = svc("a", "ClusterIP", Some("10.96.0.5"), &[None]);
        let e = assign(&r, &taken, &mut s, None, 0).expect_err("taken");
        assert_eq!(e.code(), 422);
        assert!(
            e.to_string().contains("provided IP is already allocated"),
            "{e}"
        );

        for outside in ["10.96.0.0", "10.96.0.15", "10.97.0.1"] {
            let mut s = svc("a", "ClusterIP", Some(outside), &[None]);
            let e = assign(&r, &taken, &mut s, None, 0).expect_err("outside");
            assert!(
                e.to_string()
                    .contains("provided IP is not in the valid range"),
                "{e}"
            );
        }
    }

    #[test]
    fn headless_and_external_name_get_no_address() {
        let r = small();
        let mut s = svc("h", "ClusterIP", Some("None"), &[None]);
        assign(&r, &Taken::default(), &mut s, None, 0).expect("headless");
        assert_eq!(s.spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(s.spec.cluster_ips, vec!["None".to_string()]);
        let mut s = svc("e", "ExternalName", Some("10.96.0.3"), &[]);
        assign(&r, &Taken::default(), &mut s, None, 0).expect("external");
        assert_eq!(s.spec.cluster_ip, None);
    }

    #[test]
    fn updates_keep_what_was_allocated() {
        let r = small();
        let mut old = svc("a", "NodePort", None, &[None, None]);
        assign(&r, &Taken::default(), &mut old, None, 3).expect("create");
        let mut new = svc("a", "NodePort", None, &[None, None]);
        assign(&r, &Taken::default(), &mut new, Some(&old), 9).expect("update");
        assert_eq!(new.spec.cluster_ip, old.spec.cluster_ip);
        assert_eq!(new.spec.ports, old.spec.ports);
        // Switching to ClusterIP leaves the node ports out.
        let mut back = svc("a", "ClusterIP", None, &[None, None]);
        assign(&r, &Taken::default(), &mut back, Some(&old), 9).expect("update");
        assert!(back.spec.ports.iter().all(|p| p.node_port.is_none()));
        assert_eq!(back.spec.cluster_ip, old.spec.cluster_ip);
    }

    #[test]
    fn node_ports_conflicts_and_exhaustion() {
        let r = small();
        let mut taken = Taken::default();
        let mut a = svc("a", "NodePort", None, &[Some(30001), None]);
        assign(&r, &taken, &mut a, None, 0).expect("a");
        let ports: Vec<i32> = a.spec.ports.iter().filter_map(|p| p.node_port).collect();
        assert_eq!(ports[0], 30001);
        assert!((30000..=30002).contains(&ports[1]) && ports[1] != 30001);
        taken = Taken::from_services([&a], "default", "other");
        let mut b = svc("b", "NodePort", None, &[Some(30001)]);
        let e = assign(&r, &taken, &mut b, None, 0).expect_err("taken");
        assert!(
            e.to_string().contains("provided port is already allocated"),
            "{e}"
        );
        assert!(e.to_string().contains("spec.ports[0].nodePort"), "{e}");
        let mut b = svc("b", "NodePort", None, &[Some(31000)]);
        let e = assign(&r, &taken, &mut b, None, 0).expect_err("range");
        assert!(e.to_string().contains("30000-30002"), "{e}");
        let mut b = svc("b", "NodePort", None, &[None]);
        assign(&r, &taken, &mut b, None, 0).expect("the last one");
        taken = Taken::from_services([&a, &b], "default", "other");
        let mut c = svc("c", "LoadBalancer", None, &[None]);
        let e = assign(&r, &taken, &mut c, None, 0).expect_err("full");
        assert!(e.to_string().contains("range is full"), "{e}");
        // Deleting a (leaving it out of the scan) releases its ports.
        taken = Taken::from_services([&b], "default", "other");
        assign(&r, &taken, &mut c, None, 0).expect("released");
        // The Service itself is left out of the scan (an update keeps its own ports).
        let t = Taken::from_services([&a], "default", "a");
        assert!(t.node_ports.is_empty() && t.ips.is_empty());
    }
}
