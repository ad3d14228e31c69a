//! What the agent knows about each container, and the PodStatus built from it (a pure
//! function of the worker's view, so it is tested without containers).

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::core::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIp, Pod, PodCondition, PodStatus,
};
use api::meta::Time;

use super::machine::{self, Stage};
use super::probe::ContainerProbes;
use crate::image::ImageInfo;
use crate::runtime::ContainerId;

/// How a container run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    pub exit_code: i32,
    /// Completed, Error, OOMKilled, Unknown.
    pub reason: String,
    pub started_at: Option<Time>,
    pub finished_at: Time,
}

/// How the worker learns that a running container's main process exited.
#[derive(Clone, Debug, Default)]
pub enum ExitWatch {
    /// Not set up yet for the current run.
    #[default]
    Unarmed,
    /// A pidfd registered with the reactor: it becomes readable when the process exits.
    Armed(Arc<smol::Async<OwnedFd>>),
    /// No pidfd for this run (old kernel, or the process is not ours to wait for): poll.
    Unavailable,
}

/// The agent's view of one container of a pod.
#[derive(Clone, Debug)]
pub struct ContainerRecord {
    pub spec: Container,
    pub init: bool,
    /// An ephemeral container (`kubectl debug`): run once, never restarted, reported in
    /// `ephemeralContainerStatuses`.
    pub ephemeral: bool,
    /// The container whose PID namespace an ephemeral container joins.
    pub target: Option<String>,
    pub image: Option<ImageInfo>,
    /// The runtime container, once created.
    pub id: Option<ContainerId>,
    /// Set while its process runs.
    pub running_since: Option<Time>,
    /// Why it is not running (reason, message), e.g. ErrImagePull or CrashLoopBackOff.
    pub waiting: Option<(String, String)>,
    /// Set once it finished for good (no restart pending).
    pub terminated: Option<Termination>,
    /// The previous run, when it was restarted or a restart is pending.
    pub last_terminated: Option<Termination>,
    pub restart_count: i32,
    /// The next crash back-off (10 s doubling to 5 min).
    pub backoff: Duration,
    /// Not before this instant may it be (re)started.
    pub retry_at: Option<Instant>,
    /// Its root filesystem is mounted.
    pub mounted: bool,
    /// Its probes and their state during the current run.
    pub probes: ContainerProbes,
    /// Why the container was killed by the agent (a failed liveness or startup probe), set
    /// when the kill is asked for.
    pub kill_reason: Option<String>,
    /// The message of its latest termination (`terminated` if set, else `last_terminated`).
    pub termination_message: Option<String>,
    /// Wakes the worker when the current run's process exits.
    pub exit_watch: ExitWatch,
}

/// The first crash back-off.
pub const BACKOFF_START: Duration = Duration::from_secs(10);
/// The longest crash back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

impl ContainerRecord {
    pub fn new(spec: Container, init: bool) -> Self {
        ContainerRecord {
            init,
            ephemeral: false,
            target: None,
            image: None,
            id: None,
            running_since: None,
            waiting: None,
            terminated: None,
            last_terminated: None,
            restart_count: 0,
            backoff: BACKOFF_START,
            retry_at: None,
            mounted: false,
            probes: if init {
                ContainerProbes::default()
            } else {
                ContainerProbes::new(&spec)
            },
            kill_reason: None,
            termination_message: None,
            exit_watch: ExitWatch::Unarmed,
            spec,
        }
    }

    /// The record of an ephemeral container.
    pub fn new_ephemeral(ec: &api::core::EphemeralContainer) -> Self {
        ContainerRecord {
            ephemeral: true,
            target: ec.target_container_name.clone().filter(|t| !t.is_empty()),
            ..ContainerRecord::new(ec.to_container(), false)
        }
    }

