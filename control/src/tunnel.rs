//! The tunnels agents open to this server (docs/design/tunnel.md): an agent behind NAT
//! upgrades a connection at `/skiff/v1/tunnel` (`http::handle`), and node-bound requests
//! for its node (`http::logs::fetch`: logs, exec, attach, port-forward, the resource
//! metrics' summaries) go through a stream of it instead of a connection to the node.
//! Held in memory per server; one tunnel per node, a newer one replacing an older.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use api::tunnel::Opener;
use futures_lite::{AsyncRead, AsyncWrite};

/// The tunnels of the agents connected to this server, by node name.
#[derive(Debug, Default)]
pub struct Tunnels {
    by_node: Mutex<HashMap<String, (u64, Opener)>>,
    next: AtomicU64,
}

impl Tunnels {
    pub fn new() -> Arc<Tunnels> {
        Arc::default()
    }

    /// Runs the tunnel `node`'s agent opened on `socket` (already upgraded) until it ends.
    pub fn accept<T>(self: &Arc<Self>, node: String, socket: T)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (opener, driver) = Opener::start(socket);
        self.lock().insert(node.clone(), (id, opener));
        tracing::info!(%node, "agent tunnel up");
        let this = self.clone();
        smol::spawn(async move {
            let end = driver.await;
            let mut map = this.lock();
            if map.get(&node).is_some_and(|(i, _)| *i == id) {
                map.remove(&node);
            }
            drop(map);
            match end {
                Ok(()) => tracing::info!(%node, "agent tunnel closed"),
                Err(e) => tracing::info!(%node, error = %e, "agent tunnel lost"),
            }
        })
        .detach();
    }

    /// A stream to `node`'s agent through its tunnel, if it has one here: `None` without a
    /// tunnel, `Some(Err)` when the tunnel could not open one.
    pub async fn open(&self, node: &str) -> Option<Result<api::tunnel::Stream, String>> {
        let opener = self
            .lock()
            .get(node)
            .map(|(_, o)| o.clone())
            .filter(|o| !o.is_closed())?;
        Some(opener.open().await)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Opener)>> {
        self.by_node.lock().unwrap_or_else(|e| e.into_inner())
    }
}
