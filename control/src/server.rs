//! `skiff server`: opens the store, makes or loads the PKI, serves the API.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use api::core::Namespace;
use api::meta::ObjectMeta;
use nix::sys::signal::{SigSet, Signal};

use crate::auth::Authenticator;
use crate::http::{self, AppState};
use crate::machinery::{ControllerConfig, CACHED_KINDS};
use crate::pki::Pki;
use crate::registry::{Registry, SYSTEM_NAMESPACES};
use crate::store::{Store, StoreConfig};

/// Flags of `skiff server`; each has an environment-variable twin.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// A TOML file of these settings, keys named as the flags (`data-dir = "/srv/skiff"`);
    /// flags and environment variables override it [default: /etc/skiff/server.toml if it
    /// exists].
    #[arg(long, env = "SKIFF_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory for the state database, the PKI and the admin kubeconfig.
    #[arg(long, env = "SKIFF_DATA_DIR", default_value = "/var/lib/skiff/server")]
    pub data_dir: PathBuf,
    /// Address and port the HTTPS API listens on.
    #[arg(long, env = "SKIFF_LISTEN", default_value = "0.0.0.0:6443")]
    pub listen: SocketAddr,
    /// Number of past events kept for watches to resume from.
    #[arg(long, env = "SKIFF_EVENT_WINDOW", default_value_t = 10_000)]
    pub event_window: u64,
    /// MiB of memory for the state database's page cache (read cache and write buffer);
    /// pages it does not hold are read from the file (the kernel's page cache).
    #[arg(long, env = "SKIFF_STORE_CACHE_MIB",
          default_value_t = (StoreConfig::DEFAULT_CACHE_SIZE_BYTES >> 20) as u32,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub store_cache_mib: u32,
    /// The address pods reach the API on, behind the `kubernetes` Service [default: the
    /// listen address if it names one, else this machine's address on its default route].
    #[arg(long, env = "SKIFF_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<std::net::IpAddr>,
    /// Extra names or addresses for the serving certificate (repeatable).
    #[arg(long = "tls-san", env = "SKIFF_TLS_SAN", value_delimiter = ',')]
    pub tls_san: Vec<String>,
    /// The longest a client certificate signed by the cluster CA may be valid (nodes',
    /// users', CSRs'), and how long one is when its request asks for no shorter time
    /// (kube-controller-manager's flag).
    #[arg(long, env = "SKIFF_CLUSTER_SIGNING_DURATION", default_value = "8760h", value_parser = humantime::parse_duration)]
    pub cluster_signing_duration: std::time::Duration,
    /// How long node certificates (from a join or a renewal) are valid; agents renew theirs
    /// at 70-90% of it [default: the cluster signing duration].
    #[arg(long, env = "SKIFF_NODE_CERT_TTL", value_parser = humantime::parse_duration)]
    pub node_cert_ttl: Option<std::time::Duration>,
    /// How long the serving certificate (and the server's client certificate for agents)
    /// is valid; the server renews it at 80% of it, without a restart.
    #[arg(long, env = "SKIFF_SERVING_CERT_TTL", default_value = "8760h", value_parser = humantime::parse_duration)]
    pub serving_cert_ttl: std::time::Duration,
    /// Bearer tokens for users, in kube-apiserver's static token file format: one
    /// `token,user,uid,"group1,group2"` per line.
    #[arg(long, env = "SKIFF_TOKEN_AUTH_FILE", value_name = "FILE")]
    pub token_auth_file: Option<std::path::PathBuf>,
    /// A node without a heartbeat for this long is marked unreachable.
    #[arg(long, env = "SKIFF_NODE_MONITOR_GRACE_PERIOD", default_value = "40s", value_parser = humantime::parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,
    /// How often the horizontal pod autoscaler syncs every HorizontalPodAutoscaler.
    #[arg(long, env = "SKIFF_HORIZONTAL_POD_AUTOSCALER_SYNC_PERIOD", default_value = "15s", value_parser = humantime::parse_duration)]
    pub horizontal_pod_autoscaler_sync_period: std::time::Duration,
    /// How long the autoscaler looks back before scaling down an autoscaler without a
    /// behavior (the highest recommendation in this window wins).
    #[arg(long, env = "SKIFF_HORIZONTAL_POD_AUTOSCALER_DOWNSCALE_STABILIZATION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: std::time::Duration,
    /// The ratio of usage to target within which the autoscaler does not scale.
    #[arg(
        long,
        env = "SKIFF_HORIZONTAL_POD_AUTOSCALER_TOLERANCE",
        default_value_t = 0.1
    )]
    pub horizontal_pod_autoscaler_tolerance: f64,
    /// Seconds pods tolerate an unreachable or not-ready node before they are evicted
    /// (unless their tolerations say otherwise).
    #[arg(long, env = "SKIFF_DEFAULT_TOLERATION_SECONDS", default_value_t = 300)]
    pub default_toleration_seconds: i64,
    /// The network ClusterIPs are allocated from.
    #[arg(long, env = "SKIFF_SERVICE_CIDR", default_value = crate::ipalloc::DEFAULT_SERVICE_CIDR,
          value_parser = crate::ipalloc::parse_service_cidr)]
    pub service_cidr: crate::ipalloc::ServiceCidr,
    /// The ports NodePorts are allocated from, `FIRST-LAST`.
    #[arg(long, env = "SKIFF_SERVICE_NODE_PORT_RANGE", default_value = crate::ipalloc::DEFAULT_NODE_PORT_RANGE,
          value_parser = crate::ipalloc::parse_node_port_range)]
    pub service_node_port_range: crate::ipalloc::NodePortRange,
    /// The pod range: each node gets a /24 of it (its podCIDR).
    #[arg(long, env = "SKIFF_CLUSTER_CIDR", default_value = api::cidr::DEFAULT_CLUSTER_CIDR)]
    pub cluster_cidr: api::cidr::Ipv4Cidr,
    /// Do not serve the web dashboard at `/ui/`.
    #[arg(long, env = "SKIFF_DISABLE_UI")]
    pub disable_ui: bool,
    /// Serve discovery only per group version (`/api`, `/apis`, `/apis/GROUP/VERSION`), not
    /// aggregated (`apidiscovery.k8s.io/v2`), as kube-apiserver with its
    /// AggregatedDiscoveryEndpoint feature off: for clients that mishandle the aggregated
    /// document, and to measure what it saves (bench/discovery.sh).
    #[arg(long, env = "SKIFF_DISABLE_AGGREGATED_DISCOVERY", hide = true)]
    pub disable_aggregated_discovery: bool,
    /// The audit log (audit.k8s.io/v1 Events, one JSON line per request, Metadata level)
    /// [default: DATA_DIR/audit/audit.log].
    #[arg(long, env = "SKIFF_AUDIT_LOG_PATH", value_name = "FILE")]
    pub audit_log_path: Option<PathBuf>,
    /// Megabytes the audit log grows to before it is rotated.
    #[arg(long, env = "SKIFF_AUDIT_LOG_MAXSIZE", default_value_t = 100)]
    pub audit_log_maxsize: u64,
    /// Rotated audit logs kept.
    #[arg(long, env = "SKIFF_AUDIT_LOG_MAXBACKUP", default_value_t = 3)]
    pub audit_log_maxbackup: u32,
    /// Keep no audit log.
    #[arg(long, env = "SKIFF_DISABLE_AUDIT_LOG")]
    pub disable_audit_log: bool,
    /// Requests served at once (with --max-mutating-requests-inflight: API Priority and
    /// Fairness divides the sum among the priority levels by their shares). kube-apiserver's
    /// 400 and 200 are sized for big control planes; skiff's are for a small board.
    #[arg(long, env = "SKIFF_MAX_REQUESTS_INFLIGHT",
          default_value_t = crate::flowcontrol::DEFAULT_MAX_REQUESTS_INFLIGHT as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_requests_inflight: u32,
    /// The mutating part of the server's seats (added to --max-requests-inflight).
    #[arg(long, env = "SKIFF_MAX_MUTATING_REQUESTS_INFLIGHT",
          default_value_t = crate::flowcontrol::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT as u32)]
    pub max_mutating_requests_inflight: u32,
    /// API Priority and Fairness: requests classified by FlowSchemas, queued fairly per
    /// priority level, 429 past their queues (`=false` serves every request at once).
    #[arg(long, env = "SKIFF_ENABLE_PRIORITY_AND_FAIRNESS", default_value_t = true,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enable_priority_and_fairness: bool,
    /// Run the scheduler and the controllers only while this server holds the Lease
    /// kube-system/skiff-controller-manager, so that of several servers on one shared
    /// datastore one runs them; a server that loses the Lease exits (as
    /// kube-controller-manager does) [default: true with a shared datastore; false with the
    /// embedded one, where a single server needs no election and writes no Lease].
    #[arg(long, env = "SKIFF_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// How long the other servers wait, after they last saw the Lease renewed, before one
    /// takes it over.
    #[arg(long, env = "SKIFF_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub leader_elect_lease_duration: std::time::Duration,
    /// How long the leader keeps trying to renew the Lease before it gives it up for lost.
    #[arg(long, env = "SKIFF_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_elect_renew_deadline: std::time::Duration,
    /// How often servers try to take, and the leader to renew, the Lease.
    #[arg(long, env = "SKIFF_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = humantime::parse_duration)]
    pub leader_elect_retry_period: std::time::Duration,
    /// Keep the cluster's state in an etcd v3 cluster instead of the embedded redb file, so
    /// that several servers share it: its client URLs, comma-separated
    /// (`https://h1:2379,https://h2:2379`), as k3s takes them. The servers share the CA,
    /// the service-account key, the secrets key and the admin token: a second server gets
    /// them with --join.
    #[arg(long, env = "SKIFF_DATASTORE_ENDPOINT", value_name = "URLS")]
    pub datastore_endpoint: Option<String>,
    /// The CA certificate (PEM) that signs the etcd members' serving certificates.
    #[arg(long, env = "SKIFF_DATASTORE_CAFILE", value_name = "FILE")]
    pub datastore_cafile: Option<PathBuf>,
    /// A client certificate (PEM) for etcd's `--client-cert-auth`.
    #[arg(long, env = "SKIFF_DATASTORE_CERTFILE", value_name = "FILE")]
    pub datastore_certfile: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, env = "SKIFF_DATASTORE_KEYFILE", value_name = "FILE")]
    pub datastore_keyfile: Option<PathBuf>,
    /// Join the cluster of the server at this URL (`https://FIRST:6443`) on the first start:
    /// fetch its CA, service-account key, secrets key and admin token with --token, over TLS
    /// verified against the CA the token pins. Needs --datastore-endpoint (the same etcd
    /// cluster as the first server's) and an empty data dir; once joined it does nothing.
    #[arg(long, env = "SKIFF_JOIN", value_name = "URL")]
    pub join: Option<String>,
    /// The server join token for --join (`skiff token create --server` on a server of the
    /// cluster).
    #[arg(
        long,
        env = "SKIFF_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    #[command(flatten)]
    pub agent: EmbeddedAgentArgs,
}

