//! `/openapi/v2` and `/openapi/v3`: the served kinds' schemas (from the model, see
//! [`api::schema`]) and their REST operations, as kube-apiserver publishes them, and the
//! server-side field validation (`fieldValidation=Strict|Warn|Ignore`) that uses them.
//!
//! kubectl reads the v3 documents for `explain`, for the merge keys of `apply`'s strategic
//! merge patches, and to learn that writes take `fieldValidation`. The documents are built on
//! first use and kept, each with an ETag; v3 documents are also addressed by their hash.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use api::schema::{ref_name, V3_REF_PREFIX};
use api::Kind;
use serde_json::{json, Map, Value};
use tide::http::{mime, StatusCode};

use crate::error::ApiError;

/// One document as served.
pub struct Served {
    body: Vec<u8>,
    etag: String,
}

impl Served {
    fn new(v: &Value) -> Served {
        let body = serde_json::to_vec(v).unwrap_or_default();
        let digest = ring::digest::digest(&ring::digest::SHA256, &body);
        let etag = digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<String>();
        Served { body, etag }
    }
}

/// The v3 documents: the index and one document per group-version.
struct V3 {
    index: Served,
    /// By path: `api/v1`, `apis/apps/v1`.
    by_group_version: BTreeMap<String, Served>,
}

/// Built on the first request that needs them and kept (only the encoded bytes: the JSON
/// trees they are made from are dropped). v2 is built apart: kubectl never asks for it as
/// JSON, so most servers never build it.
fn v3() -> &'static V3 {
    static V3_DOCS: OnceLock<V3> = OnceLock::new();
    V3_DOCS.get_or_init(build_v3)
}

fn v2() -> &'static Served {
    static V2_DOC: OnceLock<Served> = OnceLock::new();
    V2_DOC.get_or_init(build_v2)
}

/// `api/v1` or `apis/apps/v1`.
fn group_version_path(kind: Kind) -> String {
    let info = kind.info();
    if info.group.is_empty() {
        format!("api/{}", info.version)
    } else {
        format!("apis/{}/{}", info.group, info.version)
    }
}

/// The model's definitions with their patch metadata, and the Patch body's.
fn schemas() -> Map<String, Value> {
    let mut schemas = api::schema::definitions();
    for &kind in Kind::ALL {
        let mut seen = BTreeSet::new();
        annotate_patch_metadata(&mut schemas, &kind.schema_name(), None, &mut seen);
    }
    schemas.insert(
        PATCH_DEFINITION.into(),
        json!({"type": "object", "description": "Patch is the body of a PATCH request: a JSON patch, a merge patch, a strategic merge patch or an apply configuration, as its content type says."}),
    );
    schemas
}

fn build_v3() -> V3 {
    let schemas = schemas();
    let mut by_gv: BTreeMap<String, Vec<Kind>> = BTreeMap::new();
    for &kind in Kind::ALL {
        by_gv
            .entry(group_version_path(kind))
            .or_default()
            .push(kind);
    }
    let mut by_group_version = BTreeMap::new();
    for (gv, kinds) in &by_gv {
        let mut paths = Map::new();
        for &kind in kinds {
            for (path, item) in operations(kind) {
                paths.insert(path, v3_path_item(&item));
            }
        }
        let roots: Vec<String> = kinds
            .iter()
            .map(|&k| k.schema_name())
            .chain([PATCH_DEFINITION.to_string(), STATUS_DEFINITION.to_string()])
            .collect();
        let doc = json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": env!("CARGO_PKG_VERSION")},
            "paths": paths,
            "components": {"schemas": reachable(&schemas, &roots)},
        });
        by_group_version.insert(gv.clone(), Served::new(&doc));
    }
    let index_paths: Map<String, Value> = by_group_version
        .iter()
        .map(|(gv, served)| {
            (
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", served.etag)}),
            )
        })
        .collect();
    V3 {
        index: Served::new(&json!({ "paths": index_paths })),
        by_group_version,
    }
}

fn build_v2() -> Served {
    let mut paths = Map::new();
    for &kind in Kind::ALL {
        for (path, item) in operations(kind) {
            paths.insert(path, v2_path_item(&item));
        }
    }
    let mut definitions = schemas();
    definitions.values_mut().for_each(to_v2_schema);
    Served::new(&json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "definitions": definitions,
    }))
}

const PATCH_DEFINITION: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const STATUS_DEFINITION: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

/// Puts `x-kubernetes-patch-strategy`/`-merge-key` on the fields the strategic merge patch
/// of this server treats specially, walking the kind's schema with each field's parent
/// field (the strategy is keyed by field and parent field, see [`crate::strategic`]).
fn annotate_patch_metadata(
    schemas: &mut Map<String, Value>,
    definition: &str,
    parent: Option<&str>,
    seen: &mut BTreeSet<(String, Option<String>)>,
) {
    if !seen.insert((definition.to_string(), parent.map(str::to_string))) {
        return;
    }
    let Some(props) = schemas
        .get(definition)
        .and_then(|d| d.get("properties"))
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    for (field, schema) in &props {
        if let Some((strategy, key)) = crate::strategic::patch_metadata(parent, field) {
            if let Some(Value::Object(p)) = schemas
                .get_mut(definition)
                .and_then(|d| d.get_mut("properties"))
                .and_then(|p| p.get_mut(field))
            {
                p.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
                if let Some(key) = key {
                    p.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                }
            }
        }
        for target in refs_of(schema) {
            annotate_patch_metadata(schemas, &target, Some(field), seen);
        }
    }
}

/// The definitions a schema refers to directly (through `allOf`, `items`, maps).
fn refs_of(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![schema];
    while let Some(s) = stack.pop() {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            out.push(ref_name(r).to_string());
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = s.get(key).filter(|v| v.is_object()) {
                stack.push(sub);
            }
        }
        for key in ["allOf", "oneOf", "anyOf"] {
            if let Some(Value::Array(subs)) = s.get(key) {
                stack.extend(subs);
            }
        }
    }
    out
}

