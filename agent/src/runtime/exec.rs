//! Processes started inside a running container (`kubectl exec`, exec probes): libcontainer's
//! tenant builder joins the container's namespaces, cgroup, user and capabilities, as
//! `runc exec` does. The caller hands in the process's stdio descriptors (pipes or a
//! terminal) and gets its pid back; the process is the agent's child (a child subreaper), so
//! [`wait_exec`] reaps it.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::syscall::syscall::SyscallType;

use super::{
    executor, remove_tenant_sockets, sys, ContainerId, ContainerState, Runtime, RuntimeError,
    EXEC_LOCK,
};

/// The standard descriptors of an exec'd process.
pub struct ExecStdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The descriptors are a terminal's: the process makes it its controlling terminal
    /// (job control, `SIGWINCH` on resize) and gets `TERM=xterm`, as the kubelet's runtimes
    /// do.
    pub tty: bool,
}

/// A pseudo-terminal for an exec'd process: the agent keeps `master`, the process gets
/// `slave` as its stdin, stdout and stderr.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal pair.
pub fn open_pty() -> Result<Pty, RuntimeError> {
    let pty = nix::pty::openpty(None, None).map_err(|e| RuntimeError::sys("openpty", e))?;
    // openpty's descriptors are inheritable: a process forked meanwhile by another thread
    // (a container build, iptables) must not keep the terminal open after the exec ends.
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|e| RuntimeError::sys("fcntl", e))?;
    }
    Ok(Pty {
        master: pty.master,
        slave: pty.slave,
    })
}

/// Sets a terminal's size (the process gets `SIGWINCH`).
pub fn resize_pty(master: &impl AsRawFd, width: u16, height: u16) -> Result<(), RuntimeError> {
    let size = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which lives across the call; the
    // descriptor is kept open by the caller.
    let r = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    if r < 0 {
        return Err(RuntimeError::sys("TIOCSWINSZ", nix::errno::Errno::last()));
    }
    Ok(())
}

/// How an exec'd process ended.
pub enum ExecExit {
    /// Exit code (128 + signal for a signalled process).
    Code(i32),
    /// Someone else reaped it; the code is unknown.
    Unknown,
}

/// Waits for an exec'd process to end (blocking) and reaps it.
pub fn wait_exec(pid: i32) -> Result<ExecExit, RuntimeError> {
    match sys::wait_blocking(pid).map_err(|e| RuntimeError::sys("waitpid exec", e))? {
        sys::ChildStatus::Exited(code) => Ok(ExecExit::Code(code)),
        sys::ChildStatus::Signaled(sig) => Ok(ExecExit::Code(128 + sig)),
        sys::ChildStatus::NotOurs | sys::ChildStatus::Alive => Ok(ExecExit::Unknown),
    }
}

impl Runtime {
    /// Starts `argv` in the running container `id` with the given stdio, as the container's
    /// user, in its working directory and with its environment; answers the pid.
    pub fn spawn_exec(
        &self,
        id: &ContainerId,
        argv: &[String],
        stdio: ExecStdio,
    ) -> Result<i32, RuntimeError> {
        if argv.is_empty() {
            return Err(RuntimeError::InvalidSpec("exec needs a command".into()));
        }
        let argv = argv.to_vec();
        match self.state(id)? {
            ContainerState::Running { .. } => {}
            _ => {
                return Err(RuntimeError::WrongState {
                    id: id.to_string(),
                    state: "not running",
                })
            }
        }
        // Like `runc exec`, run as the container's user and in its working directory.
        let config_path = self.container_dir(id).join("bundle/config.json");
        let oci = libcontainer::oci_spec::runtime::Spec::load(&config_path)
            .map_err(|e| RuntimeError::Corrupt(format!("{}: {e}", config_path.display())))?;
        let process = oci.process().clone().unwrap_or_default();
        let root = self.libcontainer_dir();
        let name = id.as_str().to_string();
        let ExecStdio {
            stdin,
            stdout,
            stderr,
            tty,
        } = stdio;
        let env: HashMap<String, String> = if tty {
            HashMap::from([("TERM".to_string(), "xterm".to_string())])
        } else {
            HashMap::new()
        };
        let exec_guard = EXEC_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        // As for creates (see `create_inner`), libcontainer's clones happen in a forked,
        // single-threaded child; the tenant builder also chdirs the calling process and
        // toggles its dumpable flag, which must not touch the agent. The exec'd process is
        // cloned as that child's child; when the child exits it is re-parented to the agent
        // (a child subreaper), which reaps it in `wait_exec`.
        let built = sys::in_forked_child_pid(move || {
            ContainerBuilder::new(name, SyscallType::default())
                .with_root_path(root)
                .map_err(|e| format!("container root: {e}"))?
                .with_stdin(stdin)
                .with_stdout(stdout)
                .with_stderr(stderr)
                .with_executor(executor::ExecveExecutor {
                    controlling_tty: tty,
                })
                .as_tenant()
                .with_container_args(argv)
                .with_env(env)
                .with_user(Some(process.user().uid()))
                .with_group(Some(process.user().gid()))
                .with_cwd(Some(process.cwd().clone()))
                .with_detach(true)
                .build()
                .map(|pid| pid.as_raw())
                .map_err(|e| e.to_string())
        });
        // libcontainer leaves the tenant's notify socket in the container's state directory;
        // it is only used during the build (serialised by EXEC_LOCK), so remove it here.
        remove_tenant_sockets(&self.libcontainer_dir().join(id.as_str()));
        drop(exec_guard);
        built.map_err(|message| RuntimeError::Isolated {
            what: "exec in container",
            message,
        })
    }
}

/// Moves a helper thread into the cgroup it is already in, on that thread, without waiting.
///
/// An exec joins the container's cgroups, and the kernel's first cgroup migration after a
/// quiet spell waits a whole RCU grace period (8–12 ms here on cgroup v1) for its global
/// migration lock (`cgroup_threadgroup_rwsem`); migrations within a grace period after that
/// do not wait. The exec handler calls this as soon as a request arrives, so the grace period
/// runs while the agent checks the request and forks, and the exec's own cgroup write finds
/// it (nearly) over. The write changes nothing; an error (a cgroup the agent may not write)
/// only costs the overlap.
pub fn warm_cgroup_migration(cgroup_root: &Path) {
    static WARMER: std::sync::OnceLock<Option<std::sync::mpsc::SyncSender<()>>> =
        std::sync::OnceLock::new();
    let warmer = WARMER.get_or_init(|| {
        let root = cgroup_root.to_path_buf();
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("cgroup-warm".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    let own = std::fs::read_to_string("/proc/thread-self/cgroup").unwrap_or_default();
                    let tid = nix::unistd::gettid().as_raw();
                    let pid = std::process::id() as i32;
                    if let Some((file, id)) =
                        super::cgroup::own_migration_target(&root, &own, tid, pid)
                    {
                        if let Err(e) = std::fs::write(&file, id) {
                            tracing::debug!(file = %file.display(), error = %e, "cgroup warm-up write");
                        }
                    }
                }
            })
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = warmer {
        // A warm-up already queued serves this request too.
        let _ = tx.try_send(());
    }
}

/// `/dev/null` (read and write) for a stream the process does not get.
pub fn dev_null() -> Result<OwnedFd, RuntimeError> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| RuntimeError::io("open", Path::new("/dev/null"), e))?;
    Ok(OwnedFd::from(null))
}
