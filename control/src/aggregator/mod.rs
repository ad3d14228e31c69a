//! API aggregation (kube-aggregator inside the server; docs/design/admission.md §3):
//! `apiregistration.k8s.io/v1` APIServices.
//!
//! * **Local APIServices** ([`register`], on the leader): every built-in group version and
//!   each served version of a custom resource group is listed as an APIService named
//!   `VERSION.GROUP` without a service, Available with reason `Local`, labelled
//!   `kube-aggregator.kubernetes.io/automanaged` `onstart` (built-in: synced once per start)
//!   or `true` (custom resources: kept, and deleted when the version goes), as
//!   kube-apiserver's autoregister and CRD registration controllers keep them.
//! * **Non-local APIServices** (on every server, [`Aggregator`]): a group version whose
//!   APIService names a Service is served by that Service. Requests under
//!   `/apis/GROUP/VERSION` are authenticated and authorized here, then proxied
//!   (`http::aggregated`) to a ready endpoint of the Service over TLS (its certificate
//!   verified for `NAME.NAMESPACE.svc` against `caBundle`, or not with
//!   `insecureSkipTLSVerify`), with the user in the front-proxy headers and the front-proxy
//!   client certificate ([`crate::pki`]). Their discovery (`/apis/GROUP/VERSION`, an
//!   APIResourceList) is fetched every minute and on every change of an APIService, and
//!   goes into the resource table ([`crate::resources::Remote`]), so `/apis`, `/apis/GROUP`
//!   and the aggregated document list them. Their OpenAPI is not merged.
//! * **Availability** ([`available`], on the leader): the `Available` condition of a
//!   non-local APIService, from its Service, Endpoints and a discovery request, with
//!   kube-aggregator's reasons and messages, every 30 s and on changes. A group version whose
//!   APIService is not available answers 503 `service unavailable`.
//! * **Trust** ([`trust`], on every server): kube-system/extension-apiserver-authentication,
//!   the client CA and the front-proxy (`requestheader-*`) settings extension API servers read
//!   to authenticate the proxy and the users it names.

pub mod available;
pub mod register;
pub mod trust;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use api::apiregistration::{APIService, ServiceReference};
use api::transport::{Options, Transport, TransportError, Url};
use api::Kind;

use crate::registry::Registry;
use crate::resources::{Priority, Remote, RemoteResource, Resources};

/// The user kube-aggregator names when it reads a backend's discovery.
pub const AGGREGATOR_USER: &str = "system:kube-aggregator";
/// How long a discovery fetch may take (kube's discovery manager's timeout).
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often every backend's discovery is fetched again (kube's discovery manager's).
const DISCOVERY_REFRESH: Duration = Duration::from_secs(60);
/// How long an in-process read of an aggregated API ([`Aggregator::get`]) may take.
const API_GET_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest discovery document read from a backend.
const MAX_DISCOVERY: usize = 16 << 20;
/// The front-proxy headers, as kube-apiserver's `--requestheader-*` flags name them.
pub const USER_HEADER: &str = "X-Remote-User";
pub const GROUP_HEADER: &str = "X-Remote-Group";
pub const EXTRA_HEADER_PREFIX: &str = "X-Remote-Extra-";

/// A group version served by an extension API server: where requests for it go.
pub struct Backend {
    /// The APIService's name (`v1beta1.metrics.example.com`).
    pub name: String,
    pub service: ServiceReference,
    /// The APIService's Available condition is True (else requests answer 503).
    pub available: bool,
    /// The TLS client for the Service (its trust from `caBundle` or
    /// `insecureSkipTLSVerify`, the front-proxy client certificate), or why it cannot be
    /// made (requests answer 500 with it, as kube's transport building errors).
    pub transport: Result<Transport, String>,
    /// What the client was made from: an APIService whose spec changes gets a new one.
    spec: api::apiregistration::APIServiceSpec,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("service", &self.service)
            .field("available", &self.available)
            .finish_non_exhaustive()
    }
}

