//! The scheduler inside a real `skiff server`, with three simulated nodes from
//! `skiff-agent --simulate 3`.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::{Event, Node, Pod};
use common::{agent_bin, TestServer};
use serde_json::{json, Value};

struct Simulated(Child);

impl Drop for Simulated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn simulate(server: &TestServer, n: usize) -> Simulated {
    simulate_with_prefix(server, n, "sim")
}

fn simulate_with_prefix(server: &TestServer, n: usize, prefix: &str) -> Simulated {
    let child = Command::new(agent_bin())
        .arg("--simulate")
        .arg(n.to_string())
        .args(["--sim-prefix", prefix])
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["--heartbeat-seconds", "2"])
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("start skiff-agent --simulate");
    Simulated(child)
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pod(name: &str, extra_spec: Value, labels: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "app", "image": "busybox"}]});
    if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
        s.extend(extra);
    }
    let v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": spec,
    });
    api::codec::from_json(v).expect("pod")
}

fn create(c: &Client, p: &Pod) {
    smol::block_on(c.create(p)).expect("create pod");
}

fn get(c: &Client, name: &str) -> Pod {
    smol::block_on(c.get::<Pod>("default", name)).expect("get pod")
}

fn bound_node(c: &Client, name: &str) -> Option<String> {
    get(c, name).spec.node_name.filter(|n| !n.is_empty())
}

fn wait_bound(c: &Client, name: &str) -> String {
    wait_for(&format!("{name} bound"), Duration::from_secs(20), || {
        bound_node(c, name)
    })
}

/// Waits for PodScheduled=False with `message`, then checks the pod stays unbound a moment.
fn wait_unschedulable(c: &Client, name: &str, message: &str) {
    let cond = wait_for(
        &format!("{name} unschedulable"),
        Duration::from_secs(20),
        || {
            get(c, name)
                .status
                .condition("PodScheduled")
                .filter(|c| c.status == "False")
                .cloned()
        },
    );
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(cond.message.as_deref(), Some(message));
    let p = get(c, name);
    assert_eq!(p.spec.node_name, None);
    assert_eq!(p.status.phase.as_deref(), Some("Pending"));
    wait_for(
        &format!("a FailedScheduling event for {name}"),
        Duration::from_secs(20),
        || {
            let (events, _) = smol::block_on(c.list::<Event>(Some("default"), None, None)).ok()?;
            events
                .iter()
                .find(|e| {
                    e.involved_object.name.as_deref() == Some(name)
                        && e.reason.as_deref() == Some("FailedScheduling")
                        && e.message.as_deref() == Some(message)
                        && e.type_.as_deref() == Some("Warning")
                })
                .map(|_| ())
        },
    );
}

fn patch_node(c: &Client, name: &str, patch: Value) {
    smol::block_on(c.patch::<Node>("", name, "application/merge-patch+json", &patch))
        .expect("patch node");
}

