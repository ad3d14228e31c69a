//! Job controller: runs a Job's pods to `completions` successes (`parallelism` at a time,
//! NonIndexed or Indexed), retries failures with exponential back-off up to `backoffLimit`,
//! applies the pod failure policy, the active deadline and suspension, reports status and
//! conditions as Kubernetes 1.32 does, and deletes finished Jobs after their TTL.
//!
//! Counting follows the pods that exist: a Job's pods are only deleted by the Job itself (or
//! with it), so its Succeeded and Failed pods are its history. What to do is decided by
//! [`plan`], a pure function of the Job, its pods and the time, which the unit tests drive.

use std::collections::BTreeSet;
use std::time::Duration;

use api::batch::{Job, JobCondition, JOB_COMPLETION_INDEX};
use api::core::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use api::meta::{DeleteOptions, Time};
use api::object::Resource;
use api::Kind;

use super::workload;
use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

/// The first retry waits this long; each further failure doubles it (Kubernetes'
/// DefaultJobPodFailureBackOff).
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// The longest wait between retries (MaxJobPodFailureBackOff).
pub const BACKOFF_MAX: Duration = Duration::from_secs(360);
/// At most this many pods are created in one pass.
const BURST: usize = 500;

pub fn start(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), "job-controller");
    let queue = fed_queue::<Job, _>(ctx, &[Kind::Job, Kind::Pod], keys_for);
    let ctx = ctx.clone();
    spawn_workers("job", ctx.informers.clone(), queue, 2, move |key, mut s| {
        let (ctx, recorder) = (ctx.clone(), recorder.clone());
        async move {
            let r = sync(&ctx, &recorder, &key, &mut s).await;
            (s, r)
        }
    });
}

/// The Jobs a change concerns: the Job itself, or the controller of a changed pod.
fn keys_for(ctx: &Context, change: &Change) -> Vec<Key> {
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<Job>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(job) = Job::from_any_ref(obj) {
        return vec![key_of(job)];
    }
    let mut keys = Vec::new();
    if let Some(pod) = Pod::from_any_ref(obj) {
        let old = change.old_meta();
        for meta in std::iter::once(&pod.metadata).chain(old.as_ref()) {
            if let Some(r) = meta.controller_ref().filter(|r| r.kind == "Job") {
                keys.push((meta.namespace().to_string(), r.name.clone()));
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// What one pass does to a Job and its pods.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// The status to write (unchanged when equal to the Job's).
    pub status: api::batch::JobStatus,
    /// Pods to create: their completion index (None for NonIndexed jobs).
    pub create: Vec<Option<i32>>,
    /// Names of the pods to delete.
    pub delete: Vec<String>,
    /// Delete the Job itself (its TTL after finishing is over).
    pub delete_job: bool,
    /// Look again after this long.
    pub requeue: Option<Duration>,
    /// Events to record: (warning, reason, message).
    pub events: Vec<(bool, &'static str, String)>,
}

/// The completion index of a pod (annotation, or label), if it has a valid one.
pub fn pod_index(p: &Pod) -> Option<i32> {
    p.metadata
        .annotations
        .get(JOB_COMPLETION_INDEX)
        .or_else(|| p.metadata.labels.get(JOB_COMPLETION_INDEX))
        .and_then(|v| v.parse().ok())
        .filter(|i| *i >= 0)
}

/// When a finished pod finished: its containers' latest finish, else its creation.
fn finish_time(p: &Pod) -> i64 {
    p.status
        .container_statuses
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at)
        .map(|t| t.0)
        .max()
        .or_else(|| p.metadata.creation_timestamp.map(|t| t.0))
        .unwrap_or(0)
}

/// The action of the first pod failure policy rule that matches a failed pod, with the
/// message Kubernetes gives it.
pub fn failure_policy_action(job: &Job, p: &Pod) -> Option<(String, String)> {
    let policy = job.spec.pod_failure_policy.as_ref()?;
    let pod_name = format!("{}/{}", p.metadata.namespace(), p.metadata.name);
    for (i, rule) in policy.rules.iter().enumerate() {
        if let Some(req) = &rule.on_exit_codes {
            let statuses = p
                .status
                .init_container_statuses
                .iter()
                .chain(&p.status.container_statuses);
            for cs in statuses {
                if req.container_name.as_ref().is_some_and(|n| *n != cs.name) {
                    continue;
                }
                let Some(code) = cs
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| t.exit_code)
                else {
                    continue;
                };
                // An exit code of 0 never counts as a failure of the container.
                if code == 0 {
                    continue;
                }
                let hit = match req.operator.as_str() {
                    "In" => req.values.contains(&code),
                    "NotIn" => !req.values.contains(&code),
                    _ => false,
                };
                if hit {
                    return Some((
                        rule.action.clone(),
                        format!(
                            "Container {} for pod {pod_name} failed with exit code {code} matching {} rule at index {i}",
                            cs.name, rule.action
                        ),
                    ));
                }
            }
        }
        for pattern in &rule.on_pod_conditions {
            let want = pattern.status.as_deref().unwrap_or("True");
            if p.status
                .conditions
                .iter()
                .any(|c| c.type_ == pattern.type_ && c.status == want)
            {
                return Some((
                    rule.action.clone(),
                    format!(
                        "Pod {pod_name} has condition {} matching {} rule at index {i}",
                        pattern.type_, rule.action
                    ),
                ));
            }
        }
    }
    None
}

/// The back-off before the next pod after `failures` failures since the last success.
pub fn backoff_delay(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let shift = (failures - 1).min(16);
    (BACKOFF_BASE * (1u32 << shift)).min(BACKOFF_MAX)
}

const COMPLETIONS_REACHED: &str = "Reached expected number of succeeded pods";

/// The message of the first rule of an Indexed job's success policy that its succeeded
/// indexes meet (Kubernetes' matchSuccessPolicy).
fn success_policy_match(
    policy: &api::batch::SuccessPolicy,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    if succeeded.is_empty() {
        return None;
    }
    policy.rules.iter().enumerate().find_map(|(i, rule)| {
        let met = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(indexes), count) => {
                let required = api::batch::parse_indexes(indexes, completions).ok()?;
                if required.is_empty() {
                    return None;
                }
                let total: usize = required.iter().map(|(x, y)| (y - x + 1) as usize).sum();
                let done = required
                    .iter()
                    .map(|(x, y)| succeeded.range(*x..=*y).count())
                    .sum::<usize>();
                match count {
                    Some(c) => done >= usize::try_from(c).unwrap_or(0),
                    None => done == total,
                }
            }
            (None, Some(c)) => succeeded.len() >= usize::try_from(c).unwrap_or(0),
            (None, None) => false,
        };
        met.then(|| format!("Matched rules at index {i}"))
    })
}

