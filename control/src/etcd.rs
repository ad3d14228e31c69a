//! An etcd v3 client over etcd's JSON gateway (`/v3/kv/*`, `/v3/watch`, `/v3/lease/*`), for the
//! etcd datastore (issue 19).
//!
//! Why the gateway and not a gRPC client: the maintained Rust clients (etcd-client and its
//! kin) stand on tonic and tokio, a second async runtime and a few MB of binary beside smol,
//! while every etcd since 3.4 serves the same API as JSON over HTTP/1.1 on its client port.
//! Over skiff's one HTTP transport (`api::transport`: rustls, keep-alive pool, streamed
//! bodies) that is a few hundred lines of typed requests, and watches and lease keep-alives
//! are streamed answers of one JSON object per message. The price is JSON and base64 instead
//! of protobuf on the wire, which costs CPU on both ends but no extra round trips.
//!
//! Endpoints are tried in order: a request that cannot reach one (connect or TLS failure) goes
//! to the next, and the client sticks to the one that answered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::transport::{Options, Response, Transport, TransportError, Url};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

/// What went wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd endpoint {0:?}: not an http(s) URL")]
    Endpoint(String),
    #[error("no etcd endpoint given")]
    NoEndpoint,
    #[error("etcd TLS settings: {0}")]
    Tls(String),
    #[error("etcd at {endpoint}: {error}")]
    Transport {
        endpoint: String,
        error: TransportError,
    },
    /// etcd answered with a gRPC status (code 11, OutOfRange, is a compacted revision).
    #[error("etcd: {message} (gRPC code {code})")]
    Status { code: i32, message: String },
    #[error("etcd answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("etcd's answer could not be read: {0}")]
    Decode(String),
    /// The revision asked for is older than the last compaction.
    #[error("required revision {requested} has been compacted (compacted at {compacted})")]
    Compacted { requested: i64, compacted: i64 },
}

/// gRPC's OutOfRange: etcd's "mvcc: required revision has been compacted".
const GRPC_OUT_OF_RANGE: i32 = 11;

/// How to reach and trust the etcd cluster (`--datastore-endpoint`, `--datastore-cafile`,
/// `--datastore-certfile`, `--datastore-keyfile`, as k3s names them).
#[derive(Clone, Debug, Default)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub ca_pem: Option<String>,
    pub client_cert_pem: Option<String>,
    pub client_key_pem: Option<String>,
}

/// One key's stored state.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct KeyValue {
    #[serde(deserialize_with = "b64")]
    pub key: Vec<u8>,
    #[serde(default, deserialize_with = "b64")]
    pub value: Vec<u8>,
    #[serde(default, deserialize_with = "int64")]
    pub create_revision: i64,
    #[serde(default, deserialize_with = "int64")]
    pub mod_revision: i64,
    #[serde(default, deserialize_with = "int64")]
    pub version: i64,
    #[serde(default, deserialize_with = "int64")]
    pub lease: i64,
}

/// A range's keys and the store's revision it was read at.
#[derive(Clone, Debug)]
pub struct Range {
    pub revision: i64,
    /// The id of the etcd cluster that answered (the same from every member).
    pub cluster_id: u64,
    pub kvs: Vec<KeyValue>,
    /// More keys matched than `limit` let through.
    pub more: bool,
    pub count: i64,
}

/// A condition of a transaction on one key.
#[derive(Clone, Debug)]
pub enum Compare {
    /// The key was last changed at this revision (optimistic concurrency).
    ModRevision(Vec<u8>, i64),
    /// The key does not exist (its create revision is 0).
    Absent(Vec<u8>),
    /// Every key in `[key, range_end)` was last changed before `revision` (nothing in the
    /// range was written at or after it; keys deleted since are not seen).
    ModRevisionBelow {
        key: Vec<u8>,
        range_end: Vec<u8>,
        revision: i64,
    },
}

/// One operation of a transaction.
#[derive(Clone, Debug)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    Delete {
        key: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
    },
}

/// The outcome of one operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Put,
    /// How many keys went, and what they held.
    Delete {
        deleted: i64,
        prev: Vec<KeyValue>,
    },
    Get(Vec<KeyValue>),
}

