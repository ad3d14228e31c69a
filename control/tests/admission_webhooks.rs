//! Admission webhooks as a site runs them (issue 33): MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration applied with the real kubectl, the webhooks real HTTPS
//! servers of the test (`webhook_util`), one reached through a Service and its Endpoints on
//! a server without its own agent, one by URL. A mutating webhook injects a label into
//! ConfigMaps, Pods (also the pods a Deployment's controllers create) and a custom resource;
//! a validating one denies, on create, update and delete, and sees what the mutating one did;
//! selectors, reinvocation, dry runs, warnings in kubectl's output, audit annotations in the
//! audit log; a webhook that denies everything cannot lock out its own configuration. Then
//! webhooks that fail and hang under both failure policies, the API answering meanwhile.

mod common;
mod webhook_util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{eventually, kubectl, TestServer};
use serde_json::{json, Value};
use webhook_util::{Reply, WebhookServer};

fn apply(s: &TestServer, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).unwrap();
    let (ok, out, err) = kubectl(s, &["apply", "-f", file.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
}

fn review(req: &Value, response: Value) -> Reply {
    let mut response = response;
    response["uid"] = req["uid"].clone();
    Reply::Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": response}),
    )
}

/// A JSONPatch answer adding `key: value` to the object's labels, if it lacks it.
fn add_label(req: &Value, key: &str, value: &str) -> Reply {
    let object = &req["object"];
    if object["metadata"]["labels"][key] == value {
        return review(req, json!({"allowed": true}));
    }
    let patch = if object["metadata"]["labels"].is_object() {
        json!([{"op": "add", "path": format!("/metadata/labels/{}", key.replace('/', "~1")), "value": value}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {key: value}}])
    };
    let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
    review(
        req,
        json!({"allowed": true, "patchType": "JSONPatch", "patch": patch,
               "warnings": ["labelled by the site's webhook"],
               "auditAnnotations": {"labelled": key}}),
    )
}

fn deny(req: &Value, code: u16, message: &str) -> Reply {
    review(
        req,
        json!({"allowed": false, "status": {"code": code, "message": message}}),
    )
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: crontabs.stable.example.com}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {cronSpec: {type: string}}}
"#;

fn audit_events(s: &TestServer) -> Vec<Value> {
    std::fs::read_to_string(s.data_dir().join("audit/audit.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn mutating_and_validating_webhooks_on_builtin_kinds_controllers_and_custom_resources() {
    // What the validating webhook was shown, for the checks below.
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let first_calls = Arc::new(AtomicUsize::new(0));
    let (seen_by_hook, first) = (seen.clone(), first_calls.clone());
    let hook = WebhookServer::start(&["hooks.default.svc", "127.0.0.1"], move |path, r| {
        let req = r["request"].clone();
        match path {
            "/label" => add_label(&req, "injected", "yes"),
            "/first" => {
                first.fetch_add(1, Ordering::SeqCst);
                add_label(&req, "first", "yes")
            }
            "/second" => add_label(&req, "second", "yes"),
            "/validate" => {
                seen_by_hook.lock().unwrap().push(req.clone());
                let labels = match req["operation"].as_str() {
                    Some("DELETE") => &req["oldObject"]["metadata"]["labels"],
                    _ => &req["object"]["metadata"]["labels"],
                };
                if labels["forbidden"] == "true" {
                    deny(
                        &req,
                        403,
                        "objects labelled forbidden=true are not allowed here",
                    )
                } else if req["operation"] == "DELETE" && labels["protected"] == "yes" {
                    deny(&req, 0, "")
                } else {
                    review(&req, json!({"allowed": true, "warnings": ["checked"]}))
                }
            }
            "/deny-all" => deny(&req, 0, "nothing today"),
            _ => Reply::Status(404),
        }
    });
    let s = TestServer::start();
    let ca = hook.ca_bundle();

    // The mutating webhook is a Service's endpoint (this server runs no agent, so nothing
    // but the API server itself resolves it).
    s.expose_local("default", "hooks", hook.port);
    apply(&s, CRD);
    eventually(20, "crontabs are served", || {
        let (code, _) = s.http(
            "GET",
            "/apis/stable.example.com/v1/namespaces/default/crontabs",
            None,
        );
        (code == 200).then_some(())
    });
    let url = format!("https://127.0.0.1:{}", hook.port);
    apply(
        &s,
        &format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: a-label}}
webhooks:
- name: label.site.example.com
  clientConfig:
    caBundle: {ca}
    service: {{namespace: default, name: hooks, path: /label}}
  rules:
  - {{operations: [CREATE, UPDATE], apiGroups: ["", stable.example.com], apiVersions: [v1], resources: [configmaps, pods, crontabs]}}
  objectSelector:
    matchExpressions: [{{key: skip-webhooks, operator: DoesNotExist}}]
  namespaceSelector:
    matchExpressions: [{{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}}]
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: b-reinvoked}}
webhooks:
- name: first.site.example.com
  clientConfig: {{caBundle: {ca}, url: "{url}/first"}}
  rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}]
  objectSelector: {{matchLabels: {{reinvoke: "yes"}}}}
  reinvocationPolicy: IfNeeded
  sideEffects: None
  admissionReviewVersions: [v1]
