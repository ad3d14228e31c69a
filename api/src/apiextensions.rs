//! apiextensions.k8s.io/v1 CustomResourceDefinition: a resource the API serves from the
//! moment its definition is established, with the names, versions, schema, subresources and
//! printer columns the definition gives (docs/design/resources.md §3, §9).
//!
//! The schemas (`openAPIV3Schema`) are kept as JSON here; the server compiles them
//! (`control::crd`), checks that they are structural and judges custom objects by them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::meta::{ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of CustomResourceDefinition.
pub const GROUP: &str = "apiextensions.k8s.io";

/// The finalizer that holds a definition until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// A JSON value inside a typed model: itself in JSON, JSON text in the stored (postcard)
/// form, which cannot carry self-describing values.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct JsonValue(pub Value);

impl Serialize for JsonValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            self.0.serialize(s)
        } else {
            let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
            s.serialize_str(&text)
        }
    }
}

impl<'de> Deserialize<'de> for JsonValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<JsonValue, D::Error> {
        if d.is_human_readable() {
            Value::deserialize(d).map(JsonValue)
        } else {
            let text = String::deserialize(d)?;
            serde_json::from_str(&text)
                .map(JsonValue)
                .map_err(serde::de::Error::custom)
        }
    }
}

impl JsonSchema for JsonValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "JSON represents any valid JSON value. These types are supported: bool, int64, float64, string, []interface{}, map[string]interface{} and nil.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// apiextensions.k8s.io/v1 CustomResourceDefinition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
)]
#[schemars(
    description = "CustomResourceDefinition represents a resource that should be exposed on the API server.  Its name MUST be in the format <.spec.name>.<.spec.group>."
)]
pub struct CustomResourceDefinition {
    /// Standard object's metadata.
    pub metadata: ObjectMeta,
    /// spec describes how the user wants the resources to appear
    pub spec: CrdSpec,
    /// status indicates the actual state of the CustomResourceDefinition
    pub status: Option<CrdStatus>,
}

/// CustomResourceDefinitionSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionSpec"
)]
pub struct CrdSpec {
    /// group is the API group of the defined custom resource.
    pub group: String,
    /// names specify the resource and kind names for the custom resource.
    pub names: CrdNames,
    /// scope indicates whether the defined custom resource is cluster- or namespace-scoped.
    /// Allowed values are `Cluster` and `Namespaced`.
    pub scope: String,
    /// versions is the list of all API versions of the defined custom resource.
    pub versions: Vec<CrdVersion>,
    /// conversion defines conversion settings for the CRD.
    pub conversion: Option<CrdConversion>,
    /// preserveUnknownFields indicates that object fields which are not specified in the
    /// OpenAPI schema should be preserved when persisting to storage (must be false in v1).
    pub preserve_unknown_fields: Option<bool>,
}

/// CustomResourceDefinitionNames.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionNames"
)]
pub struct CrdNames {
    /// plural is the plural name of the resource to serve (lowercase).
    pub plural: String,
    /// singular is the singular name of the resource (lowercase); defaults to the lowercased
    /// kind.
    pub singular: Option<String>,
    /// shortNames are short names for the resource, exposed in API discovery documents.
    pub short_names: Vec<String>,
    /// kind is the serialized kind of the resource (CamelCase and singular).
    pub kind: String,
    /// listKind is the serialized kind of the list for this resource; defaults to
    /// "`kind`List".
    pub list_kind: Option<String>,
    /// categories is a list of grouped resources this custom resource belongs to (e.g.
    /// 'all').
    pub categories: Vec<String>,
}

