use super::*;

/// A clock the test moves.
struct FakeClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl FakeClock {
    fn new() -> Arc<FakeClock> {
        Arc::new(FakeClock {
            start: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    fn advance(&self, d: Duration) {
        *self.offset.lock().expect("clock") += d;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.start + *self.offset.lock().expect("clock")
    }
    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(1_700_000_000)
            + *self.offset.lock().expect("clock")
    }
}

fn flow(name: &str) -> Described {
    Described {
        flow_schema: "fs".into(),
        distinguisher: name.into(),
        ..Default::default()
    }
}

fn queue(queues: usize, hand_size: usize, queue_length_limit: usize) -> Queuing {
    Queuing::Queue {
        queues,
        hand_size,
        queue_length_limit,
    }
}

#[test]
fn exempt_never_waits_and_reject_rejects_at_its_limit() {
    let clock = FakeClock::new();
    let exempt = QueueSet::new(clock.clone(), Queuing::Exempt, 0);
    let tickets: Vec<Ticket> = (0..5)
        .map(|_| exempt.start(0, flow("admin")).expect("exempt"))
        .collect();
    assert!(tickets.iter().all(|t| !t.queued() && t.is_dispatched()));
    assert_eq!(exempt.totals().executing, 5);
    assert_eq!(exempt.requests().len(), 5);
    assert!(exempt
        .requests()
        .iter()
        .all(|r| r.queue == -1 && r.index == -1));

    let reject = QueueSet::new(clock, Queuing::Reject, 1);
    let first = reject.start(0, flow("a")).expect("a free seat");
    assert!(reject.start(0, flow("b")).is_none(), "at its limit");
    reject.finish(&first);
    assert!(reject.is_idle());
    let third = reject.start(0, flow("c")).expect("the seat again");
    assert!(third.is_dispatched());
    let t = reject.totals();
    assert_eq!((t.rejected, t.executing), (1, 1));
}

#[test]
fn a_full_queue_rejects_while_every_seat_is_taken() {
    let qs = QueueSet::new(FakeClock::new(), queue(1, 1, 2), 1);
    let running = qs.start(7, flow("a")).expect("a seat");
    assert!(running.is_dispatched(), "a free seat dispatches at once");
    let w1 = qs.start(7, flow("a")).expect("queued");
    let w2 = qs.start(7, flow("a")).expect("queued");
    assert!(!w1.is_dispatched() && !w2.is_dispatched());
    assert!(qs.start(7, flow("a")).is_none(), "the queue is full");
    assert_eq!(qs.totals().rejected, 1);
    assert_eq!(qs.totals().waiting, 2);
    // A seat freed goes to the oldest waiting request.
    qs.finish(&running);
    assert!(w1.is_dispatched() && !w2.is_dispatched());
    let after = qs.start(7, flow("a")).expect("room in the queue again");
    assert!(!after.is_dispatched());
}

#[test]
fn a_new_flow_overtakes_a_flooding_flow() {
    let clock = FakeClock::new();
    // One seat, one queue per flow (hand of one): hashes 1 and 2 are queues 1 and 2.
    let qs = QueueSet::new(clock.clone(), queue(64, 1, 50), 1);
    let mut flood: Vec<Ticket> = (0..10)
        .map(|_| qs.start(1, flow("flooder")).expect("queued"))
        .collect();
    let agent = qs.start(2, flow("agent")).expect("queued");
    assert!(flood[0].is_dispatched());
    assert!(!agent.is_dispatched());
    clock.advance(Duration::from_millis(10));
    qs.finish(&flood.remove(0));
    assert!(
        agent.is_dispatched(),
        "the agent's queue finishes first in virtual time"
    );
    assert!(!flood[0].is_dispatched());
    clock.advance(Duration::from_millis(10));
    qs.finish(&agent);
    assert!(flood[0].is_dispatched(), "then the flood goes on");
    let dump = qs.requests();
    assert_eq!(dump[0].queue, 1, "{dump:?}");
    assert_eq!(dump[0].index, 0);
    assert_eq!(dump.iter().filter(|r| r.index == -1).count(), 1);
}

#[test]
fn a_flow_fills_the_shortest_queues_of_its_hand() {
    let qs = QueueSet::new(FakeClock::new(), queue(16, 4, 50), 1);
    let _running = qs.start(99, flow("a")).expect("a seat");
    let _waiting: Vec<Ticket> = (0..8)
        .map(|_| qs.start(99, flow("a")).expect("queued"))
        .collect();
    let hand = Dealer::new(16, 4).expect("dealer").deal(99);
    let queues = qs.queues();
    let lengths: Vec<usize> = hand.iter().map(|i| queues[*i].waiting).collect();
    assert_eq!(lengths, [2, 2, 2, 2], "{queues:?}");
    assert_eq!(queues.iter().map(|q| q.waiting).sum::<usize>(), 8);
    assert_eq!(qs.totals().active_queues, 4);
}

#[test]
fn a_wait_ends_at_its_deadline() {
    let clock = FakeClock::new();
    let qs = QueueSet::new(clock.clone(), queue(4, 1, 10), 1);
    let running = qs.start(0, flow("a")).expect("a seat");
    let waiting = qs.start(0, flow("a")).expect("queued");
    let ok = smol::block_on(qs.wait(&waiting, Instant::now() + Duration::from_millis(20)));
    assert!(!ok, "no seat came free in time");
    let t = qs.totals();
    assert_eq!((t.waiting, t.rejected, t.cancelled), (0, 1, 1));
    // Dispatched before the deadline: the wait says execute.
    let next = qs.start(0, flow("a")).expect("queued");
    qs.finish(&running);
    assert!(smol::block_on(
        qs.wait(&next, Instant::now() + Duration::from_secs(5))
    ));
    qs.note_executed();
    qs.finish(&next);
    assert!(qs.is_idle());
    assert_eq!(qs.totals().dispatched, 1);
}

#[test]
fn virtual_time_advances_with_busy_queues() {
    let clock = FakeClock::new();
    let qs = QueueSet::new(clock.clone(), queue(8, 1, 10), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(qs.current_r(), 0, "idle: R stands still");
    let a = qs.start(1, flow("a")).expect("a seat");
    let _b = qs.start(2, flow("b")).expect("a seat");
    clock.advance(Duration::from_secs(1));
    // Two busy queues sharing two seats: one seat-second each per second.
    assert_eq!(format_seat_seconds(qs.current_r()), "1.00000000ss");
    // Served for a second where 3 ms was reckoned: its queue's next dispatch moves by the
    // difference.
    let before = qs.queues()[1].next_dispatch_r;
    qs.finish(&a);
    assert_eq!(
        qs.queues()[1].next_dispatch_r,
        before + seats_times(1.0, Duration::from_secs(1)) - seats_times(1.0, ESTIMATED_SERVICE)
    );
    assert_eq!(
        format_seat_seconds(seats_times(1.0, ESTIMATED_SERVICE)),
        "0.00300000ss"
    );
}

#[test]
fn reconfiguring_adds_seats_and_queues() {
    let qs = QueueSet::new(FakeClock::new(), queue(2, 1, 10), 1);
    let _first = qs.start(0, flow("a")).expect("a seat");
    let second = qs.start(1, flow("b")).expect("queued");
    assert!(!second.is_dispatched());
    qs.configure(queue(4, 2, 10), 2);
    assert!(
        second.is_dispatched(),
        "the new seat goes to the waiting request"
    );
    assert_eq!(qs.queues().len(), 4);
    // Fewer queues: the excess ones leave once empty.
    qs.configure(queue(1, 1, 10), 2);
    qs.finish(&second);
    assert!(qs.queues().len() < 4);
}
