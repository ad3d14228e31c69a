//! Container log files: how they are written, stamped, rotated and read back.
//!
//! # The format, and why it is not the kubelet's
//!
//! A container's stdout and stderr are one file opened `O_APPEND` and handed to the container
//! as fds 1 and 2. The kubelet instead pipes both streams through a per-container shim
//! (conmon, containerd-shim) that writes the CRI format `<RFC3339Nano> stdout F <text>`,
//! which gives exact per-line timestamps. skiff does not, on purpose:
//!
//! - no extra process per container: on a Raspberry Pi-class board with tens of containers a
//!   shim each costs memory (about 1 MiB RSS each even for a small static binary) and a
//!   context switch plus a copy for every write;
//! - the agent may die, be upgraded or be SIGKILLed while containers keep running (and are
//!   re-adopted later); with direct files nothing between the container and the disk can
//!   die, block the container on a full pipe, or kill it with SIGPIPE.
//!
//! The price is that the file itself carries no time. Timestamps (for `timestamps=true` and
//! `sinceSeconds`) come from a sparse *time index* kept next to each file, `<log>.idx`: the
//! agent's [`LogKeeper`] looks at every live log once a second and, when a file has grown,
//! appends one 16-byte [`Stamp`] — the file's size and its mtime, which is the time of its
//! last write. A line is stamped with the first stamp whose offset covers its end, or, past
//! the last stamp, with the file's current mtime. So a stamp is never earlier than the true
//! time of the line and, while the agent runs, at most one keeper interval later; the last
//! line of every burst is exact. Lines written while the agent was down get the time the
//! restarted agent first saw them — an upper bound, documented rather than hidden.
//! stdout and stderr are not told apart (they share the file), as with `docker logs -t`
//! on a tty container. The index costs 16 bytes per second of output, nothing at idle.
//!
//! # Rotation
//!
//! Because the container holds the file, rotation cannot rename the live file away: it copies
//! the file to `<path>.1` (shifting older copies up, with their indexes) and truncates the
//! live file in place (copy-truncate). Lines written between the copy and the truncation are
//! lost; with a once-a-second check, a file can exceed the cap by one second of output.
//!
//! # Layout
//!
//! `<pod dir>/logs/<container>/<restartCount>.log`, rotated copies `<restartCount>.log.<k>`,
//! indexes `<file>.idx`. The keeper removes runs older than the previous one (what
//! `previous=true` needs), as the kubelet keeps only the last dead container.

use std::collections::HashMap;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default size cap of a live log file, as the kubelet's `containerLogMaxSize`.
pub const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// The default number of files per container run, live one included (`containerLogMaxFiles`).
pub const DEFAULT_MAX_FILES: usize = 5;

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

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn numbered(path: &Path, n: usize) -> PathBuf {
    with_suffix(path, &format!(".{n}"))
}

/// The time index of a log file: `<path>.idx`.
pub fn index_path(path: &Path) -> PathBuf {
    with_suffix(path, ".idx")
}

fn rename_if_exists(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Rotates `path` if it is larger than `max_bytes`: `<path>.{keep-1}` becomes `<path>.{keep}`
/// (the oldest is dropped), ..., a copy of `path` becomes `<path>.1`, and `path` is truncated
/// to zero; each file's index moves with it. With `keep == 0` the file is only truncated.
/// Returns whether it rotated. Lines written between the copy and the truncation are lost
/// (the usual copytruncate trade-off).
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
            rename_if_exists(&index_path(&from), &index_path(&numbered(path, n + 1)))?;
        }
        std::fs::copy(path, numbered(path, 1))?;
        rename_if_exists(&index_path(path), &index_path(&numbered(path, 1)))?;
    } else {
        remove_if_exists(&index_path(path))?;
    }
    // The container holds the file O_APPEND, so after truncation its next write lands at 0.
    File::options().write(true).open(path)?.set_len(0)?;
    Ok(true)
}

/// One time-index record: the file held `offset` bytes when it was last written, at `nanos`
/// (Unix time in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub offset: u64,
    pub nanos: i64,
}

