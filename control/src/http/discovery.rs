//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/apps/v1`), their aggregated form
//! (`apidiscovery.k8s.io/v2` APIGroupDiscoveryList, which kubectl asks `/api` and `/apis`
//! for first) and `/version`.

use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;
use serde_json::{json, Value};
use tide::http::StatusCode;

use crate::resources::{Entry, Remote, Table};

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    })
}

fn group_entry(table: &Table, group: &str) -> Value {
    // The preferred (stored) version first.
    let versions = table
        .group(group)
        .map(|g| g.versions.as_slice())
        .unwrap_or_default();
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": entries,
        "preferredVersion": preferred,
    })
}

/// The APIGroupList, in kube-aggregator's order of groups.
pub fn group_list(table: &Table) -> Value {
    let groups: Vec<Value> = table
        .legacy_groups()
        .into_iter()
        .map(|g| group_entry(table, &g.name))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(table: &Table, name: &str) -> Value {
    let mut g = group_entry(table, name);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

/// One APIResource of a group version's discovery (a resource or a subresource), as
/// kube-apiserver's installer makes it: the aggregated document is made from these, as
/// kube-apiserver makes it from its APIResourceList.
struct ApiResource<'a> {
    plural: &'a str,
    /// `log` of `pods/log`.
    subresource: Option<&'a str>,
    singular: &'a str,
    namespaced: bool,
    kind: &'a str,
    /// The group and version of the kind, when not the group version listed (`pods/eviction`).
    group_version: Option<(&'a str, &'a str)>,
    verbs: &'a [&'a str],
    short_names: &'a [Arc<str>],
    categories: &'a [Arc<str>],
}

impl ApiResource<'_> {
    /// As an APIResourceList lists it.
    fn to_json(&self) -> Value {
        let name = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.plural),
            None => self.plural.to_string(),
        };
        let mut r = json!({
            "name": name,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            r["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            r["categories"] = json!(self.categories);
        }
        if let Some((group, version)) = self.group_version {
            r["group"] = json!(group);
            r["version"] = json!(version);
        }
        r
    }
}

/// The APIResources of a resource and of its subresources.
fn resource_entries<'a>(e: &'a Entry, out: &mut Vec<ApiResource<'a>>) {
    out.push(ApiResource {
        plural: &e.plural,
        subresource: None,
        singular: &e.singular,
        namespaced: e.namespaced,
        kind: &e.kind,
        group_version: None,
        verbs: e.verbs,
        short_names: &e.short_names,
        categories: &e.categories,
    });
    for s in &e.subresources {
        out.push(ApiResource {
            plural: &e.plural,
            subresource: Some(&s.name),
            singular: "",
            namespaced: e.namespaced,
            kind: &s.kind,
            group_version: s.group_version.as_ref().map(|(g, v)| (&**g, &**v)),
            verbs: s.verbs,
            short_names: &[],
            categories: &[],
        });
    }
}

/// The APIResources of a group version, with subresources, in the table's order.
fn api_resources<'a>(table: &'a Table, group: &'a str, version: &'a str) -> Vec<ApiResource<'a>> {
    let mut resources = Vec::new();
    for e in table.at_version(group, version) {
        resource_entries(e, &mut resources);
    }
    if group.is_empty() {
        resources.push(ApiResource {
            plural: "bindings",
            subresource: None,
            singular: "binding",
            namespaced: true,
            kind: "Binding",
            group_version: None,
            verbs: &["create"],
            short_names: &[],
            categories: &[],
        });
    }
    resources
}

/// The APIResourceList of a group version, with subresources.
pub fn resource_list(table: &Table, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = api_resources(table, group, version)
        .iter()
        .map(ApiResource::to_json)
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

// ---------------------------------------------------------------------------------------
// Aggregated discovery: apidiscovery.k8s.io/v2 (and v2beta1, which kube-apiserver 1.32 still
// serves), the fields in the order and with the omissions of k8s.io/api/apidiscovery/v2's
// types as Go's encoding/json writes them.

/// A version of the aggregated discovery document a client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregatedVersion {
    V2,
    V2Beta1,
}

impl AggregatedVersion {
    pub fn name(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => "v2",
            AggregatedVersion::V2Beta1 => "v2beta1",
        }
    }

    /// The answer's `Content-Type`: the media type with the group, version and kind served,
    /// as kube-apiserver writes it (responsewriters' `generateMediaTypeWithGVK`).
    pub fn content_type(self) -> String {
        format!(
            "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
            self.name()
        )
    }
}

