//! Deployment controller: one ReplicaSet per pod template (named and labelled by the
//! template's hash), rolled out with the RollingUpdate (maxSurge, maxUnavailable, pod
//! readiness) or Recreate strategy; revisions, history limit, pause, progress deadline and
//! the status `kubectl rollout status` reads. Rollback is a client-side template copy
//! (`skiff rollout undo`, `kubectl rollout undo`): the controller then finds the old
//! ReplicaSet again and gives it the next revision.

use std::time::Duration;

use api::apps::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use api::core::Pod;
use api::meta::{DeleteOptions, LabelSelector, ObjectMeta, Time};
use api::object::Resource;
use api::selector::Selector;
use api::Kind;

use super::workload::{self, Claim, DESIRED_REPLICAS, MAX_REPLICAS, POD_TEMPLATE_HASH, REVISION};
use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

pub fn start(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), "deployment-controller");
    let queue = fed_queue::<Deployment, _>(
        ctx,
        &[Kind::Deployment, Kind::ReplicaSet, Kind::Pod],
        keys_for,
    );
    let ctx = ctx.clone();
    spawn_workers(
        "deployment",
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
            .list::<Deployment>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    let mut keys = Vec::new();
    if let Some(d) = Deployment::from_any_ref(obj) {
        keys.push(key_of(d));
    }
    let mut metas: Vec<&ObjectMeta> = Vec::new();
    let old = change.old_meta();
    if let Some(rs) = ReplicaSet::from_any_ref(obj) {
        metas.push(&rs.metadata);
        metas.extend(old.as_ref());
    }
    // A Recreate rollout waits for the old pods to be gone.
    if let (Change::Deleted(_), Some(p)) = (change, Pod::from_any_ref(obj)) {
        if let Some(r) = p
            .metadata
            .controller_ref()
            .filter(|r| r.kind == "ReplicaSet")
        {
            let cache = ctx.informers.cache().read();
            if let Some(rs) = cache.get::<ReplicaSet>(p.metadata.namespace(), &r.name) {
                if let Some(d) = rs
                    .metadata
                    .controller_ref()
                    .filter(|r| r.kind == "Deployment")
                {
                    keys.push((rs.metadata.namespace().to_string(), d.name.clone()));
                }
            }
        }
    }
    for m in metas {
        let ns = m.namespace().to_string();
        match m.controller_ref() {
            Some(r) if r.kind == "Deployment" => keys.push((ns, r.name.clone())),
            Some(_) => {}
            None => {
                let cache = ctx.informers.cache().read();
                for d in cache.iter::<Deployment>(Some(&ns)) {
                    if workload::selector(d.spec.selector.as_ref())
                        .is_some_and(|s| s.matches(&m.labels))
                    {
                        keys.push(key_of(&d));
                    }
                }
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// One pass over one Deployment.
struct Pass<'a> {
    ctx: &'a Context,
    rec: &'a Recorder,
    d: Deployment,
    desired: i32,
    surge: i32,
    unavailable: i32,
    /// Set when this pass created the new ReplicaSet.
    created: Option<String>,
}

async fn sync(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let Some(d) = ctx.informers.cache().get::<Deployment>(ns, name) else {
        return Ok(());
    };
    let Some(selector) = workload::selector(d.spec.selector.as_ref()) else {
        rec.warning(
            &d,
            "SelectingAll",
            "This deployment is selecting all pods. A non-empty selector is required.",
        );
        return Ok(());
    };
    let desired = d.spec.replicas.unwrap_or(1).max(0);
    let recreate = strategy_type(&d) == "Recreate";
    let (surge, unavailable) = if recreate {
        (0, 0)
    } else {
        let ru = d
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref());
        let (surge, unavailable) = workload::resolve_fenceposts(
            ru.and_then(|r| r.max_surge.as_ref()),
            ru.and_then(|r| r.max_unavailable.as_ref()),
            desired,
        )
        .map_err(ApiError::bad_request)?;
        (surge, unavailable.min(desired))
    };
    let mut pass = Pass {
        ctx,
        rec,
        d,
        desired,
        surge,
        unavailable,
        created: None,
    };
    let rss = pass.claim_replica_sets(&selector, s).await?;
    if pass.d.metadata.deletion_timestamp.is_some() {
        return pass.sync_status(&rss, s).await;
    }
    if pass.d.spec.paused == Some(true) {
        return pass.sync_paused(rss, s).await;
    }
    if recreate {
        pass.recreate(rss, s).await
    } else {
        pass.rolling(rss, s).await
    }
}

fn strategy_type(d: &Deployment) -> &str {
    d.spec
        .strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1)
}

fn available(rs: &ReplicaSet) -> i32 {
    rs.status.available_replicas.unwrap_or(0)
}

/// The ReplicaSet whose template is the Deployment's (the oldest, if several), and the rest.
fn split_new_old(d: &Deployment, rss: Vec<ReplicaSet>) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    let mut rss = rss;
    rss.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let idx = rss
        .iter()
        .position(|rs| workload::equal_ignore_hash(&rs.spec.template, &d.spec.template));
    let new = idx.map(|i| rss.remove(i));
    (new, rss)
}

