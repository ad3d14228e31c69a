//! batch/v1 kinds: Job and CronJob.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{spec_and_status, PodTemplateSpec};
use crate::meta::{LabelSelector, ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The label (and selector key) naming the uid of a Job's pods' Job.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label naming a Job's pods' Job.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The labels Kubernetes set before the `batch.kubernetes.io/` prefix, still set for old
/// selectors and tools.
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// The annotation (and label) with the completion index of an Indexed Job's pod.
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The annotation a CronJob puts on its Jobs: the scheduled time, RFC 3339.
pub const CRONJOB_SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Indexed Jobs may have at most this many completions (and parallelism).
const MAX_INDEXED_COMPLETIONS: i32 = 100_000;

// ---------------------------------------------------------------------------------------
// Job

/// batch/v1 Job.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.Job")]
#[schemars(description = "Job represents the configuration of a single job.")]
pub struct Job {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Specification of the desired behavior of a job.
    pub spec: JobSpec,
    /// Current status of a job. Read-only.
    pub status: JobStatus,
}

/// batch/v1 JobSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.JobSpec")]
#[schemars(description = "JobSpec describes how the job execution will look like.")]
pub struct JobSpec {
    /// Maximum number of pods the job runs at any time. Default: 1.
    pub parallelism: Option<i32>,
    /// Number of successfully finished pods the job needs. Unset: any pod's success (with
    /// all others done) completes the job. Default: 1 when parallelism is unset too.
    pub completions: Option<i32>,
    /// Seconds, relative to startTime, that the job may be active before the system tries
    /// to terminate it; must be positive.
    pub active_deadline_seconds: Option<i64>,
    /// How failed pods fail the job, ignore the failure or count it (restartPolicy Never).
    pub pod_failure_policy: Option<PodFailurePolicy>,
    /// When an Indexed job may be declared succeeded before all its indexes have (its
    /// remaining pods are then stopped).
    pub success_policy: Option<SuccessPolicy>,
    /// Number of retries before the job is marked failed. Default: 6.
    pub backoff_limit: Option<i32>,
    /// Retries per index of an Indexed job (Kept, not acted on).
    pub backoff_limit_per_index: Option<i32>,
    /// Failed indexes after which the job fails (Kept, not acted on).
    pub max_failed_indexes: Option<i32>,
    /// Label query over the pods; generated from the job's uid unless manualSelector.
    pub selector: Option<LabelSelector>,
    /// Whether the selector is set by hand rather than generated.
    pub manual_selector: Option<bool>,
    /// Template of the pods the job runs.
    pub template: PodTemplateSpec,
    /// Seconds after the job finished (Complete or Failed) that it is deleted.
    pub ttl_seconds_after_finished: Option<i32>,
    /// NonIndexed (default) or Indexed: each pod gets an index 0..completions-1.
    pub completion_mode: Option<String>,
    /// Whether the job's pods are stopped and no new ones created. Default: false.
    pub suspend: Option<bool>,
    /// When replacement pods are created: TerminatingOrFailed (default) or Failed.
    pub pod_replacement_policy: Option<String>,
    /// The controller that manages the job (Kept; only the built-in one acts).
    pub managed_by: Option<String>,
}

/// batch/v1 SuccessPolicy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.SuccessPolicy")]
#[schemars(
    description = "SuccessPolicy describes when a Job can be declared as succeeded based on the success of some indexes."
)]
pub struct SuccessPolicy {
    /// The rules, evaluated in order; the first one met declares the job succeeded (1..20).
    pub rules: Vec<SuccessPolicyRule>,
}

/// batch/v1 SuccessPolicyRule: at least one of the two fields is set.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.SuccessPolicyRule")]
#[schemars(description = "SuccessPolicyRule describes rule for declaring a Job as succeeded.")]
pub struct SuccessPolicyRule {
    /// Indexes that must all have succeeded (`1,3-5`); with succeededCount, how many of them.
    pub succeeded_indexes: Option<String>,
    /// How many indexes (of succeededIndexes when set) must have succeeded.
    pub succeeded_count: Option<i32>,
}

/// The most characters a success policy rule's succeededIndexes may have.
const MAX_SUCCEEDED_INDEXES_LENGTH: usize = 64 * 1024;

