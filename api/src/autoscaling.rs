//! autoscaling/v2 HorizontalPodAutoscaler, the kind the server stores, and the conversion
//! to and from autoscaling/v1, which kube-apiserver serves beside it and which
//! `kubectl autoscale` (kubectl 1.32) and older clients write. v1 knows only a CPU
//! utilisation target; as kube-apiserver does, the rest of a v2 object travels through v1
//! in the `autoscaling.alpha.kubernetes.io/*` annotations, so a round trip loses nothing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::core::spec_and_status;
use crate::meta::{LabelSelector, ObjectMeta, Quantity, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of HorizontalPodAutoscaler (and of the Scale subresource).
pub const GROUP: &str = "autoscaling";
/// The version the server stores and prefers.
pub const VERSION: &str = "v2";
/// The older version served beside it, converted at the edge.
pub const LEGACY_VERSION: &str = "v1";

/// Kubernetes' default CPU utilisation target when an autoscaler names no metric.
pub const DEFAULT_CPU_UTILIZATION: i32 = 80;

/// autoscaling/v2 HorizontalPodAutoscaler.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler")]
#[schemars(
    description = "HorizontalPodAutoscaler is the configuration for a horizontal pod autoscaler, which automatically manages the replica count of any resource implementing the scale subresource based on the metrics specified."
)]
pub struct HorizontalPodAutoscaler {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// spec is the specification for the behaviour of the autoscaler.
    pub spec: HorizontalPodAutoscalerSpec,
    /// status is the current information about the autoscaler.
    pub status: HorizontalPodAutoscalerStatus,
}

/// autoscaling/v2 HorizontalPodAutoscalerSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec")]
#[schemars(
    description = "HorizontalPodAutoscalerSpec describes the desired functionality of the HorizontalPodAutoscaler."
)]
pub struct HorizontalPodAutoscalerSpec {
    /// scaleTargetRef points to the target resource to scale, and is used to the pods for
    /// which metrics should be collected, as well as to actually change the replica count.
    pub scale_target_ref: CrossVersionObjectReference,
    /// minReplicas is the lower limit for the number of replicas to which the autoscaler can
    /// scale down. It defaults to 1 pod.
    pub min_replicas: Option<i32>,
    /// maxReplicas is the upper limit for the number of replicas to which the autoscaler can
    /// scale up. It cannot be less that minReplicas.
    pub max_replicas: i32,
    /// metrics contains the specifications for which to use to calculate the desired replica
    /// count (the maximum replica count across all metrics will be used). If not set, the
    /// default metric will be set to 80% average CPU utilization.
    pub metrics: Vec<MetricSpec>,
    /// behavior configures the scaling behavior of the target in both Up and Down directions
    /// (scaleUp and scaleDown fields respectively).
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
}

/// autoscaling/v2 CrossVersionObjectReference.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.CrossVersionObjectReference")]
#[schemars(
    description = "CrossVersionObjectReference contains enough information to let you identify the referred resource."
)]
pub struct CrossVersionObjectReference {
    /// kind is the kind of the referent.
    pub kind: String,
    /// name is the name of the referent.
    pub name: String,
    /// apiVersion is the API version of the referent.
    pub api_version: Option<String>,
}

/// autoscaling/v2 MetricSpec: exactly one source, named by `type`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.MetricSpec")]
#[schemars(
    description = "MetricSpec specifies how to scale based on a single metric (only `type` and one other matching field should be set at once)."
)]
pub struct MetricSpec {
    /// type is the type of metric source. It should be one of "ContainerResource",
    /// "External", "Object", "Pods" or "Resource", each mapping to a matching field in the
    /// object.
    #[serde(rename = "type")]
    pub type_: String,
    /// object refers to a metric describing a single kubernetes object.
    pub object: Option<ObjectMetricSource>,
    /// pods refers to a metric describing each pod in the current scale target.
    pub pods: Option<PodsMetricSource>,
    /// resource refers to a resource metric (such as those specified in requests and limits)
    /// known to Kubernetes describing each pod in the current scale target.
    pub resource: Option<ResourceMetricSource>,
    /// containerResource refers to a resource metric known to Kubernetes describing a single
    /// container in each pod of the current scale target.
    pub container_resource: Option<ContainerResourceMetricSource>,
    /// external refers to a global metric that is not associated with any Kubernetes object.
    pub external: Option<ExternalMetricSource>,
}

/// autoscaling/v2 MetricTarget.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.MetricTarget")]
#[schemars(
    description = "MetricTarget defines the target value, average value, or average utilization of a specific metric"
)]
pub struct MetricTarget {
    /// type represents whether the metric type is Utilization, Value, or AverageValue
    #[serde(rename = "type")]
    pub type_: String,
    /// value is the target value of the metric (as a quantity).
    pub value: Option<Quantity>,
    /// averageValue is the target value of the average of the metric across all relevant
    /// pods (as a quantity)
    pub average_value: Option<Quantity>,
    /// averageUtilization is the target value of the average of the resource metric across
    /// all relevant pods, represented as a percentage of the requested value of the resource
    /// for the pods. Currently only valid for Resource metric source type
    pub average_utilization: Option<i32>,
}

/// autoscaling/v2 MetricValueStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.MetricValueStatus")]
#[schemars(description = "MetricValueStatus holds the current value for a metric")]
pub struct MetricValueStatus {
    /// value is the current value of the metric (as a quantity).
    pub value: Option<Quantity>,
    /// averageValue is the current value of the average of the metric across all relevant
    /// pods (as a quantity)
    pub average_value: Option<Quantity>,
    /// currentAverageUtilization is the current value of the average of the resource metric
    /// across all relevant pods, represented as a percentage of the requested value of the
    /// resource for the pods.
    pub average_utilization: Option<i32>,
}

/// autoscaling/v2 MetricIdentifier.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.MetricIdentifier")]
#[schemars(description = "MetricIdentifier defines the name and optionally selector for a metric")]
pub struct MetricIdentifier {
    /// name is the name of the given metric
    pub name: String,
    /// selector is the string-encoded form of a standard kubernetes label selector for the
    /// given metric.
    pub selector: Option<LabelSelector>,
}

/// autoscaling/v2 ResourceMetricSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ResourceMetricSource")]
#[schemars(
    description = "ResourceMetricSource indicates how to scale on a resource metric known to Kubernetes, as specified in requests and limits, describing each pod in the current scale target (e.g. CPU or memory)."
)]
pub struct ResourceMetricSource {
    /// name is the name of the resource in question.
    pub name: String,
    /// target specifies the target value for the given metric
    pub target: MetricTarget,
}

