//! API aggregation as a site runs it (issue 33 part 3): `kubectl get apiservices` lists the
//! server's own group versions as Local; an extension API server written here (HTTPS with a
//! CA of its own, requiring the front-proxy client certificate the server presents, checked
//! against the CA of kube-system/extension-apiserver-authentication) serves
//! `metrics.example.com/v1beta1` behind a Service and its Endpoints on a server without its
//! own agent; its APIService, applied with kubectl, turns Available; kubectl lists its
//! `widgets` and `api-resources` shows them through the aggregated discovery; the backend
//! sees the user (impersonated too) in the front-proxy headers and never the client's
//! credentials; authorization happens before proxying; watches stream through and request
//! bodies pass. Stopped, the backend's APIService turns unavailable (FailedDiscoveryCheck)
//! and its requests answer 503. The Python client creates an APIService; custom resource
//! definitions get their local APIServices and lose them with the definition.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{eventually, kubectl, TestServer};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

const GROUP: &str = "metrics.example.com";
const BASE: &str = "/apis/metrics.example.com/v1beta1";

/// One request the extension server received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The common name of the client certificate.
    client: String,
}

impl Seen {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn one(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }
}

/// An extension API server: HTTPS with a certificate for `api.ext.svc` from its own CA, a
/// client certificate required (signed by `client_ca`, with a common name among
/// `allowed`), the user taken from `X-Remote-User` and `X-Remote-Group`.
struct ExtensionServer {
    port: u16,
    ca_pem: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    metrics: Arc<Mutex<Metrics>>,
}

/// What the extension server answers for `custom.metrics.k8s.io/v1beta2`: the metric
/// `requests_per_second` of each pod named, and `queue_depth` of the Deployment `worker`.
#[derive(Default)]
struct Metrics {
    pods: Vec<String>,
    per_pod: String,
    queue_depth: String,
}

impl ExtensionServer {
    fn start(client_ca: &str, allowed: Vec<String>) -> ExtensionServer {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "extension-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::default();
        leaf.distinguished_name
            .push(DnType::CommonName, "api.ext.svc");
        leaf.subject_alt_names = vec![SanType::DnsName("api.ext.svc".try_into().unwrap())];
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        let chain = vec![CertificateDer::from_pem_slice(cert.pem().as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let metrics: Arc<Mutex<Metrics>> = Arc::default();
        let (seen2, stop2, metrics2) = (seen.clone(), stop.clone(), metrics.clone());
        std::thread::spawn(move || {
            // Stopped: the listener is dropped, so connections are refused.
            while !stop2.load(Ordering::SeqCst) {
                let tcp = match listener.accept() {
                    Ok((tcp, _)) => tcp,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                tcp.set_nonblocking(false).unwrap();
                // As Go servers do: no Nagle delay between a head and its body.
                tcp.set_nodelay(true).unwrap();
                let (config, seen, allowed, metrics) = (
                    config.clone(),
                    seen2.clone(),
                    allowed.clone(),
                    metrics2.clone(),
                );
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, tcp);
                    while let Some(mut req) = read_request(&mut tls) {
                        req.client = client_name(&tls.conn);
                        seen.lock().unwrap().push(req.clone());
                        let served = if req.path.starts_with(CUSTOM_METRICS) {
                            custom_metrics(&mut tls, &req, &metrics.lock().unwrap())
                        } else {
                            answer(&mut tls, &req, &allowed)
                        };
                        if !served {
                            return;
                        }
                    }
                });
            }
        });
        ExtensionServer {
            port,
            ca_pem: ca_cert.pem(),
            seen,
            stop,
            metrics,
        }
    }

    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The requests seen for paths starting with `prefix`.
    fn seen(&self, prefix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// The common name of the client's certificate.
fn client_name(conn: &rustls::ServerConnection) -> String {
    let Some(cert) = conn.peer_certificates().and_then(|c| c.first()) else {
        return String::new();
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).unwrap();
    let name = parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    name
}

fn read_request(stream: &mut impl Read) -> Option<Seen> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        line.clear();
        reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            }
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body,
        client: String::new(),
    })
}

fn write_json(w: &mut impl Write, code: u16, v: &Value) -> bool {
    let body = serde_json::to_vec(v).unwrap();
    let head = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nX-Backend: extension\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes()).is_ok() && w.write_all(&body).is_ok() && w.flush().is_ok()
}

fn widget(name: &str, ns: &str, req: &Seen) -> Value {
    json!({"apiVersion": "metrics.example.com/v1beta1", "kind": "Widget",
           "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-01-01T00:00:00Z",
                        "annotations": {"seen-user": req.one("X-Remote-User").unwrap_or(""),
                                        "seen-groups": req.all("X-Remote-Group").join(",")}}})
}

