//! Validation results and the name rules Kubernetes applies to every object.

use serde::{Deserialize, Serialize};

/// One reason an object is invalid, reported as a `StatusCause` in a 422 Invalid answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`,
    /// `FieldValueDuplicate`, `FieldValueForbidden`, `FieldValueTooLong`.
    pub reason: String,
    /// The field path, as `spec.template.spec.containers[0].name`.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>) -> FieldError {
        let field = field.into();
        FieldError {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field,
        }
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        why: impl Into<String>,
    ) -> FieldError {
        let field = field.into();
        FieldError {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: \"{value}\": {}", why.into()),
            field,
        }
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        supported: &[&str],
    ) -> FieldError {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        FieldError {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: \"{value}\": supported values: {list}"),
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, why: impl Into<String>) -> FieldError {
        FieldError {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {}", why.into()),
            field: field.into(),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: impl std::fmt::Display) -> FieldError {
        FieldError {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: \"{value}\""),
            field: field.into(),
        }
    }
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// A DNS-1123 label (namespaces, services): at most 63 characters.
pub fn dns1123_label(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 63 {
        return Err(format!("{DNS1123_LABEL_MSG} (must be 1-63 characters)"));
    }
    let b = value.as_bytes();
    let ok_inner = b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    let ok_ends = b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric();
    if ok_inner && ok_ends {
        Ok(())
    } else {
        Err(DNS1123_LABEL_MSG.to_string())
    }
}

/// A DNS-1123 subdomain (most object names): at most 253 characters.
pub fn dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 253 {
        return Err(format!(
            "{DNS1123_SUBDOMAIN_MSG} (must be 1-253 characters)"
        ));
    }
    if value.split('.').all(|part| dns1123_label(part).is_ok()) {
        Ok(())
    } else {
        Err(DNS1123_SUBDOMAIN_MSG.to_string())
    }
}
