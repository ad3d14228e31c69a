//! networking.k8s.io/v1 kinds: Ingress, IngressClass and NetworkPolicy.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::spec_and_status;
use crate::meta::{IntOrString, LabelSelector, ObjectMeta};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The annotation that marks an IngressClass as the cluster's default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The deprecated annotation that names an Ingress's class.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// The controller name of skiff's built-in ingress proxy.
pub const SKIFF_CONTROLLER: &str = "skiff.io/ingress";
/// The label an agent puts on its Node when its ingress proxy runs.
pub const PROXY_NODE_LABEL: &str = "ingress.skiff.io/proxy";
/// The name of the IngressClass the server creates at start.
pub const SKIFF_CLASS: &str = "skiff";

// ---------------------------------------------------------------------------------------
// Ingress

/// networking.k8s.io/v1 Ingress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.Ingress")]
#[schemars(
    description = "Ingress is a collection of rules that allow inbound connections to reach the endpoints defined by a backend. An Ingress can be configured to give services externally-reachable urls, load balance traffic, terminate SSL, offer name based virtual hosting etc."
)]
pub struct Ingress {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The desired state of the Ingress.
    pub spec: IngressSpec,
    /// The current state of the Ingress. Read-only.
    pub status: IngressStatus,
}

/// networking.k8s.io/v1 IngressSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressSpec")]
#[schemars(description = "IngressSpec describes the Ingress the user wishes to exist.")]
pub struct IngressSpec {
    /// The name of the IngressClass cluster resource. When unset, the default IngressClass is
    /// set by the server.
    pub ingress_class_name: Option<String>,
    /// The backend that handles requests matching no rule. Rules or defaultBackend must be
    /// given.
    pub default_backend: Option<IngressBackend>,
    /// TLS configuration: the hosts a certificate covers and the Secret that holds it. The
    /// certificate is chosen by SNI.
    pub tls: Vec<IngressTLS>,
    /// Host rules. A request matching no rule goes to the defaultBackend.
    pub rules: Vec<IngressRule>,
}

/// networking.k8s.io/v1 IngressBackend.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressBackend")]
#[schemars(description = "IngressBackend describes all endpoints for a given service and port.")]
pub struct IngressBackend {
    /// A Service as the backend. Mutually exclusive with resource.
    pub service: Option<IngressServiceBackend>,
    /// An object in the Ingress's namespace as the backend. Mutually exclusive with service.
    pub resource: Option<TypedLocalObjectReference>,
}

/// networking.k8s.io/v1 IngressServiceBackend.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressServiceBackend")]
#[schemars(description = "IngressServiceBackend references a Kubernetes Service as a Backend.")]
pub struct IngressServiceBackend {
    /// The referenced Service, in the Ingress's namespace.
    pub name: String,
    /// The port of the referenced Service, by name or number.
    pub port: ServiceBackendPort,
}

/// networking.k8s.io/v1 ServiceBackendPort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.ServiceBackendPort")]
#[schemars(description = "ServiceBackendPort is the service port being referenced.")]
pub struct ServiceBackendPort {
    /// The name of the port on the Service. Mutually exclusive with number.
    pub name: Option<String>,
    /// The numerical port number on the Service. Mutually exclusive with name.
    pub number: Option<i32>,
}

/// core/v1 TypedLocalObjectReference.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.TypedLocalObjectReference")]
#[schemars(
    description = "TypedLocalObjectReference contains enough information to let you locate the typed referenced object inside the same namespace."
)]
pub struct TypedLocalObjectReference {
    /// The group of the resource; the core group when unset.
    pub api_group: Option<String>,
    /// The kind of the resource.
    pub kind: String,
    /// The name of the resource.
    pub name: String,
}

/// networking.k8s.io/v1 IngressTLS.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressTLS")]
#[schemars(
    description = "IngressTLS describes the transport layer security associated with an ingress."
)]
pub struct IngressTLS {
    /// Hosts the certificate covers; must match the rules' hosts.
    pub hosts: Vec<String>,
    /// The Secret (type kubernetes.io/tls: tls.crt, tls.key) with the certificate and key.
    pub secret_name: Option<String>,
}

/// networking.k8s.io/v1 IngressRule.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressRule")]
#[schemars(
    description = "IngressRule represents the rules mapping the paths under a specified host to the related backend services."
)]
pub struct IngressRule {
    /// The fully qualified host name, or a wildcard (`*.example.com`, one DNS label). Any host
    /// when unset.
    pub host: Option<String>,
    /// The paths of the rule.
    pub http: Option<HTTPIngressRuleValue>,
}

/// networking.k8s.io/v1 HTTPIngressRuleValue.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.HTTPIngressRuleValue")]
#[schemars(description = "HTTPIngressRuleValue is a list of http selectors pointing to backends.")]
pub struct HTTPIngressRuleValue {
    /// Paths mapped to backends.
    pub paths: Vec<HTTPIngressPath>,
}

/// networking.k8s.io/v1 HTTPIngressPath.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.HTTPIngressPath")]
#[schemars(
    description = "HTTPIngressPath associates a path with a backend. Incoming urls matching the path are forwarded to the backend."
)]
pub struct HTTPIngressPath {
    /// The path matched against the request's path; must start with '/'.
    pub path: Option<String>,
    /// How the path is matched: Exact, Prefix (by '/'-separated elements) or
    /// ImplementationSpecific (Prefix in skiff).
    pub path_type: Option<String>,
    /// Where matching requests go.
    pub backend: IngressBackend,
}

/// networking.k8s.io/v1 IngressStatus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressStatus")]
#[schemars(description = "IngressStatus describe the current state of the Ingress.")]
pub struct IngressStatus {
    /// The addresses the Ingress is served on.
    pub load_balancer: Option<IngressLoadBalancerStatus>,
}

