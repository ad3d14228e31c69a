//! The node: joining the cluster, registering the Node, heartbeats, and the agent's main
//! loop that ties the API, the image store, the runtime and the pod workers together.
//!
//! ```text
//! run(AgentConfig) -> Result<(), AgentError>          // blocks forever
//! credentials::join(servers, token, node_name, addresses, data_dir).await -> Result<Credentials, JoinError>
//! Credentials::load(data_dir) -> Result<Option<Credentials>, JoinError>
//! register::build_node(&NodeFacts, &NodeSettings, Time) -> Node
//! register::register(&Client, &Node).await ; register::heartbeat(&Client, name, since).await
//! logs::tls_config(&Credentials, Arc<LiveCertificate>) -> Result<Arc<rustls::ServerConfig>, LogServerError>
//! rotation::Rotation { .. }.run().await     // renews the node certificate before it expires
//! logs::serve(TcpListener, Arc<ServerConfig>, Arc<LogSource>).await   // the log endpoint,
//!     // which also serves exec/attach (exec.rs) and port-forward (portforward.rs, spdy.rs)
//! ```
//!
//! The agent also runs a [`LogKeeper`] thread (once a second: time-stamps, rotates and prunes
//! container logs) and the HTTPS log endpoint on `log_port`, whose port it publishes in
//! `Node.status.daemonEndpoints.kubeletEndpoint`.

pub mod blobs;
pub mod credentials;
pub mod exec;
pub mod facts;
pub mod lease;
pub mod logs;
pub mod portforward;
pub mod register;
pub mod rotation;
pub mod spdy;
pub mod stats;
pub mod tunnel;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::FutureExt;

use api::core::Taint;
use api::meta::Time;

pub use credentials::{Credentials, JoinError};
pub use facts::NodeFacts;
pub use register::{NodeSettings, SettingError};

use crate::image::{
    cli::images_dir, cli::registries_file, ImageStore, PullOptions, RegistryConfig,
};
use crate::pods::{CacheWriter, Context, PodCache, PodManager};
use crate::runtime::logs::{LogKeeper, LogLimits};
use crate::runtime::{Runtime, RuntimeConfig};

