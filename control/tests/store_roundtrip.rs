//! Every stored kind, with every field of the schema the server publishes populated, is
//! written through the API (create, then the status subresource, then a delete its finalizers
//! hold) and read back equal to what each write answered, before and after a restart of the
//! server, on the embedded store and on the etcd datastore (issue 31, part 5: no stored kind
//! may hold a value the store cannot read back).
//!
//! The objects are generated from the `/openapi/v3` documents, not written by hand: every
//! property of every object, arrays of one or two items, maps of two entries, type-valid
//! scalars and the first value of each enum. Value overrides, each with its reason, make
//! them valid where validation wants particular values: per definition (applied wherever it
//! is generated: a Container's in every pod template) and per kind. Each kind prints how
//! many of its schema's leaf paths the stored object populates, and must populate 85%. The
//! discovery documents say which kinds are stored: every resource with create and get verbs.
//!
//! The servers run as standbys: another identity holds the controllers' Lease, so no
//! controller or scheduler rewrites an object between its write and its reads.

mod common;

use std::collections::BTreeSet;
use std::time::Instant;

use common::etcd::EtcdCluster;
use common::{eventually, TestServer};
use serde_json::{json, Map, Value};

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/skiff-controller-manager";

/// A server whose controllers and scheduler never run: it takes the controllers' Lease on
/// its first start, the test hands the Lease to another holder for an hour, and the server
/// started again waits for that hour.
fn standby_server(extra: &[&str]) -> TestServer {
    let mut args = vec![
        "--leader-elect=true",
        "--leader-elect-lease-duration=1h",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=1s",
    ];
    args.extend_from_slice(extra);
    let mut s = TestServer::start_with(&args);
    eventually(30, "the Lease handed to another holder", || {
        let (code, mut lease) = s.http("GET", LEASE, None);
        if code != 200 {
            return None;
        }
        lease["spec"]["holderIdentity"] = json!("store-roundtrip-test");
        lease["spec"]["leaseDurationSeconds"] = json!(3600);
        let (code, _) = s.json("PUT", LEASE, &lease);
        (code == 200).then_some(())
    });
    s.kill_and_restart();
    s
}

/// A stored kind as discovery lists it.
#[derive(Clone, Debug)]
struct StoredKind {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    has_status: bool,
}

impl StoredKind {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn collection(&self, namespace: &str) -> String {
        let prefix = if self.group.is_empty() {
            "/api/v1".to_string()
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if self.namespaced {
            format!("{prefix}/namespaces/{namespace}/{}", self.plural)
        } else {
            format!("{prefix}/{}", self.plural)
        }
    }

