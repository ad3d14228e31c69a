//! The scheduler's own view of the cluster: per-node accounting of what is bound (or assumed
//! bound) there, kept current incrementally from informer changes so that a decision never
//! rescans every pod.
//!
//! A pod is accounted as soon as the scheduler decides to bind it ("assumed", as in
//! kube-scheduler's cache) so the next decision of the same batch sees it; the informer's
//! change for the bound pod later confirms the assumption, and a failed bind forgets it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use api::core::{Container, Node, Pod};
use api::meta::ObjectMeta;
use api::object::{AnyObject, Resource};
use api::Kind;

use crate::machinery::informer::{Key, Packed};

/// Kubernetes' default CPU request used for scoring a container that requests none (100m).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Kubernetes' default memory request used for scoring a container that requests none.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of the resources the scheduler accounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
}

impl Resources {
    fn add(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(o.milli_cpu);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        self.pods = self.pods.saturating_add(o.pods);
    }

    fn sub(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(o.milli_cpu);
        self.memory = self.memory.saturating_sub(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(o.ephemeral_storage);
        self.pods = self.pods.saturating_sub(o.pods);
    }

    fn max(&self, o: &Resources) -> Resources {
        Resources {
            milli_cpu: self.milli_cpu.max(o.milli_cpu),
            memory: self.memory.max(o.memory),
            ephemeral_storage: self.ephemeral_storage.max(o.ephemeral_storage),
            pods: self.pods.max(o.pods),
        }
    }

    /// Reads `cpu`, `memory`, `ephemeral-storage` and `pods` from a resource list; a value
    /// that does not parse counts as zero (validation refuses such pods and nodes).
    pub fn from_list(list: &std::collections::BTreeMap<String, api::meta::Quantity>) -> Self {
        let get = |k: &str, milli: bool| {
            list.get(k)
                .and_then(|q| {
                    if milli {
                        q.milli_value().ok()
                    } else {
                        q.value().ok()
                    }
                })
                .unwrap_or(0)
                .max(0)
        };
        Resources {
            milli_cpu: get("cpu", true),
            memory: get("memory", false),
            ephemeral_storage: get("ephemeral-storage", false),
            pods: get("pods", false),
        }
    }
}

/// A host port a pod asks for: (host IP, protocol, port). An empty or `0.0.0.0` IP means
/// every address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    fn any_ip(&self) -> bool {
        self.ip.is_empty() || self.ip == "0.0.0.0" || self.ip == "::"
    }

    /// Whether two pods asking for these could not share a node.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.any_ip() || other.any_ip() || self.ip == other.ip)
    }
}

/// What the scheduler needs of a pod, computed once per pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodFacts {
    /// The effective request (`pods` is 1).
    pub requests: Resources,
    /// CPU and memory with Kubernetes' defaults for containers that request none, for
    /// scoring only (so pods without requests still spread).
    pub nonzero_milli_cpu: i64,
    pub nonzero_memory: i64,
    pub host_ports: Vec<HostPort>,
    /// The uid of the controller owner (ReplicaSet, DaemonSet...), for spreading.
    pub owner: Option<String>,
    /// `spec.priority` (0 when unset), for preemption.
    pub priority: i32,
}

fn container_requests(c: &Container) -> Resources {
    c.resources
        .as_ref()
        .map(|r| Resources::from_list(&r.requests))
        .unwrap_or_default()
}

/// Pairwise sum of (cpu, memory), saturating: requests are any quantity a pod asks for, and
/// two of `i64::MAX` overflowed (in `Resources::add` too, which saturates).
fn add2(a: (i64, i64), b: (i64, i64)) -> (i64, i64) {
    (a.0.saturating_add(b.0), a.1.saturating_add(b.1))
}

fn nonzero(r: &Resources) -> (i64, i64) {
    (
        if r.milli_cpu == 0 {
            DEFAULT_MILLI_CPU_REQUEST
        } else {
            r.milli_cpu
        },
        if r.memory == 0 {
            DEFAULT_MEMORY_REQUEST
        } else {
            r.memory
        },
    )
}

