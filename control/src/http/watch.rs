//! Watch streams: `GET …?watch=true`. One JSON event per line, flushed as it happens.

use std::time::{Duration, Instant};

use api::selector::{FieldSelector, Selector as LabelSelector};
use api::{AnyObject, Kind};
use futures_lite::FutureExt;
use serde_json::{json, Value};
use tide::http::{mime, StatusCode};

use super::stream::{ChannelReader, Chunk};
use super::{object_matches, table, wants_table, ListOptions, State};
use crate::error::ApiError;
use crate::store::{EventType, StoreError};

/// How long a watch lasts when the client does not say (kube-apiserver's default minimum).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(30);
/// How long before its timeout a watch that asked for bookmarks gets its last one (as
/// kube-apiserver's watch cache does), so that the client's next watch resumes from a recent
/// revision even when its kind had no event meanwhile.
const BOOKMARK_BEFORE_END: Duration = Duration::from_secs(2);

struct Encoder {
    kind: Kind,
    as_table: bool,
    columns_sent: bool,
}

impl Encoder {
    fn event(&mut self, event_type: &str, obj: &AnyObject) -> Vec<u8> {
        if !self.as_table {
            return object_line(event_type, obj);
        }
        let t = table(
            self.kind,
            &[obj],
            &obj.meta().resource_version,
            !self.columns_sent,
        );
        self.columns_sent = true;
        line(&json!({"type": event_type, "object": t}))
    }

    fn bookmark(&self, revision: u64) -> Vec<u8> {
        let info = self.kind.info();
        line(&json!({
            "type": "BOOKMARK",
            "object": {"kind": info.kind, "apiVersion": info.api_version(), "metadata": {"resourceVersion": revision.to_string()}},
        }))
    }
}

/// `{"type":…,"object":…}` and a newline: a watch event in Kubernetes JSON.
fn object_line(event_type: &str, obj: &AnyObject) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    obj.write_json(&mut out);
    out.extend_from_slice(b"}\n");
    out
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// A watch's `timeoutSeconds`: any int64, as kube-apiserver takes it. Absent or 0: the
/// default; negative: the watch ends at once; huge: as long as the process lives. The fuzz
/// target `query_headers` calls it (through [`super::list_options`] too).
pub fn watch_timeout(t: Option<&str>) -> Result<Duration, ApiError> {
    let Some(t) = t else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let secs: i64 = t
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?;
    Ok(match secs {
        0 => DEFAULT_TIMEOUT,
        s if s < 0 => Duration::ZERO,
        s => Duration::from_secs(s.unsigned_abs()),
    })
}

/// When a watch that asked for bookmarks gets its next one, from `now`: BOOKMARK_EVERY later,
/// or BOOKMARK_BEFORE_END before its deadline if that comes first; None once that moment has
/// passed (no bookmark in a watch's last 2 s, nor in a watch shorter than that). Events do not
/// postpone it.
fn next_bookmark(now: Instant, deadline: Option<Instant>) -> Option<Instant> {
    let periodic = now + BOOKMARK_EVERY;
    let Some(deadline) = deadline else {
        return Some(periodic);
    };
    let at = periodic.min(deadline.checked_sub(BOOKMARK_BEFORE_END)?);
    (at > now).then_some(at)
}

/// A timer firing at `at`, or never.
fn timer_at(at: Option<Instant>) -> smol::Timer {
    match at {
        Some(at) => smol::Timer::at(at),
        None => smol::Timer::never(),
    }
}

fn event_name(t: EventType) -> &'static str {
    match t {
        EventType::Added => "ADDED",
        EventType::Modified => "MODIFIED",
        EventType::Deleted => "DELETED",
    }
}

fn stream_response(rx: async_channel::Receiver<Chunk>) -> tide::Response {
    let mut r = tide::Response::new(StatusCode::Ok);
    r.set_body(tide::Body::from_reader(ChannelReader::new(rx), None));
    r.set_content_type(mime::JSON);
    r
}

pub(super) async fn serve_watch(
    state: &State,
    req: &tide::Request<State>,
    kind: Kind,
    ns: Option<String>,
    (labels, fields): (LabelSelector, FieldSelector),
    options: &ListOptions,
    scope: Option<super::NodeScope>,
) -> Result<tide::Response, ApiError> {
    let timeout = options.timeout;
    let bookmarks = options.allow_bookmarks;
    let mut enc = Encoder {
        kind,
        as_table: wants_table(req),
        columns_sent: false,
    };
    let rv = options.watch_after()?;
    let (tx, rx) = async_channel::bounded::<Chunk>(64);

    let (initial, watch) = match rv {
        None => {
            let (items, rev) = state.store.list(kind, ns.as_deref()).await?;
            let beats = &state.registry.heartbeats;
            let items: Vec<AnyObject> = items
                .into_iter()
                .filter(|o| {
                    object_matches(o, ns.as_deref(), &labels, &fields)
                        && scope.as_ref().is_none_or(|s| s.shows(o))
                })
                .map(|mut o| {
                    beats.overlay_any(&mut o);
                    o
                })
                .collect();
            (items, state.store.watch(&[kind], Some(rev)).await?)
        }
        Some(after) => match state.store.watch(&[kind], Some(after)).await {
            Ok(w) => (Vec::new(), w),
            Err(StoreError::Expired { requested, oldest }) => {
                let status = *ApiError::expired(requested, oldest).0;
                let _ = tx.try_send(line(&json!({"type": "ERROR", "object": status})).into());
                drop(tx);
                return Ok(stream_response(rx));
            }
            Err(e) => return Err(e.into()),
        },
    };

    let mut watch = watch;
    let mut last_revision = state.store.revision();
    smol::spawn(async move {
        for obj in &initial {
            if tx.send(enc.event("ADDED", obj).into()).await.is_err() {
                return;
            }
        }
        // None: later than this process will live (a timeout near i64::MAX seconds).
        let deadline = Instant::now().checked_add(timeout);
        enum Step {
            Event(Option<std::sync::Arc<crate::store::WatchEvent>>),
            Bookmark,
            Done,
        }
        let mut bookmark_at = if bookmarks {
            next_bookmark(Instant::now(), deadline)
        } else {
            None
        };
        loop {
            let step = async { Step::Event(watch.next().await) }
                .or(async {
                    timer_at(bookmark_at).await;
                    Step::Bookmark
                })
                .or(async {
                    timer_at(deadline).await;
                    Step::Done
                })
                .await;
            let chunk = match step {
                Step::Event(None) | Step::Done => return,
                Step::Bookmark => {
                    bookmark_at = next_bookmark(Instant::now(), deadline);
                    enc.bookmark(last_revision).into()
                }
                Step::Event(Some(ev)) => {
                    last_revision = ev.revision;
                    if !object_matches(&ev.object, ns.as_deref(), &labels, &fields)
                        || scope.as_ref().is_some_and(|s| !s.shows(&ev.object))
                    {
                        continue;
                    }
                    if enc.as_table {
                        enc.event(event_name(ev.event_type), &ev.object).into()
                    } else {
                        // Every JSON watcher of this event sends the same bytes.
                        let wire = ev.wire.get_or_init(|| {
                            object_line(event_name(ev.event_type), &ev.object).into()
                        });
                        Chunk::Shared(wire.clone())
                    }
                }
            };
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
    })
    .detach();
    Ok(stream_response(rx))
}
