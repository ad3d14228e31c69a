//! The HTTPS API: TLS (rustls) connections on the smol executor, HTTP/1.1 by async-h1,
//! requests handled by a tide server with one endpoint that parses the path into a typed
//! [`route::Route`] and dispatches on it.

mod aggregated;
mod autoscaling_v1;
mod backup;
mod conn;
pub mod metadata;
pub use backup::PATH as BACKUP_PATH;
pub use logs::LocalAgent;
pub mod discovery;
pub mod events_v1;
mod eviction;
mod exec;
mod flowcontrol;
mod guard;
mod logs;
pub mod metrics;
mod openapi;
pub mod protobuf;
mod resource_metrics;
pub mod review;
pub mod route;
mod stream;
mod tokenrequest;
mod ui;
mod versions;
mod watch;

pub use logs::{log_options, LogOptions};
pub use openapi::{field_validation, FieldValidation};
pub use watch::watch_timeout;

use std::sync::Arc;
use std::time::{Duration, Instant};

use api::meta::DeleteOptions;
use api::object::Resource;
use api::selector::{FieldSelector, Selector as LabelSelector};
use api::{with_kind, AnyObject, Kind};
use futures_lite::{AsyncReadExt, FutureExt};
use rustls_pki_types::CertificateDer;
use serde_json::{json, Value};
use tide::http::{mime, StatusCode};

use crate::auth::{Authenticator, User};
use crate::error::ApiError;
use crate::registry::{self, Part, PatchType, Registry};
use crate::store::Store;
use route::{ResourcePath, Route};

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Bounds of the pause after a failed accept (EMFILE and the like), doubled on each failure.
const ACCEPT_DELAY_MIN: Duration = Duration::from_millis(5);
const ACCEPT_DELAY_MAX: Duration = Duration::from_secs(1);

/// Everything a request handler needs.
pub struct AppState {
    pub registry: Registry,
    /// The resources served (routing and discovery read it).
    pub resources: Arc<crate::resources::Resources>,
    /// The extension API servers requests under their group versions go to.
    pub aggregator: Arc<crate::aggregator::Aggregator>,
    pub pki: Arc<crate::pki::Pki>,
    pub store: Store,
    pub auth: Authenticator,
    /// Issues the ServiceAccount tokens of the TokenRequest subresource.
    pub sa_tokens: Arc<crate::serviceaccount::Tokens>,
    pub authorizer: Arc<crate::rbac::Authorizer>,
    /// What nodes may read (the Node authorizer's graph).
    pub node_graph: Arc<crate::nodegraph::NodeGraph>,
    pub metrics: metrics::Metrics,
    /// Nodes' CPU and memory for `metrics.k8s.io`, in memory only.
    pub resource_metrics: resource_metrics::Scraper,
    /// The agent running inside this process, once started.
    pub local_agent: std::sync::OnceLock<LocalAgent>,
    /// The tunnels agents opened to this server (`--tunnel` agents behind NAT).
    pub tunnels: Arc<crate::tunnel::Tunnels>,
    /// Whether `/ui/` serves the dashboard (`--disable-ui`).
    pub ui: bool,
    /// Whether `/api` and `/apis` answer the aggregated document when asked for it.
    pub aggregated_discovery: bool,
    /// Where requests are recorded, unless `--disable-audit-log`.
    pub audit: Option<crate::audit::AuditLog>,
    /// The registries.yaml handed to agents that have none of their own (read per request,
    /// so an edit reaches agents as they restart).
    pub registries_config: Option<std::path::PathBuf>,
    /// API Priority and Fairness, unless `--enable-priority-and-fairness=false`.
    pub flowcontrol: Option<Arc<crate::flowcontrol::Controller>>,
}

/// The address a request came from (put on each request of a connection).
#[derive(Clone, Copy)]
struct Peer(std::net::SocketAddr);

/// Where [`handle`] leaves the authenticated user and admission's annotations for the audit
/// log.
#[derive(Clone, Default)]
struct AuditUser(Arc<std::sync::Mutex<AuditSlot>>);

#[derive(Default)]
struct AuditSlot {
    user: Option<User>,
    impersonated: Option<User>,
    annotations: Vec<(String, String)>,
}

/// The client certificate chain of a connection, put on each of its requests.
#[derive(Clone)]
struct PeerCerts(Option<Arc<Vec<CertificateDer<'static>>>>);

type State = Arc<AppState>;

/// Serves the API on `listener` until the future is dropped.
pub async fn serve(
    listener: async_net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: State,
) -> std::io::Result<()> {
    let mut app = tide::with_state(state);
    app.at("/").all(endpoint);
    app.at("*").all(endpoint);
    let acceptor = futures_rustls::TlsAcceptor::from(tls);
    let mut accept_delay = Duration::ZERO;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => {
                accept_delay = Duration::ZERO;
                accepted
            }
            // Out of file descriptors or memory for a moment: wait and accept again, as Go's
            // net/http does, rather than stop serving.
            Err(e) => {
                accept_delay = (accept_delay * 2).clamp(ACCEPT_DELAY_MIN, ACCEPT_DELAY_MAX);
                tracing::warn!(error = %e, "accepting a connection failed; retrying in {accept_delay:?}");
                smol::Timer::after(accept_delay).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        smol::spawn(async move {
            let handshake = async { Some(acceptor.accept(tcp).await) }.or(async {
                smol::Timer::after(guard::HANDSHAKE_TIMEOUT).await;
                None
            });
            let tls = match handshake.await {
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                None => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let certs = tls
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| Arc::new(c.iter().map(|d| d.clone().into_owned()).collect()));
            let peer_certs = PeerCerts(certs);
            let target = guard::RawTarget::default();
            let io = async_dup::Arc::new(async_dup::Mutex::new(guard::Guarded::with_target(
                conn::HeadWithBody::new(tls),
                target.clone(),
            )));
            let result = async_h1::accept(io, |mut req| {
                req.ext_mut().insert(peer_certs.clone());
                req.ext_mut().insert(Peer(peer));
                if let Some(t) = target.take() {
                    req.ext_mut().insert(SentTarget(t));
                }
                let app = app.clone();
                async move { app.respond(req).await }
            })
            .await;
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        })
        .detach();
    }
}

/// What a node's list or watch of Secrets or ConfigMaps may show: what the node authorizer
/// lets it read, decided object by object (so an object a node's pod starts to use shows up
/// on its next change, and the agent reads it by name before that).
#[derive(Clone)]
struct NodeScope {
    node: Arc<str>,
    graph: Arc<crate::nodegraph::NodeGraph>,
}

impl NodeScope {
    fn shows(&self, o: &AnyObject) -> bool {
        let meta = o.meta();
        self.graph
            .may_read(&self.node, o.kind(), meta.namespace(), &meta.name)
    }
}

/// The request target as the client sent it (see [`guard::RawTarget`]).
#[derive(Clone)]
struct SentTarget(String);

/// The request's path as the client sent it, percent-decoded as Go's `URL.Path` is (which
/// kube-apiserver routes on): `.` and `..` segments stay segments, and a name of `.` or `..`
/// is then refused instead of acting on the parent. The URL async-h1 built, which has them
/// resolved, is only used when the target is not an origin-form path.
fn sent_path(req: &tide::Request<State>) -> String {
    decode_sent_path(
        req.ext::<SentTarget>().map(|t| t.0.as_str()),
        req.url().path(),
    )
}

/// `sent_path` of a request target as sent (`sent`, when the guard kept it) and of the
/// path of the URL async-h1 built (`url_path`). The fuzz target `query_headers` calls it.
pub fn decode_sent_path(sent: Option<&str>, url_path: &str) -> String {
    let raw = sent
        .map(|t| t.split(['?', '#']).next().unwrap_or(""))
        .filter(|p| p.starts_with('/'))
        .unwrap_or(url_path);
    if !raw.contains('%') {
        return raw.to_string();
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

/// The path every part of the request's handling goes by ([`sent_path`]).
#[derive(Clone)]
struct RequestPath(String);

pub(super) fn request_path(req: &tide::Request<State>) -> &str {
    match req.ext::<RequestPath>() {
        Some(p) => &p.0,
        None => req.url().path(),
    }
}

/// The target for the audit log: as sent, else rebuilt from the URL.
fn sent_uri(req: &tide::Request<State>) -> String {
    match req.ext::<SentTarget>() {
        Some(t) if t.0.starts_with('/') => t.0.clone(),
        _ => match req.url().query() {
            Some(q) => format!("{}?{q}", req.url().path()),
            None => req.url().path().to_string(),
        },
    }
}

async fn endpoint(mut req: tide::Request<State>) -> tide::Result {
    let started = Instant::now();
    let received = std::time::SystemTime::now();
    let state = req.state().clone();
    let method = req.method();
    let path = sent_path(&req);
    let table = state.resources.snapshot();
    let route = route::parse(&table, &path);
    req.set_ext(RequestPath(path));
    req.set_ext(flowcontrol::Received(started));
    let (verb, resource) = metric_labels(&req, &route);
    // What the audit log needs of the request, taken before the handler consumes it.
    let audit = state.audit.as_ref().map(|_| {
        let slot = AuditUser::default();
        req.set_ext(slot.clone());
        let attributes = route.as_ref().ok().and_then(|r| attributes(&req, r));
        let long_running = attributes.as_ref().is_some_and(|a| {
            a.verb == "watch"
                || a.resource.as_ref().is_some_and(|r| {
                    matches!(r.subresource.as_str(), "exec" | "attach" | "portforward")
                        || (r.subresource == "log"
                            && query(&req, "follow").is_some_and(|f| f == "true"))
                })
        });
        let uri = sent_uri(&req);
        (
            slot,
            attributes,
            uri,
            header(&req, "User-Agent"),
            req.ext::<Peer>().map(|p| p.0.ip()),
            long_running,
        )
    });
    let response = match handle(req, route).await {
        Ok(r) => r,
        Err(e) => status_response(&e),
    };
    if let (Some(log), Some((slot, attributes, uri, agent, source, long_running))) =
        (&state.audit, audit)
    {
        let slot = std::mem::take(&mut *slot.0.lock().unwrap_or_else(|e| e.into_inner()));
        log.record(&crate::audit::Request {
            user: slot.user.as_ref(),
            impersonated: slot.impersonated.as_ref(),
            annotations: &slot.annotations,
            attributes: attributes.as_ref(),
            method: method.as_ref(),
            uri: &uri,
            source,
            user_agent: agent.as_deref(),
            received,
            code: u16::from(response.status()),
            long_running,
        });
    }
    state.metrics.observe(
        &verb,
        &resource,
        u16::from(response.status()),
        started.elapsed(),
    );
    tracing::debug!(%method, code = u16::from(response.status()), elapsed_us = started.elapsed().as_micros() as u64, "request");
    Ok(response)
}

fn metric_labels(
    req: &tide::Request<State>,
    route: &Result<Route, route::NoRoute>,
) -> (String, String) {
    let verb = if query(req, "watch").is_some_and(|w| w == "true" || w == "1") {
        "WATCH".to_string()
    } else {
        req.method().to_string()
    };
    let resource = match route {
        Ok(Route::Resource(p)) => match &p.subresource {
            Some(s) => format!("{}/{s}", p.kind.info().plural),
            None => p.kind.info().plural.to_string(),
        },
        Ok(Route::Ui) => "ui".to_string(),
        Ok(Route::Aggregated { group, .. }) => format!("aggregated:{group}"),
        Ok(_) => "discovery".to_string(),
        Err(_) => "unknown".to_string(),
    };
    (verb, resource)
}

fn status_response(e: &ApiError) -> tide::Response {
    let code = StatusCode::try_from(e.code()).unwrap_or(StatusCode::InternalServerError);
    let mut r = tide::Response::new(code);
    // In the struct's order and with its omissions, which are kube-apiserver's.
    r.set_body(serde_json::to_vec(&e.0).unwrap_or_default());
    r.set_content_type(mime::JSON);
    r
}

fn json_response(code: StatusCode, v: &impl serde::Serialize) -> tide::Response {
    let mut r = tide::Response::new(code);
    r.set_body(serde_json::to_vec(v).unwrap_or_default());
    r.set_content_type(mime::JSON);
    r
}

/// One object in the encoding the client prefers: Kubernetes' protobuf when the first media
/// type it accepts is protobuf (kubectl's typed clients), JSON otherwise. JSON is also the
/// answer when the object has no protobuf form, as every client that asks for protobuf also
/// accepts JSON.
fn object_response(
    req: &tide::Request<State>,
    code: StatusCode,
    v: &impl serde::Serialize,
) -> tide::Response {
    if wants_protobuf(req) {
        match serde_json::to_value(v).map(|json| protobuf::encode(&json)) {
            Ok(Ok(bytes)) => {
                let mut r = tide::Response::new(code);
                r.set_body(bytes);
                r.set_content_type(protobuf::MEDIA_TYPE);
                return r;
            }
            Ok(Err(e)) => tracing::debug!("answering JSON, not protobuf: {e}"),
            Err(e) => tracing::debug!("answering JSON, not protobuf: {e}"),
        }
    }
    json_response(code, v)
}

/// The server's resource metrics as the horizontal pod autoscaler reads them.
pub fn pod_metrics(state: State) -> Arc<dyn crate::controllers::podautoscaler::PodMetrics> {
    Arc::new(resource_metrics::ServerPodMetrics(state))
}

/// The first media type the client accepts is Kubernetes' protobuf (not a table).
fn wants_protobuf(req: &tide::Request<State>) -> bool {
    accepts_protobuf_first(header(req, "Accept").as_deref())
}

/// `wants_protobuf` of an `Accept` header. The fuzz target `query_headers` calls it.
pub fn accepts_protobuf_first(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        let first = a.split(',').next().unwrap_or("");
        let mut parts = first.split(';').map(str::trim);
        parts
            .next()
            .is_some_and(|m| m.eq_ignore_ascii_case(protobuf::MEDIA_TYPE))
            && parts.all(|p| !p.starts_with("as="))
    })
}

fn query(req: &tide::Request<State>, key: &str) -> Option<String> {
    query_value(query_string(req), key)
}

/// The first value of `key` in a query string, decoded as `Url::query_pairs` decodes it.
fn query_value(query: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The query string of a request ("" without one).
fn query_string(req: &tide::Request<State>) -> &str {
    req.url().query().unwrap_or_default()
}

/// Whether this is `kubectl exec` reading its pod, which it does just before it opens the
/// exec stream: kubectl names its command in the `Kubectl-Command` header of every request.
/// The in-process agent then starts the exec's slowest kernel step (see
/// `agent::runtime::exec::warm_cgroup_migration`) a few milliseconds earlier. Harmless when
/// the guess is wrong, or the pod runs elsewhere: the warm-up changes nothing.
fn is_exec_lookup(req: &tide::Request<State>, path: &ResourcePath) -> bool {
    path.kind == Kind::Pod
        && req.method() == tide::http::Method::Get
        && path.name.is_some()
        && path.subresource.is_none()
        && header(req, "Kubectl-Command").as_deref() == Some("kubectl exec")
}

fn header(req: &tide::Request<State>, name: &str) -> Option<String> {
    req.header(name).map(|h| h.last().as_str().to_string())
}

fn wants_table(req: &tide::Request<State>) -> bool {
    accepts_table_first(header(req, "Accept").as_deref())
}

/// `wants_table` of an `Accept` header. The fuzz target `query_headers` calls it.
pub fn accepts_table_first(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.contains("as=Table"))
    })
}

