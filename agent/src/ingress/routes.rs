//! The routing table built from the Ingresses, Services and Endpoints the proxy watches:
//! which backend (a Service port resolved to its ready endpoints) a request's host and path
//! go to, with Kubernetes' precedence.
//!
//! * Hosts: an exact rule host first, then a wildcard (`*.example.com` matches exactly one
//!   more label: `a.example.com`, not `example.com` nor `a.b.example.com`), then the rules
//!   without a host. The first of these groups with a matching path wins.
//! * Paths within a group: the longest match; between equally long ones, Exact before
//!   Prefix. Prefix matches by `/`-separated elements (`/foo` matches `/foo` and `/foo/bar`,
//!   not `/foobar`); ImplementationSpecific is Prefix.
//! * No match: the defaultBackend of the oldest Ingress that has one, else 404.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use api::core::{Endpoints, Service};
use api::networking::{Ingress, IngressBackend, IngressClass, SKIFF_CONTROLLER};

/// A Service port and its ready endpoints, shared by the routes that point at it.
#[derive(Debug)]
pub struct Upstream {
    /// `namespace/service:port`, for logs.
    pub name: String,
    pub endpoints: Vec<SocketAddr>,
    next: AtomicUsize,
}

impl Upstream {
    pub fn new(name: String, endpoints: Vec<SocketAddr>) -> Upstream {
        Upstream {
            name,
            endpoints,
            next: AtomicUsize::new(0),
        }
    }

    /// The endpoints in the order to try them: round-robin over requests.
    pub fn order(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        let n = self.endpoints.len();
        let start = if n == 0 {
            0
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % n
        };
        (0..n).map(move |i| self.endpoints[(start + i) % n])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PathKind {
    Exact,
    Prefix,
}

#[derive(Debug)]
struct PathRule {
    kind: PathKind,
    /// For Prefix: without its trailing '/' ("" for "/").
    path: String,
    upstream: Arc<Upstream>,
}

impl PathRule {
    /// The length of the match of `path` (None: no match).
    fn matches(&self, path: &str) -> Option<usize> {
        match self.kind {
            PathKind::Exact => (self.path == path).then_some(self.path.len()),
            PathKind::Prefix => {
                let rest = path.strip_prefix(self.path.as_str())?;
                (rest.is_empty() || rest.starts_with('/')).then_some(self.path.len())
            }
        }
    }
}

/// The routes of one host (or of every host).
#[derive(Debug, Default)]
struct HostRules {
    paths: Vec<PathRule>,
}

impl HostRules {
    fn best(&self, path: &str) -> Option<&Arc<Upstream>> {
        self.paths
            .iter()
            .filter_map(|r| {
                r.matches(path)
                    .map(|len| (len, r.kind == PathKind::Exact, r))
            })
            .max_by_key(|(len, exact, _)| (*len, *exact))
            .map(|(_, _, r)| &r.upstream)
    }
}

/// What a request is routed to.
#[derive(Debug)]
pub enum Route<'a> {
    Upstream(&'a Arc<Upstream>),
    NotFound,
}

/// The whole table; rebuilt on every change and swapped in whole.
#[derive(Debug, Default)]
pub struct Table {
    exact: BTreeMap<String, HostRules>,
    /// By the suffix after `*` (`.example.com`).
    wildcard: BTreeMap<String, HostRules>,
    any: HostRules,
    default: Option<Arc<Upstream>>,
    /// TLS: host (or `*.suffix`) -> `namespace/secret`.
    pub tls: BTreeMap<String, String>,
}

impl Table {
    /// Routes a request for `host` (any case, port already removed) and `path`.
    pub fn route(&self, host: &str, path: &str) -> Route<'_> {
        let host = host.to_ascii_lowercase();
        let wildcard = host
            .find('.')
            .and_then(|dot| self.wildcard.get(&host[dot..]));
        let groups = [self.exact.get(&host), wildcard, Some(&self.any)];
        for g in groups.into_iter().flatten() {
            if let Some(u) = g.best(path) {
                return Route::Upstream(u);
            }
        }
        match &self.default {
            Some(u) => Route::Upstream(u),
            None => Route::NotFound,
        }
    }

    /// The Secret (`namespace/name`) of the certificate for `server_name`.
    pub fn secret_for(&self, server_name: &str) -> Option<&str> {
        let name = server_name.to_ascii_lowercase();
        if let Some(s) = self.tls.get(&name) {
            return Some(s);
        }
        let dot = name.find('.')?;
        self.tls
            .get(&format!("*{}", &name[dot..]))
            .map(|s| s.as_str())
    }
}

#[cfg(test)]
impl Table {
    /// A table that sends every request to `upstream` (as a defaultBackend does).
    pub fn everything_to(upstream: Upstream) -> Table {
        Table {
            default: Some(Arc::new(upstream)),
            ..Table::default()
        }
    }
}

/// Everything the table is built from.
#[derive(Debug, Default)]
pub struct Objects {
    pub ingresses: BTreeMap<(String, String), Ingress>,
    pub classes: BTreeMap<String, IngressClass>,
    pub services: BTreeMap<(String, String), Service>,
    /// The Endpoints form of each Service's EndpointSlices.
    pub endpoints: BTreeMap<(String, String), Endpoints>,
    /// The EndpointSlices `endpoints` comes from.
    pub slices: api::discovery::SliceIndex,
}

/// The ready endpoints of `backend`'s Service port in `ns`.
fn resolve(objects: &Objects, ns: &str, backend: &IngressBackend) -> Option<Upstream> {
    let svc_ref = backend.service.as_ref()?;
    let key = (ns.to_string(), svc_ref.name.clone());
    let port_label = match (&svc_ref.port.name, svc_ref.port.number) {
        (Some(n), _) if !n.is_empty() => n.clone(),
        (_, Some(p)) => p.to_string(),
        _ => String::new(),
    };
    let name = format!("{ns}/{}:{port_label}", svc_ref.name);
    let mut endpoints = Vec::new();
    let svc_port = objects.services.get(&key).and_then(|svc| {
        svc.spec
            .ports
            .iter()
            .find(|p| match (&svc_ref.port.name, svc_ref.port.number) {
                (Some(n), _) if !n.is_empty() => p.name.as_deref() == Some(n.as_str()),
                (_, Some(num)) => p.port == num,
                _ => false,
            })
    });
    if let (Some(sp), Some(eps)) = (svc_port, objects.endpoints.get(&key)) {
        let want = sp.name.as_deref().unwrap_or("");
        for subset in &eps.subsets {
            let Some(port) = subset
                .ports
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == want)
            else {
                continue;
            };
            let Ok(port) = u16::try_from(port.port) else {
                continue;
            };
            for a in &subset.addresses {
                if let Ok(ip) = a.ip.parse::<std::net::IpAddr>() {
                    endpoints.push(SocketAddr::new(ip, port));
                }
            }
        }
    }
    Some(Upstream::new(name, endpoints))
}

