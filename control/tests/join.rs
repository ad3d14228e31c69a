//! Join tokens, the join exchange, and what a node's certificate allows, against a real server.

mod common;

use std::process::Command;

use api::client::{Client, ClientConfig};
use api::join::{JoinRequest, JoinResponse, JoinToken};
use common::{skiff_bin, TestServer};
use rustls_pki_types::pem::PemObject;
use serde_json::{json, Value};

fn create_token(s: &TestServer, ttl: &str) -> JoinToken {
    let out = Command::new(skiff_bin())
        .args(["token", "create", "--ttl", ttl])
        .env("KUBECONFIG", s.kubeconfig())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    JoinToken::parse(String::from_utf8_lossy(&out.stdout).trim()).expect("a well-formed token")
}

fn anonymous(s: &TestServer) -> Client {
    let kc = api::kubeconfig::Kubeconfig::load(&s.kubeconfig()).unwrap();
    let mut cfg = ClientConfig::from_kubeconfig(&kc, None).unwrap();
    cfg.token = None;
    Client::new(cfg).unwrap()
}

fn csr(node: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let csr = params.serialize_request(&key).unwrap();
    (csr.pem().unwrap(), key.serialize_pem())
}

fn join(s: &TestServer, credential: &str, node: &str) -> (u16, Value, String) {
    let (csr_pem, key_pem) = csr(node);
    let req = JoinRequest {
        token: credential.to_string(),
        node_name: node.to_string(),
        csr: csr_pem,
    };
    let r = smol::block_on(anonymous(s).request(
        "POST",
        api::join::JOIN_PATH,
        Some(("application/json", serde_json::to_vec(&req).unwrap())),
        "application/json",
    ))
    .unwrap();
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
        key_pem,
    )
}

fn node_client(s: &TestServer, cert: &str, key: &str) -> Client {
    let kc = api::kubeconfig::Kubeconfig::load(&s.kubeconfig()).unwrap();
    let mut cfg = ClientConfig::from_kubeconfig(&kc, None).unwrap();
    cfg.token = None;
    cfg.client_cert_pem = Some(cert.to_string());
    cfg.client_key_pem = Some(key.to_string());
    Client::new(cfg).unwrap()
}

fn call(c: &Client, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let r = smol::block_on(c.request(
        method,
        path,
        body.map(|b| ("application/json", serde_json::to_vec(b).unwrap())),
        "application/json",
    ))
    .unwrap();
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

fn node(name: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name}})
}

#[test]
fn a_token_pins_the_ca_and_gets_a_node_certificate() {
    let s = TestServer::start();
    let token = create_token(&s, "1h");
    // The CA is served without credentials, and the token pins its hash.
    let r = smol::block_on(anonymous(&s).request("GET", api::join::CA_PATH, None, "*/*")).unwrap();
    assert_eq!(r.status, 200);
    let pem = String::from_utf8(r.body).unwrap();
    let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(token.ca_hash, hex);

    let (code, answer, key) = join(&s, &token.credential(), "pi-1");
    assert_eq!(code, 200, "{answer}");
    let answer: JoinResponse = serde_json::from_value(answer).unwrap();
    assert_eq!(answer.ca, pem);
    let pi = node_client(&s, &answer.certificate, &key);

    // Its own Node: create, update status; another node: refused.
    assert_eq!(
        call(&pi, "POST", "/api/v1/nodes", Some(&node("pi-1"))).0,
        201
    );
    assert_eq!(
        call(&pi, "POST", "/api/v1/nodes", Some(&node("pi-2"))).0,
        403
    );
    let (code, _) = call(&pi, "PATCH", "/api/v1/nodes/pi-1/status", None);
    assert_ne!(code, 403);
    assert_eq!(s.json("POST", "/api/v1/nodes", &node("other")).0, 201);
    assert_eq!(call(&pi, "DELETE", "/api/v1/nodes/other", None).0, 403);
    // Reads a kubelet needs are allowed; other kinds are not.
    assert_eq!(
        call(
            &pi,
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dpi-1",
            None
        )
        .0,
        200
    );
    assert_eq!(call(&pi, "GET", "/apis/apps/v1/deployments", None).0, 403);

    // Pods: only the status of pods bound to it.
    let pod = |name: &str| json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name},"spec":{"containers":[{"name":"c","image":"busybox"}]}});
    assert_eq!(
        call(
            &pi,
            "POST",
            "/api/v1/namespaces/default/pods",
            Some(&pod("mine"))
        )
        .0,
        403
    );
    s.json("POST", "/api/v1/namespaces/default/pods", &pod("mine"));
    s.json("POST", "/api/v1/namespaces/default/pods", &pod("theirs"));
    s.json(
        "POST",
        "/api/v1/namespaces/default/pods/mine/binding",
        &json!({"metadata":{"name":"mine"},"target":{"kind":"Node","name":"pi-1"}}),
    );
    s.json(
        "POST",
        "/api/v1/namespaces/default/pods/theirs/binding",
        &json!({"metadata":{"name":"theirs"},"target":{"kind":"Node","name":"other"}}),
    );
    let (_, mine) = s.http("GET", "/api/v1/namespaces/default/pods/mine", None);
    let mut status = mine.clone();
    status["status"]["phase"] = json!("Running");
    assert_eq!(
        call(
            &pi,
            "PUT",
            "/api/v1/namespaces/default/pods/mine/status",
            Some(&status)
        )
        .0,
        200
    );
    assert_eq!(
        call(
            &pi,
            "PUT",
            "/api/v1/namespaces/default/pods/mine",
            Some(&status)
        )
        .0,
        403
    );
    let (_, theirs) = s.http("GET", "/api/v1/namespaces/default/pods/theirs", None);
    assert_eq!(
        call(
            &pi,
            "PUT",
            "/api/v1/namespaces/default/pods/theirs/status",
            Some(&theirs)
        )
        .0,
        403
    );
    assert_eq!(
        call(
            &pi,
            "DELETE",
            "/api/v1/namespaces/default/pods/theirs",
            None
        )
        .0,
        403
    );
    assert_eq!(
        call(
            &pi,
            "DELETE",
            "/api/v1/namespaces/default/pods/mine",
            Some(&json!({"gracePeriodSeconds": 0}))
        )
        .0,
        200
    );
}

#[test]
fn wrong_expired_and_malformed_joins_are_refused() {
    let s = TestServer::start();
    let token = create_token(&s, "1h");
    let (code, e, _) = join(&s, &format!("{}.{}", token.id, "x".repeat(16)), "pi-1");
    assert_eq!(code, 401, "{e}");
    assert_eq!(e["message"], "the join token is unknown, wrong or expired");
    let (code, _, _) = join(&s, "nosuch.0123456789abcdef", "pi-1");
    assert_eq!(code, 401);
    let (code, e, _) = join(&s, &token.credential(), "Bad_Name");
    assert_eq!(code, 422, "{e}");
    let short = create_token(&s, "1s");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (code, _, _) = join(&s, &short.credential(), "pi-1");
    assert_eq!(code, 401, "an expired token is refused");
    // A token cannot be made without admin credentials.
    let r = smol::block_on(anonymous(&s).request(
        "POST",
        api::join::TOKENS_PATH,
        Some(("application/json", b"{\"ttlSeconds\":60}".to_vec())),
        "*/*",
    ))
    .unwrap();
    assert_eq!(r.status, 401);
}
