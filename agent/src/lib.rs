//! The skiff node agent: images, container runtime (libcontainer), pod lifecycle, network,
//! service proxy, ingress proxy, probes and logs.

pub mod dns;
pub mod image;
pub mod ingress;
pub mod net;
pub mod netpol;
pub mod node;
pub mod pods;
pub mod proxy;
pub mod runtime;
pub mod sim;
pub mod storage;
pub mod sys;
