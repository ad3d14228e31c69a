//! A small in-memory API server over real TLS (certificates from [`Pki`]) for testing the
//! CLI commands' request sequences. It knows GET, POST, PUT (with resourceVersion checks
//! and injectable conflicts), DELETE (the object lingers briefly, as with a grace period),
//! lists filtered by `metadata.name`, and watches that stream DELETED events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use serde_json::{json, Value};
use smol::net::TcpListener;

use super::Session;
use crate::pki::Pki;

#[derive(Default)]
pub struct State {
    pub objects: BTreeMap<String, Value>,
    pub revision: u64,
    /// Answer this many PUTs with 409 before accepting one.
    pub conflicts_to_inject: usize,
    pub puts: usize,
    pub deletes: usize,
    /// Open watches: collection path, name filter, event sink.
    watchers: Vec<(String, Option<String>, smol::channel::Sender<String>)>,
}

pub struct FakeApi {
    pub state: Arc<Mutex<State>>,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _server: smol::Task<()>,
}

enum Answer {
    Json(u16, Value),
    Watch(smol::channel::Receiver<String>),
}

fn status(code: u16, reason: &str, message: &str) -> Answer {
    Answer::Json(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "message": message, "code": code}),
    )
}

fn name_filter(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldSelector="))
        .map(|v| v.replace("%3D", "="))
        .and_then(|v| v.strip_prefix("metadata.name=").map(str::to_string))
}

fn handle(state: &Arc<Mutex<State>>, method: &str, target: &str, body: &[u8]) -> Answer {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut st = state.lock().unwrap();
    match method {
        "GET" if query.contains("watch=true") => {
            let (tx, rx) = smol::channel::unbounded();
            st.watchers.push((path.to_string(), name_filter(query), tx));
            Answer::Watch(rx)
        }
        "GET" if !query.is_empty() => {
            let name = name_filter(query);
            let items: Vec<Value> = st
                .objects
                .iter()
                .filter(|(k, _)| {
                    k.strip_prefix(path)
                        .and_then(|rest| rest.strip_prefix('/'))
                        .is_some_and(|n| name.as_deref().is_none_or(|want| want == n))
                })
                .map(|(_, v)| v.clone())
                .collect();
            Answer::Json(
                200,
                json!({"kind": "List", "apiVersion": "v1",
                       "metadata": {"resourceVersion": st.revision.to_string()}, "items": items}),
            )
        }
        "GET" => match st.objects.get(path) {
            Some(o) => Answer::Json(200, o.clone()),
            None => status(404, "NotFound", "not found"),
        },
        "POST" => {
            let mut obj: Value = serde_json::from_slice(body).unwrap();
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let key = format!("{path}/{name}");
            if st.objects.contains_key(&key) {
                return status(409, "AlreadyExists", "already exists");
            }
            st.revision += 1;
            obj["metadata"]["resourceVersion"] = json!(st.revision.to_string());
            // A server default the manifest does not set.
            obj["spec"]["defaulted"] = json!(true);
            st.objects.insert(key, obj.clone());
            Answer::Json(201, obj)
        }
        "PUT" => {
            let mut obj: Value = serde_json::from_slice(body).unwrap();
            st.puts += 1;
            if st.conflicts_to_inject > 0 {
                st.conflicts_to_inject -= 1;
                // Someone else wrote meanwhile.
                st.revision += 1;
                let rv = st.revision.to_string();
                if let Some(live) = st.objects.get_mut(path) {
                    live["metadata"]["resourceVersion"] = json!(rv);
                }
                return status(409, "Conflict", "the object has been modified");
            }
            let live_rv = st
                .objects
                .get(path)
                .map(|o| o["metadata"]["resourceVersion"].clone());
            if live_rv.as_ref() != Some(&obj["metadata"]["resourceVersion"]) {
                return status(409, "Conflict", "the object has been modified");
            }
            st.revision += 1;
            obj["metadata"]["resourceVersion"] = json!(st.revision.to_string());
            obj["spec"]["defaulted"] = json!(true);
            st.objects.insert(path.to_string(), obj.clone());
            Answer::Json(200, obj)
        }
        "DELETE" => {
            st.deletes += 1;
            let Some(obj) = st.objects.get_mut(path) else {
                let name = path.rsplit('/').next().unwrap_or("");
                return status(404, "NotFound", &format!("pods \"{name}\" not found"));
            };
            obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            let answer = obj.clone();
            // The object goes away a little later, as after a grace period.
            let state = state.clone();
            let key = path.to_string();
            smol::spawn(async move {
                smol::Timer::after(Duration::from_millis(200)).await;
                let mut st = state.lock().unwrap();
                if let Some(gone) = st.objects.remove(&key) {
                    st.revision += 1;
                    let (collection, name) = key.rsplit_once('/').unwrap();
                    let line = json!({"type": "DELETED", "object": gone}).to_string() + "\n";
                    for (path, filter, tx) in &st.watchers {
                        if path == collection && filter.as_deref().is_none_or(|f| f == name) {
                            let _ = tx.try_send(line.clone());
                        }
                    }
                }
            })
            .detach();
            Answer::Json(200, answer)
        }
        _ => status(405, "MethodNotAllowed", "no"),
    }
}

async fn serve_connection(
    tls: futures_rustls::server::TlsStream<smol::net::TcpStream>,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    let mut conn = BufReader::new(tls);
    loop {
        let mut line = String::new();
        if conn.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut len = 0;
        loop {
            let mut h = String::new();
            conn.read_line(&mut h).await?;
            let h = h.trim_end().to_ascii_lowercase();
            if h.is_empty() {
                break;
            }
            if let Some(v) = h.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        conn.read_exact(&mut body).await?;
        let answer = handle(&state, &method, &target, &body);
        let out = conn.get_mut();
        match answer {
            Answer::Json(code, v) => {
                let v = v.to_string();
                let head = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    v.len()
                );
                out.write_all(head.as_bytes()).await?;
                out.write_all(v.as_bytes()).await?;
                out.flush().await?;
            }
            Answer::Watch(rx) => {
                out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .await?;
                out.flush().await?;
                while let Ok(line) = rx.recv().await {
                    out.write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes())
                        .await?;
                    out.flush().await?;
                }
                out.write_all(b"0\r\n\r\n").await?;
                out.flush().await?;
            }
        }
    }
}

impl FakeApi {
    pub async fn start() -> FakeApi {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let pki = Pki::load_or_create(dir.path(), &[], &url).unwrap();
        let acceptor = futures_rustls::TlsAcceptor::from(pki.server_config().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let server_state = state.clone();
        let server = smol::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let state = server_state.clone();
                smol::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = serve_connection(tls, state).await;
                    }
                })
                .detach();
            }
        });
        FakeApi {
            state,
            kubeconfig: pki.kubeconfig_path().to_path_buf(),
            _dir: dir,
            _server: server,
        }
    }

    /// A session as the CLI opens it, from the admin kubeconfig, in namespace `dev`.
    pub fn session(&self) -> Session {
        let kc = api::kubeconfig::Kubeconfig::load(&self.kubeconfig).unwrap();
        Session {
            client: api::client::Client::from_kubeconfig(&kc).unwrap(),
            namespace: "dev".into(),
            namespace_explicit: false,
        }
    }
}