/// autoscaling/v2 ContainerResourceMetricSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ContainerResourceMetricSource")]
#[schemars(
    description = "ContainerResourceMetricSource indicates how to scale on a resource metric known to Kubernetes, as specified in requests and limits, describing a single container in each pod of the current scale target (e.g. CPU or memory)."
)]
pub struct ContainerResourceMetricSource {
    /// name is the name of the resource in question.
    pub name: String,
    /// target specifies the target value for the given metric
    pub target: MetricTarget,
    /// container is the name of the container in the pods of the scaling target
    pub container: String,
}

/// autoscaling/v2 PodsMetricSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.PodsMetricSource")]
#[schemars(
    description = "PodsMetricSource indicates how to scale on a metric describing each pod in the current scale target (for example, transactions-processed-per-second)."
)]
pub struct PodsMetricSource {
    /// metric identifies the target metric by name and selector
    pub metric: MetricIdentifier,
    /// target specifies the target value for the given metric
    pub target: MetricTarget,
}

/// autoscaling/v2 ObjectMetricSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ObjectMetricSource")]
#[schemars(
    description = "ObjectMetricSource indicates how to scale on a metric describing a kubernetes object (for example, hits-per-second on an Ingress object)."
)]
pub struct ObjectMetricSource {
    /// describedObject specifies the descriptions of a object,such as kind,name apiVersion
    pub described_object: CrossVersionObjectReference,
    /// target specifies the target value for the given metric
    pub target: MetricTarget,
    /// metric identifies the target metric by name and selector
    pub metric: MetricIdentifier,
}

/// autoscaling/v2 ExternalMetricSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ExternalMetricSource")]
#[schemars(
    description = "ExternalMetricSource indicates how to scale on a metric not associated with any Kubernetes object (for example length of queue in cloud messaging service, or QPS from loadbalancer running outside of cluster)."
)]
pub struct ExternalMetricSource {
    /// metric identifies the target metric by name and selector
    pub metric: MetricIdentifier,
    /// target specifies the target value for the given metric
    pub target: MetricTarget,
}

/// autoscaling/v2 HorizontalPodAutoscalerBehavior.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerBehavior")]
#[schemars(
    description = "HorizontalPodAutoscalerBehavior configures the scaling behavior of the target in both Up and Down directions (scaleUp and scaleDown fields respectively)."
)]
pub struct HorizontalPodAutoscalerBehavior {
    /// scaleUp is scaling policy for scaling Up. If not set, the default value is the higher
    /// of: increase no more than 4 pods per 60 seconds; double the number of pods per 60
    /// seconds. No stabilization is used.
    pub scale_up: Option<HPAScalingRules>,
    /// scaleDown is scaling policy for scaling Down. If not set, the default value is to
    /// allow to scale down to minReplicas pods, with a 300 second stabilization window (i.e.,
    /// the highest recommendation for the last 300sec is used).
    pub scale_down: Option<HPAScalingRules>,
}

/// autoscaling/v2 HPAScalingRules.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HPAScalingRules")]
#[schemars(
    description = "HPAScalingRules configures the scaling behavior for one direction via scaling Policy Rules and a configurable metric tolerance."
)]
pub struct HPAScalingRules {
    /// stabilizationWindowSeconds is the number of seconds for which past recommendations
    /// should be considered while scaling up or scaling down. StabilizationWindowSeconds must
    /// be greater than or equal to zero and less than or equal to 3600 (one hour).
    pub stabilization_window_seconds: Option<i32>,
    /// selectPolicy is used to specify which policy should be used. If not set, the default
    /// value Max is used.
    pub select_policy: Option<String>,
    /// policies is a list of potential scaling polices which can be used during scaling.
    pub policies: Vec<HPAScalingPolicy>,
}

/// autoscaling/v2 HPAScalingPolicy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HPAScalingPolicy")]
#[schemars(
    description = "HPAScalingPolicy is a single policy which must hold true for a specified past interval."
)]
pub struct HPAScalingPolicy {
    /// type is used to specify the scaling policy.
    #[serde(rename = "type")]
    pub type_: String,
    /// value contains the amount of change which is permitted by the policy. It must be
    /// greater than zero
    pub value: i32,
    /// periodSeconds specifies the window of time for which the policy should hold true.
    /// PeriodSeconds must be greater than zero and less than or equal to 1800 (30 min).
    pub period_seconds: i32,
}

/// autoscaling/v2 HorizontalPodAutoscalerStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus")]
#[schemars(
    description = "HorizontalPodAutoscalerStatus describes the current status of a horizontal pod autoscaler."
)]
pub struct HorizontalPodAutoscalerStatus {
    /// observedGeneration is the most recent generation observed by this autoscaler.
    pub observed_generation: Option<i64>,
    /// lastScaleTime is the last time the HorizontalPodAutoscaler scaled the number of pods,
    /// used by the autoscaler to control how often the number of pods is changed.
    pub last_scale_time: Option<Time>,
    /// currentReplicas is current number of replicas of pods managed by this autoscaler, as
    /// last seen by the autoscaler.
    pub current_replicas: Option<i32>,
    /// desiredReplicas is the desired number of replicas of pods managed by this autoscaler,
    /// as last calculated by the autoscaler.
    pub desired_replicas: i32,
    /// currentMetrics is the last read state of the metrics used by this autoscaler.
    pub current_metrics: Vec<MetricStatus>,
    /// conditions is the set of conditions required for this autoscaler to scale its target,
    /// and indicates whether or not those conditions are met.
    pub conditions: Vec<HorizontalPodAutoscalerCondition>,
}

/// autoscaling/v2 MetricStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.MetricStatus")]
#[schemars(description = "MetricStatus describes the last-read state of a single metric.")]
pub struct MetricStatus {
    /// type is the type of metric source.
    #[serde(rename = "type")]
    pub type_: String,
    /// object refers to a metric describing a single kubernetes object.
    pub object: Option<ObjectMetricStatus>,
    /// pods refers to a metric describing each pod in the current scale target.
    pub pods: Option<PodsMetricStatus>,
    /// resource refers to a resource metric known to Kubernetes describing each pod in the
    /// current scale target.
    pub resource: Option<ResourceMetricStatus>,
    /// container resource refers to a resource metric known to Kubernetes describing a
    /// single container in each pod in the current scale target.
    pub container_resource: Option<ContainerResourceMetricStatus>,
    /// external refers to a global metric that is not associated with any Kubernetes object.
    pub external: Option<ExternalMetricStatus>,
}

/// autoscaling/v2 ResourceMetricStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ResourceMetricStatus")]
#[schemars(
    description = "ResourceMetricStatus indicates the current value of a resource metric known to Kubernetes, as specified in requests and limits, describing each pod in the current scale target (e.g. CPU or memory)."
)]
pub struct ResourceMetricStatus {
    /// name is the name of the resource in question.
    pub name: String,
    /// current contains the current value for the given metric
    pub current: MetricValueStatus,
}

