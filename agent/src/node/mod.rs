//! The node: joining the cluster, registering the Node, heartbeats, and the agent's main
//! loop that ties the API, the image store, the runtime and the pod workers together.
//!
//! ```text
//! run(AgentConfig) -> Result<(), AgentError>          // blocks forever
//! credentials::join(server, token, node_name, data_dir).await -> Result<Credentials, JoinError>
//! Credentials::load(data_dir) -> Result<Option<Credentials>, JoinError>
//! register::build_node(&NodeFacts, &NodeSettings, Time) -> Node
//! register::register(&Client, &Node).await ; register::heartbeat(&Client, name, since).await
//! ```

pub mod credentials;
pub mod facts;
pub mod register;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use api::core::Taint;
use api::meta::Time;

pub use credentials::{Credentials, JoinError};
pub use facts::NodeFacts;
pub use register::{NodeSettings, SettingError};

use crate::image::{
    cli::images_dir, cli::registries_file, ImageStore, PullOptions, RegistryConfig,
};
use crate::pods::{Context, PodCache, PodManager};
use crate::runtime::{Runtime, RuntimeConfig};

/// Everything the agent is started with.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// `https://host:port`; needed only for the first join.
    pub server: Option<String>,
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
    pub heartbeat: Duration,
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
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the node is joined to {joined}, not {given}: remove {dir} to join another server")]
    OtherServer {
        joined: String,
        given: String,
        dir: PathBuf,
    },
}

/// Loads the stored credentials, or joins with the token.
pub async fn credentials(cfg: &AgentConfig) -> Result<Credentials, AgentError> {
    if let Some(c) = Credentials::load(&cfg.data_dir)? {
        if let Some(given) = &cfg.server {
            if given.trim_end_matches('/') != c.server {
                return Err(AgentError::OtherServer {
                    joined: c.server,
                    given: given.clone(),
                    dir: cfg.data_dir.clone(),
                });
            }
        }
        return Ok(c);
    }
    let (Some(server), Some(token)) = (&cfg.server, &cfg.token) else {
        return Err(JoinError::NotJoined.into());
    };
    tracing::info!(%server, node = %cfg.node_name, "joining the cluster");
    Ok(credentials::join(server, token, &cfg.node_name, &cfg.data_dir).await?)
}

/// Runs the agent: join (once), register, heartbeat, pods. Returns only on a fatal error.
pub fn run(cfg: AgentConfig) -> Result<(), AgentError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| AgentError::Io {
        what: "create",
        path: cfg.data_dir.clone(),
        source,
    })?;
    smol::block_on(async move {
        let creds = credentials(&cfg).await?;
        let client = creds.client()?;
        let node_ip = match &cfg.node_ip {
            Some(ip) => ip.clone(),
            None => facts::local_address_towards(&creds.server)
                .map(|a| a.to_string())
                .unwrap_or_default(),
        };

        let mut runtime_cfg = RuntimeConfig::new(&cfg.run_dir, cfg.cgroup_parent.clone());
        runtime_cfg.allow_privileged = cfg.allow_privileged;
        let runtime = smol::unblock(move || Runtime::new(runtime_cfg)).await?;
        let images = ImageStore::open(&images_dir(&cfg.data_dir))?;
        let cache_path = cfg.data_dir.join("pods.redb");
        let cache = smol::unblock(move || PodCache::open(&cache_path)).await?;
        let pull_options = PullOptions {
            registries: RegistryConfig::load(&registries_file(&cfg.data_dir))?,
            platform: None,
        };

        let settings = NodeSettings {
            name: cfg.node_name.clone(),
            internal_ip: node_ip.clone(),
            labels: cfg.labels.iter().cloned().collect(),
            taints: cfg.taints.clone(),
            max_pods: cfg.max_pods,
        };
        let data_dir = cfg.data_dir.clone();
        let node_facts = smol::unblock(move || NodeFacts::gather(&data_dir)).await;
        smol::spawn(keep_registered(
            client.clone(),
            node_facts,
            settings,
            cfg.heartbeat,
        ))
        .detach();

        let manager = PodManager::new(Context {
            runtime: Arc::new(runtime),
            images,
            client,
            cache: Arc::new(cache),
            node_name: cfg.node_name.clone(),
            node_ip,
            pods_dir: cfg.data_dir.join("pods"),
            pull_options,
            allow_privileged: cfg.allow_privileged,
        });
        manager.run().await;
        Ok(())
    })
}

/// Registers the Node (retrying until the server answers), then heartbeats; re-registers
/// if the Node was deleted.
async fn keep_registered(
    client: api::client::Client,
    facts: NodeFacts,
    settings: NodeSettings,
    every: Duration,
) {
    loop {
        let ready_since = Time::now();
        let node = register::build_node(&facts, &settings, ready_since);
        let mut delay = Duration::from_millis(500);
        loop {
            match register::register(&client, &node).await {
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(node = %settings.name, "cannot register the node: {e}");
                    smol::Timer::after(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
        tracing::info!(node = %settings.name, "node registered");
        loop {
            smol::Timer::after(every).await;
            match register::heartbeat(&client, &settings.name, ready_since).await {
                Ok(true) => tracing::debug!(node = %settings.name, "heartbeat"),
                Ok(false) => break,
                Err(e) => tracing::warn!(node = %settings.name, "heartbeat failed: {e}"),
            }
        }
    }
}
