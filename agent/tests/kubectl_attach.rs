//! Containers with stdin and terminals, driven by the real `kubectl` against `skiff server`
//! with its own node and real busybox containers: `kubectl attach -i` to a container with
//! `stdin` (input read, stdin still open for the next attach) and with `stdinOnce` (end of
//! file after the session), `kubectl run -i --rm` with piped input, `kubectl debug -i` with
//! piped input, `kubectl run -it` and `kubectl debug -it` on a terminal (the size kubectl
//! sends, a resize, typed input), and all of these kept across a restart of the server and
//! its agent. Needs root, /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::{Container, Pod, PodSpec};
use api::meta::ObjectMeta;
use common::{free_port, wait_for, NodeServer as Server};

const IMAGE: &str = "skiff.test/attach:v1";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn kubectl_cmd(server: &Server, args: &[&str]) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(server.kubeconfig()).args(args);
    cmd
}

fn ok(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = common::run_kubectl(&server.kubeconfig(), args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs kubectl with `input` on its stdin (left open) until its output shows `want`; then
/// stops it. Answers the output.
fn until_output(server: &Server, args: &[&str], input: &[u8], want: &str) -> String {
    let mut child = kubectl_cmd(server, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).expect("write stdin");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().expect("stdout");
    let s = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            s.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(&seen.lock().unwrap()).contains(want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("kubectl");
    let seen = text(&seen.lock().unwrap());
    assert!(
        seen.contains(want),
        "kubectl {args:?}: wanted {want:?}, saw {seen:?}; stderr {}",
        text(&out.stderr)
    );
    seen
}

fn pod(name: &str, node: &str, script: &str, stdin_once: bool, restart: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: Some(1),
            restart_policy: Some(restart.into()),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                image_pull_policy: Some("Never".into()),
                args: vec!["sh".into(), "-c".into(), script.into()],
                stdin: Some(true),
                stdin_once: Some(stdin_once),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn wait_running(client: &Client, name: &str) {
    wait_for(
        &format!("pod {name} to run"),
        Duration::from_secs(60),
        || {
            smol::block_on(client.get::<Pod>("default", name))
                .ok()
                .filter(|p| p.status.phase.as_deref() == Some("Running"))
        },
    );
}

fn wait_phase(client: &Client, name: &str, phase: &str) {
    wait_for(
        &format!("pod {name} to be {phase}"),
        Duration::from_secs(60),
        || {
            smol::block_on(client.get::<Pod>("default", name))
                .ok()
                .filter(|p| p.status.phase.as_deref() == Some(phase))
        },
    );
}

#[test]
fn kubectl_attach_run_and_debug_with_stdin_and_terminals() {
    image_util::require_root_and_busybox();
    let node = format!("attach-{}", std::process::id());
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("attach"),
            image_util::applets_layer(&["cat", "echo", "sleep", "stty", "tty", "true"]),
        ],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let port = free_port();
    let server = server_at(dir, run, port, &node);
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);

    let started = Instant::now();
    stdin_stays_open(&server, &client, &node);
    eprintln!("stdin across attaches: {:?}", started.elapsed());
    let t = Instant::now();
    stdin_once_closes(&server, &client, &node);
    eprintln!("stdinOnce: {:?}", t.elapsed());
    let t = Instant::now();
    run_with_piped_input(&server, &client);
    eprintln!("run -i: {:?}", t.elapsed());
    let t = Instant::now();
    debug_with_piped_input(&server, &client, &node);
    eprintln!("debug -i: {:?}", t.elapsed());
    let t = Instant::now();
    run_on_a_terminal(&server, &client);
    eprintln!("run -it: {:?}", t.elapsed());
    let t = Instant::now();
    survive_a_restart(server, client, port, &node);
    eprintln!("across a restart: {:?}", t.elapsed());
}

fn server_at(dir: tempfile::TempDir, run: tempfile::TempDir, port: u16, node: &str) -> Server {
    let cgroup_parent = format!("skiff-attach-{}", std::process::id());
    let child = common::node_server_command(dir.path(), run.path(), port, node, &cgroup_parent)
        .spawn()
        .expect("start skiff server");
    Server {
        child,
        dir,
        run,
        cgroup_parent,
    }
}

/// The server and its agent restart while containers run: an open stdin, a stdinOnce stdin
/// not attached yet and a terminal all carry on (the last two held by a holder process), and
/// no container is restarted.
fn survive_a_restart(mut server: Server, client: Client, port: u16, node: &str) {
    let script = "while read x; do echo got=$x; done; echo eof";
    smol::block_on(client.create(&pod("keep2", node, script, false, "Never"))).expect("create");
    smol::block_on(client.create(&pod("once2", node, "cat; echo eof", true, "Never")))
        .expect("create");
    let mut term = pod("term2", node, script, false, "Never");
    term.spec.containers[0].tty = Some(true);
    smol::block_on(client.create(&term)).expect("create");
    for name in ["keep2", "once2", "term2"] {
        wait_running(&client, name);
    }
    let _ = server.child.kill();
    let _ = server.child.wait();
    let Server { dir, run, .. } = &mut server;
    let (dir, run) = (
        std::mem::replace(dir, tempfile::tempdir().expect("dir")),
        std::mem::replace(run, tempfile::tempdir().expect("dir")),
    );
    // Dropping the old value would remove the node's containers: forget its directories.
    let old = std::mem::take(&mut server.cgroup_parent);
    drop(server);
    let server = server_at(dir, run, port, node);
    assert_eq!(server.cgroup_parent, old);
    let client = common::wait_for_own_node(&server.kubeconfig(), node);
    std::thread::sleep(Duration::from_secs(2));
    until_output(&server, &["attach", "-i", "keep2"], b"a\n", "got=a");
    let out = ok(&server, &["attach", "-i", "once2"], Some(b"b\n"));
    assert!(out.contains("b\neof"), "{out}");
    until_output(&server, &["attach", "-i", "term2"], b"c\n", "got=c");
    for name in ["keep2", "term2"] {
        let p = smol::block_on(client.get::<Pod>("default", name)).expect("pod");
        let s = &p.status.container_statuses[0];
        assert_eq!(s.restart_count, 0, "{name}: {s:?}");
        assert!(
            s.state.as_ref().is_some_and(|s| s.running.is_some()),
            "{name}: {s:?}"
        );
    }
    let logs = ok(&server, &["logs", "term2"], None);
    assert!(logs.contains("got=c") && !logs.contains("eof"), "{logs}");
}

/// `stdin: true`: each attach's input is read, and the container's stdin stays open between
/// attaches (no end of file).
fn stdin_stays_open(server: &Server, client: &Client, node: &str) {
    let script = "while read x; do echo got $x; done; echo eof";
    smol::block_on(client.create(&pod("keep", node, script, false, "Never"))).expect("create");
    wait_running(client, "keep");
    until_output(server, &["attach", "-i", "keep"], b"one\n", "got one");
    until_output(server, &["attach", "-i", "keep"], b"two\n", "got two");
    // kubectl closed its stdin each time: the container's stays open.
    std::thread::sleep(Duration::from_millis(500));
    let logs = ok(server, &["logs", "keep"], None);
    assert_eq!(logs, "got one\ngot two\n", "{logs}");
    wait_running(client, "keep");
    ok(server, &["delete", "pod", "keep", "--wait=false"], None);
}

/// `stdinOnce: true`: the container reads end of file when the first session's stdin
/// closes; kubectl's attach ends with the container.
fn stdin_once_closes(server: &Server, client: &Client, node: &str) {
    let script = "cat; echo eof";
    smol::block_on(client.create(&pod("once", node, script, true, "Never"))).expect("create");
    wait_running(client, "once");
    let out = ok(
        server,
        &["attach", "-i", "once"],
        Some(b"line one\nline two\n"),
    );
    assert!(out.contains("line one\nline two\neof"), "{out}");
    wait_phase(client, "once", "Succeeded");
    ok(server, &["delete", "pod", "once", "--wait=false"], None);
}

/// `kubectl run -i --rm` with piped input: the pod's container reads it, kubectl shows the
/// answer and deletes the pod.
fn run_with_piped_input(server: &Server, client: &Client) {
    let out = ok(
        server,
        &[
            "run",
            "-i",
            "--rm",
            "--restart=Never",
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "runner",
            "--",
            "sh",
            "-c",
            "read x; echo got $x",
        ],
        Some(b"hello\n"),
    );
    assert!(out.contains("got hello"), "{out}");
    wait_for("the run pod to go", Duration::from_secs(30), || {
        smol::block_on(client.get::<Pod>("default", "runner"))
            .is_err()
            .then_some(())
    });
}

/// `kubectl debug -i --target` with piped input, and `-it` on a terminal.
fn debug_with_piped_input(server: &Server, client: &Client, node: &str) {
    let mut target = pod("target", node, "exec sleep 3131", false, "Always");
    target.spec.containers[0].stdin = None;
    target.spec.containers[0].stdin_once = None;
    smol::block_on(client.create(&target)).expect("create");
    wait_running(client, "target");
    let out = ok(
        server,
        &[
            "debug",
            "target",
            "-i",
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--target=main",
            "--container=dbg",
            "--",
            "sh",
            "-c",
            "read x; echo debugged $x",
        ],
        Some(b"it\n"),
    );
    assert!(out.contains("debugged it"), "{out}");
    // `-it`: a terminal of kubectl's size; what is typed is read.
    let (mut child, mut master) = kubectl_on_a_terminal(
        server,
        &[
            "debug",
            "target",
            "-it",
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--target=main",
            "--container=dbgt",
            "--",
            "sh",
            "-c",
            "read x; echo typed=$x; stty size",
        ],
        21,
        77,
    );
    let mut seen = String::new();
    read_until(
        &mut master,
        &mut seen,
        "try pressing enter",
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(1000));
    master.write_all(b"keys\r").expect("type");
    read_until(
        &mut master,
        &mut seen,
        "typed=keys",
        Duration::from_secs(20),
    );
    read_until(&mut master, &mut seen, "21 77", Duration::from_secs(20));
    assert_eq!(
        wait_exit(&mut child, &mut master, &mut seen),
        Some(0),
        "{seen}"
    );
    ok(server, &["delete", "pod", "target", "--wait=false"], None);
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

/// kubectl, on a terminal of its own (its controlling terminal, so that it gets SIGWINCH),
/// with `args`; answers the child and the terminal's master side (non-blocking).
fn kubectl_on_a_terminal(
    server: &Server,
    args: &[&str],
    rows: u16,
    cols: u16,
) -> (std::process::Child, std::fs::File) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    set_size(&pty.master, rows, cols);
    let slave: OwnedFd = pty.slave;
    let mut cmd = kubectl_cmd(server, args);
    cmd.stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stdout(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave));
    // SAFETY: only async-signal-safe calls (setsid, ioctl) between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("kubectl on a terminal");
    let master = std::fs::File::from(pty.master);
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    (child, master)
}

/// Waits for kubectl to end while draining its terminal; answers its exit code.
fn wait_exit(
    child: &mut std::process::Child,
    master: &mut std::fs::File,
    seen: &mut String,
) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s.code();
        }
        assert!(Instant::now() < deadline, "kubectl did not end: {seen}");
        let mut buf = [0u8; 1024];
        if let Ok(n @ 1..) = master.read(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `kubectl run -it --rm`: the container has a terminal of the size of kubectl's, follows
/// its resizes, and reads what is typed.
fn run_on_a_terminal(server: &Server, client: &Client) {
    let script = "read first; stty size; test -t 0 && echo on-a-terminal; \
                  echo typed=$first; read second; stty size; echo bye";
    let (mut child, mut master) = kubectl_on_a_terminal(
        server,
        &[
            "run",
            "-it",
            "--rm",
            "--restart=Never",
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "term",
            "--",
            "sh",
            "-c",
            script,
        ],
        33,
        101,
    );
    let mut seen = String::new();
    read_until(
        &mut master,
        &mut seen,
        "try pressing enter",
        Duration::from_secs(60),
    );
    // The attach is being set up: let its first resize arrive before typing.
    wait_running(client, "term");
    std::thread::sleep(Duration::from_millis(1000));
    master.write_all(b"first\r").expect("type");
    read_until(
        &mut master,
        &mut seen,
        "typed=first",
        Duration::from_secs(20),
    );
    assert!(seen.contains("33 101"), "{seen}");
    assert!(seen.contains("on-a-terminal"), "{seen}");
    set_size(&master, 40, 120);
    std::thread::sleep(Duration::from_millis(500));
    master.write_all(b"second\r").expect("type");
    read_until(&mut master, &mut seen, "40 120", Duration::from_secs(20));
    let code = wait_exit(&mut child, &mut master, &mut seen);
    assert_eq!(code, Some(0), "{seen}");
    wait_for("the terminal pod to go", Duration::from_secs(30), || {
        smol::block_on(client.get::<Pod>("default", "term"))
            .is_err()
            .then_some(())
    });
}
