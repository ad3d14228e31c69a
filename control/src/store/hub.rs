//! The watch hub: in-memory fan-out of committed events to watchers.
//!
//! Each watcher owns a bounded queue that grows only as events arrive (an idle watcher costs a
//! few hundred bytes, so thousands are cheap). The writer pushes each batch's events, shared as
//! `Arc<WatchEvent>`, into the queues of the watchers interested in their kind. A watcher whose
//! queue is full is cut off: it keeps the events already queued, then its stream ends, and the
//! client resumes from the last revision it saw or re-lists (as with Kubernetes' watch cache).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use api::Kind;
use event_listener::Event;

use super::{StoreError, WatchEvent};

// A watcher's kinds are a bit set: a bit per built-in kind, and the last bit for every custom
// resource's kind (a watch of custom kinds filters their events itself, [`Watch::only`]).
const _: () = assert!(Kind::ALL.len() < 64);
const CUSTOM_BIT: u64 = 1 << 63;

pub(crate) fn kind_mask(kinds: &[Kind]) -> u64 {
    if kinds.is_empty() {
        return u64::MAX;
    }
    kinds.iter().fold(0, |m, k| m | kind_bit(*k))
}

pub(crate) fn kind_bit(kind: Kind) -> u64 {
    if kind.is_custom() {
        CUSTOM_BIT
    } else {
        1 << kind.index()
    }
}

/// The custom kinds a watch of `kinds` must filter to (None: the mask is exact).
pub(crate) fn custom_filter(kinds: &[Kind]) -> Option<Box<[Kind]>> {
    kinds
        .iter()
        .any(|k| k.is_custom())
        .then(|| kinds.iter().copied().filter(|k| k.is_custom()).collect())
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data under our locks stays consistent even if a holder panicked.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a watch stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEnd {
    /// The store was closed.
    Closed,
    /// The watcher fell more than its queue capacity behind and was cut off.
    TooSlow,
}

pub(crate) struct Queue {
    state: Mutex<QueueState>,
    ready: Event,
}

struct QueueState {
    events: VecDeque<Arc<WatchEvent>>,
    end: Option<WatchEnd>,
}

impl Queue {
    fn new() -> Queue {
        Queue {
            state: Mutex::new(QueueState {
                events: VecDeque::new(),
                end: None,
            }),
            ready: Event::new(),
        }
    }

    fn end(&self, why: WatchEnd) {
        lock(&self.state).end.get_or_insert(why);
        self.ready.notify(usize::MAX);
    }
}

struct Watcher {
    kinds: u64,
    queue: Arc<Queue>,
    /// How many undelivered events it may have before it is cut off.
    capacity: usize,
}

struct HubState {
    /// The revision of the last batch handed to watchers.
    published: u64,
    closed: bool,
    next_id: u64,
    watchers: HashMap<u64, Watcher>,
}

pub(crate) struct Hub {
    state: Mutex<HubState>,
    capacity: usize,
}

impl Hub {
    pub(crate) fn new(published: u64, capacity: usize) -> Hub {
        Hub {
            state: Mutex::new(HubState {
                published,
                closed: false,
                next_id: 0,
                watchers: HashMap::new(),
            }),
            capacity: capacity.max(1),
        }
    }

    /// Registers a watcher of `kinds` (a kind mask); `capacity` overrides the hub's queue
    /// capacity for it. Returns its id, its queue and the revision after which its live events
    /// start (everything up to it must come from the event log).
    pub(crate) fn register(
        &self,
        kinds: u64,
        capacity: Option<usize>,
    ) -> Result<(u64, Arc<Queue>, u64), StoreError> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(StoreError::Closed);
        }
        let id = state.next_id;
        state.next_id += 1;
        let queue = Arc::new(Queue::new());
        state.watchers.insert(
            id,
            Watcher {
                kinds,
                queue: queue.clone(),
                capacity: capacity.unwrap_or(self.capacity).max(1),
            },
        );
        Ok((id, queue, state.published))
    }

    pub(crate) fn unregister(&self, id: u64) {
        lock(&self.state).watchers.remove(&id);
    }

    pub(crate) fn watcher_count(&self) -> usize {
        lock(&self.state).watchers.len()
    }

    /// Hands a committed batch (in revision order) to every interested watcher.
    pub(crate) fn publish(&self, events: &[Arc<WatchEvent>], last_revision: u64) {
        let mut state = lock(&self.state);
        let batch_kinds = events
            .iter()
            .fold(0u64, |m, e| m | kind_bit(e.object.kind()));
        let mut too_slow = Vec::new();
        for (id, watcher) in &state.watchers {
            if watcher.kinds & batch_kinds == 0 {
                continue;
            }
            let mut queue = lock(&watcher.queue.state);
            let mut overflow = false;
            for event in events {
                if watcher.kinds & kind_bit(event.object.kind()) == 0 {
                    continue;
                }
                if queue.events.len() >= watcher.capacity {
                    overflow = true;
                    break;
                }
                queue.events.push_back(event.clone());
            }
            if overflow {
                queue.end.get_or_insert(WatchEnd::TooSlow);
                too_slow.push(*id);
            }
            drop(queue);
            watcher.queue.ready.notify(usize::MAX);
        }
        for id in too_slow {
            state.watchers.remove(&id);
        }
        state.published = state.published.max(last_revision);
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Ends every stream as if each had fallen behind (its client resumes or re-lists), and
    /// moves the published revision to `revision`: the events before it are lost.
    pub(crate) fn expire_all(&self, revision: u64) {
        let mut state = lock(&self.state);
        for (_, watcher) in state.watchers.drain() {
            watcher.queue.end(WatchEnd::TooSlow);
        }
        state.published = state.published.max(revision);
    }

    /// Ends every stream and refuses new watchers.
    pub(crate) fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        for (_, watcher) in state.watchers.drain() {
            watcher.queue.end(WatchEnd::Closed);
        }
    }
}

