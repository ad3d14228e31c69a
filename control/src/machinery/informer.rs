//! One shared, watch-driven cache of the kinds the scheduler and the controllers read.
//!
//! Kubernetes' controllers each read through a shared informer: a local copy of the objects
//! kept current by one list and one watch, plus change notifications. This is the same idea
//! inside one process: [`Informers::start`] lists the kinds once, then a single task applies
//! the store's watch events to the [`Cache`] and only then tells each subscriber what changed,
//! so a subscriber that reads the cache after a notification sees at least that change.
//!
//! Objects are kept postcard-encoded ([`Packed`], about a tenth of their decoded size: a
//! decoded pod of a typical manifest holds some 13 KiB of memory, the same pod packed about
//! 1.2 KiB) and decoded when read, so 30,000 pods cost tens of MiB, not hundreds. Readers
//! that scan many objects and keep few filter on the metadata first ([`Objects::iter_where`]
//! decodes only the metadata of the objects it skips). Notifications carry the decoded
//! objects, which live only as long as their subscribers keep them.
//! If the watch ends (the store closes, or the task fell so far behind that the hub cut it off)
//! the task re-lists and sends [`Change::Resync`], after which subscribers should re-examine
//! everything they care about.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use api::meta::ObjectMeta;
use api::object::{AnyObject, Resource};
use api::Kind;
use async_channel::{Receiver, Sender};
use event_listener::Event;

use crate::store::{EventType, Store, StoreError, WatchEvent};

/// How far the informer's watch may fall behind before the store cuts it off. Far more than a
/// client's: the queued events are shared with every other watcher, and being cut off in a
/// burst means re-listing (and decoding) every object, which falls behind again.
const WATCH_CAPACITY: usize = 100_000;

/// Key of an object in the cache: namespace (empty for cluster-scoped kinds) and name. One
/// allocation per object, shared (as [`Change`]s hand it out) by whoever keys the object
/// too, such as the scheduler's queues; maps keyed by it are searched with a plain
/// `&(String, String)`.
pub type Key = Arc<(String, String)>;

