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
//! kubectl (1.31 and later) tunnels SPDY/3.1 in WebSocket binary messages
//! (`SPDY/3.1+portforward.k8s.io`; see [`super::spdy`]): for each local connection it opens
//! an error stream and a data stream, both with headers `streamtype`, `port` and
//! `requestid`. The server answers each SYN_STREAM, connects to the port once both streams of
//! a request are there, copies the data stream both ways, and at the end closes the data
//! stream and then the error stream (after writing why, if the connection failed). Plain
//! SPDY upgrades (kubectl's fallback when the WebSocket upgrade fails) are not served.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, FutureExt};

use super::exec::{switching_protocols, websocket_handshake};
use super::logs::{LogSource, Refusal};
use super::spdy;

/// The protocols served, most preferred first.
pub const PROTOCOLS: [&str; 3] = ["v4.channel.k8s.io", "portforward.k8s.io", SPDY_TUNNEL];

/// kubectl's SPDY-in-WebSocket protocol.
const SPDY_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

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
        // The channel protocols name the ports in the query (SPDY streams name theirs);
        // data channels are numbered per port: at most 127 ports fit in a channel byte.
        if h.protocol == SPDY_TUNNEL {
            Ok(h)
        } else if req.ports.is_empty() {
            Err(Refusal(
                400,
                "at least one port must be given in the ports parameter".into(),
            ))
        } else if req.ports.len() > 127 {
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
    let (mut sender, receiver) =
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
    if handshake.protocol == SPDY_TUNNEL {
        spdy_session(receiver, frames, Arc::new(req), source).await;
        writer.await;
        return;
    }
    let mut receiver = receiver;
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

/// The streams of one forwarded connection, by kubectl's `requestid`.
#[derive(Default)]
struct Request {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
}

/// A connection to the pod, by its data stream.
struct Forward {
    conn: Arc<smol::Async<TcpStream>>,
    _pump: smol::Task<()>,
}

/// Serves SPDY streams tunnelled in the WebSocket until the client closes it.
async fn spdy_session<T: AsyncRead + AsyncWrite + Unpin>(
    mut receiver: soketto::connection::Receiver<T>,
    frames: async_channel::Sender<Vec<u8>>,
    req: Arc<PortForwardRequest>,
    source: Arc<LogSource>,
) {
    let mut reader = spdy::Reader::default();
    let mut writer = spdy::Writer::default();
    let mut requests: HashMap<String, Request> = HashMap::new();
    let mut forwards: HashMap<u32, Forward> = HashMap::new();
    let mut msg = Vec::new();
    loop {
        msg.clear();
        if receiver.receive_data(&mut msg).await.is_err() {
            return;
        }
        reader.push(&msg);
        loop {
            let frame = match reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("port-forward: {e}");
                    return;
                }
            };
            match frame {
                spdy::Frame::SynStream {
                    stream_id, headers, ..
                } => {
                    if frames.send(writer.syn_reply(stream_id)).await.is_err() {
                        return;
                    }
                    let get = |name: &str| {
                        headers
                            .iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case(name))
                            .map(|(_, v)| v.as_str())
                    };
                    let port = get("port").and_then(|p| p.parse::<u16>().ok()).unwrap_or(0);
                    let id = get("requestid").unwrap_or("").to_string();
                    let r = requests.entry(id.clone()).or_default();
                    r.port = port;
                    match get("streamtype") {
                        Some("error") => r.error = Some(stream_id),
                        Some("data") => r.data = Some(stream_id),
                        _ => {
                            let _ = frames
                                .send(spdy::Writer::rst_stream(stream_id, spdy::INVALID_STREAM))
                                .await;
                            continue;
                        }
                    }
                    if let (Some(error), Some(data)) = (r.error, r.data) {
                        let port = r.port;
                        requests.remove(&id);
                        if let Some(f) = forward(&source, &req, port, data, error, &frames).await {
                            forwards.insert(data, f);
                        }
                    }
                }
                spdy::Frame::Data {
                    stream_id,
                    fin,
                    data,
                } => {
                    let Some(f) = forwards.get(&stream_id) else {
                        continue;
                    };
                    if !data.is_empty() && (&*f.conn).write_all(&data).await.is_err() {
                        let _ = f.conn.get_ref().shutdown(std::net::Shutdown::Both);
                    }
                    if fin {
                        let _ = f.conn.get_ref().shutdown(std::net::Shutdown::Write);
                    }
                }
                spdy::Frame::RstStream { stream_id } => {
                    if let Some(f) = forwards.remove(&stream_id) {
                        let _ = f.conn.get_ref().shutdown(std::net::Shutdown::Both);
                    }
                }
                spdy::Frame::Ping { id } => {
                    if frames.send(spdy::Writer::ping(id)).await.is_err() {
                        return;
                    }
                }
                spdy::Frame::GoAway => return,
                spdy::Frame::Ignored => {}
            }
        }
    }
}

/// Connects a request's streams to the port in the pod: a task copies the pod's bytes to
/// the data stream and then closes the data and error streams; a failure is written on the
/// error stream.
async fn forward(
    source: &Arc<LogSource>,
    req: &Arc<PortForwardRequest>,
    port: u16,
    data: u32,
    error: u32,
    frames: &async_channel::Sender<Vec<u8>>,
) -> Option<Forward> {
    let (src, r) = (source.clone(), req.clone());
    let connected = if port == 0 {
        Err("no valid port was given".to_string())
    } else {
        smol::unblock(move || connect_in_pod(&src, &r, port))
            .await
            .and_then(|tcp| smol::Async::new(tcp).map_err(|e| e.to_string()))
    };
    let conn = match connected {
        Ok(c) => Arc::new(c),
        Err(e) => {
            let message = format!("error forwarding port {port} to pod {}: {e}", req.pod);
            let _ = frames
                .send(spdy::Writer::data(error, false, message.as_bytes()))
                .await;
            let _ = frames.send(spdy::Writer::data(data, true, &[])).await;
            let _ = frames.send(spdy::Writer::data(error, true, &[])).await;
            return None;
        }
    };
    let (reader, frames) = (conn.clone(), frames.clone());
    let pump = smol::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        let mut r = &*reader;
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if frames
                        .send(spdy::Writer::data(data, false, &buf[..n]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = frames.send(spdy::Writer::data(data, true, &[])).await;
        let _ = frames.send(spdy::Writer::data(error, true, &[])).await;
    });
    Some(Forward { conn, _pump: pump })
}
