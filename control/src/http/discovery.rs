//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/apps/v1`) and `/version`.

use serde_json::{json, Value};

use crate::resources::{Entry, Table};

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

pub fn group_list(table: &Table) -> Value {
    let groups: Vec<Value> = table
        .groups()
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

/// An APIResource of a resource and those of its subresources.
fn resource_entries(e: &Entry, out: &mut Vec<Value>) {
    let mut r = json!({
        "name": &*e.plural,
        "singularName": &*e.singular,
        "namespaced": e.namespaced,
        "kind": &*e.kind,
        "verbs": e.verbs,
    });
    if !e.short_names.is_empty() {
        r["shortNames"] = json!(e.short_names);
    }
    if !e.categories.is_empty() {
        r["categories"] = json!(e.categories);
    }
    out.push(r);
    for s in &e.subresources {
        let mut v = json!({
            "name": format!("{}/{}", e.plural, s.name),
            "singularName": "",
            "namespaced": e.namespaced,
            "kind": &*s.kind,
            "verbs": s.verbs,
        });
        if let Some((group, version)) = &s.group_version {
            v["group"] = json!(group);
            v["version"] = json!(version);
        }
        out.push(v);
    }
}

/// The APIResourceList of a group version, with subresources.
pub fn resource_list(table: &Table, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for e in table.at_version(group, version) {
        resource_entries(e, &mut resources);
    }
    if group.is_empty() {
        resources.push(json!({
            "name": "bindings", "singularName": "binding", "namespaced": true, "kind": "Binding", "verbs": ["create"],
        }));
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
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
