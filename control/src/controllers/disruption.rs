//! The disruption controller: keeps each PodDisruptionBudget's status (how many of its pods
//! are healthy, how many must stay so, and how many may be evicted now) as Kubernetes'
//! controller computes it. The eviction subresource reads that status.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use api::apps::{Deployment, ReplicaSet};
use api::core::Pod;
use api::meta::{LabelSelector, Time};
use api::policy::{
    budget, disruptions_allowed, Condition, PodDisruptionBudget, PodDisruptionBudgetStatus,
    DISRUPTION_ALLOWED,
};
use api::replication::ReplicationController;
use api::selector::Selector;
use api::Kind;

use crate::controllers::workload::pod_ready;
use crate::machinery::Context;
use crate::registry::Part;

/// How long an evicted pod stays out of the healthy count when its deletion is not seen
/// (Kubernetes' DeletionTimeout).
const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// How often budgets are recomputed without a change, to expire disrupted pods.
const RESYNC: Duration = Duration::from_secs(30);

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

/// The pods a budget's selector picks: a null selector picks none, an empty one every pod.
pub fn selects(sel: &Option<LabelSelector>, pod: &Pod) -> bool {
    match sel {
        None => false,
        Some(s) => Selector::from_label_selector(s)
            .map(|s| s.matches(&pod.metadata.labels))
            .unwrap_or(false),
    }
}

/// The summed scale of the controllers of `pods` (each counted once): a ReplicaSet's
/// Deployment's replicas, else the ReplicaSet's; a ReplicationController's replicas.
fn controllers_scale(
    pods: &[&Pod],
    rss: &[ReplicaSet],
    deps: &[Deployment],
    rcs: &[ReplicationController],
) -> Result<i32, String> {
    let mut scales: HashMap<String, i32> = HashMap::new();
    for p in pods {
        let Some(owner) = p.metadata.controller_ref() else {
            return Err(format!(
                "found no controller ref for pod {:?}",
                p.metadata.name
            ));
        };
        if scales.contains_key(&owner.uid) {
            continue;
        }
        let missing = || format!("found no controllers for pod {:?}", p.metadata.name);
        if owner.kind == "ReplicationController" {
            let rc = rcs
                .iter()
                .find(|r| r.metadata.uid == owner.uid)
                .ok_or_else(missing)?;
            scales.insert(owner.uid.clone(), rc.spec.replicas.unwrap_or(1));
            continue;
        }
        if owner.kind != "ReplicaSet" {
            return Err(missing());
        }
        let rs = rss
            .iter()
            .find(|r| r.metadata.uid == owner.uid)
            .ok_or_else(missing)?;
        match rs.metadata.controller_ref() {
            Some(d) if d.kind == "Deployment" => {
                let dep = deps
                    .iter()
                    .find(|x| x.metadata.uid == d.uid)
                    .ok_or_else(missing)?;
                scales.insert(d.uid.clone(), dep.spec.replicas.unwrap_or(1));
                // Sibling ReplicaSets of the same Deployment count once, under its uid.
                scales.insert(owner.uid.clone(), 0);
            }
            _ => {
                scales.insert(owner.uid.clone(), rs.spec.replicas.unwrap_or(1));
            }
        }
    }
    // Any int32 replicas each: saturating, where the sum overflowed.
    Ok(scales
        .values()
        .fold(0, |total: i32, n| total.saturating_add(*n)))
}

/// The status a budget should have, given the pods and controllers of its namespace.
pub fn desired_status(
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
    rss: &[ReplicaSet],
    deps: &[Deployment],
    now: Time,
) -> PodDisruptionBudgetStatus {
    desired_status_with_rcs(pdb, pods, rss, deps, &[], now)
}

