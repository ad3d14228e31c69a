//! A custom resource with two versions and a conversion webhook (`strategy: Webhook`), as an
//! operator ships one: stored at v1 (`spec.cronSpec`), served also at v2 (`spec.schedule`),
//! the webhook a real HTTPS server of the test reached through a Service and its Endpoints
//! (verified for `conv.default.svc` against the caBundle), then by URL. Objects created,
//! read, listed, watched and patched at v2 go through the webhook and are stored at v1; the
//! real kubectl reads either version; a webhook that fails, answers wrongly, changes an
//! object's name or cannot be reached gives kube-apiserver's errors, and a definition whose
//! conversion settings are invalid is refused with kube's messages.

mod common;
mod webhook_util;

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};

use common::{eventually, kubectl, TestServer};
use serde_json::{json, Value};
use webhook_util::{Reply, WebhookServer};

/// How the test's webhook misbehaves, when it does.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Good,
    Failure,
    Rename,
    WrongVersion,
    Unavailable,
}

/// v1 `spec.cronSpec` <-> v2 `spec.schedule`.
fn convert(review: Value, mode: Mode) -> Reply {
    let req = &review["request"];
    let desired = req["desiredAPIVersion"].as_str().unwrap_or("").to_string();
    let mut out = Vec::new();
    for o in req["objects"].as_array().cloned().unwrap_or_default() {
        let mut o = o;
        let spec = o["spec"].as_object_mut().cloned().unwrap_or_default();
        let mut spec = spec;
        if desired.ends_with("/v2") {
            if let Some(c) = spec.remove("cronSpec") {
                spec.insert("schedule".into(), c);
            }
        } else if let Some(c) = spec.remove("schedule") {
            spec.insert("cronSpec".into(), c);
        }
        o["spec"] = Value::Object(spec);
        o["apiVersion"] = json!(if mode == Mode::WrongVersion {
            "stable.example.com/v9"
        } else {
            desired.as_str()
        });
        if mode == Mode::Rename {
            o["metadata"]["name"] = json!("renamed");
        }
        // A label the webhook may set (kept), and a change it may not make (restored).
        o["metadata"]["labels"]["converted"] = json!("yes");
        o["metadata"]["generation"] = json!(99);
        out.push(o);
    }
    let result = if mode == Mode::Failure {
        json!({"status": "Failure", "message": "cannot convert this one"})
    } else {
        json!({"status": "Success"})
    };
    if mode == Mode::Unavailable {
        return Reply::Status(503);
    }
    Reply::Json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": req["uid"], "convertedObjects": out, "result": result},
    }))
}

fn crd(conversion: &str) -> String {
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {{plural: crontabs, singular: crontab, kind: CronTab}}
  conversion:
{conversion}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {{type: string}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              schedule: {{type: string}}
"#
    )
}

fn apply(s: &TestServer, yaml: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).unwrap();
    kubectl(s, &["apply", "-f", file.to_str().unwrap()])
}

const V2: &str = "/apis/stable.example.com/v2/namespaces/default/crontabs";
const V1: &str = "/apis/stable.example.com/v1/namespaces/default/crontabs";

