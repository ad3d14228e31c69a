//! The service proxy: watches Services and Endpoints and programs iptables NAT chains so that
//! connections to a ClusterIP (or a NodePort on any local address) reach a ready endpoint.
//!
//! ```text
//! start(Client, ProxyConfig) -> Result<(), ProxyError>    // watchers + the sync thread
//! rules::build(&[Service], &[Endpoints], &RuleConfig) -> Ruleset
//! Applier::new(backend).sync(&Ruleset) -> Result<SyncReport, ProxyError>
//! Applier::in_place() -> Result<bool, ProxyError>          // are our jumps and chains intact?
//! ```
//!
//! Writes go through `iptables-restore --noflush`, one call per sync, which declares (and so
//! flushes) only skiff's own chains; the first sync (and any repair) reads the owned chains
//! back with `iptables-save`, rewrites those that differ from the wanted rules and removes
//! stale ones; later syncs compare with what they applied last (no reading back) and rewrite
//! only the chains whose rules changed. Changes are
//! coalesced (a sync at most every `min_sync_interval`), and every `check_interval` the rules
//! are read back: if someone removed a jump or one of skiff's chains, everything is rewritten.
//!
//! LoadBalancer Services (k3s ServiceLB's model, see the server's `servicelb` controller): the
//! proxy checks whether a host process holds one of their ports on the node's address (a
//! bind probe), keeps the answer on its Node as the `servicelb.skiff.io/ports-in-use`
//! annotation, and serves on the node's address the ports of the Services whose
//! `status.loadBalancer.ingress` lists this node and whose ports are free here.

pub mod iptables;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::client::{Client, WatchEvent};
use api::core::{Endpoints, Node, Service, SERVICE_LB_PORTS_IN_USE};
use api::discovery::EndpointSlice;
use api::object::Resource;
use futures_lite::StreamExt;

pub use iptables::{Backend, Iptables, IptablesError, SavedTable};
pub use rules::{RuleConfig, Ruleset, Table};

/// Why the proxy could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Iptables(#[from] IptablesError),
    #[error("starting the proxy's sync thread: {0}")]
    Thread(std::io::Error),
}

/// Settings of the service proxy.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub rules: RuleConfig,
    /// Changes that arrive within this time after the first are applied together.
    pub min_sync_interval: Duration,
    /// How often the rules are read back and repaired.
    pub check_interval: Duration,
    pub iptables: Iptables,
    /// This node's name: LoadBalancer Services are served only when it is known.
    pub node_name: Option<String>,
    /// This node's address (its InternalIP), where ports in use are probed.
    pub node_ip: Option<String>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            rules: RuleConfig::default(),
            min_sync_interval: Duration::from_millis(100),
            check_interval: Duration::from_secs(15),
            iptables: Iptables::default(),
            node_name: None,
            node_ip: None,
        }
    }
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The rules were read back from the kernel first (first sync or repair), and what
    /// differed was written.
    pub full: bool,
    pub chains_written: usize,
    pub chains_deleted: usize,
    pub jumps_inserted: usize,
    /// Bytes given to iptables-restore (0: nothing changed, nothing was run).
    pub input_bytes: usize,
}

/// Applies rule sets, remembering what it applied so the next sync writes only the changes.
pub struct Applier<B: Backend = Iptables> {
    backend: B,
    applied: Option<Ruleset>,
}

impl<B: Backend> Applier<B> {
    pub fn new(backend: B) -> Applier<B> {
        Applier {
            backend,
            applied: None,
        }
    }

    /// Brings the kernel to `desired`: only the changed chains when the last sync succeeded,
    /// everything that differs from what is there (after reading it) otherwise.
    pub fn sync(&mut self, desired: &Ruleset) -> Result<SyncReport, ProxyError> {
        self.sync_owned(desired.clone())
    }

    /// [`Applier::sync`] without copying the rule set.
    pub fn sync_owned(&mut self, desired: Ruleset) -> Result<SyncReport, ProxyError> {
        let Some(applied) = &self.applied else {
            return self.full_sync_owned(desired);
        };
        let input = rules::restore_input(&desired, &applied.chains, &[]);
        let report = report_of(&input, false);
        if !input.is_empty() {
            if let Err(e) = self.backend.restore(&input) {
                self.applied = None;
                return Err(e.into());
            }
        }
        self.applied = Some(desired);
        Ok(report)
    }

    /// Reads the owned chains back from the kernel, rewrites the ones that differ from
    /// `desired`, deletes owned chains that are no longer wanted (also ones left by an earlier
    /// run) and inserts missing jumps.
    pub fn full_sync(&mut self, desired: &Ruleset) -> Result<SyncReport, ProxyError> {
        self.full_sync_owned(desired.clone())
    }

