//! NetworkPolicy enforcement on this node: watches NetworkPolicies, the cluster's pods and the
//! namespaces' labels, and programs the filter-table chains of [`rules`] (the pod network's
//! `SKIFF-FORWARD` jumps to `SKIFF-NETPOL` before it accepts pod traffic).
//!
//! ```text
//! start(Client, NetpolConfig) -> Result<(), NetpolError>   // watchers + the sync thread
//! rules::build(&Inputs) -> Chains
//! Applier::new(backend).sync(Chains) -> Result<SyncReport, NetpolError>
//! clear(&Iptables) -> Result<(), NetpolError>              // a node with enforcement off
//! ```
//!
//! Writes go through `iptables-restore --noflush` as the Service proxy's do (one call per
//! sync, declaring only the enforcer's own chains): the first sync (and any repair) reads the
//! owned chains back with `iptables-save`, later ones compare with what they applied last and
//! rewrite only the chains whose rules changed. Changes are coalesced; every
//! `check_interval` the chains are read back and rewritten if someone removed one.
//!
//! Nodes read NetworkPolicies, pods and namespaces cluster-wide (the server's Node authorizer
//! allows it, as kube-router's and Calico's node agents are allowed by their own RBAC). A new
//! pod is isolated once its address is in its status and this node has seen it: during its
//! first second or so, before its address is known, its traffic is not yet filtered.

pub mod rules;

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::client::{Client, WatchEvent};
use api::core::{Namespace, Pod};
use api::networking::NetworkPolicy;
use api::object::Resource;
use futures_lite::StreamExt;

use crate::proxy::{Backend, Iptables, IptablesError, SavedTable, Table};
pub use rules::{Chains, Inputs, PodInfo};

/// Why the enforcer could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum NetpolError {
    #[error(transparent)]
    Iptables(#[from] IptablesError),
    #[error("starting the network policy sync thread: {0}")]
    Thread(std::io::Error),
}

/// Settings of the enforcer.
#[derive(Clone, Debug)]
pub struct NetpolConfig {
    /// This node's name: the policies of its pods are enforced.
    pub node_name: String,
    /// Changes that arrive within this time after the first are applied together.
    pub min_sync_interval: Duration,
    /// How often the chains are read back and repaired.
    pub check_interval: Duration,
    pub iptables: Iptables,
}

impl NetpolConfig {
    pub fn new(node_name: &str) -> NetpolConfig {
        NetpolConfig {
            node_name: node_name.to_string(),
            min_sync_interval: Duration::from_millis(100),
            check_interval: Duration::from_secs(15),
            iptables: Iptables::default(),
        }
    }
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The chains were read back from the kernel first (first sync or repair).
    pub full: bool,
    pub chains_written: usize,
    pub chains_deleted: usize,
    /// Bytes given to iptables-restore (0: nothing changed, nothing was run).
    pub input_bytes: usize,
}

/// Applies chain sets, remembering what it applied so the next sync writes only the changes.
pub struct Applier<B: Backend = Iptables> {
    backend: B,
    applied: Option<Chains>,
}

impl<B: Backend> Applier<B> {
    pub fn new(backend: B) -> Applier<B> {
        Applier {
            backend,
            applied: None,
        }
    }

    /// The owned chains in the kernel, with their rules.
    fn current(&self) -> Result<Chains, NetpolError> {
        let saved = SavedTable::parse(&self.backend.save(Table::Filter)?);
        Ok(saved
            .chains
            .into_iter()
            .filter(|(c, _)| rules::owned_chain(c))
            .collect())
    }

    /// Brings the kernel to `desired`: only the changed chains when the last sync succeeded,
    /// everything that differs from what is there (after reading it) otherwise.
    pub fn sync(&mut self, desired: Chains) -> Result<SyncReport, NetpolError> {
        let full = self.applied.is_none();
        let current = match self.applied.take() {
            Some(applied) => applied,
            None => self.current()?,
        };
        let input = rules::restore_input(&desired, &current);
        let report = SyncReport {
            full,
            chains_written: input.lines().filter(|l| l.starts_with(':')).count()
                - input.lines().filter(|l| l.starts_with("-X ")).count(),
            chains_deleted: input.lines().filter(|l| l.starts_with("-X ")).count(),
            input_bytes: input.len(),
        };
        if !input.is_empty() {
            // On failure `applied` stays empty: the next sync reads the kernel again.
            self.backend.restore(&input)?;
        }
        self.applied = Some(desired);
        Ok(report)
    }

