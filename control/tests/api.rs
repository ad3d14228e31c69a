//! The API against a real server process over TLS: semantics of create, update, patch,
//! delete, subresources, selectors, errors, and durability across restarts.

mod common;

use common::TestServer;
use serde_json::{json, Value};

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web", "tier": "front"}},
        // No scheduler acts on these pods: the tests compare whole objects.
        "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    })
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

const PODS: &str = "/api/v1/namespaces/default/pods";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn create_fills_server_fields_and_defaults() {
    let s = TestServer::start();
    let (code, p) = s.json("POST", PODS, &pod("a"));
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["kind"], "Pod");
    assert_eq!(p["apiVersion"], "v1");
    assert_eq!(p["metadata"]["namespace"], "default");
    assert!(!p["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(
        p["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert!(p["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert_eq!(p["metadata"]["generation"], 1);
    assert_eq!(p["spec"]["restartPolicy"], "Always");
    assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(p["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(
        p["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(p["status"]["phase"], "Pending");

    let (code, again) = s.json("POST", PODS, &pod("a"));
    assert_eq!(code, 409);
    assert_eq!(again["reason"], "AlreadyExists");
    assert_eq!(again["message"], "pods \"a\" already exists");

    let (code, got) = s.http("GET", &format!("{PODS}/a"), None);
    assert_eq!(code, 200);
    assert_eq!(got, p);

    let mut gen = pod("");
    gen["metadata"] = json!({"generateName": "web-"});
    let (code, g) = s.json("POST", PODS, &gen);
    assert_eq!(code, 201, "{g}");
    let name = g["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
}

#[test]
fn update_uses_optimistic_concurrency_and_generation_follows_spec() {
    let s = TestServer::start();
    let (_, cm) = s.json("POST", CMS, &configmap("c", json!({})));
    let mut stale = cm.clone();
    let mut fresh = cm.clone();
    fresh["data"]["k"] = json!("v2");
    let (code, updated) = s.json("PUT", &format!("{CMS}/c"), &fresh);
    assert_eq!(code, 200, "{updated}");
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        cm["metadata"]["resourceVersion"]
    );

    stale["data"]["k"] = json!("v3");
    let (code, err) = s.json("PUT", &format!("{CMS}/c"), &stale);
    assert_eq!(code, 409);
    assert_eq!(err["reason"], "Conflict");
    assert_eq!(
        err["message"],
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Without a resourceVersion the update is unconditional.
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (code, _) = s.json("PUT", &format!("{CMS}/c"), &stale);
    assert_eq!(code, 200);

    let (_, d) = s.json(
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        &json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
            "spec":{"replicas":1,"selector":{"matchLabels":{"app":"web"}},
            "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx:1.25"}]}}}}),
    );
    assert_eq!(d["metadata"]["generation"], 1);
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    let path = "/apis/apps/v1/namespaces/default/deployments/web";
    let (_, d2) = s.http(
        "PATCH",
        path,
        Some((
            "application/merge-patch+json",
            br#"{"metadata":{"labels":{"x":"y"}}}"#.to_vec(),
        )),
    );
    assert_eq!(
        d2["metadata"]["generation"], 1,
        "a label change is not a spec change"
    );
    let (_, d3) = s.http(
        "PATCH",
        path,
        Some((
            "application/merge-patch+json",
            br#"{"spec":{"replicas":3}}"#.to_vec(),
        )),
    );
    assert_eq!(d3["metadata"]["generation"], 2);
    assert_eq!(d3["spec"]["replicas"], 3);
    let (code, d4) = s.http(
        "PATCH",
        path,
        Some((
            "application/json-patch+json",
            br#"[{"op":"replace","path":"/spec/replicas","value":5}]"#.to_vec(),
        )),
    );
    assert_eq!(code, 200, "{d4}");
    assert_eq!(d4["spec"]["replicas"], 5);
    let (code, d5) = s.http(
        "PATCH",
        path,
        Some((
            "application/strategic-merge-patch+json",
            br#"{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:1.26"}]}}}}"#
                .to_vec(),
        )),
    );
    assert_eq!(code, 200, "{d5}");
    assert_eq!(
        d5["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.26"
    );
    assert_eq!(d5["metadata"]["generation"], 4);

    // The scale subresource.
    let (code, scale) = s.http("GET", &format!("{path}/scale"), None);
    assert_eq!(code, 200);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["selector"], "app=web");
    let (code, scale) = s.http(
        "PATCH",
        &format!("{path}/scale"),
        Some((
            "application/merge-patch+json",
            br#"{"spec":{"replicas":2}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200);
    assert_eq!(scale["spec"]["replicas"], 2);
}

#[test]
fn status_subresource_is_separate_from_the_main_resource() {
    let s = TestServer::start();
    let (_, p) = s.json("POST", PODS, &pod("s"));
    let mut with_status = p.clone();
    with_status["status"] = json!({"phase": "Running", "podIP": "10.42.0.5"});
    with_status["spec"]["containers"][0]["image"] = json!("busybox:other");
    let (code, after) = s.json("PUT", &format!("{PODS}/s/status"), &with_status);
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["status"]["phase"], "Running");
    assert_eq!(
        after["spec"]["containers"][0]["image"], "busybox:1.36",
        "status writes never change spec"
    );

    let mut main = after.clone();
    main["status"] = json!({"phase": "Failed"});
    main["metadata"]["labels"]["extra"] = json!("1");
    let (code, after2) = s.json("PUT", &format!("{PODS}/s"), &main);
    assert_eq!(code, 200, "{after2}");
    assert_eq!(
        after2["status"]["phase"], "Running",
        "main writes never change status"
    );
    assert_eq!(after2["metadata"]["labels"]["extra"], "1");
}

#[test]
fn pods_are_deleted_gracefully_once_bound() {
    let s = TestServer::start();
    s.json("POST", PODS, &pod("unbound"));
    let (code, _) = s.http("DELETE", &format!("{PODS}/unbound"), None);
    assert_eq!(code, 200);
    assert_eq!(
        s.http("GET", &format!("{PODS}/unbound"), None).0,
        404,
        "an unbound pod goes at once"
    );

    s.json("POST", PODS, &pod("bound"));
    let (code, b) = s.json(
        "POST",
        &format!("{PODS}/bound/binding"),
        &json!({"apiVersion":"v1","kind":"Binding","metadata":{"name":"bound"},"target":{"kind":"Node","name":"n1"}}),
    );
    assert_eq!(code, 201, "{b}");
    let (code, again) = s.json(
        "POST",
        &format!("{PODS}/bound/binding"),
        &json!({"apiVersion":"v1","kind":"Binding","metadata":{"name":"bound"},"target":{"kind":"Node","name":"n2"}}),
    );
    assert_eq!(code, 409, "{again}");
    let (code, marked) = s.http("DELETE", &format!("{PODS}/bound"), None);
    assert_eq!(code, 200);
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let (code, still) = s.http("GET", &format!("{PODS}/bound"), None);
    assert_eq!(code, 200, "a bound pod waits for its node");
    assert_eq!(still["spec"]["nodeName"], "n1");
    // The node confirms with a zero grace period.
    let (code, _) = s.json(
        "DELETE",
        &format!("{PODS}/bound"),
        &json!({"gracePeriodSeconds": 0}),
    );
    assert_eq!(code, 200);
    assert_eq!(s.http("GET", &format!("{PODS}/bound"), None).0, 404);
}

#[test]
fn finalizers_hold_deletion_and_preconditions_are_honoured() {
    let s = TestServer::start();
    let mut cm = configmap("f", json!({}));
    cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let (_, created) = s.json("POST", CMS, &cm);
    let (code, err) = s.json(
        "DELETE",
        &format!("{CMS}/f"),
        &json!({"preconditions": {"resourceVersion": "1"}}),
    );
    assert_eq!(code, 409, "{err}");
    let (code, marked) = s.json(
        "DELETE",
        &format!("{CMS}/f"),
        &json!({"preconditions": {"uid": created["metadata"]["uid"]}}),
    );
    assert_eq!(code, 200);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(s.http("GET", &format!("{CMS}/f"), None).0, 200);
    let (code, _) = s.http(
        "PATCH",
        &format!("{CMS}/f"),
        Some((
            "application/merge-patch+json",
            br#"{"metadata":{"finalizers":null}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200);
    assert_eq!(
        s.http("GET", &format!("{CMS}/f"), None).0,
        404,
        "removing the last finalizer deletes"
    );
}

/// JSON patch `test` as kube-apiserver applies it: a member absent from an existing object
/// tests equal to null. kube-rs's finalizer helper adds an object's first finalizer with
/// `test /metadata/finalizers null` then `add`, and removes one with `test` of its index.
#[test]
fn a_json_patch_tests_an_absent_member_as_null() {
    let s = TestServer::start();
    s.json("POST", CMS, &configmap("t", json!({})));
    let path = format!("{CMS}/t");
    let patch = |ops: Value| {
        s.http(
            "PATCH",
            &path,
            Some((
                "application/json-patch+json",
                serde_json::to_vec(&ops).unwrap(),
            )),
        )
    };
    let (code, cm) = patch(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/a"]},
    ]));
    assert_eq!(code, 200, "{cm}");
    assert_eq!(cm["metadata"]["finalizers"], json!(["example.com/a"]));

    // Present now: the same test fails, and nothing is written.
    let (code, err) = patch(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/b"]},
    ]));
    assert_eq!(code, 422, "{err}");
    assert_eq!(err["reason"], "Invalid", "{err}");
    // A member of an object that is itself missing is no null: the test fails.
    let (code, err) = patch(json!([
        {"op": "test", "path": "/metadata/nothing/here", "value": null},
    ]));
    assert_eq!(code, 422, "{err}");
    // A test for another value on an absent member fails.
    let (code, err) = patch(json!([{"op": "test", "path": "/binaryData", "value": {}}]));
    assert_eq!(code, 422, "{err}");

    // Removing the finalizer by its index, after testing it.
    let (code, cm) = patch(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/a"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]));
    assert_eq!(code, 200, "{cm}");
    assert!(cm["metadata"].get("finalizers").is_none(), "{cm}");
}

#[test]
fn deleting_a_namespace_removes_its_contents() {
    let s = TestServer::start();
    let (code, _) = s.json(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}}),
    );
    assert_eq!(code, 201);
    s.json(
        "POST",
        "/api/v1/namespaces/team/configmaps",
        &configmap("one", json!({})),
    );
    s.json("POST", "/api/v1/namespaces/team/pods", &pod("p"));
    let (code, ns) = s.http("DELETE", "/api/v1/namespaces/team", None);
    assert_eq!(code, 200);
    assert_eq!(ns["status"]["phase"], "Terminating");
    let (code, refused) = s.json(
        "POST",
        "/api/v1/namespaces/team/configmaps",
        &configmap("two", json!({})),
    );
    assert_eq!(code, 403, "{refused}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while s.http("GET", "/api/v1/namespaces/team", None).0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "namespace was not removed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        s.http("GET", "/api/v1/namespaces/team/configmaps/one", None)
            .0,
        404
    );
    assert_eq!(s.http("GET", "/api/v1/namespaces/team/pods/p", None).0, 404);
    let (code, _) = s.http("DELETE", "/api/v1/namespaces/default", None);
    assert_eq!(code, 403, "system namespaces stay");
    let (code, _) = s.json(
        "POST",
        "/api/v1/namespaces/nowhere/configmaps",
        &configmap("x", json!({})),
    );
    assert_eq!(code, 404);
}

