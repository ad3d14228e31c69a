//! The resource metrics API, `metrics.k8s.io/v1beta1`: NodeMetrics and PodMetrics, what
//! `kubectl top` reads (not to be confused with the server's own Prometheus `/metrics`).
//!
//! As metrics-server scrapes each kubelet, the server asks each node's agent for its
//! `/stats/summary` (cumulative CPU time and the memory working set, read from cgroups when
//! asked) over the agent endpoint's mutual TLS, only when someone asks for metrics. CPU usage
//! is the difference of two readings of a node over the window between them: the previous
//! reading of that node if it is between [`MIN_WINDOW`] and [`MAX_WINDOW`] old, otherwise two
//! readings [`MIN_WINDOW`] apart. A node's figures are reused for [`FRESH`], so `kubectl top`
//! run in a loop costs one reading per node per interval. Everything stays in memory: nothing
//! here touches the store or the disk, and an agent keeps no history at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::core::{Node, Pod};
use api::meta::{Status, StatusDetails, Time};
use api::object::Resource;
use api::selector::{FieldSelector, Selector as LabelSelector};
use api::stats::Summary;
use api::Kind;
use futures_lite::{AsyncReadExt, FutureExt};
use serde_json::{json, Value};

use super::route::MetricsPath;
use super::State;
use crate::auth::User;
use crate::error::ApiError;

use super::route::{METRICS_GROUP as GROUP, METRICS_VERSION as VERSION};
/// How long a node's figures are served before it is read again (metrics-server scrapes
/// every 15 s).
pub const FRESH: Duration = Duration::from_secs(10);
/// The shortest window CPU usage is measured over.
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
/// The longest: an older previous reading is not used (the rate would be a stale average).
pub const MAX_WINDOW: Duration = Duration::from_secs(120);
/// How long reading one agent may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest summary accepted from an agent.
const MAX_SUMMARY_BYTES: usize = 4 << 20;

/// CPU in nanocores and the memory working set in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nano_cores: u64,
    pub memory_bytes: u64,
}

/// A node's figures over one window.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeUsage {
    pub timestamp: Time,
    pub window: Duration,
    pub node: Option<Usage>,
    /// By pod uid: its containers' figures, by name.
    pub pods: HashMap<String, Vec<(String, Usage)>>,
}

/// One reading of an agent.
struct Reading {
    at: Instant,
    summary: Summary,
}

#[derive(Default)]
struct NodeState {
    previous: Option<Reading>,
    figures: Option<(Instant, Option<Arc<NodeUsage>>)>,
}

/// The per-node readings and figures, in memory.
#[derive(Default)]
pub struct Scraper {
    nodes: Mutex<HashMap<String, Arc<smol::lock::Mutex<NodeState>>>>,
}

fn rate(before: Option<u64>, after: Option<u64>, window: Duration) -> Option<u64> {
    let (b, a) = (before?, after?);
    // A counter that went back belongs to a new cgroup: no rate over this window.
    let used = a.checked_sub(b)?;
    Some((used as u128 * 1_000_000_000 / window.as_nanos().max(1)) as u64)
}

/// The figures between two readings of a node: CPU from the difference of the cumulative
/// times, memory from the later reading. A container is matched by pod, name and start time;
/// one that is not in both readings (it just started or restarted) has no figures yet.
pub fn usage_between(before: &Summary, after: &Summary, window: Duration) -> NodeUsage {
    let cpu_ns =
        |c: &Option<api::stats::CpuStats>| c.as_ref().and_then(|c| c.usage_core_nano_seconds);
    let mem = |m: &Option<api::stats::MemoryStats>| m.as_ref().and_then(|m| m.working_set_bytes);
    let node = rate(cpu_ns(&before.node.cpu), cpu_ns(&after.node.cpu), window)
        .zip(mem(&after.node.memory))
        .map(|(cpu, memory)| Usage {
            cpu_nano_cores: cpu,
            memory_bytes: memory,
        });
    let mut pods = HashMap::new();
    for pod in &after.pods {
        let Some(old) = before
            .pods
            .iter()
            .find(|p| p.pod_ref.uid == pod.pod_ref.uid)
        else {
            continue;
        };
        let mut containers = Vec::new();
        for c in &pod.containers {
            let Some(o) = old
                .containers
                .iter()
                .find(|o| o.name == c.name && o.start_time == c.start_time)
            else {
                continue;
            };
            if let (Some(cpu), Some(memory)) =
                (rate(cpu_ns(&o.cpu), cpu_ns(&c.cpu), window), mem(&c.memory))
            {
                containers.push((
                    c.name.clone(),
                    Usage {
                        cpu_nano_cores: cpu,
                        memory_bytes: memory,
                    },
                ));
            }
        }
        if !containers.is_empty() {
            pods.insert(pod.pod_ref.uid.clone(), containers);
        }
    }
    NodeUsage {
        timestamp: Time::now(),
        window,
        node,
        pods,
    }
}

