//! Container log files. A container's stdout and stderr are one file opened `O_APPEND` and
//! handed to the container as fds 1 and 2, so output keeps flowing into it while the agent is
//! down. Rotation therefore cannot rename the live file away from the container: it copies the
//! file to `<path>.1` (shifting older copies up) and truncates the live file in place.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Opens (creating if needed) a log file for appending, mode 0640, close-on-exec.
pub fn open_log(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Rotates `path` if it is larger than `max_bytes`: `<path>.{keep-1}` becomes `<path>.{keep}`
/// (the oldest is dropped), ..., a copy of `path` becomes `<path>.1`, and `path` is truncated
/// to zero. With `keep == 0` the file is only truncated. Returns whether it rotated. Lines
/// written between the copy and the truncation are lost (the usual copytruncate trade-off).
pub fn rotate_log(path: &Path, max_bytes: u64, keep: usize) -> io::Result<bool> {
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if size <= max_bytes {
        return Ok(false);
    }
    if keep > 0 {
        for n in (1..keep).rev() {
            let from = numbered(path, n);
            if from.exists() {
                std::fs::rename(&from, numbered(path, n + 1))?;
            }
        }
        std::fs::copy(path, numbered(path, 1))?;
    }
    // The container holds the file O_APPEND, so after truncation its next write lands at 0.
    File::options().write(true).open(path)?.set_len(0)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rotation_shifts_copies_and_truncates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.log");
        let mut live = open_log(&path).expect("open");
        live.write_all(b"first\n").expect("write");
        assert!(!rotate_log(&path, 100, 2).expect("rotate"));
        assert!(rotate_log(&path, 3, 2).expect("rotate"));
        live.write_all(b"second\n").expect("write");
        assert!(rotate_log(&path, 3, 2).expect("rotate"));
        live.write_all(b"third\n").expect("write");
        assert!(rotate_log(&path, 3, 2).expect("rotate"));
        let read = |p: &Path| std::fs::read_to_string(p).expect("read");
        assert_eq!(read(&path), "");
        assert_eq!(read(&numbered(&path, 1)), "third\n");
        assert_eq!(read(&numbered(&path, 2)), "second\n");
        assert!(!numbered(&path, 3).exists());
        // The live writer kept appending at the start of the truncated file.
        live.write_all(b"x\n").expect("write");
        assert_eq!(read(&path), "x\n");
    }
}