/// The server's own node: `skiff server` runs the agent in-process unless `--disable-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct EmbeddedAgentArgs {
    /// Do not run pods on this machine (no in-process agent).
    #[arg(long, env = "SKIFF_DISABLE_AGENT")]
    pub disable_agent: bool,
    /// The name of this machine's Node (default: the host name).
    #[arg(long, env = "SKIFF_NODE_NAME")]
    pub node_name: Option<String>,
    /// The InternalIP of this machine's Node (default: the address that reaches the API).
    #[arg(long, env = "SKIFF_NODE_IP")]
    pub node_ip: Option<String>,
    /// A label for this machine's Node, `key=value` (repeatable).
    #[arg(long = "node-label", env = "SKIFF_NODE_LABELS", value_delimiter = ',')]
    pub node_labels: Vec<String>,
    /// A taint for this machine's Node, `key[=value]:Effect` (repeatable).
    #[arg(long = "node-taint", env = "SKIFF_NODE_TAINTS", value_delimiter = ',')]
    pub node_taints: Vec<String>,
    /// The agent's data (credentials, images, pod files); default `DATA_DIR/agent`.
    #[arg(long, env = "SKIFF_AGENT_DATA_DIR")]
    pub agent_data_dir: Option<PathBuf>,
    /// The agent's runtime state, normally on a tmpfs.
    #[arg(
        long,
        env = "SKIFF_AGENT_RUN_DIR",
        default_value = "/run/skiff/server-agent"
    )]
    pub agent_run_dir: PathBuf,
    /// The cgroup the local pods go under.
    #[arg(long, env = "SKIFF_CGROUP_PARENT", default_value = "skiff")]
    pub cgroup_parent: String,
    /// How many pods this machine takes.
    #[arg(long, env = "SKIFF_MAX_PODS", default_value_t = 110)]
    pub max_pods: u32,
    /// Allow privileged containers and hostPID pods on this machine.
    #[arg(long, env = "SKIFF_ALLOW_PRIVILEGED")]
    pub allow_privileged: bool,
    /// The port the local agent serves container logs on (to this server only).
    #[arg(long, env = "SKIFF_AGENT_PORT", default_value_t = LOCAL_AGENT_PORT)]
    pub agent_port: u16,
    /// Do not program Services into this machine's iptables.
    #[arg(long, env = "SKIFF_DISABLE_PROXY")]
    pub disable_proxy: bool,
    /// Do not enforce NetworkPolicies on this machine (as k3s' --disable-network-policy).
    #[arg(long, env = "SKIFF_DISABLE_NETWORK_POLICY")]
    pub disable_network_policy: bool,
    /// The local agent's registry mirrors, rewrites, credentials and CAs, in k3s's
    /// registries.yaml format (an absent file: none).
    /// Also handed to agents that have none of their own (`/skiff/v1/registries`).
    #[arg(
        long,
        env = "SKIFF_REGISTRIES_CONFIG",
        value_name = "FILE",
        default_value = "/etc/skiff/registries.yaml"
    )]
    pub registries_config: PathBuf,
    /// The bridge this machine's pods are attached to.
    #[arg(long, env = "SKIFF_BRIDGE_NAME", default_value = api::cidr::DEFAULT_BRIDGE)]
    pub bridge_name: String,
    /// Do not run the cluster DNS server on this machine.
    #[arg(long, env = "SKIFF_DISABLE_DNS")]
    pub disable_dns: bool,
    /// Do not run the built-in ingress proxy on this machine (as k3s' --disable traefik).
    #[arg(long, env = "SKIFF_DISABLE_INGRESS")]
    pub disable_ingress: bool,
    /// Where this machine's ingress proxy serves HTTP.
    #[arg(long, env = "SKIFF_INGRESS_HTTP_ADDRESS", default_value = "0.0.0.0:80")]
    pub ingress_http_address: SocketAddr,
    /// Where this machine's ingress proxy serves HTTPS.
    #[arg(
        long,
        env = "SKIFF_INGRESS_HTTPS_ADDRESS",
        default_value = "0.0.0.0:443"
    )]
    pub ingress_https_address: SocketAddr,
}

