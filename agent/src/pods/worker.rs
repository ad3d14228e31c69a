//! One task per pod: performs what the pod's [`Stage`] calls for (images, sandbox, root
//! filesystems, containers, supervision, teardown), feeds events to [`machine::step`], and
//! reports the status. Runtime and image store calls block, so they run on `smol::unblock`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::client::{resource_path, ClientError};
use api::core::{ConfigMap, Pod, PodCondition, PodStatus, Secret};
use api::meta::{DeleteOptions, Preconditions, Time};
use api::object::Kind;
use async_channel::Receiver;
use futures_lite::future;
use smol::Timer;

use super::container::{self, EnvSources};
use super::events::{go_duration, EventType};
use super::machine::{self, Event, Stage};
use super::probe::{self, ProbeKind, ProbeTarget, Verdict};
use super::status::{self, ContainerRecord, ExitWatch, Termination, BACKOFF_MAX, BACKOFF_START};
use super::volumes::{self, VolumeError};
use super::Context;
use crate::image::{unmount_rootfs, PullPolicy, RegistryAuth};
use crate::runtime::stdio::StdinMode;
use crate::runtime::{
    ContainerId, ContainerSpec, ContainerState, MountSpec, RuntimeError, Sandbox, SandboxConfig,
};

/// What the manager tells a worker.
#[derive(Debug)]
pub enum PodUpdate {
    /// The pod as the API (or the local cache) has it now.
    Desired(Box<Pod>),
    /// The pod no longer exists: tear down without confirming to the API.
    Gone,
}

/// How often a running pod's containers are looked at when their exits cannot be waited for.
const SUPERVISE_EVERY: Duration = Duration::from_secs(1);
/// How often they are looked at anyway when every exit is watched (a safety net only: an exit
/// wakes the worker at once).
const SUPERVISE_WATCHED: Duration = Duration::from_secs(30);
/// How often an init container is looked at while it runs.
const INIT_POLL: Duration = Duration::from_millis(200);
/// How long after a failed status report the next one is tried.
const REPORT_RETRY: Duration = Duration::from_secs(5);
/// How long a container waits for its pod's volumes (FailedMount) before the next try.
const VOLUME_RETRY: Duration = Duration::from_secs(2);

struct Worker {
    ctx: Arc<Context>,
    pod: Pod,
    gone: bool,
    stage: Stage,
    containers: Vec<ContainerRecord>,
    init_count: usize,
    sandbox: Option<Sandbox>,
    /// The pod's address once its network is set up (the node's for hostNetwork pods).
    pod_ip: Option<String>,
    start_time: Option<Time>,
    message: Option<String>,
    image_retry: Option<Instant>,
    image_backoff: Duration,
    sandbox_retry: Option<Instant>,
    adoption_checked: bool,
    torn_down: bool,
    last_reported: Option<PodStatus>,
    report_failed_at: Option<Instant>,
    /// When ConfigMap/Secret volumes were last compared with the API.
    volumes_synced: Option<Instant>,
}

/// Runs the pod's worker until the pod is gone from the node.
pub async fn run(ctx: Arc<Context>, pod: Pod, updates: Receiver<PodUpdate>) {
    // A pod whose old containers the agent is still removing starts once they are gone.
    ctx.leftovers.cleared(&pod.metadata.uid).await;
    let mut w = Worker::new(ctx, pod);
    // A pod already being deleted (e.g. from the cache after a restart) is only cleaned up.
    w.check_deletion();
    let uid = w.pod.metadata.uid.clone();
    tracing::info!(pod = %w.key(), %uid, "pod worker started");
    let mut closed = false;
    loop {
        while let Ok(u) = updates.try_recv() {
            w.apply(u);
        }
        let wait = w.sync().await;
        if w.stage == Stage::Gone {
            tracing::info!(pod = %w.key(), %uid, "pod removed from the node");
            return;
        }
        if wait.is_zero() {
            // More to do at once (the next stage): report once the pod settles, so a starting
            // pod is not held up by a status write per stage.
            continue;
        }
        w.report().await;
        let exited = w.any_exit();
        let timer_or_exit = future::or(exited, async {
            Timer::after(wait).await;
        });
        let next = if closed {
            timer_or_exit.await;
            None
        } else {
            future::or(async { Some(updates.recv().await) }, async {
                timer_or_exit.await;
                None
            })
            .await
        };
        match next {
            Some(Ok(u)) => w.apply(u),
            Some(Err(_)) => closed = true,
            None => {}
        }
    }
}

fn pull_policy(c: &api::core::Container) -> PullPolicy {
    let image = c.image.as_deref().unwrap_or("");
    PullPolicy::parse(c.image_pull_policy.as_deref().unwrap_or(""), image)
        .unwrap_or_else(|| PullPolicy::default_for(image))
}