    /// The namespace its object is made in: one per kind, so that one kind's admission
    /// (a LimitRange's defaults, a ResourceQuota) never applies to another's object.
    fn namespace(&self) -> String {
        // The group's first label too: a plural may be served in two groups (events).
        match self.group.split('.').next().filter(|g| !g.is_empty()) {
            Some(g) => format!("rt-{}-{g}", self.plural),
            None => format!("rt-{}", self.plural),
        }
    }
}

/// Every resource of the preferred version of every group that can be created and read
/// (review kinds are create-only and not stored; subresources have a `/`).
fn stored_kinds(s: &TestServer) -> Vec<StoredKind> {
    let mut group_versions = vec![(String::new(), "v1".to_string(), "/api/v1".to_string())];
    let (code, groups) = s.http("GET", "/apis", None);
    assert_eq!(code, 200, "{groups}");
    for g in groups["groups"].as_array().expect("groups") {
        let gv = g["preferredVersion"]["groupVersion"].as_str().expect("gv");
        let version = g["preferredVersion"]["version"].as_str().expect("version");
        let group = g["name"].as_str().expect("name");
        group_versions.push((group.into(), version.into(), format!("/apis/{gv}")));
    }
    let mut kinds = Vec::new();
    for (group, version, path) in group_versions {
        let (code, list) = s.http("GET", &path, None);
        assert_eq!(code, 200, "{path}: {list}");
        let resources = list["resources"].as_array().expect("resources");
        let names: BTreeSet<&str> = resources
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for r in resources {
            let name = r["name"].as_str().expect("name");
            let verbs: Vec<&str> = r["verbs"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if name.contains('/') || !verbs.contains(&"create") || !verbs.contains(&"get") {
                continue;
            }
            // events.k8s.io/v1 Events are core Events under other field names (one storage,
            // converted at the edge): tests/events_v1.rs covers them.
            if group == "events.k8s.io" {
                continue;
            }
            kinds.push(StoredKind {
                group: group.clone(),
                version: version.clone(),
                kind: r["kind"].as_str().expect("kind").into(),
                plural: name.into(),
                namespaced: r["namespaced"] == true,
                has_status: names.contains(format!("{name}/status").as_str()),
            });
        }
    }
    kinds
}

/// The component schemas of every group version's OpenAPI v3 document, merged.
struct Schemas(Map<String, Value>);

/// What a (resolved) schema describes.
enum Node<'a> {
    Struct(&'a Map<String, Value>),
    Map(&'a Value),
    Array(&'a Value),
    /// `x-kubernetes-preserve-unknown-fields`: any JSON.
    Opaque,
    IntOrString,
    Quantity,
    Enum(&'a Vec<Value>),
    Scalar(&'a str, &'a str),
}

fn node(s: &Map<String, Value>) -> Node<'_> {
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return Node::Opaque;
    }
    if s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return Node::IntOrString;
    }
    if let Some(Value::Array(e)) = s.get("enum") {
        return Node::Enum(e);
    }
    if s.contains_key("oneOf") {
        // The one alternative the model publishes: Quantity (a string or a number).
        return Node::Quantity;
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        return Node::Struct(props);
    }
    if let Some(items) = s.get("items") {
        return Node::Array(items);
    }
    if let Some(values) = s.get("additionalProperties") {
        if values.is_object() {
            return Node::Map(values);
        }
    }
    let ty = s.get("type").and_then(Value::as_str).unwrap_or("");
    let format = s.get("format").and_then(Value::as_str).unwrap_or("");
    match ty {
        "" | "object" => Node::Opaque,
        _ => Node::Scalar(ty, format),
    }
}

impl Schemas {
    fn fetch(s: &TestServer) -> Schemas {
        let (code, index) = s.http("GET", "/openapi/v3", None);
        assert_eq!(code, 200, "{index}");
        let mut all = Map::new();
        for doc in index["paths"].as_object().expect("paths").values() {
            let url = doc["serverRelativeURL"].as_str().expect("url");
            let (code, doc) = s.http("GET", url, None);
            assert_eq!(code, 200, "{url}: {doc}");
            for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
                all.insert(name.clone(), schema.clone());
            }
        }
        Schemas(all)
    }

    fn of_kind(&self, k: &StoredKind) -> &Value {
        self.0
            .values()
            .find(|s| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|gvks| {
                        gvks.iter().any(|g| {
                            g["group"] == k.group.as_str()
                                && g["version"] == k.version.as_str()
                                && g["kind"] == k.kind.as_str()
                        })
                    })
            })
            .unwrap_or_else(|| panic!("no published schema for {}", k.kind))
    }

    /// `s` with its `$ref`s followed and its `allOf`s merged into one schema; the names of
    /// the definitions it went through are added to `refs`.
    fn resolve(&self, s: &Value, refs: &mut Vec<String>) -> Map<String, Value> {
        let mut out = Map::new();
        self.merge(s, &mut out, refs);
        out
    }

    fn merge(&self, s: &Value, out: &mut Map<String, Value>, refs: &mut Vec<String>) {
        let Value::Object(m) = s else { return };
        for (k, v) in m {
            if k != "$ref" && k != "allOf" {
                out.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        if let Some(r) = m.get("$ref").and_then(Value::as_str) {
            let name = r.rsplit('/').next().unwrap_or(r).to_string();
            let def = self
                .0
                .get(&name)
                .unwrap_or_else(|| panic!("no schema {name}"));
            refs.push(name);
            self.merge(def, out, refs);
        }
        if let Some(Value::Array(all)) = m.get("allOf") {
            for a in all {
                self.merge(a, out, refs);
            }
        }
    }

    /// Runs `f` on the resolved `s`, unless that would enter a definition already being
    /// walked (a recursive type): `None` then.
    fn enter<T>(
        &self,
        s: &Value,
        stack: &mut Vec<String>,
        f: impl FnOnce(&Self, &Map<String, Value>, &[String], &mut Vec<String>) -> T,
    ) -> Option<T> {
        let mut refs = Vec::new();
        let resolved = self.resolve(s, &mut refs);
        if refs.iter().any(|r| stack.contains(r)) {
            return None;
        }
        let depth = stack.len();
        stack.extend(refs.iter().cloned());
        let out = f(self, &resolved, &refs, stack);
        stack.truncate(depth);
        Some(out)
    }

    /// An instance of `s` with every property populated, and the overrides of the
    /// definitions it is an instance of applied. `name` is the property (or the property of
    /// the map or array) it is for; `i` the item's index in an array.
    fn generate(&self, s: &Value, name: &str, i: usize, stack: &mut Vec<String>) -> Option<Value> {
        self.enter(s, stack, |this, s, refs, stack| {
            let mut v = this.instance(s, name, i, stack)?;
            for r in refs {
                for op in type_overrides(r) {
                    apply(&mut v, &op);
                }
            }
            Some(v)
        })
        .flatten()
    }

    fn instance(
        &self,
        s: &Map<String, Value>,
        name: &str,
        i: usize,
        stack: &mut Vec<String>,
    ) -> Option<Value> {
        match node(s) {
            Node::Struct(props) => {
                let mut out = Map::new();
                for (k, sub) in props {
                    if let Some(v) = self.generate(sub, k, 0, stack) {
                        out.insert(k.clone(), v);
                    }
                }
                Some(Value::Object(out))
            }
            Node::Map(values) => {
                let mut out = Map::new();
                for (j, key) in ["key-a", "key-b"].into_iter().enumerate() {
                    if let Some(v) = self.generate(values, name, j, stack) {
                        out.insert(key.into(), v);
                    }
                }
                Some(Value::Object(out))
            }
            Node::Array(items) => {
                let mut probe = Vec::new();
                let objects = matches!(
                    node(&self.resolve(items, &mut probe)),
                    Node::Struct(_) | Node::Map(_) | Node::Opaque
                );
                // Objects: one item covers every field (and keeps list-map keys unique);
                // scalars: two, to see their order kept.
                let n = if objects { 1 } else { 2 };
                let out: Vec<Value> = (0..n)
                    .filter_map(|j| self.generate(items, name, j, stack))
                    .collect();
                Some(Value::Array(out))
            }
            Node::Opaque => Some(json!({
                "text": format!("{name}-opaque"), "count": 3, "negative": -7, "ratio": 0.25,
                "on": true, "list": ["a", 1, false], "nested": {"deep": {"k": "v"}, "empty": {}},
            })),
            Node::IntOrString => Some(if name.to_ascii_lowercase().contains("port") {
                json!(8080 + i)
            } else {
                json!("25%")
            }),
            Node::Quantity => Some(json!(["2Gi", "500m"][i % 2])),
            Node::Enum(values) => values.get(i % values.len()).cloned(),
            Node::Scalar(ty, format) => Some(match (ty, format) {
                ("string", "date-time") => json!("2024-05-06T07:08:09Z"),
                ("string", "byte") => json!(["cm91bmR0cmlw", "c2Vjb25k"][i % 2]),
                ("string", _) => {
                    let base: String = name
                        .chars()
                        .filter(char::is_ascii_alphanumeric)
                        .collect::<String>()
                        .to_ascii_lowercase();
                    let base = if base.is_empty() {
                        "value".into()
                    } else {
                        base
                    };
                    json!(if i == 0 {
                        base
                    } else {
                        format!("{base}{}", i + 1)
                    })
                }
                ("integer", _) => json!(1 + i),
                ("number", _) => json!(0.5 + i as f64),
                ("boolean", _) => json!(i == 0),
                _ => panic!("unknown type {ty} of {name}"),
            }),
        }
    }

    /// Every leaf path of `s` (`spec.containers[].ports[].name`, maps as `{}`).
    fn leaves(&self, s: &Value, path: &str, stack: &mut Vec<String>, out: &mut BTreeSet<String>) {
        self.enter(s, stack, |this, s, _, stack| match node(s) {
            Node::Struct(props) if !props.is_empty() => {
                for (k, sub) in props {
                    this.leaves(sub, &join(path, k), stack, out);
                }
            }
            Node::Map(values) => this.leaves(values, &format!("{path}{{}}"), stack, out),
            Node::Array(items) => this.leaves(items, &format!("{path}[]"), stack, out),
            _ => {
                out.insert(path.to_string());
            }
        });
    }

    /// The leaf paths of `s` that `v` populates.
    fn populated(
        &self,
        s: &Value,
        v: &Value,
        path: &str,
        stack: &mut Vec<String>,
        out: &mut BTreeSet<String>,
    ) {
        if v.is_null() {
            return;
        }
        self.enter(s, stack, |this, s, _, stack| match node(s) {
            Node::Struct(props) if !props.is_empty() => {
                for (k, sub) in props {
                    if let Some(x) = v.get(k) {
                        this.populated(sub, x, &join(path, k), stack, out);
                    }
                }
            }
            Node::Map(values) => {
                for x in v.as_object().into_iter().flat_map(|m| m.values()) {
                    this.populated(values, x, &format!("{path}{{}}"), stack, out);
                }
            }
            Node::Array(items) => {
                for x in v.as_array().into_iter().flatten() {
                    this.populated(items, x, &format!("{path}[]"), stack, out);
                }
            }
            _ => {
                out.insert(path.to_string());
            }
        });
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A change to a generated object, at a JSON pointer.
enum Op {
    /// Sets (or adds) the value.
    Set(String, Value),
    /// Removes the field (one of mutually exclusive alternatives, say).
    Remove(String),
    /// Replaces item `index` of a generated list with one copy per property of the object at
    /// `within` in it (`""`: the item itself) other than `keep`, each copy holding `keep` and
    /// that one property there: for one-of items (a pod's volumes hold one source each, an
    /// env var one `valueFrom` source), so that every alternative is still populated. The
    /// copies' `name`s get their index, to stay unique.
    Split {
        list: String,
        index: usize,
        within: &'static str,
        keep: &'static [&'static str],
    },
    /// Runs a function on the value there.
    Fn(String, fn(&mut Value)),
}

fn set(pointer: impl Into<String>, v: Value) -> Op {
    Op::Set(pointer.into(), v)
}

fn remove(pointer: impl Into<String>) -> Op {
    Op::Remove(pointer.into())
}

fn split(list: impl Into<String>, within: &'static str, keep: &'static [&'static str]) -> Op {
    Op::Split {
        list: list.into(),
        index: 0,
        within,
        keep,
    }
}

fn parent_and_key<'a>(obj: &'a mut Value, pointer: &str) -> (&'a mut Value, String) {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    let key = key.replace("~1", "/").replace("~0", "~");
    let parent = obj
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("override {pointer}: no {parent} in the generated object"));
    (parent, key)
}

fn apply(obj: &mut Value, op: &Op) {
    match op {
        Op::Set(pointer, v) => {
            let (parent, key) = parent_and_key(obj, pointer);
            match parent {
                Value::Object(m) => {
                    m.insert(key, v.clone());
                }
                Value::Array(a) => {
                    let i: usize = key.parse().expect("index");
                    if i == a.len() {
                        a.push(v.clone());
                    } else {
                        a[i] = v.clone();
                    }
                }
                _ => panic!("override {pointer}: parent is a scalar"),
            }
        }
        Op::Remove(pointer) => {
            let (parent, key) = parent_and_key(obj, pointer);
            let removed = match parent {
                Value::Object(m) => m.remove(&key),
                Value::Array(a) => Some(a.remove(key.parse().expect("index"))),
                _ => None,
            };
            assert!(removed.is_some(), "override {pointer}: nothing to remove");
        }
        Op::Split {
            list,
            index,
            within,
            keep,
        } => {
            let items = obj
                .pointer_mut(list)
                .and_then(Value::as_array_mut)
                .unwrap_or_else(|| panic!("override {list}: not a generated list"));
            let item = items[*index].clone();
            let alternatives = item
                .pointer(within)
                .and_then(Value::as_object)
                .unwrap_or_else(|| panic!("override {list}: no object at {within}"))
                .clone();
            let copies: Vec<Value> = alternatives
                .iter()
                .filter(|(k, _)| !keep.contains(&k.as_str()))
                .enumerate()
                .map(|(i, (k, v))| {
                    let mut one: Map<String, Value> = alternatives
                        .iter()
                        .filter(|(k, _)| keep.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    one.insert(k.clone(), v.clone());
                    let mut copy = item.clone();
                    *copy.pointer_mut(within).expect("within") = Value::Object(one);
                    if let Some(Value::String(name)) = copy.get_mut("name") {
                        name.push_str(&i.to_string());
                    }
                    copy
                })
                .collect();
            items.splice(*index..*index + 1, copies);
        }
        Op::Fn(pointer, f) => f(obj
            .pointer_mut(pointer)
            .unwrap_or_else(|| panic!("override {pointer}: not in the generated object"))),
    }
}

/// Overrides every kind gets: its metadata.
fn metadata_overrides(k: &StoredKind, owner_uid: &str) -> Vec<Op> {
    let mut ops = vec![
        // One object per kind, under a name and namespace the test knows.
        set(
            "/metadata/name",
            json!(format!("rt-{}", k.kind.to_ascii_lowercase())),
        ),
        // A create carries no resourceVersion (Kubernetes refuses one).
        remove("/metadata/resourceVersion"),
        // Finalizers are qualified names; these hold the object through the delete below.
        set(
            "/metadata/finalizers",
            json!(["example.com/roundtrip-a", "example.com/roundtrip-b"]),
        ),
        // The owner must exist, or the garbage collector (on a leading server) would delete
        // the object: a ClusterRole, since a cluster-scoped owner may own anything.
        set(
            "/metadata/ownerReferences",
            json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "name": "rt-owner", "uid": owner_uid, "controller": true,
                    "blockOwnerDeletion": true}]),
        ),
    ];
    if k.namespaced {
        ops.push(set("/metadata/namespace", json!(k.namespace())));
    } else {
        // Cluster-scoped: no namespace.
        ops.push(remove("/metadata/namespace"));
    }
    ops
}

