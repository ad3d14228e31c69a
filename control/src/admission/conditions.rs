//! Admission CEL (docs/design/admission.md §1, §3): expressions compiled once for their
//! environment, the variables of one request converted to CEL once, and `matchConditions`
//! (of webhooks and of ValidatingAdmissionPolicies) evaluated as kube-apiserver's
//! `matchconditions.Matcher` evaluates them.
//!
//! The environment is the CRD rules' (`crate::crd::cel`: CEL's standard library, the crate's
//! extensions and Kubernetes' libraries), with these variables:
//!
//! * `object` and `oldObject`: the new and the old object, `null` when the operation has none
//!   (a delete has no `object`, a create no `oldObject`);
//! * `request`: the AdmissionRequest ([`request_json`]): `kind`, `resource`, `subResource`,
//!   `requestKind`, `requestResource`, `requestSubResource`, `name`, `namespace`,
//!   `operation`, `userInfo`, `dryRun`, `options`;
//! * `namespaceObject`: the request's Namespace (`null` for cluster-scoped requests);
//! * `params` (policies with a paramKind): the binding's parameter object, or `null`;
//! * `variables` (policies with variables): `variables.NAME`, each evaluated on first use
//!   and kept for the rest of the request.
//!
//! `authorizer` (kube's authorization checks from CEL) is not offered: an expression that
//! names it compiles, as it does in kube, but its evaluation fails ([`NO_AUTHORIZER`]), and
//! the failure policy decides.
//!
//! skiff's CEL is dynamically typed: an expression that kube's type-checker would refuse
//! (a validation that is not a bool) compiles here and fails when evaluated. Undeclared
//! variables, and undeclared fields of `variables`, are refused when compiling, as kube
//! refuses them.
//!
//! Costs: each evaluation is cancelled past kube's per-call limit, and the evaluations of one
//! policy share kube's budget (10,000,000; 2,500,000 for match conditions), as far as the CEL
//! crate lets them be counted (`crate::crd::cel`, the comprehensions).

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeSet, HashMap};

use api::admissionpolicy::ExpressionEnv;
use api::admissionregistration::MatchCondition;
use serde_json::{json, Map, Value};

use super::review;
use crate::crd::cel as engine;
use engine::Bound;

/// A variable the request does not have.
static NULL: Value = Value::Null;

/// kube's `RuntimeCELCostBudget`: what one policy's evaluations may cost together.
pub const RUNTIME_BUDGET: i64 = 10_000_000;
/// kube's `RuntimeCELCostBudgetMatchConditions`: what match conditions may cost together.
pub const MATCH_CONDITIONS_BUDGET: i64 = 2_500_000;
/// kube's error when the budget is spent.
pub const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";
/// The error of an expression that reads `authorizer`.
pub const NO_AUTHORIZER: &str = "the authorizer variable is not supported by this server";

/// An expression compiled for its environment.
#[derive(Debug)]
pub struct Compiled {
    expr: engine::Expression,
    /// The variables it reads as `variables.NAME`.
    variables: BTreeSet<String>,
    /// It reads `variables` as a whole (`variables['x']`, `has(variables.x)`): every
    /// variable is evaluated first.
    all_variables: bool,
    reads_authorizer: bool,
    /// The request's variables it reads ([`BASE`] bits): only these are converted to CEL
    /// for it.
    base: u8,
}

/// The variables of a request, in [`Activation`]'s order; bit `i` of [`Compiled`]'s reads
/// is `BASE[i]`.
const BASE: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "params",
];
/// `params`' place in [`BASE`].
const PARAMS: usize = 4;

impl Compiled {
    /// The expression's source.
    pub fn source(&self) -> &str {
        &self.expr.source
    }

    /// Whether it reads the request's variable `name` (`object`, `request`,
    /// `namespaceObject`, ...).
    pub fn reads(&self, name: &str) -> bool {
        BASE.iter()
            .position(|b| *b == name)
            .is_some_and(|i| self.base & (1 << i) != 0)
    }
}

