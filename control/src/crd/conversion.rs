//! A definition's conversion webhook (`spec.conversion.strategy: Webhook`): objects sent in a
//! ConversionReview (apiextensions.k8s.io/v1 or v1beta1, the first of the definition's
//! `conversionReviewVersions` this server speaks) and the converted ones checked as
//! kube-apiserver's webhook converter checks them: the same count, the desired apiVersion,
//! the same kind, name, namespace and UID; of the metadata only labels and annotations may
//! change (the rest is restored from the original).

use std::time::Duration;

use api::apiextensions::CustomResourceDefinition;
use serde_json::{json, Map, Value};

use crate::registry::Registry;
use crate::webhook::Webhook;

/// How long a conversion may take (kube's webhook client's default).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The conversion webhook of one definition.
#[derive(Debug)]
pub struct Converter {
    /// The webhook's client and the ConversionReview version (`apiextensions.k8s.io/v1` or
    /// `/v1beta1`), or why there is none (every conversion then fails with it).
    webhook: Result<(Webhook, &'static str), String>,
}

impl Converter {
    /// The converter of `crd`, if its strategy is Webhook.
    pub fn of(crd: &CustomResourceDefinition) -> Option<Converter> {
        let c = crd.spec.conversion.as_ref()?;
        if c.strategy != "Webhook" {
            return None;
        }
        let webhook = c.webhook.clone().unwrap_or_default();
        let review_version = webhook
            .conversion_review_versions
            .iter()
            .find_map(|v| match v.as_str() {
                "v1" => Some("apiextensions.k8s.io/v1"),
                "v1beta1" => Some("apiextensions.k8s.io/v1beta1"),
                _ => None,
            })
            .ok_or_else(|| "no supported conversion review versions".to_string());
        let client = webhook
            .client_config
            .as_ref()
            .ok_or_else(|| "no webhook client configuration".to_string())
            .and_then(Webhook::new);
        Some(Converter {
            webhook: review_version.and_then(|v| client.map(|c| (c, v))),
        })
    }

    /// Converts `objects` to `desired` (`group/version`); those already there are left as
    /// they are and not sent. `gvk` names the input in errors (`group/v1, Kind=Foo`, or
    /// `Kind=FooList` for the items of a `list`).
    pub async fn convert(
        &self,
        registry: &Registry,
        objects: &mut [Value],
        desired: &str,
        gvk: &str,
        list: bool,
    ) -> Result<(), String> {
        let at: Vec<usize> = (0..objects.len())
            .filter(|&i| objects[i]["apiVersion"] != desired)
            .collect();
        if at.is_empty() {
            return Ok(());
        }
        let (webhook, review_version) = self
            .webhook
            .as_ref()
            .map_err(|e| format!("conversion webhook for {gvk} failed: {e}"))?;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "kind": "ConversionReview",
            "apiVersion": review_version,
            "request": {
                "uid": uid,
                "desiredAPIVersion": desired,
                "objects": at.iter().map(|&i| &objects[i]).collect::<Vec<_>>(),
            },
        });
        let failed =
            |e: &dyn std::fmt::Display| format!("conversion webhook for {gvk} failed: {e}");
        let mut answer = webhook
            .post(registry, &review, TIMEOUT)
            .await
            .map_err(|e| failed(&e))?;
        let converted = converted(&mut answer, review_version, &uid).map_err(|e| failed(&e))?;
        if converted.len() != at.len() {
            return Err(format!(
                "conversion webhook for {gvk} returned {} objects, expected {}",
                converted.len(),
                at.len()
            ));
        }
        for (n, (i, mut out)) in at.into_iter().zip(converted).enumerate() {
            let original = &objects[i];
            // kube's words (and, in a list, its index counted from one after the first).
            let (gv_what, what, meta_what) = if list {
                let n = n + 1;
                (
                    format!("invalid converted object at index {n}"),
                    format!("invalid converted object at index {n}"),
                    format!("invalid metadata in object at index {n}"),
                )
            } else {
                (
                    "invalid object at index 0".to_string(),
                    "invalid object".to_string(),
                    "invalid metadata".to_string(),
                )
            };
            let invalid_gv =
                |why: String| format!("conversion webhook for {gvk} returned {gv_what}: {why}");
            let invalid =
                |why: String| format!("conversion webhook for {gvk} returned {what}: {why}");
            if out["apiVersion"] != desired {
                return Err(invalid_gv(format!(
                    "invalid groupVersion (expected {desired}, received {})",
                    out["apiVersion"].as_str().unwrap_or("")
                )));
            }
            if out["kind"] != original["kind"] {
                return Err(invalid_gv(format!(
                    "invalid kind (expected {}, received {})",
                    original["kind"].as_str().unwrap_or(""),
                    out["kind"].as_str().unwrap_or("")
                )));
            }
            for (field, name) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
                let a = original["metadata"][field].as_str().unwrap_or("");
                let b = out["metadata"][field].as_str().unwrap_or("");
                if a != b {
                    return Err(invalid(format!("must have the same {name}: {a} != {b}")));
                }
            }
            restore_metadata(original, &mut out).map_err(|why| {
                format!("conversion webhook for {gvk} returned {meta_what}: {why}")
            })?;
            objects[i] = out;
        }
        Ok(())
    }
}

