//! ValidatingAdmissionPolicy (docs/design/admission.md §1, §3): policies and their bindings
//! compiled once ([`PolicySet`]), matched against a request (the policy's
//! `matchConstraints`, then each binding's `matchResources`: resource rules with
//! `resourceNames`, exclusions, `matchPolicy`, namespace and object selectors), their
//! parameters collected ([`collect_params`]), evaluated ([`CompiledPolicy::evaluate`]:
//! match conditions, validations with their messages, audit annotations, in kube's budget)
//! and the bindings' `validationActions` applied ([`PolicySet::validate`]: Deny, Warn,
//! Audit), with kube-apiserver's messages (`staging/.../policy/validating/dispatcher.go`,
//! `validator.go`, `policy/generic/policy_dispatcher.go`, `policy/matching/matching.go`).
//!
//! Pure: the caller gives the request ([`PolicyRequest`]), the parameter objects
//! ([`ParamSource`], the informer cache) and uses the [`Outcome`] (the error to answer, the
//! warnings, the audit annotations). Under `matchPolicy: Equivalent`, a policy whose rule
//! names another version of the resource sees the object at the request's version (skiff
//! converts nothing here). The CEL environment and what it leaves out (`authorizer`) are
//! described in [`super::conditions`].

use std::collections::BTreeMap;

use api::admissionpolicy::{
    ExpressionEnv, MatchResources, ParamKind, ParamRef, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use api::admissionregistration::{RuleWithOperations, Webhook};
use api::meta::{Status, StatusCause, StatusDetails};
use api::selector::Selector;
use api::validation::FieldError;
use serde_json::Value;

use super::conditions::{
    self, Activation, Compiled, Input, MatchConditions, Matched, OutOfBudget, Variable,
    OUT_OF_BUDGET, RUNTIME_BUDGET,
};
use super::webhooks::{self, Attributes};
use crate::error::ApiError;

/// kube's `MaxEvaluatedMessageExpressionSizeBytes`: a longer message is not used.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;
/// kube's `maxAuditAnnotationValueLength`: longer values are cut.
const MAX_AUDIT_ANNOTATION_VALUE_BYTES: usize = 10 * 1024;
/// The audit annotation of a failed validation under the `Audit` action.
pub const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";

/// Makes `ValidatingAdmissionPolicy::validate` (api) compile the expressions with this
/// server's CEL. Call once at start.
pub fn install_expression_checker() {
    api::admissionpolicy::set_expression_checker(conditions::check);
}

/// kube's `ValidateValidatingAdmissionPolicy` of the spec, the expressions compiled.
pub fn validate_policy(p: &ValidatingAdmissionPolicy) -> Vec<FieldError> {
    p.validate_with(&conditions::check)
}

/// Whether requests for this resource are never given to policies (nor webhooks): the
/// admission configurations themselves, so that a broken one cannot lock itself in.
pub fn exempt(group: &str, resource: &str) -> bool {
    group == "admissionregistration.k8s.io"
        && matches!(
            resource,
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

// ---------------------------------------------------------------------------------------
// Matching.

/// A policy's `matchConstraints` or a binding's `matchResources`, ready to match.
#[derive(Debug)]
struct Matcher {
    /// The selectors, as a webhook whose rule matches everything (the webhooks' selector
    /// matching, reused).
    selectors: Webhook,
    rules: Vec<(RuleWithOperations, Vec<String>)>,
    exclude: Vec<(RuleWithOperations, Vec<String>)>,
    exact: bool,
}

impl Matcher {
    fn new(m: &MatchResources) -> Matcher {
        let every = RuleWithOperations {
            operations: vec!["*".into()],
            api_groups: vec!["*".into()],
            api_versions: vec!["*".into()],
            resources: vec!["*/*".into()],
            scope: Some("*".into()),
        };
        let named = |rules: &[api::admissionpolicy::NamedRuleWithOperations]| -> Vec<(RuleWithOperations, Vec<String>)> {
            rules
                .iter()
                .map(|r| (r.rule(), r.resource_names.clone()))
                .collect()
        };
        Matcher {
            selectors: Webhook {
                rules: vec![every],
                match_policy: Some("Exact".into()),
                namespace_selector: m.namespace_selector.clone(),
                object_selector: m.object_selector.clone(),
                ..Default::default()
            },
            rules: named(&m.resource_rules),
            exclude: named(&m.exclude_resource_rules),
            exact: m.match_policy.as_deref() == Some("Exact"),
        }
    }

    /// kube's `Matcher.Matches`: the selectors, no exclusion, then a rule (any request
    /// when there are none); the group and version the rule matched at.
    fn matches<'a>(&self, attrs: &Attributes<'a>, name: &str) -> Option<(&'a str, &'a str)> {
        webhooks::matches(&self.selectors, attrs)?;
        if rules_match(&self.exclude, self.exact, attrs, name).is_some() {
            return None;
        }
        if self.rules.is_empty() {
            return Some((attrs.group, attrs.version));
        }
        rules_match(&self.rules, self.exact, attrs, name)
    }
}

impl Matcher {
    /// Whether it selects by the namespace's labels.
    fn selects_namespaces(&self) -> bool {
        webhooks::selects_namespaces(&self.selectors)
    }

    /// The rules alone (no selectors, names or exclusions): whether the request could
    /// match at all, before the object and its namespace are read.
    fn may_match(&self, attrs: &Attributes<'_>) -> bool {
        self.rules.is_empty()
            || self
                .rules
                .iter()
                .any(|(r, _)| webhooks::rule_matches(r, attrs, attrs.group, attrs.version))
    }
}

/// kube's `matchesResourceRules`: a rule at the request's own version, else (Equivalent) at
/// another version the resource is served at; with its names, when it has some.
fn rules_match<'a>(
    rules: &[(RuleWithOperations, Vec<String>)],
    exact: bool,
    attrs: &Attributes<'a>,
    name: &str,
) -> Option<(&'a str, &'a str)> {
    let named = |names: &[String]| names.is_empty() || names.iter().any(|n| n == name);
    let at = |g: &'a str, v: &'a str| {
        rules
            .iter()
            .any(|(r, names)| webhooks::rule_matches(r, attrs, g, v) && named(names))
            .then_some((g, v))
    };
    if let Some(m) = at(attrs.group, attrs.version) {
        return Some(m);
    }
    if exact {
        return None;
    }
    attrs
        .equivalents
        .iter()
        .filter(|(g, v)| (*g, *v) != (attrs.group, attrs.version))
        .find_map(|(g, v)| at(g, v))
}

// ---------------------------------------------------------------------------------------
// Parameters.

/// Where bindings' parameters come from: the informer cache of the policy's paramKind.
pub trait ParamSource {
    /// Whether the kind is served, and namespaced: `None` when no resource serves it.
    fn namespaced(&self, kind: &ParamKind) -> Option<bool>;
    /// The objects of the kind in `namespace` (`None`: a cluster-scoped kind): the one
    /// named `name` (none when missing), or all of them.
    fn list(&self, kind: &ParamKind, namespace: Option<&str>, name: Option<&str>) -> Vec<Value>;
}

/// kube's `ParamKind.String()`, as its messages print it.
fn param_kind_string(k: &ParamKind) -> String {
    format!(
        "&ParamKind{{APIVersion:{},Kind:{},}}",
        k.api_version, k.kind
    )
}

/// kube's `CollectParams`: the parameters to evaluate a policy with for one binding, each
/// evaluation's `params` (`None`: `null`, the policy has no paramKind or the binding no
/// paramRef). `namespaced` is whether the param kind is namespaced (`None`: unknown kind);
/// `list(namespace, name)` lists the param kind's objects (see [`ParamSource::list`]).
/// An empty list is no evaluation (`parameterNotFoundAction: Allow`); the error is a
/// misconfiguration, worded as kube words it.
pub fn collect_params(
    param_kind: Option<&ParamKind>,
    param_ref: Option<&ParamRef>,
    request_namespace: &str,
    namespaced: Option<bool>,
    list: impl FnOnce(Option<&str>, Option<&str>) -> Vec<Value>,
) -> Result<Vec<Option<Value>>, String> {
    let (Some(kind), Some(r)) = (param_kind, param_ref) else {
        return Ok(vec![None]);
    };
    let Some(namespaced) = namespaced else {
        return Err(format!(
            "paramKind kind `{}` not known",
            param_kind_string(kind)
        ));
    };
    let namespace = if namespaced {
        if !r.namespace.is_empty() {
            Some(r.namespace.as_str())
        } else if !request_namespace.is_empty() {
            Some(request_namespace)
        } else {
            return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
        }
    } else {
        if !r.namespace.is_empty() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        None
    };
    let params: Vec<Value> = if !r.name.is_empty() {
        if r.selector.is_some() {
            return Err("paramRef.name and paramRef.selector are mutually exclusive".into());
        }
        list(namespace, Some(&r.name))
    } else if let Some(sel) = &r.selector {
        let selector = Selector::from_label_selector(sel).map_err(|e| e.to_string())?;
        list(namespace, None)
            .into_iter()
            .filter(|p| {
                let labels: BTreeMap<String, String> = p["metadata"]["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                            .collect()
                    })
                    .unwrap_or_default();
                selector.matches(&labels)
            })
            .collect()
    } else {
        return Err("one of name or selector must be provided".into());
    };
    if params.is_empty() && r.parameter_not_found_action.as_deref() == Some("Deny") {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(params.into_iter().map(Some).collect())
}

// ---------------------------------------------------------------------------------------
// One policy.

#[derive(Debug)]
struct CompiledValidation {
    expression: Result<Compiled, String>,
    /// The expression, trimmed (for the default message).
    source: String,
    message: String,
    message_expression: Option<Result<Compiled, String>>,
    reason: Option<String>,
}

/// A ValidatingAdmissionPolicy compiled once: its expressions, its match constraints.
/// Expressions that do not compile (a stored policy) fail when evaluated.
#[derive(Debug)]
pub struct CompiledPolicy {
    pub name: String,
    failure_policy: String,
    param_kind: Option<ParamKind>,
    constraints: Option<Matcher>,
    conditions: MatchConditions,
    variables: Vec<Variable>,
    validations: Vec<CompiledValidation>,
    audit_annotations: Vec<(String, Result<Compiled, String>)>,
}

/// Why a validation did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Its message (the failed validation's, or the error's).
    pub message: String,
    /// `Invalid` (the default), `Forbidden`, `Unauthorized`, `RequestEntityTooLarge`.
    pub reason: String,
    /// The validation's index (kube's `expressionIndex`; 0 for a policy-wide error).
    pub index: usize,
    /// An evaluation error (under `failurePolicy: Fail`), not a false validation.
    pub error: bool,
}

