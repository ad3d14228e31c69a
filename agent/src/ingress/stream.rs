//! The proxy's TCP connections, client and endpoint side: an `Async<TcpStream>` read so that
//! waiting for data costs one `epoll_ctl` and no read that fails.
//!
//! async-io's own `poll_read` first tries a read; when that would block it asks the reactor,
//! whose answer for a source that already had an event since it last asked is a stale
//! "ready": a second read that fails too, then the registration. Every wait for a request or
//! an answer thus cost two reads ending in EAGAIN beside the `epoll_ctl` (`strace -c` of the
//! proxy). A read that returns less than it asked for emptied the socket's receive queue, so
//! the next read here asks the reactor first; the registration (epoll, one-shot, level)
//! reports at once data that came in between.

use std::io::{self, Read as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_lite::io::{AsyncRead, AsyncWrite};
use smol::Async;

pub struct Stream {
    io: Async<TcpStream>,
    /// The last read emptied the receive queue (or would have blocked): the next one waits
    /// for readiness first.
    drained: bool,
}

impl Stream {
    pub fn new(io: Async<TcpStream>) -> Stream {
        Stream { io, drained: false }
    }

    /// Connects to `addr` with TCP_NODELAY (requests and answers are written whole).
    pub async fn connect(addr: SocketAddr) -> io::Result<Stream> {
        let io = Async::<TcpStream>::connect(addr).await?;
        let _ = io.get_ref().set_nodelay(true);
        Ok(Stream::new(io))
    }

    /// The next read tries the socket before asking the reactor (data is likely there: the
    /// caller let other tasks run since it was last drained).
    pub fn read_first(&mut self) {
        self.drained = false;
    }

    pub fn get_ref(&self) -> &TcpStream {
        self.io.get_ref()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        loop {
            if this.drained {
                ready!(this.io.poll_readable(cx))?;
                this.drained = false;
            }
            match this.io.get_ref().read(buf) {
                Ok(n) => {
                    this.drained = n < buf.len();
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => this.drained = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Ends the sending direction (a FIN after what was written); reading goes on.
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::{AsyncReadExt, AsyncWriteExt as _};
    use std::io::Write as _;

    /// Reads see every byte, in order, whether they came before or after the previous read
    /// emptied the queue, and then the end.
    #[test]
    fn reads_after_a_short_read_wait_and_see_everything() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let writer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            s.write_all(b"one").expect("write");
            std::thread::sleep(std::time::Duration::from_millis(50));
            s.write_all(b"two").expect("write");
            s.write_all(b"three").expect("write");
            std::thread::sleep(std::time::Duration::from_millis(50));
            s.write_all(b"four").expect("write");
        });
        smol::block_on(async {
            let mut s = Stream::connect(addr).await.expect("connect");
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            loop {
                let n = s.read(&mut buf).await.expect("read");
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, b"onetwothreefour");
            s.close().await.expect("shutdown");
        });
        writer.join().expect("writer");
    }
}
