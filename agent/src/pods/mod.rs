//! Pods bound to this node: the watch (list + watch with resume, re-list on 410), the local
//! cache of desired pods, one worker task per pod, and re-adoption after a restart.
//!
//! ```text
//! PodManager::new(Context) ; manager.run().await      // never returns
//! ```

pub mod cache;
pub mod container;
pub mod events;
pub mod machine;
pub mod probe;
pub mod pull_secrets;
pub mod status;
pub mod tokens;
pub mod volumes;
pub mod worker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use api::client::{Client, ClientError, WatchEvent};
use api::core::{Pod, PodSpec};
use api::meta::Time;
use async_channel::Sender;
use futures_lite::StreamExt;
use smol::Task;

pub use cache::{CacheError, CacheWriter, PodCache};
use worker::PodUpdate;

use crate::image::{ImageStore, PullOptions};
use crate::runtime::Runtime;

/// What every pod worker shares.
pub struct Context {
    pub runtime: Arc<Runtime>,
    pub images: ImageStore,
    pub client: Client,
    pub cache: Arc<PodCache>,
    /// Writes to `cache` in the background.
    pub cache_writes: CacheWriter,
    pub node_name: String,
    /// The kubelet events of the pods (Pulled, Started, BackOff, ...).
    pub events: events::EventRecorder,
    /// The node's InternalIP: hostIP, and podIP of hostNetwork pods.
    pub node_ip: String,
    /// The pod network: addresses, veths, hostPorts.
    pub network: Arc<crate::net::Network>,
    /// `<data-dir>/pods`: per-pod root filesystems and logs.
    pub pods_dir: PathBuf,
    /// Leftovers of unknown pods being removed (see [`Leftovers`]).
    pub leftovers: Leftovers,
    pub pull_options: PullOptions,
    pub allow_privileged: bool,
    /// What the pods' /etc/resolv.conf and /etc/hosts are made from.
    pub dns: crate::dns::PodDns,
}

struct Handle {
    updates: Sender<PodUpdate>,
    task: Task<()>,
}

/// The pods whose leftovers (containers, sandbox, directory of a pod the agent did not know at
/// its start) are being removed in the background. A worker for such a pod, should the API
/// still want it (a data dir wiped while its containers ran), starts once its leftovers are
/// gone; every other pod starts at once.
#[derive(Clone, Default)]
pub struct Leftovers {
    removing: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    removed: Arc<event_listener::Event>,
}

impl Leftovers {
    fn begin(&self, uids: &[String]) {
        let mut r = self.removing.lock().unwrap_or_else(|e| e.into_inner());
        r.extend(uids.iter().cloned());
    }

    fn done(&self, uid: &str) {
        self.removing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.removed.notify(usize::MAX);
    }

    fn is_removing(&self, uid: &str) -> bool {
        self.removing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    /// Waits until the leftovers of pod `uid`, if any, are gone.
    pub async fn cleared(&self, uid: &str) {
        loop {
            let listener = self.removed.listen();
            if !self.is_removing(uid) {
                return;
            }
            listener.await;
        }
    }
}

/// What the cache holds of a pod: written again only when this changes.
#[derive(PartialEq)]
struct CachedPart {
    spec: PodSpec,
    deletion: Option<Time>,
}

/// Keeps one worker per desired pod, fed from the API watch (or the cache while offline).
pub struct PodManager {
    ctx: Arc<Context>,
    workers: HashMap<String, Handle>,
    cached: HashMap<String, CachedPart>,
}

/// Whether a watch/list error means "your resourceVersion is too old".
fn is_expired(e: &ClientError) -> bool {
    e.code() == Some(410)
}

impl PodManager {
    pub fn new(ctx: Context) -> PodManager {
        PodManager {
            ctx: Arc::new(ctx),
            workers: HashMap::new(),
            cached: HashMap::new(),
        }
    }

    /// Starts the pods of the local cache (so a node that reboots without the server runs
    /// them), cleans up runtime leftovers of pods it does not know, then follows the API.
    pub async fn run(mut self) {
        let cache = self.ctx.cache.clone();
        let cached = smol::unblock(move || cache.list())
            .await
            .unwrap_or_else(|e| {
                tracing::warn!("{e}");
                Vec::new()
            });
        tracing::info!(pods = cached.len(), "starting pods from the local cache");
        for pod in cached {
            self.cached.insert(
                pod.metadata.uid.clone(),
                CachedPart {
                    spec: pod.spec.clone(),
                    deletion: pod.metadata.deletion_timestamp,
                },
            );
            self.desired(pod).await;
        }
        self.clean_leftovers().await;
        self.follow().await;
    }

