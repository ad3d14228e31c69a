//! The built-in ingress proxy end to end: `skiff server` with its own node (ingress on high
//! ports of 127.0.0.1, no service proxy) runs busybox httpd Deployments behind Services and
//! Ingresses made with the real `kubectl create ingress`; requests with Host headers reach
//! the right backend, TLS is chosen by SNI from a Secret and swapped live, a WebSocket-style
//! upgrade passes through, and a Service without endpoints answers 503. Needs root,
//! /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use api::client::Client;
use api::core::Pod;
use api::networking::Ingress;
use common::{free_port, skiff_bin, wait_for};

const IMAGE: &str = "skiff.test/ingress:v1";

fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

/// The busybox applets the pods run, as links in /bin.
fn tools_layer() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for applet in ["echo", "httpd", "mkdir", "sleep"] {
        let mut h = header(tar::EntryType::Symlink, 0, 0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("link");
    }
    let mut h = header(tar::EntryType::Directory, 0, 0o1777);
    b.append_data(&mut h, "tmp/", std::io::empty())
        .expect("dir");
    b.into_inner().expect("tar")
}

struct Server {
    child: std::process::Child,
    dir: tempfile::TempDir,
    run: tempfile::TempDir,
    cgroup_parent: String,
    http: SocketAddr,
    https: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        common::remove_node_leftovers(self.run.path(), &self.cgroup_parent, self.dir.path());
    }
}

impl Server {
    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        common::run_kubectl(&self.kubeconfig(), args, stdin.map(str::as_bytes))
    }

    /// Runs kubectl and answers its stdout; panics with its stderr on failure.
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn start() -> (Server, Client, String) {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("ingress"),
            tools_layer(),
        ],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let node = format!("ingress-{}", std::process::id());
    let cgroup_parent = format!("skiff-ingress-{}", std::process::id());
    let port = free_port();
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let https: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(skiff_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--node-name", &node, "--node-ip", "127.0.0.1"])
        .args([
            "--cgroup-parent",
            &cgroup_parent,
            "--agent-port",
            "0",
            "--disable-proxy",
            "--disable-dns",
        ])
        .args(["--ingress-http-address", &http.to_string()])
        .args(["--ingress-https-address", &https.to_string()])
        .arg("--agent-run-dir")
        .arg(run.path())
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("start skiff server");
    let server = Server {
        child,
        dir,
        run,
        cgroup_parent,
        http,
        https,
    };
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);
    (server, client, node)
}

/// A Deployment `name` of busybox httpd on 8080 serving `name` at / and `name-api` at /api/,
/// and its Service on port 80.
fn web_app(name: &str, node: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeName: {node}
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: {IMAGE}
        args: ["sh", "-c", "mkdir -p /www/api && echo {name} > /www/index.html && echo {name}-api > /www/api/index.html && exec httpd -f -p 8080 -h /www"]
---
apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"#
    )
}

/// One request with `Connection: close`: the status and the body of the whole answer, read to
/// the end of the connection; the answer must say `Connection: close`.
fn get(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let answer = parse_answer(&out)?;
    // The answer says the connection ends (clients would send their next request on it).
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    assert!(
        head.split("\r\n").any(|l| l == "connection: close"),
        "an answer to Connection: close without it: {head:?}"
    );
    Some(answer)
}