/// The stamps of `path`'s index, in file order (an unreadable or missing index is empty).
pub fn read_index(path: &Path) -> Vec<Stamp> {
    let Ok(bytes) = std::fs::read(index_path(path)) else {
        return Vec::new();
    };
    bytes
        .chunks_exact(16)
        .map(|c| {
            let mut o = [0u8; 8];
            let mut n = [0u8; 8];
            o.copy_from_slice(&c[..8]);
            n.copy_from_slice(&c[8..]);
            Stamp {
                offset: u64::from_le_bytes(o),
                nanos: i64::from_le_bytes(n),
            }
        })
        .collect()
}

fn append_index(path: &Path, stamp: Stamp) -> io::Result<()> {
    let mut record = [0u8; 16];
    record[..8].copy_from_slice(&stamp.offset.to_le_bytes());
    record[8..].copy_from_slice(&stamp.nanos.to_le_bytes());
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(index_path(path))?
        .write_all(&record)
}

/// A file's mtime as Unix nanoseconds.
pub fn mtime_nanos(meta: &Metadata) -> i64 {
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}

/// The stamp of a line ending at byte `end` of a file: the first stamp covering it, else the
/// file's mtime (`fallback`).
pub fn stamp_for(stamps: &[Stamp], end: u64, fallback: i64) -> i64 {
    let i = stamps.partition_point(|s| s.offset < end);
    stamps.get(i).map_or(fallback, |s| s.nanos)
}

/// The size cap and file count of container logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLimits {
    /// A live file larger than this is rotated.
    pub max_bytes: u64,
    /// Files kept per container run, the live one included (at least 1).
    pub max_files: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// The restart counts that have a log file in a container's log dir, ascending.
pub fn runs(container_dir: &Path) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(container_dir) else {
        return Vec::new();
    };
    let mut runs: Vec<u32> = rd
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    runs.sort_unstable();
    runs
}

/// The live log file of run `restart`.
pub fn run_log(container_dir: &Path, restart: u32) -> PathBuf {
    container_dir.join(format!("{restart}.log"))
}

/// The files of one run, oldest first: `<n>.log.<k>`, ..., `<n>.log.1`, `<n>.log`.
pub fn run_files(container_dir: &Path, restart: u32) -> Vec<PathBuf> {
    let live = run_log(container_dir, restart);
    let mut files = Vec::new();
    let mut k = 1;
    while numbered(&live, k).exists() {
        files.push(numbered(&live, k));
        k += 1;
    }
    files.reverse();
    files.push(live);
    files
}

/// Watches the log files under a pods dir: stamps their growth, rotates them at the cap and
/// drops runs older than the previous one. [`LogKeeper::tick`] once a second; it blocks (file
/// I/O), so it runs on its own thread.
#[derive(Debug)]
pub struct LogKeeper {
    pods_dir: PathBuf,
    limits: LogLimits,
    /// The size each live file had at the last look.
    sizes: HashMap<PathBuf, u64>,
}

impl LogKeeper {
    pub fn new(pods_dir: impl Into<PathBuf>, limits: LogLimits) -> LogKeeper {
        LogKeeper {
            pods_dir: pods_dir.into(),
            limits,
            sizes: HashMap::new(),
        }
    }

    /// One pass over every container's logs. Errors are logged, never fatal: pods come and
    /// go under our feet.
    pub fn tick(&mut self) {
        let mut seen = Vec::new();
        for container_dir in container_dirs(&self.pods_dir) {
            let runs = runs(&container_dir);
            let Some(&last) = runs.last() else { continue };
            for &old in runs.iter().filter(|&&r| r + 1 < last) {
                remove_run(&container_dir, old);
            }
            for &run in runs.iter().filter(|&&r| r + 1 >= last) {
                let path = run_log(&container_dir, run);
                if let Err(e) = self.look_at(&path) {
                    tracing::debug!(path = %path.display(), "log keeper: {e}");
                }
                seen.push(path);
            }
        }
        self.sizes.retain(|p, _| seen.contains(p));
    }

