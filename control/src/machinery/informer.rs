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

/// Key of an object in the cache: namespace (empty for cluster-scoped kinds) and name.
pub type Key = (String, String);

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

/// What happened to one cached object (or to all of them).
#[derive(Clone, Debug)]
pub enum Change {
    /// `packed` is the form the cache now holds (shared, so keeping it costs nothing extra).
    Added {
        new: Arc<AnyObject>,
        packed: Packed,
    },
    /// `old` is the object before the change, still packed: most subscribers need at most
    /// its metadata ([`Change::old_meta`]).
    Modified {
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

    fn entries<'a>(
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
                    .take_while(move |((n, _), _)| n == ns),
            ),
        }
    }

    /// How many objects of `kind` are cached.
    pub fn count(&self, kind: Kind) -> usize {
        self.by_kind.get(&kind).map_or(0, BTreeMap::len)
    }

    fn key_of(o: &AnyObject) -> Key {
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
                // The store's own encoding of the object: nothing to encode here.
                let packed = Packed {
                    bytes: event.packed.clone(),
                };
                let replaced = map.insert(key, packed.clone());
                if !announce {
                    return None;
                }
                let new = obj.clone();
                Some(match replaced {
                    Some(old) => Change::Modified { old, new, packed },
                    None => Change::Added { new, packed },
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
                map.insert(Objects::key_of(&o), Packed::pack(&o));
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
        assert_eq!(keys, [("ab".to_string(), "w".to_string())]);
        let mut changed = cm("a", "y");
        changed
            .meta_mut()
            .labels
            .insert("new".into(), "label".into());
        match o.apply(&event(EventType::Modified, &changed), true) {
            Some(Change::Modified { old, new, packed }) => {
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
