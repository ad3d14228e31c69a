//! The server PKI on disk, and a real TLS handshake with it: the admin kubeconfig's client
//! and a node's client certificate against `Pki::server_config`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use api::client::{Client, ClientConfig, ACCEPT_JSON};
use api::kubeconfig::Kubeconfig;
use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use rcgen::{CertificateParams, DnType, Issuer, KeyPair};
use skiff_control::auth::Authenticator;
use skiff_control::pki::Pki;
use smol::net::TcpListener;

const URL: &str = "https://127.0.0.1:6443";

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn first_start_creates_everything_with_private_modes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let pki = Pki::load_or_create(&data, &[], URL).unwrap();
    for f in [
        "pki/ca.key",
        "pki/server.key",
        "admin-token",
        "admin.kubeconfig",
    ] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("pki")), 0o700);
    assert!(data.join("pki/ca.crt").is_file());
    assert!(data.join("pki/server.crt").is_file());

    let token = pki.admin_token();
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(read(&data.join("admin-token")).trim(), token);
    assert_eq!(pki.ca_hash().len(), 64);

    let kc = Kubeconfig::load(&data.join("admin.kubeconfig")).unwrap();
    assert_eq!(kc.current_context, "skiff");
    let r = kc.resolve(None).unwrap();
    assert_eq!(r.server, URL);
    assert_eq!(r.token.as_deref(), Some(token));
    assert_eq!(r.ca_pem.as_deref(), Some(pki.ca_pem()));
    assert_eq!(kc.users[0].name, "admin");
    assert_eq!(kc.clusters[0].name, "skiff");
}

#[test]
fn later_starts_reuse_and_san_changes_renew_only_the_serving_cert() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let first = Pki::load_or_create(data, &[], URL).unwrap();
    let server_crt = read(&data.join("pki/server.crt"));
    let server_key = read(&data.join("pki/server.key"));

    let second = Pki::load_or_create(data, &[], URL).unwrap();
    assert_eq!(second.ca_pem(), first.ca_pem());
    assert_eq!(second.admin_token(), first.admin_token());
    assert_eq!(read(&data.join("pki/server.crt")), server_crt);
    assert_eq!(read(&data.join("pki/server.key")), server_key);

    let third =
        Pki::load_or_create(data, &["edge.example".into(), "10.1.2.3".into()], URL).unwrap();
    assert_eq!(third.ca_pem(), first.ca_pem());
    assert_eq!(third.admin_token(), first.admin_token());
    assert_ne!(read(&data.join("pki/server.crt")), server_crt);

    // Same extra names again: reused.
    let renewed = read(&data.join("pki/server.crt"));
    Pki::load_or_create(data, &["10.1.2.3".into(), "EDGE.example".into()], URL).unwrap();
    assert_eq!(read(&data.join("pki/server.crt")), renewed);

    // A new URL rewrites the kubeconfig with the same token.
    let other = Pki::load_or_create(
        data,
        &["10.1.2.3".into(), "edge.example".into()],
        "https://127.0.0.1:7443",
    )
    .unwrap();
    let kc = Kubeconfig::load(&data.join("admin.kubeconfig")).unwrap();
    assert_eq!(kc.resolve(None).unwrap().server, "https://127.0.0.1:7443");
    assert_eq!(other.admin_token(), first.admin_token());
}

#[test]
fn an_expired_serving_cert_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let pki = Pki::load_or_create(data, &[], URL).unwrap();
    let ca_key = KeyPair::from_pem(&read(&data.join("pki/ca.key"))).unwrap();
    let issuer = Issuer::from_ca_cert_pem(pki.ca_pem(), ca_key).unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    let key = KeyPair::generate().unwrap();
    let expired = params.signed_by(&key, &issuer).unwrap().pem();
    std::fs::write(data.join("pki/server.crt"), &expired).unwrap();
    std::fs::write(data.join("pki/server.key"), key.serialize_pem()).unwrap();

    Pki::load_or_create(data, &[], URL).unwrap();
    assert_ne!(read(&data.join("pki/server.crt")), expired);
}

