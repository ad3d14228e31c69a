//! coordination.k8s.io/v1 Lease through the machine's real kubectl (create, get, describe,
//! explain and discovery), and node Leases as heartbeats: an agent (`skiff-agent
//! --simulate`) renews its node's Lease in kube-node-lease while nothing is written to the
//! store, and the node lifecycle controller counts renewals as heartbeats.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{agent_bin, kubectl, Killed, TestServer};
use serde_json::{json, Value};

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

fn manifest() -> String {
    format!(
        "{}/../api/tests/manifests/lease.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn kubectl_creates_lists_describes_and_explains_leases() {
    let s = TestServer::start();
    let out = ok(&s, &["api-resources", "--api-group=coordination.k8s.io"]);
    let row = out
        .lines()
        .find(|l| l.starts_with("leases "))
        .unwrap_or_else(|| panic!("no leases row:\n{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // NAME SHORTNAMES APIVERSION NAMESPACED KIND: no short name.
    assert_eq!(
        cells,
        ["leases", "coordination.k8s.io/v1", "true", "Lease"],
        "{out}"
    );

    let out = ok(&s, &["create", "-f", &manifest()]);
    assert!(
        out.contains("lease.coordination.k8s.io/pi-1 created"),
        "{out}"
    );
    assert!(
        out.contains("lease.coordination.k8s.io/kube-controller-manager created"),
        "{out}"
    );

    let out = ok(&s, &["get", "leases", "-A"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "NAME", "HOLDER", "AGE"], "{out}");
    assert!(
        out.lines().any(|l| l
            .split_whitespace()
            .take(3)
            .eq(["kube-node-lease", "pi-1", "pi-1"])),
        "{out}"
    );
    assert!(
        out.contains("server-a_1f7c2e3d-8b5a-4c1e-9d2f-0a1b2c3d4e5f"),
        "{out}"
    );

    let out = ok(
        &s,
        &[
            "get",
            "lease",
            "pi-1",
            "-n",
            "kube-node-lease",
            "-o",
            "yaml",
        ],
    );
    assert!(out.contains("leaseDurationSeconds: 40"), "{out}");
    assert!(
        out.contains("renewTime: \"2026-11-21T11:44:00.123456Z\""),
        "microseconds kept: {out}"
    );

    let out = ok(&s, &["describe", "lease", "-n", "kube-system"]);
    assert!(
        out.contains("Name:         kube-controller-manager"),
        "{out}"
    );
    assert!(out.contains("Lease Transitions:       2"), "{out}");
    assert!(
        out.contains("Holder Identity:         server-a_1f7c2e3d"),
        "{out}"
    );

    let out = ok(&s, &["explain", "lease.spec"]);
    assert!(out.contains("GROUP:      coordination.k8s.io"), "{out}");
    assert!(out.contains("KIND:       Lease"), "{out}");
    assert!(out.contains("leaseDurationSeconds\t<integer>"), "{out}");
    assert!(out.contains("renewTime\t<string>"), "{out}");

    // Kubernetes' validation.
    let bad = s.data_dir().join("bad-lease.yaml");
    std::fs::write(
        &bad,
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: bad}\nspec:\n  leaseDurationSeconds: 0\n",
    )
    .unwrap();
    let (success, _, err) = kubectl(&s, &["create", "-f", bad.to_str().unwrap()]);
    assert!(!success);
    assert!(
        err.contains("spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        "{err}"
    );

    ok(&s, &["delete", "lease", "pi-1", "-n", "kube-node-lease"]);
    let out = ok(&s, &["get", "leases", "-n", "kube-node-lease"]);
    assert!(!out.contains("pi-1"), "{out}");
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn revision(s: &TestServer) -> u64 {
    let (code, list) = s.http("GET", "/api/v1/namespaces?limit=1", None);
    assert_eq!(code, 200, "{list}");
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("a list revision")
}

/// Durable store transactions so far (`skiff_store_commits_total`).
fn commits(s: &TestServer) -> u64 {
    let r = smol::block_on(s.client().request("GET", "/metrics", None, "text/plain")).unwrap();
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("skiff_store_commits_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no commit count in /metrics:\n{text}"))
}

/// Waits until the revision has not moved for three seconds; returns it.
fn settled(s: &TestServer) -> u64 {
    let mut last = revision(s);
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = revision(s);
        if now == last {
            return now;
        }
        last = now;
    }
}

fn lease(s: &TestServer, name: &str) -> Option<Value> {
    let (code, v) = s.http(
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"),
        None,
    );
    (code == 200).then_some(v)
}

fn renew_time(l: &Value) -> String {
    l["spec"]["renewTime"]
        .as_str()
        .expect("renewTime")
        .to_string()
}

fn ready(s: &TestServer, node: &str) -> String {
    let (code, n) = s.http("GET", &format!("/api/v1/nodes/{node}"), None);
    assert_eq!(code, 200, "{n}");
    n["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The agent makes its node's Lease and renews it; renewals move `renewTime` on reads but
/// write nothing to the store; once the agent stops, the node becomes NotReady.
#[test]
fn agent_renews_its_node_lease_without_writes_and_a_stopped_agent_makes_the_node_not_ready() {
    let s = TestServer::start_with(&["--node-monitor-grace-period", "8s"]);
    let mut sim = Killed(
        Command::new(agent_bin())
            .args(["--simulate", "1", "--heartbeat-seconds", "1"])
            .arg("--kubeconfig")
            .arg(s.kubeconfig())
            .env("SKIFF_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start skiff-agent --simulate"),
    );
    let first = wait_for("the node lease", Duration::from_secs(30), || {
        lease(&s, "sim-0001")
    });
    assert_eq!(first["spec"]["holderIdentity"], "sim-0001", "{first}");
    assert_eq!(first["spec"]["leaseDurationSeconds"], 40, "{first}");
    wait_for("the node to be Ready", Duration::from_secs(30), || {
        (ready(&s, "sim-0001") == "True").then_some(())
    });

    let (rev, writes) = (settled(&s), commits(&s));
    let before = renew_time(&lease(&s, "sim-0001").unwrap());
    std::thread::sleep(Duration::from_secs(5));
    let after = lease(&s, "sim-0001").unwrap();
    assert!(
        renew_time(&after) > before,
        "renewTime moved: {before} -> {}",
        renew_time(&after)
    );
    // Shown on lists and watches too.
    let (code, list) = s.http(
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        None,
    );
    assert_eq!(code, 200, "{list}");
    assert!(
        renew_time(&list["items"][0]) >= renew_time(&after),
        "{list}"
    );
    assert_eq!(revision(&s), rev, "renewals moved the store's revision");
    assert_eq!(commits(&s), writes, "renewals were written to disk");
    assert_eq!(
        after["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"],
        "{after}"
    );

    // The status heartbeat is a report every 5 minutes (kubelet's
    // nodeStatusReportFrequency), so it stood still meanwhile: the Lease kept the node Ready.
    let beat = |s: &TestServer| {
        let (_, n) = s.http("GET", "/api/v1/nodes/sim-0001", None);
        n["status"]["conditions"][0]["lastHeartbeatTime"].clone()
    };
    let first_beat = beat(&s);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(beat(&s), first_beat);

    // Cut off (stopped) past the grace period, the node is marked unknown; once it runs
    // again it posts its status at once, not at the next report.
    let pid = nix::unistd::Pid::from_raw(sim.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("stop the agent");
    wait_for(
        "the stopped node to be NotReady",
        Duration::from_secs(30),
        || (ready(&s, "sim-0001") == "Unknown").then_some(()),
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("continue the agent");
    wait_for(
        "the node to be Ready again",
        Duration::from_secs(15),
        || (ready(&s, "sim-0001") == "True").then_some(()),
    );

    // The lifecycle controller notices the agent is gone.
    let _ = sim.0.kill();
    let _ = sim.0.wait();
    wait_for("the node to be NotReady", Duration::from_secs(30), || {
        (ready(&s, "sim-0001") == "Unknown").then_some(())
    });
    let out = ok(&s, &["get", "node", "sim-0001"]);
    assert!(out.contains("NotReady"), "{out}");
}

/// A node whose status heartbeat stands still stays Ready while its Lease is renewed, and
/// becomes NotReady once the renewals stop (Kubernetes' node lifecycle controller).
#[test]
fn lease_renewals_count_as_node_heartbeats() {
    let s = TestServer::start_with(&["--node-monitor-grace-period", "6s"]);
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "leased"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    });
    let (code, body) = s.json("POST", "/api/v1/nodes", &node);
    assert_eq!(code, 201, "{body}");
    let now = || humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leased", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "leased", "leaseDurationSeconds": 40, "renewTime": now()}
    });
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let (code, body) = s.json("POST", path, &lease);
    assert_eq!(code, 201, "{body}");
    lease = body;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(14) {
        std::thread::sleep(Duration::from_secs(1));
        lease["spec"]["renewTime"] = json!(now());
        let (code, body) = s.json("PUT", &format!("{path}/leased"), &lease);
        assert_eq!(code, 200, "{body}");
        assert_eq!(ready(&s, "leased"), "True", "after {:?}", started.elapsed());
    }
    wait_for("the node to be NotReady", Duration::from_secs(20), || {
        (ready(&s, "leased") == "Unknown").then_some(())
    });
}
