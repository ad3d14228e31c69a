//! The review kinds, which are created and answered but never stored:
//! authorization.k8s.io/v1 SelfSubjectAccessReview, SubjectAccessReview,
//! LocalSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i`, `--list`), and
//! authentication.k8s.io/v1 SelfSubjectReview (`kubectl auth whoami`) and TokenReview.

use serde_json::{json, Value};
use tide::http::StatusCode;

use super::route::{ReviewPath, AUTHENTICATION_GROUP, AUTHORIZATION_GROUP};
use super::{object_response, parse_object_body, State};
use crate::auth::User;
use crate::error::ApiError;
use crate::rbac::Attributes;

/// The reviews served: group, plural, namespaced.
pub const PLURALS: &[(&str, &str, bool)] = &[
    (AUTHORIZATION_GROUP, "selfsubjectaccessreviews", false),
    (AUTHORIZATION_GROUP, "selfsubjectrulesreviews", false),
    (AUTHORIZATION_GROUP, "subjectaccessreviews", false),
    (AUTHORIZATION_GROUP, "localsubjectaccessreviews", true),
    (AUTHENTICATION_GROUP, "selfsubjectreviews", false),
    (AUTHENTICATION_GROUP, "tokenreviews", false),
];

/// The kind of a review plural.
pub fn kind_of(plural: &str) -> &'static str {
    match plural {
        "selfsubjectaccessreviews" => "SelfSubjectAccessReview",
        "selfsubjectrulesreviews" => "SelfSubjectRulesReview",
        "subjectaccessreviews" => "SubjectAccessReview",
        "localsubjectaccessreviews" => "LocalSubjectAccessReview",
        "selfsubjectreviews" => "SelfSubjectReview",
        _ => "TokenReview",
    }
}

/// Answers a review (POST only): the request echoed with its `status` filled in.
pub fn serve(
    state: &State,
    req: &tide::Request<State>,
    user: &User,
    path: &ReviewPath,
    body: &[u8],
) -> Result<tide::Response, ApiError> {
    if req.method() != tide::http::Method::Post {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} {})",
            req.method(),
            path.plural
        )));
    }
    let mut review = parse_object_body(req, body)?;
    if !review.is_object() {
        return Err(ApiError::bad_request("the review is not an object"));
    }
    let spec = review.get("spec").cloned().unwrap_or(json!({}));
    let status = match path.plural.as_str() {
        "selfsubjectaccessreviews" => access_status(state, user, &spec, None)?,
        "subjectaccessreviews" | "localsubjectaccessreviews" => {
            let subject = User {
                name: text(&spec, "/user"),
                uid: text(&spec, "/uid"),
                groups: strings(&spec, "/groups"),
                extra: spec
                    .get("extra")
                    .and_then(Value::as_object)
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v, ""))).collect())
                    .unwrap_or_default(),
            };
            if subject.name.is_empty() && subject.groups.is_empty() {
                return Err(invalid(
                    path,
                    "spec.user: Invalid value: \"\": at least one of user or group must be specified",
                ));
            }
            access_status(state, &subject, &spec, path.namespace.as_deref())?
        }
        "selfsubjectrulesreviews" => rules_status(state, user, &text(&spec, "/namespace")),
        "selfsubjectreview" | "selfsubjectreviews" => json!({"userInfo": user_info(user)}),
        _ => {
            let token = text(&spec, "/token");
            let asked = strings(&spec, "/audiences");
            match state.auth.authenticate_token_for(&token, &asked) {
                Some(u) => {
                    // The audiences the token is good for: those asked, or the API server's.
                    let audiences = if asked.is_empty() {
                        vec![crate::serviceaccount::token::ISSUER.to_string()]
                    } else {
                        asked
                    };
                    json!({"authenticated": true, "user": user_info(&u), "audiences": audiences})
                }
                None => json!({"authenticated": false, "error": "invalid bearer token"}),
            }
        }
    };
    let api_version = format!("{}/v1", path.group);
    let obj = review.as_object_mut().expect("checked above");
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind_of(&path.plural)));
    obj.entry("metadata").or_insert(json!({}));
    if let Some(Value::Object(m)) = obj.get_mut("metadata") {
        m.insert(
            "creationTimestamp".into(),
            serde_json::to_value(api::meta::Time::now()).unwrap_or_default(),
        );
    }
    obj.insert("status".into(), status);
    Ok(object_response(req, StatusCode::Created, &review))
}

fn invalid(path: &ReviewPath, why: &str) -> ApiError {
    ApiError::from_status(api::meta::Status::failure(
        422,
        "Invalid",
        format!(
            "{}.{} \"\" is invalid: {why}",
            kind_of(&path.plural),
            path.group
        ),
    ))
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn user_info(user: &User) -> Value {
    let mut v = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        v["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        v["extra"] = json!(user.extra);
    }
    v
}

/// The status of an access review of `spec` for `user`; a LocalSubjectAccessReview's
/// namespace is its path's.
fn access_status(
    state: &State,
    user: &User,
    spec: &Value,
    namespace: Option<&str>,
) -> Result<Value, ApiError> {
    let attrs = if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        let ns = namespace
            .map(String::from)
            .unwrap_or_else(|| text(r, "/namespace"));
        Attributes::resource(
            &text(r, "/verb"),
            &text(r, "/group"),
            &text(r, "/resource"),
            &text(r, "/subresource"),
            &ns,
            &text(r, "/name"),
        )
    } else if let Some(n) = spec.get("nonResourceAttributes").filter(|r| r.is_object()) {
        Attributes::non_resource(&text(n, "/verb"), &text(n, "/path"))
    } else {
        return Err(ApiError::from_status(api::meta::Status::failure(
            422,
            "Invalid",
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )));
    };
    let decision = state.authorizer.authorize(user, &attrs);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    Ok(status)
}

/// A SelfSubjectRulesReview's status: the user's rules in the namespace, resource rules
/// and non-resource rules apart.
fn rules_status(state: &State, user: &User, namespace: &str) -> Value {
    let rules = state.authorizer.rules_for(user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if r.non_resource_urls.is_empty() {
            let mut v =
                json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                v["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(v);
        } else {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
}
