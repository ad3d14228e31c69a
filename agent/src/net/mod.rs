//! The pod network of this node (host-gw, as flannel's backend of that name):
//!
//! - a bridge (`skiff0`) holding the first address of the node's podCIDR, the pods' gateway;
//! - per pod a veth pair: the host end on the bridge, the other end moved into the pod's
//!   network namespace as `eth0` with an address from the podCIDR and a default route via
//!   the bridge (addresses kept in [`ipam`], on disk, so a restarted agent keeps them);
//! - routes to every other node's podCIDR through that node's InternalIP, and an
//!   `unreachable` route for the whole cluster range beneath them, so pod traffic for a range
//!   no node has never follows the default route off the machine;
//! - iptables (see [`iptables`]): MASQUERADE for pod traffic leaving the cluster range,
//!   FORWARD accepts for pod traffic, hostPort DNAT from the node's address.
//!
//! ```text
//! Network::open(NetConfig) -> Result<Arc<Network>, NetError>   // blocking: loads the IPAM
//! network.clone().follow_nodes(Client).await                   // never returns
//! network.is_ready() -> bool                                    // the podCIDR is known
//! network.attach(uid, &netns_path, &[ContainerPort]) -> Result<Ipv4Addr, NetError>  // blocking
//! network.detach(uid) -> Result<(), NetError>                   // blocking
//! network.pod_ip(uid) -> Option<Ipv4Addr>
//! network.release_unknown(&known_uids)                          // blocking
//! ```
//!
//! Every call that touches the kernel blocks: run it through `smol::unblock`. Configuration
//! inside a pod happens on a short-lived thread of its own that enters the pod's namespace.

pub mod ipam;
pub mod iptables;
pub mod netlink;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use api::client::{Client, WatchEvent};
use api::core::{ContainerPort, Node};
use async_channel::{Receiver, Sender};
use futures_lite::StreamExt;
use netlink_packet_route::route::RouteType;

pub use api::cidr::{CidrError, Ipv4Cidr, DEFAULT_BRIDGE, DEFAULT_CLUSTER_CIDR};
pub use ipam::{Ipam, IpamError};
pub use iptables::{ensure_jump, restore, IptablesError};
pub use netlink::{Netlink, NetlinkError};

/// Metric of the cluster range's `unreachable` route (below every real route to a podCIDR,
/// which are more specific anyway).
const UNREACHABLE_METRIC: u32 = 4000;

/// How the node's pod network is set up (flags of the agent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNetworkSettings {
    /// The whole pod range of the cluster (the server's `--cluster-cidr`).
    pub cluster_cidr: Ipv4Cidr,
    /// The bridge the pods hang off.
    pub bridge: String,
}

impl Default for PodNetworkSettings {
    fn default() -> Self {
        PodNetworkSettings {
            cluster_cidr: Ipv4Cidr::default_cluster(),
            bridge: DEFAULT_BRIDGE.into(),
        }
    }
}

/// Everything the pod network needs.
#[derive(Clone, Debug)]
pub struct NetConfig {
    pub settings: PodNetworkSettings,
    /// `<data-dir>/net`: the IPAM state.
    pub state_dir: PathBuf,
    pub node_name: String,
    /// The node's InternalIP (hostPorts listen there; other nodes route to it).
    pub node_ip: String,
}

/// Why the pod network could not do something.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("the pod network is not ready: the node has no podCIDR yet")]
    NotReady,
    #[error(transparent)]
    Ipam(#[from] IpamError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Iptables(#[from] IptablesError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("inside the pod's network namespace: {0}")]
    Pod(String),
}

struct State {
    ipam: Ipam,
    /// The bridge is set up for the current range.
    bridge_ready: bool,
    host_ports: BTreeMap<String, Vec<iptables::HostPort>>,
    /// Route failures already logged (not repeated every sync).
    route_warnings: BTreeSet<String>,
}

/// The node's pod network. See the module documentation.
pub struct Network {
    cfg: NetConfig,
    state: Mutex<State>,
    /// Dropped (closing the channel) once the podCIDR is known and the bridge is up.
    ready_tx: Mutex<Option<Sender<()>>>,
    ready_rx: Receiver<()>,
}

/// The host-side name of a pod's veth: `sk` and 12 hex digits of its uid (15 bytes at most).
pub fn host_veth_name(uid: &str) -> String {
    let hex: String = uid
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if hex.len() >= 12 {
        format!("sk{}", &hex[hex.len() - 12..])
    } else {
        // Not a uuid (tests): a stable hash of it.
        let h = uid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("sk{:012x}", h & 0xffff_ffff_ffff)
    }
}

