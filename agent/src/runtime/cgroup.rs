//! Cgroup paths, OOM counters and cleanup for both cgroup v1 (one hierarchy per controller,
//! possibly with an extra empty v2 hierarchy: "hybrid") and cgroup v2 (one unified tree).
//!
//! libcontainer creates and removes each container's own cgroup; this module finds files in it
//! (for OOM detection and tests) and removes the pod and parent levels it leaves behind.

use std::io;
use std::path::{Path, PathBuf};

/// The cgroup layout found under a cgroup root (normally `/sys/fs/cgroup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// One hierarchy per controller (legacy or hybrid).
    V1,
    /// The unified hierarchy.
    V2,
}

/// Detects the layout: a root with `cgroup.controllers` is the unified (v2) hierarchy.
pub fn detect(cgroup_root: &Path) -> CgroupVersion {
    if cgroup_root.join("cgroup.controllers").exists() {
        CgroupVersion::V2
    } else {
        CgroupVersion::V1
    }
}

/// The directory of the cgroup `rel` (a path like `skiff/<pod>/<ctr>`) for the controller
/// `controller` (ignored on v2, where every controller lives in one tree).
pub fn controller_dir(cgroup_root: &Path, controller: &str, rel: &str) -> PathBuf {
    let rel = rel.trim_start_matches('/');
    match detect(cgroup_root) {
        CgroupVersion::V2 => cgroup_root.join(rel),
        CgroupVersion::V1 => cgroup_root.join(controller).join(rel),
    }
}

/// Every directory that the cgroup `rel` may have: one per v1 hierarchy (including named and
/// the hybrid unified one), or the single v2 directory. Only existing ones are returned.
pub fn all_dirs(cgroup_root: &Path, rel: &str) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    match detect(cgroup_root) {
        CgroupVersion::V2 => {
            let dir = cgroup_root.join(rel);
            if dir.is_dir() {
                vec![dir]
            } else {
                Vec::new()
            }
        }
        CgroupVersion::V1 => {
            let Ok(entries) = std::fs::read_dir(cgroup_root) else {
                return Vec::new();
            };
            let mut hierarchies: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                // Skip the symlinks such as cpu,cpuacct -> cpu that some distributions add.
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.path().join(rel))
                .filter(|p| p.is_dir())
                .collect();
            hierarchies.sort();
            hierarchies
        }
    }
}

/// Whether the memory cgroup `rel` has seen an OOM kill: v2 `memory.events` `oom_kill`, v1
/// `memory.oom_control` `oom_kill` (kernel 4.13 and later; older kernels only report
/// `under_oom`, in which case a hit `memory.failcnt` together with a SIGKILL is used by the
/// caller's judgement).
pub fn oom_killed(cgroup_root: &Path, rel: &str) -> bool {
    let dir = controller_dir(cgroup_root, "memory", rel);
    let file = match detect(cgroup_root) {
        CgroupVersion::V2 => "memory.events",
        CgroupVersion::V1 => "memory.oom_control",
    };
    let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
        return false;
    };
    text.lines().any(|line| {
        let mut parts = line.split_whitespace();
        parts.next() == Some("oom_kill")
            && parts
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                > 0
    })
}

/// Removes the cgroup `rel` and everything below it in every hierarchy, deepest first. A
/// cgroup that still has processes cannot be removed (EBUSY); that error is returned after the
/// rest has been attempted. Missing directories are fine.
pub fn remove_tree(cgroup_root: &Path, rel: &str) -> io::Result<()> {
    let mut first_err = None;
    for dir in all_dirs(cgroup_root, rel) {
        if let Err(e) = remove_dir_tree(&dir) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

fn remove_dir_tree(dir: &Path) -> io::Result<()> {
    // cgroupfs directories contain only control files (which rmdir ignores) and child cgroups.
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_dir_tree(&entry.path())?;
        }
    }
    // A cgroup whose last process just exited may briefly report EBUSY.
    let mut tries = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_dirs() {
        let v1 = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(v1.path().join("memory/skiff/p")).expect("mkdir");
        std::fs::create_dir_all(v1.path().join("cpu/skiff/p")).expect("mkdir");
        std::fs::create_dir_all(v1.path().join("pids")).expect("mkdir");
        assert_eq!(detect(v1.path()), CgroupVersion::V1);
        assert_eq!(
            all_dirs(v1.path(), "/skiff/p"),
            vec![
                v1.path().join("cpu/skiff/p"),
                v1.path().join("memory/skiff/p")
            ]
        );
        assert_eq!(
            controller_dir(v1.path(), "memory", "skiff/p/c"),
            v1.path().join("memory/skiff/p/c")
        );
        remove_tree(v1.path(), "skiff").expect("remove");
        assert!(all_dirs(v1.path(), "skiff").is_empty());
        assert!(v1.path().join("pids").is_dir());

        let v2 = tempfile::tempdir().expect("tempdir");
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory").expect("write");
        std::fs::create_dir_all(v2.path().join("skiff/p/c")).expect("mkdir");
        std::fs::write(
            v2.path().join("skiff/p/c/memory.events"),
            "oom 1\noom_kill 2\n",
        )
        .expect("write");
        assert_eq!(detect(v2.path()), CgroupVersion::V2);
        assert!(oom_killed(v2.path(), "skiff/p/c"));
        assert!(!oom_killed(v2.path(), "skiff/p"));
    }
}
