//! admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and
//! ValidatingAdmissionPolicyBinding (docs/design/admission.md §3): the models, kube's defaults
//! (`SetDefaults_ValidatingAdmissionPolicySpec`, `SetDefaults_MatchResources`,
//! `SetDefaults_Rule`) and kube 1.32's validation (`ValidateValidatingAdmissionPolicy`,
//! `ValidateValidatingAdmissionPolicyBinding`) with its field paths and messages.
//!
//! Not served yet: the evaluation (`control::admission::policy`) is wired into the request
//! path first. This crate has no CEL engine: the expressions are compiled by a checker the
//! server supplies, either per call ([`ValidatingAdmissionPolicy::validate_with`]) or once
//! for the process ([`set_expression_checker`], which [`ValidatingAdmissionPolicy::validate`]
//! uses; without one, expressions are only checked for presence).
//!
//! The metadata (`metadata.name` a DNS subdomain) is checked with the other kinds' metadata
//! when the kinds are served; only the spec and status are checked here.

use std::collections::HashSet;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::admissionregistration::{MatchCondition, RuleWithOperations};
use crate::meta::{LabelSelector, ObjectMeta};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// ValidatingAdmissionPolicy: CEL validations of the requests its bindings apply it to.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy")]
pub struct ValidatingAdmissionPolicy {
    pub metadata: ObjectMeta,
    /// Specification of the desired behavior of the ValidatingAdmissionPolicy.
    pub spec: ValidatingAdmissionPolicySpec,
    /// The status of the policy: how its expressions type-checked.
    pub status: Option<ValidatingAdmissionPolicyStatus>,
}

/// ValidatingAdmissionPolicySpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec")]
pub struct ValidatingAdmissionPolicySpec {
    /// The kind of the resources the bindings' `paramRef` names, read as `params`.
    pub param_kind: Option<ParamKind>,
    /// The resources the policy validates (required, with at least one resource rule).
    pub match_constraints: Option<MatchResources>,
    /// CEL expressions that must all be true.
    pub validations: Vec<Validation>,
    /// `Fail` (the default) or `Ignore`: what an evaluation error or a misconfiguration means.
    pub failure_policy: Option<String>,
    /// CEL expressions whose values are added to the request's audit event.
    pub audit_annotations: Vec<AuditAnnotation>,
    /// CEL conditions that must all hold for the policy to apply.
    pub match_conditions: Vec<MatchCondition>,
    /// Named CEL expressions the other expressions read as `variables.NAME`.
    pub variables: Vec<Variable>,
}

/// ParamKind: the `apiVersion` and `kind` of the policy's parameters.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ParamKind")]
pub struct ParamKind {
    /// `group/version` (`v1` for the core group).
    pub api_version: String,
    /// The kind (`ConfigMap`).
    pub kind: String,
}

/// MatchResources: which requests a policy (or a binding) applies to.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.MatchResources")]
pub struct MatchResources {
    /// The labels the object's namespace must have (a Namespace: its own).
    pub namespace_selector: Option<LabelSelector>,
    /// The labels the object (or the old object) must have.
    pub object_selector: Option<LabelSelector>,
    /// The operations and resources matched: any one rule.
    pub resource_rules: Vec<NamedRuleWithOperations>,
    /// The operations and resources never matched, whatever the other rules say.
    pub exclude_resource_rules: Vec<NamedRuleWithOperations>,
    /// `Exact` or `Equivalent` (the default).
    pub match_policy: Option<String>,
}

/// NamedRuleWithOperations: a [`RuleWithOperations`] limited to some object names.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations")]
pub struct NamedRuleWithOperations {
    /// The names the rule applies to; empty is every name.
    pub resource_names: Vec<String>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    pub operations: Vec<String>,
    /// The API groups the resources belong to; `*` is all groups.
    pub api_groups: Vec<String>,
    /// The API versions the resources belong to; `*` is all versions.
    pub api_versions: Vec<String>,
    /// Resources, with `/subresource` or `*`, `*/*`, `*/status`, `pods/*`.
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (the default).
    pub scope: Option<String>,
}

impl NamedRuleWithOperations {
    /// The rule without its names, as the webhooks' matcher takes it.
    pub fn rule(&self) -> RuleWithOperations {
        RuleWithOperations {
            operations: self.operations.clone(),
            api_groups: self.api_groups.clone(),
            api_versions: self.api_versions.clone(),
            resources: self.resources.clone(),
            scope: self.scope.clone(),
        }
    }
}

/// Validation: one CEL expression that must evaluate to true.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.Validation")]
pub struct Validation {
    /// The CEL expression (`object.spec.replicas <= 5`).
    pub expression: String,
    /// The message of a failure (default: `failed expression: EXPRESSION`).
    pub message: String,
    /// `Unauthorized`, `Forbidden`, `Invalid` (the default) or `RequestEntityTooLarge`.
    pub reason: Option<String>,
    /// A CEL expression giving the message of a failure (a string).
    pub message_expression: String,
}

/// AuditAnnotation: an audit annotation `POLICY/KEY` with a CEL expression's value.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.AuditAnnotation")]
pub struct AuditAnnotation {
    /// The key (a qualified name once prefixed with the policy's name).
    pub key: String,
    /// A CEL expression giving a string (published) or null (left out).
    pub value_expression: String,
}

