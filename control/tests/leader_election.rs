//! `skiff server --leader-elect`: the server runs its controllers only after it takes the
//! Lease kube-system/skiff-controller-manager, renews it, and exits when it loses it; without
//! the flag (the embedded datastore's default) no Lease is written.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{json, Value};

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/skiff-controller-manager";

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

fn lease(s: &TestServer) -> Option<Value> {
    let (code, v) = s.http("GET", LEASE, None);
    (code == 200).then_some(v)
}

/// A Deployment's ReplicaSet appears: the controllers run.
fn controllers_run(s: &TestServer) {
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
            }
        }
    });
    let (code, body) = s.json(
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        &deploy,
    );
    assert_eq!(code, 201, "{body}");
    wait_for(
        "the Deployment's ReplicaSet",
        Duration::from_secs(20),
        || {
            let (_, list) = s.http("GET", "/apis/apps/v1/namespaces/default/replicasets", None);
            (!list["items"].as_array()?.is_empty()).then_some(())
        },
    );
}

#[test]
fn an_elected_server_renews_its_lease_and_exits_when_it_loses_it() {
    let mut s = TestServer::start_with(&[
        "--leader-elect",
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ]);
    let first = wait_for("the leader lease", Duration::from_secs(20), || lease(&s));
    let holder = first["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(holder.contains('_'), "host_uuid: {first}");
    assert_eq!(first["spec"]["leaseDurationSeconds"], 3, "{first}");
    assert_eq!(first["spec"]["leaseTransitions"], 0, "{first}");
    controllers_run(&s);
    let renewed = wait_for("a renewal", Duration::from_secs(5), || {
        let l = lease(&s)?;
        (l["spec"]["renewTime"] != first["spec"]["renewTime"]).then_some(l)
    });
    assert_eq!(renewed["spec"]["holderIdentity"], holder.as_str());

    // Another holder takes the Lease: the server cannot renew and stops, as
    // kube-controller-manager does.
    let mut taken = renewed.clone();
    taken["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    taken["spec"]["holderIdentity"] = json!("someone-else");
    taken["spec"]["renewTime"] =
        json!(humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string());
    let (code, body) = s.json("PUT", LEASE, &taken);
    assert_eq!(code, 200, "{body}");
    let status = wait_for("the server to exit", Duration::from_secs(15), || {
        s.child.try_wait().ok().flatten()
    });
    assert!(
        !status.success(),
        "a lost election is an error exit: {status:?}"
    );
}

#[test]
fn without_election_no_lease_is_written() {
    let s = TestServer::start();
    controllers_run(&s);
    std::thread::sleep(Duration::from_secs(3));
    assert!(lease(&s).is_none(), "{:?}", lease(&s));
}
