//! Controllers that run inside the server as clients of the store: they read through the
//! shared [`informer::Informers`] cache and write only through the registry, with optimistic
//! concurrency (a write based on a stale object gets a conflict and the key is retried).

use std::sync::Arc;
use std::time::Duration;

use api::Kind;

use crate::registry::Registry;

pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod events;
pub mod gc;
pub mod informer;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod queue;
pub mod replicaset;
pub mod runner;
pub mod workload;

/// The kinds the shared cache holds.
pub const CACHED_KINDS: &[Kind] = &[
    Kind::Node,
    Kind::Pod,
    Kind::Service,
    Kind::Endpoints,
    Kind::ReplicaSet,
    Kind::Deployment,
    Kind::DaemonSet,
];

/// Settings of the control loops (flags of `skiff server`).
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// A node without a heartbeat for this long becomes Ready=Unknown and unreachable.
    pub node_monitor_grace_period: Duration,
    /// How long pods tolerate an unreachable or not-ready node unless they say otherwise.
    pub default_toleration_seconds: i64,
    /// The pod range, a /24 of it per node (`--cluster-cidr`).
    pub cluster_cidr: api::cidr::Ipv4Cidr,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            node_monitor_grace_period: Duration::from_secs(40),
            default_toleration_seconds: 300,
            cluster_cidr: api::cidr::Ipv4Cidr::default_cluster(),
        }
    }
}

/// Everything a control loop needs.
#[derive(Clone)]
pub struct Context {
    pub registry: Registry,
    pub informers: Arc<informer::Informers>,
    pub config: ControllerConfig,
}

/// Starts every control loop on the current executor.
pub fn start_all(ctx: &Context) {
    smol::spawn(namespace::run(ctx.registry.clone())).detach();
    ctx.registry
        .set_default_toleration_seconds(ctx.config.default_toleration_seconds);
    replicaset::start(ctx);
    deployment::start(ctx);
    daemonset::start(ctx);
    endpoints::start(ctx);
    nodelifecycle::start(ctx);
    nodeipam::start(ctx);
    gc::start(ctx.registry.clone());
    smol::spawn(events::run_sweeper(
        ctx.registry.clone(),
        events::SWEEP_EVERY,
    ))
    .detach();
    crate::scheduler::start(ctx);
}
