//! Preemption, as kube-scheduler's DefaultPreemption plugin does it: when a pod fits
//! nowhere, find a node where removing pods of lower priority makes it fit, keeping as many
//! of them as possible (most important first, the ones a PodDisruptionBudget protects before
//! the others), and pick among such nodes the one whose victims cost least: fewest budget
//! violations, then the lowest highest victim priority, the lowest sum of priorities, the
//! fewest victims, the latest-started highest-priority victims.
//!
//! The scheduler then deletes the victims (event `Preempted`) and records the node in the
//! pod's `status.nominatedNodeName`; until the pod is bound its requests are held on that
//! node against pods of no higher priority (see [`ClusterState::nominate`]).

use std::cmp::Ordering;

use api::core::Pod;
use api::policy::PodDisruptionBudget;

use super::cache::{ClusterState, NodeInfo, PodFacts};
use super::filter::{self, AffinityPlan};
use crate::machinery::informer::Key;

/// A pod's priority (0 when the Priority admission did not set one).
pub fn priority_of(pod: &Pod) -> i32 {
    pod.spec.priority.unwrap_or(0)
}

/// A pod that could be removed from a node.
#[derive(Clone, Debug)]
pub struct Victim {
    pub key: Key,
    pub pod: Pod,
    pub facts: PodFacts,
}

impl Victim {
    fn priority(&self) -> i32 {
        priority_of(&self.pod)
    }

    /// Start time in seconds; a pod not yet started counts as starting now (latest).
    fn start(&self) -> i64 {
        self.pod.status.start_time.map(|t| t.0).unwrap_or(i64::MAX)
    }
}

/// Kubernetes' MoreImportantPod: higher priority first, then the one that started earlier.
fn more_important(a: &Victim, b: &Victim) -> Ordering {
    b.priority()
        .cmp(&a.priority())
        .then_with(|| a.start().cmp(&b.start()))
}

/// A node where preemption lets the pod fit, and what it costs.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub node: String,
    pub victims: Vec<Victim>,
    /// Victims whose eviction a PodDisruptionBudget does not allow.
    pub pdb_violations: usize,
}

/// Whether `pod` may preempt now (Kubernetes' PodEligibleToPreemptOthers): its policy allows
/// it, and it is not already waiting for lower-priority pods it nominated a node for to
/// terminate.
pub fn eligible(pod: &Pod, state: &ClusterState, node_pods: impl Fn(&str) -> Vec<Pod>) -> bool {
    if pod.spec.preemption_policy.as_deref() == Some("Never") {
        return false;
    }
    let Some(nominated) = pod
        .status
        .nominated_node_name
        .as_deref()
        .filter(|n| !n.is_empty())
    else {
        return true;
    };
    if state.node(nominated).is_none() {
        return true;
    }
    let mine = priority_of(pod);
    !node_pods(nominated)
        .iter()
        .any(|p| p.metadata.deletion_timestamp.is_some() && priority_of(p) < mine)
}

/// For each budget, the pods it selects that are not already disrupted; Kubernetes'
/// filterPodsWithPDBViolation, with the budgets' allowance used up in `victims`' order.
fn split_by_budget(
    victims: Vec<Victim>,
    pdbs: &[PodDisruptionBudget],
) -> (Vec<Victim>, Vec<Victim>) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.status.disruptions_allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for v in victims {
        let mut violated = false;
        for (i, pdb) in pdbs.iter().enumerate() {
            if pdb.metadata.namespace() != v.pod.metadata.namespace()
                || !crate::controllers::disruption::selects(&pdb.spec.selector, &v.pod)
                || pdb.status.disrupted_pods.contains_key(&v.pod.metadata.name)
            {
                continue;
            }
            allowed[i] -= 1;
            if allowed[i] < 0 {
                violated = true;
            }
        }
        if violated {
            violating.push(v);
        } else {
            fine.push(v);
        }
    }
    (violating, fine)
}

