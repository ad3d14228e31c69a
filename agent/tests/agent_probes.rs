//! Probes end to end: a real `skiff server`, a real `skiff-agent`, real containers probed by
//! exec, httpGet (busybox httpd inside the pod's network namespace) and tcpSocket. Needs root
//! and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::time::{Duration, Instant};

use api::core::{
    ContainerPort, ContainerStatus, ExecAction, HttpGetAction, Pod, Probe, TcpSocketAction,
};
use api::meta::{DeleteOptions, IntOrString};
use common::{get_pod, phase, pod, wait_for, TestAgent, TestServer};

const IMAGE: &str = common::TEST_IMAGE;

fn main_status(p: &Pod) -> Option<&ContainerStatus> {
    p.status.container_statuses.first()
}

fn condition(p: &Pod, type_: &str) -> String {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn is_running(p: &Pod) -> bool {
    main_status(p)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// A probe with period 1 s and the given handler and thresholds.
fn probe(failure: i32) -> Probe {
    Probe {
        period_seconds: Some(1),
        timeout_seconds: Some(2),
        failure_threshold: Some(failure),
        ..Default::default()
    }
}

fn exec(cmd: &str, failure: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: vec!["sh".into(), "-c".into(), cmd.into()],
        }),
        ..probe(failure)
    }
}

fn http(path: &str, port: IntOrString, failure: i32) -> Probe {
    Probe {
        http_get: Some(HttpGetAction {
            path: Some(path.into()),
            port,
            ..Default::default()
        }),
        ..probe(failure)
    }
}

/// Zombie children of `pid`, from /proc.
fn zombies_of(pid: u32) -> Vec<i32> {
    let me = pid.to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let mut fields = stat
            .rfind(')')
            .map(|i| stat[i + 1..].split_whitespace())
            .into_iter()
            .flatten();
        let state = fields.next();
        let ppid = fields.next();
        if ppid == Some(me.as_str()) && state == Some("Z") {
            out.push(p);
        }
    }
    out
}

