//! The agent's log endpoint: HTTPS on `--port` (10250 by default, as the kubelet), serving
//! `GET /containerLogs/{namespace}/{pod}/{container}?follow=&tailLines=&sinceSeconds=&
//! timestamps=&previous=&limitBytes=` from the container log files (see
//! [`crate::runtime::logs`] for their format and its trade-offs).
//!
//! The same endpoint answers `GET /stats/summary` (node and container CPU and memory, see
//! [`super::stats`]), which the server's `metrics.k8s.io` API reads.
//!
//! Only the API server may ask: the TLS layer requires a client certificate that chains to
//! the cluster CA *and* names [`APISERVER_CLIENT_CN`] or a node (`system:node:NAME` in
//! `system:nodes`); a self-made certificate, another user's or none at all end the
//! handshake. A node may only fetch image blobs from a site peer (`/skiff/v1/blobs/`, see
//! [`super::blobs`]); every other path is the API server's (403 to a node). The serving
//! certificate is the node's own (signed at join for client and server use, with the node's
//! name as DNS SAN, which is what the server checks). Users reach logs through the server (`GET .../pods/NAME/log`), which proxies here.
//!
//! HTTP is the minimum: one request per connection, a GET with no body, the answer
//! `Connection: close` with the body delimited by the end of the connection (plain text), or
//! an error status with a one-line text message. A follow stream ends when the client goes
//! away, the container exits (its log then has nothing more to come), or a newer run of the
//! container starts.
//!
//! The same endpoint serves the kubelet's streaming paths, `/exec/...`, `/attach/...` and
//! `/portForward/...` (WebSocket upgrades; see [`super::exec`] and [`super::portforward`]):
//! `dispatch` routes each request by its path.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use api::core::Pod;

use super::Credentials;
use crate::pods::PodCache;
use crate::runtime::logs::{self as files, LogQuery, LogReader};
use crate::runtime::{ContainerId, ContainerState, Runtime};

/// The common name of the API server's client certificate, the only client accepted (the
/// server's `skiff_control::pki::APISERVER_CLIENT_CN`).
pub const APISERVER_CLIENT_CN: &str = "skiff-apiserver";
/// The kubelet's port.
pub const DEFAULT_PORT: u16 = 10250;
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 32;
/// How long a client has for the handshake and its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a follow stream looks for more.
const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// The largest request head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// Why the log endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogServerError {
    #[error("TLS configuration of the log endpoint: {0}")]
    Tls(String),
}

/// Who a connection's client certificate says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The API server (its client certificate, a tunnel, or the server's in-process
    /// connections).
    ApiServer,
    /// A node of the cluster, by name.
    Node(String),
}

impl Caller {
    /// The caller a certificate names, if one the endpoint serves.
    fn of(der: &CertificateDer<'_>) -> Option<Caller> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let cn = subject.iter_common_name().next()?.as_str().ok()?;
        if cn == APISERVER_CLIENT_CN {
            return Some(Caller::ApiServer);
        }
        let name = cn.strip_prefix("system:node:").filter(|n| !n.is_empty())?;
        let in_nodes = subject
            .iter_organization()
            .any(|o| o.as_str().ok() == Some("system:nodes"));
        in_nodes.then(|| Caller::Node(name.to_string()))
    }
}