/// One media range of an `Accept` header, as goautoneg's `ParseAccept` reads it.
pub(super) struct MediaRange<'a> {
    q: f64,
    ty: &'a str,
    sub: &'a str,
    /// The parameters but `q`, in order (a repeated one: the last wins).
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> MediaRange<'a> {
    pub(super) fn parse(part: &'a str) -> Option<MediaRange<'a>> {
        let mut pieces = part.split(';');
        let range = pieces.next().unwrap_or("");
        let (ty, sub) = match range.split('/').collect::<Vec<_>>()[..] {
            [ty] if ty.trim() == "*" => ("*", "*"),
            [ty, sub] => (ty.trim(), sub.trim()),
            _ => return None,
        };
        let mut range = MediaRange {
            q: 1.0,
            ty,
            sub,
            params: Vec::new(),
        };
        for p in pieces {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            match k.trim() {
                // Go's ParseFloat: anything else (even with spaces) is 0. NaN, before which
                // Go's comparisons put nothing, is 0 too.
                "q" => range.q = v.parse().ok().filter(|q: &f64| !q.is_nan()).unwrap_or(0.0),
                k => range.params.push((k, v.trim())),
            }
        }
        Some(range)
    }

    pub(super) fn param(&self, name: &str) -> &'a str {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map_or("", |(_, v)| v)
    }
}

/// Whether `/api` or `/apis` answers the aggregated document, and which version, for this
/// `Accept` header, as kube's `WrappedHandler` negotiates it with the discovery endpoint
/// restrictions: the media ranges by `q` (highest first), then the more specific first; the
/// first that a discovery serializer (JSON, YAML, protobuf) can answer decides. A range with
/// `as`/`g`/`v` naming anything but an aggregated discovery list, with `sv`, or with a
/// `stream` other than `watch` is passed over; a range without them answers the APIVersions
/// or APIGroupList (None). kube-apiserver also answers YAML and protobuf aggregated
/// documents; here a range asking for those is passed over, and a later one decides.
pub fn negotiate_aggregated(accept: Option<&str>) -> Option<AggregatedVersion> {
    let accept = accept.filter(|a| !a.is_empty())?;
    let mut ranges: Vec<MediaRange> = accept.split(',').filter_map(MediaRange::parse).collect();
    // goautoneg's order: higher q first, then a type before `*`, a subtype before `*`.
    ranges.sort_by(|a, b| {
        // A total order: Rust's sort may panic on any other.
        b.q.total_cmp(&a.q)
            .then((b.ty != "*").cmp(&(a.ty != "*")))
            .then((b.sub != "*").cmp(&(a.sub != "*")))
    });
    for range in ranges {
        // The discovery serializers' media types (all application/...), JSON first.
        let serializer = ["json", "yaml", "vnd.kubernetes.protobuf"]
            .into_iter()
            .find(|s| {
                range.ty == "*" || (range.ty == "application" && [*s, "*"].contains(&range.sub))
            });
        let Some(serializer) = serializer else {
            continue;
        };
        let stream = range.param("stream");
        if !range.param("sv").is_empty()
            || !(stream.is_empty() || (stream == "watch" && serializer != "yaml"))
        {
            continue;
        }
        let converts = range
            .params
            .iter()
            .any(|(k, _)| matches!(*k, "as" | "g" | "v"));
        if !converts {
            return None;
        }
        let version = match (range.param("g"), range.param("v"), range.param("as")) {
            ("apidiscovery.k8s.io", "v2", "APIGroupDiscoveryList") => AggregatedVersion::V2,
            ("apidiscovery.k8s.io", "v2beta1", "APIGroupDiscoveryList") => {
                AggregatedVersion::V2Beta1
            }
            _ => continue,
        };
        if serializer == "json" {
            return Some(version);
        }
    }
    None
}

#[derive(Serialize)]
struct GroupVersionKind<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SubresourceDiscovery<'a> {
    subresource: &'a str,
    response_kind: GroupVersionKind<'a>,
    // `acceptedTypes` (omitempty): kube-apiserver fills it for no built-in subresource.
    verbs: Vec<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceDiscovery<'a> {
    resource: &'a str,
    response_kind: GroupVersionKind<'a>,
    scope: &'static str,
    singular_resource: &'a str,
    verbs: Vec<&'a str>,
    #[serde(skip_serializing_if = "no_names")]
    short_names: &'a [Arc<str>],
    #[serde(skip_serializing_if = "no_names")]
    categories: &'a [Arc<str>],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    subresources: Vec<SubresourceDiscovery<'a>>,
}