/// `1,3-5,7`: Kubernetes' compressed list of indexes.
pub fn compress_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while last
            .checked_add(1)
            .is_some_and(|next| iter.peek() == Some(&next))
        {
            last = iter.next().unwrap_or(last);
        }
        out.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    out.join(",")
}

fn set_condition(
    status: &mut api::batch::JobStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: Time,
) {
    if let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != value {
            c.status = value.into();
            c.last_transition_time = Some(now);
        }
        c.last_probe_time = Some(now);
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        return;
    }
    status.conditions.push(JobCondition {
        type_: type_.into(),
        status: value.into(),
        last_probe_time: Some(now),
        last_transition_time: Some(now),
        reason: Some(reason.into()),
        message: Some(message.into()),
    });
}

/// One pass of the Job controller over `job` and the pods it owns, at `now`.
pub fn plan(job: &Job, pods: &[Pod], now: Time) -> Plan {
    let mut plan = Plan {
        status: job.status.clone(),
        ..Default::default()
    };
    let spec = &job.spec;
    let st = &mut plan.status;

    // Finished: only the TTL is left to watch.
    if job.finished() {
        if let Some(ttl) = spec.ttl_seconds_after_finished {
            let finished_at = job
                .status
                .conditions
                .iter()
                .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                .filter_map(|c| c.last_transition_time)
                .map(|t| t.0)
                .max()
                .unwrap_or(now.0);
            let expires = finished_at + i64::from(ttl);
            if now.0 >= expires {
                plan.delete_job = true;
            } else {
                plan.requeue = Some(Duration::from_secs((expires - now.0) as u64));
            }
        }
        // Pods left running by a finished job go (Kubernetes deletes them as it finishes).
        plan.delete = pods
            .iter()
            .filter(|p| workload::pod_active(p))
            .map(|p| p.metadata.name.clone())
            .collect();
        return plan;
    }

    let active: Vec<&Pod> = pods.iter().filter(|p| workload::pod_active(p)).collect();
    let terminating = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && !terminal(p))
        .count() as i32;
    let succeeded_pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.status.phase.as_deref() == Some("Succeeded"))
        .collect();
    let failed_pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.status.phase.as_deref() == Some("Failed"))
        .collect();

    // The failure policy: FailJob ends the job, Ignore does not count the failure.
    let mut policy_failure = None;
    let mut counted_failures: Vec<&Pod> = Vec::new();
    for p in &failed_pods {
        match failure_policy_action(job, p) {
            Some((action, msg)) if action == "FailJob" => {
                policy_failure.get_or_insert(msg);
                counted_failures.push(p);
            }
            Some((action, _)) if action == "Ignore" => {}
            _ => counted_failures.push(p),
        }
    }
    let indexed = job.indexed();
    let mut succeeded_indexes = BTreeSet::new();
    let completions = spec.completions;
    for p in &succeeded_pods {
        if let Some(i) = pod_index(p).filter(|i| completions.is_none_or(|c| *i < c)) {
            succeeded_indexes.insert(i);
        }
    }
    let succeeded = if indexed {
        succeeded_indexes.len() as i32
    } else {
        succeeded_pods.len() as i32
    };
    let failed = counted_failures.len() as i32;
    st.succeeded = Some(succeeded);
    st.failed = Some(failed);
    st.ready = Some(active.iter().filter(|p| workload::pod_ready(p)).count() as i32);
    st.terminating = Some(terminating);
    st.completed_indexes = indexed.then(|| compress_indexes(&succeeded_indexes));
    st.uncounted_terminated_pods = Some(Default::default());

    let suspended = spec.suspend == Some(true);
    // Suspension stops the pods; resuming starts the clock again.
    if suspended {
        if !st.is_true("Suspended") {
            set_condition(
                st,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            );
            plan.events
                .push((false, "Suspended", "Job suspended".into()));
            st.start_time = None;
        }
        plan.delete = active.iter().map(|p| p.metadata.name.clone()).collect();
        st.active = Some(0);
        return plan;
    }
    if st.is_true("Suspended") {
        set_condition(st, "Suspended", "False", "JobResumed", "Job resumed", now);
        plan.events.push((false, "Resumed", "Job resumed".into()));
        st.start_time = None;
    }
    let start = *st.start_time.get_or_insert(now);

    // Failure: the failure policy, the back-off limit, the deadline (in Kubernetes' order).
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let on_failure = spec.template.spec.restart_policy.as_deref() == Some("OnFailure");
    let restarts: i32 = active
        .iter()
        .flat_map(|p| {
            p.status
                .init_container_statuses
                .iter()
                .chain(&p.status.container_statuses)
        })
        .map(|c| c.restart_count)
        // Statuses are written by nodes (and anyone allowed the status subresource).
        .fold(0, i32::saturating_add);
    let past_restart_limit = on_failure
        && if backoff_limit == 0 {
            restarts > 0
        } else {
            restarts >= backoff_limit
        };
    // Any int64 (validation only refuses 0 and less): i64::MAX overflowed.
    let deadline = spec
        .active_deadline_seconds
        .map(|d| start.0.saturating_add(d));
    let failure = if st.is_true("FailureTarget") {
        let c = st.condition("FailureTarget");
        Some((
            c.and_then(|c| c.reason.clone()).unwrap_or_default(),
            c.and_then(|c| c.message.clone()).unwrap_or_default(),
        ))
    } else if let Some(msg) = policy_failure {
        Some(("PodFailurePolicy".to_string(), msg))
    } else if failed > backoff_limit || past_restart_limit {
        Some((
            "BackoffLimitExceeded".to_string(),
            "Job has reached the specified backoff limit".to_string(),
        ))
    } else if deadline.is_some_and(|d| now.0 >= d) {
        Some((
            "DeadlineExceeded".to_string(),
            "Job was active longer than specified deadline".to_string(),
        ))
    } else {
        None
    };
    if let Some((reason, message)) = failure {
        if !st.is_true("FailureTarget") {
            set_condition(st, "FailureTarget", "True", &reason, &message, now);
        }
        plan.delete = active.iter().map(|p| p.metadata.name.clone()).collect();
        st.active = Some(0);
        if active.is_empty() && terminating == 0 {
            set_condition(st, "Failed", "True", &reason, &message, now);
            plan.events.push((true, leak_reason(&reason), message));
        }
        return plan;
    }
    if let Some(d) = deadline {
        plan.requeue = Some(Duration::from_secs((d - now.0).max(1) as u64));
    }

    // Success: a success policy's rule met, or every completion reached.
    let by_policy = spec
        .success_policy
        .as_ref()
        .filter(|_| indexed)
        .and_then(|p| success_policy_match(p, completions.unwrap_or(0), &succeeded_indexes));
    let complete = match completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active.is_empty(),
    };
    if complete || by_policy.is_some() || st.is_true("SuccessCriteriaMet") {
        if !st.is_true("SuccessCriteriaMet") {
            let (reason, message) = match by_policy {
                Some(m) if !complete => ("SuccessPolicy", m),
                _ => ("CompletionsReached", COMPLETIONS_REACHED.to_string()),
            };
            set_condition(st, "SuccessCriteriaMet", "True", reason, &message, now);
        }
        plan.delete = active.iter().map(|p| p.metadata.name.clone()).collect();
        st.active = Some(0);
        if active.is_empty() && terminating == 0 {
            // Complete says what SuccessCriteriaMet said.
            let met = st.condition("SuccessCriteriaMet");
            let reason = met
                .and_then(|c| c.reason.clone())
                .unwrap_or_else(|| "CompletionsReached".into());
            let message = met
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| COMPLETIONS_REACHED.into());
            set_condition(st, "Complete", "True", &reason, &message, now);
            st.completion_time = Some(now);
            plan.events
                .push((false, "Completed", "Job completed".into()));
        }
        return plan;
    }

    // Pods to run: no new ones while backing off after failures.
    let last_success = succeeded_pods.iter().map(|p| finish_time(p)).max();
    let recent_failures: Vec<i64> = counted_failures
        .iter()
        .map(|p| finish_time(p))
        .filter(|t| last_success.is_none_or(|s| *t >= s))
        .collect();
    let wait = match recent_failures.iter().max() {
        Some(last) => {
            let until = last + backoff_delay(recent_failures.len() as u32).as_secs() as i64;
            (until - now.0).max(0)
        }
        None => 0,
    };
    let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
    let mut keep: Vec<&Pod> = Vec::new();
    if indexed {
        let c = completions.unwrap_or(0);
        let mut seen = BTreeSet::new();
        // Pods of an index already done, a duplicate or an invalid index go.
        let mut sorted = active.clone();
        sorted.sort_by_key(|p| p.metadata.creation_timestamp);
        for p in sorted {
            match pod_index(p) {
                Some(i) if i < c && !succeeded_indexes.contains(&i) && seen.insert(i) => {
                    keep.push(p)
                }
                _ => plan.delete.push(p.metadata.name.clone()),
            }
        }
        if keep.len() > parallelism {
            let surplus: Vec<Pod> = keep.iter().map(|p| (*p).clone()).collect();
            let doomed: BTreeSet<String> =
                workload::pods_to_delete(&surplus, keep.len() - parallelism)
                    .into_iter()
                    .map(|p| p.metadata.name.clone())
                    .collect();
            keep.retain(|p| !doomed.contains(&p.metadata.name));
            plan.delete.extend(doomed);
        }
        if wait == 0 {
            let room = parallelism.saturating_sub(keep.len()).min(BURST);
            let running: BTreeSet<i32> = keep.iter().filter_map(|p| pod_index(p)).collect();
            plan.create = (0..c)
                .filter(|i| !succeeded_indexes.contains(i) && !running.contains(i))
                .take(room)
                .map(Some)
                .collect();
        }
    } else {
        let want = match completions {
            Some(c) => (c.saturating_sub(succeeded).max(0) as usize).min(parallelism),
            // Once one pod succeeded no new ones start; the others finish.
            None if succeeded > 0 => active.len().min(parallelism),
            None => parallelism,
        };
        keep = active.clone();
        if active.len() > want {
            let owned: Vec<Pod> = active.iter().map(|p| (*p).clone()).collect();
            let doomed: Vec<String> = workload::pods_to_delete(&owned, active.len() - want)
                .into_iter()
                .map(|p| p.metadata.name.clone())
                .collect();
            keep.retain(|p| !doomed.contains(&p.metadata.name));
            plan.delete.extend(doomed);
        } else if wait == 0 {
            plan.create = vec![None; (want - active.len()).min(BURST)];
        }
    }
    if wait > 0 {
        plan.requeue = Some(plan.requeue.map_or(Duration::from_secs(wait as u64), |r| {
            r.min(Duration::from_secs(wait as u64))
        }));
    }
    st.active = Some((keep.len() + plan.create.len()) as i32);
    plan
}

fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.phase.as_deref(),
        Some("Succeeded") | Some("Failed")
    )
}

fn leak_reason(reason: &str) -> &'static str {
    match reason {
        "BackoffLimitExceeded" => "BackoffLimitExceeded",
        "DeadlineExceeded" => "DeadlineExceeded",
        "PodFailurePolicy" => "PodFailurePolicy",
        _ => "JobFailed",
    }
}

/// A pod of `job`, with the index of an Indexed job as Kubernetes sets it: annotation and
/// label, `JOB_COMPLETION_INDEX` in every container and the hostname `NAME-INDEX`.
pub fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let ns = job.metadata.namespace().to_string();
    let prefix = match index {
        Some(i) => workload::generate_name_prefix(&format!("{}-{i}", job.metadata.name)),
        None => workload::generate_name_prefix(&job.metadata.name),
    };
    let mut pod = workload::pod_from_template(
        &job.spec.template,
        &ns,
        &prefix,
        workload::controller_ref(job),
    );
    if let Some(i) = index {
        let m = &mut pod.metadata;
        m.annotations
            .insert(JOB_COMPLETION_INDEX.into(), i.to_string());
        m.labels.insert(JOB_COMPLETION_INDEX.into(), i.to_string());
        let env = EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: Some("v1".into()),
                    field_path: format!("metadata.annotations['{JOB_COMPLETION_INDEX}']"),
                }),
                ..Default::default()
            }),
        };
        for c in pod
            .spec
            .init_containers
            .iter_mut()
            .chain(pod.spec.containers.iter_mut())
        {
            if !c.env.iter().any(|e| e.name == env.name) {
                c.env.push(env.clone());
            }
        }
        if pod.spec.hostname.as_deref().is_none_or(str::is_empty) {
            pod.spec.hostname = Some(format!("{}-{i}", job.metadata.name));
        }
    }
    pod
}

