//! Scores: which of the nodes that can take the pod is best. Each rule gives 0..=100 per
//! node; the total is their weighted sum (weights as kube-scheduler's defaults), and ties go
//! round-robin so equal nodes fill evenly.

use api::core::{Node, Pod};

use super::cache::{NodeInfo, PodFacts};
use super::filter::{term_matches, tolerated};

pub const MAX_SCORE: i64 = 100;
pub const WEIGHT_LEAST_ALLOCATED: i64 = 1;
pub const WEIGHT_BALANCED: i64 = 1;
pub const WEIGHT_SPREAD: i64 = 2;
pub const WEIGHT_NODE_AFFINITY: i64 = 2;
pub const WEIGHT_TAINTS: i64 = 3;

/// CPU and memory fractions the node would have requested with the pod (scoring requests:
/// containers without requests count Kubernetes' defaults).
fn fractions(info: &NodeInfo, facts: &PodFacts) -> (f64, f64) {
    let frac = |used: i64, alloc: i64| {
        if alloc <= 0 {
            1.0
        } else {
            (used as f64 / alloc as f64).min(1.0)
        }
    };
    (
        frac(
            info.nonzero_milli_cpu
                .saturating_add(facts.nonzero_milli_cpu),
            info.allocatable.milli_cpu,
        ),
        frac(
            info.nonzero_memory.saturating_add(facts.nonzero_memory),
            info.allocatable.memory,
        ),
    )
}

/// Least allocated: the mean free fraction of cpu and memory after placing the pod.
pub fn least_allocated(info: &NodeInfo, facts: &PodFacts) -> i64 {
    let (cpu, mem) = fractions(info, facts);
    (((1.0 - cpu) + (1.0 - mem)) * MAX_SCORE as f64 / 2.0) as i64
}

/// Balanced allocation: cpu and memory used in equal proportion score best.
pub fn balanced_allocation(info: &NodeInfo, facts: &PodFacts) -> i64 {
    let (cpu, mem) = fractions(info, facts);
    // The standard deviation of two fractions is half their difference.
    ((1.0 - (cpu - mem).abs() / 2.0) * MAX_SCORE as f64) as i64
}

/// Preferred node affinity: the sum of the weights of the preferred terms the node matches
/// (normalized over the candidates by [`normalize`]).
pub fn node_affinity_raw(pod: &Pod, node: &Node) -> i64 {
    pod.spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .map_or(0, |na| {
            na.preferred_during_scheduling_ignored_during_execution
                .iter()
                .filter(|p| term_matches(&p.preference, node))
                .map(|p| i64::from(p.weight))
                .sum()
        })
}

/// PreferNoSchedule taints the pod does not tolerate (fewer is better).
pub fn prefer_no_schedule_raw(pod: &Pod, node: &Node) -> i64 {
    node.spec
        .taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule" && !tolerated(&pod.spec.tolerations, t))
        .count() as i64
}

/// Pods of the same controller already on the node (fewer is better).
pub fn spread_raw(info: &NodeInfo, facts: &PodFacts) -> i64 {
    facts
        .owner
        .as_deref()
        .map_or(0, |o| i64::from(info.owned_by(o)))
}

/// Scales raw values to 0..=100 relative to the largest; `reverse` makes the smallest best.
pub fn normalize(raw: &mut [i64], reverse: bool) {
    let max = raw.iter().copied().max().unwrap_or(0);
    for v in raw.iter_mut() {
        *v = if max <= 0 {
            if reverse {
                MAX_SCORE
            } else {
                0
            }
        } else if reverse {
            MAX_SCORE * (max - *v) / max
        } else {
            MAX_SCORE * *v / max
        };
    }
}

/// The weighted total score of each feasible node, in the order given.
pub fn score_nodes(pod: &Pod, facts: &PodFacts, feasible: &[&NodeInfo]) -> Vec<i64> {
    let has_preferred = pod
        .spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .is_some_and(|n| {
            !n.preferred_during_scheduling_ignored_during_execution
                .is_empty()
        });
    let mut spread: Vec<i64> = feasible.iter().map(|n| spread_raw(n, facts)).collect();
    normalize(&mut spread, true);
    let mut affinity: Vec<i64> = if has_preferred {
        feasible
            .iter()
            .map(|n| node_affinity_raw(pod, &n.node))
            .collect()
    } else {
        vec![0; feasible.len()]
    };
    normalize(&mut affinity, false);
    let mut taints: Vec<i64> = feasible
        .iter()
        .map(|n| {
            if n.node.spec.taints.is_empty() {
                0
            } else {
                prefer_no_schedule_raw(pod, &n.node)
            }
        })
        .collect();
    normalize(&mut taints, true);
    feasible
        .iter()
        .enumerate()
        .map(|(i, n)| {
            WEIGHT_LEAST_ALLOCATED * least_allocated(n, facts)
                + WEIGHT_BALANCED * balanced_allocation(n, facts)
                + WEIGHT_SPREAD * spread[i]
                + WEIGHT_NODE_AFFINITY * affinity[i]
                + WEIGHT_TAINTS * taints[i]
        })
        .collect()
}