/// Parses Kubernetes' compressed index list (`1,3-5,7`, increasing, each index below
/// `completions`) into its intervals.
pub fn parse_indexes(text: &str, completions: i32) -> Result<Vec<(i32, i32)>, String> {
    let mut out: Vec<(i32, i32)> = Vec::new();
    if text.is_empty() {
        return Ok(out);
    }
    for interval in text.split(',') {
        let parts: Vec<&str> = interval.split('-').collect();
        if parts.len() > 2 {
            return Err(format!(
                "the fragment {interval:?} violates the requirement that an index interval can have at most two parts separated by '-'"
            ));
        }
        let index = |s: &str| -> Result<i32, String> {
            let i: i64 = s
                .parse()
                .map_err(|_| format!("cannot convert string to integer for index: {s:?}"))?;
            if i >= i64::from(completions) {
                return Err(format!("too large index: {s:?}"));
            }
            // Negative indexes parse (as in Kubernetes) and fail the order checks below or
            // match no pod.
            i32::try_from(i)
                .map_err(|_| format!("cannot convert string to integer for index: {s:?}"))
        };
        let x = index(parts[0])?;
        let y = match parts.get(1) {
            Some(p) => {
                let y = index(p)?;
                if x >= y {
                    return Err(format!("non-increasing order, previous: {x}, current: {y}"));
                }
                y
            }
            None => x,
        };
        if let Some(&(_, last)) = out.last() {
            if last >= x {
                return Err(format!(
                    "non-increasing order, previous: {last}, current: {x}"
                ));
            }
        }
        out.push((x, y));
    }
    Ok(out)
}

fn validate_success_policy(s: &JobSpec, p: &SuccessPolicy, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rules = format!("{path}.rules");
    if p.rules.is_empty() {
        errs.push(FieldError::required_msg(
            &rules,
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if p.rules.len() > 20 {
        errs.push(FieldError::too_many(&rules, p.rules.len(), 20));
    }
    let completions = s.completions.unwrap_or(0);
    for (i, rule) in p.rules.iter().enumerate() {
        let at = format!("{rules}[{i}]");
        if rule.succeeded_count.is_none() && rule.succeeded_indexes.is_none() {
            errs.push(FieldError::required_msg(
                &at,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total: i64 = 0;
        if let Some(indexes) = &rule.succeeded_indexes {
            let field = format!("{at}.succeededIndexes");
            if indexes.len() > MAX_SUCCEEDED_INDEXES_LENGTH {
                errs.push(FieldError::too_long(&field, MAX_SUCCEEDED_INDEXES_LENGTH));
            }
            match parse_indexes(indexes, completions) {
                Ok(intervals) => {
                    total = intervals
                        .iter()
                        .map(|(x, y)| i64::from(*y) - i64::from(*x) + 1)
                        .sum()
                }
                Err(e) => errs.push(FieldError::invalid(
                    &field,
                    indexes,
                    format!("error parsing succeededIndexes: {e}"),
                )),
            }
        }
        if let Some(count) = rule.succeeded_count {
            let field = format!("{at}.succeededCount");
            validation::check_non_negative(&mut errs, &field, Some(count));
            if count > completions {
                errs.push(FieldError::invalid(
                    &field,
                    count,
                    format!("must be less than or equal to {completions} (the number of specified completions)"),
                ));
            }
            if rule.succeeded_indexes.is_some() && i64::from(count) > total {
                errs.push(FieldError::invalid(
                    &field,
                    count,
                    format!("must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"),
                ));
            }
        }
    }
    errs
}

/// batch/v1 PodFailurePolicy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.PodFailurePolicy")]
#[schemars(description = "PodFailurePolicy describes how failed pods influence the backoffLimit.")]
pub struct PodFailurePolicy {
    /// Rules evaluated in order; the first that matches a failed pod decides.
    pub rules: Vec<PodFailurePolicyRule>,
}

/// batch/v1 PodFailurePolicyRule.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.PodFailurePolicyRule")]
#[schemars(
    description = "PodFailurePolicyRule describes how a pod failure is handled when the requirements are met."
)]
pub struct PodFailurePolicyRule {
    /// FailJob, FailIndex, Ignore or Count.
    pub action: String,
    /// Requirement on the container exit codes.
    pub on_exit_codes: Option<PodFailurePolicyOnExitCodesRequirement>,
    /// Requirements on the pod conditions (any of them).
    pub on_pod_conditions: Vec<PodFailurePolicyOnPodConditionsPattern>,
}

/// batch/v1 PodFailurePolicyOnExitCodesRequirement.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement")]
#[schemars(
    description = "PodFailurePolicyOnExitCodesRequirement describes the requirement for handling a failed pod based on its container exit codes."
)]
pub struct PodFailurePolicyOnExitCodesRequirement {
    /// Restricts the check to the container of this name; all containers when unset.
    pub container_name: Option<String>,
    /// In or NotIn.
    pub operator: String,
    /// Exit codes (at most 255, no duplicates, sorted).
    pub values: Vec<i32>,
}

/// batch/v1 PodFailurePolicyOnPodConditionsPattern.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.PodFailurePolicyOnPodConditionsPattern")]
#[schemars(
    description = "PodFailurePolicyOnPodConditionsPattern describes a pattern for matching an actual pod condition type."
)]
pub struct PodFailurePolicyOnPodConditionsPattern {
    /// The pod condition type to match.
    #[serde(rename = "type")]
    pub type_: String,
    /// The condition status to match. Default: True.
    pub status: Option<String>,
}

