//! The server's storage: a redb file of every object, one revision counter, an event log, group
//! commit and the watch hub.
//!
//! # On disk (`<data-dir>/state.redb`)
//!
//! * One table per kind, named by its plural (`pods`, `deployments`, ...). Key
//!   `"<namespace>/<name>"`; cluster-scoped objects have namespace "" so their key is
//!   `"/<name>"`. Value: postcard of the envelope [`Stored`]`::V1(AnyObject)`.
//! * `_meta` (`&str -> u64`): `revision` (last committed revision), `compacted` (highest
//!   revision dropped from the event log; 0 = none) and `schema` (layout version, 1).
//! * `_event_log` (`u64 -> bytes`): revision -> postcard of [`StoredEvent`]`::V1(EventType,
//!   AnyObject)`, holding only the last `event_window` revisions. Older entries are deleted by
//!   the same transaction that adds new ones.
//!
//! # Revisions
//!
//! One global counter. Every put and every delete takes the next revision, which the store
//! writes into the object's `metadata.resourceVersion` (decimal). A delete's event carries the
//! object with the deletion revision. Revisions have no gaps: a closure that fails gives its
//! revisions back.
//!
//! # Writes
//!
//! [`Store::write`] sends a closure to a single writer thread. While one commit is in flight,
//! further requests queue up; the writer then runs the whole queue (up to 1024) in order in one
//! redb write transaction, commits once with `Durability::Immediate`, publishes the batch's
//! events to watchers in revision order, and only then answers each caller. A closure's writes
//! go to an overlay that reaches the transaction only if it returns `Ok`, so an `Err` (or a
//! panic) leaves no trace and does not disturb the other closures of the batch. If the commit
//! itself fails, every caller of the batch gets [`StoreError::Db`]. A caller that stops waiting
//! does not cancel its write.
//!
//! [`Store::guaranteed_write`] keeps that work off the writer thread: the closure runs on its
//! caller's side against a read snapshot, which records every committed key and range it
//! reads, and only its writes go to the writer. The writer applies them (each at the next
//! revision) if none of those keys and ranges was written after the snapshot's revision, and
//! otherwise answers a conflict, after which the closure runs again on a newer snapshot: a
//! compare-and-swap on revisions, the shape of kube-apiserver's `GuaranteedUpdate` on etcd
//! (the writer's side is "put/create/delete if the key's revision is still R, if no key of
//! the range changed since S, then append the events", which a second backend can offer).
//! The writer remembers the last writing revision of recent keys, of each namespace of a kind
//! and of each kind; a snapshot older than what it remembers is a conflict.
//!
//! # Reads
//!
//! [`Store::get`] and [`Store::list`] run in a redb read transaction (a consistent snapshot) on
//! `smol::unblock`. [`Store::list`] also returns the revision of its snapshot, from which a
//! watch continues without gaps.
//!
//! # Watch
//!
//! [`Store::watch`] registers with the in-memory hub, notes the last published revision `P`,
//! replays the event log over `(after, P]` (or [`StoreError::Expired`] if compaction already
//! dropped part of it) and then yields live events, skipping any at or below the last one
//! handed out. Each watcher has a queue of at most `watch_queue_capacity` events that grows
//! only as needed; a watcher that falls that far behind is cut off: it reads what is queued,
//! then its stream ends with [`WatchEnd::TooSlow`] and the client resumes from
//! [`Watch::last_revision`] or re-lists. Streams end with [`WatchEnd::Closed`] when the store
//! closes.
//!
//! # Lifecycle
//!
//! [`Store::open`] blocks (it creates missing tables and reads the revision; redb repairs a file
//! after a crash here), so call it before starting the executor or inside `smol::unblock`.
//! [`Store::close`] (or dropping the last clone) lets the writer finish everything queued
//! before it, then stops it; later writes get [`StoreError::Closed`].

pub mod backup;
mod codec;
mod hub;
pub mod migrate;
mod remote;
pub mod rotate;
pub mod seal;
mod txn;
mod writer;

use std::any::Any;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use api::validation::FieldError;
use api::{AnyObject, Kind};
use redb::{Database, ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};

pub use codec::{Stored, StoredEvent};
pub use hub::{Watch, WatchEnd};
pub use txn::Txn;

use codec::{
    decode_event, decode_object, kind_table, namespace_range, object_key, EVENT_TABLE,
    META_COMPACTED, META_REVISION, META_SCHEMA, META_TABLE, SCHEMA_VERSION,
};
use hub::{custom_filter, kind_bit, kind_mask, lock, Hub};
use txn::{Plan, RecentWrites, Tables};
use writer::{Job, JobOutcome, Msg, Writer};

/// How often [`Store::guaranteed_write`] runs a closure on a fresh snapshot after its plan
/// lost a race, before it runs it in the writer, where nothing can change under it.
const OPTIMISTIC_ATTEMPTS: usize = 8;

