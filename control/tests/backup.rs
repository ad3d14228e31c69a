//! `skiff backup` from a live server and `skiff restore` into a new data dir.

mod opsutil;

use opsutil::{apply, uids, Server, KINDS, MANIFEST};

#[test]
fn backup_from_live_server_restores_objects_uids_and_pki() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(&dir.path().join("live"));
    apply(&server, MANIFEST);
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
