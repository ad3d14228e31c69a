//! One client connection: each request head is parsed from the connection's buffer
//! ([`http1`], httparse), routed, and forwarded with its body to an endpoint of its route's
//! Service over a pooled keep-alive connection; the answer comes back the same way. Bodies
//! are streamed in both directions, never held whole. A WebSocket (any `Connection: upgrade`)
//! request is sent on a fresh connection; on a 101 both connections are spliced.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncWriteExt, FutureExt};
use smol::Timer;

use super::http1::{self, Buffered, CopyError, Framing, HeadError};
use super::routes::{Route, Upstream};
use super::stream::Stream;
use super::Shared;

/// A connection to an endpoint, with what was read from it.
type Backend = Buffered<Stream>;

/// How long a connect to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Idle connections kept per endpoint (nginx's `keepalive` in bench/ingress.sh is as many):
/// fewer than the client connections in flight closes and reopens endpoint connections.
const POOL_PER_ENDPOINT: usize = 64;

/// Idle keep-alive connections to endpoints.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<Backend>>>,
}

impl Pool {
    fn take(&self, addr: SocketAddr) -> Option<Backend> {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&addr)?
            .pop()
    }

    fn put(&self, addr: SocketAddr, conn: Backend) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(addr).or_default();
        if list.len() < POOL_PER_ENDPOINT {
            list.push(conn);
        }
    }
}

/// The header fields that describe one hop, not the message: never passed on (nor the
/// fields a `Connection` field names). The framing fields are written anew.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Whether a field is not to be passed on: hop-by-hop, or named by a `Connection` field.
fn hop_by_hop(name: &str, headers: &[httparse::Header<'_>]) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("connection"))
            .any(|h| http1::has_token(h.value, name))
}

/// The values of the fields named `name`, in order.
fn values<'a>(
    headers: &'a [httparse::Header<'a>],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

fn any_token(headers: &[httparse::Header<'_>], name: &str, token: &str) -> bool {
    values(headers, name).any(|v| http1::has_token(v, token))
}

/// Whether a message's sender keeps the connection after it: by default from HTTP/1.1 on,
/// only when asked before.
fn persistent(headers: &[httparse::Header<'_>], http10: bool) -> bool {
    if http10 {
        any_token(headers, "connection", "keep-alive")
    } else {
        !any_token(headers, "connection", "close")
    }
}

/// Appends the field `name: value` to a head.
fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    for part in [name, b": ", value, b"\r\n"] {
        out.extend_from_slice(part);
    }
}

/// Writes `bytes` and flushes them (a head the client is to see now).
async fn write_now<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}

/// How long a client may take to send a request's head, counted from the connection's start
/// or the end of the previous answer (nginx's client_header_timeout).
const HEAD_TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline for a request's head: one timer per connection, registered with the reactor
/// the first time a head is awaited and moved only when it fires early (a timer per request
/// cost a reactor wake-up each: async-io notifies the reactor of every new timer).
struct HeadDeadline {
    timer: Timer,
    /// When the head now awaited began to be awaited.
    since: Instant,
}

impl HeadDeadline {
    fn new() -> HeadDeadline {
        let now = Instant::now();
        HeadDeadline {
            timer: Timer::at(now + HEAD_TIMEOUT),
            since: now,
        }
    }

    /// A head is awaited from now.
    fn restart(&mut self) {
        self.since = Instant::now();
    }

    /// Resolves when the head awaited since the last `restart` is overdue.
    async fn expired(&mut self) {
        loop {
            (&mut self.timer).await;
            let due = self.since + HEAD_TIMEOUT;
            if Instant::now() >= due {
                return;
            }
            self.timer.set_at(due);
        }
    }
}

