//! rbac.authorization.k8s.io/v1 kinds: Role, ClusterRole, RoleBinding, ClusterRoleBinding.
//!
//! Validation follows Kubernetes' `pkg/apis/rbac/validation`: names are path segments (so
//! `system:node` is a valid name), every rule has verbs and either resources or
//! non-resource URLs, and a binding's `roleRef` names a Role or ClusterRole of this group.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{LabelSelector, ObjectMeta};
use crate::object::{fingerprint, Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of the RBAC kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// rbac/v1 PolicyRule.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.PolicyRule")]
#[schemars(
    description = "PolicyRule holds information that describes a policy rule, but does not contain information about who the rule applies to or which namespace the rule applies to."
)]
pub struct PolicyRule {
    /// Verbs the rule allows (get, list, watch, create, update, patch, delete,
    /// deletecollection, ...); `*` is every verb.
    pub verbs: Vec<String>,
    /// API groups of the resources; "" is the core group, `*` every group.
    pub api_groups: Vec<String>,
    /// Resources the rule applies to, with subresources as `pods/log`; `*` is every resource.
    pub resources: Vec<String>,
    /// Names the rule is restricted to; empty means every name.
    pub resource_names: Vec<String>,
    /// Partial URLs (not resources) the rule applies to, as `/healthz` or `/api/*`. Only in
    /// ClusterRoles.
    #[serde(rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// A rule on resources.
    pub fn resources(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: owned(verbs),
            api_groups: owned(groups),
            resources: owned(resources),
            ..Default::default()
        }
    }

    /// A rule on non-resource URLs.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: owned(verbs),
            non_resource_urls: owned(urls),
            ..Default::default()
        }
    }
}

/// rbac/v1 AggregationRule.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.AggregationRule")]
#[schemars(
    description = "AggregationRule describes how to locate ClusterRoles to aggregate into the ClusterRole"
)]
pub struct AggregationRule {
    /// Selectors of the ClusterRoles whose rules are aggregated into this one. The
    /// controller overwrites the ClusterRole's rules with the union of theirs.
    pub cluster_role_selectors: Vec<LabelSelector>,
}

/// rbac/v1 Subject.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.Subject")]
#[schemars(
    description = "Subject contains a reference to the object or user identities a role binding applies to."
)]
pub struct Subject {
    /// User, Group or ServiceAccount.
    pub kind: String,
    /// "" for ServiceAccount subjects; rbac.authorization.k8s.io for User and Group.
    pub api_group: Option<String>,
    /// Name of the subject.
    pub name: String,
    /// Namespace of a ServiceAccount subject.
    pub namespace: Option<String>,
}

/// rbac/v1 RoleRef.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.RoleRef")]
#[schemars(description = "RoleRef contains information that points to the role being used")]
pub struct RoleRef {
    /// The group of the referenced role: rbac.authorization.k8s.io.
    pub api_group: String,
    /// Role or ClusterRole.
    pub kind: String,
    /// Name of the referenced role.
    pub name: String,
}

/// rbac/v1 Role.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.Role")]
#[schemars(
    description = "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a unit by a RoleBinding."
)]
pub struct Role {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// All the PolicyRules of this Role.
    pub rules: Vec<PolicyRule>,
}

/// rbac/v1 ClusterRole.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.ClusterRole")]
#[schemars(
    description = "ClusterRole is a cluster level, logical grouping of PolicyRules that can be referenced as a unit by a RoleBinding or ClusterRoleBinding."
)]
pub struct ClusterRole {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// All the PolicyRules of this ClusterRole.
    pub rules: Vec<PolicyRule>,
    /// How to build this ClusterRole's rules from other ClusterRoles. If set, the rules are
    /// controller-managed and direct changes to them are overwritten.
    pub aggregation_rule: Option<AggregationRule>,
}

/// rbac/v1 RoleBinding.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.RoleBinding")]
#[schemars(
    description = "RoleBinding references a role, but does not contain it. It can reference a Role in the same namespace or a ClusterRole in the global namespace. It adds who information via Subjects and namespace information by which namespace it exists in."
)]
pub struct RoleBinding {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The users, groups and service accounts the role applies to.
    pub subjects: Vec<Subject>,
    /// The Role in this namespace or the ClusterRole bound. Cannot be updated.
    pub role_ref: RoleRef,
}

