//! The node's side of the local-path provisioner: the directory that holds this node's
//! provisioned volumes, and the removal of a deleted volume's directory.
//!
//! The server's PV controller provisions a volume by writing a PersistentVolume whose
//! hostPath lies under the directory this agent advertises on its Node
//! (`storage.skiff.io/local-path-dir`); the directory of a volume is made when a pod first
//! mounts it ([`crate::pods::volumes`]). When a volume with reclaim policy Delete is
//! released, the controller deletes the PersistentVolume, which waits on the
//! `storage.skiff.io/local-path-cleanup` finalizer until the agent of its node has removed
//! the directory. The agent owns the node's disk, so it does the `rm`; k3s runs a helper pod
//! for it, which needs an image and a scheduled pod on a board that may be offline.
//!
//! The agent looks for such volumes every [`CLEANUP_EVERY`] with one list of the
//! PersistentVolumes (few on an edge cluster; a deletion is not urgent), so a volume deleted
//! while the agent was down is cleaned up when it comes back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use api::client::Client;
use api::storage::{PersistentVolume, LOCAL_PATH_CLEANUP_FINALIZER};

/// How often deleted volumes of this node are looked for.
pub const CLEANUP_EVERY: Duration = Duration::from_secs(5);

/// The directory of this node's local-path volumes.
pub fn storage_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("storage")
}

/// Whether `pv` is a local-path volume of `node` being deleted, and the directory to remove
/// (only ever one directly under `storage_dir`: a volume object cannot make the agent remove
/// anything else).
pub fn doomed_dir(pv: &PersistentVolume, node: &str, storage_dir: &Path) -> Option<PathBuf> {
    pv.metadata.deletion_timestamp?;
    if !pv
        .metadata
        .finalizers
        .iter()
        .any(|f| f == LOCAL_PATH_CLEANUP_FINALIZER)
    {
        return None;
    }
    let on_node = pv
        .spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .is_some_and(|r| {
            r.node_selector_terms.iter().any(|t| {
                t.match_expressions.iter().any(|e| {
                    e.key == "kubernetes.io/hostname"
                        && e.operator == "In"
                        && e.values.iter().any(|v| v == node)
                })
            })
        });
    if !on_node {
        return None;
    }
    let path = PathBuf::from(&pv.spec.host_path.as_ref()?.path);
    let name = path.file_name()?.to_str()?;
    (path.parent() == Some(storage_dir) && name.starts_with("pvc-")).then_some(path)
}

/// Removes the directories of this node's deleted local-path volumes and their finalizers,
/// forever.
pub async fn remove_deleted_volumes(client: Client, node: String, storage_dir: PathBuf) {
    loop {
        if let Err(e) = cleanup_once(&client, &node, &storage_dir).await {
            tracing::debug!(error = %e, "looking for deleted local-path volumes failed");
        }
        smol::Timer::after(CLEANUP_EVERY).await;
    }
}

async fn cleanup_once(client: &Client, node: &str, storage_dir: &Path) -> Result<(), String> {
    let (volumes, _) = client
        .list::<PersistentVolume>(None, None, None)
        .await
        .map_err(|e| e.to_string())?;
    for mut pv in volumes {
        let Some(dir) = doomed_dir(&pv, node, storage_dir) else {
            continue;
        };
        let shown = dir.display().to_string();
        let removed = smol::unblock(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await;
        if let Err(e) = removed {
            tracing::warn!(volume = %pv.metadata.name, dir = %shown, "cannot remove the volume's directory: {e}");
            continue;
        }
        tracing::info!(volume = %pv.metadata.name, dir = %shown, "removed the deleted volume's directory");
        pv.metadata
            .finalizers
            .retain(|f| f != LOCAL_PATH_CLEANUP_FINALIZER);
        if let Err(e) = client.replace(&pv).await {
            if !e.is_not_found() {
                tracing::debug!(volume = %pv.metadata.name, error = %e, "removing the cleanup finalizer failed");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{
        HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };
    use api::storage::VolumeNodeAffinity;

    fn pv(path: &str, node: &str, deleting: bool) -> PersistentVolume {
        let mut v = PersistentVolume::default();
        v.metadata.name = "pvc-1".into();
        v.metadata.finalizers = vec![LOCAL_PATH_CLEANUP_FINALIZER.into()];
        if deleting {
            v.metadata.deletion_timestamp = Some(api::meta::Time::now());
        }
        v.spec.host_path = Some(HostPathVolumeSource {
            path: path.into(),
            type_: None,
        });
        v.spec.node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".into(),
                        operator: "In".into(),
                        values: vec![node.into()],
                    }],
                    ..Default::default()
                }],
            }),
        });
        v
    }

    #[test]
    fn only_this_nodes_deleted_volumes_under_the_storage_dir() {
        let dir = Path::new("/var/lib/skiff/storage");
        let ok = "/var/lib/skiff/storage/pvc-1_default_data";
        assert_eq!(
            doomed_dir(&pv(ok, "a", true), "a", dir),
            Some(PathBuf::from(ok))
        );
        assert_eq!(doomed_dir(&pv(ok, "a", false), "a", dir), None);
        assert_eq!(doomed_dir(&pv(ok, "b", true), "a", dir), None);
        assert_eq!(doomed_dir(&pv("/etc", "a", true), "a", dir), None);
        assert_eq!(
            doomed_dir(
                &pv("/var/lib/skiff/storage/../../../etc", "a", true),
                "a",
                dir
            ),
            None
        );
        let mut kept = pv(ok, "a", true);
        kept.metadata.finalizers.clear();
        assert_eq!(doomed_dir(&kept, "a", dir), None);
    }
}
