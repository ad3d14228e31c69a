//! One priority level's queues and seats: kube's fair queuing for server requests
//! (`fairqueuing/queueset`). A request is shuffle-sharded into the shortest queue of its
//! flow's hand, or rejected when that queue is full while every seat is taken; queues are
//! served in order of the virtual time at which their oldest request would finish, a
//! virtual clock (R, in seat-seconds) that advances at the rate each busy queue is served.
//! An exempt level dispatches at once; a level without queues (limit response Reject)
//! rejects at once when its seats are taken.
//!
//! Each request takes one seat, and its work is reckoned at kube's estimated service time
//! (3 ms) until it finishes; kube's work estimator (more seats for big lists, seats held
//! after a write for its watchers) is left out.
//!
//! The state is synchronous and takes a [`Clock`], so the ordering is tested with a clock
//! the test moves; [`QueueSet::wait`] is the async wait of a queued request.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::shuffle::Dealer;

/// Work in seat-seconds, fixed point: `n` is `n / SCALE` seat-seconds (kube's SeatSeconds).
pub type SeatSeconds = u64;
const SCALE: u64 = 100_000_000;

/// kube's estimate of a request's service time, the unit of a queued request's work.
pub const ESTIMATED_SERVICE: Duration = Duration::from_millis(3);

/// Seats a request takes.
const SEATS: usize = 1;

/// `seats × duration` in seat-seconds, rounded (kube's SeatsTimesDuration).
pub fn seats_times(seats: f64, d: Duration) -> SeatSeconds {
    (seats * d.as_nanos() as f64 / (1e9 / SCALE as f64)).round() as u64
}

/// kube's `SeatSeconds.String()`: `12.34567890ss`.
pub fn format_seat_seconds(ss: SeatSeconds) -> String {
    format!("{}.{:08}ss", ss / SCALE, ss % SCALE)
}

/// Where the time comes from.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn wall(&self) -> SystemTime;
}

/// The real clocks.
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// How a level takes requests: exempt (never waits), without queues (rejects when its
/// seats are taken) or with shuffle-sharded queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queuing {
    Exempt,
    Reject,
    Queue {
        queues: usize,
        hand_size: usize,
        queue_length_limit: usize,
    },
}

/// What a request is, for the dumps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Described {
    pub flow_schema: String,
    pub distinguisher: String,
    pub user: String,
    pub verb: String,
    pub path: String,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
}

/// A request in the queue set.
#[derive(Debug)]
struct Request {
    id: u64,
    described: Described,
    arrival: SystemTime,
    /// R when it arrived (waiting requests).
    arrival_r: SeatSeconds,
    /// When it started executing.
    started: Option<(Instant, SystemTime)>,
    /// Told when the request is dispatched (a queued request).
    dispatched: Option<async_channel::Sender<()>>,
}

#[derive(Debug)]
struct Queue {
    /// Stable while the queue lives (indexes move when an excess queue is removed).
    id: u64,
    waiting: VecDeque<Request>,
    executing: BTreeMap<u64, Request>,
    /// R at which the next request of this queue is dispatched in the virtual world.
    next_dispatch_r: SeatSeconds,
    seats_in_use: usize,
}

impl Queue {
    fn new(id: u64) -> Queue {
        Queue {
            id,
            waiting: VecDeque::new(),
            executing: BTreeMap::new(),
            next_dispatch_r: 0,
            seats_in_use: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.executing.is_empty()
    }

    /// The work of the waiting requests.
    fn waiting_work(&self) -> SeatSeconds {
        self.waiting.len() as u64 * request_work()
    }
}

/// The work of a request: its seat for the estimated service time.
fn request_work() -> SeatSeconds {
    seats_times(SEATS as f64, ESTIMATED_SERVICE)
}

/// Counters and state of a queue set, as the dumps show them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub waiting: usize,
    pub executing: usize,
    pub seats_in_use: usize,
    pub dispatched: usize,
    pub rejected: usize,
    pub timed_out: usize,
    pub cancelled: usize,
    /// Queues with waiting requests.
    pub active_queues: usize,
}

/// One queue as `dump_queues` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDump {
    pub waiting: usize,
    pub executing: usize,
    pub seats_in_use: usize,
    pub next_dispatch_r: SeatSeconds,
    pub waiting_work: SeatSeconds,
}

/// One request as `dump_requests` shows it: its queue and place (-1 when executing, or
/// for both when it went through no queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestDump {
    pub queue: i64,
    pub index: i64,
    pub arrival: SystemTime,
    pub started: Option<SystemTime>,
    pub described: Described,
}

