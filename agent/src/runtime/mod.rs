//! The container runtime: pod sandboxes and containers, run through libcontainer (youki).
//!
//! # API
//!
//! ```text
//! Runtime::new(RuntimeConfig) -> Result<Runtime, RuntimeError>
//!   create_sandbox(&self, pod_uid, &SandboxConfig) -> Result<Sandbox>
//!   sandbox(&self, pod_uid) -> Result<Option<Sandbox>>          // reload after a restart
//!   list_sandboxes(&self) -> Result<Vec<String>>                // pod uids
//!   remove_sandbox(&self, pod_uid) -> Result<()>                // force-removes its containers too
//!   create_container(&self, &Sandbox, &ContainerSpec) -> Result<ContainerId>
//!   start(&self, &ContainerId) -> Result<()>
//!   state(&self, &ContainerId) -> Result<ContainerState>
//!   exit_fd(&self, &ContainerId) -> Result<Option<OwnedFd>>        // pidfd: readable on exit
//!   kill(&self, &ContainerId, Signal) -> Result<()>
//!   stop(&self, &ContainerId, grace: Duration) -> Result<ContainerState>
//!   wait_exit(&self, &ContainerId, timeout: Duration) -> Result<ContainerState>
//!   remove(&self, &ContainerId) -> Result<()>
//!   list(&self) -> Result<Vec<ContainerId>>
//!   exec(&self, &ContainerId, argv, timeout) -> Result<ExecResult>
//!   spawn_exec(&self, &ContainerId, argv, ExecStdio) -> Result<pid>   // exec::wait_exec(pid)
//!   cgroup_dir(&self, &ContainerId, controller) -> PathBuf
//!   log_path(&self, &ContainerId) -> Result<PathBuf>
//!   remove_cgroup_parent(&self) -> Result<()>
//! rotate_log(path, max_bytes, keep) -> io::Result<bool>
//! sys::set_child_subreaper()
//! ```
//! Every method blocks (libcontainer forks, waits and polls); async callers wrap them in
//! `smol::unblock`. A `Runtime` is `Send + Sync`; calls for different containers may run in
//! parallel.
//!
//! # State on disk (`RuntimeConfig::state_dir`)
//!
//! - `sandboxes/<pod_uid>/ns/{ipc,uts,net}`: bind-mounted namespace files (see [`sandbox`]),
//!   `sandboxes/<pod_uid>/sandbox.json`: its [`SandboxConfig`].
//! - `containers/<id>/bundle/config.json`: the OCI spec; `containers/<id>/record.json`: what
//!   libcontainer does not keep (log path, cgroup path, start time, exit status once known).
//! - `libcontainer/<id>/`: libcontainer's own state (pid, status, notify socket).
//!
//! Nothing lives only in memory, so a restarted agent sees every sandbox and container again
//! ([`Runtime::list`], [`Runtime::sandbox`]) without touching running processes.
//!
//! # Namespaces
//! Each pod gets ipc, uts and (unless `host_network`) net namespaces kept alive by bind
//! mounts; each container gets its own mount and pid namespaces (unless `host_pid`) and joins
//! the pod's by path. `share_pid` (one pid namespace per pod) is refused for now.
//!
//! # Cgroups
//! Container cgroups are `/<cgroup_parent>/<pod_uid>/<container_name>` (libcontainer's
//! cgroupfs managers, v1 — including hybrid hosts — and v2; no systemd). libcontainer removes
//! the container level on delete; `remove_sandbox` removes the pod level and
//! `remove_cgroup_parent` the parent. CPU shares/quota/period and a memory limit (with swap
//! disabled) come from [`Resources`]. Pod-level limits are not set yet.
//!
//! # Logs
//! stdout and stderr of the container's main process go to `ContainerSpec::log_path`, opened
//! `O_APPEND` and passed as fds 1 and 2 (stdin is `/dev/null` unless the spec asks for stdin or
//! a terminal: see [`stdio`]), so output keeps flowing while
//! the agent is down. Rotate with [`rotate_log`] (copy-truncate).
//!
//! # Exit codes
//! libcontainer's double fork clones the container's init with `CLONE_PARENT`, so it is a
//! direct child of the agent. [`Runtime::state`] (and `stop`/`remove`) reap it with
//! `waitpid(pid, WNOHANG)` and write the exit status into `record.json`, so it is still known
//! after an agent restart. An exit code is `128 + signal` for a signalled process (137 after
//! SIGKILL), as Kubernetes reports. `oom_killed` comes from the container cgroup's OOM-kill
//! counter (v2 `memory.events`, v1 `memory.oom_control`). If the container died while no agent
//! was its parent (it exited while the agent was down, so init reaped it), the code is
//! unknown: `Exited { exit_code: None, .. }`, with `finished_at` the time the agent noticed.
//! There is no background reaper thread: only known pids are waited for, so other code in the
//! agent can still use `std::process::Command` safely. [`sys::set_child_subreaper`] exists but
//! is not needed for exit codes (the init is already our child) and should stay off until a
//! reaper for adopted non-container orphans exists: with it on, orphans of `host_pid`
//! containers would be re-parented to the agent and stay zombies. Under systemd the agent unit
//! needs `KillMode=process`, or restarting the agent would kill every container.
//!
//! # Forking from a multi-threaded agent
//! libcontainer `clone`s the container's processes from the calling process, and those
//! children run Rust code (allocations, file I/O) before they `execve`. A lock held by another
//! agent thread at that instant would stay locked in the child forever, and libcontainer also
//! changes process-wide state while building (the dumpable flag, the tenant builder's `chdir`).
//! So creates and execs both run libcontainer's builder in a glibc-`fork()`ed, single-threaded
//! child ([`sys::in_forked_child`], [`sys::in_forked_child_pid`]): fork hands the child
//! consistent malloc state, and whatever the builder changes is the child's. Builds of
//! different containers therefore run in parallel; execs are serialised only because the
//! tenant builder uses a fixed notify-socket path. libcontainer's default executor calls
//! `set_var` in the child; we use our own executor that passes the environment to `execve`
//! instead (`executor.rs`). An exec'd process is re-parented to the agent (a child subreaper)
//! when that child exits and is reaped by [`Runtime::exec`], killed first if it outlives its
//! timeout. libcontainer's own log events should be filtered to `error`
//! (`RUST_LOG=...,libcontainer=error`): events logged in the child go to the container's
//! stderr, i.e. its log file (libcontainer warns "seccomp not available" for every container
//! at `warn`).
//!
//! # Not done
//! No seccomp (libcontainer is built without `libseccomp`), no AppArmor/SELinux, no user
//! namespaces, no pod-level cgroup limits, no `share_pid`, no `/etc/hosts`/`resolv.conf`
//! management (network layer), no host devices for privileged containers.

