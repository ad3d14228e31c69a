//! Validation results, the name rules Kubernetes applies to every object, and the per-kind
//! validators (Kubernetes' ValidateObjectMeta, ValidatePodSpec, ...) with Kubernetes' field
//! paths, reasons and messages.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::apps::{DaemonSetUpdateStrategy, DeploymentStrategy};
use crate::core::{
    Container, EndpointSubset, NodeSelectorTerm, NodeSpec, PodAffinityTerm, PodSpec,
    PodTemplateSpec, Probe, ServiceSpec,
};
use crate::meta::{IntOrString, LabelSelector, ObjectMeta};
use crate::object::{AnyObject, Kind};
use crate::quantity::compare_quantities;

/// One reason an object is invalid, reported as a `StatusCause` in a 422 Invalid answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`,
    /// `FieldValueDuplicate`, `FieldValueForbidden`, `FieldValueTooLong`.
    pub reason: String,
    /// The field path, as `spec.template.spec.containers[0].name`.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>) -> FieldError {
        let field = field.into();
        FieldError {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field,
        }
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        why: impl Into<String>,
    ) -> FieldError {
        let field = field.into();
        FieldError {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: \"{value}\": {}", why.into()),
            field,
        }
    }

    /// `Invalid value: V: why` with `V` as Go prints it unquoted (a number, a `[]string{...}`).
    pub fn invalid_raw(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        why: impl Into<String>,
    ) -> FieldError {
        FieldError {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value}: {}", why.into()),
            field: field.into(),
        }
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        supported: &[&str],
    ) -> FieldError {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        FieldError {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: \"{value}\": supported values: {list}"),
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, why: impl Into<String>) -> FieldError {
        FieldError {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {}", why.into()),
            field: field.into(),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: impl std::fmt::Display) -> FieldError {
        FieldError {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: \"{value}\""),
            field: field.into(),
        }
    }
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// A DNS-1123 label (namespaces, services): at most 63 characters.
pub fn dns1123_label(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 63 {
        return Err(format!("{DNS1123_LABEL_MSG} (must be 1-63 characters)"));
    }
    let b = value.as_bytes();
    let ok_inner = b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    let ok_ends = b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric();
    if ok_inner && ok_ends {
        Ok(())
    } else {
        Err(DNS1123_LABEL_MSG.to_string())
    }
}

/// A DNS-1123 subdomain (most object names): at most 253 characters.
pub fn dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 253 {
        return Err(format!(
            "{DNS1123_SUBDOMAIN_MSG} (must be 1-253 characters)"
        ));
    }
    if value.split('.').all(|part| dns1123_label(part).is_ok()) {
        Ok(())
    } else {
        Err(DNS1123_SUBDOMAIN_MSG.to_string())
    }
}

// ---------------------------------------------------------------------------------------
// Everything below: the rules of Kubernetes' ValidateObjectMeta, ValidatePodSpec and the
// per-kind validators, with Kubernetes' field paths and messages.

/// The most a ConfigMap's or Secret's data may hold.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;
/// The most all annotations of an object may hold together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

impl FieldError {
    pub fn not_found(field: impl Into<String>, value: impl std::fmt::Display) -> FieldError {
        FieldError {
            reason: "FieldValueNotFound".into(),
            message: format!("Not found: \"{value}\""),
            field: field.into(),
        }
    }

    /// `Required value: why`.
    pub fn required_msg(field: impl Into<String>, why: impl Into<String>) -> FieldError {
        FieldError {
            reason: "FieldValueRequired".into(),
            message: format!("Required value: {}", why.into()),
            field: field.into(),
        }
    }

    /// `Too many: n: must have at most max items`.
    pub fn too_many(field: impl Into<String>, n: usize, max: usize) -> FieldError {
        FieldError {
            reason: "FieldValueTooMany".into(),
            message: format!("Too many: {n}: must have at most {max} items"),
            field: field.into(),
        }
    }

    pub fn too_long(field: impl Into<String>, max: usize) -> FieldError {
        FieldError {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: must have at most {max} bytes"),
            field: field.into(),
        }
    }
}

const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_KEY_MSG: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// A DNS-1035 label (service names): a DNS-1123 label that starts with a letter.
pub fn dns1035_label(value: &str) -> Result<(), String> {
    match dns1123_label(value) {
        Ok(()) if value.as_bytes()[0].is_ascii_lowercase() => Ok(()),
        Ok(()) => Err(DNS1035_LABEL_MSG.to_string()),
        Err(_) if value.is_empty() || value.len() > 63 => {
            Err(format!("{DNS1035_LABEL_MSG} (must be 1-63 characters)"))
        }
        Err(_) => Err(DNS1035_LABEL_MSG.to_string()),
    }
}

fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A qualified name (label and annotation keys, finalizers): `[prefix/]name`, the prefix a
/// DNS-1123 subdomain and the name at most 63 characters.
pub fn qualified_name(value: &str) -> Result<(), String> {
    let (prefix, name) = match value.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        dns1123_subdomain(p).map_err(|e| format!("prefix part {e}"))?;
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    if !name_part_ok(name) {
        return Err(format!(
            "{QUALIFIED_NAME_MSG} (e.g. 'MyName',  or 'my.name',  or '123-abc')"
        ));
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of the name-part alphabet.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if name_part_ok(value) {
        Ok(())
    } else {
        Err(LABEL_VALUE_MSG.into())
    }
}

/// A ConfigMap or Secret key: alphanumerics, `-`, `_`, `.`, not `.` or `..`.
pub fn config_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 253 {
        return Err(format!("{CONFIG_KEY_MSG} (must be 1-253 characters)"));
    }
    if key == "." || key == ".." || key.starts_with("..") {
        return Err("must not be '.' or '..' or start with '..'".into());
    }
    if key
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        Ok(())
    } else {
        Err(CONFIG_KEY_MSG.into())
    }
}

/// An IANA service name (named ports): 1-15 lowercase alphanumerics or '-', a letter
/// among them, no leading, trailing or double '-'.
pub fn iana_svc_name(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 15 {
        return Err("must be no more than 15 characters".into());
    }
    let ok = value
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && value.bytes().any(|c| c.is_ascii_lowercase())
        && !value.starts_with('-')
        && !value.ends_with('-')
        && !value.contains("--");
    if ok {
        Ok(())
    } else {
        Err("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), must contain at least one letter (a-z), and hyphens cannot be adjacent to other hyphens".into())
    }
}

pub(crate) fn check_config_key(errs: &mut Vec<FieldError>, field: &str, key: &str) {
    if let Err(why) = config_key(key) {
        errs.push(FieldError::invalid(format!("{field}[{key}]"), key, why));
    }
}

pub(crate) fn check_non_negative<T: Into<i64> + Copy + std::fmt::Display>(
    errs: &mut Vec<FieldError>,
    field: &str,
    v: Option<T>,
) {
    if let Some(v) = v {
        if v.into() < 0 {
            errs.push(FieldError::invalid(
                field,
                v,
                "must be greater than or equal to 0",
            ));
        }
    }
}

fn check_port(errs: &mut Vec<FieldError>, field: String, port: i32) {
    if !(1..=65535).contains(&port) {
        errs.push(FieldError::invalid(
            field,
            port,
            "must be between 1 and 65535, inclusive",
        ));
    }
}

fn check_one_of(errs: &mut Vec<FieldError>, field: String, value: &str, allowed: &[&str]) {
    if !allowed.contains(&value) {
        errs.push(FieldError::not_supported(field, value, allowed));
    }
}

/// Labels: qualified-name keys and label values.
/// Annotations: qualified names as keys, and at most [`MAX_ANNOTATIONS_BYTES`] together.
pub fn validate_annotations(
    annotations: &BTreeMap<String, String>,
    field: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations {
        total += k.len() + v.len();
        if let Err(why) = qualified_name(&k.to_ascii_lowercase()) {
            errs.push(FieldError::invalid(field, k, why));
        }
    }
    if total > MAX_ANNOTATIONS_BYTES {
        errs.push(FieldError::too_long(field, MAX_ANNOTATIONS_BYTES));
    }
    errs
}

