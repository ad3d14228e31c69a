//! The etcd datastore (`skiff server --datastore-endpoint`): the same store over an etcd v3
//! cluster, so that several servers share one state (see docs/etcd.md).
//!
//! * **Keys:** `/registry/<plural>/<namespace>/<name>`, and `/registry/<plural>/<name>` for
//!   cluster-scoped kinds, as kube-apiserver lays them out. **Values:** the redb store's
//!   postcard envelope, Secrets sealed the same way.
//! * **Revisions:** an object's resourceVersion is its key's `mod_revision`; the value's own
//!   copy is ignored on reads. etcd gives every write of one transaction the same revision,
//!   so the events of a closure that wrote several objects share it (each with its index).
//! * **Writes:** a closure runs on a blocking thread against the live store, each read
//!   recording the `mod_revision` it saw; its writes then go in one etcd transaction whose
//!   compares require every key read to be unchanged (absent keys still absent; listed
//!   ranges without a key modified since the list). A lost race runs the closure again, as
//!   kube-apiserver's `GuaranteedUpdate` does.
//! * **Watches:** one etcd watch of `/registry/` per server feeds the hub, and a window of the
//!   latest events (kube-apiserver's watch cache) lets watches resume; older ones get 410.
//! * **Reads in writes:** a write's first attempt reads serializably, and reads the kinds
//!   nearly every create reads (namespaces, ServiceAccounts, PriorityClasses, LimitRanges,
//!   ResourceQuotas) from a copy the watch keeps ([`Often`]), as kube-apiserver's admission
//!   reads informers. The transaction compares their revisions all the same, so a read that
//!   was behind loses the compare and the write runs again on linearizable etcd reads.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use api::{AnyObject, Kind};

use super::codec::{self, decode_object, object_key};
use super::hub::{kind_bit, lock, Hub};
use super::seal::Keyring;
use super::txn::{read_often, PendingEvent};
use super::{EventType, Page, StoreError, WatchEvent};
use crate::etcd::{prefix_end, Compare, EtcdClient, EtcdError, KeyValue, Op};

/// Where every object lives.
pub(crate) const PREFIX: &str = "/registry/";

/// Where the resourceVersions a closure hands out before its commit start: the committed
/// revision is known only after the transaction, and the registry maps these placeholders to
/// it ([`super::Renumber`]). No etcd revision gets this high.
pub(crate) const PLACEHOLDER_BASE: u64 = 1 << 62;

/// How many of the latest events a server keeps for watches that resume.
const WINDOW_EVENTS: usize = 20_000;

/// How often the server compacts etcd's history, keeping the last period's revisions
/// (kube-apiserver's default interval).
const COMPACT_EVERY: Duration = Duration::from_secs(300);

impl From<EtcdError> for StoreError {
    fn from(e: EtcdError) -> StoreError {
        match e {
            EtcdError::Compacted {
                requested,
                compacted,
            } => StoreError::Expired {
                requested: requested.max(0) as u64,
                oldest: compacted.max(0) as u64,
            },
            other => StoreError::Db(format!("etcd: {other}")),
        }
    }
}

/// The etcd key of the object at `key` ([`object_key`]) of `kind`.
/// The etcd prefix of `kind` after `/registry/`: its plural, or for a custom resource
/// `group/plural`, as kube-apiserver lays them out.
fn prefix_of(kind: Kind) -> String {
    let info = kind.info();
    if kind.is_custom() {
        format!("{}/{}", info.group, info.plural)
    } else {
        info.plural.to_string()
    }
}

pub(crate) fn etcd_key(kind: Kind, key: &str) -> Vec<u8> {
    let plural = prefix_of(kind);
    let rest = key.strip_prefix('/').unwrap_or(key);
    format!("{PREFIX}{plural}/{rest}").into_bytes()
}

/// The etcd range `[start, end)` of every object of `kind` (in `namespace` if given).
pub(crate) fn etcd_range(kind: Kind, namespace: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let plural = prefix_of(kind);
    let start = match namespace {
        Some(ns) if kind.info().namespaced => format!("{PREFIX}{plural}/{ns}/"),
        _ => format!("{PREFIX}{plural}/"),
    }
    .into_bytes();
    let end = prefix_end(&start);
    (start, end)
}

