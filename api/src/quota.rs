//! core/v1 ResourceQuota and LimitRange, and the arithmetic of their admission: what an
//! object uses of a quota (counts and compute), the LimitRanger's defaults and min/max
//! checks, with Kubernetes' messages.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{omit_empty, spec_and_status, Container, Pod};
use crate::meta::{ObjectMeta, Quantity};
use crate::object::{AnyObject, Kind, Resource};
use crate::validation::{self, FieldError};

/// core/v1 ResourceQuota.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ResourceQuota")]
#[schemars(description = "ResourceQuota sets aggregate quota restrictions enforced per namespace")]
pub struct ResourceQuota {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The desired quota.
    pub spec: ResourceQuotaSpec,
    /// The enforced hard limits and the current usage.
    pub status: ResourceQuotaStatus,
}

/// core/v1 ResourceQuotaSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ResourceQuotaSpec")]
#[schemars(description = "ResourceQuotaSpec defines the desired hard limits to enforce for Quota.")]
pub struct ResourceQuotaSpec {
    /// The most of each named resource the namespace may use (pods, requests.cpu,
    /// count/deployments.apps...).
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub hard: BTreeMap<String, Quantity>,
    /// Which objects the quota counts: Terminating, NotTerminating, BestEffort,
    /// NotBestEffort, PriorityClass. Every scope must match.
    pub scopes: Vec<String>,
    /// Scopes as expressions (PriorityClass In [high], ...); every one must match.
    pub scope_selector: Option<ScopeSelector>,
}

/// core/v1 ScopeSelector.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ScopeSelector")]
#[schemars(
    description = "A scope selector represents the AND of the selectors represented by the scoped-resource selector requirements."
)]
pub struct ScopeSelector {
    /// The requirements, all of which must hold.
    pub match_expressions: Vec<ScopedResourceSelectorRequirement>,
}

/// core/v1 ScopedResourceSelectorRequirement.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ScopedResourceSelectorRequirement")]
#[schemars(
    description = "A scoped-resource selector requirement is a selector that contains values, a scope name, and an operator that relates the scope name and values."
)]
pub struct ScopedResourceSelectorRequirement {
    /// The scope the selector applies to (PriorityClass, Terminating, BestEffort...).
    pub scope_name: String,
    /// In, NotIn, Exists or DoesNotExist.
    pub operator: String,
    /// The values of In and NotIn.
    pub values: Vec<String>,
}

/// core/v1 ResourceQuotaStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ResourceQuotaStatus")]
#[schemars(description = "ResourceQuotaStatus defines the enforced hard limits and observed use.")]
pub struct ResourceQuotaStatus {
    /// The enforced hard limits.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub hard: BTreeMap<String, Quantity>,
    /// What the namespace uses of each limited resource.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub used: BTreeMap<String, Quantity>,
}

/// core/v1 LimitRange.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LimitRange")]
#[schemars(
    description = "LimitRange sets resource usage limits for each kind of resource in a Namespace."
)]
pub struct LimitRange {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The limits enforced.
    pub spec: LimitRangeSpec,
}

/// core/v1 LimitRangeSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LimitRangeSpec")]
#[schemars(
    description = "LimitRangeSpec defines a min/max usage limit for resources that match on kind."
)]
pub struct LimitRangeSpec {
    /// The limits, per type of object.
    pub limits: Vec<LimitRangeItem>,
}

/// core/v1 LimitRangeItem.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LimitRangeItem")]
#[schemars(
    description = "LimitRangeItem defines a min/max usage limit for any resource that matches on kind."
)]
pub struct LimitRangeItem {
    /// Container, Pod or PersistentVolumeClaim (min and max of its storage request).
    #[serde(rename = "type")]
    pub type_: String,
    /// The most of each resource a container (or pod) may have as limit and request.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub max: BTreeMap<String, Quantity>,
    /// The least of each resource a container (or pod) must request.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub min: BTreeMap<String, Quantity>,
    /// The limit a container gets when it sets none.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub default: BTreeMap<String, Quantity>,
    /// The request a container gets when it sets none.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub default_request: BTreeMap<String, Quantity>,
    /// The largest limit-to-request ratio allowed per resource.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub max_limit_request_ratio: BTreeMap<String, Quantity>,
}

fn check_quantities(errs: &mut Vec<FieldError>, field: &str, m: &BTreeMap<String, Quantity>) {
    for (k, q) in m {
        if q.validate().is_err() {
            errs.push(FieldError::invalid(
                format!("{field}[{k}]"),
                &q.0,
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ));
        } else if q.milli_value().is_ok_and(|v| v < 0) {
            errs.push(FieldError::invalid(
                format!("{field}[{k}]"),
                &q.0,
                "must be greater than or equal to 0",
            ));
        }
    }
}

