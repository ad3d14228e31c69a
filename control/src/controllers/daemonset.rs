//! DaemonSet controller: one pod on every node the template's nodeSelector, required node
//! affinity and tolerations admit; pods are pinned to their node with a required
//! `metadata.name` node affinity and bound by the scheduler, as Kubernetes does. Template
//! changes roll out node by node within maxUnavailable.

use std::collections::BTreeMap;

use api::apps::DaemonSet;
use api::core::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodTemplateSpec, Taint, Toleration,
};
use api::meta::{DeleteOptions, IntOrString, Time};
use api::Kind;

use super::workload::{self, Claim, CONTROLLER_REVISION_HASH};
use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::{Part, NOT_READY_TAINT, UNREACHABLE_TAINT};

/// The tolerations every DaemonSet pod gets (Kubernetes' AddOrUpdateDaemonPodTolerations).
pub fn daemon_tolerations() -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        value: None,
        effect: Some(effect.into()),
        toleration_seconds: None,
    };
    vec![
        t(NOT_READY_TAINT, "NoExecute"),
        t(UNREACHABLE_TAINT, "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
}

/// Whether a node requirement holds for a value (`None`: the label is absent).
fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let num = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| r.values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !r.values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (value.and_then(num), r.values.first().and_then(|v| num(v))) {
            (Some(v), Some(bound)) => {
                if r.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            }
            _ => false,
        },
        _ => false,
    }
}

/// Whether a node matches one term (its requirements ANDed; an empty term matches nothing).
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return false;
    }
    term.match_expressions
        .iter()
        .all(|r| requirement_holds(r, node.metadata.labels.get(&r.key).map(String::as_str)))
        && term.match_fields.iter().all(|r| {
            let v = (r.key == "metadata.name").then_some(node.metadata.name.as_str());
            requirement_holds(r, v)
        })
}

/// Whether the pod spec's nodeSelector and required node affinity admit the node.
pub fn node_selected(spec: &api::core::PodSpec, node: &Node) -> bool {
    let labels_ok = spec
        .node_selector
        .iter()
        .all(|(k, v)| node.metadata.labels.get(k) == Some(v));
    let affinity_ok = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_none_or(|sel| {
            sel.node_selector_terms
                .iter()
                .any(|t| term_matches(t, node))
        });
    labels_ok && affinity_ok
}

/// (should run a new pod there, may keep a running one): taints that are not tolerated keep
/// new pods off (NoSchedule, NoExecute) or evict them (NoExecute).
pub fn node_should_run(template: &PodTemplateSpec, node: &Node) -> (bool, bool) {
    if node.metadata.deletion_timestamp.is_some() || !node_selected(&template.spec, node) {
        return (false, false);
    }
    let tolerations: Vec<Toleration> = template
        .spec
        .tolerations
        .iter()
        .cloned()
        .chain(daemon_tolerations())
        .collect();
    let tolerated = |t: &Taint| tolerations.iter().any(|x| x.tolerates(t));
    let mut run = true;
    for taint in &node.spec.taints {
        match taint.effect.as_str() {
            "NoExecute" if !tolerated(taint) => return (false, false),
            "NoSchedule" if !tolerated(taint) => run = false,
            _ => {}
        }
    }
    (run, true)
}

/// A DaemonSet pod for `node`: the template pinned by required node affinity, with the
/// daemon tolerations and the template hash label.
pub fn daemon_pod(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let mut pod = workload::pod_from_template(
        &ds.spec.template,
        ds.metadata.namespace(),
        &workload::generate_name_prefix(&ds.metadata.name),
        workload::controller_ref(ds),
    );
    pod.metadata.labels =
        workload::with_label(&pod.metadata.labels, CONTROLLER_REVISION_HASH, hash);
    if let Some(g) = ds.metadata.generation {
        pod.metadata
            .labels
            .insert("pod-template-generation".into(), g.to_string());
    }
    let pin = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "In".into(),
        values: vec![node.to_string()],
    };
    let affinity = pod.spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields = vec![pin.clone()];
    }
    for t in daemon_tolerations() {
        let present = pod.spec.tolerations.iter().any(|x| {
            x.key == t.key && x.effect == t.effect && x.operator.as_deref() == Some("Exists")
        });
        if !present {
            pod.spec.tolerations.push(t);
        }
    }
    pod
}

