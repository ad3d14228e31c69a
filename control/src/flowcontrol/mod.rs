//! API Priority and Fairness (docs/design/admission.md §3): every request is classified by
//! the FlowSchemas (matching precedence, then name) into a priority level and a flow, and
//! waits for a seat of its level in a fair queue ([`queueset`]).
//!
//! The server's concurrency (`--max-requests-inflight` + `--max-mutating-requests-inflight`)
//! is divided among the levels by their nominal concurrency shares:
//! `ceil(total × shares / sum of shares)` seats each. A level keeps its nominal seats: kube's
//! borrowing between levels (lendablePercent, borrowingLimitPercent, adjusted every 10 s
//! from the seat demand) is left out, so a busy level cannot take an idle level's seats.
//!
//! [`Controller::digest`] turns the stored objects into the configuration in force, as
//! kube's config controller does: FlowSchemas naming a missing (or broken) level are left
//! out, the mandatory `exempt` and `catch-all` objects are imagined while they do not exist,
//! and a level that goes away while requests wait in it drains first.

mod dump;
pub mod ensure;
pub mod queueset;
pub mod rules;
pub mod shuffle;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use api::flowcontrol::{
    FlowSchema, FlowSchemaCondition, PriorityLevelConfiguration, BY_NAMESPACE, BY_USER, CATCH_ALL,
    CONDITION_DANGLING, EXEMPT, RESPONSE_QUEUE, RESPONSE_REJECT, TYPE_EXEMPT, TYPE_LIMITED,
};
use api::Kind;

use queueset::{Clock, Described, QueueSet, Queuing, RealClock, Ticket};
pub use rules::{RequestDigest, ResourceInfo};

/// kube's defaults are 400 and 200, for control-plane machines of 8 cores and more; skiff's
/// server runs on a Raspberry Pi-class board (4 cores, 1-8 GB). A request costs skiff well
/// under a millisecond of CPU, so 150 seats keep every core busy and leave room for
/// requests waiting on the disk, while the memory of the requests in flight (a list is
/// built whole before it is sent) stays bounded on a small board. Divided by kube's shares,
/// that is still several seats per level (global-default 13, node-high 25, workload-low 62).
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 100;
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 50;

/// kube-apiserver's `--request-timeout`: a request's deadline, and the wait limit of a
/// watch is a quarter of it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a request waits in a queue, whatever its timeout.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// How long a request may wait in its queue (kube's getRequestWaitContext): a quarter of
/// its timeout (the `timeout` parameter when shorter than the server's, else the server's
/// request timeout; a watch has no deadline and takes a quarter of the server's), at most a
/// minute.
pub fn wait_limit(timeout: Option<Duration>, watch: bool) -> Duration {
    let timeout = match timeout {
        Some(t) if !watch && !t.is_zero() && t < REQUEST_TIMEOUT => t,
        _ => REQUEST_TIMEOUT,
    };
    (timeout / 4).min(MAX_WAIT)
}

/// A priority level in force.
pub struct Level {
    pub config: Arc<PriorityLevelConfiguration>,
    pub queues: Arc<QueueSet>,
    /// Gone from the stored objects, kept while requests wait or execute in it.
    pub quiescing: bool,
    /// Its seats.
    pub limit: usize,
}

impl Level {
    fn name(&self) -> &str {
        &self.config.metadata.name
    }
}

/// A level being digested: its object, the queues it keeps, whether it drains.
type Pending = (Arc<PriorityLevelConfiguration>, Option<Arc<QueueSet>>, bool);

/// The configuration in force: the FlowSchemas in matching order and the levels by name.
#[derive(Default)]
struct Config {
    schemas: Vec<Arc<FlowSchema>>,
    levels: BTreeMap<String, Arc<Level>>,
}

/// A request's classification.
pub struct Classification {
    pub flow_schema: Arc<FlowSchema>,
    pub level: Arc<Level>,
    pub distinguisher: String,
    pub hash: u64,
}

/// A request that may execute: its seat is held until this is dropped.
pub struct Admitted {
    pub flow_schema_uid: String,
    pub priority_level_uid: String,
    _seat: Seat,
}

/// A request turned away: its queue was full or its level at its limit, or its wait ran
/// out.
#[derive(Debug)]
pub struct Rejected {
    pub flow_schema_uid: String,
    pub priority_level_uid: String,
    /// Seconds for the `Retry-After` header.
    pub retry_after: u64,
}