impl Default for IngressStatus {
    fn default() -> Self {
        // Kubernetes shows `status: {loadBalancer: {}}` on a fresh Ingress.
        IngressStatus {
            load_balancer: Some(IngressLoadBalancerStatus::default()),
        }
    }
}

/// networking.k8s.io/v1 IngressLoadBalancerStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressLoadBalancerStatus")]
#[schemars(description = "IngressLoadBalancerStatus represents the status of a load-balancer.")]
pub struct IngressLoadBalancerStatus {
    /// The addresses of the load-balancer: for skiff, the nodes that serve the Ingress.
    pub ingress: Vec<IngressLoadBalancerIngress>,
}

/// networking.k8s.io/v1 IngressLoadBalancerIngress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressLoadBalancerIngress")]
#[schemars(
    description = "IngressLoadBalancerIngress represents the status of a load-balancer ingress point."
)]
pub struct IngressLoadBalancerIngress {
    /// An IP address of the load-balancer.
    pub ip: Option<String>,
    /// A DNS name of the load-balancer.
    pub hostname: Option<String>,
    /// The ports the load-balancer serves.
    pub ports: Vec<IngressPortStatus>,
}

/// networking.k8s.io/v1 IngressPortStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressPortStatus")]
#[schemars(description = "IngressPortStatus represents the error condition of a service port.")]
pub struct IngressPortStatus {
    /// The port number.
    pub port: i32,
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// Why the port is not served, in CamelCase.
    pub error: Option<String>,
}

impl Resource for Ingress {
    const KIND: Kind = Kind::Ingress;
    crate::resource_basics!(Ingress);
    spec_and_status!();

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Ingress);
        errs.extend(validate_ingress_spec(&self.spec));
        if self.spec.ingress_class_name.is_some() {
            if let Some(v) = self.metadata.annotations.get(CLASS_ANNOTATION) {
                // Kubernetes checks this on create only; an update cannot add both without
                // having had them, so checking always is equivalent for new objects.
                errs.push(FieldError::invalid(
                    format!("annotations.{CLASS_ANNOTATION}"),
                    v,
                    "can not be set when the class field is also set",
                ));
            }
        }
        errs
    }
}

const INVALID_PATH_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: &[&str] = &["/..", "/."];
const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];
const WILDCARD_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Kubernetes' IsWildcardDNS1123Subdomain: `*.` and a DNS-1123 subdomain.
fn wildcard_subdomain(host: &str) -> Result<(), String> {
    match host.strip_prefix("*.") {
        Some(rest) if host.len() <= 253 && validation::dns1123_subdomain(rest).is_ok() => Ok(()),
        _ => Err(WILDCARD_MSG.into()),
    }
}

/// A rule's or TLS entry's host: a DNS subdomain or a wildcard, never an IP address.
fn check_host(errs: &mut Vec<FieldError>, field: &str, host: &str, ip_forbidden: bool) {
    if ip_forbidden && host.parse::<std::net::IpAddr>().is_ok() {
        errs.push(FieldError::invalid(
            field,
            host,
            "must be a DNS name, not an IP address",
        ));
    }
    let check = if host.contains('*') {
        wildcard_subdomain(host)
    } else {
        validation::dns1123_subdomain(host)
    };
    if let Err(why) = check {
        errs.push(FieldError::invalid(field, host, why));
    }
}

