//! HTTP/1.1 messages as the proxy passes them on. Heads are parsed by `httparse` (the parser
//! hyper uses) straight from a connection's read buffer; a body is copied according to its
//! framing: so many bytes (`Content-Length`), chunks found by `httparse`'s chunk-size parser
//! and passed on as they are (or only their data, for an HTTP/1.0 client), or everything up
//! to the end of the connection. Nothing is decoded into an intermediate message: the proxy
//! writes the outgoing head itself and the body bytes follow it in the same write.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::AsyncWriteExt;

/// The largest head accepted (nginx's `large_client_header_buffers` is 4 × 8 KiB).
pub const MAX_HEAD: usize = 64 * 1024;
/// The most header fields a head may have.
pub const MAX_HEADERS: usize = 100;
/// A read buffer's first size: a typical head and a small body fit.
const FIRST_BUFFER: usize = 8 * 1024;
/// Body bytes gathered before they are written (and the largest single read).
const WRITE_CHUNK: usize = 16 * 1024;
/// The longest chunk-size line (with extensions) or trailer line accepted.
const MAX_LINE: usize = 4 * 1024;

/// A connection and the bytes read from it that are not consumed yet.
pub struct Buffered<S> {
    pub io: S,
    buf: Box<[u8]>,
    /// Unconsumed bytes: `buf[start..end]`.
    start: usize,
    end: usize,
}

impl<S: AsyncRead + Unpin> Buffered<S> {
    pub fn new(io: S) -> Buffered<S> {
        Buffered {
            io,
            buf: vec![0u8; FIRST_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// The bytes read and not consumed.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The connection and the bytes read from it that were not consumed.
    pub fn into_parts(self) -> (S, Vec<u8>) {
        let pending = self.pending().to_vec();
        (self.io, pending)
    }

    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more after what is pending (making room, up to [`MAX_HEAD`] pending bytes):
    /// how many bytes came, 0 at the end of the connection. An error if the buffer is full.
    pub async fn fill(&mut self) -> io::Result<usize> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD {
                let mut bigger = vec![0u8; (self.buf.len() * 2).min(MAX_HEAD)];
                bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
                self.buf = bigger.into_boxed_slice();
            } else {
                return Err(io::Error::new(io::ErrorKind::OutOfMemory, "head too large"));
            }
        }
        let end = self.end;
        let room = &mut self.buf[end..];
        let n =
            futures_lite::future::poll_fn(|cx| Pin::new(&mut self.io).poll_read(cx, room)).await?;
        self.end += n;
        Ok(n)
    }
}

/// Why a head could not be read.
#[derive(Debug)]
pub enum HeadError {
    /// The connection ended before any byte of a head (a client's normal end).
    Closed,
    /// Not HTTP (answered 400).
    Malformed(httparse::Error),
    /// Larger than [`MAX_HEAD`] or with more than [`MAX_HEADERS`] fields (answered 431).
    TooLarge,
    Io(io::Error),
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::Closed => f.write_str("the connection ended"),
            HeadError::Malformed(e) => write!(f, "malformed head: {e}"),
            HeadError::TooLarge => f.write_str("head too large"),
            HeadError::Io(e) => e.fmt(f),
        }
    }
}

