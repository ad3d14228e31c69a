//! Kubernetes' horizontal pod autoscaler. The arithmetic: the replica calculator for
//! resource utilisation (tolerance, missing metrics, unready pods) and the normalisation of
//! a recommendation (stabilisation windows, scaling policies with their periods, min/max),
//! pure functions over plain inputs with times in seconds. Around it, [`plan`] decides one
//! autoscaler's sync from its target's scale, the target's pods and their usage (also pure,
//! so it is tested without a server), and the loop ([`start`]) feeds it every sync period
//! from the informer cache and the server's own resource metrics (`metrics.k8s.io`, read
//! from the agents in memory), then writes the target's scale, the autoscaler's status and
//! Kubernetes' events. Nothing but the status and the scale is written: the recommendations
//! and scale events the windows need stay in memory, as in kube-controller-manager.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use api::apps::{Deployment, ReplicaSet, StatefulSet};
use api::autoscaling::{
    HPAScalingRules, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition,
    HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus, MetricTarget, MetricValueStatus,
    ResourceMetricStatus,
};
use api::core::Pod;
use api::custom::CustomObject;
use api::meta::{LabelSelector, Quantity, Time};
use api::replication::ReplicationController;
use api::selector::Selector;
use api::Kind;

use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::Context;
use crate::registry::Part;

/// Kubernetes' default tolerance: no scaling while the usage ratio is within 10% of 1.
pub const TOLERANCE: f64 = 0.1;
/// Kubernetes' default scale-down stabilisation window
/// (--horizontal-pod-autoscaler-downscale-stabilization).
pub const DOWNSCALE_STABILIZATION_SECONDS: i64 = 300;

/// What the calculator knows of one pod of the target.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSample {
    pub name: String,
    /// Ready condition True.
    pub ready: bool,
    /// Being deleted, or failed: not counted at all.
    pub gone: bool,
    /// The sum of the containers' requests of the resource, in thousandths; None when a
    /// container requests none (utilisation cannot be computed).
    pub request: Option<i64>,
    /// The measured usage, in thousandths; None when the metrics have no sample.
    pub usage: Option<i64>,
}

/// The calculator's answer: replicas and the current utilisation (percent of requests) it
/// measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recommendation {
    pub replicas: i32,
    pub utilization: i32,
}

fn ratio(samples: &[(i64, i64)], target: i32) -> (f64, i32) {
    // Requests are any quantity a pod asks for, usage what nodes report: summed and scaled
    // in i128 (Kubernetes' int64 arithmetic wraps), the utilisation clamped to int32.
    let (usage, request): (i128, i128) = samples.iter().fold((0, 0), |(u, r), (su, sr)| {
        (u + i128::from(*su), r + i128::from(*sr))
    });
    if request == 0 {
        return (0.0, 0);
    }
    let utilization =
        (usage * 100 / request).clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32;
    (utilization as f64 / target as f64, utilization)
}

/// Kubernetes' GetResourceReplicas: the replicas that bring the average utilisation of the
/// pods' requests to `target` percent. Err carries the reason as Kubernetes words it.
pub fn resource_replicas(
    resource: &str,
    current: i32,
    target: i32,
    pods: &[PodSample],
    tolerance: f64,
) -> Result<Recommendation, String> {
    let live: Vec<&PodSample> = pods.iter().filter(|p| !p.gone).collect();
    if live.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let mut requests = Vec::new();
    for p in &live {
        match p.request {
            Some(r) if r > 0 => requests.push(r),
            _ => return Err(format!("missing request for {resource} in pod {}", p.name)),
        }
    }
    let ready: Vec<(i64, i64)> = live
        .iter()
        .filter(|p| p.ready)
        .filter_map(|p| Some((p.usage?, p.request?)))
        .collect();
    let unready: Vec<&&PodSample> = live.iter().filter(|p| !p.ready).collect();
    let missing: Vec<&&PodSample> = live
        .iter()
        .filter(|p| p.ready && p.usage.is_none())
        .collect();
    if ready.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let (usage_ratio, utilization) = ratio(&ready, target);
    let scale_up_with_unready = !unready.is_empty() && usage_ratio > 1.0;
    if !scale_up_with_unready && missing.is_empty() {
        if (1.0 - usage_ratio).abs() <= tolerance {
            return Ok(Recommendation {
                replicas: current,
                utilization,
            });
        }
        return Ok(Recommendation {
            replicas: (usage_ratio * ready.len() as f64).ceil() as i32,
            utilization,
        });
    }
    // Missing metrics count as 100% of the request on a scale-down and 0% on a scale-up;
    // unready pods as 0% on a scale-up: both damp the change.
    let mut all = ready.clone();
    for p in &missing {
        let r = p.request.unwrap_or(0);
        if usage_ratio < 1.0 {
            all.push((r, r));
        } else if usage_ratio > 1.0 {
            all.push((0, r));
        }
    }
    if scale_up_with_unready {
        for p in &unready {
            all.push((0, p.request.unwrap_or(0)));
        }
    }
    let (new_ratio, _) = ratio(&all, target);
    if (1.0 - new_ratio).abs() <= tolerance
        || (usage_ratio < 1.0 && new_ratio > 1.0)
        || (usage_ratio > 1.0 && new_ratio < 1.0)
    {
        return Ok(Recommendation {
            replicas: current,
            utilization,
        });
    }
    let replicas = (new_ratio * all.len() as f64).ceil() as i32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return Ok(Recommendation {
            replicas: current,
            utilization,
        });
    }
    Ok(Recommendation {
        replicas,
        utilization,
    })
}

/// autoscaling/v2 HPAScalingPolicy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Pods or Percent.
    pub type_: String,
    pub value: i32,
    pub period_seconds: i64,
}

/// autoscaling/v2 HPAScalingRules.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    pub stabilization_window_seconds: i64,
    /// Max, Min or Disabled.
    pub select_policy: String,
    pub policies: Vec<Policy>,
}

impl Rules {
    /// Kubernetes' default scale-up rules: no window, the larger of 4 pods or 100% per 15 s.
    pub fn default_up() -> Rules {
        Rules {
            stabilization_window_seconds: 0,
            select_policy: "Max".into(),
            policies: vec![
                Policy {
                    type_: "Pods".into(),
                    value: 4,
                    period_seconds: 15,
                },
                Policy {
                    type_: "Percent".into(),
                    value: 100,
                    period_seconds: 15,
                },
            ],
        }
    }

    /// Kubernetes' default scale-down rules: the stabilisation window, then up to 100% per
    /// 15 s.
    pub fn default_down(window_seconds: i64) -> Rules {
        Rules {
            stabilization_window_seconds: window_seconds,
            select_policy: "Max".into(),
            policies: vec![Policy {
                type_: "Percent".into(),
                value: 100,
                period_seconds: 15,
            }],
        }
    }
}

/// Why the normalised replicas differ from the recommendation (the ScalingLimited
/// condition's reason and message).
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    pub reason: &'static str,
    pub message: &'static str,
}

const WITHIN: Limit = Limit {
    reason: "DesiredWithinRange",
    message: "the desired count is within the acceptable range",
};

/// One autoscaler's memory: its recent recommendations and scale events (seconds, value).
#[derive(Clone, Debug, Default)]
pub struct History {
    recommendations: VecDeque<(i64, i32)>,
    up_events: VecDeque<(i64, i32)>,
    down_events: VecDeque<(i64, i32)>,
}

fn changed_in_period(events: &VecDeque<(i64, i32)>, now: i64, period: i64) -> i32 {
    events
        .iter()
        .filter(|(t, _)| *t > now.saturating_sub(period))
        .fold(0, |total: i32, (_, n)| total.saturating_add(*n))
}

impl History {
    /// Records a scale from `from` to `to` replicas at `now`.
    pub fn record_scale(&mut self, now: i64, from: i32, to: i32) {
        if to > from {
            self.up_events.push_back((now, to.saturating_sub(from)));
        } else if to < from {
            self.down_events.push_back((now, from.saturating_sub(to)));
        }
    }

