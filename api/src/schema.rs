//! OpenAPI schemas of the served kinds, derived from the model itself.
//!
//! Every model type derives [`schemars::JsonSchema`] under its Kubernetes definition name
//! (`io.k8s.api.apps.v1.DeploymentSpec`); doc comments become descriptions and serde's
//! renames, defaults and `deny_unknown_fields` shape the properties. The value types with
//! hand-written serde impls get hand-written schemas here. [`definitions`] turns the result
//! into OpenAPI v3 `components.schemas` in the shape Kubernetes publishes, so a kind added to
//! [`Kind::ALL`] gets its schema, `kubectl explain` and strict field validation for free.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::core::ByteString;
use crate::meta::{IntOrString, ManagedFields, MicroTime, Opaque, Quantity, Time};
use crate::object::Kind;

/// Where OpenAPI v3 keeps its definitions; `$ref`s point below it.
pub const V3_REF_PREFIX: &str = "#/components/schemas/";

impl JsonSchema for Time {
    fn schema_name() -> Cow<'static, str> {
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "Time is a timestamp in RFC 3339 form (2006-01-02T15:04:05Z), kept with second precision.",
        })
    }
}

impl JsonSchema for MicroTime {
    fn schema_name() -> Cow<'static, str> {
        "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "MicroTime is version of Time with microsecond level precision.",
        })
    }
}

impl JsonSchema for IntOrString {
    fn schema_name() -> Cow<'static, str> {
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "int-or-string",
            "x-kubernetes-int-or-string": true,
            "description": "IntOrString is a type that can hold an int32 or a string, such as a port number or name, or a count or percentage.",
        })
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "io.k8s.apimachinery.pkg.api.resource.Quantity".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "oneOf": [{"type": "string"}, {"type": "number"}],
            "description": "Quantity is a fixed-point number with an optional suffix: binary (Ki, Mi, Gi, Ti, Pi, Ei), decimal SI (m, k, M, G, T, P, E) or a decimal exponent (e3). Examples: 100m CPU, 128Mi memory, 1.",
        })
    }
}

impl JsonSchema for ByteString {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "ByteString".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "byte"})
    }
}

impl JsonSchema for Opaque {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Opaque".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Kept verbatim and not acted on: any content is accepted, so nothing below is checked.
        json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    }
}

impl JsonSchema for ManagedFields {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Opaque".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        Opaque::json_schema(g)
    }
}

/// The Kubernetes definition name of a kind's schema (`io.k8s.api.core.v1.Pod`).
pub fn definition_name(kind: Kind) -> String {
    kind.schema_name()
}

/// The OpenAPI v3 schemas of every served kind and of everything they refer to, keyed by
/// Kubernetes' definition names. Kind schemas carry `apiVersion`, `kind` and
/// `x-kubernetes-group-version-kind`, as Kubernetes publishes them.
pub fn definitions() -> Map<String, Value> {
    let settings = SchemaSettings::draft07().with(|s| {
        s.definitions_path = V3_REF_PREFIX.trim_start_matches('#').into();
        s.meta_schema = None;
        s.transforms.clear();
    });
    let mut generator = settings.into_generator();
    for &kind in Kind::ALL {
        kind.add_schema(&mut generator);
    }
    // What a delete answers (and every error).
    generator.subschema_for::<crate::meta::Status>();
    let mut defs = generator.take_definitions(false);
    for schema in defs.values_mut() {
        normalize(schema);
        // The model's type comments name the Kubernetes type ("core/v1 PodSpec."); that
        // is no description for a user.
        if let Some(d) = schema.get("description").and_then(Value::as_str) {
            if d.starts_with("core/v1 ") || d.starts_with("apps/v1 ") || d.starts_with("meta/v1 ") {
                schema.as_object_mut().map(|m| m.remove("description"));
            }
        }
    }
    for &kind in Kind::ALL {
        let info = kind.info();
        let Some(Value::Object(schema)) = defs.get_mut(&definition_name(kind)) else {
            continue;
        };
        schema.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": info.group, "kind": info.kind, "version": info.version}]),
        );
        if let Some(Value::Object(props)) = schema.get_mut("properties") {
            props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object (here \"".to_string() + &info.api_version() + "\")."}));
            props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents (here \"".to_string() + info.kind + "\")."}));
        }
    }
    defs
}