/// CustomResourceDefinitionVersion.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionVersion"
)]
pub struct CrdVersion {
    /// name is the version name, e.g. "v1", "v2beta1".
    pub name: String,
    /// served is a flag enabling/disabling this version from being served via REST APIs
    pub served: bool,
    /// storage indicates this version should be used when persisting custom resources to
    /// storage. There must be exactly one version with storage=true.
    pub storage: bool,
    /// deprecated indicates this version of the custom resource API is deprecated.
    pub deprecated: Option<bool>,
    /// deprecationWarning overrides the default warning returned to API clients.
    pub deprecation_warning: Option<String>,
    /// schema describes the schema used for validation, pruning, and defaulting of this
    /// version of the custom resource.
    pub schema: Option<CrdValidation>,
    /// subresources specify what subresources this version of the defined custom resource
    /// have.
    pub subresources: Option<CrdSubresources>,
    /// additionalPrinterColumns specifies additional columns returned in Table output.
    pub additional_printer_columns: Vec<PrinterColumn>,
    /// selectableFields specifies paths to fields that may be used as field selectors.
    pub selectable_fields: Vec<SelectableField>,
}

/// CustomResourceValidation.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceValidation"
)]
pub struct CrdValidation {
    /// openAPIV3Schema is the OpenAPI v3 schema to use for validation and pruning.
    #[serde(rename = "openAPIV3Schema")]
    pub open_api_v3_schema: Option<JsonValue>,
}

/// CustomResourceSubresources.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceSubresources"
)]
pub struct CrdSubresources {
    /// status indicates the custom resource should serve a `/status` subresource.
    pub status: Option<JsonValue>,
    /// scale indicates the custom resource should serve a `/scale` subresource.
    pub scale: Option<CrdScale>,
}

/// CustomResourceSubresourceScale.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceSubresourceScale"
)]
pub struct CrdScale {
    /// specReplicasPath defines the JSON path inside of a custom resource that corresponds
    /// to Scale `spec.replicas`.
    pub spec_replicas_path: String,
    /// statusReplicasPath defines the JSON path inside of a custom resource that corresponds
    /// to Scale `status.replicas`.
    pub status_replicas_path: String,
    /// labelSelectorPath defines the JSON path inside of a custom resource that corresponds
    /// to Scale `status.selector`.
    pub label_selector_path: Option<String>,
}

/// CustomResourceColumnDefinition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceColumnDefinition"
)]
pub struct PrinterColumn {
    /// name is a human readable name for the column.
    pub name: String,
    /// type is an OpenAPI type definition for this column.
    #[serde(rename = "type")]
    pub type_: String,
    /// format is an optional OpenAPI type definition for this column.
    pub format: Option<String>,
    /// description is a human readable description of this column.
    pub description: Option<String>,
    /// priority is an integer defining the relative importance of this column compared to
    /// others (0: shown in the standard view).
    pub priority: Option<i32>,
    /// jsonPath is a simple JSON path evaluated against each custom resource.
    pub json_path: String,
}

/// SelectableField.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.SelectableField")]
pub struct SelectableField {
    /// jsonPath is a simple JSON path which is evaluated against each custom resource to
    /// produce a field selector value.
    pub json_path: String,
}

/// CustomResourceConversion.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceConversion"
)]
pub struct CrdConversion {
    /// strategy specifies how custom resources are converted between versions: `None` or
    /// `Webhook`.
    pub strategy: String,
    /// webhook describes how to call the conversion webhook.
    pub webhook: Option<WebhookConversion>,
}

/// WebhookConversion: how the API server calls a conversion webhook.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.WebhookConversion")]
pub struct WebhookConversion {
    /// clientConfig is the instructions for how to call the webhook if strategy is `Webhook`.
    pub client_config: Option<WebhookClientConfig>,
    /// conversionReviewVersions is an ordered list of preferred `ConversionReview` versions
    /// the Webhook expects.
    pub conversion_review_versions: Vec<String>,
}

