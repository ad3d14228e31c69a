//! A response body fed by a channel, so a task can stream watch events as they happen.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncBufRead, AsyncRead, Stream};

/// Reads the byte chunks sent on a channel, in order; ends when every sender is gone.
pub struct ChannelReader {
    rx: Pin<Box<async_channel::Receiver<Vec<u8>>>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl ChannelReader {
    pub fn new(rx: async_channel::Receiver<Vec<u8>>) -> ChannelReader {
        ChannelReader {
            rx: Box::pin(rx),
            chunk: Vec::new(),
            pos: 0,
        }
    }
}

impl AsyncBufRead for ChannelReader {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        while this.pos >= this.chunk.len() {
            match this.rx.as_mut().poll_next(cx) {
                Poll::Ready(Some(chunk)) => {
                    this.chunk = chunk;
                    this.pos = 0;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(&[])),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(&this.chunk[this.pos..]))
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        let this = self.get_mut();
        this.pos = (this.pos + amt).min(this.chunk.len());
    }
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let available = match self.as_mut().poll_fill_buf(cx) {
            Poll::Ready(Ok(b)) => b,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Poll::Ready(Ok(n))
    }
}
