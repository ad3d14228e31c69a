//! `skiff backup` from a live server and `skiff restore` into a new data dir.

mod opsutil;

use opsutil::{apply, uids, Server, KINDS, MANIFEST};

#[test]
fn backup_from_live_server_restores_objects_uids_and_pki() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(&dir.path().join("live"));
    apply(&server, MANIFEST);
    // A custom resource and an object of it (its table, `movers.backup.example.com`, is
    // backed up too).
    let mover_uid = custom_object(&server);
    // Let the controllers settle (the Deployment makes a ReplicaSet and pods).
    std::thread::sleep(std::time::Duration::from_secs(2));
    let backup = dir.path().join("skiff.backup");
    let before = uids(&server, KINDS);
    // With the secrets key: the fixture holds a Secret, and a restore without the key that
    // sealed it refuses to start (tests/secrets_at_rest.rs checks that side).
    let out = server.cli(&["backup", "--include-key", backup.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("backup of revision "), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&backup)
        .expect("backup")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the backup holds the CA key");
    // The server goes on after the backup; later writes are not in it.
    apply(
        &server,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: later, namespace: shop}\n",
    );
    let ca = std::fs::read(dir.path().join("live/pki/ca.crt")).expect("ca");
    let token = std::fs::read(dir.path().join("live/admin-token")).expect("token");
    let revision_at_backup: u64 = before
        .iter()
        .map(|(_, _, rv)| rv.parse::<u64>().expect("rv"))
        .max()
        .expect("objects");
    drop(server);

    // Restore refuses a data dir in use.
    let restore = |data: &std::path::Path, force: bool| {
        let mut cmd = std::process::Command::new(opsutil::skiff_bin());
        cmd.arg("restore").arg(&backup).arg("--data-dir").arg(data);
        if force {
            cmd.arg("--force");
        }
        cmd.output().expect("skiff restore")
    };
    let out = restore(&dir.path().join("live"), false);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = dir.path().join("restored");
    let out = restore(&restored, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("restored revision "));
    assert_eq!(std::fs::read(restored.join("pki/ca.crt")).expect("ca"), ca);
    assert_eq!(
        std::fs::read(restored.join("admin-token")).expect("token"),
        token
    );
    let mode = std::fs::metadata(restored.join("pki/ca.key"))
        .expect("ca key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A server on the restored dir serves the same objects (same uids and versions, the
    // later ConfigMap absent), with the same admin token, and goes on from the backup's
    // revision.
    let server = Server::start(&restored);
    let mut restored_mover = String::new();
    for _ in 0..100 {
        restored_mover = kubectl(
            &server,
            &["get", "mover", "m", "-o", "jsonpath={.metadata.uid}"],
        );
        if !restored_mover.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(restored_mover, mover_uid, "the custom object is restored");
    let mut after = uids(&server, KINDS);
    // The restarted server's controllers may touch status (new resourceVersions): compare
    // what identifies an object.
    let ids = |v: &[(String, String, String)]| -> Vec<(String, String)> {
        v.iter().map(|(k, u, _)| (k.clone(), u.clone())).collect()
    };
    assert_eq!(ids(&after), ids(&before));
    assert!(!after.iter().any(|(k, _, _)| k == "configmaps/shop/later"));
    after.retain(|(k, _, _)| k == "configmaps/shop/settings");
    let settings = before
        .iter()
        .find(|(k, _, _)| k == "configmaps/shop/settings")
        .expect("settings");
    assert_eq!(
        &after[0], settings,
        "untouched objects keep their resourceVersion"
    );
    apply(
        &server,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new, namespace: shop}\n",
    );
    let new = uids(&server, &["configmaps"]);
    let rv: u64 = new
        .iter()
        .find(|(k, _, _)| k == "configmaps/shop/new")
        .expect("new")
        .2
        .parse()
        .expect("rv");
    assert!(rv > revision_at_backup, "{rv} > {revision_at_backup}");

    // Only an admin may take backups: a node's certificate cannot (checked by the endpoint
    // with a bogus token here).
    let mut kc = std::fs::read_to_string(server.kubeconfig()).expect("kubeconfig");
    kc = kc.replace(
        std::str::from_utf8(&token).expect("token").trim(),
        "not-a-token",
    );
    let bad = dir.path().join("bad.kubeconfig");
    std::fs::write(&bad, kc).expect("write");
    let out = std::process::Command::new(opsutil::skiff_bin())
        .arg("--kubeconfig")
        .arg(&bad)
        .arg("backup")
        .arg(dir.path().join("nope"))
        .output()
        .expect("skiff backup");
    assert!(!out.status.success());
    assert!(!dir.path().join("nope").exists());
}

/// kubectl against `server`: its stdout ("" when it fails).
fn kubectl(server: &Server, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", server.kubeconfig())
        .output()
        .expect("kubectl");
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        String::new()
    }
}

/// Defines `movers.backup.example.com` and makes a Mover; answers its uid.
fn custom_object(server: &Server) -> String {
    use std::io::Write;
    let apply = |yaml: &str| {
        let mut child = std::process::Command::new("kubectl")
            .args(["apply", "-f", "-"])
            .env("KUBECONFIG", server.kubeconfig())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())
            .expect("write");
        child.wait().expect("kubectl").success()
    };
    assert!(apply(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: movers.backup.example.com}\nspec:\n  group: backup.example.com\n  scope: Namespaced\n  names: {plural: movers, kind: Mover}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
    ));
    for _ in 0..100 {
        if apply("apiVersion: backup.example.com/v1\nkind: Mover\nmetadata: {name: m, namespace: default}\nspec: {n: 1}\n") {
            let uid = kubectl(server, &["get", "mover", "m", "-o", "jsonpath={.metadata.uid}"]);
            assert!(!uid.is_empty());
            return uid;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("the custom resource was never served");
}
