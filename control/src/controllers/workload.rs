//! Pure helpers the workload controllers share: pod state, owner references, selectors,
//! template hashes, the order in which surplus pods go, and rolling-update arithmetic.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use api::core::{Pod, PodTemplateSpec};
use api::meta::{IntOrString, LabelSelector, ObjectMeta, OwnerReference, Time};
use api::object::Resource;
use api::selector::Selector;

/// The label a Deployment puts on its ReplicaSets and their pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The label a DaemonSet puts on its pods (Kubernetes names a ControllerRevision with it).
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// The revision of a Deployment and of each of its ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Whether the pod reports the Ready condition as True.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .condition("Ready")
        .is_some_and(|c| c.status == "True")
}

/// Whether the pod has been ready for at least `min_ready_seconds` at `now`.
pub fn pod_available(p: &Pod, min_ready_seconds: i32, now: Time) -> bool {
    available_in(p, min_ready_seconds, now) == Some(0)
}

/// Seconds until a ready pod counts as available (0: it does); None if it is not ready.
pub fn available_in(p: &Pod, min_ready_seconds: i32, now: Time) -> Option<i64> {
    if !pod_ready(p) {
        return None;
    }
    if min_ready_seconds <= 0 {
        return Some(0);
    }
    let since = p
        .status
        .condition("Ready")
        .and_then(|c| c.last_transition_time)
        .unwrap_or(now);
    Some(
        since
            .0
            .saturating_add(i64::from(min_ready_seconds))
            .saturating_sub(now.0)
            .max(0),
    )
}

/// A pod that counts towards a controller's replicas: not terminating, not finished.
pub fn pod_active(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !matches!(
            p.status.phase.as_deref(),
            Some("Succeeded") | Some("Failed")
        )
}

/// The node a pod is bound to, or for an unbound DaemonSet pod the node its required
/// `metadata.name` affinity names.
pub fn target_node(p: &Pod) -> Option<&str> {
    if let Some(n) = p.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    let terms = &p
        .spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields
            .iter()
            .find(|r| r.key == "metadata.name" && r.operator == "In" && r.values.len() == 1)
            .map(|r| r.values[0].as_str())
    })
}

/// A controller owner reference to `owner` (blocks the owner's foreground deletion).
pub fn controller_ref<K: Resource>(owner: &K) -> OwnerReference {
    let info = K::KIND.info();
    OwnerReference {
        api_version: info.api_version(),
        kind: info.kind.to_string(),
        name: owner.meta().name.clone(),
        uid: owner.meta().uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The uid of the object's controller, if it has one.
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.controller_ref().map(|r| r.uid.as_str())
}

/// A workload's selector; None (matches nothing) when it is missing, empty or malformed, as
/// Kubernetes' controllers refuse to act on such a selector.
pub fn selector(ls: Option<&LabelSelector>) -> Option<Selector> {
    let ls = ls?;
    if ls.match_labels.is_empty() && ls.match_expressions.is_empty() {
        return None;
    }
    Selector::from_label_selector(ls).ok()
}

/// What a controller does about one candidate object when it claims what it selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Already ours and still selected.
    Owned,
    /// An orphan the selector matches: set our controller reference.
    Adopt,
    /// Ours but no longer selected: remove our controller reference.
    Release,
    /// Not ours.
    Ignore,
}

