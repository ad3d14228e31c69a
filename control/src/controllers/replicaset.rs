//! ReplicaSet controller: keeps `spec.replicas` active pods, adopts matching orphans and
//! releases pods whose labels no longer match, and reports status.

use std::time::Duration;

use api::apps::ReplicaSet;
use api::core::Pod;
use api::meta::{DeleteOptions, Time};
use api::object::Resource;
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

pub fn start(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), "replicaset-controller");
    let queue = fed_queue::<ReplicaSet, _>(ctx, &[Kind::ReplicaSet, Kind::Pod], keys_for);
    let ctx = ctx.clone();
    spawn_workers(
        "replicaset",
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

/// The ReplicaSets a change concerns.
fn keys_for(ctx: &Context, change: &Change) -> Vec<Key> {
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<ReplicaSet>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(rs) = ReplicaSet::from_any_ref(obj) {
        return vec![key_of(rs)];
    }
    let mut keys = Vec::new();
    let Some(pod) = Pod::from_any_ref(obj) else {
        return keys;
    };
    // The pod's owner or selecting ReplicaSets, before and after the change: only the
    // metadata counts.
    let old = change.old_meta();
    for meta in std::iter::once(&pod.metadata).chain(old.as_ref()) {
        let ns = meta.namespace().to_string();
        match meta.controller_ref() {
            Some(r) if r.kind == "ReplicaSet" => keys.push((ns, r.name.clone())),
            Some(_) => {}
            None => {
                let cache = ctx.informers.cache().read();
                for rs in cache.iter::<ReplicaSet>(Some(&ns)) {
                    if workload::selector(rs.spec.selector.as_ref())
                        .is_some_and(|s| s.matches(&meta.labels))
                    {
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

async fn sync(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let Some(rs) = ctx.informers.cache().get::<ReplicaSet>(ns, name) else {
        return Ok(());
    };
    let owned = claim_pods(ctx, &rs, s).await?;
    let active: Vec<Pod> = owned
        .iter()
        .filter(|p| workload::pod_active(p))
        .cloned()
        .collect();
    let desired = rs.spec.replicas.unwrap_or(1).max(0) as usize;
    if rs.metadata.deletion_timestamp.is_none() {
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

/// Reads the pods the ReplicaSet selects from the cache, adopting orphans and releasing
/// pods that no longer match; returns the pods it owns.
pub(crate) async fn claim_pods(
    ctx: &Context,
    rs: &ReplicaSet,
    s: &mut Synced,
) -> Result<Vec<Pod>, ApiError> {
    let ns = rs.metadata.namespace().to_string();
    let uid = rs.metadata.uid.clone();
    let selector = workload::selector(rs.spec.selector.as_ref());
    let deleting = rs.metadata.deletion_timestamp.is_some();
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

async fn create_pods(
    ctx: &Context,
    rec: &Recorder,
    rs: &ReplicaSet,
    count: usize,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let ns = rs.metadata.namespace().to_string();
    let template = workload::pod_from_template(
        &rs.spec.template,
        &ns,
        &workload::generate_name_prefix(&rs.metadata.name),
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

async fn delete_pods(
    ctx: &Context,
    rec: &Recorder,
    rs: &ReplicaSet,
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

async fn update_status(
    ctx: &Context,
    rs: &ReplicaSet,
    owned: &[Pod],
    s: &mut Synced,
) -> Result<(), ApiError> {
    let now = Time::now();
    let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
    let active: Vec<&Pod> = owned.iter().filter(|p| workload::pod_active(p)).collect();
    let mut status = rs.status.clone();
    status.replicas = active.len() as i32;
    let template_labels = &rs.spec.template.metadata.labels;
    status.fully_labeled_replicas = Some(
        active
            .iter()
            .filter(|p| {
                template_labels
                    .iter()
                    .all(|(k, v)| p.metadata.labels.get(k) == Some(v))
            })
            .count() as i32,
    );
    status.ready_replicas = Some(active.iter().filter(|p| workload::pod_ready(p)).count() as i32);
    let mut available = 0;
    for p in &active {
        match workload::available_in(p, min_ready, now) {
            Some(0) => available += 1,
            Some(wait) => s.requeue_after(Duration::from_secs(wait as u64 + 1)),
            None => {}
        }
    }
    status.available_replicas = Some(available);
    status.terminating_replicas = Some(
        owned
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count() as i32,
    );
    status.observed_generation = rs.metadata.generation;
    if status == rs.status {
        return Ok(());
    }
    let r = ctx
        .registry
        .mutate::<ReplicaSet>(rs.metadata.namespace(), &rs.metadata.name, Part::Status, {
            let uid = rs.metadata.uid.clone();
            move |r| {
                if r.metadata.uid == uid {
                    r.status = status;
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
