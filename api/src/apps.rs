//! apps/v1 kinds: Deployment, ReplicaSet, DaemonSet.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{spec_and_status, PodTemplateSpec};
use crate::meta::{IntOrString, LabelSelector, ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

// ---------------------------------------------------------------------------------------
// Deployment

/// apps/v1 Deployment.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.Deployment")]
#[schemars(
    description = "Deployment keeps a number of identical pods running from a template and rolls out changes to the template through ReplicaSets."
)]
pub struct Deployment {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the Deployment.
    pub spec: DeploymentSpec,
    /// Most recently observed state of the Deployment. Read-only.
    pub status: DeploymentStatus,
}

/// apps/v1 DeploymentSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DeploymentSpec")]
#[schemars(description = "DeploymentSpec is the desired state of a Deployment.")]
pub struct DeploymentSpec {
    /// Number of desired pods. Default: 1.
    pub replicas: Option<i32>,
    /// Label selector of the pods the Deployment manages; must match the template's labels.
    /// Cannot be changed in apps/v1.
    pub selector: Option<LabelSelector>,
    /// Template of the pods to create.
    pub template: PodTemplateSpec,
    /// How old pods are replaced by new ones.
    pub strategy: Option<DeploymentStrategy>,
    /// Seconds a new pod must be ready, without any container crashing, to count as available.
    /// Default: 0.
    pub min_ready_seconds: Option<i32>,
    /// Number of old ReplicaSets kept to allow rollback. Default: 10.
    pub revision_history_limit: Option<i32>,
    /// Whether the Deployment is paused: template changes do not roll out while it is.
    pub paused: Option<bool>,
    /// Seconds a rollout may make no progress before the Deployment reports it failed
    /// (Progressing condition with reason ProgressDeadlineExceeded). Default: 600.
    pub progress_deadline_seconds: Option<i32>,
}

/// apps/v1 DeploymentStrategy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DeploymentStrategy")]
#[schemars(description = "How a Deployment replaces old pods by new ones.")]
pub struct DeploymentStrategy {
    /// Recreate or RollingUpdate.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Parameters of a rolling update (type RollingUpdate only).
    pub rolling_update: Option<RollingUpdate>,
}

/// apps/v1 RollingUpdateDeployment and RollingUpdateDaemonSet (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.RollingUpdateDeployment")]
#[schemars(description = "Parameters of a rolling update.")]
pub struct RollingUpdate {
    /// Most pods that may be unavailable during the update: a number or a percentage of the
    /// desired pods (rounded down). Default: 25%.
    pub max_unavailable: Option<IntOrString>,
    /// Most pods that may be created above the desired number during the update: a number or a
    /// percentage (rounded up). Default: 25%.
    pub max_surge: Option<IntOrString>,
}

/// apps/v1 DeploymentStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DeploymentStatus")]
#[schemars(description = "The most recently observed state of a Deployment.")]
pub struct DeploymentStatus {
    /// The generation the controller observed last.
    pub observed_generation: Option<i64>,
    /// Number of pods targeted by the Deployment (their labels match the selector).
    pub replicas: Option<i32>,
    /// Number of pods from the current template.
    pub updated_replicas: Option<i32>,
    /// Number of ready pods.
    pub ready_replicas: Option<i32>,
    /// Number of pods ready for at least minReadySeconds.
    pub available_replicas: Option<i32>,
    /// Number of pods still needed for the Deployment to have its desired number available.
    pub unavailable_replicas: Option<i32>,
    /// Number of pods being deleted.
    pub terminating_replicas: Option<i32>,
    /// Observations of the Deployment's state (Available, Progressing).
    pub conditions: Vec<DeploymentCondition>,
    /// Count of hash collisions of the Deployment's ReplicaSet names.
    pub collision_count: Option<i32>,
}