#[test]
fn a_lone_ca_file_is_an_error_not_a_new_ca() {
    let dir = tempfile::tempdir().unwrap();
    Pki::load_or_create(dir.path(), &[], URL).unwrap();
    std::fs::remove_file(dir.path().join("pki/ca.key")).unwrap();
    let e = Pki::load_or_create(dir.path(), &[], URL).unwrap_err();
    assert!(e.to_string().contains("only one of"), "{e}");
}

/// Serves one request per connection: answers with who the caller is.
async fn serve(listener: TcpListener, pki: &Pki) {
    let acceptor = futures_rustls::TlsAcceptor::from(pki.server_config().unwrap());
    let auth = Authenticator::new(pki).unwrap();
    loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let Ok(tls) = acceptor.accept(tcp).await else {
            continue;
        };
        let alpn = tls.get_ref().1.alpn_protocol().map(|p| p.to_vec());
        assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
        let certs = tls
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect::<Vec<_>>());
        let mut conn = BufReader::new(tls);
        let mut authorization = None;
        loop {
            let mut line = String::new();
            conn.read_line(&mut line).await.unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            // Header names are case-insensitive (the client sends them in lower case).
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("authorization") {
                    authorization = Some(value.trim().to_string());
                }
            }
        }
        let who = match auth.authenticate(authorization.as_deref(), certs.as_deref()) {
            Ok(u) if u.is_master() => "admin".to_string(),
            Ok(u) => match u.node_name() {
                Some(n) => format!("node {n}"),
                None => format!("user {}", u.name),
            },
            Err(e) => e.to_string(),
        };
        let resp = format!(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{who}",
            who.len()
        );
        conn.get_mut().write_all(resp.as_bytes()).await.unwrap();
        conn.get_mut().flush().await.unwrap();
    }
}

#[test]
fn the_admin_kubeconfig_and_a_node_certificate_authenticate_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    smol::block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let pki = Pki::load_or_create(dir.path(), &[], &url).unwrap();
        let server = smol::spawn({
            let pki = Pki::load_or_create(dir.path(), &[], &url).unwrap();
            async move { serve(listener, &pki).await }
        });

        let kc = Kubeconfig::load(pki.kubeconfig_path()).unwrap();
        let admin = Client::from_kubeconfig(&kc).unwrap();
        let r = admin.request("GET", "/", None, ACCEPT_JSON).await.unwrap();
        assert_eq!(String::from_utf8(r.body).unwrap(), "admin");

        // A node: key and CSR made on the node, certificate signed by the server.
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "pi-7");
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let cert = pki
            .sign_client_csr(
                &csr,
                "system:node:pi-7",
                "system:nodes",
                Duration::from_secs(600),
            )
            .unwrap();
        let node = Client::new(ClientConfig {
            server: url.clone(),
            ca_pem: Some(pki.ca_pem().to_string()),
            client_cert_pem: Some(cert),
            client_key_pem: Some(key.serialize_pem()),
            ..Default::default()
        })
        .unwrap();
        let r = node.request("GET", "/", None, ACCEPT_JSON).await.unwrap();
        assert_eq!(String::from_utf8(r.body).unwrap(), "node pi-7");

        let anonymous = Client::new(ClientConfig {
            server: url.clone(),
            ca_pem: Some(pki.ca_pem().to_string()),
            ..Default::default()
        })
        .unwrap();
        let r = anonymous
            .request("GET", "/", None, ACCEPT_JSON)
            .await
            .unwrap();
        assert_eq!(String::from_utf8(r.body).unwrap(), "Unauthorized");

        // The serving certificate names `localhost` too.
        let by_name = Client::new(ClientConfig {
            server: url.replace("127.0.0.1", "localhost"),
            ca_pem: Some(pki.ca_pem().to_string()),
            token: Some(pki.admin_token().to_string()),
            ..Default::default()
        })
        .unwrap();
        let r = by_name
            .request("GET", "/", None, ACCEPT_JSON)
            .await
            .unwrap();
        assert_eq!(String::from_utf8(r.body).unwrap(), "admin");
        drop(server);
    });
}
