//! Strategic merge patch (what `kubectl apply`, `edit`, `set image` and the Python client
//! send): a JSON merge patch in which lists of objects with a merge key merge element by
//! element, and `$patch`, `$retainKeys`, `$setElementOrder/…` and
//! `$deleteFromPrimitiveList/…` directives steer the merge.

use serde_json::{Map, Value};

/// How a list at a path merges. Server-side apply reads the same table for its field sets
/// (`MergeBy` is Kubernetes' `listType=map`, `Set` is `listType=set`, `Replace` is atomic).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ListStrategy {
    /// Replace the whole list (Kubernetes' default for lists without a strategy).
    Replace,
    /// Merge objects by this key.
    MergeBy(&'static str),
    /// A set of scalars: union.
    Set,
}

/// The list strategy for a field, decided by the field and its parent field (Kubernetes keys
/// merge strategies by type; the parent field identifies the type well enough here).
pub(crate) fn strategy(parent: Option<&str>, field: &str) -> ListStrategy {
    use ListStrategy::*;
    match (parent, field) {
        (_, "containers" | "initContainers" | "ephemeralContainers") => MergeBy("name"),
        (Some("containers" | "initContainers" | "ephemeralContainers"), "ports") => {
            MergeBy("containerPort")
        }
        (Some("spec"), "ports") => MergeBy("port"),
        (_, "env") => MergeBy("name"),
        (_, "volumeMounts") => MergeBy("mountPath"),
        (_, "volumeDevices") => MergeBy("devicePath"),
        (_, "volumes") => MergeBy("name"),
        (_, "imagePullSecrets") => MergeBy("name"),
        (_, "hostAliases") => MergeBy("ip"),
        (_, "conditions") => MergeBy("type"),
        (Some("status"), "addresses") => MergeBy("type"),
        (_, "ownerReferences") => MergeBy("uid"),
        (_, "finalizers") => Set,
        _ => Replace,
    }
}

/// What OpenAPI publishes for a field (`x-kubernetes-patch-strategy` and
/// `x-kubernetes-patch-merge-key`), so that clients computing a strategic merge patch from
/// the schema (`kubectl apply`) build patches this module merges as they expect. `None`: no
/// strategy (lists are replaced, maps merged).
pub fn patch_metadata(
    parent: Option<&str>,
    field: &str,
) -> Option<(&'static str, Option<&'static str>)> {
    // `$retainKeys` is honoured wherever a patch carries it; Kubernetes asks clients for it
    // on these two fields (one of a union of members must go when another is set).
    let retain = matches!((parent, field), (Some("spec"), "strategy") | (_, "volumes"));
    match (strategy(parent, field), retain) {
        (ListStrategy::MergeBy(key), true) => Some(("merge,retainKeys", Some(key))),
        (ListStrategy::MergeBy(key), false) => Some(("merge", Some(key))),
        (ListStrategy::Set, _) => Some(("merge", None)),
        (ListStrategy::Replace, true) => Some(("retainKeys", None)),
        (ListStrategy::Replace, false) => None,
    }
}

/// Applies `patch` to `doc` in place.
pub fn merge(doc: &mut Value, patch: &Value) -> Result<(), String> {
    merge_value(doc, patch, None)
}

fn merge_value(doc: &mut Value, patch: &Value, parent: Option<&str>) -> Result<(), String> {
    match patch {
        Value::Object(p) => {
            if !doc.is_object() {
                *doc = Value::Object(Map::new());
            }
            let Value::Object(d) = doc else {
                unreachable!("made an object above")
            };
            merge_map(d, p, parent)
        }
        other => {
            *doc = other.clone();
            Ok(())
        }
    }
}

