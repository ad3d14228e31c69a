//! Strategic merge patch (what `kubectl apply`, `edit`, `set image` and the Python client
//! send): a JSON merge patch in which lists of objects with a merge key merge element by
//! element, and `$patch`, `$retainKeys`, `$setElementOrder/…` and
//! `$deleteFromPrimitiveList/…` directives steer the merge.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};

/// How a list at a path merges. Server-side apply reads the same table for its field sets
/// (`MergeBy` is Kubernetes' `listType=map`, `Set` is `listType=set`, `Replace` is atomic).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum ListStrategy {
    /// Replace the whole list (Kubernetes' default for lists without a strategy).
    #[default]
    Replace,
    /// Merge objects by these keys (one for the built-in kinds; a custom resource's
    /// `x-kubernetes-list-map-keys` may name several).
    MergeBy(&'static [&'static str]),
    /// A set of scalars: union.
    Set,
}

/// The list strategy for a field, decided by the field and its parent field (Kubernetes keys
/// merge strategies by type; the parent field identifies the type well enough here).
pub(crate) fn strategy(parent: Option<&str>, field: &str) -> ListStrategy {
    use ListStrategy::*;
    match (parent, field) {
        (_, "containers" | "initContainers" | "ephemeralContainers") => MergeBy(&["name"]),
        (Some("containers" | "initContainers" | "ephemeralContainers"), "ports") => {
            MergeBy(&["containerPort"])
        }
        (Some("spec"), "ports") => MergeBy(&["port"]),
        (_, "env") => MergeBy(&["name"]),
        (_, "volumeMounts") => MergeBy(&["mountPath"]),
        (_, "volumeDevices") => MergeBy(&["devicePath"]),
        (_, "volumes") => MergeBy(&["name"]),
        (_, "imagePullSecrets") => MergeBy(&["name"]),
        (_, "hostAliases") => MergeBy(&["ip"]),
        (_, "conditions") => MergeBy(&["type"]),
        (Some("status"), "addresses") => MergeBy(&["type"]),
        (_, "ownerReferences") => MergeBy(&["uid"]),
        (_, "finalizers") => Set,
        _ => Replace,
    }
}

/// A custom resource's list-map keys as the `'static` slice [`ListStrategy::MergeBy`] holds,
/// made once per distinct set of keys for the life of the process (there are few).
pub fn intern_keys(keys: &[String]) -> &'static [&'static str] {
    use std::sync::{Mutex, OnceLock};
    static KEYS: OnceLock<Mutex<Vec<&'static [&'static str]>>> = OnceLock::new();
    let mut known = KEYS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(k) = known
        .iter()
        .find(|k| k.iter().copied().eq(keys.iter().map(String::as_str)))
    {
        return k;
    }
    let made: Vec<&'static str> = keys
        .iter()
        .map(|k| &*Box::leak(k.clone().into_boxed_str()))
        .collect();
    let made: &'static [&'static str] = Box::leak(made.into_boxed_slice());
    known.push(made);
    made
}

/// Where a merge is: the map being merged, by the name of the field that holds it (the
/// built-in kinds' table is keyed by it) and, in a custom resource, by its schema node
/// (whose `x-kubernetes-list-type`s and `x-kubernetes-map-type`s decide instead).
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) parent: Option<&'a str>,
    shape: Shape<'a>,
}

