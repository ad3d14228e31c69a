//! The `skiff` command line: `server`, `apply`, `get`, `delete`, `version`.

pub mod apply;
pub mod backup;
pub mod certs;
pub mod delete;
pub mod get;
pub mod logs;
pub mod manifest;
pub mod rollout;
pub mod scale;
pub mod table;

use std::path::PathBuf;

use anyhow::Context as _;
use api::client::{Client, ClientConfig};
use api::kubeconfig::Kubeconfig;
use api::Kind;
use clap::{Parser, Subcommand};

use crate::server::ServerArgs;

/// `0.1.0 (commit 1a2b3c4d5e, x86_64-unknown-linux-musl)`: what `--version` prints.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SKIFF_GIT_COMMIT"),
    ", ",
    env!("SKIFF_TARGET"),
    ")"
);

/// Parses the command line; `skiff server` also reads its config file (`--config`,
/// `SKIFF_CONFIG`, else /etc/skiff/server.toml when it exists) as the flags' defaults.
pub fn parse_args() -> Result<Cli, clap::Error> {
    api::config::parse_args(
        std::env::args_os(),
        &api::config::ConfigSource {
            subcommand: Some("server"),
            arg_id: "config",
            default_path: "/etc/skiff/server.toml",
        },
    )
}

/// skiff: a small Kubernetes-style orchestrator for edge sites.
#[derive(Debug, Parser)]
#[command(name = "skiff", version = VERSION, about, propagate_version = true)]
pub struct Cli {
    /// Path to the kubeconfig file (default: first existing file of $KUBECONFIG, then
    /// ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the server's flags does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane.
    Server(Box<ServerArgs>),
    /// Create or update objects from manifest files.
    Apply(apply::ApplyArgs),
    /// Show objects.
    Get(get::GetArgs),
    /// Delete objects by kind and name, or those in manifest files.
    Delete(delete::DeleteArgs),
    /// Print a container's log.
    Logs(logs::LogsArgs),
    /// Print the client and server versions.
    Version(VersionArgs),
    /// Manage the rollout of a Deployment or DaemonSet.
    #[command(subcommand)]
    Rollout(rollout::RolloutCommand),
    /// Set the replicas of a Deployment, ReplicaSet or ReplicationController.
    Scale(scale::ScaleArgs),
    /// Save the server's state (objects, PKI) from the live server into FILE.
    Backup(backup::BackupArgs),
    /// Restore a backup into a data dir (offline: the server must not run on it).
    Restore(backup::RestoreArgs),
    /// Manage join tokens (for nodes, and with --server for servers).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage users (client certificates signed by the cluster CA).
    #[command(subcommand)]
    User(UserCommand),
    /// Manage the encryption of Secrets at rest.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Inspect the certificates of a server's or agent's data dir.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    /// Copy a cluster's objects between the embedded store and an etcd datastore (offline:
    /// stop the servers first).
    Migrate(MigrateArgs),
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Where the objects are: `redb:DATA_DIR` or `etcd:URL[,URL...]`.
    #[arg(long)]
    pub from: crate::store::migrate::Place,
    /// Where they go, which must hold no objects: `redb:DATA_DIR` or `etcd:URL[,URL...]`. The
    /// redb side's data dir holds the cluster's secrets.key.
    #[arg(long)]
    pub to: crate::store::migrate::Place,
    /// The CA certificate (PEM) of the etcd members.
    #[arg(long, value_name = "FILE")]
    pub datastore_cafile: Option<PathBuf>,
    /// A client certificate (PEM) for etcd.
    #[arg(long, value_name = "FILE")]
    pub datastore_certfile: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE")]
    pub datastore_keyfile: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Seal every Secret with a new key and drop the old one (offline: stop the server
    /// first; its data dir's secrets.key is replaced).
    RotateKey {
        /// The stopped server's data dir.
        #[arg(long, default_value = "/var/lib/skiff/server")]
        data_dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Write a kubeconfig for user NAME: a new key and a client certificate with CN NAME and
    /// one O per group, which RBAC bindings then grant permissions to.
    Create {
        name: String,
        /// A group of the user (repeatable; at most two).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// How long the certificate is valid, e.g. `720h`, `365d` [default: the server's
        /// --cluster-signing-duration, a year unless set; longer is cut to it].
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
        /// Where to write the kubeconfig (default: NAME.kubeconfig; `-` for stdout).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a new join token for `skiff-agent --token`, or with --server one for
    /// `skiff server --join URL --token`.
    Create {
        /// How long the token may be used, e.g. `24h`, `30m`, `7d` [default: 24h for a node
        /// token, 2h for a server token].
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
        /// A token for servers joining the cluster: it fetches the cluster's CA key,
        /// service-account key, secrets key and admin token, so treat it as an admin
        /// credential (it joins nodes as well).
        #[arg(long)]
        server: bool,
    },
}

/// A node token's lifetime unless `--ttl` says otherwise (kubeadm's bootstrap tokens').
const NODE_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// A server token's (kubeadm's certificate key, which unlocks the uploaded control-plane
/// keys, lives two hours).
const SERVER_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

#[derive(Debug, clap::Args)]
pub struct VersionArgs {
    /// Print only the client version.
    #[arg(long)]
    pub client: bool,
}

/// An error that was already printed (to stderr, as `error: ...`); the command only has to
/// exit non-zero.
#[derive(Debug, thiserror::Error)]
#[error("{0} of the objects failed")]
pub struct AlreadyReported(pub usize);

/// The connection and namespace every client command works with.
pub struct Session {
    pub client: Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
    /// True when `-n` was given.
    pub namespace_explicit: bool,
}

impl Session {
    pub fn open(cli: &Cli) -> anyhow::Result<Session> {
        let kc = Kubeconfig::discover(cli.kubeconfig.as_deref())?;
        let resolved = kc.resolve(cli.context.as_deref())?;
        let context_ns = resolved.namespace.clone();
        let client = Client::new(ClientConfig::from_resolved(resolved))?;
        Ok(Session {
            client,
            namespace: cli
                .namespace
                .clone()
                .or(context_ns)
                .unwrap_or_else(|| "default".into()),
            namespace_explicit: cli.namespace.is_some(),
        })
    }
}

/// Resolves a kind as typed on the command line.
pub fn resolve_kind(name: &str) -> anyhow::Result<Kind> {
    Kind::from_cli_name(name)
        .ok_or_else(|| anyhow::anyhow!("the server doesn't have a resource type {name:?}"))
}

/// `pod`, `deployment.apps`: how kubectl names a kind in its messages.
pub fn kind_label(kind: Kind) -> String {
    let info = kind.info();
    if info.group.is_empty() {
        info.singular.to_string()
    } else {
        format!("{}.{}", info.singular, info.group)
    }
}

/// Runs a client command (everything but `server`).
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Server(_) => anyhow::bail!("`skiff server` is not a client command"),
        Command::Version(args) => {
            println!(
                "Client Version: v{} (commit {}, target {})",
                env!("CARGO_PKG_VERSION"),
                env!("SKIFF_GIT_COMMIT"),
                env!("SKIFF_TARGET")
            );
            if args.client {
                return Ok(());
            }
            let session = Session::open(&cli)?;
            smol::block_on(async {
                let v = session
                    .client
                    .request_json("GET", "/version", None, api::client::ACCEPT_JSON)
                    .await?;
                let server = v
                    .get("gitVersion")
                    .and_then(|g| g.as_str())
                    .unwrap_or("unknown");
                println!("Server Version: {server}");
                Ok(())
            })
        }
        Command::Apply(args) => {
            let session = Session::open(&cli)?;
            smol::block_on(apply::run(&session, args))
        }
        Command::Get(args) => {
            let session = Session::open(&cli)?;
            smol::block_on(get::run(&session, args))
        }
        Command::Delete(args) => {
            let session = Session::open(&cli)?;
            smol::block_on(delete::run(&session, args))
        }
        Command::Logs(args) => {
            let session = Session::open(&cli)?;
            smol::block_on(logs::run(&session, args))
        }
        Command::Rollout(cmd) => {
            let session = Session::open(&cli)?;
            smol::block_on(rollout::run(&session, cmd))
        }
        Command::Scale(args) => {
            let session = Session::open(&cli)?;
            smol::block_on(scale::run(&session, args))
        }
        Command::Backup(args) => {
            let session = Session::open(&cli)?;
            smol::block_on(backup::run_backup(&session, args))
        }
        Command::Restore(args) => backup::run_restore(args),
        Command::Migrate(args) => run_migrate(args),
        Command::Certs(certs::CertsCommand::Check { data_dir }) => certs::check(data_dir),
        Command::Secrets(SecretsCommand::RotateKey { data_dir }) => {
            let r = crate::store::rotate::rotate_key(data_dir)?;
            println!(
                "secrets key rotated: {} replaces {}; {} secrets and {} logged events sealed again",
                r.new_key, r.old_key, r.secrets, r.events
            );
            Ok(())
        }
        Command::User(UserCommand::Create {
            name,
            groups,
            ttl,
            output,
        }) => {
            let session = Session::open(&cli)?;
            let kc = Kubeconfig::discover(cli.kubeconfig.as_deref())?;
            let server = kc.resolve(cli.context.as_deref())?.server;
            let key = rcgen::KeyPair::generate()?;
            let mut params = rcgen::CertificateParams::default();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name.as_str());
            let csr = params.serialize_request(&key)?.pem()?;
            let body = serde_json::to_value(api::join::UserCertRequest {
                name: name.clone(),
                groups: groups.clone(),
                ttl_seconds: ttl.map_or(0, |t| t.as_secs().max(1)),
                csr,
            })?;
            let answer: api::join::UserCertResponse = smol::block_on(async {
                let v = session
                    .client
                    .request_json(
                        "POST",
                        api::join::USERS_PATH,
                        Some(&body),
                        api::client::ACCEPT_JSON,
                    )
                    .await?;
                anyhow::Ok(serde_json::from_value(v)?)
            })?;
            let config = Kubeconfig::with_client_cert(
                "skiff",
                &server,
                &answer.ca,
                name,
                &answer.certificate,
                &key.serialize_pem(),
            )
            .to_yaml();
            let path = output
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{name}.kubeconfig")));
            if path.as_os_str() == "-" {
                print!("{config}");
            } else {
                use std::io::Write as _;
                use std::os::unix::fs::OpenOptionsExt as _;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&path)
                    .with_context(|| format!("writing {}", path.display()))?;
                f.write_all(config.as_bytes())?;
                eprintln!("wrote {} for user {name:?}", path.display());
            }
            Ok(())
        }
        Command::Token(TokenCommand::Create { ttl, server }) => {
            let (ttl, server) = (*ttl, *server);
            let session = Session::open(&cli)?;
            let ttl = ttl.unwrap_or(if server {
                SERVER_TOKEN_TTL
            } else {
                NODE_TOKEN_TTL
            });
            let body = serde_json::to_value(api::join::TokenRequest {
                ttl_seconds: ttl.as_secs(),
                server,
            })?;
            smol::block_on(async {
                let v = session
                    .client
                    .request_json(
                        "POST",
                        api::join::TOKENS_PATH,
                        Some(&body),
                        api::client::ACCEPT_JSON,
                    )
                    .await?;
                let t: api::join::TokenResponse = serde_json::from_value(v)?;
                if server && !t.server {
                    anyhow::bail!(
                        "the server made a node token, not a server token: it is older than server join tokens"
                    );
                }
                println!("{}", t.token);
                Ok(())
            })
        }
    }
}