/// Accepts a client only if its certificate chains to the CA and names the API server or a
/// node.
#[derive(Debug)]
struct ApiServerOrNode {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for ApiServerOrNode {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if Caller::of(end_entity).is_some() {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// TLS for the endpoint: the node's certificate (`live`, swapped in place when the agent
/// renews it), the API server and the cluster's nodes as the only clients.
pub fn tls_config(
    creds: &Credentials,
    live: Arc<api::tls::LiveCertificate>,
) -> Result<Arc<rustls::ServerConfig>, LogServerError> {
    let tls = |e: &dyn std::fmt::Display| LogServerError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(creds.ca_pem.as_bytes()) {
        roots.add(ca.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    let inner = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| tls(&e))?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(Arc::new(ApiServerOrNode { inner }))
        .with_cert_resolver(live);
    Ok(Arc::new(config))
}

/// True when the node's certificate may serve TLS (nodes joined before the log endpoint
/// existed hold client-only certificates: the server will refuse to talk to them).
pub fn can_serve(creds: &Credentials) -> bool {
    let Ok(der) = CertificateDer::from_pem_slice(creds.cert_pem.as_bytes()) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    matches!(cert.extended_key_usage(), Ok(Some(eku)) if eku.value.server_auth)
}

/// Where the endpoint finds pods and their logs.
pub struct LogSource {
    /// The node's name, for `/stats/summary`.
    pub node_name: String,
    /// `<data dir>/pods`: `<uid>/logs/<container>/<restart>.log`.
    pub pods_dir: PathBuf,
    pub cache: Arc<PodCache>,
    pub runtime: Arc<Runtime>,
    /// The node's site, when it shares images with its peers (`--share-images`).
    pub site: Option<Arc<crate::image::peers::Site>>,
}

/// One parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct LogRequest {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub query: LogQuery,
    pub follow: bool,
    pub previous: bool,
}

/// An HTTP error answer: status code and message.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub u16, pub String);

fn bad(msg: impl Into<String>) -> Refusal {
    Refusal(400, msg.into())
}

fn flag(v: &str) -> Result<bool, Refusal> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" | "" => Ok(false),
        _ => Err(bad(format!("invalid boolean {v:?}"))),
    }
}

fn number(key: &str, v: &str, min: i64) -> Result<i64, Refusal> {
    v.parse::<i64>().ok().filter(|n| *n >= min).ok_or_else(|| {
        bad(format!(
            "{key} must be an integer of at least {min}, not {v:?}"
        ))
    })
}

/// Parses the request head (request line and headers).
pub fn parse_request(head: &str, now_nanos: i64) -> Result<LogRequest, Refusal> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return Err(Refusal(405, format!("method {method} is not allowed")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, container] = segs.as_slice() else {
        return Err(Refusal(404, format!("no such path {path}")));
    };
    if [ns, pod, container].iter().any(|s| s.is_empty()) {
        return Err(Refusal(404, format!("no such path {path}")));
    }
    let mut req = LogRequest {
        namespace: ns.to_string(),
        pod: pod.to_string(),
        container: container.to_string(),
        query: LogQuery::default(),
        follow: false,
        previous: false,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "follow" => req.follow = flag(v)?,
            "previous" => req.previous = flag(v)?,
            "timestamps" => req.query.timestamps = flag(v)?,
            "tailLines" => req.query.tail_lines = Some(number(k, v, 0)? as u64),
            "limitBytes" => req.query.limit_bytes = Some(number(k, v, 1)? as u64),
            "sinceSeconds" => {
                let s = number(k, v, 1)?;
                req.query.since_nanos =
                    Some(now_nanos.saturating_sub(s.saturating_mul(1_000_000_000)));
            }
            _ => {}
        }
    }
    Ok(req)
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// What a request reads: its files and, for a follow, how to tell that the log has ended.
struct Plan {
    reader: LogReader,
    follow: Option<Follow>,
}

struct Follow {
    container_dir: PathBuf,
    run: u32,
    id: Option<ContainerId>,
}

impl Follow {
    /// True when no more output can come to this run: a newer run exists or the container
    /// is not running.
    fn ended(&self, runtime: &Runtime) -> bool {
        if files::runs(&self.container_dir)
            .last()
            .is_some_and(|&r| r > self.run)
        {
            return true;
        }
        let Some(id) = &self.id else { return true };
        !matches!(
            runtime.state(id),
            Ok(ContainerState::Running { .. } | ContainerState::Created)
        )
    }
}

/// Finds a pod of this node (blocking: the pod cache is a redb file).
pub(super) fn find_pod(source: &LogSource, namespace: &str, name: &str) -> Result<Pod, Refusal> {
    let pods = source
        .cache
        .list()
        .map_err(|e| Refusal(500, format!("reading the pod cache: {e}")))?;
    pods.into_iter()
        .find(|p| p.metadata.name == name && p.metadata.namespace.as_deref() == Some(namespace))
        .ok_or_else(|| Refusal(404, format!("pod {namespace}/{name} is not on this node")))
}

/// Finds the pod and the files to read (blocking: the pod cache is a redb file).
fn plan(source: &LogSource, req: &LogRequest) -> Result<Plan, Refusal> {
    let uid = find_pod(source, &req.namespace, &req.pod)?.metadata.uid;
    let container_dir = source.pods_dir.join(&uid).join("logs").join(&req.container);
    let runs = files::runs(&container_dir);
    let run = if req.previous {
        match runs.as_slice() {
            [.., previous, _] => *previous,
            _ => {
                return Err(bad(format!(
                    "previous terminated container \"{}\" in pod \"{}\" not found",
                    req.container, req.pod
                )))
            }
        }
    } else {
        match runs.last() {
            Some(&r) => r,
            None => {
                return Err(bad(format!(
                    "container \"{}\" in pod \"{}\" is waiting to start: no logs yet",
                    req.container, req.pod
                )))
            }
        }
    };
    let reader = LogReader::open(files::run_files(&container_dir, run), req.query.clone())
        .map_err(|e| Refusal(500, format!("reading the log: {e}")))?;
    let follow = (req.follow && !req.previous).then(|| Follow {
        id: ContainerId::new(&uid, &req.container).ok(),
        container_dir,
        run,
    });
    let reader = if follow.is_some() {
        reader
    } else {
        reader.up_to_now()
    };
    Ok(Plan { reader, follow })
}

/// Serves the endpoint on `listener` forever.
pub async fn serve(
    listener: smol::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    source: Arc<LogSource>,
) {
    let acceptor = futures_rustls::TlsAcceptor::from(tls);
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("log endpoint: accept failed: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            tracing::warn!(%peer, "log endpoint: too many connections, dropping one");
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (acceptor, source, active) = (acceptor.clone(), source.clone(), active.clone());
        smol::spawn(async move {
            if let Err(e) = connection(tcp, acceptor, source).await {
                tracing::debug!(%peer, "log endpoint: {e}");
            }
            active.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
}

async fn timeout<T>(
    fut: impl std::future::Future<Output = io::Result<T>>,
    what: &str,
) -> io::Result<T> {
    let what = what.to_string();
    fut.or(async move {
        smol::Timer::after(REQUEST_TIMEOUT).await;
        Err(io::Error::new(io::ErrorKind::TimedOut, what))
    })
    .await
}

async fn read_head<S: futures_lite::AsyncRead + Unpin>(stream: &mut S) -> io::Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no request"));
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request head too large",
            ));
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    }
}