/// Variable: a named CEL expression, read by the others as `variables.NAME`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.Variable")]
pub struct Variable {
    /// A CEL identifier.
    pub name: String,
    pub expression: String,
}

/// ValidatingAdmissionPolicyStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus")]
pub struct ValidatingAdmissionPolicyStatus {
    /// The generation the controller observed.
    pub observed_generation: Option<i64>,
    /// The results of type-checking each expression (skiff's CEL is dynamically typed and
    /// leaves it empty).
    pub type_checking: Option<TypeChecking>,
    /// The policy's conditions.
    pub conditions: Vec<Condition>,
}

/// TypeChecking: the warnings of type-checking a policy's expressions.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.TypeChecking")]
pub struct TypeChecking {
    pub expression_warnings: Vec<ExpressionWarning>,
}

/// ExpressionWarning: one expression's type-checking warning.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ExpressionWarning")]
pub struct ExpressionWarning {
    /// The path of the expression (`spec.validations[0].expression`).
    pub field_ref: String,
    pub warning: String,
}

/// metav1.Condition (one type for the whole API, as its OpenAPI has one definition).
pub use crate::policy::Condition;

/// ValidatingAdmissionPolicyBinding: applies a policy, with parameters, to some requests.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding")]
pub struct ValidatingAdmissionPolicyBinding {
    pub metadata: ObjectMeta,
    /// Specification of the desired behavior of the ValidatingAdmissionPolicyBinding.
    pub spec: ValidatingAdmissionPolicyBindingSpec,
}

/// ValidatingAdmissionPolicyBindingSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec")]
pub struct ValidatingAdmissionPolicyBindingSpec {
    /// The name of the ValidatingAdmissionPolicy bound.
    pub policy_name: String,
    /// The parameters: one object by name, or those a selector picks.
    pub param_ref: Option<ParamRef>,
    /// Narrows the requests the policy's constraints match (only ever narrower).
    pub match_resources: Option<MatchResources>,
    /// `Deny`, `Warn` and/or `Audit`: what a failed validation does.
    pub validation_actions: Vec<String>,
}

/// ParamRef: the parameter objects of a binding.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ParamRef")]
pub struct ParamRef {
    /// One parameter object's name (exclusive with `selector`).
    pub name: String,
    /// The namespace of the parameters (a namespaced param kind; the request's when empty).
    pub namespace: String,
    /// The labels of the parameter objects (exclusive with `name`; `{}` is all of them).
    pub selector: Option<LabelSelector>,
    /// `Deny` or `Allow`: what a binding whose parameters are missing does (required).
    pub parameter_not_found_action: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Defaults.

impl MatchResources {
    /// kube's `SetDefaults_MatchResources` and `SetDefaults_Rule`: Equivalent, `{}`
    /// selectors, scope `*`.
    pub fn set_defaults(&mut self) {
        self.match_policy.get_or_insert_with(|| "Equivalent".into());
        self.namespace_selector.get_or_insert_with(Default::default);
        self.object_selector.get_or_insert_with(Default::default);
        for r in self
            .resource_rules
            .iter_mut()
            .chain(self.exclude_resource_rules.iter_mut())
        {
            r.scope.get_or_insert_with(|| "*".into());
        }
    }
}

impl Resource for ValidatingAdmissionPolicy {
    const KIND: Kind = Kind::ValidatingAdmissionPolicy;
    crate::resource_basics!(ValidatingAdmissionPolicy);

    /// kube's defaults: failurePolicy Fail, and those of the match constraints.
    fn set_defaults(&mut self) {
        self.spec
            .failure_policy
            .get_or_insert_with(|| "Fail".into());
        if let Some(m) = self.spec.match_constraints.as_mut() {
            m.set_defaults();
        }
    }

    /// kube's `ValidateValidatingAdmissionPolicy`: the name, then the spec, the expressions
    /// compiled by the process's checker ([`set_expression_checker`]) when one is set.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Self::KIND);
        errs.extend(self.validate_with(&process_checker));
        errs
    }

    /// kube's `ValidateValidatingAdmissionPolicyStatusUpdate`: the status alone.
    fn validate_status(&self) -> Vec<FieldError> {
        self.status
            .as_ref()
            .map(validate_status)
            .unwrap_or_default()
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }

    fn clear_status(&mut self) {
        self.status = None;
    }
}

impl ValidatingAdmissionPolicy {
    /// Whether an evaluation error or a misconfiguration lets the request through.
    pub fn ignores_failures(&self) -> bool {
        self.spec.failure_policy.as_deref() == Some("Ignore")
    }

    /// kube's `ValidateValidatingAdmissionPolicy` (of the spec), each expression compiled by
    /// `check` (an error is kube's `compilation failed: ...` detail, reported as an invalid
    /// value of the expression).
    pub fn validate_with(
        &self,
        check: &dyn Fn(&str, &ExpressionEnv<'_>) -> Result<(), String>,
    ) -> Vec<FieldError> {
        let mut errs = validate_spec(&self.metadata, &self.spec, check);
        if let Some(status) = &self.status {
            errs.extend(validate_status(status));
        }
        errs
    }
}

impl Resource for ValidatingAdmissionPolicyBinding {
    const KIND: Kind = Kind::ValidatingAdmissionPolicyBinding;
    crate::resource_basics!(ValidatingAdmissionPolicyBinding);

