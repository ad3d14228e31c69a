//! PodDisruptionBudgets and the eviction subresource with the real kubectl, against a real
//! `skiff server` whose pods run on simulated nodes (`skiff-agent --simulate`), which report
//! them Running and Ready.

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

fn pdb_status(server: &TestServer, name: &str) -> Value {
    let (code, v) = server.http(
        "GET",
        &format!("/apis/policy/v1/namespaces/default/poddisruptionbudgets/{name}"),
        None,
    );
    assert_eq!(code, 200, "{v}");
    v["status"].clone()
}

/// Waits until the budget counts `healthy` pods and allows `allowed` disruptions.
fn wait_budget(server: &TestServer, name: &str, healthy: i64, allowed: i64) {
    wait_for(
        &format!("{name}: {healthy} healthy, {allowed} allowed"),
        Duration::from_secs(30),
        || {
            let s = pdb_status(server, name);
            (s["currentHealthy"] == json!(healthy) && s["disruptionsAllowed"] == json!(allowed))
                .then_some(())
        },
    );
}

/// The names of the running pods labelled app=`app`, on `node` if given.
fn ready_pods(server: &TestServer, app: &str, node: Option<&str>) -> Vec<String> {
    let (_, v) = server.http(
        "GET",
        &format!("/api/v1/namespaces/default/pods?labelSelector=app%3D{app}"),
        None,
    );
    v["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["status"]["phase"] == "Running")
        .filter(|p| node.is_none_or(|n| p["spec"]["nodeName"] == n))
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn evict(server: &TestServer, pod: &str) -> (u16, Value) {
    server.json(
        "POST",
        &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
        &json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": "default"},
            "deleteOptions": {"gracePeriodSeconds": 0},
        }),
    )
}

/// A Deployment of busybox pods labelled app=`name`, pinned to `node`.
fn deployment(server: &TestServer, name: &str, replicas: u32, node: &str) {
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "app", "image": "busybox", "command": ["sleep", "3600"]}],
                },
            },
        },
    });
    let file = server.data_dir().join(format!("{name}.json"));
    std::fs::write(&file, d.to_string()).expect("write manifest");
    ok(
        server,
        &["create", "-f", file.to_str().expect("utf-8 path")],
    );
}

