//! networking.k8s.io/v1 NetworkPolicy through a real server and the real kubectl: the
//! Kubernetes documentation's examples apply and come back defaulted, `kubectl get netpol`
//! prints kube's columns, bad policies are refused 422 with kube's field messages, a spec
//! change bumps the generation, and nodes (whose agents enforce the policies) may read
//! policies and namespaces but not write policies.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{kubectl, TestServer};
use serde_json::{json, Value};

const PATH: &str = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies";

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(success, "kubectl {args:?} failed:\n{out}\n{err}");
    out
}

fn kubectl_as(s: &TestServer, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", s.data_dir())
        .output()
        .expect("kubectl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A kubeconfig of node `name`'s identity (a certificate from the server's own CA).
fn node_kubeconfig(s: &TestServer, name: &str) -> PathBuf {
    let server = format!("https://{}", s.addr);
    let pki = skiff_control::pki::Pki::load_or_create(s.data_dir(), &[], &server).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    let cert = pki
        .sign_node_csr(&csr, name, Duration::from_secs(3600))
        .unwrap();
    let path = s.data_dir().join(format!("node-{name}.kubeconfig"));
    let kc = api::kubeconfig::Kubeconfig::with_client_cert(
        "skiff",
        &server,
        pki.ca_pem(),
        &format!("system:node:{name}"),
        &cert,
        &key.serialize_pem(),
    );
    std::fs::write(&path, kc.to_yaml()).unwrap();
    path
}

#[test]
fn documentation_examples_apply_default_and_print_as_kubectl_shows_them() {
    let s = TestServer::start();
    let manifests = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../api/tests/manifests/networkpolicy.yaml"
    );
    let out = ok(&s, &["apply", "-f", manifests]);
    assert_eq!(out.matches("created").count(), 10, "{out}");

    // Kubernetes' defaults: policyTypes from the rules, TCP for ports; generation 1.
    let (code, p) = s.http("GET", &format!("{PATH}/access-nginx"), None);
    assert_eq!(code, 200, "{p}");
    assert_eq!(p["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(p["metadata"]["generation"], 1);
    let (_, p) = s.http("GET", &format!("{PATH}/allow-all-egress"), None);
    assert_eq!(p["spec"]["egress"], json!([{}]));
    assert_eq!(p["spec"]["podSelector"], json!({}));
    let (_, p) = s.http("GET", &format!("{PATH}/multi-port-egress"), None);
    assert_eq!(
        p["spec"]["egress"][0]["ports"][0],
        json!({"protocol": "TCP", "port": 32000, "endPort": 32768})
    );

    // kubectl's columns, by the short name.
    let table = ok(&s, &["get", "netpol"]);
    let lines: Vec<&str> = table.lines().collect();
    let head: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(head, ["NAME", "POD-SELECTOR", "AGE"], "{table}");
    let row = |name: &str| -> Vec<String> {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {table}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row("test-network-policy")[1], "role=db");
    assert_eq!(row("default-deny-ingress")[1], "<none>");
    assert_eq!(row("egress-namespaces")[1], "app=myapp");
    let out = ok(
        &s,
        &["get", "networkpolicies.networking.k8s.io", "-o", "name"],
    );
    assert!(
        out.contains("networkpolicy.networking.k8s.io/alice-clients"),
        "{out}"
    );

    // A spec change bumps the generation; a label change does not.
    ok(&s, &["label", "netpol", "access-nginx", "team=web"]);
    ok(
        &s,
        &[
            "patch",
            "netpol",
            "access-nginx",
            "--type=merge",
            "-p",
            r#"{"spec":{"policyTypes":["Ingress","Egress"]}}"#,
        ],
    );
    let (_, p) = s.http("GET", &format!("{PATH}/access-nginx"), None);
    assert_eq!(p["metadata"]["generation"], 2, "{p}");
    assert_eq!(p["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    ok(&s, &["delete", "netpol", "access-nginx"]);
    let (code, _) = s.http("GET", &format!("{PATH}/access-nginx"), None);
    assert_eq!(code, 404);
}

#[test]
fn bad_policies_are_refused_with_kubernetes_field_messages() {
    let s = TestServer::start();
    let bad = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "bad"},
        "spec": {
            "podSelector": {},
            "ingress": [{
                "from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}, "podSelector": {}}],
                "ports": [{"port": "http", "endPort": 90}, {"protocol": "ICMP"}],
            }],
            "egress": [{"to": [{}]}],
        },
    });
    let (code, status) = s.json("POST", PATH, &bad);
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "NetworkPolicy");
    assert_eq!(status["details"]["group"], "networking.k8s.io");
    let causes: Vec<(String, String)> = status["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want = [
        (
            "spec.ingress[0].ports[0].endPort",
            "Invalid value: 90: may not be specified when `port` is non-numeric",
        ),
        (
            "spec.ingress[0].ports[1].protocol",
            "Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
        ),
        (
            "spec.ingress[0].from[0].ipBlock.except[0]",
            "Invalid value: \"10.1.0.0/24\": must be a strict subset of `cidr`",
        ),
        (
            "spec.ingress[0].from[0]",
            "Forbidden: may not specify both ipBlock and another peer",
        ),
        (
            "spec.egress[0].to[0]",
            "Required value: must specify a peer",
        ),
    ];
    for (field, message) in want {
        assert!(
            causes.iter().any(|(f, m)| f == field && m == message),
            "{field}: {message} not in {causes:#?}"
        );
    }
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("NetworkPolicy.networking.k8s.io \"bad\" is invalid: ["),
        "{message}"
    );

    // kubectl shows the same.
    let file = s.data_dir().join("bad.json");
    std::fs::write(&file, serde_json::to_vec(&bad).unwrap()).unwrap();
    let (success, _, err) = kubectl(&s, &["apply", "-f", file.to_str().unwrap()]);
    assert!(!success);
    assert!(
        err.contains("spec.egress[0].to[0]: Required value: must specify a peer"),
        "{err}"
    );
}