/// apps/v1 DeploymentCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DeploymentCondition")]
#[schemars(description = "One aspect of a Deployment's state.")]
pub struct DeploymentCondition {
    /// Type of the condition: Available, Progressing or ReplicaFailure.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// When the condition was last updated.
    pub last_update_time: Option<Time>,
    /// When the condition last changed status.
    pub last_transition_time: Option<Time>,
    /// Brief CamelCase reason for the last transition.
    pub reason: Option<String>,
    /// Human-readable details of the last transition.
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.ReplicaSet")]
#[schemars(description = "ReplicaSet keeps a number of identical pods running.")]
pub struct ReplicaSet {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the ReplicaSet.
    pub spec: ReplicaSetSpec,
    /// Most recently observed state of the ReplicaSet. Read-only.
    pub status: ReplicaSetStatus,
}

/// apps/v1 ReplicaSetSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.ReplicaSetSpec")]
#[schemars(description = "ReplicaSetSpec is the desired state of a ReplicaSet.")]
pub struct ReplicaSetSpec {
    /// Number of desired pods. Default: 1.
    pub replicas: Option<i32>,
    /// Seconds a new pod must be ready to count as available. Default: 0.
    pub min_ready_seconds: Option<i32>,
    /// Label selector of the pods the ReplicaSet manages; must match the template's labels.
    pub selector: Option<LabelSelector>,
    /// Template of the pods created when too few exist.
    pub template: PodTemplateSpec,
}

/// apps/v1 ReplicaSetStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.ReplicaSetStatus")]
#[schemars(description = "The most recently observed state of a ReplicaSet.")]
pub struct ReplicaSetStatus {
    /// Number of pods the ReplicaSet has.
    pub replicas: i32,
    /// Number of pods whose labels match the template's.
    pub fully_labeled_replicas: Option<i32>,
    /// Number of ready pods.
    pub ready_replicas: Option<i32>,
    /// Number of pods ready for at least minReadySeconds.
    pub available_replicas: Option<i32>,
    /// Number of pods being deleted.
    pub terminating_replicas: Option<i32>,
    /// The generation the controller observed last.
    pub observed_generation: Option<i64>,
    /// Observations of the ReplicaSet's state.
    pub conditions: Vec<WorkloadCondition>,
}

/// apps/v1 ReplicaSetCondition and DaemonSetCondition (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.ReplicaSetCondition")]
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DaemonSet")]
#[schemars(description = "DaemonSet runs one copy of a pod on every eligible node.")]
pub struct DaemonSet {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the DaemonSet.
    pub spec: DaemonSetSpec,
    /// Most recently observed state of the DaemonSet. Read-only.
    pub status: DaemonSetStatus,
}

/// apps/v1 DaemonSetSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DaemonSetSpec")]
#[schemars(description = "DaemonSetSpec is the desired state of a DaemonSet.")]
pub struct DaemonSetSpec {
    /// Label selector of the pods the DaemonSet manages; must match the template's labels.
    pub selector: Option<LabelSelector>,
    /// Template of the pod run on each eligible node.
    pub template: PodTemplateSpec,
    /// How pods are replaced when the template changes.
    pub update_strategy: Option<DaemonSetUpdateStrategy>,
    /// Seconds a new pod must be ready to count as available. Default: 0.
    pub min_ready_seconds: Option<i32>,
    /// Number of old revisions kept for rollback. Default: 10.
    pub revision_history_limit: Option<i32>,
}

/// apps/v1 DaemonSetUpdateStrategy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DaemonSetUpdateStrategy")]
#[schemars(description = "How a DaemonSet replaces its pods when its template changes.")]
pub struct DaemonSetUpdateStrategy {
    /// RollingUpdate or OnDelete.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Parameters of a rolling update (type RollingUpdate only).
    pub rolling_update: Option<RollingUpdate>,
}

/// apps/v1 DaemonSetStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.DaemonSetStatus")]
#[schemars(description = "The most recently observed state of a DaemonSet.")]
pub struct DaemonSetStatus {
    /// Number of nodes running at least one daemon pod that should.
    pub current_number_scheduled: i32,
    /// Number of nodes running a daemon pod that should not.
    pub number_misscheduled: i32,
    /// Number of nodes that should run the daemon pod.
    pub desired_number_scheduled: i32,
    /// Number of nodes whose daemon pod is ready.
    pub number_ready: i32,
    /// The generation the controller observed last.
    pub observed_generation: Option<i64>,
    /// Number of nodes running the current template's pod.
    pub updated_number_scheduled: Option<i32>,
    /// Number of nodes whose daemon pod is available.
    pub number_available: Option<i32>,
    /// Number of nodes whose daemon pod is not available.
    pub number_unavailable: Option<i32>,
    /// Count of hash collisions of the DaemonSet's revisions.
    pub collision_count: Option<i32>,
    /// Observations of the DaemonSet's state.
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

// ---------------------------------------------------------------------------------------
// StatefulSet

/// apps/v1 StatefulSet.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.StatefulSet")]
#[schemars(
    description = "StatefulSet represents a set of pods with consistent identities: stable names (web-0, web-1...), stable network names through a headless Service, and stable storage through one claim per pod and template."
)]
pub struct StatefulSet {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the StatefulSet.
    pub spec: StatefulSetSpec,
    /// Most recently observed state of the StatefulSet. Read-only.
    pub status: StatefulSetStatus,
}