/// The definitions reachable from `roots`.
fn reachable(schemas: &Map<String, Value>, roots: &[String]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut todo: Vec<String> = roots.to_vec();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = schemas.get(&name) else {
            continue;
        };
        if let Some(Value::Object(props)) = schema.get("properties") {
            for p in props.values() {
                todo.extend(refs_of(p));
            }
        }
        todo.extend(refs_of(schema));
        out.insert(name, schema.clone());
    }
    out
}

/// A swagger 2.0 schema from an OpenAPI v3 one: references under `#/definitions/`, a
/// reference with a description as a sibling (as Kubernetes' v2 has it), no `oneOf`.
fn to_v2_schema(v: &mut Value) {
    let Value::Object(m) = v else { return };
    if let Some(Value::String(r)) = m.get_mut("$ref") {
        *r = format!("#/definitions/{}", ref_name(r));
    }
    if let Some(Value::Array(all)) = m.get("allOf") {
        if let [Value::Object(one)] = all.as_slice() {
            if let Some(r) = one.get("$ref").cloned() {
                m.remove("allOf");
                m.insert("$ref".into(), r);
            }
        }
    }
    if m.remove("oneOf").is_some() {
        // Quantity: a string or a number; v2 says string, as Kubernetes' does.
        m.insert("type".into(), json!("string"));
    }
    if let Some(Value::String(r)) = m.get_mut("$ref") {
        if !r.starts_with("#/definitions/") {
            *r = format!("#/definitions/{}", ref_name(r));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = m.get_mut(key) {
            to_v2_schema(sub);
        }
    }
    if let Some(Value::Array(subs)) = m.get_mut("allOf") {
        subs.iter_mut().for_each(to_v2_schema);
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(to_v2_schema);
    }
}

// ---------------------------------------------------------------------------------------
// Operations

/// One REST operation of a kind, rendered into both document versions.
struct Operation {
    method: &'static str,
    /// `x-kubernetes-action`.
    action: &'static str,
    /// The verb of Kubernetes' operation ids (`create`, `readNamespaced`...).
    id_verb: &'static str,
    /// What the response (and a PUT or POST body) holds.
    returns: Returns,
    params: &'static [Param],
}

#[derive(Clone, Copy, PartialEq)]
enum Returns {
    Object,
    List,
    Status,
}

#[derive(Clone, Copy)]
enum Param {
    DryRun,
    FieldManager,
    FieldValidation,
    Force,
    Watch,
    LabelSelector,
    FieldSelector,
    Limit,
    Continue,
    ResourceVersion,
    GracePeriodSeconds,
    PropagationPolicy,
}

impl Param {
    fn describe(self) -> Value {
        let (name, ty, description) = match self {
            Param::DryRun => ("dryRun", "string", "When present, indicates that modifications should not be persisted. Valid value: All."),
            Param::FieldManager => ("fieldManager", "string", "The name of the actor or entity making these changes."),
            Param::FieldValidation => ("fieldValidation", "string", "How the server treats fields of the request body that the object's schema does not know: Ignore (drop them silently), Warn (drop them and warn about each in a Warning header) or Strict (refuse the request with a BadRequest naming them)."),
            Param::Force => ("force", "boolean", "Force is going to \"force\" Apply requests."),
            Param::Watch => ("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."),
            Param::LabelSelector => ("labelSelector", "string", "A selector to restrict the list of returned objects by their labels."),
            Param::FieldSelector => ("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields."),
            Param::Limit => ("limit", "integer", "The maximum number of responses to return for a list call."),
            Param::Continue => ("continue", "string", "The continue token of the previous page of a list."),
            Param::ResourceVersion => ("resourceVersion", "string", "The resource version a list or watch starts from."),
            Param::GracePeriodSeconds => ("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted."),
            Param::PropagationPolicy => ("propagationPolicy", "string", "Whether and how garbage collection will be performed: Orphan, Background or Foreground."),
        };
        json!({"name": name, "in": "query", "description": description, "type": ty, "schema": {"type": ty, "uniqueItems": true}, "uniqueItems": true})
    }
}

const WRITE: &[Param] = &[Param::DryRun, Param::FieldManager, Param::FieldValidation];
const PATCH: &[Param] = &[
    Param::DryRun,
    Param::FieldManager,
    Param::FieldValidation,
    Param::Force,
];
const LIST: &[Param] = &[
    Param::LabelSelector,
    Param::FieldSelector,
    Param::Limit,
    Param::Continue,
    Param::ResourceVersion,
    Param::Watch,
];
const DELETE: &[Param] = &[
    Param::DryRun,
    Param::GracePeriodSeconds,
    Param::PropagationPolicy,
];

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// A path and its operations.
struct PathItem {
    kind: Kind,
    namespaced_path: bool,
    named: bool,
    /// `status` for the status subresource.
    subresource: Option<&'static str>,
    operations: Vec<Operation>,
}

fn op(
    method: &'static str,
    action: &'static str,
    id_verb: &'static str,
    returns: Returns,
    params: &'static [Param],
) -> Operation {
    Operation {
        method,
        action,
        id_verb,
        returns,
        params,
    }
}

/// The paths of a kind, as kube-apiserver lays them out.
fn operations(kind: Kind) -> Vec<(String, PathItem)> {
    let info = kind.info();
    let prefix = format!("/{}", group_version_path(kind));
    let collection = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    };
    let ns = info.namespaced;
    let list_id = if ns { "listNamespaced" } else { "list" };
    let mut out = vec![
        (
            collection.clone(),
            PathItem {
                kind,
                namespaced_path: ns,
                named: false,
                subresource: None,
                operations: vec![
                    op("get", "list", list_id, Returns::List, LIST),
                    op(
                        "post",
                        "post",
                        if ns { "createNamespaced" } else { "create" },
                        Returns::Object,
                        WRITE,
                    ),
                ],
            },
        ),
        (
            format!("{collection}/{{name}}"),
            PathItem {
                kind,
                namespaced_path: ns,
                named: true,
                subresource: None,
                operations: vec![
                    op(
                        "get",
                        "get",
                        if ns { "readNamespaced" } else { "read" },
                        Returns::Object,
                        &[],
                    ),
                    op(
                        "put",
                        "put",
                        if ns { "replaceNamespaced" } else { "replace" },
                        Returns::Object,
                        WRITE,
                    ),
                    op(
                        "patch",
                        "patch",
                        if ns { "patchNamespaced" } else { "patch" },
                        Returns::Object,
                        PATCH,
                    ),
                    op(
                        "delete",
                        "delete",
                        if ns { "deleteNamespaced" } else { "delete" },
                        Returns::Status,
                        DELETE,
                    ),
                ],
            },
        ),
    ];
    if ns {
        out.push((
            format!("{prefix}/{}", info.plural),
            PathItem {
                kind,
                namespaced_path: false,
                named: false,
                subresource: None,
                operations: vec![op(
                    "get",
                    "list",
                    "listForAllNamespaces",
                    Returns::List,
                    LIST,
                )],
            },
        ));
    }
    if info.has_status {
        let status =
            |method, action, verb, params| op(method, action, verb, Returns::Object, params);
        out.push((
            format!("{collection}/{{name}}/status"),
            PathItem {
                kind,
                namespaced_path: ns,
                named: true,
                subresource: Some("status"),
                operations: vec![
                    status(
                        "get",
                        "get",
                        if ns { "readNamespaced" } else { "read" },
                        &[],
                    ),
                    status(
                        "put",
                        "put",
                        if ns { "replaceNamespaced" } else { "replace" },
                        WRITE,
                    ),
                    status(
                        "patch",
                        "patch",
                        if ns { "patchNamespaced" } else { "patch" },
                        PATCH,
                    ),
                ],
            },
        ));
    }
    out
}