/// Unmounts every container root filesystem left in a pod directory and removes it (unless
/// something is still mounted there).
pub fn cleanup_pod_dir(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut still_mounted = !volumes::tear_down(dir);
    for e in entries.flatten() {
        let d = e.path();
        let target = d.join("rootfs");
        if target.exists() {
            let _ = unmount_rootfs(&d.join("overlay"), &target);
            if is_mount_point(&target) {
                still_mounted = true;
            }
        }
    }
    if !still_mounted {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn is_mount_point(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(p), p.parent().map(std::fs::metadata)) {
        (Ok(m), Some(Ok(parent))) => m.dev() != parent.dev(),
        _ => false,
    }
}

fn time_of(t: Option<std::time::SystemTime>) -> Time {
    t.map_or_else(Time::now, Time::from_system)
}

impl Worker {
    fn new(ctx: Arc<Context>, pod: Pod) -> Worker {
        let mut containers: Vec<ContainerRecord> = pod
            .spec
            .init_containers
            .iter()
            .map(|c| ContainerRecord::new(c.clone(), true))
            .collect();
        let init_count = containers.len();
        containers.extend(
            pod.spec
                .containers
                .iter()
                .map(|c| ContainerRecord::new(c.clone(), false)),
        );
        containers.extend(
            pod.spec
                .ephemeral_containers
                .iter()
                .map(ContainerRecord::new_ephemeral),
        );
        Worker {
            ctx,
            pod,
            gone: false,
            stage: Stage::Preparing,
            containers,
            init_count,
            sandbox: None,
            pod_ip: None,
            start_time: None,
            message: None,
            image_retry: None,
            image_backoff: BACKOFF_START,
            sandbox_retry: None,
            adoption_checked: false,
            torn_down: false,
            last_reported: None,
            report_failed_at: None,
            volumes_synced: None,
        }
    }

    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.pod.metadata.namespace(),
            self.pod.metadata.name
        )
    }

    fn uid(&self) -> String {
        self.pod.metadata.uid.clone()
    }

    fn pod_dir(&self) -> PathBuf {
        self.ctx.pods_dir.join(&self.pod.metadata.uid)
    }

    fn apply(&mut self, u: PodUpdate) {
        match u {
            PodUpdate::Desired(p) => {
                if p.metadata.uid == self.pod.metadata.uid {
                    self.pod = *p;
                    self.add_ephemeral();
                }
            }
            PodUpdate::Gone => self.gone = true,
        }
        self.check_deletion();
    }

    /// Records the ephemeral containers added to the pod since (`kubectl debug`); the next
    /// round of a running pod starts them.
    fn add_ephemeral(&mut self) {
        for ec in &self.pod.spec.ephemeral_containers {
            if !self
                .containers
                .iter()
                .any(|c| c.ephemeral && c.name() == ec.name)
            {
                tracing::info!(pod = %self.key(), container = %ec.name, "ephemeral container added");
                self.containers.push(ContainerRecord::new_ephemeral(ec));
            }
        }
    }

    /// Moves to Terminating once the pod is being deleted (or gone).
    fn check_deletion(&mut self) {
        let deleting = self.gone || self.pod.metadata.deletion_timestamp.is_some();
        if deleting && !matches!(self.stage, Stage::Terminating | Stage::Gone) {
            self.advance(Event::DeleteRequested);
        }
    }

    fn advance(&mut self, event: Event) {
        match machine::step(&self.stage, &event) {
            Ok(next) => {
                tracing::debug!(pod = %self.key(), from = ?self.stage, to = ?next, "pod stage");
                self.stage = machine::settle(next, self.init_count);
            }
            Err(e) => tracing::warn!(pod = %self.key(), "{e}"),
        }
    }

    /// Does what the stage calls for; answers how long to wait before the next round.
    async fn sync(&mut self) -> Duration {
        match self.stage.clone() {
            Stage::Preparing => self.prepare().await,
            Stage::CreatingSandbox => self.create_sandbox().await,
            Stage::Initializing { index } => self.run_init(index).await,
            Stage::Running => {
                self.refresh_volumes().await;
                self.supervise().await
            }
            Stage::Finished { .. } | Stage::Rejected { .. } => Duration::from_secs(30),
            Stage::Terminating => self.teardown().await,
            Stage::Gone => Duration::ZERO,
        }
    }

    // ---- preparing -----------------------------------------------------------------------

    async fn prepare(&mut self) -> Duration {
        if let Some(what) = container::needs_privilege(&self.pod) {
            if !self.ctx.allow_privileged {
                self.advance(Event::Rejected {
                    message: format!(
                        "{what} is not allowed on node {}: start skiff-agent with --allow-privileged",
                        self.ctx.node_name
                    ),
                });
                return Duration::ZERO;
            }
        }
        if self.pod.spec.share_process_namespace == Some(true) {
            self.advance(Event::Rejected {
                message: "shareProcessNamespace is not supported by skiff".into(),
            });
            return Duration::ZERO;
        }
        if let Err(e) = volumes::check_spec(&self.pod.spec) {
            self.advance(Event::Rejected {
                message: e.to_string(),
            });
            return Duration::ZERO;
        }
        if !self.adoption_checked {
            self.adoption_checked = true;
            if self.try_adopt().await {
                self.advance(Event::Adopted);
                return Duration::ZERO;
            }
        }
        if let Some(at) = self.image_retry {
            let now = Instant::now();
            if at > now {
                for c in &mut self.containers {
                    if let Some((reason, msg)) = &mut c.waiting {
                        if reason == "ErrImagePull" {
                            *reason = "ImagePullBackOff".into();
                            *msg = format!(
                                "Back-off pulling image {:?}",
                                c.spec.image.as_deref().unwrap_or("")
                            );
                            let events = &self.ctx.events;
                            let (name, init) = (c.spec.name.as_str(), c.init);
                            events.container(
                                &self.pod,
                                name,
                                init,
                                EventType::Normal,
                                "BackOff",
                                msg.clone(),
                            );
                            events.container(
                                &self.pod,
                                name,
                                init,
                                EventType::Warning,
                                "Failed",
                                "Error: ImagePullBackOff".into(),
                            );
                        }
                    }
                }
                return at - now;
            }
        }
        let mut failed = false;
        let secrets = self.pull_secrets().await;
        for i in 0..self.containers.len() {
            if self.containers[i].image.is_some() {
                continue;
            }
            let c = &self.containers[i].spec;
            let reference = c.image.clone().unwrap_or_default();
            let policy = pull_policy(c);
            let auth = super::pull_secrets::auth_for(&reference, &secrets)
                .unwrap_or(RegistryAuth::Anonymous);
            let (name, init) = (c.name.clone(), self.containers[i].init);
            let event = |type_, reason: &str, message: String| {
                self.ctx
                    .events
                    .container(&self.pod, &name, init, type_, reason, message)
            };
            // As the kubelet: Pulling/Pulled around a pull, "already present" otherwise.
            let pulls = match policy {
                PullPolicy::Never => false,
                PullPolicy::IfNotPresent => self.ctx.images.resolve(&reference).is_none(),
                PullPolicy::Always => true,
            };
            if pulls {
                event(
                    EventType::Normal,
                    "Pulling",
                    format!("Pulling image {reference:?}"),
                );
            }
            let began = Instant::now();
            let result = self
                .ctx
                .images
                .ensure(&reference, policy, &auth, &self.ctx.pull_options)
                .await;
            match &result {
                Ok(info) if pulls => {
                    let took = go_duration(began.elapsed());
                    event(
                        EventType::Normal,
                        "Pulled",
                        format!(
                            "Successfully pulled image {reference:?} in {took} ({took} including waiting). Image size: {} bytes.",
                            info.size
                        ),
                    );
                }
                Ok(_) => event(
                    EventType::Normal,
                    "Pulled",
                    format!("Container image {reference:?} already present on machine"),
                ),
                Err(e) => {
                    // The kubelet's reasons and messages for each kind of failure.
                    let (reason, message) = match e.reason() {
                        "ErrImageNeverPull" => (
                            "ErrImageNeverPull",
                            format!("Container image {reference:?} is not present with pull policy of Never"),
                        ),
                        "InvalidImageName" => (
                            "InspectFailed",
                            format!("Failed to apply default image tag {reference:?}: {e}"),
                        ),
                        _ => ("Failed", format!("Failed to pull image {reference:?}: {e}")),
                    };
                    event(EventType::Warning, reason, message);
                    event(
                        EventType::Warning,
                        "Failed",
                        format!("Error: {}", e.reason()),
                    );
                }
            }
            let rec = &mut self.containers[i];
            match result {
                Ok(info) => {
                    rec.image = Some(info);
                    rec.waiting = None;
                }
                Err(e) => {
                    tracing::warn!(pod = %self.pod.metadata.name, image = %reference, "{e}");
                    rec.waiting = Some((e.reason().to_string(), e.to_string()));
                    failed = true;
                }
            }
        }
        if failed {
            let wait = self.image_backoff;
            self.image_retry = Some(Instant::now() + wait);
            self.image_backoff = (self.image_backoff * 2).min(BACKOFF_MAX);
            return wait.min(Duration::from_secs(1));
        }
        self.image_retry = None;
        self.advance(Event::ImagesReady);
        Duration::ZERO
    }

    /// After an agent restart: takes over the pod's sandbox and containers if its app
    /// containers exist; otherwise clears whatever is left so the pod starts afresh.
    async fn try_adopt(&mut self) -> bool {
        let uid = self.uid();
        let rt = self.ctx.runtime.clone();
        let found = smol::unblock(move || -> Result<_, RuntimeError> {
            let sandbox = rt.sandbox(&uid)?;
            let ids: Vec<ContainerId> = rt
                .list()?
                .into_iter()
                .filter(|id| id.pod_uid() == uid)
                .collect();
            let mut states = Vec::new();
            for id in ids {
                let st = rt.state(&id).unwrap_or(ContainerState::Unknown);
                let started = rt.started_at(&id);
                states.push((id, st, started));
            }
            Ok((sandbox, states))
        })
        .await;
        let (sandbox, states) = match found {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(pod = %self.key(), "cannot inspect the runtime: {e}");
                (None, Vec::new())
            }
        };
        let app_found = states.iter().any(|(id, _, _)| {
            self.containers
                .iter()
                .any(|c| c.is_app() && c.name() == id.name())
        });
        let (Some(sandbox), true) = (sandbox, app_found) else {
            if !states.is_empty() || self.pod_dir().exists() {
                self.remove_everything().await;
            }
            return false;
        };
        let previous = self.pod.status.clone();
        for rec in &mut self.containers {
            rec.image = rec
                .spec
                .image
                .as_deref()
                .and_then(|r| self.ctx.images.resolve(r));
            let old = previous
                .container_statuses
                .iter()
                .chain(&previous.init_container_statuses)
                .chain(&previous.ephemeral_container_statuses)
                .find(|s| s.name == rec.spec.name);
            rec.restart_count = old.map_or(0, |s| s.restart_count);
            let found = states.iter().any(|(id, _, _)| id.name() == rec.spec.name);
            if rec.ephemeral && !found {
                // Never run twice: one that ran (its status says so) but whose container is
                // gone is reported as it was last seen, terminated.
                if let Some(state) = old.and_then(|s| s.state.as_ref()) {
                    let t = state.terminated.clone().unwrap_or_default();
                    let ran = state.running.is_some() || state.terminated.is_some();
                    if ran {
                        rec.terminated = Some(Termination {
                            exit_code: if state.terminated.is_some() {
                                t.exit_code
                            } else {
                                255
                            },
                            reason: t.reason.unwrap_or_else(|| "Unknown".into()),
                            started_at: t
                                .started_at
                                .or(state.running.as_ref().and_then(|r| r.started_at)),
                            finished_at: t.finished_at.unwrap_or_else(Time::now),
                        });
                    }
                }
                continue;
            }
            if rec.init {
                rec.terminated = Some(Termination {
                    exit_code: 0,
                    reason: "Completed".into(),
                    started_at: None,
                    finished_at: Time::now(),
                });
                if let Some(t) = old
                    .and_then(|s| s.state.as_ref())
                    .and_then(|s| s.terminated.as_ref())
                {
                    rec.terminated = Some(Termination {
                        exit_code: t.exit_code,
                        reason: t.reason.clone().unwrap_or_default(),
                        started_at: t.started_at,
                        finished_at: t.finished_at.unwrap_or_else(Time::now),
                    });
                }
                continue;
            }
            let Some((id, state, recorded_start)) =
                states.iter().find(|(id, _, _)| id.name() == rec.spec.name)
            else {
                continue;
            };
            rec.id = Some(id.clone());
            rec.mounted = true;
            match state {
                ContainerState::Running { started_at, .. } => {
                    rec.running_since = Some(time_of(*started_at));
                }
                ContainerState::Exited { .. } => {
                    // Looked at (and restarted if the policy says so) by the next round.
                    let state = old.and_then(|s| s.state.as_ref());
                    rec.running_since = state
                        .and_then(|s| s.running.as_ref())
                        .and_then(|r| r.started_at)
                        .or_else(|| {
                            state
                                .and_then(|s| s.terminated.as_ref())
                                .and_then(|t| t.started_at)
                        })
                        .or(recorded_start.map(Time::from_system))
                        .or(Some(Time::now()));
                }
                ContainerState::Created | ContainerState::Unknown => {
                    let rt = self.ctx.runtime.clone();
                    let id = id.clone();
                    let _ = smol::unblock(move || rt.remove(&id)).await;
                    rec.id = None;
                }
            }
        }
        self.pod_ip = self.adopt_network(&sandbox).await;
        self.sandbox = Some(sandbox);
        self.start_time = previous.start_time.or_else(|| Some(Time::now()));
        tracing::info!(pod = %self.key(), "adopted the running pod");
        true
    }

    // ---- sandbox -------------------------------------------------------------------------

    async fn create_sandbox(&mut self) -> Duration {
        if let Some(at) = self.sandbox_retry {
            if at > Instant::now() {
                return at - Instant::now();
            }
        }
        if let Some(why) = self.unsupported_runtime_class().await {
            // As the kubelet when the runtime has no such handler: the pod waits in
            // ContainerCreating and the sandbox is tried again.
            self.ctx.events.pod(
                &self.pod,
                EventType::Warning,
                "FailedCreatePodSandBox",
                why.clone(),
            );
            self.message = Some(why);
            self.sandbox_retry = Some(Instant::now() + Duration::from_secs(10));
            return Duration::from_secs(10);
        }
        let host_network = self.pod.spec.host_network == Some(true);
        if !host_network && !self.ctx.network.is_ready() {
            self.message = Some("waiting for the node's pod network (podCIDR)".into());
            return Duration::from_millis(500);
        }
        let uid = self.uid();
        let dir = self.pod_dir();
        let hostname: String = self
            .pod
            .spec
            .hostname
            .clone()
            .unwrap_or_else(|| self.pod.metadata.name.clone())
            .chars()
            .take(63)
            .collect();
        let cfg = SandboxConfig {
            hostname,
            host_network: self.pod.spec.host_network == Some(true),
            host_pid: self.pod.spec.host_pid == Some(true),
            share_pid: false,
        };
        let rt = self.ctx.runtime.clone();
        let result = smol::unblock(move || {
            cleanup_pod_dir(&dir);
            match rt.create_sandbox(&uid, &cfg) {
                Err(RuntimeError::AlreadyExists(_)) => rt
                    .sandbox(&uid)?
                    .ok_or_else(|| RuntimeError::NotFound(format!("sandbox {uid}"))),
                other => other,
            }
        })
        .await;
        let result = match result {
            Ok(sb) => match self.attach_network(&sb).await {
                Ok(ip) => Ok((sb, ip)),
                Err(e) => {
                    tracing::warn!(pod = %self.key(), "cannot set up the pod network: {e}");
                    self.message = Some(format!("cannot set up the pod network: {e}"));
                    self.sandbox_retry = Some(Instant::now() + Duration::from_secs(2));
                    return Duration::from_secs(2);
                }
            },
            Err(e) => Err(e),
        };
        match result {
            Ok((sb, ip)) => {
                self.sandbox = Some(sb);
                self.pod_ip = Some(ip);
                self.message = None;
                self.start_time.get_or_insert_with(Time::now);
                self.advance(Event::SandboxReady {
                    init_containers: self.init_count,
                });
                Duration::ZERO
            }
            Err(RuntimeError::Refused(m)) => {
                self.advance(Event::Rejected { message: m });
                Duration::ZERO
            }
            Err(e) => {
                tracing::warn!(pod = %self.key(), "cannot create the pod sandbox: {e}");
                self.message = Some(format!("cannot create the pod sandbox: {e}"));
                self.sandbox_retry = Some(Instant::now() + Duration::from_secs(10));
                Duration::from_secs(10)
            }
        }
    }

    /// Why the pod's RuntimeClass cannot run here: its handler is not the agent's. A class
    /// that cannot be read (the server away: a node restarting on its own) does not stop a
    /// pod the server admitted.
    async fn unsupported_runtime_class(&self) -> Option<String> {
        let name = self
            .pod
            .spec
            .runtime_class_name
            .as_deref()
            .filter(|n| !n.is_empty())?;
        match self
            .ctx
            .client
            .get::<api::node::RuntimeClass>("", name)
            .await
        {
            Ok(rc) if rc.handler == api::node::AGENT_HANDLER => None,
            Ok(rc) => Some(format!(
                "Failed to create pod sandbox: no runtime for {:?} is configured (this node's runtime handler is {:?})",
                rc.handler,
                api::node::AGENT_HANDLER
            )),
            Err(e) if e.is_not_found() => Some(format!(
                "Failed to create pod sandbox: RuntimeClass {name:?} not found"
            )),
            Err(e) => {
                tracing::warn!(pod = %self.key(), class = name, "cannot read the RuntimeClass: {e}");
                None
            }
        }
    }

    /// Gives the pod its address, eth0 and hostPorts (hostNetwork pods: the node's address).
    async fn attach_network(&self, sb: &Sandbox) -> Result<String, crate::net::NetError> {
        let Some(netns) = sb.net_ns_path() else {
            return Ok(self.ctx.node_ip.clone());
        };
        let network = self.ctx.network.clone();
        let uid = self.uid();
        let ports = self.host_ports();
        let ip = smol::unblock(move || network.attach(&uid, &netns, &ports)).await?;
        Ok(ip.to_string())
    }

    /// After an agent restart: the adopted pod's address (kept by the IPAM) and hostPorts.
    async fn adopt_network(&self, sb: &Sandbox) -> Option<String> {
        if sb.net_ns_path().is_none() {
            return Some(self.ctx.node_ip.clone());
        }
        let network = self.ctx.network.clone();
        let uid = self.uid();
        let ports = self.host_ports();
        match smol::unblock(move || network.adopt(&uid, &ports)).await {
            Ok(ip) => ip.map(|i| i.to_string()),
            Err(e) => {
                tracing::warn!(pod = %self.key(), "cannot restore the pod's hostPorts: {e}");
                self.ctx.network.pod_ip(&self.uid()).map(|i| i.to_string())
            }
        }
    }

    /// The ports of every container that asks for a hostPort.
    fn host_ports(&self) -> Vec<api::core::ContainerPort> {
        self.pod
            .spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .filter(|p| p.host_port.is_some_and(|h| h > 0))
            .cloned()
            .collect()
    }

    // ---- containers ----------------------------------------------------------------------

    /// Fetches the ConfigMaps and Secrets the container's environment needs.
    /// The pod's `imagePullSecrets` that exist (a missing one is skipped, as the kubelet
    /// does, and the pull goes on without it).
    async fn pull_secrets(&self) -> Vec<Secret> {
        let ns = self.pod.metadata.namespace().to_string();
        let mut out = Vec::new();
        for r in &self.pod.spec.image_pull_secrets {
            let Some(name) = r.name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            match self.ctx.client.get::<Secret>(&ns, name).await {
                Ok(s) => out.push(s),
                Err(e) => tracing::warn!(pod = %self.key(), secret = name, "pull secret: {e}"),
            }
        }
        out
    }

    /// The Services' variables: those of the pod's namespace (unless `enableServiceLinks`
    /// is false) and the API's `kubernetes` Service, a namespace's own Service of that
    /// name first, as the kubelet does.
    async fn service_env(&self) -> Result<Vec<(String, String)>, String> {
        use api::core::Service;
        let ns = self.pod.metadata.namespace();
        let mut services: Vec<Service> = Vec::new();
        if self.pod.spec.enable_service_links != Some(false) {
            services = self
                .ctx
                .client
                .list::<Service>(Some(ns), None, None)
                .await
                .map_err(|e| format!("cannot list the services of {ns}: {e}"))?
                .0;
        }
        if !services.iter().any(|s| s.metadata.name == "kubernetes") {
            match self
                .ctx
                .client
                .get::<Service>("default", "kubernetes")
                .await
            {
                Ok(s) => services.push(s),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(format!("cannot read the kubernetes service: {e}")),
            }
        }
        services.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(container::service_env(&services))
    }

    async fn env_sources(&self, idx: usize) -> Result<EnvSources<'_>, String> {
        let (cms, secrets) = container::env_references(&self.containers[idx].spec);
        let ns = self.pod.metadata.namespace().to_string();
        let mut src = EnvSources {
            node_name: &self.ctx.node_name,
            host_ip: &self.ctx.node_ip,
            pod_ip: self.pod_ip.as_deref().unwrap_or(&self.ctx.node_ip),
            ..Default::default()
        };
        // Without the API (a node restarted offline) the container starts without them,
        // where the kubelet would wait for its Service cache.
        src.services = match self.service_env().await {
            Ok(vars) => vars,
            Err(e) => {
                tracing::warn!(pod = %self.key(), "{e}; starting without the Services' variables");
                Vec::new()
            }
        };
        for name in cms {
            match self.ctx.client.get::<ConfigMap>(&ns, &name).await {
                Ok(cm) => {
                    src.config_maps.insert(name, cm);
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(format!("cannot read configmap {name}: {e}")),
            }
        }
        for name in secrets {
            match self.ctx.client.get::<Secret>(&ns, &name).await {
                Ok(s) => {
                    src.secrets.insert(name, s);
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(format!("cannot read secret {name}: {e}")),
            }
        }
        Ok(src)
    }

    /// Sets up the pod's volumes (idempotent) and answers container `idx`'s mounts.
    async fn volume_mounts(&self, idx: usize) -> Result<Vec<MountSpec>, VolumeError> {
        let c = self.containers[idx].spec.clone();
        if self.pod.spec.volumes.is_empty() && c.volume_mounts.is_empty() {
            return Ok(Vec::new());
        }
        let vols = self.pod.spec.volumes.clone();
        let sources = volumes::fetch(&self.ctx.client, &self.pod).await;
        let dir = self.pod_dir();
        smol::unblock(move || {
            let prepared = volumes::set_up(&dir, &vols, &sources)?;
            volumes::mounts(&prepared, &c)
        })
        .await
    }

    /// Adds the pod's /etc/resolv.conf and /etc/hosts (written into the pod directory) to
    /// `mounts`, unless a volume is mounted there.
    async fn with_dns_files(&self, mut mounts: Vec<MountSpec>) -> Result<Vec<MountSpec>, String> {
        let taken: Vec<PathBuf> = mounts.iter().map(|m| m.destination.clone()).collect();
        let (dir, spec, dns) = (self.pod_dir(), self.pod.spec.clone(), self.ctx.dns.clone());
        let name = self.pod.metadata.name.clone();
        let ns = self.pod.metadata.namespace().to_string();
        let pod_ip = self
            .pod_ip
            .clone()
            .unwrap_or_else(|| self.ctx.node_ip.clone());
        let files = smol::unblock(move || {
            crate::dns::resolv::write_pod_files(&dir, &spec, &name, &ns, &pod_ip, &dns, &taken)
        })
        .await
        .map_err(|e| format!("cannot write the pod's resolv.conf and hosts: {e}"))?;
        mounts.extend(files);
        Ok(mounts)
    }

    /// Every [`volumes::SYNC_EVERY`], brings ConfigMap and Secret volumes up to date.
    async fn refresh_volumes(&mut self) {
        if !volumes::has_updatable(&self.pod.spec.volumes)
            || self
                .volumes_synced
                .is_some_and(|at| at.elapsed() < volumes::SYNC_EVERY)
        {
            return;
        }
        self.volumes_synced = Some(Instant::now());
        let vols = self.pod.spec.volumes.clone();
        let sources = volumes::fetch(&self.ctx.client, &self.pod).await;
        let dir = self.pod_dir();
        let done = smol::unblock(move || volumes::refresh(&dir, &vols, &sources)).await;
        for v in done.updated {
            tracing::info!(pod = %self.key(), volume = %v, "volume contents updated");
        }
        for e in done.errors {
            tracing::warn!(pod = %self.key(), "{e}");
        }
    }

    /// Records an event about container `idx`.
    fn container_event(&self, idx: usize, type_: EventType, reason: &str, message: String) {
        let rec = &self.containers[idx];
        self.ctx
            .events
            .container(&self.pod, rec.name(), rec.init, type_, reason, message);
    }

    fn fail_start(&mut self, idx: usize, reason: &str, message: String) {
        tracing::warn!(pod = %self.key(), container = %self.containers[idx].name(), "{reason}: {message}");
        self.container_event(
            idx,
            EventType::Warning,
            "Failed",
            format!("Error: {message}"),
        );
        let rec = &mut self.containers[idx];
        rec.waiting = Some((reason.to_string(), message));
        rec.retry_at = Some(Instant::now() + rec.backoff);
        rec.backoff = (rec.backoff * 2).min(BACKOFF_MAX);
    }

    /// (Re)creates and starts container `idx`.
    async fn start_container(&mut self, idx: usize) {
        let Some(sandbox) = self.sandbox.clone() else {
            return;
        };
        let Some(image) = self.containers[idx].image.clone() else {
            return;
        };
        let name = self.containers[idx].name().to_string();
        let cdir = self.pod_dir().join(&name);
        let target = cdir.join("rootfs");
        let scratch = cdir.join("overlay");

        if let Some(old) = self.containers[idx].id.take() {
            let rt = self.ctx.runtime.clone();
            if let Err(e) = smol::unblock(move || rt.remove(&old)).await {
                tracing::warn!(pod = %self.key(), "cannot remove the old container: {e}");
            }
        }
        let mounts = match self.volume_mounts(idx).await {
            Ok(m) => m,
            Err(e @ VolumeError::SetUp { .. }) => {
                // FailedMount: the pod stays in ContainerCreating and tries again soon.
                self.ctx
                    .events
                    .pod(&self.pod, EventType::Warning, "FailedMount", e.to_string());
                let rec = &mut self.containers[idx];
                let waiting = Some(("ContainerCreating".to_string(), e.to_string()));
                if rec.waiting != waiting {
                    tracing::warn!(pod = %self.pod.metadata.name, "{e}");
                }
                rec.waiting = waiting;
                rec.retry_at = Some(Instant::now() + VOLUME_RETRY);
                return;
            }
            Err(e) => return self.fail_start(idx, "CreateContainerConfigError", e.to_string()),
        };
        let mounts = match self.with_dns_files(mounts).await {
            Ok(m) => m,
            Err(e) => return self.fail_start(idx, "CreateContainerConfigError", e),
        };
        if !self.containers[idx].mounted {
            let images = self.ctx.images.clone();
            let (t, s, img) = (target.clone(), scratch.clone(), image.clone());
            let mounted = smol::unblock(move || {
                std::fs::create_dir_all(&t).map_err(|e| e.to_string())?;
                images
                    .mount_rootfs(&img, &s, &t)
                    .map(|m| m.leak())
                    .map_err(|e| e.to_string())
            })
            .await;
            if let Err(e) = mounted {
                return self.fail_start(idx, "CreateContainerError", e);
            }
            self.containers[idx].mounted = true;
        }
        let env = match self.env_sources(idx).await {
            Ok(src) => {
                container::build_env(&self.pod, &self.containers[idx].spec, &image.config, &src)
            }
            Err(e) => Err(e),
        };
        let env = match env {
            Ok(env) => env,
            Err(e) => return self.fail_start(idx, "CreateContainerConfigError", e),
        };
        let spec_c = self.containers[idx].spec.clone();
        let args = container::resolve_args(&spec_c, &image.config, &env);
        if args.is_empty() {
            return self.fail_start(
                idx,
                "CreateContainerError",
                "no command specified: the image has no Entrypoint or Cmd and the container no command".into(),
            );
        }
        let user = match container::run_as(&self.pod, &spec_c, &image.config, &target) {
            Ok(u) => u,
            Err(e) => return self.fail_start(idx, "CreateContainerConfigError", e),
        };
        let resources = match container::resources(&spec_c) {
            Ok(r) => r,
            Err(e) => return self.fail_start(idx, "CreateContainerConfigError", e),
        };
        let pid_ns = match self.target_pid_ns(idx).await {
            Ok(ns) => ns,
            Err(e) => return self.fail_start(idx, "CreateContainerError", e),
        };
        let sc = spec_c.security_context.clone().unwrap_or_default();
        let caps = sc.capabilities.clone().unwrap_or_default();
        let log_path = self
            .pod_dir()
            .join("logs")
            .join(&name)
            .join(format!("{}.log", self.containers[idx].restart_count));
        let spec = ContainerSpec {
            name: name.clone(),
            rootfs: target,
            args,
            env,
            cwd: spec_c
                .working_dir
                .clone()
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| image.config.working_dir.clone()),
            user,
            caps_add: caps.add,
            caps_drop: caps.drop,
            readonly_rootfs: sc.read_only_root_filesystem == Some(true),
            privileged: sc.privileged == Some(true),
            mounts,
            resources,
            log_path,
            pid_ns,
            stdin: match (spec_c.stdin, spec_c.stdin_once) {
                (Some(true), Some(true)) => StdinMode::Once,
                (Some(true), _) => StdinMode::Open,
                _ => StdinMode::None,
            },
            tty: spec_c.tty == Some(true),
        };
        let rt = self.ctx.runtime.clone();
        let created = smol::unblock(move || {
            if let Some(parent) = spec.log_path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            rt.create_container(&sandbox, &spec)
        })
        .await;
        let started = match created {
            Ok(id) => {
                self.container_event(
                    idx,
                    EventType::Normal,
                    "Created",
                    format!("Created container: {name}"),
                );
                let rt = self.ctx.runtime.clone();
                smol::unblock(move || {
                    if let Err(e) = rt.start(&id) {
                        let _ = rt.remove(&id);
                        return Err((true, e));
                    }
                    let state = rt.state(&id).unwrap_or(ContainerState::Unknown);
                    Ok((id, state))
                })
                .await
            }
            Err(e) => Err((false, e)),
        };
        match started {
            Ok((id, state)) => {
                let rec = &mut self.containers[idx];
                rec.id = Some(id);
                rec.waiting = None;
                rec.terminated = None;
                rec.retry_at = None;
                rec.running_since = Some(match state {
                    ContainerState::Running { started_at, .. } => time_of(started_at),
                    _ => Time::now(),
                });
                tracing::info!(pod = %self.key(), container = %name, "container started");
                self.container_event(
                    idx,
                    EventType::Normal,
                    "Started",
                    format!("Started container {name}"),
                );
            }
            Err((false, e)) => self.fail_start(idx, "CreateContainerError", e.to_string()),
            Err((true, e)) => self.fail_start(idx, "RunContainerError", e.to_string()),
        }
    }

    /// Looks at a running container; records its exit and decides about a restart.
    /// Answers whether it has just exited.
    async fn poll_container(&mut self, idx: usize) -> bool {
        let Some(id) = self.containers[idx].id.clone() else {
            return false;
        };
        if !self.containers[idx].is_running() {
            return false;
        }
        let rt = self.ctx.runtime.clone();
        let state = match smol::unblock(move || rt.state(&id)).await {
            Ok(s) => s,
            Err(RuntimeError::NotFound(_)) => ContainerState::Exited {
                exit_code: None,
                finished_at: std::time::SystemTime::now(),
                oom_killed: false,
            },
            Err(e) => {
                tracing::warn!(pod = %self.key(), "cannot read a container's state: {e}");
                return false;
            }
        };
        let ContainerState::Exited {
            exit_code,
            finished_at,
            oom_killed,
        } = state
        else {
            return false;
        };
        let policy = self
            .pod
            .spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let rec = &mut self.containers[idx];
        rec.exit_watch = ExitWatch::Unarmed;
        let code = exit_code.unwrap_or(255);
        let reason = if oom_killed {
            "OOMKilled"
        } else if exit_code.is_none() {
            "Unknown"
        } else if code == 0 {
            "Completed"
        } else {
            "Error"
        };
        let started = rec.running_since.take();
        rec.probes.reset();
        rec.termination_message = rec.kill_reason.take();
        let term = Termination {
            exit_code: code,
            reason: reason.into(),
            started_at: started,
            finished_at: Time::from_system(finished_at),
        };
        let restart = if rec.ephemeral {
            false
        } else if rec.init {
            policy != "Never" && code != 0
        } else {
            match policy.as_str() {
                "Never" => false,
                "OnFailure" => code != 0,
                _ => true,
            }
        };
        tracing::info!(pod = %self.pod.metadata.name, container = %rec.spec.name, code, restart, "container exited");
        if restart {
            // A run of ten minutes or more resets the back-off, as the kubelet does.
            if let Some(s) = started {
                if Time::now().0 - s.0 >= 600 {
                    rec.backoff = BACKOFF_START;
                }
            }
            rec.waiting = Some((
                "CrashLoopBackOff".into(),
                format!(
                    "back-off {}s restarting failed container={} pod={}",
                    rec.backoff.as_secs(),
                    rec.spec.name,
                    self.pod.metadata.name
                ),
            ));
            rec.retry_at = Some(Instant::now() + rec.backoff);
            rec.backoff = (rec.backoff * 2).min(BACKOFF_MAX);
            rec.last_terminated = Some(term);
            rec.terminated = None;
            let message = format!(
                "Back-off restarting failed container {} in pod {}_{}({})",
                rec.spec.name,
                self.pod.metadata.name,
                self.pod.metadata.namespace(),
                self.pod.metadata.uid
            );
            self.container_event(idx, EventType::Warning, "BackOff", message);
        } else {
            rec.terminated = Some(term);
        }
        true
    }

    /// Whether container `idx` should be (re)started now; `Err(wait)` if later.
    fn due(&self, idx: usize) -> Result<bool, Duration> {
        let rec = &self.containers[idx];
        if rec.is_running() || rec.terminated.is_some() {
            return Ok(false);
        }
        match rec.retry_at {
            Some(at) if at > Instant::now() => Err(at - Instant::now()),
            _ => Ok(true),
        }
    }

    async fn start_due(&mut self, idx: usize) -> Option<Duration> {
        match self.due(idx) {
            Ok(true) => {
                if self.containers[idx].last_terminated.is_some() {
                    // Carried over from the pod's status, which others may have written.
                    let count = &mut self.containers[idx].restart_count;
                    *count = count.saturating_add(1);
                    // The kubelet checks the image again before each restart.
                    let image = self.containers[idx].spec.image.clone().unwrap_or_default();
                    self.container_event(
                        idx,
                        EventType::Normal,
                        "Pulled",
                        format!("Container image {image:?} already present on machine"),
                    );
                }
                self.start_container(idx).await;
                None
            }
            Ok(false) => None,
            Err(wait) => Some(wait),
        }
    }

    async fn run_init(&mut self, index: usize) -> Duration {
        if index >= self.init_count {
            self.stage = Stage::Running;
            return Duration::ZERO;
        }
        if let Some(wait) = self.start_due(index).await {
            return wait.min(Duration::from_secs(1));
        }
        self.poll_container(index).await;
        let rec = &self.containers[index];
        match &rec.terminated {
            Some(t) if t.exit_code == 0 => {
                self.advance(Event::InitSucceeded);
                Duration::ZERO
            }
            Some(_) => {
                self.advance(Event::InitFailed);
                Duration::ZERO
            }
            None => INIT_POLL,
        }
    }

    async fn supervise(&mut self) -> Duration {
        let mut wait = SUPERVISE_WATCHED;
        for idx in self.init_count..self.containers.len() {
            if self.containers[idx].ephemeral && !self.ephemeral_image(idx).await {
                wait = wait.min(Duration::from_secs(1));
                continue;
            }
            if let Some(w) = self.start_due(idx).await {
                wait = wait.min(w);
            }
            self.arm_exit_watch(idx).await;
            if self.poll_container(idx).await {
                wait = Duration::ZERO;
            } else {
                let rec = &mut self.containers[idx];
                if let ExitWatch::Armed(fd) = &rec.exit_watch {
                    if crate::sys::poll_readable(fd.get_ref()) {
                        // The process is gone but not yet reaped by its parent (an adopted
                        // container's): the pidfd would wake us forever, so poll instead.
                        rec.exit_watch = ExitWatch::Unavailable;
                    }
                }
                if rec.is_running() && !matches!(rec.exit_watch, ExitWatch::Armed(_)) {
                    wait = wait.min(SUPERVISE_EVERY);
                }
            }
        }
        if let Some(w) = volumes::next_sync(&self.pod.spec.volumes, self.volumes_synced) {
            wait = wait.min(w);
        }
        if let Some(w) = self.run_probes().await {
            wait = wait.min(w);
        }
        let apps: Vec<&ContainerRecord> = self.containers.iter().filter(|c| c.is_app()).collect();
        if !apps.is_empty() && apps.iter().all(|c| c.terminated.is_some()) {
            let succeeded = apps
                .iter()
                .all(|c| c.terminated.as_ref().is_some_and(|t| t.exit_code == 0));
            self.advance(Event::AllExited { succeeded });
            return Duration::ZERO;
        }
        wait
    }

    /// Makes sure ephemeral container `idx`'s image is there (pulled as its pull policy
    /// says); answers whether it is. A failure is reported as the container's waiting reason
    /// and tried again on a later round.
    async fn ephemeral_image(&mut self, idx: usize) -> bool {
        let rec = &self.containers[idx];
        if rec.image.is_some() || rec.terminated.is_some() {
            return true;
        }
        if rec.retry_at.is_some_and(|at| at > Instant::now()) {
            return false;
        }
        let reference = rec.spec.image.clone().unwrap_or_default();
        let policy = pull_policy(&rec.spec);
        let secrets = self.pull_secrets().await;
        let auth =
            super::pull_secrets::auth_for(&reference, &secrets).unwrap_or(RegistryAuth::Anonymous);
        let result = self
            .ctx
            .images
            .ensure(&reference, policy, &auth, &self.ctx.pull_options)
            .await;
        match result {
            Ok(info) => {
                self.container_event(
                    idx,
                    EventType::Normal,
                    "Pulled",
                    format!("Container image {reference:?} ready on machine"),
                );
                let rec = &mut self.containers[idx];
                rec.image = Some(info);
                rec.waiting = None;
                true
            }
            Err(e) => {
                tracing::warn!(pod = %self.key(), image = %reference, "{e}");
                let rec = &mut self.containers[idx];
                rec.waiting = Some((e.reason().to_string(), e.to_string()));
                rec.retry_at = Some(Instant::now() + rec.backoff);
                rec.backoff = (rec.backoff * 2).min(BACKOFF_MAX);
                false
            }
        }
    }

    /// The PID namespace container `idx` joins: its target's, for an ephemeral container
    /// with `targetContainerName`. `Err` when the target is not running.
    async fn target_pid_ns(&self, idx: usize) -> Result<Option<PathBuf>, String> {
        let Some(target) = self.containers[idx].target.clone() else {
            return Ok(None);
        };
        let id = self
            .containers
            .iter()
            .find(|c| !c.ephemeral && c.name() == target)
            .and_then(|c| c.id.clone())
            .ok_or_else(|| format!("target container {target:?} is not running"))?;
        let rt = self.ctx.runtime.clone();
        match smol::unblock(move || rt.state(&id)).await {
            Ok(ContainerState::Running { pid, .. }) => Ok(Some(
                self.ctx
                    .runtime
                    .config()
                    .proc_root
                    .join(pid.to_string())
                    .join("ns/pid"),
            )),
            _ => Err(format!("target container {target:?} is not running")),
        }
    }

    /// Opens a pidfd for container `idx`'s current run, once, so its exit wakes the worker.
    async fn arm_exit_watch(&mut self, idx: usize) {
        let rec = &self.containers[idx];
        if !rec.is_running() || !matches!(rec.exit_watch, ExitWatch::Unarmed) {
            return;
        }
        let Some(id) = rec.id.clone() else {
            return;
        };
        let rt = self.ctx.runtime.clone();
        let fd = smol::unblock(move || rt.exit_fd(&id)).await;
        let registered = fd.map_err(|e| e.to_string()).and_then(|fd| {
            fd.map(smol::Async::new)
                .transpose()
                .map_err(|e| e.to_string())
        });
        self.containers[idx].exit_watch = match registered {
            Ok(Some(fd)) => ExitWatch::Armed(Arc::new(fd)),
            Ok(None) => ExitWatch::Unavailable,
            Err(e) => {
                tracing::debug!(pod = %self.key(), "cannot watch a container's exit: {e}");
                ExitWatch::Unavailable
            }
        };
    }

    /// Resolves once the main process of any watched container has exited (never, if none
    /// is watched).
    fn any_exit(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let fds: Vec<Arc<smol::Async<std::os::fd::OwnedFd>>> = self
            .containers
            .iter()
            .filter_map(|c| match &c.exit_watch {
                ExitWatch::Armed(fd) => Some(fd.clone()),
                _ => None,
            })
            .collect();
        async move {
            let mut waits: Vec<_> = fds.iter().map(|fd| Box::pin(fd.readable())).collect();
            future::poll_fn(|cx| {
                if waits
                    .iter_mut()
                    .any(|w| std::future::Future::poll(w.as_mut(), cx).is_ready())
                {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await
        }
    }

    // ---- probes --------------------------------------------------------------------------

    /// Runs the probes that are due, all at once (each bounded by its timeout), records
    /// their outcomes and kills containers whose liveness or startup probe failed for good.
    /// Answers how long until the next probe is due.
    async fn run_probes(&mut self) -> Option<Duration> {
        let now = Instant::now();
        let netns = self.sandbox.as_ref().and_then(|s| s.net_ns_path());
        let default_host = ProbeTarget::default_host_for(netns.is_some(), &self.ctx.node_ip);
        let mut runs = Vec::new();
        for idx in self.init_count..self.containers.len() {
            let rec = &mut self.containers[idx];
            if !rec.is_running() || rec.probes.is_empty() {
                continue;
            }
            let Some(id) = rec.id.clone() else {
                continue;
            };
            rec.probes.begin(now);
            for kind in rec.probes.due(now) {
                let Some(spec) = rec.probes.take(kind) else {
                    continue;
                };
                let target = ProbeTarget {
                    runtime: self.ctx.runtime.clone(),
                    id: id.clone(),
                    netns: netns.clone(),
                    default_host,
                };
                let began = Instant::now();
                let task = smol::spawn(async move {
                    probe::run(&spec.action, &target, spec.timing.timeout).await
                });
                runs.push((idx, kind, began, task));
            }
        }
        let key = self.key();
        for (idx, kind, began, task) in runs {
            let outcome = task.await;
            let rec = &mut self.containers[idx];
            if !outcome.success {
                tracing::debug!(
                    pod = %key,
                    container = %rec.spec.name,
                    probe = kind.name(),
                    "probe failed: {}",
                    outcome.message
                );
                let mut probe = kind.name().to_string();
                probe[..1].make_ascii_uppercase();
                self.ctx.events.container(
                    &self.pod,
                    &rec.spec.name,
                    rec.init,
                    EventType::Warning,
                    "Unhealthy",
                    format!("{probe} probe failed: {}", outcome.message),
                );
            }
            match rec
                .probes
                .record(kind, outcome.success, began, Instant::now())
            {
                Verdict::Unchanged => {}
                Verdict::Changed => {
                    tracing::info!(
                        pod = %key,
                        container = %rec.spec.name,
                        started = rec.probes.started(),
                        ready = rec.probes.ready(),
                        "{} probe changed the container's state",
                        kind.name()
                    );
                }
                Verdict::Kill => self.kill_for_probe(idx, kind, &outcome.message),
            }
        }
        let next = self.containers[self.init_count..]
            .iter()
            .filter(|c| c.is_running())
            .filter_map(|c| c.probes.next_due())
            .min()?;
        Some(next.saturating_duration_since(Instant::now()))
    }

    /// Stops container `idx` (SIGTERM, grace, SIGKILL) after a failed liveness or startup
    /// probe; the next rounds see it exit and restart it as the restart policy says.
    fn kill_for_probe(&mut self, idx: usize, kind: ProbeKind, why: &str) {
        let restarts = self.pod.spec.restart_policy.as_deref() != Some("Never");
        let key = self.key();
        let pod_grace = self.pod.spec.termination_grace_period_seconds.unwrap_or(30);
        let rec = &mut self.containers[idx];
        let Some(id) = rec.id.clone() else {
            return;
        };
        let message = format!(
            "Container {} failed {} probe{}",
            rec.spec.name,
            kind.name(),
            if restarts { ", will be restarted" } else { "" }
        );
        tracing::info!(pod = %key, container = %rec.spec.name, "{message}: {why}");
        let grace = rec
            .probes
            .spec(kind)
            .and_then(|s| s.grace)
            .unwrap_or_else(|| Duration::from_secs(pod_grace.max(1) as u64));
        self.ctx.events.container(
            &self.pod,
            &rec.spec.name,
            rec.init,
            EventType::Normal,
            "Killing",
            message.clone(),
        );
        rec.kill_reason = Some(message);
        let rt = self.ctx.runtime.clone();
        // In the background, so the pod's other containers and its status are not held up
        // for the grace period; `poll_container` notices the exit.
        smol::unblock(move || {
            if let Err(e) = rt.stop(&id, grace) {
                tracing::warn!(pod = %key, "stopping a container that failed its probe: {e}");
            }
        })
        .detach();
    }

    // ---- teardown ------------------------------------------------------------------------

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or(self.pod.spec.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64;
        Duration::from_secs(secs.max(1))
    }

    /// Stops every container (SIGTERM, grace, SIGKILL, all at once), then removes them, the
    /// sandbox, the root filesystems and the pod directory.
    async fn remove_everything(&mut self) {
        let grace = self.grace();
        let uid = self.uid();
        let rt = self.ctx.runtime.clone();
        let ids: Vec<ContainerId> = smol::unblock(move || rt.list())
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|id| id.pod_uid() == uid)
            .collect();
        let stops: Vec<_> = ids
            .into_iter()
            .map(|id| {
                let rt = self.ctx.runtime.clone();
                smol::unblock(move || rt.stop(&id, grace))
            })
            .collect();
        for s in stops {
            if let Err(e) = s.await {
                tracing::warn!(pod = %self.key(), "stopping a container: {e}");
            }
        }
        let rt = self.ctx.runtime.clone();
        let uid = self.uid();
        let dir = self.pod_dir();
        let network = self.ctx.network.clone();
        let removed = smol::unblock(move || {
            if let Err(e) = network.detach(&uid) {
                tracing::warn!(%uid, "removing the pod's network: {e}");
            }
            let r = rt.remove_sandbox(&uid);
            cleanup_pod_dir(&dir);
            r
        })
        .await;
        if let Err(e) = removed {
            tracing::warn!(pod = %self.key(), "removing the pod sandbox: {e}");
        }
        for rec in &mut self.containers {
            rec.id = None;
            rec.mounted = false;
            rec.running_since = None;
        }
        self.sandbox = None;
        self.pod_ip = None;
    }

    async fn teardown(&mut self) -> Duration {
        if !self.torn_down {
            for idx in 0..self.containers.len() {
                if !self.gone && self.containers[idx].is_running() {
                    let name = self.containers[idx].name().to_string();
                    self.container_event(
                        idx,
                        EventType::Normal,
                        "Killing",
                        format!("Stopping container {name}"),
                    );
                }
            }
            self.remove_everything().await;
            self.ctx.cache_writes.remove(&self.uid());
            self.torn_down = true;
        }
        if !self.gone {
            let opts = DeleteOptions {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(self.uid()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let ns = self.pod.metadata.namespace().to_string();
            match self
                .ctx
                .client
                .delete::<Pod>(&ns, &self.pod.metadata.name, &opts)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    tracing::warn!(pod = %self.key(), "cannot confirm the deletion: {e}");
                    return Duration::from_secs(5);
                }
            }
        }
        self.advance(Event::TornDown);
        Duration::ZERO
    }

    // ---- status --------------------------------------------------------------------------

    async fn report(&mut self) {
        if matches!(self.stage, Stage::Terminating | Stage::Gone) || self.gone {
            return;
        }
        let previous: Vec<PodCondition> = self
            .last_reported
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_else(|| self.pod.status.conditions.clone());
        let status = status::pod_status(&status::StatusInput {
            pod: &self.pod,
            stage: &self.stage,
            containers: &self.containers,
            host_ip: &self.ctx.node_ip,
            pod_ip: self.pod_ip.as_deref().unwrap_or(""),
            start_time: self.start_time,
            message: self.message.as_deref(),
            previous: &previous,
            now: Time::now(),
        });
        if self.last_reported.as_ref() == Some(&status) {
            return;
        }
        // While the server is unreachable, try again every few seconds, not every round.
        if self
            .report_failed_at
            .is_some_and(|at| at.elapsed() < REPORT_RETRY)
        {
            return;
        }
        match self.send_status(&status).await {
            Ok(()) => {
                self.last_reported = Some(status);
                self.report_failed_at = None;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                if self.report_failed_at.is_none() {
                    tracing::warn!(pod = %self.key(), "cannot report the pod status: {e}");
                }
                self.report_failed_at = Some(Instant::now());
            }
        }
    }

    async fn send_status(&self, status: &PodStatus) -> Result<(), ClientError> {
        // Recorded as the kubelet's in managedFields, as Kubernetes names it.
        let path = format!(
            "{}/status?fieldManager=kubelet",
            resource_path(
                Kind::Pod,
                Some(self.pod.metadata.namespace()),
                Some(&self.pod.metadata.name)
            )
        );
        let mut value =
            serde_json::to_value(status).map_err(|e| ClientError::Decode(e.to_string()))?;
        // Fields we do not set are cleared (merge-patch null), as a full status write would.
        if let Some(obj) = value.as_object_mut() {
            for k in ["reason", "message"] {
                obj.entry(k).or_insert(serde_json::Value::Null);
            }
        }
        let patch = serde_json::json!({ "status": value });
        let body = serde_json::to_vec(&patch).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.ctx
            .client
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