/// A StatefulSet's claim templates. In JSON each may carry `apiVersion` and `kind` (they
/// are PersistentVolumeClaims, and their published schema has both), which decoding drops,
/// as kube-apiserver's conversion does; the stored form has neither.
fn claim_templates<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<crate::storage::PersistentVolumeClaim>, D::Error> {
    use crate::storage::{
        PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    };
    if !d.is_human_readable() {
        return Vec::deserialize(d);
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", default, deny_unknown_fields)]
    #[derive(Default)]
    struct Template {
        #[serde(rename = "apiVersion")]
        _api_version: Option<serde::de::IgnoredAny>,
        #[serde(rename = "kind")]
        _kind: Option<serde::de::IgnoredAny>,
        metadata: ObjectMeta,
        spec: PersistentVolumeClaimSpec,
        status: PersistentVolumeClaimStatus,
    }
    Ok(Vec::<Template>::deserialize(d)?
        .into_iter()
        .map(|t| PersistentVolumeClaim {
            metadata: t.metadata,
            spec: t.spec,
            status: t.status,
        })
        .collect())
}

/// apps/v1 StatefulSetSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.StatefulSetSpec")]
#[schemars(description = "A StatefulSetSpec is the specification of a StatefulSet.")]
pub struct StatefulSetSpec {
    /// Number of desired pods. Default: 1.
    pub replicas: Option<i32>,
    /// Label selector of the pods; must match the template's labels.
    pub selector: Option<LabelSelector>,
    /// Template of the pods; each gets the name `<set>-<ordinal>`.
    pub template: PodTemplateSpec,
    /// Claims each pod gets, named `<template>-<set>-<ordinal>`, mounted as the volume of the
    /// template's name.
    #[serde(deserialize_with = "claim_templates")]
    pub volume_claim_templates: Vec<crate::storage::PersistentVolumeClaim>,
    /// The headless Service that gives the pods their network names
    /// (`<pod>.<serviceName>.<namespace>.svc.<cluster domain>`).
    pub service_name: Option<String>,
    /// OrderedReady (default: one pod at a time, in order) or Parallel.
    pub pod_management_policy: Option<String>,
    /// How pods are replaced when the template changes.
    pub update_strategy: Option<StatefulSetUpdateStrategy>,
    /// Number of old revisions kept. Default: 10.
    pub revision_history_limit: Option<i32>,
    /// Seconds a new pod must be ready to count as available. Default: 0.
    pub min_ready_seconds: Option<i32>,
    /// What happens to the claims when the set is deleted or scaled down (default: kept).
    pub persistent_volume_claim_retention_policy:
        Option<StatefulSetPersistentVolumeClaimRetentionPolicy>,
    /// The first ordinal. Kept; skiff numbers from 0.
    pub ordinals: Option<crate::meta::Opaque>,
}

/// apps/v1 StatefulSetUpdateStrategy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.StatefulSetUpdateStrategy")]
#[schemars(
    description = "StatefulSetUpdateStrategy indicates the strategy that the StatefulSet controller will use to perform updates."
)]
pub struct StatefulSetUpdateStrategy {
    /// RollingUpdate (default) or OnDelete.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Parameters of a rolling update.
    pub rolling_update: Option<RollingUpdateStatefulSetStrategy>,
}

