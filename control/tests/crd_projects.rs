//! The CustomResourceDefinitions of widely used projects, applied unchanged with the real
//! kubectl, and their example objects accepted or refused as a conformant API server does
//! (`tests/fixtures/*/README.md` says where each file comes from and under which licence).
//!
//! Gateway API v1.2.1: its five standard CRDs (structural schemas with `oneOf` value
//! validations, `x-kubernetes-list-type` maps and sets, CEL rules with messages and
//! transition rules), its 59 standard examples (all accepted) and its 30 invalid examples
//! (all refused, most by CEL rules).

mod common;

use std::path::{Path, PathBuf};

use common::{eventually, kubectl, TestServer};

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    out.sort();
    out
}

fn apply(s: &TestServer, file: &Path, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["apply", "-f", file.to_str().expect("path")];
    args.extend_from_slice(extra);
    let (ok, out, err) = kubectl(s, &args);
    (ok, format!("{out}{err}"))
}

#[test]
fn gateway_api_crds_examples_and_invalid_examples() {
    let s = TestServer::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gateway-api-v1.2.1");
    // The route CRDs are too large for client-side apply's annotation (as on Kubernetes):
    // server-side apply, as the project's install instructions say.
    let crds = files(&root.join("crds"));
    assert_eq!(crds.len(), 5);
    for crd in &crds {
        let (ok, out) = apply(&s, crd, &["--server-side"]);
        assert!(ok, "{crd:?}: {out}");
    }
    let (ok, out, err) = kubectl(
        &s,
        &[
            "wait",
            "--for=condition=established",
            "crd",
            "--all",
            "--timeout=30s",
        ],
    );
    assert!(ok, "{out}{err}");
    eventually(20, "the Gateway API kinds are served", || {
        let (ok, out, _) = kubectl(
            &s,
            &["api-resources", "--api-group=gateway.networking.k8s.io"],
        );
        (ok && [
            "gatewayclasses",
            "gateways",
            "httproutes",
            "grpcroutes",
            "referencegrants",
        ]
        .iter()
        .all(|r| out.contains(r)))
        .then_some(())
    });

    // Namespaces first (their files start with 0-), then every example.
    let examples = files(&root.join("examples"));
    assert_eq!(examples.len(), 59);
    let (first, rest): (Vec<_>, Vec<_>) = examples.iter().partition(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains("0-namespaces"))
    });
    let mut refused = Vec::new();
    for example in first.iter().chain(&rest) {
        let (ok, out) = apply(&s, example, &[]);
        if !ok {
            refused.push(format!("{example:?}: {out}"));
        }
    }
    assert!(
        refused.is_empty(),
        "valid examples refused:\n{}",
        refused.join("\n")
    );
    let (_, listed, _) = kubectl(
        &s,
        &[
            "get",
            "gateways,httproutes,grpcroutes",
            "-A",
            "--no-headers",
        ],
    );
    assert!(listed.lines().count() >= 40, "{listed}");

    // Every invalid example is refused, and says why.
    let (_, _, _) = kubectl(&s, &["create", "namespace", "gateway-conformance-infra"]);
    let invalid = files(&root.join("invalid"));
    assert_eq!(invalid.len(), 30);
    let mut accepted = Vec::new();
    for bad in &invalid {
        let (ok, out) = apply(&s, bad, &[]);
        if ok {
            accepted.push(format!("{bad:?}: {out}"));
        } else {
            assert!(
                out.contains("is invalid") || out.contains("Invalid value"),
                "{bad:?}: {out}"
            );
        }
    }
    assert!(
        accepted.is_empty(),
        "invalid examples accepted:\n{}",
        accepted.join("\n")
    );

    // Two refusals as kube-apiserver words them: a CEL rule's message and a list-map key.
    let (_, out) = apply(
        &s,
        &root.join("invalid/httproute_duplicate-header-match.yaml"),
        &[],
    );
    assert!(
        out.contains(r#"spec.rules[0].matches[0].headers[1]: Duplicate value: map[string]interface {}{"name":"foo"}"#),
        "{out}"
    );
}

/// Prometheus Operator v0.79.2: the CRDs applications ship (ServiceMonitor, PodMonitor,
/// Probe, PrometheusRule) and the user guide's objects of them; an object the schema refuses.
#[test]
fn prometheus_operator_crds_and_examples() {
    let s = TestServer::start();
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prometheus-operator-v0.79.2");
    for crd in files(&root.join("crds")) {
        let (ok, out) = apply(&s, &crd, &["--server-side"]);
        assert!(ok, "{crd:?}: {out}");
    }
    let (ok, out, err) = kubectl(
        &s,
        &[
            "wait",
            "--for=condition=established",
            "crd",
            "--all",
            "--timeout=30s",
        ],
    );
    assert!(ok, "{out}{err}");
    eventually(20, "the monitoring kinds are served", || {
        let (ok, out, _) = kubectl(&s, &["api-resources", "--api-group=monitoring.coreos.com"]);
        (ok && out.contains("servicemonitors") && out.contains("prometheusrules")).then_some(())
    });
    for example in files(&root.join("examples")) {
        let (ok, out) = apply(&s, &example, &[]);
        assert!(ok, "{example:?}: {out}");
    }
    let (_, listed, _) = kubectl(
        &s,
        &[
            "get",
            "servicemonitors,podmonitors,prometheusrules",
            "-A",
            "--no-headers",
        ],
    );
    assert_eq!(listed.lines().count(), 3, "{listed}");
    // An endpoint scheme outside the schema's enum.
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: bad\nspec:\n  selector: {}\n  endpoints:\n  - port: web\n    scheme: ftp\n",
    )
    .expect("write");
    let (ok, out) = apply(&s, &bad, &[]);
    assert!(!ok);
    assert!(
        out.contains(r#"spec.endpoints[0].scheme: Unsupported value: "ftp": supported values: "http", "https""#),
        "{out}"
    );
}
