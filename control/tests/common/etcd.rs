//! A local etcd cluster (Debian's etcd-server, installed by `scripts/setup.sh --python`) on
//! loopback ports, for the tests of the etcd datastore and of several servers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// One member of a local etcd cluster, killed on drop.
pub struct Member {
    pub client_port: u16,
    child: Option<Child>,
}

pub struct EtcdCluster {
    pub members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"") || body.contains("\"health\": \"true\"")
}

impl EtcdCluster {
    /// A healthy cluster of `size` members. Ports are picked free and bound by etcd a moment
    /// later, so a test beside it may take one in between: a cluster that does not come up
    /// (a member exited, or no health within 30 s) is started again on other ports.
    pub fn start(size: usize) -> EtcdCluster {
        for _ in 0..3 {
            if let Some(cluster) = Self::try_start(size) {
                return cluster;
            }
            eprintln!("etcd cluster did not come up; again on other ports");
        }
        panic!("etcd cluster did not become healthy in three tries");
    }

    fn try_start(size: usize) -> Option<EtcdCluster> {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let child = Command::new("etcd")
                    .args(["--name", &format!("m{i}")])
                    .arg("--data-dir")
                    .arg(dir.path().join(format!("m{i}")))
                    .args([
                        "--listen-client-urls",
                        &format!("http://127.0.0.1:{client}"),
                    ])
                    .args([
                        "--advertise-client-urls",
                        &format!("http://127.0.0.1:{client}"),
                    ])
                    .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
                    .args([
                        "--initial-advertise-peer-urls",
                        &format!("http://127.0.0.1:{peer}"),
                    ])
                    .args(["--initial-cluster", &initial])
                    .args(["--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", "skiff-test"])
                    .args(["--log-level", "error"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start etcd (apt install etcd-server; scripts/setup.sh does)");
                Member {
                    client_port: *client,
                    child: Some(child),
                }
            })
            .collect::<Vec<_>>();
        let mut cluster = EtcdCluster { members, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.members.iter().all(|m| healthy(m.client_port)) {
            let exited = cluster.members.iter_mut().any(|m| {
                m.child
                    .as_mut()
                    .is_some_and(|c| c.try_wait().ok().flatten().is_some())
            });
            if exited || Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(cluster)
    }

    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Checks that a Secret created through `a` opens through `b`: the two servers share one
/// datastore and one `secrets.key`.
pub fn secret_sealed_by_one_opens_on_the_other(a: &super::TestServer, b: &super::TestServer) {
    let (code, s) = a.json(
        "POST",
        "/api/v1/namespaces/default/secrets",
        &serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "pw"}, "data": {"p": "aHVudGVyMg=="}}),
    );
    assert_eq!(code, 201, "{s}");
    let (code, s) = b.http("GET", "/api/v1/namespaces/default/secrets/pw", None);
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["data"]["p"], "aHVudGVyMg==");
}
