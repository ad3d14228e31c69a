//! The StatefulSet controller: pods with stable names (`<set>-<ordinal>`), hostnames and
//! subdomains (their DNS names through the headless Service), one claim per pod and claim
//! template (`<template>-<set>-<ordinal>`, kept when pods go unless the set's
//! persistentVolumeClaimRetentionPolicy says Delete), OrderedReady or
//! Parallel pod management, and RollingUpdate (from the highest ordinal down to the
//! partition, one pod at a time) or OnDelete updates.
//!
//! A revision is named `<set>-<hash of the template>`, labels each pod
//! (`controller-revision-hash`) and is kept as a ControllerRevision holding the template as
//! the strategic merge patch `kubectl rollout undo` applies (`{"spec":{"template":{...,
//! "$patch":"replace"}}}`), numbered as Kubernetes numbers them (a template that comes back
//! takes the next number), at most `revisionHistoryLimit` old ones kept. A pod re-created
//! below the partition gets the update revision (Kubernetes would re-create it from the
//! current revision's template).

use std::collections::BTreeMap;

use api::apps::{
    with_claim_volumes, ControllerRevision, StatefulSet, StatefulSetStatus,
    CONTROLLER_REVISION_HASH_LABEL, POD_INDEX_LABEL, STATEFULSET_POD_NAME_LABEL,
};
use api::core::Pod;
use api::meta::{DeleteOptions, Preconditions, Time};
use api::object::Resource;
use api::storage::PersistentVolumeClaim;
use api::Kind;

use super::workload;
use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

