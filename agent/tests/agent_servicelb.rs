//! Service `type: LoadBalancer` end to end (skiff's ServiceLB): `skiff server` with its own
//! node and service proxy runs in a namespace on a test LAN (172.31.221.0/24; nothing is
//! forwarded beyond it), a busybox httpd Deployment behind it. `kubectl expose --type=LoadBalancer`
//! gets the node's address in status (shown by `kubectl get svc`) and answers on
//! node-address:port from a second namespace on the LAN; a second Service on the same port
//! gets a Warning event, no status and no rules, and takes over when the first is deleted; a
//! port a host process holds is reported the same way and served once freed; a Service of
//! another loadBalancerClass is left alone; `allocateLoadBalancerNodePorts: false` gets no
//! node port and is still served. The node's default route points at the LAN's hub, which
//! forwards nothing: a connection from the node to an unallocated ClusterIP, or to a port its
//! Service lacks, is refused on the node rather than sent there, while a served ClusterIP
//! still answers. Needs root, `ip`, `iptables`, kubectl and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;
#[path = "netns_util/mod.rs"]
mod netns_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use api::client::Client;
use api::core::{Event, Service};
use common::{wait_for, NodeServer};
use netns_util::Lan;

const IMAGE: &str = "skiff.test/servicelb:v1";
const LAN: &str = "172.31.221";
const NODE: u8 = 11;
const CLIENT: u8 = 50;

fn kubectl(kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = common::run_kubectl(kc, args, stdin.map(str::as_bytes));
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One GET with HTTP/1.0: the body of a 200 answer.
fn http_get(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    (status.split(' ').nth(1) == Some("200")).then(|| body.trim().to_string())
}

fn service(c: &Client, name: &str) -> Service {
    smol::block_on(c.get::<Service>("default", name)).expect("get service")
}

fn lb_ips(s: &Service) -> Vec<String> {
    s.status
        .load_balancer
        .as_ref()
        .map(|lb| lb.ingress.iter().filter_map(|i| i.ip.clone()).collect())
        .unwrap_or_default()
}

/// The Warning event on Service `name` with reason PortInUse, if there is one.
fn port_in_use_event(c: &Client, name: &str) -> Option<Event> {
    let (events, _) = smol::block_on(c.list::<Event>(Some("default"), None, None)).ok()?;
    events.into_iter().find(|e| {
        e.involved_object.name.as_deref() == Some(name)
            && e.involved_object.kind.as_deref() == Some("Service")
            && e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some("PortInUse")
    })
}

/// The node's nat rules that serve `id` (`namespace/name`) as a LoadBalancer.
fn lb_rules(id: &str) -> Vec<String> {
    let out = Command::new("iptables-save")
        .args(["-t", "nat"])
        .output()
        .expect("iptables-save");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("\"{id}:")) && l.contains("loadbalancer"))
        .map(str::to_string)
        .collect()
}

#[test]
fn load_balancer_services_on_the_node_address() {
    image_util::require_root_and_busybox();
    let tag = format!("slb{}", std::process::id() % 100_000);
    let mut lan = Lan::new(&tag, LAN);
    let node = format!("{tag}-n1");
    let node_addr = lan.add_host(&node, NODE);
    let client = format!("{tag}-client");
    lan.add_host(&client, CLIENT);
    // What leaves the node by its default route dies at the hub (it does not forward).
    lan.host(&node)
        .ip(&["route", "add", "default", "via", &lan.hub_addr()]);
    // Build the binaries out here (cargo may need the host's network namespace).
    let _ = common::skiff_bin();
    let _ = common::agent_bin();
    let lan = Arc::new(lan);
    let inner = lan.clone();
    lan.host(&node)
        .run(move || scenario(&inner, &node, &node_addr, &client));
}