/// The DaemonSets a change concerns: a pod's owner, the DaemonSet itself, or (for a node or
/// a resync) every DaemonSet.
fn keys_for(c: &Context, change: &Change) -> Vec<Key> {
    match change.object() {
        Some(o) if o.kind() == Kind::Pod => {
            let old = change.old_meta();
            std::iter::once(o.meta())
                .chain(old.as_ref())
                .filter_map(|m| {
                    m.controller_ref()
                        .filter(|r| r.kind == "DaemonSet")
                        .map(|r| (m.namespace().to_string(), r.name.clone()))
                })
                .collect()
        }
        Some(o) if o.kind() == Kind::DaemonSet => {
            vec![(o.meta().namespace().to_string(), o.meta().name.clone())]
        }
        _ => c
            .informers
            .cache()
            .list::<DaemonSet>(None)
            .iter()
            .map(key_of)
            .collect(),
    }
}

pub fn start(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), "daemonset-controller");
    let queue = fed_queue::<DaemonSet, _>(ctx, &[Kind::DaemonSet, Kind::Pod, Kind::Node], keys_for);
    let ctx = ctx.clone();
    spawn_workers(
        "daemonset",
        ctx.informers.clone(),
        queue,
        2,
        move |key, mut s| {
            let (ctx, recorder) = (ctx.clone(), recorder.clone());
            async move {
                let r = sync(&ctx, &recorder, &key, &mut s).await;
                (s, r)
            }
        },
    );
}

fn max_unavailable(ds: &DaemonSet, desired: i32) -> i32 {
    let ru = ds
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let v = ru
        .and_then(|r| r.max_unavailable.clone())
        .unwrap_or(IntOrString::Int(1))
        .scaled_value(desired, true)
        .unwrap_or(1);
    v.max(1)
}