/// The kind and [`object_key`] an etcd key names, if it is one of the store's.
pub(crate) fn parse_key(key: &[u8]) -> Option<(Kind, String)> {
    let rest = std::str::from_utf8(key).ok()?.strip_prefix(PREFIX)?;
    let (plural, name) = rest.split_once('/')?;
    if plural.contains('.') {
        // A custom resource's: `<group>/<plural>/[<namespace>/]<name>`.
        let (plural, name) = name.split_once('/')?;
        let kind = Kind::custom_named(group_of_key(rest), plural);
        return match name.split('/').count() {
            1 => Some((kind, format!("/{name}"))),
            2 => Some((kind, name.to_string())),
            _ => None,
        };
    }
    let kind = *Kind::ALL.iter().find(|k| k.info().plural == plural)?;
    if kind.info().namespaced {
        name.contains('/').then(|| (kind, name.to_string()))
    } else {
        (!name.contains('/')).then(|| (kind, format!("/{name}")))
    }
}

/// The group of a custom resource's key (what comes before its first `/`).
fn group_of_key(rest: &str) -> &str {
    rest.split('/').next().unwrap_or("")
}

fn revision_of(kv: &KeyValue) -> u64 {
    kv.mod_revision.max(0) as u64
}

/// Decodes a stored value, giving it the key's `mod_revision` as its resourceVersion.
pub(crate) fn decode_kv(
    kind: Kind,
    key: &str,
    kv: &KeyValue,
    keys: Option<&Keyring>,
) -> Result<AnyObject, StoreError> {
    let mut obj = decode_object(kind, key, &kv.value, keys)?;
    obj.meta_mut().resource_version = revision_of(kv).to_string();
    Ok(obj)
}

/// A closure's committed reads against etcd, each with the revision it saw: what its
/// transaction compares.
#[derive(Default)]
pub(crate) struct Observed {
    /// etcd key -> `mod_revision` seen (0: absent).
    keys: HashMap<Vec<u8>, i64>,
    /// Ranges listed, with the store revision they were read at.
    ranges: Vec<(Vec<u8>, Vec<u8>, i64)>,
}

/// The reads of a closure run against etcd (from a blocking thread).
pub(crate) struct Reader<'a> {
    pub(crate) client: &'a EtcdClient,
    /// Serializable reads (see [`EtcdClient::range_with`]): the transaction's compares
    /// refuse a write planned on a stale read, which then runs again with linearizable ones.
    pub(crate) serializable: bool,
    /// The watch's copy of the read-often kinds, on a first attempt.
    pub(crate) often: Option<&'a RwLock<Often>>,
    pub(crate) keys: Option<&'a Keyring>,
    pub(crate) observed: RefCell<Observed>,
    /// What this attempt already read (a create reads its namespace more than once): each
    /// key and range is asked of etcd once, and compared at the revision first seen.
    pub(crate) seen: RefCell<Seen>,
}

/// Objects listed from a range, each with its [`object_key`].
type Listed = Vec<(String, AnyObject)>;

/// A closure's reads so far, by etcd key and by range.
#[derive(Default)]
pub(crate) struct Seen {
    keys: HashMap<Vec<u8>, Option<AnyObject>>,
    ranges: HashMap<(Vec<u8>, Vec<u8>), Listed>,
}