/// The aggregator's state on one server: the backends of the non-local APIServices and
/// their discovery, kept from the informer cache by [`Aggregator::start_installer`].
pub struct Aggregator {
    registry: Registry,
    resources: Arc<Resources>,
    pki: Arc<crate::pki::Pki>,
    backends: RwLock<HashMap<(String, String), Arc<Backend>>>,
    /// The last discovery fetched per APIService name (None: failing).
    discovery: RwLock<HashMap<String, Option<Arc<Vec<RemoteResource>>>>>,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    pub fn new(
        registry: Registry,
        resources: Arc<Resources>,
        pki: Arc<crate::pki::Pki>,
    ) -> Arc<Aggregator> {
        Arc::new(Aggregator {
            registry,
            resources,
            pki,
            backends: Default::default(),
            discovery: Default::default(),
        })
    }

    /// The registry (for the proxy's Service resolution).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The backend of `group`/`version`, if an extension API server serves it.
    pub fn backend(&self, group: &str, version: &str) -> Option<Arc<Backend>> {
        self.backends
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), version.to_string()))
            .cloned()
    }

    /// A GET of `path` (absolute, with its query) from the extension server of
    /// `group`/`version`, as `user` in the front-proxy headers: what the server's own
    /// controllers read from aggregated APIs (the autoscaler's custom and external
    /// metrics), through the backend, trust and endpoint resolution a proxied request
    /// takes. The body of a 2xx answer, or the error as client-go words it.
    pub async fn get(
        &self,
        group: &str,
        version: &str,
        path: &str,
        user: &str,
        groups: &[String],
    ) -> Result<Vec<u8>, String> {
        const UNAVAILABLE: &str = "the server is currently unable to handle the request";
        let backend = self
            .backend(group, version)
            .ok_or_else(|| "the server could not find the requested resource".to_string())?;
        if !backend.available {
            return Err(UNAVAILABLE.into());
        }
        let transport = backend.transport.as_ref().map_err(|e| e.clone())?;
        let s = &backend.service;
        let (host, port) = crate::webhook::resolve(&self.registry, &s.namespace, &s.name, s.port())
            .await
            .map_err(|_| UNAVAILABLE.to_string())?;
        let url = Url::parse(&format!("{}{path}", endpoint_origin(&host, port)))
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let (code, body) = get_as(transport, &url, user, groups).await?;
            if (200..300).contains(&code) {
                return Ok(body);
            }
            // client-go's words for an answer that is not a Status.
            let status: Option<api::meta::Status> = serde_json::from_slice(&body).ok();
            Err(match (status, code) {
                (Some(st), _) if !st.message.is_empty() => st.message,
                (_, 503) => UNAVAILABLE.into(),
                (_, 404) => "the server could not find the requested resource".into(),
                (_, code) => format!(
                    "an error on the server ({:?}) has prevented the request from succeeding (status {code})",
                    String::from_utf8_lossy(&body).trim()
                ),
            })
        };
        futures_lite::future::or(exchange, async {
            smol::Timer::after(API_GET_TIMEOUT).await;
            Err("context deadline exceeded".to_string())
        })
        .await
    }

    /// Keeps the backends and the table's remote group versions in step with the cached
    /// APIServices, and their discovery fetched: now (the cache is complete), on every
    /// change of an APIService, and every minute.
    pub async fn start_installer(
        self: &Arc<Self>,
        informers: &crate::machinery::informer::Informers,
    ) {
        let changes = informers.subscribe(&[Kind::APIService]);
        let cache = informers.cache().clone();
        let services: Vec<APIService> = cache.list(None);
        self.install(&services);
        let this = self.clone();
        smol::spawn(async move {
            loop {
                let services: Vec<APIService> = cache.list(None);
                this.install(&services);
                this.fetch_discovery(&services).await;
                let changed = async {
                    let _ = changes.recv().await;
                    // A change's burst (several APIServices written at start) in one pass.
                    smol::Timer::after(Duration::from_millis(50)).await;
                    while changes.try_recv().is_ok() {}
                };
                futures_lite::future::or(changed, async {
                    smol::Timer::after(DISCOVERY_REFRESH).await;
                })
                .await;
            }
        })
        .detach();
    }

    /// The backends of `services` (reusing the clients of unchanged ones) and the table's
    /// remote group versions with the discovery known so far.
    fn install(&self, services: &[APIService]) {
        let old = self
            .backends
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut backends = HashMap::new();
        for s in services {
            let Some(service) = &s.spec.service else {
                continue;
            };
            let key = (s.group().to_string(), s.version().to_string());
            // The core group is not proxied (its paths are `/api`), nor would a broken
            // object be.
            if key.0.is_empty() || key.1.is_empty() {
                continue;
            }
            let available = s.is_available();
            let backend = match old.get(&key) {
                Some(b) if b.spec == s.spec && b.name == s.metadata.name => Backend {
                    name: b.name.clone(),
                    service: b.service.clone(),
                    available,
                    transport: b.transport.clone(),
                    spec: b.spec.clone(),
                },
                _ => Backend {
                    name: s.metadata.name.clone(),
                    service: service.clone(),
                    available,
                    transport: self.proxy_transport(s),
                    spec: s.spec.clone(),
                },
            };
            backends.insert(key, Arc::new(backend));
        }
        *self.backends.write().unwrap_or_else(|e| e.into_inner()) = backends;
        self.publish(services);
    }

    /// The table's remote group versions: every non-local APIService, with its priorities
    /// and the discovery last fetched from it.
    fn publish(&self, services: &[APIService]) {
        let discovery = self.discovery.read().unwrap_or_else(|e| e.into_inner());
        let mut remote: Vec<Remote> = services
            .iter()
            .filter(|s| s.spec.service.is_some() && !s.group().is_empty())
            .filter(|s| !s.version().is_empty())
            .map(|s| Remote {
                group: s.group().into(),
                version: s.version().into(),
                priority: Priority {
                    group: s.spec.group_priority_minimum,
                    version: s.spec.version_priority,
                },
                resources: discovery.get(&s.metadata.name).cloned().flatten(),
            })
            .collect();
        remote.sort_by(|a, b| (&a.group, &a.version).cmp(&(&b.group, &b.version)));
        drop(discovery);
        self.resources.set_remote(remote);
    }

    /// Fetches every backend's discovery (at once, each within its timeout) and publishes
    /// what changed.
    async fn fetch_discovery(&self, services: &[APIService]) {
        let mut tasks = Vec::new();
        for s in services {
            let Some(backend) = self.backend(s.group(), s.version()) else {
                continue;
            };
            let (registry, group, version) = (
                self.registry.clone(),
                s.group().to_string(),
                s.version().to_string(),
            );
            let name = s.metadata.name.clone();
            tasks.push(smol::spawn(async move {
                let fetched = fetch_discovery(&registry, &backend, &group, &version).await;
                if let Err(e) = &fetched {
                    tracing::debug!(apiservice = %name, error = %e, "discovery failed");
                }
                (name, fetched.ok().map(Arc::new))
            }));
        }
        let mut found = HashMap::new();
        for t in tasks {
            let (name, resources) = t.await;
            found.insert(name, resources);
        }
        let changed = {
            let mut discovery = self.discovery.write().unwrap_or_else(|e| e.into_inner());
            let changed = *discovery != found;
            *discovery = found;
            changed
        };
        if changed {
            self.publish(services);
        }
    }

    /// The TLS client of an APIService's Service, as kube-aggregator's proxy transport: the
    /// Service's DNS name verified against `caBundle` (the system's roots without one), or
    /// nothing verified with `insecureSkipTLSVerify`; the front-proxy client certificate
    /// presented.
    fn proxy_transport(&self, s: &APIService) -> Result<Transport, String> {
        let service = s.spec.service.as_ref().ok_or("a local APIService")?;
        let insecure = s.spec.insecure_skip_tls_verify.unwrap_or(false);
        let server_name = rustls_pki_types::ServerName::try_from(format!(
            "{}.{}.svc",
            service.name, service.namespace
        ))
        .map_err(|e| format!("service name: {e}"))?;
        let tls = client_tls(
            &self.pki,
            if insecure {
                Trust::Any
            } else {
                Trust::Bundle(s.spec.ca_bundle.as_ref().map(|b| b.0.as_slice()))
            },
        )?;
        Ok(Transport::new(
            Arc::new(tls),
            Options {
                server_name: Some(server_name),
                // kube's proxy transport dials for at most 30 s; the answer (a watch) may
                // take as long as it takes.
                connect_timeout: Duration::from_secs(30),
                read_timeout: None,
                pool_size: 8,
                user_agent: concat!("skiff/", env!("CARGO_PKG_VERSION")).into(),
            },
        ))
    }

    /// The TLS client of the availability checks: any serving certificate (kube's check
    /// skips verification: "if someone owns the network and messes with your status that's
    /// not so bad"), the front-proxy client certificate presented.
    pub fn probe_transport(&self) -> Result<Transport, String> {
        let tls = client_tls(&self.pki, Trust::Any)?;
        Ok(Transport::new(
            Arc::new(tls),
            Options {
                server_name: None,
                connect_timeout: available::CHECK_TIMEOUT,
                read_timeout: Some(available::CHECK_TIMEOUT),
                pool_size: 0,
                user_agent: concat!("skiff/", env!("CARGO_PKG_VERSION")).into(),
            },
        ))
    }
}