struct State {
    queuing: Queuing,
    limit: usize,
    dealer: Option<Dealer>,
    queues: Vec<Queue>,
    next_queue_id: u64,
    /// The virtual clock.
    current_r: SeatSeconds,
    last_real: Instant,
    last_wall: SystemTime,
    /// The index of the queue last dispatched from.
    robin: usize,
    waiting: usize,
    executing: usize,
    seats_in_use: usize,
    enqueues: usize,
    dispatched: usize,
    rejected: usize,
    timed_out: usize,
    cancelled: usize,
    /// Requests executing without a queue (exempt and queueless levels).
    queueless: BTreeMap<u64, Request>,
    next_id: u64,
}

/// A ticket for a request the queue set took: executing (holding its seat until
/// [`QueueSet::finish`]) or waiting in a queue.
#[derive(Debug)]
pub struct Ticket {
    id: u64,
    /// The queue it was put in (None: executing without a queue).
    queue: Option<u64>,
    /// Told when it is dispatched, for a queued request.
    dispatched: Option<async_channel::Receiver<()>>,
}

impl Ticket {
    /// Whether the request waits in a queue.
    pub fn queued(&self) -> bool {
        self.dispatched.is_some()
    }

    /// Whether the request may execute, without waiting (tests).
    #[cfg(test)]
    fn is_dispatched(&self) -> bool {
        self.dispatched.as_ref().is_none_or(|rx| !rx.is_empty())
    }
}

/// A level's queues and seats.
pub struct QueueSet {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Its level is gone and drains (kept across configurations, as the queue set is).
    quiescing: std::sync::atomic::AtomicBool,
}

impl QueueSet {
    pub fn new(clock: Arc<dyn Clock>, queuing: Queuing, limit: usize) -> QueueSet {
        let now = clock.now();
        let qs = QueueSet {
            clock,
            quiescing: Default::default(),
            state: Mutex::new(State {
                queuing: Queuing::Reject,
                limit,
                dealer: None,
                queues: Vec::new(),
                next_queue_id: 0,
                current_r: 0,
                last_real: now,
                last_wall: SystemTime::UNIX_EPOCH,
                robin: 0,
                waiting: 0,
                executing: 0,
                seats_in_use: 0,
                enqueues: 0,
                dispatched: 0,
                rejected: 0,
                timed_out: 0,
                cancelled: 0,
                queueless: BTreeMap::new(),
                next_id: 0,
            }),
        };
        qs.configure(queuing, limit);
        qs
    }

