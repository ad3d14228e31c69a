//! The pod network end to end on two nodes, each a network namespace on a test LAN
//! (172.31.213.0/24, a bridge in a third namespace where the server listens): podCIDRs from
//! the server, pod addresses from them, pod-to-pod on one node and across nodes (host-gw
//! routes), hostPort DNAT on the node's address, the downward API's podIP, addresses
//! released and reused, and addresses kept across an agent restart. The test process talks
//! to the server from inside the hub namespace; no namespace has a route off the machine,
//! and nothing here touches the host's own network namespace. Needs root and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;
#[path = "netns_util/mod.rs"]
mod netns_util;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::net::Ipv4Cidr;
use api::client::Client;
use api::core::{
    Container, ContainerPort, EnvVar, EnvVarSource, Node, ObjectFieldSelector, Pod, PodSpec,
};
use api::meta::{DeleteOptions, ObjectMeta};
use common::{agent_bin, get_pod, phase, skiff_bin, wait_for, TestAgent, TestServer};
use netns_util::{Lan, NetNs};

const IMAGE: &str = "skiff.test/testbox:v1";
const CLUSTER_CIDR: &str = "10.244.0.0/16";
const LAN: &str = "172.31.213";
const WEB_PORT: i32 = 8080;
const HOST_PORT: i32 = 18080;

fn web_pod(name: &str, node: &str, host_port: Option<i32>) -> Pod {
    // The page names the pod and the address the downward API gave it.
    let script = format!(
        "mkdir -p /www && echo \"{name} $POD_IP\" > /www/index.html && exec httpd -f -p {WEB_PORT} -h /www"
    );
    pod(
        name,
        node,
        &["sh", "-c", &script],
        vec![ContainerPort {
            container_port: WEB_PORT,
            host_port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }],
        "Always",
    )
}

/// A pod that fetches `http://ip:8080/` (with nc: busybox's wget crashes on some hosts)
/// and succeeds only if the page names `expect`.
fn client_pod(name: &str, node: &str, ip: &str, expect: &str) -> Pod {
    let script = format!(
        "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip} {WEB_PORT} > /page; cat /page; grep -q '^{expect} ' /page"
    );
    pod(name, node, &["sh", "-c", &script], vec![], "Never")
}

fn pod(name: &str, node: &str, cmd: &[&str], ports: Vec<ContainerPort>, restart: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some(restart.into()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                command: cmd.iter().map(|s| s.to_string()).collect(),
                ports,
                env: vec![EnvVar {
                    name: "POD_IP".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            api_version: None,
                            field_path: "status.podIP".into(),
                        }),
                        ..Default::default()
                    }),
                }],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn create(c: &Client, p: &Pod) {
    smol::block_on(c.create(p)).expect("create pod");
}

/// Waits for the pod to be Running with a podIP; answers it.
fn running_ip(c: &Client, name: &str) -> Ipv4Addr {
    let p = wait_for(&format!("{name} running"), Duration::from_secs(60), || {
        get_pod(c, name).filter(|p| phase(p) == "Running" && p.status.pod_ip.is_some())
    });
    p.status
        .pod_ip
        .as_deref()
        .and_then(|ip| ip.parse().ok())
        .expect("an IPv4 podIP")
}

fn finished(c: &Client, name: &str) -> String {
    let p = wait_for(
        &format!("{name} to finish"),
        Duration::from_secs(60),
        || get_pod(c, name).filter(|p| matches!(phase(p), "Succeeded" | "Failed")),
    );
    phase(&p).to_string()
}

fn delete_and_wait(c: &Client, name: &str) {
    smol::block_on(c.delete::<Pod>("default", name, &DeleteOptions::default()))
        .expect("delete pod");
    wait_for(&format!("{name} gone"), Duration::from_secs(60), || {
        get_pod(c, name).is_none().then_some(())
    });
}

/// GET / from `addr` (from the calling thread's namespace); answers the body.
fn http_get(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    (status.starts_with("HTTP/1.") && status.split(' ').nth(1) == Some("200"))
        .then(|| body.to_string())
}

