//! The HTTPS client against a small real TLS server on 127.0.0.1.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::client::{Client, ClientConfig, ClientError, WatchEvent, ACCEPT_JSON};
use api::core::ConfigMap;
use api::meta::DeleteOptions;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use futures_lite::StreamExt;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use smol::net::{TcpListener, TcpStream};

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn make_ca(name: &str) -> Ca {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

fn server_tls(ca: &Ca) -> Arc<rustls::ServerConfig> {
    let params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

struct TestServer {
    url: String,
    connections: Arc<AtomicUsize>,
    /// Lets the watch handler send its second event.
    release: smol::channel::Sender<()>,
    /// The accept loop: dropped, the server takes no more connections.
    accepting: Option<smol::Task<()>>,
}

impl TestServer {
    /// Stops accepting connections (those open go on).
    fn stop(&mut self) {
        self.accepting = None;
    }
}

fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

async fn handle(
    stream: TcpStream,
    acceptor: futures_rustls::TlsAcceptor,
    release: smol::channel::Receiver<()>,
) -> std::io::Result<()> {
    let tls = acceptor.accept(stream).await?;
    let mut conn = BufReader::new(tls);
    loop {
        let mut request_line = String::new();
        if conn.read_line(&mut request_line).await? == 0 {
            return Ok(());
        }
        let mut content_length = 0usize;
        let mut authorization = String::new();
        loop {
            let mut h = String::new();
            conn.read_line(&mut h).await?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (n, v) = h.split_once(':').unwrap();
            match n.to_ascii_lowercase().as_str() {
                "content-length" => content_length = v.trim().parse().unwrap(),
                "authorization" => authorization = v.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0u8; content_length];
        conn.read_exact(&mut body).await?;
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let out = conn.get_mut();
        if authorization != "Bearer secret" {
            let b = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;
            let resp = format!(
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            );
            out.write_all(resp.as_bytes()).await?;
            continue;
        }
        match (method.as_str(), target.as_str()) {
            ("GET", "/api/v1/namespaces/default/configmaps/a") => {
                let b = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"default","resourceVersion":"3"},"data":{"k":"v"}}"#;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                    b.len()
                );
                out.write_all(resp.as_bytes()).await?;
            }
            ("GET", "/api/v1/namespaces/default/configmaps?labelSelector=app%3Dweb") => {
                // Chunked, split in the middle of the JSON.
                let b = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a","namespace":"default"}},{"metadata":{"name":"b","namespace":"default"}}]}"#;
                let (x, y) = b.split_at(40);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{}{}0\r\n\r\n",
                    chunk(x),
                    chunk(y)
                );
                out.write_all(resp.as_bytes()).await?;
            }
            ("GET", t) if t.starts_with("/api/v1/namespaces/default/configmaps?") => {
                assert!(t.contains("watch=true"), "{t}");
                assert!(t.contains("resourceVersion=7"), "{t}");
                assert!(t.contains("timeoutSeconds=5"), "{t}");
                out.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                )
                .await?;
                let e1 = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"c\",\"resourceVersion\":\"8\"}}}\n";
                out.write_all(chunk(e1).as_bytes()).await?;
                out.flush().await?;
                // The second event is sent only after the client has seen the first.
                release.recv().await.ok();
                let e2 = "{\"type\":\"DELETED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"c\",\"resourceVersion\":\"9\"}}}\n";
                // Split one event over two chunks.
                let (x, y) = e2.split_at(20);
                out.write_all(chunk(x).as_bytes()).await?;
                out.write_all(chunk(y).as_bytes()).await?;
                out.write_all(b"0\r\n\r\n").await?;
            }
            ("GET", "/close-after") => {
                // Answers as if the connection stayed open, then closes it (an idle timeout).
                out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await?;
                out.flush().await?;
                out.close().await?;
                return Ok(());
            }
            ("DELETE", "/api/v1/namespaces/default/configmaps/a") => {
                let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(sent, serde_json::json!({"propagationPolicy": "Background"}));
                let b = r#"{"kind":"Status","apiVersion":"v1","status":"Success","code":200}"#;
                let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{b}", b.len());
                out.write_all(resp.as_bytes()).await?;
            }
            ("POST", "/api/v1/namespaces/default/configmaps") => {
                // Echo the body back.
                let resp = format!(
                    "HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                out.write_all(resp.as_bytes()).await?;
                out.write_all(&body).await?;
            }
            _ => {
                let b = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#;
                let resp = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                    b.len()
                );
                out.write_all(resp.as_bytes()).await?;
            }
        }
        out.flush().await?;
    }
}