impl PathItem {
    fn operation_id(&self, o: &Operation) -> String {
        let info = self.kind.info();
        let gv = if info.group.is_empty() {
            format!("Core{}", capitalize(info.version))
        } else {
            // Kubernetes names the group by its first label: `networking.k8s.io` is
            // `NetworkingV1`.
            let label = info.group.split('.').next().unwrap_or(info.group);
            format!("{}{}", capitalize(label), capitalize(info.version))
        };
        let suffix = match (self.subresource, o.returns) {
            (Some(s), _) => capitalize(s),
            (None, _) => String::new(),
        };
        format!("{}{gv}{}{suffix}", o.id_verb, info.kind)
    }

    fn path_params(&self) -> Vec<Value> {
        let mut out = Vec::new();
        if self.named {
            out.push(json!({"name": "name", "in": "path", "required": true, "description": format!("name of the {}", self.kind.info().kind), "type": "string", "schema": {"type": "string", "uniqueItems": true}, "uniqueItems": true}));
        }
        if self.namespaced_path {
            out.push(json!({"name": "namespace", "in": "path", "required": true, "description": "object name and auth scope, such as for teams and projects", "type": "string", "schema": {"type": "string", "uniqueItems": true}, "uniqueItems": true}));
        }
        out
    }

    fn gvk(&self, returns: Returns) -> Value {
        let info = self.kind.info();
        let kind = match returns {
            Returns::List => format!("{}List", info.kind),
            _ => info.kind.to_string(),
        };
        json!({"group": info.group, "version": info.version, "kind": kind})
    }

    fn schema_ref(&self, returns: Returns, prefix: &str) -> Value {
        let name = match returns {
            Returns::Object | Returns::List => api::schema::definition_name(self.kind),
            Returns::Status => STATUS_DEFINITION.to_string(),
        };
        if returns == Returns::List {
            json!({"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": format!("{prefix}{name}")}}}})
        } else {
            json!({ "$ref": format!("{prefix}{name}") })
        }
    }
}

/// Strips only the parameter fields of the other document version.
fn v3_param(mut p: Value) -> Value {
    if let Value::Object(m) = &mut p {
        m.remove("type");
        m.remove("uniqueItems");
    }
    p
}

fn v2_param(mut p: Value) -> Value {
    if let Value::Object(m) = &mut p {
        m.remove("schema");
    }
    p
}

fn v3_path_item(item: &PathItem) -> Value {
    let mut out = Map::new();
    for o in &item.operations {
        let mut op = json!({
            "description": format!("{} the specified {}", o.action, item.kind.info().kind),
            "operationId": item.operation_id(o),
            "parameters": o.params.iter().map(|p| v3_param(p.describe())).collect::<Vec<_>>(),
            "responses": {"200": {"description": "OK", "content": {
                "application/json": {"schema": item.schema_ref(o.returns, V3_REF_PREFIX)},
                "application/yaml": {"schema": item.schema_ref(o.returns, V3_REF_PREFIX)},
            }}},
            "x-kubernetes-action": o.action,
            "x-kubernetes-group-version-kind": item.gvk(o.returns),
        });
        let body_types: &[&str] = match o.method {
            "post" | "put" => &["application/json", "application/yaml"],
            "patch" => PATCH_TYPES,
            _ => &[],
        };
        if !body_types.is_empty() {
            let schema = if o.method == "patch" {
                json!({ "$ref": format!("{V3_REF_PREFIX}{PATCH_DEFINITION}") })
            } else {
                item.schema_ref(Returns::Object, V3_REF_PREFIX)
            };
            let content: Map<String, Value> = body_types
                .iter()
                .map(|t| (t.to_string(), json!({ "schema": schema })))
                .collect();
            op["requestBody"] = json!({"content": content, "required": true});
        }
        out.insert(o.method.into(), op);
    }
    out.insert(
        "parameters".into(),
        Value::Array(item.path_params().into_iter().map(v3_param).collect()),
    );
    Value::Object(out)
}