/// What the pod's container printed (read from the agent's pod directory).
fn client_log(c: &Client, agent: &TestAgent, name: &str) -> String {
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

fn node_cidr(c: &Client, name: &str) -> Option<Ipv4Cidr> {
    smol::block_on(c.get::<Node>("", name))
        .ok()?
        .spec
        .pod_cidr?
        .parse()
        .ok()
}

struct Net {
    lan: Lan,
    a_ip: String,
    b_ip: String,
    tag: String,
}

fn new_agent(server: &TestServer, name: &str) -> TestAgent {
    let mut a = TestAgent::new(server);
    a.node_name = name.into();
    a.cgroup_parent = format!("skiff-test-{name}");
    a
}

fn start_agent(a: &mut TestAgent, host: &NetNs, node_ip: &str, token: Option<&str>) {
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
        .env(
            "SKIFF_LOG",
            std::env::var("AGENT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null());
    if let Some(t) = token {
        cmd.args(["--server", &a.server, "--token", t]);
    }
    host.enter_on_exec(&mut cmd);
    let child = cmd.process_group(0).spawn().expect("start skiff-agent");
    a.groups.push(child.id() as i32);
    a.child = Some(child);
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

/// Like `wait_for` (20s), but shows the nodes' addresses, routes and NAT rules first when
/// it times out.
fn wait_or_dump<T>(what: &str, hosts: &[&NetNs], mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
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
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn pods_reach_each_other_across_nodes_and_through_host_ports() {
    image_util::require_root_and_busybox();
    let tag = format!("skn{}", std::process::id() % 100_000);
    let mut lan = Lan::new(&tag, LAN);
    let a_ns = format!("{tag}-a");
    let b_ns = format!("{tag}-b");
    let a_ip = lan.add_host(&a_ns, 11);
    let b_ip = lan.add_host(&b_ns, 12);
    // Build the server binary out here (cargo may need the host's network namespace).
    let _ = skiff_bin();
    let archive = tempfile::tempdir().expect("temp dir");
    let archive_path = archive.path().join("testbox.tar");
    image_util::write_oci_archive(&archive_path, &image_util::busybox_image("hello"), IMAGE);
    let net = Arc::new(Net {
        lan,
        a_ip,
        b_ip,
        tag,
    });
    let inner = net.clone();
    net.lan.hub.run(move || scenario(&inner, &archive_path));
}

fn scenario(net: &Net, archive: &std::path::Path) {
    let hub = &net.lan.hub;
    let host_a = net.lan.host(&format!("{}-a", net.tag));
    let host_b = net.lan.host(&format!("{}-b", net.tag));
    let addr: SocketAddr = format!("{}:6443", net.lan.hub_addr())
        .parse()
        .expect("addr");
    let server = start_server(hub, addr);
    let c = server.client();
    let token = join_token(&server, hub);
    let node_a = format!("{}-a", net.tag);
    let node_b = format!("{}-b", net.tag);
    let mut agent_a = new_agent(&server, &node_a);
    let mut agent_b = new_agent(&server, &node_b);
    agent_a.import(archive);
    agent_b.import(archive);
    start_agent(&mut agent_a, host_a, &net.a_ip, Some(&token));
    start_agent(&mut agent_b, host_b, &net.b_ip, Some(&token));

    // Each node gets its own /24 of the cluster range.
    let cluster: Ipv4Cidr = CLUSTER_CIDR.parse().expect("cidr");
    let cidr_a = wait_for("node a's podCIDR", Duration::from_secs(60), || {
        node_cidr(&c, &node_a)
    });
    let cidr_b = wait_for("node b's podCIDR", Duration::from_secs(60), || {
        node_cidr(&c, &node_b)
    });
    assert_ne!(cidr_a, cidr_b);
    assert!(cluster.contains_cidr(&cidr_a) && cluster.contains_cidr(&cidr_b));
    assert_eq!((cidr_a.prefix(), cidr_b.prefix()), (24, 24));

    create(&c, &web_pod("web-a", &node_a, Some(HOST_PORT)));
    create(&c, &web_pod("web-a2", &node_a, None));
    create(&c, &web_pod("web-b", &node_b, None));
    let ip_a = running_ip(&c, "web-a");
    let ip_a2 = running_ip(&c, "web-a2");
    let ip_b = running_ip(&c, "web-b");
    assert!(
        cidr_a.contains(ip_a) && cidr_a.contains(ip_a2),
        "{ip_a} {ip_a2} in {cidr_a}"
    );
    assert!(cidr_b.contains(ip_b), "{ip_b} in {cidr_b}");
    assert_ne!(ip_a, ip_a2);
    let web_a = get_pod(&c, "web-a").expect("web-a");
    assert_eq!(web_a.status.host_ip.as_deref(), Some(net.a_ip.as_str()));

    // hostPort on the node's address, from the LAN; the page shows the downward API's podIP.
    let host_port: SocketAddr = format!("{}:{HOST_PORT}", net.a_ip).parse().expect("addr");
    let page = wait_or_dump("the hostPort to answer", &[host_a, host_b], || {
        http_get(host_port)
    });
    assert_eq!(page.trim(), format!("web-a {ip_a}"));

    // Pod to pod: same node, across nodes both ways; a cluster address no pod has fails.
    create(
        &c,
        &client_pod("get-same", &node_a, &ip_a2.to_string(), "web-a2"),
    );
    create(
        &c,
        &client_pod("get-a-to-b", &node_a, &ip_b.to_string(), "web-b"),
    );
    create(
        &c,
        &client_pod("get-b-to-a", &node_b, &ip_a.to_string(), "web-a"),
    );
    let nowhere = Ipv4Cidr::new(Ipv4Addr::new(10, 244, 250, 0), 24)
        .expect("cidr")
        .nth(9)
        .expect("addr");
    create(
        &c,
        &client_pod("get-nowhere", &node_a, &nowhere.to_string(), "x"),
    );
    for (name, agent, what) in [
        ("get-same", &agent_a, "pod to pod on one node"),
        ("get-a-to-b", &agent_a, "pod on node a to pod on node b"),
        ("get-b-to-a", &agent_b, "pod on node b to pod on node a"),
    ] {
        let outcome = finished(&c, name);
        let log = client_log(&c, agent, name);
        assert_eq!(outcome, "Succeeded", "{what}: {log}");
    }
    assert_eq!(finished(&c, "get-nowhere"), "Failed", "no pod there");

    // Deleting a pod removes its veth and frees its address for the next pod.
    let a2_uid = get_pod(&c, "web-a2").expect("web-a2").metadata.uid;
    delete_and_wait(&c, "web-a2");
    let veth = agent::net::host_veth_name(&a2_uid);
    assert!(
        !host_a.ip_output(&["-br", "link"]).contains(&veth),
        "the veth {veth} of the deleted pod is gone"
    );
    create(&c, &web_pod("web-a3", &node_a, None));
    assert_eq!(
        running_ip(&c, "web-a3"),
        ip_a2,
        "the freed address is handed out again"
    );

    // A restarted agent keeps its pods' addresses and hostPorts, and hands out no address
    // twice.
    agent_a.kill9();
    start_agent(&mut agent_a, host_a, &net.a_ip, None);
    create(&c, &web_pod("web-a4", &node_a, None));
    let ip_a4 = running_ip(&c, "web-a4");
    assert!(cidr_a.contains(ip_a4));
    let mut taken = vec![ip_a, ip_a2];
    for p in ["get-same", "get-a-to-b", "get-nowhere"] {
        if let Some(ip) = get_pod(&c, p).and_then(|p| p.status.pod_ip) {
            taken.push(ip.parse().expect("ip"));
        }
    }
    assert!(!taken.contains(&ip_a4), "{ip_a4} was already handed out");
    assert_eq!(running_ip(&c, "web-a"), ip_a, "web-a keeps its address");
    let page = wait_for(
        "the hostPort after a restart",
        Duration::from_secs(20),
        || http_get(host_port),
    );
    assert_eq!(page.trim(), format!("web-a {ip_a}"));
    create(
        &c,
        &client_pod("get-after", &node_b, &ip_a.to_string(), "web-a"),
    );
    let outcome = finished(&c, "get-after");
    let log = client_log(&c, &agent_b, "get-after");
    assert_eq!(outcome, "Succeeded", "web-a still reachable: {log}");

    // Hairpin: a pod reaches itself through its own Service (DNATed back to its own address,
    // so its veth must be in hairpin mode on the bridge).
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hairpin", "namespace": "default"},
        "spec": {
            "selector": {"app": "hairpin"},
            "ports": [{"port": 80, "targetPort": WEB_PORT, "protocol": "TCP"}],
        },
    });
    let svc = smol::block_on(c.create_value(api::Kind::Service, Some("default"), &svc))
        .expect("create the Service");
    let cluster_ip = svc["spec"]["clusterIP"].as_str().expect("a ClusterIP");
    let script = format!(
        "mkdir -p /www && echo \"hairpin $POD_IP\" > /www/index.html && httpd -p {WEB_PORT} -h /www; \
         for i in $(seq 1 30); do printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {cluster_ip} 80 > /page; \
         grep -q '^hairpin ' /page && exit 0; sleep 1; done; exit 1"
    );
    let mut hairpin = pod("hairpin", &node_b, &["sh", "-c", &script], vec![], "Never");
    hairpin
        .metadata
        .labels
        .insert("app".to_string(), "hairpin".to_string());
    create(&c, &hairpin);
    let outcome = finished(&c, "hairpin");
    let log = client_log(&c, &agent_b, "hairpin");
    assert_eq!(outcome, "Succeeded", "a pod through its own Service: {log}");

    agent_a.clean_up();
    agent_b.clean_up();
}
