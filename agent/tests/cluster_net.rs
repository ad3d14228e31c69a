//! A three-node cluster on this one machine: the server in a hub namespace (the LAN's
//! bridge, 172.31.214.0/24), three real agents each in its own network namespace with its
//! own data dir and cgroup parent, and a fourth "client" namespace on the LAN. Checks pod to
//! pod across nodes by IP; a Deployment of httpd pods behind a NodePort Service reached
//! through its ClusterIP from every node and from inside pods, through the NodePort from the
//! client namespace, and by its DNS name from inside pods; scaling the Deployment updates the
//! rules of every node within a bound (the figure is printed); an agent killed and its link
//! cut has its pods replaced on the other nodes while the Service keeps answering.
//!
//! All traffic stays inside namespaces the test creates: no namespace has a default route
//! (the nodes get a route for the service range only, towards the hub, which forwards
//! nothing), the agents' DNS upstream is a dead loopback port, and nothing runs in the
//! host's own network namespace. Needs root, `ip`, `iptables` and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;
#[path = "netns_util/mod.rs"]
mod netns_util;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::Pod;
use common::{agent_bin, get_pod, skiff_bin, wait_for, TestAgent, TestServer};
use netns_util::{Lan, NetNs};
use serde_json::{json, Value};

const IMAGE: &str = "skiff.test/clusterbox:v1";
const CLUSTER_CIDR: &str = "10.244.0.0/16";
const SERVICE_CIDR: &str = "10.43.0.0/16";
const LAN: &str = "172.31.214";
const WEB_PORT: u16 = 8080;
const SVC_PORT: u16 = 80;
const NODES: [u8; 3] = [11, 12, 13];
const CLIENT: u8 = 50;

struct Cluster {
    lan: Lan,
    /// (node name, node address), in the order of `NODES`.
    nodes: Vec<(String, String)>,
    client: String,
}

impl Cluster {
    fn ns(&self, name: &str) -> &NetNs {
        self.lan.host(name)
    }
}

#[test]
fn three_node_cluster_services_dns_scaling_and_node_loss() {
    image_util::require_root_and_busybox();
    let tag = format!("skc{}", std::process::id() % 100_000);
    let mut lan = Lan::new(&tag, LAN);
    let mut nodes = Vec::new();
    for (i, n) in NODES.iter().enumerate() {
        let name = format!("{tag}-n{}", i + 1);
        let addr = lan.add_host(&name, *n);
        nodes.push((name, addr));
    }
    let client = format!("{tag}-client");
    lan.add_host(&client, CLIENT);
    // Service addresses leave a node (before the proxy's DNAT) by a route towards the hub;
    // the hub forwards nothing, so an address no rule catches goes nowhere.
    for (name, _) in &nodes {
        lan.host(name).ip(&[
            "route",
            "add",
            SERVICE_CIDR,
            "via",
            &format!("{LAN}.1"),
            "dev",
            "eth0",
        ]);
    }
    // Build the server binary out here (cargo may need the host's network namespace).
    let _ = skiff_bin();
    let archive = tempfile::tempdir().expect("temp dir");
    let archive_path = archive.path().join("clusterbox.tar");
    image_util::write_oci_archive(&archive_path, &image_util::busybox_image("hello"), IMAGE);
    let cluster = Arc::new(Cluster { lan, nodes, client });
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
        .args(["--service-cidr", SERVICE_CIDR])
        .args(["--node-monitor-grace-period", "4s"])
        .args(["--default-toleration-seconds", "3"])
        .arg("--disable-agent")
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null());
    hub.enter_on_exec(&mut cmd);
    let child = cmd.spawn().expect("start skiff server");
    let server = TestServer { child, dir, addr };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if server.kubeconfig().exists() && TcpStream::connect(addr).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
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
        "token create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

/// A real agent in `host`, with the service proxy and the cluster DNS on (its DNS upstream
/// is a dead loopback port: no query leaves the node's namespace).
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

