//! The skiff object model: Kubernetes-shaped types, their validation and codecs, label and
//! field selectors, and the HTTPS client. No server code lives here.

pub mod admissionpolicy;
pub mod admissionregistration;
pub mod apiextensions;
pub mod apiregistration;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod cidr;
pub mod client;
pub mod codec;
#[cfg(feature = "config")]
pub mod config;
pub mod coordination;
pub mod core;
pub mod custom;
pub mod discovery;
pub mod flowcontrol;
pub mod join;
pub mod kubeconfig;
pub mod meta;
pub mod networking;
pub mod node;
pub mod notify;
pub mod object;
mod omit;
pub mod policy;
pub mod quantity;
pub mod quota;
pub mod rbac;
pub mod replication;
pub mod runtime;
pub mod scheduling;
pub mod schema;
pub mod selector;
pub mod stats;
pub mod storage;
pub mod table;
pub mod tls;
pub mod transport;
pub mod tunnel;
pub mod validation;

pub use object::{AnyObject, Kind, KindInfo, Resource};