    /// kube's defaults: those of the match resources, when given.
    fn set_defaults(&mut self) {
        if let Some(m) = self.spec.match_resources.as_mut() {
            m.set_defaults();
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Self::KIND);
        errs.extend(self.validate_spec());
        errs
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }
}

impl ValidatingAdmissionPolicyBinding {
    /// kube's `ValidateValidatingAdmissionPolicyBinding` (of the spec).
    pub fn validate_spec(&self) -> Vec<FieldError> {
        let spec = &self.spec;
        let mut errs = Vec::new();
        if spec.policy_name.is_empty() {
            errs.push(FieldError::required("spec.policyName"));
        } else if let Err(why) = validation::dns1123_subdomain(&spec.policy_name) {
            errs.push(FieldError::invalid(
                "spec.policyName",
                &spec.policy_name,
                why,
            ));
        }
        if let Some(p) = &spec.param_ref {
            errs.extend(validate_param_ref(p, "spec.paramRef"));
        }
        if let Some(m) = &spec.match_resources {
            // kube's path, misspelt as it is there.
            errs.extend(validate_match_resources(m, "spec.matchResouces"));
        }
        errs.extend(validate_validation_actions(
            &spec.validation_actions,
            "spec.validationActions",
        ));
        errs
    }
}

// ---------------------------------------------------------------------------------------
// The expression checker.

/// What an expression may read, for the checker that compiles it: `object`, `oldObject`,
/// `request` and `namespaceObject` always, and these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpressionEnv<'a> {
    /// `params` (the policy has a paramKind).
    pub params: bool,
    /// `authorizer` and `authorizer.requestResource` (all but message expressions).
    pub authorizer: bool,
    /// `variables.NAME` for these names (the variables declared before it, for a variable);
    /// `None`: no `variables` at all (a policy without variables, match conditions).
    pub variables: Option<&'a [&'a str]>,
}