    fn look_at(&mut self, path: &Path) -> io::Result<()> {
        let meta = std::fs::metadata(path)?;
        let size = meta.len();
        let last = match self.sizes.get(path) {
            Some(&s) => s,
            None => read_index(path).last().map_or(0, |s| s.offset),
        };
        if size != last {
            if size < last {
                // Truncated by someone else: the old stamps describe bytes that are gone.
                remove_if_exists(&index_path(path))?;
            }
            if size > 0 {
                append_index(
                    path,
                    Stamp {
                        offset: size,
                        nanos: mtime_nanos(&meta),
                    },
                )?;
            }
            self.sizes.insert(path.to_path_buf(), size);
        } else {
            self.sizes.entry(path.to_path_buf()).or_insert(size);
        }
        let keep = self.limits.max_files.max(1) - 1;
        if rotate_log(path, self.limits.max_bytes, keep)? {
            self.sizes.insert(path.to_path_buf(), 0);
            tracing::debug!(path = %path.display(), "rotated a container log");
        }
        Ok(())
    }
}

fn container_dirs(pods_dir: &Path) -> Vec<PathBuf> {
    let subdirs = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    subdirs(pods_dir)
        .iter()
        .flat_map(|pod| subdirs(&pod.join("logs")))
        .collect()
}

fn remove_run(container_dir: &Path, run: u32) {
    for f in run_files(container_dir, run) {
        let _ = remove_if_exists(&index_path(&f));
        let _ = remove_if_exists(&f);
    }
}

/// What a reader wants from a log (the kubelet's `PodLogOptions`, as far as files go).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Only the last so many lines (before `since` filtering, as the kubelet does).
    pub tail_lines: Option<u64>,
    /// Only lines stamped at or after this Unix time in nanoseconds.
    pub since_nanos: Option<i64>,
    /// Prefix each line with its stamp, RFC 3339 with nanoseconds, and a space.
    pub timestamps: bool,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<u64>,
}

/// Reads the files of one container run as lines, from the position `query` asks for, and
/// goes on reading what is appended (for `follow`), across copy-truncate rotations.
#[derive(Debug)]
pub struct LogReader {
    files: Vec<PathBuf>,
    current: usize,
    offset: u64,
    stamps: Vec<Stamp>,
    partial: Vec<u8>,
    query: LogQuery,
    written: u64,
    /// Which file `<live>.1` was when reading of the live file began: a new one means the
    /// live file was copied there and truncated.
    rotated: Option<(u64, u64)>,
    /// For a read that does not follow: the live file's length when the reader opened. Lines
    /// written later are not returned, so `tailLines=3` answers three lines even while the
    /// container writes.
    until: Option<u64>,
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// How much one [`LogReader::read_more`] reads at most.
const READ_CHUNK: usize = 64 * 1024;

impl LogReader {
    /// Opens the run whose files are `files` (oldest first, the live one last).
    pub fn open(files: Vec<PathBuf>, query: LogQuery) -> io::Result<LogReader> {
        let (current, offset) = match query.tail_lines {
            Some(n) => tail_start(&files, n)?,
            None => (0, 0),
        };
        let mut reader = LogReader {
            files,
            current,
            offset,
            stamps: Vec::new(),
            partial: Vec::new(),
            query,
            written: 0,
            rotated: None,
            until: None,
        };
        // Whole rotated files older than `since` hold nothing wanted.
        if let Some(since) = reader.query.since_nanos {
            while reader.current + 1 < reader.files.len() {
                let old = std::fs::metadata(&reader.files[reader.current])
                    .is_ok_and(|m| mtime_nanos(&m) < since);
                if !old {
                    break;
                }
                reader.current += 1;
                reader.offset = 0;
            }
        }
        reader.stamps = read_index(&reader.files[reader.current]);
        reader.rotated = identity(&numbered(reader.live(), 1));
        Ok(reader)
    }

    fn live(&self) -> &Path {
        &self.files[self.files.len() - 1]
    }

    /// Returns only what the log holds now: nothing appended after this call.
    pub fn up_to_now(mut self) -> LogReader {
        self.until = Some(std::fs::metadata(self.live()).map_or(0, |m| m.len()));
        self
    }

    /// True once `limitBytes` is reached: nothing more will be returned.
    pub fn limit_reached(&self) -> bool {
        self.query.limit_bytes.is_some_and(|l| self.written >= l)
    }