/// The quota scopes skiff enforces (Kubernetes' without CrossNamespacePodAffinity).
pub const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
];

impl Resource for ResourceQuota {
    const KIND: Kind = Kind::ResourceQuota;
    crate::resource_basics!(ResourceQuota);
    spec_and_status!();

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::ResourceQuota);
        check_quantities(&mut errs, "spec.hard", &self.spec.hard);
        for (i, s) in self.spec.scopes.iter().enumerate() {
            if !SCOPES.contains(&s.as_str()) {
                errs.push(FieldError::not_supported(
                    format!("spec.scopes[{i}]"),
                    s,
                    SCOPES,
                ));
            }
        }
        let exprs = self
            .spec
            .scope_selector
            .iter()
            .flat_map(|s| &s.match_expressions);
        for (i, e) in exprs.enumerate() {
            let p = format!("spec.scopeSelector.matchExpressions[{i}]");
            if !SCOPES.contains(&e.scope_name.as_str()) {
                errs.push(FieldError::not_supported(
                    format!("{p}.scopeName"),
                    &e.scope_name,
                    SCOPES,
                ));
            }
            match e.operator.as_str() {
                "In" | "NotIn" if e.values.is_empty() => errs.push(FieldError::required_msg(
                    format!("{p}.values"),
                    "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                )),
                "Exists" | "DoesNotExist" if !e.values.is_empty() => {
                    errs.push(FieldError::invalid(
                        format!("{p}.values"),
                        format!("{:?}", e.values),
                        "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                    ))
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => errs.push(FieldError::not_supported(
                    format!("{p}.operator"),
                    other,
                    &["DoesNotExist", "Exists", "In", "NotIn"],
                )),
            }
        }
        errs
    }
}

impl Resource for LimitRange {
    const KIND: Kind = Kind::LimitRange;
    crate::resource_basics!(LimitRange);

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    /// Kubernetes' SetDefaults_LimitRangeItem for Container items: the default limit is the
    /// max, the default request the default limit, else the min.
    fn set_defaults(&mut self) {
        for item in &mut self.spec.limits {
            if item.type_ != "Container" {
                continue;
            }
            for (k, v) in &item.max {
                item.default.entry(k.clone()).or_insert_with(|| v.clone());
            }
            for (k, v) in &item.default {
                item.default_request
                    .entry(k.clone())
                    .or_insert_with(|| v.clone());
            }
            for (k, v) in &item.min {
                item.default_request
                    .entry(k.clone())
                    .or_insert_with(|| v.clone());
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::LimitRange);
        for (i, item) in self.spec.limits.iter().enumerate() {
            let p = format!("spec.limits[{i}]");
            if !["Container", "Pod", "PersistentVolumeClaim"].contains(&item.type_.as_str()) {
                errs.push(FieldError::not_supported(
                    format!("{p}.type"),
                    &item.type_,
                    &["Container", "PersistentVolumeClaim", "Pod"],
                ));
            }
            for (name, m) in [
                ("max", &item.max),
                ("min", &item.min),
                ("default", &item.default),
                ("defaultRequest", &item.default_request),
                ("maxLimitRequestRatio", &item.max_limit_request_ratio),
            ] {
                check_quantities(&mut errs, &format!("{p}.{name}"), m);
            }
            if item.type_ == "Pod" {
                if !item.default.is_empty() {
                    errs.push(FieldError::forbidden(
                        format!("{p}.default"),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
                if !item.default_request.is_empty() {
                    errs.push(FieldError::forbidden(
                        format!("{p}.defaultRequest"),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
            }
            let milli = |m: &BTreeMap<String, Quantity>, k: &str| {
                m.get(k).and_then(|q| q.milli_value().ok())
            };
            for (k, min) in &item.min {
                if let (Some(lo), Some(hi)) = (milli(&item.min, k), milli(&item.max, k)) {
                    if lo > hi {
                        errs.push(FieldError::invalid(
                            format!("{p}.min[{k}]"),
                            &min.0,
                            format!(
                                "min value {} is greater than max value {}",
                                min.0, item.max[k].0
                            ),
                        ));
                    }
                }
            }
            for (k, d) in &item.default_request {
                let v = milli(&item.default_request, k);
                if let (Some(v), Some(lo)) = (v, milli(&item.min, k)) {
                    if v < lo {
                        errs.push(FieldError::invalid(
                            format!("{p}.defaultRequest[{k}]"),
                            &d.0,
                            format!(
                                "min value {} is greater than default request value {}",
                                item.min[k].0, d.0
                            ),
                        ));
                    }
                }
                if let (Some(v), Some(hi)) = (v, milli(&item.default, k)) {
                    if v > hi {
                        errs.push(FieldError::invalid(
                            format!("{p}.defaultRequest[{k}]"),
                            &d.0,
                            format!(
                                "default request value {} is greater than default limit value {}",
                                d.0, item.default[k].0
                            ),
                        ));
                    }
                }
            }
            for (k, d) in &item.default {
                if let (Some(v), Some(hi)) = (milli(&item.default, k), milli(&item.max, k)) {
                    if v > hi {
                        errs.push(FieldError::invalid(
                            format!("{p}.default[{k}]"),
                            &d.0,
                            format!(
                                "default value {} is greater than max value {}",
                                d.0, item.max[k].0
                            ),
                        ));
                    }
                }
            }
        }
        errs
    }
}

// ---------------------------------------------------------------------------------------
// LimitRanger

/// The annotation the LimitRanger leaves on a pod whose resources it set.
pub const LIMIT_RANGER_ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Kubernetes' errors.NewAggregate text: one message as it is, several in brackets.
fn aggregate(errs: Vec<String>) -> Result<(), String> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

fn resources_mut(c: &mut Container) -> &mut crate::core::ResourceRequirements {
    c.resources.get_or_insert_with(Default::default)
}

/// Sets the defaults of the Container items of `ranges` on `pod`'s containers that lack
/// them, recording what was set in the limit-ranger annotation.
pub fn apply_defaults(pod: &mut Pod, ranges: &[LimitRange]) {
    let mut limits = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for r in ranges {
        for item in r.spec.limits.iter().filter(|i| i.type_ == "Container") {
            limits.extend(item.default.clone());
            requests.extend(item.default_request.clone());
        }
    }
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    let spec = &mut pod.spec;
    let all = spec
        .init_containers
        .iter_mut()
        .map(|c| ("init container", c))
        .chain(spec.containers.iter_mut().map(|c| ("container", c)));
    for (what, c) in all {
        let name = c.name.clone();
        let res = resources_mut(c);
        let mut set_limits = Vec::new();
        let mut set_requests = Vec::new();
        for (k, v) in &limits {
            if !res.limits.contains_key(k) {
                res.limits.insert(k.clone(), v.clone());
                set_limits.push(k.clone());
            }
        }
        for (k, v) in &requests {
            if !res.requests.contains_key(k) {
                res.requests.insert(k.clone(), v.clone());
                set_requests.push(k.clone());
            }
        }
        if !set_requests.is_empty() {
            notes.push(format!(
                "{} request for {what} {name}",
                set_requests.join(", ")
            ));
        }
        if !set_limits.is_empty() {
            notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
        }
    }
    if !notes.is_empty() {
        pod.metadata.annotations.insert(
            LIMIT_RANGER_ANNOTATION.into(),
            format!("LimitRanger plugin set: {}", notes.join("; ")),
        );
    }
}

/// Kubernetes' requestLimitEnforcedValues: compared in thousandths.
fn milli(q: Option<&Quantity>) -> i128 {
    q.and_then(|q| q.milli_value().ok()).unwrap_or(0) as i128
}

fn check_item(
    errs: &mut Vec<String>,
    what: &str,
    item: &LimitRangeItem,
    requests: &BTreeMap<String, Quantity>,
    limits: &BTreeMap<String, Quantity>,
) {
    for (k, enforced) in &item.min {
        let (req, lim) = (requests.get(k), limits.get(k));
        let e = milli(Some(enforced));
        match req {
            None => errs.push(format!(
                "minimum {k} usage per {what} is {}.  No request is specified",
                enforced.0
            )),
            Some(r) if milli(Some(r)) < e => errs.push(format!(
                "minimum {k} usage per {what} is {}, but request is {}",
                enforced.0, r.0
            )),
            _ => {
                if let Some(l) = lim.filter(|l| milli(Some(l)) < e) {
                    errs.push(format!(
                        "minimum {k} usage per {what} is {}, but limit is {}",
                        enforced.0, l.0
                    ));
                }
            }
        }
    }
    for (k, enforced) in &item.max {
        let (req, lim) = (requests.get(k), limits.get(k));
        let e = milli(Some(enforced));
        match lim {
            None => errs.push(format!(
                "maximum {k} usage per {what} is {}.  No limit is specified",
                enforced.0
            )),
            Some(l) if milli(Some(l)) > e => errs.push(format!(
                "maximum {k} usage per {what} is {}, but limit is {}",
                enforced.0, l.0
            )),
            _ => {
                if let Some(r) = req.filter(|r| milli(Some(r)) > e) {
                    errs.push(format!(
                        "maximum {k} usage per {what} is {}, but request is {}",
                        enforced.0, r.0
                    ));
                }
            }
        }
    }
    for (k, enforced) in &item.max_limit_request_ratio {
        let (req, lim) = (milli(requests.get(k)), milli(limits.get(k)));
        if req == 0 {
            errs.push(format!("{k} max limit to request ratio per {what} is {}, but no request is specified or request is 0", enforced.0));
        } else if lim == 0 {
            errs.push(format!("{k} max limit to request ratio per {what} is {}, but no limit is specified or limit is 0", enforced.0));
        } else {
            let ratio = lim as f64 / req as f64;
            if ratio * 1000.0 > milli(Some(enforced)) as f64 {
                errs.push(format!("{k} max limit to request ratio per {what} is {}, but provided ratio is {ratio:.6}", enforced.0));
            }
        }
    }
}

fn sum_into(total: &mut BTreeMap<String, i128>, m: &BTreeMap<String, Quantity>) {
    for (k, q) in m {
        *total.entry(k.clone()).or_insert(0) += milli(Some(q));
    }
}

fn to_quantities(m: BTreeMap<String, i128>) -> BTreeMap<String, Quantity> {
    m.into_iter()
        .map(|(k, v)| {
            let q = format_amount(&k, v);
            (k, q)
        })
        .collect()
}

/// Kubernetes' PodValidateLimitFunc: every container (and the pod's total) within the
/// Container (and Pod) items' min, max and ratio. Err is the reason for Forbidden.
pub fn validate_pod(pod: &Pod, ranges: &[LimitRange]) -> Result<(), String> {
    let mut errs = Vec::new();
    let empty = BTreeMap::new();
    for r in ranges {
        for item in &r.spec.limits {
            match item.type_.as_str() {
                "Container" => {
                    for c in pod.spec.all_containers() {
                        let (req, lim) = c
                            .resources
                            .as_ref()
                            .map_or((&empty, &empty), |r| (&r.requests, &r.limits));
                        check_item(&mut errs, "Container", item, req, lim);
                    }
                }
                "Pod" => {
                    let (mut req, mut lim) = (BTreeMap::new(), BTreeMap::new());
                    for c in &pod.spec.containers {
                        if let Some(r) = &c.resources {
                            sum_into(&mut req, &r.requests);
                            sum_into(&mut lim, &r.limits);
                        }
                    }
                    check_item(
                        &mut errs,
                        "Pod",
                        item,
                        &to_quantities(req),
                        &to_quantities(lim),
                    );
                }
                _ => {}
            }
        }
    }
    aggregate(errs)
}

/// The LimitRanger's check of a claim against the `PersistentVolumeClaim` items of the
/// namespace's LimitRanges: its storage request within their min and max.
pub fn validate_claim(
    claim: &crate::storage::PersistentVolumeClaim,
    ranges: &[LimitRange],
) -> Result<(), String> {
    let mut errs = Vec::new();
    let requests = &claim.spec.resources.requests;
    for item in ranges
        .iter()
        .flat_map(|r| &r.spec.limits)
        .filter(|i| i.type_ == "PersistentVolumeClaim")
    {
        let what = "PersistentVolumeClaim";
        for (k, enforced) in &item.min {
            match requests.get(k) {
                None => errs.push(format!(
                    "minimum {k} usage per {what} is {}.  No request is specified",
                    enforced.0
                )),
                Some(r) if milli(Some(r)) < milli(Some(enforced)) => errs.push(format!(
                    "minimum {k} usage per {what} is {}, but request is {}",
                    enforced.0, r.0
                )),
                _ => {}
            }
        }
        for (k, enforced) in &item.max {
            if let Some(r) = requests
                .get(k)
                .filter(|r| milli(Some(r)) > milli(Some(enforced)))
            {
                errs.push(format!(
                    "maximum {k} usage per {what} is {}, but request is {}",
                    enforced.0, r.0
                ));
            }
        }
    }
    aggregate(errs)
}

// ---------------------------------------------------------------------------------------
// Quota usage

/// Whether a resource is measured like cpu (in cores, shown in thousandths).
fn cpu_like(resource: &str) -> bool {
    matches!(resource, "cpu" | "requests.cpu" | "limits.cpu")
}

/// An amount (in thousandths) as Kubernetes would print it: cpu in cores or `m`, counts as
/// integers, bytes in the largest binary unit that divides them.
pub fn format_amount(resource: &str, milli: i128) -> Quantity {
    // Sums of many quantities can pass i64, which quantities are counted in: they show as
    // the largest i64 amount (casting wrapped them, a huge usage showing as negative).
    let saturated = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
    if cpu_like(resource) {
        return Quantity::from_milli(saturated(milli));
    }
    let whole = milli / 1000;
    if milli % 1000 != 0 {
        return Quantity::from_milli(saturated(milli));
    }
    if resource.contains("memory") || resource.contains("storage") {
        Quantity::from_bytes(saturated(whole))
    } else {
        Quantity(whole.to_string())
    }
}

/// Whether a pod counts towards quota: not finished.
pub fn pod_counts(pod: &Pod) -> bool {
    !matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

fn best_effort(pod: &Pod) -> bool {
    pod.spec.all_containers().all(|c| {
        c.resources
            .as_ref()
            .is_none_or(|r| r.requests.is_empty() && r.limits.is_empty())
    })
}

fn scope_holds(scope: &str, pod: &Pod) -> bool {
    match scope {
        "Terminating" => pod.spec.active_deadline_seconds.is_some(),
        "NotTerminating" => pod.spec.active_deadline_seconds.is_none(),
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "PriorityClass" => pod
            .spec
            .priority_class_name
            .as_deref()
            .is_some_and(|c| !c.is_empty()),
        _ => false,
    }
}

/// Whether a quota covers `obj`: every scope and scope selector expression holds (they only
/// ever select pods; other kinds are covered only by unscoped quotas).
pub fn in_scope(spec: &ResourceQuotaSpec, obj: &AnyObject) -> bool {
    let exprs: Vec<&ScopedResourceSelectorRequirement> = spec
        .scope_selector
        .iter()
        .flat_map(|s| &s.match_expressions)
        .collect();
    let AnyObject::Pod(pod) = obj else {
        return spec.scopes.is_empty() && exprs.is_empty();
    };
    spec.scopes.iter().all(|s| scope_holds(s, pod))
        && exprs.iter().all(|e| {
            if e.scope_name != "PriorityClass" {
                // The other scopes take Exists (and DoesNotExist for the opposite).
                let holds = scope_holds(&e.scope_name, pod);
                return if e.operator == "DoesNotExist" {
                    !holds
                } else {
                    holds
                };
            }
            let class = pod
                .spec
                .priority_class_name
                .as_deref()
                .filter(|c| !c.is_empty());
            match e.operator.as_str() {
                "In" => class.is_some_and(|c| e.values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !e.values.iter().any(|v| v == c)),
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                _ => false,
            }
        })
}

/// What one object uses, in thousandths, by quota resource name: its `count/` entry, the
/// legacy count names, and for pods the compute resources.
pub fn usage(obj: &AnyObject) -> BTreeMap<String, i128> {
    let mut u = BTreeMap::new();
    let info = obj.kind().info();
    let count = if info.group.is_empty() {
        format!("count/{}", info.plural)
    } else {
        format!("count/{}.{}", info.plural, info.group)
    };
    if let AnyObject::Pod(p) = obj {
        if !pod_counts(p) {
            return u;
        }
    }
    u.insert(count, 1000);
    let legacy = match obj.kind() {
        Kind::Pod => Some("pods"),
        Kind::Service => Some("services"),
        Kind::ConfigMap => Some("configmaps"),
        Kind::Secret => Some("secrets"),
        Kind::ReplicationController => Some("replicationcontrollers"),
        Kind::ResourceQuota => Some("resourcequotas"),
        _ => None,
    };
    if let Some(l) = legacy {
        u.insert(l.to_string(), 1000);
    }
    if let AnyObject::Service(s) = obj {
        match s.spec.type_.as_deref() {
            Some("NodePort") => {
                u.insert(
                    "services.nodeports".into(),
                    s.spec.ports.len() as i128 * 1000,
                );
            }
            Some("LoadBalancer") => {
                u.insert("services.loadbalancers".into(), 1000);
                u.insert(
                    "services.nodeports".into(),
                    s.spec.ports.len() as i128 * 1000,
                );
            }
            _ => {}
        }
    }
    if let AnyObject::PersistentVolumeClaim(c) = obj {
        u.insert("persistentvolumeclaims".into(), 1000);
        let storage = c
            .spec
            .resources
            .requests
            .get("storage")
            .map_or(0, |q| milli(Some(q)));
        u.insert("requests.storage".into(), storage);
        if let Some(class) = c
            .spec
            .storage_class_name
            .as_deref()
            .filter(|c| !c.is_empty())
        {
            let prefix = format!("{class}.storageclass.storage.k8s.io/");
            u.insert(format!("{prefix}requests.storage"), storage);
            u.insert(format!("{prefix}persistentvolumeclaims"), 1000);
        }
    }
    if let AnyObject::Pod(p) = obj {
        let (mut req, mut lim) = (BTreeMap::new(), BTreeMap::new());
        for c in &p.spec.containers {
            if let Some(r) = &c.resources {
                sum_into(&mut req, &r.requests);
                sum_into(&mut lim, &r.limits);
            }
        }
        // An init container's request counts when it is larger than the containers' sum.
        for c in &p.spec.init_containers {
            if let Some(r) = &c.resources {
                for (m, src) in [(&mut req, &r.requests), (&mut lim, &r.limits)] {
                    for (k, q) in src {
                        let v = milli(Some(q));
                        let e = m.entry(k.clone()).or_insert(0);
                        *e = (*e).max(v);
                    }
                }
            }
        }
        for r in ["cpu", "memory", "ephemeral-storage"] {
            if let Some(v) = req.get(r) {
                u.insert(r.to_string(), *v);
                u.insert(format!("requests.{r}"), *v);
            }
            if let Some(v) = lim.get(r) {
                u.insert(format!("limits.{r}"), *v);
            }
        }
    }
    u
}

/// The compute resources whose quota makes every container state them explicitly.
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// Kubernetes' pod evaluator Constraints: a quota on cpu or memory needs every container to
/// state it. Err: `must specify limits.cpu for: app; ...`.
pub fn pod_constraints(pod: &Pod, hard: &BTreeMap<String, Quantity>) -> Result<(), String> {
    let required: Vec<&str> = MUST_SPECIFY
        .iter()
        .copied()
        .filter(|r| hard.contains_key(*r))
        .collect();
    if required.is_empty() {
        return Ok(());
    }
    let mut missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for c in pod.spec.all_containers() {
        let (req, lim) = c
            .resources
            .as_ref()
            .map_or((None, None), |r| (Some(&r.requests), Some(&r.limits)));
        for r in &required {
            let has = match *r {
                "cpu" | "requests.cpu" => req.is_some_and(|m| m.contains_key("cpu")),
                "memory" | "requests.memory" => req.is_some_and(|m| m.contains_key("memory")),
                "limits.cpu" => lim.is_some_and(|m| m.contains_key("cpu")),
                _ => lim.is_some_and(|m| m.contains_key("memory")),
            };
            if !has {
                missing.entry(r).or_default().push(c.name.clone());
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .into_iter()
        .map(|(r, mut names)| {
            names.sort();
            names.dedup();
            format!("{r} for: {}", names.join(","))
        })
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

fn pretty(m: &BTreeMap<String, Quantity>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", v.0))
        .collect::<Vec<_>>()
        .join(",")
}

/// The admission of an object using `delta` against one quota, whose namespace already uses
/// `used` (both in thousandths): Ok with the quota's new usage, or the reason for Forbidden
/// (`exceeded quota: ...`).
pub fn admit(
    quota: &ResourceQuota,
    used: &BTreeMap<String, i128>,
    delta: &BTreeMap<String, i128>,
) -> Result<BTreeMap<String, Quantity>, String> {
    let hard = &quota.spec.hard;
    let mut exceeded = Vec::new();
    let mut new_used = BTreeMap::new();
    for (k, limit) in hard {
        let now = used.get(k).copied().unwrap_or(0);
        let add = delta.get(k).copied().unwrap_or(0);
        if add > 0 && now + add > milli(Some(limit)) {
            exceeded.push(k.clone());
        }
        new_used.insert(k.clone(), format_amount(k, now + add));
    }
    if exceeded.is_empty() {
        return Ok(new_used);
    }
    let pick = |f: &dyn Fn(&str) -> Quantity| -> BTreeMap<String, Quantity> {
        exceeded.iter().map(|k| (k.clone(), f(k))).collect()
    };
    let requested = pick(&|k| format_amount(k, delta.get(k).copied().unwrap_or(0)));
    let was = pick(&|k| format_amount(k, used.get(k).copied().unwrap_or(0)));
    let limited = pick(&|k| hard[k].clone());
    Err(format!(
        "exceeded quota: {}, requested: {}, used: {}, limited: {}",
        quota.metadata.name,
        pretty(&requested),
        pretty(&was),
        pretty(&limited)
    ))
}

/// The usage of `objs` (a namespace's objects of the kinds a quota counts) under `quota`.
pub fn used_by<'a>(
    quota: &ResourceQuota,
    objs: impl Iterator<Item = &'a AnyObject>,
) -> BTreeMap<String, i128> {
    let mut total = BTreeMap::new();
    for o in objs {
        if o.meta().deletion_timestamp.is_some() && o.kind() != Kind::Pod {
            continue;
        }
        if !in_scope(&quota.spec, o) {
            continue;
        }
        for (k, v) in usage(o) {
            if quota.spec.hard.contains_key(&k) {
                *total.entry(k).or_insert(0) += v;
            }
        }
    }
    total
}

/// The kinds whose objects `hard` counts (so only those are read to compute usage).
pub fn counted_kinds(hard: &BTreeMap<String, Quantity>) -> Vec<Kind> {
    Kind::ALL
        .iter()
        .copied()
        .filter(|k| {
            let i = k.info();
            let count = if i.group.is_empty() {
                format!("count/{}", i.plural)
            } else {
                format!("count/{}.{}", i.plural, i.group)
            };
            hard.contains_key(&count)
                || (*k == Kind::Pod
                    && hard.keys().any(|h| {
                        h == "pods"
                            || MUST_SPECIFY.contains(&h.as_str())
                            || h.contains("ephemeral-storage")
                    }))
                || (*k == Kind::Service && hard.keys().any(|h| h.starts_with("services")))
                || (*k == Kind::ConfigMap && hard.contains_key("configmaps"))
                || (*k == Kind::Secret && hard.contains_key("secrets"))
                || (*k == Kind::ReplicationController
                    && hard.contains_key("replicationcontrollers"))
                || (*k == Kind::ResourceQuota && hard.contains_key("resourcequotas"))
                || (*k == Kind::PersistentVolumeClaim
                    && hard.keys().any(|h| {
                        h == "persistentvolumeclaims"
                            || h == "requests.storage"
                            || h.contains(".storageclass.storage.k8s.io/")
                    }))
        })
        .collect()
}

/// The status a quota should show given its namespace's usage.
pub fn status_for(quota: &ResourceQuota, used: &BTreeMap<String, i128>) -> ResourceQuotaStatus {
    ResourceQuotaStatus {
        hard: quota.spec.hard.clone(),
        used: quota
            .spec
            .hard
            .keys()
            .map(|k| {
                (
                    k.clone(),
                    format_amount(k, used.get(k).copied().unwrap_or(0)),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn pod(containers: serde_json::Value) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": containers}
        }))
        .unwrap();
        p.set_defaults();
        p
    }

    #[test]
    fn amounts_past_i64_saturate_instead_of_wrapping() {
        let big = i128::from(i64::MAX) * 3;
        assert_eq!(
            format_amount("requests.cpu", big),
            Quantity::from_milli(i64::MAX)
        );
        assert_eq!(
            format_amount("requests.cpu", -big),
            Quantity::from_milli(i64::MIN)
        );
        assert_eq!(
            format_amount("requests.memory", big * 1000),
            Quantity::from_bytes(i64::MAX)
        );
        assert_eq!(format_amount("pods", big * 1000), Quantity(big.to_string()));
        assert_eq!(format_amount("requests.cpu", 1500), q("1500m"));
    }

    #[test]
    fn limit_range_defaults_and_annotation() {
        let mut lr: LimitRange = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cpu-limit-range"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "1", "memory": "512Mi"},
                "defaultRequest": {"cpu": "500m"}}]}
        }))
        .unwrap();
        lr.set_defaults();
        assert_eq!(lr.spec.limits[0].default_request["memory"], q("512Mi"));
        let mut p = pod(serde_json::json!([
            {"name": "a", "image": "i"},
            {"name": "b", "image": "i", "resources": {"limits": {"cpu": "2"}}}
        ]));
        apply_defaults(&mut p, &[lr]);
        let a = p.spec.containers[0].resources.as_ref().unwrap();
        assert_eq!(a.limits["cpu"], q("1"));
        assert_eq!(a.requests["cpu"], q("500m"));
        assert_eq!(a.requests["memory"], q("512Mi"));
        let b = p.spec.containers[1].resources.as_ref().unwrap();
        assert_eq!(b.limits["cpu"], q("2"));
        assert_eq!(
            b.requests["cpu"],
            q("2"),
            "the pod default: request = limit"
        );
        assert_eq!(
            p.metadata.annotations[LIMIT_RANGER_ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a; memory request for container b; memory limit for container b"
        );
    }

    #[test]
    fn limit_range_min_max_ratio_messages() {
        let lr: LimitRange = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r"},
            "spec": {"limits": [{"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"},
                "maxLimitRequestRatio": {"memory": "2"}}]}
        }))
        .unwrap();
        let p = pod(
            serde_json::json!([{"name": "a", "image": "i", "resources": {
            "requests": {"cpu": "50m", "memory": "100Mi"}, "limits": {"cpu": "2", "memory": "300Mi"}}}]),
        );
        assert_eq!(
            validate_pod(&p, std::slice::from_ref(&lr)).unwrap_err(),
            "[minimum cpu usage per Container is 100m, but request is 50m, maximum cpu usage per Container is 1, but limit is 2, memory max limit to request ratio per Container is 2, but provided ratio is 3.000000]"
        );
        let p = pod(serde_json::json!([{"name": "a", "image": "i"}]));
        assert_eq!(
            validate_pod(&p, &[lr]).unwrap_err(),
            "[minimum cpu usage per Container is 100m.  No request is specified, maximum cpu usage per Container is 1.  No limit is specified, memory max limit to request ratio per Container is 2, but no request is specified or request is 0]"
        );
    }

    #[test]
    fn quota_usage_and_refusals() {
        let mut quota = ResourceQuota::default();
        quota.metadata.name = "compute".into();
        quota.spec.hard = [
            ("pods".to_string(), q("2")),
            ("requests.cpu".to_string(), q("1")),
            ("limits.memory".to_string(), q("1Gi")),
        ]
        .into();
        let p = pod(
            serde_json::json!([{"name": "a", "image": "i", "resources": {
            "requests": {"cpu": "600m"}, "limits": {"memory": "512Mi"}}}]),
        );
        let objs = [p.clone().into_any()];
        let used = used_by(&quota, objs.iter());
        assert_eq!(used["pods"], 1000);
        assert_eq!(used["requests.cpu"], 600);
        let st = status_for(&quota, &used);
        assert_eq!(st.used["limits.memory"], q("512Mi"));
        assert_eq!(st.used["requests.cpu"], q("600m"));
        let delta = usage(&p.clone().into_any());
        assert_eq!(
            admit(&quota, &used, &delta).unwrap_err(),
            "exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
        );
        // Missing compute fields.
        let bare =
            pod(serde_json::json!([{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]));
        assert_eq!(
            pod_constraints(&bare, &quota.spec.hard).unwrap_err(),
            "must specify limits.memory for: a,b; requests.cpu for: a,b"
        );
        // Counts of other kinds; finished pods do not count.
        let mut done = p.clone();
        done.status.phase = Some("Succeeded".into());
        assert!(usage(&done.into_any()).is_empty());
        let cm = crate::core::ConfigMap::default().into_any();
        assert_eq!(usage(&cm)["count/configmaps"], 1000);
        assert_eq!(usage(&cm)["configmaps"], 1000);
        let d = crate::apps::Deployment::default().into_any();
        assert_eq!(usage(&d)["count/deployments.apps"], 1000);
    }

    #[test]
    fn scopes_and_priority_class_selectors() {
        let spec: ResourceQuotaSpec = serde_json::from_value(serde_json::json!({
            "hard": {"pods": "10"},
            "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}
        }))
        .unwrap();
        let mut p = pod(serde_json::json!([{"name": "a", "image": "i"}]));
        assert!(!in_scope(&spec, &p.clone().into_any()));
        p.spec.priority_class_name = Some("high".into());
        assert!(in_scope(&spec, &p.clone().into_any()));
        let cm = crate::core::ConfigMap::default().into_any();
        assert!(!in_scope(&spec, &cm), "a scoped quota counts pods only");
        let best = ResourceQuotaSpec {
            scopes: vec!["BestEffort".into()],
            ..Default::default()
        };
        assert!(in_scope(&best, &p.clone().into_any()));
        let mut q = ResourceQuota::default();
        q.metadata.name = "q".into();
        q.spec = spec;
        q.spec.scope_selector.as_mut().unwrap().match_expressions[0].operator = "Exists".into();
        let errs: Vec<String> = q.validate().into_iter().map(|e| e.message).collect();
        assert_eq!(
            errs,
            [
                r#"Invalid value: "["high"]": must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"#
            ]
        );
    }
}
