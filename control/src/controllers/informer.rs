//! One shared, watch-driven cache of the kinds the scheduler and the controllers read.
//!
//! Kubernetes' controllers each read through a shared informer: a local copy of the objects
//! kept current by one list and one watch, plus change notifications. This is the same idea
//! inside one process: [`Informers::start`] lists the kinds once, then a single task applies
//! the store's watch events to the [`Cache`] and only then tells each subscriber what changed,
//! so a subscriber that reads the cache after a notification sees at least that change.
//!
//! Objects are kept as `Arc<AnyObject>` and shared with every reader: the scheduler and all
//! controllers together hold one copy of each object (30,000 pods are read by all of them).
//! If the watch ends (the store closes, or the task fell so far behind that the hub cut it off)
//! the task re-lists and sends [`Change::Resync`], after which subscribers should re-examine
//! everything they care about.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use api::object::{AnyObject, Resource};
use api::Kind;
use async_channel::{Receiver, Sender};
use event_listener::Event;

use crate::store::{EventType, Store, StoreError};

/// Key of an object in the cache: namespace (empty for cluster-scoped kinds) and name.
pub type Key = (String, String);

/// What happened to one cached object (or to all of them).
#[derive(Clone, Debug)]
pub enum Change {
    Added(Arc<AnyObject>),
    Modified {
        old: Arc<AnyObject>,
        new: Arc<AnyObject>,
    },
    Deleted(Arc<AnyObject>),
    /// The cache was rebuilt from a fresh list: anything may have changed.
    Resync,
}

impl Change {
    /// The kind the change is about (`None` for a resync).
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Change::Added(o) | Change::Deleted(o) | Change::Modified { new: o, .. } => {
                Some(o.kind())
            }
            Change::Resync => None,
        }
    }

    /// The object as it is now (for a deletion: its last state).
    pub fn object(&self) -> Option<&Arc<AnyObject>> {
        match self {
            Change::Added(o) | Change::Deleted(o) | Change::Modified { new: o, .. } => Some(o),
            Change::Resync => None,
        }
    }

    /// The object before the change, for modifications.
    pub fn old(&self) -> Option<&Arc<AnyObject>> {
        match self {
            Change::Modified { old, .. } => Some(old),
            _ => None,
        }
    }
}

/// The cached objects, by kind, in namespace-then-name order.
#[derive(Default)]
pub struct Objects {
    by_kind: HashMap<Kind, BTreeMap<Key, Arc<AnyObject>>>,
    revision: u64,
}

