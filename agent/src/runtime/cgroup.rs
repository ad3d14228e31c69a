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

/// A value of a flat keyed file (`memory.stat`, `cpu.stat`: `key value` per line).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// CPU time used by the cgroup `rel` ("" for the root) and everything below it, in
/// nanoseconds: v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec`.
pub fn cpu_usage_ns(cgroup_root: &Path, rel: &str) -> Option<u64> {
    match detect(cgroup_root) {
        CgroupVersion::V1 => {
            read_u64(&controller_dir(cgroup_root, "cpuacct", rel).join("cpuacct.usage"))
        }
        CgroupVersion::V2 => {
            let text = std::fs::read_to_string(
                cgroup_root
                    .join(rel.trim_start_matches('/'))
                    .join("cpu.stat"),
            )
            .ok()?;
            keyed(&text, "usage_usec").map(|us| us.saturating_mul(1000))
        }
    }
}

/// Memory of a cgroup: usage and the working set (usage less inactive file pages, which the
/// kernel can drop at once), both in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUsage {
    pub usage: u64,
    pub working_set: u64,
}

/// The memory of the cgroup `rel` ("" for the root; v2's root has no `memory.current`, see
/// [`meminfo_usage`]): v1 `memory.usage_in_bytes` less `total_inactive_file`, v2
/// `memory.current` less `inactive_file`, as cAdvisor computes the working set.
pub fn memory_usage(cgroup_root: &Path, rel: &str) -> Option<MemoryUsage> {
    let dir = controller_dir(cgroup_root, "memory", rel);
    let (usage_file, inactive_key) = match detect(cgroup_root) {
        CgroupVersion::V1 => ("memory.usage_in_bytes", "total_inactive_file"),
        CgroupVersion::V2 => ("memory.current", "inactive_file"),
    };
    let usage = read_u64(&dir.join(usage_file))?;
    let inactive = std::fs::read_to_string(dir.join("memory.stat"))
        .ok()
        .and_then(|t| keyed(&t, inactive_key))
        .unwrap_or(0);
    Some(MemoryUsage {
        usage,
        working_set: usage.saturating_sub(inactive),
    })
}

/// The whole machine's memory from `<proc>/meminfo`: usage is total less free, the working
/// set that less inactive file pages.
pub fn meminfo_usage(proc_root: &Path) -> Option<MemoryUsage> {
    let text = std::fs::read_to_string(proc_root.join("meminfo")).ok()?;
    let kib = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let usage = kib("MemTotal")?.saturating_sub(kib("MemFree")?) * 1024;
    let inactive = kib("Inactive(file)").unwrap_or(0) * 1024;
    Some(MemoryUsage {
        usage,
        working_set: usage.saturating_sub(inactive),
    })
}

/// CPU time the whole machine used, from `<proc>/stat` (all but idle and iowait), in
/// nanoseconds; for hosts whose root cgroup does not account CPU.
pub fn proc_cpu_usage_ns(proc_root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_root.join("stat")).ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy: u64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| *v)
        .sum();
    Some(busy.saturating_mul(1_000_000_000 / crate::sys::clock_ticks()))
}