/// Kubernetes' ControllerRefManager decision for one object.
pub fn claim(
    owner_uid: &str,
    owner_deleting: bool,
    selector: &Selector,
    meta: &ObjectMeta,
) -> Claim {
    let matches = selector.matches(&meta.labels);
    match controller_uid(meta) {
        Some(uid) if uid == owner_uid => {
            if matches {
                Claim::Owned
            } else {
                Claim::Release
            }
        }
        Some(_) => Claim::Ignore,
        None if matches && !owner_deleting && meta.deletion_timestamp.is_none() => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// Writes an owner's claims on objects of kind `K` in `ns`: drops its ownerReference from
/// `release`, and adopts `adopt` (re-checked inside the write: still an orphan, alive, and
/// matched by `selector`; without a selector nothing is adopted). Answers the adopted objects
/// the owner now controls.
pub async fn write_claims<K: Resource, O: Resource>(
    registry: &crate::registry::Registry,
    ns: &str,
    owner: &O,
    selector: Option<&Selector>,
    adopt: Vec<String>,
    release: Vec<String>,
    s: &mut crate::machinery::runner::Synced,
) -> Result<Vec<K>, crate::error::ApiError> {
    use crate::machinery::runner::ignore_not_found;
    use crate::registry::Part;
    let uid = owner.meta().uid.clone();
    for name in release {
        let uid = uid.clone();
        let r = registry
            .mutate::<K>(ns, &name, Part::Main, move |o| {
                o.meta_mut().owner_references.retain(|r| r.uid != uid);
                Ok(())
            })
            .await;
        if let Some(o) = ignore_not_found(r)? {
            s.wrote(&o);
        }
    }
    let mut adopted = Vec::new();
    let Some(selector) = selector else {
        return Ok(adopted);
    };
    for name in adopt {
        let (reference, sel) = (controller_ref(owner), selector.clone());
        let r = registry
            .mutate::<K>(ns, &name, Part::Main, move |o| {
                let m = o.meta_mut();
                if m.controller_ref().is_none()
                    && m.deletion_timestamp.is_none()
                    && sel.matches(&m.labels)
                {
                    m.owner_references.push(reference.clone());
                }
                Ok(())
            })
            .await;
        if let Some(o) = ignore_not_found(r)? {
            s.wrote(&o);
            if controller_uid(o.meta()) == Some(uid.as_str()) {
                adopted.push(o);
            }
        }
    }
    Ok(adopted)
}

/// A new pod from a template, owned by `owner`.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    generate_name: &str,
    owner: OwnerReference,
) -> Pod {
    let mut pod = Pod {
        spec: template.spec.clone(),
        ..Default::default()
    };
    let m = &mut pod.metadata;
    m.generate_name = Some(generate_name.to_string());
    m.namespace = Some(namespace.to_string());
    m.labels = template.metadata.labels.clone();
    m.annotations = template.metadata.annotations.clone();
    m.finalizers = template.metadata.finalizers.clone();
    m.owner_references = vec![owner];
    pod
}

/// `name-` for generateName, shortened as Kubernetes does so generated names stay valid.
pub fn generate_name_prefix(name: &str) -> String {
    let base: String = name.chars().take(58).collect();
    format!("{base}-")
}

const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A short, label-safe hash of a pod template (plus a collision count), like Kubernetes'
/// `ComputeHash`: FNV-1a over the template's encoding, the decimal digits mapped to
/// consonants and digits that never spell words.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(&api::object::fingerprint(template));
    if let Some(c) = collision_count {
        feed(&c.to_le_bytes());
    }
    h.to_string()
        .bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// Whether two templates are equal apart from the pod-template-hash label.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        t.metadata.labels.remove(POD_TEMPLATE_HASH);
        t
    };
    strip(a) == strip(b)
}

/// `labels` plus one more.
pub fn with_label(
    labels: &BTreeMap<String, String>,
    key: &str,
    value: &str,
) -> BTreeMap<String, String> {
    let mut l = labels.clone();
    l.insert(key.to_string(), value.to_string());
    l
}

