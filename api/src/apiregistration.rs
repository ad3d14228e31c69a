//! apiregistration.k8s.io/v1: APIService, a group version served by this server (local) or by
//! an extension API server behind a Service (aggregated), with kube-aggregator's defaults,
//! validation messages and conditions (docs/design/admission.md §3).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::ByteString;
use crate::meta::{ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group.
pub const GROUP: &str = "apiregistration.k8s.io";

/// The label the server's autoregistration puts on the APIServices it keeps, with
/// [`MANAGE_ON_START`] or [`MANAGE_CONTINUOUSLY`].
pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";
/// Synced once when the server starts (the built-in group versions).
pub const MANAGE_ON_START: &str = "onstart";
/// Synced for as long as the server runs (custom resources' group versions).
pub const MANAGE_CONTINUOUSLY: &str = "true";

/// The condition type kube-aggregator keeps.
pub const AVAILABLE: &str = "Available";

/// APIService represents a server for a particular GroupVersion. Name must be
/// "version.group".
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService")]
pub struct APIService {
    /// Standard object's metadata.
    pub metadata: ObjectMeta,
    /// Spec contains information for locating and communicating with a server
    pub spec: APIServiceSpec,
    /// Status contains derived information about an API server
    pub status: APIServiceStatus,
}

/// APIServiceSpec contains information for locating and communicating with a server. Only
/// https is supported, though you are able to disable certificate verification.
///
/// `service` is written as `null` when absent (kube's field has no `omitempty`); see
/// `crate::omit`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceSpec")]
pub struct APIServiceSpec {
    /// Service is a reference to the service for this API server.  It must communicate on
    /// port 443. If the Service is nil, that means the handling for the API groupversion is
    /// handled locally on this server. The call will simply delegate to the normal handler
    /// chain to be fulfilled.
    pub service: Option<ServiceReference>,
    /// Group is the API group name this server hosts
    pub group: Option<String>,
    /// Version is the API version this server hosts.  For example, "v1"
    pub version: Option<String>,
    /// InsecureSkipTLSVerify disables TLS certificate verification when communicating with
    /// this server. This is strongly discouraged.  You should use the CABundle instead.
    #[serde(rename = "insecureSkipTLSVerify")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// CABundle is a PEM encoded CA bundle which will be used to validate an API server's
    /// serving certificate. If unspecified, system trust roots on the apiserver are used.
    pub ca_bundle: Option<ByteString>,
    /// GroupPriorityMinimum is the priority this group should have at least. Higher priority
    /// means that the group is preferred by clients over lower priority ones. Note that
    /// other versions of this group might specify even higher GroupPriorityMinimum values
    /// such that the whole group gets a higher priority. The primary sort is based on
    /// GroupPriorityMinimum, ordered highest number to lowest (20 before 10). The secondary
    /// sort is based on the alphabetical comparison of the name of the object.  (v1.bar
    /// before v1.foo) We'd recommend something like: *.k8s.io (except extensions) at 18000
    /// and PaaSes (OpenShift, Deis) are recommended to be in the 2000s
    pub group_priority_minimum: i32,
    /// VersionPriority controls the ordering of this API version inside of its group.  Must
    /// be greater than zero. The primary sort is based on VersionPriority, ordered highest to
    /// lowest (20 before 10). Since it's inside of a group, the number can be small,
    /// probably in the 10s. In case of equal version priorities, the version string will be
    /// used to compute the order inside a group. If the version string is "kube-like", it
    /// will sort above non "kube-like" version strings, which are ordered lexicographically.
    pub version_priority: i32,
}

/// ServiceReference holds a reference to Service.legacy.k8s.io
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.ServiceReference")]
pub struct ServiceReference {
    /// Namespace is the namespace of the service
    pub namespace: String,
    /// Name is the name of the service
    pub name: String,
    /// If specified, the port on the service that hosting webhook. Default to 443 for
    /// backward compatibility. `port` should be a valid port number (1-65535, inclusive).
    pub port: Option<i32>,
}

impl ServiceReference {
    /// The port, 443 when unset (kube's default).
    pub fn port(&self) -> i32 {
        self.port.unwrap_or(443)
    }
}

/// APIServiceStatus contains derived information about an API server
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceStatus")]
pub struct APIServiceStatus {
    /// Current service state of apiService.
    pub conditions: Vec<APIServiceCondition>,
}

/// APIServiceCondition describes the state of an APIService at a particular point
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceCondition")]
pub struct APIServiceCondition {
    /// Type is the type of the condition.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status is the status of the condition. Can be True, False, Unknown.
    pub status: String,
    /// Last time the condition transitioned from one status to another.
    pub last_transition_time: Option<Time>,
    /// Unique, one-word, CamelCase reason for the condition's last transition.
    pub reason: Option<String>,
    /// Human-readable message indicating details about last transition.
    pub message: Option<String>,
}

impl APIServiceCondition {
    /// An `Available` condition, its transition now.
    pub fn available(status: &str, reason: &str, message: &str) -> APIServiceCondition {
        APIServiceCondition {
            type_: AVAILABLE.into(),
            status: status.into(),
            last_transition_time: Some(Time::now()),
            reason: Some(reason.into()),
            message: Some(message.into()),
        }
    }

    /// What a local APIService always is (kube's NewLocalAvailableAPIServiceCondition).
    pub fn local() -> APIServiceCondition {
        APIServiceCondition::available("True", "Local", "Local APIServices are always available")
    }
}

impl APIService {
    /// `version.group`, the name an APIService must have (`v1.` for the core group).
    pub fn name_for(group: &str, version: &str) -> String {
        format!("{version}.{group}")
    }

    /// The group ("" for the core group).
    pub fn group(&self) -> &str {
        self.spec.group.as_deref().unwrap_or("")
    }

    /// The version.
    pub fn version(&self) -> &str {
        self.spec.version.as_deref().unwrap_or("")
    }

    /// The condition of `type_`, if there is one.
    pub fn condition(&self, type_: &str) -> Option<&APIServiceCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the Available condition is True.
    pub fn is_available(&self) -> bool {
        self.condition(AVAILABLE)
            .is_some_and(|c| c.status == "True")
    }

    /// Sets a condition as kube's SetAPIServiceCondition does: its transition time moves
    /// only when its status changes.
    pub fn set_condition(&mut self, new: APIServiceCondition) {
        match self
            .status
            .conditions
            .iter_mut()
            .find(|c| c.type_ == new.type_)
        {
            None => self.status.conditions.push(new),
            Some(c) => {
                if c.status != new.status {
                    c.status = new.status;
                    c.last_transition_time = new.last_transition_time;
                }
                c.reason = new.reason;
                c.message = new.message;
            }
        }
    }

    /// The `automanaged` label's value, if any.
    pub fn automanaged(&self) -> Option<&str> {
        self.metadata
            .labels
            .get(AUTOMANAGED_LABEL)
            .map(String::as_str)
            .filter(|v| *v == MANAGE_ON_START || *v == MANAGE_CONTINUOUSLY)
    }
}

impl Resource for APIService {
    const KIND: Kind = Kind::APIService;
    crate::resource_basics!(APIService);

    /// The service port defaults to 443; empty optional fields are absent, as kube's
    /// `omitempty` writes them.
    fn set_defaults(&mut self) {
        let spec = &mut self.spec;
        if let Some(s) = spec.service.as_mut() {
            s.port.get_or_insert(443);
        }
        if spec.group.as_deref() == Some("") {
            spec.group = None;
        }
        if spec.version.as_deref() == Some("") {
            spec.version = None;
        }
        if spec.insecure_skip_tls_verify == Some(false) {
            spec.insecure_skip_tls_verify = None;
        }
        if spec.ca_bundle.as_ref().is_some_and(|b| b.0.is_empty()) {
            spec.ca_bundle = None;
        }
    }

    /// kube-aggregator's ValidateAPIService.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::APIService);
        let spec = &self.spec;
        let (group, version) = (self.group(), self.version());
        let required = APIService::name_for(group, version);
        let name = &self.metadata.name;
        if !name.is_empty() && crate::rbac::path_segment_name(name).is_ok() && *name != required {
            errs.push(FieldError::invalid(
                "metadata.name",
                name,
                format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
            ));
        }
        if group.is_empty() && version != "v1" {
            errs.push(FieldError::required_msg(
                "spec.group",
                "only v1 may have an empty group and it better be legacy kube",
            ));
        }
        if !group.is_empty() {
            if let Err(why) = validation::dns1123_subdomain(group) {
                errs.push(FieldError::invalid("spec.group", group, why));
            }
        }
        if let Err(why) = validation::dns1035_label(version) {
            errs.push(FieldError::invalid("spec.version", version, why));
        }
        if spec.group_priority_minimum <= 0 || spec.group_priority_minimum > 20000 {
            errs.push(FieldError::invalid_raw(
                "spec.groupPriorityMinimum",
                spec.group_priority_minimum,
                "must be positive and less than 20000",
            ));
        }
        if spec.version_priority <= 0 || spec.version_priority > 1000 {
            errs.push(FieldError::invalid_raw(
                "spec.versionPriority",
                spec.version_priority,
                "must be positive and less than 1000",
            ));
        }
        let ca_len = spec.ca_bundle.as_ref().map_or(0, |b| b.0.len());
        let insecure = spec.insecure_skip_tls_verify.unwrap_or(false);
        match &spec.service {
            None => {
                if ca_len != 0 {
                    errs.push(FieldError::invalid(
                        "spec.caBundle",
                        format!("{ca_len} bytes"),
                        "local APIServices may not have a caBundle",
                    ));
                }
                if insecure {
                    errs.push(FieldError::invalid_raw(
                        "spec.insecureSkipTLSVerify",
                        insecure,
                        "local APIServices may not have insecureSkipTLSVerify",
                    ));
                }
            }
            Some(s) => {
                if s.namespace.is_empty() {
                    errs.push(FieldError::required("spec.service.namespace"));
                }
                if s.name.is_empty() {
                    errs.push(FieldError::required("spec.service.name"));
                }
                if insecure && ca_len > 0 {
                    errs.push(FieldError::invalid_raw(
                        "spec.insecureSkipTLSVerify",
                        insecure,
                        "may not be true if caBundle is present",
                    ));
                }
            }
        }
        errs.extend(self.validate_status());
        errs
    }

    /// kube-aggregator's ValidateAPIServiceStatus: each condition's status True, False or
    /// Unknown.
    fn validate_status(&self) -> Vec<FieldError> {
        const STATUSES: &[&str] = &["True", "False", "Unknown"];
        let mut errs = Vec::new();
        for (i, c) in self.status.conditions.iter().enumerate() {
            if !STATUSES.contains(&c.status.as_str()) {
                errs.push(FieldError::not_supported(
                    format!("status.conditions[{i}].status"),
                    &c.status,
                    STATUSES,
                ));
            }
        }
        errs
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }

    /// kube's PrepareForCreate: no status, but a local APIService is available at once.
    fn clear_status(&mut self) {
        self.status = APIServiceStatus::default();
        if self.spec.service.is_none() {
            self.set_condition(APIServiceCondition::local());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> APIService {
        let mut s: APIService = crate::codec::from_json(v).expect("an APIService");
        s.set_defaults();
        s
    }

    fn remote() -> serde_json::Value {
        json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.example.com"},
            "spec": {"group": "metrics.example.com", "version": "v1beta1",
                     "service": {"namespace": "ext", "name": "api"},
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "insecureSkipTLSVerify": false}
        })
    }

    fn messages(s: &APIService) -> Vec<String> {
        s.validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn defaults_and_json_shape() {
        let s = parse(remote());
        assert_eq!(s.spec.service.as_ref().and_then(|s| s.port), Some(443));
        assert!(messages(&s).is_empty(), "{:?}", messages(&s));
        let out = crate::codec::to_json(&s);
        assert_eq!(
            out["spec"],
            json!({"service": {"namespace": "ext", "name": "api", "port": 443},
                   "group": "metrics.example.com", "version": "v1beta1",
                   "groupPriorityMinimum": 100, "versionPriority": 100})
        );
        assert_eq!(out["status"], json!({}));
        // A local one: `service: null` and no group for the core group, as kube writes them.
        let mut local = parse(json!({
            "metadata": {"name": "v1."},
            "spec": {"version": "v1", "group": "", "groupPriorityMinimum": 18000, "versionPriority": 1}
        }));
        assert!(messages(&local).is_empty(), "{:?}", messages(&local));
        local.clear_status();
        let mut bytes = Vec::new();
        crate::codec::write_json(&local, &mut bytes);
        let text = String::from_utf8(bytes).expect("UTF-8");
        assert!(
            text.contains(
                r#""spec":{"service":null,"version":"v1","groupPriorityMinimum":18000,"versionPriority":1},"status":{"conditions":[{"type":"Available","status":"True","lastTransitionTime":"#
            ),
            "{text}"
        );
        assert!(text
            .contains(r#""reason":"Local","message":"Local APIServices are always available"}]}"#));
    }

    #[test]
    fn kube_validation_messages() {
        let mut v = remote();
        v["metadata"]["name"] = json!("metrics");
        v["spec"]["groupPriorityMinimum"] = json!(0);
        v["spec"]["versionPriority"] = json!(1001);
        v["spec"]["caBundle"] = json!("Zm9v");
        v["spec"]["insecureSkipTLSVerify"] = json!(true);
        v["spec"]["service"] = json!({"port": 8443});
        assert_eq!(
            messages(&parse(v)),
            [
                "metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.example.com\"",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
                "spec.service.namespace: Required value",
                "spec.service.name: Required value",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ]
        );
        let local = parse(json!({
            "metadata": {"name": "v2."},
            "spec": {"version": "v2", "caBundle": "Zm9v", "insecureSkipTLSVerify": true,
                     "groupPriorityMinimum": 1, "versionPriority": 1}
        }));
        assert_eq!(
            messages(&local),
            [
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                "spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ]
        );
        let bad = parse(json!({
            "metadata": {"name": "V1.Example.com"},
            "spec": {"version": "V1", "group": "Example.com", "groupPriorityMinimum": 1, "versionPriority": 1}
        }));
        let m = messages(&bad);
        assert!(
            m[0].starts_with(
                "spec.group: Invalid value: \"Example.com\": a lowercase RFC 1123 subdomain"
            ),
            "{m:?}"
        );
        assert!(
            m[1].starts_with("spec.version: Invalid value: \"V1\": a DNS-1035 label"),
            "{m:?}"
        );
        let mut status = parse(remote());
        status.status.conditions.push(APIServiceCondition {
            type_: AVAILABLE.into(),
            status: "Maybe".into(),
            ..Default::default()
        });
        assert_eq!(
            messages(&status),
            ["status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""]
        );
    }

    #[test]
    fn conditions_move_their_time_only_on_a_new_status() {
        let mut s = parse(remote());
        let mut first = APIServiceCondition::available("False", "ServiceNotFound", "gone");
        first.last_transition_time = Some(Time(100));
        s.set_condition(first);
        let mut again = APIServiceCondition::available("False", "MissingEndpoints", "none");
        again.last_transition_time = Some(Time(200));
        s.set_condition(again);
        let c = s.condition(AVAILABLE).expect("condition");
        assert_eq!(c.last_transition_time, Some(Time(100)));
        assert_eq!(c.reason.as_deref(), Some("MissingEndpoints"));
        let mut up = APIServiceCondition::available("True", "Passed", "all checks passed");
        up.last_transition_time = Some(Time(300));
        s.set_condition(up);
        assert!(s.is_available());
        assert_eq!(
            s.condition(AVAILABLE).and_then(|c| c.last_transition_time),
            Some(Time(300))
        );
    }
}
