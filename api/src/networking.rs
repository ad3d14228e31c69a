//! networking.k8s.io/v1 kinds: Ingress and IngressClass.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::spec_and_status;
use crate::meta::ObjectMeta;
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