pub mod cgroup;
pub mod exec;
mod executor;
pub mod logs;
pub mod sandbox;
pub mod spec;
pub mod stdio;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::{Container, ContainerStatus};
use libcontainer::syscall::syscall::SyscallType;
pub use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

pub use logs::{open_log, rotate_log};
pub use sandbox::{Sandbox, SandboxConfig};

use crate::sys;

/// Where the cgroup filesystems are mounted on every supported host.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where the runtime keeps its state and what it allows.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Root of the runtime's state, e.g. `/run/skiff/agent` (a tmpfs, so it is gone after a
    /// reboot together with the processes it describes).
    pub state_dir: PathBuf,
    /// The cgroup every pod cgroup is created under, relative to the cgroup root, e.g. "skiff".
    pub cgroup_parent: String,
    /// Whether `privileged` containers and `host_pid` sandboxes are allowed.
    pub allow_privileged: bool,
    /// The cgroup filesystem root, normally `/sys/fs/cgroup`. Only read by this module (OOM
    /// counters, cleanup); libcontainer always uses `/sys/fs/cgroup`.
    pub cgroup_root: PathBuf,
    /// The proc filesystem root, normally `/proc`.
    pub proc_root: PathBuf,
}

impl RuntimeConfig {
    /// The usual configuration with the given state dir and cgroup parent.
    pub fn new(state_dir: impl Into<PathBuf>, cgroup_parent: impl Into<String>) -> Self {
        RuntimeConfig {
            state_dir: state_dir.into(),
            cgroup_parent: cgroup_parent.into(),
            allow_privileged: false,
            cgroup_root: PathBuf::from(CGROUP_ROOT),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// What went wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{what}: {errno}")]
    Sys {
        what: &'static str,
        errno: sys::Errno,
    },
    /// libcontainer failed.
    #[error("{what}: {source}")]
    Container {
        what: &'static str,
        source: Box<libcontainer::error::LibcontainerError>,
    },
    /// libcontainer failed in the forked child that creates containers.
    #[error("{what}: {message}")]
    Isolated { what: &'static str, message: String },
    /// The request cannot be turned into a container.
    #[error("invalid container spec: {0}")]
    InvalidSpec(String),
    /// The request needs a permission the agent was not started with.
    #[error("refused: {0}")]
    Refused(String),
    /// No such container or sandbox.
    #[error("{0} not found")]
    NotFound(String),
    /// It already exists.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The container is not in a state that allows the operation.
    #[error("container {id} is {state}")]
    WrongState { id: String, state: &'static str },
    /// An exec did not finish in time (its process was killed).
    #[error("exec timed out after {0:?}")]
    ExecTimeout(Duration),
    /// Stored state could not be read.
    #[error("corrupt runtime state: {0}")]
    Corrupt(String),
}

impl RuntimeError {
    fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        RuntimeError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }

    fn sys(what: &'static str, errno: sys::Errno) -> Self {
        RuntimeError::Sys { what, errno }
    }

    fn lc(what: &'static str, source: libcontainer::error::LibcontainerError) -> Self {
        RuntimeError::Container {
            what,
            source: Box::new(source),
        }
    }
}

/// A container's id: `<pod_uid>.<container_name>`; also its libcontainer id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId(String);

fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ContainerId {
    /// The id of container `name` in pod `pod_uid` (letters, digits, '-' and '_' only).
    pub fn new(pod_uid: &str, name: &str) -> Result<Self, RuntimeError> {
        if !valid_part(pod_uid) || !valid_part(name) {
            return Err(RuntimeError::InvalidSpec(format!(
                "invalid pod uid {pod_uid:?} or container name {name:?}"
            )));
        }
        Ok(ContainerId(format!("{pod_uid}.{name}")))
    }

    /// Parses `<pod_uid>.<name>`.
    pub fn parse(s: &str) -> Option<Self> {
        let (pod, name) = s.split_once('.')?;
        ContainerId::new(pod, name).ok()
    }

    /// The full id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The pod's uid.
    pub fn pod_uid(&self) -> &str {
        self.0.split_once('.').map_or("", |(p, _)| p)
    }

    /// The container's name within the pod.
    pub fn name(&self) -> &str {
        self.0.split_once('.').map_or("", |(_, n)| n)
    }
}

impl std::fmt::Display for ContainerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a volume is mounted into a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    /// Recursive bind mount of `source`.
    Bind,
    /// A fresh tmpfs (`source` ignored).
    Tmpfs,
}

/// One mount in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub source: PathBuf,
    pub destination: PathBuf,
    pub readonly: bool,
    pub kind: MountKind,
}

/// Cgroup limits of one container (Kubernetes requests and limits already converted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// v1 `cpu.shares` (2..262144; libcontainer converts to `cpu.weight` on v2).
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds per period.
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds (default 100000).
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes; swap is disabled when set.
    pub memory_limit: Option<i64>,
}

