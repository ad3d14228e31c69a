//! The JSON edge: Kubernetes JSON in and out of the typed model, and manifest files
//! (multi-document YAML or JSON) into JSON values.
//!
//! Typed objects never carry `apiVersion`/`kind` (the Rust type says it); they are checked
//! and removed on the way in and added on the way out. Nulls are removed on the way in (a
//! null means "unset" in Kubernetes) and on the way out (Kubernetes omits empty fields).

use serde_json::{Map, Value};

use crate::object::{Kind, Resource};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("{0}")]
    Syntax(String),
    #[error("{path}: {message}")]
    Field { path: String, message: String },
    #[error("the object is of kind {found:?}, but this endpoint serves {expected:?}")]
    WrongKind { expected: String, found: String },
    #[error("no kind {kind:?} is registered for version {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("apiVersion and kind are required")]
    MissingType,
}

/// Removes object members whose value is null, recursively.
pub fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The typed object as Kubernetes JSON, with `apiVersion` and `kind`, without the members
/// Kubernetes omits (nulls, empty arrays, empty string maps; see [`crate::omit`]).
pub fn to_json<K: Resource>(obj: &K) -> Value {
    serde_json::to_value(json(obj)).expect("model types always serialize")
}

/// The part of the typed object that `view` names, as Kubernetes JSON (for the field
/// manager, which compares only that part).
pub fn to_json_view<K: Resource>(obj: &K, view: View) -> Value {
    serde_json::to_value(Json {
        kind: K::KIND,
        value: obj,
        view,
    })
    .expect("model types always serialize")
}

/// The typed object as Kubernetes JSON, appended to `out` (what [`to_json`] gives, written in
/// one pass, members in model order).
pub fn write_json<K: Resource>(obj: &K, out: &mut Vec<u8>) {
    serde_json::to_writer(out, &json(obj)).expect("model types always serialize")
}

/// The typed object as an item of a list, appended to `out` ([`View::ListItem`]).
pub fn write_json_item<K: Resource>(obj: &K, out: &mut Vec<u8>) {
    let item = Json {
        kind: K::KIND,
        value: obj,
        view: View::ListItem,
    };
    serde_json::to_writer(out, &item).expect("model types always serialize")
}

/// The typed object in Kubernetes' JSON shape, to embed in a larger document.
pub fn json<K: Resource>(obj: &K) -> Json<'_, K> {
    Json {
        kind: K::KIND,
        value: obj,
        view: View::Whole,
    }
}

pub use crate::omit::{Typed as Json, View, MAP_FIELDS};

/// Reads `apiVersion` and `kind` from a manifest.
pub fn type_of(v: &Value) -> Result<Kind, DecodeError> {
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(DecodeError::MissingType);
    }
    Kind::from_type(api_version, kind).ok_or_else(|| DecodeError::UnknownKind {
        api_version: api_version.into(),
        kind: kind.into(),
    })
}

/// Decodes Kubernetes JSON into `K`. `apiVersion`/`kind` may be absent; if present they
/// must name `K`. Unknown fields are refused (serde's message, without the field's path:
/// see [`from_json_as_traced`]).
pub fn from_json<K: Resource>(v: Value) -> Result<K, DecodeError> {
    from_json_as(K::KIND, v)
}

/// [`from_json`] for an object of `kind` (which for a built-in type is always `K::KIND`; a
/// custom object gets its kind from here).
pub fn from_json_as<K: Resource>(kind: Kind, mut v: Value) -> Result<K, DecodeError> {
    prepare_decode(kind, &mut v)?;
    let mut obj = K::deserialize(&v).map_err(|e| DecodeError::Syntax(e.to_string()))?;
    obj.set_kind(kind);
    Ok(obj)
}