/// Value overrides of a definition, wherever it is generated (pointers relative to it):
/// what validation wants of a type in every kind that holds it.
fn type_overrides(definition: &str) -> Vec<Op> {
    let name = definition.rsplit('.').next().unwrap_or(definition);
    match name {
        // Selector operators: the generated name of the field is no operator.
        "LabelSelectorRequirement" | "NodeSelectorRequirement" => {
            vec![set("/operator", json!("In"))]
        }
        // A node field selector names metadata.name with exactly one value.
        "NodeSelectorTerm" => vec![
            set("/matchFields/0/key", json!("metadata.name")),
            remove("/matchFields/0/values/1"),
        ],
        "PodSpec" => vec![
            // One source per volume: a volume per source.
            split("/volumes", "", &["name"]),
            set("/restartPolicy", json!("Always")),
            set("/dnsPolicy", json!("ClusterFirst")),
            // ServiceAccount admission: the pod's account must exist; `default` may be
            // missing (no controller made it yet) and is admitted.
            set("/serviceAccountName", json!("default")),
            set("/serviceAccount", json!("default")),
            // Priority admission: a class that exists, and its value.
            set("/priorityClassName", json!("system-cluster-critical")),
            set("/priority", json!(2000000000)),
            set("/preemptionPolicy", json!("PreemptLowerPriority")),
            // A sidecar (restartPolicy Always) is the one init container that may have
            // probes and lifecycle hooks; each probe has one handler.
            set("/initContainers/0/restartPolicy", json!("Always")),
            // Container names are unique across both lists.
            set("/initContainers/0/name", json!("init")),
            remove("/containers/0/restartPolicy"),
        ]
        .into_iter()
        .chain([
            Op::Fn("/containers".into(), one_handler_per_probe),
            Op::Fn("/initContainers".into(), one_handler_per_probe),
        ])
        .collect(),
        "Container" => vec![
            set("/imagePullPolicy", json!("IfNotPresent")),
            set("/terminationMessagePolicy", json!("File")),
            // An env var has a value or one source: a var per alternative.
            split("/env", "", &["name"]),
            Op::Split {
                list: "/env".into(),
                index: 1,
                within: "/valueFrom",
                keep: &[],
            },
            // An envFrom has one of configMapRef and secretRef.
            split("/envFrom", "", &["prefix"]),
        ],
        // Mounts name a volume of the pod: the first one split above.
        "VolumeMount" => vec![
            set("/name", json!("name0")),
            set("/mountPropagation", json!("None")),
        ],
        "ContainerPort" => vec![
            set("/protocol", json!("TCP")),
            set("/hostIP", json!("127.0.0.1")),
        ],
        // An ephemeral container has no ports, probes, lifecycle, resources, restart policy
        // or subPath mounts; its name is its own and its target the pod's container.
        "EphemeralContainer" => vec![
            set("/name", json!("debugger")),
            set("/targetContainerName", json!("name")),
            set("/imagePullPolicy", json!("IfNotPresent")),
            set("/terminationMessagePolicy", json!("File")),
            remove("/ports"),
            remove("/resources"),
            remove("/resizePolicy"),
            remove("/restartPolicy"),
            remove("/livenessProbe"),
            remove("/readinessProbe"),
            remove("/startupProbe"),
            remove("/lifecycle"),
            remove("/volumeMounts/0/subPath"),
            remove("/volumeMounts/0/subPathExpr"),
            split("/env", "", &["name"]),
            Op::Split {
                list: "/env".into(),
                index: 1,
                within: "/valueFrom",
                keep: &[],
            },
            split("/envFrom", "", &["prefix"]),
        ],
        "HTTPGetAction" => vec![set("/scheme", json!("HTTP"))],
        // A numeric port may have an end port at or above it.
        "NetworkPolicyPort" => vec![
            set("/protocol", json!("TCP")),
            set("/port", json!(8080)),
            set("/endPort", json!(8090)),
        ],
        "SecurityContext" => vec![set("/procMount", json!("Default"))],
        "HostPathVolumeSource" => vec![set("/type", json!("DirectoryOrCreate"))],
        // tolerationSeconds is for NoExecute only.
        "Taint" => vec![set("/effect", json!("NoExecute"))],
        "Toleration" => vec![
            set("/operator", json!("Equal")),
            set("/effect", json!("NoExecute")),
        ],
        "HostAlias" => vec![set("/ip", json!("127.0.0.1"))],
        "PodDNSConfig" => vec![set("/nameservers", json!(["127.0.0.53", "127.0.0.54"]))],
        "PodOS" => vec![set("/name", json!("linux"))],
        // A claim (or a claim template) asks for storage, in modes that exist.
        "PersistentVolumeClaimSpec" => vec![
            set("/accessModes", json!(["ReadWriteOnce", "ReadOnlyMany"])),
            set("/volumeMode", json!("Filesystem")),
            set("/resources/requests", json!({"storage": "2Gi"})),
            set("/resources/limits", json!({"storage": "2Gi"})),
        ],
        _ => Vec::new(),
    }
}