/// The extension server's answers; false to close the connection.
fn answer(w: &mut impl Write, req: &Seen, allowed: &[String]) -> bool {
    if !allowed.contains(&req.client) || req.one("X-Remote-User").is_none() {
        return write_json(
            w,
            401,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401, "reason": "Unauthorized"}),
        );
    }
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let rest = path.strip_prefix(BASE).unwrap_or("/unknown");
    let ns = rest
        .strip_prefix("/namespaces/")
        .and_then(|r| r.split('/').next())
        .unwrap_or("default");
    let collection = rest.ends_with("/widgets");
    match (req.method.as_str(), rest) {
        ("GET", "") => write_json(
            w,
            200,
            &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.example.com/v1beta1",
                    "resources": [
                        {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget",
                         "verbs": ["create", "get", "list", "watch"], "shortNames": ["wd"], "categories": ["all"]},
                        {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget",
                         "verbs": ["get"]}]}),
        ),
        ("GET", _)
            if collection
                && query
                    .split('&')
                    .any(|p| p == "watch=true" || p == "watch=1") =>
        {
            // Two events, a second apart, chunked, then the end.
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
            if w.write_all(head.as_bytes()).is_err() {
                return false;
            }
            for (i, name) in ["w1", "w2"].iter().enumerate() {
                if i > 0 {
                    std::thread::sleep(Duration::from_millis(1500));
                }
                let mut event =
                    serde_json::to_vec(&json!({"type": "ADDED", "object": widget(name, ns, req)}))
                        .unwrap();
                event.push(b'\n');
                let chunk = format!("{:x}\r\n", event.len());
                if w.write_all(chunk.as_bytes()).is_err()
                    || w.write_all(&event).is_err()
                    || w.write_all(b"\r\n").is_err()
                    || w.flush().is_err()
                {
                    return false;
                }
            }
            // The end of the body, and of the connection.
            let _ = w.write_all(b"0\r\n\r\n").and_then(|_| w.flush());
            false
        }
        ("GET", _) if collection => {
            let items = vec![widget("w1", ns, req)];
            let accept = req.one("Accept").unwrap_or("");
            if accept.contains("as=Table") {
                let rows: Vec<Value> = items
                    .iter()
                    .map(|i| json!({"cells": [i["metadata"]["name"], i["metadata"]["annotations"]["seen-user"]],
                                     "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                "metadata": i["metadata"]}}))
                    .collect();
                write_json(
                    w,
                    200,
                    &json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "1"},
                            "columnDefinitions": [
                                {"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0},
                                {"name": "Seen-User", "type": "string", "format": "", "description": "", "priority": 0}],
                            "rows": rows}),
                )
            } else {
                write_json(
                    w,
                    200,
                    &json!({"apiVersion": "metrics.example.com/v1beta1", "kind": "WidgetList",
                            "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
        }
        ("POST", _) if collection => {
            let mut obj: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            obj["metadata"]["annotations"] =
                json!({"seen-user": req.one("X-Remote-User").unwrap_or("")});
            write_json(w, 201, &obj)
        }
        _ => write_json(
            w,
            404,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"}),
        ),
    }
}

const CUSTOM_METRICS: &str = "/apis/custom.metrics.k8s.io/v1beta2";

/// A custom metrics adapter's answers (custom.metrics.k8s.io/v1beta2): its discovery, the
/// pods' `requests_per_second` (`pods/*/requests_per_second`, `*` escaped or not) and the
/// `queue_depth` of the Deployment `worker`.
fn custom_metrics(w: &mut impl Write, req: &Seen, m: &Metrics) -> bool {
    let path = req.path.split('?').next().unwrap_or("");
    let rest = path.strip_prefix(CUSTOM_METRICS).unwrap_or("");
    let value = |kind: &str, ns: &str, name: &str, metric: &str, v: &str| {
        json!({"describedObject": {"kind": kind, "namespace": ns, "name": name, "apiVersion": "/v1"},
               "metric": {"name": metric}, "timestamp": "2026-01-01T00:00:00Z",
               "windowSeconds": 60, "value": v})
    };
    let list = |items: Vec<Value>| {
        json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
               "metadata": {}, "items": items})
    };
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        [""] => write_json(
            w,
            200,
            &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "custom.metrics.k8s.io/v1beta2",
                    "resources": [
                        {"name": "pods/requests_per_second", "singularName": "", "namespaced": true,
                         "kind": "MetricValueList", "verbs": ["get"]},
                        {"name": "deployments.apps/queue_depth", "singularName": "", "namespaced": true,
                         "kind": "MetricValueList", "verbs": ["get"]}]}),
        ),
        ["namespaces", ns, "pods", "*" | "%2A", "requests_per_second"] => {
            let items = m
                .pods
                .iter()
                .map(|p| value("Pod", ns, p, "requests_per_second", &m.per_pod))
                .collect();
            write_json(w, 200, &list(items))
        }
        ["namespaces", ns, "deployments", "worker", "queue_depth"] => {
            let item = value("Deployment", ns, "worker", "queue_depth", &m.queue_depth);
            write_json(w, 200, &list(vec![item]))
        }
        _ => write_json(
            w,
            404,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                    "reason": "NotFound", "message": format!("the server could not find the metric {rest}")}),
        ),
    }
}

/// An extension server trusting the front-proxy settings `data` (of
/// kube-system/extension-apiserver-authentication), behind the Service `ext/api` and its
/// Endpoints (no agent here: only the API server resolves them).
fn extension_behind_a_service(s: &TestServer, data: &Value) -> ExtensionServer {
    let allowed: Vec<String> =
        serde_json::from_str(data["requestheader-allowed-names"].as_str().unwrap()).unwrap();
    let ext = ExtensionServer::start(
        data["requestheader-client-ca-file"].as_str().unwrap(),
        allowed,
    );
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ext"}}),
    );
    assert_eq!(code, 201, "{v}");
    s.expose_local("ext", "api", ext.port);
    ext
}