fn merge_map(
    doc: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    parent: Option<&str>,
) -> Result<(), String> {
    if let Some(directive) = patch.get("$patch").and_then(Value::as_str) {
        match directive {
            "replace" => {
                *doc = patch
                    .iter()
                    .filter(|(k, _)| !k.starts_with('$'))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                return Ok(());
            }
            "delete" => {
                doc.clear();
                return Ok(());
            }
            "merge" => {}
            other => return Err(format!("unknown patch directive $patch: {other}")),
        }
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = doc.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            // $setElementOrder only orders; $retainKeys is applied after the merge.
            continue;
        }
        if value.is_null() {
            doc.remove(key);
            continue;
        }
        let current = doc.entry(key.clone()).or_insert(Value::Null);
        match value {
            Value::Array(items) => merge_list(current, items, parent, key)?,
            Value::Object(_) => merge_value(current, value, Some(key))?,
            _ => *current = value.clone(),
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        doc.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(
    current: &mut Value,
    items: &[Value],
    parent: Option<&str>,
    field: &str,
) -> Result<(), String> {
    let existing = match current {
        Value::Array(a) => std::mem::take(a),
        _ => Vec::new(),
    };
    let merged = match strategy(parent, field) {
        ListStrategy::Replace => items
            .iter()
            .filter(|v| v.get("$patch").is_none())
            .cloned()
            .collect(),
        ListStrategy::Set => {
            let mut out = existing;
            for v in items {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            out
        }
        ListStrategy::MergeBy(key) => {
            if items
                .iter()
                .any(|v| v.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                items
                    .iter()
                    .filter(|v| v.get("$patch").is_none())
                    .cloned()
                    .collect()
            } else {
                let mut out = existing;
                for item in items {
                    let Some(id) = item.get(key) else {
                        return Err(format!("{field}: every element of a strategic merge list needs its merge key {key:?}"));
                    };
                    let pos = out.iter().position(|e| e.get(key) == Some(id));
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match (pos, delete) {
                        (Some(i), true) => {
                            out.remove(i);
                        }
                        (None, true) => {}
                        (Some(i), false) => merge_value(&mut out[i], item, Some(field))?,
                        (None, false) => {
                            let mut fresh = Value::Object(Map::new());
                            merge_value(&mut fresh, item, Some(field))?;
                            out.push(fresh);
                        }
                    }
                }
                out
            }
        }
    };
    *current = Value::Array(merged);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(doc: Value, patch: Value) -> Value {
        let mut d = doc;
        merge(&mut d, &patch).unwrap();
        d
    }

    #[test]
    fn containers_merge_by_name_and_keep_others() {
        let doc =
            json!({"spec":{"containers":[{"name":"a","image":"x:1"},{"name":"b","image":"y:1"}]}});
        let out = patched(
            doc,
            json!({"spec":{"containers":[{"name":"b","image":"y:2"}]}}),
        );
        assert_eq!(
            out,
            json!({"spec":{"containers":[{"name":"a","image":"x:1"},{"name":"b","image":"y:2"}]}})
        );
    }

    #[test]
    fn delete_directive_removes_element() {
        let doc = json!({"spec":{"containers":[{"name":"a"},{"name":"b"}]}});
        let out = patched(
            doc,
            json!({"spec":{"containers":[{"name":"a","$patch":"delete"}]}}),
        );
        assert_eq!(out, json!({"spec":{"containers":[{"name":"b"}]}}));
    }

    #[test]
    fn lists_without_strategy_are_replaced() {
        let doc = json!({"spec":{"containers":[{"name":"a","args":["1","2"]}]}});
        let out = patched(
            doc,
            json!({"spec":{"containers":[{"name":"a","args":["3"]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["3"]));
    }

    #[test]
    fn service_ports_merge_by_port_and_container_ports_by_container_port() {
        let svc = json!({"spec":{"ports":[{"port":80,"name":"http"},{"port":443,"name":"https"}]}});
        let out = patched(
            svc,
            json!({"spec":{"ports":[{"port":80,"targetPort":8080}]}}),
        );
        assert_eq!(
            out["spec"]["ports"][0],
            json!({"port":80,"name":"http","targetPort":8080})
        );
        assert_eq!(out["spec"]["ports"].as_array().unwrap().len(), 2);
        let pod = json!({"spec":{"containers":[{"name":"a","ports":[{"containerPort":80}]}]}});
        let out = patched(
            pod,
            json!({"spec":{"containers":[{"name":"a","ports":[{"containerPort":81}]}]}}),
        );
        assert_eq!(
            out["spec"]["containers"][0]["ports"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn null_deletes_and_retain_keys_drops_others() {
        let doc = json!({"metadata":{"labels":{"a":"1","b":"2"}},"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":1}}}});
        let out = patched(
            doc,
            json!({"metadata":{"labels":{"a":null}},"spec":{"strategy":{"$retainKeys":["type"],"type":"Recreate"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"b":"2"}));
        assert_eq!(out["spec"]["strategy"], json!({"type":"Recreate"}));
    }

    #[test]
    fn finalizers_are_a_set_and_delete_from_primitive_list_works() {
        let doc = json!({"metadata":{"finalizers":["a","b"]}});
        let out = patched(doc.clone(), json!({"metadata":{"finalizers":["b","c"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = patched(
            doc,
            json!({"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn replace_directive_on_map() {
        let doc = json!({"spec":{"selector":{"a":"1","b":"2"}}});
        let out = patched(
            doc,
            json!({"spec":{"selector":{"$patch":"replace","c":"3"}}}),
        );
        assert_eq!(out["spec"]["selector"], json!({"c":"3"}));
    }
}