    /// The next complete lines, formatted; empty when nothing new is there now.
    pub fn read_more(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while out.len() < READ_CHUNK && !self.limit_reached() {
            let path = self.files[self.current].clone();
            let is_live = self.current + 1 == self.files.len();
            let mut file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(e),
            };
            let meta = file.metadata()?;
            let copy = numbered(&path, 1);
            let copy_now = if is_live { identity(&copy) } else { None };
            let rotated = is_live && (copy_now != self.rotated || meta.len() < self.offset);
            if rotated {
                let copy_len = std::fs::metadata(&copy).map_or(0, |m| m.len());
                if copy_now != self.rotated && meta.len() >= copy_len && meta.len() > 0 {
                    // Copied but not truncated yet: look again at the next call.
                    return Ok(out);
                }
                // Rotated under us: what we had not read yet is at the end of `<live>.1`.
                self.rotated = copy_now;
                let mut rest = read_from(&copy, self.offset)?;
                if let Some(until) = self.until {
                    // What the log held at the start was all copied: the new live file is newer.
                    rest.truncate(until.saturating_sub(self.offset) as usize);
                    self.until = Some(0);
                }
                let stamps = read_index(&numbered(&path, 1));
                let end = self.offset + rest.len() as u64;
                self.emit(
                    &rest,
                    self.offset,
                    end,
                    &stamps,
                    mtime_nanos(&meta),
                    &mut out,
                );
                self.offset = 0;
                self.stamps = read_index(&path);
                continue;
            }
            if is_live {
                self.stamps = read_index(&path);
            }
            file.seek(SeekFrom::Start(self.offset))?;
            let mut buf = vec![0u8; READ_CHUNK];
            if let Some(until) = self.until.filter(|_| is_live) {
                let room = until.saturating_sub(self.offset).min(READ_CHUNK as u64);
                buf.truncate(room as usize);
            }
            let n = file.read(&mut buf)?;
            buf.truncate(n);
            if n == 0 {
                if is_live {
                    return Ok(out);
                }
                self.current += 1;
                self.offset = 0;
                self.stamps = read_index(&self.files[self.current]);
                if self.current + 1 == self.files.len() {
                    self.rotated = identity(&numbered(self.live(), 1));
                }
                continue;
            }
            let start = self.offset;
            self.offset += n as u64;
            let stamps = std::mem::take(&mut self.stamps);
            self.emit(
                &buf,
                start,
                self.offset,
                &stamps,
                mtime_nanos(&meta),
                &mut out,
            );
            self.stamps = stamps;
        }
        Ok(out)
    }

    /// The last line when it has no newline (the log has ended), formatted.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.partial.is_empty() && !self.limit_reached() {
            let line = std::mem::take(&mut self.partial);
            let now = std::fs::metadata(&self.files[self.current])
                .map(|m| mtime_nanos(&m))
                .unwrap_or(0);
            self.push_line(&line, now, &mut out);
        }
        out
    }

    /// Splits `data` (bytes `start..end` of a file) into lines and formats the complete ones.
    fn emit(
        &mut self,
        data: &[u8],
        start: u64,
        end: u64,
        stamps: &[Stamp],
        fallback: i64,
        out: &mut Vec<u8>,
    ) {
        let mut from = 0;
        for (i, _) in data.iter().enumerate().filter(|(_, &b)| b == b'\n') {
            let line_end = start + i as u64 + 1;
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&data[from..=i]);
            from = i + 1;
            self.push_line(&line, stamp_for(stamps, line_end, fallback), out);
        }
        debug_assert!(start + data.len() as u64 == end);
        self.partial.extend_from_slice(&data[from..]);
    }

    fn push_line(&mut self, line: &[u8], nanos: i64, out: &mut Vec<u8>) {
        if self.query.since_nanos.is_some_and(|s| nanos < s) {
            return;
        }
        let mut formatted = Vec::with_capacity(line.len() + 32);
        if self.query.timestamps {
            formatted.extend_from_slice(format_rfc3339_nanos(nanos).as_bytes());
            formatted.push(b' ');
        }
        formatted.extend_from_slice(line);
        if let Some(limit) = self.query.limit_bytes {
            // limitBytes is any int64: on a 32-bit agent `as usize` cut 2^32 to 0.
            let room = usize::try_from(limit.saturating_sub(self.written)).unwrap_or(usize::MAX);
            formatted.truncate(room);
        }
        self.written = self.written.saturating_add(formatted.len() as u64);
        out.extend_from_slice(&formatted);
    }
}