/// Compiles `source` for `env`. The error is kube's detail (`compilation failed: ERROR:
/// <input>:1:1: undeclared reference to 'foo' (in container '')` and the line with a caret).
pub fn compile(source: &str, env: &ExpressionEnv<'_>) -> Result<Compiled, String> {
    let expr = engine::compile(source).map_err(|e| format!("compilation failed: {e}"))?;
    let mut variables = BTreeSet::new();
    let mut all_variables = false;
    let mut reads_authorizer = false;
    let mut base = 0u8;
    for r in &expr.reads {
        if let Some(i) = BASE.iter().position(|b| *b == r.name) {
            base |= 1 << i;
        }
        let declared = match r.name.as_str() {
            "object" | "oldObject" | "request" | "namespaceObject" => true,
            "params" => env.params,
            "authorizer" => {
                reads_authorizer = true;
                env.authorizer
            }
            "variables" => env.variables.is_some(),
            _ => false,
        };
        if !declared {
            return Err(format!(
                "compilation failed: {}",
                engine::error_at(
                    source,
                    r.at,
                    &format!("undeclared reference to '{}' (in container '')", r.name)
                )
            ));
        }
        if r.name == "variables" {
            match &r.field {
                Some(f) if env.variables.is_some_and(|v| v.contains(&f.as_str())) => {
                    variables.insert(f.clone());
                }
                Some(f) => {
                    let at = (r.at.0, r.at.1 + "variables".len());
                    return Err(format!(
                        "compilation failed: {}",
                        engine::error_at(source, at, &format!("undefined field '{f}'"))
                    ));
                }
                None => all_variables = true,
            }
        }
    }
    Ok(Compiled {
        expr,
        variables,
        all_variables,
        reads_authorizer,
        base,
    })
}

/// The checker of `api::admissionpolicy` ([`api::admissionpolicy::set_expression_checker`]):
/// whether `source` compiles for `env`.
pub fn check(source: &str, env: &ExpressionEnv<'_>) -> Result<(), String> {
    compile(source, env).map(|_| ())
}

/// The `request` variable: the AdmissionRequest as kube gives it to CEL (no `uid` of its
/// own, no `object` and `oldObject`, which are variables of their own).
pub fn request_json(r: &review::Request) -> Value {
    let mut m = Map::new();
    m.insert("uid".into(), json!(""));
    m.insert("kind".into(), r.kind.clone());
    m.insert("resource".into(), r.resource.clone());
    if !r.sub_resource.is_empty() {
        m.insert("subResource".into(), json!(r.sub_resource));
    }
    m.insert("requestKind".into(), r.request_kind.clone());
    m.insert("requestResource".into(), r.request_resource.clone());
    if !r.sub_resource.is_empty() {
        m.insert("requestSubResource".into(), json!(r.sub_resource));
    }
    if !r.name.is_empty() {
        m.insert("name".into(), json!(r.name));
    }
    if !r.namespace.is_empty() {
        m.insert("namespace".into(), json!(r.namespace));
    }
    m.insert("operation".into(), json!(r.operation));
    m.insert("userInfo".into(), r.user_info.clone());
    m.insert("dryRun".into(), json!(r.dry_run));
    if let Some(o) = &r.options {
        m.insert("options".into(), o.clone());
    }
    Value::Object(m)
}

