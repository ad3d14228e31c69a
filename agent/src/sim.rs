//! Simulated nodes, like Kubernetes' kubemark: `skiff-agent --simulate N --kubeconfig FILE`
//! registers N fake Nodes (`sim-0001`...), heartbeats each of them every `--heartbeat-seconds`
//! (staggered so the server sees an even stream), and moves the pods bound to them to
//! Running without starting anything: a status with the Ready conditions, running container
//! statuses and a fake pod IP. Terminating pods are confirmed deleted at once, as the real
//! agent does after stopping their containers (a delete with grace 0 and a uid
//! precondition). With `--sim-complete-seconds S`, pods that do not always restart
//! (restartPolicy Never or OnFailure: Jobs' pods) exit 0 and succeed S seconds after they
//! run, so batch work completes.
//!
//! It authenticates with an admin kubeconfig (one identity for all its nodes; a node
//! certificate could only touch its own Node). It talks over a handful of connections, one
//! per worker, not one per node: 1,000 simulated nodes cost the server a few sockets.
//!
//! ```text
//! sim::run(ClientConfig, SimConfig) -> Result<(), SimError>   // blocks forever
//! sim::build_node(&SimConfig, index) -> Node ; sim::running_status(&Pod, &SimNode, Time) -> PodStatus
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use api::client::{resource_path, Client, ClientConfig, ClientError, WatchEvent, ACCEPT_JSON};
use api::core::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, HostIp, Node,
    Pod, PodCondition, PodStatus, Taint,
};
use api::meta::{DeleteOptions, Preconditions, Quantity, Time};
use api::object::Kind;
use futures_lite::StreamExt;

use crate::node::lease::NodeLease;
use crate::node::register::{self, NodeSettings};
use crate::node::NodeFacts;

/// The label every simulated node carries.
pub const SIMULATED_LABEL: &str = "node.skiff.dev/simulated";
/// Workers writing pod statuses and deletions (each with its own connection).
const POD_WORKERS: usize = 8;
/// Workers sending heartbeats (each with its own connection).
const HEARTBEAT_WORKERS: usize = 2;
/// Nodes registered at once.
const REGISTER_WORKERS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("--simulate needs at least one node")]
    NoNodes,
    #[error("--simulate needs --kubeconfig (or KUBECONFIG) with admin credentials")]
    NoKubeconfig,
    #[error("{0}")]
    Setting(String),
}

/// What the simulated nodes look like.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub count: usize,
    /// Node names are `<prefix>-0001`...
    pub prefix: String,
    pub cpu: Quantity,
    pub memory: Quantity,
    pub ephemeral_storage: Quantity,
    pub max_pods: u32,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// How often each node's Lease is renewed.
    pub heartbeat: Duration,
    /// How often each node's unchanged status is posted (a changed one at once).
    pub status_report: Duration,
    /// Pods that do not always restart succeed this long after they run (None: never).
    pub complete_after: Option<Duration>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            count: 1,
            prefix: "sim".into(),
            cpu: Quantity("4".into()),
            memory: Quantity("8Gi".into()),
            ephemeral_storage: Quantity("32Gi".into()),
            max_pods: 110,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            heartbeat: Duration::from_secs(10),
            status_report: Duration::from_secs(300),
            complete_after: None,
        }
    }
}

/// One simulated node: its name, its address and the /24 its pods get addresses from.
#[derive(Clone, Debug)]
pub struct SimNode {
    pub name: String,
    pub index: usize,
    pub ip: String,
}

impl SimNode {
    pub fn new(cfg: &SimConfig, index: usize) -> SimNode {
        SimNode {
            name: format!("{}-{:04}", cfg.prefix, index + 1),
            index,
            ip: format!("172.20.{}.{}", (index / 250) % 256, index % 250 + 1),
        }
    }

    /// A fake pod IP in the node's /24 (10.128.0.0/9 split by node), `n` counting from 0.
    pub fn pod_ip(&self, n: u32) -> String {
        let subnet = 128 * 256 + self.index;
        format!(
            "10.{}.{}.{}",
            (subnet / 256) % 256,
            subnet % 256,
            n % 252 + 2
        )
    }
}