fn no_names(names: &&[Arc<str>]) -> bool {
    names.is_empty()
}

#[derive(Serialize)]
struct VersionDiscovery<'a> {
    version: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    resources: Vec<ResourceDiscovery<'a>>,
    freshness: &'static str,
}

/// APIGroupDiscovery's ObjectMeta: the name (left out for the core group's ""), and the
/// `creationTimestamp: null` encoding/json writes for a zero `metav1.Time`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupMeta<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    creation_timestamp: (),
}

#[derive(Serialize)]
struct GroupDiscovery<'a> {
    metadata: GroupMeta<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    versions: Vec<VersionDiscovery<'a>>,
}

/// The resources of a group version as the aggregated document lists them, converted from
/// its APIResources as kube-apiserver's `ConvertGroupVersionIntoToDiscovery` does: resources
/// in the order of their paths (kube's installer registers them sorted), each with its
/// subresources, also by path. The response kind of a built-in resource has an empty group
/// and version: kube's installer fills them only for a storage that names its kind's group
/// version, such as `deployments/scale`'s autoscaling/v1 Scale.
fn version_discovery<'a>(
    table: &'a Table,
    group: &'a str,
    version: &'a str,
) -> VersionDiscovery<'a> {
    let mut list = api_resources(table, group, version);
    // By path: `pods`, then `pods/attach` ... `pods/status`; top-level resources and each
    // resource's subresources keep that order among themselves.
    list.sort_by(|a, b| (a.plural, a.subresource).cmp(&(b.plural, b.subresource)));
    let verbs = |verbs: &[&'a str]| {
        let mut v = verbs.to_vec();
        v.sort_unstable();
        v
    };
    let kind = |r: &ApiResource<'a>| {
        let (group, version) = r.group_version.unwrap_or(("", ""));
        GroupVersionKind {
            group,
            version,
            kind: r.kind,
        }
    };
    let mut resources: Vec<ResourceDiscovery<'a>> = Vec::new();
    for r in list.iter().filter(|r| r.subresource.is_none()) {
        resources.push(ResourceDiscovery {
            resource: r.plural,
            response_kind: kind(r),
            scope: if r.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            },
            singular_resource: r.singular,
            verbs: verbs(r.verbs),
            short_names: r.short_names,
            categories: r.categories,
            subresources: Vec::new(),
        });
    }
    for r in &list {
        let Some(sub) = r.subresource else {
            continue;
        };
        // Every subresource of the table has its resource.
        if let Some(parent) = resources.iter_mut().find(|p| p.resource == r.plural) {
            parent.subresources.push(SubresourceDiscovery {
                subresource: sub,
                response_kind: kind(r),
                verbs: verbs(r.verbs),
            });
        }
    }
    VersionDiscovery {
        version,
        resources,
        freshness: "Current",
    }
}

/// An extension API server's group version as the aggregated document lists it: its
/// APIResourceList converted as kube-apiserver's `ConvertGroupVersionIntoToDiscovery` does
/// (the backend's order and verbs as listed; a subresource under its resource, a resource
/// made up for a subresource listed without one), `Current`; or, while its discovery is
/// unknown or failing, the version alone, `Stale` (kube-aggregator's discovery manager).
fn remote_version_discovery(remote: &Remote) -> VersionDiscovery<'_> {
    let Some(list) = &remote.resources else {
        return VersionDiscovery {
            version: &remote.version,
            resources: Vec::new(),
            freshness: "Stale",
        };
    };
    let scope = |namespaced: bool| if namespaced { "Namespaced" } else { "Cluster" };
    fn kind(r: &crate::resources::RemoteResource) -> GroupVersionKind<'_> {
        GroupVersionKind {
            group: r.group.as_deref().unwrap_or(""),
            version: r.version.as_deref().unwrap_or(""),
            kind: &r.kind,
        }
    }
    let none = || GroupVersionKind {
        group: "",
        version: "",
        kind: "",
    };
    let mut resources: Vec<ResourceDiscovery<'_>> = Vec::new();
    for r in list.iter().filter(|r| !r.name.contains('/')) {
        resources.push(ResourceDiscovery {
            resource: &r.name,
            response_kind: kind(r),
            scope: scope(r.namespaced),
            singular_resource: &r.singular,
            verbs: r.verbs.iter().map(String::as_str).collect(),
            short_names: &r.short_names,
            categories: &r.categories,
            subresources: Vec::new(),
        });
    }
    for r in list.iter() {
        let Some((parent, sub)) = r.name.split_once('/') else {
            continue;
        };
        let i = match resources.iter().position(|p| p.resource == parent) {
            Some(i) => i,
            None => {
                resources.push(ResourceDiscovery {
                    resource: parent,
                    response_kind: none(),
                    scope: scope(r.namespaced),
                    singular_resource: "",
                    verbs: Vec::new(),
                    short_names: &[],
                    categories: &[],
                    subresources: Vec::new(),
                });
                resources.len() - 1
            }
        };
        // kube refuses a subresource whose scope is not its resource's.
        if resources[i].scope != scope(r.namespaced) {
            continue;
        }
        resources[i].subresources.push(SubresourceDiscovery {
            subresource: sub,
            response_kind: if r.kind.is_empty() { none() } else { kind(r) },
            verbs: r.verbs.iter().map(String::as_str).collect(),
        });
    }
    VersionDiscovery {
        version: &remote.version,
        resources,
        freshness: "Current",
    }
}

