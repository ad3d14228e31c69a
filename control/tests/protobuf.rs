//! Kubernetes' protobuf encoding: bodies that kubectl itself sent, objects encoded with
//! k8s-pb's typed structs, malformed bodies, updates, and protobuf responses.

mod common;

use std::path::PathBuf;

use serde_json::{json, Value};
use skiff_control::http::protobuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf")
}

/// Go prints unset pointers of its own types as null (`creationTimestamp: null`); Kubernetes
/// treats them as absent, and so does the decoder.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// Every body recorded from kubectl's generator commands (see fixtures/protobuf/record.py)
/// decodes to the very object kubectl prints for the same command with
/// `--dry-run=client -o json`.
#[test]
fn kubectl_bodies_decode_to_kubectls_own_json() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pb") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let body = std::fs::read(&path).unwrap();
        let decoded = protobuf::decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected: Value =
            serde_json::from_slice(&std::fs::read(path.with_extension("json")).unwrap()).unwrap();
        assert_eq!(
            decoded,
            without_nulls(expected),
            "{name}: decoded\n{}",
            serde_json::to_string_pretty(&decoded).unwrap()
        );
        seen.push(name);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "configmap-file",
            "configmap-literal",
            "deployment",
            "deployment-zero",
            "job",
            "namespace",
            "secret-docker-registry",
            "secret-generic",
            "secret-tls",
            "service-clusterip",
            "service-nodeport",
        ]
    );
}