/// Everything needed to create one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// Container name, unique within the pod.
    pub name: String,
    /// Absolute path of the prepared root filesystem.
    pub rootfs: PathBuf,
    /// The resolved command line (entrypoint/command + args).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory inside the container; empty means "/".
    pub cwd: String,
    /// (uid, gid); `None` runs as 0:0.
    pub user: Option<(u32, u32)>,
    /// Capabilities to add / drop, Kubernetes names ("NET_ADMIN" or "CAP_NET_ADMIN", "ALL").
    pub caps_add: Vec<String>,
    pub caps_drop: Vec<String>,
    pub readonly_rootfs: bool,
    pub privileged: bool,
    pub mounts: Vec<MountSpec>,
    pub resources: Resources,
    /// File receiving stdout and stderr (appended to).
    pub log_path: PathBuf,
    /// A PID namespace to join (`/proc/PID/ns/pid` of another container of the pod: an
    /// ephemeral container's target) instead of a new one.
    pub pid_ns: Option<PathBuf>,
    /// The container's stdin (see [`stdio`]).
    pub stdin: stdio::StdinMode,
    /// A pseudo-terminal for stdin, stdout and stderr (see [`stdio`]).
    pub tty: bool,
}

impl ContainerSpec {
    /// A spec with just a name, rootfs, command and log file; the rest default.
    pub fn new(
        name: &str,
        rootfs: impl Into<PathBuf>,
        args: &[&str],
        log_path: impl Into<PathBuf>,
    ) -> Self {
        ContainerSpec {
            name: name.to_string(),
            rootfs: rootfs.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            cwd: String::new(),
            user: None,
            caps_add: Vec::new(),
            caps_drop: Vec::new(),
            readonly_rootfs: false,
            privileged: false,
            mounts: Vec::new(),
            resources: Resources::default(),
            log_path: log_path.into(),
            pid_ns: None,
            stdin: stdio::StdinMode::None,
            tty: false,
        }
    }
}

/// Where a container is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Created, its command not started yet.
    Created,
    /// Running as `pid` (in the agent's pid namespace).
    Running {
        pid: i32,
        started_at: Option<SystemTime>,
    },
    /// Finished. `exit_code` is `None` when the process ended while no agent could reap it.
    Exited {
        exit_code: Option<i32>,
        finished_at: SystemTime,
        oom_killed: bool,
    },
    /// libcontainer's state and ours disagree or are incomplete (e.g. a crash mid-create).
    Unknown,
}

/// Result of [`Runtime::exec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code (128 + signal if killed by a signal).
    pub exit_code: i32,
    /// Combined stdout and stderr, at most [`EXEC_OUTPUT_LIMIT`] bytes.
    pub output: Vec<u8>,
}