fn validate_ingress_spec(spec: &IngressSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.rules.is_empty() && spec.default_backend.is_none() {
        errs.push(FieldError::invalid(
            "spec",
            "[]",
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = &spec.default_backend {
        validate_backend(&mut errs, "spec.defaultBackend", b);
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        let host = rule.host.as_deref().unwrap_or("");
        if !host.is_empty() {
            check_host(&mut errs, &format!("spec.rules[{i}].host"), host, true);
        }
        if let Some(http) = &rule.http {
            let base = format!("spec.rules[{i}].http");
            if http.paths.is_empty() {
                errs.push(FieldError::required(format!("{base}.paths")));
            }
            for (j, p) in http.paths.iter().enumerate() {
                validate_path(&mut errs, &format!("{base}.paths[{j}]"), p);
            }
        }
    }
    for (t, tls) in spec.tls.iter().enumerate() {
        for (i, host) in tls.hosts.iter().enumerate() {
            check_host(&mut errs, &format!("spec.tls[{t}].hosts[{i}]"), host, false);
        }
    }
    if let Some(class) = &spec.ingress_class_name {
        if let Err(why) = validation::dns1123_subdomain(class) {
            errs.push(FieldError::invalid("spec.ingressClassName", class, why));
        }
    }
    errs
}

fn validate_path(errs: &mut Vec<FieldError>, base: &str, p: &HTTPIngressPath) {
    let Some(path_type) = p.path_type.as_deref() else {
        errs.push(FieldError {
            reason: "FieldValueRequired".into(),
            field: format!("{base}.pathType"),
            message: "Required value: pathType must be specified".into(),
        });
        return;
    };
    let path = p.path.as_deref().unwrap_or("");
    let field = format!("{base}.path");
    match path_type {
        "Exact" | "Prefix" => {
            if !path.starts_with('/') {
                errs.push(FieldError::invalid(
                    &field,
                    path,
                    "must be an absolute path",
                ));
            }
            for seq in INVALID_PATH_SEQUENCES {
                if path.contains(seq) {
                    errs.push(FieldError::invalid(
                        &field,
                        path,
                        format!("must not contain '{seq}'"),
                    ));
                }
            }
            for suffix in INVALID_PATH_SUFFIXES {
                if path.ends_with(suffix) {
                    errs.push(FieldError::invalid(
                        &field,
                        path,
                        format!("cannot end with '{suffix}'"),
                    ));
                }
            }
        }
        "ImplementationSpecific" => {
            if !path.is_empty() && !path.starts_with('/') {
                errs.push(FieldError::invalid(
                    &field,
                    path,
                    "must be an absolute path",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            format!("{base}.pathType"),
            other,
            PATH_TYPES,
        )),
    }
    validate_backend(errs, &format!("{base}.backend"), &p.backend);
}

/// Kubernetes' validateIngressBackend: exactly one of service and resource, a valid service
/// name and exactly one of port name and number.
fn validate_backend(errs: &mut Vec<FieldError>, base: &str, b: &IngressBackend) {
    match (&b.service, &b.resource) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            base,
            "",
            "cannot set both resource and service backends",
        )),
        (None, Some(r)) => {
            if r.kind.is_empty() {
                errs.push(required_because(
                    format!("{base}.resource.kind"),
                    "kind is required",
                ));
            }
            if r.name.is_empty() {
                errs.push(required_because(
                    format!("{base}.resource.name"),
                    "name is required",
                ));
            }
        }
        (Some(s), None) => {
            if s.name.is_empty() {
                errs.push(FieldError::required(format!("{base}.service.name")));
            } else if let Err(why) = validation::dns1035_label(&s.name) {
                errs.push(FieldError::invalid(
                    format!("{base}.service.name"),
                    &s.name,
                    why,
                ));
            }
            let name = s.port.name.as_deref().unwrap_or("");
            let number = s.port.number.unwrap_or(0);
            if !name.is_empty() && number != 0 {
                errs.push(FieldError::invalid(
                    base,
                    "",
                    "cannot set both port name & port number",
                ));
            } else if !name.is_empty() {
                if let Err(why) = validation::iana_svc_name(name) {
                    errs.push(FieldError::invalid(
                        format!("{base}.service.port.name"),
                        name,
                        why,
                    ));
                }
            } else if number != 0 {
                if !(1..=65535).contains(&number) {
                    errs.push(FieldError::invalid(
                        format!("{base}.service.port.number"),
                        number,
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            } else {
                errs.push(required_because(
                    base.to_string(),
                    "port name or number is required",
                ));
            }
        }
        (None, None) => errs.push(FieldError::invalid(
            base,
            "",
            "resource or service backend is required",
        )),
    }
}

fn required_because(field: String, why: &str) -> FieldError {
    FieldError {
        reason: "FieldValueRequired".into(),
        field,
        message: format!("Required value: {why}"),
    }
}

/// The class an Ingress belongs to: `spec.ingressClassName`, else the deprecated annotation.
pub fn class_of(ing: &Ingress) -> Option<&str> {
    ing.spec.ingress_class_name.as_deref().or_else(|| {
        ing.metadata
            .annotations
            .get(CLASS_ANNOTATION)
            .map(|s| s.as_str())
    })
}

// ---------------------------------------------------------------------------------------
// IngressClass

/// networking.k8s.io/v1 IngressClass.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressClass")]
#[schemars(
    description = "IngressClass represents the class of the Ingress, referenced by the Ingress Spec. The `ingressclass.kubernetes.io/is-default-class` annotation can be used to indicate that an IngressClass should be considered default."
)]
pub struct IngressClass {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The IngressClass's configuration.
    pub spec: IngressClassSpec,
}

/// networking.k8s.io/v1 IngressClassSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressClassSpec")]
#[schemars(description = "IngressClassSpec provides information about the class of an Ingress.")]
pub struct IngressClassSpec {
    /// The controller that implements the class, a domain-prefixed path such as
    /// `skiff.io/ingress`. Immutable.
    pub controller: Option<String>,
    /// Controller-specific parameters.
    pub parameters: Option<IngressClassParametersReference>,
}

/// networking.k8s.io/v1 IngressClassParametersReference.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IngressClassParametersReference")]
#[schemars(
    description = "IngressClassParametersReference identifies an API object. This can be used to specify a cluster or namespace-scoped resource."
)]
pub struct IngressClassParametersReference {
    /// The group of the resource; the core group when unset.
    pub api_group: Option<String>,
    /// The kind of the resource.
    pub kind: String,
    /// The name of the resource.
    pub name: String,
    /// Cluster or Namespace.
    pub scope: Option<String>,
    /// The namespace of a Namespace-scoped resource.
    pub namespace: Option<String>,
}

impl Resource for IngressClass {
    const KIND: Kind = Kind::IngressClass;
    crate::resource_basics!(IngressClass);

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    fn set_defaults(&mut self) {
        if let Some(p) = &mut self.spec.parameters {
            p.scope.get_or_insert_with(|| "Cluster".into());
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::IngressClass);
        let controller = self.spec.controller.as_deref().unwrap_or("");
        if controller.len() > 250 {
            errs.push(FieldError::too_long("spec.controller", 250));
        }
        if controller.is_empty() {
            errs.push(FieldError::required("spec.controller"));
        } else if !domain_prefixed_path(controller) {
            errs.push(FieldError::invalid(
                "spec.controller",
                controller,
                "must be a domain-prefixed path (such as \"acme.io/foo\")",
            ));
        }
        if let Some(p) = &self.spec.parameters {
            if p.kind.is_empty() {
                errs.push(required_because(
                    "spec.parameters.kind".into(),
                    "kind is required",
                ));
            }
            if p.name.is_empty() {
                errs.push(required_because(
                    "spec.parameters.name".into(),
                    "name is required",
                ));
            }
            match p.scope.as_deref() {
                Some("Cluster") if p.namespace.is_some() => errs.push(FieldError::forbidden(
                    "spec.parameters.namespace",
                    "`parameters.scope` is set to 'Cluster'",
                )),
                Some("Namespace") if p.namespace.as_deref().unwrap_or("").is_empty() => {
                    errs.push(required_because(
                        "spec.parameters.namespace".into(),
                        "`parameters.scope` is set to 'Namespace'",
                    ))
                }
                Some("Cluster" | "Namespace") | None => {}
                Some(other) => errs.push(FieldError::not_supported(
                    "spec.parameters.scope",
                    other,
                    &["Cluster", "Namespace"],
                )),
            }
        }
        errs
    }
}

/// Kubernetes' IsDomainPrefixedPath: a DNS subdomain, '/', and a non-empty path.
fn domain_prefixed_path(s: &str) -> bool {
    match s.split_once('/') {
        Some((host, path)) => validation::dns1123_subdomain(host).is_ok() && !path.is_empty(),
        None => false,
    }
}

/// Whether `class` carries the default-class annotation set to "true".
pub fn is_default_class(class: &IngressClass) -> bool {
    class
        .metadata
        .annotations
        .get(DEFAULT_CLASS_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The IngressClass the server creates at start: the default, served by skiff's proxy.
pub fn skiff_default_class() -> IngressClass {
    let mut c = IngressClass::default();
    c.metadata.name = SKIFF_CLASS.into();
    c.metadata.annotations =
        BTreeMap::from([(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())]);
    c.spec.controller = Some(SKIFF_CONTROLLER.into());
    c
}

// ---------------------------------------------------------------------------------------
// NetworkPolicy

/// The policy type that isolates the selected pods for incoming traffic.
pub const POLICY_INGRESS: &str = "Ingress";
/// The policy type that isolates the selected pods for outgoing traffic.
pub const POLICY_EGRESS: &str = "Egress";
const POLICY_TYPES: &[&str] = &[POLICY_INGRESS, POLICY_EGRESS];
const POLICY_PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

/// networking.k8s.io/v1 NetworkPolicy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.NetworkPolicy")]
#[schemars(
    description = "NetworkPolicy describes what network traffic is allowed for a set of Pods"
)]
pub struct NetworkPolicy {
    /// Standard object's metadata.
    pub metadata: ObjectMeta,
    /// spec represents the specification of the desired behavior for this NetworkPolicy.
    pub spec: NetworkPolicySpec,
}

/// networking.k8s.io/v1 NetworkPolicySpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.NetworkPolicySpec")]
#[schemars(description = "NetworkPolicySpec provides the specification of a NetworkPolicy")]
pub struct NetworkPolicySpec {
    /// podSelector selects the pods to which this NetworkPolicy object applies, in the
    /// policy's namespace. An empty podSelector selects all pods in the namespace.
    pub pod_selector: LabelSelector,
    /// ingress is a list of ingress rules to be applied to the selected pods. Traffic is
    /// allowed to a pod if there are no NetworkPolicies selecting the pod (and cluster policy
    /// otherwise allows the traffic), OR if the traffic source is the pod's local node, OR if
    /// the traffic matches at least one ingress rule across all of the NetworkPolicy objects
    /// whose podSelector matches the pod. If this field is empty then this NetworkPolicy
    /// does not allow any traffic (and serves solely to ensure that the pods it selects are
    /// isolated by default).
    pub ingress: Vec<NetworkPolicyIngressRule>,
    /// egress is a list of egress rules to be applied to the selected pods. Outgoing traffic
    /// is allowed if there are no NetworkPolicies selecting the pod, OR if the traffic matches
    /// at least one egress rule across all of the NetworkPolicy objects whose podSelector
    /// matches the pod. If this field is empty then this NetworkPolicy limits all outgoing
    /// traffic (and serves solely to ensure that the pods it selects are isolated by default).
    pub egress: Vec<NetworkPolicyEgressRule>,
    /// policyTypes is a list of rule types that the NetworkPolicy relates to. Valid options
    /// are ["Ingress"], ["Egress"], or ["Ingress", "Egress"]. If this field is not specified,
    /// it will default based on the existence of ingress or egress rules; policies that
    /// contain an egress section are assumed to affect egress, and all policies (whether or
    /// not they contain an ingress section) are assumed to affect ingress.
    pub policy_types: Vec<String>,
}

/// networking.k8s.io/v1 NetworkPolicyIngressRule.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.NetworkPolicyIngressRule")]
#[schemars(
    description = "NetworkPolicyIngressRule describes a particular set of traffic that is allowed to the pods matched by a NetworkPolicySpec's podSelector. The traffic must match both ports and from."
)]
pub struct NetworkPolicyIngressRule {
    /// ports is a list of ports which should be made accessible on the pods selected for this
    /// rule. Each item in this list is combined using a logical OR. If this field is empty
    /// or missing, this rule matches all ports (traffic not restricted by port).
    pub ports: Vec<NetworkPolicyPort>,
    /// from is a list of sources which should be able to access the pods selected for this
    /// rule. Items in this list are combined using a logical OR operation. If this field is
    /// empty or missing, this rule matches all sources (traffic not restricted by source).
    pub from: Vec<NetworkPolicyPeer>,
}