impl PodFacts {
    /// Kubernetes' effective request: the containers' sum, or the largest init container if
    /// more (sidecar init containers, `restartPolicy: Always`, keep running and add up), plus
    /// the pod overhead; pod-level `resources.requests` replace cpu and memory when set.
    pub fn of(pod: &Pod) -> PodFacts {
        let mut sum = Resources::default();
        let mut nz = (0i64, 0i64);
        for c in &pod.spec.containers {
            let r = container_requests(c);
            sum.add(&r);
            let n = nonzero(&r);
            nz = add2(nz, n);
        }
        let mut sidecars = Resources::default();
        let mut sidecars_nz = (0i64, 0i64);
        let mut init_peak = Resources::default();
        let mut init_peak_nz = (0i64, 0i64);
        for c in &pod.spec.init_containers {
            let r = container_requests(c);
            let n = nonzero(&r);
            if c.restart_policy.as_deref() == Some("Always") {
                sidecars.add(&r);
                sidecars_nz = add2(sidecars_nz, n);
                init_peak = init_peak.max(&sidecars);
                init_peak_nz = (
                    init_peak_nz.0.max(sidecars_nz.0),
                    init_peak_nz.1.max(sidecars_nz.1),
                );
            } else {
                let mut during = sidecars;
                during.add(&r);
                init_peak = init_peak.max(&during);
                let during_nz = add2(sidecars_nz, n);
                init_peak_nz = (
                    init_peak_nz.0.max(during_nz.0),
                    init_peak_nz.1.max(during_nz.1),
                );
            }
        }
        sum.add(&sidecars);
        nz = add2(nz, sidecars_nz);
        let mut requests = sum.max(&init_peak);
        let mut nz = (nz.0.max(init_peak_nz.0), nz.1.max(init_peak_nz.1));
        if let Some(pod_level) = &pod.spec.resources {
            let p = Resources::from_list(&pod_level.requests);
            if pod_level.requests.contains_key("cpu") {
                requests.milli_cpu = p.milli_cpu;
                nz.0 = p.milli_cpu;
            }
            if pod_level.requests.contains_key("memory") {
                requests.memory = p.memory;
                nz.1 = p.memory;
            }
        }
        let overhead = Resources::from_list(&pod.spec.overhead);
        requests.add(&overhead);
        requests.pods = 1;
        let host_network = pod.spec.host_network.unwrap_or(false);
        let mut host_ports = Vec::new();
        for c in pod.spec.all_containers() {
            for p in &c.ports {
                // A host-network pod's container ports are host ports.
                let port = match p.host_port {
                    Some(hp) if hp > 0 => hp,
                    _ if host_network && p.container_port > 0 => p.container_port,
                    _ => continue,
                };
                host_ports.push(HostPort {
                    ip: p.host_ip.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    port,
                });
            }
        }
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        PodFacts {
            requests,
            nonzero_milli_cpu: nz.0.saturating_add(overhead.milli_cpu),
            nonzero_memory: nz.1.saturating_add(overhead.memory),
            host_ports,
            owner,
            priority: pod.spec.priority.unwrap_or(0),
        }
    }
}

/// One node and what is accounted on it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub allocatable: Resources,
    pub requested: Resources,
    pub nonzero_milli_cpu: i64,
    pub nonzero_memory: i64,
    pub host_ports: HashMap<HostPort, u32>,
    /// Pods per controller owner uid.
    pub owners: HashMap<String, u32>,
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let allocatable = if node.status.allocatable.is_empty() {
            Resources::from_list(&node.status.capacity)
        } else {
            Resources::from_list(&node.status.allocatable)
        };
        NodeInfo {
            node,
            allocatable,
            requested: Resources::default(),
            nonzero_milli_cpu: 0,
            nonzero_memory: 0,
            host_ports: HashMap::new(),
            owners: HashMap::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.node.metadata.name
    }

    pub fn add_pod(&mut self, f: &PodFacts) {
        self.requested.add(&f.requests);
        self.nonzero_milli_cpu = self.nonzero_milli_cpu.saturating_add(f.nonzero_milli_cpu);
        self.nonzero_memory = self.nonzero_memory.saturating_add(f.nonzero_memory);
        for p in &f.host_ports {
            *self.host_ports.entry(p.clone()).or_insert(0) += 1;
        }
        if let Some(o) = &f.owner {
            *self.owners.entry(o.clone()).or_insert(0) += 1;
        }
    }

    pub fn remove_pod(&mut self, f: &PodFacts) {
        self.requested.sub(&f.requests);
        self.nonzero_milli_cpu = self.nonzero_milli_cpu.saturating_sub(f.nonzero_milli_cpu);
        self.nonzero_memory = self.nonzero_memory.saturating_sub(f.nonzero_memory);
        for p in &f.host_ports {
            if let Some(n) = self.host_ports.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.host_ports.remove(p);
                }
            }
        }
        if let Some(o) = &f.owner {
            if let Some(n) = self.owners.get_mut(o) {
                *n -= 1;
                if *n == 0 {
                    self.owners.remove(o);
                }
            }
        }
    }

    /// Pods of controller `owner` on this node.
    pub fn owned_by(&self, owner: &str) -> u32 {
        self.owners.get(owner).copied().unwrap_or(0)
    }
}