impl Reader<'_> {
    pub(crate) fn get(&self, kind: Kind, key: &str) -> Result<Option<AnyObject>, StoreError> {
        let ek = etcd_key(kind, key);
        if let Some(hit) = self.seen.borrow().keys.get(&ek) {
            return Ok(hit.clone());
        }
        if let Some(often) = self.often.filter(|_| read_often(kind)) {
            let often = often.read().unwrap_or_else(|e| e.into_inner());
            if often.revision != 0 {
                let found = often.objects.get(&ek).map(|o| (**o).clone());
                drop(often);
                let revision = found.as_ref().map_or(0, |o| {
                    o.meta().resource_version.parse::<i64>().unwrap_or(-1)
                });
                self.observed
                    .borrow_mut()
                    .keys
                    .entry(ek.clone())
                    .or_insert(revision);
                self.seen.borrow_mut().keys.insert(ek, found.clone());
                return Ok(found);
            }
        }
        tracing::trace!(?kind, key, "a write's read of one key");
        let range = smol::block_on(
            self.client
                .range_with(&ek, None, None, 1, self.serializable),
        )?;
        let kv = range.kvs.into_iter().next();
        self.observed
            .borrow_mut()
            .keys
            .entry(ek.clone())
            .or_insert_with(|| kv.as_ref().map_or(0, |kv| kv.mod_revision));
        let found = kv
            .map(|kv| decode_kv(kind, key, &kv, self.keys))
            .transpose()?;
        self.seen.borrow_mut().keys.insert(ek, found.clone());
        Ok(found)
    }

    /// Whether the object at `key` is absent, when that can be told without asking etcd: on a
    /// first attempt it is taken for absent (a create's usual case) and the transaction
    /// requires it to be, so if it was there the write runs again on linearizable reads,
    /// which find it. None: read it.
    pub(crate) fn presumed_absent(&self, kind: Kind, key: &str) -> Option<bool> {
        let ek = etcd_key(kind, key);
        if let Some(hit) = self.seen.borrow().keys.get(&ek) {
            return Some(hit.is_none());
        }
        if !self.serializable {
            return None;
        }
        self.observed
            .borrow_mut()
            .keys
            .entry(ek.clone())
            .or_insert(0);
        self.seen.borrow_mut().keys.insert(ek, None);
        Some(true)
    }

    pub(crate) fn list(
        &self,
        kind: Kind,
        namespace: Option<&str>,
    ) -> Result<Vec<(String, AnyObject)>, StoreError> {
        let (start, end) = etcd_range(kind, namespace);
        let range_key = (start.clone(), end.clone());
        if let Some(hit) = self.seen.borrow().ranges.get(&range_key) {
            return Ok(hit.clone());
        }
        if let Some(often) = self.often.filter(|_| read_often(kind)) {
            let often = often.read().unwrap_or_else(|e| e.into_inner());
            if often.revision != 0 {
                let found: Vec<(String, AnyObject)> = often
                    .objects
                    .range(start.clone()..end.clone())
                    .filter_map(|(k, o)| Some((parse_key(k)?.1, (**o).clone())))
                    .collect();
                let revision = often.revision as i64;
                drop(often);
                self.observed
                    .borrow_mut()
                    .ranges
                    .push((start, end, revision));
                self.seen
                    .borrow_mut()
                    .ranges
                    .insert(range_key, found.clone());
                return Ok(found);
            }
        }
        tracing::trace!(?kind, ?namespace, "a write's read of a range");
        let range =
            smol::block_on(
                self.client
                    .range_with(&start, Some(&end), None, 0, self.serializable),
            )?;
        let mut found = Vec::with_capacity(range.kvs.len());
        for kv in &range.kvs {
            let Some((k, key)) = parse_key(&kv.key) else {
                continue;
            };
            if k == kind {
                found.push((key.clone(), decode_kv(kind, &key, kv, self.keys)?));
            }
        }
        self.observed
            .borrow_mut()
            .ranges
            .push((start, end, range.revision));
        self.seen
            .borrow_mut()
            .ranges
            .insert(range_key, found.clone());
        Ok(found)
    }
}

/// A closure's writes as one etcd transaction: the compares of everything it read, and the
/// final state of each key it wrote.
pub(crate) fn transaction(
    observed: Observed,
    events: &[PendingEvent],
    keys: Option<&Keyring>,
) -> Result<(Vec<Compare>, Vec<Op>), StoreError> {
    let mut compares: Vec<Compare> = observed
        .keys
        .into_iter()
        .map(|(key, rev)| {
            if rev == 0 {
                Compare::Absent(key)
            } else {
                Compare::ModRevision(key, rev)
            }
        })
        .collect();
    compares.extend(observed.ranges.into_iter().map(|(start, end, rev)| {
        Compare::ModRevisionBelow {
            key: start,
            range_end: end,
            revision: rev + 1,
        }
    }));
    // etcd refuses a transaction that names a key twice: the last write of each key stands.
    let mut last: Vec<(Vec<u8>, Option<&PendingEvent>)> = Vec::new();
    for e in events {
        let meta = e.object.meta();
        let key = etcd_key(e.object.kind(), &object_key(meta.namespace(), &meta.name));
        let state = (e.event_type != EventType::Deleted).then_some(e);
        match last.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = state,
            None => last.push((key, state)),
        }
    }
    let mut ops = Vec::with_capacity(last.len());
    for (key, state) in last {
        ops.push(match state {
            Some(e) => {
                let packed = codec::pack_object(&e.object)?;
                let value = codec::seal_for(e.object.kind(), codec::frame_object(&packed), keys)?;
                Op::Put {
                    key,
                    value,
                    lease: 0,
                }
            }
            None => Op::Delete { key },
        });
    }
    Ok((compares, ops))
}