/// Errors as Kubernetes' `ErrorList.ToAggregate` prints them: `field: message`, several in
/// brackets.
pub fn aggregate(errs: &[FieldError]) -> String {
    let each: Vec<String> = errs
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect();
    match each.len() {
        1 => each.into_iter().next().unwrap_or_default(),
        _ => format!("[{}]", each.join(", ")),
    }
}

pub fn validate_labels(labels: &BTreeMap<String, String>, field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in labels {
        if let Err(why) = qualified_name(k) {
            errs.push(FieldError::invalid(field, k, why));
        }
        if let Err(why) = label_value(v) {
            errs.push(FieldError::invalid(field, v, why));
        }
    }
    errs
}

/// Kubernetes' ValidateObjectMeta: name (DNS-1123 subdomain; a DNS-1123 label for
/// Namespace and a DNS-1035 label for Service) or generateName, namespace format, labels,
/// annotations. The server fills the namespace, so only its format is checked.
pub fn validate_meta(meta: &ObjectMeta, kind: Kind) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name_rule: fn(&str) -> Result<(), String> = match kind {
        Kind::Namespace => dns1123_label,
        Kind::Service => dns1035_label,
        Kind::Role | Kind::ClusterRole | Kind::RoleBinding | Kind::ClusterRoleBinding => {
            crate::rbac::path_segment_name
        }
        // `version.group`, checked against the spec by the kind (`v1.` for the core group).
        Kind::APIService => crate::rbac::path_segment_name,
        _ => dns1123_subdomain,
    };
    let generate = meta.generate_name.as_deref().unwrap_or("");
    if meta.name.is_empty() {
        if generate.is_empty() {
            errs.push(FieldError {
                reason: "FieldValueRequired".into(),
                field: "metadata.name".into(),
                message: "Required value: name or generateName is required".into(),
            });
        }
    } else if let Err(why) = name_rule(&meta.name) {
        errs.push(FieldError::invalid("metadata.name", &meta.name, why));
    }
    if !generate.is_empty() {
        // A prefix: the generated suffix makes a trailing '-' fine.
        let prefix = generate.trim_end_matches('-');
        if let Err(why) = name_rule(if prefix.is_empty() { "x" } else { prefix }) {
            errs.push(FieldError::invalid("metadata.generateName", generate, why));
        }
    }
    if let Some(ns) = meta.namespace.as_deref() {
        if !ns.is_empty() {
            if let Err(why) = dns1123_label(ns) {
                errs.push(FieldError::invalid("metadata.namespace", ns, why));
            }
        }
    }
    errs.extend(validate_labels(&meta.labels, "metadata.labels"));
    errs.extend(validate_annotations(
        &meta.annotations,
        "metadata.annotations",
    ));
    for (i, f) in meta.finalizers.iter().enumerate() {
        if let Err(why) = qualified_name(f) {
            errs.push(FieldError::invalid(
                format!("metadata.finalizers[{i}]"),
                f,
                why,
            ));
        }
    }
    if let Some(g) = meta.deletion_grace_period_seconds {
        if g < 0 {
            errs.push(FieldError::invalid(
                "metadata.deletionGracePeriodSeconds",
                g,
                "must be greater than or equal to 0",
            ));
        }
    }
    for (i, o) in meta.owner_references.iter().enumerate() {
        let p = format!("metadata.ownerReferences[{i}]");
        for (field, value) in [
            ("apiVersion", &o.api_version),
            ("kind", &o.kind),
            ("name", &o.name),
            ("uid", &o.uid),
        ] {
            if value.is_empty() {
                errs.push(FieldError::required(format!("{p}.{field}")));
            }
        }
    }
    if meta
        .owner_references
        .iter()
        .filter(|o| o.controller == Some(true))
        .count()
        > 1
    {
        errs.push(FieldError::invalid(
            "metadata.ownerReferences",
            "",
            "Only one reference can have Controller set to true",
        ));
    }
    errs
}

