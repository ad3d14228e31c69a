//! Pod logs end to end: a real `skiff server`, a real `skiff-agent` (with its HTTPS log
//! endpoint), real containers, `skiff logs` and the real `kubectl logs`. Needs root and
//! /bin/busybox (containers), and kubectl on the PATH.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::{Container, Node, Pod, PodSpec};
use api::meta::ObjectMeta;
use common::{skiff_bin, wait_for, TestAgent, TestServer};

const IMAGE: &str = "skiff.test/testbox:v1";
const COUNTER: &str = "i=0; while true; do i=$((i+1)); echo \"line $i\"; sleep 0.2; done";

fn pod(name: &str, node: &str, script: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some("Always".into()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                args: vec!["sh".into(), "-c".into(), script.into()],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn get(c: &Client, path: &str) -> (u16, String) {
    let r = smol::block_on(c.request("GET", path, None, "*/*")).expect("request");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn log(c: &Client, pod: &str, query: &str) -> String {
    let (code, body) = get(
        c,
        &format!("/api/v1/namespaces/default/pods/{pod}/log?{query}"),
    );
    assert_eq!(code, 200, "{body}");
    body
}

/// The numbers of `line N` lines.
fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            l.rsplit_once("line ")
                .and_then(|(_, n)| n.trim().parse().ok())
        })
        .collect()
}

fn consecutive(ns: &[u64]) -> bool {
    ns.windows(2).all(|w| w[1] == w[0] + 1)
}