/// batch/v1 JobStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.JobStatus")]
#[schemars(description = "JobStatus represents the current state of a Job.")]
pub struct JobStatus {
    /// The latest observations of the job's state (Complete, Failed, Suspended,
    /// FailureTarget, SuccessCriteriaMet).
    pub conditions: Vec<JobCondition>,
    /// When the job controller started processing the job.
    pub start_time: Option<Time>,
    /// When the job completed (set once it is Complete).
    pub completion_time: Option<Time>,
    /// Number of pending and running pods that are not terminating.
    pub active: Option<i32>,
    /// Number of pods that reached phase Succeeded.
    pub succeeded: Option<i32>,
    /// Number of pods that reached phase Failed.
    pub failed: Option<i32>,
    /// Number of pods that are terminating.
    pub terminating: Option<i32>,
    /// Completed indexes of an Indexed job, as a compressed list (`1,3-5,7`).
    pub completed_indexes: Option<String>,
    /// Failed indexes (backoffLimitPerIndex).
    pub failed_indexes: Option<String>,
    /// Terminated pods not yet counted in succeeded and failed.
    pub uncounted_terminated_pods: Option<UncountedTerminatedPods>,
    /// Number of active pods with the Ready condition.
    pub ready: Option<i32>,
}

/// batch/v1 UncountedTerminatedPods.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.UncountedTerminatedPods")]
#[schemars(
    description = "UncountedTerminatedPods holds UIDs of Pods that have terminated but haven't been accounted in Job status counters."
)]
pub struct UncountedTerminatedPods {
    /// UIDs of succeeded pods.
    pub succeeded: Vec<String>,
    /// UIDs of failed pods.
    pub failed: Vec<String>,
}

/// batch/v1 JobCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.JobCondition")]
#[schemars(description = "JobCondition describes current state of a job.")]
pub struct JobCondition {
    /// Type of job condition: Complete, Failed, Suspended, FailureTarget, SuccessCriteriaMet.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Last time the condition was checked.
    pub last_probe_time: Option<Time>,
    /// Last time the condition changed status.
    pub last_transition_time: Option<Time>,
    /// Brief CamelCase reason for the last transition.
    pub reason: Option<String>,
    /// Human-readable details of the last transition.
    pub message: Option<String>,
}

impl JobStatus {
    /// The condition of `type_`, if the job has it.
    pub fn condition(&self, type_: &str) -> Option<&JobCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of `type_` is True.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
}

impl Job {
    /// Whether the job is finished: Complete or Failed.
    pub fn finished(&self) -> bool {
        self.status.is_true("Complete") || self.status.is_true("Failed")
    }

    /// Whether the job runs Indexed.
    pub fn indexed(&self) -> bool {
        self.spec.completion_mode.as_deref() == Some("Indexed")
    }
}

/// Kubernetes' generateSelector: unless the selector is manual, the pods get the job's name
/// and uid as labels and the selector is the uid label. Needs the uid, so it runs on create
/// once the uid is set.
pub fn generate_job_selector(job: &mut Job) {
    if job.spec.manual_selector == Some(true) {
        return;
    }
    let (name, uid) = (job.metadata.name.clone(), job.metadata.uid.clone());
    let labels = &mut job.spec.template.metadata.labels;
    for key in [LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL] {
        labels.entry(key.into()).or_insert_with(|| name.clone());
    }
    for key in [LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL] {
        labels.entry(key.into()).or_insert_with(|| uid.clone());
    }
    job.spec
        .selector
        .get_or_insert_with(Default::default)
        .match_labels
        .entry(CONTROLLER_UID_LABEL.into())
        .or_insert(uid);
}

fn set_job_spec_defaults(s: &mut JobSpec) {
    if s.completions.is_none() && s.parallelism.is_none() {
        s.completions = Some(1);
    }
    s.parallelism.get_or_insert(1);
    if s.backoff_limit.is_none() {
        s.backoff_limit = Some(if s.backoff_limit_per_index.is_some() {
            i32::MAX
        } else {
            6
        });
    }
    s.completion_mode.get_or_insert_with(|| "NonIndexed".into());
    s.suspend.get_or_insert(false);
    s.manual_selector.get_or_insert(false);
    if s.pod_replacement_policy.is_none() {
        s.pod_replacement_policy = Some(if s.pod_failure_policy.is_some() {
            "Failed".into()
        } else {
            "TerminatingOrFailed".into()
        });
    }
    if let Some(pfp) = &mut s.pod_failure_policy {
        for r in &mut pfp.rules {
            for c in &mut r.on_pod_conditions {
                c.status.get_or_insert_with(|| "True".into());
            }
        }
    }
    s.template.spec.set_defaults();
}