/// [`from_json_as`] whose error names the path of what did not decode
/// (`spec.replicas: invalid type ...`), as the API server answers a request. Only a value
/// that does not decode pays for tracking the path; and only a binary that calls this
/// carries the second copy of every type's decoder that tracking takes (the agent does
/// not).
pub fn from_json_as_traced<K: Resource>(kind: Kind, mut v: Value) -> Result<K, DecodeError> {
    prepare_decode(kind, &mut v)?;
    let mut obj = match K::deserialize(&v) {
        Ok(obj) => obj,
        Err(_) => serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            DecodeError::Field { path, message }
        })?,
    };
    obj.set_kind(kind);
    Ok(obj)
}

/// What both decoders do first: the body is an object of `kind`; built-in objects lose
/// their nulls.
fn prepare_decode(kind: Kind, v: &mut Value) -> Result<(), DecodeError> {
    let Value::Object(m) = v else {
        return Err(DecodeError::Syntax("the body must be a JSON object".into()));
    };
    check_type(kind, m)?;
    // Custom objects keep their nulls (kube-apiserver stores them; the schema judges them).
    if !kind.is_custom() {
        strip_nulls(v);
    }
    Ok(())
}

fn check_type(kind: Kind, m: &mut Map<String, Value>) -> Result<(), DecodeError> {
    let info = kind.info();
    let api_version = m.remove("apiVersion");
    let kind = m.remove("kind");
    let found_kind = kind.as_ref().and_then(Value::as_str).unwrap_or(info.kind);
    let found_version = api_version
        .as_ref()
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| info.api_version());
    if found_kind != info.kind || found_version != info.api_version() {
        return Err(DecodeError::WrongKind {
            expected: format!("{}/{}", info.api_version(), info.kind),
            found: format!("{found_version}/{found_kind}"),
        });
    }
    Ok(())
}

/// Decodes a JSON body.
pub fn parse_json(bytes: &[u8]) -> Result<Value, DecodeError> {
    serde_json::from_slice(bytes).map_err(|e| DecodeError::Syntax(format!("invalid JSON: {e}")))
}

/// Splits a manifest file into its documents: JSON (one object, or a `List`) or
/// multi-document YAML. Empty documents are skipped; `kind: List` is flattened.
pub fn parse_manifests(text: &str) -> Result<Vec<Value>, DecodeError> {
    let trimmed = text.trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let mut out = Vec::new();
        for v in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            out.push(v.map_err(|e| DecodeError::Syntax(format!("invalid JSON: {e}")))?);
        }
        out
    } else {
        let mut out = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v = serde_yaml_ng::Value::deserialize(doc)
                .map_err(|e| DecodeError::Syntax(format!("invalid YAML: {e}")))?;
            if v.is_null() {
                continue;
            }
            let json = serde_json::to_value(&v).map_err(|e| {
                DecodeError::Syntax(format!("YAML is not representable as JSON: {e}"))
            })?;
            out.push(json);
        }
        out
    };
    let mut flat = Vec::new();
    for d in docs {
        match d {
            Value::Array(items) => flat.extend(items),
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = m.get("items") {
                    flat.extend(items.iter().cloned());
                }
            }
            other => flat.push(other),
        }
    }
    Ok(flat)
}

use serde::Deserialize as _;

/// Decodes one YAML document (for request bodies sent as YAML).
pub fn parse_yaml(bytes: &[u8]) -> Result<Value, DecodeError> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_slice(bytes)
        .map_err(|e| DecodeError::Syntax(format!("invalid YAML: {e}")))?;
    serde_json::to_value(&v)
        .map_err(|e| DecodeError::Syntax(format!("YAML is not representable as JSON: {e}")))
}

/// The JSON value as YAML text, for `-o yaml`.
pub fn to_yaml(v: &Value) -> String {
    serde_yaml_ng::to_string(v).unwrap_or_default()
}

