//! events.k8s.io/v1 Events, one storage with core/v1 Events (as in Kubernetes): an Event made
//! through either version is read through the other under its names (`note`/`message`,
//! `regarding`/`involvedObject`, `reportingController`/`reportingComponent`, the
//! `deprecated*` fields), lists and watches are renamed, a series update is a merge patch of
//! the events.k8s.io names (client-go's events broadcaster), and kubectl lists them.

mod common;

use common::{kubectl, TestServer};
use serde_json::{json, Value};

const CORE: &str = "/api/v1/namespaces/default/events";
const V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

#[test]
fn events_v1_shares_the_core_event_storage() {
    let s = TestServer::start();
    let (code, made) = s.json(
        "POST",
        V1,
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "web.1"},
                "eventTime": "2026-11-29T04:00:00.000000Z",
                "regarding": {"kind": "Pod", "name": "web", "namespace": "default"},
                "note": "pulled the image", "reason": "Pulled", "type": "Normal",
                "action": "Pulling", "reportingController": "example.com/puller",
                "reportingInstance": "puller-1"}),
    );
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["apiVersion"], "events.k8s.io/v1");
    assert_eq!(made["note"], "pulled the image");
    assert_eq!(made["regarding"]["name"], "web");
    assert!(made.get("message").is_none(), "{made}");

    // The same object through core/v1.
    let (code, core) = s.http("GET", &format!("{CORE}/web.1"), None);
    assert_eq!(code, 200, "{core}");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "pulled the image");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["reportingComponent"], "example.com/puller");
    assert_eq!(
        core["metadata"]["resourceVersion"],
        made["metadata"]["resourceVersion"]
    );

    // A series update, as client-go's events broadcaster patches it.
    let (code, patched) = s.http(
        "PATCH",
        &format!("{V1}/web.1"),
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&json!({"series": {"count": 2, "lastObservedTime": "2026-11-29T04:01:00.000000Z"}, "note": "pulled again"}))
                .unwrap(),
        )),
    );
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["series"]["count"], 2);
    assert_eq!(patched["note"], "pulled again");

    // Made through core/v1, listed through events.k8s.io/v1 (items renamed).
    let (code, v) = s.json(
        "POST",
        CORE,
        &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.2"},
                "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
                "message": "started", "reason": "Started", "type": "Normal", "count": 3,
                "source": {"component": "kubelet"}}),
    );
    assert_eq!(code, 201, "{v}");
    let (code, list) = s.http("GET", V1, None);
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["apiVersion"], "events.k8s.io/v1");
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let second: &Value = items
        .iter()
        .find(|e| e["metadata"]["name"] == "web.2")
        .expect("web.2 listed");
    assert_eq!(second["note"], "started");
    assert_eq!(second["deprecatedCount"], 3);
    assert_eq!(second["deprecatedSource"]["component"], "kubelet");

    // Discovery and kubectl.
    let (code, rl) = s.http("GET", "/apis/events.k8s.io/v1", None);
    assert_eq!(code, 200, "{rl}");
    assert!(
        rl["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["name"] == "events")),
        "{rl}"
    );
    let (ok, out, err) = kubectl(&s, &["get", "events.events.k8s.io", "-o", "name"]);
    assert!(ok, "{err}");
    assert!(out.contains("event.events.k8s.io/web.1"), "{out}");
}