/// An error as the one line the CLI prints after `error: `.
pub fn error_line(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn run_migrate(args: &MigrateArgs) -> anyhow::Result<()> {
    let read = |path: &Option<PathBuf>| -> anyhow::Result<Option<String>> {
        path.as_ref()
            .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
            .transpose()
    };
    let tls = crate::etcd::EtcdConfig {
        endpoints: Vec::new(),
        ca_pem: read(&args.datastore_cafile)?,
        client_cert_pem: read(&args.datastore_certfile)?,
        client_key_pem: read(&args.datastore_keyfile)?,
    };
    let copied = smol::block_on(crate::store::migrate::migrate(&args.from, &args.to, &tls))
        .map_err(|e| anyhow::anyhow!("migrate: {e}"))?;
    for (kind, n) in &copied.kinds {
        println!("{:>8} {}", n, kind.info().plural);
    }
    println!("{} objects copied", copied.total());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("skiff").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn kinds_resolve_from_cli_names() {
        for (name, kind) in [
            ("po", Kind::Pod),
            ("pods", Kind::Pod),
            ("Pod", Kind::Pod),
            ("deploy", Kind::Deployment),
            ("deployments.apps", Kind::Deployment),
            ("svc", Kind::Service),
            ("ns", Kind::Namespace),
            ("no", Kind::Node),
        ] {
            assert_eq!(resolve_kind(name).unwrap(), kind, "{name}");
        }
        let e = resolve_kind("widgets").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the server doesn't have a resource type \"widgets\""
        );
        assert_eq!(kind_label(Kind::Deployment), "deployment.apps");
        assert_eq!(kind_label(Kind::Pod), "pod");
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = parse(&["get", "pods", "-n", "kube-system", "--context", "edge"]);
        assert_eq!(cli.namespace.as_deref(), Some("kube-system"));
        assert_eq!(cli.context.as_deref(), Some("edge"));
        let cli = parse(&["--kubeconfig", "/tmp/k", "get", "po", "web", "-o", "wide"]);
        assert_eq!(cli.kubeconfig, Some(PathBuf::from("/tmp/k")));
        match cli.command {
            Command::Get(g) => {
                assert_eq!(g.kind, "po");
                assert_eq!(g.names, ["web"]);
                assert_eq!(g.output, Some(get::Output::Wide));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn server_flags_parse() {
        let cli = parse(&["server", "--data-dir", "/tmp/d", "--tls-san", "a,b"]);
        match cli.command {
            Command::Server(s) => {
                assert_eq!(s.data_dir, PathBuf::from("/tmp/d"));
                assert_eq!(s.tls_san, ["a", "b"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_print_on_one_line() {
        let e = anyhow::anyhow!("line one\nline two").context("reading x.yaml");
        assert_eq!(error_line(&e), "reading x.yaml: line one line two");
    }
}
