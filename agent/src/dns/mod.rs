//! Cluster DNS: a small DNS server on each node that answers the names of Services under
//! the cluster domain from a watch of Services and Endpoints, and forwards every other name
//! to the node's upstream resolvers; and the pods' `/etc/resolv.conf` and `/etc/hosts`.
//!
//! ```text
//! serve(&DnsSettings, Client).await -> Result<DnsServer, DnsError>   // stops when dropped
//! start_for_node(&DnsSettings, &Client) -> PodDns                    // detached, retries bind
//! resolv::write_pod_files(dir, &PodSpec, name, ns, pod_ip, &PodDns, taken) -> io::Result<Vec<MountSpec>>
//! zone::Zone::lookup(name, qtype) -> Lookup                          // the record logic
//! ```
//!
//! Pods learn only the address's IP (resolv.conf has no port): a server on another port than
//! 53 serves tests and tools, not pods. While the API has not been listed yet, cluster names
//! answer SERVFAIL (never a negative answer that resolvers would cache); when the API goes
//! away later, the last known records keep being served.
//!
//! The wire format is written by the `simple-dns` crate; queries are read by [`wire::Query`]
//! (a few lines, so that queries of any type can be routed). UDP answers larger than the
//! client takes are truncated (TC) and the client asks again over TCP. Forwarded queries go
//! out unchanged, over the transport the client used. No cache: the node's upstream resolver
//! (usually a caching stub or the site's router) does that.

pub mod forward;
pub mod resolv;
pub mod server;
pub mod watch;
pub mod wire;
pub mod zone;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use api::client::Client;
use smol::Task;

pub use resolv::{PodDns, ResolvConf};
pub use zone::Zone;

/// The cluster domain unless configured otherwise.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// How long one upstream has to answer one query.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// How the node's DNS server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsSettings {
    /// Do not run the server (pods still get `listen`'s address as their nameserver).
    pub disabled: bool,
    /// Where to listen, UDP and TCP; None: not started, and ClusterFirst pods use the node's
    /// resolvers. (The pod network's bridge address is the natural default.)
    pub listen: Option<SocketAddr>,
    /// `cluster.local`.
    pub cluster_domain: String,
    /// Where other names go; empty: the nameservers of `host_resolv_conf`.
    pub upstreams: Vec<SocketAddr>,
    /// The node's resolv.conf: upstreams, and the search domains pods inherit.
    pub host_resolv_conf: PathBuf,
    pub upstream_timeout: Duration,
}

impl Default for DnsSettings {
    fn default() -> DnsSettings {
        DnsSettings {
            disabled: false,
            listen: None,
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.into(),
            upstreams: Vec::new(),
            host_resolv_conf: PathBuf::from("/etc/resolv.conf"),
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
        }
    }
}

impl DnsSettings {
    /// What pods on this node are given.
    pub fn pod_dns(&self) -> PodDns {
        PodDns {
            cluster_dns: self.listen.map(|a| a.ip()),
            cluster_domain: self.cluster_domain.trim_matches('.').to_string(),
            host_resolv_conf: self.host_resolv_conf.clone(),
            ..PodDns::default()
        }
    }

    /// The upstreams: the configured ones, else the node's nameservers.
    pub fn effective_upstreams(&self) -> Vec<SocketAddr> {
        if self.upstreams.is_empty() {
            ResolvConf::read(&self.host_resolv_conf).nameserver_addrs()
        } else {
            self.upstreams.clone()
        }
    }
}

/// `IP`, `IP:PORT` or `[IPv6]:PORT`; port 53 when none is given.
pub fn parse_address(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| format!("{s:?} is not an address such as 10.42.0.1 or 127.0.0.1:5353"))
}

/// Why the DNS server could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("no listen address is configured")]
    NoAddress,
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running DNS server; dropping it stops it.
pub struct DnsServer {
    /// The address it answers on (UDP and TCP).
    pub addr: SocketAddr,
    /// The records it serves (for tests and diagnostics).
    pub zone: Arc<RwLock<Zone>>,
    _tasks: Vec<Task<()>>,
}

