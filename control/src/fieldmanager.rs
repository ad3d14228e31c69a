//! Field ownership (`metadata.managedFields`), as Kubernetes' structured-merge-diff keeps it.
//!
//! Every write names a manager. A server-side apply (operation `Apply`) owns exactly the
//! fields of its applied configuration: fields it set before and leaves out now are removed
//! from the object unless another manager owns them, and changing a field another manager
//! owns is a conflict unless forced (then ownership moves). Every other write (operation
//! `Update`) takes ownership of the fields it changed, away from everyone else.
//!
//! Which lists are maps keyed by which fields, which are sets and which are atomic comes
//! from the strategic merge table ([`crate::strategic::strategy`]): the two agree in
//! Kubernetes too (`patchMergeKey` and `listMapKey` name the same keys).
//!
//! Field sets work on the JSON form of objects; objects carry `managedFields` as its JSON
//! text ([`ManagedFields`]), parsed here only when a write changes ownership.

use std::collections::btree_map::Entry as MapEntry;
use std::collections::{BTreeMap, HashMap, HashSet};

use api::meta::{ManagedFields, Time};
use serde_json::{Map, Value};

use crate::strategic::{identity, At, Key, ListStrategy};

/// A set of field paths: a tree keyed by FieldsV1 path elements, `f:<field>`, `k:<key as
/// JSON>` (an element of a keyed list) and `v:<value as JSON>` (an element of a set). The
/// tree never keeps an empty node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSet {
    /// Whether the path of this node is itself in the set.
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    fn leaf() -> FieldSet {
        FieldSet {
            member: true,
            children: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Adds `child` under `element` (nothing when it is empty).
    fn put(&mut self, element: String, child: FieldSet) {
        if child.is_empty() {
            return;
        }
        match self.children.entry(element) {
            MapEntry::Vacant(e) => {
                e.insert(child);
            }
            MapEntry::Occupied(mut e) => e.get_mut().union(&child),
        }
    }

    pub fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, c) in &other.children {
            match self.children.get_mut(k) {
                Some(mine) => mine.union(c),
                None => {
                    self.children.insert(k.clone(), c.clone());
                }
            }
        }
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            out.put(k.clone(), d);
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                out.put(k.clone(), c.intersection(o));
            }
        }
        out
    }

    /// The member paths in Kubernetes' notation: `.spec.replicas`,
    /// `.spec.template.spec.containers[name="web"].image`, `.metadata.finalizers[="x"]`.
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_paths(&mut String::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut String, out: &mut Vec<String>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (element, child) in &self.children {
            let len = prefix.len();
            push_path_element(prefix, element);
            child.collect_paths(prefix, out);
            prefix.truncate(len);
        }
    }
}

/// Appends one FieldsV1 path element in Kubernetes' path notation.
fn push_path_element(out: &mut String, element: &str) {
    if let Some(name) = element.strip_prefix("f:") {
        out.push('.');
        out.push_str(name);
    } else if let Some(key) = element.strip_prefix("k:") {
        out.push('[');
        match serde_json::from_str::<Map<String, Value>>(key) {
            Ok(fields) => {
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&parts.join(","));
            }
            Err(_) => out.push_str(key),
        }
        out.push(']');
    } else if let Some(value) = element.strip_prefix("v:") {
        out.push_str("[=");
        out.push_str(value);
        out.push(']');
    } else if let Some(index) = element.strip_prefix("i:") {
        out.push('[');
        out.push_str(index);
        out.push(']');
    }
}

fn field_element(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push_str("f:");
    s.push_str(name);
    s
}

/// `k:{"name":"web"}`: the element of a keyed list whose keys have these values (`id` is
/// the key's value, or the map of the keys' values, see [`identity`]).
fn key_element(keys: &[&str], id: &Value) -> String {
    match keys {
        [key] => {
            let mut m = Map::new();
            m.insert((*key).to_string(), id.clone());
            format!("k:{}", Value::Object(m))
        }
        _ => format!("k:{id}"),
    }
}

fn value_element(value: &Value) -> String {
    format!("v:{value}")
}

/// The top of `obj`: a custom resource's lists and maps follow its schema.
fn with_root<R>(obj: &Value, f: impl FnOnce(At<'_>) -> R) -> R {
    let rules = crate::crd::rules_of_object(obj);
    f(At::root(
        rules.as_deref().and_then(crate::crd::Rules::schema_in),
    ))
}

/// Which part of an object a write may own: the main resource's writes never own the status,
/// and status writes own only the status (Kubernetes' reset fields). Writes through the scale
/// subresource own what they change of the main resource, recorded as `subresource: scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Main,
    Scale,
    Status,
    /// `pods/ephemeralcontainers`: owns what a main write owns, recorded under its name.
    EphemeralContainers,
}