#[test]
fn probes_drive_readiness_and_restarts() {
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();
    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("hello"), IMAGE);
    agent.import(&archive);
    agent.start(Some(&token));
    let node = agent.node_name.clone();

    // Readiness follows a file the container creates after 4 s and removes 6 s later.
    let mut ready_file = pod(
        "ready-file",
        &node,
        &[
            "sh",
            "-c",
            "sleep 4; touch /data/ready; sleep 6; rm /data/ready; exec sleep 3600",
        ],
        None,
    );
    ready_file.spec.containers[0].readiness_probe = Some(exec("test -f /data/ready", 1));

    // Liveness passes for about 4 s, then fails: killed (grace 2 s: sh as pid 1 ignores
    // TERM, so SIGKILL, 137) and restarted.
    let mut liveness = pod(
        "liveness",
        &node,
        &[
            "sh",
            "-c",
            "touch /data/alive; sleep 4; rm /data/alive; exec sleep 3600",
        ],
        None,
    );
    liveness.spec.containers[0].liveness_probe = Some(exec("test -f /data/alive", 2));

    // httpd inside the pod's network namespace: liveness on an existing file (named port),
    // readiness on a missing one (404: never ready).
    let mut web = pod(
        "web",
        &node,
        &["httpd", "-f", "-p", "8080", "-h", "/data"],
        None,
    );
    web.spec.containers[0].ports = vec![ContainerPort {
        name: Some("http".into()),
        container_port: 8080,
        ..Default::default()
    }];
    // (Failure threshold 3: the first run may come before httpd listens.)
    web.spec.containers[0].liveness_probe =
        Some(http("/new", IntOrString::String("http".into()), 3));
    web.spec.containers[0].readiness_probe = Some(http("/missing", IntOrString::Int(8080), 1));

    // tcpSocket readiness: ready once httpd listens (it starts after 3 s); a second
    // container's tcpSocket readiness on a port nobody listens on keeps the pod unready.
    let mut tcp = pod(
        "tcp",
        &node,
        &["sh", "-c", "sleep 3; exec httpd -f -p 9090 -h /data"],
        None,
    );
    tcp.spec.containers[0].readiness_probe = Some(Probe {
        tcp_socket: Some(TcpSocketAction {
            port: IntOrString::Int(9090),
            host: None,
        }),
        ..probe(1)
    });

    // The startup probe gates a liveness probe that would kill the container at once
    // before the file exists.
    let mut startup = pod(
        "startup",
        &node,
        &["sh", "-c", "sleep 5; touch /data/started; exec sleep 3600"],
        None,
    );
    startup.spec.containers[0].startup_probe = Some(exec("test -f /data/started", 30));
    startup.spec.containers[0].liveness_probe = Some(exec("test -f /data/started", 1));

    // A startup probe that never succeeds, restartPolicy Never: killed, the pod fails.
    let mut never_starts = pod("never-starts", &node, &["sleep", "3600"], Some("Never"));
    never_starts.spec.containers[0].startup_probe = Some(exec("exit 1", 2));

    let t0 = Instant::now();
    for p in [ready_file, liveness, web, tcp, startup, never_starts] {
        smol::block_on(client.create(&p)).expect("create pod");
    }

    // ready-file: Running but not ready first, then ready, then not ready again.
    let p = wait_for("ready-file to run", Duration::from_secs(60), || {
        get_pod(&client, "ready-file").filter(is_running)
    });
    let cs = main_status(&p).expect("status");
    if t0.elapsed() < Duration::from_secs(4) {
        assert!(!cs.ready, "ready before the readiness probe succeeded");
        assert_eq!(condition(&p, "Ready"), "False");
    }
    assert_eq!(cs.started, Some(true));
    let p = wait_for("ready-file to be ready", Duration::from_secs(30), || {
        get_pod(&client, "ready-file").filter(|p| condition(p, "Ready") == "True")
    });
    assert!(main_status(&p).expect("status").ready);
    assert_eq!(condition(&p, "ContainersReady"), "True");
    let p = wait_for("ready-file to be unready", Duration::from_secs(30), || {
        get_pod(&client, "ready-file").filter(|p| condition(p, "Ready") == "False")
    });
    let cs = main_status(&p).expect("status");
    assert!(!cs.ready);
    assert!(is_running(&p));
    assert_eq!(cs.restart_count, 0, "readiness failures do not restart");

    // startup: not started (and not ready) until the file exists; no liveness kill.
    let p = get_pod(&client, "startup").expect("startup");
    if t0.elapsed() < Duration::from_secs(4) && is_running(&p) {
        assert_eq!(main_status(&p).and_then(|c| c.started), Some(false));
    }
    let p = wait_for("startup to start", Duration::from_secs(30), || {
        get_pod(&client, "startup")
            .filter(|p| main_status(p).is_some_and(|c| c.started == Some(true) && c.ready))
    });
    assert_eq!(main_status(&p).expect("status").restart_count, 0);

    // web: alive (no restarts) but never ready (404).
    let p = wait_for("web to run", Duration::from_secs(30), || {
        get_pod(&client, "web").filter(is_running)
    });
    // Several liveness periods pass.
    std::thread::sleep(Duration::from_secs(4));
    let p = get_pod(&client, "web").unwrap_or(p);
    let cs = main_status(&p).expect("status");
    assert!(is_running(&p), "{:?}", cs.state);
    assert_eq!(cs.restart_count, 0, "the liveness httpGet probe succeeds");
    assert!(!cs.ready, "readiness on a missing path fails");
    assert_eq!(condition(&p, "Ready"), "False");

    // tcp: ready once httpd listens.
    wait_for("tcp to be ready", Duration::from_secs(30), || {
        get_pod(&client, "tcp").filter(|p| condition(p, "Ready") == "True")
    });

    // never-starts: killed by its startup probe, not restarted.
    let p = wait_for("never-starts to fail", Duration::from_secs(30), || {
        get_pod(&client, "never-starts").filter(|p| phase(p) == "Failed")
    });
    let t = main_status(&p)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (137, Some("Error")));
    let msg = t.message.unwrap_or_default();
    assert!(msg.contains("failed startup probe"), "{msg}");
    assert!(!msg.contains("will be restarted"), "{msg}");

    // liveness: killed, restarted after the crash back-off, restartCount 1.
    let p = wait_for("liveness to be restarted", Duration::from_secs(60), || {
        get_pod(&client, "liveness")
            .filter(|p| main_status(p).is_some_and(|c| c.restart_count >= 1))
    });
    let cs = main_status(&p).expect("status");
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("last state");
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("Error"))
    );
    assert_eq!(
        last.message.as_deref(),
        Some("Container main failed liveness probe, will be restarted")
    );

    // Exec probes leave no zombies in the agent and no libcontainer leftovers.
    let agent_pid = agent.child.as_ref().expect("agent").id();
    let zombies = zombies_of(agent_pid);
    assert!(
        zombies.is_empty(),
        "zombie children of the agent: {zombies:?}"
    );
    // A probe's exec may be building at this very moment (its socket lives for the build):
    // leftovers would pile up, so some moment must show none.
    let lc = agent.run.path().join("libcontainer");
    let sockets = || -> Vec<String> {
        std::fs::read_dir(&lc)
            .expect("libcontainer dir")
            .flatten()
            .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("tenant-notify-"))
            .collect()
    };
    wait_for(
        "no tenant-notify sockets left",
        Duration::from_secs(5),
        || sockets().is_empty().then_some(()),
    );

    let names = [
        "ready-file",
        "liveness",
        "web",
        "tcp",
        "startup",
        "never-starts",
    ];
    for name in names {
        smol::block_on(client.delete::<Pod>("default", name, &DeleteOptions::default()))
            .expect("delete");
    }
    wait_for("the pods to disappear", Duration::from_secs(60), || {
        names
            .iter()
            .all(|n| get_pod(&client, n).is_none())
            .then_some(())
    });
    let zombies = zombies_of(agent_pid);
    assert!(
        zombies.is_empty(),
        "zombie children of the agent: {zombies:?}"
    );
}
