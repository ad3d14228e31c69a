//! The skiff node agent: images, container runtime (libcontainer), pod lifecycle, network,
//! service proxy, probes and logs.

pub mod dns;
pub mod image;
pub mod node;
pub mod pods;
pub mod runtime;
pub mod sim;
pub mod sys;