/// An event as the window keeps it: its object's postcard bytes only (shared with the live
/// event), decoded again for a watch that resumes. Keeping the decoded objects (and the JSON
/// that watchers had encoded into them) held 500-700 MiB with 1,000 nodes' heartbeats in the
/// window.
struct Kept {
    event_type: EventType,
    revision: u64,
    index: u32,
    kind: Kind,
    packed: Arc<[u8]>,
}

/// The latest events, for watches that resume.
struct Window {
    events: VecDeque<Kept>,
    /// A watch may resume after any revision at or above this.
    oldest: u64,
}

/// The objects of the kinds nearly every write reads ([`read_often`]), as this server's
/// etcd watch last showed them: few, small, and read by every create.
#[derive(Default)]
pub(crate) struct Often {
    /// etcd key -> the object, its resourceVersion its `mod_revision`.
    objects: BTreeMap<Vec<u8>, Arc<AnyObject>>,
    /// Every change up to this revision is in `objects` (0: not to be used, after a gap in
    /// the watch).
    revision: u64,
}

impl Often {
    /// Takes in a watch batch's events, complete up to `revision`.
    fn apply(&mut self, events: &[Arc<WatchEvent>], revision: u64) {
        if self.revision == 0 {
            return;
        }
        for e in events {
            let kind = e.object.kind();
            if !read_often(kind) {
                continue;
            }
            let meta = e.object.meta();
            let key = etcd_key(kind, &object_key(meta.namespace(), &meta.name));
            if e.event_type == EventType::Deleted {
                self.objects.remove(&key);
            } else {
                self.objects.insert(key, e.object.clone());
            }
        }
        self.revision = self.revision.max(revision);
    }
}

/// The state a server keeps for an etcd datastore.
pub(crate) struct Remote {
    pub(crate) client: EtcdClient,
    pub(crate) keys: Option<Arc<Keyring>>,
    /// The read-often kinds, kept by [`Remote::feed`].
    pub(crate) often: RwLock<Often>,
    window: Mutex<Window>,
    /// The last revision handed to the hub.
    pub(crate) published: Arc<AtomicU64>,
}

impl Remote {
    /// Connects and notes etcd's current revision, from which this server's watch starts.
    pub(crate) async fn connect(
        client: EtcdClient,
        keys: Option<Arc<Keyring>>,
    ) -> Result<(Remote, u64), StoreError> {
        let head = client.range(PREFIX.as_bytes(), None, None, 1).await?;
        let revision = head.revision.max(0) as u64;
        // The read-often kinds as of that revision; the watch, which starts right after it,
        // keeps them.
        let mut often = Often {
            objects: BTreeMap::new(),
            revision,
        };
        for kind in Kind::ALL.iter().copied().filter(|k| read_often(*k)) {
            let (start, end) = etcd_range(kind, None);
            let found = client
                .range(&start, Some(&end), Some(head.revision), 0)
                .await?;
            for kv in &found.kvs {
                if let Some((k, key)) = parse_key(&kv.key).filter(|(k, _)| *k == kind) {
                    let obj = decode_kv(k, &key, kv, keys.as_deref())?;
                    often.objects.insert(kv.key.clone(), Arc::new(obj));
                }
            }
        }
        Ok((
            Remote {
                client,
                often: RwLock::new(often),
                keys,
                window: Mutex::new(Window {
                    events: VecDeque::new(),
                    oldest: revision,
                }),
                published: Arc::new(AtomicU64::new(revision)),
            },
            revision,
        ))
    }

    pub(crate) fn oldest_resumable(&self) -> u64 {
        lock(&self.window).oldest
    }