/// A GET of `url` with `user` in the front-proxy headers, asking for JSON: the status and
/// the body (at most [`MAX_DISCOVERY`] bytes), or Go's words for a failed exchange.
async fn get_as(
    transport: &Transport,
    url: &Url,
    user: &str,
    groups: &[String],
) -> Result<(u16, Vec<u8>), String> {
    let mut headers = front_proxy_headers(user, groups, &BTreeMap::new());
    headers.push(("Accept".into(), "application/json".into()));
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut answer = transport
        .send("GET", url, &headers, &[])
        .await
        .map_err(|e| go_error(&e))?;
    let body = answer
        .bytes(MAX_DISCOVERY)
        .await
        .map_err(|e| go_error(&e))?;
    Ok((answer.status, body))
}

/// What a TLS client trusts.
enum Trust<'a> {
    /// This PEM bundle, or the system's roots without one.
    Bundle(Option<&'a [u8]>),
    /// Any certificate (signatures still checked).
    Any,
}

fn client_tls(pki: &crate::pki::Pki, trust: Trust<'_>) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match trust {
        Trust::Any => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(api::client::AnyServerCert(provider))),
        Trust::Bundle(ca) => {
            // The webhook client's trust: the bundle, else the system's roots.
            let roots = crate::webhook::root_store(ca);
            builder.with_root_certificates(roots)
        }
    };
    let mut tls = builder.with_client_cert_resolver(pki.front_proxy_client());
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    // A resumed session would show the certificate of the handshake it resumes, even after
    // the front-proxy certificate was renewed.
    tls.resumption = rustls::client::Resumption::disabled();
    Ok(tls)
}

