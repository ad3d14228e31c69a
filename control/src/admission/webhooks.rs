//! Which admission webhooks a request goes to (docs/design/admission.md §1): a webhook's
//! rules (operations, groups, versions, resources with subresources, scope, with
//! `matchPolicy: Equivalent` also at the other group versions the resource is served at),
//! its namespace selector (a Namespace against its own labels, cluster-scoped objects
//! always) and its object selector (the new object's labels or the old one's), as
//! kube-apiserver's `rules.Matcher`, `namespace.Matcher` and `object.Matcher` decide.
//! (`matchConditions` are CEL and evaluated with the request.)

use std::collections::BTreeMap;

use api::admissionregistration::{RuleWithOperations, Webhook};
use api::meta::LabelSelector;
use api::selector::Selector;

/// An admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What a request is about, for matching.
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub version: &'a str,
    /// The plural (`pods`).
    pub resource: &'a str,
    /// `""` for the main resource.
    pub subresource: &'a str,
    pub namespaced: bool,
    /// The other group versions the same resource is served at (for `Equivalent`).
    pub equivalents: &'a [(&'a str, &'a str)],
    /// The labels of the object's namespace (of a Namespace: its own), when it has one.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    pub object_labels: Option<&'a BTreeMap<String, String>>,
    pub old_object_labels: Option<&'a BTreeMap<String, String>>,
}

/// Whether the request goes to `hook`; when it does, the group and version its rule names
/// (the request's own, or with `Equivalent` the equivalent one the object is sent at).
pub fn matches<'a>(hook: &Webhook, attrs: &Attributes<'a>) -> Option<(&'a str, &'a str)> {
    let at = matching_version(hook, attrs)?;
    (namespace_matches(hook.namespace_selector.as_ref(), attrs)
        && object_matches(hook.object_selector.as_ref(), attrs))
    .then_some(at)
}

/// Whether a rule of `hook` takes the request, before its selectors; the group and version
/// as [`matches`] answers them.
pub fn matching_version<'a>(hook: &Webhook, attrs: &Attributes<'a>) -> Option<(&'a str, &'a str)> {
    if hook
        .rules
        .iter()
        .any(|r| rule_matches(r, attrs, attrs.group, attrs.version))
    {
        return Some((attrs.group, attrs.version));
    }
    if hook.match_policy.as_deref() == Some("Exact") {
        return None;
    }
    attrs
        .equivalents
        .iter()
        .copied()
        .find(|(g, v)| hook.rules.iter().any(|r| rule_matches(r, attrs, g, v)))
}

/// One rule against the request at `group`/`version`.
pub fn rule_matches(
    rule: &RuleWithOperations,
    attrs: &Attributes<'_>,
    group: &str,
    version: &str,
) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    any(&rule.operations, attrs.operation.as_str())
        && any(&rule.api_groups, group)
        && any(&rule.api_versions, version)
        && rule
            .resources
            .iter()
            .any(|r| resource_matches(r, attrs.resource, attrs.subresource))
        && match rule.scope.as_deref().unwrap_or("*") {
            "Cluster" => !attrs.namespaced,
            "Namespaced" => attrs.namespaced,
            _ => true,
        }
}

/// `pods`, `pods/status`, `pods/*`, `*`, `*/status`, `*/*`.
fn resource_matches(pattern: &str, resource: &str, subresource: &str) -> bool {
    let (res, sub) = pattern.split_once('/').unwrap_or((pattern, ""));
    (res == "*" || res == resource) && (sub == "*" || sub == subresource)
}

fn selects(selector: Option<&LabelSelector>, labels: Option<&BTreeMap<String, String>>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
        return true;
    }
    let empty = BTreeMap::new();
    Selector::from_label_selector(selector).is_ok_and(|s| s.matches(labels.unwrap_or(&empty)))
}

/// Whether `hook` selects by the labels of the request's namespace (a namespaceSelector
/// that is not empty): only then is the namespace read for it.
pub fn selects_namespaces(hook: &Webhook) -> bool {
    hook.namespace_selector
        .as_ref()
        .is_some_and(|s| !s.match_labels.is_empty() || !s.match_expressions.is_empty())
}

fn namespace_matches(selector: Option<&LabelSelector>, attrs: &Attributes<'_>) -> bool {
    let is_namespace = attrs.group.is_empty() && attrs.resource == "namespaces";
    if !attrs.namespaced && !is_namespace {
        return true;
    }
    selects(selector, attrs.namespace_labels)
}