/// Kubernetes' SelectVictimsOnNode: the fewest lower-priority pods of `lower` (all on
/// `info`'s node) whose removal lets `pod` fit; None if even removing all does not.
pub fn victims_on_node(
    pod: &Pod,
    facts: &PodFacts,
    plan: &AffinityPlan,
    info: &NodeInfo,
    mut lower: Vec<Victim>,
    pdbs: &[PodDisruptionBudget],
) -> Option<Candidate> {
    let mut trial = info.clone();
    for v in &lower {
        trial.remove_pod(&v.facts);
    }
    if filter::filter(pod, facts, plan, &trial).is_err() {
        return None;
    }
    lower.sort_by(more_important);
    let (violating, fine) = split_by_budget(lower, pdbs);
    let mut victims = Vec::new();
    let mut pdb_violations = 0;
    let mut reprieve = |v: Victim, trial: &mut NodeInfo, violating: bool| {
        trial.add_pod(&v.facts);
        if filter::filter(pod, facts, plan, trial).is_err() {
            trial.remove_pod(&v.facts);
            if violating {
                pdb_violations += 1;
            }
            victims.push(v);
        }
    };
    for v in violating {
        reprieve(v, &mut trial, true);
    }
    for v in fine {
        reprieve(v, &mut trial, false);
    }
    if victims.is_empty() {
        // It fits without preempting anyone (room freed meanwhile): nothing to do here.
        return None;
    }
    victims.sort_by(more_important);
    Some(Candidate {
        node: info.name().to_string(),
        victims,
        pdb_violations,
    })
}

/// Kubernetes' pickOneNodeForPreemption over the candidates.
pub fn pick(mut candidates: Vec<Candidate>) -> Option<Candidate> {
    let highest = |c: &Candidate| c.victims.first().map_or(i32::MIN, Victim::priority);
    // Priorities shifted to be non-negative, as Kubernetes sums them.
    let sum = |c: &Candidate| -> i64 {
        c.victims
            .iter()
            .map(|v| v.priority() as i64 + i32::MAX as i64 + 1)
            .sum()
    };
    // The earliest start among the victims of the highest priority: later is better.
    let earliest = |c: &Candidate| {
        let top = highest(c);
        c.victims
            .iter()
            .filter(|v| v.priority() == top)
            .map(Victim::start)
            .min()
            .unwrap_or(i64::MAX)
    };
    candidates.sort_by(|a, b| {
        a.pdb_violations
            .cmp(&b.pdb_violations)
            .then_with(|| highest(a).cmp(&highest(b)))
            .then_with(|| sum(a).cmp(&sum(b)))
            .then_with(|| a.victims.len().cmp(&b.victims.len()))
            .then_with(|| earliest(b).cmp(&earliest(a)))
    });
    candidates.into_iter().next()
}

