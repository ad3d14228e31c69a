//! The server's side of a connection: async-h1 writes a response's head and its body in two
//! writes, which over TLS means two records and two system calls. [`HeadWithBody`] holds back
//! a head whose body has a known length (so it follows at once, from memory) and sends it
//! with the body's first bytes. A head of a streamed body (chunked: watches, logs) goes out
//! at once, so a client sees the response start before the first event.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

/// How much a held head may grow by the body bytes written after it before they are sent.
const COALESCE_LIMIT: usize = 64 * 1024;

pub struct HeadWithBody<S> {
    inner: S,
    /// Bytes accepted from the caller and not yet written to `inner`, from `sent` on.
    held: Vec<u8>,
    sent: usize,
}

impl<S> HeadWithBody<S> {
    pub fn new(inner: S) -> HeadWithBody<S> {
        HeadWithBody {
            inner,
            held: Vec::new(),
            sent: 0,
        }
    }

    #[cfg(test)]
    fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// Whether `buf` is a whole HTTP/1.1 response head announcing a body of known length.
fn is_fixed_length_head(buf: &[u8]) -> bool {
    if !(buf.starts_with(b"HTTP/1.1 ") && buf.ends_with(b"\r\n\r\n")) {
        return false;
    }
    const NAME: &[u8] = b"\r\ncontent-length:";
    buf.windows(NAME.len())
        .any(|w| w.eq_ignore_ascii_case(NAME))
}

impl<S: AsyncWrite + Unpin> HeadWithBody<S> {
    /// Writes out everything held; `Pending` until it is all with `inner`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.held.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.held.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadWithBody<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadWithBody<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.held.is_empty() {
            if is_fixed_length_head(buf) {
                // The body follows at once; the caller flushes after it.
                this.held.extend_from_slice(buf);
                return Poll::Ready(Ok(buf.len()));
            }
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        if this.held.len() + buf.len() <= COALESCE_LIMIT {
            // The head and the body's first bytes, in one write.
            this.held.extend_from_slice(buf);
            if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
            // What `inner` did not take yet goes with the next write or the flush.
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::AsyncWriteExt;

    use super::*;

    /// Records each write it is given.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    const HEAD: &[u8] =
        b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n";

    #[test]
    fn a_head_with_a_known_length_goes_out_with_the_body() {
        smol::block_on(async {
            let mut c = HeadWithBody::new(Writes::default());
            c.write_all(HEAD).await.unwrap();
            assert!(c.get_ref().0.is_empty(), "the head waits for its body");
            c.write_all(b"{}").await.unwrap();
            c.flush().await.unwrap();
            assert_eq!(c.get_ref().0, vec![[HEAD, b"{}"].concat()]);
            // An empty body: the flush sends the head alone.
            c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
            c.flush().await.unwrap();
            assert_eq!(c.get_ref().0.len(), 2);
        });
    }

    #[test]
    fn a_streamed_head_and_other_writes_go_out_at_once() {
        smol::block_on(async {
            let mut c = HeadWithBody::new(Writes::default());
            let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
            c.write_all(chunked).await.unwrap();
            assert_eq!(c.get_ref().0, vec![chunked.to_vec()]);
            c.write_all(b"5\r\nhello\r\n").await.unwrap();
            assert_eq!(c.get_ref().0.len(), 2);
            c.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.unwrap();
            assert_eq!(c.get_ref().0.len(), 3);
        });
    }

    #[test]
    fn a_large_body_is_not_held_back() {
        smol::block_on(async {
            let mut c = HeadWithBody::new(Writes::default());
            c.write_all(HEAD).await.unwrap();
            let big = vec![b'x'; COALESCE_LIMIT];
            c.write_all(&big).await.unwrap();
            assert_eq!(c.get_ref().0, vec![HEAD.to_vec(), big]);
        });
    }
}