/// autoscaling/v2 ContainerResourceMetricStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ContainerResourceMetricStatus")]
#[schemars(
    description = "ContainerResourceMetricStatus indicates the current value of a resource metric known to Kubernetes, as specified in requests and limits, describing a single container in each pod in the current scale target (e.g. CPU or memory)."
)]
pub struct ContainerResourceMetricStatus {
    /// name is the name of the resource in question.
    pub name: String,
    /// current contains the current value for the given metric
    pub current: MetricValueStatus,
    /// container is the name of the container in the pods of the scaling target
    pub container: String,
}

/// autoscaling/v2 PodsMetricStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.PodsMetricStatus")]
#[schemars(
    description = "PodsMetricStatus indicates the current value of a metric describing each pod in the current scale target (for example, transactions-processed-per-second)."
)]
pub struct PodsMetricStatus {
    /// metric identifies the target metric by name and selector
    pub metric: MetricIdentifier,
    /// current contains the current value for the given metric
    pub current: MetricValueStatus,
}

/// autoscaling/v2 ObjectMetricStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ObjectMetricStatus")]
#[schemars(
    description = "ObjectMetricStatus indicates the current value of a metric describing a kubernetes object (for example, hits-per-second on an Ingress object)."
)]
pub struct ObjectMetricStatus {
    /// metric identifies the target metric by name and selector
    pub metric: MetricIdentifier,
    /// current contains the current value for the given metric
    pub current: MetricValueStatus,
    /// DescribedObject specifies the descriptions of a object,such as kind,name apiVersion
    pub described_object: CrossVersionObjectReference,
}

/// autoscaling/v2 ExternalMetricStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.ExternalMetricStatus")]
#[schemars(
    description = "ExternalMetricStatus indicates the current value of a global metric not associated with any Kubernetes object."
)]
pub struct ExternalMetricStatus {
    /// metric identifies the target metric by name and selector
    pub metric: MetricIdentifier,
    /// current contains the current value for the given metric
    pub current: MetricValueStatus,
}

/// autoscaling/v2 HorizontalPodAutoscalerCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerCondition")]
#[schemars(
    description = "HorizontalPodAutoscalerCondition describes the state of a HorizontalPodAutoscaler at a certain point."
)]
pub struct HorizontalPodAutoscalerCondition {
    /// type describes the current condition
    #[serde(rename = "type")]
    pub type_: String,
    /// status is the status of the condition (True, False, Unknown)
    pub status: String,
    /// lastTransitionTime is the last time the condition transitioned from one status to
    /// another
    pub last_transition_time: Option<Time>,
    /// reason is the reason for the condition's last transition.
    pub reason: Option<String>,
    /// message is a human-readable explanation containing details about the transition
    pub message: Option<String>,
}

const METRIC_SOURCE_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];
const METRIC_TARGET_TYPES: &[&str] = &["AverageValue", "Utilization", "Value"];

impl HPAScalingRules {
    /// Kubernetes' GenerateHPAScaleUpRules: the unset parts of `rules` from the defaults
    /// (no window, the larger of 4 pods or 100% per 15 s).
    pub fn scale_up_defaults(rules: Option<&HPAScalingRules>) -> HPAScalingRules {
        Self::fill(
            rules,
            0,
            vec![
                HPAScalingPolicy {
                    type_: "Pods".into(),
                    value: 4,
                    period_seconds: 15,
                },
                HPAScalingPolicy {
                    type_: "Percent".into(),
                    value: 100,
                    period_seconds: 15,
                },
            ],
        )
    }

    /// Kubernetes' GenerateHPAScaleDownRules: a 300 s window, then up to 100% per 15 s.
    pub fn scale_down_defaults(rules: Option<&HPAScalingRules>) -> HPAScalingRules {
        Self::fill(
            rules,
            300,
            vec![HPAScalingPolicy {
                type_: "Percent".into(),
                value: 100,
                period_seconds: 15,
            }],
        )
    }

    fn fill(
        rules: Option<&HPAScalingRules>,
        window: i32,
        policies: Vec<HPAScalingPolicy>,
    ) -> HPAScalingRules {
        let mut out = rules.cloned().unwrap_or_default();
        out.stabilization_window_seconds.get_or_insert(window);
        out.select_policy.get_or_insert_with(|| "Max".into());
        if out.policies.is_empty() {
            out.policies = policies;
        }
        out
    }
}

impl Resource for HorizontalPodAutoscaler {
    const KIND: Kind = Kind::HorizontalPodAutoscaler;
    crate::resource_basics!(HorizontalPodAutoscaler);
    spec_and_status!();

    /// Kubernetes' SetDefaults_HorizontalPodAutoscaler (v2): minReplicas 1, a CPU target of
    /// 80% when no metric is named, and a given behavior completed with the default rules.
    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        s.min_replicas.get_or_insert(1);
        if s.metrics.is_empty() {
            s.metrics = vec![cpu_utilization_metric(DEFAULT_CPU_UTILIZATION)];
        }
        if let Some(b) = &mut s.behavior {
            b.scale_up = Some(HPAScalingRules::scale_up_defaults(b.scale_up.as_ref()));
            b.scale_down = Some(HPAScalingRules::scale_down_defaults(b.scale_down.as_ref()));
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::HorizontalPodAutoscaler);
        errs.extend(validate_spec(&self.spec));
        errs
    }
}

