//! The skiff control plane: store, HTTP API, registry semantics, the control-loop machinery,
//! scheduler and controllers, PKI and auth,
//! and the CLI.

pub mod admission;
pub mod aggregator;
pub mod apiservice;
pub mod audit;
pub mod auth;
pub mod certificates;
pub mod cli;
pub mod cluster_join;
pub mod controllers;
pub mod crd;
pub mod error;
pub mod etcd;
pub mod fieldmanager;
pub mod flowcontrol;
pub mod heartbeat;
pub mod http;
pub mod impersonation;
pub mod ipalloc;
pub mod join;
pub mod leader;
pub mod machinery;
pub mod nodegraph;
pub mod pki;
pub mod podsecurity;
pub mod rbac;
pub mod registry;
pub mod resources;
pub mod scheduler;
pub mod server;
pub mod serviceaccount;
pub mod store;
pub mod strategic;
pub mod tunnel;
pub mod webhook;