impl Scraper {
    /// Forgets the nodes not in `names` (deleted ones).
    fn keep_only(&self, names: &[String]) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.retain(|n, _| names.contains(n));
    }

    /// The node's figures: fresh ones from memory, or read from its agent now. None when the
    /// agent cannot be read (as metrics-server, the node is then left out).
    async fn usage(&self, state: &State, node: &Node) -> Option<Arc<NodeUsage>> {
        let name = node.metadata.name.clone();
        let slot = {
            let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
            nodes.entry(name.clone()).or_default().clone()
        };
        // One reading of a node at a time; others wait for its figures.
        let mut st = slot.lock().await;
        if let Some((at, figures)) = &st.figures {
            if at.elapsed() < FRESH {
                return figures.clone();
            }
        }
        let figures = self.read(state, node, &mut st).await.map(Arc::new);
        st.figures = Some((Instant::now(), figures.clone()));
        figures
    }

    async fn read(&self, state: &State, node: &Node, st: &mut NodeState) -> Option<NodeUsage> {
        let name = &node.metadata.name;
        let mut now = match scrape(state, node).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(node = %name, "reading the node's stats failed: {e}");
                st.previous = None;
                return None;
            }
        };
        let usable = st.previous.as_ref().is_some_and(|p| {
            let age = now.at.saturating_duration_since(p.at);
            (MIN_WINDOW..=MAX_WINDOW).contains(&age)
        });
        if !usable {
            smol::Timer::after(MIN_WINDOW).await;
            let later = match scrape(state, node).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(node = %name, "reading the node's stats failed: {e}");
                    return None;
                }
            };
            st.previous = Some(std::mem::replace(&mut now, later));
        }
        let before = st.previous.take()?;
        let window = now.at.saturating_duration_since(before.at);
        let usage = usage_between(&before.summary, &now.summary, window);
        st.previous = Some(now);
        Some(usage)
    }
}

/// The node's agent endpoint: its InternalIP and published port. A node that publishes no
/// port (a simulated node, whose address is made up) is never asked.
fn agent_address(node: &Node) -> Option<(String, u16)> {
    let ip = node
        .status
        .addresses
        .iter()
        .find(|a| a.type_ == "InternalIP")?
        .address
        .clone();
    let port = node
        .status
        .daemon_endpoints
        .as_ref()
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .map(|e| e.port)
        .filter(|p| *p > 0 && *p <= 65535)?;
    Some((ip, port as u16))
}

async fn scrape(state: &State, node: &Node) -> Result<Reading, String> {
    let name = &node.metadata.name;
    let (ip, port) = agent_address(node).ok_or("the node publishes no agent endpoint")?;
    let tls = state.pki.agent_client_config().map_err(|e| e.to_string())?;
    let read = async {
        let host = if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        };
        let request =
            format!("GET /stats/summary HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let super::logs::Answer {
            status,
            rest: mut body,
            mut stream,
            ..
        } = super::logs::fetch(state, tls, name, &host, &request).await?;
        (&mut stream)
            .take((MAX_SUMMARY_BYTES + 1) as u64)
            .read_to_end(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!(
                "the agent answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        if body.len() > MAX_SUMMARY_BYTES {
            return Err("the agent's summary is too large".into());
        }
        serde_json::from_slice::<Summary>(&body).map_err(|e| format!("bad summary: {e}"))
    };
    let summary = read
        .or(async {
            smol::Timer::after(SCRAPE_TIMEOUT).await;
            Err("timed out".to_string())
        })
        .await?;
    Ok(Reading {
        at: Instant::now(),
        summary,
    })
}

/// CPU as Kubernetes writes a quantity of nanocores: the largest of n, u, m or whole cores
/// that keeps it exact.
pub fn cpu_quantity(nano: u64) -> String {
    if nano == 0 {
        return "0".into();
    }
    for (div, suffix) in [(1_000_000_000, ""), (1_000_000, "m"), (1_000, "u")] {
        if nano.is_multiple_of(div) {
            return format!("{}{suffix}", nano / div);
        }
    }
    format!("{nano}n")
}

