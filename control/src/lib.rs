//! The skiff control plane: store, HTTP API, registry semantics, PKI and auth, and the CLI.

pub mod auth;
pub mod cli;
pub mod http;
pub mod pki;
pub mod registry;
pub mod server;
pub mod store;
