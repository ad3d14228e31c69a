//! The scheduler: binds each pending pod to a node through the `binding` write.
//!
//! It runs inside `skiff server` as a client of the shared informer cache, on its own thread
//! (deciding is CPU work and must not hold up the executor), and writes only through the
//! registry. Its own accounting ([`cache::ClusterState`]) is updated incrementally from
//! informer changes; a pod is accounted ("assumed") as soon as it is decided, so decisions in
//! one batch see each other, and the binds of a batch are issued concurrently so the store's
//! group commit turns them into few fsyncs.
//!
//! A pod that fits nowhere gets PodScheduled=False (reason Unschedulable, kube-scheduler's
//! message) and a FailedScheduling event, and waits in an unschedulable set that is queued
//! again when a node is added or changes in a way a filter looks at, or when a bound pod is
//! deleted or finishes — never in a loop, at most once per [`FLUSH_MIN_INTERVAL`], each pod no
//! sooner than its own back-off (1 s doubling to 10 s, as kube-scheduler's). Every input of
//! the filters arrives through the informer, so a retry against an unchanged cluster would
//! give the same answer: unlike kube-scheduler (whose out-of-tree plugins can miss events, so
//! it retries every pod every 5 minutes anyway), nothing is retried while nothing changes, and
//! a site whose pods fit nowhere writes nothing to its SD card while it idles. A pod that keeps
//! failing renews its event and condition at most every [`REPORT_FAILURE_EVERY`], so a backlog
//! of thousands of pods does not turn each retry into thousands of writes.
//!
//! ```text
//! scheduler::start(&machinery::Context)          // spawns the scheduler thread
//! scheduler::find_node(&ClusterState, &Pod, &PodFacts, &mut Cursor) -> Result<String, FitError>
//! ```

pub mod cache;
pub mod filter;
pub mod preempt;
pub mod score;
pub mod volumes;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::core::{Pod, PodCondition, PodStatus};
use api::meta::Time;
use api::object::AnyObject;
use api::Kind;
use async_channel::{Receiver, Sender};

use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::{Change, Informers, Key, Packed};
use crate::machinery::Context;
use crate::registry::{Part, Registry};

use cache::{key_of, occupies_node, ClusterState, NodeChange, PodFacts};
use filter::{AffinityPlan, Reason};
use volumes::{VolumeCheck, VolumeLister};

/// The `spec.schedulerName` this scheduler serves (also the default).
pub const SCHEDULER_NAME: &str = "default-scheduler";
/// Binds in flight at once; decisions wait beyond this.
pub const MAX_IN_FLIGHT: usize = 4096;
/// Pods decided between two looks at the informer's changes.
pub const BATCH: usize = 1024;
/// The first back-off of a pod that fit nowhere, doubled with each further failure.
pub const RETRY_BACKOFF_START: Duration = Duration::from_secs(1);
/// The longest back-off of a pod that fits nowhere.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// The shortest time between two retries of the unschedulable pods.
pub const FLUSH_MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How often a pod that keeps failing has its FailedScheduling event and condition message
/// renewed (the first failure is always reported at once).
pub const REPORT_FAILURE_EVERY: Duration = Duration::from_secs(10);
/// First retry delay after a failed bind; doubles up to [`MAX_BACKOFF`].
const BASE_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// kube-scheduler's floor for the nodes examined per decision.
const MIN_FEASIBLE_NODES: usize = 100;

/// Why no node can take a pod: how many nodes gave each reason.
#[derive(Clone, Debug, PartialEq)]
pub struct FitError {
    pub nodes: usize,
    pub reasons: HashMap<Reason, usize>,
    /// Why the pod fits no node whatever the node (kube-scheduler's PreFilter message, such
    /// as a missing claim).
    pub pre_filter: Option<String>,
}

impl FitError {
    /// `0/3 nodes are available: ...` (the PodScheduled message and the event).
    pub fn message(&self) -> String {
        match &self.pre_filter {
            Some(m) if self.nodes > 0 => format!("0/{} nodes are available: {m}.", self.nodes),
            _ => filter::unschedulable_message(self.nodes, &self.reasons),
        }
    }
}

/// Where the next search starts and whose turn it is among tied nodes.
#[derive(Clone, Debug, Default)]
pub struct Cursor {
    pub next_start: usize,
    pub turn: usize,
}

/// How many feasible nodes to find before scoring (kube-scheduler's adaptive
/// percentageOfNodesToScore: all of up to 100 nodes, then 50% falling to 5% as clusters grow,
/// never fewer than 100); the search start rotates so every node gets its turn.
pub fn nodes_to_find(total: usize) -> usize {
    if total <= MIN_FEASIBLE_NODES {
        return total;
    }
    let percent = 50usize.saturating_sub(total / 125).max(5);
    (total * percent / 100).max(MIN_FEASIBLE_NODES)
}

