//! A server whose pods fit nowhere stays quiet on disk: the scheduler retries them only when
//! the cluster changes, and after an event and the start of its series, repeats of the same
//! FailedScheduling event are counted in memory (as client-go's event series are), so retries
//! write nothing.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::json;

const PODS: usize = 40;

fn revision(s: &TestServer) -> u64 {
    let (code, list) = s.http("GET", "/api/v1/namespaces?limit=1", None);
    assert_eq!(code, 200, "{list}");
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("a list revision")
}

/// Waits until the revision has not moved for two seconds; returns it.
fn settled(s: &TestServer) -> u64 {
    let mut last = revision(s);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = revision(s);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// The counts of the FailedScheduling events of the test's pods.
fn failed_scheduling_counts(s: &TestServer) -> Vec<i64> {
    let (code, list) = s.http("GET", "/api/v1/namespaces/default/events", None);
    assert_eq!(code, 200, "{list}");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["reason"] == "FailedScheduling")
        .map(|e| e["count"].as_i64().unwrap_or(0))
        .collect()
}

/// Changes a label of the node: a change the scheduler's node-selector filter looks at, so
/// every unschedulable pod is tried again (and fails the same way).
fn touch_node(s: &TestServer, n: u32) {
    let (code, body) = s.http(
        "PATCH",
        "/api/v1/nodes/quiet-node",
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&json!({"metadata": {"labels": {"touched": n.to_string()}}}))
                .expect("json"),
        )),
    );
    assert_eq!(code, 200, "{body}");
}

#[test]
fn retries_of_unschedulable_pods_write_nothing() {
    // No heartbeats come from this node: keep the node controller from tainting it mid-test.
    let s = TestServer::start_with(&["--node-monitor-grace-period", "600s"]);
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "quiet-node", "labels": {"zone": "a"}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}
        }
    });
    let (code, body) = s.json("POST", "/api/v1/nodes", &node);
    assert_eq!(code, 201, "{body}");
    for i in 0..PODS {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("nowhere-{i}")},
            "spec": {
                "nodeSelector": {"zone": "b"},
                "containers": [{"name": "c", "image": "busybox"}]
            }
        });
        let (code, body) = s.json("POST", "/api/v1/namespaces/default/pods", &pod);
        assert_eq!(code, 201, "{body}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while failed_scheduling_counts(&s).len() < PODS {
        assert!(
            Instant::now() < deadline,
            "the pods' FailedScheduling events"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = Instant::now();

    // The scheduler renews a failing pod's report at most every 10 s: each touch after that
    // is one more occurrence of every pod's event.
    let mut touches = 0;
    let mut touch_after = |at: Duration| {
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        touches += 1;
        touch_node(&s, touches);
    };
    // The second occurrence starts each event's series: written.
    touch_after(Duration::from_secs(11));
    let deadline = Instant::now() + Duration::from_secs(20);
    while failed_scheduling_counts(&s).iter().any(|&c| c < 2) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            failed_scheduling_counts(&s)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = settled(&s);

    // Later occurrences are counted in memory: the only writes are the two touches.
    touch_after(Duration::from_secs(23));
    touch_after(Duration::from_secs(35));
    std::thread::sleep(Duration::from_secs(3));
    let after = settled(&s);
    assert_eq!(
        after - before,
        2,
        "writes besides the two node changes while {PODS} pods were retried"
    );
    let counts = failed_scheduling_counts(&s);
    assert_eq!(counts.len(), PODS, "one event per pod: {counts:?}");
    assert!(counts.iter().all(|&c| c == 2), "{counts:?}");

    // Nothing changes now: nothing is retried and nothing is written, for longer than the
    // pods' back-off and report interval (bench/control.sh measures a longer window).
    std::thread::sleep(Duration::from_secs(25));
    assert_eq!(
        revision(&s),
        after,
        "writes while nothing changed with {PODS} unschedulable pods stored"
    );
}