async fn connection(
    tcp: smol::net::TcpStream,
    acceptor: futures_rustls::TlsAcceptor,
    source: Arc<LogSource>,
) -> io::Result<()> {
    let _ = tcp.set_nodelay(true);
    let tls = timeout(acceptor.accept(tcp), "TLS handshake timed out").await?;
    let caller = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(Caller::of);
    match caller {
        Some(caller) => handle_as(tls, source, caller).await,
        None => Ok(()),
    }
}

/// Connections handed over by the server this agent runs inside (`skiff server`'s own node):
/// one end of a socket pair made in the same process, so already trusted and not encrypted.
/// Exec, logs and port-forward to the server's own node then skip a TLS hop over loopback
/// (two encryptions of every byte and a handshake per request).
pub type LocalConnections = async_channel::Receiver<std::os::unix::net::UnixStream>;

/// Serves the connections of [`LocalConnections`] until the sending side is dropped.
pub async fn serve_local(connections: LocalConnections, source: Arc<LogSource>) {
    while let Ok(conn) = connections.recv().await {
        let stream = match smol::Async::new(conn) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("log endpoint: in-process connection: {e}");
                continue;
            }
        };
        let source = source.clone();
        smol::spawn(async move {
            if let Err(e) = handle(stream, source).await {
                tracing::debug!("log endpoint (in-process): {e}");
            }
        })
        .detach();
    }
}

/// Reads a request's head and serves it, for the API server (tunnels and in-process
/// connections).
pub(crate) async fn handle<S>(stream: S, source: Arc<LogSource>) -> io::Result<()>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + Send + 'static,
{
    handle_as(stream, source, Caller::ApiServer).await
}

/// Reads a request's head and serves it if `caller` may ask it: a node only for image
/// blobs, the API server for everything else.
async fn handle_as<S>(mut stream: S, source: Arc<LogSource>, caller: Caller) -> io::Result<()>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + Send + 'static,
{
    let head = timeout(read_head(&mut stream), "request timed out").await?;
    let blob = super::blobs::is_blob_request(&head);
    match (&caller, blob) {
        (Caller::Node(_), true) => {
            return Box::pin(super::blobs::serve(stream, &head, &source)).await
        }
        (Caller::ApiServer, false) => {}
        (Caller::Node(node), false) => {
            let msg = format!("node {node} may only fetch image blobs here");
            return refuse(&mut stream, Refusal(403, msg)).await;
        }
        (Caller::ApiServer, true) => {
            let msg = "image blobs are for the site's nodes only".to_string();
            return refuse(&mut stream, Refusal(403, msg)).await;
        }
    }
    match dispatch(&head) {
        Ok(Endpoint::Logs) => logs(stream, &head, source).await,
        Ok(Endpoint::Stats) => super::stats::answer(&mut stream, &source).await,
        Ok(Endpoint::Stream(req)) => {
            super::exec::serve(stream, &head, req, source).await;
            Ok(())
        }
        Ok(Endpoint::PortForward(req)) => {
            super::portforward::serve(stream, &head, req, source).await;
            Ok(())
        }
        Err(refusal) => refuse(&mut stream, refusal).await,
    }
}

/// What a request is for.
enum Endpoint {
    Logs,
    /// `/stats/summary`: the node's and its containers' CPU and memory.
    Stats,
    Stream(super::exec::StreamRequest),
    PortForward(super::portforward::PortForwardRequest),
}