/// Picks the node for `pod`: filters (in order), then scores the feasible nodes and breaks
/// ties round-robin.
pub fn find_node(
    state: &ClusterState,
    pod: &Pod,
    facts: &PodFacts,
    cursor: &mut Cursor,
) -> Result<String, FitError> {
    find_node_with_volumes(state, pod, facts, &VolumeCheck::default(), cursor)
}

/// [`find_node`] for a pod with claims: `volumes` is its [`VolumeCheck`].
pub fn find_node_with_volumes(
    state: &ClusterState,
    pod: &Pod,
    facts: &PodFacts,
    volumes: &VolumeCheck,
    cursor: &mut Cursor,
) -> Result<String, FitError> {
    let nodes = state.nodes();
    let total = nodes.len();
    let mut reasons: HashMap<Reason, usize> = HashMap::new();
    if total == 0 {
        return Err(FitError {
            nodes: 0,
            reasons,
            pre_filter: None,
        });
    }
    let want = nodes_to_find(total);
    let plan = AffinityPlan::build(pod, state);
    let start = cursor.next_start % total;
    let mut feasible = Vec::with_capacity(want.min(total));
    let mut examined = 0;
    let key = key_of(&pod.metadata);
    for i in 0..total {
        let info = &nodes[(start + i) % total];
        examined += 1;
        // Room that preempting pods of at least this priority wait for is not free.
        let held = state.with_nominated(info, &key, facts.priority);
        let fits =
            filter::filter(pod, facts, &plan, held.as_ref().unwrap_or(info)).and_then(|()| {
                if volumes.is_empty() {
                    return Ok(());
                }
                volumes.check(&info.node).map_err(|r| vec![r])
            });
        match fits {
            Ok(()) => {
                feasible.push(info);
                if feasible.len() >= want {
                    break;
                }
            }
            Err(rs) => {
                for r in rs {
                    *reasons.entry(r).or_insert(0) += 1;
                }
            }
        }
    }
    cursor.next_start = (start + examined) % total;
    if feasible.is_empty() {
        return Err(FitError {
            nodes: total,
            reasons,
            pre_filter: None,
        });
    }
    let scores = score::score_nodes(pod, facts, &feasible);
    let best = score::select(&scores, &mut cursor.turn).unwrap_or(0);
    Ok(feasible[best].name().to_string())
}

/// The scheduler's view of claims, volumes and classes: the shared informer cache.
struct CacheLister<'a>(&'a crate::machinery::informer::Cache);

impl VolumeLister for CacheLister<'_> {
    fn claim(&self, ns: &str, name: &str) -> Option<api::storage::PersistentVolumeClaim> {
        self.0.get(ns, name)
    }
    fn volume(&self, name: &str) -> Option<api::storage::PersistentVolume> {
        self.0.get("", name)
    }
    fn class(&self, name: &str) -> Option<api::storage::StorageClass> {
        self.0.get("", name)
    }
    fn volumes(&self) -> Vec<api::storage::PersistentVolume> {
        self.0.list(None)
    }
    fn pods(&self, ns: &str) -> Vec<Pod> {
        self.0.list(Some(ns))
    }
}

/// Whether this scheduler should place `pod`.
pub fn wants_scheduling(pod: &Pod) -> bool {
    pod.spec.node_name.as_deref().is_none_or(str::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
        && pod.spec.scheduling_gates.is_empty()
        && pod
            .spec
            .scheduler_name
            .as_deref()
            .is_none_or(|s| s.is_empty() || s == SCHEDULER_NAME)
        && !matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

fn has_required_pod_affinity(pod: &Pod) -> bool {
    pod.spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_affinity.as_ref())
        .is_some_and(|a| {
            !a.required_during_scheduling_ignored_during_execution
                .is_empty()
        })
}

/// Sets the PodScheduled condition; the transition time moves only when the status does.
pub fn set_scheduled_condition(
    status: &mut PodStatus,
    value: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    let now = Some(Time::now());
    let fresh = PodCondition {
        type_: "PodScheduled".into(),
        status: value.into(),
        last_transition_time: now,
        reason: reason.map(Into::into),
        message: message.map(Into::into),
        ..Default::default()
    };
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == "PodScheduled")
    {
        Some(c) => {
            let transition = if c.status == value {
                c.last_transition_time
            } else {
                now
            };
            *c = PodCondition {
                last_transition_time: transition,
                ..fresh
            };
        }
        None => status.conditions.push(fresh),
    }
}