pub fn start(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), "statefulset-controller");
    let queue = fed_queue::<StatefulSet, _>(
        ctx,
        &[Kind::StatefulSet, Kind::Pod, Kind::ControllerRevision],
        keys_for,
    );
    let ctx = ctx.clone();
    spawn_workers(
        "statefulset",
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

fn keys_for(ctx: &Context, change: &Change) -> Vec<Key> {
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<StatefulSet>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(set) = StatefulSet::from_any_ref(obj) {
        return vec![key_of(set)];
    }
    let mut keys = Vec::new();
    if let Some(r) = ControllerRevision::from_any_ref(obj) {
        if let Some(o) = r
            .metadata
            .controller_ref()
            .filter(|o| o.kind == "StatefulSet")
        {
            keys.push((r.metadata.namespace().to_string(), o.name.clone()));
        }
    }
    if let Some(pod) = Pod::from_any_ref(obj) {
        let old = change.old_meta();
        for meta in std::iter::once(&pod.metadata).chain(old.as_ref()) {
            if let Some(r) = meta.controller_ref().filter(|r| r.kind == "StatefulSet") {
                keys.push((meta.namespace().to_string(), r.name.clone()));
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The ordinal of a set's pod, from its name.
pub fn ordinal(set: &str, pod: &str) -> Option<i32> {
    let n = pod.strip_prefix(set)?.strip_prefix('-')?;
    if n.is_empty() || (n.len() > 1 && n.starts_with('0')) || !n.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    n.parse().ok()
}

/// The revision the template makes: `<set>-<hash>`.
pub fn update_revision(set: &StatefulSet) -> String {
    format!(
        "{}-{}",
        set.metadata.name,
        workload::template_hash(&set.spec.template, set.status.collision_count)
    )
}

/// The claim of `template` for the pod of `ordinal`.
pub fn claim_name(template: &str, set: &str, ordinal: i32) -> String {
    format!("{template}-{set}-{ordinal}")
}

/// The pod of `ordinal` at the set's update revision.
pub fn new_pod(set: &StatefulSet, ordinal: i32) -> Pod {
    let name = format!("{}-{ordinal}", set.metadata.name);
    let template = with_claim_volumes(&set.spec.template, &set.spec.volume_claim_templates, |c| {
        claim_name(&c.metadata.name, &set.metadata.name, ordinal)
    });
    let mut pod = workload::pod_from_template(
        &template,
        set.metadata.namespace(),
        "",
        workload::controller_ref(set),
    );
    pod.metadata.generate_name = None;
    pod.metadata.name = name.clone();
    let labels = &mut pod.metadata.labels;
    labels.insert(STATEFULSET_POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(CONTROLLER_REVISION_HASH_LABEL.into(), update_revision(set));
    pod.spec.hostname = Some(name);
    if let Some(svc) = set.spec.service_name.as_deref().filter(|s| !s.is_empty()) {
        pod.spec.subdomain = Some(svc.to_string());
    }
    pod
}

/// The claims of the pod of `ordinal`, from the set's templates.
pub fn new_claims(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let delete_with_set = set
        .spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    set.spec
        .volume_claim_templates
        .iter()
        .map(|t| {
            let mut c = t.clone();
            c.metadata = Default::default();
            c.status = Default::default();
            c.metadata.name = claim_name(&t.metadata.name, &set.metadata.name, ordinal);
            c.metadata.namespace = Some(set.metadata.namespace().to_string());
            c.metadata.labels = t.metadata.labels.clone();
            c.metadata.annotations = t.metadata.annotations.clone();
            if let Some(sel) = &set.spec.selector {
                c.metadata.labels.extend(sel.match_labels.clone());
            }
            if delete_with_set {
                c.metadata.owner_references = vec![workload::controller_ref(set)];
            }
            c
        })
        .collect()
}

fn running_and_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.phase.as_deref() == Some("Running")
        && workload::pod_ready(p)
}

fn finished(p: &Pod) -> bool {
    matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

fn revision_of(p: &Pod) -> &str {
    p.metadata
        .labels
        .get(CONTROLLER_REVISION_HASH_LABEL)
        .map(String::as_str)
        .unwrap_or("")
}

/// What one pass does to a set.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Ordinals whose pods (and missing claims) to create.
    pub create: Vec<i32>,
    /// Pods to delete (finished, condemned or out of date), by name.
    pub delete: Vec<String>,
    pub status: StatefulSetStatus,
}

/// The most pods one Parallel pass creates (the ReplicaSet controller's burst).
const BURST: usize = 500;

/// The StatefulSet controller's decision for `set` and its pods (by ordinal).
pub fn plan(set: &StatefulSet, pods: &BTreeMap<i32, Pod>, now: Time) -> Plan {
    let mut plan = Plan::default();
    let replicas = set.spec.replicas.unwrap_or(1).max(0);
    let ordered = set.spec.pod_management_policy.as_deref() != Some("Parallel");
    let update_rev = update_revision(set);
    let current_rev = set
        .status
        .current_revision
        .clone()
        .unwrap_or_else(|| update_rev.clone());

    // Status from what exists now.
    let mut st = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        current_revision: Some(current_rev.clone()),
        update_revision: Some(update_rev.clone()),
        collision_count: set.status.collision_count,
        conditions: set.status.conditions.clone(),
        ..Default::default()
    };
    let min_ready = set.spec.min_ready_seconds.unwrap_or(0);
    for p in pods.values() {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        st.replicas += 1;
        if workload::pod_ready(p) {
            st.ready_replicas += 1;
        }
        if workload::pod_available(p, min_ready, now) {
            st.available_replicas += 1;
        }
        if revision_of(p) == current_rev {
            st.current_replicas += 1;
        }
        if revision_of(p) == update_rev {
            st.updated_replicas += 1;
        }
    }
    let rolling = set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        != Some("OnDelete");
    if rolling
        && st.updated_replicas == replicas
        && st.replicas == replicas
        && st.ready_replicas == replicas
    {
        st.current_revision = Some(update_rev.clone());
        st.current_replicas = st.updated_replicas;
    }
    plan.status = st;

    // Replicas: finished pods are replaced; missing ones are created, in order and one at a
    // time unless Parallel, then BURST at a time (replicas is any int32: a plan of 2^31
    // ordinals was 8 GiB).
    for ord in 0..replicas {
        match pods.get(&ord) {
            None => {
                plan.create.push(ord);
                if ordered || plan.create.len() >= BURST {
                    return plan;
                }
            }
            Some(p) if finished(p) && p.metadata.deletion_timestamp.is_none() => {
                plan.delete.push(p.metadata.name.clone());
                if ordered {
                    return plan;
                }
            }
            Some(p) if ordered && !running_and_ready(p) => return plan,
            Some(_) => {}
        }
    }
    // Condemned pods (scale-down): from the highest ordinal, one at a time unless Parallel.
    let condemned: Vec<&Pod> = pods.range(replicas..).rev().map(|(_, p)| p).collect();
    for p in &condemned {
        if p.metadata.deletion_timestamp.is_some() {
            if ordered {
                return plan;
            }
            continue;
        }
        plan.delete.push(p.metadata.name.clone());
        if ordered {
            return plan;
        }
    }
    if !condemned.is_empty() {
        return plan;
    }
    // Rolling update: once every pod is running and ready, the highest out-of-date one at or
    // above the partition goes (and comes back at the update revision).
    if !rolling {
        return plan;
    }
    let all_ready = (0..replicas).all(|o| pods.get(&o).is_some_and(running_and_ready));
    if !all_ready {
        return plan;
    }
    let partition = set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    if let Some(p) = (partition..replicas)
        .rev()
        .filter_map(|o| pods.get(&o))
        .find(|p| revision_of(p) != update_rev)
    {
        plan.delete.push(p.metadata.name.clone());
    }
    plan
}

async fn sync(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let cache = ctx.informers.cache();
    let Some(set) = cache.get::<StatefulSet>(ns, name) else {
        return Ok(());
    };
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let uid = set.metadata.uid.clone();
    let pods: BTreeMap<i32, Pod> = cache
        .list::<Pod>(Some(ns))
        .into_iter()
        .filter(|p| workload::controller_uid(&p.metadata) == Some(uid.as_str()))
        .filter_map(|p| Some((ordinal(name, &p.metadata.name)?, p)))
        .collect();
    sync_revisions(ctx, &set, &pods, s).await?;
    let plan = plan(&set, &pods, Time::now());
    let mut result = Ok(());
    for ord in &plan.create {
        for claim in new_claims(&set, *ord) {
            if cache
                .get::<PersistentVolumeClaim>(ns, &claim.metadata.name)
                .is_some()
            {
                continue;
            }
            let claim_name = claim.metadata.name.clone();
            match ctx.registry.create(claim, None).await {
                Ok(c) => {
                    s.wrote(&c);
                    rec.normal(
                        &set,
                        "SuccessfulCreate",
                        format!("create Claim {claim_name} Pod {name}-{ord} in StatefulSet {name} success"),
                    );
                }
                Err(e) if e.code() == 409 => {}
                Err(e) => {
                    rec.warning(
                        &set,
                        "FailedCreate",
                        format!("create Claim {claim_name} for Pod {name}-{ord} in StatefulSet {name} failed error: {e}"),
                    );
                    return Err(e);
                }
            }
        }
        let pod = new_pod(&set, *ord);
        let pod_name = pod.metadata.name.clone();
        match ctx.registry.create(pod, None).await {
            Ok(p) => {
                s.wrote(&p);
                rec.normal(
                    &set,
                    "SuccessfulCreate",
                    format!("create Pod {pod_name} in StatefulSet {name} successful"),
                );
            }
            Err(e) if e.code() == 409 => {}
            Err(e) => {
                rec.warning(
                    &set,
                    "FailedCreate",
                    format!("create Pod {pod_name} in StatefulSet {name} failed error: {e}"),
                );
                result = Err(e);
            }
        }
    }
    for pod_name in &plan.delete {
        let Some(p) = pods.values().find(|p| &p.metadata.name == pod_name) else {
            continue;
        };
        let opts = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(p.metadata.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match ignore_not_found(ctx.registry.delete::<Pod>(ns, pod_name, opts).await) {
            Ok(Some((d, _))) => {
                s.wrote(&d);
                rec.normal(
                    &set,
                    "SuccessfulDelete",
                    format!("delete Pod {pod_name} in StatefulSet {name} successful"),
                );
                if let Err(e) = delete_scaled_claims(ctx, &set, pod_name, s).await {
                    result = Err(e);
                }
            }
            Ok(None) => {}
            Err(e) => {
                rec.warning(
                    &set,
                    "FailedDelete",
                    format!("delete Pod {pod_name} in StatefulSet {name} failed error: {e}"),
                );
                result = Err(e);
            }
        }
    }
    if plan.status != set.status {
        let status = plan.status;
        let r = ctx
            .registry
            .mutate::<StatefulSet>(ns, name, Part::Status, move |set| {
                if set.metadata.uid == uid {
                    set.status = status.clone();
                }
                Ok(())
            })
            .await;
        if let Some(set) = ignore_not_found(r)? {
            s.wrote(&set);
        }
    }
    result
}

/// whenScaled: Delete: the claims of a pod removed by a scale-down go with it (pvc-protection
/// keeps them until the pod is gone).
async fn delete_scaled_claims(
    ctx: &Context,
    set: &StatefulSet,
    pod_name: &str,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let delete = set
        .spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_scaled.as_deref())
        == Some("Delete");
    let Some(ord) = ordinal(&set.metadata.name, pod_name) else {
        return Ok(());
    };
    if !delete || ord < set.spec.replicas.unwrap_or(1) {
        return Ok(());
    }
    for claim in new_claims(set, ord) {
        let r = ctx
            .registry
            .delete::<PersistentVolumeClaim>(
                set.metadata.namespace(),
                &claim.metadata.name,
                DeleteOptions::default(),
            )
            .await;
        if let Some((c, _)) = ignore_not_found(r)? {
            s.wrote(&c);
        }
    }
    Ok(())
}

/// The revision data of `set`'s template: the patch that restores it.
pub fn revision_data(set: &StatefulSet) -> api::meta::Opaque {
    let mut template = serde_json::to_value(&set.spec.template).unwrap_or_default();
    prune_nulls(&mut template);
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), "replace".into());
    }
    let data = serde_json::json!({"spec": {"template": template}});
    api::meta::Opaque::from(&data)
}

fn prune_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(prune_nulls);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

/// What to do to a set's ControllerRevisions: create the update revision (with this number),
/// renumber it (a template that came back), and delete old ones beyond the history limit.
#[derive(Debug, Default, PartialEq)]
pub struct RevisionPlan {
    pub create: Option<i64>,
    pub renumber: Option<i64>,
    pub delete: Vec<String>,
}

/// `revisions` are the set's own; `in_use` the revisions its pods and status name.
pub fn plan_revisions(
    set: &StatefulSet,
    revisions: &[ControllerRevision],
    in_use: &[String],
) -> RevisionPlan {
    let mut out = RevisionPlan::default();
    let update = update_revision(set);
    let max = revisions.iter().map(|r| r.revision).max().unwrap_or(0);
    // ControllerRevisions are anyone's to write, revision i64::MAX included.
    let next = max.saturating_add(1);
    match revisions.iter().find(|r| r.metadata.name == update) {
        None => out.create = Some(next),
        Some(r) if r.revision < max => out.renumber = Some(next),
        Some(_) => {}
    }
    let limit = set.spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let mut old: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| r.metadata.name != update && !in_use.contains(&r.metadata.name))
        .collect();
    old.sort_by_key(|r| r.revision);
    if old.len() > limit {
        out.delete = old[..old.len() - limit]
            .iter()
            .map(|r| r.metadata.name.clone())
            .collect();
    }
    out
}

