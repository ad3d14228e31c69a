//! policy/v1 PodDisruptionBudget, and the Eviction a client posts to a pod's `eviction`
//! subresource (`kubectl drain`): an eviction that would leave fewer healthy pods than a
//! budget asks for is refused with 429.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::spec_and_status;
use crate::meta::{IntOrString, LabelSelector, ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of PodDisruptionBudget and Eviction.
pub const GROUP: &str = "policy";

/// policy/v1 PodDisruptionBudget.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.policy.v1.PodDisruptionBudget")]
#[schemars(
    description = "PodDisruptionBudget is an object to define the max disruption that can be caused to a collection of pods"
)]
pub struct PodDisruptionBudget {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The desired behaviour of the budget.
    pub spec: PodDisruptionBudgetSpec,
    /// The most recently observed status of the budget.
    pub status: PodDisruptionBudgetStatus,
}

/// policy/v1 PodDisruptionBudgetSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.policy.v1.PodDisruptionBudgetSpec")]
#[schemars(description = "PodDisruptionBudgetSpec is a description of a PodDisruptionBudget.")]
pub struct PodDisruptionBudgetSpec {
    /// An eviction is allowed if at least this many (or this percentage) of the selected pods
    /// are still available after it. Mutually exclusive with maxUnavailable.
    pub min_available: Option<IntOrString>,
    /// Label query over the pods whose evictions the budget manages. A null selector selects
    /// no pods; an empty one selects every pod of the namespace.
    pub selector: Option<LabelSelector>,
    /// An eviction is allowed if at most this many (or this percentage) of the selected pods
    /// are unavailable after it. Mutually exclusive with minAvailable.
    pub max_unavailable: Option<IntOrString>,
    /// When unhealthy running pods may be evicted: IfHealthyBudget (default) or AlwaysAllow.
    pub unhealthy_pod_eviction_policy: Option<String>,
}

/// policy/v1 PodDisruptionBudgetStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.policy.v1.PodDisruptionBudgetStatus")]
#[schemars(
    description = "PodDisruptionBudgetStatus represents information about the status of a PodDisruptionBudget. Status may trail the actual state of a system."
)]
pub struct PodDisruptionBudgetStatus {
    /// The generation the disruption controller last acted on.
    pub observed_generation: Option<i64>,
    /// Pods the eviction subresource let go whose deletion the controller has not seen yet
    /// (name to eviction time); they are not counted as healthy.
    pub disrupted_pods: BTreeMap<String, Time>,
    /// How many pod disruptions are currently allowed.
    pub disruptions_allowed: i32,
    /// Current number of healthy pods.
    pub current_healthy: i32,
    /// Minimum desired number of healthy pods.
    pub desired_healthy: i32,
    /// Total number of pods counted by this budget.
    pub expected_pods: i32,
    /// DisruptionAllowed: whether the budget allows an eviction now.
    pub conditions: Vec<Condition>,
}

/// meta/v1 Condition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.Condition")]
#[schemars(
    description = "Condition contains details for one aspect of the current state of this API Resource."
)]
pub struct Condition {
    /// The type of condition in CamelCase.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// The generation the condition was set from.
    pub observed_generation: Option<i64>,
    /// When the condition last changed status.
    pub last_transition_time: Option<Time>,
    /// Programmatic identifier of the reason, CamelCase.
    pub reason: String,
    /// Human-readable details.
    pub message: String,
}

/// policy/v1 Eviction, the body of `POST pods/<name>/eviction`. It is not stored.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Eviction {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    /// Names the pod to evict.
    pub metadata: ObjectMeta,
    /// Options for the deletion of the pod.
    pub delete_options: Option<crate::meta::DeleteOptions>,
}

/// The condition type the disruption controller keeps.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";

impl Resource for PodDisruptionBudget {
    const KIND: Kind = Kind::PodDisruptionBudget;
    crate::resource_basics!(PodDisruptionBudget);
    spec_and_status!();

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::PodDisruptionBudget);
        let s = &self.spec;
        if s.min_available.is_some() && s.max_unavailable.is_some() {
            errs.push(FieldError::invalid(
                "spec",
                "{...}",
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        for (field, v) in [
            ("spec.minAvailable", &s.min_available),
            ("spec.maxUnavailable", &s.max_unavailable),
        ] {
            if let Some(v) = v {
                errs.extend(validate_int_or_percent(field, v));
            }
        }
        if let Some(sel) = &s.selector {
            errs.extend(validation::validate_label_selector(sel, "spec.selector"));
        }
        if let Some(p) = &s.unhealthy_pod_eviction_policy {
            if p != "IfHealthyBudget" && p != "AlwaysAllow" {
                errs.push(FieldError::not_supported(
                    "spec.unhealthyPodEvictionPolicy",
                    p,
                    &["AlwaysAllow", "IfHealthyBudget"],
                ));
            }
        }
        errs
    }
}

/// Kubernetes' checks of a non-negative int or a percentage of at most 100%.
fn validate_int_or_percent(field: &str, v: &IntOrString) -> Vec<FieldError> {
    match v {
        IntOrString::Int(i) if *i < 0 => vec![FieldError::invalid(
            field,
            *i,
            "must be greater than or equal to 0",
        )],
        IntOrString::Int(_) => Vec::new(),
        IntOrString::String(s) => match percent(s) {
            None => vec![FieldError::invalid(
                field,
                s.as_str(),
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )],
            Some(p) if p > 100 => vec![FieldError::invalid(
                field,
                s.as_str(),
                "must not be greater than 100%",
            )],
            Some(_) => Vec::new(),
        },
    }
}

/// The number of `N%`, if `s` is one.
fn percent(s: &str) -> Option<i64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What the disruption controller computes for a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub expected_pods: i32,
    pub desired_healthy: i32,
}