/// Finds where `pod` can go by preempting: every node's lower-priority pods (`pods`, each
/// with its node) are tried.
pub fn find_candidate(
    state: &ClusterState,
    pod: &Pod,
    facts: &PodFacts,
    pods: Vec<(String, Victim)>,
    pdbs: &[PodDisruptionBudget],
) -> Option<Candidate> {
    let mine = priority_of(pod);
    let plan = AffinityPlan::build(pod, state);
    let mut per_node: std::collections::HashMap<String, Vec<Victim>> = Default::default();
    for (node, v) in pods {
        if v.priority() < mine {
            per_node.entry(node).or_default().push(v);
        }
    }
    let candidates: Vec<Candidate> = state
        .nodes()
        .iter()
        .filter_map(|info| {
            let lower = per_node.remove(info.name())?;
            victims_on_node(pod, facts, &plan, info, lower, pdbs)
        })
        .collect();
    pick(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machinery::informer::Packed;
    use crate::scheduler::cache::key_of;
    use crate::scheduler::filter::tests::{node, pod};
    use api::meta::{LabelSelector, Time};
    use api::object::Resource;
    use std::sync::Arc;

    fn prio(name: &str, cpu: &str, priority: i32, started: i64) -> Pod {
        let mut p = pod(name, cpu, "");
        p.metadata.namespace = Some("default".into());
        p.spec.priority = Some(priority);
        p.status.start_time = Some(Time(started));
        p
    }

    /// A state with the pods bound as given, and the (node, victim) list the scheduler
    /// would pass.
    fn setup(
        nodes: &[(&str, &str)],
        bound: &[(&str, Pod)],
    ) -> (ClusterState, Vec<(String, Victim)>) {
        let mut s = ClusterState::default();
        for (n, cpu) in nodes {
            s.upsert_node(Arc::new(node(n, cpu, "8Gi")));
        }
        let mut list = Vec::new();
        for (n, p) in bound {
            let key = key_of(&p.metadata);
            s.add_pod(
                key.clone(),
                p,
                Packed::pack(&p.clone().into_any()),
                n.to_string(),
                false,
            );
            list.push((
                n.to_string(),
                Victim {
                    key,
                    pod: p.clone(),
                    facts: PodFacts::of(p),
                },
            ));
        }
        (s, list)
    }

    fn names(c: &Candidate) -> Vec<&str> {
        c.victims
            .iter()
            .map(|v| v.pod.metadata.name.as_str())
            .collect()
    }

    #[test]
    fn fewest_and_least_important_victims() {
        // Node a: two 1-cpu low pods; node b: one 2-cpu pod of higher (but lower than the
        // preemptor's) priority. The 2-cpu preemptor needs 2 cpus freed either way: a
        // costs lower priorities.
        let (s, list) = setup(
            &[("a", "2"), ("b", "2")],
            &[
                ("a", prio("a1", "1", 10, 100)),
                ("a", prio("a2", "1", 10, 200)),
                ("b", prio("b1", "2", 50, 100)),
            ],
        );
        let high = prio("high", "2", 1000, 0);
        let c = find_candidate(&s, &high, &PodFacts::of(&high), list.clone(), &[]).unwrap();
        assert_eq!(c.node, "a");
        assert_eq!(names(&c), ["a1", "a2"]);

        // Only 1 cpu needed: on a, one victim suffices, and the later-started one (less
        // important) goes.
        let mid = prio("mid", "1", 1000, 0);
        let c = find_candidate(&s, &mid, &PodFacts::of(&mid), list.clone(), &[]).unwrap();
        assert_eq!(c.node, "a");
        assert_eq!(names(&c), ["a2"]);

        // No pod of lower priority: nothing to preempt.
        let low = prio("low", "2", 5, 0);
        assert!(find_candidate(&s, &low, &PodFacts::of(&low), list, &[]).is_none());
    }

    #[test]
    fn budgets_are_respected_where_possible() {
        let mut a1 = prio("a1", "2", 10, 100);
        a1.metadata.labels.insert("app".into(), "guarded".into());
        let (s, list) = setup(
            &[("a", "2"), ("b", "2")],
            &[("a", a1), ("b", prio("b1", "2", 20, 100))],
        );
        let mut pdb = PodDisruptionBudget::default();
        pdb.metadata.namespace = Some("default".into());
        pdb.spec.selector = Some(LabelSelector {
            match_labels: [("app".to_string(), "guarded".to_string())].into(),
            ..Default::default()
        });
        pdb.status.disruptions_allowed = 0;
        let high = prio("high", "2", 1000, 0);
        // Without the budget, a's victim has the lower priority; with it, b is chosen.
        let c = find_candidate(&s, &high, &PodFacts::of(&high), list.clone(), &[]).unwrap();
        assert_eq!((c.node.as_str(), c.pdb_violations), ("a", 0));
        let c = find_candidate(
            &s,
            &high,
            &PodFacts::of(&high),
            list.clone(),
            &[pdb.clone()],
        )
        .unwrap();
        assert_eq!((c.node.as_str(), c.pdb_violations), ("b", 0));
        // With only the guarded node left, it is preempted anyway, counted as a violation.
        let (s, list) = setup(&[("a", "2")], &[("a", list[0].1.pod.clone())]);
        let c = find_candidate(&s, &high, &PodFacts::of(&high), list, &[pdb]).unwrap();
        assert_eq!((c.node.as_str(), c.pdb_violations), ("a", 1));
    }

    #[test]
    fn eligibility() {
        let (s, _) = setup(&[("a", "2")], &[]);
        let mut p = prio("p", "1", 100, 0);
        assert!(eligible(&p, &s, |_| Vec::new()));
        p.spec.preemption_policy = Some("Never".into());
        assert!(!eligible(&p, &s, |_| Vec::new()));
        p.spec.preemption_policy = None;
        p.status.nominated_node_name = Some("a".into());
        let mut going = prio("v", "1", 1, 0);
        going.metadata.deletion_timestamp = Some(Time(5));
        assert!(!eligible(&p, &s, |_| vec![going.clone()]));
        assert!(eligible(&p, &s, |_| Vec::new()));
    }
}