    pub(crate) async fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<AnyObject, StoreError> {
        let key = object_key(namespace, name);
        match self.client.get(&etcd_key(kind, &key)).await? {
            Some(kv) => decode_kv(kind, &key, &kv, self.keys.as_deref()),
            None => Err(StoreError::NotFound {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
        }
    }

    /// One page of `kind` in key order after `after`, as [`super::Store::list_page`].
    pub(crate) async fn list_page<T, F>(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        after: Option<String>,
        limit: usize,
        mut sink: T,
        mut visit: F,
    ) -> Result<(T, Page), StoreError>
    where
        F: FnMut(&mut T, AnyObject) -> bool,
    {
        let (start, end) = etcd_range(kind, namespace);
        let mut from = match &after {
            Some(a) => {
                let mut k = etcd_key(kind, a);
                k.push(0);
                k
            }
            None => start,
        };
        // Pages of the range are read at one revision, so a list is one snapshot.
        let mut at: Option<i64> = None;
        let mut counted = 0;
        let mut last_key: Option<String> = None;
        // One more than the page, to know whether more follow; any limit, saturating.
        let chunk = if limit > 0 {
            i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX)
        } else {
            0
        };
        loop {
            let range = self.client.range(&from, Some(&end), at, chunk).await?;
            at.get_or_insert(range.revision);
            let more = range.more;
            for kv in &range.kvs {
                let Some((k, key)) = parse_key(&kv.key) else {
                    continue;
                };
                if k != kind {
                    continue;
                }
                if limit > 0 && counted == limit {
                    return Ok((
                        sink,
                        Page {
                            revision: at.unwrap_or(0).max(0) as u64,
                            next: last_key,
                        },
                    ));
                }
                let obj = decode_kv(kind, &key, kv, self.keys.as_deref())?;
                if visit(&mut sink, obj) {
                    counted += 1;
                    last_key = Some(key);
                }
            }
            match (more, range.kvs.last()) {
                (true, Some(kv)) => {
                    from = kv.key.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok((
            sink,
            Page {
                revision: at.unwrap_or(0).max(0) as u64,
                next: None,
            },
        ))
    }

    /// The window's events of `mask` after `after` up to `upto`; `Expired` if `after` is older
    /// than the window.
    pub(crate) fn replay(
        &self,
        after: u64,
        upto: u64,
        mask: u64,
    ) -> Result<VecDeque<Arc<WatchEvent>>, StoreError> {
        let window = lock(&self.window);
        if after < window.oldest {
            return Err(StoreError::Expired {
                requested: after,
                oldest: window.oldest,
            });
        }
        window
            .events
            .iter()
            .filter(|e| e.revision > after && e.revision <= upto && mask & kind_bit(e.kind) != 0)
            .map(|e| {
                let object: AnyObject = postcard::from_bytes(&e.packed).map_err(|err| {
                    StoreError::Db(format!(
                        "unreadable event at revision {}: {err}",
                        e.revision
                    ))
                })?;
                let mut event = WatchEvent::new(e.event_type, e.revision, object, e.packed.clone());
                event.index = e.index;
                Ok(Arc::new(event))
            })
            .collect()
    }

    /// Turns one etcd watch batch into the hub's events, each revision's numbered in order.
    fn convert(&self, batch: crate::etcd::WatchBatch) -> Vec<Arc<WatchEvent>> {
        let mut out = Vec::with_capacity(batch.events.len());
        let mut index: (u64, u32) = (0, 0);
        for event in batch.events {
            let (kv, prev, deleted) = match event {
                crate::etcd::WatchEvent::Put { kv, prev } => (kv, prev, false),
                crate::etcd::WatchEvent::Delete { kv, prev } => (kv, prev, true),
            };
            let Some((kind, key)) = parse_key(&kv.key) else {
                continue;
            };
            let revision = revision_of(&kv);
            let (event_type, source) = if deleted {
                match prev {
                    Some(p) => (EventType::Deleted, p),
                    // Without the previous value there is nothing to tell watchers.
                    None => continue,
                }
            } else if kv.create_revision == kv.mod_revision {
                (EventType::Added, kv)
            } else {
                (EventType::Modified, kv)
            };
            let mut obj = match decode_object(kind, &key, &source.value, self.keys.as_deref()) {
                Ok(obj) => obj,
                Err(e) => {
                    tracing::error!(error = %e, "an etcd watch event could not be decoded; skipped");
                    continue;
                }
            };
            obj.meta_mut().resource_version = revision.to_string();
            let packed = match codec::pack_object(&obj) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(error = %e, "an etcd watch event could not be packed; skipped");
                    continue;
                }
            };
            index = if index.0 == revision {
                (revision, index.1 + 1)
            } else {
                (revision, 0)
            };
            let mut event = WatchEvent::new(event_type, revision, obj, packed.into());
            event.index = index.1;
            out.push(Arc::new(event));
        }
        out
    }

    /// Feeds the hub from one etcd watch of every object, resuming it when its stream ends,
    /// until the hub closes. A gap that etcd compacted away cannot be bridged: every watcher
    /// is then ended, so clients re-list.
    pub(crate) async fn feed(self: Arc<Remote>, hub: Arc<Hub>) {
        let end = prefix_end(PREFIX.as_bytes());
        loop {
            if hub.is_closed() {
                return;
            }
            let from = self.published.load(Ordering::Acquire) + 1;
            let mut watch = match self
                .client
                .watch(PREFIX.as_bytes(), Some(&end), from as i64)
                .await
            {
                Ok(w) => w,
                Err(EtcdError::Compacted { .. }) => {
                    self.lost_history(&hub).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "etcd watch failed; retrying");
                    smol::Timer::after(Duration::from_millis(500)).await;
                    continue;
                }
            };
            loop {
                match watch.next().await {
                    Ok(Some(batch)) => {
                        let revision = batch.revision.max(0) as u64;
                        let events = self.convert(batch);
                        let last = events.last().map_or(revision, |e| e.revision);
                        {
                            let mut window = lock(&self.window);
                            window.events.extend(events.iter().map(|e| Kept {
                                event_type: e.event_type,
                                revision: e.revision,
                                index: e.index,
                                kind: e.object.kind(),
                                packed: e.packed.clone(),
                            }));
                            while window.events.len() > WINDOW_EVENTS {
                                if let Some(old) = window.events.pop_front() {
                                    window.oldest = window.oldest.max(old.revision);
                                }
                            }
                        }
                        self.often
                            .write()
                            .unwrap_or_else(|e| e.into_inner())
                            .apply(&events, last);
                        if !events.is_empty() {
                            hub.publish(&events, last);
                        }
                        self.published.fetch_max(last, Ordering::AcqRel);
                    }
                    Ok(None) => break,
                    Err(EtcdError::Compacted { .. }) => {
                        self.lost_history(&hub).await;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "etcd watch ended; resuming");
                        break;
                    }
                }
            }
        }
    }

