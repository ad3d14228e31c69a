//! Pod sandboxes: the namespaces a pod's containers share, kept alive without a pause process.
//!
//! A short-lived thread unshares new ipc, uts and (unless host networking) net namespaces —
//! these are per-thread, so this is safe in the multi-threaded agent — sets the hostname,
//! brings `lo` up, and bind-mounts `/proc/thread-self/ns/{ipc,uts,net}` onto files in
//! `<state_dir>/sandboxes/<pod_uid>/ns/`, exactly as `ip netns add` does. The thread then exits;
//! the namespaces live on for as long as those bind mounts (or a container in them) exist, so a
//! sandbox is pure filesystem state that survives an agent restart.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RuntimeError;
use crate::sys;

/// What a pod's sandbox looks like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// The pod's hostname (UTS namespace).
    pub hostname: String,
    /// Use the node's network namespace instead of a new one (`hostNetwork`).
    pub host_network: bool,
    /// Containers stay in the node's pid namespace (`hostPID`); refused unless the runtime
    /// allows privileged pods.
    pub host_pid: bool,
    /// One pid namespace for all the pod's containers (`shareProcessNamespace`); not supported
    /// yet, refused.
    pub share_pid: bool,
}

/// A pod's sandbox: the directory holding its namespace files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The pod's uid.
    pub pod_uid: String,
    /// `<state_dir>/sandboxes/<pod_uid>`.
    pub dir: PathBuf,
    /// What it was created with.
    pub config: SandboxConfig,
}

impl Sandbox {
    /// The pod's IPC namespace file.
    pub fn ipc_ns_path(&self) -> PathBuf {
        self.dir.join("ns/ipc")
    }

    /// The pod's UTS namespace file.
    pub fn uts_ns_path(&self) -> PathBuf {
        self.dir.join("ns/uts")
    }

    /// The pod's network namespace file (for the network layer to set up interfaces with
    /// `setns`), or `None` for host-network pods.
    pub fn net_ns_path(&self) -> Option<PathBuf> {
        (!self.config.host_network).then(|| self.dir.join("ns/net"))
    }

    fn config_path(dir: &Path) -> PathBuf {
        dir.join("sandbox.json")
    }

    /// Loads the sandbox stored in `dir`.
    pub(super) fn load(pod_uid: &str, dir: &Path) -> Result<Self, RuntimeError> {
        let path = Self::config_path(dir);
        let bytes = std::fs::read(&path).map_err(|e| RuntimeError::io("read sandbox", &path, e))?;
        let config = serde_json::from_slice(&bytes)
            .map_err(|e| RuntimeError::Corrupt(format!("{}: {e}", path.display())))?;
        Ok(Sandbox {
            pod_uid: pod_uid.to_string(),
            dir: dir.to_path_buf(),
            config,
        })
    }
}

/// Creates the sandbox's namespaces under `dir` (which must not exist yet).
pub(super) fn create(
    pod_uid: &str,
    dir: &Path,
    config: &SandboxConfig,
) -> Result<Sandbox, RuntimeError> {
    let ns_dir = dir.join("ns");
    std::fs::create_dir_all(&ns_dir)
        .map_err(|e| RuntimeError::io("create sandbox dir", &ns_dir, e))?;
    let mut kinds = vec!["ipc", "uts"];
    if !config.host_network {
        kinds.push("net");
    }
    for kind in &kinds {
        let file = ns_dir.join(kind);
        std::fs::File::create(&file).map_err(|e| RuntimeError::io("create ns file", &file, e))?;
    }

    let hostname = config.hostname.clone();
    let host_network = config.host_network;
    let thread_ns_dir = ns_dir.clone();
    let result = std::thread::Builder::new()
        .name("sandbox-ns".into())
        .spawn(move || -> Result<(), RuntimeError> {
            let mut flags = libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
            if !host_network {
                flags |= libc::CLONE_NEWNET;
            }
            sys::unshare(flags).map_err(|e| RuntimeError::sys("unshare pod namespaces", e))?;
            sys::sethostname(&hostname).map_err(|e| RuntimeError::sys("sethostname", e))?;
            if !host_network {
                sys::loopback_up().map_err(|e| RuntimeError::sys("bring lo up", e))?;
            }
            for kind in &kinds {
                let source = Path::new("/proc/thread-self/ns").join(kind);
                sys::bind_mount(&source, &thread_ns_dir.join(kind))
                    .map_err(|e| RuntimeError::sys("bind-mount namespace", e))?;
            }
            Ok(())
        })
        .map_err(|e| RuntimeError::io("spawn namespace thread", dir, e))?
        .join()
        .unwrap_or_else(|_| Err(RuntimeError::Corrupt("namespace thread panicked".into())));
    if let Err(e) = result {
        let _ = remove(dir);
        return Err(e);
    }

    let path = Sandbox::config_path(dir);
    let bytes = serde_json::to_vec(config).map_err(|e| RuntimeError::Corrupt(e.to_string()))?;
    if let Err(e) = std::fs::write(&path, bytes) {
        let _ = remove(dir);
        return Err(RuntimeError::io("write sandbox", &path, e));
    }
    Ok(Sandbox {
        pod_uid: pod_uid.to_string(),
        dir: dir.to_path_buf(),
        config: config.clone(),
    })
}

/// Unmounts the namespace files and removes the sandbox directory. Missing pieces are fine,
/// so this also cleans up after a half-created sandbox.
pub(super) fn remove(dir: &Path) -> Result<(), RuntimeError> {
    let ns_dir = dir.join("ns");
    for kind in ["ipc", "uts", "net"] {
        let file = ns_dir.join(kind);
        if !file.exists() {
            continue;
        }
        match sys::unmount_detach(&file) {
            // EINVAL: not a mount point (creation failed before the bind mount).
            Ok(()) | Err(sys::Errno::EINVAL) | Err(sys::Errno::ENOENT) => {}
            Err(e) => return Err(RuntimeError::sys("unmount namespace", e)),
        }
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io("remove sandbox dir", dir, e)),
    }
}