/// apps/v1 RollingUpdateStatefulSetStrategy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy")]
#[schemars(
    description = "RollingUpdateStatefulSetStrategy is used to communicate parameter for RollingUpdateStatefulSetStrategyType."
)]
pub struct RollingUpdateStatefulSetStrategy {
    /// Pods with an ordinal below the partition keep their revision. Default: 0.
    pub partition: Option<i32>,
    /// Most pods unavailable during an update. Kept; skiff updates one pod at a time.
    pub max_unavailable: Option<IntOrString>,
}

/// apps/v1 StatefulSetPersistentVolumeClaimRetentionPolicy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy")]
#[schemars(
    description = "StatefulSetPersistentVolumeClaimRetentionPolicy describes the policy used for PVCs created from the StatefulSet VolumeClaimTemplates."
)]
pub struct StatefulSetPersistentVolumeClaimRetentionPolicy {
    /// Retain (default) or Delete the claims when the set is deleted.
    pub when_deleted: Option<String>,
    /// Retain (default) or Delete the claims of pods removed by a scale-down.
    pub when_scaled: Option<String>,
}

/// apps/v1 StatefulSetStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.StatefulSetStatus")]
#[schemars(description = "StatefulSetStatus represents the current state of a StatefulSet.")]
pub struct StatefulSetStatus {
    /// The generation the controller observed last.
    pub observed_generation: Option<i64>,
    /// Number of pods the controller created.
    pub replicas: i32,
    /// Number of pods with a Ready condition.
    pub ready_replicas: i32,
    /// Number of pods at the current revision.
    pub current_replicas: i32,
    /// Number of pods at the update revision.
    pub updated_replicas: i32,
    /// The revision of the pods up to `currentReplicas`.
    pub current_revision: Option<String>,
    /// The revision the pods are being updated to.
    pub update_revision: Option<String>,
    /// Count of hash collisions of the set's revisions.
    pub collision_count: Option<i32>,
    /// Observations of the set's state.
    pub conditions: Vec<WorkloadCondition>,
    /// Number of pods ready for minReadySeconds.
    pub available_replicas: i32,
}

impl Resource for StatefulSet {
    const KIND: Kind = Kind::StatefulSet;
    crate::resource_basics!(StatefulSet);
    spec_and_status!();

    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        s.replicas.get_or_insert(1);
        s.pod_management_policy
            .get_or_insert_with(|| "OrderedReady".into());
        let strategy = s.update_strategy.get_or_insert_with(Default::default);
        strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            ru.partition.get_or_insert(0);
        }
        s.revision_history_limit.get_or_insert(10);
        let policy = s
            .persistent_volume_claim_retention_policy
            .get_or_insert_with(Default::default);
        policy.when_deleted.get_or_insert_with(|| "Retain".into());
        policy.when_scaled.get_or_insert_with(|| "Retain".into());
        for t in &mut s.volume_claim_templates {
            t.set_defaults();
        }
        s.template.spec.set_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        let s = &self.spec;
        let mut errs = validation::validate_meta(&self.metadata, Kind::StatefulSet);
        validation::check_non_negative(&mut errs, "spec.replicas", s.replicas);
        validation::check_non_negative(&mut errs, "spec.minReadySeconds", s.min_ready_seconds);
        validation::check_non_negative(
            &mut errs,
            "spec.revisionHistoryLimit",
            s.revision_history_limit,
        );
        // The template is checked as the pods get it: with a volume per claim template.
        let template = with_claim_volumes(&s.template, &s.volume_claim_templates, |t| {
            t.metadata.name.clone()
        });
        errs.extend(validation::validate_workload_template(
            s.selector.as_ref(),
            &template,
            "statefulset",
        ));
        if let Some(p) = &s.pod_management_policy {
            if p != "OrderedReady" && p != "Parallel" {
                errs.push(FieldError::not_supported(
                    "spec.podManagementPolicy",
                    p,
                    &["OrderedReady", "Parallel"],
                ));
            }
        }
        if let Some(st) = &s.update_strategy {
            match st.type_.as_deref() {
                Some("RollingUpdate") | None => {}
                Some("OnDelete") if st.rolling_update.is_some() => errs.push(FieldError::invalid(
                    "spec.updateStrategy.rollingUpdate",
                    "{...}",
                    "only allowed for updateStrategy 'RollingUpdate'",
                )),
                Some("OnDelete") => {}
                Some(t) => errs.push(FieldError::not_supported(
                    "spec.updateStrategy.type",
                    t,
                    &["OnDelete", "RollingUpdate"],
                )),
            }
            if let Some(p) = st.rolling_update.as_ref().and_then(|r| r.partition) {
                validation::check_non_negative(
                    &mut errs,
                    "spec.updateStrategy.rollingUpdate.partition",
                    Some(p),
                );
            }
        }
        if let Some(p) = &s.persistent_volume_claim_retention_policy {
            for (field, v) in [
                ("whenDeleted", &p.when_deleted),
                ("whenScaled", &p.when_scaled),
            ] {
                if let Some(v) = v {
                    if v != "Retain" && v != "Delete" {
                        errs.push(FieldError::not_supported(
                            format!("spec.persistentVolumeClaimRetentionPolicy.{field}"),
                            v,
                            &["Retain", "Delete"],
                        ));
                    }
                }
            }
        }
        for (i, t) in s.volume_claim_templates.iter().enumerate() {
            let mut claim = t.clone();
            // A template is named by its name alone; the claims get their names later.
            claim.metadata.namespace = None;
            for mut e in claim.validate() {
                if e.field.starts_with("metadata.") && e.field != "metadata.name" {
                    continue;
                }
                e.field = format!("spec.volumeClaimTemplates[{i}].{}", e.field);
                errs.push(e);
            }
        }
        errs
    }
}