/// networking.k8s.io/v1 NetworkPolicyEgressRule.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.NetworkPolicyEgressRule")]
#[schemars(
    description = "NetworkPolicyEgressRule describes a particular set of traffic that is allowed out of pods matched by a NetworkPolicySpec's podSelector. The traffic must match both ports and to."
)]
pub struct NetworkPolicyEgressRule {
    /// ports is a list of destination ports for outgoing traffic. Each item in this list is
    /// combined using a logical OR. If this field is empty or missing, this rule matches all
    /// ports (traffic not restricted by port).
    pub ports: Vec<NetworkPolicyPort>,
    /// to is a list of destinations for outgoing traffic of pods selected for this rule.
    /// Items in this list are combined using a logical OR operation. If this field is empty
    /// or missing, this rule matches all destinations (traffic not restricted by
    /// destination).
    pub to: Vec<NetworkPolicyPeer>,
}

/// networking.k8s.io/v1 NetworkPolicyPeer.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.NetworkPolicyPeer")]
#[schemars(
    description = "NetworkPolicyPeer describes a peer to allow traffic to/from. Only certain combinations of fields are allowed"
)]
pub struct NetworkPolicyPeer {
    /// podSelector is a label selector which selects pods. If namespaceSelector is also set,
    /// then the NetworkPolicyPeer as a whole selects the pods matching podSelector in the
    /// Namespaces selected by namespaceSelector. Otherwise it selects the pods matching
    /// podSelector in the policy's own namespace.
    pub pod_selector: Option<LabelSelector>,
    /// namespaceSelector selects namespaces using cluster-scoped labels. This field follows
    /// standard label selector semantics; if present but empty, it selects all namespaces.
    /// If podSelector is also set, then the NetworkPolicyPeer as a whole selects the pods
    /// matching podSelector in the namespaces selected by namespaceSelector. Otherwise it
    /// selects all pods in the namespaces selected by namespaceSelector.
    pub namespace_selector: Option<LabelSelector>,
    /// ipBlock defines policy on a particular IPBlock. If this field is set then neither of
    /// the other fields can be.
    pub ip_block: Option<IPBlock>,
}