/// How the budget's pods are counted for [`budget`]: `pods` is the number of selected pods,
/// `scale` the summed replicas of their controllers, asked only when a percentage or
/// maxUnavailable needs it (it fails when a pod has no controller with a scale).
pub fn budget(
    spec: &PodDisruptionBudgetSpec,
    pods: i32,
    scale: impl FnOnce() -> Result<i32, String>,
) -> Result<Budget, String> {
    match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => {
            let expected = scale()?;
            let max = max.scaled_value(expected, true)?;
            Ok(Budget {
                expected_pods: expected,
                desired_healthy: expected.saturating_sub(max).max(0),
            })
        }
        (None, Some(IntOrString::Int(min))) => Ok(Budget {
            expected_pods: pods,
            desired_healthy: *min,
        }),
        (None, Some(min)) => {
            let expected = scale()?;
            Ok(Budget {
                expected_pods: expected,
                desired_healthy: min.scaled_value(expected, true)?,
            })
        }
        // Neither set (kubectl always sets one): Kubernetes expects no pods, so nothing may
        // be disrupted.
        (None, None) => Ok(Budget {
            expected_pods: 0,
            desired_healthy: 0,
        }),
    }
}

/// disruptionsAllowed for `current_healthy` pods under `b`.
pub fn disruptions_allowed(b: Budget, current_healthy: i32) -> i32 {
    if b.expected_pods <= 0 {
        return 0;
    }
    current_healthy.saturating_sub(b.desired_healthy).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            ..Default::default()
        }
    }

    #[test]
    fn min_available_int_counts_pods_not_scale() {
        let s = spec(Some(IntOrString::Int(2)), None);
        let b = budget(&s, 3, || panic!("no scale needed")).unwrap();
        assert_eq!(
            b,
            Budget {
                expected_pods: 3,
                desired_healthy: 2
            }
        );
        assert_eq!(disruptions_allowed(b, 3), 1);
        assert_eq!(disruptions_allowed(b, 2), 0);
        assert_eq!(disruptions_allowed(b, 1), 0);
    }

    #[test]
    fn percentages_round_up_against_the_controllers_scale() {
        // 50% of 5 replicas: 3 must stay healthy (rounded up).
        let s = spec(Some(IntOrString::String("50%".into())), None);
        let b = budget(&s, 4, || Ok(5)).unwrap();
        assert_eq!(b.expected_pods, 5);
        assert_eq!(b.desired_healthy, 3);
        assert_eq!(disruptions_allowed(b, 4), 1);
        // maxUnavailable 25% of 5 rounds up to 2 unavailable: 3 healthy wanted.
        let s = spec(None, Some(IntOrString::String("25%".into())));
        let b = budget(&s, 5, || Ok(5)).unwrap();
        assert_eq!(b.desired_healthy, 3);
        assert_eq!(disruptions_allowed(b, 5), 2);
        // maxUnavailable as an int.
        let s = spec(None, Some(IntOrString::Int(1)));
        let b = budget(&s, 3, || Ok(3)).unwrap();
        assert_eq!(b.desired_healthy, 2);
        assert_eq!(disruptions_allowed(b, 3), 1);
        assert_eq!(disruptions_allowed(b, 2), 0);
    }

    #[test]
    fn no_expected_pods_allow_nothing() {
        let s = spec(None, Some(IntOrString::Int(1)));
        let b = budget(&s, 0, || Ok(0)).unwrap();
        assert_eq!(disruptions_allowed(b, 0), 0);
        let err = budget(&s, 1, || Err("no controller".into())).unwrap_err();
        assert_eq!(err, "no controller");
    }

    #[test]
    fn validation() {
        let mut p = PodDisruptionBudget::default();
        p.metadata.name = "a".into();
        p.metadata.namespace = Some("default".into());
        p.spec = spec(Some(IntOrString::Int(1)), Some(IntOrString::Int(1)));
        let errs = p.validate();
        assert!(errs
            .iter()
            .any(|e| e.message.contains("cannot be both set")));
        p.spec = spec(Some(IntOrString::String("150%".into())), None);
        assert!(p.validate()[0].message.contains("greater than 100%"));
        p.spec = spec(None, Some(IntOrString::Int(-1)));
        assert!(!p.validate().is_empty());
        p.spec = spec(None, Some(IntOrString::String("x".into())));
        assert!(!p.validate().is_empty());
        p.spec = spec(Some(IntOrString::String("40%".into())), None);
        assert!(p.validate().is_empty());
    }
}
