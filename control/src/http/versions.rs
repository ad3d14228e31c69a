//! A custom resource served at a version other than the one it is stored at. With the
//! definition's conversion strategy `None` (kube-apiserver's nopConverter) only `apiVersion`
//! changes; with `Webhook` the definition's conversion webhook converts
//! ([`crate::crd::Converter`]). A request body is converted to the storage version before
//! the ordinary path sees it, and what that path answers (an object, a list, watch events)
//! is converted to the requested version. Tables and Status answers pass unchanged.
//!
//! A patch other than server-side apply means the fields of the requested version, which
//! the webhook may name differently: it is applied to the current object converted to that
//! version and the result converted back and stored as an update that expects the object's
//! resourceVersion (retried on a conflict, as kube-apiserver's patcher retries).

use std::sync::Arc;

use api::custom::CustomObject;
use serde_json::Value;
use tide::http::Method;

use super::route::ResourcePath;
use super::stream::convert_json_answer_with;
use super::State;
use crate::crd::Converter;
use crate::error::ApiError;
use crate::registry::PatchType;

/// The two `apiVersion`s of a request: as stored and as asked for.
pub(super) struct Versions {
    stored: String,
    served: String,
    /// The kind's name, for errors.
    kind: String,
    converter: Option<Arc<Converter>>,
    /// A patch turned into an update (read, converted, patched, converted back).
    patch: Option<(PatchType, Vec<u8>)>,
}

impl Versions {
    /// The versions of a request for `kind` at `version`, when they differ.
    pub(super) fn of(state: &State, kind: api::Kind, version: &str) -> Option<Versions> {
        let info = kind.info();
        if !kind.is_custom() || info.version == version {
            return None;
        }
        let converter = state
            .resources
            .snapshot()
            .get(kind.into())
            .and_then(|e| e.conversion.clone());
        Some(Versions {
            stored: info.api_version(),
            served: format!("{}/{version}", info.group),
            kind: info.kind.to_string(),
            converter,
            patch: None,
        })
    }

    /// Whether a conflict of the update this request became should be retried.
    pub(super) fn retries(&self) -> bool {
        self.patch.is_some()
    }

    /// Converts `objects` (the items of a list when `list`) to `to`.
    async fn convert(
        &self,
        state: &State,
        objects: &mut [Value],
        to: &str,
        list: bool,
    ) -> Result<(), ApiError> {
        match &self.converter {
            Some(c) => {
                let from = if to == self.stored {
                    &self.served
                } else {
                    &self.stored
                };
                let suffix = if list { "List" } else { "" };
                let gvk = format!("{from}, Kind={}{suffix}", self.kind);
                c.convert(&state.registry, objects, to, &gvk, list)
                    .await
                    .map_err(ApiError::internal_error)
            }
            None => {
                for o in objects {
                    if o.get("apiVersion").is_some() {
                        o["apiVersion"] = Value::String(to.to_string());
                    }
                }
                Ok(())
            }
        }
    }
}

/// Converts the body of a create, update or apply to the storage version; with a
/// conversion webhook, a patch becomes the update it amounts to (see the module's doc).
pub(super) async fn request(
    state: &State,
    req: &mut tide::Request<State>,
    path: &ResourcePath,
    versions: &mut Versions,
    body: Vec<u8>,
) -> Result<Vec<u8>, ApiError> {
    let media = super::media_type(req);
    let apply = media.starts_with("application/apply-patch");
    let method = req.method();
    if method == Method::Patch && !apply && versions.converter.is_some() {
        versions.patch = Some((super::patch_type_of(&media)?, body));
        return patched(state, req, path, versions).await;
    }
    if versions.patch.is_some() {
        // A retry of the update a patch became (the method is PUT now).
        return patched(state, req, path, versions).await;
    }
    let rewrites = match method {
        Method::Post | Method::Put => true,
        Method::Patch => apply,
        _ => false,
    };
    if !rewrites || body.iter().all(u8::is_ascii_whitespace) {
        return Ok(body);
    }
    let mut v = super::parse_write_body(req, &body)?;
    match v.get("apiVersion").and_then(Value::as_str) {
        Some(a) if a == versions.served => {}
        Some(a) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({a}) does not match the expected API version ({})",
                versions.served
            )))
        }
        None => return Ok(body),
    }
    let stored = versions.stored.clone();
    versions
        .convert(state, std::slice::from_mut(&mut v), &stored, false)
        .await?;
    serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))
}

/// A patch at the served version, as the update of the whole object it amounts to.
async fn patched(
    state: &State,
    req: &mut tide::Request<State>,
    path: &ResourcePath,
    versions: &Versions,
) -> Result<Vec<u8>, ApiError> {
    let Some((patch_type, patch)) = &versions.patch else {
        return Err(ApiError::internal("no patch to apply"));
    };
    let current: CustomObject = state
        .registry
        .for_kind(path.kind)
        .get(
            path.namespace.as_deref().unwrap_or(""),
            path.name.as_deref().unwrap_or(""),
        )
        .await?;
    let mut v = serde_json::to_value(&current).map_err(|e| ApiError::internal(e.to_string()))?;
    let served = versions.served.clone();
    versions
        .convert(state, std::slice::from_mut(&mut v), &served, false)
        .await?;
    let rv = v["metadata"]["resourceVersion"].clone();
    let mut v = crate::registry::apply_patch(v, *patch_type, patch)?;
    if v["metadata"]["resourceVersion"].is_null() {
        v["metadata"]["resourceVersion"] = rv;
    }
    let stored = versions.stored.clone();
    versions
        .convert(state, std::slice::from_mut(&mut v), &stored, false)
        .await?;
    let http: &mut tide::http::Request = req.as_mut();
    http.set_method(Method::Put);
    req.insert_header("Content-Type", "application/json");
    serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))
}

/// The answer with the requested version in place of the stored one. A metadata-only
/// answer needs no webhook: only its `apiVersion` is rewritten.
pub(super) async fn response(
    state: &State,
    r: tide::Response,
    versions: Versions,
    metadata_only: bool,
) -> Result<tide::Response, ApiError> {
    let versions = Arc::new(Versions {
        converter: versions.converter.filter(|_| !metadata_only),
        ..versions
    });
    let state = state.clone();
    let convert = move |v: Value| {
        let versions = versions.clone();
        let state = state.clone();
        async move { convert_answer(&state, &versions, v).await }
    };
    Ok(convert_json_answer_with(r, convert).await?.0)
}

/// An object, a list or a watch event at the served version.
async fn convert_answer(
    state: &State,
    versions: &Versions,
    mut v: Value,
) -> Result<Value, ApiError> {
    let served = versions.served.as_str();
    if v.get("type").is_some() && v.get("object").is_some() {
        if v["object"]["apiVersion"] == versions.stored {
            versions
                .convert(state, std::slice::from_mut(&mut v["object"]), served, false)
                .await?;
        }
        return Ok(v);
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        versions.convert(state, items, served, true).await?;
    }
    if v["apiVersion"] == versions.stored {
        if v.get("items").is_some() {
            v["apiVersion"] = Value::String(served.to_string());
        } else {
            versions
                .convert(state, std::slice::from_mut(&mut v), served, false)
                .await?;
        }
    }
    Ok(v)
}
