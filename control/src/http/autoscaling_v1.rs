//! autoscaling/v1 HorizontalPodAutoscalers, served beside the stored autoscaling/v2 ones as
//! kube-apiserver serves them: a v1 request body is converted to v2 before the ordinary
//! path sees it, and what that path answers (an object, a list, watch events) is converted
//! back to v1 ([`api::autoscaling::to_v1`] and [`api::autoscaling::from_v1`] carry what v1
//! has no fields for in its annotations). Tables and Status answers pass unchanged.

use serde_json::Value;
use tide::http::Method;

use super::stream::convert_json_answer;
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
    r: tide::Response,
    answer: Answer,
) -> Result<tide::Response, ApiError> {
    let (mut r, whole) = convert_json_answer(r, convert).await?;
    if let Some(v) = whole.filter(|v| answer.protobuf && v["kind"] == "HorizontalPodAutoscaler") {
        if let Ok(encoded) = protobuf::encode(&v) {
            r.set_body(encoded);
            r.set_content_type(protobuf::MEDIA_TYPE);
        }
    }
    Ok(r)
}