    fn full_sync_owned(&mut self, desired: Ruleset) -> Result<SyncReport, ProxyError> {
        self.applied = None;
        let mut current = BTreeMap::new();
        let mut missing = Vec::new();
        for table in [Table::Nat, Table::Filter] {
            let saved = SavedTable::parse(&self.backend.save(table)?);
            for jump in rules::JUMPS.iter().filter(|j| j.0 == table) {
                let target = jump.2.rsplit("-j ").next().unwrap_or("");
                if !saved.has_jump(jump.1, target) {
                    missing.push(*jump);
                }
            }
            for (chain, rules) in saved.chains {
                if rules::owned_chain(table, &chain) {
                    current.insert((table, chain), rules);
                }
            }
        }
        let input = rules::restore_input(&desired, &current, &missing);
        let report = report_of(&input, true);
        if !input.is_empty() {
            self.backend.restore(&input)?;
        }
        self.applied = Some(desired);
        Ok(report)
    }

    /// Whether the jumps and every applied chain (with its number of rules) are still there.
    /// False before the first sync.
    pub fn in_place(&self) -> Result<bool, ProxyError> {
        let Some(applied) = &self.applied else {
            return Ok(false);
        };
        for table in [Table::Nat, Table::Filter] {
            let saved = SavedTable::parse(&self.backend.save(table)?);
            for jump in rules::JUMPS.iter().filter(|j| j.0 == table) {
                let target = jump.2.rsplit("-j ").next().unwrap_or("");
                if !saved.has_jump(jump.1, target) {
                    return Ok(false);
                }
            }
            for ((t, chain), wanted) in &applied.chains {
                if *t != table {
                    continue;
                }
                match saved.chains.get(chain) {
                    Some(rules) if rules.len() == wanted.len() => {}
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
    }

    /// Checks and, if something was removed, rewrites everything. Returns the report of the
    /// repair, if one was needed.
    pub fn repair(&mut self) -> Result<Option<SyncReport>, ProxyError> {
        if self.applied.is_none() || self.in_place()? {
            return Ok(None);
        }
        let Some(desired) = self.applied.take() else {
            return Ok(None);
        };
        self.full_sync_owned(desired).map(Some)
    }

    /// Builds the rules of `services` and `endpoints` and syncs them.
    pub fn apply_objects(
        &mut self,
        services: &[Service],
        endpoints: &[Endpoints],
        cfg: &RuleConfig,
    ) -> Result<SyncReport, ProxyError> {
        self.sync_owned(rules::build(services, endpoints, cfg))
    }

    /// What was last applied.
    pub fn applied(&self) -> Option<&Ruleset> {
        self.applied.as_ref()
    }
}

fn report_of(input: &str, full: bool) -> SyncReport {
    let mut r = SyncReport {
        full,
        input_bytes: input.len(),
        ..Default::default()
    };
    for line in input.lines() {
        if line.starts_with(':') {
            r.chains_written += 1;
        } else if line.starts_with("-X ") {
            r.chains_deleted += 1;
        } else if line.starts_with("-I ") {
            r.jumps_inserted += 1;
        }
    }
    // Deleted chains are declared (flushed) too; count them once.
    r.chains_written -= r.chains_deleted;
    r
}

/// The proxy's copy of the cluster's Services and EndpointSlices (as kube-proxy, it reads a
/// Service's endpoints from its slices).
#[derive(Default)]
struct World {
    services: BTreeMap<(String, String), Service>,
    /// By namespace and slice name.
    slices: BTreeMap<(String, String), EndpointSlice>,
    nodes: BTreeMap<(String, String), Node>,
    services_listed: bool,
    endpoints_listed: bool,
    nodes_listed: bool,
}

/// One kind's part of the [`World`].
trait Reflected: Resource + Send + 'static {
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), Self>, &mut bool);

    /// Whether a change from `old` to `new` can change the rules.
    fn matters(_old: &Self, _new: &Self) -> bool {
        true
    }
}

impl Reflected for Node {
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), Self>, &mut bool) {
        (&mut w.nodes, &mut w.nodes_listed)
    }

    /// Heartbeats change a Node every few seconds; only its addresses and annotations
    /// matter here.
    fn matters(old: &Self, new: &Self) -> bool {
        old.status.addresses != new.status.addresses
            || old.metadata.annotations != new.metadata.annotations
    }
}

impl Reflected for Service {
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), Self>, &mut bool) {
        (&mut w.services, &mut w.services_listed)
    }
}

impl Reflected for EndpointSlice {
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), Self>, &mut bool) {
        (&mut w.slices, &mut w.endpoints_listed)
    }
}