/// A pod accounted on a node. The pod itself is kept packed (the informer cache's own copy,
/// shared): with tens of thousands of pods, decoded copies would cost hundreds of MiB.
#[derive(Clone, Debug)]
pub struct BoundPod {
    pub packed: Packed,
    /// The decoded pod, for the few with required pod anti-affinity terms (every decision
    /// checks their terms).
    pub anti_affinity: Option<Arc<Pod>>,
    pub node: String,
    pub facts: PodFacts,
    /// Bound by this scheduler, not yet seen bound through the informer.
    pub assumed: bool,
}

impl BoundPod {
    /// The pod's metadata (decoded on each call).
    pub fn meta(&self) -> Option<ObjectMeta> {
        self.packed.meta()
    }
}

/// Whether a pod occupies its node: bound and not finished.
pub fn occupies_node(pod: &Pod) -> Option<&str> {
    let node = pod.spec.node_name.as_deref().filter(|n| !n.is_empty())?;
    match pod.status.phase.as_deref() {
        Some("Succeeded") | Some("Failed") => None,
        _ => Some(node),
    }
}

fn has_required_anti_affinity(pod: &Pod) -> bool {
    pod.spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .is_some_and(|a| {
            !a.required_during_scheduling_ignored_during_execution
                .is_empty()
        })
}

/// The nodes (sorted by name) and every bound or assumed pod.
#[derive(Default)]
pub struct ClusterState {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    pods: HashMap<Key, BoundPod>,
    /// Bound pods with required anti-affinity (few; checked for every decision).
    anti_affinity_pods: HashSet<Key>,
    /// Pending pods that preempted others, with the node they wait for (their
    /// `status.nominatedNodeName`).
    nominated: HashMap<Key, Nomination>,
}

/// A pending pod's claim on a node where it preempted pods: its requests are held there
/// against pods of no higher priority until it is bound (Kubernetes' nominated pods).
#[derive(Clone, Debug)]
pub struct Nomination {
    pub node: String,
    pub facts: PodFacts,
}

/// What a node change means for pods waiting for room.
#[derive(Debug, PartialEq, Eq)]
pub enum NodeChange {
    /// Nothing a filter looks at changed (a status write other than a heartbeat).
    Same,
    /// Added, or something a filter looks at changed: unschedulable pods may fit now.
    Relevant,
}

impl ClusterState {
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    pub fn pods(&self) -> impl Iterator<Item = (&Key, &BoundPod)> {
        self.pods.iter()
    }