/// The `namespaceObject` variable: the Namespace with the metadata kube exposes (no managed
/// fields, no owner references).
pub fn namespace_object(ns: &Value) -> Value {
    let mut out = Map::new();
    for key in ["apiVersion", "kind", "spec", "status"] {
        if let Some(v) = ns.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let mut meta = Map::new();
    if let Some(m) = ns.get("metadata").and_then(Value::as_object) {
        for key in [
            "name",
            "generateName",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "labels",
            "annotations",
            "finalizers",
        ] {
            if let Some(v) = m.get(key) {
                meta.insert(key.into(), v.clone());
            }
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Value::Object(out)
}

/// What one request gives its expressions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Input<'a> {
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    /// The `request` variable ([`request_json`]).
    pub request: Option<&'a Value>,
    /// The request's Namespace as stored (see [`namespace_object`] for what is exposed).
    pub namespace: Option<&'a Value>,
    pub params: Option<&'a Value>,
}

/// A named expression other expressions read as `variables.NAME`.
#[derive(Debug)]
pub struct Variable {
    pub name: String,
    /// The compiled expression, or why it did not compile.
    pub expr: Result<Compiled, String>,
}

/// The variables of one evaluation, bound as the JSON they are: an expression converts only
/// what it reads (a policy that reads `object.spec.replicas` never pays for the object's
/// metadata, nor for `request` or `namespaceObject`); the policy's variables evaluated on
/// first use and kept.
pub struct Activation<'v> {
    input: Input<'v>,
    /// `namespaceObject`, built on first use.
    namespace: OnceCell<Value>,
    variables: &'v [Variable],
    /// Each variable's value, or its error, once evaluated.
    values: RefCell<Vec<Slot>>,
    budget: Cell<i64>,
}

/// A variable's state in one activation.
#[derive(Debug, Clone)]
enum Slot {
    Unevaluated,
    Evaluating,
    Done(Result<cel::Value, String>),
}

/// The budget is spent: no further expression runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBudget;

impl<'v> Activation<'v> {
    /// The activation of `input`, with `variables` (a policy's; `&[]` elsewhere) and the
    /// whole runtime budget.
    pub fn new(input: &Input<'v>, variables: &'v [Variable]) -> Activation<'v> {
        Activation {
            input: *input,
            namespace: OnceCell::new(),
            variables,
            values: RefCell::new(vec![Slot::Unevaluated; variables.len()]),
            budget: Cell::new(RUNTIME_BUDGET),
        }
    }

    /// The same variables with other parameters (a binding's next parameter object): the
    /// variables are evaluated afresh, the budget is whole again.
    pub fn with_params<'p>(&self, params: Option<&'p Value>) -> Activation<'p>
    where
        'v: 'p,
    {
        Activation {
            input: Input {
                params,
                ..self.input
            },
            namespace: self.namespace.clone(),
            variables: self.variables,
            values: RefCell::new(vec![Slot::Unevaluated; self.variables.len()]),
            budget: Cell::new(RUNTIME_BUDGET),
        }
    }

    /// The request's variable `BASE[i]` (`null` when the request has none).
    fn base_value(&self, i: usize) -> &Value {
        let input = &self.input;
        let value = match i {
            0 => input.object,
            1 => input.old_object,
            2 => input.request,
            3 => input
                .namespace
                .map(|ns| self.namespace.get_or_init(|| namespace_object(ns))),
            PARAMS => input.params,
            _ => unreachable!("BASE has {} variables", BASE.len()),
        };
        value.unwrap_or(&NULL)
    }

    /// Starts a new budget (kube gives one to each group of expressions).
    pub fn set_budget(&self, budget: i64) {
        self.budget.set(budget);
    }

    /// What is left of the budget.
    pub fn budget(&self) -> i64 {
        self.budget.get()
    }

    fn charge(&self, cost: u64) -> Result<(), OutOfBudget> {
        let left = self
            .budget
            .get()
            .saturating_sub(cost.min(i64::MAX as u64) as i64);
        self.budget.set(left);
        if left < 0 {
            Err(OutOfBudget)
        } else {
            Ok(())
        }
    }

    /// Evaluates `c`: its value, or kube's error (`expression 'X' resulted in error: ...`).
    pub fn eval(&self, c: &Compiled) -> Result<Result<cel::Value, String>, OutOfBudget> {
        Ok(self
            .eval_raw(c)?
            .map_err(|e| format!("expression '{}' resulted in error: {e}", c.expr.source)))
    }

    /// Evaluates `c`: its value or the error's own text.
    fn eval_raw(&self, c: &Compiled) -> Result<Result<cel::Value, String>, OutOfBudget> {
        let mut vars: HashMap<String, cel::Value> = HashMap::new();
        let mut failed: Vec<(String, String)> = Vec::new();
        for (i, v) in self.variables.iter().enumerate() {
            if !c.all_variables && !c.variables.contains(&v.name) {
                continue;
            }
            match self.variable(i)? {
                Ok(value) => {
                    vars.insert(v.name.clone(), value);
                }
                Err(e) => failed.push((v.name.clone(), e)),
            }
        }
        let mut env: Vec<(&str, Bound<'_>)> = (0..BASE.len())
            .filter(|i| c.base & (1 << i) != 0)
            .map(|i| (BASE[i], Bound::Json(self.base_value(i))))
            .collect();
        let variables = cel::Value::from(vars);
        if !self.variables.is_empty() {
            env.push(("variables", Bound::Cel(&variables)));
        }
        let (result, cost) = engine::eval(&c.expr, &env);
        self.charge(cost)?;
        Ok(result.map_err(|e| {
            // A variable that failed is left out: reaching it is its error (one that is not
            // reached, behind `false &&`, is no error, as kube evaluates variables lazily).
            if let Some((_, why)) = failed
                .iter()
                .find(|(n, _)| e == format!("No such key: {n}"))
            {
                return why.clone();
            }
            if c.reads_authorizer && e == "Undeclared reference to 'authorizer'" {
                return NO_AUTHORIZER.to_string();
            }
            e
        }))
    }

    /// The value of the `i`th variable, evaluated on first use.
    fn variable(&self, i: usize) -> Result<Result<cel::Value, String>, OutOfBudget> {
        match &self.values.borrow()[i] {
            Slot::Done(done) => return Ok(done.clone()),
            Slot::Evaluating => {
                return Ok(Err(format!(
                    "variable {:?} refers to itself",
                    self.variables[i].name
                )))
            }
            Slot::Unevaluated => {}
        }
        self.values.borrow_mut()[i] = Slot::Evaluating;
        let v = &self.variables[i];
        let value = match &v.expr {
            Err(e) => Err(format!(
                "composited variable {:?} fails to compile: {e}",
                v.name
            )),
            Ok(c) => self.eval_raw(c)?,
        };
        self.values.borrow_mut()[i] = Slot::Done(value.clone());
        Ok(value)
    }
}