/// What is skipped at a level of the object.
#[derive(Clone, Copy)]
enum Filter {
    All,
    Root(Scope),
    RootMetadata,
}

impl Filter {
    fn keeps(self, key: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Root(scope) => match key {
                "apiVersion" | "kind" => false,
                "status" => scope == Scope::Status,
                _ => scope != Scope::Status,
            },
            // Server-owned metadata nobody manages (Kubernetes' stripped fields).
            Filter::RootMetadata => !matches!(
                key,
                "name"
                    | "namespace"
                    | "creationTimestamp"
                    | "selfLink"
                    | "uid"
                    | "generation"
                    | "managedFields"
                    | "resourceVersion"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
            ),
        }
    }

    fn child(self, key: &str) -> Filter {
        match (self, key) {
            (Filter::Root(_), "metadata") => Filter::RootMetadata,
            _ => Filter::All,
        }
    }
}

/// What a member's value is, for ownership.
enum Node<'a> {
    /// Owned whole: scalars, null, empty maps, atomic lists and maps.
    Leaf,
    Map(&'a Map<String, Value>),
    /// A list of objects keyed by fields.
    Keyed(&'a [Value], &'static [&'static str]),
    /// A list of distinct scalars.
    Set(&'a [Value]),
}

/// What member `field` of the map at `at` is, for ownership. Maps that Kubernetes declares
/// atomic (`+mapType=atomic`: label and node selectors; a custom resource's
/// `x-kubernetes-map-type: atomic`) are owned whole.
fn node<'a>(at: At<'_>, field: &str, v: &'a Value) -> Node<'a> {
    match v {
        Value::Object(m) if !m.is_empty() && !at.atomic_map(field) => Node::Map(m),
        Value::Array(items) => match at.strategy(field) {
            ListStrategy::MergeBy(keys) if items.iter().all(|i| identity(i, keys).is_some()) => {
                Node::Keyed(items, keys)
            }
            ListStrategy::Set if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                Node::Set(items)
            }
            _ => Node::Leaf,
        },
        _ => Node::Leaf,
    }
}

/// The field set of a whole object (what an applied configuration owns).
pub fn field_set(obj: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::default();
    if let Value::Object(m) = obj {
        with_root(obj, |at| collect_map(m, at, Filter::Root(scope), &mut out));
    }
    out
}

fn collect_map(m: &Map<String, Value>, at: At<'_>, filter: Filter, out: &mut FieldSet) {
    for (k, v) in m {
        if filter.keeps(k) {
            out.put(field_element(k), collect_member(at, k, v, filter.child(k)));
        }
    }
}

fn collect_member(at: At<'_>, field: &str, v: &Value, filter: Filter) -> FieldSet {
    let mut out = FieldSet::default();
    match node(at, field, v) {
        Node::Leaf => out.member = true,
        Node::Map(m) => collect_map(m, at.member(field), filter, &mut out),
        Node::Keyed(items, keys) => {
            for item in items {
                if let Some(id) = identity(item, keys) {
                    out.put(key_element(keys, &id), collect_item(at.items(field), item));
                }
            }
        }
        Node::Set(items) => {
            for item in items {
                out.put(value_element(item), FieldSet::leaf());
            }
        }
    }
    out
}

fn collect_item(at: At<'_>, item: &Value) -> FieldSet {
    let mut out = FieldSet::leaf();
    if let Value::Object(m) = item {
        collect_map(m, at, Filter::All, &mut out);
    }
    out
}

/// What changed between two versions of an object.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Added or modified.
    pub changed: FieldSet,
    pub removed: FieldSet,
}

/// Compares two versions of an object, within `scope`.
pub fn compare(old: &Value, new: &Value, scope: Scope) -> Comparison {
    let mut c = Comparison::default();
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    with_root(new, |at| diff_map(o, n, at, Filter::Root(scope), &mut c));
    c
}

fn diff_map(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    at: At<'_>,
    filter: Filter,
    out: &mut Comparison,
) {
    for (k, nv) in new {
        if !filter.keeps(k) {
            continue;
        }
        let ov = old.get(k);
        if ov == Some(nv) {
            continue;
        }
        let c = diff_member(at, k, ov, Some(nv), filter.child(k));
        out.changed.put(field_element(k), c.changed);
        out.removed.put(field_element(k), c.removed);
    }
    for (k, ov) in old {
        if filter.keeps(k) && !new.contains_key(k) {
            out.removed
                .put(field_element(k), collect_member(at, k, ov, filter.child(k)));
        }
    }
}

fn diff_member(
    at: At<'_>,
    field: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    filter: Filter,
) -> Comparison {
    let mut out = Comparison::default();
    let (o, n) = match (old, new) {
        (None, None) => return out,
        (None, Some(n)) => {
            out.changed = collect_member(at, field, n, filter);
            return out;
        }
        (Some(o), None) => {
            out.removed = collect_member(at, field, o, filter);
            return out;
        }
        (Some(o), Some(n)) => (o, n),
    };
    if o == n {
        return out;
    }
    match (node(at, field, o), node(at, field, n)) {
        (Node::Leaf, Node::Leaf) => out.changed.member = true,
        (Node::Map(om), Node::Map(nm)) => diff_map(om, nm, at.member(field), filter, &mut out),
        (Node::Keyed(oi, ok), Node::Keyed(ni, nk)) if ok == nk => {
            // Elements are matched through maps of their keys: a search of the old list for
            // each new element made lists of 100,000s of elements take minutes.
            let items_at = at.items(field);
            let old_ids: Vec<_> = oi.iter().map(|o| identity(o, nk)).collect();
            let mut old_by_id: HashMap<Key<'_>, &Value> = HashMap::with_capacity(oi.len());
            for (o, id) in oi.iter().zip(&old_ids) {
                if let Some(id) = id {
                    old_by_id.entry(Key(id)).or_insert(o);
                }
            }
            let new_ids: Vec<_> = ni.iter().map(|i| identity(i, nk)).collect();
            for (item, id) in ni.iter().zip(&new_ids) {
                let Some(id) = id else { continue };
                let element = key_element(nk, id);
                match old_by_id.get(&Key(id)).copied() {
                    None => out.changed.put(element, collect_item(items_at, item)),
                    Some(before) if before == item => {}
                    Some(before) => {
                        let mut c = Comparison::default();
                        if let (Value::Object(bm), Value::Object(im)) = (before, item) {
                            diff_map(bm, im, items_at, Filter::All, &mut c);
                        }
                        out.changed.put(element.clone(), c.changed);
                        out.removed.put(element, c.removed);
                    }
                }
            }
            let new_ids: HashSet<Key<'_>> = new_ids.iter().flatten().map(|i| Key(i)).collect();
            for (before, id) in oi.iter().zip(&old_ids) {
                let Some(id) = id else { continue };
                if !new_ids.contains(&Key(id)) {
                    out.removed
                        .put(key_element(ok, id), collect_item(items_at, before));
                }
            }
        }
        (Node::Set(oi), Node::Set(ni)) => {
            let (old_set, new_set): (HashSet<Key<'_>>, HashSet<Key<'_>>) =
                (oi.iter().map(Key).collect(), ni.iter().map(Key).collect());
            for v in ni.iter().filter(|v| !old_set.contains(&Key(v))) {
                out.changed.put(value_element(v), FieldSet::leaf());
            }
            for v in oi.iter().filter(|v| !new_set.contains(&Key(v))) {
                out.removed.put(value_element(v), FieldSet::leaf());
            }
        }
        // The shape changed (a map became a list, a leaf a map...): all of the new is
        // changed, and what the old had that the new lacks is removed.
        _ => {
            out.changed = collect_member(at, field, n, filter);
            out.removed = collect_member(at, field, o, filter).difference(&out.changed);
        }
    }
    out
}

/// Removes from `obj` what `drop` names and nobody in `keep` owns (neither the path nor
/// anything under it). A map left empty by the removal goes too.
fn prune(obj: &mut Value, drop: &FieldSet, keep: &FieldSet) {
    let rules = crate::crd::rules_of_object(obj);
    let at = At::root(rules.as_deref().and_then(crate::crd::Rules::schema_in));
    if let Value::Object(m) = obj {
        prune_map(m, at, drop, Some(keep));
    }
}

fn prune_map(m: &mut Map<String, Value>, at: At<'_>, drop: &FieldSet, keep: Option<&FieldSet>) {
    for (element, d) in &drop.children {
        let Some(field) = element.strip_prefix("f:") else {
            continue;
        };
        let kept = keep.and_then(|k| k.children.get(element));
        let Some(v) = m.get_mut(field) else { continue };
        if d.member && kept.is_none() {
            m.remove(field);
            continue;
        }
        let was_filled = matches!(v, Value::Object(o) if !o.is_empty());
        prune_member(at, field, v, d, kept);
        if was_filled && kept.is_none() && matches!(v, Value::Object(o) if o.is_empty()) {
            m.remove(field);
        }
    }
}

fn prune_member(at: At<'_>, field: &str, v: &mut Value, drop: &FieldSet, keep: Option<&FieldSet>) {
    match v {
        Value::Object(m) if !at.atomic_map(field) => prune_map(m, at.member(field), drop, keep),
        Value::Array(items) => match at.strategy(field) {
            ListStrategy::MergeBy(keys) => items.retain_mut(|item| {
                let Some(id) = identity(item, keys) else {
                    return true;
                };
                let element = key_element(keys, &id);
                let Some(d) = drop.children.get(&element) else {
                    return true;
                };
                let kept = keep.and_then(|k| k.children.get(&element));
                if d.member && kept.is_none() {
                    return false;
                }
                if let Value::Object(m) = item {
                    prune_map(m, at.items(field), d, kept);
                }
                true
            }),
            ListStrategy::Set => items.retain(|item| {
                let element = value_element(item);
                let dropped = drop.children.get(&element).is_some_and(|d| d.member);
                let kept = keep.is_some_and(|k| k.children.contains_key(&element));
                !dropped || kept
            }),
            ListStrategy::Replace => {}
        },
        _ => {}
    }
}

/// A managedFields entry's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One managedFields entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<Time>,
    /// "" for the main resource.
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one `who` writes to (Kubernetes' manager identifier:
    /// manager, operation and subresource; we serve one version per kind).
    fn is(&self, who: &Manager, operation: Operation) -> bool {
        self.operation == operation
            && self.manager == who.name
            && self.subresource == who.subresource()
    }

    /// How a conflict names this manager: `"kubectl" using apps/v1` for an updater,
    /// `"kubectl"` for an applier, with the subresource if any.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// A managedFields entry as JSON has it (unknown keys, such as `fieldsType`, are ignored).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntryWire {
    #[serde(default)]
    manager: String,
    operation: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    subresource: String,
    #[serde(default, rename = "fieldsV1")]
    fields_v1: Option<FieldsV1>,
}

/// A whole FieldsV1 tree, read straight from JSON (the root path is never a member).
struct FieldsV1(FieldSet);

impl<'de> serde::Deserialize<'de> for FieldsV1 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FieldsV1, D::Error> {
        let mut set = FieldSetNode::deserialize(d)?.0;
        set.member = false;
        Ok(FieldsV1(set))
    }
}

