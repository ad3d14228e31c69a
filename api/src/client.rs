//! The HTTPS client of the skiff (Kubernetes) API: kubeconfig credentials (bearer token,
//! client certificate), CA trust, lists, watches and streamed bodies.
//!
//! HTTP itself is the shared [`crate::transport`] (async-h1's framing on smol and rustls,
//! with a keep-alive pool). The server is trusted only if its certificate chains to the
//! configured CA.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::Stream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

use crate::kubeconfig::{Kubeconfig, KubeconfigError, ResolvedContext};
use crate::meta::{DeleteOptions, Status};
use crate::object::{Kind, Resource};
use crate::transport::{self, Transport, TransportError, Url};

/// Connections kept idle per client.
const POOL_SIZE: usize = 4;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Accept header that asks for server-side tables (as kubectl does).
pub const ACCEPT_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
pub const ACCEPT_JSON: &str = "application/json";

/// What went wrong talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a Kubernetes `Status` (non-2xx).
    #[error("{}", status_message(.0))]
    Api(Box<Status>),
    /// A non-2xx answer whose body is not a `Status`.
    #[error("the server answered {status}: {body}")]
    Http { status: u16, body: String },
    #[error("cannot connect to {server}: {error}")]
    Connect {
        server: String,
        error: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("malformed HTTP response: {0}")]
    Protocol(String),
    #[error("cannot decode the server's answer: {0}")]
    Decode(String),
    #[error("invalid client configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
}

impl ClientError {
    /// The HTTP status code of an API error, if this is one.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Api(s) => Some(s.code),
            ClientError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }
}

fn status_message(s: &Status) -> String {
    if !s.message.is_empty() {
        s.message.clone()
    } else if !s.reason.is_empty() {
        format!("{} ({})", s.reason, s.code)
    } else {
        format!("the server answered {}", s.code)
    }
}

/// How to reach and authenticate to a server.
#[derive(Clone, Debug, Default)]
pub struct ClientConfig {
    /// `https://host:port`.
    pub server: String,
    /// The CA that must have signed the server's certificate (PEM).
    pub ca_pem: Option<String>,
    pub token: Option<String>,
    pub client_cert_pem: Option<String>,
    pub client_key_pem: Option<String>,
    /// Accept any server certificate (kubeconfig `insecure-skip-tls-verify`).
    pub insecure_skip_tls_verify: bool,
    /// The name to verify the server certificate against, if not the URL's host.
    pub tls_server_name: Option<String>,
    /// A client certificate that may be replaced while the client is in use (a node's,
    /// renewed before it expires); instead of `client_cert_pem` and `client_key_pem`.
    pub client_identity: Option<Arc<crate::tls::LiveCertificate>>,
    /// Other servers of the same cluster (`https://host:port`, verified against the same
    /// CA): a request that cannot reach the server in use (TCP refused or timed out, TLS
    /// failed) goes to the next one, which is then used until it cannot be reached in turn.
    pub failover_servers: Vec<String>,
}

impl ClientConfig {
    /// The settings of `context` (or the current context) of a kubeconfig.
    pub fn from_kubeconfig(kc: &Kubeconfig, context: Option<&str>) -> Result<Self, ClientError> {
        Ok(ClientConfig::from_resolved(kc.resolve(context)?))
    }

    /// The settings of an already resolved kubeconfig context.
    pub fn from_resolved(r: ResolvedContext) -> Self {
        ClientConfig {
            server: r.server,
            ca_pem: r.ca_pem,
            token: r.token,
            client_cert_pem: r.client_cert_pem,
            client_key_pem: r.client_key_pem,
            insecure_skip_tls_verify: r.insecure_skip_tls_verify,
            tls_server_name: r.tls_server_name,
            client_identity: None,
            failover_servers: Vec::new(),
        }
    }
}

/// An answer from the server.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased (values of one name in the order received).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<Value, ClientError> {
        serde_json::from_slice(&self.body).map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// `Ok(self)` for 2xx; otherwise the error the body describes.
    pub fn error_for_status(self) -> Result<Response, ClientError> {
        if self.is_success() {
            return Ok(self);
        }
        Err(error_from_body(self.status, &self.body))
    }
}

