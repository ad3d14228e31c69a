//! Requests for a group version an extension API server serves (a non-local APIService),
//! proxied to it as kube-aggregator's proxy handler does, after the server authenticated
//! and authorized them (`crate::aggregator`): to a ready endpoint of the APIService's
//! Service, over its TLS client, with the user in the front-proxy headers (the client's
//! `Authorization`, `Impersonate-*` and `X-Remote-*` headers are not passed on), the query
//! re-encoded as Go's `url.Values.Encode` writes it and the body passed; the answer streams
//! back as it comes (watches, logs). An unavailable APIService, or a Service without a
//! ready endpoint, answers 503 `service unavailable` in plain text, as Go's `http.Error`.
//!
//! Limits: request bodies are read whole first (at most [`super::MAX_BODY_BYTES`]), and
//! upgraded connections (exec-like subresources of extension servers) are not proxied.

use std::collections::BTreeMap;

use api::transport::Url;
use tide::http::{Method, StatusCode};

use super::stream::ChannelReader;
use super::{read_body, Peer, SentTarget, State};
use crate::auth::User;
use crate::error::ApiError;
use crate::rbac::Attributes;

/// Response heads larger than this are streamed rather than read whole first.
const READ_WHOLE: u64 = 8 << 20;

/// Headers that belong to one connection (Go's ReverseProxy drops them both ways), and
/// those the proxy sets itself.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "connection"
            | "proxy-connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// Request headers the proxy never passes on: the client's credentials (the backend gets
/// the user from the front-proxy headers), impersonation (already applied) and any
/// front-proxy headers the client made up.
fn stripped(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "authorization" || lower.starts_with("impersonate-") || lower.starts_with("x-remote-")
}

