//! Kubelet events: what the agent did to a pod (Pulling, Pulled, Created, Started, Killing,
//! BackOff, Unhealthy, Failed, FailedMount), written as core/v1 Events with
//! `source.component=kubelet` and `source.host=<node>`, as the kubelet writes them.
//!
//! Recording never blocks a pod worker: occurrences go through a bounded channel to one task
//! (a full channel drops them and counts the drop). The task correlates them the way
//! client-go's event correlator does, with one change for SD cards:
//!
//! - Repeats of one event (same object, field path, type, reason and message) are one Event
//!   whose `count` and `lastTimestamp` move. A repeat is not written at once: the count grows
//!   in memory and is written at most every [`REPEAT_FLUSH`] per series.
//! - Every write about one object (a pod, whatever its container) takes a token from that
//!   object's bucket: [`BURST`] tokens, one more every [`REFILL_EVERY`] (client-go's spam
//!   filter). client-go drops what the bucket refuses; here a refused write waits for the
//!   next token with its count kept, so counts stay true while a crash-looping pod settles at
//!   one write per five minutes.
//!
//! The server expires events an hour after they were last seen; a series not seen for that
//! long is forgotten here too, and an update that finds its Event gone creates a new one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::client::{resource_path, Client, ClientError};
use api::core::{Event, EventSource, ObjectReference, Pod};
use api::meta::{ObjectMeta, Time};
use api::object::Kind;
use async_channel::{Receiver, Sender};

/// `source.component` and `reportingComponent` of every event the agent writes.
pub const COMPONENT: &str = "kubelet";
/// Writes one object may burst.
pub const BURST: u32 = 25;
/// One more write per object this often, once the burst is spent.
pub const REFILL_EVERY: Duration = Duration::from_secs(300);
/// A series' repeats are written at most this often.
pub const REPEAT_FLUSH: Duration = Duration::from_secs(30);
/// How long a series (and its Event on the server) lives after it was last seen.
const SERIES_TTL: Duration = Duration::from_secs(3600);
/// Series remembered at most; the oldest written ones go first beyond it.
const MAX_SERIES: usize = 4096;
/// Occurrences waiting for the task before new ones are dropped.
const BACKLOG: usize = 1024;
/// How long after a failed write it is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// Normal or Warning, as Kubernetes types events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One occurrence of an event.
#[derive(Clone, Debug, PartialEq)]
pub struct Occurrence {
    pub involved: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    pub at: Time,
}

/// A reference to the pod, or with `container` (`spec.containers{name}` or
/// `spec.initContainers{name}`) to one of its containers, as the kubelet's events carry.
pub fn pod_reference(pod: &Pod, container: Option<(&str, bool)>) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: Some(pod.metadata.namespace().to_string()),
        name: Some(pod.metadata.name.clone()),
        uid: Some(pod.metadata.uid.clone()).filter(|u| !u.is_empty()),
        api_version: Some("v1".into()),
        resource_version: None,
        field_path: container.map(|(name, init)| {
            let list = if init { "initContainers" } else { "containers" };
            format!("spec.{list}{{{name}}}")
        }),
    }
}

/// Records the agent's events. Cloning shares the writer task.
#[derive(Clone)]
pub struct EventRecorder {
    tx: Option<Sender<Occurrence>>,
    counters: Arc<Counters>,
}

/// What the recorder has done, for tests and figures.
#[derive(Default, Debug)]
pub struct Counters {
    /// Occurrences dropped because the backlog was full.
    pub dropped: AtomicU64,
    /// Events created on the server.
    pub created: AtomicU64,
    /// Updates (count and lastTimestamp) written to existing events.
    pub updated: AtomicU64,
}

impl EventRecorder {
    /// Starts the writer task; events go to the server through `client`.
    pub fn start(client: Client, node: &str) -> EventRecorder {
        let (tx, rx) = async_channel::bounded(BACKLOG);
        let counters = Arc::new(Counters::default());
        smol::spawn(write_loop(client, node.to_string(), rx, counters.clone())).detach();
        EventRecorder {
            tx: Some(tx),
            counters,
        }
    }

