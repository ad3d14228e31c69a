//! The web dashboard (`/ui/`) in a real browser: Debian's chromium, headless, driven over the
//! Chrome DevTools Protocol (a WebSocket, through soketto) against `skiff server` with its
//! own node and real busybox containers. It logs in, sees the node and a running pod, scales
//! a deployment and sees the new pods appear live, follows a log line written after the page
//! opened, applies a manifest, shows API errors as their Status message, and sends an
//! expired session back to log-in. Screenshots of the main views are written to
//! `$CARGO_TARGET_TMPDIR/dashboard-screenshots/`.
//!
//! Needs root, /bin/busybox, kubectl and /usr/bin/chromium (the tests say so and pass
//! without a browser only when `SKIFF_SKIP_BROWSER=1`, never silently).

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use api::client::Client;
use api::core::{ConfigMap, Node, Pod};
use api::kubeconfig::Kubeconfig;
use base64::Engine;
use common::{free_port, wait_for};
use serde_json::{json, Value};

const IMAGE: &str = "skiff.test/dashboard:v1";
const CHROMIUM: &str = "/usr/bin/chromium";

// ---- the browser ----

/// A headless chromium and one page of it, spoken to over the DevTools Protocol.
struct Browser {
    /// The browser process (None for a second tab of it).
    child: Option<Child>,
    _profile: Option<tempfile::TempDir>,
    port: u16,
    /// The browser's own DevTools address.
    browser_url: String,
    sender: soketto::connection::Sender<smol::net::TcpStream>,
    receiver: soketto::connection::Receiver<smol::net::TcpStream>,
    next_id: u64,
    /// Exceptions and console errors the page reported, for failure messages.
    problems: Vec<String>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn browser_available() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(
        std::env::var("SKIFF_SKIP_BROWSER").as_deref() == Ok("1"),
        "{CHROMIUM} is missing: apt-get install chromium (or set SKIFF_SKIP_BROWSER=1 to skip)"
    );
    eprintln!("skipping: no {CHROMIUM} and SKIFF_SKIP_BROWSER=1");
    false
}

/// A plain HTTP request to the DevTools endpoint (local, unencrypted).
fn devtools_get(port: u16, path: &str) -> Value {
    devtools_http(port, "GET", path)
}

fn devtools_http(port: u16, method: &str, path: &str) -> Value {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("devtools connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("devtools request");
    // The answer has a Content-Length; chromium may keep the connection open after it.
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    let body = loop {
        let n = s.read(&mut buf).expect("devtools answer");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(usize::MAX);
            if body.len() >= len || n == 0 {
                break body.to_string();
            }
        }
        assert!(n > 0, "devtools closed early: {text}");
    };
    let answer = String::from_utf8_lossy(&answer);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("devtools {path}: {e}: {answer}"))
}

impl Browser {
    fn start(width: u32, height: u32) -> Browser {
        Browser::start_as(width, height, None)
    }

    /// A chromium of a user whose client certificate is in `cert`'s NSS database, presenting
    /// it to `cert`'s origin without asking.
    ///
    /// Chromium on Linux finds client certificates in `$HOME/.pki/nssdb`, so HOME is the
    /// throw-away one. Which certificate to present without a prompt (headless has no one to
    /// answer it) is the AutoSelectCertificateForUrls content setting: a policy sets it
    /// system-wide (/etc/chromium/policies), but it is also a setting of the profile, kept
    /// in its Preferences, so it is written there and nothing outside the test changes.
    fn start_with_certificate(width: u32, height: u32, cert: &CertificateHome) -> Browser {
        Browser::start_as(width, height, Some(cert))
    }