/// Whether `ing` is for skiff's proxy: its class (or, without one, the default class) has
/// the controller `skiff.io/ingress`.
fn served(objects: &Objects, ing: &Ingress) -> bool {
    let class = match api::networking::class_of(ing) {
        Some(c) => objects.classes.get(c),
        None => objects
            .classes
            .values()
            .find(|c| api::networking::is_default_class(c)),
    };
    class.is_some_and(|c| c.spec.controller.as_deref() == Some(SKIFF_CONTROLLER))
}

/// Builds the table from `objects`.
pub fn build(objects: &Objects) -> Table {
    let mut table = Table::default();
    // Upstreams are shared by routes to the same Service port (one round-robin each).
    let mut upstreams: BTreeMap<String, Arc<Upstream>> = BTreeMap::new();
    let mut upstream = |ns: &str, b: &IngressBackend| -> Option<Arc<Upstream>> {
        let u = resolve(objects, ns, b)?;
        Some(
            upstreams
                .entry(u.name.clone())
                .or_insert_with(|| Arc::new(u))
                .clone(),
        )
    };
    let mut ingresses: Vec<&Ingress> = objects
        .ingresses
        .values()
        .filter(|i| served(objects, i))
        .collect();
    // Oldest first: where two Ingresses claim the same thing, the older one wins.
    ingresses.sort_by_key(|i| {
        (
            i.metadata.creation_timestamp,
            i.metadata.namespace().to_string(),
            i.metadata.name.clone(),
        )
    });
    for ing in ingresses {
        let ns = ing.metadata.namespace();
        if table.default.is_none() {
            if let Some(b) = &ing.spec.default_backend {
                table.default = upstream(ns, b);
            }
        }
        for rule in &ing.spec.rules {
            let Some(http) = &rule.http else { continue };
            let host = rule.host.as_deref().unwrap_or("").to_ascii_lowercase();
            let group = if host.is_empty() {
                &mut table.any
            } else if let Some(suffix) = host.strip_prefix('*') {
                table.wildcard.entry(suffix.to_string()).or_default()
            } else {
                table.exact.entry(host).or_default()
            };
            for p in &http.paths {
                let Some(u) = upstream(ns, &p.backend) else {
                    continue;
                };
                let path = p.path.as_deref().unwrap_or("");
                let (kind, path) = match p.path_type.as_deref() {
                    Some("Exact") => (PathKind::Exact, path.to_string()),
                    _ => (PathKind::Prefix, path.trim_end_matches('/').to_string()),
                };
                // A path already claimed by an older Ingress stays with it.
                if group.paths.iter().any(|r| r.kind == kind && r.path == path) {
                    continue;
                }
                group.paths.push(PathRule {
                    kind,
                    path,
                    upstream: u,
                });
            }
        }
        for tls in &ing.spec.tls {
            let Some(secret) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) else {
                continue;
            };
            for h in &tls.hosts {
                table
                    .tls
                    .entry(h.to_ascii_lowercase())
                    .or_insert_with(|| format!("{ns}/{secret}"));
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{EndpointAddress, EndpointPort, EndpointSubset, ServicePort};
    use api::networking::*;

    fn backend(svc: &str, port: i32) -> IngressBackend {
        IngressBackend {
            service: Some(IngressServiceBackend {
                name: svc.into(),
                port: ServiceBackendPort {
                    name: None,
                    number: Some(port),
                },
            }),
            resource: None,
        }
    }

    fn path(p: &str, t: &str, svc: &str) -> HTTPIngressPath {
        HTTPIngressPath {
            path: Some(p.into()),
            path_type: Some(t.into()),
            backend: backend(svc, 80),
        }
    }

    fn objects(rules: Vec<IngressRule>, default: Option<&str>) -> Objects {
        let mut o = Objects::default();
        o.classes.insert("skiff".into(), skiff_default_class());
        let mut ing = Ingress::default();
        ing.metadata.name = "web".into();
        ing.metadata.namespace = Some("default".into());
        ing.spec.rules = rules;
        ing.spec.default_backend = default.map(|s| backend(s, 80));
        o.ingresses.insert(("default".into(), "web".into()), ing);
        for (i, svc) in ["a", "b", "c", "d"].iter().enumerate() {
            let mut s = Service::default();
            s.metadata.name = svc.to_string();
            s.spec.ports = vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            }];
            o.services.insert(("default".into(), svc.to_string()), s);
            let e = Endpoints {
                subsets: vec![EndpointSubset {
                    addresses: vec![EndpointAddress {
                        ip: format!("10.0.0.{}", i + 1),
                        ..Default::default()
                    }],
                    not_ready_addresses: vec![],
                    ports: vec![EndpointPort {
                        name: Some("http".into()),
                        port: 8080,
                        ..Default::default()
                    }],
                }],
                ..Default::default()
            };
            o.endpoints.insert(("default".into(), svc.to_string()), e);
        }
        o
    }

    fn target(t: &Table, host: &str, p: &str) -> String {
        match t.route(host, p) {
            Route::Upstream(u) => u.name.split(['/', ':']).nth(1).unwrap().to_string(),
            Route::NotFound => "404".into(),
        }
    }

    #[test]
    fn hosts_and_paths_follow_kubernetes_precedence() {
        let o = objects(
            vec![
                IngressRule {
                    host: Some("foo.example.com".into()),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![
                            path("/", "Prefix", "a"),
                            path("/api", "Prefix", "b"),
                            path("/api", "Exact", "c"),
                        ],
                    }),
                },
                IngressRule {
                    host: Some("*.example.com".into()),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![path("/", "ImplementationSpecific", "d")],
                    }),
                },
            ],
            None,
        );
        let t = build(&o);
        assert_eq!(target(&t, "foo.example.com", "/"), "a");
        assert_eq!(target(&t, "FOO.example.com", "/x"), "a");
        assert_eq!(target(&t, "foo.example.com", "/api"), "c");
        assert_eq!(target(&t, "foo.example.com", "/api/"), "b");
        assert_eq!(target(&t, "foo.example.com", "/api/v1"), "b");
        assert_eq!(target(&t, "foo.example.com", "/apiv1"), "a");
        assert_eq!(target(&t, "bar.example.com", "/apiv1"), "d");
        assert_eq!(target(&t, "a.bar.example.com", "/"), "404");
        assert_eq!(target(&t, "example.com", "/"), "404");
    }

    #[test]
    fn default_backend_and_endpoints() {
        let o = objects(
            vec![IngressRule {
                host: None,
                http: Some(HTTPIngressRuleValue {
                    paths: vec![path("/only", "Exact", "a")],
                }),
            }],
            Some("b"),
        );
        let t = build(&o);
        assert_eq!(target(&t, "any", "/only"), "a");
        assert_eq!(target(&t, "any", "/only/x"), "b");
        let Route::Upstream(u) = t.route("any", "/only") else {
            panic!()
        };
        assert_eq!(u.endpoints, vec!["10.0.0.1:8080".parse().unwrap()]);
    }

    #[test]
    fn other_classes_are_ignored() {
        let mut o = objects(vec![], Some("a"));
        let mut other = IngressClass::default();
        other.metadata.name = "nginx".into();
        other.spec.controller = Some("k8s.io/ingress-nginx".into());
        o.classes.insert("nginx".into(), other);
        for i in o.ingresses.values_mut() {
            i.spec.ingress_class_name = Some("nginx".into());
        }
        assert!(matches!(build(&o).route("x", "/"), Route::NotFound));
    }
}