    /// Whether every applied chain is still there with as many rules. False before the
    /// first sync.
    pub fn in_place(&self) -> Result<bool, NetpolError> {
        let Some(applied) = &self.applied else {
            return Ok(false);
        };
        let current = self.current()?;
        Ok(applied
            .iter()
            .all(|(c, rules)| current.get(c).is_some_and(|r| r.len() == rules.len())))
    }

    /// Checks and, if something was removed, rewrites everything. Returns the report of the
    /// repair, if one was needed.
    pub fn repair(&mut self) -> Result<Option<SyncReport>, NetpolError> {
        if self.applied.is_none() || self.in_place()? {
            return Ok(None);
        }
        let desired = self.applied.take().unwrap_or_default();
        self.sync(desired).map(Some)
    }

    /// What was last applied.
    pub fn applied(&self) -> Option<&Chains> {
        self.applied.as_ref()
    }
}

/// Removes every policy chain but the (emptied) top chain the pod network jumps to: for a
/// node whose enforcement is turned off, so that rules of an earlier run stop filtering.
pub fn clear(iptables: &Iptables) -> Result<(), NetpolError> {
    let mut a = Applier::new(iptables.clone());
    let mut empty = Chains::new();
    empty.insert(rules::TOP_CHAIN.to_string(), Vec::new());
    a.sync(empty).map(drop)
}

/// The enforcer's copy of the cluster.
#[derive(Default)]
struct World {
    /// By namespace and name; pods without an address of the pod network are left out.
    pods: BTreeMap<(String, String), PodInfo>,
    /// Namespace name -> its labels.
    namespaces: BTreeMap<(String, String), BTreeMap<String, String>>,
    policies: BTreeMap<(String, String), NetworkPolicy>,
    pods_listed: bool,
    namespaces_listed: bool,
    policies_listed: bool,
}

/// One kind's part of the [`World`], kept as the part of each object the rules read.
trait Mirrored: Resource + Send + 'static {
    type Entry: PartialEq + Send + 'static;
    /// None: the object is not kept (a pod without an address).
    fn entry(self) -> Option<Self::Entry>;
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), Self::Entry>, &mut bool);
}

impl Mirrored for Pod {
    type Entry = PodInfo;
    fn entry(self) -> Option<PodInfo> {
        PodInfo::of(&self)
    }
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), PodInfo>, &mut bool) {
        (&mut w.pods, &mut w.pods_listed)
    }
}

impl Mirrored for Namespace {
    type Entry = BTreeMap<String, String>;
    fn entry(self) -> Option<Self::Entry> {
        Some(self.metadata.labels)
    }
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), Self::Entry>, &mut bool) {
        (&mut w.namespaces, &mut w.namespaces_listed)
    }
}

impl Mirrored for NetworkPolicy {
    type Entry = NetworkPolicy;
    fn entry(self) -> Option<NetworkPolicy> {
        Some(self)
    }
    fn part(w: &mut World) -> (&mut BTreeMap<(String, String), NetworkPolicy>, &mut bool) {
        (&mut w.policies, &mut w.policies_listed)
    }
}

fn key<K: Resource>(o: &K) -> (String, String) {
    (o.meta().namespace().to_string(), o.meta().name.clone())
}

fn lock(world: &Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    // The next list replaces whatever a panic elsewhere left.
    world.lock().unwrap_or_else(|p| p.into_inner())
}

/// Puts `o`'s entry in (or takes it out of) its part; whether that changed anything.
fn store<K: Mirrored>(world: &Mutex<World>, o: K) -> bool {
    let k = key(&o);
    let entry = o.entry();
    let mut w = lock(world);
    let map = K::part(&mut w).0;
    match entry {
        Some(e) if map.get(&k) == Some(&e) => false,
        Some(e) => {
            map.insert(k, e);
            true
        }
        None => map.remove(&k).is_some(),
    }
}

