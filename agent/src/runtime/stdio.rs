//! A container's stdin and terminal (`stdin`, `stdinOnce`, `tty` in the pod spec), which
//! `attach` writes to.
//!
//! - **stdin** (`stdin: true`): the container's fd 0 is a FIFO, `stdin` in the container's
//!   state directory, that the container opened for reading *and* writing. Holding a write
//!   end itself, it never sees end of file: its stdin stays open across attaches and across
//!   agent restarts, as the kubelet's (whose runtime shim holds the pipe). Each attach with
//!   stdin opens the FIFO for writing and closes it when the session ends.
//! - **stdinOnce**: the container opened the FIFO read-only and the agent keeps a write end
//!   (the *keeper*) until the first attach session with stdin ends; then the keeper is
//!   closed and the FIFO unlinked, so the container reads end of file once the session's own
//!   write end is closed, and no later attach can reopen it.
//! - **tty**: the container's fds 0, 1 and 2 are a pseudo-terminal's slave, its controlling
//!   terminal. The agent keeps the master: a thread copies what the container writes into
//!   its log file (so `logs` and `attach` read it as any other container's output, with the
//!   terminal's `\r\n`), attach writes keystrokes to it and applies resizes. With stdinOnce the
//!   end of the first session types the terminal's end-of-file character (^D).
//!
//! # Agent restarts
//!
//! The keeper and the master would close with the agent (the container would read end of
//! file, or get SIGHUP from its hung-up terminal). So each is also held by a *holder*: this
//! binary re-executed with only that descriptor open ([`crate::sys::spawn_fd_holder`]), in a
//! session of its own, recorded (pid, fd number) in the container's record. A restarted
//! agent checks the holder's command line, takes the descriptor back with `pidfd_getfd`
//! ([`Runtime::adopt_consoles`](super::Runtime)) and starts copying the terminal again; the
//! holder is killed when stdinOnce's session ends, the terminal's container ends, or the
//! container is removed. Unlike the kubelet's runtime shim it copies nothing, so while the
//! agent is down a terminal's output waits in the terminal's buffer (the container blocks
//! once it is full). Whether a tty's stdinOnce session already happened is kept in memory
//! only: after a restart, a later attach may still type into it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::RuntimeError;

/// What a container's stdin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StdinMode {
    /// `/dev/null`.
    #[default]
    None,
    /// Open until the container ends (`stdin: true`).
    Open,
    /// Closed after the first attach session (`stdin: true, stdinOnce: true`).
    Once,
}

/// The agent's in-memory ends of containers' stdins and terminals, by container id.
#[derive(Default)]
pub(super) struct Consoles {
    map: Mutex<HashMap<String, Console>>,
}

#[derive(Default)]
struct Console {
    /// stdinOnce's write end, until the first session ends.
    keeper: Option<OwnedFd>,
    /// The terminal's master side.
    master: Option<Arc<OwnedFd>>,
    /// stdinOnce and the first session is over.
    once_done: bool,
    /// The process holding the keeper or the master for the agent's next life.
    holder: Option<i32>,
}

/// The process that holds a container's stdinOnce keeper or terminal master across agent
/// restarts, and the descriptor's number in it (in the container's record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Holder {
    pub pid: i32,
    pub fd: i32,
}

/// Starts the holder of `fd` for container `id` (`None`, logged, if it cannot start: the
/// descriptor then lives only as long as this agent).
pub(super) fn hold(id: &str, fd: &OwnedFd) -> Option<Holder> {
    use std::os::fd::AsRawFd;
    match crate::sys::spawn_fd_holder(&[fd.as_raw_fd()], id) {
        Ok(pid) => Some(Holder {
            pid,
            fd: fd.as_raw_fd(),
        }),
        Err(errno) => {
            tracing::warn!(container = id, %errno, "cannot start the holder of its stdin or terminal: they end with this agent");
            None
        }
    }
}

/// Where attach writes: the FIFO (opened for this session) or the terminal.
pub struct StdinEnd {
    pub file: File,
    /// The terminal, for resizes.
    pub pty: Option<Arc<OwnedFd>>,
}

