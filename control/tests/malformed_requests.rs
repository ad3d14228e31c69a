//! A real `skiff server --disable-agent` under a flood of malformed requests over TLS: deep
//! nesting, huge numbers, invalid UTF-8, truncated, oversized and wrongly framed bodies, bad
//! protobuf, YAML and patches, request heads that never end or arrive a byte at a time,
//! bodies that stop, and thousands of idle connections. Meanwhile a well-formed client keeps
//! getting answers; no answer is a 5xx; the server's resident memory stays under
//! [`RSS_BOUND_MIB`]; and the store's revision does not move (nothing malformed was stored).

mod common;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestServer;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// Malformed requests sent in all (the issue asks for at least 20,000).
const MALFORMED: usize = 20_400;
/// Threads sending them.
const SENDERS: usize = 4;
/// Connections opened and left idle: half never start TLS, half finish the handshake.
const IDLE_CONNECTIONS: usize = 3_000;
/// Connections that send their head a line a second (slowloris).
const SLOW_HEADS: usize = 40;
/// Connections whose body stops short of its Content-Length.
const STALLED_BODIES: usize = 20;
/// The server's resident memory must stay below this.
const RSS_BOUND_MIB: u64 = 256;
/// The server's limits this test checks (control/src/http/guard.rs), with slack for a loaded
/// machine.
const HEAD_TIMEOUT: Duration = Duration::from_secs(32);
const SLACK: Duration = Duration::from_secs(12);

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

struct Target {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    token: String,
}

impl Target {
    fn new(s: &TestServer) -> Target {
        let kc = api::kubeconfig::Kubeconfig::load(&s.kubeconfig()).expect("kubeconfig");
        let ctx = kc.resolve(None).expect("a context");
        let mut roots = rustls::RootCertStore::empty();
        let ca = ctx.ca_pem.expect("the cluster CA");
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots
                .add(cert.expect("a CA certificate"))
                .expect("CA added");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Target {
            addr: s.addr,
            tls: Arc::new(tls),
            token: ctx.token.expect("the admin token"),
        }
    }

    fn tcp(&self) -> io::Result<TcpStream> {
        let tcp = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))?;
        tcp.set_read_timeout(Some(Duration::from_secs(60)))?;
        tcp.set_nodelay(true)?;
        Ok(tcp)
    }

    /// A TLS connection with its handshake done.
    fn connect(&self) -> io::Result<Tls> {
        let name = ServerName::IpAddress(self.addr.ip().into());
        let conn =
            rustls::ClientConnection::new(self.tls.clone(), name).map_err(io::Error::other)?;
        let mut tls = rustls::StreamOwned::new(conn, self.tcp()?);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Ok(tls)
    }

    fn head(&self, method: &str, path: &str, content_type: &str, len: usize) -> Vec<u8> {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nAccept: application/json\r\n\r\n",
            self.addr, self.token
        )
        .into_bytes()
    }

    fn request(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
        let mut r = self.head(method, path, content_type, body.len());
        r.extend_from_slice(body);
        r
    }
}

/// One malformed request: its bytes, and whether the connection is unusable after it (the
/// server closes it, or bytes of it are left over).
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    fresh_connection_after: bool,
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const ROOT_CA: &str = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt";
const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn nested(open: &str, middle: &str, close: &str, depth: usize) -> Vec<u8> {
    let mut v = open.repeat(depth).into_bytes();
    v.extend_from_slice(middle.as_bytes());
    v.extend_from_slice(close.repeat(depth).as_bytes());
    v
}

fn deployment_with_replicas(replicas: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"huge"}},"spec":{{"replicas":{replicas},"selector":{{"matchLabels":{{"a":"b"}}}},"template":{{"metadata":{{"labels":{{"a":"b"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]}}}}}}}}"#
    )
    .into_bytes()
}

/// A protobuf body: the magic, then `envelope` as the runtime.Unknown.
fn protobuf(envelope: &[u8]) -> Vec<u8> {
    let mut v = b"k8s\0".to_vec();
    v.extend_from_slice(envelope);
    v
}

