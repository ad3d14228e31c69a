//! API errors: every failed request is answered with a Kubernetes `Status` carrying the
//! HTTP code, the reason and a message shaped like kube-apiserver's.

use api::meta::{Status, StatusCause, StatusDetails};
use api::validation::FieldError;
use api::{Kind, KindInfo};

use crate::store::StoreError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", .0.message)]
pub struct ApiError(pub Box<Status>);

impl ApiError {
    pub fn from_status(status: Status) -> ApiError {
        ApiError(Box::new(status))
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> ApiError {
        self.0.message = message.into();
        self
    }

    pub fn code(&self) -> u16 {
        self.0.code
    }

    pub fn reason(&self) -> &str {
        &self.0.reason
    }

    fn with_target(status: Status, info: &KindInfo, name: &str) -> ApiError {
        ApiError::from_status(status.with_details(StatusDetails {
            name: name.to_string(),
            group: info.group.to_string(),
            kind: info.plural.to_string(),
            ..Default::default()
        }))
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::from_status(Status::failure(400, "BadRequest", message))
    }

    pub fn unauthorized() -> ApiError {
        ApiError::from_status(Status::failure(401, "Unauthorized", "Unauthorized"))
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::from_status(Status::failure(403, "Forbidden", message))
    }

    /// Kubernetes' NewForbidden: `pods "x" is forbidden: <why>`, with the object in the
    /// details.
    pub fn forbidden_object(kind: Kind, name: &str, why: &str) -> ApiError {
        let info = kind.info();
        let msg = format!("{} \"{name}\" is forbidden: {why}", info.qualified_plural());
        Self::with_target(Status::failure(403, "Forbidden", msg), info, name)
    }

    pub fn not_found(kind: Kind, name: &str) -> ApiError {
        let info = kind.info();
        let msg = format!("{} \"{name}\" not found", info.qualified_plural());
        Self::with_target(Status::failure(404, "NotFound", msg), info, name)
    }

    pub fn path_not_found() -> ApiError {
        ApiError::from_status(Status::failure(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ))
    }

    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::from_status(Status::failure(405, "MethodNotAllowed", message))
    }

    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::from_status(Status::failure(406, "NotAcceptable", message))
    }

    pub fn already_exists(kind: Kind, name: &str) -> ApiError {
        let info = kind.info();
        let msg = format!("{} \"{name}\" already exists", info.qualified_plural());
        Self::with_target(Status::failure(409, "AlreadyExists", msg), info, name)
    }

    pub fn conflict(kind: Kind, name: &str, why: &str) -> ApiError {
        let info = kind.info();
        let msg = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            info.qualified_plural()
        );
        Self::with_target(Status::failure(409, "Conflict", msg), info, name)
    }

    pub fn stale(kind: Kind, name: &str) -> ApiError {
        Self::conflict(
            kind,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn expired(requested: u64, oldest: u64) -> ApiError {
        ApiError::from_status(Status::failure(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        ))
    }

    pub fn too_large() -> ApiError {
        ApiError::from_status(Status::failure(
            413,
            "RequestEntityTooLarge",
            "the request is too large: the body may be at most 3 MiB",
        ))
    }

    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::from_status(Status::failure(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"),
        ))
    }

    pub fn invalid(kind: Kind, name: &str, errors: Vec<FieldError>) -> ApiError {
        let info = kind.info();
        let parts: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        let joined = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let qualified = if info.group.is_empty() {
            info.kind.to_string()
        } else {
            format!("{}.{}", info.kind, info.group)
        };
        let msg = format!("{qualified} \"{name}\" is invalid: {joined}");
        let causes = errors
            .into_iter()
            .map(|e| StatusCause {
                reason: e.reason,
                message: e.message,
                field: e.field,
            })
            .collect();
        ApiError::from_status(
            Status::failure(422, "Invalid", msg).with_details(StatusDetails {
                name: name.to_string(),
                group: info.group.to_string(),
                kind: info.kind.to_string(),
                causes,
                ..Default::default()
            }),
        )
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::from_status(Status::failure(500, "InternalError", message))
    }

    /// Kubernetes' NewInternalError: `Internal error occurred: <err>`, the error again as
    /// the one cause.
    pub fn internal_error(err: impl Into<String>) -> ApiError {
        let err = err.into();
        ApiError::from_status(
            Status::failure(
                500,
                "InternalError",
                format!("Internal error occurred: {err}"),
            )
            .with_details(StatusDetails {
                causes: vec![api::meta::StatusCause {
                    message: err,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        )
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::from_status(Status::failure(503, "ServiceUnavailable", message))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound { kind, name, .. } => ApiError::not_found(kind, &name),
            StoreError::AlreadyExists { kind, name, .. } => ApiError::already_exists(kind, &name),
            StoreError::Conflict {
                kind,
                name,
                message,
                ..
            } => ApiError::conflict(kind, &name, &message),
            StoreError::Expired { requested, oldest } => ApiError::expired(requested, oldest),
            StoreError::Invalid(errors) => ApiError::from_status(Status::failure(
                422,
                "Invalid",
                errors
                    .iter()
                    .map(|e| format!("{}: {}", e.field, e.message))
                    .collect::<Vec<_>>()
                    .join(", "),
            )),
            StoreError::Forbidden(m) => ApiError::forbidden(m),
            StoreError::BadRequest(m) => ApiError::bad_request(m),
            StoreError::Closed => ApiError::unavailable("the server is shutting down"),
            other => ApiError::internal(other.to_string()),
        }
    }
}
