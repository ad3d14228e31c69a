//! Parses request paths into typed routes (the edge of the API: after this, handlers deal
//! with kinds and names, never with strings of the URL).

use api::Kind;

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
    /// The review kinds of authorization.k8s.io and authentication.k8s.io (create only,
    /// never stored): SelfSubjectAccessReview, TokenReview, ...
    Review(ReviewPath),
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
    pub kind: Kind,
    /// None for cluster-scoped kinds and for lists across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
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

pub fn parse(path: &str) -> Result<Route, NoRoute> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let segs: Vec<&str> = if segs == [""] { Vec::new() } else { segs };
    match segs.as_slice() {
        ["healthz"] | ["healthz", ..] => Ok(Route::Health("healthz")),
        ["readyz"] | ["readyz", ..] => Ok(Route::Health("readyz")),
        ["livez"] | ["livez", ..] => Ok(Route::Health("livez")),
        ["version"] => Ok(Route::Version),
        ["metrics"] => Ok(Route::Metrics),
        ["openapi", "v2"] | ["swagger-2.0.0.pb-v1"] => Ok(Route::OpenApiV2),
        ["openapi", "v3", ..] => Ok(Route::OpenApiV3),
        ["skiff", "v1", "ca.crt"] => Ok(Route::JoinCa),
        ["skiff", "v1", "join"] => Ok(Route::Join),
        ["skiff", "v1", "server-join"] => Ok(Route::ServerJoin),
        ["skiff", "v1", "tokens"] => Ok(Route::Tokens),
        ["ui", ..] => Ok(Route::Ui),
        ["skiff", "v1", "users"] => Ok(Route::Users),
        ["api"] => Ok(Route::CoreVersions),
        ["apis"] => Ok(Route::GroupList),
        ["apis", group]
            if is_served_group(group)
                || *group == METRICS_GROUP
                || review_group(group).is_some() =>
        {
            Ok(Route::Group(group.to_string()))
        }
        ["apis", METRICS_GROUP, METRICS_VERSION] => Ok(Route::ResourceList {
            group: METRICS_GROUP.into(),
            version: METRICS_VERSION.into(),
        }),
        ["apis", METRICS_GROUP, METRICS_VERSION, rest @ ..] => metrics(rest),
        ["api", "v1"] => Ok(Route::ResourceList {
            group: String::new(),
            version: "v1".into(),
        }),
        ["apis", group, version]
            if serves_version(group, version)
                || (review_group(group).is_some() && *version == "v1") =>
        {
            Ok(Route::ResourceList {
                group: group.to_string(),
                version: version.to_string(),
            })
        }
        ["api", "v1", rest @ ..] => resource("", "v1", rest),
        ["apis", group, version, rest @ ..] if serves_version(group, version) => {
            resource(group, version, rest)
        }
        ["apis", group, "v1", rest @ ..] => {
            let group = review_group(group).ok_or(NoRoute)?;
            let (namespace, plural) = match rest {
                [plural] => (None, plural),
                ["namespaces", ns, plural] => (Some(ns.to_string()), plural),
                _ => return Err(NoRoute),
            };
            if !crate::http::review::PLURALS
                .iter()
                .any(|(g, p, namespaced)| {
                    *g == group && p == plural && *namespaced == namespace.is_some()
                })
            {
                return Err(NoRoute);
            }
            Ok(Route::Review(ReviewPath {
                group,
                plural: plural.to_string(),
                namespace,
            }))
        }
        _ => Err(NoRoute),
    }
}

/// A named API group some stored kind belongs to (`apps`, `networking.k8s.io`).
pub fn is_served_group(group: &str) -> bool {
    !group.is_empty() && Kind::ALL.iter().any(|k| k.info().group == group)
}

/// The versions a served group is served at, the preferred (stored) one first: autoscaling
/// also at v1, converted at the edge (see [`api::autoscaling::to_v1`]).
pub fn group_versions(group: &str) -> Vec<&'static str> {
    if !is_served_group(group) {
        return Vec::new();
    }
    let mut versions: Vec<&'static str> = Vec::new();
    for k in Kind::ALL.iter().filter(|k| k.info().group == group) {
        for v in std::iter::once(k.info().version).chain(legacy_version(*k)) {
            if !versions.contains(&v) {
                versions.push(v);
            }
        }
    }
    versions
}

fn serves_version(group: &str, version: &str) -> bool {
    let versions: Vec<&str> = group_versions(group);
    versions.contains(&version)
}

/// The older version a kind is also served at, converted at the edge.
pub fn legacy_version(kind: Kind) -> Option<&'static str> {
    (kind == Kind::HorizontalPodAutoscaler).then_some(api::autoscaling::LEGACY_VERSION)
}

