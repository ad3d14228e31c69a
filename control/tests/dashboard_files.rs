//! The dashboard's files at `/ui/` over real TLS, without a browser: served to anyone (they
//! hold no data; the page calls the API with its user's credentials), with their caching and
//! security headers, Kubernetes `Status` errors for what is not there, and nothing at all
//! with `--disable-ui`. The page itself is tested in chromium (agent/tests/dashboard.rs).

mod common;

use api::client::{Client, Response};
use api::kubeconfig::Kubeconfig;
use common::TestServer;

/// A client that trusts the server's CA but presents no credentials.
fn anonymous(server: &TestServer) -> Client {
    let mut kc = Kubeconfig::load(&server.kubeconfig()).expect("kubeconfig");
    for u in &mut kc.users {
        u.user.token = None;
        u.user.token_file = None;
    }
    Client::from_kubeconfig(&kc).expect("client")
}

fn get(c: &Client, method: &str, path: &str) -> Response {
    smol::block_on(c.request(method, path, None, "*/*")).expect("request")
}

#[test]
fn ui_files_are_public_cached_and_locked_down() {
    let server = TestServer::start();
    let c = anonymous(&server);
    // The API itself still needs credentials.
    assert_eq!(get(&c, "GET", "/api/v1/pods").status, 401);

    let r = get(&c, "GET", "/ui");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/ui/"));

    let page = get(&c, "GET", "/ui/");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), Some("text/html;charset=utf-8"));
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains(r#"<script type="module" src="app.js">"#),
        "{html}"
    );
    let csp = page.header("content-security-policy").expect("a CSP");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp} lacks {directive}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("http"),
        "{csp}"
    );
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let etag = page.header("etag").expect("an ETag").to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");

    let js = get(&c, "GET", "/ui/views.js");
    assert_eq!(js.status, 200);
    assert_eq!(
        js.header("content-type"),
        Some("text/javascript;charset=utf-8")
    );
    assert_ne!(js.header("etag"), Some(etag.as_str()));
    // HEAD: the headers, no body.
    let head = get(&c, "HEAD", "/ui/views.js");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());

    let missing = get(&c, "GET", "/ui/nothing.js");
    assert_eq!(missing.status, 404);
    let status: serde_json::Value = serde_json::from_slice(&missing.body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(get(&c, "POST", "/ui/").status, 405);
}

#[test]
fn disable_ui_serves_nothing() {
    let server = TestServer::start_with(&["--disable-ui"]);
    let c = anonymous(&server);
    assert_eq!(get(&c, "GET", "/ui/").status, 404);
    assert_eq!(get(&c, "GET", "/ui/app.js").status, 404);
}