fn error_from_body(status: u16, body: &[u8]) -> ClientError {
    if let Ok(s) = serde_json::from_slice::<Status>(body) {
        if s.kind == "Status" {
            let mut s = s;
            if s.code == 0 {
                s.code = status;
            }
            return ClientError::Api(Box::new(s));
        }
    }
    ClientError::Http {
        status,
        body: String::from_utf8_lossy(body).trim().to_string(),
    }
}

/// One event of a watch.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<T> {
    Added(T),
    Modified(T),
    Deleted(T),
    /// Progress notice: the watch has seen everything up to this resourceVersion.
    Bookmark {
        resource_version: String,
    },
}

impl<T> WatchEvent<T> {
    /// The object of an ADDED, MODIFIED or DELETED event.
    pub fn object(&self) -> Option<&T> {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o),
            WatchEvent::Bookmark { .. } => None,
        }
    }

    /// `ADDED`, `MODIFIED`, `DELETED` or `BOOKMARK`.
    pub fn type_name(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark { .. } => "BOOKMARK",
        }
    }
}

/// The lines of a streamed body, each as its bytes.
pub type LineStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>, ClientError>> + Send>>;

/// A stream of watch events; it ends when the server ends the response.
pub type WatchStream<T> = Pin<Box<dyn Stream<Item = Result<WatchEvent<T>, ClientError>> + Send>>;

/// Query parameters for lists and watches.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub timeout: Option<Duration>,
    pub allow_watch_bookmarks: bool,
}

impl ListOptions {
    /// The query string (with its leading `?`, or empty) for a list, or a watch if `watch`.
    pub fn to_query(&self, watch: bool) -> String {
        let mut q = Vec::new();
        if let Some(l) = self.label_selector.as_deref().filter(|s| !s.is_empty()) {
            q.push(format!("labelSelector={}", encode_query(l)));
        }
        if let Some(f) = self.field_selector.as_deref().filter(|s| !s.is_empty()) {
            q.push(format!("fieldSelector={}", encode_query(f)));
        }
        if let Some(rv) = self.resource_version.as_deref().filter(|s| !s.is_empty()) {
            q.push(format!("resourceVersion={}", encode_query(rv)));
        }
        if watch {
            q.push("watch=true".into());
            if self.allow_watch_bookmarks {
                q.push("allowWatchBookmarks=true".into());
            }
        }
        if let Some(t) = self.timeout {
            q.push(format!("timeoutSeconds={}", t.as_secs().max(1)));
        }
        if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        }
    }
}

/// Percent-encodes a query parameter value.
pub fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The REST path of a kind's collection or one object. `namespace` is ignored for
/// cluster-scoped kinds; `None` for a namespaced kind means all namespaces.
pub fn resource_path(kind: Kind, namespace: Option<&str>, name: Option<&str>) -> String {
    let info = kind.info();
    let mut p = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    if info.namespaced {
        if let Some(ns) = namespace.filter(|n| !n.is_empty()) {
            p.push_str("/namespaces/");
            p.push_str(ns);
        }
    }
    p.push('/');
    p.push_str(info.plural);
    if let Some(n) = name {
        p.push('/');
        p.push_str(n);
    }
    p
}

/// One server a client may talk to.
struct Endpoint {
    server: String,
    /// `https://host:port/`, which request paths are joined to.
    base: Url,
}

struct Inner {
    /// The configured server first, then the failover servers.
    endpoints: Vec<Endpoint>,
    /// The endpoint in use: the last one that could be reached.
    current: std::sync::atomic::AtomicUsize,
    authorization: Option<String>,
    /// One transport for every endpoint (its pool keeps connections per origin).
    transport: Transport,
}

/// An API client; cheap to clone (clones share the connection pool).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server())
            .finish()
    }
}

impl Client {
    /// A client for the current context of a kubeconfig.
    pub fn from_kubeconfig(kc: &Kubeconfig) -> Result<Client, ClientError> {
        Client::new(ClientConfig::from_kubeconfig(kc, None)?)
    }

