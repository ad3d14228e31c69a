//! `x-kubernetes-validations`: CEL rules of a custom resource's schema, compiled with the
//! cel-rust project's `cel` crate when the definition is installed and evaluated against the
//! node they sit on (`self`, and `oldSelf` on an update for transition rules), with
//! kube-apiserver's field paths, reasons and messages.
//!
//! The environment is CEL's standard library with the crate's strings, lists and math
//! extensions, and Kubernetes' own libraries as kube-apiserver 1.32 offers them to CRD rules
//! (`super::cel_k8s`): url, ip, cidr, quantity, format, regex `find`/`findAll`, and the
//! lists functions the crate lacks (`isSorted`, `sum`, `min`, `max`, `indexOf`,
//! `lastIndexOf`). kube's later additions (quantity `mul`/`div`, `semver`) are not there.
//!
//! Cost limits, as far as the crate allows (it has no cost tracker, step limit or
//! cancellation; see the section at the end):
//!
//! * at run time, each comprehension is charged its range's size times the nodes its loop
//!   evaluates, before it iterates; a rule past kube's per-call limit (1,000,000) is
//!   cancelled with kube's error and no further rule of the object runs; all the rules of
//!   one object share kube's budget (10,000,000). Function calls over long strings are not
//!   charged at run time (they are linear in a request that is at most 3 MiB);
//! * when a definition is written, each rule's worst case is estimated from the schema's
//!   maxItems, maxProperties and maxLength (unbounded ones from the largest request),
//!   multiplied by how often the rule can run, and refused past kube's per-rule limit
//!   (10,000,000) or, for the schema's total, kube's per-definition limit (100,000,000),
//!   with kube's messages. The estimate approximates cel-go's (1 per call, identifier and
//!   selection, a tenth per byte for string functions, a loop's body times its range's
//!   size); it is not cel-go's number, and the size of a function's result (a `split`) is
//!   not known, so such loops are left to the run-time limit. Stored definitions are not
//!   re-estimated, as kube does not.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelInt, DYN_TYPE, INT_TYPE};
use cel::common::value::CowVal;
use cel::ExecutionError;

use api::validation::FieldError;
#[cfg(test)]
use serde::ser::{SerializeMap, SerializeSeq};
#[cfg(test)]
use serde::Serialize;
use serde_json::Value;

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    source: String,
    /// The rule as compiled, its comprehensions charged to the cost tracker ([`instrument`]).
    program: IdedExpr,
    message: Option<String>,
    message_expression: Option<IdedExpr>,
    reason: Option<String>,
    field_path: Option<String>,
    /// It reads `oldSelf`: a transition rule, evaluated only on updates with an old value.
    transition: bool,
    optional_old_self: bool,
}

pub(crate) fn env() -> Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        for ext in [
            cel::extensions::strings,
            cel::extensions::lists,
            cel::extensions::math,
            super::cel_k8s::extension,
        ] {
            if let Err(e) = env.add_extension(ext) {
                tracing::warn!(error = ?e, "a CEL extension could not be added");
            }
        }
        if let Err(e) = env.add_overload(CHARGE, CHARGE, vec![DYN_TYPE, INT_TYPE], charge) {
            tracing::warn!(error = ?e, "the CEL cost tracker could not be added");
        }
        Arc::new(env)
    })
    .clone()
}