/// What the request asks to do, as kube's RequestInfoFactory reads any path under
/// `/apis/GROUP/VERSION/`: `/apis/GROUP/VERSION` itself is a non-resource request (the
/// discovery), the rest names a resource, `namespaces/NS/...` its namespace, and the
/// method the verb (a GET without a name: list, or watch with `watch=true`; a DELETE
/// without one: deletecollection; a `metadata.name` field selector names the object).
pub(super) fn attributes(method: &Method, path: &str, query: &str) -> Attributes {
    let http_verb = match method {
        Method::Head => "get".to_string(),
        m => m.to_string().to_ascii_lowercase(),
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // ["apis", group, version, parts...]
    if segs.len() < 4 || segs[0] != "apis" {
        return Attributes::non_resource(&http_verb, path);
    }
    let (group, mut parts) = (segs[1], segs[3..].to_vec());
    let mut verb = match method {
        Method::Post => "create",
        Method::Get | Method::Head => "get",
        Method::Put => "update",
        Method::Patch => "patch",
        Method::Delete => "delete",
        _ => "",
    }
    .to_string();
    if matches!(parts[0], "watch" | "proxy") {
        if parts.len() < 2 {
            return Attributes::non_resource(&http_verb, path);
        }
        verb = parts[0].to_string();
        parts.remove(0);
    }
    let mut namespace = String::new();
    if parts[0] == "namespaces" && parts.len() > 1 {
        namespace = parts[1].to_string();
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts.drain(..2);
        }
    }
    let resource = parts.first().copied().unwrap_or("");
    let mut name = parts.get(1).copied().unwrap_or("").to_string();
    let subresource = if verb != "proxy" {
        parts.get(2).copied().unwrap_or("")
    } else {
        ""
    };
    let param = |k: &str| super::query_value(query, k);
    if name.is_empty() && verb == "get" {
        let watch = param("watch")
            .is_some_and(|w| matches!(w.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
        verb = if watch { "watch" } else { "list" }.into();
        if let Some(selector) = param("fieldSelector") {
            let exact = selector
                .strip_prefix("metadata.name==")
                .or_else(|| selector.strip_prefix("metadata.name="))
                .filter(|n| !n.contains(',') && !n.contains('='));
            if let Some(n) = exact.filter(|n| api::rbac::path_segment_name(n).is_ok()) {
                name = n.to_string();
            }
        }
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection".into();
    }
    Attributes::resource(&verb, group, resource, subresource, &namespace, &name)
}

/// Go's `url.QueryEscape`: all but unreserved characters percent-encoded, spaces as `+`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A query as Go's `url.Values.Encode` writes it: keys sorted, each key's values in order.
fn go_query(query: &str) -> String {
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        values
            .entry(k.into_owned())
            .or_default()
            .push(v.into_owned());
    }
    let mut out = String::new();
    for (k, vs) in &values {
        for v in vs {
            if !out.is_empty() {
                out.push('&');
            }
            out.push_str(&query_escape(k));
            out.push('=');
            out.push_str(&query_escape(v));
        }
    }
    out
}

/// Go's `http.Error`: the message and a newline, in plain text.
fn plain_error(code: StatusCode, message: &str) -> tide::Response {
    let mut r = tide::Response::new(code);
    r.set_body(format!("{message}\n"));
    r.insert_header("Content-Type", "text/plain; charset=utf-8");
    r.insert_header("X-Content-Type-Options", "nosniff");
    r
}

/// Proxies the request to the backend of `group`/`version`.
pub(super) async fn serve(
    state: &State,
    req: &mut tide::Request<State>,
    user: &User,
    group: &str,
    version: &str,
) -> Result<tide::Response, ApiError> {
    let Some(backend) = state.aggregator.backend(group, version) else {
        // Gone between routing and now: nothing serves the path.
        return Err(ApiError::path_not_found());
    };
    if !backend.available {
        return Ok(plain_error(
            StatusCode::ServiceUnavailable,
            "service unavailable",
        ));
    }
    let transport = match &backend.transport {
        Ok(t) => t,
        Err(e) => return Ok(plain_error(StatusCode::InternalServerError, e)),
    };
    let s = &backend.service;
    let (host, port) = match crate::webhook::resolve(
        state.aggregator.registry(),
        &s.namespace,
        &s.name,
        s.port(),
    )
    .await
    {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(apiservice = %backend.name, error = %e, "resolving the APIService's service");
            return Ok(plain_error(
                StatusCode::ServiceUnavailable,
                "service unavailable",
            ));
        }
    };
    // The path as the client sent it (still escaped), the query as Go re-encodes it.
    let path = req
        .ext::<SentTarget>()
        .map(|t| t.0.split(['?', '#']).next().unwrap_or("").to_string())
        .filter(|p| p.starts_with('/'))
        .unwrap_or_else(|| req.url().path().to_string());
    let query = go_query(req.url().query().unwrap_or(""));
    let mut target = format!("{}{path}", crate::aggregator::endpoint_origin(&host, port));
    if !query.is_empty() {
        target.push('?');
        target.push_str(&query);
    }
    let url = Url::parse(&target).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let method = req.method();
    let body = read_body(req).await?;
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, values) in req.iter() {
        let name = name.as_str();
        if hop_by_hop(name) || stripped(name) || name.eq_ignore_ascii_case("x-forwarded-for") {
            continue;
        }
        for v in values.iter() {
            headers.push((name.to_string(), v.as_str().to_string()));
        }
    }
    // Go's ReverseProxy: the client's address after any it was forwarded for.
    if let Some(peer) = req.ext::<Peer>() {
        let prior: Vec<String> = req
            .header("X-Forwarded-For")
            .map(|v| v.iter().map(|x| x.as_str().to_string()).collect())
            .unwrap_or_default();
        let mut chain = prior.join(", ");
        if !chain.is_empty() {
            chain.push_str(", ");
        }
        chain.push_str(&peer.0.ip().to_string());
        headers.push(("X-Forwarded-For".into(), chain));
    }
    headers.extend(crate::aggregator::front_proxy_headers(
        &user.name,
        &user.groups,
        &user.extra,
    ));
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut answer = match transport.send(method.as_ref(), &url, &headers, &body).await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(apiservice = %backend.name, error = %e, "proxying");
            return Ok(plain_error(
                StatusCode::ServiceUnavailable,
                &crate::aggregator::go_error(&e),
            ));
        }
    };
    let code = StatusCode::try_from(answer.status).unwrap_or(StatusCode::BadGateway);
    let length = answer.content_length();
    let head = std::mem::take(&mut answer.headers);
    let mut r = tide::Response::new(code);
    match length {
        Some(len) if len <= READ_WHOLE => {
            let bytes = answer
                .bytes(READ_WHOLE as usize)
                .await
                .map_err(|e| ApiError::unavailable(crate::aggregator::go_error(&e)))?;
            r.set_body(bytes);
        }
        _ => {
            // Streamed as it comes (chunked to the client); the task ends, and closes the
            // backend's connection, when either side is done.
            let (tx, rx) = async_channel::bounded::<Vec<u8>>(16);
            smol::spawn(async move {
                while let Ok(Some(data)) = answer.chunk().await {
                    if tx.send(data).await.is_err() {
                        return;
                    }
                }
            })
            .detach();
            r.set_body(tide::Body::from_reader(ChannelReader::new(rx), None));
        }
    }
    // The backend's headers (the body's own Content-Type replaced by the backend's).
    r.remove_header("Content-Type");
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in &head {
        // async-h1's client makes up a Date for an answer without one, as a whole header
        // line (`date: ...\r\n`): that is no value to pass on (the server adds its own).
        if hop_by_hop(name) || value.contains(['\r', '\n']) {
            continue;
        }
        if seen.contains(&name.as_str()) {
            r.append_header(name.as_str(), value.as_str());
        } else {
            r.insert_header(name.as_str(), value.as_str());
            seen.push(name);
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_as_go_encodes_them() {
        assert_eq!(
            go_query("watch=1&labelSelector=app%3Dweb&allowWatchBookmarks=true&x=a+b"),
            "allowWatchBookmarks=true&labelSelector=app%3Dweb&watch=1&x=a+b"
        );
        assert_eq!(go_query(""), "");
        assert_eq!(query_escape("a/b:c~d"), "a%2Fb%3Ac~d");
    }

    #[test]
    fn request_info_as_kube_reads_it() {
        let a = |m: Method, path: &str, q: &str| {
            let a = attributes(&m, path, q);
            match a.resource {
                Some(r) => format!(
                    "{} {}/{}/{} ns={} name={}",
                    a.verb, r.group, r.resource, r.subresource, r.namespace, r.name
                ),
                None => format!("{} {}", a.verb, a.path),
            }
        };
        let base = "/apis/metrics.example.com/v1beta1";
        assert_eq!(a(Method::Get, base, ""), format!("get {base}"));
        assert_eq!(
            a(Method::Get, &format!("{base}/widgets"), ""),
            "list metrics.example.com/widgets/ ns= name="
        );
        assert_eq!(
            a(
                Method::Get,
                &format!("{base}/namespaces/d/widgets"),
                "watch=true"
            ),
            "watch metrics.example.com/widgets/ ns=d name="
        );
        assert_eq!(
            a(
                Method::Get,
                &format!("{base}/namespaces/d/widgets/w1/status"),
                ""
            ),
            "get metrics.example.com/widgets/status ns=d name=w1"
        );
        assert_eq!(
            a(
                Method::Get,
                &format!("{base}/widgets"),
                "fieldSelector=metadata.name%3Dw2"
            ),
            "list metrics.example.com/widgets/ ns= name=w2"
        );
        assert_eq!(
            a(Method::Delete, &format!("{base}/namespaces/d/widgets"), ""),
            "deletecollection metrics.example.com/widgets/ ns=d name="
        );
        assert_eq!(
            a(Method::Post, &format!("{base}/namespaces/d/widgets"), ""),
            "create metrics.example.com/widgets/ ns=d name="
        );
        // A namespace object itself, and its status.
        assert_eq!(
            a(Method::Get, &format!("{base}/namespaces/d"), ""),
            "get metrics.example.com/namespaces/ ns=d name=d"
        );
        assert_eq!(
            a(
                Method::Get,
                &format!("{base}/watch/namespaces/d/widgets"),
                ""
            ),
            "watch metrics.example.com/widgets/ ns=d name="
        );
    }
}