fn deployment(replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "volumes": [{"name": "www", "emptyDir": {}}],
                    "containers": [{
                        "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c",
                            format!("hostname > /www/index.html; exec httpd -f -p {WEB_PORT} -h /www")],
                        "ports": [{"containerPort": WEB_PORT}],
                        "volumeMounts": [{"name": "www", "mountPath": "/www"}],
                        "readinessProbe": {
                            "tcpSocket": {"port": WEB_PORT},
                            "periodSeconds": 1,
                        },
                    }],
                },
            },
        },
    })
}

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "web"},
            "ports": [{"port": SVC_PORT, "targetPort": WEB_PORT, "protocol": "TCP"}],
        },
    })
}

/// A pod on `node` that fetches each of `direct` (pod IPs, port 8080), then the ClusterIP
/// 30 times, then looks the Service up by name; its log records every answer.
fn client_pod(name: &str, node: &str, direct: &[String], cluster_ip: &str) -> Value {
    let get = "printf 'GET / HTTP/1.0\\r\\n\\r\\n'";
    let script = format!(
        "for ip in {ips}; do echo \"direct $ip $({get} | nc -w 3 $ip {WEB_PORT} | tail -n 1)\"; done; \
         for i in $(seq 1 30); do echo \"svc $({get} | nc -w 3 {cluster_ip} {SVC_PORT} | tail -n 1)\"; done; \
         nslookup web.default.svc.cluster.local 2>&1 | sed 's/^/fqdn: /'; \
         nslookup web 2>&1 | sed 's/^/short: /'",
        ips = direct.join(" "),
    );
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
            }],
        },
    })
}

fn pods(c: &Client, app: &str) -> Vec<Pod> {
    smol::block_on(c.list::<Pod>(Some("default"), Some(&format!("app={app}")), None))
        .map(|(items, _)| items)
        .unwrap_or_default()
}

fn running_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.phase.as_deref() == Some("Running")
        && p.status.pod_ip.is_some()
        && p.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The live replicas: pod name -> (node, pod IP).
