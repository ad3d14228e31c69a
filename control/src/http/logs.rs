//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: a pod's container log, fetched from the
//! agent of the pod's node and streamed through.
//!
//! The server connects to the node's InternalIP at the port the Node publishes in
//! `status.daemonEndpoints.kubeletEndpoint.Port`, verifies the agent's certificate against
//! the CA *and the node's name* (never its address: an address can move, and a node may ask
//! for any address in its CSR), and presents its own client certificate
//! ([`crate::pki::APISERVER_CLIENT_CN`]), the only one the agent accepts. The agent answers
//! with the body delimited by the end of the connection; every piece it sends is passed on
//! at once as a chunk, so `follow=true` is live. When the client goes away, the response
//! body is dropped, which drops the agent connection, which ends the agent's stream.
//!
//! Only admins may read logs (a node's certificate may not read other pods' logs).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use api::core::{Node, Pod};
use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};
use tide::http::StatusCode;

use super::route::ResourcePath;
use super::stream::ChannelReader;
use super::{query_value, AppState, State};
use crate::auth::User;
use crate::error::ApiError;

/// How long connecting to an agent (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the agent has to start answering.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);
/// The kubelet's port, when a Node does not say.
const DEFAULT_AGENT_PORT: i32 = 10250;

fn flag_of(value: Option<&str>, key: &str) -> Result<bool, ApiError> {
    match value {
        None | Some("" | "false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key}: invalid boolean value {other:?}"
        ))),
    }
}

fn integer(query: &str, key: &str, min: i64) -> Result<Option<i64>, ApiError> {
    match query_value(query, key) {
        None => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(ApiError::bad_request(format!(
                "{key}: must be an integer of at least {min}, not {v:?}"
            ))),
        },
    }
}

/// What a `log` request asks for: the container it names, and the query string for the
/// agent (the agent's `parse_request` reads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub agent_query: String,
}

/// The [`LogOptions`] of a `log` request's query string at `now` (`sinceTime` becomes
/// seconds before it). The fuzz target `query_headers` calls it.
pub fn log_options(query: &str, now: std::time::SystemTime) -> Result<LogOptions, ApiError> {
    let mut q = Vec::new();
    for key in ["follow", "previous", "timestamps"] {
        if flag_of(query_value(query, key).as_deref(), key)? {
            q.push(format!("{key}=true"));
        }
    }
    if let Some(n) = integer(query, "tailLines", 0)? {
        q.push(format!("tailLines={n}"));
    }
    if let Some(n) = integer(query, "limitBytes", 1)? {
        q.push(format!("limitBytes={n}"));
    }
    let since_seconds = integer(query, "sinceSeconds", 1)?;
    let since_time = query_value(query, "sinceTime");
    match (since_seconds, since_time) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "at most one of sinceTime or sinceSeconds may be specified",
            ))
        }
        (Some(s), None) => q.push(format!("sinceSeconds={s}")),
        (None, Some(t)) => {
            let at = humantime::parse_rfc3339_weak(&t).map_err(|e| {
                ApiError::bad_request(format!("sinceTime: invalid RFC 3339 time {t:?}: {e}"))
            })?;
            // The agent takes seconds; round up so that nothing older than asked is sent.
            let ago = now.duration_since(at).unwrap_or(Duration::ZERO);
            q.push(format!("sinceSeconds={}", ago.as_secs().max(1)));
        }
        (None, None) => {}
    }
    Ok(LogOptions {
        container: query_value(query, "container"),
        agent_query: q.join("&"),
    })
}

/// The container a request means: the one named (an init, app or ephemeral container), or
/// the pod's only one.
pub(super) fn container_of(
    pod: &Pod,
    name: &str,
    asked: Option<String>,
) -> Result<String, ApiError> {
    let names: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| c.name.as_str())
        .chain(
            pod.spec
                .ephemeral_containers
                .iter()
                .map(|c| c.name.as_str()),
        )
        .collect();
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c.as_str()) => Ok(c),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match pod.spec.containers.as_slice() {
            [only] => Ok(only.name.clone()),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                pod.spec
                    .containers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ))),
        },
    }
}