/// [`desired_status`] with the namespace's ReplicationControllers too.
pub fn desired_status_with_rcs(
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
    rss: &[ReplicaSet],
    deps: &[Deployment],
    rcs: &[ReplicationController],
    now: Time,
) -> PodDisruptionBudgetStatus {
    let selected: Vec<&Pod> = pods
        .iter()
        .filter(|p| selects(&pdb.spec.selector, p))
        .collect();
    // An evicted pod stays disrupted until its deletion shows, or for DELETION_TIMEOUT.
    let disrupted: BTreeMap<String, Time> = pdb
        .status
        .disrupted_pods
        .iter()
        .filter(|(name, at)| {
            selected
                .iter()
                .any(|p| &p.metadata.name == *name && p.metadata.deletion_timestamp.is_none())
                && now.0 - at.0 < DELETION_TIMEOUT.as_secs() as i64
        })
        .map(|(n, t)| (n.clone(), *t))
        .collect();
    let current_healthy = selected
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !disrupted.contains_key(&p.metadata.name)
                && pod_ready(p)
        })
        .count() as i32;
    let computed = budget(&pdb.spec, selected.len() as i32, || {
        controllers_scale(&selected, rss, deps, rcs)
    });
    let generation = pdb.metadata.generation;
    let (b, condition) = match computed {
        Ok(b) => {
            let allowed = disruptions_allowed(b, current_healthy);
            let (status, reason) = if allowed > 0 {
                ("True", "SufficientPods")
            } else {
                ("False", "InsufficientPods")
            };
            (b, (status, reason, String::new()))
        }
        Err(e) => (
            api::policy::Budget {
                expected_pods: 0,
                desired_healthy: 0,
            },
            ("False", "SyncFailed", e),
        ),
    };
    let previous = pdb
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == DISRUPTION_ALLOWED);
    let last_transition_time = match previous {
        Some(c) if c.status == condition.0 => c.last_transition_time,
        _ => Some(now),
    };
    let failed = condition.1 == "SyncFailed";
    PodDisruptionBudgetStatus {
        observed_generation: generation,
        disrupted_pods: disrupted,
        disruptions_allowed: if failed {
            0
        } else {
            disruptions_allowed(b, current_healthy)
        },
        current_healthy,
        desired_healthy: b.desired_healthy,
        expected_pods: b.expected_pods,
        conditions: vec![Condition {
            type_: DISRUPTION_ALLOWED.into(),
            status: condition.0.into(),
            observed_generation: generation,
            last_transition_time,
            reason: condition.1.into(),
            message: condition.2,
        }],
    }
}