    fn start_as(width: u32, height: u32, cert: Option<&CertificateHome>) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut command = Command::new(CHROMIUM);
        if let Some(cert) = cert {
            let prefs = json!({"profile": {"content_settings": {"exceptions": {"auto_select_certificate": {
                format!("{},*", cert.origin): {"setting": {"filters": [{}]}}
            }}}}});
            std::fs::create_dir_all(profile.path().join("Default")).expect("profile Default");
            std::fs::write(
                profile.path().join("Default/Preferences"),
                prefs.to_string(),
            )
            .expect("write Preferences");
            command.env("HOME", cert.home.path());
        }
        let mut child = command
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                // The test server's certificate is from its own CA.
                "--ignore-certificate-errors",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                &format!("--window-size={width},{height}"),
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium's DevTools address");
        let port: u16 = url
            .trim_start_matches("ws://127.0.0.1:")
            .split('/')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("odd DevTools address {url}"));
        let page = wait_for("chromium's page target", Duration::from_secs(10), || {
            devtools_get(port, "/json/list")
                .as_array()?
                .iter()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_string))
        });
        let mut b = Browser::connect(port, &page, true);
        b.browser_url = url;
        b.child = Some(child);
        b._profile = Some(profile);
        b
    }

    /// Another tab of the same browser, at `url`.
    /// A page of its own browser context (as another user's browser would be: its own
    /// storage and its own connections; a browser opens at most six HTTP/1.1 connections to
    /// one server per context, and each dashboard holds its watches open).
    fn new_user(&self) -> Browser {
        let mut browser = Browser::connect(self.port, &self.browser_url, false);
        let ctx = browser.call("Target.createBrowserContext", json!({}));
        let target = browser.call(
            "Target.createTarget",
            json!({"url": "about:blank", "browserContextId": ctx["browserContextId"]}),
        );
        let id = target["targetId"].as_str().expect("target id");
        Browser::connect(
            self.port,
            &format!("ws://127.0.0.1:{}/devtools/page/{id}", self.port),
            true,
        )
    }

    fn connect(port: u16, ws_url: &str, page: bool) -> Browser {
        let path = format!(
            "/{}",
            ws_url
                .split_once("://")
                .and_then(|(_, rest)| rest.split_once('/'))
                .map(|x| x.1)
                .expect("page path")
        );
        let (sender, receiver) = smol::block_on(async {
            let tcp = smol::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect devtools");
            let host = format!("127.0.0.1:{port}");
            let mut client = soketto::handshake::Client::new(tcp, &host, &path);
            match client.handshake().await.expect("devtools handshake") {
                soketto::handshake::ServerResponse::Accepted { .. } => {}
                other => panic!("devtools refused the WebSocket: {other:?}"),
            }
            client.into_builder().finish()
        });
        let mut b = Browser {
            child: None,
            _profile: None,
            port,
            browser_url: String::new(),
            sender,
            receiver,
            next_id: 0,
            problems: Vec::new(),
        };
        if page {
            b.call("Page.enable", json!({}));
            b.call("Runtime.enable", json!({}));
        }
        b
    }

    /// One DevTools command and its result (events in between are kept as problems when
    /// they report one).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        smol::block_on(async {
            self.sender.send_text(msg).await.expect("devtools send");
            self.sender.flush().await.expect("devtools flush");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                assert!(Instant::now() < deadline, "{method}: no answer");
                let mut data = Vec::new();
                let left = deadline.saturating_duration_since(Instant::now());
                let received = smol::future::or(
                    async { Some(self.receiver.receive_data(&mut data).await) },
                    async {
                        smol::Timer::after(left).await;
                        None
                    },
                )
                .await;
                received
                    .unwrap_or_else(|| panic!("{method}: no answer"))
                    .expect("devtools receive");
                let v: Value = serde_json::from_slice(&data).expect("devtools JSON");
                if v["id"] == id {
                    if let Some(e) = v.get("error") {
                        panic!("{method}: {e}");
                    }
                    return v["result"].clone();
                }
                match v["method"].as_str() {
                    Some("Runtime.exceptionThrown") => self.problems.push(format!(
                        "exception: {}",
                        v["params"]["exceptionDetails"]["exception"]["description"]
                    )),
                    Some("Runtime.consoleAPICalled")
                        if v["params"]["type"] == "error" || v["params"]["type"] == "warning" =>
                    {
                        self.problems
                            .push(format!("console: {}", v["params"]["args"]))
                    }
                    _ => {}
                }
            }
        })
    }

    /// Evaluates `expr` in the page (promises awaited) and returns its value.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}; page problems: {:?}", self.problems);
        }
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is truthy, then returns its value.
    fn wait(&mut self, what: &str, timeout: Duration, expr: &str) -> Value {
        eprintln!("dashboard test: waiting for {what}");
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expr);
            if !(v.is_null() || v == false || v == "" || v == 0) {
                return v;
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body.innerText");
                let loads = self.eval(
                    "JSON.stringify({state: document.readyState, url: location.href, \
                     loads: performance.getEntriesByType('resource').map(e => \
                     [e.name, Math.round(e.startTime), Math.round(e.responseEnd), e.responseStatus])})",
                );
                panic!(
                    "timed out waiting for {what}; page problems: {:?}; loads: {loads}; page text:\n{text}",
                    self.problems
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Loads `url`, again if the load failed because the machine's network changed (other
    /// tests add and remove interfaces; chromium aborts loads when it notices).
    fn navigate(&mut self, url: &str) {
        for _ in 0..5 {
            let r = self.call("Page.navigate", json!({"url": url}));
            match r["errorText"].as_str() {
                None | Some("") => return,
                Some(e) => {
                    eprintln!("dashboard test: loading {url} failed ({e}); again");
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        panic!("could not load {url}");
    }

    fn go(&mut self, hash: &str) {
        self.eval(&format!("location.hash = {}", json!(hash)));
    }

    fn click(&mut self, selector: &str) {
        let ok = self.eval(&format!(
            "(() => {{ const el = document.querySelector({}); if (!el) return false; el.click(); return true; }})()",
            json!(selector)
        ));
        assert_eq!(ok, true, "nothing to click at {selector}");
    }

    fn set_value(&mut self, selector: &str, value: &str) {
        let ok = self.eval(&format!(
            "(() => {{ const el = document.querySelector({}); if (!el) return false; el.value = {}; \
             el.dispatchEvent(new Event('input', {{bubbles: true}})); return true; }})()",
            json!(selector),
            json!(value)
        ));
        assert_eq!(ok, true, "no input at {selector}");
    }

    fn screenshot(&mut self, name: &str) -> PathBuf {
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

/// Moves this test's thread (and so every process and thread it starts: the server, the
/// browser, kubectl) into a network namespace of its own with only a loopback. Other tests
/// on the machine add and remove interfaces, and chromium aborts its loads when it notices
/// a network change; here it sees none, and the pods' bridge collides with nobody.
fn private_network() {
    // SAFETY: unshare only changes this thread's namespaces; nothing here depends on the old
    // network namespace afterwards.
    let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if r != 0 {
        eprintln!(
            "dashboard test: no private network namespace ({}): sharing the host's",
            std::io::Error::last_os_error()
        );
        return;
    }
    let out = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .output()
        .expect("ip");
    assert!(out.status.success(), "ip link set lo up: {out:?}");
}

// ---- the server ----

struct Server {
    child: Child,
    dir: tempfile::TempDir,
    run: Option<tempfile::TempDir>,
    cgroup_parent: String,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let Some(run) = &self.run else { return };
        common::remove_node_leftovers(run.path(), &self.cgroup_parent, self.dir.path());
    }
}

impl Server {
    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/ui/", self.port)
    }

    fn token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("admin-token"))
            .expect("admin token")
            .trim()
            .to_string()
    }

    fn client(&self) -> Client {
        let kubeconfig = self.dir.path().join("admin.kubeconfig");
        wait_for("the admin kubeconfig", Duration::from_secs(20), || {
            let kc = Kubeconfig::load(&kubeconfig).ok()?;
            Client::from_kubeconfig(&kc).ok()
        })
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.dir.path().join("admin.kubeconfig"))
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        let out = child.wait_with_output().expect("kubectl output");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

/// busybox applets the pods run, as links in /bin, and a /tmp.
fn tools_layer() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for applet in ["cat", "echo", "rm", "sleep", "mv"] {
        let mut h = header(tar::EntryType::Symlink, 0, 0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("link");
    }
    let mut h = header(tar::EntryType::Directory, 0, 0o1777);
    b.append_data(&mut h, "tmp/", std::io::empty())
        .expect("dir");
    b.into_inner().expect("tar")
}

/// `skiff server` with its own node and the test image imported.
fn start_server_with_node() -> Server {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("dashboard"),
            tools_layer(),
        ],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let node = format!("dash-{}", std::process::id());
    let cgroup_parent = format!("skiff-dash-{}", std::process::id());
    let port = free_port();
    let child = common::node_server_command(dir.path(), run.path(), port, &node, &cgroup_parent)
        .arg("--disable-dns")
        .spawn()
        .expect("start skiff server");
    let server = Server {
        child,
        dir,
        run: Some(run),
        cgroup_parent,
        port,
    };
    let client = server.client();
    wait_for("the server's own Node", Duration::from_secs(30), || {
        smol::block_on(client.get::<Node>("", &node)).ok()
    });
    server
}

/// The deployment the test drives: each pod prints what is dropped into /tmp/say, so a log
/// line can be written after the page opened (with `kubectl exec`).
fn deployment_yaml(replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {IMAGE}
        args: ["sh", "-c", "echo started; while true; do if [ -f /tmp/say ]; then cat /tmp/say; rm -f /tmp/say; fi; sleep 0.2; done"]
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {{app: web}}
  ports:
  - port: 80
    targetPort: 8080
"#
    )
}

fn running_web_pods(client: &Client) -> Vec<Pod> {
    let (pods, _) = smol::block_on(client.list::<Pod>(Some("default"), Some("app=web"), None))
        .expect("list pods");
    pods.into_iter()
        .filter(|p| {
            p.metadata.name.starts_with("web-")
                && p.status.phase.as_deref() == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        })
        .collect()
}

/// The JavaScript for "the table rows of the current view", as `[text of each row]`.
const ROWS: &str =
    "[...document.querySelectorAll('main tbody tr')].filter(r => !r.hidden).map(r => r.innerText)";

#[test]
fn dashboard_in_a_real_browser() {
    if !browser_available() {
        return;
    }
    private_network();
    let server = start_server_with_node();
    let client = server.client();
    server.kubectl(
        &["apply", "--server-side", "-f", "-"],
        Some(&deployment_yaml(1)),
    );
    wait_for("a running web pod", Duration::from_secs(90), || {
        running_web_pods(&client).into_iter().next()
    });

    let mut b = Browser::start(1280, 900);
    b.navigate(&server.url());
    b.wait(
        "the log-in form",
        Duration::from_secs(20),
        "!!document.querySelector('#token')",
    );

    // The files come with their caching and security headers, and revalidate to 304.
    let headers = b.eval(
        "fetch('app.js').then(r => ({status: r.status, csp: r.headers.get('content-security-policy'), \
         etag: r.headers.get('etag'), cache: r.headers.get('cache-control'), type: r.headers.get('content-type')}))",
    );
    assert_eq!(headers["status"], 200, "{headers}");
    let csp = headers["csp"].as_str().expect("a CSP header");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(headers["cache"], "no-cache");
    assert!(headers["type"]
        .as_str()
        .unwrap_or("")
        .starts_with("text/javascript"));
    let etag = headers["etag"].as_str().expect("an ETag").to_string();
    let revalidated = b.eval(&format!(
        "fetch('app.js', {{cache: 'no-store', headers: {{'If-None-Match': {}}}}}).then(r => r.status)",
        json!(etag)
    ));
    assert_eq!(revalidated, 304);
    // Inline script is refused by the policy (it would set the flag if it ran).
    let inline_ran = b.eval(
        "new Promise(r => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1'; \
         document.body.append(s); setTimeout(() => r(window.__inline === 1), 100); })",
    );
    assert_eq!(inline_ran, false, "the CSP let an inline script run");

    // A wrong token is refused, the admin token logs in.
    b.set_value("#token", "not-a-token");
    b.eval("document.querySelector('#login').requestSubmit()");
    b.wait(
        "the refusal",
        Duration::from_secs(10),
        "document.querySelector('#login-note').innerText.includes('did not accept')",
    );
    b.set_value("#token", &server.token());
    b.eval("document.querySelector('#login').requestSubmit()");

    // Nodes: the server's own node, Ready, with its pod count.
    let node = format!("dash-{}", std::process::id());
    b.wait(
        "the node, Ready",
        Duration::from_secs(20),
        &format!("{ROWS}.some(t => t.includes('{node}') && t.includes('Ready') && !t.includes('NotReady'))"),
    );
    b.wait(
        "the node's pod count",
        Duration::from_secs(10),
        &format!("{ROWS}.some(t => t.includes('{node}') && /\\b1 \\/ \\d+/.test(t))"),
    );
    let token_kept = b.eval("sessionStorage.getItem('skiff.token') !== null");
    assert_eq!(token_kept, true);
    b.click("button.cordon");
    b.wait(
        "the node cordoned",
        Duration::from_secs(10),
        &format!("{ROWS}.some(t => t.includes('SchedulingDisabled') && t.includes('Uncordon'))"),
    );
    let n = smol::block_on(client.get::<Node>("", &node)).expect("node");
    assert_eq!(n.spec.unschedulable, Some(true));
    b.click("button.cordon");
    b.wait(
        "the node uncordoned",
        Duration::from_secs(10),
        &format!("{ROWS}.some(t => !t.includes('SchedulingDisabled') && t.includes('Cordon'))"),
    );
    let n = smol::block_on(client.get::<Node>("", &node)).expect("node");
    assert_ne!(n.spec.unschedulable, Some(true));
    // Use from metrics.k8s.io, once the agent has a sample.
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.eval("!!document.querySelector('main tbody meter')") != true {
        assert!(Instant::now() < deadline, "no node usage shown");
        b.click("main .bar button");
        std::thread::sleep(Duration::from_secs(1));
    }
    b.screenshot("nodes");

    // Pods: the running pod.
    b.go("#/pods");
    b.wait(
        "the running web pod",
        Duration::from_secs(20),
        &format!("{ROWS}.some(t => t.startsWith('default') && t.includes('web-') && t.includes('Running') && t.includes('{node}'))"),
    );
    b.screenshot("pods");

    // Workloads: scale web to 2 in the page; its row follows live (the section is the same
    // element throughout: no reload).
    b.go("#/workloads");
    b.wait(
        "the web deployment",
        Duration::from_secs(20),
        "document.querySelector('section[data-kind=Deployment] tbody tr .scale')",
    );
    b.eval("document.querySelector('section[data-kind=Deployment]').dataset.mark = 'same'");
    b.click("section[data-kind=Deployment] tbody tr .scale");
    b.wait(
        "the scale dialog",
        Duration::from_secs(5),
        "document.querySelector('dialog[open] input[name=replicas]')",
    );
    b.set_value("dialog[open] input[name=replicas]", "2");
    b.click("dialog[open] button.primary");
    b.wait(
        "2 ready replicas, live",
        Duration::from_secs(90),
        "(() => { const s = document.querySelector('section[data-kind=Deployment]'); \
         const cells = [...s.querySelectorAll('tbody tr td')].map(td => td.innerText.trim()); \
         return s.dataset.mark === 'same' && cells[1] === 'web' && cells[2] === '2' && cells[3] === '2'; })()",
    );
    b.screenshot("workloads");
    let d = server.kubectl(&["get", "deployment", "web", "-o", "json"], None);
    let d: Value = serde_json::from_slice(&d.stdout).expect("deployment json");
    assert_eq!(d["spec"]["replicas"], 2);

    // Pods again, open while kubectl scales to 3: the third pod appears without a reload.
    b.go("#/pods");
    b.wait(
        "two running web pods",
        Duration::from_secs(30),
        &format!("{ROWS}.filter(t => t.includes('web-') && t.includes('Running')).length === 2"),
    );
    b.eval("document.querySelector('main section').dataset.mark = 'same'");
    server.kubectl(&["scale", "deployment/web", "--replicas=3"], None);
    b.wait(
        "the third pod, live",
        Duration::from_secs(90),
        &format!(
            "document.querySelector('main section').dataset.mark === 'same' && \
                  {ROWS}.filter(t => t.includes('web-') && t.includes('Running')).length === 3"
        ),
    );

    // A pod's page: containers, conditions, and its log followed live.
    let pod = running_web_pods(&client)
        .into_iter()
        .next()
        .expect("a web pod")
        .metadata
        .name;
    b.go(&format!("#/pod/default/{pod}"));
    b.wait(
        "the pod's log, followed",
        Duration::from_secs(30),
        "document.querySelector('pre.log').innerText.includes('started') && \
         document.querySelector('.log-state').innerText === 'following'",
    );
    b.wait(
        "the summary, containers and conditions",
        Duration::from_secs(10),
        &format!(
            "document.querySelector('dl.kv').innerText.includes('{node}') && \
         document.body.innerText.includes('skiff.test/dashboard:v1') && \
         document.body.innerText.includes('ContainersReady')"
        ),
    );
    let marker = format!("written-after-opening-{}", std::process::id());
    server.kubectl(
        &[
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            &format!("echo {marker} > /tmp/say.new && mv /tmp/say.new /tmp/say"),
        ],
        None,
    );
    b.wait(
        "the line written after the page opened",
        Duration::from_secs(20),
        &format!("document.querySelector('pre.log').innerText.includes('{marker}')"),
    );
    b.wait(
        "the pod's events",
        Duration::from_secs(20),
        "document.querySelector('main section:last-of-type tbody tr')",
    );
    b.screenshot("pod");

    // Services with their endpoints (three pods, port 8080).
    b.go("#/services");
    b.wait(
        "the web service's endpoints",
        Duration::from_secs(30),
        &format!("{ROWS}.some(t => t.includes('web') && (t.match(/:8080/g) || []).length === 3)"),
    );
    b.screenshot("services");

    // Events, newest first, warnings highlighted.
    server.kubectl(
        &["create", "-f", "-"],
        Some(
            "apiVersion: v1\nkind: Event\nmetadata:\n  name: web.warning\n  namespace: default\n\
             involvedObject:\n  kind: Deployment\n  name: web\n  namespace: default\n\
             reason: TestWarning\nmessage: something to look at\ntype: Warning\n",
        ),
    );
    b.go("#/events");
    b.wait(
        "the warning, highlighted",
        Duration::from_secs(20),
        "[...document.querySelectorAll('main tbody tr.warning')].some(r => r.innerText.includes('TestWarning'))",
    );
    b.wait(
        "the events",
        Duration::from_secs(20),
        &format!("{ROWS}.some(t => t.includes('ScalingReplicaSet'))"),
    );
    let times = b.eval(
        "[...document.querySelectorAll('main tbody tr .age')].map(e => Date.parse(e.dataset.t))",
    );
    let times: Vec<f64> = times
        .as_array()
        .expect("times")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert!(times.len() > 2, "{times:?}");
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "events not newest first: {times:?}"
    );
    b.screenshot("events");

    // Apply: a ConfigMap lands; a bad one shows the server's Status message.
    b.go("#/apply");
    b.wait(
        "the apply form",
        Duration::from_secs(10),
        "document.querySelector('textarea.manifest')",
    );
    b.set_value(
        "textarea.manifest",
        "# from the dashboard test\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-dashboard\n  labels:\n    name: not-this-one\ndata:\n  greeting: hello\n",
    );
    b.click("button.apply");
    b.wait(
        "the applied result",
        Duration::from_secs(20),
        "document.querySelector('.results').innerText.includes('configmap/from-dashboard serverside-applied')",
    );
    let cm = smol::block_on(client.get::<ConfigMap>("default", "from-dashboard"))
        .expect("the applied ConfigMap");
    assert_eq!(cm.data.get("greeting").map(String::as_str), Some("hello"));
    b.screenshot("apply");
    b.set_value(
        "textarea.manifest",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\ndata:\n  a: b\n",
    );
    b.click("button.apply");
    let shown = b.wait(
        "the Status message",
        Duration::from_secs(20),
        "document.querySelector('.results li.bad') && document.querySelector('.results').innerText",
    );
    let shown = shown.as_str().unwrap_or_default().to_string();
    // Exactly the message of the API's Status for the same request, made here directly.
    let status = b.eval(&format!(
        "fetch('/api/v1/namespaces/default/configmaps/Bad_Name?fieldManager=skiff-dashboard', {{method: 'PATCH', \
         headers: {{Authorization: 'Bearer ' + {}, 'Content-Type': 'application/apply-patch+yaml'}}, \
         body: 'apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: Bad_Name\\ndata:\\n  a: b\\n'}}).then(r => r.json())",
        json!(server.token())
    ));
    assert_eq!(status["code"], 422, "{status}");
    let message = status["message"].as_str().expect("a Status message");
    assert!(message.contains("Bad_Name"), "{message}");
    assert_eq!(shown.trim(), format!("ConfigMap/Bad_Name: {message}"));

    // Rollout restart (the annotation kubectl sets), then undo back to the first template.
    b.go("#/workloads");
    b.wait(
        "the web deployment",
        Duration::from_secs(20),
        "document.querySelector('section[data-kind=Deployment] tbody tr .restart')",
    );
    b.click("section[data-kind=Deployment] tbody tr .restart");
    b.wait(
        "the restart confirmation",
        Duration::from_secs(5),
        "document.querySelector('dialog[open] button.primary')",
    );
    b.click("dialog[open] button.primary");
    let deployment = |server: &Server| -> Value {
        let out = server.kubectl(&["get", "deployment", "web", "-o", "json"], None);
        serde_json::from_slice(&out.stdout).expect("deployment json")
    };
    wait_for("revision 2", Duration::from_secs(30), || {
        let d = deployment(&server);
        (d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
            && d["spec"]["template"]["metadata"]["annotations"]
                ["kubectl.kubernetes.io/restartedAt"]
                .is_string())
        .then_some(())
    });
    b.click("section[data-kind=Deployment] tbody tr .undo");
    b.wait(
        "the undo confirmation",
        Duration::from_secs(5),
        "document.querySelector('dialog[open] button.primary')",
    );
    b.click("dialog[open] button.primary");
    wait_for(
        "revision 3, the first template",
        Duration::from_secs(30),
        || {
            let d = deployment(&server);
            (d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
                && d["spec"]["template"]["metadata"]
                    .get("annotations")
                    .and_then(|a| a.get("kubectl.kubernetes.io/restartedAt"))
                    .is_none())
            .then_some(())
        },
    );
    assert!(
        b.eval("document.querySelector('#error').hidden") == true,
        "{}",
        b.eval("document.querySelector('#error').innerText")
    );

    // An action the API refuses shows its Status message in the banner: scaling to a
    // negative count (the dialog's own check is bypassed by setting its min away).
    b.click("section[data-kind=Deployment] tbody tr .scale");
    b.wait(
        "the scale dialog",
        Duration::from_secs(5),
        "document.querySelector('dialog[open] input[name=replicas]')",
    );
    b.eval("document.querySelector('dialog[open] input[name=replicas]').removeAttribute('min')");
    b.set_value("dialog[open] input[name=replicas]", "-1");
    b.click("dialog[open] button.primary");
    let banner = b.wait(
        "the error banner",
        Duration::from_secs(10),
        "!document.querySelector('#error').hidden && document.querySelector('#error-text').innerText",
    );
    assert!(
        banner.as_str().is_some_and(
            |t| t.contains("is invalid: spec.replicas: Invalid value") && t.contains("-1")
        ),
        "banner: {banner}"
    );

    // A user with only the `view` role (a ServiceAccount's token, under RBAC) sees the
    // workloads, and a scale is refused with the API's 403 message: the page never has more
    // rights than its user. (Users who may read one namespace only:
    // dashboard_namespaces_and_client_certificates.)
    let viewer_args: [&[&str]; 2] = [
        &["create", "serviceaccount", "viewer"],
        &[
            "create",
            "clusterrolebinding",
            "viewer-view",
            "--clusterrole=view",
            "--serviceaccount=default:viewer",
        ],
    ];
    for args in viewer_args {
        let out = server.kubectl(args, None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = server.kubectl(&["create", "token", "viewer"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let viewer_token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut v = b.new_user();
    let base = format!("https://127.0.0.1:{}", server.port);
    log_in_and_load(&mut v, &base, &viewer_token, "#/workloads");
    v.wait(
        "the viewer's workloads",
        Duration::from_secs(30),
        "[...document.querySelectorAll('section[data-kind=Deployment] tbody tr td')].some(td => td.innerText.trim() === 'web')",
    );
    v.click("section[data-kind=Deployment] tbody tr .scale");
    v.wait(
        "the viewer's scale dialog",
        Duration::from_secs(5),
        "document.querySelector('dialog[open] input[name=replicas]')",
    );
    v.set_value("dialog[open] input[name=replicas]", "5");
    v.click("dialog[open] button.primary");
    let refused = v.wait(
        "the viewer's refusal",
        Duration::from_secs(10),
        "!document.querySelector('#error').hidden && document.querySelector('#error-text').innerText",
    );
    assert!(
        refused.as_str().is_some_and(|t| t.contains("forbidden")
            && t.contains("User \"system:serviceaccount:default:viewer\"")),
        "banner: {refused}"
    );
    let d = server.kubectl(&["get", "deployment", "web", "-o", "json"], None);
    let d: Value = serde_json::from_slice(&d.stdout).expect("deployment json");
    assert_ne!(d["spec"]["replicas"], 5, "a viewer scaled the deployment");
    drop(v);

    // A phone-sized screen: tables become cards, every view still reachable.
    b.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}),
    );
    b.go("#/pods");
    b.wait(
        "the pods as cards",
        Duration::from_secs(20),
        &format!("{ROWS}.length >= 3 && getComputedStyle(document.querySelector('main thead')).display === 'none'"),
    );
    b.screenshot("pods-phone");
    b.call("Emulation.clearDeviceMetricsOverride", json!({}));

    // An expired or revoked token: the next answer is 401 and the page goes back to log-in.
    b.eval("sessionStorage.setItem('skiff.token', 'revoked')");
    b.go("#/nodes");
    b.wait(
        "the log-in form again",
        Duration::from_secs(20),
        "document.querySelector('#login-note') && document.querySelector('#login-note').innerText.includes('log in again')",
    );
    let token_gone = b.eval("sessionStorage.getItem('skiff.token') === null");
    assert_eq!(token_gone, true);
    assert!(
        b.problems.iter().all(|p| !p.starts_with("exception")),
        "the page threw: {:?}",
        b.problems
    );
}

/// CPU seconds (user and system) `pid` has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').expect("stat format").1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

/// Share of one core `pid` uses over `d`.
fn cpu_share(pid: u32, d: Duration) -> f64 {
    let before = cpu_seconds(pid);
    std::thread::sleep(d);
    (cpu_seconds(pid) - before) / d.as_secs_f64()
}

/// Logs a fresh page in (sessionStorage is per tab) and loads `hash` in it.
fn log_in_and_load(b: &mut Browser, server_url: &str, token: &str, hash: &str) {
    b.navigate(&format!("{server_url}/ui/"));
    b.wait(
        "the log-in form",
        Duration::from_secs(20),
        "!!document.querySelector('#token')",
    );
    b.eval(&format!(
        "sessionStorage.setItem('skiff.mode', 'token'); sessionStorage.setItem('skiff.token', {})",
        json!(token)
    ));
    // A different query makes it a full load, not a same-document hash change.
    b.navigate(&format!("{server_url}/ui/?load{hash}"));
}

/// The issue's benchmark: the pods view's first render with 1,000 pods, a change to one of
/// them touching only its row, and the server's CPU while 10 dashboards are open and idle.
/// Also: `--disable-ui` leaves nothing at /ui/. No containers: the pods are bound to a node
/// that does not exist.
#[test]
fn dashboard_thousand_pods() {
    if !browser_available() {
        return;
    }
    private_network();
    let off = common::TestServer::start_with(&["--disable-ui"]);
    let r = smol::block_on(off.client().request("GET", "/ui/", None, "*/*")).expect("GET /ui/");
    assert_eq!(r.status, 404);
    drop(off);

    let server = common::TestServer::start();
    let client = server.client();
    let token = std::fs::read_to_string(server.dir.path().join("admin-token"))
        .expect("admin token")
        .trim()
        .to_string();
    // The pods' node exists (no agent runs it): pods of a node that does not exist are
    // removed by the pod garbage collector, which would move the pods view while it is measured.
    let mut ghost = Node::default();
    ghost.metadata.name = "ghost-node".into();
    smol::block_on(client.create(&ghost)).expect("create the node");
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..8 {
            let client = &client;
            s.spawn(move || {
                for i in (t..1000).step_by(8) {
                    let pod =
                        common::pod(&format!("p-{i:04}"), "ghost-node", &["sleep", "1"], None);
                    smol::block_on(client.create(&pod)).expect("create pod");
                }
            });
        }
    });
    eprintln!(
        "dashboard bench: 1,000 pods created in {:?}",
        started.elapsed()
    );
    let server_url = server.url();

    let mut b = Browser::start(1280, 900);
    // Marks when the 1,000th row is in the document and when the frame after it is painted.
    b.call(
        "Page.addScriptToEvaluateOnNewDocument",
        json!({"source": "new MutationObserver((_, obs) => { \
            if (document.querySelectorAll('main tbody tr').length >= 1000) { \
              window.__rendered = performance.now(); obs.disconnect(); \
              requestAnimationFrame(() => setTimeout(() => { window.__painted = performance.now(); })); } \
          }).observe(document, {childList: true, subtree: true});"}),
    );
    log_in_and_load(&mut b, &server_url, &token, "#/pods");
    b.wait(
        "1,000 rows painted",
        Duration::from_secs(30),
        "window.__painted",
    );
    let rendered = b.eval("window.__rendered").as_f64().expect("rendered");
    let painted = b.eval("window.__painted").as_f64().expect("painted");
    eprintln!(
        "dashboard bench: pods view with 1,000 pods: rows in the document {rendered:.0} ms, painted {painted:.0} ms after navigation"
    );
    b.screenshot("pods-1000");
    assert!(painted < 3000.0, "first render took {painted} ms");

    // One pod changes: its row is replaced, the others stay the same elements.
    b.eval("document.querySelector('tr[data-key=\"default/p-0500\"]').dataset.mark = 'same'");
    server_kubectl(&server, &["label", "pod", "p-0999", "touched=yes"]);
    server_kubectl(
        &server,
        &["delete", "pod", "p-0001", "--grace-period=0", "--force"],
    );
    b.wait(
        "the deletion, live",
        Duration::from_secs(20),
        "document.querySelector('.count').innerText === '999 pods' && \
         !document.querySelector('tr[data-key=\"default/p-0001\"]') && \
         document.querySelector('tr[data-key=\"default/p-0500\"]').dataset.mark === 'same'",
    );

    // Ten dashboards open and idle: the server's CPU against its own idle baseline.
    let pid = server.child.id();
    let baseline = cpu_share(pid, Duration::from_secs(10));
    let mut tabs: Vec<Browser> = (0..9).map(|_| b.new_user()).collect();
    for (i, t) in tabs.iter_mut().enumerate() {
        eprintln!("dashboard bench: dashboard {}", i + 2);
        log_in_and_load(t, &server_url, &token, "#/pods");
        t.wait(
            "the pods",
            Duration::from_secs(30),
            "document.querySelector('.count') && document.querySelector('.count').innerText === '999 pods'",
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    let watchers = || -> u64 {
        let r = smol::block_on(client.request("GET", "/metrics", None, "*/*")).expect("metrics");
        String::from_utf8_lossy(&r.body)
            .lines()
            .find_map(|l| l.strip_prefix("apiserver_registered_watchers "))
            .and_then(|v| v.trim().parse().ok())
            .expect("the watcher gauge")
    };
    let before = watchers();
    let idle = cpu_share(pid, Duration::from_secs(30));
    let after = watchers();
    // Each open pods view holds one watch (besides the server's own informers'): all ten
    // dashboards were really open throughout.
    assert!(
        before >= 10 && after >= before,
        "watchers: {before} then {after}"
    );
    eprintln!(
        "dashboard bench: server CPU idle {:.3}% of a core alone, {:.3}% with 10 dashboards open on the pods view (999 pods)",
        baseline * 100.0,
        idle * 100.0
    );
    assert!(
        idle < 0.02,
        "the server used {:.2}% of a core",
        idle * 100.0
    );
}

fn server_kubectl(server: &common::TestServer, args: &[&str]) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(args)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- client certificates, namespaces and expired tokens ----

/// A throw-away HOME whose NSS database holds a user's client certificate and key, and the
/// origin chromium presents them to.
struct CertificateHome {
    home: tempfile::TempDir,
    origin: String,
}

fn run_tool(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install libnss3-tools openssl)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl CertificateHome {
    /// The certificate and key `skiff user create` embedded in `kubeconfig`, imported with
    /// Debian's certutil and pk12util (libnss3-tools) into `$HOME/.pki/nssdb`, where chromium
    /// on Linux looks for client certificates.
    fn from_kubeconfig(kubeconfig: &Path, origin: &str) -> CertificateHome {
        let kc = Kubeconfig::load(kubeconfig).expect("the user's kubeconfig");
        let user = &kc.users.first().expect("a user in the kubeconfig").user;
        let decode = |data: &Option<String>| {
            base64::engine::general_purpose::STANDARD
                .decode(data.as_deref().expect("embedded certificate data"))
                .expect("base64")
        };
        let home = tempfile::tempdir().expect("home");
        let cert = home.path().join("user.crt");
        let key = home.path().join("user.key");
        let p12 = home.path().join("user.p12");
        std::fs::write(&cert, decode(&user.client_certificate_data)).expect("write cert");
        std::fs::write(&key, decode(&user.client_key_data)).expect("write key");
        run_tool(
            Command::new("openssl")
                .args([
                    "pkcs12",
                    "-export",
                    "-passout",
                    "pass:",
                    "-name",
                    "dashboard user",
                ])
                .arg("-in")
                .arg(&cert)
                .arg("-inkey")
                .arg(&key)
                .arg("-out")
                .arg(&p12),
        );
        let db = home.path().join(".pki/nssdb");
        std::fs::create_dir_all(&db).expect("nssdb dir");
        let db = format!("sql:{}", db.display());
        run_tool(Command::new("certutil").args(["-N", "-d", &db, "--empty-password"]));
        run_tool(
            Command::new("pk12util")
                .args(["-d", &db, "-W", ""])
                .arg("-i")
                .arg(&p12),
        );
        for f in [cert, key, p12] {
            std::fs::remove_file(f).expect("remove the key material");
        }
        CertificateHome {
            home,
            origin: origin.to_string(),
        }
    }
}

/// `token` (a ServiceAccount token of the server) signed again with the server's key with
/// its claims kept but its lifetime moved: issued `issued_ago` seconds ago, valid for
/// `seconds`. The server's own signature, so a refusal can only be for the times.
fn resigned(token: &str, data_dir: &Path, issued_ago: i64, seconds: i64) -> String {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let pem = std::fs::read_to_string(data_dir.join("pki/service-account.key"))
        .expect("the server's ServiceAccount key");
    let der: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = STANDARD.decode(der).expect("PEM base64");
    let rng = ring::rand::SystemRandom::new();
    let key = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &der,
        &rng,
    )
    .expect("an ECDSA P-256 key");
    let mut parts = token.split('.');
    let header = parts.next().expect("JWT header");
    let mut claims: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(parts.next().expect("JWT claims"))
            .expect("claims base64"),
    )
    .expect("claims JSON");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    claims["iat"] = json!(now - issued_ago);
    claims["nbf"] = json!(now - issued_ago);
    claims["exp"] = json!(now - issued_ago + seconds);
    let mut jwt = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let sig = key.sign(&rng, jwt.as_bytes()).expect("sign");
    jwt.push('.');
    jwt.push_str(&URL_SAFE_NO_PAD.encode(sig.as_ref()));
    jwt
}