/// A Resource metric on CPU at `percent` utilisation.
pub fn cpu_utilization_metric(percent: i32) -> MetricSpec {
    MetricSpec {
        type_: "Resource".into(),
        resource: Some(ResourceMetricSource {
            name: "cpu".into(),
            target: MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(percent),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

/// Kubernetes' path segment name check (names of objects in a URL path).
fn path_segment_name(field: &str, name: &str, errs: &mut Vec<FieldError>) {
    for bad in [".", ".."] {
        if name == bad {
            errs.push(FieldError::invalid(
                field,
                name,
                format!("may not be '{bad}'"),
            ));
        }
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(FieldError::invalid(
                field,
                name,
                format!("may not contain '{bad}'"),
            ));
        }
    }
}

fn validate_reference(r: &CrossVersionObjectReference, path: &str, errs: &mut Vec<FieldError>) {
    if r.kind.is_empty() {
        errs.push(FieldError::required(format!("{path}.kind")));
    } else {
        path_segment_name(&format!("{path}.kind"), &r.kind, errs);
    }
    if r.name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name")));
    } else {
        path_segment_name(&format!("{path}.name"), &r.name, errs);
    }
}

/// Kubernetes' validateHorizontalPodAutoscalerSpec, with its messages.
pub fn validate_spec(s: &HorizontalPodAutoscalerSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(min) = s.min_replicas {
        if min < 1 {
            errs.push(FieldError::invalid(
                "spec.minReplicas",
                min,
                "must be greater than or equal to 1",
            ));
        }
    }
    if s.max_replicas < 1 {
        errs.push(FieldError::invalid(
            "spec.maxReplicas",
            s.max_replicas,
            "must be greater than 0",
        ));
    }
    if let Some(min) = s.min_replicas {
        if s.max_replicas < min {
            errs.push(FieldError::invalid(
                "spec.maxReplicas",
                s.max_replicas,
                "must be greater than or equal to `minReplicas`",
            ));
        }
    }
    validate_reference(&s.scale_target_ref, "spec.scaleTargetRef", &mut errs);
    for (i, m) in s.metrics.iter().enumerate() {
        validate_metric(m, &format!("spec.metrics[{i}]"), &mut errs);
    }
    if let Some(b) = &s.behavior {
        for (name, rules) in [("scaleUp", &b.scale_up), ("scaleDown", &b.scale_down)] {
            if let Some(r) = rules {
                validate_rules(r, &format!("spec.behavior.{name}"), &mut errs);
            }
        }
    }
    errs
}

fn validate_rules(r: &HPAScalingRules, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(w) = r.stabilization_window_seconds {
        let field = format!("{path}.stabilizationWindowSeconds");
        if w < 0 {
            errs.push(FieldError::invalid(
                &field,
                w,
                "must be greater than or equal to zero",
            ));
        } else if w > 3600 {
            errs.push(FieldError::invalid(
                &field,
                w,
                "must be less than or equal to 3600",
            ));
        }
    }
    if let Some(p) = &r.select_policy {
        if !["Disabled", "Max", "Min"].contains(&p.as_str()) {
            errs.push(FieldError::not_supported(
                format!("{path}.selectPolicy"),
                p,
                &["Disabled", "Max", "Min"],
            ));
        }
    }
    if r.policies.is_empty() {
        errs.push(FieldError {
            reason: "FieldValueRequired".into(),
            field: format!("{path}.policies"),
            message: "Required value: must specify at least one Policy".into(),
        });
    }
    for (i, p) in r.policies.iter().enumerate() {
        let base = format!("{path}.policies[{i}]");
        if p.type_ != "Pods" && p.type_ != "Percent" {
            errs.push(FieldError::not_supported(
                format!("{base}.type"),
                &p.type_,
                &["Percent", "Pods"],
            ));
        }
        if p.value <= 0 {
            errs.push(FieldError::invalid(
                format!("{base}.value"),
                p.value,
                "must be greater than zero",
            ));
        }
        if p.period_seconds <= 0 {
            errs.push(FieldError::invalid(
                format!("{base}.periodSeconds"),
                p.period_seconds,
                "must be greater than zero",
            ));
        } else if p.period_seconds > 1800 {
            errs.push(FieldError::invalid(
                format!("{base}.periodSeconds"),
                p.period_seconds,
                "must be less than or equal to 1800",
            ));
        }
    }
}

fn required_msg(field: String, why: &str) -> FieldError {
    FieldError {
        reason: "FieldValueRequired".into(),
        field,
        message: format!("Required value: {why}"),
    }
}

fn validate_metric(m: &MetricSpec, path: &str, errs: &mut Vec<FieldError>) {
    if m.type_.is_empty() {
        errs.push(required_msg(
            format!("{path}.type"),
            "must specify a metric source type",
        ));
    } else if !METRIC_SOURCE_TYPES.contains(&m.type_.as_str()) {
        errs.push(FieldError::not_supported(
            format!("{path}.type"),
            &m.type_,
            METRIC_SOURCE_TYPES,
        ));
    }
    let present: Vec<&str> = [
        ("object", m.object.is_some()),
        ("pods", m.pods.is_some()),
        ("resource", m.resource.is_some()),
        ("containerResource", m.container_resource.is_some()),
        ("external", m.external.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(n, _)| n)
    .collect();
    if present.len() != 1 {
        for p in &present {
            errs.push(FieldError::forbidden(
                format!("{path}.{p}"),
                "must populate information for exactly one metric source",
            ));
        }
    }
    let expected = match m.type_.as_str() {
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "External" => "external",
        _ => return,
    };
    if !present.contains(&expected) {
        errs.push(required_msg(
            format!("{path}.{expected}"),
            "must populate information for the given metric source",
        ));
        return;
    }
    if let Some(r) = &m.resource {
        validate_resource_target(&r.name, &r.target, &format!("{path}.resource"), errs);
    }
    if let Some(r) = &m.container_resource {
        let base = format!("{path}.containerResource");
        if r.container.is_empty() {
            errs.push(required_msg(
                format!("{base}.container"),
                "must specify a container",
            ));
        }
        validate_resource_target(&r.name, &r.target, &base, errs);
    }
    if let Some(p) = &m.pods {
        let base = format!("{path}.pods");
        validate_identifier(&p.metric, &format!("{base}.metric"), errs);
        validate_target(&p.target, &format!("{base}.target"), errs);
        if p.target.average_value.is_none() {
            errs.push(required_msg(
                format!("{base}.target.averageValue"),
                "must specify a positive target averageValue",
            ));
        }
    }
    if let Some(o) = &m.object {
        let base = format!("{path}.object");
        validate_reference(
            &o.described_object,
            &format!("{base}.describedObject"),
            errs,
        );
        validate_identifier(&o.metric, &format!("{base}.metric"), errs);
        validate_target(&o.target, &format!("{base}.target"), errs);
        if o.target.value.is_none() && o.target.average_value.is_none() {
            errs.push(required_msg(
                format!("{base}.target.averageValue"),
                "must set either a target value or averageValue",
            ));
        }
    }
    if let Some(e) = &m.external {
        let base = format!("{path}.external");
        validate_identifier(&e.metric, &format!("{base}.metric"), errs);
        validate_target(&e.target, &format!("{base}.target"), errs);
        if e.target.value.is_none() && e.target.average_value.is_none() {
            errs.push(required_msg(
                format!("{base}.target.averageValue"),
                "must set either a target value for metric or a per-pod target",
            ));
        }
        if e.target.value.is_some() && e.target.average_value.is_some() {
            errs.push(FieldError::forbidden(
                format!("{base}.target.value"),
                "may not set both a target value for metric and a per-pod target",
            ));
        }
    }
}

fn validate_identifier(m: &MetricIdentifier, path: &str, errs: &mut Vec<FieldError>) {
    if m.name.is_empty() {
        errs.push(required_msg(
            format!("{path}.name"),
            "must specify a metric name",
        ));
    } else {
        path_segment_name(&format!("{path}.name"), &m.name, errs);
    }
}

fn validate_resource_target(name: &str, t: &MetricTarget, path: &str, errs: &mut Vec<FieldError>) {
    if name.is_empty() {
        errs.push(required_msg(
            format!("{path}.name"),
            "must specify a resource name",
        ));
    }
    let target = format!("{path}.target");
    validate_target(t, &target, errs);
    if t.average_utilization.is_none() && t.average_value.is_none() {
        errs.push(required_msg(
            format!("{target}.averageUtilization"),
            "must set either a target raw value or a target utilization",
        ));
    }
    if t.average_utilization.is_some() && t.average_value.is_some() {
        errs.push(FieldError::forbidden(
            format!("{target}.averageValue"),
            "may not set both a target raw value and a target utilization",
        ));
    }
}

fn positive_quantity(q: &Quantity) -> bool {
    q.milli_value().is_ok_and(|m| m > 0)
}

fn validate_target(t: &MetricTarget, path: &str, errs: &mut Vec<FieldError>) {
    if t.type_.is_empty() {
        errs.push(required_msg(
            format!("{path}.type"),
            "must specify a metric target type",
        ));
    } else if !METRIC_TARGET_TYPES.contains(&t.type_.as_str()) {
        errs.push(FieldError::not_supported(
            format!("{path}.type"),
            &t.type_,
            METRIC_TARGET_TYPES,
        ));
    }
    if let Some(v) = &t.value {
        if !positive_quantity(v) {
            errs.push(FieldError::invalid(
                format!("{path}.value"),
                &v.0,
                "must be positive",
            ));
        }
    }
    if let Some(v) = &t.average_value {
        if !positive_quantity(v) {
            errs.push(FieldError::invalid(
                format!("{path}.averageValue"),
                &v.0,
                "must be positive",
            ));
        }
    }
    if let Some(u) = t.average_utilization {
        if u < 1 {
            errs.push(FieldError::invalid(
                format!("{path}.averageUtilization"),
                u,
                "must be greater than 0",
            ));
        }
    }
}

/// The TARGETS column of `kubectl get hpa` (Kubernetes' formatHPAMetrics): each metric's
/// current value against its target, at most two, then `+ N more...`.
pub fn format_metrics(specs: &[MetricSpec], statuses: &[MetricStatus]) -> String {
    if specs.is_empty() {
        return "<none>".into();
    }
    let unknown = || "<unknown>".to_string();
    let q = |q: &Option<Quantity>| {
        q.as_ref()
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "0".into())
    };
    let mut list = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        let item = match spec.type_.as_str() {
            "External" | "Object" => {
                let (target, current) = match spec.type_.as_str() {
                    "External" => (
                        spec.external.as_ref().map(|e| &e.target),
                        status.and_then(|s| s.external.as_ref()).map(|e| &e.current),
                    ),
                    _ => (
                        spec.object.as_ref().map(|e| &e.target),
                        status.and_then(|s| s.object.as_ref()).map(|e| &e.current),
                    ),
                };
                let Some(target) = target else {
                    list.push("<unknown type>".into());
                    continue;
                };
                if target.average_value.is_some() {
                    let current = current
                        .and_then(|c| c.average_value.as_ref())
                        .map(|v| v.0.clone())
                        .unwrap_or_else(unknown);
                    format!("{current}/{} (avg)", q(&target.average_value))
                } else {
                    let current = current.map(|c| q(&c.value)).unwrap_or_else(unknown);
                    format!("{current}/{}", q(&target.value))
                }
            }
            "Pods" => {
                let current = status
                    .and_then(|s| s.pods.as_ref())
                    .map(|p| q(&p.current.average_value))
                    .unwrap_or_else(unknown);
                let target = spec.pods.as_ref().map(|p| q(&p.target.average_value));
                format!("{current}/{}", target.unwrap_or_default())
            }
            "Resource" | "ContainerResource" => {
                let (name, target, current) = if spec.type_ == "Resource" {
                    let Some(r) = &spec.resource else {
                        list.push("<unknown type>".into());
                        continue;
                    };
                    (
                        &r.name,
                        &r.target,
                        status.and_then(|s| s.resource.as_ref()).map(|r| &r.current),
                    )
                } else {
                    let Some(r) = &spec.container_resource else {
                        list.push("<unknown type>".into());
                        continue;
                    };
                    (
                        &r.name,
                        &r.target,
                        status
                            .and_then(|s| s.container_resource.as_ref())
                            .map(|r| &r.current),
                    )
                };
                if target.average_value.is_some() {
                    let current = current.map(|c| q(&c.average_value)).unwrap_or_else(unknown);
                    format!("{name}: {current}/{}", q(&target.average_value))
                } else {
                    let current = current
                        .and_then(|c| c.average_utilization)
                        .map(|u| format!("{u}%"))
                        .unwrap_or_else(unknown);
                    let target = target
                        .average_utilization
                        .map(|u| format!("{u}%"))
                        .unwrap_or_else(|| "<auto>".into());
                    format!("{name}: {current}/{target}")
                }
            }
            _ => "<unknown type>".into(),
        };
        list.push(item);
    }
    const SHOWN: usize = 2;
    if list.len() > SHOWN {
        let more = list.len() - SHOWN;
        list.truncate(SHOWN);
        return format!("{} + {more} more...", list.join(", "));
    }
    list.join(", ")
}

/// The annotations in which autoscaling/v1 carries what it has no fields for.
pub mod annotations {
    /// The metrics beyond the CPU utilisation target, in autoscaling/v1's MetricSpec shape.
    pub const METRIC_SPECS: &str = "autoscaling.alpha.kubernetes.io/metrics";
    /// status.currentMetrics, in v1's MetricStatus shape.
    pub const METRIC_STATUSES: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
    /// status.conditions.
    pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
    /// spec.behavior.
    pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
    /// All of them: a v1 object's copies are dropped before new ones are made.
    pub const ALL: [&str; 4] = [METRIC_SPECS, METRIC_STATUSES, CONDITIONS, BEHAVIOR];
}

fn annotations_of(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"]
        .as_object_mut()
        .expect("just made an object")
}

fn drop_empty_annotations(obj: &mut Value) {
    if obj["metadata"]["annotations"]
        .as_object()
        .is_some_and(Map::is_empty)
    {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("annotations");
        }
    }
}