    fn scale_up_limit(&self, current: i32, rules: &Rules, now: i64) -> i32 {
        if rules.select_policy == "Disabled" {
            return current;
        }
        let min = rules.select_policy == "Min";
        let mut result = if min { i32::MAX } else { i32::MIN };
        for p in &rules.policies {
            let start = current
                .saturating_sub(changed_in_period(&self.up_events, now, p.period_seconds))
                .saturating_add(changed_in_period(&self.down_events, now, p.period_seconds));
            let proposed = if p.type_ == "Pods" {
                start.saturating_add(p.value)
            } else {
                (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i32
            };
            result = if min {
                result.min(proposed)
            } else {
                result.max(proposed)
            };
        }
        result
    }

    fn scale_down_limit(&self, current: i32, rules: &Rules, now: i64) -> i32 {
        if rules.select_policy == "Disabled" {
            return current;
        }
        let min = rules.select_policy == "Min";
        let mut result = if min { i32::MIN } else { i32::MAX };
        for p in &rules.policies {
            let start = current
                .saturating_sub(changed_in_period(&self.up_events, now, p.period_seconds))
                .saturating_add(changed_in_period(&self.down_events, now, p.period_seconds));
            let proposed = if p.type_ == "Pods" {
                start.saturating_sub(p.value)
            } else {
                (start as f64 * (1.0 - p.value as f64 / 100.0)) as i32
            };
            result = if min {
                result.max(proposed)
            } else {
                result.min(proposed)
            };
        }
        result
    }

    /// Kubernetes' normalizeDesiredReplicasWithBehaviors: the stabilised recommendation
    /// (the lowest of the scale-up window, the highest of the scale-down window), then the
    /// rate limits of the policies and min/max. Remembers `desired` at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn normalize(
        &mut self,
        now: i64,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        up: &Rules,
        down: &Rules,
    ) -> (i32, Limit) {
        let (up_cut, down_cut) = (
            now.saturating_sub(up.stabilization_window_seconds),
            now.saturating_sub(down.stabilization_window_seconds),
        );
        let (mut up_rec, mut down_rec) = (desired, desired);
        for (t, r) in &self.recommendations {
            if *t > up_cut {
                up_rec = up_rec.min(*r);
            }
            if *t > down_cut {
                down_rec = down_rec.max(*r);
            }
        }
        let mut stabilized = current.max(up_rec);
        stabilized = stabilized.min(down_rec);
        self.recommendations.push_back((now, desired));
        let keep = up
            .stabilization_window_seconds
            .max(down.stabilization_window_seconds);
        while self
            .recommendations
            .front()
            .is_some_and(|(t, _)| *t <= now.saturating_sub(keep))
        {
            self.recommendations.pop_front();
        }
        let longest = up
            .policies
            .iter()
            .chain(&down.policies)
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0);
        for q in [&mut self.up_events, &mut self.down_events] {
            while q
                .front()
                .is_some_and(|(t, _)| *t <= now.saturating_sub(longest))
            {
                q.pop_front();
            }
        }
        if stabilized > current {
            let limit = self.scale_up_limit(current, up, now).max(current);
            let (allowed, why) = if max > limit {
                (
                    limit,
                    Limit {
                        reason: "ScaleUpLimit",
                        message: "the desired replica count is increasing faster than the maximum scale rate",
                    },
                )
            } else {
                (
                    max,
                    Limit {
                        reason: "TooManyReplicas",
                        message: "the desired replica count is more than the maximum replica count",
                    },
                )
            };
            if stabilized > allowed {
                return (allowed, why);
            }
        } else if stabilized < current {
            let limit = self.scale_down_limit(current, down, now).min(current);
            let (allowed, why) = if min < limit {
                (
                    limit,
                    Limit {
                        reason: "ScaleDownLimit",
                        message: "the desired replica count is decreasing faster than the maximum scale rate",
                    },
                )
            } else {
                (
                    min,
                    Limit {
                        reason: "TooFewReplicas",
                        message: "the desired replica count is less than the minimum replica count",
                    },
                )
            };
            if stabilized < allowed {
                return (allowed, why);
            }
        }
        (stabilized, WITHIN)
    }
}

/// Kubernetes' default sync period (--horizontal-pod-autoscaler-sync-period).
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(15);

/// The autoscaler's flags.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How often every autoscaler is synced.
    pub sync_period: Duration,
    /// --horizontal-pod-autoscaler-tolerance.
    pub tolerance: f64,
    /// --horizontal-pod-autoscaler-downscale-stabilization, for autoscalers without a
    /// behavior.
    pub downscale_stabilization_seconds: i64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            sync_period: DEFAULT_SYNC_PERIOD,
            tolerance: TOLERANCE,
            downscale_stabilization_seconds: DOWNSCALE_STABILIZATION_SECONDS,
        }
    }
}

/// One container's usage: CPU in millicores, memory in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

/// A boxed future, as the metrics source returns it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where the autoscaler reads the pods' usage: the server's resource metrics, the figures
/// `kubectl top pod` shows.
pub trait PodMetrics: Send + Sync + 'static {
    /// The usage of each of `pods` that has a sample, by pod uid, per container.
    fn usage<'a>(&'a self, pods: &'a [Pod]) -> BoxFuture<'a, HashMap<String, Vec<ContainerUsage>>>;

    /// GET `rest` (the path under `/apis/GROUP/VERSION`, with its query) of the metrics
    /// API `group` at the first of `versions` an extension API server serves (kube's
    /// metrics clients take the preferred version discovery names): the body, or the error
    /// the autoscaler reports. Without an aggregator, no metrics API is registered.
    fn metrics_api<'a>(
        &'a self,
        group: &'a str,
        versions: &'a [&'a str],
        rest: String,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        let _ = (versions, rest);
        Box::pin(async move { Err(not_registered(group)) })
    }
}

/// The custom metrics API (Pods and Object metrics) and the versions the autoscaler reads,
/// preferred first.
pub const CUSTOM_METRICS: (&str, &[&str]) = ("custom.metrics.k8s.io", &["v1beta2", "v1beta1"]);
/// The external metrics API (External metrics).
pub const EXTERNAL_METRICS: (&str, &[&str]) = ("external.metrics.k8s.io", &["v1beta1"]);

/// `custom` or `external`, as kube names the metrics API of `group`.
fn api_word(group: &str) -> &'static str {
    if group == EXTERNAL_METRICS.0 {
        "external"
    } else {
        "custom"
    }
}

/// kube's words for a metrics API no server serves.
pub fn not_registered(group: &str) -> String {
    format!("no {} metrics API ({group}) registered", api_word(group))
}

/// kube's metrics clients' words for a failed read of the metrics API of `group`.
fn unable_to_fetch(group: &str, e: impl std::fmt::Display) -> String {
    format!(
        "unable to fetch metrics from {} metrics API: {e}",
        api_word(group)
    )
}

/// A query string (`?k=v&...`, empty without values) of the pairs with a value.
fn query(pairs: &[(&str, String)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        q.append_pair(k, v);
    }
    let q = q.finish();
    if q.is_empty() {
        q
    } else {
        format!("?{q}")
    }
}

/// What the autoscaler read of one Pods, Object or External metric from the metrics APIs:
/// the value of each pod by name (Pods), or one value (Object; External, summed), in
/// thousandths.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiMetric {
    PerPod(HashMap<String, i64>),
    Value(i64),
}

/// The readings of the metrics APIs by the metric's index in `spec.metrics`, or the error
/// (kube's text, without the `unable to get metric ...` words [`plan`] puts before it).
pub type ApiMetrics = HashMap<usize, Result<ApiMetric, String>>;

/// What the autoscaler read of its target through the scale subresource.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetScale {
    pub replicas: i32,
    /// The scale's `status.replicas` (what AverageValue targets of Object and External
    /// metrics divide by).
    pub status_replicas: i32,
    pub selector: Option<Selector>,
}

/// An HPA condition as [`plan`] sets it: type, status, reason, message.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

fn cond(type_: &'static str, ok: bool, reason: &str, message: impl Into<String>) -> Cond {
    Cond {
        type_,
        status: if ok { "True" } else { "False" },
        reason: reason.into(),
        message: message.into(),
    }
}

/// An event [`plan`] asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What one sync decided: the replicas to write (when they differ from the current ones)
/// and why, the status figures and conditions, and events.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub current_replicas: i32,
    /// None when the metrics gave no answer (the status keeps its previous figure).
    pub desired_replicas: Option<i32>,
    /// Some when the target's scale is to change: the reason for the event.
    pub rescale_reason: Option<String>,
    pub current_metrics: Vec<MetricStatus>,
    pub conditions: Vec<Cond>,
    pub events: Vec<PlannedEvent>,
}

/// The resource a Resource or ContainerResource metric names, in the units the calculator
/// counts (millicores, or thousandths of a byte), for one pod.
fn pod_request(pod: &Pod, resource: &str, container: Option<&str>) -> Option<i64> {
    let mut total = 0;
    for c in &pod.spec.containers {
        if container.is_some_and(|n| n != c.name) {
            continue;
        }
        let q = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.get(resource))?;
        total = q.milli_value().ok()?.saturating_add(total);
    }
    Some(total)
}

fn pod_usage(
    usage: Option<&Vec<ContainerUsage>>,
    resource: &str,
    container: Option<&str>,
) -> Option<i64> {
    let usage = usage?;
    let mut total: i64 = 0;
    let mut seen = false;
    for c in usage {
        if container.is_some_and(|n| n != c.name) {
            continue;
        }
        seen = true;
        total = total.saturating_add(match resource {
            "cpu" => c.cpu_milli,
            "memory" => c.memory_bytes.saturating_mul(1000),
            _ => return None,
        });
    }
    seen.then_some(total)
}

/// A quantity of `milli` thousandths of `resource` as Kubernetes would print it.
fn quantity(resource: &str, milli: i64) -> Quantity {
    if resource == "cpu" {
        Quantity::from_milli(milli)
    } else if milli % 1000 == 0 {
        Quantity((milli / 1000).to_string())
    } else {
        Quantity::from_milli(milli)
    }
}

