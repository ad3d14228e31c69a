//! `x-kubernetes-validations`: CEL rules of a custom resource's schema, compiled with the
//! cel-rust project's `cel` crate when the definition is installed and evaluated against the
//! node they sit on (`self`, and `oldSelf` on an update for transition rules), with
//! kube-apiserver's field paths, reasons and messages.
//!
//! The environment is CEL's standard library with the strings, lists and math extensions
//! (most of what Kubernetes' own libraries add: `lowerAscii`, `split`, `join`, `indexOf`,
//! `isSorted`, `sum`, `min`, `max`, ...). Kubernetes' url, ip, cidr, quantity and format
//! libraries are not there; a rule that calls them fails to evaluate, and the write is
//! refused with the evaluation error, as kube does for a runtime error. Cost limits are not
//! estimated (kube refuses definitions whose rules could cost too much).

use std::sync::{Arc, OnceLock};

use api::validation::FieldError;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::Serialize;
use serde_json::Value;

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    source: String,
    program: cel::Program,
    message: Option<String>,
    message_expression: Option<cel::Program>,
    reason: Option<String>,
    field_path: Option<String>,
    /// It reads `oldSelf`: a transition rule, evaluated only on updates with an old value.
    transition: bool,
    optional_old_self: bool,
}

fn env() -> Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        for ext in [
            cel::extensions::strings,
            cel::extensions::lists,
            cel::extensions::math,
        ] {
            if let Err(e) = env.add_extension(ext) {
                tracing::warn!(error = ?e, "a CEL extension could not be added");
            }
        }
        Arc::new(env)
    })
    .clone()
}

impl Rule {
    /// Compiles the rules of one node (`x-kubernetes-validations`, found at `at`).
    pub fn compile_all(v: &Value, at: &str, errs: &mut Vec<FieldError>) -> Vec<Rule> {
        let Some(list) = v.as_array() else {
            errs.push(FieldError::invalid(at, v, "must be a list of rules"));
            return Vec::new();
        };
        let env = env();
        let mut out = Vec::new();
        for (i, r) in list.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
            let Some(source) = text("rule").filter(|s| !s.trim().is_empty()) else {
                errs.push(FieldError::required(format!("{at}.rule")));
                continue;
            };
            let program = match env.compile(&source) {
                Ok(p) => p,
                Err(e) => {
                    errs.push(FieldError::invalid(
                        format!("{at}.rule"),
                        &source,
                        format!("compilation failed: {e}"),
                    ));
                    continue;
                }
            };
            let message_expression = match text("messageExpression") {
                None => None,
                Some(m) => match env.compile(&m) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        errs.push(FieldError::invalid(
                            format!("{at}.messageExpression"),
                            &m,
                            format!("messageExpression compilation failed: {e}"),
                        ));
                        continue;
                    }
                },
            };
            let reason = text("reason");
            if let Some(r) = &reason {
                const REASONS: &[&str] = &[
                    "FieldValueDuplicate",
                    "FieldValueForbidden",
                    "FieldValueInvalid",
                    "FieldValueRequired",
                ];
                if !REASONS.contains(&r.as_str()) {
                    errs.push(FieldError::not_supported(
                        format!("{at}.reason"),
                        r,
                        REASONS,
                    ));
                }
            }
            let transition = program.references().has_variable("oldSelf");
            out.push(Rule {
                program,
                message: text("message").filter(|m| !m.is_empty()),
                message_expression,
                reason,
                field_path: text("fieldPath").filter(|p| !p.is_empty()),
                transition,
                optional_old_self: r.get("optionalOldSelf").and_then(Value::as_bool) == Some(true),
                source,
            });
        }
        out
    }

    /// Whether the rule reads `oldSelf`.
    pub fn is_transition(&self) -> bool {
        self.transition
    }

    /// Evaluates the rule on `value` (of schema type `type_`, at `at`); `old` is the value's
    /// stored counterpart on an update. Transition rules run only when `transitions`.
    pub fn check(
        &self,
        value: &Value,
        old: Option<&Value>,
        transitions: bool,
        type_: &str,
        at: &str,
        errs: &mut Vec<FieldError>,
    ) {
        if self.transition != transitions {
            return;
        }
        if self.transition && old.is_none() && !self.optional_old_self {
            return;
        }
        let mut ctx = cel::Context::with_env(env());
        let Ok(this) = cel::to_value(Cel(value)) else {
            return;
        };
        ctx.add_variable_from_value("self", this);
        if self.transition {
            let old = match old {
                Some(o) => cel::to_value(Cel(o)).unwrap_or(cel::Value::Null),
                None => cel::Value::Null,
            };
            ctx.add_variable_from_value("oldSelf", old);
        }
        // `fieldPath` is relative to the node (`.spec.x`, `['a.b']`, `[0]`).
        let path = match &self.field_path {
            Some(p) => format!("{at}{p}"),
            None => at.to_string(),
        };
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = self
                    .message_expression
                    .as_ref()
                    .and_then(|m| match m.execute(&ctx) {
                        Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                        _ => None,
                    })
                    .or_else(|| self.message.clone())
                    .unwrap_or_else(|| format!("failed rule: {}", self.source));
                errs.push(self.error(&path, type_, message));
            }
            Ok(other) => errs.push(FieldError::invalid(
                path,
                type_,
                format!(
                    "rule did not evaluate to a bool: {other:?}, evaluating rule: {}",
                    self.source
                ),
            )),
            Err(e) => errs.push(FieldError::invalid(
                path,
                type_,
                format!("{e}, evaluating rule: {}", self.source),
            )),
        }
    }

    /// The error a failed rule gives: its reason decides the kind of field error.
    fn error(&self, at: &str, type_: &str, message: String) -> FieldError {
        let field = at.trim_start_matches('.').to_string();
        match self.reason.as_deref() {
            Some("FieldValueForbidden") => FieldError::forbidden(field, message),
            Some("FieldValueRequired") => FieldError::required_msg(field, message),
            Some("FieldValueDuplicate") => FieldError {
                reason: "FieldValueDuplicate".into(),
                message: format!("Duplicate value: {message:?}"),
                field,
            },
            _ => FieldError::invalid(field, type_, message),
        }
    }
}

/// A JSON value as CEL sees it: integers are `int` (not `uint`), objects are maps.
struct Cel<'a>(&'a Value);

impl Serialize for Cel<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => s.serialize_i64(i),
                (None, Some(f)) if n.is_f64() => s.serialize_f64(f),
                _ => s.serialize_u64(n.as_u64().unwrap_or(0)),
            },
            Value::String(t) => s.serialize_str(t),
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(&Cel(i))?;
                }
                seq.end()
            }
            Value::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, &Cel(v))?;
                }
                map.end()
            }
        }
    }
}
