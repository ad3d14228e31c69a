//! ReplicaSet and ReplicationController controller: keeps `spec.replicas` active pods,
//! adopts matching orphans and releases pods whose labels no longer match, and reports
//! status. One loop serves both kinds through [`Replicated`], as Kubernetes runs its
//! ReplicaSet controller for ReplicationControllers too; they differ only in how the selector
//! is written (a LabelSelector, a plain label map) and in a status field.

use std::time::Duration;

use api::apps::ReplicaSet;
use api::core::{Pod, PodTemplateSpec};
use api::meta::{DeleteOptions, Time};
use api::object::Resource;
use api::replication::ReplicationController;
use api::selector::Selector;
use api::Kind;

use super::workload::{self, Claim};
use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

/// At most this many pods are created or deleted in one pass (Kubernetes' burstReplicas).
const BURST: usize = 500;

/// The status counts the controller reports, common to both kinds.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub replicas: i32,
    pub fully_labeled: i32,
    pub ready: i32,
    pub available: i32,
    /// Not reported by a ReplicationController (its status has no such field).
    pub terminating: i32,
}

/// A kind that keeps a number of identical pods: ReplicaSet or ReplicationController.
pub(crate) trait Replicated: Resource + Clone + PartialEq + Send + Sync + 'static {
    /// The worker's name and the component its events come from.
    const WORKER: &'static str;
    const COMPONENT: &'static str;
    fn replicas(&self) -> i32;
    fn min_ready_seconds(&self) -> i32;
    /// The pods it manages; None (matches nothing) when missing, empty or malformed.
    fn pod_selector(&self) -> Option<Selector>;
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// Writes `counts` and the observed generation into the status.
    fn set_counts(&mut self, counts: &Counts);
}

impl Replicated for ReplicaSet {
    const WORKER: &'static str = "replicaset";
    const COMPONENT: &'static str = "replicaset-controller";
    fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.min_ready_seconds.unwrap_or(0)
    }
    fn pod_selector(&self) -> Option<Selector> {
        workload::selector(self.spec.selector.as_ref())
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        Some(&self.spec.template)
    }
    fn set_counts(&mut self, c: &Counts) {
        let s = &mut self.status;
        s.replicas = c.replicas;
        s.fully_labeled_replicas = Some(c.fully_labeled);
        s.ready_replicas = Some(c.ready);
        s.available_replicas = Some(c.available);
        s.terminating_replicas = Some(c.terminating);
        s.observed_generation = self.metadata.generation;
    }
}

impl Replicated for ReplicationController {
    const WORKER: &'static str = "replicationcontroller";
    const COMPONENT: &'static str = "replication-controller";
    fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.min_ready_seconds.unwrap_or(0)
    }
    fn pod_selector(&self) -> Option<Selector> {
        if self.spec.selector.is_empty() {
            return None;
        }
        Selector::from_labels(&self.spec.selector).ok()
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.template.as_ref()
    }
    fn set_counts(&mut self, c: &Counts) {
        let s = &mut self.status;
        s.replicas = c.replicas;
        s.fully_labeled_replicas = Some(c.fully_labeled);
        s.ready_replicas = Some(c.ready);
        s.available_replicas = Some(c.available);
        s.observed_generation = self.metadata.generation;
    }
}

/// Starts the loops of both kinds.
pub fn start(ctx: &Context) {
    start_kind::<ReplicaSet>(ctx);
    start_kind::<ReplicationController>(ctx);
}

fn start_kind<K: Replicated>(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), K::COMPONENT);
    let queue = fed_queue::<K, _>(ctx, &[K::KIND, Kind::Pod], keys_for::<K>);
    let ctx = ctx.clone();
    spawn_workers(
        K::WORKER,
        ctx.informers.clone(),
        queue,
        2,
        move |key, mut s| {
            let (ctx, recorder) = (ctx.clone(), recorder.clone());
            async move {
                let r = sync::<K>(&ctx, &recorder, &key, &mut s).await;
                (s, r)
            }
        },
    );
}

