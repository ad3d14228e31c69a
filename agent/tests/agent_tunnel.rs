//! An agent behind NAT (issue 34 part 4, docs/design/tunnel.md): the server in a site LAN's
//! hub namespace (172.31.216.1), a router namespace on the LAN that masquerades a private
//! edge network (10.77.216.0/24), and a real agent with `--tunnel` in the edge namespace,
//! whose only way out is through the router. The server has no route to the agent's
//! InternalIP (checked: a direct connection to the agent's port fails), yet the real
//! kubectl's `logs`, `exec`, `attach`, `port-forward` and `top` reach the agent's pod
//! through the tunnel the agent opened, and again after the server restarted (the agent
//! dials anew). With two servers (sharing an etcd), the agent keeps a tunnel to each, and
//! either server's kubectl reaches the pod.
//!
//! All traffic stays inside namespaces the test creates: none has a default route but the
//! edge (towards the router), and the router forwards only between the two test networks.
//! Needs root, `ip`, `iptables` and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;
#[path = "netns_util/mod.rs"]
mod netns_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{agent_bin, run_kubectl, skiff_bin, wait_for, TestAgent, TestServer, TEST_IMAGE};
use netns_util::{Lan, NetNs};

/// The tests run one at a time (each builds its own site, but the agents share the host's
/// cgroup tree and its /proc view of pods).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Site {
    lan: Lan,
    edge: NetNs,
    /// The edge network's first three octets (the router is `.1`, the agent `.2`).
    edge_net: &'static str,
}

impl Site {
    fn agent_ip(&self) -> String {
        format!("{}.2", self.edge_net)
    }
}