fn read_from(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.seek(SeekFrom::Start(offset))?;
            f.read_to_end(&mut out)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// Where the last `n` lines of `files` start: (file index, byte offset). A last line without
/// a newline counts as a line.
fn tail_start(files: &[PathBuf], n: u64) -> io::Result<(usize, u64)> {
    let last = files.len().saturating_sub(1);
    if n == 0 {
        let len = std::fs::metadata(&files[last]).map_or(0, |m| m.len());
        return Ok((last, len));
    }
    let mut found = 0u64;
    let mut first_byte_seen = false;
    for (fi, path) in files.iter().enumerate().rev() {
        let mut f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mut pos = f.metadata()?.len();
        let mut buf = vec![0u8; READ_CHUNK];
        while pos > 0 {
            let len = (READ_CHUNK as u64).min(pos) as usize;
            pos -= len as u64;
            f.seek(SeekFrom::Start(pos))?;
            f.read_exact(&mut buf[..len])?;
            for i in (0..len).rev() {
                if !first_byte_seen {
                    // The log's very last byte: a newline there ends the last line, it does
                    // not start another one.
                    first_byte_seen = true;
                    if buf[i] == b'\n' {
                        continue;
                    }
                }
                if buf[i] == b'\n' {
                    found += 1;
                    if found == n {
                        return Ok((fi, pos + i as u64 + 1));
                    }
                }
            }
        }
    }
    Ok((0, 0))
}

/// `2026-11-21T10:00:00.123456789Z`.
pub fn format_rfc3339_nanos(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let frac = nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:09}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).expect("read")
    }

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
        assert_eq!(read(&path), "");
        assert_eq!(read(&numbered(&path, 1)), "third\n");
        assert_eq!(read(&numbered(&path, 2)), "second\n");
        assert!(!numbered(&path, 3).exists());
        // The live writer kept appending at the start of the truncated file.
        live.write_all(b"x\n").expect("write");
        assert_eq!(read(&path), "x\n");
    }

    #[test]
    fn dates_format_as_rfc3339() {
        assert_eq!(format_rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            format_rfc3339_nanos(1_795_255_200_123_456_789),
            "2026-11-21T10:00:00.123456789Z"
        );
        assert_eq!(
            format_rfc3339_nanos(951_782_400_000_000_001),
            "2000-02-29T00:00:00.000000001Z"
        );
    }

    fn all(r: &mut LogReader) -> String {
        let mut s = Vec::new();
        loop {
            let chunk = r.read_more().expect("read");
            if chunk.is_empty() {
                break;
            }
            s.extend(chunk);
        }
        s.extend(r.finish());
        String::from_utf8(s).expect("utf8")
    }

    #[test]
    fn keeper_stamps_rotates_and_reader_reads_across_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cdir = dir.path().join("uid1").join("logs").join("main");
        let path = run_log(&cdir, 0);
        let mut live = open_log(&path).expect("open");
        let mut keeper = LogKeeper::new(
            dir.path(),
            LogLimits {
                max_bytes: 20,
                max_files: 3,
            },
        );
        for i in 0..12 {
            writeln!(live, "line {i:02}").expect("write");
            keeper.tick();
        }
        // Every file stays within the cap plus one tick's output.
        for f in run_files(&cdir, 0) {
            assert!(
                std::fs::metadata(&f).expect("meta").len() <= 20 + 8,
                "{f:?}"
            );
        }
        assert_eq!(run_files(&cdir, 0).len(), 3);
        assert!(!numbered(&path, 3).exists());
        let files = run_files(&cdir, 0);
        let text = all(&mut LogReader::open(files.clone(), LogQuery::default()).expect("open"));
        assert!(text.ends_with("line 10\nline 11\n"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        // Consecutive, no gaps or duplicates.
        let first: u32 = lines[0][5..].parse().expect("number");
        for (k, l) in lines.iter().enumerate() {
            assert_eq!(*l, format!("line {:02}", first + k as u32));
        }

        let tail = LogQuery {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(
            all(&mut LogReader::open(files.clone(), tail).expect("open")),
            "line 10\nline 11\n"
        );
        let stamped = LogQuery {
            tail_lines: Some(1),
            timestamps: true,
            ..Default::default()
        };
        let s = all(&mut LogReader::open(files.clone(), stamped).expect("open"));
        let (ts, rest) = s.split_once(' ').expect("stamp");
        assert_eq!(rest, "line 11\n");
        assert!(ts.ends_with('Z') && ts.len() == 30, "{ts}");
        let future = LogQuery {
            since_nanos: Some(i64::MAX),
            ..Default::default()
        };
        assert_eq!(
            all(&mut LogReader::open(files.clone(), future).expect("open")),
            ""
        );
        let limited = LogQuery {
            limit_bytes: Some(10),
            ..Default::default()
        };
        assert_eq!(
            all(&mut LogReader::open(files.clone(), limited).expect("open")).len(),
            10
        );
        // The largest limits, tails and times: everything, nothing past, no overflow.
        let whole = all(&mut LogReader::open(files.clone(), LogQuery::default()).expect("open"));
        for query in [
            LogQuery {
                limit_bytes: Some(u64::MAX),
                tail_lines: Some(u64::MAX),
                since_nanos: Some(i64::MIN),
                timestamps: false,
            },
            LogQuery {
                limit_bytes: Some(1 << 32),
                ..Default::default()
            },
        ] {
            assert_eq!(
                all(&mut LogReader::open(files.clone(), query).expect("open")),
                whole
            );
        }

        // A follower sees appends, including across a rotation.
        let mut follower = LogReader::open(
            run_files(&cdir, 0),
            LogQuery {
                tail_lines: Some(0),
                ..Default::default()
            },
        )
        .expect("open");
        assert_eq!(follower.read_more().expect("read"), b"");
        writeln!(live, "line 12").expect("write");
        writeln!(live, "line 13").expect("write");
        writeln!(live, "line 14").expect("write");
        keeper.tick();
        writeln!(live, "partial").expect("write");
        let got = String::from_utf8(follower.read_more().expect("read")).expect("utf8");
        assert_eq!(got, "line 12\nline 13\nline 14\npartial\n");
    }

    #[test]
    fn keeper_drops_runs_older_than_the_previous_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cdir = dir.path().join("uid1").join("logs").join("main");
        for run in 0..3 {
            let mut f = open_log(&run_log(&cdir, run)).expect("open");
            writeln!(f, "run {run}").expect("write");
        }
        LogKeeper::new(dir.path(), LogLimits::default()).tick();
        assert_eq!(runs(&cdir), vec![1, 2]);
        assert!(index_path(&run_log(&cdir, 2)).exists());
        assert!(!index_path(&run_log(&cdir, 0)).exists());
    }

    #[test]
    fn a_read_that_does_not_follow_ends_where_the_log_ended_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0.log");
        std::fs::write(&path, "a\nb\nc\nd\n").expect("write");
        let q = LogQuery {
            tail_lines: Some(2),
            ..Default::default()
        };
        let mut r = LogReader::open(vec![path.clone()], q)
            .expect("open")
            .up_to_now();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        writeln!(f, "e").expect("write");
        assert_eq!(all(&mut r), "c\nd\n");
    }

    #[test]
    fn tail_counts_a_last_line_without_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0.log");
        std::fs::write(&path, "a\nb\nc").expect("write");
        let q = LogQuery {
            tail_lines: Some(2),
            ..Default::default()
        };
        let mut r = LogReader::open(vec![path], q).expect("open");
        assert_eq!(all(&mut r), "b\nc");
    }

    #[test]
    fn stamps_cover_line_ends() {
        let s = [
            Stamp {
                offset: 10,
                nanos: 1,
            },
            Stamp {
                offset: 20,
                nanos: 2,
            },
        ];
        assert_eq!(stamp_for(&s, 5, 9), 1);
        assert_eq!(stamp_for(&s, 10, 9), 1);
        assert_eq!(stamp_for(&s, 11, 9), 2);
        assert_eq!(stamp_for(&s, 21, 9), 9);
    }
}
