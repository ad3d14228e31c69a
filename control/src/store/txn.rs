//! [`Txn`], the view a write closure gets.
//!
//! A closure's writes go to an in-memory overlay first; the writer applies the overlay to the
//! redb transaction only if the closure returns `Ok`, so a failing closure leaves no trace and
//! the revisions it took are handed to the next closure.
//!
//! A closure runs either inside the writer's batch (reading the batch's write transaction) or
//! on its caller's thread against a read snapshot ([`Tables::snapshot`]). In a snapshot every
//! committed key and range it reads is recorded; its writes become a [`Plan`] that the writer
//! applies only if none of those reads has been written since the snapshot
//! ([`RecentWrites`]): a compare-and-swap on revisions, as kube-apiserver's
//! `GuaranteedUpdate` does with etcd's `mod_revision`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use api::{AnyObject, Kind};
use redb::{ReadTransaction, ReadableTable, WriteTransaction};

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

/// Objects by key, in key order.
type KeyedObjects = Vec<(String, AnyObject)>;

/// A kind's table, in the writer's transaction or in a read snapshot.
enum ObjectTable<'t> {
    Write(redb::Table<'t, &'static str, &'static [u8]>),
    Read(redb::ReadOnlyTable<&'static str, &'static [u8]>),
    /// A table not made yet (a custom resource's before its first write): empty.
    Missing,
}

/// Runs `$body` with `$t` bound to the table, whichever transaction it belongs to.
macro_rules! readable {
    ($table:expr, $t:ident => $body:expr) => {
        match $table {
            ObjectTable::Write($t) => $body,
            ObjectTable::Read($t) => $body,
            ObjectTable::Missing => Ok(Default::default()),
        }
    };
}

/// Where a [`Tables`] reads from.
enum Source<'t> {
    /// The writer's batch: reads see the earlier closures of the batch; writes are applied.
    Batch(&'t WriteTransaction),
    /// A committed snapshot: reads are recorded, writes are only planned.
    Snapshot(&'t ReadTransaction),
    /// The etcd datastore: reads go to etcd, each recording the revision it saw, and writes
    /// are planned for one etcd transaction.
    Remote(&'t super::remote::Reader<'t>),
}

/// A committed key or range a snapshot closure read: its plan holds only if nothing in it has
/// been written since the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    Key(Kind, String),
    /// Every object of the kind in the namespace (`None`: in every namespace).
    Range(Kind, Option<String>),
}

/// The last revision that wrote each recently written key, namespace and kind: what the
/// writer checks a [`Plan`]'s reads against. Keys written at or below `horizon` are
/// forgotten, so a plan read from a snapshot older than that is refused as a conflict (and
/// retried from a newer snapshot).
#[derive(Default)]
pub(crate) struct RecentWrites {
    keys: HashMap<(Kind, String), u64>,
    namespaces: HashMap<(Kind, String), u64>,
    kinds: HashMap<Kind, u64>,
    horizon: u64,
    /// Nothing is recorded: without optimistic writes no plan is checked, and the 65,536
    /// remembered keys held about 5 MB for nothing.
    off: bool,
}

impl RecentWrites {
    /// How many written keys are remembered before the older ones are forgotten.
    const MAX_KEYS: usize = 65_536;
    /// How many of the latest revisions are kept when forgetting.
    const KEEP_REVISIONS: u64 = 16_384;

    pub(crate) fn new(committed: u64) -> RecentWrites {
        RecentWrites {
            horizon: committed,
            ..Default::default()
        }
    }

    /// Recent writes that record nothing: every plan checked against them is refused (the
    /// store without [`super::StoreConfig::optimistic_writes`] makes none).
    pub(crate) fn off(committed: u64) -> RecentWrites {
        RecentWrites {
            off: true,
            ..RecentWrites::new(committed)
        }
    }

    fn record(&mut self, kind: Kind, key: &str, revision: u64) {
        if self.off {
            return;
        }
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        self.keys.insert((kind, key.to_string()), revision);
        match self.namespaces.get_mut(&(kind, namespace.to_string())) {
            Some(r) => *r = revision,
            None => {
                self.namespaces
                    .insert((kind, namespace.to_string()), revision);
            }
        }
        self.kinds.insert(kind, revision);
    }

