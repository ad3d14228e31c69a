//! One client connection: async-h1 reads its requests (keep-alive) and each is forwarded to
//! an endpoint of its route's Service over a pooled keep-alive connection, with the bodies
//! streamed both ways. A WebSocket (any `Connection: upgrade`) request is sent on a fresh
//! connection; on a 101 both connections are spliced.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncWriteExt, FutureExt};
use http_types::{Body, Method, Request, Response, StatusCode};
use smol::Timer;

use super::routes::{Route, Upstream};
use super::stream::Stream;
use super::Shared;

/// A backend connection: async-h1 takes it by value, the pool keeps another handle.
type Conn = async_dup::Arc<async_dup::Mutex<Backend>>;

/// The end of an HTTP head.
const HEAD_END: &[u8] = b"\r\n\r\n";

/// A TCP connection to an endpoint that, while an answer's head is awaited, hands out bytes
/// only up to the end of that head. async-h1's client reads the head through a buffer of its
/// own, which would otherwise swallow what follows it: the body of an answer delimited by
/// the end of the connection (which async-h1 does not read, so the proxy streams it), or
/// the first bytes after a 101. The head itself is parsed by async-h1 (httparse); this only
/// finds where it ends.
pub struct Backend {
    stream: Stream,
    buf: Box<[u8]>,
    /// Bytes read from `stream` and not handed out: `buf[start..end]`.
    start: usize,
    end: usize,
    /// An answer's head is being read; how many bytes of [`HEAD_END`] were seen last.
    in_head: bool,
    matched: usize,
}

impl Backend {
    fn new(stream: Stream) -> Backend {
        Backend {
            stream,
            buf: vec![0u8; 16 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            in_head: false,
            matched: 0,
        }
    }

    /// The next bytes read are the head of an answer.
    fn expect_head(&mut self) {
        self.in_head = true;
        self.matched = 0;
    }
}

impl AsyncRead for Backend {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.start == this.end {
            if !this.in_head {
                return Pin::new(&mut this.stream).poll_read(cx, out);
            }
            let n = std::task::ready!(Pin::new(&mut this.stream).poll_read(cx, &mut this.buf))?;
            this.start = 0;
            this.end = n;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
        }
        let mut take = (this.end - this.start).min(out.len());
        if this.in_head {
            for (i, &b) in this.buf[this.start..this.start + take].iter().enumerate() {
                this.matched = if b == HEAD_END[this.matched] {
                    this.matched + 1
                } else if b == HEAD_END[0] {
                    1
                } else {
                    0
                };
                if this.matched == HEAD_END.len() {
                    this.in_head = false;
                    take = i + 1;
                    break;
                }
            }
        }
        out[..take].copy_from_slice(&this.buf[this.start..this.start + take]);
        this.start += take;
        Poll::Ready(Ok(take))
    }
}

impl AsyncWrite for Backend {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_close(cx)
    }
}

/// How long a connect to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Idle connections kept per endpoint (nginx's `keepalive` in bench/ingress.sh is as many):
/// fewer than the client connections in flight closes and reopens endpoint connections.
const POOL_PER_ENDPOINT: usize = 64;

/// Idle keep-alive connections to endpoints.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<Conn>>>,
}

impl Pool {
    fn take(&self, addr: SocketAddr) -> Option<Conn> {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&addr)?
            .pop()
    }

    fn put(&self, addr: SocketAddr, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(addr).or_default();
        if list.len() < POOL_PER_ENDPOINT {
            list.push(conn);
        }
    }
}

/// The headers that describe one hop, not the message: never forwarded.
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

fn is_upgrade(req: &Request) -> bool {
    req.header("upgrade").is_some() && connection_has(req.header("connection"), "upgrade")
}

/// A short plain-text answer of the proxy itself.
fn answer(status: StatusCode, text: &str) -> Response {
    let mut r = Response::new(status);
    r.insert_header("content-type", "text/plain; charset=utf-8");
    r.set_body(format!(
        "{} {}: {text}\n",
        u16::from(status),
        status.canonical_reason()
    ));
    r
}