/// Rewrites a schemars schema into the shape of Kubernetes' published OpenAPI v3: no null
/// alternatives (absent means unset), references with a description as `allOf`, Kubernetes'
/// integer formats, no JSON Schema keywords Kubernetes does not use.
fn normalize(v: &mut Value) {
    let Value::Object(m) = v else { return };
    for key in [
        "$schema", "title", "default", "examples", "minimum", "maximum",
    ] {
        m.remove(key);
    }
    // Doc comments wrap at the source's width; a description is one paragraph per line.
    if let Some(Value::String(d)) = m.get_mut("description") {
        *d = d
            .split("\n\n")
            .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    if m.get("additionalProperties") == Some(&Value::Bool(false)) {
        m.remove("additionalProperties");
    }
    // `Option<T>`: ["integer", "null"] or anyOf [T, null].
    if let Some(Value::Array(types)) = m.get("type") {
        let non_null: Vec<Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .cloned()
            .collect();
        if non_null.len() == 1 {
            m.insert("type".into(), non_null[0].clone());
        }
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(alts)) = m.get(key) else {
            continue;
        };
        let non_null: Vec<Value> = alts
            .iter()
            .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
            .cloned()
            .collect();
        if non_null.len() < alts.len() && non_null.len() == 1 {
            m.remove(key);
            if let Value::Object(inner) = &non_null[0] {
                for (k, val) in inner {
                    m.entry(k.clone()).or_insert_with(|| val.clone());
                }
            }
        }
    }
    if let Some(f) = m.get("format").and_then(Value::as_str) {
        let k8s = match f {
            "uint8" | "int8" | "uint16" | "int16" | "uint32" => Some("int32"),
            "uint64" | "uint" | "int" => Some("int64"),
            "float" => Some("double"),
            _ => None,
        };
        if let Some(k8s) = k8s {
            m.insert("format".into(), json!(k8s));
        }
    }
    if m.contains_key("$ref") && m.len() > 1 {
        let r = m.remove("$ref").unwrap_or_default();
        m.insert("allOf".into(), json!([{ "$ref": r }]));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = m.get_mut(key) {
            normalize(sub);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = m.get_mut(key) {
            subs.iter_mut().for_each(normalize);
        }
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(normalize);
    }
    if m.get("required")
        .is_some_and(|r| r.as_array().is_some_and(Vec::is_empty))
    {
        m.remove("required");
    }
}

/// The definition a `$ref` (`#/components/schemas/NAME`) names.
pub fn ref_name(r: &str) -> &str {
    r.rsplit('/').next().unwrap_or(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_kubernetes_named_schema_with_its_group_version_kind() {
        let defs = definitions();
        for &kind in Kind::ALL {
            let info = kind.info();
            let schema = &defs[&definition_name(kind)];
            assert_eq!(
                schema["x-kubernetes-group-version-kind"][0]["kind"],
                info.kind
            );
            assert!(schema["properties"]["metadata"].is_object(), "{kind:?}");
            assert!(schema["properties"]["apiVersion"].is_object(), "{kind:?}");
        }
        for name in defs.keys() {
            assert!(name.starts_with("io.k8s."), "{name} has no Kubernetes name");
        }
    }

    #[test]
    fn fields_have_kubernetes_types_and_formats() {
        let defs = definitions();
        let spec = &defs["io.k8s.api.apps.v1.DeploymentSpec"]["properties"];
        assert_eq!(spec["replicas"]["type"], "integer");
        assert_eq!(spec["replicas"]["format"], "int32");
        assert!(spec["replicas"]["description"].is_string());
        assert_eq!(
            spec["template"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"
        );
        let meta = &defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
        assert_eq!(meta["labels"]["additionalProperties"]["type"], "string");
        assert_eq!(
            meta["creationTimestamp"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Time"
        );
        let secret = &defs["io.k8s.api.core.v1.Secret"]["properties"];
        assert_eq!(secret["data"]["additionalProperties"]["format"], "byte");
        let port = &defs["io.k8s.api.core.v1.ServicePort"]["properties"];
        assert_eq!(
            port["targetPort"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"
        );
        let int_or_string = &defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!(int_or_string["x-kubernetes-int-or-string"], true);
        let text = serde_json::to_string(&defs).unwrap();
        assert!(!text.contains("\"null\""), "null alternatives left");
    }
}