/// How often a guaranteed write on etcd runs again after losing a race before it gives up.
const REMOTE_ATTEMPTS: usize = 64;

/// Maps the resourceVersions a closure run on a snapshot handed out (it numbered its writes
/// after the snapshot's revision) to the revisions its writes were committed at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Renumber {
    snapshot: u64,
    writes: u64,
    base: u64,
    /// Every write took `base` itself (one etcd transaction), not `base` plus its place.
    flat: bool,
}

impl Renumber {
    /// Gives `meta` the committed resourceVersion if it names one of the closure's writes.
    pub fn fix(&self, meta: &mut api::meta::ObjectMeta) {
        if self.writes == 0 {
            return;
        }
        if let Ok(rv) = meta.resource_version.parse::<u64>() {
            if rv > self.snapshot && rv <= self.snapshot + self.writes {
                let committed = if self.flat {
                    self.base
                } else {
                    rv - self.snapshot + self.base
                };
                meta.resource_version = committed.to_string();
            }
        }
    }
}

/// What a [`Store::guaranteed_write`] closure answered, with the [`Renumber`] its
/// resourceVersions need.
#[derive(Debug)]
pub struct Committed<T> {
    pub value: T,
    pub renumber: Renumber,
}

/// A write's answer with its type erased, and the closures that give it: the write
/// machinery below (the snapshot attempts, the writer's job, the etcd transaction, each an
/// async state machine and a blocking task) is compiled once per error type instead of
/// once per caller's closure, which made it hundreds of copies. A write pays two small
/// boxes for it.
type Answer = Box<dyn Any + Send>;
type WriteFn<E> = Box<dyn FnMut(&mut Txn<'_, '_>) -> Result<Answer, E> + Send>;
type WriteOnceFn<E> = Box<dyn FnOnce(&mut Txn<'_, '_>) -> Result<Answer, E> + Send>;

fn answer<T: Send + 'static>(value: T) -> Answer {
    Box::new(value)
}

fn unanswer<T: 'static>(answer: Answer) -> T {
    *answer
        .downcast::<T>()
        .expect("a write answers with its own closure's type")
}

/// Where a [`Store::list_page`] ended.
#[derive(Debug)]
pub struct Page {
    /// The revision of the snapshot the page was read from.
    pub revision: u64,
    /// The key to continue after, when more objects follow.
    pub next: Option<String>,
}

/// The file name of the store inside the data directory.
pub const STATE_FILE: &str = "state.redb";

#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The redb file, normally `<data-dir>/state.redb`.
    pub path: PathBuf,
    /// How many of the latest revisions the event log keeps for watch resumption.
    pub event_window: u64,
    /// redb's page cache (its read cache and write buffer together).
    pub cache_size_bytes: usize,
    /// How many undelivered events a watcher may have before it is cut off.
    pub watch_queue_capacity: usize,
    /// The keys Secrets are sealed with at rest; `None` stores them plain (and cannot read
    /// sealed ones).
    pub keys: Option<Arc<seal::Keyring>>,
    /// Run [`Store::guaranteed_write`] closures on a read snapshot on their caller's side and
    /// compare-and-swap their writes in the writer, instead of running them in the writer.
    /// Off by default: on two cores, where the API is CPU-bound, it measured about 20% fewer
    /// creates/s than running closures in the writer (docs/benchmarks.md, issue 20).
    pub optimistic_writes: bool,
}

impl StoreConfig {
    pub const DEFAULT_EVENT_WINDOW: u64 = 10_000;
    /// redb fills its cache up to this size and keeps it: with 16 MiB, some 10 MiB of a
    /// server's 60 after 10,000 pods and their events. Pages it does not hold are read from
    /// the file, which the kernel's page cache holds anyway (so what redb caches is held
    /// twice); what it must hold (the write buffer of a batch, the tables' branch pages) fits
    /// in far less. 1 MiB against 4: 4.3 MiB less resident with 10,000 pods, and the same
    /// create throughput (docs/benchmarks.md, issue 14).
    pub const DEFAULT_CACHE_SIZE_BYTES: usize = 1 << 20;
    pub const DEFAULT_WATCH_QUEUE_CAPACITY: usize = 1_000;

    /// Defaults for the store file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            path: path.into(),
            event_window: Self::DEFAULT_EVENT_WINDOW,
            cache_size_bytes: Self::DEFAULT_CACHE_SIZE_BYTES,
            watch_queue_capacity: Self::DEFAULT_WATCH_QUEUE_CAPACITY,
            keys: None,
            optimistic_writes: false,
        }
    }

    /// Defaults for `<data_dir>/state.redb`.
    pub fn in_dir(data_dir: impl AsRef<Path>) -> StoreConfig {
        StoreConfig::new(data_dir.as_ref().join(STATE_FILE))
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{} \"{name}\" not found", kind.info().qualified_plural())]
    NotFound {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error("{} \"{name}\" already exists", kind.info().qualified_plural())]
    AlreadyExists {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error("Operation cannot be fulfilled on {} \"{name}\": {message}", kind.info().qualified_plural())]
    Conflict {
        kind: Kind,
        namespace: String,
        name: String,
        message: String,
    },
    /// A watch asked to resume from before the event log's window; `oldest` is the oldest
    /// revision a watch can resume from.
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    #[error("invalid: {}", describe_fields(.0))]
    Invalid(Vec<FieldError>),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("storage error: {0}")]
    Db(String),
    #[error("the store is closed")]
    Closed,
}