/// A stream of committed events: first the replayed ones after the requested revision, then
/// live ones, in revision order, with no gaps and no repeats.
pub struct Watch {
    pub(crate) hub: Arc<Hub>,
    pub(crate) id: u64,
    pub(crate) queue: Arc<Queue>,
    pub(crate) replay: VecDeque<Arc<WatchEvent>>,
    /// The revision of the last event handed out (or the starting point); later events at or
    /// below it are skipped.
    pub(crate) last: u64,
    /// The [`WatchEvent::index`] of the last event handed out within `last` (`u32::MAX`:
    /// every event of `last`).
    pub(crate) last_index: u32,
    /// The custom kinds watched, when any is: events of other custom kinds share their bit.
    pub(crate) only: Option<Box<[Kind]>>,
}

impl Watch {
    /// The next event, or `None` once the stream has ended (see [`Watch::end_reason`]).
    /// Cancel-safe: dropping the future loses no event.
    pub async fn next(&mut self) -> Option<Arc<WatchEvent>> {
        loop {
            let listener = {
                if let Some(event) = self.take_ready() {
                    return Some(event);
                }
                let state = lock(&self.queue.state);
                if !state.events.is_empty() {
                    continue;
                }
                if state.end.is_some() {
                    return None;
                }
                // Listen before releasing the lock: a push after this point notifies us.
                self.queue.ready.listen()
            };
            listener.await;
        }
    }

    /// The next event if one is ready, without waiting.
    pub fn try_next(&mut self) -> Option<Arc<WatchEvent>> {
        self.take_ready()
    }

    fn take_ready(&mut self) -> Option<Arc<WatchEvent>> {
        while let Some(event) = self.replay.pop_front() {
            if self.is_new(&event) {
                return Some(event);
            }
        }
        let queue = self.queue.clone();
        let mut state = lock(&queue.state);
        while let Some(event) = state.events.pop_front() {
            if self.is_new(&event) {
                return Some(event);
            }
        }
        None
    }

    /// Whether `event` comes after the last one handed out (then it is the last one).
    fn is_new(&mut self, event: &WatchEvent) -> bool {
        if (event.revision, event.index) > (self.last, self.last_index) {
            self.last = event.revision;
            self.last_index = event.index;
            let kind = event.object.kind();
            !kind.is_custom() || self.only.as_ref().is_none_or(|only| only.contains(&kind))
        } else {
            false
        }
    }

    /// Why the stream ended (or will end once the queued events are read); `None` while live.
    pub fn end_reason(&self) -> Option<WatchEnd> {
        lock(&self.queue.state).end
    }

    /// The revision of the last event handed out, or the revision the watch started after: a
    /// client whose stream ended resumes from here.
    pub fn last_revision(&self) -> u64 {
        self.last
    }

    /// The watch as a `futures_lite::Stream`.
    pub fn into_stream(self) -> impl futures_lite::Stream<Item = Arc<WatchEvent>> + Send {
        futures_lite::stream::unfold(self, |mut watch| async move {
            let event = watch.next().await?;
            Some((event, watch))
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.hub.unregister(self.id);
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("id", &self.id)
            .field("last", &self.last)
            .field("replay", &self.replay.len())
            .finish()
    }
}