/// The local agent's log port (the kubelet's).
#[cfg(feature = "embedded-agent")]
const LOCAL_AGENT_PORT: u16 = agent::node::logs::DEFAULT_PORT;
#[cfg(not(feature = "embedded-agent"))]
const LOCAL_AGENT_PORT: u16 = 10250;

#[cfg(feature = "embedded-agent")]
impl EmbeddedAgentArgs {
    fn data_dir(&self, server_data_dir: &std::path::Path) -> PathBuf {
        self.agent_data_dir
            .clone()
            .unwrap_or_else(|| server_data_dir.join("agent"))
    }

    /// The agent's configuration; `token` only when it has not joined yet.
    fn config(
        &self,
        server_data_dir: &std::path::Path,
        url: String,
        token: Option<String>,
        cluster_cidr: agent::net::Ipv4Cidr,
    ) -> anyhow::Result<agent::node::AgentConfig> {
        use agent::node::register;
        let labels = self
            .node_labels
            .iter()
            .map(|l| register::parse_label(l))
            .collect::<Result<Vec<_>, _>>()?;
        let taints = self
            .node_taints
            .iter()
            .map(|t| register::parse_taint(t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(agent::node::AgentConfig {
            servers: vec![url],
            token,
            data_dir: self.data_dir(server_data_dir),
            run_dir: self.agent_run_dir.clone(),
            node_name: self
                .node_name
                .clone()
                .unwrap_or_else(agent::node::facts::hostname),
            node_ip: self.node_ip.clone(),
            labels,
            taints,
            max_pods: self.max_pods,
            allow_privileged: self.allow_privileged,
            cgroup_parent: self.cgroup_parent.clone(),
            heartbeat: std::time::Duration::from_secs(10),
            status_report: std::time::Duration::from_secs(300),
            log_port: self.agent_port,
            log_limits: Default::default(),
            disable_proxy: self.disable_proxy,
            disable_network_policy: self.disable_network_policy,
            registries_config: Some(self.registries_config.clone()),
            service_cidr: None,
            ingress: (!self.disable_ingress).then_some(agent::ingress::IngressConfig {
                http: self.ingress_http_address,
                https: self.ingress_https_address,
            }),
            pod_network: agent::net::PodNetworkSettings {
                cluster_cidr,
                bridge: self.bridge_name.clone(),
            },
            // The address will default to the pod network's bridge address; until then the
            // local pods use this machine's resolvers.
            dns: agent::dns::DnsSettings {
                disabled: self.disable_dns,
                ..Default::default()
            },
            local_connections: None,
            // The embedded agent is reached in-process.
            tunnel: false,
            share_images: false,
        })
    }
}

/// The URL the admin kubeconfig points at: loopback when listening on every address.
fn local_url(listen: SocketAddr) -> String {
    let host = match listen.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        ip => ip.to_string(),
    };
    format!("https://{host}:{}", listen.port())
}

/// Lifts the soft limit on open files to the hard one (as Go programs, kube-apiserver among
/// them, do at start): every client connection is a descriptor, and systemd's default soft
/// limit of 1024 would otherwise cap the server at about a thousand connections.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                tracing::warn!(
                    "cannot raise the open files limit: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

/// A client of the etcd datastore named by `--datastore-endpoint`.
fn etcd_client(args: &ServerArgs, endpoints: &str) -> anyhow::Result<crate::etcd::EtcdClient> {
    let read = |flag: &str, path: &Option<PathBuf>| -> anyhow::Result<Option<String>> {
        path.as_ref()
            .map(|p| std::fs::read_to_string(p).with_context(|| format!("{flag} {}", p.display())))
            .transpose()
    };
    let config = crate::etcd::EtcdConfig {
        endpoints: endpoints
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect(),
        ca_pem: read("--datastore-cafile", &args.datastore_cafile)?,
        client_cert_pem: read("--datastore-certfile", &args.datastore_certfile)?,
        client_key_pem: read("--datastore-keyfile", &args.datastore_keyfile)?,
    };
    crate::etcd::EtcdClient::new(&config).context("--datastore-endpoint")
}

/// Opens the store on the etcd datastore of `--datastore-endpoint`.
fn open_etcd(
    client: crate::etcd::EtcdClient,
    endpoints: &str,
    keys: crate::store::seal::Keyring,
) -> anyhow::Result<Store> {
    smol::block_on(Store::open_etcd(
        client,
        StoreConfig::DEFAULT_WATCH_QUEUE_CAPACITY,
        Some(Arc::new(keys)),
    ))
    .with_context(|| format!("connecting to the etcd datastore at {endpoints}"))
}

/// `--join URL --token TOKEN`: fetches the cluster's shared keys into the data dir unless it
/// holds them already (see [`crate::cluster_join`]).
fn join_if_asked(args: &ServerArgs, etcd: Option<&crate::etcd::EtcdClient>) -> anyhow::Result<()> {
    let (url, token) = match (&args.join, &args.token) {
        (None, None) => return Ok(()),
        (Some(url), Some(token)) => (url, token),
        (Some(_), None) => anyhow::bail!(
            "--join needs --token (a server join token: `skiff token create --server` on a server of the cluster)"
        ),
        (None, Some(_)) => anyhow::bail!("--token is the join token of --join, which is missing"),
    };
    let Some(etcd) = etcd else {
        anyhow::bail!(
            "--join needs --datastore-endpoint: the servers of one cluster share its state in etcd, and a server on its own embedded store cannot join another"
        );
    };
    crate::cluster_join::ensure_joined(&args.data_dir, url, token, etcd)
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    // Signals go to one thread that waits for them; block them before any other thread starts
    // so that every thread inherits the mask.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals.thread_block().context("blocking signals")?;

    if std::env::var_os("SMOL_THREADS").is_none() {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        // No other thread exists yet, so nothing reads the environment concurrently.
        std::env::set_var("SMOL_THREADS", n.to_string());
    }

    raise_open_files_limit();

    let etcd = match &args.datastore_endpoint {
        Some(endpoints) => Some((etcd_client(&args, endpoints)?, endpoints.as_str())),
        None => None,
    };
    // Before anything is written into the data dir: a join that fails leaves it as it was.
    join_if_asked(&args, etcd.as_ref().map(|(client, _)| client))?;

    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating the data dir {}", args.data_dir.display()))?;
    std::fs::set_permissions(&args.data_dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("securing the data dir {}", args.data_dir.display()))?;

    let keys = crate::store::seal::Keyring::load_or_create(&args.data_dir)
        .context("loading the secrets key")?;
    let shared_etcd = etcd.as_ref().map(|(client, _)| client.clone());
    let store = match etcd {
        Some((client, endpoints)) => open_etcd(client, endpoints, keys)?,
        None => Store::open(StoreConfig {
            event_window: args.event_window,
            cache_size_bytes: (args.store_cache_mib as usize) << 20,
            keys: Some(Arc::new(keys)),
            ..StoreConfig::in_dir(&args.data_dir)
        })
        .context("opening the state database")?,
    };
    // A key that does not open the stored Secrets (a data dir restored from a backup taken
    // without its key, say) is found now rather than on the first read of each Secret.
    smol::block_on(store.list(api::Kind::Secret, None)).with_context(|| {
        format!(
            "the stored Secrets cannot be read with {}: put back the secrets key this data dir was written with (`skiff backup --include-key` carries it)",
            args.data_dir.join(crate::store::seal::KEY_FILE).display()
        )
    })?;
    // Pods verify the API through the `kubernetes` Service: its names and address, and the
    // address it leads to, are in the serving certificate.
    let advertise = args
        .advertise_address
        .unwrap_or_else(|| crate::apiservice::advertise_address(args.listen));
    let mut sans = args.tls_san.clone();
    sans.extend(crate::apiservice::serving_names(
        args.service_cidr,
        advertise,
    ));
    let lifetimes = lifetimes(&args)?;
    let pki = Pki::load_or_create_with(&args.data_dir, &sans, &local_url(args.listen), lifetimes)
        .context("preparing the PKI")?;
    let tls = pki
        .server_config()
        .context("building the TLS configuration")?;
    let mut auth = Authenticator::new(&pki).context("loading the authenticator")?;
    if let Some(file) = &args.token_auth_file {
        auth = auth
            .with_token_file(file)
            .context("loading the token file")?;
    }
    let sa_tokens = crate::serviceaccount::Tokens::new(
        crate::serviceaccount::token::SigningKey::load_or_create(pki.dir())
            .context("preparing the service account signing key")?,
    );
    auth = auth.with_token_authenticator(sa_tokens.clone());
    let authorizer = crate::rbac::Authorizer::new();
    let node_graph = crate::nodegraph::NodeGraph::new();
    let registry = Registry::new(store.clone());
    if let Some(client) = shared_etcd {
        // Node heartbeats stay in memory and travel between the servers in digests.
        crate::heartbeat::share(
            client,
            registry.heartbeats.clone(),
            crate::leader::default_identity(),
            crate::heartbeat::digest_period(args.node_monitor_grace_period),
        );
    }
    registry.set_service_ranges(crate::ipalloc::ServiceRanges::new(
        args.service_cidr,
        args.service_node_port_range,
    ));

    // The embedded store serves one server: nothing to elect (the shared datastore turns
    // this on by default).
    let shared_datastore = store.is_shared();
    let election = match args.leader_elect.unwrap_or(shared_datastore) {
        false => None,
        true => {
            let config = crate::leader::Config {
                lease_duration: args.leader_elect_lease_duration,
                renew_deadline: args.leader_elect_renew_deadline,
                retry_period: args.leader_elect_retry_period,
                ..crate::leader::Config::new(crate::leader::default_identity())
            };
            Some(
                crate::leader::Elector::new(registry.clone(), config)
                    .map_err(|e| anyhow::anyhow!("--leader-elect: {e}"))?,
            )
        }
    };
    let lost_lease = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let leading = election.as_ref().map(crate::leader::Elector::leading);
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let lost_tx = stop_tx.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Ok(sig) = signals.wait() {
                tracing::info!(signal = ?sig, "shutting down");
            }
            if let Err(e) = api::notify::stopping() {
                tracing::warn!("cannot notify systemd: {e}");
            }
            let _ = stop_tx.send_blocking(());
        })?;

    // The registries.yaml handed to agents: refused now if it is wrong, not at their pulls.
    #[cfg(feature = "embedded-agent")]
    agent::image::RegistryConfig::load_yaml(&args.agent.registries_config)
        .map_err(|e| anyhow::anyhow!("--registries-config: {e}"))?;
    let resources: Arc<crate::resources::Resources> = Default::default();
    let pki = Arc::new(pki);
    let aggregator =
        crate::aggregator::Aggregator::new(registry.clone(), resources.clone(), pki.clone());
    let state = Arc::new(AppState {
        registry: registry.clone(),
        resources,
        aggregator: aggregator.clone(),
        pki,
        store: store.clone(),
        auth,
        sa_tokens: sa_tokens.clone(),
        authorizer: authorizer.clone(),
        node_graph: node_graph.clone(),
        metrics: Default::default(),
        resource_metrics: Default::default(),
        local_agent: Default::default(),
        tunnels: crate::tunnel::Tunnels::new(),
        ui: !args.disable_ui,
        aggregated_discovery: !args.disable_aggregated_discovery,
        registries_config: Some(args.agent.registries_config.clone()),
        flowcontrol: args.enable_priority_and_fairness.then(|| {
            Arc::new(crate::flowcontrol::Controller::new(
                (args.max_requests_inflight + args.max_mutating_requests_inflight) as usize,
            ))
        }),
        audit: if args.disable_audit_log {
            None
        } else {
            let path = args
                .audit_log_path
                .clone()
                .unwrap_or_else(|| args.data_dir.join("audit").join("audit.log"));
            Some(
                crate::audit::AuditLog::start(crate::audit::AuditConfig {
                    max_bytes: args.audit_log_maxsize.saturating_mul(1 << 20),
                    max_backups: args.audit_log_maxbackup,
                    path: path.clone(),
                })
                .with_context(|| format!("opening the audit log {}", path.display()))?,
            )
        },
    });
    if let Some(flag) = leading {
        state.metrics.set_leading(flag);
    }
    // On the executor's threads: this thread would otherwise compete for the reactor.
    let lost = lost_lease.clone();
    let store_handle = store.clone();
    api::runtime::run(async move {
        let (lost_lease, store) = (lost, store_handle);
        ensure_system_namespaces(&registry).await?;
        ensure_default_ingress_class(&registry).await?;
        ensure_system_priority_classes(&registry).await?;
        ensure_default_storage_class(&registry).await?;
        crate::rbac::bootstrap::ensure(&registry)
            .await
            .map_err(|e| anyhow::anyhow!("making the default RBAC roles: {e}"))?;
        let informers = crate::machinery::informer::Informers::start(store.clone(), CACHED_KINDS)
            .await
            .context("loading the controllers' cache")?;
        let loops = crate::machinery::Context {
            registry: registry.clone(),
            informers,
            config: ControllerConfig {
                node_monitor_grace_period: args.node_monitor_grace_period,
                default_toleration_seconds: args.default_toleration_seconds,
                cluster_cidr: args.cluster_cidr,
            },
        };
        crate::crd::start_installer(state.resources.clone(), &loops.informers).await;
        crate::admission::policy::install_expression_checker();
        aggregator.start_installer(&loops.informers).await;
        crate::aggregator::trust::start(&registry, &state.pki);
        crate::admission::dispatch::start_installer(&registry, &loops.informers);
        authorizer.start(&loops.informers);
        if let Some(fc) = &state.flowcontrol {
            fc.start(&loops.informers);
        }
        node_graph.start(&loops.informers);
        sa_tokens.set_cache(loops.informers.cache().clone());
        crate::apiservice::start(&registry, args.service_cidr, advertise, args.listen.port());
        start_certificate_renewal(state.pki.clone());
        // What kube-controller-manager and kube-scheduler run: with leader election, only
        // while this server leads.
        let start_loops = {
            let (loops, state) = (loops.clone(), state.clone());
            let autoscaler = crate::controllers::podautoscaler::Settings {
                sync_period: args.horizontal_pod_autoscaler_sync_period,
                tolerance: args.horizontal_pod_autoscaler_tolerance,
                downscale_stabilization_seconds: args
                    .horizontal_pod_autoscaler_downscale_stabilization
                    .as_secs() as i64,
            };
            move || {
                crate::serviceaccount::start(&loops);
                crate::serviceaccount::start_root_ca_publisher(
                    &loops,
                    state.pki.ca_pem().to_string(),
                );
                crate::rbac::aggregation::start(&loops);
                crate::certificates::start(&loops, state.pki.clone());
                crate::controllers::start_all(&loops);
                crate::flowcontrol::ensure::start(&loops);
                crate::crd::start(&loops);
                crate::aggregator::register::start(&loops);
                crate::aggregator::available::start(&loops, aggregator.clone());
                crate::controllers::podautoscaler::start(
                    &loops,
                    http::pod_metrics(state.clone()),
                    autoscaler,
                );
                crate::scheduler::start(&loops);
            }
        };
        match election {
            None => start_loops(),
            Some(elector) => {
                tracing::info!(identity = %elector.identity(), "waiting to lead the controllers");
                let lost = lost_lease.clone();
                smol::spawn(async move {
                    crate::leader::run_while_leader(elector, start_loops).await;
                    lost.store(true, std::sync::atomic::Ordering::SeqCst);
                    let _ = lost_tx.send(()).await;
                })
                .detach();
            }
        }
        let listener = async_net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        if !args.agent.disable_agent {
            #[cfg(feature = "embedded-agent")]
            start_local_agent(&args, &registry, &state).await?;
            #[cfg(not(feature = "embedded-agent"))]
            tracing::warn!("this skiff is built without the embedded agent: this machine runs no pods (use --disable-agent to silence this)");
        }
        tracing::info!(listen = %args.listen, data_dir = %args.data_dir.display(), "skiff server ready");
        if let Err(e) = api::notify::ready(&format!("serving on {}", args.listen)) {
            tracing::warn!("cannot notify systemd: {e}");
        }
        http::serve_until(http::serve(listener, tls, state), async {
            let _ = stop_rx.recv().await;
        })
        .await
        .context("serving the API")?;
        anyhow::Ok(())
    })?;
    smol::block_on(store.close());
    if lost_lease.load(std::sync::atomic::Ordering::SeqCst) {
        anyhow::bail!("leader election lost: the controllers stopped with the server");
    }
    tracing::info!("stopped");
    Ok(())
}