/// An object as the cache keeps it: the postcard encoding of its [`AnyObject`], shared by
/// every holder (cloning is a reference count). Decoding cannot fail for bytes made by
/// [`Packed::pack`]; should it anyway, the readers below log it and skip the object.
#[derive(Clone)]
pub struct Packed {
    bytes: Arc<[u8]>,
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Packed {
    pub fn pack(obj: &AnyObject) -> Packed {
        // Encoding into a Vec fails only for types postcard cannot represent, which the
        // stored object model never contains (the store writes the same types).
        let bytes = postcard::to_allocvec(obj).unwrap_or_else(|e| {
            tracing::error!(error = %e, kind = ?obj.kind(), "packing a cached object failed");
            Vec::new()
        });
        Packed {
            bytes: bytes.into(),
        }
    }

    /// The encoded size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The whole object.
    pub fn unpack(&self) -> Option<AnyObject> {
        postcard::from_bytes(&self.bytes)
            .inspect_err(|e| tracing::error!(error = %e, "decoding a cached object failed"))
            .ok()
    }

    /// The whole object as a `K` (`None` for another kind).
    pub fn unpack_as<K: Resource>(&self) -> Option<K> {
        self.unpack().and_then(K::from_any)
    }

    /// Only the metadata: every kind's first field is `metadata`, and an encoded
    /// [`AnyObject`] is its variant index (a varint, as a `u32` is) followed by the fields in
    /// order, so the metadata decodes from the front without the rest.
    pub fn meta(&self) -> Option<ObjectMeta> {
        postcard::take_from_bytes::<(u32, ObjectMeta)>(&self.bytes)
            .inspect_err(|e| tracing::error!(error = %e, "decoding cached metadata failed"))
            .ok()
            .map(|((_, meta), _)| meta)
    }
}

/// The annotation `kubectl apply` keeps its last applied manifest in: often the largest
/// part of an applied object, and no control loop reads it.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether `change` is more than a node's heartbeat: a Node whose update moved only its
/// conditions' `lastHeartbeatTime` (and with it its resourceVersion and managedFields) is
/// not, nor is a Lease renewal. Controllers that re-read every node on a change skip those:
/// with the etcd datastore, where heartbeats are written through, 1,000 nodes send about 100
/// a second.
pub fn beyond_heartbeat(change: &Change) -> bool {
    let Change::Modified { old, new, .. } = change else {
        return true;
    };
    let Some(new) = api::core::Node::from_any_ref(new) else {
        return new.kind() != api::Kind::Lease;
    };
    let Some(mut old) = old.unpack_as::<api::core::Node>() else {
        return true;
    };
    let mut new = new.clone();
    for n in [&mut old, &mut new] {
        n.metadata.resource_version.clear();
        n.metadata.managed_fields = None;
        for c in &mut n.status.conditions {
            c.last_heartbeat_time = None;
        }
    }
    old != new
}

/// What the cache keeps of an object: the object without the parts no control loop reads,
/// or `None` if it has none of them (then the store's own encoding is kept as it is).
///
/// This is the one place that decides it; every reader of the cache (the scheduler and the
/// controllers) must find what it reads here, and `projection_keeps_what_readers_read` in
/// the tests runs each reader on a full object and on its projection. Dropped:
/// - of every object, `metadata.managedFields` and the `last-applied-configuration`
///   annotation (the big fields of real objects, read only by the API's own apply);
/// - of pods, what only the node agent reads: the containers' command, arguments, working
///   directory, environment, image, probes, lifecycle hooks, mounts, limits, security
///   context and terminal settings, and the pod's volumes but its claims, DNS, host aliases, service
///   account, pull secrets, security context, priority class and runtime class; and the
///   annotations but those in [`POD_ANNOTATIONS_READ`]. Kept: the rest of the metadata, the
///   status, and everything the scheduler filters and scores on (requests,
///   ports, affinity, tolerations, node selector, overhead...).
///
/// Notifications ([`Change`]) still carry the whole new object; only what the cache keeps
/// (and so [`Change::old`] and [`Change::packed`]) is projected.
pub fn project(obj: &AnyObject) -> Option<AnyObject> {
    if let AnyObject::Pod(p) = obj {
        if !meta_droppable(&p.metadata) && !pod_droppable(p) {
            return None;
        }
        // Field by field, so what is dropped is never copied.
        return Some(AnyObject::Pod(project_pod(p)));
    }
    if !meta_droppable(obj.meta()) {
        return None;
    }
    let mut out = obj.clone();
    strip_meta(out.meta_mut());
    Some(out)
}

fn meta_droppable(m: &ObjectMeta) -> bool {
    m.managed_fields.is_some() || m.annotations.contains_key(LAST_APPLIED)
}

/// The pod annotations a control loop reads (the Job controller, a pod's completion index).
/// A pod's other annotations are for its agent, its owner's tools or its user; the cache
/// drops them (the benchmark's pod carries 100 bytes of them, a sixth of what is kept).
pub const POD_ANNOTATIONS_READ: &[&str] = &[api::batch::JOB_COMPLETION_INDEX];

fn strip_meta(m: &mut ObjectMeta) {
    m.managed_fields = None;
    m.annotations.remove(LAST_APPLIED);
}

fn pod_droppable(p: &api::core::Pod) -> bool {
    let s = &p.spec;
    s.all_containers().any(|c| {
        c.image.is_some()
            || !c.command.is_empty()
            || !c.args.is_empty()
            || !c.env.is_empty()
            || c.termination_message_path.is_some()
    }) || s
        .volumes
        .iter()
        .any(|v| v.persistent_volume_claim.is_none())
        || s.dns_policy.is_some()
        || s.service_account_name.is_some()
        || p.metadata
            .annotations
            .keys()
            .any(|k| !POD_ANNOTATIONS_READ.contains(&k.as_str()))
}

/// A pod's metadata as the cache keeps it: without what [`strip_meta`] drops, and with only
/// the annotations in [`POD_ANNOTATIONS_READ`].
fn project_meta(m: &ObjectMeta) -> ObjectMeta {
    let ObjectMeta {
        name,
        generate_name,
        namespace,
        uid,
        resource_version,
        generation,
        creation_timestamp,
        deletion_timestamp,
        deletion_grace_period_seconds,
        labels,
        annotations,
        owner_references,
        finalizers,
        managed_fields: _,
        self_link,
    } = m;
    ObjectMeta {
        name: name.clone(),
        generate_name: generate_name.clone(),
        namespace: namespace.clone(),
        uid: uid.clone(),
        resource_version: resource_version.clone(),
        generation: *generation,
        creation_timestamp: *creation_timestamp,
        deletion_timestamp: *deletion_timestamp,
        deletion_grace_period_seconds: *deletion_grace_period_seconds,
        labels: labels.clone(),
        annotations: annotations
            .iter()
            .filter(|(k, _)| POD_ANNOTATIONS_READ.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        owner_references: owner_references.clone(),
        finalizers: finalizers.clone(),
        managed_fields: None,
        self_link: self_link.clone(),
    }
}

/// A container as the cache keeps it: its name, ports, requests (and claims) and restart
/// policy.
fn project_container(c: &api::core::Container) -> api::core::Container {
    api::core::Container {
        name: c.name.clone(),
        ports: c.ports.clone(),
        resources: c
            .resources
            .as_ref()
            .map(|r| api::core::ResourceRequirements {
                requests: r.requests.clone(),
                claims: r.claims.clone(),
                ..Default::default()
            }),
        restart_policy: c.restart_policy.clone(),
        ..Default::default()
    }
}

/// A pod as the cache keeps it (see [`project`]). The spec is destructured whole, so a field
/// added to `PodSpec` does not compile until it is decided here whether the cache keeps it.
fn project_pod(p: &api::core::Pod) -> api::core::Pod {
    let api::core::PodSpec {
        volumes,
        init_containers,
        containers,
        ephemeral_containers: _,
        restart_policy,
        termination_grace_period_seconds: _,
        active_deadline_seconds: _,
        dns_policy: _,
        node_selector,
        service_account_name: _,
        service_account: _,
        automount_service_account_token: _,
        node_name,
        host_network,
        host_pid,
        host_ipc,
        share_process_namespace,
        security_context: _,
        image_pull_secrets: _,
        hostname,
        subdomain,
        affinity,
        scheduler_name,
        tolerations,
        host_aliases: _,
        priority_class_name: _,
        priority,
        dns_config: _,
        readiness_gates,
        runtime_class_name: _,
        enable_service_links: _,
        preemption_policy,
        overhead,
        topology_spread_constraints,
        set_hostname_as_fqdn,
        os,
        host_users,
        scheduling_gates,
        resource_claims,
        resources,
    } = &p.spec;
    api::core::Pod {
        metadata: project_meta(&p.metadata),
        spec: api::core::PodSpec {
            // Claims stay: the scheduler's volume filters and the PVC protection controller
            // read them.
            volumes: volumes
                .iter()
                .filter(|v| v.persistent_volume_claim.is_some())
                .cloned()
                .collect(),
            init_containers: init_containers.iter().map(project_container).collect(),
            containers: containers.iter().map(project_container).collect(),
            restart_policy: restart_policy.clone(),
            node_selector: node_selector.clone(),
            node_name: node_name.clone(),
            host_network: *host_network,
            host_pid: *host_pid,
            host_ipc: *host_ipc,
            share_process_namespace: *share_process_namespace,
            hostname: hostname.clone(),
            subdomain: subdomain.clone(),
            affinity: affinity.clone(),
            scheduler_name: scheduler_name.clone(),
            tolerations: tolerations.clone(),
            priority: *priority,
            readiness_gates: readiness_gates.clone(),
            preemption_policy: preemption_policy.clone(),
            overhead: overhead.clone(),
            topology_spread_constraints: topology_spread_constraints.clone(),
            set_hostname_as_fqdn: *set_hostname_as_fqdn,
            os: os.clone(),
            host_users: *host_users,
            scheduling_gates: scheduling_gates.clone(),
            resource_claims: resource_claims.clone(),
            resources: resources.clone(),
            ..Default::default()
        },
        status: p.status.clone(),
    }
}

/// What happened to one cached object (or to all of them).
#[derive(Clone, Debug)]
pub enum Change {
    /// `packed` is the form the cache now holds (shared, so keeping it costs nothing extra).
    Added {
        key: Key,
        new: Arc<AnyObject>,
        packed: Packed,
    },
    /// `old` is the object before the change, still packed: most subscribers need at most
    /// its metadata ([`Change::old_meta`]).
    Modified {
        key: Key,
        old: Packed,
        new: Arc<AnyObject>,
        packed: Packed,
    },
    Deleted(Arc<AnyObject>),
    /// The cache was rebuilt from a fresh list: anything may have changed.
    Resync,
}

impl Change {
    /// The kind the change is about (`None` for a resync).
    pub fn kind(&self) -> Option<Kind> {
        self.object().map(|o| o.kind())
    }

    /// The object as it is now (for a deletion: its last state).
    pub fn object(&self) -> Option<&Arc<AnyObject>> {
        match self {
            Change::Added { new, .. } | Change::Modified { new, .. } | Change::Deleted(new) => {
                Some(new)
            }
            Change::Resync => None,
        }
    }

    /// The object before the change, for modifications (decoded on each call).
    pub fn old(&self) -> Option<AnyObject> {
        match self {
            Change::Modified { old, .. } => old.unpack(),
            _ => None,
        }
    }

    /// The metadata of the object before the change, for modifications (only the metadata is
    /// decoded).
    pub fn old_meta(&self) -> Option<ObjectMeta> {
        match self {
            Change::Modified { old, .. } => old.meta(),
            _ => None,
        }
    }

    /// The cache's key of the object after an addition or a modification.
    pub fn key(&self) -> Option<&Key> {
        match self {
            Change::Added { key, .. } | Change::Modified { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The packed form the cache holds after an addition or a modification.
    pub fn packed(&self) -> Option<&Packed> {
        match self {
            Change::Added { packed, .. } | Change::Modified { packed, .. } => Some(packed),
            _ => None,
        }
    }
}

/// The cached objects, by kind, in namespace-then-name order.
#[derive(Default)]
pub struct Objects {
    by_kind: HashMap<Kind, BTreeMap<Key, Packed>>,
    revision: u64,
}

impl Objects {
    /// The store revision the cache reflects.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// One object as the cache keeps it.
    pub fn packed(&self, kind: Kind, ns: &str, name: &str) -> Option<&Packed> {
        self.by_kind
            .get(&kind)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// One object, decoded.
    pub fn get_any(&self, kind: Kind, ns: &str, name: &str) -> Option<AnyObject> {
        self.packed(kind, ns, name)?.unpack()
    }

    /// One object of kind `K`, decoded.
    pub fn get<K: Resource>(&self, ns: &str, name: &str) -> Option<K> {
        self.packed(K::KIND, ns, name)?.unpack_as()
    }

    /// Every cached object of kind `K` (in `ns` if given), each decoded as the iterator
    /// reaches it.
    pub fn iter<'a, K: Resource>(&'a self, ns: Option<&'a str>) -> impl Iterator<Item = K> + 'a {
        self.iter_packed(K::KIND, ns).filter_map(Packed::unpack_as)
    }

    /// The objects of kind `K` (in `ns` if given) whose metadata passes `keep`; the others
    /// have only their metadata decoded.
    pub fn iter_where<'a, K: Resource>(
        &'a self,
        ns: Option<&'a str>,
        mut keep: impl FnMut(&ObjectMeta) -> bool + 'a,
    ) -> impl Iterator<Item = K> + 'a {
        self.iter_packed(K::KIND, ns)
            .filter(move |p| p.meta().is_some_and(|m| keep(&m)))
            .filter_map(Packed::unpack_as)
    }

    /// Every cached object of `kind` (in `ns` if given), as kept.
    pub fn iter_packed<'a>(
        &'a self,
        kind: Kind,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Packed> + 'a {
        self.entries(kind, ns).map(|(_, p)| p)
    }

    /// The keys of every cached object of `kind` (in `ns` if given), without decoding.
    pub fn keys<'a>(&'a self, kind: Kind, ns: Option<&'a str>) -> impl Iterator<Item = &'a Key> {
        self.entries(kind, ns).map(|(k, _)| k)
    }

    /// Every cached object of `kind` (in `ns` if given) with its key, as kept.
    pub fn entries<'a>(
        &'a self,
        kind: Kind,
        ns: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Packed)> + 'a> {
        let map = self.by_kind.get(&kind);
        match (map, ns) {
            (None, _) => Box::new(std::iter::empty()),
            (Some(m), None) => Box::new(m.iter()),
            (Some(m), Some(ns)) => Box::new(
                m.range((ns.to_string(), String::new())..)
                    .take_while(move |(k, _)| k.0 == ns),
            ),
        }
    }

    /// How many objects of `kind` are cached.
    pub fn count(&self, kind: Kind) -> usize {
        self.by_kind.get(&kind).map_or(0, BTreeMap::len)
    }

    /// Adds or replaces `obj`, as a watch event would (for other modules' tests).
    #[cfg(test)]
    pub(crate) fn insert_for_test(&mut self, obj: AnyObject) {
        let packed = postcard::to_allocvec(&obj).expect("model types always serialize");
        let event = WatchEvent::new(EventType::Added, 1, obj, packed.into());
        self.apply(&event, false);
    }

    fn key_of(o: &AnyObject) -> (String, String) {
        let m = o.meta();
        (m.namespace.clone().unwrap_or_default(), m.name.clone())
    }

    /// Applies one event; the change to announce if `announce` (someone wants to hear about
    /// this kind: only then are the objects decoded or copied for the notification).
    fn apply(&mut self, event: &WatchEvent, announce: bool) -> Option<Change> {
        let obj = &event.object;
        let map = self.by_kind.entry(obj.kind()).or_default();
        let key = Self::key_of(obj);
        match event.event_type {
            EventType::Deleted => {
                map.remove(&key);
                announce.then(|| Change::Deleted(obj.clone()))
            }
            EventType::Added | EventType::Modified => {
                // The store's own encoding of the object unless the cache keeps less of it.
                let packed = match project(obj) {
                    Some(kept) => Packed::pack(&kept),
                    None => Packed {
                        bytes: event.packed.clone(),
                    },
                };
                // A modification keeps the key the object was added with (and shares).
                let (key, replaced) = match map.get_key_value(&key) {
                    Some((k, _)) => {
                        let k = k.clone();
                        (k.clone(), map.insert(k, packed.clone()))
                    }
                    None => {
                        let k = Arc::new(key);
                        map.insert(k.clone(), packed.clone());
                        (k, None)
                    }
                };
                if !announce {
                    return None;
                }
                let new = obj.clone();
                Some(match replaced {
                    Some(old) => Change::Modified {
                        key,
                        old,
                        new,
                        packed,
                    },
                    None => Change::Added { key, new, packed },
                })
            }
        }
    }
}

/// A cheap handle on the shared cache.
#[derive(Clone, Default)]
pub struct Cache {
    inner: Arc<RwLock<Objects>>,
}

impl Cache {
    /// Reads the cache. Hold the guard briefly and never across an `.await`: the watch task
    /// waits for it.
    pub fn read(&self) -> RwLockReadGuard<'_, Objects> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// One object of kind `K`.
    pub fn get<K: Resource>(&self, ns: &str, name: &str) -> Option<K> {
        let packed = self.read().packed(K::KIND, ns, name).cloned();
        packed?.unpack_as()
    }

