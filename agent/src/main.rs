//! `skiff-agent`: the node agent. Joins the cluster once, registers the Node, and runs the
//! pods bound to it. `skiff-agent self-check` reports what this machine supports;
//! `skiff-agent image ...` manages the node's images.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::image::cli::{cli_image, ImageArgs};
use agent::node::{self, register, AgentConfig};
use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// `0.1.0 (commit 1a2b3c4d5e, aarch64-unknown-linux-musl)`: what `--version` prints.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SKIFF_GIT_COMMIT"),
    ", ",
    env!("SKIFF_TARGET"),
    ")"
);

#[derive(Debug, Parser)]
#[command(name = "skiff-agent", version = VERSION, about = "skiff node agent")]
struct Cli {
    /// A TOML file of these settings, keys named as the flags (`server = "https://..."`);
    /// flags and environment variables override it [default: /etc/skiff/agent.toml if it
    /// exists].
    #[arg(long, env = "SKIFF_AGENT_CONFIG", value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// The cluster's servers, `https://HOST:PORT`: comma-separated or repeated (needed for
    /// the first start; kept with the node's credentials, and a later list replaces the
    /// kept one). The agent uses the first it can reach and fails over to the others.
    #[arg(long, env = "SKIFF_AGENT_SERVER", value_delimiter = ',')]
    server: Vec<String>,
    /// Join token from `skiff token create` (only needed for the first start).
    #[arg(long, env = "SKIFF_AGENT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Where credentials, images, the pod cache and pod files live.
    #[arg(
        long,
        env = "SKIFF_AGENT_DATA_DIR",
        default_value = "/var/lib/skiff/agent",
        global = true
    )]
    data_dir: PathBuf,
    /// Runtime state (sandboxes, containers); a tmpfs so it goes away with a reboot.
    #[arg(long, env = "SKIFF_AGENT_RUN_DIR", default_value = "/run/skiff/agent")]
    run_dir: PathBuf,
    /// The Node's name (default: the host name).
    #[arg(long, env = "SKIFF_AGENT_NODE_NAME")]
    node_name: Option<String>,
    /// The Node's InternalIP (default: the local address used to reach the server).
    #[arg(long, env = "SKIFF_AGENT_NODE_IP")]
    node_ip: Option<String>,
    /// A label for the Node, `key=value` (repeatable).
    #[arg(
        long = "node-label",
        env = "SKIFF_AGENT_NODE_LABELS",
        value_delimiter = ','
    )]
    node_labels: Vec<String>,
    /// A taint for the Node, `key[=value]:Effect` (repeatable).
    #[arg(
        long = "register-with-taints",
        env = "SKIFF_AGENT_REGISTER_WITH_TAINTS",
        value_delimiter = ','
    )]
    taints: Vec<String>,
    /// How many pods this node takes.
    #[arg(long, env = "SKIFF_AGENT_MAX_PODS", default_value_t = 110)]
    max_pods: u32,
    /// Allow privileged containers and hostPID pods.
    #[arg(long, env = "SKIFF_AGENT_ALLOW_PRIVILEGED")]
    allow_privileged: bool,
    /// The cgroup all pod cgroups go under.
    #[arg(long, env = "SKIFF_AGENT_CGROUP_PARENT", default_value = "skiff")]
    cgroup_parent: String,
    /// Seconds between heartbeats: renewals of the node's Lease in kube-node-lease (kubelet's
    /// nodeStatusUpdateFrequency).
    #[arg(long, env = "SKIFF_AGENT_HEARTBEAT_SECONDS", default_value_t = 10)]
    heartbeat_seconds: u64,
    /// Seconds between posts of an unchanged Node status (kubelet's
    /// nodeStatusReportFrequency); a changed status is posted at once.
    #[arg(
        long,
        env = "SKIFF_AGENT_NODE_STATUS_REPORT_SECONDS",
        default_value_t = 300
    )]
    node_status_report_seconds: u64,
    /// The port of the HTTPS log endpoint (only the server may use it); 0 picks a free one.
    #[arg(long, env = "SKIFF_AGENT_PORT", default_value_t = agent::node::logs::DEFAULT_PORT)]
    port: u16,
    /// A container's live log file is rotated when larger than this (e.g. 10Mi, 500Ki).
    #[arg(long, env = "SKIFF_AGENT_CONTAINER_LOG_MAX_SIZE", default_value = "10Mi", value_parser = parse_size)]
    container_log_max_size: u64,
    /// Log files kept per container run, the live one included.
    #[arg(long, env = "SKIFF_AGENT_CONTAINER_LOG_MAX_FILES", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..))]
    container_log_max_files: u16,
    /// The cluster's pod range (the server's `--cluster-cidr`): masqueraded when leaving it,
    /// never routed off the machine.
    #[arg(long, env = "SKIFF_AGENT_CLUSTER_CIDR", default_value = agent::net::DEFAULT_CLUSTER_CIDR)]
    cluster_cidr: agent::net::Ipv4Cidr,
    /// The cluster's Service range (the server's `--service-cidr`): a connection to an
    /// address in it that no Service port takes is refused on this node.
    #[arg(long, env = "SKIFF_AGENT_SERVICE_CIDR", default_value = "10.43.0.0/16")]
    service_cidr: agent::net::Ipv4Cidr,
    /// The bridge the pods are attached to.
    #[arg(long, env = "SKIFF_AGENT_BRIDGE_NAME", default_value = agent::net::DEFAULT_BRIDGE)]
    bridge_name: String,
    /// Where this node's cluster DNS server listens, `IP[:PORT]`, and the nameserver of
    /// ClusterFirst pods (without it, pods use the node's resolvers).
    #[arg(long, env = "SKIFF_AGENT_CLUSTER_DNS_ADDRESS", value_parser = agent::dns::parse_address)]
    cluster_dns_address: Option<std::net::SocketAddr>,
    /// The cluster's DNS domain.
    #[arg(long, env = "SKIFF_AGENT_CLUSTER_DOMAIN", default_value = agent::dns::DEFAULT_CLUSTER_DOMAIN)]
    cluster_domain: String,
    /// A resolver for names outside the cluster, `IP[:PORT]` (repeatable; default: the
    /// nameservers of /etc/resolv.conf).
    #[arg(long = "dns-upstream", env = "SKIFF_AGENT_DNS_UPSTREAMS", value_delimiter = ',',
          value_parser = agent::dns::parse_address)]
    dns_upstreams: Vec<std::net::SocketAddr>,
    /// Do not run the cluster DNS server on this node.
    #[arg(long, env = "SKIFF_AGENT_DISABLE_DNS")]
    disable_dns: bool,
    #[command(flatten)]
    sim: agent::sim::SimArgs,
    /// Do not program iptables for Services (no service proxy on this node).
    #[arg(long, env = "SKIFF_AGENT_DISABLE_PROXY")]
    disable_proxy: bool,
    /// Keep a tunnel open to every server and take logs, exec, attach, port-forward and
    /// metrics requests through it: for a node behind NAT that the servers cannot dial
    /// (docs/design/tunnel.md).
    #[arg(long, env = "SKIFF_AGENT_TUNNEL")]
    tunnel: bool,
    /// Share image layers with the nodes of the same `topology.kubernetes.io/zone` label:
    /// each layer is fetched from the registry once per site and served to the others
    /// over the agent port (docs/design/site-images.md).
    #[arg(long, env = "SKIFF_AGENT_SHARE_IMAGES")]
    share_images: bool,
    /// Do not enforce NetworkPolicies on this node (as k3s' --disable-network-policy).
    #[arg(long, env = "SKIFF_AGENT_DISABLE_NETWORK_POLICY")]
    disable_network_policy: bool,
    /// Registry mirrors, rewrites, credentials and CAs, in k3s's registries.yaml format (an
    /// absent file: none).
    #[arg(long, env = "SKIFF_AGENT_REGISTRIES_CONFIG", value_name = "FILE",
        default_value = agent::image::mirrors::DEFAULT_PATH)]
    registries_config: PathBuf,
    /// Do not run the built-in ingress proxy on this node (as k3s' --disable traefik).
    #[arg(long, env = "SKIFF_AGENT_DISABLE_INGRESS")]
    disable_ingress: bool,
    /// Where the ingress proxy serves HTTP.
    #[arg(
        long,
        env = "SKIFF_AGENT_INGRESS_HTTP_ADDRESS",
        default_value = "0.0.0.0:80"
    )]
    ingress_http_address: std::net::SocketAddr,
    /// Where the ingress proxy serves HTTPS.
    #[arg(
        long,
        env = "SKIFF_AGENT_INGRESS_HTTPS_ADDRESS",
        default_value = "0.0.0.0:443"
    )]
    ingress_https_address: std::net::SocketAddr,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Report what this machine supports (works offline, without root).
    SelfCheck,
    /// Stop and remove every pod of this node: containers, sandboxes, mounts, cgroups and
    /// (unless --keep-pod-data) the pods' files. The agent must be stopped first.
    Reset {
        /// Keep the pods' directories (volumes, logs) under DATA_DIR/pods.
        #[arg(long)]
        keep_pod_data: bool,
    },
    /// Manage the images on this node.
    Image {
        #[command(subcommand)]
        args: ImageArgs,
    },
}

