//! A webhook for tests, as an extension author would run one: HTTPS on 127.0.0.1 with a
//! certificate from a CA of its own (the `caBundle` a configuration carries), good for the
//! names given (a Service's `<name>.<namespace>.svc`, `127.0.0.1`), answering each JSON POST
//! through a function of the test. Plain std threads and rustls: nothing of skiff's.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

/// What the webhook does with one request.
pub enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// This status code and a text body.
    Status(u16),
    /// Holds the request and never answers (until the connection is dropped).
    Hang,
}

pub struct WebhookServer {
    pub port: u16,
    /// The CA that signed the serving certificate (PEM).
    pub ca_pem: String,
    /// Requests answered so far.
    pub calls: Arc<AtomicUsize>,
}

impl WebhookServer {
    /// Serves on a free port; `handler` gets each request's path and JSON body.
    pub fn start(
        names: &[&str],
        handler: impl Fn(&str, Value) -> Reply + Send + Sync + 'static,
    ) -> WebhookServer {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "webhook-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::default();
        leaf.distinguished_name.push(DnType::CommonName, "webhook");
        leaf.subject_alt_names = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        let chain = vec![CertificateDer::from_pem_slice(cert.pem().as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let calls = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(handler);
        let counted = calls.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let config = config.clone();
                let handler = handler.clone();
                let calls = counted.clone();
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, tcp);
                    while let Some((path, body)) = read_request(&mut tls) {
                        let request = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let reply = handler(&path, request);
                        calls.fetch_add(1, Ordering::SeqCst);
                        let (code, ctype, body) = match reply {
                            Reply::Json(v) => {
                                (200, "application/json", serde_json::to_vec(&v).unwrap())
                            }
                            Reply::Status(code) => (code, "text/plain", b"failed\n".to_vec()),
                            Reply::Hang => {
                                std::thread::sleep(Duration::from_secs(120));
                                return;
                            }
                        };
                        let head = format!(
                            "HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        if tls.write_all(head.as_bytes()).is_err()
                            || tls.write_all(&body).is_err()
                            || tls.flush().is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        WebhookServer {
            port,
            ca_pem: ca_cert.pem(),
            calls,
        }
    }

    /// The CA as a configuration's `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// One HTTP/1.1 request: its path and body (by Content-Length); None at the end.
fn read_request(stream: &mut impl Read) -> Option<(String, Vec<u8>)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let path = line.split_whitespace().nth(1)?.to_string();
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
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((path, body))
}