/// The controllers of kind `K` a change concerns.
fn keys_for<K: Replicated>(ctx: &Context, change: &Change) -> Vec<Key> {
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<K>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(rs) = K::from_any_ref(obj) {
        return vec![key_of(rs)];
    }
    let mut keys = Vec::new();
    let Some(pod) = Pod::from_any_ref(obj) else {
        return keys;
    };
    // The pod's owner or selecting controllers, before and after the change: only the
    // metadata counts.
    let kind = K::KIND.info().kind;
    let old = change.old_meta();
    for meta in std::iter::once(&pod.metadata).chain(old.as_ref()) {
        let ns = meta.namespace().to_string();
        match meta.controller_ref() {
            Some(r) if r.kind == kind => keys.push((ns, r.name.clone())),
            Some(_) => {}
            None => {
                let cache = ctx.informers.cache().read();
                for rs in cache.iter::<K>(Some(&ns)) {
                    if rs.pod_selector().is_some_and(|s| s.matches(&meta.labels)) {
                        keys.push(key_of(&rs));
                    }
                }
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

async fn sync<K: Replicated>(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let Some(rs) = ctx.informers.cache().get::<K>(ns, name) else {
        return Ok(());
    };
    let owned = claim_pods(ctx, &rs, s).await?;
    let active: Vec<Pod> = owned
        .iter()
        .filter(|p| workload::pod_active(p))
        .cloned()
        .collect();
    let desired = rs.replicas().max(0) as usize;
    if rs.meta().deletion_timestamp.is_none() {
        if active.len() < desired {
            create_pods(ctx, rec, &rs, (desired - active.len()).min(BURST), s).await?;
        } else if active.len() > desired {
            let doomed: Vec<Pod> =
                workload::pods_to_delete(&active, (active.len() - desired).min(BURST))
                    .into_iter()
                    .cloned()
                    .collect();
            delete_pods(ctx, rec, &rs, doomed, s).await?;
        }
    }
    update_status(ctx, &rs, &owned, s).await
}

/// Reads the pods the controller selects from the cache, adopting orphans and releasing
/// pods that no longer match; returns the pods it owns.
async fn claim_pods<K: Replicated>(
    ctx: &Context,
    rs: &K,
    s: &mut Synced,
) -> Result<Vec<Pod>, ApiError> {
    let ns = rs.meta().namespace().to_string();
    let uid = rs.meta().uid.clone();
    let selector = rs.pod_selector();
    let deleting = rs.meta().deletion_timestamp.is_some();
    let (mut owned, mut adopt, mut release) = (Vec::new(), Vec::new(), Vec::new());
    {
        let cache = ctx.informers.cache().read();
        // Only the metadata of pods that are not ours is decoded.
        for p in cache.iter_packed(Kind::Pod, Some(&ns)) {
            let Some(meta) = p.meta() else { continue };
            let c = match &selector {
                Some(sel) => workload::claim(&uid, deleting, sel, &meta),
                None if workload::controller_uid(&meta) == Some(uid.as_str()) => Claim::Release,
                None => Claim::Ignore,
            };
            match c {
                Claim::Owned => owned.extend(p.unpack_as::<Pod>()),
                Claim::Adopt => adopt.push(meta.name),
                Claim::Release => release.push(meta.name),
                Claim::Ignore => {}
            }
        }
    }
    owned.extend(
        workload::write_claims::<Pod, _>(
            &ctx.registry,
            &ns,
            rs,
            selector.as_ref(),
            adopt,
            release,
            s,
        )
        .await?,
    );
    Ok(owned)
}

async fn create_pods<K: Replicated>(
    ctx: &Context,
    rec: &Recorder,
    rs: &K,
    count: usize,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let ns = rs.meta().namespace().to_string();
    // Validation requires a template; one missing here was stored before that rule.
    let Some(template) = rs.template() else {
        return Ok(());
    };
    let template = workload::pod_from_template(
        template,
        &ns,
        &workload::generate_name_prefix(&rs.meta().name),
        workload::controller_ref(rs),
    );
    // Slow start: batches of 1, 2, 4, ... so a pod that cannot be created fails once, not
    // hundreds of times.
    let mut left = count;
    let mut batch = 1;
    while left > 0 {
        let n = batch.min(left);
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (registry, pod) = (ctx.registry.clone(), template.clone());
                smol::spawn(async move { registry.create(pod, None).await })
            })
            .collect();
        let mut failed = None;
        for t in tasks {
            match t.await {
                Ok(p) => {
                    s.wrote(&p);
                    rec.normal(
                        rs,
                        "SuccessfulCreate",
                        format!("Created pod: {}", p.metadata.name),
                    );
                }
                Err(e) => {
                    rec.warning(rs, "FailedCreate", format!("Error creating: {e}"));
                    failed = Some(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        left -= n;
        batch *= 2;
    }
    Ok(())
}

async fn delete_pods<K: Replicated>(
    ctx: &Context,
    rec: &Recorder,
    rs: &K,
    pods: Vec<Pod>,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let tasks: Vec<_> = pods
        .into_iter()
        .map(|p| {
            let registry = ctx.registry.clone();
            smol::spawn(async move {
                let opts = DeleteOptions {
                    preconditions: Some(api::meta::Preconditions {
                        uid: Some(p.metadata.uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                let r = registry
                    .delete::<Pod>(p.metadata.namespace(), &p.metadata.name, opts)
                    .await;
                (p.metadata.name, r)
            })
        })
        .collect();
    let mut failed = None;
    for t in tasks {
        let (name, r) = t.await;
        match ignore_not_found(r) {
            Ok(Some((p, _))) => {
                s.wrote(&p);
                rec.normal(rs, "SuccessfulDelete", format!("Deleted pod: {name}"));
            }
            Ok(None) => {}
            Err(e) => {
                rec.warning(rs, "FailedDelete", format!("Error deleting: {e}"));
                failed = Some(e);
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// The status counts of a controller owning `owned` pods at `now`, and when a pod not yet
/// available will become so (to look again then).
pub(crate) fn counts<K: Replicated>(rs: &K, owned: &[Pod], now: Time) -> (Counts, Option<i64>) {
    let min_ready = rs.min_ready_seconds();
    let active: Vec<&Pod> = owned.iter().filter(|p| workload::pod_active(p)).collect();
    let empty = Default::default();
    let template_labels = rs.template().map_or(&empty, |t| &t.metadata.labels);
    let mut c = Counts {
        replicas: active.len() as i32,
        fully_labeled: active
            .iter()
            .filter(|p| {
                template_labels
                    .iter()
                    .all(|(k, v)| p.metadata.labels.get(k) == Some(v))
            })
            .count() as i32,
        ready: active.iter().filter(|p| workload::pod_ready(p)).count() as i32,
        available: 0,
        terminating: owned
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count() as i32,
    };
    let mut next: Option<i64> = None;
    for p in &active {
        match workload::available_in(p, min_ready, now) {
            Some(0) => c.available += 1,
            Some(wait) => next = Some(next.map_or(wait, |n| n.min(wait))),
            None => {}
        }
    }
    (c, next)
}

async fn update_status<K: Replicated>(
    ctx: &Context,
    rs: &K,
    owned: &[Pod],
    s: &mut Synced,
) -> Result<(), ApiError> {
    let (c, next) = counts(rs, owned, Time::now());
    if let Some(wait) = next {
        s.requeue_after(Duration::from_secs(wait as u64 + 1));
    }
    let mut updated = rs.clone();
    updated.set_counts(&c);
    if updated == *rs {
        return Ok(());
    }
    let r = ctx
        .registry
        .mutate::<K>(rs.meta().namespace(), &rs.meta().name, Part::Status, {
            let uid = rs.meta().uid.clone();
            move |r| {
                if r.meta().uid == uid {
                    r.copy_status_from(&updated);
                }
                Ok(())
            }
        })
        .await;
    if let Some(r) = ignore_not_found(r)? {
        s.wrote(&r);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: &[(&str, &str)], ready: bool, deleting: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p.status.phase = Some("Running".into());
        if ready {
            p.status.conditions.push(api::core::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(0)),
                ..Default::default()
            });
        }
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(1));
        }
        p
    }

    fn rc() -> ReplicationController {
        let mut rc = ReplicationController::default();
        rc.metadata.generation = Some(4);
        rc.spec.replicas = Some(3);
        rc.spec.selector = [("app".to_string(), "web".to_string())].into();
        let mut t = PodTemplateSpec::default();
        t.metadata.labels = [
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "front".to_string()),
        ]
        .into();
        rc.spec.template = Some(t);
        rc
    }

    #[test]
    fn a_replication_controller_selects_by_its_label_map() {
        let rc = rc();
        let sel = rc.pod_selector().expect("selector");
        let labels = |l: &[(&str, &str)]| {
            l.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(sel.matches(&labels(&[("app", "web"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[("app", "db")])));
        let mut empty = rc.clone();
        empty.spec.selector.clear();
        assert!(
            empty.pod_selector().is_none(),
            "an empty map selects nothing"
        );
    }

    #[test]
    fn counts_and_status_of_both_kinds() {
        let rc = rc();
        let owned = [
            pod("a", &[("app", "web"), ("tier", "front")], true, false),
            pod("b", &[("app", "web")], false, false),
            pod("c", &[("app", "web"), ("tier", "front")], true, true),
        ];
        let (c, next) = counts(&rc, &owned, Time(100));
        assert_eq!(
            c,
            Counts {
                replicas: 2,
                fully_labeled: 1,
                ready: 1,
                available: 1,
                terminating: 1,
            }
        );
        assert_eq!(next, None);
        let mut updated = rc.clone();
        updated.set_counts(&c);
        assert_eq!(updated.status.replicas, 2);
        assert_eq!(updated.status.fully_labeled_replicas, Some(1));
        assert_eq!(updated.status.ready_replicas, Some(1));
        assert_eq!(updated.status.available_replicas, Some(1));
        assert_eq!(updated.status.observed_generation, Some(4));
        let mut rs = ReplicaSet::default();
        rs.set_counts(&c);
        assert_eq!(rs.status.terminating_replicas, Some(1));
    }
}