async fn handle(
    mut req: tide::Request<State>,
    route: Result<Route, route::NoRoute>,
) -> Result<tide::Response, ApiError> {
    let state = req.state().clone();
    // The two steps of joining come before a node has credentials, and the dashboard's
    // files hold no data (the page calls the API with the user's own credentials).
    match &route {
        Ok(Route::Ui) => return ui::serve(&req, state.ui),
        Ok(Route::JoinCa) => {
            let mut r = tide::Response::new(StatusCode::Ok);
            r.set_body(state.pki.ca_pem().to_string());
            r.set_content_type("application/x-pem-file");
            return Ok(r);
        }
        Ok(Route::Join) => {
            let body = read_body(&mut req).await?;
            let join: api::join::JoinRequest = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid join request: {e}")))?;
            let answer = crate::join::join(&state.registry, &state.pki, join).await?;
            return Ok(json_response(
                StatusCode::Ok,
                &serde_json::to_value(answer).unwrap_or_default(),
            ));
        }
        Ok(Route::ServerJoin) => {
            if req.method() != tide::http::Method::Post {
                return Err(ApiError::method_not_allowed("a server joins with POST"));
            }
            let body = read_body(&mut req).await?;
            let join: api::join::ServerJoinRequest = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid server join request: {e}")))?;
            let answer =
                crate::join::server_join(&state.registry, &state.pki, &state.store, join).await?;
            let mut r = json_response(
                StatusCode::Ok,
                &serde_json::to_value(answer).unwrap_or_default(),
            );
            // Keys: kept by no cache.
            r.insert_header("Cache-Control", "no-store");
            return Ok(r);
        }
        _ => {}
    }
    let certs = req.ext::<PeerCerts>().cloned().unwrap_or(PeerCerts(None));
    let user = state
        .auth
        .authenticate(
            header(&req, "Authorization").as_deref(),
            certs.0.as_deref().map(|v| v.as_slice()),
        )
        .map_err(|_| ApiError::unauthorized())?;
    if let Some(slot) = req.ext::<AuditUser>() {
        slot.0.lock().unwrap_or_else(|e| e.into_inner()).user = Some(user.clone());
    }
    // Impersonation: from here on the request is the impersonated user's.
    let impersonation = crate::impersonation::wanted(
        req.iter()
            .flat_map(|(name, values)| values.iter().map(move |v| (name.as_str(), v.as_str()))),
    )?;
    let user = match impersonation {
        None => user,
        Some(wanted) => {
            let acting = crate::impersonation::impersonate(&state.authorizer, &user, &wanted)?;
            if let Some(slot) = req.ext::<AuditUser>() {
                slot.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .impersonated = Some(acting.clone());
            }
            acting
        }
    };
    // Priority and fairness, in kube's filter order: after impersonation, before
    // authorization. The seat is held until the answer is made.
    let admitted = match &state.flowcontrol {
        Some(fc) => match flowcontrol::admit(fc, &req, &route, &user).await {
            Ok(admitted) => admitted,
            Err(too_many) => return Ok(too_many),
        },
        None => None,
    };
    let answered = Box::pin(handle_authenticated(req, route, user)).await;
    let Some(admitted) = admitted else {
        return answered;
    };
    let mut response = answered.unwrap_or_else(|e| status_response(&e));
    flowcontrol::set_headers(&mut response, &admitted);
    drop(admitted);
    Ok(response)
}

