//! A `skiff server` on a data dir of the test's choosing (upgrade, backup and install tests).
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api::client::Client;
use api::kubeconfig::Kubeconfig;

pub fn skiff_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_skiff"))
}

pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// A server process; killed on drop.
pub struct Server {
    pub child: Child,
    pub data_dir: PathBuf,
    pub addr: SocketAddr,
}

impl Server {
    /// `skiff server --disable-agent` on `data_dir`, waited for until /readyz answers.
    pub fn start(data_dir: &Path) -> Server {
        Self::start_cmd(data_dir, free_addr(), |_| {})
    }

    pub fn start_cmd(data_dir: &Path, addr: SocketAddr, f: impl FnOnce(&mut Command)) -> Server {
        let mut cmd = Command::new(skiff_bin());
        cmd.arg("server")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--disable-agent")
            .env("SKIFF_LOG", "warn")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null());
        f(&mut cmd);
        let s = Server {
            child: cmd.spawn().expect("start skiff server"),
            data_dir: data_dir.to_path_buf(),
            addr,
        };
        s.wait_ready();
        s
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
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

    /// SIGTERM, as systemd stops it; waits for the exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        self.child.wait().expect("wait")
    }

    /// Runs the `skiff` CLI against this server.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(skiff_bin())
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .output()
            .expect("run skiff")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `skiff apply -f -` with `manifest`; panics on failure.
pub fn apply(server: &Server, manifest: &str) {
    use std::io::Write;
    let mut child = Command::new(skiff_bin())
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("skiff apply");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifest.as_bytes())
        .expect("write manifest");
    let out = child.wait_with_output().expect("skiff apply");
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kind/namespace/name` -> (uid, resourceVersion) of the objects `skiff get -o json` shows.
pub fn uids(server: &Server, kinds: &[&str]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for kind in kinds {
        let o = server.cli(&["get", kind, "-A", "-o", "json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        for item in v["items"].as_array().expect("items") {
            let m = &item["metadata"];
            let ns = m["namespace"].as_str().unwrap_or("");
            out.push((
                format!("{kind}/{ns}/{}", m["name"].as_str().unwrap_or("")),
                m["uid"].as_str().unwrap_or("").to_string(),
                m["resourceVersion"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    out.sort();
    out
}

/// A few objects of several kinds (what the upgrade fixtures and the backup test hold).
pub const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
  labels: {app: web}
data:
  greeting: hello
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: shop
stringData:
  password: s3cret
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: busybox
        command: ["httpd", "-f"]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  selector: {app: web}
  ports:
  - port: 80
"#;

/// The kinds of [`MANIFEST`] (and what its controllers make), as `skiff get` names them.
pub const KINDS: &[&str] = &[
    "namespaces",
    "configmaps",
    "secrets",
    "deployments",
    "replicasets",
    "pods",
    "services",
];