#[derive(Clone, Copy)]
enum Shape<'a> {
    /// A built-in kind, or a custom object's metadata.
    Builtin,
    /// The top of a custom object: its schema, but metadata is the built-in ObjectMeta.
    Root(&'a crate::crd::schema::Schema),
    Schema(&'a crate::crd::schema::Schema),
    /// Inside a custom object where its schema says nothing (unknown fields kept):
    /// lists and maps are atomic, as kube treats them.
    Unknown,
}

impl<'a> At<'a> {
    /// The top of an object: of a custom resource when `schema` is its schema.
    pub(crate) fn root(schema: Option<&'a crate::crd::schema::Schema>) -> At<'a> {
        At {
            parent: None,
            shape: schema.map_or(Shape::Builtin, Shape::Root),
        }
    }

    /// The map held by member `field` of this map.
    pub(crate) fn member(self, field: &'a str) -> At<'a> {
        let shape = match self.shape {
            Shape::Root(_) if matches!(field, "metadata" | "apiVersion" | "kind") => Shape::Builtin,
            Shape::Root(s) | Shape::Schema(s) => {
                s.member(field).map_or(Shape::Unknown, Shape::Schema)
            }
            other => other,
        };
        At {
            parent: Some(field),
            shape,
        }
    }

    /// The maps that are elements of list member `field` of this map.
    pub(crate) fn items(self, field: &'a str) -> At<'a> {
        let at = self.member(field);
        At {
            shape: match at.shape {
                Shape::Schema(s) => s.items().map_or(Shape::Unknown, Shape::Schema),
                other => other,
            },
            ..at
        }
    }

    /// How list member `field` of this map merges.
    pub(crate) fn strategy(self, field: &str) -> ListStrategy {
        match self.shape {
            Shape::Builtin => strategy(self.parent, field),
            Shape::Root(s) | Shape::Schema(s) => s
                .member(field)
                .map_or(ListStrategy::Replace, |m| m.list_strategy()),
            Shape::Unknown => ListStrategy::Replace,
        }
    }

    /// Whether map member `field` of this map is owned and replaced whole: label and node
    /// selectors in the built-in kinds; `x-kubernetes-map-type: atomic` in a custom resource
    /// (maps no schema describes are granular, as structured-merge-diff's deduced type).
    /// In a built-in kind (or a custom object's metadata).
    pub(crate) fn is_builtin(self) -> bool {
        matches!(self.shape, Shape::Builtin)
    }

    pub(crate) fn atomic_map(self, field: &str) -> bool {
        match self.shape {
            Shape::Builtin => matches!(field, "selector" | "nodeSelector"),
            Shape::Root(_) if field == "metadata" => false,
            Shape::Root(s) | Shape::Schema(s) => s.member(field).is_some_and(|m| m.map_atomic()),
            Shape::Unknown => false,
        }
    }
}

/// The identity of an element of a list keyed by `keys`: the key's value, or with several
/// keys the map of their values (as FieldsV1's `k:` element names it).
pub(crate) fn identity<'v>(item: &'v Value, keys: &[&str]) -> Option<std::borrow::Cow<'v, Value>> {
    match keys {
        [key] => item.get(*key).map(std::borrow::Cow::Borrowed),
        keys => {
            let mut m = Map::new();
            for k in keys {
                m.insert((*k).to_string(), item.get(*k)?.clone());
            }
            Some(std::borrow::Cow::Owned(Value::Object(m)))
        }
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
        (ListStrategy::MergeBy(keys), true) => Some(("merge,retainKeys", keys.first().copied())),
        (ListStrategy::MergeBy(keys), false) => Some(("merge", keys.first().copied())),
        (ListStrategy::Set, _) => Some(("merge", None)),
        (ListStrategy::Replace, true) => Some(("retainKeys", None)),
        (ListStrategy::Replace, false) => None,
    }
}

/// Applies `patch` to `doc` in place. A custom object's lists merge as its schema says
/// (`x-kubernetes-list-type`), found from the object's `apiVersion` and `kind`.
pub fn merge(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let rules = crate::crd::rules_of_object(doc).or_else(|| crate::crd::rules_of_object(patch));
    let schema = rules.as_deref().and_then(crate::crd::Rules::schema_in);
    merge_value(doc, patch, At::root(schema))
}

fn merge_value(doc: &mut Value, patch: &Value, at: At<'_>) -> Result<(), String> {
    match patch {
        Value::Object(p) => {
            if !doc.is_object() {
                *doc = Value::Object(Map::new());
            }
            let Value::Object(d) = doc else {
                unreachable!("made an object above")
            };
            merge_map(d, p, at)
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
    at: At<'_>,
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
            Value::Array(items) => merge_list(current, items, at, key)?,
            Value::Object(_) if at.atomic_map(key) && !at.is_builtin() => *current = value.clone(),
            Value::Object(_) => merge_value(current, value, at.member(key))?,
            _ => *current = value.clone(),
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: HashSet<&str> = keep.iter().filter_map(Value::as_str).collect();
        doc.retain(|k, _| keep.contains(k.as_str()));
    }
    Ok(())
}

fn merge_list(current: &mut Value, items: &[Value], at: At<'_>, field: &str) -> Result<(), String> {
    let existing = match current {
        Value::Array(a) => std::mem::take(a),
        _ => Vec::new(),
    };
    let merged = match at.strategy(field) {
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
        ListStrategy::MergeBy(keys) => {
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
                merge_by_key(existing, items, at.items(field), field, keys)?
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
    within: At<'_>,
    field: &str,
    keys: &[&str],
) -> Result<Vec<Value>, String> {
    let mut out: Vec<Option<Value>> = existing.into_iter().map(Some).collect();
    // Each key's live elements, first first (appended elements come after all others).
    let mut at: HashMap<KeyOwned, VecDeque<usize>> = HashMap::new();
    for (i, e) in out.iter().enumerate() {
        if let Some(id) = e.as_ref().and_then(|e| identity(e, keys)) {
            at.entry(KeyOwned(id.into_owned()))
                .or_default()
                .push_back(i);
        }
    }
    for item in items {
        let Some(id) = identity(item, keys) else {
            let key = keys.join("\", \"");
            return Err(format!(
                "{field}: every element of a strategic merge list needs its merge key \"{key}\""
            ));
        };
        let id = KeyOwned(id.into_owned());
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
                merge_value(element, item, within)?;
            }
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                merge_value(&mut fresh, item, within)?;
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