fn v2_path_item(item: &PathItem) -> Value {
    let mut out = Map::new();
    for o in &item.operations {
        let mut params: Vec<Value> = o.params.iter().map(|p| v2_param(p.describe())).collect();
        let consumes: &[&str] = match o.method {
            "post" | "put" => &["application/json", "application/yaml"],
            "patch" => PATCH_TYPES,
            _ => &["*/*"],
        };
        if matches!(o.method, "post" | "put" | "patch") {
            let schema = if o.method == "patch" {
                json!({ "$ref": format!("#/definitions/{PATCH_DEFINITION}") })
            } else {
                item.schema_ref(Returns::Object, "#/definitions/")
            };
            params.push(json!({"name": "body", "in": "body", "required": true, "schema": schema}));
        }
        out.insert(
            o.method.into(),
            json!({
                "description": format!("{} the specified {}", o.action, item.kind.info().kind),
                "operationId": item.operation_id(o),
                "consumes": consumes,
                "produces": ["application/json", "application/yaml"],
                "schemes": ["https"],
                "parameters": params,
                "responses": {"200": {"description": "OK", "schema": item.schema_ref(o.returns, "#/definitions/")}},
                "x-kubernetes-action": o.action,
                "x-kubernetes-group-version-kind": item.gvk(o.returns),
            }),
        );
    }
    out.insert(
        "parameters".into(),
        Value::Array(item.path_params().into_iter().map(v2_param).collect()),
    );
    Value::Object(out)
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

// ---------------------------------------------------------------------------------------
// Serving

/// The v3 documents of the custom resources' group-versions (`apis/<group>/<version>`),
/// from their established definitions' schemas, as kube-apiserver publishes them: each
/// served version's schema with `apiVersion`, `kind`, `metadata` and its
/// `x-kubernetes-group-version-kind`, the List, and the paths (with their `fieldValidation`
/// parameters, which kubectl looks for before it asks the server to validate fields).
pub fn custom_documents(
    crds: &[api::apiextensions::CustomResourceDefinition],
) -> BTreeMap<String, Served> {
    custom_parts(crds)
        .into_iter()
        .map(|(gv, (paths, _, mut schemas))| {
            let mut roots: Vec<String> = Vec::new();
            for p in paths.values() {
                collect_refs(p, &mut roots);
            }
            for s in schemas.values() {
                collect_refs(s, &mut roots);
            }
            roots.retain(|r| !schemas.contains_key(r));
            roots.sort();
            roots.dedup();
            for (k, v) in reachable(common_schemas(), &roots) {
                schemas.entry(k).or_insert(v);
            }
            let doc = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
                "paths": paths,
                "components": {"schemas": schemas},
            });
            (gv, Served::new(&doc))
        })
        .collect()
}

/// `/openapi/v2` with the custom resources' paths and definitions merged in, as
/// kube-apiserver merges its CRDs' swagger into the aggregated v2 document. Their schemas
/// as kube publishes them in v2: without `nullable`, `anyOf`, `oneOf`, `allOf` and `not`,
/// which swagger 2.0 cannot say the same way.
pub fn custom_v2(crds: &[api::apiextensions::CustomResourceDefinition]) -> Option<Served> {
    let parts = custom_parts(crds);
    if parts.is_empty() {
        return None;
    }
    let mut doc: Value = serde_json::from_slice(&v2().body).ok()?;
    for (_, (_, paths, schemas)) in parts {
        if let Some(Value::Object(all)) = doc.get_mut("paths") {
            all.extend(paths);
        }
        if let Some(Value::Object(all)) = doc.get_mut("definitions") {
            for (name, mut schema) in schemas {
                strip_for_v2(&mut schema);
                to_v2_schema(&mut schema);
                all.insert(name, schema);
            }
        }
    }
    Some(Served::new(&doc))
}

/// Removes what swagger 2.0 has no word for from a custom resource's schema.
fn strip_for_v2(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for key in ["anyOf", "oneOf", "allOf", "not"] {
                m.remove(key);
            }
            if m.remove("nullable") == Some(Value::Bool(true)) {
                m.remove("type");
            }
            for (k, sub) in m.iter_mut() {
                if matches!(k.as_str(), "properties" | "patternProperties") {
                    if let Value::Object(props) = sub {
                        props.values_mut().for_each(strip_for_v2);
                    }
                } else if matches!(k.as_str(), "items" | "additionalProperties") {
                    strip_for_v2(sub);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_for_v2),
        _ => {}
    }
}

/// Per group-version of the custom resources: the v3 paths, the v2 paths and the schemas.
type CustomParts = BTreeMap<String, (Map<String, Value>, Map<String, Value>, Map<String, Value>)>;

fn custom_parts(crds: &[api::apiextensions::CustomResourceDefinition]) -> CustomParts {
    let mut by_gv: CustomParts = BTreeMap::new();
    for crd in crds.iter().filter(|c| c.condition("Established")) {
        let names = crd.served_names();
        let Some(kind) = Kind::custom(&crd.spec.group, &names.plural) else {
            continue;
        };
        let storage = kind.info().version;
        let reversed: Vec<&str> = crd.spec.group.split('.').rev().collect();
        let reversed = reversed.join(".");
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            let gv = format!("apis/{}/{}", crd.spec.group, v.name);
            let (paths, v2_paths, schemas) = by_gv.entry(gv).or_default();
            let name = format!("{reversed}.{}.{}", v.name, names.kind);
            let list_name = format!("{name}List");
            let gvk = |k: &str| json!([{"group": crd.spec.group, "kind": k, "version": v.name}]);
            let mut schema = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.clone())
                .map(|s| s.0)
                .unwrap_or_else(|| json!({"type": "object"}));
            if let Value::Object(m) = &mut schema {
                let props = m
                    .entry("properties")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .map(std::mem::take)
                    .unwrap_or_default();
                let mut all = Map::new();
                all.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}));
                all.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}));
                all.insert("metadata".into(), json!({"$ref": format!("{V3_REF_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"), "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
                all.extend(props);
                m.insert("properties".into(), Value::Object(all));
                m.insert("x-kubernetes-group-version-kind".into(), gvk(&names.kind));
            }
            schemas.insert(name.clone(), schema);
            schemas.insert(
                list_name,
                json!({
                    "description": format!("{}List is a list of {}", names.kind, names.kind),
                    "type": "object",
                    "required": ["items"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "items": {"type": "array", "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", names.plural), "items": {"$ref": format!("{V3_REF_PREFIX}{name}")}},
                        "kind": {"type": "string"},
                        "metadata": {"$ref": format!("{V3_REF_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")},
                    },
                    "x-kubernetes-group-version-kind": gvk(&format!("{}List", names.kind)),
                }),
            );
            // The storage version's paths, renamed for this version.
            let storage_name = kind.schema_name();
            let renamed = |item: Value| -> Option<Value> {
                let text = serde_json::to_string(&item)
                    .unwrap_or_default()
                    .replace(&storage_name, &name)
                    .replace(
                        &format!("\"version\":\"{storage}\""),
                        &format!("\"version\":\"{}\"", v.name),
                    );
                serde_json::from_str(&text).ok()
            };
            for (path, item) in operations(kind) {
                let path = path.replace(
                    &format!("/{}/{storage}/", crd.spec.group),
                    &format!("/{}/{}/", crd.spec.group, v.name),
                );
                if let Some(item) = renamed(v3_path_item(&item)) {
                    paths.insert(path.clone(), item);
                }
                if let Some(item) = renamed(v2_path_item(&item)) {
                    v2_paths.insert(path, item);
                }
            }
        }
    }
    by_gv
}