    /// The watch fell behind a compaction: start again from etcd's current revision, with an
    /// empty window, and end every watch so its client re-lists.
    async fn lost_history(&self, hub: &Hub) {
        tracing::warn!("etcd compacted revisions this server had not seen; watchers re-list");
        loop {
            match self.client.range(PREFIX.as_bytes(), None, None, 1).await {
                Ok(head) => {
                    let revision = head.revision.max(0) as u64;
                    // Changes were missed: writes read etcd itself from now on.
                    self.often
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .revision = 0;
                    let mut window = lock(&self.window);
                    window.events.clear();
                    window.oldest = revision;
                    self.published.store(revision, Ordering::Release);
                    drop(window);
                    hub.expire_all(revision);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "etcd unreachable");
                    smol::Timer::after(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Compacts etcd every [`COMPACT_EVERY`] to the revision it had one period earlier.
    pub(crate) async fn compact_periodically(self: Arc<Remote>, hub: Arc<Hub>) {
        let mut previous: Option<i64> = None;
        loop {
            smol::Timer::after(COMPACT_EVERY).await;
            if hub.is_closed() {
                return;
            }
            if let Some(rev) = previous {
                if let Err(e) = self.client.compact(rev).await {
                    // Another server compacted as far already, or etcd is away for now.
                    tracing::debug!(error = %e, "etcd compaction skipped");
                }
            }
            previous = self
                .client
                .range(PREFIX.as_bytes(), None, None, 1)
                .await
                .ok()
                .map(|r| r.revision);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_for_namespaced_and_cluster_kinds() {
        let k = etcd_key(Kind::Pod, "default/web");
        assert_eq!(k, b"/registry/pods/default/web");
        assert_eq!(parse_key(&k), Some((Kind::Pod, "default/web".to_string())));
        let n = etcd_key(Kind::Node, "/n1");
        assert_eq!(n, b"/registry/nodes/n1");
        assert_eq!(parse_key(&n), Some((Kind::Node, "/n1".to_string())));
        assert_eq!(parse_key(b"/registry/nodes/a/b"), None);
        assert_eq!(parse_key(b"/registry/pods/web"), None);
        assert_eq!(parse_key(b"/other/pods/a/b"), None);
        let (start, end) = etcd_range(Kind::Pod, Some("default"));
        assert_eq!(start, b"/registry/pods/default/");
        assert_eq!(end, b"/registry/pods/default0");
        let (start, _) = etcd_range(Kind::Node, Some("ignored"));
        assert_eq!(start, b"/registry/nodes/");
    }
}