/// What the proxy makes of a request head.
struct Prepared {
    /// How the request's body is framed (`Length(0)`: none).
    framing: Framing,
    /// The client keeps the connection for another request.
    keep_alive: bool,
    /// The client speaks HTTP/1.0: no chunked answers, and keep-alive only when asked.
    http10: bool,
    /// A HEAD request: its answer has no body whatever its fields say.
    head_request: bool,
    /// `Connection: upgrade` with an `Upgrade` field (WebSocket).
    upgrade: bool,
    /// `Expect: 100-continue`: the client waits for a 100 before it sends the body.
    expect_continue: bool,
    action: Action,
}

enum Action {
    /// Forward the head the proxy wrote to the upstream.
    Forward(Arc<Upstream>),
    /// Answer with this status and text.
    Answer(u16, String),
}

/// The host a request is for: its `Host` field, or the authority of an absolute-form target,
/// without the port.
fn request_host<'a>(headers: &'a [httparse::Header<'a>], target: &'a str) -> (&'a str, &'a str) {
    let field = values(headers, "host")
        .last()
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
        .or_else(|| {
            let rest = target.split_once("://")?.1;
            Some(&rest[..rest.find('/').unwrap_or(rest.len())])
        })
        .unwrap_or_default();
    // `host:port` or `[v6]:port` -> the host alone.
    let host = match field.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => field,
    }
    .trim_start_matches('[')
    .trim_end_matches(']');
    (field, host)
}

/// The origin-form of a request target (an absolute-form target loses its scheme and
/// authority) and its path (without the query).
fn origin_form(target: &str) -> (&str, &str) {
    let origin = match target.split_once("://") {
        Some((_, rest)) if !target.starts_with('/') => match rest.find('/') {
            Some(i) => &rest[i..],
            None => "/",
        },
        _ => target,
    };
    let path = &origin[..origin.find(['?', '#']).unwrap_or(origin.len())];
    (origin, path)
}

/// Reads a request head: routes it, and writes the head to send to the endpoint into
/// `head`: the client's, less its hop-by-hop fields, with `X-Forwarded-*` and the body's
/// framing.
fn prepare(
    req: &httparse::Request<'_, '_>,
    shared: &Shared,
    peer: SocketAddr,
    https: bool,
    head: &mut Vec<u8>,
) -> Prepared {
    use std::io::Write as _;
    let headers: &[httparse::Header<'_>] = req.headers;
    let method = req.method.unwrap_or("GET");
    let target = req.path.unwrap_or("/");
    let http10 = req.version == Some(0);
    let keep_alive = persistent(headers, http10);
    let upgrade_field = values(headers, "upgrade").last();
    let upgrade = upgrade_field.is_some() && any_token(headers, "connection", "upgrade");
    let mut prepared = Prepared {
        framing: Framing::Length(0),
        keep_alive,
        http10,
        head_request: method == "HEAD",
        upgrade,
        expect_continue: any_token(headers, "expect", "100-continue"),
        action: Action::Answer(0, String::new()),
    };
    match http1::body_framing(headers) {
        Ok(f) => prepared.framing = f.unwrap_or(Framing::Length(0)),
        Err(why) => {
            // The body's end is unknown: nothing after it can be read.
            prepared.keep_alive = false;
            prepared.action = Action::Answer(400, format!("the request has {why}"));
            return prepared;
        }
    }
    let (host_field, host) = request_host(headers, target);
    let (origin, path) = origin_form(target);
    let upstream = match shared.table().route(host, path) {
        Route::Upstream(u) => u.clone(),
        Route::NotFound => {
            prepared.action = Action::Answer(404, "no Ingress rule for this host and path".into());
            return prepared;
        }
    };
    if upstream.endpoints.is_empty() {
        prepared.action = Action::Answer(503, format!("no ready endpoint for {}", upstream.name));
        return prepared;
    }

    head.clear();
    for part in [method, " ", origin, " HTTP/1.1\r\n"] {
        head.extend_from_slice(part.as_bytes());
    }
    let mut forwarded_for = Vec::new();
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            forwarded_for.extend_from_slice(h.value);
            forwarded_for.extend_from_slice(b", ");
            continue;
        }
        // The proxy answers the client's `Expect` itself; the forwarded ones are this hop's.
        if name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("x-forwarded-proto")
            || name.eq_ignore_ascii_case("x-forwarded-host")
            || hop_by_hop(name, headers)
        {
            continue;
        }
        put_field(head, name.as_bytes(), h.value);
    }
    head.extend_from_slice(b"x-forwarded-for: ");
    head.extend_from_slice(&forwarded_for);
    let _ = write!(head, "{}\r\n", peer.ip());
    head.extend_from_slice(if https {
        b"x-forwarded-proto: https\r\n"
    } else {
        b"x-forwarded-proto: http\r\n"
    });
    put_field(head, b"x-forwarded-host", host_field.as_bytes());
    if let (true, Some(u)) = (upgrade, upgrade_field) {
        put_field(head, b"connection", b"upgrade");
        put_field(head, b"upgrade", u);
    }
    match prepared.framing {
        Framing::Length(0) => {}
        Framing::Length(n) => {
            let _ = write!(head, "content-length: {n}\r\n");
        }
        _ => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    head.extend_from_slice(b"\r\n");
    prepared.action = Action::Forward(upstream);
    prepared
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        404 => "Not Found",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Writes a short plain-text answer of the proxy itself.
async fn answer<W: AsyncWrite + Unpin>(
    w: &mut W,
    status: u16,
    text: &str,
    close: bool,
) -> std::io::Result<()> {
    let reason = reason(status);
    let body = format!("{status} {reason}: {text}\n");
    let msg = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n{}\r\n{body}",
        body.len(),
        if close { "connection: close\r\n" } else { "" },
    );
    write_now(w, msg.as_bytes()).await
}

