//! CronJob controller: creates a Job at each scheduled time (in the CronJob's time zone),
//! as Kubernetes' cronjob controller v2 does: only the most recent missed time runs, a time
//! later than `startingDeadlineSeconds` is missed, more than 100 missed times is a warning,
//! the concurrency policy decides about runs that overlap, and finished Jobs beyond the
//! history limits are deleted.
//!
//! What to do is decided by [`plan`], a pure function of the CronJob, its Jobs and the time;
//! the controller's clock is injectable ([`start_with_clock`]) so tests need not wait.

use std::sync::Arc;
use std::time::Duration;

use api::batch::{parse_time_zone, CronJob, Job, Schedule, TimeZone, CRONJOB_SCHEDULED_TIMESTAMP};
use api::core::ObjectReference;
use api::meta::{DeleteOptions, Time};
use api::object::Resource;
use api::Kind;

use super::job::finished_condition;
use super::workload;
use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

/// More missed start times than this is a warning (Kubernetes' limit).
pub const MAX_MISSED: u64 = 100;

/// The controller's clock: Unix seconds.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

pub fn start(ctx: &Context) {
    start_with_clock(ctx, Arc::new(|| Time::now().0));
}

/// [`start`] with the clock `now`.
pub fn start_with_clock(ctx: &Context, now: Clock) {
    let recorder = Recorder::start(ctx.registry.clone(), "cronjob-controller");
    let queue = fed_queue::<CronJob, _>(ctx, &[Kind::CronJob, Kind::Job], keys_for);
    let ctx = ctx.clone();
    spawn_workers(
        "cronjob",
        ctx.informers.clone(),
        queue,
        1,
        move |key, mut s| {
            let (ctx, recorder, now) = (ctx.clone(), recorder.clone(), now.clone());
            async move {
                let r = sync(&ctx, &recorder, &key, now(), &mut s).await;
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
            .list::<CronJob>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(cj) = CronJob::from_any_ref(obj) {
        return vec![key_of(cj)];
    }
    let mut keys = Vec::new();
    if let Some(job) = Job::from_any_ref(obj) {
        if let Some(r) = job
            .metadata
            .controller_ref()
            .filter(|r| r.kind == "CronJob")
        {
            keys.push((job.metadata.namespace().to_string(), r.name.clone()));
        }
    }
    keys
}

/// What one pass does for a CronJob.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// The status to write.
    pub status: api::batch::CronJobStatus,
    /// Create the Job of this scheduled time (Unix seconds).
    pub create: Option<i64>,
    /// Names of Jobs to delete: replaced runs and history beyond the limits.
    pub delete: Vec<String>,
    /// Look again after this long (the next scheduled time).
    pub requeue: Option<Duration>,
    /// Events: (warning, reason, message).
    pub events: Vec<(bool, &'static str, String)>,
}

/// The name of the Job of `cj` scheduled at `t`: the minutes since the epoch, so a Job is
/// never created twice for one time.
pub fn job_name(cj: &CronJob, t: i64) -> String {
    format!("{}-{}", cj.metadata.name, t / 60)
}

/// The most recent scheduled time in `(earliest, now]` and how many there are.
fn most_recent(
    sched: &Schedule,
    tz: Option<TimeZone>,
    earliest: i64,
    now: i64,
) -> (Option<i64>, u64) {
    let Some(first) = sched.next_after(earliest, tz) else {
        return (None, 0);
    };
    if first > now {
        return (None, 0);
    }
    let last = sched.last_at_or_before(now, tz).unwrap_or(first);
    // Count exactly up to a bound, then estimate from the interval (as Kubernetes does for
    // clocks off by years).
    let mut n = 1u64;
    let mut t = first;
    while t < last && n <= 10_000 {
        match sched.next_after(t, tz) {
            Some(next) if next <= last => {
                n += 1;
                t = next;
            }
            _ => break,
        }
    }
    if t < last {
        let step = sched
            .next_after(first, tz)
            .map_or(60, |s| (s - first).max(1));
        n = ((last - first) / step) as u64 + 1;
    }
    (Some(last), n)
}

/// One pass of the CronJob controller over `cj` and the Jobs it owns, at `now` (Unix
/// seconds).
pub fn plan(cj: &CronJob, jobs: &[Job], now: i64) -> Plan {
    let mut plan = Plan {
        status: cj.status.clone(),
        ..Default::default()
    };
    let st = &mut plan.status;

    // The active list follows the Jobs: finished ones leave it, missing ones too.
    for j in jobs {
        let listed = st
            .active
            .iter()
            .any(|r| r.uid.as_deref() == Some(&j.metadata.uid));
        match finished_condition(j) {
            Some(cond) => {
                if listed {
                    st.active
                        .retain(|r| r.uid.as_deref() != Some(&j.metadata.uid));
                    plan.events.push((
                        false,
                        "SawCompletedJob",
                        format!("Saw completed job: {}, condition: {cond}", j.metadata.name),
                    ));
                }
                if cond == "Complete" {
                    if let Some(t) = j.status.completion_time {
                        if st.last_successful_time.is_none_or(|l| l < t) {
                            st.last_successful_time = Some(t);
                        }
                    }
                }
            }
            // Not ours to list (`kubectl create job --from=cronjob/...`, or a Job whose
            // status write was lost): Kubernetes only reports it.
            None if !listed && j.metadata.deletion_timestamp.is_none() => {
                plan.events.push((
                    true,
                    "UnexpectedJob",
                    format!(
                        "Saw a job that the controller did not create or forgot: {}",
                        j.metadata.name
                    ),
                ));
            }
            None => {}
        }
    }
    let missing: Vec<ObjectReference> = st
        .active
        .iter()
        .filter(|r| {
            !jobs
                .iter()
                .any(|j| r.uid.as_deref() == Some(&j.metadata.uid))
        })
        .cloned()
        .collect();
    for r in missing {
        st.active.retain(|a| a.uid != r.uid);
        plan.events.push((
            false,
            "MissingJob",
            format!(
                "Active job went missing: {}",
                r.name.clone().unwrap_or_default()
            ),
        ));
    }
    st.active.sort_by(|a, b| a.name.cmp(&b.name));

    plan.delete = history_to_delete(cj, jobs);
    if cj.metadata.deletion_timestamp.is_some() {
        return plan;
    }
    let tz = match cj.spec.time_zone.as_deref().map(parse_time_zone) {
        None => None,
        Some(Ok(tz)) => Some(tz),
        Some(Err(_)) => {
            plan.events.push((
                true,
                "UnknownTimeZone",
                format!(
                    "invalid timeZone: {:?}: unknown time zone",
                    cj.spec.time_zone.as_deref().unwrap_or("")
                ),
            ));
            return plan;
        }
    };
    if cj.spec.suspend == Some(true) {
        return plan;
    }
    let sched = match Schedule::parse(&cj.spec.schedule) {
        Ok(s) => s,
        Err(e) => {
            plan.events.push((
                true,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {e}", cj.spec.schedule),
            ));
            return plan;
        }
    };
    let requeue_from = |t: i64| {
        sched.next_after(t, tz).map(|next| {
            Duration::from_secs((next - now).max(0) as u64) + Duration::from_millis(100)
        })
    };
    let mut earliest = st
        .last_schedule_time
        .or(cj.metadata.creation_timestamp)
        .map_or(now, |t| t.0);
    // startingDeadlineSeconds is any int64 validation lets through (not negative): both
    // bounds saturate.
    if let Some(d) = cj.spec.starting_deadline_seconds {
        earliest = earliest.max(now.saturating_sub(d));
    }
    let (scheduled, missed) = most_recent(&sched, tz, earliest, now);
    plan.requeue = requeue_from(now);
    let Some(scheduled) = scheduled else {
        return plan;
    };
    if missed > MAX_MISSED {
        plan.events.push((
            true,
            "TooManyMissedTimes",
            format!("too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"),
        ));
    }
    if let Some(d) = cj.spec.starting_deadline_seconds {
        if scheduled.saturating_add(d) < now {
            plan.events.push((
                true,
                "MissSchedule",
                format!(
                    "Missed scheduled time to start a job: {}",
                    Schedule::rfc1123z(scheduled)
                ),
            ));
            return plan;
        }
    }
    let name = job_name(cj, scheduled);
    if st.active.iter().any(|r| r.name.as_deref() == Some(&name))
        || st.last_schedule_time == Some(Time(scheduled))
    {
        return plan;
    }
    match cj.spec.concurrency_policy.as_deref() {
        Some("Forbid") if !st.active.is_empty() => {
            plan.events.push((
                false,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid".into(),
            ));
            return plan;
        }
        Some("Replace") => {
            for r in std::mem::take(&mut st.active) {
                if let Some(n) = r.name {
                    plan.delete.push(n);
                }
            }
        }
        _ => {}
    }
    plan.create = Some(scheduled);
    st.last_schedule_time = Some(Time(scheduled));
    plan
}

/// Finished Jobs beyond the history limits, oldest first.
fn history_to_delete(cj: &CronJob, jobs: &[Job]) -> Vec<String> {
    let mut out = Vec::new();
    for (cond, limit) in [
        ("Complete", cj.spec.successful_jobs_history_limit),
        ("Failed", cj.spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut done: Vec<&Job> = jobs
            .iter()
            .filter(|j| {
                j.metadata.deletion_timestamp.is_none() && finished_condition(j) == Some(cond)
            })
            .collect();
        let limit = limit.max(0) as usize;
        if done.len() <= limit {
            continue;
        }
        done.sort_by_key(|j| {
            (
                j.status.start_time,
                j.metadata.creation_timestamp,
                j.metadata.name.clone(),
            )
        });
        let surplus = done.len() - limit;
        out.extend(
            done.into_iter()
                .take(surplus)
                .map(|j| j.metadata.name.clone()),
        );
    }
    out
}

fn reference(j: &Job) -> ObjectReference {
    ObjectReference {
        kind: Some("Job".into()),
        namespace: Some(j.metadata.namespace().to_string()),
        name: Some(j.metadata.name.clone()),
        uid: Some(j.metadata.uid.clone()),
        api_version: Some("batch/v1".into()),
        resource_version: Some(j.metadata.resource_version.clone()),
        ..Default::default()
    }
}

/// The Job of `cj` for scheduled time `t` (Kubernetes' getJobFromTemplate2).
pub fn new_job(cj: &CronJob, t: i64) -> Job {
    let tmpl = &cj.spec.job_template;
    let tz = cj
        .spec
        .time_zone
        .as_deref()
        .and_then(|z| parse_time_zone(z).ok());
    let mut job = Job {
        spec: tmpl.spec.clone(),
        ..Default::default()
    };
    let m = &mut job.metadata;
    m.name = job_name(cj, t);
    m.namespace = Some(cj.metadata.namespace().to_string());
    m.labels = tmpl.metadata.labels.clone();
    m.annotations = tmpl.metadata.annotations.clone();
    m.annotations
        .insert(CRONJOB_SCHEDULED_TIMESTAMP.into(), Schedule::rfc3339(t, tz));
    m.owner_references = vec![workload::controller_ref(cj)];
    job
}

async fn sync(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    now: i64,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let Some(cj) = ctx.informers.cache().get::<CronJob>(ns, name) else {
        return Ok(());
    };
    let uid = cj.metadata.uid.clone();
    let jobs: Vec<Job> = ctx
        .informers
        .cache()
        .read()
        .iter::<Job>(Some(ns))
        .filter(|j| workload::controller_uid(&j.metadata) == Some(uid.as_str()))
        .collect();
    let mut plan = plan(&cj, &jobs, now);
    if let Some(d) = plan.requeue {
        s.requeue_after(d);
    }
    for (warning, reason, message) in &plan.events {
        if *warning {
            rec.warning(&cj, reason, message.clone());
        } else {
            rec.normal(&cj, reason, message.clone());
        }
    }
    for doomed in &plan.delete {
        let opts = DeleteOptions {
            propagation_policy: Some("Background".into()),
            ..Default::default()
        };
        match ignore_not_found(ctx.registry.delete::<Job>(ns, doomed, opts).await) {
            Ok(Some((j, _))) => {
                s.wrote(&j);
                rec.normal(&cj, "SuccessfulDelete", format!("Deleted job {doomed}"));
            }
            Ok(None) => {}
            Err(e) => {
                rec.warning(&cj, "FailedDelete", format!("Deleted job: {e}"));
                return Err(e);
            }
        }
    }
    if let Some(t) = plan.create {
        match ctx.registry.create(new_job(&cj, t), None).await {
            Ok(j) => {
                s.wrote(&j);
                rec.normal(
                    &cj,
                    "SuccessfulCreate",
                    format!("Created job {}", j.metadata.name),
                );
                plan.status.active.push(reference(&j));
            }
            Err(e) if e.code() == 409 => {
                // Created by an earlier pass whose status write was lost (the name is the
                // lock): ours, it joins the active list.
                let existing = ctx
                    .informers
                    .cache()
                    .get::<Job>(ns, &job_name(&cj, t))
                    .ok_or(e)?;
                if workload::controller_uid(&existing.metadata) != Some(cj.metadata.uid.as_str()) {
                    return Ok(());
                }
                if !plan
                    .status
                    .active
                    .iter()
                    .any(|r| r.uid.as_deref() == Some(&existing.metadata.uid))
                {
                    plan.status.active.push(reference(&existing));
                }
            }
            Err(e) => {
                rec.warning(&cj, "FailedCreate", format!("Error creating job: {e}"));
                return Err(e);
            }
        }
    }
    if plan.status != cj.status {
        let status = plan.status;
        let r = ctx
            .registry
            .mutate::<CronJob>(ns, name, Part::Status, move |c| {
                if c.metadata.uid == uid {
                    c.status = status.clone();
                }
                Ok(())
            })
            .await;
        if let Some(c) = ignore_not_found(r)? {
            s.wrote(&c);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2027-01-15 08:00:00 UTC, on the hour.
    const T0: i64 = 1_800_000_000;

    fn cron(schedule: &str) -> CronJob {
        let mut c = CronJob::default();
        c.metadata.name = "tick".into();
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = "cj-uid".into();
        c.metadata.creation_timestamp = Some(Time(T0));
        c.spec.schedule = schedule.into();
        c.spec.time_zone = Some("Etc/UTC".into());
        c.set_defaults();
        c
    }

    fn child(c: &CronJob, t: i64, cond: Option<&str>) -> Job {
        let mut j = new_job(c, t);
        j.metadata.uid = format!("job-{t}");
        j.metadata.creation_timestamp = Some(Time(t));
        j.status.start_time = Some(Time(t));
        if let Some(cond) = cond {
            j.status.conditions.push(api::batch::JobCondition {
                type_: cond.into(),
                status: "True".into(),
                ..Default::default()
            });
            j.status.completion_time = Some(Time(t + 5));
        }
        j
    }

    /// startingDeadlineSeconds of any int64, and schedule times at either end of what an
    /// object can hold: no overflow, and no schedule search that never ends.
    #[test]
    fn extreme_deadlines_and_schedule_times() {
        for d in [i64::MAX, i64::MIN, 0, 1] {
            let mut c = cron("*/5 * * * *");
            c.spec.starting_deadline_seconds = Some(d);
            let p = plan(&c, &[], T0 + 301);
            let due = (d == i64::MAX).then_some(T0 + 300);
            assert_eq!(p.create, due, "{d}");
        }
        for last in [Time::MAX, Time(0), Time(i64::MAX), Time(i64::MIN)] {
            for schedule in ["*/5 * * * *", "0 0 30 2 *", "@yearly"] {
                let mut c = cron(schedule);
                c.status.last_schedule_time = Some(last);
                c.spec.starting_deadline_seconds = Some(i64::MAX);
                let started = std::time::Instant::now();
                let _ = plan(&c, &[], T0 + 301);
                let _ = plan(&c, &[], Time::MAX.0);
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{schedule} {last:?}"
                );
            }
        }
    }

    #[test]
    fn creates_the_job_of_each_scheduled_time_once() {
        let c = cron("*/5 * * * *");
        let p = plan(&c, &[], T0 + 299);
        assert_eq!(p.create, None);
        assert_eq!(p.requeue, Some(Duration::from_millis(1100)));
        let p = plan(&c, &[], T0 + 301);
        assert_eq!(p.create, Some(T0 + 300));
        assert_eq!(p.status.last_schedule_time, Some(Time(T0 + 300)));
        let job = new_job(&c, T0 + 300);
        assert_eq!(job.metadata.name, format!("tick-{}", (T0 + 300) / 60));
        assert_eq!(
            job.metadata.annotations[CRONJOB_SCHEDULED_TIMESTAMP],
            Schedule::rfc3339(T0 + 300, Some(TimeZone::UTC))
        );
        assert_eq!(job.metadata.owner_references[0].kind, "CronJob");

        // Once scheduled (status written), the same time is not run again.
        let mut done = c.clone();
        done.status = p.status.clone();
        assert_eq!(plan(&done, &[], T0 + 400).create, None);
    }

    #[test]
    fn time_zones_and_macros() {
        let mut c = cron("0 12 * * *");
        c.spec.time_zone = Some("Asia/Tokyo".into()); // UTC+9: noon there is 03:00 UTC
        let day = T0 - T0 % 86_400;
        let p = plan(&c, &[], day + 86_400 + 3 * 3600 + 1);
        assert_eq!(p.create, Some(day + 86_400 + 3 * 3600));
        assert!(Schedule::parse("@hourly").is_ok());
        assert!(Schedule::parse("@every 5m").is_err());
        assert!(Schedule::parse("* * * *").is_err());
        assert!(Schedule::parse("61 * * * *").is_err());
    }

    #[test]
    fn only_the_most_recent_missed_run_starts_and_many_missed_warn() {
        // Down for three hours with an hourly schedule: one run, for the last time.
        let c = cron("0 * * * *");
        let p = plan(&c, &[], T0 + 3 * 3600 + 10);
        assert_eq!(p.create, Some(T0 + 3 * 3600));
        assert!(p.events.iter().all(|e| e.1 != "TooManyMissedTimes"));

        // Every minute for three hours: 180 missed, a warning, still the last one runs.
        let c = cron("* * * * *");
        let p = plan(&c, &[], T0 + 3 * 3600 + 10);
        assert_eq!(p.create, Some(T0 + 3 * 3600));
        let warn = p
            .events
            .iter()
            .find(|e| e.1 == "TooManyMissedTimes")
            .unwrap();
        assert!(warn.0);
        assert!(
            warn.2.starts_with("too many missed start times: 180."),
            "{}",
            warn.2
        );

        // A starting deadline bounds the look back, and a time past it is missed.
        let mut c = cron("0 * * * *");
        c.spec.starting_deadline_seconds = Some(60);
        let p = plan(&c, &[], T0 + 3600 + 30);
        assert_eq!(p.create, Some(T0 + 3600));
        let p = plan(&c, &[], T0 + 3600 + 90);
        assert_eq!(p.create, None, "past the deadline");
        // Without a deadline the same late start still runs.
        c.spec.starting_deadline_seconds = None;
        assert_eq!(plan(&c, &[], T0 + 3600 + 90).create, Some(T0 + 3600));
    }

    #[test]
    fn concurrency_policies() {
        let mut c = cron("*/5 * * * *");
        let running = child(&c, T0 + 300, None);
        // A Job the controller did not list is only reported.
        let p = plan(&c, std::slice::from_ref(&running), T0 + 301);
        assert!(p.status.active.is_empty());
        assert!(p.events.iter().any(|e| e.0 && e.1 == "UnexpectedJob"));
        c.status.active.push(reference(&running));
        c.status.last_schedule_time = Some(Time(T0 + 300));
        // Allow: a second run starts alongside.
        let p = plan(&c, std::slice::from_ref(&running), T0 + 601);
        assert_eq!(p.create, Some(T0 + 600));
        assert_eq!(p.status.active.len(), 1);
        // Forbid: it waits.
        c.spec.concurrency_policy = Some("Forbid".into());
        let p = plan(&c, std::slice::from_ref(&running), T0 + 601);
        assert_eq!(p.create, None);
        assert!(p.events.iter().any(|e| e.1 == "JobAlreadyActive"));
        // Replace: the running one goes.
        c.spec.concurrency_policy = Some("Replace".into());
        let p = plan(&c, std::slice::from_ref(&running), T0 + 601);
        assert_eq!(p.create, Some(T0 + 600));
        assert_eq!(p.delete, vec![running.metadata.name.clone()]);
    }

    #[test]
    fn finished_jobs_leave_active_and_history_is_trimmed() {
        let mut c = cron("*/5 * * * *");
        c.spec.suspend = Some(true);
        c.spec.successful_jobs_history_limit = Some(2);
        let jobs: Vec<Job> = (1..=4)
            .map(|i| child(&c, T0 + i * 300, Some("Complete")))
            .chain([
                child(&c, T0 + 1500, Some("Failed")),
                child(&c, T0 + 1800, Some("Failed")),
            ])
            .collect();
        c.status.active.push(reference(&jobs[3]));
        let p = plan(&c, &jobs, T0 + 2000);
        assert!(p.status.active.is_empty());
        assert_eq!(p.status.last_successful_time, Some(Time(T0 + 1205)));
        assert_eq!(
            p.delete,
            vec![
                jobs[0].metadata.name.clone(),
                jobs[1].metadata.name.clone(),
                jobs[4].metadata.name.clone()
            ]
        );
        assert_eq!(p.create, None, "suspended");
        assert!(p.events.iter().any(|e| e.1 == "SawCompletedJob"));
    }
}
