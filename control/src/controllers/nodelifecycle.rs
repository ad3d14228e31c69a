//! Node lifecycle: a node whose heartbeats (its status' heartbeat times and the renewals of
//! its Lease in kube-node-lease, both kept in memory, see [`crate::heartbeat`]) have not
//! moved for the grace period becomes Ready=Unknown and gets the `unreachable` taints; a
//! NotReady node gets the `not-ready` taints; a Ready node loses both. Pods on a node with a
//! NoExecute taint are evicted when their tolerations run out (Kubernetes' taint manager):
//! they are deleted gracefully, so they stay Terminating until their node confirms, and
//! their controllers count them as gone and replace them elsewhere.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use api::coordination::{Lease, NODE_LEASE_NAMESPACE};
use api::core::{Node, NodeCondition, Pod, PodCondition, Taint, Toleration};
use api::meta::{DeleteOptions, MicroTime, Time};

use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::Context;
use crate::registry::{Part, NOT_READY_TAINT, UNREACHABLE_TAINT};

/// When a pod must leave a node with NoExecute taints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    Never,
    Now,
    At(Time),
}

/// Kubernetes' taint manager rule: a NoExecute taint no toleration matches evicts at once;
/// otherwise the pod goes when the shortest tolerationSeconds of the matching tolerations
/// has passed since the taint was added (never if none of them sets seconds).
pub fn eviction(tolerations: &[Toleration], taints: &[Taint], now: Time) -> Eviction {
    let mut at: Option<Time> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> =
            tolerations.iter().filter(|t| t.tolerates(taint)).collect();
        if matching.is_empty() {
            return Eviction::Now;
        }
        if let Some(secs) = matching.iter().filter_map(|t| t.toleration_seconds).min() {
            let added = taint.time_added.unwrap_or(now);
            // Any int64 tolerationSeconds (i64::MAX overflowed): saturating, it is never.
            let t = Time(added.0.saturating_add(secs.max(0)));
            at = Some(at.map_or(t, |a| a.min(t)));
        }
    }
    match at {
        Some(t) if t <= now => Eviction::Now,
        Some(t) => Eviction::At(t),
        None => Eviction::Never,
    }
}

/// The taints a node should carry for its Ready condition status.
pub fn condition_taints(ready: Option<&str>) -> Vec<(&'static str, &'static str)> {
    match ready {
        Some("False") => vec![
            (NOT_READY_TAINT, "NoSchedule"),
            (NOT_READY_TAINT, "NoExecute"),
        ],
        Some("Unknown") => vec![
            (UNREACHABLE_TAINT, "NoSchedule"),
            (UNREACHABLE_TAINT, "NoExecute"),
        ],
        _ => vec![],
    }
}

/// The node's taints with the condition taints made to match `wanted` (other taints kept;
/// existing ones keep their timeAdded). None if nothing changes.
pub fn reconcile_taints(
    current: &[Taint],
    wanted: &[(&str, &str)],
    now: Time,
) -> Option<Vec<Taint>> {
    let managed = |t: &Taint| t.key == NOT_READY_TAINT || t.key == UNREACHABLE_TAINT;
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !managed(t) || wanted.iter().any(|(k, e)| t.key == *k && t.effect == *e))
        .cloned()
        .collect();
    for (k, e) in wanted {
        if !out.iter().any(|t| t.key == *k && t.effect == *e) {
            out.push(Taint {
                key: k.to_string(),
                value: None,
                effect: e.to_string(),
                time_added: Some(now),
            });
        }
    }
    (out != current).then_some(out)
}

/// When the controller last saw each node's heartbeat or Lease renewal move (by its own
/// clock, as Kubernetes does, so clock skew between node and server does not matter).
struct Seen {
    beat: Option<Time>,
    renewed: Option<MicroTime>,
    at: Instant,
}

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