/// What one policy said of one request, with one binding's parameter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// The failed validations (and errors under `Fail`): the binding's validationActions
    /// decide what they do. Empty: the request passes.
    pub failures: Vec<Failure>,
    /// Audit annotations published: `(KEY, value)`.
    pub audit_annotations: Vec<(String, String)>,
    /// Audit annotations that could not be evaluated under `Fail` (or gave neither a
    /// string nor null): they deny whatever the validation actions.
    pub audit_errors: Vec<String>,
}

impl Evaluation {
    /// A policy-wide error: a failure under `Fail`, nothing under `Ignore`.
    fn error(policy: &CompiledPolicy, message: String) -> Evaluation {
        Evaluation {
            failures: if policy.ignores_failures() {
                Vec::new()
            } else {
                vec![Failure {
                    message,
                    reason: "Invalid".into(),
                    index: 0,
                    error: true,
                }]
            },
            ..Default::default()
        }
    }
}

impl CompiledPolicy {
    /// Compiles a (defaulted) policy.
    pub fn new(p: &ValidatingAdmissionPolicy) -> CompiledPolicy {
        let spec = &p.spec;
        let params = spec.param_kind.is_some();
        let names: Vec<&str> = spec.variables.iter().map(|v| v.name.as_str()).collect();
        let variables = spec
            .variables
            .iter()
            .enumerate()
            .map(|(i, v)| Variable {
                name: v.name.clone(),
                expr: conditions::compile(
                    &v.expression,
                    &ExpressionEnv {
                        params,
                        authorizer: true,
                        variables: Some(&names[..i]),
                    },
                ),
            })
            .collect();
        let declared = (!names.is_empty()).then_some(&names[..]);
        let env = ExpressionEnv {
            params,
            authorizer: true,
            variables: declared,
        };
        let message_env = ExpressionEnv {
            authorizer: false,
            ..env
        };
        CompiledPolicy {
            name: p.metadata.name.clone(),
            failure_policy: spec.failure_policy.clone().unwrap_or_else(|| "Fail".into()),
            param_kind: spec.param_kind.clone(),
            constraints: spec.match_constraints.as_ref().map(Matcher::new),
            conditions: MatchConditions::compile(&spec.match_conditions, params),
            variables,
            validations: spec
                .validations
                .iter()
                .map(|v| CompiledValidation {
                    expression: conditions::compile(&v.expression, &env),
                    source: v.expression.trim().to_string(),
                    message: v.message.trim().to_string(),
                    message_expression: (!v.message_expression.trim().is_empty())
                        .then(|| conditions::compile(&v.message_expression, &message_env)),
                    reason: v.reason.clone(),
                })
                .collect(),
            audit_annotations: spec
                .audit_annotations
                .iter()
                .map(|a| {
                    (
                        a.key.clone(),
                        conditions::compile(a.value_expression.trim(), &env),
                    )
                })
                .collect(),
        }
    }