/// A transaction's outcome: whether its compares held (so the success branch ran), the
/// revision after it, and each operation's result.
#[derive(Clone, Debug)]
pub struct TxnResult {
    pub succeeded: bool,
    pub revision: i64,
    pub results: Vec<OpResult>,
}

/// What a watch delivers: a change of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    Put {
        kv: KeyValue,
        prev: Option<KeyValue>,
    },
    Delete {
        kv: KeyValue,
        prev: Option<KeyValue>,
    },
}

impl WatchEvent {
    pub fn kv(&self) -> &KeyValue {
        match self {
            WatchEvent::Put { kv, .. } | WatchEvent::Delete { kv, .. } => kv,
        }
    }
}

/// A client of one etcd cluster; cheap to clone.
#[derive(Clone)]
pub struct EtcdClient {
    transport: Transport,
    /// Watches hold their answer open for as long as they run: no read timeout.
    streams: Transport,
    endpoints: Arc<Vec<Url>>,
    current: Arc<AtomicUsize>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

/// The end of the range of every key that starts with `prefix` (etcd's `WithPrefix`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the key space.
    vec![0]
}

impl EtcdClient {
    pub fn new(config: &EtcdConfig) -> Result<EtcdClient, EtcdError> {
        if config.endpoints.is_empty() {
            return Err(EtcdError::NoEndpoint);
        }
        let endpoints = config
            .endpoints
            .iter()
            .map(|e| {
                Url::parse(e.trim())
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https"))
                    .ok_or_else(|| EtcdError::Endpoint(e.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tls = if config.ca_pem.is_some() || config.client_cert_pem.is_some() {
            api::client::tls_config(&api::client::ClientConfig {
                server: String::new(),
                ca_pem: config.ca_pem.clone(),
                token: None,
                client_cert_pem: config.client_cert_pem.clone(),
                client_key_pem: config.client_key_pem.clone(),
                insecure_skip_tls_verify: false,
                tls_server_name: None,
                client_identity: None,
                failover_servers: Vec::new(),
            })
            .map_err(|e| EtcdError::Tls(e.to_string()))?
        } else {
            // http:// endpoints only: an https:// endpoint needs `--datastore-cafile` (no
            // public roots are trusted for the cluster's own datastore).
            let roots = rustls::RootCertStore::empty();
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| EtcdError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth()
        };
        let tls = Arc::new(tls);
        let options = Options {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Some(Duration::from_secs(30)),
            pool_size: 32,
            ..Options::default()
        };
        let streams = Options {
            read_timeout: None,
            pool_size: 0,
            ..options.clone()
        };
        Ok(EtcdClient {
            transport: Transport::new(tls.clone(), options),
            streams: Transport::new(tls, streams),
            endpoints: Arc::new(endpoints),
            current: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Sends `body` to `path` on the current endpoint, moving on to the next ones while an
    /// endpoint cannot be reached. Only connection failures move on: an answer, even an
    /// error, is the cluster's.
    async fn send(
        &self,
        transport: &Transport,
        path: &str,
        body: &Value,
    ) -> Result<Response, EtcdError> {
        let body = serde_json::to_vec(body).map_err(|e| EtcdError::Decode(e.to_string()))?;
        let first = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.endpoints.len() {
            let at = (first + i) % self.endpoints.len();
            let base = &self.endpoints[at];
            let url = base
                .join(path)
                .map_err(|_| EtcdError::Endpoint(base.to_string()))?;
            match transport
                .send("POST", &url, &[("Content-Type", "application/json")], &body)
                .await
            {
                Ok(res) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(res);
                }
                Err(
                    error @ (TransportError::Connect { .. }
                    | TransportError::Tls { .. }
                    | TransportError::Timeout),
                ) => {
                    tracing::warn!(endpoint = %base, %error, "etcd endpoint unreachable");
                    last = Some(EtcdError::Transport {
                        endpoint: base.to_string(),
                        error,
                    });
                }
                Err(error) => {
                    return Err(EtcdError::Transport {
                        endpoint: base.to_string(),
                        error,
                    })
                }
            }
        }
        Err(last.unwrap_or(EtcdError::NoEndpoint))
    }

    /// One unary call: the answer decoded, or etcd's error.
    async fn call<T: DeserializeOwned>(&self, path: &str, body: Value) -> Result<T, EtcdError> {
        self.call_once(path, &body).await
    }

    /// A call that may be sent twice (a read): besides an endpoint that cannot be reached,
    /// a connection that breaks under the request (its member went away mid-call) moves it
    /// on to the next endpoint, once per endpoint.
    async fn call_idempotent<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Value,
    ) -> Result<T, EtcdError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.call_once(path, &body).await {
                Err(EtcdError::Transport {
                    endpoint,
                    error: error @ (TransportError::Io(_) | TransportError::Protocol(_)),
                }) if attempt <= self.endpoints.len() => {
                    let at = self.current.load(Ordering::Relaxed);
                    tracing::warn!(%endpoint, %error, "etcd connection broke; reading from the next endpoint");
                    self.current
                        .store((at + 1) % self.endpoints.len(), Ordering::Relaxed);
                }
                other => return other,
            }
        }
    }

    async fn call_once<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, EtcdError> {
        let mut res = self.send(&self.transport, path, body).await?;
        let status = res.status;
        let bytes = res
            .bytes(64 << 20)
            .await
            .map_err(|error| EtcdError::Transport {
                endpoint: path.to_string(),
                error,
            })?;
        if !(200..300).contains(&status) {
            return Err(error_of(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| EtcdError::Decode(e.to_string()))
    }

    /// Keys from `key` up to `range_end` (None: just `key`), at `revision` (None: the
    /// latest), at most `limit` of them (0: all). A linearizable read.
    pub async fn range(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        revision: Option<i64>,
        limit: i64,
    ) -> Result<Range, EtcdError> {
        self.range_with(key, range_end, revision, limit, false)
            .await
    }

    /// [`EtcdClient::range`], or a serializable read if `serializable`: answered by the
    /// member from what it has applied, without a round through the leader, so possibly a
    /// little behind (what a transaction comparing the revisions read then finds out).
    pub async fn range_with(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        revision: Option<i64>,
        limit: i64,
        serializable: bool,
    ) -> Result<Range, EtcdError> {
        let mut body = json!({ "key": B64.encode(key) });
        if serializable {
            body["serializable"] = true.into();
        }
        if let Some(end) = range_end {
            body["range_end"] = B64.encode(end).into();
        }
        if let Some(rev) = revision {
            body["revision"] = rev.to_string().into();
        }
        if limit > 0 {
            body["limit"] = limit.to_string().into();
        }
        let r: RangeAnswer = self
            .call_idempotent("/v3/kv/range", body)
            .await
            .map_err(|e| compacted(e, revision.unwrap_or(0)))?;
        Ok(Range {
            revision: r.header.revision,
            cluster_id: r.header.cluster_id,
            kvs: r.kvs,
            more: r.more,
            count: r.count,
        })
    }

    /// The id of the etcd cluster, as every member reports it (hex, as etcdctl prints it):
    /// servers that show the same one share their datastore.
    pub async fn cluster_id(&self) -> Result<String, EtcdError> {
        let r = self.range(b"/registry/", None, None, 1).await?;
        Ok(format!("{:x}", r.cluster_id))
    }

    /// One key's current state, if it exists.
    pub async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, EtcdError> {
        Ok(self.range(key, None, None, 1).await?.kvs.into_iter().next())
    }

    /// Writes `value` under `key` unconditionally; the revision after the write.
    pub async fn put(&self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, EtcdError> {
        let mut body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        if lease != 0 {
            body["lease"] = lease.to_string().into();
        }
        let r: HeaderOnly = self.call("/v3/kv/put", body).await?;
        Ok(r.header.revision)
    }

    /// If every compare holds, runs `success`, else `failure`, atomically.
    pub async fn txn(
        &self,
        compares: &[Compare],
        success: &[Op],
        failure: &[Op],
    ) -> Result<TxnResult, EtcdError> {
        let compare: Vec<Value> = compares
            .iter()
            .map(|c| match c {
                Compare::ModRevision(key, rev) => json!({
                    "result": "EQUAL", "target": "MOD",
                    "key": B64.encode(key), "mod_revision": rev.to_string(),
                }),
                Compare::Absent(key) => json!({
                    "result": "EQUAL", "target": "CREATE",
                    "key": B64.encode(key), "create_revision": "0",
                }),
                Compare::ModRevisionBelow {
                    key,
                    range_end,
                    revision,
                } => json!({
                    "result": "LESS", "target": "MOD",
                    "key": B64.encode(key), "range_end": B64.encode(range_end),
                    "mod_revision": revision.to_string(),
                }),
            })
            .collect();
        let ops = |ops: &[Op]| -> Vec<Value> {
            ops.iter()
                .map(|op| match op {
                    Op::Put { key, value, lease } => {
                        let mut put = json!({ "key": B64.encode(key), "value": B64.encode(value) });
                        if *lease != 0 {
                            put["lease"] = lease.to_string().into();
                        }
                        json!({ "request_put": put })
                    }
                    Op::Delete { key } => json!({
                        "request_delete_range": { "key": B64.encode(key), "prev_kv": true }
                    }),
                    Op::Get { key } => json!({ "request_range": { "key": B64.encode(key) } }),
                })
                .collect()
        };
        let body = json!({ "compare": compare, "success": ops(success), "failure": ops(failure) });
        let r: TxnAnswer = self.call("/v3/kv/txn", body).await?;
        let ran = if r.succeeded { success } else { failure };
        let results = ran
            .iter()
            .zip(
                r.responses
                    .into_iter()
                    .chain(std::iter::repeat(Value::Null)),
            )
            .map(|(op, answer)| op_result(op, answer))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TxnResult {
            succeeded: r.succeeded,
            revision: r.header.revision,
            results,
        })
    }

    /// Forgets every revision before `revision`; watches and reads from before it then get
    /// [`EtcdError::Compacted`].
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let _: HeaderOnly = self
            .call(
                "/v3/kv/compaction",
                json!({ "revision": revision.to_string() }),
            )
            .await?;
        Ok(())
    }

    /// A lease of `ttl` seconds; its id.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        let r: LeaseAnswer = self
            .call("/v3/lease/grant", json!({ "TTL": ttl.to_string() }))
            .await?;
        Ok(r.id)
    }

    /// Renews a lease once; its remaining time to live (0 or less: it has expired).
    pub async fn lease_keep_alive(&self, id: i64) -> Result<i64, EtcdError> {
        // The gateway's keep-alive is a stream; one request gets one answer, then the
        // stream is dropped (which the gateway takes as the end of the stream).
        let mut res = self
            .send(
                &self.streams,
                "/v3/lease/keepalive",
                &json!({ "ID": id.to_string() }),
            )
            .await?;
        let mut lines = Lines::default();
        let line = lines
            .next(&mut res)
            .await?
            .ok_or_else(|| EtcdError::Decode("the keep-alive stream ended at once".into()))?;
        let msg: StreamMessage<LeaseAnswer> =
            serde_json::from_slice(&line).map_err(|e| EtcdError::Decode(e.to_string()))?;
        match msg {
            StreamMessage::Result(r) => Ok(r.ttl),
            StreamMessage::Error(e) => Err(EtcdError::Status {
                code: e.code,
                message: e.message,
            }),
        }
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        let _: HeaderOnly = self
            .call("/v3/lease/revoke", json!({ "ID": id.to_string() }))
            .await?;
        Ok(())
    }

    /// Watches `key` up to `range_end` (None: just `key`) from `start_revision` (0: from now
    /// on). Events come in revision order, with the previous value of each key.
    pub async fn watch(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        start_revision: i64,
    ) -> Result<Watch, EtcdError> {
        let mut create = json!({ "key": B64.encode(key), "prev_kv": true });
        if let Some(end) = range_end {
            create["range_end"] = B64.encode(end).into();
        }
        if start_revision > 0 {
            create["start_revision"] = start_revision.to_string().into();
        }
        let res = self
            .send(
                &self.streams,
                "/v3/watch",
                &json!({ "create_request": create }),
            )
            .await?;
        if !res.is_success() {
            let mut res = res;
            let status = res.status;
            let body = res.bytes(1 << 20).await.unwrap_or_default();
            return Err(error_of(status, &body));
        }
        let mut watch = Watch {
            res,
            lines: Lines::default(),
            start_revision,
        };
        // The first message confirms the watch (etcd sends no events with it). A start
        // revision that was compacted away is confirmed too, then canceled in the next
        // message, which `next` reports as [`EtcdError::Compacted`].
        match watch.message().await? {
            Some(m) if m.canceled => return Err(watch.canceled(&m)),
            Some(m) if m.created && m.events.is_empty() => {}
            _ => {
                return Err(EtcdError::Decode(
                    "the watch stream did not confirm the watch".into(),
                ))
            }
        }
        Ok(watch)
    }
}

/// A running watch; dropping it ends the watch.
pub struct Watch {
    res: Response,
    lines: Lines,
    start_revision: i64,
}

/// A batch of changes, all at revisions up to `revision` (the store's revision when etcd
/// sent it).
#[derive(Clone, Debug)]
pub struct WatchBatch {
    pub revision: i64,
    pub events: Vec<WatchEvent>,
}

impl Watch {
    async fn message(&mut self) -> Result<Option<WatchMessage>, EtcdError> {
        let Some(line) = self.lines.next(&mut self.res).await? else {
            return Ok(None);
        };
        let msg: StreamMessage<WatchMessage> =
            serde_json::from_slice(&line).map_err(|e| EtcdError::Decode(e.to_string()))?;
        match msg {
            StreamMessage::Result(m) => Ok(Some(m)),
            StreamMessage::Error(e) => Err(EtcdError::Status {
                code: e.code,
                message: e.message,
            }),
        }
    }

    fn canceled(&self, m: &WatchMessage) -> EtcdError {
        if m.compact_revision > 0 {
            EtcdError::Compacted {
                requested: self.start_revision,
                compacted: m.compact_revision,
            }
        } else {
            EtcdError::Status {
                code: 1,
                message: format!("watch canceled: {}", m.cancel_reason),
            }
        }
    }

    /// The next batch of changes; None when etcd ended the stream (the watcher then starts
    /// again from the last revision it saw plus one).
    pub async fn next(&mut self) -> Result<Option<WatchBatch>, EtcdError> {
        loop {
            let Some(m) = self.message().await? else {
                return Ok(None);
            };
            if m.canceled {
                return Err(self.canceled(&m));
            }
            if m.events.is_empty() {
                // Progress notifications and the like: nothing changed.
                continue;
            }
            let events = m
                .events
                .into_iter()
                .map(|e| {
                    if e.kind == "DELETE" {
                        WatchEvent::Delete {
                            kv: e.kv,
                            prev: e.prev_kv,
                        }
                    } else {
                        WatchEvent::Put {
                            kv: e.kv,
                            prev: e.prev_kv,
                        }
                    }
                })
                .collect();
            return Ok(Some(WatchBatch {
                revision: m.header.revision,
                events,
            }));
        }
    }
}

/// Splits a streamed answer into its newline-separated JSON messages.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
}

impl Lines {
    async fn next(&mut self, res: &mut Response) -> Result<Option<Vec<u8>>, EtcdError> {
        loop {
            if let Some(at) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            match res.chunk().await {
                Ok(Some(data)) => self.buf.extend_from_slice(&data),
                Ok(None) if self.buf.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                Ok(None) => return Ok(Some(std::mem::take(&mut self.buf))),
                Err(error) => {
                    return Err(EtcdError::Transport {
                        endpoint: "stream".into(),
                        error,
                    })
                }
            }
        }
    }
}

fn error_of(status: u16, body: &[u8]) -> EtcdError {
    match serde_json::from_slice::<GatewayError>(body) {
        Ok(e) if e.code != 0 || !e.message.is_empty() => EtcdError::Status {
            code: e.code,
            message: e.message,
        },
        _ => EtcdError::Http {
            status,
            body: String::from_utf8_lossy(body).chars().take(200).collect(),
        },
    }
}

/// etcd's "required revision has been compacted" as [`EtcdError::Compacted`].
fn compacted(e: EtcdError, requested: i64) -> EtcdError {
    match e {
        EtcdError::Status { code, .. } if code == GRPC_OUT_OF_RANGE => EtcdError::Compacted {
            requested,
            compacted: 0,
        },
        e => e,
    }
}

fn op_result(op: &Op, answer: Value) -> Result<OpResult, EtcdError> {
    let decode = |v: Value| -> Result<RangeAnswer, EtcdError> {
        serde_json::from_value(v).map_err(|e| EtcdError::Decode(e.to_string()))
    };
    Ok(match op {
        Op::Put { .. } => OpResult::Put,
        Op::Get { .. } => OpResult::Get(decode(answer["response_range"].clone())?.kvs),
        Op::Delete { .. } => {
            let d: DeleteAnswer = serde_json::from_value(answer["response_delete_range"].clone())
                .map_err(|e| EtcdError::Decode(e.to_string()))?;
            OpResult::Delete {
                deleted: d.deleted,
                prev: d.prev_kvs,
            }
        }
    })
}

// The gateway's JSON: proto3's mapping, so int64 fields are strings, bytes are base64, and
// fields at their default value are left out.

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default, deserialize_with = "int64")]
    revision: i64,
    #[serde(default, deserialize_with = "uint64")]
    cluster_id: u64,
}

