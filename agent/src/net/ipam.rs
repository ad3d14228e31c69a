//! Pod address management for this node's podCIDR, persisted in one small JSON file in the
//! agent's data dir (written to a temporary file and renamed, so a crash leaves the old or the
//! new state, never half of one). The network address, the gateway (the bridge, `.1`) and the
//! broadcast address are never handed out; a pod keeps its address until it is released.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use api::cidr::Ipv4Cidr;

/// Why an address could not be handed out or the state not be kept.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error("the node has no podCIDR yet")]
    NoRange,
    #[error("no free address left in {0}")]
    Exhausted(Ipv4Cidr),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct State {
    #[serde(rename = "podCIDR")]
    pod_cidr: Option<String>,
    /// Address -> pod uid.
    allocations: BTreeMap<Ipv4Addr, String>,
}

/// The node's pod addresses.
#[derive(Debug)]
pub struct Ipam {
    path: PathBuf,
    range: Option<Ipv4Cidr>,
    allocations: BTreeMap<Ipv4Addr, String>,
}

impl Ipam {
    /// Loads the state kept at `path` (none yet is an empty state).
    pub fn load(path: &Path) -> Result<Ipam, IpamError> {
        let state = match std::fs::read(path) {
            Ok(bytes) => {
                serde_json::from_slice::<State>(&bytes).map_err(|e| IpamError::Corrupt {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(source) => {
                return Err(IpamError::Io {
                    what: "read",
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let range = match state.pod_cidr.as_deref() {
            Some(s) => Some(s.parse().map_err(|e| IpamError::Corrupt {
                path: path.to_path_buf(),
                message: format!("{e}"),
            })?),
            None => None,
        };
        Ok(Ipam {
            path: path.to_path_buf(),
            range,
            allocations: state.allocations,
        })
    }

    /// The podCIDR addresses come from.
    pub fn range(&self) -> Option<Ipv4Cidr> {
        self.range
    }

    /// The gateway address (the bridge's): the first host address of the range.
    pub fn gateway(&self) -> Option<Ipv4Addr> {
        self.range.and_then(|r| r.nth(1))
    }

    /// Sets the range. A different range than before drops every allocation outside it
    /// (the Node was re-created with another podCIDR: those pods must be re-created anyway).
    pub fn set_range(&mut self, range: Ipv4Cidr) -> Result<(), IpamError> {
        if self.range == Some(range) {
            return Ok(());
        }
        self.allocations.retain(|a, _| range.contains(*a));
        self.range = Some(range);
        self.save()
    }

    /// The address of pod `uid`, if it has one.
    pub fn get(&self, uid: &str) -> Option<Ipv4Addr> {
        self.allocations
            .iter()
            .find(|(_, u)| u.as_str() == uid)
            .map(|(a, _)| *a)
    }

    /// Every pod that holds an address.
    pub fn holders(&self) -> Vec<String> {
        self.allocations.values().cloned().collect()
    }

    /// The address of pod `uid`: the one it has, or the lowest free one (saved before it is
    /// answered, so it is never handed out twice, even across a crash).
    pub fn allocate(&mut self, uid: &str) -> Result<Ipv4Addr, IpamError> {
        if let Some(a) = self.get(uid) {
            return Ok(a);
        }
        let range = self.range.ok_or(IpamError::NoRange)?;
        let last = range.size().saturating_sub(1);
        let free = (2..last)
            .filter_map(|i| range.nth(i))
            .find(|a| !self.allocations.contains_key(a))
            .ok_or(IpamError::Exhausted(range))?;
        self.allocations.insert(free, uid.to_string());
        if let Err(e) = self.save() {
            self.allocations.remove(&free);
            return Err(e);
        }
        Ok(free)
    }

    /// Gives pod `uid`'s address back; answers it if it had one.
    pub fn release(&mut self, uid: &str) -> Result<Option<Ipv4Addr>, IpamError> {
        let Some(addr) = self.get(uid) else {
            return Ok(None);
        };
        self.allocations.remove(&addr);
        self.save()?;
        Ok(Some(addr))
    }

    fn save(&self) -> Result<(), IpamError> {
        let state = State {
            pod_cidr: self.range.map(|r| r.to_string()),
            allocations: self.allocations.clone(),
        };
        let io = |what, source| IpamError::Io {
            what,
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("create the directory of", e))?;
        }
        let bytes = serde_json::to_vec_pretty(&state).map_err(|e| IpamError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let tmp = self.path.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
            f.write_all(&bytes).map_err(|e| io("write", e))?;
            f.sync_all().map_err(|e| io("sync", e))?;
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| io("replace", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_each_address_once_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("net/ipam.json");
        let mut ipam = Ipam::load(&path).unwrap();
        assert!(matches!(ipam.allocate("a"), Err(IpamError::NoRange)));
        ipam.set_range("10.42.3.0/24".parse().unwrap()).unwrap();
        assert_eq!(ipam.gateway(), Some("10.42.3.1".parse().unwrap()));
        let a = ipam.allocate("a").unwrap();
        let b = ipam.allocate("b").unwrap();
        assert_eq!(a, "10.42.3.2".parse::<Ipv4Addr>().unwrap());
        assert_eq!(b, "10.42.3.3".parse::<Ipv4Addr>().unwrap());
        assert_eq!(ipam.allocate("a").unwrap(), a, "a pod keeps its address");

        // A restarted agent finds the same allocations.
        let mut again = Ipam::load(&path).unwrap();
        assert_eq!(again.get("b"), Some(b));
        assert_eq!(again.release("a").unwrap(), Some(a));
        assert_eq!(again.release("a").unwrap(), None);
        let c = again.allocate("c").unwrap();
        assert_eq!(c, a, "a released address is handed out again");
        assert_eq!(Ipam::load(&path).unwrap().get("c"), Some(c));
    }

    #[test]
    fn runs_out_and_skips_reserved_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::load(&dir.path().join("ipam.json")).unwrap();
        ipam.set_range("10.42.0.0/29".parse().unwrap()).unwrap();
        let got: Vec<Ipv4Addr> = (0..5)
            .map(|i| ipam.allocate(&format!("p{i}")).unwrap())
            .collect();
        // .0 network, .1 gateway, .7 broadcast are never handed out.
        assert_eq!(got.first(), Some(&"10.42.0.2".parse().unwrap()));
        assert_eq!(got.last(), Some(&"10.42.0.6".parse().unwrap()));
        assert!(matches!(ipam.allocate("p5"), Err(IpamError::Exhausted(_))));
    }

    #[test]
    fn a_new_range_drops_addresses_outside_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::load(&dir.path().join("ipam.json")).unwrap();
        ipam.set_range("10.42.0.0/24".parse().unwrap()).unwrap();
        ipam.allocate("a").unwrap();
        ipam.set_range("10.42.1.0/24".parse().unwrap()).unwrap();
        assert_eq!(ipam.get("a"), None);
        assert_eq!(
            ipam.allocate("b").unwrap(),
            "10.42.1.2".parse::<Ipv4Addr>().unwrap()
        );
    }

    #[test]
    fn corrupt_state_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.json");
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(Ipam::load(&path), Err(IpamError::Corrupt { .. })));
    }
}
