//! `portForward` on the agent's endpoint over WebSocket (what the kubelet serves at
//! `/portForward/{ns}/{pod}?ports=80,8080`; the API server proxies `pods/NAME/portforward`
//! here after the upgrade).
//!
//! The WebSocket port-forward protocol (`v4.channel.k8s.io`, as the Python client speaks it,
//! or `portforward.k8s.io`): each port asked for gets two channels, data (`2 * i`) and error
//! (`2 * i + 1`). The server's first message on each channel is the port, two bytes little
//! endian; after that data messages carry the bytes of one TCP connection to the port inside
//! the pod's network namespace, and an error message says why that connection failed. The
//! session ends (the WebSocket closes) when every connection has ended.
//!
//! kubectl's port-forward speaks SPDY (tunnelled in WebSocket or plain), which this endpoint
//! does not serve yet.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, FutureExt};

use super::exec::{switching_protocols, websocket_handshake};
use super::logs::{LogSource, Refusal};

/// The protocols served, most preferred first.
pub const PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "portforward.k8s.io"];

/// A parsed `portForward` request.
#[derive(Debug, PartialEq, Eq)]
pub struct PortForwardRequest {
    pub namespace: String,
    pub pod: String,
    pub ports: Vec<u16>,
}

/// Parses the path segments after `portForward` and the query string.
pub fn parse_request(segs: &[&str], query: &str) -> Result<PortForwardRequest, Refusal> {
    let [ns, pod] = segs else {
        return Err(Refusal(404, "no such path".into()));
    };
    if ns.is_empty() || pod.is_empty() {
        return Err(Refusal(404, "no such path".into()));
    }
    let mut ports = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "ports" || k == "port" {
            for p in v.split(',').filter(|p| !p.is_empty()) {
                match p.trim().parse::<u16>() {
                    Ok(n) if n > 0 => ports.push(n),
                    _ => return Err(Refusal(400, format!("invalid port {p:?}"))),
                }
            }
        }
    }
    if ports.is_empty() {
        return Err(Refusal(
            400,
            "at least one port must be given in the ports parameter".into(),
        ));
    }
    Ok(PortForwardRequest {
        namespace: ns.to_string(),
        pod: pod.to_string(),
        ports,
    })
}

/// Connects to `127.0.0.1:port` inside the pod's network namespace (blocking). Network
/// namespaces are per thread, so a thread of its own enters it, connects, and ends; the socket
/// stays in the pod's namespace.
fn connect_in_pod(
    source: &LogSource,
    req: &PortForwardRequest,
    port: u16,
) -> Result<TcpStream, String> {
    let pod = super::logs::find_pod(source, &req.namespace, &req.pod).map_err(|r| r.1)?;
    let sandbox = source
        .runtime
        .sandbox(&pod.metadata.uid)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("pod {} has no sandbox on this node", req.pod))?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Some(ns_path) = sandbox.net_ns_path() else {
        return TcpStream::connect(addr).map_err(|e| e.to_string());
    };
    let ns = std::fs::File::open(&ns_path).map_err(|e| format!("{}: {e}", ns_path.display()))?;
    std::thread::spawn(move || {
        crate::sys::setns_net(&ns).map_err(|e| format!("entering the pod's network: {e}"))?;
        TcpStream::connect(addr).map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "the connecting thread panicked".to_string())?
}

fn port_frame(channel: u8, port: u16) -> Vec<u8> {
    let p = port.to_le_bytes();
    vec![channel, p[0], p[1]]
}

/// Serves a port-forward after the request head: checks, upgrades, forwards.
pub async fn serve<S>(mut stream: S, head: &str, req: PortForwardRequest, source: Arc<LogSource>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let checked = websocket_handshake(head, &PROTOCOLS).and_then(|h| {
        // Data channels are numbered per port: at most 127 ports fit in a channel byte.
        if req.ports.len() > 127 {
            Err(Refusal(400, "too many ports".into()))
        } else {
            Ok(h)
        }
    });
    let handshake = match checked {
        Ok(h) => h,
        Err(refusal) => {
            let _ = super::logs::refuse(&mut stream, refusal).await;
            return;
        }
    };
    if stream
        .write_all(switching_protocols(&handshake).as_bytes())
        .await
        .is_err()
        || stream.flush().await.is_err()
    {
        return;
    }
    let (mut sender, mut receiver) =
        soketto::connection::Builder::new(stream, soketto::connection::Mode::Server).finish();
    let (frames, queued) = async_channel::bounded::<Vec<u8>>(16);
    let writer = smol::spawn(async move {
        while let Ok(f) = queued.recv().await {
            if sender.send_binary(&f).await.is_err() {
                return;
            }
            if queued.is_empty() && sender.flush().await.is_err() {
                return;
            }
        }
        let _ = sender.close().await;
    });
    let req = Arc::new(req);
    // One connection per port, each with a pump from the pod to the client.
    let mut to_pod: Vec<Option<Arc<smol::Async<TcpStream>>>> = Vec::new();
    let mut pumps = Vec::new();
    for (i, &port) in req.ports.iter().enumerate() {
        let (data, error) = (2 * i as u8, 2 * i as u8 + 1);
        for ch in [data, error] {
            if frames.send(port_frame(ch, port)).await.is_err() {
                return;
            }
        }
        let (src, r) = (source.clone(), req.clone());
        let connected = smol::unblock(move || connect_in_pod(&src, &r, port))
            .await
            .and_then(|tcp| smol::Async::new(tcp).map_err(|e| e.to_string()));
        match connected {
            Ok(conn) => {
                let conn = Arc::new(conn);
                to_pod.push(Some(conn.clone()));
                let frames = frames.clone();
                pumps.push(smol::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    let mut reader = &*conn;
                    loop {
                        match reader.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                let mut f = Vec::with_capacity(n + 1);
                                f.push(data);
                                f.extend_from_slice(&buf[..n]);
                                if frames.send(f).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }));
            }
            Err(e) => {
                to_pod.push(None);
                let message = format!("error forwarding port {port} to pod {}: {e}", req.pod);
                let mut f = vec![error];
                f.extend_from_slice(message.as_bytes());
                let _ = frames.send(f).await;
            }
        }
    }
    let pods_done = async move {
        for p in pumps {
            p.await;
        }
    };
    let input = async move {
        let mut msg = Vec::new();
        loop {
            msg.clear();
            if receiver.receive_data(&mut msg).await.is_err() {
                return;
            }
            let Some((&channel, payload)) = msg.split_first() else {
                continue;
            };
            // Only data channels (even) carry bytes to the pod.
            if channel % 2 != 0 || payload.is_empty() {
                continue;
            }
            if let Some(Some(conn)) = to_pod.get_mut(usize::from(channel / 2)) {
                if (&**conn).write_all(payload).await.is_err() {
                    to_pod[usize::from(channel / 2)] = None;
                }
            }
        }
    };
    pods_done.or(input).await;
    drop(frames);
    writer.await;
}