/// What comes after an exchange.
enum Next {
    /// The client's connection stays open for its next request (if it wants one).
    Open,
    /// The client's connection ends (its answer was delimited by the end, or is broken).
    Close,
    /// A 101 was passed on: the connections are spliced.
    Upgrade(Backend),
}

/// Serves one client connection until it closes; a WebSocket upgrade then splices it to its
/// endpoint's connection.
pub async fn serve<IO>(io: IO, shared: Arc<Shared>, peer: SocketAddr, https: bool)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = Buffered::new(io);
    match serve_requests(&mut client, &shared, peer, https).await {
        Ok(Some(backend)) => {
            let (client, early_up) = client.into_parts();
            let (mut backend, early_down) = backend.into_parts();
            if backend.write_all(&early_up).await.is_ok() {
                api::transport::splice(client, backend, &early_down).await;
            }
        }
        Ok(None) => {
            // The end after the last answer: a FIN after what was written (TLS sends its
            // close_notify first).
            let _ = client.io.close().await;
        }
        Err(e) => tracing::debug!(%peer, error = %e, "ingress connection ended with an error"),
    }
}

/// Serves requests until the connection ends; answers the endpoint connection of an upgrade.
async fn serve_requests<IO>(
    client: &mut Buffered<IO>,
    shared: &Shared,
    peer: SocketAddr,
    https: bool,
) -> std::io::Result<Option<Backend>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut deadline = HeadDeadline::new();
    let mut head = Vec::with_capacity(1024);
    let mut out = Vec::with_capacity(1024);
    loop {
        deadline.restart();
        let read = http1::read_head(client, |buf| {
            let mut fields = [httparse::EMPTY_HEADER; http1::MAX_HEADERS];
            Ok(http1::parse_request(buf, &mut fields)?
                .map(|(req, len)| (prepare(&req, shared, peer, https, &mut head), len)))
        })
        .or(async {
            deadline.expired().await;
            Err(HeadError::Closed)
        })
        .await;
        let req = match read {
            Ok(req) => req,
            Err(HeadError::Closed) => return Ok(None),
            Err(HeadError::Io(e)) => return Err(e),
            Err(HeadError::TooLarge) => {
                answer(&mut client.io, 431, "the request's head is too large", true).await?;
                return Ok(None);
            }
            Err(HeadError::Malformed(e)) => {
                answer(
                    &mut client.io,
                    400,
                    &format!("malformed request: {e}"),
                    true,
                )
                .await?;
                return Ok(None);
            }
        };
        let next = match &req.action {
            Action::Answer(status, text) => {
                // A client that waits for a 100 never sends the body: the connection ends.
                let keep = req.keep_alive && !req.expect_continue;
                if keep {
                    // The next request follows the body.
                    let mut none = Vec::new();
                    if let Err(e) =
                        http1::send(client, &mut http1::Discard, &mut none, req.framing, false)
                            .await
                    {
                        return Err(std::io::Error::other(e.to_string()));
                    }
                }
                answer(&mut client.io, *status, text, !keep).await?;
                if keep {
                    Next::Open
                } else {
                    Next::Close
                }
            }
            Action::Forward(upstream) => {
                forward(client, shared, upstream, &req, &head, &mut out).await?
            }
        };
        match next {
            Next::Open if req.keep_alive => {}
            Next::Open | Next::Close => return Ok(None),
            Next::Upgrade(backend) => return Ok(Some(backend)),
        }
    }
}