async fn sync(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let Some(job) = ctx.informers.cache().get::<Job>(ns, name) else {
        return Ok(());
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let pods = owned_pods(ctx, &job);
    let plan = plan(&job, &pods, Time::now());
    if let Some(d) = plan.requeue {
        s.requeue_after(d);
    }
    if plan.delete_job {
        let opts = DeleteOptions {
            propagation_policy: Some("Background".into()),
            preconditions: Some(api::meta::Preconditions {
                uid: Some(job.metadata.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Some((j, _)) = ignore_not_found(ctx.registry.delete::<Job>(ns, name, opts).await)? {
            s.wrote(&j);
        }
        return Ok(());
    }
    let mut result = Ok(());
    if !plan.delete.is_empty() {
        let doomed: Vec<Pod> = pods
            .iter()
            .filter(|p| plan.delete.contains(&p.metadata.name))
            .cloned()
            .collect();
        if let Err(e) = delete_pods(ctx, rec, &job, doomed, s).await {
            result = Err(e);
        }
    }
    if !plan.create.is_empty() {
        if let Err(e) = create_pods(ctx, rec, &job, &plan.create, s).await {
            result = Err(e);
        }
    }
    for (warning, reason, message) in &plan.events {
        if *warning {
            rec.warning(&job, reason, message.clone());
        } else {
            rec.normal(&job, reason, message.clone());
        }
    }
    if plan.status != job.status {
        let status = plan.status;
        let uid = job.metadata.uid.clone();
        let r = ctx
            .registry
            .mutate::<Job>(ns, name, Part::Status, move |j| {
                if j.metadata.uid == uid {
                    j.status = status.clone();
                }
                Ok(())
            })
            .await;
        if let Some(j) = ignore_not_found(r)? {
            s.wrote(&j);
        }
    }
    result
}

/// The pods the Job controls, from the cache.
fn owned_pods(ctx: &Context, job: &Job) -> Vec<Pod> {
    let ns = job.metadata.namespace();
    let uid = job.metadata.uid.as_str();
    let cache = ctx.informers.cache().read();
    cache
        .iter_packed(Kind::Pod, Some(ns))
        .filter(|p| {
            p.meta()
                .is_some_and(|m| workload::controller_uid(&m) == Some(uid))
        })
        .filter_map(|p| p.unpack_as::<Pod>())
        .collect()
}

async fn create_pods(
    ctx: &Context,
    rec: &Recorder,
    job: &Job,
    indexes: &[Option<i32>],
    s: &mut Synced,
) -> Result<(), ApiError> {
    // Slow start, as the ReplicaSet controller: batches of 1, 2, 4...
    let mut rest = indexes;
    let mut batch = 1;
    while !rest.is_empty() {
        let (now, later) = rest.split_at(batch.min(rest.len()));
        let tasks: Vec<_> = now
            .iter()
            .map(|i| {
                let (registry, pod) = (ctx.registry.clone(), new_pod(job, *i));
                smol::spawn(async move { registry.create(pod, None).await })
            })
            .collect();
        let mut failed = None;
        for t in tasks {
            match t.await {
                Ok(p) => {
                    s.wrote(&p);
                    rec.normal(
                        job,
                        "SuccessfulCreate",
                        format!("Created pod: {}", p.metadata.name),
                    );
                }
                Err(e) => {
                    rec.warning(job, "FailedCreate", format!("Error creating: {e}"));
                    failed = Some(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        rest = later;
        batch *= 2;
    }
    Ok(())
}

async fn delete_pods(
    ctx: &Context,
    rec: &Recorder,
    job: &Job,
    pods: Vec<Pod>,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let mut failed = None;
    for p in pods {
        let opts = DeleteOptions {
            preconditions: Some(api::meta::Preconditions {
                uid: Some(p.metadata.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let r = ctx
            .registry
            .delete::<Pod>(p.metadata.namespace(), &p.metadata.name, opts)
            .await;
        match ignore_not_found(r) {
            Ok(Some((d, _))) => {
                s.wrote(&d);
                rec.normal(
                    job,
                    "SuccessfulDelete",
                    format!("Deleted pod: {}", p.metadata.name),
                );
            }
            Ok(None) => {}
            Err(e) => {
                rec.warning(job, "FailedDelete", format!("Error deleting: {e}"));
                failed = Some(e);
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Kept for the CronJob controller: the Job's finished condition, if any.
pub fn finished_condition(job: &Job) -> Option<&str> {
    job.status
        .conditions
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::batch::{
        PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
    };
    use api::core::{ContainerState, ContainerStateTerminated, ContainerStatus};

    const NOW: i64 = 1_800_000_000;

    fn job(completions: Option<i32>, parallelism: i32) -> Job {
        let mut j = Job::default();
        j.metadata.name = "pi".into();
        j.metadata.namespace = Some("default".into());
        j.metadata.uid = "uid-1".into();
        j.spec.completions = completions;
        j.spec.parallelism = Some(parallelism);
        j.spec.template.spec.restart_policy = Some("Never".into());
        j.set_defaults();
        j
    }

    fn pod(name: &str, phase: &str, exit: Option<i32>, finished: i64) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.metadata.creation_timestamp = Some(Time(finished - 5));
        p.status.phase = Some(phase.into());
        if let Some(code) = exit {
            p.status.container_statuses.push(ContainerStatus {
                name: "main".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        finished_at: Some(Time(finished)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn runs_parallelism_pods_until_completions() {
        let j = job(Some(3), 2);
        let p = plan(&j, &[], Time(NOW));
        assert_eq!(p.create, vec![None, None]);
        assert_eq!(p.status.active, Some(2));
        assert_eq!(p.status.start_time, Some(Time(NOW)));

        // Two succeeded: one more pod, not two.
        let pods = [
            pod("a", "Succeeded", Some(0), NOW),
            pod("b", "Succeeded", Some(0), NOW),
        ];
        let p = plan(&j, &pods, Time(NOW));
        assert_eq!(p.create.len(), 1);
        assert_eq!(p.status.succeeded, Some(2));

        let mut pods = pods.to_vec();
        pods.push(pod("c", "Succeeded", Some(0), NOW));
        let p = plan(&j, &pods, Time(NOW + 7));
        assert!(p.create.is_empty());
        assert!(p.status.is_true("SuccessCriteriaMet"));
        assert!(p.status.is_true("Complete"));
        let c = p.status.condition("Complete").unwrap();
        assert_eq!(c.reason.as_deref(), Some("CompletionsReached"));
        assert_eq!(p.status.completion_time, Some(Time(NOW + 7)));
    }

    #[test]
    fn complete_waits_for_surplus_pods_to_go() {
        let j = job(Some(1), 2);
        let mut running = pod("r", "Running", None, NOW);
        running.status.container_statuses.clear();
        let pods = [pod("a", "Succeeded", Some(0), NOW), running];
        let p = plan(&j, &pods, Time(NOW));
        assert!(p.status.is_true("SuccessCriteriaMet"));
        assert!(!p.status.is_true("Complete"));
        assert_eq!(p.delete, vec!["r".to_string()]);
    }

    #[test]
    fn a_success_policy_rule_met_ends_an_indexed_job() {
        let mut j = job(Some(5), 5);
        j.spec.completion_mode = Some("Indexed".into());
        j.spec.success_policy = Some(api::batch::SuccessPolicy {
            rules: vec![
                api::batch::SuccessPolicyRule {
                    succeeded_indexes: Some("0-2".into()),
                    succeeded_count: None,
                },
                api::batch::SuccessPolicyRule {
                    succeeded_indexes: Some("3-4".into()),
                    succeeded_count: Some(1),
                },
            ],
        });
        let indexed = |i: i32, phase: &str| {
            let mut p = pod(&format!("pi-{i}-x"), phase, None, NOW);
            p.metadata
                .annotations
                .insert(JOB_COMPLETION_INDEX.into(), i.to_string());
            p
        };
        // Index 0 and 1 of rule 0 are not enough.
        let pods = [indexed(0, "Succeeded"), indexed(1, "Succeeded")];
        let p = plan(&j, &pods, Time(NOW));
        assert!(!p.status.is_true("SuccessCriteriaMet"));
        // One of 3-4 meets rule 1: the running pods are stopped, then the job completes.
        let pods = [
            indexed(0, "Succeeded"),
            indexed(4, "Succeeded"),
            indexed(2, "Running"),
        ];
        let p = plan(&j, &pods, Time(NOW));
        let met = p.status.condition("SuccessCriteriaMet").unwrap();
        assert_eq!(met.reason.as_deref(), Some("SuccessPolicy"));
        assert_eq!(met.message.as_deref(), Some("Matched rules at index 1"));
        assert!(!p.status.is_true("Complete"));
        assert_eq!(p.delete, vec!["pi-2-x".to_string()]);
        let mut j2 = j.clone();
        j2.status = p.status;
        let p = plan(&j2, &pods[..2], Time(NOW + 1));
        let c = p.status.condition("Complete").unwrap();
        assert_eq!(c.reason.as_deref(), Some("SuccessPolicy"));
        assert_eq!(c.message.as_deref(), Some("Matched rules at index 1"));
    }

    #[test]
    fn indexed_pods_fill_missing_indexes() {
        let mut j = job(Some(4), 2);
        j.spec.completion_mode = Some("Indexed".into());
        let mut done = pod("pi-0-x", "Succeeded", Some(0), NOW);
        done.metadata
            .annotations
            .insert(JOB_COMPLETION_INDEX.into(), "0".into());
        let mut busy = pod("pi-2-x", "Running", None, NOW);
        busy.metadata
            .annotations
            .insert(JOB_COMPLETION_INDEX.into(), "2".into());
        let p = plan(&j, &[done, busy], Time(NOW));
        assert_eq!(p.create, vec![Some(1)]);
        assert_eq!(p.status.completed_indexes.as_deref(), Some("0"));

        let pod = new_pod(&j, Some(3));
        assert_eq!(pod.metadata.annotations[JOB_COMPLETION_INDEX], "3");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-3-"));
        assert_eq!(pod.spec.hostname.as_deref(), Some("pi-3"));
        assert_eq!(compress_indexes(&[0, 1, 2, 4, 6, 7].into()), "0-2,4,6-7");
    }

    #[test]
    fn failures_back_off_then_exceed_the_limit() {
        assert_eq!(backoff_delay(1), Duration::from_secs(10));
        assert_eq!(backoff_delay(2), Duration::from_secs(20));
        assert_eq!(backoff_delay(3), Duration::from_secs(40));
        assert_eq!(backoff_delay(10), BACKOFF_MAX);

        let mut j = job(Some(1), 1);
        j.spec.backoff_limit = Some(2);
        let one = [pod("a", "Failed", Some(1), NOW)];
        let p = plan(&j, &one, Time(NOW + 3));
        assert!(p.create.is_empty(), "backing off");
        assert_eq!(p.requeue, Some(Duration::from_secs(7)));
        let p = plan(&j, &one, Time(NOW + 10));
        assert_eq!(p.create.len(), 1);

        let three = [
            pod("a", "Failed", Some(1), NOW),
            pod("b", "Failed", Some(1), NOW + 10),
            pod("c", "Failed", Some(1), NOW + 30),
        ];
        let p = plan(&j, &three, Time(NOW + 31));
        assert!(p.status.is_true("Failed"));
        assert!(p.status.is_true("FailureTarget"));
        let c = p.status.condition("Failed").unwrap();
        assert_eq!(c.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(
            c.message.as_deref(),
            Some("Job has reached the specified backoff limit")
        );
        assert_eq!(p.status.failed, Some(3));
    }

    #[test]
    fn pod_failure_policy_fails_ignores_or_counts() {
        let mut j = job(Some(1), 1);
        j.spec.pod_failure_policy = Some(PodFailurePolicy {
            rules: vec![
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: "In".into(),
                        values: vec![42],
                    }),
                    on_pod_conditions: vec![],
                },
                PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: "In".into(),
                        values: vec![7],
                    }),
                    on_pod_conditions: vec![],
                },
            ],
        });
        let p = plan(&j, &[pod("a", "Failed", Some(7), NOW)], Time(NOW + 1));
        assert_eq!(p.status.failed, Some(0), "ignored");
        assert_eq!(p.create.len(), 1, "ignored failures do not back off");

        let p = plan(&j, &[pod("a", "Failed", Some(42), NOW)], Time(NOW + 1));
        let c = p.status.condition("Failed").unwrap();
        assert_eq!(c.reason.as_deref(), Some("PodFailurePolicy"));
        assert_eq!(
            c.message.as_deref(),
            Some("Container main for pod default/a failed with exit code 42 matching FailJob rule at index 0")
        );
    }

    /// activeDeadlineSeconds is any positive int64, restart counts come from pod statuses,
    /// indexes from pod annotations: none of them may overflow the plan.
    #[test]
    fn extreme_deadlines_restarts_and_indexes() {
        let mut j = job(Some(1), 1);
        j.spec.active_deadline_seconds = Some(i64::MAX);
        j.spec.template.spec.restart_policy = Some("OnFailure".into());
        j.status.start_time = Some(Time(NOW));
        let mut running = pod("a", "Running", None, NOW);
        for n in ["c1", "c2"] {
            running.status.container_statuses.push(ContainerStatus {
                name: n.into(),
                restart_count: i32::MAX,
                ..Default::default()
            });
        }
        let p = plan(&j, std::slice::from_ref(&running), Time(NOW + 10));
        assert_eq!(
            p.status
                .condition("FailureTarget")
                .and_then(|c| c.reason.clone())
                .as_deref(),
            Some("BackoffLimitExceeded")
        );
        running.status.container_statuses.clear();
        let p = plan(&j, std::slice::from_ref(&running), Time(NOW + 10));
        assert!(!p.status.is_true("FailureTarget"));
        assert_eq!(
            p.requeue,
            Some(Duration::from_secs((i64::MAX - NOW - 10) as u64))
        );
        assert_eq!(
            compress_indexes(&[i32::MAX - 1, i32::MAX].into()),
            format!("{}-{}", i32::MAX - 1, i32::MAX)
        );
        assert_eq!(
            compress_indexes(&[0, i32::MAX].into()),
            format!("0,{}", i32::MAX)
        );
        let mut c = job(Some(i32::MAX), 1);
        c.spec.completions = Some(i32::MIN);
        let p = plan(&c, &[pod("s", "Succeeded", Some(0), NOW)], Time(NOW));
        assert!(p.create.is_empty());
    }

    #[test]
    fn deadline_suspend_and_ttl() {
        let mut j = job(Some(1), 1);
        j.spec.active_deadline_seconds = Some(30);
        j.status.start_time = Some(Time(NOW));
        let running = pod("a", "Running", None, NOW);
        let p = plan(&j, std::slice::from_ref(&running), Time(NOW + 10));
        assert_eq!(p.requeue, Some(Duration::from_secs(20)));
        let p = plan(&j, std::slice::from_ref(&running), Time(NOW + 30));
        assert_eq!(p.delete, vec!["a".to_string()]);
        assert_eq!(
            p.status
                .condition("FailureTarget")
                .unwrap()
                .reason
                .as_deref(),
            Some("DeadlineExceeded")
        );
        assert!(!p.status.is_true("Failed"), "waits for the pod to go");
        let p = plan(&j, &[], Time(NOW + 31));
        assert!(p.status.is_true("Failed"));

        let mut s = job(Some(1), 1);
        s.spec.suspend = Some(true);
        let p = plan(&s, std::slice::from_ref(&running), Time(NOW));
        assert!(p.status.is_true("Suspended"));
        assert_eq!(p.delete, vec!["a".to_string()]);
        assert!(p.create.is_empty());

        let mut done = job(Some(1), 1);
        done.spec.ttl_seconds_after_finished = Some(100);
        let mut st = api::batch::JobStatus::default();
        set_condition(
            &mut st,
            "Complete",
            "True",
            "CompletionsReached",
            "",
            Time(NOW),
        );
        done.status = st;
        assert_eq!(
            plan(&done, &[], Time(NOW + 40)).requeue,
            Some(Duration::from_secs(60))
        );
        assert!(plan(&done, &[], Time(NOW + 100)).delete_job);
    }
}