impl Objects {
    /// The store revision the cache reflects.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn get_any(&self, kind: Kind, ns: &str, name: &str) -> Option<&Arc<AnyObject>> {
        self.by_kind
            .get(&kind)?
            .get(&(ns.to_string(), name.to_string()))
    }

    pub fn get<K: Resource>(&self, ns: &str, name: &str) -> Option<&K> {
        self.get_any(K::KIND, ns, name)
            .and_then(|o| K::from_any_ref(o))
    }

    /// Every cached object of kind `K` (in `ns` if given).
    pub fn iter<'a, K: Resource>(&'a self, ns: Option<&'a str>) -> impl Iterator<Item = &'a K> {
        self.iter_any(K::KIND, ns)
            .filter_map(|o| K::from_any_ref(o))
    }

    /// Every cached object of `kind` (in `ns` if given).
    pub fn iter_any<'a>(
        &'a self,
        kind: Kind,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<AnyObject>> {
        let map = self.by_kind.get(&kind);
        let range: Box<dyn Iterator<Item = (&Key, &Arc<AnyObject>)>> = match (map, ns) {
            (None, _) => Box::new(std::iter::empty()),
            (Some(m), None) => Box::new(m.iter()),
            (Some(m), Some(ns)) => Box::new(
                m.range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns),
            ),
        };
        range.map(|(_, o)| o)
    }

    /// How many objects of `kind` are cached.
    pub fn count(&self, kind: Kind) -> usize {
        self.by_kind.get(&kind).map_or(0, BTreeMap::len)
    }

    fn key_of(o: &AnyObject) -> Key {
        let m = o.meta();
        (m.namespace.clone().unwrap_or_default(), m.name.clone())
    }

    fn apply(&mut self, event_type: EventType, obj: Arc<AnyObject>) -> Change {
        let map = self.by_kind.entry(obj.kind()).or_default();
        let key = Self::key_of(&obj);
        match event_type {
            EventType::Deleted => {
                map.remove(&key);
                Change::Deleted(obj)
            }
            EventType::Added | EventType::Modified => match map.insert(key, obj.clone()) {
                Some(old) => Change::Modified { old, new: obj },
                None => Change::Added(obj),
            },
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

    /// A clone of one object of kind `K`.
    pub fn get<K: Resource>(&self, ns: &str, name: &str) -> Option<K> {
        self.read().get::<K>(ns, name).cloned()
    }

    /// Clones of every object of kind `K` (in `ns` if given).
    pub fn list<K: Resource>(&self, ns: Option<&str>) -> Vec<K> {
        self.read().iter::<K>(ns).cloned().collect()
    }

    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    fn replace(&self, objects: Objects) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = objects;
    }

    fn apply(&self, event_type: EventType, revision: u64, obj: Arc<AnyObject>) -> Change {
        let mut w = self.inner.write().unwrap_or_else(|e| e.into_inner());
        w.revision = revision;
        w.apply(event_type, obj)
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
        let watch = informers.store.watch(kinds, Some(revision)).await?;
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
                map.insert(Objects::key_of(&o), Arc::new(o));
            }
        }
        objects.revision = revision;
        self.cache.replace(objects);
        Ok(revision)
    }

    fn notify(&self, change: Change) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|s| !s.tx.is_closed());
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

    async fn run(self: Arc<Self>, mut watch: crate::store::Watch) {
        loop {
            while let Some(event) = watch.next().await {
                let change = self.cache.apply(
                    event.event_type,
                    event.revision,
                    Arc::new(event.object.clone()),
                );
                self.notify(change);
                // Apply what is already queued before waking waiters.
                while let Some(event) = watch.try_next() {
                    let change = self.cache.apply(
                        event.event_type,
                        event.revision,
                        Arc::new(event.object.clone()),
                    );
                    self.notify(change);
                }
                self.applied.notify(usize::MAX);
            }
            if watch.end_reason() == Some(crate::store::WatchEnd::Closed) {
                return;
            }
            tracing::warn!("informer watch ended; re-listing");
            loop {
                let resumed = match self.relist().await {
                    Ok(rev) => self.store.watch(&self.kinds, Some(rev)).await,
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

    #[test]
    fn objects_apply_and_iterate_by_namespace() {
        let mut o = Objects::default();
        for (ns, n) in [("b", "x"), ("a", "y"), ("a", "z"), ("ab", "w")] {
            assert!(matches!(
                o.apply(EventType::Added, Arc::new(cm(ns, n))),
                Change::Added(_)
            ));
        }
        let names: Vec<_> = o
            .iter::<ConfigMap>(Some("a"))
            .map(|c| c.metadata.name.clone())
            .collect();
        assert_eq!(names, ["y", "z"]);
        assert_eq!(o.iter::<ConfigMap>(None).count(), 4);
        assert_eq!(o.iter::<Pod>(None).count(), 0);
        assert!(matches!(
            o.apply(EventType::Modified, Arc::new(cm("a", "y"))),
            Change::Modified { .. }
        ));
        assert!(matches!(
            o.apply(EventType::Deleted, Arc::new(cm("a", "y"))),
            Change::Deleted(_)
        ));
        assert!(o.get::<ConfigMap>("a", "y").is_none());
        assert!(o.get::<ConfigMap>("a", "z").is_some());
        assert_eq!(o.count(Kind::ConfigMap), 3);
    }
}

#[cfg(test)]
mod store_tests {
    use super::*;
    use crate::controllers::events::Recorder;
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
            assert!(matches!(change, Change::Added(_)));
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