/// How long a client may take to send a request's head, counted from the connection's start
/// or the end of the previous answer (async-h1's default; nginx's client_header_timeout).
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

/// Whether a `Connection` header holds `token` (any case, among others).
fn connection_has(values: Option<&http_types::headers::HeaderValues>, token: &str) -> bool {
    values.is_some_and(|c| {
        c.iter()
            .flat_map(|v| v.as_str().split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    })
}

/// Serves one client connection until it closes: async-h1 reads each request head and
/// writes each answer (keep-alive). Unlike `async_h1::accept`, an answer to a request with
/// `Connection: close` says so before the connection is closed (clients would otherwise send
/// their next request on it and read its end), the answer's head and what its body has ready
/// go out in one write, and the head deadline uses one timer per connection.
pub async fn serve<IO>(io: IO, shared: Arc<Shared>, peer: SocketAddr, https: bool)
where
    IO: AsyncRead + AsyncWrite + Clone + Send + Sync + Unpin + 'static,
{
    if let Err(e) = serve_requests(io, &shared, peer, https).await {
        tracing::debug!(%peer, error = %e, "ingress connection ended with an error");
    }
}

async fn serve_requests<IO>(
    mut io: IO,
    shared: &Shared,
    peer: SocketAddr,
    https: bool,
) -> http_types::Result<()>
where
    IO: AsyncRead + AsyncWrite + Clone + Send + Sync + Unpin + 'static,
{
    let mut deadline = HeadDeadline::new();
    loop {
        deadline.restart();
        let decoded = async_h1::server::decode(io.clone())
            .or(async {
                deadline.expired().await;
                Ok(None)
            })
            .await?;
        // The end of the connection, or no head in time.
        let Some((req, mut body)) = decoded else {
            return Ok(());
        };
        let close = connection_has(req.header("connection"), "close");
        let upgrade_requested = is_upgrade(&req);
        let method = req.method();

        let mut res = handle(shared, req, peer, https).await;

        if close {
            res.insert_header("connection", "close");
        }
        let upgrade = (upgrade_requested
            && res.status() == StatusCode::SwitchingProtocols
            && res.has_upgrade())
        .then(|| res.send_upgrade());
        send(&mut async_h1::server::Encoder::new(res, method), &mut io).await?;
        if let Some(upgrade) = upgrade {
            upgrade
                .send(http_types::upgrade::Connection::new(io.clone()))
                .await;
            return Ok(());
        }
        // What the handler left of the request's body: the next request follows it, and a
        // close with unread bytes would be a reset that can destroy the answer in flight.
        futures_lite::io::copy(&mut body, &mut futures_lite::io::sink()).await?;
        if close {
            // The end after the answer: dropping the last handle closes a TCP connection
            // (a FIN after what was written); TLS first sends its close_notify.
            if https {
                io.close().await?;
            }
            return Ok(());
        }
    }
}

/// The largest write [`send`] makes.
const SEND_CHUNK: usize = 16 * 1024;
/// [`send`]'s buffers kept for the next messages (a new zeroed buffer for each message
/// showed in profiles).
static SEND_BUFFERS: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());
const SEND_BUFFERS_KEPT: usize = 64;

/// A buffer of [`SEND_BUFFERS`], given back when dropped.
struct SendBuffer(Box<[u8]>);

impl SendBuffer {
    fn take() -> SendBuffer {
        let kept = SEND_BUFFERS.lock().unwrap_or_else(|e| e.into_inner()).pop();
        SendBuffer(kept.unwrap_or_else(|| vec![0u8; SEND_CHUNK].into_boxed_slice()))
    }
}

impl Drop for SendBuffer {
    fn drop(&mut self) {
        let mut kept = SEND_BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < SEND_BUFFERS_KEPT {
            kept.push(std::mem::take(&mut self.0));
        }
    }
}