    pub fn pod(&self, key: &Key) -> Option<&BoundPod> {
        self.pods.get(key)
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Bound pods that carry required anti-affinity terms.
    pub fn anti_affinity_pods(&self) -> impl Iterator<Item = &BoundPod> {
        self.anti_affinity_pods
            .iter()
            .filter_map(|k| self.pods.get(k))
    }

    fn reindex(&mut self) {
        self.index = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name().to_string(), i))
            .collect();
    }

    /// Adds or replaces a node, keeping what is accounted on it.
    pub fn upsert_node(&mut self, node: Arc<Node>) -> NodeChange {
        let name = node.metadata.name.clone();
        match self.index.get(&name).copied() {
            Some(i) => {
                let old = &self.nodes[i];
                let relevant = old.node.metadata.labels != node.metadata.labels
                    || old.node.spec != node.spec
                    || old.node.status.allocatable != node.status.allocatable
                    || old.node.status.capacity != node.status.capacity
                    || crate::scheduler::filter::node_ready(&old.node)
                        != crate::scheduler::filter::node_ready(&node);
                let mut fresh = NodeInfo::new(node);
                let old = &self.nodes[i];
                fresh.requested = old.requested;
                fresh.nonzero_milli_cpu = old.nonzero_milli_cpu;
                fresh.nonzero_memory = old.nonzero_memory;
                fresh.host_ports = old.host_ports.clone();
                fresh.owners = old.owners.clone();
                self.nodes[i] = fresh;
                if relevant {
                    NodeChange::Relevant
                } else {
                    NodeChange::Same
                }
            }
            None => {
                let mut info = NodeInfo::new(node);
                // Pods bound to a node the scheduler had not seen yet.
                for p in self.pods.values().filter(|p| p.node == name) {
                    info.add_pod(&p.facts);
                }
                let at = self.nodes.partition_point(|n| n.name() < info.name());
                self.nodes.insert(at, info);
                self.reindex();
                NodeChange::Relevant
            }
        }
    }

    pub fn remove_node(&mut self, name: &str) {
        if let Some(i) = self.index.get(name).copied() {
            self.nodes.remove(i);
            self.reindex();
        }
    }

    /// Accounts `pod` (packed: `packed`) on `node`; replaces what was accounted for the
    /// same key.
    pub fn add_pod(&mut self, key: Key, pod: &Pod, packed: Packed, node: String, assumed: bool) {
        let facts = PodFacts::of(pod);
        let anti_affinity = has_required_anti_affinity(pod).then(|| Arc::new(pod.clone()));
        self.remove_pod(&key);
        if let Some(&i) = self.index.get(&node) {
            self.nodes[i].add_pod(&facts);
        }
        if anti_affinity.is_some() {
            self.anti_affinity_pods.insert(key.clone());
        }
        self.pods.insert(
            key,
            BoundPod {
                packed,
                anti_affinity,
                node,
                facts,
                assumed,
            },
        );
    }

    /// Replaces the packed pod of an accounted pod whose accounting did not change (a
    /// status write), so the old version is not kept alive; confirms an assumed pod. Labels
    /// are read from the packed pod when needed, so they may change here.
    pub fn refresh_pod(&mut self, key: &Key, new: &Pod, packed: Packed) -> bool {
        let Some(p) = self.pods.get_mut(key) else {
            return false;
        };
        if p.anti_affinity.is_some()
            || has_required_anti_affinity(new)
            || occupies_node(new) != Some(p.node.as_str())
            || PodFacts::of(new) != p.facts
            || p.meta().is_none_or(|m| m.uid != new.metadata.uid)
        {
            return false;
        }
        p.packed = packed;
        p.assumed = false;
        true
    }

    /// Stops accounting a pod; returns what was accounted.
    pub fn remove_pod(&mut self, key: &Key) -> Option<BoundPod> {
        let p = self.pods.remove(key)?;
        if let Some(&i) = self.index.get(&p.node) {
            self.nodes[i].remove_pod(&p.facts);
        }
        self.anti_affinity_pods.remove(key);
        Some(p)
    }

    /// Applies an informer change of a node.
    pub fn node_changed(&mut self, obj: &AnyObject, deleted: bool) -> NodeChange {
        let Some(node) = Node::from_any_ref(obj) else {
            return NodeChange::Same;
        };
        if deleted {
            self.remove_node(&node.metadata.name);
            NodeChange::Same
        } else {
            self.upsert_node(Arc::new(node.clone()))
        }
    }

    /// Holds `facts` on `node` for the pending pod `key` (see [`Nomination`]).
    pub fn nominate(&mut self, key: Key, node: String, facts: PodFacts) {
        self.nominated.insert(key, Nomination { node, facts });
    }

    /// Drops a pod's nomination (bound, deleted, or no longer pending).
    pub fn unnominate(&mut self, key: &Key) {
        if !self.nominated.is_empty() {
            self.nominated.remove(key);
        }
    }

    pub fn nomination(&self, key: &Key) -> Option<&Nomination> {
        self.nominated.get(key)
    }

    /// What other pods of at least `priority` hold on `node` for a decision about `pod`:
    /// `info` with their requests added, or None when nothing is held there.
    pub fn with_nominated(&self, info: &NodeInfo, pod: &Key, priority: i32) -> Option<NodeInfo> {
        if self.nominated.is_empty() {
            return None;
        }
        let mut held = None;
        for (k, n) in &self.nominated {
            if k != pod && n.node == info.name() && n.facts.priority >= priority {
                held.get_or_insert_with(|| info.clone()).add_pod(&n.facts);
            }
        }
        held
    }

    /// Clears everything (before a rebuild after a re-list).
    pub fn clear(&mut self) {
        *self = ClusterState::default();
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The informer key of an object.
pub fn key_of(m: &ObjectMeta) -> Key {
    Arc::new((m.namespace.clone().unwrap_or_default(), m.name.clone()))
}

/// Whether `obj` is a pod (the scheduler only subscribes to pods and nodes).
pub fn is_pod(obj: &AnyObject) -> bool {
    obj.kind() == Kind::Pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{ContainerPort, ResourceRequirements};

    fn packed(p: &Pod) -> Packed {
        Packed::pack(&p.clone().into_any())
    }
    use api::meta::{ObjectMeta, OwnerReference, Quantity};

    pub fn container(cpu: &str, mem: &str) -> Container {
        let mut requests = std::collections::BTreeMap::new();
        if !cpu.is_empty() {
            requests.insert("cpu".to_string(), Quantity(cpu.into()));
        }
        if !mem.is_empty() {
            requests.insert("memory".to_string(), Quantity(mem.into()));
        }
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn effective_request_sums_containers_and_takes_the_largest_init_container() {
        let mut pod = Pod::default();
        pod.spec.containers = vec![container("100m", "64Mi"), container("200m", "64Mi")];
        pod.spec.init_containers = vec![container("500m", "16Mi")];
        let f = PodFacts::of(&pod);
        assert_eq!(f.requests.milli_cpu, 500);
        assert_eq!(f.requests.memory, 128 << 20);
        assert_eq!(f.requests.pods, 1);

        // A sidecar keeps running: it adds to the containers' sum.
        let mut sidecar = container("50m", "8Mi");
        sidecar.restart_policy = Some("Always".into());
        pod.spec.init_containers = vec![sidecar, container("100m", "0")];
        let f = PodFacts::of(&pod);
        assert_eq!(f.requests.milli_cpu, 350);
        assert_eq!(f.requests.memory, (128 + 8) << 20);

        // Overhead adds; pod-level requests replace cpu and memory.
        pod.spec.init_containers.clear();
        pod.spec
            .overhead
            .insert("cpu".into(), Quantity("10m".into()));
        assert_eq!(PodFacts::of(&pod).requests.milli_cpu, 310);
        pod.spec.resources = Some(ResourceRequirements {
            requests: [("cpu".to_string(), Quantity("1".into()))].into(),
            ..Default::default()
        });
        assert_eq!(PodFacts::of(&pod).requests.milli_cpu, 1010);
        assert_eq!(PodFacts::of(&pod).requests.memory, 128 << 20);
    }

    /// Requests are any quantity: the sums of containers, sidecars, overhead and of the pods
    /// on a node saturate where they overflowed.
    #[test]
    fn the_largest_requests_saturate() {
        let big = "9223372036854775807";
        let mut pod = Pod::default();
        pod.spec.containers = vec![container(&format!("{big}m"), big); 2];
        let mut sidecar = container(&format!("{big}m"), big);
        sidecar.restart_policy = Some("Always".into());
        pod.spec.init_containers =
            vec![sidecar.clone(), sidecar, container(&format!("{big}m"), big)];
        pod.spec.overhead = [("cpu".to_string(), Quantity(format!("{big}m")))].into();
        let f = PodFacts::of(&pod);
        assert_eq!(f.requests.milli_cpu, i64::MAX);
        assert_eq!(f.requests.memory, i64::MAX);
        assert_eq!(
            (f.nonzero_milli_cpu, f.nonzero_memory),
            (i64::MAX, i64::MAX)
        );
        let mut node = Node::default();
        node.status.allocatable = [
            ("cpu".to_string(), Quantity(format!("{big}m"))),
            ("memory".to_string(), Quantity(big.into())),
            ("pods".to_string(), Quantity(big.into())),
        ]
        .into();
        let mut info = NodeInfo::new(Arc::new(node));
        info.add_pod(&f);
        info.add_pod(&f);
        assert_eq!(info.nonzero_milli_cpu, i64::MAX);
        let mut reasons = Vec::new();
        crate::scheduler::filter::check_resources(&f, &info, &mut reasons);
        assert!(!reasons.is_empty());
        let _ = crate::scheduler::score::least_allocated(&info, &f);
        let _ = crate::scheduler::score::balanced_allocation(&info, &f);
        info.remove_pod(&f);
        info.remove_pod(&f);
        assert_eq!(info.requested.pods, 0);
    }

    #[test]
    fn scoring_requests_default_missing_cpu_and_memory() {
        let mut pod = Pod::default();
        pod.spec.containers = vec![container("", ""), container("300m", "")];
        let f = PodFacts::of(&pod);
        assert_eq!(f.requests.milli_cpu, 300);
        assert_eq!(f.requests.memory, 0);
        assert_eq!(f.nonzero_milli_cpu, 400);
        assert_eq!(f.nonzero_memory, 2 * DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn host_ports_and_owner() {
        let mut pod = Pod::default();
        let mut c = container("", "");
        c.ports = vec![
            ContainerPort {
                container_port: 80,
                host_port: Some(8080),
                ..Default::default()
            },
            ContainerPort {
                container_port: 53,
                protocol: Some("UDP".into()),
                ..Default::default()
            },
        ];
        pod.spec.containers = vec![c];
        pod.metadata = ObjectMeta {
            owner_references: vec![OwnerReference {
                uid: "rs-1".into(),
                controller: Some(true),
                ..Default::default()
            }],
            ..Default::default()
        };
        let f = PodFacts::of(&pod);
        assert_eq!(f.host_ports.len(), 1);
        assert_eq!(f.host_ports[0].port, 8080);
        assert_eq!(f.owner.as_deref(), Some("rs-1"));
        pod.spec.host_network = Some(true);
        assert_eq!(PodFacts::of(&pod).host_ports.len(), 2);

        let a = HostPort {
            ip: "".into(),
            protocol: "TCP".into(),
            port: 80,
        };
        let b = HostPort {
            ip: "10.0.0.1".into(),
            ..a.clone()
        };
        let c = HostPort {
            ip: "10.0.0.2".into(),
            ..a.clone()
        };
        let udp = HostPort {
            protocol: "UDP".into(),
            ..a.clone()
        };
        assert!(a.conflicts(&b));
        assert!(!b.conflicts(&c));
        assert!(!a.conflicts(&udp));
    }

    #[test]
    fn accounting_follows_pods_and_late_nodes() {
        let mut state = ClusterState::default();
        let mut pod = Pod::default();
        pod.metadata.name = "p".into();
        pod.metadata.namespace = Some("default".into());
        pod.spec.containers = vec![container("250m", "1Gi")];
        let key: Key = Arc::new(("default".into(), "p".into()));
        // Bound to a node not seen yet: accounted when the node appears.
        state.add_pod(key.clone(), &pod, packed(&pod), "n1".into(), true);
        let mut node = Node::default();
        node.metadata.name = "n1".into();
        assert_eq!(
            state.upsert_node(Arc::new(node.clone())),
            NodeChange::Relevant
        );
        assert_eq!(state.node("n1").unwrap().requested.milli_cpu, 250);
        assert_eq!(state.node("n1").unwrap().requested.pods, 1);
        // A status-only change keeps the accounting.
        assert_eq!(state.upsert_node(Arc::new(node.clone())), NodeChange::Same);
        node.spec.unschedulable = Some(true);
        assert_eq!(state.upsert_node(Arc::new(node)), NodeChange::Relevant);
        assert_eq!(state.node("n1").unwrap().requested.memory, 1 << 30);
        assert!(!state.refresh_pod(&key, &pod, packed(&pod)));
        pod.spec.node_name = Some("n1".into());
        state.add_pod(key.clone(), &pod, packed(&pod), "n1".into(), true);
        assert_eq!(state.node("n1").unwrap().requested.pods, 1);
        pod.status.phase = Some("Running".into());
        pod.metadata.labels.insert("now".into(), "labelled".into());
        assert!(state.refresh_pod(&key, &pod, packed(&pod)));
        assert!(!state.pod(&key).unwrap().assumed);
        let meta = state.pod(&key).unwrap().meta().unwrap();
        assert_eq!(meta.labels["now"], "labelled");
        // Another request changes the accounting: not a refresh.
        let mut bigger = pod.clone();
        bigger.spec.containers = vec![container("500m", "1Gi")];
        assert!(!state.refresh_pod(&key, &bigger, packed(&bigger)));
        state.remove_pod(&key);
        assert_eq!(state.node("n1").unwrap().requested, Resources::default());
    }
}
