//! A real `skiff server` process on 127.0.0.1 for integration tests.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use api::client::Client;
use api::kubeconfig::Kubeconfig;
use serde_json::Value;

pub mod etcd;

pub struct TestServer {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub extra_args: Vec<String>,
    /// A command the server runs under (e.g. `prlimit --nofile=...`), if any.
    pub wrapper: Vec<String>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn skiff_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_skiff"))
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> TestServer {
        Self::start_wrapped(&[], extra)
    }

    /// Starts the server as the last arguments of `wrapper` (a command such as `prlimit`).
    pub fn start_wrapped(wrapper: &[&str], extra: &[&str]) -> TestServer {
        Self::start_in(tempfile::tempdir().expect("temp dir"), wrapper, extra)
    }

    /// Starts the server on a data dir prepared beforehand (another server's PKI, say).
    pub fn start_in(dir: tempfile::TempDir, wrapper: &[&str], extra: &[&str]) -> TestServer {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("address");
        let extra_args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let wrapper: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        let child = spawn_server(dir.path(), addr, &extra_args, &wrapper);
        let s = TestServer {
            child,
            dir,
            addr,
            extra_args,
            wrapper,
        };
        s.wait_ready();
        s
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    pub fn client(&self) -> Client {
        let kc = Kubeconfig::load(&self.kubeconfig()).expect("kubeconfig");
        Client::from_kubeconfig(&kc).expect("client")
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.kubeconfig().exists() && TcpStream::connect(self.addr).is_ok() {
                let c = self.client();
                if smol::block_on(c.request("GET", "/readyz", None, "*/*"))
                    .is_ok_and(|r| r.status == 200)
                {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("skiff server did not become ready at {}", self.addr);
    }

    /// Stops the server with SIGKILL and starts it again on the same data dir and port.
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_server(self.dir.path(), self.addr, &self.extra_args, &self.wrapper);
        self.wait_ready();
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        self.child.wait().expect("wait")
    }

    /// One raw request: returns the status code and the body as JSON (Null when not JSON).
    pub fn http(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> (u16, Value) {
        let c = self.client();
        let r = smol::block_on(c.request(
            method,
            path,
            body.as_ref().map(|(ct, b)| (*ct, b.clone())),
            "application/json",
        ))
        .expect("request");
        let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        (r.status, v)
    }

    /// A Service `ns/name` without a selector whose port 443 (`https`) is `port` on
    /// 127.0.0.1 through its Endpoints: how tests put a server of their own (a webhook, an
    /// extension API server) behind a Service.
    pub fn expose_local(&self, ns: &str, name: &str, port: u16) {
        let (code, v) = self.json(
            "POST",
            &format!("/api/v1/namespaces/{ns}/services"),
            &serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
        );
        assert_eq!(code, 201, "{v}");
        let (code, v) = self.json(
            "POST",
            &format!("/api/v1/namespaces/{ns}/endpoints"),
            &serde_json::json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
                    "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                 "ports": [{"name": "https", "port": port}]}]}),
        );
        assert_eq!(code, 201, "{v}");
    }

    pub fn json(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        self.http(
            method,
            path,
            Some(("application/json", serde_json::to_vec(body).expect("json"))),
        )
    }
}

/// Starts `skiff server` (under `wrapper` if given); without its own agent unless `extra`
/// names the node (`--node-name`).
fn spawn_server(dir: &Path, addr: SocketAddr, extra: &[String], wrapper: &[String]) -> Child {
    let own_agent = extra.iter().any(|a| a == "--node-name");
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(skiff_bin());
            c
        }
        None => Command::new(skiff_bin()),
    };
    command
        .arg("server")
        .arg("--data-dir")
        .arg(dir)
        .arg("--listen")
        .arg(addr.to_string())
        .args((!own_agent).then_some("--disable-agent"))
        // A server's own agent never programs the host's iptables in tests.
        .args(own_agent.then_some("--disable-proxy"))
        .args(extra)
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("start skiff server")
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `kubectl` against the server; returns (success, stdout, stderr).
pub fn kubectl(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", server.data_dir())
        .output()
        .expect("kubectl is installed (the test command installs it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `skiff-agent` binary next to `skiff`; built if missing (`cargo test --workspace`
/// builds it anyway; building it each time would fight this test's own build over shared
/// dependencies' fingerprints).
pub fn agent_bin() -> PathBuf {
    static BUILD: Once = Once::new();
    let bin = skiff_bin().with_file_name("skiff-agent");
    BUILD.call_once(|| {
        if bin.exists() {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "skiff-agent", "--bin", "skiff-agent"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building skiff-agent failed");
    });
    bin
}

/// A child process killed when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Retries `f` until it answers `Some` or `secs` pass.
pub fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