    /// An app container: neither init nor ephemeral.
    pub fn is_app(&self) -> bool {
        !self.init && !self.ephemeral
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn is_running(&self) -> bool {
        self.running_since.is_some()
    }

    /// Whether it counts as ready: running, and its startup and readiness probes (if any)
    /// succeeded in this run.
    pub fn is_ready(&self) -> bool {
        self.is_running() && !self.init && self.probes.ready()
    }

    /// Its Kubernetes ContainerStatus; `pending_reason` is the waiting reason when nothing
    /// more specific is known (ContainerCreating, PodInitializing).
    pub fn status(&self, pending_reason: &str) -> ContainerStatus {
        let term_state = |t: &Termination, message: Option<String>| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: t.exit_code,
                reason: Some(t.reason.clone()),
                message,
                started_at: t.started_at,
                finished_at: Some(t.finished_at),
                container_id: self.id.as_ref().map(container_id),
                ..Default::default()
            }),
            ..Default::default()
        };
        let state = if let Some(since) = self.running_since {
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(since),
                }),
                ..Default::default()
            }
        } else if let Some(t) = &self.terminated {
            term_state(t, self.termination_message.clone())
        } else {
            let (reason, message) = self
                .waiting
                .clone()
                .unwrap_or_else(|| (pending_reason.to_string(), String::new()));
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason),
                    message: (!message.is_empty()).then_some(message),
                }),
                ..Default::default()
            }
        };
        ContainerStatus {
            name: self.spec.name.clone(),
            state: Some(state),
            last_state: self.last_terminated.as_ref().map(|t| {
                let latest = self.terminated.is_none();
                term_state(t, self.termination_message.clone().filter(|_| latest))
            }),
            ready: self.is_ready(),
            restart_count: self.restart_count,
            image: self.spec.image.clone().unwrap_or_default(),
            image_id: self
                .image
                .as_ref()
                .map(|i| i.repo_digest())
                .unwrap_or_default(),
            container_id: self.id.as_ref().map(container_id),
            started: Some(self.is_running() && self.probes.started()),
            ..Default::default()
        }
    }
}

/// `libcontainer://<id>`, as containerStatuses show it.
pub fn container_id(id: &ContainerId) -> String {
    format!("libcontainer://{id}")
}

/// Everything the pod status is built from.
pub struct StatusInput<'a> {
    pub pod: &'a Pod,
    pub stage: &'a Stage,
    pub containers: &'a [ContainerRecord],
    pub host_ip: &'a str,
    /// The pod's address ("" until its network is set up).
    pub pod_ip: &'a str,
    pub start_time: Option<Time>,
    /// Pod-level message (e.g. why the sandbox cannot be made).
    pub message: Option<&'a str>,
    /// The previous conditions, whose transition times are kept when unchanged.
    pub previous: &'a [PodCondition],
    pub now: Time,
}

fn condition(input: &StatusInput<'_>, type_: &str, ok: bool, reason: Option<&str>) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let since = input
        .previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time)
        .unwrap_or(input.now);
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        last_transition_time: Some(since),
        reason: if ok { None } else { reason.map(str::to_string) },
        ..Default::default()
    }
}

