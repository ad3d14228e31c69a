//! The OpenAPI documents and server-side field validation, through the machine's real
//! `kubectl` (explain, apply/create with --validate, diff, --dry-run=server) and raw requests.

mod common;

use common::{kubectl, TestServer};
use serde_json::{json, Value};

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

/// A Deployment manifest; `replicas_key` and `image_key` let a test misspell fields.
fn deployment(s: &TestServer, file: &str, replicas_key: &str, image_key: &str) -> String {
    let yaml = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  {replicas_key}: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: main
        image: busybox
        {image_key}: /tmp
"
    );
    let path = s.data_dir().join(file);
    std::fs::write(&path, yaml).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn explain_prints_fields_with_their_types_and_descriptions() {
    let s = TestServer::start();
    let out = ok(&s, &["explain", "deployment.spec.replicas"]);
    assert!(out.contains("GROUP:      apps"), "{out}");
    assert!(out.contains("KIND:       Deployment"), "{out}");
    assert!(out.contains("FIELD: replicas <integer>"), "{out}");
    assert!(out.contains("Number of desired pods"), "{out}");

    let out = ok(&s, &["explain", "pod.spec.containers"]);
    assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
    assert!(out.contains("image\t<string>"), "{out}");
    assert!(out.contains("Container image name"), "{out}");
    assert!(out.contains("env\t<[]EnvVar>"), "{out}");

    let out = ok(&s, &["explain", "svc"]);
    assert!(out.contains("KIND:       Service"), "{out}");
    assert!(out.contains("spec\t<ServiceSpec>"), "{out}");
    assert!(out.contains("Service gives a set of pods"), "{out}");

    let out = ok(
        &s,
        &["explain", "deploy.spec.strategy.rollingUpdate.maxSurge"],
    );
    assert!(out.contains("FIELD: maxSurge <string>"), "{out}");
    let out = ok(&s, &["explain", "cm.metadata.creationTimestamp"]);
    assert!(out.contains("FIELD: creationTimestamp <string>"), "{out}");
    let out = ok(&s, &["explain", "pods.spec.containers.resources.limits"]);
    assert!(out.contains("<map[string]Quantity>"), "{out}");
    // Every served kind explains, by any of its names.
    for name in [
        "ns", "no", "po", "svc", "ep", "cm", "secret", "ev", "deploy", "rs", "ds",
    ] {
        let out = ok(&s, &["explain", name]);
        assert!(out.contains("metadata\t<ObjectMeta>"), "{name}: {out}");
    }

    let (success, _, err) = kubectl(&s, &["explain", "deployment.spec.replicaz"]);
    assert!(!success);
    assert!(err.contains("field \"replicaz\" does not exist"), "{err}");
}

#[test]
fn apply_validate_strict_refuses_warn_warns_and_false_accepts_unknown_fields() {
    let s = TestServer::start();
    let bad = deployment(&s, "bad.yaml", "replicaz", "imagez");
    let good = deployment(&s, "good.yaml", "replicas", "workingDir");

    for cmd in ["apply", "create"] {
        let (success, _, err) = kubectl(&s, &[cmd, "--validate=strict", "-f", &bad]);
        assert!(
            !success,
            "{cmd} --validate=strict accepted an unknown field"
        );
        assert!(
            err.contains("strict decoding error: unknown field \"spec.replicaz\", unknown field \"spec.template.spec.containers[0].imagez\""),
            "{err}"
        );
    }
    // The default is strict too.
    let (success, _, err) = kubectl(&s, &["apply", "-f", &bad]);
    assert!(
        !success && err.contains("unknown field \"spec.replicaz\""),
        "{err}"
    );
    let (success, _, _) = kubectl(&s, &["get", "deploy", "web"]);
    assert!(!success, "a refused apply created the object");

    let (success, out, err) = kubectl(&s, &["apply", "--validate=warn", "-f", &bad]);
    assert!(success, "{out}\n{err}");
    assert!(out.contains("deployment.apps/web created"), "{out}");
    assert!(
        err.contains("Warning: unknown field \"spec.replicaz\"")
            && err.contains("Warning: unknown field \"spec.template.spec.containers[0].imagez\""),
        "{err}"
    );
    let live: Value =
        serde_json::from_str(&ok(&s, &["get", "deploy", "web", "-o", "json"])).unwrap();
    assert_eq!(
        live["spec"]["replicas"], 1,
        "the unknown field was not dropped"
    );
    assert!(live["spec"].get("replicaz").is_none());

    // An update (a strategic merge patch) is checked as strictly: its patch also removes the
    // unknown fields the last applied configuration had, which is no error.
    let (success, _, err) = kubectl(&s, &["apply", "--validate=strict", "-f", &good]);
    assert!(success, "{err}");
    let live: Value =
        serde_json::from_str(&ok(&s, &["get", "deploy", "web", "-o", "json"])).unwrap();
    assert_eq!(live["spec"]["replicas"], 2);
    let (success, _, err) = kubectl(&s, &["apply", "--validate=strict", "-f", &bad]);
    assert!(
        !success && err.contains("unknown field \"spec.replicaz\""),
        "{err}"
    );

    ok(&s, &["delete", "deploy", "web"]);
    let (success, out, err) = kubectl(&s, &["apply", "--validate=false", "-f", &bad]);
    assert!(success, "{out}\n{err}");
    assert!(!err.contains("Warning"), "{err}");

    // create, diff and server-side dry runs keep working with the documents served.
    ok(&s, &["delete", "deploy", "web"]);
    ok(&s, &["create", "-f", &good]);
    let (_, diff, err) = kubectl(&s, &["diff", "-f", &good]);
    assert!(!err.contains("error"), "{diff}\n{err}");
    let out = ok(&s, &["apply", "--dry-run=server", "-f", &good]);
    assert!(out.contains("(server dry run)"), "{out}");
    let out = ok(&s, &["apply", "--server-side", "-f", &good]);
    assert!(out.contains("serverside-applied"), "{out}");
}