    /// Whether one of its expressions reads the request's variable `name`.
    fn reads(&self, name: &str) -> bool {
        let reads = |c: &Result<Compiled, String>| c.as_ref().is_ok_and(|c| c.reads(name));
        self.conditions.reads(name)
            || self.variables.iter().any(|v| reads(&v.expr))
            || self
                .validations
                .iter()
                .any(|v| reads(&v.expression) || v.message_expression.as_ref().is_some_and(reads))
            || self.audit_annotations.iter().any(|(_, c)| reads(c))
    }

    fn ignores_failures(&self) -> bool {
        self.failure_policy == "Ignore"
    }

    /// Whether the policy's match constraints take the request: the group and version
    /// its rule matched at. A policy without constraints matches nothing.
    pub fn matches<'a>(&self, attrs: &Attributes<'a>, name: &str) -> Option<(&'a str, &'a str)> {
        self.constraints.as_ref()?.matches(attrs, name)
    }

    /// kube's `validator.Validate`: the policy evaluated on `input` (its `params` the
    /// binding's parameter, or none): match conditions, then the validations (their
    /// messages for the failed ones), then the audit annotations.
    pub fn evaluate(&self, input: &Input<'_>) -> Evaluation {
        let act = Activation::new(input, &self.variables);
        match self.conditions.evaluate(&act) {
            Matched::Yes => {}
            Matched::No { .. } => return Evaluation::default(),
            Matched::Error(e) => return Evaluation::error(self, e),
        }
        act.set_budget(RUNTIME_BUDGET);
        let mut out = Evaluation::default();
        for (index, v) in self.validations.iter().enumerate() {
            let result = match &v.expression {
                Err(e) => Err(format!("compilation error: {e}")),
                Ok(c) => match act.eval(c) {
                    Err(OutOfBudget) => return Evaluation::error(self, OUT_OF_BUDGET.into()),
                    Ok(Ok(cel::Value::Bool(b))) => Ok(b),
                    Ok(Ok(_)) => Err(format!(
                        "expression '{}' resulted in error: cel expression must evaluate to bool",
                        c.source()
                    )),
                    Ok(Err(e)) => Err(e),
                },
            };
            match result {
                Ok(true) => {}
                Err(_) if self.ignores_failures() => {}
                Err(message) => out.failures.push(Failure {
                    message,
                    reason: "Invalid".into(),
                    index,
                    error: true,
                }),
                Ok(false) => {
                    let message = match self.message(v, &act) {
                        Ok(m) => m,
                        Err(OutOfBudget) if self.ignores_failures() => continue,
                        Err(OutOfBudget) => {
                            out.failures.push(Failure {
                                message: format!("failed messageExpression: {OUT_OF_BUDGET}"),
                                reason: "Invalid".into(),
                                index,
                                error: true,
                            });
                            continue;
                        }
                    };
                    out.failures.push(Failure {
                        message,
                        reason: v.reason.clone().unwrap_or_else(|| "Invalid".into()),
                        index,
                        error: false,
                    });
                }
            }
        }
        act.set_budget(RUNTIME_BUDGET);
        for (key, expr) in &self.audit_annotations {
            let value = match expr {
                Err(e) => Err(format!("compilation error: {e}")),
                Ok(c) => match act.eval(c) {
                    Err(OutOfBudget) => return Evaluation::error(self, OUT_OF_BUDGET.into()),
                    Ok(Ok(cel::Value::String(s))) => Ok(Some(s.trim().to_string())),
                    Ok(Ok(cel::Value::Null)) => Ok(None),
                    Ok(Ok(other)) => {
                        // Not subject to the failure policy, as in kube.
                        out.audit_errors.push(format!(
                            "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                            c.source(),
                            cel_type(&other)
                        ));
                        continue;
                    }
                    Ok(Err(e)) => Err(e),
                },
            };
            match value {
                Ok(Some(v)) if !v.is_empty() => out.audit_annotations.push((key.clone(), v)),
                Ok(_) => {}
                Err(_) if self.ignores_failures() => {}
                Err(e) => out.audit_errors.push(e),
            }
        }
        out
    }

    /// A failed validation's message: its messageExpression's (a non-empty single line of
    /// at most 5 KiB), else its message, else `failed expression: EXPRESSION`.
    fn message(&self, v: &CompiledValidation, act: &Activation<'_>) -> Result<String, OutOfBudget> {
        if let Some(Ok(m)) = &v.message_expression {
            if let Ok(cel::Value::String(s)) = act.eval(m)? {
                let s = s.trim();
                if !s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n') {
                    return Ok(s.to_string());
                }
            }
        }
        if !v.message.is_empty() {
            return Ok(v.message.clone());
        }
        Ok(format!("failed expression: {}", v.source))
    }
}

/// cel-go's name of a value's type, as kube's messages print it.
fn cel_type(v: &cel::Value) -> &'static str {
    match v {
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::Bool(_) => "bool",
        cel::Value::Null => "null_type",
        _ => "dyn",
    }
}

// ---------------------------------------------------------------------------------------
// The set of policies and bindings, and the request's outcome.

#[derive(Debug)]
struct CompiledBinding {
    name: String,
    param_ref: Option<ParamRef>,
    matcher: Option<Matcher>,
    actions: Vec<String>,
}

/// The policies that have bindings, compiled: what the informers hold, rebuilt when a
/// policy or a binding changes.
#[derive(Debug, Default)]
pub struct PolicySet {
    entries: Vec<(CompiledPolicy, Vec<CompiledBinding>)>,
    /// Some expression reads `request` (else a write's review request is never built).
    reads_request: bool,
    /// Some expression reads `namespaceObject` or some selector the namespace's labels
    /// (else a write's Namespace is never read).
    needs_namespace: bool,
}

/// A request as the policies see it.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    /// What it is about, for matching (operation, resource, scope, equivalent versions,
    /// the labels of the namespace, the object and the old object).
    pub attrs: Attributes<'a>,
    /// The request's name (`""` for a create that generates it).
    pub name: &'a str,
    /// The request's namespace (`""` when cluster-scoped).
    pub namespace: &'a str,
    /// The expressions' variables (`params` is each binding's own, whatever is here).
    pub input: Input<'a>,
}

/// What the policies decided of a request.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The request is refused: the first denial, as kube answers it.
    pub denied: Option<ApiError>,
    /// `Warning` headers for the client (validation action `Warn`).
    pub warnings: Vec<String>,
    /// Audit annotations for the request's audit event: `POLICY/KEY` from the policies'
    /// auditAnnotations, and [`VALIDATION_FAILURE_ANNOTATION`] (validation action `Audit`).
    pub audit_annotations: BTreeMap<String, String>,
}