#[test]
fn scheduler_places_pods_on_simulated_nodes() {
    let server = TestServer::start();
    let c = server.client();
    let _sim = simulate(&server, 3);
    wait_for("3 ready nodes", Duration::from_secs(30), || {
        let (nodes, _) = smol::block_on(c.list::<Node>(None, None, None)).ok()?;
        let ready = nodes
            .iter()
            .filter(|n| {
                n.status
                    .condition("Ready")
                    .is_some_and(|c| c.status == "True")
            })
            .count();
        (ready == 3).then_some(())
    });

    // Equal nodes fill evenly; the simulated nodes run what is bound to them.
    for i in 0..6 {
        create(&c, &pod(&format!("even-{i}"), json!({}), json!({})));
    }
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        let name = format!("even-{i}");
        *per_node.entry(wait_bound(&c, &name)).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "{per_node:?}");
    assert!(per_node.values().all(|&n| n == 2), "{per_node:?}");
    let running = wait_for("even-0 running", Duration::from_secs(20), || {
        let p = get(&c, "even-0");
        (p.status.phase.as_deref() == Some("Running")).then_some(p)
    });
    assert!(running.status.pod_ip.is_some());
    assert!(running
        .status
        .condition("Ready")
        .is_some_and(|c| c.status == "True"));
    wait_for("a Scheduled event", Duration::from_secs(20), || {
        let (events, _) = smol::block_on(c.list::<Event>(Some("default"), None, None)).ok()?;
        events
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some("Scheduled")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.starts_with("Successfully assigned default/even-"))
            })
            .map(|_| ())
    });

    // Impossible requests stay Pending with the reasons.
    create(
        &c,
        &pod(
            "huge",
            json!({"containers": [{"name": "app", "image": "busybox",
                "resources": {"requests": {"cpu": "100", "memory": "1Gi"}}}]}),
            json!({}),
        ),
    );
    wait_unschedulable(&c, "huge", "0/3 nodes are available: 3 Insufficient cpu.");

    // A nodeSelector no node satisfies, until a node is labelled.
    create(
        &c,
        &pod("ssd", json!({"nodeSelector": {"disk": "ssd"}}), json!({})),
    );
    wait_unschedulable(
        &c,
        "ssd",
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
    );
    patch_node(
        &c,
        "sim-0002",
        json!({"metadata": {"labels": {"disk": "ssd"}}}),
    );
    assert_eq!(wait_bound(&c, "ssd"), "sim-0002");
    wait_for("ssd PodScheduled=True", Duration::from_secs(20), || {
        get(&c, "ssd")
            .status
            .condition("PodScheduled")
            .filter(|c| c.status == "True")
            .map(|_| ())
    });
    assert_eq!(bound_node(&c, "huge"), None);

    // Required anti-affinity on the hostname: one per node, the fourth waits until one goes.
    let anti = json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "solo"}},
            "topologyKey": "kubernetes.io/hostname"}]}}});
    for i in 0..4 {
        create(
            &c,
            &pod(&format!("solo-{i}"), anti.clone(), json!({"app": "solo"})),
        );
    }
    let (placed, waiting) = wait_for("3 solo pods bound", Duration::from_secs(20), || {
        let bound: Vec<(String, Option<String>)> = (0..4)
            .map(|i| {
                let n = format!("solo-{i}");
                let node = bound_node(&c, &n);
                (n, node)
            })
            .collect();
        let placed: Vec<String> = bound.iter().filter_map(|(_, n)| n.clone()).collect();
        let waiting: Vec<String> = bound
            .iter()
            .filter(|(_, n)| n.is_none())
            .map(|(p, _)| p.clone())
            .collect();
        (placed.len() == 3).then_some((placed, waiting))
    });
    let mut distinct = placed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{placed:?}");
    let last = waiting[0].clone();
    wait_unschedulable(
        &c,
        &last,
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.",
    );
    // Deleting one (gracefully: the simulated node confirms) makes room.
    let victim = (0..4)
        .map(|i| format!("solo-{i}"))
        .find(|n| *n != last)
        .expect("a placed pod");
    let freed = bound_node(&c, &victim).expect("bound");
    smol::block_on(c.delete::<Pod>("default", &victim, &Default::default())).expect("delete");
    wait_for(&format!("{victim} gone"), Duration::from_secs(20), || {
        smol::block_on(c.get::<Pod>("default", &victim))
            .err()
            .filter(|e| e.is_not_found())
            .map(|_| ())
    });
    assert_eq!(wait_bound(&c, &last), freed);

    // Taints: untolerated NoSchedule keeps pods off; a toleration lets them on.
    patch_node(
        &c,
        "sim-0001",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "edge", "effect": "NoSchedule"}]}}),
    );
    let pinned = json!({"nodeSelector": {"kubernetes.io/hostname": "sim-0001"}});
    create(&c, &pod("no-toleration", pinned.clone(), json!({})));
    wait_unschedulable(
        &c,
        "no-toleration",
        "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: edge}.",
    );
    let mut tolerating = pinned.clone();
    tolerating["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}]);
    create(&c, &pod("tolerates", tolerating, json!({})));
    assert_eq!(wait_bound(&c, "tolerates"), "sim-0001");
    assert_eq!(bound_node(&c, "no-toleration"), None);

    // DaemonSet-style placement: required matchFields on metadata.name.
    create(
        &c,
        &pod(
            "daemon",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["sim-0003"]}]}]}}}}),
            json!({}),
        ),
    );
    assert_eq!(wait_bound(&c, "daemon"), "sim-0003");

    // Required pod affinity: waits for a matching pod, then follows it to its node (sim-0001
    // is still tainted).
    create(
        &c,
        &pod(
            "follower",
            json!({"affinity": {"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"app": "leader"}},
                    "topologyKey": "kubernetes.io/hostname"}]}}}),
            json!({}),
        ),
    );
    wait_unschedulable(
        &c,
        "follower",
        "0/3 nodes are available: 2 node(s) didn't match pod affinity rules, 1 node(s) had untolerated taint {dedicated: edge}.",
    );
    create(&c, &pod("leader", json!({}), json!({"app": "leader"})));
    let leader_node = wait_bound(&c, "leader");
    assert_eq!(wait_bound(&c, "follower"), leader_node);
}

/// The edge pattern: a DaemonSet runs one pod on each of three simulated nodes, and a node
/// that joins later gets its pod without anyone acting.
#[test]
fn daemonset_covers_simulated_nodes_and_new_ones() {
    let server = TestServer::start();
    let c = server.client();
    let _sim = simulate(&server, 3);
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agentd", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "agentd"}},
            "template": {"metadata": {"labels": {"app": "agentd"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    });
    let (code, body) = server.json("POST", "/apis/apps/v1/namespaces/default/daemonsets", &ds);
    assert_eq!(code, 201, "{body}");
    let running_nodes = |want: usize| {
        wait_for(
            &format!("{want} daemon pods running"),
            Duration::from_secs(30),
            || {
                let (pods, _) =
                    smol::block_on(c.list::<Pod>(Some("default"), Some("app=agentd"), None))
                        .ok()?;
                let mut nodes: Vec<String> = pods
                    .iter()
                    .filter(|p| p.status.phase.as_deref() == Some("Running"))
                    .filter_map(|p| p.spec.node_name.clone())
                    .collect();
                nodes.sort();
                (pods.len() == want && nodes.len() == want).then_some(nodes)
            },
        )
    };
    let nodes = running_nodes(3);
    assert_eq!(nodes, ["sim-0001", "sim-0002", "sim-0003"]);
    let _late = simulate_with_prefix(&server, 1, "late");
    let nodes = running_nodes(4);
    assert!(nodes.contains(&"late-0001".to_string()), "{nodes:?}");
    wait_for("DaemonSet status", Duration::from_secs(20), || {
        let (_, ds) = server.http(
            "GET",
            "/apis/apps/v1/namespaces/default/daemonsets/agentd",
            None,
        );
        (ds["status"]["numberReady"] == 4 && ds["status"]["desiredNumberScheduled"] == 4)
            .then_some(())
    });
}