fn key<K: Resource>(o: &K) -> (String, String) {
    (o.meta().namespace().to_string(), o.meta().name.clone())
}

fn lock(world: &Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    // A panic elsewhere cannot leave the maps half-written in a way that matters: the next
    // list replaces them.
    world.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lists then watches `K` for ever, keeping its part of `world` current and poking `notify`
/// after each change. A watch that ends resumes; one that fails (410 Expired, a lost
/// connection) lists again.
async fn reflect<K: Reflected>(client: Client, world: Arc<Mutex<World>>, notify: Sender<()>) {
    let kind = K::KIND.info().kind;
    loop {
        let (items, mut rv) = match client.list::<K>(None, None, None).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(kind, "service proxy: list failed, retrying: {e}");
                smol::Timer::after(Duration::from_secs(2)).await;
                continue;
            }
        };
        {
            let mut w = lock(&world);
            let (map, listed) = K::part(&mut w);
            *map = items.into_iter().map(|o| (key(&o), o)).collect();
            *listed = true;
        }
        let _ = notify.send(());
        'watch: loop {
            let mut stream = match client
                .watch::<K>(None, &rv, None, None, Some(Duration::from_secs(300)))
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(kind, "service proxy: watch failed, listing again: {e}");
                    smol::Timer::after(Duration::from_secs(1)).await;
                    break 'watch;
                }
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                        rv = o.meta().resource_version.clone();
                        let old = K::part(&mut lock(&world)).0.insert(key(&o), o.clone());
                        if old.is_some_and(|old| !K::matters(&old, &o)) {
                            continue;
                        }
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        rv = o.meta().resource_version.clone();
                        K::part(&mut lock(&world)).0.remove(&key(&o));
                    }
                    Ok(WatchEvent::Bookmark { resource_version }) => {
                        rv = resource_version;
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(kind, "service proxy: watch ended, listing again: {e}");
                        break 'watch;
                    }
                }
                let _ = notify.send(());
            }
        }
    }
}

/// Starts the proxy: a watcher task per kind on the global executor and the sync thread
/// (iptables calls block). Returns once they run.
pub fn start(client: Client, cfg: ProxyConfig) -> Result<(), ProxyError> {
    let world = Arc::new(Mutex::new(World::default()));
    let (tx, rx) = std::sync::mpsc::channel();
    let w = world.clone();
    let c = client.clone();
    let serves_load_balancers = cfg.node_name.is_some();
    std::thread::Builder::new()
        .name("service-proxy".into())
        .spawn(move || sync_loop(&w, &rx, &cfg, &c))
        .map_err(ProxyError::Thread)?;
    if serves_load_balancers {
        smol::spawn(reflect::<Node>(client.clone(), world.clone(), tx.clone())).detach();
    } else {
        lock(&world).nodes_listed = true;
    }
    smol::spawn(reflect::<Service>(
        client.clone(),
        world.clone(),
        tx.clone(),
    ))
    .detach();
    smol::spawn(reflect::<EndpointSlice>(client, world, tx)).detach();
    Ok(())
}