impl Rule {
    /// Compiles the rules of one node (`x-kubernetes-validations`, found at `at`).
    /// `node` is the schema the rules sit on: their estimated cost is checked against it
    /// while [`estimating`] (a definition being written).
    pub fn compile_all(v: &Value, at: &str, node: &Value, errs: &mut Vec<FieldError>) -> Vec<Rule> {
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
            estimate_rule(
                program.expression(),
                node,
                &format!("{at}.rule"),
                "rule",
                errs,
            );
            if let Some(m) = &message_expression {
                estimate_rule(
                    m.expression(),
                    node,
                    &format!("{at}.messageExpression"),
                    "messageExpression",
                    errs,
                );
            }
            out.push(Rule {
                program: instrument(program.expression()),
                message_expression: message_expression.map(|m| instrument(m.expression())),
                message: text("message").filter(|m| !m.is_empty()),
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
        if BUDGET.with(|b| b.get()) < 0 {
            return;
        }
        let mut ctx = cel::Context::with_env(env());
        ctx.add_variable_as_val("self", super::cel_json::val(value));
        if self.transition {
            ctx.add_variable_as_val("oldSelf", super::cel_json::val(old.unwrap_or(&NULL)));
        }
        // `fieldPath` is relative to the node (`.spec.x`, `['a.b']`, `[0]`).
        let path = match &self.field_path {
            Some(p) => format!("{at}{p}"),
            None => at.to_string(),
        };
        let field = at.trim_start_matches('.').to_string();
        let (result, cost) = run(&self.program, &ctx, PER_CALL_LIMIT);
        if cost > PER_CALL_LIMIT {
            // kube: the call is cancelled, and no further rule of the object runs.
            BUDGET.with(|b| b.set(-1));
            errs.push(FieldError::invalid(
                field,
                type_,
                format!(
                    "'{COST_EXCEEDED}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    self.error_string()
                ),
            ));
            return;
        }
        let left = BUDGET.with(|b| {
            let left = b.get() - cost as i64;
            b.set(left);
            left
        });
        if left < 0 {
            errs.push(FieldError::invalid(
                field,
                type_,
                "validation failed due to running out of cost budget, no further validation rules will be run",
            ));
            return;
        }
        match result {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = self
                    .message_expression
                    .as_ref()
                    .and_then(|m| {
                        let (r, cost) = run(m, &ctx, PER_CALL_LIMIT);
                        BUDGET.with(|b| b.set(b.get() - cost as i64));
                        match r {
                            Ok(cel::Value::String(s)) if !s.trim().is_empty() => {
                                Some(s.trim().to_string())
                            }
                            _ => None,
                        }
                    })
                    .or_else(|| self.message.clone())
                    .unwrap_or_else(|| format!("failed rule: {}", self.source.trim()));
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
                format!(
                    "{} evaluating rule: {}",
                    super::cel_k8s::message(&e),
                    self.error_string()
                ),
            )),
        }
    }

    /// kube's `ruleErrorString`: the message, or else the rule.
    fn error_string(&self) -> String {
        match &self.message {
            Some(m) => m.trim().to_string(),
            None => self.source.trim().to_string(),
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
#[cfg(test)]
struct Cel<'a>(&'a Value);

#[cfg(test)]
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

// ---------------------------------------------------------------------------------------
// Cost limits. The `cel` crate has no cost tracker, no step limit and no cancellation, so
// both of kube's limits are approximated here on the expression tree:
//
// * at run time, every comprehension (`all`, `exists`, `map`, `filter`, ...) is charged
//   before it iterates: the size of its range times the nodes its loop evaluates per item
//   (calls, identifiers and field selections, as cel-go charges 1 for each). Nested
//   comprehensions are charged on each outer iteration, so `self.all(x, self.all(y, ...))`
//   costs n² and is cancelled past kube's per-call limit before it runs through;
// * at definition time, a rule's worst case is estimated from the schema's maxItems,
//   maxProperties and maxLength (unbounded ones from the largest request, as kube does) and
//   multiplied by how many times the rule can run (the sizes of the lists and maps above it).

/// kube's `PerCallLimit`: the most one rule evaluation may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// kube's `RuntimeCELCostBudget`: the most all the rules of one object may cost.
pub const RUNTIME_BUDGET: i64 = 10_000_000;
/// kube's `StaticEstimatedCostLimit`: the most a rule's estimated cost may be.
pub const STATIC_RULE_LIMIT: f64 = 10_000_000.0;
/// kube's `StaticEstimatedCRDCostLimit`: the most the rules of one schema may add up to.
pub const STATIC_SCHEMA_LIMIT: f64 = 100_000_000.0;
/// kube's `MaxRequestSizeBytes`, from which unbounded sizes are estimated.
const MAX_REQUEST_BYTES: f64 = 3.0 * 1024.0 * 1024.0;

/// `oldSelf` of a rule with no old value.
static NULL: Value = Value::Null;

const COST_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";
/// The function the instrumented comprehensions call; `@` keeps it out of rules' reach.
const CHARGE: &str = "@charge";

thread_local! {
    /// The cost of the evaluation under way, and its limit.
    static COST: Cell<(u64, u64)> = const { Cell::new((0, u64::MAX)) };
    /// What is left of the object's budget (negative: spent, no more rules run).
    static BUDGET: Cell<i64> = const { Cell::new(RUNTIME_BUDGET) };
    /// While a definition is checked: how many times the node being compiled can be
    /// evaluated, and the estimated cost of each rule so far.
    static ESTIMATE: RefCell<Option<Estimate>> = const { RefCell::new(None) };
}

/// Starts the validation of one object: a fresh runtime budget.
pub fn begin_object() {
    BUDGET.with(|b| b.set(RUNTIME_BUDGET));
}

/// `@charge(range, perItem)`: charges `size(range) * perItem`, and passes `range` on.
fn charge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut args = args.into_iter();
    let (Some(range), Some(per)) = (args.next(), args.next()) else {
        return Err(ExecutionError::invalid_argument_count(2, 0));
    };
    let per = per
        .downcast_ref::<CelInt>()
        .map_or(1, |n| *n.inner())
        .max(1) as u64;
    let size = match range.as_sizer() {
        Some(s) => (*s.size().inner()).max(0) as u64,
        None => 1,
    };
    let over = COST.with(|c| {
        let (spent, limit) = c.get();
        let spent = spent
            .saturating_add(size.saturating_mul(per))
            .saturating_add(1);
        c.set((spent, limit));
        spent > limit
    });
    if over {
        return Err(ExecutionError::function_error("@k8s", COST_EXCEEDED));
    }
    Ok(range)
}

/// Evaluates `expr` with a cost limit: its result and what it cost.
fn run(expr: &IdedExpr, ctx: &cel::Context, limit: u64) -> (cel::ResolveResult, u64) {
    COST.with(|c| c.set((0, limit)));
    let result = cel::Value::resolve(expr, ctx);
    let cost = COST.with(|c| c.replace((0, u64::MAX)).0);
    (result, cost)
}

/// The nodes a loop evaluates per item: calls, identifiers, selections (a nested
/// comprehension counts once, it charges itself).
fn loop_nodes(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Call(c) => {
            1 + c.target.as_deref().map_or(0, loop_nodes)
                + c.args.iter().map(loop_nodes).sum::<u64>()
        }
        Expr::Ident(_) => 1,
        Expr::Select(s) => 1 + loop_nodes(&s.operand),
        Expr::List(l) => 1 + l.elements.iter().map(loop_nodes).sum::<u64>(),
        Expr::Map(m) => {
            1 + m
                .entries
                .iter()
                .map(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => loop_nodes(&me.key) + loop_nodes(&me.value),
                    EntryExpr::StructField(f) => loop_nodes(&f.value),
                })
                .sum::<u64>()
        }
        Expr::Comprehension(_) => 1,
        _ => 0,
    }
}