/// libcontainer logs from inside the forked container child (into the container's log), and
/// a log event there must not take locks: keep its events at `error`.
fn init_tracing() {
    let mut spec = std::env::var("SKIFF_LOG").unwrap_or_else(|_| "info".into());
    for quiet in ["libcontainer", "libcgroups"] {
        if !spec.contains(quiet) {
            spec.push_str(&format!(",{quiet}=error"));
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,libcontainer=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() {
    // A process kept only to hold a container's stdin or terminal open (see
    // agent::runtime::stdio) starts as this binary re-executed.
    agent::sys::run_fd_holder_if_asked();
    let source = api::config::ConfigSource {
        subcommand: None,
        arg_id: "config",
        default_path: "/etc/skiff/agent.toml",
    };
    let cli: Cli =
        api::config::parse_args(std::env::args_os(), &source).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::SelfCheck) => self_check(&cli),
        Some(Command::Reset { keep_pod_data }) => reset(&cli, keep_pod_data),
        Some(Command::Image { ref args }) => {
            cli_image(&cli.data_dir, args.clone(), &HashSet::new())
        }
        None if cli.sim.simulate.is_some() => {
            init_tracing();
            run_simulated(&cli)
        }
        None => {
            init_tracing();
            run_agent(&cli)
        }
    };
    if let Err(e) = result {
        eprintln!("skiff-agent: {e:#}");
        std::process::exit(1);
    }
}

fn run_agent(cli: &Cli) -> anyhow::Result<()> {
    let labels = cli
        .node_labels
        .iter()
        .map(|l| register::parse_label(l))
        .collect::<Result<Vec<_>, _>>()?;
    let taints = cli
        .taints
        .iter()
        .map(|t| register::parse_taint(t))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = AgentConfig {
        servers: cli.server.clone(),
        token: cli.token.clone(),
        data_dir: cli.data_dir.clone(),
        run_dir: cli.run_dir.clone(),
        node_name: cli.node_name.clone().unwrap_or_else(node::facts::hostname),
        node_ip: cli.node_ip.clone(),
        labels,
        taints,
        max_pods: cli.max_pods,
        allow_privileged: cli.allow_privileged,
        cgroup_parent: cli.cgroup_parent.clone(),
        heartbeat: Duration::from_secs(cli.heartbeat_seconds.max(1)),
        status_report: Duration::from_secs(cli.node_status_report_seconds.max(1)),
        log_port: cli.port,
        log_limits: agent::runtime::logs::LogLimits {
            max_bytes: cli.container_log_max_size,
            max_files: usize::from(cli.container_log_max_files),
        },
        disable_proxy: cli.disable_proxy,
        disable_network_policy: cli.disable_network_policy,
        registries_config: Some(cli.registries_config.clone()),
        service_cidr: Some(cli.service_cidr),
        ingress: (!cli.disable_ingress).then_some(agent::ingress::IngressConfig {
            http: cli.ingress_http_address,
            https: cli.ingress_https_address,
        }),
        pod_network: agent::net::PodNetworkSettings {
            cluster_cidr: cli.cluster_cidr,
            bridge: cli.bridge_name.clone(),
        },
        dns: agent::dns::DnsSettings {
            disabled: cli.disable_dns,
            listen: cli.cluster_dns_address,
            cluster_domain: cli.cluster_domain.clone(),
            upstreams: cli.dns_upstreams.clone(),
            ..Default::default()
        },
        local_connections: None,
        tunnel: cli.tunnel,
        share_images: cli.share_images,
    };
    node::run(cfg).context("skiff-agent stopped")
}

/// A byte size: a number with an optional binary (`Ki`, `Mi`, `Gi`) or decimal (`K`, `M`,
/// `G`) suffix, as Kubernetes quantities (and the kubelet's `containerLogMaxSize`) write it.
fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 10Mi"))?;
    let factor: u64 = match unit {
        "" => 1,
        "K" | "k" => 1000,
        "M" => 1000 * 1000,
        "G" => 1000 * 1000 * 1000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit (use Ki, Mi, Gi, K, M or G)"
            ))
        }
    };
    n.checked_mul(factor)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{s:?} is not a usable size"))
}

