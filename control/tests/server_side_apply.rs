//! Field ownership (`metadata.managedFields`) with the machine's real kubectl against a real
//! server: server-side apply, its conflicts and `--force-conflicts`, pruning of what an
//! applier drops, and the Update entries of kubectl's other writes and of the controllers.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

fn write(s: &TestServer, name: &str, text: &str) -> String {
    let path = s.data_dir().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// The object as JSON, with its managed fields.
fn get(s: &TestServer, what: &str) -> Value {
    let out = ok(s, &["get", what, "-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&out).unwrap()
}

/// The managedFields entry of `manager` with `operation`.
fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

fn deployment(replicas: u32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: {image}
"
    )
}

#[test]
fn apply_records_managed_fields_and_conflicts_name_the_owner() {
    let s = TestServer::start();
    let file = write(&s, "d.yaml", &deployment(2, "busybox:1"));
    let out = ok(&s, &["apply", "--server-side", "-f", &file]);
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );

    // kubectl hides managedFields unless asked, and shows them when asked.
    let plain = ok(&s, &["get", "deploy", "web", "-o", "yaml"]);
    assert!(!plain.contains("managedFields"), "{plain}");
    let yaml = ok(
        &s,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "yaml",
            "--show-managed-fields",
        ],
    );
    assert!(
        yaml.contains("managedFields:")
            && yaml.contains("manager: kubectl")
            && yaml.contains("operation: Apply")
            && yaml.contains("fieldsType: FieldsV1")
            && yaml.contains("f:replicas: {}"),
        "{yaml}"
    );
    let d = get(&s, "deploy/web");
    let applied = entry(&d, "kubectl", "Apply").expect("kubectl's Apply entry");
    assert_eq!(applied["apiVersion"], "apps/v1");
    assert!(applied["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(
        applied["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            ["k:{\"name\":\"web\"}"],
        json!({".": {}, "f:image": {}, "f:name": {}})
    );
    assert_eq!(applied["fieldsV1"]["f:spec"]["f:selector"], json!({}));

    // A second manager changing the first one's field is refused, naming both.
    let other = write(&s, "other.yaml", &deployment(3, "busybox:1"));
    let (success, _, err) = kubectl(
        &s,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &other,
        ],
    );
    assert!(!success);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"),
        "{err}"
    );
    assert_eq!(get(&s, "deploy/web")["spec"]["replicas"], 2);

    // The same through the API: 409 with a FieldManagerConflict cause.
    let body = serde_json::to_vec(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 4},
    }))
    .unwrap();
    let (code, status) = s.http(
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web?fieldManager=other",
        Some(("application/apply-patch+yaml", body.clone())),
    );
    assert_eq!(code, 409, "{status}");
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".spec.replicas"}])
    );
    // Apply needs a manager.
    let (code, _) = s.http(
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        Some(("application/apply-patch+yaml", body)),
    );
    assert_eq!(code, 422);

    // Setting a field to the value it has is no conflict: both own it.
    let same = write(&s, "same.yaml", &deployment(2, "busybox:1"));
    ok(
        &s,
        &[
            "apply",
            "--server-side",
            "--field-manager=same",
            "-f",
            &same,
        ],
    );
    let d = get(&s, "deploy/web");
    assert!(entry(&d, "same", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:replicas"].is_object());
    assert!(entry(&d, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:replicas"].is_object());

    // Forced, the change goes through and the field changes hands.
    let out = ok(
        &s,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &other,
        ],
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let d = get(&s, "deploy/web");
    assert_eq!(d["spec"]["replicas"], 3);
    let mine = &entry(&d, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"];
    assert!(mine.get("f:replicas").is_none(), "{mine}");
    assert!(mine["f:template"].is_object(), "{mine}");
    assert!(entry(&d, "other", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:replicas"].is_object());
    let theirs = &entry(&d, "same", "Apply").unwrap()["fieldsV1"]["f:spec"];
    assert!(theirs.get("f:replicas").is_none(), "{theirs}");

    // The first manager now conflicts with the new owner.
    let (success, _, err) = kubectl(&s, &["apply", "--server-side", "-f", &file]);
    assert!(!success);
    assert!(
        err.contains("conflict with \"other\": .spec.replicas"),
        "{err}"
    );
}

fn configmap(data: &[(&str, &str)], labels: &[(&str, &str)]) -> String {
    let mut y = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n");
    if !labels.is_empty() {
        y.push_str("  labels:\n");
        for (k, v) in labels {
            y.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    y.push_str("data:\n");
    for (k, v) in data {
        y.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    y
}

#[test]
fn fields_dropped_from_an_applied_config_go_unless_another_manager_owns_them() {
    let s = TestServer::start();
    let a = |data: &[(&str, &str)], labels: &[(&str, &str)]| {
        let f = write(&s, "a.yaml", &configmap(data, labels));
        ok(
            &s,
            &["apply", "--server-side", "--field-manager=a", "-f", &f],
        );
    };
    a(
        &[("one", "1"), ("two", "2"), ("three", "3")],
        &[("tier", "x"), ("team", "y")],
    );
    // b applies `two` too; kubectl label takes `team` over with an Update.
    let b = write(&s, "b.yaml", &configmap(&[("two", "2")], &[]));
    ok(
        &s,
        &["apply", "--server-side", "--field-manager=b", "-f", &b],
    );
    ok(&s, &["label", "--overwrite", "cm", "cfg", "team=z"]);
    let cm = get(&s, "cm/cfg");
    assert_eq!(
        entry(&cm, "kubectl-label", "Update").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:team": {}}}})
    );

    // a drops two, three and both labels: three and tier go; two (b's) and team (the
    // label command's) stay.
    a(&[("one", "1")], &[]);
    let cm = get(&s, "cm/cfg");
    assert_eq!(cm["data"], json!({"one": "1", "two": "2"}));
    assert_eq!(cm["metadata"]["labels"], json!({"team": "z"}));
    assert_eq!(
        entry(&cm, "a", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:one": {}}})
    );

    // Once b lets go of two, a's earlier claim does not bring it back, and b's drop removes it.
    let b_empty = write(
        &s,
        "b2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n",
    );
    ok(
        &s,
        &[
            "apply",
            "--server-side",
            "--field-manager=b",
            "-f",
            &b_empty,
        ],
    );
    let cm = get(&s, "cm/cfg");
    assert_eq!(cm["data"], json!({"one": "1"}));
    assert!(entry(&cm, "b", "Apply").is_none(), "{cm}");
}

#[test]
fn kubectl_writes_record_update_entries_for_their_managers() {
    let s = TestServer::start();
    let file = write(&s, "cfg.yaml", &configmap(&[("a", "1")], &[]));
    ok(&s, &["apply", "-f", &file]);
    let cm = get(&s, "cm/cfg");
    let csa = entry(&cm, "kubectl-client-side-apply", "Update").expect("client-side apply");
    assert_eq!(csa["apiVersion"], "v1");
    assert!(csa["fieldsV1"]["f:data"]["f:a"].is_object(), "{csa}");
    assert!(
        csa["fieldsV1"]["f:metadata"]["f:annotations"]
            ["f:kubectl.kubernetes.io/last-applied-configuration"]
            .is_object(),
        "{csa}"
    );

    ok(&s, &["patch", "cm", "cfg", "-p", r#"{"data":{"b":"2"}}"#]);
    let cm = get(&s, "cm/cfg");
    assert_eq!(
        entry(&cm, "kubectl-patch", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:b": {}}})
    );

    // kubectl edit runs the editor on the object and patches what changed.
    let editor = write(
        &s,
        "editor.sh",
        "#!/bin/sh\nsed -i 's/b: \"2\"/b: \"3\"/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new("kubectl")
        .args(["edit", "cm", "cfg"])
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", s.data_dir())
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cm = get(&s, "cm/cfg");
    assert_eq!(cm["data"]["b"], "3");
    assert_eq!(
        entry(&cm, "kubectl-edit", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:b": {}}})
    );
    // The edit took b from kubectl-patch, which owned nothing else.
    assert!(entry(&cm, "kubectl-patch", "Update").is_none(), "{cm}");

    let replaced = write(&s, "r.yaml", &configmap(&[("a", "1"), ("c", "4")], &[]));
    ok(&s, &["replace", "-f", &replaced]);
    let cm = get(&s, "cm/cfg");
    assert_eq!(cm["data"], json!({"a": "1", "c": "4"}));
    let rep = entry(&cm, "kubectl-replace", "Update").expect("replace");
    assert!(rep["fieldsV1"]["f:data"]["f:c"].is_object(), "{rep}");
    // b went with the replace, and with it kubectl-edit's only field.
    assert!(entry(&cm, "kubectl-edit", "Update").is_none(), "{cm}");

    // A request without fieldManager is attributed to its User-Agent's product.
    let (code, _) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "raw"}, "data": {"k": "v"}}),
    );
    assert_eq!(code, 201);
    let raw = get(&s, "cm/raw");
    assert!(entry(&raw, "skiff", "Update").is_some(), "{raw}");
}

#[test]
fn controller_writes_carry_kubernetes_manager_names() {
    let s = TestServer::start();
    let file = write(&s, "d.yaml", &deployment(1, "busybox:1"));
    ok(&s, &["apply", "--server-side", "-f", &file]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = get(&s, "deploy/web");
        let status = d["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["subresource"] == "status");
        if let Some(e) = status {
            assert_eq!(e["manager"], "kube-controller-manager");
            assert_eq!(e["operation"], "Update");
            assert!(e["fieldsV1"]["f:status"].is_object(), "{e}");
            break;
        }
        assert!(Instant::now() < deadline, "no status entry: {d}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let rs: Value = serde_json::from_str(&ok(
        &s,
        &["get", "rs", "-o", "json", "--show-managed-fields"],
    ))
    .unwrap();
    let rs = &rs["items"][0];
    let created = entry(rs, "kube-controller-manager", "Update").expect("creator");
    assert!(
        created["fieldsV1"]["f:spec"]["f:replicas"].is_object(),
        "{rs}"
    );
    assert!(
        created["fieldsV1"]["f:metadata"]["f:ownerReferences"].is_object(),
        "{rs}"
    );

    // kubectl scale writes through the scale subresource.
    ok(&s, &["scale", "deploy", "web", "--replicas=2"]);
    let d = get(&s, "deploy/web");
    let scaled = d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["subresource"] == "scale")
        .unwrap_or_else(|| panic!("no scale entry: {d}"));
    assert_eq!(scaled["operation"], "Update");
    assert_eq!(scaled["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
}

#[test]
fn the_scheduler_records_its_status_writes_as_kube_scheduler() {
    // No node: the scheduler marks the pod unschedulable through the status subresource.
    let s = TestServer::start();
    let pod = write(
        &s,
        "p.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    ok(&s, &["create", "-f", &pod]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = get(&s, "pod/p");
        if let Some(e) = entry(&p, "kube-scheduler", "Update") {
            assert_eq!(e["subresource"], "status", "{e}");
            assert!(
                e["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"PodScheduled\"}"]
                    .is_object(),
                "{e}"
            );
            let created = entry(&p, "kubectl-create", "Update").expect("the creator's entry");
            assert!(created.get("subresource").is_none(), "{created}");
            assert!(created["fieldsV1"].get("f:status").is_none(), "{created}");
            break;
        }
        assert!(Instant::now() < deadline, "no kube-scheduler entry: {p}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn server_side_apply_takes_over_from_client_side_apply() {
    // kubectl moves the client-side applier's fields to its own Apply entry with a JSON
    // patch of managedFields, then applies without conflicts.
    let s = TestServer::start();
    let file = write(&s, "d.yaml", &deployment(2, "busybox:1"));
    ok(&s, &["apply", "-f", &file]);
    let changed = write(&s, "d2.yaml", &deployment(3, "busybox:2"));
    let out = ok(&s, &["apply", "--server-side", "-f", &changed]);
    assert!(out.contains("serverside-applied"), "{out}");
    let d = get(&s, "deploy/web");
    assert_eq!(d["spec"]["replicas"], 3);
    let applied = entry(&d, "kubectl", "Apply").expect("kubectl's Apply entry");
    assert!(
        applied["fieldsV1"]["f:spec"]["f:replicas"].is_object(),
        "{d}"
    );
    // kubectl migrated the client-side applier's fields (managedFields by JSON patch).
    assert!(
        entry(&d, "kubectl-client-side-apply", "Update").is_none(),
        "{d}"
    );
    // The server keeps the client-side annotation equal to what was applied.
    let last = d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["spec"]["replicas"], 3, "{last}");
    // Another manager still conflicts with it.
    let other = write(&s, "other.yaml", &deployment(4, "busybox:2"));
    let (success, _, err) = kubectl(
        &s,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &other,
        ],
    );
    assert!(
        !success && err.contains("conflict with \"kubectl\""),
        "{err}"
    );
}

#[test]
fn node_agents_report_status_as_the_kubelet() {
    // One simulated node (`skiff-agent --simulate`) runs the pod and reports its status.
    let s = TestServer::start();
    let agent = common::skiff_bin().with_file_name("skiff-agent");
    if !agent.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "-p", "skiff-agent", "--bin", "skiff-agent"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .unwrap();
        assert!(built.success());
    }
    let mut sim = Command::new(agent)
        .args(["--simulate", "1", "--sim-prefix", "ssa"])
        .arg("--kubeconfig")
        .arg(s.kubeconfig())
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pod = write(
        &s,
        "p.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    ok(&s, &["apply", "--server-side", "-f", &pod]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let p = get(&s, "pod/p");
        if let Some(e) = entry(&p, "kubelet", "Update") {
            break e.clone();
        }
        if Instant::now() > deadline {
            break Value::Null;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = sim.kill();
    let _ = sim.wait();
    assert_eq!(found["subresource"], "status", "{found}");
    assert!(
        found["fieldsV1"]["f:status"]["f:phase"].is_object(),
        "{found}"
    );
}