#[test]
fn conversion_webhook_through_a_service_and_a_url() {
    let mode = Arc::new(Mutex::new(Mode::Good));
    let m = mode.clone();
    let hook = WebhookServer::start(&["conv.default.svc", "127.0.0.1"], move |path, review| {
        assert_eq!(path, "/convert");
        convert(review, *m.lock().unwrap())
    });
    let s = TestServer::start();

    // The webhook's Service: no selector, its Endpoints name where the webhook listens.
    s.expose_local("default", "conv", hook.port);

    let service_conversion = format!(
        "    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        caBundle: {}\n        service: {{namespace: default, name: conv, path: /convert}}",
        hook.ca_bundle()
    );
    let (ok, out, err) = apply(&s, &crd(&service_conversion));
    assert!(ok, "{out}{err}");
    let (_, stored) = s.http(
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.stable.example.com",
        None,
    );
    assert_eq!(
        stored["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"], 443,
        "defaulted: {stored}"
    );
    eventually(20, "v2 is served", || {
        (s.http("GET", V2, None).0 == 200).then_some(())
    });

    // Created at v2: converted to v1 before it is stored, answered at v2.
    let calls = hook.calls();
    let (code, v) = s.json(
        "POST",
        V2,
        &json!({"apiVersion": "stable.example.com/v2", "kind": "CronTab",
                "metadata": {"name": "a"}, "spec": {"schedule": "*/5 * * * *"}}),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["apiVersion"], "stable.example.com/v2");
    assert_eq!(v["spec"], json!({"schedule": "*/5 * * * *"}));
    assert_eq!(
        v["metadata"]["labels"]["converted"], "yes",
        "labels kept: {v}"
    );
    assert_eq!(
        v["metadata"]["generation"], 1,
        "other metadata restored: {v}"
    );
    assert!(hook.calls() >= calls + 2, "in and out through the webhook");
    let (_, v1) = s.http("GET", &format!("{V1}/a"), None);
    assert_eq!(v1["apiVersion"], "stable.example.com/v1");
    assert_eq!(v1["spec"], json!({"cronSpec": "*/5 * * * *"}), "{v1}");

    // Read, listed and watched at v2.
    let (_, v) = s.http("GET", &format!("{V2}/a"), None);
    assert_eq!(v["spec"]["schedule"], "*/5 * * * *", "{v}");
    let (code, v) = s.json(
        "POST",
        V1,
        &json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                "metadata": {"name": "b"}, "spec": {"cronSpec": "0 * * * *"}}),
    );
    assert_eq!(code, 201, "{v}");
    let (_, list) = s.http("GET", V2, None);
    assert_eq!(list["apiVersion"], "stable.example.com/v2");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for item in items {
        assert_eq!(item["apiVersion"], "stable.example.com/v2", "{item}");
        assert!(item["spec"]["schedule"].is_string(), "{item}");
    }
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = std::process::Command::new("kubectl")
        .args([
            "get",
            "--raw",
            &format!("{V2}?watch=true&resourceVersion={rv}"),
        ])
        .env("KUBECONFIG", s.kubeconfig())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();

    // A merge patch at v2 names v2's fields.
    let (code, v) = s.http(
        "PATCH",
        &format!("{V2}/a"),
        Some((
            "application/merge-patch+json",
            br#"{"spec":{"schedule":"0 0 * * *"}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"], json!({"schedule": "0 0 * * *"}), "{v}");
    let (_, v1) = s.http("GET", &format!("{V1}/a"), None);
    assert_eq!(v1["spec"], json!({"cronSpec": "0 0 * * *"}), "{v1}");
    let event: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(event["type"], "MODIFIED", "{event}");
    assert_eq!(event["object"]["apiVersion"], "stable.example.com/v2");
    assert_eq!(event["object"]["spec"]["schedule"], "0 0 * * *", "{event}");
    let _ = watch.kill();
    let _ = watch.wait();

    // The real kubectl at either version.
    let (ok, out, err) = kubectl(
        &s,
        &["get", "crontabs.v2.stable.example.com", "a", "-o", "json"],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["spec"]["schedule"], "0 0 * * *");

    // A webhook that fails, answers wrongly, renames, or is down: kube's errors, nothing stored.
    let cases = [
        (Mode::Failure, "conversion webhook for stable.example.com/v1, Kind=CronTab failed: cannot convert this one"),
        (Mode::WrongVersion, "conversion webhook for stable.example.com/v1, Kind=CronTab returned invalid object at index 0: invalid groupVersion (expected stable.example.com/v2, received stable.example.com/v9)"),
        (Mode::Rename, "conversion webhook for stable.example.com/v1, Kind=CronTab returned invalid object: must have the same name: a != renamed"),
        (Mode::Unavailable, "conversion webhook for stable.example.com/v1, Kind=CronTab failed: the server responded with the status code 503"),
    ];
    for (m, message) in cases {
        *mode.lock().unwrap() = m;
        let (code, v) = s.http("GET", &format!("{V2}/a"), None);
        assert_eq!(code, 500, "{m:?}: {v}");
        assert_eq!(v["reason"], "InternalError");
        let got = v["message"].as_str().unwrap();
        assert!(
            got.starts_with(&format!("Internal error occurred: {message}")),
            "{m:?}: {got}"
        );
    }
    *mode.lock().unwrap() = Mode::Failure;
    let (code, v) = s.json(
        "POST",
        V2,
        &json!({"apiVersion": "stable.example.com/v2", "kind": "CronTab",
                "metadata": {"name": "c"}, "spec": {"schedule": "1 * * * *"}}),
    );
    assert_eq!(code, 500, "{v}");
    assert_eq!(
        s.http("GET", &format!("{V1}/c"), None).0,
        404,
        "nothing stored"
    );
    // At the storage version nothing needs the webhook.
    let (code, _) = s.http("GET", &format!("{V1}/a"), None);
    assert_eq!(code, 200);
    *mode.lock().unwrap() = Mode::Good;

    // The same webhook by URL; then at an address where nothing listens.
    let url_conversion = |url: &str| {
        format!(
            "    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1beta1, v1]\n      clientConfig:\n        caBundle: {}\n        url: {url}",
            hook.ca_bundle()
        )
    };
    let (ok, out, err) = apply(
        &s,
        &crd(&url_conversion(&format!(
            "https://127.0.0.1:{}/convert",
            hook.port
        ))),
    );
    assert!(ok, "{out}{err}");
    eventually(20, "the URL is used", || {
        let before = hook.calls();
        let (code, v) = s.http("GET", &format!("{V2}/b"), None);
        (code == 200 && v["spec"]["schedule"] == "0 * * * *" && hook.calls() > before).then_some(())
    });
    let dead = common::free_port();
    let (ok, out, err) = apply(
        &s,
        &crd(&url_conversion(&format!(
            "https://127.0.0.1:{dead}/convert"
        ))),
    );
    assert!(ok, "{out}{err}");
    eventually(20, "an unreachable webhook fails the request", || {
        let (code, v) = s.http("GET", &format!("{V2}/b"), None);
        let m = v["message"].as_str().unwrap_or("").to_string();
        (code == 500
            && m.contains(&format!(
                "failed: Post \"https://127.0.0.1:{dead}/convert?timeout=30s\""
            )))
        .then_some(())
    });
}

#[test]
fn invalid_conversion_settings_are_refused() {
    let s = TestServer::start();
    let cases = [
        (
            "    strategy: Webhook",
            "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
        ),
        (
            "    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig: {url: 'http://example.test/convert'}",
            "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
        ),
        (
            "    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v3]\n      clientConfig: {url: 'https://example.test/convert'}",
            "spec.conversion.conversionReviewVersions: Invalid value: []string{\"v3\"}: must include at least one of v1, v1beta1",
        ),
        (
            "    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        service: {namespace: default, name: conv, path: convert}\n        url: https://example.test/",
            "spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required",
        ),
        (
            "    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        service: {namespace: default, name: conv, path: convert, port: 0}",
            "spec.conversion.webhookClientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
        ),
    ];
    for (conversion, message) in cases {
        let (ok, _, err) = apply(&s, &crd(conversion));
        assert!(!ok, "{conversion}");
        assert!(err.contains(message), "{conversion}:\n{err}");
    }
}