/// An aggregated discovery document as served: its `items` and its ETag.
#[derive(Debug)]
pub struct Aggregated {
    /// The JSON array of APIGroupDiscovery.
    items: Vec<u8>,
    /// kube-apiserver's: the SHA-512 of the JSON of the list without its kind and apiVersion
    /// (`{"metadata":{},"items":[...]}`), in upper-case hex (aggregated/etag.go).
    etag: String,
}

impl Aggregated {
    fn new(groups: &[GroupDiscovery]) -> Aggregated {
        let items = serde_json::to_vec(groups).unwrap_or_default();
        let mut hashed = Vec::with_capacity(items.len() + 32);
        hashed.extend_from_slice(br#"{"metadata":{},"items":"#);
        hashed.extend_from_slice(&items);
        hashed.push(b'}');
        let digest = ring::digest::digest(&ring::digest::SHA512, &hashed);
        let etag = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
        Aggregated { items, etag }
    }

    /// The APIGroupDiscoveryList at `version`.
    pub fn body(&self, version: AggregatedVersion) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.items.len() + 120);
        body.extend_from_slice(
            format!(
                r#"{{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/{}","metadata":{{}},"items":"#,
                version.name()
            )
            .as_bytes(),
        );
        body.extend_from_slice(&self.items);
        body.push(b'}');
        body
    }

    /// The quoted ETag.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.etag)
    }
}

fn group_discovery<'a>(table: &'a Table, name: &'a str) -> GroupDiscovery<'a> {
    let versions = table
        .group(name)
        .map(|g| g.versions.as_slice())
        .unwrap_or_default();
    GroupDiscovery {
        metadata: GroupMeta {
            name,
            creation_timestamp: (),
        },
        versions: versions
            .iter()
            .map(|v| match table.remote(name, v) {
                Some(remote) => remote_version_discovery(remote),
                None => version_discovery(table, name, v),
            })
            .collect(),
    }
}

/// `/api`'s aggregated document (the core group) and `/apis`' (the named groups, in
/// discovery order), built from a table.
fn build(table: &Table) -> (Aggregated, Aggregated) {
    let core = Aggregated::new(&[group_discovery(table, "")]);
    let groups: Vec<GroupDiscovery> = table
        .groups()
        .map(|g| group_discovery(table, &g.name))
        .collect();
    (core, Aggregated::new(&groups))
}

struct Cached {
    table: Weak<Table>,
    core: Arc<Aggregated>,
    groups: Arc<Aggregated>,
}

/// The documents of the last table asked for: a table never changes, and a new one (a
/// custom resource established) replaces the old whole.
static CACHE: Mutex<Option<Cached>> = Mutex::new(None);

/// The aggregated document of `/api` (`core`) or `/apis` for this table, built once per table.
pub fn aggregated(table: &Arc<Table>, core: bool) -> Arc<Aggregated> {
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let fresh = cache.as_ref().is_some_and(|c| {
        std::ptr::eq(c.table.as_ptr(), Arc::as_ptr(table)) && c.table.strong_count() > 0
    });
    if !fresh {
        let (c, g) = build(table);
        *cache = Some(Cached {
            table: Arc::downgrade(table),
            core: Arc::new(c),
            groups: Arc::new(g),
        });
    }
    let c = cache.as_ref().expect("just filled");
    if core {
        c.core.clone()
    } else {
        c.groups.clone()
    }
}

