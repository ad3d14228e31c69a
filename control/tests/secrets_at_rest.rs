//! Secrets at rest: sealed with AES-256-GCM in state.redb (the raw file holds no plaintext
//! of theirs, while other kinds stay plain), readable again after `skiff secrets
//! rotate-key`, carried in backups only with their key when asked, and a server given the
//! wrong key or none refuses to start with a clear error.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use common::{skiff_bin, TestServer};
use serde_json::json;

const SECRETS: &str = "/api/v1/namespaces/default/secrets";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn secret_value(s: &TestServer, name: &str, key: &str) -> String {
    let (code, body) = s.http("GET", &format!("{SECRETS}/{name}"), None);
    assert_eq!(code, 200, "{body}");
    let b64 = body["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"));
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
    )
    .unwrap()
}

fn skiff(args: &[&str]) -> std::process::Output {
    Command::new(skiff_bin())
        .args(args)
        .output()
        .expect("run skiff")
}

/// Starts `skiff server` on `dir` and waits for it to exit (it must not start).
fn server_refuses(dir: &std::path::Path) -> String {
    let mut child = Command::new(skiff_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .arg("--disable-agent")
        .env("SKIFF_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start skiff server");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(!status.success(), "{err}");
            assert!(!err.contains("panicked"), "{err}");
            return err;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started with the wrong secrets key");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn secrets_are_sealed_at_rest_and_survive_key_rotation() {
    let mut s = TestServer::start();
    let dir = s.data_dir().to_path_buf();
    let key_file = dir.join("secrets.key");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    for i in 0..20 {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("db-{i}"), "annotations": {"note": format!("annotation-plaintext-{i}")}},
            "data": {"password": b64(&format!("hunter2-plaintext-{i}"))},
            "stringData": {"user": format!("admin-plaintext-{i}")}});
        let (code, body) = s.json("POST", SECRETS, &secret);
        assert_eq!(code, 201, "{body}");
    }
    // An update goes through the same path (and into the event log).
    let (code, body) = s.http(
        "PATCH",
        &format!("{SECRETS}/db-0"),
        Some((
            "application/merge-patch+json",
            json!({"data": {"password": b64("rotated-plaintext-0")}})
                .to_string()
                .into_bytes(),
        )),
    );
    assert_eq!(code, 200, "{body}");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "plain"}, "data": {"k": "configmap-plaintext"}});
    assert_eq!(
        s.json("POST", "/api/v1/namespaces/default/configmaps", &cm)
            .0,
        201
    );
    assert_eq!(secret_value(&s, "db-0", "password"), "rotated-plaintext-0");
    assert_eq!(secret_value(&s, "db-7", "user"), "admin-plaintext-7");

    // Backups: the key only when asked.
    let backup = |name: &str, with_key: bool| {
        let file = dir.join(name);
        let kc = s.kubeconfig();
        let mut args = vec!["--kubeconfig", kc.to_str().unwrap(), "backup"];
        args.push(file.to_str().unwrap());
        if with_key {
            args.push("--include-key");
        }
        let out = skiff(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(&file).unwrap()
    };
    let without = backup("b1.redb", false);
    let with = backup("b2.redb", true);
    let key_text = std::fs::read(&key_file).unwrap();
    assert!(!contains(&without, &key_text[..40]));
    assert!(contains(&with, &key_text[..40]));
    assert!(!contains(&without, b"hunter2-plaintext"));

    assert!(s.terminate().success());
    let raw = std::fs::read(dir.join("state.redb")).unwrap();
    assert!(
        contains(&raw, b"configmap-plaintext"),
        "other kinds stay plain"
    );
    for needle in [
        &b"hunter2-plaintext"[..],
        b"admin-plaintext",
        b"rotated-plaintext",
        b"annotation-plaintext",
        b64("hunter2-plaintext-3").as_bytes(),
    ] {
        assert!(
            !contains(&raw, needle),
            "{} in state.redb",
            String::from_utf8_lossy(needle)
        );
    }

    // Rotation: offline, every secret still reads, the old key is gone.
    let old_key = std::fs::read_to_string(&key_file).unwrap();
    let out = skiff(&["secrets", "rotate-key", "--data-dir", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("20 secrets"), "{said}");
    let new_key = std::fs::read_to_string(&key_file).unwrap();
    assert_eq!(new_key.lines().count(), 1);
    assert_ne!(new_key, old_key);
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    s.kill_and_restart();
    for i in 0..20 {
        let want = if i == 0 {
            "rotated-plaintext-0".to_string()
        } else {
            format!("hunter2-plaintext-{i}")
        };
        assert_eq!(secret_value(&s, &format!("db-{i}"), "password"), want);
    }
    // Not while the server runs.
    let out = skiff(&["secrets", "rotate-key", "--data-dir", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stop the server"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), new_key);
    assert!(s.terminate().success());

    // The old key (or none) does not open them: a clear refusal, no panic.
    std::fs::write(&key_file, &old_key).unwrap();
    let err = server_refuses(&dir);
    assert!(
        err.contains("the stored Secrets cannot be read") && err.contains("does not hold"),
        "{err}"
    );
    std::fs::remove_file(&key_file).unwrap();
    let err = server_refuses(&dir);
    assert!(err.contains("the stored Secrets cannot be read"), "{err}");
    // The right key back: all is well.
    std::fs::write(&key_file, &new_key).unwrap();
    s.kill_and_restart();
    assert_eq!(secret_value(&s, "db-5", "password"), "hunter2-plaintext-5");
}