/// The Node a simulated node registers: like a real small board.
pub fn build_node(cfg: &SimConfig, node: &SimNode) -> Node {
    let facts = NodeFacts {
        cpus: 1,
        memory_kib: 1,
        ephemeral_storage_bytes: 1,
        arch: "amd64".into(),
        kernel_version: "simulated".into(),
        os_image: "skiff simulated node".into(),
        machine_id: format!("sim-{:032x}", node.index),
        boot_id: format!("sim-boot-{}", node.index),
    };
    let mut labels = cfg.labels.clone();
    labels.insert(SIMULATED_LABEL.into(), "true".into());
    let settings = NodeSettings {
        annotations: Default::default(),
        name: node.name.clone(),
        internal_ip: node.ip.clone(),
        labels,
        taints: cfg.taints.clone(),
        max_pods: cfg.max_pods,
        // Simulated nodes serve no container logs.
        kubelet_port: 0,
    };
    let mut n = register::build_node(&facts, &settings, Time::now());
    for list in [&mut n.status.capacity, &mut n.status.allocatable] {
        list.insert("cpu".into(), cfg.cpu.clone());
        list.insert("memory".into(), cfg.memory.clone());
        list.insert("ephemeral-storage".into(), cfg.ephemeral_storage.clone());
    }
    n
}

fn condition(type_: &str, now: Time) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: Some(now),
        ..Default::default()
    }
}

/// `running` (a simulated pod's status) after its containers exited 0, as the kubelet
/// reports a pod that completed.
pub fn succeeded_status(mut running: PodStatus, now: Time) -> PodStatus {
    running.phase = Some("Succeeded".into());
    for c in &mut running.conditions {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            c.status = "False".into();
            c.reason = Some("PodCompleted".into());
            c.last_transition_time = Some(now);
        }
    }
    for c in &mut running.container_statuses {
        let started_at = c
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at);
        c.ready = false;
        c.started = Some(false);
        c.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                started_at,
                finished_at: Some(now),
                container_id: c.container_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    running
}

/// The status of a pod "running" on a simulated node.
pub fn running_status(pod: &Pod, node: &SimNode, pod_ip: &str, now: Time) -> PodStatus {
    let containers = pod
        .spec
        .containers
        .iter()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(now),
                }),
                ..Default::default()
            }),
            ready: true,
            restart_count: 0,
            image: c.image.clone().unwrap_or_default(),
            image_id: String::new(),
            container_id: Some(format!("sim://{}/{}", pod.metadata.uid, c.name)),
            started: Some(true),
            ..Default::default()
        })
        .collect();
    PodStatus {
        phase: Some("Running".into()),
        conditions: ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
            .into_iter()
            .map(|t| condition(t, now))
            .collect(),
        host_ip: Some(node.ip.clone()),
        host_ips: vec![HostIp {
            ip: node.ip.clone(),
        }],
        pod_ip: Some(pod_ip.into()),
        pod_ips: vec![HostIp { ip: pod_ip.into() }],
        start_time: Some(now),
        container_statuses: containers,
        qos_class: Some(crate::pods::status::qos_class(pod).into()),
        ..Default::default()
    }
}

/// What to do for a pod event.
#[derive(Debug, PartialEq)]
enum Job {
    Run {
        ns: String,
        name: String,
        status: Box<PodStatus>,
    },
    ConfirmDeletion {
        ns: String,
        name: String,
        uid: String,
    },
}

/// The `--simulate` flags of `skiff-agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    /// Run N simulated nodes (no containers: bound pods are reported Running) instead of
    /// this machine's agent, like Kubernetes' kubemark; needs --kubeconfig.
    #[arg(long, value_name = "N")]
    pub simulate: Option<usize>,
    /// Admin kubeconfig the simulated nodes use.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Simulated nodes' name prefix (`<prefix>-0001`...).
    #[arg(long, default_value = "sim")]
    pub sim_prefix: String,
    /// Simulated nodes' cpu.
    #[arg(long, default_value = "4")]
    pub sim_cpu: String,
    /// Simulated nodes' memory.
    #[arg(long, default_value = "8Gi")]
    pub sim_memory: String,
    /// Pods that do not always restart (Jobs' pods) exit 0 this many seconds after they run;
    /// without it they run until deleted.
    #[arg(long, value_name = "SECONDS")]
    pub sim_complete_seconds: Option<f64>,
}

/// Runs `skiff-agent --simulate N` with the agent's node flags (labels, taints, max pods,
/// heartbeat period); blocks forever.
pub fn run_cli(
    args: &SimArgs,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    max_pods: u32,
    heartbeat: Duration,
    status_report: Duration,
) -> Result<(), SimError> {
    let count = args.simulate.unwrap_or(0);
    let path = args.kubeconfig.clone().ok_or(SimError::NoKubeconfig)?;
    let kc = api::kubeconfig::Kubeconfig::load(&path)
        .map_err(|e| SimError::Client(ClientError::Kubeconfig(e)))?;
    let config = ClientConfig::from_kubeconfig(&kc, None)?;
    for q in [&args.sim_cpu, &args.sim_memory] {
        Quantity(q.clone())
            .validate()
            .map_err(|e| SimError::Setting(e.to_string()))?;
    }
    let cfg = SimConfig {
        count,
        prefix: args.sim_prefix.clone(),
        cpu: Quantity(args.sim_cpu.clone()),
        memory: Quantity(args.sim_memory.clone()),
        max_pods,
        labels,
        taints,
        heartbeat,
        status_report,
        complete_after: args
            .sim_complete_seconds
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64),
        ..Default::default()
    };
    api::runtime::run(run(config, cfg))
}