/// Every `$ref` anywhere in `v`, by definition name.
fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(ref_name(r).to_string());
            }
            m.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// The built-in definitions custom resources' documents refer to (metadata, lists, Status,
/// Patch, DeleteOptions and what they reach), kept once made.
fn common_schemas() -> &'static Map<String, Value> {
    static COMMON: OnceLock<Map<String, Value>> = OnceLock::new();
    COMMON.get_or_init(|| {
        let mut roots = vec![
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".to_string(),
            "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta".to_string(),
        ];
        for (_, item) in operations(Kind::ConfigMap) {
            collect_refs(&v3_path_item(&item), &mut roots);
        }
        roots.retain(|r| !r.contains(".core.v1.ConfigMap"));
        reachable(&schemas(), &roots)
    })
}

/// Whether a `/openapi/v2` request takes JSON (kubectl asks for gnostic protobuf).
pub fn wants_v2_json(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            t == "application/json" || t == "*/*"
        }) && !a.contains("protobuf")
    })
}

/// Answers `/openapi/v2` and `/openapi/v3[/<group-version>]` GETs; `custom` holds the
/// custom resources' v3 documents ([`custom_documents`]), `custom_v2` the v2 document with
/// them ([`custom_v2`]).
pub fn serve(
    path: &str,
    accept: Option<&str>,
    if_none_match: Option<&str>,
    custom: &BTreeMap<String, Served>,
    custom_v2: Option<&Served>,
) -> tide::Response {
    let rest = path.trim_end_matches('/');
    if rest == "/openapi/v2" || rest == "/swagger-2.0.0.pb-v1" {
        if !wants_v2_json(accept) {
            // kubectl asks for gnostic protobuf; an empty Document is a valid one (it reads
            // the v3 documents for everything that needs schemas).
            let mut r = tide::Response::new(StatusCode::Ok);
            r.set_content_type("application/octet-stream");
            return r;
        }
        return answer(custom_v2.unwrap_or(v2()), if_none_match, false);
    }
    if rest == "/openapi/v3" {
        if custom.is_empty() {
            return answer(&v3().index, if_none_match, false);
        }
        let mut index: Value = serde_json::from_slice(&v3().index.body).unwrap_or_default();
        if let Some(Value::Object(paths)) = index.get_mut("paths") {
            for (gv, served) in custom {
                paths.insert(
                    gv.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", served.etag)}),
                );
            }
        }
        return answer(&Served::new(&index), if_none_match, false);
    }
    let gv = rest.trim_start_matches("/openapi/v3/");
    match v3().by_group_version.get(gv).or_else(|| custom.get(gv)) {
        Some(served) => answer(served, if_none_match, true),
        None => {
            let e = ApiError::path_not_found();
            let mut r = tide::Response::new(StatusCode::NotFound);
            r.set_body(serde_json::to_vec(&e.0).unwrap_or_default());
            r.set_content_type(mime::JSON);
            r
        }
    }
}

fn answer(served: &Served, if_none_match: Option<&str>, immutable: bool) -> tide::Response {
    let etag = format!("\"{}\"", served.etag);
    let mut r = if if_none_match.is_some_and(|t| t.split(',').any(|t| t.trim() == etag)) {
        tide::Response::new(StatusCode::NotModified)
    } else {
        let mut r = tide::Response::new(StatusCode::Ok);
        r.set_body(served.body.clone());
        r.set_content_type(mime::JSON);
        r
    };
    r.insert_header("ETag", etag);
    // A document addressed by its hash never changes; the others may with the server.
    r.insert_header(
        "Cache-Control",
        if immutable {
            "public, immutable"
        } else {
            "no-cache, private"
        },
    );
    r
}

// ---------------------------------------------------------------------------------------
// Field validation

/// `fieldValidation`: what to do with fields of a body the schema does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(v: &str) -> Result<FieldValidation, ApiError> {
        match v {
            "Ignore" => Ok(FieldValidation::Ignore),
            "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other:?}, must be one of Ignore, Warn, Strict"
            ))),
        }
    }
}

/// The `fieldValidation` of a query string: None without one, 400 for an unknown one. The
/// fuzz target `query_headers` calls it.
pub fn field_validation(query: &str) -> Result<Option<FieldValidation>, ApiError> {
    super::query_value(query, "fieldValidation")
        .map(|v| FieldValidation::parse(&v))
        .transpose()
}

/// How a body is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyShape {
    /// A whole object (create, update, server-side apply).
    Object,
    /// A merge patch: an object whose members may be null.
    MergePatch,
    /// A strategic merge patch: also `$patch`, `$retainKeys`, `$setElementOrder/…` keys.
    StrategicPatch,
    /// A JSON patch: a list of operations on paths.
    JsonPatch,
}

/// Checks `body` (already parsed) against `kind`'s schema. Unknown fields are refused
/// (Strict) or removed from the body (Warn, Ignore), as are `duplicates` (members the body
/// had twice in one object, by path; the last one is kept); the answer is a message for each.
pub fn validate_fields(
    kind: Kind,
    shape: BodyShape,
    mode: FieldValidation,
    body: &mut Value,
    duplicates: &[String],
) -> Result<Vec<String>, ApiError> {
    if kind.is_custom() {
        // A custom resource's schema decides (what pruning would drop is unknown).
        let unknown = match (kind.custom_rules(), shape) {
            (Some(rules), BodyShape::Object | BodyShape::MergePatch) => rules.unknown_fields(body),
            _ => Vec::new(),
        };
        return field_messages(kind, mode, &unknown, duplicates);
    }
    let v = validator();
    let Some(&(_, root)) = v.roots.iter().find(|(k, _)| *k == kind) else {
        return Ok(Vec::new());
    };
    let mut unknown = Vec::new();
    let strip = mode != FieldValidation::Strict;
    let directives = shape == BodyShape::StrategicPatch;
    match shape {
        BodyShape::JsonPatch => {
            if let Value::Array(ops) = body {
                ops.retain_mut(|op| v.json_patch_op(root, op, strip, &mut unknown));
            }
        }
        _ => v.walk(
            root,
            body,
            &mut String::new(),
            directives,
            strip,
            &mut unknown,
        ),
    }
    field_messages(kind, mode, &unknown, duplicates)
}

