//! The TokenRequest subresource, `POST .../serviceaccounts/NAME/token`
//! (authentication.k8s.io/v1 TokenRequest; `kubectl create token`): answers a bound token,
//! never stored.

use serde_json::{json, Value};
use tide::http::StatusCode;

use super::route::{ResourcePath, AUTHENTICATION_GROUP};
use super::{object_response, parse_object_body, State};
use crate::error::ApiError;
use crate::serviceaccount::token::{unix_now, DEFAULT_EXPIRATION_SECONDS, ISSUER};
use api::core::{Pod, ServiceAccount};
use api::meta::Status;

/// The shortest and longest token lifetimes Kubernetes' validation allows.
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

fn invalid(why: String) -> ApiError {
    ApiError::from_status(Status::failure(
        422,
        "Invalid",
        format!("TokenRequest.{AUTHENTICATION_GROUP} \"\" is invalid: {why}"),
    ))
}

pub async fn serve(
    state: &State,
    req: &tide::Request<State>,
    path: &ResourcePath,
    body: &[u8],
) -> Result<tide::Response, ApiError> {
    let (Some(name), tide::http::Method::Post) = (path.name.as_deref(), req.method()) else {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} serviceaccounts/token)",
            req.method()
        )));
    };
    let ns = path.namespace.clone().unwrap_or_default();
    let mut request = parse_object_body(req, body)?;
    if !request.is_object() {
        return Err(ApiError::bad_request("the TokenRequest is not an object"));
    }
    let spec = request.get("spec").cloned().unwrap_or(json!({}));
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(ISSUER.to_string());
    }
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            invalid(format!(
                "spec.expirationSeconds: Invalid value: {v}: must be an integer"
            ))
        })?,
    };
    if seconds < MIN_EXPIRATION_SECONDS {
        return Err(invalid(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
        )));
    }
    if seconds > MAX_EXPIRATION_SECONDS {
        return Err(invalid(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
        )));
    }
    let sa: ServiceAccount = state.registry.get(&ns, name).await?;
    let pod = match spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        None => None,
        Some(r) => {
            let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
            if field("kind") != "Pod" || !matches!(field("apiVersion"), "v1" | "") {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {name:?} to object of kind {:?} ({})",
                    field("kind"),
                    field("apiVersion")
                )));
            }
            let pod: Pod = state.registry.get(&ns, field("name")).await?;
            let uid = field("uid");
            if !uid.is_empty() && pod.metadata.uid != uid {
                return Err(ApiError::conflict(
                    api::Kind::Pod,
                    field("name"),
                    &format!("the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"),
                ));
            }
            Some(pod)
        }
    };
    let now = unix_now();
    let token = state
        .sa_tokens
        .issue(&sa, pod.as_ref(), audiences.clone(), now, seconds);
    let expires = api::meta::Time(now + seconds);
    let obj = request.as_object_mut().expect("checked above");
    obj.insert(
        "apiVersion".into(),
        json!(format!("{AUTHENTICATION_GROUP}/v1")),
    );
    obj.insert("kind".into(), json!("TokenRequest"));
    obj.insert(
        "metadata".into(),
        json!({"name": name, "namespace": ns, "creationTimestamp": api::meta::Time::now()}),
    );
    let mut spec = spec;
    spec["audiences"] = json!(audiences);
    spec["expirationSeconds"] = json!(seconds);
    if spec.get("boundObjectRef").is_none() {
        spec["boundObjectRef"] = Value::Null;
    }
    if let (Some(pod), Some(r)) = (&pod, spec.get_mut("boundObjectRef")) {
        r["uid"] = json!(pod.metadata.uid);
    }
    obj.insert("spec".into(), spec);
    obj.insert(
        "status".into(),
        json!({"token": token, "expirationTimestamp": expires}),
    );
    Ok(object_response(req, StatusCode::Created, &request))
}