    /// Every object of kind `K` (in `ns` if given).
    pub fn list<K: Resource>(&self, ns: Option<&str>) -> Vec<K> {
        // Decode outside the lock: the watch task waits for it.
        let packed: Vec<Packed> = self.read().iter_packed(K::KIND, ns).cloned().collect();
        packed.iter().filter_map(Packed::unpack_as).collect()
    }

    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    fn replace(&self, objects: Objects) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = objects;
    }

    fn apply(&self, event: &WatchEvent, announce: bool) -> Option<Change> {
        let mut w = self.inner.write().unwrap_or_else(|e| e.into_inner());
        w.revision = event.revision;
        w.apply(event, announce)
    }
}

struct Subscriber {
    kinds: Vec<Kind>,
    tx: Sender<Change>,
}

/// The shared cache and the task that keeps it current.
pub struct Informers {
    store: Store,
    kinds: Vec<Kind>,
    cache: Cache,
    subscribers: Mutex<Vec<Subscriber>>,
    /// Notified after every batch of changes is applied (for [`Informers::wait_for`]).
    applied: Event,
}

impl Informers {
    /// Lists `kinds` into a fresh cache and starts the task that keeps it current. The cache
    /// is complete when this returns.
    pub async fn start(store: Store, kinds: &[Kind]) -> Result<Arc<Informers>, StoreError> {
        let informers = Arc::new(Informers {
            store,
            kinds: kinds.to_vec(),
            cache: Cache::default(),
            subscribers: Mutex::new(Vec::new()),
            applied: Event::new(),
        });
        let revision = informers.relist().await?;
        let watch = informers
            .store
            .watch_with_capacity(kinds, Some(revision), Some(WATCH_CAPACITY))
            .await?;
        smol::spawn(informers.clone().run(watch)).detach();
        Ok(informers)
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The store the cache follows (writes go through the registry, not here).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Waits for the next change for which `matters` holds, taking every change queued
    /// meanwhile in the same pass; `false` once the channel is closed.
    pub async fn next_that_matters(
        changes: &Receiver<Change>,
        matters: impl Fn(&Change) -> bool,
    ) -> bool {
        loop {
            let Ok(first) = changes.recv().await else {
                return false;
            };
            let mut any = matters(&first);
            while let Ok(c) = changes.try_recv() {
                any = any || matters(&c);
            }
            if any {
                return true;
            }
        }
    }

    /// Changes to `kinds` from now on, each sent after the cache holds it. The channel is
    /// unbounded so the watch task never waits for a slow controller; a subscriber should
    /// drain it promptly (a work queue deduplicates the keys it derives).
    pub fn subscribe(&self, kinds: &[Kind]) -> Receiver<Change> {
        let (tx, rx) = async_channel::unbounded();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Subscriber {
                kinds: kinds.to_vec(),
                tx,
            });
        rx
    }

