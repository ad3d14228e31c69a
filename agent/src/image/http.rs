//! A small generic HTTP/1.1 client on smol and rustls (ring), for registries.
//!
//! One connection per request (`Connection: close`), which keeps the code small; an image
//! pull makes a handful of requests. Request bodies are byte slices; response bodies are read
//! in pieces (`Content-Length`, chunked, or until close) so large blobs stream to disk.
//! TLS trusts the Mozilla roots of `webpki-roots` plus any extra CA given (PEM).

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::io::BufReader;
use futures_lite::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::TlsConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use smol::net::TcpStream;

const MAX_LINE: usize = 64 * 1024;
const MAX_HEADERS: usize = 100;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest wait for the next bytes of an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What went wrong with an HTTP exchange.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("bad URL {0:?}")]
    Url(String),
    #[error("cannot connect to {addr}: {error}")]
    Connect { addr: String, error: std::io::Error },
    #[error("TLS with {host}: {error}")]
    Tls { host: String, error: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("malformed HTTP answer: {0}")]
    Protocol(String),
    #[error("timed out waiting for the server")]
    Timeout,
    #[error("invalid TLS configuration: {0}")]
    Config(String),
}

/// An absolute `http://` or `https://` URL, split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, HttpError> {
        let (https, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(HttpError::Url(s.into()));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = split_host_port(authority).ok_or_else(|| HttpError::Url(s.into()))?;
        let port = port.unwrap_or(if https { 443 } else { 80 });
        if host.is_empty() {
            return Err(HttpError::Url(s.into()));
        }
        Ok(Url {
            https,
            host,
            port,
            path,
        })
    }

    /// Resolves a `Location` header against this URL.
    pub fn join(&self, location: &str) -> Result<Url, HttpError> {
        if location.starts_with("http://") || location.starts_with("https://") {
            return Url::parse(location);
        }
        let mut u = self.clone();
        if location.starts_with('/') {
            u.path = location.to_string();
        } else {
            let base = self.path.split('?').next().unwrap_or("/");
            let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            u.path = format!("{dir}{location}");
        }
        Ok(u)
    }

    /// `host:port` as sent in `Host` (port omitted when it is the scheme's default).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.https { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.path)
    }
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`.
pub fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), Some(p.parse().ok()?))),
        None => Some((s.to_string(), None)),
    }
}

/// Builds a rustls configuration trusting the webpki roots and, if given, the CAs in
/// `extra_ca_pem`.
pub fn tls_config(extra_ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, HttpError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = extra_ca_pem {
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| HttpError::Config(format!("CA certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| HttpError::Config(format!("CA certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(HttpError::Config("the CA file holds no certificate".into()));
        }
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// Reads a PEM CA file for [`tls_config`].
pub fn read_ca_file(path: &Path) -> Result<Vec<u8>, HttpError> {
    std::fs::read(path)
        .map_err(|e| HttpError::Config(format!("cannot read CA file {}: {e}", path.display())))
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection: plain TCP or TLS.
struct Stream(Box<dyn Io>);

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_close(cx)
    }
}

type Conn = BufReader<Stream>;

async fn with_timeout<T>(
    d: Duration,
    f: impl std::future::Future<Output = Result<T, HttpError>>,
) -> Result<T, HttpError> {
    smol::future::or(f, async {
        smol::Timer::after(d).await;
        Err(HttpError::Timeout)
    })
    .await
}

/// An HTTP client with one TLS configuration.
#[derive(Clone)]
pub struct HttpClient {
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

impl HttpClient {
    pub fn new(tls: rustls::ClientConfig) -> HttpClient {
        HttpClient { tls: Arc::new(tls) }
    }

    async fn connect(&self, url: &Url) -> Result<Conn, HttpError> {
        let addr = format!("{}:{}", url.host, url.port);
        let tcp = with_timeout(CONNECT_TIMEOUT, async {
            TcpStream::connect((url.host.as_str(), url.port))
                .await
                .map_err(|error| HttpError::Connect {
                    addr: addr.clone(),
                    error,
                })
        })
        .await?;
        let _ = tcp.set_nodelay(true);
        if !url.https {
            return Ok(BufReader::new(Stream(Box::new(tcp))));
        }
        let name = ServerName::try_from(url.host.clone())
            .map_err(|_| HttpError::Url(format!("bad server name {:?}", url.host)))?;
        let tls = with_timeout(CONNECT_TIMEOUT, async {
            TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|error| HttpError::Tls {
                    host: url.host.clone(),
                    error,
                })
        })
        .await?;
        Ok(BufReader::new(Stream(Box::new(tls))))
    }

    /// Sends one request and returns the answer with its body unread.
    /// `headers` must not contain `Host`, `Content-Length` or `Connection`.
    pub async fn send(
        &self,
        method: &str,
        url: &Url,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, HttpError> {
        let mut conn = self.connect(url).await?;
        let mut req = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: skiff-agent\r\n",
            url.path,
            url.authority()
        );
        for (n, v) in headers {
            if v.contains(['\r', '\n']) || n.contains(['\r', '\n', ':']) {
                return Err(HttpError::Protocol(format!("bad header {n:?}")));
            }
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let w = conn.get_mut();
        w.write_all(req.as_bytes()).await?;
        if !body.is_empty() {
            w.write_all(body).await?;
        }
        w.flush().await?;
        let (status, headers) = with_timeout(READ_TIMEOUT, read_head(&mut conn)).await?;
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<u64>().ok());
        let framing = if method == "HEAD" || status == 204 || status == 304 {
            Framing::Done
        } else if chunked {
            Framing::Chunked(None)
        } else if let Some(l) = length {
            Framing::Length(l)
        } else {
            Framing::UntilClose
        };
        Ok(Response {
            status,
            headers,
            conn,
            framing,
        })
    }
}

enum Framing {
    Length(u64),
    /// Bytes left in the current chunk; None when a chunk-size line comes next.
    Chunked(Option<u64>),
    UntilClose,
    Done,
}

/// An answer whose body is read with [`Response::read`] or [`Response::bytes`].
pub struct Response {
    pub status: u16,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    conn: Conn,
    framing: Framing,
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

    /// The declared body length, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length").and_then(|l| l.parse().ok())
    }

    /// Reads the next piece of the body into `buf`; 0 at its end.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, HttpError> {
        with_timeout(READ_TIMEOUT, self.read_inner(buf)).await
    }

    async fn read_inner(&mut self, buf: &mut [u8]) -> Result<usize, HttpError> {
        loop {
            match &mut self.framing {
                Framing::Done => return Ok(0),
                Framing::Length(0) => {
                    self.framing = Framing::Done;
                    return Ok(0);
                }
                Framing::Length(left) => {
                    let max = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let n = self.conn.read(&mut buf[..max]).await?;
                    if n == 0 {
                        return Err(HttpError::Protocol("the body ends early".into()));
                    }
                    *left -= n as u64;
                    return Ok(n);
                }
                Framing::UntilClose => {
                    let n = self.conn.read(buf).await?;
                    if n == 0 {
                        self.framing = Framing::Done;
                    }
                    return Ok(n);
                }
                Framing::Chunked(Some(0)) => {
                    let crlf = read_line(&mut self.conn).await?;
                    if crlf.as_deref() != Some("") {
                        return Err(HttpError::Protocol("bad chunk terminator".into()));
                    }
                    self.framing = Framing::Chunked(None);
                }
                Framing::Chunked(Some(left)) => {
                    let max = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let n = self.conn.read(&mut buf[..max]).await?;
                    if n == 0 {
                        return Err(HttpError::Protocol("the body ends in a chunk".into()));
                    }
                    *left -= n as u64;
                    return Ok(n);
                }
                Framing::Chunked(None) => {
                    let line = read_line(&mut self.conn)
                        .await?
                        .ok_or_else(|| HttpError::Protocol("the body ends early".into()))?;
                    let size_hex = line.split(';').next().unwrap_or("").trim();
                    let size = u64::from_str_radix(size_hex, 16)
                        .map_err(|_| HttpError::Protocol(format!("bad chunk size {line:?}")))?;
                    if size == 0 {
                        while let Some(t) = read_line(&mut self.conn).await? {
                            if t.is_empty() {
                                break;
                            }
                        }
                        self.framing = Framing::Done;
                        return Ok(0);
                    }
                    self.framing = Framing::Chunked(Some(size));
                }
            }
        }
    }

    /// Reads the whole body, refusing more than `limit` bytes.
    pub async fn bytes(&mut self, limit: usize) -> Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.read(&mut buf).await?;
            if n == 0 {
                return Ok(out);
            }
            if out.len() + n > limit {
                return Err(HttpError::Protocol(format!(
                    "the body is larger than {limit} bytes"
                )));
            }
            out.extend_from_slice(&buf[..n]);
        }
    }
}

async fn read_head(conn: &mut Conn) -> Result<(u16, Vec<(String, String)>), HttpError> {
    loop {
        let line = read_line(conn).await?.ok_or_else(|| {
            HttpError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection without answering",
            ))
        })?;
        let mut parts = line.splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        let code = parts.next().unwrap_or("");
        if !version.starts_with("HTTP/1.") {
            return Err(HttpError::Protocol(format!("bad status line {line:?}")));
        }
        let status: u16 = code
            .parse()
            .map_err(|_| HttpError::Protocol(format!("bad status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let h = read_line(conn)
                .await?
                .ok_or_else(|| HttpError::Protocol("the headers end early".into()))?;
            if h.is_empty() {
                break;
            }
            if headers.len() >= MAX_HEADERS {
                return Err(HttpError::Protocol("too many headers".into()));
            }
            let (n, v) = h
                .split_once(':')
                .ok_or_else(|| HttpError::Protocol(format!("bad header line {h:?}")))?;
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        if (100..200).contains(&status) {
            continue;
        }
        return Ok((status, headers));
    }
}

async fn read_line(conn: &mut Conn) -> Result<Option<String>, HttpError> {
    let mut buf = Vec::new();
    let n = (&mut *conn)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(HttpError::Protocol(
            "a line is too long or the connection ended in it".into(),
        ));
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| HttpError::Protocol("a header line is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_join() {
        let u = Url::parse("https://127.0.0.1:5000/v2/a/b?x=1").unwrap();
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, 5000);
        assert_eq!(u.path, "/v2/a/b?x=1");
        assert_eq!(u.to_string(), "https://127.0.0.1:5000/v2/a/b?x=1");
        let d = Url::parse("https://registry-1.docker.io").unwrap();
        assert_eq!((d.port, d.path.as_str()), (443, "/"));
        assert_eq!(d.authority(), "registry-1.docker.io");
        assert_eq!(
            u.join("/v2/c").unwrap().to_string(),
            "https://127.0.0.1:5000/v2/c"
        );
        assert_eq!(u.join("http://h/x").unwrap().to_string(), "http://h/x");
        assert_eq!(u.join("d").unwrap().path, "/v2/a/d");
        assert!(Url::parse("ftp://x").is_err());
        let v6 = Url::parse("http://[::1]:8080/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 8080));
        assert_eq!(v6.authority(), "[::1]:8080");
    }
}