fn run_simulated(cli: &Cli) -> anyhow::Result<()> {
    let labels = cli
        .node_labels
        .iter()
        .map(|l| register::parse_label(l))
        .collect::<Result<_, _>>()?;
    let taints = cli
        .taints
        .iter()
        .map(|t| register::parse_taint(t))
        .collect::<Result<_, _>>()?;
    let every = Duration::from_secs(cli.heartbeat_seconds.max(1));
    let report = Duration::from_secs(cli.node_status_report_seconds.max(1));
    agent::sim::run_cli(&cli.sim, labels, taints, cli.max_pods, every, report)
        .context("simulated nodes stopped")
}

/// `skiff-agent reset` (what `install.sh uninstall` runs once the units are stopped).
fn reset(cli: &Cli, keep_pod_data: bool) -> anyhow::Result<()> {
    let mut cfg = agent::runtime::RuntimeConfig::new(&cli.run_dir, cli.cgroup_parent.clone());
    cfg.allow_privileged = true;
    let rt = agent::runtime::Runtime::new(cfg).context("opening the container runtime")?;
    let sandboxes = rt.list_sandboxes().context("listing the pods")?;
    for uid in &sandboxes {
        rt.remove_sandbox(uid)
            .with_context(|| format!("removing pod {uid}"))?;
    }
    for id in rt.list().context("listing the containers")? {
        rt.remove(&id)
            .with_context(|| format!("removing container {id}"))?;
    }
    rt.remove_cgroup_parent()
        .context("removing the pods' cgroup")?;
    let pods = cli.data_dir.join("pods");
    if let Ok(entries) = std::fs::read_dir(&pods) {
        for e in entries.flatten() {
            if keep_pod_data {
                continue;
            }
            agent::pods::worker::cleanup_pod_dir(&e.path());
        }
    }
    println!("removed {} pods", sandboxes.len());
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Prints what the machine offers; never fails on a missing feature, only reports it.
fn self_check(cli: &Cli) -> anyhow::Result<()> {
    let (data_dir, registries) = (cli.data_dir.as_path(), cli.registries_config.as_path());
    let tunnel = cli.tunnel;
    let arch = node::facts::kube_arch(std::env::consts::ARCH);
    let cgroup = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "v2"
    } else if Path::new("/sys/fs/cgroup/memory").exists() {
        "v1"
    } else {
        "none"
    };
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"));
    let ns = |n: &str| Path::new("/proc/self/ns").join(n).exists();
    let facts = node::NodeFacts::gather(if data_dir.exists() {
        data_dir
    } else {
        Path::new("/")
    });
    println!("skiff-agent {VERSION}");
    println!("arch: {arch} ({})", std::env::consts::ARCH);
    println!("kernel: {}", facts.kernel_version);
    println!("os: {}", facts.os_image);
    println!("cpus: {}", facts.cpus);
    println!("memory: {} KiB", facts.memory_kib);
    println!("cgroup: {cgroup}");
    println!("overlay: {}", yes(overlay));
    for n in ["mnt", "pid", "net", "ipc", "uts", "user", "cgroup"] {
        println!("namespace {n}: {}", yes(ns(n)));
    }
    println!("root: {}", yes(nix::unistd::geteuid().is_root()));
    let joined = node::Credentials::load(data_dir).ok().flatten();
    println!(
        "joined: {}",
        joined.as_ref().map_or_else(
            || "no".to_string(),
            |c| format!("yes ({})", c.servers.join(", "))
        )
    );
    // What the site needs open: outbound TCP to each server's API port; inbound to this
    // node's port only without the tunnel.
    for server in joined.iter().flat_map(|c| &c.servers) {
        println!("server {server}: {}", reachable(server));
    }
    println!(
        "tunnel: {}",
        if tunnel {
            "on (the servers reach this node through its own connections: nothing inbound needed)"
        } else {
            "off (the servers dial this node's agent port: it must be reachable from them; --tunnel behind NAT)"
        }
    );
    let mirrors = if registries.exists() {
        match agent::image::RegistryConfig::load_yaml(registries) {
            Ok(c) if c.mirrors.is_empty() => format!("none in {}", registries.display()),
            Ok(c) => format!(
                "{} (from {})",
                c.mirrors.keys().cloned().collect::<Vec<_>>().join(", "),
                registries.display()
            ),
            Err(e) => format!("unreadable: {e}"),
        }
    } else {
        format!(
            "none ({} absent; the server's copy is used if it has one)",
            registries.display()
        )
    };
    println!("registry mirrors: {mirrors}");
    println!("image sharing: {}", image_sharing(cli));
    Ok(())
}

/// Whether image sharing is on, and with which site (the zone label given to the agent).
fn image_sharing(cli: &Cli) -> String {
    let zone = cli
        .node_labels
        .iter()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == agent::image::peers::ZONE_LABEL)
        .map(|(_, v)| v.to_string());
    match (cli.share_images, zone) {
        (false, _) => "off (--share-images to fetch each layer once per site)".into(),
        (true, Some(zone)) => format!(
            "on, site {zone} (the site's nodes reach each other's agent port, {})",
            cli.port
        ),
        (true, None) => format!(
            "on, but no {} label given: the Node's own label decides the site",
            agent::image::peers::ZONE_LABEL
        ),
    }
}

/// Whether a TCP connection to `server`'s API port opens within 3 s.
fn reachable(server: &str) -> String {
    use std::net::ToSocketAddrs;
    let Ok((host, port)) = api::client::parse_server(server) else {
        return "not a server URL".into();
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect::<Vec<_>>(),
        Err(e) => return format!("cannot resolve: {e}"),
    };
    let mut last = "no address".to_string();
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(3)) {
            Ok(_) => return format!("reachable ({a})"),
            Err(e) => last = format!("not reachable ({a}: {e})"),
        }
    }
    last
}