/// How much exec output is kept.
pub const EXEC_OUTPUT_LIMIT: usize = 64 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    cgroup_path: String,
    log_path: PathBuf,
    /// Milliseconds since the epoch.
    started_at: Option<u64>,
    exit: Option<ExitRecord>,
    #[serde(default)]
    stdin: stdio::StdinMode,
    #[serde(default)]
    tty: bool,
    /// The process holding stdinOnce's keeper or the terminal across agent restarts.
    #[serde(default)]
    holder: Option<stdio::Holder>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ExitRecord {
    code: Option<i32>,
    finished_at: u64,
    oom_killed: bool,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Serialises libcontainer's execs: the tenant builder leaves a notify socket at a fixed path
/// in the container's state directory while it runs. Creates need no lock: each runs in a
/// forked child of its own (see `create_inner`) and touches only its container's paths.
static EXEC_LOCK: Mutex<()> = Mutex::new(());

/// Serialises `Container::start`, which changes the process's working directory.
static START_LOCK: Mutex<()> = Mutex::new(());

/// The container runtime of one agent.
pub struct Runtime {
    config: RuntimeConfig,
    /// Serialises reaping and record updates, so two callers never both `waitpid` one pid
    /// (the loser would see ECHILD and record an unknown exit code).
    reap_lock: Mutex<()>,
    /// The agent's ends of containers' stdins and terminals.
    consoles: std::sync::Arc<stdio::Consoles>,
}

impl Runtime {
    /// Opens (creating the directories if needed) a runtime on `config.state_dir`. Existing
    /// sandboxes and containers are picked up as they are.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        if !valid_cgroup_parent(&config.cgroup_parent) {
            return Err(RuntimeError::InvalidSpec(format!(
                "invalid cgroup parent {:?}",
                config.cgroup_parent
            )));
        }
        // Containers are built in a forked child (see `create_inner`); their init processes
        // are orphaned when that child exits and must come to the agent, which reaps them and
        // records their exit codes. Orphans inside a container stay with the container's own
        // init (its pid namespace); only hostPID containers, refused by default, could leave
        // orphans with the agent.
        match sys::set_child_subreaper() {
            Ok(()) => {}
            // qemu-user (the emulated smoke test of the cross builds) does not implement
            // this prctl. The agent still joins, registers and serves; exited containers
            // then go to init, and their exit codes are lost, so say so loudly.
            Err(nix::errno::Errno::EINVAL) => tracing::error!(
                "this system does not support child subreapers (PR_SET_CHILD_SUBREAPER): \
                 containers' exit codes will not be reported"
            ),
            Err(errno) => {
                return Err(RuntimeError::Sys {
                    what: "become a child subreaper",
                    errno,
                })
            }
        }
        let rt = Runtime {
            config,
            reap_lock: Mutex::new(()),
            consoles: Default::default(),
        };
        for dir in [
            rt.sandboxes_dir(),
            rt.containers_dir(),
            rt.libcontainer_dir(),
        ] {
            std::fs::create_dir_all(&dir)
                .map_err(|e| RuntimeError::io("create state dir", &dir, e))?;
        }
        rt.adopt_consoles();
        Ok(rt)
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    fn sandboxes_dir(&self) -> PathBuf {
        self.config.state_dir.join("sandboxes")
    }

    fn containers_dir(&self) -> PathBuf {
        self.config.state_dir.join("containers")
    }

    fn libcontainer_dir(&self) -> PathBuf {
        self.config.state_dir.join("libcontainer")
    }

    fn container_dir(&self, id: &ContainerId) -> PathBuf {
        self.containers_dir().join(id.as_str())
    }

    fn pod_cgroup(&self, pod_uid: &str) -> String {
        format!("{}/{}", self.config.cgroup_parent, pod_uid)
    }

    /// The container's cgroup directory for `controller` ("memory", "cpu", ...; ignored on v2).
    pub fn cgroup_dir(&self, id: &ContainerId, controller: &str) -> PathBuf {
        let rel = format!("{}/{}", self.pod_cgroup(id.pod_uid()), id.name());
        cgroup::controller_dir(&self.config.cgroup_root, controller, &rel)
    }

    // ---- sandboxes -------------------------------------------------------------------------

    /// Creates the pod's sandbox: persistent ipc, uts and net namespaces, hostname set.
    pub fn create_sandbox(
        &self,
        pod_uid: &str,
        cfg: &SandboxConfig,
    ) -> Result<Sandbox, RuntimeError> {
        if !valid_part(pod_uid) {
            return Err(RuntimeError::InvalidSpec(format!(
                "invalid pod uid {pod_uid:?}"
            )));
        }
        if cfg.share_pid {
            return Err(RuntimeError::InvalidSpec(
                "shareProcessNamespace is not supported".into(),
            ));
        }
        if cfg.host_pid && !self.config.allow_privileged {
            return Err(RuntimeError::Refused(
                "hostPID needs an agent started with privileged pods allowed".into(),
            ));
        }
        let dir = self.sandboxes_dir().join(pod_uid);
        if dir.exists() {
            return Err(RuntimeError::AlreadyExists(format!("sandbox {pod_uid}")));
        }
        sandbox::create(pod_uid, &dir, cfg)
    }

    /// The stored sandbox of `pod_uid`, if any.
    pub fn sandbox(&self, pod_uid: &str) -> Result<Option<Sandbox>, RuntimeError> {
        if !valid_part(pod_uid) {
            return Ok(None);
        }
        let dir = self.sandboxes_dir().join(pod_uid);
        if !dir.join("sandbox.json").exists() {
            return Ok(None);
        }
        Sandbox::load(pod_uid, &dir).map(Some)
    }

    /// The pod uids that have a sandbox.
    pub fn list_sandboxes(&self) -> Result<Vec<String>, RuntimeError> {
        list_dir(&self.sandboxes_dir())
    }

    /// Removes the pod's containers (killing any still running), its namespaces, its pod
    /// cgroup and its state directory. Removing a missing sandbox is not an error.
    pub fn remove_sandbox(&self, pod_uid: &str) -> Result<(), RuntimeError> {
        if !valid_part(pod_uid) {
            return Err(RuntimeError::InvalidSpec(format!(
                "invalid pod uid {pod_uid:?}"
            )));
        }
        for id in self.list()? {
            if id.pod_uid() == pod_uid {
                self.remove(&id)?;
            }
        }
        cgroup::remove_tree(&self.config.cgroup_root, &self.pod_cgroup(pod_uid)).map_err(|e| {
            RuntimeError::io("remove pod cgroup", Path::new(&self.pod_cgroup(pod_uid)), e)
        })?;
        sandbox::remove(&self.sandboxes_dir().join(pod_uid))
    }

    /// Removes the (empty) cgroup parent in every hierarchy; for tests and uninstall.
    pub fn remove_cgroup_parent(&self) -> Result<(), RuntimeError> {
        cgroup::remove_tree(&self.config.cgroup_root, &self.config.cgroup_parent).map_err(|e| {
            RuntimeError::io(
                "remove cgroup parent",
                Path::new(&self.config.cgroup_parent),
                e,
            )
        })
    }

    // ---- containers ------------------------------------------------------------------------

    /// Creates a container in `sandbox`: its process exists, in its namespaces and cgroup,
    /// but its command is not started before [`Runtime::start`].
    pub fn create_container(
        &self,
        sandbox: &Sandbox,
        spec: &ContainerSpec,
    ) -> Result<ContainerId, RuntimeError> {
        if spec.privileged && !self.config.allow_privileged {
            return Err(RuntimeError::Refused(
                "privileged containers need an agent started with privileged pods allowed".into(),
            ));
        }
        let id = ContainerId::new(&sandbox.pod_uid, &spec.name)?;
        let dir = self.container_dir(&id);
        if dir.exists() || self.libcontainer_dir().join(id.as_str()).exists() {
            return Err(RuntimeError::AlreadyExists(format!("container {id}")));
        }
        let cgroup_path = format!("/{}/{}", self.pod_cgroup(&sandbox.pod_uid), spec.name);
        let result = self.create_inner(&id, &dir, sandbox, spec, &cgroup_path);
        if result.is_err() {
            // Leave nothing behind: stdin, libcontainer state, bundle, cgroup.
            self.consoles.remove(id.as_str());
            let _ = self.delete_libcontainer(&id);
            let _ = std::fs::remove_dir_all(&dir);
            let rel = format!("{}/{}", self.pod_cgroup(&sandbox.pod_uid), spec.name);
            let _ = cgroup::remove_tree(&self.config.cgroup_root, &rel);
        }
        result.map(|()| id)
    }

    fn create_inner(
        &self,
        id: &ContainerId,
        dir: &Path,
        sandbox: &Sandbox,
        spec: &ContainerSpec,
        cgroup_path: &str,
    ) -> Result<(), RuntimeError> {
        let bundle = dir.join("bundle");
        let available = sys::bounding_capabilities(&self.config.proc_root)
            .map_err(|e| RuntimeError::io("read capabilities", &self.config.proc_root, e))?;
        spec::write_bundle(&bundle, sandbox, spec, cgroup_path, available)?;
        let record = Record {
            cgroup_path: cgroup_path.trim_start_matches('/').to_string(),
            log_path: spec.log_path.clone(),
            started_at: None,
            exit: None,
            stdin: spec.stdin,
            tty: spec.tty,
            holder: None,
        };
        write_record(dir, &record)?;

        let log = open_log(&spec.log_path)
            .map_err(|e| RuntimeError::io("open log", &spec.log_path, e))?;
        // The container's fds 0, 1, 2; with a terminal, its slave side for all three (the
        // master's output is copied into the log).
        let (stdin, stdout, stderr, keeper, master) = if spec.tty {
            let pty = exec::open_pty()?;
            let dup = |fd: &OwnedFd| {
                fd.try_clone()
                    .map_err(|e| RuntimeError::io("dup terminal", dir, e))
            };
            let (stdin, stdout) = (dup(&pty.slave)?, dup(&pty.slave)?);
            let master = std::sync::Arc::new(pty.master);
            stdio::copy_terminal(
                id.as_str().to_string(),
                master.clone(),
                log,
                self.consoles.clone(),
            )?;
            (stdin, stdout, pty.slave, None, Some(master))
        } else {
            let log_err = log
                .try_clone()
                .map_err(|e| RuntimeError::io("dup log fd", &spec.log_path, e))?;
            let (stdin, keeper) = stdio::make_stdin(dir, spec.stdin)?;
            (
                stdin,
                OwnedFd::from(log),
                OwnedFd::from(log_err),
                keeper,
                None,
            )
        };
        // What only the agent holds is also held by a process that outlives it.
        let holder = match (&keeper, &master) {
            (Some(fd), _) => stdio::hold(id.as_str(), fd),
            (None, Some(fd)) => stdio::hold(id.as_str(), fd),
            (None, None) => None,
        };
        self.consoles
            .insert(id.as_str(), keeper, master, holder.map(|h| h.pid));
        if holder.is_some() {
            let mut record = record;
            record.holder = holder;
            write_record(dir, &record)?;
        }

        let root = self.libcontainer_dir();
        let name = id.as_str().to_string();
        let tty = spec.tty;
        // libcontainer clones with raw `clone`, which in a multi-threaded agent can copy a
        // malloc lock held by another thread into the child, where it stays locked for ever.
        // So the build runs in a glibc `fork()` child (fork hands the child consistent malloc
        // state), which is single-threaded; libcontainer's intermediate process is that
        // child's child; the container's init is orphaned when that child exits and, the agent being a
        // child subreaper, becomes the agent's child. The dumpable flag and working directory
        // that libcontainer changes are the child's, so builds of different containers run in
        // parallel (a burst of new pods overlaps their builds on all cores).
        sys::in_forked_child(move || {
            ContainerBuilder::new(name, SyscallType::default())
                .with_root_path(root)
                .map_err(|e| format!("container root: {e}"))?
                .with_stdin(stdin)
                .with_stdout(stdout)
                .with_stderr(stderr)
                .with_executor(executor::ExecveExecutor {
                    controlling_tty: tty,
                })
                .as_init(&bundle)
                .with_systemd(false)
                .with_detach(true)
                .build()
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .map_err(|message| RuntimeError::Isolated {
            what: "create container",
            message,
        })?;
        Ok(())
    }

    fn load(&self, id: &ContainerId) -> Result<Container, RuntimeError> {
        let root = self.libcontainer_dir().join(id.as_str());
        if !root.exists() {
            return Err(RuntimeError::NotFound(format!("container {id}")));
        }
        Container::load(root).map_err(|e| RuntimeError::lc("load container", e))
    }

    /// Starts the container's command.
    pub fn start(&self, id: &ContainerId) -> Result<(), RuntimeError> {
        let mut container = self.load(id)?;
        {
            // libcontainer reaches the container's notify socket by a relative path after a
            // process-wide chdir into its state directory: two starts at once would race.
            let _start = START_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            container
                .start()
                .map_err(|e| RuntimeError::lc("start container", e))?;
        }
        let dir = self.container_dir(id);
        let _guard = self.reap_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut record = read_record(&dir)?;
        record.started_at = Some(now_ms());
        write_record(&dir, &record)
    }

    /// The container's state, reaping and recording its exit status if it has finished.
    pub fn state(&self, id: &ContainerId) -> Result<ContainerState, RuntimeError> {
        let container = self.load(id)?;
        let dir = self.container_dir(id);
        let _guard = self.reap_lock.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(mut record) = read_record(&dir) else {
            return Ok(ContainerState::Unknown);
        };
        if let Some(exit) = &record.exit {
            return Ok(exited(exit));
        }
        let Some(pid) = container.pid().map(|p| p.as_raw()) else {
            return Ok(ContainerState::Unknown);
        };
        let code = match sys::try_wait(pid).map_err(|e| RuntimeError::sys("waitpid", e))? {
            sys::ChildStatus::Alive => return Ok(self.live_state(&container, pid, &record)),
            sys::ChildStatus::Exited(code) => Some(code),
            sys::ChildStatus::Signaled(sig) => Some(128 + sig),
            sys::ChildStatus::NotOurs => {
                if sys::process_alive(&self.config.proc_root, pid) {
                    return Ok(self.live_state(&container, pid, &record));
                }
                None
            }
        };
        let exit = ExitRecord {
            code,
            finished_at: now_ms(),
            oom_killed: cgroup::oom_killed(&self.config.cgroup_root, &record.cgroup_path),
        };
        let state = exited(&exit);
        record.exit = Some(exit);
        write_record(&dir, &record)?;
        Ok(state)
    }

    /// A descriptor that polls readable once the container's main process has exited (a
    /// pidfd), so callers can wait for exits instead of polling [`Runtime::state`].
    /// `Ok(None)` when there is nothing to wait for: the exit is already recorded, the process
    /// is gone, or the kernel has no pidfds (before Linux 5.3); callers then poll.
    pub fn exit_fd(&self, id: &ContainerId) -> Result<Option<OwnedFd>, RuntimeError> {
        let container = self.load(id)?;
        let Some(pid) = container.pid().map(|p| p.as_raw()) else {
            return Ok(None);
        };
        // Under the reap lock no one reaps the process (our child) between the check and the
        // open, so the pid cannot have been reused by then.
        let _guard = self.reap_lock.lock().unwrap_or_else(|p| p.into_inner());
        if read_record(&self.container_dir(id)).is_ok_and(|r| r.exit.is_some()) {
            return Ok(None);
        }
        match sys::pidfd_open(pid) {
            Ok(fd) => Ok(fd),
            Err(nix::errno::Errno::ENOSYS) => Ok(None),
            Err(errno) => Err(RuntimeError::sys("pidfd_open", errno)),
        }
    }

    fn live_state(&self, container: &Container, pid: i32, record: &Record) -> ContainerState {
        match container.status() {
            ContainerStatus::Creating | ContainerStatus::Created => ContainerState::Created,
            _ => ContainerState::Running {
                pid,
                started_at: record.started_at.map(from_ms),
            },
        }
    }

    /// Sends `signal` to the container's main process.
    pub fn kill(&self, id: &ContainerId, signal: Signal) -> Result<(), RuntimeError> {
        let container = self.load(id)?;
        let pid = container
            .pid()
            .ok_or_else(|| RuntimeError::WrongState {
                id: id.to_string(),
                state: "without a process",
            })?
            .as_raw();
        if !matches!(
            self.state(id)?,
            ContainerState::Running { .. } | ContainerState::Created
        ) {
            return Ok(());
        }
        sys::kill(pid, signal).map_err(|e| RuntimeError::sys("kill", e))
    }

    /// SIGKILLs every process in the container's cgroup.
    fn kill_all(&self, id: &ContainerId) -> Result<(), RuntimeError> {
        let mut container = self.load(id)?;
        match container.kill(Signal::SIGKILL, true) {
            Ok(()) => Ok(()),
            // Already stopped and its cgroup gone: nothing to kill.
            Err(libcontainer::error::LibcontainerError::IncorrectStatus(_)) => Ok(()),
            Err(e) => Err(RuntimeError::lc("kill container", e)),
        }
    }

    /// Stops the container: SIGTERM to its main process, up to `grace` for it to exit, then
    /// SIGKILL to every process of the container. Returns the final state.
    pub fn stop(&self, id: &ContainerId, grace: Duration) -> Result<ContainerState, RuntimeError> {
        match self.state(id)? {
            s @ ContainerState::Exited { .. } => return Ok(s),
            ContainerState::Created | ContainerState::Unknown => {
                self.kill_all(id)?;
                return self.wait_exit(id, Duration::from_secs(10));
            }
            ContainerState::Running { .. } => {}
        }
        self.kill(id, Signal::SIGTERM)?;
        let state = self.wait_exit(id, grace)?;
        if matches!(state, ContainerState::Exited { .. }) {
            return Ok(state);
        }
        self.kill_all(id)?;
        self.wait_exit(id, Duration::from_secs(10))
    }

    /// Polls `state` until the container has exited or `timeout` passed; returns the last state.
    pub fn wait_exit(
        &self,
        id: &ContainerId,
        timeout: Duration,
    ) -> Result<ContainerState, RuntimeError> {
        // A grace period is any int64 of seconds (terminationGracePeriodSeconds): past what an
        // Instant holds (`+` panicked, even in a release build), it never ends.
        let deadline = Instant::now().checked_add(timeout);
        let mut delay = Duration::from_millis(2);
        loop {
            let state = self.state(id)?;
            let now = Instant::now();
            if matches!(state, ContainerState::Exited { .. }) || deadline.is_some_and(|d| now >= d)
            {
                return Ok(state);
            }
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            std::thread::sleep(delay.min(left));
            delay = (delay * 2).min(Duration::from_millis(50));
        }
    }

    /// Removes the container: kills whatever still runs in it, reaps it, deletes its cgroup,
    /// libcontainer state and bundle. The log file is left for the caller. A missing
    /// container is not an error.
    pub fn remove(&self, id: &ContainerId) -> Result<(), RuntimeError> {
        self.consoles.remove(id.as_str());
        // A holder from an earlier life of the agent.
        if let Some(h) = read_record(&self.container_dir(id))
            .ok()
            .and_then(|r| r.holder)
        {
            if sys::is_fd_holder(&self.config.proc_root, h.pid, id.as_str()) {
                sys::kill_fd_holder(h.pid);
            }
        }
        let lc_root = self.libcontainer_dir().join(id.as_str());
        if lc_root.exists() {
            match self.state(id) {
                Ok(ContainerState::Exited { .. }) => {}
                _ => {
                    self.kill_all(id)?;
                    let _ = self.wait_exit(id, Duration::from_secs(10))?;
                }
            }
            // Also clears any processes left in the cgroup (e.g. daemons of an exited init).
            self.delete_libcontainer(id)?;
        }
        let dir = self.container_dir(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RuntimeError::io("remove container dir", &dir, e)),
        }
    }

    fn delete_libcontainer(&self, id: &ContainerId) -> Result<(), RuntimeError> {
        let root = self.libcontainer_dir().join(id.as_str());
        if !root.exists() {
            return Ok(());
        }
        match Container::load(root.clone()) {
            Ok(mut container) => container
                .delete(true)
                .map_err(|e| RuntimeError::lc("delete container", e)),
            // A create that failed half-way may leave a directory without state.
            Err(_) => std::fs::remove_dir_all(&root)
                .map_err(|e| RuntimeError::io("remove container state", &root, e)),
        }
    }

    /// Every container libcontainer knows about (after a restart: the ones to re-adopt).
    pub fn list(&self) -> Result<Vec<ContainerId>, RuntimeError> {
        Ok(list_dir(&self.libcontainer_dir())?
            .iter()
            .filter_map(|name| ContainerId::parse(name))
            .collect())
    }

    /// Runs `argv` inside the running container (its namespaces, cgroup, user and
    /// capabilities), waits up to `timeout`, and returns the exit code and combined output.
    /// On timeout the process is killed and [`RuntimeError::ExecTimeout`] returned.
    pub fn exec(
        &self,
        id: &ContainerId,
        argv: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        if argv.is_empty() {
            return Err(RuntimeError::InvalidSpec("exec needs a command".into()));
        }
        let (reader, writer) =
            std::io::pipe().map_err(|e| RuntimeError::io("pipe", Path::new("exec"), e))?;
        let writer_err = writer
            .try_clone()
            .map_err(|e| RuntimeError::io("dup", Path::new("exec"), e))?;
        let pid = self.spawn_exec(
            id,
            argv,
            exec::ExecStdio {
                stdin: exec::dev_null()?,
                stdout: OwnedFd::from(writer),
                stderr: OwnedFd::from(writer_err),
                tty: false,
            },
        )?;

        // The pipe's write ends went away with the builder. Output is drained without blocking
        // while waiting for the process, so a background process that keeps the pipe open
        // cannot hang the exec: once the exec'd process has exited, whatever is buffered is
        // read and the pipe closed.
        let mut reader = reader;
        sys::set_nonblocking(&reader).map_err(|e| RuntimeError::sys("fcntl", e))?;
        let mut output = Vec::new();
        let mut drain = |reader: &mut std::io::PipeReader| {
            let mut buf = [0u8; 8192];
            // Ok(0) is EOF, WouldBlock means nothing more for now; both end this round.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                let room = EXEC_OUTPUT_LIMIT.saturating_sub(output.len());
                output.extend_from_slice(&buf[..n.min(room)]);
            }
        };
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(1);
        let code = loop {
            drain(&mut reader);
            match sys::try_wait(pid).map_err(|e| RuntimeError::sys("waitpid exec", e))? {
                sys::ChildStatus::Exited(code) => break Some(code),
                sys::ChildStatus::Signaled(sig) => break Some(128 + sig),
                sys::ChildStatus::NotOurs => break None,
                sys::ChildStatus::Alive => {}
            }
            if Instant::now() >= deadline {
                let _ = sys::kill(pid, Signal::SIGKILL);
                // Reap it so it does not linger as a zombie.
                let kill_deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < kill_deadline
                    && matches!(sys::try_wait(pid), Ok(sys::ChildStatus::Alive))
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Err(RuntimeError::ExecTimeout(timeout));
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(20));
        };
        drain(&mut reader);
        let exit_code =
            code.ok_or_else(|| RuntimeError::Corrupt("exec process was reaped elsewhere".into()))?;
        Ok(ExecResult { exit_code, output })
    }

    /// Where the container's log goes.
    /// When the container's process started, as recorded (still known once it exited).
    pub fn started_at(&self, id: &ContainerId) -> Option<SystemTime> {
        read_record(&self.container_dir(id))
            .ok()?
            .started_at
            .map(from_ms)
    }

    pub fn log_path(&self, id: &ContainerId) -> Result<PathBuf, RuntimeError> {
        Ok(read_record(&self.container_dir(id))?.log_path)
    }
}