/// A window as Go prints a duration (`1.002s`, `15s`, `1m5s`).
fn window_text(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    let (m, s, frac) = (ms / 60_000, ms / 1000 % 60, ms % 1000);
    let mut out = if m > 0 {
        format!("{m}m")
    } else {
        String::new()
    };
    if frac == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let frac = format!("{frac:03}");
        out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
    }
    out
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "cpu": cpu_quantity(u.cpu_nano_cores),
        "memory": api::meta::Quantity::from_bytes(u.memory_bytes as i64).0,
    })
}

fn metadata(name: &str, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> Value {
    let mut m = json!({ "name": name, "creationTimestamp": Time::now() });
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    if !labels.is_empty() {
        m["labels"] = json!(labels);
    }
    m
}

fn node_metrics(node: &Node, u: &NodeUsage, usage: &Usage) -> Value {
    json!({
        "kind": "NodeMetrics",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": metadata(&node.metadata.name, None, &node.metadata.labels),
        "timestamp": u.timestamp,
        "window": window_text(u.window),
        "usage": usage_json(usage),
    })
}

fn pod_metrics(pod: &Pod, u: &NodeUsage, containers: &[(String, Usage)]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(name, usage)| json!({ "name": name, "usage": usage_json(usage) }))
        .collect();
    json!({
        "kind": "PodMetrics",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": metadata(&pod.metadata.name, Some(pod.metadata.namespace()), &pod.metadata.labels),
        "timestamp": u.timestamp,
        "window": window_text(u.window),
        "containers": containers,
    })
}

fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError::from_status(
        Status::failure(
            404,
            "NotFound",
            format!("{resource}.{GROUP} \"{name}\" not found"),
        )
        .with_details(StatusDetails {
            name: name.to_string(),
            group: GROUP.to_string(),
            kind: resource.to_string(),
            ..Default::default()
        }),
    )
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({
        "kind": kind,
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {},
        "items": items,
    })
}

/// The objects of `K` (in `namespace`) that the request's label and field selectors match.
async fn objects<K: Resource + Clone>(
    state: &State,
    namespace: Option<&str>,
    selectors: &Selectors,
) -> Result<Vec<K>, ApiError> {
    let (items, _) = state.store.list(K::KIND, namespace).await?;
    Ok(items
        .iter()
        .filter(|o| selectors.fields.matches(o))
        .filter_map(|o| K::from_any_ref(o).cloned())
        .filter(|o| selectors.labels.matches(&o.meta().labels))
        .collect())
}

/// A request's `labelSelector` and `fieldSelector` (fields of the Node or Pod, as
/// metrics-server filters).
struct Selectors {
    labels: LabelSelector,
    fields: FieldSelector,
}