/// The `n`th malformed request (the cases take turns).
fn malformed(t: &Target, n: usize) -> Case {
    let case = |name, bytes| Case {
        name,
        bytes,
        fresh_connection_after: false,
    };
    let closing = |name, bytes| Case {
        name,
        bytes,
        fresh_connection_after: true,
    };
    // Every 40th round of each case uses its largest variant.
    let big = (n / 32).is_multiple_of(40);
    match n % 32 {
        0 => case(
            "deep JSON object",
            t.request("POST", CONFIGMAPS, JSON, &nested("{\"a\":", "1", "}", if big { 500_000 } else { 2_000 })),
        ),
        1 => case(
            "deep JSON array",
            t.request("POST", DEPLOYMENTS, JSON, &nested("[", "", "]", if big { 1_000_000 } else { 5_000 })),
        ),
        2 => case(
            "deep JSON in metadata",
            t.request(
                "POST",
                CONFIGMAPS,
                JSON,
                &[&br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep","labels":"#[..], &nested("{\"a\":", "1", "}", 300), b"}}"].concat(),
            ),
        ),
        3 => case(
            "deep YAML flow",
            t.request("POST", CONFIGMAPS, "application/yaml", &nested("[", "", "]", 3_000)),
        ),
        4 => case(
            "deep YAML block",
            t.request(
                "POST",
                CONFIGMAPS,
                "application/yaml",
                (0..400)
                    .map(|d| format!("{}a:\n", "  ".repeat(d)))
                    .collect::<String>()
                    .as_bytes(),
            ),
        ),
        5 => case("huge exponent", t.request("POST", DEPLOYMENTS, JSON, &deployment_with_replicas("1e999999"))),
        6 => case(
            "huge integer",
            t.request("POST", DEPLOYMENTS, JSON, &deployment_with_replicas(&"9".repeat(if big { 2_000_000 } else { 400 }))),
        ),
        7 => case("replicas beyond int32", t.request("POST", DEPLOYMENTS, JSON, &deployment_with_replicas("4294967296"))),
        8 => case("negative huge float", t.request("POST", DEPLOYMENTS, JSON, &deployment_with_replicas("-1.7976931348623157e308"))),
        9 => case(
            "invalid UTF-8 in a name",
            t.request("POST", CONFIGMAPS, JSON, b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"\xff\xfe\"}}"),
        ),
        10 => case(
            "invalid UTF-8 in YAML",
            t.request("POST", CONFIGMAPS, "application/yaml", b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \xc3\x28\n"),
        ),
        11 => case(
            "invalid UTF-8 in the path",
            t.request("POST", "/api/v1/namespaces/%ff%fe/configmaps", JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"utf8"}}"#),
        ),
        12 => case(
            "invalid UTF-8 in a header",
            [&b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n"[..]].concat(),
        ),
        13 => case(
            "truncated JSON",
            t.request("POST", CONFIGMAPS, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"na"#),
        ),
        14 => case(
            "truncated protobuf",
            t.request("POST", CONFIGMAPS, PROTOBUF, &protobuf(&[0x0a, 0x0e, 0x0a, 0x02, b'v', b'1', 0x12])),
        ),
        15 => {
            // The head announces more than the server takes; it answers without reading it.
            let mut c = closing("oversized body (Content-Length)", t.head("POST", CONFIGMAPS, JSON, 4 * 1024 * 1024));
            c.bytes.extend_from_slice(b"{\"apiVersion\":");
            c
        }
        16 => {
            if n % 640 == 16 {
                // A chunked body that grows past 3 MiB.
                let mut r = format!(
                    "POST {CONFIGMAPS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                    t.token
                )
                .into_bytes();
                let chunk = vec![b' '; 256 * 1024];
                for _ in 0..14 {
                    r.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    r.extend_from_slice(&chunk);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
                closing("oversized chunked body", r)
            } else {
                case("empty body", t.request("POST", CONFIGMAPS, JSON, b""))
            }
        }
        17 => {
            // Content-Length shorter than the body: the rest is read as the next head.
            let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"short"}}"#;
            let mut r = t.head("POST", CONFIGMAPS, JSON, 20);
            r.extend_from_slice(body);
            closing("Content-Length too short", r)
        }
        18 => {
            let mut r = t.head("POST", CONFIGMAPS, JSON, 0);
            let text = String::from_utf8(r.clone()).unwrap().replace("Content-Length: 0", "Content-Length: -5");
            r = text.into_bytes();
            closing("negative Content-Length", r)
        }
        19 => {
            let text = String::from_utf8(t.head("POST", CONFIGMAPS, JSON, 2)).unwrap().replace(
                "Content-Length: 2",
                "Content-Length: 2\r\nContent-Length: 99999999999999999999999",
            );
            let mut r = text.into_bytes();
            r.extend_from_slice(b"{}");
            closing("conflicting Content-Lengths", r)
        }
        20 => case("protobuf without a kind", t.request("POST", CONFIGMAPS, PROTOBUF, &protobuf(&[0x1a, 0x02, 0x08, 0x01]))),
        21 => case(
            "protobuf with a huge length",
            t.request("POST", CONFIGMAPS, PROTOBUF, &protobuf(&[0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00])),
        ),
        22 => {
            // A ConfigMap envelope whose raw bytes are garbage.
            let mut env = vec![0x0a, 0x11, 0x0a, 0x02, b'v', b'1', 0x12, 0x09];
            env.extend_from_slice(b"ConfigMap");
            env.extend_from_slice(&[0x12, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
            case("protobuf with a garbage object", t.request("POST", CONFIGMAPS, PROTOBUF, &protobuf(&env)))
        }
        23 => case("not protobuf at all", t.request("POST", CONFIGMAPS, PROTOBUF, b"{\"kind\":\"ConfigMap\"}")),
        24 => case(
            "deep strategic merge patch",
            t.request("PATCH", ROOT_CA, "application/strategic-merge-patch+json", &nested("{\"data\":", "1", "}", 3_000)),
        ),
        25 => case(
            "JSON patch that fails its test",
            t.request(
                "PATCH",
                ROOT_CA,
                "application/json-patch+json",
                br#"[{"op":"test","path":"/metadata/name","value":"other"},{"op":"remove","path":"/data"}]"#,
            ),
        ),
        26 => case(
            "JSON patch of a missing path",
            t.request("PATCH", ROOT_CA, "application/json-patch+json", br#"[{"op":"replace","path":"/no/such/path","value":1}]"#),
        ),
        27 => case(
            "merge patch that is not JSON",
            t.request("PATCH", ROOT_CA, "application/merge-patch+json", b"{\"data\": {\"a\": tru"),
        ),
        28 => case(
            "apply patch that is not YAML",
            t.request("PATCH", &format!("{ROOT_CA}?fieldManager=fuzz"), "application/apply-patch+yaml", b"a: [b\n  - : : {"),
        ),
        29 => case(
            "strategic merge patch with a bad directive",
            t.request(
                "PATCH",
                ROOT_CA,
                "application/strategic-merge-patch+json",
                br#"{"metadata":{"$patch":"explode","name":7}}"#,
            ),
        ),
        30 => {
            // A head line far past any limit, without an end.
            let mut r = b"GET /api/v1/namespaces HTTP/1.1\r\nX-Long: ".to_vec();
            r.extend(std::iter::repeat_n(b'a', if big { 4 * 1024 * 1024 } else { 70 * 1024 }));
            closing("endless header line", r)
        }
        _ => closing(
            "garbage request line",
            b"\x16\x03\x01 NOT HTTP \xff\xfe\x00\r\n\r\n".to_vec(),
        ),
    }
}

/// Reads one response: its status code. Bodies are read by Content-Length or chunked.
fn read_response(r: &mut impl BufRead) -> io::Result<(u16, bool)> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let code: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("not a status line: {line:?}")))?;
    let (mut len, mut chunked, mut close) = (0usize, false, false);
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap_or((h, ""));
        let (name, value) = (name.to_ascii_lowercase(), value.trim().to_ascii_lowercase());
        match name.as_str() {
            "content-length" => len = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => close = value == "close",
            _ => {}
        }
    }
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim(), 16).map_err(io::Error::other)?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
        }
    } else {
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
    }
    Ok((code, close))
}