/// [`handle`] past authentication, impersonation and priority and fairness.
async fn handle_authenticated(
    mut req: tide::Request<State>,
    route: Result<Route, route::NoRoute>,
    user: User,
) -> Result<tide::Response, ApiError> {
    let state = req.state().clone();
    if request_path(&req) == backup::PATH {
        let include_key = query(&req, "includeKey").is_some_and(|v| v == "true");
        return backup::serve(&state, &user, &req.method(), include_key).await;
    }
    let route = route.map_err(|_| ApiError::path_not_found())?;
    authorize(&state, &req, &route, &user)?;
    // A name is a path segment: `.` and `..` (which the path keeps as sent) name no object.
    if let Route::Resource(ResourcePath {
        name: Some(name), ..
    }) = &route
    {
        if let Err(why) = api::rbac::path_segment_name(name) {
            return Err(ApiError::bad_request(format!(
                "Name parameter invalid: {name:?}: {why}"
            )));
        }
    }
    let get_only = |req: &tide::Request<State>| {
        if req.method() == tide::http::Method::Get || req.method() == tide::http::Method::Head {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(format!(
                "the server does not allow {} here",
                req.method()
            )))
        }
    };
    match route {
        Route::Health(_) => {
            get_only(&req)?;
            let mut r = tide::Response::new(StatusCode::Ok);
            r.set_body("ok");
            r.set_content_type(mime::PLAIN);
            Ok(r)
        }
        Route::Version => {
            get_only(&req).map(|_| json_response(StatusCode::Ok, &discovery::version()))
        }
        Route::FlowControlDump(path) => match &state.flowcontrol {
            Some(fc) => Ok(flowcontrol::dump(fc, path, &req)),
            None => Err(ApiError::path_not_found()),
        },
        Route::Metrics => {
            get_only(&req)?;
            let mut r = tide::Response::new(StatusCode::Ok);
            r.set_body(
                state
                    .metrics
                    .render(&state.store.commit_stats(), state.store.watcher_count()),
            );
            r.set_content_type("text/plain; version=0.0.4");
            Ok(r)
        }
        Route::OpenApiV2 | Route::OpenApiV3 => {
            get_only(&req)?;
            // The custom resources' documents, from the stored definitions (v2 only when
            // asked for as JSON: kubectl asks for it in protobuf and is answered empty).
            let v2_json = matches!(route, Route::OpenApiV2)
                && openapi::wants_v2_json(header(&req, "Accept").as_deref());
            let crds: Vec<api::apiextensions::CustomResourceDefinition> =
                if matches!(route, Route::OpenApiV3) || v2_json {
                    let (crds, _) = state
                        .store
                        .list(Kind::CustomResourceDefinition, None)
                        .await?;
                    crds.into_iter()
                        .filter_map(api::apiextensions::CustomResourceDefinition::from_any)
                        .collect()
                } else {
                    Vec::new()
                };
            let (custom, custom_v2) = if v2_json {
                (Default::default(), openapi::custom_v2(&crds))
            } else {
                (openapi::custom_documents(&crds), None)
            };
            Ok(openapi::serve(
                request_path(&req),
                header(&req, "Accept").as_deref(),
                header(&req, "If-None-Match").as_deref(),
                &custom,
                custom_v2.as_ref(),
            ))
        }
        Route::JoinCa | Route::Join | Route::ServerJoin | Route::Ui => {
            Err(ApiError::path_not_found())
        }
        Route::Review(path) => {
            let body = read_body(&mut req).await?;
            review::serve(&state, &req, &user, &path, &body)
        }
        Route::Users => {
            if !user.is_master() {
                return Err(ApiError::forbidden(
                    "only an admin may sign user certificates",
                ));
            }
            let body = read_body(&mut req).await?;
            let r: api::join::UserCertRequest = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid user request: {e}")))?;
            if r.name.is_empty() || r.name.starts_with(crate::auth::NODE_PREFIX) {
                return Err(ApiError::bad_request(format!(
                    "invalid user name {:?}: it must not be empty or a node's name",
                    r.name
                )));
            }
            if r.groups.iter().any(|g| g == crate::auth::NODES_GROUP) {
                return Err(ApiError::bad_request(
                    "users cannot be put in system:nodes: nodes get certificates by joining",
                ));
            }
            // No --ttl (0): the cluster signing duration; longer is cut to it.
            let validity = state
                .pki
                .lifetimes()
                .client(Some(std::time::Duration::from_secs(r.ttl_seconds)));
            let certificate = state
                .pki
                .sign_user_csr(&r.csr, &r.name, &r.groups, validity)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let answer = api::join::UserCertResponse {
                certificate,
                ca: state.pki.ca_pem().to_string(),
            };
            Ok(json_response(
                StatusCode::Created,
                &serde_json::to_value(answer).unwrap_or_default(),
            ))
        }
        Route::Tunnel => tunnel(&state, &req, &user).await,
        Route::Registries => {
            get_only(&req)?;
            if user.node_name().is_none() && !user.is_master() {
                return Err(ApiError::forbidden(
                    "only nodes and admins may read the registries configuration",
                ));
            }
            let text = state
                .registries_config
                .as_ref()
                .and_then(|p| std::fs::read_to_string(p).ok());
            match text {
                Some(t) => {
                    let mut r = tide::Response::new(StatusCode::Ok);
                    r.set_body(t);
                    r.set_content_type("application/yaml");
                    Ok(r)
                }
                None => Err(ApiError::path_not_found()
                    .with_message("the server has no registries configuration")),
            }
        }
        Route::Tokens => {
            if !user.is_master() {
                return Err(ApiError::forbidden("only an admin may create join tokens"));
            }
            let body = read_body(&mut req).await?;
            let t: api::join::TokenRequest = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid token request: {e}")))?;
            let usage = if t.server {
                crate::join::TokenUsage::Server
            } else {
                crate::join::TokenUsage::Node
            };
            let answer = crate::join::create_token(
                &state.registry,
                &state.pki,
                std::time::Duration::from_secs(t.ttl_seconds),
                usage,
            )
            .await?;
            Ok(json_response(
                StatusCode::Created,
                &serde_json::to_value(answer).unwrap_or_default(),
            ))
        }
        Route::CoreVersions | Route::GroupList => {
            get_only(&req)?;
            let table = state.resources.snapshot();
            let core = route == Route::CoreVersions;
            // kubectl asks for the aggregated document first (apidiscovery.k8s.io/v2).
            let aggregated = discovery::negotiate_aggregated(header(&req, "Accept").as_deref())
                .filter(|_| state.aggregated_discovery);
            if let Some(version) = aggregated {
                return Ok(discovery::serve_aggregated(
                    &table,
                    core,
                    version,
                    header(&req, "If-None-Match").as_deref(),
                ));
            }
            Ok(if core {
                json_response(StatusCode::Ok, &discovery::core_versions())
            } else {
                json_response(StatusCode::Ok, &discovery::group_list(&table))
            })
        }
        Route::Group(g) => get_only(&req).map(|_| {
            let table = state.resources.snapshot();
            json_response(StatusCode::Ok, &discovery::group(&table, &g))
        }),
        Route::ResourceList { group, version } => {
            get_only(&req)?;
            let table = state.resources.snapshot();
            Ok(json_response(
                StatusCode::Ok,
                &discovery::resource_list(&table, &group, &version),
            ))
        }
        Route::ResourceMetrics(path) => {
            get_only(&req)?;
            resource_metrics::serve(&state, &req, &user, &path).await
        }
        Route::Aggregated { group, version } => {
            aggregated::serve(&state, &mut req, &user, &group, &version).await
        }
        Route::Resource(path)
            if path.kind == Kind::Pod && path.subresource.as_deref() == Some("log") =>
        {
            logs::pod_log(&state, &req, &user, &path).await
        }
        Route::Resource(path)
            if path.kind == Kind::Pod
                && matches!(
                    path.subresource.as_deref(),
                    Some("exec" | "attach" | "portforward")
                ) =>
        {
            exec::serve(&state, &req, &user, &path).await
        }
        Route::Resource(path) => {
            if is_exec_lookup(&req, &path) {
                if let Some(local) = state.local_agent.get() {
                    (local.exec_coming)();
                }
            }
            let mut body = read_body(&mut req).await?;
            if let Some(node) = user.node_name() {
                authorize_node(&state, &req, node, &path, &body).await?;
                if crate::nodegraph::KINDS.contains(&path.kind) && path.name.is_none() {
                    req.set_ext(NodeScope {
                        node: node.into(),
                        graph: state.node_graph.clone(),
                    });
                }
            } else if !user.is_master() && crate::rbac::KINDS.contains(&path.kind) {
                check_escalation(&state, &req, &user, &path, &body)?;
            }
            if path.kind == Kind::ServiceAccount && path.subresource.as_deref() == Some("token") {
                return tokenrequest::serve(&state, &req, &path, &body).await;
            }
            if path.kind == Kind::CertificateSigningRequest
                && req.method() == tide::http::Method::Post
                && path.name.is_none()
            {
                // The requestor is whoever sends the request, never what the body says.
                let mut csr: api::certificates::CertificateSigningRequest =
                    decode_body(&req, &body)?;
                csr.spec.username = Some(user.name.clone());
                csr.spec.uid = (!user.uid.is_empty()).then(|| user.uid.clone());
                csr.spec.groups = user.groups.clone();
                csr.status = Default::default();
                crate::certificates::admit_create(&csr)?;
                let created = writer(&state, &req)?.create(csr, None).await?;
                return Ok(object_response(
                    &req,
                    StatusCode::Created,
                    &api::codec::json(&created),
                ));
            }
            if path.kind == Kind::Pod && path.subresource.as_deref() == Some("eviction") {
                let ns = path.namespace.clone().unwrap_or_default();
                let name = path.name.clone().unwrap_or_default();
                return eviction::serve(&state, &req, &ns, &name, &body).await;
            }
            // Metadata-only answers: asked of the ordinary path as JSON, converted after.
            let metadata_only = metadata::accepts_metadata(header(&req, "Accept").as_deref())
                .map(|v| metadata::request(&mut req, v));
            let legacy = if path.legacy_version {
                let (converted, answer) = autoscaling_v1::request(&mut req, body)?;
                body = converted;
                Some(answer)
            } else {
                None
            };
            // A custom resource at a version it is not stored at.
            let mut versions = versions::Versions::of(&state, path.kind, &path.version);
            if let Some(v) = &mut versions {
                body = versions::request(&state, &mut req, &path, v, body).await?;
            }
            // events.k8s.io/v1 Events: core Events under other names.
            let events_v1 = path.kind == Kind::Event && path.group == events_v1::GROUP;
            if events_v1 {
                body = events_v1::request(&req, body)?;
                if !wants_table(&req) {
                    req.insert_header("Accept", "application/json");
                }
                if !body.is_empty() && req.method() != tide::http::Method::Patch {
                    req.insert_header("Content-Type", "application/json");
                }
            }
            let mut warnings = openapi::check_request(&req, &path, &mut body)?;
            // Admission (Pod Security) adds its warnings through the request's writer.
            let admission = registry::Warnings::default();
            admission.lock().unwrap_or_else(|e| e.into_inner()).user = Some(user.clone());
            if let Some(node) = user.node_name() {
                admission
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .requester = Some(Arc::new(NodeRestriction {
                    node: node.to_string(),
                }));
            } else if path.kind == Kind::CertificateSigningRequest {
                if let Some(sub @ ("approval" | "status")) = path.subresource.as_deref() {
                    admission
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .requester = Some(Arc::new(crate::certificates::SignerAdmission {
                        user: user.clone(),
                        authorizer: state.authorizer.clone(),
                        subresource: sub.to_string(),
                    }));
                }
            }
            req.set_ext(admission.clone());
            let audit = req.ext::<AuditUser>().cloned();
            let mut answered = with_kind!(path.kind, K, {
                resource_boxed::<K>(&state, &req, path.clone(), body).await
            });
            // A patch converted into an update retries on a conflict, as kube's patcher.
            if let Some(v) = versions.as_mut().filter(|v| v.retries()) {
                let mut tries = 0;
                while tries < 5 && answered.as_ref().is_err_and(|e| e.code() == 409) {
                    tries += 1;
                    let body = versions::request(&state, &mut req, &path, v, Vec::new()).await?;
                    answered = with_kind!(path.kind, K, {
                        resource_boxed::<K>(&state, &req, path.clone(), body).await
                    });
                }
            }
            let notes = std::mem::take(&mut *admission.lock().unwrap_or_else(|e| e.into_inner()));
            if let Some(slot) = audit {
                slot.0.lock().unwrap_or_else(|e| e.into_inner()).annotations =
                    notes.audit_annotations;
            }
            let mut response = answered?;
            warnings.extend(notes.warnings);
            if let Some(answer) = legacy {
                response = autoscaling_v1::response(response, answer).await?;
            }
            if let Some(v) = versions {
                response = versions::response(&state, response, v, metadata_only.is_some()).await?;
            }
            if events_v1 {
                response = events_v1::response(response).await?;
            }
            if let Some(answer) = metadata_only {
                response = metadata::response(response, answer).await?;
            }
            openapi::add_warnings(&mut response, &warnings);
            Ok(response)
        }
    }
}