/// Opens a connection to one of the upstream's endpoints, trying them in round-robin
/// order; a pooled one is preferred. Answers the endpoint and whether the connection is new.
async fn connect(
    shared: &Shared,
    upstream: &Upstream,
    pooled: bool,
) -> Option<(SocketAddr, Backend, bool)> {
    let order: Vec<SocketAddr> = upstream.order().collect();
    if pooled {
        for &addr in &order {
            while let Some(c) = shared.pool.take(addr) {
                if still_open(&c) {
                    return Some((addr, c, false));
                }
            }
        }
    }
    for addr in order {
        let attempt = async { Stream::connect(addr).await.map(Some) }.or(async {
            Timer::after(CONNECT_TIMEOUT).await;
            Ok(None)
        });
        match attempt.await {
            Ok(Some(s)) => return Some((addr, Buffered::new(s), true)),
            Ok(None) => {
                tracing::debug!(%addr, upstream = %upstream.name, "connect timed out; trying the next endpoint")
            }
            Err(e) => {
                tracing::debug!(%addr, upstream = %upstream.name, error = %e, "connect failed; trying the next endpoint")
            }
        }
    }
    None
}

/// Whether an idle connection is still usable: a peek that would block means the endpoint
/// has neither closed it nor sent anything unasked (either makes it unusable). Without
/// asking the reactor (a read through it would register the connection for nothing).
fn still_open(conn: &Backend) -> bool {
    if !conn.pending().is_empty() {
        return false;
    }
    let mut probe = [0u8; 1];
    matches!(conn.io.get_ref().peek(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// What an endpoint's answer head says.
struct Answer {
    status: u16,
    framing: Framing,
    /// The endpoint keeps the connection for another request.
    endpoint_keeps: bool,
    /// Only the data of a chunked body goes to the client (HTTP/1.0).
    dechunk: bool,
    /// The client's connection ends after this answer.
    client_closes: bool,
}

/// Reads an answer head from `fields` and writes the head for the client into `out`.
fn prepare_answer(res: &httparse::Response<'_, '_>, req: &Prepared, out: &mut Vec<u8>) -> Answer {
    use std::io::Write as _;
    let headers: &[httparse::Header<'_>] = res.headers;
    let status = res.code.unwrap_or(502);
    let http10 = res.version == Some(0);
    let endpoint_keeps = persistent(headers, http10);
    let no_body = req.head_request || status < 200 || status == 204 || status == 304;
    // A body with unusable framing fields is read to the end of the connection.
    let framing = if no_body {
        Framing::Length(0)
    } else {
        http1::body_framing(headers)
            .ok()
            .flatten()
            .unwrap_or(Framing::Close)
    };
    let dechunk = framing == Framing::Chunked && req.http10;
    let upgraded = status == 101;
    let client_closes = !req.keep_alive || framing == Framing::Close || dechunk;
    out.clear();
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", res.reason.unwrap_or(""));
    for h in headers {
        // A body-less answer keeps the length of what a GET would have had.
        let keep_length = no_body && h.name.eq_ignore_ascii_case("content-length");
        if !keep_length && hop_by_hop(h.name, headers) {
            continue;
        }
        put_field(out, h.name.as_bytes(), h.value);
    }
    if upgraded {
        if let Some(u) = values(headers, "upgrade").last() {
            put_field(out, b"connection", b"upgrade");
            put_field(out, b"upgrade", u);
        }
    } else {
        match framing {
            Framing::Length(n) if !no_body => {
                let _ = write!(out, "content-length: {n}\r\n");
            }
            Framing::Chunked if !dechunk => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n")
            }
            _ => {}
        }
        if client_closes {
            out.extend_from_slice(b"connection: close\r\n");
        } else if req.http10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
    Answer {
        status,
        framing,
        endpoint_keeps: endpoint_keeps && framing != Framing::Close && !upgraded,
        dechunk,
        client_closes,
    }
}

/// Sends a request to an endpoint of `upstream` and its answer back to the client.
async fn forward<IO>(
    client: &mut Buffered<IO>,
    shared: &Shared,
    upstream: &Upstream,
    req: &Prepared,
    head: &[u8],
    out: &mut Vec<u8>,
) -> std::io::Result<Next>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    // A request without a body can be sent again if a pooled connection turns out closed.
    let replayable = req.framing == Framing::Length(0);
    let after_failure = if replayable { Next::Open } else { Next::Close };
    // Made only when needed (not on the way of every request).
    let unanswered = || format!("no endpoint of {} answered", upstream.name);
    let mut pooled = !req.upgrade;
    let mut continued = false;
    loop {
        let Some((addr, mut backend, fresh)) = connect(shared, upstream, pooled).await else {
            answer(&mut client.io, 502, &unanswered(), !replayable).await?;
            return Ok(after_failure);
        };
        if req.expect_continue && !continued && !replayable {
            write_now(&mut client.io, b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            continued = true;
        }
        out.clear();
        out.extend_from_slice(head);
        match http1::send(client, &mut backend.io, out, req.framing, false).await {
            Ok(()) => {}
            Err(CopyError::Write(e)) if !fresh && replayable => {
                tracing::debug!(%addr, error = %e, "pooled connection closed; reconnecting");
                pooled = false;
                continue;
            }
            Err(CopyError::Write(e)) => {
                tracing::debug!(%addr, upstream = %upstream.name, error = %e, "forwarding failed");
                answer(&mut client.io, 502, &unanswered(), !replayable).await?;
                return Ok(after_failure);
            }
            Err(CopyError::Read(e)) => return Err(e),
        }
        // The endpoint's answer takes a moment: other connections' work goes first, after
        // which the answer is usually there to read without asking the reactor (each wait
        // through it costs an `epoll_ctl` and a turn of the reactor).
        futures_lite::future::yield_now().await;
        backend.io.read_first();
        // The answer, after any interim (1xx) ones, which 1.1 clients get as well.
        let res = loop {
            let read = http1::read_head(&mut backend, |buf| {
                let mut fields = [httparse::EMPTY_HEADER; http1::MAX_HEADERS];
                Ok(http1::parse_response(buf, &mut fields)?
                    .map(|(res, len)| (prepare_answer(&res, req, out), len)))
            })
            .await;
            match read {
                Ok(a) if a.status < 200 && a.status != 101 => {
                    if !req.http10 {
                        write_now(&mut client.io, out).await?;
                    }
                }
                other => break other,
            }
        };
        let res = match res {
            Ok(res) if res.status == 101 && !req.upgrade => {
                tracing::debug!(%addr, "an upgrade nobody asked for");
                answer(
                    &mut client.io,
                    502,
                    "the endpoint switched protocols unasked",
                    true,
                )
                .await?;
                return Ok(Next::Close);
            }
            Ok(res) => res,
            Err(e) if !fresh && replayable && matches!(e, HeadError::Closed | HeadError::Io(_)) => {
                tracing::debug!(%addr, error = %e, "pooled connection closed; reconnecting");
                pooled = false;
                continue;
            }
            Err(e) => {
                tracing::debug!(%addr, upstream = %upstream.name, error = %e, "reading the answer failed");
                answer(&mut client.io, 502, &unanswered(), false).await?;
                return Ok(Next::Open);
            }
        };
        if res.status == 101 {
            write_now(&mut client.io, out).await?;
            return Ok(Next::Upgrade(backend));
        }
        match http1::send(&mut backend, &mut client.io, out, res.framing, res.dechunk).await {
            Ok(()) => {}
            // The head is out: the client can only learn of it by the connection's end.
            Err(CopyError::Read(e)) => {
                tracing::debug!(%addr, error = %e, "the endpoint's answer broke off");
                return Ok(Next::Close);
            }
            Err(CopyError::Write(e)) => return Err(e),
        }
        if res.endpoint_keeps && backend.pending().is_empty() {
            shared.pool.put(addr, backend);
        }
        return Ok(if res.client_closes {
            Next::Close
        } else {
            Next::Open
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead as _, Read as _, Write as _};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers every request on a connection with a 3-byte Content-Length body; counts the
    /// connections it accepts.
    fn endpoint() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    let mut chunk = [0u8; 1024];
                    loop {
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
                            if conn.write_all(reply).is_err() {
                                return;
                            }
                        }
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// A proxy on a real socket (the agent's accept loop) that sends everything to `endpoint`.
    fn proxy_to(endpoint: SocketAddr) -> SocketAddr {
        let shared = Arc::new(Shared::new(async_channel::unbounded().0));
        *shared.table.write().expect("table") =
            Arc::new(super::super::routes::Table::everything_to(Upstream::new(
                "default/web:80".into(),
                vec![endpoint],
            )));
        let listener =
            smol::Async::<std::net::TcpListener>::bind(([127, 0, 0, 1], 0)).expect("bind");
        let addr = listener.get_ref().local_addr().expect("addr");
        smol::spawn(super::super::accept_loop(listener, shared, None)).detach();
        addr
    }

    /// Reads one answer (a Content-Length body) from `r`: its head, lower-cased, and body.
    fn read_answer(r: &mut impl std::io::BufRead) -> (String, Vec<u8>) {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            assert!(
                r.read_line(&mut line).expect("head") > 0,
                "the end within a head: {head:?}"
            );
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .expect("a Content-Length")
            .trim()
            .parse()
            .expect("length");
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).expect("body");
        (head, body)
    }

    /// A request with `Connection: close` gets its whole answer, which says
    /// `Connection: close`, then the end of the connection (not a reset). wrk counted read
    /// errors through the proxy until the answer said so: it sent its next request on the
    /// connection and read the end.
    #[test]
    fn connection_close_is_answered_whole_with_connection_close_then_the_end() {
        let (endpoint, _) = endpoint();
        let proxy = proxy_to(endpoint);
        for request in [
            "GET / HTTP/1.1\r\nHost: web.example\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: web.example\r\nConnection: Close\r\n\r\n",
            "POST /b HTTP/1.1\r\nHost: web.example\r\nContent-Length: 4\r\nConnection: keep-alive, close\r\n\r\nbody",
        ] {
            let mut s = std::net::TcpStream::connect(proxy).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            s.write_all(request.as_bytes()).expect("request");
            let mut all = Vec::new();
            // Ends at the end of the connection: an error here is a reset or no end.
            s.read_to_end(&mut all).expect("the whole answer, then the end");
            let mut r = std::io::BufReader::new(&all[..]);
            let (head, body) = read_answer(&mut r);
            assert!(head.starts_with("http/1.1 200 "), "{head}");
            assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
            assert_eq!(body, b"ok\n");
            assert!(r.fill_buf().expect("rest").is_empty(), "bytes after the answer");
        }
    }

    /// Without `Connection: close` the connection stays open for the next request, and the
    /// answers do not say `Connection: close`.
    #[test]
    fn keep_alive_requests_share_a_connection() {
        let (endpoint, _) = endpoint();
        let proxy = proxy_to(endpoint);
        let s = std::net::TcpStream::connect(proxy).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut r = std::io::BufReader::new(s.try_clone().expect("clone"));
        let mut w = s;
        for i in 0..3 {
            write!(w, "GET /{i} HTTP/1.1\r\nHost: web.example\r\n\r\n").expect("request");
            let (head, body) = read_answer(&mut r);
            assert!(head.starts_with("http/1.1 200 "), "{head}");
            assert!(!head.contains("connection:"), "{head}");
            assert_eq!(body, b"ok\n");
        }
    }

    /// Requests forwarded one after another, over new client connections, share one
    /// endpoint connection, given back to the pool once the answer was passed on. (The bug
    /// that made every request through the proxy open a new endpoint connection took
    /// bench/ingress.sh from 25,300 to 1,760 requests/s.)
    #[test]
    fn forwarded_answers_give_their_connection_back() {
        let (endpoint, accepted) = endpoint();
        let proxy = proxy_to(endpoint);
        for i in 0..3 {
            let s = std::net::TcpStream::connect(proxy).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut r = std::io::BufReader::new(s.try_clone().expect("clone"));
            let mut w = s;
            write!(w, "GET /{i} HTTP/1.1\r\nHost: web.example\r\n\r\n").expect("request");
            let (head, body) = read_answer(&mut r);
            assert!(head.starts_with("http/1.1 200 "), "{head}");
            assert_eq!(body, b"ok\n");
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one endpoint connection"
        );
    }

    /// An endpoint that records what it is sent and, once what it has seen ends with
    /// `until`, writes `reply` and closes.
    fn scripted(until: &'static [u8], reply: &'static [u8]) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            let mut chunk = [0u8; 4096];
            loop {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let mut seen = record.lock().expect("seen");
                        seen.extend_from_slice(&chunk[..n]);
                        if seen.ends_with(until) {
                            break;
                        }
                    }
                }
            }
            let _ = conn.write_all(reply);
        });
        (addr, seen)
    }

    /// Sends `request` through a proxy to a scripted endpoint; answers everything the
    /// client got until the proxy closed the connection, and what the endpoint got.
    fn exchange(request: &[u8], until: &'static [u8], reply: &'static [u8]) -> (String, String) {
        let (endpoint, seen) = scripted(until, reply);
        let proxy = proxy_to(endpoint);
        let mut s = std::net::TcpStream::connect(proxy).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(request).expect("request");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("the answer, then the end");
        let seen = seen.lock().expect("seen").clone();
        (
            String::from_utf8_lossy(&got).into_owned(),
            String::from_utf8_lossy(&seen).into_owned(),
        )
    }

    /// A chunked request body and a chunked answer pass through as they are, with the
    /// forwarding fields added and the hop-by-hop ones (and those `Connection` names) gone.
    #[test]
    fn chunked_bodies_pass_through_both_ways() {
        let (got, seen) = exchange(
            b"POST /up?x=1 HTTP/1.1\r\nHost: web.example:8080\r\nTransfer-Encoding: chunked\r\n\
              Connection: close, x-hop\r\nX-Hop: 1\r\nX-Forwarded-For: 10.1.1.1\r\nX-Kept: yes\r\n\r\n\
              4\r\nwiki\r\n0\r\n\r\n",
            b"0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-From: endpoint\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        );
        let (head, body) = seen.split_once("\r\n\r\n").expect("a head");
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("post /up?x=1 http/1.1\r\n"), "{head}");
        assert!(head.contains("\r\nhost: web.example:8080"), "{head}");
        assert!(head.contains("\r\nx-kept: yes"), "{head}");
        assert!(
            head.contains("\r\nx-forwarded-for: 10.1.1.1, 127.0.0.1"),
            "{head}"
        );
        assert!(head.contains("\r\nx-forwarded-proto: http\r\n"), "{head}");
        assert!(
            head.contains("\r\nx-forwarded-host: web.example:8080"),
            "{head}"
        );
        assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
        assert!(
            !head.contains("x-hop") && !head.contains("connection"),
            "{head}"
        );
        assert_eq!(body, "4\r\nwiki\r\n0\r\n\r\n");
        let lower = got.to_ascii_lowercase();
        assert!(lower.starts_with("http/1.1 200 ok\r\n"), "{got}");
        assert!(lower.contains("\r\nx-from: endpoint\r\n"), "{got}");
        assert!(lower.contains("\r\nconnection: close\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{got}");
    }

    /// An HTTP/1.0 client cannot read chunks: it gets the data, delimited by the end.
    #[test]
    fn http10_clients_get_chunked_answers_as_plain_bodies() {
        let (got, _) = exchange(
            b"GET / HTTP/1.0\r\nHost: web.example\r\nConnection: keep-alive\r\n\r\n",
            b"\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        );
        let lower = got.to_ascii_lowercase();
        assert!(!lower.contains("transfer-encoding"), "{got}");
        assert!(lower.contains("\r\nconnection: close\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nhello world"), "{got}");
    }

    /// A HEAD answer keeps its Content-Length and has no body; the connection goes on.
    #[test]
    fn head_answers_have_no_body() {
        let (got, _) = exchange(
            b"HEAD / HTTP/1.1\r\nHost: web.example\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
            b"\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        );
        let (first, second) = got.split_once("\r\n\r\n").expect("the first answer");
        assert!(
            first
                .to_ascii_lowercase()
                .contains("\r\ncontent-length: 10"),
            "{got}"
        );
        // The next request was read right after the first answer (no body between); the
        // proxy refuses it itself.
        assert!(second.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{got}");
    }

    /// The proxy answers a client waiting for `100 Continue` itself, before the body.
    #[test]
    fn expect_continue_is_answered_before_the_body() {
        let (endpoint, seen) = scripted(
            b"data",
            b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
        );
        let proxy = proxy_to(endpoint);
        let s = std::net::TcpStream::connect(proxy).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut r = std::io::BufReader::new(s.try_clone().expect("clone"));
        let mut w = s;
        w.write_all(
            b"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
        )
        .expect("head");
        let mut line = String::new();
        r.read_line(&mut line).expect("interim");
        assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
        r.read_line(&mut line).expect("its end");
        w.write_all(b"data").expect("body");
        let (head, body) = read_answer(&mut r);
        assert!(head.starts_with("http/1.1 201 "), "{head}");
        assert!(body.is_empty());
        let seen = String::from_utf8_lossy(&seen.lock().expect("seen")).to_ascii_lowercase();
        assert!(!seen.contains("expect"), "{seen}");
        assert!(seen.ends_with("\r\n\r\ndata"), "{seen}");
    }

    /// What is not HTTP, is too large, or frames its body ambiguously gets a 4xx and the
    /// end of the connection; the endpoint never hears of it.
    #[test]
    fn bad_requests_are_refused() {
        let (endpoint, accepted) = endpoint();
        let proxy = proxy_to(endpoint);
        let huge = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
            "x".repeat(70_000)
        );
        let smuggled = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        for (request, status) in [
            ("NOT HTTP AT ALL\r\n\r\n", "400"),
            (huge.as_str(), "431"),
            (smuggled, "400"),
        ] {
            let mut s = std::net::TcpStream::connect(proxy).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            // The proxy may answer (and close) before it has read all of a huge head.
            let _ = s.write_all(request.as_bytes());
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            let got = String::from_utf8_lossy(&got);
            assert!(got.starts_with(&format!("HTTP/1.1 {status} ")), "{got}");
            assert!(
                got.to_ascii_lowercase()
                    .contains("\r\nconnection: close\r\n"),
                "{got}"
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 0);
    }
}
