//! The node's local copy of its desired pods (`<data-dir>/pods.redb`), so that after a
//! reboot without the server the agent still starts them. Keyed by pod uid; values are a
//! versioned postcard envelope of the Pod. Written only when a pod's spec or deletion state
//! changes, never for status updates.

use std::path::Path;

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
        let mut stripped = pod.clone();
        stripped.status = Default::default();
        let bytes = postcard::to_allocvec(&Stored::V1(stripped))?;
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(PODS)?;
            t.insert(pod.metadata.uid.as_str(), bytes.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &str) -> Result<(), CacheError> {
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(PODS)?;
            t.remove(uid)?;
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
}
