//! The agent end to end: a real `skiff server`, a real `skiff-agent` process, real
//! containers. Needs root (containers, overlay mounts, cgroups) and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use api::client::Client;
use api::core::{
    Capabilities, ConfigMap, Container, EnvVar, EnvVarSource, KeySelector, Node,
    ObjectFieldSelector, Pod, SecurityContext,
};
use api::meta::DeleteOptions;
use common::{get_pod, phase, pod, wait_for, wait_phase, waiting_reason, TestAgent, TestServer};

const IMAGE: &str = common::TEST_IMAGE;

fn env_from(name: &str, src: EnvVarSource) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(src),
    }
}

fn field(path: &str) -> EnvVarSource {
    EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            api_version: None,
            field_path: path.into(),
        }),
        ..Default::default()
    }
}

fn heartbeat_of(c: &Client, node: &str) -> i64 {
    let n = smol::block_on(c.get::<Node>("", node)).expect("node");
    n.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.last_heartbeat_time)
        .map_or(0, |t| t.0)
}

fn runtime_of(agent: &TestAgent) -> agent::runtime::Runtime {
    agent::runtime::Runtime::new(agent::runtime::RuntimeConfig::new(
        agent.run.path(),
        agent.cgroup_parent.clone(),
    ))
    .expect("runtime")
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

    let first_heartbeat = heartbeat_of(&client, &node_name);

    let mut cm = ConfigMap::default();
    cm.metadata.name = "settings".into();
    cm.metadata.namespace = Some("default".into());
    cm.data.insert("greeting".into(), "from-configmap".into());
    smol::block_on(client.create(&cm)).expect("create configmap");

    // Pods: a long runner; one with an init container and an environment from everywhere
    // that succeeds; one that fails with exit code 3; one crash-looping; one whose image is
    // absent with pull policy Never; one privileged (refused).
    let mut ok = pod(
        "ok",
        &node_name,
        &[
            "sh",
            "-c",
            "echo \"$CM $POD $NODE $IP $GREETING $(pwd) $ARG $0\"; exit 0",
            "$(CM)",
        ],
        Some("Never"),
    );
    ok.spec.containers[0].env = vec![
        env_from(
            "CM",
            EnvVarSource {
                config_map_key_ref: Some(KeySelector {
                    name: Some("settings".into()),
                    key: "greeting".into(),
                    optional: None,
                }),
                ..Default::default()
            },
        ),
        env_from("POD", field("metadata.name")),
        env_from("NODE", field("spec.nodeName")),
        env_from("IP", field("status.hostIP")),
        EnvVar {
            name: "ARG".into(),
            value: Some("arg-$(CM)".into()),
            value_from: None,
        },
    ];
    ok.spec.init_containers = vec![Container {
        name: "setup".into(),
        image: Some(IMAGE.into()),
        args: vec!["true".into()],
        ..Default::default()
    }];
    let mut never = pod("never", &node_name, &["true"], None);
    never.spec.containers[0].image = Some("skiff.test/absent:v1".into());
    never.spec.containers[0].image_pull_policy = Some("Never".into());
    let mut privileged = pod("privileged", &node_name, &["true"], None);
    privileged.spec.containers[0].security_context = Some(SecurityContext {
        privileged: Some(true),
        capabilities: Some(Capabilities::default()),
        ..Default::default()
    });
    for p in [
        pod("sleeper", &node_name, &["sleep", "3600"], None),
        ok,
        pod("bad", &node_name, &["sh", "-c", "exit 3"], Some("Never")),
        pod("crash", &node_name, &["sh", "-c", "exit 1"], Some("Always")),
        never,
        privileged,
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

    // The init container ran first; the environment and $(VAR) expansion are Kubernetes'.
    let init = &ok.status.init_container_statuses[0];
    let t = init
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("init terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    let log = agent
        .data_dir()
        .join("pods")
        .join(&ok.metadata.uid)
        .join("logs/main/0.log");
    let text = std::fs::read_to_string(&log).expect("log of ok");
    assert_eq!(
        text.trim(),
        format!(
            "from-configmap ok {node_name} 127.0.0.1 hi /data arg-from-configmap from-configmap"
        )
    );

    let never = wait_for("ErrImageNeverPull", Duration::from_secs(30), || {
        get_pod(&client, "never")
            .filter(|p| waiting_reason(p).as_deref() == Some("ErrImageNeverPull"))
    });
    assert_eq!(phase(&never), "Pending");
    let refused = wait_phase(&client, "privileged", "Failed", Duration::from_secs(30));
    let msg = refused.status.message.clone().unwrap_or_default();
    assert!(msg.contains("--allow-privileged"), "{msg}");

    let crash = wait_for("CrashLoopBackOff", Duration::from_secs(30), || {
        get_pod(&client, "crash")
            .filter(|p| waiting_reason(p).as_deref() == Some("CrashLoopBackOff"))
    });
    let last = crash.status.container_statuses[0]
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("last state");
    assert_eq!(last.exit_code, 1);

    // The Lease is the heartbeat: an unchanged status is posted every 5 minutes only
    // (kubelet's nodeStatusReportFrequency), so the Node is not written every second.
    assert_eq!(heartbeat_of(&client, &node_name), first_heartbeat);

    // Its Lease in kube-node-lease (the node authorizer lets it use that one): held by the
    // node, owned by its Node, renewed.
    let lease_of = || {
        smol::block_on(client.get::<api::coordination::Lease>("kube-node-lease", &node_name)).ok()
    };
    let lease = wait_for("the node lease", Duration::from_secs(10), lease_of);
    assert_eq!(lease.holder(), node_name);
    assert_eq!(lease.spec.lease_duration_seconds, Some(40));
    assert_eq!(lease.metadata.owner_references[0].kind, "Node");
    assert_eq!(lease.metadata.owner_references[0].uid, node.metadata.uid);
    wait_for(
        "the node lease to be renewed",
        Duration::from_secs(10),
        || (lease_of()?.spec.renew_time > lease.spec.renew_time).then_some(()),
    );

    // The local cache has the desired pods.
    assert!(agent.data_dir().join("pods.redb").exists());

    // kill -9 and restart (no token needed): the running container is adopted. A pod
    // removed while the agent was down (force-deleted) is cleaned up after the restart.
    agent.kill9();
    let bad_uid = bad.metadata.uid.clone();
    assert!(agent.run.path().join("sandboxes").join(&bad_uid).exists());
    let force = DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    smol::block_on(client.delete::<Pod>("default", "bad", &force)).expect("force delete");
    assert!(get_pod(&client, "bad").is_none());
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
    wait_for(
        "the force-deleted pod to be cleaned up",
        Duration::from_secs(30),
        || (!agent.run.path().join("sandboxes").join(&bad_uid).exists()).then_some(()),
    );
    assert!(!agent.data_dir().join("pods").join(&bad_uid).exists());

    let uid = again.metadata.uid.clone();
    smol::block_on(client.delete::<Pod>("default", "sleeper", &DeleteOptions::default()))
        .expect("delete");
    wait_for("sleeper to disappear", Duration::from_secs(30), || {
        get_pod(&client, "sleeper").is_none().then_some(())
    });
    assert!(!agent.run.path().join("sandboxes").join(&uid).exists());
    assert!(!agent.data_dir().join("pods").join(&uid).exists());

    // The crash-looping container was restarted after its back-off.
    wait_for("crash to restart", Duration::from_secs(40), || {
        get_pod(&client, "crash").filter(|p| p.status.container_statuses[0].restart_count >= 1)
    });

    // Everything else goes too, whatever state it is in.
    let others = ["ok", "crash", "never", "privileged"];
    for name in others {
        smol::block_on(client.delete::<Pod>("default", name, &DeleteOptions::default()))
            .expect("delete");
    }
    wait_for("the pods to disappear", Duration::from_secs(30), || {
        others
            .iter()
            .all(|n| get_pod(&client, n).is_none())
            .then_some(())
    });

    // A reboot while the server is down: no containers are left, and the agent starts the
    // pods of its local cache anyway.
    let after = get_pod(&client, "after").expect("after");
    drop(server);
    agent.clean_up();
    assert!(runtime_of(&agent).list().expect("list").is_empty());
    agent.start(None);
    let rt = runtime_of(&agent);
    let id = agent::runtime::ContainerId::new(&after.metadata.uid, "main").expect("id");
    wait_for(
        "the cached pod to run without the server",
        Duration::from_secs(30),
        || {
            matches!(
                rt.state(&id),
                Ok(agent::runtime::ContainerState::Running { .. })
            )
            .then_some(())
        },
    );
    let sandboxes = rt.list_sandboxes().expect("sandboxes");
    assert_eq!(
        sandboxes,
        vec![after.metadata.uid.clone()],
        "only the desired pod runs"
    );
}

/// Leftover containers of pods the agent does not know (its pod cache gone, as on a re-flashed
/// board whose old containers still run) are stopped in parallel and in the background: the
/// pods the node should run start at once, whatever the leftovers.
#[test]
fn leftovers_do_not_hold_up_new_pods() {
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
    // Containers that ignore SIGTERM: each takes the whole grace period to stop.
    const LEFTOVERS: usize = 4;
    for i in 0..LEFTOVERS {
        let p = pod(
            &format!("stubborn-{i}"),
            &node,
            &["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
            None,
        );
        smol::block_on(client.create(&p)).expect("create pod");
    }
    let uids: Vec<String> = (0..LEFTOVERS)
        .map(|i| {
            wait_phase(
                &client,
                &format!("stubborn-{i}"),
                "Running",
                Duration::from_secs(60),
            )
            .metadata
            .uid
        })
        .collect();
    // The agent dies; its pods are gone from the API and from its own cache.
    agent.kill9();
    let force = DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    for i in 0..LEFTOVERS {
        smol::block_on(client.delete::<Pod>("default", &format!("stubborn-{i}"), &force))
            .expect("force delete");
    }
    std::fs::remove_file(agent.data_dir().join("pods.redb")).expect("the pod cache");
    for uid in &uids {
        assert!(agent.run.path().join("sandboxes").join(uid).exists());
    }
    smol::block_on(client.create(&pod("fresh", &node, &["sleep", "3600"], None)))
        .expect("create pod");
    let started = std::time::Instant::now();
    agent.start(None);
    wait_phase(&client, "fresh", "Running", Duration::from_secs(60));
    let took = started.elapsed();
    eprintln!("a new pod Running {took:?} after the agent's start, beside {LEFTOVERS} leftovers");
    // Serially, each leftover held the start 10 s.
    assert!(
        took < Duration::from_secs(3),
        "the new pod waited for the leftovers: {took:?}"
    );
    // The leftovers go together: one grace period, not one each.
    wait_for(
        "the leftovers to be removed",
        Duration::from_secs(25),
        || {
            uids.iter()
                .all(|u| !agent.run.path().join("sandboxes").join(u).exists())
                .then_some(())
        },
    );
    eprintln!(
        "leftovers removed {:?} after the agent's start",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(25));
}

#[test]
fn pods_run_only_with_a_runtime_class_the_agent_has() {
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
    for (name, handler) in [("default", api::node::AGENT_HANDLER), ("kata", "kata-fc")] {
        let rc = serde_json::json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": name}, "handler": handler});
        smol::block_on(client.create_value(api::Kind::RuntimeClass, None, &rc))
            .expect("create the RuntimeClass");
    }
    let mut runs = pod("runs", &node, &["sleep", "600"], None);
    runs.spec.runtime_class_name = Some("default".into());
    let mut waits = pod("waits", &node, &["sleep", "600"], None);
    waits.spec.runtime_class_name = Some("kata".into());
    smol::block_on(client.create(&runs)).expect("create pod");
    smol::block_on(client.create(&waits)).expect("create pod");
    wait_phase(&client, "runs", "Running", Duration::from_secs(60));
    // The other waits for a runtime the node does not have, and says so.
    let event = wait_for("FailedCreatePodSandBox", Duration::from_secs(30), || {
        let (events, _) = smol::block_on(client.list::<api::core::Event>(
            Some("default"),
            None,
            Some("involvedObject.name=waits"),
        ))
        .ok()?;
        events
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedCreatePodSandBox"))
    });
    assert!(
        event
            .message
            .as_deref()
            .is_some_and(|m| m.contains("no runtime for \"kata-fc\" is configured")),
        "{event:?}"
    );
    let waits = get_pod(&client, "waits").expect("the pod");
    assert_eq!(phase(&waits), "Pending");
    agent.clean_up();
}
