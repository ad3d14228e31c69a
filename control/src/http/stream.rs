//! A response body fed by a channel, so a task can stream watch events as they happen.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_lite::{AsyncBufRead, AsyncRead, Stream};

/// A piece of a streamed body: its own bytes, or bytes shared with other streams (a watch
/// event encoded once for every client that watches it).
pub enum Chunk {
    Owned(Vec<u8>),
    Shared(Arc<[u8]>),
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        match self {
            Chunk::Owned(v) => v,
            Chunk::Shared(a) => a,
        }
    }
}

impl From<Vec<u8>> for Chunk {
    fn from(v: Vec<u8>) -> Chunk {
        Chunk::Owned(v)
    }
}

/// Reads the byte chunks sent on a channel, in order; ends when every sender is gone.
///
/// A read takes as many queued chunks as fit in the caller's buffer, so a client that has
/// fallen behind gets its backlog in few large writes (one TLS record and one system call
/// each) rather than one per chunk.
pub struct ChannelReader<T = Vec<u8>> {
    rx: Pin<Box<async_channel::Receiver<T>>>,
    chunk: Option<T>,
    pos: usize,
}

impl<T: AsRef<[u8]>> ChannelReader<T> {
    pub fn new(rx: async_channel::Receiver<T>) -> ChannelReader<T> {
        ChannelReader {
            rx: Box::pin(rx),
            chunk: None,
            pos: 0,
        }
    }

    fn remaining(&self) -> &[u8] {
        self.chunk.as_ref().map_or(&[], |c| &c.as_ref()[self.pos..])
    }
}

impl<T: AsRef<[u8]> + Unpin> AsyncBufRead for ChannelReader<T> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        while this.remaining().is_empty() {
            match this.rx.as_mut().poll_next(cx) {
                Poll::Ready(Some(chunk)) => {
                    this.chunk = Some(chunk);
                    this.pos = 0;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(&[])),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(this.remaining()))
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        let this = self.get_mut();
        let len = this.chunk.as_ref().map_or(0, |c| c.as_ref().len());
        this.pos = (this.pos + amt).min(len);
    }
}

impl<T: AsRef<[u8]> + Unpin> AsyncRead for ChannelReader<T> {
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
        let mut n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.as_mut().consume(n);
        // Whatever else is already queued, as far as it fits whole.
        let this = self.get_mut();
        while this.remaining().is_empty() {
            let Ok(next) = this.rx.try_recv() else { break };
            let bytes = next.as_ref();
            if bytes.len() > buf.len() - n {
                this.chunk = Some(next);
                this.pos = 0;
                break;
            }
            buf[n..n + bytes.len()].copy_from_slice(bytes);
            n += bytes.len();
        }
        Poll::Ready(Ok(n))
    }
}

/// Rewrites a JSON answer through `convert` (which leaves alone what it does not know, such
/// as a Status or a Table): a streamed one (a watch) event by event as it passes, a whole one
/// at once; answers in other encodings pass unchanged. Returns the converted value of a whole
/// answer, for callers that re-encode it.
pub(super) async fn convert_json_answer(
    r: tide::Response,
    convert: impl Fn(&mut serde_json::Value) + Send + Sync + 'static,
) -> Result<(tide::Response, Option<serde_json::Value>), crate::error::ApiError> {
    let convert = Arc::new(convert);
    convert_json_answer_with(r, move |mut v| {
        let convert = convert.clone();
        async move {
            convert(&mut v);
            Ok(v)
        }
    })
    .await
}

/// [`convert_json_answer`] with a conversion that waits (a conversion webhook) and may
/// fail: a whole answer's failure is the request's; a watch ends with an ERROR event
/// carrying the failure's Status.
pub(super) async fn convert_json_answer_with<F, Fut>(
    mut r: tide::Response,
    convert: F,
) -> Result<(tide::Response, Option<serde_json::Value>), crate::error::ApiError>
where
    F: Fn(serde_json::Value) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<serde_json::Value, crate::error::ApiError>> + Send,
{
    use futures_lite::AsyncBufReadExt;
    let is_json = r
        .content_type()
        .is_some_and(|m| m.essence() == "application/json");
    if !is_json {
        return Ok((r, None));
    }
    let streamed = r.len().is_none();
    let body = r.take_body();
    if streamed {
        let (tx, rx) = async_channel::bounded::<Vec<u8>>(64);
        smol::spawn(async move {
            let mut reader = futures_lite::io::BufReader::new(body);
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let (mut out, failed) =
                    match serde_json::from_str::<serde_json::Value>(line.trim_end()) {
                        Ok(event) => match convert(event).await {
                            Ok(event) => (serde_json::to_vec(&event).unwrap_or_default(), false),
                            Err(e) => {
                                let event = serde_json::json!({"type": "ERROR", "object": &*e.0});
                                (serde_json::to_vec(&event).unwrap_or_default(), true)
                            }
                        },
                        Err(_) => (line.trim_end().as_bytes().to_vec(), false),
                    };
                out.push(b'\n');
                if tx.send(out).await.is_err() || failed {
                    return;
                }
            }
        })
        .detach();
        r.set_body(tide::Body::from_reader(ChannelReader::new(rx), None));
        r.set_content_type(tide::http::mime::JSON);
        return Ok((r, None));
    }
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| crate::error::ApiError::internal(e.to_string()))?;
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        r.set_body(bytes);
        r.set_content_type(tide::http::mime::JSON);
        return Ok((r, None));
    };
    let v = convert(v).await?;
    r.set_body(serde_json::to_vec(&v).unwrap_or_default());
    r.set_content_type(tide::http::mime::JSON);
    Ok((r, Some(v)))
}

#[cfg(test)]
mod tests {
    use futures_lite::AsyncReadExt;

    use super::*;

    #[test]
    fn a_read_takes_every_queued_chunk_that_fits() {
        smol::block_on(async {
            let (tx, rx) = async_channel::unbounded::<Chunk>();
            for part in ["ab", "cd", "efgh"] {
                tx.send(Chunk::Shared(part.as_bytes().into()))
                    .await
                    .unwrap();
            }
            tx.send(Chunk::Owned(b"ij".to_vec())).await.unwrap();
            drop(tx);
            let mut r = ChannelReader::new(rx);
            let mut buf = [0u8; 6];
            assert_eq!(
                r.read(&mut buf).await.unwrap(),
                4,
                "efgh does not fit whole"
            );
            assert_eq!(&buf[..4], b"abcd");
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"efghij");
        });
    }

    #[test]
    fn a_chunk_larger_than_the_buffer_is_read_in_pieces() {
        smol::block_on(async {
            let (tx, rx) = async_channel::unbounded::<Vec<u8>>();
            tx.send(b"abcdefg".to_vec()).await.unwrap();
            drop(tx);
            let mut r = ChannelReader::new(rx);
            let mut buf = [0u8; 3];
            assert_eq!(r.read(&mut buf).await.unwrap(), 3);
            assert_eq!(&buf, b"abc");
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"defg");
        });
    }
}