    pub fn new(config: ClientConfig) -> Result<Client, ClientError> {
        let mut endpoints = Vec::with_capacity(1 + config.failover_servers.len());
        for server in std::iter::once(&config.server).chain(&config.failover_servers) {
            let (host, port) = parse_server(server)?;
            let name = host.trim_start_matches('[').trim_end_matches(']');
            ServerName::try_from(name.to_string())
                .map_err(|_| ClientError::Config(format!("invalid server name {name:?}")))?;
            let base = Url::parse(&format!("https://{host}:{port}/"))
                .map_err(|e| ClientError::Config(format!("server URL {server:?}: {e}")))?;
            endpoints.push(Endpoint {
                server: server.clone(),
                base,
            });
        }
        // Each server's certificate is checked against its own host unless one name is
        // given for all (kubeconfig `tls-server-name`).
        let server_name = config
            .tls_server_name
            .as_ref()
            .map(|n| {
                ServerName::try_from(n.clone())
                    .map_err(|_| ClientError::Config(format!("invalid server name {n:?}")))
            })
            .transpose()?;
        let transport = Transport::new(
            Arc::new(tls_config(&config)?),
            transport::Options {
                server_name,
                connect_timeout: CONNECT_TIMEOUT,
                read_timeout: None,
                pool_size: POOL_SIZE,
                ..Default::default()
            },
        );
        let authorization = config
            .token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| format!("Bearer {t}"));
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                current: std::sync::atomic::AtomicUsize::new(0),
                authorization,
                transport,
            }),
        })
    }

    /// The server URL this client talks to (of several, the one in use).
    pub fn server(&self) -> &str {
        &self.endpoint(self.current()).server
    }

    fn current(&self) -> usize {
        self.inner
            .current
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn endpoint(&self, i: usize) -> &Endpoint {
        &self.inner.endpoints[i % self.inner.endpoints.len()]
    }

    /// Connections currently idle in the pool (for tests and metrics).
    pub fn idle_connections(&self) -> usize {
        self.inner.transport.idle_connections()
    }

    /// Makes later requests open new connections (see [`Transport::close_idle`]): after the
    /// client certificate was replaced, so the server sees the new one.
    pub fn close_idle_connections(&self) {
        self.inner.transport.close_idle();
    }

    /// Sends the request; the answer's body is unread. With failover servers, a server that
    /// cannot be reached (connecting or the TLS handshake failed, so the request never got
    /// to it) is passed over for the next; the first that answers is used from then on.
    async fn send(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, &[u8])>,
        accept: &str,
    ) -> Result<transport::Response, ClientError> {
        let first = self.current();
        let count = self.inner.endpoints.len();
        let mut i = 0;
        loop {
            let at = (first + i) % count;
            match self.send_to(at, method, path_and_query, body, accept).await {
                Err(e @ ClientError::Connect { .. }) if i + 1 < count => {
                    tracing::warn!(
                        server = %self.endpoint(at).server,
                        next = %self.endpoint(at + 1).server,
                        "API server unreachable, trying the next: {e}"
                    );
                }
                Ok(resp) => {
                    if at != first {
                        self.inner
                            .current
                            .store(at, std::sync::atomic::Ordering::Relaxed);
                        tracing::info!(server = %self.endpoint(at).server, "using API server");
                    }
                    return Ok(resp);
                }
                Err(e) => return Err(e),
            }
            i += 1;
        }
    }

    /// Sends the request to endpoint `at`.
    async fn send_to(
        &self,
        at: usize,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, &[u8])>,
        accept: &str,
    ) -> Result<transport::Response, ClientError> {
        let endpoint = self.endpoint(at);
        let url = endpoint
            .base
            .join(path_and_query)
            .map_err(|e| ClientError::Config(format!("request path {path_and_query:?}: {e}")))?;
        let mut headers = vec![("Accept", accept)];
        if let Some(a) = &self.inner.authorization {
            headers.push(("Authorization", a));
        }
        let mut bytes: &[u8] = &[];
        if let Some((ct, b)) = body {
            headers.push(("Content-Type", ct));
            bytes = b;
        }
        self.inner
            .transport
            .send(method, &url, &headers, bytes)
            .await
            .map_err(|e| error_of(&endpoint.server, e))
    }

    /// A transport error as the client reports it.
    fn error(&self, e: TransportError) -> ClientError {
        error_of(self.server(), e)
    }

    /// One request; the whole body is read. Non-2xx answers are returned, not turned into
    /// errors (see [`Response::error_for_status`]).
    pub async fn request(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, Vec<u8>)>,
        accept: &str,
    ) -> Result<Response, ClientError> {
        let b = body.as_ref().map(|(ct, b)| (*ct, b.as_slice()));
        let mut resp = self.send(method, path_and_query, b, accept).await?;
        let body = resp.bytes(usize::MAX).await.map_err(|e| self.error(e))?;
        Ok(Response {
            status: resp.status,
            headers: std::mem::take(&mut resp.headers),
            body,
        })
    }

    /// A JSON request whose 2xx answer is decoded as JSON; other answers become errors.
    pub async fn request_json(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&Value>,
        accept: &str,
    ) -> Result<Value, ClientError> {
        let body = match body {
            Some(v) => Some((
                "application/json",
                serde_json::to_vec(v).map_err(|e| ClientError::Decode(e.to_string()))?,
            )),
            None => None,
        };
        self.request(method, path_and_query, body, accept)
            .await?
            .error_for_status()?
            .json()
    }

    /// A streaming GET: each line of the body is one JSON value, yielded as it arrives.
    pub async fn stream_lines(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<Pin<Box<dyn Stream<Item = Result<Value, ClientError>> + Send>>, ClientError> {
        let lines = self.stream_raw_lines(path_and_query, accept).await?;
        Ok(Box::pin(futures_lite::StreamExt::map(lines, |line| {
            line.and_then(|line| {
                serde_json::from_slice::<Value>(&line)
                    .map_err(|e| ClientError::Decode(format!("watch event: {e}")))
            })
        })))
    }

    /// A streaming GET whose answer must be 2xx (else the error its body describes).
    async fn stream_get(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<transport::Response, ClientError> {
        let mut resp = self.send("GET", path_and_query, None, accept).await?;
        if !resp.is_success() {
            let body = resp.bytes(usize::MAX).await.map_err(|e| self.error(e))?;
            return Err(error_from_body(resp.status, &body));
        }
        Ok(resp)
    }

    /// Like [`Client::stream_lines`], each line as its bytes.
    pub async fn stream_raw_lines(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<LineStream, ClientError> {
        let state = LineState {
            reader: Some(self.stream_get(path_and_query, accept).await?),
            pending: Vec::new(),
            start: 0,
            client: self.clone(),
        };
        Ok(Box::pin(futures_lite::stream::unfold(
            state,
            |mut st| async move {
                match st.next_line().await {
                    Ok(Some(line)) => Some((Ok(line), st)),
                    Ok(None) => None,
                    Err(e) => {
                        st.reader = None;
                        Some((Err(e), st))
                    }
                }
            },
        )))
    }

    /// A streaming GET of raw bytes (e.g. `pods/NAME/log?follow=true`): each piece of the
    /// body is yielded as it arrives. A non-2xx answer is an error.
    pub async fn stream_bytes(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<LineStream, ClientError> {
        let reader = self.stream_get(path_and_query, accept).await?;
        let client = self.clone();
        Ok(Box::pin(futures_lite::stream::unfold(
            Some(reader),
            move |state| {
                let client = client.clone();
                async move {
                    let mut reader = state?;
                    match reader.chunk().await {
                        Ok(Some(chunk)) => Some((Ok(chunk), Some(reader))),
                        Ok(None) => None,
                        Err(e) => Some((Err(client.error(e)), None)),
                    }
                }
            },
        )))
    }

    // ---- untyped API, by kind, on JSON values ----

    pub async fn get_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ClientError> {
        let path = resource_path(kind, namespace, Some(name));
        self.request_json("GET", &path, None, ACCEPT_JSON).await
    }

    /// The list object (`{"items":[..],"metadata":{"resourceVersion":..}}`).
    pub async fn list_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Value, ClientError> {
        let path = format!(
            "{}{}",
            resource_path(kind, namespace, None),
            options.to_query(false)
        );
        self.request_json("GET", &path, None, ACCEPT_JSON).await
    }

    pub async fn create_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        object: &Value,
    ) -> Result<Value, ClientError> {
        let path = resource_path(kind, namespace, None);
        self.request_json("POST", &path, Some(object), ACCEPT_JSON)
            .await
    }

    pub async fn replace_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
        object: &Value,
    ) -> Result<Value, ClientError> {
        let path = resource_path(kind, namespace, Some(name));
        self.request_json("PUT", &path, Some(object), ACCEPT_JSON)
            .await
    }

    /// `patch_type` is the content type: `application/merge-patch+json`,
    /// `application/strategic-merge-patch+json` or `application/json-patch+json`.
    pub async fn patch_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
        patch_type: &str,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        let path = resource_path(kind, namespace, Some(name));
        let body = serde_json::to_vec(patch).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.request("PATCH", &path, Some((patch_type, body)), ACCEPT_JSON)
            .await?
            .error_for_status()?
            .json()
    }

    /// Deletes; the answer is the object (still present while finalizers or grace run) or
    /// a success `Status`.
    pub async fn delete_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ClientError> {
        let path = resource_path(kind, namespace, Some(name));
        let body = serde_json::to_value(options).map_err(|e| ClientError::Decode(e.to_string()))?;
        let mut body = body;
        crate::codec::strip_nulls(&mut body);
        if let Value::Object(m) = &mut body {
            m.retain(|_, v| !v.as_array().is_some_and(|a| a.is_empty()));
        }
        self.request_json("DELETE", &path, Some(&body), ACCEPT_JSON)
            .await
    }

    /// Watches a kind; event objects are raw JSON (tables, if `accept` asks for them).
    pub async fn watch_value(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        options: &ListOptions,
        accept: &str,
    ) -> Result<WatchStream<Value>, ClientError> {
        let path = watch_path(kind, namespace, options);
        let lines = self.stream_lines(&path, accept).await?;
        Ok(Box::pin(futures_lite::StreamExt::map(lines, |line| {
            line.and_then(raw_event)
        })))
    }

    /// Watches a kind; each event as the bytes of its line, for callers that decode it
    /// themselves.
    pub async fn watch_lines(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        options: &ListOptions,
        accept: &str,
    ) -> Result<LineStream, ClientError> {
        self.stream_raw_lines(&watch_path(kind, namespace, options), accept)
            .await
    }

    // ---- typed API ----

    pub async fn get<K: Resource>(&self, namespace: &str, name: &str) -> Result<K, ClientError> {
        let v = self.get_value(K::KIND, Some(namespace), name).await?;
        decode(v)
    }

    /// Lists objects; `namespace` None lists all namespaces. Returns the items and the
    /// list's resourceVersion, where a watch continues.
    pub async fn list<K: Resource>(
        &self,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<(Vec<K>, String), ClientError> {
        let options = ListOptions {
            label_selector: label_selector.map(str::to_string),
            field_selector: field_selector.map(str::to_string),
            ..Default::default()
        };
        let v = self.list_value(K::KIND, namespace, &options).await?;
        let rv = v
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let items = match v.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        let objects = items.into_iter().map(decode).collect::<Result<_, _>>()?;
        Ok((objects, rv))
    }

    pub async fn create<K: Resource>(&self, object: &K) -> Result<K, ClientError> {
        let ns = object.meta().namespace.clone();
        let v = crate::codec::to_json(object);
        decode(self.create_value(K::KIND, ns.as_deref(), &v).await?)
    }

    /// PUT: replaces the object; a stale `metadata.resourceVersion` answers 409.
    pub async fn replace<K: Resource>(&self, object: &K) -> Result<K, ClientError> {
        let ns = object.meta().namespace.clone();
        let name = object.meta().name.clone();
        let v = crate::codec::to_json(object);
        decode(
            self.replace_value(K::KIND, ns.as_deref(), &name, &v)
                .await?,
        )
    }

    /// PUT to the `status` subresource.
    pub async fn replace_status<K: Resource>(&self, object: &K) -> Result<K, ClientError> {
        let ns = object.meta().namespace.clone();
        let name = object.meta().name.clone();
        let path = format!(
            "{}/status",
            resource_path(K::KIND, ns.as_deref(), Some(&name))
        );
        let v = crate::codec::to_json(object);
        decode(
            self.request_json("PUT", &path, Some(&v), ACCEPT_JSON)
                .await?,
        )
    }

    pub async fn patch<K: Resource>(
        &self,
        namespace: &str,
        name: &str,
        patch_type: &str,
        patch: &Value,
    ) -> Result<K, ClientError> {
        decode(
            self.patch_value(K::KIND, Some(namespace), name, patch_type, patch)
                .await?,
        )
    }

    /// Deletes; returns the object if the server answered with it (deletion pending),
    /// None if it answered with a `Status`.
    pub async fn delete<K: Resource>(
        &self,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Option<K>, ClientError> {
        let v = self
            .delete_value(K::KIND, Some(namespace), name, options)
            .await?;
        if v.get("kind").and_then(Value::as_str) == Some("Status") {
            return Ok(None);
        }
        decode(v).map(Some)
    }

    /// Watches objects of `K` from `resource_version` ("" or "0": current objects first as
    /// ADDED). An ERROR event is yielded as `Err(ClientError::Api(status))`.
    pub async fn watch<K: Resource>(
        &self,
        namespace: Option<&str>,
        resource_version: &str,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<WatchStream<K>, ClientError> {
        let options = ListOptions {
            label_selector: label_selector.map(str::to_string),
            field_selector: field_selector.map(str::to_string),
            resource_version: Some(resource_version.to_string()),
            timeout,
            allow_watch_bookmarks: false,
        };
        let lines = self
            .watch_lines(K::KIND, namespace, &options, ACCEPT_JSON)
            .await?;
        Ok(Box::pin(futures_lite::StreamExt::map(lines, |line| {
            line.and_then(|line| typed_event(&line))
        })))
    }
}

/// A watch line as a typed event: straight from the bytes when the object decodes on
/// [`crate::codec::from_json_bytes`]' fast path, else through a JSON value (which gives the
/// precise error).
fn typed_event<K: Resource>(line: &[u8]) -> Result<WatchEvent<K>, ClientError> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(rename = "type", borrow)]
        ty: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        object: &'a serde_json::value::RawValue,
    }
    if let Ok(l) = serde_json::from_slice::<Line>(line) {
        let typed = || crate::codec::from_json_bytes::<K>(l.object.get().as_bytes());
        let fast = match l.ty.as_ref() {
            "ADDED" => typed().map(WatchEvent::Added),
            "MODIFIED" => typed().map(WatchEvent::Modified),
            "DELETED" => typed().map(WatchEvent::Deleted),
            _ => None,
        };
        if let Some(ev) = fast {
            return Ok(ev);
        }
    }
    let v = serde_json::from_slice::<Value>(line)
        .map_err(|e| ClientError::Decode(format!("watch event: {e}")))?;
    Ok(match raw_event(v)? {
        WatchEvent::Added(o) => WatchEvent::Added(decode(o)?),
        WatchEvent::Modified(o) => WatchEvent::Modified(decode(o)?),
        WatchEvent::Deleted(o) => WatchEvent::Deleted(decode(o)?),
        WatchEvent::Bookmark { resource_version } => WatchEvent::Bookmark { resource_version },
    })
}

