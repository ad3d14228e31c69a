//! One call of an admission webhook: the `AdmissionReview` sent (admission.k8s.io v1 or
//! v1beta1, the first of the webhook's `admissionReviewVersions` this server speaks), and
//! the answer checked as kube-apiserver's `VerifyAdmissionResponse` checks it, its JSONPatch
//! applied, its warnings and audit annotations kept, and its failures worded as
//! kube-apiserver words them (`failed calling webhook "NAME": ...`, `admission webhook
//! "NAME" denied the request: ...`).

use std::collections::BTreeMap;

use api::admissionregistration::Webhook as Hook;
use api::meta::Status;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::registry::Registry;
use crate::webhook::Webhook as Client;

/// The request's part of a review (`request` without `uid`, which each call makes).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `{group, version, kind}` and `{group, version, resource}` the webhook's rule named,
    /// and the request's own (they differ under `matchPolicy: Equivalent`).
    pub kind: Value,
    pub resource: Value,
    pub sub_resource: String,
    pub request_kind: Value,
    pub request_resource: Value,
    pub name: String,
    pub namespace: String,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'static str,
    /// `{username, uid, groups, extra}`.
    pub user_info: Value,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
    /// CreateOptions, UpdateOptions, DeleteOptions or PatchOptions.
    pub options: Option<Value>,
}

/// What a webhook said.
#[derive(Debug, Default)]
pub struct Answer {
    /// For a mutating webhook: the object after its patch, if it sent one.
    pub patched: Option<Value>,
    pub warnings: Vec<String>,
    /// `NAME/KEY` -> value, for the audit event.
    pub audit_annotations: BTreeMap<String, String>,
}

/// Why a call did not allow the request.
#[derive(Debug)]
pub enum Failure {
    /// The webhook could not be called or answered something malformed: the failure
    /// policy decides (`Ignore` goes on).
    Calling(ApiError),
    /// The webhook denied the request (or a patch could not be applied): always an error.
    Rejected(ApiError),
}

/// The review version to send: the first of the webhook's this server speaks.
fn review_version(hook: &Hook) -> Option<&'static str> {
    hook.admission_review_versions
        .iter()
        .find_map(|v| match v.as_str() {
            "v1" => Some("admission.k8s.io/v1"),
            "v1beta1" => Some("admission.k8s.io/v1beta1"),
            _ => None,
        })
}

/// `failed calling webhook "NAME": WHY` as an internal error.
fn calling(hook: &Hook, why: impl std::fmt::Display) -> Failure {
    Failure::Calling(ApiError::internal_error(format!(
        "failed calling webhook \"{}\": {why}",
        hook.name
    )))
}

/// Calls `hook` through `client` with `request`; `mutating` allows (and applies) a patch.
pub async fn call(
    hook: &Hook,
    client: &Client,
    registry: &Registry,
    request: &Request,
    mutating: bool,
) -> Result<Answer, Failure> {
    let Some(version) = review_version(hook) else {
        return Err(calling(
            hook,
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)",
        ));
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let mut req = json!({
        "uid": uid,
        "kind": request.kind,
        "resource": request.resource,
        "requestKind": request.request_kind,
        "requestResource": request.request_resource,
        "name": request.name,
        "namespace": request.namespace,
        "operation": request.operation,
        "userInfo": request.user_info,
        "object": request.object,
        "oldObject": request.old_object,
        "dryRun": request.dry_run,
        "options": request.options,
    });
    for (key, v) in [
        ("subResource", &request.sub_resource),
        ("name", &request.name),
        ("namespace", &request.namespace),
    ] {
        if v.is_empty() {
            if let Some(m) = req.as_object_mut() {
                m.remove(key);
            }
        } else {
            req[key] = json!(v);
        }
    }
    let review = json!({"kind": "AdmissionReview", "apiVersion": version, "request": req});
    let answer = client
        .post(registry, &review, hook.timeout())
        .await
        .map_err(|e| calling(hook, format!("failed to call webhook: {e}")))?;
    let response = verify(&answer, version, &uid, mutating)
        .map_err(|e| calling(hook, format!("received invalid webhook response: {e}")))?;
    let mut out = Answer {
        warnings: response["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        ..Default::default()
    };
    if let Some(m) = response["auditAnnotations"].as_object() {
        for (k, v) in m {
            if let Some(v) = v.as_str() {
                out.audit_annotations
                    .insert(format!("{}/{k}", hook.name), v.to_string());
            }
        }
    }
    if response["allowed"] != true {
        return Err(Failure::Rejected(denied(hook, &response["status"])));
    }
    let Some(patch) = response["patch"].as_str().filter(|p| !p.is_empty()) else {
        return Ok(out);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| {
            calling(
                hook,
                format!("received undecodable patch in webhook response: {e}"),
            )
        })?;
    let ops: json_patch::Patch = serde_json::from_slice(&bytes).map_err(|e| {
        calling(
            hook,
            format!("received undecodable patch in webhook response: {e}"),
        )
    })?;
    if ops.0.is_empty() {
        return Ok(out);
    }
    let Some(mut object) = request.object.clone() else {
        return Err(Failure::Rejected(ApiError::internal_error(format!(
            "admission webhook \"{}\" attempted to modify the object, which is not supported for this operation",
            hook.name
        ))));
    };
    json_patch::patch(&mut object, &ops)
        .map_err(|e| Failure::Rejected(ApiError::internal_error(e.to_string())))?;
    out.patched = Some(object);
    Ok(out)
}

/// The `response` of a review answer, after kube's checks.
fn verify(answer: &Value, version: &str, uid: &str, mutating: bool) -> Result<Value, String> {
    let response = answer
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    if version == "admission.k8s.io/v1beta1" {
        // v1beta1 answers were never checked for uid, type or patch type.
        let mut r = response.clone();
        if !mutating {
            if let Some(m) = r.as_object_mut() {
                m.remove("patch");
            }
        }
        return Ok(r);
    }
    let got_uid = response["uid"].as_str().unwrap_or("");
    if got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    if answer["apiVersion"] != version || answer["kind"] != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            answer["apiVersion"].as_str().unwrap_or(""),
            answer["kind"].as_str().unwrap_or("")
        ));
    }
    let has_patch = response["patch"].as_str().is_some_and(|p| !p.is_empty());
    let patch_type = response.get("patchType").and_then(Value::as_str);
    if mutating {
        match (has_patch, patch_type) {
            (true, None) => {
                return Err("webhook returned response.patch but not response.patchType".into())
            }
            (false, Some(_)) => {
                return Err("webhook returned response.patchType but not response.patch".into())
            }
            (true, Some(t)) if t != "JSONPatch" => {
                return Err(format!(
                    "webhook returned invalid response.patchType of {t:?}"
                ))
            }
            _ => {}
        }
    } else {
        if has_patch {
            return Err("validating webhook may not return response.patch".into());
        }
        if patch_type.is_some() {
            return Err("validating webhook may not return response.patchType".into());
        }
    }
    Ok(response.clone())
}

