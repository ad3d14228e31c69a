//! coordination.k8s.io/v1 Lease through the machine's real kubectl: create, get, describe,
//! explain and discovery.

mod common;

use common::{kubectl, TestServer};

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

fn manifest() -> String {
    format!(
        "{}/../api/tests/manifests/lease.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn kubectl_creates_lists_describes_and_explains_leases() {
    let s = TestServer::start();
    let out = ok(&s, &["api-resources", "--api-group=coordination.k8s.io"]);
    let row = out
        .lines()
        .find(|l| l.starts_with("leases "))
        .unwrap_or_else(|| panic!("no leases row:\n{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // NAME SHORTNAMES APIVERSION NAMESPACED KIND: no short name.
    assert_eq!(
        cells,
        ["leases", "coordination.k8s.io/v1", "true", "Lease"],
        "{out}"
    );

    let out = ok(&s, &["create", "-f", &manifest()]);
    assert!(
        out.contains("lease.coordination.k8s.io/pi-1 created"),
        "{out}"
    );
    assert!(
        out.contains("lease.coordination.k8s.io/kube-controller-manager created"),
        "{out}"
    );

    let out = ok(&s, &["get", "leases", "-A"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "NAME", "HOLDER", "AGE"], "{out}");
    assert!(
        out.lines().any(|l| l
            .split_whitespace()
            .take(3)
            .eq(["kube-node-lease", "pi-1", "pi-1"])),
        "{out}"
    );
    assert!(
        out.contains("server-a_1f7c2e3d-8b5a-4c1e-9d2f-0a1b2c3d4e5f"),
        "{out}"
    );

    let out = ok(
        &s,
        &[
            "get",
            "lease",
            "pi-1",
            "-n",
            "kube-node-lease",
            "-o",
            "yaml",
        ],
    );
    assert!(out.contains("leaseDurationSeconds: 40"), "{out}");
    assert!(
        out.contains("renewTime: \"2026-11-21T11:44:00.123456Z\""),
        "microseconds kept: {out}"
    );

    let out = ok(&s, &["describe", "lease", "-n", "kube-system"]);
    assert!(
        out.contains("Name:         kube-controller-manager"),
        "{out}"
    );
    assert!(out.contains("Lease Transitions:       2"), "{out}");
    assert!(
        out.contains("Holder Identity:         server-a_1f7c2e3d"),
        "{out}"
    );

    let out = ok(&s, &["explain", "lease.spec"]);
    assert!(out.contains("GROUP:      coordination.k8s.io"), "{out}");
    assert!(out.contains("KIND:       Lease"), "{out}");
    assert!(out.contains("leaseDurationSeconds\t<integer>"), "{out}");
    assert!(out.contains("renewTime\t<string>"), "{out}");

    // Kubernetes' validation.
    let bad = s.data_dir().join("bad-lease.yaml");
    std::fs::write(
        &bad,
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: bad}\nspec:\n  leaseDurationSeconds: 0\n",
    )
    .unwrap();
    let (success, _, err) = kubectl(&s, &["create", "-f", bad.to_str().unwrap()]);
    assert!(!success);
    assert!(
        err.contains("spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        "{err}"
    );

    ok(&s, &["delete", "lease", "pi-1", "-n", "kube-node-lease"]);
    let out = ok(&s, &["get", "leases", "-n", "kube-node-lease"]);
    assert!(!out.contains("pi-1"), "{out}");
}
