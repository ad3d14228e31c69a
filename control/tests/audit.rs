//! The audit log: an audit.k8s.io/v1 Event per request as JSON lines in
//! DATA_DIR/audit/audit.log (who, verb, object, code, timestamps), never a Secret's value;
//! none with --disable-audit-log.

mod common;

use std::time::{Duration, Instant};

use common::{kubectl, TestServer};
use serde_json::Value;

fn events(s: &TestServer) -> Vec<Value> {
    std::fs::read_to_string(s.data_dir().join("audit/audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn requests_are_audited_without_secret_values() {
    let s = TestServer::start();
    let (ok, out, err) = kubectl(
        &s,
        &[
            "create",
            "secret",
            "generic",
            "db",
            "--from-literal=password=audit-plaintext-value",
        ],
    );
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(&s, &["get", "secret", "db", "-o", "yaml"]);
    assert!(ok && out.contains("password"), "{out}{err}");
    let (ok, _, _) = kubectl(&s, &["get", "configmap", "missing"]);
    assert!(!ok);

    let deadline = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let all = events(&s);
        let get_missing = all
            .iter()
            .any(|e| e["objectRef"]["name"] == "missing" && e["responseStatus"]["code"] == 404);
        if get_missing || Instant::now() > deadline {
            break all;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let create = found
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "secrets")
        .unwrap_or_else(|| panic!("no create of a secret in {found:?}"));
    assert_eq!(create["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(create["kind"], "Event");
    assert_eq!(create["level"], "Metadata");
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["objectRef"]["namespace"], "default");
    assert_eq!(create["objectRef"]["apiVersion"], "v1");
    assert_eq!(create["responseStatus"]["code"], 201);
    assert_eq!(create["user"]["username"], "system:admin");
    assert!(create["userAgent"].as_str().unwrap().starts_with("kubectl"));
    assert_eq!(create["sourceIPs"][0], "127.0.0.1");
    assert!(
        create["requestReceivedTimestamp"].as_str().unwrap()
            <= create["stageTimestamp"].as_str().unwrap()
    );
    assert!(found
        .iter()
        .any(|e| e["verb"] == "get" && e["objectRef"]["name"] == "db"));
    assert!(found.iter().any(|e| e["objectRef"]["name"] == "missing"
        && e["responseStatus"]["code"] == 404
        && e["responseStatus"]["status"] == "Failure"));
    let raw = std::fs::read_to_string(s.data_dir().join("audit/audit.log")).unwrap();
    use base64::Engine as _;
    for needle in [
        "audit-plaintext-value".to_string(),
        base64::engine::general_purpose::STANDARD.encode("audit-plaintext-value"),
    ] {
        assert!(!raw.contains(&needle), "a secret's value in the audit log");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(s.data_dir().join("audit/audit.log"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let quiet = TestServer::start_with(&["--disable-audit-log"]);
    let (ok, _, _) = kubectl(&quiet, &["get", "pods"]);
    assert!(ok);
    assert!(!quiet.data_dir().join("audit").exists());
}

/// Pod Security's audit mode: a pod the namespace's audit level would refuse is admitted
/// (enforce is baseline), and its create's audit event names the violations under
/// Kubernetes' annotation keys, beside the enforced policy.
#[test]
fn pod_security_audit_mode_annotates_the_event() {
    let s = TestServer::start();
    for args in [
        &["create", "namespace", "audited"][..],
        &[
            "label",
            "namespace",
            "audited",
            "pod-security.kubernetes.io/audit=restricted",
        ],
        &[
            "run",
            "plain",
            "-n",
            "audited",
            "--image=busybox",
            "--",
            "sleep",
            "1",
        ],
    ] {
        let (ok, out, err) = kubectl(&s, args);
        assert!(ok, "kubectl {args:?}: {out}{err}");
        assert!(!err.contains("Warning"), "audit mode gave a warning: {err}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let create = loop {
        let found = events(&s).into_iter().find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == "audited"
        });
        match found {
            Some(e) => break e,
            None if Instant::now() > deadline => panic!("no audit event of the pod's create"),
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    assert_eq!(create["responseStatus"]["code"], 201, "{create}");
    let notes = &create["annotations"];
    assert_eq!(
        notes["pod-security.kubernetes.io/enforce-policy"], "baseline:latest",
        "{create}"
    );
    let violations = notes["pod-security.kubernetes.io/audit-violations"]
        .as_str()
        .unwrap_or_else(|| panic!("no audit-violations in {create}"));
    assert!(
        violations.starts_with(
            "would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"plain\" must set securityContext.allowPrivilegeEscalation=false)"
        ),
        "{violations}"
    );
    assert!(violations.contains("runAsNonRoot != true"), "{violations}");
    // A request admission has nothing to say about has no annotations.
    let listed = events(&s);
    assert!(listed
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "namespaces")
        .all(|e| e.get("annotations").is_none()));
}