/// `template` with a persistentVolumeClaim volume per claim template (replacing a volume of
/// the same name), the claim named by `claim_name`.
pub fn with_claim_volumes(
    template: &PodTemplateSpec,
    claims: &[crate::storage::PersistentVolumeClaim],
    claim_name: impl Fn(&crate::storage::PersistentVolumeClaim) -> String,
) -> PodTemplateSpec {
    let mut t = template.clone();
    for c in claims {
        let name = &c.metadata.name;
        t.spec.volumes.retain(|v| &v.name != name);
        t.spec.volumes.push(crate::core::Volume {
            name: name.clone(),
            persistent_volume_claim: Some(crate::core::PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(c),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    t
}

/// The label of a StatefulSet's pod naming the pod.
pub const STATEFULSET_POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label of a StatefulSet's pod with its ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label of a StatefulSet's (or DaemonSet's) pod naming its revision.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";

// ---------------------------------------------------------------------------------------
// ControllerRevision

/// apps/v1 ControllerRevision: an immutable snapshot of a StatefulSet's template, which
/// `kubectl rollout history` lists and `kubectl rollout undo` patches back.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.apps.v1.ControllerRevision")]
#[schemars(
    description = "ControllerRevision implements an immutable snapshot of state data. Clients are responsible for serializing and deserializing the objects that contain their internal state."
)]
pub struct ControllerRevision {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The serialized state: for a StatefulSet, `{"spec":{"template":{...,"$patch":"replace"}}}`.
    pub data: crate::meta::Opaque,
    /// The revision number.
    pub revision: i64,
}

impl Resource for ControllerRevision {
    const KIND: Kind = Kind::ControllerRevision;
    crate::resource_basics!(ControllerRevision);

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&(&self.data, self.revision))
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::ControllerRevision);
        validation::check_non_negative(&mut errs, "revision", Some(self.revision));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_templates_take_and_drop_their_type_and_refuse_unknown_fields() {
        let with_type = serde_json::json!({"spec": {"volumeClaimTemplates": [{
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "www"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        let set: StatefulSet = crate::codec::from_json(with_type).expect("decodes");
        let t = &set.spec.volume_claim_templates[0];
        assert_eq!(t.metadata.name, "www");
        assert_eq!(t.spec.access_modes, ["ReadWriteOnce"]);
        let packed = postcard::to_allocvec(&set).expect("encodes");
        assert_eq!(
            postcard::from_bytes::<StatefulSet>(&packed).expect("reads back"),
            set
        );

        let unknown = serde_json::json!({"spec": {"volumeClaimTemplates": [{
            "metadata": {"name": "www"}, "size": "1Gi"}]}});
        let err = crate::codec::from_json::<StatefulSet>(unknown).unwrap_err();
        assert!(err.to_string().contains("size"), "{err}");
    }
}