/// A v2 MetricSpec (JSON) in autoscaling/v1's shape (the v2beta1 one).
fn metric_spec_to_v1(m: &Value) -> Value {
    let t = &m["type"];
    let mut out = json!({"type": t});
    let target = |src: &Value| src["target"].clone();
    match t.as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if t == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = &m[key];
            let mut r = json!({"name": src["name"]});
            if let Some(c) = src.get("container") {
                r["container"] = c.clone();
            }
            let tg = target(src);
            if let Some(u) = tg.get("averageUtilization") {
                r["targetAverageUtilization"] = u.clone();
            }
            if let Some(v) = tg.get("averageValue") {
                r["targetAverageValue"] = v.clone();
            }
            out[key] = r;
        }
        "Pods" => {
            let src = &m["pods"];
            let mut p = json!({"metricName": src["metric"]["name"], "targetAverageValue": target(src)["averageValue"]});
            if let Some(s) = src["metric"].get("selector") {
                p["selector"] = s.clone();
            }
            out["pods"] = p;
        }
        "Object" => {
            let src = &m["object"];
            let tg = target(src);
            let mut o =
                json!({"target": src["describedObject"], "metricName": src["metric"]["name"]});
            if let Some(v) = tg.get("value") {
                o["targetValue"] = v.clone();
            }
            if let Some(v) = tg.get("averageValue") {
                o["averageValue"] = v.clone();
            }
            if let Some(s) = src["metric"].get("selector") {
                o["selector"] = s.clone();
            }
            out["object"] = o;
        }
        "External" => {
            let src = &m["external"];
            let tg = target(src);
            let mut e = json!({"metricName": src["metric"]["name"]});
            if let Some(s) = src["metric"].get("selector") {
                e["metricSelector"] = s.clone();
            }
            if let Some(v) = tg.get("value") {
                e["targetValue"] = v.clone();
            }
            if let Some(v) = tg.get("averageValue") {
                e["targetAverageValue"] = v.clone();
            }
            out["external"] = e;
        }
        _ => {}
    }
    out
}