/// Waits for changes, coalesces them, syncs; checks and repairs when idle.
fn sync_loop(world: &Mutex<World>, rx: &Receiver<()>, cfg: &ProxyConfig, client: &Client) {
    let mut applier = Applier::new(cfg.iptables.clone());
    let mut pending = false;
    let mut last_check = Instant::now();
    loop {
        let wait = if pending {
            cfg.min_sync_interval.max(Duration::from_secs(1))
        } else {
            cfg.check_interval
        };
        match rx.recv_timeout(wait) {
            Ok(()) => pending = true,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if pending {
            // Let a burst of changes land before building the rules once.
            std::thread::sleep(cfg.min_sync_interval);
            while rx.try_recv().is_ok() {}
            let (services, endpoints, own_node) = {
                let w = lock(world);
                if !(w.services_listed && w.endpoints_listed && w.nodes_listed) {
                    // Not before every list: an empty world would remove working rules.
                    continue;
                }
                let own = cfg
                    .node_name
                    .as_ref()
                    .and_then(|n| w.nodes.get(&(String::new(), n.clone())).cloned());
                (
                    w.services.values().cloned().collect::<Vec<_>>(),
                    api::discovery::endpoints_by_service(w.slices.values()),
                    own,
                )
            };
            let started = Instant::now();
            let lbs = match &own_node {
                Some(node) => load_balancers(node, &services, cfg, client),
                None => BTreeMap::new(),
            };
            let built = rules::build_with_load_balancers(&services, &endpoints, &cfg.rules, &lbs);
            match applier.sync_owned(built) {
                Ok(r) => {
                    pending = false;
                    tracing::debug!(
                        services = services.len(),
                        full = r.full,
                        chains = r.chains_written,
                        deleted = r.chains_deleted,
                        took = ?started.elapsed(),
                        "service rules synced"
                    );
                }
                // pending stays set: retried after a second.
                Err(e) => tracing::warn!("service proxy: sync failed, retrying: {e}"),
            }
        }
        if last_check.elapsed() >= cfg.check_interval {
            last_check = Instant::now();
            // A host process may have taken (or freed) a LoadBalancer port meanwhile.
            if lock(world)
                .services
                .values()
                .any(|s| s.spec.is_skiff_load_balancer())
            {
                pending = true;
            }
            match applier.repair() {
                Ok(Some(r)) => tracing::warn!(
                    chains = r.chains_written,
                    "service proxy: rules had been removed; rewrote them"
                ),
                Ok(None) => {}
                Err(e) => tracing::warn!("service proxy: checking the rules failed: {e}"),
            }
        }
    }
}

/// Whether a host process holds `PROTOCOL/port` on `ip` (binding it fails with "address in
/// use"). The probe socket lives for the instant of the check; an address that is not local
/// (or any other error) is not "in use".
fn port_in_use(ip: std::net::IpAddr, port: &str) -> bool {
    let Some((proto, number)) = port.split_once('/') else {
        return false;
    };
    let Ok(number) = number.parse::<u16>() else {
        return false;
    };
    let addr = std::net::SocketAddr::new(ip, number);
    let r = match proto {
        "UDP" => std::net::UdpSocket::bind(addr).map(drop),
        _ => std::net::TcpListener::bind(addr).map(drop),
    };
    matches!(r, Err(e) if e.kind() == std::io::ErrorKind::AddrInUse)
}

/// The LoadBalancer Services this node serves, with the addresses to serve them on; keeps
/// the Node's ports-in-use annotation current on the way (blocking: runs on the sync thread).
fn load_balancers(
    node: &Node,
    services: &[Service],
    cfg: &ProxyConfig,
    client: &Client,
) -> BTreeMap<(String, String), Vec<String>> {
    let mut own: Vec<String> = ["InternalIP", "ExternalIP"]
        .iter()
        .filter_map(|t| node.status.address(t))
        .chain(cfg.node_ip.as_deref())
        .filter(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string)
        .collect();
    own.sort();
    own.dedup();
    let probe_ip = cfg
        .node_ip
        .as_deref()
        .or_else(|| node.status.address("InternalIP"))
        .and_then(|a| a.parse::<std::net::IpAddr>().ok());
    let ours: Vec<&Service> = services
        .iter()
        .filter(|s| s.spec.is_skiff_load_balancer())
        .collect();
    let wanted: BTreeSet<String> = ours
        .iter()
        .flat_map(|s| s.spec.load_balancer_ports())
        .collect();
    let in_use: BTreeSet<String> = match probe_ip {
        Some(ip) => wanted.into_iter().filter(|p| port_in_use(ip, p)).collect(),
        None => BTreeSet::new(),
    };
    let note = in_use.iter().cloned().collect::<Vec<_>>().join(",");
    if node.metadata.annotations.get(SERVICE_LB_PORTS_IN_USE) != Some(&note) {
        let patch =
            serde_json::json!({"metadata": {"annotations": {SERVICE_LB_PORTS_IN_USE: note}}});
        let write = client.patch_value(
            api::Kind::Node,
            None,
            &node.metadata.name,
            "application/merge-patch+json",
            &patch,
        );
        let timeout = async {
            smol::Timer::after(Duration::from_secs(10)).await;
            Err(api::client::ClientError::Protocol("timed out".into()))
        };
        // The watch brings the written Node back, which syncs again; a failure is retried at
        // the next check.
        if let Err(e) = smol::block_on(futures_lite::future::or(write, timeout)) {
            tracing::warn!(node = %node.metadata.name, "service proxy: cannot note the LoadBalancer ports in use: {e}");
        }
    }
    let mut out = BTreeMap::new();
    for s in ours {
        let listed = s.status.load_balancer.as_ref().is_some_and(|lb| {
            lb.ingress
                .iter()
                .filter_map(|i| i.ip.as_deref())
                .any(|ip| own.iter().any(|o| o == ip))
        });
        if !listed
            || s.spec
                .load_balancer_ports()
                .iter()
                .any(|p| in_use.contains(p))
        {
            continue;
        }
        out.insert(
            (s.metadata.namespace().to_string(), s.metadata.name.clone()),
            own.clone(),
        );
    }
    out
}
