//! Objects of custom resources: what a CustomResourceDefinition lets the API store. They have
//! no Rust model: `metadata` is the typed [`ObjectMeta`] every object has, everything else
//! (`spec`, `status`, any other member) is kept as JSON, as kube-apiserver keeps custom
//! resources unstructured.
//!
//! * JSON out: kube-apiserver writes custom resources from maps, so every object's members
//!   come out in sorted order, `metadata`'s too, and empty values stay as stored. A custom
//!   object serializes that way itself; [`crate::omit`] only applies the metadata rules.
//! * Stored (postcard): metadata first (the informer and the store read metadata from the
//!   front), the resource's name (`plural.group`, so the object knows its kind when read back
//!   in a process that numbers kinds differently), the stored `apiVersion`, and the rest as
//!   JSON text (postcard cannot carry self-describing values).
//! * What a resource's definition adds (schema pruning, defaulting and validation) comes from
//!   the rules the server registers for the kind ([`CustomRules`], [`Kind::set_custom_rules`]).

use std::sync::Arc;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::meta::ObjectMeta;
use crate::object::{Kind, Resource};
use crate::validation::FieldError;

/// An object of a custom resource.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomObject {
    pub metadata: ObjectMeta,
    /// Its resource's kind ([`Kind::is_custom`]).
    pub kind: Kind,
    /// The `apiVersion` it is stored (and, until versions are converted, served) at.
    pub api_version: String,
    /// Every member but `apiVersion`, `kind` and `metadata`.
    pub body: Map<String, Value>,
}

/// What a custom resource's definition says about its objects beyond their names: the
/// server's compiled schema (pruning, defaulting, validation, selectable fields).
pub trait CustomRules: Send + Sync + std::fmt::Debug {
    /// Drops unknown fields and fills defaults (kube's decoding of a custom resource).
    fn normalize(&self, obj: &mut CustomObject);
    /// Validates the object (`old`: None), or, on an update, only what needs the stored one
    /// to judge (`old`: Some; CEL transition rules).
    fn validate(&self, obj: &CustomObject, old: Option<&CustomObject>) -> Vec<FieldError>;
    /// Validates only the status (a status write kept the rest).
    fn validate_status(&self, obj: &CustomObject, old: Option<&CustomObject>) -> Vec<FieldError>;
    /// The members of `body` (a whole object or a merge patch, as JSON) that the schema does
    /// not know and pruning would drop, by path (`spec.unknown`), for `fieldValidation`.
    fn unknown_fields(&self, body: &Value) -> Vec<String>;
    /// The scale subresource's paths: `specReplicasPath`, `statusReplicasPath`,
    /// `labelSelectorPath` (JSONPaths such as `.spec.replicas`), when the definition has one.
    fn scale_paths(&self) -> Option<(String, String, Option<String>)>;
    /// The fields field selectors may name beyond the metadata ones (`selectableFields`,
    /// as `spec.color`).
    fn selectable_fields(&self) -> Vec<String>;
    /// The definition is being deleted: no new objects (kube's 405 on create).
    fn terminating(&self) -> bool;
    /// The table columns (`additionalPrinterColumns` after Name).
    fn columns(&self) -> Vec<crate::table::ColumnDefinition>;
    /// A table row's cells, aligned with [`CustomRules::columns`].
    fn cells(&self, obj: &CustomObject, now: std::time::SystemTime) -> Vec<Value>;
    /// The rules as their own type (the server reads its compiled schema through it).
    fn as_any(&self) -> &dyn std::any::Any;
}

impl Default for CustomObject {
    /// An empty object of no kind yet (decoding sets it).
    fn default() -> Self {
        CustomObject::new(Kind::ANY_CUSTOM)
    }
}

impl CustomObject {
    /// An empty object of `kind`, at its storage version.
    pub fn new(kind: Kind) -> CustomObject {
        CustomObject {
            metadata: ObjectMeta::default(),
            kind,
            api_version: kind.info().api_version(),
            body: Map::new(),
        }
    }

    fn rules(&self) -> Option<Arc<dyn CustomRules>> {
        self.kind.custom_rules()
    }

    fn has_status(&self) -> bool {
        self.kind.info().has_status
    }

    /// The value at a dotted path of the body (`spec.replicas`).
    pub fn pointer(&self, path: &str) -> Option<&Value> {
        let mut parts = path.split('.');
        let mut at = self.body.get(parts.next()?)?;
        for p in parts {
            at = at.get(p)?;
        }
        Some(at)
    }
}

impl Resource for CustomObject {
    /// Stands for every custom kind in generic code; each object carries its own
    /// ([`Resource::kind_of`]).
    const KIND: Kind = Kind::ANY_CUSTOM;

    crate::resource_basics!(Custom);

    fn kind_of(&self) -> Kind {
        self.kind
    }

    fn set_kind(&mut self, kind: Kind) {
        self.kind = kind;
        self.api_version = kind.info().api_version();
    }

