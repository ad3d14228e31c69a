//! Real `skiff server` and `skiff-agent` processes for the agent's integration tests.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use api::client::Client;
use api::kubeconfig::Kubeconfig;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_skiff-agent"))
}

/// The `skiff` binary next to `skiff-agent`; built if missing (`cargo test --workspace` and
/// the CI script build it anyway). Building it from here each time would make cargo rebuild
/// dependencies shared with this test, whose fingerprints differ between the two builds.
pub fn skiff_bin() -> PathBuf {
    static BUILD: Once = Once::new();
    let bin = agent_bin().with_file_name("skiff");
    BUILD.call_once(|| {
        if bin.exists() {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "skiff-control", "--bin", "skiff"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the skiff server failed");
    });
    bin
}

pub struct TestServer {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    /// A server with extra flags (`--node-monitor-grace-period 3s`, ...).
    pub fn start_with(extra: &[&str]) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("address");
        let child = Command::new(skiff_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--disable-agent")
            .args(extra)
            .env("SKIFF_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start skiff server");
        let s = TestServer { child, dir, addr };
        s.wait_ready();
        s
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    pub fn client(&self) -> Client {
        let kc = Kubeconfig::load(&self.kubeconfig()).expect("kubeconfig");
        Client::from_kubeconfig(&kc).expect("client")
    }

    /// The agent's tests run privileged, hostNetwork, hostPort and hostPath pods in
    /// `default`, which Pod Security admission holds to baseline: let the agent judge them
    /// (it refuses privileged itself). Call once the API answers.
    pub fn allow_host_pods(&self) {
        let label = serde_json::json!({"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "privileged"}}});
        let c = self.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done = smol::block_on(c.patch_value(
                api::Kind::Namespace,
                None,
                "default",
                "application/merge-patch+json",
                &label,
            ));
            match done {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => {
                    panic!("label the default namespace privileged: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.kubeconfig().exists() && TcpStream::connect(self.addr).is_ok() {
                let c = self.client();
                if smol::block_on(c.request("GET", "/readyz", None, "*/*"))
                    .is_ok_and(|r| r.status == 200)
                {
                    self.allow_host_pods();
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("skiff server did not become ready at {}", self.addr);
    }

    /// `skiff token create --ttl 1h`.
    pub fn join_token(&self) -> String {
        let out = Command::new(skiff_bin())
            .args(["token", "create", "--ttl", "1h", "--kubeconfig"])
            .arg(self.kubeconfig())
            .output()
            .expect("skiff token create");
        assert!(
            out.status.success(),
            "token create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it answers `Some`, or panics with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `skiff-agent` process with its own data dir, run dir and cgroup parent.
pub struct TestAgent {
    pub child: Option<Child>,
    pub data: tempfile::TempDir,
    pub run: tempfile::TempDir,
    pub node_name: String,
    pub cgroup_parent: String,
    pub server: String,
    /// Process groups of agents started (each agent leads its own), killed on clean-up so
    /// that no stray child of an agent outlives the test.
    pub groups: Vec<i32>,
}

impl TestAgent {
    pub fn new(server: &TestServer) -> TestAgent {
        let pid = std::process::id();
        TestAgent {
            child: None,
            data: tempfile::tempdir().expect("data dir"),
            run: tempfile::tempdir().expect("run dir"),
            node_name: format!("node-{pid}"),
            cgroup_parent: format!("skiff-test-{pid}"),
            server: server.url(),
            groups: Vec::new(),
        }
    }

    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// `skiff-agent image import <archive>` into this agent's store.
    pub fn import(&self, archive: &Path) {
        let out = Command::new(agent_bin())
            .arg("image")
            .arg("import")
            .arg(archive)
            .arg("--data-dir")
            .arg(self.data_dir())
            .output()
            .expect("skiff-agent image import");
        assert!(
            out.status.success(),
            "import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn command(&self, token: Option<&str>) -> Command {
        let mut cmd = Command::new(agent_bin());
        cmd.arg("--data-dir")
            .arg(self.data_dir())
            .arg("--run-dir")
            .arg(self.run.path())
            .args(["--node-name", &self.node_name])
            .args(["--cgroup-parent", &self.cgroup_parent])
            .args(["--heartbeat-seconds", "1"])
            .args(["--port", "0"])
            // Services are tested inside network namespaces, never in the host's iptables.
            .arg("--disable-proxy")
            .args(["--node-label", "zone=test", "--node-ip", "127.0.0.1"])
            .env(
                "SKIFF_LOG",
                std::env::var("AGENT_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null());
        if let Some(t) = token {
            cmd.args(["--server", &self.server, "--token", t]);
        }
        cmd
    }

    pub fn start(&mut self, token: Option<&str>) {
        use std::os::unix::process::CommandExt;
        let child = self
            .command(token)
            .process_group(0)
            .spawn()
            .expect("start skiff-agent");
        self.groups.push(child.id() as i32);
        self.child = Some(child);
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills the agent and removes every container, sandbox, mount and cgroup it left.
    pub fn clean_up(&mut self) {
        self.kill9();
        for pgid in self.groups.drain(..) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let mut cfg =
            agent::runtime::RuntimeConfig::new(self.run.path(), self.cgroup_parent.clone());
        cfg.allow_privileged = true;
        if let Ok(rt) = agent::runtime::Runtime::new(cfg) {
            for uid in rt.list_sandboxes().unwrap_or_default() {
                let _ = rt.remove_sandbox(&uid);
            }
            for id in rt.list().unwrap_or_default() {
                let _ = rt.remove(&id);
            }
            let _ = rt.remove_cgroup_parent();
        }
        if let Ok(rd) = std::fs::read_dir(self.data_dir().join("pods")) {
            for e in rd.flatten() {
                agent::pods::worker::cleanup_pod_dir(&e.path());
            }
        }
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.clean_up();
    }
}

/// The pod `name` in `default`, if it exists.
pub fn get_pod(c: &Client, name: &str) -> Option<api::core::Pod> {
    smol::block_on(c.get::<api::core::Pod>("default", name)).ok()
}

/// A pod's phase ("" before the agent reports one).
pub fn phase(p: &api::core::Pod) -> &str {
    p.status.phase.as_deref().unwrap_or("")
}

/// Waits until pod `name` is in phase `want`; answers it.
pub fn wait_phase(c: &Client, name: &str, want: &str, timeout: Duration) -> api::core::Pod {
    wait_for(&format!("pod {name} to be {want}"), timeout, || {
        get_pod(c, name).filter(|p| phase(p) == want)
    })
}

/// The reason the first app container is waiting, if it is.
pub fn waiting_reason(p: &api::core::Pod) -> Option<String> {
    p.status
        .container_statuses
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

/// The image tests import from `image_util::busybox_image`.
pub const TEST_IMAGE: &str = "skiff.test/testbox:v1";

/// A pod bound to `node` running `args` in [`TEST_IMAGE`], with a 2 s grace period.
pub fn pod(name: &str, node: &str, args: &[&str], restart: Option<&str>) -> api::core::Pod {
    use api::core::{Container, Pod, PodSpec};
    Pod {
        metadata: api::meta::ObjectMeta {
            name: name.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.into()),
            restart_policy: restart.map(str::to_string),
            termination_grace_period_seconds: Some(2),
            containers: vec![Container {
                name: "main".into(),
                image: Some(TEST_IMAGE.into()),
                args: args.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Removes what a stopped `skiff server` with its own node (or an agent) left behind: its
/// sandboxes, containers and cgroup parent, and its pods' directories (volume mounts).
pub fn remove_node_leftovers(run_dir: &Path, cgroup_parent: &str, data_dir: &Path) {
    let cfg = agent::runtime::RuntimeConfig::new(run_dir, cgroup_parent.to_string());
    if let Ok(rt) = agent::runtime::Runtime::new(cfg) {
        for uid in rt.list_sandboxes().unwrap_or_default() {
            let _ = rt.remove_sandbox(&uid);
        }
        for id in rt.list().unwrap_or_default() {
            let _ = rt.remove(&id);
        }
        let _ = rt.remove_cgroup_parent();
    }
    if let Ok(rd) = std::fs::read_dir(data_dir.join("agent/pods")) {
        for e in rd.flatten() {
            agent::pods::worker::cleanup_pod_dir(&e.path());
        }
    }
}

/// Runs the real kubectl with `kubeconfig`, feeding it `stdin` if given.
pub fn run_kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("stdin");
        w.write_all(input).expect("write stdin");
    }
    child.wait_with_output().expect("kubectl output")
}

/// Imports an image archive into the agent data dir `agent_dir` (as `skiff-agent image
/// import` does on an air-gapped board).
pub fn import_image(archive: &Path, agent_dir: &Path) {
    let out = std::process::Command::new(agent_bin())
        .args(["image", "import"])
        .arg(archive)
        .arg("--data-dir")
        .arg(agent_dir)
        .output()
        .expect("import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits for a `skiff server`'s admin kubeconfig and then for its own Node `node`; answers
/// an admin client.
pub fn wait_for_own_node(kubeconfig: &Path, node: &str) -> Client {
    let client = wait_for("the admin kubeconfig", Duration::from_secs(20), || {
        let kc = Kubeconfig::load(kubeconfig).ok()?;
        Client::from_kubeconfig(&kc).ok()
    });
    wait_for("the server's own Node", Duration::from_secs(30), || {
        smol::block_on(client.get::<api::core::Node>("", node)).ok()
    });
    client
}

/// `skiff server` with its own node `node` (on 127.0.0.1, its agent's endpoint on a free port,
/// no Service proxy), state in `data_dir` and container state in `run_dir`; callers add flags
/// and spawn it.
pub fn node_server_command(
    data_dir: &Path,
    run_dir: &Path,
    port: u16,
    node: &str,
    cgroup_parent: &str,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(skiff_bin());
    cmd.arg("server")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--node-name", node, "--node-ip", "127.0.0.1"])
        .args(["--cgroup-parent", cgroup_parent, "--agent-port", "0"])
        .arg("--disable-proxy")
        .arg("--agent-run-dir")
        .arg(run_dir)
        .env("SKIFF_LOG", "warn")
        .stdin(std::process::Stdio::null());
    cmd
}

/// A `skiff server` process with its own node (see [`node_server_command`]); dropping it
/// stops the server and removes what its node left behind.
pub struct NodeServer {
    pub child: std::process::Child,
    pub dir: tempfile::TempDir,
    pub run: tempfile::TempDir,
    pub cgroup_parent: String,
}

impl NodeServer {
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }
}

/// A [`NodeServer`] for node `node` (its containers under `cgroup_parent`, `extra` flags),
/// with the OCI archive that `write_archive` writes imported into its agent first; returned
/// with a client once the node is registered.
pub fn start_node_server_with_image(
    node: &str,
    cgroup_parent: &str,
    extra: &[&str],
    write_archive: impl FnOnce(&Path),
) -> (NodeServer, Client) {
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    write_archive(&archive);
    import_image(&archive, &dir.path().join("agent"));
    let child = node_server_command(dir.path(), run.path(), free_port(), node, cgroup_parent)
        .args(extra)
        .spawn()
        .expect("start skiff server");
    let server = NodeServer {
        child,
        dir,
        run,
        cgroup_parent: cgroup_parent.into(),
    };
    let client = wait_for_own_node(&server.kubeconfig(), node);
    (server, client)
}

impl Drop for NodeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_node_leftovers(self.run.path(), &self.cgroup_parent, self.dir.path());
    }
}