/// The revision annotation of an object (0 when absent or malformed).
pub fn revision_of(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn phase_rank(p: &Pod) -> u8 {
    match p.status.phase.as_deref() {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .container_statuses
        .iter()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

/// Kubernetes' `ActivePods` ordering: `Less` means `a` is deleted before `b`. Unassigned
/// before assigned, pending before unknown before running, not ready before ready, ready
/// for less time before longer, more restarts before fewer, newer before older.
pub fn deletion_cmp(a: &Pod, b: &Pod) -> Ordering {
    let assigned = |p: &Pod| p.spec.node_name.as_deref().is_some_and(|n| !n.is_empty());
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| pod_ready(a).cmp(&pod_ready(b)))
        .then_with(|| {
            if pod_ready(a) && pod_ready(b) {
                let since = |p: &Pod| {
                    p.status
                        .condition("Ready")
                        .and_then(|c| c.last_transition_time)
                        .unwrap_or_default()
                };
                // Later transition = ready for less time = goes first.
                since(b).cmp(&since(a))
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            b.metadata
                .creation_timestamp
                .cmp(&a.metadata.creation_timestamp)
        })
        .then_with(|| b.metadata.name.cmp(&a.metadata.name))
}

/// The `n` pods to delete first.
pub fn pods_to_delete(pods: &[Pod], n: usize) -> Vec<&Pod> {
    let mut sorted: Vec<&Pod> = pods.iter().collect();
    sorted.sort_by(|a, b| deletion_cmp(a, b));
    sorted.truncate(n);
    sorted
}

/// maxSurge and maxUnavailable resolved against `replicas`: surge rounds up, unavailable
/// rounds down, and both zero becomes unavailable 1 (a rollout must move).
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Result<(i32, i32), String> {
    let surge = max_surge
        .map(|s| s.scaled_value(replicas, true))
        .transpose()?
        .unwrap_or(0)
        .max(0);
    let unavailable = max_unavailable
        .map(|s| s.scaled_value(replicas, false))
        .transpose()?
        .unwrap_or(0)
        .max(0);
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

/// How many replicas the new ReplicaSet of a rolling update may have now: up to the surge
/// limit over all ReplicaSets' replicas, never more than desired.
pub fn new_rs_replicas(desired: i32, max_surge: i32, total_current: i32, new_current: i32) -> i32 {
    if new_current >= desired {
        return desired;
    }
    // Replicas are any int32 (and maxSurge any, or a percentage of them): Kubernetes' int32
    // arithmetic wraps; here it saturates.
    let max_total = desired.saturating_add(max_surge);
    if total_current >= max_total {
        return new_current;
    }
    let scale_up = max_total
        .saturating_sub(total_current)
        .min(desired.saturating_sub(new_current));
    new_current.saturating_add(scale_up)
}

/// How many old replicas a rolling update may remove now (Kubernetes'
/// `reconcileOldReplicaSets`, first bound): everything above minimum availability, counting
/// the new ReplicaSet's unavailable pods as already missing.
pub fn max_scaled_down(
    desired: i32,
    max_unavailable: i32,
    all_replicas: i32,
    new_replicas: i32,
    new_available: i32,
) -> i32 {
    let min_available = desired.saturating_sub(max_unavailable);
    let new_unavailable = new_replicas.saturating_sub(new_available).max(0);
    all_replicas
        .saturating_sub(min_available)
        .saturating_sub(new_unavailable)
        .max(0)
}

/// The sum of replica counts (spec or status, any int32 their writers put there), saturating
/// where `Iterator::sum` overflowed.
pub fn sum_replicas(counts: impl IntoIterator<Item = i32>) -> i32 {
    counts.into_iter().fold(0, i32::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{ContainerStatus, PodCondition};

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: Option<i64>, created: i64) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.creation_timestamp = Some(Time(created));
        p.spec.node_name = node.map(str::to_string);
        p.status.phase = Some(phase.into());
        if let Some(t) = ready {
            p.status.conditions.push(PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(t)),
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn surplus_pods_go_unassigned_pending_unready_newest_first() {
        let pods = vec![
            pod("old-ready", Some("n"), "Running", Some(10), 1),
            pod("unassigned", None, "Pending", None, 0),
            pod("pending", Some("n"), "Pending", None, 0),
            pod("running-unready", Some("n"), "Running", None, 0),
            pod("new-ready", Some("n"), "Running", Some(50), 2),
            pod("newest-ready-same-time", Some("n"), "Running", Some(10), 3),
        ];
        let order: Vec<&str> = pods_to_delete(&pods, 6)
            .iter()
            .map(|p| p.metadata.name.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "unassigned",
                "pending",
                "running-unready",
                "new-ready",
                "newest-ready-same-time",
                "old-ready"
            ]
        );
        assert_eq!(pods_to_delete(&pods, 2).len(), 2);

        let mut crashing = pod("crashing", Some("n"), "Running", Some(10), 1);
        crashing.status.container_statuses.push(ContainerStatus {
            restart_count: 4,
            ..Default::default()
        });
        let steady = pod("steady", Some("n"), "Running", Some(10), 1);
        assert_eq!(deletion_cmp(&crashing, &steady), Ordering::Less);
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 10),
            Ok((3, 2))
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 3),
            Ok((1, 0))
        );
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(0)), Some(&pct("10%")), 5),
            Ok((0, 1)),
            "both zero: one unavailable"
        );
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(2)), Some(&IntOrString::Int(1)), 4),
            Ok((2, 1))
        );
        assert!(resolve_fenceposts(Some(&pct("x%")), None, 4).is_err());
    }

    #[test]
    fn rolling_update_steps() {
        // 4 replicas, surge 1: the new RS grows by what the surge leaves.
        assert_eq!(new_rs_replicas(4, 1, 4, 0), 1);
        assert_eq!(new_rs_replicas(4, 1, 5, 1), 1, "at the limit: wait");
        assert_eq!(new_rs_replicas(4, 2, 4, 0), 2);
        assert_eq!(new_rs_replicas(4, 1, 4, 3), 4);
        assert_eq!(new_rs_replicas(4, 1, 6, 6), 4, "scaled down to desired");
        // 4 desired, unavailable 1, 5 total of which the new RS has 1 not yet available.
        assert_eq!(max_scaled_down(4, 1, 5, 1, 0), 1);
        assert_eq!(max_scaled_down(4, 0, 5, 1, 0), 0);
        assert_eq!(max_scaled_down(4, 0, 5, 1, 1), 1);
    }

    /// Replicas and maxSurge are any int32, counts come from statuses anyone allowed the
    /// status subresource writes: Kubernetes' int32 arithmetic wraps, here it saturates.
    #[test]
    fn rolling_update_steps_at_the_int32_limits() {
        let max = i32::MAX;
        assert_eq!(new_rs_replicas(max, max, 0, 0), max);
        assert_eq!(
            new_rs_replicas(max, 1, max, 0),
            0,
            "at the (saturated) limit"
        );
        assert_eq!(new_rs_replicas(max, max, max, max - 1), max - 1);
        assert_eq!(new_rs_replicas(max, max, max - 1, 0), 1);
        assert_eq!(new_rs_replicas(5, max, max, 0), 0);
        assert_eq!(max_scaled_down(max, 0, max, max, i32::MIN), 0);
        assert_eq!(max_scaled_down(0, max, max, 0, 0), max);
        assert_eq!(max_scaled_down(i32::MIN, max, max, i32::MIN, max), max);
        assert_eq!(sum_replicas([max, max, 1]), max);
        assert_eq!(sum_replicas([i32::MIN, -1]), i32::MIN);
        assert_eq!(sum_replicas([]), 0);
        let p = pod("p", Some("n"), "Running", Some(100), 0);
        assert_eq!(available_in(&p, max, Time(i64::MIN)), Some(i64::MAX));
        assert_eq!(available_in(&p, max, Time(i64::MAX)), Some(0));
    }

    #[test]
    fn template_hash_is_stable_and_label_safe() {
        let mut t = PodTemplateSpec::default();
        t.metadata.labels.insert("app".into(), "web".into());
        let a = template_hash(&t, None);
        assert_eq!(a, template_hash(&t, None));
        assert!(a.chars().all(|c| SAFE_ALPHABET.contains(&(c as u8))), "{a}");
        assert_ne!(a, template_hash(&t, Some(1)));
        let mut u = t.clone();
        u.metadata.labels.insert("v".into(), "2".into());
        assert_ne!(a, template_hash(&u, None));
        let hashed = PodTemplateSpec {
            metadata: ObjectMeta {
                labels: with_label(&t.metadata.labels, POD_TEMPLATE_HASH, &a),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(equal_ignore_hash(&t, &hashed));
        assert!(!equal_ignore_hash(&u, &hashed));
    }

    #[test]
    fn availability_waits_min_ready_seconds() {
        let p = pod("p", Some("n"), "Running", Some(100), 0);
        assert!(pod_available(&p, 0, Time(100)));
        assert!(!pod_available(&p, 10, Time(105)));
        assert_eq!(available_in(&p, 10, Time(105)), Some(5));
        assert!(pod_available(&p, 10, Time(110)));
        assert_eq!(
            available_in(&pod("q", None, "Pending", None, 0), 0, Time(1)),
            None
        );
    }

    #[test]
    fn claims_follow_selector_and_controller() {
        let sel = Selector::parse("app=web").unwrap();
        let mut m = ObjectMeta::default();
        m.labels.insert("app".into(), "web".into());
        assert_eq!(claim("u1", false, &sel, &m), Claim::Adopt);
        assert_eq!(claim("u1", true, &sel, &m), Claim::Ignore);
        m.owner_references.push(OwnerReference {
            uid: "u1".into(),
            controller: Some(true),
            ..Default::default()
        });
        assert_eq!(claim("u1", false, &sel, &m), Claim::Owned);
        assert_eq!(claim("u2", false, &sel, &m), Claim::Ignore);
        m.labels.insert("app".into(), "db".into());
        assert_eq!(claim("u1", false, &sel, &m), Claim::Release);
    }
}