    /// A recorder that records nothing (simulated nodes, tests).
    pub fn disabled() -> EventRecorder {
        EventRecorder {
            tx: None,
            counters: Arc::default(),
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// An event about the pod itself.
    pub fn pod(&self, pod: &Pod, type_: EventType, reason: &str, message: String) {
        self.record(pod_reference(pod, None), type_, reason, message);
    }

    /// An event about one of the pod's containers.
    pub fn container(
        &self,
        pod: &Pod,
        container: &str,
        init: bool,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        self.record(
            pod_reference(pod, Some((container, init))),
            type_,
            reason,
            message,
        );
    }

    pub fn record(
        &self,
        involved: ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        let Some(tx) = &self.tx else { return };
        let o = Occurrence {
            involved,
            type_,
            reason: reason.to_string(),
            message,
            at: Time::now(),
        };
        if tx.try_send(o).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Identity of a series of repeats: object, field path, type, reason, message.
type SeriesKey = (String, Option<String>, EventType, String, String);

fn object_key(r: &ObjectReference) -> String {
    format!(
        "{}/{}/{}/{}",
        r.kind.as_deref().unwrap_or(""),
        r.namespace.as_deref().unwrap_or(""),
        r.name.as_deref().unwrap_or(""),
        r.uid.as_deref().unwrap_or("")
    )
}

fn series_key(o: &Occurrence) -> SeriesKey {
    (
        object_key(&o.involved),
        o.involved.field_path.clone(),
        o.type_,
        o.reason.clone(),
        o.message.clone(),
    )
}

struct Series {
    template: Occurrence,
    first: Time,
    last: Time,
    /// Occurrences seen.
    count: i32,
    /// The count the server has.
    written: i32,
    /// The Event's name once created.
    name: Option<String>,
    /// When it was last written (or a write last failed).
    last_write: Option<Instant>,
    last_seen: Instant,
    in_flight: bool,
}

impl Series {
    fn dirty(&self) -> bool {
        self.count > self.written
    }

    /// When the next write of this series may go (ignoring the object's tokens).
    fn due_at(&self) -> Option<Instant> {
        if !self.dirty() || self.in_flight {
            return None;
        }
        Some(match (&self.name, self.last_write) {
            (_, None) => self.last_seen,
            (None, Some(at)) => at + RETRY,
            (Some(_), Some(at)) => at + REPEAT_FLUSH,
        })
    }
}

/// A token bucket of one object's writes.
#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let gained =
            now.saturating_duration_since(self.at).as_secs_f64() / REFILL_EVERY.as_secs_f64();
        self.tokens = (self.tokens + gained).min(f64::from(BURST));
        self.at = now;
    }

    /// When the next token is there.
    fn next_token(&self) -> Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        self.at + REFILL_EVERY.mul_f64(missing)
    }
}

/// A write the correlator asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Create the event (a new series, or one whose Event expired).
    Create { key: SeriesKeyId, event: Box<Event> },
    /// Set `count` and `lastTimestamp` of an existing event.
    Update {
        key: SeriesKeyId,
        namespace: String,
        name: String,
        count: i32,
        last: Time,
    },
}

/// An opaque handle of a series, given back with a write's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeriesKeyId(SeriesKey);

/// The pure part of the recorder: what to write when. Time is passed in, so tests can run an
/// hour of a crash loop in a moment.
pub struct Correlator {
    node: String,
    series: HashMap<SeriesKey, Series>,
    buckets: HashMap<String, Bucket>,
}

impl Correlator {
    pub fn new(node: &str) -> Correlator {
        Correlator {
            node: node.to_string(),
            series: HashMap::new(),
            buckets: HashMap::new(),
        }
    }

    /// Notes one occurrence.
    pub fn observe(&mut self, o: Occurrence, now: Instant) {
        let key = series_key(&o);
        match self.series.get_mut(&key) {
            Some(s) => {
                s.count = s.count.saturating_add(1);
                s.last = o.at;
                s.last_seen = now;
            }
            None => {
                self.series.insert(
                    key,
                    Series {
                        first: o.at,
                        last: o.at,
                        template: o,
                        count: 1,
                        written: 0,
                        name: None,
                        last_write: None,
                        last_seen: now,
                        in_flight: false,
                    },
                );
            }
        }
    }

    /// The writes allowed now (each has taken a token of its object), oldest first.
    pub fn due(&mut self, now: Instant) -> Vec<Write> {
        let mut ready: Vec<(Instant, SeriesKey)> = self
            .series
            .iter()
            .filter_map(|(k, s)| s.due_at().filter(|at| *at <= now).map(|at| (at, k.clone())))
            .collect();
        ready.sort_by_key(|a| a.0);
        let mut writes = Vec::new();
        for (_, key) in ready {
            let bucket = self.buckets.entry(key.0.clone()).or_insert(Bucket {
                tokens: f64::from(BURST),
                at: now,
            });
            bucket.refill(now);
            if bucket.tokens < 1.0 {
                continue;
            }
            bucket.tokens -= 1.0;
            let Some(s) = self.series.get_mut(&key) else {
                continue;
            };
            s.in_flight = true;
            let id = SeriesKeyId(key);
            writes.push(match &s.name {
                Some(name) => Write::Update {
                    key: id,
                    namespace: s.template.involved.namespace.clone().unwrap_or_default(),
                    name: name.clone(),
                    count: s.count,
                    last: s.last,
                },
                None => Write::Create {
                    key: id,
                    event: Box::new(new_event(&self.node, s)),
                },
            });
        }
        writes
    }

