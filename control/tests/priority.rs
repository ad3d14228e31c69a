//! PriorityClasses, the Priority admission and scheduler preemption with the real kubectl,
//! against a real `skiff server` whose pods run on one simulated node
//! (`skiff-agent --simulate`, 4 cpus): a high-priority pod that fits nowhere preempts a
//! lower-priority one, is nominated to the node and bound there once the victim is gone,
//! while the victim's replacement waits.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{agent_bin, kubectl, Killed, TestServer};
use serde_json::{json, Value};

fn simulate(server: &TestServer, n: usize) -> Killed {
    let child = Command::new(agent_bin())
        .arg("--simulate")
        .arg(n.to_string())
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["--heartbeat-seconds", "2"])
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("start skiff-agent --simulate");
    Killed(child)
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ok(server: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(server, args);
    assert!(success, "kubectl {args:?} failed: {err}");
    out
}

fn pods(server: &TestServer, selector: &str) -> Vec<Value> {
    let (code, v) = server.http(
        "GET",
        &format!("/api/v1/namespaces/default/pods?labelSelector={selector}"),
        None,
    );
    assert_eq!(code, 200, "{v}");
    v["items"].as_array().cloned().unwrap_or_default()
}

fn get_pod(server: &TestServer, name: &str) -> Value {
    let (code, v) = server.http(
        "GET",
        &format!("/api/v1/namespaces/default/pods/{name}"),
        None,
    );
    assert_eq!(code, 200, "{v}");
    v
}

fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

#[test]
fn priority_classes_admission_and_preemption() {
    let server = TestServer::start();
    let _sim = simulate(&server, 1);
    wait_for("the simulated node", Duration::from_secs(30), || {
        let (code, v) = server.http("GET", "/api/v1/nodes", None);
        (code == 200 && v["items"].as_array().is_some_and(|a| a.len() == 1)).then_some(())
    });

    // The built-in classes, with Kubernetes' columns and short name.
    let table = ok(&server, &["get", "pc"]);
    assert_eq!(
        header(&table),
        ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
        "{table}"
    );
    assert!(table.contains("system-cluster-critical"), "{table}");
    let node_critical = table
        .lines()
        .find(|l| l.starts_with("system-node-critical"))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(
        [node_critical[1], node_critical[2], node_critical[4]],
        ["2000001000", "false", "PreemptLowerPriority"],
        "{table}"
    );
    let (success, _, err) = kubectl(&server, &["delete", "pc", "system-node-critical"]);
    assert!(!success);
    assert!(
        err.contains("priorityclasses.scheduling.k8s.io \"system-node-critical\" is forbidden: this is a system priority class and cannot be deleted"),
        "{err}"
    );

    let explained = ok(&server, &["explain", "pc.value"]);
    assert!(
        explained.contains("KIND:       PriorityClass"),
        "{explained}"
    );
    assert!(
        explained.contains("VERSION:    scheduling.k8s.io/v1")
            || explained.contains("GROUP:      scheduling.k8s.io"),
        "{explained}"
    );

    // kubectl create priorityclass; one global default only.
    ok(
        &server,
        &[
            "create",
            "priorityclass",
            "low",
            "--value=10",
            "--global-default=true",
        ],
    );
    ok(
        &server,
        &[
            "create",
            "priorityclass",
            "high",
            "--value=1000",
            "--description=important",
        ],
    );
    let (success, _, err) = kubectl(
        &server,
        &[
            "create",
            "priorityclass",
            "other",
            "--value=5",
            "--global-default=true",
        ],
    );
    assert!(!success);
    assert!(
        err.contains("priorityclasses.scheduling.k8s.io \"other\" is forbidden: PriorityClass low is already marked as default. Only one default can exist"),
        "{err}"
    );
    let (success, _, err) = kubectl(
        &server,
        &["create", "priorityclass", "system-mine", "--value=5"],
    );
    assert!(!success);
    assert!(
        err.contains("priority class names with 'system-' prefix are reserved for system use only"),
        "{err}"
    );

    // Admission: an unknown class is refused with Kubernetes' message; no class means the
    // global default.
    let (success, _, err) = kubectl(
        &server,
        &[
            "run",
            "bad",
            "--image=busybox",
            "--overrides={\"spec\":{\"priorityClassName\":\"nope\"}}",
        ],
    );
    assert!(!success);
    assert!(
        err.contains("pods \"bad\" is forbidden: no PriorityClass with name nope was found"),
        "{err}"
    );

    // Fill the node (4 cpus) with two 2-cpu pods of the default (low) class, kept by an RC.
    let rc = json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "filler"},
        "spec": {"replicas": 2, "template": {
            "metadata": {"labels": {"app": "filler"}},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "app", "image": "busybox",
                "resources": {"requests": {"cpu": "2"}}}]}}}
    });
    let (code, v) = server.json(
        "POST",
        "/api/v1/namespaces/default/replicationcontrollers",
        &rc,
    );
    assert_eq!(code, 201, "{v}");
    let fillers = wait_for("two running fillers", Duration::from_secs(30), || {
        let p: Vec<Value> = pods(&server, "app%3Dfiller")
            .into_iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .collect();
        (p.len() == 2).then_some(p)
    });
    for p in &fillers {
        assert_eq!(p["spec"]["priority"], 10, "{p}");
        assert_eq!(p["spec"]["priorityClassName"], "low", "{p}");
        assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority", "{p}");
    }

    // The high-priority pod fits nowhere until one filler goes.
    let high = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "important", "labels": {"app": "important"}},
        "spec": {"priorityClassName": "high", "containers": [{"name": "app", "image": "busybox",
            "resources": {"requests": {"cpu": "2"}}}]}
    });
    let (code, v) = server.json("POST", "/api/v1/namespaces/default/pods", &high);
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["priority"], 1000);
    let placed = wait_for("the important pod bound", Duration::from_secs(60), || {
        let p = get_pod(&server, "important");
        p["spec"]["nodeName"].is_string().then_some(p)
    });
    assert_eq!(
        placed["status"]["nominatedNodeName"], placed["spec"]["nodeName"],
        "{placed}"
    );
    // Exactly one victim: one filler is gone, its replacement waits (the node is full).
    let (code, events) = server.http(
        "GET",
        "/api/v1/namespaces/default/events?fieldSelector=reason%3DPreempted",
        None,
    );
    assert_eq!(code, 200);
    let events = events["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{events:?}");
    let victim = events[0]["involvedObject"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        fillers
            .iter()
            .any(|p| p["metadata"]["name"] == victim.as_str()),
        "{victim}"
    );
    assert_eq!(
        events[0]["message"],
        format!(
            "Preempted by pod {} on node {}",
            placed["metadata"]["uid"].as_str().unwrap(),
            placed["spec"]["nodeName"].as_str().unwrap()
        )
    );
    let now = wait_for("the replacement pending", Duration::from_secs(30), || {
        let p = pods(&server, "app%3Dfiller");
        (p.len() == 2 && p.iter().all(|p| p["metadata"]["name"] != victim.as_str())).then_some(p)
    });
    std::thread::sleep(Duration::from_secs(2));
    let pending: Vec<&Value> = now
        .iter()
        .filter(|p| p["spec"]["nodeName"].is_null())
        .collect();
    assert_eq!(pending.len(), 1, "{now:?}");
    let still = get_pod(&server, pending[0]["metadata"]["name"].as_str().unwrap());
    assert!(still["spec"]["nodeName"].is_null(), "{still}");
}
