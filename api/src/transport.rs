//! The one HTTP/1.1 client transport of skiff: the API client ([`crate::client`]) and the node
//! agent's registry client stand on it.
//!
//! The framing is async-h1's client (the request encoded, the answer's head parsed with
//! httparse, `Content-Length` and chunked bodies decoded) over plain TCP or rustls (ring).
//! Connections are kept alive in a small pool: async-h1 takes the stream by value, so it gets
//! an async-dup handle and the transport keeps another; once the body was read to its end
//! the stream carries nothing more (no pipelining) and goes back to the pool. Trust is the
//! caller's: it hands in the rustls configuration.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite};
use futures_rustls::TlsConnector;
use http_types::headers::USER_AGENT;
use http_types::{Body, Method, Request};
use rustls::pki_types::ServerName;
use smol::net::TcpStream;

/// An absolute URL (the `url` crate's, as http-types re-exports it).
pub use http_types::Url;

/// What went wrong with an HTTP exchange.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("bad URL {0:?}")]
    Url(String),
    /// TCP could not connect (or did not within the connect timeout).
    #[error("cannot connect to {addr}: {error}")]
    Connect { addr: String, error: std::io::Error },
    /// The TLS handshake failed, e.g. the server's certificate is not trusted.
    #[error("TLS with {host}: {error}")]
    Tls { host: String, error: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("malformed HTTP answer: {0}")]
    Protocol(String),
    #[error("timed out waiting for the server")]
    Timeout,
}

impl From<http_types::Error> for TransportError {
    fn from(e: http_types::Error) -> Self {
        match e.downcast::<std::io::Error>() {
            Ok(io) => TransportError::Io(io),
            Err(e) => TransportError::Protocol(e.to_string()),
        }
    }
}

/// How a [`Transport`] connects and waits.
#[derive(Clone, Debug)]
pub struct Options {
    /// The name every server certificate is verified against, instead of the URL's host
    /// (kubeconfig `tls-server-name`; a client of one server).
    pub server_name: Option<ServerName<'static>>,
    /// Longest wait for TCP to connect, and again for the TLS handshake.
    pub connect_timeout: Duration,
    /// Longest wait for an answer's head and then for each next piece of its body; None
    /// waits as long as the server takes (watches).
    pub read_timeout: Option<Duration>,
    /// Connections kept idle.
    pub pool_size: usize,
    pub user_agent: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            server_name: None,
            connect_timeout: Duration::from_secs(10),
            read_timeout: None,
            pool_size: 4,
            user_agent: concat!("skiff/", env!("CARGO_PKG_VERSION")).into(),
        }
    }
}

/// A connection: plain TCP or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<futures_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_close(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

/// One handle on a connection; async-h1's body reader holds another while a body is read.
type Conn = async_dup::Arc<async_dup::Mutex<Stream>>;

struct Shared {
    tls: TlsConnector,
    options: Options,
    /// Idle connections, each with its origin (`scheme://host:port`) and the generation it
    /// was made in.
    idle: Mutex<Vec<(String, u64, Conn)>>,
    /// Bumped by [`Transport::close_idle`]: connections of an older generation are not
    /// pooled again once their answer is read.
    generation: AtomicU64,
}

/// An HTTP/1.1 client with one TLS configuration; cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct Transport {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

async fn within<T>(
    limit: Option<Duration>,
    f: impl std::future::Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    match limit {
        None => f.await,
        Some(d) => {
            smol::future::or(f, async {
                smol::Timer::after(d).await;
                Err(TransportError::Timeout)
            })
            .await
        }
    }
}