fn write_sysctl(path: &str, value: &str) -> Result<(), NetError> {
    std::fs::write(path, value).map_err(|source| NetError::Io {
        what: format!("set {path}"),
        source,
    })
}

impl Network {
    /// Loads the kept addresses; if the podCIDR is known from a previous run, sets the bridge
    /// up at once (so a node restarting without the server still networks its pods).
    pub fn open(cfg: NetConfig) -> Result<Arc<Network>, NetError> {
        let ipam = Ipam::load(&cfg.state_dir.join("ipam.json"))?;
        let (tx, rx) = async_channel::bounded(1);
        let net = Arc::new(Network {
            cfg,
            state: Mutex::new(State {
                ipam,
                bridge_ready: false,
                host_ports: BTreeMap::new(),
                route_warnings: BTreeSet::new(),
            }),
            ready_tx: Mutex::new(Some(tx)),
            ready_rx: rx,
        });
        let known = net.lock().ipam.range();
        if let Some(range) = known {
            if let Err(e) = net.set_pod_cidr(range) {
                tracing::warn!("cannot set up the pod network for {range} yet: {e}");
            }
        }
        Ok(net)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn settings(&self) -> &PodNetworkSettings {
        &self.cfg.settings
    }

    /// The node's podCIDR, once known.
    pub fn pod_cidr(&self) -> Option<Ipv4Cidr> {
        self.lock().ipam.range()
    }

    /// Whether pods can be attached (the podCIDR is known and the bridge set up).
    pub fn is_ready(&self) -> bool {
        self.lock().bridge_ready
    }

    /// Waits until [`Network::is_ready`].
    pub async fn ready(&self) {
        let _ = self.ready_rx.recv().await;
    }

    /// The address pod `uid` holds.
    pub fn pod_ip(&self, uid: &str) -> Option<Ipv4Addr> {
        self.lock().ipam.get(uid)
    }

    fn node_ip(&self) -> Option<Ipv4Addr> {
        self.cfg.node_ip.parse().ok()
    }

    /// Takes the node's podCIDR and sets up the bridge, sysctls, the cluster range's
    /// unreachable route and the iptables chains (all idempotent). Blocking.
    pub fn set_pod_cidr(&self, range: Ipv4Cidr) -> Result<(), NetError> {
        let mut st = self.lock();
        if st.ipam.range() != Some(range) {
            if let Some(old) = st.ipam.range() {
                tracing::warn!(%old, new = %range, "the node's podCIDR changed: pods keep no addresses from the old one");
            }
            st.ipam.set_range(range)?;
            st.bridge_ready = false;
        }
        if st.bridge_ready {
            return Ok(());
        }
        if !self.cfg.settings.cluster_cidr.contains_cidr(&range) {
            tracing::warn!(pod_cidr = %range, cluster_cidr = %self.cfg.settings.cluster_cidr,
                "the node's podCIDR is outside the agent's --cluster-cidr");
        }
        self.setup_host(range)?;
        // Without iptables pods still reach each other; only egress NAT and hostPorts are
        // missing, which is better than no pods at all.
        if let Err(e) = self.apply_iptables(&st) {
            tracing::error!("pod traffic leaving the cluster will not be masqueraded: {e}");
        }
        st.bridge_ready = true;
        drop(st);
        tracing::info!(pod_cidr = %range, bridge = %self.cfg.settings.bridge, "pod network ready");
        self.ready_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        Ok(())
    }

    fn setup_host(&self, range: Ipv4Cidr) -> Result<(), NetError> {
        write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
        // Bridged pod-to-pod traffic must pass iptables for Services to work between pods
        // of one node; the knob exists once br_netfilter is loaded.
        let bridge_nf = "/proc/sys/net/bridge/bridge-nf-call-iptables";
        if !Path::new(bridge_nf).exists() {
            let _ = std::process::Command::new("modprobe")
                .arg("br_netfilter")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        if Path::new(bridge_nf).exists() {
            if let Err(e) = write_sysctl(bridge_nf, "1") {
                tracing::warn!("{e}");
            }
        } else {
            tracing::warn!(
                "br_netfilter is not available: Services between pods of one node may not work"
            );
        }
        let gateway = range.nth(1).ok_or(NetError::NotReady)?;
        let mut nl = Netlink::open()?;
        let bridge = nl.ensure_bridge(&self.cfg.settings.bridge)?;
        nl.add_address(bridge, gateway, range.prefix())?;
        nl.set_up(bridge, None)?;
        nl.replace_unreachable(
            self.cfg.settings.cluster_cidr,
            UNREACHABLE_METRIC,
            netlink::SKIFF_ROUTE_PROTOCOL,
        )?;
        Ok(())
    }

    fn apply_iptables(&self, st: &State) -> Result<(), NetError> {
        let ports: Vec<iptables::HostPort> = st.host_ports.values().flatten().cloned().collect();
        iptables::apply(self.cfg.settings.cluster_cidr, &ports)?;
        Ok(())
    }

    /// Gives the pod its address and `eth0` in `netns` (the sandbox's network namespace
    /// file) and publishes its hostPorts; answers the address. Idempotent: an `eth0` left
    /// from an earlier try is replaced. Blocking.
    pub fn attach(
        &self,
        uid: &str,
        netns: &Path,
        ports: &[ContainerPort],
    ) -> Result<Ipv4Addr, NetError> {
        let (range, gateway, ip) = {
            let mut st = self.lock();
            if !st.bridge_ready {
                return Err(NetError::NotReady);
            }
            let range = st.ipam.range().ok_or(NetError::NotReady)?;
            let gateway = range.nth(1).ok_or(NetError::NotReady)?;
            (range, gateway, st.ipam.allocate(uid)?)
        };
        // The links are the pod's own, so pods are plumbed in parallel: only the address
        // allocation above and the hostPort rules below need the lock.
        let result = self.plumb(uid, netns, ip, range.prefix(), gateway);
        let mut st = self.lock();
        if let Err(e) = result {
            let host = host_veth_name(uid);
            if let Ok(mut nl) = Netlink::open() {
                let _ = nl.delete_link(&host);
            }
            let _ = st.ipam.release(uid);
            return Err(e);
        }
        let node_ip = self.node_ip();
        let host_ports: Vec<iptables::HostPort> = ports
            .iter()
            .filter_map(|p| {
                let host_port = u16::try_from(p.host_port?).ok().filter(|p| *p > 0)?;
                let host_ip = p
                    .host_ip
                    .as_deref()
                    .and_then(|h| h.parse().ok())
                    .filter(|h: &Ipv4Addr| !h.is_unspecified())
                    .or(node_ip)?;
                Some(iptables::HostPort {
                    protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                    host_ip,
                    host_port,
                    pod_ip: ip,
                    container_port: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        if !host_ports.is_empty() || st.host_ports.contains_key(uid) {
            st.host_ports.insert(uid.to_string(), host_ports);
            self.apply_iptables(&st)?;
        }
        Ok(ip)
    }

    fn plumb(
        &self,
        uid: &str,
        netns: &Path,
        ip: Ipv4Addr,
        prefix: u8,
        gateway: Ipv4Addr,
    ) -> Result<(), NetError> {
        let ns = std::fs::File::open(netns).map_err(|source| NetError::Io {
            what: format!("open {}", netns.display()),
            source,
        })?;
        // A half-done earlier try may have left an eth0 in the pod (deleting one end of a
        // veth pair deletes both).
        in_netns(&ns, |nl| nl.delete_link("eth0"))?;
        let host = host_veth_name(uid);
        let mut nl = Netlink::open()?;
        nl.delete_link(&host)?;
        nl.create_veth_into(&host, "eth0", &ns)?;
        let bridge = nl
            .link_index(&self.cfg.settings.bridge)?
            .ok_or(NetError::NotReady)?;
        let host_index = nl.link_index(&host)?.ok_or_else(|| {
            NetError::Pod(format!("the veth {host} vanished right after its creation"))
        })?;
        nl.set_up(host_index, Some(bridge))?;
        // Hairpin: a pod reaching itself through a Service is DNATed back to its own address;
        // with bridge-nf-call-iptables the frame is bridged back out of the port it came in
        // by, which a bridge port refuses unless in hairpin mode (the kubelet's hairpin-veth).
        nl.set_hairpin(host_index)?;
        in_netns(&ns, move |nl| {
            let eth0 = nl.link_index("eth0")?.ok_or(NetlinkError::Kernel {
                what: "find eth0".into(),
                errno: nix::Error::ENODEV,
            })?;
            nl.add_address(eth0, ip, prefix)?;
            nl.set_up(eth0, None)?;
            nl.add_default_route(gateway)
        })?;
        Ok(())
    }

    /// Removes the pod's veth and hostPorts and releases its address; nothing there is
    /// fine. Blocking.
    pub fn detach(&self, uid: &str) -> Result<(), NetError> {
        let mut st = self.lock();
        // Each step runs even if an earlier one failed; the first failure is answered.
        let veth = Netlink::open()
            .and_then(|mut nl| nl.delete_link(&host_veth_name(uid)))
            .map_err(NetError::from);
        let ports = if st.host_ports.remove(uid).is_some_and(|p| !p.is_empty()) && st.bridge_ready {
            self.apply_iptables(&st)
        } else {
            Ok(())
        };
        let released = st.ipam.release(uid).map_err(NetError::from);
        if let Ok(Some(ip)) = &released {
            tracing::debug!(%uid, %ip, "released the pod's address");
        }
        veth.and(ports).and(released.map(|_| ()))
    }

    /// Re-publishes the hostPorts of a pod adopted after an agent restart (iptables rules do
    /// not survive the agent only if someone flushed them, but the in-memory list does not
    /// survive at all). Blocking.
    pub fn adopt(&self, uid: &str, ports: &[ContainerPort]) -> Result<Option<Ipv4Addr>, NetError> {
        let Some(ip) = self.pod_ip(uid) else {
            return Ok(None);
        };
        let wanted = ports.iter().any(|p| p.host_port.is_some_and(|h| h > 0));
        if !wanted {
            return Ok(Some(ip));
        }
        let node_ip = self.node_ip();
        let mut st = self.lock();
        let hps: Vec<iptables::HostPort> = ports
            .iter()
            .filter_map(|p| {
                Some(iptables::HostPort {
                    protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                    host_ip: p
                        .host_ip
                        .as_deref()
                        .and_then(|h| h.parse().ok())
                        .filter(|h: &Ipv4Addr| !h.is_unspecified())
                        .or(node_ip)?,
                    host_port: u16::try_from(p.host_port?).ok().filter(|p| *p > 0)?,
                    pod_ip: ip,
                    container_port: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        st.host_ports.insert(uid.to_string(), hps);
        if st.bridge_ready {
            self.apply_iptables(&st)?;
        }
        Ok(Some(ip))
    }

    /// Releases the addresses (and veths) of pods not in `known` (leftovers of pods deleted
    /// while the agent was down). Blocking.
    pub fn release_unknown(&self, known: &[String]) {
        let holders = self.lock().ipam.holders();
        for uid in holders.iter().filter(|u| !known.contains(u)) {
            tracing::info!(%uid, "releasing the address of a pod no longer on this node");
            if let Err(e) = self.detach(uid) {
                tracing::warn!(%uid, "{e}");
            }
        }
    }

    /// Makes the routes to other nodes' podCIDRs match `nodes` (through each node's
    /// InternalIP; skiff's own routes to ranges no node has any more are removed). Blocking.
    pub fn sync_routes(&self, nodes: &[Node]) -> Result<(), NetError> {
        let own = self.pod_cidr();
        let node_ip = self.node_ip();
        let mut wanted: BTreeMap<Ipv4Cidr, Ipv4Addr> = BTreeMap::new();
        for n in nodes {
            if n.metadata.name == self.cfg.node_name {
                continue;
            }
            let Some(cidr) = n
                .spec
                .pod_cidr
                .as_deref()
                .and_then(|c| c.parse::<Ipv4Cidr>().ok())
            else {
                continue;
            };
            let Some(gw) = n
                .status
                .addresses
                .iter()
                .find(|a| a.type_ == "InternalIP")
                .and_then(|a| a.address.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            if Some(cidr) == own || Some(gw) == node_ip || gw.is_loopback() {
                continue;
            }
            wanted.insert(cidr, gw);
        }
        let mut nl = Netlink::open()?;
        for r in nl.routes()? {
            let ours = r.protocol == netlink::SKIFF_ROUTE_PROTOCOL && r.kind == RouteType::Unicast;
            if ours && wanted.get(&r.destination) != r.gateway.as_ref() {
                tracing::info!(dest = %r.destination, "removing the route to a node that is gone");
                nl.delete_route(&r)?;
            }
        }
        let mut st = self.lock();
        for (cidr, gw) in wanted {
            let key = format!("{cidr} via {gw}");
            match nl.replace_route_via(cidr, gw, netlink::SKIFF_ROUTE_PROTOCOL) {
                Ok(()) => {
                    if st.route_warnings.remove(&key) {
                        tracing::info!("route {key} added");
                    }
                }
                Err(e) => {
                    if st.route_warnings.insert(key.clone()) {
                        tracing::warn!(
                            "cannot route {key} (host-gw needs the nodes on one LAN): {e}"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Follows the Nodes (list, then watch; re-list when the watch breaks): takes this
    /// node's podCIDR when the server assigns it and keeps the routes to the other nodes.
    /// Never returns.
    pub async fn follow_nodes(self: Arc<Self>, client: Client) {
        let mut nodes: HashMap<String, Node> = HashMap::new();
        let mut rv = String::new();
        let mut failures = 0u32;
        loop {
            if rv.is_empty() {
                match client.list::<Node>(None, None, None).await {
                    Ok((list, list_rv)) => {
                        nodes = list
                            .into_iter()
                            .map(|n| (n.metadata.name.clone(), n))
                            .collect();
                        rv = list_rv;
                        failures = 0;
                        self.clone().nodes_changed(&nodes).await;
                    }
                    Err(e) => {
                        failures += 1;
                        if failures == 1 {
                            tracing::warn!("cannot list nodes for the pod network: {e}");
                        }
                        smol::Timer::after(Duration::from_secs(2)).await;
                        continue;
                    }
                }
            }
            let mut stream = match client
                .watch::<Node>(None, &rv, None, None, Some(Duration::from_secs(300)))
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!("cannot watch nodes: {e}");
                    rv.clear();
                    smol::Timer::after(Duration::from_secs(2)).await;
                    continue;
                }
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(n)) | Ok(WatchEvent::Modified(n)) => {
                        rv = n.metadata.resource_version.clone();
                        let relevant = nodes.get(&n.metadata.name).is_none_or(|old| {
                            old.spec.pod_cidr != n.spec.pod_cidr
                                || old.status.addresses != n.status.addresses
                        });
                        nodes.insert(n.metadata.name.clone(), n);
                        if relevant {
                            self.clone().nodes_changed(&nodes).await;
                        }
                    }
                    Ok(WatchEvent::Deleted(n)) => {
                        rv = n.metadata.resource_version.clone();
                        nodes.remove(&n.metadata.name);
                        self.clone().nodes_changed(&nodes).await;
                    }
                    Ok(WatchEvent::Bookmark { resource_version }) => rv = resource_version,
                    Err(_) => {
                        rv.clear();
                        break;
                    }
                }
            }
        }
    }

    async fn nodes_changed(self: Arc<Self>, nodes: &HashMap<String, Node>) {
        let own = nodes
            .get(&self.cfg.node_name)
            .and_then(|n| n.spec.pod_cidr.as_deref())
            .and_then(|c| c.parse::<Ipv4Cidr>().ok());
        let list: Vec<Node> = nodes.values().cloned().collect();
        smol::unblock(move || {
            if let Some(range) = own {
                if let Err(e) = self.set_pod_cidr(range) {
                    tracing::warn!("cannot set up the pod network: {e}");
                }
            }
            if let Err(e) = self.sync_routes(&list) {
                tracing::warn!("cannot update the routes to other nodes: {e}");
            }
        })
        .await;
    }
}

/// Runs `f` with a netlink socket inside the network namespace `ns`, on a thread of its own
/// (namespaces are per thread; this one ends right after).
fn in_netns<T: Send + 'static>(
    ns: &std::fs::File,
    f: impl FnOnce(&mut Netlink) -> Result<T, NetlinkError> + Send + 'static,
) -> Result<T, NetError> {
    let ns = ns.try_clone().map_err(|source| NetError::Io {
        what: "duplicate the namespace descriptor".into(),
        source,
    })?;
    std::thread::Builder::new()
        .name("pod-netns".into())
        .spawn(move || -> Result<T, NetError> {
            crate::sys::setns_net(&ns)
                .map_err(|e| NetError::Pod(format!("cannot enter the namespace: {e}")))?;
            let mut nl = Netlink::open()?;
            Ok(f(&mut nl)?)
        })
        .map_err(|source| NetError::Io {
            what: "spawn a thread for the pod's namespace".into(),
            source,
        })?
        .join()
        .unwrap_or_else(|_| Err(NetError::Pod("the namespace thread panicked".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_names_fit_and_differ() {
        let a = host_veth_name("6f1c2a9e-1b2c-4d5e-8f90-123456789abc");
        assert_eq!(a, "sk123456789abc");
        assert!(a.len() <= 15);
        let b = host_veth_name("pod-a");
        let c = host_veth_name("pod-b");
        assert_ne!(b, c);
        assert_eq!(b.len(), 14);
    }
}
