//! Images shared inside a site (docs/design/site-images.md), end to end: a real server and
//! a real registry in a hub namespace, four real agents with `--share-images`, each in its
//! own network namespace on one test LAN (as cluster_net.rs). Three agents carry the same
//! `topology.kubernetes.io/zone`; the fourth has none.
//!
//! Pods of one image started on the three zone nodes at once run, and the registry's access
//! log shows each layer fetched once; the node outside the zone pulls by itself; a layer's
//! home holding a corrupted copy is refused by the node that asked it, which falls back to
//! the registry, as it does when the home is down; the blob path answers a node's
//! certificate and refuses the API server's (403) and no certificate at all (the handshake
//! ends). Needs root, `ip`, /bin/busybox and
//! /usr/bin/docker-registry.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;
#[path = "netns_util/mod.rs"]
mod netns_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::{Node, Pod};
use common::{agent_bin, skiff_bin, wait_for, TestAgent, TestServer};
use image_util::{Registry, TestImage};
use netns_util::{Lan, NetNs};
use serde_json::json;

const CLUSTER_CIDR: &str = "10.244.0.0/16";
const LAN: &str = "172.31.218";
/// Three nodes of the site, then one outside it.
const NODES: [u8; 4] = [11, 12, 13, 14];
const ZONE: &str = "site-a";

/// A layer of `len` pseudo-random (incompressible) bytes in one file.
fn random_layer(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut data = Vec::with_capacity(len + 8);
    while data.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(len);
    image_util::single_file_layer("data/random.bin", &data)
}

/// The busybox layers and a random one.
fn image(seed: u64) -> TestImage {
    image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("shared\n"),
            random_layer(seed, 3 << 20),
        ],
        image_util::host_arch(),
        &["sh"],
    )
}

#[test]
fn a_site_fetches_each_layer_once_and_falls_back_to_the_registry() {
    image_util::require_root_and_busybox();
    let tag = format!("ssi{}", std::process::id() % 100_000);
    let mut lan = Lan::new(&tag, LAN);
    let mut nodes = Vec::new();
    for (i, n) in NODES.iter().enumerate() {
        let name = format!("{tag}-n{}", i + 1);
        let addr = lan.add_host(&name, *n);
        nodes.push((name, addr));
    }
    let _ = skiff_bin();
    let lan = Arc::new(lan);
    let inner = lan.clone();
    lan.hub.run(move || scenario(&inner, &nodes));
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
    while !(server.kubeconfig().exists() && TcpStream::connect(addr).is_ok()) {
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
    assert!(out.status.success(), "token create failed");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

/// A real agent sharing images in `host`, in `zone` if given; `registries` is its
/// registries.yaml (the registry's CA).
fn start_agent(
    a: &mut TestAgent,
    host: &NetNs,
    node_ip: &str,
    token: &str,
    zone: Option<&str>,
    registries: &Path,
) {
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
        .arg("--disable-proxy")
        .arg("--share-images")
        .arg("--registries-config")
        .arg(registries)
        .args(["--server", &a.server, "--token", token])
        .env(
            "SKIFF_LOG",
            std::env::var("AGENT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null());
    if let Some(z) = zone {
        cmd.args([
            "--node-label",
            &format!("{}={z}", agent::image::peers::ZONE_LABEL),
        ]);
    }
    host.enter_on_exec(&mut cmd);
    let child = cmd.process_group(0).spawn().expect("start skiff-agent");
    a.groups.push(child.id() as i32);
    a.child = Some(child);
}

fn pod(name: &str, node: &str, image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/busybox", "sleep", "3600"],
            }],
        },
    })
}

fn create_pod(c: &Client, name: &str, node: &str, image: &str) {
    smol::block_on(c.create_value(api::Kind::Pod, Some("default"), &pod(name, node, image)))
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
}

fn wait_running(c: &Client, names: &[&str]) {
    for name in names {
        wait_for(
            &format!("pod {name} Running"),
            Duration::from_secs(120),
            || {
                let p: Pod = smol::block_on(c.get("default", name)).ok()?;
                (p.status.phase.as_deref() == Some("Running")).then_some(())
            },
        );
    }
}