/// A metav1.LabelSelector's own rules.
pub fn validate_label_selector(sel: &LabelSelector, field: &str) -> Vec<FieldError> {
    let mut errs = validate_labels(&sel.match_labels, &format!("{field}.matchLabels"));
    for (i, r) in sel.match_expressions.iter().enumerate() {
        let p = format!("{field}.matchExpressions[{i}]");
        if let Err(why) = qualified_name(&r.key) {
            errs.push(FieldError::invalid(format!("{p}.key"), &r.key, why));
        }
        match r.operator.as_str() {
            "In" | "NotIn" => {
                if r.values.is_empty() {
                    errs.push(FieldError {
                        reason: "FieldValueRequired".into(),
                        field: format!("{p}.values"),
                        message:
                            "Required value: must be specified when `operator` is 'In' or 'NotIn'"
                                .into(),
                    });
                }
            }
            "Exists" | "DoesNotExist" => {
                if !r.values.is_empty() {
                    errs.push(FieldError::forbidden(
                        format!("{p}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            op => errs.push(FieldError::invalid(
                format!("{p}.operator"),
                op,
                "not a valid selector operator",
            )),
        }
        for v in &r.values {
            if let Err(why) = label_value(v) {
                errs.push(FieldError::invalid(format!("{p}.values"), v, why));
            }
        }
    }
    errs
}

/// Go's `%v` of a map, as Kubernetes prints label maps in messages: `map[a:b c:d]`.
pub(crate) fn go_map(m: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", inner.join(" "))
}

/// The selector and template of a Deployment, ReplicaSet or DaemonSet: a non-empty valid
/// selector that matches the template's labels, and a valid pod template whose restart
/// policy is Always. `what` names the kind in messages (`deployment`).
pub fn validate_workload_template(
    selector: Option<&LabelSelector>,
    template: &PodTemplateSpec,
    what: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match selector {
        None => errs.push(FieldError::required("spec.selector")),
        Some(sel) if sel.match_labels.is_empty() && sel.match_expressions.is_empty() => {
            errs.push(FieldError::invalid(
                "spec.selector",
                "",
                format!("empty selector is invalid for {what}"),
            ));
        }
        Some(sel) => {
            let sel_errs = validate_label_selector(sel, "spec.selector");
            let sel_ok = sel_errs.is_empty();
            errs.extend(sel_errs);
            if sel_ok {
                let matches = crate::selector::Selector::from_label_selector(sel)
                    .map(|s| s.matches(&template.metadata.labels))
                    .unwrap_or(false);
                if !matches {
                    errs.push(FieldError::invalid(
                        "spec.template.metadata.labels",
                        go_map(&template.metadata.labels),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
        }
    }
    errs.extend(validate_controller_pod_template(template, "ReplicaSet"));
    errs
}

/// The pod template of a controller that keeps pods running (ReplicaSet, Deployment,
/// DaemonSet, ReplicationController): valid labels and pod spec, restart policy Always, no
/// activeDeadlineSeconds. `kind` names the controller in that last message, as Kubernetes
/// does (Deployments and DaemonSets say ReplicaSet too).
pub fn validate_controller_pod_template(template: &PodTemplateSpec, kind: &str) -> Vec<FieldError> {
    let mut errs = validate_labels(&template.metadata.labels, "spec.template.metadata.labels");
    errs.extend(validate_pod_spec(&template.spec, "spec.template.spec"));
    if let Some(rp) = &template.spec.restart_policy {
        if rp != "Always" {
            errs.push(FieldError::not_supported(
                "spec.template.spec.restartPolicy",
                rp,
                &["Always"],
            ));
        }
    }
    if template.spec.active_deadline_seconds.is_some() {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
    errs
}

fn validate_int_or_percent(errs: &mut Vec<FieldError>, field: &str, v: &IntOrString) -> bool {
    match v {
        IntOrString::Int(i) if *i < 0 => {
            errs.push(FieldError::invalid(
                field,
                i,
                "must be greater than or equal to 0",
            ));
            false
        }
        IntOrString::Int(_) => true,
        IntOrString::String(s) => {
            let pct = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok());
            match pct {
                None => {
                    errs.push(FieldError::invalid(
                        field,
                        s,
                        "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%')",
                    ));
                    false
                }
                Some(p) if !(0..=100).contains(&p) => {
                    errs.push(FieldError::invalid(
                        field,
                        s,
                        "must not be greater than 100%",
                    ));
                    false
                }
                Some(_) => true,
            }
        }
    }
}

fn is_zero(v: &Option<IntOrString>) -> bool {
    match v {
        None => true,
        Some(IntOrString::Int(i)) => *i == 0,
        Some(IntOrString::String(s)) => s == "0%",
    }
}

/// A Deployment's `spec.strategy`.
pub fn validate_deployment_strategy(st: &DeploymentStrategy) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ty = st.type_.as_deref().unwrap_or("RollingUpdate");
    match ty {
        "Recreate" => {
            if st.rolling_update.is_some() {
                errs.push(FieldError::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = &st.rolling_update {
                let p = "spec.strategy.rollingUpdate";
                let mut ok = true;
                if let Some(v) = &ru.max_unavailable {
                    ok &= validate_int_or_percent(&mut errs, &format!("{p}.maxUnavailable"), v);
                }
                if let Some(v) = &ru.max_surge {
                    ok &= validate_int_or_percent(&mut errs, &format!("{p}.maxSurge"), v);
                }
                if ok && is_zero(&ru.max_unavailable) && is_zero(&ru.max_surge) {
                    errs.push(FieldError::invalid(
                        format!("{p}.maxUnavailable"),
                        ru.max_unavailable
                            .as_ref()
                            .map(|v| v.to_string())
                            .unwrap_or_else(|| "0".into()),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.strategy.type",
            other,
            &["Recreate", "RollingUpdate"],
        )),
    }
    errs
}

/// A DaemonSet's `spec.updateStrategy`.
pub fn validate_daemonset_strategy(st: &DaemonSetUpdateStrategy) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ty = st.type_.as_deref().unwrap_or("RollingUpdate");
    match ty {
        "OnDelete" => {}
        "RollingUpdate" => {
            if let Some(ru) = &st.rolling_update {
                let p = "spec.updateStrategy.rollingUpdate";
                let mut ok = true;
                if let Some(v) = &ru.max_unavailable {
                    ok &= validate_int_or_percent(&mut errs, &format!("{p}.maxUnavailable"), v);
                }
                if let Some(v) = &ru.max_surge {
                    ok &= validate_int_or_percent(&mut errs, &format!("{p}.maxSurge"), v);
                }
                if ok && is_zero(&ru.max_unavailable) && is_zero(&ru.max_surge) {
                    errs.push(FieldError::invalid(
                        format!("{p}.maxUnavailable"),
                        ru.max_unavailable
                            .as_ref()
                            .map(|v| v.to_string())
                            .unwrap_or_else(|| "0".into()),
                        "cannot be 0 when maxSurge is 0",
                    ));
                }
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.updateStrategy.type",
            other,
            &["OnDelete", "RollingUpdate"],
        )),
    }
    errs
}

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// Kubernetes' ValidatePodSpec, with `path` the spec's field path (`spec`,
/// `spec.template.spec`).
pub fn validate_pod_spec(spec: &PodSpec, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();

    // Volumes: unique DNS-label names, exactly one source each.
    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().enumerate() {
        let p = format!("{path}.volumes[{i}]");
        if v.name.is_empty() {
            errs.push(FieldError::required(format!("{p}.name")));
        } else if let Err(why) = dns1123_label(&v.name) {
            errs.push(FieldError::invalid(format!("{p}.name"), &v.name, why));
        } else if !volumes.insert(v.name.as_str()) {
            errs.push(FieldError::duplicate(format!("{p}.name"), &v.name));
        }
        let sources = v.source_names();
        if sources.is_empty() {
            errs.push(FieldError {
                reason: "FieldValueRequired".into(),
                field: p.clone(),
                message: "Required value: must specify a volume type".into(),
            });
        } else if sources.len() > 1 {
            errs.push(FieldError::forbidden(
                format!("{p}.{}", sources[1]),
                "may not specify more than 1 volume type",
            ));
        }
        if let Some(h) = &v.host_path {
            if h.path.is_empty() {
                errs.push(FieldError::required(format!("{p}.hostPath.path")));
            }
            let types = [
                "",
                "DirectoryOrCreate",
                "Directory",
                "FileOrCreate",
                "File",
                "Socket",
                "CharDevice",
                "BlockDevice",
            ];
            if let Some(t) = &h.type_ {
                check_one_of(&mut errs, format!("{p}.hostPath.type"), t, &types);
            }
        }
        if let Some(s) = &v.secret {
            if s.secret_name.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::required(format!("{p}.secret.secretName")));
            }
        }
        if let Some(c) = &v.config_map {
            if c.name.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::required(format!("{p}.configMap.name")));
            }
        }
        if let Some(c) = &v.persistent_volume_claim {
            if c.claim_name.is_empty() {
                errs.push(FieldError::required(format!(
                    "{p}.persistentVolumeClaim.claimName"
                )));
            }
        }
    }

    if spec.containers.is_empty() {
        errs.push(FieldError::required(format!("{path}.containers")));
    }
    let mut names = BTreeSet::new();
    for (i, c) in spec.init_containers.iter().enumerate() {
        let p = format!("{path}.initContainers[{i}]");
        errs.extend(validate_container(c, &p, &volumes, &mut names, true));
        if c.lifecycle.is_some() && c.restart_policy.as_deref() != Some("Always") {
            errs.push(FieldError::forbidden(
                format!("{p}.lifecycle"),
                "may not be set for init containers without restartPolicy=Always",
            ));
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let p = format!("{path}.containers[{i}]");
        errs.extend(validate_container(c, &p, &volumes, &mut names, false));
    }
    errs.extend(validate_ephemeral_containers(spec, path, &volumes, names));

    if let Some(rp) = &spec.restart_policy {
        check_one_of(
            &mut errs,
            format!("{path}.restartPolicy"),
            rp,
            &["Always", "OnFailure", "Never"],
        );
    }
    if let Some(dp) = &spec.dns_policy {
        check_one_of(
            &mut errs,
            format!("{path}.dnsPolicy"),
            dp,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        );
        if dp == "None"
            && spec
                .dns_config
                .as_ref()
                .is_none_or(|c| c.nameservers.is_empty())
        {
            errs.push(FieldError {
                reason: "FieldValueRequired".into(),
                field: format!("{path}.dnsConfig"),
                message: "Required value: must provide `dnsConfig` when `dnsPolicy` is None".into(),
            });
        }
    }
    if let Some(c) = &spec.dns_config {
        if c.nameservers.len() > 3 {
            errs.push(FieldError::invalid(
                format!("{path}.dnsConfig.nameservers"),
                c.nameservers.join(" "),
                "must not have more than 3 nameservers",
            ));
        }
        for (i, ns) in c.nameservers.iter().enumerate() {
            if ns.parse::<std::net::IpAddr>().is_err() {
                errs.push(FieldError::invalid(
                    format!("{path}.dnsConfig.nameservers[{i}]"),
                    ns,
                    "must be a valid IP address",
                ));
            }
        }
    }
    check_non_negative(
        &mut errs,
        &format!("{path}.terminationGracePeriodSeconds"),
        spec.termination_grace_period_seconds,
    );
    // Kubernetes' IsValidUserID and IsValidGroupID: a uid past 2^31 - 1 would be cut to 32
    // bits by whoever runs the pod (4294967296 is root).
    if let Some(sc) = &spec.security_context {
        let ids = [
            ("runAsUser", sc.run_as_user),
            ("runAsGroup", sc.run_as_group),
            ("fsGroup", sc.fs_group),
        ]
        .into_iter()
        .map(|(f, id)| (f.to_string(), id))
        .chain(
            sc.supplemental_groups
                .iter()
                .enumerate()
                .map(|(i, g)| (format!("supplementalGroups[{i}]"), Some(*g))),
        );
        for (field, id) in ids {
            if let Some(id) = id.filter(|id| !(0..=2147483647).contains(id)) {
                errs.push(FieldError::invalid(
                    format!("{path}.securityContext.{field}"),
                    id,
                    "must be between 0 and 2147483647, inclusive",
                ));
            }
        }
    }
    if let Some(a) = spec.active_deadline_seconds {
        if a <= 0 {
            errs.push(FieldError::invalid(
                format!("{path}.activeDeadlineSeconds"),
                a,
                "must be between 1 and 2147483647, inclusive",
            ));
        }
    }
    errs.extend(validate_labels(
        &spec.node_selector,
        &format!("{path}.nodeSelector"),
    ));
    for (field, v) in [("hostname", &spec.hostname), ("subdomain", &spec.subdomain)] {
        if let Some(v) = v {
            if let Err(why) = dns1123_label(v) {
                errs.push(FieldError::invalid(format!("{path}.{field}"), v, why));
            }
        }
    }
    if let Some(sa) = &spec.service_account_name {
        if !sa.is_empty() {
            if let Err(why) = dns1123_subdomain(sa) {
                errs.push(FieldError::invalid(
                    format!("{path}.serviceAccountName"),
                    sa,
                    why,
                ));
            }
        }
    }
    if let Some(n) = &spec.node_name {
        if !n.is_empty() {
            if let Err(why) = dns1123_subdomain(n) {
                errs.push(FieldError::invalid(format!("{path}.nodeName"), n, why));
            }
        }
    }
    for (i, t) in spec.tolerations.iter().enumerate() {
        errs.extend(validate_toleration(t, &format!("{path}.tolerations[{i}]")));
    }
    for (i, h) in spec.host_aliases.iter().enumerate() {
        if h.ip.parse::<std::net::IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                format!("{path}.hostAliases[{i}].ip"),
                &h.ip,
                "must be a valid IP address",
            ));
        }
    }
    if let Some(pp) = &spec.preemption_policy {
        check_one_of(
            &mut errs,
            format!("{path}.preemptionPolicy"),
            pp,
            &["Never", "PreemptLowerPriority"],
        );
    }
    if let Some(os) = &spec.os {
        check_one_of(
            &mut errs,
            format!("{path}.os.name"),
            &os.name,
            &["linux", "windows"],
        );
    }
    if spec.host_network == Some(true) {
        for (i, c) in spec.containers.iter().enumerate() {
            for (j, port) in c.ports.iter().enumerate() {
                if let Some(hp) = port.host_port {
                    if hp != port.container_port {
                        errs.push(FieldError::invalid(
                            format!("{path}.containers[{i}].ports[{j}].hostPort"),
                            hp,
                            "must match `containerPort` when `hostNetwork` is true",
                        ));
                    }
                }
            }
        }
    }
    if let Some(a) = &spec.affinity {
        let p = format!("{path}.affinity");
        if let Some(na) = &a.node_affinity {
            let np = format!("{p}.nodeAffinity");
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                let rp = format!("{np}.requiredDuringSchedulingIgnoredDuringExecution");
                if req.node_selector_terms.is_empty() {
                    errs.push(FieldError {
                        reason: "FieldValueRequired".into(),
                        field: format!("{rp}.nodeSelectorTerms"),
                        message: "Required value: must have at least one node selector term".into(),
                    });
                }
                for (i, t) in req.node_selector_terms.iter().enumerate() {
                    errs.extend(validate_node_selector_term(
                        t,
                        &format!("{rp}.nodeSelectorTerms[{i}]"),
                    ));
                }
            }
            for (i, t) in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .enumerate()
            {
                let tp = format!("{np}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                check_weight(&mut errs, &tp, t.weight);
                errs.extend(validate_node_selector_term(
                    &t.preference,
                    &format!("{tp}.preference"),
                ));
            }
        }
        for (name, pa) in [
            ("podAffinity", &a.pod_affinity),
            ("podAntiAffinity", &a.pod_anti_affinity),
        ] {
            let Some(pa) = pa else { continue };
            let ap = format!("{p}.{name}");
            for (i, t) in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .enumerate()
            {
                errs.extend(validate_pod_affinity_term(
                    t,
                    &format!("{ap}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
                ));
            }
            for (i, t) in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .enumerate()
            {
                let tp = format!("{ap}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                check_weight(&mut errs, &tp, t.weight);
                errs.extend(validate_pod_affinity_term(
                    &t.pod_affinity_term,
                    &format!("{tp}.podAffinityTerm"),
                ));
            }
        }
    }
    errs
}

/// Kubernetes' validateEphemeralContainers: each one as a container, its name unique across
/// every container of the pod, its target an app or init container, and only the fields
/// allowed on an ephemeral container set (ports, probes, lifecycle, resources are not).
fn validate_ephemeral_containers<'a>(
    spec: &'a PodSpec,
    path: &str,
    volumes: &BTreeSet<&str>,
    mut names: BTreeSet<&'a str>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let others: BTreeSet<&str> = spec.all_containers().map(|c| c.name.as_str()).collect();
    for (i, ec) in spec.ephemeral_containers.iter().enumerate() {
        let p = format!("{path}.ephemeralContainers[{i}]");
        // The fields refused below are left out of the container checks, which would
        // otherwise judge them as an app container's.
        let c = Container {
            ports: Vec::new(),
            resources: None,
            resize_policy: Vec::new(),
            restart_policy: None,
            liveness_probe: None,
            readiness_probe: None,
            startup_probe: None,
            lifecycle: None,
            ..ec.to_container()
        };
        let mut own = names.clone();
        errs.extend(validate_container(&c, &p, volumes, &mut own, false));
        if !ec.name.is_empty() {
            names.insert(ec.name.as_str());
        }
        if let Some(t) = ec
            .target_container_name
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            if !others.contains(t) {
                errs.push(FieldError::not_found(format!("{p}.targetContainerName"), t));
            }
        }
        // In the order of the Go struct's fields, as kube-apiserver's reflection finds them.
        let refused = [
            ("ports", !ec.ports.is_empty()),
            (
                "resources",
                ec.resources
                    .as_ref()
                    .is_some_and(|r| *r != Default::default()),
            ),
            ("resizePolicy", !ec.resize_policy.is_empty()),
            ("restartPolicy", ec.restart_policy.is_some()),
            ("livenessProbe", ec.liveness_probe.is_some()),
            ("readinessProbe", ec.readiness_probe.is_some()),
            ("startupProbe", ec.startup_probe.is_some()),
            ("lifecycle", ec.lifecycle.is_some()),
        ];
        for (field, set) in refused {
            if set {
                errs.push(FieldError::forbidden(
                    format!("{p}.{field}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (j, m) in ec.volume_mounts.iter().enumerate() {
            for (field, v) in [("subPath", &m.sub_path), ("subPathExpr", &m.sub_path_expr)] {
                if v.as_deref().is_some_and(|v| !v.is_empty()) {
                    errs.push(FieldError::forbidden(
                        format!("{p}.volumeMounts[{j}].{field}"),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
    }
    errs
}

/// Kubernetes' ValidatePodEphemeralContainersUpdate, beyond the spec's own validation: the
/// ephemeral containers a pod has stay as they are (only additions are allowed), and static
/// pods take none.
pub fn validate_ephemeral_containers_update(
    new: &crate::core::Pod,
    old: &crate::core::Pod,
) -> Vec<FieldError> {
    const PATH: &str = "spec.ephemeralContainers";
    if old
        .metadata
        .annotations
        .contains_key("kubernetes.io/config.mirror")
    {
        return vec![FieldError::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )];
    }
    let mut errs = Vec::new();
    for o in &old.spec.ephemeral_containers {
        match new
            .spec
            .ephemeral_containers
            .iter()
            .find(|n| n.name == o.name)
        {
            None => errs.push(FieldError::forbidden(
                PATH,
                format!(
                    "existing ephemeral containers {:?} may not be removed\n",
                    o.name
                ),
            )),
            Some(n) if n != o => errs.push(FieldError::forbidden(
                PATH,
                format!(
                    "existing ephemeral containers {:?} may not be changed\n{}",
                    o.name,
                    ephemeral_diff(o, n)
                ),
            )),
            Some(_) => {}
        }
    }
    errs
}

/// The fields that differ between two versions of an ephemeral container, one a line as
/// `-field: old` and `+field: new` (a short stand-in for kube-apiserver's cmp.Diff).
fn ephemeral_diff(
    old: &crate::core::EphemeralContainer,
    new: &crate::core::EphemeralContainer,
) -> String {
    let (Ok(serde_json::Value::Object(o)), Ok(serde_json::Value::Object(n))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return String::new();
    };
    let mut out = String::new();
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    for k in keys {
        let (a, b) = (o.get(k), n.get(k));
        if a != b {
            for (sign, v) in [('-', a), ('+', b)] {
                if let Some(v) = v.filter(|v| !v.is_null()) {
                    out.push_str(&format!("{sign}{k}: {v}\n"));
                }
            }
        }
    }
    out
}

fn check_weight(errs: &mut Vec<FieldError>, path: &str, weight: i32) {
    if !(1..=100).contains(&weight) {
        errs.push(FieldError::invalid(
            format!("{path}.weight"),
            weight,
            "must be in the range 1-100",
        ));
    }
}

fn validate_node_selector_term(t: &NodeSelectorTerm, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (field, reqs) in [
        ("matchExpressions", &t.match_expressions),
        ("matchFields", &t.match_fields),
    ] {
        for (i, r) in reqs.iter().enumerate() {
            let p = format!("{path}.{field}[{i}]");
            if field == "matchFields" {
                if r.key != "metadata.name" {
                    errs.push(FieldError::not_supported(
                        format!("{p}.key"),
                        &r.key,
                        &["metadata.name"],
                    ));
                }
                if r.operator != "In" && r.operator != "NotIn" {
                    errs.push(FieldError::not_supported(
                        format!("{p}.operator"),
                        &r.operator,
                        &["In", "NotIn"],
                    ));
                }
                if r.values.len() != 1 {
                    errs.push(FieldError {
                        reason: "FieldValueRequired".into(),
                        field: format!("{p}.values"),
                        message: "Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector".into(),
                    });
                }
                continue;
            }
            if let Err(why) = qualified_name(&r.key) {
                errs.push(FieldError::invalid(format!("{p}.key"), &r.key, why));
            }
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => errs.push(FieldError {
                    reason: "FieldValueRequired".into(),
                    field: format!("{p}.values"),
                    message: "Required value: must be specified when `operator` is 'In' or 'NotIn'"
                        .into(),
                }),
                "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                    errs.push(FieldError::forbidden(
                        format!("{p}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ))
                }
                "Gt" | "Lt" => {
                    if r.values.len() != 1 || r.values[0].parse::<i64>().is_err() {
                        errs.push(FieldError {
                            reason: "FieldValueRequired".into(),
                            field: format!("{p}.values"),
                            message: "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'".into(),
                        });
                    }
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                op => errs.push(FieldError::not_supported(
                    format!("{p}.operator"),
                    op,
                    &["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"],
                )),
            }
        }
    }
    errs
}

fn validate_pod_affinity_term(t: &PodAffinityTerm, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(s) = &t.label_selector {
        errs.extend(validate_label_selector(s, &format!("{path}.labelSelector")));
    }
    if let Some(s) = &t.namespace_selector {
        errs.extend(validate_label_selector(
            s,
            &format!("{path}.namespaceSelector"),
        ));
    }
    for (i, ns) in t.namespaces.iter().enumerate() {
        if let Err(why) = dns1123_label(ns) {
            errs.push(FieldError::invalid(
                format!("{path}.namespaces[{i}]"),
                ns,
                why,
            ));
        }
    }
    if t.topology_key.is_empty() {
        errs.push(FieldError {
            reason: "FieldValueRequired".into(),
            field: format!("{path}.topologyKey"),
            message: "Required value: can not be empty".into(),
        });
    } else if let Err(why) = qualified_name(&t.topology_key) {
        errs.push(FieldError::invalid(
            format!("{path}.topologyKey"),
            &t.topology_key,
            why,
        ));
    }
    errs
}

fn validate_container<'a>(
    c: &'a Container,
    p: &str,
    volumes: &BTreeSet<&str>,
    names: &mut BTreeSet<&'a str>,
    init: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if c.name.is_empty() {
        errs.push(FieldError::required(format!("{p}.name")));
    } else if let Err(why) = dns1123_label(&c.name) {
        errs.push(FieldError::invalid(format!("{p}.name"), &c.name, why));
    } else if !names.insert(c.name.as_str()) {
        errs.push(FieldError::duplicate(format!("{p}.name"), &c.name));
    }
    if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        errs.push(FieldError::required(format!("{p}.image")));
    }
    if let Some(pp) = &c.image_pull_policy {
        check_one_of(
            &mut errs,
            format!("{p}.imagePullPolicy"),
            pp,
            &["Always", "IfNotPresent", "Never"],
        );
    }
    if let Some(tp) = &c.termination_message_policy {
        check_one_of(
            &mut errs,
            format!("{p}.terminationMessagePolicy"),
            tp,
            &["File", "FallbackToLogsOnError"],
        );
    }
    match (&c.restart_policy, init) {
        (None, _) => {}
        (Some(rp), true) => check_one_of(&mut errs, format!("{p}.restartPolicy"), rp, &["Always"]),
        (Some(_), false) => errs.push(FieldError::forbidden(
            format!("{p}.restartPolicy"),
            "may not be set for non-init containers",
        )),
    }
    let sidecar = init && c.restart_policy.as_deref() == Some("Always");

    let mut port_names = BTreeSet::new();
    for (i, port) in c.ports.iter().enumerate() {
        let pp = format!("{p}.ports[{i}]");
        check_port(
            &mut errs,
            format!("{pp}.containerPort"),
            port.container_port,
        );
        if let Some(hp) = port.host_port {
            if hp != 0 {
                check_port(&mut errs, format!("{pp}.hostPort"), hp);
            }
        }
        if let Some(proto) = &port.protocol {
            check_one_of(&mut errs, format!("{pp}.protocol"), proto, PROTOCOLS);
        }
        if let Some(name) = &port.name {
            if let Err(why) = iana_svc_name(name) {
                errs.push(FieldError::invalid(format!("{pp}.name"), name, why));
            } else if !port_names.insert(name.as_str()) {
                errs.push(FieldError::duplicate(format!("{pp}.name"), name));
            }
        }
        if let Some(ip) = &port.host_ip {
            if !ip.is_empty() && ip.parse::<std::net::IpAddr>().is_err() {
                errs.push(FieldError::invalid(
                    format!("{pp}.hostIP"),
                    ip,
                    "must be a valid IP address",
                ));
            }
        }
    }

    for (i, e) in c.env.iter().enumerate() {
        let ep = format!("{p}.env[{i}]");
        if e.name.is_empty() {
            errs.push(FieldError::required(format!("{ep}.name")));
        } else if e.name.contains('=') {
            errs.push(FieldError::invalid(
                format!("{ep}.name"),
                &e.name,
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ));
        }
        if let Some(src) = &e.value_from {
            let n = [
                src.field_ref.is_some(),
                src.resource_field_ref.is_some(),
                src.config_map_key_ref.is_some(),
                src.secret_key_ref.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if e.value.as_deref().is_some_and(|v| !v.is_empty()) {
                errs.push(FieldError::invalid(
                    format!("{ep}.valueFrom"),
                    "",
                    "may not be specified when `value` is not empty",
                ));
            }
            if n == 0 {
                errs.push(FieldError::invalid(
                    format!("{ep}.valueFrom"),
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                ));
            } else if n > 1 {
                errs.push(FieldError::invalid(
                    format!("{ep}.valueFrom"),
                    "",
                    "may not have more than one field specified at a time",
                ));
            }
            for (field, r) in [
                ("configMapKeyRef", &src.config_map_key_ref),
                ("secretKeyRef", &src.secret_key_ref),
            ] {
                if let Some(r) = r {
                    if r.key.is_empty() {
                        errs.push(FieldError::required(format!("{ep}.valueFrom.{field}.key")));
                    }
                }
            }
            if let Some(f) = &src.field_ref {
                if f.field_path.is_empty() {
                    errs.push(FieldError::required(format!(
                        "{ep}.valueFrom.fieldRef.fieldPath"
                    )));
                }
            }
        }
    }
    for (i, e) in c.env_from.iter().enumerate() {
        let n = usize::from(e.config_map_ref.is_some()) + usize::from(e.secret_ref.is_some());
        if n != 1 {
            errs.push(FieldError::invalid(
                format!("{p}.envFrom[{i}]"),
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        }
    }

    let mut mount_paths = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{i}]");
        if m.name.is_empty() {
            errs.push(FieldError::required(format!("{mp}.name")));
        } else if !volumes.contains(m.name.as_str()) {
            errs.push(FieldError::not_found(format!("{mp}.name"), &m.name));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(format!("{mp}.mountPath")));
        } else if !mount_paths.insert(m.mount_path.as_str()) {
            errs.push(FieldError::invalid(
                format!("{mp}.mountPath"),
                &m.mount_path,
                "must be unique",
            ));
        }
        if let Some(sp) = &m.sub_path {
            if sp.starts_with('/') || sp.split('/').any(|s| s == "..") {
                errs.push(FieldError::invalid(
                    format!("{mp}.subPath"),
                    sp,
                    "must be a relative path without '..'",
                ));
            }
        }
        if let Some(mprop) = &m.mount_propagation {
            check_one_of(
                &mut errs,
                format!("{mp}.mountPropagation"),
                mprop,
                &["Bidirectional", "HostToContainer", "None"],
            );
        }
    }

    for (field, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        let Some(probe) = probe else { continue };
        let pp = format!("{p}.{field}");
        if init && !sidecar {
            errs.push(FieldError::forbidden(
                pp.clone(),
                "may not be set for init containers without restartPolicy=Always",
            ));
        }
        errs.extend(validate_probe(probe, &pp, field != "readinessProbe"));
    }

    if let Some(r) = &c.resources {
        let rp = format!("{p}.resources");
        for (field, map) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (name, q) in map {
                if let Err(e) = q.validate() {
                    errs.push(FieldError::invalid(
                        format!("{rp}.{field}[{name}]"),
                        q,
                        e.to_string(),
                    ));
                } else if q.0.starts_with('-') {
                    errs.push(FieldError::invalid(
                        format!("{rp}.{field}[{name}]"),
                        q,
                        "must be greater than or equal to 0",
                    ));
                }
            }
        }
        for (name, req) in &r.requests {
            if let Some(lim) = r.limits.get(name) {
                if let Ok(std::cmp::Ordering::Greater) = compare_quantities(&req.0, &lim.0) {
                    errs.push(FieldError::invalid(
                        format!("{rp}.requests"),
                        req,
                        format!("must be less than or equal to {name} limit of {lim}"),
                    ));
                }
            }
        }
    }

    if let Some(sc) = &c.security_context {
        if let Some(pm) = &sc.proc_mount {
            check_one_of(
                &mut errs,
                format!("{p}.securityContext.procMount"),
                pm,
                &["Default", "Unmasked"],
            );
        }
        if sc.privileged == Some(true) && sc.allow_privilege_escalation == Some(false) {
            errs.push(FieldError::invalid(
                format!("{p}.securityContext"),
                "",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        for (field, id) in [
            ("runAsUser", sc.run_as_user),
            ("runAsGroup", sc.run_as_group),
        ] {
            if let Some(id) = id {
                if !(0..=2147483647).contains(&id) {
                    errs.push(FieldError::invalid(
                        format!("{p}.securityContext.{field}"),
                        id,
                        "must be between 0 and 2147483647, inclusive",
                    ));
                }
            }
        }
    }
    errs
}

fn validate_probe(probe: &Probe, p: &str, success_must_be_one: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let handlers = probe.handler_names();
    if handlers.is_empty() {
        errs.push(FieldError {
            reason: "FieldValueRequired".into(),
            field: p.to_string(),
            message: "Required value: must specify a handler type".into(),
        });
    } else if handlers.len() > 1 {
        errs.push(FieldError::forbidden(
            format!("{p}.{}", handlers[1]),
            "may not specify more than 1 handler type",
        ));
    }
    for (field, v) in [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        check_non_negative(&mut errs, &format!("{p}.{field}"), v);
    }
    if success_must_be_one {
        if let Some(s) = probe.success_threshold {
            if s != 1 {
                errs.push(FieldError::invalid(
                    format!("{p}.successThreshold"),
                    s,
                    "must be 1",
                ));
            }
        }
    }
    if let Some(t) = probe.termination_grace_period_seconds {
        if t <= 0 {
            errs.push(FieldError::invalid(
                format!("{p}.terminationGracePeriodSeconds"),
                t,
                "must be greater than 0",
            ));
        }
    }
    let check_port_ref = |errs: &mut Vec<FieldError>, field: String, port: &IntOrString| match port
    {
        IntOrString::Int(i) => check_port(errs, field, *i),
        IntOrString::String(s) => {
            if let Err(why) = iana_svc_name(s) {
                errs.push(FieldError::invalid(field, s, why));
            }
        }
    };
    if let Some(e) = &probe.exec {
        if e.command.is_empty() {
            errs.push(FieldError::required(format!("{p}.exec.command")));
        }
    }
    if let Some(h) = &probe.http_get {
        check_port_ref(&mut errs, format!("{p}.httpGet.port"), &h.port);
        if let Some(s) = &h.scheme {
            check_one_of(
                &mut errs,
                format!("{p}.httpGet.scheme"),
                s,
                &["HTTP", "HTTPS"],
            );
        }
        for (i, hdr) in h.http_headers.iter().enumerate() {
            if hdr.name.is_empty()
                || !hdr
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                errs.push(FieldError::invalid(
                    format!("{p}.httpGet.httpHeaders[{i}].name"),
                    &hdr.name,
                    "a valid HTTP header must consist of alphanumeric characters or '-'",
                ));
            }
        }
    }
    if let Some(t) = &probe.tcp_socket {
        check_port_ref(&mut errs, format!("{p}.tcpSocket.port"), &t.port);
    }
    if let Some(g) = &probe.grpc {
        check_port(&mut errs, format!("{p}.grpc.port"), g.port);
    }
    errs
}

/// Kubernetes' ValidateTolerations for one toleration at `p`.
pub fn validate_toleration(t: &crate::core::Toleration, p: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() {
        if let Err(why) = qualified_name(key) {
            errs.push(FieldError::invalid(format!("{p}.key"), key, why));
        }
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Equal" | "" => {
            if key.is_empty() {
                errs.push(FieldError::invalid(
                    format!("{p}.operator"),
                    "Equal",
                    "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
                ));
            }
        }
        "Exists" => {
            if !t.value.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::invalid(
                    format!("{p}.operator"),
                    t.value.as_deref().unwrap_or(""),
                    "value must be empty when `operator` is 'Exists'",
                ));
            }
        }
        op => errs.push(FieldError::not_supported(
            format!("{p}.operator"),
            op,
            &["Equal", "Exists"],
        )),
    }
    let effect = t.effect.as_deref().unwrap_or("");
    check_one_of(
        &mut errs,
        format!("{p}.effect"),
        effect,
        &["", "NoSchedule", "PreferNoSchedule", "NoExecute"],
    );
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        errs.push(FieldError::invalid(
            format!("{p}.effect"),
            effect,
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ));
    }
    errs
}

/// A Node's spec: taints and pod CIDRs.
pub fn validate_node_spec(spec: &NodeSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, t) in spec.taints.iter().enumerate() {
        let p = format!("spec.taints[{i}]");
        if let Err(why) = qualified_name(&t.key) {
            errs.push(FieldError::invalid(format!("{p}.key"), &t.key, why));
        }
        if let Some(v) = &t.value {
            if let Err(why) = label_value(v) {
                errs.push(FieldError::invalid(format!("{p}.value"), v, why));
            }
        }
        check_one_of(
            &mut errs,
            format!("{p}.effect"),
            &t.effect,
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        );
        if !seen.insert((t.key.as_str(), t.effect.as_str())) {
            errs.push(FieldError::duplicate(p, format!("{}:{}", t.key, t.effect)));
        }
    }
    let cidrs = spec.pod_cidr.iter().chain(spec.pod_cidrs.iter());
    for (i, c) in cidrs.enumerate() {
        let ok = c.split_once('/').is_some_and(|(ip, len)| {
            ip.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 128)
        });
        if !ok {
            let field = if i == 0 && spec.pod_cidr.is_some() {
                "spec.podCIDR".to_string()
            } else {
                format!(
                    "spec.podCIDRs[{}]",
                    i - usize::from(spec.pod_cidr.is_some())
                )
            };
            errs.push(FieldError::invalid(field, c, "must be a valid CIDR"));
        }
    }
    errs
}

/// A Service's spec.
pub fn validate_service_spec(spec: &ServiceSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ty = spec.type_or_default();
    check_one_of(
        &mut errs,
        "spec.type".into(),
        ty,
        &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
    );
    let external_name = ty == "ExternalName";
    if external_name {
        match spec.external_name.as_deref() {
            None | Some("") => errs.push(FieldError::required("spec.externalName")),
            Some(n) => {
                if let Err(why) = dns1123_subdomain(n.trim_end_matches('.')) {
                    errs.push(FieldError::invalid("spec.externalName", n, why));
                }
            }
        }
    }
    if ty != "LoadBalancer" && spec.load_balancer_class.is_some() {
        errs.push(FieldError::forbidden(
            "spec.loadBalancerClass",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if spec.ports.is_empty() && !spec.is_headless() && !external_name {
        errs.push(FieldError::required("spec.ports"));
    }
    let mut names = BTreeSet::new();
    let multi = spec.ports.len() > 1;
    let mut seen = BTreeSet::new();
    for (i, p) in spec.ports.iter().enumerate() {
        let pp = format!("spec.ports[{i}]");
        match p.name.as_deref() {
            None | Some("") => {
                if multi {
                    errs.push(FieldError::required(format!("{pp}.name")));
                }
            }
            Some(n) => {
                if let Err(why) = dns1123_label(n) {
                    errs.push(FieldError::invalid(format!("{pp}.name"), n, why));
                } else if !names.insert(n) {
                    errs.push(FieldError::duplicate(format!("{pp}.name"), n));
                }
            }
        }
        check_port(&mut errs, format!("{pp}.port"), p.port);
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        check_one_of(&mut errs, format!("{pp}.protocol"), proto, PROTOCOLS);
        if !seen.insert((p.port, proto)) {
            errs.push(FieldError::duplicate(
                pp.clone(),
                format!("{}/{proto}", p.port),
            ));
        }
        match &p.target_port {
            Some(IntOrString::Int(t)) => check_port(&mut errs, format!("{pp}.targetPort"), *t),
            Some(IntOrString::String(s)) => {
                if let Err(why) = iana_svc_name(s) {
                    errs.push(FieldError::invalid(format!("{pp}.targetPort"), s, why));
                }
            }
            None => {}
        }
        if let Some(np) = p.node_port {
            if ty == "ClusterIP" || ty == "ExternalName" {
                if np != 0 {
                    errs.push(FieldError::forbidden(
                        format!("{pp}.nodePort"),
                        format!("may not be used when `type` is '{ty}'"),
                    ));
                }
            } else if np != 0 && !(30000..=32767).contains(&np) {
                errs.push(FieldError::invalid(
                    format!("{pp}.nodePort"),
                    np,
                    "provided port is not in the valid range. The range of valid ports is 30000-32767",
                ));
            }
        }
    }
    if let Some(sa) = &spec.session_affinity {
        check_one_of(
            &mut errs,
            "spec.sessionAffinity".into(),
            sa,
            &["ClientIP", "None"],
        );
    }
    if let Some(ip) = &spec.cluster_ip {
        if !ip.is_empty() && ip != "None" && ip.parse::<std::net::IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                ip,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
        if ip == "None" && ty != "ClusterIP" && !external_name {
            errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                ip,
                format!("may not be set to 'None' for {ty} services"),
            ));
        }
    }
    for (i, ip) in spec.external_ips.iter().enumerate() {
        if ip.parse::<std::net::IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                format!("spec.externalIPs[{i}]"),
                ip,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    for (field, v, allowed) in [
        (
            "spec.externalTrafficPolicy",
            &spec.external_traffic_policy,
            &["Cluster", "Local"][..],
        ),
        (
            "spec.internalTrafficPolicy",
            &spec.internal_traffic_policy,
            &["Cluster", "Local"][..],
        ),
        (
            "spec.ipFamilyPolicy",
            &spec.ip_family_policy,
            &["PreferDualStack", "RequireDualStack", "SingleStack"][..],
        ),
    ] {
        if let Some(v) = v {
            check_one_of(&mut errs, field.into(), v, allowed);
        }
    }
    for (i, f) in spec.ip_families.iter().enumerate() {
        check_one_of(
            &mut errs,
            format!("spec.ipFamilies[{i}]"),
            f,
            &["IPv4", "IPv6"],
        );
    }
    errs.extend(validate_labels(&spec.selector, "spec.selector"));
    errs
}

/// Endpoints subsets: IP addresses and ports.
pub fn validate_endpoint_subsets(subsets: &[EndpointSubset]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, s) in subsets.iter().enumerate() {
        let sp = format!("subsets[{i}]");
        for (field, addrs) in [
            ("addresses", &s.addresses),
            ("notReadyAddresses", &s.not_ready_addresses),
        ] {
            for (j, a) in addrs.iter().enumerate() {
                if a.ip.parse::<std::net::IpAddr>().is_err() {
                    errs.push(FieldError::invalid(
                        format!("{sp}.{field}[{j}].ip"),
                        &a.ip,
                        "must be a valid IP address",
                    ));
                }
                if let Some(h) = &a.hostname {
                    if let Err(why) = dns1123_label(h) {
                        errs.push(FieldError::invalid(
                            format!("{sp}.{field}[{j}].hostname"),
                            h,
                            why,
                        ));
                    }
                }
            }
        }
        let multi = s.ports.len() > 1;
        for (j, p) in s.ports.iter().enumerate() {
            let pp = format!("{sp}.ports[{j}]");
            if multi && p.name.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::required(format!("{pp}.name")));
            }
            check_port(&mut errs, format!("{pp}.port"), p.port);
            if let Some(proto) = &p.protocol {
                check_one_of(&mut errs, format!("{pp}.protocol"), proto, PROTOCOLS);
            }
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Updates: the fields Kubernetes refuses to change (ValidateXUpdate).

fn immutable(field: &str, value: impl std::fmt::Display) -> FieldError {
    FieldError::invalid(field, value, "field is immutable")
}

const POD_UPDATE_MSG: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// The rules of an update from `old` to `new` (both defaulted), beyond [`Resource::validate`]
/// of `new`: names, selectors, pod specs, immutable ConfigMaps and Secrets, cluster IPs,
/// pod CIDRs and IngressClass controllers do not change. Objects of different kinds are refused outright.
///
/// A pod's `spec.nodeName` changes only through the binding subresource, which must not go
/// through this check (as in Kubernetes).
///
/// [`Resource::validate`]: crate::object::Resource::validate
pub fn validate_update(new: &AnyObject, old: &AnyObject) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (nm, om) = (new.meta(), old.meta());
    if nm.name != om.name {
        errs.push(immutable("metadata.name", &nm.name));
    }
    if nm.namespace() != om.namespace() {
        errs.push(immutable("metadata.namespace", nm.namespace()));
    }
    match (new, old) {
        // A custom resource's transition rules (CEL rules reading `oldSelf`).
        (AnyObject::Custom(n), AnyObject::Custom(o)) => {
            if let Some(rules) = n.kind.custom_rules() {
                errs.extend(rules.validate(n, Some(o)));
            }
        }
        (AnyObject::Pod(n), AnyObject::Pod(o)) if !pod_spec_update_allowed(&n.spec, &o.spec) => {
            errs.push(FieldError::forbidden("spec", POD_UPDATE_MSG));
        }
        (AnyObject::Deployment(n), AnyObject::Deployment(o))
            if n.spec.selector != o.spec.selector =>
        {
            errs.push(immutable("spec.selector", selector_text(&n.spec.selector)));
        }
        (AnyObject::ReplicaSet(n), AnyObject::ReplicaSet(o))
            if n.spec.selector != o.spec.selector =>
        {
            errs.push(immutable("spec.selector", selector_text(&n.spec.selector)));
        }
        (AnyObject::StatefulSet(n), AnyObject::StatefulSet(o)) => {
            let mut a = n.spec.clone();
            let b = &o.spec;
            a.replicas = b.replicas;
            a.ordinals = b.ordinals.clone();
            a.template = b.template.clone();
            a.update_strategy = b.update_strategy.clone();
            a.persistent_volume_claim_retention_policy =
                b.persistent_volume_claim_retention_policy.clone();
            a.min_ready_seconds = b.min_ready_seconds;
            if &a != b {
                errs.push(FieldError::forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
        (AnyObject::DaemonSet(n), AnyObject::DaemonSet(o))
            if n.spec.selector != o.spec.selector =>
        {
            errs.push(immutable("spec.selector", selector_text(&n.spec.selector)));
        }
        (AnyObject::PriorityClass(n), AnyObject::PriorityClass(o)) => {
            errs.extend(crate::scheduling::validate_update(n, o));
        }
        (AnyObject::IngressClass(n), AnyObject::IngressClass(o))
            if n.spec.controller != o.spec.controller =>
        {
            errs.push(immutable(
                "spec.controller",
                n.spec.controller.as_deref().unwrap_or(""),
            ));
        }
        (AnyObject::CertificateSigningRequest(n), AnyObject::CertificateSigningRequest(o))
            if n.spec != o.spec =>
        {
            errs.push(immutable("spec", "{...}"));
        }
        (AnyObject::RoleBinding(n), AnyObject::RoleBinding(o)) if n.role_ref != o.role_ref => {
            errs.push(FieldError::invalid(
                "roleRef",
                format!("{:?}", n.role_ref),
                "cannot change roleRef",
            ));
        }
        (AnyObject::ClusterRoleBinding(n), AnyObject::ClusterRoleBinding(o))
            if n.role_ref != o.role_ref =>
        {
            errs.push(FieldError::invalid(
                "roleRef",
                format!("{:?}", n.role_ref),
                "cannot change roleRef",
            ));
        }
        (AnyObject::PersistentVolumeClaim(n), AnyObject::PersistentVolumeClaim(o)) => {
            errs.extend(crate::storage::validate_claim_update(n, o));
        }
        (AnyObject::StorageClass(n), AnyObject::StorageClass(o)) => {
            errs.extend(crate::storage::validate_class_update(n, o));
        }
        (AnyObject::RuntimeClass(n), AnyObject::RuntimeClass(o)) if n.handler != o.handler => {
            errs.push(immutable("handler", &n.handler));
        }
        (AnyObject::EndpointSlice(n), AnyObject::EndpointSlice(o))
            if n.address_type != o.address_type =>
        {
            errs.push(immutable("addressType", &n.address_type));
        }
        (AnyObject::Job(n), AnyObject::Job(o)) => {
            errs.extend(crate::batch::validate_job_update(n, o));
        }
        (AnyObject::Service(n), AnyObject::Service(o)) => {
            let old_ip = o.spec.cluster_ip.as_deref().unwrap_or("");
            let new_ip = n.spec.cluster_ip.as_deref().unwrap_or("");
            let was_external = o.spec.type_or_default() == "ExternalName";
            let is_external = n.spec.type_or_default() == "ExternalName";
            if !old_ip.is_empty() && !was_external && !is_external && new_ip != old_ip {
                errs.push(FieldError::invalid(
                    "spec.clusterIPs[0]",
                    new_ip,
                    "may not change once set",
                ));
            }
        }
        (AnyObject::ConfigMap(n), AnyObject::ConfigMap(o)) if o.immutable == Some(true) => {
            if n.immutable != Some(true) {
                errs.push(FieldError::forbidden(
                    "immutable",
                    "field is immutable when `immutable` is set",
                ));
            }
            if n.data != o.data {
                errs.push(FieldError::forbidden(
                    "data",
                    "field is immutable when `immutable` is set",
                ));
            }
            if n.binary_data != o.binary_data {
                errs.push(FieldError::forbidden(
                    "binaryData",
                    "field is immutable when `immutable` is set",
                ));
            }
        }
        (AnyObject::Secret(n), AnyObject::Secret(o)) => {
            if n.type_ != o.type_ {
                errs.push(immutable("type", n.type_.as_deref().unwrap_or("")));
            }
            if o.immutable == Some(true) {
                if n.immutable != Some(true) {
                    errs.push(FieldError::forbidden(
                        "immutable",
                        "field is immutable when `immutable` is set",
                    ));
                }
                if n.data != o.data || !n.string_data.is_empty() {
                    errs.push(FieldError::forbidden(
                        "data",
                        "field is immutable when `immutable` is set",
                    ));
                }
            }
        }
        (AnyObject::Node(n), AnyObject::Node(o)) => {
            let old_cidr = o.spec.pod_cidr.as_deref().unwrap_or("");
            if !old_cidr.is_empty() && n.spec.pod_cidr.as_deref().unwrap_or("") != old_cidr {
                errs.push(FieldError::forbidden(
                    "spec.podCIDR",
                    "node updates may not change podCIDR except from \"\" to valid",
                ));
            }
            if !o.spec.pod_cidrs.is_empty() && n.spec.pod_cidrs != o.spec.pod_cidrs {
                errs.push(FieldError::forbidden(
                    "spec.podCIDRs",
                    "node updates may not change podCIDR except from \"\" to valid",
                ));
            }
            let old_provider = o.spec.provider_id.as_deref().unwrap_or("");
            if !old_provider.is_empty() && n.spec.provider_id.as_deref() != Some(old_provider) {
                errs.push(FieldError::forbidden(
                    "spec.providerID",
                    "node updates may not change providerID except from \"\" to valid",
                ));
            }
        }
        (n, o) if n.kind() != o.kind() => errs.push(FieldError::invalid(
            "kind",
            n.kind().info().kind,
            format!("must be {}", o.kind().info().kind),
        )),
        _ => {}
    }
    errs
}

fn selector_text(sel: &Option<LabelSelector>) -> String {
    sel.as_ref()
        .and_then(|s| crate::selector::Selector::from_label_selector(s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Kubernetes lets a pod update change only container images, activeDeadlineSeconds (set
/// or lowered), tolerations (additions) and a negative terminationGracePeriodSeconds.
fn pod_spec_update_allowed(new: &PodSpec, old: &PodSpec) -> bool {
    let mut patched = old.clone();
    if new.containers.len() != old.containers.len()
        || new.init_containers.len() != old.init_containers.len()
    {
        return false;
    }
    for (p, n) in patched.containers.iter_mut().zip(&new.containers) {
        p.image = n.image.clone();
    }
    for (p, n) in patched.init_containers.iter_mut().zip(&new.init_containers) {
        p.image = n.image.clone();
    }
    match (old.active_deadline_seconds, new.active_deadline_seconds) {
        (None, n) => patched.active_deadline_seconds = n,
        (Some(o), Some(n)) if n <= o => patched.active_deadline_seconds = Some(n),
        _ => {}
    }
    if old.tolerations.iter().all(|t| new.tolerations.contains(t)) {
        patched.tolerations = new.tolerations.clone();
    }
    if old.termination_grace_period_seconds.is_some_and(|g| g < 0)
        && new.termination_grace_period_seconds == Some(1)
    {
        patched.termination_grace_period_seconds = Some(1);
    }
    patched == *new
}

/// A webhook's list of review versions (`conversionReviewVersions`,
/// `admissionReviewVersions`): present (`missing` is kube's message when it is not, if it
/// has one), no repeats, DNS labels, and one of `v1` and `v1beta1`, which this server speaks.
pub fn review_versions(versions: &[String], at: &str, missing: Option<&str>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if versions.is_empty() {
        errs.push(match missing {
            Some(why) => FieldError::required_msg(at, why),
            None => FieldError::required(at),
        });
        return errs;
    }
    let mut seen = std::collections::HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        if !seen.insert(v.as_str()) {
            errs.push(FieldError::invalid(
                format!("{at}[{i}]"),
                v,
                "duplicate version",
            ));
            continue;
        }
        if let Err(e) = dns1035_label(v) {
            errs.push(FieldError::invalid(format!("{at}[{i}]"), v, e));
        }
    }
    if !versions.iter().any(|v| v == "v1" || v == "v1beta1") {
        let listed: Vec<String> = versions.iter().map(|v| format!("{v:?}")).collect();
        errs.push(FieldError::invalid_raw(
            at,
            format!("[]string{{{}}}", listed.join(", ")),
            "must include at least one of v1, v1beta1",
        ));
    }
    errs
}