#[derive(Default)]
struct Outcomes {
    /// By case: answers by status code ("closed" when the connection ended unanswered).
    by_case: BTreeMap<&'static str, BTreeMap<String, usize>>,
    sent: usize,
}

fn send_malformed(t: &Target, from: usize, to: usize, out: &Mutex<Outcomes>) {
    let mut conn: Option<BufReader<Tls>> = None;
    for n in from..to {
        let case = malformed(t, n);
        let mut c = match conn.take() {
            Some(c) => c,
            None => BufReader::new(t.connect().expect("a TLS connection to the server")),
        };
        let outcome = match c
            .get_mut()
            .write_all(&case.bytes)
            .and_then(|_| c.get_mut().flush())
        {
            // The server may refuse before it has read everything.
            Err(_) => match read_response(&mut c) {
                Ok((code, _)) => code.to_string(),
                Err(_) => "closed".to_string(),
            },
            Ok(()) => match read_response(&mut c) {
                Ok((code, close)) => {
                    if !close && !case.fresh_connection_after {
                        conn = Some(c);
                    }
                    code.to_string()
                }
                Err(_) => "closed".to_string(),
            },
        };
        let mut o = out.lock().unwrap();
        o.sent += 1;
        *o.by_case
            .entry(case.name)
            .or_default()
            .entry(outcome)
            .or_default() += 1;
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn revision(s: &TestServer) -> String {
    let (code, list) = s.http("GET", "/api/v1/namespaces?limit=1", None);
    assert_eq!(code, 200, "{list}");
    list["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list revision")
        .to_string()
}

/// The revision once the server's start-up writes are done: the same over one quiet second.
fn settled_revision(s: &TestServer) -> String {
    let mut last = revision(s);
    for _ in 0..30 {
        std::thread::sleep(Duration::from_secs(1));
        let now = revision(s);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the revision never settled (last {last})");
}

/// Lets this process (and the server it starts) hold the idle connections.
fn raise_open_files_limit(want: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        if l.rlim_max < want {
            l.rlim_max = want;
        }
        l.rlim_cur = l.rlim_max;
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &l),
            0,
            "raising RLIMIT_NOFILE to {want}: {}",
            io::Error::last_os_error()
        );
    }
}

