//! The real `kubectl debug` against `skiff server` with its own node and real containers: an
//! ephemeral container started in a running pod, in its target's PID namespace (`ps` sees
//! the target's process), with the pod's volumes, reported terminated with its exit code,
//! its logs readable, attached output (`--attach`), never run again after a restart of the
//! server and its agent; and `kubectl debug node/NAME`, whose pod sees the host through
//! `/host`. Needs root, /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Output;
use std::time::Duration;

use api::client::Client;
use api::core::{Container, ContainerStatus, Pod, PodSpec, Volume, VolumeMount};
use api::meta::ObjectMeta;
use common::{free_port, wait_for, NodeServer as Server};

const IMAGE: &str = "skiff.test/debug:v1";
const POD: &str = "app";

fn kubectl(server: &Server, args: &[&str]) -> Output {
    common::run_kubectl(&server.kubeconfig(), args, None)
}

fn ok(server: &Server, args: &[&str]) -> String {
    let out = kubectl(server, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ephemeral_status(c: &Client, name: &str) -> Option<ContainerStatus> {
    let pod = smol::block_on(c.get::<Pod>("default", POD)).ok()?;
    pod.status
        .ephemeral_container_statuses
        .into_iter()
        .find(|s| s.name == name)
}

/// The exit code once the ephemeral container `name` is reported terminated.
fn wait_terminated(c: &Client, name: &str) -> (i32, Option<String>) {
    wait_for(
        &format!("ephemeral container {name} to terminate"),
        Duration::from_secs(60),
        || {
            let s = ephemeral_status(c, name)?;
            let t = s.state?.terminated?;
            Some((t.exit_code, t.reason))
        },
    )
}

fn server_at(dir: tempfile::TempDir, run: tempfile::TempDir, port: u16, node: &str) -> Server {
    let cgroup_parent = format!("skiff-debug-{}", std::process::id());
    // Privileged: `kubectl debug node/NAME` makes a hostPID pod.
    let child = common::node_server_command(dir.path(), run.path(), port, node, &cgroup_parent)
        .arg("--allow-privileged")
        .spawn()
        .expect("start skiff server");
    Server {
        child,
        dir,
        run,
        cgroup_parent,
    }
}

#[test]
fn kubectl_debug_runs_ephemeral_containers_and_node_debug_pods() {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("debug"),
            image_util::applets_layer(&["cat", "echo", "ps", "sleep", "ls", "true", "hostname"]),
        ],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let node = format!("debug-{}", std::process::id());
    let port = free_port();
    let mut server = server_at(dir, run, port, &node);
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);

    // A pod whose app container runs a process with a name only it has, and a volume.
    let pod = Pod {
        metadata: ObjectMeta {
            name: POD.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.clone()),
            termination_grace_period_seconds: Some(1),
            volumes: vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            }],
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                image_pull_policy: Some("Never".into()),
                args: vec![
                    "sh".into(),
                    "-c".into(),
                    "echo from-main > /scratch/note; exec sleep 3131".into(),
                ],
                volume_mounts: vec![VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/scratch".into(),
                    ..Default::default()
                }],
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

    // `--target`: the ephemeral container shares main's PID namespace, so ps sees sleep 3131.
    let out = ok(
        &server,
        &[
            "debug",
            POD,
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--target=main",
            "--container=dbg",
            "--",
            "ps",
        ],
    );
    assert!(out.is_empty() || !out.contains("error"), "{out}");
    let (code, reason) = wait_terminated(&client, "dbg");
    assert_eq!((code, reason.as_deref()), (0, Some("Completed")));
    let logs = ok(&server, &["logs", POD, "-c", "dbg"]);
    assert!(
        logs.contains("sleep 3131"),
        "ps in the target's namespace: {logs}"
    );
    // Without a target it has a PID namespace of its own: main's process is not there.
    ok(
        &server,
        &[
            "debug",
            POD,
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--container=alone",
            "--",
            "ps",
        ],
    );
    assert_eq!(wait_terminated(&client, "alone").0, 0);
    let logs = ok(&server, &["logs", POD, "-c", "alone"]);
    assert!(!logs.contains("sleep 3131"), "{logs}");
    assert!(logs.contains("ps"), "{logs}");

    // A failing one reports its exit code; it is not restarted.
    ok(
        &server,
        &[
            "debug",
            POD,
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--container=fails",
            "--",
            "sh",
            "-c",
            "echo failing; exit 3",
        ],
    );
    assert_eq!(
        wait_terminated(&client, "fails"),
        (3, Some("Error".to_string()))
    );
    std::thread::sleep(Duration::from_secs(2));
    let s = ephemeral_status(&client, "fails").expect("status");
    assert_eq!(s.restart_count, 0);
    assert!(s.state.and_then(|s| s.terminated).is_some());

    // The pod's volumes, mounted as it asks (a patch of the subresource, as an older
    // kubectl or a client would send it), and the pod's network and hostname.
    let patch = serde_json::json!({"spec": {"ephemeralContainers": [{
        "name": "withvol", "image": IMAGE, "imagePullPolicy": "Never",
        "command": ["sh", "-c", "cat /scratch/note; hostname"],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]}});
    ok(
        &server,
        &[
            "patch",
            "pod",
            POD,
            "--subresource=ephemeralcontainers",
            "--type=strategic",
            "-p",
            &patch.to_string(),
        ],
    )
    .to_string();
    assert_eq!(wait_terminated(&client, "withvol").0, 0);
    let logs = ok(&server, &["logs", POD, "-c", "withvol"]);
    assert_eq!(logs, format!("from-main\n{POD}\n"));

    // --attach: kubectl waits for the container and shows what it writes (a container that
    // already ended is shown through its logs, as kubectl does).
    let out = ok(
        &server,
        &[
            "debug",
            POD,
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--attach",
            "--container=att",
            "--",
            "sh",
            "-c",
            "sleep 2; echo attached-output; sleep 1",
        ],
    );
    assert!(out.contains("attached-output"), "{out}");
    assert_eq!(wait_terminated(&client, "att").0, 0);

    // A restart of the server and its agent adopts the pod and runs none of them again.
    let before = smol::block_on(client.get::<Pod>("default", POD)).expect("pod");
    let statuses = |p: &Pod| {
        let mut v: Vec<(String, Option<String>)> = p
            .status
            .ephemeral_container_statuses
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref())
                        .and_then(|t| t.started_at)
                        .map(|t| format!("{t:?}")),
                )
            })
            .collect();
        v.sort();
        v
    };
    let _ = server.child.kill();
    let _ = server.child.wait();
    let Server { dir, run, .. } = &mut server;
    let (dir, run) = (
        std::mem::replace(dir, tempfile::tempdir().expect("dir")),
        std::mem::replace(run, tempfile::tempdir().expect("dir")),
    );
    drop(server);
    let server = server_at(dir, run, port, &node);
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);
    std::thread::sleep(Duration::from_secs(5));
    let after = wait_for("the pod to run again", Duration::from_secs(60), || {
        smol::block_on(client.get::<Pod>("default", POD))
            .ok()
            .filter(|p| p.status.phase.as_deref() == Some("Running"))
    });
    assert_eq!(statuses(&after), statuses(&before));
    assert_eq!(after.status.ephemeral_container_statuses.len(), 5);
    let logs = ok(&server, &["logs", POD, "-c", "fails"]);
    assert_eq!(logs, "failing\n", "ran once");

    // kubectl debug node/NAME: a pod on the node with the host's namespaces and / at /host
    // (the default namespace holds pods to baseline; the test server labels it privileged
    // for its host pods, as an admin would to debug nodes).
    ok(
        &server,
        &[
            "label",
            "namespace",
            "default",
            "pod-security.kubernetes.io/enforce=privileged",
            "--overwrite",
        ],
    );
    let marker = server.dir.path().join("node-marker");
    std::fs::write(&marker, "on the host\n").expect("marker");
    let out = ok(
        &server,
        &[
            "debug",
            &format!("node/{node}"),
            "--image",
            IMAGE,
            "--image-pull-policy=Never",
            "--",
            "cat",
            &format!("/host{}", marker.display()),
        ],
    );
    let debug_pod = out
        .lines()
        .find_map(|l| l.strip_prefix("Creating debugging pod "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("the debugging pod's name: {out}"))
        .to_string();
    let done = wait_for(
        "the node debugging pod to finish",
        Duration::from_secs(60),
        || {
            smol::block_on(client.get::<Pod>("default", &debug_pod))
                .ok()
                .filter(|p| p.status.phase.as_deref() == Some("Succeeded"))
        },
    );
    assert_eq!(done.spec.node_name.as_deref(), Some(node.as_str()));
    assert_eq!(done.spec.host_pid, Some(true));
    assert_eq!(done.spec.host_network, Some(true));
    let logs = ok(&server, &["logs", &debug_pod]);
    assert_eq!(logs, "on the host\n");
}