/// One refusal, before it becomes the answer.
#[derive(Debug, Clone)]
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: String,
}

impl PolicySet {
    /// Compiles the policies and groups their bindings (by name; a binding whose policy
    /// does not exist does nothing, a policy without bindings neither).
    pub fn new(
        policies: &[ValidatingAdmissionPolicy],
        bindings: &[ValidatingAdmissionPolicyBinding],
    ) -> PolicySet {
        let mut policies: Vec<&ValidatingAdmissionPolicy> = policies.iter().collect();
        policies.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut bindings: Vec<&ValidatingAdmissionPolicyBinding> = bindings.iter().collect();
        bindings.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let entries = policies
            .into_iter()
            .filter_map(|p| {
                let bound: Vec<CompiledBinding> = bindings
                    .iter()
                    .filter(|b| b.spec.policy_name == p.metadata.name)
                    .map(|b| CompiledBinding {
                        name: b.metadata.name.clone(),
                        param_ref: b.spec.param_ref.clone(),
                        matcher: b.spec.match_resources.as_ref().map(Matcher::new),
                        actions: b.spec.validation_actions.clone(),
                    })
                    .collect();
                (!bound.is_empty()).then(|| (CompiledPolicy::new(p), bound))
            })
            .collect::<Vec<_>>();
        let reads = |name: &str| entries.iter().any(|(p, _)| p.reads(name));
        let selects = entries.iter().any(|(p, bindings)| {
            let selects = |m: &Option<Matcher>| m.as_ref().is_some_and(Matcher::selects_namespaces);
            selects(&p.constraints) || bindings.iter().any(|b| selects(&b.matcher))
        });
        PolicySet {
            reads_request: reads("request"),
            needs_namespace: selects || reads("namespaceObject"),
            entries,
        }
    }

    /// Whether some expression reads the `request` variable.
    pub fn reads_request(&self) -> bool {
        self.reads_request
    }

    /// Whether evaluating the policies may need the request's Namespace (its labels for
    /// a namespaceSelector, or `namespaceObject`).
    pub fn needs_namespace(&self) -> bool {
        self.needs_namespace
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some bound policy's rules could take a request (its selectors, resource
    /// names and exclusions not looked at): the cheap first test of a write.
    pub fn may_match(&self, attrs: &Attributes<'_>) -> bool {
        !exempt(attrs.group, attrs.resource)
            && self
                .entries
                .iter()
                .any(|(p, _)| p.constraints.as_ref().is_some_and(|c| c.may_match(attrs)))
    }

    /// The paramKinds of the bound policies that take the request, for the caller to
    /// read their objects before [`PolicySet::validate`].
    pub fn param_kinds(&self, req: &PolicyRequest<'_>) -> Vec<ParamKind> {
        let mut kinds: Vec<ParamKind> = Vec::new();
        for (p, _) in &self.entries {
            if let Some(k) = &p.param_kind {
                if p.matches(&req.attrs, req.name).is_some() && !kinds.contains(k) {
                    kinds.push(k.clone());
                }
            }
        }
        kinds
    }

    /// Whether some bound policy's constraints take the request (no CEL evaluated, no
    /// parameter read): when none does, [`PolicySet::validate`] has nothing to do.
    pub fn matches(&self, req: &PolicyRequest<'_>) -> bool {
        !exempt(req.attrs.group, req.attrs.resource)
            && self
                .entries
                .iter()
                .any(|(p, _)| p.matches(&req.attrs, req.name).is_some())
    }

    /// kube's validating policy dispatcher: each bound policy that matches the request,
    /// each of its bindings that matches, each parameter; failed validations denied,
    /// warned or audited as the binding says; misconfigurations and errors as the
    /// policy's failure policy says.
    pub fn validate(&self, req: &PolicyRequest<'_>, params: &dyn ParamSource) -> Outcome {
        let mut out = Outcome::default();
        if exempt(req.attrs.group, req.attrs.resource) {
            return out;
        }
        let mut denials: Vec<Denial> = Vec::new();
        // A Namespace has no namespace object of its own.
        let mut input = req.input;
        if req.attrs.group.is_empty() && req.attrs.resource == "namespaces" {
            input.namespace = None;
        }
        for (policy, bindings) in &self.entries {
            if policy.matches(&req.attrs, req.name).is_none() {
                continue;
            }
            let config_error = |denials: &mut Vec<Denial>, binding: &str, err: String| match policy
                .failure_policy
                .as_str()
            {
                "Ignore" => {}
                "Fail" => denials.push(Denial {
                    policy: policy.name.clone(),
                    binding: Some(binding.to_string()),
                    message: format!("failed to configure binding: {err}"),
                    reason: String::new(),
                }),
                other => denials.push(Denial {
                    policy: policy.name.clone(),
                    binding: Some(binding.to_string()),
                    message: format!("unrecognized failure policy: '{other}'"),
                    reason: String::new(),
                }),
            };
            let mut annotations: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for binding in bindings {
                if let Some(m) = &binding.matcher {
                    if m.matches(&req.attrs, req.name).is_none() {
                        continue;
                    }
                }
                let collected = match (&policy.param_kind, &binding.param_ref) {
                    (Some(kind), Some(_)) => collect_params(
                        Some(kind),
                        binding.param_ref.as_ref(),
                        req.namespace,
                        params.namespaced(kind),
                        |ns, name| params.list(kind, ns, name),
                    ),
                    _ => Ok(vec![None]),
                };
                let collected = match collected {
                    Ok(c) => c,
                    Err(e) => {
                        config_error(&mut denials, &binding.name, e);
                        continue;
                    }
                };
                for param in &collected {
                    let input = Input {
                        params: param.as_ref(),
                        ..input
                    };
                    let eval = policy.evaluate(&input);
                    for f in &eval.failures {
                        for action in &binding.actions {
                            match action.as_str() {
                                "Deny" => denials.push(Denial {
                                    policy: policy.name.clone(),
                                    binding: Some(binding.name.clone()),
                                    message: f.message.clone(),
                                    reason: f.reason.clone(),
                                }),
                                "Warn" => out.warnings.push(format!(
                                    "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                                    policy.name, binding.name, f.message
                                )),
                                "Audit" => {
                                    let value = validation_failure(
                                        &f.message,
                                        &policy.name,
                                        &binding.name,
                                        f.index,
                                        &binding.actions,
                                    );
                                    // As kube's AddAnnotation: the first value stays.
                                    out.audit_annotations
                                        .entry(VALIDATION_FAILURE_ANNOTATION.to_string())
                                        .or_insert(value);
                                }
                                _ => {}
                            }
                        }
                    }
                    for (key, value) in eval.audit_annotations {
                        let value = truncate(value, MAX_AUDIT_ANNOTATION_VALUE_BYTES);
                        let values = annotations.entry(key).or_default();
                        if !values.contains(&value) {
                            values.push(value);
                        }
                    }
                    for e in eval.audit_errors {
                        denials.push(Denial {
                            policy: policy.name.clone(),
                            binding: Some(binding.name.clone()),
                            message: e,
                            reason: String::new(),
                        });
                    }
                }
            }
            for (key, values) in annotations {
                out.audit_annotations
                    .entry(format!("{}/{key}", policy.name))
                    .or_insert_with(|| values.join(", "));
            }
        }
        if let Some(d) = denials.into_iter().next() {
            out.denied = Some(denial_error(&d, req));
        }
        out
    }
}

/// The value of [`VALIDATION_FAILURE_ANNOTATION`]: kube's `ValidationFailureValue` list,
/// its members in kube's order.
fn validation_failure(
    message: &str,
    policy: &str,
    binding: &str,
    index: usize,
    actions: &[String],
) -> String {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ValidationFailureValue<'a> {
        message: &'a str,
        policy: &'a str,
        binding: &'a str,
        expression_index: usize,
        validation_actions: &'a [String],
    }
    serde_json::to_string(&[ValidationFailureValue {
        message,
        policy,
        binding,
        expression_index: index,
        validation_actions: actions,
    }])
    .unwrap_or_default()
}