/// The named API groups of the stored kinds, in the order they first appear.
pub fn served_groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for k in Kind::ALL {
        let g = k.info().group;
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups
}

fn resource(group: &str, version: &str, rest: &[&str]) -> Result<Route, NoRoute> {
    let kind_of = |plural: &str| {
        Kind::from_plural(group, plural)
            .filter(|k| k.info().version == version || legacy_version(*k) == Some(version))
            .ok_or(NoRoute)
    };
    let path = match rest {
        // The namespace object itself and its subresources (`status`, `finalize`) are not
        // plurals, which tells them apart from the collections inside a namespace.
        ["namespaces", ns, plural, tail @ ..] if Kind::from_plural(group, plural).is_some() => {
            let kind = kind_of(plural)?;
            if !kind.info().namespaced {
                return Err(NoRoute);
            }
            let (name, subresource) = name_and_sub(tail)?;
            ResourcePath {
                kind,
                namespace: Some(ns.to_string()),
                name,
                subresource,
                legacy_version: false,
            }
        }
        [plural, tail @ ..] => {
            let kind = kind_of(plural)?;
            let (name, subresource) = name_and_sub(tail)?;
            if kind.info().namespaced && name.is_some() {
                // A namespaced object must be addressed within its namespace.
                return Err(NoRoute);
            }
            ResourcePath {
                kind,
                namespace: None,
                name,
                subresource,
                legacy_version: false,
            }
        }
        [] => return Err(NoRoute),
    };
    if path.name.as_deref() == Some("") {
        return Err(NoRoute);
    }
    let path = ResourcePath {
        legacy_version: path.kind.info().version != version,
        ..path
    };
    Ok(Route::Resource(path))
}

