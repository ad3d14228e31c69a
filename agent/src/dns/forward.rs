//! Forwarding names outside the cluster domain to the node's upstream resolvers: the query
//! goes out unchanged from a fresh socket (a new random source port each time), the first
//! upstream that answers with the same id wins, each is tried in turn with a timeout, and
//! the list is walked twice before giving up.

use std::net::SocketAddr;
use std::time::Duration;

use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpStream, UdpSocket};

use super::wire::message_id;

/// Why an upstream did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream resolver is configured")]
    NoUpstream,
    #[error("upstream {upstream}: {source}")]
    Io {
        upstream: SocketAddr,
        source: std::io::Error,
    },
    #[error("upstream {0} did not answer in time")]
    Timeout(SocketAddr),
    #[error("upstream {0} sent a malformed answer")]
    Malformed(SocketAddr),
}

/// The upstream resolvers and how long to wait for each.
#[derive(Clone, Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    rounds: usize,
}

/// The largest answer read from an upstream over UDP.
const UDP_BUFFER: usize = 4096;

impl Forwarder {
    /// `upstreams` less `own` (the server's own address: forwarding there would loop).
    pub fn new(upstreams: Vec<SocketAddr>, own: &[SocketAddr], timeout: Duration) -> Forwarder {
        let mut kept = Vec::new();
        for u in upstreams {
            if own.contains(&u) {
                tracing::warn!(upstream = %u, "not forwarding to the cluster DNS's own address");
            } else if !kept.contains(&u) {
                kept.push(u);
            }
        }
        Forwarder {
            upstreams: kept,
            timeout,
            rounds: 2,
        }
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// Sends `query` over UDP to each upstream in turn; answers the first reply.
    pub async fn udp(&self, query: &[u8]) -> Result<Vec<u8>, ForwardError> {
        self.each(query, false).await
    }

    /// Sends `query` over TCP (for clients that asked over TCP: their answer may be large).
    pub async fn tcp(&self, query: &[u8]) -> Result<Vec<u8>, ForwardError> {
        self.each(query, true).await
    }

    async fn each(&self, query: &[u8], tcp: bool) -> Result<Vec<u8>, ForwardError> {
        let mut last = ForwardError::NoUpstream;
        for _ in 0..self.rounds {
            for &up in &self.upstreams {
                let answer = if tcp {
                    self.tcp_once(up, query).await
                } else {
                    self.udp_once(up, query).await
                };
                match answer {
                    Ok(answer) => return Ok(answer),
                    Err(e) => {
                        tracing::debug!("forwarding a DNS query: {e}");
                        last = e;
                    }
                }
            }
        }
        Err(last)
    }

    async fn udp_once(&self, up: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ForwardError> {
        let io = |source| ForwardError::Io {
            upstream: up,
            source,
        };
        let local: SocketAddr = if up.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local).await.map_err(io)?;
        socket.connect(up).await.map_err(io)?;
        socket.send(query).await.map_err(io)?;
        let id = message_id(query);
        let receive = async {
            let mut buf = vec![0u8; UDP_BUFFER];
            loop {
                let n = socket.recv(&mut buf).await.map_err(io)?;
                // Anything but an answer to this query (a late answer to another) is ignored.
                if n >= 12 && message_id(&buf[..n]) == id && buf[2] & 0x80 != 0 {
                    buf.truncate(n);
                    return Ok(buf);
                }
            }
        };
        future::or(receive, async {
            smol::Timer::after(self.timeout).await;
            Err(ForwardError::Timeout(up))
        })
        .await
    }

    async fn tcp_once(&self, up: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ForwardError> {
        let io = |source| ForwardError::Io {
            upstream: up,
            source,
        };
        let exchange = async {
            let mut stream = TcpStream::connect(up).await.map_err(io)?;
            let len = u16::try_from(query.len()).map_err(|_| ForwardError::Malformed(up))?;
            let mut msg = len.to_be_bytes().to_vec();
            msg.extend_from_slice(query);
            stream.write_all(&msg).await.map_err(io)?;
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await.map_err(io)?;
            let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut answer).await.map_err(io)?;
            if answer.len() < 12 || message_id(&answer) != message_id(query) {
                return Err(ForwardError::Malformed(up));
            }
            Ok(answer)
        };
        future::or(exchange, async {
            smol::Timer::after(self.timeout).await;
            Err(ForwardError::Timeout(up))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_forwards_to_itself() {
        let own: SocketAddr = "127.0.0.77:53".parse().unwrap();
        let f = Forwarder::new(
            vec![
                own,
                "127.0.0.78:53".parse().unwrap(),
                "127.0.0.78:53".parse().unwrap(),
            ],
            &[own],
            Duration::from_secs(1),
        );
        assert_eq!(f.upstreams(), &["127.0.0.78:53".parse().unwrap()]);
    }

    #[test]
    fn answers_from_the_first_live_upstream_and_fails_when_none_is() {
        smol::block_on(async {
            // A stand-in upstream on loopback that echoes the query back as an answer.
            let up = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let up_addr = up.local_addr().unwrap();
            let dead = {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                s.local_addr().unwrap()
            };
            smol::spawn(async move {
                let mut buf = [0u8; 512];
                while let Ok((n, from)) = up.recv_from(&mut buf).await {
                    buf[2] |= 0x80;
                    let _ = up.send_to(&buf[..n], from).await;
                }
            })
            .detach();
            let query = [0xAB, 0xCD, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1];
            let f = Forwarder::new(vec![dead, up_addr], &[], Duration::from_millis(500));
            let answer = f.udp(&query).await.unwrap();
            assert_eq!(message_id(&answer), 0xABCD);
            assert!(answer[2] & 0x80 != 0);

            let f = Forwarder::new(vec![dead], &[], Duration::from_millis(200));
            assert!(f.udp(&query).await.is_err());
            let f = Forwarder::new(vec![], &[], Duration::from_millis(200));
            assert!(matches!(f.udp(&query).await, Err(ForwardError::NoUpstream)));
        });
    }
}
