//! Events: what the scheduler and the controllers did, as core/v1 Event objects.
//!
//! Recording never blocks the caller: events go through a bounded queue to one task that
//! coalesces repeats (same object, type, reason and message) into one Event whose `count` and
//! `lastTimestamp` move, and writes a batch of them concurrently so the store's group commit
//! turns the batch into one fsync. As client-go's event series do, only the first two
//! occurrences of a series are written at once; later ones are counted in memory and reach the
//! store when the series is refreshed ([`SERIES_REFRESH`]) or finishes ([`SERIES_FINISH`]), so
//! a pod that keeps failing the same way does not wear the SD card. When the channel is full (a burst of thousands of pods
//! scheduled at once) further events are dropped and counted rather than slowing the control
//! loops, as client-go's event broadcaster does.
//!
//! Events expire an hour after they were last seen (Kubernetes gives them a one-hour etcd
//! lease); a sweep removes expired ones and keeps at most [`MAX_EVENTS`], so events never grow
//! the database without bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::core::{Event, EventSource, ObjectReference};
use api::meta::{DeleteOptions, ObjectMeta, Time};
use api::object::Resource;
use api::Kind;
use async_channel::{Receiver, Sender};

use crate::registry::{Part, Registry};

/// How long an event lives after it was last seen.
pub const EVENT_TTL: Duration = Duration::from_secs(3600);
/// The most events kept; the oldest go first beyond it.
pub const MAX_EVENTS: usize = 5000;
/// Events waiting to be written before new ones are dropped.
const BACKLOG: usize = 4096;
/// Writes in flight at once.
const BATCH: usize = 128;
/// How often expired events are swept.
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

struct Pending {
    involved: ObjectReference,
    namespace: String,
    type_: &'static str,
    reason: String,
    message: String,
    at: Time,
}

impl Pending {
    fn new(involved: ObjectReference, type_: &'static str, reason: &str, message: String) -> Self {
        // Cluster-scoped objects' events live in `default`, as in Kubernetes.
        let namespace = involved
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        Pending {
            involved,
            namespace,
            type_,
            reason: reason.to_string(),
            message,
            at: Time::now(),
        }
    }
}

/// Records events for one component (`default-scheduler`, `replicaset-controller`, ...).
#[derive(Clone)]
pub struct Recorder {
    tx: Sender<Pending>,
    dropped: Arc<AtomicU64>,
}

/// A reference to `obj` for `involvedObject`.
pub fn reference<K: Resource>(obj: &K) -> ObjectReference {
    let info = K::KIND.info();
    ObjectReference {
        kind: Some(info.kind.to_string()),
        namespace: obj.meta().namespace.clone(),
        name: Some(obj.meta().name.clone()),
        uid: Some(obj.meta().uid.clone()).filter(|u| !u.is_empty()),
        api_version: Some(info.api_version().to_string()),
        resource_version: Some(obj.meta().resource_version.clone()).filter(|r| !r.is_empty()),
        field_path: None,
    }
}

impl Recorder {
    /// Starts the writer task of `component`'s events.
    pub fn start(registry: Registry, component: &str) -> Recorder {
        // Unbounded, with the bound checked by `record`: a bounded channel allocates all its
        // slots up front (a megabyte per recorder at this backlog), most of them never used.
        let (tx, rx) = async_channel::unbounded();
        let dropped = Arc::new(AtomicU64::new(0));
        smol::spawn(write_loop(registry, component.to_string(), rx)).detach();
        Recorder { tx, dropped }
    }

    pub fn normal<K: Resource>(&self, obj: &K, reason: &str, message: impl Into<String>) {
        self.record(reference(obj), "Normal", reason, message.into());
    }

    pub fn warning<K: Resource>(&self, obj: &K, reason: &str, message: impl Into<String>) {
        self.record(reference(obj), "Warning", reason, message.into());
    }

