//! Events: what the scheduler and the controllers did, as core/v1 Event objects.
//!
//! Recording never blocks the caller: events go through a bounded channel to one task that
//! coalesces repeats (same object, type, reason and message) into one Event whose `count` and
//! `lastTimestamp` move, and writes a batch of them concurrently so the store's group commit
//! turns the batch into one fsync. When the channel is full (a burst of thousands of pods
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
        let (tx, rx) = async_channel::bounded(BACKLOG);
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

/// Identity of a series of repeated events.
type SeriesKey = (String, String, &'static str, String, String);

struct Series {
    namespace: String,
    name: String,
    last_seen: Instant,
}

fn series_key(p: &Pending) -> SeriesKey {
    let who = p
        .involved
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}/{:?}", p.namespace, p.involved.name));
    (
        who,
        p.involved.kind.clone().unwrap_or_default(),
        p.type_,
        p.reason.clone(),
        p.message.clone(),
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

async fn write_loop(registry: Registry, component: String, rx: Receiver<Pending>) {
    let mut series: HashMap<SeriesKey, Series> = HashMap::new();
    let mut last_sweep = Instant::now();
    loop {
        let first =
            match futures_lite::future::or(async { rx.recv().await.ok().map(Some) }, async {
                smol::Timer::after(SWEEP_EVERY).await;
                Some(None)
            })
            .await
            {
                None => return,
                Some(p) => p,
            };
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            // The store's expired events go in one sweeper task for all recorders
            // ([`run_sweeper`]); here only the memory of old series goes.
            series.retain(|_, s| s.last_seen.elapsed() < EVENT_TTL);
        }
        let Some(first) = first else { continue };
        // Coalesce what is queued: repeats of one series become one write.
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
        let mut tasks = Vec::with_capacity(batch.len());
        for (p, n) in batch {
            let key = series_key(&p);
            let existing = series
                .get(&key)
                .map(|s| (s.namespace.clone(), s.name.clone()));
            let registry = registry.clone();
            let component = component.clone();
            tasks.push((
                key,
                smol::spawn(async move { write_one(&registry, &component, p, n, existing).await }),
            ));
        }
        for (key, task) in tasks {
            if let Some((namespace, name)) = task.await {
                series.insert(
                    key,
                    Series {
                        namespace,
                        name,
                        last_seen: Instant::now(),
                    },
                );
            }
        }
        if series.len() > MAX_EVENTS * 2 {
            // Forget the oldest series; their events stay until the sweep.
            let mut ages: Vec<_> = series
                .iter()
                .map(|(k, s)| (s.last_seen, k.clone()))
                .collect();
            ages.sort();
            for (_, k) in ages.into_iter().take(MAX_EVENTS) {
                series.remove(&k);
            }
        }
    }
}

/// Writes one event (a new one, or one more occurrence of an existing series); returns the
/// series' namespace and name.
async fn write_one(
    registry: &Registry,
    component: &str,
    p: Pending,
    n: i32,
    existing: Option<(String, String)>,
) -> Option<(String, String)> {
    if let Some((ns, name)) = existing {
        let at = p.at;
        let updated = registry
            .mutate::<Event>(&ns, &name, Part::Main, move |e| {
                e.count = Some(e.count.unwrap_or(1).saturating_add(n));
                e.last_timestamp = Some(at);
                Ok(())
            })
            .await;
        match updated {
            Ok(_) => return Some((ns, name)),
            Err(e) if e.code() == 404 => {} // expired meanwhile: start a new one
            Err(e) => {
                tracing::debug!(error = %e, "updating an event failed");
                return None;
            }
        }
    }
    let namespace = p.namespace.clone();
    let ev = new_event(component, p, n);
    match registry.create(ev, Some(&namespace)).await {
        Ok(e) => Some((namespace, e.metadata.name)),
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
    let (items, _) = registry.store.list(Kind::Event, None).await?;
    let now = Time::now().0;
    let mut events: Vec<(i64, String, String)> = items
        .iter()
        .filter_map(|o| Event::from_any_ref(o))
        .map(|e| {
            let seen = e
                .last_timestamp
                .or(e.event_time)
                .or(e.first_timestamp)
                .or(e.metadata.creation_timestamp)
                .map_or(0, |t| t.0);
            (
                seen,
                e.metadata.namespace.clone().unwrap_or_default(),
                e.metadata.name.clone(),
            )
        })
        .collect();
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

    #[test]
    fn the_sweep_removes_events_older_than_an_hour() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig::in_dir(dir.path())).expect("store");
        let registry = Registry::new(store);
        smol::block_on(async {
            let mut ns = api::core::Namespace::default();
            ns.metadata.name = "default".into();
            registry.create(ns, None).await.expect("namespace");
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
}