fn kubectl(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", server.dir.path())
        .output()
        .expect("run kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd`, collects `want` lines of its stdout (or fewer after `timeout`), kills it.
fn first_lines(mut cmd: Command, want: usize, timeout: Duration) -> Vec<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut lines = Vec::new();
    while lines.len() < want && Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

/// One raw request to the agent's log endpoint with the given client identity; answers
/// what came back (empty when the TLS layer refused).
fn raw_agent_request(
    port: u16,
    node_name: &str,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> String {
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
    let name = ServerName::try_from(node_name.to_string()).expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("conn");
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    let request = "GET /containerLogs/default/counter/main?tailLines=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    if tls.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn pod_logs_end_to_end() {
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();

    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("hello"), IMAGE);
    agent.import(&archive);
    {
        use std::os::unix::process::CommandExt;
        let child = agent
            .command(Some(&token))
            .args(["--container-log-max-size", "4Ki"])
            .args(["--container-log-max-files", "3"])
            .process_group(0)
            .spawn()
            .expect("start skiff-agent");
        agent.groups.push(child.id() as i32);
        agent.child = Some(child);
    }
    let node_name = agent.node_name.clone();

    // The Node publishes the endpoint's port.
    let port = wait_for(
        "the node to publish its port",
        Duration::from_secs(30),
        || {
            smol::block_on(client.get::<Node>("", &node_name))
                .ok()
                .and_then(|n| n.status.daemon_endpoints)
                .and_then(|d| d.kubelet_endpoint)
                .map(|e| e.port)
                .filter(|p| *p > 0)
        },
    );
    let port = u16::try_from(port).expect("port");

    let before = std::time::SystemTime::now();
    smol::block_on(client.create(&pod("counter", &node_name, COUNTER))).expect("create");
    let chatty = "while true; do seq 1 200; sleep 0.2; done";
    smol::block_on(client.create(&pod("chatty", &node_name, chatty))).expect("create");
    let crash = "echo \"started $(date +%s%N)\"; sleep 1; exit 1";
    smol::block_on(client.create(&pod("crash", &node_name, crash))).expect("create");
    wait_for("counter to log 10 lines", Duration::from_secs(60), || {
        let (code, body) = get(&client, "/api/v1/namespaces/default/pods/counter/log");
        (code == 200 && numbers(&body).len() >= 10).then_some(())
    });

    // `skiff logs`: everything from line 1, in order.
    let out = Command::new(skiff_bin())
        .args(["logs", "counter", "--kubeconfig"])
        .arg(server.kubeconfig())
        .output()
        .expect("skiff logs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = numbers(&String::from_utf8_lossy(&out.stdout));
    assert!(
        all.len() >= 10 && all[0] == 1 && consecutive(&all),
        "{all:?}"
    );

    // tailLines: exactly the last lines.
    let tail = numbers(&log(&client, "counter", "tailLines=3"));
    assert_eq!(tail.len(), 3, "{tail:?}");
    assert!(consecutive(&tail) && tail[0] >= all[all.len() - 1].saturating_sub(2));

    // timestamps: RFC 3339 with nanoseconds, ordered, not before the pod, not in the future.
    let stamped = log(&client, "counter", "timestamps=true");
    // Fixed-width UTC stamps compare as strings in time order.
    let stamp_of = |t: std::time::SystemTime| {
        let nanos = t
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_nanos();
        agent::runtime::logs::format_rfc3339_nanos(i64::try_from(nanos).expect("nanos"))
    };
    let mut last = stamp_of(before - Duration::from_secs(1));
    let now = stamp_of(std::time::SystemTime::now());
    for line in stamped.lines() {
        let (ts, rest) = line.split_once(' ').expect("a stamp");
        assert!(rest.starts_with("line "), "{line}");
        assert!(
            ts.len() == 30 && ts.ends_with('Z') && &ts[10..11] == "T",
            "{ts}"
        );
        assert!(ts >= last.as_str(), "stamps go back: {line}");
        assert!(ts <= now.as_str(), "{line}");
        last = ts.to_string();
    }

    // sinceSeconds: only the recent lines (5 a second, stamped at most a second late).
    std::thread::sleep(Duration::from_secs(3));
    let recent = numbers(&log(&client, "counter", "sinceSeconds=1"));
    let total = numbers(&log(&client, "counter", "")).len();
    assert!(!recent.is_empty() && recent.len() <= 12, "{recent:?}");
    assert!(
        recent[0] > 5 && total > recent.len() + 5,
        "{recent:?} of {total}"
    );
    assert!(consecutive(&recent));

    // limitBytes.
    assert_eq!(log(&client, "counter", "limitBytes=7"), "line 1\n");

    // follow: live lines, with `skiff logs -f` and `kubectl logs -f`.
    let mut cmd = Command::new(skiff_bin());
    cmd.args(["logs", "-f", "--tail", "1", "counter", "--kubeconfig"])
        .arg(server.kubeconfig());
    let started = Instant::now();
    let live = numbers(&first_lines(cmd, 4, Duration::from_secs(20)).join("\n"));
    assert_eq!(live.len(), 4, "{live:?}");
    assert!(consecutive(&live), "{live:?}");
    assert!(started.elapsed() >= Duration::from_millis(400), "not live");

    let mut cmd = Command::new("kubectl");
    cmd.args(["logs", "-f", "--tail", "2", "counter"])
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", server.dir.path());
    let live = numbers(&first_lines(cmd, 5, Duration::from_secs(20)).join("\n"));
    assert_eq!(live.len(), 5, "{live:?}");
    assert!(consecutive(&live), "{live:?}");

    let (ok, out, err) = kubectl(&server, &["logs", "--tail", "3", "counter"]);
    assert!(ok, "{err}");
    assert_eq!(numbers(&out).len(), 3, "{out}");
    let (ok, out, err) = kubectl(
        &server,
        &[
            "logs",
            "counter",
            "-c",
            "main",
            "--since",
            "2s",
            "--timestamps",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        !out.is_empty() && out.lines().all(|l| l.contains("Z line ")),
        "{out}"
    );

    // Errors are Kubernetes Status objects.
    let (code, body) = get(
        &client,
        "/api/v1/namespaces/default/pods/counter/log?container=nope",
    );
    assert_eq!(code, 400, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status json");
    assert_eq!(status["kind"], "Status");
    assert_eq!(
        status["message"],
        "container nope is not valid for pod counter"
    );
    let (ok, _, err) = kubectl(&server, &["logs", "counter", "-c", "nope"]);
    assert!(
        !ok && err.contains("container nope is not valid for pod counter"),
        "{err}"
    );
    let (code, body) = get(&client, "/api/v1/namespaces/default/pods/ghost/log");
    assert_eq!(code, 404, "{body}");
    let (code, body) = get(
        &client,
        "/api/v1/namespaces/default/pods/counter/log?previous=true",
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("previous terminated container"), "{body}");

    // previous: after a restart, the earlier run's log.
    wait_for("crash to restart", Duration::from_secs(60), || {
        smol::block_on(client.get::<Pod>("default", "crash"))
            .ok()
            .filter(|p| {
                p.status
                    .container_statuses
                    .first()
                    .is_some_and(|c| c.restart_count >= 1)
            })
    });
    let previous = wait_for("the previous log", Duration::from_secs(20), || {
        let (code, body) = get(
            &client,
            "/api/v1/namespaces/default/pods/crash/log?previous=true",
        );
        (code == 200 && body.starts_with("started ")).then_some(body)
    });
    let current = wait_for("the current log", Duration::from_secs(30), || {
        let body = log(&client, "crash", "");
        body.starts_with("started ").then_some(body)
    });
    assert_ne!(previous, current);
    let (ok, out, err) = kubectl(&server, &["logs", "crash", "--previous"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("started "), "{out}");
    // A follow of a container that exits ends by itself.
    let (tx, rx) = mpsc::channel();
    let c2 = client.clone();
    std::thread::spawn(move || {
        let _ = tx.send(get(
            &c2,
            "/api/v1/namespaces/default/pods/crash/log?follow=true",
        ));
    });
    let (code, body) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the follow of an exiting container ends");
    assert_eq!(code, 200, "{body}");

    // Only the server's certificate is served by the agent's endpoint.
    let ca = std::fs::read_to_string(server.dir.path().join("pki/ca.crt")).expect("ca");
    let api_cert =
        std::fs::read_to_string(server.dir.path().join("pki/apiserver-client.crt")).expect("crt");
    let api_key =
        std::fs::read_to_string(server.dir.path().join("pki/apiserver-client.key")).expect("key");
    let answer = raw_agent_request(port, &node_name, &ca, Some((&api_cert, &api_key)));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let node_cert = std::fs::read_to_string(agent.data_dir().join("node.crt")).expect("crt");
    let node_key = std::fs::read_to_string(agent.data_dir().join("node.key")).expect("key");
    // A node may only fetch image blobs from its site's peers.
    let answer = raw_agent_request(port, &node_name, &ca, Some((&node_cert, &node_key)));
    assert!(
        answer.starts_with("HTTP/1.1 403"),
        "a node certificate was accepted: {answer}"
    );
    let answer = raw_agent_request(port, &node_name, &ca, None);
    assert!(answer.is_empty(), "no certificate was accepted: {answer}");
    let self_key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "skiff-apiserver");
    let self_made = params.self_signed(&self_key).expect("cert");
    let answer = raw_agent_request(
        port,
        &node_name,
        &ca,
        Some((&self_made.pem(), &self_key.serialize_pem())),
    );
    assert!(
        answer.is_empty(),
        "a self-made certificate was accepted: {answer}"
    );

    // Rotation keeps the chatty container's files under the cap (plus what the container
    // writes before the keeper's next look: about a second of output, 3.5 KB here, more when
    // a loaded machine runs the keeper's thread late: 2.6 s once in the full suite) and at most 3 files.
    let uid = smol::block_on(client.get::<Pod>("default", "chatty"))
        .expect("chatty")
        .metadata
        .uid;
    let dir = agent
        .data_dir()
        .join("pods")
        .join(&uid)
        .join("logs")
        .join("main");
    wait_for("chatty's log to rotate", Duration::from_secs(30), || {
        dir.join("0.log.2").exists().then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut logs = Vec::new();
    for e in std::fs::read_dir(&dir).expect("dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".idx") {
            let len = e.metadata().expect("meta").len();
            assert!(len <= 4096 + 16 * 1024, "{name} is {len} bytes");
            logs.push(name);
        }
    }
    logs.sort();
    assert_eq!(logs, ["0.log", "0.log.1", "0.log.2"]);
    // The rotated files still read as one log, in order.
    let body = log(&client, "chatty", "");
    let seqs: Vec<u64> = body.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(seqs.len() > 400, "{}", seqs.len());
}