fn set_if(obj: &mut Value, key: &str, v: Option<&Value>) {
    if let Some(v) = v.filter(|v| !v.is_null()) {
        obj[key] = v.clone();
    }
}

/// A v1 (v2beta1-shaped) MetricSpec (JSON) in v2's shape.
fn metric_spec_from_v1(m: &Value) -> Value {
    let t = &m["type"];
    let mut out = json!({"type": t});
    match t.as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if t == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = &m[key];
            let mut target = json!({});
            if let Some(u) = src.get("targetAverageUtilization") {
                target["type"] = json!("Utilization");
                target["averageUtilization"] = u.clone();
            } else {
                target["type"] = json!("AverageValue");
                set_if(&mut target, "averageValue", src.get("targetAverageValue"));
            }
            let mut r = json!({"name": src["name"], "target": target});
            set_if(&mut r, "container", src.get("container"));
            out[key] = r;
        }
        "Pods" => {
            let src = &m["pods"];
            let mut metric = json!({"name": src["metricName"]});
            set_if(&mut metric, "selector", src.get("selector"));
            out["pods"] = json!({"metric": metric, "target": {"type": "AverageValue", "averageValue": src["targetAverageValue"]}});
        }
        "Object" => {
            let src = &m["object"];
            let mut metric = json!({"name": src["metricName"]});
            set_if(&mut metric, "selector", src.get("selector"));
            let mut target = json!({});
            if let Some(v) = src.get("averageValue") {
                target["type"] = json!("AverageValue");
                target["averageValue"] = v.clone();
            } else {
                target["type"] = json!("Value");
                set_if(&mut target, "value", src.get("targetValue"));
            }
            out["object"] =
                json!({"describedObject": src["target"], "metric": metric, "target": target});
        }
        "External" => {
            let src = &m["external"];
            let mut metric = json!({"name": src["metricName"]});
            set_if(&mut metric, "selector", src.get("metricSelector"));
            let mut target = json!({});
            if let Some(v) = src.get("targetAverageValue") {
                target["type"] = json!("AverageValue");
                target["averageValue"] = v.clone();
            } else {
                target["type"] = json!("Value");
                set_if(&mut target, "value", src.get("targetValue"));
            }
            out["external"] = json!({"metric": metric, "target": target});
        }
        _ => {}
    }
    out
}

/// A v2 MetricStatus (JSON) in v1's shape.
fn metric_status_to_v1(m: &Value) -> Value {
    let t = &m["type"];
    let mut out = json!({"type": t});
    match t.as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if t == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = &m[key];
            let mut r = json!({"name": src["name"], "currentAverageValue": src["current"].get("averageValue").cloned().unwrap_or(json!("0"))});
            set_if(
                &mut r,
                "currentAverageUtilization",
                src["current"].get("averageUtilization"),
            );
            set_if(&mut r, "container", src.get("container"));
            out[key] = r;
        }
        "Pods" => {
            let src = &m["pods"];
            let mut p = json!({"metricName": src["metric"]["name"], "currentAverageValue": src["current"]["averageValue"]});
            set_if(&mut p, "selector", src["metric"].get("selector"));
            out["pods"] = p;
        }
        "Object" => {
            let src = &m["object"];
            let mut o = json!({"target": src["describedObject"], "metricName": src["metric"]["name"], "currentValue": src["current"].get("value").cloned().unwrap_or(json!("0"))});
            set_if(&mut o, "averageValue", src["current"].get("averageValue"));
            set_if(&mut o, "selector", src["metric"].get("selector"));
            out["object"] = o;
        }
        "External" => {
            let src = &m["external"];
            let mut e = json!({"metricName": src["metric"]["name"], "currentValue": src["current"].get("value").cloned().unwrap_or(json!("0"))});
            set_if(
                &mut e,
                "currentAverageValue",
                src["current"].get("averageValue"),
            );
            set_if(&mut e, "metricSelector", src["metric"].get("selector"));
            out["external"] = e;
        }
        _ => {}
    }
    out
}

/// A v1 MetricStatus (JSON) in v2's shape.
fn metric_status_from_v1(m: &Value) -> Value {
    let t = &m["type"];
    let mut out = json!({"type": t});
    match t.as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if t == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = &m[key];
            let mut current = json!({});
            set_if(&mut current, "averageValue", src.get("currentAverageValue"));
            set_if(
                &mut current,
                "averageUtilization",
                src.get("currentAverageUtilization"),
            );
            let mut r = json!({"name": src["name"], "current": current});
            set_if(&mut r, "container", src.get("container"));
            out[key] = r;
        }
        "Pods" => {
            let src = &m["pods"];
            let mut metric = json!({"name": src["metricName"]});
            set_if(&mut metric, "selector", src.get("selector"));
            out["pods"] =
                json!({"metric": metric, "current": {"averageValue": src["currentAverageValue"]}});
        }
        "Object" => {
            let src = &m["object"];
            let mut metric = json!({"name": src["metricName"]});
            set_if(&mut metric, "selector", src.get("selector"));
            let mut current = json!({});
            set_if(&mut current, "value", src.get("currentValue"));
            set_if(&mut current, "averageValue", src.get("averageValue"));
            out["object"] =
                json!({"describedObject": src["target"], "metric": metric, "current": current});
        }
        "External" => {
            let src = &m["external"];
            let mut metric = json!({"name": src["metricName"]});
            set_if(&mut metric, "selector", src.get("metricSelector"));
            let mut current = json!({});
            set_if(&mut current, "value", src.get("currentValue"));
            set_if(&mut current, "averageValue", src.get("currentAverageValue"));
            out["external"] = json!({"metric": metric, "current": current});
        }
        _ => {}
    }
    out
}

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && m["resource"]["target"].get("averageUtilization").is_some()
}

