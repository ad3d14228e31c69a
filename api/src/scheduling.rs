//! scheduling.k8s.io/v1 PriorityClass: a name for a pod priority. The Priority admission
//! turns a pod's `priorityClassName` into `spec.priority`, and the scheduler lets a pod that
//! fits nowhere preempt pods of lower priority.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::object::{fingerprint, AnyObject, Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of PriorityClass.
pub const GROUP: &str = "scheduling.k8s.io";

/// The highest priority a user-defined class may have; above are the system classes.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;
/// The prefix reserved for the built-in classes.
pub const SYSTEM_PREFIX: &str = "system-";
/// The built-in classes: name, value, description (Kubernetes' SystemPriorityClasses).
pub const SYSTEM_CLASSES: &[(&str, i32, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];
/// A pod's preemption policy when its class names none.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// scheduling.k8s.io/v1 PriorityClass.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.scheduling.v1.PriorityClass")]
#[schemars(
    description = "PriorityClass defines mapping from a priority class name to the priority integer value. The value can be any valid integer."
)]
pub struct PriorityClass {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The integer priority of pods of this class: the higher, the more important.
    pub value: i32,
    /// Whether this class is the priority of pods that name no class. Only one class may be
    /// the global default.
    pub global_default: Option<bool>,
    /// When this class should be used, for people.
    pub description: Option<String>,
    /// Whether pods of this class may preempt lower-priority pods: PreemptLowerPriority
    /// (default) or Never. Immutable.
    pub preemption_policy: Option<String>,
}

impl PriorityClass {
    /// One of the built-in classes.
    pub fn system(name: &str) -> Option<PriorityClass> {
        let (name, value, description) = SYSTEM_CLASSES.iter().find(|c| c.0 == name)?;
        let mut pc = PriorityClass {
            value: *value,
            description: Some(description.to_string()),
            ..Default::default()
        };
        pc.metadata.name = name.to_string();
        pc.set_defaults();
        Some(pc)
    }

    pub fn is_global_default(&self) -> bool {
        self.global_default == Some(true)
    }
}

/// Kubernetes' IsKnownSystemPriorityClass: the error text when it is not.
fn known_system_class(name: &str, value: i32, global_default: bool) -> Result<(), String> {
    let Some((_, v, _)) = SYSTEM_CLASSES.iter().find(|c| c.0 == name) else {
        return Err(format!("{name} is not a known system priority class"));
    };
    if *v != value {
        return Err(format!("value of {name} PriorityClass must be {v}"));
    }
    if global_default {
        return Err(format!(
            "globalDefault of {name} PriorityClass must be false"
        ));
    }
    Ok(())
}

impl Resource for PriorityClass {
    const KIND: Kind = Kind::PriorityClass;
    crate::resource_basics!(PriorityClass);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(
            self.value,
            &self.global_default,
            &self.description,
            &self.preemption_policy,
        ))
    }

    fn set_defaults(&mut self) {
        self.preemption_policy
            .get_or_insert_with(|| PREEMPT_LOWER_PRIORITY.into());
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::PriorityClass);
        let name = &self.metadata.name;
        if name.starts_with(SYSTEM_PREFIX) {
            if let Err(why) = known_system_class(name, self.value, self.is_global_default()) {
                errs.push(FieldError::forbidden(
                    "metadata.name",
                    format!("priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}"),
                ));
            }
        } else if self.value > HIGHEST_USER_DEFINABLE_PRIORITY {
            errs.push(FieldError::forbidden(
                "value",
                format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
                ),
            ));
        }
        if let Some(p) = &self.preemption_policy {
            if p != PREEMPT_LOWER_PRIORITY && p != "Never" {
                errs.push(FieldError::not_supported(
                    "preemptionPolicy",
                    p,
                    &[PREEMPT_LOWER_PRIORITY, "Never"],
                ));
            }
        }
        errs
    }
}

/// The update rules of a PriorityClass: value and preemptionPolicy stay.
pub fn validate_update(new: &PriorityClass, old: &PriorityClass) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if new.value != old.value {
        errs.push(FieldError::forbidden(
            "value",
            "may not be changed in an update.",
        ));
    }
    if new.preemption_policy != old.preemption_policy {
        errs.push(FieldError::invalid(
            "preemptionPolicy",
            new.preemption_policy.as_deref().unwrap_or(""),
            "field is immutable",
        ));
    }
    errs
}

/// What the Priority admission makes of a pod's class: its priority and preemption policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The class name to record on the pod (the global default's when the pod named none).
    pub class_name: Option<String>,
    pub priority: i32,
    pub preemption_policy: Option<String>,
}

