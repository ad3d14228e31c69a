//! [`Txn`], the view a write closure gets.
//!
//! A closure's writes go to an in-memory overlay first; the writer applies the overlay to the
//! redb transaction only if the closure returns `Ok`, so a failing closure leaves no trace and
//! the revisions it took are handed to the next closure.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use api::{AnyObject, Kind};
use redb::{ReadableTable, WriteTransaction};

use super::codec::{self, decode_object, kind_table, object_key};
use super::{EventType, StoreError};

/// An event a closure produced, with the revision it took.
pub(crate) struct PendingEvent {
    pub event_type: EventType,
    pub revision: u64,
    pub object: AnyObject,
}

/// An event with its object's packed encoding.
pub(crate) type PackedEvent = (PendingEvent, Arc<[u8]>);

type ObjectTable<'t> = redb::Table<'t, &'static str, &'static [u8]>;

/// The tables of one batch's transaction, each opened once and then shared by the batch's
/// closures and their writes: opening a redb table takes a lock and a walk of the table tree,
/// which cost more than the reads and writes themselves. Dropped before the commit.
pub(crate) struct Tables<'t> {
    wtx: &'t WriteTransaction,
    /// The keys Secrets are sealed with.
    keys: Option<&'t super::seal::Keyring>,
    objects: RefCell<Vec<(Kind, ObjectTable<'t>)>>,
    log: RefCell<Option<redb::Table<'t, u64, &'static [u8]>>>,
    /// Committed objects of the kinds that admission reads on every create (see
    /// [`read_often`]), decoded once per batch instead of once per closure. An applied
    /// write drops what it makes stale.
    reads: RefCell<HashMap<(Kind, String), Option<AnyObject>>>,
    /// The same for lists of those kinds, by namespace (`None`: every namespace).
    lists: RefCell<HashMap<(Kind, Option<String>), CachedList>>,
}

/// A cached list: the objects of one kind (in one namespace) by key.
type CachedList = Vec<(String, AnyObject)>;

/// Kinds that a pod's create reads (its Namespace, ServiceAccount, PriorityClasses,
/// LimitRanges and ResourceQuotas): few objects, read by nearly every closure of a batch.
fn read_often(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Namespace
            | Kind::ServiceAccount
            | Kind::PriorityClass
            | Kind::LimitRange
            | Kind::ResourceQuota
    )
}

impl<'t> Tables<'t> {
    pub(crate) fn new(
        wtx: &'t WriteTransaction,
        keys: Option<&'t super::seal::Keyring>,
    ) -> Tables<'t> {
        Tables {
            wtx,
            keys,
            objects: RefCell::new(Vec::new()),
            log: RefCell::new(None),
            reads: RefCell::new(HashMap::new()),
            lists: RefCell::new(HashMap::new()),
        }
    }

    /// Forgets what a write of `kind`/`key` makes stale.
    fn written(&self, kind: Kind, key: &str) {
        if read_often(kind) {
            self.reads.borrow_mut().remove(&(kind, key.to_string()));
            self.lists.borrow_mut().retain(|(k, _), _| *k != kind);
        }
    }

    /// Runs `f` on the table of `kind`, opening it on first use.
    fn with<R>(
        &self,
        kind: Kind,
        f: impl FnOnce(&mut ObjectTable<'t>) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut open = self.objects.borrow_mut();
        let i = match open.iter().position(|(k, _)| *k == kind) {
            Some(i) => i,
            None => {
                open.push((kind, self.wtx.open_table(kind_table(kind))?));
                open.len() - 1
            }
        };
        f(&mut open[i].1)
    }

    /// Runs `f` on the event log, opening it on first use.
    pub(crate) fn with_log<R>(
        &self,
        f: impl FnOnce(&mut redb::Table<'t, u64, &'static [u8]>) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut log = self.log.borrow_mut();
        let table = match &mut *log {
            Some(table) => table,
            None => log.insert(self.wtx.open_table(codec::EVENT_TABLE)?),
        };
        f(table)
    }
}

/// The view a write closure gets. Reads see the state committed before the batch, the earlier
/// closures of the same batch, and this closure's own earlier writes.
pub struct Txn<'a, 't> {
    tables: &'a Tables<'t>,
    next_revision: u64,
    /// (kind, key) -> index into `events` of the key's latest event (its current object), or
    /// `None` once deleted.
    overlay: BTreeMap<(Kind, String), Option<usize>>,
    events: Vec<PendingEvent>,
    /// A dry run (`dryRun=All`): the writes are checked and answered but never stored.
    dry_run: bool,
}

impl<'a, 't> Txn<'a, 't> {
    pub(crate) fn new(tables: &'a Tables<'t>, last_revision: u64) -> Txn<'a, 't> {
        Txn {
            tables,
            next_revision: last_revision + 1,
            overlay: BTreeMap::new(),
            events: Vec::new(),
            dry_run: false,
        }
    }

