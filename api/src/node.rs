//! node.k8s.io/v1 RuntimeClass: a named container runtime configuration (its handler), with
//! the resources a pod of it costs beyond its containers (overhead) and where such pods may
//! run (scheduling). The RuntimeClass admission copies both into the pods that name it; the
//! agent runs a pod only when it has the class's handler.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::Toleration;
use crate::meta::ObjectMeta;
use crate::meta::Quantity;
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of RuntimeClass.
pub const GROUP: &str = "node.k8s.io";

/// The one handler of skiff's agent: its libcontainer runtime, which runs containers as runc
/// does (k3s names containerd's default handler the same).
pub const AGENT_HANDLER: &str = "runc";

/// node.k8s.io/v1 RuntimeClass.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.node.v1.RuntimeClass")]
#[schemars(
    description = "RuntimeClass defines a class of container runtime supported in the cluster. The RuntimeClass is used to determine which container runtime is used to run all containers in a pod."
)]
pub struct RuntimeClass {
    /// More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata
    pub metadata: ObjectMeta,
    /// handler specifies the underlying runtime and configuration that the CRI implementation
    /// will use to handle pods of this class. The handler must be lowercase, conform to the
    /// DNS Label (RFC 1123) requirements, and is immutable.
    pub handler: String,
    /// overhead represents the resource overhead associated with running a pod for a given
    /// RuntimeClass.
    pub overhead: Option<Overhead>,
    /// scheduling holds the scheduling constraints to ensure that pods running with this
    /// RuntimeClass are scheduled to nodes that support it.
    pub scheduling: Option<Scheduling>,
}

/// node.k8s.io/v1 Overhead.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.node.v1.Overhead")]
#[schemars(
    description = "Overhead structure represents the resource overhead associated with running a pod."
)]
pub struct Overhead {
    /// podFixed represents the fixed resource overhead associated with running a pod.
    pub pod_fixed: BTreeMap<String, Quantity>,
}

/// node.k8s.io/v1 Scheduling.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.node.v1.Scheduling")]
#[schemars(
    description = "Scheduling specifies the scheduling constraints for nodes supporting a RuntimeClass."
)]
pub struct Scheduling {
    /// nodeSelector lists labels that must be present on nodes that support this
    /// RuntimeClass.
    pub node_selector: BTreeMap<String, String>,
    /// tolerations are appended (excluding duplicates) to pods running with this RuntimeClass
    /// during admission.
    pub tolerations: Vec<Toleration>,
}

impl Resource for RuntimeClass {
    const KIND: Kind = Kind::RuntimeClass;
    crate::resource_basics!(RuntimeClass);

    /// A RuntimeClass has no spec: Kubernetes keeps no generation for it.
    fn spec_fingerprint(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Kubernetes' ValidateRuntimeClass.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::RuntimeClass);
        if let Err(why) = validation::dns1123_label(&self.handler) {
            errs.push(FieldError::invalid("handler", &self.handler, why));
        }
        if let Some(o) = &self.overhead {
            for (name, q) in &o.pod_fixed {
                let field = format!("overhead.podFixed[{name}]");
                match q.milli_value().ok() {
                    Some(m) if m < 0 => errs.push(FieldError::invalid(
                        field,
                        &q.0,
                        "must be greater than or equal to 0",
                    )),
                    Some(_) => {}
                    None => errs.push(FieldError::invalid(field, &q.0, "must be a quantity")),
                }
            }
        }
        if let Some(s) = &self.scheduling {
            errs.extend(validation::validate_labels(
                &s.node_selector,
                "scheduling.nodeSelector",
            ));
            for (i, t) in s.tolerations.iter().enumerate() {
                errs.extend(validation::validate_toleration(
                    t,
                    &format!("scheduling.tolerations[{i}]"),
                ));
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_follows_kubernetes() {
        let mut rc = RuntimeClass::default();
        rc.metadata.name = "gvisor".into();
        rc.handler = "runsc".into();
        assert!(rc.validate().is_empty());
        rc.handler = "Run_SC".into();
        rc.overhead = Some(Overhead {
            pod_fixed: [("cpu".to_string(), Quantity("-1".into()))].into(),
        });
        let fields: Vec<String> = rc.validate().iter().map(|e| e.field.clone()).collect();
        assert_eq!(fields, ["handler", "overhead.podFixed[cpu]"]);
    }
}