/// Copies `src` (an encoder of async-h1: a message's head, then its body) to `dst` with as
/// few writes as it can: everything `src` has ready, up to [`SEND_CHUNK`], goes in one write,
/// so a head and a body at hand leave in one segment (async-h1's own copy wrote the head and
/// the body apart). Flushes at the end.
async fn send<R, W>(src: &mut R, dst: &mut W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = SendBuffer::take();
    let buf = &mut buffer.0;
    loop {
        let mut len = 0;
        let mut end = false;
        futures_lite::future::poll_fn(|cx| loop {
            if len == buf.len() {
                return Poll::Ready(Ok(()));
            }
            match Pin::new(&mut *src).poll_read(cx, &mut buf[len..]) {
                Poll::Ready(Ok(0)) => {
                    end = true;
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(n)) => len += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending if len > 0 => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        })
        .await?;
        dst.write_all(&buf[..len]).await?;
        if end {
            return dst.flush().await;
        }
    }
}

async fn handle(shared: &Shared, mut req: Request, peer: SocketAddr, https: bool) -> Response {
    let host_header = req
        .header(http_types::headers::HOST)
        .map(|h| h.last().as_str().to_string())
        .or_else(|| req.url().host_str().map(str::to_string))
        .unwrap_or_default();
    // `host:port` or `[v6]:port` -> the host alone.
    let host = match host_header.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => host_header.as_str(),
    }
    .trim_start_matches('[')
    .trim_end_matches(']');
    let upstream = match shared.table().route(host, req.url().path()) {
        Route::Upstream(u) => u.clone(),
        Route::NotFound => {
            return answer(
                StatusCode::NotFound,
                "no Ingress rule for this host and path",
            )
        }
    };
    if upstream.endpoints.is_empty() {
        return answer(
            StatusCode::ServiceUnavailable,
            &format!("no ready endpoint for {}", upstream.name),
        );
    }

    // X-Forwarded-*: the client is added to the chain; proto and host are this hop's.
    let xff = match req.header("x-forwarded-for") {
        Some(v) => format!("{}, {}", v.last().as_str(), peer.ip()),
        None => peer.ip().to_string(),
    };
    req.insert_header("x-forwarded-for", xff);
    req.insert_header("x-forwarded-proto", if https { "https" } else { "http" });
    req.insert_header("x-forwarded-host", host_header.as_str());

    if is_upgrade(&req) {
        return upgrade(shared, &upstream, req).await;
    }
    forward(shared, &upstream, req).await
}

/// The request to send to an endpoint: the client's, less its hop-by-hop headers, with
/// `body`.
fn outgoing(req: &Request, body: Body, keep: &[&str]) -> Request {
    let mut out = Request::new(req.method(), req.url().clone());
    // Header names are lower case in http-types.
    for (name, values) in req.iter() {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) && !keep.contains(&n) {
            continue;
        }
        // async-h1 answers the client's `Expect: 100-continue` itself; an endpoint's interim
        // 100 would be taken for its answer.
        if n == "expect" {
            continue;
        }
        out.append_header(name, values);
    }
    out.set_body(body);
    out
}