impl Pass<'_> {
    /// desired + maxSurge, saturating (both are any int32 a user gives).
    fn max_replicas(&self) -> i32 {
        self.desired.saturating_add(self.surge)
    }

    fn ns(&self) -> String {
        self.d.metadata.namespace().to_string()
    }

    async fn claim_replica_sets(
        &self,
        selector: &Selector,
        s: &mut Synced,
    ) -> Result<Vec<ReplicaSet>, ApiError> {
        let ns = self.ns();
        let uid = self.d.metadata.uid.clone();
        let deleting = self.d.metadata.deletion_timestamp.is_some();
        let (mut owned, mut adopt, mut release) = (Vec::new(), Vec::new(), Vec::new());
        {
            let cache = self.ctx.informers.cache().read();
            for rs in cache.iter::<ReplicaSet>(Some(&ns)) {
                match workload::claim(&uid, deleting, selector, &rs.metadata) {
                    Claim::Owned => owned.push(rs),
                    Claim::Adopt => adopt.push(rs.metadata.name),
                    Claim::Release => release.push(rs.metadata.name),
                    Claim::Ignore => {}
                }
            }
        }
        owned.extend(
            workload::write_claims::<ReplicaSet, _>(
                &self.ctx.registry,
                &ns,
                &self.d,
                Some(selector),
                adopt,
                release,
                s,
            )
            .await?,
        );
        Ok(owned)
    }

    /// Sets a ReplicaSet's replicas (and the Deployment's annotations on it).
    async fn scale(
        &self,
        rs: &ReplicaSet,
        replicas: i32,
        s: &mut Synced,
    ) -> Result<ReplicaSet, ApiError> {
        let (uid, desired, max) = (
            rs.metadata.uid.clone(),
            self.desired.to_string(),
            self.max_replicas().to_string(),
        );
        let updated = self
            .ctx
            .registry
            .mutate::<ReplicaSet>(
                rs.metadata.namespace(),
                &rs.metadata.name,
                Part::Main,
                move |r| {
                    if r.metadata.uid != uid {
                        return Err(ApiError::conflict(
                            Kind::ReplicaSet,
                            &r.metadata.name,
                            "the ReplicaSet was replaced",
                        ));
                    }
                    r.spec.replicas = Some(replicas);
                    r.metadata
                        .annotations
                        .insert(DESIRED_REPLICAS.into(), desired.clone());
                    r.metadata
                        .annotations
                        .insert(MAX_REPLICAS.into(), max.clone());
                    Ok(())
                },
            )
            .await?;
        s.wrote(&updated);
        let before = spec_replicas(rs);
        if before != replicas {
            let direction = if replicas > before { "up" } else { "down" };
            self.rec.normal(
                &self.d,
                "ScalingReplicaSet",
                format!(
                    "Scaled {direction} replica set {} from {before} to {replicas}",
                    rs.metadata.name
                ),
            );
        }
        Ok(updated)
    }

    /// Finds (and with `create`, makes) the ReplicaSet of the current template, and keeps
    /// the revision annotations of it and the Deployment current.
    async fn new_replica_set(
        &mut self,
        new: Option<ReplicaSet>,
        olds: &[ReplicaSet],
        create: bool,
        s: &mut Synced,
    ) -> Result<Option<ReplicaSet>, ApiError> {
        let max_old = olds
            .iter()
            .map(|r| workload::revision_of(&r.metadata))
            .max()
            .unwrap_or(0);
        // Revisions come from annotations anyone may write: i64::MAX + 1 overflowed.
        let revision = max_old.saturating_add(1);
        let rs = match new {
            Some(rs) => {
                let annotations = &rs.metadata.annotations;
                let stale = workload::revision_of(&rs.metadata) < revision
                    || annotations.get(DESIRED_REPLICAS) != Some(&self.desired.to_string())
                    || annotations.get(MAX_REPLICAS) != Some(&self.max_replicas().to_string());
                if stale {
                    let (desired, max) =
                        (self.desired.to_string(), self.max_replicas().to_string());
                    let r = self
                        .ctx
                        .registry
                        .mutate::<ReplicaSet>(
                            rs.metadata.namespace(),
                            &rs.metadata.name,
                            Part::Main,
                            move |r| {
                                if workload::revision_of(&r.metadata) < revision {
                                    r.metadata
                                        .annotations
                                        .insert(REVISION.into(), revision.to_string());
                                }
                                r.metadata
                                    .annotations
                                    .insert(DESIRED_REPLICAS.into(), desired.clone());
                                r.metadata
                                    .annotations
                                    .insert(MAX_REPLICAS.into(), max.clone());
                                Ok(())
                            },
                        )
                        .await?;
                    s.wrote(&r);
                    r
                } else {
                    rs
                }
            }
            None if !create => return Ok(None),
            None => match self.create_replica_set(olds, revision, s).await? {
                Some(rs) => rs,
                None => return Ok(None),
            },
        };
        let rs_revision = workload::revision_of(&rs.metadata).to_string();
        if self.d.metadata.annotations.get(REVISION) != Some(&rs_revision) {
            let d = self
                .ctx
                .registry
                .mutate::<Deployment>(&self.ns(), &self.d.metadata.name, Part::Main, move |d| {
                    d.metadata
                        .annotations
                        .insert(REVISION.into(), rs_revision.clone());
                    Ok(())
                })
                .await?;
            s.wrote(&d);
            self.d.metadata = d.metadata;
        }
        Ok(Some(rs))
    }

    async fn create_replica_set(
        &mut self,
        olds: &[ReplicaSet],
        revision: i64,
        s: &mut Synced,
    ) -> Result<Option<ReplicaSet>, ApiError> {
        let d = &self.d;
        let hash = workload::template_hash(&d.spec.template, d.status.collision_count);
        let replicas = if self.surge == 0 && self.unavailable == 0 {
            self.desired // Recreate: the old ones are gone already
        } else {
            let total = workload::sum_replicas(olds.iter().map(spec_replicas));
            workload::new_rs_replicas(self.desired, self.surge, total, 0)
        };
        let mut template = d.spec.template.clone();
        template.metadata.labels =
            workload::with_label(&template.metadata.labels, POD_TEMPLATE_HASH, &hash);
        let mut selector: LabelSelector = d.spec.selector.clone().unwrap_or_default();
        selector
            .match_labels
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let mut rs = ReplicaSet::default();
        rs.metadata.name = format!("{}-{hash}", d.metadata.name);
        rs.metadata.namespace = d.metadata.namespace.clone();
        rs.metadata.labels = template.metadata.labels.clone();
        rs.metadata.owner_references = vec![workload::controller_ref(d)];
        for (k, v) in [
            (REVISION, revision.to_string()),
            (DESIRED_REPLICAS, self.desired.to_string()),
            (MAX_REPLICAS, self.max_replicas().to_string()),
        ] {
            rs.metadata.annotations.insert(k.into(), v);
        }
        rs.spec.replicas = Some(replicas);
        rs.spec.min_ready_seconds = d.spec.min_ready_seconds;
        rs.spec.selector = Some(selector);
        rs.spec.template = template;
        match self.ctx.registry.create(rs.clone(), None).await {
            Ok(created) => {
                s.wrote(&created);
                self.rec.normal(
                    d,
                    "ScalingReplicaSet",
                    format!(
                        "Scaled up replica set {} from 0 to {replicas}",
                        created.metadata.name
                    ),
                );
                self.created = Some(created.metadata.name.clone());
                Ok(Some(created))
            }
            Err(e) if e.code() == 409 && e.reason() == "AlreadyExists" => {
                let existing: ReplicaSet =
                    self.ctx.registry.get(&self.ns(), &rs.metadata.name).await?;
                if workload::controller_uid(&existing.metadata) == Some(d.metadata.uid.as_str())
                    && workload::equal_ignore_hash(&existing.spec.template, &d.spec.template)
                {
                    // Ours; the cache had not seen it yet.
                    return Ok(Some(existing));
                }
                // A hash collision: the next name comes from a bumped collision count.
                let uid = d.metadata.uid.clone();
                let updated = self
                    .ctx
                    .registry
                    .mutate::<Deployment>(&self.ns(), &d.metadata.name, Part::Status, move |d| {
                        if d.metadata.uid == uid {
                            d.status.collision_count =
                                Some(d.status.collision_count.unwrap_or(0).saturating_add(1));
                        }
                        Ok(())
                    })
                    .await?;
                s.wrote(&updated);
                Err(ApiError::conflict(
                    Kind::ReplicaSet,
                    &rs.metadata.name,
                    "hash collision; retrying with a new name",
                ))
            }
            Err(e) => {
                self.rec.warning(
                    d,
                    "FailedCreate",
                    format!("Failed to create new replica set: {e}"),
                );
                Err(e)
            }
        }
    }

    async fn rolling(&mut self, rss: Vec<ReplicaSet>, s: &mut Synced) -> Result<(), ApiError> {
        let (new, olds) = split_new_old(&self.d, rss);
        let Some(new) = self.new_replica_set(new, &olds, true, s).await? else {
            return Ok(());
        };
        let total = workload::sum_replicas(olds.iter().chain([&new]).map(spec_replicas));
        let target =
            workload::new_rs_replicas(self.desired, self.surge, total, spec_replicas(&new));
        if target != spec_replicas(&new) {
            let new = self.scale(&new, target, s).await?;
            return self.sync_status(&all(&new, &olds), s).await;
        }
        let olds = self.scale_down_old(&new, olds, s).await?;
        let everything = all(&new, &olds);
        if self.complete(&everything) {
            self.cleanup(&olds, s).await?;
        }
        self.sync_status(&everything, s).await
    }

    /// Kubernetes' reconcileOldReplicaSets: first the old pods that are not available, then
    /// available ones while availability stays above desired - maxUnavailable.
    async fn scale_down_old(
        &self,
        new: &ReplicaSet,
        mut olds: Vec<ReplicaSet>,
        s: &mut Synced,
    ) -> Result<Vec<ReplicaSet>, ApiError> {
        let old_total = workload::sum_replicas(olds.iter().map(spec_replicas));
        if old_total == 0 {
            return Ok(olds);
        }
        let all_total = old_total.saturating_add(spec_replicas(new));
        let mut budget = workload::max_scaled_down(
            self.desired,
            self.unavailable,
            all_total,
            spec_replicas(new),
            available(new),
        );
        if budget <= 0 {
            return Ok(olds);
        }
        // Oldest first.
        olds.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        for rs in olds.iter_mut() {
            if budget <= 0 {
                break;
            }
            let unhealthy = spec_replicas(rs).saturating_sub(available(rs));
            if spec_replicas(rs) == 0 || unhealthy <= 0 {
                continue;
            }
            let down = unhealthy.min(budget).min(spec_replicas(rs));
            budget -= down;
            *rs = self.scale(rs, spec_replicas(rs) - down, s).await?;
        }
        let min_available = self.desired - self.unavailable;
        let available_now = workload::sum_replicas(olds.iter().chain([new]).map(available));
        let mut down_total = available_now.saturating_sub(min_available);
        for rs in olds.iter_mut() {
            if down_total <= 0 {
                break;
            }
            if spec_replicas(rs) == 0 {
                continue;
            }
            let down = spec_replicas(rs).min(down_total);
            down_total -= down;
            *rs = self.scale(rs, spec_replicas(rs) - down, s).await?;
        }
        Ok(olds)
    }

    async fn recreate(&mut self, rss: Vec<ReplicaSet>, s: &mut Synced) -> Result<(), ApiError> {
        let (new, mut olds) = split_new_old(&self.d, rss);
        let mut scaled = false;
        for rs in olds.iter_mut() {
            if spec_replicas(rs) > 0 {
                *rs = self.scale(rs, 0, s).await?;
                scaled = true;
            }
        }
        if scaled {
            return self.sync_status(&all_opt(new.as_ref(), &olds), s).await;
        }
        if self.old_pods_running(&olds) {
            return self.sync_status(&all_opt(new.as_ref(), &olds), s).await;
        }
        let Some(mut new) = self.new_replica_set(new, &olds, true, s).await? else {
            return Ok(());
        };
        if spec_replicas(&new) != self.desired {
            new = self.scale(&new, self.desired, s).await?;
        }
        let everything = all(&new, &olds);
        if self.complete(&everything) {
            self.cleanup(&olds, s).await?;
        }
        self.sync_status(&everything, s).await
    }

    /// Whether a pod of an old ReplicaSet still runs (terminating ones included).
    fn old_pods_running(&self, olds: &[ReplicaSet]) -> bool {
        let uids: Vec<&str> = olds.iter().map(|r| r.metadata.uid.as_str()).collect();
        let cache = self.ctx.informers.cache().read();
        let running = cache
            .iter_where::<Pod>(Some(self.d.metadata.namespace()), |m| {
                workload::controller_uid(m).is_some_and(|u| uids.contains(&u))
            })
            .any(|p| {
                !matches!(
                    p.status.phase.as_deref(),
                    Some("Succeeded") | Some("Failed")
                )
            });
        running
    }

    /// Paused: no new rollout, only scaling of the one active ReplicaSet and cleanup.
    async fn sync_paused(&mut self, rss: Vec<ReplicaSet>, s: &mut Synced) -> Result<(), ApiError> {
        let (new, mut olds) = split_new_old(&self.d, rss);
        let new = self.new_replica_set(new, &olds, false, s).await?;
        let active: Vec<usize> = olds
            .iter()
            .enumerate()
            .filter(|(_, r)| spec_replicas(r) > 0)
            .map(|(i, _)| i)
            .collect();
        let new_active = new.as_ref().is_some_and(|n| spec_replicas(n) > 0);
        let mut new = new;
        match (new_active, active.as_slice()) {
            (true, []) | (false, []) if new.is_some() => {
                if let Some(n) = &new {
                    if spec_replicas(n) != self.desired {
                        new = Some(self.scale(n, self.desired, s).await?);
                    }
                }
            }
            (false, [i]) => {
                let i = *i;
                if spec_replicas(&olds[i]) != self.desired {
                    olds[i] = self.scale(&olds[i], self.desired, s).await?;
                }
            }
            _ => {}
        }
        self.cleanup(&olds, s).await?;
        self.sync_status(&all_opt(new.as_ref(), &olds), s).await
    }

    fn complete(&self, rss: &[ReplicaSet]) -> bool {
        let st = self.compute_status(rss);
        st.updated_replicas == Some(self.desired)
            && st.replicas == Some(self.desired)
            && st.available_replicas == Some(self.desired)
    }

    /// Deletes old, empty ReplicaSets beyond revisionHistoryLimit, lowest revision first.
    async fn cleanup(&self, olds: &[ReplicaSet], s: &mut Synced) -> Result<(), ApiError> {
        let limit = self.d.spec.revision_history_limit.unwrap_or(10).max(0) as usize;
        let mut alive: Vec<&ReplicaSet> = olds
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .collect();
        if alive.len() <= limit {
            return Ok(());
        }
        let surplus = alive.len() - limit;
        alive.sort_by_key(|r| workload::revision_of(&r.metadata));
        for rs in alive.into_iter().take(surplus) {
            if rs.status.replicas != 0
                || spec_replicas(rs) != 0
                || rs.metadata.generation > rs.status.observed_generation
            {
                continue;
            }
            let opts = DeleteOptions {
                preconditions: Some(api::meta::Preconditions {
                    uid: Some(rs.metadata.uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let r = self
                .ctx
                .registry
                .delete::<ReplicaSet>(rs.metadata.namespace(), &rs.metadata.name, opts)
                .await;
            if let Some((gone, _)) = ignore_not_found(r)? {
                s.wrote(&gone);
            }
        }
        Ok(())
    }

    fn new_rs<'b>(&self, rss: &'b [ReplicaSet]) -> Option<&'b ReplicaSet> {
        rss.iter()
            .filter(|rs| workload::equal_ignore_hash(&rs.spec.template, &self.d.spec.template))
            .min_by_key(|rs| rs.metadata.creation_timestamp)
    }

    /// The counts of the status (conditions and the rest are carried over).
    fn compute_status(&self, rss: &[ReplicaSet]) -> DeploymentStatus {
        let mut st = self.d.status.clone();
        st.observed_generation = self.d.metadata.generation;
        st.replicas = Some(workload::sum_replicas(
            rss.iter().map(|r| r.status.replicas),
        ));
        st.updated_replicas = Some(self.new_rs(rss).map_or(0, |r| r.status.replicas));
        st.ready_replicas = Some(workload::sum_replicas(
            rss.iter().map(|r| r.status.ready_replicas.unwrap_or(0)),
        ));
        st.available_replicas = Some(workload::sum_replicas(rss.iter().map(available)));
        let total = workload::sum_replicas(rss.iter().map(spec_replicas));
        st.unavailable_replicas = Some(
            total
                .saturating_sub(st.available_replicas.unwrap_or(0))
                .max(0),
        );
        st
    }

    async fn sync_status(&self, rss: &[ReplicaSet], s: &mut Synced) -> Result<(), ApiError> {
        let now = Time::now();
        let mut st = self.compute_status(rss);
        let available_ok = st.available_replicas.unwrap_or(0) >= self.desired - self.unavailable;
        set_condition(
            &mut st,
            if available_ok {
                condition(
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.",
                    now,
                )
            } else {
                condition(
                    "Available",
                    "False",
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.",
                    now,
                )
            },
        );
        let rs_name = self.new_rs(rss).map(|r| r.metadata.name.clone());
        let progressing = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .cloned();
        if self.d.spec.paused == Some(true) {
            if progressing
                .as_ref()
                .is_none_or(|c| c.reason.as_deref() != Some("DeploymentPaused"))
            {
                set_condition(
                    &mut st,
                    condition(
                        "Progressing",
                        "Unknown",
                        "DeploymentPaused",
                        "Deployment is paused",
                        now,
                    ),
                );
            }
        } else if progressing
            .as_ref()
            .is_some_and(|c| c.reason.as_deref() == Some("DeploymentPaused"))
        {
            set_condition(
                &mut st,
                condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentResumed",
                    "Deployment is resumed",
                    now,
                ),
            );
        } else if let Some(name) = &self.created {
            let mut c = condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                &format!("Created new replica set \"{name}\""),
                now,
            );
            if let Some(p) = progressing.as_ref().filter(|p| p.status == "True") {
                c.last_transition_time = p.last_transition_time;
            }
            replace_condition(&mut st, c);
        } else if let Some(deadline) = self
            .d
            .spec
            .progress_deadline_seconds
            .filter(|d| *d != i32::MAX)
        {
            let what = rs_name
                .as_ref()
                .map_or(format!("Deployment \"{}\"", self.d.metadata.name), |n| {
                    format!("ReplicaSet \"{n}\"")
                });
            let already_complete = st.replicas == st.updated_replicas
                && progressing
                    .as_ref()
                    .is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"));
            let complete = st.updated_replicas == Some(self.desired)
                && st.replicas == Some(self.desired)
                && st.available_replicas == Some(self.desired);
            if !already_complete {
                if complete {
                    set_condition(
                        &mut st,
                        condition(
                            "Progressing",
                            "True",
                            "NewReplicaSetAvailable",
                            &format!("{what} has successfully progressed."),
                            now,
                        ),
                    );
                } else if made_progress(&self.d.status, &st) {
                    let mut c = condition(
                        "Progressing",
                        "True",
                        "ReplicaSetUpdated",
                        &format!("{what} is progressing."),
                        now,
                    );
                    if let Some(p) = progressing.as_ref().filter(|p| p.status == "True") {
                        c.last_transition_time = p.last_transition_time;
                    }
                    replace_condition(&mut st, c);
                } else if let Some(p) = &progressing {
                    let timed_out = p.reason.as_deref() == Some("ProgressDeadlineExceeded")
                        || (p.reason.as_deref() != Some("NewReplicaSetAvailable")
                            && p.last_update_time
                                .is_some_and(|t| t.0 + i64::from(deadline) < now.0));
                    if timed_out {
                        set_condition(
                            &mut st,
                            condition(
                                "Progressing",
                                "False",
                                "ProgressDeadlineExceeded",
                                &format!("{what} has timed out progressing."),
                                now,
                            ),
                        );
                    } else if let Some(t) = p.last_update_time {
                        // Look again when the deadline passes.
                        let left = (t.0 + i64::from(deadline) - now.0).max(0) as u64 + 1;
                        s.requeue_after(Duration::from_secs(left));
                    }
                } else {
                    set_condition(
                        &mut st,
                        condition(
                            "Progressing",
                            "True",
                            "ReplicaSetUpdated",
                            &format!("{what} is progressing."),
                            now,
                        ),
                    );
                    s.requeue_after(Duration::from_secs(
                        u64::try_from(deadline).unwrap_or(600) + 1,
                    ));
                }
            }
        }
        if st == self.d.status {
            return Ok(());
        }
        let uid = self.d.metadata.uid.clone();
        let r = self
            .ctx
            .registry
            .mutate::<Deployment>(&self.ns(), &self.d.metadata.name, Part::Status, move |d| {
                if d.metadata.uid == uid {
                    let collisions = d.status.collision_count;
                    d.status = st.clone();
                    d.status.collision_count = collisions;
                }
                Ok(())
            })
            .await;
        if let Some(d) = ignore_not_found(r)? {
            s.wrote(&d);
        }
        Ok(())
    }
}