fn apply(s: &TestServer, yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).unwrap();
    let (ok, out, err) = kubectl(s, &["apply", "-f", file.to_str().unwrap()]);
    (ok, format!("{out}{err}"))
}

fn api_service(s: &TestServer, name: &str) -> Value {
    let (code, v) = s.http(
        "GET",
        &format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}"),
        None,
    );
    assert_eq!(code, 200, "{v}");
    v
}

fn available(v: &Value) -> (String, String, String) {
    let c = v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .cloned()
        .unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    (s("status"), s("reason"), s("message"))
}

/// A raw request with the admin's token and extra headers; (status, headers, body).
fn raw(
    s: &TestServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let token = std::fs::read_to_string(s.data_dir().join("admin-token")).unwrap();
    let auth = format!("Bearer {}", token.trim());
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read_to_string(s.data_dir().join("pki/ca.crt")).unwrap();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let t = api::transport::Transport::new(Arc::new(tls), Default::default());
    let url = api::transport::Url::parse(&format!("https://{}{path}", s.addr)).unwrap();
    let mut all = vec![("Authorization", auth.as_str())];
    all.extend_from_slice(headers);
    smol::block_on(async {
        let mut r = t.send(method, &url, &all, body).await.unwrap();
        let b = r.bytes(1 << 24).await.unwrap();
        (r.status, r.headers.clone(), b)
    })
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[test]
fn an_extension_api_server_behind_an_apiservice() {
    let s = TestServer::start();

    // The server's own group versions, Local and available, as kube-apiserver lists them.
    let listed = eventually(20, "local APIServices", || {
        let (ok, out, _) = kubectl(&s, &["get", "apiservices"]);
        (ok && out.contains("v2.autoscaling")).then_some(out)
    });
    let header = listed.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("SERVICE") && header.contains("AVAILABLE"),
        "{listed}"
    );
    for name in [
        "v1.",
        "v1.apps",
        "v1.storage.k8s.io",
        "v1beta1.metrics.k8s.io",
    ] {
        let line = listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} in {listed}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[1..3], ["Local", "True"], "{line}");
    }
    assert!(!listed.contains("apiregistration.k8s.io"), "{listed}");
    let core = api_service(&s, "v1.");
    assert_eq!(
        core["spec"],
        json!({"service": null, "version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1})
    );
    assert_eq!(
        core["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "onstart"
    );
    assert_eq!(
        available(&core),
        (
            "True".into(),
            "Local".into(),
            "Local APIServices are always available".into()
        )
    );

    // The trust extension API servers read.
    let (code, cm) = s.http(
        "GET",
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
        None,
    );
    assert_eq!(code, 200, "{cm}");
    let data = &cm["data"];
    let ca = std::fs::read_to_string(s.data_dir().join("pki/ca.crt")).unwrap();
    assert_eq!(data["client-ca-file"], ca.as_str());
    assert_eq!(
        data["requestheader-allowed-names"],
        r#"["front-proxy-client"]"#
    );
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        r#"["X-Remote-Extra-"]"#
    );
    assert_eq!(data["requestheader-group-headers"], r#"["X-Remote-Group"]"#);
    assert_eq!(
        data["requestheader-username-headers"],
        r#"["X-Remote-User"]"#
    );
    let ext = extension_behind_a_service(&s, data);

    // A wrong name is refused with kube-aggregator's message.
    let (ok, out) = apply(
        &s,
        r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: metrics}
spec: {group: metrics.example.com, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 100,
       service: {namespace: ext, name: api}}
"#,
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains(r#"metadata.name: Invalid value: "metrics": must be `spec.version+"."+spec.group`: "v1beta1.metrics.example.com""#),
        "{out}"
    );

    let started = Instant::now();
    let (ok, out) = apply(
        &s,
        &format!(
            r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta1.metrics.example.com}}
spec:
  group: metrics.example.com
  version: v1beta1
  groupPriorityMinimum: 1500
  versionPriority: 20
  service: {{namespace: ext, name: api}}
  caBundle: {}
"#,
            ext.ca_bundle()
        ),
    );
    assert!(ok, "{out}");
    let v = eventually(20, "the APIService is available", || {
        let v = api_service(&s, "v1beta1.metrics.example.com");
        (available(&v).0 == "True").then_some(v)
    });
    let became = started.elapsed();
    assert_eq!(
        available(&v),
        ("True".into(), "Passed".into(), "all checks passed".into())
    );
    assert_eq!(v["spec"]["service"]["port"], 443);
    // The checks came with the front-proxy certificate, as system:kube-aggregator.
    let checks = ext.seen(BASE);
    assert!(!checks.is_empty());
    assert!(checks.iter().all(|c| c.client == "front-proxy-client"));
    let check = checks
        .iter()
        .find(|c| c.path == BASE)
        .expect("a discovery check");
    assert_eq!(check.one("X-Remote-User"), Some("system:kube-aggregator"));
    let (ok, out, _) = kubectl(&s, &["get", "apiservice", "v1beta1.metrics.example.com"]);
    assert!(ok);
    let cells: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &cells[..3],
        ["v1beta1.metrics.example.com", "ext/api", "True"],
        "{out}"
    );

    // Discovery: the group in /apis and /apis/GROUP, the backend's own /apis/GROUP/VERSION,
    // the aggregated document with its resources (fetched after it turned available).
    let (code, list) = s.http("GET", "/apis", None);
    assert_eq!(code, 200);
    let groups = list["groups"].as_array().unwrap();
    assert_eq!(groups[0]["name"], "apiregistration.k8s.io");
    let ours = groups
        .iter()
        .find(|g| g["name"] == GROUP)
        .expect("in /apis");
    assert_eq!(
        ours["preferredVersion"]["groupVersion"],
        "metrics.example.com/v1beta1"
    );
    let (code, g) = s.http("GET", "/apis/metrics.example.com", None);
    assert_eq!((code, g["kind"].as_str()), (200, Some("APIGroup")), "{g}");
    let (code, _, body) = raw(&s, "GET", BASE, &[("Accept", "application/json")], &[]);
    assert_eq!(code, 200);
    let resources: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&body)));
    assert_eq!(resources["kind"], "APIResourceList");
    assert_eq!(resources["resources"][0]["shortNames"], json!(["wd"]));
    let doc = eventually(20, "the aggregated document lists the widgets", || {
        let (code, _, body) = raw(&s, "GET", "/apis", &[("Accept", AGGREGATED)], &[]);
        assert_eq!(code, 200);
        let doc: Value = serde_json::from_slice(&body).unwrap();
        let text = String::from_utf8(body).unwrap();
        text.contains(r#""resource":"widgets""#).then_some(doc)
    });
    let item = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == GROUP)
        .unwrap();
    assert_eq!(
        item["versions"][0],
        json!({"version": "v1beta1", "freshness": "Current", "resources": [
            {"resource": "widgets", "responseKind": {"group": "", "version": "", "kind": "Widget"},
             "scope": "Namespaced", "singularResource": "widget", "verbs": ["create", "get", "list", "watch"],
             "shortNames": ["wd"], "categories": ["all"],
             "subresources": [{"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "Widget"}, "verbs": ["get"]}]}]})
    );
    let (ok, out, err) = kubectl(&s, &["api-resources", "--api-group", GROUP]);
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("widgets"))
        .expect("widgets listed");
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "widgets",
            "wd",
            "metrics.example.com/v1beta1",
            "true",
            "Widget"
        ],
        "{out}"
    );

    // kubectl through the aggregator: the backend's table, and the user it saw.
    let (ok, out, err) = kubectl(&s, &["get", "widgets", "-n", "default"]);
    assert!(ok, "{err}");
    assert!(out.contains("SEEN-USER"), "{out}");
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row, ["w1", "system:admin"], "{out}");
    let (ok, out, err) = kubectl(&s, &["get", "wd", "-n", "default", "-o", "json"]);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["items"][0]["metadata"]["name"], "w1");
    let seen = ext.seen(&format!("{BASE}/namespaces/default/widgets"));
    let last = seen.last().unwrap();
    assert_eq!(last.one("X-Remote-User"), Some("system:admin"));
    assert_eq!(
        last.all("X-Remote-Group"),
        ["system:masters", "system:authenticated"]
    );
    assert!(last.one("Authorization").is_none(), "{last:?}");
    assert_eq!(last.client, "front-proxy-client");

    // Impersonation: the backend sees the user the request acts as; a user without the right
    // is refused here, before anything is proxied.
    let before = ext.seen(BASE).len();
    let (ok, _, err) = kubectl(&s, &["get", "widgets", "-n", "default", "--as", "bob"]);
    assert!(!ok);
    assert!(
        err.contains(r#"widgets.metrics.example.com is forbidden: User "bob" cannot list resource "widgets" in API group "metrics.example.com" in the namespace "default""#),
        "{err}"
    );
    assert_eq!(ext.seen(BASE).len(), before, "nothing proxied");
    let (ok, out) = apply(
        &s,
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: widget-reader, namespace: default}
rules: [{apiGroups: [metrics.example.com], resources: [widgets], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-reads-widgets, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
"#,
    );
    assert!(ok, "{out}");
    let out = eventually(10, "bob may list widgets", || {
        let (ok, out, _) = kubectl(
            &s,
            &[
                "get",
                "widgets",
                "-n",
                "default",
                "--as",
                "bob",
                "--as-group",
                "devs",
            ],
        );
        ok.then_some(out)
    });
    assert!(out.contains("bob"), "{out}");
    let last = ext.seen(BASE).last().cloned().unwrap();
    assert_eq!(last.one("X-Remote-User"), Some("bob"));
    assert_eq!(last.all("X-Remote-Group"), ["devs", "system:authenticated"]);
    assert!(last.all("Impersonate-User").is_empty());

    // Front-proxy headers and credentials a client sends are not passed on; the query is
    // re-encoded as Go encodes it; the backend's status and headers come back.
    let (code, headers, body) = raw(
        &s,
        "GET",
        &format!("{BASE}/namespaces/default/widgets?limit=5&labelSelector=a%3Db"),
        &[
            ("Accept", "application/json"),
            ("X-Remote-User", "mallory"),
            ("X-Remote-Group", "system:masters"),
            ("X-Remote-Extra-Scopes", "all"),
        ],
        &[],
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert!(headers
        .iter()
        .any(|(k, v)| k == "x-backend" && v == "extension"));
    let last = ext.seen(BASE).last().cloned().unwrap();
    assert_eq!(
        last.path,
        format!("{BASE}/namespaces/default/widgets?labelSelector=a%3Db&limit=5")
    );
    assert_eq!(last.all("X-Remote-User"), ["system:admin"]);
    assert!(!last.all("X-Remote-Group").contains(&"mallory"));
    assert!(last.all("X-Remote-Extra-Scopes").is_empty(), "{last:?}");

    // A request body passes, and the answer's code.
    let (code, _, body) = raw(
        &s,
        "POST",
        &format!("{BASE}/namespaces/default/widgets"),
        &[("Content-Type", "application/json")],
        br#"{"apiVersion":"metrics.example.com/v1beta1","kind":"Widget","metadata":{"name":"w9"},"spec":{"size":3}}"#,
    );
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(created["spec"]["size"], 3);
    assert_eq!(
        created["metadata"]["annotations"]["seen-user"],
        "system:admin"
    );

    // What proxying costs (printed, not checked): a list through the aggregator against a
    // list the server answers itself, each over one kept-alive connection.
    let c = s.client();
    let per_request = |path: &str| {
        let t = Instant::now();
        for _ in 0..50 {
            let r = smol::block_on(c.request("GET", path, None, "application/json")).unwrap();
            assert_eq!(r.status, 200);
        }
        t.elapsed() / 50
    };
    let proxied = per_request(&format!("{BASE}/namespaces/default/widgets"));
    let local = per_request("/api/v1/namespaces/default/configmaps");
    eprintln!("per request: proxied {proxied:?}, local {local:?}");

    // A watch streams through: the first event arrives before the backend's second.
    let client = s.client();
    let t0 = Instant::now();
    let times: Vec<(String, Duration)> = smol::block_on(async {
        use futures_lite::StreamExt as _;
        let mut events = client
            .stream_lines(
                &format!("{BASE}/namespaces/default/widgets?watch=true"),
                "application/json",
            )
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(e) = events.next().await {
            let e = e.unwrap();
            out.push((
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                t0.elapsed(),
            ));
        }
        out
    });
    assert_eq!(
        times.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
        ["w1", "w2"]
    );
    assert!(
        times[0].1 + Duration::from_millis(1000) < times[1].1,
        "the first event came at once: {times:?}"
    );

    // The Python client reads and creates APIServices.
    let script = r#"
import json
from kubernetes import client, config
config.load_kube_config()
api = client.ApiregistrationV1Api()
names = [s.metadata.name for s in api.list_api_service().items]
assert "v1.apps" in names and "v1beta1.metrics.example.com" in names, names
body = client.V1APIService(
    metadata=client.V1ObjectMeta(name="v1alpha1.metrics.example.com"),
    spec=client.V1APIServiceSpec(
        group="metrics.example.com", version="v1alpha1", group_priority_minimum=1500,
        version_priority=5, insecure_skip_tls_verify=True,
        service=client.ApiregistrationV1ServiceReference(namespace="ext", name="api")))
created = api.create_api_service(body)
got = api.read_api_service("v1beta1.metrics.example.com")
cond = [c for c in got.status.conditions if c.type == "Available"][0]
print(json.dumps({"port": created.spec.service.port, "insecure": created.spec.insecure_skip_tls_verify,
                  "available": cond.status, "reason": cond.reason,
                  "local": api.read_api_service("v1.apps").spec.service is None}))
"#;
    let out = std::process::Command::new("/root/.cache/skiff/pyenv/bin/python")
        .args(["-c", script])
        .env("KUBECONFIG", s.kubeconfig())
        .output()
        .expect("the test venv's python (scripts/setup.sh --python)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        py,
        json!({"port": 443, "insecure": true, "available": "True", "reason": "Passed", "local": true})
    );
    // The backend's v1alpha1 lists nothing (404): never available.
    let v = eventually(20, "v1alpha1 checked", || {
        let v = api_service(&s, "v1alpha1.metrics.example.com");
        (available(&v).0 == "False").then_some(v)
    });
    let (_, reason, message) = available(&v);
    assert_eq!(reason, "FailedDiscoveryCheck");
    let url = format!(
        "https://127.0.0.1:{}/apis/metrics.example.com/v1alpha1",
        ext.port
    );
    assert_eq!(
        message,
        format!("failing or missing response from {url}: bad status from {url}: 404")
    );
    let body = eventually(10, "503 for the unavailable version", || {
        let (code, _, body) = raw(
            &s,
            "GET",
            "/apis/metrics.example.com/v1alpha1/widgets",
            &[],
            &[],
        );
        (code == 503).then_some(body)
    });
    assert_eq!(body, b"service unavailable\n");
    // Both versions in the group's discovery, by their priorities.
    let (_, g) = s.http("GET", "/apis/metrics.example.com", None);
    let versions: Vec<&str> = g["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v1beta1", "v1alpha1"]);
    let (code, _) = s.http(
        "DELETE",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.metrics.example.com",
        None,
    );
    assert_eq!(code, 200);

    // The backend stops: the next check fails (an Endpoints change asks for one now), and
    // requests answer 503 as kube-aggregator's proxy does.
    ext.stop.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    let (code, _) = s.http(
        "PATCH",
        "/api/v1/namespaces/ext/endpoints/api",
        Some((
            "application/merge-patch+json",
            br#"{"metadata":{"annotations":{"poke":"1"}}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200);
    let v = eventually(20, "the APIService turns unavailable", || {
        let v = api_service(&s, "v1beta1.metrics.example.com");
        (available(&v).0 == "False").then_some(v)
    });
    let (_, reason, message) = available(&v);
    assert_eq!(reason, "FailedDiscoveryCheck");
    let url = format!("https://127.0.0.1:{}{BASE}", ext.port);
    assert_eq!(
        message,
        format!(
            "failing or missing response from {url}: Get \"{url}\": dial tcp 127.0.0.1:{}: connect: connection refused",
            ext.port
        )
    );
    let (code, headers, body) = eventually(10, "503 from the proxy", || {
        let r = raw(
            &s,
            "GET",
            &format!("{BASE}/namespaces/default/widgets"),
            &[],
            &[],
        );
        (r.0 == 503).then_some(r)
    });
    assert_eq!(code, 503);
    assert_eq!(body, b"service unavailable\n");
    assert!(headers
        .iter()
        .any(|(k, v)| k == "content-type" && v == "text/plain; charset=utf-8"));
    let (ok, _, err) = kubectl(&s, &["get", "widgets", "-n", "default"]);
    assert!(!ok);
    assert!(
        err.contains("the server is currently unable to handle the request"),
        "{err}"
    );
    let (_, out, _) = kubectl(&s, &["get", "apiservice", "v1beta1.metrics.example.com"]);
    assert!(out.contains("False (FailedDiscoveryCheck)"), "{out}");
    // Discovery keeps the version, Stale and without resources.
    let item = eventually(20, "the version is stale", || {
        let (_, _, body) = raw(&s, "GET", "/apis", &[("Accept", AGGREGATED)], &[]);
        let doc: Value = serde_json::from_slice(&body).unwrap();
        doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == GROUP && i["versions"][0]["freshness"] == "Stale")
            .cloned()
    });
    assert_eq!(
        item["versions"],
        json!([{"version": "v1beta1", "freshness": "Stale"}])
    );

    // Its Endpoints gone, then its Service: kube-aggregator's reasons and messages.
    let (code, _) = s.http("DELETE", "/api/v1/namespaces/ext/endpoints/api", None);
    assert_eq!(code, 200);
    let v = eventually(20, "EndpointsNotFound", || {
        let v = api_service(&s, "v1beta1.metrics.example.com");
        (available(&v).1 == "EndpointsNotFound").then_some(v)
    });
    assert_eq!(
        available(&v).2,
        r#"cannot find endpoints for service/api in "ext""#
    );
    let (code, _) = s.http("DELETE", "/api/v1/namespaces/ext/services/api", None);
    assert_eq!(code, 200);
    let v = eventually(20, "ServiceNotFound", || {
        let v = api_service(&s, "v1beta1.metrics.example.com");
        (available(&v).1 == "ServiceNotFound").then_some(v)
    });
    assert_eq!(available(&v).2, r#"service/api in "ext" is not present"#);
    eprintln!("available after {became:?}");
}

#[test]
fn custom_resource_definitions_get_local_apiservices() {
    let s = TestServer::start();
    let (ok, out) = apply(
        &s,
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: crontabs.stable.example.com}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
  - {name: v1beta1, served: true, storage: false, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
  - {name: v1alpha1, served: false, storage: false, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
"#,
    );
    assert!(ok, "{out}");
    let v = eventually(20, "the CRD's APIServices", || {
        let (code, v) = s.http(
            "GET",
            "/apis/apiregistration.k8s.io/v1/apiservices?labelSelector=kube-aggregator.kubernetes.io%2Fautomanaged%3Dtrue",
            None,
        );
        (code == 200 && v["items"].as_array().is_some_and(|i| i.len() == 2)).then_some(v)
    });
    let mut names: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["v1.stable.example.com", "v1beta1.stable.example.com"]
    );
    let item = &v["items"][0];
    assert_eq!(
        (
            &item["spec"]["groupPriorityMinimum"],
            &item["spec"]["versionPriority"]
        ),
        (&json!(1000), &json!(100))
    );
    assert_eq!(available(item).1, "Local");

    // A version no longer served loses its APIService; the definition gone, all go.
    let (code, v) = s.http(
        "PATCH",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.stable.example.com",
        Some((
            "application/json-patch+json",
            br#"[{"op":"replace","path":"/spec/versions/1/served","value":false}]"#.to_vec(),
        )),
    );
    assert_eq!(code, 200, "{v}");
    eventually(20, "v1beta1's APIService deleted", || {
        let (code, _) = s.http(
            "GET",
            "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.stable.example.com",
            None,
        );
        (code == 404).then_some(())
    });
    let (ok, _, err) = kubectl(&s, &["delete", "crd", "crontabs.stable.example.com"]);
    assert!(ok, "{err}");
    eventually(20, "v1's APIService deleted", || {
        let (code, _) = s.http(
            "GET",
            "/apis/apiregistration.k8s.io/v1/apiservices/v1.stable.example.com",
            None,
        );
        (code == 404).then_some(())
    });

    // Built-in ones are synced once per start: an edited one is set back and a deleted one
    // comes back at the next start, not before; one given a service (an extension server
    // taking over the server's own resource metrics) keeps it.
    let merge = |path: &str, patch: &str| {
        let (code, v) = s.http(
            "PATCH",
            &format!("/apis/apiregistration.k8s.io/v1/apiservices/{path}"),
            Some(("application/merge-patch+json", patch.as_bytes().to_vec())),
        );
        assert_eq!(code, 200, "{v}");
    };
    merge("v1.apps", r#"{"spec":{"versionPriority":99}}"#);
    merge(
        "v1beta1.metrics.k8s.io",
        r#"{"spec":{"service":{"namespace":"kube-system","name":"metrics-server"},"insecureSkipTLSVerify":true}}"#,
    );
    let (code, _) = s.http(
        "DELETE",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.batch",
        None,
    );
    assert_eq!(code, 200);
    std::thread::sleep(Duration::from_secs(2));
    let (code, _) = s.http(
        "GET",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.batch",
        None,
    );
    assert_eq!(code, 404, "not recreated before the next start");
    assert_eq!(api_service(&s, "v1.apps")["spec"]["versionPriority"], 99);
    let mut s = s;
    s.kill_and_restart();
    eventually(20, "the built-in APIServices synced again", || {
        let (code, _) = s.http(
            "GET",
            "/apis/apiregistration.k8s.io/v1/apiservices/v1.batch",
            None,
        );
        (code == 200 && api_service(&s, "v1.apps")["spec"]["versionPriority"] == 15).then_some(())
    });
    let metrics = api_service(&s, "v1beta1.metrics.k8s.io");
    assert_eq!(metrics["spec"]["service"]["name"], "metrics-server");
    let v = eventually(20, "metrics-server is not there", || {
        let v = api_service(&s, "v1beta1.metrics.k8s.io");
        (available(&v).1 == "ServiceNotFound").then_some(v)
    });
    assert_eq!(
        available(&v).2,
        r#"service/metrics-server in "kube-system" is not present"#
    );

    // Local APIServices may not carry TLS settings (kube-aggregator's messages).
    let (code, v) = s.json(
        "POST",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        &json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": "v2.example.com"},
                "spec": {"group": "example.com", "version": "v2", "groupPriorityMinimum": 30000,
                         "versionPriority": 1, "insecureSkipTLSVerify": true}}),
    );
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        r#"APIService.apiregistration.k8s.io "v2.example.com" is invalid: [spec.groupPriorityMinimum: Invalid value: 30000: must be positive and less than 20000, spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify]"#
    );
}

/// The horizontal pod autoscaler reads a custom metric through an aggregated
/// `custom.metrics.k8s.io` (issue 33 part 5): a Pods metric (each pod's
/// `requests_per_second`) and an Object metric (a Deployment's `queue_depth`) served by the
/// extension server behind an APIService, asked for as kube-controller-manager's autoscaler
/// asks (its service account in the front-proxy headers, the target's selector in the
/// query); the Deployments scale to kube's arithmetic, the statuses and kubectl show the
/// values, and a metric the adapter stops returning stops the scaling with kube's words.
#[test]
fn the_autoscaler_scales_on_custom_metrics_through_an_apiservice() {
    let s = TestServer::start_with(&["--horizontal-pod-autoscaler-sync-period", "1s"]);
    let cm = eventually(20, "the front-proxy trust", || {
        let (code, cm) = s.http(
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
            None,
        );
        (code == 200).then_some(cm)
    });
    let ext = extension_behind_a_service(&s, &cm["data"]);
    let (ok, out) = apply(
        &s,
        &format!(
            r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta2.custom.metrics.k8s.io}}
spec:
  group: custom.metrics.k8s.io
  version: v1beta2
  groupPriorityMinimum: 100
  versionPriority: 200
  service: {{namespace: ext, name: api}}
  caBundle: {}
"#,
            ext.ca_bundle()
        ),
    );
    assert!(ok, "{out}");
    eventually(20, "the custom metrics APIService is available", || {
        let v = api_service(&s, "v1beta2.custom.metrics.k8s.io");
        (available(&v).0 == "True").then_some(())
    });

    // Two Deployments (no agent here: their pods stay unscheduled); web's two pods are
    // marked Running and Ready, as a node would report them.
    let deployment = |name: &str, replicas: i32| {
        format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, image: busybox}}]}}