/// A request in a level's queue set: leaves its queue, or gives back its seat, when dropped
/// (also when the client goes away while it waits).
struct Seat {
    level: Arc<Level>,
    ticket: Ticket,
    reap: async_channel::Sender<()>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.level.queues.finish(&self.ticket);
        if self.level.queues.is_quiescing() && self.level.queues.is_idle() {
            let _ = self.reap.try_send(());
        }
    }
}

/// API Priority and Fairness for one server.
pub struct Controller {
    /// The server's seats, divided among the levels.
    server_limit: usize,
    clock: Arc<dyn Clock>,
    config: RwLock<Arc<Config>>,
    dropped: Mutex<BTreeMap<String, Dropped>>,
    /// Asks for the configuration to be digested again (a quiescing level became idle).
    reap: (async_channel::Sender<()>, async_channel::Receiver<()>),
}

impl Controller {
    /// A controller with the mandatory configuration, until [`Controller::digest`] is given
    /// the stored objects.
    pub fn new(server_limit: usize) -> Controller {
        Controller::with_clock(server_limit, Arc::new(RealClock))
    }

    pub fn with_clock(server_limit: usize, clock: Arc<dyn Clock>) -> Controller {
        let c = Controller {
            server_limit,
            clock,
            config: Default::default(),
            dropped: Default::default(),
            reap: async_channel::bounded(1),
        };
        c.digest(Vec::new(), Vec::new());
        c
    }

    pub fn server_limit(&self) -> usize {
        self.server_limit
    }