    /// Waits until the cache reflects at least store revision `revision` (for example the
    /// revision a controller's own write returned), so a controller does not act on a cache
    /// that misses its own last write.
    pub async fn wait_for(&self, revision: u64) {
        loop {
            let listener = self.applied.listen();
            if self.cache.revision() >= revision {
                return;
            }
            listener.await;
        }
    }

    async fn relist(&self) -> Result<u64, StoreError> {
        let mut objects = Objects::default();
        let mut revision = 0;
        for &kind in &self.kinds {
            let (items, rev) = self.store.list(kind, None).await?;
            // Lists of different kinds come from different snapshots; the watch resumes
            // from the oldest of them, and replays of what a later list already had are
            // harmless (they overwrite with the same object).
            revision = if revision == 0 {
                rev
            } else {
                revision.min(rev)
            };
            let map = objects.by_kind.entry(kind).or_default();
            for o in items {
                let packed = Packed::pack(project(&o).as_ref().unwrap_or(&o));
                map.insert(Arc::new(Objects::key_of(&o)), packed);
            }
        }
        objects.revision = revision;
        self.cache.replace(objects);
        Ok(revision)
    }

    /// Whether a subscriber wants changes of `kind`.
    fn wanted(&self, kind: Kind) -> bool {
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|s| !s.tx.is_closed());
        subs.iter().any(|s| s.kinds.contains(&kind))
    }

    fn notify(&self, change: Change) {
        let subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        for s in subs.iter() {
            let wanted = match change.kind() {
                Some(k) => s.kinds.contains(&k),
                None => true,
            };
            if wanted {
                let _ = s.tx.try_send(change.clone());
            }
        }
    }

    fn apply(&self, event: &WatchEvent) {
        let announce = self.wanted(event.object.kind());
        if let Some(change) = self.cache.apply(event, announce) {
            self.notify(change);
        }
    }

    async fn run(self: Arc<Self>, mut watch: crate::store::Watch) {
        loop {
            while let Some(event) = watch.next().await {
                self.apply(&event);
                // Apply what is already queued before waking waiters.
                while let Some(event) = watch.try_next() {
                    self.apply(&event);
                }
                self.applied.notify(usize::MAX);
            }
            if watch.end_reason() == Some(crate::store::WatchEnd::Closed) {
                return;
            }
            tracing::warn!("informer watch ended; re-listing");
            loop {
                let resumed = match self.relist().await {
                    Ok(rev) => {
                        self.store
                            .watch_with_capacity(&self.kinds, Some(rev), Some(WATCH_CAPACITY))
                            .await
                    }
                    Err(e) => Err(e),
                };
                match resumed {
                    Ok(w) => {
                        watch = w;
                        break;
                    }
                    Err(StoreError::Closed) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "informer re-list failed; retrying");
                        smol::Timer::after(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
            self.notify(Change::Resync);
            self.applied.notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{ConfigMap, Pod};
    use api::meta::ObjectMeta;

    #[test]
    fn a_heartbeat_is_not_a_change_that_matters_but_an_address_is() {
        use api::core::{Node, NodeAddress, NodeCondition};
        use api::meta::Time;
        let mut node = Node {
            metadata: ObjectMeta {
                name: "n1".into(),
                resource_version: "5".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        node.status.conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_heartbeat_time: Some(Time(100)),
            ..Default::default()
        });
        let change = |new: &Node| Change::Modified {
            key: Arc::new((String::new(), "n1".into())),
            old: Packed::pack(&AnyObject::Node(node.clone())),
            new: Arc::new(AnyObject::Node(new.clone())),
            packed: Packed::pack(&AnyObject::Node(new.clone())),
        };
        let mut beat = node.clone();
        beat.metadata.resource_version = "6".into();
        beat.status.conditions[0].last_heartbeat_time = Some(Time(110));
        assert!(!beyond_heartbeat(&change(&beat)));
        let mut moved = beat.clone();
        moved.status.addresses.push(NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.2".into(),
        });
        assert!(beyond_heartbeat(&change(&moved)));
        let mut not_ready = beat.clone();
        not_ready.status.conditions[0].status = "Unknown".into();
        assert!(beyond_heartbeat(&change(&not_ready)));
    }

    fn cm(ns: &str, name: &str) -> AnyObject {
        ConfigMap {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        }
        .into_any()
    }

    fn event(event_type: EventType, obj: &AnyObject) -> WatchEvent {
        let packed = postcard::to_allocvec(obj).unwrap();
        WatchEvent::new(event_type, 1, obj.clone(), packed.into())
    }

    #[test]
    fn objects_apply_and_iterate_by_namespace() {
        let mut o = Objects::default();
        for (ns, n) in [("b", "x"), ("a", "y"), ("a", "z"), ("ab", "w")] {
            assert!(matches!(
                o.apply(&event(EventType::Added, &cm(ns, n)), true),
                Some(Change::Added { .. })
            ));
        }
        let names: Vec<_> = o
            .iter::<ConfigMap>(Some("a"))
            .map(|c| c.metadata.name)
            .collect();
        assert_eq!(names, ["y", "z"]);
        assert_eq!(o.iter::<ConfigMap>(None).count(), 4);
        assert_eq!(o.iter::<Pod>(None).count(), 0);
        let keys: Vec<_> = o.keys(Kind::ConfigMap, Some("ab")).cloned().collect();
        assert_eq!(keys, [Arc::new(("ab".to_string(), "w".to_string()))]);
        let mut changed = cm("a", "y");
        changed
            .meta_mut()
            .labels
            .insert("new".into(), "label".into());
        match o.apply(&event(EventType::Modified, &changed), true) {
            Some(Change::Modified {
                key,
                old,
                new,
                packed,
            }) => {
                // The key the object was added with, shared.
                assert!(Arc::ptr_eq(
                    &key,
                    o.keys(Kind::ConfigMap, Some("a")).next().unwrap()
                ));
                assert_eq!(old.unpack(), Some(cm("a", "y")));
                assert_eq!(*new, changed);
                assert_eq!(packed.unpack(), Some(changed.clone()));
            }
            other => panic!("expected a modification, got {other:?}"),
        }
        assert_eq!(o.get_any(Kind::ConfigMap, "a", "y"), Some(changed));
        // Nobody listening: applied, nothing to announce.
        assert!(o
            .apply(&event(EventType::Added, &cm("c", "q")), false)
            .is_none());
        assert!(o.get::<ConfigMap>("c", "q").is_some());
        assert!(matches!(
            o.apply(&event(EventType::Deleted, &cm("a", "y")), true),
            Some(Change::Deleted(_))
        ));
        assert!(o.get::<ConfigMap>("a", "y").is_none());
        assert!(o.get::<ConfigMap>("a", "z").is_some());
        assert_eq!(o.count(Kind::ConfigMap), 4);
    }

    #[test]
    fn packed_metadata_decodes_alone_for_every_kind() {
        for kind in Kind::ALL {
            let meta = ObjectMeta {
                name: format!("{kind:?}-name"),
                namespace: Some("ns".into()),
                labels: [("app".to_string(), "x".to_string())].into(),
                resource_version: "42".into(),
                ..Default::default()
            };
            let obj = api::with_kind!(*kind, K, {
                let mut o = K::default();
                *o.meta_mut() = meta.clone();
                o.into_any()
            });
            let packed = Packed::pack(&obj);
            assert_eq!(packed.meta(), Some(meta), "{kind:?}");
            assert_eq!(packed.unpack(), Some(obj), "{kind:?}");
        }
    }

    #[test]
    fn iter_where_decodes_only_what_passes() {
        let mut o = Objects::default();
        for (n, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
            let mut c = cm("ns", n);
            c.meta_mut().labels.insert("app".into(), app.into());
            o.apply(&event(EventType::Added, &c), false);
        }
        let web: Vec<String> = o
            .iter_where::<ConfigMap>(Some("ns"), |m| {
                m.labels.get("app").map(String::as_str) == Some("web")
            })
            .map(|c| c.metadata.name)
            .collect();
        assert_eq!(web, ["a", "c"]);
        assert_eq!(o.iter_where::<Pod>(None, |_| true).count(), 0);
    }
}

#[cfg(test)]
mod store_tests {
    use super::*;
    use crate::machinery::events::Recorder;
    use crate::registry::Registry;
    use crate::store::StoreConfig;
    use api::core::{ConfigMap, Event};
    use api::meta::ObjectMeta;

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn cache_follows_the_store_and_events_coalesce() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig::in_dir(dir.path())).expect("store");
        let registry = Registry::new(store.clone());
        smol::block_on(async {
            let ns = api::core::Namespace {
                metadata: ObjectMeta {
                    name: "default".into(),
                    ..Default::default()
                },
                ..Default::default()
            };
            registry.create(ns, None).await.expect("namespace");
            registry
                .create(config_map("before"), None)
                .await
                .expect("create");
            let inf = Informers::start(store.clone(), &[Kind::ConfigMap, Kind::Event])
                .await
                .expect("start");
            assert!(inf.cache().get::<ConfigMap>("default", "before").is_some());
            let changes = inf.subscribe(&[Kind::ConfigMap]);
            let made = registry
                .create(config_map("after"), None)
                .await
                .expect("create");
            let change = changes.recv().await.expect("change");
            assert!(matches!(change, Change::Added { .. }));
            // The cache already holds what a notification announces.
            assert!(inf.cache().get::<ConfigMap>("default", "after").is_some());
            registry
                .delete::<ConfigMap>("default", "before", Default::default())
                .await
                .expect("delete");
            assert!(matches!(changes.recv().await, Ok(Change::Deleted(_))));
            assert!(inf.cache().get::<ConfigMap>("default", "before").is_none());

            // Three identical events become one Event with count 3.
            let rec = Recorder::start(registry.clone(), "test-controller");
            for _ in 0..3 {
                rec.normal(&made, "Tested", "it works");
            }
            rec.warning(&made, "Other", "another series");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let events: Vec<Event> = inf.cache().list(Some("default"));
                let total: i32 = events
                    .iter()
                    .filter(|e| e.reason.as_deref() == Some("Tested"))
                    .map(|e| e.count.unwrap_or(0))
                    .sum();
                if total == 3 && events.len() == 2 {
                    let e = events
                        .iter()
                        .find(|e| e.reason.as_deref() == Some("Tested"))
                        .expect("event");
                    assert_eq!(e.involved_object.name.as_deref(), Some("after"));
                    assert_eq!(e.type_.as_deref(), Some("Normal"));
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "events: {events:?}");
                smol::Timer::after(std::time::Duration::from_millis(20)).await;
            }
        });
    }
}