/// Whether the pod already says it is unschedulable (whatever the message).
fn shows_unschedulable(pod: &Pod) -> bool {
    pod.status
        .condition("PodScheduled")
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

/// Whether the pod already shows this PodScheduled=False reason and message.
fn shows_failure(pod: &Pod, message: &str) -> bool {
    pod.status.condition("PodScheduled").is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    })
}

enum Msg {
    Bound {
        key: Key,
        /// The uid of the pod that was bound.
        uid: String,
        node: String,
        result: Result<(), ApiError>,
    },
    Requeue(Key),
}

struct Scheduler {
    registry: Registry,
    informers: Arc<Informers>,
    recorder: Recorder,
    state: ClusterState,
    /// Unbound pods this scheduler is responsible for, as the informer last showed them
    /// (packed, shared with the informer cache; decoded when their turn comes).
    pending: HashMap<Key, Packed>,
    active: VecDeque<Key>,
    queued: HashSet<Key>,
    unschedulable: HashSet<Key>,
    /// Unschedulable pods with required pod affinity: a newly placed pod may be the one
    /// they wait for.
    affinity_waiting: HashSet<Key>,
    binding: HashSet<Key>,
    failures: HashMap<Key, u32>,
    cursor: Cursor,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    last_flush: Instant,
    /// A flush of the unschedulable pods is due (see [`Scheduler::request_flush`]).
    flush_wanted: bool,
    /// Pods that fit nowhere at their last try: when to retry them and when their failure
    /// was last reported.
    failing: HashMap<Key, Failing>,
}

/// What the scheduler remembers of a pod that fit nowhere.
struct Failing {
    /// Not retried before this instant.
    retry_at: Instant,
    /// The current back-off: [`RETRY_BACKOFF_START`] doubling to [`RETRY_BACKOFF_MAX`].
    backoff: Duration,
    /// When its event and PodScheduled condition were last written.
    reported_at: Instant,
}

/// Starts the scheduler on its own thread.
pub fn start(ctx: &Context) {
    let changes = ctx.informers.subscribe(&[
        Kind::Node,
        Kind::Pod,
        Kind::PersistentVolumeClaim,
        Kind::PersistentVolume,
        Kind::StorageClass,
    ]);
    let (tx, rx) = async_channel::unbounded();
    let scheduler = Scheduler {
        // Its writes are kube-scheduler's in managedFields, as in Kubernetes.
        registry: ctx.registry.with_manager("kube-scheduler"),
        informers: ctx.informers.clone(),
        recorder: Recorder::start(ctx.registry.with_manager("kube-scheduler"), SCHEDULER_NAME),
        state: ClusterState::default(),
        pending: HashMap::new(),
        active: VecDeque::new(),
        queued: HashSet::new(),
        unschedulable: HashSet::new(),
        affinity_waiting: HashSet::new(),
        binding: HashSet::new(),
        failures: HashMap::new(),
        cursor: Cursor::default(),
        tx,
        rx,
        last_flush: Instant::now(),
        flush_wanted: false,
        failing: HashMap::new(),
    };
    let spawned = std::thread::Builder::new()
        .name("skiff-scheduler".into())
        .spawn(move || smol::block_on(scheduler.run(changes)));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the scheduler thread");
    }
}

enum Wake {
    Change(Change),
    Msg(Msg),
    Timer,
    Closed,
}

impl Scheduler {
    async fn run(mut self, changes: Receiver<Change>) {
        self.rebuild();
        tracing::info!(
            nodes = self.state.len(),
            pending = self.pending.len(),
            "scheduler started"
        );
        loop {
            if self.active.is_empty() || self.binding.len() >= MAX_IN_FLIGHT {
                // Without a flush wanted nothing is due: the loop waits for a change.
                let wait = self
                    .flush_wanted
                    .then(|| FLUSH_MIN_INTERVAL.saturating_sub(self.last_flush.elapsed()));
                let wake = futures_lite::future::or(
                    async {
                        match changes.recv().await {
                            Ok(c) => Wake::Change(c),
                            Err(_) => Wake::Closed,
                        }
                    },
                    futures_lite::future::or(
                        async {
                            match self.rx.recv().await {
                                Ok(m) => Wake::Msg(m),
                                Err(_) => Wake::Closed,
                            }
                        },
                        async {
                            match wait {
                                Some(wait) => smol::Timer::after(wait).await,
                                None => smol::Timer::never().await,
                            };
                            Wake::Timer
                        },
                    ),
                )
                .await;
                match wake {
                    Wake::Change(c) => self.on_change(c),
                    Wake::Msg(m) => self.on_msg(m),
                    Wake::Timer => {}
                    Wake::Closed => return,
                }
            }
            while let Ok(c) = changes.try_recv() {
                self.on_change(c);
            }
            while let Ok(m) = self.rx.try_recv() {
                self.on_msg(m);
            }
            if self.flush_wanted && self.last_flush.elapsed() >= FLUSH_MIN_INTERVAL {
                self.flush_unschedulable();
            }
            self.schedule_batch();
            // Let the binds' tasks and the informer run between batches.
            smol::future::yield_now().await;
        }
    }