/// Whether the server has closed `sock`, waiting up to `within`.
fn closed_by_server(mut sock: &TcpStream, within: Duration) -> bool {
    let _ = sock.set_read_timeout(Some(within.max(Duration::from_millis(10))));
    let mut buf = [0u8; 64];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn the_server_survives_malformed_requests_and_keeps_serving() {
    raise_open_files_limit(IDLE_CONNECTIONS as u64 + 4_096);
    let s = TestServer::start();
    let pid = s.child.id();
    let target = Arc::new(Target::new(&s));
    let before = settled_revision(&s);
    let rss_start = rss_kib(pid);
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));

    // The server's memory, sampled all along.
    let peak_rss = Arc::new(AtomicU64::new(rss_start));
    let sampler = {
        let (done, peak) = (done.clone(), peak_rss.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // A well-formed client: every answer must come, and be a 200.
    let good = {
        let (done, kc) = (done.clone(), s.kubeconfig());
        std::thread::spawn(move || {
            let client = api::client::Client::from_kubeconfig(
                &api::kubeconfig::Kubeconfig::load(&kc).unwrap(),
            )
            .unwrap();
            let (mut answered, mut slowest) = (0usize, Duration::ZERO);
            while !done.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r = smol::block_on(client.request(
                    "GET",
                    "/api/v1/namespaces/default",
                    None,
                    "application/json",
                ))
                .expect("the well-formed client is answered");
                assert_eq!(
                    r.status,
                    200,
                    "the well-formed client got {}",
                    String::from_utf8_lossy(&r.body)
                );
                slowest = slowest.max(t0.elapsed());
                answered += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (answered, slowest)
        })
    };

    // Slow heads: a header line a second; the server must close them after its head timeout.
    let slow_heads: Vec<_> = (0..SLOW_HEADS)
        .map(|_| {
            let t = target.clone();
            std::thread::spawn(move || {
                let mut c = t.connect().expect("a TLS connection");
                c.sock
                    .set_write_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let opened = Instant::now();
                let _ = c.write_all(b"GET /api/v1/namespaces HTTP/1.1\r\n");
                while opened.elapsed() < HEAD_TIMEOUT + SLACK {
                    if c.write_all(b"X-Slow: 1\r\n")
                        .and_then(|_| c.flush())
                        .is_err()
                    {
                        return Some(opened.elapsed());
                    }
                    c.sock
                        .set_read_timeout(Some(Duration::from_secs(1)))
                        .unwrap();
                    let mut b = [0u8; 16];
                    match c.read(&mut b) {
                        Ok(0) => return Some(opened.elapsed()),
                        Err(e)
                            if e.kind() != io::ErrorKind::WouldBlock
                                && e.kind() != io::ErrorKind::TimedOut =>
                        {
                            return Some(opened.elapsed())
                        }
                        _ => {}
                    }
                }
                None
            })
        })
        .collect();

    // Bodies that stop short: the server must answer 400 once the body has paused too long.
    let stalled: Vec<_> = (0..STALLED_BODIES)
        .map(|_| {
            let t = target.clone();
            std::thread::spawn(move || {
                let mut c = BufReader::new(t.connect().expect("a TLS connection"));
                c.get_mut()
                    .sock
                    .set_read_timeout(Some(HEAD_TIMEOUT + SLACK))
                    .unwrap();
                let mut r = t.head("POST", CONFIGMAPS, JSON, 1000);
                r.extend_from_slice(br#"{"apiVersion":"v1","#);
                c.get_mut().write_all(&r).unwrap();
                c.get_mut().flush().unwrap();
                read_response(&mut c)
                    .map(|(code, _)| code)
                    .map_err(|e| e.to_string())
            })
        })
        .collect();

    // Idle connections: half plain TCP that never start TLS, half after the handshake.
    let mut idle_plain = Vec::new();
    let mut idle_tls = Vec::new();
    for i in 0..IDLE_CONNECTIONS {
        if i % 2 == 0 {
            idle_plain.push(target.tcp().expect("an idle TCP connection"));
        } else {
            idle_tls.push(target.connect().expect("an idle TLS connection"));
        }
    }
    let idle_opened = Instant::now();
    let rss_idle = rss_kib(pid);

    // The flood.
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let senders: Vec<_> = (0..SENDERS)
        .map(|i| {
            let (t, out) = (target.clone(), outcomes.clone());
            let per = MALFORMED / SENDERS;
            std::thread::spawn(move || send_malformed(&t, i * per, (i + 1) * per, &out))
        })
        .collect();
    for h in senders {
        h.join().expect("a sender thread");
    }
    let flood_took = started.elapsed();

    let slow_closed: Vec<Option<Duration>> =
        slow_heads.into_iter().map(|h| h.join().unwrap()).collect();
    let stalled_answers: Vec<Result<u16, String>> =
        stalled.into_iter().map(|h| h.join().unwrap()).collect();
    // Plain TCP connections that never started TLS are closed after the handshake timeout.
    let wait = (HEAD_TIMEOUT + SLACK).saturating_sub(idle_opened.elapsed());
    let plain_closed = idle_plain
        .iter()
        .take(20)
        .filter(|c| closed_by_server(c, wait.max(Duration::from_millis(100))))
        .count();

    done.store(true, Ordering::Relaxed);
    let (answered, slowest) = good.join().expect("the well-formed client");
    sampler.join().unwrap();
    let after = revision(&s);
    let peak = peak_rss.load(Ordering::Relaxed);

    let o = outcomes.lock().unwrap();
    eprintln!(
        "{} malformed requests in {:.1}s over {SENDERS} connections' worth of senders, {} idle connections, {SLOW_HEADS} slow heads, {STALLED_BODIES} stalled bodies",
        o.sent,
        flood_took.as_secs_f64(),
        idle_plain.len() + idle_tls.len()
    );
    for (name, codes) in &o.by_case {
        eprintln!("  {name:45} {codes:?}");
    }
    eprintln!(
        "well-formed client: {answered} answers, slowest {:.0} ms; server RSS {} MiB at start, {} MiB with the idle connections, peak {} MiB (bound {RSS_BOUND_MIB} MiB)",
        slowest.as_secs_f64() * 1000.0,
        rss_start / 1024,
        rss_idle / 1024,
        peak / 1024
    );
    eprintln!("slow heads closed after {slow_closed:?}; stalled bodies answered {stalled_answers:?}; {plain_closed}/20 idle TCP connections closed");

    assert!(
        o.sent >= 20_000,
        "only {} malformed requests were sent",
        o.sent
    );
    let server_errors: Vec<_> = o
        .by_case
        .iter()
        .flat_map(|(name, codes)| {
            codes
                .keys()
                .filter(|c| c.starts_with('5'))
                .map(move |c| format!("{name}: {c}"))
        })
        .collect();
    assert!(server_errors.is_empty(), "5xx answers: {server_errors:?}");
    let accepted: Vec<_> = o
        .by_case
        .iter()
        .flat_map(|(name, codes)| {
            codes
                .keys()
                .filter(|c| c.starts_with('2'))
                .map(move |c| format!("{name}: {c}"))
        })
        .collect();
    assert!(
        accepted.is_empty(),
        "malformed requests were accepted: {accepted:?}"
    );
    assert!(answered > 0, "the well-formed client was never answered");
    assert!(
        peak / 1024 < RSS_BOUND_MIB,
        "the server's RSS peaked at {} MiB",
        peak / 1024
    );
    assert_eq!(before, after, "the store's revision moved");
    assert!(
        slow_closed
            .iter()
            .all(|c| c.is_some_and(|d| d < HEAD_TIMEOUT + SLACK)),
        "slow heads were not all closed: {slow_closed:?}"
    );
    assert!(
        stalled_answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|c| *c == 400)),
        "stalled bodies were not all answered 400: {stalled_answers:?}"
    );
    assert_eq!(
        plain_closed, 20,
        "idle connections without a TLS handshake were kept open"
    );
    // The server still answers after all of it.
    assert_eq!(s.http("GET", "/api/v1/namespaces/default", None).0, 200);
    drop(idle_tls);
}