/// A denial as kube answers it: the webhook's Status, its code at least 400, its message
/// prefixed with who denied.
fn denied(hook: &Hook, status: &Value) -> ApiError {
    let mut s: Status = serde_json::from_value(status.clone()).unwrap_or_default();
    s.kind = "Status".into();
    s.api_version = "v1".into();
    if s.code < 400 {
        s.code = 400;
    }
    if s.status.is_empty() || s.status == "Success" {
        s.status = "Failure".into();
    }
    let by = format!("admission webhook \"{}\" denied the request", hook.name);
    s.message = if !s.message.is_empty() {
        format!("{by}: {}", s.message)
    } else if !s.reason.is_empty() {
        format!("{by}: {}", s.reason)
    } else {
        format!("{by} without explanation")
    };
    ApiError::from_status(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> Hook {
        serde_json::from_value(
            json!({"name": "deny.site.example.com", "admissionReviewVersions": ["v1"]}),
        )
        .unwrap()
    }

    fn answer(response: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }

    #[test]
    fn answers_are_checked_as_kube_checks_them() {
        let v1 = "admission.k8s.io/v1";
        assert_eq!(
            verify(
                &answer(json!({"uid": "b", "allowed": true})),
                v1,
                "a",
                false
            )
            .unwrap_err(),
            r#"expected response.uid="a", got "b""#
        );
        assert_eq!(
            verify(
                &json!({"apiVersion": v1, "kind": "AdmissionReview"}),
                v1,
                "a",
                false
            )
            .unwrap_err(),
            "webhook response was absent"
        );
        assert_eq!(
            verify(
                &answer(json!({"uid": "a", "allowed": true, "patch": "W10="})),
                v1,
                "a",
                true
            )
            .unwrap_err(),
            "webhook returned response.patch but not response.patchType"
        );
        assert_eq!(
            verify(
                &answer(
                    json!({"uid": "a", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})
                ),
                v1,
                "a",
                false
            )
            .unwrap_err(),
            "validating webhook may not return response.patch"
        );
        let wrong = json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"uid": "a"}});
        assert_eq!(
            verify(&wrong, v1, "a", false).unwrap_err(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview"
        );
        assert!(verify(
            &answer(json!({"uid": "a", "allowed": true})),
            v1,
            "a",
            false
        )
        .is_ok());
    }

    #[test]
    fn denials_carry_the_webhooks_status() {
        let e = denied(
            &hook(),
            &json!({"code": 403, "message": "no privileged pods"}),
        );
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.0.message,
            r#"admission webhook "deny.site.example.com" denied the request: no privileged pods"#
        );
        let e = denied(&hook(), &Value::Null);
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.0.message,
            r#"admission webhook "deny.site.example.com" denied the request without explanation"#
        );
        assert_eq!(e.0.status, "Failure");
    }
}