/// The answer to a GET of `/api` (`core`) or `/apis` that asked for the aggregated document:
/// as kube-apiserver's `ServeHTTPWithETag`, with `ETag`, `Vary: Accept` and
/// `Cache-Control: public`, and 304 Not Modified (no body) when `If-None-Match` is that ETag.
pub fn serve_aggregated(
    table: &Arc<Table>,
    core: bool,
    version: AggregatedVersion,
    if_none_match: Option<&str>,
) -> tide::Response {
    let doc = aggregated(table, core);
    let etag = doc.etag();
    let mut r = if if_none_match.is_some_and(|t| t.trim() == etag) {
        tide::Response::new(StatusCode::NotModified)
    } else {
        let mut r = tide::Response::new(StatusCode::Ok);
        r.set_body(doc.body(version));
        r.insert_header("Content-Type", version.content_type());
        r
    };
    r.insert_header("ETag", etag);
    r.insert_header("Vary", "Accept");
    r.insert_header("Cache-Control", "public");
    r
}

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": format!("v1.32.0+skiff-{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": option_env!("SKIFF_GIT_COMMIT").unwrap_or("unknown"),
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

/// The architecture as Go (and so Kubernetes) names it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const KUBECTL: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    #[test]
    fn negotiation() {
        use AggregatedVersion::*;
        let cases: &[(Option<&str>, Option<AggregatedVersion>)] = &[
            (Some(KUBECTL), Some(V2)),
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
                Some(V2Beta1),
            ),
            // Parameters in any order, with spaces.
            (
                Some("application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io"),
                Some(V2),
            ),
            (None, None),
            (Some(""), None),
            (Some("application/json"), None),
            (Some("*/*"), None),
            (Some("application/json, */*"), None),
            (Some("text/html"), None),
            // The first acceptable range decides.
            (
                Some("application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
                None,
            ),
            (
                Some("application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
                Some(V2),
            ),
            // A conversion discovery does not serve is skipped, as are unknown versions.
            (
                Some("application/json;as=Table;g=meta.k8s.io;v=v1,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
                Some(V2),
            ),
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,application/json"),
                None,
            ),
            (Some("application/json;as=APIGroupDiscoveryList"), None),
            // Protobuf and YAML aggregated documents are not answered here: the next range is.
            (
                Some("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
                Some(V2),
            ),
            (
                Some("application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
                None,
            ),
            // As kube: q=0 only orders (last).
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0"),
                Some(V2),
            ),
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json;q=0.1"),
                None,
            ),
            (
                Some("application/json;q=NaN,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=nan,*/*;q=0.5;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
                Some(V2),
            ),
            // Watch streams are served; other streams and server versions are not.
            (
                Some("application/json;stream=watch;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
                Some(V2),
            ),
            (
                Some("application/json;sv=v1;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
                None,
            ),
            (
                Some("*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
                Some(V2),
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate_aggregated(*accept), *want, "{accept:?}");
        }
    }

    fn body_of(table: &Arc<Table>, core: bool) -> (Vec<u8>, Value) {
        let body = aggregated(table, core).body(AggregatedVersion::V2);
        let v = serde_json::from_slice(&body).expect("JSON");
        (body, v)
    }

    #[test]
    fn the_core_document() {
        let table = Arc::new(Table::builtin());
        let (body, v) = body_of(&table, true);
        let text = String::from_utf8(body).expect("UTF-8");
        // Field order and omissions as kube-apiserver writes them; the core group's metadata
        // has no name, and encoding/json's null creationTimestamp.
        assert!(
            text.starts_with(
                r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"bindings","responseKind":{"group":"","version":"","kind":"Binding"},"scope":"Namespaced","singularResource":"binding","verbs":["create"]},{"resource":"configmaps","responseKind":{"group":"","version":"","kind":"ConfigMap"},"scope":"Namespaced","singularResource":"configmap","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["cm"]},"#
            ),
            "{text}"
        );
        assert!(text.ends_with(r#"],"freshness":"Current"}]}]}"#), "{text}");
        assert!(
            text.contains(
                r#"{"resource":"pods","responseKind":{"group":"","version":"","kind":"Pod"},"scope":"Namespaced","singularResource":"pod","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["po"],"categories":["all"],"subresources":[{"subresource":"attach","responseKind":{"group":"","version":"","kind":"PodAttachOptions"},"verbs":["create","get"]},{"subresource":"binding","responseKind":{"group":"","version":"","kind":"Binding"},"verbs":["create"]},{"subresource":"ephemeralcontainers","responseKind":{"group":"","version":"","kind":"Pod"},"verbs":["get","patch","update"]},{"subresource":"eviction","responseKind":{"group":"policy","version":"v1","kind":"Eviction"},"verbs":["create"]},{"subresource":"exec","responseKind":{"group":"","version":"","kind":"PodExecOptions"},"verbs":["create","get"]},{"subresource":"log","responseKind":{"group":"","version":"","kind":"Pod"},"verbs":["get"]},{"subresource":"portforward","responseKind":{"group":"","version":"","kind":"PodPortForwardOptions"},"verbs":["create","get"]},{"subresource":"status","responseKind":{"group":"","version":"","kind":"Pod"},"verbs":["get","patch","update"]}]}"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"{"subresource":"token","responseKind":{"group":"authentication.k8s.io","version":"v1","kind":"TokenRequest"},"verbs":["create"]}"#
        ));
        assert!(text.contains(
            r#"{"resource":"namespaces","responseKind":{"group":"","version":"","kind":"Namespace"},"scope":"Cluster","#
        ));
        assert_eq!(v["items"].as_array().map(Vec::len), Some(1));
        // Resources by name, as kube's installer registers them.
        let names: Vec<&str> = v["items"][0]["versions"][0]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["resource"].as_str())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn the_groups_document() {
        let table = Arc::new(Table::builtin());
        let (body, v) = body_of(&table, false);
        let text = String::from_utf8(body).expect("UTF-8");
        assert!(text.starts_with(
            r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"name":"apiregistration.k8s.io","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"apiservices","responseKind":{"group":"","version":"","kind":"APIService"},"scope":"Cluster","singularResource":"apiservice","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"categories":["api-extensions"],"subresources":[{"subresource":"status","responseKind":{"group":"","version":"","kind":"APIService"},"verbs":["get","patch","update"]}]}],"freshness":"Current"}]},{"metadata":{"name":"apps","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"controllerrevisions","#
        ));
        assert!(text.contains(
            r#"{"resource":"deployments","responseKind":{"group":"","version":"","kind":"Deployment"},"scope":"Namespaced","singularResource":"deployment","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["deploy"],"categories":["all"],"subresources":[{"subresource":"scale","responseKind":{"group":"autoscaling","version":"v1","kind":"Scale"},"verbs":["get","patch","update"]},{"subresource":"status","responseKind":{"group":"","version":"","kind":"Deployment"},"verbs":["get","patch","update"]}]}"#
        ));
        // The groups in the table's (kube-apiserver's) order, the core group left out.
        let items = v["items"].as_array().expect("items");
        let names: Vec<&str> = items
            .iter()
            .filter_map(|g| g["metadata"]["name"].as_str())
            .collect();
        let want: Vec<&str> = table.groups().map(|g| &*g.name).collect();
        assert_eq!(names, want);
        assert_eq!(names.len(), items.len());
        // autoscaling: v2 (versionPriority 30) before v1 (15), each with its resources.
        let autoscaling = items
            .iter()
            .find(|g| g["metadata"]["name"] == "autoscaling")
            .expect("autoscaling");
        let versions: Vec<&str> = autoscaling["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .filter_map(|v| v["version"].as_str())
            .collect();
        assert_eq!(versions, ["v2", "v1"]);
        for v in autoscaling["versions"].as_array().expect("versions") {
            assert_eq!(v["freshness"], "Current");
            assert_eq!(v["resources"][0]["resource"], "horizontalpodautoscalers");
        }
        let reviews = items
            .iter()
            .find(|g| g["metadata"]["name"] == "authorization.k8s.io")
            .expect("authorization.k8s.io");
        let sar = &reviews["versions"][0]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == "subjectaccessreviews")
            .cloned()
            .expect("subjectaccessreviews");
        assert_eq!(sar["scope"], "Cluster");
        assert_eq!(sar["verbs"], json!(["create"]));
        assert!(sar.get("subresources").is_none() && sar.get("shortNames").is_none());
    }

    /// Client-go's reading of the aggregated document (`SplitGroupsAndResources`) gives the
    /// APIResources of the per-version documents.
    #[test]
    fn the_same_resources_as_the_per_version_documents() {
        type Resource = (String, String, bool, Vec<String>, String, String);
        fn of(v: &Value) -> Resource {
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let mut verbs: Vec<String> = v["verbs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            verbs.sort();
            (
                s("name"),
                s("kind"),
                v["namespaced"] == json!(true),
                verbs,
                s("group"),
                s("version"),
            )
        }
        let table = Arc::new(Table::builtin());
        let mut docs: Vec<Value> = vec![body_of(&table, true).1];
        docs.push(body_of(&table, false).1);
        let mut seen = 0;
        for doc in &docs {
            for g in doc["items"].as_array().expect("items") {
                let group = g["metadata"]["name"].as_str().unwrap_or_default();
                for v in g["versions"].as_array().expect("versions") {
                    let version = v["version"].as_str().expect("version");
                    let mut from_aggregated = BTreeSet::new();
                    for r in v["resources"].as_array().expect("resources") {
                        let namespaced = r["scope"] == "Namespaced";
                        let mut top = json!({
                            "name": r["resource"], "kind": r["responseKind"]["kind"],
                            "namespaced": namespaced, "verbs": r["verbs"],
                        });
                        for k in ["group", "version"] {
                            if r["responseKind"][k] != "" {
                                top[k] = r["responseKind"][k].clone();
                            }
                        }
                        from_aggregated.insert(of(&top));
                        for s in r["subresources"].as_array().into_iter().flatten() {
                            let mut sub = json!({
                                "name": format!("{}/{}", r["resource"].as_str().unwrap_or_default(), s["subresource"].as_str().unwrap_or_default()),
                                "kind": s["responseKind"]["kind"], "namespaced": namespaced,
                                "verbs": s["verbs"],
                            });
                            for k in ["group", "version"] {
                                if s["responseKind"][k] != "" {
                                    sub[k] = s["responseKind"][k].clone();
                                }
                            }
                            from_aggregated.insert(of(&sub));
                        }
                    }
                    let list = resource_list(&table, group, version);
                    let from_list: BTreeSet<Resource> = list["resources"]
                        .as_array()
                        .expect("resources")
                        .iter()
                        .map(of)
                        .collect();
                    assert_eq!(from_aggregated, from_list, "{group}/{version}");
                    seen += 1;
                }
            }
        }
        // The core group and every version of every named group.
        let versions: usize = table.groups().map(|g| g.versions.len()).sum();
        assert_eq!(seen, versions + 1);
    }

    #[test]
    fn etag_and_not_modified() {
        let table = Arc::new(Table::builtin());
        for core in [true, false] {
            let doc = aggregated(&table, core);
            // kube-apiserver's ETag: SHA-512 of the list without kind and apiVersion.
            let mut hashed = br#"{"metadata":{},"items":"#.to_vec();
            let body = doc.body(AggregatedVersion::V2);
            let items_at = body
                .windows(8)
                .position(|w| w == b"\"items\":")
                .expect("items")
                + 8;
            hashed.extend_from_slice(&body[items_at..]);
            let digest = ring::digest::digest(&ring::digest::SHA512, &hashed);
            let hex: String = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
            assert_eq!(doc.etag(), format!("\"{hex}\""));
            assert_eq!(hex.len(), 128);

            let fresh = serve_aggregated(&table, core, AggregatedVersion::V2, None);
            assert_eq!(fresh.status(), StatusCode::Ok);
            let header = |r: &tide::Response, name: &str| {
                r.header(name).map(|h| h.last().as_str().to_string())
            };
            assert_eq!(header(&fresh, "ETag"), Some(doc.etag()));
            assert_eq!(header(&fresh, "Vary").as_deref(), Some("Accept"));
            assert_eq!(header(&fresh, "Cache-Control").as_deref(), Some("public"));
            assert_eq!(
                header(&fresh, "Content-Type").as_deref(),
                Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
            );
            let mut fresh = fresh;
            let got = smol::block_on(fresh.take_body().into_bytes()).expect("body");
            assert_eq!(got, body);

            let again = serve_aggregated(&table, core, AggregatedVersion::V2, Some(&doc.etag()));
            assert_eq!(again.status(), StatusCode::NotModified);
            assert_eq!(header(&again, "ETag"), Some(doc.etag()));
            assert_eq!(header(&again, "Content-Type"), None);
            let other = serve_aggregated(&table, core, AggregatedVersion::V2, Some("\"other\""));
            assert_eq!(other.status(), StatusCode::Ok);

            // v2beta1: the same document and ETag under its own apiVersion.
            let mut beta = serve_aggregated(&table, core, AggregatedVersion::V2Beta1, None);
            assert_eq!(header(&beta, "ETag"), Some(doc.etag()));
            assert_eq!(
                header(&beta, "Content-Type").as_deref(),
                Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")
            );
            let beta: Value = serde_json::from_slice(
                &smol::block_on(beta.take_body().into_bytes()).expect("body"),
            )
            .expect("JSON");
            assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
            let v2: Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(beta["items"], v2["items"]);
        }
        // The core and the groups documents differ, and a new table gets its own.
        assert_ne!(
            aggregated(&table, true).etag(),
            aggregated(&table, false).etag()
        );
        let again = Arc::new(Table::builtin());
        assert!(!Arc::ptr_eq(
            &aggregated(&table, false),
            &aggregated(&again, false)
        ));
        assert_eq!(
            aggregated(&table, false).etag(),
            aggregated(&again, false).etag()
        );
    }

    #[test]
    fn extension_servers_versions_in_the_aggregated_document() {
        use crate::resources::{Priority, Remote, RemoteResource};
        let widgets = RemoteResource {
            name: "widgets".into(),
            singular: "widget".into(),
            namespaced: true,
            kind: "Widget".into(),
            verbs: vec!["list".into(), "get".into()],
            short_names: vec!["wd".into()],
            ..Default::default()
        };
        let status = RemoteResource {
            name: "widgets/status".into(),
            namespaced: true,
            kind: "Widget".into(),
            group: Some("metrics.example.com".into()),
            version: Some("v1beta1".into()),
            verbs: vec!["get".into()],
            ..Default::default()
        };
        // A subresource listed without its resource gets one made up.
        let orphan = RemoteResource {
            name: "gadgets/scale".into(),
            namespaced: true,
            verbs: vec!["get".into()],
            ..Default::default()
        };
        let priority = Priority {
            group: 1500,
            version: 20,
        };
        let table = Arc::new(Table::with_parts(
            Vec::new(),
            vec![
                Remote {
                    group: "metrics.example.com".into(),
                    version: "v1beta1".into(),
                    priority,
                    resources: Some(Arc::new(vec![widgets, status, orphan])),
                },
                Remote {
                    group: "metrics.example.com".into(),
                    version: "v1alpha1".into(),
                    priority: Priority {
                        group: 1500,
                        version: 5,
                    },
                    resources: None,
                },
            ],
        ));
        let (_, v) = body_of(&table, false);
        let item = v["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["metadata"]["name"] == "metrics.example.com")
            .expect("the group");
        assert_eq!(
            item["versions"],
            json!([
                {"version": "v1beta1", "resources": [
                    {"resource": "widgets", "responseKind": {"group": "", "version": "", "kind": "Widget"},
                     "scope": "Namespaced", "singularResource": "widget", "verbs": ["list", "get"],
                     "shortNames": ["wd"],
                     "subresources": [{"subresource": "status",
                                       "responseKind": {"group": "metrics.example.com", "version": "v1beta1", "kind": "Widget"},
                                       "verbs": ["get"]}]},
                    {"resource": "gadgets", "responseKind": {"group": "", "version": "", "kind": ""},
                     "scope": "Namespaced", "singularResource": "", "verbs": [],
                     "subresources": [{"subresource": "scale",
                                       "responseKind": {"group": "", "version": "", "kind": ""},
                                       "verbs": ["get"]}]}],
                 "freshness": "Current"},
                {"version": "v1alpha1", "freshness": "Stale"}
            ])
        );
        let list = group_list(&table);
        let ours = list["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find(|g| g["name"] == "metrics.example.com")
            .expect("listed");
        assert_eq!(ours["preferredVersion"]["version"], "v1beta1");
    }

    #[test]
    fn the_group_list_in_kube_aggregator_order() {
        let table = Table::builtin();
        let list = group_list(&table);
        let names: Vec<&str> = list["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        let want: Vec<&str> = table.legacy_groups().iter().map(|g| &*g.name).collect();
        assert_eq!(names, want);
        // kube-aggregator's own group first ("it's good to be king").
        assert_eq!(names.first(), Some(&"apiregistration.k8s.io"));
        assert_eq!(names.get(1), Some(&"apps"));
        let autoscaling = list["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find(|g| g["name"] == "autoscaling")
            .expect("autoscaling");
        assert_eq!(autoscaling["preferredVersion"]["version"], "v2");
    }
}
