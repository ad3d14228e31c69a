//! The single writer thread and its group commit.
//!
//! Requests queue up while a commit is in flight. The writer drains the queue, runs every
//! closure in order inside one redb write transaction, commits once with immediate
//! durability, publishes the batch's events to the hub in revision order, and only then
//! answers each caller.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use redb::{Database, Durability, WriteTransaction};

use super::codec::{META_COMPACTED, META_REVISION, META_TABLE};
use super::hub::{lock, Hub};
use super::txn::{PackedEvent, RecentWrites, Tables, Txn};
use super::{CommitStats, StoreError, WatchEvent};

/// Most closures run in one transaction; a bound keeps one batch from holding every caller
/// back behind a huge commit.
const MAX_BATCH: usize = 1024;

/// What a closure hands back to the writer: whether it succeeded, and how to answer its
/// caller once the commit's fate is known.
pub(crate) struct JobOutcome {
    pub ok: bool,
    /// Not ok because what a planned write read has changed since its snapshot.
    pub conflict: bool,
    pub reply: Reply,
}

/// Answers a caller: given the commit's outcome, or an error that replaces it.
pub(crate) type Reply = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

pub(crate) type Job = Box<dyn FnOnce(&mut Txn<'_, '_>) -> JobOutcome + Send>;

pub(crate) enum Msg {
    Job(Job),
    /// Finish what was queued before this message, then stop.
    Shutdown,
}

pub(crate) struct Writer {
    pub db: Arc<Database>,
    pub hub: Arc<Hub>,
    pub revision: Arc<AtomicU64>,
    pub compacted: Arc<AtomicU64>,
    pub stats: Arc<Mutex<CommitStats>>,
    pub event_window: u64,
    pub keys: Option<Arc<super::seal::Keyring>>,
    /// What the batches wrote lately, to check the plans of closures run on snapshots.
    pub recent: RefCell<RecentWrites>,
}

