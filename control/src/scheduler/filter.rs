//! Filters: can this node take this pod? Pure functions over the pod, the node and the
//! accounting, applied in this order (the first failing check is the node's reason, except
//! that every insufficient resource is reported): spec.nodeName, readiness and
//! schedulability, taints, nodeSelector and required node affinity, resources, host ports,
//! required pod affinity and anti-affinity.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use api::core::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Taint, Toleration,
};
use api::meta::ObjectMeta;
use api::selector::Selector;

use super::cache::{ClusterState, NodeInfo, PodFacts};

pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Why one node cannot take the pod (the wording is kube-scheduler's).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    NodeName,
    NotReady,
    Unreachable,
    Unschedulable,
    UntoleratedTaint { key: String, value: String },
    NodeAffinity,
    Insufficient(&'static str),
    TooManyPods,
    HostPorts,
    PodAffinity,
    PodAntiAffinity,
    ExistingAntiAffinity,
    VolumeNodeAffinity,
    VolumeBind,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NodeName => f.write_str("node(s) didn't match the requested node name"),
            Reason::NotReady => f.write_str("node(s) were not ready"),
            Reason::Unreachable => f.write_str("node(s) were unreachable"),
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::UntoleratedTaint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Reason::NodeAffinity => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::Insufficient(r) => write!(f, "Insufficient {r}"),
            Reason::TooManyPods => f.write_str("Too many pods"),
            Reason::HostPorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Reason::PodAffinity => f.write_str("node(s) didn't match pod affinity rules"),
            Reason::PodAntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Reason::ExistingAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
            Reason::VolumeNodeAffinity => f.write_str("node(s) had volume node affinity conflict"),
            Reason::VolumeBind => {
                f.write_str("node(s) didn't find available persistent volumes to bind")
            }
        }
    }
}

/// The PodScheduled=False message: `0/3 nodes are available: 2 Insufficient memory, 1
/// node(s) had untolerated taint {node.kubernetes.io/unreachable: }.` Reasons are listed by
/// how many nodes gave them, most first, then alphabetically.
pub fn unschedulable_message(total_nodes: usize, reasons: &HashMap<Reason, usize>) -> String {
    if total_nodes == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let mut counted: Vec<(usize, String)> =
        reasons.iter().map(|(r, n)| (*n, r.to_string())).collect();
    counted.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let parts: Vec<String> = counted.iter().map(|(n, r)| format!("{n} {r}")).collect();
    format!("0/{total_nodes} nodes are available: {}.", parts.join(", "))
}

/// The status of the node's Ready condition ("True", "False", "Unknown"; "" if absent).
pub fn node_ready(node: &Node) -> &str {
    node.status
        .condition("Ready")
        .map_or("", |c| c.status.as_str())
}

/// Whether any toleration tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// The first taint with one of `effects` that no toleration tolerates.
pub fn untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| effects.contains(&t.effect.as_str()) && !tolerated(tolerations, t))
}

/// spec.nodeName: a pod that names a node fits only there.
pub fn check_node_name(pod: &Pod, node: &Node) -> Result<(), Reason> {
    match pod.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) if n != node.metadata.name => Err(Reason::NodeName),
        _ => Ok(()),
    }
}

/// The node is Ready and not cordoned. A node that is not Ready but carries the
/// not-ready/unreachable NoSchedule taint is left to the taint check (the taint says the same
/// thing); one without it takes only pods that tolerate that taint. A cordoned node takes
/// pods that tolerate `node.kubernetes.io/unschedulable:NoSchedule`.
pub fn check_ready_and_schedulable(pod: &Pod, node: &Node) -> Result<(), Reason> {
    let ready = node_ready(node);
    if ready != "True" {
        let key = if ready == "False" {
            TAINT_NOT_READY
        } else {
            TAINT_UNREACHABLE
        };
        let tainted = node.spec.taints.iter().any(|t| {
            (t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE) && t.effect == "NoSchedule"
        });
        // Until the node lifecycle controller taints it, the node counts as carrying the
        // NoSchedule taint its condition implies (Kubernetes' TaintNodesByCondition).
        let implied = Taint {
            key: key.into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        };
        if !tainted && !tolerated(&pod.spec.tolerations, &implied) {
            return Err(if ready == "False" {
                Reason::NotReady
            } else {
                Reason::Unreachable
            });
        }
    }
    if node.spec.unschedulable == Some(true) {
        let cordon = Taint {
            key: TAINT_UNSCHEDULABLE.into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        };
        if !tolerated(&pod.spec.tolerations, &cordon) {
            return Err(Reason::Unschedulable);
        }
    }
    Ok(())
}