/// Where the calling thread can be "moved" into the cgroup it is already in, and what to
/// write there: in v1, the `tasks` file of its cgroup in one controller hierarchy and its
/// thread id; in v2, `cgroup.procs` of its cgroup and the process id. `own` is the text of
/// `/proc/thread-self/cgroup`. Such a write changes nothing, but the kernel takes its global
/// cgroup migration lock for it (see `runtime::exec::warm_cgroup_migration`).
pub fn own_migration_target(
    cgroup_root: &Path,
    own: &str,
    tid: i32,
    pid: i32,
) -> Option<(PathBuf, String)> {
    let rel = |path: &str| path.trim_start_matches('/').to_string();
    match detect(cgroup_root) {
        CgroupVersion::V2 => own.lines().find_map(|l| {
            let path = l.strip_prefix("0::")?;
            Some((
                cgroup_root.join(rel(path)).join("cgroup.procs"),
                pid.to_string(),
            ))
        }),
        CgroupVersion::V1 => own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            if controllers.is_empty() || controllers.starts_with("name=") {
                return None;
            }
            // The hierarchy is mounted under its controllers' joint name ("cpu,cpuacct") or
            // under one of them.
            std::iter::once(controllers)
                .chain(controllers.split(','))
                .map(|dir| cgroup_root.join(dir).join(rel(path)).join("tasks"))
                .find(|tasks| tasks.is_file())
                .map(|tasks| (tasks, tid.to_string()))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_migration_targets() {
        let v1 = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(v1.path().join("cpu,cpuacct/user.slice")).expect("mkdir");
        std::fs::write(v1.path().join("cpu,cpuacct/user.slice/tasks"), "").expect("write");
        let own = "12:name=systemd:/user.slice/session-1.scope\n4:cpu,cpuacct:/user.slice\n0::/user.slice\n";
        assert_eq!(
            own_migration_target(v1.path(), own, 7, 5),
            Some((
                v1.path().join("cpu,cpuacct/user.slice/tasks"),
                "7".to_string()
            ))
        );
        assert_eq!(own_migration_target(v1.path(), "0::/x\n", 7, 5), None);

        let v2 = tempfile::tempdir().expect("tempdir");
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory").expect("write");
        assert_eq!(
            own_migration_target(v2.path(), "0::/system.slice/skiff.service\n", 7, 5),
            Some((
                v2.path().join("system.slice/skiff.service/cgroup.procs"),
                "5".to_string()
            ))
        );
    }

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

    #[test]
    fn cpu_and_memory_of_v1_and_v2_cgroups() {
        let v1 = tempfile::tempdir().expect("tempdir");
        let w = |p: &str, text: &str| {
            let path = v1.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        w("cpuacct/skiff/p/c/cpuacct.usage", "123456789\n");
        w("memory/skiff/p/c/memory.usage_in_bytes", "10485760\n");
        w(
            "memory/skiff/p/c/memory.stat",
            "cache 4096\ninactive_file 1\ntotal_inactive_file 2097152\n",
        );
        w("cpuacct/cpuacct.usage", "999\n");
        assert_eq!(cpu_usage_ns(v1.path(), "skiff/p/c"), Some(123_456_789));
        assert_eq!(cpu_usage_ns(v1.path(), ""), Some(999));
        assert_eq!(
            memory_usage(v1.path(), "skiff/p/c"),
            Some(MemoryUsage {
                usage: 10 << 20,
                working_set: 8 << 20
            })
        );
        assert_eq!(memory_usage(v1.path(), "skiff/p/gone"), None);

        let v2 = tempfile::tempdir().expect("tempdir");
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory").expect("write");
        std::fs::create_dir_all(v2.path().join("skiff/p/c")).expect("mkdir");
        let c = v2.path().join("skiff/p/c");
        std::fs::write(c.join("cpu.stat"), "usage_usec 2500\nuser_usec 2000\n").expect("write");
        std::fs::write(c.join("memory.current"), "8192\n").expect("write");
        std::fs::write(c.join("memory.stat"), "anon 4096\ninactive_file 4096\n").expect("write");
        assert_eq!(cpu_usage_ns(v2.path(), "skiff/p/c"), Some(2_500_000));
        assert_eq!(
            memory_usage(v2.path(), "/skiff/p/c"),
            Some(MemoryUsage {
                usage: 8192,
                working_set: 4096
            })
        );
    }

    #[test]
    fn machine_figures_from_proc() {
        let proc_ = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            proc_.path().join("meminfo"),
            "MemTotal:        1000 kB\nMemFree:          200 kB\nInactive(file):   300 kB\n",
        )
        .expect("write");
        assert_eq!(
            meminfo_usage(proc_.path()),
            Some(MemoryUsage {
                usage: 800 * 1024,
                working_set: 500 * 1024
            })
        );
        std::fs::write(
            proc_.path().join("stat"),
            "cpu  10 0 5 1000 7 1 1 0 0 0\ncpu0 10 0 5 1000 7 1 1 0 0 0\n",
        )
        .expect("write");
        let hz = crate::sys::clock_ticks();
        assert_eq!(
            proc_cpu_usage_ns(proc_.path()),
            Some(17 * (1_000_000_000 / hz))
        );
        // The real machine's figures are there and not zero.
        assert!(meminfo_usage(Path::new("/proc")).is_some_and(|m| m.usage > 0));
        assert!(proc_cpu_usage_ns(Path::new("/proc")).is_some_and(|n| n > 0));
    }
}
