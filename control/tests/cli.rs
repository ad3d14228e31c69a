//! `skiff apply | get | delete` end to end against a real server.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{skiff_bin, TestServer};

fn skiff(s: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(skiff_bin())
        .args(args)
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", s.data_dir())
        .output()
        .expect("skiff runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = skiff(s, args);
    assert!(success, "skiff {args:?} failed:\n{out}\n{err}");
    out
}

fn example() -> String {
    format!("{}/../examples/hello/app.yaml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn apply_creates_then_is_unchanged_then_configures() {
    let s = TestServer::start();
    let out = ok(&s, &["apply", "-f", &example()]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "configmap/hello-page created",
            "deployment.apps/hello created",
            "service/hello created"
        ]
    );
    let out = ok(&s, &["apply", "-f", &example()]);
    assert!(out.lines().all(|l| l.ends_with(" unchanged")), "{out}");

    // Someone else labels the deployment; a changed manifest keeps that label.
    let (code, _) = s.http(
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/hello",
        Some((
            "application/merge-patch+json",
            br#"{"metadata":{"labels":{"team":"ops"}}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200);
    let changed = std::fs::read_to_string(example())
        .unwrap()
        .replace("replicas: 2", "replicas: 3");
    let mut child = Command::new(skiff_bin())
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", s.kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(changed.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("deployment.apps/hello configured"), "{text}");
    assert!(text.contains("service/hello unchanged"), "{text}");
    let (_, d) = s.http(
        "GET",
        "/apis/apps/v1/namespaces/default/deployments/hello",
        None,
    );
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["labels"]["team"], "ops");
    assert_eq!(d["metadata"]["generation"], 2);
}

#[test]
fn get_prints_tables_yaml_json_and_names() {
    let s = TestServer::start();
    ok(&s, &["apply", "-f", &example()]);
    let out = ok(&s, &["get", "deployments"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert!(out.lines().nth(1).unwrap().starts_with("hello "), "{out}");
    let wide = ok(&s, &["get", "deploy", "-o", "wide"]);
    assert!(
        wide.contains("SELECTOR") && wide.contains("app=hello"),
        "{wide}"
    );
    let all = ok(&s, &["get", "all"]);
    assert!(
        all.contains("service/hello") && all.contains("deployment.apps/hello"),
        "{all}"
    );
    let all_wide = ok(&s, &["get", "all", "-o", "wide"]);
    assert!(
        all_wide.contains("deployment.apps/hello") && all_wide.contains("SELECTOR"),
        "{all_wide}"
    );
    let all_ns = ok(&s, &["get", "ns"]);
    assert!(all_ns.contains("kube-system"), "{all_ns}");
    let across = ok(&s, &["get", "cm", "-A"]);
    assert!(
        across.lines().next().unwrap().starts_with("NAMESPACE"),
        "{across}"
    );
    let yaml = ok(&s, &["get", "svc", "hello", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: Service") && yaml.contains("port: 80"),
        "{yaml}"
    );
    let json = ok(&s, &["get", "deploy", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["items"][0]["metadata"]["name"], "hello");
    let names = ok(&s, &["get", "cm", "-o", "name", "-l", "app=hello"]);
    assert_eq!(names.trim(), "configmap/hello-page");
    let empty = ok(&s, &["get", "pods", "-n", "kube-system"]);
    assert!(
        empty.is_empty() || empty.contains("No resources found"),
        "{empty}"
    );
    let (success, _, err) = skiff(&s, &["get", "deploy", "missing"]);
    assert!(!success);
    assert_eq!(err.trim(), "error: deployments.apps \"missing\" not found");
    let (success, _, err) = skiff(&s, &["get", "widgets"]);
    assert!(!success);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn get_watch_prints_later_changes() {
    let s = TestServer::start();
    let mut child = Command::new(skiff_bin())
        .args(["get", "cm", "-w"])
        .env("KUBECONFIG", s.kubeconfig())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    ok(&s, &["apply", "-f", &example()]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = Vec::new();
    while Instant::now() < deadline && !seen.iter().any(|l: &String| l.starts_with("hello-page")) {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(l);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.iter().any(|l| l.starts_with("hello-page")), "{seen:?}");
}

#[test]
fn delete_waits_and_reports() {
    let s = TestServer::start();
    ok(&s, &["apply", "-f", &example()]);
    let out = ok(&s, &["delete", "-f", &example()]);
    assert!(out.contains("deployment.apps \"hello\" deleted"), "{out}");
    assert!(out.contains("service \"hello\" deleted"), "{out}");
    assert_eq!(
        s.http("GET", "/api/v1/namespaces/default/services/hello", None)
            .0,
        404
    );
    let (success, _, err) = skiff(&s, &["delete", "cm", "missing"]);
    assert!(!success);
    assert!(
        err.trim().starts_with("error:") && err.contains("not found"),
        "{err}"
    );
    ok(&s, &["delete", "cm", "missing", "--ignore-not-found"]);
}

#[test]
fn bad_manifests_and_bad_kubeconfigs_are_one_line_errors() {
    let s = TestServer::start();
    let bad = s.data_dir().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n",
    )
    .unwrap();
    let (success, _, err) = skiff(&s, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(!success);
    assert!(err.starts_with("error:"), "{err}");
    let invalid = s.data_dir().join("invalid.yaml");
    std::fs::write(
        &invalid,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\n",
    )
    .unwrap();
    let (success, _, err) = skiff(&s, &["apply", "-f", invalid.to_str().unwrap()]);
    assert!(!success);
    assert!(err.contains("is invalid"), "{err}");
    let out = Command::new(skiff_bin())
        .args(["get", "pods", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// The `skiff` binary allocates through jemalloc with the options `main.rs` exports: the
/// background thread that returns freed memory to the system (the symbol must reach the
/// linked jemalloc, which otherwise silently runs with its defaults).
#[test]
fn the_binary_runs_jemalloc_with_its_background_thread() {
    let out = Command::new(skiff_bin())
        .args(["version", "--client"])
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("run skiff");
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    for option in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
        "opt.tcache_max: 1024",
        "opt.tcache_nslots_small_max: 64",
    ] {
        assert!(
            stats.contains(option),
            "jemalloc's statistics lack {option:?}:\n{stats}"
        );
    }
}

/// A store cache of no memory is refused before anything starts, naming the flag.
#[test]
fn a_zero_store_cache_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(skiff_bin())
        .args(["server", "--store-cache-mib", "0", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run skiff");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--store-cache-mib"), "{err}");
    assert!(
        std::fs::read_dir(dir.path())
            .expect("data dir")
            .next()
            .is_none(),
        "nothing may be written: {err}"
    );
}