/// Reads until `parse` finds a whole head in the pending bytes, and consumes the head.
/// `parse` answers what it makes of the head and the head's length, or `Ok(None)` while the
/// head is partial.
pub async fn read_head<S, T, P>(conn: &mut Buffered<S>, mut parse: P) -> Result<T, HeadError>
where
    S: AsyncRead + Unpin,
    P: FnMut(&[u8]) -> Result<Option<(T, usize)>, httparse::Error>,
{
    loop {
        if !conn.pending().is_empty() {
            match parse(conn.pending()) {
                Ok(Some((made, len))) => {
                    conn.consume(len);
                    return Ok(made);
                }
                Ok(None) => {}
                Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
                Err(e) => return Err(HeadError::Malformed(e)),
            }
        }
        match conn.fill().await {
            Ok(0) if conn.pending().is_empty() => return Err(HeadError::Closed),
            Ok(0) => {
                return Err(HeadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection ended within a head",
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory => return Err(HeadError::TooLarge),
            Err(e) => return Err(HeadError::Io(e)),
        }
    }
}

/// Parses a request head (`Ok(None)`: not whole yet).
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [httparse::Header<'b>],
) -> Result<Option<(httparse::Request<'h, 'b>, usize)>, httparse::Error> {
    let mut req = httparse::Request::new(headers);
    match req.parse(buf)? {
        httparse::Status::Complete(len) => Ok(Some((req, len))),
        httparse::Status::Partial => Ok(None),
    }
}

/// Parses a response head (`Ok(None)`: not whole yet).
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [httparse::Header<'b>],
) -> Result<Option<(httparse::Response<'h, 'b>, usize)>, httparse::Error> {
    let mut res = httparse::Response::new(headers);
    match res.parse(buf)? {
        httparse::Status::Complete(len) => Ok(Some((res, len))),
        httparse::Status::Partial => Ok(None),
    }
}

/// How a message's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// So many bytes (0: no body).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// At the end of the connection (an answer without either header).
    Close,
}

/// Whether a comma-separated header value holds `token` (any case).
pub fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// The framing that a message's `Transfer-Encoding` and `Content-Length` fields give it
/// (`None` when there is neither), or why they are unusable: a transfer coding other than
/// a final `chunked`, or Content-Lengths that disagree or are not numbers. A message with
/// both is refused as well (RFC 9112 §6.3 lets a proxy do so; passing it on is how requests
/// get smuggled).
pub fn body_framing(headers: &[httparse::Header<'_>]) -> Result<Option<Framing>, &'static str> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if chunked {
                return Err("chunked is not the last transfer coding");
            }
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
            if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err("a transfer coding other than chunked");
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            for v in h.value.split(|&b| b == b',') {
                let v = std::str::from_utf8(v.trim_ascii())
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or("an invalid Content-Length")?;
                if length.is_some_and(|l| l != v) {
                    return Err("Content-Lengths that disagree");
                }
                length = Some(v);
            }
        }
    }
    match (chunked, length) {
        (true, Some(_)) => Err("both Transfer-Encoding and Content-Length"),
        (true, None) => Ok(Some(Framing::Chunked)),
        (false, Some(l)) => Ok(Some(Framing::Length(l))),
        (false, None) => Ok(None),
    }
}

/// Where a body copy is.
#[derive(Clone, Copy, Debug)]
enum State {
    /// Body bytes left (Content-Length).
    Bytes(u64),
    /// A chunk-size line is next.
    Size,
    /// Data of the current chunk left, then its CRLF (2 bytes, never passed on when
    /// de-chunking).
    Data(u64),
    DataEnd(u8),
    /// Trailer lines, up to the empty line that ends the message.
    Trailers,
    /// Until the end of the connection.
    ToEnd,
    Done,
}

