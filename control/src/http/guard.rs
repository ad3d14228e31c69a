//! Limits on what a client may make a connection hold, below async-h1 (which reads a request
//! head line by line with no bound on a line's length, and a body with no timeout).
//!
//! [`Guarded`] watches the bytes it passes up: a request head may be at most
//! [`MAX_HEAD_BYTES`] and must be complete within [`HEAD_TIMEOUT`] of its first byte
//! (kube-apiserver's `ReadHeaderTimeout` is 32 s), and a body that stops arriving for
//! [`BODY_IDLE_TIMEOUT`] fails the read (the handler answers 400). It tells heads from bodies
//! by the HTTP framing it sees: a head ends at its blank line; the next head starts once a
//! final response head (2xx-5xx) has been written. After a `101 Switching Protocols`
//! (exec, attach, port-forward) the connection carries another protocol and is left alone.
//!
//! A head over the limit is answered `431 Request Header Fields Too Large` (as Go's server,
//! and so kube-apiserver, answers it) and the connection ends. Each complete head's request
//! target is kept as sent ([`RawTarget`]): async-h1 turns it into a URL, which resolves `.`
//! and `..` segments, and the API must see the path the client wrote.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncWrite};
use smol::Timer;

/// How many bytes a request head may take: async-h1 refuses a head of 8 KiB or more (once a
/// line of it ends, with a closed connection and no answer), so the guard answers 431 first.
pub const MAX_HEAD_BYTES: usize = 8 * 1024 - 1;
/// How many header fields a head may have (async-h1's limit, past which it also closes the
/// connection without an answer).
pub const MAX_HEADERS: usize = 128;
/// The answer to a head over the limits (Go's net/http answer, which kube-apiserver gives).
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 35\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large";
/// How long a request head may take from its first byte (kube-apiserver's ReadHeaderTimeout).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(32);
/// How long a request body may pause before its read fails.
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(32);
/// The most of an unread body that is read and discarded after an answer so the connection
/// can carry the next request (a body somewhat over the 3 MiB limit, as a client sends whose
/// object is too large); more, and the connection ends after the answer. Go's net/http
/// discards up to 256 KiB.
pub const MAX_DRAIN_BYTES: u64 = 4 * 1024 * 1024;
/// How long a connection may wait for its next request's first byte (kube-apiserver's
/// IdleTimeout; async-h1 also gives up on a head after 60 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a TLS handshake may take (Go's server bounds it by ReadHeaderTimeout too).
pub const HANDSHAKE_TIMEOUT: Duration = HEAD_TIMEOUT;

enum Phase {
    /// Reading a request head: `bytes` so far, `matched` bytes of "\r\n\r\n" at their end,
    /// the head itself (to read its Content-Length), and the deadline: [`IDLE_TIMEOUT`] from
    /// the first wait, [`HEAD_TIMEOUT`] from the first byte.
    Head {
        bytes: usize,
        matched: usize,
        head: Vec<u8>,
        deadline: Option<Timer>,
        started: bool,
    },
    /// Reading a request body (`left`: what its Content-Length still owes, if it has one);
    /// the timer runs while a read waits.
    Body {
        idle: Option<Timer>,
        left: Option<u64>,
    },
    /// Answered before the body was read to its end: async-h1 reads and discards the `left`
    /// bytes still owed before the next head, so they are not counted as a head (a 413 for
    /// a 3 MiB body must reach the client, not a reset).
    Drain { left: u64, idle: Option<Timer> },
    /// Switched protocols: no HTTP framing any more.
    Upgraded,
    /// The head was over the limits: `written` bytes of the 431 answer are out; then the
    /// connection ends.
    Refusing { written: usize },
}

impl Phase {
    fn head() -> Phase {
        Phase::Head {
            bytes: 0,
            matched: 0,
            head: Vec::new(),
            deadline: None,
            started: false,
        }
    }
}