/// The process-wide expression checker: `(expression, environment) -> Result<(), detail>`.
pub type ExpressionChecker = fn(&str, &ExpressionEnv<'_>) -> Result<(), String>;

static CHECKER: OnceLock<ExpressionChecker> = OnceLock::new();

/// The process's checker, or one that accepts everything when none is set.
pub(crate) fn process_checker(expr: &str, env: &ExpressionEnv<'_>) -> Result<(), String> {
    match CHECKER.get() {
        Some(check) => check(expr, env),
        None => Ok(()),
    }
}

/// Sets the checker [`ValidatingAdmissionPolicy::validate`] compiles expressions with (the
/// server's CEL engine); the first call wins.
pub fn set_expression_checker(check: ExpressionChecker) {
    let _ = CHECKER.set(check);
}

// ---------------------------------------------------------------------------------------
// Validation.

const MAX_AUDIT_ANNOTATIONS: usize = 20;
const MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH: usize = 5 * 1024;

fn validate_spec(
    meta: &ObjectMeta,
    spec: &ValidatingAdmissionPolicySpec,
    check: &dyn Fn(&str, &ExpressionEnv<'_>) -> Result<(), String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match &spec.failure_policy {
        None => errs.push(FieldError::required("spec.failurePolicy")),
        Some(f) if f != "Fail" && f != "Ignore" => errs.push(FieldError::not_supported(
            "spec.failurePolicy",
            f,
            &["Fail", "Ignore"],
        )),
        Some(_) => {}
    }
    let params = spec.param_kind.is_some();
    if let Some(pk) = &spec.param_kind {
        errs.extend(validate_param_kind(pk, "spec.paramKind"));
    }
    match &spec.match_constraints {
        None => errs.push(FieldError::required("spec.matchConstraints")),
        Some(m) => {
            errs.extend(validate_match_resources(m, "spec.matchConstraints"));
            if m.resource_rules.is_empty() {
                errs.push(FieldError::required("spec.matchConstraints.resourceRules"));
            }
        }
    }
    errs.extend(validate_match_conditions(
        &spec.match_conditions,
        params,
        "spec.matchConditions",
        check,
    ));
    let names: Vec<&str> = spec.variables.iter().map(|v| v.name.as_str()).collect();
    for (i, v) in spec.variables.iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        if v.name.trim().is_empty() {
            errs.push(FieldError::required_msg(
                format!("{at}.name"),
                "name is not specified",
            ));
        } else if !is_cel_identifier(&v.name) {
            errs.push(FieldError::invalid(
                format!("{at}.name"),
                &v.name,
                "name is not a valid CEL identifier",
            ));
        }
        if v.expression.trim().is_empty() {
            errs.push(FieldError::required_msg(
                format!("{at}.expression"),
                "expression is not specified",
            ));
        } else {
            let env = ExpressionEnv {
                params,
                authorizer: true,
                variables: Some(&names[..i]),
            };
            if let Err(detail) = check(&v.expression, &env) {
                errs.push(compile_error(
                    format!("{at}.expression"),
                    &v.expression,
                    detail,
                ));
            }
        }
    }
    let variables = (!spec.variables.is_empty()).then_some(&names[..]);
    if spec.validations.is_empty() && spec.audit_annotations.is_empty() {
        for field in ["spec.validations", "spec.auditAnnotations"] {
            errs.push(FieldError::required_msg(
                field,
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        return errs;
    }
    for (i, v) in spec.validations.iter().enumerate() {
        errs.extend(validate_validation(
            v,
            &format!("spec.validations[{i}]"),
            params,
            variables,
            check,
        ));
    }
    if spec.audit_annotations.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::invalid_raw(
            "spec.auditAnnotations",
            go_audit_annotations(&spec.audit_annotations),
            format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let mut keys = HashSet::new();
    for (i, a) in spec.audit_annotations.iter().enumerate() {
        let at = format!("spec.auditAnnotations[{i}]");
        if meta.name.is_empty() {
            errs.push(FieldError::invalid(
                format!("{at}.key"),
                &a.key,
                "requires metadata.name be non-empty",
            ));
        } else {
            let qualified = format!("{}/{}", meta.name, a.key);
            if let Err(why) = validation::qualified_name(&qualified) {
                errs.push(FieldError::invalid(format!("{at}.key"), &qualified, why));
            }
        }
        let value = a.value_expression.trim();
        if value.is_empty() {
            errs.push(FieldError::required_msg(
                format!("{at}.valueExpression"),
                "valueExpression is not specified",
            ));
        } else if value.len() > MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH {
            errs.push(FieldError::required_msg(
                format!("{at}.valueExpression"),
                format!(
                    "must not exceed {MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH} bytes in length"
                ),
            ));
        } else {
            let env = ExpressionEnv {
                params,
                authorizer: true,
                variables,
            };
            if let Err(detail) = check(value, &env) {
                errs.push(compile_error(
                    format!("{at}.valueExpression"),
                    &a.value_expression,
                    detail,
                ));
            }
        }
        if !keys.insert(a.key.as_str()) {
            errs.push(FieldError::duplicate(format!("{at}.key"), &a.key));
        }
    }
    errs
}

fn validate_validation(
    v: &Validation,
    at: &str,
    params: bool,
    variables: Option<&[&str]>,
    check: &dyn Fn(&str, &ExpressionEnv<'_>) -> Result<(), String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if v.expression.trim().is_empty() {
        errs.push(FieldError::required_msg(
            format!("{at}.expression"),
            "expression is not specified",
        ));
    } else {
        let env = ExpressionEnv {
            params,
            authorizer: true,
            variables,
        };
        if let Err(detail) = check(&v.expression, &env) {
            errs.push(compile_error(
                format!("{at}.expression"),
                &v.expression,
                detail,
            ));
        }
    }
    let message_expression = v.message_expression.trim();
    if !v.message_expression.is_empty() && message_expression.is_empty() {
        errs.push(FieldError::invalid_raw(
            format!("{at}.messageExpression"),
            go_quote(&v.message_expression),
            "must be non-empty if specified",
        ));
    } else if !message_expression.is_empty() {
        let env = ExpressionEnv {
            params,
            authorizer: false,
            variables,
        };
        if let Err(detail) = check(&v.message_expression, &env) {
            errs.push(compile_error(
                format!("{at}.messageExpression"),
                &v.message_expression,
                detail,
            ));
        }
    }
    let message = v.message.trim();
    if !v.message.is_empty() && message.is_empty() {
        errs.push(FieldError::invalid_raw(
            format!("{at}.message"),
            go_quote(&v.message),
            "message must be non-empty if specified",
        ));
    } else if message.contains(['\n', '\r']) {
        errs.push(FieldError::invalid_raw(
            format!("{at}.message"),
            go_quote(&v.message),
            "message must not contain line breaks",
        ));
    }
    if let Some(r) = &v.reason {
        const REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
        if !REASONS.contains(&r.as_str()) {
            errs.push(FieldError::not_supported(
                format!("{at}.reason"),
                r,
                REASONS,
            ));
        }
    }
    errs
}

/// kube's `validateMatchConditions` (of a policy, or of a webhook with `params: false`).
pub(crate) fn validate_match_conditions(
    conditions: &[MatchCondition],
    params: bool,
    at: &str,
    check: &dyn Fn(&str, &ExpressionEnv<'_>) -> Result<(), String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if conditions.len() > 64 {
        errs.push(FieldError::too_many(at, conditions.len(), 64));
    }
    let mut names = HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let expression = c.expression.trim();
        if expression.is_empty() {
            errs.push(FieldError::required(format!("{here}.expression")));
        } else {
            let env = ExpressionEnv {
                params,
                authorizer: true,
                variables: None,
            };
            if let Err(detail) = check(expression, &env) {
                errs.push(compile_error(
                    format!("{here}.expression"),
                    expression,
                    detail,
                ));
            }
        }
        if c.name.is_empty() {
            errs.push(FieldError::required(format!("{here}.name")));
        } else if let Err(why) = validation::qualified_name(&c.name) {
            errs.push(FieldError::invalid(format!("{here}.name"), &c.name, why));
        }
        if !c.name.is_empty() && !names.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(format!("{here}.name"), &c.name));
        }
    }
    errs
}

fn validate_param_kind(pk: &ParamKind, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let field = format!("{at}.apiVersion");
    if pk.api_version.is_empty() {
        errs.push(FieldError::required(&field));
    } else {
        let gv = &pk.api_version;
        let parsed = match gv.matches('/').count() {
            _ if gv == "/" => Some(("", "")),
            0 => Some(("", gv.as_str())),
            1 => gv.split_once('/'),
            _ => None,
        };
        match parsed {
            None => errs.push(FieldError::invalid(
                &field,
                gv,
                format!("unexpected GroupVersion string: {gv}"),
            )),
            Some((group, version)) => {
                if !group.is_empty() {
                    if let Err(why) = validation::dns1123_subdomain(group) {
                        errs.push(FieldError::invalid(&field, group, why));
                    }
                }
                if version.is_empty() {
                    errs.push(FieldError::invalid(&field, gv, "version must be specified"));
                } else if let Err(why) = validation::dns1035_label(version) {
                    errs.push(FieldError::invalid(&field, version, why));
                }
            }
        }
    }
    if pk.kind.is_empty() {
        errs.push(FieldError::required(format!("{at}.kind")));
    } else if let Err(why) = validation::dns1035_label(&pk.kind.to_lowercase()) {
        errs.push(FieldError::invalid(
            format!("{at}.kind"),
            &pk.kind,
            format!("may have mixed case, but should otherwise match: {why}"),
        ));
    }
    errs
}

fn validate_match_resources(m: &MatchResources, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match &m.match_policy {
        None => errs.push(FieldError::required(format!("{at}.matchPolicy"))),
        Some(p) if p != "Equivalent" && p != "Exact" => errs.push(FieldError::not_supported(
            format!("{at}.matchPolicy"),
            p,
            &["Equivalent", "Exact"],
        )),
        Some(_) => {}
    }
    for (field, sel) in [
        ("namespaceSelector", &m.namespace_selector),
        ("objectSelector", &m.object_selector),
    ] {
        match sel {
            None => errs.push(FieldError::required(format!("{at}.{field}"))),
            Some(sel) => errs.extend(validation::validate_label_selector(
                sel,
                &format!("{at}.{field}"),
            )),
        }
    }
    for (field, rules) in [
        ("resourceRules", &m.resource_rules),
        ("excludeResourceRules", &m.exclude_resource_rules),
    ] {
        for (i, r) in rules.iter().enumerate() {
            errs.extend(validate_named_rule(r, &format!("{at}.{field}[{i}]")));
        }
    }
    errs
}

fn validate_named_rule(r: &NamedRuleWithOperations, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = HashSet::new();
    for (i, n) in r.resource_names.iter().enumerate() {
        let here = format!("{at}.resourceNames[{i}]");
        for why in path_segment_name(n) {
            errs.push(FieldError::invalid(&here, n, why));
        }
        if !names.insert(n.as_str()) {
            errs.push(FieldError::duplicate(&here, n));
        }
    }
    errs.extend(r.rule().validate(at));
    errs
}

fn validate_param_ref(p: &ParamRef, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !p.name.is_empty() {
        for why in path_segment_name(&p.name) {
            errs.push(FieldError::invalid(format!("{at}.name"), &p.name, why));
        }
        if p.selector.is_some() {
            errs.push(FieldError::forbidden(
                format!("{at}.name"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if let Some(sel) = &p.selector {
        errs.extend(validation::validate_label_selector(
            sel,
            &format!("{at}.selector"),
        ));
        if !p.name.is_empty() {
            errs.push(FieldError::forbidden(
                format!("{at}.selector"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if p.name.is_empty() && p.selector.is_none() {
        errs.push(FieldError::required_msg(
            at,
            "one of name or selector must be specified",
        ));
    }
    match p.parameter_not_found_action.as_deref() {
        None | Some("") => errs.push(FieldError::required(format!(
            "{at}.parameterNotFoundAction"
        ))),
        Some("Deny") | Some("Allow") => {}
        Some(other) => errs.push(FieldError::not_supported(
            format!("{at}.parameterNotFoundAction"),
            other,
            &["Deny", "Allow"],
        )),
    }
    errs
}

fn validate_validation_actions(actions: &[String], at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, a) in actions.iter().enumerate() {
        const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
        if !ACTIONS.contains(&a.as_str()) {
            errs.push(FieldError::not_supported(format!("{at}[{i}]"), a, ACTIONS));
        }
        if !seen.insert(a.as_str()) {
            errs.push(FieldError::duplicate(format!("{at}[{i}]"), a));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(FieldError::invalid_raw(
            at,
            go_slice("admissionregistration.ValidationAction", actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required_msg(
            at,
            "at least one validation action is required",
        ));
    }
    errs
}

fn validate_status(status: &ValidatingAdmissionPolicyStatus) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(tc) = &status.type_checking {
        for (i, w) in tc.expression_warnings.iter().enumerate() {
            let at = format!("status.typeChecking.expressionWarnings[{i}]");
            if w.warning.is_empty() {
                errs.push(FieldError::required(format!("{at}.warning")));
            }
            if w.field_ref.trim().is_empty() {
                errs.push(FieldError::required(format!("{at}.fieldRef")));
            }
        }
    }
    // metav1 ValidateConditions.
    let mut types = HashSet::new();
    for (i, c) in status.conditions.iter().enumerate() {
        let at = format!("status.conditions[{i}]");
        if c.type_.is_empty() {
            errs.push(FieldError::required(format!("{at}.type")));
        } else if let Err(why) = validation::qualified_name(&c.type_) {
            errs.push(FieldError::invalid(format!("{at}.type"), &c.type_, why));
        }
        if !c.type_.is_empty() && !types.insert(c.type_.as_str()) {
            errs.push(FieldError::duplicate(format!("{at}.type"), &c.type_));
        }
        const STATUSES: &[&str] = &["False", "True", "Unknown"];
        if !STATUSES.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                format!("{at}.status"),
                &c.status,
                STATUSES,
            ));
        }
        if let Some(g) = c.observed_generation.filter(|g| *g < 0) {
            errs.push(FieldError::invalid_raw(
                format!("{at}.observedGeneration"),
                g,
                "must be greater than or equal to zero",
            ));
        }
        if c.last_transition_time.is_none() {
            errs.push(FieldError::required_msg(
                format!("{at}.lastTransitionTime"),
                "must be set",
            ));
        }
        if c.reason.is_empty() {
            errs.push(FieldError::required_msg(
                format!("{at}.reason"),
                "must be set",
            ));
        } else if c.reason.len() > 1024 {
            errs.push(FieldError::too_long(format!("{at}.reason"), 1024));
        }
        if c.message.len() > 32768 {
            errs.push(FieldError::too_long(format!("{at}.message"), 32768));
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Helpers.

/// A compilation error as kube reports it: the expression as an invalid value.
fn compile_error(field: String, expression: &str, detail: String) -> FieldError {
    FieldError::invalid_raw(field, go_quote(expression), detail)
}

/// kube's `IsValidPathSegmentName`: every reason a name cannot be a URL path segment.
fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// CEL's identifiers: `[_a-zA-Z][_a-zA-Z0-9]*`, less the reserved words.
pub fn is_cel_identifier(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&name)
}

/// Go's `%q` of a string (`strconv.Quote`), as kube prints a string value in messages.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` of a slice of strings of type `elem`: `[]string{"a", "b"}`.
pub(crate) fn go_slice(elem: &str, v: &[String]) -> String {
    let quoted: Vec<String> = v.iter().map(|s| go_quote(s)).collect();
    format!("[]{elem}{{{}}}", quoted.join(", "))
}

/// Go's `%#v` of the audit annotations, as kube prints them in its message.
fn go_audit_annotations(v: &[AuditAnnotation]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|a| {
            format!(
                "admissionregistration.AuditAnnotation{{Key:{}, ValueExpression:{}}}",
                go_quote(&a.key),
                go_quote(&a.value_expression)
            )
        })
        .collect();
    format!(
        "[]admissionregistration.AuditAnnotation{{{}}}",
        items.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(spec: serde_json::Value) -> ValidatingAdmissionPolicy {
        serde_json::from_value(
            json!({"metadata": {"name": "demo-policy.example.com"}, "spec": spec}),
        )
        .expect("decodes")
    }

    fn binding(spec: serde_json::Value) -> ValidatingAdmissionPolicyBinding {
        serde_json::from_value(json!({"metadata": {"name": "demo-binding"}, "spec": spec}))
            .expect("decodes")
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    fn assert_has(errs: &[FieldError], want: &str) {
        let got = messages(errs);
        assert!(got.iter().any(|g| g == want), "{want}\nnot in {got:#?}");
    }

    /// A checker standing in for the server's CEL: `bad` does not compile, and `params`
    /// needs a paramKind.
    fn check(expr: &str, env: &ExpressionEnv<'_>) -> Result<(), String> {
        if expr.contains("bad") {
            return Err("compilation failed: ERROR: <input>:1:1: bad".into());
        }
        if expr.contains("params") && !env.params {
            return Err("compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')".into());
        }
        Ok(())
    }

    const DEMO: &str = r#"{
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]
        },
        "validations": [{"expression": "object.spec.replicas <= 5"}]
    }"#;

    #[test]
    fn the_documented_policy_is_valid_once_defaulted() {
        let mut p = policy(serde_json::from_str(DEMO).unwrap());
        // Before defaulting, the match constraints miss what the defaults fill in.
        assert_has(
            &p.validate_with(&check),
            "spec.matchConstraints.matchPolicy: Required value",
        );
        p.set_defaults();
        assert!(
            p.validate_with(&check).is_empty(),
            "{:?}",
            messages(&p.validate_with(&check))
        );
        let m = p.spec.match_constraints.as_ref().unwrap();
        assert_eq!(m.match_policy.as_deref(), Some("Equivalent"));
        assert_eq!(m.namespace_selector, Some(LabelSelector::default()));
        assert_eq!(m.object_selector, Some(LabelSelector::default()));
        assert_eq!(m.resource_rules[0].scope.as_deref(), Some("*"));
        let mut unset = policy(json!({}));
        unset.set_defaults();
        assert_eq!(unset.spec.failure_policy.as_deref(), Some("Fail"));
        assert!(unset.spec.match_constraints.is_none());
        // It round-trips as kube writes it.
        let back = serde_json::to_value(&p).unwrap();
        assert_eq!(
            back["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
            json!(["deployments"])
        );
    }

    #[test]
    fn policy_refusals_in_kubes_words() {
        let mut p = policy(json!({
            "failurePolicy": "Sometimes",
            "paramKind": {"apiVersion": "a/b/c", "kind": "Not_A_Kind"},
            "matchConstraints": {
                "matchPolicy": "Fuzzy",
                "resourceRules": [{"resourceNames": ["a/b", "x", "x"], "apiGroups": ["*", "apps"], "apiVersions": ["v1"], "operations": ["CREATE", "*"], "resources": ["pods"], "scope": "Somewhere"}],
            },
            "validations": [
                {"expression": ""},
                {"expression": "object.bad", "message": "two\nlines", "reason": "Teapot", "messageExpression": "  "},
                {"expression": "params.max > 1"},
            ],
            "matchConditions": [{"name": "", "expression": "bad"}, {"name": "x y", "expression": "true"}],
            "variables": [{"name": "in", "expression": ""}, {"name": "ok", "expression": "bad"}],
        }));
        p.spec
            .match_constraints
            .as_mut()
            .unwrap()
            .namespace_selector = Some(Default::default());
        p.spec.match_constraints.as_mut().unwrap().object_selector = Some(Default::default());
        let errs = p.validate_with(&check);
        for want in [
            r#"spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#,
            r#"spec.paramKind.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#,
            r#"spec.paramKind.kind: Invalid value: "Not_A_Kind": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"#,
            r#"spec.matchConstraints.matchPolicy: Unsupported value: "Fuzzy": supported values: "Equivalent", "Exact""#,
            r#"spec.matchConstraints.resourceRules[0].resourceNames[0]: Invalid value: "a/b": may not contain '/'"#,
            r#"spec.matchConstraints.resourceRules[0].resourceNames[2]: Duplicate value: "x""#,
            r#"spec.matchConstraints.resourceRules[0].operations: Invalid value: []admissionregistration.OperationType{"CREATE", "*"}: if '*' is present, must not specify other operations"#,
            r#"spec.matchConstraints.resourceRules[0].apiGroups: Invalid value: []string{"*", "apps"}: if '*' is present, must not specify other API groups"#,
            r#"spec.matchConstraints.resourceRules[0].scope: Unsupported value: "Somewhere": supported values: "*", "Cluster", "Namespaced""#,
            "spec.matchConditions[0].expression: Invalid value: \"bad\": compilation failed: ERROR: <input>:1:1: bad",
            "spec.matchConditions[0].name: Required value",
            r#"spec.matchConditions[1].name: Invalid value: "x y": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc')"#,
            r#"spec.variables[0].name: Invalid value: "in": name is not a valid CEL identifier"#,
            "spec.variables[0].expression: Required value: expression is not specified",
            "spec.variables[1].expression: Invalid value: \"bad\": compilation failed: ERROR: <input>:1:1: bad",
            "spec.validations[0].expression: Required value: expression is not specified",
            "spec.validations[1].expression: Invalid value: \"object.bad\": compilation failed: ERROR: <input>:1:1: bad",
            r#"spec.validations[1].messageExpression: Invalid value: "  ": must be non-empty if specified"#,
            r#"spec.validations[1].message: Invalid value: "two\nlines": message must not contain line breaks"#,
            r#"spec.validations[1].reason: Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge""#,
        ] {
            assert_has(&errs, want);
        }
        // With a paramKind, `params` compiles.
        assert!(!messages(&errs)
            .iter()
            .any(|m| m.starts_with("spec.validations[2]")));
        let mut q = p.clone();
        q.spec.param_kind = None;
        assert_has(
            &q.validate_with(&check),
            "spec.validations[2].expression: Invalid value: \"params.max > 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')",
        );
    }

    #[test]
    fn required_parts_of_a_policy() {
        let p = policy(
            json!({"matchConstraints": {"matchPolicy": "Exact", "namespaceSelector": {}, "objectSelector": {}}}),
        );
        let errs = p.validate_with(&check);
        for want in [
            "spec.failurePolicy: Required value",
            "spec.matchConstraints.resourceRules: Required value",
            "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
            "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
        ] {
            assert_has(&errs, want);
        }
        let p = policy(json!({"failurePolicy": "Fail"}));
        assert_has(
            &p.validate_with(&check),
            "spec.matchConstraints: Required value",
        );
    }

    #[test]
    fn audit_annotations() {
        let mut p = policy(serde_json::from_str(DEMO).unwrap());
        p.set_defaults();
        p.spec.audit_annotations = vec![
            AuditAnnotation {
                key: "high-replica-count".into(),
                value_expression:
                    "'Deployment spec.replicas set to ' + string(object.spec.replicas)".into(),
            },
            AuditAnnotation {
                key: "high-replica-count".into(),
                value_expression: " ".into(),
            },
            AuditAnnotation {
                key: "a b".into(),
                value_expression: "x".repeat(5121),
            },
        ];
        let errs = p.validate_with(&check);
        assert_has(
            &errs,
            r#"spec.auditAnnotations[1].key: Duplicate value: "high-replica-count""#,
        );
        assert_has(&errs, "spec.auditAnnotations[1].valueExpression: Required value: valueExpression is not specified");
        assert_has(&errs, "spec.auditAnnotations[2].valueExpression: Required value: must not exceed 5120 bytes in length");
        assert_has(
            &errs,
            r#"spec.auditAnnotations[2].key: Invalid value: "demo-policy.example.com/a b": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc')"#,
        );
        assert_eq!(errs.len(), 4, "{:?}", messages(&errs));
        p.metadata.name.clear();
        assert_has(
            &p.validate_with(&check),
            r#"spec.auditAnnotations[0].key: Invalid value: "high-replica-count": requires metadata.name be non-empty"#,
        );
        p.spec.audit_annotations = (0..21)
            .map(|i| AuditAnnotation {
                key: format!("k{i}"),
                value_expression: "'v'".into(),
            })
            .collect();
        p.metadata.name = "p".into();
        let errs = p.validate_with(&check);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.starts_with(r#"Invalid value: []admissionregistration.AuditAnnotation{admissionregistration.AuditAnnotation{Key:"k0", ValueExpression:"'v'"}, "#));
        assert!(errs[0]
            .message
            .ends_with("}}: must not have more than 20 auditAnnotations"));
    }

    #[test]
    fn variables_see_only_the_earlier_ones() {
        let mut p = policy(serde_json::from_str(DEMO).unwrap());
        p.set_defaults();
        p.spec.variables = vec![
            Variable {
                name: "a".into(),
                expression: "1".into(),
            },
            Variable {
                name: "b".into(),
                expression: "variables.a + 1".into(),
            },
        ];
        let seen = std::cell::RefCell::new(Vec::new());
        let errs = p.validate_with(&|e, env| {
            seen.borrow_mut()
                .push((e.to_string(), env.variables.map(|v| v.join(","))));
            Ok(())
        });
        assert!(errs.is_empty());
        assert_eq!(
            seen.into_inner(),
            vec![
                ("1".to_string(), Some(String::new())),
                ("variables.a + 1".to_string(), Some("a".to_string())),
                (
                    "object.spec.replicas <= 5".to_string(),
                    Some("a,b".to_string())
                ),
            ]
        );
    }

    #[test]
    fn bindings_as_kube_checks_them() {
        let mut b = binding(
            json!({"policyName": "demo-policy.example.com", "validationActions": ["Deny"]}),
        );
        b.set_defaults();
        assert!(b.validate().is_empty());
        let b = binding(
            json!({"policyName": "Not A Name", "validationActions": ["Deny", "Warn", "Deny", "Block"]}),
        );
        let errs = b.validate();
        for want in [
            r#"spec.policyName: Invalid value: "Not A Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"#,
            r#"spec.validationActions[2]: Duplicate value: "Deny""#,
            r#"spec.validationActions[3]: Unsupported value: "Block": supported values: "Audit", "Deny", "Warn""#,
            r#"spec.validationActions: Invalid value: []admissionregistration.ValidationAction{"Deny", "Warn", "Deny", "Block"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"#,
        ] {
            assert_has(&errs, want);
        }
        let errs = binding(json!({})).validate();
        assert_has(&errs, "spec.policyName: Required value");
        assert_has(
            &errs,
            "spec.validationActions: Required value: at least one validation action is required",
        );
        let errs = binding(json!({
            "policyName": "p",
            "validationActions": ["Audit"],
            "paramRef": {"name": "..", "selector": {}, "parameterNotFoundAction": "Ignore"},
            "matchResources": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": []}]},
        }))
        .validate();
        for want in [
            r#"spec.paramRef.name: Invalid value: "..": may not be '..'"#,
            "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
            r#"spec.paramRef.parameterNotFoundAction: Unsupported value: "Ignore": supported values: "Deny", "Allow""#,
            "spec.matchResouces.matchPolicy: Required value",
            "spec.matchResouces.namespaceSelector: Required value",
            "spec.matchResouces.resourceRules[0].resources: Required value",
        ] {
            assert_has(&errs, want);
        }
        let errs =
            binding(json!({"policyName": "p", "validationActions": ["Audit"], "paramRef": {}}))
                .validate();
        assert_has(
            &errs,
            "spec.paramRef: Required value: one of name or selector must be specified",
        );
        assert_has(
            &errs,
            "spec.paramRef.parameterNotFoundAction: Required value",
        );
    }

    #[test]
    fn status_checks() {
        let mut p = policy(serde_json::from_str(DEMO).unwrap());
        p.status = Some(ValidatingAdmissionPolicyStatus {
            type_checking: Some(TypeChecking {
                expression_warnings: vec![ExpressionWarning::default()],
            }),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "Maybe".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let errs = p.validate_status();
        assert_has(
            &errs,
            "status.typeChecking.expressionWarnings[0].warning: Required value",
        );
        assert_has(
            &errs,
            "status.typeChecking.expressionWarnings[0].fieldRef: Required value",
        );
        assert_has(
            &errs,
            r#"status.conditions[0].status: Unsupported value: "Maybe": supported values: "False", "True", "Unknown""#,
        );
        assert_has(
            &errs,
            "status.conditions[0].reason: Required value: must be set",
        );
    }

    #[test]
    fn go_quoting_and_identifiers() {
        assert_eq!(go_quote("a \"b\"\n\\"), r#""a \"b\"\n\\""#);
        assert_eq!(go_quote("\u{1}é"), "\"\\x01é\"");
        assert!(is_cel_identifier("_x1"));
        assert!(!is_cel_identifier("1x"));
        assert!(!is_cel_identifier("namespace"));
        assert!(!is_cel_identifier("a-b"));
    }
}
