//! autoscaling/v1 HorizontalPodAutoscalers, served beside the stored autoscaling/v2 ones as
//! kube-apiserver serves them: a v1 request body is converted to v2 before the ordinary
//! path sees it, and what that path answers (an object, a list, watch events) is converted
//! back to v1 ([`api::autoscaling::to_v1`] and [`api::autoscaling::from_v1`] carry what v1
//! has no fields for in its annotations). Tables and Status answers pass unchanged.

use futures_lite::AsyncBufReadExt;
use serde_json::Value;
use tide::http::Method;

use super::stream::ChannelReader;
use super::{parse_object_body, protobuf, State};
use crate::error::ApiError;

/// How the client wanted its answer, noted before the request is rewritten.
pub(super) struct Answer {
    protobuf: bool,
}

/// Rewrites a v1 request for the v2 path: its body (create, update, status update) becomes
/// v2 JSON, and it asks for a JSON answer, which [`response`] converts back. A patch of a v1
/// object would have to be applied in v1's shape, which this server does not do yet: it is
/// refused with 405, pointing at autoscaling/v2.
pub(super) fn request(
    req: &mut tide::Request<State>,
    body: Vec<u8>,
) -> Result<(Vec<u8>, Answer), ApiError> {
    let answer = Answer {
        protobuf: super::wants_protobuf(req),
    };
    if !super::wants_table(req) {
        req.insert_header("Accept", "application/json");
    }
    let body = match req.method() {
        Method::Post | Method::Put => {
            let v1 = parse_object_body(req, &body)?;
            let v2 = api::autoscaling::from_v1(&v1);
            req.insert_header("Content-Type", "application/json");
            serde_json::to_vec(&v2).map_err(|e| ApiError::internal(e.to_string()))?
        }
        Method::Patch => {
            return Err(ApiError::method_not_allowed(
                "patches of autoscaling/v1 horizontalpodautoscalers are not served: patch them at autoscaling/v2",
            ))
        }
        _ => body,
    };
    Ok((body, answer))
}

/// A v2 object, list or watch event (JSON) in v1's shape; anything else as it is.
fn convert(v: &mut Value) {
    match v["kind"].as_str() {
        Some("HorizontalPodAutoscaler") => *v = api::autoscaling::to_v1(v),
        Some("HorizontalPodAutoscalerList") => {
            v["apiVersion"] = Value::String(format!(
                "{}/{}",
                api::autoscaling::GROUP,
                api::autoscaling::LEGACY_VERSION
            ));
            if let Some(items) = v["items"].as_array_mut() {
                for item in items {
                    // List items carry no kind of their own in Kubernetes' JSON.
                    let mut one = item.clone();
                    one["kind"] = Value::String("HorizontalPodAutoscaler".into());
                    let mut converted = api::autoscaling::to_v1(&one);
                    if item.get("kind").is_none() {
                        if let Some(m) = converted.as_object_mut() {
                            m.remove("kind");
                            m.remove("apiVersion");
                        }
                    }
                    *item = converted;
                }
            }
        }
        _ => {
            if v.get("object").is_some() && v.get("type").is_some() {
                convert(&mut v["object"]);
            }
        }
    }
}

/// Converts the v2 path's answer to v1, in the encoding the client asked for.
pub(super) async fn response(
    mut r: tide::Response,
    answer: Answer,
) -> Result<tide::Response, ApiError> {
    let is_json = r
        .content_type()
        .is_some_and(|m| m.essence() == "application/json");
    if !is_json {
        return Ok(r);
    }
    let streamed = r.len().is_none();
    let body = r.take_body();
    if streamed {
        // A watch: one event per line, converted as it passes.
        let (tx, rx) = async_channel::bounded::<Vec<u8>>(64);
        smol::spawn(async move {
            let mut reader = futures_lite::io::BufReader::new(body);
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let mut out = match serde_json::from_str::<Value>(line.trim_end()) {
                    Ok(mut event) => {
                        convert(&mut event);
                        serde_json::to_vec(&event).unwrap_or_default()
                    }
                    Err(_) => line.trim_end().as_bytes().to_vec(),
                };
                out.push(b'\n');
                if tx.send(out).await.is_err() {
                    return;
                }
            }
        })
        .detach();
        r.set_body(tide::Body::from_reader(ChannelReader::new(rx), None));
        r.set_content_type(tide::http::mime::JSON);
        return Ok(r);
    }
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        r.set_body(bytes);
        r.set_content_type(tide::http::mime::JSON);
        return Ok(r);
    };
    convert(&mut v);
    if answer.protobuf && v["kind"] == "HorizontalPodAutoscaler" {
        if let Ok(encoded) = protobuf::encode(&v) {
            r.set_body(encoded);
            r.set_content_type(protobuf::MEDIA_TYPE);
            return Ok(r);
        }
    }
    r.set_body(serde_json::to_vec(&v).unwrap_or_default());
    r.set_content_type(tide::http::mime::JSON);
    Ok(r)
}
