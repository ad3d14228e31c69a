//! A custom resource served at a version other than the one it is stored at, with the
//! definition's conversion strategy `None` (kube-apiserver's nopConverter): only
//! `apiVersion` changes. A request body's `apiVersion` is rewritten to the storage version
//! before the ordinary path sees it, and what that path answers (an object, a list, watch
//! events) gets the requested version back. Tables and Status answers pass unchanged.

use serde_json::Value;
use tide::http::Method;

use super::stream::convert_json_answer;
use super::State;
use crate::error::ApiError;

/// The two `apiVersion`s of a request: as stored and as asked for.
pub(super) struct Versions {
    stored: String,
    served: String,
}

impl Versions {
    /// The versions of a request for `kind` at `version`, when they differ.
    pub(super) fn of(kind: api::Kind, version: &str) -> Option<Versions> {
        let info = kind.info();
        (kind.is_custom() && info.version != version).then(|| Versions {
            stored: info.api_version(),
            served: format!("{}/{version}", info.group),
        })
    }
}

/// Rewrites the body of a create, update or apply to the storage version.
pub(super) fn request(
    req: &tide::Request<State>,
    versions: &Versions,
    body: Vec<u8>,
) -> Result<Vec<u8>, ApiError> {
    let rewrites = match req.method() {
        Method::Post | Method::Put => true,
        Method::Patch => super::media_type(req).starts_with("application/apply-patch"),
        _ => false,
    };
    if !rewrites || body.iter().all(u8::is_ascii_whitespace) {
        return Ok(body);
    }
    let mut v = super::parse_write_body(req, &body)?;
    match v.get("apiVersion").and_then(Value::as_str) {
        Some(a) if a == versions.served => {
            v["apiVersion"] = Value::String(versions.stored.clone());
        }
        Some(a) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({a}) does not match the expected API version ({})",
                versions.served
            )))
        }
        None => {}
    }
    serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))
}

/// The answer with the requested version in place of the stored one.
pub(super) async fn response(
    r: tide::Response,
    versions: Versions,
) -> Result<tide::Response, ApiError> {
    let Versions { stored, served } = versions;
    let convert = move |v: &mut Value| rewrite(v, &stored, &served);
    Ok(convert_json_answer(r, convert).await?.0)
}

fn rewrite(v: &mut Value, stored: &str, served: &str) {
    if v.get("type").is_some() && v.get("object").is_some() {
        return rewrite(&mut v["object"], stored, served);
    }
    if v["apiVersion"] == stored {
        v["apiVersion"] = Value::String(served.to_string());
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if item["apiVersion"] == stored {
                item["apiVersion"] = Value::String(served.to_string());
            }
        }
    }
}