/// rbac/v1 ClusterRoleBinding.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.rbac.v1.ClusterRoleBinding")]
#[schemars(
    description = "ClusterRoleBinding references a ClusterRole, but not contain it. It can reference a ClusterRole in the global namespace, and adds who information via Subject."
)]
pub struct ClusterRoleBinding {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The users, groups and service accounts the role applies to.
    pub subjects: Vec<Subject>,
    /// The ClusterRole bound. Cannot be updated.
    pub role_ref: RoleRef,
}

/// Kubernetes' ValidatePolicyRule.
fn validate_rules(errs: &mut Vec<FieldError>, rules: &[PolicyRule], namespaced: bool) {
    for (i, rule) in rules.iter().enumerate() {
        let at = |f: &str| format!("rules[{i}].{f}");
        if rule.verbs.is_empty() {
            errs.push(FieldError {
                reason: "FieldValueRequired".into(),
                field: at("verbs"),
                message: "Required value: verbs must contain at least one value".into(),
            });
        }
        if !rule.non_resource_urls.is_empty() {
            if namespaced {
                errs.push(FieldError::invalid(
                    at("nonResourceURLs"),
                    format!("{:?}", rule.non_resource_urls),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !rule.api_groups.is_empty() || !rule.resources.is_empty() {
                errs.push(FieldError::invalid(
                    at("nonResourceURLs"),
                    format!("{:?}", rule.non_resource_urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if rule.api_groups.is_empty() {
            errs.push(FieldError {
                reason: "FieldValueRequired".into(),
                field: at("apiGroups"),
                message: "Required value: resource rules must supply at least one api group".into(),
            });
        }
        if rule.resources.is_empty() {
            errs.push(FieldError {
                reason: "FieldValueRequired".into(),
                field: at("resources"),
                message: "Required value: resource rules must supply at least one resource".into(),
            });
        }
    }
}

/// Kubernetes' ValidateRoleBindingSubject and the roleRef checks.
fn validate_binding(
    errs: &mut Vec<FieldError>,
    subjects: &[Subject],
    role_ref: &RoleRef,
    role_kinds: &[&str],
    namespaced: bool,
) {
    if role_ref.api_group != GROUP {
        errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            &role_ref.api_group,
            &[GROUP],
        ));
    }
    if !role_kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported(
            "roleRef.kind",
            &role_ref.kind,
            role_kinds,
        ));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required("roleRef.name"));
    } else if let Err(why) = path_segment_name(&role_ref.name) {
        errs.push(FieldError::invalid("roleRef.name", &role_ref.name, why));
    }
    for (i, s) in subjects.iter().enumerate() {
        let at = |f: &str| format!("subjects[{i}].{f}");
        if s.name.is_empty() {
            errs.push(FieldError::required(at("name")));
        }
        match s.kind.as_str() {
            "ServiceAccount" => {
                if let Err(why) = validation::dns1123_subdomain(&s.name) {
                    if !s.name.is_empty() {
                        errs.push(FieldError::invalid(at("name"), &s.name, why));
                    }
                }
                if s.api_group.as_deref().is_some_and(|g| !g.is_empty()) {
                    errs.push(FieldError::not_supported(
                        at("apiGroup"),
                        s.api_group.as_deref().unwrap_or(""),
                        &[""],
                    ));
                }
                if !namespaced && s.namespace.as_deref().unwrap_or("").is_empty() {
                    errs.push(FieldError::required(at("namespace")));
                }
            }
            "User" | "Group" => {
                if s.api_group.as_deref() != Some(GROUP) {
                    errs.push(FieldError::not_supported(
                        at("apiGroup"),
                        s.api_group.as_deref().unwrap_or(""),
                        &[GROUP],
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                at("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

/// Kubernetes' ValidateRBACName (path.IsValidPathSegmentName): any name that can be a URL
/// path segment, so `system:node` is valid.
pub fn path_segment_name(name: &str) -> Result<(), String> {
    if name == "." || name == ".." {
        return Err(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            return Err(format!("may not contain '{bad}'"));
        }
    }
    Ok(())
}

/// Fills a subject's apiGroup as Kubernetes' SetDefaults_Subject does.
fn default_subjects(subjects: &mut [Subject]) {
    for s in subjects {
        if s.api_group.is_none() {
            s.api_group = Some(match s.kind.as_str() {
                "User" | "Group" => GROUP.to_string(),
                _ => String::new(),
            });
        }
    }
}

impl Resource for Role {
    const KIND: Kind = Kind::Role;
    crate::resource_basics!(Role);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&self.rules)
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Role);
        validate_rules(&mut errs, &self.rules, true);
        errs
    }
}

impl Resource for ClusterRole {
    const KIND: Kind = Kind::ClusterRole;
    crate::resource_basics!(ClusterRole);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(&self.rules, &self.aggregation_rule))
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::ClusterRole);
        validate_rules(&mut errs, &self.rules, false);
        if let Some(agg) = &self.aggregation_rule {
            for (i, sel) in agg.cluster_role_selectors.iter().enumerate() {
                errs.extend(validation::validate_label_selector(
                    sel,
                    &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                ));
            }
        }
        errs
    }
}

impl Resource for RoleBinding {
    const KIND: Kind = Kind::RoleBinding;
    crate::resource_basics!(RoleBinding);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(&self.subjects, &self.role_ref))
    }

    fn set_defaults(&mut self) {
        default_subjects(&mut self.subjects);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::RoleBinding);
        validate_binding(
            &mut errs,
            &self.subjects,
            &self.role_ref,
            &["Role", "ClusterRole"],
            true,
        );
        errs
    }
}

impl Resource for ClusterRoleBinding {
    const KIND: Kind = Kind::ClusterRoleBinding;
    crate::resource_basics!(ClusterRoleBinding);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(&self.subjects, &self.role_ref))
    }

    fn set_defaults(&mut self) {
        default_subjects(&mut self.subjects);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::ClusterRoleBinding);
        validate_binding(
            &mut errs,
            &self.subjects,
            &self.role_ref,
            &["ClusterRole"],
            false,
        );
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(kind: &str, subject_kind: &str) -> RoleBinding {
        let mut b = RoleBinding::default();
        b.metadata.name = "b".into();
        b.metadata.namespace = Some("default".into());
        b.role_ref = RoleRef {
            api_group: GROUP.into(),
            kind: kind.into(),
            name: "view".into(),
        };
        b.subjects.push(Subject {
            kind: subject_kind.into(),
            name: "alice".into(),
            ..Default::default()
        });
        b.set_defaults();
        b
    }

    #[test]
    fn bindings_refer_to_roles_and_name_known_subject_kinds() {
        assert!(binding("ClusterRole", "User").validate().is_empty());
        assert!(binding("Role", "ServiceAccount").validate().is_empty());
        let errs = binding("Pod", "Robot").validate();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["roleRef.kind", "subjects[0].kind"]);
        let mut crb = ClusterRoleBinding {
            role_ref: binding("Role", "User").role_ref,
            subjects: binding("Role", "ServiceAccount").subjects,
            ..Default::default()
        };
        crb.metadata.name = "system:x".into();
        let fields: Vec<String> = crb.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["roleRef.kind", "subjects[0].namespace"]);
    }

    #[test]
    fn rules_need_verbs_and_resources_or_urls() {
        let mut role = Role::default();
        role.metadata.name = "r".into();
        role.rules
            .push(PolicyRule::resources(&["get"], &[""], &["pods"]));
        assert!(role.validate().is_empty());
        role.rules.push(PolicyRule::default());
        role.rules.push(PolicyRule::urls(&["get"], &["/healthz"]));
        let errs = role.validate();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rules[1].verbs",
                "rules[1].apiGroups",
                "rules[1].resources",
                "rules[2].nonResourceURLs"
            ]
        );
        let mut cr = ClusterRole::default();
        cr.metadata.name = "system:discovery".into();
        cr.rules.push(PolicyRule::urls(&["get"], &["/healthz"]));
        assert!(cr.validate().is_empty(), "{:?}", cr.validate());
    }
}