async fn start_server(ca: &Ca) -> TestServer {
    start_server_at(ca, 0).await
}

/// A server on `port` (0: any free one).
async fn start_server_at(ca: &Ca, port: u16) -> TestServer {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = futures_rustls::TlsAcceptor::from(server_tls(ca));
    let connections = Arc::new(AtomicUsize::new(0));
    let (release, release_rx) = smol::channel::unbounded();
    let counter = connections.clone();
    let accepting = smol::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let release_rx = release_rx.clone();
            smol::spawn(async move {
                let _ = handle(stream, acceptor, release_rx).await;
            })
            .detach();
        }
    });
    TestServer {
        url: format!("https://127.0.0.1:{port}"),
        connections,
        release,
        accepting: Some(accepting),
    }
}

fn client(server: &TestServer, ca_pem: &str, token: &str) -> Client {
    Client::new(ClientConfig {
        server: server.url.clone(),
        ca_pem: Some(ca_pem.to_string()),
        token: Some(token.to_string()),
        ..Default::default()
    })
    .unwrap()
}

fn with_timeout<T>(f: impl std::future::Future<Output = T>) -> T {
    smol::block_on(smol::future::or(f, async {
        smol::Timer::after(Duration::from_secs(20)).await;
        panic!("the test timed out")
    }))
}

#[test]
fn content_length_and_chunked_bodies_over_one_kept_alive_connection() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let server = start_server(&ca).await;
        let c = client(&server, &ca.pem, "secret");

        let cm: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!(cm.metadata.name, "a");
        assert_eq!(cm.metadata.resource_version, "3");
        assert_eq!(c.idle_connections(), 1);

        let (items, rv) = c
            .list::<ConfigMap>(Some("default"), Some("app=web"), None)
            .await
            .unwrap();
        assert_eq!(rv, "7");
        let names: Vec<_> = items.iter().map(|i| i.metadata.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);

        let r = c
            .request(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                Some(("application/json", b"{\"x\":1}".to_vec())),
                ACCEPT_JSON,
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.body, b"{\"x\":1}");
        assert_eq!(r.header("Content-Length"), Some("7"));

        let gone = c
            .delete::<ConfigMap>(
                "default",
                "a",
                &DeleteOptions {
                    propagation_policy: Some("Background".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(gone, None);

        assert_eq!(
            server.connections.load(Ordering::SeqCst),
            1,
            "keep-alive reuse"
        );
    });
}

#[test]
fn error_answers_decode_the_status() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let server = start_server(&ca).await;
        let c = client(&server, &ca.pem, "secret");
        let e = c.get::<ConfigMap>("default", "missing").await.unwrap_err();
        assert_eq!(e.to_string(), "pods \"x\" not found");
        match &e {
            ClientError::Api(s) => {
                assert_eq!(s.code, 404);
                assert_eq!(s.reason, "NotFound");
            }
            other => panic!("expected an API error, got {other:?}"),
        }
        let bad = client(&server, &ca.pem, "wrong");
        let e = bad.get::<ConfigMap>("default", "a").await.unwrap_err();
        assert_eq!(e.code(), Some(401));
        assert_eq!(e.to_string(), "Unauthorized");
    });
}