/// One node of a FieldsV1 tree: an object whose keys are `.` (the path itself) or path
/// elements (`f:`, `k:`, `v:`, `i:`); an empty object is a member leaf.
struct FieldSetNode(FieldSet);

impl<'de> serde::Deserialize<'de> for FieldSetNode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FieldSetNode, D::Error> {
        struct Node;
        impl<'de> serde::de::Visitor<'de> for Node {
            type Value = FieldSetNode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a FieldsV1 object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<FieldSetNode, A::Error> {
                let mut out = FieldSet::default();
                let mut any = false;
                while let Some(k) = map.next_key::<String>()? {
                    any = true;
                    if k == "." {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        out.member = true;
                    } else if ["f:", "k:", "v:", "i:"].iter().any(|p| k.starts_with(p)) {
                        let child = map.next_value::<FieldSetNode>()?.0;
                        out.children.insert(k, child);
                    } else {
                        return Err(serde::de::Error::custom(format!(
                            "{k:?} is not a FieldsV1 path element"
                        )));
                    }
                }
                out.member |= !any;
                Ok(FieldSetNode(out))
            }
        }
        d.deserialize_map(Node)
    }
}

/// A FieldsV1 node written straight to JSON (`.` first, then the path elements in order).
struct FieldsV1Out<'a>(&'a FieldSet);

