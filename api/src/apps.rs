//! apps/v1 kinds: Deployment, ReplicaSet, DaemonSet.

use serde::{Deserialize, Serialize};

use crate::core::{spec_and_status, PodTemplateSpec};
use crate::meta::{IntOrString, LabelSelector, ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

// ---------------------------------------------------------------------------------------
// Deployment

/// apps/v1 Deployment.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Deployment {
    pub metadata: ObjectMeta,
    pub spec: DeploymentSpec,
    pub status: DeploymentStatus,
}

/// apps/v1 DeploymentSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DeploymentSpec {
    pub replicas: Option<i32>,
    pub selector: Option<LabelSelector>,
    pub template: PodTemplateSpec,
    pub strategy: Option<DeploymentStrategy>,
    pub min_ready_seconds: Option<i32>,
    pub revision_history_limit: Option<i32>,
    pub paused: Option<bool>,
    pub progress_deadline_seconds: Option<i32>,
}

/// apps/v1 DeploymentStrategy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DeploymentStrategy {
    /// Recreate or RollingUpdate.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub rolling_update: Option<RollingUpdate>,
}

/// apps/v1 RollingUpdateDeployment and RollingUpdateDaemonSet (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RollingUpdate {
    pub max_unavailable: Option<IntOrString>,
    pub max_surge: Option<IntOrString>,
}

/// apps/v1 DeploymentStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DeploymentStatus {
    pub observed_generation: Option<i64>,
    pub replicas: Option<i32>,
    pub updated_replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub unavailable_replicas: Option<i32>,
    pub terminating_replicas: Option<i32>,
    pub conditions: Vec<DeploymentCondition>,
    pub collision_count: Option<i32>,
}

/// apps/v1 DeploymentCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DeploymentCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub last_update_time: Option<Time>,
    pub last_transition_time: Option<Time>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Resource for Deployment {
    const KIND: Kind = Kind::Deployment;
    crate::resource_basics!(Deployment);
    spec_and_status!();

    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        s.replicas.get_or_insert(1);
        let strategy = s.strategy.get_or_insert_with(Default::default);
        strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            ru.max_unavailable
                .get_or_insert_with(|| IntOrString::String("25%".into()));
            ru.max_surge
                .get_or_insert_with(|| IntOrString::String("25%".into()));
        }
        s.revision_history_limit.get_or_insert(10);
        s.progress_deadline_seconds.get_or_insert(600);
        s.template.spec.set_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        let s = &self.spec;
        let mut errs = validation::validate_meta(&self.metadata, Kind::Deployment);
        validation::check_non_negative(&mut errs, "spec.replicas", s.replicas);
        validation::check_non_negative(&mut errs, "spec.minReadySeconds", s.min_ready_seconds);
        validation::check_non_negative(
            &mut errs,
            "spec.revisionHistoryLimit",
            s.revision_history_limit,
        );
        errs.extend(validation::validate_workload_template(
            s.selector.as_ref(),
            &s.template,
            "deployment",
        ));
        if let Some(st) = &s.strategy {
            errs.extend(validation::validate_deployment_strategy(st));
        }
        if let Some(pd) = s.progress_deadline_seconds {
            if pd <= s.min_ready_seconds.unwrap_or(0) {
                errs.push(FieldError::invalid(
                    "spec.progressDeadlineSeconds",
                    pd,
                    "must be greater than minReadySeconds",
                ));
            }
        }
        errs
    }
}

// ---------------------------------------------------------------------------------------
// ReplicaSet

/// apps/v1 ReplicaSet.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ReplicaSet {
    pub metadata: ObjectMeta,
    pub spec: ReplicaSetSpec,
    pub status: ReplicaSetStatus,
}

/// apps/v1 ReplicaSetSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ReplicaSetSpec {
    pub replicas: Option<i32>,
    pub min_ready_seconds: Option<i32>,
    pub selector: Option<LabelSelector>,
    pub template: PodTemplateSpec,
}

/// apps/v1 ReplicaSetStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ReplicaSetStatus {
    pub replicas: i32,
    pub fully_labeled_replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub terminating_replicas: Option<i32>,
    pub observed_generation: Option<i64>,
    pub conditions: Vec<WorkloadCondition>,
}

/// apps/v1 ReplicaSetCondition and DaemonSetCondition (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WorkloadCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub last_transition_time: Option<Time>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Resource for ReplicaSet {
    const KIND: Kind = Kind::ReplicaSet;
    crate::resource_basics!(ReplicaSet);
    spec_and_status!();

    fn set_defaults(&mut self) {
        self.spec.replicas.get_or_insert(1);
        self.spec.template.spec.set_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        let s = &self.spec;
        let mut errs = validation::validate_meta(&self.metadata, Kind::ReplicaSet);
        validation::check_non_negative(&mut errs, "spec.replicas", s.replicas);
        validation::check_non_negative(&mut errs, "spec.minReadySeconds", s.min_ready_seconds);
        errs.extend(validation::validate_workload_template(
            s.selector.as_ref(),
            &s.template,
            "replicaset",
        ));
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        match path {
            "status.replicas" => Some(self.status.replicas.to_string()),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// DaemonSet

/// apps/v1 DaemonSet.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DaemonSet {
    pub metadata: ObjectMeta,
    pub spec: DaemonSetSpec,
    pub status: DaemonSetStatus,
}

/// apps/v1 DaemonSetSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DaemonSetSpec {
    pub selector: Option<LabelSelector>,
    pub template: PodTemplateSpec,
    pub update_strategy: Option<DaemonSetUpdateStrategy>,
    pub min_ready_seconds: Option<i32>,
    pub revision_history_limit: Option<i32>,
}

/// apps/v1 DaemonSetUpdateStrategy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DaemonSetUpdateStrategy {
    /// RollingUpdate or OnDelete.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub rolling_update: Option<RollingUpdate>,
}

/// apps/v1 DaemonSetStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DaemonSetStatus {
    pub current_number_scheduled: i32,
    pub number_misscheduled: i32,
    pub desired_number_scheduled: i32,
    pub number_ready: i32,
    pub observed_generation: Option<i64>,
    pub updated_number_scheduled: Option<i32>,
    pub number_available: Option<i32>,
    pub number_unavailable: Option<i32>,
    pub collision_count: Option<i32>,
    pub conditions: Vec<WorkloadCondition>,
}

impl Resource for DaemonSet {
    const KIND: Kind = Kind::DaemonSet;
    crate::resource_basics!(DaemonSet);
    spec_and_status!();

    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        let strategy = s.update_strategy.get_or_insert_with(Default::default);
        strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
            ru.max_surge.get_or_insert(IntOrString::Int(0));
        }
        s.revision_history_limit.get_or_insert(10);
        s.template.spec.set_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        let s = &self.spec;
        let mut errs = validation::validate_meta(&self.metadata, Kind::DaemonSet);
        validation::check_non_negative(&mut errs, "spec.minReadySeconds", s.min_ready_seconds);
        validation::check_non_negative(
            &mut errs,
            "spec.revisionHistoryLimit",
            s.revision_history_limit,
        );
        errs.extend(validation::validate_workload_template(
            s.selector.as_ref(),
            &s.template,
            "daemonset",
        ));
        if let Some(st) = &s.update_strategy {
            errs.extend(validation::validate_daemonset_strategy(st));
        }
        errs
    }
}