- name: second.site.example.com
  clientConfig: {{caBundle: {ca}, url: "{url}/second"}}
  rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}]
  objectSelector: {{matchLabels: {{reinvoke: "yes"}}}}
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: validate}}
webhooks:
- name: validate.site.example.com
  clientConfig: {{caBundle: {ca}, url: "{url}/validate"}}
  rules:
  - {{operations: ["*"], apiGroups: ["", stable.example.com], apiVersions: ["*"], resources: [configmaps, pods, crontabs]}}
  objectSelector:
    matchExpressions: [{{key: skip-webhooks, operator: DoesNotExist}}]
  matchConditions:
  - name: not-ignored
    expression: "request.operation == 'DELETE' || !has(object.metadata.annotations) || !('ignore-me' in object.metadata.annotations)"
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1beta1, v1]
"#
        ),
    );
    let (ok, out, _) = kubectl(
        &s,
        &[
            "get",
            "mutatingwebhookconfigurations,validatingwebhookconfigurations",
        ],
    );
    assert!(
        ok && out.contains("a-label") && out.contains("WEBHOOKS"),
        "{out}"
    );

    // Created through kubectl: labelled by the mutating webhook, the validating one sees the
    // label, both webhooks' warnings shown.
    let (ok, out, err) = kubectl(&s, &["create", "configmap", "site", "--from-literal=a=b"]);
    assert!(ok, "{out}{err}");
    assert!(
        err.contains("Warning: labelled by the site's webhook") && err.contains("Warning: checked"),
        "{err}"
    );
    let (_, cm) = s.http("GET", "/api/v1/namespaces/default/configmaps/site", None);
    assert_eq!(cm["metadata"]["labels"]["injected"], "yes", "{cm}");
    {
        let seen = seen.lock().unwrap();
        let last = seen.last().expect("the validating webhook was called");
        assert_eq!(last["operation"], "CREATE");
        assert_eq!(last["object"]["metadata"]["labels"]["injected"], "yes");
        assert_eq!(
            last["kind"],
            json!({"group": "", "version": "v1", "kind": "ConfigMap"})
        );
        assert_eq!(last["namespace"], "default");
        assert_eq!(last["options"]["kind"], "CreateOptions");
        assert!(
            last["userInfo"]["groups"]
                .as_array()
                .unwrap()
                .contains(&json!("system:masters")),
            "{last}"
        );
    }

    // Denied on create, update and delete, with the webhook's code and kube's message.
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "bad", "labels": {"forbidden": "true"}}}),
    );
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "admission webhook \"validate.site.example.com\" denied the request: objects labelled forbidden=true are not allowed here"
    );
    assert_eq!(
        s.http("GET", "/api/v1/namespaces/default/configmaps/bad", None)
            .0,
        404
    );
    // A match condition keeps the validating webhook out of it.
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "ignored", "labels": {"forbidden": "true"},
                             "annotations": {"ignore-me": "yes"}}}),
    );
    assert_eq!(code, 201, "{v}");
    let (ok, _, err) = kubectl(&s, &["label", "configmap", "site", "forbidden=true"]);
    assert!(!ok, "the update is denied");
    assert!(
        err.contains("admission webhook \"validate.site.example.com\" denied the request"),
        "{err}"
    );
    let (ok, out, err) = kubectl(&s, &["label", "configmap", "site", "protected=yes"]);
    assert!(ok, "{out}{err}");
    let (ok, _, err) = kubectl(&s, &["delete", "configmap", "site"]);
    assert!(!ok);
    assert!(
        err.contains(
            "admission webhook \"validate.site.example.com\" denied the request without explanation"
        ),
        "{err}"
    );
    assert_eq!(
        seen.lock().unwrap().last().unwrap()["oldObject"]["metadata"]["name"],
        "site"
    );
    let (ok, out, err) = kubectl(&s, &["label", "configmap", "site", "protected-"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(&s, &["delete", "configmap", "site"]);
    assert!(ok, "{out}{err}");

    // A server-side dry run: the webhooks are told, nothing is stored.
    let (ok, out, err) = kubectl(
        &s,
        &[
            "create",
            "configmap",
            "dry",
            "--dry-run=server",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{out}{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["metadata"]["labels"]["injected"], "yes");
    assert_eq!(seen.lock().unwrap().last().unwrap()["dryRun"], true);
    assert_eq!(
        s.http("GET", "/api/v1/namespaces/default/configmaps/dry", None)
            .0,
        404
    );

    // Selectors: an object labelled to skip the webhooks is left alone, and so is
    // kube-system.
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "skipped", "labels": {"skip-webhooks": "1"}}}),
    );
    assert_eq!(code, 201, "{v}");
    assert!(v["metadata"]["labels"].get("injected").is_none(), "{v}");
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "system"}}),
    );
    assert_eq!(code, 201, "{v}");
    assert!(v["metadata"].get("labels").is_none(), "{v}");

    // Reinvocation: the first webhook (IfNeeded) is called again after the second changed
    // the object.
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "twice", "labels": {"reinvoke": "yes"}}}),
    );
    assert_eq!(code, 201, "{v}");
    let labels = &v["metadata"]["labels"];
    assert_eq!(
        (&labels["first"], &labels["second"], &labels["injected"]),
        (&json!("yes"), &json!("yes"), &json!("yes")),
        "{v}"
    );
    assert_eq!(first_calls.load(Ordering::SeqCst), 2, "called again once");

    // A pod, a custom resource, and the pods a Deployment's controllers create.
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["labels"]["injected"], "yes", "{v}");
    assert_eq!(v["status"]["phase"], "Pending");
    let (code, v) = s.json(
        "POST",
        "/apis/stable.example.com/v1/namespaces/default/crontabs",
        &json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                "metadata": {"name": "ct"}, "spec": {"cronSpec": "* * * * */5"}}),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["labels"]["injected"], "yes", "{v}");
    let (code, v) = s.json(
        "POST",
        "/apis/stable.example.com/v1/namespaces/default/crontabs",
        &json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                "metadata": {"name": "no", "labels": {"forbidden": "true"}}}),
    );
    assert_eq!(code, 403, "{v}");
    let (ok, out, err) = kubectl(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=2",
        ],
    );
    assert!(ok, "{out}{err}");
    let pods = eventually(30, "the deployment's pods", || {
        let (_, list) = s.http(
            "GET",
            "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb",
            None,
        );
        let items = list["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 2).then_some(items)
    });
    for p in &pods {
        assert_eq!(p["metadata"]["labels"]["injected"], "yes", "{p}");
    }

    // Audit annotations: the webhook's own and kube's record of the mutation.
    // Audit annotations: the webhook's own and kube's record of each mutating call (the
    // reinvoked webhook's second call in round 1).
    let reinvoked = "mutation.webhook.admission.k8s.io/round_1_index_1";
    let create = eventually(10, "audited", || {
        audit_events(&s)
            .into_iter()
            .find(|e| e["verb"] == "create" && e["annotations"].get(reinvoked).is_some())
    });
    let notes = &create["annotations"];
    assert_eq!(
        notes["label.site.example.com/labelled"], "injected",
        "{create}"
    );
    let call = |key: &str| -> Value {
        serde_json::from_str(
            notes[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: {create}")),
        )
        .unwrap()
    };
    assert_eq!(
        call("mutation.webhook.admission.k8s.io/round_0_index_0"),
        json!({"configuration": "a-label", "webhook": "label.site.example.com", "mutated": true})
    );
    assert_eq!(
        call(reinvoked),
        json!({"configuration": "b-reinvoked", "webhook": "first.site.example.com", "mutated": false})
    );

    // A webhook that denies everything does not lock out its own configuration.
    apply(
        &s,
        &format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: deny-all}}
webhooks:
- name: deny-all.site.example.com
  clientConfig: {{caBundle: {ca}, url: "{url}/deny-all"}}
  rules: [{{operations: ["*"], apiGroups: ["*"], apiVersions: ["*"], resources: ["*/*"]}}]
  sideEffects: None
  admissionReviewVersions: [v1]
"#
        ),
    );
    let denied = eventually(10, "deny-all in force", || {
        let (ok, _, err) = kubectl(&s, &["create", "configmap", "later"]);
        (!ok).then_some(err)
    });
    assert!(denied.contains("nothing today"), "{denied}");
    let (ok, out, err) = kubectl(
        &s,
        &["delete", "validatingwebhookconfiguration", "deny-all"],
    );
    assert!(ok, "{out}{err}");
    eventually(10, "deny-all gone", || {
        kubectl(&s, &["create", "configmap", "later"])
            .0
            .then_some(())
    });
}