/// Where an agent keeps a compressed blob (image sharing on).
fn kept_blob(agent: &TestAgent, digest: &str) -> PathBuf {
    agent
        .data_dir()
        .join("images/blobs/sha256")
        .join(digest.strip_prefix("sha256:").expect("a sha256 digest"))
}

/// The agent port a node publishes.
fn agent_port(c: &Client, node: &str) -> u16 {
    let n: Node = smol::block_on(c.get("", node)).expect("the node");
    let port = n
        .status
        .daemon_endpoints
        .and_then(|d| d.kubelet_endpoint)
        .map(|e| e.port)
        .expect("a published port");
    u16::try_from(port).expect("a port")
}

/// GET `path` from the agent at `addr` (its certificate checked for `node`), with the client
/// certificate `client` (PEM certificate and key), if any. Answers the status line (empty
/// when the connection ended without an answer) and the body's length.
fn agent_get(
    addr: SocketAddr,
    node: &str,
    ca_pem: &str,
    client: Option<(&str, &str)>,
    path: &str,
) -> (String, usize) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca"))
        .expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from(node.to_string()).expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("conn");
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {node}\r\n\r\n");
    if tls.write_all(request.as_bytes()).is_err() {
        return (String::new(), 0);
    }
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (String::from_utf8_lossy(&out).into_owned(), 0);
    };
    let head = String::from_utf8_lossy(&out[..end]);
    let status = head.lines().next().unwrap_or("").to_string();
    (status, out.len() - end - 4)
}

