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

/// Applies every definition in `crds` server-side (as Helm 4 and Flux do) and waits until
/// kubectl finds `resources` in `group`.
fn install(s: &TestServer, crds: &Path, group: &str, resources: &[&str]) {
    for crd in files(crds) {
        let (ok, out) = apply(s, &crd, &["--server-side"]);
        assert!(ok, "{crd:?}: {out}");
    }
    eventually(30, "the project's kinds are served", || {
        let (ok, out, _) = kubectl(s, &["api-resources", &format!("--api-group={group}")]);
        (ok && resources.iter().all(|r| out.contains(r))).then_some(())
    });
}

/// Writes `yaml` and applies it; (success, output).
fn apply_text(s: &TestServer, yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).expect("write");
    apply(s, &file, &[])
}

#[test]
fn cert_manager_crds_and_objects() {
    let s = TestServer::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cert-manager");
    install(
        &s,
        &root.join("crds"),
        "cert-manager.io",
        &["certificates", "certificaterequests", "issuers"],
    );
    // cert-manager's documented setup: a self-signed issuer, a CA certificate from it, a CA
    // issuer of that certificate's secret, a serving certificate from that one.
    let (ok, out) = apply_text(
        &s,
        r#"apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: site-ca}
spec:
  isCA: true
  commonName: site-ca
  secretName: site-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: selfsigned, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: site-ca}
spec:
  ca: {secretName: site-ca}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web}
spec:
  secretName: web-tls
  duration: 2160h
  renewBefore: 360h
  dnsNames: [web.site.example]
  usages: [server auth, digital signature]
  issuerRef: {name: site-ca, kind: Issuer}
"#,
    );
    assert!(ok, "{out}");
    let (_, listed, _) = kubectl(&s, &["get", "certificates,issuers", "--no-headers"]);
    assert_eq!(listed.lines().count(), 4, "{listed}");
    // Refused as on Kubernetes: no secretName (required), a usage outside the enum, and the
    // Venafi issuer's CEL rule (exactly one of tpp, cloud or ngts).
    for (yaml, want) in [
        (
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: bad}\nspec:\n  dnsNames: [x.example]\n  issuerRef: {name: selfsigned}\n",
            "spec.secretName: Required value",
        ),
        (
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: bad}\nspec:\n  secretName: s\n  usages: [mining]\n  issuerRef: {name: selfsigned}\n",
            r#"spec.usages[0]: Unsupported value: "mining""#,
        ),
        (
            "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {name: bad}\nspec:\n  venafi:\n    zone: z\n",
            "exactly one of tpp, cloud, or ngts must be configured",
        ),
    ] {
        let (ok, out) = apply_text(&s, yaml);
        assert!(!ok, "{yaml}");
        assert!(out.contains(want), "{want} in: {out}");
    }
}

#[test]
fn keda_crds_and_samples() {
    let s = TestServer::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/keda");
    install(
        &s,
        &root.join("crds"),
        "keda.sh",
        &[
            "scaledobjects",
            "triggerauthentications",
            "clustertriggerauthentications",
        ],
    );
    for example in files(&root.join("examples")) {
        let (ok, out) = apply(&s, &example, &[]);
        assert!(ok, "{example:?}: {out}");
    }
    let (_, listed, _) = kubectl(
        &s,
        &[
            "get",
            "scaledobjects,triggerauthentications",
            "--no-headers",
        ],
    );
    assert_eq!(listed.lines().count(), 2, "{listed}");
    // The ScaledObject's CEL rule: at least as many replicas at the most as at the least.
    let (ok, out) = apply_text(
        &s,
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: bad}\nspec:\n  scaleTargetRef: {name: web}\n  minReplicaCount: 5\n  maxReplicaCount: 2\n  triggers:\n  - type: cpu\n    metadata: {value: '50'}\n",
    );
    assert!(!ok);
    assert!(
        out.contains("minReplicaCount must be less than or equal to maxReplicaCount"),
        "{out}"
    );
}
