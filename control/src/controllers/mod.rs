//! Controllers that run inside the server as clients of the store: they read through the
//! shared informer cache ([`crate::machinery`]) and write only through the registry, with
//! optimistic concurrency (a write based on a stale object gets a conflict and the key is
//! retried).

use crate::machinery::{events, Context};

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod gc;
pub mod ingress;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod servicelb;
pub mod statefulset;
pub mod volume;
pub mod workload;

/// Starts every control loop on the current executor.
pub fn start_all(ctx: &Context) {
    smol::spawn(namespace::run(ctx.registry.clone())).detach();
    ctx.registry
        .set_default_toleration_seconds(ctx.config.default_toleration_seconds);
    replicaset::start(ctx);
    deployment::start(ctx);
    daemonset::start(ctx);
    job::start(ctx);
    cronjob::start(ctx);
    endpoints::start(ctx);
    endpointslice::start(ctx);
    nodelifecycle::start(ctx);
    podgc::start(ctx);
    nodeipam::start(ctx);
    ingress::start(ctx);
    servicelb::start(ctx);
    disruption::start(ctx);
    resourcequota::start(ctx);
    volume::start(ctx);
    statefulset::start(ctx);
    gc::start(ctx.registry.clone());
    smol::spawn(events::run_sweeper(
        ctx.registry.clone(),
        events::SWEEP_EVERY,
    ))
    .detach();
}
