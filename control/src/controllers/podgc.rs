//! Pod garbage collection, as kube-controller-manager's podgc controller does it. A bound pod
//! is deleted gracefully and waits for its node's agent to confirm; some pods have nobody to
//! confirm, and this loop removes them (a delete with grace period 0):
//!
//! * pods bound to a node that no longer exists (orphaned): once the node has been missing
//!   for the quarantine (the node monitor grace period, 40 s by default, as Kubernetes'
//!   fixed 40 s) and a read of the store confirms it, the pod is marked Failed with a
//!   `DisruptionTarget` condition (reason `DeletionByPodGC`) and deleted;
//! * terminating pods that were never bound;
//! * terminating pods on a node that is not Ready and carries the
//!   `node.kubernetes.io/out-of-service` taint (the admin says the node is gone for good);
//! * terminated pods (Succeeded or Failed) beyond [`TERMINATED_POD_THRESHOLD`], oldest first
//!   (`--terminated-pod-gc-threshold`'s default).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use api::core::{Node, Pod, PodCondition};
use api::meta::{DeleteOptions, Preconditions, Time};

use crate::error::ApiError;
use crate::machinery::runner::ignore_not_found;
use crate::machinery::Context;
use crate::registry::Part;

/// How many terminated pods are kept (kube-controller-manager's
/// `--terminated-pod-gc-threshold` default).
pub const TERMINATED_POD_THRESHOLD: usize = 12_500;
/// The taint that declares a node out of service (Kubernetes' non-graceful node shutdown).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

async fn run(ctx: Context) {
    let quarantine = ctx.config.node_monitor_grace_period;
    // Kubernetes checks every 20 s; a shorter quarantine (tests) is checked more often.
    let period = (quarantine / 2).clamp(Duration::from_millis(200), Duration::from_secs(20));
    let mut missing: HashMap<String, Instant> = HashMap::new();
    loop {
        smol::Timer::after(period).await;
        if let Err(e) = pass(&ctx, &mut missing, quarantine).await {
            tracing::warn!(error = %e, "pod garbage collection pass failed");
        }
    }
}

/// What a pass decides for one pod.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Keep,
    /// Delete now (grace period 0).
    ForceDelete,
    /// Its node is gone: mark it Failed, then delete it now.
    Orphaned,
}

fn terminated(p: &Pod) -> bool {
    matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

fn out_of_service(node: &Node) -> bool {
    let ready = node
        .status
        .condition("Ready")
        .is_some_and(|c| c.status == "True");
    !ready
        && node
            .spec
            .taints
            .iter()
            .any(|t| t.key == OUT_OF_SERVICE_TAINT)
}

/// The rule for one pod. `nodes`: the nodes that exist, by name; `gone`: nodes missing for
/// the whole quarantine.
fn decide(pod: &Pod, nodes: &HashMap<&str, &Node>, gone: &HashSet<String>) -> Action {
    let terminating = pod.metadata.deletion_timestamp.is_some();
    match pod.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        None if terminating => Action::ForceDelete,
        None => Action::Keep,
        Some(n) => match nodes.get(n) {
            Some(node) if terminating && out_of_service(node) => Action::ForceDelete,
            Some(_) => Action::Keep,
            None if gone.contains(n) => Action::Orphaned,
            None => Action::Keep,
        },
    }
}