fn all(new: &ReplicaSet, olds: &[ReplicaSet]) -> Vec<ReplicaSet> {
    all_opt(Some(new), olds)
}

fn all_opt(new: Option<&ReplicaSet>, olds: &[ReplicaSet]) -> Vec<ReplicaSet> {
    new.into_iter()
        .cloned()
        .chain(olds.iter().cloned())
        .collect()
}

/// Kubernetes' DeploymentProgressing: more updated, ready or available pods, or fewer old.
fn made_progress(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let g = |v: Option<i32>| v.unwrap_or(0);
    let old_old = g(old.replicas).saturating_sub(g(old.updated_replicas));
    let new_old = g(new.replicas).saturating_sub(g(new.updated_replicas));
    g(new.updated_replicas) > g(old.updated_replicas)
        || new_old < old_old
        || g(new.ready_replicas) > g(old.ready_replicas)
        || g(new.available_replicas) > g(old.available_replicas)
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Time,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        last_update_time: Some(now),
        last_transition_time: Some(now),
        reason: Some(reason.into()),
        message: Some(message.into()),
    }
}

/// Kubernetes' SetDeploymentCondition: no change for the same status and reason; the
/// transition time stays when only the reason changes.
fn set_condition(st: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = st.conditions.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time;
        }
    }
    replace_condition(st, c);
}