/// `e` with every comprehension's range wrapped in `@charge(range, perItem)`.
fn instrument(e: &IdedExpr) -> IdedExpr {
    let mut e = e.clone();
    instrument_in(&mut e);
    e
}

fn instrument_in(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(c) => {
            if let Some(t) = c.target.as_deref_mut() {
                instrument_in(t);
            }
            c.args.iter_mut().for_each(instrument_in);
        }
        Expr::Select(s) => instrument_in(&mut s.operand),
        Expr::List(l) => l.elements.iter_mut().for_each(instrument_in),
        Expr::Map(m) => {
            for en in &mut m.entries {
                match &mut en.expr {
                    EntryExpr::MapEntry(me) => {
                        instrument_in(&mut me.key);
                        instrument_in(&mut me.value);
                    }
                    EntryExpr::StructField(f) => instrument_in(&mut f.value),
                }
            }
        }
        Expr::Struct(st) => {
            for en in &mut st.entries {
                if let EntryExpr::StructField(f) = &mut en.expr {
                    instrument_in(&mut f.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                instrument_in(part);
            }
            let per = (loop_nodes(&c.loop_cond) + loop_nodes(&c.loop_step)).max(1);
            let range = std::mem::take(&mut c.iter_range);
            let id = range.id;
            c.iter_range = IdedExpr {
                id,
                expr: Expr::Call(CallExpr {
                    func_name: CHARGE.to_string(),
                    target: None,
                    args: vec![
                        range,
                        IdedExpr {
                            id,
                            expr: Expr::Literal(LiteralValue::Int(CelInt::from(per as i64))),
                        },
                    ],
                }),
            };
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

// --- the static estimate ---

#[derive(Debug)]
struct Estimate {
    /// How many times the node being compiled can be evaluated.
    cardinality: f64,
    /// Each rule's (and messageExpression's) path and estimated cost.
    costs: Vec<(String, f64)>,
}

/// Runs `f` (compiling a definition's schema) with rule costs estimated; returns what it
/// gives and the schema-wide errors kube reports (`at` is the schema's path).
pub fn estimating<T>(at: &str, f: impl FnOnce() -> T) -> (T, Vec<FieldError>) {
    ESTIMATE.with(|e| {
        *e.borrow_mut() = Some(Estimate {
            cardinality: 1.0,
            costs: Vec::new(),
        })
    });
    let out = f();
    let est = ESTIMATE.with(|e| e.borrow_mut().take());
    let mut errs = Vec::new();
    if let Some(mut est) = est {
        let total: f64 = est.costs.iter().map(|(_, c)| c).sum();
        if total > STATIC_SCHEMA_LIMIT {
            // kube names the most expensive expressions (up to 4) that weigh at least 1%.
            est.costs.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (path, _) in est
                .costs
                .iter()
                .filter(|(_, c)| *c >= STATIC_SCHEMA_LIMIT / 100.0)
                .take(4)
            {
                errs.push(FieldError::forbidden(
                    path.clone(),
                    "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                ));
            }
            errs.push(FieldError::forbidden(
                at.to_string(),
                cost_message(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    total,
                    STATIC_SCHEMA_LIMIT,
                ),
            ));
        }
    }
    (out, errs)
}

/// Compiles a node under a list or map: its rules can run `times` times more.
pub fn descend<T>(times: f64, f: impl FnOnce() -> T) -> T {
    let before = ESTIMATE.with(|e| {
        e.borrow_mut().as_mut().map(|est| {
            let b = est.cardinality;
            est.cardinality = (b * times).min(f64::MAX);
            b
        })
    });
    let out = f();
    if let Some(b) = before {
        ESTIMATE.with(|e| {
            if let Some(est) = e.borrow_mut().as_mut() {
                est.cardinality = b;
            }
        });
    }
    out
}

/// kube's `getCostErrorMessage`.
fn cost_message(what: &str, cost: f64, limit: f64) -> String {
    let factor = cost / limit;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!("{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")
}

fn estimate_rule(e: &IdedExpr, node: &Value, at: &str, what: &str, errs: &mut Vec<FieldError>) {
    let Some(times) = ESTIMATE.with(|est| est.borrow().as_ref().map(|x| x.cardinality)) else {
        return;
    };
    let mut vars = vec![
        ("self".to_string(), Some(node)),
        ("oldSelf".to_string(), Some(node)),
    ];
    let cost = (estimate(e, &mut vars) * times).min(f64::MAX);
    if cost > STATIC_RULE_LIMIT {
        errs.push(FieldError::forbidden(
            at.to_string(),
            cost_message(&format!("estimated {what} cost"), cost, STATIC_RULE_LIMIT),
        ));
    }
    ESTIMATE.with(|est| {
        if let Some(x) = est.borrow_mut().as_mut() {
            x.costs.push((at.to_string(), cost));
        }
    });
}

/// The least bytes a JSON value of this schema takes.
fn min_size(s: &Value) -> f64 {
    match s.get("type").and_then(Value::as_str) {
        Some("string") => 2.0,
        Some("boolean") => 4.0,
        Some("object") | Some("array") => 2.0,
        _ => 1.0,
    }
}

/// The most items a list of this schema holds (kube's estimate when maxItems is unset).
pub fn max_items(list: &Value) -> f64 {
    match list.get("maxItems").and_then(Value::as_u64) {
        Some(n) => n as f64,
        None => {
            let item = list.get("items").map_or(1.0, min_size);
            ((MAX_REQUEST_BYTES - 2.0) / (item + 1.0)).floor()
        }
    }
}

/// The most members a map of this schema holds.
pub fn max_properties(map: &Value) -> f64 {
    match map.get("maxProperties").and_then(Value::as_u64) {
        Some(n) => n as f64,
        None => match map.get("additionalProperties") {
            Some(v) if v.is_object() || v == &Value::Bool(true) => {
                let value = if v.is_object() { min_size(v) } else { 1.0 };
                ((MAX_REQUEST_BYTES - 2.0) / (value + 6.0)).floor()
            }
            _ => map
                .get("properties")
                .and_then(Value::as_object)
                .map_or(1.0, |p| p.len() as f64),
        },
    }
}

fn max_length(s: Option<&Value>) -> f64 {
    match s.and_then(|s| s.get("maxLength")).and_then(Value::as_u64) {
        Some(n) => n as f64,
        None => MAX_REQUEST_BYTES - 2.0,
    }
}

/// The schema of what `e` evaluates to, when it is a path into `self`.
fn schema_of<'a>(e: &IdedExpr, vars: &[(String, Option<&'a Value>)]) -> Option<&'a Value> {
    match &e.expr {
        Expr::Ident(n) => vars
            .iter()
            .rev()
            .find(|(v, _)| v == n)
            .and_then(|(_, s)| *s),
        Expr::Select(sel) if !sel.test => {
            let s = schema_of(&sel.operand, vars)?;
            s.get("properties")
                .and_then(|p| p.get(&sel.field))
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        }
        Expr::Call(c) if c.func_name == "_[_]" && c.args.len() == 2 => {
            let s = schema_of(&c.args[0], vars)?;
            s.get("items")
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        }
        _ => None,
    }
}

/// The most items `e` can hold, when iterated.
fn size_of(e: &IdedExpr, vars: &[(String, Option<&Value>)]) -> f64 {
    if let Expr::List(l) = &e.expr {
        return l.elements.len() as f64;
    }
    if let Expr::Map(m) = &e.expr {
        return m.entries.len() as f64;
    }
    match schema_of(e, vars) {
        Some(s) if s.get("type").and_then(Value::as_str) == Some("array") => max_items(s),
        Some(s) if s.get("type").and_then(Value::as_str) == Some("object") => max_properties(s),
        // Not a path into `self` (a function's result): taken as one item.
        _ => 1.0,
    }
}

/// The most bytes a string expression holds: a literal's, or a path's maxLength (the
/// longest of its enum values, else unbounded).
fn string_size(e: &IdedExpr, vars: &[(String, Option<&Value>)]) -> Option<f64> {
    if let Expr::Literal(LiteralValue::String(s)) = &e.expr {
        return Some(s.inner().len() as f64);
    }
    let s = schema_of(e, vars)?;
    if s.get("type").and_then(Value::as_str) != Some("string") {
        return None;
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        let longest = values.iter().filter_map(Value::as_str).map(str::len).max();
        if let Some(n) = longest {
            return Some(n as f64);
        }
    }
    Some(max_length(Some(s)))
}

/// String functions whose cost grows with the string: cel-go charges a tenth per byte.
const TRAVERSING: &[&str] = &[
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "find",
    "findAll",
    "split",
    "replace",
    "lowerAscii",
    "upperAscii",
    "trim",
    "indexOf",
    "lastIndexOf",
    "_+_",
    "url",
    "isURL",
    "quantity",
    "isQuantity",
    "ip",
    "isIP",
    "cidr",
    "isCIDR",
    "validate",
];

/// cel-go's estimate of `e`'s worst-case cost, approximated.
fn estimate(e: &IdedExpr, vars: &mut Vec<(String, Option<&Value>)>) -> f64 {
    match &e.expr {
        Expr::Literal(_) | Expr::Unspecified => 0.0,
        Expr::Ident(_) => 1.0,
        Expr::Select(s) => 1.0 + estimate(&s.operand, vars),
        Expr::List(l) => 10.0 + l.elements.iter().map(|x| estimate(x, vars)).sum::<f64>(),
        Expr::Map(m) => {
            30.0 + m
                .entries
                .iter()
                .map(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => estimate(&me.key, vars) + estimate(&me.value, vars),
                    EntryExpr::StructField(f) => estimate(&f.value, vars),
                })
                .sum::<f64>()
        }
        Expr::Struct(st) => {
            40.0 + st
                .entries
                .iter()
                .map(|en| match &en.expr {
                    EntryExpr::StructField(f) => estimate(&f.value, vars),
                    EntryExpr::MapEntry(me) => estimate(&me.value, vars),
                })
                .sum::<f64>()
        }
        Expr::Call(c) => {
            let mut cost = 1.0
                + c.target.as_deref().map_or(0.0, |t| estimate(t, vars))
                + c.args.iter().map(|a| estimate(a, vars)).sum::<f64>();
            if matches!(c.func_name.as_str(), "_==_" | "_!=_") && c.args.len() == 2 {
                // cel-go: comparing strings walks the shorter one.
                if let (Some(a), Some(b)) =
                    (string_size(&c.args[0], vars), string_size(&c.args[1], vars))
                {
                    cost += (a.min(b) * 0.1).ceil();
                }
            } else if TRAVERSING.contains(&c.func_name.as_str()) {
                let subject = c.target.as_deref().or(c.args.first());
                if let Some(len) = subject.and_then(|x| string_size(x, vars)) {
                    cost += (len * 0.1).ceil();
                }
            }
            cost
        }
        Expr::Comprehension(c) => {
            let n = size_of(&c.iter_range, vars);
            let item = schema_of(&c.iter_range, vars).and_then(|s| {
                match s.get("type").and_then(Value::as_str) {
                    Some("array") => s.get("items"),
                    _ => None,
                }
            });
            let fixed = estimate(&c.iter_range, vars) + estimate(&c.accu_init, vars);
            vars.push((c.iter_var.clone(), item));
            if let Some(v2) = &c.iter_var2 {
                vars.push((v2.clone(), None));
            }
            vars.push((c.accu_var.clone(), None));
            let per = estimate(&c.loop_cond, vars) + estimate(&c.loop_step, vars);
            let result = estimate(&c.result, vars);
            vars.truncate(vars.len() - if c.iter_var2.is_some() { 3 } else { 2 });
            fixed + n * per + result
        }
    }
}

// ---------------------------------------------------------------------------------------
// Expressions outside a schema: admission policies and match conditions
// (`crate::admission::conditions`), in the same environment, under the same per-call limit.

/// An expression compiled for admission (a ValidatingAdmissionPolicy's, a match condition).
#[derive(Debug)]
pub(crate) struct Expression {
    pub(crate) source: String,
    /// As compiled, its comprehensions charged to the cost tracker.
    program: IdedExpr,
    /// Each read of a variable of the environment (comprehensions' own variables left out).
    pub(crate) reads: Vec<Read>,
}

/// One read of an environment variable: its name, the field selected on it
/// (`variables.x`), and where it is in the source (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) name: String,
    pub(crate) field: Option<String>,
    pub(crate) at: (usize, usize),
}

