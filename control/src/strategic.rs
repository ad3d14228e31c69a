//! Strategic merge patch (what `kubectl apply`, `edit`, `set image` and the Python client
//! send): a JSON merge patch in which lists of objects with a merge key merge element by
//! element, and `$patch`, `$retainKeys`, `$setElementOrder/…` and
//! `$deleteFromPrimitiveList/…` directives steer the merge.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

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
            let remove: HashSet<Key<'_>> =
                value.as_array().into_iter().flatten().map(Key).collect();
            if let Some(Value::Array(list)) = doc.get_mut(field) {
                list.retain(|v| !remove.contains(&Key(v)));
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
        let keep: HashSet<&str> = keep.iter().filter_map(Value::as_str).collect();
        doc.retain(|k, _| keep.contains(k.as_str()));
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
            // A union, found by hashing (a 3 MiB patch of 300,000 finalizers took minutes as a
            // search of the list for each).
            let present: HashSet<Key<'_>> = existing.iter().map(Key).collect();
            let mut added = HashSet::new();
            let new: Vec<Value> = items
                .iter()
                .filter(|v| !present.contains(&Key(v)) && added.insert(Key(v)))
                .cloned()
                .collect();
            drop(present);
            let mut out = existing;
            out.extend(new);
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
                merge_by_key(existing, items, field, key)?
            }
        }
    };
    *current = Value::Array(merged);
    Ok(())
}

/// Merges the patch's `items` into the `existing` elements of a list whose elements are
/// identified by `key`: an item merges into the first element with its key, deletes it
/// (`$patch: delete`), or is appended. Elements are found through a map from key to their
/// positions (a search of the list for each item made a 3 MiB patch of containers take
/// minutes); a deleted element leaves a hole until the end.
fn merge_by_key(
    existing: Vec<Value>,
    items: &[Value],
    field: &str,
    key: &str,
) -> Result<Vec<Value>, String> {
    let mut out: Vec<Option<Value>> = existing.into_iter().map(Some).collect();
    // Each key's live elements, first first (appended elements come after all others).
    let mut at: HashMap<KeyOwned, VecDeque<usize>> = HashMap::new();
    for (i, e) in out.iter().enumerate() {
        if let Some(id) = e.as_ref().and_then(|e| e.get(key)) {
            at.entry(KeyOwned(id.clone())).or_default().push_back(i);
        }
    }
    for item in items {
        let Some(id) = item.get(key) else {
            return Err(format!(
                "{field}: every element of a strategic merge list needs its merge key {key:?}"
            ));
        };
        let id = KeyOwned(id.clone());
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        let positions = at.entry(id).or_default();
        match (positions.front().copied(), delete) {
            (Some(i), true) => {
                out[i] = None;
                positions.pop_front();
            }
            (None, true) => {}
            (Some(i), false) => {
                let element = out[i].as_mut().expect("a live element");
                merge_value(element, item, Some(field))?;
            }
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                merge_value(&mut fresh, item, Some(field))?;
                positions.push_back(out.len());
                out.push(Some(fresh));
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// A JSON value to hash, equal when the values are (`==`).
#[derive(Clone, Copy)]
pub(crate) struct Key<'a>(pub(crate) &'a Value);

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Key<'_> {}

impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_value(self.0, state);
    }
}

/// [`Key`] owning its value.
struct KeyOwned(Value);

impl PartialEq for KeyOwned {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for KeyOwned {}

impl Hash for KeyOwned {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_value(&self.0, state);
    }
}

/// Hashes a JSON value consistently with its `==`: numbers by their value as an f64 (equal
/// numbers have equal f64s; 0 and -0 are one), maps in their (sorted) order.
fn hash_value<H: Hasher>(v: &Value, state: &mut H) {
    match v {
        Value::Null => state.write_u8(0),
        Value::Bool(b) => {
            state.write_u8(1);
            b.hash(state);
        }
        Value::Number(n) => {
            state.write_u8(2);
            let f = n.as_f64().unwrap_or(0.0);
            let f = if f == 0.0 { 0.0 } else { f };
            f.to_bits().hash(state);
        }
        Value::String(s) => {
            state.write_u8(3);
            s.hash(state);
        }
        Value::Array(items) => {
            state.write_u8(4);
            state.write_usize(items.len());
            items.iter().for_each(|v| hash_value(v, state));
        }
        Value::Object(m) => {
            state.write_u8(5);
            state.write_usize(m.len());
            for (k, v) in m {
                k.hash(state);
                hash_value(v, state);
            }
        }
    }
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
    fn merge_keys_find_the_first_live_element_of_their_key() {
        let doc =
            json!({"spec":{"containers":[{"name":"a","v":1},{"name":"a","v":2},{"name":"b"}]}});
        let out = patched(
            doc,
            json!({"spec":{"containers":[
                {"name":"a","$patch":"delete"},
                {"name":"a","x":1},
                {"name":"c"},
                {"name":"c","y":2},
                {"name":"b","$patch":"delete"},
                {"name":"d","$patch":"delete"}
            ]}}),
        );
        assert_eq!(
            out,
            json!({"spec":{"containers":[{"name":"a","v":2,"x":1},{"name":"c","y":2}]}})
        );
    }

    #[test]
    fn sets_keep_what_they_had_and_add_each_new_value_once() {
        let doc = json!({"metadata":{"finalizers":["a","a",1]}});
        let out = patched(
            doc,
            json!({"metadata":{"finalizers":["b",1.0,"a","b",1,{"k":[0]},{"k":[-0.0]}]}}),
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["a", "a", 1, "b", 1.0, {"k":[0]}, {"k":[-0.0]}])
        );
        let out = patched(
            out,
            json!({"metadata":{"$deleteFromPrimitiveList/finalizers":["a",1.0,{"k":[0]}]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!([1, "b", {"k":[-0.0]}]));
    }

    /// Lists of 100,000s of elements (a 3 MiB patch holds 300,000 finalizers) merged in
    /// minutes when each element was searched for in the list; the fuzz inputs are
    /// fuzz/corpus/strategic_merge_patch/long-set and long-keyed-list.
    #[test]
    fn long_lists_merge_in_linear_time() {
        let n = 100_000;
        let started = std::time::Instant::now();
        let names: Vec<Value> = (0..n).map(|i| json!(format!("f{i}"))).collect();
        let out = patched(
            json!({"metadata":{"finalizers":["f1"]}}),
            json!({"metadata":{"finalizers": names}}),
        );
        assert_eq!(out["metadata"]["finalizers"].as_array().unwrap().len(), n);
        let out = patched(
            out,
            json!({"metadata":{"$deleteFromPrimitiveList/finalizers": names}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        let labels: Map<String, Value> = (0..n).map(|i| (format!("l{i}"), json!("v"))).collect();
        let out = patched(
            json!({"metadata":{"labels": labels}}),
            json!({"metadata":{"labels":{"$retainKeys": names}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({}));
        let containers: Vec<Value> = (0..n).map(|i| json!({"name": format!("c{i}")})).collect();
        let doc = patched(json!({}), json!({"spec":{"containers": containers}}));
        let deletes: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("c{i}"), "$patch": "delete"}))
            .collect();
        let out = patched(doc, json!({"spec":{"containers": deletes}}));
        assert_eq!(out["spec"]["containers"], json!([]));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
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
