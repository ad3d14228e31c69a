//! One admission webhook call (`skiff_control::admission::review::call`) against real HTTPS
//! webhooks of the test (`webhook_util`): an AdmissionReview v1 as kube-apiserver sends it,
//! a mutating answer's JSONPatch applied, warnings and audit annotations kept, a denial, a
//! malformed answer, a webhook that is down and one that hangs past its timeout.

mod webhook_util;

use std::time::{Duration, Instant};

use api::admissionregistration::Webhook as Hook;
use base64::Engine as _;
use serde_json::{json, Value};
use skiff_control::admission::review::{call, Failure, Request};
use skiff_control::registry::Registry;
use skiff_control::store::{Store, StoreConfig};
use skiff_control::webhook::Webhook;
use webhook_util::{Reply, WebhookServer};

fn hook(url: &str, ca: &str, timeout: i32) -> Hook {
    let mut h: Hook = serde_json::from_value(json!({
        "name": "label.site.example.com",
        "clientConfig": {"url": url, "caBundle": ca},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout,
    }))
    .unwrap();
    h.set_defaults(true);
    h
}

fn request() -> Request {
    Request {
        kind: json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
        resource: json!({"group": "", "version": "v1", "resource": "configmaps"}),
        request_kind: json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
        request_resource: json!({"group": "", "version": "v1", "resource": "configmaps"}),
        name: "c".into(),
        namespace: "default".into(),
        operation: "CREATE",
        user_info: json!({"username": "admin", "groups": ["system:masters"]}),
        object: Some(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}),
        ),
        ..Default::default()
    }
}

#[test]
fn a_webhook_call_as_kube_apiserver_makes_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new(Store::open(StoreConfig::in_dir(dir.path())).unwrap());
    let server = WebhookServer::start(&["127.0.0.1"], |path, review: Value| {
        let req = &review["request"];
        let uid = req["uid"].clone();
        let answer = |response: Value| {
            Reply::Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": response}),
            )
        };
        match path {
            "/mutate" => {
                assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
                assert_eq!(req["operation"], "CREATE");
                assert_eq!(req["userInfo"]["username"], "admin");
                assert_eq!(req["object"]["metadata"]["name"], "c");
                assert!(req.get("subResource").is_none());
                let patch =
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}}]);
                let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
                answer(
                    json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch,
                              "warnings": ["labelled"], "auditAnnotations": {"why": "test"}}),
                )
            }
            "/deny" => answer(json!({"uid": uid, "allowed": false,
                                     "status": {"code": 403, "message": "not here"}})),
            "/wrong-uid" => answer(json!({"uid": "other", "allowed": true})),
            "/hang" => Reply::Hang,
            _ => Reply::Status(404),
        }
    });
    let ca = server.ca_bundle();
    let base = format!("https://127.0.0.1:{}", server.port);
    let run = |path: &str, timeout: i32| {
        let h = hook(&format!("{base}{path}"), &ca, timeout);
        let client = Webhook::new(&h.client_config).unwrap();
        smol::block_on(call(&h, &client, &registry, &request(), true))
    };

    let answer = run("/mutate", 10).unwrap_or_else(|_| panic!("allowed"));
    let patched = answer.patched.unwrap();
    assert_eq!(patched["metadata"]["labels"]["seen"], "yes");
    assert_eq!(answer.warnings, ["labelled"]);
    assert_eq!(
        answer.audit_annotations["label.site.example.com/why"],
        "test"
    );

    let Err(Failure::Rejected(e)) = run("/deny", 10) else {
        panic!("denied")
    };
    assert_eq!(e.code(), 403);
    assert_eq!(
        e.0.message,
        r#"admission webhook "label.site.example.com" denied the request: not here"#
    );

    let Err(Failure::Calling(e)) = run("/wrong-uid", 10) else {
        panic!("malformed")
    };
    assert_eq!(e.code(), 500);
    assert!(
        e.0.message.starts_with(r#"Internal error occurred: failed calling webhook "label.site.example.com": received invalid webhook response: expected response.uid="#),
        "{}",
        e.0.message
    );

    let started = Instant::now();
    let Err(Failure::Calling(e)) = run("/hang", 1) else {
        panic!("timed out")
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by timeoutSeconds"
    );
    assert!(
        e.0.message.contains(&format!(
            r#"failed to call webhook: Post "{base}/hang?timeout=1s": context deadline exceeded"#
        )),
        "{}",
        e.0.message
    );

    let dead = format!("https://127.0.0.1:{}/x", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    let h = hook(&dead, &ca, 10);
    let client = Webhook::new(&h.client_config).unwrap();
    let Err(Failure::Calling(e)) = smol::block_on(call(&h, &client, &registry, &request(), true))
    else {
        panic!("down")
    };
    assert!(
        e.0.message.contains("failed to call webhook: Post"),
        "{}",
        e.0.message
    );
}