/// The front-proxy headers naming a user, as client-go's `SetAuthProxyHeaders` writes them:
/// the name, each group, and each extra value under its key (escaped as `headerKeyEscape`
/// does: bytes that may not be in a header name, and `%`, as `%XX`).
pub fn front_proxy_headers(
    name: &str,
    groups: &[String],
    extra: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, String)> {
    let mut out = vec![(USER_HEADER.to_string(), name.to_string())];
    out.extend(
        groups
            .iter()
            .map(|g| (GROUP_HEADER.to_string(), g.to_string())),
    );
    for (key, values) in extra {
        let header = format!("{EXTRA_HEADER_PREFIX}{}", header_key_escape(key));
        out.extend(values.iter().map(|v| (header.clone(), v.clone())));
    }
    out
}

/// client-go's `headerKeyEscape`: what may not be in an HTTP header name (RFC 7230's token
/// characters), and `%`, percent-encoded.
fn header_key_escape(key: &str) -> String {
    let legal = |b: u8| b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if legal(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How Go's net/http words a failed exchange (what kube-aggregator reports): `dial tcp
/// ADDR: connect: connection refused` and the like.
pub fn go_error(e: &TransportError) -> String {
    match e {
        TransportError::Connect { addr, error } => match error.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                format!("dial tcp {addr}: connect: connection refused")
            }
            std::io::ErrorKind::TimedOut => format!("dial tcp {addr}: i/o timeout"),
            std::io::ErrorKind::HostUnreachable => {
                format!("dial tcp {addr}: connect: no route to host")
            }
            _ => format!("dial tcp {addr}: {error}"),
        },
        TransportError::Tls { error, .. } => {
            let text = error.to_string();
            if text.contains("UnknownIssuer") {
                "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                    .into()
            } else if text.contains("NotValidForName") {
                "tls: failed to verify certificate: x509: certificate is not valid for the requested name".into()
            } else if text.contains("Expired") {
                "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".into()
            } else {
                format!("tls: {text}")
            }
        }
        other => other.to_string(),
    }
}

