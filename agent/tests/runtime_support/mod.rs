//! Shared fixtures for the runtime tests: a busybox root filesystem, a runtime on a temp state
//! dir with its own cgroup parent, and a Drop guard that removes everything even when a test
//! fails. These tests need root and a busybox static binary (`busybox-static`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent::runtime::{
    ContainerId, ContainerSpec, ContainerState, Runtime, RuntimeConfig, Sandbox, SandboxConfig,
};

const BUSYBOX_CANDIDATES: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

/// Builds a minimal root filesystem from the static busybox: `bin/busybox`, a symlink per
/// applet, and the directories a container needs.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let busybox = BUSYBOX_CANDIDATES
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("busybox not found: install busybox-static");
    let root = dir.join("rootfs");
    for sub in [
        "bin",
        "proc",
        "dev",
        "sys",
        "tmp",
        "etc",
        "root",
        "home/user",
    ] {
        std::fs::create_dir_all(root.join(sub)).expect("mkdir rootfs");
    }
    std::fs::copy(busybox, root.join("bin/busybox")).expect("copy busybox");
    let list = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet.is_empty() || applet == "busybox" {
            continue;
        }
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
    )
    .expect("passwd");
    std::fs::write(root.join("etc/group"), "root:x:0:\nuser:x:1000:\n").expect("group");
    // /tmp must be writable by non-root users, like on a real distribution.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod tmp");
    root
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A runtime on a private state dir and cgroup parent; Drop removes all its sandboxes,
/// containers and cgroups.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub rootfs: PathBuf,
    pub runtime: Option<Runtime>,
    pub config: RuntimeConfig,
}

impl TestEnv {
    pub fn new(name: &str) -> Self {
        Self::with_privileged(name, false)
    }

    pub fn with_privileged(name: &str, allow_privileged: bool) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "runtime tests need root (they create real containers)"
        );
        let dir = tempfile::Builder::new()
            .prefix("skiff-rt-")
            .tempdir()
            .expect("tempdir");
        let rootfs = busybox_rootfs(dir.path());
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let mut config = RuntimeConfig::new(
            dir.path().join("state"),
            format!("skiff-test-{}-{n}-{name}", std::process::id()),
        );
        config.allow_privileged = allow_privileged;
        let runtime = Runtime::new(config.clone()).expect("runtime");
        TestEnv {
            dir,
            rootfs,
            runtime: Some(runtime),
            config,
        }
    }

    pub fn rt(&self) -> &Runtime {
        self.runtime.as_ref().expect("runtime open")
    }

    pub fn sandbox(&self, pod: &str) -> Sandbox {
        self.rt()
            .create_sandbox(
                pod,
                &SandboxConfig {
                    hostname: format!("host-{pod}"),
                    host_network: false,
                    host_pid: false,
                    share_pid: false,
                },
            )
            .expect("create sandbox")
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(format!("{name}.log"))
    }

    pub fn spec(&self, name: &str, args: &[&str]) -> ContainerSpec {
        ContainerSpec::new(name, &self.rootfs, args, self.log_path(name))
    }

    /// Creates and starts a container.
    pub fn run(&self, sandbox: &Sandbox, spec: &ContainerSpec) -> ContainerId {
        let id = self
            .rt()
            .create_container(sandbox, spec)
            .expect("create container");
        self.rt().start(&id).expect("start container");
        id
    }

    /// Runs a container to completion and returns its final state and log.
    pub fn run_to_exit(&self, sandbox: &Sandbox, spec: &ContainerSpec) -> (ContainerState, String) {
        let id = self.run(sandbox, spec);
        let state = self
            .rt()
            .wait_exit(&id, Duration::from_secs(20))
            .expect("wait");
        assert!(
            matches!(state, ContainerState::Exited { .. }),
            "{id} did not exit: {state:?}"
        );
        let log = std::fs::read_to_string(&spec.log_path).unwrap_or_default();
        (state, log)
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Reopen if a test dropped its runtime (re-adoption tests).
        let runtime = match self.runtime.take() {
            Some(rt) => rt,
            None => match Runtime::new(self.config.clone()) {
                Ok(rt) => rt,
                Err(_) => return,
            },
        };
        if let Ok(ids) = runtime.list() {
            for id in ids {
                let _ = runtime.remove(&id);
            }
        }
        if let Ok(pods) = runtime.list_sandboxes() {
            for pod in pods {
                let _ = runtime.remove_sandbox(&pod);
            }
        }
        let _ = runtime.remove_cgroup_parent();
        // Last resort so a failed test never leaves mounts behind.
        if let Ok(mounts) = agent::sys::mounts_under(Path::new("/proc"), self.dir.path()) {
            for m in mounts.iter().rev() {
                let _ = agent::sys::unmount_detach(m);
            }
        }
    }
}

pub fn exit_code(state: &ContainerState) -> Option<i32> {
    match state {
        ContainerState::Exited { exit_code, .. } => *exit_code,
        _ => None,
    }
}
