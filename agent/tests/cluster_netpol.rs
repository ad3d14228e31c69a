//! NetworkPolicy with real pods and real iptables: a two-node cluster on this machine (the
//! server in a hub namespace on a test LAN, two real agents each in its own network
//! namespace, as in cluster_net.rs) runs nine pods in three namespaces, and the test connects
//! from inside pods' own network namespaces (their real eth0, bridge, routes and the nodes'
//! iptables) while policies are added one by one:
//!
//! - default-deny ingress in a namespace, on the same node and across nodes; other
//!   namespaces and egress unaffected; the pod's own node still reaches it, another node
//!   does not;
//! - allow from a podSelector on a named port (each pod's own number for the name);
//! - allow from a namespaceSelector and podSelector together (AND), then a namespaceSelector
//!   alone with a port range (endPort);
//! - an ipBlock of the cluster range except one node's podCIDR;
//! - default-deny egress in a namespace (filtered on the source's node, also across nodes),
//!   then an egress allow to one namespace's pods on one port;
//! - a connection established before the deny keeps working throughout; new ones do not;
//! - policies deleted: everything reachable again and only the empty top chain left.
//!
//! A second test writes the rules of many policies into a fresh namespace and reads them back:
//! the kernel prints them exactly as the enforcer writes them, so a full sync (an agent's
//! first, or a repair) rewrites nothing that did not change. Needs root, `ip`, `iptables`
//! and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;
#[path = "netns_util/mod.rs"]
mod netns_util;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::Pod;
use common::{agent_bin, skiff_bin, wait_for, TestAgent, TestServer};
use netns_util::{Lan, NetNs};
use serde_json::{json, Value};

const IMAGE: &str = "skiff.test/netpolbox:v1";
const CLUSTER_CIDR: &str = "10.246.0.0/16";
const LAN: &str = "172.31.216";
const NODES: [u8; 2] = [21, 22];
const ECHO_PORT: u16 = 7000;
/// How long a connection attempt may take before it counts as blocked (the rules drop).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(700);
/// How long a phase's expectations may take to hold after its policy is written.
const PHASE_TIMEOUT: Duration = Duration::from_secs(20);

struct Cluster {
    lan: Lan,
    /// (node name, node address), in the order of `NODES`.
    nodes: Vec<(String, String)>,
}

#[test]
fn network_policies_on_two_nodes_with_real_pods() {
    image_util::require_root_and_busybox();
    let tag = format!("snp{}", std::process::id() % 100_000);
    let mut lan = Lan::new(&tag, LAN);
    let mut nodes = Vec::new();
    for (i, n) in NODES.iter().enumerate() {
        let name = format!("{tag}-n{}", i + 1);
        let addr = lan.add_host(&name, *n);
        nodes.push((name, addr));
    }
    let _ = skiff_bin();
    let archive = tempfile::tempdir().expect("temp dir");
    let archive_path = archive.path().join("netpolbox.tar");
    image_util::write_oci_archive(&archive_path, &image_util::busybox_image("np"), IMAGE);
    let cluster = Arc::new(Cluster { lan, nodes });
    let inner = cluster.clone();
    cluster.lan.hub.run(move || scenario(&inner, &archive_path));
}

fn start_server(hub: &NetNs, addr: SocketAddr) -> TestServer {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(skiff_bin());
    cmd.arg("server")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", &addr.to_string()])
        .args(["--tls-san", &addr.ip().to_string()])
        .args(["--cluster-cidr", CLUSTER_CIDR])
        .arg("--disable-agent")
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null());
    hub.enter_on_exec(&mut cmd);
    let child = cmd.spawn().expect("start skiff server");
    let server = TestServer { child, dir, addr };
    wait_for("the server", Duration::from_secs(30), || {
        (server.kubeconfig().exists() && TcpStream::connect(addr).is_ok()).then_some(())
    });
    server.allow_host_pods();
    server
}