/// Serves a `log` request (the caller has routed `pods/NAME/log` here).
pub(super) async fn pod_log(
    state: &State,
    req: &tide::Request<State>,
    user: &User,
    path: &ResourcePath,
) -> Result<tide::Response, ApiError> {
    if let Some(node) = user.node_name() {
        return Err(ApiError::forbidden(format!(
            "pods \"log\" is forbidden: User \"system:node:{node}\" cannot read pod logs"
        )));
    }
    if req.method() != tide::http::Method::Get {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow {} on pod logs",
            req.method()
        )));
    }
    let (Some(ns), Some(name)) = (&path.namespace, &path.name) else {
        return Err(ApiError::path_not_found());
    };
    let pod: Pod = state.registry.get(ns, name).await?;
    let LogOptions {
        container,
        agent_query,
    } = log_options(super::query_string(req), std::time::SystemTime::now())?;
    let container = container_of(&pod, name, container)?;
    let agent = Agent::of(state, &pod, "fetch the logs of").await?;
    let target = format!("/containerLogs/{ns}/{name}/{container}?{agent_query}");
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        agent.host()
    );
    let Answer {
        status,
        rest: head_rest,
        stream,
        ..
    } = agent.fetch(state, &request).await?;
    if status != 200 {
        let mut body = head_rest;
        let mut s = stream;
        let _ = s.read_to_end(&mut body).await;
        let message = String::from_utf8_lossy(&body).trim().to_string();
        return Err(match status {
            400 | 404 => ApiError::bad_request(message),
            _ => agent.unreachable(&format!("the agent answered {status}: {message}")),
        });
    }

    // A task pumps the agent's bytes into the response; it ends (dropping the agent
    // connection) when the agent is done or the client is gone.
    let (tx, rx) = async_channel::bounded::<Vec<u8>>(16);
    smol::spawn(async move {
        let mut stream = stream;
        if !head_rest.is_empty() && tx.send(head_rest).await.is_err() {
            return;
        }
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .detach();
    let mut r = tide::Response::new(StatusCode::Ok);
    r.set_body(tide::Body::from_reader(ChannelReader::new(rx), None));
    r.set_content_type("text/plain");
    Ok(r)
}

/// A connection to a node's agent.
pub(super) enum AgentStream {
    /// Over the network, mutual TLS.
    Tls(Box<futures_rustls::client::TlsStream<smol::net::TcpStream>>),
    /// To the agent inside this process (see [`LocalAgent`]).
    Local(smol::Async<std::os::unix::net::UnixStream>),
    /// A stream of the tunnel the node's agent opened to this server (`crate::tunnel`).
    Tunnel(Box<api::tunnel::Stream>),
}

impl futures_lite::AsyncRead for AgentStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            AgentStream::Tls(s) => Pin::new(s).poll_read(cx, buf),
            AgentStream::Local(s) => Pin::new(s).poll_read(cx, buf),
            AgentStream::Tunnel(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl futures_lite::AsyncWrite for AgentStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            AgentStream::Tls(s) => Pin::new(s).poll_write(cx, buf),
            AgentStream::Local(s) => Pin::new(s).poll_write(cx, buf),
            AgentStream::Tunnel(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Tls(s) => Pin::new(s).poll_flush(cx),
            AgentStream::Local(s) => Pin::new(s).poll_flush(cx),
            AgentStream::Tunnel(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Tls(s) => Pin::new(s).poll_close(cx),
            AgentStream::Local(s) => Pin::new(s).poll_close(cx),
            AgentStream::Tunnel(s) => Pin::new(s).poll_close(cx),
        }
    }
}

/// The agent that `skiff server` runs for its own node: requests for that node reach it
/// through a socket pair made in this process instead of a TLS connection over loopback,
/// which saves a handshake per request and two encryptions of every byte streamed.
pub struct LocalAgent {
    pub node_name: String,
    /// Takes the agent's end of each socket pair.
    pub connections: async_channel::Sender<std::os::unix::net::UnixStream>,
    /// Tells the agent that an exec is probably coming (it starts its cgroup warm-up; see
    /// `agent::runtime::exec::warm_cgroup_migration`).
    pub exec_coming: fn(),
}

impl LocalAgent {
    /// A connection to the in-process agent, if `node_name` is its node and it still runs.
    async fn connect(&self, node_name: &str) -> Option<AgentStream> {
        if self.node_name != node_name {
            return None;
        }
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().ok()?;
        self.connections.send(theirs).await.ok()?;
        smol::Async::new(ours).ok().map(AgentStream::Local)
    }
}

/// The agent of a pod's node: where it listens and how to reach it.
pub(super) struct Agent {
    pub node_name: String,
    pub ip: String,
    pub port: u16,
    /// The pod and what is being done, for messages ("fetch the logs of pod web").
    what: String,
}

impl Agent {
    /// The agent of `pod`'s node, from the Node's InternalIP and kubelet endpoint.
    pub(super) async fn of(state: &State, pod: &Pod, doing: &str) -> Result<Agent, ApiError> {
        let name = &pod.metadata.name;
        let what = format!("{doing} pod {name}");
        let Some(node_name) = pod.spec.node_name.clone().filter(|n| !n.is_empty()) else {
            return Err(ApiError::bad_request(format!(
                "pod {name} does not have a host assigned"
            )));
        };
        let node: Node = state.registry.get("", &node_name).await.map_err(|_| {
            ApiError::unavailable(format!(
                "cannot {what}: its node {node_name} is not registered"
            ))
        })?;
        let Some(ip) = node
            .status
            .addresses
            .iter()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address.clone())
        else {
            return Err(ApiError::unavailable(format!(
                "cannot {what}: node {node_name} has no InternalIP"
            )));
        };
        let port = node
            .status
            .daemon_endpoints
            .as_ref()
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map(|e| e.port)
            .filter(|p| *p > 0 && *p <= 65535)
            .unwrap_or(DEFAULT_AGENT_PORT);
        Ok(Agent {
            node_name,
            ip,
            port: port as u16,
            what,
        })
    }

    /// `ip:port` as a Host header and connect address.
    pub(super) fn host(&self) -> String {
        if self.ip.contains(':') {
            format!("[{}]:{}", self.ip, self.port)
        } else {
            format!("{}:{}", self.ip, self.port)
        }
    }

    pub(super) fn unreachable(&self, e: &dyn std::fmt::Display) -> ApiError {
        ApiError::unavailable(format!(
            "cannot {} from node {} at {}: {e}",
            self.what,
            self.node_name,
            self.host()
        ))
    }

    /// Sends `request` (a whole request head) to the agent and reads its answer's head.
    pub(super) async fn fetch(&self, state: &State, request: &str) -> Result<Answer, ApiError> {
        let tls = state
            .pki
            .agent_client_config()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        fetch(state, tls, &self.node_name, &self.host(), request)
            .await
            .map_err(|e| self.unreachable(&e))
    }
}