async fn run(ctx: Context) {
    let rec = Recorder::start(ctx.registry.clone(), "node-controller");
    let grace = ctx.config.node_monitor_grace_period;
    let period = (grace / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    let mut seen: HashMap<String, Seen> = HashMap::new();
    loop {
        if let Err(e) = pass(&ctx, &rec, &mut seen).await {
            tracing::warn!(error = %e, "node lifecycle pass failed");
        }
        smol::Timer::after(period).await;
    }
}

fn latest_beat(ctx: &Context, node: &Node) -> Option<Time> {
    let stored = node
        .status
        .conditions
        .iter()
        .filter_map(|c| c.last_heartbeat_time)
        .max();
    stored.max(ctx.registry.heartbeats.latest(&node.metadata.name))
}

/// The latest renewal of the node's Lease (Kubernetes' node lifecycle controller counts it as
/// a heartbeat: kubelets renew it every 10 s and post their status less often).
fn latest_renewal(ctx: &Context, node: &str) -> Option<MicroTime> {
    let stored = ctx
        .informers
        .cache()
        .get::<Lease>(NODE_LEASE_NAMESPACE, node)
        .and_then(|l| l.spec.renew_time);
    stored.max(ctx.registry.heartbeats.renewal(node))
}

async fn pass(
    ctx: &Context,
    rec: &Recorder,
    seen: &mut HashMap<String, Seen>,
) -> Result<(), ApiError> {
    let nodes: Vec<Node> = ctx.informers.cache().list(None);
    seen.retain(|name, _| nodes.iter().any(|n| &n.metadata.name == name));
    let now = Time::now();
    for node in nodes {
        let name = node.metadata.name.clone();
        let beat = latest_beat(ctx, &node);
        let renewed = latest_renewal(ctx, &name);
        let entry = seen.entry(name.clone()).or_insert(Seen {
            beat,
            renewed,
            at: Instant::now(),
        });
        if beat > entry.beat || renewed > entry.renewed {
            entry.beat = entry.beat.max(beat);
            entry.renewed = entry.renewed.max(renewed);
            entry.at = Instant::now();
        }
        let stale = entry.at.elapsed() > ctx.config.node_monitor_grace_period;
        let mut node = node;
        let ready = node.status.condition("Ready").map(|c| c.status.clone());
        if stale && ready.as_deref() != Some("Unknown") {
            node = mark_unknown(ctx, &name, now).await?;
            rec.normal(
                &node,
                "NodeNotReady",
                format!("Node {name} status is now: NodeNotReady"),
            );
        }
        let ready = node.status.condition("Ready").map(|c| c.status.clone());
        if let Some(taints) =
            reconcile_taints(&node.spec.taints, &condition_taints(ready.as_deref()), now)
        {
            node = ctx
                .registry
                .mutate::<Node>("", &name, Part::Main, move |n| {
                    n.spec.taints = taints.clone();
                    Ok(())
                })
                .await?;
        }
        if ready.as_deref() == Some("Unknown") {
            mark_pods_not_ready(ctx, &name, now).await?;
        }
        if node.spec.taints.iter().any(|t| t.effect == "NoExecute") {
            evict(ctx, rec, &node, now).await?;
        }
    }
    Ok(())
}

async fn mark_unknown(ctx: &Context, name: &str, now: Time) -> Result<Node, ApiError> {
    ctx.registry
        .mutate::<Node>("", name, Part::Status, move |n| {
            if n.status.condition("Ready").is_none() {
                n.status.conditions.push(NodeCondition {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    last_heartbeat_time: None,
                    last_transition_time: Some(now),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                });
            }
            for c in &mut n.status.conditions {
                let watched = matches!(
                    c.type_.as_str(),
                    "Ready" | "MemoryPressure" | "DiskPressure" | "PIDPressure"
                );
                if watched && c.status != "Unknown" {
                    c.status = "Unknown".into();
                    c.reason = Some("NodeStatusUnknown".into());
                    c.message = Some("Kubelet stopped posting node status.".into());
                    c.last_transition_time = Some(now);
                }
            }
            Ok(())
        })
        .await
}

fn pods_on(ctx: &Context, node: &str) -> Vec<Pod> {
    let cache = ctx.informers.cache().read();
    cache
        .iter::<Pod>(None)
        .filter(|p| p.spec.node_name.as_deref() == Some(node))
        .collect()
}

/// Pods on an unreachable node are no longer known to be ready (Kubernetes' MarkPodsNotReady).
async fn mark_pods_not_ready(ctx: &Context, node: &str, now: Time) -> Result<(), ApiError> {
    for pod in pods_on(ctx, node) {
        let ready = pod
            .status
            .condition("Ready")
            .is_some_and(|c| c.status == "True");
        if !ready || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let r = ctx
            .registry
            .mutate::<Pod>(
                pod.metadata.namespace(),
                &pod.metadata.name,
                Part::Status,
                move |p| {
                    p.status.conditions.retain(|c| c.type_ != "Ready");
                    p.status.conditions.push(PodCondition {
                        type_: "Ready".into(),
                        status: "False".into(),
                        last_transition_time: Some(now),
                        reason: Some("NodeNotReady".into()),
                        ..Default::default()
                    });
                    Ok(())
                },
            )
            .await;
        crate::machinery::runner::ignore_not_found(r)?;
    }
    Ok(())
}

async fn evict(ctx: &Context, rec: &Recorder, node: &Node, now: Time) -> Result<(), ApiError> {
    for pod in pods_on(ctx, &node.metadata.name) {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if eviction(&pod.spec.tolerations, &node.spec.taints, now) != Eviction::Now {
            continue;
        }
        let opts = DeleteOptions {
            preconditions: Some(api::meta::Preconditions {
                uid: Some(pod.metadata.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let r = ctx
            .registry
            .delete::<Pod>(pod.metadata.namespace(), &pod.metadata.name, opts)
            .await;
        if crate::machinery::runner::ignore_not_found(r)?.is_some() {
            rec.normal(
                &pod,
                "TaintManagerEviction",
                format!(
                    "Marking for deletion Pod {}/{}",
                    pod.metadata.namespace(),
                    pod.metadata.name
                ),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str, added: i64) -> Taint {
        Taint {
            key: key.into(),
            value: None,
            effect: effect.into(),
            time_added: Some(Time(added)),
        }
    }

    fn tol(key: &str, secs: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            value: None,
            effect: Some("NoExecute".into()),
            toleration_seconds: secs,
        }
    }

    #[test]
    fn eviction_of_extreme_toleration_seconds() {
        let unreachable = [taint(UNREACHABLE_TAINT, "NoExecute", 100)];
        let at = |secs| {
            eviction(
                &[tol(UNREACHABLE_TAINT, Some(secs))],
                &unreachable,
                Time(200),
            )
        };
        assert_eq!(at(i64::MAX), Eviction::At(Time(i64::MAX)));
        assert_eq!(at(i64::MIN), Eviction::Now);
        assert_eq!(at(0), Eviction::Now);
        assert_eq!(at(-1), Eviction::Now);
        let late = [taint(UNREACHABLE_TAINT, "NoExecute", i64::MAX)];
        assert_eq!(
            eviction(&[tol(UNREACHABLE_TAINT, Some(i64::MAX))], &late, Time(200)),
            Eviction::At(Time(i64::MAX))
        );
    }

    #[test]
    fn eviction_waits_for_the_shortest_matching_toleration() {
        let unreachable = [taint(UNREACHABLE_TAINT, "NoExecute", 100)];
        assert_eq!(eviction(&[], &unreachable, Time(100)), Eviction::Now);
        let tols = [
            tol(UNREACHABLE_TAINT, Some(300)),
            tol(NOT_READY_TAINT, Some(5)),
        ];
        assert_eq!(
            eviction(&tols, &unreachable, Time(100)),
            Eviction::At(Time(400))
        );
        assert_eq!(
            eviction(&tols, &unreachable, Time(399)),
            Eviction::At(Time(400))
        );
        assert_eq!(eviction(&tols, &unreachable, Time(400)), Eviction::Now);
        // Daemon pods tolerate forever.
        assert_eq!(
            eviction(&[tol(UNREACHABLE_TAINT, None)], &unreachable, Time(1000)),
            Eviction::Never
        );
        // Two matching tolerations: the shorter wins.
        let both = [
            tol(UNREACHABLE_TAINT, None),
            tol(UNREACHABLE_TAINT, Some(10)),
        ];
        assert_eq!(
            eviction(&both, &unreachable, Time(100)),
            Eviction::At(Time(110))
        );
        // NoSchedule taints never evict.
        assert_eq!(
            eviction(&[], &[taint("x", "NoSchedule", 0)], Time(5)),
            Eviction::Never
        );
    }

    #[test]
    fn condition_taints_follow_ready() {
        let now = Time(50);
        let added = reconcile_taints(&[], &condition_taints(Some("Unknown")), now).unwrap();
        assert_eq!(added.len(), 2);
        assert!(added
            .iter()
            .all(|t| t.key == UNREACHABLE_TAINT && t.time_added == Some(now)));
        // Already right: no change, timeAdded kept.
        assert_eq!(
            reconcile_taints(&added, &condition_taints(Some("Unknown")), Time(99)),
            None
        );
        let other = taint("dedicated", "NoSchedule", 1);
        let mut with_other = added.clone();
        with_other.push(other.clone());
        let back = reconcile_taints(&with_other, &condition_taints(Some("True")), now).unwrap();
        assert_eq!(back, vec![other]);
        let not_ready = reconcile_taints(&added, &condition_taints(Some("False")), now).unwrap();
        assert!(not_ready.iter().all(|t| t.key == NOT_READY_TAINT));
    }
}