/// Two requests on one client connection (keep-alive): both bodies.
fn two_on_one_connection(addr: SocketAddr, host: &str, paths: [&str; 2]) -> (String, String) {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut bodies = Vec::new();
    for p in paths {
        write!(w, "GET {p} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut len = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                r.read_line(&mut line).unwrap() > 0,
                "closed after {bodies:?}"
            );
            if line == "\r\n" {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        bodies.push(String::from_utf8_lossy(&body).trim().to_string());
    }
    (bodies[0].clone(), bodies[1].clone())
}

fn parse_answer(out: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(out);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

fn wait_body(addr: SocketAddr, host: &str, path: &str, want: (u16, &str)) {
    let mut last = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = get(addr, host, path);
        if let Some((status, body)) = &got {
            if *status == want.0 && body.trim() == want.1 {
                return;
            }
        }
        last = got.or(last);
        assert!(
            std::time::Instant::now() < deadline,
            "{host}{path}: wanted {want:?}, last answer {last:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A self-signed certificate for `host`: its PEM certificate, PEM key and DER.
fn cert(host: &str) -> (String, String, Vec<u8>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec![host.to_string()]).expect("params");
    let c = params.self_signed(&key).expect("self-signed");
    (c.pem(), key.serialize_pem(), c.der().to_vec())
}

/// A TLS GET with SNI `host`, trusting only `root`: the served certificate and the body.
fn tls_get(addr: SocketAddr, host: &str, root: &[u8]) -> Option<(Vec<u8>, u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(root.to_vec()))
        .ok()?;
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from(host.to_string()).ok()?;
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).ok()?;
    let tcp = TcpStream::connect(addr).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = Vec::new();
    // A close without close_notify is fine here: the body is complete by then.
    let _ = tls.read_to_end(&mut out);
    let served = tls.conn.peer_certificates()?.first()?.to_vec();
    let (status, body) = parse_answer(&out)?;
    Some((served, status, body))
}

/// An upgrade echo server on the host: answers an upgrade with 101 and then sends back what
/// it reads; answers any other request with `ok` (keep-alive).
fn upgrade_echo_server() -> u16 {
    let l = TcpListener::bind("0.0.0.0:0").expect("bind echo");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().expect("clone"));
                let mut w = s;
                loop {
                    let mut head = String::new();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line.to_ascii_lowercase());
                    }
                    if head.contains("upgrade: websocket") {
                        break;
                    }
                    // `ok` and the X-Forwarded-* headers it was sent, sorted.
                    let mut forwarded: Vec<&str> = head
                        .lines()
                        .filter(|l| l.starts_with("x-forwarded-"))
                        .collect();
                    forwarded.sort();
                    let mut body = format!("ok {}", forwarded.join(";"));
                    // A request body (Content-Length) is echoed after the headers.
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if len > 0 {
                        let mut got = vec![0u8; len];
                        if r.read_exact(&mut got).is_err() {
                            return;
                        }
                        body.push_str(&format!(" body={}", String::from_utf8_lossy(&got)));
                    }
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
                let _ = w.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: test\r\n\r\n");
                let mut buf = [0u8; 1024];
                loop {
                    match r.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if w.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    });
    port
}