/// Registers the nodes, then heartbeats them and runs their pods. Returns only on a fatal
/// error.
pub async fn run(config: ClientConfig, cfg: SimConfig) -> Result<(), SimError> {
    if cfg.count == 0 {
        return Err(SimError::NoNodes);
    }
    let nodes: Arc<Vec<SimNode>> =
        Arc::new((0..cfg.count).map(|i| SimNode::new(&cfg, i)).collect());
    let new_client = || Client::new(config.clone());

    // Register every node.
    let (todo_tx, todo_rx) = async_channel::unbounded::<usize>();
    for i in 0..nodes.len() {
        let _ = todo_tx.try_send(i);
    }
    todo_tx.close();
    let mut registering = Vec::new();
    for _ in 0..REGISTER_WORKERS.min(nodes.len()) {
        let (client, rx, nodes, cfg) = (new_client()?, todo_rx.clone(), nodes.clone(), cfg.clone());
        registering.push(smol::spawn(async move {
            while let Ok(i) = rx.recv().await {
                register_until_done(&client, &build_node(&cfg, &nodes[i])).await;
            }
        }));
    }
    for t in registering {
        t.await;
    }
    tracing::info!(nodes = nodes.len(), "simulated nodes registered");

    // Nodes whose stored status is not what they report (marked unknown while their
    // heartbeats did not arrive, or deleted): their status goes out at their next turn.
    let stale: Arc<std::sync::Mutex<HashSet<String>>> = Default::default();
    let (client, marked) = (new_client()?, stale.clone());
    smol::spawn(async move {
        register::follow_stale_statuses(client, Some(SIMULATED_LABEL), None, |name| {
            lock(&marked).insert(name);
            true
        })
        .await
    })
    .detach();

    // Heartbeats, staggered: worker w renews the Leases of nodes w, w+W, ... spaced evenly
    // over the period, and posts each node's status every `status_report` (as kubelets do).
    for w in 0..HEARTBEAT_WORKERS.min(nodes.len()) {
        let (client, nodes, cfg, stale) =
            (new_client()?, nodes.clone(), cfg.clone(), stale.clone());
        smol::spawn(async move {
            let mine: Vec<usize> = (w..nodes.len()).step_by(HEARTBEAT_WORKERS).collect();
            let gap = cfg.heartbeat / mine.len().max(1) as u32;
            let since = Time::now();
            // Each node's Lease in kube-node-lease, renewed every heartbeat.
            let mut leases: Vec<NodeLease> =
                mine.iter().map(|&i| NodeLease::new(&nodes[i].name)).collect();
            let mut reported = vec![std::time::Instant::now(); mine.len()];
            loop {
                for (k, &i) in mine.iter().enumerate() {
                    let started = std::time::Instant::now();
                    if let Err(e) = leases[k].renew(&client, None).await {
                        tracing::warn!(node = %nodes[i].name, "renewing the node lease failed: {e}");
                    }
                    let off = lock(&stale).remove(&nodes[i].name);
                    if off || reported[k].elapsed() + cfg.heartbeat / 2 >= cfg.status_report {
                        reported[k] = std::time::Instant::now();
                        match register::heartbeat(&client, &nodes[i].name, since).await {
                            Ok(true) => {}
                            Ok(false) => {
                                register_until_done(&client, &build_node(&cfg, &nodes[i])).await
                            }
                            Err(e) => {
                                tracing::warn!(node = %nodes[i].name, "posting the status failed: {e}")
                            }
                        }
                    }
                    smol::Timer::after(gap.saturating_sub(started.elapsed())).await;
                }
            }
        })
        .detach();
    }

    // Pod workers.
    let (jobs_tx, jobs_rx) = async_channel::unbounded::<Job>();
    for _ in 0..POD_WORKERS {
        let (client, rx) = (new_client()?, jobs_rx.clone());
        smol::spawn(async move {
            while let Ok(job) = rx.recv().await {
                do_job(&client, job).await;
            }
        })
        .detach();
    }
    follow_pods(&new_client()?, &nodes, &jobs_tx, cfg.complete_after).await;
    Ok(())
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn register_until_done(client: &Client, node: &Node) {
    let mut delay = Duration::from_millis(200);
    loop {
        match register::register(client, node).await {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(node = %node.metadata.name, "cannot register: {e}");
                smol::Timer::after(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

async fn do_job(client: &Client, job: Job) {
    for attempt in 0..5u32 {
        let result = match &job {
            Job::Run { ns, name, status } => {
                let path = format!(
                    "{}/status?fieldManager=kubelet",
                    resource_path(Kind::Pod, Some(ns), Some(name))
                );
                let body = serde_json::json!({ "status": api::codec::to_json(&Pod {
                    status: (**status).clone(),
                    ..Default::default()
                })["status"] });
                let body = serde_json::to_vec(&body).unwrap_or_default();
                match client
                    .request(
                        "PATCH",
                        &path,
                        Some(("application/merge-patch+json", body)),
                        ACCEPT_JSON,
                    )
                    .await
                {
                    Ok(r) => r.error_for_status().map(|_| ()),
                    Err(e) => Err(e),
                }
            }
            Job::ConfirmDeletion { ns, name, uid } => {
                let opts = DeleteOptions {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                client.delete::<Pod>(ns, name, &opts).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => return,
            Err(e) if e.is_not_found() || e.is_conflict() => return,
            Err(e) => {
                tracing::warn!(job = ?job, attempt, "simulated pod update failed: {e}");
                smol::Timer::after(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
}

/// What the watch loop remembers: pods already reported Running or being deleted, and the
/// next pod IP of each node.
#[derive(Default)]
struct Seen {
    running: HashSet<String>,
    deleting: HashSet<String>,
    next_ip: HashMap<usize, u32>,
}

impl Seen {
    /// The job a pod event calls for, if any.
    fn job_for(&mut self, pod: &Pod, nodes: &HashMap<&str, &SimNode>) -> Option<Job> {
        let node = nodes.get(pod.spec.node_name.as_deref()?)?;
        let uid = pod.metadata.uid.clone();
        let (ns, name) = (
            pod.metadata.namespace().to_string(),
            pod.metadata.name.clone(),
        );
        if pod.metadata.deletion_timestamp.is_some() {
            return self
                .deleting
                .insert(uid.clone())
                .then_some(Job::ConfirmDeletion { ns, name, uid });
        }
        if pod.status.phase.as_deref() == Some("Running")
            || matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed"))
            || !self.running.insert(uid)
        {
            return None;
        }
        let n = self.next_ip.entry(node.index).or_insert(0);
        let ip = node.pod_ip(*n);
        *n = n.wrapping_add(1);
        Some(Job::Run {
            ns,
            name,
            status: Box::new(running_status(pod, node, &ip, Time::now())),
        })
    }

    fn forget(&mut self, pod: &Pod) {
        self.running.remove(&pod.metadata.uid);
        self.deleting.remove(&pod.metadata.uid);
    }
}

/// For a pod that is being started and does not always restart: its success, reported
/// `complete_after` later.
fn schedule_completion(
    job: &Job,
    pod: &Pod,
    complete_after: Option<Duration>,
    jobs: &async_channel::Sender<Job>,
) {
    let (Some(after), Job::Run { ns, name, status }) = (complete_after, job) else {
        return;
    };
    if matches!(pod.spec.restart_policy.as_deref(), None | Some("Always")) {
        return;
    }
    let (ns, name, running, jobs) = (ns.clone(), name.clone(), (**status).clone(), jobs.clone());
    smol::spawn(async move {
        smol::Timer::after(after).await;
        let status = Box::new(succeeded_status(running, Time::now()));
        let _ = jobs.send(Job::Run { ns, name, status }).await;
    })
    .detach();
}

/// The pods a node may have to act on: bound ones (pending pods are the scheduler's).
const BOUND_PODS: &str = "spec.nodeName!=";

/// Lists and watches every bound pod (resuming, re-listing on 410) and hands work to the
/// workers.
async fn follow_pods(
    client: &Client,
    nodes: &[SimNode],
    jobs: &async_channel::Sender<Job>,
    complete_after: Option<Duration>,
) {
    let by_name: HashMap<&str, &SimNode> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut seen = Seen::default();
    let mut rv = String::new();
    loop {
        if rv.is_empty() {
            match client.list::<Pod>(None, None, Some(BOUND_PODS)).await {
                Ok((pods, list_rv)) => {
                    for p in &pods {
                        if let Some(job) = seen.job_for(p, &by_name) {
                            schedule_completion(&job, p, complete_after, jobs);
                            let _ = jobs.send(job).await;
                        }
                    }
                    rv = list_rv;
                }
                Err(e) => {
                    tracing::warn!("listing pods failed: {e}");
                    smol::Timer::after(Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        let mut stream = match client
            .watch::<Pod>(None, &rv, None, Some(BOUND_PODS), None)
            .await
        {
            Ok(s) => s,
            Err(e) => {
                if e.code() == Some(410) {
                    rv.clear();
                } else {
                    tracing::warn!("watching pods failed: {e}");
                    smol::Timer::after(Duration::from_secs(1)).await;
                }
                continue;
            }
        };
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                    rv = p.metadata.resource_version.clone();
                    if let Some(job) = seen.job_for(&p, &by_name) {
                        schedule_completion(&job, &p, complete_after, jobs);
                        let _ = jobs.send(job).await;
                    }
                }
                Ok(WatchEvent::Deleted(p)) => {
                    rv = p.metadata.resource_version.clone();
                    seen.forget(&p);
                }
                Ok(WatchEvent::Bookmark { resource_version }) => rv = resource_version,
                Err(e) => {
                    if e.code() == Some(410) {
                        rv.clear();
                    } else {
                        tracing::warn!("pod watch failed: {e}");
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::Container;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = format!("uid-{name}");
        p.spec.node_name = node.map(Into::into);
        p.spec.containers = vec![Container {
            name: "app".into(),
            image: Some("busybox".into()),
            ..Default::default()
        }];
        p
    }

    #[test]
    fn completed_pods_report_success_as_the_kubelet() {
        let node = SimNode::new(&SimConfig::default(), 0);
        let running = running_status(&pod("a", Some("sim-0001")), &node, "10.128.0.2", Time(10));
        let done = succeeded_status(running, Time(12));
        assert_eq!(done.phase.as_deref(), Some("Succeeded"));
        let ready = done.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
        let t = done.container_statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("terminated");
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(
            (t.started_at, t.finished_at),
            (Some(Time(10)), Some(Time(12)))
        );
    }

    #[test]
    fn nodes_look_like_small_boards() {
        let cfg = SimConfig {
            count: 3,
            ..Default::default()
        };
        let n = SimNode::new(&cfg, 0);
        assert_eq!(n.name, "sim-0001");
        let node = build_node(&cfg, &n);
        assert_eq!(node.status.allocatable["cpu"].0, "4");
        assert_eq!(node.status.allocatable["memory"].0, "8Gi");
        assert_eq!(node.status.allocatable["pods"].0, "110");
        assert_eq!(node.metadata.labels["kubernetes.io/hostname"], "sim-0001");
        assert_eq!(node.metadata.labels[SIMULATED_LABEL], "true");
        assert_eq!(node.status.conditions[0].status, "True");
        assert_ne!(SimNode::new(&cfg, 1).ip, n.ip);
        assert_ne!(SimNode::new(&cfg, 1).pod_ip(0), n.pod_ip(0));
        assert_eq!(SimNode::new(&cfg, 999).name, "sim-1000");
    }

    #[test]
    fn bound_pods_run_once_and_terminating_pods_are_confirmed() {
        let cfg = SimConfig::default();
        let n = SimNode::new(&cfg, 0);
        let nodes: HashMap<&str, &SimNode> = [(n.name.as_str(), &n)].into();
        let mut seen = Seen::default();
        assert_eq!(seen.job_for(&pod("a", None), &nodes), None);
        assert_eq!(seen.job_for(&pod("a", Some("elsewhere")), &nodes), None);
        let p = pod("a", Some("sim-0001"));
        match seen.job_for(&p, &nodes) {
            Some(Job::Run { status, .. }) => {
                assert_eq!(status.phase.as_deref(), Some("Running"));
                assert!(status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True"));
                let cs = &status.container_statuses[0];
                assert!(cs.ready && cs.state.as_ref().is_some_and(|s| s.running.is_some()));
                assert!(status
                    .pod_ip
                    .as_deref()
                    .is_some_and(|ip| ip.starts_with("10.")));
            }
            other => panic!("{other:?}"),
        }
        // Our own status write coming back is not work.
        assert_eq!(seen.job_for(&p, &nodes), None);
        let mut gone = p.clone();
        gone.metadata.deletion_timestamp = Some(Time::now());
        assert_eq!(
            seen.job_for(&gone, &nodes),
            Some(Job::ConfirmDeletion {
                ns: "default".into(),
                name: "a".into(),
                uid: "uid-a".into()
            })
        );
        assert_eq!(seen.job_for(&gone, &nodes), None);
        seen.forget(&gone);
        assert!(seen.running.is_empty() && seen.deleting.is_empty());
    }
}
