//! Aggregated discovery (`apidiscovery.k8s.io/v2`) with the machine's real kubectl: kubectl
//! 1.32 asks `/api` and `/apis` for the aggregated document first, reads every resource from
//! it (no per-group-version request), and lists what the per-group-version documents list.

mod common;

use std::collections::BTreeSet;

use common::{kubectl, TestServer};
use serde_json::Value;

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// kubectl 1.32's Accept for `/api` and `/apis`.
const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

fn ok(s: &TestServer, args: &[&str]) -> (String, String) {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    (out, err)
}

fn raw(s: &TestServer, path: &str) -> Value {
    let (out, _) = ok(s, &["get", "--raw", path]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{path}: {e}: {out}"))
}

/// One row of `kubectl api-resources -o wide`: name, short names, API version, namespaced,
/// kind, verbs, categories.
type Row = Vec<String>;

/// The rows of `kubectl api-resources -o wide`, cut at the header's column starts.
fn api_resources(out: &str) -> BTreeSet<Row> {
    let mut lines = out.lines();
    let header = lines.next().expect("a header");
    let titles = [
        "NAME",
        "SHORTNAMES",
        "APIVERSION",
        "NAMESPACED",
        "KIND",
        "VERBS",
        "CATEGORIES",
    ];
    let starts: Vec<usize> = titles
        .iter()
        .map(|t| header.find(t).unwrap_or_else(|| panic!("{t} in {header}")))
        .collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            (0..starts.len())
                .map(|i| {
                    let end = starts
                        .get(i + 1)
                        .copied()
                        .unwrap_or(line.len())
                        .min(line.len());
                    line.get(starts[i].min(line.len())..end)
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .collect()
        })
        .collect()
}

/// The rows kubectl would print from the per-group-version documents: every resource (not
/// subresource) of `/api/v1` and of each group's preferred version.
fn rows_from_per_version_documents(s: &TestServer) -> BTreeSet<Row> {
    let mut versions = vec![("v1".to_string(), "/api/v1".to_string())];
    let groups = raw(s, "/apis");
    assert_eq!(groups["kind"], "APIGroupList", "{groups}");
    for g in groups["groups"].as_array().expect("groups") {
        let gv = g["preferredVersion"]["groupVersion"]
            .as_str()
            .expect("groupVersion");
        versions.push((gv.to_string(), format!("/apis/{gv}")));
    }
    let list = |v: &Value, key: &str| -> String {
        let items: Vec<&str> = v[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        items.join(",")
    };
    let mut rows = BTreeSet::new();
    for (gv, path) in versions {
        let doc = raw(s, &path);
        for r in doc["resources"].as_array().expect("resources") {
            let name = r["name"].as_str().expect("name");
            if name.contains('/') {
                continue;
            }
            rows.insert(vec![
                name.to_string(),
                list(r, "shortNames"),
                gv.clone(),
                r["namespaced"].to_string(),
                r["kind"].as_str().expect("kind").to_string(),
                list(r, "verbs"),
                list(r, "categories"),
            ]);
        }
    }
    rows
}

#[test]
fn kubectl_reads_the_aggregated_document() {
    let s = TestServer::start();
    let (out, log) = ok(&s, &["api-resources", "-o", "wide", "-v=8"]);

    // kubectl asks `/api` and `/apis` for the aggregated document and gets it...
    let requests: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("] GET https://").map(|(_, rest)| rest))
        .collect();
    let paths: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.split_once('/').map(|(_, p)| p))
        .map(|p| p.split(['?', ' ']).next().unwrap_or(p))
        .collect();
    // (and no group version: every resource comes from the aggregated documents).
    assert_eq!(paths, ["api", "apis"], "{log}");
    assert!(
        log.contains(&format!("Accept: {KUBECTL_ACCEPT}")),
        "kubectl's Accept: {log}"
    );
    let content_types: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("Content-Type: ").map(|(_, v)| v.trim()))
        .collect();
    assert_eq!(content_types, [AGGREGATED, AGGREGATED], "{log}");

    // It lists what the per-group-version documents list.
    let listed = api_resources(&out);
    let per_version = rows_from_per_version_documents(&s);
    assert_eq!(listed, per_version);
    assert!(listed.iter().any(|r| r[0] == "pods" && r[2] == "v1"));
    assert!(listed
        .iter()
        .any(|r| r[0] == "horizontalpodautoscalers" && r[2] == "autoscaling/v2"));
    assert!(listed
        .iter()
        .any(|r| r[0] == "nodes" && r[2] == "metrics.k8s.io/v1beta1"));

    // Commands that resolve resources through discovery work from it.
    let (out, _) = ok(&s, &["get", "ns", "default", "-o", "name"]);
    assert_eq!(out.trim(), "namespace/default");
    let (out, _) = ok(&s, &["api-resources", "--api-group=apps", "-o", "name"]);
    assert!(out.lines().any(|l| l == "deployments.apps"), "{out}");
}