/// Opens a connection to one of the upstream's endpoints, trying them in round-robin
/// order; a pooled one is preferred. Answers the endpoint and whether the connection is new.
async fn connect(
    shared: &Shared,
    upstream: &Upstream,
    pooled: bool,
) -> Option<(SocketAddr, Conn, bool)> {
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
            Ok(Some(s)) => {
                let conn = async_dup::Arc::new(async_dup::Mutex::new(Backend::new(s)));
                return Some((addr, conn, true));
            }
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
fn still_open(conn: &Conn) -> bool {
    let backend = conn.lock();
    if backend.start != backend.end {
        return false;
    }
    let mut probe = [0u8; 1];
    matches!(backend.stream.get_ref().peek(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

fn bad_gateway(upstream: &Upstream) -> Response {
    answer(
        StatusCode::BadGateway,
        &format!("no endpoint of {} answered", upstream.name),
    )
}

async fn forward(shared: &Shared, upstream: &Upstream, mut req: Request) -> Response {
    let body = req.take_body();
    // A request without a body can be sent again if a pooled connection turns out closed.
    let replayable = body.len() == Some(0) || matches!(req.method(), Method::Get | Method::Head);
    let mut body = Some(body);
    let mut pooled = true;
    loop {
        let Some((addr, conn, fresh)) = connect(shared, upstream, pooled).await else {
            return bad_gateway(upstream);
        };
        let b = body.take().unwrap_or_else(Body::empty);
        let out = outgoing(&req, b, &[]);
        conn.lock().expect_head();
        let exchange = async {
            send(&mut async_h1::client::Encoder::new(out), &mut conn.clone()).await?;
            async_h1::client::decode(conn.clone()).await
        };
        match exchange.await {
            Ok(res) => return relay(shared, addr, conn, req.method(), res),
            Err(e) if !fresh && replayable => {
                // The endpoint closed the idle connection; nothing was answered.
                tracing::debug!(%addr, error = %e, "pooled connection closed; reconnecting");
                pooled = false;
                body = Some(Body::empty());
            }
            Err(e) => {
                tracing::debug!(%addr, upstream = %upstream.name, error = %e, "forwarding failed");
                return bad_gateway(upstream);
            }
        }
    }
}

/// The endpoint's answer as the client's: hop-by-hop headers dropped, the body streamed,
/// and the connection pooled again once the body was read to its end. Changed in place (a
/// new Response is two channels and a copy of every header).
fn relay(
    shared: &Shared,
    addr: SocketAddr,
    conn: Conn,
    method: Method,
    mut res: Response,
) -> Response {
    use http_types::headers::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
    let status = u16::from(res.status());
    let header = |n| {
        res.header(n)
            .map(|v| v.last().as_str().to_ascii_lowercase())
    };
    let close = header(CONNECTION).is_some_and(|c| c.contains("close"));
    let chunked = header(TRANSFER_ENCODING).is_some_and(|t| t.contains("chunked"));
    let length = header(CONTENT_LENGTH).and_then(|l| l.trim().parse::<u64>().ok());
    let no_body = method == Method::Head || status == 204 || status == 304 || status < 200;
    let framed = no_body || chunked || length.is_some();
    let hop: Vec<_> = res
        .iter()
        .map(|(name, _)| name)
        .filter(|name| HOP_BY_HOP.contains(&name.as_str()))
        .cloned()
        .collect();
    for name in hop {
        res.remove_header(name);
    }
    // async-h1's client adds a Date of its own when there is none, malformed
    // (`date: ...\r\n` as the value); the server writes a proper one.
    if res
        .header(DATE)
        .is_some_and(|d| d.iter().any(|v| v.as_str().contains('\r')))
    {
        res.remove_header(DATE);
    }
    let body = res.take_body();
    if no_body {
        if !close {
            shared.pool.put(addr, conn);
        }
        return res;
    }
    if !framed {
        // Delimited by the end of the connection (HTTP/1.0 style, busybox httpd's error
        // pages): async-h1 leaves it unread, and the connection holds it from its start.
        res.set_body(Body::from_reader(
            futures_lite::io::BufReader::new(conn),
            None,
        ));
        return res;
    }
    let len = if chunked {
        None
    } else {
        length.map(|l| l as usize)
    };
    let reader = ReturnOnEnd {
        body,
        back: (!close).then(|| (shared.pool_handle(), addr, conn)),
        remaining: len.map(|l| l as u64),
    };
    res.set_body(Body::from_reader(reader, len));
    res
}

/// A response body that gives its connection back to the pool when read to its end.
struct ReturnOnEnd {
    body: Body,
    back: Option<(Arc<Pool>, SocketAddr, Conn)>,
    /// Bytes of a Content-Length body still to come: the server stops reading once it has
    /// them all and never asks for the end, so the connection goes back at the last byte.
    remaining: Option<u64>,
}

impl ReturnOnEnd {
    /// `n` more bytes were handed on (0 with room for more: the end).
    fn advance(&mut self, n: usize, at_end: bool) {
        if let Some(left) = &mut self.remaining {
            *left = left.saturating_sub(n as u64);
        }
        if at_end || self.remaining == Some(0) {
            if let Some((pool, addr, conn)) = self.back.take() {
                pool.put(addr, conn);
            }
        }
    }
}

impl AsyncRead for ReturnOnEnd {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.body).poll_read(cx, buf))?;
        self.advance(n, n == 0 && !buf.is_empty());
        Poll::Ready(Ok(n))
    }
}

/// The body's own buffer (a `BufReader` over this only copied once more).
impl futures_lite::io::AsyncBufRead for ReturnOnEnd {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<&[u8]>> {
        let this = self.get_mut();
        let buf = std::task::ready!(Pin::new(&mut this.body).poll_fill_buf(cx))?;
        if buf.is_empty() {
            if let Some((pool, addr, conn)) = this.back.take() {
                pool.put(addr, conn);
            }
        }
        Poll::Ready(Ok(buf))
    }

    fn consume(mut self: Pin<&mut Self>, amt: usize) {
        Pin::new(&mut self.body).consume(amt);
        self.advance(amt, false);
    }
}

/// A `Connection: upgrade` request (WebSocket): sent on a new connection with its upgrade
/// headers; a 101 answer hands both connections to a splice.
async fn upgrade(shared: &Shared, upstream: &Upstream, mut req: Request) -> Response {
    let Some((addr, conn, _)) = connect(shared, upstream, false).await else {
        return bad_gateway(upstream);
    };
    let body = req.take_body();
    let mut out = outgoing(&req, body, &["connection", "upgrade"]);
    out.insert_header("connection", "upgrade");
    let mut encoded = async_h1::client::Encoder::new(out);
    if let Err(e) = send(&mut encoded, &mut conn.clone()).await {
        tracing::debug!(%addr, error = %e, "sending the upgrade request failed");
        return bad_gateway(upstream);
    }
    conn.lock().expect_head();
    let res = match async_h1::client::decode(conn.clone()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%addr, error = %e, "reading the upgrade answer failed");
            return bad_gateway(upstream);
        }
    };
    if res.status() != StatusCode::SwitchingProtocols {
        return relay(shared, addr, conn, req.method(), res);
    }
    let mut answer = Response::new(StatusCode::SwitchingProtocols);
    for (name, values) in res.iter() {
        let n = name.as_str();
        if n == "date" || n == "content-length" || n == "transfer-encoding" {
            continue;
        }
        answer.append_header(name, values);
    }
    // async-h1 hands over the client's connection once the 101 is written.
    let upgraded = answer.recv_upgrade().await;
    smol::spawn(async move {
        if let Some(client) = upgraded.await {
            api::transport::splice(client, conn, &[]).await;
        }
    })
    .detach();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::AsyncReadExt;
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
                        while let Some(end) = seen.windows(4).position(|w| w == HEAD_END) {
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
        let shared = Arc::new(Shared::new());
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

    /// Answers forwarded one after another share one endpoint connection, given back to the
    /// pool once their body is read. (The bug that made every request through the server
    /// open a new endpoint connection showed only behind async-h1's server, which stops at
    /// the Content-Length; bench/ingress.sh shows it: 1,760 -> 25,300 requests/s.)
    #[test]
    fn forwarded_answers_give_their_connection_back() {
        let (addr, accepted) = endpoint();
        let shared = Shared::new();
        let upstream = Upstream::new("default/web:80".into(), vec![addr]);
        smol::block_on(async {
            for _ in 0..3 {
                let url = http_types::Url::parse("http://web.example/").expect("url");
                let mut res = forward(&shared, &upstream, Request::new(Method::Get, url)).await;
                assert_eq!(res.status(), StatusCode::Ok);
                // As async-h1's server does with a known length: exactly that many bytes,
                // never a read that would see the end.
                let mut body = res.take_body();
                let mut got = [0u8; 3];
                body.read_exact(&mut got).await.expect("body");
                assert_eq!(&got, b"ok\n");
                // Back in the pool at the last byte, before anything reads further.
                let idle = shared
                    .pool
                    .take(addr)
                    .expect("the connection is pooled again");
                shared.pool.put(addr, idle);
            }
        });
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one endpoint connection"
        );
    }
}