async fn sync(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let Some(ds) = ctx.informers.cache().get::<DaemonSet>(ns, name) else {
        return Ok(());
    };
    let Some(selector) = workload::selector(ds.spec.selector.as_ref()) else {
        return Ok(());
    };
    let hash = workload::template_hash(&ds.spec.template, None);
    let now = Time::now();
    let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
    let uid = ds.metadata.uid.clone();
    let deleting = ds.metadata.deletion_timestamp.is_some();
    let (mut owned, mut adopt, mut release) = (Vec::new(), Vec::new(), Vec::new());
    let nodes: Vec<Node> = {
        let cache = ctx.informers.cache().read();
        // Only the metadata of pods that are not ours is decoded.
        for p in cache.iter_packed(Kind::Pod, Some(ns)) {
            let Some(meta) = p.meta() else { continue };
            match workload::claim(&uid, deleting, &selector, &meta) {
                Claim::Owned => owned.extend(p.unpack_as::<Pod>()),
                Claim::Adopt => adopt.push(meta.name),
                Claim::Release => release.push(meta.name),
                Claim::Ignore => {}
            }
        }
        cache.iter::<Node>(None).collect()
    };
    owned.extend(
        workload::write_claims::<Pod, _>(
            &ctx.registry,
            ns,
            &ds,
            Some(&selector),
            adopt,
            release,
            s,
        )
        .await?,
    );

    let mut by_node: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    let mut stray = Vec::new();
    for p in owned {
        match workload::target_node(&p) {
            Some(n) => by_node.entry(n.to_string()).or_default().push(p),
            None => stray.push(p),
        }
    }
    let node_names: Vec<&str> = nodes.iter().map(|n| n.metadata.name.as_str()).collect();
    let mut create_on = Vec::new();
    let mut delete = Vec::new();
    for (node, pods) in &by_node {
        if !node_names.contains(&node.as_str()) {
            delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .cloned(),
            );
        }
    }
    delete.extend(
        stray
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none()),
    );

    let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
    let (mut ready, mut available, mut updated) = (0, 0, 0);
    // Nodes whose pod is old and available (rolling update candidates), and how many
    // should-run nodes lack an available pod.
    let mut candidates: Vec<Pod> = Vec::new();
    let mut unavailable = 0;
    for node in &nodes {
        let (should_run, should_continue) = node_should_run(&ds.spec.template, node);
        let pods = by_node
            .get(&node.metadata.name)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut live: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.sort_by_key(|p| p.metadata.creation_timestamp);
        let failed: Vec<&Pod> = live
            .iter()
            .copied()
            .filter(|p| p.status.phase.as_deref() == Some("Failed"))
            .collect();
        delete.extend(failed.iter().map(|p| (*p).clone()));
        live.retain(|p| p.status.phase.as_deref() != Some("Failed"));
        if !deleting {
            if should_run && pods.is_empty() {
                create_on.push(node.metadata.name.clone());
            } else if should_continue && live.len() > 1 {
                delete.extend(live[1..].iter().map(|p| (*p).clone()));
            } else if !should_continue {
                delete.extend(live.iter().map(|p| (*p).clone()));
            }
        }
        if should_run {
            desired += 1;
            let first = live.first();
            if first.is_some() {
                current += 1;
            }
            let is_available = first.is_some_and(|p| workload::pod_available(p, min_ready, now));
            if let Some(p) = first {
                if workload::pod_ready(p) {
                    ready += 1;
                }
                if let Some(wait) = workload::available_in(p, min_ready, now).filter(|w| *w > 0) {
                    s.requeue_after(std::time::Duration::from_secs(wait as u64 + 1));
                }
                let is_new = p.metadata.labels.get(CONTROLLER_REVISION_HASH) == Some(&hash);
                if is_new {
                    updated += 1;
                } else if is_available {
                    candidates.push((*p).clone());
                } else if live.len() == 1 && !deleting {
                    // An old pod that is not available anyway goes at once.
                    delete.push((*p).clone());
                }
            }
            if is_available {
                available += 1;
            } else {
                unavailable += 1;
            }
        } else if !live.is_empty() {
            misscheduled += 1;
        }
    }

    let rolling = ds
        .spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if rolling && !deleting {
        let budget = max_unavailable(&ds, desired);
        for p in candidates {
            if unavailable >= budget {
                break;
            }
            unavailable += 1;
            delete.push(p);
        }
    }

    for node in create_on {
        let pod = daemon_pod(&ds, &node, &hash);
        match ctx.registry.create(pod, None).await {
            Ok(p) => {
                s.wrote(&p);
                rec.normal(
                    &ds,
                    "SuccessfulCreate",
                    format!("Created pod: {}", p.metadata.name),
                );
            }
            Err(e) => {
                rec.warning(&ds, "FailedCreate", format!("Error creating: {e}"));
                return Err(e);
            }
        }
    }
    delete.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    delete.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    for p in delete {
        let opts = DeleteOptions {
            preconditions: Some(api::meta::Preconditions {
                uid: Some(p.metadata.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let r = ctx.registry.delete::<Pod>(ns, &p.metadata.name, opts).await;
        if let Some((gone, _)) = ignore_not_found(r)? {
            s.wrote(&gone);
            rec.normal(
                &ds,
                "SuccessfulDelete",
                format!("Deleted pod: {}", p.metadata.name),
            );
        }
    }

    let mut st = ds.status.clone();
    st.desired_number_scheduled = desired;
    st.current_number_scheduled = current;
    st.number_misscheduled = misscheduled;
    st.number_ready = ready;
    st.number_available = Some(available);
    st.number_unavailable = Some(desired - available);
    st.updated_number_scheduled = Some(updated);
    st.observed_generation = ds.metadata.generation;
    if st != ds.status {
        let r = ctx
            .registry
            .mutate::<DaemonSet>(ns, name, Part::Status, move |d| {
                if d.metadata.uid == uid {
                    d.status = st.clone();
                }
                Ok(())
            })
            .await;
        if let Some(d) = ignore_not_found(r)? {
            s.wrote(&d);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::object::Resource;

    fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        for (k, v) in labels {
            n.metadata.labels.insert(k.to_string(), v.to_string());
        }
        for (k, e) in taints {
            n.spec.taints.push(Taint {
                key: k.to_string(),
                effect: e.to_string(),
                ..Default::default()
            });
        }
        n
    }

    #[test]
    fn nodes_are_matched_by_selector_affinity_and_taints() {
        let mut t = PodTemplateSpec::default();
        t.spec.node_selector.insert("edge".into(), "true".into());
        let edge = node("a", &[("edge", "true"), ("arch", "arm64")], &[]);
        let core = node("b", &[("edge", "false")], &[]);
        assert_eq!(node_should_run(&t, &edge), (true, true));
        assert_eq!(node_should_run(&t, &core), (false, false));

        // Taints the daemon tolerations cover do not matter.
        let unreachable = node(
            "c",
            &[("edge", "true")],
            &[
                (UNREACHABLE_TAINT, "NoExecute"),
                ("node.kubernetes.io/unschedulable", "NoSchedule"),
            ],
        );
        assert_eq!(node_should_run(&t, &unreachable), (true, true));
        // Others keep new pods off (NoSchedule) or evict (NoExecute).
        let dedicated = node("d", &[("edge", "true")], &[("dedicated", "NoSchedule")]);
        assert_eq!(node_should_run(&t, &dedicated), (false, true));
        let evicting = node("e", &[("edge", "true")], &[("dedicated", "NoExecute")]);
        assert_eq!(node_should_run(&t, &evicting), (false, false));
        t.spec.tolerations.push(Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        });
        assert_eq!(node_should_run(&t, &evicting), (true, true));

        // Required node affinity.
        t.spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: vec![NodeSelectorRequirement {
                            key: "arch".into(),
                            operator: "In".into(),
                            values: vec!["arm64".into()],
                        }],
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(node_should_run(&t, &edge), (true, true));
        assert_eq!(node_should_run(&t, &evicting), (false, false));
    }

    #[test]
    fn daemon_pods_are_pinned_and_tolerant() {
        let mut ds = DaemonSet::default();
        ds.metadata.name = "agent".into();
        ds.metadata.namespace = Some("kube-system".into());
        ds.metadata.uid = "u".into();
        ds.metadata.generation = Some(3);
        ds.spec
            .template
            .metadata
            .labels
            .insert("app".into(), "agent".into());
        let p = daemon_pod(&ds, "node-1", "h4sh");
        assert_eq!(workload::target_node(&p), Some("node-1"));
        assert_eq!(
            p.metadata
                .labels
                .get(CONTROLLER_REVISION_HASH)
                .map(String::as_str),
            Some("h4sh")
        );
        assert_eq!(p.metadata.generate_name.as_deref(), Some("agent-"));
        assert_eq!(
            p.metadata.controller_ref().map(|r| r.uid.as_str()),
            Some("u")
        );
        assert_eq!(p.spec.tolerations.len(), 6);
        assert!(p
            .spec
            .tolerations
            .iter()
            .all(|t| t.toleration_seconds.is_none()));
        let n1 = node("node-1", &[], &[]);
        let n2 = node("node-2", &[], &[]);
        assert!(node_selected(&p.spec, &n1));
        assert!(!node_selected(&p.spec, &n2));
    }

    #[test]
    fn requirement_operators() {
        let r = |op: &str, values: &[&str]| NodeSelectorRequirement {
            key: "k".into(),
            operator: op.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
        };
        assert!(requirement_holds(&r("In", &["a", "b"]), Some("b")));
        assert!(!requirement_holds(&r("In", &["a"]), None));
        assert!(requirement_holds(&r("NotIn", &["a"]), None));
        assert!(requirement_holds(&r("Exists", &[]), Some("")));
        assert!(requirement_holds(&r("DoesNotExist", &[]), None));
        assert!(requirement_holds(&r("Gt", &["3"]), Some("4")));
        assert!(!requirement_holds(&r("Lt", &["3"]), Some("4")));
        assert!(!requirement_holds(&r("Gt", &["x"]), Some("4")));
    }

    #[test]
    fn max_unavailable_rounds_up_and_is_at_least_one() {
        let mut ds = DaemonSet::default();
        ds.set_defaults();
        assert_eq!(max_unavailable(&ds, 10), 1);
        if let Some(ru) = ds
            .spec
            .update_strategy
            .as_mut()
            .and_then(|u| u.rolling_update.as_mut())
        {
            ru.max_unavailable = Some(IntOrString::String("25%".into()));
        }
        assert_eq!(max_unavailable(&ds, 10), 3);
        assert_eq!(max_unavailable(&ds, 0), 1);
    }
}