    /// A write succeeded: the server has `count` occurrences in the event `name`.
    pub fn written(&mut self, key: &SeriesKeyId, name: String, count: i32, now: Instant) {
        if let Some(s) = self.series.get_mut(&key.0) {
            s.in_flight = false;
            s.written = s.written.max(count);
            s.name = Some(name);
            s.last_write = Some(now);
        }
    }

    /// A write failed; `gone` when the event no longer exists (it is created again).
    pub fn failed(&mut self, key: &SeriesKeyId, gone: bool, now: Instant) {
        if let Some(s) = self.series.get_mut(&key.0) {
            s.in_flight = false;
            s.last_write = Some(now);
            if gone {
                s.name = None;
                s.written = 0;
                s.last_write = None;
            }
        }
    }

    /// How long until something may be written (None: nothing waits).
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        self.series
            .iter()
            .filter_map(|(k, s)| {
                let at = s.due_at()?;
                let token = self
                    .buckets
                    .get(&k.0)
                    .map(|b| {
                        let mut b = *b;
                        b.refill(now);
                        b.next_token()
                    })
                    .unwrap_or(now);
                Some(at.max(token))
            })
            .min()
            .map(|at| at.saturating_duration_since(now))
    }

    /// Forgets series not seen for an hour (their Events expire on the server) and buckets
    /// that are full again; beyond [`MAX_SERIES`] the oldest clean series go.
    pub fn forget_old(&mut self, now: Instant) {
        self.series.retain(|_, s| {
            s.dirty() || s.in_flight || now.saturating_duration_since(s.last_seen) < SERIES_TTL
        });
        if self.series.len() > MAX_SERIES {
            let mut clean: Vec<(Instant, SeriesKey)> = self
                .series
                .iter()
                .filter(|(_, s)| !s.dirty() && !s.in_flight)
                .map(|(k, s)| (s.last_seen, k.clone()))
                .collect();
            clean.sort_by_key(|a| a.0);
            let excess = self.series.len() - MAX_SERIES;
            for (_, k) in clean.into_iter().take(excess) {
                self.series.remove(&k);
            }
        }
        self.buckets.retain(|_, b| {
            let mut b = *b;
            b.refill(now);
            b.tokens < f64::from(BURST)
        });
    }

    /// Series remembered (for tests).
    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// `<object>.<hex>`, as the kubelet names its events (the object's name and the time in
/// nanoseconds; a sequence number keeps two events of one nanosecond apart).
fn event_name(object: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let base: String = object.chars().take(200).collect();
    format!("{base}.{:x}", nanos.wrapping_add(seq))
}

fn new_event(node: &str, s: &Series) -> Event {
    let o = &s.template;
    Event {
        metadata: ObjectMeta {
            name: event_name(o.involved.name.as_deref().unwrap_or("")),
            namespace: o.involved.namespace.clone(),
            ..Default::default()
        },
        involved_object: o.involved.clone(),
        reason: Some(o.reason.clone()),
        message: Some(o.message.clone()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.to_string()),
        }),
        first_timestamp: Some(s.first),
        last_timestamp: Some(s.last),
        count: Some(s.count),
        type_: Some(o.type_.as_str().into()),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.to_string()),
        ..Default::default()
    }
}