/// The Content-Length a request head declares, if any (the last one; async-h1 refuses
/// requests whose lengths disagree).
fn content_length(head: &[u8]) -> Option<u64> {
    head.split(|&b| b == b'\n').rev().find_map(|line| {
        let line = std::str::from_utf8(line).ok()?;
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

/// The request target (`/api/v1/...?...`) of the last complete request head, exactly as the
/// client sent it; taken by the request it belongs to.
#[derive(Clone, Default)]
pub struct RawTarget(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl RawTarget {
    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn set(&self, target: Option<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }
}

/// The request target of a head's request line (`METHOD SP TARGET SP VERSION`).
fn request_target(head: &[u8]) -> Option<String> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (_method, target) = (parts.next()?, parts.next()?);
    Some(target.to_string())
}

/// How many header fields a head holds (its lines after the request line, up to the blank
/// one), counted as async-h1 would parse them.
fn header_count(head: &[u8]) -> usize {
    head.split(|&b| b == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty() && *l != b"\r")
        .count()
}

pub struct Guarded<S> {
    inner: S,
    phase: Phase,
    target: RawTarget,
}

impl<S> Guarded<S> {
    #[cfg(test)]
    pub fn new(inner: S) -> Guarded<S> {
        Guarded::with_target(inner, RawTarget::default())
    }

    /// A guard that puts each head's request target in `target`.
    pub fn with_target(inner: S, target: RawTarget) -> Guarded<S> {
        Guarded {
            inner,
            phase: Phase::head(),
            target,
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

/// Where "\r\n\r\n" ends in `data`, given `matched` bytes of it already seen; otherwise the
/// new count of matched bytes.
fn find_head_end(data: &[u8], mut matched: usize) -> Result<usize, usize> {
    const END: &[u8] = b"\r\n\r\n";
    for (i, &b) in data.iter().enumerate() {
        if b == END[matched] {
            matched += 1;
            if matched == END.len() {
                return Ok(i + 1);
            }
        } else {
            matched = usize::from(b == END[0]);
        }
    }
    Err(matched)
}

/// The status code of a response head at the start of `buf`, if it is one.
fn response_status(buf: &[u8]) -> Option<u16> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let digits = rest.get(..3)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl<S> Guarded<S> {
    /// Counts `data`, just read, as request-head bytes; moves on to the body at the head's
    /// end (with whatever of `data` follows it already counted as body), or to refusing a
    /// head over the limits.
    fn account_head(&mut self, data: &[u8]) {
        let Phase::Head {
            bytes,
            matched,
            head,
            deadline,
            started,
        } = &mut self.phase
        else {
            return;
        };
        if !*started {
            *started = true;
            *deadline = Some(Timer::after(HEAD_TIMEOUT));
        }
        let (taken, done) = match find_head_end(data, *matched) {
            Ok(end) => (end, true),
            Err(m) => {
                *matched = m;
                (data.len(), false)
            }
        };
        *bytes += taken;
        if *bytes > MAX_HEAD_BYTES {
            self.phase = Phase::Refusing { written: 0 };
            return;
        }
        head.extend_from_slice(&data[..taken]);
        if done {
            if header_count(head) > MAX_HEADERS {
                self.phase = Phase::Refusing { written: 0 };
                return;
            }
            self.target.set(request_target(head));
            let left =
                content_length(head).map(|len| len.saturating_sub((data.len() - taken) as u64));
            self.phase = Phase::Body { idle: None, left };
        }
    }
}

impl<S: AsyncWrite + Unpin> Guarded<S> {
    /// Writes the 431 answer out; then the read fails, which ends the connection.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Phase::Refusing { written } = &mut self.phase {
            if *written < TOO_LARGE.len() {
                match Pin::new(&mut self.inner).poll_write(cx, &TOO_LARGE[*written..]) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => break,
                    Poll::Ready(Ok(n)) => *written += n,
                    Poll::Pending => return Poll::Pending,
                }
            } else {
                // Closing sends TLS's close_notify after the answer, so the client reads a
                // whole answer rather than a truncated connection.
                if Pin::new(&mut self.inner).poll_close(cx).is_pending() {
                    return Poll::Pending;
                }
                break;
            }
        }
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "request head too large",
        )))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if matches!(this.phase, Phase::Refusing { .. }) {
            return this.poll_refuse(cx);
        }
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        match &mut this.phase {
            Phase::Upgraded => polled,
            Phase::Refusing { .. } => this.poll_refuse(cx),
            Phase::Head { deadline, .. } => match polled {
                Poll::Pending => {
                    let timer = deadline.get_or_insert_with(|| Timer::after(IDLE_TIMEOUT));
                    if Pin::new(timer).poll(cx).is_ready() {
                        return Poll::Ready(Err(timed_out("waiting for a request")));
                    }
                    Poll::Pending
                }
                Poll::Ready(Ok(n)) if n > 0 => {
                    this.account_head(&buf[..n]);
                    if matches!(this.phase, Phase::Refusing { .. }) {
                        return this.poll_refuse(cx);
                    }
                    Poll::Ready(Ok(n))
                }
                other => other,
            },
            Phase::Drain { left, idle } => match polled {
                Poll::Pending => {
                    let timer = idle.get_or_insert_with(|| Timer::after(BODY_IDLE_TIMEOUT));
                    if Pin::new(timer).poll(cx).is_ready() {
                        return Poll::Ready(Err(timed_out("reading the request body")));
                    }
                    Poll::Pending
                }
                Poll::Ready(Ok(n)) if n > 0 => {
                    *idle = None;
                    let owed = usize::try_from(*left).unwrap_or(usize::MAX).min(n);
                    *left -= owed as u64;
                    if *left == 0 {
                        this.phase = Phase::head();
                        this.account_head(&buf[owed..n]);
                        if matches!(this.phase, Phase::Refusing { .. }) {
                            return this.poll_refuse(cx);
                        }
                    }
                    Poll::Ready(Ok(n))
                }
                other => other,
            },
            Phase::Body { idle, left } => match polled {
                Poll::Pending => {
                    let timer = idle.get_or_insert_with(|| Timer::after(BODY_IDLE_TIMEOUT));
                    if Pin::new(timer).poll(cx).is_ready() {
                        return Poll::Ready(Err(timed_out("reading the request body")));
                    }
                    Poll::Pending
                }
                ready => {
                    *idle = None;
                    if let (Poll::Ready(Ok(n)), Some(left)) = (&ready, left) {
                        *left = left.saturating_sub(*n as u64);
                    }
                    ready
                }
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if !matches!(this.phase, Phase::Upgraded | Phase::Refusing { .. }) {
            match response_status(buf) {
                Some(101) => this.phase = Phase::Upgraded,
                // The answer is on its way: what the client sends next is a new head, once
                // the part of the body that was not read has been.
                Some(code) if code >= 200 => {
                    this.phase = match this.phase {
                        Phase::Body {
                            left: Some(left), ..
                        } if left > 0 && left <= MAX_DRAIN_BYTES => {
                            Phase::Drain { left, idle: None }
                        }
                        _ => Phase::head(),
                    }
                }
                _ => {}
            }
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn the_end_of_a_head_is_found_across_reads() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\n{}", 0), Ok(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n", 0), Err(2));
        assert_eq!(find_head_end(b"\r\nbody", 2), Ok(2));
        assert_eq!(find_head_end(b"\r\r\n\r\n", 0), Ok(5));
        assert_eq!(find_head_end(b"x\r\nx", 0), Err(0));
    }

    #[test]
    fn response_heads_are_recognised() {
        assert_eq!(response_status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(response_status(b"HTTP/1.1 101 Switching"), Some(101));
        assert_eq!(response_status(b"1a\r\nHTTP/1.1 200"), None);
        assert_eq!(response_status(b"HTTP/1.1 2x0"), None);
    }

    #[test]
    fn a_head_over_the_limits_is_answered_431() {
        smol::block_on(async {
            let endless = vec![b'a'; MAX_HEAD_BYTES + 10];
            let mut g = Guarded::new(Duplex {
                input: futures_lite::io::Cursor::new(endless),
                output: Vec::new(),
            });
            let mut out = Vec::new();
            let e = g.read_to_end(&mut out).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(out.len() <= MAX_HEAD_BYTES + 8192);
            assert_eq!(g.inner.output, TOO_LARGE);
            let body = TOO_LARGE.split(|&b| b == b'\n').next_back().unwrap();
            assert_eq!(body.len(), 35);

            // Too many header fields, in a head short enough.
            let mut head = b"GET / HTTP/1.1\r\n".to_vec();
            for i in 0..=MAX_HEADERS {
                head.extend(format!("x-{i}: 1\r\n").as_bytes());
            }
            head.extend(b"\r\n");
            let mut g = Guarded::new(Duplex {
                input: futures_lite::io::Cursor::new(head),
                output: Vec::new(),
            });
            let e = g.read_to_end(&mut Vec::new()).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(g.inner.output.starts_with(b"HTTP/1.1 431 "));
        });
    }

    #[test]
    fn each_head_leaves_its_target_as_sent() {
        smol::block_on(async {
            let target = RawTarget::default();
            let request = b"DELETE /api/v1/namespaces/x/configmaps/%2e%2E?dryRun=All HTTP/1.1\r\nHost: a\r\n\r\n";
            let mut g = Guarded::with_target(
                futures_lite::io::Cursor::new(request.to_vec()),
                target.clone(),
            );
            g.read_to_end(&mut Vec::new()).await.unwrap();
            assert_eq!(
                target.take().as_deref(),
                Some("/api/v1/namespaces/x/configmaps/%2e%2E?dryRun=All")
            );
            assert_eq!(target.take(), None);
        });
    }

    /// Reads from `input`, keeps what is written apart (a Cursor would overwrite its input).
    struct Duplex {
        input: futures_lite::io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl AsyncRead for Duplex {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.input).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Duplex {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.output.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn an_unread_body_is_drained_before_the_next_head() {
        smol::block_on(async {
            // Answered (413) after 10 bytes of a 200,000-byte body; async-h1 then reads and
            // discards the rest, and the next request follows.
            let mut request = b"POST / HTTP/1.1\r\nContent-Length: 200000\r\n\r\n".to_vec();
            let head = request.len();
            request.extend(vec![b'x'; 200_000]);
            request.extend(b"GET / HTTP/1.1\r\n\r\n");
            let mut g = Guarded::new(Duplex {
                input: futures_lite::io::Cursor::new(request.clone()),
                output: Vec::new(),
            });
            let mut start = vec![0; head + 10];
            g.read_exact(&mut start).await.unwrap();
            g.write_all(b"HTTP/1.1 413 Request Entity Too Large\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            let mut rest = Vec::new();
            g.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest.len(), request.len() - head - 10);
            assert!(rest.ends_with(b"GET / HTTP/1.1\r\n\r\n"));
            assert!(
                matches!(g.phase, Phase::Body { .. }),
                "the next head was read"
            );
        });
        assert_eq!(
            content_length(b"POST / HTTP/1.1\r\ncontent-length:  7 \r\n"),
            Some(7)
        );
        assert_eq!(content_length(b"GET / HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn bodies_are_not_limited_and_an_answer_starts_a_new_head() {
        smol::block_on(async {
            let mut request = b"POST / HTTP/1.1\r\ncontent-length: 100000\r\n\r\n".to_vec();
            request.extend(vec![b'x'; 100_000]);
            let mut g = Guarded::new(futures_lite::io::Cursor::new(request.clone()));
            let mut out = Vec::new();
            g.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, request);
            // After an answer the same amount of bytes is a head far too long.
            g.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            g.inner.set_position(44);
            let e = g.read_to_end(&mut Vec::new()).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        });
    }
}