fn join_token(server: &TestServer, hub: &NetNs) -> String {
    let mut cmd = Command::new(skiff_bin());
    cmd.args(["token", "create", "--ttl", "1h", "--kubeconfig"])
        .arg(server.kubeconfig());
    hub.enter_on_exec(&mut cmd);
    let out = cmd.output().expect("skiff token create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

/// A real agent in `host` (network policies on, as by default; its DNS upstream is a dead
/// loopback port).
fn start_agent(a: &mut TestAgent, host: &NetNs, node_ip: &str, token: &str) {
    let mut cmd = Command::new(agent_bin());
    cmd.arg("--data-dir")
        .arg(a.data_dir())
        .arg("--run-dir")
        .arg(a.run.path())
        .args(["--node-name", &a.node_name])
        .args(["--cgroup-parent", &a.cgroup_parent])
        .args(["--heartbeat-seconds", "1"])
        .args(["--port", "0"])
        .args(["--node-ip", node_ip])
        .args(["--cluster-cidr", CLUSTER_CIDR])
        .args(["--dns-upstream", "127.0.0.1:9"])
        .arg("--disable-ingress")
        .args(["--server", &a.server, "--token", token])
        .env(
            "SKIFF_LOG",
            std::env::var("AGENT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null());
    host.enter_on_exec(&mut cmd);
    let child = cmd.process_group(0).spawn().expect("start skiff-agent");
    a.groups.push(child.id() as i32);
    a.child = Some(child);
}

/// A pod that serves HTTP on 8080 and 9090 and echoes on 7000; `http` names 8080 unless
/// `swapped` (then 9090, and `alt` the other).
fn pod(ns: &str, name: &str, node: &str, app: &str, swapped: bool) -> Value {
    let (http, alt) = if swapped { (9090, 8080) } else { (8080, 9090) };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", format!(
                    "mkdir -p /www && echo {name} > /www/index.html && httpd -p 9090 -h /www && \
                     (nc -ll -p {ECHO_PORT} -e cat &) && exec httpd -f -p 8080 -h /www")],
                "ports": [
                    {"name": "http", "containerPort": http},
                    {"name": "alt", "containerPort": alt},
                ],
            }],
        },
    })
}

fn namespace(name: &str, env: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"env": env}}})
}