    /// Makes this a dry run: the writer drops its writes, and objects keep the
    /// resourceVersion they had (none for a new one), as kube-apiserver answers a dry run.
    pub(crate) fn set_dry_run(&mut self) {
        self.dry_run = true;
    }

    pub(crate) fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The revision the next put or delete will take.
    pub fn next_revision(&self) -> u64 {
        self.next_revision
    }

    pub fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<AnyObject>, StoreError> {
        let key = object_key(namespace, name);
        if let Some(slot) = self.overlay.get(&(kind, key.clone())) {
            return Ok(slot.map(|i| self.events[i].object.clone()));
        }
        self.get_committed(kind, &key)
    }

    fn get_committed(&self, kind: Kind, key: &str) -> Result<Option<AnyObject>, StoreError> {
        let cached = read_often(kind);
        if cached {
            if let Some(hit) = self.tables.reads.borrow().get(&(kind, key.to_string())) {
                return Ok(hit.clone());
            }
        }
        let found = self.tables.with(kind, |table| {
            table
                .get(key)?
                .map(|v| decode_object(kind, key, v.value(), self.tables.keys))
                .transpose()
        })?;
        if cached {
            self.tables
                .reads
                .borrow_mut()
                .insert((kind, key.to_string()), found.clone());
        }
        Ok(found)
    }

    fn exists(&self, kind: Kind, key: &str) -> Result<bool, StoreError> {
        if let Some(slot) = self.overlay.get(&(kind, key.to_string())) {
            return Ok(slot.is_some());
        }
        self.tables
            .with(kind, |table| Ok(table.get(key)?.is_some()))
    }