fn ready(node: &Node) -> bool {
    node.status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Serves `GET /apis/metrics.k8s.io/v1beta1/{nodes,pods,namespaces/NS/pods}[/NAME]`.
pub(super) async fn serve(
    state: &State,
    req: &tide::Request<State>,
    user: &User,
    path: &MetricsPath,
) -> Result<tide::Response, ApiError> {
    if let Some(node) = user.node_name() {
        return Err(ApiError::forbidden(format!(
            "{}.{GROUP} is forbidden: User \"system:node:{node}\" cannot read resource metrics",
            if path.pods { "pods" } else { "nodes" }
        )));
    }
    let kind = if path.pods { Kind::Pod } else { Kind::Node };
    let selectors = Selectors {
        labels: LabelSelector::parse(&super::query(req, "labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        fields: FieldSelector::parse_for(
            kind,
            &super::query(req, "fieldSelector").unwrap_or_default(),
        )
        .map_err(|e| ApiError::bad_request(e.to_string()))?,
    };
    let body = if path.pods {
        serve_pods(state, path, &selectors).await?
    } else {
        serve_nodes(state, path, &selectors).await?
    };
    Ok(super::json_response(tide::http::StatusCode::Ok, &body))
}

async fn serve_nodes(
    state: &State,
    path: &MetricsPath,
    selectors: &Selectors,
) -> Result<Value, ApiError> {
    let nodes: Vec<Node> = match &path.name {
        Some(name) => match state.registry.get::<Node>("", name).await {
            Ok(n) => vec![n],
            Err(e) if e.code() == 404 => return Err(not_found("nodes", name)),
            Err(e) => return Err(e),
        },
        None => objects::<Node>(state, None, selectors).await?,
    };
    let scraper = &state.resource_metrics;
    if path.name.is_none() && selectors.labels.is_empty() && selectors.fields.is_empty() {
        let names: Vec<String> = nodes.iter().map(|n| n.metadata.name.clone()).collect();
        scraper.keep_only(&names);
    }
    // Every node at once: the answer takes as long as the slowest agent, not their sum.
    let tasks: Vec<_> = nodes
        .into_iter()
        .filter(|n| ready(n) && agent_address(n).is_some())
        .map(|n| async move {
            let u = scraper.usage(state, &n).await;
            (n, u)
        })
        .collect();
    let mut items = Vec::new();
    for (node, u) in futures_util_join_all(tasks).await {
        if let Some(u) = u {
            if let Some(usage) = &u.node {
                items.push(node_metrics(&node, &u, usage));
            }
        }
    }
    match &path.name {
        Some(name) => items.pop().ok_or_else(|| not_found("nodes", name)),
        None => Ok(list("NodeMetricsList", items)),
    }
}

async fn serve_pods(
    state: &State,
    path: &MetricsPath,
    selectors: &Selectors,
) -> Result<Value, ApiError> {
    let pods: Vec<Pod> = match (&path.namespace, &path.name) {
        (Some(ns), Some(name)) => match state.registry.get::<Pod>(ns, name).await {
            Ok(p) => vec![p],
            Err(e) if e.code() == 404 => return Err(not_found("pods", &format!("{ns}/{name}"))),
            Err(e) => return Err(e),
        },
        (ns, _) => objects::<Pod>(state, ns.as_deref(), selectors).await?,
    };
    let mut node_names: Vec<String> = pods
        .iter()
        .filter(|p| p.status.phase.as_deref() == Some("Running"))
        .filter_map(|p| p.spec.node_name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    node_names.sort();
    node_names.dedup();
    let scraper = &state.resource_metrics;
    let tasks: Vec<_> = node_names
        .into_iter()
        .map(|name| async move {
            let node = state.registry.get::<Node>("", &name).await.ok()?;
            if !ready(&node) || agent_address(&node).is_none() {
                return None;
            }
            Some((name, scraper.usage(state, &node).await?))
        })
        .collect();
    let by_node: HashMap<String, Arc<NodeUsage>> = futures_util_join_all(tasks)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut items = Vec::new();
    for pod in &pods {
        let Some(u) = pod.spec.node_name.as_ref().and_then(|n| by_node.get(n)) else {
            continue;
        };
        if let Some(containers) = u.pods.get(&pod.metadata.uid) {
            items.push(pod_metrics(pod, u, containers));
        }
    }
    match (&path.namespace, &path.name) {
        (Some(ns), Some(name)) => items
            .pop()
            .ok_or_else(|| not_found("pods", &format!("{ns}/{name}"))),
        _ => Ok(list("PodMetricsList", items)),
    }
}

/// The pods' usage for the horizontal pod autoscaler: the figures `kubectl top pod` shows,
/// from the same in-memory readings of the agents.
pub struct ServerPodMetrics(pub State);

impl crate::controllers::podautoscaler::PodMetrics for ServerPodMetrics {
    fn usage<'a>(
        &'a self,
        pods: &'a [Pod],
    ) -> crate::controllers::podautoscaler::BoxFuture<
        'a,
        HashMap<String, Vec<crate::controllers::podautoscaler::ContainerUsage>>,
    > {
        Box::pin(async move {
            let state = &self.0;
            let mut node_names: Vec<String> = pods
                .iter()
                .filter(|p| p.status.phase.as_deref() == Some("Running"))
                .filter_map(|p| p.spec.node_name.clone())
                .filter(|n| !n.is_empty())
                .collect();
            node_names.sort();
            node_names.dedup();
            let scraper = &state.resource_metrics;
            let tasks: Vec<_> = node_names
                .into_iter()
                .map(|name| async move {
                    let node = state.registry.get::<Node>("", &name).await.ok()?;
                    if !ready(&node) || agent_address(&node).is_none() {
                        return None;
                    }
                    scraper.usage(state, &node).await
                })
                .collect();
            let mut out = HashMap::new();
            for u in futures_util_join_all(tasks).await.into_iter().flatten() {
                for pod in pods {
                    if let Some(containers) = u.pods.get(&pod.metadata.uid) {
                        let usage = containers
                            .iter()
                            .map(
                                |(name, c)| crate::controllers::podautoscaler::ContainerUsage {
                                    name: name.clone(),
                                    cpu_milli: (c.cpu_nano_cores / 1_000_000) as i64,
                                    memory_bytes: c.memory_bytes as i64,
                                },
                            )
                            .collect();
                        out.insert(pod.metadata.uid.clone(), usage);
                    }
                }
            }
            out
        })
    }

    fn metrics_api<'a>(
        &'a self,
        group: &'a str,
        versions: &'a [&'a str],
        rest: String,
    ) -> crate::controllers::podautoscaler::BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            let aggregator = &self.0.aggregator;
            let Some(version) = versions
                .iter()
                .find(|v| aggregator.backend(group, v).is_some())
            else {
                return Err(crate::controllers::podautoscaler::not_registered(group));
            };
            // As kube-controller-manager's autoscaler with its own service account.
            let user = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
            let groups = [
                "system:serviceaccounts".to_string(),
                "system:serviceaccounts:kube-system".to_string(),
                "system:authenticated".to_string(),
            ];
            let path = format!("/apis/{group}/{version}{rest}");
            aggregator.get(group, version, &path, user, &groups).await
        })
    }
}

