//! events.k8s.io/v1 Events, served from the one Event storage core/v1 Events use, as
//! kube-apiserver serves them: the two versions differ only in field names (kube's
//! pkg/apis/events/v1 conversion), so a request body (an object, a merge or strategic merge
//! patch, an apply configuration, a JSON patch's paths) is renamed into core/v1 before the
//! ordinary path sees it, and what that path answers (an object, a list, watch events) is
//! renamed back. Tables and Status answers pass unchanged.

use serde_json::{Map, Value};
use tide::http::Method;

use super::stream::convert_json_answer;
use super::State;
use crate::error::ApiError;

/// The group and version.
pub const GROUP: &str = "events.k8s.io";
pub const API_VERSION: &str = "events.k8s.io/v1";

/// (events.k8s.io/v1 name, core/v1 name) of the members that differ.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// One object's top-level members renamed (`to_core`: events.k8s.io/v1 to core/v1).
fn rename(obj: &mut Value, to_core: bool) {
    let Value::Object(m) = obj else { return };
    let mut renamed = Map::new();
    for (k, v) in std::mem::take(m) {
        let key = RENAMES
            .iter()
            .find(|(events, core)| if to_core { events == &k } else { core == &k })
            .map(|(events, core)| if to_core { *core } else { *events })
            .unwrap_or(k.as_str())
            .to_string();
        renamed.insert(key, v);
    }
    *m = renamed;
    if m.contains_key("apiVersion") {
        m.insert(
            "apiVersion".into(),
            Value::String(if to_core { "v1" } else { API_VERSION }.into()),
        );
    }
}

/// A JSON patch path's first segment renamed to core/v1.
fn rename_path(path: &str) -> String {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (first, tail) = rest
        .split_once('/')
        .map_or((rest, None), |(f, t)| (f, Some(t)));
    let first = RENAMES
        .iter()
        .find(|(events, _)| *events == first)
        .map_or(first, |(_, core)| core);
    match tail {
        Some(t) => format!("/{first}/{t}"),
        None => format!("/{first}"),
    }
}

/// Rewrites an events.k8s.io/v1 request body into core/v1's names.
pub(super) fn request(req: &tide::Request<State>, body: Vec<u8>) -> Result<Vec<u8>, ApiError> {
    if !matches!(req.method(), Method::Post | Method::Put | Method::Patch)
        || body.iter().all(u8::is_ascii_whitespace)
    {
        return Ok(body);
    }
    let media = super::media_type(req);
    let mut v = super::parse_write_body(req, &body)?;
    if media == "application/json-patch+json" {
        if let Value::Array(ops) = &mut v {
            for op in ops {
                for key in ["path", "from"] {
                    if let Some(p) = op.get(key).and_then(Value::as_str).map(rename_path) {
                        op[key] = Value::String(p);
                    }
                }
            }
        }
    } else {
        if let Some(kind) = v.get("kind").and_then(Value::as_str) {
            if kind != "Event" {
                return Err(ApiError::bad_request(format!(
                    "the body is a {kind}, but this endpoint serves events.k8s.io/v1 Event"
                )));
            }
        }
        rename(&mut v, true);
    }
    serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))
}

/// The core/v1 answer in events.k8s.io/v1's names.
pub(super) async fn response(r: tide::Response) -> Result<tide::Response, ApiError> {
    Ok(convert_json_answer(r, convert).await?.0)
}

fn convert(v: &mut Value) {
    if v.get("type").is_some() && v.get("object").is_some() {
        return convert(&mut v["object"]);
    }
    match v.get("kind").and_then(Value::as_str) {
        Some("Event") => rename(v, false),
        Some("EventList") => {
            v["apiVersion"] = Value::String(API_VERSION.into());
            if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
                for item in items {
                    rename(item, false);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renames_both_ways() {
        let mut e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "a"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hi", "reportingController": "c",
            "reportingInstance": "i", "action": "Act", "reason": "R", "type": "Normal",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"},
            "deprecatedCount": 3});
        let original = e.clone();
        rename(&mut e, true);
        assert_eq!(e["apiVersion"], "v1");
        assert_eq!(e["involvedObject"]["name"], "p");
        assert_eq!(e["message"], "hi");
        assert_eq!(e["reportingComponent"], "c");
        assert_eq!(e["count"], 3);
        assert_eq!(e["series"]["count"], 2);
        rename(&mut e, false);
        assert_eq!(e, original);
        assert_eq!(rename_path("/note"), "/message");
        assert_eq!(rename_path("/series/count"), "/series/count");
        assert_eq!(rename_path("/regarding/name"), "/involvedObject/name");
    }
}
