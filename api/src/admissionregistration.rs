//! admissionregistration.k8s.io/v1: the webhook configurations (docs/design/admission.md),
//! with kube-apiserver's defaults and validation messages.

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::admissionpolicy::go_slice;
use crate::apiextensions::{validate_webhook_client_config, WebhookClientConfig};
use crate::meta::{LabelSelector, ObjectMeta};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// MutatingWebhookConfiguration: webhooks that may change an object before it is stored.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration")]
pub struct MutatingWebhookConfiguration {
    pub metadata: ObjectMeta,
    /// Webhooks is a list of webhooks and the affected resources and operations.
    pub webhooks: Vec<Webhook>,
}

/// ValidatingWebhookConfiguration: webhooks that accept or reject an object.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration")]
pub struct ValidatingWebhookConfiguration {
    pub metadata: ObjectMeta,
    /// Webhooks is a list of webhooks and the affected resources and operations.
    pub webhooks: Vec<Webhook>,
}

/// One webhook of either configuration (a validating one has no `reinvocationPolicy`:
/// [`ValidatingWebhookConfiguration::validate`] refuses it there).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.MutatingWebhook")]
pub struct Webhook {
    /// The name of the admission webhook, fully qualified (`imagepolicy.kubernetes.io`).
    pub name: String,
    /// ClientConfig defines how to communicate with the hook.
    pub client_config: WebhookClientConfig,
    /// Rules describes what operations on what resources/subresources the webhook cares
    /// about.
    pub rules: Vec<RuleWithOperations>,
    /// `Ignore` or `Fail` (the default).
    pub failure_policy: Option<String>,
    /// `Exact` or `Equivalent` (the default).
    pub match_policy: Option<String>,
    /// Whether to run the webhook on an object based on its namespace's labels.
    pub namespace_selector: Option<LabelSelector>,
    /// Whether to run the webhook based on the object's labels.
    pub object_selector: Option<LabelSelector>,
    /// `None` or `NoneOnDryRun` (required).
    pub side_effects: Option<String>,
    /// Seconds to wait for the webhook, 1 to 30 (default 10).
    pub timeout_seconds: Option<i32>,
    /// The AdmissionReview versions the webhook accepts, preferred first.
    pub admission_review_versions: Vec<String>,
    /// `Never` (the default) or `IfNeeded` (mutating webhooks only).
    pub reinvocation_policy: Option<String>,
    /// CEL conditions that must all hold for the request to be sent.
    pub match_conditions: Vec<MatchCondition>,
}

/// RuleWithOperations: operations and the resources they apply to.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.RuleWithOperations")]
pub struct RuleWithOperations {
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

/// MatchCondition: a named CEL expression.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.admissionregistration.v1.MatchCondition")]
pub struct MatchCondition {
    pub name: String,
    pub expression: String,
}

impl Webhook {
    /// kube's defaults: Fail, Equivalent, empty selectors, scope `*`, 10 s, Never.
    pub fn set_defaults(&mut self, mutating: bool) {
        self.failure_policy.get_or_insert_with(|| "Fail".into());
        self.match_policy.get_or_insert_with(|| "Equivalent".into());
        self.namespace_selector.get_or_insert_with(Default::default);
        self.object_selector.get_or_insert_with(Default::default);
        self.timeout_seconds.get_or_insert(10);
        if mutating {
            self.reinvocation_policy
                .get_or_insert_with(|| "Never".into());
        }
        for r in &mut self.rules {
            r.scope.get_or_insert_with(|| "*".into());
        }
        if let Some(s) = self.client_config.service.as_mut() {
            s.port.get_or_insert(443);
        }
    }

