//! Metadata-only answers (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`
//! or `as=PartialObjectMetadataList`), as controller runtimes' metadata informers and the
//! garbage collectors of client libraries ask for them: an object becomes a
//! `meta.k8s.io/v1 PartialObjectMetadata` (its `metadata` alone), a list a
//! `PartialObjectMetadataList` of such items (with the list's `resourceVersion` and
//! `continue`), and each watch event's object the same. The ordinary path answers JSON and
//! the answer is converted as it passes, for every resource alike. Tables and Status answers
//! pass unchanged.

use serde_json::{json, Map, Value};

use super::stream::convert_json_answer;
use super::State;
use crate::error::ApiError;

/// The group version of the answer (`meta.k8s.io/v1` or `/v1beta1`).
pub(super) struct Answer {
    api_version: &'static str,
}

/// The metadata-only media type the client prefers, if its first acceptable JSON or
/// protobuf range asks for one. The fuzz target `query_headers` calls it.
pub fn accepts_metadata(accept: Option<&str>) -> Option<&'static str> {
    let first = super::discovery::MediaRange::parse(accept?.split(',').next()?)?;
    let as_ = first.param("as");
    if !matches!(as_, "PartialObjectMetadata" | "PartialObjectMetadataList")
        || first.param("g") != "meta.k8s.io"
    {
        return None;
    }
    match first.param("v") {
        "v1" => Some("meta.k8s.io/v1"),
        "v1beta1" => Some("meta.k8s.io/v1beta1"),
        _ => None,
    }
}

/// Asks the ordinary path for JSON, to be converted by [`response`].
pub(super) fn request(req: &mut tide::Request<State>, api_version: &'static str) -> Answer {
    req.insert_header("Accept", "application/json");
    Answer { api_version }
}

/// The metadata-only form of an object, list or watch event (JSON); anything else (a
/// Status, a Table) as it is.
fn convert(v: &mut Value, api_version: &str) {
    let partial = |obj: &Value| -> Value {
        json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": api_version,
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })
    };
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind == "Status" || kind == "Table" {
        return;
    }
    if v.get("type").is_some() && v.get("object").is_some() && v.get("metadata").is_none() {
        // A watch event: its object (a Status on errors stays).
        convert(&mut v["object"], api_version);
        return;
    }
    if v.get("items").is_some() || kind.ends_with("List") {
        let items: Vec<Value> = v
            .get("items")
            .and_then(Value::as_array)
            .map(|items| items.iter().map(partial).collect())
            .unwrap_or_default();
        let mut meta = Map::new();
        if let Some(m) = v.get("metadata").and_then(Value::as_object) {
            for key in ["resourceVersion", "continue", "remainingItemCount"] {
                if let Some(x) = m.get(key) {
                    meta.insert(key.into(), x.clone());
                }
            }
        }
        *v = json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": api_version,
            "metadata": meta,
            "items": items,
        });
        return;
    }
    if v.get("metadata").is_some() {
        *v = partial(v);
    }
}

/// Converts the ordinary path's JSON answer to its metadata-only form.
pub(super) async fn response(
    r: tide::Response,
    answer: Answer,
) -> Result<tide::Response, ApiError> {
    let api_version = answer.api_version;
    let (r, _) = convert_json_answer(r, move |v| convert(v, api_version)).await?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_of_metadata_clients() {
        let list = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(accepts_metadata(Some(list)), Some("meta.k8s.io/v1"));
        assert_eq!(
            accepts_metadata(Some(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"
            )),
            Some("meta.k8s.io/v1beta1")
        );
        assert_eq!(accepts_metadata(Some("application/json")), None);
        assert_eq!(
            accepts_metadata(Some("application/json;as=Table;g=meta.k8s.io;v=v1")),
            None
        );
        assert_eq!(accepts_metadata(None), None);
    }

    #[test]
    fn objects_lists_and_events_keep_their_metadata() {
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "a", "resourceVersion": "5"}, "spec": {"nodeName": "n"}});
        let mut one = pod.clone();
        convert(&mut one, "meta.k8s.io/v1");
        assert_eq!(
            one,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "a", "resourceVersion": "5"}})
        );
        let mut list = json!({"kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "9", "continue": "c"}, "items": [pod.clone()]});
        convert(&mut list, "meta.k8s.io/v1");
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(
            list["metadata"],
            json!({"resourceVersion": "9", "continue": "c"})
        );
        assert_eq!(list["items"][0], one);
        let mut event = json!({"type": "ADDED", "object": pod});
        convert(&mut event, "meta.k8s.io/v1");
        assert_eq!(event["object"], one);
        let mut status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "code": 404});
        let before = status.clone();
        convert(&mut status, "meta.k8s.io/v1");
        assert_eq!(status, before);
    }
}