async fn run(ctx: Context) {
    let changes = ctx.informers.subscribe(&[
        Kind::PodDisruptionBudget,
        Kind::Pod,
        Kind::ReplicaSet,
        Kind::Deployment,
        Kind::ReplicationController,
    ]);
    loop {
        let cache = ctx.informers.cache();
        let now = Time::now();
        for pdb in cache.list::<PodDisruptionBudget>(None) {
            let ns = pdb.metadata.namespace().to_string();
            let pods: Vec<Pod> = cache.list(Some(&ns));
            let rss: Vec<ReplicaSet> = cache.list(Some(&ns));
            let deps: Vec<Deployment> = cache.list(Some(&ns));
            let rcs: Vec<ReplicationController> = cache.list(Some(&ns));
            let want = desired_status_with_rcs(&pdb, &pods, &rss, &deps, &rcs, now);
            if want == pdb.status {
                continue;
            }
            let (name, uid, generation, seen) = (
                pdb.metadata.name.clone(),
                pdb.metadata.uid.clone(),
                pdb.metadata.generation,
                pdb.status.clone(),
            );
            let r = ctx
                .registry
                .mutate::<PodDisruptionBudget>(&ns, &name, Part::Status, move |p| {
                    // Written only over the object it was computed from: an eviction that
                    // changed the status meanwhile is a change the next pass sees.
                    if p.metadata.uid == uid
                        && p.metadata.generation == generation
                        && p.status == seen
                    {
                        p.status = want.clone();
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = r {
                if e.code() != 404 && e.code() != 409 {
                    tracing::warn!(pdb = %name, namespace = %ns, error = %e, "cannot write the PodDisruptionBudget status");
                }
            }
        }
        // Wait for a change (or the resync that expires disrupted pods), then take every
        // change queued meanwhile in one pass.
        let next = futures_lite::future::or(async { Some(changes.recv().await) }, async {
            smol::Timer::after(RESYNC).await;
            None
        })
        .await;
        match next {
            Some(Ok(_)) | None => while changes.try_recv().is_ok() {},
            Some(Err(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::meta::{IntOrString, OwnerReference};

    fn pod(name: &str, ready: bool, owner: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.metadata.labels.insert("app".into(), "web".into());
        p.metadata.owner_references = vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: owner.into(),
            uid: owner.into(),
            controller: Some(true),
            ..Default::default()
        }];
        p.status.conditions = vec![api::core::PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        }];
        p
    }

    fn pdb(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
        let mut b = PodDisruptionBudget::default();
        b.metadata.name = "web".into();
        b.metadata.generation = Some(1);
        b.spec.selector = Some(LabelSelector {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        });
        b.spec.min_available = min;
        b.spec.max_unavailable = max;
        b
    }

    fn rs(uid: &str, replicas: i32) -> ReplicaSet {
        let mut r = ReplicaSet::default();
        r.metadata.uid = uid.into();
        r.spec.replicas = Some(replicas);
        r
    }

    /// Two ReplicaSets of i32::MAX replicas each: the summed scale overflowed.
    #[test]
    fn the_scale_of_huge_controllers_saturates() {
        let pods = [pod("a", true, "rs-1"), pod("b", true, "rs-2")];
        let rss = [rs("rs-1", i32::MAX), rs("rs-2", i32::MAX)];
        for max in ["50%", "100%", "0%"] {
            let b = pdb(None, Some(IntOrString::String(max.into())));
            let s = desired_status(&b, &pods, &rss, &[], Time(100));
            assert_eq!(s.expected_pods, i32::MAX, "{max}");
            assert_eq!(s.current_healthy, 2);
        }
        let b = pdb(None, Some(IntOrString::Int(i32::MAX)));
        let s = desired_status(&b, &pods, &rss, &[], Time(100));
        assert_eq!(s.desired_healthy, 0);
        assert_eq!(s.disruptions_allowed, 2);
    }

    #[test]
    fn min_available_counts_ready_pods() {
        let pods = [
            pod("a", true, "rs"),
            pod("b", true, "rs"),
            pod("c", false, "rs"),
        ];
        let s = desired_status(
            &pdb(Some(IntOrString::Int(1)), None),
            &pods,
            &[],
            &[],
            Time(100),
        );
        assert_eq!(s.current_healthy, 2);
        assert_eq!(s.desired_healthy, 1);
        assert_eq!(s.expected_pods, 3);
        assert_eq!(s.disruptions_allowed, 1);
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(s.conditions[0].reason, "SufficientPods");
        let s = desired_status(
            &pdb(Some(IntOrString::Int(2)), None),
            &pods,
            &[],
            &[],
            Time(100),
        );
        assert_eq!(s.disruptions_allowed, 0);
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "InsufficientPods");
    }

    #[test]
    fn a_replication_controllers_scale_counts() {
        let mut b = PodDisruptionBudget::default();
        b.spec.selector = Some(api::meta::LabelSelector {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        });
        b.spec.max_unavailable = Some(api::meta::IntOrString::String("50%".into()));
        let mut rc = ReplicationController::default();
        rc.metadata.uid = "rc-1".into();
        rc.spec.replicas = Some(4);
        let pods: Vec<Pod> = (0..4)
            .map(|i| {
                let mut p = Pod::default();
                p.metadata.name = format!("p{i}");
                p.metadata.labels = [("app".to_string(), "web".to_string())].into();
                p.metadata.owner_references.push(api::meta::OwnerReference {
                    kind: "ReplicationController".into(),
                    uid: "rc-1".into(),
                    controller: Some(true),
                    ..Default::default()
                });
                p
            })
            .collect();
        let s = desired_status_with_rcs(&b, &pods, &[], &[], std::slice::from_ref(&rc), Time(1));
        assert_eq!(s.expected_pods, 4);
        assert_eq!(s.desired_healthy, 2);
        let s = desired_status(&b, &pods, &[], &[], Time(1));
        assert_eq!(s.expected_pods, 0, "without the RC its scale is unknown");
    }

    #[test]
    fn max_unavailable_uses_the_controllers_scale() {
        // 3 replicas wanted, 2 pods exist and are ready: maxUnavailable 1 leaves no room.
        let pods = [pod("a", true, "rs"), pod("b", true, "rs")];
        let s = desired_status(
            &pdb(None, Some(IntOrString::Int(1))),
            &pods,
            &[rs("rs", 3)],
            &[],
            Time(100),
        );
        assert_eq!(s.expected_pods, 3);
        assert_eq!(s.desired_healthy, 2);
        assert_eq!(s.disruptions_allowed, 0);
        // A pod without a controller makes the budget fail to sync.
        let mut lone = pod("c", true, "rs");
        lone.metadata.owner_references.clear();
        let s = desired_status(
            &pdb(None, Some(IntOrString::String("50%".into()))),
            &[lone],
            &[],
            &[],
            Time(100),
        );
        assert_eq!(s.conditions[0].reason, "SyncFailed");
        assert_eq!(s.disruptions_allowed, 0);
    }

    #[test]
    fn disrupted_pods_are_not_healthy_until_they_expire() {
        let pods = [pod("a", true, "rs"), pod("b", true, "rs")];
        let mut b = pdb(Some(IntOrString::Int(1)), None);
        b.status.disrupted_pods.insert("a".into(), Time(100));
        let s = desired_status(&b, &pods, &[], &[], Time(110));
        assert_eq!(s.current_healthy, 1);
        assert_eq!(s.disruptions_allowed, 0);
        let s = desired_status(&b, &pods, &[], &[], Time(100 + 121));
        assert!(s.disrupted_pods.is_empty());
        assert_eq!(s.disruptions_allowed, 1);
    }
}