/// `https://ADDR:PORT` of a resolved endpoint (brackets for IPv6).
pub fn endpoint_origin(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// Reads a backend's `/apis/GROUP/VERSION` as kube-aggregator's discovery manager does
/// through its proxy: as [`AGGREGATOR_USER`], only when the APIService is available, within
/// [`DISCOVERY_TIMEOUT`].
async fn fetch_discovery(
    registry: &Registry,
    backend: &Backend,
    group: &str,
    version: &str,
) -> Result<Vec<RemoteResource>, String> {
    if !backend.available {
        return Err("service unavailable".into());
    }
    let transport = backend.transport.as_ref().map_err(Clone::clone)?;
    let s = &backend.service;
    let call = async {
        let (host, port) =
            crate::webhook::resolve(registry, &s.namespace, &s.name, s.port()).await?;
        let url = Url::parse(&format!(
            "{}/apis/{group}/{version}",
            endpoint_origin(&host, port)
        ))
        .map_err(|e| e.to_string())?;
        let (code, body) = get_as(transport, &url, AGGREGATOR_USER, &[]).await?;
        if code != 200 {
            return Err(format!(
                "failed to download discovery for /apis/{group}/{version}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        parse_resource_list(&body)
    };
    futures_lite::future::or(call, async {
        smol::Timer::after(DISCOVERY_TIMEOUT).await;
        Err("request timed out".to_string())
    })
    .await
}

/// The resources of an APIResourceList.
pub fn parse_resource_list(body: &[u8]) -> Result<Vec<RemoteResource>, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if v["kind"] != "APIResourceList" {
        return Err(format!(
            "not an APIResourceList: kind {}",
            v["kind"].as_str().unwrap_or("(none)")
        ));
    }
    let s = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap_or_default().to_string();
    let strings = |r: &serde_json::Value, k: &str| -> Vec<String> {
        r[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()
    };
    let names = |r: &serde_json::Value, k: &str| -> Vec<Arc<str>> {
        strings(r, k).into_iter().map(Arc::from).collect()
    };
    Ok(v["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| RemoteResource {
            name: s(r, "name"),
            singular: s(r, "singularName"),
            namespaced: r["namespaced"].as_bool().unwrap_or(false),
            kind: s(r, "kind"),
            group: r["group"].as_str().map(String::from),
            version: r["version"].as_str().map(String::from),
            verbs: strings(r, "verbs"),
            short_names: names(r, "shortNames"),
            categories: names(r, "categories"),
        })
        .filter(|r| !r.name.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_proxy_headers_as_client_go_writes_them() {
        let mut extra = BTreeMap::new();
        extra.insert(
            "authentication.kubernetes.io/credential-id".to_string(),
            vec!["X509SHA256=ab".to_string()],
        );
        extra.insert("scopes".to_string(), vec!["a".into(), "b".into()]);
        let h = front_proxy_headers(
            "alice",
            &["dev".into(), "system:authenticated".into()],
            &extra,
        );
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            h,
            [
                ("X-Remote-User", "alice"),
                ("X-Remote-Group", "dev"),
                ("X-Remote-Group", "system:authenticated"),
                (
                    "X-Remote-Extra-authentication.kubernetes.io%2Fcredential-id",
                    "X509SHA256=ab"
                ),
                ("X-Remote-Extra-scopes", "a"),
                ("X-Remote-Extra-scopes", "b"),
            ]
        );
        assert_eq!(header_key_escape("a b%c:d"), "a%20b%25c%3Ad");
    }

    #[test]
    fn resource_lists_are_read() {
        let body = br#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"metrics.example.com/v1beta1","resources":[
            {"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["get","list"],"shortNames":["wd"]},
            {"name":"widgets/status","singularName":"","namespaced":true,"kind":"Widget","verbs":["get"]}]}"#;
        let list = parse_resource_list(body).expect("a list");
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].name, "widgets");
        assert_eq!(list[0].verbs, ["get", "list"]);
        assert_eq!(&*list[0].short_names[0], "wd");
        assert!(list[1].name.contains('/'));
        assert!(parse_resource_list(br#"{"kind":"Status"}"#).is_err());
    }

    #[test]
    fn go_errors() {
        let refused = TransportError::Connect {
            addr: "10.0.0.5:443".into(),
            error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(
            go_error(&refused),
            "dial tcp 10.0.0.5:443: connect: connection refused"
        );
        assert_eq!(endpoint_origin("fd00::1", 443), "https://[fd00::1]:443");
    }
}
