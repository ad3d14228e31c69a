//! core/v1 ReplicationController: the ReplicaSet's predecessor, still used by old manifests
//! and the Python client's tests. Its selector is a plain label map (equality only), and
//! both the selector and the object's labels default to the template's labels.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apps::WorkloadCondition;
use crate::core::{omit_empty, spec_and_status, PodTemplateSpec};
use crate::meta::ObjectMeta;
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// core/v1 ReplicationController.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ReplicationController")]
#[schemars(
    description = "ReplicationController represents the configuration of a replication controller."
)]
pub struct ReplicationController {
    /// Standard object metadata. Its labels default to the template's.
    pub metadata: ObjectMeta,
    /// Desired state of the replication controller.
    pub spec: ReplicationControllerSpec,
    /// Most recently observed state of the replication controller. Read-only.
    pub status: ReplicationControllerStatus,
}

/// core/v1 ReplicationControllerSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ReplicationControllerSpec")]
#[schemars(
    description = "ReplicationControllerSpec is the specification of a replication controller."
)]
pub struct ReplicationControllerSpec {
    /// Number of desired pods. Default: 1.
    pub replicas: Option<i32>,
    /// Seconds a new pod must be ready to count as available. Default: 0.
    pub min_ready_seconds: Option<i32>,
    /// Label keys and values the managed pods must carry. Defaults to the template's labels.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub selector: BTreeMap<String, String>,
    /// Template of the pods created when too few exist.
    pub template: Option<PodTemplateSpec>,
}

/// core/v1 ReplicationControllerStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ReplicationControllerStatus")]
#[schemars(
    description = "ReplicationControllerStatus represents the current status of a replication controller."
)]
pub struct ReplicationControllerStatus {
    /// The most recently observed number of replicas.
    pub replicas: i32,
    /// Number of pods whose labels match the template's.
    pub fully_labeled_replicas: Option<i32>,
    /// Number of ready pods.
    pub ready_replicas: Option<i32>,
    /// Number of pods ready for at least minReadySeconds.
    pub available_replicas: Option<i32>,
    /// The generation the controller observed last.
    pub observed_generation: Option<i64>,
    /// Observations of the replication controller's state.
    pub conditions: Vec<WorkloadCondition>,
}

impl Resource for ReplicationController {
    const KIND: Kind = Kind::ReplicationController;
    crate::resource_basics!(ReplicationController);
    spec_and_status!();

    /// Kubernetes' SetDefaults_ReplicationController: an empty selector and empty object
    /// labels take the template's labels.
    fn set_defaults(&mut self) {
        if let Some(t) = &mut self.spec.template {
            if !t.metadata.labels.is_empty() {
                if self.spec.selector.is_empty() {
                    self.spec.selector = t.metadata.labels.clone();
                }
                if self.metadata.labels.is_empty() {
                    self.metadata.labels = t.metadata.labels.clone();
                }
            }
            t.spec.set_defaults();
        }
        self.spec.replicas.get_or_insert(1);
    }

    fn validate(&self) -> Vec<FieldError> {
        let s = &self.spec;
        let mut errs = validation::validate_meta(&self.metadata, Kind::ReplicationController);
        validation::check_non_negative(&mut errs, "spec.minReadySeconds", s.min_ready_seconds);
        if s.selector.is_empty() {
            errs.push(FieldError::required("spec.selector"));
        } else {
            errs.extend(validation::validate_labels(&s.selector, "spec.selector"));
        }
        match s.replicas {
            None => errs.push(FieldError::required("spec.replicas")),
            Some(_) => validation::check_non_negative(&mut errs, "spec.replicas", s.replicas),
        }
        match &s.template {
            None => errs.push(FieldError::required("spec.template")),
            Some(t) => {
                let matches = s
                    .selector
                    .iter()
                    .all(|(k, v)| t.metadata.labels.get(k) == Some(v));
                if !s.selector.is_empty() && !matches {
                    errs.push(FieldError::invalid(
                        "spec.template.metadata.labels",
                        validation::go_map(&t.metadata.labels),
                        "`selector` does not match template `labels`",
                    ));
                }
                errs.extend(validation::validate_controller_pod_template(
                    t,
                    "ReplicationController",
                ));
            }
        }
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        match path {
            "status.replicas" => Some(self.status.replicas.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(json: serde_json::Value) -> ReplicationController {
        let mut rc: ReplicationController = serde_json::from_value(json).unwrap();
        rc.set_defaults();
        rc
    }

    #[test]
    fn selector_and_labels_default_to_the_templates() {
        let r = rc(serde_json::json!({
            "metadata": {"name": "nginx"},
            "spec": {"template": {"metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}
        }));
        assert_eq!(
            r.spec.selector.get("app").map(String::as_str),
            Some("nginx")
        );
        assert_eq!(r.metadata.labels, r.spec.selector);
        assert_eq!(r.spec.replicas, Some(1));
        assert!(r.validate().is_empty(), "{:?}", r.validate());
    }

    #[test]
    fn refusals_name_kubernetes_fields() {
        let r = rc(serde_json::json!({
            "metadata": {"name": "nginx"},
            "spec": {"selector": {"app": "other"}, "replicas": -1,
                "template": {"metadata": {"labels": {"app": "nginx"}},
                "spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "i"}]}}}
        }));
        let fields: Vec<String> = r
            .validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        let all = fields.join("\n");
        assert!(all.contains("spec.replicas"), "{all}");
        assert!(
            all.contains("spec.template.metadata.labels: Invalid value: \"map[app:nginx]\": `selector` does not match template `labels`"),
            "{all}"
        );
        assert!(
            all.contains("activeDeadlineSeconds in ReplicationController is not Supported"),
            "{all}"
        );
        let empty = rc(serde_json::json!({"metadata": {"name": "x"}, "spec": {}}));
        let all: Vec<String> = empty
            .validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert!(
            all.iter().any(|e| e.starts_with("spec.selector: Required")),
            "{all:?}"
        );
        assert!(
            all.iter().any(|e| e.starts_with("spec.template: Required")),
            "{all:?}"
        );
    }
}
