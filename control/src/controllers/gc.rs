//! Garbage collector: deletes objects whose owners are all gone (Background propagation),
//! holds an owner deleted in the Foreground until its blocking dependents are gone, and
//! strips an Orphan-deleted owner's references from its dependents before it goes.
//!
//! It follows a watch of every kind (owners and dependents may be of any kind) and keeps a
//! small graph: for each object with ownerReferences, its owners, and for each owner uid, its
//! dependents. Decisions re-read the objects from the store, so a stale graph costs a
//! needless look, never a wrong deletion.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use api::meta::{DeleteOptions, OwnerReference, Preconditions};
use api::object::{AnyObject, Resource};
use api::{with_kind, Kind};

use crate::error::ApiError;
use crate::machinery::queue::WorkQueue;
use crate::registry::{Part, Registry, FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use crate::store::{EventType, StoreError};

/// An object's kind, namespace and name.
pub type ObjKey = (Kind, String, String);

/// How long the uid of a deleted object is remembered, to catch dependents created after
/// their owner went (by a controller acting on a stale cache).
const REMEMBER_GONE: Duration = Duration::from_secs(600);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Item {
    /// Look at an owner: gone (collect its dependents), or deleting with a GC finalizer.
    Owner { uid: String, key: ObjKey },
    /// Look at a dependent's owners.
    Dependent(ObjKey),
}

#[derive(Default)]
struct Graph {
    dependents: HashMap<String, HashSet<ObjKey>>,
    owners: HashMap<ObjKey, (String, Vec<OwnerReference>)>,
    gone: HashMap<String, Instant>,
    /// Owners seen deleting in the foreground.
    foreground: HashMap<String, ObjKey>,
}

impl Graph {
    fn remove(&mut self, key: &ObjKey) {
        if let Some((_, refs)) = self.owners.remove(key) {
            for r in refs {
                if let Some(set) = self.dependents.get_mut(&r.uid) {
                    set.remove(key);
                    if set.is_empty() {
                        self.dependents.remove(&r.uid);
                    }
                }
            }
        }
    }

    fn set(&mut self, key: ObjKey, uid: String, refs: Vec<OwnerReference>) {
        self.remove(&key);
        if refs.is_empty() {
            return;
        }
        for r in &refs {
            self.dependents
                .entry(r.uid.clone())
                .or_default()
                .insert(key.clone());
        }
        self.owners.insert(key, (uid, refs));
    }
}

fn key_of(o: &AnyObject) -> ObjKey {
    let m = o.meta();
    (o.kind(), m.namespace().to_string(), m.name.clone())
}

/// The key an owner reference points at, if it names a kind skiff serves.
fn owner_key(dependent: &ObjKey, r: &OwnerReference) -> Option<ObjKey> {
    let kind = Kind::from_type(&r.api_version, &r.kind)?;
    let ns = if kind.info().namespaced {
        dependent.1.clone()
    } else {
        String::new()
    };
    Some((kind, ns, r.name.clone()))
}

#[derive(Clone)]
struct Collector {
    registry: Registry,
    graph: Arc<Mutex<Graph>>,
    queue: WorkQueue<Item>,
}

/// A boxed future of `()` or an error.
pub(crate) type Done =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send>>;

/// [`Registry::mutate`] of one object (its main part) behind a box, as `http::resource_boxed`:
/// a dispatch over every kind (`with_kind!`) then holds one pointer per kind instead of
/// every kind's whole future, which in a debug build outgrew the executor threads' 2 MiB
/// stacks once the kinds numbered forty.
pub(crate) fn mutate_boxed<K: Resource>(
    registry: Registry,
    ns: &str,
    name: &str,
    f: impl FnMut(&mut K) -> Result<(), ApiError> + Send + 'static,
) -> Done {
    let (ns, name) = (ns.to_string(), name.to_string());
    Box::pin(async move {
        registry
            .mutate::<K>(&ns, &name, Part::Main, f)
            .await
            .map(|_| ())
    })
}

/// [`Registry::delete`] behind a box (see [`mutate_boxed`]).
pub(crate) fn delete_boxed<K: Resource>(
    registry: Registry,
    ns: &str,
    name: &str,
    opts: DeleteOptions,
) -> Done {
    let (ns, name) = (ns.to_string(), name.to_string());
    Box::pin(async move { registry.delete::<K>(&ns, &name, opts).await.map(|_| ()) })
}

pub fn start(registry: Registry) {
    let c = Collector {
        registry,
        graph: Default::default(),
        queue: WorkQueue::default(),
    };
    for _ in 0..2 {
        let c = c.clone();
        smol::spawn(async move {
            while let Some(item) = c.queue.next().await {
                match c.process(&item).await {
                    Ok(()) => c.queue.forget(&item),
                    Err(e) => {
                        if e.code() != 409 {
                            tracing::warn!(error = %e, ?item, "garbage collection failed; retrying");
                        }
                        c.queue.retry(item.clone());
                    }
                }
                c.queue.done(&item);
            }
        })
        .detach();
    }
    smol::spawn(async move { c.follow().await }).detach();
}

impl Collector {
    fn graph(&self) -> MutexGuard<'_, Graph> {
        self.graph.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists everything, then follows the watch; re-lists when the watch ends.
    async fn follow(&self) {
        loop {
            match self.list_and_watch().await {
                Err(StoreError::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "garbage collector watch failed; re-listing");
                    smol::Timer::after(Duration::from_secs(1)).await;
                }
                Ok(()) => {}
            }
        }
    }

    async fn list_and_watch(&self) -> Result<(), StoreError> {
        let store = &self.registry.store;
        let mut revision = u64::MAX;
        let mut all = Vec::new();
        // Custom resources' objects too: owners and dependents may be of any kind.
        for kind in Kind::ALL.iter().copied().chain(Kind::defined_custom()) {
            let (items, rev) = store.list(kind, None).await?;
            revision = revision.min(rev);
            all.extend(items);
        }
        let uids: HashSet<&str> = all.iter().map(|o| o.meta().uid.as_str()).collect();
        let mut check = Vec::new();
        {
            let mut g = self.graph();
            *g = Graph::default();
            for o in &all {
                let key = key_of(o);
                let m = o.meta();
                g.set(key.clone(), m.uid.clone(), m.owner_references.clone());
                if m.owner_references
                    .iter()
                    .any(|r| !uids.contains(r.uid.as_str()))
                {
                    check.push(Item::Dependent(key.clone()));
                }
                if let Some(item) = self.owner_item(&mut g, o) {
                    check.push(item);
                }
            }
        }
        for item in check {
            self.queue.add(item);
        }
        drop(all);
        // Every kind, custom resources defined later included.
        let mut watch = store.watch(&[], Some(revision)).await?;
        while let Some(ev) = watch.next().await {
            self.observe(ev.event_type, &ev.object);
        }
        match watch.end_reason() {
            Some(crate::store::WatchEnd::Closed) => Err(StoreError::Closed),
            _ => Ok(()),
        }
    }

    /// The owner work an object needs when it is deleting with a GC finalizer.
    fn owner_item(&self, g: &mut Graph, o: &AnyObject) -> Option<Item> {
        let m = o.meta();
        m.deletion_timestamp?;
        let fg = m.finalizers.iter().any(|f| f == FOREGROUND_FINALIZER);
        let orphan = m.finalizers.iter().any(|f| f == ORPHAN_FINALIZER);
        if fg {
            g.foreground.insert(m.uid.clone(), key_of(o));
        }
        (fg || orphan).then(|| Item::Owner {
            uid: m.uid.clone(),
            key: key_of(o),
        })
    }

    fn observe(&self, event_type: EventType, o: &AnyObject) {
        let key = key_of(o);
        let m = o.meta();
        let mut items = Vec::new();
        {
            let mut g = self.graph();
            match event_type {
                EventType::Deleted => {
                    if let Some((_, refs)) = g.owners.get(&key) {
                        for r in refs {
                            if let Some(k) = g.foreground.get(&r.uid) {
                                items.push(Item::Owner {
                                    uid: r.uid.clone(),
                                    key: k.clone(),
                                });
                            }
                        }
                    }
                    g.remove(&key);
                    g.foreground.remove(&m.uid);
                    let now = Instant::now();
                    g.gone
                        .retain(|_, at| now.duration_since(*at) < REMEMBER_GONE);
                    g.gone.insert(m.uid.clone(), now);
                    if g.dependents.contains_key(&m.uid) {
                        items.push(Item::Owner {
                            uid: m.uid.clone(),
                            key: key.clone(),
                        });
                    }
                }
                EventType::Added | EventType::Modified => {
                    let known = g.owners.get(&key).map(|(_, r)| r.as_slice())
                        == Some(&m.owner_references[..]);
                    if !known {
                        // The first dependent of an owner (or one of an owner just gone) is
                        // checked: its owner may never have existed.
                        let unverified = m.owner_references.iter().any(|r| {
                            !g.dependents.contains_key(&r.uid) || g.gone.contains_key(&r.uid)
                        });
                        g.set(key.clone(), m.uid.clone(), m.owner_references.clone());
                        if unverified {
                            items.push(Item::Dependent(key.clone()));
                        }
                    }
                    if let Some(item) = self.owner_item(&mut g, o) {
                        items.push(item);
                    }
                }
            }
        }
        for item in items {
            self.queue.add(item);
        }
    }

    async fn get(&self, key: &ObjKey) -> Result<Option<AnyObject>, ApiError> {
        match self.registry.store.get(key.0, &key.1, &key.2).await {
            Ok(o) => Ok(Some(o)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn process(&self, item: &Item) -> Result<(), ApiError> {
        match item {
            Item::Dependent(key) => self.check_dependent(key).await,
            Item::Owner { uid, key } => self.check_owner(uid, key).await,
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        let mut v: Vec<ObjKey> = self
            .graph()
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    async fn check_owner(&self, uid: &str, key: &ObjKey) -> Result<(), ApiError> {
        let owner = self.get(key).await?.filter(|o| o.meta().uid == uid);
        let Some(owner) = owner else {
            for dep in self.dependents_of(uid) {
                self.queue.add(Item::Dependent(dep));
            }
            return Ok(());
        };
        let m = owner.meta();
        if m.deletion_timestamp.is_none() {
            return Ok(());
        }
        if m.finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for dep in self.dependents_of(uid) {
                let owner_uid = uid.to_string();
                let r = with_kind!(dep.0, K, {
                    mutate_boxed::<K>(
                        self.registry.for_kind(dep.0),
                        &dep.1,
                        &dep.2,
                        move |d: &mut K| {
                            d.meta_mut().owner_references.retain(|r| r.uid != owner_uid);
                            Ok(())
                        },
                    )
                    .await
                });
                crate::machinery::runner::ignore_not_found(r)?;
            }
            self.remove_finalizer(key, uid, ORPHAN_FINALIZER).await?;
            return Ok(());
        }
        if m.finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            let mut blocking = 0;
            for dep in self.dependents_of(uid) {
                let Some(d) = self.get(&dep).await? else {
                    continue;
                };
                let Some(r) = d.meta().owner_references.iter().find(|r| r.uid == uid) else {
                    continue;
                };
                if r.block_owner_deletion == Some(true) {
                    blocking += 1;
                }
                if d.meta().deletion_timestamp.is_none() {
                    self.delete_dependent(&dep, &d, true).await?;
                }
            }
            if blocking == 0 {
                self.remove_finalizer(key, uid, FOREGROUND_FINALIZER)
                    .await?;
            }
        }
        Ok(())
    }

    async fn remove_finalizer(
        &self,
        key: &ObjKey,
        uid: &str,
        finalizer: &'static str,
    ) -> Result<(), ApiError> {
        let uid = uid.to_string();
        let r = with_kind!(key.0, K, {
            mutate_boxed::<K>(
                self.registry.for_kind(key.0),
                &key.1,
                &key.2,
                move |o: &mut K| {
                    if o.meta().uid == uid {
                        o.meta_mut().finalizers.retain(|f| f != finalizer);
                    }
                    Ok(())
                },
            )
            .await
        });
        crate::machinery::runner::ignore_not_found(r).map(|_| ())
    }

    /// Deletes a dependent; in the foreground if its owner waits for it and it has
    /// dependents of its own.
    async fn delete_dependent(
        &self,
        key: &ObjKey,
        obj: &AnyObject,
        owner_waits: bool,
    ) -> Result<(), ApiError> {
        let has_dependents = self.graph().dependents.contains_key(&obj.meta().uid);
        let opts = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(obj.meta().uid.clone()),
                resource_version: None,
            }),
            propagation_policy: Some(
                if owner_waits && has_dependents {
                    "Foreground"
                } else {
                    "Background"
                }
                .into(),
            ),
            ..Default::default()
        };
        let r = with_kind!(key.0, K, {
            delete_boxed::<K>(self.registry.for_kind(key.0), &key.1, &key.2, opts).await
        });
        crate::machinery::runner::ignore_not_found(r).map(|_| ())
    }

    /// A dependent goes when none of its owners remains (owners deleting in the foreground
    /// count as remaining but waiting); references to owners that are gone are dropped.
    async fn check_dependent(&self, key: &ObjKey) -> Result<(), ApiError> {
        let Some(obj) = self.get(key).await? else {
            return Ok(());
        };
        let refs = obj.meta().owner_references.clone();
        if refs.is_empty() || obj.meta().deletion_timestamp.is_some() {
            return Ok(());
        }
        let (mut solid, mut waiting, mut dangling) = (0, 0, Vec::new());
        for r in &refs {
            let Some(okey) = owner_key(key, r) else {
                solid += 1; // a kind we do not serve: leave it alone
                continue;
            };
            match self.get(&okey).await?.filter(|o| o.meta().uid == r.uid) {
                None => dangling.push(r.uid.clone()),
                Some(o)
                    if o.meta().deletion_timestamp.is_some()
                        && o.meta()
                            .finalizers
                            .iter()
                            .any(|f| f == FOREGROUND_FINALIZER) =>
                {
                    waiting += 1
                }
                Some(_) => solid += 1,
            }
        }
        if solid == 0 && waiting == 0 {
            return self.delete_dependent(key, &obj, false).await;
        }
        if solid == 0 {
            return self.delete_dependent(key, &obj, true).await;
        }
        if !dangling.is_empty() {
            let r = with_kind!(key.0, K, {
                mutate_boxed::<K>(
                    self.registry.for_kind(key.0),
                    &key.1,
                    &key.2,
                    move |d: &mut K| {
                        d.meta_mut()
                            .owner_references
                            .retain(|r| !dangling.contains(&r.uid));
                        Ok(())
                    },
                )
                .await
            });
            crate::machinery::runner::ignore_not_found(r)?;
        }
        Ok(())
    }
}