/// The converted objects of a review answer, after its checks.
fn converted(answer: &mut Value, review_version: &str, uid: &str) -> Result<Vec<Value>, String> {
    let v1 = review_version == "apiextensions.k8s.io/v1";
    if v1 && (answer["kind"] != "ConversionReview" || answer["apiVersion"] != review_version) {
        return Err(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {}, Kind={}",
                answer["apiVersion"].as_str().unwrap_or(""),
                answer["kind"].as_str().unwrap_or("")
            ));
    }
    let response = match answer.get_mut("response") {
        Some(r) if r.is_object() => r,
        _ => return Err("no response provided".into()),
    };
    if v1 && response["uid"] != uid {
        return Err(format!(
            "expected response.uid={uid:?}, got {:?}",
            response["uid"].as_str().unwrap_or("")
        ));
    }
    let status = response["result"]["status"].as_str().unwrap_or("");
    if status != "Success" {
        let message = response["result"]["message"].as_str().unwrap_or("");
        if !message.is_empty() {
            return Err(message.to_string());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    match response["convertedObjects"].take() {
        Value::Array(items) => Ok(items),
        Value::Null => Ok(Vec::new()),
        _ => Err("convertedObjects is not a list".into()),
    }
}

/// The original's metadata with the converted object's labels and annotations, which must
/// be maps of strings (and valid labels and annotations when they changed).
fn restore_metadata(original: &Value, converted: &mut Value) -> Result<(), String> {
    let answered = match converted.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ))
        }
        None => return Err("missing metadata in converted object".into()),
    };
    let mut meta: Map<String, Value> = original["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        let Some(Value::Object(map)) = answered.get(field) else {
            if let Some(v) = answered.get(field).filter(|v| !v.is_null()) {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(v)
                ));
            }
            meta.remove(field);
            continue;
        };
        let mut strings = std::collections::BTreeMap::new();
        for (k, v) in map {
            let Some(s) = v.as_str() else {
                return Err(format!(
                    "metadata.{field}[{k}] must be a string, but is {} in converted object",
                    go_type(v)
                ));
            };
            strings.insert(k.clone(), s.to_string());
        }
        let changed = meta.get(field) != Some(&Value::Object(map.clone()));
        if changed {
            let errs = if field == "labels" {
                api::validation::validate_labels(&strings, "metadata.labels")
            } else {
                api::validation::validate_annotations(&strings, "metadata.annotation")
            };
            if !errs.is_empty() {
                return Err(api::validation::aggregate(&errs));
            }
        }
        meta.insert(field.to_string(), Value::Object(map.clone()));
    }
    converted["metadata"] = Value::Object(meta);
    Ok(())
}

/// The Go type kube names in its messages for a JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}
