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
    /// Join token creation (admin).
    Tokens,
}

/// A path to a collection, an object or one of its subresources.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct ResourcePath {
    pub kind: Kind,
    /// None for cluster-scoped kinds and for lists across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
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
        ["skiff", "v1", "tokens"] => Ok(Route::Tokens),
        ["api"] => Ok(Route::CoreVersions),
        ["apis"] => Ok(Route::GroupList),
        ["apis", group] if ["apps", "batch", METRICS_GROUP].contains(group) => {
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
        ["apis", group @ ("apps" | "batch"), "v1"] => Ok(Route::ResourceList {
            group: group.to_string(),
            version: "v1".into(),
        }),
        ["api", "v1", rest @ ..] => resource("", rest),
        ["apis", group @ ("apps" | "batch"), "v1", rest @ ..] => resource(group, rest),
        _ => Err(NoRoute),
    }
}

fn resource(group: &str, rest: &[&str]) -> Result<Route, NoRoute> {
    let kind_of = |plural: &str| Kind::from_plural(group, plural).ok_or(NoRoute);
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
            }
        }
        [] => return Err(NoRoute),
    };
    if path.name.as_deref() == Some("") {
        return Err(NoRoute);
    }
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