impl serde::Serialize for FieldsV1Out<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let set = self.0;
        let dot = set.member && !set.children.is_empty();
        let mut m = s.serialize_map(Some(set.children.len() + usize::from(dot)))?;
        if dot {
            m.serialize_entry(".", &Map::new())?;
        }
        for (k, c) in &set.children {
            m.serialize_entry(k, &FieldsV1Out(c))?;
        }
        m.end()
    }
}

/// A managedFields entry written straight to JSON. The keys go in alphabetical order, as a
/// client's copy sent back (parsed into a sorted JSON map) is written again: the same
/// ownership is then always the same text, and objects compare equal when it is.
struct EntryOut<'a>(&'a Entry);

impl serde::Serialize for EntryOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("apiVersion", &e.api_version)?;
        m.serialize_entry("fieldsType", "FieldsV1")?;
        m.serialize_entry("fieldsV1", &FieldsV1Out(&e.fields))?;
        m.serialize_entry("manager", &e.manager)?;
        m.serialize_entry("operation", e.operation.as_str())?;
        if !e.subresource.is_empty() {
            m.serialize_entry("subresource", &e.subresource)?;
        }
        if let Some(t) = e.time {
            m.serialize_entry("time", &t.to_string())?;
        }
        m.end()
    }
}

/// Who writes, as managedFields names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manager {
    pub name: String,
    pub scope: Scope,
}

impl Manager {
    pub fn new(name: impl Into<String>, scope: Scope) -> Manager {
        Manager {
            name: name.into(),
            scope,
        }
    }