/// The answer of field validation that found `unknown` and `duplicates`.
fn field_messages(
    kind: Kind,
    mode: FieldValidation,
    unknown: &[String],
    duplicates: &[String],
) -> Result<Vec<String>, ApiError> {
    let messages: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .chain(
            duplicates
                .iter()
                .map(|f| format!("duplicate field \"{f}\"")),
        )
        .collect();
    if messages.is_empty() {
        return Ok(messages);
    }
    match mode {
        FieldValidation::Strict => {
            let info = kind.info();
            Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                info.kind,
                info.version,
                info.kind,
                messages.join(", ")
            )))
        }
        FieldValidation::Warn | FieldValidation::Ignore => Ok(messages),
    }
}

/// Server-side field validation of a write (create, update, any patch) when the request
/// asks for it with `fieldValidation`; without it the body goes on untouched (the model
/// refuses unknown fields when it decodes them). Bodies that are not JSON or YAML, and those
/// that do not parse (the decoder gives the error), are left alone. Answers the warnings
/// to send (Warn); unknown fields are removed from `body` (Warn, Ignore).
pub(super) fn check_request(
    req: &tide::Request<super::State>,
    path: &super::route::ResourcePath,
    body: &mut Vec<u8>,
) -> Result<Vec<String>, ApiError> {
    use tide::http::Method;
    let Some(mode) = field_validation(super::query_string(req))? else {
        return Ok(Vec::new());
    };
    let method = req.method();
    if !matches!(method, Method::Post | Method::Put | Method::Patch)
        || !matches!(
            path.subresource.as_deref(),
            None | Some("status") | Some("finalize")
        )
        || (method == Method::Post && path.subresource.is_some())
    {
        return Ok(Vec::new());
    }
    let media = super::media_type(req);
    let (shape, yaml) = match (method, media.as_str()) {
        (Method::Patch, "application/json-patch+json") => (BodyShape::JsonPatch, false),
        (Method::Patch, "application/merge-patch+json") => (BodyShape::MergePatch, false),
        (Method::Patch, "application/strategic-merge-patch+json") => {
            (BodyShape::StrategicPatch, false)
        }
        (Method::Patch, "application/apply-patch+yaml" | "application/apply-patch+json") => {
            (BodyShape::Object, true)
        }
        (Method::Patch, _) => return Ok(Vec::new()),
        (_, "application/json" | "" | "*/*" | "application/octet-stream") => {
            (BodyShape::Object, false)
        }
        (_, "application/yaml" | "application/x-yaml" | "text/yaml") => (BodyShape::Object, true),
        _ => return Ok(Vec::new()),
    };
    // YAML bodies cannot repeat a key: the YAML parser refuses them.
    let mut duplicates = Vec::new();
    let parsed = if yaml {
        api::codec::parse_yaml(body).ok()
    } else if shape == BodyShape::JsonPatch {
        api::codec::parse_json(body).ok()
    } else {
        parse_json_noting_duplicates(body, &mut duplicates).ok()
    };
    let Some(mut value) = parsed else {
        return Ok(Vec::new());
    };
    let messages = validate_fields(path.kind, shape, mode, &mut value, &duplicates)?;
    if messages.is_empty() {
        return Ok(messages);
    }
    // JSON is YAML too, so the rewritten body suits every content type above.
    *body = serde_json::to_vec(&value).unwrap_or_default();
    Ok(if mode == FieldValidation::Warn {
        messages
    } else {
        Vec::new()
    })
}

/// Parses JSON as `serde_json::Value` does (the last of repeated members wins), noting the
/// path of each member an object repeats.
fn parse_json_noting_duplicates(
    bytes: &[u8],
    duplicates: &mut Vec<String>,
) -> Result<Value, serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = NotingDuplicates {
        path: String::new(),
        duplicates,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

struct NotingDuplicates<'a> {
    path: String,
    duplicates: &'a mut Vec<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for NotingDuplicates<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NotingDuplicates<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let seed = NotingDuplicates {
                path: format!("{}[{}]", self.path, out.len()),
                duplicates: &mut *self.duplicates,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let seed = NotingDuplicates {
                path: path.clone(),
                duplicates: &mut *self.duplicates,
            };
            let value = map.next_value_seed(seed)?;
            if out.insert(key, value).is_some() {
                self.duplicates.push(path);
            }
        }
        Ok(Value::Object(out))
    }
}

/// Adds one `Warning` header per message, as kube-apiserver does (kubectl prints them as
/// `Warning: ...` lines).
pub(super) fn add_warnings(r: &mut tide::Response, warnings: &[String]) {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        r.append_header("Warning", format!("299 - \"{escaped}\""));
    }
}

/// The schema graph field validation walks: one node per definition or inline schema,
/// only what tells known fields from unknown ones (a few tens of KiB, where the JSON schemas
/// it is made from take megabytes).
struct Validator {
    nodes: Vec<Node>,
    roots: Vec<(Kind, usize)>,
}

enum Node {
    /// An object whose members must be among these, sorted by name.
    Object(Box<[(Box<str>, usize)]>),
    Array(usize),
    /// A map: any keys, each value of this node.
    Map(usize),
    /// A scalar, or content kept verbatim (`x-kubernetes-preserve-unknown-fields`): nothing
    /// below to check.
    Leaf,
}

/// Node 0 is the shared leaf.
const LEAF: usize = 0;