/// Everything the agent is started with.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The cluster's servers, `https://host:port` (the API client fails over between them);
    /// needed for the first join, and a later list replaces the stored one.
    pub servers: Vec<String>,
    /// The join token; needed only for the first join.
    pub token: Option<String>,
    pub data_dir: PathBuf,
    /// Runtime state (sandboxes, container records), normally on a tmpfs.
    pub run_dir: PathBuf,
    pub node_name: String,
    pub node_ip: Option<String>,
    pub labels: Vec<(String, String)>,
    pub taints: Vec<Taint>,
    pub max_pods: u32,
    pub allow_privileged: bool,
    pub cgroup_parent: String,
    /// How often the node Lease is renewed (and the status looked at).
    pub heartbeat: Duration,
    /// How often the Node's status is posted when nothing in it changed (kubelet's
    /// nodeStatusReportFrequency); a change is posted at once.
    pub status_report: Duration,
    /// The log endpoint's port; 0 picks a free one (the one published in the Node).
    pub log_port: u16,
    /// Size cap and file count of container logs.
    pub log_limits: LogLimits,
    /// Do not run the service proxy (no iptables rules for Services on this node).
    pub disable_proxy: bool,
    /// Do not enforce NetworkPolicies on this node (its policy chains are emptied).
    pub disable_network_policy: bool,
    /// A k3s `registries.yaml` (mirrors, rewrites, credentials, CAs), merged over the data
    /// dir's `registries.json`.
    pub registries_config: Option<PathBuf>,
    /// The cluster's Service range (the server's `--service-cidr`): connections to it that
    /// no Service takes are refused on this node.
    pub service_cidr: Option<crate::net::Ipv4Cidr>,
    /// Where the built-in ingress proxy listens; None: it does not run (`--disable-ingress`).
    pub ingress: Option<crate::ingress::IngressConfig>,
    /// The cluster's pod range and the bridge name.
    pub pod_network: crate::net::PodNetworkSettings,
    /// The node's cluster DNS server and what pods' resolv.conf say.
    pub dns: crate::dns::DnsSettings,
    /// In `skiff server`: the server's in-process connections to this agent's endpoint.
    pub local_connections: Option<logs::LocalConnections>,
    /// Keep a tunnel open to every server, for a node the servers cannot dial (behind NAT):
    /// node-bound requests come through it (docs/design/tunnel.md).
    pub tunnel: bool,
    /// Share image layers with the nodes of the same `topology.kubernetes.io/zone`: ask a
    /// layer's home node before the registry, and serve layers to them
    /// (docs/design/site-images.md).
    pub share_images: bool,
}

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Join(#[from] JoinError),
    #[error("container runtime: {0}")]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("image store: {0}")]
    Image(#[from] crate::image::ImageError),
    #[error(transparent)]
    Cache(#[from] crate::pods::CacheError),
    #[error("API client: {0}")]
    Client(#[from] api::client::ClientError),
    #[error("the node certificate: {0}")]
    Certificate(#[from] api::tls::LiveCertError),
    #[error("pod network: {0}")]
    Network(#[from] crate::net::NetError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the node is joined to {joined}, not {given}: remove {dir} to join another cluster")]
    OtherServer {
        joined: String,
        given: String,
        dir: PathBuf,
    },
}

/// Loads the stored credentials, or joins with the token. A server list given on a later
/// start replaces the stored one if they share a server (a server added to or removed from
/// the cluster); one with no server in common is refused, as it is another cluster's.
pub async fn credentials(cfg: &AgentConfig) -> Result<Credentials, AgentError> {
    let given = credentials::server_list(&cfg.servers);
    if let Some(mut c) = Credentials::load(&cfg.data_dir)? {
        if !given.is_empty() && given != c.servers {
            if !given.iter().any(|g| c.servers.contains(g)) {
                return Err(AgentError::OtherServer {
                    joined: c.servers.join(","),
                    given: given.join(","),
                    dir: cfg.data_dir.clone(),
                });
            }
            Credentials::store_servers(&cfg.data_dir, &given)?;
            tracing::info!(servers = %given.join(","), was = %c.servers.join(","), "the cluster's server list changed");
            c.servers = given;
        }
        return Ok(c);
    }
    let (false, Some(token)) = (given.is_empty(), &cfg.token) else {
        return Err(JoinError::NotJoined.into());
    };
    tracing::info!(servers = %given.join(","), node = %cfg.node_name, "joining the cluster");
    let address = match &cfg.node_ip {
        Some(ip) => ip.parse().ok(),
        None => facts::local_address_towards(&given[0]),
    };
    let addresses: Vec<std::net::IpAddr> = address.into_iter().collect();
    Ok(credentials::join(&given, token, &cfg.node_name, &addresses, &cfg.data_dir).await?)
}

/// The node's registries.yaml: its own file if it has one, else the one its server hands out
/// (`/skiff/v1/registries`), kept in the data dir for starts without the server.
async fn registries_yaml(
    cfg: &AgentConfig,
    client: &api::client::Client,
) -> Result<RegistryConfig, AgentError> {
    if let Some(path) = cfg.registries_config.as_ref().filter(|p| p.exists()) {
        return Ok(RegistryConfig::load_yaml(path)?);
    }
    let kept = cfg.data_dir.join("registries.server.yaml");
    // Not long: a node starting without its server runs its pods from the local cache.
    let fetch = client.request("GET", "/skiff/v1/registries", None, "application/yaml");
    let timeout = async {
        smol::Timer::after(std::time::Duration::from_secs(3)).await;
        Err(api::client::ClientError::Decode(
            "no answer within 3 s".into(),
        ))
    };
    match futures_lite::future::or(fetch, timeout).await {
        Ok(r) if r.status == 200 => {
            let text = String::from_utf8_lossy(&r.body).into_owned();
            let parsed = RegistryConfig::from_yaml("the server's registries.yaml", &text)?;
            if let Err(e) = std::fs::write(&kept, &text) {
                tracing::warn!("cannot keep the server's registries.yaml: {e}");
            }
            Ok(parsed)
        }
        Ok(r) if r.status == 404 => {
            let _ = std::fs::remove_file(&kept);
            Ok(RegistryConfig::default())
        }
        Ok(r) => {
            tracing::warn!(
                status = r.status,
                "cannot read the server's registries.yaml; using the kept copy"
            );
            Ok(RegistryConfig::load_yaml(&kept)?)
        }
        Err(e) => {
            tracing::warn!("cannot read the server's registries.yaml ({e}); using the kept copy");
            Ok(RegistryConfig::load_yaml(&kept)?)
        }
    }
}

/// Runs the agent: join (once), register, heartbeat, pods. Returns only on a fatal error.
pub fn run(cfg: AgentConfig) -> Result<(), AgentError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| AgentError::Io {
        what: "create",
        path: cfg.data_dir.clone(),
        source,
    })?;
    // On the executor's threads: this thread would otherwise compete for the reactor.
    api::runtime::run(async move {
        let creds = credentials(&cfg).await?;
        // The node's certificate, for the API client and the endpoint alike; renewed in
        // place before it expires.
        let live = api::tls::LiveCertificate::new(&creds.cert_pem, &creds.key_pem)?;
        let client = creds.live_client(live.clone())?;
        smol::spawn(
            rotation::Rotation {
                data_dir: cfg.data_dir.clone(),
                node_name: cfg.node_name.clone(),
                client: client.clone(),
                live: live.clone(),
                cert_pem: creds.cert_pem.clone(),
            }
            .run(),
        )
        .detach();
        let node_ip = match &cfg.node_ip {
            Some(ip) => ip.clone(),
            None => facts::local_address_towards(creds.server())
                .map(|a| a.to_string())
                .unwrap_or_default(),
        };

        let mut runtime_cfg = RuntimeConfig::new(&cfg.run_dir, cfg.cgroup_parent.clone());
        runtime_cfg.allow_privileged = cfg.allow_privileged;
        let runtime = smol::unblock(move || Runtime::new(runtime_cfg)).await?;
        let images = ImageStore::open(&images_dir(&cfg.data_dir))?;
        let cache_path = cfg.data_dir.join("pods.redb");
        let cache = smol::unblock(move || PodCache::open(&cache_path)).await?;
        let mut registries = RegistryConfig::load(&registries_file(&cfg.data_dir))?;
        let yaml = registries_yaml(&cfg, &client).await?;
        registries.merge_yaml(yaml);
        if !registries.mirrors.is_empty() {
            tracing::info!(mirrored = ?registries.mirrors.keys().collect::<Vec<_>>(), "registry mirrors");
        }
        // The node's certificate and the cluster CA: for the tunnel and for the site's peers.
        let node_tls = api::client::tls_config(&api::client::ClientConfig {
            client_identity: Some(live.clone()),
            client_cert_pem: None,
            client_key_pem: None,
            ..creds.client_config()
        })
        .map(Arc::new);
        let site = match (&node_tls, cfg.share_images) {
            (Ok(tls), true) => Some(Arc::new(crate::image::peers::Site::new(
                &cfg.node_name,
                client.clone(),
                tls.clone(),
                images.clone(),
                registries.clone(),
            ))),
            (Err(e), true) => {
                tracing::error!("image sharing off: {e}");
                None
            }
            (_, false) => None,
        };
        let pull_options = PullOptions {
            registries,
            platform: None,
            site: site.clone(),
        };

        let net_cfg = crate::net::NetConfig {
            settings: cfg.pod_network.clone(),
            state_dir: cfg.data_dir.join("net"),
            node_name: cfg.node_name.clone(),
            node_ip: node_ip.clone(),
        };
        let network = smol::unblock(move || crate::net::Network::open(net_cfg)).await?;
        smol::spawn(network.clone().follow_nodes(client.clone())).detach();

        let runtime = Arc::new(runtime);
        let cache = Arc::new(cache);
        let pods_dir = cfg.data_dir.join("pods");
        start_log_keeper(pods_dir.clone(), cfg.log_limits);
        let log_source = Arc::new(logs::LogSource {
            node_name: cfg.node_name.clone(),
            pods_dir: pods_dir.clone(),
            cache: cache.clone(),
            runtime: runtime.clone(),
            site,
        });
        if let Some(local) = cfg.local_connections.clone() {
            smol::spawn(logs::serve_local(local, log_source.clone())).detach();
        }
        if cfg.tunnel {
            match &node_tls {
                Ok(tls) => tunnel::start(&creds.servers, tls.clone(), log_source.clone()),
                Err(e) => tracing::error!("no tunnel to the servers: {e}"),
            }
        }
        let log_port = start_log_endpoint(&creds, live, cfg.log_port, log_source).await;

        let mut labels: std::collections::BTreeMap<String, String> =
            cfg.labels.iter().cloned().collect();
        if let Some(ingress) = &cfg.ingress {
            match crate::ingress::start(client.clone(), ingress.clone()).await {
                // The label tells the server this node serves Ingresses (their status lists
                // the addresses of such nodes).
                Ok(()) => {
                    labels.insert(
                        api::networking::PROXY_NODE_LABEL.to_string(),
                        "true".to_string(),
                    );
                }
                Err(e) => tracing::error!(
                    http = %ingress.http, https = %ingress.https,
                    "ingress proxy not started: Ingresses are not served on this node: {e}"
                ),
            }
        }
        let storage_dir = crate::storage::storage_dir(&cfg.data_dir);
        let settings = NodeSettings {
            name: cfg.node_name.clone(),
            internal_ip: node_ip.clone(),
            labels,
            annotations: [
                (
                    api::storage::NODE_LOCAL_PATH_ANNOTATION.to_string(),
                    storage_dir.display().to_string(),
                ),
                (
                    crate::image::peers::SHARING_ANNOTATION.to_string(),
                    cfg.share_images.to_string(),
                ),
            ]
            .into(),
            taints: cfg.taints.clone(),
            max_pods: cfg.max_pods,
            kubelet_port: log_port,
        };
        smol::spawn(crate::storage::remove_deleted_volumes(
            client.clone(),
            cfg.node_name.clone(),
            storage_dir,
        ))
        .detach();
        let data_dir = cfg.data_dir.clone();
        let node_facts = smol::unblock(move || NodeFacts::gather(&data_dir)).await;
        smol::spawn(keep_registered(
            client.clone(),
            node_facts,
            settings,
            cfg.heartbeat,
            cfg.status_report,
        ))
        .detach();

        if !cfg.disable_proxy {
            if let Err(e) = crate::proxy::start(
                client.clone(),
                crate::proxy::ProxyConfig {
                    rules: crate::proxy::rules::RuleConfig {
                        cluster_cidr: Some(cfg.pod_network.cluster_cidr.to_string()),
                        service_cidr: cfg.service_cidr.map(|c| c.to_string()),
                    },
                    node_name: Some(cfg.node_name.clone()),
                    node_ip: Some(node_ip.clone()).filter(|ip| !ip.is_empty()),
                    ..Default::default()
                },
            ) {
                tracing::error!("service proxy not started: Services will not work here: {e}");
            }
        }

        if cfg.disable_network_policy {
            let iptables = crate::proxy::Iptables::default();
            if let Err(e) = smol::unblock(move || crate::netpol::clear(&iptables)).await {
                tracing::warn!("cannot remove the NetworkPolicy rules of an earlier run: {e}");
            }
        } else if let Err(e) = crate::netpol::start(
            client.clone(),
            crate::netpol::NetpolConfig::new(&cfg.node_name),
        ) {
            tracing::error!("NetworkPolicies are not enforced on this node: {e}");
        }

        let mut dns_settings = cfg.dns.clone();
        if dns_settings.listen.is_none() && !dns_settings.disabled {
            // The cluster DNS server listens on the bridge address (the first of the node's
            // podCIDR). A node that has had its podCIDR remembers it; on a first start it
            // arrives with the Node's registration.
            if network.pod_cidr().is_none() {
                let wait = async {
                    network.ready().await;
                };
                futures_lite::future::or(wait, async {
                    smol::Timer::after(Duration::from_secs(15)).await;
                })
                .await;
            }
            dns_settings.listen = network
                .pod_cidr()
                .and_then(|c| c.nth(1))
                .map(|ip| std::net::SocketAddr::new(ip.into(), 53));
        }
        let dns = crate::dns::start_for_node(&dns_settings, &client);
        let manager = PodManager::new(Context {
            runtime,
            images,
            events: crate::pods::events::EventRecorder::start(client.clone(), &cfg.node_name),
            client,
            cache_writes: CacheWriter::start(cache.clone()),
            cache,
            node_name: cfg.node_name.clone(),
            node_ip,
            network,
            pods_dir,
            leftovers: Default::default(),
            pull_options,
            allow_privileged: cfg.allow_privileged,
            dns,
        });
        // systemd (Type=notify): ready once the pods are being run, from the local cache
        // when the server is away (the Node registers in the background).
        if let Err(e) = api::notify::ready("running pods") {
            tracing::warn!("cannot notify systemd: {e}");
        }
        manager.run().await;
        Ok(())
    })
}

/// Stamps, rotates and prunes container logs once a second, on its own thread (file I/O).
fn start_log_keeper(pods_dir: PathBuf, limits: LogLimits) {
    let spawned = std::thread::Builder::new()
        .name("log-keeper".into())
        .spawn(move || {
            let mut keeper = LogKeeper::new(pods_dir, limits);
            loop {
                keeper.tick();
                std::thread::sleep(Duration::from_secs(1));
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the log keeper: container logs will not rotate: {e}");
    }
}

/// Starts the log endpoint; answers the port to publish. A port in use or a certificate
/// that cannot serve does not stop the agent (its pods matter more than their logs): the
/// first is retried in the background, the second is logged.
async fn start_log_endpoint(
    creds: &Credentials,
    live: Arc<api::tls::LiveCertificate>,
    port: u16,
    source: Arc<logs::LogSource>,
) -> u16 {
    if !logs::can_serve(creds) {
        tracing::warn!(
            "the node certificate is not valid for serving (the node joined before the log \
             endpoint existed): logs cannot be served; re-join the node to get one"
        );
    }
    let tls = match logs::tls_config(creds, live) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("log endpoint disabled: {e}");
            return port;
        }
    };
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
    match smol::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            let bound = listener.local_addr().map_or(port, |a| a.port());
            tracing::info!(port = bound, "serving container logs");
            smol::spawn(logs::serve(listener, tls, source)).detach();
            bound
        }
        Err(e) => {
            tracing::warn!(port, "cannot listen for log requests, retrying: {e}");
            smol::spawn(async move {
                loop {
                    smol::Timer::after(Duration::from_secs(10)).await;
                    if let Ok(listener) = smol::net::TcpListener::bind(addr).await {
                        tracing::info!(port, "serving container logs");
                        logs::serve(listener, tls, source).await;
                        return;
                    }
                }
            })
            .detach();
            port
        }
    }
}

/// Registers the Node (retrying until the server answers), then renews its Lease in
/// kube-node-lease every 10 s (more often if `every` is shorter) and posts its status every
/// `report`, or at once when the stored status is not what the node reports (the node
/// lifecycle controller marked it unknown while the node was cut off), as kubelets do: the
/// Lease is the heartbeat, the status a report. Re-registers if the Node was deleted.
async fn keep_registered(
    client: api::client::Client,
    facts: NodeFacts,
    settings: NodeSettings,
    every: Duration,
    report: Duration,
) {
    let mut node_lease = lease::NodeLease::new(&settings.name);
    let tick = every.min(lease::RENEW_INTERVAL);
    loop {
        let ready_since = Time::now();
        let node = register::build_node(&facts, &settings, ready_since);
        let mut delay = Duration::from_millis(500);
        let registered = loop {
            match register::register(&client, &node).await {
                Ok(n) => break n,
                Err(e) => {
                    tracing::warn!(node = %settings.name, "cannot register the node: {e}");
                    smol::Timer::after(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        };
        tracing::info!(node = %settings.name, "node registered");
        let (stale_tx, stale) = async_channel::bounded::<()>(1);
        // Dropped (and so stopped) when the node registers again.
        let own = format!("metadata.name={}", settings.name);
        let watch_client = client.clone();
        let _watch = smol::spawn(async move {
            register::follow_stale_statuses(watch_client, None, Some(&own), |_| {
                stale_tx.try_send(()).is_ok() || !stale_tx.is_closed()
            })
            .await
        });
        let mut last_status = std::time::Instant::now();
        loop {
            if let Err(e) = node_lease.renew(&client, Some(&registered)).await {
                tracing::warn!(node = %settings.name, "renewing the node lease failed: {e}");
            }
            let woken = async {
                match stale.recv().await {
                    Ok(()) => true,
                    Err(_) => futures_lite::future::pending().await,
                }
            }
            .or(async {
                smol::Timer::after(tick).await;
                false
            })
            .await;
            // A tick early is on time: the status goes out every `report`, not every other.
            if !woken && last_status.elapsed() + tick / 2 < report {
                continue;
            }
            last_status = std::time::Instant::now();
            match register::heartbeat(&client, &settings.name, ready_since).await {
                Ok(true) => tracing::debug!(node = %settings.name, woken, "node status posted"),
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(node = %settings.name, "posting the node status failed: {e}")
                }
            }
        }
    }
}