/// The path and query of a watch of `kind`.
fn watch_path(kind: Kind, namespace: Option<&str>, options: &ListOptions) -> String {
    format!(
        "{}{}",
        resource_path(kind, namespace, None),
        options.to_query(true)
    )
}

fn decode<K: Resource>(v: Value) -> Result<K, ClientError> {
    crate::codec::from_json(v).map_err(|e| ClientError::Decode(e.to_string()))
}

/// A watch line `{"type":..,"object":..}` as an event of JSON values.
fn raw_event(line: Value) -> Result<WatchEvent<Value>, ClientError> {
    let Value::Object(mut m) = line else {
        return Err(ClientError::Decode("a watch event is not an object".into()));
    };
    let object = m.remove("object").unwrap_or(Value::Null);
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "ADDED" => Ok(WatchEvent::Added(object)),
        "MODIFIED" => Ok(WatchEvent::Modified(object)),
        "DELETED" => Ok(WatchEvent::Deleted(object)),
        "BOOKMARK" => Ok(WatchEvent::Bookmark {
            resource_version: object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        }),
        "ERROR" => {
            let body = serde_json::to_vec(&object).unwrap_or_default();
            Err(error_from_body(500, &body))
        }
        other => Err(ClientError::Decode(format!(
            "unknown watch event type {other:?}"
        ))),
    }
}

