//! The agent's tunnel to a server (docs/design/tunnel.md): one TLS connection the agent
//! opens and upgrades with `GET` [`PATH`] (`Upgrade:` [`PROTOCOL`]), then a yamux session
//! on it. The server opens a stream per node-bound request ([`Opener`]); the agent serves
//! each stream the server opens ([`accept`]) as it serves a connection to its port.

use std::collections::VecDeque;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncWrite, FutureExt, Stream as _};

/// Where the agent asks for its tunnel (an upgrade on the API port).
pub const PATH: &str = "/skiff/v1/tunnel";
/// The `Upgrade` protocol the agent asks for and the server grants.
pub const PROTOCOL: &str = "skiff-tunnel/1";
/// The most streams one tunnel carries at once.
pub const MAX_STREAMS: usize = 1024;
/// How long opening a stream may take.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A stream of a tunnel: a byte stream both ways, closed on its own.
pub type Stream = yamux::Stream;

fn config() -> yamux::Config {
    let mut c = yamux::Config::default();
    c.set_max_num_streams(MAX_STREAMS);
    c
}

type Reply = async_channel::Sender<Result<Stream, String>>;

/// The server's end of a tunnel: opens streams to the agent. Cheap to clone; the session
/// lives while its driver (the future [`Opener::start`] answers) runs.
#[derive(Clone, Debug)]
pub struct Opener {
    requests: async_channel::Sender<Reply>,
}

impl Opener {
    /// Starts the opening side of a session on `socket` (the upgraded connection). The
    /// future drives the session and must be spawned; it ends, with why, when the
    /// connection does or when every `Opener` of it is dropped.
    pub fn start<T>(socket: T) -> (Opener, impl Future<Output = Result<(), String>> + Send)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = async_channel::bounded::<Reply>(64);
        let conn = yamux::Connection::new(socket, config(), yamux::Mode::Client);
        (Opener { requests: tx }, drive(conn, rx))
    }

    /// A new stream to the agent, or why there is none (the tunnel closed, or the open took
    /// longer than [`OPEN_TIMEOUT`]).
    pub async fn open(&self) -> Result<Stream, String> {
        let (tx, rx) = async_channel::bounded(1);
        let open = async {
            self.requests
                .send(tx)
                .await
                .map_err(|_| "the tunnel is closed".to_string())?;
            rx.recv()
                .await
                .map_err(|_| "the tunnel closed".to_string())?
        };
        open.or(async {
            smol::Timer::after(OPEN_TIMEOUT).await;
            Err("timed out opening a stream through the tunnel".to_string())
        })
        .await
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.requests.is_closed()
    }
}

/// The opening side's driver: serves open requests in order and keeps the session going
/// (streams the other side opens are refused by dropping them).
async fn drive<T>(
    mut conn: yamux::Connection<T>,
    requests: async_channel::Receiver<Reply>,
) -> Result<(), String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut requests = Box::pin(requests);
    let mut waiting: VecDeque<Reply> = VecDeque::new();
    let mut requests_open = true;
    let result = futures_lite::future::poll_fn(|cx| loop {
        while requests_open {
            match requests.as_mut().poll_next(cx) {
                Poll::Ready(Some(reply)) => waiting.push_back(reply),
                Poll::Ready(None) => requests_open = false,
                Poll::Pending => break,
            }
        }
        if !requests_open && waiting.is_empty() {
            // Every opener is gone: nobody can use the session any more.
            return Poll::Ready(Ok(()));
        }
        while !waiting.is_empty() {
            match conn.poll_new_outbound(cx) {
                Poll::Ready(Ok(stream)) => {
                    if let Some(reply) = waiting.pop_front() {
                        let _ = reply.try_send(Ok(stream));
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.to_string())),
                Poll::Pending => break,
            }
        }
        match conn.poll_next_inbound(cx) {
            // The agent opens no streams: any it does is dropped (closed).
            Poll::Ready(Some(Ok(_))) => continue,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e.to_string())),
            Poll::Ready(None) => return Poll::Ready(Ok(())),
            Poll::Pending => return Poll::Pending,
        }
    })
    .await;
    requests.close();
    for reply in waiting {
        let _ = reply.try_send(Err("the tunnel closed".into()));
    }
    result
}

/// The agent's end of a tunnel: every stream the server opens on `socket` goes to
/// `handle` (which spawns what serves it). Answers when the connection ends.
pub async fn accept<T>(socket: T, mut handle: impl FnMut(Stream)) -> Result<(), String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = yamux::Connection::new(socket, config(), yamux::Mode::Server);
    loop {
        match futures_lite::future::poll_fn(|cx| conn.poll_next_inbound(cx)).await {
            Some(Ok(stream)) => handle(stream),
            Some(Err(e)) => return Err(e.to_string()),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn streams_opened_by_the_server_are_served_by_the_agent() {
        smol::block_on(async {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let (a, b) = (smol::Async::new(a).unwrap(), smol::Async::new(b).unwrap());
            // The agent: echoes each stream's bytes, upper-cased.
            let agent = smol::spawn(accept(b, |mut s| {
                smol::spawn(async move {
                    let mut buf = Vec::new();
                    s.read_to_end(&mut buf).await.unwrap();
                    s.write_all(&buf.to_ascii_uppercase()).await.unwrap();
                    s.close().await.unwrap();
                })
                .detach();
            }));
            let (opener, driver) = Opener::start(a);
            let driver = smol::spawn(driver);
            let mut tasks = Vec::new();
            for i in 0..20 {
                let opener = opener.clone();
                tasks.push(smol::spawn(async move {
                    let mut s = opener.open().await.unwrap();
                    let text = format!("stream {i}");
                    s.write_all(text.as_bytes()).await.unwrap();
                    s.close().await.unwrap();
                    let mut back = String::new();
                    s.read_to_string(&mut back).await.unwrap();
                    assert_eq!(back, text.to_uppercase());
                }));
            }
            for t in tasks {
                t.await;
            }
            assert!(!opener.is_closed());
            // The agent goes: the session ends and opens fail at once.
            drop(agent);
            let _ = driver.await;
            assert!(opener.is_closed());
            assert!(opener.open().await.is_err());
        });
    }
}
