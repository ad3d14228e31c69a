//! `pods/NAME/exec`, `pods/NAME/attach` and `pods/NAME/portforward`: upgraded connections
//! proxied to the agent of the pod's node, as the API server proxies them to the kubelet.
//!
//! The server checks who asks (only admins: a node's certificate gets 403) and what (the pod,
//! its node, the container), then opens the agent's endpoint (mutual TLS, the node's name
//! verified, the server's client certificate; see [`super::logs`]) and sends it the client's
//! upgrade request for `/exec|attach/{ns}/{pod}/{container}` or `/portForward/{ns}/{pod}` with
//! the query unchanged. The agent speaks the WebSocket channel protocols (see the agent's
//! `node::exec` and `node::portforward`); its `101 Switching Protocols` goes back to the
//! client, and from then on the bytes are copied both ways. An agent that refuses (a
//! container that is not running, an unsupported protocol such as SPDY) becomes a `Status`.
//!
//! Nothing new is exposed on the node: the agent's endpoint takes only the server's
//! certificate.

use futures_lite::AsyncReadExt;
use tide::http::StatusCode;

use super::logs::{container_of, Agent};
use super::route::ResourcePath;
use super::{header, query, State};
use crate::auth::User;
use crate::error::ApiError;

/// The request headers of a WebSocket upgrade passed on to the agent.
const UPGRADE_HEADERS: [&str; 4] = [
    "Upgrade",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
    "Sec-WebSocket-Protocol",
];

/// The agent's answer headers passed back to the client.
const ANSWER_HEADERS: [&str; 3] = ["Upgrade", "Sec-WebSocket-Accept", "Sec-WebSocket-Protocol"];

/// Whether a request asks for a connection upgrade.
fn is_upgrade(req: &tide::Request<State>) -> bool {
    header(req, "Connection").is_some_and(|c| {
        c.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    }) && header(req, "Upgrade").is_some()
}

/// The value of header `name` in a response head.
fn head_value<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// Serves `exec`, `attach` or `portforward` (the caller routed `pods/NAME/<sub>` here).
pub(super) async fn serve(
    state: &State,
    req: &tide::Request<State>,
    user: &User,
    path: &ResourcePath,
) -> Result<tide::Response, ApiError> {
    let sub = path.subresource.as_deref().unwrap_or_default();
    if let Some(node) = user.node_name() {
        return Err(ApiError::forbidden(format!(
            "pods \"{sub}\" is forbidden: User \"system:node:{node}\" cannot create resource \"pods/{sub}\""
        )));
    }
    use tide::http::Method;
    if req.method() != Method::Get && req.method() != Method::Post {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow {} on pods/{sub}",
            req.method()
        )));
    }
    let (Some(ns), Some(name)) = (&path.namespace, &path.name) else {
        return Err(ApiError::path_not_found());
    };
    let pod: api::core::Pod = state.registry.get(ns, name).await?;
    let target = match sub {
        "portforward" => format!("/portForward/{ns}/{name}"),
        _ => {
            let container = container_of(&pod, name, query(req, "container"))?;
            let kind = if sub == "exec" { "exec" } else { "attach" };
            format!("/{kind}/{ns}/{name}/{container}")
        }
    };
    if !is_upgrade(req) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let doing = match sub {
        "exec" => "exec into",
        "attach" => "attach to",
        _ => "forward ports of",
    };
    if let Some(phase) = pod.status.phase.as_deref() {
        if phase == "Succeeded" || phase == "Failed" {
            return Err(ApiError::bad_request(format!(
                "cannot {doing} a container in a completed pod; current phase is {phase}"
            )));
        }
    }
    let agent = Agent::of(state, &pod, doing).await?;
    let mut request = format!(
        "{} {target}?{} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\n",
        req.method(),
        req.url().query().unwrap_or_default(),
        agent.host()
    );
    for name in UPGRADE_HEADERS {
        if let Some(values) = req.header(name) {
            let joined: Vec<&str> = values.iter().map(|v| v.as_str()).collect();
            request.push_str(&format!("{name}: {}\r\n", joined.join(", ")));
        }
    }
    request.push_str("\r\n");
    let answer = agent.fetch(state, &request).await?;
    if answer.status != 101 {
        let mut body = answer.rest;
        let mut s = answer.stream;
        let _ = s.read_to_end(&mut body).await;
        let message = String::from_utf8_lossy(&body).trim().to_string();
        return Err(match answer.status {
            400 | 404 | 405 => ApiError::bad_request(message),
            status => agent.unreachable(&format!("the agent answered {status}: {message}")),
        });
    }
    let mut response = tide::Response::new(StatusCode::SwitchingProtocols);
    response.insert_header("Connection", "Upgrade");
    for name in ANSWER_HEADERS {
        if let Some(v) = head_value(&answer.head, name) {
            response.insert_header(name, v);
        }
    }
    // async-h1 hands over the connection once the 101 is written; the copy runs on its own.
    let upgraded = AsMut::<tide::http::Response>::as_mut(&mut response)
        .recv_upgrade()
        .await;
    let (early, agent_stream) = (answer.rest, answer.stream);
    smol::spawn(async move {
        if let Some(client) = upgraded.await {
            api::transport::splice(client, agent_stream, &early).await;
        }
    })
    .detach();
    Ok(response)
}