/// A list of match conditions, compiled once.
#[derive(Debug, Default)]
pub struct MatchConditions {
    conditions: Vec<(String, Result<Compiled, String>)>,
}

/// What match conditions say of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    /// All are true.
    Yes,
    /// This one is false.
    No { condition: String },
    /// None is false, some failed: the errors, kube's aggregate (`[a, b]` for several).
    Error(String),
}

impl Matched {
    /// The failure policy's answer to an error: `Ok(matches)`, or the error (`Fail`).
    pub fn under(self, ignore_failures: bool) -> Result<bool, String> {
        match self {
            Matched::Yes => Ok(true),
            Matched::No { .. } => Ok(false),
            Matched::Error(_) if ignore_failures => Ok(false),
            Matched::Error(e) => Err(e),
        }
    }
}

impl MatchConditions {
    /// Compiles the conditions (of a stored configuration: one that does not compile fails
    /// when evaluated). `params`: the policy has a paramKind.
    pub fn compile(conditions: &[MatchCondition], params: bool) -> MatchConditions {
        let env = ExpressionEnv {
            params,
            authorizer: true,
            variables: None,
        };
        MatchConditions {
            conditions: conditions
                .iter()
                .map(|c| (c.name.clone(), compile(c.expression.trim(), &env)))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Whether one of them reads the request's variable `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.conditions
            .iter()
            .any(|(_, c)| c.as_ref().is_ok_and(|c| c.reads(name)))
    }

    /// Evaluates the conditions as kube does: all of them (each within the per-call limit,
    /// all within [`MATCH_CONDITIONS_BUDGET`]); then, in order, the first false one decides
    /// (even after errors); else errors are an error; else they match.
    pub fn evaluate(&self, act: &Activation<'_>) -> Matched {
        if self.conditions.is_empty() {
            return Matched::Yes;
        }
        let saved = act.budget();
        act.set_budget(MATCH_CONDITIONS_BUDGET);
        let mut results = Vec::with_capacity(self.conditions.len());
        for (name, c) in &self.conditions {
            let r = match c {
                Err(e) => Err(format!("compilation error: {e}")),
                Ok(c) => match act.eval(c) {
                    Err(OutOfBudget) => {
                        act.set_budget(saved);
                        return Matched::Error(OUT_OF_BUDGET.to_string());
                    }
                    Ok(Ok(cel::Value::Bool(b))) => Ok(b),
                    Ok(Ok(_)) => Err(format!(
                        "expression '{}' resulted in error: cel expression must evaluate to bool",
                        c.source()
                    )),
                    Ok(Err(e)) => Err(e),
                },
            };
            results.push((name, r));
        }
        act.set_budget(saved);
        let mut errors = Vec::new();
        for (name, r) in results {
            match r {
                Ok(false) => {
                    return Matched::No {
                        condition: name.clone(),
                    }
                }
                Ok(true) => {}
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Matched::Yes
        } else {
            Matched::Error(aggregate(&errors))
        }
    }
}

/// kube's `utilerrors.NewAggregate(...).Error()`: one message alone, several (each once) as
/// `[a, b]`.
pub fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> ExpressionEnv<'static> {
        ExpressionEnv {
            params: false,
            authorizer: true,
            variables: None,
        }
    }

