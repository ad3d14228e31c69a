//! The scheduler and controllers end to end with real agents and real containers: a
//! Deployment rollout to a bad image stalls and `skiff rollout undo` restores it; a node that
//! stops heartbeating loses its pods to the other node within the configured times, and when
//! it comes back no second copy keeps running. Needs root and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Command;
use std::time::Duration;

use api::client::Client;
use api::core::Pod;
use common::{skiff_bin, wait_for, TestAgent, TestServer};
use serde_json::{json, Value};

const IMAGE: &str = "skiff.test/e2e:v1";

fn agent(server: &TestServer, name: &str, token: &str) -> TestAgent {
    let mut a = TestAgent::new(server);
    a.node_name = name.to_string();
    a.cgroup_parent = format!("skiff-e2e-{name}-{}", std::process::id());
    let archive = a.data_dir().join("image.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("e2e"), IMAGE);
    a.import(&archive);
    a.start(Some(token));
    a
}

fn skiff(server: &TestServer, args: &[&str]) -> (bool, String) {
    let out = Command::new(skiff_bin())
        .args(args)
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .output()
        .expect("run skiff");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn apply(server: &TestServer, manifest: &Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("m.json");
    std::fs::write(&f, serde_json::to_vec(manifest).expect("json")).expect("write");
    let (ok, out) = skiff(server, &["apply", "-f", f.to_str().expect("path")]);
    assert!(ok, "apply: {out}");
}

fn pods(c: &Client, app: &str) -> Vec<Pod> {
    smol::block_on(c.list::<Pod>(Some("default"), Some(&format!("app={app}")), None))
        .map(|(items, _)| items)
        .unwrap_or_default()
}

fn running_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.phase.as_deref() == Some("Running")
        && p.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn deployment(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 8,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                    }],
                },
            },
        },
    })
}

#[test]
fn rollout_undo_and_node_loss_with_real_agents() {
    image_util::require_root_and_busybox();
    let server = TestServer::start_with(&[
        "--node-monitor-grace-period",
        "4s",
        "--default-toleration-seconds",
        "3",
    ]);
    let client = server.client();
    let token = server.join_token();
    let mut a = agent(&server, "e2e-a", &token);
    let mut b = agent(&server, "e2e-b", &token);

    // Both nodes Ready (with their pod ranges) before anything is scheduled.
    for n in ["e2e-a", "e2e-b"] {
        wait_for(&format!("{n} Ready"), Duration::from_secs(30), || {
            let node = smol::block_on(client.get_value(api::Kind::Node, None, n)).ok()?;
            let ready = node["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (ready && node["spec"]["podCIDR"].is_string()).then_some(())
        });
    }

    // Two replicas, spread over the two equal nodes by the scheduler.
    apply(&server, &deployment(IMAGE));
    let first = wait_for("two running replicas", Duration::from_secs(60), || {
        let ps = pods(&client, "web");
        (ps.len() == 2 && ps.iter().all(running_ready)).then_some(ps)
    });
    let mut nodes: Vec<String> = first
        .iter()
        .filter_map(|p| p.spec.node_name.clone())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["e2e-a", "e2e-b"], "one replica per node");
    let (ok, out) = skiff(&server, &["rollout", "status", "deployment/web"]);
    assert!(ok, "{out}");

    // A rollout to an image no node has stalls: the new pod cannot pull, no old pod goes,
    // and the deadline marks the Deployment as not progressing.
    let mut bad = deployment("skiff.test/absent:v9");
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
    apply(&server, &bad);
    wait_for("ProgressDeadlineExceeded", Duration::from_secs(40), || {
        let d =
            smol::block_on(client.get_value(api::Kind::Deployment, Some("default"), "web")).ok()?;
        d["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Progressing" && c["reason"] == "ProgressDeadlineExceeded")
            .then_some(())
    });
    let (ok, out) = skiff(&server, &["rollout", "status", "deployment/web"]);
    assert!(!ok, "rollout status fails on a stalled rollout: {out}");
    let old_uids: Vec<String> = first.iter().map(|p| p.metadata.uid.clone()).collect();
    let now = pods(&client, "web");
    for uid in &old_uids {
        assert!(
            now.iter()
                .any(|p| &p.metadata.uid == uid && running_ready(p)),
            "old replicas keep serving during the stalled rollout"
        );
    }

    // Undo: the bad pod goes, the old replicas are untouched.
    let (ok, out) = skiff(&server, &["rollout", "undo", "deployment/web"]);
    assert!(ok, "{out}");
    wait_for("the rollback", Duration::from_secs(40), || {
        let ps = pods(&client, "web");
        (ps.len() == 2
            && ps.iter().all(running_ready)
            && ps.iter().all(|p| old_uids.contains(&p.metadata.uid)))
        .then_some(())
    });
    let (ok, out) = skiff(&server, &["rollout", "status", "deployment/web"]);
    assert!(ok, "{out}");

    // Node loss: agent b dies. Its node turns Unknown after the grace period, its pod is
    // evicted after the toleration and replaced on node a.
    let lost = first
        .iter()
        .find(|p| p.spec.node_name.as_deref() == Some("e2e-b"))
        .expect("a pod on b")
        .metadata
        .uid
        .clone();
    b.kill9();
    let replaced = wait_for("a replacement on e2e-a", Duration::from_secs(40), || {
        let ps = pods(&client, "web");
        let live: Vec<&Pod> = ps
            .iter()
            .filter(|p| running_ready(p) && p.metadata.uid != lost)
            .collect();
        (live.len() == 2
            && live
                .iter()
                .all(|p| p.spec.node_name.as_deref() == Some("e2e-a")))
        .then(|| {
            live.iter()
                .map(|p| p.metadata.uid.clone())
                .collect::<Vec<_>>()
        })
    });
    let node_b = smol::block_on(client.get_value(api::Kind::Node, None, "e2e-b")).expect("node");
    assert!(
        node_b["spec"]["taints"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unreachable")),
        "{node_b}"
    );

    // b comes back: it stops the evicted pod and confirms, so only the replacements remain;
    // the taint goes.
    b.start(None);
    wait_for(
        "the evicted pod to be gone",
        Duration::from_secs(40),
        || {
            let ps = pods(&client, "web");
            (ps.len() == 2 && ps.iter().all(|p| replaced.contains(&p.metadata.uid))).then_some(())
        },
    );
    wait_for("node b untainted", Duration::from_secs(30), || {
        let n = smol::block_on(client.get_value(api::Kind::Node, None, "e2e-b")).ok()?;
        n["spec"]["taints"]
            .as_array()
            .is_none_or(|t| t.is_empty())
            .then_some(())
    });
    let runtime_b = {
        let cfg = agent::runtime::RuntimeConfig::new(b.run.path(), b.cgroup_parent.clone());
        agent::runtime::Runtime::new(cfg).expect("runtime")
    };
    wait_for(
        "no container of the lost pod on b",
        Duration::from_secs(30),
        || {
            runtime_b
                .list()
                .ok()?
                .iter()
                .all(|id| id.pod_uid() != lost)
                .then_some(())
        },
    );

    let (ok, out) = skiff(&server, &["delete", "deployment", "web"]);
    assert!(ok, "{out}");
    wait_for("the pods to go", Duration::from_secs(40), || {
        pods(&client, "web").is_empty().then_some(())
    });
    a.clean_up();
    b.clean_up();
}
