//! Watch over HTTP against a real server: initial state, resume, 410 Expired, selectors,
//! bookmarks only when asked, timeoutSeconds.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use futures_lite::StreamExt;
use serde_json::{json, Value};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"labels":labels},"data":{"k":"v"}})
}

/// Reads events from a watch until `n` arrived or the stream ends or `within` passes.
fn collect(
    s: &TestServer,
    path: &str,
    n: usize,
    within: Duration,
    during: impl FnOnce(),
) -> Vec<Value> {
    let c = s.client();
    smol::block_on(async {
        let mut stream = c
            .stream_lines(path, "application/json")
            .await
            .expect("watch");
        during();
        let mut events = Vec::new();
        let deadline = Instant::now() + within;
        while events.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = futures_lite::future::or(async { stream.next().await }, async {
                smol::Timer::after(left).await;
                None
            })
            .await;
            match next {
                // The server's own CA ConfigMap (kube-root-ca.crt, as in every Kubernetes
                // namespace) comes and goes on its own schedule; the tests watch their own.
                Some(Ok(v)) if v["object"]["metadata"]["name"] == "kube-root-ca.crt" => {}
                Some(Ok(v)) => events.push(v),
                Some(Err(e)) => panic!("watch failed: {e}"),
                None => break,
            }
        }
        events
    })
}

fn summary(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn watch_without_version_starts_with_the_current_state_then_streams() {
    let s = TestServer::start();
    s.json("POST", CMS, &cm("a", json!({})));
    let events = collect(
        &s,
        &format!("{CMS}?watch=true"),
        3,
        Duration::from_secs(10),
        || {
            s.json("POST", CMS, &cm("b", json!({})));
            s.http("DELETE", &format!("{CMS}/a"), None);
        },
    );
    assert_eq!(
        summary(&events),
        [
            ("ADDED".into(), "a".into()),
            ("ADDED".into(), "b".into()),
            ("DELETED".into(), "a".into())
        ]
    );
    assert_eq!(events[0]["object"]["kind"], "ConfigMap");
}

#[test]
fn watch_resumes_from_a_resource_version_and_filters() {
    let s = TestServer::start();
    let (_, first) = s.json("POST", CMS, &cm("a", json!({"app": "web"})));
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    s.json("POST", CMS, &cm("b", json!({"app": "db"})));
    s.json("POST", CMS, &cm("c", json!({"app": "web"})));
    s.http(
        "PATCH",
        &format!("{CMS}/a"),
        Some((
            "application/merge-patch+json",
            br#"{"data":{"k":"2"}}"#.to_vec(),
        )),
    );
    let events = collect(
        &s,
        &format!("{CMS}?watch=true&resourceVersion={rv}&labelSelector=app%3Dweb"),
        2,
        Duration::from_secs(10),
        || {},
    );
    assert_eq!(
        summary(&events),
        [
            ("ADDED".into(), "c".into()),
            ("MODIFIED".into(), "a".into())
        ]
    );
    let events = collect(
        &s,
        &format!("{CMS}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3Db"),
        1,
        Duration::from_secs(10),
        || {},
    );
    assert_eq!(summary(&events), [("ADDED".into(), "b".into())]);
    // Other namespaces are not seen in a namespaced watch.
    s.json(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}),
    );
    let events = collect(
        &s,
        &format!("{CMS}?watch=true&resourceVersion={rv}"),
        5,
        Duration::from_secs(2),
        || {
            s.json(
                "POST",
                "/api/v1/namespaces/other/configmaps",
                &cm("elsewhere", json!({})),
            );
        },
    );
    assert!(
        summary(&events).iter().all(|(_, n)| n != "elsewhere"),
        "{events:?}"
    );
}

#[test]
fn too_old_resource_version_gets_410_expired() {
    let s = TestServer::start_with(&["--event-window", "5"]);
    let (_, first) = s.json("POST", CMS, &cm("x0", json!({})));
    let old = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for i in 1..20 {
        s.json("POST", CMS, &cm(&format!("x{i}"), json!({})));
    }
    let events = collect(
        &s,
        &format!("{CMS}?watch=true&resourceVersion={old}"),
        2,
        Duration::from_secs(5),
        || {},
    );
    assert_eq!(
        events.len(),
        1,
        "one ERROR event, then the stream ends: {events:?}"
    );
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
    assert!(events[0]["object"]["message"]
        .as_str()
        .unwrap()
        .starts_with("too old resource version"));
}

#[test]
fn bookmarks_only_when_asked_and_timeout_ends_the_stream() {
    let s = TestServer::start();
    let (_, list) = s.http("GET", CMS, None);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let events = collect(
        &s,
        &format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=2"),
        10,
        Duration::from_secs(10),
        || {},
    );
    assert!(events.is_empty(), "no unsolicited bookmarks: {events:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "timeoutSeconds=2 ended the watch after {took:?}"
    );
}