    fn conditions(list: &[(&str, &str)]) -> MatchConditions {
        let list: Vec<MatchCondition> = list
            .iter()
            .map(|(n, e)| MatchCondition {
                name: n.to_string(),
                expression: e.to_string(),
            })
            .collect();
        MatchConditions::compile(&list, false)
    }

    fn pod_request(namespace: &str) -> Value {
        request_json(&review::Request {
            kind: json!({"group": "", "version": "v1", "kind": "Pod"}),
            resource: json!({"group": "", "version": "v1", "resource": "pods"}),
            request_kind: json!({"group": "", "version": "v1", "kind": "Pod"}),
            request_resource: json!({"group": "", "version": "v1", "resource": "pods"}),
            name: "web".into(),
            namespace: namespace.into(),
            operation: "CREATE",
            user_info: json!({"username": "alice", "groups": ["dev", "system:authenticated"]}),
            dry_run: false,
            options: Some(json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"})),
            ..Default::default()
        })
    }

    #[test]
    fn the_request_variable_as_kube_builds_it() {
        let r = pod_request("default");
        assert_eq!(r["uid"], "");
        assert_eq!(r["operation"], "CREATE");
        assert_eq!(r["namespace"], "default");
        assert_eq!(r["dryRun"], false);
        assert!(r.get("subResource").is_none());
        assert!(r.get("object").is_none());
        let cluster = pod_request("");
        assert!(cluster.get("namespace").is_none());
    }

    #[test]
    fn undeclared_variables_are_refused_as_kube_words_it() {
        assert_eq!(
            check("foo == 1", &env()).unwrap_err(),
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo == 1\n | ^"
        );
        assert_eq!(
            check("object.x == params.y", &env()).unwrap_err(),
            "compilation failed: ERROR: <input>:1:13: undeclared reference to 'params' (in container '')\n | object.x == params.y\n | ............^"
        );
        let with_params = ExpressionEnv {
            params: true,
            ..env()
        };
        assert!(check("object.x == params.y", &with_params).is_ok());
        // Comprehension variables are not the environment's.
        assert!(check("object.items.all(i, i.name != '')", &env()).is_ok());
        // Variables: only the declared ones.
        let names = ["a"];
        let vars = ExpressionEnv {
            variables: Some(&names),
            ..env()
        };
        assert!(check("variables.a > 1", &vars).is_ok());
        assert_eq!(
            check("variables.b > 1", &vars).unwrap_err(),
            "compilation failed: ERROR: <input>:1:10: undefined field 'b'\n | variables.b > 1\n | .........^"
        );
        assert!(check("variables.a > 1", &env()).is_err());
        // Message expressions have no authorizer.
        let message = ExpressionEnv {
            authorizer: false,
            ..env()
        };
        assert!(check("authorizer.group('') != null", &message).is_err());
        assert!(check("authorizer.group('') != null", &env()).is_ok());
        assert!(check("object.spec.replicas <", &env())
            .unwrap_err()
            .starts_with("compilation failed: ERROR: <input>:1:"));
    }

    #[test]
    fn all_true_matches_and_a_false_one_does_not() {
        let req = pod_request("kube-system");
        let object = json!({"metadata": {"name": "web", "labels": {"app": "web"}}});
        let input = Input {
            object: Some(&object),
            request: Some(&req),
            ..Default::default()
        };
        let act = Activation::new(&input, &[]);
        // The documentation's: exclude kube-system, only for a user's requests.
        let c = conditions(&[
            ("exclude-leases", "!(request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases')"),
            ("exclude-kubelet-requests", "!('system:nodes' in request.userInfo.groups)"),
            ("not-kube-system", "request.namespace != 'kube-system'"),
        ]);
        assert_eq!(
            c.evaluate(&act),
            Matched::No {
                condition: "not-kube-system".into()
            }
        );
        let req = pod_request("default");
        let input = Input {
            request: Some(&req),
            ..input
        };
        assert_eq!(c.evaluate(&Activation::new(&input, &[])), Matched::Yes);
        assert_eq!(
            conditions(&[]).evaluate(&Activation::new(&input, &[])),
            Matched::Yes
        );
        // oldObject is null on a create.
        let c = conditions(&[(
            "create",
            "oldObject == null && object.metadata.labels.app == 'web'",
        )]);
        assert_eq!(c.evaluate(&Activation::new(&input, &[])), Matched::Yes);
    }

    #[test]
    fn false_wins_over_errors_and_errors_aggregate() {
        let req = pod_request("default");
        let input = Input {
            request: Some(&req),
            ..Default::default()
        };
        let act = Activation::new(&input, &[]);
        let c = conditions(&[("broken", "object.metadata.name == 'x'"), ("no", "false")]);
        assert_eq!(
            c.evaluate(&act),
            Matched::No {
                condition: "no".into()
            }
        );
        let c = conditions(&[
            ("broken", "object.metadata.name == 'x'"),
            ("yes", "true"),
            ("broken-too", "request.nope"),
        ]);
        let Matched::Error(e) = c.evaluate(&act) else {
            panic!("an error")
        };
        assert!(
            e.starts_with("[expression 'object.metadata.name == 'x'' resulted in error: "),
            "{e}"
        );
        assert!(
            e.contains(", expression 'request.nope' resulted in error: No such key: nope]"),
            "{e}"
        );
        assert_eq!(Matched::Error(e.clone()).under(true), Ok(false));
        assert_eq!(Matched::Error(e.clone()).under(false), Err(e));
        // One error alone is not bracketed; a non-bool is an error.
        let c = conditions(&[("one", "'a string'")]);
        assert_eq!(
            c.evaluate(&act),
            Matched::Error(
                "expression ''a string'' resulted in error: cel expression must evaluate to bool"
                    .into()
            )
        );
        // A stored condition that does not compile fails when evaluated.
        let c = conditions(&[("undeclared", "foo")]);
        let Matched::Error(e) = c.evaluate(&act) else {
            panic!("an error")
        };
        assert!(e.starts_with("compilation error: compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo'"), "{e}");
    }

    #[test]
    fn the_budget_of_match_conditions() {
        let items: Vec<u32> = (0..200).collect();
        let object = json!({"items": items});
        let input = Input {
            object: Some(&object),
            ..Default::default()
        };
        let act = Activation::new(&input, &[]);
        // Each within the per-call limit, together past the match conditions' budget.
        let heavy = "object.items.all(x, object.items.all(y, x + y >= 0))";
        let list: Vec<(String, &str)> = (0..30).map(|i| (format!("c{i}"), heavy)).collect();
        let list: Vec<(&str, &str)> = list.iter().map(|(n, e)| (n.as_str(), *e)).collect();
        assert_eq!(conditions(&list[..1]).evaluate(&act), Matched::Yes);
        assert_eq!(
            conditions(&list).evaluate(&act),
            Matched::Error(OUT_OF_BUDGET.into())
        );
    }

    #[test]
    fn variables_are_evaluated_once_on_first_use() {
        let names = ["replicas", "big", "broken"];
        let env = ExpressionEnv {
            params: true,
            authorizer: true,
            variables: Some(&names),
        };
        let vars = vec![
            Variable {
                name: "replicas".into(),
                expr: compile("object.spec.replicas", &env),
            },
            Variable {
                name: "big".into(),
                expr: compile("variables.replicas > params.max", &env),
            },
            Variable {
                name: "broken".into(),
                expr: compile("object.spec.nope", &env),
            },
        ];
        let object = json!({"spec": {"replicas": 7}});
        let params = json!({"max": 5});
        let input = Input {
            object: Some(&object),
            params: Some(&params),
            ..Default::default()
        };
        let act = Activation::new(&input, &vars);
        let e = compile("!variables.big", &env).unwrap();
        assert_eq!(act.eval(&e), Ok(Ok(cel::Value::Bool(false))));
        // Other parameters: evaluated afresh.
        let small = json!({"max": 10});
        assert_eq!(
            act.with_params(Some(&small)).eval(&e),
            Ok(Ok(cel::Value::Bool(true)))
        );
        // A failing variable fails the expressions that reach it, with its own error.
        let e = compile("variables.broken == 1", &env).unwrap();
        assert_eq!(
            act.eval(&e),
            Ok(Err(
                "expression 'variables.broken == 1' resulted in error: No such key: nope".into()
            ))
        );
        let e = compile("false && variables.broken == 1", &env).unwrap();
        assert_eq!(act.eval(&e), Ok(Ok(cel::Value::Bool(false))));
        // The authorizer is not offered.
        let e = compile(
            "authorizer.group('apps').resource('deployments').check('create').allowed()",
            &env,
        )
        .unwrap();
        assert_eq!(
            act.eval(&e),
            Ok(Err(format!(
                "expression '{}' resulted in error: {NO_AUTHORIZER}",
                e.source()
            )))
        );
    }

    #[test]
    fn the_namespace_object_hides_what_kube_hides() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod", "labels": {"env": "prod"}, "managedFields": [{}], "ownerReferences": [{}]}, "spec": {"finalizers": ["kubernetes"]}});
        let seen = namespace_object(&ns);
        assert_eq!(
            seen["metadata"],
            json!({"name": "prod", "labels": {"env": "prod"}})
        );
        assert_eq!(seen["spec"], ns["spec"]);
        let input = Input {
            namespace: Some(&ns),
            ..Default::default()
        };
        let e = compile("namespaceObject.metadata.labels.env == 'prod' && !has(namespaceObject.metadata.managedFields)", &env()).unwrap();
        assert_eq!(
            Activation::new(&input, &[]).eval(&e),
            Ok(Ok(cel::Value::Bool(true)))
        );
    }
}