/// A mutual-TLS connection to the agent at `host`.
async fn connect_tls(
    tls: Arc<rustls::ClientConfig>,
    node_name: &str,
    host: &str,
) -> Result<AgentStream, String> {
    let server_name = rustls::pki_types::ServerName::try_from(node_name.to_string())
        .map_err(|e| format!("node name {node_name:?} is not a DNS name: {e}"))?;
    let connect = async {
        let tcp = smol::net::TcpStream::connect(host)
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        futures_rustls::TlsConnector::from(tls)
            .connect(server_name, tcp)
            .await
            .map(|s| AgentStream::Tls(Box::new(s)))
            .map_err(|e| format!("TLS: {e}"))
    };
    connect
        .or(async {
            smol::Timer::after(CONNECT_TIMEOUT).await;
            Err("timed out connecting".to_string())
        })
        .await
}

/// The agent's answer to a request.
pub(super) struct Answer {
    pub status: u16,
    /// The whole head (status line and headers).
    pub head: String,
    /// The bytes read after the head.
    pub rest: Vec<u8>,
    /// The connection, for the rest.
    pub stream: AgentStream,
}

/// Sends the request to the agent and reads the head of its answer.
pub(super) async fn fetch(
    state: &AppState,
    tls: Arc<rustls::ClientConfig>,
    node_name: &str,
    host: &str,
    request: &str,
) -> Result<Answer, String> {
    let local = match state.local_agent.get() {
        Some(agent) => agent.connect(node_name).await,
        None => None,
    };
    // The in-process agent; else the node's tunnel to this server; else the network.
    let mut stream = match local {
        Some(s) => s,
        None => match state.tunnels.open(node_name).await {
            Some(opened) => AgentStream::Tunnel(Box::new(
                opened.map_err(|e| format!("through the node's tunnel: {e}"))?,
            )),
            None => connect_tls(tls, node_name, host).await?,
        },
    };
    let answer = async {
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                let rest = head.split_off(end + 4);
                return Ok((head, rest));
            }
            if head.len() > 64 * 1024 {
                return Err("the agent's answer has no end of head".to_string());
            }
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the agent closed the connection without an answer".to_string());
            }
            head.extend_from_slice(&buf[..n]);
        }
    };
    let (head, rest) = answer
        .or(async {
            smol::Timer::after(ANSWER_TIMEOUT).await;
            Err("timed out waiting for the agent's answer".to_string())
        })
        .await?;
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| "the agent's answer is not HTTP".to_string())?;
    Ok(Answer {
        status,
        head,
        rest,
        stream,
    })
}