/// With `--disable-aggregated-discovery` kubectl falls back to each group version's
/// document (as with kube-apiserver before 1.26) and lists the same resources.
#[test]
fn kubectl_without_the_aggregated_document() {
    let s = TestServer::start_with(&["--disable-aggregated-discovery"]);
    let (code, v) = s.http("GET", "/apis", None);
    assert_eq!(code, 200);
    assert_eq!(v["kind"], "APIGroupList");
    let (out, log) = ok(&s, &["api-resources", "-o", "wide", "-v=6"]);
    let requests = log.lines().filter(|l| l.contains("] GET https://")).count();
    assert!(requests > 10, "one request per group version: {log}");
    assert_eq!(api_resources(&out), rows_from_per_version_documents(&s));
}

#[test]
fn aggregated_and_plain_answers() {
    let s = TestServer::start();
    let c = s.client();
    let get = |path: &str, accept: &str| {
        smol::block_on(c.request("GET", path, None, accept)).expect("request")
    };

    // `kubectl get --raw` accepts plain JSON: the APIGroupList, groups in kube-apiserver's
    // order (their APIService priorities), and the APIVersions.
    let groups = raw(&s, "/apis");
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    // kube-aggregator's own group first, as kube-apiserver lists it.
    assert_eq!(names.first(), Some(&"apiregistration.k8s.io"));
    assert_eq!(names.get(1), Some(&"apps"));
    assert_eq!(names.last(), Some(&"metrics.k8s.io"));
    let at = |g: &str| names.iter().position(|n| *n == g).expect(g);
    assert!(at("authentication.k8s.io") < at("autoscaling"));
    assert!(at("rbac.authorization.k8s.io") < at("storage.k8s.io"));
    assert!(at("storage.k8s.io") < at("scheduling.k8s.io"));
    assert_eq!(raw(&s, "/api")["kind"], "APIVersions");

    // With kubectl's Accept: the aggregated documents, with their ETag.
    for (path, first) in [("/api", ""), ("/apis", "apiregistration.k8s.io")] {
        let r = get(path, KUBECTL_ACCEPT);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some(AGGREGATED));
        assert_eq!(r.header("vary"), Some("Accept"));
        let etag = r.header("etag").expect("an ETag");
        assert!(etag.len() == 130 && etag.starts_with('"'), "{etag}");
        let v: Value = serde_json::from_slice(&r.body).expect("JSON");
        assert_eq!(v["kind"], "APIGroupDiscoveryList");
        assert_eq!(v["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(
            v["items"][0]["metadata"]["name"].as_str().unwrap_or(""),
            first
        );
        if path == "/apis" {
            let aggregated: Vec<&str> = v["items"]
                .as_array()
                .expect("items")
                .iter()
                .filter_map(|g| g["metadata"]["name"].as_str())
                .collect();
            assert_eq!(aggregated, names, "the same order as the APIGroupList");
        } else {
            assert_eq!(v["items"].as_array().map(Vec::len), Some(1));
        }
    }
    // v2beta1 alone.
    let r = get(
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
    );
    assert_eq!(
        r.header("content-type"),
        Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")
    );
    // Plain JSON first: the APIGroupList.
    let r = get("/apis", &format!("application/json,{AGGREGATED}"));
    let v: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(v["kind"], "APIGroupList");
    assert!(r.header("etag").is_none());
}