fn scenario(lan: &Lan, node: &str, node_addr: &str, client_ns: &str) {
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("lb"), IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let cgroup_parent = format!("skiff-servicelb-{}", std::process::id());
    // This thread is in the node's namespace: the server (and its node) start there.
    let child = Command::new(common::skiff_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:6443"])
        .args(["--node-name", node, "--node-ip", node_addr])
        .args(["--cgroup-parent", &cgroup_parent, "--agent-port", "0"])
        .args(["--disable-dns", "--disable-ingress"])
        .arg("--agent-run-dir")
        .arg(run.path())
        .env("SKIFF_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start skiff server");
    let server = NodeServer {
        child,
        dir,
        run,
        cgroup_parent,
    };
    let kc = server.kubeconfig();
    let c = common::wait_for_own_node(&kc, node);
    let from_client = |port: u16| {
        let addr: SocketAddr = format!("{node_addr}:{port}").parse().unwrap();
        lan.host(client_ns).run(move || http_get(addr))
    };

    kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: {IMAGE}
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "mkdir -p /www && echo served-by-web > /www/index.html && exec httpd -f -p 8080 -h /www"]
        readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
"#
        )),
    );

    // 1. kubectl expose --type=LoadBalancer: the node's address in status and in
    // `kubectl get svc`, a node port, and an answer on node-address:8081 from the LAN.
    kubectl(
        &kc,
        &[
            "expose",
            "deployment",
            "web",
            "--type=LoadBalancer",
            "--port=8081",
            "--target-port=8080",
            "--name=web-lb",
        ],
        None,
    );
    let lb = wait_for("web-lb's status", Duration::from_secs(30), || {
        let s = service(&c, "web-lb");
        (lb_ips(&s) == [node_addr]).then_some(s)
    });
    let node_port = lb.spec.ports[0].node_port.expect("a node port");
    assert_eq!(lb.spec.allocate_load_balancer_node_ports, Some(true));
    let row = kubectl(&kc, &["get", "svc", "web-lb", "--no-headers"], None);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "LoadBalancer", "{row}");
    assert_eq!(cells[3], node_addr, "EXTERNAL-IP: {row}");
    assert_eq!(cells[4], format!("8081:{node_port}/TCP"), "{row}");
    let body = wait_for("web-lb from the LAN", Duration::from_secs(90), || {
        from_client(8081)
    });
    assert_eq!(body, "served-by-web");
    assert_eq!(lb_rules("default/web-lb").len(), 2, "mark and jump");

    // 2. A second Service on the same port: a Warning event, no status, no rules.
    kubectl(
        &kc,
        &[
            "expose",
            "deployment",
            "web",
            "--type=LoadBalancer",
            "--port=8081",
            "--target-port=8080",
            "--name=web-lb2",
        ],
        None,
    );
    let ev = wait_for("web-lb2's PortInUse event", Duration::from_secs(20), || {
        port_in_use_event(&c, "web-lb2")
    });
    let msg = ev.message.unwrap_or_default();
    assert!(
        msg.contains(&format!(
            "port TCP/8081 on node {node} is taken by LoadBalancer Service default/web-lb"
        )),
        "{msg}"
    );
    assert!(lb_ips(&service(&c, "web-lb2")).is_empty());
    let row = kubectl(&kc, &["get", "svc", "web-lb2", "--no-headers"], None);
    assert_eq!(row.split_whitespace().nth(3), Some("<pending>"), "{row}");
    assert!(lb_rules("default/web-lb2").is_empty());

    // 3. A port a host process holds on the node's address: reported, left out, and served
    // once the process lets it go (the proxy probes again within its check interval).
    let holder = TcpListener::bind((node_addr, 8090)).expect("hold 8090");
    kubectl(
        &kc,
        &[
            "expose",
            "deployment",
            "web",
            "--type=LoadBalancer",
            "--port=8090",
            "--target-port=8080",
            "--name=web-held",
        ],
        None,
    );
    let ev = wait_for(
        "web-held's PortInUse event",
        Duration::from_secs(20),
        || port_in_use_event(&c, "web-held"),
    );
    let msg = ev.message.unwrap_or_default();
    assert!(
        msg.contains(&format!(
            "port TCP/8090 is in use by a host process on node {node}"
        )),
        "{msg}"
    );
    assert!(lb_ips(&service(&c, "web-held")).is_empty());
    assert!(lb_rules("default/web-held").is_empty());

    // 4. Another implementation's class: no status, no rules, no event.
    kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(
            r#"apiVersion: v1
kind: Service
metadata: {name: web-other}
spec:
  type: LoadBalancer
  loadBalancerClass: example.com/other
  selector: {app: web}
  ports: [{port: 8082, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-nonp}
spec:
  type: LoadBalancer
  allocateLoadBalancerNodePorts: false
  selector: {app: web}
  ports: [{port: 8083, targetPort: 8080}]
"#,
        ),
    );
    // 5. No node ports asked for: none allocated, still served on the node's address.
    let nonp = wait_for("web-nonp's status", Duration::from_secs(30), || {
        let s = service(&c, "web-nonp");
        (lb_ips(&s) == [node_addr]).then_some(s)
    });
    assert_eq!(nonp.spec.ports[0].node_port, None);
    let body = wait_for("web-nonp from the LAN", Duration::from_secs(30), || {
        from_client(8083)
    });
    assert_eq!(body, "served-by-web");
    // web-nonp was handled in the same passes as web-other.
    let other = service(&c, "web-other");
    assert!(other
        .status
        .load_balancer
        .unwrap_or_default()
        .ingress
        .is_empty());
    assert!(port_in_use_event(&c, "web-other").is_none());
    assert!(lb_rules("default/web-other").is_empty());
    assert_eq!(from_client(8082), None);

    // 3, continued: the port freed, web-held is served.
    drop(holder);
    wait_for(
        "web-held's status once 8090 is free",
        Duration::from_secs(45),
        || (lb_ips(&service(&c, "web-held")) == [node_addr]).then_some(()),
    );
    let body = wait_for("web-held from the LAN", Duration::from_secs(30), || {
        from_client(8090)
    });
    assert_eq!(body, "served-by-web");

    // 2, continued: web-lb deleted, web-lb2 takes the port over.
    kubectl(&kc, &["delete", "svc", "web-lb"], None);
    wait_for("web-lb2's status", Duration::from_secs(30), || {
        (lb_ips(&service(&c, "web-lb2")) == [node_addr]).then_some(())
    });
    wait_for("web-lb2's rules", Duration::from_secs(30), || {
        (lb_rules("default/web-lb").is_empty() && lb_rules("default/web-lb2").len() == 2)
            .then_some(())
    });
    let body = wait_for("web-lb2 from the LAN", Duration::from_secs(30), || {
        from_client(8081)
    });
    assert_eq!(body, "served-by-web");

    // The Service range on the node (this thread is in the node's namespace): a served
    // ClusterIP answers; its other ports and an address no Service has are refused here.
    let cluster_ip = service(&c, "web-lb2").spec.cluster_ip.expect("a ClusterIP");
    let served: SocketAddr = format!("{cluster_ip}:8081").parse().unwrap();
    assert_eq!(http_get(served).as_deref(), Some("served-by-web"));
    let (services, _) = smol::block_on(c.list::<Service>(None, None, None)).expect("list services");
    let unallocated = "10.43.254.253";
    assert!(services
        .iter()
        .all(|s| s.spec.cluster_ip.as_deref() != Some(unallocated)));
    for addr in [format!("{cluster_ip}:9999"), format!("{unallocated}:80")] {
        let addr: SocketAddr = addr.parse().unwrap();
        let started = std::time::Instant::now();
        let err = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .expect_err("nothing serves it");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{addr}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{addr}: refused at once"
        );
    }
    drop(server);
}