/// networking.k8s.io/v1 IPBlock.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.IPBlock")]
#[schemars(
    description = "IPBlock describes a particular CIDR (Ex. \"192.168.1.0/24\",\"2001:db8::/64\") that is allowed to the pods matched by a NetworkPolicySpec's podSelector. The except entry describes CIDRs that should not be included within this rule."
)]
pub struct IPBlock {
    /// cidr is a string representing the IPBlock Valid examples are "192.168.1.0/24" or
    /// "2001:db8::/64"
    pub cidr: String,
    /// except is a slice of CIDRs that should not be included within an IPBlock Valid
    /// examples are "192.168.1.0/24" or "2001:db8::/64" Except values will be rejected if
    /// they are outside the cidr range
    pub except: Vec<String>,
}

/// networking.k8s.io/v1 NetworkPolicyPort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.networking.v1.NetworkPolicyPort")]
#[schemars(description = "NetworkPolicyPort describes a port to allow traffic on")]
pub struct NetworkPolicyPort {
    /// protocol represents the protocol (TCP, UDP, or SCTP) which traffic must match. If not
    /// specified, this field defaults to TCP.
    pub protocol: Option<String>,
    /// port represents the port on the given protocol. This can either be a numerical or
    /// named port on a pod. If this field is not provided, this matches all port names and
    /// numbers. If present, only traffic on the specified protocol AND port will be matched.
    pub port: Option<IntOrString>,
    /// endPort indicates that the range of ports from port to endPort if set, inclusive,
    /// should be allowed by the policy. This field cannot be defined if the port field is not
    /// defined or if the port field is defined as a named (string) port. The endPort must be
    /// equal or greater than port.
    pub end_port: Option<i32>,
}

impl NetworkPolicy {
    /// Whether the policy isolates the pods it selects for incoming traffic.
    pub fn affects_ingress(&self) -> bool {
        self.spec.policy_types.iter().any(|t| t == POLICY_INGRESS)
    }

    /// Whether the policy isolates the pods it selects for outgoing traffic.
    pub fn affects_egress(&self) -> bool {
        self.spec.policy_types.iter().any(|t| t == POLICY_EGRESS)
    }
}

impl Resource for NetworkPolicy {
    const KIND: Kind = Kind::NetworkPolicy;
    crate::resource_basics!(NetworkPolicy);

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    /// Kubernetes' SetDefaults_NetworkPolicy and SetDefaults_NetworkPolicyPort: policyTypes
    /// is Ingress, plus Egress when there are egress rules; a port's protocol is TCP.
    fn set_defaults(&mut self) {
        let spec = &mut self.spec;
        if spec.policy_types.is_empty() {
            spec.policy_types.push(POLICY_INGRESS.into());
            if !spec.egress.is_empty() {
                spec.policy_types.push(POLICY_EGRESS.into());
            }
        }
        let ports = spec
            .ingress
            .iter_mut()
            .flat_map(|r| r.ports.iter_mut())
            .chain(spec.egress.iter_mut().flat_map(|r| r.ports.iter_mut()));
        for p in ports {
            p.protocol.get_or_insert_with(|| "TCP".into());
        }
    }

    /// Kubernetes' ValidateNetworkPolicy: the name a DNS subdomain, then
    /// ValidateNetworkPolicySpec.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::NetworkPolicy);
        errs.extend(validate_network_policy_spec(&self.spec));
        errs
    }
}