#[derive(Deserialize)]
struct HeaderOnly {
    #[serde(default)]
    #[allow(dead_code)]
    header: Header,
}

#[derive(Deserialize, Default)]
struct RangeAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    kvs: Vec<KeyValue>,
    #[serde(default)]
    more: bool,
    #[serde(default, deserialize_with = "int64")]
    count: i64,
}

#[derive(Deserialize)]
struct DeleteAnswer {
    #[serde(default, deserialize_with = "int64")]
    deleted: i64,
    #[serde(default)]
    prev_kvs: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct TxnAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    succeeded: bool,
    #[serde(default)]
    responses: Vec<Value>,
}

#[derive(Deserialize)]
struct LeaseAnswer {
    #[serde(rename = "ID", default, deserialize_with = "int64")]
    id: i64,
    #[serde(rename = "TTL", default, deserialize_with = "int64")]
    ttl: i64,
}

#[derive(Deserialize)]
struct GatewayError {
    #[serde(default)]
    code: i32,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
enum StreamMessage<T> {
    #[serde(rename = "result")]
    Result(T),
    #[serde(rename = "error")]
    Error(GatewayError),
}

#[derive(Deserialize)]
struct WatchMessage {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    created: bool,
    #[serde(default)]
    canceled: bool,
    #[serde(default, deserialize_with = "int64")]
    compact_revision: i64,
    #[serde(default)]
    cancel_reason: String,
    #[serde(default)]
    events: Vec<EventAnswer>,
}

#[derive(Deserialize)]
struct EventAnswer {
    /// "PUT" is the default and so left out; "DELETE" is written.
    #[serde(rename = "type", default)]
    kind: String,
    kv: KeyValue,
    #[serde(default)]
    prev_kv: Option<KeyValue>,
}

/// An int64 as proto3's JSON writes it: a string (a plain number is accepted too).
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        S(String),
        N(i64),
    }
    match Int::deserialize(d)? {
        Int::N(n) => Ok(n),
        Int::S(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

fn uint64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        S(String),
        N(u64),
    }
    match Int::deserialize(d)? {
        Int::N(n) => Ok(n),
        Int::S(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

fn b64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = String::deserialize(d)?;
    B64.decode(s).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn gateway_json_decodes() {
        let w: StreamMessage<WatchMessage> = serde_json::from_str(
            r#"{"result":{"header":{"revision":"3"},"events":[{"kv":{"key":"L2E=","create_revision":"2","mod_revision":"3","version":"2","value":"aGk="},"prev_kv":{"key":"L2E=","mod_revision":"2"}},{"type":"DELETE","kv":{"key":"L2E=","mod_revision":"4"}}]}}"#,
        )
        .unwrap();
        let StreamMessage::Result(w) = w else {
            panic!("a result")
        };
        assert_eq!(w.header.revision, 3);
        assert_eq!(w.events[0].kv.value, b"hi");
        assert_eq!(w.events[0].prev_kv.as_ref().unwrap().mod_revision, 2);
        assert_eq!(w.events[1].kind, "DELETE");
        let e = error_of(
            400,
            br#"{"error":"etcdserver: mvcc: required revision has been compacted","message":"etcdserver: mvcc: required revision has been compacted","code":11}"#,
        );
        assert!(matches!(
            compacted(e, 1),
            EtcdError::Compacted { requested: 1, .. }
        ));
    }
}
