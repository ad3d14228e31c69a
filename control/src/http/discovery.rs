//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/apps/v1`) and `/version`.

use api::Kind;
use serde_json::{json, Value};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    })
}

fn group_entry(group: &str) -> Value {
    // The preferred (stored) version first; review groups are served at v1 only.
    let mut versions = super::route::group_versions(group);
    if versions.is_empty() {
        versions.push("v1");
    }
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    })
}

pub fn group_list() -> Value {
    let groups: Vec<Value> = super::route::served_groups()
        .into_iter()
        .chain([
            super::route::AUTHENTICATION_GROUP,
            super::route::AUTHORIZATION_GROUP,
        ])
        .map(group_entry)
        .chain([super::resource_metrics::group_entry()])
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(name: &str) -> Value {
    let mut g = if name == super::route::METRICS_GROUP {
        super::resource_metrics::group_entry()
    } else {
        group_entry(name)
    };
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

fn subresource(name: String, kind: &str, namespaced: bool, verbs: &[&str]) -> Value {
    json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs})
}

/// The APIResourceList of a group version, with subresources.
pub fn resource_list(group: &str, version: &str) -> Value {
    if group == super::route::METRICS_GROUP {
        return super::resource_metrics::resource_list();
    }
    let mut resources = super::review::resources(group);
    for kind in Kind::ALL.iter().filter(|k| {
        k.info().group == group
            && (k.info().version == version || super::route::legacy_version(**k) == Some(version))
    }) {
        let i = kind.info();
        let mut r = json!({
            "name": i.plural,
            "singularName": i.singular,
            "namespaced": i.namespaced,
            "kind": i.kind,
            "verbs": VERBS,
        });
        if !i.short_names.is_empty() {
            r["shortNames"] = json!(i.short_names);
        }
        if !i.categories.is_empty() {
            r["categories"] = json!(i.categories);
        }
        resources.push(r);
        if i.has_status {
            resources.push(subresource(
                format!("{}/status", i.plural),
                i.kind,
                i.namespaced,
                &["get", "patch", "update"],
            ));
        }
        match kind {
            Kind::Pod => {
                resources.push(subresource(
                    "pods/binding".into(),
                    "Binding",
                    true,
                    &["create"],
                ));
                // As Kubernetes lists them: kind PodExecOptions etc., get and create.
                for (sub, kind) in [
                    ("attach", "PodAttachOptions"),
                    ("exec", "PodExecOptions"),
                    ("portforward", "PodPortForwardOptions"),
                ] {
                    resources.push(subresource(
                        format!("pods/{sub}"),
                        kind,
                        true,
                        &["create", "get"],
                    ));
                }
                resources.push(subresource("pods/log".into(), "Pod", true, &["get"]));
                // kubectl drain evicts only when this entry names Eviction's group and
                // version; without them it deletes the pods.
                let mut eviction =
                    subresource("pods/eviction".into(), "Eviction", true, &["create"]);
                eviction["group"] = json!(api::policy::GROUP);
                eviction["version"] = json!("v1");
                resources.push(eviction);
            }
            Kind::CertificateSigningRequest => {
                resources.push(subresource(
                    "certificatesigningrequests/approval".into(),
                    "CertificateSigningRequest",
                    false,
                    &["get", "patch", "update"],
                ));
            }
            Kind::ServiceAccount => {
                let mut s = subresource(
                    "serviceaccounts/token".into(),
                    "TokenRequest",
                    true,
                    &["create"],
                );
                s["group"] = json!(super::route::AUTHENTICATION_GROUP);
                s["version"] = json!("v1");
                resources.push(s);
            }
            Kind::Namespace => {
                resources.push(subresource(
                    "namespaces/finalize".into(),
                    "Namespace",
                    false,
                    &["update"],
                ));
            }
            Kind::Deployment
            | Kind::ReplicaSet
            | Kind::ReplicationController
            | Kind::StatefulSet => {
                let mut s = subresource(
                    format!("{}/scale", i.plural),
                    "Scale",
                    true,
                    &["get", "patch", "update"],
                );
                s["group"] = json!("autoscaling");
                s["version"] = json!("v1");
                resources.push(s);
            }
            _ => {}
        }
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