fn validate_network_policy_spec(spec: &NetworkPolicySpec) -> Vec<FieldError> {
    let mut errs = validation::validate_label_selector(&spec.pod_selector, "spec.podSelector");
    for (i, rule) in spec.ingress.iter().enumerate() {
        let base = format!("spec.ingress[{i}]");
        for (j, port) in rule.ports.iter().enumerate() {
            validate_policy_port(&mut errs, &format!("{base}.ports[{j}]"), port);
        }
        for (j, peer) in rule.from.iter().enumerate() {
            validate_policy_peer(&mut errs, &format!("{base}.from[{j}]"), peer);
        }
    }
    for (i, rule) in spec.egress.iter().enumerate() {
        let base = format!("spec.egress[{i}]");
        for (j, port) in rule.ports.iter().enumerate() {
            validate_policy_port(&mut errs, &format!("{base}.ports[{j}]"), port);
        }
        for (j, peer) in rule.to.iter().enumerate() {
            validate_policy_peer(&mut errs, &format!("{base}.to[{j}]"), peer);
        }
    }
    if spec.policy_types.len() > POLICY_TYPES.len() {
        // Kubernetes prints the slice with Go's %#v.
        let shown: Vec<String> = spec.policy_types.iter().map(|t| format!("{t:?}")).collect();
        errs.push(FieldError {
            reason: "FieldValueInvalid".into(),
            field: "spec.policyTypes".into(),
            message: format!(
                "Invalid value: []networking.PolicyType{{{}}}: may not specify more than two policyTypes",
                shown.join(", ")
            ),
        });
        return errs;
    }
    for (i, t) in spec.policy_types.iter().enumerate() {
        if !POLICY_TYPES.contains(&t.as_str()) {
            errs.push(FieldError::not_supported(
                format!("spec.policyTypes[{i}]"),
                t,
                POLICY_TYPES,
            ));
        }
    }
    errs
}