    /// Rebuilds everything from the informer cache (at start and after a re-list), keeping
    /// the binds in flight accounted.
    fn rebuild(&mut self) {
        let in_flight: Vec<(Key, Packed, String)> = self
            .binding
            .iter()
            .filter_map(|k| {
                self.state
                    .pod(k)
                    .map(|p| (k.clone(), p.packed.clone(), p.node.clone()))
            })
            .collect();
        // Decoded outside the lock: the informer's task waits for it.
        let (nodes, pods): (Vec<Packed>, Vec<(Key, Packed)>) = {
            let cache = self.informers.cache().read();
            (
                cache.iter_packed(Kind::Node, None).cloned().collect(),
                cache
                    .entries(Kind::Pod, None)
                    .map(|(k, p)| (k.clone(), p.clone()))
                    .collect(),
            )
        };
        self.state.clear();
        self.pending.clear();
        self.active.clear();
        self.queued.clear();
        self.unschedulable.clear();
        for n in nodes.iter().filter_map(Packed::unpack) {
            self.state.node_changed(&n, false);
        }
        for (key, packed) in pods {
            if let Some(pod) = packed.unpack_as::<Pod>() {
                self.pod_upserted(key, &pod, packed, None);
            }
        }
        for (key, packed, node) in in_flight {
            if self.pending.contains_key(&key) {
                if let Some(pod) = packed.unpack_as::<Pod>() {
                    self.state.add_pod(key, &pod, packed, node, true);
                }
            }
        }
        let pending = &self.pending;
        self.failing.retain(|k, _| pending.contains_key(k));
    }

    fn enqueue(&mut self, key: Key) {
        if self.queued.insert(key.clone()) {
            self.active.push_back(key);
        }
    }

    /// Something changed that may let unschedulable pods fit: they are queued again at the
    /// next turn of the loop, at most once per [`FLUSH_MIN_INTERVAL`] (a thousand nodes
    /// registering one after another cause a couple of retries of the backlog, not a thousand).
    fn request_flush(&mut self) {
        self.flush_wanted = true;
    }

    /// Queues the unschedulable pods whose back-off has passed; the others stay and are
    /// looked at again at the next flush (which stays wanted while any wait).
    fn flush_unschedulable(&mut self) {
        self.last_flush = Instant::now();
        let now = Instant::now();
        let failing = &self.failing;
        let (due, later): (Vec<Key>, Vec<Key>) = self
            .unschedulable
            .drain()
            .partition(|k| failing.get(k).is_none_or(|f| f.retry_at <= now));
        self.flush_wanted = !later.is_empty();
        let waiting: HashSet<&Key> = later.iter().collect();
        self.affinity_waiting.retain(|k| waiting.contains(k));
        self.unschedulable.extend(later);
        for k in due {
            self.enqueue(k);
        }
    }

    /// A pod was placed: pods waiting for a pod to be near may fit now.
    fn retry_affinity_waiters(&mut self) {
        if self.affinity_waiting.is_empty() {
            return;
        }
        let keys: Vec<Key> = self.affinity_waiting.drain().collect();
        for k in keys {
            if self.unschedulable.remove(&k) {
                self.enqueue(k);
            }
        }
    }

    fn on_change(&mut self, change: Change) {
        match change {
            Change::Resync => self.rebuild(),
            Change::Added { key, new, packed } => self.object_changed(key, &new, packed, None),
            Change::Modified {
                key,
                old,
                new,
                packed,
            } => self.object_changed(key, &new, packed, Some(&old)),
            Change::Deleted(obj) => match obj.kind() {
                Kind::Pod => self.pod_deleted(&obj),
                Kind::Node => {
                    self.state.node_changed(&obj, true);
                }
                _ => {}
            },
        }
    }

    fn object_changed(&mut self, key: Key, obj: &AnyObject, packed: Packed, old: Option<&Packed>) {
        match obj {
            AnyObject::Pod(pod) => self.pod_upserted(key, pod, packed, old),
            AnyObject::Node(_) if self.state.node_changed(obj, false) == NodeChange::Relevant => {
                self.request_flush();
            }
            // A claim created or bound, a volume or a class added: waiting pods may fit.
            AnyObject::PersistentVolumeClaim(_)
            | AnyObject::PersistentVolume(_)
            | AnyObject::StorageClass(_) => self.request_flush(),
            _ => {}
        }
    }