/// A transport error with `server` as the client reports it.
fn error_of(server: &str, e: TransportError) -> ClientError {
    match e {
        TransportError::Connect { error, .. } | TransportError::Tls { error, .. } => {
            ClientError::Connect {
                server: server.to_string(),
                error,
            }
        }
        TransportError::Io(e) => ClientError::Io(e),
        TransportError::Timeout => ClientError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            e.to_string(),
        )),
        TransportError::Protocol(m) => ClientError::Protocol(m),
        TransportError::Url(u) => ClientError::Config(format!("bad URL {u:?}")),
    }
}

/// `https://HOST[:PORT]` split into host (IPv6 in brackets) and port (443 by default).
pub fn parse_server(server: &str) -> Result<(String, u16), ClientError> {
    let rest = server.strip_prefix("https://").ok_or_else(|| {
        ClientError::Config(format!(
            "the server URL must start with https://: {server:?}"
        ))
    })?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Err(ClientError::Config(format!("no host in {server:?}")));
    }
    // [v6]:port, [v6], host:port, host
    let (host, port) = if let Some(end) = authority.find(']') {
        let host = &authority[..=end];
        match authority[end + 1..].strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None => (host, None),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| ClientError::Config(format!("invalid port in {server:?}")))?,
        None => 443,
    };
    Ok((host.to_string(), port))
}