/// The Kubernetes QoS class of a pod.
pub fn qos_class(pod: &Pod) -> &'static str {
    let containers: Vec<&Container> = pod
        .spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .collect();
    let any = containers.iter().any(|c| {
        c.resources
            .as_ref()
            .is_some_and(|r| !r.requests.is_empty() || !r.limits.is_empty())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let Some(r) = c.resources.as_ref() else {
            return false;
        };
        ["cpu", "memory"]
            .iter()
            .all(|k| match (r.limits.get(*k), r.requests.get(*k)) {
                (Some(l), Some(q)) => l == q,
                (Some(_), None) => true,
                _ => false,
            })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The pod's status.
pub fn pod_status(input: &StatusInput<'_>) -> PodStatus {
    let stage = input.stage;
    let apps: Vec<&ContainerRecord> = input.containers.iter().filter(|c| c.is_app()).collect();
    let ephemeral: Vec<&ContainerRecord> =
        input.containers.iter().filter(|c| c.ephemeral).collect();
    let inits: Vec<&ContainerRecord> = input.containers.iter().filter(|c| c.init).collect();
    let initialized = match stage {
        Stage::Running | Stage::Finished { .. } => true,
        Stage::Preparing | Stage::CreatingSandbox => inits.is_empty(),
        Stage::Initializing { .. } => false,
        Stage::Rejected { .. } | Stage::Terminating | Stage::Gone => inits.is_empty(),
    };
    let mut phase = machine::phase(stage).to_string();
    if *stage == Stage::Running
        && !apps
            .iter()
            .any(|c| c.is_running() || c.last_terminated.is_some() || c.terminated.is_some())
    {
        phase = "Pending".into();
    }
    let all_ready = !apps.is_empty() && apps.iter().all(|c| c.is_ready());
    let not_ready_reason = if matches!(stage, Stage::Finished { .. }) {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let pending_reason = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let (reason, message) = match stage {
        Stage::Rejected { message } => (Some("Forbidden".to_string()), Some(message.clone())),
        _ => (None, input.message.map(str::to_string)),
    };
    let ip = (!input.host_ip.is_empty()).then(|| input.host_ip.to_string());
    let pod_ip = (!input.pod_ip.is_empty()).then(|| input.pod_ip.to_string());
    PodStatus {
        phase: Some(phase),
        conditions: vec![
            condition(input, "PodScheduled", true, None),
            condition(
                input,
                "Initialized",
                initialized,
                Some("ContainersNotInitialized"),
            ),
            condition(input, "ContainersReady", all_ready, Some(not_ready_reason)),
            condition(input, "Ready", all_ready, Some(not_ready_reason)),
        ],
        reason,
        message,
        host_ip: ip.clone(),
        host_ips: ip.iter().map(|i| HostIp { ip: i.clone() }).collect(),
        pod_ips: pod_ip.iter().map(|i| HostIp { ip: i.clone() }).collect(),
        pod_ip,
        start_time: input.start_time,
        init_container_statuses: inits.iter().map(|c| c.status("PodInitializing")).collect(),
        container_statuses: apps.iter().map(|c| c.status(pending_reason)).collect(),
        ephemeral_container_statuses: ephemeral
            .iter()
            .map(|c| {
                let mut s = c.status("ContainerCreating");
                // As the kubelet: an ephemeral container is never ready and has no probes.
                s.started = None;
                s
            })
            .collect(),
        qos_class: Some(qos_class(input.pod).to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_with(names: &[&str]) -> (Pod, Vec<ContainerRecord>) {
        let mut pod = Pod::default();
        let mut recs = Vec::new();
        for n in names {
            let c = Container {
                name: n.to_string(),
                image: Some("busybox".into()),
                ..Default::default()
            };
            pod.spec.containers.push(c.clone());
            recs.push(ContainerRecord::new(c, false));
        }
        (pod, recs)
    }

    fn input<'a>(pod: &'a Pod, stage: &'a Stage, recs: &'a [ContainerRecord]) -> StatusInput<'a> {
        StatusInput {
            pod,
            stage,
            containers: recs,
            host_ip: "10.0.0.2",
            pod_ip: "10.42.0.7",
            start_time: Some(Time(1)),
            message: None,
            previous: &[],
            now: Time(100),
        }
    }

    #[test]
    fn running_and_finished_pods() {
        let (pod, mut recs) = pod_with(&["a"]);
        let s = pod_status(&input(&pod, &Stage::Running, &recs));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let waiting = s.container_statuses[0]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));

        recs[0].running_since = Some(Time(50));
        recs[0].id = ContainerId::new("uid", "a").ok();
        let s = pod_status(&input(&pod, &Stage::Running, &recs));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.42.0.7"));
        assert_eq!(s.host_ip.as_deref(), Some("10.0.0.2"));
        assert!(s.conditions.iter().all(|c| c.status == "True"));
        let cs = &s.container_statuses[0];
        assert!(cs.ready);
        assert_eq!(cs.container_id.as_deref(), Some("libcontainer://uid.a"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));

        recs[0].running_since = None;
        recs[0].terminated = Some(Termination {
            exit_code: 3,
            reason: "Error".into(),
            started_at: Some(Time(50)),
            finished_at: Time(60),
        });
        let stage = Stage::Finished { succeeded: false };
        let s = pod_status(&input(&pod, &stage, &recs));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let t = s.container_statuses[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap();
        assert_eq!(t.exit_code, 3);
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    }

    #[test]
    fn readiness_probes_drive_ready() {
        use api::core::{ExecAction, Probe};
        let (mut pod, _) = pod_with(&[]);
        let probe = Probe {
            exec: Some(ExecAction {
                command: vec!["true".into()],
            }),
            ..Default::default()
        };
        let c = Container {
            name: "a".into(),
            readiness_probe: Some(probe.clone()),
            startup_probe: Some(probe),
            ..Default::default()
        };
        pod.spec.containers.push(c.clone());
        let mut recs = vec![ContainerRecord::new(c, false)];
        recs[0].running_since = Some(Time(50));
        let t0 = std::time::Instant::now();
        recs[0].probes.begin(t0);
        let ready_of = |recs: &[ContainerRecord]| {
            let s = pod_status(&input(&pod, &Stage::Running, recs));
            let cond = |t: &str| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == t)
                    .map(|c| c.status.clone())
                    .unwrap()
            };
            let cs = &s.container_statuses[0];
            (cs.started, cs.ready, cond("ContainersReady"), cond("Ready"))
        };
        let f = || "False".to_string();
        let t = || "True".to_string();
        assert_eq!(ready_of(&recs), (Some(false), false, f(), f()));
        use super::super::probe::ProbeKind;
        recs[0].probes.take(ProbeKind::Startup);
        recs[0].probes.record(ProbeKind::Startup, true, t0, t0);
        assert_eq!(ready_of(&recs), (Some(true), false, f(), f()));
        recs[0].probes.take(ProbeKind::Readiness);
        recs[0].probes.record(ProbeKind::Readiness, true, t0, t0);
        assert_eq!(ready_of(&recs), (Some(true), true, t(), t()));

        // The message of a probe kill shows on the latest termination.
        recs[0].running_since = None;
        recs[0].last_terminated = Some(Termination {
            exit_code: 137,
            reason: "Error".into(),
            started_at: Some(Time(50)),
            finished_at: Time(60),
        });
        recs[0].termination_message = Some("failed liveness probe".into());
        let s = pod_status(&input(&pod, &Stage::Running, &recs));
        let last = s.container_statuses[0].last_state.as_ref().unwrap();
        let term = last.terminated.as_ref().unwrap();
        assert_eq!(term.message.as_deref(), Some("failed liveness probe"));
        assert_eq!(s.container_statuses[0].started, Some(false));
    }

    #[test]
    fn transition_times_are_kept() {
        let (pod, recs) = pod_with(&["a"]);
        let first = pod_status(&input(&pod, &Stage::Running, &recs));
        let mut later = input(&pod, &Stage::Running, &recs);
        later.previous = &first.conditions;
        later.now = Time(500);
        let second = pod_status(&later);
        assert_eq!(first.conditions, second.conditions);
    }

    #[test]
    fn rejected_pods_say_why() {
        let (pod, recs) = pod_with(&["a"]);
        let stage = Stage::Rejected {
            message: "privileged container \"a\" is not allowed".into(),
        };
        let s = pod_status(&input(&pod, &stage, &recs));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert!(s.message.unwrap().contains("privileged"));
    }
}