/// A probe has one handler: the generated container becomes four, whose probes (liveness,
/// readiness, startup) each keep another handler, so that every handler of every probe is
/// populated. Their names and ports are made unique.
fn one_handler_per_probe(containers: &mut Value) {
    let handlers = ["exec", "httpGet", "tcpSocket", "grpc"];
    let list = containers.as_array_mut().expect("containers");
    let first = list[0].clone();
    *list = (0..handlers.len())
        .map(|j| {
            let mut c = first.clone();
            if j > 0 {
                let name = format!("{}{j}", c["name"].as_str().expect("name"));
                c["name"] = json!(name);
            }
            for port in c["ports"].as_array_mut().into_iter().flatten() {
                // hostPort is containerPort on the host network, and unique in the pod.
                let n = port["containerPort"].as_i64().expect("port") + j as i64;
                port["containerPort"] = json!(n);
                port["hostPort"] = json!(n);
            }
            for (p, probe) in ["livenessProbe", "readinessProbe", "startupProbe"]
                .into_iter()
                .enumerate()
            {
                let kept = handlers[(j + p) % handlers.len()];
                let probe = c[probe].as_object_mut().expect("probe");
                probe.retain(|k, _| k == kept || !handlers.contains(&k.as_str()));
            }
            c
        })
        .collect();
}

/// Labels that the generated selector (`matchLabels` of two entries, a `key In (values,
/// values2)` expression) selects.
fn selected_labels() -> Value {
    json!({"key-a": "matchlabels", "key-b": "matchlabels2", "key": "values"})
}

/// The overrides of a workload's pod template at `t`: its labels match the selector; a
/// controller that keeps pods running refuses `activeDeadlineSeconds` in the template.
fn template(t: &str, keeps_running: bool) -> Vec<Op> {
    let mut ops = vec![set(format!("{t}/metadata/labels"), selected_labels())];
    if keeps_running {
        ops.push(remove(format!("{t}/spec/activeDeadlineSeconds")));
    }
    ops
}

/// A Job spec's overrides at `j` (a Job's or a CronJob's template's).
fn job_spec(j: &str) -> Vec<Op> {
    let mut ops = template(&format!("{j}/template"), false);
    ops.extend([
        // The pod failure policy needs restartPolicy Never.
        set(format!("{j}/template/spec/restartPolicy"), json!("Never")),
        // Indexed: what backoffLimitPerIndex, maxFailedIndexes and successPolicy need.
        set(format!("{j}/completionMode"), json!("Indexed")),
        set(format!("{j}/completions"), json!(2)),
        set(format!("{j}/parallelism"), json!(2)),
        set(format!("{j}/podReplacementPolicy"), json!("Failed")),
        // A rule matches exit codes or pod conditions, not both: a rule for each.
        split(format!("{j}/podFailurePolicy/rules"), "", &["action"]),
        set(
            format!("{j}/podFailurePolicy/rules/0/action"),
            json!("FailJob"),
        ),
        set(
            format!("{j}/podFailurePolicy/rules/1/action"),
            json!("Ignore"),
        ),
        set(
            format!("{j}/podFailurePolicy/rules/0/onExitCodes/operator"),
            json!("In"),
        ),
        // The container the rule watches is the template's.
        set(
            format!("{j}/podFailurePolicy/rules/0/onExitCodes/containerName"),
            json!("name"),
        ),
        set(
            format!("{j}/podFailurePolicy/rules/1/onPodConditions/0/status"),
            json!("True"),
        ),
        // Indexes of the two completions.
        set(
            format!("{j}/successPolicy/rules/0/succeededIndexes"),
            json!("0-1"),
        ),
    ]);
    ops
}

/// A CertificateSigningRequest's `spec.request`: a real PKCS#10 request, base64 of its PEM.
fn csr_request() -> Value {
    use base64::Engine;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "roundtrip");
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    json!(base64::engine::general_purpose::STANDARD.encode(pem))
}