#[test]
fn watch_events_arrive_before_the_response_ends() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let server = start_server(&ca).await;
        let c = client(&server, &ca.pem, "secret");
        let mut w = c
            .watch::<ConfigMap>(
                Some("default"),
                "7",
                None,
                None,
                Some(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        // The server holds the second event until it is released, so the first one must
        // be delivered while the response is still open.
        let first = w.next().await.unwrap().unwrap();
        match &first {
            WatchEvent::Added(cm) => assert_eq!(cm.metadata.name, "c"),
            other => panic!("expected ADDED, got {other:?}"),
        }
        server.release.send(()).await.unwrap();
        let second = w.next().await.unwrap().unwrap();
        assert_eq!(second.type_name(), "DELETED");
        assert_eq!(second.object().unwrap().metadata.resource_version, "9");
        assert!(w.next().await.is_none());
        // The watch was read to its end, so its connection is reusable.
        assert_eq!(c.idle_connections(), 1);
    });
}

#[test]
fn a_server_not_signed_by_the_trusted_ca_is_refused() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let other = make_ca("other-ca");
        let server = start_server(&ca).await;
        let c = client(&server, &other.pem, "secret");
        let e = c.get::<ConfigMap>("default", "a").await.unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e:?}");
        assert!(e.to_string().contains("certificate"), "{e}");
    });
}

#[test]
fn a_client_without_a_ca_is_refused_at_construction() {
    let e = Client::new(ClientConfig {
        server: "https://127.0.0.1:1".into(),
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("no certificate authority"), "{e}");
}

#[test]
fn a_pooled_connection_the_server_closed_is_replaced() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let server = start_server(&ca).await;
        let c = client(&server, &ca.pem, "secret");
        let r = c
            .request("GET", "/close-after", None, ACCEPT_JSON)
            .await
            .unwrap();
        assert_eq!(r.body, b"ok");
        assert_eq!(c.idle_connections(), 1, "the answer looked reusable");
        // Let the close reach the client before the pooled connection is reused.
        smol::Timer::after(Duration::from_millis(50)).await;
        let cm: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!(cm.metadata.name, "a");
        assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_client_fails_over_to_the_next_server_that_can_be_reached_and_back() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let mut first = start_server(&ca).await;
        let mut second = start_server(&ca).await;
        let c = Client::new(ClientConfig {
            server: first.url.clone(),
            failover_servers: vec![second.url.clone()],
            ca_pem: Some(ca.pem.clone()),
            token: Some("secret".into()),
            ..Default::default()
        })
        .unwrap();
        let count = |s: &TestServer| s.connections.load(Ordering::SeqCst);

        // The first server while it answers; an error answer is its answer, not a reason
        // to ask the next one.
        let cm: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!(cm.metadata.name, "a");
        let e = c.get::<ConfigMap>("default", "x").await.unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        assert_eq!((count(&first), count(&second)), (1, 0));
        assert_eq!(c.server(), first.url);

        // The first goes away (its connections with it): the second, and it stays in use.
        let port: u16 = first.url.rsplit(':').next().unwrap().parse().unwrap();
        first.stop();
        c.close_idle_connections();
        let cm: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!(cm.metadata.name, "a");
        assert_eq!(c.server(), second.url);
        let _: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!((count(&first), count(&second)), (1, 1));

        // The first is back and the second goes: back to the first.
        let back = start_server_at(&ca, port).await;
        second.stop();
        c.close_idle_connections();
        let _: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!(c.server(), back.url);
        assert_eq!(count(&back), 1);

        // Both gone: the error names the last one tried.
        drop(back);
        c.close_idle_connections();
        let e = c.get::<ConfigMap>("default", "a").await.unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e:?}");
    });
}

#[test]
fn a_server_that_fails_tls_is_passed_over() {
    with_timeout(async {
        let ca = make_ca("test-ca");
        let other = make_ca("other-ca");
        let impostor = start_server(&other).await;
        let good = start_server(&ca).await;
        let c = Client::new(ClientConfig {
            server: impostor.url.clone(),
            failover_servers: vec![good.url.clone()],
            ca_pem: Some(ca.pem.clone()),
            token: Some("secret".into()),
            ..Default::default()
        })
        .unwrap();
        let cm: ConfigMap = c.get("default", "a").await.unwrap();
        assert_eq!(cm.metadata.name, "a");
        assert_eq!(c.server(), good.url);
    });
}