/// The index of the best score; ties go round-robin through `turn`, which advances on
/// every tie.
pub fn select(scores: &[i64], turn: &mut usize) -> Option<usize> {
    let best = *scores.iter().max()?;
    let ties = scores.iter().filter(|&&s| s == best).count();
    let pick = if ties > 1 {
        let k = *turn % ties;
        *turn = turn.wrapping_add(1);
        k
    } else {
        0
    };
    scores
        .iter()
        .enumerate()
        .filter(|(_, &s)| s == best)
        .nth(pick)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filter::tests::{node, pod};
    use api::core::{
        Affinity, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
        Taint, Toleration,
    };
    use api::meta::OwnerReference;
    use std::sync::Arc;

    fn info(n: Node) -> NodeInfo {
        NodeInfo::new(Arc::new(n))
    }

    #[test]
    fn least_allocated_prefers_free_nodes() {
        let p = pod("p", "1", "1Gi");
        let f = PodFacts::of(&p);
        let empty = info(node("a", "4", "4Gi"));
        let mut busy = info(node("b", "4", "4Gi"));
        busy.add_pod(&PodFacts::of(&pod("x", "2", "2Gi")));
        assert_eq!(least_allocated(&empty, &f), 75);
        assert_eq!(least_allocated(&busy, &f), 25);
        // A pod without requests is scored with the defaults (100m, 200Mi).
        let none = PodFacts::of(&pod("n", "", ""));
        assert!(least_allocated(&empty, &none) < 100);
        assert!(least_allocated(&empty, &none) > least_allocated(&busy, &none));
    }

    #[test]
    fn balanced_allocation_prefers_even_use() {
        let f = PodFacts::of(&pod("p", "1", "1Gi"));
        let even = info(node("a", "4", "4Gi"));
        let mut skewed = info(node("b", "4", "4Gi"));
        skewed.add_pod(&PodFacts::of(&pod("x", "2", "64Mi")));
        assert_eq!(balanced_allocation(&even, &f), 100);
        assert!(balanced_allocation(&skewed, &f) < 100);
        // cpu 3/4, memory 0.27: (1 - 0.48/2) * 100, truncated
        assert_eq!(balanced_allocation(&skewed, &f), 75);
    }

    #[test]
    fn preferred_node_affinity_sums_weights() {
        let mut a = node("a", "4", "4Gi");
        a.metadata.labels.insert("disk".into(), "ssd".into());
        a.metadata.labels.insert("zone".into(), "z1".into());
        let b = node("b", "4", "4Gi");
        let term = |k: &str, v: &str, w: i32| PreferredSchedulingTerm {
            weight: w,
            preference: NodeSelectorTerm {
                match_expressions: vec![NodeSelectorRequirement {
                    key: k.into(),
                    operator: "In".into(),
                    values: vec![v.into()],
                }],
                ..Default::default()
            },
        };
        let mut p = pod("p", "", "");
        p.spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: vec![
                    term("disk", "ssd", 10),
                    term("zone", "z1", 5),
                    term("zone", "z2", 50),
                ],
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(node_affinity_raw(&p, &a), 15);
        assert_eq!(node_affinity_raw(&p, &b), 0);
        let (ia, ib) = (info(a), info(b));
        let f = PodFacts::of(&p);
        let s = score_nodes(&p, &f, &[&ia, &ib]);
        assert_eq!(s[0] - s[1], WEIGHT_NODE_AFFINITY * MAX_SCORE);
    }

    #[test]
    fn prefer_no_schedule_taints_count_unless_tolerated() {
        let mut a = node("a", "4", "4Gi");
        a.spec.taints = vec![
            Taint {
                key: "soft".into(),
                effect: "PreferNoSchedule".into(),
                ..Default::default()
            },
            Taint {
                key: "hard".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
        ];
        let mut p = pod("p", "", "");
        assert_eq!(prefer_no_schedule_raw(&p, &a), 1);
        p.spec.tolerations.push(Toleration {
            key: Some("soft".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        });
        assert_eq!(prefer_no_schedule_raw(&p, &a), 0);
        let q = pod("q", "", "");
        let (ia, ib) = (info(a), info(node("b", "4", "4Gi")));
        let s = score_nodes(&q, &PodFacts::of(&q), &[&ia, &ib]);
        assert_eq!(s[1] - s[0], WEIGHT_TAINTS * MAX_SCORE);
    }

    #[test]
    fn spreading_pods_of_one_owner() {
        let mut p = pod("p", "", "");
        p.metadata.owner_references.push(OwnerReference {
            uid: "rs".into(),
            controller: Some(true),
            ..Default::default()
        });
        let f = PodFacts::of(&p);
        let mut a = info(node("a", "4", "4Gi"));
        let b = info(node("b", "4", "4Gi"));
        a.add_pod(&f);
        assert_eq!(spread_raw(&a, &f), 1);
        assert_eq!(spread_raw(&b, &f), 0);
        let mut raw = vec![spread_raw(&a, &f), spread_raw(&b, &f)];
        normalize(&mut raw, true);
        assert_eq!(raw, [0, 100]);
        // A pod without an owner does not spread.
        let lone = PodFacts::of(&pod("l", "", ""));
        assert_eq!(spread_raw(&a, &lone), 0);
    }

    #[test]
    fn normalize_scales_and_reverses() {
        let mut v = vec![0, 5, 10];
        normalize(&mut v, false);
        assert_eq!(v, [0, 50, 100]);
        let mut v = vec![0, 5, 10];
        normalize(&mut v, true);
        assert_eq!(v, [100, 50, 0]);
        let mut v = vec![0, 0];
        normalize(&mut v, true);
        assert_eq!(v, [100, 100]);
        let mut v = vec![0, 0];
        normalize(&mut v, false);
        assert_eq!(v, [0, 0]);
    }

    #[test]
    fn ties_go_round_robin() {
        let mut turn = 0;
        let scores = [7, 9, 9, 3, 9];
        let picks: Vec<usize> = (0..6)
            .map(|_| select(&scores, &mut turn).expect("pick"))
            .collect();
        assert_eq!(picks, [1, 2, 4, 1, 2, 4]);
        // A single best node does not use a turn.
        let mut turn = 0;
        assert_eq!(select(&[1, 5, 2], &mut turn), Some(1));
        assert_eq!(turn, 0);
        assert_eq!(select(&[], &mut turn), None);
    }
}