fn describe_fields(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect::<Vec<_>>()
        .join(", ")
}

macro_rules! db_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> StoreError {
                StoreError::Db(e.to_string())
            }
        }
    )*};
}
db_errors!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The name in a Kubernetes watch event: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A committed change. `object.metadata.resourceVersion` equals `revision`.
#[derive(Debug, PartialEq)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub revision: u64,
    /// The event's place among the events of its revision: always 0 with redb, where every
    /// write has a revision of its own; with etcd a transaction's writes share one.
    pub index: u32,
    pub object: Arc<AnyObject>,
    /// The object's postcard encoding, as the store wrote it (the informer cache keeps these
    /// bytes instead of encoding the object again).
    pub packed: Arc<[u8]>,
    /// The event as its API clients receive it, encoded once by the first that needs it and
    /// shared by the others (see `http::watch`).
    pub wire: std::sync::OnceLock<Arc<[u8]>>,
}

impl WatchEvent {
    pub fn new(
        event_type: EventType,
        revision: u64,
        object: AnyObject,
        packed: Arc<[u8]>,
    ) -> WatchEvent {
        WatchEvent {
            event_type,
            revision,
            index: 0,
            object: Arc::new(object),
            packed,
            wire: std::sync::OnceLock::new(),
        }
    }
}

/// Writer figures for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Durable commits.
    pub commits: u64,
    /// Write closures that returned `Ok` and were committed.
    pub writes: u64,
    /// Write closures that returned `Err` (or panicked) in a committed batch.
    pub failed_writes: u64,
    /// Planned writes refused because something they read was written after their snapshot
    /// (each runs again on a newer one).
    pub conflicts: u64,
    /// Batches abandoned because the transaction or commit failed.
    pub failed_commits: u64,
    /// Time from the start of a batch to its durable commit, summed.
    pub total_commit_time: Duration,
    /// The part of `total_commit_time` spent inside redb's commit (page writes and fsync),
    /// summed; the rest ran the closures.
    pub total_sync_time: Duration,
    pub last_commit_time: Duration,
    pub last_batch_size: usize,
    pub max_batch_size: usize,
}

