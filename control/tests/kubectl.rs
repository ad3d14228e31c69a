//! The machine's real `kubectl` against a real server, with the kubeconfig the server wrote.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{kubectl, TestServer};
use serde_json::json;

fn example() -> String {
    format!("{}/../examples/hello/app.yaml", env!("CARGO_MANIFEST_DIR"))
}

/// Makes a ConfigMap with kubectl's own generator (a protobuf body).
fn create_configmap(s: &TestServer, name: &str) {
    let out = ok(s, &["create", "configmap", name, "--from-literal=a=b"]);
    assert!(out.contains(&format!("configmap/{name} created")), "{out}");
}

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

#[test]
fn discovery_and_get_all() {
    let s = TestServer::start();
    let out = ok(&s, &["api-resources"]);
    for needle in [
        "pods",
        "po",
        "deployments",
        "deploy",
        "apps/v1",
        "daemonsets",
        "ds",
        "namespaces",
        "ns",
        "jobs",
        "cronjobs",
        "cj",
        "batch/v1",
        "replicationcontrollers",
        "rc",
        "priorityclasses",
        "pc",
        "scheduling.k8s.io/v1",
        "persistentvolumeclaims",
        "pvc",
        "persistentvolumes",
        "pv",
        "storageclasses",
        "sc",
        "storage.k8s.io/v1",
        "statefulsets",
        "sts",
        "controllerrevisions",
        "horizontalpodautoscalers",
        "hpa",
        "autoscaling/v2",
    ] {
        assert!(out.contains(needle), "api-resources lacks {needle}:\n{out}");
    }
    ok(&s, &["create", "-f", &example()]);
    let all = ok(&s, &["get", "all"]);
    assert!(all.contains("service/hello"), "{all}");
    assert!(all.contains("deployment.apps/hello"), "{all}");
    let ns = ok(&s, &["get", "ns"]);
    assert!(ns.contains("kube-system") && ns.contains("Active"), "{ns}");
    let version = ok(&s, &["version", "-o", "json"]);
    assert!(version.contains("serverVersion"), "{version}");
}

#[test]
fn create_get_replace_delete() {
    let s = TestServer::start();
    let out = ok(&s, &["create", "-f", &example()]);
    assert!(out.contains("deployment.apps/hello created"), "{out}");
    assert!(out.contains("service/hello created"), "{out}");
    assert!(out.contains("configmap/hello-page created"), "{out}");

    let table = ok(&s, &["get", "deploy"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{table}"
    );
    assert!(table.contains("hello"), "{table}");
    let wide = ok(&s, &["get", "deploy", "-o", "wide"]);
    assert!(
        wide.contains("IMAGES") && wide.contains("skiff.local/busybox:latest"),
        "{wide}"
    );
    let svc = ok(&s, &["get", "svc", "hello"]);
    assert!(svc.contains("ClusterIP") && svc.contains("80/TCP"), "{svc}");
    let cm = ok(&s, &["get", "cm"]);
    assert!(cm.lines().next().unwrap().contains("DATA"), "{cm}");

    let yaml = ok(&s, &["get", "deploy", "hello", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: Deployment") && yaml.contains("replicas: 2"),
        "{yaml}"
    );

    // replace -f with a changed replica count
    let changed = std::fs::read_to_string(example())
        .unwrap()
        .replace("replicas: 2", "replicas: 4");
    let path = s.data_dir().join("changed.yaml");
    std::fs::write(&path, changed).unwrap();
    let out = ok(&s, &["replace", "-f", path.to_str().unwrap()]);
    assert!(out.contains("deployment.apps/hello replaced"), "{out}");
    let json_out = ok(&s, &["get", "deploy", "hello", "-o", "json"]);
    let d: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["metadata"]["generation"], 2);

    let out = ok(&s, &["delete", "-f", &example()]);
    assert!(out.contains("deployment.apps \"hello\" deleted"), "{out}");
    let (success, _, err) = kubectl(&s, &["get", "deploy", "hello"]);
    assert!(!success);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );

    // kubectl delete waits on a watch with a name field selector.
    create_configmap(&s, "gone");
    let started = Instant::now();
    let out = ok(&s, &["delete", "configmap", "gone"]);
    assert!(out.contains("configmap \"gone\" deleted"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn get_watch_shows_later_changes() {
    let s = TestServer::start();
    create_configmap(&s, "first");
    let mut child = Command::new("kubectl")
        .args(["get", "configmaps", "-w", "--request-timeout=30s"])
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", s.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let mut created = false;
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
        }
        if !created && seen.iter().any(|l| l.starts_with("first")) {
            let (code, _) = s.json(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"second"},"data":{"x":"1","y":"2"}}),
            );
            assert_eq!(code, 201);
            created = true;
        }
        if seen.iter().any(|l| l.starts_with("second")) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.first().is_some_and(|h| h.starts_with("NAME")),
        "{seen:?}"
    );
    let second = seen
        .iter()
        .find(|l| l.starts_with("second"))
        .unwrap_or_else(|| panic!("no watch row: {seen:?}"));
    assert!(
        second.split_whitespace().nth(1) == Some("2"),
        "DATA column in a watch row: {second}"
    );
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("NAME")).count(),
        1,
        "one header: {seen:?}"
    );
}

#[test]
fn apply_scale_label_patch_and_server_side_apply() {
    let s = TestServer::start();
    let out = ok(&s, &["apply", "-f", &example()]);
    assert!(out.contains("deployment.apps/hello created"), "{out}");
    let changed = std::fs::read_to_string(example())
        .unwrap()
        .replace("replicas: 2", "replicas: 5");
    let path = s.data_dir().join("changed.yaml");
    std::fs::write(&path, changed).unwrap();
    let out = ok(&s, &["apply", "-f", path.to_str().unwrap()]);
    assert!(
        out.contains("deployment.apps/hello configured") && out.contains("service/hello unchanged"),
        "{out}"
    );
    ok(&s, &["scale", "deploy", "hello", "--replicas=1"]);
    ok(&s, &["label", "deploy", "hello", "team=edge"]);
    ok(
        &s,
        &["set", "image", "deploy/hello", "web=skiff.local/busybox:2"],
    );
    ok(
        &s,
        &[
            "patch",
            "deploy",
            "hello",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
        ],
    );
    let d: serde_json::Value =
        serde_json::from_str(&ok(&s, &["get", "deploy", "hello", "-o", "json"])).unwrap();
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["labels"]["team"], "edge");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "skiff.local/busybox:2"
    );
    ok(&s, &["delete", "-f", &example()]);
    let out = ok(&s, &["apply", "--server-side", "-f", &example()]);
    assert!(
        out.contains("deployment.apps/hello serverside-applied"),
        "{out}"
    );
    let out = ok(
        &s,
        &["apply", "--server-side", "-f", path.to_str().unwrap()],
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let d: serde_json::Value =
        serde_json::from_str(&ok(&s, &["get", "deploy", "hello", "-o", "json"])).unwrap();
    assert_eq!(d["spec"]["replicas"], 5);
}
