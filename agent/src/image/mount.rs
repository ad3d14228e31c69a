//! Overlay root filesystems. All mount syscalls of the image store go through
//! [`sys_mount_overlay`] and [`sys_unmount`].

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

use super::error::ImageError;
use super::remove_path;

/// Longest overlay option string the kernel takes (one page).
const MAX_OPTIONS: usize = 4000;

/// The one place that mounts: `mount -t overlay overlay -o <options> <target>`.
fn sys_mount_overlay(options: &str, target: &Path) -> nix::Result<()> {
    nix::mount::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::empty(),
        Some(options),
    )
}

/// The one place that unmounts; `detach` is `MNT_DETACH` (lazy).
fn sys_unmount(target: &Path, detach: bool) -> nix::Result<()> {
    let flags = if detach {
        MntFlags::MNT_DETACH
    } else {
        MntFlags::empty()
    };
    nix::mount::umount2(target, flags)
}

/// A container root filesystem mounted by [`super::ImageStore::mount_rootfs`]. Dropping it
/// unmounts and removes the scratch directory (errors ignored); call
/// [`RootfsMount::unmount`] to see them.
#[derive(Debug)]
pub struct RootfsMount {
    target: PathBuf,
    scratch: PathBuf,
    active: bool,
}

impl RootfsMount {
    /// Where the root filesystem is mounted.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The directory holding the overlay's upper (`upper/`) and work (`work/`) dirs.
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// Keeps the mount beyond this handle (for an agent that restarts while its containers
    /// run); clean it up later with [`unmount_rootfs`].
    pub fn leak(mut self) {
        self.active = false;
    }

    /// Unmounts (lazily if busy) and removes the scratch directory.
    pub fn unmount(mut self) -> Result<(), ImageError> {
        self.active = false;
        unmount_rootfs(&self.scratch, &self.target)
    }
}

impl Drop for RootfsMount {
    fn drop(&mut self) {
        if self.active {
            let _ = unmount_rootfs(&self.scratch, &self.target);
        }
    }
}

fn is_mount_point(target: &Path) -> bool {
    let Ok(canon) = fs::canonicalize(target) else {
        return false;
    };
    let Ok(mounts) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| Path::new(&unescape(mp)) == canon)
}

/// Undoes a root filesystem mount: unmounts `target` if mounted (lazily if busy) and removes
/// `scratch`. Safe to call again or on leftovers from before a restart.
pub fn unmount_rootfs(scratch: &Path, target: &Path) -> Result<(), ImageError> {
    let mount_err = |detail: String| ImageError::Mount {
        target: target.display().to_string(),
        detail,
    };
    if is_mount_point(target) {
        match sys_unmount(target, false) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => sys_unmount(target, true)
                .map_err(|e| mount_err(format!("lazy unmount failed: {e}")))?,
            Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(mount_err(format!("unmount failed: {e}"))),
        }
    }
    remove_path(scratch)
        .map_err(|e| ImageError::io(format!("cannot remove {}", scratch.display()), e))
}

pub(crate) fn mount_overlay(
    lowers: &[PathBuf],
    scratch: &Path,
    target: &Path,
) -> Result<RootfsMount, ImageError> {
    let mount_err = |detail: String| ImageError::Mount {
        target: target.display().to_string(),
        detail,
    };
    let upper = scratch.join("upper");
    let work = scratch.join("work");
    for d in [&upper, &work, &target.to_path_buf()] {
        fs::create_dir_all(d)
            .map_err(|e| mount_err(format!("cannot create {}: {e}", d.display())))?;
    }
    let mut lowers: Vec<PathBuf> = lowers.to_vec();
    if lowers.is_empty() {
        // An image without layers: overlay needs one lower dir.
        let empty = scratch.join("empty");
        fs::create_dir_all(&empty)
            .map_err(|e| mount_err(format!("cannot create {}: {e}", empty.display())))?;
        lowers.push(empty);
    }
    for p in lowers.iter().chain([&upper, &work]) {
        let s = p.to_string_lossy();
        if s.contains([':', ',', '\\']) || s.contains(char::is_whitespace) {
            return Err(mount_err(format!(
                "the path {s:?} contains a character overlayfs options cannot carry"
            )));
        }
    }
    let lowerdir = lowers
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":");
    let options = format!(
        "lowerdir={lowerdir},upperdir={},workdir={}",
        upper.display(),
        work.display()
    );
    if options.len() > MAX_OPTIONS {
        return Err(mount_err(format!(
            "the image has too many layers ({}) for one overlay mount",
            lowers.len()
        )));
    }
    sys_mount_overlay(&options, target)
        .map_err(|e| mount_err(format!("overlay mount failed: {e}")))?;
    Ok(RootfsMount {
        target: target.to_path_buf(),
        scratch: scratch.to_path_buf(),
        active: true,
    })
}

/// `\040`-style escapes of /proc mount tables.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every lower dir of every overlay mounted on this host (from /proc/self/mounts), so that
/// garbage collection never removes a layer in use, even by another process.
pub(crate) fn mounted_lower_dirs() -> HashSet<PathBuf> {
    let mut out = HashSet::new();
    let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
        return out;
    };
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 4 || fields[2] != "overlay" {
            continue;
        }
        for opt in fields[3].split(',') {
            if let Some(l) = opt.strip_prefix("lowerdir=") {
                out.extend(l.split(':').map(|p| PathBuf::from(unescape(p))));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_table_escapes_are_decoded() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