    pub fn set_quiescing(&self, quiescing: bool) {
        self.quiescing
            .store(quiescing, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_quiescing(&self) -> bool {
        self.quiescing.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.sync_time(self.clock.now(), self.clock.wall());
        s
    }

    /// A new queuing configuration or concurrency limit. More queues are added at once;
    /// fewer leave by attrition (an excess queue goes when it is empty). A level without
    /// queues keeps its queues' settings, as kube's does.
    pub fn configure(&self, queuing: Queuing, limit: usize) {
        let mut s = self.lock();
        if let Queuing::Queue {
            queues, hand_size, ..
        } = queuing
        {
            while s.queues.len() < queues {
                let id = s.next_queue_id;
                s.next_queue_id += 1;
                s.queues.push(Queue::new(id));
            }
            s.dealer = Dealer::new(queues, hand_size);
        }
        s.queuing = queuing;
        s.limit = limit;
        s.dispatch_as_much_as_possible();
    }

    /// Takes a request: executing now (exempt, or a free seat of a level without queues),
    /// queued, or rejected (None: a full queue while every seat is taken, or a level
    /// without queues at its limit).
    pub fn start(&self, hash: u64, described: Described) -> Option<Ticket> {
        let mut s = self.lock();
        let wall = s.last_wall;
        let id = s.next_id;
        s.next_id += 1;
        let request = Request {
            id,
            described,
            arrival: wall,
            arrival_r: s.current_r,
            started: None,
            dispatched: None,
        };
        match s.queuing {
            Queuing::Exempt | Queuing::Reject => {
                if !s.can_accommodate(SEATS) {
                    s.rejected += 1;
                    return None;
                }
                let now = s.last_real;
                s.executing += 1;
                s.seats_in_use += SEATS;
                s.queueless.insert(
                    id,
                    Request {
                        started: Some((now, wall)),
                        ..request
                    },
                );
                Some(Ticket {
                    id,
                    queue: None,
                    dispatched: None,
                })
            }
            Queuing::Queue {
                queue_length_limit, ..
            } => {
                let index = s.shuffle_shard(hash);
                if s.seats_in_use >= s.limit && s.queues[index].waiting.len() >= queue_length_limit
                {
                    s.rejected += 1;
                    return None;
                }
                let (tx, rx) = async_channel::bounded(1);
                let current_r = s.current_r;
                let queue = &mut s.queues[index];
                if queue.is_empty() {
                    queue.next_dispatch_r = current_r;
                }
                let queue_id = queue.id;
                queue.waiting.push_back(Request {
                    dispatched: Some(tx),
                    ..request
                });
                s.waiting += 1;
                s.bound_next_dispatch(index);
                s.dispatch_as_much_as_possible();
                Some(Ticket {
                    id,
                    queue: Some(queue_id),
                    dispatched: Some(rx),
                })
            }
        }
    }

    /// Waits until a queued request is dispatched, or until `deadline`: true when it may
    /// execute (it holds its seat until [`QueueSet::finish`]); false when it timed out and
    /// left its queue. A request that executes at once returns true at once.
    pub async fn wait(&self, ticket: &Ticket, deadline: Instant) -> bool {
        use futures_lite::FutureExt;
        let Some(rx) = &ticket.dispatched else {
            return true;
        };
        let told = async { rx.recv().await.is_ok() }
            .or(async {
                smol::Timer::at(deadline).await;
                false
            })
            .await;
        told || !self.leave_queue(ticket)
    }

    /// Takes a waiting request out of its queue: true if it was still waiting (it counts
    /// as rejected and cancelled, as kube counts a request whose wait ended), false if it
    /// was dispatched meanwhile.
    pub fn leave_queue(&self, ticket: &Ticket) -> bool {
        let mut s = self.lock();
        let Some(index) = ticket.queue.and_then(|q| s.queue_index(q)) else {
            return false;
        };
        let queue = &mut s.queues[index];
        let Some(at) = queue.waiting.iter().position(|r| r.id == ticket.id) else {
            return false;
        };
        queue.waiting.remove(at);
        s.waiting -= 1;
        s.rejected += 1;
        s.cancelled += 1;
        s.bound_next_dispatch(index);
        s.remove_if_excess(index);
        true
    }

    /// Notes that a request began to execute (kube's dispatched count).
    pub fn note_executed(&self) {
        self.lock().dispatched += 1;
    }

    /// A request is done (or its client went away): its seat goes to the next request.
    pub fn finish(&self, ticket: &Ticket) {
        let mut s = self.lock();
        let now = s.last_real;
        if ticket.queue.is_none() {
            if s.queueless.remove(&ticket.id).is_some() {
                s.executing -= 1;
                s.seats_in_use -= SEATS;
            }
            s.dispatch_as_much_as_possible();
            return;
        }
        let Some(index) = ticket.queue.and_then(|q| s.queue_index(q)) else {
            return;
        };
        let queue = &mut s.queues[index];
        let Some(request) = queue.executing.remove(&ticket.id) else {
            // Still waiting: its wait was given up without a decision.
            drop(s);
            self.leave_queue(ticket);
            return;
        };
        queue.seats_in_use -= SEATS;
        // The queue's next dispatch moves by what the request took beyond (or short of)
        // the estimate.
        let served = request.started.map_or(Duration::ZERO, |(at, _)| now - at);
        let estimate = seats_times(SEATS as f64, ESTIMATED_SERVICE);
        let actual = seats_times(SEATS as f64, served);
        queue.next_dispatch_r = (queue.next_dispatch_r + actual).saturating_sub(estimate);
        s.executing -= 1;
        s.seats_in_use -= SEATS;
        s.bound_next_dispatch(index);
        s.remove_if_excess(index);
        s.dispatch_as_much_as_possible();
    }

    /// Whether nothing waits or executes.
    pub fn is_idle(&self) -> bool {
        let s = self.lock();
        s.waiting == 0 && s.executing == 0
    }

    pub fn totals(&self) -> Totals {
        let s = self.lock();
        Totals {
            waiting: s.waiting,
            executing: s.executing,
            seats_in_use: s.seats_in_use,
            dispatched: s.dispatched,
            rejected: s.rejected,
            timed_out: s.timed_out,
            cancelled: s.cancelled,
            active_queues: s.queues.iter().filter(|q| !q.waiting.is_empty()).count(),
        }
    }

    pub fn queues(&self) -> Vec<QueueDump> {
        let s = self.lock();
        s.queues
            .iter()
            .map(|q| QueueDump {
                waiting: q.waiting.len(),
                executing: q.executing.len(),
                seats_in_use: q.seats_in_use,
                next_dispatch_r: q.next_dispatch_r,
                waiting_work: q.waiting_work(),
            })
            .collect()
    }

    /// Every request, as kube's dump lists them: each queue's waiting ones in order, then
    /// its executing ones, then those executing without a queue.
    pub fn requests(&self) -> Vec<RequestDump> {
        let s = self.lock();
        let dump = |queue: i64, index: i64, r: &Request| RequestDump {
            queue,
            index,
            arrival: r.arrival,
            started: r.started.map(|(_, wall)| wall),
            described: r.described.clone(),
        };
        let mut out = Vec::new();
        for (iq, q) in s.queues.iter().enumerate() {
            for (ir, r) in q.waiting.iter().enumerate() {
                out.push(dump(iq as i64, ir as i64, r));
            }
            for r in q.executing.values() {
                out.push(dump(iq as i64, -1, r));
            }
        }
        for r in s.queueless.values() {
            out.push(dump(-1, -1, r));
        }
        out
    }

    /// The virtual clock's reading (tests).
    #[cfg(test)]
    fn current_r(&self) -> SeatSeconds {
        self.lock().current_r
    }
}

impl State {
    /// Advances R for the time since it was last read, at the rate the busy queues were
    /// served: each gets an equal share of the seats in use or wanted, at most the limit.
    fn sync_time(&mut self, now: Instant, wall: SystemTime) {
        let elapsed = now.saturating_duration_since(self.last_real);
        self.last_real = now;
        self.last_wall = wall;
        let mut active = 0usize;
        let mut wanted = 0usize;
        for q in &self.queues {
            wanted += q.seats_in_use + q.waiting.len() * SEATS;
            if !q.is_empty() {
                active += 1;
            }
        }
        if active == 0 {
            return;
        }
        let rate = wanted.min(self.limit) as f64 / active as f64;
        self.current_r = self.current_r.saturating_add(seats_times(rate, elapsed));
    }

    fn queue_index(&self, id: u64) -> Option<usize> {
        self.queues.iter().position(|q| q.id == id)
    }

    /// kube's canAccommodateSeats: an exempt level always; a request wider than the limit
    /// only into an idle level.
    fn can_accommodate(&self, seats: usize) -> bool {
        match self.queuing {
            Queuing::Exempt => true,
            _ if seats > self.limit => self.executing == 0,
            _ => self.seats_in_use + seats <= self.limit,
        }
    }

    /// The queue of the flow's hand with the least waiting work, the hand visited from a
    /// rotating start so that ties spread.
    fn shuffle_shard(&mut self, hash: u64) -> usize {
        let hand = match &self.dealer {
            Some(d) => d.deal(hash),
            None => vec![0],
        };
        let offset = self.enqueues % hand.len();
        self.enqueues += 1;
        let mut best = hand[offset];
        let mut least = SeatSeconds::MAX;
        for i in 0..hand.len() {
            let index = hand[(offset + i) % hand.len()];
            let work = self.queues[index].waiting_work();
            if work < least {
                least = work;
                best = index;
            }
        }
        best
    }

    /// kube's anti-windup: a queue's next dispatch never precedes the arrival of its oldest
    /// waiting request in the virtual world.
    fn bound_next_dispatch(&mut self, index: usize) {
        let queue = &mut self.queues[index];
        if let Some(oldest) = queue.waiting.front() {
            if queue.next_dispatch_r < oldest.arrival_r {
                queue.next_dispatch_r = oldest.arrival_r;
            }
        }
    }

    fn dispatch_as_much_as_possible(&mut self) {
        while self.waiting > 0 && self.seats_in_use < self.limit && self.dispatch_one() {}
    }

    /// Dispatches the oldest request of the queue whose virtual finish time is earliest
    /// (visited round robin from after the last queue served, the first of equals wins).
    fn dispatch_one(&mut self) -> bool {
        let n = self.queues.len();
        let mut best: Option<(usize, SeatSeconds)> = None;
        for _ in 0..n {
            self.robin = (self.robin + 1) % n;
            let q = &self.queues[self.robin];
            if q.waiting.is_empty() {
                continue;
            }
            let finish = q.next_dispatch_r + request_work();
            if best.is_none_or(|(_, f)| finish < f) {
                best = Some((self.robin, finish));
            }
        }
        let Some((index, _)) = best else {
            return false;
        };
        if !self.can_accommodate(SEATS) {
            return false;
        }
        self.robin = index;
        let Some(mut request) = self.queues[index].waiting.pop_front() else {
            return false;
        };
        self.waiting -= 1;
        let told = request
            .dispatched
            .take()
            .is_some_and(|tx| tx.try_send(()).is_ok());
        if told {
            request.started = Some((self.last_real, self.last_wall));
            self.executing += 1;
            self.seats_in_use += SEATS;
            let queue = &mut self.queues[index];
            queue.seats_in_use += SEATS;
            queue.next_dispatch_r += request_work();
            queue.executing.insert(request.id, request);
        }
        self.bound_next_dispatch(index);
        true
    }

    /// Removes an empty queue beyond the configured number.
    fn remove_if_excess(&mut self, index: usize) {
        let desired = match self.queuing {
            Queuing::Queue { queues, .. } => queues,
            _ => return,
        };
        if self.queues.len() > desired && self.queues[index].is_empty() {
            self.queues.remove(index);
            if self.robin >= index {
                self.robin = self.robin.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests;