/// Runs the futures concurrently and answers their outputs in order.
async fn futures_util_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    futures_lite::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::stats::{ContainerStats, CpuStats, MemoryStats, PodReference, PodStats};

    fn summary(node_cpu: u64, ctr_cpu: u64, start: i64) -> Summary {
        let cpu = |n| {
            Some(CpuStats {
                time: None,
                usage_core_nano_seconds: Some(n),
            })
        };
        let mem = |n| {
            Some(MemoryStats {
                time: None,
                usage_bytes: Some(n * 2),
                working_set_bytes: Some(n),
            })
        };
        let mut s = Summary::default();
        s.node.cpu = cpu(node_cpu);
        s.node.memory = mem(1 << 30);
        s.pods.push(PodStats {
            pod_ref: PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
            },
            containers: vec![ContainerStats {
                name: "main".into(),
                start_time: Some(Time(start)),
                cpu: cpu(ctr_cpu),
                memory: mem(4096),
            }],
        });
        s
    }

    #[test]
    fn cpu_is_a_rate_over_the_window() {
        let before = summary(1_000_000_000, 100, 5);
        let after = summary(3_000_000_000, 500_000_100, 5);
        let u = usage_between(&before, &after, Duration::from_secs(2));
        assert_eq!(
            u.node,
            Some(Usage {
                cpu_nano_cores: 1_000_000_000,
                memory_bytes: 1 << 30
            })
        );
        assert_eq!(
            u.pods["u1"],
            vec![(
                "main".to_string(),
                Usage {
                    cpu_nano_cores: 250_000_000,
                    memory_bytes: 4096
                }
            )]
        );
        // A restarted container (another start time) has no rate over this window.
        let restarted = summary(3_000_000_000, 10, 6);
        let u = usage_between(&before, &restarted, Duration::from_secs(2));
        assert!(u.pods.is_empty());
        // Nor one whose counter went back.
        let back = summary(3_000_000_000, 10, 5);
        assert!(usage_between(&before, &back, Duration::from_secs(2))
            .pods
            .is_empty());
    }

    #[test]
    fn only_nodes_that_publish_an_endpoint_are_asked() {
        let mut n = Node::default();
        n.status.addresses.push(api::core::NodeAddress {
            type_: "InternalIP".into(),
            address: "127.0.0.1".into(),
        });
        assert_eq!(agent_address(&n), None);
        n.status.daemon_endpoints = Some(api::core::NodeDaemonEndpoints {
            kubelet_endpoint: Some(api::core::DaemonEndpoint { port: 0 }),
        });
        assert_eq!(agent_address(&n), None, "a simulated node publishes port 0");
        n.status.daemon_endpoints = Some(api::core::NodeDaemonEndpoints {
            kubelet_endpoint: Some(api::core::DaemonEndpoint { port: 10250 }),
        });
        assert_eq!(agent_address(&n), Some(("127.0.0.1".into(), 10250)));
    }

    #[test]
    fn quantities_as_kubernetes_writes_them() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(123_456), "123456n");
        assert_eq!(cpu_quantity(5_000), "5u");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(window_text(Duration::from_millis(1002)), "1.002s");
        assert_eq!(window_text(Duration::from_secs(15)), "15s");
        assert_eq!(window_text(Duration::from_millis(65_500)), "1m5.5s");
        let u = Usage {
            cpu_nano_cores: 1_500_000,
            memory_bytes: 2 << 20,
        };
        assert_eq!(usage_json(&u), json!({"cpu": "1500u", "memory": "2Mi"}));
    }
}