/// The terminated pods past the threshold, oldest first.
fn excess_terminated(pods: &[Pod], threshold: usize) -> Vec<&Pod> {
    let mut done: Vec<&Pod> = pods
        .iter()
        .filter(|p| terminated(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    if done.len() <= threshold {
        return Vec::new();
    }
    done.sort_by_key(|p| (p.metadata.creation_timestamp, p.metadata.name.clone()));
    let excess = done.len() - threshold;
    done.truncate(excess);
    done
}

async fn pass(
    ctx: &Context,
    missing: &mut HashMap<String, Instant>,
    quarantine: Duration,
) -> Result<(), ApiError> {
    let (pods, nodes): (Vec<Pod>, Vec<Node>) = {
        let cache = ctx.informers.cache();
        (cache.list(None), cache.list(None))
    };
    let by_name: HashMap<&str, &Node> = nodes
        .iter()
        .map(|n| (n.metadata.name.as_str(), n))
        .collect();
    // Nodes that pods name but that do not exist, and since when.
    let absent: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.spec.node_name.as_deref())
        .filter(|n| !n.is_empty() && !by_name.contains_key(n))
        .collect();
    missing.retain(|n, _| absent.contains(n.as_str()));
    let now = Instant::now();
    let mut gone = HashSet::new();
    for n in absent {
        let since = *missing.entry(n.to_string()).or_insert(now);
        if now.duration_since(since) < quarantine {
            continue;
        }
        // The cache may lag: the store has the last word.
        match ctx.registry.get::<Node>("", n).await {
            Err(e) if e.code() == 404 => {
                gone.insert(n.to_string());
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
    }
    let mut first_error = None;
    for pod in &pods {
        let r = match decide(pod, &by_name, &gone) {
            Action::Keep => continue,
            Action::ForceDelete => force_delete(ctx, pod).await,
            Action::Orphaned => match mark_failed(ctx, pod).await {
                Ok(()) => force_delete(ctx, pod).await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = r {
            first_error.get_or_insert(e);
        }
    }
    for pod in excess_terminated(&pods, TERMINATED_POD_THRESHOLD) {
        if let Err(e) = force_delete(ctx, pod).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Kubernetes marks a pod it removes for a missing node as Failed and disrupted first, so
/// its controllers and whoever watches it learn why it went.
async fn mark_failed(ctx: &Context, pod: &Pod) -> Result<(), ApiError> {
    let now = Time::now();
    let r = ctx
        .registry
        .mutate::<Pod>(
            pod.metadata.namespace(),
            &pod.metadata.name,
            Part::Status,
            move |p| {
                if !terminated(p) {
                    p.status.phase = Some("Failed".into());
                }
                p.status
                    .conditions
                    .retain(|c| c.type_ != "DisruptionTarget");
                p.status.conditions.push(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    last_transition_time: Some(now),
                    reason: Some("DeletionByPodGC".into()),
                    message: Some("PodGC: node no longer exists".into()),
                    ..Default::default()
                });
                Ok(())
            },
        )
        .await;
    ignore_not_found(r).map(|_| ())
}

async fn force_delete(ctx: &Context, pod: &Pod) -> Result<(), ApiError> {
    let ns = pod.metadata.namespace();
    tracing::info!(namespace = ns, pod = %pod.metadata.name, node = ?pod.spec.node_name, "garbage-collecting pod");
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(pod.metadata.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let r = ctx
        .registry
        .delete::<Pod>(ns, &pod.metadata.name, opts)
        .await;
    match ignore_not_found(r) {
        Ok(_) => Ok(()),
        // The uid precondition failed: a new pod of the same name, which is not ours.
        Err(e) if e.code() == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{NodeCondition, Taint};

    fn pod(name: &str, node: Option<&str>, terminating: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.spec.node_name = node.map(String::from);
        if terminating {
            p.metadata.deletion_timestamp = Some(Time(100));
        }
        p
    }

    fn node(name: &str, ready: bool, out_of_service: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        n.status.conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        });
        if out_of_service {
            n.spec.taints.push(Taint {
                key: OUT_OF_SERVICE_TAINT.into(),
                value: Some("nodeshutdown".into()),
                effect: "NoExecute".into(),
                time_added: None,
            });
        }
        n
    }

    #[test]
    fn each_rule_decides_its_pods() {
        let (up, down, dead) = (
            node("up", true, false),
            node("down", false, false),
            node("dead", false, true),
        );
        let nodes: HashMap<&str, &Node> = [("up", &up), ("down", &down), ("dead", &dead)].into();
        let gone: HashSet<String> = ["vanished".to_string()].into();
        let cases = [
            (pod("a", Some("up"), true), Action::Keep),
            (pod("b", Some("down"), true), Action::Keep),
            (pod("c", Some("dead"), true), Action::ForceDelete),
            (pod("d", Some("dead"), false), Action::Keep),
            (pod("e", None, true), Action::ForceDelete),
            (pod("f", None, false), Action::Keep),
            (pod("g", Some("vanished"), false), Action::Orphaned),
            (pod("h", Some("vanished"), true), Action::Orphaned),
            // Missing, but not yet for the whole quarantine.
            (pod("i", Some("new"), true), Action::Keep),
        ];
        for (p, want) in cases {
            assert_eq!(decide(&p, &nodes, &gone), want, "{}", p.metadata.name);
        }
    }

    #[test]
    fn terminated_pods_past_the_threshold_go_oldest_first() {
        let mut pods = Vec::new();
        for (i, phase) in ["Succeeded", "Failed", "Running", "Succeeded"]
            .iter()
            .enumerate()
        {
            let mut p = pod(&format!("p{i}"), Some("up"), false);
            p.status.phase = Some(phase.to_string());
            p.metadata.creation_timestamp = Some(Time(10 - i as i64));
            pods.push(p);
        }
        let names = |v: Vec<&Pod>| {
            v.iter()
                .map(|p| p.metadata.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(excess_terminated(&pods, 1)), ["p3", "p1"]);
        assert!(excess_terminated(&pods, 3).is_empty());
    }
}