/// The replicas one Resource or ContainerResource metric asks for, with its status and
/// the words Kubernetes uses for it in a rescale reason.
fn resource_metric(
    resource: &str,
    container: Option<&str>,
    target: &MetricTarget,
    current: i32,
    pods: &[Pod],
    usage: &HashMap<String, Vec<ContainerUsage>>,
    tolerance: f64,
) -> Result<(i32, MetricValueStatus, String), String> {
    if !matches!(resource, "cpu" | "memory") {
        return Err(format!(
            "unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        ));
    }
    let samples: Vec<PodSample> = pods
        .iter()
        .map(|p| PodSample {
            name: p.metadata.name.clone(),
            ready: crate::controllers::workload::pod_ready(p)
                || p.status.phase.as_deref() == Some("Succeeded"),
            gone: p.metadata.deletion_timestamp.is_some()
                || p.status.phase.as_deref() == Some("Failed"),
            request: pod_request(p, resource, container),
            usage: pod_usage(usage.get(&p.metadata.uid), resource, container),
        })
        .collect();
    if samples.iter().all(|s| s.usage.is_none()) {
        return Err(format!(
            "unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        ));
    }
    let measured: Vec<i64> = samples
        .iter()
        .filter(|s| !s.gone)
        .filter_map(|s| s.usage)
        .collect();
    let sum: i128 = measured.iter().map(|m| i128::from(*m)).sum();
    let average = (sum / measured.len().max(1) as i128) as i64;
    if let Some(percent) = target.average_utilization {
        let r = resource_replicas(resource, current, percent, &samples, tolerance)
            .map_err(|e| format!("failed to get {resource} utilization: {e}"))?;
        return Ok((
            r.replicas,
            MetricValueStatus {
                average_utilization: Some(r.utilization),
                average_value: Some(quantity(resource, average)),
                value: None,
            },
            format!("{resource} resource utilization (percentage of request)"),
        ));
    }
    let Some(value) = &target.average_value else {
        return Err(format!(
            "invalid target for {resource}: neither averageUtilization nor averageValue is set"
        ));
    };
    let target_milli = value.milli_value().map_err(|e| e.to_string())?;
    // A raw average target is the utilisation of a request equal to the target.
    let raw: Vec<PodSample> = samples
        .into_iter()
        .map(|s| PodSample {
            request: Some(target_milli),
            ..s
        })
        .collect();
    let r = resource_replicas(resource, current, 100, &raw, tolerance)
        .map_err(|e| format!("failed to get {resource} usage: {e}"))?;
    Ok((
        r.replicas,
        MetricValueStatus {
            average_value: Some(quantity(resource, average)),
            ..Default::default()
        },
        format!("{resource} resource"),
    ))
}

/// kube's calcPlainMetricReplicas: the replicas that bring the average of a per-pod
/// metric (`metrics`, by pod name) to `target` (thousandths), and the average. Pending
/// pods count as unready, deleted and failed ones are ignored, pods without a value are
/// missing; unready and missing pods damp the change as for resource metrics.
fn plain_replicas(
    current: i32,
    target: i64,
    pods: &[Pod],
    metrics: &HashMap<String, i64>,
    tolerance: f64,
) -> Result<(i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let mut metrics = metrics.clone();
    let (mut ready, mut unready, mut missing) = (0usize, Vec::new(), Vec::new());
    for p in pods {
        let name = &p.metadata.name;
        if p.metadata.deletion_timestamp.is_some() || p.status.phase.as_deref() == Some("Failed") {
            metrics.remove(name);
        } else if p.status.phase.as_deref() == Some("Pending") {
            metrics.remove(name);
            unready.push(name);
        } else if !metrics.contains_key(name) {
            missing.push(name);
        } else {
            ready += 1;
        }
    }
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let usage_ratio = |m: &HashMap<String, i64>| {
        let total: i64 = m.values().sum();
        let n = m.len() as i64;
        (total as f64 / (target as f64 * n as f64), total / n.max(1))
    };
    let (ratio, usage) = usage_ratio(&metrics);
    let up_with_unready = !unready.is_empty() && ratio > 1.0;
    if !up_with_unready && missing.is_empty() {
        if (1.0 - ratio).abs() <= tolerance {
            return Ok((current, usage));
        }
        return Ok(((ratio * ready as f64).ceil() as i32, usage));
    }
    for name in missing {
        metrics.insert(name.clone(), if ratio < 1.0 { target } else { 0 });
    }
    if up_with_unready {
        for name in unready {
            metrics.insert(name.clone(), 0);
        }
    }
    let (new_ratio, _) = usage_ratio(&metrics);
    if (1.0 - new_ratio).abs() <= tolerance
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return Ok((current, usage));
    }
    let replicas = (new_ratio * metrics.len() as f64).ceil() as i32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return Ok((current, usage));
    }
    Ok((replicas, usage))
}

/// kube's getUsageRatioReplicaCount: the replicas of a ratio of one value (an Object or
/// External metric with a Value target) to its target, over the ready pods.
fn ratio_replicas(current: i32, ratio: f64, pods: &[Pod], tolerance: f64) -> Result<i32, String> {
    if current == 0 {
        return Ok(ratio.ceil() as i32);
    }
    if (1.0 - ratio).abs() <= tolerance {
        return Ok(current);
    }
    if pods.is_empty() {
        return Err(
            "unable to calculate ready pods: no pods returned by selector while calculating replica count"
                .into(),
        );
    }
    let ready = pods
        .iter()
        .filter(|p| {
            p.status.phase.as_deref() == Some("Running")
                && crate::controllers::workload::pod_ready(p)
        })
        .count();
    Ok((ratio * ready as f64).ceil() as i32)
}

/// One value against a Value or AverageValue target (Object and External metrics): the
/// replicas and the current value as the status shows it.
fn value_replicas(
    value: i64,
    target: &MetricTarget,
    current: i32,
    status_replicas: i32,
    pods: &[Pod],
    tolerance: f64,
    invalid: &str,
) -> Result<(i32, MetricValueStatus), String> {
    let milli = |q: &Quantity| q.milli_value().map_err(|e| e.to_string());
    if let (Some(t), "Value") = (&target.value, target.type_.as_str()) {
        let t = milli(t)?;
        let n = ratio_replicas(current, value as f64 / t as f64, pods, tolerance)?;
        return Ok((
            n,
            MetricValueStatus {
                value: Some(Quantity::decimal_milli(value)),
                ..Default::default()
            },
        ));
    }
    if let (Some(t), "AverageValue") = (&target.average_value, target.type_.as_str()) {
        // kube's Get*PerPodMetricReplicas, over the target's status replicas.
        let t = milli(t)?;
        let mut n = status_replicas;
        let ratio = value as f64 / (t as f64 * status_replicas as f64);
        if (1.0 - ratio).abs() > tolerance {
            n = (value as f64 / t as f64).ceil() as i32;
        }
        let average = (value as f64 / status_replicas as f64).ceil() as i64;
        return Ok((
            n,
            MetricValueStatus {
                average_value: Some(Quantity::decimal_milli(average)),
                ..Default::default()
            },
        ));
    }
    Err(invalid.into())
}

/// How the Go printer (`%+v`) shows an External metric's label selector in kube's words.
fn go_label_selector(s: Option<&LabelSelector>) -> String {
    let Some(s) = s else {
        return "nil".into();
    };
    let labels: String = s
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let exprs: String = s
        .match_expressions
        .iter()
        .map(|e| {
            let values: String = e.values.iter().map(|v| format!("{v},")).collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                values.trim_end_matches(',')
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

/// A metric's label selector as the query's text (empty for none).
fn selector_text(s: Option<&LabelSelector>) -> Result<String, String> {
    match s {
        None => Ok(String::new()),
        Some(ls) => Selector::from_label_selector(ls)
            .map(|s| s.to_string())
            .map_err(|e| e.to_string()),
    }
}

/// A Pods, Object or External metric from the metrics APIs: replicas, status and words.
#[allow(clippy::too_many_arguments)]
fn api_metric(
    hpa: &HorizontalPodAutoscaler,
    m: &MetricSpec,
    reading: Option<&Result<ApiMetric, String>>,
    current: i32,
    status_replicas: i32,
    pods: &[Pod],
    tolerance: f64,
) -> Result<(i32, MetricStatus, String), (&'static str, String)> {
    let ns = hpa.metadata.namespace();
    // Not read at all: no metrics API serves the group.
    let reading =
        |reason: &'static str, group: &str, context: &dyn Fn(&str) -> String| match reading {
            Some(Ok(r)) => Ok(r.clone()),
            Some(Err(e)) => Err((reason, context(e))),
            None => Err((
                reason,
                context(&unable_to_fetch(group, not_registered(group))),
            )),
        };
    match (m.type_.as_str(), &m.pods, &m.object, &m.external) {
        ("Pods", Some(p), _, _) => {
            let name = &p.metric.name;
            let at = |e: &str| format!("unable to get metric {name}: {e}");
            let ApiMetric::PerPod(values) = reading("FailedGetPodsMetric", CUSTOM_METRICS.0, &at)?
            else {
                return Err(("FailedGetPodsMetric", at("no metrics read")));
            };
            let target = p
                .target
                .average_value
                .as_ref()
                .ok_or_else(|| ("FailedGetPodsMetric", at("no averageValue target")))?
                .milli_value()
                .map_err(|e| ("FailedGetPodsMetric", at(&e.to_string())))?;
            let (n, usage) = plain_replicas(current, target, pods, &values, tolerance)
                .map_err(|e| ("FailedGetPodsMetric", at(&e)))?;
            let status = MetricStatus {
                type_: "Pods".into(),
                pods: Some(api::autoscaling::PodsMetricStatus {
                    metric: p.metric.clone(),
                    current: MetricValueStatus {
                        average_value: Some(Quantity::decimal_milli(usage)),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            };
            Ok((n, status, format!("pods metric {name}")))
        }
        ("Object", _, Some(o), _) => {
            let (name, obj) = (&o.metric.name, &o.described_object);
            let at = |e: &str| {
                format!(
                    "unable to get metric {name}: {} on {ns} {}/{e}",
                    obj.kind, obj.name
                )
            };
            let ApiMetric::Value(value) = reading("FailedGetObjectMetric", CUSTOM_METRICS.0, &at)?
            else {
                return Err(("FailedGetObjectMetric", at("no metrics read")));
            };
            let (n, current_value) = value_replicas(
                value,
                &o.target,
                current,
                status_replicas,
                pods,
                tolerance,
                "invalid object metric source: neither a value target nor an average value target was set",
            )
            .map_err(|e| ("FailedGetObjectMetric", e))?;
            let status = MetricStatus {
                type_: "Object".into(),
                object: Some(api::autoscaling::ObjectMetricStatus {
                    metric: o.metric.clone(),
                    current: current_value,
                    described_object: obj.clone(),
                }),
                ..Default::default()
            };
            Ok((n, status, format!("{} metric {name}", obj.kind)))
        }
        ("External", _, _, Some(x)) => {
            let name = &x.metric.name;
            let selector = selector_text(x.metric.selector.as_ref()).unwrap_or_default();
            let at = |e: &str| format!("unable to get external metric {ns}/{name}/{selector}: {e}");
            let ApiMetric::Value(value) =
                reading("FailedGetExternalMetric", EXTERNAL_METRICS.0, &at)?
            else {
                return Err(("FailedGetExternalMetric", at("no metrics read")));
            };
            let (n, current_value) = value_replicas(
                value,
                &x.target,
                current,
                status_replicas,
                pods,
                tolerance,
                "invalid external metric source: neither a value target nor an average value target was set",
            )
            .map_err(|e| ("FailedGetExternalMetric", e))?;
            let status = MetricStatus {
                type_: "External".into(),
                external: Some(api::autoscaling::ExternalMetricStatus {
                    metric: x.metric.clone(),
                    current: current_value,
                }),
                ..Default::default()
            };
            Ok((
                n,
                status,
                format!(
                    "external metric {name}({})",
                    go_label_selector(x.metric.selector.as_ref())
                ),
            ))
        }
        _ => Err(unsupported_metric(m)),
    }
}

/// Reads what the Pods, Object and External metrics of `hpa` need from the metrics APIs
/// (kube's custom and external metrics clients): the pods' values of a Pods metric
/// (`/namespaces/NS/pods/*/METRIC?labelSelector=...`), an object's value
/// (`/namespaces/NS/RESOURCE/NAME/METRIC`, a Namespace's at `/namespaces/NS/metrics/METRIC`)
/// and an external metric's values, summed (`external.metrics.k8s.io`,
/// `/namespaces/NS/METRIC`).
pub async fn read_api_metrics(
    source: &dyn PodMetrics,
    hpa: &HorizontalPodAutoscaler,
    selector: Option<&Selector>,
) -> ApiMetrics {
    let ns = hpa.metadata.namespace();
    let mut out = ApiMetrics::new();
    let custom = |e: String| unable_to_fetch(CUSTOM_METRICS.0, e);
    let external = |e: String| unable_to_fetch(EXTERNAL_METRICS.0, e);
    for (i, m) in hpa.spec.metrics.iter().enumerate() {
        let reading = match (m.type_.as_str(), &m.pods, &m.object, &m.external) {
            ("Pods", Some(p), _, _) => {
                let result = async {
                    let metric_selector =
                        selector_text(p.metric.selector.as_ref()).map_err(custom)?;
                    let rest = format!(
                        "/namespaces/{ns}/pods/%2A/{}{}",
                        p.metric.name,
                        query(&[
                            (
                                "labelSelector",
                                selector.map(|s| s.to_string()).unwrap_or_default()
                            ),
                            ("metricLabelSelector", metric_selector),
                        ])
                    );
                    let (group, versions) = CUSTOM_METRICS;
                    let body = source.metrics_api(group, versions, rest).await;
                    let values = body.and_then(|b| metric_values(&b)).map_err(custom)?;
                    if values.is_empty() {
                        return Err("no metrics returned from custom metrics API".to_string());
                    }
                    Ok(ApiMetric::PerPod(values.into_iter().collect()))
                };
                result.await
            }
            ("Object", _, Some(o), _) => {
                let result = async {
                    let obj = &o.described_object;
                    let metric_selector = selector_text(o.metric.selector.as_ref())?;
                    let api_version = obj.api_version.as_deref().unwrap_or("");
                    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
                    let path = if obj.kind == "Namespace" && group.is_empty() {
                        format!("/namespaces/{ns}/metrics/{}", o.metric.name)
                    } else {
                        let kind = Kind::from_type(api_version, &obj.kind).ok_or_else(|| {
                            format!("no matches for kind \"{}\" in group \"{group}\"", obj.kind)
                        })?;
                        format!(
                            "/namespaces/{ns}/{}/{}/{}",
                            kind.info().plural,
                            obj.name,
                            o.metric.name
                        )
                    };
                    let rest = format!(
                        "{path}{}",
                        query(&[("metricLabelSelector", metric_selector)])
                    );
                    let (group, versions) = CUSTOM_METRICS;
                    let body = source.metrics_api(group, versions, rest).await?;
                    let values = metric_values(&body)?;
                    if values.len() != 1 {
                        return Err(format!(
                            "the custom metrics API server returned {} results when we asked for exactly one",
                            values.len()
                        ));
                    }
                    Ok(ApiMetric::Value(values[0].1))
                };
                result.await.map_err(custom)
            }
            ("External", _, _, Some(x)) => {
                let result = async {
                    let selector = selector_text(x.metric.selector.as_ref()).map_err(external)?;
                    let rest = format!(
                        "/namespaces/{ns}/{}{}",
                        x.metric.name,
                        query(&[("labelSelector", selector)])
                    );
                    let (group, versions) = EXTERNAL_METRICS;
                    let body = source.metrics_api(group, versions, rest).await;
                    let values = body.and_then(|b| metric_values(&b)).map_err(external)?;
                    if values.is_empty() {
                        return Err("no metrics returned from external metrics API".to_string());
                    }
                    Ok(ApiMetric::Value(values.iter().map(|(_, v)| v).sum()))
                };
                result.await
            }
            _ => continue,
        };
        out.insert(i, reading);
    }
    out
}

/// The items of a MetricValueList (custom.metrics.k8s.io v1beta1 or v1beta2) or an
/// ExternalMetricValueList: the described object's name (empty for external metrics) and
/// the value in thousandths.
fn metric_values(body: &[u8]) -> Result<Vec<(String, i64)>, String> {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Item {
        #[serde(default)]
        described_object: Option<Described>,
        value: Quantity,
    }
    #[derive(serde::Deserialize)]
    struct Described {
        #[serde(default)]
        name: String,
    }
    let list: List = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    list.items
        .into_iter()
        .map(|i| {
            let v = i.value.milli_value().map_err(|e| e.to_string())?;
            Ok((i.described_object.map(|d| d.name).unwrap_or_default(), v))
        })
        .collect()
}

/// The reason and message of a metric type the autoscaler does not know.
fn unsupported_metric(m: &MetricSpec) -> (&'static str, String) {
    (
        "InvalidMetricSourceType",
        format!("unknown metric source type {:?}", m.type_),
    )
}

/// Kubernetes' computeReplicasForMetrics: the largest proposal of the valid metrics.
fn replicas_for_metrics(
    hpa: &HorizontalPodAutoscaler,
    target: &TargetScale,
    pods: &[Pod],
    usage: &HashMap<String, Vec<ContainerUsage>>,
    api: &ApiMetrics,
    settings: &Settings,
    events: &mut Vec<PlannedEvent>,
) -> (Result<(i32, String), Cond>, Vec<MetricStatus>) {
    let (current, status_replicas) = (target.replicas, target.status_replicas);
    let mut statuses = Vec::new();
    let mut best: Option<(i32, String)> = None;
    let mut first_invalid: Option<Cond> = None;
    let mut invalid = 0;
    for (i, m) in hpa.spec.metrics.iter().enumerate() {
        let computed = match (m.type_.as_str(), &m.resource, &m.container_resource) {
            ("Resource", Some(r), _) => resource_metric(
                &r.name,
                None,
                &r.target,
                current,
                pods,
                usage,
                settings.tolerance,
            )
            .map(|(n, value, words)| {
                let status = MetricStatus {
                    type_: "Resource".into(),
                    resource: Some(ResourceMetricStatus {
                        name: r.name.clone(),
                        current: value,
                    }),
                    ..Default::default()
                };
                (n, status, words)
            })
            .map_err(|e| ("FailedGetResourceMetric", e)),
            ("ContainerResource", _, Some(r)) => resource_metric(
                &r.name,
                Some(&r.container),
                &r.target,
                current,
                pods,
                usage,
                settings.tolerance,
            )
            .map(|(n, value, words)| {
                let status = MetricStatus {
                    type_: "ContainerResource".into(),
                    container_resource: Some(api::autoscaling::ContainerResourceMetricStatus {
                        name: r.name.clone(),
                        container: r.container.clone(),
                        current: value,
                    }),
                    ..Default::default()
                };
                (n, status, format!("{words} on container {}", r.container))
            })
            .map_err(|e| ("FailedGetContainerResourceMetric", e)),
            ("Pods" | "Object" | "External", _, _) => api_metric(
                hpa,
                m,
                api.get(&i),
                current,
                status_replicas,
                pods,
                settings.tolerance,
            ),
            _ => Err(unsupported_metric(m)),
        };
        match computed {
            Ok((n, status, words)) => {
                statuses.push(status);
                if best.as_ref().is_none_or(|(b, _)| n > *b) {
                    best = Some((n, words));
                }
            }
            Err((reason, message)) => {
                invalid += 1;
                // An empty status keeps the positions of the others (kubectl's TARGETS).
                statuses.push(MetricStatus {
                    type_: String::new(),
                    ..Default::default()
                });
                events.push(PlannedEvent {
                    warning: true,
                    reason,
                    message: message.clone(),
                });
                first_invalid.get_or_insert(cond(
                    "ScalingActive",
                    false,
                    reason,
                    format!("the HPA was unable to compute the replica count: {message}"),
                ));
            }
        }
    }
    statuses.retain(|s| !s.type_.is_empty());
    let metrics = hpa.spec.metrics.len();
    match (best, first_invalid) {
        (Some((n, words)), None) => (Ok((n, words)), statuses),
        // Kubernetes scales on the valid metrics only when that is no scale-down.
        (Some((n, words)), Some(_)) if n >= current => (Ok((n, words)), statuses),
        (_, Some(c)) => {
            events.push(PlannedEvent {
                warning: true,
                reason: "FailedComputeMetricsReplicas",
                message: format!(
                    "invalid metrics ({invalid} invalid out of {metrics}), first error is: {}",
                    c.message
                        .trim_start_matches("the HPA was unable to compute the replica count: ")
                ),
            });
            (Err(c), statuses)
        }
        (None, None) => (
            Err(cond(
                "ScalingActive",
                false,
                "InvalidMetricSourceType",
                "the HPA was unable to compute the replica count: no metrics to compute",
            )),
            statuses,
        ),
    }
}

fn rules(r: &HPAScalingRules) -> Rules {
    Rules {
        stabilization_window_seconds: r.stabilization_window_seconds.unwrap_or(0) as i64,
        select_policy: r.select_policy.clone().unwrap_or_else(|| "Max".into()),
        policies: r
            .policies
            .iter()
            .map(|p| Policy {
                type_: p.type_.clone(),
                value: p.value,
                period_seconds: p.period_seconds as i64,
            })
            .collect(),
    }
}

/// One sync of `hpa` (Kubernetes' reconcileAutoscaler) against its target's scale, the
/// target's pods and their usage, at `now` (seconds). `history` is the autoscaler's memory
/// of recommendations and scale events, updated here.
#[allow(clippy::too_many_arguments)] // the sync's inputs, each plain data
pub fn plan(
    hpa: &HorizontalPodAutoscaler,
    target: &TargetScale,
    pods: &[Pod],
    usage: &HashMap<String, Vec<ContainerUsage>>,
    api: &ApiMetrics,
    history: &mut History,
    settings: &Settings,
    now: Time,
) -> Plan {
    let current = target.replicas;
    let min = hpa.spec.min_replicas.unwrap_or(1);
    let max = hpa.spec.max_replicas;
    let mut events = Vec::new();
    let mut conditions = vec![cond(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
    )];
    let mut current_metrics = Vec::new();
    let (desired, reason) = if current == 0 && min != 0 {
        conditions.push(cond(
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
        ));
        (0, None)
    } else if current > max {
        (
            max,
            Some("Current number of replicas above Spec.MaxReplicas".to_string()),
        )
    } else if current < min {
        (
            min,
            Some("Current number of replicas below Spec.MinReplicas".to_string()),
        )
    } else {
        let (computed, statuses) =
            replicas_for_metrics(hpa, target, pods, usage, api, settings, &mut events);
        current_metrics = statuses;
        let (proposal, words) = match computed {
            Ok(p) => p,
            Err(c) => {
                conditions.push(c);
                return Plan {
                    current_replicas: current,
                    desired_replicas: None,
                    rescale_reason: None,
                    current_metrics,
                    conditions,
                    events,
                };
            }
        };
        conditions.push(cond(
            "ScalingActive",
            true,
            "ValidMetricFound",
            format!("the HPA was able to successfully calculate a replica count from {words}"),
        ));
        let (up, down) = match &hpa.spec.behavior {
            Some(b) => (
                rules(&HPAScalingRules::scale_up_defaults(b.scale_up.as_ref())),
                rules(&HPAScalingRules::scale_down_defaults(b.scale_down.as_ref())),
            ),
            None => (
                Rules::default_up(),
                Rules::default_down(settings.downscale_stabilization_seconds),
            ),
        };
        let (desired, limit) = history.normalize(now.0, current, proposal, min, max, &up, &down);
        let limited = limit.reason != WITHIN.reason;
        conditions.push(cond("ScalingLimited", limited, limit.reason, limit.message));
        let reason = if desired > current {
            Some(format!("{words} above target"))
        } else if desired < current {
            Some("All metrics below target".to_string())
        } else {
            None
        };
        (desired, reason)
    };
    let rescale = desired != current;
    if !rescale {
        conditions[0] = cond(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        );
    }
    Plan {
        current_replicas: current,
        desired_replicas: Some(desired),
        rescale_reason: rescale.then(|| reason.unwrap_or_default()),
        current_metrics,
        conditions,
        events,
    }
}

/// The conditions of `plan` in the status, keeping a condition's lastTransitionTime while
/// its status stays.
fn merge_conditions(
    old: &[HorizontalPodAutoscalerCondition],
    new: &[Cond],
    now: Time,
) -> Vec<HorizontalPodAutoscalerCondition> {
    new.iter()
        .map(|c| {
            let since = old
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status)
                .and_then(|o| o.last_transition_time)
                .unwrap_or(now);
            HorizontalPodAutoscalerCondition {
                type_: c.type_.into(),
                status: c.status.into(),
                last_transition_time: Some(since),
                reason: Some(c.reason.clone()),
                message: Some(c.message.clone()),
            }
        })
        .collect()
}

/// Starts the autoscaler: every autoscaler is synced each `settings.sync_period`, and a new
/// or changed one at once.
pub fn start(ctx: &Context, metrics: Arc<dyn PodMetrics>, settings: Settings) {
    smol::spawn(run(ctx.clone(), metrics, settings)).detach();
}

async fn run(ctx: Context, metrics: Arc<dyn PodMetrics>, settings: Settings) {
    let recorder = Recorder::start(ctx.registry.clone(), "horizontal-pod-autoscaler");
    let changes = ctx.informers.subscribe(&[Kind::HorizontalPodAutoscaler]);
    let mut histories: HashMap<String, History> = HashMap::new();
    loop {
        let hpas: Vec<HorizontalPodAutoscaler> = ctx.informers.cache().list(None);
        histories.retain(|uid, _| hpas.iter().any(|h| &h.metadata.uid == uid));
        for hpa in hpas {
            if hpa.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let history = histories.entry(hpa.metadata.uid.clone()).or_default();
            if let Err(e) = sync(&ctx, &recorder, metrics.as_ref(), &settings, &hpa, history).await
            {
                if e.code() != 404 && e.code() != 409 {
                    tracing::warn!(hpa = %hpa.metadata.name, namespace = %hpa.metadata.namespace(), error = %e, "syncing the HorizontalPodAutoscaler failed");
                }
            }
        }
        // Our own status writes change the autoscalers too: only a new autoscaler or a
        // changed spec cuts the period short.
        let deadline = std::time::Instant::now() + settings.sync_period;
        loop {
            let next = futures_lite::future::or(async { Some(changes.recv().await) }, async {
                smol::Timer::at(deadline).await;
                None
            })
            .await;
            match next {
                None => break,
                Some(Err(_)) => return,
                Some(Ok(change)) => {
                    let spec_changed = match &change {
                        Change::Added { .. } => true,
                        Change::Modified { new, .. } => change
                            .old_meta()
                            .is_none_or(|m| m.generation != new.meta().generation),
                        _ => false,
                    };
                    if spec_changed {
                        break;
                    }
                }
            }
        }
    }
}

/// The scale of the target `hpa` names: replicas and selector, or the error Kubernetes
/// reports when it cannot get it. Built-in workloads come from the cache; a custom resource
/// with a scale subresource from the registry, through its definition's replica and
/// selector paths (the selector in its string form, as the Scale's `status.selector`).
async fn target_scale(
    ctx: &Context,
    hpa: &HorizontalPodAutoscaler,
) -> Result<(Kind, TargetScale), String> {
    let r = &hpa.spec.scale_target_ref;
    let ns = hpa.metadata.namespace();
    let api_version = r.api_version.as_deref().unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let no_match = || format!("no matches for kind \"{}\" in group \"{group}\"", r.kind);
    let kind = match (r.kind.as_str(), group) {
        ("Deployment", "apps") => Kind::Deployment,
        ("ReplicaSet", "apps") => Kind::ReplicaSet,
        ("StatefulSet", "apps") => Kind::StatefulSet,
        ("ReplicationController", "") => Kind::ReplicationController,
        _ => Kind::defined_custom()
            .into_iter()
            .find(|k| k.info().kind == r.kind && k.info().group == group)
            .ok_or_else(no_match)?,
    };
    let not_found = || {
        format!(
            "{} \"{}\" not found",
            kind.info().qualified_plural(),
            r.name
        )
    };
    let selector =
        |ls: Option<LabelSelector>| ls.and_then(|s| Selector::from_label_selector(&s).ok());
    if kind.is_custom() {
        let (spec, status_path, selector_path) = kind
            .custom_rules()
            .and_then(|rules| rules.scale_paths())
            .ok_or_else(no_match)?;
        let obj: CustomObject = ctx
            .registry
            .for_kind(kind)
            .get(ns, &r.name)
            .await
            .map_err(|_| not_found())?;
        let json = serde_json::to_value(&obj).unwrap_or_default();
        let at = |path: &str| json.pointer(&path.replace('.', "/")).cloned();
        let replicas = at(&spec).and_then(|v| v.as_i64()).unwrap_or(0) as i32;
        let status_replicas = at(&status_path).and_then(|v| v.as_i64()).unwrap_or(0) as i32;
        let selector = selector_path
            .and_then(|p| at(&p))
            .and_then(|v| v.as_str().map(str::to_string))
            .and_then(|s| Selector::parse(&s).ok());
        return Ok((
            kind,
            TargetScale {
                replicas,
                status_replicas,
                selector,
            },
        ));
    }
    let cache = ctx.informers.cache();
    let scale = match kind {
        Kind::Deployment => cache.get::<Deployment>(ns, &r.name).map(|d| {
            (
                d.spec.replicas,
                d.status.replicas.unwrap_or(0),
                selector(d.spec.selector),
            )
        }),
        Kind::ReplicaSet => cache.get::<ReplicaSet>(ns, &r.name).map(|d| {
            (
                d.spec.replicas,
                d.status.replicas,
                selector(d.spec.selector),
            )
        }),
        Kind::StatefulSet => cache.get::<StatefulSet>(ns, &r.name).map(|d| {
            (
                d.spec.replicas,
                d.status.replicas,
                selector(d.spec.selector),
            )
        }),
        _ => cache.get::<ReplicationController>(ns, &r.name).map(|d| {
            (
                d.spec.replicas,
                d.status.replicas,
                Selector::from_labels(&d.spec.selector).ok(),
            )
        }),
    }
    .ok_or_else(not_found)?;
    Ok((
        kind,
        TargetScale {
            replicas: scale.0.unwrap_or(1),
            status_replicas: scale.1,
            selector: scale.2,
        },
    ))
}

async fn set_replicas(
    ctx: &Context,
    kind: Kind,
    ns: &str,
    name: &str,
    n: i32,
) -> Result<(), ApiError> {
    let registry = ctx.registry.via_scale();
    match kind {
        Kind::Deployment => registry
            .mutate::<Deployment>(ns, name, Part::Main, move |d| {
                d.spec.replicas = Some(n);
                Ok(())
            })
            .await
            .map(drop),
        Kind::ReplicaSet => registry
            .mutate::<ReplicaSet>(ns, name, Part::Main, move |d| {
                d.spec.replicas = Some(n);
                Ok(())
            })
            .await
            .map(drop),
        Kind::StatefulSet => registry
            .mutate::<StatefulSet>(ns, name, Part::Main, move |d| {
                d.spec.replicas = Some(n);
                Ok(())
            })
            .await
            .map(drop),
        Kind::ReplicationController => registry
            .mutate::<ReplicationController>(ns, name, Part::Main, move |d| {
                d.spec.replicas = Some(n);
                Ok(())
            })
            .await
            .map(drop),
        custom => {
            // At the definition's spec replicas path, as a write of its scale.
            let (spec, _, _) = custom
                .custom_rules()
                .and_then(|rules| rules.scale_paths())
                .ok_or_else(|| ApiError::not_found(custom, name))?;
            let patch = crate::crd::path_patch(&spec, serde_json::json!(n));
            let body = serde_json::to_vec(&patch).unwrap_or_default();
            registry
                .for_kind(custom)
                .patch::<CustomObject>(
                    ns,
                    name,
                    crate::registry::PatchType::Merge,
                    body,
                    Part::Main,
                )
                .await
                .map(drop)
        }
    }
}

async fn sync(
    ctx: &Context,
    recorder: &Recorder,
    metrics: &dyn PodMetrics,
    settings: &Settings,
    hpa: &HorizontalPodAutoscaler,
    history: &mut History,
) -> Result<(), ApiError> {
    let ns = hpa.metadata.namespace().to_string();
    let now = Time::now();
    let mut status = hpa.status.clone();
    status.observed_generation = hpa.metadata.generation;
    match target_scale(ctx, hpa).await {
        Err(e) => {
            let message =
                format!("the HPA controller was unable to get the target's current scale: {e}");
            recorder.warning(hpa, "FailedGetScale", e);
            status.conditions = merge_conditions(
                &hpa.status.conditions,
                &[cond("AbleToScale", false, "FailedGetScale", message)],
                now,
            );
        }
        Ok((kind, target)) => {
            let pods: Vec<Pod> = match &target.selector {
                Some(sel) => ctx
                    .informers
                    .cache()
                    .list::<Pod>(Some(&ns))
                    .into_iter()
                    .filter(|p| sel.matches(&p.metadata.labels))
                    .collect(),
                None => Vec::new(),
            };
            let usage = if pods.is_empty() {
                HashMap::new()
            } else {
                metrics.usage(&pods).await
            };
            let api = read_api_metrics(metrics, hpa, target.selector.as_ref()).await;
            let mut plan = plan(hpa, &target, &pods, &usage, &api, history, settings, now);
            for e in &plan.events {
                if e.warning {
                    recorder.warning(hpa, e.reason, e.message.clone());
                } else {
                    recorder.normal(hpa, e.reason, e.message.clone());
                }
            }
            if let (Some(desired), Some(reason)) = (plan.desired_replicas, &plan.rescale_reason) {
                let r = &hpa.spec.scale_target_ref;
                match set_replicas(ctx, kind, &ns, &r.name, desired).await {
                    Ok(()) => {
                        history.record_scale(now.0, plan.current_replicas, desired);
                        recorder.normal(
                            hpa,
                            "SuccessfulRescale",
                            format!("New size: {desired}; reason: {reason}"),
                        );
                        plan.conditions[0] = cond(
                            "AbleToScale",
                            true,
                            "SucceededRescale",
                            format!("the HPA controller was able to update the target scale to {desired}"),
                        );
                        status.last_scale_time = Some(now);
                    }
                    Err(e) => {
                        recorder.warning(
                            hpa,
                            "FailedRescale",
                            format!("New size: {desired}; reason: {reason}; error: {e}"),
                        );
                        plan.conditions[0] = cond(
                            "AbleToScale",
                            false,
                            "FailedUpdateScale",
                            format!(
                                "the HPA controller was unable to update the target scale: {e}"
                            ),
                        );
                    }
                }
            }
            status.current_replicas = Some(plan.current_replicas);
            if let Some(d) = plan.desired_replicas {
                status.desired_replicas = d;
            }
            status.current_metrics = plan.current_metrics;
            status.conditions = merge_conditions(&hpa.status.conditions, &plan.conditions, now);
        }
    }
    write_status(ctx, hpa, status).await
}

async fn write_status(
    ctx: &Context,
    hpa: &HorizontalPodAutoscaler,
    status: HorizontalPodAutoscalerStatus,
) -> Result<(), ApiError> {
    if status == hpa.status {
        return Ok(());
    }
    // As Kubernetes' UpdateStatus on the synced copy: the status was computed from `hpa`,
    // so it is written only over that same version. A newer one (the spec patched, or an
    // earlier sync's status landed after the cache's copy was taken) keeps its status, and
    // its lastScaleTime is not lost to a stale copy, until the next sync (at once after a
    // spec change, else the next period); only a scale this sync made is recorded on it.
    let uid = hpa.metadata.uid.clone();
    let version = hpa.metadata.resource_version.clone();
    ctx.registry
        .mutate::<HorizontalPodAutoscaler>(
            hpa.metadata.namespace(),
            &hpa.metadata.name,
            Part::Status,
            move |h| {
                if h.metadata.uid != uid {
                    return Ok(());
                }
                if h.metadata.resource_version == version {
                    h.status = status.clone();
                } else if status.last_scale_time > h.status.last_scale_time {
                    // This sync scaled the target: that fact stands whatever else changed.
                    h.status.last_scale_time = status.last_scale_time;
                }
                Ok(())
            },
        )
        .await
        .map(drop)
}

/// CPU usage by pod uid, one container each.
#[cfg(test)]
fn usage_of(pods: &[(&str, i64)]) -> HashMap<String, Vec<ContainerUsage>> {
    pods.iter()
        .map(|(uid, cpu)| {
            (
                uid.to_string(),
                vec![ContainerUsage {
                    name: "c".into(),
                    cpu_milli: *cpu,
                    memory_bytes: 0,
                }],
            )
        })
        .collect::<HashMap<_, _>>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ready: bool, request: i64, usage: Option<i64>) -> PodSample {
        PodSample {
            name: "p".into(),
            ready,
            gone: false,
            request: Some(request),
            usage,
        }
    }

    #[test]
    fn utilisation_tolerance_and_ceiling() {
        // 2 pods at 90% of 100m against 50%: ceil(1.8 * 2) = 4.
        let pods = [pod(true, 100, Some(90)), pod(true, 100, Some(90))];
        let r = resource_replicas("cpu", 2, 50, &pods, TOLERANCE).unwrap();
        assert_eq!(
            r,
            Recommendation {
                replicas: 4,
                utilization: 90
            }
        );
        // 54% against 50% is within the 10% tolerance.
        let pods = [pod(true, 100, Some(54)), pod(true, 100, Some(54))];
        assert_eq!(
            resource_replicas("cpu", 2, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            2
        );
        // Idle: 1% -> ceil(0.02 * 4) = 1.
        let pods = vec![pod(true, 100, Some(1)); 4];
        assert_eq!(
            resource_replicas("cpu", 4, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            1
        );
    }

    /// Requests are any quantity a pod asks for: their sum, and usage times 100, overflowed
    /// i64; utilisation past int32 wrapped.
    #[test]
    fn utilisation_of_the_largest_requests_and_usage() {
        let huge = [
            pod(true, i64::MAX, Some(i64::MAX)),
            pod(true, i64::MAX, Some(i64::MAX)),
        ];
        let r = resource_replicas("cpu", 2, 50, &huge, TOLERANCE).unwrap();
        assert_eq!(
            r,
            Recommendation {
                replicas: 4,
                utilization: 100
            }
        );
        let hot = [pod(true, 1, Some(i64::MAX))];
        let r = resource_replicas("cpu", 1, 50, &hot, TOLERANCE).unwrap();
        assert_eq!(r.utilization, i32::MAX);
        assert_eq!(r.replicas, 42_949_673, "ceil(i32::MAX / 50)");
        let cold = [pod(true, 1, Some(i64::MIN))];
        let r = resource_replicas("cpu", 5, 50, &cold, TOLERANCE).unwrap();
        assert_eq!(r.utilization, i32::MIN);
        assert_eq!(
            r.replicas, -42_949_672,
            "normalize() then keeps to minReplicas"
        );
        assert_eq!(ratio(&[(i64::MAX, i64::MAX), (i64::MAX, 1)], 100).1, 199);
    }

    /// Scale events and behavior periods of any int32, counts at the int32 limits.
    #[test]
    fn rate_limits_at_the_int32_limits() {
        let max = i32::MAX;
        let rules = |value, period| Rules {
            stabilization_window_seconds: i64::from(i32::MAX),
            select_policy: "Max".into(),
            policies: vec![Policy {
                type_: "Pods".into(),
                value,
                period_seconds: period,
            }],
        };
        let (up, down) = (rules(max, i64::from(max)), rules(max, i64::MIN));
        let mut h = History::default();
        h.record_scale(i64::MIN, 0, max);
        h.record_scale(i64::MIN, 0, max);
        h.record_scale(i64::MAX, max, 0);
        h.record_scale(0, i32::MIN, max);
        let (n, _) = h.normalize(i64::MAX, max, max, 1, max, &up, &down);
        assert_eq!(n, max);
        let (n, _) = h.normalize(i64::MIN, 1, max, 1, max, &up, &down);
        assert!((1..=max).contains(&n));
        let (n, _) = h.normalize(0, max, 1, 1, max, &up, &down);
        assert!((1..=max).contains(&n));
    }

    #[test]
    fn missing_metrics_and_unready_pods_damp_the_change() {
        // Scale up with an unready pod: it counts as 0%, (60+60+0)/300 = 40% against 50%
        // crosses back below the target, so no scale-up at all (ready pods alone: 60%).
        let pods = [
            pod(true, 100, Some(60)),
            pod(true, 100, Some(60)),
            pod(false, 100, None),
        ];
        assert_eq!(
            resource_replicas("cpu", 3, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            3
        );
        // Scale down with a pod without metrics: it counts as 100%, (10+10+100)/300 = 40%
        // vs 50% -> ceil(0.8 * 3) = 3.
        let pods = [
            pod(true, 100, Some(10)),
            pod(true, 100, Some(10)),
            pod(true, 100, None),
        ];
        assert_eq!(
            resource_replicas("cpu", 3, 50, &pods, TOLERANCE)
                .unwrap()
                .replicas,
            3
        );
        // No metrics at all.
        let pods = [pod(false, 100, None)];
        assert_eq!(
            resource_replicas("cpu", 1, 50, &pods, TOLERANCE).unwrap_err(),
            "did not receive metrics for targeted pods (pods might be unready)"
        );
    }

    #[test]
    fn stabilisation_window_and_rate_limits() {
        let up = Rules::default_up();
        let down = Rules::default_down(60);
        let mut h = History::default();
        // Scale-up is limited to max(4 pods, 100%) per 15 s: 1 -> 5 at most.
        let (n, why) = h.normalize(0, 1, 20, 1, 10, &up, &down);
        assert_eq!((n, why.reason), (5, "ScaleUpLimit"));
        h.record_scale(0, 1, 5);
        // Within the same 15 s, nothing more.
        let (n, _) = h.normalize(5, 5, 20, 1, 10, &up, &down);
        assert_eq!(n, 5);
        // Later, up to the max.
        let (n, why) = h.normalize(20, 5, 20, 1, 10, &up, &down);
        assert_eq!((n, why.reason), (10, "TooManyReplicas"));
        h.record_scale(20, 5, 10);
        // A low recommendation waits out the 60 s window (the highest recent one holds).
        let (n, _) = h.normalize(30, 10, 1, 1, 10, &up, &down);
        assert_eq!(n, 10);
        let (n, _) = h.normalize(70, 10, 1, 1, 10, &up, &down);
        assert_eq!(
            n, 10,
            "a recommendation of 20 at t=20 is still in the window"
        );
        let (n, why) = h.normalize(91, 10, 1, 1, 10, &up, &down);
        assert_eq!((n, why.reason), (1, "DesiredWithinRange"));
        // Pods policy on the way down: at most 2 pods per minute.
        let slow = Rules {
            stabilization_window_seconds: 0,
            select_policy: "Max".into(),
            policies: vec![Policy {
                type_: "Pods".into(),
                value: 2,
                period_seconds: 60,
            }],
        };
        let mut h = History::default();
        let (n, why) = h.normalize(0, 10, 1, 1, 10, &up, &slow);
        assert_eq!((n, why.reason), (8, "ScaleDownLimit"));
    }

    fn phase_pod(name: &str, phase: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.status.phase = Some(phase.into());
        p
    }

    fn per_pod(v: &[(&str, i64)]) -> HashMap<String, i64> {
        v.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn plain_metric_replicas_as_kube_computes_them() {
        let (a, b) = (phase_pod("a", "Running"), phase_pod("b", "Running"));
        // 25 a pod against 10: ceil(2.5 x 2) = 5.
        let busy = per_pod(&[("a", 25_000), ("b", 25_000)]);
        assert_eq!(
            plain_replicas(2, 10_000, &[a.clone(), b.clone()], &busy, 0.1),
            Ok((5, 25_000))
        );
        // Within the tolerance: unchanged.
        let near = per_pod(&[("a", 10_500), ("b", 10_400)]);
        assert_eq!(
            plain_replicas(2, 10_000, &[a.clone(), b.clone()], &near, 0.1),
            Ok((2, 10_450))
        );
        // A pending pod counts as 0 on a scale-up: 50 over 3 against 10, ceil(1.67 x 3).
        let pending = phase_pod("c", "Pending");
        assert_eq!(
            plain_replicas(
                3,
                10_000,
                &[a.clone(), b.clone(), pending.clone()],
                &busy,
                0.1
            ),
            Ok((5, 25_000))
        );
        // Missing values count as the target on a scale-down: (2+2+10+10) / 40, ceil(0.6 x 4).
        let idle = per_pod(&[("a", 2_000), ("b", 2_000)]);
        let (c, d) = (phase_pod("c", "Running"), phase_pod("d", "Running"));
        assert_eq!(
            plain_replicas(4, 10_000, &[a, b, c, d], &idle, 0.1),
            Ok((3, 2_000))
        );
        assert_eq!(
            plain_replicas(1, 10_000, &[pending], &per_pod(&[("c", 5)]), 0.1),
            Err("did not receive metrics for targeted pods (pods might be unready)".into())
        );
    }

    #[test]
    fn one_value_against_value_and_average_targets() {
        let target = |type_: &str, q: &str| MetricTarget {
            type_: type_.into(),
            value: (type_ == "Value").then(|| Quantity(q.into())),
            average_value: (type_ == "AverageValue").then(|| Quantity(q.into())),
            ..Default::default()
        };
        // 30 against 10 a replica: 3, the average over the one replica there is.
        let (n, current) =
            value_replicas(30_000, &target("AverageValue", "10"), 1, 1, &[], 0.1, "").unwrap();
        assert_eq!((n, current.average_value), (3, Some(Quantity("30".into()))));
        // Three replicas already: within the tolerance, 10 each.
        let (n, current) =
            value_replicas(30_000, &target("AverageValue", "10"), 3, 3, &[], 0.1, "").unwrap();
        assert_eq!((n, current.average_value), (3, Some(Quantity("10".into()))));
        // A Value target times the ready pods; from zero replicas, the ratio itself.
        let mut ready = phase_pod("a", "Running");
        ready.status.conditions = vec![api::core::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }];
        let pods = [ready, phase_pod("b", "Pending")];
        let (n, current) =
            value_replicas(1_500, &target("Value", "500m"), 2, 2, &pods, 0.1, "").unwrap();
        assert_eq!((n, current.value), (3, Some(Quantity("1500m".into()))));
        assert_eq!(
            value_replicas(1_500, &target("Value", "500m"), 0, 0, &[], 0.1, "")
                .unwrap()
                .0,
            3
        );
        assert_eq!(
            value_replicas(1, &target("Utilization", "1"), 1, 1, &[], 0.1, "neither"),
            Err("neither".into())
        );
    }

    mod plan {
        use super::super::*;
        use api::autoscaling::{
            CrossVersionObjectReference, HorizontalPodAutoscalerBehavior, MetricSpec,
            PodsMetricSource, ResourceMetricSource,
        };
        use api::core::{Container, PodCondition, ResourceRequirements};

        fn hpa(
            metrics: Vec<MetricSpec>,
            behavior: Option<HorizontalPodAutoscalerBehavior>,
        ) -> HorizontalPodAutoscaler {
            let mut h = HorizontalPodAutoscaler::default();
            h.metadata.name = "web".into();
            h.spec.scale_target_ref = CrossVersionObjectReference {
                kind: "Deployment".into(),
                name: "web".into(),
                api_version: Some("apps/v1".into()),
            };
            h.spec.min_replicas = Some(1);
            h.spec.max_replicas = 4;
            h.spec.metrics = metrics;
            h.spec.behavior = behavior;
            h
        }

        fn burst_down() -> Option<HorizontalPodAutoscalerBehavior> {
            Some(HorizontalPodAutoscalerBehavior {
                scale_down: Some(HPAScalingRules {
                    stabilization_window_seconds: Some(0),
                    ..Default::default()
                }),
                scale_up: None,
            })
        }

        fn pod(uid: &str, cpu_request: &str, memory_request: &str) -> Pod {
            let mut p = Pod::default();
            p.metadata.name = format!("web-{uid}");
            p.metadata.uid = uid.into();
            p.status.phase = Some("Running".into());
            p.status.conditions = vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }];
            p.spec.containers = vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: [
                        ("cpu".to_string(), Quantity(cpu_request.into())),
                        ("memory".to_string(), Quantity(memory_request.into())),
                    ]
                    .into(),
                    ..Default::default()
                }),
                ..Default::default()
            }];
            p
        }

        fn target(replicas: i32) -> TargetScale {
            TargetScale {
                replicas,
                status_replicas: replicas,
                selector: None,
            }
        }

        fn find<'a>(p: &'a Plan, type_: &str) -> &'a Cond {
            p.conditions
                .iter()
                .find(|c| c.type_ == type_)
                .unwrap_or_else(|| panic!("no {type_} in {p:?}"))
        }

        #[test]
        fn scales_up_on_cpu_utilisation_with_the_reason_and_status() {
            let h = hpa(vec![api::autoscaling::cpu_utilization_metric(50)], None);
            let pods = [pod("a", "100m", "1Mi"), pod("b", "100m", "1Mi")];
            let usage = usage_of(&[("a", 90), ("b", 90)]);
            let p = plan(
                &h,
                &target(2),
                &pods,
                &usage,
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(p.desired_replicas, Some(4));
            assert_eq!(
                p.rescale_reason.as_deref(),
                Some("cpu resource utilization (percentage of request) above target")
            );
            let cpu = p.current_metrics[0].resource.as_ref().unwrap();
            assert_eq!(cpu.current.average_utilization, Some(90));
            assert_eq!(cpu.current.average_value, Some(Quantity("90m".into())));
            assert_eq!(find(&p, "AbleToScale").reason, "SucceededGetScale");
            let active = find(&p, "ScalingActive");
            assert_eq!(
                (active.status, active.reason.as_str()),
                ("True", "ValidMetricFound")
            );
            assert_eq!(
                active.message,
                "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"
            );
            let limited = find(&p, "ScalingLimited");
            assert_eq!(
                (limited.status, limited.reason.as_str()),
                ("False", "DesiredWithinRange")
            );
        }

        #[test]
        fn the_maximum_limits_and_says_so() {
            let h = hpa(vec![api::autoscaling::cpu_utilization_metric(50)], None);
            let pods = [pod("a", "100m", "1Mi")];
            let usage = usage_of(&[("a", 1000)]);
            let p = plan(
                &h,
                &target(1),
                &pods,
                &usage,
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(p.desired_replicas, Some(4));
            let limited = find(&p, "ScalingLimited");
            assert_eq!(
                (limited.status, limited.reason.as_str()),
                ("True", "TooManyReplicas")
            );
        }

        #[test]
        fn without_behavior_scale_down_waits_for_the_window_and_with_zero_it_does_not() {
            let pods: Vec<Pod> = ["a", "b", "c", "d"]
                .iter()
                .map(|u| pod(u, "100m", "1Mi"))
                .collect();
            let busy = usage_of(&[("a", 50), ("b", 50), ("c", 50), ("d", 50)]);
            let idle = usage_of(&[("a", 1), ("b", 1), ("c", 1), ("d", 1)]);
            let settings = Settings::default();
            let h = hpa(vec![api::autoscaling::cpu_utilization_metric(50)], None);
            let mut history = History::default();
            let p = plan(
                &h,
                &target(4),
                &pods,
                &busy,
                &ApiMetrics::new(),
                &mut history,
                &settings,
                Time(1000),
            );
            assert_eq!(p.desired_replicas, Some(4));
            assert_eq!(p.rescale_reason, None);
            assert_eq!(find(&p, "AbleToScale").reason, "ReadyForNewScale");
            // 15 s later the pods idle, but the 5-minute window remembers 4.
            let p = plan(
                &h,
                &target(4),
                &pods,
                &idle,
                &ApiMetrics::new(),
                &mut history,
                &settings,
                Time(1015),
            );
            assert_eq!(p.desired_replicas, Some(4));
            assert_eq!(p.rescale_reason, None);
            // After the window: down to the minimum.
            let p = plan(
                &h,
                &target(4),
                &pods,
                &idle,
                &ApiMetrics::new(),
                &mut history,
                &settings,
                Time(1400),
            );
            assert_eq!(p.desired_replicas, Some(1));
            assert_eq!(
                p.rescale_reason.as_deref(),
                Some("All metrics below target")
            );
            // A zero window scales down at once.
            let h = hpa(
                vec![api::autoscaling::cpu_utilization_metric(50)],
                burst_down(),
            );
            let mut history = History::default();
            plan(
                &h,
                &target(4),
                &pods,
                &busy,
                &ApiMetrics::new(),
                &mut history,
                &settings,
                Time(1000),
            );
            let p = plan(
                &h,
                &target(4),
                &pods,
                &idle,
                &ApiMetrics::new(),
                &mut history,
                &settings,
                Time(1015),
            );
            assert_eq!(p.desired_replicas, Some(1));
        }

        #[test]
        fn memory_average_value_ignores_requests() {
            let metric = MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "memory".into(),
                    target: MetricTarget {
                        type_: "AverageValue".into(),
                        average_value: Some(Quantity("10Mi".into())),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            };
            let h = hpa(vec![metric], None);
            let pods = [pod("a", "100m", "1Mi")];
            let usage: HashMap<String, Vec<ContainerUsage>> = [(
                "a".to_string(),
                vec![ContainerUsage {
                    name: "c".into(),
                    cpu_milli: 1,
                    memory_bytes: 30 << 20,
                }],
            )]
            .into();
            let p = plan(
                &h,
                &target(1),
                &pods,
                &usage,
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(p.desired_replicas, Some(3));
            assert_eq!(
                p.rescale_reason.as_deref(),
                Some("memory resource above target")
            );
            let m = p.current_metrics[0].resource.as_ref().unwrap();
            assert_eq!(
                m.current.average_value,
                Some(Quantity((30i64 << 20).to_string()))
            );
            assert_eq!(m.current.average_utilization, None);
        }

        #[test]
        fn metrics_without_a_source_stop_scaling_with_kubernetes_reasons() {
            let pods_metric = MetricSpec {
                type_: "Pods".into(),
                pods: Some(PodsMetricSource {
                    metric: api::autoscaling::MetricIdentifier {
                        name: "rps".into(),
                        selector: None,
                    },
                    target: MetricTarget {
                        type_: "AverageValue".into(),
                        average_value: Some(Quantity("10".into())),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            };
            let h = hpa(vec![pods_metric], None);
            let pods = [pod("a", "100m", "1Mi")];
            let p = plan(
                &h,
                &target(2),
                &pods,
                &usage_of(&[("a", 5)]),
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(p.desired_replicas, None);
            assert_eq!(p.rescale_reason, None);
            let active = find(&p, "ScalingActive");
            assert_eq!(
                (active.status, active.reason.as_str()),
                ("False", "FailedGetPodsMetric")
            );
            assert!(
                active.message.starts_with(
                    "the HPA was unable to compute the replica count: unable to get metric rps"
                ),
                "{active:?}"
            );
            assert!(p
                .events
                .iter()
                .any(|e| e.reason == "FailedComputeMetricsReplicas"
                    && e.message
                        .starts_with("invalid metrics (1 invalid out of 1)")));
            // CPU with no samples at all.
            let h = hpa(vec![api::autoscaling::cpu_utilization_metric(50)], None);
            let p = plan(
                &h,
                &target(2),
                &pods,
                &HashMap::new(),
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(find(&p, "ScalingActive").reason, "FailedGetResourceMetric");
        }

        #[test]
        fn a_target_at_zero_disables_and_out_of_range_targets_are_brought_in() {
            let h = hpa(vec![api::autoscaling::cpu_utilization_metric(50)], None);
            let p = plan(
                &h,
                &target(0),
                &[],
                &HashMap::new(),
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(p.desired_replicas, Some(0));
            assert_eq!(p.rescale_reason, None);
            assert_eq!(find(&p, "ScalingActive").reason, "ScalingDisabled");
            let p = plan(
                &h,
                &target(9),
                &[],
                &HashMap::new(),
                &ApiMetrics::new(),
                &mut History::default(),
                &Settings::default(),
                Time(1000),
            );
            assert_eq!(p.desired_replicas, Some(4));
            assert_eq!(
                p.rescale_reason.as_deref(),
                Some("Current number of replicas above Spec.MaxReplicas")
            );
        }

        #[test]
        fn conditions_keep_their_transition_time_while_their_status_stays() {
            let old = vec![HorizontalPodAutoscalerCondition {
                type_: "AbleToScale".into(),
                status: "True".into(),
                last_transition_time: Some(Time(5)),
                reason: Some("SucceededGetScale".into()),
                message: None,
            }];
            let new = [
                cond("AbleToScale", true, "ReadyForNewScale", "x"),
                cond("ScalingActive", false, "ScalingDisabled", "y"),
            ];
            let merged = merge_conditions(&old, &new, Time(50));
            assert_eq!(merged[0].last_transition_time, Some(Time(5)));
            assert_eq!(merged[0].reason.as_deref(), Some("ReadyForNewScale"));
            assert_eq!(merged[1].last_transition_time, Some(Time(50)));
        }
    }
}