    fn subresource(&self) -> &'static str {
        match self.scope {
            Scope::Main => "",
            Scope::Scale => "scale",
            Scope::Status => "status",
            Scope::EphemeralContainers => "ephemeralcontainers",
        }
    }
}

/// The manager Kubernetes names for a request without `fieldManager`: the User-Agent up to
/// its first `/` (kubectl sends `kubectl/v1.32.0 (linux/amd64) kubernetes/...`), at most
/// 128 characters.
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or("");
    prefix.chars().take(128).collect()
}

/// The managers of an object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Managers(pub Vec<Entry>);

impl Managers {
    /// Reads `metadata.managedFields`; `None` when it is malformed.
    pub fn decode(v: Option<&ManagedFields>) -> Option<Managers> {
        let Some(v) = v else {
            return Some(Managers::default());
        };
        let wire: Option<Vec<EntryWire>> = serde_json::from_str(v.json()).ok()?;
        wire.unwrap_or_default()
            .into_iter()
            .map(|e| {
                Some(Entry {
                    manager: e.manager,
                    operation: match e.operation.as_str() {
                        "Apply" => Operation::Apply,
                        "Update" => Operation::Update,
                        _ => return None,
                    },
                    api_version: e.api_version,
                    time: e.time.and_then(|t| Time::parse(&t).ok()),
                    subresource: e.subresource,
                    fields: e.fields_v1.map(|f| f.0).unwrap_or_default(),
                })
            })
            .collect::<Option<Vec<_>>>()
            .map(Managers)
    }

    /// `metadata.managedFields` in Kubernetes' order (operation, time, manager); `None` when
    /// nobody manages anything.
    pub fn encode(&self) -> Option<ManagedFields> {
        if self.0.is_empty() {
            return None;
        }
        let mut entries: Vec<&Entry> = self.0.iter().collect();
        entries.sort_by(|p, q| {
            (
                p.operation,
                p.time,
                &p.manager,
                &p.api_version,
                &p.subresource,
            )
                .cmp(&(
                    q.operation,
                    q.time,
                    &q.manager,
                    &q.api_version,
                    &q.subresource,
                ))
        });
        let entries: Vec<EntryOut<'_>> = entries.into_iter().map(EntryOut).collect();
        let text = serde_json::to_string(&entries).expect("managedFields always serialize");
        Some(ManagedFields::from_json(text).expect("serde_json writes valid JSON"))
    }

    /// Whether the two name the same managers and fields, whatever their times.
    pub fn same_but_times(&self, other: &Managers) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().all(|e| {
                other.0.iter().any(|o| {
                    o.manager == e.manager
                        && o.operation == e.operation
                        && o.subresource == e.subresource
                        && o.api_version == e.api_version
                        && o.fields == e.fields
                })
            })
    }

    /// A non-apply write by `who` changed `old` into `new` (`None` for a create): `who` owns
    /// what changed, and nobody else does any longer.
    pub fn update(
        &mut self,
        old: Option<&Value>,
        new: &Value,
        who: &Manager,
        api_version: &str,
        now: Time,
    ) {
        let c = match old {
            Some(old) => compare(old, new, who.scope),
            None => Comparison {
                changed: field_set(new, who.scope),
                removed: FieldSet::default(),
            },
        };
        if c.changed.is_empty() && c.removed.is_empty() {
            return;
        }
        let touched = {
            let mut t = c.changed.clone();
            t.union(&c.removed);
            t
        };
        for e in self.0.iter_mut() {
            if !e.is(who, Operation::Update) {
                e.fields = e.fields.difference(&touched);
            }
        }
        match self.0.iter_mut().find(|e| e.is(who, Operation::Update)) {
            Some(e) => {
                let mut fields = e.fields.difference(&c.removed);
                fields.union(&c.changed);
                e.fields = fields;
                e.time = Some(now);
                e.api_version = api_version.to_string();
            }
            None => self.0.push(Entry {
                manager: who.name.clone(),
                operation: Operation::Update,
                api_version: api_version.to_string(),
                time: Some(now),
                subresource: who.subresource().to_string(),
                fields: c.changed,
            }),
        }
        self.0.retain(|e| !e.fields.is_empty());
    }

    /// A server-side apply by `who` of `config` onto `live`, already merged into `merged`.
    /// Answers the object with what `who` no longer applies (and nobody else owns) pruned, or
    /// the conflicts when `force` is not set.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        live: &Value,
        config: &Value,
        mut merged: Value,
        who: &Manager,
        api_version: &str,
        force: bool,
        now: Time,
    ) -> Result<Value, Conflicts> {
        let applied = field_set(config, who.scope);
        let last = self
            .0
            .iter()
            .position(|e| e.is(who, Operation::Apply))
            .map(|i| self.0.remove(i).fields);
        self.0.push(Entry {
            manager: who.name.clone(),
            operation: Operation::Apply,
            api_version: api_version.to_string(),
            time: Some(now),
            subresource: who.subresource().to_string(),
            fields: applied,
        });
        if let Some(last) = last.filter(|l| !l.is_empty()) {
            let mut owned = FieldSet::default();
            for e in &self.0 {
                owned.union(&e.fields);
            }
            prune(&mut merged, &last.difference(&owned), &owned);
        }
        let c = compare(live, &merged, who.scope);
        let mut conflicts = Vec::new();
        for e in self.0.iter_mut() {
            if e.is(who, Operation::Apply) {
                continue;
            }
            let taken = e.fields.intersection(&c.changed);
            if !taken.is_empty() {
                conflicts.push((e.describe(), taken));
            }
        }
        if !force && !conflicts.is_empty() {
            return Err(Conflicts(conflicts));
        }
        let mut touched = c.changed;
        touched.union(&c.removed);
        for e in self.0.iter_mut() {
            if !e.is(who, Operation::Apply) {
                e.fields = e.fields.difference(&touched);
            }
        }
        self.0.retain(|e| !e.fields.is_empty());
        Ok(merged)
    }
}