fn object_matches(selector: Option<&LabelSelector>, attrs: &Attributes<'_>) -> bool {
    selects(selector, attrs.object_labels)
        || (attrs.old_object_labels.is_some() && selects(selector, attrs.old_object_labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(v: serde_json::Value) -> Webhook {
        let mut h: Webhook = serde_json::from_value(v).unwrap();
        h.set_defaults(true);
        h
    }

    fn pod_create<'a>(
        ns: &'a BTreeMap<String, String>,
        obj: &'a BTreeMap<String, String>,
    ) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            group: "",
            version: "v1",
            resource: "pods",
            subresource: "",
            namespaced: true,
            equivalents: &[],
            namespace_labels: Some(ns),
            object_labels: Some(obj),
            old_object_labels: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rules_operations_resources_and_scope() {
        let (ns, obj) = (labels(&[]), labels(&[]));
        let a = pod_create(&ns, &obj);
        let rule = |r: serde_json::Value| hook(json!({"rules": [r]}));
        assert!(matches(&rule(json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]})), &a).is_some());
        assert!(matches(&rule(json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]})), &a).is_some());
        assert!(matches(&rule(json!({"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]})), &a).is_none());
        assert!(matches(&rule(json!({"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["pods"]})), &a).is_none());
        assert!(matches(&rule(json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/status"]})), &a).is_none());
        assert!(matches(&rule(json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Cluster"})), &a).is_none());
        let status = Attributes {
            subresource: "status",
            operation: Operation::Update,
            ..a
        };
        assert!(matches(&rule(json!({"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["*/status"]})), &status).is_some());
        assert!(matches(&rule(json!({"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/*"]})), &status).is_some());
        assert!(matches(&rule(json!({"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["*"]})), &status).is_none());
    }

    #[test]
    fn equivalent_versions_unless_exact() {
        let (ns, obj) = (labels(&[]), labels(&[]));
        let hpa = Attributes {
            group: "autoscaling",
            version: "v2",
            resource: "horizontalpodautoscalers",
            equivalents: &[("autoscaling", "v1")],
            ..pod_create(&ns, &obj)
        };
        let v1_rule = json!({"operations": ["CREATE"], "apiGroups": ["autoscaling"], "apiVersions": ["v1"], "resources": ["horizontalpodautoscalers"]});
        assert_eq!(
            matches(&hook(json!({"rules": [v1_rule]})), &hpa),
            Some(("autoscaling", "v1"))
        );
        assert_eq!(
            matches(
                &hook(json!({"rules": [v1_rule], "matchPolicy": "Exact"})),
                &hpa
            ),
            None
        );
    }

    #[test]
    fn namespace_and_object_selectors() {
        let ns = labels(&[("env", "prod")]);
        let obj = labels(&[("app", "web")]);
        let a = pod_create(&ns, &obj);
        let all = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        let with = |ns_sel: serde_json::Value, obj_sel: serde_json::Value| {
            hook(json!({"rules": [all], "namespaceSelector": ns_sel, "objectSelector": obj_sel}))
        };
        assert!(matches(
            &with(json!({"matchLabels": {"env": "prod"}}), json!({})),
            &a
        )
        .is_some());
        assert!(matches(&with(json!({"matchLabels": {"env": "dev"}}), json!({})), &a).is_none());
        assert!(matches(
            &with(
                json!({}),
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]})
            ),
            &a
        )
        .is_some());
        assert!(matches(&with(json!({}), json!({"matchLabels": {"app": "db"}})), &a).is_none());
        // The old object's labels match too (an update that removes the label).
        let old = labels(&[("app", "db")]);
        let update = Attributes {
            operation: Operation::Update,
            old_object_labels: Some(&old),
            ..a
        };
        assert!(matches(
            &with(json!({}), json!({"matchLabels": {"app": "db"}})),
            &update
        )
        .is_some());
        // Cluster-scoped objects pass the namespace selector; a Namespace is judged by its own.
        let node = Attributes {
            resource: "nodes",
            namespaced: false,
            namespace_labels: None,
            ..a
        };
        assert!(matches(
            &with(json!({"matchLabels": {"env": "dev"}}), json!({})),
            &node
        )
        .is_some());
        let namespace = Attributes {
            resource: "namespaces",
            namespaced: false,
            ..a
        };
        assert!(matches(
            &with(json!({"matchLabels": {"env": "dev"}}), json!({})),
            &namespace
        )
        .is_none());
    }
}