impl Transport {
    pub fn new(tls: Arc<rustls::ClientConfig>, options: Options) -> Transport {
        Transport {
            shared: Arc::new(Shared {
                tls: TlsConnector::from(tls),
                options,
                idle: Mutex::new(Vec::new()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// Connections currently idle in the pool (for tests and metrics).
    pub fn idle_connections(&self) -> usize {
        self.shared.idle.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// Closes the idle connections, and each busy one once its answer is read, so that
    /// every later request makes a new handshake (after the client certificate changed, as
    /// client-go closes its connections when its certificate rotates). Streams in progress,
    /// such as watches, go on until they end.
    pub fn close_idle(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut idle) = self.shared.idle.lock() {
            idle.clear();
        }
    }

    async fn connect(&self, url: &Url) -> Result<Conn, TransportError> {
        let opts = &self.shared.options;
        let host = url
            .host_str()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| TransportError::Url(url.to_string()))?;
        let port = url
            .port_or_known_default()
            .ok_or_else(|| TransportError::Url(url.to_string()))?;
        let addr = format!("{}:{port}", url.host_str().unwrap_or(host));
        let timed_out =
            || std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
        let tcp = match within(Some(opts.connect_timeout), async {
            TcpStream::connect((host, port))
                .await
                .map_err(TransportError::Io)
        })
        .await
        {
            Ok(tcp) => tcp,
            Err(TransportError::Io(error)) => return Err(TransportError::Connect { addr, error }),
            Err(_) => {
                return Err(TransportError::Connect {
                    addr,
                    error: timed_out(),
                })
            }
        };
        let _ = tcp.set_nodelay(true);
        let stream = match url.scheme() {
            "http" => Stream::Plain(tcp),
            "https" => {
                let name = match &opts.server_name {
                    Some(n) => n.clone(),
                    None => ServerName::try_from(host.to_string())
                        .map_err(|_| TransportError::Url(format!("bad server name {host:?}")))?,
                };
                let tls = within(Some(opts.connect_timeout), async {
                    self.shared
                        .tls
                        .connect(name, tcp)
                        .await
                        .map_err(TransportError::Io)
                })
                .await
                .map_err(|e| TransportError::Tls {
                    host: host.to_string(),
                    error: match e {
                        TransportError::Io(error) => error,
                        _ => timed_out(),
                    },
                })?;
                Stream::Tls(Box::new(tls))
            }
            _ => return Err(TransportError::Url(url.to_string())),
        };
        Ok(async_dup::Arc::new(async_dup::Mutex::new(stream)))
    }

    fn take_idle(&self, origin: &str) -> Option<(u64, Conn)> {
        let mut idle = self.shared.idle.lock().ok()?;
        let i = idle.iter().rposition(|(o, _, _)| o == origin)?;
        let (_, generation, conn) = idle.swap_remove(i);
        Some((generation, conn))
    }

    fn build(
        &self,
        method: Method,
        url: &Url,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Request, TransportError> {
        let mut req = Request::new(method, url.clone());
        req.insert_header(USER_AGENT, self.shared.options.user_agent.as_str());
        if !body.is_empty() {
            // Before the headers: http-types sets the body's own Content-Type, which a
            // Content-Type among `headers` then replaces.
            req.set_body(Body::from_bytes(body.to_vec()));
        }
        for (i, (n, v)) in headers.iter().enumerate() {
            // http-types checks only that names and values are ASCII.
            let bad = |s: &str| !s.is_ascii() || s.contains(['\r', '\n']);
            if bad(n) || bad(v) || n.contains(':') || n.is_empty() {
                return Err(TransportError::Protocol(format!(
                    "bad request header {n:?}"
                )));
            }
            // A name repeated in `headers` is sent once per value (front-proxy groups); its
            // first value replaces what http-types set (Content-Type, User-Agent).
            if headers[..i].iter().any(|(m, _)| m.eq_ignore_ascii_case(n)) {
                req.append_header(*n, *v);
            } else {
                req.insert_header(*n, *v);
            }
        }
        Ok(req)
    }

    async fn exchange(
        &self,
        conn: &Conn,
        req: Request,
    ) -> Result<http_types::Response, TransportError> {
        within(self.shared.options.read_timeout, async {
            Ok(async_h1::connect(conn.clone(), req).await?)
        })
        .await
    }

    /// Sends one request (`body` empty: none) and returns the answer with its body unread.
    /// `headers` must not contain `Host`, `Content-Length` or `Transfer-Encoding`; a name
    /// given several times is sent with each value. A pooled
    /// connection that turns out to be closed is replaced by a new one once.
    pub async fn send(
        &self,
        method: &str,
        url: &Url,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let m: Method = method
            .parse()
            .map_err(|_| TransportError::Protocol(format!("bad method {method:?}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TransportError::Url(url.to_string()));
        }
        let origin = url.origin().ascii_serialization();
        // Built (and its headers checked) before any connection is made.
        let mut req = self.build(m, url, headers, body)?;
        if let Some((generation, conn)) = self.take_idle(&origin) {
            if let Ok(res) = self.exchange(&conn, req).await {
                return Ok(self.response(origin, generation, conn, m, res));
            }
            // The server closed the idle connection; nothing was answered, so send again.
            req = self.build(m, url, headers, body)?;
        }
        // The generation before the handshake: a close_idle during it retires this one.
        let generation = self.shared.generation.load(Ordering::SeqCst);
        let conn = self.connect(url).await?;
        let res = self.exchange(&conn, req).await?;
        Ok(self.response(origin, generation, conn, m, res))
    }

    fn response(
        &self,
        origin: String,
        generation: u64,
        conn: Conn,
        method: Method,
        mut res: http_types::Response,
    ) -> Response {
        let status = u16::from(res.status());
        let headers: Vec<(String, String)> = res
            .iter()
            .flat_map(|(n, vs)| {
                vs.iter()
                    .map(move |v| (n.as_str().to_ascii_lowercase(), v.as_str().to_string()))
            })
            .collect();
        let has = |name: &str, token: &str| {
            headers
                .iter()
                .any(|(n, v)| n == name && v.to_ascii_lowercase().contains(token))
        };
        let close = has("connection", "close");
        let chunked = has("transfer-encoding", "chunked");
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.trim().parse::<u64>().ok());
        // async-h1 hands out a body of the declared length even where none follows.
        let framing = if method == Method::Head || status == 204 || status == 304 {
            Framing::Length(0)
        } else if chunked {
            Framing::Chunked
        } else if let Some(l) = length {
            Framing::Length(l)
        } else {
            Framing::Unframed
        };
        let mut r = Response {
            status,
            headers,
            body: Some(res.take_body()),
            conn: Some(conn),
            reusable: !close && !matches!(framing, Framing::Unframed),
            framing,
            origin,
            generation,
            shared: self.shared.clone(),
        };
        if matches!(r.framing, Framing::Length(0)) {
            r.finish();
        }
        r
    }
}

enum Framing {
    /// Bytes left.
    Length(u64),
    Chunked,
    /// Neither length nor chunked: delimited by the end of the connection, which async-h1's
    /// client does not read.
    Unframed,
}

/// An answer whose body is read with [`Response::read`], [`Response::chunk`] or
/// [`Response::bytes`]. Read to its end, it gives its connection back to the pool; dropped
/// earlier, it closes it.
pub struct Response {
    pub status: u16,
    /// Header names lowercased (values of one name in the order received).
    pub headers: Vec<(String, String)>,
    body: Option<Body>,
    conn: Option<Conn>,
    framing: Framing,
    reusable: bool,
    origin: String,
    /// The generation of its connection (see [`Transport::close_idle`]).
    generation: u64,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All values of a header.
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The declared body length, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length").and_then(|l| l.parse().ok())
    }

    /// The body is done: its connection goes back to the pool if it can carry another.
    fn finish(&mut self) {
        self.body = None;
        if let Some(conn) = self.conn.take() {
            let current = self.shared.generation.load(Ordering::SeqCst) == self.generation;
            if self.reusable && current {
                if let Ok(mut idle) = self.shared.idle.lock() {
                    if idle.len() < self.shared.options.pool_size {
                        idle.push((std::mem::take(&mut self.origin), self.generation, conn));
                    }
                }
            }
        }
    }

    /// After an error the connection is in an unknown state: it is closed.
    fn fail(&mut self, e: TransportError) -> TransportError {
        self.body = None;
        self.conn = None;
        e
    }

    fn body(&mut self) -> Result<Option<&mut Body>, TransportError> {
        if matches!(self.framing, Framing::Unframed) {
            return Err(self.fail(TransportError::Protocol(
                "the body has neither a Content-Length nor chunked framing".into(),
            )));
        }
        Ok(self.body.as_mut())
    }

    /// Counts `n` bytes read (0: the body says it ended); true at the body's end.
    fn advance(&mut self, n: usize) -> Result<bool, TransportError> {
        let done = match &mut self.framing {
            Framing::Length(left) if n == 0 && *left > 0 => {
                return Err(self.fail(TransportError::Protocol("the body ends early".into())));
            }
            Framing::Length(left) => {
                *left -= (n as u64).min(*left);
                *left == 0
            }
            _ => n == 0,
        };
        if done {
            self.finish();
        }
        Ok(done)
    }

    /// Reads the next piece of the body into `buf`; 0 at its end.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        let limit = self.shared.options.read_timeout;
        let Some(body) = self.body()? else {
            return Ok(0);
        };
        let n = match within(limit, async { Ok(body.read(buf).await?) }).await {
            Ok(n) => n,
            Err(e) => return Err(self.fail(e)),
        };
        self.advance(n)?;
        Ok(n)
    }

    /// The next piece of the body as it arrives; None at its end.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, TransportError> {
        let limit = self.shared.options.read_timeout;
        let Some(body) = self.body()? else {
            return Ok(None);
        };
        let read = within(limit, async {
            let data = body.fill_buf().await?.to_vec();
            body.consume(data.len());
            Ok(data)
        })
        .await;
        let data = match read {
            Ok(d) => d,
            Err(e) => return Err(self.fail(e)),
        };
        self.advance(data.len())?;
        Ok(Some(data).filter(|d| !d.is_empty()))
    }

    /// Reads the whole body, refusing more than `limit` bytes.
    pub async fn bytes(&mut self, limit: usize) -> Result<Vec<u8>, TransportError> {
        let mut out = Vec::new();
        while let Some(data) = self.chunk().await? {
            if out.len() + data.len() > limit {
                return Err(self.fail(TransportError::Protocol(format!(
                    "the body is larger than {limit} bytes"
                ))));
            }
            out.extend_from_slice(&data);
        }
        Ok(out)
    }
}

/// Copies bytes both ways between two upgraded connections (exec and port-forward through the
/// API server, WebSocket upgrades through the ingress proxy) until `other`'s side ends;
/// `early` are bytes of `other` already read (after its answer's head). `other` finishes its
/// own side (its last frames, its close) after `client` stops sending.
pub async fn splice<C, O>(client: C, other: O, early: &[u8])
where
    C: AsyncRead + AsyncWrite + Unpin,
    O: AsyncRead + AsyncWrite + Unpin,
{
    use futures_lite::{AsyncWriteExt, FutureExt};
    let (mut client_r, mut client_w) = futures_lite::io::split(client);
    let (mut other_r, mut other_w) = futures_lite::io::split(other);
    let down = async {
        if client_w.write_all(early).await.is_ok() {
            let _ = copy_flushing(&mut other_r, &mut client_w).await;
        }
        let _ = client_w.close().await;
    };
    let up = async {
        let _ = copy_flushing(&mut client_r, &mut other_w).await;
        let _ = other_w.close().await;
        futures_lite::future::pending::<()>().await;
    };
    down.or(up).await;
}

/// Copies until end of file, flushing after each read (interactive streams must not wait in
/// a buffer).
async fn copy_flushing<R, W>(r: &mut R, w: &mut W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use futures_lite::AsyncWriteExt;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
    }
}