/// NoSchedule and NoExecute taints must be tolerated (PreferNoSchedule only scores).
pub fn check_taints(pod: &Pod, node: &Node) -> Result<(), Reason> {
    match untolerated_taint(
        &node.spec.taints,
        &pod.spec.tolerations,
        &["NoSchedule", "NoExecute"],
    ) {
        Some(t) => Err(Reason::UntoleratedTaint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
        }),
        None => Ok(()),
    }
}

/// One requirement of a node selector term against a label (or field) value.
fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let int = |s: &str| s.trim().parse::<i64>().ok();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| req.values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| req.values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value.and_then(int), req.values.as_slice()) else {
                return false;
            };
            let Some(bound) = int(bound) else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// A node selector term: its expressions (on labels) and fields (only `metadata.name`) are
/// ANDed; an empty term matches nothing, as in Kubernetes.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return false;
    }
    let labels = &node.metadata.labels;
    term.match_expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && term.match_fields.iter().all(|r| {
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && requirement_matches(r, Some(&node.metadata.name))
        })
}

/// nodeSelector (every pair) and required node affinity (any term).
pub fn check_node_affinity(pod: &Pod, node: &Node) -> Result<(), Reason> {
    let labels = &node.metadata.labels;
    let selector_ok = pod
        .spec
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = pod
        .spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_ok = required.is_none_or(|sel| {
        sel.node_selector_terms
            .iter()
            .any(|t| term_matches(t, node))
    });
    if selector_ok && affinity_ok {
        Ok(())
    } else {
        Err(Reason::NodeAffinity)
    }
}

/// Requests against allocatable minus what is already accounted; every shortfall counts.
pub fn check_resources(facts: &PodFacts, info: &NodeInfo, out: &mut Vec<Reason>) {
    let (want, have, used) = (&facts.requests, &info.allocatable, &info.requested);
    if used.pods.saturating_add(1) > have.pods {
        out.push(Reason::TooManyPods);
    }
    if want.milli_cpu > 0 && want.milli_cpu > have.milli_cpu.saturating_sub(used.milli_cpu) {
        out.push(Reason::Insufficient("cpu"));
    }
    if want.memory > 0 && want.memory > have.memory.saturating_sub(used.memory) {
        out.push(Reason::Insufficient("memory"));
    }
    if want.ephemeral_storage > 0
        && want.ephemeral_storage
            > have
                .ephemeral_storage
                .saturating_sub(used.ephemeral_storage)
    {
        out.push(Reason::Insufficient("ephemeral-storage"));
    }
}

/// No host port the pod wants is taken on the node.
pub fn check_host_ports(facts: &PodFacts, info: &NodeInfo) -> Result<(), Reason> {
    let taken = facts
        .host_ports
        .iter()
        .any(|want| info.host_ports.keys().any(|used| want.conflicts(used)));
    if taken {
        Err(Reason::HostPorts)
    } else {
        Ok(())
    }
}

/// Whether `candidate` is selected by `term` of a pod in namespace `owner_ns`: its
/// namespace is among the term's (the owner's own when none are listed; every namespace for
/// an empty namespaceSelector) and its labels match the selector (none matches nothing).
pub fn affinity_term_matches(
    term: &PodAffinityTerm,
    owner_ns: &str,
    candidate: &ObjectMeta,
) -> bool {
    let ns = candidate.namespace();
    let all_namespaces = term
        .namespace_selector
        .as_ref()
        .is_some_and(|s| s.match_labels.is_empty() && s.match_expressions.is_empty());
    let ns_ok = all_namespaces
        || if term.namespaces.is_empty() {
            ns == owner_ns
        } else {
            term.namespaces.iter().any(|n| n == ns)
        };
    if !ns_ok {
        return false;
    }
    let Some(ls) = &term.label_selector else {
        return false;
    };
    Selector::from_label_selector(ls).is_ok_and(|s| s.matches(&candidate.labels))
}