/// Kubernetes' Priority admission for a pod naming `class` (or none), given the stored
/// classes: Err is the reason for a Forbidden answer.
pub fn resolve(class: Option<&str>, classes: &[PriorityClass]) -> Result<Resolved, String> {
    match class.filter(|c| !c.is_empty()) {
        None => {
            // The global default with the lowest value, if any.
            let default = classes
                .iter()
                .filter(|c| c.is_global_default())
                .min_by_key(|c| c.value);
            Ok(match default {
                Some(c) => Resolved {
                    class_name: Some(c.metadata.name.clone()),
                    priority: c.value,
                    preemption_policy: c.preemption_policy.clone(),
                },
                // Kubernetes' Priority admission: priority 0 and PreemptLowerPriority when
                // no class is the global default.
                None => Resolved {
                    class_name: None,
                    priority: 0,
                    preemption_policy: Some(PREEMPT_LOWER_PRIORITY.to_string()),
                },
            })
        }
        Some(name) => {
            let found = classes
                .iter()
                .find(|c| c.metadata.name == name)
                .cloned()
                .or_else(|| PriorityClass::system(name));
            match found {
                Some(c) => Ok(Resolved {
                    class_name: Some(name.to_string()),
                    priority: c.value,
                    preemption_policy: c.preemption_policy.clone(),
                }),
                None => Err(format!("no PriorityClass with name {name} was found")),
            }
        }
    }
}

/// Applies the Priority admission to a pod being created: Err is the reason for Forbidden.
pub fn admit_pod(pod: &mut crate::core::Pod, classes: &[PriorityClass]) -> Result<(), String> {
    let r = resolve(pod.spec.priority_class_name.as_deref(), classes)?;
    if let Some(p) = pod.spec.priority {
        if p != r.priority {
            return Err(format!("the integer value of priority ({p}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name", r.priority));
        }
    }
    if let Some(want) = &r.preemption_policy {
        if let Some(have) = &pod.spec.preemption_policy {
            if have != want {
                return Err(format!("the string value of PreemptionPolicy ({have}) must not be provided in pod spec; priority admission controller computed {want} from the given PriorityClass name"));
            }
        }
        pod.spec.preemption_policy = Some(want.clone());
    }
    if r.class_name.is_some() {
        pod.spec.priority_class_name = r.class_name;
    }
    pod.spec.priority = Some(r.priority);
    Ok(())
}

/// The stored PriorityClasses among `objs`.
pub fn classes_of(objs: Vec<AnyObject>) -> Vec<PriorityClass> {
    objs.into_iter()
        .filter_map(PriorityClass::from_any)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Pod;

    fn class(name: &str, value: i32, default: bool) -> PriorityClass {
        let mut pc = PriorityClass {
            value,
            global_default: default.then_some(true),
            ..Default::default()
        };
        pc.metadata.name = name.into();
        pc.set_defaults();
        pc
    }

    fn messages(pc: &PriorityClass) -> Vec<String> {
        pc.validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn system_names_and_values_are_reserved() {
        assert!(messages(&PriorityClass::system("system-node-critical").unwrap()).is_empty());
        assert!(messages(&PriorityClass::system("system-cluster-critical").unwrap()).is_empty());
        assert_eq!(
            messages(&class("system-mine", 5, false)),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"]
        );
        assert_eq!(
            messages(&class("system-node-critical", 5, false)),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-node-critical PriorityClass must be 2000001000"]
        );
        assert_eq!(
            messages(&class("big", 1_000_000_001, false)),
            ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
        assert!(messages(&class("big", 1_000_000_000, false)).is_empty());
        let old = class("high", 10, false);
        let new = class("high", 11, false);
        assert_eq!(validate_update(&new, &old)[0].field, "value");
    }

    #[test]
    fn admission_resolves_classes_and_defaults() {
        let classes = [class("high", 1000, false), class("low", 10, true)];
        let mut pod = Pod::default();
        admit_pod(&mut pod, &classes).unwrap();
        assert_eq!(pod.spec.priority, Some(10));
        assert_eq!(pod.spec.priority_class_name.as_deref(), Some("low"));
        assert_eq!(
            pod.spec.preemption_policy.as_deref(),
            Some("PreemptLowerPriority")
        );

        let mut pod = Pod::default();
        pod.spec.priority_class_name = Some("high".into());
        admit_pod(&mut pod, &classes).unwrap();
        assert_eq!(pod.spec.priority, Some(1000));

        // The built-in classes exist even before the server stores them.
        let mut pod = Pod::default();
        pod.spec.priority_class_name = Some("system-node-critical".into());
        admit_pod(&mut pod, &[]).unwrap();
        assert_eq!(pod.spec.priority, Some(2_000_001_000));

        let mut pod = Pod::default();
        pod.spec.priority_class_name = Some("nope".into());
        assert_eq!(
            admit_pod(&mut pod, &classes).unwrap_err(),
            "no PriorityClass with name nope was found"
        );

        let mut pod = Pod::default();
        pod.spec.priority_class_name = Some("high".into());
        pod.spec.priority = Some(5);
        assert!(admit_pod(&mut pod, &classes)
            .unwrap_err()
            .starts_with("the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000"));

        // No default: priority 0 and no class name.
        let mut pod = Pod::default();
        admit_pod(&mut pod, &[class("high", 1000, false)]).unwrap();
        assert_eq!(pod.spec.priority, Some(0));
        assert_eq!(pod.spec.priority_class_name, None);
    }
}