/// Connections beyond the server's open-files limit: `accept` fails with EMFILE while they
/// are open. The server must wait and accept again (it used to stop serving), and answer once
/// they are gone.
#[test]
fn a_server_out_of_file_descriptors_keeps_serving() {
    const LIMIT: usize = 128;
    let nofile = format!("--nofile={LIMIT}:{LIMIT}");
    let s = TestServer::start_wrapped(&["prlimit", &nofile], &[]);
    let flood: Vec<TcpStream> = (0..LIMIT * 2)
        .map(|_| TcpStream::connect(s.addr).expect("a connection (the backlog takes it)"))
        .collect();
    // Let the server run into its limit.
    std::thread::sleep(Duration::from_secs(2));
    let mut s = s;
    assert!(
        s.child.try_wait().expect("the server's status").is_none(),
        "the server exited when it ran out of file descriptors"
    );
    drop(flood);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let client = s.client();
        match smol::block_on(client.request(
            "GET",
            "/api/v1/namespaces/default",
            None,
            "application/json",
        )) {
            Ok(r) if r.status == 200 => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the server does not answer after its connections closed: {:?}",
                    other.map(|r| r.status)
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Sends one request on a new connection; its status code and body.
fn exchange(t: &Target, bytes: &[u8]) -> (u16, String) {
    let mut c = BufReader::new(t.connect().expect("a TLS connection"));
    c.get_mut().write_all(bytes).expect("request sent");
    c.get_mut().flush().expect("request flushed");
    let mut line = String::new();
    c.read_line(&mut line).expect("a status line");
    let code: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        c.read_line(&mut h).expect("a header line");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; len];
    c.read_exact(&mut body).expect("the body");
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// `.` and `..` in a path are names, not directions: kube-apiserver routes on the path as sent
/// and refuses such a name (400), where resolving them deleted every ConfigMap of a namespace
/// or the namespace itself. A head over the limit gets 431, not a closed connection.
#[test]
fn dot_segments_are_refused_and_large_heads_answered_431() {
    let s = TestServer::start();
    let t = Target::new(&s);
    let (code, _) = s.json(
        "POST",
        "/api/v1/namespaces",
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
    );
    assert_eq!(code, 201);
    for name in ["a", "b"] {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        assert_eq!(
            s.json("POST", "/api/v1/namespaces/x/configmaps", &cm).0,
            201
        );
    }
    let cases = [
        (
            "/api/v1/namespaces/x/configmaps/.",
            "may not be '.'",
            "\".\"",
        ),
        (
            "/api/v1/namespaces/x/configmaps/..",
            "may not be '..'",
            "\"..\"",
        ),
        (
            "/api/v1/namespaces/x/configmaps/%2e",
            "may not be '.'",
            "\".\"",
        ),
        (
            "/api/v1/namespaces/x/configmaps/%2E%2e",
            "may not be '..'",
            "\"..\"",
        ),
        (
            "/api/v1/namespaces/x/configmaps/.%2e",
            "may not be '..'",
            "\"..\"",
        ),
        (
            "/api/v1/namespaces/x/configmaps/a%25",
            "may not contain '%'",
            "\"a%\"",
        ),
        ("/api/v1/namespaces/..", "may not be '..'", "\"..\""),
    ];
    for (path, why, quoted) in cases {
        for method in ["DELETE", "GET", "PUT"] {
            let (code, body) = exchange(&t, &t.request(method, path, JSON, b"{}"));
            assert_eq!(code, 400, "{method} {path}: {body}");
            let status: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(status["reason"], "BadRequest", "{body}");
            assert_eq!(
                status["message"],
                format!("Name parameter invalid: {quoted}: {why}"),
                "{method} {path}"
            );
        }
    }
    // Nothing was deleted.
    let (code, list) = s.http("GET", "/api/v1/namespaces/x/configmaps", None);
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .filter(|n| *n != "kube-root-ca.crt")
        .collect();
    assert_eq!(names, ["a", "b"]);
    let (code, ns) = s.http("GET", "/api/v1/namespaces/x", None);
    assert_eq!(code, 200);
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");
    // Segments that lead elsewhere lead nowhere.
    let (code, _) = exchange(
        &t,
        &t.request(
            "GET",
            "/api/v1/namespaces/x/configmaps/../../../namespaces",
            JSON,
            b"",
        ),
    );
    assert_eq!(code, 404);
    // The audit log records what was sent.
    common::eventually(10, "the audit log to have the path as sent", || {
        let audit = std::fs::read_to_string(s.data_dir().join("audit/audit.log")).ok()?;
        audit
            .contains(r#""requestURI":"/api/v1/namespaces/x/configmaps/%2E%2e""#)
            .then_some(())
    });

    // A head over 8 KiB (async-h1's limit, under kube-apiserver's 1 MiB) or with more than
    // 128 header fields: 431 and the connection's end.
    let mut big = t.head("GET", "/api/v1/namespaces", JSON, 0);
    let at = big.len() - 2;
    big.splice(
        at..at,
        format!("X-Big: {}\r\n", "a".repeat(9 * 1024)).into_bytes(),
    );
    let (code, body) = exchange(&t, &big);
    assert_eq!(
        (code, body.as_str()),
        (431, "431 Request Header Fields Too Large")
    );
    let mut many = t.head("GET", "/api/v1/namespaces", JSON, 0);
    let at = many.len() - 2;
    let fields: String = (0..130).map(|i| format!("X-{i}: 1\r\n")).collect();
    many.splice(at..at, fields.into_bytes());
    let (code, _) = exchange(&t, &many);
    assert_eq!(code, 431);
    // Just under the limit is served.
    let mut fits = t.head("GET", "/api/v1/namespaces", JSON, 0);
    let at = fits.len() - 2;
    let pad = 8 * 1024 - 1 - fits.len() - "X-Pad: \r\n".len();
    fits.splice(
        at..at,
        format!("X-Pad: {}\r\n", "a".repeat(pad)).into_bytes(),
    );
    assert_eq!(fits.len(), 8 * 1024 - 1);
    assert_eq!(exchange(&t, &fits).0, 200);
}