impl Writer {
    pub(crate) fn run(self, rx: Receiver<Msg>) {
        let mut stop = false;
        while !stop {
            let first = match rx.recv() {
                Ok(Msg::Job(job)) => job,
                Ok(Msg::Shutdown) | Err(_) => break,
            };
            let mut jobs = vec![first];
            while jobs.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(Msg::Job(job)) => jobs.push(job),
                    Ok(Msg::Shutdown) | Err(TryRecvError::Disconnected) => {
                        stop = true;
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            while !jobs.is_empty() {
                jobs = self.run_batch(jobs);
            }
        }
        // Jobs queued behind the shutdown are dropped with the receiver: their callers see
        // `Closed`. Watch streams end.
        drop(rx);
        self.hub.close();
    }

    /// Runs one batch and commits it; returns the closures a storage error kept from running.
    fn run_batch(&self, jobs: Vec<Job>) -> Vec<Job> {
        let started = Instant::now();
        let batch_size = jobs.len();
        // Each caller's answer, and an error that overrides the commit's outcome for it.
        let mut replies: Vec<(Reply, Option<StoreError>)> = Vec::with_capacity(batch_size);
        let mut events: Vec<PackedEvent> = Vec::new();
        let mut failed = 0u64;
        let mut conflicts = 0u64;
        let mut jobs = jobs.into_iter();
        let result = self.begin().and_then(|wtx| {
            let mut revision = self.revision.load(Ordering::Acquire);
            let tables = Tables::new(&wtx, self.keys.as_deref(), &self.recent);
            for job in jobs.by_ref() {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let mut txn = Txn::new(&tables, revision);
                    let outcome = job(&mut txn);
                    (outcome, txn)
                }));
                let Ok((outcome, txn)) = outcome else {
                    // The closure panicked: its overlay (and its caller's reply sender) are
                    // gone, so the caller sees `Closed`; nothing reached the transaction.
                    tracing::error!("a store write closure panicked; its write was dropped");
                    failed += 1;
                    continue;
                };
                if outcome.conflict {
                    conflicts += 1;
                    replies.push((outcome.reply, None));
                    continue;
                }
                if !outcome.ok {
                    failed += 1;
                    replies.push((outcome.reply, None));
                    continue;
                }
                if txn.is_dry_run() {
                    // Checked and answered; nothing reaches the transaction.
                    replies.push((outcome.reply, None));
                    continue;
                }
                match txn.encode() {
                    Err(e) => {
                        failed += 1;
                        replies.push((outcome.reply, Some(e)));
                    }
                    Ok(writes) => {
                        replies.push((outcome.reply, None));
                        // A storage error here abandons the batch; the closures not yet run
                        // stay in `jobs` for the next one.
                        let (mut closure_events, last) = writes.apply()?;
                        revision = last;
                        events.append(&mut closure_events);
                    }
                }
            }
            if events.is_empty() {
                // Nothing was written (every closure failed, was a dry run or only read):
                // redb would still sync the file for an empty commit, which an idle SD card
                // should not see.
                drop(tables);
                wtx.abort()?;
                return Ok((revision, self.compacted.load(Ordering::Acquire), None));
            }
            let compacted = self.finish(&wtx, &tables, revision)?;
            drop(tables);
            let syncing = Instant::now();
            wtx.commit()?;
            Ok((revision, compacted, Some(syncing.elapsed())))
        });
        let leftover: Vec<Job> = jobs.collect();
        let batch_size = batch_size - leftover.len();
        let tried = batch_size as u64 - conflicts;
        let elapsed = started.elapsed();
        match result {
            Ok((revision, compacted, sync_time)) => {
                self.revision.store(revision, Ordering::Release);
                self.compacted.store(compacted, Ordering::Release);
                self.recent.borrow_mut().trim(revision);
                {
                    let mut stats = lock(&self.stats);
                    // A batch that wrote nothing was abandoned, not committed.
                    stats.commits += u64::from(sync_time.is_some());
                    stats.writes += tried - failed;
                    stats.failed_writes += failed;
                    stats.conflicts += conflicts;
                    stats.total_commit_time += elapsed;
                    stats.total_sync_time += sync_time.unwrap_or_default();
                    stats.last_commit_time = elapsed;
                    stats.last_batch_size = batch_size;
                    stats.max_batch_size = stats.max_batch_size.max(batch_size);
                }
                let shared: Vec<Arc<WatchEvent>> = events
                    .into_iter()
                    .map(|(e, packed)| {
                        Arc::new(WatchEvent::new(e.event_type, e.revision, e.object, packed))
                    })
                    .collect();
                if !shared.is_empty() {
                    self.hub.publish(&shared, revision);
                }
                for (reply, error) in replies {
                    reply(error.map_or(Ok(()), Err));
                }
            }
            Err(e) => {
                lock(&self.stats).failed_commits += 1;
                self.recent
                    .borrow_mut()
                    .reset(self.revision.load(Ordering::Acquire));
                tracing::error!(error = %e, "store commit failed; batch abandoned");
                for (reply, error) in replies {
                    reply(Err(error.unwrap_or_else(|| e.clone())));
                }
            }
        }
        leftover
    }

    fn begin(&self) -> Result<WriteTransaction, StoreError> {
        let mut wtx = self.db.begin_write()?;
        wtx.set_durability(Durability::Immediate)?;
        Ok(wtx)
    }

    /// Records the new revision and trims the event log to the window; returns the new
    /// compaction point.
    fn finish(
        &self,
        wtx: &WriteTransaction,
        tables: &Tables<'_>,
        revision: u64,
    ) -> Result<u64, StoreError> {
        let mut meta = wtx.open_table(META_TABLE)?;
        meta.insert(META_REVISION, revision)?;
        let compacted = self.compacted.load(Ordering::Acquire);
        let cut = revision.saturating_sub(self.event_window);
        if cut <= compacted {
            return Ok(compacted);
        }
        // The log holds nothing at or below `compacted`, so only (compacted, cut] is visited.
        tables.with_log(|log| Ok(log.retain_in((compacted + 1)..=cut, |_, _| false)?))?;
        meta.insert(META_COMPACTED, cut)?;
        Ok(cut)
    }
}