async fn write_loop(
    client: Client,
    node: String,
    rx: Receiver<Occurrence>,
    counters: Arc<Counters>,
) {
    let mut correlator = Correlator::new(&node);
    let mut last_forget = Instant::now();
    loop {
        let wait = correlator
            .next_due(Instant::now())
            .unwrap_or(Duration::from_secs(300));
        let got = futures_lite::future::or(async { Some(rx.recv().await) }, async {
            smol::Timer::after(wait).await;
            None
        })
        .await;
        match got {
            Some(Ok(o)) => correlator.observe(o, Instant::now()),
            Some(Err(_)) => return,
            None => {}
        }
        while let Ok(o) = rx.try_recv() {
            correlator.observe(o, Instant::now());
        }
        if last_forget.elapsed() >= Duration::from_secs(60) {
            last_forget = Instant::now();
            correlator.forget_old(Instant::now());
        }
        let writes = correlator.due(Instant::now());
        if writes.is_empty() {
            continue;
        }
        // All at once: the server's group commit makes them one fsync.
        let tasks: Vec<_> = writes
            .into_iter()
            .map(|w| {
                let client = client.clone();
                smol::spawn(async move {
                    let r = send(&client, &w).await;
                    (w, r)
                })
            })
            .collect();
        for t in tasks {
            let (w, result) = t.await;
            let now = Instant::now();
            match (&w, result) {
                (Write::Create { key, event }, Ok(())) => {
                    counters.created.fetch_add(1, Ordering::Relaxed);
                    let count = event.count.unwrap_or(1);
                    correlator.written(key, event.metadata.name.clone(), count, now);
                }
                (
                    Write::Update {
                        key, name, count, ..
                    },
                    Ok(()),
                ) => {
                    counters.updated.fetch_add(1, Ordering::Relaxed);
                    correlator.written(key, name.clone(), *count, now);
                }
                (Write::Create { key, .. } | Write::Update { key, .. }, Err(e)) => {
                    let gone = e.is_not_found() && matches!(w, Write::Update { .. });
                    if !gone {
                        tracing::debug!("writing an event failed: {e}");
                    }
                    correlator.failed(key, gone, now);
                }
            }
        }
    }
}

async fn send(client: &Client, w: &Write) -> Result<(), ClientError> {
    match w {
        Write::Create { event, .. } => client.create(event.as_ref()).await.map(|_| ()),
        Write::Update {
            namespace,
            name,
            count,
            last,
            ..
        } => {
            let path = resource_path(Kind::Event, Some(namespace), Some(name));
            let patch = serde_json::json!({ "count": count, "lastTimestamp": last });
            let body =
                serde_json::to_vec(&patch).map_err(|e| ClientError::Decode(e.to_string()))?;
            client
                .request(
                    "PATCH",
                    &path,
                    Some(("application/merge-patch+json", body)),
                    "application/json",
                )
                .await?
                .error_for_status()?;
            Ok(())
        }
    }
}