"#
        )
    };
    for (name, replicas) in [("web", 2), ("worker", 1)] {
        let (ok, out) = apply(&s, &deployment(name, replicas));
        assert!(ok, "{out}");
    }
    let names = eventually(20, "web's two pods", || {
        let (code, v) = s.http(
            "GET",
            "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb",
            None,
        );
        let names: Vec<String> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        (code == 200 && names.len() == 2).then_some(names)
    });
    for name in &names {
        let (code, v) = s.http(
            "PATCH",
            &format!("/api/v1/namespaces/default/pods/{name}/status"),
            Some((
                "application/merge-patch+json",
                serde_json::to_vec(&json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}}))
                .unwrap(),
            )),
        );
        assert_eq!(code, 200, "{v}");
    }
    {
        let mut m = ext.metrics.lock().unwrap();
        m.pods = names.clone();
        m.per_pod = "25".into();
        m.queue_depth = "30".into();
    }

    let (ok, out) = apply(
        &s,
        r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: Pods
    pods:
      metric: {name: requests_per_second}
      target: {type: AverageValue, averageValue: "10"}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: worker, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: worker}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: Object
    object:
      metric: {name: queue_depth}
      describedObject: {apiVersion: apps/v1, kind: Deployment, name: worker}
      target: {type: AverageValue, averageValue: "10"}