#[test]
fn nodes_read_policies_and_namespaces_and_write_no_policy() {
    let s = TestServer::start();
    let pi = node_kubeconfig(&s, "pi-1");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pi-1"}});
    assert_eq!(s.json("POST", "/api/v1/nodes", &node).0, 201);
    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny"}, "spec": {"podSelector": {}}});
    assert_eq!(s.json("POST", PATH, &policy).0, 201);
    let (success, out, err) = kubectl_as(&s, &pi, &["get", "netpol", "-A", "-o", "name"]);
    assert!(success, "{err}");
    assert_eq!(out.trim(), "networkpolicy.networking.k8s.io/deny");
    let (success, out, err) = kubectl_as(
        &s,
        &pi,
        &["get", "ns", "default", "-o", "jsonpath={.metadata.labels}"],
    );
    assert!(success, "{err}");
    assert!(out.contains("kubernetes.io/metadata.name"), "{out}");
    // A watch is allowed too (the agents list, then watch).
    let c = api::client::Client::from_kubeconfig(
        &api::kubeconfig::Kubeconfig::load(&pi).expect("kubeconfig"),
    )
    .expect("client");
    let (items, rv) = smol::block_on(c.list::<api::networking::NetworkPolicy>(None, None, None))
        .expect("list as the node");
    assert_eq!(items.len(), 1);
    let mut stream = smol::block_on(c.watch::<api::networking::NetworkPolicy>(
        None,
        &rv,
        None,
        None,
        Some(Duration::from_secs(10)),
    ))
    .expect("watch as the node");
    let mut other = policy.clone();
    other["metadata"]["name"] = json!("other");
    assert_eq!(s.json("POST", PATH, &other).0, 201);
    match smol::block_on(futures_lite::StreamExt::next(&mut stream)) {
        Some(Ok(api::client::WatchEvent::Added(p))) => assert_eq!(p.metadata.name, "other"),
        e => panic!("the node's watch saw {e:?}"),
    }
    // Writing a policy is the admins' business.
    let file = s.data_dir().join("allow.json");
    let mut allow: Value = policy.clone();
    allow["metadata"]["name"] = json!("allow");
    std::fs::write(&file, serde_json::to_vec(&allow).unwrap()).unwrap();
    let (success, _, err) = kubectl_as(&s, &pi, &["create", "-f", file.to_str().unwrap()]);
    assert!(!success);
    assert!(err.contains("forbidden"), "{err}");
    let (success, _, err) = kubectl_as(&s, &pi, &["delete", "netpol", "deny"]);
    assert!(!success);
    assert!(err.contains("forbidden"), "{err}");
}