#[cfg(test)]
mod projection_tests {
    //! Every reader of cached pods, run on a whole pod and on what the cache keeps of it:
    //! a reader that needs a dropped field makes this fail.
    use super::*;
    use crate::controllers::{daemonset, endpoints, job, nodelifecycle, workload};
    use crate::scheduler::cache::{ClusterState, PodFacts};
    use crate::scheduler::filter::tests::node;
    use crate::scheduler::{find_node, wants_scheduling, Cursor};
    use api::core::{Pod, Service};
    use api::meta::Time;

    /// The benchmark's pod (bench/pod.json) with everything a loop might read set as well.
    fn whole_pod() -> Pod {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../../../bench/pod.json")).expect("json");
        let extra = serde_json::json!({
            "metadata": {
                "uid": "u1", "resourceVersion": "7", "generation": 1,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "rs-uid", "controller": true}],
                "finalizers": ["x/y"],
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2,
                    "image": "x", "imageID": "y"}]}
        });
        for (k, e) in extra.as_object().expect("object") {
            for (f, x) in e.as_object().expect("object") {
                v[k][f] = x.clone();
            }
        }
        v["metadata"]["annotations"][LAST_APPLIED] = serde_json::json!("{\"big\": true}");
        let spec = &mut v["spec"];
        spec["hostname"] = "h".into();
        spec["subdomain"] = "web".into();
        spec["nodeSelector"] = serde_json::json!({"zone": "a"});
        spec["tolerations"] = serde_json::json!([{"key": "node.kubernetes.io/unreachable",
            "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]);
        spec["affinity"] = serde_json::json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "other"}},
                "topologyKey": "kubernetes.io/hostname"}]}});
        spec["overhead"] = serde_json::json!({"cpu": "5m"});
        spec["volumes"] = serde_json::json!([{"name": "v", "emptyDir": {}}]);
        spec["serviceAccountName"] = "sa".into();
        spec["dnsPolicy"] = "ClusterFirst".into();
        spec["containers"][0]["ports"][0]["hostPort"] = 18080.into();
        spec["initContainers"] = serde_json::json!([{"name": "side", "image": "s",
            "restartPolicy": "Always", "resources": {"requests": {"cpu": "20m"}}}]);
        let o = v.as_object_mut().expect("object");
        o.remove("apiVersion");
        o.remove("kind");
        serde_json::from_value(v).expect("pod")
    }

    fn kept(p: &Pod) -> Pod {
        let obj = p.clone().into_any();
        let kept = project(&obj).expect("something to drop");
        // What the cache holds is the encoding of the projection.
        Packed::pack(&kept).unpack_as().expect("pod")
    }

    #[test]
    fn projection_keeps_what_readers_read() {
        let whole = whole_pod();
        let kept = kept(&whole);
        assert!(kept.spec.containers[0].command.is_empty());
        assert!(kept.metadata.managed_fields.is_none());
        assert!(!kept.metadata.annotations.contains_key(LAST_APPLIED));

        // Metadata (but the dropped fields and annotations) and status are kept whole: every
        // reader of labels, owners, deletion, phase, conditions and container statuses is
        // served.
        assert!(kept.metadata.annotations.is_empty());
        let mut meta = whole.metadata.clone();
        strip_meta(&mut meta);
        meta.annotations.clear();
        assert_eq!(kept.metadata, meta);
        assert_eq!(kept.status, whole.status);

        // The scheduler.
        assert_eq!(PodFacts::of(&kept), PodFacts::of(&whole));
        assert_eq!(wants_scheduling(&kept), wants_scheduling(&whole));
        let mut zoned = node("a", "4", "8Gi");
        zoned.metadata.labels.insert("zone".into(), "a".into());
        let mut state = ClusterState::default();
        state.upsert_node(Arc::new(zoned));
        state.upsert_node(Arc::new(node("b", "4", "8Gi")));
        let other = Packed::pack(&kept.clone().into_any());
        state.add_pod(
            Arc::new(("default".into(), "o".into())),
            &kept,
            other,
            "a".into(),
            false,
        );
        let results: Vec<_> = [&whole, &kept]
            .into_iter()
            .map(|p| {
                let mut unbound = p.clone();
                unbound.spec.node_name = None;
                unbound.metadata.name = "new".into();
                // `b` is not in the selected zone, and the pod on `a` holds the host port.
                find_node(
                    &state,
                    &unbound,
                    &PodFacts::of(&unbound),
                    &mut Cursor::default(),
                )
                .map_err(|e| e.message())
            })
            .collect();
        assert_eq!(
            results[0],
            Err("0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 1 node(s) didn't match Pod's node affinity/selector.".to_string())
        );
        assert_eq!(results[1], results[0]);
        let mut placed = kept.clone();
        placed.metadata.name = "p2".into();
        placed.spec.containers[0].ports.clear();
        placed.spec.node_selector.clear();
        placed.metadata.labels.insert("app".into(), "other".into());
        // Now only the anti-affinity of the pod on `a` (no app=other beside it) decides.
        assert_eq!(
            find_node(
                &state,
                &placed,
                &PodFacts::of(&placed),
                &mut Cursor::default()
            ),
            Ok("b".to_string())
        );

        // The controllers.
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "bench"},
                "ports": [{"name": "p", "port": 80, "targetPort": "http"}]}
        }))
        .expect("service");
        assert_eq!(
            endpoints::build_subsets(&service, &[&kept]),
            endpoints::build_subsets(&service, &[&whole])
        );
        assert!(!endpoints::build_subsets(&service, &[&kept]).is_empty());
        let now = Time::now();
        assert_eq!(workload::pod_ready(&kept), workload::pod_ready(&whole));
        assert_eq!(
            workload::available_in(&kept, 5, now),
            workload::available_in(&whole, 5, now)
        );
        assert_eq!(workload::pod_active(&kept), workload::pod_active(&whole));
        assert_eq!(workload::target_node(&kept), workload::target_node(&whole));
        assert_eq!(
            workload::deletion_cmp(&kept, &whole),
            std::cmp::Ordering::Equal
        );
        let n = node("a", "4", "8Gi");
        assert_eq!(
            daemonset::node_selected(&kept.spec, &n),
            daemonset::node_selected(&whole.spec, &n)
        );
        let taints = [api::core::Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        }];
        assert_eq!(
            nodelifecycle::eviction(&kept.spec.tolerations, &taints, now),
            nodelifecycle::eviction(&whole.spec.tolerations, &taints, now)
        );

        // The Job controller: an indexed Job's pod keeps its completion index annotation.
        let mut indexed = whole.clone();
        indexed
            .metadata
            .annotations
            .insert(api::batch::JOB_COMPLETION_INDEX.into(), "3".into());
        let kept_indexed = self::kept(&indexed);
        assert_eq!(job::pod_index(&kept_indexed), Some(3));
        assert_eq!(kept_indexed.metadata.annotations.len(), 1);
        // A pod whose only annotation is that one has nothing to drop there.
        let mut bare = api::core::Pod::default();
        bare.metadata
            .annotations
            .insert(api::batch::JOB_COMPLETION_INDEX.into(), "0".into());
        assert!(project(&bare.into_any()).is_none());
    }

    #[test]
    fn projection_is_smaller_and_skips_what_has_nothing_to_drop() {
        let whole = whole_pod().into_any();
        let full = Packed::pack(&whole).len();
        let kept = Packed::pack(&project(&whole).expect("projected")).len();
        eprintln!("a whole pod: {full} bytes, what the cache keeps: {kept} bytes");
        assert!(kept * 3 < full * 2, "kept {kept} of {full} bytes");
        // Nothing to drop: the store's encoding is kept as it is.
        let plain = api::core::ConfigMap::default().into_any();
        assert!(project(&plain).is_none());
        assert!(project(&project(&whole).expect("projected")).is_none());
    }
}