/// Required inter-pod affinity and anti-affinity, resolved once per decision into the
/// topology values each term allows or forbids.
#[derive(Debug, Default)]
pub struct AffinityPlan {
    /// Per required affinity term: its topology key and the values where a matching pod is.
    affinity: Vec<(String, HashSet<String>)>,
    /// No pod matches the affinity terms anywhere yet, and the pod matches them itself (the
    /// first pod of a group that wants to be together).
    affinity_first_of_group: bool,
    /// Per required anti-affinity term: its topology key and the values to avoid.
    anti: Vec<(String, HashSet<String>)>,
    /// (topology key, value) pairs that existing pods' anti-affinity keeps this pod out of.
    existing_anti: Vec<(String, String)>,
}

fn topology_value<'a>(labels: &'a BTreeMap<String, String>, key: &str) -> Option<&'a String> {
    labels.get(key)
}

impl AffinityPlan {
    /// Resolves `pod`'s terms, and the anti-affinity of pods already placed, against the
    /// pods accounted in `state`.
    pub fn build(pod: &Pod, state: &ClusterState) -> AffinityPlan {
        let mut plan = AffinityPlan::default();
        let own_ns = pod.metadata.namespace();
        let affinity = pod.spec.affinity.as_ref();
        let required = |a: Option<&api::core::PodAffinity>| {
            a.map(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default()
        };
        let aff_terms = required(affinity.and_then(|a| a.pod_affinity.as_ref()));
        let anti_terms = required(affinity.and_then(|a| a.pod_anti_affinity.as_ref()));
        if !aff_terms.is_empty() || !anti_terms.is_empty() {
            plan.affinity = aff_terms
                .iter()
                .map(|t| (t.topology_key.clone(), HashSet::new()))
                .collect();
            plan.anti = anti_terms
                .iter()
                .map(|t| (t.topology_key.clone(), HashSet::new()))
                .collect();
            for (key, bound) in state.pods() {
                if key.0 == own_ns && key.1 == pod.metadata.name {
                    continue;
                }
                let Some(other) = bound.meta() else { continue };
                let Some(node) = state.node(&bound.node) else {
                    continue;
                };
                let labels = &node.node.metadata.labels;
                for (i, t) in aff_terms.iter().enumerate() {
                    if affinity_term_matches(t, own_ns, &other) {
                        if let Some(v) = topology_value(labels, &t.topology_key) {
                            plan.affinity[i].1.insert(v.clone());
                        }
                    }
                }
                for (i, t) in anti_terms.iter().enumerate() {
                    if affinity_term_matches(t, own_ns, &other) {
                        if let Some(v) = topology_value(labels, &t.topology_key) {
                            plan.anti[i].1.insert(v.clone());
                        }
                    }
                }
            }
            plan.affinity_first_of_group = !aff_terms.is_empty()
                && plan.affinity.iter().all(|(_, values)| values.is_empty())
                && aff_terms
                    .iter()
                    .all(|t| affinity_term_matches(t, own_ns, &pod.metadata));
        }
        for bound in state.anti_affinity_pods() {
            let Some(other) = bound.anti_affinity.as_deref() else {
                continue;
            };
            if other.metadata.uid == pod.metadata.uid && !pod.metadata.uid.is_empty() {
                continue;
            }
            let Some(node) = state.node(&bound.node) else {
                continue;
            };
            let terms = other
                .spec
                .affinity
                .as_ref()
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .map(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_slice()
                })
                .unwrap_or_default();
            for t in terms {
                if affinity_term_matches(t, other.metadata.namespace(), &pod.metadata) {
                    if let Some(v) = topology_value(&node.node.metadata.labels, &t.topology_key) {
                        plan.existing_anti.push((t.topology_key.clone(), v.clone()));
                    }
                }
            }
        }
        plan
    }

    /// Nothing to check.
    pub fn is_empty(&self) -> bool {
        self.affinity.is_empty() && self.anti.is_empty() && self.existing_anti.is_empty()
    }