/// The FIFO in a container's state directory.
pub(super) fn fifo_path(container_dir: &Path) -> PathBuf {
    container_dir.join("stdin")
}

/// The container's fd 0 for a new container, and the keeper for stdinOnce.
pub(super) fn make_stdin(
    container_dir: &Path,
    mode: StdinMode,
) -> Result<(OwnedFd, Option<OwnedFd>), RuntimeError> {
    let path = fifo_path(container_dir);
    let io = |what, e| RuntimeError::io(what, &path, e);
    if mode == StdinMode::None {
        return Ok((super::exec::dev_null()?, None));
    }
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| RuntimeError::sys("mkfifo", e))?;
    // Opening a FIFO read-write never blocks (Linux); read-only waits for a writer, which
    // the keeper already is.
    let rw = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map(OwnedFd::from)
    };
    match mode {
        StdinMode::Open => Ok((rw().map_err(|e| io("open stdin", e))?, None)),
        _ => {
            let keeper = rw().map_err(|e| io("open stdin", e))?;
            let reader = File::open(&path).map_err(|e| io("open stdin", e))?;
            Ok((OwnedFd::from(reader), Some(keeper)))
        }
    }
}

impl Consoles {
    pub(super) fn insert(
        &self,
        id: &str,
        keeper: Option<OwnedFd>,
        master: Option<Arc<OwnedFd>>,
        holder: Option<i32>,
    ) {
        if keeper.is_none() && master.is_none() {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(
            id.to_string(),
            Console {
                keeper,
                master,
                once_done: false,
                holder,
            },
        );
    }

    /// Forgets container `id`'s ends and stops their holder.
    pub(super) fn remove(&self, id: &str) {
        let removed = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.remove(id)
        };
        if let Some(pid) = removed.and_then(|c| c.holder) {
            crate::sys::kill_fd_holder(pid);
        }
    }

    /// Forgets the terminal `master` of `id` if it is still the one kept (a restarted
    /// container has the same id and a new terminal).
    fn remove_terminal(&self, id: &str, master: &Arc<OwnedFd>) {
        let removed = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            if map
                .get(id)
                .and_then(|c| c.master.as_ref())
                .is_some_and(|m| Arc::ptr_eq(m, master))
            {
                map.remove(id)
            } else {
                None
            }
        };
        if let Some(pid) = removed.and_then(|c| c.holder) {
            crate::sys::kill_fd_holder(pid);
        }
    }

    fn known(&self, id: &str) -> bool {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.contains_key(id)
    }

    fn master(&self, id: &str) -> Option<(Arc<OwnedFd>, bool)> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let c = map.get(id)?;
        Some((c.master.clone()?, c.once_done))
    }

    /// Ends stdinOnce's stdin: drops the keeper (the FIFO is unlinked by the caller) or, on a
    /// terminal, types end-of-file. Only the first call does anything.
    pub(super) fn close_once(&self, id: &str) -> bool {
        let holder = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            let Some(c) = map.get_mut(id) else {
                return true;
            };
            if c.once_done {
                return false;
            }
            c.once_done = true;
            c.keeper = None;
            if let Some(fd) = c.master.as_ref().and_then(|m| m.try_clone().ok()) {
                let _ = File::from(fd).write_all(b"\x04");
                None
            } else {
                c.holder.take()
            }
        };
        if let Some(pid) = holder {
            crate::sys::kill_fd_holder(pid);
        }
        true
    }
}