    /// Whether anything `read` covers was written after `snapshot`.
    pub(crate) fn changed_since(&self, snapshot: u64, read: &Read) -> bool {
        if self.off || snapshot < self.horizon {
            return true;
        }
        let last = match read {
            Read::Key(kind, key) => self.keys.get(&(*kind, key.clone())),
            Read::Range(kind, Some(ns)) => self.namespaces.get(&(*kind, ns.clone())),
            Read::Range(kind, None) => self.kinds.get(kind),
        };
        last.is_some_and(|r| *r > snapshot)
    }

    /// Forgets the oldest keys once there are too many; `committed` is the last revision.
    pub(crate) fn trim(&mut self, committed: u64) {
        if self.keys.len() <= Self::MAX_KEYS {
            return;
        }
        let cut = committed.saturating_sub(Self::KEEP_REVISIONS);
        self.keys.retain(|_, r| *r > cut);
        self.horizon = self.horizon.max(cut);
    }

    /// After a failed commit the recorded revisions name writes that never happened (and
    /// will be taken again): forget everything, and refuse plans read before `committed`.
    pub(crate) fn reset(&mut self, committed: u64) {
        *self = RecentWrites {
            off: self.off,
            ..RecentWrites::new(committed)
        };
    }
}

/// The tables of one batch's transaction (or of one snapshot), each opened once and then
/// shared by the batch's closures and their writes: opening a redb table takes a lock and a
/// walk of the table tree, which cost more than the reads and writes themselves. Dropped
/// before the commit.
pub(crate) struct Tables<'t> {
    source: Source<'t>,
    /// The keys Secrets are sealed with.
    keys: Option<&'t super::seal::Keyring>,
    objects: RefCell<Vec<(Kind, ObjectTable<'t>)>>,
    log: RefCell<Option<redb::Table<'t, u64, &'static [u8]>>>,
    /// Committed objects of the kinds that admission reads on every create (see
    /// [`read_often`]), decoded once per batch instead of once per closure. An applied
    /// write drops what it makes stale.
    reads: RefCell<HashMap<(Kind, String), Option<AnyObject>>>,
    /// The same for lists of those kinds, by namespace (`None`: every namespace).
    lists: RefCell<HashMap<(Kind, Option<String>), KeyedObjects>>,
    /// In a snapshot: every committed key and range read.
    read_set: RefCell<Vec<Read>>,
    /// In the writer: the revisions of the recent writes, which applied writes update.
    recent: Option<&'t RefCell<RecentWrites>>,
}

