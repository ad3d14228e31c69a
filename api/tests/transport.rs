//! The shared HTTP/1.1 transport against small plain-HTTP servers that answer with fixed
//! bytes: framing, keep-alive, early ends, timeouts and refused headers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::transport::{Options, Transport, TransportError, Url};
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use smol::net::{TcpListener, TcpStream};

fn no_tls() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    )
}

/// Reads one request (head and Content-Length body); None at a clean end.
async fn read_request(conn: &mut BufReader<TcpStream>) -> Option<(String, Vec<String>, Vec<u8>)> {
    let mut line = String::new();
    if conn.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut h = String::new();
        conn.read_line(&mut h).await.ok()?;
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        headers.push(h);
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).await.ok()?;
    Some((line.trim_end().to_string(), headers, body))
}

/// A server answering each request with `answer(request line, body)`; counts connections.
async fn serve(answer: fn(&str, &[u8]) -> Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    smol::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            smol::spawn(async move {
                let mut conn = BufReader::new(stream);
                while let Some((line, _, body)) = read_request(&mut conn).await {
                    let out = answer(&line, &body);
                    if out.is_empty() {
                        // Stall: never answer.
                        smol::Timer::after(Duration::from_secs(30)).await;
                        return;
                    }
                    if conn.get_mut().write_all(&out).await.is_err() {
                        return;
                    }
                    if line.contains("/close") {
                        return;
                    }
                }
            })
            .detach();
        }
    })
    .detach();
    (url, connections)
}

fn answer(line: &str, body: &[u8]) -> Vec<u8> {
    let path = line.split(' ').nth(1).unwrap_or("");
    match path {
        "/length" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
        "/chunked" => {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"
                .to_vec()
        }
        "/echo" => {
            let mut out = format!(
                "HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(body);
            out
        }
        "/head" => b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec(),
        "/short/close" => b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec(),
        "/unframed/close" => b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(),
        "/connection-close" => {
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok".to_vec()
        }
        "/stall" => Vec::new(),
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
    }
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    smol::block_on(smol::future::or(f, async {
        smol::Timer::after(Duration::from_secs(20)).await;
        panic!("the test timed out")
    }))
}

fn url(base: &str, path: &str) -> Url {
    Url::parse(&format!("{base}{path}")).unwrap()
}

#[test]
fn length_chunked_head_and_request_bodies_share_one_connection() {
    run(async {
        let (base, connections) = serve(answer).await;
        let t = Transport::new(no_tls(), Options::default());
        let mut r = t
            .send("GET", &url(&base, "/length"), &[], b"")
            .await
            .unwrap();
        assert_eq!((r.status, r.content_length()), (200, Some(5)));
        assert_eq!(r.bytes(100).await.unwrap(), b"hello");
        assert_eq!(t.idle_connections(), 1);
        let mut r = t
            .send("GET", &url(&base, "/chunked"), &[], b"")
            .await
            .unwrap();
        let mut got = Vec::new();
        while let Some(piece) = r.chunk().await.unwrap() {
            got.extend_from_slice(&piece);
        }
        assert_eq!(got, b"hello");
        assert_eq!(t.idle_connections(), 1);
        // A HEAD answer declares a length but carries no body: nothing is waited for.
        let r = t
            .send("HEAD", &url(&base, "/head"), &[], b"")
            .await
            .unwrap();
        assert_eq!(r.content_length(), Some(1000));
        drop(r);
        assert_eq!(t.idle_connections(), 1);
        let headers = [("Content-Type", "text/plain")];
        let mut r = t
            .send("POST", &url(&base, "/echo"), &headers, b"a body")
            .await
            .unwrap();
        assert_eq!(r.status, 201);
        let mut buf = [0u8; 3];
        let mut got = Vec::new();
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"a body");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_body_left_unread_or_marked_close_does_not_go_back_to_the_pool() {
    run(async {
        let (base, connections) = serve(answer).await;
        let t = Transport::new(no_tls(), Options::default());
        let r = t
            .send("GET", &url(&base, "/length"), &[], b"")
            .await
            .unwrap();
        drop(r);
        assert_eq!(t.idle_connections(), 0);
        let mut r = t
            .send("GET", &url(&base, "/connection-close"), &[], b"")
            .await
            .unwrap();
        assert_eq!(r.bytes(10).await.unwrap(), b"ok");
        assert_eq!(t.idle_connections(), 0);
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn bodies_that_end_early_or_have_no_framing_are_errors() {
    run(async {
        let (base, _) = serve(answer).await;
        let t = Transport::new(no_tls(), Options::default());
        let mut r = t
            .send("GET", &url(&base, "/short/close"), &[], b"")
            .await
            .unwrap();
        let e = r.bytes(100).await.unwrap_err();
        assert!(e.to_string().contains("ends early"), "{e}");
        let mut r = t
            .send("GET", &url(&base, "/unframed/close"), &[], b"")
            .await
            .unwrap();
        let e = r.bytes(100).await.unwrap_err();
        assert!(matches!(e, TransportError::Protocol(_)), "{e:?}");
        assert_eq!(t.idle_connections(), 0);
        // A body larger than the caller's limit is refused.
        let mut r = t
            .send("GET", &url(&base, "/length"), &[], b"")
            .await
            .unwrap();
        let e = r.bytes(4).await.unwrap_err();
        assert!(e.to_string().contains("larger than 4 bytes"), "{e}");
    });
}

#[test]
fn a_silent_server_times_out_and_a_closed_port_does_not_connect() {
    run(async {
        let (base, _) = serve(answer).await;
        let t = Transport::new(
            no_tls(),
            Options {
                read_timeout: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        );
        let e = t
            .send("GET", &url(&base, "/stall"), &[], b"")
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Timeout), "{e:?}");
        // A port nobody listens on.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let e = t
            .send(
                "GET",
                &url(&format!("http://127.0.0.1:{port}"), "/"),
                &[],
                b"",
            )
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Connect { .. }), "{e:?}");
    });
}

#[test]
fn header_injection_and_other_schemes_are_refused() {
    run(async {
        let (base, connections) = serve(answer).await;
        let t = Transport::new(no_tls(), Options::default());
        let e = t
            .send(
                "GET",
                &url(&base, "/length"),
                &[("X-A", "b\r\nX-B: c")],
                b"",
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("bad request header"), "{e}");
        let e = t
            .send("GET", &url("ftp://127.0.0.1", "/x"), &[], b"")
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Url(_)), "{e:?}");
        assert_eq!(connections.load(Ordering::SeqCst), 0);
    });
}