/// Decodes a JSON body straight into `K` without building a JSON tree first: the common,
/// well-formed case of a create or update. `None` means "take the careful path"
/// ([`parse_json`] then [`from_json`]): the body has nulls where the model has no `Option`,
/// is malformed, names another kind, or fails in any other way; that path then gives the
/// precise error with its field path.
pub fn from_json_bytes<K: Resource>(bytes: &[u8]) -> Option<K> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut seen = TypeFields::default();
    let obj = K::deserialize(TopLevel {
        inner: &mut de,
        seen: &mut seen,
    })
    .ok()?;
    de.end().ok()?;
    if K::KIND.is_custom() {
        // A custom object's kind is the request's: the careful path checks it.
        return None;
    }
    let info = K::KIND.info();
    let kind_ok = seen.kind.as_deref().is_none_or(|k| k == info.kind);
    let version_ok = seen
        .api_version
        .as_deref()
        .is_none_or(|v| v == info.api_version());
    (kind_ok && version_ok).then_some(obj)
}

/// `apiVersion` and `kind` as found at the top of a body.
#[derive(Default)]
struct TypeFields {
    api_version: Option<String>,
    kind: Option<String>,
}

/// A deserializer for the top-level object that takes `apiVersion` and `kind` out of the
/// map (the typed model has no such fields) and passes everything else through.
struct TopLevel<'a, D> {
    inner: D,
    seen: &'a mut TypeFields,
}

impl<'de, 'a, D: serde::Deserializer<'de>> serde::Deserializer<'de> for TopLevel<'a, D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(visitor)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let seen = self.seen;
        self.inner
            .deserialize_struct(name, fields, TypeStripping { visitor, seen })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

struct TypeStripping<'a, V> {
    visitor: V,
    seen: &'a mut TypeFields,
}

impl<'de, 'a, V: serde::de::Visitor<'de>> serde::de::Visitor<'de> for TypeStripping<'a, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(StrippedMap {
            inner: map,
            seen: self.seen,
        })
    }
}

struct StrippedMap<'a, A> {
    inner: A,
    seen: &'a mut TypeFields,
}

impl<'de, 'a, A: serde::de::MapAccess<'de>> serde::de::MapAccess<'de> for StrippedMap<'a, A> {
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        use serde::de::IntoDeserializer;
        loop {
            let Some(key) = self.inner.next_key::<String>()? else {
                return Ok(None);
            };
            match key.as_str() {
                "apiVersion" => self.seen.api_version = Some(self.inner.next_value()?),
                "kind" => self.seen.kind = Some(self.inner.next_value()?),
                _ => return seed.deserialize(key.into_deserializer()).map(Some),
            }
        }
    }

    fn next_value_seed<S: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;
    use crate::core::{ConfigMap, Pod};

    #[test]
    fn fast_path_decodes_what_the_careful_path_decodes() {
        let body = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"b"}},
            "spec":{"containers":[{"name":"c","image":"busybox","args":["1"]}],"nodeName":null}}"#;
        let fast: Pod = from_json_bytes(body).expect("fast path");
        let careful: Pod = from_json(parse_json(body).unwrap()).unwrap();
        assert_eq!(fast, careful);
    }

    #[test]
    fn fast_path_steps_aside_for_other_kinds_unknown_fields_and_nulls_in_lists() {
        assert!(from_json_bytes::<ConfigMap>(
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#
        )
        .is_none());
        assert!(from_json_bytes::<ConfigMap>(
            br#"{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"x"}}"#
        )
        .is_none());
        assert!(from_json_bytes::<ConfigMap>(br#"{"metadata":{"name":"x"},"bogus":1}"#).is_none());
        assert!(
            from_json_bytes::<ConfigMap>(br#"{"metadata":{"name":"x","finalizers":null}}"#)
                .is_none()
        );
        assert!(from_json_bytes::<ConfigMap>(br#"{"metadata":{"name":"x"}} trailing"#).is_none());
        let cm: ConfigMap =
            from_json_bytes(br#"{"metadata":{"name":"x"},"data":{"k":"v"}}"#).unwrap();
        assert_eq!(cm.data.get("k").map(String::as_str), Some("v"));
    }
}