fn metrics(rest: &[&str]) -> Result<Route, NoRoute> {
    let path = |pods: bool, ns: Option<&str>, name: Option<&str>| {
        Ok(Route::ResourceMetrics(MetricsPath {
            pods,
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
        }))
    };
    match rest {
        ["nodes"] => path(false, None, None),
        ["nodes", name] if !name.is_empty() => path(false, None, Some(name)),
        ["pods"] => path(true, None, None),
        ["namespaces", ns, "pods"] if !ns.is_empty() => path(true, Some(ns), None),
        ["namespaces", ns, "pods", name] if !ns.is_empty() && !name.is_empty() => {
            path(true, Some(ns), Some(name))
        }
        _ => Err(NoRoute),
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
            kind,
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
            legacy_version: false,
        })
    }

    #[test]
    fn parses_namespaced_and_cluster_paths() {
        assert_eq!(
            parse("/api/v1/namespaces/a/pods"),
            Ok(res(Kind::Pod, Some("a"), None, None))
        );
        assert_eq!(
            parse("/api/v1/namespaces/a/pods/p"),
            Ok(res(Kind::Pod, Some("a"), Some("p"), None))
        );
        assert_eq!(
            parse("/api/v1/namespaces/a/pods/p/status"),
            Ok(res(Kind::Pod, Some("a"), Some("p"), Some("status")))
        );
        assert_eq!(parse("/api/v1/pods"), Ok(res(Kind::Pod, None, None, None)));
        assert_eq!(
            parse("/api/v1/nodes/n1"),
            Ok(res(Kind::Node, None, Some("n1"), None))
        );
        assert_eq!(
            parse("/api/v1/namespaces"),
            Ok(res(Kind::Namespace, None, None, None))
        );
        assert_eq!(
            parse("/api/v1/namespaces/a"),
            Ok(res(Kind::Namespace, None, Some("a"), None))
        );
        assert_eq!(
            parse("/api/v1/namespaces/a/status"),
            Ok(res(Kind::Namespace, None, Some("a"), Some("status")))
        );
        assert_eq!(
            parse("/apis/apps/v1/namespaces/d/deployments/web/scale"),
            Ok(res(Kind::Deployment, Some("d"), Some("web"), Some("scale")))
        );
        assert_eq!(
            parse("/apis/apps/v1/deployments"),
            Ok(res(Kind::Deployment, None, None, None))
        );
    }

    #[test]
    fn parses_rbac_paths_and_reviews() {
        assert_eq!(
            parse("/apis/rbac.authorization.k8s.io/v1/namespaces/d/rolebindings/b"),
            Ok(res(Kind::RoleBinding, Some("d"), Some("b"), None))
        );
        assert_eq!(
            parse("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node"),
            Ok(res(Kind::ClusterRole, None, Some("system:node"), None))
        );
        assert_eq!(
            parse("/apis/rbac.authorization.k8s.io"),
            Ok(Route::Group("rbac.authorization.k8s.io".into()))
        );
        assert_eq!(
            parse("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
            Ok(Route::Review(ReviewPath {
                group: AUTHORIZATION_GROUP,
                plural: "selfsubjectaccessreviews".into(),
                namespace: None,
            }))
        );
        assert_eq!(
            parse("/apis/authorization.k8s.io/v1/namespaces/d/localsubjectaccessreviews"),
            Ok(Route::Review(ReviewPath {
                group: AUTHORIZATION_GROUP,
                plural: "localsubjectaccessreviews".into(),
                namespace: Some("d".into()),
            }))
        );
        assert_eq!(
            parse("/apis/authorization.k8s.io/v1/namespaces/d/selfsubjectaccessreviews"),
            Err(NoRoute)
        );
        assert_eq!(
            parse("/apis/authentication.k8s.io/v1"),
            Ok(Route::ResourceList {
                group: "authentication.k8s.io".into(),
                version: "v1".into()
            })
        );
        assert_eq!(
            parse("/apis/authentication.k8s.io/v1/widgets"),
            Err(NoRoute)
        );
    }

    #[test]
    fn autoscaling_is_served_at_v2_and_v1() {
        assert_eq!(group_versions("autoscaling"), ["v2", "v1"]);
        assert_eq!(group_versions("apps"), ["v1"]);
        assert_eq!(
            parse("/apis/autoscaling/v2/namespaces/d/horizontalpodautoscalers/web"),
            Ok(res(
                Kind::HorizontalPodAutoscaler,
                Some("d"),
                Some("web"),
                None
            ))
        );
        let Ok(Route::Resource(p)) =
            parse("/apis/autoscaling/v1/namespaces/d/horizontalpodautoscalers")
        else {
            panic!("v1 not served");
        };
        assert!(p.legacy_version);
        assert_eq!(p.kind, Kind::HorizontalPodAutoscaler);
        assert_eq!(
            parse("/apis/autoscaling/v2"),
            Ok(Route::ResourceList {
                group: "autoscaling".into(),
                version: "v2".into()
            })
        );
        assert_eq!(parse("/apis/apps/v2/deployments"), Err(NoRoute));
        assert_eq!(
            parse("/apis/autoscaling/v3/horizontalpodautoscalers"),
            Err(NoRoute)
        );
    }

    #[test]
    fn refuses_what_is_not_served() {
        assert_eq!(parse("/api/v1/namespaces/a/nodes"), Err(NoRoute));
        assert_eq!(parse("/api/v1/widgets"), Err(NoRoute));
        assert_eq!(parse("/api/v1/pods/p"), Err(NoRoute));
        assert_eq!(parse("/apis/apps/v1/pods"), Err(NoRoute));
        assert_eq!(parse("/api/v2/pods"), Err(NoRoute));
        assert_eq!(parse("/api/v1/namespaces/a/pods/p/status/x"), Err(NoRoute));
    }

    #[test]
    fn parses_fixed_paths() {
        assert_eq!(parse("/"), Err(NoRoute));
        assert_eq!(parse("/api"), Ok(Route::CoreVersions));
        assert_eq!(parse("/apis/"), Ok(Route::GroupList));
        assert_eq!(parse("/healthz"), Ok(Route::Health("healthz")));
        assert_eq!(parse("/openapi/v2"), Ok(Route::OpenApiV2));
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
        assert_eq!(parse(&format!("{base}/nodes")), m(false, None, None));
        assert_eq!(
            parse(&format!("{base}/nodes/n1")),
            m(false, None, Some("n1"))
        );
        assert_eq!(parse(&format!("{base}/pods")), m(true, None, None));
        assert_eq!(
            parse(&format!("{base}/namespaces/d/pods")),
            m(true, Some("d"), None)
        );
        assert_eq!(
            parse(&format!("{base}/namespaces/d/pods/web")),
            m(true, Some("d"), Some("web"))
        );
        assert_eq!(
            parse(base),
            Ok(Route::ResourceList {
                group: "metrics.k8s.io".into(),
                version: "v1beta1".into()
            })
        );
        assert_eq!(
            parse("/apis/metrics.k8s.io"),
            Ok(Route::Group("metrics.k8s.io".into()))
        );
        assert_eq!(parse(&format!("{base}/namespaces/d/nodes")), Err(NoRoute));
        assert_eq!(parse(&format!("{base}/pods/web")), Err(NoRoute));
        assert_eq!(parse(&format!("{base}/nodes/n1/status")), Err(NoRoute));
    }
}