    pub fn record(
        &self,
        involved: ObjectReference,
        type_: &'static str,
        reason: &str,
        message: String,
    ) {
        if self.tx.len() >= BACKLOG {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let p = Pending::new(involved, type_, reason, message);
        if self.tx.try_send(p).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped because the backlog was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Identity of a series of repeated events: a 128-bit digest (two differently seeded
/// hashes) of the involved object, its kind, the type, the reason and the message. A
/// scheduler with 10,000 waiting pods remembers 10,000 series; as digests they cost 16 bytes
/// each rather than five strings (the message alone often a hundred bytes). Two series
/// would share a digest with a chance of about n²/2¹²⁹, and then only share a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SeriesKey(u64, u64);

impl SeriesKey {
    fn of(who: &str, kind: &str, type_: &str, reason: &str, message: &str) -> SeriesKey {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let digest = |seed: u8| {
            // DefaultHasher::new() is SipHash with fixed keys: the same in every run.
            let mut h = DefaultHasher::new();
            seed.hash(&mut h);
            (who, kind, type_, reason, message).hash(&mut h);
            h.finish()
        };
        SeriesKey(digest(0), digest(1))
    }
}

/// A series that has gone this long without a write is written again while it keeps
/// recurring (client-go's event series refresh time), so its Event never expires under it.
pub const SERIES_REFRESH: Duration = Duration::from_secs(30 * 60);
/// A series not seen for this long is finished: its last count is written and it is
/// forgotten (client-go's finish time).
pub const SERIES_FINISH: Duration = Duration::from_secs(6 * 60);
/// How often series are looked at for refreshing and finishing.
const SERIES_TICK: Duration = Duration::from_secs(60);

/// What the recorder remembers of a series of repeated events. Only the first two
/// occurrences are written at once (the event, then the start of its series, as client-go's
/// event broadcaster does); later ones move `count` in memory, which reaches the store when
/// the series is refreshed or finished. So a pod that fails the same way every minute does
/// not write to the disk every minute.
///
/// There is one per pod that cannot be scheduled, so it is kept small: 40 bytes and one
/// allocation (56 with its key; it was 112 and two, 1.8 MB for 10,000 pods).
struct Series {
    /// The Event's namespace and name, as `namespace/name`.
    event: Box<str>,
    /// Occurrences seen, written or not.
    count: i32,
    /// The count the stored Event shows.
    written: i32,
    last_at: Time,
    /// When it was last seen and last written, in [`Clock`] seconds.
    last_seen: u32,
    last_write: u32,
}

impl Series {
    fn new(namespace: &str, name: &str, count: i32, now: u32) -> Series {
        Series {
            event: format!("{namespace}/{name}").into(),
            count,
            written: count,
            last_at: Time::now(),
            last_seen: now,
            last_write: now,
        }
    }

    fn unwritten(&self) -> bool {
        self.count != self.written
    }

    /// The Event's namespace and name (a namespace has no `/`).
    fn event(&self) -> (String, String) {
        let (ns, name) = self.event.split_once('/').unwrap_or(("", &self.event));
        (ns.to_string(), name.to_string())
    }

    fn count_write(&self, pending: Option<Pending>) -> Write {
        let (namespace, name) = self.event();
        Write::Count {
            namespace,
            name,
            count: self.count,
            at: self.last_at,
            pending,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Series>() == 40);

/// Whole seconds since the recorder started: series' times, in 4 bytes instead of an
/// `Instant`'s 16 (136 years of range).
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(&self) -> u32 {
        u32::try_from(self.0.elapsed().as_secs()).unwrap_or(u32::MAX)
    }
}

/// Whether `since` (a [`Clock`] time) is at least `d` before `now`.
fn elapsed(now: u32, since: u32, d: Duration) -> bool {
    u64::from(now.saturating_sub(since)) >= d.as_secs()
}

fn series_key(p: &Pending) -> SeriesKey {
    let who = match &p.involved.uid {
        Some(uid) => std::borrow::Cow::Borrowed(uid.as_str()),
        None => format!("{}/{:?}", p.namespace, p.involved.name).into(),
    };
    SeriesKey::of(
        &who,
        p.involved.kind.as_deref().unwrap_or_default(),
        p.type_,
        &p.reason,
        &p.message,
    )
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A unique event name in the style of client-go: the object's name and a hex suffix.
fn event_name(object: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let base: String = object.chars().take(200).collect();
    format!("{base}.{:x}", nanos.wrapping_add(seq))
}

/// One write of the recorder: a new Event, or a new count of an existing one.
enum Write {
    Create(Pending, i32),
    Count {
        namespace: String,
        name: String,
        count: i32,
        at: Time,
        /// To create the Event again if it expired meanwhile.
        pending: Option<Pending>,
    },
}

async fn write_loop(registry: Registry, component: String, rx: Receiver<Pending>) {
    let mut series: HashMap<SeriesKey, Series> = HashMap::new();
    let clock = Clock(Instant::now());
    let mut last_tick = Instant::now();
    loop {
        let first =
            match futures_lite::future::or(async { rx.recv().await.ok().map(Some) }, async {
                smol::Timer::after(SERIES_TICK).await;
                Some(None)
            })
            .await
            {
                None => return,
                Some(p) => p,
            };
        let mut writes: Vec<(SeriesKey, Write)> = Vec::new();
        if last_tick.elapsed() >= SERIES_TICK {
            last_tick = Instant::now();
            writes.extend(due_series(&mut series, clock.now()));
        }
        if let Some(first) = first {
            // Coalesce what is queued: repeats of one series become one entry.
            let mut batch: Vec<(Pending, i32)> = Vec::new();
            let mut index: HashMap<SeriesKey, usize> = HashMap::new();
            let mut next = Some(first);
            while let Some(p) = next {
                let key = series_key(&p);
                match index.get(&key) {
                    Some(&i) => {
                        batch[i].1 += 1;
                        batch[i].0.at = p.at;
                    }
                    None => {
                        index.insert(key, batch.len());
                        batch.push((p, 1));
                    }
                }
                next = if batch.len() < BATCH {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            for (p, n) in batch {
                let key = series_key(&p);
                if let Some(w) = observe(&mut series, &key, p, n, clock.now()) {
                    writes.push((key, w));
                }
            }
        }
        let tasks: Vec<_> = writes
            .into_iter()
            .map(|(key, w)| {
                let registry = registry.clone();
                let component = component.clone();
                (
                    key,
                    smol::spawn(async move { write_one(&registry, &component, w).await }),
                )
            })
            .collect();
        for (key, task) in tasks {
            match task.await {
                Some((namespace, name, count, created)) => match series.get_mut(&key) {
                    Some(s) => {
                        s.event = format!("{namespace}/{name}").into();
                        s.written = count;
                        s.last_write = clock.now();
                    }
                    // A finished series' last write leaves nothing to remember.
                    None if !created => {}
                    None => {
                        series.insert(key, Series::new(&namespace, &name, count, clock.now()));
                    }
                },
                // Not written (a namespace going away): forget the series rather than keep
                // an Event name that does not exist.
                None => {
                    series.remove(&key);
                }
            }
        }
        if series.len() > MAX_EVENTS * 2 {
            // Forget the oldest series; their events stay until the sweep.
            let mut ages: Vec<_> = series.iter().map(|(k, s)| (s.last_seen, *k)).collect();
            ages.sort();
            for (_, k) in ages.into_iter().take(MAX_EVENTS) {
                series.remove(&k);
            }
        }
    }
}

/// Takes `n` more occurrences of `key` at `now` ([`Clock`] time): the write to make now, if
/// any.
fn observe(
    series: &mut HashMap<SeriesKey, Series>,
    key: &SeriesKey,
    p: Pending,
    n: i32,
    now: u32,
) -> Option<Write> {
    let Some(s) = series.get_mut(key) else {
        // The write's result inserts the series.
        return Some(Write::Create(p, n));
    };
    s.count = s.count.saturating_add(n);
    s.last_at = p.at;
    s.last_seen = now;
    if s.written > 1 {
        return None;
    }
    Some(s.count_write(Some(p)))
}

/// The writes of series whose count is due at `now` ([`Clock`] time): those unwritten for
/// [`SERIES_REFRESH`] and those finished (not seen for [`SERIES_FINISH`]), which are then
/// forgotten.
fn due_series(series: &mut HashMap<SeriesKey, Series>, now: u32) -> Vec<(SeriesKey, Write)> {
    let mut writes = Vec::new();
    series.retain(|key, s| {
        let finished = elapsed(now, s.last_seen, SERIES_FINISH);
        if s.unwritten() && (finished || elapsed(now, s.last_write, SERIES_REFRESH)) {
            writes.push((*key, s.count_write(None)));
        }
        !finished
    });
    writes
}

/// Makes one write; returns the Event's namespace, name, the count it now shows and whether
/// it was created.
async fn write_one(
    registry: &Registry,
    component: &str,
    w: Write,
) -> Option<(String, String, i32, bool)> {
    let (p, n) = match w {
        Write::Create(p, n) => (p, n),
        Write::Count {
            namespace,
            name,
            count,
            at,
            pending,
        } => {
            let updated = registry
                .mutate::<Event>(&namespace, &name, Part::Main, move |e| {
                    e.count = Some(count);
                    e.last_timestamp = Some(at);
                    Ok(())
                })
                .await;
            match updated {
                Ok(_) => return Some((namespace, name, count, false)),
                // Expired meanwhile: start a new one, if this is a new occurrence.
                Err(e) if e.code() == 404 => match pending {
                    Some(p) => (p, count),
                    None => return None,
                },
                Err(e) => {
                    tracing::debug!(error = %e, "updating an event failed");
                    return None;
                }
            }
        }
    };
    let namespace = p.namespace.clone();
    let ev = new_event(component, p, n);
    match registry.create(ev, Some(&namespace)).await {
        Ok(e) => Some((namespace, e.metadata.name, n, true)),
        Err(e) => {
            // A namespace being deleted refuses new objects; the event is not worth more.
            tracing::debug!(error = %e, "recording an event failed");
            None
        }
    }
}

/// A Normal event about `obj` from `component`, to be created by the caller: how the
/// scheduler writes its Scheduled event together with the binding.
pub fn normal_event<K: Resource>(obj: &K, component: &str, reason: &str, message: String) -> Event {
    new_event(
        component,
        Pending::new(reference(obj), "Normal", reason, message),
        1,
    )
}

/// The Event of `n` occurrences of `p`.
fn new_event(component: &str, p: Pending, n: i32) -> Event {
    let object_name = p.involved.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: event_name(&object_name),
            namespace: Some(p.namespace.clone()),
            ..Default::default()
        },
        involved_object: p.involved,
        reason: Some(p.reason),
        message: Some(p.message),
        source: Some(EventSource {
            component: Some(component.to_string()),
            host: None,
        }),
        first_timestamp: Some(p.at),
        last_timestamp: Some(p.at),
        count: Some(n),
        type_: Some(p.type_.to_string()),
        reporting_component: Some(component.to_string()),
        reporting_instance: Some(component.to_string()),
        ..Default::default()
    }
}

/// Deletes events last seen more than [`EVENT_TTL`] ago, and the oldest beyond [`MAX_EVENTS`].
/// Sweeps expired and surplus events every `every`, forever (one task per server).
pub async fn run_sweeper(registry: Registry, every: Duration) {
    loop {
        match sweep(&registry).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(removed = n, "swept expired events"),
            Err(e) => tracing::warn!(error = %e, "sweeping expired events failed"),
        }
        smol::Timer::after(every).await;
    }
}

pub async fn sweep(registry: &Registry) -> Result<usize, crate::store::StoreError> {
    // One event at a time: a list of 10,000 decoded Events would hold tens of MiB at once
    // (each decoded object takes the room of the largest kind).
    let (mut events, _) = registry
        .store
        .list_page(
            Kind::Event,
            None,
            None,
            0,
            Vec::<(i64, String, String)>::new(),
            |events, o| {
                let Some(e) = Event::from_any_ref(&o) else {
                    return false;
                };
                let seen = e
                    .last_timestamp
                    .or(e.event_time)
                    .or(e.first_timestamp)
                    .or(e.metadata.creation_timestamp)
                    .map_or(0, |t| t.0);
                events.push((
                    seen,
                    e.metadata.namespace.clone().unwrap_or_default(),
                    e.metadata.name.clone(),
                ));
                true
            },
        )
        .await?;
    let now = Time::now().0;
    events.sort();
    let excess = events.len().saturating_sub(MAX_EVENTS);
    let mut removed = 0;
    for (i, (seen, ns, name)) in events.into_iter().enumerate() {
        if i >= excess && now - seen < EVENT_TTL.as_secs() as i64 {
            break;
        }
        match registry
            .delete::<Event>(&ns, &name, DeleteOptions::default())
            .await
        {
            Ok(_) => removed += 1,
            Err(e) if e.code() == 404 => {}
            Err(e) => tracing::debug!(error = %e, "deleting an expired event failed"),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreConfig};

    async fn registry_with_default_namespace(dir: &std::path::Path) -> Registry {
        let store = Store::open(StoreConfig::in_dir(dir)).expect("store");
        let registry = Registry::new(store);
        let mut ns = api::core::Namespace::default();
        ns.metadata.name = "default".into();
        registry.create(ns, None).await.expect("namespace");
        registry
    }

    #[test]
    fn the_sweep_removes_events_older_than_an_hour() {
        let dir = tempfile::tempdir().expect("tempdir");
        smol::block_on(async {
            let registry = registry_with_default_namespace(dir.path()).await;
            let now = Time::now().0;
            for (name, seen) in [("old", now - 3700), ("fresh", now - 60)] {
                let ev = Event {
                    metadata: ObjectMeta {
                        name: name.into(),
                        namespace: Some("default".into()),
                        ..Default::default()
                    },
                    reason: Some("Tested".into()),
                    first_timestamp: Some(Time(seen)),
                    last_timestamp: Some(Time(seen)),
                    count: Some(1),
                    ..Default::default()
                };
                registry.create(ev, None).await.expect("event");
            }
            assert_eq!(sweep(&registry).await.expect("sweep"), 1);
            assert!(registry.get::<Event>("default", "old").await.is_err());
            assert!(registry.get::<Event>("default", "fresh").await.is_ok());
        });
    }
    fn pod_ref(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            api_version: Some("v1".into()),
            ..Default::default()
        }
    }

    async fn events_of(registry: &Registry) -> Vec<Event> {
        let (items, _) = registry.store.list(Kind::Event, None).await.expect("list");
        items
            .iter()
            .filter_map(|o| Event::from_any_ref(o).cloned())
            .collect()
    }

    /// Waits until the store's revision has not moved for a while; returns it.
    async fn settled(registry: &Registry) -> u64 {
        let mut last = registry.store.revision();
        loop {
            smol::Timer::after(Duration::from_millis(150)).await;
            let now = registry.store.revision();
            if now == last {
                return now;
            }
            last = now;
        }
    }

    #[test]
    fn repeats_beyond_the_second_stay_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        smol::block_on(async {
            let registry = registry_with_default_namespace(dir.path()).await;
            let rec = Recorder::start(registry.clone(), "test-scheduler");
            let before = settled(&registry).await;
            let mut revisions = Vec::new();
            for _ in 0..6 {
                rec.record(
                    pod_ref("web"),
                    "Warning",
                    "FailedScheduling",
                    "0/0 nodes".into(),
                );
                revisions.push(settled(&registry).await);
            }
            // The event, then the start of its series; nothing after that.
            assert_eq!(revisions[0], before + 1, "{revisions:?}");
            assert_eq!(revisions[1], before + 2, "{revisions:?}");
            assert!(
                revisions[2..].iter().all(|&r| r == before + 2),
                "{revisions:?}"
            );
            let events = events_of(&registry).await;
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].count, Some(2));
            // Another message is another series, written at once.
            rec.record(
                pod_ref("web"),
                "Warning",
                "FailedScheduling",
                "0/1 nodes".into(),
            );
            assert_eq!(settled(&registry).await, before + 3);
        });
    }

    #[test]
    fn series_keys_tell_every_field_apart() {
        let base = ["uid-1", "Pod", "Warning", "FailedScheduling", "0/1 nodes"];
        let of = |f: [&str; 5]| SeriesKey::of(f[0], f[1], f[2], f[3], f[4]);
        assert_eq!(of(base), of(base));
        for i in 0..5 {
            let mut other = base;
            other[i] = "x";
            assert_ne!(of(other), of(base), "field {i}");
        }
        // Fields do not run into each other.
        assert_ne!(
            of(["ab", "c", "Warning", "r", "m"]),
            of(["a", "bc", "Warning", "r", "m"])
        );
    }

    #[test]
    fn due_series_are_refreshed_and_finished_ones_forgotten() {
        let now = 10_000;
        let series_of = |count, written, seen, wrote| Series {
            count,
            written,
            last_seen: now - seen,
            last_write: now - wrote,
            ..Series::new("default", "web.1", count, now)
        };
        let names: HashMap<SeriesKey, &str> = ["quiet", "refresh", "finish", "done"]
            .into_iter()
            .map(|n| {
                (
                    SeriesKey::of(n, "Pod", "Warning", "FailedScheduling", "m"),
                    n,
                )
            })
            .collect();
        let key = |n: &str| SeriesKey::of(n, "Pod", "Warning", "FailedScheduling", "m");
        let mut series: HashMap<SeriesKey, Series> = HashMap::new();
        // Recurring, written recently: nothing to do.
        series.insert(key("quiet"), series_of(9, 2, 30, 600));
        // Recurring, unwritten for longer than the refresh time: written, kept.
        series.insert(key("refresh"), series_of(40, 2, 30, 1900));
        // Not seen for longer than the finish time with unwritten counts: written, forgotten.
        series.insert(key("finish"), series_of(5, 2, 400, 400));
        // Finished with nothing unwritten: forgotten without a write.
        series.insert(key("done"), series_of(2, 2, 400, 400));
        let mut due: Vec<String> = due_series(&mut series, now)
            .into_iter()
            .map(|(k, w)| match w {
                Write::Count {
                    count,
                    namespace,
                    name,
                    ..
                } => {
                    assert_eq!((namespace.as_str(), name.as_str()), ("default", "web.1"));
                    format!("{}={count}", names[&k])
                }
                Write::Create(..) => panic!("a due series is never created"),
            })
            .collect();
        due.sort();
        assert_eq!(due, ["finish=5", "refresh=40"]);
        let mut left: Vec<&str> = series.keys().map(|k| names[k]).collect();
        left.sort();
        assert_eq!(left, ["quiet", "refresh"]);
    }
}
