//! The real `kubectl exec`, `cp` and `attach` against `skiff server` with its own node and a
//! real busybox container: output, exit codes, stdin, a terminal with resizes, a cp round
//! trip, attach, and who may exec. Needs root, /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::{Container, Pod, PodSpec};
use api::kubeconfig::Kubeconfig;
use api::meta::ObjectMeta;
use common::{free_port, wait_for};

const IMAGE: &str = "skiff.test/exec:v1";
const POD: &str = "shell";

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

/// busybox applets the tests run, as links in /bin, and a page for httpd.
fn tools_layer() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for applet in [
        "cat", "echo", "tar", "httpd", "stty", "tty", "true", "false", "sleep", "ls", "mkdir",
        "read", "wc", "head",
    ] {
        let mut h = header(tar::EntryType::Symlink, 0, 0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("link");
    }
    for (dir, mode) in [("www/", 0o755), ("tmp/", 0o1777)] {
        let mut h = header(tar::EntryType::Directory, 0, mode);
        b.append_data(&mut h, dir, std::io::empty()).expect("dir");
    }
    let page = b"hello from the pod\n";
    let mut h = header(tar::EntryType::Regular, page.len() as u64, 0o644);
    b.append_data(&mut h, "www/index.html", &page[..])
        .expect("page");
    b.into_inner().expect("tar")
}

use common::NodeServer as Server;

impl Server {
    fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        common::run_kubectl(&self.kubeconfig(), args, stdin)
    }
}

/// Starts `skiff server` with its own node, the test image imported, and a running pod.
fn start() -> (Server, Client, String) {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("exec"),
            tools_layer(),
        ],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let node = format!("exec-{}", std::process::id());
    let cgroup_parent = format!("skiff-exec-{}", std::process::id());
    let port = free_port();
    let child = common::node_server_command(dir.path(), run.path(), port, &node, &cgroup_parent)
        .spawn()
        .expect("start skiff server");
    let server = Server {
        child,
        dir,
        run,
        cgroup_parent,
    };
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);
    let pod = Pod {
        metadata: ObjectMeta {
            name: POD.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.clone()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                // httpd (daemonised) for port-forward, then a line every 200 ms for attach.
                args: vec![
                    "sh".into(),
                    "-c".into(),
                    "httpd -p 8080 -h /www; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"
                        .into(),
                ],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    };
    smol::block_on(client.create(&pod)).expect("create pod");
    wait_for("the pod to run", Duration::from_secs(60), || {
        smol::block_on(client.get::<Pod>("default", POD))
            .ok()
            .filter(|p| p.status.phase.as_deref() == Some("Running"))
    });
    (server, client, node)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Reads from a terminal's master side until `want` shows up (or panics after `timeout`).
fn read_until(master: &mut std::fs::File, seen: &mut String, want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while !seen.contains(want) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {want:?} on the terminal; saw {seen:?}"
        );
        match master.read(&mut buf) {
            Ok(0) => panic!("the terminal closed before {want:?}; saw {seen:?}"),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("reading the terminal: {e}; saw {seen:?}"),
        }
    }
}

fn set_size(fd: &impl AsRawFd, rows: u16, cols: u16) {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a pointer valid for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    assert_eq!(r, 0, "TIOCSWINSZ");
}

/// `kubectl exec -it` on a terminal of its own: the size it starts with, a resize while the
/// shell runs, and the exit code.
fn tty_session(server: &Server) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    set_size(&pty.master, 33, 101);
    let slave: OwnedFd = pty.slave;
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args([
            "exec",
            "-it",
            POD,
            "--",
            "sh",
            "-c",
            "stty size; test -t 0 && echo on-a-terminal; read line; stty size; exit 4",
        ])
        .stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stdout(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave));
    // kubectl learns of resizes by SIGWINCH, which goes to the terminal's foreground process
    // group: make the terminal kubectl's controlling terminal.
    // SAFETY: only async-signal-safe calls (setsid, ioctl) between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("kubectl exec -it");
    let mut master = std::fs::File::from(pty.master);
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut seen = String::new();
    read_until(&mut master, &mut seen, "33 101", Duration::from_secs(30));
    read_until(
        &mut master,
        &mut seen,
        "on-a-terminal",
        Duration::from_secs(10),
    );
    set_size(&master, 40, 120);
    std::thread::sleep(Duration::from_millis(500));
    master.write_all(b"go\r").expect("type");
    read_until(&mut master, &mut seen, "40 120", Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "kubectl exec -it did not end");
        let mut buf = [0u8; 1024];
        let _ = master.read(&mut buf);
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(4),
        "exit code through the terminal: {seen}"
    );
}