fn validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let defs = api::schema::definitions();
        let mut v = Validator {
            nodes: vec![Node::Leaf],
            roots: Vec::new(),
        };
        let mut by_name = BTreeMap::new();
        for &kind in Kind::ALL {
            let r = json!({ "$ref": format!("{V3_REF_PREFIX}{}", kind.schema_name()) });
            let root = v.node_of(&defs, &r, &mut by_name);
            v.roots.push((kind, root));
        }
        v.nodes.shrink_to_fit();
        v
    })
}

impl Validator {
    fn node_of(
        &mut self,
        defs: &Map<String, Value>,
        schema: &Value,
        by_name: &mut BTreeMap<String, usize>,
    ) -> usize {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let name = ref_name(r);
            if let Some(&i) = by_name.get(name) {
                return i;
            }
            let Some(def) = defs.get(name) else {
                return LEAF;
            };
            // Reserved before its members are built: definitions may refer to themselves.
            let i = self.nodes.len();
            self.nodes.push(Node::Leaf);
            by_name.insert(name.to_string(), i);
            let node = self.build(defs, def, by_name);
            self.nodes[i] = node;
            return i;
        }
        match self.build(defs, schema, by_name) {
            Node::Leaf => LEAF,
            node => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    fn build(
        &mut self,
        defs: &Map<String, Value>,
        schema: &Value,
        by_name: &mut BTreeMap<String, usize>,
    ) -> Node {
        if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return Node::Leaf;
        }
        if let Some(Value::Object(props)) = schema.get("properties") {
            let members: Vec<(Box<str>, usize)> = props
                .iter()
                .map(|(k, sub)| (k.as_str().into(), self.node_of(defs, sub, by_name)))
                .collect();
            return Node::Object(members.into_boxed_slice());
        }
        if let Some(items) = schema.get("items") {
            return Node::Array(self.node_of(defs, items, by_name));
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            return Node::Map(self.node_of(defs, values, by_name));
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            if let [one] = all.as_slice() {
                let i = self.node_of(defs, one, by_name);
                return match &self.nodes[i] {
                    Node::Object(m) => Node::Object(m.clone()),
                    Node::Array(n) => Node::Array(*n),
                    Node::Map(n) => Node::Map(*n),
                    Node::Leaf => Node::Leaf,
                };
            }
        }
        Node::Leaf
    }

    fn member(&self, node: usize, name: &str) -> Option<usize> {
        match &self.nodes[node] {
            Node::Object(members) => members
                .binary_search_by(|(k, _)| (**k).cmp(name))
                .ok()
                .map(|i| members[i].1),
            _ => None,
        }
    }