/// The store handle; clones share one database and one writer.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// The redb file; `None` with the etcd datastore.
    db: Option<Arc<Database>>,
    /// The etcd datastore, when the server uses one instead of redb.
    remote: Option<Arc<remote::Remote>>,
    hub: Arc<Hub>,
    revision: Arc<AtomicU64>,
    compacted: Arc<AtomicU64>,
    stats: Arc<Mutex<CommitStats>>,
    sender: mpsc::Sender<Msg>,
    writer: Mutex<Option<JoinHandle<()>>>,
    keys: Option<Arc<seal::Keyring>>,
    /// [`StoreConfig::optimistic_writes`].
    optimistic: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The writer ends after the batch in flight; joining releases the file before the
        // handle is gone, so the same process can reopen it.
        let _ = self.sender.send(Msg::Shutdown);
        if let Some(handle) = lock(&self.writer).take() {
            // The last handle may be dropped by the writer itself (a closure that captured a
            // clone); it then stops on its own after the current batch.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the store file, creating missing tables. Blocks.
    pub fn open(cfg: StoreConfig) -> Result<Store, StoreError> {
        if let Some(parent) = cfg.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Db(format!("creating {}: {e}", parent.display())))?;
        }
        let db = Database::builder()
            .set_cache_size(cfg.cache_size_bytes)
            .create(&cfg.path)
            .map_err(|e| StoreError::Db(format!("opening {}: {e}", cfg.path.display())))?;
        let (revision, compacted) = prepare(&db)?;
        let recent = std::cell::RefCell::new(if cfg.optimistic_writes {
            RecentWrites::new(revision)
        } else {
            RecentWrites::off(revision)
        });
        let db = Arc::new(db);
        let hub = Arc::new(Hub::new(revision, cfg.watch_queue_capacity));
        let revision = Arc::new(AtomicU64::new(revision));
        let compacted = Arc::new(AtomicU64::new(compacted));
        let stats = Arc::new(Mutex::new(CommitStats::default()));
        let (sender, receiver) = mpsc::channel();
        let writer = Writer {
            db: db.clone(),
            hub: hub.clone(),
            revision: revision.clone(),
            compacted: compacted.clone(),
            stats: stats.clone(),
            event_window: cfg.event_window,
            keys: cfg.keys.clone(),
            recent,
        };
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run(receiver))
            .map_err(|e| StoreError::Db(format!("starting the writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                db: Some(db),
                remote: None,
                hub,
                revision,
                compacted,
                stats,
                sender,
                writer: Mutex::new(Some(handle)),
                keys: cfg.keys,
                optimistic: cfg.optimistic_writes,
            }),
        })
    }

    /// Opens the store on an etcd cluster instead of a redb file: several servers may share
    /// it. Starts this server's watch of etcd, which feeds every watch and informer.
    pub async fn open_etcd(
        client: crate::etcd::EtcdClient,
        watch_queue_capacity: usize,
        keys: Option<Arc<seal::Keyring>>,
    ) -> Result<Store, StoreError> {
        let (remote, revision) = remote::Remote::connect(client, keys.clone()).await?;
        let remote = Arc::new(remote);
        let hub = Arc::new(Hub::new(revision, watch_queue_capacity));
        smol::spawn(remote.clone().feed(hub.clone())).detach();
        smol::spawn(remote.clone().compact_periodically(hub.clone())).detach();
        // No writer thread: writes are etcd transactions made by their callers.
        let (sender, _) = mpsc::channel();
        Ok(Store {
            inner: Arc::new(Inner {
                db: None,
                revision: remote.published.clone(),
                remote: Some(remote),
                hub,
                compacted: Arc::new(AtomicU64::new(revision)),
                stats: Arc::new(Mutex::new(CommitStats::default())),
                sender,
                writer: Mutex::new(None),
                keys,
                optimistic: true,
            }),
        })
    }

    /// Whether the store is an etcd cluster (shared with other servers).
    pub fn is_shared(&self) -> bool {
        self.inner.remote.is_some()
    }

    /// The id of the etcd cluster the store stands on (None: the embedded store, which no
    /// other server shares).
    pub async fn shared_datastore_id(&self) -> Result<Option<String>, StoreError> {
        match &self.inner.remote {
            Some(remote) => Ok(Some(remote.client.cluster_id().await?)),
            None => Ok(None),
        }
    }

    /// The redb file, which the etcd datastore has not.
    fn db(&self) -> Result<Arc<Database>, StoreError> {
        self.inner.db.clone().ok_or_else(|| {
            StoreError::Db("not available with the etcd datastore (use etcd's own tools)".into())
        })
    }

    /// The last committed revision (with etcd: the last this server has seen).
    pub fn revision(&self) -> u64 {
        self.inner.revision.load(Ordering::Acquire)
    }

    /// The oldest revision a watch can resume from (`after` must be at least this).
    pub fn oldest_resumable_revision(&self) -> u64 {
        match &self.inner.remote {
            Some(r) => r.oldest_resumable(),
            None => self.inner.compacted.load(Ordering::Acquire),
        }
    }

    /// Runs `f` against etcd and commits its writes in one transaction on everything it
    /// read; `None` if something it read changed first (it may then run again). With
    /// `serializable`, `f` reads what the etcd member has applied (see
    /// [`remote::Reader::serializable`]). `f` comes back with the outcome, also an error.
    async fn remote_attempt<E>(
        &self,
        remote: &Arc<remote::Remote>,
        f: WriteFn<E>,
        dry_run: bool,
        serializable: bool,
    ) -> (WriteFn<E>, Result<Option<Committed<Answer>>, E>)
    where
        E: From<StoreError> + Send + 'static,
    {
        let r = remote.clone();
        let (f, planned) = smol::unblock(move || {
            let mut f = f;
            let reader = remote::Reader {
                client: &r.client,
                serializable,
                often: serializable.then_some(&r.often),
                keys: r.keys.as_deref(),
                observed: Default::default(),
                seen: Default::default(),
            };
            let planned = (|| -> Result<_, E> {
                let tables = Tables::remote(&reader, r.keys.as_deref());
                let mut txn = Txn::new(&tables, remote::PLACEHOLDER_BASE);
                if dry_run {
                    txn.set_dry_run();
                }
                let value = f(&mut txn)?;
                let plan = txn.into_plan();
                let writes =
                    remote::transaction(reader.observed.take(), &plan.events, r.keys.as_deref())?;
                Ok((value, plan.events.len() as u64, writes))
            })();
            (f, planned)
        })
        .await;
        let (value, writes, (compares, ops)) = match planned {
            Ok(p) => p,
            Err(e) => return (f, Err(e)),
        };
        if dry_run || ops.is_empty() {
            return (
                f,
                Ok(Some(Committed {
                    value,
                    renumber: Renumber::default(),
                })),
            );
        }
        let started = std::time::Instant::now();
        let outcome = match remote.client.txn(&compares, &ops, &[]).await {
            Ok(o) => o,
            Err(e) => return (f, Err(E::from(StoreError::from(e)))),
        };
        {
            let mut stats = lock(&self.inner.stats);
            stats.total_commit_time += started.elapsed();
            stats.last_commit_time = started.elapsed();
            if outcome.succeeded {
                stats.commits += 1;
                stats.writes += 1;
            } else {
                stats.conflicts += 1;
            }
        }
        if !outcome.succeeded {
            return (f, Ok(None));
        }
        (
            f,
            Ok(Some(Committed {
                value,
                renumber: Renumber {
                    snapshot: remote::PLACEHOLDER_BASE,
                    writes,
                    base: outcome.revision.max(0) as u64,
                    flat: true,
                },
            })),
        )
    }

    /// [`Store::write`] on etcd: one attempt, and a conflict if something read changed.
    async fn remote_write_once<E>(
        &self,
        remote: &Arc<remote::Remote>,
        f: WriteOnceFn<E>,
        dry_run: bool,
    ) -> Result<Answer, E>
    where
        E: From<StoreError> + Send + 'static,
    {
        let mut once = Some(f);
        let g: WriteFn<E> = Box::new(move |txn| match once.take() {
            Some(f) => f(txn),
            None => Err(E::from(StoreError::Closed)),
        });
        match Box::pin(self.remote_attempt(remote, g, dry_run, false)).await.1? {
            // Objects in the answer carry placeholder resourceVersions: callers that answer
            // with objects use [`Store::guaranteed_write`], which renumbers them.
            Some(c) => Ok(c.value),
            None => Err(E::from(StoreError::Db(
                "the object has been modified; please apply your changes to the latest version and try again".into(),
            ))),
        }
    }

    /// Runs `f` in the next write batch and answers once its batch is durable. `f` returning
    /// `Err` leaves no trace; its error is returned as is. `f` runs on the writer thread, holding
    /// up the batch: keep it to reads, checks and puts (validate before calling `write`). A
    /// panicking `f` leaves no trace either and its caller gets `Closed`. The error type is the
    /// caller's (the registry answers with API errors), as long as store errors convert into it.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&mut Txn<'_, '_>) -> Result<T, E> + Send + 'static,
    {
        let f: WriteOnceFn<E> = Box::new(move |txn| f(txn).map(answer));
        self.write_erased(f, false).await.map(unanswer)
    }

    /// [`Store::write`] and [`Store::write_dry_run`], once for every closure type.
    async fn write_erased<E>(&self, f: WriteOnceFn<E>, dry_run: bool) -> Result<Answer, E>
    where
        E: From<StoreError> + Send + 'static,
    {
        if let Some(remote) = &self.inner.remote {
            return Box::pin(self.remote_write_once(remote, f, dry_run)).await;
        }
        self.submit(f, dry_run).await
    }

    /// Runs `f` as [`Store::write`] does, with every check, but stores nothing (`dryRun=All`):
    /// its puts and deletes answer the objects as they would be, keeping their current
    /// resourceVersion, and no watcher hears of them.
    pub async fn write_dry_run<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&mut Txn<'_, '_>) -> Result<T, E> + Send + 'static,
    {
        let f: WriteOnceFn<E> = Box::new(move |txn| f(txn).map(answer));
        self.write_erased(f, true).await.map(unanswer)
    }

    /// Runs `f` as kube-apiserver runs an update against etcd: on the caller's side, against
    /// a snapshot of the committed state (read, mutate, validate), then sends only its writes
    /// to the writer, which stores them if nothing `f` read has been written since the
    /// snapshot (a compare-and-swap on each key's revision, and on each listed range), and
    /// otherwise has `f` run again on a newer snapshot. After a few lost races `f` runs in
    /// the writer as [`Store::write`] does. So `f` may run more than once: it must not act
    /// outside the transaction, or only harmlessly. The resourceVersions in its answer are
    /// numbered from the snapshot; [`Committed::renumber`] maps them to the committed ones.
    /// A dry run (`dryRun=All`) or a closure that writes nothing never reaches the writer.
    pub async fn guaranteed_write<T, E, F>(
        &self,
        mut f: F,
        dry_run: bool,
    ) -> Result<Committed<T>, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnMut(&mut Txn<'_, '_>) -> Result<T, E> + Send + 'static,
    {
        let f: WriteFn<E> = Box::new(move |txn| f(txn).map(answer));
        let committed = self.guaranteed_write_erased(f, dry_run).await?;
        Ok(Committed {
            value: unanswer(committed.value),
            renumber: committed.renumber,
        })
    }

    /// [`Store::guaranteed_write`], once for every closure type.
    async fn guaranteed_write_erased<E>(
        &self,
        mut f: WriteFn<E>,
        dry_run: bool,
    ) -> Result<Committed<Answer>, E>
    where
        E: From<StoreError> + Send + 'static,
    {
        if let Some(remote) = &self.inner.remote {
            // Every attempt reads afresh; etcd decides which of two racing servers wins.
            for attempt in 0..REMOTE_ATTEMPTS {
                // The first attempt reads serializably: most of a write's reads (the
                // namespace, the ServiceAccount, the admission objects) then cost the etcd
                // member no round through the leader. A stale read shows as a lost compare,
                // or as an error of `f` (a resourceVersion that does not match, an object
                // not found yet), so both run again with linearizable reads.
                let serializable = attempt == 0;
                // Boxed: the etcd client's futures would otherwise make every write's future
                // (and every request handler's) much larger, on the redb path too.
                let (back, done) =
                    Box::pin(self.remote_attempt(remote, f, dry_run, serializable)).await;
                f = back;
                match done {
                    Ok(Some(committed)) => return Ok(committed),
                    Ok(None) => {}
                    Err(_) if serializable => continue,
                    Err(e) => return Err(e),
                }
                if attempt > 2 {
                    smol::Timer::after(Duration::from_millis(attempt as u64)).await;
                }
            }
            return Err(E::from(StoreError::Db(format!(
                "the write lost {REMOTE_ATTEMPTS} races in a row to other writers; try again"
            ))));
        }
        let attempts = if self.inner.optimistic {
            OPTIMISTIC_ATTEMPTS
        } else {
            0
        };
        for _ in 0..attempts {
            let db = self.db()?;
            let keys = self.inner.keys.clone();
            let (back, planned) = smol::unblock(move || {
                let planned = plan_on_snapshot(&db, keys.as_deref(), &mut f, dry_run);
                (f, planned)
            })
            .await;
            f = back;
            let (value, plan) = planned?;
            if dry_run || plan.events.is_empty() {
                return Ok(Committed {
                    value,
                    renumber: Renumber::default(),
                });
            }
            let (snapshot, writes) = (plan.snapshot, plan.events.len() as u64);
            if let Some(base) = self.submit_plan(plan).await? {
                return Ok(Committed {
                    value,
                    renumber: Renumber {
                        snapshot,
                        writes,
                        base,
                        flat: false,
                    },
                });
            }
        }
        let value = self.submit(f, dry_run).await?;
        Ok(Committed {
            value,
            renumber: Renumber::default(),
        })
    }

    /// Sends a plan to the writer; answers the revision before its first write once it is
    /// durable, or `None` if something it read was written since its snapshot.
    async fn submit_plan(&self, plan: Plan) -> Result<Option<u64>, StoreError> {
        let (tx, rx) = async_channel::bounded(1);
        let job: Job = Box::new(move |txn: &mut Txn<'_, '_>| {
            if txn.changed_since(plan.snapshot, &plan.reads) {
                return JobOutcome {
                    ok: false,
                    conflict: true,
                    reply: Box::new(move |_| {
                        let _ = tx.try_send(Ok(None));
                    }),
                };
            }
            let base = txn.next_revision() - 1;
            txn.replay(plan.events);
            JobOutcome {
                ok: true,
                conflict: false,
                reply: Box::new(move |commit: Result<(), StoreError>| {
                    let _ = tx.try_send(commit.map(|()| Some(base)));
                }),
            }
        });
        self.inner
            .sender
            .send(Msg::Job(job))
            .map_err(|_| StoreError::Closed)?;
        rx.recv().await.map_err(|_| StoreError::Closed)?
    }

    async fn submit<E>(&self, f: WriteOnceFn<E>, dry_run: bool) -> Result<Answer, E>
    where
        E: From<StoreError> + Send + 'static,
    {
        let (tx, rx) = async_channel::bounded(1);
        let job: Job = Box::new(move |txn: &mut Txn<'_, '_>| {
            if dry_run {
                txn.set_dry_run();
            }
            let result = f(txn);
            JobOutcome {
                ok: result.is_ok(),
                conflict: false,
                reply: Box::new(move |commit: Result<(), StoreError>| {
                    let answer = match result {
                        Err(e) => Err(e),
                        Ok(value) => commit.map(|()| value).map_err(E::from),
                    };
                    // The caller may have stopped waiting; the write stands regardless.
                    let _ = tx.try_send(answer);
                }),
            }
        });
        self.inner
            .sender
            .send(Msg::Job(job))
            .map_err(|_| E::from(StoreError::Closed))?;
        rx.recv().await.map_err(|_| E::from(StoreError::Closed))?
    }

    /// One object; `NotFound` if absent.
    pub async fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<AnyObject, StoreError> {
        if let Some(remote) = &self.inner.remote {
            return Box::pin(remote.get(kind, namespace, name)).await;
        }
        let db = self.db()?;
        let keys = self.inner.keys.clone();
        let key = object_key(namespace, name);
        let (namespace, name) = (namespace.to_string(), name.to_string());
        smol::unblock(move || {
            let rtx = db.begin_read()?;
            let table = match rtx.open_table(kind_table(kind)) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => {
                    return Err(StoreError::NotFound {
                        kind,
                        namespace,
                        name,
                    })
                }
                Err(e) => return Err(e.into()),
            };
            let value = table.get(key.as_str())?;
            match value {
                Some(v) => decode_object(kind, &key, v.value(), keys.as_deref()),
                None => Err(StoreError::NotFound {
                    kind,
                    namespace,
                    name,
                }),
            }
        })
        .await
    }

    /// Every object of `kind` (in `namespace` if given), sorted by namespace then name, and the
    /// revision of the snapshot they were read from.
    pub async fn list(
        &self,
        kind: Kind,
        namespace: Option<&str>,
    ) -> Result<(Vec<AnyObject>, u64), StoreError> {
        if self.inner.remote.is_some() {
            let (objects, page) = self
                .list_page(kind, namespace, None, 0, Vec::new(), |v, o| {
                    v.push(o);
                    true
                })
                .await?;
            return Ok((objects, page.revision));
        }
        let db = self.db()?;
        let keys = self.inner.keys.clone();
        let range = namespace.map(namespace_range);
        smol::unblock(move || {
            let rtx = db.begin_read()?;
            let revision = read_meta(&rtx.open_table(META_TABLE)?, META_REVISION)?;
            let table = match rtx.open_table(kind_table(kind)) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok((Vec::new(), revision)),
                Err(e) => return Err(e.into()),
            };
            let entries = match &range {
                Some((start, end)) => table.range(start.as_str()..end.as_str())?,
                None => table.iter()?,
            };
            let mut objects = Vec::new();
            for entry in entries {
                let (k, v) = entry?;
                objects.push(decode_object(kind, k.value(), v.value(), keys.as_deref())?);
            }
            Ok((objects, revision))
        })
        .await
    }

    /// Visits a page of `kind` objects (in `namespace` if given) in key order, starting after
    /// the key `after` (see [`Page::next`]). `visit` gets each object with the caller's `sink`
    /// and says whether the object counts (passed the caller's filter); the page ends after
    /// `limit` counted objects (0: no limit). Objects are decoded one at a time and handed over,
    /// so a large list never sits in memory as objects: the sink keeps what it needs (encoded
    /// bytes, say). Returns the sink and the page's revision and continuation.
    pub async fn list_page<T, F>(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        after: Option<String>,
        limit: usize,
        mut sink: T,
        mut visit: F,
    ) -> Result<(T, Page), StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut T, AnyObject) -> bool + Send + 'static,
    {
        if let Some(remote) = &self.inner.remote {
            return Box::pin(remote.list_page(kind, namespace, after, limit, sink, visit)).await;
        }
        let db = self.db()?;
        let keys = self.inner.keys.clone();
        let (start, end) = match namespace {
            Some(ns) => {
                let (s, e) = namespace_range(ns);
                (Some(s), Some(e))
            }
            None => (None, None),
        };
        smol::unblock(move || {
            let rtx = db.begin_read()?;
            let revision = read_meta(&rtx.open_table(META_TABLE)?, META_REVISION)?;
            let table = match rtx.open_table(kind_table(kind)) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => {
                    return Ok((
                        sink,
                        Page {
                            revision,
                            next: None,
                        },
                    ))
                }
                Err(e) => return Err(e.into()),
            };
            let lower = match (&after, &start) {
                (Some(a), _) => std::ops::Bound::Excluded(a.as_str()),
                (None, Some(s)) => std::ops::Bound::Included(s.as_str()),
                (None, None) => std::ops::Bound::Unbounded,
            };
            let upper = match &end {
                Some(e) => std::ops::Bound::Excluded(e.as_str()),
                None => std::ops::Bound::Unbounded,
            };
            let mut counted = 0;
            let mut last_key = None;
            let mut next = None;
            for entry in table.range::<&str>((lower, upper))? {
                let (k, v) = entry?;
                if limit > 0 && counted == limit {
                    // More objects follow the page; the next page starts after its last one.
                    next = last_key;
                    break;
                }
                let obj = decode_object(kind, k.value(), v.value(), keys.as_deref())?;
                if visit(&mut sink, obj) {
                    counted += 1;
                    last_key = Some(k.value().to_string());
                }
            }
            Ok((sink, Page { revision, next }))
        })
        .await
    }

    /// The events of `kinds` (every kind if empty) after revision `after`, replayed from the
    /// event log, followed by live ones; `None` for live events only. `Expired` if `after` is
    /// older than [`Store::oldest_resumable_revision`]. An `after` beyond the current revision
    /// waits for revisions past it.
    pub async fn watch(&self, kinds: &[Kind], after: Option<u64>) -> Result<Watch, StoreError> {
        self.watch_with_capacity(kinds, after, None).await
    }

    /// [`Store::watch`] with its own queue capacity instead of the configured one: for the
    /// server's own informer, for which being cut off in a burst (and re-listing everything)
    /// costs far more than holding a longer queue of events that are shared anyway.
    pub async fn watch_with_capacity(
        &self,
        kinds: &[Kind],
        after: Option<u64>,
        capacity: Option<usize>,
    ) -> Result<Watch, StoreError> {
        let mask = kind_mask(kinds);
        if let Some(after) = after {
            let oldest = self.oldest_resumable_revision();
            if after < oldest {
                return Err(StoreError::Expired {
                    requested: after,
                    oldest,
                });
            }
        }
        let (id, queue, published) = self.inner.hub.register(mask, capacity)?;
        let mut watch = Watch {
            hub: self.inner.hub.clone(),
            id,
            queue,
            replay: VecDeque::new(),
            last: published,
            last_index: u32::MAX,
            only: custom_filter(kinds),
        };
        if let Some(after) = after {
            watch.last = after;
            if after < published {
                if let Some(remote) = &self.inner.remote {
                    watch.replay = remote.replay(after, published, mask)?;
                } else {
                    let db = self.db()?;
                    let keys = self.inner.keys.clone();
                    watch.replay = smol::unblock(move || {
                        read_events(&db, after, published, mask, keys.as_deref())
                    })
                    .await?;
                }
            }
        }
        Ok(watch)
    }

    /// Registered watchers.
    pub fn watcher_count(&self) -> usize {
        self.inner.hub.watcher_count()
    }

    pub fn commit_stats(&self) -> CommitStats {
        *lock(&self.inner.stats)
    }

    /// Lets the writer finish what was queued before this call, then stops it and ends every
    /// watch stream. Later writes get `Closed`; reads keep working while a clone is alive.
    pub async fn close(&self) {
        let _ = self.inner.sender.send(Msg::Shutdown);
        let handle = lock(&self.inner.writer).take();
        if let Some(handle) = handle {
            let _ = smol::unblock(move || handle.join()).await;
        }
    }
}