#[test]
fn kubectl_exec_cp_and_attach() {
    let (server, _client, node) = start();

    // Output on both streams and the exit code.
    let out = server.kubectl(
        &[
            "exec",
            POD,
            "--",
            "sh",
            "-c",
            "echo to-stdout; echo to-stderr >&2; exit 3",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "to-stdout\n");
    assert!(
        text(&out.stderr).contains("to-stderr"),
        "{}",
        text(&out.stderr)
    );

    let ok = server.kubectl(&["exec", POD, "--", "true"], None);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let missing = server.kubectl(&["exec", POD, "--", "no-such-program"], None);
    assert!(!missing.status.success());

    // stdin, closed at its end (v5's close signal: cat sees end of file).
    let input: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let out = server.kubectl(&["exec", "-i", POD, "--", "wc", "-c"], Some(&input));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "200000");

    // A terminal.
    tty_session(&server);

    // cp in and out (tar over exec).
    let work = tempfile::tempdir().expect("tmp");
    let src = work.path().join("payload.bin");
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&src, &payload).expect("write payload");
    let to_pod = format!("{POD}:/tmp/payload.bin");
    let out = server.kubectl(&["cp", src.to_str().unwrap(), &to_pod], None);
    assert!(out.status.success(), "cp in: {}", text(&out.stderr));
    let listed = server.kubectl(&["exec", POD, "--", "wc", "-c", "/tmp/payload.bin"], None);
    assert!(
        text(&listed.stdout).contains("300000"),
        "{}",
        text(&listed.stdout)
    );
    let back = work.path().join("back.bin");
    let out = server.kubectl(&["cp", &to_pod, back.to_str().unwrap()], None);
    assert!(out.status.success(), "cp out: {}", text(&out.stderr));
    assert_eq!(std::fs::read(&back).expect("copied back"), payload);

    // attach: the main process's output from now on.
    attach_shows_output(&server);

    // port-forward to the pod's httpd, two connections in a row.
    port_forward_answers(&server);

    // Only admins: the node's own certificate may not exec.
    node_may_not_exec(&server, &node);
}

fn attach_shows_output(server: &Server) {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["attach", POD])
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
                let _ = tx.send(seen.clone());
                return;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let out = child.wait_with_output().expect("attach output");
    let seen = seen.expect("attach output in time");
    assert!(
        String::from_utf8_lossy(&seen).matches("tick").count() >= 3,
        "attach: {} / {}",
        text(&seen),
        text(&out.stderr)
    );
}

/// One HTTP GET over a fresh connection to `port`; the whole answer.
fn http_get(port: u16) -> String {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    conn.write_all(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
        .expect("request");
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    text(&answer)
}

fn port_forward_answers(server: &Server) {
    let local = free_port();
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args([
            "port-forward",
            &format!("pod/{POD}"),
            &format!("{local}:8080"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let listening = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", local)).is_ok()
    });
    let answers: Vec<String> = if listening {
        (0..2).map(|_| http_get(local)).collect()
    } else {
        Vec::new()
    };
    let _ = child.kill();
    let out = child.wait_with_output().expect("port-forward output");
    assert!(
        listening,
        "kubectl port-forward did not listen: {}",
        text(&out.stderr)
    );
    for a in answers {
        assert!(
            a.contains("200 OK") && a.contains("hello from the pod"),
            "answer: {a:?}; kubectl: {}",
            text(&out.stderr)
        );
    }
}

/// A kubeconfig with the node's client certificate gets 403 for exec.
fn node_may_not_exec(server: &Server, node: &str) {
    let agent_dir = server.dir.path().join("agent");
    let kc = Kubeconfig::load(&server.kubeconfig()).expect("kubeconfig");
    let server_url = kc
        .clusters
        .first()
        .map(|c| c.cluster.server.clone())
        .expect("cluster");
    let path = agent_dir.join("node.kubeconfig");
    write_node_kubeconfig(&path, &server_url, &agent_dir);
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&path)
        .args(["exec", POD, "--", "true"])
        .output()
        .expect("kubectl as the node");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("forbidden") && err.contains(&format!("system:node:{node}")),
        "{err}"
    );
}

fn write_node_kubeconfig(path: &Path, server: &str, agent_dir: &Path) {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: node-user\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: node-ctx\n  context:\n    cluster: c\n    user: node-user\ncurrent-context: node-ctx\n",
        ca = agent_dir.join("ca.crt").display(),
        crt = agent_dir.join("node.crt").display(),
        key = agent_dir.join("node.key").display(),
    );
    std::fs::write(path, yaml).expect("node kubeconfig");
}