#[test]
fn ingress_routes_hosts_paths_tls_upgrades_and_empty_services() {
    let (server, client, node) = start();
    let (http, https) = (server.http, server.https);

    // The default class exists and kubectl shows it as kube-apiserver does.
    let classes = server.ok(&["get", "ingressclass"], None);
    assert!(
        classes.starts_with(
            "NAME    CONTROLLER         PARAMETERS   AGE\nskiff   skiff.io/ingress   <none>"
        ),
        "{classes}"
    );

    server.ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}---\n{}",
            web_app("alpha", &node),
            web_app("beta", &node)
        )),
    );
    for app in ["alpha", "beta"] {
        wait_for(&format!("{app} to run"), Duration::from_secs(90), || {
            let (pods, _) = smol::block_on(client.list::<Pod>(
                Some("default"),
                Some(&format!("app={app}")),
                None,
            ))
            .ok()?;
            pods.into_iter()
                .find(|p| p.status.phase.as_deref() == Some("Running"))
        });
    }

    // Before any Ingress: 404 from the proxy itself.
    wait_body(
        http,
        "alpha.example.com",
        "/",
        (404, "404 Not Found: no Ingress rule for this host and path"),
    );

    // The real kubectl: protobuf create, host + path rules, TLS for alpha.
    let (crt, key, der) = cert("alpha.example.com");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("tls.crt"), &crt).unwrap();
    std::fs::write(tmp.path().join("tls.key"), &key).unwrap();
    let crt_path = tmp.path().join("tls.crt").display().to_string();
    let key_path = tmp.path().join("tls.key").display().to_string();
    server.ok(
        &[
            "create",
            "secret",
            "tls",
            "alpha-tls",
            "--cert",
            &crt_path,
            "--key",
            &key_path,
        ],
        None,
    );
    server.ok(
        &[
            "create",
            "ingress",
            "web",
            "--rule=alpha.example.com/*=alpha:80,tls=alpha-tls",
            "--rule=beta.example.com/api*=beta:80",
            "--rule=beta.example.com/exact=alpha:80",
        ],
        None,
    );
    wait_body(http, "alpha.example.com", "/", (200, "alpha"));
    wait_body(http, "alpha.example.com:8080", "/api/", (200, "alpha-api"));
    wait_body(http, "beta.example.com", "/api/", (200, "beta-api"));
    assert_eq!(
        two_on_one_connection(http, "beta.example.com", ["/api/", "/api/"]),
        ("beta-api".to_string(), "beta-api".to_string())
    );
    // Prefix by path elements: /apiary is not under /api; Exact only matches itself.
    wait_body(
        http,
        "beta.example.com",
        "/apiary",
        (404, "404 Not Found: no Ingress rule for this host and path"),
    );
    // httpd's own 404 page, delimited by the end of its connection (no Content-Length).
    let (status, body) = get(http, "beta.example.com", "/exact").expect("answer");
    assert!(
        body.contains("404") && !body.contains("no Ingress rule"),
        "{body:?}"
    );
    assert_eq!(
        status, 404,
        "alpha has no /exact page: its httpd answers 404"
    );
    wait_body(
        http,
        "gamma.example.com",
        "/",
        (404, "404 Not Found: no Ingress rule for this host and path"),
    );

    // kubectl get/describe/explain; the class was defaulted, the status has the node.
    let ing = wait_for("the Ingress status", Duration::from_secs(20), || {
        let i = smol::block_on(client.get::<Ingress>("default", "web")).ok()?;
        let lb = i.status.load_balancer.as_ref()?;
        (!lb.ingress.is_empty()).then_some(i)
    });
    assert_eq!(ing.spec.ingress_class_name.as_deref(), Some("skiff"));
    assert_eq!(
        ing.status.load_balancer.unwrap().ingress[0].ip.as_deref(),
        Some("127.0.0.1")
    );
    let table = server.ok(&["get", "ingress"], None);
    let mut lines = table.lines();
    let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(head, ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..6],
        // kubectl puts both beta paths in one rule.
        [
            "web",
            "skiff",
            "alpha.example.com,beta.example.com",
            "127.0.0.1",
            "80,",
            "443"
        ],
        "{table}"
    );
    let described = server.ok(&["describe", "ingress", "web"], None);
    assert!(described.contains("alpha.example.com"), "{described}");
    assert!(
        described.contains("alpha-tls terminates alpha.example.com"),
        "{described}"
    );
    let explained = server.ok(&["explain", "ingress.spec.rules"], None);
    assert!(explained.contains("KIND:       Ingress"), "{explained}");
    assert!(explained.contains("host"), "{explained}");
    // Validation with Kubernetes' message.
    let bad = server.kubectl(
        &["create", "ingress", "bad", "--rule=1.2.3.4/=alpha:80"],
        None,
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("must be a DNS name, not an IP address"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // TLS by SNI from the Secret; a new certificate in the Secret is served without restart.
    let (served, status, body) =
        wait_for("TLS through the ingress", Duration::from_secs(20), || {
            tls_get(https, "alpha.example.com", &der)
        });
    assert_eq!((served, status, body.trim()), (der.clone(), 200, "alpha"));
    let (crt2, key2, der2) = cert("alpha.example.com");
    std::fs::write(tmp.path().join("tls.crt"), &crt2).unwrap();
    std::fs::write(tmp.path().join("tls.key"), &key2).unwrap();
    let yaml = server.ok(
        &[
            "create",
            "secret",
            "tls",
            "alpha-tls",
            "--cert",
            &crt_path,
            "--key",
            &key_path,
            "--dry-run=client",
            "-o",
            "yaml",
        ],
        None,
    );
    server.ok(&["apply", "-f", "-"], Some(&yaml));
    let (served2, _, _) = wait_for("the new certificate", Duration::from_secs(10), || {
        tls_get(https, "alpha.example.com", &der2)
    });
    assert_eq!(served2, der2);

    // defaultBackend: a request matching no rule goes there.
    server.ok(
        &["create", "ingress", "fallback", "--default-backend=beta:80"],
        None,
    );
    wait_body(http, "gamma.example.com", "/", (200, "beta"));

    // A Service without ready endpoints: 503.
    server.ok(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Service\nmetadata: {name: empty}\nspec:\n  selector: {app: none}\n  ports: [{port: 80, targetPort: 8080}]\n"),
    );
    server.ok(
        &[
            "create",
            "ingress",
            "empty",
            "--rule=empty.example.com/*=empty:80",
        ],
        None,
    );
    let (status, body) = wait_for("503 for the empty Service", Duration::from_secs(20), || {
        get(http, "empty.example.com", "/").filter(|(s, _)| *s == 503)
    });
    assert_eq!(
        (status, body.trim()),
        (
            503,
            "503 Service Unavailable: no ready endpoint for default/empty:80"
        )
    );

    // Scaled to zero: 503 as well.
    server.ok(&["scale", "deployment", "beta", "--replicas=0"], None);
    wait_for("503 for beta at zero", Duration::from_secs(60), || {
        get(http, "beta.example.com", "/api/").filter(|(s, _)| *s == 503)
    });

    // An upgrade passes through both ways: the echo server runs on the host, behind a
    // Service without selector whose Endpoints point at the bridge address.
    let echo_port = upgrade_echo_server();
    // An endpoint nothing listens on: its connects fail and the other endpoint is tried.
    let dead_port = free_port();
    let pod_ip = smol::block_on(client.list::<Pod>(Some("default"), Some("app=alpha"), None))
        .unwrap()
        .0
        .into_iter()
        .find_map(|p| p.status.pod_ip)
        .expect("alpha's IP");
    let host_ip = {
        let mut o: Vec<&str> = pod_ip.split('.').collect();
        o[3] = "1";
        o.join(".")
    };
    server.ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: ws}}\nspec:\n  ports: [{{port: 80}}]\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {{name: ws}}\nsubsets:\n- addresses: [{{ip: \"{host_ip}\"}}]\n  ports: [{{port: {dead_port}}}]\n- addresses: [{{ip: \"{host_ip}\"}}]\n  ports: [{{port: {echo_port}}}]\n"
        )),
    );
    server.ok(
        &["create", "ingress", "ws", "--rule=ws.example.com/*=ws:80"],
        None,
    );
    let mut s = wait_for("the upgrade", Duration::from_secs(20), || {
        let mut s = TcpStream::connect(http).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /chat HTTP/1.1\r\nHost: ws.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").ok()?;
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).ok()? == 0 {
                return None;
            }
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        (head.starts_with("http/1.1 101") && head.contains("upgrade: websocket")).then_some(s)
    });
    // Round-robin puts the dead endpoint first for every other request: all succeed.
    for _ in 0..4 {
        assert_eq!(
            get(http, "ws.example.com:8080", "/").map(|(s, b)| (s, b.trim().to_string())),
            Some((
                200,
                "ok x-forwarded-for: 127.0.0.1;x-forwarded-host: ws.example.com:8080;x-forwarded-proto: http"
                    .to_string()
            ))
        );
    }
    // A request body is streamed to the endpoint.
    let mut p = TcpStream::connect(http).unwrap();
    p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let payload = "x".repeat(100_000);
    write!(
        p,
        "POST /upload HTTP/1.1\r\nHost: ws.example.com\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    p.read_to_end(&mut answer).unwrap();
    let (status, body) = parse_answer(&answer).expect("an answer to the POST");
    assert_eq!(status, 200);
    assert!(
        body.ends_with(&format!(" body={payload}")),
        "{}",
        &body[..body.len().min(200)]
    );

    for msg in ["ping", "pong and more"] {
        s.write_all(msg.as_bytes()).unwrap();
        let mut buf = vec![0u8; msg.len()];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(String::from_utf8_lossy(&buf), msg);
    }
}