/// Binds the listen address and starts serving and watching.
pub async fn serve(settings: &DnsSettings, client: Client) -> Result<DnsServer, DnsError> {
    let addr = settings.listen.ok_or(DnsError::NoAddress)?;
    let (udp, tcp) = server::bind(addr)
        .await
        .map_err(|source| DnsError::Bind { addr, source })?;
    let bound = udp.local_addr().unwrap_or(addr);
    let upstreams = {
        let s = settings.clone();
        smol::unblock(move || s.effective_upstreams()).await
    };
    let forwarder = forward::Forwarder::new(upstreams, &[addr, bound], settings.upstream_timeout);
    if forwarder.upstreams().is_empty() {
        tracing::warn!("cluster DNS: no upstream resolver: names outside the cluster will fail");
    }
    let zone = Arc::new(RwLock::new(Zone::new(&settings.cluster_domain)));
    let resolver = Arc::new(server::Resolver {
        zone: zone.clone(),
        forwarder,
    });
    let tasks = vec![
        smol::spawn(watch::keep_zone(client, zone.clone())),
        smol::spawn(server::serve_udp(udp, resolver.clone())),
        smol::spawn(server::serve_tcp(tcp, resolver)),
    ];
    tracing::info!(
        address = %bound,
        domain = %settings.cluster_domain,
        "cluster DNS serving"
    );
    Ok(DnsServer {
        addr: bound,
        zone,
        _tasks: tasks,
    })
}

/// Starts the node's DNS server in the background unless disabled or without an address;
/// a bind that fails (the address may appear later, with the pod network) is retried.
/// Answers what pods on this node are given.
pub fn start_for_node(settings: &DnsSettings, client: &Client) -> PodDns {
    let pod_dns = settings.pod_dns();
    if settings.disabled {
        tracing::info!("cluster DNS disabled");
        return pod_dns;
    }
    if settings.listen.is_none() {
        tracing::info!("no cluster DNS address: pods use the node's resolvers");
        return pod_dns;
    }
    let (settings, client) = (settings.clone(), client.clone());
    smol::spawn(async move {
        let mut warned = false;
        loop {
            match serve(&settings, client.clone()).await {
                Ok(server) => {
                    // Serves for as long as the agent runs.
                    future_pending().await;
                    drop(server);
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!("cluster DNS: {e}; retrying");
                        warned = true;
                    }
                    smol::Timer::after(Duration::from_secs(5)).await;
                }
            }
        }
    })
    .detach();
    pod_dns
}

async fn future_pending() {
    futures_lite::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_port_53() {
        assert_eq!(
            parse_address("10.42.0.1"),
            Ok("10.42.0.1:53".parse().unwrap())
        );
        assert_eq!(
            parse_address("127.0.0.77:5353"),
            Ok("127.0.0.77:5353".parse().unwrap())
        );
        assert_eq!(parse_address("[::1]:53"), Ok("[::1]:53".parse().unwrap()));
        assert!(parse_address("dns.local").is_err());
    }

    #[test]
    fn upstreams_come_from_the_node_resolv_conf_unless_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 127.0.0.78\nnameserver 127.0.0.79\n").unwrap();
        let mut s = DnsSettings {
            host_resolv_conf: path,
            ..Default::default()
        };
        assert_eq!(
            s.effective_upstreams(),
            vec![
                "127.0.0.78:53".parse().unwrap(),
                "127.0.0.79:53".parse().unwrap()
            ]
        );
        s.upstreams = vec!["127.0.0.80:5300".parse().unwrap()];
        assert_eq!(s.effective_upstreams(), s.upstreams);
        s.listen = Some("127.0.0.77:5353".parse().unwrap());
        s.cluster_domain = "edge.local.".into();
        let p = s.pod_dns();
        assert_eq!(p.cluster_dns, Some("127.0.0.77".parse().unwrap()));
        assert_eq!(p.cluster_domain, "edge.local");
    }
}