/// Compiles an admission expression; the error is the parser's (`ERROR: <input>:1:3: ...`).
pub(crate) fn compile(source: &str) -> Result<Expression, String> {
    let program = env().compile(source).map_err(|e| e.to_string())?;
    let mut reads = Vec::new();
    let mut scope = Vec::new();
    collect_reads(
        program.expression(),
        program.source_info(),
        &mut scope,
        &mut reads,
    );
    Ok(Expression {
        source: source.to_string(),
        program: instrument(program.expression()),
        reads,
    })
}

/// An error at `at` (1-based line and column) of `source`, as cel-go displays it: the
/// message, the line and a caret under the column.
pub(crate) fn error_at(source: &str, at: (usize, usize), message: &str) -> String {
    let mut out = format!("ERROR: <input>:{}:{}: {message}", at.0, at.1);
    if let Some(line) = source.lines().nth(at.0.saturating_sub(1)) {
        let line = line.replace('\t', " ");
        out.push_str(&format!(
            "\n | {line}\n | {}^",
            ".".repeat(at.1.saturating_sub(1))
        ));
    }
    out
}

/// A JSON value as the expressions see it (integers `int`, objects maps), converted whole:
/// what [`super::cel_json::val`] must answer as.
#[cfg(test)]
pub(crate) fn to_cel(v: &Value) -> cel::Value {
    cel::to_value(Cel(v)).unwrap_or(cel::Value::Null)
}