/// Behavior as kube-apiserver writes it into the v1 annotation: the internal Go type,
/// which has no JSON tags, so its keys are the Go field names.
fn behavior_to_annotation(b: &Value) -> Value {
    let rules = |r: &Value| {
        if r.is_null() {
            return Value::Null;
        }
        let policies: Vec<Value> = r["policies"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| json!({"Type": p["type"], "Value": p["value"], "PeriodSeconds": p["periodSeconds"]}))
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "StabilizationWindowSeconds": r.get("stabilizationWindowSeconds").cloned().unwrap_or(Value::Null),
            "SelectPolicy": r.get("selectPolicy").cloned().unwrap_or(Value::Null),
            "Policies": policies,
        })
    };
    json!({"ScaleUp": rules(&b["scaleUp"]), "ScaleDown": rules(&b["scaleDown"])})
}

fn behavior_from_annotation(b: &Value) -> Value {
    let rules = |r: &Value| {
        if r.is_null() {
            return Value::Null;
        }
        let policies: Vec<Value> = r["Policies"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| json!({"type": p["Type"], "value": p["Value"], "periodSeconds": p["PeriodSeconds"]}))
                    .collect()
            })
            .unwrap_or_default();
        let mut out = json!({"policies": policies});
        set_if(
            &mut out,
            "stabilizationWindowSeconds",
            r.get("StabilizationWindowSeconds"),
        );
        set_if(&mut out, "selectPolicy", r.get("SelectPolicy"));
        out
    };
    let mut out = json!({});
    for (from, to) in [("ScaleUp", "scaleUp"), ("ScaleDown", "scaleDown")] {
        let r = rules(&b[from]);
        if !r.is_null() {
            out[to] = r;
        }
    }
    out
}

/// kube-apiserver's Convert_autoscaling_HorizontalPodAutoscaler_To_v1: a v2 object (JSON)
/// as autoscaling/v1 shows it. The CPU utilisation target becomes
/// targetCPUUtilizationPercentage; other metrics, the current metrics, the conditions and
/// the behavior go into annotations.
pub fn to_v1(v2: &Value) -> Value {
    let mut out = json!({
        "apiVersion": format!("{GROUP}/{LEGACY_VERSION}"),
        "kind": "HorizontalPodAutoscaler",
        "metadata": v2["metadata"].clone(),
    });
    if let Some(a) = out["metadata"]["annotations"].as_object_mut() {
        for k in annotations::ALL {
            a.remove(k);
        }
    }
    let spec = &v2["spec"];
    let mut s =
        json!({"scaleTargetRef": spec["scaleTargetRef"], "maxReplicas": spec["maxReplicas"]});
    set_if(&mut s, "minReplicas", spec.get("minReplicas"));
    let metrics = spec["metrics"].as_array().cloned().unwrap_or_default();
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_utilization(m)) {
        s["targetCPUUtilizationPercentage"] =
            cpu["resource"]["target"]["averageUtilization"].clone();
    }
    out["spec"] = s;
    let others: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization(m))
        .map(metric_spec_to_v1)
        .collect();
    let status = &v2["status"];
    let mut st =
        json!({"desiredReplicas": status.get("desiredReplicas").cloned().unwrap_or(json!(0))});
    st["currentReplicas"] = status.get("currentReplicas").cloned().unwrap_or(json!(0));
    set_if(
        &mut st,
        "observedGeneration",
        status.get("observedGeneration"),
    );
    set_if(&mut st, "lastScaleTime", status.get("lastScaleTime"));
    let current = status["currentMetrics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(u) = current.iter().find_map(|m| {
        (m["type"] == "Resource" && m["resource"]["name"] == "cpu")
            .then(|| m["resource"]["current"].get("averageUtilization").cloned())
            .flatten()
    }) {
        st["currentCPUUtilizationPercentage"] = u;
    }
    out["status"] = st;
    let annotations = annotations_of(&mut out);
    let text = |v: &Value| Value::String(v.to_string());
    if !others.is_empty() {
        annotations.insert(annotations::METRIC_SPECS.into(), text(&json!(others)));
    }
    if !current.is_empty() {
        let v1: Vec<Value> = current.iter().map(metric_status_to_v1).collect();
        annotations.insert(annotations::METRIC_STATUSES.into(), text(&json!(v1)));
    }
    if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
        annotations.insert(
            annotations::BEHAVIOR.into(),
            text(&behavior_to_annotation(b)),
        );
    }
    if let Some(c) = status["conditions"].as_array().filter(|c| !c.is_empty()) {
        annotations.insert(annotations::CONDITIONS.into(), text(&json!(c)));
    }
    drop_empty_annotations(&mut out);
    out
}