    pub fn check(&self, node: &Node) -> Result<(), Reason> {
        // kube-scheduler's order: the pod's affinity, its anti-affinity, then the
        // anti-affinity of pods already placed.
        let labels = &node.metadata.labels;
        for (key, values) in &self.affinity {
            let ok = match labels.get(key) {
                Some(v) => self.affinity_first_of_group || values.contains(v),
                None => false,
            };
            if !ok {
                return Err(Reason::PodAffinity);
            }
        }
        for (key, values) in &self.anti {
            if labels.get(key).is_some_and(|v| values.contains(v)) {
                return Err(Reason::PodAntiAffinity);
            }
        }
        for (key, value) in &self.existing_anti {
            if labels.get(key) == Some(value) {
                return Err(Reason::ExistingAntiAffinity);
            }
        }
        Ok(())
    }
}

/// Every filter in order; the node's reasons if it cannot take the pod.
pub fn filter(
    pod: &Pod,
    facts: &PodFacts,
    plan: &AffinityPlan,
    info: &NodeInfo,
) -> Result<(), Vec<Reason>> {
    let node = &*info.node;
    let one = |r: Result<(), Reason>| r.map_err(|e| vec![e]);
    one(check_node_name(pod, node))?;
    one(check_ready_and_schedulable(pod, node))?;
    if !node.spec.taints.is_empty() {
        one(check_taints(pod, node))?;
    }
    one(check_node_affinity(pod, node))?;
    let mut short = Vec::new();
    check_resources(facts, info, &mut short);
    if !short.is_empty() {
        return Err(short);
    }
    if !facts.host_ports.is_empty() {
        one(check_host_ports(facts, info))?;
    }
    if !plan.is_empty() {
        one(plan.check(node))?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::machinery::informer::Packed;
    use crate::scheduler::cache::HostPort;
    use api::core::{
        Affinity, Container, ContainerPort, NodeAffinity, NodeCondition, NodeSelector, PodAffinity,
        ResourceRequirements,
    };
    use api::meta::{LabelSelector, Quantity};
    use api::object::Resource;
    use std::sync::Arc;

    pub fn node(name: &str, cpu: &str, mem: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        n.metadata
            .labels
            .insert("kubernetes.io/hostname".into(), name.into());
        for (k, v) in [("cpu", cpu), ("memory", mem), ("pods", "110")] {
            n.status.allocatable.insert(k.into(), Quantity(v.into()));
        }
        n.status.conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        });
        n
    }

    pub fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
        let mut requests = BTreeMap::new();
        if !cpu.is_empty() {
            requests.insert("cpu".to_string(), Quantity(cpu.into()));
        }
        if !mem.is_empty() {
            requests.insert("memory".to_string(), Quantity(mem.into()));
        }
        Pod {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: Some("default".into()),
                uid: format!("uid-{name}"),
                ..Default::default()
            },
            spec: api::core::PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests,
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: Some(key.into()).filter(|k: &String| !k.is_empty()),
            operator: Some(op.into()),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: Some(effect.into()).filter(|e: &String| !e.is_empty()),
            toleration_seconds: None,
        }
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn with_required_affinity(mut p: Pod, term: NodeSelectorTerm) -> Pod {
        p.spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![term],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn node_name() {
        let n = node("a", "1", "1Gi");
        let mut p = pod("p", "", "");
        assert_eq!(check_node_name(&p, &n), Ok(()));
        p.spec.node_name = Some("b".into());
        assert_eq!(check_node_name(&p, &n), Err(Reason::NodeName));
        p.spec.node_name = Some("a".into());
        assert_eq!(check_node_name(&p, &n), Ok(()));
    }

    #[test]
    fn readiness_and_cordon() {
        let mut n = node("a", "1", "1Gi");
        let mut p = pod("p", "", "");
        assert_eq!(check_ready_and_schedulable(&p, &n), Ok(()));
        n.status.conditions[0].status = "False".into();
        assert_eq!(check_ready_and_schedulable(&p, &n), Err(Reason::NotReady));
        n.status.conditions[0].status = "Unknown".into();
        assert_eq!(
            check_ready_and_schedulable(&p, &n),
            Err(Reason::Unreachable)
        );
        n.status.conditions.clear();
        assert_eq!(
            check_ready_and_schedulable(&p, &n),
            Err(Reason::Unreachable)
        );
        // A toleration of the implied taint lets a pod on (DaemonSet-style).
        let mut tolerant = pod("t", "", "");
        tolerant
            .spec
            .tolerations
            .push(toleration(TAINT_UNREACHABLE, "Exists", "", "NoSchedule"));
        assert_eq!(check_ready_and_schedulable(&tolerant, &n), Ok(()));
        // The NoExecute taint alone (tolerated by default for a while) is not enough.
        n.spec
            .taints
            .push(taint(TAINT_UNREACHABLE, None, "NoExecute"));
        assert_eq!(
            check_ready_and_schedulable(&p, &n),
            Err(Reason::Unreachable)
        );
        // With the lifecycle controller's NoSchedule taint the taint check decides.
        n.spec
            .taints
            .insert(0, taint(TAINT_UNREACHABLE, None, "NoSchedule"));
        assert_eq!(check_ready_and_schedulable(&p, &n), Ok(()));
        assert_eq!(
            check_taints(&p, &n),
            Err(Reason::UntoleratedTaint {
                key: TAINT_UNREACHABLE.into(),
                value: String::new()
            })
        );

        let mut n = node("a", "1", "1Gi");
        n.spec.unschedulable = Some(true);
        assert_eq!(
            check_ready_and_schedulable(&p, &n),
            Err(Reason::Unschedulable)
        );
        p.spec
            .tolerations
            .push(toleration(TAINT_UNSCHEDULABLE, "Exists", "", "NoSchedule"));
        assert_eq!(check_ready_and_schedulable(&p, &n), Ok(()));
    }

    #[test]
    fn taints_and_tolerations() {
        let mut n = node("a", "1", "1Gi");
        let mut p = pod("p", "", "");
        n.spec.taints = vec![
            taint("soft", None, "PreferNoSchedule"),
            taint("dedicated", Some("edge"), "NoSchedule"),
            taint("evict", None, "NoExecute"),
        ];
        // PreferNoSchedule never filters; the first untolerated hard taint is reported.
        assert_eq!(
            check_taints(&p, &n),
            Err(Reason::UntoleratedTaint {
                key: "dedicated".into(),
                value: "edge".into()
            })
        );
        p.spec
            .tolerations
            .push(toleration("dedicated", "Equal", "other", "NoSchedule"));
        assert!(check_taints(&p, &n).is_err());
        p.spec
            .tolerations
            .push(toleration("dedicated", "Equal", "edge", "NoSchedule"));
        assert_eq!(
            check_taints(&p, &n),
            Err(Reason::UntoleratedTaint {
                key: "evict".into(),
                value: String::new()
            })
        );
        // A NoSchedule toleration does not tolerate a NoExecute taint.
        p.spec
            .tolerations
            .push(toleration("evict", "Exists", "", "NoSchedule"));
        assert!(check_taints(&p, &n).is_err());
        p.spec
            .tolerations
            .push(toleration("evict", "Exists", "", ""));
        assert_eq!(check_taints(&p, &n), Ok(()));
        // An empty key with Exists tolerates everything.
        let mut q = pod("q", "", "");
        q.spec.tolerations.push(toleration("", "Exists", "", ""));
        assert_eq!(check_taints(&q, &n), Ok(()));
    }

    #[test]
    fn node_selector_and_required_affinity_operators() {
        let mut n = node("a", "1", "1Gi");
        n.metadata.labels.insert("zone".into(), "z1".into());
        n.metadata.labels.insert("cores".into(), "8".into());
        let mut p = pod("p", "", "");
        p.spec.node_selector.insert("zone".into(), "z1".into());
        assert_eq!(check_node_affinity(&p, &n), Ok(()));
        p.spec.node_selector.insert("disk".into(), "ssd".into());
        assert_eq!(check_node_affinity(&p, &n), Err(Reason::NodeAffinity));

        let cases: &[(NodeSelectorRequirement, bool)] = &[
            (req("zone", "In", &["z0", "z1"]), true),
            (req("zone", "In", &["z0"]), false),
            (req("zone", "NotIn", &["z0"]), true),
            (req("zone", "NotIn", &["z1"]), false),
            (req("missing", "NotIn", &["x"]), true),
            (req("zone", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("zone", "DoesNotExist", &[]), false),
            (req("cores", "Gt", &["4"]), true),
            (req("cores", "Gt", &["8"]), false),
            (req("cores", "Lt", &["10"]), true),
            (req("cores", "Lt", &["8"]), false),
            (req("zone", "Gt", &["1"]), false),
            (req("missing", "Lt", &["1"]), false),
            (req("cores", "Gt", &["1", "2"]), false),
            (req("zone", "Bogus", &["z1"]), false),
        ];
        for (r, want) in cases {
            let term = NodeSelectorTerm {
                match_expressions: vec![r.clone()],
                ..Default::default()
            };
            let p = with_required_affinity(pod("p", "", ""), term);
            assert_eq!(check_node_affinity(&p, &n).is_ok(), *want, "{r:?}");
        }
        // Terms are ORed, requirements ANDed, an empty term matches nothing.
        let mut p = pod("p", "", "");
        p.spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![
                        NodeSelectorTerm {
                            match_expressions: vec![
                                req("zone", "In", &["z1"]),
                                req("cores", "Gt", &["100"]),
                            ],
                            ..Default::default()
                        },
                        NodeSelectorTerm::default(),
                    ],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(check_node_affinity(&p, &n), Err(Reason::NodeAffinity));
    }

    #[test]
    fn match_fields_on_metadata_name_as_daemonsets_use() {
        let n = node("edge-7", "1", "1Gi");
        let term = |op: &str, v: &str| NodeSelectorTerm {
            match_fields: vec![req("metadata.name", op, &[v])],
            ..Default::default()
        };
        let p = with_required_affinity(pod("ds", "", ""), term("In", "edge-7"));
        assert_eq!(check_node_affinity(&p, &n), Ok(()));
        let p = with_required_affinity(pod("ds", "", ""), term("In", "edge-8"));
        assert_eq!(check_node_affinity(&p, &n), Err(Reason::NodeAffinity));
        let p = with_required_affinity(pod("ds", "", ""), term("NotIn", "edge-8"));
        assert_eq!(check_node_affinity(&p, &n), Ok(()));
        let other_field = NodeSelectorTerm {
            match_fields: vec![req("metadata.uid", "In", &["edge-7"])],
            ..Default::default()
        };
        let p = with_required_affinity(pod("ds", "", ""), other_field);
        assert_eq!(check_node_affinity(&p, &n), Err(Reason::NodeAffinity));
    }

    #[test]
    fn resources_against_allocatable_minus_accounted() {
        let mut info = NodeInfo::new(Arc::new(node("a", "1", "1Gi")));
        let small = PodFacts::of(&pod("s", "600m", "512Mi"));
        let mut out = Vec::new();
        check_resources(&small, &info, &mut out);
        assert!(out.is_empty());
        info.add_pod(&small);
        check_resources(&small, &info, &mut out);
        assert_eq!(out, [Reason::Insufficient("cpu")]);
        out.clear();
        let both = PodFacts::of(&pod("b", "500m", "600Mi"));
        check_resources(&both, &info, &mut out);
        assert_eq!(
            out,
            [Reason::Insufficient("cpu"), Reason::Insufficient("memory")]
        );
        out.clear();
        // A pod that requests nothing still needs a pod slot.
        let nothing = PodFacts::of(&pod("n", "", ""));
        info.allocatable.pods = 1;
        check_resources(&nothing, &info, &mut out);
        assert_eq!(out, [Reason::TooManyPods]);
        out.clear();
        let mut disk = PodFacts::of(&pod("d", "", ""));
        disk.requests.ephemeral_storage = 1;
        info.allocatable.pods = 10;
        check_resources(&disk, &info, &mut out);
        assert_eq!(out, [Reason::Insufficient("ephemeral-storage")]);
    }

    #[test]
    fn host_port_conflicts() {
        let mut info = NodeInfo::new(Arc::new(node("a", "1", "1Gi")));
        let mut p = pod("web", "", "");
        p.spec.containers[0].ports = vec![ContainerPort {
            container_port: 80,
            host_port: Some(80),
            protocol: Some("TCP".into()),
            ..Default::default()
        }];
        let web = PodFacts::of(&p);
        assert_eq!(check_host_ports(&web, &info), Ok(()));
        info.add_pod(&web);
        assert_eq!(check_host_ports(&web, &info), Err(Reason::HostPorts));
        let mut udp = web.clone();
        udp.host_ports = vec![HostPort {
            ip: String::new(),
            protocol: "UDP".into(),
            port: 80,
        }];
        assert_eq!(check_host_ports(&udp, &info), Ok(()));
        info.remove_pod(&web);
        assert_eq!(check_host_ports(&web, &info), Ok(()));
    }

    fn labelled(mut p: Pod, k: &str, v: &str) -> Pod {
        p.metadata.labels.insert(k.into(), v.into());
        p
    }

    fn affinity_term(k: &str, v: &str, topology: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: [(k.to_string(), v.to_string())].into(),
                ..Default::default()
            }),
            topology_key: topology.into(),
            ..Default::default()
        }
    }

    fn state_with(nodes: &[Node], pods: &[(Pod, &str)]) -> ClusterState {
        let mut s = ClusterState::default();
        for n in nodes {
            s.upsert_node(Arc::new(n.clone()));
        }
        for (p, on) in pods {
            let key = crate::scheduler::cache::key_of(&p.metadata);
            s.add_pod(
                key,
                p,
                Packed::pack(&p.clone().into_any()),
                on.to_string(),
                false,
            );
        }
        s
    }

    fn zoned(name: &str, zone: &str) -> Node {
        let mut n = node(name, "4", "8Gi");
        n.metadata.labels.insert("zone".into(), zone.into());
        n
    }

    #[test]
    fn pod_anti_affinity_on_hostname() {
        let nodes = [zoned("a", "z1"), zoned("b", "z1"), zoned("c", "z2")];
        let web1 = labelled(pod("web1", "", ""), "app", "web");
        let state = state_with(&nodes, &[(web1, "a")]);
        let mut web2 = labelled(pod("web2", "", ""), "app", "web");
        web2.spec.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: vec![affinity_term(
                    "app",
                    "web",
                    "kubernetes.io/hostname",
                )],
                ..Default::default()
            }),
            ..Default::default()
        });
        let plan = AffinityPlan::build(&web2, &state);
        assert_eq!(plan.check(&nodes[0]), Err(Reason::PodAntiAffinity));
        assert_eq!(plan.check(&nodes[1]), Ok(()));
        // Same for zone topology: the whole zone is avoided.
        web2.spec
            .affinity
            .as_mut()
            .and_then(|a| a.pod_anti_affinity.as_mut())
            .expect("anti")
            .required_during_scheduling_ignored_during_execution[0]
            .topology_key = "zone".into();
        let plan = AffinityPlan::build(&web2, &state);
        assert_eq!(plan.check(&nodes[1]), Err(Reason::PodAntiAffinity));
        assert_eq!(plan.check(&nodes[2]), Ok(()));
        // Other namespaces are not looked at unless the term lists them.
        let mut other_ns = web2.clone();
        other_ns.metadata.namespace = Some("prod".into());
        assert!(AffinityPlan::build(&other_ns, &state)
            .check(&nodes[0])
            .is_ok());
    }

    #[test]
    fn existing_pods_anti_affinity_is_symmetric() {
        let nodes = [zoned("a", "z1"), zoned("b", "z2")];
        let mut lonely = pod("lonely", "", "");
        lonely.spec.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: vec![affinity_term(
                    "app",
                    "noisy",
                    "kubernetes.io/hostname",
                )],
                ..Default::default()
            }),
            ..Default::default()
        });
        let state = state_with(&nodes, &[(lonely, "a")]);
        let noisy = labelled(pod("noisy", "", ""), "app", "noisy");
        let plan = AffinityPlan::build(&noisy, &state);
        assert_eq!(plan.check(&nodes[0]), Err(Reason::ExistingAntiAffinity));
        assert_eq!(plan.check(&nodes[1]), Ok(()));
        let quiet = labelled(pod("quiet", "", ""), "app", "quiet");
        assert!(AffinityPlan::build(&quiet, &state).is_empty());
    }

    #[test]
    fn pod_affinity_on_zone_and_first_of_group() {
        let nodes = [zoned("a", "z1"), zoned("b", "z2"), node("c", "4", "8Gi")];
        let with_affinity = |p: Pod| {
            let mut p = labelled(p, "app", "cache");
            p.spec.affinity = Some(Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: vec![affinity_term(
                        "app", "cache", "zone",
                    )],
                    ..Default::default()
                }),
                ..Default::default()
            });
            p
        };
        // The first pod of the group goes anywhere with the topology key.
        let empty = state_with(&nodes, &[]);
        let first = with_affinity(pod("c1", "", ""));
        let plan = AffinityPlan::build(&first, &empty);
        assert_eq!(plan.check(&nodes[0]), Ok(()));
        assert_eq!(plan.check(&nodes[1]), Ok(()));
        assert_eq!(plan.check(&nodes[2]), Err(Reason::PodAffinity));
        // Later ones follow it.
        let state = state_with(&nodes, &[(first, "b")]);
        let second = with_affinity(pod("c2", "", ""));
        let plan = AffinityPlan::build(&second, &state);
        assert_eq!(plan.check(&nodes[0]), Err(Reason::PodAffinity));
        assert_eq!(plan.check(&nodes[1]), Ok(()));
        // A pod that does not match its own term is not a first of group.
        let mut stranger = with_affinity(pod("s", "", ""));
        stranger.metadata.labels.clear();
        let plan = AffinityPlan::build(&stranger, &empty);
        assert_eq!(plan.check(&nodes[0]), Err(Reason::PodAffinity));
    }

    #[test]
    fn affinity_namespaces() {
        let p = labelled(pod("x", "", ""), "app", "web");
        let mut t = affinity_term("app", "web", "zone");
        assert!(affinity_term_matches(&t, "default", &p.metadata));
        assert!(!affinity_term_matches(&t, "prod", &p.metadata));
        t.namespaces = vec!["prod".into(), "default".into()];
        assert!(affinity_term_matches(&t, "prod", &p.metadata));
        t.namespaces.clear();
        t.namespace_selector = Some(LabelSelector::default());
        assert!(affinity_term_matches(&t, "prod", &p.metadata));
        t.label_selector = None;
        assert!(!affinity_term_matches(&t, "default", &p.metadata));
    }

    #[test]
    fn failed_scheduling_message_format() {
        let mut reasons = HashMap::new();
        reasons.insert(Reason::Insufficient("memory"), 2);
        reasons.insert(
            Reason::UntoleratedTaint {
                key: TAINT_UNREACHABLE.into(),
                value: String::new(),
            },
            1,
        );
        assert_eq!(
            unschedulable_message(3, &reasons),
            "0/3 nodes are available: 2 Insufficient memory, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
        );
        let mut reasons = HashMap::new();
        reasons.insert(Reason::Insufficient("cpu"), 1);
        reasons.insert(Reason::Insufficient("memory"), 1);
        reasons.insert(Reason::NodeAffinity, 1);
        assert_eq!(
            unschedulable_message(2, &reasons),
            "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector."
        );
        assert_eq!(
            unschedulable_message(0, &HashMap::new()),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn filters_run_in_order() {
        let mut n = node("a", "100m", "1Gi");
        n.spec.unschedulable = Some(true);
        let info = NodeInfo::new(Arc::new(n));
        let mut p = pod("p", "1", "");
        p.spec.node_selector.insert("x".into(), "y".into());
        let f = PodFacts::of(&p);
        // Cordoned is reported, not the selector nor the resources.
        assert_eq!(
            filter(&p, &f, &AffinityPlan::default(), &info),
            Err(vec![Reason::Unschedulable])
        );
        let info = NodeInfo::new(Arc::new(node("a", "100m", "1Gi")));
        assert_eq!(
            filter(&p, &f, &AffinityPlan::default(), &info),
            Err(vec![Reason::NodeAffinity])
        );
        p.spec.node_selector.clear();
        assert_eq!(
            filter(&p, &f, &AffinityPlan::default(), &info),
            Err(vec![Reason::Insufficient("cpu")])
        );
        let p = pod("p", "100m", "");
        assert_eq!(
            filter(&p, &PodFacts::of(&p), &AffinityPlan::default(), &info),
            Ok(())
        );
    }
}
