//! The machinery that the scheduler and the controllers stand on, as client-go's tools are
//! for Kubernetes' control loops: the shared informer cache ([`informer`]), deduplicating work
//! queues with back-off ([`queue`]), the worker runner that feeds them from the cache
//! ([`runner`]) and the event recorder ([`events`]).
//!
//! ```text
//! server ──> scheduler ──┐
//!        └─> controllers ┴─> machinery ──> registry, store
//! ```

use std::sync::Arc;
use std::time::Duration;

use api::Kind;

use crate::registry::Registry;

pub mod events;
pub mod informer;
pub mod queue;
pub mod runner;

/// The kinds the shared cache holds.
pub const CACHED_KINDS: &[Kind] = &[
    Kind::Node,
    Kind::Pod,
    Kind::Service,
    Kind::Endpoints,
    Kind::EndpointSlice,
    Kind::ReplicaSet,
    Kind::ReplicationController,
    Kind::Deployment,
    Kind::DaemonSet,
    Kind::Ingress,
    Kind::IngressClass,
    // For the RBAC authorizer's index and the aggregation controller.
    Kind::Role,
    Kind::ClusterRole,
    Kind::RoleBinding,
    Kind::ClusterRoleBinding,
    // For the certificate signer.
    Kind::CertificateSigningRequest,
    Kind::Job,
    Kind::CronJob,
    // For the disruption controller.
    Kind::PodDisruptionBudget,
    // For the quota controller (its changes fill a new quota's status).
    Kind::ResourceQuota,
    // The admission webhooks in force.
    Kind::MutatingWebhookConfiguration,
    Kind::ValidatingWebhookConfiguration,
    Kind::ValidatingAdmissionPolicy,
    Kind::ValidatingAdmissionPolicyBinding,
    // For the ServiceAccount controller and token authenticator.
    Kind::Namespace,
    Kind::ServiceAccount,
    // For the PV binder, the protection controllers and the scheduler's volume filters.
    Kind::PersistentVolume,
    Kind::PersistentVolumeClaim,
    Kind::StorageClass,
    // For the StatefulSet controller.
    Kind::StatefulSet,
    Kind::ControllerRevision,
    // For the horizontal pod autoscaler.
    Kind::HorizontalPodAutoscaler,
    // For the node lifecycle controller (node Leases are heartbeats).
    Kind::Lease,
    // For the custom resource installer and the establishing controller.
    Kind::CustomResourceDefinition,
    // For the aggregator's proxy, registration and availability checks.
    Kind::APIService,
    // API Priority and Fairness in force, its bootstrap objects and conditions.
    Kind::FlowSchema,
    Kind::PriorityLevelConfiguration,
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