/// Kubernetes' NodeRestriction on a node's updates of its own Node, judged on the result: it
/// may not change its taints, nor labels of Kubernetes' namespaces other than the kubelet's.
#[derive(Debug)]
struct NodeRestriction {
    node: String,
}

impl registry::RequesterAdmission for NodeRestriction {
    fn admit_update(
        &self,
        _kind: Kind,
        old: &dyn std::any::Any,
        new: &mut dyn std::any::Any,
    ) -> Result<(), ApiError> {
        let (Some(old), Some(new)) = (
            old.downcast_ref::<api::core::Node>(),
            new.downcast_ref::<api::core::Node>(),
        ) else {
            return Ok(());
        };
        let name = &old.metadata.name;
        let refuse = |why: String| Err(ApiError::forbidden_object(Kind::Node, name, &why));
        if new.spec.taints != old.spec.taints {
            return refuse(format!(
                "node {:?} is not allowed to modify taints",
                self.node
            ));
        }
        let (o, n) = (&old.metadata.labels, &new.metadata.labels);
        let mut bad: Vec<&str> = o
            .keys()
            .chain(n.keys())
            .filter(|k| o.get(*k) != n.get(*k))
            .map(String::as_str)
            .filter(|k| api::core::node_label_forbidden_to_nodes(k))
            .collect();
        bad.sort_unstable();
        bad.dedup();
        if !bad.is_empty() {
            return refuse(format!(
                "node {:?} is not allowed to modify labels: {}",
                self.node,
                bad.join(", ")
            ));
        }
        Ok(())
    }
}

/// What the request asks to do, as the authorizer sees it (Kubernetes' RequestInfo).
fn attributes(req: &tide::Request<State>, route: &Route) -> Option<crate::rbac::Attributes> {
    use crate::rbac::Attributes;
    use tide::http::Method;
    let method = req.method();
    let non_resource = || {
        let verb = match method {
            Method::Head => "get".to_string(),
            m => m.to_string().to_ascii_lowercase(),
        };
        Some(Attributes::non_resource(&verb, request_path(req)))
    };
    match route {
        Route::Resource(p) => {
            let sub = p.subresource.as_deref().unwrap_or("");
            let verb = match (&method, p.name.is_some(), sub) {
                // Running a command in a pod is a create, whichever method opens the stream.
                (_, _, "exec" | "attach" | "portforward") => "create",
                (Method::Get | Method::Head, false, _)
                    if query(req, "watch").is_some_and(|w| w == "true" || w == "1") =>
                {
                    "watch"
                }
                (Method::Get | Method::Head, false, _) => "list",
                (Method::Get | Method::Head, true, _) => "get",
                (Method::Post, _, _) => "create",
                (Method::Put, _, _) => "update",
                (Method::Patch, _, _) => "patch",
                (Method::Delete, false, _) => "deletecollection",
                (Method::Delete, true, _) => "delete",
                _ => "unknown",
            };
            let info = p.kind.info();
            // A namespace object's own namespace is itself (Kubernetes authorizes `get
            // namespace x` in namespace x, so a namespaced view binding can read it).
            let ns = match (p.kind, &p.namespace, &p.name) {
                (Kind::Namespace, _, Some(name)) => name.clone(),
                (_, ns, _) => ns.clone().unwrap_or_default(),
            };
            Some(Attributes::resource(
                verb,
                &p.group,
                info.plural,
                sub,
                &ns,
                p.name.as_deref().unwrap_or(""),
            ))
        }
        Route::ResourceMetrics(p) => Some(Attributes::resource(
            if p.name.is_some() { "get" } else { "list" },
            route::METRICS_GROUP,
            if p.pods { "pods" } else { "nodes" },
            "",
            p.namespace.as_deref().unwrap_or(""),
            p.name.as_deref().unwrap_or(""),
        )),
        Route::Review(p) => Some(Attributes::resource(
            "create",
            p.group,
            &p.plural,
            "",
            p.namespace.as_deref().unwrap_or(""),
            "",
        )),
        Route::Aggregated { .. } => Some(aggregated::attributes(
            &method,
            request_path(req),
            query_string(req),
        )),
        // Decided by their handlers (the tunnel: nodes only).
        Route::JoinCa | Route::Join | Route::ServerJoin | Route::Tunnel => None,
        _ => non_resource(),
    }
}

/// An agent's tunnel (docs/design/tunnel.md): a node's `GET` with `Upgrade:
/// skiff-tunnel/1`, answered 101; the upgraded connection carries the yamux session
/// `crate::tunnel` runs.
async fn tunnel(
    state: &State,
    req: &tide::Request<State>,
    user: &User,
) -> Result<tide::Response, ApiError> {
    let Some(node) = user.node_name() else {
        return Err(ApiError::forbidden(format!(
            "User \"{}\" cannot open a node tunnel: only nodes may",
            user.name
        )));
    };
    if req.method() != tide::http::Method::Get {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow {} here",
            req.method()
        )));
    }
    let upgrade = header(req, "Upgrade").unwrap_or_default();
    if !upgrade.eq_ignore_ascii_case(api::tunnel::PROTOCOL) {
        return Err(ApiError::bad_request(format!(
            "a tunnel needs Upgrade: {}",
            api::tunnel::PROTOCOL
        )));
    }
    let mut response = tide::Response::new(StatusCode::SwitchingProtocols);
    response.insert_header("Connection", "Upgrade");
    response.insert_header("Upgrade", api::tunnel::PROTOCOL);
    // async-h1 hands over the connection once the 101 is written.
    let upgraded = AsMut::<tide::http::Response>::as_mut(&mut response)
        .recv_upgrade()
        .await;
    let (tunnels, node) = (state.tunnels.clone(), node.to_string());
    smol::spawn(async move {
        if let Some(conn) = upgraded.await {
            tunnels.accept(node, conn);
        }
    })
    .detach();
    Ok(response)
}

/// Runs the authorizer. A node's resource requests are decided by the node rules instead
/// (Kubernetes' Node authorizer and NodeRestriction, [`authorize_node`] and the checks of
/// the log, exec and metrics handlers), which apply on top for nodes.
fn authorize(
    state: &State,
    req: &tide::Request<State>,
    route: &Route,
    user: &User,
) -> Result<(), ApiError> {
    // Nodes: resources by the Node authorizer (in `handle`); the registries file is theirs.
    if user.node_name().is_some()
        && matches!(
            route,
            Route::Resource(_) | Route::ResourceMetrics(_) | Route::Registries
        )
    {
        return Ok(());
    }
    match attributes(req, route) {
        Some(a) => state.authorizer.check(user, &a),
        None => Ok(()),
    }
}

