//! The node's local copy of its desired pods (`<data-dir>/pods.redb`), so that after a
//! reboot without the server the agent still starts them. Keyed by pod uid; values are a
//! versioned postcard envelope of the Pod. Written only when a pod's spec or deletion state
//! changes, never for status updates.

use std::path::Path;
use std::sync::Arc;

use api::core::Pod;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const PODS: TableDefinition<&str, &[u8]> = TableDefinition::new("pods");

/// What went wrong with the pod cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("pod cache: {0}")]
    Db(#[from] redb::Error),
    #[error("pod cache: cannot encode or decode a pod: {0}")]
    Codec(#[from] postcard::Error),
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for CacheError {
            fn from(e: $t) -> Self {
                CacheError::Db(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

#[derive(Serialize, Deserialize)]
enum Stored {
    V1(Pod),
}

/// The local pod cache. Blocking: call it from `smol::unblock` in async code.
pub struct PodCache {
    db: Database,
}

impl PodCache {
    /// Opens or creates the cache file.
    pub fn open(path: &Path) -> Result<PodCache, CacheError> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(PODS)?;
        txn.commit()?;
        Ok(PodCache { db })
    }

    /// Stores (or replaces) a pod, keyed by its uid.
    pub fn put(&self, pod: &Pod) -> Result<(), CacheError> {
        self.apply(&[CacheChange::Put(Box::new(pod.clone()))])
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &str) -> Result<(), CacheError> {
        self.apply(&[CacheChange::Remove(uid.to_string())])
    }

    /// Applies several changes in one transaction (one commit, one sync to disk).
    pub fn apply(&self, changes: &[CacheChange]) -> Result<(), CacheError> {
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(PODS)?;
            for change in changes {
                match change {
                    CacheChange::Put(pod) => {
                        let mut stripped = (**pod).clone();
                        stripped.status = Default::default();
                        let bytes = postcard::to_allocvec(&Stored::V1(stripped))?;
                        t.insert(pod.metadata.uid.as_str(), bytes.as_slice())?;
                    }
                    CacheChange::Remove(uid) => {
                        t.remove(uid.as_str())?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Every stored pod.
    pub fn list(&self) -> Result<Vec<Pod>, CacheError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(PODS)?;
        let mut out = Vec::new();
        for entry in t.iter()? {
            let (_, v) = entry?;
            let Stored::V1(pod) = postcard::from_bytes(v.value())?;
            out.push(pod);
        }
        Ok(out)
    }
}

/// One change to the cache.
#[derive(Debug)]
pub enum CacheChange {
    Put(Box<Pod>),
    Remove(String),
}

/// Writes to the cache in the background, in the order asked, so that starting a pod does not
/// wait for the disk: changes that queue up while a commit runs go into the next one together
/// (a burst of 20 new pods costs one or two syncs to disk instead of 20 in a row).
#[derive(Clone, Debug)]
pub struct CacheWriter {
    tx: async_channel::Sender<CacheChange>,
}

impl CacheWriter {
    /// Starts the writer task on the global executor.
    pub fn start(cache: Arc<PodCache>) -> CacheWriter {
        let (tx, rx) = async_channel::unbounded();
        smol::spawn(write_batches(cache, rx)).detach();
        CacheWriter { tx }
    }

    pub fn put(&self, pod: &Pod) {
        let _ = self.tx.try_send(CacheChange::Put(Box::new(pod.clone())));
    }

    pub fn remove(&self, uid: &str) {
        let _ = self.tx.try_send(CacheChange::Remove(uid.to_string()));
    }
}

async fn write_batches(cache: Arc<PodCache>, rx: async_channel::Receiver<CacheChange>) {
    while let Ok(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let cache = cache.clone();
        if let Err(e) = smol::unblock(move || cache.apply(&batch)).await {
            tracing::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_survive_reopening() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("pods.redb");
        let mut pod = Pod::default();
        pod.metadata.name = "web".into();
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = "u1".into();
        pod.spec.containers.push(api::core::Container {
            name: "c".into(),
            image: Some("busybox".into()),
            command: vec!["sleep".into(), "1".into()],
            ..Default::default()
        });
        pod.status.phase = Some("Running".into());
        {
            let cache = PodCache::open(&path).expect("open");
            cache.put(&pod).expect("put");
            let mut other = pod.clone();
            other.metadata.uid = "u2".into();
            cache.put(&other).expect("put");
            cache.remove("u2").expect("remove");
        }
        let cache = PodCache::open(&path).expect("reopen");
        let pods = cache.list().expect("list");
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].spec, pod.spec);
        assert_eq!(pods[0].metadata.name, "web");
        assert_eq!(pods[0].status.phase, None, "status is not cached");
    }

    #[test]
    fn batches_apply_in_order() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = Arc::new(PodCache::open(&dir.path().join("pods.redb")).expect("open"));
        let pod = |uid: &str| {
            let mut p = Pod::default();
            p.metadata.name = format!("p-{uid}");
            p.metadata.uid = uid.into();
            Box::new(p)
        };
        cache
            .apply(&[
                CacheChange::Put(pod("a")),
                CacheChange::Put(pod("b")),
                CacheChange::Remove("a".into()),
            ])
            .expect("apply");
        let names = |cache: &PodCache| -> Vec<String> {
            let pods = cache.list().expect("list");
            pods.into_iter().map(|p| p.metadata.name).collect()
        };
        assert_eq!(names(&cache), ["p-b"]);

        // Through the background writer: a put, then a remove of the same pod, in order.
        let writer = CacheWriter::start(cache.clone());
        writer.put(&pod("c"));
        writer.remove("b");
        writer.remove("c");
        writer.put(&pod("d"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = names(&cache);
            if now == ["p-d"] {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "cache is {now:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
