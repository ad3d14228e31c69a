//! `skiff server` runs the agent in-process for its own node: it joins over loopback,
//! registers the Node and runs the pods bound to it. Needs root and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::{Command, Stdio};
use std::time::Duration;

use api::client::Client;
use api::core::{Container, Node, Pod, PodSpec};
use api::kubeconfig::Kubeconfig;
use api::meta::{DeleteOptions, ObjectMeta};
use common::{free_port, skiff_bin, wait_for};

const IMAGE: &str = "skiff.test/embedded:v1";

use common::NodeServer as Server;

#[test]
fn server_runs_its_own_node() {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("embedded"), IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));

    let node = format!("embedded-{}", std::process::id());
    let cgroup_parent = format!("skiff-embedded-{}", std::process::id());
    let port = free_port();
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
        ])
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
    };
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    let client = wait_for("the admin kubeconfig", Duration::from_secs(20), || {
        let kc = Kubeconfig::load(&kubeconfig).ok()?;
        Client::from_kubeconfig(&kc).ok()
    });

    let n: Node = wait_for("the server's own Node", Duration::from_secs(30), || {
        smol::block_on(client.get::<Node>("", &node)).ok()
    });
    assert_eq!(n.metadata.labels["kubernetes.io/hostname"], node);
    // The agent joined with a certificate of its own, kept for the next start.
    for f in ["ca.crt", "node.crt", "node.key"] {
        assert!(server.dir.path().join("agent").join(f).exists(), "{f}");
    }

    let pod = Pod {
        metadata: ObjectMeta {
            name: "local".into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.clone()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                // The server blocks SIGTERM for its signal thread; its containers must not
                // inherit that (they would ignore the graceful stop).
                args: vec![
                    "sh".into(),
                    "-c".into(),
                    "grep SigBlk /proc/self/status; exec sleep 3600".into(),
                ],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    };
    smol::block_on(client.create(&pod)).expect("create pod");
    let running = wait_for(
        "the pod to run on the server's node",
        Duration::from_secs(60),
        || {
            smol::block_on(client.get::<Pod>("default", "local"))
                .ok()
                .filter(|p| p.status.phase.as_deref() == Some("Running"))
        },
    );
    let log = server
        .dir
        .path()
        .join("agent/pods")
        .join(&running.metadata.uid)
        .join("logs/main/0.log");
    let text = wait_for("the container's output", Duration::from_secs(10), || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("SigBlk"))
    });
    assert!(
        text.contains("SigBlk:\t0000000000000000"),
        "no signal is blocked in the container: {text}"
    );
    smol::block_on(client.delete::<Pod>("default", "local", &DeleteOptions::default()))
        .expect("delete");
    wait_for("the pod to go", Duration::from_secs(30), || {
        smol::block_on(client.get::<Pod>("default", "local"))
            .is_err()
            .then_some(())
    });
}