/// kube-apiserver's Convert_v1_HorizontalPodAutoscaler_To_autoscaling: an autoscaling/v1
/// object (JSON) as the v2 the server stores. The annotations are read back and dropped;
/// without any metric, CPU at 80% is the target, as v1 always meant.
pub fn from_v1(v1: &Value) -> Value {
    let mut out = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "HorizontalPodAutoscaler",
        "metadata": v1.get("metadata").cloned().unwrap_or(json!({})),
    });
    let annotation = |key: &str| -> Option<Value> {
        v1["metadata"]["annotations"][key]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
    };
    let spec = &v1["spec"];
    let mut s = json!({"scaleTargetRef": spec.get("scaleTargetRef").cloned().unwrap_or(json!({}))});
    set_if(&mut s, "minReplicas", spec.get("minReplicas"));
    set_if(&mut s, "maxReplicas", spec.get("maxReplicas"));
    let mut metrics: Vec<Value> = annotation(annotations::METRIC_SPECS)
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(metric_spec_from_v1)
        .collect();
    if let Some(cpu) = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|v| !v.is_null())
    {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}}));
    }
    if metrics.is_empty() {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}));
    }
    s["metrics"] = json!(metrics);
    if let Some(b) = annotation(annotations::BEHAVIOR) {
        let b = behavior_from_annotation(&b);
        if b.as_object().is_some_and(|m| !m.is_empty()) {
            s["behavior"] = b;
        }
    }
    out["spec"] = s;
    if let Some(status) = v1.get("status").filter(|s| s.is_object()) {
        let mut st =
            json!({"desiredReplicas": status.get("desiredReplicas").cloned().unwrap_or(json!(0))});
        set_if(&mut st, "currentReplicas", status.get("currentReplicas"));
        set_if(
            &mut st,
            "observedGeneration",
            status.get("observedGeneration"),
        );
        set_if(&mut st, "lastScaleTime", status.get("lastScaleTime"));
        if let Some(current) =
            annotation(annotations::METRIC_STATUSES).and_then(|v| v.as_array().cloned())
        {
            st["currentMetrics"] = json!(current
                .iter()
                .map(metric_status_from_v1)
                .collect::<Vec<_>>());
        } else if let Some(u) = status
            .get("currentCPUUtilizationPercentage")
            .filter(|v| !v.is_null())
        {
            st["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": u}}}]);
        }
        if let Some(c) = annotation(annotations::CONDITIONS) {
            st["conditions"] = c;
        }
        out["status"] = st;
    }
    if let Some(a) = out["metadata"]["annotations"].as_object_mut() {
        for k in annotations::ALL {
            a.remove(k);
        }
    }
    drop_empty_annotations(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa() -> HorizontalPodAutoscaler {
        let mut h = HorizontalPodAutoscaler::default();
        h.metadata.name = "web".into();
        h.metadata.namespace = Some("default".into());
        h.spec.scale_target_ref = CrossVersionObjectReference {
            kind: "Deployment".into(),
            name: "web".into(),
            api_version: Some("apps/v1".into()),
        };
        h.spec.max_replicas = 4;
        h
    }

    /// A v2 object from its Kubernetes JSON (with apiVersion and kind).
    fn decode(v: Value) -> HorizontalPodAutoscaler {
        crate::codec::from_json(v).expect("a v2 object")
    }

    #[test]
    fn defaults_as_kubernetes() {
        let mut h = hpa();
        h.spec.behavior = Some(HorizontalPodAutoscalerBehavior {
            scale_down: Some(HPAScalingRules {
                stabilization_window_seconds: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        });
        h.set_defaults();
        assert_eq!(h.spec.min_replicas, Some(1));
        assert_eq!(h.spec.metrics, vec![cpu_utilization_metric(80)]);
        let b = h.spec.behavior.unwrap();
        let down = b.scale_down.unwrap();
        assert_eq!(down.stabilization_window_seconds, Some(0));
        assert_eq!(down.select_policy.as_deref(), Some("Max"));
        assert_eq!(down.policies.len(), 1);
        let up = b.scale_up.unwrap();
        assert_eq!(up.stabilization_window_seconds, Some(0));
        assert_eq!(up.policies.len(), 2);
    }

    #[test]
    fn validation_messages() {
        let mut h = hpa();
        h.set_defaults();
        assert!(h.validate().is_empty(), "{:?}", h.validate());
        h.spec.min_replicas = Some(5);
        let e = h.validate();
        assert_eq!(e[0].field, "spec.maxReplicas");
        assert_eq!(
            e[0].message,
            "Invalid value: \"4\": must be greater than or equal to `minReplicas`"
        );
        h.spec.min_replicas = Some(0);
        assert_eq!(
            h.validate()[0].message,
            "Invalid value: \"0\": must be greater than or equal to 1"
        );
        let mut h = hpa();
        h.spec.scale_target_ref.name.clear();
        h.spec.metrics = vec![MetricSpec {
            type_: "Resource".into(),
            resource: Some(ResourceMetricSource {
                name: "cpu".into(),
                target: MetricTarget {
                    type_: "Utilization".into(),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }];
        let e = h.validate();
        assert!(e.iter().any(|e| e.field == "spec.scaleTargetRef.name"));
        assert!(e.iter().any(
            |e| e.field == "spec.metrics[0].resource.target.averageUtilization"
                && e.message
                    == "Required value: must set either a target raw value or a target utilization"
        ));
        let mut h = hpa();
        h.spec.metrics = vec![MetricSpec {
            type_: "Pods".into(),
            ..Default::default()
        }];
        assert_eq!(
            h.validate()[0].message,
            "Required value: must populate information for the given metric source"
        );
    }

    #[test]
    fn table_targets() {
        let mut h = hpa();
        h.set_defaults();
        assert_eq!(format_metrics(&h.spec.metrics, &[]), "cpu: <unknown>/80%");
        let status = MetricStatus {
            type_: "Resource".into(),
            resource: Some(ResourceMetricStatus {
                name: "cpu".into(),
                current: MetricValueStatus {
                    average_utilization: Some(12),
                    average_value: Some(Quantity("12m".into())),
                    ..Default::default()
                },
            }),
            ..Default::default()
        };
        assert_eq!(format_metrics(&h.spec.metrics, &[status]), "cpu: 12%/80%");
        let three = vec![cpu_utilization_metric(50); 3];
        assert_eq!(
            format_metrics(&three, &[]),
            "cpu: <unknown>/50%, cpu: <unknown>/50% + 1 more..."
        );
    }

    #[test]
    fn v1_round_trip_keeps_what_v1_cannot_say() {
        let mut h = hpa();
        h.spec.metrics = vec![
            cpu_utilization_metric(50),
            MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "memory".into(),
                    target: MetricTarget {
                        type_: "AverageValue".into(),
                        average_value: Some(Quantity("100Mi".into())),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            },
        ];
        h.spec.behavior = Some(HorizontalPodAutoscalerBehavior::default());
        h.set_defaults();
        h.status.desired_replicas = 2;
        h.status.current_replicas = Some(2);
        h.status.conditions = vec![HorizontalPodAutoscalerCondition {
            type_: "AbleToScale".into(),
            status: "True".into(),
            reason: Some("ReadyForNewScale".into()),
            ..Default::default()
        }];
        let v2 = crate::codec::to_json(&h);
        let v1 = to_v1(&v2);
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
        let a = &v1["metadata"]["annotations"];
        assert!(a[annotations::METRIC_SPECS]
            .as_str()
            .unwrap()
            .contains("targetAverageValue"));
        assert!(a[annotations::BEHAVIOR]
            .as_str()
            .unwrap()
            .contains("StabilizationWindowSeconds"));
        assert!(a[annotations::CONDITIONS]
            .as_str()
            .unwrap()
            .contains("ReadyForNewScale"));
        let back = from_v1(&v1);
        let back = decode(back);
        // The CPU metric comes back after the annotation's ones, as Kubernetes orders them.
        assert_eq!(back.spec.metrics.len(), 2);
        assert_eq!(back.spec.metrics[1], cpu_utilization_metric(50));
        assert_eq!(back.spec.metrics[0], h.spec.metrics[1]);
        assert_eq!(back.spec.behavior, h.spec.behavior);
        assert_eq!(back.status.conditions, h.status.conditions);
        assert!(back.metadata.annotations.is_empty());
    }

    #[test]
    fn v1_without_target_means_cpu_80() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}});
        let v2 = decode(from_v1(&v1));
        assert_eq!(v2.spec.metrics, vec![cpu_utilization_metric(80)]);
        assert_eq!(v2.spec.max_replicas, 3);
    }
}