/// The certificate lifetimes of the flags; one under 10 s is refused (nothing could renew
/// in time).
fn lifetimes(args: &ServerArgs) -> anyhow::Result<crate::pki::Lifetimes> {
    let l = crate::pki::Lifetimes {
        cluster_signing: args.cluster_signing_duration,
        node: args.node_cert_ttl.unwrap_or(args.cluster_signing_duration),
        serving: args.serving_cert_ttl,
    };
    for (flag, d) in [
        ("--cluster-signing-duration", l.cluster_signing),
        ("--node-cert-ttl", l.node),
        ("--serving-cert-ttl", l.serving),
    ] {
        if d < std::time::Duration::from_secs(10) {
            anyhow::bail!(
                "{flag} must be at least 10s, got {}",
                humantime::format_duration(d)
            );
        }
    }
    Ok(l)
}

/// Renews the serving certificate (and the server's client certificate for agents) at 80%
/// of its lifetime, for as long as the server runs; new connections get the new one.
fn start_certificate_renewal(pki: Arc<Pki>) {
    smol::spawn(async move {
        loop {
            let p = pki.clone();
            let next = match smol::unblock(move || p.renew_due()).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::error!("renewing the server's certificates: {e}");
                    std::time::SystemTime::now() + std::time::Duration::from_secs(60)
                }
            };
            // Woken at least hourly, so a clock that jumps is noticed.
            let wait = next
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
                .clamp(
                    std::time::Duration::from_secs(1),
                    std::time::Duration::from_secs(3600),
                );
            smol::Timer::after(wait).await;
        }
    })
    .detach();
}