fn policy(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn create(c: &Client, kind: api::Kind, ns: Option<&str>, body: &Value) {
    smol::block_on(c.create_value(kind, ns, body))
        .unwrap_or_else(|e| panic!("create {kind:?} {}: {e}", body["metadata"]["name"]));
}

/// A running pod: its address and the path of its network namespace.
#[derive(Clone, Debug)]
struct Live {
    ip: String,
    netns: PathBuf,
}

/// Connects from inside the network namespace at `netns` (a thread of its own enters it):
/// whether the connection was accepted within [`CONNECT_TIMEOUT`].
fn reachable(netns: &PathBuf, to: SocketAddr) -> bool {
    let file = std::fs::File::open(netns).expect("the pod's network namespace");
    std::thread::spawn(move || {
        // SAFETY: setns on a descriptor we own, for this thread only.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        TcpStream::connect_timeout(&to, CONNECT_TIMEOUT).is_ok()
    })
    .join()
    .expect("the connecting thread")
}

/// One expectation: `from` reaches (or not) `to`'s port.
struct Check {
    from: &'static str,
    to: &'static str,
    port: u16,
    want: bool,
}

fn can(from: &'static str, to: &'static str, port: u16) -> Check {
    Check {
        from,
        to,
        port,
        want: true,
    }
}

fn cannot(from: &'static str, to: &'static str, port: u16) -> Check {
    Check {
        from,
        to,
        port,
        want: false,
    }
}

/// Runs every check at once, each retried until it holds; panics (with the nodes' rules)
/// naming those that never did. Answers how long the slowest took.
fn expect(
    cl: &Cluster,
    pods: &BTreeMap<&'static str, Live>,
    phase: &str,
    checks: Vec<Check>,
) -> Duration {
    let started = Instant::now();
    let handles: Vec<_> = checks
        .into_iter()
        .map(|c| {
            let from = pods[c.from].netns.clone();
            let to: SocketAddr = format!("{}:{}", pods[c.to].ip, c.port).parse().unwrap();
            std::thread::spawn(move || {
                let deadline = Instant::now() + PHASE_TIMEOUT;
                loop {
                    let got = reachable(&from, to);
                    if got == c.want {
                        return Ok(started.elapsed());
                    }
                    if Instant::now() > deadline {
                        return Err(format!(
                            "{} -> {}:{} ({to}) {}",
                            c.from,
                            c.to,
                            c.port,
                            if c.want {
                                "blocked, want reachable"
                            } else {
                                "reachable, want blocked"
                            }
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for h in handles {
        match h.join().expect("a check thread") {
            Ok(took) => slowest = slowest.max(took),
            Err(e) => failures.push(e),
        }
    }
    if !failures.is_empty() {
        dump(cl);
        panic!("{phase}:\n  {}", failures.join("\n  "));
    }
    eprintln!("{phase}: every check held after {} ms", slowest.as_millis());
    slowest
}

fn iptables_save(ns: &NetNs) -> String {
    let mut cmd = Command::new("iptables-save");
    cmd.args(["-t", "filter"]);
    ns.enter_on_exec(&mut cmd);
    let out = cmd.output().expect("iptables-save");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn dump(cl: &Cluster) {
    for (name, _) in &cl.nodes {
        eprintln!("== {name}\n{}", iptables_save(cl.lan.host(name)));
    }
}

/// The policy chains of a node's filter table (the SKIFF-NETPOL and SKIFF-NP-* lines).
fn policy_lines(ns: &NetNs) -> Vec<String> {
    iptables_save(ns)
        .lines()
        .filter(|l| l.contains("SKIFF-NETPOL") || l.contains("SKIFF-NP-"))
        .map(|l| {
            // Declarations carry packet counters that change with traffic.
            if l.starts_with(':') {
                l.split_whitespace().next().unwrap_or("").to_string()
            } else {
                l.to_string()
            }
        })
        .collect()
}

/// An echo connection kept open across the policy changes.
struct Echo {
    stream: TcpStream,
}

impl Echo {
    fn open(from: &PathBuf, to: SocketAddr) -> Echo {
        let file = std::fs::File::open(from).expect("the pod's network namespace");
        let stream = std::thread::spawn(move || {
            // SAFETY: setns on a descriptor we own, for this thread only; the socket keeps
            // its namespace after the thread ends.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            TcpStream::connect_timeout(&to, Duration::from_secs(3))
                .expect("open the echo connection")
        })
        .join()
        .expect("the connecting thread");
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut e = Echo { stream };
        e.round_trip("hello");
        e
    }

    fn round_trip(&mut self, text: &str) {
        let line = format!("{text}\n");
        self.stream
            .write_all(line.as_bytes())
            .expect("write on the echo connection");
        let mut got = vec![0u8; line.len()];
        self.stream
            .read_exact(&mut got)
            .unwrap_or_else(|e| panic!("the established connection broke ({text}): {e}"));
        assert_eq!(String::from_utf8_lossy(&got), line);
    }
}

fn scenario(cl: &Cluster, archive: &std::path::Path) {
    let started = Instant::now();
    let hub = &cl.lan.hub;
    let addr: SocketAddr = format!("{}:6443", cl.lan.hub_addr()).parse().expect("addr");
    let server = start_server(hub, addr);
    let c = server.client();
    let token = join_token(&server, hub);
    let mut agents: Vec<TestAgent> = Vec::new();
    for (name, ip) in &cl.nodes {
        let mut a = TestAgent::new(&server);
        a.node_name = name.clone();
        a.cgroup_parent = format!("skiff-test-{name}");
        a.import(archive);
        start_agent(&mut a, cl.lan.host(name), ip, &token);
        agents.push(a);
    }
    let mut pod_cidrs = Vec::new();
    for (n, _) in &cl.nodes {
        let cidr = wait_for(&format!("{n} Ready"), Duration::from_secs(60), || {
            let node = smol::block_on(c.get_value(api::Kind::Node, None, n)).ok()?;
            let ready = node["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let cidr = node["spec"]["podCIDR"].as_str()?.to_string();
            ready.then_some(cidr)
        });
        pod_cidrs.push(cidr);
    }
    let (node_a, node_b) = (cl.nodes[0].0.as_str(), cl.nodes[1].0.as_str());

    create(&c, api::Kind::Namespace, None, &namespace("prod", "prod"));
    create(&c, api::Kind::Namespace, None, &namespace("dev", "dev"));
    // key, namespace, name, node, app, http port swapped
    let layout: [(&'static str, &str, &str, &str, &str, bool); 9] = [
        ("web-a", "prod", "web-a", node_a, "web", false),
        ("web-b", "prod", "web-b", node_b, "web", true),
        ("client-a", "prod", "client-a", node_a, "client", false),
        ("client-b", "prod", "client-b", node_b, "client", false),
        ("other-a", "prod", "other-a", node_a, "other", false),
        ("dev-client-a", "dev", "client-a", node_a, "client", false),
        ("dev-client-b", "dev", "client-b", node_b, "client", false),
        ("dev-other-b", "dev", "other-b", node_b, "other", false),
        ("sink-b", "default", "sink-b", node_b, "sink", false),
    ];
    for (_, ns, name, node, app, swapped) in &layout {
        create(
            &c,
            api::Kind::Pod,
            Some(ns),
            &pod(ns, name, node, app, *swapped),
        );
    }
    let runs: BTreeMap<&str, PathBuf> = cl
        .nodes
        .iter()
        .zip(&agents)
        .map(|((n, _), a)| (n.as_str(), a.run.path().to_path_buf()))
        .collect();
    let mut pods: BTreeMap<&'static str, Live> = layout
        .iter()
        .map(|(key, ns, name, node, _, _)| {
            let p: Pod = wait_for(
                &format!("{ns}/{name} running"),
                Duration::from_secs(60),
                || {
                    smol::block_on(c.get::<Pod>(ns, name)).ok().filter(|p| {
                        p.status.phase.as_deref() == Some("Running") && p.status.pod_ip.is_some()
                    })
                },
            );
            let netns = runs[node]
                .join("sandboxes")
                .join(&p.metadata.uid)
                .join("ns/net");
            (
                *key,
                Live {
                    ip: p.status.pod_ip.clone().unwrap(),
                    netns,
                },
            )
        })
        .collect();
    // The nodes themselves, as sources.
    for (key, (name, ip)) in ["node-a", "node-b"].into_iter().zip(&cl.nodes) {
        pods.insert(
            key,
            Live {
                ip: ip.clone(),
                netns: cl.lan.host(name).path(),
            },
        );
    }
    eprintln!(
        "cluster and 9 pods up in {} ms",
        started.elapsed().as_millis()
    );

    // No policy: pods reach each other, on one node and across; an echo connection opens.
    expect(
        cl,
        &pods,
        "no policy",
        vec![
            can("client-a", "web-b", 8080),
            can("dev-client-b", "web-a", 9090),
            can("other-a", "web-b", ECHO_PORT),
        ],
    );
    let echo_to: SocketAddr = format!("{}:{ECHO_PORT}", pods["web-b"].ip).parse().unwrap();
    let mut echo = Echo::open(&pods["other-a"].netns, echo_to);

    let np = |ns: &str, name: &str, spec: Value| {
        create(
            &c,
            api::Kind::NetworkPolicy,
            Some(ns),
            &policy(ns, name, spec),
        )
    };

    // 1. Default deny ingress in prod: nothing reaches prod's pods, from either node or
    // namespace; prod's pods still reach out (egress is not isolated).
    np(
        "prod",
        "default-deny-ingress",
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
    );
    let took = expect(
        cl,
        &pods,
        "default deny ingress",
        vec![
            cannot("client-a", "web-a", 8080),
            cannot("client-b", "web-a", 8080),
            cannot("dev-client-a", "web-b", 8080),
            cannot("other-a", "web-b", ECHO_PORT),
            can("client-a", "sink-b", 8080),
            can("client-a", "dev-client-b", 8080),
            // A pod's own node reaches it (probes); another node is a source like any other.
            can("node-a", "web-a", 8080),
            cannot("node-b", "web-a", 8080),
        ],
    );
    eprintln!(
        "policy to enforcement on both nodes: under {} ms",
        took.as_millis()
    );
    echo.round_trip("after the default deny");

    // 2. Allow from prod's clients to the web pods' port named http: 8080 on web-a, 9090 on
    // web-b.
    np(
        "prod",
        "web-from-clients",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                         "ports": [{"port": "http"}]}],
        }),
    );
    expect(
        cl,
        &pods,
        "allow from a podSelector on a named port",
        vec![
            can("client-b", "web-a", 8080),
            can("client-a", "web-b", 9090),
            can("client-a", "web-a", 8080),
            cannot("client-a", "web-a", 9090),
            cannot("client-b", "web-b", 8080),
            cannot("other-a", "web-a", 8080),
            cannot("dev-client-a", "web-a", 8080),
        ],
    );

    // 3. dev's clients (namespaceSelector AND podSelector), every port.
    np(
        "prod",
        "web-from-dev-clients",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "dev"}},
                                   "podSelector": {"matchLabels": {"app": "client"}}}]}],
        }),
    );
    expect(
        cl,
        &pods,
        "allow from a namespaceSelector and a podSelector together",
        vec![
            can("dev-client-b", "web-a", 9090),
            can("dev-client-a", "web-b", 8080),
            cannot("dev-other-b", "web-a", 8080),
        ],
    );

    // 4. All of dev (namespaceSelector alone), on ports 8000-8100.
    np(
        "prod",
        "web-from-dev",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "dev"}}}],
                         "ports": [{"port": 8000, "endPort": 8100}]}],
        }),
    );
    expect(
        cl,
        &pods,
        "allow from a namespaceSelector on a port range",
        vec![
            can("dev-other-b", "web-a", 8080),
            cannot("dev-other-b", "web-a", 9090),
        ],
    );

    // 5. other-a from the cluster range except node A's podCIDR: node B's pods only.
    np(
        "prod",
        "other-from-node-b",
        json!({
            "podSelector": {"matchLabels": {"app": "other"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": CLUSTER_CIDR, "except": [pod_cidrs[0]]}}]}],
        }),
    );
    expect(
        cl,
        &pods,
        "allow from an ipBlock with an except",
        vec![
            can("client-b", "other-a", 8080),
            can("dev-other-b", "other-a", 9090),
            cannot("client-a", "other-a", 8080),
            cannot("dev-client-a", "other-a", 8080),
        ],
    );

    // 6. Default deny egress in dev: dev's pods reach nothing, checked on their own node.
    np(
        "dev",
        "default-deny-egress",
        json!({"podSelector": {}, "policyTypes": ["Egress"]}),
    );
    expect(
        cl,
        &pods,
        "default deny egress",
        vec![
            cannot("dev-client-a", "sink-b", 8080),
            cannot("dev-client-b", "web-a", 8080),
            cannot("dev-client-b", "sink-b", 8080),
            can("client-a", "sink-b", 8080),
            can("client-a", "dev-client-b", 8080),
        ],
    );

    // 7. dev may reach prod's web pods on 8080 (the namespace by its name label).
    np(
        "dev",
        "egress-to-prod-web",
        json!({
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prod"}},
                                "podSelector": {"matchLabels": {"app": "web"}}}],
                        "ports": [{"protocol": "TCP", "port": 8080}]}],
        }),
    );
    expect(
        cl,
        &pods,
        "allow egress to a namespace's pods on a port",
        vec![
            can("dev-client-b", "web-a", 8080),
            can("dev-client-a", "web-b", 8080),
            cannot("dev-client-b", "web-a", 9090),
            cannot("dev-client-b", "sink-b", 8080),
            cannot("dev-other-b", "other-a", 9090),
        ],
    );
    echo.round_trip("after every policy");

    // Every policy deleted: everything reachable again, only the empty top chain left.
    for (ns, name) in [
        ("prod", "default-deny-ingress"),
        ("prod", "web-from-clients"),
        ("prod", "web-from-dev-clients"),
        ("prod", "web-from-dev"),
        ("prod", "other-from-node-b"),
        ("dev", "default-deny-egress"),
        ("dev", "egress-to-prod-web"),
    ] {
        smol::block_on(c.delete::<api::networking::NetworkPolicy>(ns, name, &Default::default()))
            .unwrap_or_else(|e| panic!("delete {ns}/{name}: {e}"));
    }
    expect(
        cl,
        &pods,
        "no policy again",
        vec![
            can("other-a", "web-b", ECHO_PORT),
            can("client-a", "web-a", 9090),
            can("dev-client-b", "sink-b", 8080),
            can("client-a", "other-a", 8080),
        ],
    );
    echo.round_trip("after the policies went");
    for (name, _) in &cl.nodes {
        wait_for(
            &format!("{name}'s policy chains removed"),
            Duration::from_secs(10),
            || {
                let lines = policy_lines(cl.lan.host(name));
                (lines == [":SKIFF-NETPOL", "-A SKIFF-FORWARD -j SKIFF-NETPOL"]).then_some(())
            },
        );
    }
    eprintln!(
        "the whole scenario took {} ms",
        started.elapsed().as_millis()
    );
    for a in &mut agents {
        a.clean_up();
    }
}