impl super::Runtime {
    /// After an agent restart: takes back the stdinOnce keepers and terminals that holders
    /// kept for running containers, and copies the terminals into the logs again.
    pub(super) fn adopt_consoles(&self) {
        let Ok(ids) = self.list() else { return };
        for id in ids {
            let dir = self.container_dir(&id);
            let Ok(record) = super::read_record(&dir) else {
                continue;
            };
            let Some(holder) = record.holder else {
                continue;
            };
            if record.exit.is_some()
                || self.consoles.known(id.as_str())
                || !crate::sys::is_fd_holder(&self.config.proc_root, holder.pid, id.as_str())
            {
                continue;
            }
            let fd = match crate::sys::take_fd(holder.pid, holder.fd) {
                Ok(fd) => fd,
                Err(errno) => {
                    tracing::warn!(container = %id, %errno, "cannot take back its stdin or terminal");
                    continue;
                }
            };
            if record.tty {
                let master = Arc::new(fd);
                let log = match super::logs::open_log(&record.log_path) {
                    Ok(log) => log,
                    Err(e) => {
                        tracing::warn!(container = %id, error = %e, "cannot open its log");
                        continue;
                    }
                };
                self.consoles
                    .insert(id.as_str(), None, Some(master.clone()), Some(holder.pid));
                if let Err(e) =
                    copy_terminal(id.as_str().to_string(), master, log, self.consoles.clone())
                {
                    tracing::warn!(container = %id, error = %e, "cannot copy its terminal");
                }
            } else {
                self.consoles
                    .insert(id.as_str(), Some(fd), None, Some(holder.pid));
            }
        }
    }

    /// Where an attach with stdin writes to container `id`; `Ok(None)` when the container
    /// takes no stdin (or its stdinOnce stdin is closed).
    pub fn open_stdin(&self, id: &super::ContainerId) -> Result<Option<StdinEnd>, RuntimeError> {
        let dir = self.container_dir(id);
        let record = super::read_record(&dir)?;
        if record.tty {
            let Some((master, done)) = self.consoles.master(id.as_str()) else {
                return Ok(None);
            };
            if done || record.stdin == StdinMode::None {
                return Ok(Some(StdinEnd {
                    file: File::open("/dev/null")
                        .map_err(|e| RuntimeError::io("open", Path::new("/dev/null"), e))?,
                    pty: Some(master),
                }));
            }
            let file = master
                .try_clone()
                .map_err(|e| RuntimeError::io("dup terminal", &dir, e))?;
            return Ok(Some(StdinEnd {
                file: File::from(file),
                pty: Some(master),
            }));
        }
        if record.stdin == StdinMode::None {
            return Ok(None);
        }
        let path = fifo_path(&dir);
        // Non-blocking: with no reader left (the container ended) the open fails at once
        // instead of waiting.
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(file) => Ok(Some(StdinEnd { file, pty: None })),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENXIO) =>
            {
                Ok(None)
            }
            Err(e) => Err(RuntimeError::io("open stdin", &path, e)),
        }
    }

    /// The terminal of container `id`, for resizes (`None` without one).
    pub fn terminal(&self, id: &super::ContainerId) -> Option<Arc<OwnedFd>> {
        self.consoles.master(id.as_str()).map(|(m, _)| m)
    }

    /// The end of an attach session that had stdin: with stdinOnce, closes the container's
    /// stdin.
    pub fn end_stdin_session(&self, id: &super::ContainerId) {
        let dir = self.container_dir(id);
        let Ok(record) = super::read_record(&dir) else {
            return;
        };
        if record.stdin != StdinMode::Once {
            return;
        }
        if self.consoles.close_once(id.as_str()) && !record.tty {
            let _ = std::fs::remove_file(fifo_path(&dir));
        }
    }
}

/// Copies what a container writes on its terminal into its log file until the terminal's
/// last slave closes (the container ended), on a thread of its own.
pub(super) fn copy_terminal(
    id: String,
    master: Arc<OwnedFd>,
    log: File,
    consoles: Arc<Consoles>,
) -> Result<(), RuntimeError> {
    let reader = master
        .try_clone()
        .map_err(|e| RuntimeError::io("dup terminal", Path::new(&id), e))?;
    std::thread::Builder::new()
        .name("tty-log".into())
        .spawn(move || {
            let mut reader = File::from(reader);
            let mut log = log;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // An attach made the (shared) open file non-blocking: wait for output.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        crate::sys::wait_readable(&reader);
                        continue;
                    }
                    // EIO: every slave is closed.
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if log.write_all(&buf[..n]).is_err() {
                            // Keep draining so the container never blocks on a full terminal.
                            continue;
                        }
                    }
                }
            }
            consoles.remove_terminal(&id, &master);
        })
        .map(drop)
        .map_err(|e| RuntimeError::io("spawn terminal thread", Path::new("tty-log"), e))
}