    /// `key` is the informer's (shared by every map here); `old` is the pod before a
    /// modification, still packed: only a pending pod's change needs it decoded.
    fn pod_upserted(&mut self, key: Key, pod: &Pod, packed: Packed, old: Option<&Packed>) {
        if let Some(node) = occupies_node(pod) {
            self.pending.remove(&key);
            self.unschedulable.remove(&key);
            self.failing.remove(&key);
            self.state.unnominate(&key);
            if !self.state.refresh_pod(&key, pod, packed.clone()) {
                let node = node.to_string();
                // Assumed pods were announced to the waiters when decided.
                let newly_placed = self.state.pod(&key).is_none();
                self.state.add_pod(key, pod, packed, node, false);
                if newly_placed {
                    self.retry_affinity_waiters();
                }
            }
            return;
        }
        if pod.spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
            // Finished: its room is free again.
            self.pending.remove(&key);
            if self.state.remove_pod(&key).is_some() {
                self.request_flush();
            }
            return;
        }
        if self.binding.contains(&key) {
            self.pending.insert(key, packed);
            return;
        }
        if !wants_scheduling(pod) {
            self.pending.remove(&key);
            self.unschedulable.remove(&key);
            self.state.unnominate(&key);
            return;
        }
        // A pod that preempted others (before a restart, too) holds its node's room.
        match pod
            .status
            .nominated_node_name
            .as_deref()
            .filter(|n| !n.is_empty())
        {
            Some(n) if self.state.nomination(&key).is_none_or(|x| x.node != n) => {
                self.state
                    .nominate(key.clone(), n.to_string(), PodFacts::of(pod));
            }
            _ => {}
        }
        // Both as the cache keeps them (the projection), so a change to a part no filter
        // reads does not count.
        let changed = old.and_then(Packed::unpack_as::<Pod>).is_none_or(|o| {
            packed.unpack_as::<Pod>().is_none_or(|new| {
                o.metadata.uid != new.metadata.uid
                    || o.spec != new.spec
                    || o.metadata.labels != new.metadata.labels
            })
        });
        let waiting = self.unschedulable.contains(&key);
        self.pending.insert(key.clone(), packed);
        if waiting && !changed {
            // Our own status write, or another change no filter looks at.
            return;
        }
        self.unschedulable.remove(&key);
        self.enqueue(key);
    }

    fn pod_deleted(&mut self, obj: &AnyObject) {
        let key = key_of(obj.meta());
        self.state.unnominate(&key);
        self.pending.remove(&key);
        self.unschedulable.remove(&key);
        self.failures.remove(&key);
        self.failing.remove(&key);
        if self.state.remove_pod(&key).is_some() {
            self.request_flush();
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Requeue(key) => {
                if self.pending.contains_key(&key) && !self.binding.contains(&key) {
                    self.unschedulable.remove(&key);
                    self.enqueue(key);
                }
            }
            Msg::Bound {
                key,
                uid,
                node,
                result,
            } => {
                self.binding.remove(&key);
                match result {
                    Ok(()) => {
                        self.failures.remove(&key);
                    }
                    Err(e) => self.bind_failed(key, &uid, &node, e),
                }
            }
        }
    }

    fn bind_failed(&mut self, key: Key, uid: &str, node: &str, e: ApiError) {
        let still_assumed = self
            .state
            .pod(&key)
            .is_some_and(|p| p.assumed && p.meta().is_some_and(|m| m.uid == uid));
        if still_assumed {
            self.state.remove_pod(&key);
        }
        let Some(current) = self.pending.get(&key) else {
            return; // deleted or bound meanwhile
        };
        tracing::debug!(pod = %format!("{}/{}", key.0, key.1), %node, error = %e, "binding failed");
        if e.code() == 404 {
            self.pending.remove(&key);
            return;
        }
        if let Some(pod) = current.unpack_as::<Pod>() {
            self.recorder
                .warning(&pod, "FailedScheduling", format!("binding rejected: {e}"));
        }
        let n = self.failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        let delay = BASE_BACKOFF
            .saturating_mul(1u32 << (*n - 1).min(16))
            .min(MAX_BACKOFF);
        let tx = self.tx.clone();
        smol::spawn(async move {
            smol::Timer::after(delay).await;
            let _ = tx.send(Msg::Requeue(key)).await;
        })
        .detach();
    }

    fn schedule_batch(&mut self) {
        let room = MAX_IN_FLIGHT.saturating_sub(self.binding.len());
        let n = self.active.len().min(BATCH).min(room);
        for _ in 0..n {
            let Some(key) = self.active.pop_front() else {
                break;
            };
            self.queued.remove(&key);
            if self.binding.contains(&key) {
                continue;
            }
            let Some(packed) = self.pending.get(&key).cloned() else {
                continue;
            };
            let Some(pod) = packed.unpack_as::<Pod>() else {
                continue;
            };
            let pod = &pod;
            let facts = PodFacts::of(pod);
            let volumes = if pod.spec.volumes.is_empty() {
                Ok(VolumeCheck::default())
            } else {
                VolumeCheck::build(pod, &CacheLister(self.informers.cache()))
            };
            let found = match &volumes {
                Ok(v) => find_node_with_volumes(&self.state, pod, &facts, v, &mut self.cursor),
                Err(m) => Err(FitError {
                    nodes: self.state.len(),
                    reasons: HashMap::new(),
                    pre_filter: Some(m.clone()),
                }),
            };
            match found {
                Ok(node) => {
                    let select: Vec<(String, String)> = volumes
                        .as_ref()
                        .map(|v| v.delayed_claims(&node))
                        .unwrap_or_default();
                    self.state
                        .add_pod(key.clone(), pod, packed, node.clone(), true);
                    // The Scheduled event is written with the binding, in the same write.
                    let event = crate::machinery::events::normal_event(
                        pod,
                        SCHEDULER_NAME,
                        "Scheduled",
                        format!("Successfully assigned {}/{} to {node}", key.0, key.1),
                    );
                    let uid = pod.metadata.uid.clone();
                    self.binding.insert(key.clone());
                    self.retry_affinity_waiters();
                    let registry = self.registry.clone();
                    let tx = self.tx.clone();
                    smol::spawn(async move {
                        // The claims waiting for their first consumer learn its node before
                        // the pod is bound (kube-scheduler's VolumeBinding PreBind); the PV
                        // controller then binds or provisions, and the agent waits for that.
                        for (ns, claim) in select {
                            let node = node.clone();
                            let r = registry
                                .mutate::<api::storage::PersistentVolumeClaim>(
                                    &ns,
                                    &claim,
                                    Part::Main,
                                    move |c| {
                                        c.metadata.annotations.insert(
                                            api::storage::SELECTED_NODE_ANNOTATION.into(),
                                            node.clone(),
                                        );
                                        Ok(())
                                    },
                                )
                                .await;
                            if let Err(e) = r {
                                tracing::debug!(claim = %claim, error = %e, "selecting the claim's node failed");
                            }
                        }
                        let result = registry
                            .bind_recording(&key.0, &key.1, node.clone(), Some(event))
                            .await;
                        let _ = tx
                            .send(Msg::Bound {
                                key,
                                uid,
                                node,
                                result,
                            })
                            .await;
                    })
                    .detach();
                }
                Err(fit) => {
                    if has_required_pod_affinity(pod) {
                        self.affinity_waiting.insert(key.clone());
                    }
                    let now = Instant::now();
                    let previous = self.failing.get(&key);
                    let report = !shows_unschedulable(pod)
                        || previous.is_none_or(|f| f.reported_at.elapsed() >= REPORT_FAILURE_EVERY);
                    let backoff = previous.map_or(RETRY_BACKOFF_START, |f| {
                        (f.backoff * 2).min(RETRY_BACKOFF_MAX)
                    });
                    let reported_at = match previous {
                        Some(f) if !report => f.reported_at,
                        _ => now,
                    };
                    if report {
                        self.record_failure(pod, &fit);
                    }
                    self.try_preempt(&key, pod, &facts);
                    self.failing.insert(
                        key.clone(),
                        Failing {
                            retry_at: now + backoff,
                            backoff,
                            reported_at,
                        },
                    );
                    self.unschedulable.insert(key);
                }
            }
        }
    }

    /// DefaultPreemption's PostFilter for a pod that fits nowhere: if removing pods of lower
    /// priority from some node lets it fit, deletes the fewest such pods (event `Preempted`)
    /// and nominates that node for it. The pod itself is retried when they are gone.
    fn try_preempt(&mut self, key: &Key, pod: &Pod, facts: &PodFacts) {
        let mine = facts.priority;
        // Only pods of lower priority are decoded (usually none are).
        let lower: Vec<(String, preempt::Victim)> = self
            .state
            .pods()
            .filter(|(_, b)| b.facts.priority < mine)
            .filter_map(|(k, b)| {
                let p = b.packed.unpack_as::<Pod>()?;
                Some((
                    b.node.clone(),
                    preempt::Victim {
                        key: k.clone(),
                        pod: p,
                        facts: b.facts.clone(),
                    },
                ))
            })
            .collect();
        if lower.is_empty() {
            return;
        }
        let on_node = |n: &str| {
            lower
                .iter()
                .filter(|(node, _)| node == n)
                .map(|(_, v)| v.pod.clone())
                .collect()
        };
        if !preempt::eligible(pod, &self.state, on_node) {
            return;
        }
        let pdbs: Vec<api::policy::PodDisruptionBudget> = self.informers.cache().list(None);
        let Some(c) = preempt::find_candidate(&self.state, pod, facts, lower, &pdbs) else {
            return;
        };
        self.state
            .nominate(key.clone(), c.node.clone(), facts.clone());
        let (registry, recorder) = (self.registry.clone(), self.recorder.clone());
        let (ns, name, uid) = (
            pod.metadata.namespace().to_string(),
            pod.metadata.name.clone(),
            pod.metadata.uid.clone(),
        );
        smol::spawn(async move {
            for v in c.victims {
                if v.pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                preempt_victim(&registry, &recorder, &v.pod, &uid, &c.node).await;
            }
            let node = c.node.clone();
            let r = registry
                .mutate::<Pod>(&ns, &name, Part::Status, move |p| {
                    if p.metadata.uid == uid && wants_scheduling(p) {
                        p.status.nominated_node_name = Some(node.clone());
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = r {
                if e.code() != 404 {
                    tracing::debug!(pod = %name, error = %e, "writing nominatedNodeName failed");
                }
            }
        })
        .detach();
    }

    fn record_failure(&self, pod: &Pod, fit: &FitError) {
        let message = fit.message();
        self.recorder
            .warning(pod, "FailedScheduling", message.clone());
        if shows_failure(pod, &message) {
            return;
        }
        let registry = self.registry.clone();
        let (ns, name, uid) = (
            pod.metadata.namespace().to_string(),
            pod.metadata.name.clone(),
            pod.metadata.uid.clone(),
        );
        smol::spawn(async move {
            let r = registry
                .mutate::<Pod>(&ns, &name, Part::Status, move |p| {
                    if p.metadata.uid == uid && wants_scheduling(p) {
                        set_scheduled_condition(
                            &mut p.status,
                            "False",
                            Some("Unschedulable"),
                            Some(&message),
                        );
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = r {
                if e.code() != 404 {
                    tracing::debug!(pod = %name, error = %e, "writing PodScheduled failed");
                }
            }
        })
        .detach();
    }
}

/// Evicts one preemption victim as kube-scheduler does: a DisruptionTarget condition, an
/// event naming the preemptor, then the deletion (with the victim's grace period).
async fn preempt_victim(
    registry: &Registry,
    recorder: &Recorder,
    victim: &Pod,
    by: &str,
    node: &str,
) {
    let (ns, name, uid) = (
        victim.metadata.namespace().to_string(),
        victim.metadata.name.clone(),
        victim.metadata.uid.clone(),
    );
    let target_uid = uid.clone();
    let _ = registry
        .mutate::<Pod>(&ns, &name, Part::Status, move |p| {
            if p.metadata.uid == target_uid && p.status.condition("DisruptionTarget").is_none() {
                p.status.conditions.push(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time::now()),
                    reason: Some("PreemptionByScheduler".into()),
                    message: Some(format!(
                        "{SCHEDULER_NAME}: preempting to accommodate a higher priority pod"
                    )),
                    ..Default::default()
                });
            }
            Ok(())
        })
        .await;
    recorder.normal(
        victim,
        "Preempted",
        format!("Preempted by pod {by} on node {node}"),
    );
    let opts = api::meta::DeleteOptions {
        preconditions: Some(api::meta::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    if let Err(e) = registry.delete::<Pod>(&ns, &name, opts).await {
        if e.code() != 404 {
            tracing::warn!(pod = %name, error = %e, "deleting a preemption victim failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filter::tests::{node, pod};
    use api::object::Resource;

    fn state(nodes: &[api::core::Node]) -> ClusterState {
        let mut s = ClusterState::default();
        for n in nodes {
            s.upsert_node(Arc::new(n.clone()));
        }
        s
    }

    /// Places `p` as the scheduler loop does: decide, then assume.
    fn place(s: &mut ClusterState, c: &mut Cursor, p: &Pod) -> Result<String, FitError> {
        let f = PodFacts::of(p);
        let node = find_node(s, p, &f, c)?;
        s.add_pod(
            key_of(&p.metadata),
            p,
            Packed::pack(&p.clone().into_any()),
            node.clone(),
            true,
        );
        Ok(node)
    }

    #[test]
    fn equal_nodes_fill_evenly_and_assumed_pods_count() {
        let mut s = state(&[
            node("a", "4", "8Gi"),
            node("b", "4", "8Gi"),
            node("c", "4", "8Gi"),
        ]);
        let mut c = Cursor::default();
        let mut per_node: HashMap<String, usize> = HashMap::new();
        for i in 0..30 {
            let n = place(&mut s, &mut c, &pod(&format!("p{i}"), "", "")).expect("fits");
            *per_node.entry(n).or_default() += 1;
        }
        assert_eq!(per_node.values().copied().collect::<Vec<_>>(), [10, 10, 10]);

        // Assumed requests fill the nodes: three 3-cpu pods, then nothing fits.
        let mut s = state(&[
            node("a", "4", "8Gi"),
            node("b", "4", "8Gi"),
            node("c", "4", "8Gi"),
        ]);
        let mut placed = HashSet::new();
        for i in 0..3 {
            placed.insert(place(&mut s, &mut c, &pod(&format!("big{i}"), "3", "")).expect("fits"));
        }
        assert_eq!(placed.len(), 3);
        let err = place(&mut s, &mut c, &pod("big3", "3", "")).expect_err("no room");
        assert_eq!(
            err.message(),
            "0/3 nodes are available: 3 Insufficient cpu."
        );
    }

    #[test]
    fn mixed_reasons_and_no_nodes() {
        let mut tainted = node("t", "8", "8Gi");
        tainted.spec.taints.push(api::core::Taint {
            key: filter::TAINT_UNREACHABLE.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        tainted.status.conditions[0].status = "Unknown".into();
        let s = state(&[node("a", "8", "1Gi"), node("b", "8", "1Gi"), tainted]);
        let p = pod("p", "1", "2Gi");
        let err = find_node(&s, &p, &PodFacts::of(&p), &mut Cursor::default()).expect_err("no fit");
        assert_eq!(
            err.message(),
            "0/3 nodes are available: 2 Insufficient memory, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
        );
        let empty = ClusterState::default();
        let err =
            find_node(&empty, &p, &PodFacts::of(&p), &mut Cursor::default()).expect_err("no nodes");
        assert_eq!(err.message(), "no nodes available to schedule pods");
    }

    #[test]
    fn large_clusters_examine_a_rotating_share() {
        assert_eq!(nodes_to_find(3), 3);
        assert_eq!(nodes_to_find(100), 100);
        assert_eq!(nodes_to_find(1000), 420);
        assert_eq!(nodes_to_find(5000), 500);
        assert_eq!(nodes_to_find(20000), 1000);
        assert_eq!(nodes_to_find(150), 100);
        let nodes: Vec<_> = (0..300)
            .map(|i| node(&format!("n{i:03}"), "4", "8Gi"))
            .collect();
        let mut s = state(&nodes);
        let mut c = Cursor::default();
        let mut per_node: HashMap<String, usize> = HashMap::new();
        for i in 0..600 {
            let n = place(&mut s, &mut c, &pod(&format!("p{i}"), "", "")).expect("fits");
            *per_node.entry(n).or_default() += 1;
        }
        // Each decision sees 141 of the 300 nodes, from a start that moves on: the load
        // stays close to even.
        assert_eq!(per_node.len(), 300);
        assert!(
            per_node.values().all(|&n| (1..=3).contains(&n)),
            "{per_node:?}"
        );
    }

    #[test]
    fn who_is_scheduled_and_condition_transitions() {
        let mut p = pod("p", "", "");
        assert!(wants_scheduling(&p));
        p.spec.scheduler_name = Some("other".into());
        assert!(!wants_scheduling(&p));
        p.spec.scheduler_name = Some(SCHEDULER_NAME.into());
        p.spec.scheduling_gates.push(Default::default());
        assert!(!wants_scheduling(&p));
        p.spec.scheduling_gates.clear();
        p.metadata.deletion_timestamp = Some(Time::now());
        assert!(!wants_scheduling(&p));
        p.metadata.deletion_timestamp = None;
        p.spec.node_name = Some("a".into());
        assert!(!wants_scheduling(&p));

        let mut st = PodStatus::default();
        set_scheduled_condition(&mut st, "False", Some("Unschedulable"), Some("m1"));
        let first = st.conditions[0].last_transition_time;
        set_scheduled_condition(&mut st, "False", Some("Unschedulable"), Some("m2"));
        assert_eq!(st.conditions.len(), 1);
        assert_eq!(st.conditions[0].last_transition_time, first);
        assert_eq!(st.conditions[0].message.as_deref(), Some("m2"));
        set_scheduled_condition(&mut st, "True", None, None);
        assert_eq!(st.conditions[0].status, "True");
        assert_eq!(st.conditions[0].reason, None);
    }
}
