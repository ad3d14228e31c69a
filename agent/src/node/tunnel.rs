//! The agent's tunnels to its servers (docs/design/tunnel.md), for a node behind NAT that
//! no server can dial: with `--tunnel`, one TLS connection (the node's certificate, the
//! cluster CA) to each server of the list, upgraded at `/skiff/v1/tunnel`; every stream a
//! server opens in it is served as a connection to the agent's own port is (logs, exec,
//! attach, port-forward, stats). A lost tunnel is dialled again after 1 s, doubling to
//! 30 s; TCP keepalive keeps the NAT's mapping and notices a dead path.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};

use super::logs::{self, LogSource};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// A tunnel up this long counts as a success: the next loss retries at once-ish.
const STABLE: Duration = Duration::from_secs(30);
const MAX_HEAD: usize = 16 * 1024;

/// Keeps a tunnel open to each of `servers`.
pub fn start(servers: &[String], tls: Arc<rustls::ClientConfig>, source: Arc<LogSource>) {
    for server in servers {
        let (server, tls, source) = (server.clone(), tls.clone(), source.clone());
        smol::spawn(async move {
            let mut delay = RETRY_MIN;
            loop {
                let started = Instant::now();
                match run(&server, &tls, &source).await {
                    Ok(()) => tracing::info!(%server, "tunnel closed"),
                    Err(e) => tracing::warn!(%server, "tunnel: {e}"),
                }
                if started.elapsed() >= STABLE {
                    delay = RETRY_MIN;
                }
                smol::Timer::after(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        })
        .detach();
    }
}

/// One tunnel to `server`, from the dial to its end.
async fn run(
    server: &str,
    tls: &Arc<rustls::ClientConfig>,
    source: &Arc<LogSource>,
) -> Result<(), String> {
    let (host, port) = api::client::parse_server(server).map_err(|e| e.to_string())?;
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let connect = async {
        let tcp = smol::net::TcpStream::connect((bare.as_str(), port))
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        let _ = tcp.set_nodelay(true);
        keepalive(&tcp);
        let name = rustls::pki_types::ServerName::try_from(bare.clone())
            .map_err(|e| format!("server name {bare:?}: {e}"))?;
        futures_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))
    };
    let mut stream = connect
        .or(async {
            smol::Timer::after(CONNECT_TIMEOUT).await;
            Err("timed out connecting".to_string())
        })
        .await?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: Upgrade\r\nUpgrade: {}\r\nUser-Agent: skiff-agent/{}\r\n\r\n",
        api::tunnel::PATH,
        api::tunnel::PROTOCOL,
        env!("CARGO_PKG_VERSION"),
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    // The head byte by byte: the session's first frames may follow it at once.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream
            .read(&mut byte)
            .or(async {
                smol::Timer::after(CONNECT_TIMEOUT).await;
                Err(std::io::ErrorKind::TimedOut.into())
            })
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if n == 0 || head.len() > MAX_HEAD {
            return Err("the server closed the connection without an answer".into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "101" {
        let line = head.lines().next().unwrap_or("");
        return Err(format!("the server refused the tunnel: {line}"));
    }
    tracing::info!(%server, "tunnel up");
    api::tunnel::accept(stream, |s| {
        let source = source.clone();
        smol::spawn(async move {
            if let Err(e) = logs::handle(s, source).await {
                tracing::debug!("tunnel stream: {e}");
            }
        })
        .detach();
    })
    .await
}

/// TCP keepalive: a probe after 30 s idle, every 10 s, 3 unanswered ones end it.
fn keepalive(tcp: &smol::net::TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let fd = tcp.as_fd();
    let _ = setsockopt(&fd, sockopt::KeepAlive, &true);
    let _ = setsockopt(&fd, sockopt::TcpKeepIdle, &30);
    let _ = setsockopt(&fd, sockopt::TcpKeepInterval, &10);
    let _ = setsockopt(&fd, sockopt::TcpKeepCount, &3);
}