    fn snapshot(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts the stored objects in force (kube's digestConfigObjects).
    pub fn digest(&self, levels: Vec<PriorityLevelConfiguration>, schemas: Vec<FlowSchema>) {
        let mut config = self.config.write().unwrap_or_else(|e| e.into_inner());
        let old = config.clone();
        // Levels: the usable ones, keeping the queues of a level that stays.
        let mut new: BTreeMap<String, Pending> = BTreeMap::new();
        for pl in levels {
            if queuing_of(&pl).is_none() {
                tracing::warn!(level = %pl.metadata.name, "ignoring a broken PriorityLevelConfiguration");
                continue;
            }
            let queues = old.levels.get(&pl.metadata.name).map(|l| l.queues.clone());
            new.insert(pl.metadata.name.clone(), (Arc::new(pl), queues, false));
        }
        // Schemas: those naming a level in force, in matching order, with the mandatory ones
        // imagined where missing.
        let mut usable: Vec<Arc<FlowSchema>> = schemas
            .into_iter()
            .filter(|fs| new.contains_key(&fs.spec.priority_level_configuration.name))
            .map(Arc::new)
            .collect();
        usable.sort_by(|a, b| {
            (a.spec.matching_precedence, &a.metadata.name)
                .cmp(&(b.spec.matching_precedence, &b.metadata.name))
        });
        let mandatory = api::flowcontrol::bootstrap::mandatory_flow_schemas();
        if !usable.iter().any(|f| f.metadata.name == EXEMPT) {
            usable.insert(0, Arc::new(mandatory[0].clone()));
        }
        if !usable.iter().any(|f| f.metadata.name == CATCH_ALL) {
            usable.push(Arc::new(mandatory[1].clone()));
        }
        // Levels gone: the mandatory ones stay; the others drain first.
        for (name, level) in &old.levels {
            if new.contains_key(name) {
                continue;
            }
            let mandatory = name == EXEMPT || name == CATCH_ALL;
            if !mandatory && level.queues.is_idle() {
                continue;
            }
            new.insert(
                name.clone(),
                (level.config.clone(), Some(level.queues.clone()), !mandatory),
            );
        }
        for proto in api::flowcontrol::bootstrap::mandatory_priority_levels() {
            new.entry(proto.metadata.name.clone())
                .or_insert_with(|| (Arc::new(proto), None, false));
        }
        // Seats by shares.
        let share_sum: i64 = new.values().map(|(pl, ..)| pl.shares().max(0) as i64).sum();
        let mut levels = BTreeMap::new();
        for (name, (pl, queues, quiescing)) in new {
            let shares = pl.shares().max(0) as u64;
            let limit = match share_sum {
                0 => 0,
                sum => (self.server_limit as u64 * shares).div_ceil(sum as u64) as usize,
            };
            let queuing = queuing_of(&pl).unwrap_or(Queuing::Reject);
            let queues = match queues {
                Some(q) => {
                    q.configure(queuing, limit);
                    q
                }
                None => Arc::new(QueueSet::new(self.clock.clone(), queuing, limit)),
            };
            queues.set_quiescing(quiescing);
            levels.insert(
                name,
                Arc::new(Level {
                    config: pl,
                    queues,
                    quiescing,
                    limit,
                }),
            );
        }
        *config = Arc::new(Config {
            schemas: usable,
            levels,
        });
    }

    /// The FlowSchema a request matches first (the imagined catch-all if none does), its
    /// level and its flow.
    pub fn classify(&self, r: &RequestDigest) -> Classification {
        let config = self.snapshot();
        let flow_schema = config
            .schemas
            .iter()
            .find(|fs| rules::matches(fs, r))
            .or_else(|| {
                config
                    .schemas
                    .iter()
                    .find(|fs| fs.metadata.name == CATCH_ALL)
            })
            .or(config.schemas.last())
            .cloned()
            .unwrap_or_else(|| {
                Arc::new(api::flowcontrol::bootstrap::mandatory_flow_schemas()[1].clone())
            });
        let level = config
            .levels
            .get(&flow_schema.spec.priority_level_configuration.name)
            .or_else(|| config.levels.get(CATCH_ALL))
            .cloned()
            .expect("the catch-all level is always in force");
        let queues = match queuing_of(&level.config) {
            Some(Queuing::Queue { queues, .. }) => queues,
            _ => 0,
        };
        let (distinguisher, hash) = if queues > 1 {
            let d = match flow_schema.distinguisher() {
                Some(BY_USER) => r.user.clone(),
                Some(BY_NAMESPACE) => r.namespace().to_string(),
                _ => String::new(),
            };
            let hash = flow_hash(&flow_schema.metadata.name, &d);
            (d, hash)
        } else {
            (String::new(), 0)
        };
        Classification {
            flow_schema,
            level,
            distinguisher,
            hash,
        }
    }

    /// Classifies a request and waits, until `deadline` at most, for a seat of its level.
    pub async fn admit(&self, r: &RequestDigest, deadline: Instant) -> Result<Admitted, Rejected> {
        let c = self.classify(r);
        let flow_schema_uid = c.flow_schema.metadata.uid.clone();
        let priority_level_uid = c.level.config.metadata.uid.clone();
        let resource = r.resource.clone().unwrap_or_default();
        let described = Described {
            flow_schema: c.flow_schema.metadata.name.clone(),
            distinguisher: c.distinguisher.clone(),
            user: r.user.clone(),
            verb: r.verb.clone(),
            path: r.path.clone(),
            namespace: resource.namespace,
            name: resource.name,
            api_version: match (resource.group.as_str(), resource.version.as_str()) {
                ("", v) => v.to_string(),
                (g, v) => format!("{g}/{v}"),
            },
            resource: resource.resource,
            subresource: resource.subresource,
        };
        let rejected = |this: &Controller| {
            let retry_after = this.note_dropped(c.level.name());
            Rejected {
                flow_schema_uid: flow_schema_uid.clone(),
                priority_level_uid: priority_level_uid.clone(),
                retry_after,
            }
        };
        let Some(ticket) = c.level.queues.start(c.hash, described) else {
            return Err(rejected(self));
        };
        let seat = Seat {
            level: c.level.clone(),
            ticket,
            reap: self.reap.0.clone(),
        };
        if !c.level.queues.wait(&seat.ticket, deadline).await {
            drop(seat);
            return Err(rejected(self));
        }
        c.level.queues.note_executed();
        Ok(Admitted {
            flow_schema_uid,
            priority_level_uid,
            _seat: seat,
        })
    }

    /// Records a rejection; answers the level's Retry-After.
    fn note_dropped(&self, level: &str) -> u64 {
        let now = self
            .clock
            .wall()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut dropped = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        let stats = dropped.entry(level.to_string()).or_default();
        stats.record(now);
        stats.retry_after as u64
    }

    /// Digests the stored objects now and whenever they change (every server).
    pub fn start(self: &Arc<Self>, informers: &crate::machinery::informer::Informers) {
        let changes = informers.subscribe(&[Kind::FlowSchema, Kind::PriorityLevelConfiguration]);
        let cache = informers.cache().clone();
        let digest = {
            let this = self.clone();
            move || this.digest(cache.list(None), cache.list(None))
        };
        digest();
        let reap = self.reap.1.clone();
        smol::spawn(async move {
            use futures_lite::FutureExt;
            loop {
                let more = async { changes.recv().await.is_ok() }
                    .or(async { reap.recv().await.is_ok() })
                    .await;
                if !more {
                    return;
                }
                while changes.try_recv().is_ok() {}
                digest();
            }
        })
        .detach();
    }

    /// `/debug/api_priority_and_fairness/dump_priority_levels`.
    pub fn dump_priority_levels(&self) -> String {
        let config = self.snapshot();
        let mut text = dump::row(&[
            "PriorityLevelName",
            "ActiveQueues",
            "IsIdle",
            "IsQuiescing",
            "WaitingRequests",
            "ExecutingRequests",
            "DispatchedRequests",
            "RejectedRequests",
            "TimedoutRequests",
            "CancelledRequests",
        ]);
        text.push('\n');
        for (name, level) in &config.levels {
            let t = level.queues.totals();
            text.push_str(&dump::row(&[
                name.clone(),
                t.active_queues.to_string(),
                (t.waiting == 0 && t.executing == 0).to_string(),
                level.quiescing.to_string(),
                t.waiting.to_string(),
                t.executing.to_string(),
                t.dispatched.to_string(),
                t.rejected.to_string(),
                t.timed_out.to_string(),
                t.cancelled.to_string(),
            ]));
            text.push('\n');
        }
        dump::tabwrite(&text)
    }

    /// `/debug/api_priority_and_fairness/dump_queues`.
    pub fn dump_queues(&self) -> String {
        let config = self.snapshot();
        let mut text = dump::row(&[
            "PriorityLevelName",
            "Index",
            "PendingRequests",
            "ExecutingRequests",
            "SeatsInUse",
            "NextDispatchR",
            "InitialSeatsSum",
            "MaxSeatsSum",
            "TotalWorkSum",
        ]);
        text.push('\n');
        for (name, level) in &config.levels {
            for (i, q) in level.queues.queues().iter().enumerate() {
                text.push_str(&dump::row(&[
                    name.clone(),
                    i.to_string(),
                    q.waiting.to_string(),
                    q.executing.to_string(),
                    q.seats_in_use.to_string(),
                    queueset::format_seat_seconds(q.next_dispatch_r),
                    q.waiting.to_string(),
                    q.waiting.to_string(),
                    queueset::format_seat_seconds(q.waiting_work),
                ]));
                text.push('\n');
            }
        }
        dump::tabwrite(&text)
    }

    /// `/debug/api_priority_and_fairness/dump_requests`, with the requests' details when
    /// asked (`includeRequestDetails`).
    pub fn dump_requests(&self, details: bool) -> String {
        let config = self.snapshot();
        let mut text = dump::row(&[
            "PriorityLevelName",
            "FlowSchemaName",
            "QueueIndex",
            "RequestIndexInQueue",
            "FlowDistingsher",
            "ArriveTime",
            "InitialSeats",
            "FinalSeats",
            "AdditionalLatency",
            "StartTime",
        ]);
        if details {
            text.push_str(",\t");
            text.push_str(&dump::row(&[
                "UserName",
                "Verb",
                "APIPath",
                "Namespace",
                "Name",
                "APIVersion",
                "Resource",
                "SubResource",
            ]));
        }
        text.push('\n');
        for (name, level) in &config.levels {
            for r in level.queues.requests() {
                text.push_str(&dump::row(&[
                    name.clone(),
                    r.described.flow_schema.clone(),
                    r.queue.to_string(),
                    r.index.to_string(),
                    r.described.distinguisher.clone(),
                    dump::rfc3339_nano(Some(r.arrival)),
                    "1".into(),
                    "0".into(),
                    "0s".into(),
                    dump::rfc3339_nano(r.started),
                ]));
                if details {
                    let d = &r.described;
                    text.push_str(",\t");
                    text.push_str(&dump::row(&[
                        &d.user,
                        &d.verb,
                        &d.path,
                        &d.namespace,
                        &d.name,
                        &d.api_version,
                        &d.resource,
                        &d.subresource,
                    ]));
                }
                text.push('\n');
            }
        }
        dump::tabwrite(&text)
    }
}

/// How a level takes requests, or None when its spec is broken (kube ignores such levels).
fn queuing_of(pl: &PriorityLevelConfiguration) -> Option<Queuing> {
    let spec = &pl.spec;
    let exempt = spec.type_ == TYPE_EXEMPT;
    if (spec.type_ == TYPE_LIMITED) != spec.limited.is_some()
        || exempt != spec.exempt.is_some()
        || exempt != (pl.metadata.name == EXEMPT)
    {
        return None;
    }
    let Some(limited) = &spec.limited else {
        return Some(Queuing::Exempt);
    };
    let response = &limited.limit_response;
    match (response.type_.as_str(), &response.queuing) {
        (RESPONSE_REJECT, None) => Some(Queuing::Reject),
        (RESPONSE_QUEUE, Some(q)) => {
            let (queues, hand) = (q.queues.max(0) as usize, q.hand_size.max(0) as usize);
            shuffle::Dealer::new(queues, hand)?;
            Some(Queuing::Queue {
                queues,
                hand_size: hand,
                queue_length_limit: q.queue_length_limit.max(0) as usize,
            })
        }
        _ => None,
    }
}

/// A flow's hash: the first 8 bytes, little-endian, of SHA-256 of the schema's name, a zero
/// byte and the distinguisher (kube's hashFlowID).
pub fn flow_hash(flow_schema: &str, distinguisher: &str) -> u64 {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(flow_schema.as_bytes());
    ctx.update(&[0]);
    ctx.update(distinguisher.as_bytes());
    let sum = ctx.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&sum.as_ref()[..8]);
    u64::from_le_bytes(first)
}

/// The Dangling condition a FlowSchema should have, given the levels in force (kube's
/// presyncFlowSchemaStatus): None when its condition already says so.
pub fn dangling_condition(
    fs: &FlowSchema,
    levels: &[PriorityLevelConfiguration],
) -> Option<FlowSchemaCondition> {
    let name = &fs.spec.priority_level_configuration.name;
    let found = levels
        .iter()
        .any(|pl| &pl.metadata.name == name && queuing_of(pl).is_some());
    let (status, reason, message) = if found {
        (
            "False",
            "Found",
            format!("This FlowSchema references the PriorityLevelConfiguration object named {name:?} and it exists"),
        )
    } else {
        (
            "True",
            "NotFound",
            format!("This FlowSchema references the PriorityLevelConfiguration object named {name:?} but there is no such object"),
        )
    };
    let current = fs.condition(CONDITION_DANGLING);
    let same = current.is_some_and(|c| {
        c.status.as_deref() == Some(status)
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message.as_str())
    });
    (!same).then(|| FlowSchemaCondition {
        type_: CONDITION_DANGLING.into(),
        status: Some(status.into()),
        last_transition_time: Some(api::meta::Time::from_system(SystemTime::now())),
        reason: Some(reason.into()),
        message: Some(message),
    })
}

