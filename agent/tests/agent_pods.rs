//! The agent end to end: a real `skiff server`, a real `skiff-agent` process, real
//! containers. Needs root (containers, overlay mounts, cgroups) and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use api::client::Client;
use api::core::{Container, Node, Pod, PodSpec};
use api::meta::{DeleteOptions, ObjectMeta};
use common::{wait_for, TestAgent, TestServer};

const IMAGE: &str = "skiff.test/testbox:v1";

fn pod(name: &str, node: &str, args: &[&str], restart: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.into()),
            restart_policy: restart.map(str::to_string),
            termination_grace_period_seconds: Some(2),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                args: args.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn get_pod(c: &Client, name: &str) -> Option<Pod> {
    smol::block_on(c.get::<Pod>("default", name)).ok()
}

fn phase(p: &Pod) -> &str {
    p.status.phase.as_deref().unwrap_or("")
}

fn wait_phase(c: &Client, name: &str, want: &str, timeout: Duration) -> Pod {
    wait_for(&format!("pod {name} to be {want}"), timeout, || {
        get_pod(c, name).filter(|p| phase(p) == want)
    })
}

#[test]
fn agent_joins_registers_and_runs_pods() {
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();

    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("hello"), IMAGE);
    agent.import(&archive);

    // A token with the wrong CA pin, and one with a wrong secret, are refused clearly.
    let bad_pin = format!(
        "SK1::{}::{}",
        "0".repeat(64),
        token.rsplit("::").next().unwrap()
    );
    let out = agent.command(Some(&bad_pin)).output().expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not match the join token"), "{err}");
    let (head, _) = token.rsplit_once('.').unwrap();
    let bad_secret = format!("{head}.{}", "x".repeat(16));
    let out = agent.command(Some(&bad_secret)).output().expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown, wrong or expired"), "{err}");

    agent.start(Some(&token));
    let node_name = agent.node_name.clone();

    // The Node registers, Ready, with the right labels and capacity.
    let node = wait_for("the node to register", Duration::from_secs(30), || {
        smol::block_on(client.get::<Node>("", &node_name))
            .ok()
            .filter(|n| {
                n.status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
    });
    let labels = &node.metadata.labels;
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], image_util::host_arch());
    assert_eq!(labels["kubernetes.io/hostname"], node_name);
    assert_eq!(labels["zone"], "test");
    assert_eq!(node.status.capacity["pods"].0, "110");
    assert!(node.status.capacity["memory"].0.ends_with("Ki"));
    assert!(node.status.capacity.contains_key("cpu"));
    assert!(node.status.capacity.contains_key("ephemeral-storage"));
    assert!(node
        .status
        .addresses
        .iter()
        .any(|a| a.type_ == "InternalIP" && a.address == "127.0.0.1"));
    let info = node.status.node_info.clone().expect("nodeInfo");
    assert_eq!(info.kubelet_version, "v1.32.0-skiff");
    assert_eq!(info.container_runtime_version, "libcontainer://0.7");
    for f in ["ca.crt", "node.crt", "node.key", "server"] {
        let mode = std::fs::metadata(agent.data_dir().join(f))
            .expect(f)
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }

    // Pods: a long runner, one that succeeds, one that fails with exit code 3.
    for p in [
        pod("sleeper", &node_name, &["sleep", "3600"], None),
        pod(
            "ok",
            &node_name,
            &["sh", "-c", "echo $GREETING; exit 0"],
            Some("Never"),
        ),
        pod("bad", &node_name, &["sh", "-c", "exit 3"], Some("Never")),
    ] {
        smol::block_on(client.create(&p)).expect("create pod");
    }
    let sleeper = wait_phase(&client, "sleeper", "Running", Duration::from_secs(60));
    let cs = &sleeper.status.container_statuses[0];
    let running = cs
        .state
        .as_ref()
        .and_then(|s| s.running.clone())
        .expect("running state");
    assert!(cs.ready);
    assert_eq!(cs.restart_count, 0);
    let container_id = cs.container_id.clone().expect("containerID");
    assert!(container_id.starts_with("libcontainer://"));
    assert!(cs.image_id.contains("sha256:"), "{}", cs.image_id);
    assert_eq!(sleeper.status.host_ip.as_deref(), Some("127.0.0.1"));
    assert!(sleeper.status.start_time.is_some());
    assert!(sleeper
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True"));

    let ok = wait_phase(&client, "ok", "Succeeded", Duration::from_secs(30));
    let t = ok.status.container_statuses[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(t.exit_code, 0);
    assert_eq!(t.reason.as_deref(), Some("Completed"));
    let bad = wait_phase(&client, "bad", "Failed", Duration::from_secs(30));
    let t = bad.status.container_statuses[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(t.exit_code, 3);
    assert_eq!(t.reason.as_deref(), Some("Error"));

    // The local cache has the desired pods.
    assert!(agent.data_dir().join("pods.redb").exists());

    // kill -9 and restart (no token needed): the running container is adopted.
    agent.kill9();
    agent.start(None);
    smol::block_on(client.create(&pod("after", &node_name, &["sleep", "3600"], None)))
        .expect("create pod");
    wait_phase(&client, "after", "Running", Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let again = get_pod(&client, "sleeper").expect("sleeper");
    assert_eq!(phase(&again), "Running");
    let cs2 = &again.status.container_statuses[0];
    assert_eq!(cs2.container_id.as_deref(), Some(container_id.as_str()));
    assert_eq!(cs2.restart_count, 0);
    let running2 = cs2
        .state
        .as_ref()
        .and_then(|s| s.running.clone())
        .expect("running");
    assert_eq!(running2.started_at, running.started_at);

    // Deleting a running pod stops it; the object goes away once the agent confirms.
    let uid = again.metadata.uid.clone();
    smol::block_on(client.delete::<Pod>("default", "sleeper", &DeleteOptions::default()))
        .expect("delete");
    wait_for("sleeper to disappear", Duration::from_secs(30), || {
        get_pod(&client, "sleeper").is_none().then_some(())
    });
    assert!(!agent.run.path().join("sandboxes").join(&uid).exists());
    assert!(!agent.data_dir().join("pods").join(&uid).exists());

    // Everything else goes too.
    for name in ["ok", "bad", "after"] {
        smol::block_on(client.delete::<Pod>("default", name, &DeleteOptions::default()))
            .expect("delete");
    }
    wait_for("all pods to disappear", Duration::from_secs(30), || {
        ["ok", "bad", "after"]
            .iter()
            .all(|n| get_pod(&client, n).is_none())
            .then_some(())
    });
    let left = std::fs::read_dir(agent.run.path().join("sandboxes"))
        .map(|rd| rd.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "sandboxes left behind");
}
