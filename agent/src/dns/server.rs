//! The listeners: UDP (answers that do not fit are truncated, and the client asks again
//! over TCP) and TCP (length-prefixed messages, several per connection). Each query is
//! answered from the [`Zone`] or forwarded upstream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream, UdpSocket};

use super::forward::Forwarder;
use super::wire::{self, Query, Reply};
use super::zone::{Lookup, Zone};

/// Queries handled at once (forwarding can wait seconds); more are dropped, and their
/// clients ask again.
const MAX_IN_FLIGHT: usize = 256;
/// A TCP connection that sends nothing for this long is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// What answering needs.
pub struct Resolver {
    pub zone: Arc<RwLock<Zone>>,
    pub forwarder: Forwarder,
}

/// How a query arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Resolver {
    /// Answers one message; None when it deserves no answer (a response, or garbage too
    /// short to carry an id).
    pub async fn answer(&self, msg: &[u8], transport: Transport) -> Option<Vec<u8>> {
        let query = match Query::parse(msg) {
            Ok(q) => q,
            Err(wire::WireError::NotAQuery) => return None,
            Err(_) if msg.len() < 12 => return None,
            Err(_) => return Some(wire::bare(wire::message_id(msg), wire::FORMERR)),
        };
        let max = match transport {
            Transport::Udp => Some(query.max_udp_size()),
            Transport::Tcp => None,
        };
        if query.opcode != 0 {
            let reply = Reply {
                rcode: wire::NOTIMP,
                ..Default::default()
            };
            return Some(wire::write_reply(&query, &reply, max));
        }
        let lookup = {
            let zone = self.zone.read().unwrap_or_else(|p| p.into_inner());
            let lookup = zone.lookup(&query.name(), query.qtype);
            match lookup {
                Lookup::Outside => None,
                other => Some((other, zone.soa())),
            }
        };
        let Some((lookup, soa)) = lookup else {
            return Some(self.forward(msg, &query, transport).await);
        };
        let in_class = matches!(query.qclass, 1 | 255);
        let reply = match lookup {
            Lookup::Found { .. } | Lookup::NxDomain if !in_class => Reply {
                rcode: wire::REFUSED,
                ..Default::default()
            },
            Lookup::NotReady | Lookup::Outside => Reply {
                rcode: wire::SERVFAIL,
                ..Default::default()
            },
            Lookup::NxDomain => Reply {
                rcode: wire::NXDOMAIN,
                authoritative: true,
                authority: vec![soa],
                ..Default::default()
            },
            Lookup::Found {
                answers,
                additional,
            } => {
                // NODATA carries the SOA, for negative caching (RFC 2308).
                let authority = if answers.is_empty() {
                    vec![soa]
                } else {
                    Vec::new()
                };
                Reply {
                    rcode: wire::NOERROR,
                    authoritative: true,
                    answers,
                    authority,
                    additional,
                }
            }
        };
        Some(wire::write_reply(&query, &reply, max))
    }

    async fn forward(&self, msg: &[u8], query: &Query, transport: Transport) -> Vec<u8> {
        let answer = match transport {
            Transport::Udp => self.forwarder.udp(msg).await,
            Transport::Tcp => self.forwarder.tcp(msg).await,
        };
        match answer {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(name = %query.name(), "no upstream answered: {e}");
                let reply = Reply {
                    rcode: wire::SERVFAIL,
                    ..Default::default()
                };
                let max = (transport == Transport::Udp).then(|| query.max_udp_size());
                wire::write_reply(query, &reply, max)
            }
        }
    }
}

/// Answers UDP queries on `socket` until it fails.
pub async fn serve_udp(socket: UdpSocket, resolver: Arc<Resolver>) {
    let socket = Arc::new(socket);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                // ICMP errors of earlier sends surface here on some kernels: keep serving.
                tracing::debug!("cluster DNS: udp receive: {e}");
                smol::Timer::after(Duration::from_millis(10)).await;
                continue;
            }
        };
        if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let msg = buf[..n].to_vec();
        let (socket, resolver, in_flight) = (socket.clone(), resolver.clone(), in_flight.clone());
        smol::spawn(async move {
            if let Some(answer) = resolver.answer(&msg, Transport::Udp).await {
                if let Err(e) = socket.send_to(&answer, from).await {
                    tracing::debug!(%from, "cluster DNS: udp send: {e}");
                }
            }
            in_flight.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
}

/// Answers TCP connections on `listener`.
pub async fn serve_tcp(listener: TcpListener, resolver: Arc<Resolver>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                smol::spawn(serve_connection(stream, resolver.clone())).detach();
            }
            Err(e) => {
                tracing::warn!("cluster DNS: tcp accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn serve_connection(mut stream: TcpStream, resolver: Arc<Resolver>) {
    loop {
        let read = async {
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await?;
            let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut msg).await?;
            Ok::<_, std::io::Error>(msg)
        };
        let idle = async {
            smol::Timer::after(TCP_IDLE).await;
            Err(std::io::ErrorKind::TimedOut.into())
        };
        let Ok(msg) = future::or(read, idle).await else {
            return;
        };
        let Some(answer) = resolver.answer(&msg, Transport::Tcp).await else {
            return;
        };
        let Ok(len) = u16::try_from(answer.len()) else {
            return;
        };
        let mut out = len.to_be_bytes().to_vec();
        out.extend_from_slice(&answer);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Binds UDP and TCP on `addr` (the same port for both; port 0 picks one free for both).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    // With port 0, the UDP port picked may be taken for TCP: try a few.
    for _ in 0..10 {
        let udp = UdpSocket::bind(addr).await?;
        let bound = udp.local_addr()?;
        match TcpListener::bind(bound).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if addr.port() != 0 => return Err(e),
            Err(_) => continue,
        }
    }
    Err(std::io::ErrorKind::AddrInUse.into())
}