/// Moves what `input` holds of a body, per `state`, to `out`; answers how much of `input`
/// was used. Stops when the body is done or `input` holds no further whole step.
fn step(state: &mut State, input: &[u8], out: &mut Vec<u8>, dechunk: bool) -> io::Result<usize> {
    let mut used = 0;
    loop {
        let rest = &input[used..];
        match *state {
            State::Done => return Ok(used),
            _ if rest.is_empty() => return Ok(used),
            State::Bytes(left) | State::Data(left) => {
                let n = (left.min(rest.len() as u64)) as usize;
                out.extend_from_slice(&rest[..n]);
                used += n;
                let left = left - n as u64;
                *state = match *state {
                    State::Bytes(_) if left == 0 => State::Done,
                    State::Bytes(_) => State::Bytes(left),
                    _ if left == 0 => State::DataEnd(2),
                    _ => State::Data(left),
                };
            }
            State::DataEnd(left) => {
                let n = (left as usize).min(rest.len());
                if rest[..n] != b"\r\n"[2 - left as usize..2 - left as usize + n] {
                    return Err(invalid("a chunk's data not followed by CRLF"));
                }
                if !dechunk {
                    out.extend_from_slice(&rest[..n]);
                }
                used += n;
                let left = left - n as u8;
                *state = if left == 0 {
                    State::Size
                } else {
                    State::DataEnd(left)
                };
            }
            State::Size => match httparse::parse_chunk_size(rest) {
                Ok(httparse::Status::Complete((n, size))) => {
                    if !dechunk {
                        out.extend_from_slice(&rest[..n]);
                    }
                    used += n;
                    *state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                Ok(httparse::Status::Partial) if rest.len() > MAX_LINE => {
                    return Err(invalid("a chunk-size line too long"))
                }
                Ok(httparse::Status::Partial) => return Ok(used),
                Err(_) => return Err(invalid("a malformed chunk size")),
            },
            State::Trailers => {
                let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                    if rest.len() > MAX_LINE {
                        return Err(invalid("a trailer line too long"));
                    }
                    return Ok(used);
                };
                let line = &rest[..eol + 2];
                if !dechunk {
                    out.extend_from_slice(line);
                }
                used += line.len();
                if eol == 0 {
                    *state = State::Done;
                }
            }
            State::ToEnd => {
                out.extend_from_slice(rest);
                used += rest.len();
            }
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// How a copy ended.
#[derive(Debug)]
pub enum CopyError {
    /// Reading the source failed or it ended early (or sent a malformed chunk).
    Read(io::Error),
    /// Writing to the destination failed.
    Write(io::Error),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::Read(e) => write!(f, "reading: {e}"),
            CopyError::Write(e) => write!(f, "writing: {e}"),
        }
    }
}

/// Writes `out` (a head the caller prepared) and then the body that follows in `src`,
/// framed as `framing`, to `dst`; when the body's bytes are at hand they leave in the same
/// write as the head. `dechunk` passes on only a chunked body's data (for an HTTP/1.0
/// client; the answer is then delimited by the connection's end). Flushes at the end;
/// `out` is left empty.
pub async fn send<R, W>(
    src: &mut Buffered<R>,
    dst: &mut W,
    out: &mut Vec<u8>,
    framing: Framing,
    dechunk: bool,
) -> Result<(), CopyError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut state = match framing {
        Framing::Length(0) => State::Done,
        Framing::Length(n) => State::Bytes(n),
        Framing::Chunked => State::Size,
        Framing::Close => State::ToEnd,
    };
    loop {
        let used = step(
            &mut state,
            src.pending(),
            out,
            dechunk && framing == Framing::Chunked,
        )
        .map_err(CopyError::Read)?;
        src.consume(used);
        if matches!(state, State::Done) {
            break;
        }
        if out.len() >= WRITE_CHUNK || (!out.is_empty() && src.pending().is_empty()) {
            // What is at hand goes now: the rest may be slow to come.
            dst.write_all(out).await.map_err(CopyError::Write)?;
            out.clear();
        }
        match src.fill().await {
            Ok(0) if matches!(state, State::ToEnd) => break,
            Ok(0) => {
                return Err(CopyError::Read(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection ended within a body",
                )))
            }
            Ok(_) => {}
            Err(e) => return Err(CopyError::Read(e)),
        }
    }
    if !out.is_empty() {
        dst.write_all(out).await.map_err(CopyError::Write)?;
        out.clear();
    }
    dst.flush().await.map_err(CopyError::Write)
}

/// A sink for a body nobody reads (a request answered by the proxy itself).
pub struct Discard;