/// kube-apiserver sends a watch that asked for bookmarks one 2 s before its timeout (and
/// every minute before that), so that the client's next watch resumes from a recent
/// revision; kube-rs's and client-go's watchers ask for them.
#[test]
fn a_bookmark_comes_before_the_timeout() {
    let s = TestServer::start();
    let (_, list) = s.http("GET", CMS, None);
    let rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let started = Instant::now();
    let path =
        format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=4&allowWatchBookmarks=true");
    let events = collect(&s, &path, 10, Duration::from_secs(10), || {});
    let took = started.elapsed();
    assert_eq!(summary(&events).len(), 1, "one bookmark: {events:?}");
    let b = &events[0];
    assert_eq!(b["type"], "BOOKMARK", "{events:?}");
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert_eq!(b["object"]["apiVersion"], "v1");
    let at: u64 = b["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= rv, "bookmark at {at}, listed at {rv}");
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "timeoutSeconds=4 ended the watch after {took:?}"
    );

    // A watch of 2 s or less has no time for one.
    let path =
        format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=2&allowWatchBookmarks=true");
    let events = collect(&s, &path, 10, Duration::from_secs(10), || {});
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn many_watchers_all_see_a_write() {
    let s = TestServer::start();
    let c = s.client();
    let (_, list) = s.http("GET", CMS, None);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    smol::block_on(async {
        let mut streams = Vec::new();
        for _ in 0..50 {
            // Each stream holds its own connection.
            let c = api::client::Client::new(
                api::client::ClientConfig::from_kubeconfig(
                    &api::kubeconfig::Kubeconfig::load(&s.kubeconfig()).unwrap(),
                    None,
                )
                .unwrap(),
            )
            .unwrap();
            streams.push(
                c.stream_lines(
                    &format!("{CMS}?watch=true&resourceVersion={rv}"),
                    "application/json",
                )
                .await
                .unwrap(),
            );
        }
        c.request(
            "POST",
            CMS,
            Some((
                "application/json",
                serde_json::to_vec(&cm("fan", json!({}))).unwrap(),
            )),
            "application/json",
        )
        .await
        .unwrap();
        for st in &mut streams {
            // The server's own controllers may write ConfigMaps meanwhile (kube-root-ca.crt in
            // a namespace made at start-up): every watcher sees those, then the write.
            loop {
                let ev = st.next().await.unwrap().unwrap();
                if ev["object"]["metadata"]["name"] == "fan" {
                    assert_eq!(ev["type"], "ADDED");
                    break;
                }
            }
        }
    });
}

#[test]
fn updates_to_immutable_pod_fields_are_refused() {
    let s = TestServer::start();
    let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
        "spec":{"containers":[{"name":"c","image":"busybox:1"}]}});
    s.json("POST", "/api/v1/namespaces/default/pods", &pod);
    let (code, e) = s.http(
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        Some((
            "application/merge-patch+json",
            br#"{"spec":{"restartPolicy":"Never"}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 422, "{e}");
    let (code, _) = s.http(
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        Some((
            "application/strategic-merge-patch+json",
            br#"{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 200, "the image may change");
}

#[test]
fn any_int64_timeout_is_taken_and_others_refused() {
    let s = TestServer::start();
    let current = || {
        let (_, list) = s.http("GET", CMS, None);
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The largest int64 (kube-apiserver takes any): the watch stays and delivers.
    for (i, timeout) in [i64::MAX.to_string(), "31536000000".to_string()]
        .iter()
        .enumerate()
    {
        let rv = current();
        let name = format!("huge-{i}");
        let events = collect(
            &s,
            &format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds={timeout}"),
            1,
            Duration::from_secs(10),
            || {
                let (code, body) = s.json("POST", CMS, &cm(&name, json!({})));
                assert_eq!(code, 201, "{body}");
            },
        );
        assert_eq!(summary(&events), [("ADDED".into(), name)], "{timeout}");
    }
    // A negative timeout ends the watch at once.
    let rv = current();
    let started = Instant::now();
    let events = collect(
        &s,
        &format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=-5"),
        10,
        Duration::from_secs(10),
        || {},
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{events:?}");
    // Past int64: 400, as kube-apiserver answers a parameter it cannot decode.
    for bad in ["18446744073709551615", "1.5", "x"] {
        let (code, body) = s.http(
            "GET",
            &format!("{CMS}?watch=true&timeoutSeconds={bad}"),
            None,
        );
        assert_eq!(code, 400, "{bad}: {body}");
    }
    let (code, _) = s.http("GET", CMS, None);
    assert_eq!(code, 200, "the server still answers");
}