fn replace_condition(st: &mut DeploymentStatus, c: DeploymentCondition) {
    st.conditions.retain(|x| x.type_ != c.type_);
    st.conditions.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_more_updated_ready_available_or_fewer_old() {
        let st = |replicas, updated, ready, available| DeploymentStatus {
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            ..Default::default()
        };
        assert!(!made_progress(&st(4, 1, 3, 3), &st(4, 1, 3, 3)));
        assert!(made_progress(&st(4, 1, 3, 3), &st(5, 2, 3, 3)));
        assert!(made_progress(&st(5, 2, 3, 3), &st(4, 2, 3, 3)));
        assert!(made_progress(&st(4, 2, 3, 3), &st(4, 2, 4, 3)));
        assert!(!made_progress(&st(4, 2, 4, 4), &st(4, 2, 3, 3)));
    }

    #[test]
    fn progress_of_counts_at_the_int32_limits() {
        let st = |replicas, updated| DeploymentStatus {
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ..Default::default()
        };
        assert!(made_progress(
            &st(i32::MAX, i32::MIN),
            &st(i32::MIN, i32::MAX)
        ));
        assert!(!made_progress(
            &st(i32::MIN, i32::MAX),
            &st(i32::MAX, i32::MIN)
        ));
    }

    #[test]
    fn conditions_keep_transition_time_for_same_status() {
        let mut st = DeploymentStatus::default();
        set_condition(
            &mut st,
            condition("Progressing", "True", "ReplicaSetUpdated", "a", Time(1)),
        );
        set_condition(
            &mut st,
            condition("Progressing", "True", "ReplicaSetUpdated", "b", Time(5)),
        );
        assert_eq!(
            st.conditions[0].message.as_deref(),
            Some("a"),
            "same reason: unchanged"
        );
        set_condition(
            &mut st,
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                "c",
                Time(9),
            ),
        );
        assert_eq!(st.conditions.len(), 1);
        assert_eq!(st.conditions[0].last_transition_time, Some(Time(1)));
        assert_eq!(st.conditions[0].last_update_time, Some(Time(9)));
        set_condition(
            &mut st,
            condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                "d",
                Time(20),
            ),
        );
        assert_eq!(st.conditions[0].last_transition_time, Some(Time(20)));
    }

    #[test]
    fn the_new_replica_set_is_the_oldest_with_the_template() {
        let mut d = Deployment::default();
        d.spec
            .template
            .metadata
            .labels
            .insert("app".into(), "web".into());
        let rs = |name: &str, created: i64, version: &str| {
            let mut r = ReplicaSet::default();
            r.metadata.name = name.into();
            r.metadata.creation_timestamp = Some(Time(created));
            r.spec
                .template
                .metadata
                .labels
                .insert("app".into(), "web".into());
            r.spec
                .template
                .metadata
                .labels
                .insert(POD_TEMPLATE_HASH.into(), name.into());
            if !version.is_empty() {
                r.spec
                    .template
                    .metadata
                    .labels
                    .insert("v".into(), version.into());
            }
            r
        };
        let (new, olds) =
            split_new_old(&d, vec![rs("b", 5, ""), rs("old", 1, "1"), rs("a", 3, "")]);
        assert_eq!(new.map(|r| r.metadata.name), Some("a".to_string()));
        let names: Vec<_> = olds.iter().map(|r| r.metadata.name.as_str()).collect();
        assert_eq!(names, ["old", "b"]);
    }
}