fn exited(exit: &ExitRecord) -> ContainerState {
    ContainerState::Exited {
        exit_code: exit.code,
        finished_at: from_ms(exit.finished_at),
        oom_killed: exit.oom_killed,
    }
}

/// Removes the `tenant-notify-*.sock` files libcontainer's exec leaves in `dir`.
fn remove_tenant_sockets(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with("tenant-notify-")
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn valid_cgroup_parent(parent: &str) -> bool {
    !parent.is_empty()
        && parent
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != ".." && !seg.contains('\0'))
}

fn list_dir(dir: &Path) -> Result<Vec<String>, RuntimeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RuntimeError::io("list", dir, e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

fn read_record(dir: &Path) -> Result<Record, RuntimeError> {
    let path = dir.join("record.json");
    let bytes = std::fs::read(&path).map_err(|e| RuntimeError::io("read record", &path, e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| RuntimeError::Corrupt(format!("{}: {e}", path.display())))
}

fn write_record(dir: &Path, record: &Record) -> Result<(), RuntimeError> {
    let path = dir.join("record.json");
    let tmp = dir.join("record.json.tmp");
    let bytes = serde_json::to_vec(record).map_err(|e| RuntimeError::Corrupt(e.to_string()))?;
    std::fs::write(&tmp, bytes).map_err(|e| RuntimeError::io("write record", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| RuntimeError::io("write record", &path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids() {
        let id = ContainerId::new("0f4c-aa", "web").expect("id");
        assert_eq!(id.as_str(), "0f4c-aa.web");
        assert_eq!(id.pod_uid(), "0f4c-aa");
        assert_eq!(id.name(), "web");
        assert_eq!(ContainerId::parse("0f4c-aa.web"), Some(id));
        assert!(ContainerId::parse("nodot").is_none());
        assert!(ContainerId::new("a/b", "c").is_err());
        assert!(ContainerId::new("a", "b.c").is_err());
    }

    #[test]
    fn runtime_can_move_to_blocking_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Runtime>();
    }

    /// terminationGracePeriodSeconds is any int64: a deadline of i64::MAX seconds from now
    /// panicked (`Instant + Duration` overflows even in a release build) before the state was
    /// looked at.
    #[test]
    fn waiting_for_the_longest_grace_period_does_not_overflow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = Runtime::new(RuntimeConfig::new(dir.path(), "skiff-test")).expect("runtime");
        let id = ContainerId::new("no-such-pod", "c").expect("id");
        for grace in [
            Duration::MAX,
            Duration::from_secs(i64::MAX as u64),
            Duration::from_secs(u64::MAX),
            Duration::ZERO,
        ] {
            assert!(rt.wait_exit(&id, grace).is_err(), "no such container");
        }
    }

    #[test]
    fn cgroup_parent_validation() {
        assert!(valid_cgroup_parent("skiff"));
        assert!(valid_cgroup_parent("kube/skiff"));
        assert!(!valid_cgroup_parent(""));
        assert!(!valid_cgroup_parent("/skiff"));
        assert!(!valid_cgroup_parent("a/../b"));
    }
}