/// Rejections of one level and the Retry-After they lead to (kube's droppedRequestsTracker):
/// it doubles (to 32 s at most) when a `retryAfter`-second window saw at least three times
/// as many rejections, and shrinks by one when it saw fewer than `retryAfter`.
#[derive(Debug)]
struct Dropped {
    /// Rejections per second: (unix second, count), the current second last.
    history: Vec<(i64, i64)>,
    retry_after: i64,
    raised_at: i64,
}

impl Default for Dropped {
    fn default() -> Dropped {
        Dropped {
            history: Vec::new(),
            retry_after: 1,
            raised_at: 0,
        }
    }
}

const MAX_RETRY_AFTER: i64 = 32;

impl Dropped {
    fn record(&mut self, now: i64) {
        if let Some(last) = self.history.last_mut() {
            if last.0 == now {
                last.1 += 1;
                return;
            }
        }
        // A new second: forget what is older than any window looks at, then reconsider
        // Retry-After from the seconds before this one.
        let keep = (2 * self.retry_after).min(MAX_RETRY_AFTER);
        self.history.retain(|(t, _)| now - t <= keep);
        let window: i64 = self
            .history
            .iter()
            .filter(|(t, _)| now - t <= self.retry_after && *t < now)
            .map(|(_, n)| n)
            .sum();
        if now - self.raised_at >= self.retry_after && window >= 3 * self.retry_after {
            self.retry_after = (self.retry_after * 2).min(MAX_RETRY_AFTER);
            self.raised_at = now;
        } else if window < self.retry_after && self.retry_after > 1 {
            self.retry_after -= 1;
        }
        self.history.push((now, 1));
    }
}

#[cfg(test)]
mod tests;