    /// Every object of `kind` (in `namespace` if given), sorted by namespace then name.
    pub fn list(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<AnyObject>, StoreError> {
        let mut merged: BTreeMap<String, AnyObject> =
            self.list_committed(kind, namespace)?.into_iter().collect();
        let prefix = namespace.map(|ns| object_key(ns, ""));
        for ((k, key), slot) in &self.overlay {
            if *k != kind
                || prefix
                    .as_ref()
                    .is_some_and(|p| !key.starts_with(p.as_str()))
            {
                continue;
            }
            match slot {
                Some(i) => {
                    merged.insert(key.clone(), self.events[*i].object.clone());
                }
                None => {
                    merged.remove(key);
                }
            }
        }
        Ok(merged.into_values().collect())
    }

    /// The committed objects of `kind` (in `namespace` if given) by key, in key order.
    fn list_committed(
        &self,
        kind: Kind,
        namespace: Option<&str>,
    ) -> Result<Vec<(String, AnyObject)>, StoreError> {
        let cache_key = (kind, namespace.map(str::to_string));
        if read_often(kind) {
            if let Some(hit) = self.tables.lists.borrow().get(&cache_key) {
                return Ok(hit.clone());
            }
        }
        let mut found = Vec::new();
        self.tables.with(kind, |table| {
            let mut push = |entry: Result<
                (redb::AccessGuard<'_, &str>, redb::AccessGuard<'_, &[u8]>),
                redb::StorageError,
            >|
             -> Result<(), StoreError> {
                let (k, v) = entry?;
                let key = k.value();
                found.push((
                    key.to_string(),
                    decode_object(kind, key, v.value(), self.tables.keys)?,
                ));
                Ok(())
            };
            match namespace {
                Some(ns) => {
                    let (start, end) = codec::namespace_range(ns);
                    for entry in table.range(start.as_str()..end.as_str())? {
                        push(entry)?;
                    }
                }
                None => {
                    for entry in table.iter()? {
                        push(entry)?;
                    }
                }
            }
            Ok(())
        })?;
        if read_often(kind) {
            self.tables
                .lists
                .borrow_mut()
                .insert(cache_key, found.clone());
        }
        Ok(found)
    }

    /// Stores `obj` (an Added event if it is new, Modified otherwise) and returns it with its new
    /// `metadata.resourceVersion`. Whatever resourceVersion `obj` carried is overwritten:
    /// optimistic-concurrency checks are the closure's business, before it calls `put`.
    pub fn put(&mut self, mut obj: AnyObject) -> Result<AnyObject, StoreError> {
        let kind = obj.kind();
        let (namespace, name) = checked_identity(&obj)?;
        let key = object_key(&namespace, &name);
        let event_type = if self.exists(kind, &key)? {
            EventType::Modified
        } else {
            EventType::Added
        };
        let revision = self.take_revision();
        obj.meta_mut().resource_version = if !self.dry_run {
            revision.to_string()
        } else if event_type == EventType::Added {
            String::new()
        } else {
            self.get(kind, &namespace, &name)?
                .map(|o| o.meta().resource_version.clone())
                .unwrap_or_default()
        };
        self.overlay.insert((kind, key), Some(self.events.len()));
        self.events.push(PendingEvent {
            event_type,
            revision,
            object: obj.clone(),
        });
        Ok(obj)
    }

    /// Removes the object and returns it with the deletion revision as its resourceVersion (the
    /// object its Deleted event carries). `NotFound` if it does not exist.
    pub fn delete(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<AnyObject, StoreError> {
        let Some(mut obj) = self.get(kind, namespace, name)? else {
            return Err(StoreError::NotFound {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        };
        let revision = self.take_revision();
        if !self.dry_run {
            obj.meta_mut().resource_version = revision.to_string();
        }
        self.overlay
            .insert((kind, object_key(namespace, name)), None);
        self.events.push(PendingEvent {
            event_type: EventType::Deleted,
            revision,
            object: obj.clone(),
        });
        Ok(obj)
    }

    fn take_revision(&mut self) -> u64 {
        let revision = self.next_revision;
        self.next_revision += 1;
        revision
    }

    /// Encodes the closure's writes, each object once (the table value, the event log entry
    /// and the watchers' packed copy are framed from the same bytes). An error here is the
    /// closure's own failure: nothing has reached the redb transaction yet.
    pub(crate) fn encode(self) -> Result<EncodedWrites<'a, 't>, StoreError> {
        let packed = self
            .events
            .iter()
            .map(|e| codec::pack_object(&e.object).map(Arc::<[u8]>::from))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let keys = self.tables.keys;
        let objects = self
            .overlay
            .into_iter()
            .map(|((kind, key), slot)| {
                let value = slot
                    .map(|i| codec::seal_for(kind, codec::frame_object(&packed[i]), keys))
                    .transpose()?;
                Ok((kind, key, value))
            })
            .collect::<Result<_, StoreError>>()?;
        let log = self
            .events
            .iter()
            .zip(&packed)
            .map(|(e, p)| {
                let framed = codec::frame_event(e.event_type, p)?;
                Ok((e.revision, codec::seal_for(e.object.kind(), framed, keys)?))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(EncodedWrites {
            tables: self.tables,
            objects,
            log,
            events: self.events.into_iter().zip(packed).collect(),
            last_revision: self.next_revision - 1,
        })
    }
}

/// A successful closure's writes, encoded and ready for the transaction.
pub(crate) struct EncodedWrites<'a, 't> {
    tables: &'a Tables<'t>,
    /// (kind, key, value); `None` deletes. Sorted by kind, then key.
    objects: Vec<(Kind, String, Option<Vec<u8>>)>,
    log: Vec<(u64, Vec<u8>)>,
    /// Each event with its object's packed encoding.
    events: Vec<PackedEvent>,
    last_revision: u64,
}

impl EncodedWrites<'_, '_> {
    /// Writes into the redb transaction; returns the events (each with its object's packed
    /// encoding) and the last revision taken. An error leaves the transaction partly written:
    /// the caller must abandon it.
    pub(crate) fn apply(self) -> Result<(Vec<PackedEvent>, u64), StoreError> {
        for (kind, key, value) in &self.objects {
            self.tables.written(*kind, key);
            self.tables.with(*kind, |table| {
                match value {
                    Some(bytes) => {
                        table.insert(key.as_str(), bytes.as_slice())?;
                    }
                    None => {
                        table.remove(key.as_str())?;
                    }
                }
                Ok(())
            })?;
        }
        self.tables.with_log(|log| {
            for (revision, bytes) in &self.log {
                log.insert(*revision, bytes.as_slice())?;
            }
            Ok(())
        })?;
        Ok((self.events, self.last_revision))
    }
}

/// The object's namespace and name, refusing identities the key scheme cannot hold.
fn checked_identity(obj: &AnyObject) -> Result<(String, String), StoreError> {
    let kind = obj.kind();
    let meta = obj.meta();
    let namespace = meta.namespace();
    if meta.name.is_empty() {
        return Err(StoreError::BadRequest(format!(
            "{} object without a name",
            kind.info().kind
        )));
    }
    if meta.name.contains('/') || namespace.contains('/') {
        return Err(StoreError::BadRequest(format!(
            "{} {namespace}/{}: names may not contain '/'",
            kind.info().kind,
            meta.name
        )));
    }
    match (kind.info().namespaced, namespace.is_empty()) {
        (true, true) => Err(StoreError::BadRequest(format!(
            "{} {} needs a namespace",
            kind.info().kind,
            meta.name
        ))),
        (false, false) => Err(StoreError::BadRequest(format!(
            "{} {} is cluster-scoped but names namespace {namespace}",
            kind.info().kind,
            meta.name
        ))),
        _ => Ok((namespace.to_string(), meta.name.clone())),
    }
}