    /// Starts removing the sandboxes, containers and pod directories of pods that are not
    /// desired, all at once and in the background: a container that ignores SIGTERM takes
    /// its whole grace period, and the pods the node should run do not wait for it.
    async fn clean_leftovers(&self) {
        let known: Vec<String> = self.workers.keys().cloned().collect();
        let rt = self.ctx.runtime.clone();
        let pods_dir = self.ctx.pods_dir.clone();
        let network = self.ctx.network.clone();
        let (uids, containers) = smol::unblock(move || {
            network.release_unknown(&known);
            let containers = rt.list().unwrap_or_default();
            let mut uids: Vec<String> = rt.list_sandboxes().unwrap_or_default();
            uids.extend(containers.iter().map(|id| id.pod_uid().to_string()));
            if let Ok(rd) = std::fs::read_dir(&pods_dir) {
                uids.extend(
                    rd.flatten()
                        .filter_map(|e| e.file_name().into_string().ok()),
                );
            }
            uids.sort();
            uids.dedup();
            uids.retain(|u| !known.contains(u));
            (uids, containers)
        })
        .await;
        if uids.is_empty() {
            return;
        }
        self.ctx.leftovers.begin(&uids);
        for uid in uids {
            let ids: Vec<_> = containers
                .iter()
                .filter(|id| id.pod_uid() == uid)
                .cloned()
                .collect();
            let ctx = self.ctx.clone();
            smol::spawn(async move {
                tracing::info!(%uid, "removing leftovers of a pod no longer on this node");
                // Each container stops on a thread of its own: their grace periods overlap.
                let stops: Vec<_> = ids
                    .into_iter()
                    .map(|id| {
                        let rt = ctx.runtime.clone();
                        smol::unblock(move || {
                            let _ = rt.stop(&id, Duration::from_secs(10));
                        })
                    })
                    .collect();
                for stop in stops {
                    stop.await;
                }
                let (rt, dir, u) = (ctx.runtime.clone(), ctx.pods_dir.join(&uid), uid.clone());
                smol::unblock(move || {
                    if let Err(e) = rt.remove_sandbox(&u) {
                        tracing::warn!(uid = %u, "{e}");
                    }
                    worker::cleanup_pod_dir(&dir);
                })
                .await;
                ctx.leftovers.done(&uid);
            })
            .detach();
        }
    }

    /// Hands the pod to its worker (starting one if needed) and updates the cache.
    async fn desired(&mut self, pod: Pod) {
        let uid = pod.metadata.uid.clone();
        if uid.is_empty() {
            return;
        }
        let part = CachedPart {
            spec: pod.spec.clone(),
            deletion: pod.metadata.deletion_timestamp,
        };
        if self.cached.get(&uid) != Some(&part) {
            // Written in the background: the worker need not wait for the disk.
            self.ctx.cache_writes.put(&pod);
            self.cached.insert(uid.clone(), part);
        }
        if let Some(h) = self.workers.get(&uid) {
            if !h.task.is_finished()
                && h.updates
                    .try_send(PodUpdate::Desired(Box::new(pod.clone())))
                    .is_ok()
            {
                return;
            }
            if pod.metadata.deletion_timestamp.is_some() {
                // The worker finished its teardown; the confirmation is in flight.
                return;
            }
        }
        let (tx, rx) = async_channel::unbounded();
        let task = smol::spawn(worker::run(self.ctx.clone(), pod, rx));
        self.workers.insert(uid, Handle { updates: tx, task });
    }

    /// The pod is gone from the API.
    fn gone(&mut self, uid: &str) {
        if let Some(h) = self.workers.get(uid) {
            let _ = h.updates.try_send(PodUpdate::Gone);
        } else {
            self.ctx.cache_writes.remove(uid);
        }
        self.cached.remove(uid);
    }

    fn prune_finished(&mut self) {
        self.workers.retain(|_, h| !h.task.is_finished());
    }

    /// List + watch of the pods bound to this node: a watch that ends normally is resumed from
    /// the last resourceVersion; after 410 Gone or a broken stream the pods are listed again.
    async fn follow(&mut self) {
        let field = format!("spec.nodeName={}", self.ctx.node_name);
        let mut rv = String::new();
        let mut failures = 0u32;
        loop {
            self.prune_finished();
            if rv.is_empty() {
                match self.ctx.client.list::<Pod>(None, None, Some(&field)).await {
                    Ok((pods, list_rv)) => {
                        failures = 0;
                        let listed: std::collections::HashSet<String> =
                            pods.iter().map(|p| p.metadata.uid.clone()).collect();
                        let known: Vec<String> = self.workers.keys().cloned().collect();
                        for uid in known.iter().filter(|u| !listed.contains(*u)) {
                            self.gone(uid);
                        }
                        for pod in pods {
                            self.desired(pod).await;
                        }
                        rv = list_rv;
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::warn!("cannot list pods: {e}");
                        smol::Timer::after(retry_delay(failures)).await;
                        continue;
                    }
                }
            }
            let stream = self
                .ctx
                .client
                .watch::<Pod>(
                    None,
                    &rv,
                    None,
                    Some(&field),
                    Some(Duration::from_secs(300)),
                )
                .await;
            let mut stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    if is_expired(&e) {
                        rv.clear();
                    } else {
                        failures += 1;
                        tracing::warn!("cannot watch pods: {e}");
                        smol::Timer::after(retry_delay(failures)).await;
                    }
                    continue;
                }
            };
            failures = 0;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                        rv = p.metadata.resource_version.clone();
                        self.desired(p).await;
                    }
                    Ok(WatchEvent::Deleted(p)) => {
                        rv = p.metadata.resource_version.clone();
                        self.gone(&p.metadata.uid);
                    }
                    Ok(WatchEvent::Bookmark { resource_version }) => rv = resource_version,
                    Err(e) => {
                        // Expired or broken: start over with a fresh list (a node's pods
                        // are few, and a list also catches deletions the watch missed).
                        if !is_expired(&e) {
                            tracing::warn!("pod watch broke: {e}");
                        }
                        rv.clear();
                        break;
                    }
                }
                self.prune_finished();
            }
        }
    }
}

fn retry_delay(failures: u32) -> Duration {
    Duration::from_millis(500u64 << failures.min(4)).min(Duration::from_secs(5))
}
