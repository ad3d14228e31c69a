//! A deduplicating work queue of keys, as in Kubernetes' client-go workqueue.
//!
//! A key added while it waits is not queued twice; a key added while a worker processes it is
//! queued again once the worker calls [`WorkQueue::done`], so one key is never processed by
//! two workers at once and no change is lost. Retries wait with per-key exponential back-off
//! ([`WorkQueue::retry`]); [`WorkQueue::forget`] resets it after a success.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use event_listener::Event;

struct State<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    processing: HashSet<K>,
    /// Added while processing: requeued by `done`.
    dirty: HashSet<K>,
    failures: HashMap<K, u32>,
    closed: bool,
}

struct Inner<K> {
    state: Mutex<State<K>>,
    ready: Event,
    base_delay: Duration,
    max_delay: Duration,
}

/// A cheap handle; clones share the queue.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_secs(300))
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// A queue whose retries back off from `base_delay`, doubling up to `max_delay`.
    pub fn new(base_delay: Duration, max_delay: Duration) -> Self {
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    queued: HashSet::new(),
                    processing: HashSet::new(),
                    dirty: HashSet::new(),
                    failures: HashMap::new(),
                    closed: false,
                }),
                ready: Event::new(),
                base_delay,
                max_delay,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut s = self.lock();
        if s.closed {
            return;
        }
        if s.processing.contains(&key) {
            s.dirty.insert(key);
            return;
        }
        if s.queued.insert(key.clone()) {
            s.queue.push_back(key);
            drop(s);
            self.inner.ready.notify(1);
        }
    }

    /// Queues `key` after `delay`.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let q = self.clone();
        smol::spawn(async move {
            smol::Timer::after(delay).await;
            q.add(key);
        })
        .detach();
    }

    /// Queues `key` again after its back-off, which doubles with each consecutive retry.
    pub fn retry(&self, key: K) {
        let delay = {
            let mut s = self.lock();
            let n = s.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            let factor = 1u32
                .checked_shl(n.saturating_sub(1).min(31))
                .unwrap_or(u32::MAX);
            self.inner
                .base_delay
                .saturating_mul(factor)
                .min(self.inner.max_delay)
        };
        self.add_after(key, delay);
    }

    /// Clears the back-off of `key` (after it was processed successfully).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Consecutive retries of `key` so far.
    pub fn retries(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key to process; `None` once the queue is shut down. Call [`WorkQueue::done`]
    /// with the key when finished.
    pub async fn next(&self) -> Option<K> {
        loop {
            let listener = {
                let mut s = self.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.queued.remove(&key);
                    s.processing.insert(key.clone());
                    return Some(key);
                }
                if s.closed {
                    return None;
                }
                self.inner.ready.listen()
            };
            listener.await;
        }
    }

    /// Every key waiting now, marked as being processed (for batch processing); each must be
    /// passed to [`WorkQueue::done`].
    pub fn drain(&self) -> Vec<K> {
        let mut s = self.lock();
        let keys: Vec<K> = s.queue.drain(..).collect();
        for k in &keys {
            s.queued.remove(k);
            s.processing.insert(k.clone());
        }
        keys
    }

    /// Marks `key` processed; queues it again if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.remove(key) && s.queued.insert(key.clone()) {
            s.queue.push_back(key.clone());
            drop(s);
            self.inner.ready.notify(1);
        }
    }

    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: `next` returns `None` once it is empty.
    pub fn shut_down(&self) {
        self.lock().closed = true;
        self.inner.ready.notify(usize::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedups_and_requeues_keys_added_while_processing() {
        smol::block_on(async {
            let q: WorkQueue<&str> = WorkQueue::default();
            q.add("a");
            q.add("b");
            q.add("a");
            assert_eq!(q.len(), 2);
            let k = q.next().await.unwrap();
            assert_eq!(k, "a");
            q.add("a"); // while processing: not queued yet
            assert_eq!(q.len(), 1);
            q.done(&"a");
            assert_eq!(q.len(), 2);
            assert_eq!(q.next().await, Some("b"));
            assert_eq!(q.next().await, Some("a"));
            q.shut_down();
            assert_eq!(q.next().await, None);
        });
    }

    #[test]
    fn retries_back_off_and_forget_resets() {
        smol::block_on(async {
            let q: WorkQueue<u32> =
                WorkQueue::new(Duration::from_millis(20), Duration::from_secs(1));
            let start = std::time::Instant::now();
            q.retry(7);
            assert!(q.is_empty());
            assert_eq!(q.next().await, Some(7));
            assert!(start.elapsed() >= Duration::from_millis(20));
            q.done(&7);
            assert_eq!(q.retries(&7), 1);
            q.retry(7);
            assert_eq!(q.retries(&7), 2);
            let start = std::time::Instant::now();
            assert_eq!(q.next().await, Some(7));
            assert!(start.elapsed() >= Duration::from_millis(40));
            q.forget(&7);
            assert_eq!(q.retries(&7), 0);
        });
    }
}
