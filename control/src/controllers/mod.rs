//! Controllers that run inside the server as clients of the store: they read with list and
//! watch and write only through the registry, with optimistic concurrency.

pub mod namespace;