/// RBAC's escalation rule: a Role or ClusterRole may only grant what its author holds, and
/// a binding may only bind a role whose rules its author holds, unless the author may
/// `escalate` roles or `bind` the role. A patch cannot be checked before it is applied, so
/// it needs `escalate` (roles) or `bind` (bindings).
fn check_escalation(
    state: &State,
    req: &tide::Request<State>,
    user: &User,
    path: &ResourcePath,
    body: &[u8],
) -> Result<(), ApiError> {
    use crate::rbac::Attributes;
    use tide::http::Method;
    let method = req.method();
    if !matches!(method, Method::Post | Method::Put | Method::Patch) || path.subresource.is_some() {
        return Ok(());
    }
    let ns = path.namespace.clone().unwrap_or_default();
    let info = path.kind.info();
    let is_role = matches!(path.kind, Kind::Role | Kind::ClusterRole);
    let may = |verb: &str, resource: &str, name: &str| {
        state
            .authorizer
            .authorize(
                user,
                &Attributes::resource(verb, api::rbac::GROUP, resource, "", &ns, name),
            )
            .allowed
    };
    // The object's name: from the path, else (a create) from the body.
    let name = path.name.clone().unwrap_or_else(|| {
        parse_object_body(req, body)
            .ok()
            .and_then(|v| {
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .unwrap_or_default()
    });
    if is_role && may("escalate", info.plural, &name) {
        return Ok(());
    }
    let (wanted, bind_on) = if is_role {
        let rules = match path.kind {
            Kind::Role => decode_body::<api::rbac::Role>(req, body).map(|r| r.rules),
            _ => match decode_body::<api::rbac::ClusterRole>(req, body) {
                // Aggregated rules are written by the controller, with its privileges: only
                // who may escalate may say what they gather (Kubernetes' rule).
                Ok(r) if r.aggregation_rule.is_some() => {
                    return Err(ApiError::forbidden(format!(
                        "{} {name:?} is forbidden: must have cluster-admin privileges to use the aggregationRule",
                        info.qualified_plural()
                    )));
                }
                r => r.map(|r| r.rules),
            },
        };
        (rules, None)
    } else {
        let role_ref = match path.kind {
            Kind::RoleBinding => {
                decode_body::<api::rbac::RoleBinding>(req, body).map(|b| b.role_ref)
            }
            _ => decode_body::<api::rbac::ClusterRoleBinding>(req, body).map(|b| b.role_ref),
        };
        let role_ref = match role_ref {
            Ok(r) => r,
            // A patch, or a body the ordinary path will refuse with the right error.
            Err(_) if method == Method::Patch => api::rbac::RoleRef::default(),
            Err(_) => return Ok(()),
        };
        let resource = if role_ref.kind == "Role" {
            "roles"
        } else {
            "clusterroles"
        };
        let rules = state
            .authorizer
            .role_rules(&role_ref.kind, &ns, &role_ref.name)
            .ok_or_else(|| {
                ApiError::not_found(
                    if role_ref.kind == "Role" {
                        Kind::Role
                    } else {
                        Kind::ClusterRole
                    },
                    &role_ref.name,
                )
            });
        (rules, Some((resource, role_ref.name)))
    };
    if let Some((resource, role)) = &bind_on {
        if !role.is_empty() && may("bind", resource, role) {
            return Ok(());
        }
    }
    if method == Method::Patch {
        return Err(ApiError::forbidden(format!(
            "{} {name:?} is forbidden: patching {} needs the {} permission",
            info.qualified_plural(),
            info.plural,
            if is_role { "escalate" } else { "bind" }
        )));
    }
    let wanted = match wanted {
        Ok(w) => w,
        Err(e) if e.code() == 404 => return Err(e),
        // A body the ordinary path will refuse with the right error.
        Err(_) => return Ok(()),
    };
    let held = state.authorizer.rules_for(user, &ns);
    let missing = crate::rbac::covers(&held, &wanted);
    if missing.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = missing.iter().map(compact_rule).collect();
    Err(ApiError::forbidden(format!(
        "{} {name:?} is forbidden: user {:?} (groups={:?}) is attempting to grant RBAC permissions not currently held:\n{}",
        info.qualified_plural(),
        user.name,
        user.groups,
        shown.join("\n")
    )))
}

/// A rule as Kubernetes' CompactString prints it in escalation errors:
/// `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
fn compact_rule(r: &api::rbac::PolicyRule) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut parts = Vec::new();
    for (label, values) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("ResourceNames", &r.resource_names),
        ("NonResourceURLs", &r.non_resource_urls),
        ("Verbs", &r.verbs),
    ] {
        if !values.is_empty() {
            parts.push(format!("{label}:[{}]", list(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// What a node may do (Kubernetes' node authorizer and NodeRestriction, simplified): read
/// what a kubelet and the node's ingress proxy read; write only its own Node, the status of pods bound to it, deletions of
/// pods bound to it, and events.
async fn authorize_node(
    state: &State,
    req: &tide::Request<State>,
    node: &str,
    path: &ResourcePath,
    body: &[u8],
) -> Result<(), ApiError> {
    use tide::http::Method;
    let method = &req.method();
    let forbidden = |what: &str| {
        ApiError::forbidden(format!(
            "{} is forbidden: User \"system:node:{node}\" cannot {what}",
            path.kind.info().plural
        ))
    };
    let reading = *method == Method::Get || *method == Method::Head;
    match path.kind {
        Kind::Node
        | Kind::Pod
        | Kind::Service
        | Kind::Endpoints
        | Kind::EndpointSlice
        | Kind::RuntimeClass
        // Each agent enforces NetworkPolicies (with pods' and namespaces' labels), as
        // kube-router's or Calico's node agents do with their own RBAC.
        | Kind::NetworkPolicy
        | Kind::Namespace
        | Kind::Event
        // The node's built-in ingress proxy reads these (with Services, Endpoints, Secrets).
        | Kind::Ingress
        | Kind::IngressClass
        // A pod's claims and their volumes, mounted by the agent.
        | Kind::PersistentVolumeClaim
        | Kind::PersistentVolume
        | Kind::StorageClass
            if reading =>
        {
            Ok(())
        }
        // Secrets and ConfigMaps: by name, only those its pods use (and, Secrets, those
        // Ingresses of skiff's class name); lists and watches show only those (NodeScope).
        Kind::Secret | Kind::ConfigMap if reading => {
            let (Some(ns), Some(name)) = (&path.namespace, &path.name) else {
                return Ok(());
            };
            if state
                .node_graph
                .confirm(&state.store, node, path.kind, ns, name)
                .await?
            {
                return Ok(());
            }
            Err(ApiError::forbidden_object(
                path.kind,
                name,
                &format!(
                    "User \"system:node:{node}\" cannot get resource \"{}\" in API group \"\" in the namespace \"{ns}\": no relationship found between node '{node}' and this object",
                    path.kind.info().plural
                ),
            ))
        }
        // The agent removes a deleted local-path volume's directory, then its cleanup
        // finalizer: only that, only on a volume of its own node.
        Kind::PersistentVolume if *method == Method::Put && path.subresource.is_none() => {
            let Some(name) = &path.name else {
                return Err(forbidden("modify collections of persistentvolumes"));
            };
            let stored: api::storage::PersistentVolume = state.registry.get("", name).await?;
            let sent: api::storage::PersistentVolume = api::codec::parse_json(body)
                .map_err(|e| ApiError::bad_request(e.to_string()))
                .and_then(crate::registry::decode)?;
            let ours = crate::controllers::volume::local_path_node(&stored) == Some(node)
                && stored.metadata.deletion_timestamp.is_some();
            let mut expected = stored.metadata.finalizers.clone();
            expected.retain(|f| f != api::storage::LOCAL_PATH_CLEANUP_FINALIZER);
            if ours && sent.spec == stored.spec && sent.metadata.finalizers == expected {
                Ok(())
            } else {
                Err(forbidden(&format!(
                    "modify persistentvolume \"{name}\" other than removing the cleanup finalizer of a volume of its own"
                )))
            }
        }
        Kind::Node => {
            let name = match (&path.name, method) {
                (Some(n), _) => n.clone(),
                (None, &Method::Post) => serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| {
                        v.pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .unwrap_or_default(),
                (None, _) => return Err(forbidden("modify other nodes")),
            };
            if name != node {
                return Err(forbidden(&format!("modify node \"{name}\"")));
            }
            // The Node authorizer grants no delete (a node that could delete its Node could
            // shed its taints with it).
            if *method == Method::Delete {
                return Err(crate::rbac::forbidden(
                    &crate::auth::User::node(node),
                    &crate::rbac::Attributes::resource("delete", "", "nodes", "", "", &name),
                ));
            }
            // NodeRestriction on create: only the kubelet's own labels of Kubernetes'
            // namespaces (updates are checked on the result, NodeRestriction below).
            if *method == Method::Post {
                let labels: Vec<String> = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| v.pointer("/metadata/labels").cloned())
                    .and_then(|l| l.as_object().map(|m| m.keys().cloned().collect()))
                    .unwrap_or_default();
                let mut bad: Vec<String> = labels
                    .into_iter()
                    .filter(|l| api::core::node_label_forbidden_to_nodes(l))
                    .collect();
                if !bad.is_empty() {
                    bad.sort();
                    return Err(ApiError::forbidden_object(
                        Kind::Node,
                        &name,
                        &format!(
                            "node {name:?} is not allowed to set the following labels: {}",
                            bad.join(", ")
                        ),
                    ));
                }
            }
            Ok(())
        }
        Kind::Pod => {
            let (Some(ns), Some(name)) = (&path.namespace, &path.name) else {
                return Err(forbidden("create or delete collections of pods"));
            };
            let allowed = matches!(
                (method, path.subresource.as_deref()),
                (&Method::Put | &Method::Patch, Some("status")) | (&Method::Delete, None)
            );
            if !allowed {
                return Err(forbidden("change pods other than their status"));
            }
            let pod: api::core::Pod = state.registry.get(ns, name).await?;
            if pod.spec.node_name.as_deref() == Some(node) {
                Ok(())
            } else {
                Err(forbidden(&format!(
                    "modify pod \"{name}\", which is not bound to it"
                )))
            }
        }
        Kind::Event if *method == Method::Post || *method == Method::Patch => Ok(()),
        // Its heartbeat Lease (the system:node role's rights on leases, and NodeRestriction's
        // rule: only the Lease named after the node in kube-node-lease).
        Kind::Lease if path.subresource.is_none() => {
            let name = match (&path.name, method) {
                (Some(n), _) => n.clone(),
                (None, &Method::Post) => parse_object_body(req, body)
                    .ok()
                    .and_then(|v| {
                        v.pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .unwrap_or_default(),
                (None, _) => return Err(forbidden("list or watch leases")),
            };
            let ns = path.namespace.as_deref().unwrap_or("");
            if ns == api::coordination::NODE_LEASE_NAMESPACE && name == node {
                Ok(())
            } else {
                Err(forbidden(&format!(
                    "access lease \"{name}\" in namespace \"{ns}\": a node may only access its own lease in {}",
                    api::coordination::NODE_LEASE_NAMESPACE
                )))
            }
        }
        // Renewing its certificate (the system:node role's create, get, list and watch on
        // certificatesigningrequests); what is approved and signed is the approver's and the
        // signer's to decide.
        Kind::CertificateSigningRequest
            if path.subresource.is_none()
                && (reading || (*method == Method::Post && path.name.is_none())) =>
        {
            Ok(())
        }
        // Tokens for the projected volumes of its pods: only bound to a pod of this node
        // that runs as that ServiceAccount (the Node authorizer and NodeRestriction).
        Kind::ServiceAccount
            if *method == Method::Post && path.subresource.as_deref() == Some("token") =>
        {
            let (Some(ns), Some(sa)) = (&path.namespace, &path.name) else {
                return Err(forbidden("create tokens without a service account"));
            };
            // In whatever format the request declares (kubectl and the agent differ).
            let bound = parse_object_body(req, body)
                .ok()
                .and_then(|v| v.pointer("/spec/boundObjectRef").cloned())
                .filter(|r| r.get("kind").and_then(Value::as_str) == Some("Pod"));
            let Some(bound) = bound else {
                return Err(ApiError::forbidden(format!(
                    "serviceaccounts \"{sa}\" is forbidden: node requested token not bound to a pod"
                )));
            };
            let field = |k: &str| bound.get(k).and_then(Value::as_str).unwrap_or_default();
            let pod: api::core::Pod = match state.registry.get(ns, field("name")).await {
                Ok(p) => p,
                Err(e) if e.code() == 404 => {
                    return Err(forbidden(&format!(
                        "create tokens for pod \"{}\", which does not exist",
                        field("name")
                    )))
                }
                Err(e) => return Err(e),
            };
            if pod.spec.node_name.as_deref() != Some(node) {
                return Err(ApiError::forbidden(format!(
                    "serviceaccounts \"{sa}\" is forbidden: node requested token bound to a pod scheduled on a different node"
                )));
            }
            if !field("uid").is_empty() && field("uid") != pod.metadata.uid {
                return Err(ApiError::forbidden(format!(
                    "serviceaccounts \"{sa}\" is forbidden: the UID in the bound object reference ({}) does not match the UID in record ({})",
                    field("uid"),
                    pod.metadata.uid
                )));
            }
            if pod.spec.service_account_name.as_deref() != Some(sa.as_str()) {
                return Err(forbidden(&format!(
                    "create tokens for service account \"{sa}\", which pod \"{}\" does not run as",
                    pod.metadata.name
                )));
            }
            Ok(())
        }
        _ => Err(forbidden("modify this resource")),
    }
}

async fn read_body(req: &mut tide::Request<State>) -> Result<Vec<u8>, ApiError> {
    if let Some(len) = req.len() {
        if len > MAX_BODY_BYTES {
            return Err(ApiError::too_large());
        }
    }
    let body = req.take_body();
    let mut buf = Vec::new();
    body.take(MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
    if buf.len() > MAX_BODY_BYTES {
        return Err(ApiError::too_large());
    }
    Ok(buf)
}

/// The request's media type without parameters, lower case ("" when absent).
fn media_type(req: &tide::Request<State>) -> String {
    media_type_of(header(req, "Content-Type").as_deref())
}

/// `media_type` of a `Content-Type` header. The fuzz target `query_headers` calls it.
pub fn media_type_of(content_type: Option<&str>) -> String {
    content_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Parses a create/update body: JSON or YAML.
fn parse_object_body(req: &tide::Request<State>, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    match media_type(req).as_str() {
        // The Python client sends no Content-Type (which reads as an octet stream): JSON.
        "application/json" | "" | "*/*" | "application/octet-stream" => {
            api::codec::parse_json(body).map_err(|e| ApiError::bad_request(e.to_string()))
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            api::codec::parse_yaml(body).map_err(|e| ApiError::bad_request(e.to_string()))
        }
        // kubectl's typed clients (`kubectl create deployment`, `run`, `expose`, ...).
        protobuf::MEDIA_TYPE => {
            protobuf::decode(body).map_err(|e| ApiError::bad_request(e.to_string()))
        }
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// Parses the body of any write (an object, a patch, an apply configuration) as YAML when
/// its media type says so, else as JSON: for the edge converters that rewrite bodies.
fn parse_write_body(req: &tide::Request<State>, body: &[u8]) -> Result<Value, ApiError> {
    if media_type(req).contains("yaml") {
        api::codec::parse_yaml(body)
    } else {
        api::codec::parse_json(body)
    }
    .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Decodes a create or update body: JSON straight into the model when it is well formed,
/// otherwise through a JSON tree, which also gives precise errors.
fn decode_body<K: Resource>(req: &tide::Request<State>, body: &[u8]) -> Result<K, ApiError> {
    decode_body_as(req, K::KIND, body)
}

/// [`decode_body`] of an object of `kind` (a custom object's kind is the request's).
fn decode_body_as<K: Resource>(
    req: &tide::Request<State>,
    kind: Kind,
    body: &[u8],
) -> Result<K, ApiError> {
    if matches!(
        media_type(req).as_str(),
        "application/json" | "" | "application/octet-stream"
    ) {
        if let Some(obj) = api::codec::from_json_bytes::<K>(body) {
            return Ok(obj);
        }
    }
    registry::decode_as(kind, parse_object_body(req, body)?)
}

fn patch_type(req: &tide::Request<State>) -> Result<PatchType, ApiError> {
    patch_type_of(&media_type(req))
}

/// The patch type a media type ([`media_type_of`]) names. The fuzz target `query_headers`
/// calls it.
pub fn patch_type_of(media_type: &str) -> Result<PatchType, ApiError> {
    match media_type {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::StrategicMerge),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

fn selectors(
    req: &tide::Request<State>,
    kind: Kind,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(&query(req, "labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fields = FieldSelector::parse_for(kind, &query(req, "fieldSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((labels, fields))
}

fn object_matches(
    obj: &AnyObject,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    ns.is_none_or(|n| obj.meta().namespace() == n)
        && labels.matches(&obj.meta().labels)
        && fields.matches(obj)
}

/// `head` (a JSON object) with one more member, `field`, whose value is the JSON array with
/// the already encoded, comma-separated `elements`: lists are written element by element, so
/// no JSON tree of the whole list is ever built.
/// The members of a list before its items, in kube-apiserver's order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ListHead<'a, C: serde::Serialize> {
    kind: &'a str,
    api_version: &'a str,
    metadata: &'a api::meta::ListMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    column_definitions: Option<&'a C>,
}

fn spliced_response(head: &impl serde::Serialize, field: &str, elements: &[u8]) -> tide::Response {
    let mut out = serde_json::to_vec(head).unwrap_or_default();
    out.pop(); // the closing brace
    out.extend_from_slice(format!(",\"{field}\":[").as_bytes());
    out.extend_from_slice(elements);
    out.extend_from_slice(b"]}");
    let mut r = tide::Response::new(StatusCode::Ok);
    r.set_body(out);
    r.set_content_type(mime::JSON);
    r
}

/// Gives memory back to the system after a large answer: glibc keeps freed memory in its
/// arenas, which would otherwise pin the peak of the largest list for the life of the server.
fn release_memory_after(bytes: usize) {
    #[cfg(target_env = "gnu")]
    if bytes > (4 << 20) {
        // SAFETY: malloc_trim only returns free heap pages to the kernel; it is thread-safe.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = bytes;
}

/// A continue token: the list's revision and the key to go on after.
fn encode_continue(revision: u64, key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{revision}\n{key}"))
}

/// What a list or watch (`GET` of a collection) asks for in its query, as kube-apiserver
/// reads its ListOptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOptions {
    pub watch: bool,
    /// Objects per page; 0: all of them.
    pub limit: usize,
    /// The `continue` token: the list's revision and the key to go on after.
    pub continue_from: Option<(u64, String)>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    /// A watch's `timeoutSeconds` ([`watch_timeout`]).
    pub timeout: Duration,
    pub allow_bookmarks: bool,
}

impl ListOptions {
    /// The revision a watch starts after: None for "now" (no `resourceVersion`, empty or
    /// "0"), 400 for one that is not a revision.
    pub fn watch_after(&self) -> Result<Option<u64>, ApiError> {
        match self.resource_version.as_deref() {
            None | Some("" | "0") => Ok(None),
            Some(r) => r
                .parse()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {r:?}"))),
        }
    }
}

/// The [`ListOptions`] of a query string. `limit` is an int64 as in kube-apiserver: 0 or
/// less is no limit, past int64 is 400 (a usize up to 2^64 - 1 used to be taken, and the
/// etcd datastore's page size of limit + 1 overflowed). The fuzz target `query_headers`
/// calls it.
pub fn list_options(query: &str) -> Result<ListOptions, ApiError> {
    let limit = match query_value(query, "limit") {
        Some(l) => {
            let n: i64 = l
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?;
            usize::try_from(n.max(0)).unwrap_or(usize::MAX)
        }
        None => 0,
    };
    let continue_from = match query_value(query, "continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(&c)?),
        None => None,
    };
    Ok(ListOptions {
        watch: query_value(query, "watch").is_some_and(|w| w == "true" || w == "1"),
        limit,
        continue_from,
        resource_version: query_value(query, "resourceVersion"),
        resource_version_match: query_value(query, "resourceVersionMatch"),
        timeout: watch_timeout(query_value(query, "timeoutSeconds").as_deref())?,
        allow_bookmarks: query_value(query, "allowWatchBookmarks").is_some_and(|b| b == "true"),
    })
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    use base64::Engine;
    let bad =
        || ApiError::bad_request("continue key is not valid: use the token of the previous page");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    let (rev, key) = text.split_once('\n').ok_or_else(bad)?;
    Ok((rev.parse().map_err(|_| bad())?, key.to_string()))
}

fn list_kind_name(kind: Kind) -> String {
    format!("{}List", kind.info().kind)
}

/// A Table (meta.k8s.io/v1) for kubectl's server-side printing.
/// One row of a Table: the cells and the object's metadata.
pub(crate) fn table_row(o: &AnyObject) -> Value {
    let mut meta = o.to_json().get("metadata").cloned().unwrap_or(json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.remove("managedFields");
    }
    json!({
        "cells": api::table::cells(o),
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta},
    })
}

pub(crate) fn table(
    kind: Kind,
    objects: &[&AnyObject],
    resource_version: &str,
    with_columns: bool,
) -> Value {
    let rows: Vec<Value> = objects.iter().map(|o| table_row(o)).collect();
    let columns = if with_columns {
        serde_json::to_value(api::table::columns(kind)).unwrap_or(json!([]))
    } else {
        json!([])
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// A FlowSchema's table row with its place in matching order.
type FlowSchemaRow = ((i32, String), Vec<u8>);

/// [`resource`] behind a box: the dispatch over every kind then holds one pointer per kind
/// instead of every kind's whole future. (In a debug build the dispatch's frame had room for
/// all of them, which took a request on the etcd datastore's path within a pod's size of
/// the executor threads' 2 MiB stacks.)
fn resource_boxed<'a, K: Resource>(
    state: &'a State,
    req: &'a tide::Request<State>,
    path: ResourcePath,
    body: Vec<u8>,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<tide::Response, ApiError>> + Send + 'a>,
> {
    Box::pin(resource::<K>(state, req, path, body))
}

async fn resource<K: Resource>(
    state: &State,
    req: &tide::Request<State>,
    path: ResourcePath,
    body: Vec<u8>,
) -> Result<tide::Response, ApiError> {
    use tide::http::Method;
    let kind = path.kind;
    let registry = state.registry.for_kind(kind);
    let ns = path.namespace.clone();
    let ns_str = ns.clone().unwrap_or_default();
    let sub = path.subresource.as_deref();
    let part = match sub {
        None => Part::Main,
        Some("status") if kind.info().has_status => Part::Status,
        Some("finalize") if kind == Kind::Namespace => Part::Main,
        Some("binding") if kind == Kind::Pod => Part::Main,
        Some("ephemeralcontainers") if kind == Kind::Pod => Part::EphemeralContainers,
        Some("scale")
            if matches!(
                kind,
                Kind::Deployment
                    | Kind::ReplicaSet
                    | Kind::ReplicationController
                    | Kind::StatefulSet
            ) || custom_scale(kind).is_some() =>
        {
            Part::Main
        }
        Some("approval") if kind == Kind::CertificateSigningRequest => Part::Status,
        Some(other) => {
            return Err(ApiError::path_not_found().with_message(format!(
                "the server could not find the requested resource ({} {other})",
                kind.info().plural
            )))
        }
    };
    let method = req.method();
    match (method, path.name.as_deref(), sub) {
        (Method::Get, None, None) => {
            let (labels, fields) = selectors(req, kind)?;
            let options = list_options(query_string(req))?;
            if options.watch {
                let selected = (labels, fields);
                let scope = req.ext::<NodeScope>().cloned();
                return watch::serve_watch(state, req, kind, ns, selected, &options, scope).await;
            }
            let ListOptions {
                limit,
                continue_from,
                ..
            } = options;
            let (token_rev, after) = match continue_from {
                Some((rev, key)) => (Some(rev), Some(key)),
                None => (None, None),
            };
            let filter_ns = ns.clone();
            let scope = req.ext::<NodeScope>().cloned();
            let beats = state.registry.heartbeats.clone();
            let as_table = wants_table(req);
            // kube prints a table of FlowSchemas in matching order (precedence, then name).
            let in_matching_order: Option<Arc<std::sync::Mutex<Vec<FlowSchemaRow>>>> =
                (as_table && kind == Kind::FlowSchema).then(Default::default);
            let rows_to_sort = in_matching_order.clone();
            let (mut items, page) = state
                .store
                .list_page(
                    kind,
                    ns.as_deref(),
                    after,
                    limit,
                    Vec::new(),
                    move |out: &mut Vec<u8>, mut o| {
                        if !object_matches(&o, filter_ns.as_deref(), &labels, &fields)
                            || scope.as_ref().is_some_and(|s| !s.shows(&o))
                        {
                            return false;
                        }
                        beats.overlay_any(&mut o);
                        if let (Some(rows), AnyObject::FlowSchema(f)) = (&rows_to_sort, &o) {
                            let row = serde_json::to_vec(&table_row(&o)).unwrap_or_default();
                            let key = (f.spec.matching_precedence, f.metadata.name.clone());
                            rows.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push((key, row));
                            return true;
                        }
                        if !out.is_empty() {
                            out.push(b',');
                        }
                        if as_table {
                            let _ = serde_json::to_writer(&mut *out, &table_row(&o));
                        } else {
                            // Items without `kind` and `apiVersion`, as kube's typed lists.
                            o.write_json_item(out);
                        }
                        true
                    },
                )
                .await?;
            if let Some(rows) = in_matching_order {
                let mut rows = std::mem::take(&mut *rows.lock().unwrap_or_else(|e| e.into_inner()));
                rows.sort_by(|a, b| a.0.cmp(&b.0));
                items = rows
                    .into_iter()
                    .map(|(_, row)| row)
                    .collect::<Vec<_>>()
                    .join(&b',');
            }
            let list_rev = token_rev.unwrap_or(page.revision);
            let meta = api::meta::ListMeta {
                resource_version: list_rev.to_string(),
                continue_: page.next.as_ref().map(|key| encode_continue(list_rev, key)),
                remaining_item_count: None,
            };
            let response = if as_table {
                let columns = api::table::columns(kind);
                let head = ListHead {
                    kind: "Table",
                    api_version: "meta.k8s.io/v1",
                    metadata: &meta,
                    column_definitions: Some(&columns),
                };
                spliced_response(&head, "rows", &items)
            } else {
                let info = kind.info();
                let head: ListHead<'_, ()> = ListHead {
                    kind: &list_kind_name(kind),
                    api_version: &info.api_version(),
                    metadata: &meta,
                    column_definitions: None,
                };
                spliced_response(&head, "items", &items)
            };
            release_memory_after(items.len());
            Ok(response)
        }
        (
            Method::Get,
            Some(name),
            None | Some("status") | Some("approval") | Some("ephemeralcontainers"),
        ) => {
            let obj: K = registry.get(&ns_str, name).await?;
            let mut any = obj.into_any();
            state.registry.heartbeats.overlay_any(&mut any);
            if wants_table(req) {
                let rev = any.meta().resource_version.clone();
                return Ok(json_response(
                    StatusCode::Ok,
                    &table(kind, &[&any], &rev, true),
                ));
            }
            Ok(object_response(req, StatusCode::Ok, &any.as_json()))
        }
        (Method::Get, Some(name), Some("scale")) => {
            let obj: K = registry.get(&ns_str, name).await?;
            Ok(json_response(StatusCode::Ok, &scale_of(&obj.into_any())))
        }
        (Method::Post, None, None) => {
            if kind.custom_rules().is_some_and(|r| r.terminating()) {
                return Err(ApiError::method_not_allowed(
                    "create not allowed while custom resource definition is terminating",
                ));
            }
            let obj: K = decode_body_as(req, kind, &body)?;
            let created = writer(state, req)?
                .for_kind(kind)
                .create(obj, ns.as_deref())
                .await?;
            Ok(object_response(
                req,
                StatusCode::Created,
                &api::codec::json(&created),
            ))
        }
        (Method::Post, Some(name), Some("binding")) => {
            let value = parse_object_body(req, &body)?;
            let target = value
                .pointer("/target/name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(
                        Kind::Pod,
                        name,
                        vec![api::validation::FieldError::required("target.name")],
                    )
                })?
                .to_string();
            state.registry.bind(&ns_str, name, target).await?;
            let mut ok = serde_json::to_value(api::meta::Status::success()).unwrap_or_default();
            api::codec::strip_nulls(&mut ok);
            Ok(json_response(StatusCode::Created, &ok))
        }
        (
            Method::Put,
            Some(name),
            None
            | Some("status")
            | Some("finalize")
            | Some("approval")
            | Some("ephemeralcontainers"),
        ) => {
            let obj: K = decode_body_as(req, kind, &body)?;
            let updated = writer(state, req)?
                .for_kind(kind)
                .update(obj, ns.as_deref(), name, part)
                .await?;
            Ok(object_response(
                req,
                StatusCode::Ok,
                &api::codec::json(&updated),
            ))
        }
        (Method::Put, Some(name), Some("scale")) => {
            let value = parse_object_body(req, &body)?;
            let replicas = value
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .ok_or_else(|| ApiError::bad_request("a Scale needs spec.replicas"))?;
            let rv = value
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
            let obj = set_replicas::<K>(state, req, kind, &ns_str, name, replicas, rv).await?;
            Ok(json_response(StatusCode::Ok, &scale_of(&obj.into_any())))
        }
        (Method::Patch, Some(name), Some("scale")) => {
            let current: K = registry.get(&ns_str, name).await?;
            let mut scale = scale_of(&current.into_any());
            let patch: Value = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("invalid patch: {e}")))?;
            match patch_type(req)? {
                PatchType::Json => {
                    let p: json_patch::Patch = serde_json::from_value(patch)
                        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                    crate::registry::apply_json_patch(&mut scale, &p)?;
                }
                _ => json_patch::merge(&mut scale, &patch),
            }
            let replicas = scale
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .ok_or_else(|| ApiError::bad_request("a Scale needs spec.replicas"))?;
            let obj = set_replicas::<K>(state, req, kind, &ns_str, name, replicas, None).await?;
            Ok(json_response(StatusCode::Ok, &scale_of(&obj.into_any())))
        }
        (
            Method::Patch,
            Some(name),
            None | Some("status") | Some("approval") | Some("ephemeralcontainers"),
        ) => {
            let pt = patch_type(req)?;
            if pt == PatchType::StrategicMerge && kind.is_custom() {
                // Custom resources have no strategic merge patch (kube-apiserver's list).
                return Err(ApiError::from_status(api::meta::Status::failure(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                )));
            }
            let force = query(req, "force");
            if pt == PatchType::Apply {
                // Server-side apply creates what does not exist yet.
                // The writer's manager is the `fieldManager`, which apply must name.
                if query(req, "fieldManager").is_none_or(|m| m.is_empty()) {
                    return Err(invalid_patch_options(
                        "fieldManager: Required value: is required for apply patch",
                    ));
                }
                let force = force.is_some_and(|f| f == "true" || f == "1");
                let (obj, created) = writer(state, req)?
                    .for_kind(kind)
                    .apply::<K>(&ns_str, name, &body, force, part)
                    .await?;
                let code = if created {
                    StatusCode::Created
                } else {
                    StatusCode::Ok
                };
                return Ok(object_response(req, code, &api::codec::json(&obj)));
            }
            if force.is_some() {
                return Err(invalid_patch_options(
                    "force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            let patched: K = writer(state, req)?
                .for_kind(kind)
                .patch(&ns_str, name, pt, body, part)
                .await?;
            Ok(object_response(
                req,
                StatusCode::Ok,
                &api::codec::json(&patched),
            ))
        }
        (Method::Delete, Some(name), None) => {
            let opts = delete_options(req, &body)?;
            let registry = registry.dry_run(dry_run(req, &opts.dry_run)?);
            let (obj, _gone) = registry.delete::<K>(&ns_str, name, opts).await?;
            Ok(json_response(StatusCode::Ok, &api::codec::json(&obj)))
        }
        (Method::Delete, None, None) => {
            let opts = delete_options(req, &body)?;
            let registry = registry.dry_run(dry_run(req, &opts.dry_run)?);
            let (labels, fields) = selectors(req, kind)?;
            let (items, _) = state.store.list(kind, ns.as_deref()).await?;
            let mut deleted = Vec::new();
            for o in items
                .iter()
                .filter(|o| object_matches(o, ns.as_deref(), &labels, &fields))
            {
                match registry
                    .delete::<K>(o.meta().namespace(), &o.meta().name, opts.clone())
                    .await
                {
                    Ok((obj, _)) => deleted.push(obj.into_any().to_json()),
                    Err(e) if e.code() == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let info = kind.info();
            Ok(json_response(
                StatusCode::Ok,
                &json!({"kind": list_kind_name(kind), "apiVersion": info.api_version(), "metadata": {}, "items": deleted}),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method} {}{})",
            kind.info().plural,
            sub.map(|s| format!("/{s}")).unwrap_or_default()
        ))),
    }
}

/// The registry as the request's field manager: `fieldManager`, else the User-Agent's
/// product name (kube-apiserver's default).
fn writer(state: &State, req: &tide::Request<State>) -> Result<Registry, ApiError> {
    let manager = field_manager(query_string(req), header(req, "User-Agent").as_deref())?;
    let registry = match req.ext::<registry::Warnings>() {
        Some(sink) => state.registry.with_warnings(sink.clone()),
        None => state.registry.clone(),
    };
    Ok(registry.with_manager(&manager).dry_run(dry_run(req, &[])?))
}

/// The field manager of a write: `fieldManager`, else the User-Agent's product name
/// (kube-apiserver's default). The fuzz target `query_headers` calls it.
pub fn field_manager(query: &str, user_agent: Option<&str>) -> Result<String, ApiError> {
    match query_value(query, "fieldManager") {
        Some(m) if m.chars().count() > 128 => Err(ApiError::bad_request(
            "fieldManager: Too long: may not be more than 128 bytes",
        )),
        Some(m) if !m.is_empty() => Ok(m),
        _ => Ok(crate::fieldmanager::manager_from_user_agent(
            user_agent.unwrap_or_default(),
        )),
    }
}

/// Whether the request is a dry run: `dryRun` in the query (or in a DeleteOptions body) is
/// `All`, the one value Kubernetes accepts; any other is refused as kube-apiserver does.
fn dry_run(req: &tide::Request<State>, in_body: &[String]) -> Result<bool, ApiError> {
    let options = match req.method() {
        tide::http::Method::Post => "CreateOptions",
        tide::http::Method::Put => "UpdateOptions",
        tide::http::Method::Delete => "DeleteOptions",
        _ => "PatchOptions",
    };
    dry_run_of(query_string(req), options, in_body)
}

/// `dry_run` of a query string, for a request of `options` (`CreateOptions`, ...). The
/// fuzz target `query_headers` calls it.
pub fn dry_run_of(query: &str, options: &str, in_body: &[String]) -> Result<bool, ApiError> {
    let mut values: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "dryRun")
        .map(|(_, v)| v.into_owned())
        .collect();
    values.extend(in_body.iter().cloned());
    if let Some(bad) = values.iter().find(|v| v.as_str() != "All") {
        return Err(ApiError::from_status(api::meta::Status::failure(
            422,
            "Invalid",
            format!(
                "{options}.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: {bad:?}: \
                 supported values: \"All\""
            ),
        )));
    }
    Ok(!values.is_empty())
}

/// A PatchOptions that kube-apiserver refuses (422 Invalid).
fn invalid_patch_options(cause: &str) -> ApiError {
    ApiError::from_status(api::meta::Status::failure(
        422,
        "Invalid",
        format!("PatchOptions.meta.k8s.io \"\" is invalid: {cause}"),
    ))
}

fn delete_options(req: &tide::Request<State>, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    delete_options_of(query_string(req), &media_type(req), body)
}

/// The DeleteOptions of a DELETE: its body's (JSON, or protobuf when the media type
/// ([`media_type_of`]) says so), with `gracePeriodSeconds` (any int64, as kube-apiserver
/// takes it) and `propagationPolicy` from the query over them. The fuzz target
/// `query_headers` calls it.
pub fn delete_options_of(
    query: &str,
    media_type: &str,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let mut opts: DeleteOptions = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else if media_type == protobuf::MEDIA_TYPE {
        let value = protobuf::decode(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        serde_json::from_value(value)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    if let Some(g) = query_value(query, "gracePeriodSeconds") {
        opts.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    if let Some(p) = query_value(query, "propagationPolicy") {
        opts.propagation_policy = Some(p);
    }
    Ok(opts)
}

/// A custom resource's scale subresource paths (JSON pointers: spec replicas, status
/// replicas, status selector), if its definition has one.
fn custom_scale(kind: Kind) -> Option<(String, String, Option<String>)> {
    let pointer = |p: &str| p.replace('.', "/");
    kind.custom_rules()?
        .scale_paths()
        .map(|(spec, status, selector)| {
            (
                pointer(&spec),
                pointer(&status),
                selector.map(|s| pointer(&s)),
            )
        })
}

/// The autoscaling/v1 Scale of a Deployment, ReplicaSet, StatefulSet or ReplicationController
/// (whose selector is the label map itself), or of a custom resource with a scale subresource
/// (from its definition's paths, as kube's scale of a custom resource).
fn scale_of(obj: &AnyObject) -> Value {
    let json = obj.to_json();
    let meta = obj.meta();
    if let Some((spec, status, selector)) = custom_scale(obj.kind()) {
        let selector = selector
            .and_then(|p| json.pointer(&p).and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default();
        return json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta.name, "namespace": meta.namespace(), "uid": meta.uid,
                "resourceVersion": meta.resource_version, "creationTimestamp": json.pointer("/metadata/creationTimestamp"),
            },
            "spec": {"replicas": json.pointer(&spec).cloned().unwrap_or(json!(0))},
            "status": {"replicas": json.pointer(&status).cloned().unwrap_or(json!(0)), "selector": selector},
        });
    }
    let labels = match obj.kind() {
        Kind::ReplicationController => "/spec/selector",
        _ => "/spec/selector/matchLabels",
    };
    let selector = json
        .pointer(labels)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.name, "namespace": meta.namespace(), "uid": meta.uid,
            "resourceVersion": meta.resource_version, "creationTimestamp": json.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": json.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {"replicas": json.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

#[allow(clippy::too_many_arguments)]
async fn set_replicas<K: Resource>(
    state: &State,
    req: &tide::Request<State>,
    kind: Kind,
    ns: &str,
    name: &str,
    replicas: i64,
    rv: Option<String>,
) -> Result<K, ApiError> {
    let mut patch = json!({"spec": {"replicas": replicas}, "metadata": {"resourceVersion": rv}});
    if let Some((spec, _, _)) = custom_scale(kind) {
        // The replicas at the definition's specReplicasPath.
        let mut at = crate::crd::path_patch(&spec, json!(replicas));
        json_patch::merge(&mut at, &json!({"metadata": {"resourceVersion": rv}}));
        patch = at;
    }
    let body = serde_json::to_vec(&patch).unwrap_or_default();
    writer(state, req)?
        .for_kind(kind)
        .via_scale()
        .patch::<K>(ns, name, PatchType::Merge, body, Part::Main)
        .await
}

/// Joins a listener future with a shutdown signal: whichever finishes first.
pub async fn serve_until<F>(
    serve: F,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()>
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    serve
        .or(async {
            shutdown.await;
            Ok(())
        })
        .await
}
