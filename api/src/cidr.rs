//! IPv4 CIDR blocks: parsing, membership, and cutting a cluster range into per-node subnets.
//! Shared by the agent (pod network) and the server (`--cluster-cidr`, node IPAM), which also
//! builds without the agent.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 network, always stored with its host bits cleared (`10.42.3.7/16` parses as
/// `10.42.0.0/16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ipv4Cidr {
    network: Ipv4Addr,
    prefix: u8,
}

/// A string that is not `a.b.c.d/n` with n in 0..=32.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IPv4 CIDR such as 10.42.0.0/16")]
pub struct CidrError(pub String);

/// The default cluster range of pod addresses, a /24 of it per node.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
/// The default name of the bridge the pods of a node hang off.
pub const DEFAULT_BRIDGE: &str = "skiff0";

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

impl Ipv4Cidr {
    /// The network containing `addr` with `prefix` bits (host bits cleared).
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Result<Ipv4Cidr, CidrError> {
        if prefix > 32 {
            return Err(CidrError(format!("{addr}/{prefix}")));
        }
        Ok(Ipv4Cidr {
            network: Ipv4Addr::from(u32::from(addr) & mask(prefix)),
            prefix,
        })
    }

    /// The default cluster range, [`DEFAULT_CLUSTER_CIDR`].
    pub const fn default_cluster() -> Ipv4Cidr {
        Ipv4Cidr {
            network: Ipv4Addr::new(10, 42, 0, 0),
            prefix: 16,
        }
    }

    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// How many addresses the block holds (2^(32-prefix)).
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & mask(self.prefix) == u32::from(self.network)
    }

    /// Whether `other` lies entirely inside this block.
    pub fn contains_cidr(&self, other: &Ipv4Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.network)
    }

    /// The `n`-th address of the block (0 is the network address), if inside it.
    pub fn nth(&self, n: u64) -> Option<Ipv4Addr> {
        (n < self.size()).then(|| Ipv4Addr::from(u32::from(self.network) + n as u32))
    }

    /// The offset of `addr` inside the block.
    pub fn offset_of(&self, addr: Ipv4Addr) -> Option<u64> {
        self.contains(addr)
            .then(|| u64::from(u32::from(addr) - u32::from(self.network)))
    }

    /// How many `/prefix` subnets the block splits into (0 if `prefix` is shorter).
    pub fn subnet_count(&self, prefix: u8) -> u64 {
        if prefix < self.prefix || prefix > 32 {
            0
        } else {
            1u64 << (prefix - self.prefix)
        }
    }

    /// The `i`-th `/prefix` subnet of the block.
    pub fn subnet(&self, prefix: u8, i: u64) -> Option<Ipv4Cidr> {
        if i >= self.subnet_count(prefix) {
            return None;
        }
        let step = 1u64 << (32 - u32::from(prefix));
        let start = u64::from(u32::from(self.network)) + i * step;
        Some(Ipv4Cidr {
            network: Ipv4Addr::from(start as u32),
            prefix,
        })
    }

    /// The first subnet of `prefix` bits not in `used` (which may hold anything; only subnets
    /// of this block count).
    pub fn first_free_subnet<'a>(
        &self,
        prefix: u8,
        used: impl IntoIterator<Item = &'a Ipv4Cidr>,
    ) -> Option<Ipv4Cidr> {
        let mut taken = std::collections::BTreeSet::new();
        for u in used {
            if self.contains_cidr(u) || u.contains_cidr(self) {
                // A used block larger than a subnet takes every subnet it covers.
                let first = u32::from(u.network).max(u32::from(self.network));
                let count = self.subnet_count(prefix).max(1);
                let step = 1u64 << (32 - u32::from(prefix));
                let start_index = u64::from(first - u32::from(self.network)) / step;
                let covered = (u.size() / step).max(1).min(count);
                for j in start_index..start_index + covered {
                    taken.insert(j);
                }
            }
        }
        (0..self.subnet_count(prefix))
            .find(|i| !taken.contains(i))
            .and_then(|i| self.subnet(prefix, i))
    }
}

impl FromStr for Ipv4Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || CidrError(s.to_string());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        Ipv4Cidr::new(addr, prefix).map_err(|_| bad())
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cluster_range_is_the_documented_one() {
        assert_eq!(
            DEFAULT_CLUSTER_CIDR.parse::<Ipv4Cidr>().unwrap(),
            Ipv4Cidr::default_cluster()
        );
    }

    fn c(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_normalizes() {
        assert_eq!(c("10.42.3.7/16").to_string(), "10.42.0.0/16");
        assert_eq!(c("0.0.0.0/0").size(), 1 << 32);
        assert!("10.42.0.0".parse::<Ipv4Cidr>().is_err());
        assert!("10.42.0.0/33".parse::<Ipv4Cidr>().is_err());
        assert!("10.42.0/16".parse::<Ipv4Cidr>().is_err());
        assert!("fd00::/64".parse::<Ipv4Cidr>().is_err());
    }

    #[test]
    fn membership_and_offsets() {
        let n = c("10.42.1.0/24");
        assert!(n.contains("10.42.1.255".parse().unwrap()));
        assert!(!n.contains("10.42.2.0".parse().unwrap()));
        assert_eq!(n.nth(1), Some("10.42.1.1".parse().unwrap()));
        assert_eq!(n.nth(256), None);
        assert_eq!(n.offset_of("10.42.1.9".parse().unwrap()), Some(9));
        assert!(c("10.42.0.0/16").contains_cidr(&n));
        assert!(!n.contains_cidr(&c("10.42.0.0/16")));
    }

    #[test]
    fn splits_into_node_subnets() {
        let cluster = c("10.42.0.0/16");
        assert_eq!(cluster.subnet_count(24), 256);
        assert_eq!(cluster.subnet(24, 0), Some(c("10.42.0.0/24")));
        assert_eq!(cluster.subnet(24, 255), Some(c("10.42.255.0/24")));
        assert_eq!(cluster.subnet(24, 256), None);
        assert_eq!(cluster.subnet_count(8), 0);
    }

    #[test]
    fn first_free_skips_used_and_foreign_blocks() {
        let cluster = c("10.42.0.0/16");
        let used = [c("10.42.0.0/24"), c("10.42.2.0/24"), c("192.168.0.0/24")];
        assert_eq!(
            cluster.first_free_subnet(24, &used),
            Some(c("10.42.1.0/24"))
        );
        let used = [c("10.42.0.0/23")];
        assert_eq!(
            cluster.first_free_subnet(24, &used),
            Some(c("10.42.2.0/24"))
        );
        let small = c("10.42.0.0/23");
        let used = [c("10.42.0.0/24"), c("10.42.1.0/24")];
        assert_eq!(small.first_free_subnet(24, &used), None);
        // A used block that covers the whole cluster range leaves nothing.
        assert_eq!(small.first_free_subnet(24, &[c("10.0.0.0/8")]), None);
    }
}