/// Value overrides per kind (pointers from the object's root), where validation wants
/// particular values. Values validation checks against a fixed set are set to one of them.
fn kind_overrides(kind: &str) -> Vec<Op> {
    match kind {
        "Namespace" => vec![set("/status/phase", json!("Active"))],
        // A pod naming a RuntimeClass that does not exist is refused (RuntimeClass
        // admission), and the generated classes are written after the pods; workload
        // templates keep the field.
        // The overhead comes from the class alone (a pod that sets one without a class is
        // refused).
        "Pod" => vec![remove("/spec/runtimeClassName"), remove("/spec/overhead")],
        "Node" => vec![
            // CIDRs, the first of podCIDRs being podCIDR, one per family.
            set("/spec/podCIDR", json!("10.42.7.0/24")),
            set("/spec/podCIDRs", json!(["10.42.7.0/24", "fd00:42:7::/64"])),
        ],
        "Service" => vec![
            // LoadBalancer: the type every other field (node ports, the load balancer's
            // class, source ranges, health check port) is allowed with.
            set("/spec/type", json!("LoadBalancer")),
            set("/spec/ports/0/protocol", json!("TCP")),
            set("/spec/ports/0/nodePort", json!(30080)),
            set("/spec/healthCheckNodePort", json!(30081)),
            set("/spec/sessionAffinity", json!("ClientIP")),
            // Addresses of the service CIDR (10.43.0.0/16), one family.
            set("/spec/clusterIP", json!("10.43.7.7")),
            set("/spec/clusterIPs", json!(["10.43.7.7"])),
            set("/spec/ipFamilies", json!(["IPv4"])),
            set("/spec/ipFamilyPolicy", json!("SingleStack")),
            set("/spec/externalIPs", json!(["192.0.2.1", "192.0.2.2"])),
            set(
                "/spec/loadBalancerSourceRanges",
                json!(["192.0.2.0/24", "198.51.100.0/24"]),
            ),
            set("/spec/loadBalancerIP", json!("192.0.2.3")),
            // healthCheckNodePort needs Local.
            set("/spec/externalTrafficPolicy", json!("Local")),
            set("/spec/internalTrafficPolicy", json!("Cluster")),
            set("/status/loadBalancer/ingress/0/ip", json!("192.0.2.4")),
        ],
        "Endpoints" => vec![
            set("/subsets/0/addresses/0/ip", json!("192.0.2.10")),
            set("/subsets/0/notReadyAddresses/0/ip", json!("192.0.2.11")),
            set("/subsets/0/ports/0/protocol", json!("TCP")),
        ],
        // A key is in data or in binaryData, not both.
        "ConfigMap" => vec![set(
            "/binaryData",
            json!({"key-c": "cm91bmR0cmlw", "key-d": "c2Vjb25k"}),
        )],
        "Event" => vec![set("/type", json!("Normal"))],
        "ReplicationController" => {
            let mut ops = template("/spec/template", true);
            // Its selector is a map: the template's labels hold it.
            ops.push(set(
                "/spec/template/metadata/labels",
                json!({"key-a": "selector", "key-b": "selector2"}),
            ));
            ops
        }
        "ResourceQuota" => vec![
            set("/spec/scopes", json!(["NotTerminating", "NotBestEffort"])),
            set(
                "/spec/scopeSelector/matchExpressions/0/scopeName",
                json!("PriorityClass"),
            ),
            set(
                "/spec/scopeSelector/matchExpressions/0/operator",
                json!("In"),
            ),
        ],
        "LimitRange" => vec![set("/spec/limits/0/type", json!("Container"))],
        "PersistentVolume" => vec![
            set(
                "/spec/accessModes",
                json!(["ReadWriteOnce", "ReadOnlyMany"]),
            ),
            set("/spec/volumeMode", json!("Filesystem")),
            set("/spec/capacity", json!({"storage": "2Gi"})),
            set("/spec/persistentVolumeReclaimPolicy", json!("Retain")),
            // One volume source: local, the one with the most fields.
            remove("/spec/hostPath"),
            remove("/spec/nfs"),
            remove("/spec/csi"),
        ],
        "Deployment" => {
            let mut ops = template("/spec/template", true);
            ops.extend([
                set("/spec/strategy/type", json!("RollingUpdate")),
                // Past minReadySeconds.
                set("/spec/progressDeadlineSeconds", json!(600)),
            ]);
            ops
        }
        "ReplicaSet" => template("/spec/template", true),
        "DaemonSet" => {
            let mut ops = template("/spec/template", true);
            ops.push(set("/spec/updateStrategy/type", json!("RollingUpdate")));
            ops
        }
        "StatefulSet" => {
            let mut ops = template("/spec/template", true);
            ops.extend([
                set("/spec/podManagementPolicy", json!("Parallel")),
                set("/spec/updateStrategy/type", json!("RollingUpdate")),
                set(
                    "/spec/persistentVolumeClaimRetentionPolicy/whenDeleted",
                    json!("Delete"),
                ),
                set(
                    "/spec/persistentVolumeClaimRetentionPolicy/whenScaled",
                    json!("Retain"),
                ),
            ]);
            ops
        }
        "Ingress" => vec![
            // A backend is a service or a resource: the default backend a service, and a
            // path for each.
            remove("/spec/defaultBackend/resource"),
            // A service port is a number or a name: the default backend's a number, the
            // path's a name.
            remove("/spec/defaultBackend/service/port/name"),
            Op::Split {
                list: "/spec/rules/0/http/paths".into(),
                index: 0,
                within: "/backend",
                keep: &[],
            },
            set("/spec/rules/0/http/paths/0/pathType", json!("Prefix")),
            set("/spec/rules/0/http/paths/0/path", json!("/a")),
            set("/spec/rules/0/http/paths/1/pathType", json!("Exact")),
            set("/spec/rules/0/http/paths/1/path", json!("/b")),
            remove("/spec/rules/0/http/paths/1/backend/service/port/number"),
        ],
        "IngressClass" => vec![
            set("/spec/controller", json!("example.com/ingress-controller")),
            set("/spec/parameters/scope", json!("Namespace")),
        ],
        // A namespaced rule is about resources, not non-resource URLs.
        "Role" => vec![remove("/rules/0/nonResourceURLs")],
        "ClusterRole" => vec![
            // A rule is about resources or non-resource URLs: one rule of each.
            Op::Fn("/rules".into(), |rules| {
                let list = rules.as_array_mut().expect("rules");
                let mut urls = list[0].clone();
                list[0]
                    .as_object_mut()
                    .expect("rule")
                    .remove("nonResourceURLs");
                let urls_rule = urls.as_object_mut().expect("rule");
                for k in ["apiGroups", "resources", "resourceNames"] {
                    urls_rule.remove(k);
                }
                list.push(urls);
            }),
            set("/rules/1/nonResourceURLs", json!(["/healthz", "/version"])),
        ],
        "RoleBinding" | "ClusterRoleBinding" => vec![
            set("/roleRef/apiGroup", json!("rbac.authorization.k8s.io")),
            set("/roleRef/kind", json!("ClusterRole")),
            set("/subjects/0/kind", json!("User")),
            set("/subjects/0/apiGroup", json!("rbac.authorization.k8s.io")),
        ],
        "CertificateSigningRequest" => vec![
            set("/spec/request", csr_request()),
            set("/spec/expirationSeconds", json!(3600)),
        ],
        "Job" => job_spec("/spec"),
        "CronJob" => {
            let mut ops = job_spec("/spec/jobTemplate/spec");
            ops.extend([
                set("/spec/schedule", json!("*/5 * * * *")),
                set("/spec/timeZone", json!("Etc/UTC")),
                set("/spec/concurrencyPolicy", json!("Forbid")),
            ]);
            ops
        }
        // minAvailable or maxUnavailable, not both.
        "PodDisruptionBudget" => vec![
            remove("/spec/maxUnavailable"),
            set("/spec/unhealthyPodEvictionPolicy", json!("IfHealthyBudget")),
        ],
        "PriorityClass" => vec![set("/preemptionPolicy", json!("PreemptLowerPriority"))],
        "StorageClass" => vec![
            set("/reclaimPolicy", json!("Delete")),
            set("/volumeBindingMode", json!("Immediate")),
        ],
        "HorizontalPodAutoscaler" => vec![
            // One source per metric: a metric per source, typed by it.
            split("/spec/metrics", "", &["type"]),
            Op::Fn("/spec/metrics".into(), |metrics| {
                for m in metrics.as_array_mut().expect("metrics") {
                    let m = m.as_object_mut().expect("metric");
                    let source = m.keys().find(|k| *k != "type").expect("source").clone();
                    let mut ty = source.clone();
                    ty[..1].make_ascii_uppercase();
                    m.insert("type".into(), json!(ty));
                    // A target is a value, an average value or an average utilization, as
                    // its type says: each source gets one the source allows, all three
                    // covered.
                    let (target_type, kept) = match source.as_str() {
                        "containerResource" => ("Utilization", "averageUtilization"),
                        "external" | "object" => ("Value", "value"),
                        _ => ("AverageValue", "averageValue"),
                    };
                    let target = m[&source]["target"].as_object_mut().expect("target");
                    target.retain(|k, _| k == kept);
                    target.insert("type".into(), json!(target_type));
                }
            }),
            set("/spec/behavior/scaleUp/selectPolicy", json!("Max")),
            set("/spec/behavior/scaleUp/policies/0/type", json!("Pods")),
            set("/spec/behavior/scaleDown/selectPolicy", json!("Max")),
            set("/spec/behavior/scaleDown/policies/0/type", json!("Pods")),
        ],
        "Lease" => vec![set("/spec/strategy", json!("OldestEmulationVersion"))],
        "RuntimeClass" => vec![
            set("/handler", json!("runc")),
            set("/scheduling/tolerations/0/operator", json!("Exists")),
            set("/scheduling/tolerations/0/value", json!("")),
            set("/scheduling/tolerations/0/effect", json!("NoExecute")),
        ],
        // A peer with an ipBlock has nothing else: the generated peer keeps its selectors
        // and an ipBlock peer (with excepts inside its CIDR) follows it.
        "NetworkPolicy" => vec![
            Op::Fn("/spec/ingress/0/from".into(), selectors_then_ip_block),
            Op::Fn("/spec/egress/0/to".into(), selectors_then_ip_block),
            set("/spec/policyTypes", json!(["Ingress", "Egress"])),
        ],
        // A webhook of every field, each valid; a validating one is never reinvoked.
        "MutatingWebhookConfiguration" => vec![set("/webhooks/0", webhook(true))],
        "ValidatingWebhookConfiguration" => vec![set("/webhooks/0", webhook(false))],
        // Every field, each valid (expressions that compile).
        "ValidatingAdmissionPolicy" => vec![
            set("/status/conditions/0/status", json!("True")),
            set(
                "/spec",
                json!({
                    "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                    "matchConstraints": match_resources(),
                    "validations": [{"expression": "object.spec.replicas <= int(params.data.max)",
                                     "message": "too many", "reason": "Forbidden",
                                     "messageExpression": "'at most ' + params.data.max"}],
                    "failurePolicy": "Ignore",
                    "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}],
                    "matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels)"}],
                    "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
                }),
            ),
        ],
        "ValidatingAdmissionPolicyBinding" => vec![set(
            "/spec",
            json!({
                "policyName": "limit.example.com",
                "paramRef": {"namespace": "default",
                             "selector": {"matchLabels": {"limits": "yes"},
                                          "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]},
                             "parameterNotFoundAction": "Allow"},
                "matchResources": match_resources(),
                "validationActions": ["Warn", "Audit"],
            }),
        )],
        "CustomResourceDefinition" => vec![
            // Named `plural.group`, a domain group, a structural schema, one storage version.
            set("/metadata/name", json!("rts.roundtrip.example.com")),
            set("/spec/group", json!("roundtrip.example.com")),
            set(
                "/spec/names",
                json!({"plural": "rts", "singular": "rt", "kind": "Rt", "listKind": "RtList",
                       "shortNames": ["rtx"], "categories": ["all"]}),
            ),
            set("/spec/scope", json!("Namespaced")),
            set("/spec/preserveUnknownFields", json!(false)),
            set("/spec/conversion", json!({"strategy": "None"})),
            set("/spec/versions/0/name", json!("v1")),
            set("/spec/versions/0/served", json!(true)),
            set("/spec/versions/0/storage", json!(true)),
            set(
                "/spec/versions/0/schema/openAPIV3Schema",
                json!({"type": "object", "properties": {"spec": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}),
            ),
            set("/spec/versions/0/subresources/status", json!({})),
            set(
                "/spec/versions/0/subresources/scale",
                json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                       "labelSelectorPath": ".status.selector"}),
            ),
            set(
                "/spec/versions/0/additionalPrinterColumns/0/type",
                json!("string"),
            ),
            set(
                "/spec/versions/0/additionalPrinterColumns/0/jsonPath",
                json!(".spec.x"),
            ),
            set(
                "/spec/versions/0/selectableFields/0/jsonPath",
                json!(".spec.x"),
            ),
        ],
        // Named `version.group`; served by a Service (a caBundle, so no
        // insecureSkipTLSVerify), within the priorities' bounds; a condition of kube's
        // statuses.
        "APIService" => vec![
            set("/metadata/name", json!("v1alpha1.roundtrip.example.com")),
            set("/spec/group", json!("roundtrip.example.com")),
            set("/spec/version", json!("v1alpha1")),
            set("/spec/groupPriorityMinimum", json!(1500)),
            set("/spec/versionPriority", json!(20)),
            set("/spec/service/port", json!(8443)),
            remove("/spec/insecureSkipTLSVerify"),
            set(
                "/status/conditions",
                json!([{"type": "Available", "status": "False",
                        "lastTransitionTime": "2026-01-02T03:04:05Z",
                        "reason": "FailedDiscoveryCheck", "message": "no answer"}]),
            ),
        ],
        // Every field, each valid: a subject of each kind, resource and non-resource rules;
        // the Dangling condition the server would write for the level it names (none
        // exists), so that a server that writes it finds nothing to change.
        "FlowSchema" => vec![
            set(
                "/spec",
                json!({
                    "priorityLevelConfiguration": {"name": "rt-level"},
                    "matchingPrecedence": 500,
                    "distinguisherMethod": {"type": "ByNamespace"},
                    "rules": [{
                        "subjects": [
                            {"kind": "User", "user": {"name": "alice"}},
                            {"kind": "Group", "group": {"name": "devs"}},
                            {"kind": "ServiceAccount", "serviceAccount": {"namespace": "default", "name": "robot"}},
                        ],
                        "resourceRules": [{"verbs": ["get", "list"], "apiGroups": ["", "apps"],
                                           "resources": ["pods", "deployments/scale"],
                                           "clusterScope": true, "namespaces": ["default", "kube-system"]}],
                        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/metrics/*"]}],
                    }],
                }),
            ),
            set(
                "/status/conditions",
                json!([{"type": "Dangling", "status": "True",
                        "lastTransitionTime": "2026-01-02T03:04:05Z", "reason": "NotFound",
                        "message": "This FlowSchema references the PriorityLevelConfiguration object named \"rt-level\" but there is no such object"}]),
            ),
        ],
        // A queuing Limited level (the exempt section is for the `exempt` level alone).
        "PriorityLevelConfiguration" => vec![
            set(
                "/spec",
                json!({"type": "Limited",
                       "limited": {"nominalConcurrencyShares": 10, "lendablePercent": 20,
                                   "borrowingLimitPercent": 30,
                                   "limitResponse": {"type": "Queue",
                                                     "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 10}}}}),
            ),
            set("/status/conditions/0/status", json!("True")),
        ],
        "EndpointSlice" => vec![
            set("/addressType", json!("IPv4")),
            set("/endpoints/0/addresses", json!(["10.42.0.9"])),
            set("/ports/0/protocol", json!("UDP")),
        ],
        _ => Vec::new(),
    }
}

/// A policy's or a binding's match resources with every field.
fn match_resources() -> Value {
    let rule = |names: &[&str]| {
        json!({"resourceNames": names, "operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"],
               "apiVersions": ["v1"], "resources": ["deployments"], "scope": "Namespaced"})
    };
    let selector = json!({"matchLabels": {"team": "a"},
                          "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]});
    json!({
        "namespaceSelector": selector,
        "objectSelector": selector,
        "resourceRules": [rule(&["web"])],
        "excludeResourceRules": [rule(&["legacy"])],
        "matchPolicy": "Exact",
    })
}

/// An admission webhook with every field set.
fn webhook(mutating: bool) -> Value {
    let mut w = json!({
        "name": "hook.roundtrip.example.com",
        "clientConfig": {
            "service": {"namespace": "default", "name": "hooks", "path": "/admit", "port": 8443},
            "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJnakNDQVNlZ0F3SUJBZ0lVU1ZOdWh3YkVQOXVxV0creTE0MWE3TXMzWHNzd0NnWUlLb1pJemowRUF3SXcKRlRFVE1CRUdBMVVFQXd3S1pYaGhiWEJzWlMxallUQWdGdzB5TmpFeE1qa3dPVEk0TXpsYUdBOHlNVEkyTVRFdwpOVEE1TWpnek9Wb3dGVEVUTUJFR0ExVUVBd3dLWlhoaGJYQnNaUzFqWVRCWk1CTUdCeXFHU000OUFnRUdDQ3FHClNNNDlBd0VIQTBJQUJHYUx4Q251TmgrS28xT0ltNGFobndnckFUMFNYRjNhL2lNM0lMaEUzRlY1cElCQi9DV3MKK2g5bnhDZDdVNUJmZ0IzNW5ZQVlOSTcwRW4zMzE0RkJORktqVXpCUk1CMEdBMVVkRGdRV0JCUjFqUjh3enB4KwptaHloaEUwa3ZNbkJhY2toYVRBZkJnTlZIU01FR0RBV2dCUjFqUjh3enB4K21oeWhoRTBrdk1uQmFja2hhVEFQCkJnTlZIUk1CQWY4RUJUQURBUUgvTUFvR0NDcUdTTTQ5QkFNQ0Ewa0FNRVlDSVFEMW1KS01sd3pHdEp5YjVhQ1kKdysxeTRyMko3M0hmUm5FOUxZdlNPZi9EbWdJaEFOR2pWMmxnL1Z2NnIzaUFmYTdPTnZVdW14MkpKeEF4ZHFDKwo3aUpmN25WVAotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==",
        },
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["", "apps"],
                   "apiVersions": ["v1"], "resources": ["pods", "deployments/scale"],
                   "scope": "Namespaced"}],
        "failurePolicy": "Ignore",
        "matchPolicy": "Exact",
        "namespaceSelector": {"matchLabels": {"team": "a"},
                              "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]},
        "objectSelector": {"matchLabels": {"app": "web"}},
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 7,
        "admissionReviewVersions": ["v1", "v1beta1"],
        "matchConditions": [{"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"}],
    });
    if mutating {
        w["reinvocationPolicy"] = json!("IfNeeded");
    }
    w
}

/// A NetworkPolicy rule's generated peers become two: the first's pod and namespace
/// selectors, then an ipBlock alone.
fn selectors_then_ip_block(peers: &mut Value) {
    let list = peers.as_array_mut().expect("peers");
    let mut selectors = list[0].clone();
    selectors.as_object_mut().expect("a peer").remove("ipBlock");
    let block =
        json!({"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "10.2.0.0/16"]}});
    *list = vec![selectors, block];
}

/// Leaf paths no write can populate, left out of a kind's count: `metadata.selfLink`, which
/// Kubernetes no longer sets (1.20) and skiff never stores; a cluster-scoped object's
/// namespace; a Secret's `stringData`, which writes merge into `data` (write-only, as in
/// Kubernetes).
fn unreachable_leaf(k: &StoredKind, path: &str) -> bool {
    path == "metadata.selfLink"
        || (!k.namespaced && path == "metadata.namespace")
        || (k.kind == "Secret" && path == "stringData{}")
}

/// One kind's object through every write and its reads.
struct Written {
    kind: StoredKind,
    path: String,
    /// What the last write answered.
    last: Value,
    schema_leaves: BTreeSet<String>,
}

/// The leaf paths where `a` and `b` differ.
fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()).collect::<BTreeSet<_>>() {
                diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &join(path, k),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(p, q, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} != {b}")),
        _ => {}
    }
}

fn assert_same(what: &str, expected: &Value, got: &Value) {
    let mut d = Vec::new();
    diff(expected, got, "", &mut d);
    assert!(d.is_empty(), "{what} differs:\n  {}", d.join("\n  "));
}

/// An error answer in short: its causes, or its message.
fn short(answer: &Value) -> String {
    match answer["details"]["causes"].as_array() {
        Some(causes) if !causes.is_empty() => causes
            .iter()
            .map(|c| {
                format!(
                    "\n    {}: {}",
                    c["field"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                )
            })
            .collect(),
        _ => answer["message"]
            .as_str()
            .map_or_else(|| answer.to_string(), str::to_string),
    }
}

/// Writes one kind's generated object: create, status, delete (held by its finalizers);
/// each answer compared with a GET. Errors are returned, so that one run reports every kind.
fn write_kind(
    s: &TestServer,
    schemas: &Schemas,
    k: &StoredKind,
    owner_uid: &str,
) -> Result<Written, String> {
    let schema = schemas.of_kind(k);
    let mut obj = schemas
        .generate(schema, "", 0, &mut Vec::new())
        .expect("a kind's schema is not recursive");
    obj["apiVersion"] = json!(k.api_version());
    obj["kind"] = json!(k.kind);
    for op in metadata_overrides(k, owner_uid)
        .iter()
        .chain(&kind_overrides(&k.kind))
    {
        apply(&mut obj, op);
    }
    let collection = k.collection(&k.namespace());
    let name = obj["metadata"]["name"].as_str().expect("name").to_string();
    let path = format!("{collection}/{name}");
    let check = |what: &str, answer: &Value| -> Result<(), String> {
        let (code, got) = s.http("GET", &path, None);
        if code != 200 {
            return Err(format!("{} GET after {what}: {code} {got}", k.kind));
        }
        let mut d = Vec::new();
        diff(answer, &got, "", &mut d);
        if d.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} read after {what} differs:\n  {}",
                k.kind,
                d.join("\n  ")
            ))
        }
    };

    // A pod's ephemeral containers come through their subresource once it exists (they
    // cannot be set on create).
    let ephemeral = match k.kind.as_str() {
        "Pod" => obj["spec"]
            .as_object_mut()
            .and_then(|spec| spec.remove("ephemeralContainers")),
        _ => None,
    };
    let (code, mut last) = s.json("POST", &collection, &obj);
    if code != 201 {
        return Err(format!("{} create: {code} {}", k.kind, short(&last)));
    }
    check("create", &last)?;
    if let Some(list) = ephemeral {
        let mut body = last.clone();
        body["spec"]["ephemeralContainers"] = list;
        let (code, answer) = s.json("PUT", &format!("{path}/ephemeralcontainers"), &body);
        if code != 200 {
            return Err(format!(
                "{} ephemeral containers: {code} {}",
                k.kind,
                short(&answer)
            ));
        }
        last = answer;
        check("ephemeral containers", &last)?;
    }
    if k.has_status {
        let mut body = last.clone();
        body["status"] = obj["status"].clone();
        let (code, answer) = s.json("PUT", &format!("{path}/status"), &body);
        if code != 200 {
            return Err(format!(
                "{} status update: {code} {}",
                k.kind,
                short(&answer)
            ));
        }
        last = answer;
        check("status update", &last)?;
    }
    let (code, answer) = s.http("DELETE", &path, None);
    if code != 200 || answer["metadata"]["deletionTimestamp"].is_null() {
        return Err(format!("{} delete: {code} {}", k.kind, short(&answer)));
    }
    last = answer;
    check("delete", &last)?;

    let mut schema_leaves = BTreeSet::new();
    schemas.leaves(schema, "", &mut Vec::new(), &mut schema_leaves);
    schema_leaves.retain(|p| !unreachable_leaf(k, p));
    Ok(Written {
        kind: k.clone(),
        path,
        last,
        schema_leaves,
    })
}

/// The whole round trip on `s`, restarted on its datastore before the last reads. With
/// `ROUNDTRIP_MISSING` set, each kind's unpopulated leaf paths are printed too.
fn roundtrip(s: &mut TestServer, datastore: &str) {
    let started = Instant::now();
    let kinds = stored_kinds(s);
    let schemas = Schemas::fetch(s);
    assert!(
        kinds.len() >= 30,
        "discovery lists {} stored kinds",
        kinds.len()
    );

    let (code, owner) = s.json(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "rt-owner"}}),
    );
    assert_eq!(code, 201, "{owner}");
    let owner_uid = owner["metadata"]["uid"].as_str().expect("uid").to_string();
    for k in kinds.iter().filter(|k| k.namespaced) {
        let (code, ns) = s.json(
            "POST",
            "/api/v1/namespaces",
            // Privileged: the generated pod uses host namespaces, hostPath and more.
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": k.namespace(),
                    "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
        );
        assert_eq!(code, 201, "{ns}");
    }

    let mut written = Vec::new();
    let mut failures = Vec::new();
    for k in &kinds {
        match write_kind(s, &schemas, k, &owner_uid) {
            Ok(w) => written.push(w),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} kinds failed on {datastore}:\n{}",
        failures.len(),
        kinds.len(),
        failures.join("\n")
    );

    // What is compared now was read from the datastore by a new process.
    s.kill_and_restart();
    let mut low = Vec::new();
    println!("{datastore}: kind, populated schema leaf paths / all, share");
    for w in &written {
        let (code, got) = s.http("GET", &w.path, None);
        assert_eq!(code, 200, "{} after restart: {got}", w.kind.kind);
        assert_same(
            &format!("{} after restart on {datastore}", w.kind.kind),
            &w.last,
            &got,
        );
        let mut populated = BTreeSet::new();
        schemas.populated(
            schemas.of_kind(&w.kind),
            &got,
            "",
            &mut Vec::new(),
            &mut populated,
        );
        let covered = w.schema_leaves.intersection(&populated).count();
        let share = covered as f64 / w.schema_leaves.len() as f64;
        println!(
            "  {:<28} {covered:>4} / {:<4} {:>5.1}%",
            w.kind.kind,
            w.schema_leaves.len(),
            share * 100.0
        );
        if std::env::var_os("ROUNDTRIP_MISSING").is_some() {
            let missing: Vec<&String> = w.schema_leaves.difference(&populated).collect();
            println!("    missing: {missing:?}");
        }
        if share < 0.85 {
            let missing: Vec<&String> = w.schema_leaves.difference(&populated).collect();
            low.push(format!("{}: {missing:?}", w.kind.kind));
        }
    }
    assert!(
        low.is_empty(),
        "kinds below 85% of their schema's leaf paths:\n{}",
        low.join("\n")
    );
    println!(
        "{datastore}: {} kinds in {:?}",
        written.len(),
        started.elapsed()
    );
}

#[test]
fn every_kind_with_every_field_reads_back_from_the_embedded_store() {
    let mut s = standby_server(&[]);
    roundtrip(&mut s, "the embedded store");
}

#[test]
fn every_kind_with_every_field_reads_back_from_etcd() {
    let cluster = EtcdCluster::start(1);
    let endpoints = cluster.endpoints();
    let mut s = standby_server(&["--datastore-endpoint", &endpoints]);
    roundtrip(&mut s, "etcd");
}