/// The rules of the documentation's policies and of every kind of peer and port, written into
/// a fresh namespace and read back: what iptables-save prints is what the enforcer wrote (so
/// its full syncs compare equal and rewrite nothing), and a change rewrites only its chains.
#[test]
fn rules_read_back_exactly_as_written() {
    image_util::require_root_and_busybox();
    use agent::netpol::rules::{build, owned_chain, Inputs, NamedPort, PodInfo};
    let ns = NetNs::new(&format!("snp-rb{}", std::process::id() % 100_000));
    let labels = |app: &str| BTreeMap::from([("app".to_string(), app.to_string())]);
    let mut pods = Vec::new();
    for i in 0..20u8 {
        pods.push(PodInfo {
            namespace: if i % 2 == 0 { "prod" } else { "dev" }.into(),
            name: format!("p{i}"),
            node: if i < 10 { "here" } else { "there" }.into(),
            ip: format!("10.246.{}.{}", i / 10, 10 + i).parse().unwrap(),
            labels: labels(["web", "client", "db"][usize::from(i % 3)]),
            named_ports: vec![NamedPort {
                name: "http".into(),
                protocol: "TCP".into(),
                port: 8000 + u16::from(i),
            }],
        });
    }
    // The longest name a pod may have: its rules' comments are cut to what iptables keeps.
    pods.push(PodInfo {
        namespace: "prod".into(),
        name: "n".repeat(253),
        node: "here".into(),
        ip: "10.246.0.99".parse().unwrap(),
        labels: labels("web"),
        named_ports: Vec::new(),
    });
    let namespaces = BTreeMap::from([
        (
            "prod".to_string(),
            BTreeMap::from([("env".to_string(), "prod".to_string())]),
        ),
        (
            "dev".to_string(),
            BTreeMap::from([("env".to_string(), "dev".to_string())]),
        ),
    ]);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../api/tests/manifests/networkpolicy.yaml"
    ))
    .expect("the documentation's policies");
    let mut policies: Vec<api::networking::NetworkPolicy> = api::codec::parse_manifests(&text)
        .expect("parse")
        .into_iter()
        .map(|mut d| {
            d["metadata"]["namespace"] = json!("prod");
            let mut p: api::networking::NetworkPolicy = api::codec::from_json(d).expect("decode");
            api::Resource::set_defaults(&mut p);
            p
        })
        .collect();
    let mut extra: api::networking::NetworkPolicy = api::codec::from_json(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "every-port", "namespace": "prod"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "dev"}}, "podSelector": {}},
                                  {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.246.0.0/16", "192.168.1.128/25"]}}],
                         "ports": [{"port": "http"}, {"protocol": "UDP", "port": 53}, {"protocol": "SCTP"},
                                   {"port": 30000, "endPort": 32767}, {"protocol": "UDP"}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}], "ports": [{"port": "http"}]},
                       {"ports": [{"port": 53, "protocol": "UDP"}]}]}
    }))
    .unwrap();
    api::Resource::set_defaults(&mut extra);
    policies.push(extra);
    let desired = build(&Inputs {
        node: "here",
        pods: &pods,
        namespaces: &namespaces,
        policies: &policies,
    });
    let rules: usize = desired.values().map(Vec::len).sum();
    eprintln!("{} chains, {rules} rules", desired.len());
    assert!(
        desired.len() > 10 && rules > 100,
        "{} chains, {rules} rules",
        desired.len()
    );
    let wanted = desired.clone();
    let (first, second, changed, kernel) = ns.run(move || {
        let mut a = agent::netpol::Applier::new(agent::proxy::Iptables::default());
        let first = a.sync(wanted.clone()).expect("the first sync");
        // A fresh applier reads the kernel back and finds nothing to write.
        let mut fresh = agent::netpol::Applier::new(agent::proxy::Iptables::default());
        let second = fresh.sync(wanted.clone()).expect("a full sync");
        // One pod fewer: only the chains that change are written.
        let mut fewer = wanted.clone();
        let top = fewer.get_mut("SKIFF-NETPOL").unwrap();
        top.retain(|r| !r.contains("10.246.0.10/32"));
        let changed = fresh.sync(fewer).expect("a change");
        let out = Command::new("iptables-save")
            .args(["-t", "filter"])
            .output()
            .unwrap();
        (
            first,
            second,
            changed,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    });
    assert!(
        first.full && first.chains_written == desired.len(),
        "{first:?}"
    );
    assert!(second.full, "{second:?}");
    assert_eq!(
        second.input_bytes, 0,
        "the kernel printed the rules otherwise: {second:?}\n{kernel}"
    );
    assert_eq!(changed.chains_written, 1, "{changed:?}");
    let saved = agent::proxy::SavedTable::parse(&kernel);
    assert_eq!(
        saved.chains.keys().filter(|c| owned_chain(c)).count(),
        desired.len()
    );
}