#[cfg(feature = "embedded-agent")]
/// Starts the in-process agent for this machine's Node on its own thread. It joins over
/// loopback with a short-lived token the first time (the same path a remote agent takes),
/// then reuses its credentials. An agent that cannot run (no root, no cgroups) is reported
/// and the API keeps serving.
async fn start_local_agent(
    args: &ServerArgs,
    registry: &Registry,
    state: &AppState,
) -> anyhow::Result<()> {
    let pki = &state.pki;
    let agent_dir = args.agent.data_dir(&args.data_dir);
    let joined = agent::node::Credentials::load(&agent_dir)
        .ok()
        .flatten()
        .is_some();
    let token = if joined {
        None
    } else {
        let t = crate::join::create_token(
            registry,
            pki,
            std::time::Duration::from_secs(600),
            crate::join::TokenUsage::Node,
        )
        .await
        .map_err(|e| anyhow::anyhow!("creating the local agent's join token: {e}"))?;
        Some(t.token)
    };
    let mut cfg = args
        .agent
        .config(
            &args.data_dir,
            local_url(args.listen),
            token,
            args.cluster_cidr,
        )
        .context("the local agent's settings")?;
    cfg.service_cidr = agent::net::Ipv4Cidr::new(
        std::net::Ipv4Addr::from(args.service_cidr.0),
        args.service_cidr.1,
    )
    .ok();
    // Requests for this node's agent (exec, logs, port-forward, stats) reach it in-process.
    let (connections, accepted) = async_channel::bounded(64);
    cfg.local_connections = Some(accepted);
    let _ = state.local_agent.set(http::LocalAgent {
        node_name: cfg.node_name.clone(),
        connections,
        exec_coming: || {
            agent::runtime::exec::warm_cgroup_migration(std::path::Path::new(
                agent::runtime::CGROUP_ROOT,
            ))
        },
    });
    std::thread::Builder::new()
        .name("agent".into())
        .spawn(move || {
            tracing::info!(node = %cfg.node_name, "starting the local agent");
            if let Err(e) = agent::node::run(cfg) {
                tracing::error!("the local agent stopped: {e}; this machine runs no pods");
            }
        })
        .context("starting the local agent's thread")?;
    Ok(())
}

