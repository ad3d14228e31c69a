//! `webhook`: an admission webhook for bench/admission.sh, as small and quick as a real one
//! written in Go: HTTPS (a certificate and key given as PEM files), a thread per connection,
//! keep-alive. `/mutate` answers a JSONPatch adding a label, `/validate` allows. It prints
//! its own figures when stdin closes or on SIGTERM-free exit: calls answered and the time
//! spent inside the webhook per call (reading the request to writing the answer).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

#[derive(Default)]
struct Figures {
    calls: AtomicU64,
    nanos: AtomicU64,
}

/// Serves on `port` until a line arrives on stdin (or stdin closes), then prints its figures.
pub fn serve(port: u16, cert: &Path, key: &Path) -> anyhow::Result<()> {
    let chain = CertificateDer::pem_file_iter(cert)
        .context("reading the certificate")?
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key).context("reading the key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?,
    );
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let figures = Arc::new(Figures::default());
    let f = figures.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let (config, figures) = (config.clone(), f.clone());
            std::thread::spawn(move || {
                let _ = tcp.set_nodelay(true);
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                serve_connection(&mut tls, &figures);
            });
        }
    });
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let calls = figures.calls.load(Ordering::Relaxed);
    let nanos = figures.nanos.load(Ordering::Relaxed);
    println!(
        "webhook: {calls} calls, {:.1} µs inside the webhook per call",
        if calls == 0 {
            0.0
        } else {
            nanos as f64 / calls as f64 / 1000.0
        }
    );
    Ok(())
}

fn serve_connection(stream: &mut (impl Read + Write), figures: &Figures) {
    let mut reader = BufReader::new(stream);
    loop {
        let Some((path, body)) = read_request(&mut reader) else {
            return;
        };
        let started = Instant::now();
        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let uid = review["request"]["uid"].clone();
        let response = if path.split('?').next() == Some("/mutate") {
            let patch = if review["request"]["object"]["metadata"]["labels"].is_object() {
                json!([{"op": "add", "path": "/metadata/labels/webhooked", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"webhooked": "yes"}}])
            };
            use base64::Engine as _;
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
        } else {
            json!({"uid": uid, "allowed": true})
        };
        let body = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response
        }))
        .unwrap_or_default();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let out = reader.get_mut();
        if out.write_all(head.as_bytes()).is_err()
            || out.write_all(&body).is_err()
            || out.flush().is_err()
        {
            return;
        }
        figures.calls.fetch_add(1, Ordering::Relaxed);
        figures
            .nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// One HTTP/1.1 request: its path and body (by Content-Length); None at the end.
fn read_request(reader: &mut impl BufRead) -> Option<(String, Vec<u8>)> {
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
