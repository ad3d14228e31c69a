//! `dryRun=All` (`kubectl --dry-run=server`, `kubectl diff`): every check runs and the answer is
//! the object as it would be, but nothing is stored and no watcher hears of it.

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

/// The store's revision (a list's resourceVersion): it moves with every write.
fn revision(s: &TestServer) -> String {
    let (code, list) = s.http("GET", "/api/v1/namespaces?limit=1", None);
    assert_eq!(code, 200, "{list}");
    list["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list revision")
        .to_string()
}

/// The revision once the server's start-up writes (default ServiceAccounts, the root CA
/// ConfigMaps, the `kubernetes` Service) are done: the same over one quiet second.
fn settled_revision(s: &TestServer) -> String {
    let mut last = revision(s);
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = revision(s);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the revision never settled (last {last})");
}

#[test]
fn kubectl_dry_run_server_and_diff_store_nothing() {
    let s = TestServer::start();
    let before = settled_revision(&s);

    // A create answers the object as it would be stored, without a resourceVersion.
    let out = ok(
        &s,
        &[
            "create",
            "configmap",
            "dry",
            "--from-literal=a=b",
            "--dry-run=server",
            "-o",
            "json",
        ],
    );
    let answered: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(answered["data"], json!({"a": "b"}), "{answered}");
    assert!(
        answered["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{answered}"
    );
    assert_eq!(
        answered["metadata"].get("resourceVersion"),
        None,
        "{answered}"
    );
    let (code, _) = s.http("GET", "/api/v1/namespaces/default/configmaps/dry", None);
    assert_eq!(code, 404, "a dry-run create stored the object");
    assert_eq!(revision(&s), before, "a dry-run create moved the revision");

    // Checks still run: a bad name is refused, and so is a name already taken.
    let (success, _, err) = kubectl(&s, &["create", "configmap", "Bad_Name", "--dry-run=server"]);
    assert!(!success && err.contains("Invalid value"), "{err}");
    ok(&s, &["create", "configmap", "real", "--from-literal=a=1"]);
    let (success, _, err) = kubectl(
        &s,
        &[
            "create",
            "configmap",
            "real",
            "--from-literal=a=2",
            "--dry-run=server",
        ],
    );
    assert!(!success && err.contains("already exists"), "{err}");

    // Apply (server-side and client-side), diff and delete leave the stored object alone.
    let stored_rv = |s: &TestServer| {
        let (code, cm) = s.http("GET", "/api/v1/namespaces/default/configmaps/real", None);
        assert_eq!(code, 200, "{cm}");
        (
            cm["data"].clone(),
            cm["metadata"]["resourceVersion"].clone(),
        )
    };
    let (data, rv) = stored_rv(&s);
    let manifest = s.data_dir().join("real.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: real}\ndata: {a: changed}\n",
    )
    .expect("write manifest");
    let file = manifest.to_str().expect("utf-8 path");
    let out = ok(
        &s,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            file,
            "-o",
            "json",
        ],
    );
    let answered: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(answered["data"], json!({"a": "changed"}), "{answered}");
    assert_eq!(answered["metadata"]["resourceVersion"], rv, "{answered}");
    let (success, out, err) = kubectl(&s, &["apply", "--dry-run=server", "-f", file]);
    assert!(success, "{out}{err}");
    // kubectl diff exits 1 when the server's answer differs from what is stored.
    let (success, out, _) = kubectl(&s, &["diff", "-f", file]);
    assert!(!success && out.contains("changed"), "{out}");
    let (success, out, err) = kubectl(&s, &["delete", "configmap", "real", "--dry-run=server"]);
    assert!(success, "{out}{err}");
    assert_eq!(
        stored_rv(&s),
        (data, rv),
        "a dry run changed the stored object"
    );

    // A value other than All is refused, as kube-apiserver refuses it.
    let (code, status) = s.json(
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=Some",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "some"}}),
    );
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("dryRun: Unsupported value")),
        "{status}"
    );
    let (code, _) = s.http("GET", "/api/v1/namespaces/default/configmaps/some", None);
    assert_eq!(code, 404);
}