/// `value` cut to at most `max` bytes (at a character boundary).
fn truncate(mut value: String, max: usize) -> String {
    if value.len() > max {
        let mut end = max;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
    value
}

/// kube's `reasonToCode`.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// The message of a denial: `ValidatingAdmissionPolicy 'NAME' with binding 'BINDING'
/// denied request: MESSAGE`.
fn denial_message(d: &Denial) -> String {
    match &d.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            d.policy, d.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            d.policy, d.message
        ),
    }
}

/// A denial as kube answers it: admission's `NewForbidden` (`deployments.apps "nginx" is
/// forbidden: MESSAGE`, the object in the details, the message again as the one cause),
/// with the validation's reason and its code (`Invalid` 422 by default).
fn denial_error(d: &Denial, req: &PolicyRequest<'_>) -> ApiError {
    let message = denial_message(d);
    let name = if !req.name.is_empty() {
        req.name.to_string()
    } else {
        let meta = req.input.object.map(|o| &o["metadata"]);
        let field = |k: &str| {
            meta.and_then(|m| m[k].as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        field("name")
            .or_else(|| field("generateName"))
            .unwrap_or_else(|| "Unknown".into())
    };
    let (group, resource) = (req.attrs.group, req.attrs.resource);
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let full = if resource.is_empty() {
        format!("forbidden: {message}")
    } else {
        format!("{qualified} \"{name}\" is forbidden: {message}")
    };
    let reason = if d.reason.is_empty() {
        "Invalid"
    } else {
        d.reason.as_str()
    };
    ApiError::from_status(
        Status::failure(reason_code(reason), reason, full).with_details(StatusDetails {
            name,
            group: group.to_string(),
            kind: resource.to_string(),
            causes: vec![StatusCause {
                message,
                ..Default::default()
            }],
            ..Default::default()
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::webhooks::Operation;
    use api::object::Resource;
    use serde_json::json;

    fn policy(name: &str, spec: Value) -> ValidatingAdmissionPolicy {
        let mut p: ValidatingAdmissionPolicy =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        p.set_defaults();
        let errs = validate_policy(&p);
        assert!(errs.is_empty(), "{errs:?}");
        p
    }

    fn binding(name: &str, spec: Value) -> ValidatingAdmissionPolicyBinding {
        let mut b: ValidatingAdmissionPolicyBinding =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        b.set_defaults();
        assert!(b.validate().is_empty(), "{:?}", b.validate());
        b
    }

    /// The documentation's first policy: at most 5 replicas for Deployments.
    fn demo_policy() -> ValidatingAdmissionPolicy {
        policy(
            "demo-policy.example.com",
            json!({
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <= 5"}],
            }),
        )
    }

    fn deployment(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}}, "spec": {"replicas": replicas}})
    }

    /// Parameters: ConfigMaps (namespaced) and a cluster-scoped kind, by namespace and name.
    #[derive(Default)]
    struct Params(Vec<(ParamKind, Option<String>, Value)>);

    impl ParamSource for Params {
        fn namespaced(&self, kind: &ParamKind) -> Option<bool> {
            match kind.kind.as_str() {
                "ConfigMap" => Some(true),
                "ReplicaLimit" => Some(false),
                _ => None,
            }
        }
        fn list(
            &self,
            kind: &ParamKind,
            namespace: Option<&str>,
            name: Option<&str>,
        ) -> Vec<Value> {
            self.0
                .iter()
                .filter(|(k, ns, v)| {
                    k == kind
                        && ns.as_deref() == namespace
                        && name.is_none_or(|n| v["metadata"]["name"] == n)
                })
                .map(|(_, _, v)| v.clone())
                .collect()
        }
    }

    struct Req {
        object: Value,
        old: Option<Value>,
        request: Value,
        ns: Value,
        ns_labels: BTreeMap<String, String>,
        obj_labels: BTreeMap<String, String>,
        operation: Operation,
        namespace: String,
    }

    fn req(object: Value, namespace: &str) -> Req {
        let labels = |v: &Value| -> BTreeMap<String, String> {
            serde_json::from_value(v["metadata"]["labels"].clone()).unwrap_or_default()
        };
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace, "env": if namespace == "prod" { "prod" } else { "test" }}}});
        Req {
            request: json!({"uid": "", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "name": object["metadata"]["name"], "namespace": namespace, "operation": "CREATE", "userInfo": {"username": "alice"}, "dryRun": false}),
            ns_labels: labels(&ns),
            obj_labels: labels(&object),
            object,
            old: None,
            ns,
            operation: Operation::Create,
            namespace: namespace.to_string(),
        }
    }

    impl Req {
        fn view(&self) -> PolicyRequest<'_> {
            PolicyRequest {
                attrs: Attributes {
                    operation: self.operation,
                    group: "apps",
                    version: "v1",
                    resource: "deployments",
                    subresource: "",
                    namespaced: true,
                    equivalents: &[],
                    namespace_labels: Some(&self.ns_labels),
                    object_labels: Some(&self.obj_labels),
                    old_object_labels: None,
                },
                name: self.object["metadata"]["name"].as_str().unwrap_or(""),
                namespace: &self.namespace,
                input: Input {
                    object: Some(&self.object),
                    old_object: self.old.as_ref(),
                    request: Some(&self.request),
                    namespace: Some(&self.ns),
                    params: None,
                },
            }
        }
    }

    fn run(
        policies: &[ValidatingAdmissionPolicy],
        bindings: &[ValidatingAdmissionPolicyBinding],
        r: &Req,
        params: &Params,
    ) -> Outcome {
        PolicySet::new(policies, bindings).validate(&r.view(), params)
    }

    #[test]
    fn the_documented_replica_limit_denies_as_kube_does() {
        let b = binding(
            "demo-binding-test.example.com",
            json!({"policyName": "demo-policy.example.com", "validationActions": ["Deny"], "matchResources": {"namespaceSelector": {"matchLabels": {"environment": "test"}}}}),
        );
        let mut b2 = b.clone();
        b2.spec.match_resources = None;
        let set = PolicySet::new(&[demo_policy()], std::slice::from_ref(&b2));
        let r = req(deployment(6), "default");
        assert!(set.matches(&r.view()));
        let out = set.validate(&r.view(), &Params::default());
        let e = out.denied.expect("denied");
        assert_eq!(e.code(), 422);
        assert_eq!(e.reason(), "Invalid");
        assert_eq!(
            e.0.message,
            "deployments.apps \"nginx\" is forbidden: ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
        );
        let d = e.0.details.as_ref().unwrap();
        assert_eq!(
            (d.group.as_str(), d.kind.as_str(), d.name.as_str()),
            ("apps", "deployments", "nginx")
        );
        assert_eq!(
            d.causes[0].message,
            "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
        );
        // Within the limit: allowed, nothing said.
        let ok = set.validate(&req(deployment(5), "default").view(), &Params::default());
        assert!(ok.denied.is_none() && ok.warnings.is_empty() && ok.audit_annotations.is_empty());
        // The binding's namespace selector: only `environment: test` namespaces.
        let out = run(&[demo_policy()], &[b], &r, &Params::default());
        assert!(out.denied.is_none());
        // Another resource is not matched.
        let mut other = req(deployment(6), "default");
        other.operation = Operation::Delete;
        assert!(!set.matches(&other.view()));
        assert!(set
            .validate(&other.view(), &Params::default())
            .denied
            .is_none());
    }

    #[test]
    fn params_from_a_binding() {
        // The documentation's: replicas within a ReplicaLimit's maxReplicas.
        let p = policy(
            "replicalimit-policy.example.com",
            json!({
                "failurePolicy": "Fail",
                "paramKind": {"apiVersion": "rules.example.com/v1", "kind": "ReplicaLimit"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <= params.maxReplicas", "reason": "Forbidden"}],
            }),
        );
        let b = binding(
            "replicalimit-binding-test.example.com",
            json!({
                "policyName": "replicalimit-policy.example.com",
                "validationActions": ["Deny"],
                "paramRef": {"name": "replica-limit-test.example.com", "parameterNotFoundAction": "Deny"},
            }),
        );
        let kind = ParamKind {
            api_version: "rules.example.com/v1".into(),
            kind: "ReplicaLimit".into(),
        };
        let params = Params(vec![(
            kind.clone(),
            None,
            json!({"metadata": {"name": "replica-limit-test.example.com"}, "maxReplicas": 3}),
        )]);
        let out = run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(4), "default"),
            &params,
        );
        let e = out.denied.expect("denied");
        assert_eq!((e.code(), e.reason()), (403, "Forbidden"));
        assert!(
            e.0.message.ends_with(
                "denied request: failed expression: object.spec.replicas <= params.maxReplicas"
            ),
            "{}",
            e.0.message
        );
        assert!(run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(3), "default"),
            &params
        )
        .denied
        .is_none());
        // The parameter missing: Deny refuses, Allow lets through.
        let e = run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(1), "default"),
            &Params::default(),
        )
        .denied
        .expect("denied");
        assert_eq!(e.code(), 422);
        assert!(e.0.message.ends_with("ValidatingAdmissionPolicy 'replicalimit-policy.example.com' with binding 'replicalimit-binding-test.example.com' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"), "{}", e.0.message);
        let mut allow = b.clone();
        allow
            .spec
            .param_ref
            .as_mut()
            .unwrap()
            .parameter_not_found_action = Some("Allow".into());
        assert!(run(
            std::slice::from_ref(&p),
            &[allow],
            &req(deployment(100), "default"),
            &Params::default()
        )
        .denied
        .is_none());
        // Under failurePolicy Ignore, a misconfiguration lets through.
        let mut ignore = p.clone();
        ignore.spec.failure_policy = Some("Ignore".into());
        assert!(run(
            &[ignore],
            std::slice::from_ref(&b),
            &req(deployment(1), "default"),
            &Params::default()
        )
        .denied
        .is_none());
        // A selector: each selected parameter is evaluated.
        let mut sel = b.clone();
        sel.spec.param_ref = Some(ParamRef {
            selector: Some(
                serde_json::from_value(json!({"matchLabels": {"tier": "low"}})).unwrap(),
            ),
            parameter_not_found_action: Some("Deny".into()),
            ..Default::default()
        });
        let params = Params(vec![
            (
                kind.clone(),
                None,
                json!({"metadata": {"name": "a", "labels": {"tier": "low"}}, "maxReplicas": 10}),
            ),
            (
                kind.clone(),
                None,
                json!({"metadata": {"name": "b", "labels": {"tier": "low"}}, "maxReplicas": 2}),
            ),
            (
                kind.clone(),
                None,
                json!({"metadata": {"name": "c", "labels": {"tier": "high"}}, "maxReplicas": 1}),
            ),
        ]);
        assert!(run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&sel),
            &req(deployment(3), "default"),
            &params
        )
        .denied
        .is_some());
        assert!(run(&[p], &[sel], &req(deployment(2), "default"), &params)
            .denied
            .is_none());
    }

    #[test]
    fn collecting_params_as_kube_does() {
        let cm = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let by_name = ParamRef {
            name: "limits".into(),
            parameter_not_found_action: Some("Deny".into()),
            ..Default::default()
        };
        let asked = std::cell::RefCell::new(Vec::new());
        let list = |ns: Option<&str>, name: Option<&str>| {
            asked
                .borrow_mut()
                .push((ns.map(str::to_string), name.map(str::to_string)));
            vec![json!({"metadata": {"name": "limits"}})]
        };
        // Namespaced: the request's namespace, or the paramRef's.
        assert_eq!(
            collect_params(Some(&cm), Some(&by_name), "team-a", Some(true), list)
                .unwrap()
                .len(),
            1
        );
        let mut elsewhere = by_name.clone();
        elsewhere.namespace = "shared".into();
        collect_params(Some(&cm), Some(&elsewhere), "team-a", Some(true), list).unwrap();
        assert_eq!(
            asked.into_inner(),
            vec![
                (Some("team-a".to_string()), Some("limits".to_string())),
                (Some("shared".to_string()), Some("limits".to_string())),
            ]
        );
        let none = |_: Option<&str>, _: Option<&str>| Vec::new();
        assert_eq!(
            collect_params(Some(&cm), Some(&by_name), "", Some(true), none).unwrap_err(),
            "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
        );
        assert_eq!(
            collect_params(Some(&cm), Some(&elsewhere), "x", Some(false), none).unwrap_err(),
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
        );
        assert_eq!(
            collect_params(Some(&cm), Some(&by_name), "x", None, none).unwrap_err(),
            "paramKind kind `&ParamKind{APIVersion:v1,Kind:ConfigMap,}` not known"
        );
        // No paramKind, or no paramRef: one evaluation with null params.
        assert_eq!(
            collect_params(None, Some(&by_name), "x", None, none).unwrap(),
            vec![None]
        );
        assert_eq!(
            collect_params(Some(&cm), None, "x", None, none).unwrap(),
            vec![None]
        );
        let mut allow = by_name.clone();
        allow.parameter_not_found_action = Some("Allow".into());
        assert!(
            collect_params(Some(&cm), Some(&allow), "x", Some(true), none)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn message_expressions_messages_and_variables() {
        let p = policy(
            "image-matches-namespace-environment.policy.example.com",
            json!({
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "variables": [
                    {"name": "environment", "expression": "'environment' in namespaceObject.metadata.labels ? namespaceObject.metadata.labels['environment'] : 'prod'"},
                    {"name": "exempt", "expression": "has(object.metadata.labels) && 'exempt' in object.metadata.labels && object.metadata.labels['exempt'] == 'true'"},
                    {"name": "containers", "expression": "object.spec.template.spec.containers"},
                    {"name": "containersToCheck", "expression": "variables.containers.filter(c, c.image.contains('example.com/'))"},
                ],
                "validations": [
                    {"expression": "variables.exempt || variables.containersToCheck.all(c, c.image.startsWith(variables.environment + '.'))", "messageExpression": "'only ' + variables.environment + ' images are allowed in namespace ' + namespaceObject.metadata.name"},
                    {"expression": "object.spec.replicas <= 5", "message": "  too many replicas  ", "messageExpression": "object.spec.replicas > 100 ? 'way\\ntoo many' : ''"},
                ],
            }),
        );
        let b = binding(
            "b",
            json!({"policyName": p.metadata.name, "validationActions": ["Deny"]}),
        );
        let mut d = deployment(7);
        d["spec"]["template"] = json!({"spec": {"containers": [{"name": "a", "image": "prod.example.com/app"}, {"name": "b", "image": "docker.io/nginx"}]}});
        let mut r = req(d, "default");
        r.ns["metadata"]["labels"]["environment"] = json!("staging");
        let eval = CompiledPolicy::new(&p).evaluate(&r.view().input);
        assert_eq!(
            eval.failures,
            vec![
                Failure {
                    message: "only staging images are allowed in namespace default".into(),
                    reason: "Invalid".into(),
                    index: 0,
                    error: false
                },
                // An empty messageExpression result falls back to the (trimmed) message.
                Failure {
                    message: "too many replicas".into(),
                    reason: "Invalid".into(),
                    index: 1,
                    error: false
                },
            ]
        );
        // A multi-line message is not used either.
        r.object["spec"]["replicas"] = json!(101);
        let eval = CompiledPolicy::new(&p).evaluate(&r.view().input);
        assert_eq!(eval.failures[1].message, "too many replicas");
        // Exempt, and few replicas: allowed.
        r.object["metadata"]["labels"]["exempt"] = json!("true");
        r.object["spec"]["replicas"] = json!(1);
        assert!(run(&[p], &[b], &r, &Params::default()).denied.is_none());
    }

    #[test]
    fn match_conditions_exclude_kube_system_and_errors_follow_the_failure_policy() {
        let mut p = demo_policy();
        p.spec.match_conditions = vec![api::admissionregistration::MatchCondition {
            name: "exclude-kube-system".into(),
            expression: "request.namespace != 'kube-system'".into(),
        }];
        let b = binding(
            "b",
            json!({"policyName": p.metadata.name, "validationActions": ["Deny"]}),
        );
        assert!(run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(9), "kube-system"),
            &Params::default()
        )
        .denied
        .is_none());
        assert!(run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(9), "default"),
            &Params::default()
        )
        .denied
        .is_some());
        // A condition that fails to evaluate: Fail denies with the error, Ignore skips.
        p.spec.match_conditions[0].expression = "object.spec.nope == 1".into();
        let e = run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(1), "default"),
            &Params::default(),
        )
        .denied
        .expect("denied");
        assert!(e.0.message.ends_with("with binding 'b' denied request: expression 'object.spec.nope == 1' resulted in error: No such key: nope"), "{}", e.0.message);
        p.spec.failure_policy = Some("Ignore".into());
        assert!(run(
            &[p],
            &[b],
            &req(deployment(9), "default"),
            &Params::default()
        )
        .denied
        .is_none());
    }

    #[test]
    fn warn_and_audit_actions() {
        let p = demo_policy();
        let warn = binding(
            "warn-binding",
            json!({"policyName": p.metadata.name, "validationActions": ["Warn", "Audit"]}),
        );
        let out = run(
            std::slice::from_ref(&p),
            &[warn],
            &req(deployment(6), "default"),
            &Params::default(),
        );
        assert!(out.denied.is_none());
        assert_eq!(
            out.warnings,
            vec!["Validation failed for ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'warn-binding': failed expression: object.spec.replicas <= 5".to_string()]
        );
        let audit: Value =
            serde_json::from_str(&out.audit_annotations[VALIDATION_FAILURE_ANNOTATION]).unwrap();
        assert_eq!(
            audit,
            json!([{"message": "failed expression: object.spec.replicas <= 5", "policy": "demo-policy.example.com", "binding": "warn-binding", "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}])
        );
        assert!(out.audit_annotations[VALIDATION_FAILURE_ANNOTATION].starts_with(r#"[{"message":"#));
        // Two bindings: one denies, one only audits.
        let deny = binding(
            "a-deny",
            json!({"policyName": p.metadata.name, "validationActions": ["Deny"]}),
        );
        let audit = binding(
            "z-audit",
            json!({"policyName": p.metadata.name, "validationActions": ["Audit"]}),
        );
        let out = run(
            &[p],
            &[audit, deny],
            &req(deployment(6), "default"),
            &Params::default(),
        );
        assert!(out
            .denied
            .unwrap()
            .0
            .message
            .contains("with binding 'a-deny'"));
        assert!(out.warnings.is_empty());
        assert!(out.audit_annotations[VALIDATION_FAILURE_ANNOTATION].contains("z-audit"));
    }

    #[test]
    fn audit_annotations_of_a_policy() {
        let p = policy(
            "demo-policy.example.com",
            json!({
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas > 50", "messageExpression": "'Deployment spec.replicas set to ' + string(object.spec.replicas)"}],
                "auditAnnotations": [
                    {"key": "high-replica-count", "valueExpression": "object.spec.replicas > 50 ? 'Deployment spec.replicas set to ' + string(object.spec.replicas) : null"},
                    {"key": "blank", "valueExpression": "'   '"},
                ],
            }),
        );
        let b = binding(
            "b",
            json!({"policyName": p.metadata.name, "validationActions": ["Audit"]}),
        );
        let out = run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(60), "default"),
            &Params::default(),
        );
        assert!(out.denied.is_none());
        assert_eq!(
            out.audit_annotations
                .get("demo-policy.example.com/high-replica-count")
                .map(String::as_str),
            Some("Deployment spec.replicas set to 60")
        );
        assert!(!out
            .audit_annotations
            .contains_key("demo-policy.example.com/blank"));
        let out = run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(3), "default"),
            &Params::default(),
        );
        assert!(!out
            .audit_annotations
            .contains_key("demo-policy.example.com/high-replica-count"));
        assert!(out.audit_annotations[VALIDATION_FAILURE_ANNOTATION]
            .contains("Deployment spec.replicas set to 3"));
        // A value of another type denies, whatever the actions.
        let mut q = p.clone();
        q.spec.audit_annotations[1].value_expression = "object.spec.replicas".into();
        let e = run(
            &[q],
            &[b],
            &req(deployment(60), "default"),
            &Params::default(),
        )
        .denied
        .expect("denied");
        assert!(e.0.message.ends_with("denied request: valueExpression 'object.spec.replicas' resulted in unsupported return type: int. Return type must be either string or null."), "{}", e.0.message);
    }

    #[test]
    fn match_constraints_names_exclusions_and_equivalents() {
        let p = |constraints: Value| {
            policy(
                "p",
                json!({"matchConstraints": constraints, "validations": [{"expression": "false"}]}),
            )
        };
        let r = req(deployment(1), "default");
        let compiled = |c: Value| CompiledPolicy::new(&p(c));
        let rule = json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]});
        let v = r.view();
        assert_eq!(
            compiled(json!({"resourceRules": [rule]})).matches(&v.attrs, v.name),
            Some(("apps", "v1"))
        );
        let mut named = rule.clone();
        named["resourceNames"] = json!(["other"]);
        assert_eq!(
            compiled(json!({"resourceRules": [named.clone()]})).matches(&v.attrs, v.name),
            None
        );
        named["resourceNames"] = json!(["other", "nginx"]);
        assert!(compiled(json!({"resourceRules": [named]}))
            .matches(&v.attrs, v.name)
            .is_some());
        let all = json!({"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]});
        assert_eq!(
            compiled(
                json!({"resourceRules": [all.clone()], "excludeResourceRules": [rule.clone()]})
            )
            .matches(&v.attrs, v.name),
            None
        );
        assert!(compiled(json!({"resourceRules": [all.clone()], "objectSelector": {"matchLabels": {"app": "nginx"}}})).matches(&v.attrs, v.name).is_some());
        assert!(compiled(json!({"resourceRules": [all.clone()], "namespaceSelector": {"matchLabels": {"env": "prod"}}})).matches(&v.attrs, v.name).is_none());
        // Equivalent versions, unless Exact.
        let v1beta1 = json!({"apiGroups": ["apps"], "apiVersions": ["v1beta1"], "operations": ["CREATE"], "resources": ["deployments"]});
        let mut attrs = v.attrs;
        attrs.equivalents = &[("apps", "v1beta1")];
        assert_eq!(
            compiled(json!({"resourceRules": [v1beta1.clone()]})).matches(&attrs, "nginx"),
            Some(("apps", "v1beta1"))
        );
        assert_eq!(
            compiled(json!({"resourceRules": [v1beta1], "matchPolicy": "Exact"}))
                .matches(&attrs, "nginx"),
            None
        );
        // The admission configurations themselves are never given to policies.
        assert!(exempt(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies"
        ));
        assert!(!exempt("apps", "deployments"));
    }

    #[test]
    fn evaluation_errors_follow_the_failure_policy() {
        let mut p = demo_policy();
        p.spec.validations[0].expression = "object.spec.nope <= 5".into();
        let b = binding(
            "b",
            json!({"policyName": p.metadata.name, "validationActions": ["Deny"]}),
        );
        let e = run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(1), "default"),
            &Params::default(),
        )
        .denied
        .expect("denied");
        assert_eq!(e.code(), 422);
        assert!(e.0.message.ends_with("denied request: expression 'object.spec.nope <= 5' resulted in error: No such key: nope"), "{}", e.0.message);
        p.spec.failure_policy = Some("Ignore".into());
        assert!(run(
            std::slice::from_ref(&p),
            std::slice::from_ref(&b),
            &req(deployment(1), "default"),
            &Params::default()
        )
        .denied
        .is_none());
        // The name of a create that generates it: the object's generateName.
        let mut d = deployment(9);
        d["metadata"] = json!({"generateName": "web-", "namespace": "default"});
        let r = req(d, "default");
        let e = run(&[demo_policy()], &[b], &r, &Params::default())
            .denied
            .expect("denied");
        assert!(
            e.0.message
                .starts_with("deployments.apps \"web-\" is forbidden: "),
            "{}",
            e.0.message
        );
        // A policy without bindings does nothing.
        assert!(PolicySet::new(&[demo_policy()], &[]).is_empty());
    }

    #[test]
    fn validation_compiles_the_expressions_in_kubes_words() {
        let mut p = demo_policy();
        p.spec.validations[0].expression = "foo > 1".into();
        p.spec.validations.push(api::admissionpolicy::Validation {
            expression: "variables.nope".into(),
            message_expression: "authorizer.group('') == null".into(),
            ..Default::default()
        });
        let errs: Vec<String> = validate_policy(&p)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec.validations[0].expression: Invalid value: \"foo > 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo > 1\n | ^".to_string(),
                "spec.validations[1].expression: Invalid value: \"variables.nope\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'variables' (in container '')\n | variables.nope\n | ^".to_string(),
                "spec.validations[1].messageExpression: Invalid value: \"authorizer.group('') == null\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'authorizer' (in container '')\n | authorizer.group('') == null\n | ^".to_string(),
            ]
        );
        // Once installed, the api's own validate compiles too.
        install_expression_checker();
        assert_eq!(p.validate().len(), 3);
    }

    #[test]
    fn compiled_policies_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<PolicySet>();
        shared::<MatchConditions>();
    }
}