fn live_web(c: &Client) -> BTreeMap<String, (String, String)> {
    pods(c, "web")
        .into_iter()
        .filter(running_ready)
        .map(|p| {
            (
                p.metadata.name.clone(),
                (
                    p.spec.node_name.clone().unwrap_or_default(),
                    p.status.pod_ip.clone().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// GET / from `addr` (from the calling thread's namespace); answers the body, trimmed.
fn http_get(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    (status.starts_with("HTTP/1.") && status.split(' ').nth(1) == Some("200"))
        .then(|| body.trim().to_string())
}

/// `n` GETs of `addr` from inside `ns`: the distinct pages, and how many requests failed.
fn sample(ns: &NetNs, addr: SocketAddr, n: usize) -> (BTreeSet<String>, usize) {
    ns.run(move || {
        let mut seen = BTreeSet::new();
        let mut failed = 0;
        for _ in 0..n {
            match http_get(addr) {
                Some(body) => {
                    seen.insert(body);
                }
                None => failed += 1,
            }
        }
        (seen, failed)
    })
}

/// Samples until every request of a round answers and the pages are exactly `want`;
/// panics with the last round (and the namespace's NAT rules) after `timeout`.
fn expect_backends(
    ns: &NetNs,
    addr: SocketAddr,
    want: &BTreeSet<String>,
    timeout: Duration,
    what: &str,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let (seen, failed) = sample(ns, addr, 30);
        if failed == 0 && &seen == want {
            return;
        }
        if Instant::now() > deadline {
            dump(&[ns]);
            panic!(
                "{what}: {addr} from {} answered {seen:?} ({failed} of 30 failed), want {want:?}",
                ns.name
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn dump(hosts: &[&NetNs]) {
    for h in hosts {
        eprintln!("== {}", h.name);
        eprintln!("{}", h.ip_output(&["-br", "addr"]));
        eprintln!("{}", h.ip_output(&["route"]));
        let mut cmd = Command::new("iptables-save");
        h.enter_on_exec(&mut cmd);
        if let Ok(out) = cmd.output() {
            eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        }
    }
}

/// What the pod's container printed (read from the agent's pod directory).
fn pod_log(c: &Client, agent: &TestAgent, name: &str) -> String {
    let Some(p) = get_pod(c, name) else {
        return String::new();
    };
    let path = agent
        .data_dir()
        .join("pods")
        .join(&p.metadata.uid)
        .join("logs/main/0.log");
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The text after `marker` on each line that has it.
fn tagged<'a>(log: &'a str, marker: &str) -> Vec<&'a str> {
    log.lines()
        .filter_map(|l| l.find(marker).map(|i| l[i + marker.len()..].trim()))
        .collect()
}

fn scenario(cl: &Cluster, archive: &std::path::Path) {
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
        start_agent(&mut a, cl.ns(name), ip, &token);
        agents.push(a);
    }
    let node_hosts: Vec<&NetNs> = cl.nodes.iter().map(|(n, _)| cl.ns(n)).collect();
    for (n, _) in &cl.nodes {
        wait_for(&format!("{n} Ready"), Duration::from_secs(60), || {
            let node = smol::block_on(c.get_value(api::Kind::Node, None, n)).ok()?;
            let ready = node["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (ready && node["spec"]["podCIDR"].is_string()).then_some(())
        });
    }

    // Nothing the agents set up gives any namespace of the test a way off the machine.
    for ns in node_hosts.iter().copied().chain([hub, cl.ns(&cl.client)]) {
        assert_eq!(
            ns.ip_output(&["route", "show", "default"]).trim(),
            "",
            "{} has no default route",
            ns.name
        );
    }

    // Three replicas, one per node (the scheduler spreads them over equal nodes).
    smol::block_on(c.create_value(api::Kind::Deployment, Some("default"), &deployment(3)))
        .expect("create the Deployment");
    let svc = smol::block_on(c.create_value(api::Kind::Service, Some("default"), &service()))
        .expect("create the Service");
    let cluster_ip = svc["spec"]["clusterIP"]
        .as_str()
        .expect("a ClusterIP")
        .to_string();
    let node_port = svc["spec"]["ports"][0]["nodePort"]
        .as_u64()
        .expect("a nodePort");
    let live = wait_for("three ready replicas", Duration::from_secs(90), || {
        let l = live_web(&c);
        (l.len() == 3).then_some(l)
    });
    let spread: BTreeSet<&String> = live.values().map(|(n, _)| n).collect();
    assert_eq!(spread.len(), 3, "one replica per node: {live:?}");
    let names: BTreeSet<String> = live.keys().cloned().collect();
    let svc_addr: SocketAddr = format!("{cluster_ip}:{SVC_PORT}").parse().expect("addr");

    // The ClusterIP from every node's own namespace reaches all three backends.
    for ns in &node_hosts {
        expect_backends(
            ns,
            svc_addr,
            &names,
            Duration::from_secs(20),
            "the ClusterIP from a node",
        );
    }
    // The NodePort of every node, from the client namespace on the LAN.
    let client_ns = cl.ns(&cl.client);
    for (_, ip) in &cl.nodes {
        let np: SocketAddr = format!("{ip}:{node_port}").parse().expect("addr");
        expect_backends(
            client_ns,
            np,
            &names,
            Duration::from_secs(20),
            "the NodePort from the client namespace",
        );
    }

    // From inside pods on every node: each backend by pod IP (across nodes), the ClusterIP,
    // and the Service's DNS name.
    let ips: Vec<String> = live.values().map(|(_, ip)| ip.clone()).collect();
    let by_ip: BTreeMap<&str, &str> = live
        .iter()
        .map(|(name, (_, ip))| (ip.as_str(), name.as_str()))
        .collect();
    for (i, (node, _)) in cl.nodes.iter().enumerate() {
        let name = format!("client-{}", i + 1);
        smol::block_on(c.create_value(
            api::Kind::Pod,
            Some("default"),
            &client_pod(&name, node, &ips, &cluster_ip),
        ))
        .expect("create a client pod");
    }
    for (i, (node, _)) in cl.nodes.iter().enumerate() {
        let name = format!("client-{}", i + 1);
        let p = wait_for(
            &format!("{name} to finish"),
            Duration::from_secs(120),
            || {
                get_pod(&c, &name)
                    .filter(|p| matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed")))
            },
        );
        let log = pod_log(&c, &agents[i], &name);
        if i == 0 {
            eprintln!("== what {name} on {node} saw:\n{log}");
        }
        assert_eq!(
            p.status.phase.as_deref(),
            Some("Succeeded"),
            "{name}: {log}"
        );
        for line in tagged(&log, "direct ") {
            let mut parts = line.split_whitespace();
            let (ip, page) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            assert_eq!(
                Some(&page),
                by_ip.get(ip),
                "pod to pod by IP from a pod on {node} to {ip}: {log}"
            );
        }
        assert_eq!(tagged(&log, "direct ").len(), 3, "{name}: {log}");
        let svc_pages: Vec<&str> = tagged(&log, "svc ");
        assert_eq!(svc_pages.len(), 30, "{name}: {log}");
        let distinct: BTreeSet<String> = svc_pages.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            distinct, names,
            "the ClusterIP from inside a pod on {node} reaches all backends (and only them): {log}"
        );
        let fqdn = tagged(&log, "fqdn: ").join("\n");
        assert!(
            fqdn.contains(&format!("Address: {cluster_ip}")),
            "nslookup web.default.svc.cluster.local from a pod on {node} answers {cluster_ip}: {log}"
        );
        let short = tagged(&log, "short: ").join("\n");
        assert!(
            short.contains(&format!("Address: {cluster_ip}")),
            "nslookup web (the search path) from a pod on {node} answers {cluster_ip}: {log}"
        );
    }

    // Scale to four: every node's rules send traffic to the new replica soon after it is
    // Ready. Each node's namespace polls the ClusterIP from now on.
    let old = names.clone();
    let pollers: Vec<_> = node_hosts
        .iter()
        .map(|ns| {
            let old = old.clone();
            ns.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(90);
                while Instant::now() < deadline {
                    if let Some(page) = http_get(svc_addr) {
                        if !old.contains(&page) {
                            return Some((Instant::now(), page));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                None
            })
        })
        .collect();
    smol::block_on(c.patch_value(
        api::Kind::Deployment,
        Some("default"),
        "web",
        "application/merge-patch+json",
        &json!({"spec": {"replicas": 4}}),
    ))
    .expect("scale to 4");
    // The moment the server has the new replica Ready (polled every 20 ms).
    let (ready_at, new_pod) = {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let l = live_web(&c);
            if let Some(n) = l.keys().find(|n| !old.contains(*n)) {
                break (Instant::now(), n.clone());
            }
            assert!(Instant::now() < deadline, "a fourth replica Ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for (ns, poller) in node_hosts.iter().zip(pollers) {
        let seen = poller.join().expect("poller");
        let Some((at, page)) = seen else {
            dump(&[ns]);
            panic!(
                "the new replica {new_pod} never answered through the ClusterIP on {}",
                ns.name
            );
        };
        assert_eq!(page, new_pod, "the new page is the new replica's");
        let lag = at.saturating_duration_since(ready_at);
        eprintln!(
            "rule update after scale on {}: new backend answered {} ms after Ready ({})",
            ns.name,
            lag.as_millis(),
            if at < ready_at {
                "before the test saw Ready"
            } else {
                "after"
            }
        );
        assert!(
            lag < Duration::from_secs(3),
            "{}: the new backend answered through the ClusterIP {lag:?} after Ready (want < 3s)",
            ns.name
        );
    }

    // Node loss: the agent of node 3 is killed and its link cut. Its replicas are replaced
    // on the other two nodes, and the Service answers from exactly the live ones.
    let (lost_node, _) = &cl.nodes[2];
    agents[2].kill9();
    hub.ip(&["link", "set", &format!("p{}", NODES[2]), "down"]);
    let cut = Instant::now();
    let live = wait_for(
        "four ready replicas on the remaining nodes",
        Duration::from_secs(90),
        || {
            let l = live_web(&c);
            (l.len() == 4 && l.values().all(|(n, _)| n != lost_node)).then_some(l)
        },
    );
    eprintln!(
        "node loss: replicas replaced {} ms after the link was cut",
        cut.elapsed().as_millis()
    );
    let names: BTreeSet<String> = live.keys().cloned().collect();
    for ns in &node_hosts[..2] {
        expect_backends(
            ns,
            svc_addr,
            &names,
            Duration::from_secs(20),
            "the ClusterIP after node loss",
        );
    }
    for (_, ip) in &cl.nodes[..2] {
        let np: SocketAddr = format!("{ip}:{node_port}").parse().expect("addr");
        expect_backends(
            client_ns,
            np,
            &names,
            Duration::from_secs(20),
            "the NodePort after node loss",
        );
    }

    for a in &mut agents {
        a.clean_up();
    }
}