    /// Records (and with `strip` removes) the members of `value` that `node` does not have,
    /// recursively; `path` is the dotted path of `value` (`spec.template.spec.containers[0]`).
    fn walk(
        &self,
        node: usize,
        value: &mut Value,
        path: &mut String,
        directives: bool,
        strip: bool,
        unknown: &mut Vec<String>,
    ) {
        let enter = |path: &mut String, key: &str| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            len
        };
        match (&self.nodes[node], value) {
            (Node::Object(_), Value::Object(members)) => {
                let mut gone = Vec::new();
                for (key, member) in members.iter_mut() {
                    // A null unsets: a patch may remove a field it once set, known or not.
                    if (directives && key.starts_with('$')) || member.is_null() {
                        continue;
                    }
                    let len = enter(path, key);
                    match self.member(node, key) {
                        Some(sub) => self.walk(sub, member, path, directives, strip, unknown),
                        None => {
                            unknown.push(path.clone());
                            gone.push(key.clone());
                        }
                    }
                    path.truncate(len);
                }
                if strip {
                    for key in gone {
                        members.remove(&key);
                    }
                }
            }
            (Node::Map(sub), Value::Object(members)) => {
                for (key, member) in members.iter_mut() {
                    if directives && key.starts_with('$') {
                        continue;
                    }
                    let len = enter(path, key);
                    self.walk(*sub, member, path, directives, strip, unknown);
                    path.truncate(len);
                }
            }
            (Node::Array(sub), Value::Array(items)) => {
                for (i, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.walk(*sub, item, path, directives, strip, unknown);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// Checks one JSON patch operation: the fields its path names and those of its value.
    /// Returns whether to keep the operation.
    fn json_patch_op(
        &self,
        root: usize,
        op: &mut Value,
        strip: bool,
        unknown: &mut Vec<String>,
    ) -> bool {
        let Some(pointer) = op.get("path").and_then(Value::as_str).map(str::to_string) else {
            return true;
        };
        let mut node = root;
        let mut path = String::new();
        for token in pointer.split('/').skip(1) {
            let token = token.replace("~1", "/").replace("~0", "~");
            match &self.nodes[node] {
                Node::Object(_) | Node::Map(_) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&token);
                    node = match (&self.nodes[node], self.member(node, &token)) {
                        (Node::Map(sub), _) => *sub,
                        (_, Some(sub)) => sub,
                        (_, None) => {
                            unknown.push(path);
                            return !strip;
                        }
                    };
                }
                Node::Array(sub) => {
                    path.push_str(&format!("[{token}]"));
                    node = *sub;
                }
                Node::Leaf => return true,
            }
        }
        if let Some(value) = op.get_mut("value") {
            self.walk(node, value, &mut path, false, strip, unknown);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        kind: Kind,
        shape: BodyShape,
        mode: FieldValidation,
        mut body: Value,
    ) -> (Result<Vec<String>, ApiError>, Value) {
        let r = validate_fields(kind, shape, mode, &mut body, &[]);
        (r, body)
    }

    #[test]
    fn strict_names_every_unknown_field_by_its_path() {
        let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labelz": {}},
            "spec": {"replicaz": 2, "template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "imagez": "y"}]}}}});
        let (r, _) = check(
            Kind::Deployment,
            BodyShape::Object,
            FieldValidation::Strict,
            body,
        );
        let e = r.unwrap_err();
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.0.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"metadata.labelz\", unknown field \"spec.replicaz\", unknown field \"spec.template.spec.containers[1].imagez\""
        );
    }

    #[test]
    fn warn_and_ignore_drop_unknown_fields_and_keep_the_rest() {
        let body = json!({"metadata": {"name": "c", "labels": {"any": "thing"}}, "data": {"k": "v"}, "dataz": 1});
        let (r, out) = check(
            Kind::ConfigMap,
            BodyShape::Object,
            FieldValidation::Warn,
            body.clone(),
        );
        assert_eq!(r.unwrap(), vec!["unknown field \"dataz\"".to_string()]);
        assert_eq!(
            out,
            json!({"metadata": {"name": "c", "labels": {"any": "thing"}}, "data": {"k": "v"}})
        );
        let (r, out2) = check(
            Kind::ConfigMap,
            BodyShape::Object,
            FieldValidation::Ignore,
            body,
        );
        assert_eq!(r.unwrap().len(), 1);
        assert_eq!(out, out2);
    }

    #[test]
    fn opaque_fields_and_patch_directives_are_not_unknown() {
        let body = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}],
            "containers": [{"name": "a", "lifecycle": {"anything": {"goes": 1}}, "$patch": "replace"}],
            "topologySpreadConstraints": [{"maxSkew": 1}]}}}});
        let (r, _) = check(
            Kind::Deployment,
            BodyShape::StrategicPatch,
            FieldValidation::Strict,
            body.clone(),
        );
        assert!(r.unwrap().is_empty());
        let (r, _) = check(
            Kind::Deployment,
            BodyShape::MergePatch,
            FieldValidation::Strict,
            body,
        );
        assert!(r
            .unwrap_err()
            .0
            .message
            .contains("unknown field \"spec.template.spec.$setElementOrder/containers\""));
    }

    #[test]
    fn a_known_etag_gets_not_modified() {
        let served = Served::new(&json!({"a": 1}));
        let fresh = answer(&served, None, true);
        assert_eq!(fresh.status(), StatusCode::Ok);
        let etag = fresh.header("ETag").unwrap().last().as_str().to_string();
        assert_eq!(etag, format!("\"{}\"", served.etag));
        let again = answer(&served, Some(&format!("\"x\", {etag}")), true);
        assert_eq!(again.status(), StatusCode::NotModified);
        assert_eq!(
            answer(&served, Some("\"other\""), true).status(),
            StatusCode::Ok
        );
    }

    #[test]
    fn repeated_members_are_duplicate_fields_and_the_last_wins() {
        let mut dups = Vec::new();
        let text = br#"{"metadata": {"name": "a", "name": "b"}, "data": {"k": "1"}, "spec": [{"x": 1, "x": 2}], "data": {"k": "2"}}"#;
        let v = parse_json_noting_duplicates(text, &mut dups).unwrap();
        assert_eq!(dups, ["metadata.name", "spec[0].x", "data"]);
        assert_eq!(v["metadata"]["name"], "b");
        assert_eq!(v["data"]["k"], "2");
        let mut cm = json!({"metadata": {"name": "b"}});
        let e = validate_fields(
            Kind::ConfigMap,
            BodyShape::Object,
            FieldValidation::Strict,
            &mut cm,
            &["metadata.name".into()],
        )
        .unwrap_err();
        assert!(
            e.0.message
                .ends_with("strict decoding error: duplicate field \"metadata.name\""),
            "{}",
            e.0.message
        );
    }

    #[test]
    fn nulls_unset_and_are_never_unknown() {
        let body = json!({"spec": {"replicas": 2, "replicaz": null, "template": {"spec": {"containers": [{"name": "a", "imagez": null}]}}}});
        let (r, _) = check(
            Kind::Deployment,
            BodyShape::StrategicPatch,
            FieldValidation::Strict,
            body,
        );
        assert!(r.unwrap().is_empty());
    }

    #[test]
    fn json_patch_paths_and_values_are_checked() {
        let body = json!([
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/spec/replicaz", "value": 3},
            {"op": "add", "path": "/spec/template/spec/containers/0", "value": {"name": "b", "imagez": "x"}},
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "c"},
        ]);
        let (r, _) = check(
            Kind::Deployment,
            BodyShape::JsonPatch,
            FieldValidation::Strict,
            body.clone(),
        );
        let msg = r.unwrap_err().0.message;
        assert!(msg.ends_with("unknown field \"spec.replicaz\", unknown field \"spec.template.spec.containers[0].imagez\""), "{msg}");
        let (r, out) = check(
            Kind::Deployment,
            BodyShape::JsonPatch,
            FieldValidation::Warn,
            body,
        );
        assert_eq!(r.unwrap().len(), 2);
        assert_eq!(out.as_array().unwrap().len(), 3);
        assert_eq!(out[1]["value"], json!({"name": "b"}));
    }

    #[test]
    fn documents_index_every_group_version_and_patch_metadata_follows_the_server_merge() {
        let docs = v3();
        let index: Value = serde_json::from_slice(&docs.index.body).unwrap();
        for gv in ["api/v1", "apis/apps/v1"] {
            let url = index["paths"][gv]["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{gv}?hash=")), "{url}");
        }
        let apps: Value =
            serde_json::from_slice(&docs.by_group_version["apis/apps/v1"].body).unwrap();
        let patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert!(patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
        assert!(
            patch["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object()
        );
        let schemas = &apps["components"]["schemas"];
        let pod_spec = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"];
        assert_eq!(
            pod_spec["containers"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            pod_spec["volumes"]["x-kubernetes-patch-strategy"],
            "merge,retainKeys"
        );
        let container = &schemas["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(
            container["ports"]["x-kubernetes-patch-merge-key"],
            "containerPort"
        );
        assert!(container["args"]
            .get("x-kubernetes-patch-strategy")
            .is_none());
        assert!(
            schemas.get("io.k8s.api.core.v1.Service").is_none(),
            "apps/v1 carries core kinds"
        );
        let core: Value = serde_json::from_slice(&docs.by_group_version["api/v1"].body).unwrap();
        let svc = &core["components"]["schemas"]["io.k8s.api.core.v1.ServiceSpec"]["properties"];
        assert_eq!(svc["ports"]["x-kubernetes-patch-merge-key"], "port");
        let v2_doc: Value = serde_json::from_slice(&v2().body).unwrap();
        assert_eq!(v2_doc["swagger"], "2.0");
        assert_eq!(
            v2_doc["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["template"]
                ["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"
        );
        assert!(!String::from_utf8_lossy(&v2().body).contains("#/components/"));
    }
}