/// WebhookClientConfig: how a webhook is reached, by URL or through a Service (the same
/// shape as admissionregistration.k8s.io's).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.WebhookClientConfig")]
pub struct WebhookClientConfig {
    /// url gives the location of the webhook, in standard URL form
    /// (`scheme://host:port/path`). Exactly one of `url` or `service` must be specified.
    pub url: Option<String>,
    /// service is a reference to the service for this webhook.
    pub service: Option<ServiceReference>,
    /// caBundle is a PEM encoded CA bundle which will be used to validate the webhook's
    /// server certificate. If unspecified, system trust roots on the apiserver are used.
    pub ca_bundle: Option<crate::core::ByteString>,
}

/// ServiceReference: a Service a webhook is reached through.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.ServiceReference")]
pub struct ServiceReference {
    /// namespace is the namespace of the service.
    pub namespace: String,
    /// name is the name of the service.
    pub name: String,
    /// path is an optional URL path at which the webhook will be contacted.
    pub path: Option<String>,
    /// port is an optional service port at which the webhook will be contacted. Defaults to
    /// 443.
    pub port: Option<i32>,
}

/// CustomResourceDefinitionStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus"
)]
pub struct CrdStatus {
    /// conditions indicate state for particular aspects of a CustomResourceDefinition
    pub conditions: Vec<CrdCondition>,
    /// acceptedNames are the names that are actually being used to serve discovery.
    pub accepted_names: Option<CrdNames>,
    /// storedVersions lists all versions of CustomResources that were ever persisted.
    pub stored_versions: Vec<String>,
}

/// CustomResourceDefinitionCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(
    rename = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionCondition"
)]
pub struct CrdCondition {
    /// type is the type of the condition: Established, NamesAccepted, Terminating.
    #[serde(rename = "type")]
    pub type_: String,
    /// status is the status of the condition: True, False, Unknown.
    pub status: String,
    /// lastTransitionTime last time the condition transitioned from one status to another.
    pub last_transition_time: Option<Time>,
    /// reason is a unique, one-word, CamelCase reason for the condition's last transition.
    pub reason: Option<String>,
    /// message is a human-readable message indicating details about last transition.
    pub message: Option<String>,
}

impl CustomResourceDefinition {
    /// The storage version's name.
    pub fn storage_version(&self) -> Option<&CrdVersion> {
        self.spec.versions.iter().find(|v| v.storage)
    }

    /// The names the resource is served under: the accepted ones, else (before the
    /// establishing controller has looked) the spec's.
    pub fn served_names(&self) -> CrdNames {
        self.status
            .as_ref()
            .and_then(|s| s.accepted_names.clone())
            .filter(|n| !n.plural.is_empty())
            .unwrap_or_else(|| self.spec.names.clone())
    }

    /// Whether the condition `type_` is True.
    pub fn condition(&self, type_: &str) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
    }

    /// Sets condition `type_`, moving its transition time only when its status changes.
    pub fn set_condition(&mut self, type_: &str, status: bool, reason: &str, message: &str) {
        let st = self.status.get_or_insert_with(Default::default);
        let status = if status { "True" } else { "False" };
        match st.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = Some(Time::now());
                }
                c.status = status.into();
                c.reason = Some(reason.into());
                c.message = Some(message.into());
            }
            None => st.conditions.push(CrdCondition {
                type_: type_.into(),
                status: status.into(),
                last_transition_time: Some(Time::now()),
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
        }
    }
}

impl Resource for CustomResourceDefinition {
    const KIND: Kind = Kind::CustomResourceDefinition;
    crate::resource_basics!(CustomResourceDefinition);

    fn set_defaults(&mut self) {
        let names = &mut self.spec.names;
        if names.singular.as_deref().is_none_or(str::is_empty) {
            names.singular = Some(names.kind.to_ascii_lowercase());
        }
        if names.list_kind.as_deref().is_none_or(str::is_empty) && !names.kind.is_empty() {
            names.list_kind = Some(format!("{}List", names.kind));
        }
        if self.spec.conversion.is_none() {
            self.spec.conversion = Some(CrdConversion {
                strategy: "None".into(),
                webhook: None,
            });
        }
        let service = self
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut())
            .and_then(|w| w.client_config.as_mut())
            .and_then(|c| c.service.as_mut());
        if let Some(s) = service {
            s.port.get_or_insert(443);
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        validate_crd(self)
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }

    /// kube's strategy for a new definition: no conditions or accepted names yet, and the
    /// storage version recorded as stored.
    fn clear_status(&mut self) {
        self.status = Some(CrdStatus {
            conditions: Vec::new(),
            accepted_names: Some(CrdNames::default()),
            stored_versions: self
                .storage_version()
                .map(|v| vec![v.name.clone()])
                .unwrap_or_default(),
        });
    }
}

/// kube's ValidateCustomResourceDefinition, for what does not need the compiled schema (the
/// server checks the schemas when it compiles them).
fn validate_crd(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &crd.spec;
    let names = &spec.names;
    let expected = format!("{}.{}", names.plural, spec.group);
    if crd.metadata.name != expected {
        errs.push(FieldError::invalid(
            "metadata.name",
            &crd.metadata.name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if spec.group.is_empty() {
        errs.push(FieldError::required("spec.group"));
    } else if let Err(e) = validation::dns1123_subdomain(&spec.group) {
        errs.push(FieldError::invalid("spec.group", &spec.group, e));
    } else if spec.group.split('.').count() < 2 {
        errs.push(FieldError::invalid(
            "spec.group",
            &spec.group,
            "should be a domain with at least one dot",
        ));
    }
    match spec.scope.as_str() {
        "Cluster" | "Namespaced" => {}
        "" => errs.push(FieldError::required("spec.scope")),
        other => errs.push(FieldError::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    errs.extend(validate_names(names, "spec.names"));
    if spec.versions.is_empty() {
        errs.push(FieldError::invalid(
            "spec.versions",
            "null",
            "must have exactly one version marked as storage version",
        ));
    }
    let storage = spec.versions.iter().filter(|v| v.storage).count();
    if !spec.versions.is_empty() && storage != 1 {
        errs.push(FieldError::invalid(
            "spec.versions",
            serde_json::to_string(
                &spec
                    .versions
                    .iter()
                    .map(|v| serde_json::json!({"name": v.name, "served": v.served, "storage": v.storage}))
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_default(),
            "must have exactly one version marked as storage version",
        ));
    }
    if !spec.versions.is_empty() && !spec.versions.iter().any(|v| v.served) {
        errs.push(FieldError::invalid(
            "spec.versions",
            "",
            "must have at least one version marked as served",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, v) in spec.versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        if !seen.insert(v.name.as_str()) {
            errs.push(FieldError::invalid(
                format!("{at}.name"),
                &v.name,
                "must be unique",
            ));
        }
        if let Err(e) = validation::dns1035_label(&v.name) {
            errs.push(FieldError::invalid(format!("{at}.name"), &v.name, e));
        }
        if v.schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .is_none()
        {
            errs.push(FieldError::required_msg(
                format!("{at}.schema.openAPIV3Schema"),
                "schemas are required",
            ));
        }
        for (j, c) in v.additional_printer_columns.iter().enumerate() {
            let at = format!("{at}.additionalPrinterColumns[{j}]");
            if c.name.is_empty() {
                errs.push(FieldError::required(format!("{at}.name")));
            }
            if !matches!(
                c.type_.as_str(),
                "integer" | "number" | "string" | "boolean" | "date"
            ) {
                errs.push(FieldError::not_supported(
                    format!("{at}.type"),
                    &c.type_,
                    &["boolean", "date", "integer", "number", "string"],
                ));
            }
            if c.json_path.is_empty() {
                errs.push(FieldError::required(format!("{at}.jsonPath")));
            }
        }
        if let Some(scale) = v.subresources.as_ref().and_then(|s| s.scale.as_ref()) {
            let at = format!("{at}.subresources.scale");
            for (field, path) in [
                ("specReplicasPath", &scale.spec_replicas_path),
                ("statusReplicasPath", &scale.status_replicas_path),
            ] {
                if path.is_empty() {
                    errs.push(FieldError::required(format!("{at}.{field}")));
                } else if !path.starts_with('.') {
                    errs.push(FieldError::invalid(
                        format!("{at}.{field}"),
                        path,
                        "should be a json path under either .spec or .status",
                    ));
                }
            }
        }
    }
    if spec.preserve_unknown_fields == Some(true) {
        errs.push(FieldError::invalid(
            "spec.preserveUnknownFields",
            "true",
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in openAPIV3Schema instead",
        ));
    }
    if let Some(c) = &spec.conversion {
        match c.strategy.as_str() {
            "None" => {
                if c.webhook.is_some() {
                    errs.push(FieldError::forbidden(
                        "spec.conversion.webhook",
                        "should not be set when strategy is not set to Webhook",
                    ));
                }
            }
            "Webhook" => {
                // kube reports these at the paths of its internal version.
                let at = "spec.conversion.webhookClientConfig";
                match c.webhook.as_ref().and_then(|w| w.client_config.as_ref()) {
                    None => errs.push(FieldError::required_msg(
                        at,
                        "required when strategy is set to Webhook",
                    )),
                    Some(cc) => errs.extend(validate_webhook_client_config(cc, at)),
                }
                let versions = c
                    .webhook
                    .as_ref()
                    .map(|w| w.conversion_review_versions.as_slice())
                    .unwrap_or_default();
                errs.extend(validation::review_versions(
                    versions,
                    "spec.conversion.conversionReviewVersions",
                    None,
                ));
            }
            other => errs.push(FieldError::not_supported(
                "spec.conversion.strategy",
                other,
                &["None", "Webhook"],
            )),
        }
    }
    errs
}

/// A webhook's client configuration, as kube-apiserver checks it (`url` or `service`, not
/// both; an `https` URL without user, query or fragment; a service path of DNS subdomain
/// segments; the CA bundle's PEM).
pub fn validate_webhook_client_config(cc: &WebhookClientConfig, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (&cc.url, &cc.service) {
        (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required_msg(
            at,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => errs.extend(validate_webhook_url(url, &format!("{at}.url"))),
        (None, Some(s)) => errs.extend(validate_webhook_service(s, &format!("{at}.service"))),
    }
    if let Some(ca) = &cc.ca_bundle {
        let pem = String::from_utf8_lossy(&ca.0);
        if !ca.0.is_empty() && !pem.contains("-----BEGIN CERTIFICATE-----") {
            errs.push(FieldError::invalid(
                format!("{at}.caBundle"),
                "",
                "unable to load root certificates: unable to parse bytes as PEM block",
            ));
        }
    }
    errs
}

fn validate_webhook_url(raw: &str, at: &str) -> Vec<FieldError> {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut errs = Vec::new();
    let (scheme, rest) = raw.split_once("://").unwrap_or(("", raw));
    if scheme != "https" {
        errs.push(FieldError::invalid(
            at,
            scheme,
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = rest.split('/').next().unwrap_or("");
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() || raw.split_once("://").is_none() {
        errs.push(FieldError::invalid(
            at,
            host,
            format!("host must be provided{FORM}"),
        ));
    }
    if let Some(u) = user {
        errs.push(FieldError::invalid(
            at,
            u,
            "user information is not permitted in the URL",
        ));
    }
    if !fragment.is_empty() {
        errs.push(FieldError::invalid(
            at,
            fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !query.is_empty() {
        errs.push(FieldError::invalid(
            at,
            query,
            "query parameters are not permitted in the URL",
        ));
    }
    errs
}

fn validate_webhook_service(s: &ServiceReference, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.name.is_empty() {
        errs.push(FieldError::required_msg(
            format!("{at}.name"),
            "service name is required",
        ));
    }
    if s.namespace.is_empty() {
        errs.push(FieldError::required_msg(
            format!("{at}.namespace"),
            "service namespace is required",
        ));
    }
    let port = s.port.unwrap_or(443);
    if !(1..=65535).contains(&port) {
        errs.push(FieldError::invalid_raw(
            format!("{at}.port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let path = s.path.as_deref().unwrap_or("");
    if path.is_empty() || path == "/" {
        return errs;
    }
    let at_path = format!("{at}.path");
    if path == "//" {
        errs.push(FieldError::invalid(
            &at_path,
            path,
            "segment[0] may not be empty",
        ));
        return errs;
    }
    if !path.starts_with('/') {
        errs.push(FieldError::invalid(&at_path, path, "must start with a '/'"));
    }
    let trimmed = path.get(1..).unwrap_or("");
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    for (i, step) in trimmed.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                &at_path,
                path,
                format!("segment[{i}] may not be empty"),
            ));
        } else if let Err(e) = validation::dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                &at_path,
                path,
                format!("segment[{i}]: {e}"),
            ));
        }
    }
    errs
}

fn validate_names(names: &CrdNames, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let lower_label = |field: &str, value: &str, errs: &mut Vec<FieldError>| {
        if let Err(e) = validation::dns1035_label(value) {
            errs.push(FieldError::invalid(format!("{at}.{field}"), value, e));
        }
    };
    if names.plural.is_empty() {
        errs.push(FieldError::required(format!("{at}.plural")));
    } else {
        lower_label("plural", &names.plural, &mut errs);
    }
    if let Some(s) = names.singular.as_deref().filter(|s| !s.is_empty()) {
        lower_label("singular", s, &mut errs);
    }
    for (i, s) in names.short_names.iter().enumerate() {
        if let Err(e) = validation::dns1035_label(s) {
            errs.push(FieldError::invalid(format!("{at}.shortNames[{i}]"), s, e));
        }
    }
    let kind_ok = |k: &str| validation::dns1035_label(&k.to_ascii_lowercase()).is_ok();
    if names.kind.is_empty() {
        errs.push(FieldError::required(format!("{at}.kind")));
    } else if !kind_ok(&names.kind) {
        errs.push(FieldError::invalid(
            format!("{at}.kind"),
            &names.kind,
            "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
        ));
    }
    if let Some(l) = names.list_kind.as_deref().filter(|l| !l.is_empty()) {
        if !kind_ok(l) {
            errs.push(FieldError::invalid(
                format!("{at}.listKind"),
                l,
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        } else if l == names.kind {
            errs.push(FieldError::invalid(
                format!("{at}.listKind"),
                l,
                "kind and listKind may not be the same",
            ));
        }
    }
    for (i, c) in names.categories.iter().enumerate() {
        if let Err(e) = validation::dns1035_label(c) {
            errs.push(FieldError::invalid(format!("{at}.categories[{i}]"), c, e));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> CustomResourceDefinition {
        let mut c: CustomResourceDefinition = crate::codec::from_json(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "crontabs.stable.example.com"},
            "spec": {
                "group": "stable.example.com",
                "scope": "Namespaced",
                "names": {"plural": "crontabs", "kind": "CronTab", "shortNames": ["ct"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "maximum": 10}}}}}}}]
            }
        }))
        .unwrap();
        c.set_defaults();
        c
    }

    #[test]
    fn defaults_and_validates() {
        let c = crd();
        assert_eq!(c.spec.names.singular.as_deref(), Some("crontab"));
        assert_eq!(c.spec.names.list_kind.as_deref(), Some("CronTabList"));
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        let mut bad = c.clone();
        bad.metadata.name = "crontabs".into();
        bad.spec.versions[0].storage = false;
        let errs = bad.validate();
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["metadata.name", "spec.versions"], "{errs:?}");
    }

    #[test]
    fn schema_survives_the_stored_form() {
        let c = crd();
        let bytes = postcard::to_allocvec(&c.clone().into_any()).unwrap();
        let back: crate::AnyObject = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, c.into_any());
    }
}