fn scenario(lan: &Lan, nodes: &[(String, String)]) {
    let hub = &lan.hub;
    let registry = Registry::start_on(&lan.hub_addr());
    let app = image(1);
    let other = image(2);
    registry.push("site/app", "v1", &app);
    registry.push("site/other", "v1", &other);
    let app_ref = format!("{}/site/app:v1", registry.host());
    let other_ref = format!("{}/site/other:v1", registry.host());
    let config_dir = tempfile::tempdir().expect("temp dir");
    let registries = config_dir.path().join("registries.yaml");
    std::fs::write(
        &registries,
        format!(
            "configs:\n  \"{}\":\n    tls:\n      ca_file: {}\n",
            registry.host(),
            registry.ca_file.display()
        ),
    )
    .expect("registries.yaml");

    let addr: SocketAddr = format!("{}:6443", lan.hub_addr()).parse().expect("addr");
    let server = start_server(hub, addr);
    let c = server.client();
    let token = join_token(&server, hub);
    let mut agents: Vec<TestAgent> = Vec::new();
    for (i, (name, ip)) in nodes.iter().enumerate() {
        let mut a = TestAgent::new(&server);
        a.node_name = name.clone();
        a.cgroup_parent = format!("skiff-test-{name}");
        let zone = (i < 3).then_some(ZONE);
        start_agent(&mut a, lan.host(name), ip, &token, zone, &registries);
        agents.push(a);
    }
    for (n, _) in nodes {
        wait_for(&format!("{n} Ready"), Duration::from_secs(60), || {
            let node: Node = smol::block_on(c.get("", n)).ok()?;
            let ready = node
                .status
                .condition("Ready")
                .is_some_and(|c| c.status == "True");
            (ready && node.spec.pod_cidr.is_some()).then_some(())
        });
    }
    let site: Vec<&str> = nodes[..3].iter().map(|(n, _)| n.as_str()).collect();

    // The three nodes of the site start the image at once: each layer crosses once.
    let started = Instant::now();
    for (i, node) in site.iter().enumerate() {
        create_pod(&c, &format!("app-{i}"), node, &app_ref);
    }
    wait_running(&c, &["app-0", "app-1", "app-2"]);
    eprintln!(
        "three nodes of a site ran the image in {:?}",
        started.elapsed()
    );
    for d in app.layer_digests() {
        assert_eq!(
            registry.blob_gets(&d),
            1,
            "layer {d} was fetched from the registry once for the site"
        );
        for a in &agents[..3] {
            assert!(
                kept_blob(a, &d).is_file(),
                "{} keeps layer {d} to share it",
                a.node_name
            );
        }
    }

    // The node outside the zone pulls by itself.
    create_pod(&c, "app-outside", &nodes[3].0, &app_ref);
    wait_running(&c, &["app-outside"]);
    for d in app.layer_digests() {
        assert_eq!(
            registry.blob_gets(&d),
            2,
            "the node outside the site fetched layer {d} itself"
        );
    }

    // A home with a corrupted copy: the node that asks it refuses the content and falls
    // back to the registry.
    let layer = other.layer_digests()[2].clone();
    let home = agent::image::peers::home(site.iter().copied(), &layer).expect("a home");
    let asker = *site.iter().find(|n| **n != home).expect("another node");
    let home_agent = agents.iter().find(|a| a.node_name == home).expect("home");
    create_pod(&c, "other-home", home, &other_ref);
    wait_running(&c, &["other-home"]);
    assert_eq!(registry.blob_gets(&layer), 1);
    let kept = kept_blob(home_agent, &layer);
    let mut bytes = std::fs::read(&kept).expect("the home keeps the layer");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&kept, &bytes).expect("corrupt the home's copy");
    create_pod(&c, "other-asker", asker, &other_ref);
    wait_running(&c, &["other-asker"]);
    assert_eq!(
        registry.blob_gets(&layer),
        2,
        "{asker} refused {home}'s corrupted copy and fetched the layer itself"
    );

    // The blob path: a node's certificate gets the blob; the API server's is refused, and
    // so is a client without a certificate.
    let pki = server.dir.path().join("pki");
    let read = |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    let ca = read(pki.join("ca.crt"));
    let (serving, serving_ip) = (&nodes[0].0, &nodes[0].1);
    let peer = &agents[1];
    let target: SocketAddr = format!("{serving_ip}:{}", agent_port(&c, serving))
        .parse()
        .expect("addr");
    let d = app.layer_digests()[2].clone();
    let path = format!("/skiff/v1/blobs/{d}?image={app_ref}");
    let node_cert = read(peer.data_dir().join("node.crt"));
    let node_key = read(peer.data_dir().join("node.key"));
    let (status, len) = agent_get(target, serving, &ca, Some((&node_cert, &node_key)), &path);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(len, app.layers[2].0.len(), "the whole blob");
    let api_cert = read(pki.join("apiserver-client.crt"));
    let api_key = read(pki.join("apiserver-client.key"));
    let (status, _) = agent_get(target, serving, &ca, Some((&api_cert, &api_key)), &path);
    assert!(status.starts_with("HTTP/1.1 403"), "{status}");
    let (status, _) = agent_get(target, serving, &ca, None, &path);
    assert!(status.is_empty(), "no certificate, no answer: {status}");
    // A node's certificate is for blobs only.
    let (status, _) = agent_get(
        target,
        serving,
        &ca,
        Some((&node_cert, &node_key)),
        "/containerLogs/default/app-0/main",
    );
    assert!(status.starts_with("HTTP/1.1 403"), "{status}");

    // A home that is down costs only a fallback to the registry.
    let third = image(3);
    registry.push("site/third", "v1", &third);
    let third_ref = format!("{}/site/third:v1", registry.host());
    let layer = third.layer_digests()[2].clone();
    let home = agent::image::peers::home(site.iter().copied(), &layer).expect("a home");
    let asker = *site.iter().find(|n| **n != home).expect("another node");
    agents
        .iter_mut()
        .find(|a| a.node_name == home)
        .expect("home")
        .kill9();
    create_pod(&c, "third", asker, &third_ref);
    wait_running(&c, &["third"]);
    assert_eq!(
        registry.blob_gets(&layer),
        1,
        "{asker} fetched the layer itself, its home {home} being down"
    );

    // The agents remove their pods' containers as they go.
    drop(agents);
    drop(server);
}