/// A variable's value for [`eval`].
#[derive(Clone, Copy)]
pub(crate) enum Bound<'a> {
    /// A JSON document, bound as it is ([`super::cel_json`]): only what the expression
    /// reads of it is converted.
    Json(&'a Value),
    /// A value already in CEL.
    Cel(&'a cel::Value),
}

/// Evaluates `e` with the named variables under kube's per-call limit: its value (or the
/// error's text, kube's own for its libraries and for the limit) and its cost.
pub(crate) fn eval(
    e: &Expression,
    vars: &[(&str, Bound<'_>)],
) -> (Result<cel::Value, String>, u64) {
    let mut ctx = cel::Context::with_env(env());
    for (name, value) in vars {
        match value {
            Bound::Json(json) => ctx.add_variable_as_val(*name, super::cel_json::val(json)),
            Bound::Cel(value) => ctx.add_variable_from_value(*name, (*value).clone()),
        }
    }
    let (result, cost) = run(&e.program, &ctx, PER_CALL_LIMIT);
    if cost > PER_CALL_LIMIT {
        return (Err(COST_EXCEEDED.to_string()), cost);
    }
    (result.map_err(|e| super::cel_k8s::message(&e)), cost)
}

/// The 1-based line and column of an expression node.
fn position(info: &cel::common::ast::SourceInfo, id: u64) -> (usize, usize) {
    let Some((start, _)) = info.offset_for(id) else {
        return (1, 1);
    };
    let before = info.source.get(..start as usize).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn collect_reads(
    e: &IdedExpr,
    info: &cel::common::ast::SourceInfo,
    scope: &mut Vec<String>,
    reads: &mut Vec<Read>,
) {
    let mut walk = |x: &IdedExpr, scope: &mut Vec<String>| collect_reads(x, info, scope, reads);
    match &e.expr {
        Expr::Ident(name) => {
            if !name.starts_with('@') && !scope.contains(name) {
                reads.push(Read {
                    name: name.clone(),
                    field: None,
                    at: position(info, e.id),
                });
            }
        }
        Expr::Select(s) => match &s.operand.expr {
            Expr::Ident(name) if !s.test && !scope.contains(name) => reads.push(Read {
                name: name.clone(),
                field: Some(s.field.clone()),
                at: position(info, s.operand.id),
            }),
            _ => walk(&s.operand, scope),
        },
        Expr::Call(c) => {
            if let Some(t) = c.target.as_deref() {
                walk(t, scope);
            }
            for a in &c.args {
                walk(a, scope);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, scope)),
        Expr::Map(m) => {
            for en in &m.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        walk(&me.key, scope);
                        walk(&me.value, scope);
                    }
                    EntryExpr::StructField(f) => walk(&f.value, scope),
                }
            }
        }
        Expr::Struct(st) => {
            for en in &st.entries {
                match &en.expr {
                    EntryExpr::StructField(f) => walk(&f.value, scope),
                    EntryExpr::MapEntry(me) => walk(&me.value, scope),
                }
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, scope);
            walk(&c.accu_init, scope);
            let depth = scope.len();
            scope.push(c.accu_var.clone());
            scope.push(c.iter_var.clone());
            if let Some(v2) = &c.iter_var2 {
                scope.push(v2.clone());
            }
            walk(&c.loop_cond, scope);
            walk(&c.loop_step, scope);
            scope.truncate(depth + 1);
            walk(&c.result, scope);
            scope.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(rule: &str, node: &Value) -> Vec<Rule> {
        let mut errs = Vec::new();
        let r = Rule::compile_all(&json!([{ "rule": rule }]), "x", node, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        r
    }

    #[test]
    fn a_nested_comprehension_over_a_big_list_is_cancelled() {
        let node = json!({"type": "array", "items": {"type": "integer"}});
        let rule = &rules("self.all(x, self.all(y, self.all(z, true)))", &node)[0];
        let big = Value::Array((0..200).map(|i| json!(i)).collect());
        begin_object();
        let mut errs = Vec::new();
        let started = std::time::Instant::now();
        rule.check(&big, None, false, "array", "spec.items", &mut errs);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].message,
            "Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.all(x, self.all(y, self.all(z, true)))"
        );
        // No further rule runs for the object.
        let mut more = Vec::new();
        rules("false", &node)[0].check(&big, None, false, "array", "spec.items", &mut more);
        assert!(more.is_empty());
        // A small list passes.
        begin_object();
        let small = Value::Array((0..20).map(|i| json!(i)).collect());
        let mut errs = Vec::new();
        rule.check(&small, None, false, "array", "spec.items", &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn map_and_filter_still_work_instrumented() {
        let node = json!({"type": "array", "items": {"type": "integer"}});
        let rule = &rules(
            "self.map(x, x * 2).filter(x, x > 2) == [4, 6] && self.exists_one(x, x == 1)",
            &node,
        )[0];
        begin_object();
        let mut errs = Vec::new();
        rule.check(&json!([1, 2, 3]), None, false, "array", "spec", &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
    }

    /// The errors of compiling a schema node's rules while estimating, and the schema-wide
    /// ones after.
    fn estimate_errors(schema: Value) -> Vec<String> {
        let (mut errs, total) = estimating("openAPIV3Schema", || {
            let mut errs = Vec::new();
            let rules = schema["x-kubernetes-validations"].clone();
            Rule::compile_all(
                &rules,
                "openAPIV3Schema.x-kubernetes-validations",
                &schema,
                &mut errs,
            );
            errs
        });
        errs.extend(total);
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn the_estimate_refuses_unbounded_nested_loops() {
        let unbounded = json!({
            "type": "array", "items": {"type": "integer"},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x == y || true))"}]
        });
        let (_, total) = estimating("openAPIV3Schema", || {
            let mut errs = Vec::new();
            let rules = unbounded["x-kubernetes-validations"].clone();
            Rule::compile_all(
                &rules,
                "openAPIV3Schema.x-kubernetes-validations",
                &unbounded,
                &mut errs,
            );
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert_eq!(
                errs[0].field,
                "openAPIV3Schema.x-kubernetes-validations[0].rule"
            );
            assert!(errs[0].message.contains("estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"), "{}", errs[0].message);
        });
        assert_eq!(total.len(), 2, "{total:?}");
        let bounded = json!({
            "type": "array", "maxItems": 100, "items": {"type": "integer"},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x == y || true))"}]
        });
        assert!(estimate_errors(bounded).is_empty());
        // A string function over an unbounded string inside a loop over an unbounded list.
        let strings = json!({
            "type": "array", "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.all(x, x.contains('a string'))"}]
        });
        let (_, _) = estimating("s", || {
            let mut errs = Vec::new();
            Rule::compile_all(
                &strings["x-kubernetes-validations"],
                "r",
                &strings,
                &mut errs,
            );
            assert_eq!(errs.len(), 1, "{errs:?}");
        });
        // Rules on the items of an unbounded list are multiplied by its size.
        let (_, _) = estimating("s", || {
            descend(max_items(&strings), || {
                let mut errs = Vec::new();
                let item = json!({"type": "string", "maxLength": 1000});
                Rule::compile_all(
                    &json!([{"rule": "self.contains('x')"}]),
                    "r",
                    &item,
                    &mut errs,
                );
                assert_eq!(errs.len(), 1, "{errs:?}");
                assert!(errs[0].message.contains("by factor of"), "{errs:?}");
            })
        });
        // Without estimating (a stored definition), nothing is refused.
        let mut errs = Vec::new();
        Rule::compile_all(
            &unbounded["x-kubernetes-validations"],
            "r",
            &unbounded,
            &mut errs,
        );
        assert!(errs.is_empty());
    }

    #[test]
    fn admission_expressions_read_their_environment() {
        let e = compile("object.spec.all(x, x.size() > variables.min) && params == null && [1].exists(y, y == z)").unwrap();
        let reads: Vec<(String, Option<String>)> = e
            .reads
            .iter()
            .map(|r| (r.name.clone(), r.field.clone()))
            .collect();
        assert_eq!(
            reads,
            vec![
                ("object".into(), Some("spec".into())),
                ("variables".into(), Some("min".into())),
                ("params".into(), None),
                ("z".into(), None),
            ]
        );
        assert_eq!(e.reads[3].at, (1, 86));
        assert_eq!(
            error_at(
                &e.source,
                e.reads[3].at,
                "undeclared reference to 'z' (in container '')"
            ),
            format!(
                "ERROR: <input>:1:86: undeclared reference to 'z' (in container '')\n | {}\n | {}^",
                e.source,
                ".".repeat(85)
            )
        );
        let multi = compile("true &&\n  nope").unwrap();
        assert_eq!(multi.reads[0].at, (2, 3));
        assert!(compile("object.spec.replicas <=")
            .unwrap_err()
            .starts_with("ERROR: <input>:1:"));
    }

    #[test]
    fn admission_expressions_evaluate_with_named_variables_under_the_limit() {
        let object = json!({"spec": {"replicas": 3, "items": (0..200).collect::<Vec<_>>()}});
        let object = Bound::Json(&object);
        let params = to_cel(&json!({"maxReplicas": 5}));
        let e = compile("object.spec.replicas <= params.maxReplicas").unwrap();
        let (r, _) = eval(&e, &[("object", object), ("params", Bound::Cel(&params))]);
        assert_eq!(r, Ok(cel::Value::Bool(true)));
        let (r, _) = eval(&e, &[("object", object)]);
        assert!(r.is_err());
        let heavy = compile(
            "object.spec.items.all(x, object.spec.items.all(y, object.spec.items.all(z, true)))",
        )
        .unwrap();
        let (r, cost) = eval(&heavy, &[("object", object)]);
        assert_eq!(r, Err(COST_EXCEEDED.to_string()));
        assert!(cost > PER_CALL_LIMIT);
    }
}