#[test]
fn documents_are_served_with_etags_and_writes_honour_field_validation() {
    let s = TestServer::start();
    let c = s.client();
    smol::block_on(async {
        let index = c
            .request("GET", "/openapi/v3", None, "application/json")
            .await
            .unwrap();
        assert_eq!(index.status, 200);
        let index: Value = index.json().unwrap();
        let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_string();
        let doc = c
            .request("GET", &url, None, "application/json")
            .await
            .unwrap();
        assert_eq!(doc.status, 200);
        let etag = doc.header("etag").unwrap().to_string();
        assert!(url.ends_with(etag.trim_matches('"')), "{url} {etag}");
        assert_eq!(doc.header("cache-control"), Some("public, immutable"));
        let doc: Value = doc.json().unwrap();
        assert_eq!(doc["openapi"], "3.0.0");
        let deployment = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            deployment["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        let missing = c
            .request("GET", "/openapi/v3/apis/nope/v1", None, "application/json")
            .await
            .unwrap();
        assert_eq!(missing.status, 404);

        let v2 = c
            .request("GET", "/openapi/v2", None, "application/json")
            .await
            .unwrap();
        assert_eq!(v2.status, 200);
        let v2: Value = v2.json().unwrap();
        assert_eq!(v2["swagger"], "2.0");
        assert!(
            v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"].is_object()
        );
        let pb = c
            .request(
                "GET",
                "/openapi/v2",
                None,
                "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            )
            .await
            .unwrap();
        assert_eq!((pb.status, pb.body.len()), (200, 0));

        // Raw writes: no fieldValidation keeps the model's own refusal; Strict, Warn, Ignore.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}, "dataz": 1});
        let path = "/api/v1/namespaces/default/configmaps";
        let body = || Some(("application/json", serde_json::to_vec(&cm).unwrap()));
        let r = c
            .request("POST", path, body(), "application/json")
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        let r = c
            .request(
                "POST",
                &format!("{path}?fieldValidation=Strict"),
                body(),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        let status: Value = r.json().unwrap();
        assert_eq!(status["message"], "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dataz\"");
        let r = c
            .request(
                "POST",
                &format!("{path}?fieldValidation=Bogus"),
                body(),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        let r = c
            .request(
                "POST",
                &format!("{path}?fieldValidation=Warn"),
                body(),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            r.header("warning"),
            Some("299 - \"unknown field \\\"dataz\\\"\"")
        );
        let twice = br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"a": "1"}, "data": {"a": "2"}}"#;
        let r = c
            .request(
                "POST",
                &format!("{path}?fieldValidation=Strict"),
                Some(("application/json", twice.to_vec())),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        assert!(
            String::from_utf8_lossy(&r.body).contains("duplicate field \\\"data\\\""),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        let r = c
            .request(
                "POST",
                &format!("{path}?fieldValidation=Warn"),
                Some(("application/json", twice.to_vec())),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(
            r.header("warning"),
            Some("299 - \"duplicate field \\\"data\\\"\"")
        );
        assert_eq!(r.json().unwrap()["data"]["a"], "2");
        let patch = |ct: &'static str, p: Value| Some((ct, serde_json::to_vec(&p).unwrap()));
        let item = format!("{path}/c");
        let r = c
            .request(
                "PATCH",
                &format!("{item}?fieldValidation=Strict"),
                patch("application/merge-patch+json", json!({"immutablez": true})),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        assert!(String::from_utf8_lossy(&r.body).contains("unknown field \\\"immutablez\\\""));
        let r = c
            .request(
                "PATCH",
                &format!("{item}?fieldValidation=Strict"),
                patch(
                    "application/json-patch+json",
                    json!([{"op": "add", "path": "/metadata/labelz", "value": {}}]),
                ),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        assert!(String::from_utf8_lossy(&r.body).contains("unknown field \\\"metadata.labelz\\\""));
        let r = c
            .request(
                "PATCH",
                &format!("{item}?fieldValidation=Ignore"),
                patch(
                    "application/strategic-merge-patch+json",
                    json!({"data": {"x": "y"}, "immutablez": true}),
                ),
                "application/json",
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(r.header("warning").is_none());
        let r = c
            .request("PUT", &format!("{item}?fieldValidation=Strict"), Some(("application/json", serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namez": "x"}})).unwrap())), "application/json")
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        assert!(String::from_utf8_lossy(&r.body).contains("unknown field \\\"metadata.namez\\\""));
    });
}