/// Runs `f` on a read snapshot; answers what it returned and the plan of its writes.
fn plan_on_snapshot<E>(
    db: &Database,
    keys: Option<&seal::Keyring>,
    f: &mut WriteFn<E>,
    dry_run: bool,
) -> Result<(Answer, Plan), E>
where
    E: From<StoreError>,
{
    let rtx = db.begin_read().map_err(StoreError::from)?;
    let meta = rtx.open_table(META_TABLE).map_err(StoreError::from)?;
    let snapshot = read_meta(&meta, META_REVISION)?;
    let tables = Tables::snapshot(&rtx, keys);
    let mut txn = Txn::new(&tables, snapshot);
    if dry_run {
        txn.set_dry_run();
    }
    let value = f(&mut txn)?;
    Ok((value, txn.into_plan()))
}

/// Creates missing tables, checks the layout version, and reads `(revision, compacted)`.
fn prepare(db: &Database) -> Result<(u64, u64), StoreError> {
    let wtx = db.begin_write()?;
    let found = {
        for kind in Kind::ALL {
            wtx.open_table(kind_table(*kind))?;
        }
        wtx.open_table(EVENT_TABLE)?;
        let mut meta = wtx.open_table(META_TABLE)?;
        let schema = meta.get(META_SCHEMA)?.map(|v| v.value());
        match schema {
            None => {
                meta.insert(META_SCHEMA, SCHEMA_VERSION)?;
            }
            Some(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::Db(format!(
                    "the store file has layout {v}, written by a newer skiff (this one reads up to {SCHEMA_VERSION})"
                )));
            }
            Some(_) => {}
        }
        (
            read_meta(&meta, META_REVISION)?,
            read_meta(&meta, META_COMPACTED)?,
        )
    };
    wtx.commit()?;
    Ok(found)
}

