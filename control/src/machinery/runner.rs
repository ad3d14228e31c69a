//! The loop every keyed controller shares: workers take keys from a [`WorkQueue`], reconcile
//! them, wait until the shared cache holds their own writes (so the next pass of the key
//! does not act on a cache that misses them, which would create pods twice), and retry
//! failures with back-off.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use api::object::Resource;

use super::informer::Informers;
use super::queue::WorkQueue;
use crate::error::ApiError;

/// A namespaced object's key: namespace and name.
pub type Key = (String, String);

/// How long a worker waits for the cache to catch up with its own writes.
const CATCH_UP: Duration = Duration::from_secs(5);

/// What one reconcile did: the newest store revision it wrote, and when to look again.
#[derive(Debug, Default)]
pub struct Synced {
    pub revision: u64,
    pub requeue_after: Option<Duration>,
}

impl Synced {
    /// Remembers a write (its returned object carries the revision).
    pub fn wrote<K: Resource>(&mut self, obj: &K) {
        self.revision = self.revision.max(obj.meta().revision());
    }

    pub fn wrote_revision(&mut self, revision: u64) {
        self.revision = self.revision.max(revision);
    }

    /// Look again after `d` at the latest (keeps the earlier of two requests).
    pub fn requeue_after(&mut self, d: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(d, |c| c.min(d)));
    }
}

/// Starts `workers` tasks that reconcile keys from `queue` with `sync`.
pub fn spawn_workers<F, Fut>(
    name: &'static str,
    informers: Arc<Informers>,
    queue: WorkQueue<Key>,
    workers: usize,
    sync: F,
) where
    F: Fn(Key, Synced) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = (Synced, Result<(), ApiError>)> + Send + 'static,
{
    for _ in 0..workers.max(1) {
        let (informers, queue, sync) = (informers.clone(), queue.clone(), sync.clone());
        smol::spawn(async move {
            while let Some(key) = queue.next().await {
                let (synced, result) = sync(key.clone(), Synced::default()).await;
                if synced.revision > 0 {
                    futures_lite::future::or(informers.wait_for(synced.revision), async {
                        smol::Timer::after(CATCH_UP).await;
                    })
                    .await;
                }
                match result {
                    Ok(()) => {
                        queue.forget(&key);
                        if let Some(d) = synced.requeue_after {
                            queue.add_after(key.clone(), d);
                        }
                    }
                    Err(e) => {
                        let level_conflict = e.code() == 409;
                        if level_conflict {
                            tracing::debug!(controller = name, ns = %key.0, name = %key.1, error = %e, "conflict; retrying");
                        } else {
                            tracing::warn!(controller = name, ns = %key.0, name = %key.1, error = %e, "sync failed; retrying");
                        }
                        queue.retry(key.clone());
                    }
                }
                queue.done(&key);
            }
        })
        .detach();
    }
}

/// The key of an object.
pub fn key_of<K: Resource>(obj: &K) -> Key {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone(),
    )
}

/// Ignores NotFound (the object went away meanwhile) and Conflict-free successes.
pub fn ignore_not_found<T>(r: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A queue of `K` keys fed by the shared cache: every `K` now, then the keys `keys_for`
/// derives from each change of `kinds` (a resync included).
pub fn fed_queue<K, F>(ctx: &super::Context, kinds: &[api::Kind], keys_for: F) -> WorkQueue<Key>
where
    K: Resource,
    F: Fn(&super::Context, &super::informer::Change) -> Vec<Key> + Send + 'static,
{
    let queue: WorkQueue<Key> = WorkQueue::default();
    let changes = ctx.informers.subscribe(kinds);
    let keys: Vec<Key> = {
        let cache = ctx.informers.cache().read();
        cache.keys(K::KIND, None).map(|k| (**k).clone()).collect()
    };
    for key in keys {
        queue.add(key);
    }
    let (c, q) = (ctx.clone(), queue.clone());
    smol::spawn(async move {
        while let Ok(change) = changes.recv().await {
            for key in keys_for(&c, &change) {
                q.add(key);
            }
        }
    })
    .detach();
    queue
}