impl AsyncWrite for Discard {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(framing: Framing, dechunk: bool, input: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>), String> {
        // The input arrives in the given pieces, then the connection ends.
        let (mut w, r) = std::os::unix::net::UnixStream::pair().expect("pair");
        let pieces: Vec<Vec<u8>> = input.iter().map(|p| p.to_vec()).collect();
        let feeder = std::thread::spawn(move || {
            use std::io::Write;
            for p in pieces {
                // The reader stops at the body's end, maybe before the rest is written.
                if w.write_all(&p).is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        let result = smol::block_on(async {
            let mut src = Buffered::new(smol::Async::new(r).expect("async"));
            let mut dst = Vec::new();
            let mut out = b"HEAD|".to_vec();
            let res = send(&mut src, &mut dst, &mut out, framing, dechunk).await;
            res.map(|()| (dst, src.pending().to_vec()))
                .map_err(|e| e.to_string())
        });
        feeder.join().expect("feeder");
        result
    }

    #[test]
    fn lengths_stop_at_the_body_and_leave_what_follows() {
        let (out, rest) = run(Framing::Length(5), false, &[b"hel", b"lo", b"GET /next"]).unwrap();
        assert_eq!(out, b"HEAD|hello");
        // The next request may or may not have been read yet; nothing of it was passed on.
        assert!(b"GET /next".starts_with(&rest));
        let (out, _) = run(Framing::Length(0), false, &[b"GET /"]).unwrap();
        assert_eq!(out, b"HEAD|");
        assert!(run(Framing::Length(10), false, &[b"short"]).is_err());
    }

    #[test]
    fn chunks_pass_through_whole_or_as_their_data() {
        let body: &[&[u8]] = &[
            b"5\r\nhel",
            b"lo\r\n6;ext=1\r\n world\r",
            b"\n0\r\nx-t: 1\r\n",
            b"\r\nNEXT",
        ];
        let (out, _) = run(Framing::Chunked, false, body).unwrap();
        assert_eq!(
            out,
            b"HEAD|5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-t: 1\r\n\r\n"
        );
        let (out, rest) = run(Framing::Chunked, true, body).unwrap();
        assert_eq!(out, b"HEAD|hello world");
        assert!(b"NEXT".starts_with(&rest));
        // Byte by byte.
        let whole = b"3\r\nabc\r\n0\r\n\r\n";
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        let (out, _) = run(Framing::Chunked, false, &bytes).unwrap();
        assert_eq!(&out[5..], whole);
    }

    #[test]
    fn malformed_chunks_and_early_ends_are_errors() {
        assert!(run(Framing::Chunked, false, &[b"zz\r\n"]).is_err());
        assert!(run(Framing::Chunked, false, &[b"3\r\nabcX\r\n0\r\n\r\n"]).is_err());
        assert!(run(Framing::Chunked, false, &[b"3\r\nab"]).is_err());
        let long = vec![b'1'; MAX_LINE + 10];
        assert!(run(Framing::Chunked, false, &[&long]).is_err());
    }

    #[test]
    fn close_delimited_bodies_run_to_the_end() {
        let (out, _) = run(Framing::Close, false, &[b"all ", b"of it"]).unwrap();
        assert_eq!(out, b"HEAD|all of it");
    }

    #[test]
    fn large_bodies_stream_in_bounded_writes() {
        let big = vec![7u8; 1 << 20];
        let (out, _) = run(Framing::Length(big.len() as u64), false, &[&big]).unwrap();
        assert_eq!(out.len(), 5 + big.len());
    }

    #[test]
    fn framing_fields_are_checked() {
        let h = |n: &'static str, v: &'static [u8]| httparse::Header { name: n, value: v };
        assert_eq!(body_framing(&[]), Ok(None));
        assert_eq!(
            body_framing(&[h("Content-Length", b" 12 ")]),
            Ok(Some(Framing::Length(12)))
        );
        assert_eq!(
            body_framing(&[h("content-length", b"3, 3")]),
            Ok(Some(Framing::Length(3)))
        );
        assert!(body_framing(&[h("content-length", b"3, 4")]).is_err());
        assert!(body_framing(&[h("content-length", b"-1")]).is_err());
        assert!(body_framing(&[h("content-length", b"")]).is_err());
        assert_eq!(
            body_framing(&[h("Transfer-Encoding", b"gzip, Chunked")]),
            Ok(Some(Framing::Chunked))
        );
        assert!(body_framing(&[h("transfer-encoding", b"gzip")]).is_err());
        assert!(body_framing(&[
            h("transfer-encoding", b"chunked"),
            h("content-length", b"3")
        ])
        .is_err());
        assert!(has_token(b"keep-alive, Upgrade", "upgrade"));
        assert!(!has_token(b"keep-alive", "close"));
    }
}