/// A pod bound to a node that no agent runs (its Node object exists, so the pod garbage
/// collector leaves the pod alone), in `namespace`.
fn ghost_pod(client: &Client, namespace: &str, name: &str) {
    let mut ghost = Node::default();
    ghost.metadata.name = "ghost-node".into();
    if let Err(e) = smol::block_on(client.create(&ghost)) {
        assert!(
            e.is_conflict() || e.code() == Some(409),
            "create the node: {e}"
        );
    }
    let mut pod = common::pod(name, "ghost-node", &["sleep", "1"], None);
    pod.metadata.namespace = Some(namespace.into());
    smol::block_on(client.create(&pod)).expect("create pod");
}

/// The pod names of the pods view's visible rows, sorted.
const POD_NAMES: &str = "[...document.querySelectorAll('main tbody tr')].filter(r => !r.hidden)\
    .map(r => r.dataset.key.split('/')[1]).sort().join(' ')";

/// The namespace picker: an admin picks a namespace from the list and the pods view and its
/// watch follow it, remembered across a reload; a user made by `skiff user create` logs in
/// with the client certificate chromium holds for it (in a throw-away NSS database) and,
/// with a RoleBinding in one namespace only and no right to list namespaces, reaches that
/// namespace's pods through the picker's free-text field, then the fallback to it; a
/// ServiceAccount's token falls back to the ServiceAccount's namespace by itself; and a
/// really expired token (the server's own signature, expired an hour ago) goes back to
/// log-in. No containers: the pods are bound to a node that does not exist.
#[test]
fn dashboard_namespaces_and_client_certificates() {
    if !browser_available() {
        return;
    }
    private_network();
    let server = common::TestServer::start();
    let client = server.client();
    let token = std::fs::read_to_string(server.dir.path().join("admin-token"))
        .expect("admin token")
        .trim()
        .to_string();
    for ns in ["team-a", "team-b"] {
        server_kubectl(&server, &["create", "namespace", ns]);
    }
    ghost_pod(&client, "default", "d-1");
    ghost_pod(&client, "team-a", "a-1");
    ghost_pod(&client, "team-b", "b-1");
    let origin = server.url();

    // An admin: "All namespaces" and each namespace in a list; picking one narrows the view
    // and its watch, and is kept in the URL and across a reload.
    let mut b = Browser::start(1280, 900);
    log_in_and_load(&mut b, &origin, &token, "#/pods");
    b.wait(
        "every namespace's pods",
        Duration::from_secs(20),
        &format!("{POD_NAMES} === 'a-1 b-1 d-1'"),
    );
    b.wait(
        "the namespaces in the picker",
        Duration::from_secs(10),
        "(() => { const s = document.querySelector('select#namespace'); return s && \
         [...s.options].map(o => o.text).join(',').match(/^All namespaces,default,(.*,)?team-a,team-b$/); })()",
    );
    b.eval(
        "(() => { const s = document.querySelector('select#namespace'); s.value = 'team-b'; \
         s.dispatchEvent(new Event('change')); })()",
    );
    b.wait(
        "team-b's pods only",
        Duration::from_secs(20),
        &format!("location.hash === '#/pods?namespace=team-b' && {POD_NAMES} === 'b-1'"),
    );
    ghost_pod(&client, "team-a", "a-2");
    ghost_pod(&client, "team-b", "b-2");
    b.wait(
        "team-b's new pod, live, and not team-a's",
        Duration::from_secs(20),
        &format!("{POD_NAMES} === 'b-1 b-2'"),
    );
    // Another view keeps the namespace, and so does a reload from a bare URL.
    b.go("#/events");
    b.wait(
        "the events view in team-b",
        Duration::from_secs(10),
        "location.hash === '#/events?namespace=team-b' && document.querySelector('select#namespace').value === 'team-b'",
    );
    b.navigate(&format!("{origin}/ui/?again#/pods"));
    b.wait(
        "team-b still chosen after a reload",
        Duration::from_secs(20),
        &format!("location.hash === '#/pods?namespace=team-b' && {POD_NAMES} === 'b-1 b-2'"),
    );
    b.screenshot("pods-namespace");
    b.eval(
        "(() => { const s = document.querySelector('select#namespace'); s.value = ''; \
         s.dispatchEvent(new Event('change')); })()",
    );
    b.wait(
        "every namespace again",
        Duration::from_secs(20),
        &format!("location.hash === '#/pods' && {POD_NAMES} === 'a-1 a-2 b-1 b-2 d-1'"),
    );

    // alice, made by `skiff user create`, may read team-a only.
    let alice_kubeconfig = server.dir.path().join("alice.kubeconfig");
    let out = Command::new(common::skiff_bin())
        .args(["user", "create", "alice", "-o"])
        .arg(&alice_kubeconfig)
        .env("KUBECONFIG", server.kubeconfig())
        .output()
        .expect("skiff user create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server_kubectl(
        &server,
        &[
            "create",
            "rolebinding",
            "alice-view",
            "--clusterrole=view",
            "--user=alice",
            "-n",
            "team-a",
        ],
    );
    // A ServiceAccount of team-b that may read team-b.
    server_kubectl(
        &server,
        &["create", "serviceaccount", "robot", "-n", "team-b"],
    );
    server_kubectl(
        &server,
        &[
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=team-b:robot",
            "-n",
            "team-b",
        ],
    );
    // Bindings reach the authorizer through its watch, a moment after they are stored.
    wait_for("alice's binding in force", Duration::from_secs(10), || {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&alice_kubeconfig)
            .args(["auth", "can-i", "list", "pods", "-n", "team-a"])
            .output()
            .expect("kubectl");
        (String::from_utf8_lossy(&out.stdout).trim() == "yes").then_some(())
    });

    // alice's browser holds her certificate and presents it to this server by itself.
    let cert = CertificateHome::from_kubeconfig(&alice_kubeconfig, &origin);
    let mut a = Browser::start_with_certificate(1280, 900, &cert);
    a.navigate(&format!("{origin}/ui/"));
    a.wait(
        "the log-in form",
        Duration::from_secs(20),
        "!!document.querySelector('#cert-login')",
    );
    a.click("#cert-login");
    a.wait(
        "alice logged in with her certificate",
        Duration::from_secs(20),
        "!document.querySelector('#nav').hidden && document.querySelector('#whoami').innerText === 'alice'",
    );
    let mode =
        a.eval("[sessionStorage.getItem('skiff.mode'), sessionStorage.getItem('skiff.token')]");
    assert_eq!(
        mode,
        json!(["cert", null]),
        "no token: the certificate is the credential"
    );
    // What RBAC lets alice see: no nodes, with the API's own message.
    let banner = a.wait(
        "the nodes refused",
        Duration::from_secs(20),
        "!document.querySelector('#error').hidden && document.querySelector('#error-text').innerText",
    );
    assert!(
        banner.as_str().is_some_and(
            |t| t.contains("nodes is forbidden: User \"alice\" cannot list resource \"nodes\"")
        ),
        "banner: {banner}"
    );
    // Every namespace's pods are refused, and alice may not list namespaces: a namespace
    // field, and a notice asking for one instead of a bare 403.
    a.go("#/pods");
    a.wait(
        "the notice asking for a namespace",
        Duration::from_secs(20),
        "!document.querySelector('#notice').hidden && document.querySelector('#notice').innerText.includes('You may not list pods in all namespaces: choose a namespace above')",
    );
    a.wait(
        "the free-text namespace field",
        Duration::from_secs(10),
        "document.querySelector('input#namespace')",
    );
    assert_eq!(a.eval("document.querySelector('#error').hidden"), true);
    a.set_value("input#namespace", "team-a");
    a.eval("document.querySelector('input#namespace').dispatchEvent(new Event('change'))");
    a.wait(
        "team-a's pods",
        Duration::from_secs(20),
        &format!("location.hash === '#/pods?namespace=team-a' && {POD_NAMES} === 'a-1 a-2' && document.querySelector('#notice').hidden"),
    );
    ghost_pod(&client, "team-a", "a-3");
    a.wait(
        "team-a's new pod, live",
        Duration::from_secs(20),
        &format!("{POD_NAMES} === 'a-1 a-2 a-3'"),
    );
    a.screenshot("pods-certificate");
    // Back to "all namespaces": the view falls back to the namespace alice chose last, and
    // says why.
    a.set_value("input#namespace", "");
    a.eval("document.querySelector('input#namespace').dispatchEvent(new Event('change'))");
    a.wait(
        "the fallback to team-a",
        Duration::from_secs(20),
        &format!("location.hash === '#/pods' && {POD_NAMES} === 'a-1 a-2 a-3' && \
                  document.querySelector('#notice').innerText.includes('showing namespace \"team-a\"')"),
    );
    a.screenshot("pods-fallback");
    drop(a);

    // A ServiceAccount's token: the page learns its namespace (SelfSubjectReview) and falls
    // back to it by itself.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["create", "token", "robot", "-n", "team-b"])
        .output()
        .expect("kubectl create token");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let robot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut r = b.new_user();
    log_in_and_load(&mut r, &origin, &robot, "#/pods");
    r.wait(
        "the fallback to team-b",
        Duration::from_secs(20),
        &format!("{POD_NAMES} === 'b-1 b-2' && document.querySelector('#notice').innerText.includes('showing namespace \"team-b\"') && \
                  document.querySelector('#whoami').innerText === 'system:serviceaccount:team-b:robot'"),
    );

    // The same token signed again by the server's key: valid now it is accepted, expired an
    // hour ago it is refused (401) ...
    let fresh = resigned(&robot, server.dir.path(), 60, 3600);
    let expired = resigned(&robot, server.dir.path(), 7200, 3600);
    let status = |b: &mut Browser, t: &str| {
        b.eval(&format!(
            "fetch('/api/v1/namespaces/team-b/pods', {{headers: {{Authorization: 'Bearer ' + {}}}}}).then(r => r.status)",
            json!(t)
        ))
    };
    assert_eq!(status(&mut r, &fresh), 200);
    assert_eq!(status(&mut r, &expired), 401);
    // ... and the page, whose token expired while it was open, goes back to log-in.
    r.eval(&format!(
        "sessionStorage.setItem('skiff.token', {})",
        json!(expired)
    ));
    r.go("#/events");
    r.wait(
        "the log-in form again",
        Duration::from_secs(20),
        "document.querySelector('#login-note') && document.querySelector('#login-note').innerText.includes('log in again')",
    );
    assert_eq!(
        r.eval("sessionStorage.getItem('skiff.token') === null"),
        true
    );
    for p in [&b, &r] {
        assert!(
            p.problems.iter().all(|p| !p.starts_with("exception")),
            "the page threw: {:?}",
            p.problems
        );
    }
}
