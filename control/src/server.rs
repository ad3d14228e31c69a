//! `skiff server`: opens the store, makes or loads the PKI, serves the API.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags of `skiff server`; each has an environment-variable twin.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Directory for the state database, the PKI and the admin kubeconfig.
    #[arg(long, env = "SKIFF_DATA_DIR", default_value = "/var/lib/skiff/server")]
    pub data_dir: PathBuf,
    /// Address and port the HTTPS API listens on.
    #[arg(long, env = "SKIFF_LISTEN", default_value = "0.0.0.0:6443")]
    pub listen: SocketAddr,
    /// Number of past events kept for watches to resume from.
    #[arg(long, env = "SKIFF_EVENT_WINDOW", default_value_t = 10_000)]
    pub event_window: u64,
    /// Extra names or addresses for the serving certificate (repeatable).
    #[arg(long = "tls-san", env = "SKIFF_TLS_SAN", value_delimiter = ',')]
    pub tls_san: Vec<String>,
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(_args: ServerArgs) -> anyhow::Result<()> {
    anyhow::bail!("the server is not built yet")
}