/// Kinds that a pod's create reads (its Namespace, ServiceAccount, PriorityClasses,
/// LimitRanges and ResourceQuotas): few objects, read by nearly every closure of a batch.
pub(crate) fn read_often(kind: Kind) -> bool {
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
        recent: &'t RefCell<RecentWrites>,
    ) -> Tables<'t> {
        Tables::with_source(Source::Batch(wtx), keys, Some(recent))
    }

    /// The tables of a read snapshot, for a closure run before the write ([`Plan`]).
    pub(crate) fn snapshot(
        rtx: &'t ReadTransaction,
        keys: Option<&'t super::seal::Keyring>,
    ) -> Tables<'t> {
        Tables::with_source(Source::Snapshot(rtx), keys, None)
    }

    /// The tables of a closure run against etcd.
    pub(crate) fn remote(
        reader: &'t super::remote::Reader<'t>,
        keys: Option<&'t super::seal::Keyring>,
    ) -> Tables<'t> {
        Tables::with_source(Source::Remote(reader), keys, None)
    }

    fn with_source(
        source: Source<'t>,
        keys: Option<&'t super::seal::Keyring>,
        recent: Option<&'t RefCell<RecentWrites>>,
    ) -> Tables<'t> {
        Tables {
            source,
            keys,
            objects: RefCell::new(Vec::new()),
            log: RefCell::new(None),
            reads: RefCell::new(HashMap::new()),
            lists: RefCell::new(HashMap::new()),
            read_set: RefCell::new(Vec::new()),
            recent,
        }
    }

    /// Notes a committed read of a snapshot closure.
    fn note(&self, read: Read) {
        if matches!(self.source, Source::Snapshot(_)) {
            self.read_set.borrow_mut().push(read);
        }
    }

    /// Forgets what a write of `kind`/`key` makes stale, and remembers its revision.
    fn written(&self, kind: Kind, key: &str, revision: u64) {
        if read_often(kind) {
            self.reads.borrow_mut().remove(&(kind, key.to_string()));
            self.lists.borrow_mut().retain(|(k, _), _| *k != kind);
        }
        if let Some(recent) = self.recent {
            recent.borrow_mut().record(kind, key, revision);
        }
    }

    /// Whether anything a plan read from `snapshot` has been written since.
    pub(crate) fn changed_since(&self, snapshot: u64, reads: &[Read]) -> bool {
        let Some(recent) = self.recent else {
            return false;
        };
        let recent = recent.borrow();
        reads.iter().any(|r| recent.changed_since(snapshot, r))
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
                let table = match self.source {
                    Source::Batch(wtx) => ObjectTable::Write(wtx.open_table(kind_table(kind))?),
                    Source::Snapshot(rtx) => match rtx.open_table(kind_table(kind)) {
                        Ok(t) => ObjectTable::Read(t),
                        // A custom resource no write has stored anything of yet.
                        Err(redb::TableError::TableDoesNotExist(_)) => ObjectTable::Missing,
                        Err(e) => return Err(e.into()),
                    },
                    Source::Remote(_) => {
                        return Err(StoreError::Db("etcd has no redb tables".into()));
                    }
                };
                open.push((kind, table));
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
        let Source::Batch(wtx) = self.source else {
            return Err(StoreError::Db(
                "the event log is written only by the writer".into(),
            ));
        };
        let mut log = self.log.borrow_mut();
        let table = match &mut *log {
            Some(table) => table,
            None => log.insert(wtx.open_table(codec::EVENT_TABLE)?),
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
    /// The last revision before this closure's first write: in a snapshot, the snapshot's.
    base_revision: u64,
}

/// What a closure run on a snapshot would write, and what it read to decide so: the writer
/// applies the events (each taking the next revision) only if nothing read has been written
/// since `snapshot`.
pub(crate) struct Plan {
    pub snapshot: u64,
    pub reads: Vec<Read>,
    pub events: Vec<PendingEvent>,
}

impl<'a, 't> Txn<'a, 't> {
    pub(crate) fn new(tables: &'a Tables<'t>, last_revision: u64) -> Txn<'a, 't> {
        Txn {
            tables,
            next_revision: last_revision + 1,
            overlay: BTreeMap::new(),
            events: Vec::new(),
            dry_run: false,
            base_revision: last_revision,
        }
    }

    /// Whether anything read from `snapshot` by a plan has been written since (always `false`
    /// outside the writer).
    pub(crate) fn changed_since(&self, snapshot: u64, reads: &[Read]) -> bool {
        self.tables.changed_since(snapshot, reads)
    }

    /// The closure's writes and reads, once it has run on a snapshot.
    pub(crate) fn into_plan(self) -> Plan {
        Plan {
            snapshot: self.base_revision,
            reads: self.tables.read_set.take(),
            events: self.events,
        }
    }

    /// Makes the writes of `plan` again, in order, each at the next revision of this batch.
    /// The writer checks the plan's reads first ([`Tables::changed_since`]), so each key is
    /// still as the plan saw it and its events' types still hold.
    pub(crate) fn replay(&mut self, plan: Vec<PendingEvent>) {
        for event in plan {
            let revision = self.take_revision();
            let mut object = event.object;
            object.meta_mut().resource_version = revision.to_string();
            let key = object_key(object.meta().namespace(), &object.meta().name);
            let slot = (event.event_type != EventType::Deleted).then_some(self.events.len());
            self.overlay.insert((object.kind(), key), slot);
            self.events.push(PendingEvent {
                event_type: event.event_type,
                revision,
                object,
            });
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

    /// Whether no object of `kind` is at `namespace/name`: what a create checks. On etcd a
    /// first attempt takes it for absent without a read ([`super::remote::Reader::presumed_absent`]).
    pub fn absent(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool, StoreError> {
        let key = object_key(namespace, name);
        if let Some(slot) = self.overlay.get(&(kind, key.clone())) {
            return Ok(slot.is_none());
        }
        if let Source::Remote(reader) = self.tables.source {
            if let Some(absent) = reader.presumed_absent(kind, &key) {
                return Ok(absent);
            }
        }
        Ok(self.get_committed(kind, &key)?.is_none())
    }

    fn get_committed(&self, kind: Kind, key: &str) -> Result<Option<AnyObject>, StoreError> {
        if let Source::Remote(reader) = self.tables.source {
            return reader.get(kind, key);
        }
        self.tables.note(Read::Key(kind, key.to_string()));
        let cached = read_often(kind);
        if cached {
            if let Some(hit) = self.tables.reads.borrow().get(&(kind, key.to_string())) {
                return Ok(hit.clone());
            }
        }
        let found = self.tables.with(kind, |table| {
            readable!(table, t => t
                .get(key)?
                .map(|v| decode_object(kind, key, v.value(), self.tables.keys))
                .transpose())
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
        if let Source::Remote(reader) = self.tables.source {
            return Ok(reader.get(kind, key)?.is_some());
        }
        self.tables.note(Read::Key(kind, key.to_string()));
        self.tables.with(
            kind,
            |table| readable!(table, t => Ok(t.get(key)?.is_some())),
        )
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
        if let Source::Remote(reader) = self.tables.source {
            return reader.list(kind, namespace);
        }
        let cache_key = (kind, namespace.map(str::to_string));
        self.tables
            .note(Read::Range(kind, namespace.map(str::to_string)));
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
            readable!(table, t => {
                match namespace {
                    Some(ns) => {
                        let (start, end) = codec::namespace_range(ns);
                        for entry in t.range(start.as_str()..end.as_str())? {
                            push(entry)?;
                        }
                    }
                    None => {
                        for entry in t.iter()? {
                            push(entry)?;
                        }
                    }
                }
                Ok(())
            })
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
        let touched = self
            .events
            .iter()
            .map(|e| {
                let meta = e.object.meta();
                (
                    e.object.kind(),
                    object_key(meta.namespace(), &meta.name),
                    e.revision,
                )
            })
            .collect();
        Ok(EncodedWrites {
            tables: self.tables,
            objects,
            touched,
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
    /// (kind, key, revision) of every write, in revision order.
    touched: Vec<(Kind, String, u64)>,
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
            self.tables.with(*kind, |table| {
                let ObjectTable::Write(table) = table else {
                    return Err(StoreError::Db("a snapshot cannot be written".into()));
                };
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
        for (kind, key, revision) in &self.touched {
            self.tables.written(*kind, key, *revision);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_writes_name_what_changed_and_record_nothing_when_off() {
        let mut on = RecentWrites::new(10);
        on.record(Kind::Pod, "default/a", 12);
        let key = |k: &str| Read::Key(Kind::Pod, k.to_string());
        assert!(on.changed_since(11, &key("default/a")));
        assert!(!on.changed_since(12, &key("default/a")));
        assert!(!on.changed_since(11, &key("default/b")));
        assert!(on.changed_since(11, &Read::Range(Kind::Pod, Some("default".into()))));
        assert!(
            on.changed_since(9, &key("default/b")),
            "older than the horizon"
        );

        // Off (no optimistic writes): nothing is kept, and any plan would be refused.
        let mut off = RecentWrites::off(10);
        off.record(Kind::Pod, "default/a", 12);
        assert!(off.keys.is_empty() && off.namespaces.is_empty() && off.kinds.is_empty());
        assert!(off.changed_since(12, &key("default/b")));
        off.reset(13);
        assert!(off.off);
    }
}