#[test]
fn list_filters_by_label_and_field_selectors() {
    let s = TestServer::start();
    s.json(
        "POST",
        CMS,
        &configmap("a", json!({"app": "web", "env": "prod"})),
    );
    s.json(
        "POST",
        CMS,
        &configmap("b", json!({"app": "web", "env": "dev"})),
    );
    s.json("POST", CMS, &configmap("c", json!({"app": "db"})));
    let names = |q: &str| -> Vec<String> {
        let (code, list) = s.http("GET", &format!("{CMS}?{q}"), None);
        assert_eq!(code, 200, "{q}: {list}");
        assert_eq!(list["kind"], "ConfigMapList");
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            // The CA bundle every namespace gets (the root-ca-cert-publisher's).
            .filter(|n| n != "kube-root-ca.crt")
            .collect()
    };
    assert_eq!(names("labelSelector=app%3Dweb"), ["a", "b"]);
    assert_eq!(names("labelSelector=app%21%3Dweb"), ["c"]);
    assert_eq!(names("labelSelector=env%20in%20(prod,qa)"), ["a"]);
    assert_eq!(names("labelSelector=env%20notin%20(prod)"), ["b", "c"]);
    assert_eq!(names("labelSelector=env"), ["a", "b"]);
    assert_eq!(names("labelSelector=!env"), ["c"]);
    assert_eq!(names("fieldSelector=metadata.name%3Db"), ["b"]);
    assert_eq!(
        names("fieldSelector=metadata.namespace%3Ddefault,metadata.name!%3Db"),
        ["a", "c"]
    );
    let (code, _) = s.http("GET", &format!("{CMS}?labelSelector=a%20in%20(("), None);
    assert_eq!(code, 400);
    let (code, _) = s.http("GET", &format!("{CMS}?fieldSelector=spec.bogus%3D1"), None);
    assert_eq!(code, 400);

    // Paging with limit and continue, with a selector applied before the limit.
    let mut seen = Vec::new();
    let mut path = format!("{CMS}?limit=1&labelSelector=app%3Dweb");
    let mut first_rv = None;
    loop {
        let (code, page) = s.http("GET", &path, None);
        assert_eq!(code, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 1);
        seen.extend(
            items
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string()),
        );
        let rv = page["metadata"]["resourceVersion"].clone();
        assert_eq!(
            *first_rv.get_or_insert(rv.clone()),
            rv,
            "every page reports the first page's revision"
        );
        match page["metadata"]["continue"].as_str() {
            Some(c) => path = format!("{CMS}?limit=1&labelSelector=app%3Dweb&continue={c}"),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b"]);
    assert_eq!(
        s.http("GET", &format!("{CMS}?limit=1&continue=garbage"), None)
            .0,
        400
    );

    s.json("POST", PODS, &pod("p1"));
    s.json("POST", PODS, &pod("p2"));
    s.json(
        "POST",
        &format!("{PODS}/p2/binding"),
        &json!({"target": {"kind": "Node", "name": "n1"}, "metadata": {"name": "p2"}}),
    );
    let (_, list) = s.http("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", None);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "p2");
    let (_, list) = s.http(
        "GET",
        "/api/v1/pods?fieldSelector=status.phase%3DPending",
        None,
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = TestServer::start();
    s.json("POST", CMS, &configmap("keep", json!({})));
    // What the namespace's ConfigMaps are (names and resourceVersions): the list's own
    // resourceVersion is the whole store's, which the server's own controllers move.
    let snapshot = |list: &Value| -> Vec<(Value, Value)> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["metadata"]["name"].clone(),
                    i["metadata"]["resourceVersion"].clone(),
                )
            })
            .collect()
    };
    // `keep` and the namespace's kube-root-ca.crt, which the server writes on its own.
    let mut before = Value::Null;
    for _ in 0..100 {
        before = s.http("GET", CMS, None).1;
        if before["items"].as_array().map_or(0, Vec::len) == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let (code, e) = s.http(
        "POST",
        CMS,
        Some(("application/json", b"{not json".to_vec())),
    );
    assert_eq!(
        (code, e["reason"].as_str()),
        (400, Some("BadRequest")),
        "{e}"
    );
    assert_eq!(e["kind"], "Status");

    let (code, e) = s.http("POST", CMS, Some(("application/yaml", b"a: [b".to_vec())));
    assert_eq!(code, 400, "{e}");

    let mut bad_name = configmap("Bad_Name", json!({}));
    let (code, e) = s.json("POST", CMS, &bad_name);
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")), "{e}");
    assert_eq!(e["details"]["causes"][0]["field"], "metadata.name");

    let mut no_containers = pod("empty");
    no_containers["spec"]["containers"] = json!([]);
    let (code, e) = s.json("POST", PODS, &no_containers);
    assert_eq!(code, 422, "{e}");
    assert_eq!(e["details"]["causes"][0]["field"], "spec.containers");
    assert_eq!(e["details"]["causes"][0]["reason"], "FieldValueRequired");

    let deployment = |replicas: i64, selector: &str| {
        json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},
            "spec":{"replicas":replicas,"selector":{"matchLabels":{"app":selector}},
            "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"x"}]}}}})
    };
    let deps = "/apis/apps/v1/namespaces/default/deployments";
    let (code, e) = s.json("POST", deps, &deployment(-1, "web"));
    assert_eq!(code, 422, "{e}");
    assert_eq!(e["details"]["causes"][0]["field"], "spec.replicas");
    let (code, e) = s.json("POST", deps, &deployment(1, "other"));
    assert_eq!(code, 422, "{e}");
    assert!(
        e["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["field"] == "spec.template.metadata.labels"),
        "{e}"
    );

    let (code, e) = s.json(
        "POST",
        CMS,
        &json!({"apiVersion":"v1","kind":"Widget","metadata":{"name":"w"}}),
    );
    assert_eq!(
        (code, e["reason"].as_str()),
        (422, Some("Invalid")),
        "an unknown kind is an invalid object: {e}"
    );
    assert_eq!(e["details"]["causes"][0]["field"], "kind");
    let (code, _) = s.json("POST", "/api/v1/namespaces/default/widgets", &json!({}));
    assert_eq!(code, 404);
    let (code, e) = s.json(
        "POST",
        CMS,
        &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u"},"bogus":1}),
    );
    assert_eq!(code, 400, "unknown fields are refused: {e}");
    assert!(e["message"].as_str().unwrap().contains("bogus"), "{e}");

    bad_name["metadata"]["name"] = json!("big");
    bad_name["data"]["k"] = json!("x".repeat(3 * 1024 * 1024 + 10));
    let (code, e) = s.json("POST", CMS, &bad_name);
    assert_eq!(
        (code, e["reason"].as_str()),
        (413, Some("RequestEntityTooLarge")),
        "{e}"
    );

    // Malformed protobuf is a bad request; a media type the server does not decode is 415.
    let (code, e) = s.http(
        "PUT",
        &format!("{CMS}/keep"),
        Some(("application/vnd.kubernetes.protobuf", vec![1, 2])),
    );
    assert_eq!(
        (code, e["reason"].as_str()),
        (400, Some("BadRequest")),
        "{e}"
    );
    let (code, _) = s.http(
        "PUT",
        &format!("{CMS}/keep"),
        Some(("application/cbor", vec![0xa0])),
    );
    assert_eq!(code, 415);

    let (_, after) = s.http("GET", CMS, None);
    assert_eq!(
        snapshot(&after),
        snapshot(&before),
        "no refused request wrote anything"
    );
    // `keep` and the namespace's kube-root-ca.crt.
    assert_eq!(after["items"].as_array().unwrap().len(), 2);
}

#[test]
fn requests_without_valid_credentials_get_401() {
    let s = TestServer::start();
    let kc = api::kubeconfig::Kubeconfig::load(&s.kubeconfig()).unwrap();
    let mut cfg = api::client::ClientConfig::from_kubeconfig(&kc, None).unwrap();
    cfg.token = None;
    let anonymous = api::client::Client::new(cfg.clone()).unwrap();
    let r =
        smol::block_on(anonymous.request("GET", "/api/v1/namespaces", None, "application/json"))
            .unwrap();
    assert_eq!(r.status, 401);
    let status: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(status["reason"], "Unauthorized");
    cfg.token = Some("not-the-token".into());
    let wrong = api::client::Client::new(cfg).unwrap();
    let r = smol::block_on(wrong.request(
        "POST",
        CMS,
        Some((
            "application/json",
            serde_json::to_vec(&configmap("x", json!({}))).unwrap(),
        )),
        "application/json",
    ))
    .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(s.http("GET", &format!("{CMS}/x"), None).0, 404);
}

#[test]
fn discovery_version_health_metrics_and_tables() {
    let s = TestServer::start();
    let (code, v) = s.http("GET", "/api", None);
    assert_eq!((code, v["versions"][0].as_str()), (200, Some("v1")));
    let (_, groups) = s.http("GET", "/apis", None);
    // As kube-apiserver lists them: the aggregator's own group first, then apps.
    assert_eq!(groups["groups"][0]["name"], "apiregistration.k8s.io");
    assert_eq!(groups["groups"][1]["name"], "apps");
    let (_, core) = s.http("GET", "/api/v1", None);
    let pods = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap()
        .clone();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["categories"], json!(["all"]));
    let (_, apps) = s.http("GET", "/apis/apps/v1", None);
    assert!(apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "deployments/scale" && r["group"] == "autoscaling"));
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(names.contains(&"networking.k8s.io"), "{names:?}");
    let (code, net) = s.http("GET", "/apis/networking.k8s.io/v1", None);
    assert_eq!(code, 200);
    let resources = net["resources"].as_array().unwrap();
    let ing = resources.iter().find(|r| r["name"] == "ingresses").unwrap();
    assert_eq!(
        (&ing["shortNames"], &ing["namespaced"], &ing["kind"]),
        (&json!(["ing"]), &json!(true), &json!("Ingress"))
    );
    assert!(resources.iter().any(|r| r["name"] == "ingresses/status"));
    assert!(resources
        .iter()
        .any(|r| r["name"] == "ingressclasses" && r["namespaced"] == json!(false)));
    let (code, class) = s.http(
        "GET",
        "/apis/networking.k8s.io/v1/ingressclasses/skiff",
        None,
    );
    assert_eq!(code, 200);
    assert_eq!(class["spec"]["controller"], "skiff.io/ingress");
    assert_eq!(
        class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"],
        "true"
    );
    let (code, version) = s.http("GET", "/version", None);
    assert_eq!((code, version["major"].as_str()), (200, Some("1")));
    assert_eq!(s.http("GET", "/healthz", None).0, 200);
    assert_eq!(s.http("GET", "/openapi/v2", None).0, 200);

    s.json("POST", PODS, &pod("t"));
    let c = s.client();
    let r = smol::block_on(c.request(
        "GET",
        PODS,
        None,
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    ))
    .unwrap();
    let t: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(&cols[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert_eq!(t["rows"][0]["cells"][0], "t");
    assert_eq!(t["rows"][0]["cells"][1], "0/1");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    let r = smol::block_on(c.request("GET", "/metrics", None, "text/plain")).unwrap();
    let text = String::from_utf8(r.body).unwrap();
    assert!(
        text.contains("apiserver_request_total{verb=\"POST\",resource=\"pods\",code=\"201\"} 1"),
        "{text}"
    );
    assert!(text.contains("apiserver_request_duration_seconds_bucket"));
    assert!(text.contains("skiff_store_commit_duration_seconds_count"));
    assert!(text.contains("apiserver_registered_watchers"));
}

#[test]
fn acknowledged_writes_survive_kill_9_and_sigterm_is_clean() {
    let mut s = TestServer::start();
    for i in 0..50 {
        let (code, _) = s.json("POST", CMS, &configmap(&format!("c{i}"), json!({})));
        assert_eq!(code, 201);
    }
    let (_, before) = s.http("GET", CMS, None);
    s.kill_and_restart();
    let (_, after) = s.http("GET", CMS, None);
    // And the namespace's kube-root-ca.crt.
    assert_eq!(after["items"].as_array().unwrap().len(), 51);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let (code, next) = s.json("POST", CMS, &configmap("later", json!({})));
    assert_eq!(code, 201);
    let next_rv: u64 = next["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let before_rv: u64 = before["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(next_rv > before_rv, "revisions keep rising across restarts");
    let status = s.terminate();
    assert!(
        status.success(),
        "SIGTERM ends the server cleanly: {status:?}"
    );
}

#[test]
fn heartbeat_only_status_writes_stay_in_memory() {
    let s = TestServer::start();
    let node = json!({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},
        "status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}});
    let (code, created) = s.json("POST", "/api/v1/nodes", &node);
    assert_eq!(code, 201, "{created}");
    // The node IPAM controller writes the node's podCIDR once; start from that version.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let created = loop {
        let (_, got) = s.http("GET", "/api/v1/nodes/n1", None);
        if got["spec"]["podCIDR"].is_string() {
            break got;
        }
        assert!(std::time::Instant::now() < deadline, "no podCIDR: {got}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let rv = created["metadata"]["resourceVersion"].clone();
    let mut beat = created.clone();
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2026-01-01T00:00:10Z");
    let (code, answered) = s.json("PUT", "/api/v1/nodes/n1/status", &beat);
    assert_eq!(code, 200, "{answered}");
    assert_eq!(
        answered["metadata"]["resourceVersion"], rv,
        "a heartbeat is not a write"
    );
    let (_, got) = s.http("GET", "/api/v1/nodes/n1", None);
    assert_eq!(
        got["status"]["conditions"][0]["lastHeartbeatTime"],
        "2026-01-01T00:00:10Z"
    );
    assert_eq!(got["metadata"]["resourceVersion"], rv);
    let (_, list) = s.http("GET", "/api/v1/nodes", None);
    assert_eq!(
        list["items"][0]["status"]["conditions"][0]["lastHeartbeatTime"],
        "2026-01-01T00:00:10Z"
    );
    // A real change is written.
    let mut change = got.clone();
    change["status"]["conditions"][0]["status"] = json!("False");
    let (code, changed) = s.json("PUT", "/api/v1/nodes/n1/status", &change);
    assert_eq!(code, 200);
    assert_ne!(changed["metadata"]["resourceVersion"], rv);
}

/// A Job with `spec.successPolicy` (the Kubernetes docs' job-success-policy.yaml) is stored,
/// read back whole and listed; it once made every Job unreadable.
#[test]
fn a_job_with_a_success_policy_reads_back() {
    let s = TestServer::start();
    const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job-success"},
        "spec": {
            "parallelism": 10, "completions": 10, "completionMode": "Indexed",
            "successPolicy": {"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 1}]},
            "template": {"spec": {"restartPolicy": "Never", "schedulerName": "none",
                "containers": [{"name": "main", "image": "python",
                    "command": ["python3", "-c", "import os, sys\nsys.exit(0)"]}]}}
        }
    });
    let (code, created) = s.json("POST", JOBS, &job);
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["spec"]["successPolicy"],
        json!({"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 1}]})
    );
    let (code, got) = s.http("GET", &format!("{JOBS}/job-success"), None);
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        got["spec"]["successPolicy"],
        created["spec"]["successPolicy"]
    );
    let (code, list) = s.http("GET", JOBS, None);
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    // Kubernetes' rules: Indexed only, indexes inside completions, immutable.
    let mut bad = job.clone();
    bad["metadata"]["name"] = json!("bad");
    bad["spec"]["successPolicy"]["rules"][0]["succeededIndexes"] = json!("3,1");
    let (code, err) = s.json("POST", JOBS, &bad);
    assert_eq!(code, 422, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains(
            "error parsing succeededIndexes: non-increasing order, previous: 3, current: 1"
        ),
        "{err}"
    );
    bad["spec"]["completionMode"] = json!("NonIndexed");
    let (code, err) = s.json("POST", JOBS, &bad);
    assert_eq!(code, 422, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("requires indexed completion mode"),
        "{err}"
    );
    let (code, err) = s.http(
        "PATCH",
        &format!("{JOBS}/job-success"),
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(
                &json!({"spec": {"successPolicy": {"rules": [{"succeededCount": 2}]}}}),
            )
            .unwrap(),
        )),
    );
    assert_eq!(code, 422, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("spec.successPolicy"),
        "{err}"
    );
    let (code, _) = s.http("DELETE", &format!("{JOBS}/job-success"), None);
    assert_eq!(code, 200);
}

#[test]
fn metadata_only_answers_for_objects_lists_and_watches() {
    let s = TestServer::start();
    let c = s.client();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "meta", "labels": {"app": "x"}}, "data": {"secret-ish": "v"}});
    let (code, created) = s.json("POST", "/api/v1/namespaces/default/configmaps", &cm);
    assert_eq!(code, 201, "{created}");
    // As client-go's metadata client asks: protobuf first, then JSON.
    let accept = |as_: &str| {
        format!("application/vnd.kubernetes.protobuf;as={as_};g=meta.k8s.io;v=v1,application/json;as={as_};g=meta.k8s.io;v=v1,application/json")
    };
    let get = |path: &str, as_: &str| {
        let r = smol::block_on(c.request("GET", path, None, &accept(as_))).expect("GET");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        serde_json::from_slice::<Value>(&r.body).expect("JSON")
    };
    let one = get(
        "/api/v1/namespaces/default/configmaps/meta",
        "PartialObjectMetadata",
    );
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert_eq!(one["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(one["metadata"]["name"], "meta");
    assert_eq!(one["metadata"]["labels"]["app"], "x");
    assert_eq!(one["metadata"]["uid"], created["metadata"]["uid"]);
    assert!(one.get("data").is_none(), "{one}");
    let list = get(
        "/api/v1/namespaces/default/configmaps?labelSelector=app%3Dx",
        "PartialObjectMetadataList",
    );
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["kind"], "PartialObjectMetadata");
    assert_eq!(items[0]["metadata"]["name"], "meta");
    assert!(items[0].get("data").is_none());
    // A watch's events carry metadata only.
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let path = format!(
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=2"
    );
    let (code, patched) = s.http(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/meta",
        Some((
            "application/merge-patch+json",
            br#"{"data":{"more":"x"}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200, "{patched}");
    let r = smol::block_on(c.request("GET", &path, None, &accept("PartialObjectMetadata")))
        .expect("watch");
    let text = String::from_utf8_lossy(&r.body).to_string();
    let event: Value =
        serde_json::from_str(text.lines().next().expect("an event")).expect("event JSON");
    assert_eq!(event["type"], "MODIFIED", "{text}");
    assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
    assert!(event["object"].get("data").is_none(), "{text}");
}

#[test]
fn errors_are_the_bytes_kube_apiserver_writes() {
    let s = TestServer::start();
    let c = s.client();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twice"}});
    let (code, _) = s.json("POST", "/api/v1/namespaces/default/configmaps", &cm);
    assert_eq!(code, 201);
    let body = serde_json::to_vec(&cm).expect("json");
    let r = smol::block_on(c.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(("application/json", body)),
        "application/json",
    ))
    .expect("POST");
    assert_eq!(r.status, 409);
    assert_eq!(
        String::from_utf8_lossy(&r.body).trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"twice\" already exists","reason":"AlreadyExists","details":{"name":"twice","kind":"configmaps"},"code":409}"#
    );
    // Lists: kind, apiVersion, metadata, items, as kube-apiserver orders them.
    let r = smol::block_on(c.request(
        "GET",
        "/api/v1/namespaces/default/configmaps",
        None,
        "application/json",
    ))
    .expect("GET");
    let text = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        text.starts_with(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":""#
        ),
        "{text}"
    );
    assert!(text.contains(r#""items":[{"#), "{text}");
    let r = smol::block_on(c.request(
        "GET",
        "/api/v1/namespaces/default/configmaps/twice",
        None,
        "application/json",
    ))
    .expect("GET");
    assert!(
        String::from_utf8_lossy(&r.body)
            .starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = smol::block_on(c.request(
        "GET",
        "/api/v1/namespaces/default/configmaps/none",
        None,
        "application/json",
    ))
    .expect("GET");
    assert_eq!(
        String::from_utf8_lossy(&r.body).trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"none\" not found","reason":"NotFound","details":{"name":"none","kind":"configmaps"},"code":404}"#
    );
}

/// A built-in kind's list items carry no `kind` and `apiVersion`, as kube-apiserver's typed
/// lists write them; the list itself, a single object and a custom resource's items do.
#[test]
fn list_items_are_written_as_kube_writes_them() {
    let s = TestServer::start();
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["kind"], "ConfigMap");
    let (_, list) = s.http("GET", "/api/v1/namespaces/default/configmaps", None);
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["apiVersion"], "v1");
    let item = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "c")
        .unwrap();
    assert!(
        item.get("kind").is_none() && item.get("apiVersion").is_none(),
        "{item}"
    );
    assert!(item["metadata"]["managedFields"].is_array(), "{item}");
}