/// Routes a request by its path (the kubelet's paths).
fn dispatch(head: &str) -> Result<Endpoint, Refusal> {
    if super::stats::is_summary_request(head) {
        return Ok(Endpoint::Stats);
    }
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let streaming = method == "GET" || method == "POST";
    match segs.split_first() {
        Some((&"containerLogs", _)) => Ok(Endpoint::Logs),
        Some((&kind @ ("exec" | "attach"), rest)) if streaming => Ok(Endpoint::Stream(
            super::exec::parse_stream_request(kind == "attach", rest, query)?,
        )),
        Some((&"portForward", rest)) if streaming => Ok(Endpoint::PortForward(
            super::portforward::parse_request(rest, query)?,
        )),
        Some((&("exec" | "attach" | "portForward"), _)) => {
            Err(Refusal(405, format!("method {method} is not allowed")))
        }
        _ => Err(Refusal(404, format!("no such path {path}"))),
    }
}

/// Answers an error status with a one-line message and closes the connection.
pub(super) async fn refuse<S: futures_lite::AsyncWrite + Unpin>(
    stream: &mut S,
    Refusal(code, msg): Refusal,
) -> io::Result<()> {
    let body = format!("{msg}\n");
    let answer = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason(code),
        body.len()
    );
    stream.write_all(answer.as_bytes()).await?;
    stream.flush().await?;
    stream.close().await
}

/// Serves a log request.
async fn logs<S>(mut tls: S, head: &str, source: Arc<LogSource>) -> io::Result<()>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let planned = match parse_request(head, now_nanos()) {
        Ok(req) => {
            let src = source.clone();
            smol::unblock(move || plan(&src, &req)).await
        }
        Err(r) => Err(r),
    };
    let plan = match planned {
        Ok(p) => p,
        Err(refusal) => return refuse(&mut tls, refusal).await,
    };
    tls.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n",
    )
    .await?;
    tls.flush().await?;
    let (mut rd, mut wr) = futures_lite::io::split(tls);
    // The client sends nothing more: a read that ends means it went away.
    let gone = async move {
        let mut buf = [0u8; 512];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    };
    let runtime = source.runtime.clone();
    let stream = async move {
        stream_log(plan, runtime, &mut wr).await?;
        wr.close().await
    };
    stream.or(gone).await
}

async fn stream_log<W: futures_lite::AsyncWrite + Unpin>(
    plan: Plan,
    runtime: Arc<Runtime>,
    out: &mut W,
) -> io::Result<()> {
    let Plan { mut reader, follow } = plan;
    let follow = follow.map(Arc::new);
    loop {
        let f = follow.clone();
        let rt = runtime.clone();
        // Whether the log had ended is decided before the read, so nothing written just
        // before the container exited is missed.
        let (r, chunk, ended) = smol::unblock(move || {
            let ended = f.as_ref().is_none_or(|f| f.ended(&rt));
            let chunk = reader.read_more();
            (reader, chunk, ended)
        })
        .await;
        reader = r;
        let chunk = chunk?;
        if !chunk.is_empty() {
            out.write_all(&chunk).await?;
            out.flush().await?;
        }
        if reader.limit_reached() {
            return Ok(());
        }
        if chunk.is_empty() {
            if ended {
                let rest = reader.finish();
                out.write_all(&rest).await?;
                return out.flush().await;
            }
            smol::Timer::after(FOLLOW_POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests() {
        let r = parse_request(
            "GET /containerLogs/default/web/main?follow=true&tailLines=10&sinceSeconds=5&timestamps=1&limitBytes=100 HTTP/1.1\r\nHost: x\r\n\r\n",
            10_000_000_000,
        )
        .expect("parse");
        assert_eq!(
            r,
            LogRequest {
                namespace: "default".into(),
                pod: "web".into(),
                container: "main".into(),
                query: LogQuery {
                    tail_lines: Some(10),
                    since_nanos: Some(5_000_000_000),
                    timestamps: true,
                    limit_bytes: Some(100),
                },
                follow: true,
                previous: false,
            }
        );
        assert_eq!(
            parse_request("POST /containerLogs/a/b/c HTTP/1.1\r\n\r\n", 0)
                .unwrap_err()
                .0,
            405
        );
        assert_eq!(
            parse_request("GET /containerLogs/a/b HTTP/1.1\r\n\r\n", 0)
                .unwrap_err()
                .0,
            404
        );
        assert_eq!(
            parse_request("GET /containerLogs/a/b/c?tailLines=-1 HTTP/1.1\r\n\r\n", 0)
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            parse_request(
                "GET /containerLogs/a/b/c?previous=maybe HTTP/1.1\r\n\r\n",
                0
            )
            .unwrap_err()
            .0,
            400
        );
    }
}