fn run_in(ns: &NetNs, args: &[&str]) {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]);
    ns.enter_on_exec(&mut cmd);
    let out = cmd.output().expect("run a command in a namespace");
    assert!(
        out.status.success(),
        "{args:?} in {}: {}",
        ns.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A site LAN `lan_net`.0/24 whose hub hosts the servers, and a router on it that
/// masquerades the edge network `edge_net`.0/24, where the agent runs.
fn build_site(tag: &str, lan_net: &str, edge_net: &'static str) -> Site {
    let mut lan = Lan::new(tag, lan_net);
    let router = format!("{tag}-rtr");
    lan.add_host(&router, 3);
    // The edge network behind the router: the router's eth1 and the edge's eth0.
    let edge = NetNs::new(&format!("{tag}-edge"));
    let r = lan.host(&router);
    r.ip(&[
        "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", &edge.name,
    ]);
    r.ip(&["addr", "add", &format!("{edge_net}.1/24"), "dev", "eth1"]);
    r.ip(&["link", "set", "eth1", "up"]);
    edge.ip(&["addr", "add", &format!("{edge_net}.2/24"), "dev", "eth0"]);
    edge.ip(&["link", "set", "eth0", "up"]);
    edge.ip(&["route", "add", "default", "via", &format!("{edge_net}.1")]);
    // The router: forwards, and masquerades the edge network's connections to the LAN.
    run_in(r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    run_in(
        r,
        &[
            "iptables",
            "-w",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            &format!("{edge_net}.0/24"),
            "-o",
            "eth0",
            "-j",
            "MASQUERADE",
        ],
    );
    Site {
        lan,
        edge,
        edge_net,
    }
}

/// The test image as an OCI archive in a temp dir (imported into the agent's store).
fn image_archive() -> (tempfile::TempDir, std::path::PathBuf) {
    let _ = skiff_bin();
    let _ = agent_bin();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("box.tar");
    image_util::write_oci_archive(&path, &image_util::busybox_image("edge"), TEST_IMAGE);
    (dir, path)
}

/// Runs `scenario` on a thread in the hub of a new site (`tag` names its namespaces), with
/// the test image's archive; one test at a time.
fn on_a_site(
    tag: &str,
    lan_net: &str,
    edge_net: &'static str,
    scenario: fn(&Site, &std::path::Path),
) {
    image_util::require_root_and_busybox();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tag = format!("{tag}{}", std::process::id() % 100_000);
    let site = Arc::new(build_site(&tag, lan_net, edge_net));
    let (_dir, archive) = image_archive();
    let inner = site.clone();
    site.lan.hub.run(move || scenario(&inner, &archive));
}

#[test]
fn kubectl_reaches_an_agent_behind_nat_through_its_tunnel() {
    on_a_site("skt", "172.31.216", "10.77.216", scenario);
}

#[test]
fn either_of_two_servers_reaches_the_agent_through_its_own_tunnel() {
    on_a_site("sku", "172.31.217", "10.77.217", two_servers);
}

fn spawn_server(
    hub: &NetNs,
    addr: SocketAddr,
    dir: &std::path::Path,
    extra: &[&str],
) -> std::process::Child {
    let mut cmd = Command::new(skiff_bin());
    cmd.arg("server")
        .arg("--data-dir")
        .arg(dir)
        .args(["--listen", &addr.to_string()])
        .args(["--tls-san", &addr.ip().to_string()])
        .arg("--disable-agent")
        .args(extra)
        .env("SKIFF_LOG", "info")
        .stdin(Stdio::null());
    hub.enter_on_exec(&mut cmd);
    cmd.spawn().expect("start skiff server")
}

fn wait_up(server: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(server.kubeconfig().exists() && TcpStream::connect(server.addr).is_ok()) {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_server(hub: &NetNs, addr: SocketAddr, extra: &[&str]) -> TestServer {
    let dir = tempfile::tempdir().expect("temp dir");
    let child = spawn_server(hub, addr, dir.path(), extra);
    let server = TestServer { child, dir, addr };
    wait_up(&server);
    server.allow_host_pods();
    server
}

fn start_agent(a: &mut TestAgent, site: &Site, token: &str) {
    let mut cmd = Command::new(agent_bin());
    cmd.arg("--data-dir")
        .arg(a.data_dir())
        .arg("--run-dir")
        .arg(a.run.path())
        .args(["--node-name", &a.node_name])
        .args(["--cgroup-parent", &a.cgroup_parent])
        .args(["--heartbeat-seconds", "1"])
        .args(["--port", "0"])
        .args(["--node-ip", &site.agent_ip()])
        .args(["--dns-upstream", "127.0.0.1:9"])
        .arg("--disable-proxy")
        .arg("--tunnel")
        .args(["--server", &a.server, "--token", token])
        .env(
            "SKIFF_LOG",
            std::env::var("AGENT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null());
    site.edge.enter_on_exec(&mut cmd);
    let child = cmd.process_group(0).spawn().expect("start skiff-agent");
    a.groups.push(child.id() as i32);
    a.child = Some(child);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits (as `what`) for `kubectl logs edge-app` through `server` to start with the pod's
/// first line.
fn edge_app_logs(server: &TestServer, what: &str) {
    let logs = wait_for(what, Duration::from_secs(20), || {
        let out = run_kubectl(&server.kubeconfig(), &["logs", "edge-app"], None);
        let t = text(&out.stdout);
        (out.status.success() && t.contains("hello-from-edge")).then_some(t)
    });
    assert!(logs.starts_with("hello-from-edge"), "{logs}");
}

fn kubectl_ok(server: &TestServer, args: &[&str]) -> String {
    let out = run_kubectl(&server.kubeconfig(), args, None);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Starts `agent` in the edge namespace with `--tunnel` (its `server` list as set), waits
/// for its node Ready, checks that the server side cannot dial it, and runs the test pod
/// `edge-app` on it (a line for logs, httpd for port-forward, ticks for attach).
fn edge_agent(
    site: &Site,
    agent: &mut TestAgent,
    archive: &std::path::Path,
    token: &str,
    c: &api::client::Client,
) {
    agent.node_name = site.edge.name.clone();
    agent.cgroup_parent = format!("skiff-test-{}", site.edge.name);
    agent.import(archive);
    start_agent(agent, site, token);
    let node = agent.node_name.clone();
    let port = wait_for("the edge node Ready", Duration::from_secs(60), || {
        let n = smol::block_on(c.get_value(api::Kind::Node, None, &node)).ok()?;
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let port = n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64()?;
        ready.then_some(port)
    });
    // The server cannot dial the agent: no route to its InternalIP.
    let direct: SocketAddr = format!("{}:{port}", site.agent_ip()).parse().expect("addr");
    assert!(
        TcpStream::connect_timeout(&direct, Duration::from_secs(2)).is_err(),
        "the agent's port is not reachable from the server's namespace"
    );
    let mut pod = common::pod(
        "edge-app",
        &node,
        &[
            "sh",
            "-c",
            "echo hello-from-edge; httpd -p 8080 -h /; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done",
        ],
        None,
    );
    pod.spec.termination_grace_period_seconds = Some(1);
    smol::block_on(c.create(&pod)).expect("create the pod");
    wait_for("the edge pod Running", Duration::from_secs(60), || {
        common::get_pod(c, "edge-app").filter(|p| common::phase(p) == "Running")
    });
}

/// Two servers on one etcd in the hub (B joined A); the agent lists both and keeps a
/// tunnel to each: logs and exec through either server reach its pod, also through B
/// once A is gone.
fn two_servers(site: &Site, archive: &std::path::Path) {
    let hub = &site.lan.hub;
    let etcd = Etcd::start();
    let datastore = ["--datastore-endpoint", &etcd.endpoint];
    let a_addr: SocketAddr = format!("{}:6443", site.lan.hub_addr())
        .parse()
        .expect("addr");
    let b_addr: SocketAddr = format!("{}:6444", site.lan.hub_addr())
        .parse()
        .expect("addr");
    let mut a = start_server(hub, a_addr, &datastore);
    let out = Command::new(skiff_bin())
        .args(["token", "create", "--server", "--kubeconfig"])
        .arg(a.kubeconfig())
        .output()
        .expect("skiff token create --server");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let server_token = text(&out.stdout).trim().to_string();
    let join = [
        "--datastore-endpoint",
        &etcd.endpoint,
        "--join",
        &format!("https://{a_addr}"),
        "--token",
        &server_token,
    ];
    let b = start_server(hub, b_addr, &join);
    let c = a.client();
    let token = a.join_token();
    let mut agent = TestAgent::new(&a);
    agent.server = format!("https://{a_addr},https://{b_addr}");
    edge_agent(site, &mut agent, archive, &token, &c);

    for (name, server) in [("A", &a), ("B", &b)] {
        edge_app_logs(server, &format!("kubectl logs through server {name}"));
        let out = kubectl_ok(
            server,
            &[
                "exec",
                "edge-app",
                "--",
                "sh",
                "-c",
                &format!("echo via-{name}"),
            ],
        );
        assert_eq!(out.trim(), format!("via-{name}"));
    }
    // A goes away: B still reaches the agent.
    let _ = a.child.kill();
    let _ = a.child.wait();
    let out = kubectl_ok(&b, &["exec", "edge-app", "--", "sh", "-c", "echo still"]);
    assert_eq!(out.trim(), "still");

    drop(b);
    drop(a);
    agent.clean_up();
}

/// A one-member etcd on the namespace's loopback, killed on drop.
struct Etcd {
    child: std::process::Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    fn start() -> Etcd {
        let dir = tempfile::tempdir().expect("temp dir");
        let (client, peer) = (common::free_port(), common::free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "m0"])
            .arg("--data-dir")
            .arg(dir.path().join("m0"))
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("m0={peer_url}")])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd (apt install etcd-server; scripts/setup.sh does)");
        let etcd = Etcd {
            child,
            endpoint,
            _dir: dir,
        };
        wait_for("etcd up", Duration::from_secs(30), || {
            TcpStream::connect(("127.0.0.1", client)).ok()
        });
        etcd
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scenario(site: &Site, archive: &std::path::Path) {
    let hub = &site.lan.hub;
    let addr: SocketAddr = format!("{}:6443", site.lan.hub_addr())
        .parse()
        .expect("addr");
    let server = start_server(hub, addr, &[]);
    let c = server.client();
    let token = server.join_token();
    let mut agent = TestAgent::new(&server);
    edge_agent(site, &mut agent, archive, &token, &c);

    // logs and exec, through the tunnel.
    edge_app_logs(&server, "kubectl logs through the tunnel");
    let started = Instant::now();
    let out = kubectl_ok(
        &server,
        &["exec", "edge-app", "--", "sh", "-c", "echo exec-$((6*7))"],
    );
    assert_eq!(out.trim(), "exec-42");
    eprintln!("kubectl exec through the tunnel: {:?}", started.elapsed());

    // attach: the main process's output.
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["attach", "edge-app"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&seen).matches("tick").count() >= 3 {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    let seen = seen.expect("attach output in time");
    assert!(text(&seen).matches("tick").count() >= 3, "{}", text(&seen));

    // port-forward: an HTTP answer from the pod's httpd, twice.
    let local = common::free_port();
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["port-forward", "pod/edge-app", &format!("{local}:8080")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let listening = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        TcpStream::connect(("127.0.0.1", local)).is_ok()
    });
    let answers: Vec<String> = (0..2)
        .filter(|_| listening)
        .map(|_| {
            let mut conn = TcpStream::connect(("127.0.0.1", local)).expect("connect");
            conn.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            conn.write_all(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
                .expect("request");
            let mut answer = Vec::new();
            let _ = conn.read_to_end(&mut answer);
            text(&answer)
        })
        .collect();
    let _ = child.kill();
    let out = child.wait_with_output().expect("port-forward output");
    assert!(listening, "port-forward: {}", text(&out.stderr));
    assert_eq!(answers.len(), 2);
    for a in &answers {
        assert!(a.starts_with("HTTP/1."), "an HTTP answer: {a:?}");
    }

    // top: the resource metrics, read from the agent's summary through the tunnel.
    let top = wait_for(
        "kubectl top through the tunnel",
        Duration::from_secs(60),
        || {
            let out = run_kubectl(&server.kubeconfig(), &["top", "pod", "edge-app"], None);
            out.status.success().then(|| text(&out.stdout))
        },
    );
    assert!(top.contains("edge-app"), "{top}");

    // The server restarts (an upgrade, say): the agent dials its tunnel again.
    let mut server = server;
    let _ = server.child.kill();
    let _ = server.child.wait();
    server.child = spawn_server(hub, addr, server.dir.path(), &[]);
    wait_up(&server);
    let out = wait_for(
        "exec after the server came back",
        Duration::from_secs(90),
        || {
            let out = run_kubectl(
                &server.kubeconfig(),
                &["exec", "edge-app", "--", "sh", "-c", "echo again"],
                None,
            );
            out.status.success().then(|| text(&out.stdout))
        },
    );
    assert_eq!(out.trim(), "again");

    drop(server);
    agent.clean_up();
}
