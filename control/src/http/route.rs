//! Parses request paths into typed routes (the edge of the API: after this, handlers deal
//! with kinds and names, never with strings of the URL).

use api::Kind;

use crate::resources::{ResourceId, Storage, Table};

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Health(&'static str),
    Version,
    Metrics,
    OpenApiV2,
    OpenApiV3,
    /// `/api`
    CoreVersions,
    /// `/apis`
    GroupList,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1`, `/apis/apps/v1`
    ResourceList {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
    /// `/apis/metrics.k8s.io/v1beta1/...`: NodeMetrics and PodMetrics (`resource_metrics`).
    ResourceMetrics(MetricsPath),
    /// The CA certificate, for joining nodes (no authentication).
    JoinCa,
    /// A node's join request (authenticated by its join token).
    Join,
    /// A joining server's request for the cluster's shared keys (authenticated by a server
    /// join token).
    ServerJoin,
    /// Join token creation (admin).
    Tokens,
    /// The web dashboard's files (`/ui`, `/ui/...`; no authentication).
    Ui,
    /// User client certificate signing (admin, `skiff user create`).
    Users,
    /// The registries.yaml the server hands to its agents (nodes and admins).
    Registries,
    /// An agent's tunnel (`api::tunnel`): an upgrade, nodes only.
    Tunnel,
    /// The review kinds of authorization.k8s.io and authentication.k8s.io (create only,
    /// never stored): SelfSubjectAccessReview, TokenReview, ...
    Review(ReviewPath),
    /// `/apis/<group>/<version>[/...]` of a group version an extension API server serves (a
    /// non-local APIService): proxied to it (`http::aggregated`).
    Aggregated {
        group: String,
        version: String,
    },
    /// `/debug/api_priority_and_fairness/dump_*`: the state of priority and fairness.
    FlowControlDump(&'static str),
}

/// A review: its group, plural and, for LocalSubjectAccessReview, namespace.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct ReviewPath {
    pub group: &'static str,
    pub plural: String,
    pub namespace: Option<String>,
}

/// The group of the access reviews.
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
/// The group of TokenReview and SelfSubjectReview.
pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

fn review_group(group: &str) -> Option<&'static str> {
    [AUTHORIZATION_GROUP, AUTHENTICATION_GROUP]
        .into_iter()
        .find(|g| *g == group)
}

/// A path to a collection, an object or one of its subresources.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct ResourcePath {
    /// The resource's entry in the table.
    pub resource: ResourceId,
    pub kind: Kind,
    /// None for cluster-scoped kinds and for lists across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The group and version the path names (the kind's own, but for events.k8s.io/v1
    /// Events, stored as core Events).
    pub group: String,
    pub version: String,
    /// The path names the kind's older version (autoscaling/v1 for a HorizontalPodAutoscaler
    /// stored as v2): bodies are converted at the edge.
    pub legacy_version: bool,
}

/// A path of the resource metrics API.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct MetricsPath {
    /// PodMetrics (else NodeMetrics).
    pub pods: bool,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// The resource metrics API's group and version.
pub const METRICS_GROUP: &str = "metrics.k8s.io";
pub const METRICS_VERSION: &str = "v1beta1";

/// The error when a path names nothing the server serves.
#[derive(Debug, PartialEq, Eq)]
pub struct NoRoute;

/// Resolves `path` against the resources of `table`.
pub fn parse(table: &Table, path: &str) -> Result<Route, NoRoute> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let segs: Vec<&str> = if segs == [""] { Vec::new() } else { segs };
    match segs.as_slice() {
        ["healthz"] | ["healthz", ..] => Ok(Route::Health("healthz")),
        ["readyz"] | ["readyz", ..] => Ok(Route::Health("readyz")),
        ["livez"] | ["livez", ..] => Ok(Route::Health("livez")),
        ["version"] => Ok(Route::Version),
        ["metrics"] => Ok(Route::Metrics),
        ["debug", "api_priority_and_fairness", dump] => [
            super::flowcontrol::DUMP_PRIORITY_LEVELS,
            super::flowcontrol::DUMP_QUEUES,
            super::flowcontrol::DUMP_REQUESTS,
        ]
        .into_iter()
        .find(|p| p.rsplit('/').next() == Some(*dump))
        .map(Route::FlowControlDump)
        .ok_or(NoRoute),
        ["openapi", "v2"] | ["swagger-2.0.0.pb-v1"] => Ok(Route::OpenApiV2),
        ["openapi", "v3", ..] => Ok(Route::OpenApiV3),
        ["skiff", "v1", "ca.crt"] => Ok(Route::JoinCa),
        ["skiff", "v1", "join"] => Ok(Route::Join),
        ["skiff", "v1", "server-join"] => Ok(Route::ServerJoin),
        ["skiff", "v1", "tokens"] => Ok(Route::Tokens),
        ["ui", ..] => Ok(Route::Ui),
        ["skiff", "v1", "users"] => Ok(Route::Users),
        ["skiff", "v1", "registries"] => Ok(Route::Registries),
        ["skiff", "v1", "tunnel"] => Ok(Route::Tunnel),
        ["api"] => Ok(Route::CoreVersions),
        ["apis"] => Ok(Route::GroupList),
        ["apis", group, version, ..] if table.remote(group, version).is_some() => {
            Ok(Route::Aggregated {
                group: group.to_string(),
                version: version.to_string(),
            })
        }
        ["apis", group] if !group.is_empty() && table.group(group).is_some() => {
            Ok(Route::Group(group.to_string()))
        }
        ["api", "v1"] => Ok(Route::ResourceList {
            group: String::new(),
            version: "v1".into(),
        }),
        ["apis", group, version] if !group.is_empty() && table.serves(group, version) => {
            Ok(Route::ResourceList {
                group: group.to_string(),
                version: version.to_string(),
            })
        }
        ["api", "v1", rest @ ..] => resource(table, "", "v1", rest),
        ["apis", group, version, rest @ ..] if !group.is_empty() => {
            resource(table, group, version, rest)
        }
        _ => Err(NoRoute),
    }
}

fn resource(table: &Table, group: &str, version: &str, rest: &[&str]) -> Result<Route, NoRoute> {
    let entry_of = |plural: &str| {
        table
            .by_plural(group, plural)
            .filter(|e| e.serves(version))
            .ok_or(NoRoute)
    };
    // The namespace object itself and its subresources (`status`, `finalize`) are not
    // plurals, which tells them apart from the collections inside a namespace.
    let (entry, namespace, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if table.by_plural(group, plural).is_some() => {
            let entry = entry_of(plural)?;
            if !entry.namespaced {
                return Err(NoRoute);
            }
            (entry, Some(ns.to_string()), tail)
        }
        [plural, tail @ ..] => {
            let entry = entry_of(plural)?;
            if entry.namespaced && !tail.is_empty() {
                // A namespaced object must be addressed within its namespace.
                return Err(NoRoute);
            }
            (entry, None, tail)
        }
        [] => return Err(NoRoute),
    };
    let (name, subresource) = name_and_sub(tail)?;
    if name.as_deref() == Some("") {
        return Err(NoRoute);
    }
    match entry.storage {
        Storage::Builtin(kind) => Ok(Route::Resource(ResourcePath {
            resource: entry.id,
            kind,
            group: group.to_string(),
            version: version.to_string(),
            namespace,
            name,
            subresource,
            legacy_version: kind == Kind::HorizontalPodAutoscaler
                && entry.storage_version() != version,
        })),
        Storage::Review => {
            let group = review_group(group).ok_or(NoRoute)?;
            if name.is_some() || (namespace.is_some() && !entry.namespaced) {
                return Err(NoRoute);
            }
            if entry.namespaced && namespace.is_none() {
                return Err(NoRoute);
            }
            Ok(Route::Review(ReviewPath {
                group,
                plural: entry.plural.to_string(),
                namespace,
            }))
        }
        Storage::Metrics => {
            if subresource.is_some() || (!entry.namespaced && namespace.is_some()) {
                return Err(NoRoute);
            }
            if matches!(namespace.as_deref(), Some("")) {
                return Err(NoRoute);
            }
            Ok(Route::ResourceMetrics(MetricsPath {
                pods: entry.namespaced,
                namespace,
                name,
            }))
        }
    }
}

fn name_and_sub(tail: &[&str]) -> Result<(Option<String>, Option<String>), NoRoute> {
    match tail {
        [] => Ok((None, None)),
        [name] => Ok((Some(name.to_string()), None)),
        [name, sub] => Ok((Some(name.to_string()), Some(sub.to_string()))),
        _ => Err(NoRoute),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(kind: Kind, ns: Option<&str>, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Resource(ResourcePath {
            resource: kind.into(),
            kind,
            group: kind.info().group.into(),
            version: kind.info().version.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
            legacy_version: false,
        })
    }

    #[test]
    fn parses_namespaced_and_cluster_paths() {
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a/pods"),
            Ok(res(Kind::Pod, Some("a"), None, None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a/pods/p"),
            Ok(res(Kind::Pod, Some("a"), Some("p"), None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a/pods/p/status"),
            Ok(res(Kind::Pod, Some("a"), Some("p"), Some("status")))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/pods"),
            Ok(res(Kind::Pod, None, None, None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/nodes/n1"),
            Ok(res(Kind::Node, None, Some("n1"), None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces"),
            Ok(res(Kind::Namespace, None, None, None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a"),
            Ok(res(Kind::Namespace, None, Some("a"), None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a/status"),
            Ok(res(Kind::Namespace, None, Some("a"), Some("status")))
        );
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/apps/v1/namespaces/d/deployments/web/scale"
            ),
            Ok(res(Kind::Deployment, Some("d"), Some("web"), Some("scale")))
        );
        assert_eq!(
            parse(&Table::builtin(), "/apis/apps/v1/deployments"),
            Ok(res(Kind::Deployment, None, None, None))
        );
    }

    #[test]
    fn parses_rbac_paths_and_reviews() {
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/rbac.authorization.k8s.io/v1/namespaces/d/rolebindings/b"
            ),
            Ok(res(Kind::RoleBinding, Some("d"), Some("b"), None))
        );
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node"
            ),
            Ok(res(Kind::ClusterRole, None, Some("system:node"), None))
        );
        assert_eq!(
            parse(&Table::builtin(), "/apis/rbac.authorization.k8s.io"),
            Ok(Route::Group("rbac.authorization.k8s.io".into()))
        );
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
            ),
            Ok(Route::Review(ReviewPath {
                group: AUTHORIZATION_GROUP,
                plural: "selfsubjectaccessreviews".into(),
                namespace: None,
            }))
        );
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/authorization.k8s.io/v1/namespaces/d/localsubjectaccessreviews"
            ),
            Ok(Route::Review(ReviewPath {
                group: AUTHORIZATION_GROUP,
                plural: "localsubjectaccessreviews".into(),
                namespace: Some("d".into()),
            }))
        );
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/authorization.k8s.io/v1/namespaces/d/selfsubjectaccessreviews"
            ),
            Err(NoRoute)
        );
        assert_eq!(
            parse(&Table::builtin(), "/apis/authentication.k8s.io/v1"),
            Ok(Route::ResourceList {
                group: "authentication.k8s.io".into(),
                version: "v1".into()
            })
        );
        assert_eq!(
            parse(&Table::builtin(), "/apis/authentication.k8s.io/v1/widgets"),
            Err(NoRoute)
        );
    }

    #[test]
    fn autoscaling_is_served_at_v2_and_v1() {
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/autoscaling/v2/namespaces/d/horizontalpodautoscalers/web"
            ),
            Ok(res(
                Kind::HorizontalPodAutoscaler,
                Some("d"),
                Some("web"),
                None
            ))
        );
        let Ok(Route::Resource(p)) = parse(
            &Table::builtin(),
            "/apis/autoscaling/v1/namespaces/d/horizontalpodautoscalers",
        ) else {
            panic!("v1 not served");
        };
        assert!(p.legacy_version);
        assert_eq!(p.kind, Kind::HorizontalPodAutoscaler);
        assert_eq!(
            parse(&Table::builtin(), "/apis/autoscaling/v2"),
            Ok(Route::ResourceList {
                group: "autoscaling".into(),
                version: "v2".into()
            })
        );
        assert_eq!(
            parse(&Table::builtin(), "/apis/apps/v2/deployments"),
            Err(NoRoute)
        );
        assert_eq!(
            parse(
                &Table::builtin(),
                "/apis/autoscaling/v3/horizontalpodautoscalers"
            ),
            Err(NoRoute)
        );
    }

    #[test]
    fn refuses_what_is_not_served() {
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a/nodes"),
            Err(NoRoute)
        );
        assert_eq!(parse(&Table::builtin(), "/api/v1/widgets"), Err(NoRoute));
        assert_eq!(parse(&Table::builtin(), "/api/v1/pods/p"), Err(NoRoute));
        assert_eq!(parse(&Table::builtin(), "/apis/apps/v1/pods"), Err(NoRoute));
        assert_eq!(parse(&Table::builtin(), "/api/v2/pods"), Err(NoRoute));
        assert_eq!(
            parse(&Table::builtin(), "/api/v1/namespaces/a/pods/p/status/x"),
            Err(NoRoute)
        );
    }

    #[test]
    fn parses_fixed_paths() {
        assert_eq!(parse(&Table::builtin(), "/"), Err(NoRoute));
        assert_eq!(parse(&Table::builtin(), "/api"), Ok(Route::CoreVersions));
        assert_eq!(parse(&Table::builtin(), "/apis/"), Ok(Route::GroupList));
        assert_eq!(
            parse(&Table::builtin(), "/healthz"),
            Ok(Route::Health("healthz"))
        );
        assert_eq!(
            parse(&Table::builtin(), "/openapi/v2"),
            Ok(Route::OpenApiV2)
        );
    }

    #[test]
    fn parses_resource_metrics_paths() {
        let m = |pods, ns: Option<&str>, name: Option<&str>| {
            Ok(Route::ResourceMetrics(MetricsPath {
                pods,
                namespace: ns.map(Into::into),
                name: name.map(Into::into),
            }))
        };
        let base = "/apis/metrics.k8s.io/v1beta1";
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/nodes")),
            m(false, None, None)
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/nodes/n1")),
            m(false, None, Some("n1"))
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/pods")),
            m(true, None, None)
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/namespaces/d/pods")),
            m(true, Some("d"), None)
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/namespaces/d/pods/web")),
            m(true, Some("d"), Some("web"))
        );
        assert_eq!(
            parse(&Table::builtin(), base),
            Ok(Route::ResourceList {
                group: "metrics.k8s.io".into(),
                version: "v1beta1".into()
            })
        );
        assert_eq!(
            parse(&Table::builtin(), "/apis/metrics.k8s.io"),
            Ok(Route::Group("metrics.k8s.io".into()))
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/namespaces/d/nodes")),
            Err(NoRoute)
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/pods/web")),
            Err(NoRoute)
        );
        assert_eq!(
            parse(&Table::builtin(), &format!("{base}/nodes/n1/status")),
            Err(NoRoute)
        );
    }
}