/// Kubernetes' ValidateNetworkPolicyPort.
fn validate_policy_port(errs: &mut Vec<FieldError>, base: &str, port: &NetworkPolicyPort) {
    if let Some(proto) = &port.protocol {
        if !POLICY_PROTOCOLS.contains(&proto.as_str()) {
            errs.push(FieldError::not_supported(
                format!("{base}.protocol"),
                proto,
                POLICY_PROTOCOLS,
            ));
        }
    }
    const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
    match (&port.port, port.end_port) {
        (Some(IntOrString::Int(n)), end) => {
            if !(1..=65535).contains(n) {
                errs.push(FieldError::invalid_raw(
                    format!("{base}.port"),
                    *n,
                    PORT_RANGE,
                ));
            }
            if let Some(end) = end {
                if end < *n {
                    errs.push(FieldError::invalid_raw(
                        format!("{base}.endPort"),
                        end,
                        "must be greater than or equal to `port`",
                    ));
                }
                if !(1..=65535).contains(&end) {
                    errs.push(FieldError::invalid_raw(
                        format!("{base}.endPort"),
                        end,
                        PORT_RANGE,
                    ));
                }
            }
        }
        (Some(IntOrString::String(name)), end) => {
            if let Some(end) = end {
                errs.push(FieldError::invalid_raw(
                    format!("{base}.endPort"),
                    end,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            if let Err(why) = validation::iana_svc_name(name) {
                errs.push(FieldError::invalid(format!("{base}.port"), name, why));
            }
        }
        (None, Some(end)) => errs.push(FieldError::invalid_raw(
            format!("{base}.endPort"),
            end,
            "may not be specified when `port` is not specified",
        )),
        (None, None) => {}
    }
}

/// Kubernetes' ValidateNetworkPolicyPeer: exactly one kind of peer, except that podSelector
/// and namespaceSelector go together.
fn validate_policy_peer(errs: &mut Vec<FieldError>, base: &str, peer: &NetworkPolicyPeer) {
    let mut count = 0;
    if let Some(sel) = &peer.pod_selector {
        count += 1;
        errs.extend(validation::validate_label_selector(
            sel,
            &format!("{base}.podSelector"),
        ));
    }
    if let Some(sel) = &peer.namespace_selector {
        count += 1;
        errs.extend(validation::validate_label_selector(
            sel,
            &format!("{base}.namespaceSelector"),
        ));
    }
    if let Some(block) = &peer.ip_block {
        count += 1;
        validate_ip_block(errs, &format!("{base}.ipBlock"), block);
    }
    if count == 0 {
        errs.push(FieldError::required_msg(base, "must specify a peer"));
    } else if count > 1 && peer.ip_block.is_some() {
        errs.push(FieldError::forbidden(
            base,
            "may not specify both ipBlock and another peer",
        ));
    }
}

/// Kubernetes' ValidateIPBlock (1.32): a CIDR, and excepts strictly inside it.
fn validate_ip_block(errs: &mut Vec<FieldError>, base: &str, block: &IPBlock) {
    if block.cidr.is_empty() {
        errs.push(FieldError::required(format!("{base}.cidr")));
        return;
    }
    let Some(cidr) = IpCidr::parse(&block.cidr) else {
        errs.push(FieldError::invalid(
            format!("{base}.cidr"),
            &block.cidr,
            "not a valid CIDR",
        ));
        return;
    };
    for (i, text) in block.except.iter().enumerate() {
        let field = format!("{base}.except[{i}]");
        let Some(except) = IpCidr::parse(text) else {
            errs.push(FieldError::invalid(field, text, "not a valid CIDR"));
            return;
        };
        if !cidr.contains(except.network) || cidr.prefix >= except.prefix {
            errs.push(FieldError::invalid(
                field,
                text,
                "must be a strict subset of `cidr`",
            ));
        }
    }
}

/// An IPv4 or IPv6 network as Go's net.ParseCIDR reads it (IPv4 octets may have leading
/// zeros, as netutils.ParseCIDRSloppy allows); the address is the network's (host bits
/// cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IpCidr {
    pub network: std::net::IpAddr,
    pub prefix: u8,
}

impl IpCidr {
    pub fn parse(s: &str) -> Option<IpCidr> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let (addr, prefix) = s.split_once('/')?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix: u8 = prefix.parse().ok()?;
        let ip = if addr.contains(':') {
            IpAddr::V6(addr.parse::<Ipv6Addr>().ok()?)
        } else {
            let mut octets = [0u8; 4];
            let mut parts = addr.split('.');
            for o in &mut octets {
                let part = parts.next()?;
                if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                *o = part.parse().ok()?;
            }
            if parts.next().is_some() {
                return None;
            }
            IpAddr::V4(Ipv4Addr::from(octets))
        };
        let network = match ip {
            IpAddr::V4(v4) if prefix <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) if prefix <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
            _ => return None,
        };
        Some(IpCidr { network, prefix })
    }

    /// Whether `ip` lies in this network (never across families).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let p = u32::from(self.prefix);
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                u32::from(a) & u32::MAX.checked_shl(32 - p).unwrap_or(0) == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                u128::from(a) & u128::MAX.checked_shl(128 - p).unwrap_or(0) == u128::from(n)
            }
            _ => false,
        }
    }

    /// The IPv4 network, if this is one.
    pub fn v4(&self) -> Option<crate::cidr::Ipv4Cidr> {
        match self.network {
            std::net::IpAddr::V4(a) => crate::cidr::Ipv4Cidr::new(a, self.prefix).ok(),
            std::net::IpAddr::V6(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str, t: &str) -> HTTPIngressPath {
        HTTPIngressPath {
            path: Some(p.into()),
            path_type: Some(t.into()),
            backend: IngressBackend {
                service: Some(IngressServiceBackend {
                    name: "web".into(),
                    port: ServiceBackendPort {
                        name: None,
                        number: Some(80),
                    },
                }),
                resource: None,
            },
        }
    }

    fn ingress(host: &str, paths: Vec<HTTPIngressPath>) -> Ingress {
        let mut i = Ingress::default();
        i.metadata.name = "web".into();
        i.spec.rules = vec![IngressRule {
            host: Some(host.into()),
            http: Some(HTTPIngressRuleValue { paths }),
        }];
        i
    }

    fn messages(i: &Ingress) -> Vec<String> {
        i.validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn valid_ingress_passes() {
        let i = ingress(
            "foo.example.com",
            vec![path("/", "Prefix"), path("/a", "Exact")],
        );
        assert_eq!(messages(&i), Vec::<String>::new());
        let w = ingress("*.example.com", vec![path("", "ImplementationSpecific")]);
        assert_eq!(messages(&w), Vec::<String>::new());
    }

    #[test]
    fn bad_paths_hosts_and_backends_get_kubernetes_messages() {
        let i = ingress(
            "1.2.3.4",
            vec![
                path("a", "Prefix"),
                path("/a//b", "Exact"),
                path("/x", "Regex"),
            ],
        );
        let m = messages(&i);
        assert!(m.contains(&"spec.rules[0].host: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address".to_string()), "{m:?}");
        assert!(
            m.contains(
                &"spec.rules[0].http.paths[0].path: Invalid value: \"a\": must be an absolute path"
                    .to_string()
            ),
            "{m:?}"
        );
        assert!(m.contains(&"spec.rules[0].http.paths[1].path: Invalid value: \"/a//b\": must not contain '//'".to_string()), "{m:?}");
        assert!(m.contains(&"spec.rules[0].http.paths[2].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"".to_string()), "{m:?}");

        let w = ingress("*.*.example.com", vec![path("/", "Prefix")]);
        assert!(messages(&w)[0].contains("a wildcard DNS-1123 subdomain"));

        let mut none = Ingress::default();
        none.metadata.name = "x".into();
        assert_eq!(
            messages(&none),
            vec![
                "spec: Invalid value: \"[]\": either `defaultBackend` or `rules` must be specified"
            ]
        );

        let mut p = path("/", "Prefix");
        p.backend.service.as_mut().unwrap().port = ServiceBackendPort::default();
        let m = messages(&ingress("a.b", vec![p]));
        assert_eq!(
            m,
            vec!["spec.rules[0].http.paths[0].backend: Required value: port name or number is required"]
        );
    }

    #[test]
    fn tls_hosts_are_checked() {
        let mut i = ingress("a.example.com", vec![path("/", "Prefix")]);
        i.spec.tls = vec![IngressTLS {
            hosts: vec!["a.example.com".into(), "Bad_Host".into()],
            secret_name: Some("tls".into()),
        }];
        let m = messages(&i);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("spec.tls[0].hosts[1]: Invalid value: \"Bad_Host\""));
    }

    fn policy(spec: serde_json::Value) -> NetworkPolicy {
        let mut p: NetworkPolicy = crate::codec::from_json(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": spec,
        }))
        .expect("decode");
        p.set_defaults();
        p
    }

    fn policy_messages(p: &NetworkPolicy) -> Vec<String> {
        p.validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn network_policy_defaults_as_kubernetes() {
        let p = policy(serde_json::json!({"podSelector": {}}));
        assert_eq!(p.spec.policy_types, ["Ingress"]);
        assert!(p.affects_ingress() && !p.affects_egress());
        let p = policy(serde_json::json!({
            "podSelector": {},
            "egress": [{"ports": [{"port": 53}, {"protocol": "UDP", "port": 53}]}],
            "ingress": [{"ports": [{"port": "http"}]}],
        }));
        assert_eq!(p.spec.policy_types, ["Ingress", "Egress"]);
        assert_eq!(p.spec.egress[0].ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(p.spec.egress[0].ports[1].protocol.as_deref(), Some("UDP"));
        assert_eq!(p.spec.ingress[0].ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(
            p.spec.ingress[0].ports[0].port,
            Some(IntOrString::String("http".into()))
        );
        // Given types stay as given, even Egress alone with ingress rules.
        let p = policy(serde_json::json!({
            "podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}],
        }));
        assert_eq!(p.spec.policy_types, ["Egress"]);
        assert!(policy_messages(&p).is_empty());
        // The JSON keeps an empty peer selector (it selects everything) and an empty rule.
        let p = policy(serde_json::json!({
            "podSelector": {}, "ingress": [{}, {"from": [{"namespaceSelector": {}}]}],
        }));
        let json = crate::codec::to_json(&p);
        assert_eq!(json["spec"]["podSelector"], serde_json::json!({}));
        assert_eq!(json["spec"]["ingress"][0], serde_json::json!({}));
        assert_eq!(
            json["spec"]["ingress"][1]["from"][0],
            serde_json::json!({"namespaceSelector": {}})
        );
    }

    #[test]
    fn network_policy_refusals_carry_kubernetes_messages() {
        let p = policy(serde_json::json!({
            "podSelector": {"matchExpressions": [{"key": "a", "operator": "Up"}]},
            "ingress": [{
                "ports": [
                    {"protocol": "ICMP", "port": 70000},
                    {"port": 90, "endPort": 80},
                    {"port": "http", "endPort": 80},
                    {"port": "no_such-", "protocol": "UDP"},
                    {"endPort": 80},
                    {"port": 0, "endPort": 70000},
                ],
                "from": [
                    {},
                    {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
                    {"ipBlock": {"cidr": ""}},
                    {"ipBlock": {"cidr": "10.0.0.0/33"}},
                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8", "11.0.0.0/16", "10.1.0.0/16"]}},
                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["x", "12.0.0.0/16"]}},
                ],
            }],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"bad key!": "v"}}}]}],
            "policyTypes": ["Ingress", "Sideways"],
        }));
        let m = policy_messages(&p);
        let want = [
            "spec.podSelector.matchExpressions[0].operator: Invalid value: \"Up\": not a valid selector operator",
            "spec.ingress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
            "spec.ingress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.ingress[0].ports[1].endPort: Invalid value: 80: must be greater than or equal to `port`",
            "spec.ingress[0].ports[2].endPort: Invalid value: 80: may not be specified when `port` is non-numeric",
            "spec.ingress[0].ports[4].endPort: Invalid value: 80: may not be specified when `port` is not specified",
            "spec.ingress[0].ports[5].port: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.ingress[0].ports[5].endPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.ingress[0].from[0]: Required value: must specify a peer",
            "spec.ingress[0].from[1]: Forbidden: may not specify both ipBlock and another peer",
            "spec.ingress[0].from[2].ipBlock.cidr: Required value",
            "spec.ingress[0].from[3].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": not a valid CIDR",
            "spec.ingress[0].from[4].ipBlock.except[0]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[4].ipBlock.except[1]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[5].ipBlock.except[0]: Invalid value: \"x\": not a valid CIDR",
            "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\"",
        ];
        for w in want {
            assert!(m.contains(&w.to_string()), "missing {w}\nin {m:#?}");
        }
        assert!(
            m.iter().any(
                |l| l.starts_with("spec.ingress[0].ports[3].port: Invalid value: \"no_such-\"")
            ),
            "{m:#?}"
        );
        assert!(
            m.iter().any(|l| l.starts_with(
                "spec.egress[0].to[0].namespaceSelector.matchLabels: Invalid value: \"bad key!\""
            )),
            "{m:#?}"
        );
        // The except after a malformed one is not looked at (Kubernetes returns there).
        assert!(!m.iter().any(|l| l.contains("12.0.0.0/16")), "{m:#?}");
        assert_eq!(m.len(), want.len() + 2, "{m:#?}");

        let p = policy(serde_json::json!({
            "podSelector": {}, "policyTypes": ["Ingress", "Egress", "Ingress"],
        }));
        assert_eq!(
            policy_messages(&p),
            ["spec.policyTypes: Invalid value: []networking.PolicyType{\"Ingress\", \"Egress\", \"Ingress\"}: may not specify more than two policyTypes"]
        );
        let mut p = policy(serde_json::json!({"podSelector": {}}));
        p.metadata.name = "Bad".into();
        assert_eq!(policy_messages(&p).len(), 1);
    }

    #[test]
    fn cidrs_parse_as_go_reads_them() {
        let c = IpCidr::parse("10.1.2.3/16").unwrap();
        assert_eq!(c.network.to_string(), "10.1.0.0");
        assert_eq!(c.v4().unwrap().to_string(), "10.1.0.0/16");
        assert!(c.contains("10.1.200.1".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        assert_eq!(
            IpCidr::parse("010.001.0.0/16").unwrap(),
            IpCidr::parse("10.1.0.0/16").unwrap()
        );
        let all = IpCidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("255.1.2.3".parse().unwrap()));
        let v6 = IpCidr::parse("2001:db8::1/64").unwrap();
        assert_eq!(v6.network.to_string(), "2001:db8::");
        assert!(v6.v4().is_none());
        for bad in [
            "10.0.0.0",
            "10.0.0/8",
            "10.0.0.256/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "1.2.3.4.5/8",
            "::/129",
            "a/8",
        ] {
            assert!(IpCidr::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn ingress_class_controller_must_be_domain_prefixed() {
        let mut c = skiff_default_class();
        assert!(c.validate().is_empty());
        assert!(is_default_class(&c));
        c.spec.controller = Some("nodomain".into());
        assert_eq!(c.validate()[0].field, "spec.controller");

        let old = skiff_default_class().into_any();
        let mut moved = skiff_default_class();
        moved.spec.controller = Some("example.com/other".into());
        let errs = validation::validate_update(&moved.into_any(), &old);
        assert_eq!(
            errs[0].message,
            "Invalid value: \"example.com/other\": field is immutable"
        );
    }
}