#[test]
fn pdb_created_by_kubectl_refuses_evictions_it_cannot_afford() {
    let server = TestServer::start();
    let _nodes = simulate(&server, 1);
    // Bare pods: an evicted one is not replaced, so the budget's arithmetic is exact.
    for pod in ["web-1", "web-2"] {
        ok(
            &server,
            &[
                "run",
                pod,
                "--image=busybox",
                "--labels=app=web",
                "--",
                "sleep",
                "3600",
            ],
        );
    }
    // `kubectl create pdb` sends protobuf.
    ok(
        &server,
        &[
            "create",
            "pdb",
            "web",
            "--selector=app=web",
            "--min-available=2",
        ],
    );
    wait_for("2 running pods", Duration::from_secs(30), || {
        (ready_pods(&server, "web", None).len() == 2).then_some(())
    });
    wait_budget(&server, "web", 2, 0);
    let s = pdb_status(&server, "web");
    assert_eq!(s["desiredHealthy"], 2);
    assert_eq!(s["expectedPods"], 2);
    assert_eq!(s["conditions"][0]["type"], "DisruptionAllowed");
    assert_eq!(s["conditions"][0]["status"], "False");
    assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");

    // Percentages and a zero survive kubectl's protobuf.
    ok(
        &server,
        &[
            "create",
            "pdb",
            "half",
            "--selector=app=none",
            "--max-unavailable=50%",
        ],
    );
    ok(
        &server,
        &[
            "create",
            "pdb",
            "zero",
            "--selector=app=none",
            "--min-available=0",
        ],
    );
    let (_, half) = server.http(
        "GET",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/half",
        None,
    );
    assert_eq!(half["spec"]["maxUnavailable"], "50%", "{half}");
    let (_, zero) = server.http(
        "GET",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/zero",
        None,
    );
    assert_eq!(zero["spec"]["minAvailable"], 0, "{zero}");
    let (success, _, err) = kubectl(
        &server,
        &[
            "create",
            "pdb",
            "both",
            "--selector=app=web",
            "--min-available=150%",
        ],
    );
    assert!(!success);
    assert!(err.contains("must not be greater than 100%"), "{err}");
    ok(&server, &["delete", "pdb", "half", "zero"]);

    let table = ok(&server, &["get", "pdb"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ]
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["web", "2", "N/A", "0"], "{table}");

    let pods = ready_pods(&server, "web", None);
    let (code, v) = evict(&server, &pods[0]);
    assert_eq!(code, 429, "{v}");
    assert_eq!(v["reason"], "TooManyRequests");
    assert_eq!(
        v["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(v["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(
        v["details"]["causes"][0]["message"],
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    // The refused pod is still there.
    assert_eq!(ready_pods(&server, "web", None).len(), 2);

    // Allow one disruption: the first eviction goes through, the second is refused.
    ok(
        &server,
        &[
            "patch",
            "pdb",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":1}}"#,
        ],
    );
    wait_budget(&server, "web", 2, 1);
    let (code, v) = evict(&server, &pods[0]);
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["status"], "Success");
    let (code, v) = evict(&server, &pods[1]);
    assert_eq!(code, 429, "{v}");
    wait_for("the evicted pod to go", Duration::from_secs(30), || {
        let (code, _) = server.http(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{}", pods[0]),
            None,
        );
        (code == 404).then_some(())
    });
    // Once its deletion is seen, the pod is no longer listed as disrupted.
    wait_for("disruptedPods to clear", Duration::from_secs(30), || {
        let d = pdb_status(&server, "web")["disruptedPods"].clone();
        (d.is_null() || d == json!({})).then_some(())
    });
    wait_budget(&server, "web", 1, 0);
}

#[test]
fn drain_waits_for_the_budget() {
    let server = TestServer::start();
    let _nodes = simulate(&server, 2);
    wait_for("2 nodes", Duration::from_secs(30), || {
        let (_, v) = server.http("GET", "/api/v1/nodes", None);
        (v["items"].as_array().map(Vec::len) == Some(2)).then_some(())
    });
    deployment(&server, "db", 2, "sim-0001");
    ok(
        &server,
        &[
            "create",
            "pdb",
            "db",
            "--selector=app=db",
            "--min-available=2",
        ],
    );
    wait_for(
        "2 running db pods on sim-0001",
        Duration::from_secs(30),
        || (ready_pods(&server, "db", Some("sim-0001")).len() == 2).then_some(()),
    );
    wait_budget(&server, "db", 2, 0);

    let drain = Command::new("kubectl")
        .args([
            "drain",
            "sim-0001",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=90s",
        ])
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", server.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl drain");
    let mut drain = Killed(drain);
    // The node is cordoned at once, but the budget holds the pods: drain keeps retrying.
    wait_for("sim-0001 cordoned", Duration::from_secs(15), || {
        let (_, v) = server.http("GET", "/api/v1/nodes/sim-0001", None);
        (v["spec"]["unschedulable"] == true).then_some(())
    });
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        drain.0.try_wait().expect("drain status").is_none(),
        "drain finished while the budget allowed no eviction"
    );
    assert_eq!(ready_pods(&server, "db", Some("sim-0001")).len(), 2);

    // Once the budget allows it, drain evicts both pods and finishes.
    ok(
        &server,
        &[
            "patch",
            "pdb",
            "db",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = drain.0.try_wait().expect("drain status") {
            break s;
        }
        assert!(Instant::now() < deadline, "drain did not finish");
        std::thread::sleep(Duration::from_millis(200));
    };
    let child = std::mem::replace(&mut drain.0, Command::new("true").spawn().expect("true"));
    let out = child.wait_with_output().expect("drain output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "drain failed: {stdout}\n{stderr}");
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{stderr}"
    );
    assert!(stdout.contains("evicted"), "{stdout}");
    assert!(stdout.contains("node/sim-0001 drained"), "{stdout}");
    assert!(ready_pods(&server, "db", Some("sim-0001")).is_empty());
}