    /// The seconds to wait (the default when unset).
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_seconds.unwrap_or(10).clamp(1, 30) as u64)
    }

    /// Whether a failure to call it lets the request through.
    pub fn ignores_failures(&self) -> bool {
        self.failure_policy.as_deref() == Some("Ignore")
    }

    fn validate(&self, at: &str, mutating: bool) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Err(e) = fully_qualified_name(&self.name) {
            errs.push(e.at(format!("{at}.name"), &self.name));
        }
        for (i, r) in self.rules.iter().enumerate() {
            errs.extend(r.validate(&format!("{at}.rules[{i}]")));
        }
        let one_of = |field: &str, value: &Option<String>, ok: &[&str], errs: &mut Vec<_>| {
            if let Some(v) = value {
                if !ok.contains(&v.as_str()) {
                    errs.push(FieldError::not_supported(format!("{at}.{field}"), v, ok));
                }
            }
        };
        one_of(
            "failurePolicy",
            &self.failure_policy,
            &["Fail", "Ignore"],
            &mut errs,
        );
        one_of(
            "matchPolicy",
            &self.match_policy,
            &["Equivalent", "Exact"],
            &mut errs,
        );
        match &self.side_effects {
            None => errs.push(FieldError::required_msg(
                format!("{at}.sideEffects"),
                "must specify one of None, NoneOnDryRun",
            )),
            v => one_of("sideEffects", v, &["None", "NoneOnDryRun"], &mut errs),
        }
        if let Some(t) = self.timeout_seconds.filter(|t| !(1..=30).contains(t)) {
            errs.push(FieldError::invalid_raw(
                format!("{at}.timeoutSeconds"),
                t,
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
        for (field, sel) in [
            ("namespaceSelector", &self.namespace_selector),
            ("objectSelector", &self.object_selector),
        ] {
            if let Some(sel) = sel {
                errs.extend(validation::validate_label_selector(
                    sel,
                    &format!("{at}.{field}"),
                ));
            }
        }
        errs.extend(validate_webhook_client_config(
            &self.client_config,
            &format!("{at}.clientConfig"),
        ));
        if mutating {
            one_of(
                "reinvocationPolicy",
                &self.reinvocation_policy,
                &["IfNeeded", "Never"],
                &mut errs,
            );
        } else if self.reinvocation_policy.is_some() {
            errs.push(FieldError::forbidden(
                format!("{at}.reinvocationPolicy"),
                "validating webhooks are not reinvoked",
            ));
        }
        errs.extend(crate::admissionpolicy::validate_match_conditions(
            &self.match_conditions,
            false,
            &format!("{at}.matchConditions"),
            &crate::admissionpolicy::process_checker,
        ));
        errs.extend(validation::review_versions(
            &self.admission_review_versions,
            &format!("{at}.admissionReviewVersions"),
            Some("must specify one of v1, v1beta1"),
        ));
        errs
    }
}

impl RuleWithOperations {
    /// kube's `validateRuleWithOperations`.
    pub(crate) fn validate(&self, at: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.operations.is_empty() {
            errs.push(FieldError::required(format!("{at}.operations")));
        }
        if self.operations.len() > 1 && self.operations.iter().any(|o| o == "*") {
            errs.push(FieldError::invalid_raw(
                format!("{at}.operations"),
                go_slice("admissionregistration.OperationType", &self.operations),
                "if '*' is present, must not specify other operations",
            ));
        }
        const OPS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
        for (i, o) in self.operations.iter().enumerate() {
            if !OPS.contains(&o.as_str()) {
                errs.push(FieldError::not_supported(
                    format!("{at}.operations[{i}]"),
                    o,
                    OPS,
                ));
            }
        }
        if self.api_groups.is_empty() {
            errs.push(FieldError::required(format!("{at}.apiGroups")));
        }
        if self.api_groups.len() > 1 && self.api_groups.iter().any(|g| g == "*") {
            errs.push(FieldError::invalid_raw(
                format!("{at}.apiGroups"),
                go_slice("string", &self.api_groups),
                "if '*' is present, must not specify other API groups",
            ));
        }
        if self.api_versions.is_empty() {
            errs.push(FieldError::required(format!("{at}.apiVersions")));
        }
        if self.api_versions.len() > 1 && self.api_versions.iter().any(|v| v == "*") {
            errs.push(FieldError::invalid_raw(
                format!("{at}.apiVersions"),
                go_slice("string", &self.api_versions),
                "if '*' is present, must not specify other API versions",
            ));
        }
        for (i, v) in self.api_versions.iter().enumerate() {
            if v.is_empty() {
                errs.push(FieldError::required(format!("{at}.apiVersions[{i}]")));
            }
        }
        errs.extend(validate_resources(
            &self.resources,
            &format!("{at}.resources"),
        ));
        if let Some(s) = &self.scope {
            const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
            if !SCOPES.contains(&s.as_str()) {
                errs.push(FieldError::not_supported(format!("{at}.scope"), s, SCOPES));
            }
        }
        errs
    }
}

/// Resources with subresources: `x`, `x/y`, `x/*`, `*/y`, `*`, `*/*`, without overlaps.
fn validate_resources(resources: &[String], at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if resources.is_empty() {
        errs.push(FieldError::required(at));
    }
    let mut wildcard_subs = HashSet::new();
    let mut wildcard_resources = HashSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, r) in resources.iter().enumerate() {
        if r.is_empty() {
            errs.push(FieldError::required(format!("{at}[{i}]")));
            continue;
        }
        double |= r == "*/*";
        single |= r == "*";
        let Some((res, sub)) = r.split_once('/') else {
            plain = r != "*";
            continue;
        };
        if wildcard_subs.contains(res) {
            errs.push(FieldError::invalid(
                format!("{at}[{i}]"),
                r,
                format!("if '{res}/*' is present, must not specify {r}"),
            ));
        }
        if wildcard_resources.contains(sub) {
            errs.push(FieldError::invalid(
                format!("{at}[{i}]"),
                r,
                format!("if '*/{sub}' is present, must not specify {r}"),
            ));
        }
        if sub == "*" {
            wildcard_subs.insert(res);
        }
        if res == "*" {
            wildcard_resources.insert(sub);
        }
    }
    if resources.len() > 1 && double {
        errs.push(FieldError::invalid_raw(
            at,
            go_slice("string", resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        errs.push(FieldError::invalid_raw(
            at,
            go_slice("string", resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    errs
}

/// A webhook's name: a DNS subdomain of at least three segments.
fn fully_qualified_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Required);
    }
    validation::dns1123_subdomain(name).map_err(NameError::Invalid)?;
    if name.split('.').count() < 3 {
        return Err(NameError::Invalid(
            "should be a domain with at least three segments separated by dots".into(),
        ));
    }
    Ok(())
}

enum NameError {
    Required,
    Invalid(String),
}

impl NameError {
    fn at(self, field: String, value: &str) -> FieldError {
        match self {
            NameError::Required => FieldError::required(field),
            NameError::Invalid(why) => FieldError::invalid(field, value, why),
        }
    }
}

/// Webhook names unique within a configuration, and each webhook's checks.
fn validate_webhooks(webhooks: &[Webhook], mutating: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = HashSet::new();
    for (i, w) in webhooks.iter().enumerate() {
        let at = format!("webhooks[{i}]");
        errs.extend(w.validate(&at, mutating));
        if !w.name.is_empty() && !names.insert(w.name.as_str()) {
            errs.push(FieldError::duplicate(format!("{at}.name"), &w.name));
        }
    }
    errs
}

impl Resource for MutatingWebhookConfiguration {
    const KIND: Kind = Kind::MutatingWebhookConfiguration;
    crate::resource_basics!(MutatingWebhookConfiguration);

    fn set_defaults(&mut self) {
        self.webhooks.iter_mut().for_each(|w| w.set_defaults(true));
    }

    /// kube's ValidateMutatingWebhookConfiguration: the name a DNS subdomain, then each
    /// webhook.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Self::KIND);
        errs.extend(validate_webhooks(&self.webhooks, true));
        errs
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.webhooks)
    }
}

impl Resource for ValidatingWebhookConfiguration {
    const KIND: Kind = Kind::ValidatingWebhookConfiguration;
    crate::resource_basics!(ValidatingWebhookConfiguration);

    fn set_defaults(&mut self) {
        self.webhooks.iter_mut().for_each(|w| w.set_defaults(false));
    }

    /// kube's ValidateValidatingWebhookConfiguration.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Self::KIND);
        errs.extend(validate_webhooks(&self.webhooks, false));
        errs
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.webhooks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(webhook: serde_json::Value) -> ValidatingWebhookConfiguration {
        serde_json::from_value(json!({"metadata": {"name": "c"}, "webhooks": [webhook]}))
            .expect("decodes")
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn a_documented_webhook_is_valid_and_defaulted() {
        let mut c = config(json!({
            "name": "deny.site.example.com",
            "clientConfig": {"service": {"namespace": "default", "name": "hook"}, "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }));
        assert!(c.validate().is_empty(), "{:?}", messages(&c.validate()));
        c.set_defaults();
        let w = &c.webhooks[0];
        assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(w.match_policy.as_deref(), Some("Equivalent"));
        assert_eq!(w.timeout_seconds, Some(10));
        assert_eq!(w.rules[0].scope.as_deref(), Some("*"));
        assert_eq!(w.reinvocation_policy, None);
        assert_eq!(w.client_config.service.as_ref().unwrap().port, Some(443));
    }

    #[test]
    fn kube_refusals_with_its_messages() {
        let c = config(json!({
            "name": "short.name",
            "clientConfig": {"url": "http://h/x"},
            "rules": [{"operations": ["CREATE", "*"], "apiGroups": ["*", "apps"], "apiVersions": ["v1"], "resources": ["*/*", "pods"]}],
            "sideEffects": "Some",
            "timeoutSeconds": 31,
            "admissionReviewVersions": ["v2"],
            "reinvocationPolicy": "IfNeeded",
        }));
        let got = messages(&c.validate());
        for want in [
            r#"webhooks[0].name: Invalid value: "short.name": should be a domain with at least three segments separated by dots"#,
            r#"webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{"CREATE", "*"}: if '*' is present, must not specify other operations"#,
            r#"webhooks[0].rules[0].apiGroups: Invalid value: []string{"*", "apps"}: if '*' is present, must not specify other API groups"#,
            r#"webhooks[0].rules[0].resources: Invalid value: []string{"*/*", "pods"}: if '*/*' is present, must not specify other resources"#,
            r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#,
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#,
            r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1"#,
            "webhooks[0].reinvocationPolicy: Forbidden: validating webhooks are not reinvoked",
        ] {
            assert!(got.iter().any(|g| g == want), "{want}\nnot in {got:#?}");
        }
    }

    #[test]
    fn side_effects_are_required_and_names_unique() {
        let hook = json!({"name": "a.b.example", "clientConfig": {"url": "https://h/"}, "admissionReviewVersions": ["v1"]});
        let c: MutatingWebhookConfiguration =
            serde_json::from_value(json!({"webhooks": [hook.clone(), hook]})).unwrap();
        let got = messages(&c.validate());
        assert!(got.contains(
            &"webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"
                .to_string()
        ));
        assert!(got.contains(&r#"webhooks[1].name: Duplicate value: "a.b.example""#.to_string()));
    }
}