/// A duration as Go prints one truncated to milliseconds (`1.234s`, `250ms`, `2m3.5s`), as
/// the kubelet's Pulled message shows it.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if frac == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let frac = format!("{frac:03}");
        out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "crash".into();
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = "u-1".into();
        p
    }

    fn occ(reason: &str, message: &str) -> Occurrence {
        Occurrence {
            involved: pod_reference(&pod(), Some(("main", false))),
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            at: Time::now(),
        }
    }

    /// Plays the writes as if the server took them all.
    fn flush(c: &mut Correlator, now: Instant) -> Vec<Write> {
        let writes = c.due(now);
        for w in &writes {
            match w {
                Write::Create { key, event } => {
                    c.written(key, event.metadata.name.clone(), event.count.unwrap(), now)
                }
                Write::Update {
                    key, name, count, ..
                } => c.written(key, name.clone(), *count, now),
            }
        }
        writes
    }

    #[test]
    fn an_event_has_the_kubelets_shape() {
        let mut c = Correlator::new("pi-1");
        let now = Instant::now();
        c.observe(occ("Started", "Started container main"), now);
        let writes = flush(&mut c, now);
        let [Write::Create { event, .. }] = writes.as_slice() else {
            panic!("one create expected: {writes:?}");
        };
        assert_eq!(event.reason.as_deref(), Some("Started"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.count, Some(1));
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert!(event.metadata.name.starts_with("crash."));
        let source = event.source.clone().unwrap();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("pi-1"));
        assert_eq!(event.reporting_instance.as_deref(), Some("pi-1"));
        assert_eq!(
            event.involved_object.field_path.as_deref(),
            Some("spec.containers{main}")
        );
        assert_eq!(event.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!(event.involved_object.kind.as_deref(), Some("Pod"));
    }

    #[test]
    fn repeats_are_coalesced_into_one_update_per_flush_interval() {
        let mut c = Correlator::new("n");
        let t0 = Instant::now();
        c.observe(occ("BackOff", "Back-off"), t0);
        assert_eq!(flush(&mut c, t0).len(), 1);
        for i in 1..=5 {
            c.observe(occ("BackOff", "Back-off"), t0 + Duration::from_secs(i));
        }
        // Within the flush interval nothing is written; the count waits in memory.
        assert!(flush(&mut c, t0 + Duration::from_secs(10)).is_empty());
        assert_eq!(
            c.next_due(t0 + Duration::from_secs(10)),
            Some(REPEAT_FLUSH - Duration::from_secs(10))
        );
        let writes = flush(&mut c, t0 + REPEAT_FLUSH);
        let [Write::Update { count, .. }] = writes.as_slice() else {
            panic!("one update expected: {writes:?}");
        };
        assert_eq!(*count, 6);
        assert_eq!(c.next_due(t0 + REPEAT_FLUSH), None);
        // A different message is another series, written at once.
        c.observe(occ("BackOff", "other"), t0 + REPEAT_FLUSH);
        assert_eq!(flush(&mut c, t0 + REPEAT_FLUSH).len(), 1);
    }

    #[test]
    fn an_update_of_an_expired_event_creates_it_again() {
        let mut c = Correlator::new("n");
        let t0 = Instant::now();
        c.observe(occ("Pulled", "present"), t0);
        flush(&mut c, t0);
        c.observe(occ("Pulled", "present"), t0);
        let t1 = t0 + REPEAT_FLUSH;
        let writes = c.due(t1);
        let [Write::Update { key, .. }] = writes.as_slice() else {
            panic!("{writes:?}");
        };
        c.failed(key, true, t1);
        let writes = c.due(t1);
        let [Write::Create { event, .. }] = writes.as_slice() else {
            panic!("{writes:?}");
        };
        assert_eq!(event.count, Some(2));
    }

    /// A container that crashes at once, restarted with the kubelet's back-off (10 s
    /// doubling to 5 min), each crash giving Pulled, Created, Started and BackOff: the
    /// figure quoted in the README (writes per pod in its first hour and after).
    #[test]
    fn a_crash_loop_is_rate_limited_per_pod() {
        let mut c = Correlator::new("n");
        let t0 = Instant::now();
        let mut at = t0;
        let mut backoff = Duration::from_secs(10);
        let mut crashes = Vec::new();
        while at < t0 + Duration::from_secs(7200) {
            crashes.push(at);
            at += backoff;
            backoff = (backoff * 2).min(Duration::from_secs(300));
        }
        let mut writes_first_hour = 0;
        let mut writes_second_hour = 0;
        let mut next = 0;
        let mut now = t0;
        let end = t0 + Duration::from_secs(7200);
        while now < end {
            while next < crashes.len() && crashes[next] <= now {
                for (reason, msg) in [
                    (
                        "Pulled",
                        "Container image \"busybox\" already present on machine",
                    ),
                    ("Created", "Created container: main"),
                    ("Started", "Started container main"),
                    ("BackOff", "Back-off restarting failed container main"),
                ] {
                    c.observe(occ(reason, msg), now);
                }
                next += 1;
            }
            let n = flush(&mut c, now).len();
            if now < t0 + Duration::from_secs(3600) {
                writes_first_hour += n;
            } else {
                writes_second_hour += n;
            }
            now += Duration::from_secs(1);
        }
        // Bounded by the bucket: the burst, then one write per five minutes.
        assert!(
            writes_first_hour <= BURST as usize + 12,
            "{writes_first_hour}"
        );
        assert!(writes_second_hour <= 13, "{writes_second_hour}");
        assert!(writes_second_hour >= 11, "{writes_second_hour}");
        // Nothing is lost: every occurrence is counted in some series' count.
        let counted: i32 = c.series.values().map(|s| s.count).sum();
        let crashes_seen = crashes.iter().filter(|t| **t < end).count() as i32;
        assert_eq!(counted, crashes_seen * 4);
        println!(
            "crash loop: {} crashes in 2 h, {writes_first_hour} event writes in the first hour, {writes_second_hour} in the second",
            crashes_seen
        );
    }

    #[test]
    fn old_series_are_forgotten() {
        let mut c = Correlator::new("n");
        let t0 = Instant::now();
        c.observe(occ("Started", "x"), t0);
        flush(&mut c, t0);
        c.forget_old(t0 + Duration::from_secs(60));
        assert_eq!(c.len(), 1);
        c.forget_old(t0 + SERIES_TTL + Duration::from_secs(1));
        assert!(c.is_empty());
        assert!(c.buckets.is_empty());
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_millis(0)), "0s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_millis(1234)), "1.234s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(2000)), "2s");
        assert_eq!(go_duration(Duration::from_millis(123_500)), "2m3.5s");
        assert_eq!(go_duration(Duration::from_millis(3_600_000)), "1h0m0s");
    }
}