/// The `skiff` IngressClass, the default, served by every agent's built-in ingress proxy.
/// Left alone once it exists, so an administrator may change or delete its default mark.
async fn ensure_default_ingress_class(registry: &Registry) -> anyhow::Result<()> {
    match registry
        .create(api::networking::skiff_default_class(), None)
        .await
    {
        Ok(_) => tracing::info!(ingressclass = api::networking::SKIFF_CLASS, "created"),
        Err(e) if e.code() == 409 => {}
        Err(e) => return Err(anyhow::anyhow!("creating the default IngressClass: {e}")),
    }
    Ok(())
}

/// The built-in PriorityClasses (system-node-critical, system-cluster-critical), as
/// kube-apiserver makes them at start.
async fn ensure_system_priority_classes(registry: &Registry) -> anyhow::Result<()> {
    for (name, _, _) in api::scheduling::SYSTEM_CLASSES {
        let Some(pc) = api::scheduling::PriorityClass::system(name) else {
            continue;
        };
        match registry.create(pc, None).await {
            Ok(_) => tracing::info!(priorityclass = name, "created"),
            Err(e) if e.code() == 409 => {}
            Err(e) => return Err(anyhow::anyhow!("creating PriorityClass {name}: {e}")),
        }
    }
    Ok(())
}

/// The `local-path` StorageClass, the default, provisioned by the built-in local-path
/// provisioner (as k3s ships it). Left alone once it exists.
async fn ensure_default_storage_class(registry: &Registry) -> anyhow::Result<()> {
    match registry
        .create(api::storage::local_path_class(), None)
        .await
    {
        Ok(_) => tracing::info!(storageclass = api::storage::LOCAL_PATH_CLASS, "created"),
        Err(e) if e.code() == 409 => {}
        Err(e) => return Err(anyhow::anyhow!("creating the default StorageClass: {e}")),
    }
    Ok(())
}

async fn ensure_system_namespaces(registry: &Registry) -> anyhow::Result<()> {
    for name in SYSTEM_NAMESPACES {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: name.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        match registry.create(ns, None).await {
            Ok(_) => tracing::info!(namespace = name, "created"),
            Err(e) if e.code() == 409 => {}
            Err(e) => return Err(anyhow::anyhow!("creating namespace {name}: {e}")),
        }
    }
    Ok(())
}