async fn sync_revisions(
    ctx: &Context,
    set: &StatefulSet,
    pods: &BTreeMap<i32, Pod>,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let ns = set.metadata.namespace();
    let uid = set.metadata.uid.as_str();
    let revisions: Vec<ControllerRevision> = ctx
        .informers
        .cache()
        .list::<ControllerRevision>(Some(ns))
        .into_iter()
        .filter(|r| workload::controller_uid(&r.metadata) == Some(uid))
        .collect();
    let mut in_use: Vec<String> = pods.values().map(|p| revision_of(p).to_string()).collect();
    in_use.extend(set.status.current_revision.clone());
    in_use.extend(set.status.update_revision.clone());
    let plan = plan_revisions(set, &revisions, &in_use);
    let update = update_revision(set);
    if let Some(number) = plan.create {
        let mut r = ControllerRevision::default();
        r.metadata.name = update.clone();
        r.metadata.namespace = Some(ns.to_string());
        r.metadata.labels = set.spec.template.metadata.labels.clone();
        r.metadata.labels.insert(
            CONTROLLER_REVISION_HASH_LABEL.into(),
            update
                .trim_start_matches(&format!("{}-", set.metadata.name))
                .to_string(),
        );
        r.metadata.owner_references = vec![workload::controller_ref(set)];
        r.data = revision_data(set);
        r.revision = number;
        match ctx.registry.create(r, None).await {
            Ok(r) => s.wrote(&r),
            Err(e) if e.code() == 409 => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(number) = plan.renumber {
        let r = ctx
            .registry
            .mutate::<ControllerRevision>(ns, &update, Part::Main, move |r| {
                r.revision = number;
                Ok(())
            })
            .await;
        if let Some(r) = ignore_not_found(r)? {
            s.wrote(&r);
        }
    }
    for name in plan.delete {
        let r = ctx
            .registry
            .delete::<ControllerRevision>(ns, &name, DeleteOptions::default())
            .await;
        if let Some((r, _)) = ignore_not_found(r)? {
            s.wrote(&r);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::apps::{RollingUpdateStatefulSetStrategy, StatefulSetUpdateStrategy};
    use api::core::{Container, PodCondition};
    use api::meta::{LabelSelector, Quantity};

    fn set(replicas: i32, policy: &str) -> StatefulSet {
        let mut s = StatefulSet::default();
        s.metadata.name = "web".into();
        s.metadata.namespace = Some("default".into());
        s.metadata.uid = "set-uid".into();
        s.metadata.generation = Some(1);
        s.spec.replicas = Some(replicas);
        s.spec.service_name = Some("web".into());
        s.spec.pod_management_policy = Some(policy.into());
        s.spec.selector = Some(LabelSelector {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        });
        s.spec.template.metadata.labels = [("app".to_string(), "web".to_string())].into();
        s.spec.template.spec.containers = vec![Container {
            name: "main".into(),
            image: Some("busybox".into()),
            ..Default::default()
        }];
        let mut claim = PersistentVolumeClaim::default();
        claim.metadata.name = "www".into();
        claim.spec.access_modes = vec!["ReadWriteOnce".into()];
        claim
            .spec
            .resources
            .requests
            .insert("storage".into(), Quantity("1Gi".into()));
        s.spec.volume_claim_templates = vec![claim];
        s.set_defaults();
        s
    }

    fn ready(set: &StatefulSet, ord: i32) -> Pod {
        let mut p = new_pod(set, ord);
        p.metadata.uid = format!("pod-{ord}");
        p.status.phase = Some("Running".into());
        p.status.conditions = vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }];
        p
    }

    fn pods(list: Vec<Pod>) -> BTreeMap<i32, Pod> {
        list.into_iter()
            .map(|p| (ordinal("web", &p.metadata.name).unwrap(), p))
            .collect()
    }

    #[test]
    fn names_labels_claims_and_dns() {
        assert_eq!(ordinal("web", "web-12"), Some(12));
        assert_eq!(ordinal("web", "web-x"), None);
        assert_eq!(ordinal("web", "web-01"), None);
        assert_eq!(ordinal("web", "webby-1"), None);
        let s = set(3, "OrderedReady");
        let p = new_pod(&s, 1);
        assert_eq!(p.metadata.name, "web-1");
        assert_eq!(p.spec.hostname.as_deref(), Some("web-1"));
        assert_eq!(p.spec.subdomain.as_deref(), Some("web"));
        assert_eq!(p.metadata.labels[STATEFULSET_POD_NAME_LABEL], "web-1");
        assert_eq!(p.metadata.labels[POD_INDEX_LABEL], "1");
        assert_eq!(
            p.metadata.labels[CONTROLLER_REVISION_HASH_LABEL],
            update_revision(&s)
        );
        assert!(update_revision(&s).starts_with("web-"));
        let v = p.spec.volumes.iter().find(|v| v.name == "www").unwrap();
        assert_eq!(
            v.persistent_volume_claim.as_ref().unwrap().claim_name,
            "www-web-1"
        );
        let claims = new_claims(&s, 1);
        assert_eq!(claims[0].metadata.name, "www-web-1");
        assert_eq!(claims[0].metadata.labels["app"], "web");
        assert!(
            claims[0].metadata.owner_references.is_empty(),
            "Retain by default"
        );
    }

    #[test]
    fn ordered_ready_creates_one_at_a_time_and_parallel_all() {
        let s = set(3, "OrderedReady");
        assert_eq!(plan(&s, &pods(vec![]), Time::now()).create, [0]);
        let mut starting = ready(&s, 0);
        starting.status.conditions.clear();
        assert!(plan(&s, &pods(vec![starting]), Time::now())
            .create
            .is_empty());
        assert_eq!(plan(&s, &pods(vec![ready(&s, 0)]), Time::now()).create, [1]);
        let p = set(3, "Parallel");
        assert_eq!(plan(&p, &pods(vec![]), Time::now()).create, [0, 1, 2]);
    }

    /// The largest replicas and revisions: a burst of pods per pass, and the next revision
    /// saturates.
    #[test]
    fn the_largest_replicas_and_revisions() {
        let p = set(i32::MAX, "Parallel");
        assert_eq!(plan(&p, &pods(vec![]), Time::now()).create.len(), BURST);
        let s = set(i32::MAX, "OrderedReady");
        assert_eq!(plan(&s, &pods(vec![]), Time::now()).create, [0]);
        let mut top = ControllerRevision::default();
        top.metadata.name = "web-old".into();
        top.revision = i64::MAX;
        let out = plan_revisions(&s, &[top], &[]);
        assert_eq!(out.create, Some(i64::MAX));
    }

    #[test]
    fn scale_down_from_the_highest_ordinal() {
        let s = set(1, "OrderedReady");
        let all = pods(vec![ready(&s, 0), ready(&s, 1), ready(&s, 2)]);
        let p = plan(&s, &all, Time::now());
        assert_eq!(p.delete, ["web-2"]);
        assert_eq!(p.status.replicas, 3);
        let par = set(1, "Parallel");
        assert_eq!(plan(&par, &all, Time::now()).delete, ["web-2", "web-1"]);
    }

    #[test]
    fn rolling_update_respects_the_partition_and_on_delete_waits() {
        let old = set(3, "OrderedReady");
        let all = pods(vec![ready(&old, 0), ready(&old, 1), ready(&old, 2)]);
        let mut s = old.clone();
        s.status.current_revision = Some(update_revision(&old));
        s.spec.template.spec.containers[0].image = Some("busybox:2".into());
        let p = plan(&s, &all, Time::now());
        assert_eq!(p.delete, ["web-2"]);
        assert_eq!(p.status.current_revision, Some(update_revision(&old)));
        assert_eq!(p.status.update_revision, Some(update_revision(&s)));
        assert_eq!(
            (p.status.current_replicas, p.status.updated_replicas),
            (3, 0)
        );

        let mut partitioned = s.clone();
        partitioned.spec.update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(2),
                max_unavailable: None,
            }),
        });
        let mut updated = all.clone();
        updated.insert(2, ready(&s, 2));
        assert!(plan(&partitioned, &updated, Time::now()).delete.is_empty());
        // Without the partition, web-1 is next.
        assert_eq!(plan(&s, &updated, Time::now()).delete, ["web-1"]);
        // All at the new revision: it becomes current.
        let done = pods(vec![ready(&s, 0), ready(&s, 1), ready(&s, 2)]);
        let p = plan(&s, &done, Time::now());
        assert_eq!(p.status.current_revision, Some(update_revision(&s)));
        assert_eq!(p.status.current_replicas, 3);

        let mut on_delete = s.clone();
        on_delete.spec.update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        });
        assert!(plan(&on_delete, &all, Time::now()).delete.is_empty());
    }

    fn revision(set: &StatefulSet, number: i64) -> ControllerRevision {
        let mut r = ControllerRevision::default();
        r.metadata.name = update_revision(set);
        r.revision = number;
        r
    }

    #[test]
    fn revisions_are_numbered_renumbered_and_pruned() {
        let mut s = set(1, "OrderedReady");
        assert_eq!(plan_revisions(&s, &[], &[]).create, Some(1));
        let first = revision(&s, 1);
        assert_eq!(
            plan_revisions(&s, std::slice::from_ref(&first), &[]),
            RevisionPlan::default()
        );
        let mut second_set = s.clone();
        second_set.spec.template.spec.containers[0].image = Some("busybox:2".into());
        let second = revision(&second_set, 2);
        // Back to the first template (rollout undo): it takes the next number.
        let p = plan_revisions(&s, &[first.clone(), second.clone()], &[]);
        assert_eq!((p.create, p.renumber), (None, Some(3)));
        // The history limit drops the oldest unused revisions.
        s.spec.revision_history_limit = Some(0);
        let p = plan_revisions(&s, &[first.clone(), second.clone()], &[]);
        assert_eq!(p.delete, std::slice::from_ref(&second.metadata.name));
        let p = plan_revisions(
            &s,
            &[first, second.clone()],
            std::slice::from_ref(&second.metadata.name),
        );
        assert!(p.delete.is_empty());
        // The data is the patch kubectl rollout undo applies.
        let data = serde_json::Value::from(&revision_data(&second_set));
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            data["spec"]["template"]["spec"]["containers"][0]["image"],
            "busybox:2"
        );
        assert!(data.to_string().find("null").is_none(), "{data}");
    }

    #[test]
    fn finished_pods_are_replaced() {
        let s = set(2, "OrderedReady");
        let mut failed = ready(&s, 0);
        failed.status.phase = Some("Failed".into());
        let p = plan(&s, &pods(vec![failed, ready(&s, 1)]), Time::now());
        assert_eq!(p.delete, ["web-0"]);
    }
}