    fn set_defaults(&mut self) {
        if let Some(rules) = self.rules() {
            rules.normalize(self);
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        self.rules()
            .map(|r| r.validate(self, None))
            .unwrap_or_default()
    }

    fn validate_status(&self) -> Vec<FieldError> {
        self.rules()
            .map(|r| r.validate_status(self, None))
            .unwrap_or_default()
    }

    /// kube's custom resource strategy: with a status subresource, the generation moves on
    /// any change but to `status` (and metadata); without one, on any change but metadata.
    fn spec_fingerprint(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in &self.body {
            if k == "status" && self.has_status() {
                continue;
            }
            out.extend_from_slice(k.as_bytes());
            out.push(0);
            serde_json::to_writer(&mut out, v).unwrap_or_default();
            out.push(0);
        }
        out
    }

    fn copy_status_from(&mut self, other: &Self) {
        if !self.has_status() {
            return;
        }
        match other.body.get("status") {
            Some(s) => self.body.insert("status".into(), s.clone()),
            None => self.body.remove("status"),
        };
    }

    fn clear_status(&mut self) {
        if self.has_status() {
            self.body.remove("status");
        }
    }

    /// `selectableFields` and any other path of the body with a scalar value.
    fn field(&self, path: &str) -> Option<String> {
        match self.pointer(path)? {
            Value::String(s) => Some(s.clone()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// The stored form ([`CustomObject`]'s module comment).
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    metadata: std::borrow::Cow<'a, ObjectMeta>,
    resource: std::borrow::Cow<'a, str>,
    api_version: std::borrow::Cow<'a, str>,
    body: std::borrow::Cow<'a, str>,
}

impl Serialize for CustomObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            let info = self.kind.info();
            let body = serde_json::to_string(&self.body).map_err(serde::ser::Error::custom)?;
            return Stored {
                metadata: std::borrow::Cow::Borrowed(&self.metadata),
                resource: format!("{}.{}", info.plural, info.group).into(),
                api_version: self.api_version.as_str().into(),
                body: body.into(),
            }
            .serialize(s);
        }
        // JSON: every member in sorted order, as Go writes a map.
        let metadata = serde_json::to_value(&self.metadata).map_err(serde::ser::Error::custom)?;
        let kind = Value::String(self.kind.info().kind.to_string());
        let api_version = Value::String(self.api_version.clone());
        let mut members: Vec<(&str, &Value)> = vec![
            ("apiVersion", &api_version),
            ("kind", &kind),
            ("metadata", &metadata),
        ];
        members.extend(
            self.body
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                .map(|(k, v)| (k.as_str(), v)),
        );
        members.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut m = s.serialize_map(Some(members.len()))?;
        for (k, v) in members {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for CustomObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CustomObject, D::Error> {
        if !d.is_human_readable() {
            let stored = Stored::deserialize(d)?;
            let (plural, group) = stored
                .resource
                .split_once('.')
                .unwrap_or((&stored.resource, ""));
            let body = serde_json::from_str(&stored.body).map_err(de::Error::custom)?;
            return Ok(CustomObject {
                metadata: stored.metadata.into_owned(),
                kind: Kind::custom_named(group, plural),
                api_version: stored.api_version.into_owned(),
                body,
            });
        }
        // JSON: `metadata` typed, every other member kept; the kind is set by the decoder
        // ([`Resource::set_kind`]).
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = CustomObject;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CustomObject, A::Error> {
                let mut obj = CustomObject::new(Kind::ANY_CUSTOM);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "metadata" => obj.metadata = map.next_value()?,
                        "apiVersion" => obj.api_version = map.next_value()?,
                        "kind" => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                        _ => {
                            let v: Value = map.next_value()?;
                            obj.body.insert(key, v);
                        }
                    }
                }
                Ok(obj)
            }
        }
        d.deserialize_map(Members)
    }
}

impl schemars::JsonSchema for CustomObject {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResource".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::CustomKindInfo;

    fn widget() -> Kind {
        Kind::define_custom(CustomKindInfo {
            kind: "Widget".into(),
            group: "custom-test.skiff.dev".into(),
            version: "v1".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            namespaced: true,
            has_status: true,
            ..Default::default()
        })
    }

    fn object() -> CustomObject {
        let mut o = CustomObject::new(widget());
        o.metadata.name = "a".into();
        o.metadata.namespace = Some("default".into());
        o.body.insert(
            "spec".into(),
            serde_json::json!({"size": 3, "z": [], "a": {}}),
        );
        o.body
            .insert("status".into(), serde_json::json!({"ok": true}));
        o
    }

    #[test]
    fn stored_form_reads_back_and_survives_new_builtin_kinds() {
        let o = object().into_any();
        let bytes = postcard::to_allocvec(&o).unwrap();
        // The variant index is the fixed custom one, then metadata.
        assert_eq!(&bytes[..3], &[0x80, 0x80, 0x01]);
        let back: crate::object::AnyObject = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, o);
        assert_eq!(back.kind(), widget());
    }

    #[test]
    fn json_is_sorted_and_keeps_empty_values() {
        let text = serde_json::to_string(&crate::codec::json(&object())).unwrap();
        assert!(
            text.starts_with(r#"{"apiVersion":"custom-test.skiff.dev/v1","kind":"Widget","metadata":{"name":"a","namespace":"default"},"spec":{"a":{},"size":3,"z":[]},"status":{"ok":true}}"#),
            "{text}"
        );
    }

    #[test]
    fn decodes_json_of_its_kind() {
        let v = serde_json::json!({"apiVersion": "custom-test.skiff.dev/v1", "kind": "Widget",
            "metadata": {"name": "b"}, "spec": {"size": 1}});
        let o: CustomObject = crate::codec::from_json_as(widget(), v).unwrap();
        assert_eq!(o.kind, widget());
        assert_eq!(o.body["spec"]["size"], 1);
        let wrong = serde_json::json!({"apiVersion": "custom-test.skiff.dev/v1", "kind": "Gadget"});
        assert!(crate::codec::from_json_as::<CustomObject>(widget(), wrong).is_err());
    }

    #[test]
    fn generation_ignores_status_only_with_a_status_subresource() {
        let a = object();
        let mut b = a.clone();
        b.body
            .insert("status".into(), serde_json::json!({"ok": false}));
        assert_eq!(a.spec_fingerprint(), b.spec_fingerprint());
        b.body.insert("spec".into(), serde_json::json!({}));
        assert_ne!(a.spec_fingerprint(), b.spec_fingerprint());
    }
}