fn read_meta(table: &impl ReadableTable<&'static str, u64>, key: &str) -> Result<u64, StoreError> {
    Ok(table.get(key)?.map(|v| v.value()).unwrap_or(0))
}

/// The events of the masked kinds in `(after, upto]`, read from the log in one snapshot.
fn read_events(
    db: &Database,
    after: u64,
    upto: u64,
    mask: u64,
    keys: Option<&seal::Keyring>,
) -> Result<VecDeque<Arc<WatchEvent>>, StoreError> {
    let rtx = db.begin_read()?;
    let compacted = read_meta(&rtx.open_table(META_TABLE)?, META_COMPACTED)?;
    if after < compacted {
        return Err(StoreError::Expired {
            requested: after,
            oldest: compacted,
        });
    }
    let log = rtx.open_table(EVENT_TABLE)?;
    let mut events = VecDeque::new();
    for entry in log.range((after + 1)..=upto)? {
        let (k, v) = entry?;
        let revision = k.value();
        let bytes = codec::unseal(v.value(), keys, || {
            format!("the event at revision {revision}")
        })?;
        let (event_type, object) = decode_event(revision, &bytes)?;
        if mask & kind_bit(object.kind()) != 0 {
            let packed = codec::event_packed_object(revision, &bytes)?;
            events.push_back(Arc::new(WatchEvent::new(
                event_type,
                revision,
                object,
                packed.into(),
            )));
        }
    }
    Ok(events)
}
