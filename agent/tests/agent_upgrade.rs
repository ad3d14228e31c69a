//! An agent upgraded while its pods run: systemd stops the old agent with SIGTERM
//! (KillMode=process: the agent alone), a new binary starts on the same data and run dirs,
//! and the running containers are re-adopted, not restarted.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::time::Duration;

use api::core::{Container, Pod, PodSpec};
use api::meta::{DeleteOptions, ObjectMeta};
use common::{wait_for, TestAgent, TestServer};

const IMAGE: &str = "skiff.test/testbox:v1";

fn running(c: &api::client::Client, name: &str) -> Option<Pod> {
    smol::block_on(c.get::<Pod>("default", name))
        .ok()
        .filter(|p| p.status.phase.as_deref() == Some("Running"))
}

#[test]
fn sigterm_and_a_new_agent_keep_pods_running() {
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();
    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("hello"), IMAGE);
    agent.import(&archive);
    agent.start(Some(&token));

    let pod = Pod {
        metadata: ObjectMeta {
            name: "steady".into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(agent.node_name.clone()),
            termination_grace_period_seconds: Some(2),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                args: vec!["sleep".into(), "3600".into()],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    };
    smol::block_on(client.create(&pod)).expect("create pod");
    let before = wait_for("the pod to run", Duration::from_secs(60), || {
        running(&client, "steady")
    });
    let cs = before.status.container_statuses[0].clone();
    let id = cs.container_id.clone().expect("container id");

    // Stop as systemd does on `systemctl restart` / an upgrade: SIGTERM to the main process.
    let mut child = agent.child.take().expect("agent process");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = child.wait().expect("wait for the agent");
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.success() || status.signal() == Some(libc::SIGTERM),
        "the agent stops at once on SIGTERM: {status:?}"
    );
    // The container outlives its agent.
    let rt = agent::runtime::Runtime::new(agent::runtime::RuntimeConfig::new(
        agent.run.path(),
        agent.cgroup_parent.clone(),
    ))
    .expect("runtime");
    let cid = agent::runtime::ContainerId::new(&before.metadata.uid, "main").expect("id");
    assert!(
        matches!(
            rt.state(&cid),
            Ok(agent::runtime::ContainerState::Running { .. })
        ),
        "the container keeps running without its agent"
    );
    drop(rt);

    // The "new" agent (the same binary here) takes over without a token.
    agent.start(None);
    std::thread::sleep(Duration::from_secs(3));
    let after = wait_for(
        "the pod to be reported again",
        Duration::from_secs(30),
        || running(&client, "steady"),
    );
    let cs2 = &after.status.container_statuses[0];
    assert_eq!(cs2.container_id.as_deref(), Some(id.as_str()), "re-adopted");
    assert_eq!(cs2.restart_count, 0);
    assert_eq!(
        cs2.state
            .as_ref()
            .and_then(|s| s.running.clone())
            .map(|r| r.started_at),
        cs.state
            .as_ref()
            .and_then(|s| s.running.clone())
            .map(|r| r.started_at),
    );

    smol::block_on(client.delete::<Pod>("default", "steady", &DeleteOptions::default()))
        .expect("delete");
    wait_for("the pod to go", Duration::from_secs(30), || {
        smol::block_on(client.get::<Pod>("default", "steady"))
            .is_err()
            .then_some(())
    });
}