/// The rustls configuration that trusts `config`'s CA and presents its client certificate; also
/// used by the server's etcd client, which trusts and authenticates the same way.
pub fn tls_config(config: &ClientConfig) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Config(e.to_string()))?;
    let builder = if config.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
    } else {
        let ca = config.ca_pem.as_deref().ok_or_else(|| {
            ClientError::Config("no certificate authority to verify the server with".into())
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            let cert = cert.map_err(|e| ClientError::Config(format!("CA certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| ClientError::Config(format!("CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(ClientError::Config(
                "the certificate authority data holds no certificate".into(),
            ));
        }
        builder.with_root_certificates(roots)
    };
    let mut tls = if let Some(live) = &config.client_identity {
        builder.with_client_cert_resolver(live.clone())
    } else {
        match (&config.client_cert_pem, &config.client_key_pem) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ClientError::Config(format!("client certificate: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                    .map_err(|e| ClientError::Config(format!("client key: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| ClientError::Config(format!("client certificate: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(ClientError::Config(
                    "a client certificate needs both the certificate and its key".into(),
                ))
            }
        }
    };
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    if config.client_identity.is_some() {
        // A resumed TLS session carries the client certificate of the handshake it resumes:
        // after a renewal the server would go on seeing the old one, until it expires.
        tls.resumption = rustls::client::Resumption::disabled();
    }
    Ok(tls)
}

/// `insecure-skip-tls-verify`: any certificate is accepted, signatures are still checked.
#[derive(Debug)]
pub struct AnyServerCert(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Splits a streamed body into lines.
struct LineState {
    reader: Option<transport::Response>,
    /// Bytes received and not yet returned, from `start` on.
    pending: Vec<u8>,
    start: usize,
    client: Client,
}

impl LineState {
    async fn next_line(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        loop {
            if let Some(pos) = self.pending[self.start..].iter().position(|&b| b == b'\n') {
                let line = &self.pending[self.start..self.start + pos];
                self.start += pos + 1;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line.to_vec()));
            }
            // Everything before `start` was returned: drop it before reading more.
            self.pending.drain(..self.start);
            self.start = 0;
            let Some(reader) = self.reader.as_mut() else {
                return Ok(None);
            };
            match reader.chunk().await.map_err(|e| self.client.error(e))? {
                Some(data) => self.pending.extend_from_slice(&data),
                None => {
                    self.reader = None;
                    let rest = std::mem::take(&mut self.pending);
                    if rest.iter().all(u8::is_ascii_whitespace) {
                        return Ok(None);
                    }
                    return Ok(Some(rest));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_kubernetes_layout() {
        assert_eq!(
            resource_path(Kind::Pod, Some("default"), Some("x")),
            "/api/v1/namespaces/default/pods/x"
        );
        assert_eq!(resource_path(Kind::Pod, None, None), "/api/v1/pods");
        assert_eq!(
            resource_path(Kind::Node, Some("default"), Some("n1")),
            "/api/v1/nodes/n1"
        );
        assert_eq!(
            resource_path(Kind::Deployment, Some("a"), None),
            "/apis/apps/v1/namespaces/a/deployments"
        );
    }

    #[test]
    fn query_is_encoded() {
        let o = ListOptions {
            label_selector: Some("app=web,tier in (a,b)".into()),
            field_selector: Some("metadata.name=x".into()),
            resource_version: Some("12".into()),
            timeout: Some(Duration::from_secs(30)),
            allow_watch_bookmarks: true,
        };
        assert_eq!(
            o.to_query(true),
            "?labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&fieldSelector=metadata.name%3Dx\
             &resourceVersion=12&watch=true&allowWatchBookmarks=true&timeoutSeconds=30"
        );
        assert_eq!(ListOptions::default().to_query(false), "");
    }

    #[test]
    fn server_urls_are_parsed() {
        assert_eq!(
            parse_server("https://127.0.0.1:6443").unwrap(),
            ("127.0.0.1".into(), 6443)
        );
        assert_eq!(
            parse_server("https://[::1]:6443/").unwrap(),
            ("[::1]".into(), 6443)
        );
        assert_eq!(
            parse_server("https://example.com").unwrap(),
            ("example.com".into(), 443)
        );
        assert!(parse_server("http://x:1").is_err());
        assert!(parse_server("https://x:notaport").is_err());
    }

    #[test]
    fn api_errors_display_the_status_message() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"x\" not found","reason":"NotFound","code":404}"#;
        let e = error_from_body(404, body);
        assert_eq!(e.to_string(), "pods \"x\" not found");
        assert!(e.is_not_found());
        let e = error_from_body(502, b"bad gateway");
        assert_eq!(e.to_string(), "the server answered 502: bad gateway");
    }

    #[test]
    fn typed_events_decode_straight_from_the_line_or_through_a_value() {
        use crate::core::Pod;
        let ev = typed_event::<Pod>(
            br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","resourceVersion":"7"},"spec":{"nodeName":"n1","containers":[]}}}"#,
        )
        .unwrap();
        let WatchEvent::Modified(p) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (p.metadata.name.as_str(), p.spec.node_name.as_deref()),
            ("p", Some("n1"))
        );
        // A null where the model has a list takes the careful path, which accepts it.
        let ev = typed_event::<Pod>(
            br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"q","finalizers":null}}}"#,
        )
        .unwrap();
        assert!(matches!(ev, WatchEvent::Added(p) if p.metadata.name == "q"));
        let ev = typed_event::<Pod>(
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#,
        )
        .unwrap();
        assert_eq!(
            ev,
            WatchEvent::Bookmark {
                resource_version: "9".into()
            }
        );
        let e = typed_event::<Pod>(
            br#"{"type":"ERROR","object":{"kind":"Status","message":"gone","code":410}}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), Some(410));
        let e = typed_event::<Pod>(br#"{"type":"ADDED","object":{"kind":"Service"}}"#).unwrap_err();
        assert!(e.to_string().contains("Service"), "{e}");
    }

    #[test]
    fn raw_events_are_classified() {
        let ev = raw_event(serde_json::json!({"type":"ADDED","object":{"a":1}})).unwrap();
        assert_eq!(ev, WatchEvent::Added(serde_json::json!({"a":1})));
        let ev = raw_event(
            serde_json::json!({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}),
        )
        .unwrap();
        assert_eq!(
            ev,
            WatchEvent::Bookmark {
                resource_version: "9".into()
            }
        );
        let e = raw_event(serde_json::json!({"type":"ERROR","object":{"kind":"Status","message":"too old resource version: 1 (5)","code":410}})).unwrap_err();
        assert_eq!(e.code(), Some(410));
        assert_eq!(e.to_string(), "too old resource version: 1 (5)");
    }
}