"#,
    );
    assert!(ok, "{out}");
    let replicas = |name: &str| {
        let (_, v) = s.http(
            "GET",
            &format!("/apis/apps/v1/namespaces/default/deployments/{name}"),
            None,
        );
        v["spec"]["replicas"].as_i64().unwrap_or(-1)
    };
    // 25 per pod against 10: ceil(2.5 x 2 ready pods) = 5. 30 on the worker Deployment
    // against 10 per replica: 3.
    eventually(40, "web scaled to 5", || {
        (replicas("web") == 5).then_some(())
    });
    eventually(40, "worker scaled to 3", || {
        (replicas("worker") == 3).then_some(())
    });

    let hpa = |name: &str| {
        let (code, v) = s.http(
            "GET",
            &format!("/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/{name}"),
            None,
        );
        assert_eq!(code, 200, "{v}");
        v
    };
    let condition = |v: &Value, type_: &str| {
        let c = v["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == type_)
            .cloned()
            .unwrap_or(Value::Null);
        let t = |k: &str| c[k].as_str().unwrap_or("").to_string();
        (t("status"), t("reason"), t("message"))
    };
    let web = eventually(20, "web's status", || {
        let v = hpa("web");
        (v["status"]["currentMetrics"][0]["type"] == "Pods").then_some(v)
    });
    assert_eq!(
        web["status"]["currentMetrics"],
        json!([{"type": "Pods", "pods": {"metric": {"name": "requests_per_second"},
                                          "current": {"averageValue": "25"}}}])
    );
    assert_eq!(
        condition(&web, "ScalingActive"),
        (
            "True".into(),
            "ValidMetricFound".into(),
            "the HPA was able to successfully calculate a replica count from pods metric requests_per_second".into()
        )
    );
    let worker = eventually(20, "worker's status", || {
        let v = hpa("worker");
        (v["status"]["currentMetrics"][0]["type"] == "Object").then_some(v)
    });
    assert_eq!(
        worker["status"]["currentMetrics"][0]["object"]["describedObject"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"})
    );
    assert_eq!(
        condition(&worker, "ScalingActive").2,
        "the HPA was able to successfully calculate a replica count from Deployment metric queue_depth"
    );
    let (ok, out, err) = kubectl(&s, &["get", "hpa", "web", "worker"]);
    assert!(ok, "{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {out}"))
            .to_string()
    };
    assert!(line("web ").contains("25/10"), "{out}");
    assert!(line("worker ").contains("/10 (avg)"), "{out}");
    let (ok, out, err) = kubectl(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=web,reason=SuccessfulRescale",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("New size: 5; reason: pods metric requests_per_second above target"),
        "{out}"
    );

    // The adapter was asked as kube's autoscaler asks.
    let asked = ext.seen(&format!("{CUSTOM_METRICS}/namespaces/default/pods/"));
    let first = asked.first().expect("the autoscaler's requests");
    assert_eq!(
        first.path,
        format!("{CUSTOM_METRICS}/namespaces/default/pods/%2A/requests_per_second?labelSelector=app%3Dweb")
    );
    assert_eq!(first.client, "front-proxy-client");
    assert_eq!(
        first.one("X-Remote-User"),
        Some("system:serviceaccount:kube-system:horizontal-pod-autoscaler")
    );
    assert!(!ext
        .seen(&format!(
            "{CUSTOM_METRICS}/namespaces/default/deployments/worker/queue_depth"
        ))
        .is_empty());

    // No values any more: scaling stops with kube's reason and words.
    ext.metrics.lock().unwrap().pods.clear();
    let web = eventually(20, "web's metric missing", || {
        let v = hpa("web");
        (condition(&v, "ScalingActive").0 == "False").then_some(v)
    });
    assert_eq!(
        condition(&web, "ScalingActive"),
        (
            "False".into(),
            "FailedGetPodsMetric".into(),
            "the HPA was unable to compute the replica count: unable to get metric requests_per_second: no metrics returned from custom metrics API".into()
        )
    );
    assert_eq!(replicas("web"), 5);
}

/// The agents' tunnel endpoint is for nodes only: an admin (or any other user) asking for
/// it is refused before anything is upgraded.
#[test]
fn only_nodes_may_open_a_tunnel() {
    let s = TestServer::start();
    let (code, _, body) = raw(
        &s,
        "GET",
        "/skiff/v1/tunnel",
        &[("Connection", "Upgrade"), ("Upgrade", "skiff-tunnel/1")],
        &[],
    );
    assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
    assert!(
        String::from_utf8_lossy(&body).contains("only nodes may"),
        "{}",
        String::from_utf8_lossy(&body)
    );
}