/// Fields an apply would take from other managers: (the manager as a conflict names it, the
/// paths).
#[derive(Debug, PartialEq)]
pub struct Conflicts(pub Vec<(String, FieldSet)>);

impl Conflicts {
    /// Whether every conflicting field is in `allowed`.
    pub fn within(&self, allowed: &FieldSet) -> bool {
        self.0
            .iter()
            .all(|(_, fields)| fields.difference(allowed).is_empty())
    }

    /// kube-apiserver's message: `Apply failed with 1 conflict: conflict with "m" using
    /// apps/v1: .spec.replicas`, or one line per path under each manager when there are more.
    pub fn message(&self) -> String {
        let named: Vec<(&String, Vec<String>)> =
            self.0.iter().map(|(who, f)| (who, f.paths())).collect();
        let total: usize = named.iter().map(|(_, p)| p.len()).sum();
        if total == 1 {
            let (who, paths) = &named[0];
            return format!(
                "Apply failed with 1 conflict: conflict with {who}: {}",
                paths[0]
            );
        }
        let mut sorted: Vec<&(&String, Vec<String>)> = named.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut lines = Vec::new();
        for (who, paths) in sorted {
            lines.push(format!("conflicts with {who}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!("Apply failed with {total} conflicts: {}", lines.join("\n"))
    }

    /// One cause per path (reason `FieldManagerConflict`).
    pub fn causes(&self) -> Vec<api::meta::StatusCause> {
        self.0
            .iter()
            .flat_map(|(who, fields)| {
                fields
                    .paths()
                    .into_iter()
                    .map(move |p| api::meta::StatusCause {
                        reason: "FieldManagerConflict".into(),
                        message: format!("conflict with {who}"),
                        field: p,
                    })
            })
            .collect()
    }
}

/// kubectl's client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager of `kubectl apply --server-side`, which kube-apiserver lets take over from
/// client-side apply.
pub const KUBECTL_APPLY: &str = "kubectl";

/// The fields of the live object's client-side apply annotation: kube-apiserver lets
/// `kubectl apply --server-side` take these from other managers without `--force-conflicts`
/// (what the user applied client-side is theirs to change server-side).
pub fn last_applied_fields(live: &Value, scope: Scope) -> Option<FieldSet> {
    let text = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()?;
    let applied: Value = serde_json::from_str(text).ok()?;
    Some(field_set(&applied, scope))
}

/// Keeps the client-side apply annotation, where the object has one, equal to what
/// `kubectl apply --server-side` applied (as kube-apiserver does, so that a later client-side
/// apply computes its patch from it).
pub fn sync_last_applied(obj: &mut Value, config: &Value) {
    let has = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .is_some();
    if !has {
        return;
    }
    let mut applied = config.clone();
    if let Some(annotations) = applied
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("annotations");
            }
        }
    }
    if let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.insert(LAST_APPLIED.into(), Value::String(applied.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::meta::Opaque;
    use serde_json::json;

    fn fields(v: Value) -> FieldSet {
        serde_json::from_value::<FieldsV1>(v).unwrap().0
    }

    fn as_json(s: &FieldSet) -> Value {
        serde_json::to_value(FieldsV1Out(s)).unwrap()
    }

    #[test]
    fn field_set_of_a_deployment_keys_containers_by_name() {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx",
                                                           "ports": [{"containerPort": 80}]}]}}},
            "status": {"replicas": 1},
        });
        assert_eq!(
            as_json(&field_set(&d, Scope::Main)),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {},
                           "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                                          "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                              ".": {}, "f:image": {}, "f:name": {},
                                              "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}}}}}}},
            })
        );
        assert_eq!(
            as_json(&field_set(&d, Scope::Status)),
            json!({"f:status": {"f:replicas": {}}})
        );
    }

    #[test]
    fn fields_v1_round_trips_and_paths_read_like_kubernetes() {
        let v = json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}}},
                       "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}});
        let s = fields(v.clone());
        assert_eq!(as_json(&s), v);
        assert_eq!(
            s.paths(),
            vec![
                ".metadata.finalizers[=\"a\"]",
                ".spec.containers[name=\"web\"]",
                ".spec.containers[name=\"web\"].image"
            ]
        );
        assert!(serde_json::from_value::<FieldsV1>(json!({"x": {}})).is_err());
    }

    #[test]
    fn compare_finds_changed_and_removed_fields() {
        let old = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "resourceVersion": "5"},
                         "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let new = json!({"metadata": {"labels": {"a": "1", "c": "3"}, "resourceVersion": "6"},
                         "spec": {"containers": [{"name": "a", "image": "z"}]}});
        let c = compare(&old, &new, Scope::Main);
        assert_eq!(
            as_json(&c.changed),
            json!({"f:metadata": {"f:labels": {"f:c": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {"f:image": {}}}}})
        );
        assert_eq!(
            as_json(&c.removed),
            json!({"f:metadata": {"f:labels": {"f:b": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
    }

    /// Long lists were compared by searching the other version for each element: minutes for
    /// lists of 100,000s (a 3 MiB object holds them).
    #[test]
    fn compare_matches_long_lists_in_linear_time() {
        let n = 100_000;
        let started = std::time::Instant::now();
        let finalizers = |from: usize| -> Vec<Value> {
            (from..from + n).map(|i| json!(format!("f{i}"))).collect()
        };
        let containers = |from: usize| -> Vec<Value> {
            (from..from + n)
                .map(|i| json!({"name": format!("c{i}")}))
                .collect()
        };
        let old = json!({"metadata": {"finalizers": finalizers(0)},
                         "spec": {"containers": containers(0)}});
        let new = json!({"metadata": {"finalizers": finalizers(1)},
                         "spec": {"containers": containers(1)}});
        let c = compare(&old, &new, Scope::Main);
        assert_eq!(
            c.changed.paths(),
            vec![
                format!(".metadata.finalizers[=\"f{n}\"]"),
                format!(".spec.containers[name=\"c{n}\"]"),
                format!(".spec.containers[name=\"c{n}\"].name"),
            ]
        );
        assert_eq!(
            c.removed.paths(),
            vec![
                ".metadata.finalizers[=\"f0\"]",
                ".spec.containers[name=\"c0\"]",
                ".spec.containers[name=\"c0\"].name",
            ]
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    fn apply(
        m: &mut Managers,
        live: &Value,
        config: Value,
        who: &str,
        force: bool,
    ) -> Result<Value, Conflicts> {
        let mut merged = live.clone();
        crate::strategic::merge(&mut merged, &config).unwrap();
        m.apply(
            live,
            &config,
            merged,
            &Manager::new(who, Scope::Main),
            "apps/v1",
            force,
            Time(0),
        )
    }

    #[test]
    fn apply_conflicts_with_an_updater_and_force_moves_ownership() {
        let live = json!({"spec": {"replicas": 1, "paused": false}});
        let mut m = Managers::default();
        m.update(
            None,
            &live,
            &Manager::new("kubectl-client-side-apply", Scope::Main),
            "apps/v1",
            Time(0),
        );
        let err = apply(
            &mut m.clone(),
            &live,
            json!({"spec": {"replicas": 3}}),
            "other",
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas"
        );
        assert_eq!(err.causes()[0].field, ".spec.replicas");
        // Setting the same value is no conflict: both own it.
        let mut shared = m.clone();
        apply(
            &mut shared,
            &live,
            json!({"spec": {"replicas": 1}}),
            "other",
            false,
        )
        .unwrap();
        assert_eq!(shared.0.len(), 2);
        let out = apply(
            &mut m,
            &live,
            json!({"spec": {"replicas": 3}}),
            "other",
            true,
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        let csa =
            m.0.iter()
                .find(|e| e.operation == Operation::Update)
                .unwrap();
        assert_eq!(as_json(&csa.fields), json!({"f:spec": {"f:paused": {}}}));
    }

    #[test]
    fn apply_prunes_what_the_applier_dropped_unless_someone_else_owns_it() {
        let mut m = Managers::default();
        let live = json!({});
        let live = apply(
            &mut m,
            &live,
            json!({"metadata": {"labels": {"a": "1", "b": "2", "c": "3"}}}),
            "one",
            false,
        )
        .unwrap();
        // A second applier shares label b.
        let live = apply(
            &mut m,
            &live,
            json!({"metadata": {"labels": {"b": "2"}}}),
            "two",
            false,
        )
        .unwrap();
        let live = apply(
            &mut m,
            &live,
            json!({"metadata": {"labels": {"a": "1"}}}),
            "one",
            false,
        )
        .unwrap();
        assert_eq!(live["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        // Dropping everything removes the emptied maps too, once nobody holds a label.
        let live = apply(&mut m, &live, json!({}), "two", false).unwrap();
        let live = apply(&mut m, &live, json!({}), "one", false).unwrap();
        assert_eq!(live, json!({}));
        assert!(m.0.is_empty());
    }

    #[test]
    fn apply_prunes_list_elements_by_key() {
        let mut m = Managers::default();
        let live = apply(
            &mut m,
            &json!({}),
            json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}),
            "one",
            false,
        )
        .unwrap();
        let live = apply(
            &mut m,
            &live,
            json!({"spec": {"containers": [{"name": "a", "image": "x"}]}}),
            "one",
            false,
        )
        .unwrap();
        assert_eq!(
            live["spec"]["containers"],
            json!([{"name": "a", "image": "x"}])
        );
    }

    #[test]
    fn update_takes_changed_fields_from_others() {
        let mut m = Managers::default();
        let a = Manager::new("a", Scope::Main);
        let b = Manager::new("b", Scope::Main);
        let v1 = json!({"spec": {"x": 1, "y": 1}});
        m.update(None, &v1, &a, "v1", Time(1));
        let v2 = json!({"spec": {"x": 2, "y": 1}});
        m.update(Some(&v1), &v2, &b, "v1", Time(2));
        let enc: Value = serde_json::from_str(m.encode().unwrap().json()).unwrap();
        assert_eq!(enc[0]["manager"], "a");
        assert_eq!(enc[0]["fieldsV1"], json!({"f:spec": {"f:y": {}}}));
        assert_eq!(enc[1]["manager"], "b");
        assert_eq!(enc[1]["fieldsV1"], json!({"f:spec": {"f:x": {}}}));
        assert_eq!(enc[1]["time"], "1970-01-01T00:00:02Z");
        let back = Managers::decode(m.encode().as_ref()).unwrap();
        assert!(back.same_but_times(&m));
    }

    #[test]
    fn managed_fields_keep_their_shape_in_the_store_and_in_json() {
        let mut m = Managers::default();
        let obj =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": [1, 2], "y": 1.5, "z": null}});
        m.update(None, &obj, &Manager::new("a", Scope::Main), "v1", Time(7));
        let stored = m.encode().unwrap();
        let bytes = postcard::to_allocvec(&stored).unwrap();
        let back: ManagedFields = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, stored);
        let tree: Opaque = serde_json::from_str(stored.json()).unwrap();
        // The text's encoding read as an `Opaque` is its tree.
        assert_eq!(postcard::from_bytes::<Opaque>(&bytes).unwrap(), tree);
        let text = serde_json::to_value(&stored).unwrap();
        assert_eq!(text, Value::from(&tree));
        assert_eq!(serde_json::to_string(&stored).unwrap(), stored.json());
        // A client's copy sent back (parsed into a JSON map, then written) is the same text.
        assert_eq!(ManagedFields::from_value(&text), stored);
        // What the store held before managedFields were kept as text: the tree's encoding.
        let legacy = postcard::to_allocvec(&tree).unwrap();
        let read: ManagedFields = postcard::from_bytes(&legacy).unwrap();
        assert_eq!(read, stored);
        assert_eq!(Managers::decode(Some(&read)).unwrap(), m);
    }

    #[test]
    fn malformed_managed_fields_read_as_none() {
        let read = |text: &str| {
            Managers::decode(Some(&ManagedFields::from_json(text.to_string()).unwrap()))
        };
        assert_eq!(read("null"), Some(Managers::default()));
        assert_eq!(read("[]"), Some(Managers::default()));
        for bad in [
            "{}",
            "[1]",
            r#"[{"manager": "a"}]"#,
            r#"[{"manager": "a", "operation": "Replace"}]"#,
            r#"[{"manager": "a", "operation": "Update", "fieldsV1": {"x": {}}}]"#,
            r#"[{"manager": "a", "operation": "Update", "fieldsV1": {"f:x": 1}}]"#,
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
        let ok = read(
            r#"[{"manager": "a", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:x": {}}}, "extra": 1}]"#,
        )
        .unwrap();
        assert_eq!(ok.0[0].fields.paths(), [".spec", ".spec.x"]);
    }

    #[test]
    fn user_agent_prefix_names_the_manager() {
        assert_eq!(
            manager_from_user_agent("kubectl/v1.32.0 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent("skiff"), "skiff");
    }
}