/// A Job spec's rules, under `path` (`spec` of a Job, `spec.jobTemplate.spec` of a CronJob).
/// `generated_uid` is the uid a generated selector must name (None: not checked).
fn validate_job_spec(s: &JobSpec, path: &str, generated_uid: Option<&str>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let f = |name: &str| format!("{path}.{name}");
    validation::check_non_negative(&mut errs, &f("parallelism"), s.parallelism);
    validation::check_non_negative(&mut errs, &f("completions"), s.completions);
    validation::check_non_negative(&mut errs, &f("backoffLimit"), s.backoff_limit);
    if let Some(d) = s.active_deadline_seconds {
        if d <= 0 {
            errs.push(FieldError::invalid(
                f("activeDeadlineSeconds"),
                d,
                "must be greater than 0",
            ));
        }
    }
    validation::check_non_negative(
        &mut errs,
        &f("ttlSecondsAfterFinished"),
        s.ttl_seconds_after_finished,
    );
    let mode = s.completion_mode.as_deref().unwrap_or("NonIndexed");
    match mode {
        "NonIndexed" => {}
        "Indexed" => match s.completions {
            None => errs.push(FieldError::required_msg(
                f("completions"),
                "when completion mode is Indexed",
            )),
            Some(c) if c > MAX_INDEXED_COMPLETIONS => errs.push(FieldError::invalid(
                f("completions"),
                c,
                format!(
                    "must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"
                ),
            )),
            _ => {
                if let Some(p) = s.parallelism.filter(|p| *p > MAX_INDEXED_COMPLETIONS) {
                    errs.push(FieldError::invalid(
                        f("parallelism"),
                        p,
                        format!("must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"),
                    ));
                }
            }
        },
        other => errs.push(FieldError::not_supported(
            f("completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    if let Some(p) = &s.pod_replacement_policy {
        if p != "TerminatingOrFailed" && p != "Failed" {
            errs.push(FieldError::not_supported(
                f("podReplacementPolicy"),
                p,
                &["Failed", "TerminatingOrFailed"],
            ));
        } else if s.pod_failure_policy.is_some() && p != "Failed" {
            errs.push(FieldError::not_supported(
                f("podReplacementPolicy"),
                p,
                &["Failed"],
            ));
        }
    }
    let restart = s
        .template
        .spec
        .restart_policy
        .as_deref()
        .unwrap_or("Always");
    if restart != "OnFailure" && restart != "Never" {
        errs.push(FieldError::not_supported(
            f("template.spec.restartPolicy"),
            restart,
            &["OnFailure", "Never"],
        ));
    } else if s.pod_failure_policy.is_some() && restart != "Never" {
        errs.push(FieldError::invalid(
            f("template.spec.restartPolicy"),
            restart,
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
    if let Some(pfp) = &s.pod_failure_policy {
        errs.extend(validate_pod_failure_policy(pfp, &f("podFailurePolicy")));
    }
    if let Some(sp) = &s.success_policy {
        if mode != "Indexed" {
            errs.push(FieldError::invalid(
                f("completionMode"),
                mode,
                "requires indexed completion mode",
            ));
        } else {
            errs.extend(validate_success_policy(s, sp, &f("successPolicy")));
        }
    }
    match &s.selector {
        // A generated selector is set on create, once the uid is known.
        None if s.manual_selector != Some(true) => {}
        None => errs.push(FieldError::required(f("selector"))),
        Some(sel) => {
            let sel_errs = validation::validate_label_selector(sel, &f("selector"));
            let ok = sel_errs.is_empty();
            errs.extend(sel_errs);
            if ok {
                let matches = crate::selector::Selector::from_label_selector(sel)
                    .map(|x| x.matches(&s.template.metadata.labels))
                    .unwrap_or(false);
                if !matches {
                    errs.push(FieldError::invalid(
                        f("template.metadata.labels"),
                        go_map(&s.template.metadata.labels),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            if let Some(uid) = generated_uid.filter(|_| s.manual_selector != Some(true)) {
                let labels = &s.template.metadata.labels;
                if labels.get(CONTROLLER_UID_LABEL).map(String::as_str) != Some(uid) {
                    errs.push(FieldError::invalid(
                        f("template.metadata.labels"),
                        go_map(labels),
                        format!("must be '{uid}'"),
                    ));
                }
                if sel
                    .match_labels
                    .get(CONTROLLER_UID_LABEL)
                    .map(String::as_str)
                    != Some(uid)
                {
                    errs.push(FieldError::invalid(
                        f("selector"),
                        selector_text(sel),
                        "`selector` not auto-generated",
                    ));
                }
            }
        }
    }
    errs.extend(validation::validate_labels(
        &s.template.metadata.labels,
        &f("template.metadata.labels"),
    ));
    errs.extend(validation::validate_pod_spec(
        &s.template.spec,
        &f("template.spec"),
    ));
    errs
}

fn validate_pod_failure_policy(p: &PodFailurePolicy, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if p.rules.len() > 20 {
        errs.push(FieldError::too_many(
            format!("{path}.rules"),
            p.rules.len(),
            20,
        ));
    }
    for (i, r) in p.rules.iter().enumerate() {
        let rp = format!("{path}.rules[{i}]");
        if !matches!(
            r.action.as_str(),
            "FailJob" | "FailIndex" | "Ignore" | "Count"
        ) {
            errs.push(FieldError::not_supported(
                format!("{rp}.action"),
                &r.action,
                &["Count", "FailIndex", "FailJob", "Ignore"],
            ));
        }
        match (&r.on_exit_codes, r.on_pod_conditions.is_empty()) {
            (Some(_), false) => errs.push(FieldError::invalid(
                &rp,
                "specifying both OnExitCodes and OnPodConditions is not supported",
                "specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (None, true) => errs.push(FieldError::invalid(
                &rp,
                "specifying one of OnExitCodes and OnPodConditions is required",
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            _ => {}
        }
        if let Some(ec) = &r.on_exit_codes {
            let ep = format!("{rp}.onExitCodes");
            if ec.operator != "In" && ec.operator != "NotIn" {
                errs.push(FieldError::not_supported(
                    format!("{ep}.operator"),
                    &ec.operator,
                    &["In", "NotIn"],
                ));
            }
            if ec.values.is_empty() {
                errs.push(FieldError::required_msg(
                    format!("{ep}.values"),
                    "at least one value is required",
                ));
            }
            for (j, v) in ec.values.iter().enumerate() {
                if ec.operator == "In" && *v == 0 {
                    errs.push(FieldError::invalid(
                        format!("{ep}.values[{j}]"),
                        v,
                        "must not be 0 for the In operator",
                    ));
                }
                if j > 0 && ec.values[j - 1] == *v {
                    errs.push(FieldError::duplicate(format!("{ep}.values[{j}]"), v));
                } else if j > 0 && ec.values[j - 1] > *v {
                    errs.push(FieldError::invalid(
                        format!("{ep}.values[{j}]"),
                        v,
                        "must be ordered",
                    ));
                }
            }
        }
        for (j, c) in r.on_pod_conditions.iter().enumerate() {
            let cp = format!("{rp}.onPodConditions[{j}]");
            if let Some(st) = &c.status {
                if !matches!(st.as_str(), "True" | "False" | "Unknown") {
                    errs.push(FieldError::not_supported(
                        format!("{cp}.status"),
                        st,
                        &["False", "True", "Unknown"],
                    ));
                }
            }
            if let Err(why) = validation::qualified_name(&c.type_) {
                errs.push(FieldError::invalid(format!("{cp}.type"), &c.type_, why));
            }
        }
    }
    errs
}

fn go_map(m: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", inner.join(" "))
}

fn selector_text(sel: &LabelSelector) -> String {
    crate::selector::Selector::from_label_selector(sel)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

impl Resource for Job {
    const KIND: Kind = Kind::Job;
    crate::resource_basics!(Job);
    spec_and_status!();

    fn set_defaults(&mut self) {
        // A job without labels takes its pods' (SetDefaults_Job).
        if self.metadata.labels.is_empty() && !self.spec.template.metadata.labels.is_empty() {
            self.metadata.labels = self.spec.template.metadata.labels.clone();
        }
        set_job_spec_defaults(&mut self.spec);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Job);
        let uid = Some(self.metadata.uid.as_str()).filter(|u| !u.is_empty());
        errs.extend(validate_job_spec(&self.spec, "spec", uid));
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        match path {
            "status.successful" => Some(self.status.succeeded.unwrap_or(0).to_string()),
            _ => None,
        }
    }
}

/// The rules of a Job update beyond [`Resource::validate`]: the selector, the completion
/// mode, the failure policy and (unless the job is suspended) the pod template are fixed.
pub fn validate_job_update(new: &Job, old: &Job) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (n, o) = (&new.spec, &old.spec);
    if n.selector != o.selector {
        errs.push(FieldError::invalid(
            "spec.selector",
            n.selector.as_ref().map(selector_text).unwrap_or_default(),
            "field is immutable",
        ));
    }
    if n.completion_mode != o.completion_mode {
        errs.push(FieldError::invalid(
            "spec.completionMode",
            n.completion_mode.as_deref().unwrap_or(""),
            "field is immutable",
        ));
    }
    if n.completions != o.completions && !(new.indexed() && n.completions == n.parallelism) {
        errs.push(FieldError::invalid(
            "spec.completions",
            n.completions.map(|c| c.to_string()).unwrap_or_default(),
            "field is immutable",
        ));
    }
    if n.pod_failure_policy != o.pod_failure_policy {
        errs.push(FieldError::invalid(
            "spec.podFailurePolicy",
            "",
            "field is immutable",
        ));
    }
    if n.success_policy != o.success_policy {
        errs.push(FieldError::invalid(
            "spec.successPolicy",
            "",
            "field is immutable",
        ));
    }
    let suspended = o.suspend == Some(true) && old.status.start_time.is_none();
    if n.template != o.template && !suspended {
        errs.push(FieldError::invalid(
            "spec.template",
            "",
            "field is immutable",
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------
// CronJob

/// batch/v1 CronJob.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.CronJob")]
#[schemars(description = "CronJob represents the configuration of a single cron job.")]
pub struct CronJob {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Specification of the desired behavior of a cron job, including the schedule.
    pub spec: CronJobSpec,
    /// Current status of a cron job. Read-only.
    pub status: CronJobStatus,
}

/// batch/v1 CronJobSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.CronJobSpec")]
#[schemars(
    description = "CronJobSpec describes how the job execution will look like and when it will actually run."
)]
pub struct CronJobSpec {
    /// The schedule in Cron format (five fields, or @hourly, @daily, @weekly, @monthly,
    /// @yearly).
    pub schedule: String,
    /// The time zone name of the schedule (`Europe/Paris`); the server's local time zone
    /// when unset.
    pub time_zone: Option<String>,
    /// Seconds after a missed scheduled time within which the job may still start; missed
    /// runs later than that count as failed.
    pub starting_deadline_seconds: Option<i64>,
    /// How concurrent runs are treated: Allow (default), Forbid or Replace.
    pub concurrency_policy: Option<String>,
    /// Whether subsequent runs are held back (runs already started go on). Default: false.
    pub suspend: Option<bool>,
    /// The job created at each scheduled time.
    pub job_template: JobTemplateSpec,
    /// Finished successful jobs kept. Default: 3.
    pub successful_jobs_history_limit: Option<i32>,
    /// Finished failed jobs kept. Default: 1.
    pub failed_jobs_history_limit: Option<i32>,
}

/// batch/v1 JobTemplateSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.JobTemplateSpec")]
#[schemars(
    description = "JobTemplateSpec describes the data a Job should have when created from a template"
)]
pub struct JobTemplateSpec {
    /// Metadata of the jobs created from this template.
    pub metadata: ObjectMeta,
    /// Specification of the jobs created from this template.
    pub spec: JobSpec,
}

/// batch/v1 CronJobStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.batch.v1.CronJobStatus")]
#[schemars(description = "CronJobStatus represents the current state of a cron job.")]
pub struct CronJobStatus {
    /// The currently running jobs.
    pub active: Vec<crate::core::ObjectReference>,
    /// The last time a job was successfully scheduled.
    pub last_schedule_time: Option<Time>,
    /// The last time a job successfully completed.
    pub last_successful_time: Option<Time>,
}

/// A parsed CronJob schedule: the five-field cron (Vixie semantics: day-of-month and
/// day-of-week are or-ed when both are restricted) or one of the @ macros Kubernetes
/// accepts.
#[derive(Clone, Debug)]
pub struct Schedule(croner::Cron);

impl Schedule {
    pub fn parse(s: &str) -> Result<Schedule, String> {
        let t = s.trim();
        let expanded = if let Some(m) = t.strip_prefix('@') {
            match m.to_ascii_lowercase().as_str() {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => return Err(format!("unrecognized descriptor: {t}")),
            }
        } else {
            let n = t.split_whitespace().count();
            if n != 5 {
                return Err(format!("expected exactly 5 fields, found {n}: {t}"));
            }
            t
        };
        croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(expanded)
            .map(Schedule)
            .map_err(|e| e.to_string())
    }

    /// The first scheduled time strictly after `after` (Unix seconds), reading the schedule
    /// in `tz` (the local time zone when None).
    pub fn next_after(&self, after: i64, tz: Option<chrono_tz::Tz>) -> Option<i64> {
        use chrono::TimeZone as _;
        match tz {
            Some(tz) => {
                let t = tz.timestamp_opt(after, 0).single()?;
                self.0
                    .find_next_occurrence(&t, false)
                    .ok()
                    .map(|t| t.timestamp())
            }
            None => {
                let t = chrono::Local.timestamp_opt(after, 0).single()?;
                self.0
                    .find_next_occurrence(&t, false)
                    .ok()
                    .map(|t| t.timestamp())
            }
        }
    }

    /// The last scheduled time at or before `at` (Unix seconds), in `tz` as
    /// [`Schedule::next_after`].
    pub fn last_at_or_before(&self, at: i64, tz: Option<chrono_tz::Tz>) -> Option<i64> {
        use chrono::TimeZone as _;
        match tz {
            Some(tz) => {
                let t = tz.timestamp_opt(at, 0).single()?;
                self.0
                    .find_previous_occurrence(&t, true)
                    .ok()
                    .map(|t| t.timestamp())
            }
            None => {
                let t = chrono::Local.timestamp_opt(at, 0).single()?;
                self.0
                    .find_previous_occurrence(&t, true)
                    .ok()
                    .map(|t| t.timestamp())
            }
        }
    }

    /// Go's RFC1123Z layout in UTC (`Mon, 02 Jan 2006 15:04:05 +0000`), as Kubernetes'
    /// events print scheduled times.
    pub fn rfc1123z(at: i64) -> String {
        use chrono::TimeZone as _;
        chrono::Utc
            .timestamp_opt(at, 0)
            .single()
            .map(|d| d.format("%a, %d %b %Y %H:%M:%S +0000").to_string())
            .unwrap_or_default()
    }

    /// `at` (Unix seconds) in RFC 3339 in `tz`, as the scheduled-timestamp annotation has it.
    pub fn rfc3339(at: i64, tz: Option<chrono_tz::Tz>) -> String {
        use chrono::TimeZone as _;
        match tz {
            Some(tz) => tz
                .timestamp_opt(at, 0)
                .single()
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default(),
            None => chrono::Local
                .timestamp_opt(at, 0)
                .single()
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default(),
        }
    }
}

/// A CronJob's time zone.
pub type TimeZone = chrono_tz::Tz;

/// A time zone name Kubernetes accepts: an IANA name (not `Local`), known to the bundled
/// database.
pub fn parse_time_zone(name: &str) -> Result<chrono_tz::Tz, String> {
    if name == "Local" {
        return Err("unknown time zone Local".into());
    }
    name.parse::<chrono_tz::Tz>()
        .map_err(|_| format!("unknown time zone {name}"))
}

impl Resource for CronJob {
    const KIND: Kind = Kind::CronJob;
    crate::resource_basics!(CronJob);
    spec_and_status!();

    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        s.concurrency_policy.get_or_insert_with(|| "Allow".into());
        s.suspend.get_or_insert(false);
        s.successful_jobs_history_limit.get_or_insert(3);
        s.failed_jobs_history_limit.get_or_insert(1);
        s.job_template.spec.template.spec.set_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        let s = &self.spec;
        let mut errs = validation::validate_meta(&self.metadata, Kind::CronJob);
        // The name goes into the jobs' names with an 11-character suffix.
        if self.metadata.name.len() > 52 {
            errs.push(FieldError::invalid(
                "metadata.name",
                &self.metadata.name,
                "must be no more than 52 characters",
            ));
        }
        if s.schedule.is_empty() {
            errs.push(FieldError::required("spec.schedule"));
        } else if s.schedule.contains("TZ") {
            errs.push(FieldError::invalid(
                "spec.schedule",
                &s.schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        } else if let Err(why) = Schedule::parse(&s.schedule) {
            errs.push(FieldError::invalid("spec.schedule", &s.schedule, why));
        }
        if let Some(tz) = &s.time_zone {
            if let Err(why) = parse_time_zone(tz) {
                errs.push(FieldError::invalid("spec.timeZone", tz, why));
            }
        }
        validation::check_non_negative(
            &mut errs,
            "spec.startingDeadlineSeconds",
            s.starting_deadline_seconds,
        );
        validation::check_non_negative(
            &mut errs,
            "spec.successfulJobsHistoryLimit",
            s.successful_jobs_history_limit,
        );
        validation::check_non_negative(
            &mut errs,
            "spec.failedJobsHistoryLimit",
            s.failed_jobs_history_limit,
        );
        match s.concurrency_policy.as_deref() {
            None => errs.push(FieldError::required("spec.concurrencyPolicy")),
            Some("Allow" | "Forbid" | "Replace") => {}
            Some(other) => errs.push(FieldError::not_supported(
                "spec.concurrencyPolicy",
                other,
                &["Allow", "Forbid", "Replace"],
            )),
        }
        // The selector and labels are generated per job, so only the pod rules apply here
        // (as in Kubernetes' ValidateJobTemplateSpec).
        let mut spec = s.job_template.spec.clone();
        if spec.selector.is_none() {
            spec.selector = Some(LabelSelector::default());
        }
        spec.manual_selector = Some(true);
        errs.extend(
            validate_job_spec(&spec, "spec.jobTemplate.spec", None)
                .into_iter()
                .filter(|e| {
                    e.field != "spec.jobTemplate.spec.template.metadata.labels"
                        || s.job_template.spec.selector.is_some()
                }),
        );
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Container;

    fn job() -> Job {
        let mut j = Job::default();
        j.metadata.name = "pi".into();
        j.metadata.namespace = Some("default".into());
        j.metadata.uid = "u-1".into();
        j.spec.template.spec.restart_policy = Some("Never".into());
        j.spec.template.spec.containers.push(Container {
            name: "pi".into(),
            image: Some("busybox".into()),
            ..Default::default()
        });
        j
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn job_defaults_and_generated_selector() {
        let mut j = job();
        j.spec
            .template
            .metadata
            .labels
            .insert("app".into(), "pi".into());
        j.set_defaults();
        assert_eq!(j.spec.completions, Some(1));
        assert_eq!(j.spec.parallelism, Some(1));
        assert_eq!(j.spec.backoff_limit, Some(6));
        assert_eq!(j.spec.completion_mode.as_deref(), Some("NonIndexed"));
        assert_eq!(
            j.spec.pod_replacement_policy.as_deref(),
            Some("TerminatingOrFailed")
        );
        assert_eq!(j.metadata.labels["app"], "pi", "labels from the template");
        generate_job_selector(&mut j);
        let labels = &j.spec.template.metadata.labels;
        assert_eq!(labels[CONTROLLER_UID_LABEL], "u-1");
        assert_eq!(labels[LEGACY_CONTROLLER_UID_LABEL], "u-1");
        assert_eq!(labels[JOB_NAME_LABEL], "pi");
        assert_eq!(labels[LEGACY_JOB_NAME_LABEL], "pi");
        assert_eq!(
            j.spec.selector.as_ref().unwrap().match_labels,
            [(CONTROLLER_UID_LABEL.to_string(), "u-1".to_string())].into()
        );
        assert_eq!(messages(&j.validate()), Vec::<String>::new());

        // Only parallelism: completions stay unset.
        let mut p = job();
        p.spec.parallelism = Some(3);
        p.set_defaults();
        assert_eq!(p.spec.completions, None);
    }

    #[test]
    fn job_validation_messages() {
        let mut j = job();
        j.spec.template.spec.restart_policy = None;
        j.spec.completion_mode = Some("Indexed".into());
        j.spec.parallelism = Some(1);
        j.set_defaults();
        generate_job_selector(&mut j);
        let m = messages(&j.validate());
        assert!(
            m.contains(&"spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"".to_string()),
            "{m:?}"
        );
        assert!(
            m.contains(
                &"spec.completions: Required value: when completion mode is Indexed".to_string()
            ),
            "{m:?}"
        );

        let mut hand = job();
        hand.set_defaults();
        hand.spec.selector = Some(LabelSelector {
            match_labels: [("app".to_string(), "x".to_string())].into(),
            ..Default::default()
        });
        let m = messages(&hand.validate());
        assert!(
            m.iter()
                .any(|e| e.contains("`selector` does not match template `labels`")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.contains("`selector` not auto-generated")),
            "{m:?}"
        );
    }

    #[test]
    fn cron_job_defaults_and_schedules() {
        let mut c = CronJob::default();
        c.metadata.name = "tick".into();
        c.spec.schedule = "*/5 * * * *".into();
        c.spec.job_template.spec = job().spec;
        c.set_defaults();
        assert_eq!(c.spec.concurrency_policy.as_deref(), Some("Allow"));
        assert_eq!(c.spec.successful_jobs_history_limit, Some(3));
        assert_eq!(c.spec.failed_jobs_history_limit, Some(1));
        assert_eq!(c.spec.suspend, Some(false));
        assert_eq!(messages(&c.validate()), Vec::<String>::new());

        for good in [
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
            "@midnight",
            "0 0 * * MON-FRI",
            "*/15 9-17 * * *",
        ] {
            assert!(Schedule::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "@every 1m",
            "@reboot",
            "* * * *",
            "0 0 * * * *",
            "60 * * * *",
            "x * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
        c.spec.schedule = "TZ=UTC * * * * *".into();
        c.spec.time_zone = Some("Mars/Olympus".into());
        c.spec.concurrency_policy = Some("Sometimes".into());
        let m = messages(&c.validate());
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.schedule: Invalid value")
                    && e.contains("cannot use TZ or CRON_TZ in schedule")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.timeZone: Invalid value: \"Mars/Olympus\"")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.concurrencyPolicy: Unsupported value")),
            "{m:?}"
        );

        // Vixie cron: day of month and day of week are or-ed when both are restricted.
        let s = Schedule::parse("0 0 13 * 5").unwrap();
        let utc = Some(TimeZone::UTC);
        // 2027-01-01 was a Friday; the 13th of January is a Wednesday.
        let jan1 = 1_798_761_600; // 2027-01-01T00:00:00Z
        assert_eq!(s.next_after(jan1 - 1, utc), Some(jan1));
        assert_eq!(s.next_after(jan1, utc), Some(jan1 + 7 * 86_400));
    }
}