#[test]
fn failing_and_hanging_webhooks_under_each_failure_policy() {
    let hook = WebhookServer::start(&["127.0.0.1"], |path, _| match path {
        "/fail" => Reply::Status(500),
        _ => Reply::Hang,
    });
    let s = TestServer::start();
    let ca = hook.ca_bundle();
    let url = format!("https://127.0.0.1:{}", hook.port);
    let config = |path: &str, policy: &str| {
        format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: flaky}}
webhooks:
- name: flaky.site.example.com
  clientConfig: {{caBundle: {ca}, url: "{url}{path}"}}
  rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}]
  failurePolicy: {policy}
  timeoutSeconds: 2
  sideEffects: None
  admissionReviewVersions: [v1]
"#
        )
    };
    // Each attempt a new name (one made before a configuration is in force stays).
    let made = AtomicUsize::new(0);
    let create = |name: &str| {
        let n = made.fetch_add(1, Ordering::SeqCst);
        s.json(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{n}")}}),
        )
    };

    apply(&s, &config("/hang", "Fail"));
    // The first write the new configuration takes.
    let (code, v) = eventually(10, "the hanging webhook in force", || {
        let (code, v) = create("hang-closed");
        (code != 201).then_some((code, v))
    });
    assert_eq!(code, 500, "{v}");
    assert_eq!(
        v["message"],
        format!(
            "Internal error occurred: failed calling webhook \"flaky.site.example.com\": failed to call webhook: Post \"{url}/hang?timeout=2s\": context deadline exceeded"
        )
    );
    // While a write waits on the webhook, the API answers others.
    let waiting = std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            let started = Instant::now();
            let (code, _) = create("hang-closed-2");
            (code, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        let (ok, out, err) = kubectl(&s, &["get", "namespaces"]);
        assert!(ok, "{out}{err}");
        let other = started.elapsed();
        let (code, slow) = slow.join().unwrap();
        assert_eq!(code, 500);
        assert!(
            slow >= Duration::from_secs(2) && slow < Duration::from_secs(6),
            "{slow:?}"
        );
        other
    });
    assert!(waiting < Duration::from_secs(2), "{waiting:?}");

    apply(&s, &config("/hang", "Ignore"));
    let (code, v) = eventually(10, "ignored", || {
        let (code, v) = create("hang-open");
        (code == 201).then_some((code, v))
    });
    assert_eq!(code, 201, "{v}");

    apply(&s, &config("/fail", "Fail"));
    let (code, v) = eventually(10, "the failing webhook in force", || {
        let (code, v) = create("fail-closed");
        (code != 201).then_some((code, v))
    });
    assert_eq!(code, 500, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("Internal error occurred: failed calling webhook \"flaky.site.example.com\": failed to call webhook: "),
        "{v}"
    );
    apply(&s, &config("/fail", "Ignore"));
    eventually(10, "failing open", || {
        (create("fail-open").0 == 201).then_some(())
    });
    let key = "failed-open.validating.webhook.admission.k8s.io/round_0_index_0";
    let open = eventually(10, "audited", || {
        audit_events(&s)
            .into_iter()
            .find(|e| e["verb"] == "create" && e["annotations"].get(key).is_some())
    });
    assert_eq!(open["annotations"][key], "flaky.site.example.com", "{open}");
    assert_eq!(open["responseStatus"]["code"], 201);
}