/// Lists then watches `K` for ever, keeping its part of `world` current and poking `notify`
/// after each change that matters. A watch that ends resumes; one that fails lists again.
async fn reflect<K: Mirrored>(client: Client, world: Arc<Mutex<World>>, notify: Sender<()>) {
    let kind = K::KIND.info().kind;
    loop {
        let (items, mut rv) = match client.list::<K>(None, None, None).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(kind, "network policy: list failed, retrying: {e}");
                smol::Timer::after(Duration::from_secs(2)).await;
                continue;
            }
        };
        {
            let mut w = lock(&world);
            let (map, listed) = K::part(&mut w);
            *map = items
                .into_iter()
                .filter_map(|o| {
                    let k = key(&o);
                    o.entry().map(|e| (k, e))
                })
                .collect();
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
                    tracing::warn!(kind, "network policy: watch failed, listing again: {e}");
                    smol::Timer::after(Duration::from_secs(1)).await;
                    break 'watch;
                }
            };
            while let Some(ev) = stream.next().await {
                let changed = match ev {
                    Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                        rv = o.meta().resource_version.clone();
                        store(&world, o)
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        rv = o.meta().resource_version.clone();
                        K::part(&mut lock(&world)).0.remove(&key(&o)).is_some()
                    }
                    Ok(WatchEvent::Bookmark { resource_version }) => {
                        rv = resource_version;
                        false
                    }
                    Err(e) => {
                        tracing::debug!(kind, "network policy: watch ended, listing again: {e}");
                        break 'watch;
                    }
                };
                if changed {
                    let _ = notify.send(());
                }
            }
        }
    }
}

/// Starts the enforcer: a watcher task per kind on the global executor and the sync thread
/// (iptables calls block). Returns once they run.
pub fn start(client: Client, cfg: NetpolConfig) -> Result<(), NetpolError> {
    let world = Arc::new(Mutex::new(World::default()));
    let (tx, rx) = std::sync::mpsc::channel();
    let w = world.clone();
    std::thread::Builder::new()
        .name("network-policy".into())
        .spawn(move || sync_loop(&w, &rx, &cfg))
        .map_err(NetpolError::Thread)?;
    smol::spawn(reflect::<NetworkPolicy>(
        client.clone(),
        world.clone(),
        tx.clone(),
    ))
    .detach();
    smol::spawn(reflect::<Namespace>(
        client.clone(),
        world.clone(),
        tx.clone(),
    ))
    .detach();
    smol::spawn(reflect::<Pod>(client, world, tx)).detach();
    Ok(())
}

/// The chains the world asks for, or None before every kind has been listed (an empty world
/// would remove working rules).
fn desired(world: &Mutex<World>, node: &str) -> Option<(Chains, usize, usize)> {
    let w = lock(world);
    if !(w.pods_listed && w.namespaces_listed && w.policies_listed) {
        return None;
    }
    let pods: Vec<PodInfo> = w.pods.values().cloned().collect();
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = w
        .namespaces
        .iter()
        .map(|((_, name), labels)| (name.clone(), labels.clone()))
        .collect();
    let policies: Vec<NetworkPolicy> = w.policies.values().cloned().collect();
    drop(w);
    let chains = rules::build(&Inputs {
        node,
        pods: &pods,
        namespaces: &namespaces,
        policies: &policies,
    });
    Some((chains, policies.len(), pods.len()))
}

/// Waits for changes, coalesces them, syncs; checks and repairs when idle.
fn sync_loop(world: &Mutex<World>, rx: &Receiver<()>, cfg: &NetpolConfig) {
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
            let started = Instant::now();
            let Some((chains, policies, pods)) = desired(world, &cfg.node_name) else {
                continue;
            };
            let built = started.elapsed();
            match applier.sync(chains) {
                Ok(r) => {
                    pending = false;
                    tracing::debug!(
                        policies,
                        pods,
                        full = r.full,
                        chains = r.chains_written,
                        deleted = r.chains_deleted,
                        ?built,
                        took = ?started.elapsed(),
                        "network policy rules synced"
                    );
                }
                // pending stays set: retried after a second.
                Err(e) => tracing::warn!("network policy: sync failed, retrying: {e}"),
            }
        }
        if last_check.elapsed() >= cfg.check_interval {
            last_check = Instant::now();
            match applier.repair() {
                Ok(Some(r)) => tracing::warn!(
                    chains = r.chains_written,
                    "network policy: chains had been removed; rewrote them"
                ),
                Ok(None) => {}
                Err(e) => tracing::warn!("network policy: checking the chains failed: {e}"),
            }
        }
    }
}
