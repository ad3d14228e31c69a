//! A CustomResourceDefinition version's `openAPIV3Schema`, compiled once when the definition
//! is installed: pruning of unknown fields, defaulting and validation of custom objects, with
//! kube-apiserver's field paths and messages (go-openapi's as apiextensions-apiserver turns
//! them into field errors), and the structural-schema checks kube applies to the definition.

use std::collections::BTreeMap;

use api::validation::FieldError;
use serde_json::{Map, Value};

/// A compiled schema node.
#[derive(Debug, Default)]
pub struct Schema {
    type_: Option<String>,
    format: Option<String>,
    nullable: bool,
    enum_: Vec<Value>,
    pattern: Option<(String, regex::Regex)>,
    maximum: Option<(f64, bool)>,
    minimum: Option<(f64, bool)>,
    multiple_of: Option<f64>,
    max_length: Option<u64>,
    min_length: Option<u64>,
    max_items: Option<u64>,
    min_items: Option<u64>,
    unique_items: bool,
    max_properties: Option<u64>,
    min_properties: Option<u64>,
    required: Vec<String>,
    properties: BTreeMap<String, Schema>,
    /// `additionalProperties`: a schema for every other member.
    additional: Option<Box<Schema>>,
    /// `additionalProperties: false` was said (or nothing: unknown members are pruned).
    items: Option<Box<Schema>>,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
    default: Option<Value>,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded_resource: bool,
    /// `x-kubernetes-validations`.
    rules: Vec<super::cel::Rule>,
    /// This node or one under it has rules.
    any_rules: bool,
    /// `x-kubernetes-list-type` (`atomic`, `set`, `map`) and its map keys.
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    /// How apply merges this node when it is a list (from `x-kubernetes-list-type`).
    list: crate::strategic::ListStrategy,
    /// `x-kubernetes-map-type: atomic`: owned and replaced whole.
    map_atomic: bool,
}

/// A problem with the schema itself, as kube's CRD validation reports it.
pub type SchemaErrors = Vec<FieldError>;

impl Schema {
    /// The node of member `name` of this object node: a property, or the schema of every
    /// other member (`additionalProperties`).
    pub fn member(&self, name: &str) -> Option<&Schema> {
        self.properties.get(name).or(self.additional.as_deref())
    }

    /// The node of this list node's items.
    pub fn items(&self) -> Option<&Schema> {
        self.items.as_deref()
    }

    /// How apply merges this list node.
    pub fn list_strategy(&self) -> crate::strategic::ListStrategy {
        self.list
    }

    /// Whether this map node is owned and replaced whole.
    pub fn map_atomic(&self) -> bool {
        self.map_atomic
    }

    /// Compiles `v` (found at `at`, for the errors).
    pub fn compile(v: &Value, at: &str) -> Result<Schema, SchemaErrors> {
        let mut errs = Vec::new();
        let s = compile_node(v, at, &mut errs);
        if errs.is_empty() {
            Ok(s)
        } else {
            Err(errs)
        }
    }

    /// Compiles the schema of a definition being written: also checks its rules' estimated
    /// costs against kube's limits (stored definitions are compiled without, as kube does).
    pub fn compile_checked(v: &Value, at: &str) -> Result<Schema, SchemaErrors> {
        let (s, cost_errs) = super::cel::estimating(at, || Schema::compile(v, at));
        match s {
            Ok(s) if cost_errs.is_empty() => Ok(s),
            Ok(_) => Err(cost_errs),
            Err(mut e) => {
                e.extend(cost_errs);
                Err(e)
            }
        }
    }

    /// Drops members the schema does not know (kube's pruning), at the top level of a
    /// custom object's body (`apiVersion`, `kind` and `metadata` are not in the body).
    pub fn prune_body(&self, body: &mut Map<String, Value>) {
        if self.preserve_unknown {
            for (k, v) in body.iter_mut() {
                if let Some(p) = self.properties.get(k) {
                    p.prune(v);
                }
            }
            return;
        }
        body.retain(|k, _| self.properties.contains_key(k));
        for (k, v) in body.iter_mut() {
            if let Some(p) = self.properties.get(k) {
                p.prune(v);
            }
        }
    }

    fn prune(&self, v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(extra) = &self.additional {
                    for (k, v) in m.iter_mut() {
                        match self.properties.get(k) {
                            Some(p) => p.prune(v),
                            None => extra.prune(v),
                        }
                    }
                    return;
                }
                if !self.preserve_unknown {
                    let embedded = self.embedded_resource;
                    m.retain(|k, _| {
                        self.properties.contains_key(k)
                            || (embedded
                                && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    });
                }
                for (k, v) in m.iter_mut() {
                    if let Some(p) = self.properties.get(k) {
                        p.prune(v);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    items.iter_mut().for_each(|i| s.prune(i));
                }
            }
            _ => {}
        }
    }

    /// The paths of the members of a whole object (or merge patch) that pruning would drop.
    pub fn unknown_fields(&self, obj: &Value) -> Vec<String> {
        let mut out = Vec::new();
        if let Value::Object(m) = obj {
            for (k, v) in m {
                if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match self.properties.get(k) {
                    Some(p) => p.collect_unknown(v, k, &mut out),
                    None if self.preserve_unknown => {}
                    None => out.push(k.clone()),
                }
            }
        }
        out
    }

    fn collect_unknown(&self, v: &Value, at: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let path = format!("{at}.{k}");
                    match self.properties.get(k) {
                        Some(p) => p.collect_unknown(v, &path, out),
                        None => match &self.additional {
                            Some(extra) => extra.collect_unknown(v, &path, out),
                            None if self.preserve_unknown => {}
                            None if self.embedded_resource
                                && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") => {}
                            None => out.push(path),
                        },
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for (i, item) in items.iter().enumerate() {
                        s.collect_unknown(item, &format!("{at}[{i}]"), out);
                    }
                }
            }
            _ => {}
        }
    }

    /// Fills defaults of absent members, recursively (top level of a body).
    pub fn default_body(&self, body: &mut Map<String, Value>) {
        for (k, p) in &self.properties {
            if !body.contains_key(k) {
                if let Some(d) = &p.default {
                    body.insert(k.clone(), d.clone());
                }
            }
            if let Some(v) = body.get_mut(k) {
                p.default_value(v);
            }
        }
    }

    fn default_value(&self, v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, p) in &self.properties {
                    if !m.contains_key(k) {
                        if let Some(d) = &p.default {
                            m.insert(k.clone(), d.clone());
                        }
                    }
                    if let Some(v) = m.get_mut(k) {
                        p.default_value(v);
                    }
                }
                if let Some(extra) = &self.additional {
                    for (k, v) in m.iter_mut() {
                        if !self.properties.contains_key(k) {
                            extra.default_value(v);
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    items.iter_mut().for_each(|i| s.default_value(i));
                }
            }
            _ => {}
        }
    }

    /// Validates a custom object's body (the root object, without its type members and
    /// metadata, which are checked apart).
    pub fn validate_body(&self, body: &Map<String, Value>, errs: &mut Vec<FieldError>) {
        super::cel::begin_object();
        let before = errs.len();
        self.validate_schema_body(body, errs);
        if !self.any_rules {
            return;
        }
        // CEL rules, as kube runs them: not on an object with a type error.
        if errs[before..]
            .iter()
            .any(|e| e.message.contains("must be of type"))
        {
            errs.push(FieldError {
                reason: "FieldValueInvalid".into(),
                field: "<nil>".into(),
                message: "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
            });
            return;
        }
        let root = Value::Object(body.clone());
        self.check_rules(&root, "", errs);
    }

    /// Runs the (non-transition) CEL rules of this node and of those under it.
    fn check_rules(&self, v: &Value, at: &str, errs: &mut Vec<FieldError>) {
        let type_ = self.type_.as_deref().unwrap_or(type_name(v));
        for rule in &self.rules {
            rule.check(v, None, false, type_, at, errs);
        }
        let join = |k: &str| {
            if at.is_empty() {
                k.to_string()
            } else {
                format!("{at}.{k}")
            }
        };
        match v {
            Value::Object(m) => {
                for (k, val) in m {
                    if let Some(p) = self.properties.get(k).or(self.additional.as_deref()) {
                        p.check_rules(val, &join(k), errs);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for (i, item) in items.iter().enumerate() {
                        s.check_rules(item, &format!("{at}[{i}]"), errs);
                    }
                }
            }
            _ => {}
        }
    }

    fn validate_schema_body(&self, body: &Map<String, Value>, errs: &mut Vec<FieldError>) {
        for r in &self.required {
            if !body.contains_key(r) {
                errs.push(FieldError::required(r.clone()));
            }
        }
        for (k, v) in body {
            if let Some(p) = self.properties.get(k) {
                p.validate(v, k, errs);
            } else if let Some(extra) = &self.additional {
                extra.validate(v, k, errs);
            }
        }
    }

    fn validate(&self, v: &Value, at: &str, errs: &mut Vec<FieldError>) {
        if v.is_null() {
            // A null where the schema does not allow one: a type error, as kube reports it.
            if let (false, Some(t)) = (self.nullable, &self.type_) {
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body must be of type {t}: \"null\""),
                ));
            }
            return;
        }
        if self.int_or_string {
            if !(v.is_string() || v.is_i64() || v.is_u64()) {
                errs.push(invalid(
                    at,
                    v,
                    format!(
                        "{at} in body must be of type integer,string: {:?}",
                        type_name(v)
                    ),
                ));
                return;
            }
        } else if let Some(t) = &self.type_ {
            if !type_matches(t, v) {
                errs.push(invalid(
                    at,
                    &Value::String(type_name(v).into()),
                    format!("{at} in body must be of type {t}: {:?}", type_name(v)),
                ));
                return;
            }
        }
        if !self.enum_.is_empty() && !self.enum_.contains(v) {
            let supported: Vec<String> = self.enum_.iter().map(go_value).collect();
            errs.push(FieldError {
                reason: "FieldValueNotSupported".into(),
                field: at.into(),
                message: format!(
                    "Unsupported value: {}: supported values: {}",
                    go_value(v),
                    supported.join(", ")
                ),
            });
        }
        match v {
            Value::String(s) => self.validate_string(s, v, at, errs),
            Value::Number(n) => self.validate_number(n.as_f64().unwrap_or(0.0), v, at, errs),
            Value::Array(items) => {
                if let Some(max) = self.max_items.filter(|m| items.len() as u64 > *m) {
                    errs.push(FieldError::too_many(at, items.len(), max as usize));
                }
                if let Some(min) = self.min_items.filter(|m| (items.len() as u64) < *m) {
                    errs.push(invalid(
                        at,
                        v,
                        format!("{at} in body should have at least {min} items"),
                    ));
                }
                self.check_list_type(items, at, errs);
                if self.unique_items {
                    for (i, a) in items.iter().enumerate() {
                        if items[..i].contains(a) {
                            errs.push(FieldError::duplicate(
                                format!("{at}[{i}]"),
                                go_value(a).trim_matches('"'),
                            ));
                        }
                    }
                }
                if let Some(s) = &self.items {
                    for (i, item) in items.iter().enumerate() {
                        s.validate(item, &format!("{at}[{i}]"), errs);
                    }
                }
            }
            Value::Object(m) => {
                if let Some(max) = self.max_properties.filter(|x| m.len() as u64 > *x) {
                    errs.push(FieldError::too_many(at, m.len(), max as usize));
                }
                if let Some(min) = self.min_properties.filter(|x| (m.len() as u64) < *x) {
                    errs.push(invalid(
                        at,
                        v,
                        format!("{at} in body should have at least {min} properties"),
                    ));
                }
                for r in &self.required {
                    if !m.contains_key(r) {
                        errs.push(FieldError::required(format!("{at}.{r}")));
                    }
                }
                for (k, val) in m {
                    let path = format!("{at}.{k}");
                    if let Some(p) = self.properties.get(k) {
                        p.validate(val, &path, errs);
                    } else if let Some(extra) = &self.additional {
                        extra.validate(val, &path, errs);
                    }
                }
            }
            _ => {}
        }
        for s in &self.all_of {
            s.validate(v, at, errs);
        }
        if !self.any_of.is_empty()
            && !self.any_of.iter().any(|s| {
                let mut e = Vec::new();
                s.validate(v, at, &mut e);
                e.is_empty()
            })
        {
            errs.push(invalid(
                at,
                v,
                format!("{at} in body must validate at least one schema (anyOf)"),
            ));
        }
        if !self.one_of.is_empty() {
            let passing = self
                .one_of
                .iter()
                .filter(|s| {
                    let mut e = Vec::new();
                    s.validate(v, at, &mut e);
                    e.is_empty()
                })
                .count();
            if passing != 1 {
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body must validate one and only one schema (oneOf)"),
                ));
            }
        }
        if let Some(not) = &self.not {
            let mut e = Vec::new();
            not.validate(v, at, &mut e);
            if e.is_empty() {
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body should not validate the given schema"),
                ));
            }
        }
    }

    /// Evaluates the transition rules (those reading `oldSelf`) of an update, where the new
    /// object and the old one both have the value (kube correlates values by path; list
    /// items are not correlated here).
    pub fn validate_transitions_body(
        &self,
        new: &Map<String, Value>,
        old: &Map<String, Value>,
        errs: &mut Vec<FieldError>,
    ) {
        super::cel::begin_object();
        if self.rules.iter().any(|r| r.is_transition()) {
            let (n, o) = (Value::Object(new.clone()), Value::Object(old.clone()));
            for rule in &self.rules {
                rule.check(&n, Some(&o), true, "object", "", errs);
            }
        }
        for (k, v) in new {
            if let (Some(p), Some(o)) = (self.properties.get(k), old.get(k)) {
                p.validate_transitions(v, o, k, errs);
            }
        }
    }

    fn validate_transitions(&self, v: &Value, old: &Value, at: &str, errs: &mut Vec<FieldError>) {
        let type_ = self.type_.as_deref().unwrap_or(type_name(v));
        for rule in &self.rules {
            rule.check(v, Some(old), true, type_, at, errs);
        }
        if let (Value::Object(n), Value::Object(o)) = (v, old) {
            for (k, val) in n {
                let child = self.properties.get(k).or(self.additional.as_deref());
                if let (Some(p), Some(ov)) = (child, o.get(k)) {
                    p.validate_transitions(val, ov, &format!("{at}.{k}"), errs);
                }
            }
        }
    }

    /// kube's list-type invariants: a `set` holds no value twice, a `map` no key twice.
    fn check_list_type(&self, items: &[Value], at: &str, errs: &mut Vec<FieldError>) {
        match self.list_type.as_deref() {
            Some("set") => {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].contains(a) {
                        errs.push(duplicate(&format!("{at}[{i}]"), go_value(a)));
                    }
                }
            }
            Some("map") => {
                let key = |v: &Value| -> Vec<Option<Value>> {
                    self.list_map_keys
                        .iter()
                        .map(|k| v.get(k).cloned())
                        .collect()
                };
                for (i, a) in items.iter().enumerate() {
                    let ka = key(a);
                    if items[..i].iter().any(|b| key(b) == ka) {
                        // Go prints the key map: map[string]interface {}{"name":"a"}.
                        let shown: Vec<String> = self
                            .list_map_keys
                            .iter()
                            .zip(&ka)
                            .filter_map(|(k, v)| {
                                v.as_ref().map(|v| format!("{k:?}:{}", go_value(v)))
                            })
                            .collect();
                        errs.push(duplicate(
                            &format!("{at}[{i}]"),
                            format!("map[string]interface {{}}{{{}}}", shown.join(", ")),
                        ));
                    }
                }
            }
            _ => {}
        }
    }

    fn validate_string(&self, s: &str, v: &Value, at: &str, errs: &mut Vec<FieldError>) {
        let chars = s.chars().count() as u64;
        if let Some(max) = self.max_length.filter(|m| chars > *m) {
            errs.push(FieldError::too_long(at, max as usize));
        }
        if let Some(min) = self.min_length.filter(|m| chars < *m) {
            errs.push(invalid(
                at,
                v,
                format!("{at} in body should be at least {min} chars long"),
            ));
        }
        if let Some((src, re)) = &self.pattern {
            if !re.is_match(s) {
                errs.push(invalid(at, v, format!("{at} in body should match '{src}'")));
            }
        }
        if let Some(f) = &self.format {
            if !format_ok(f, s) {
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body must be of type {f}: {s:?}"),
                ));
            }
        }
    }

    fn validate_number(&self, n: f64, v: &Value, at: &str, errs: &mut Vec<FieldError>) {
        if let Some((max, exclusive)) = self.maximum {
            if n > max || (exclusive && n == max) {
                let how = if exclusive {
                    "less than"
                } else {
                    "less than or equal to"
                };
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body should be {how} {}", go_number(max)),
                ));
            }
        }
        if let Some((min, exclusive)) = self.minimum {
            if n < min || (exclusive && n == min) {
                let how = if exclusive {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body should be {how} {}", go_number(min)),
                ));
            }
        }
        if let Some(m) = self.multiple_of.filter(|m| *m != 0.0) {
            let q = n / m;
            if (q - q.round()).abs() > 1e-9 {
                errs.push(invalid(
                    at,
                    v,
                    format!("{at} in body should be a multiple of {}", go_number(m)),
                ));
            }
        }
    }
}

fn compile_node(v: &Value, at: &str, errs: &mut Vec<FieldError>) -> Schema {
    let Some(m) = v.as_object() else {
        errs.push(FieldError::invalid(at, v, "must be an object"));
        return Schema::default();
    };
    let mut s = Schema::default();
    let str_of = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let u64_of = |k: &str| m.get(k).and_then(Value::as_u64);
    let f64_of = |k: &str| m.get(k).and_then(Value::as_f64);
    let bool_of = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    s.type_ = str_of("type").filter(|t| !t.is_empty());
    if let Some(t) = &s.type_ {
        if !matches!(
            t.as_str(),
            "object" | "array" | "string" | "integer" | "number" | "boolean"
        ) {
            errs.push(FieldError::not_supported(
                format!("{at}.type"),
                t,
                &["array", "boolean", "integer", "number", "object", "string"],
            ));
        }
    }
    s.format = str_of("format").filter(|f| !f.is_empty());
    s.nullable = bool_of("nullable");
    s.enum_ = m
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(p) = str_of("pattern") {
        match regex::Regex::new(&p) {
            Ok(re) => s.pattern = Some((p, re)),
            Err(e) => errs.push(FieldError::invalid(
                format!("{at}.pattern"),
                &p,
                format!("must be a valid regular expression, but isn't: {e}"),
            )),
        }
    }
    s.maximum = f64_of("maximum").map(|x| (x, bool_of("exclusiveMaximum")));
    s.minimum = f64_of("minimum").map(|x| (x, bool_of("exclusiveMinimum")));
    s.multiple_of = f64_of("multipleOf");
    s.max_length = u64_of("maxLength");
    s.min_length = u64_of("minLength");
    s.max_items = u64_of("maxItems");
    s.min_items = u64_of("minItems");
    s.unique_items = bool_of("uniqueItems");
    s.max_properties = u64_of("maxProperties");
    s.min_properties = u64_of("minProperties");
    let strings_of = |k: &str| -> Vec<String> {
        m.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    s.required = strings_of("required");
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            let child = compile_node(p, &format!("{at}.properties[{k}]"), errs);
            s.properties.insert(k.clone(), child);
        }
    }
    match m.get("additionalProperties") {
        Some(Value::Object(_)) => {
            let a = super::cel::descend(super::cel::max_properties(v), || {
                compile_node(
                    &m["additionalProperties"],
                    &format!("{at}.additionalProperties"),
                    errs,
                )
            });
            if !s.properties.is_empty() {
                errs.push(FieldError::forbidden(
                    format!("{at}.additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            s.additional = Some(Box::new(a));
        }
        Some(Value::Bool(true)) => {
            s.additional = Some(Box::new(Schema {
                preserve_unknown: true,
                ..Default::default()
            }))
        }
        _ => {}
    }
    if let Some(items) = m.get("items") {
        if items.is_array() {
            errs.push(FieldError::forbidden(
                format!("{at}.items"),
                "items must be a schema object and not an array",
            ));
        } else {
            let item = super::cel::descend(super::cel::max_items(v), || {
                compile_node(items, &format!("{at}.items"), errs)
            });
            s.items = Some(Box::new(item));
        }
    }
    let list = |k: &str, errs: &mut Vec<FieldError>| -> Vec<Schema> {
        m.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .map(|(i, x)| compile_node(x, &format!("{at}.{k}[{i}]"), errs))
                    .collect()
            })
            .unwrap_or_default()
    };
    s.all_of = list("allOf", errs);
    s.any_of = list("anyOf", errs);
    s.one_of = list("oneOf", errs);
    if let Some(n) = m.get("not") {
        s.not = Some(Box::new(compile_node(n, &format!("{at}.not"), errs)));
    }
    s.default = m.get("default").cloned();
    s.int_or_string = bool_of("x-kubernetes-int-or-string");
    s.preserve_unknown = bool_of("x-kubernetes-preserve-unknown-fields");
    s.embedded_resource = bool_of("x-kubernetes-embedded-resource");
    if let Some(rules) = m.get("x-kubernetes-validations") {
        s.rules = super::cel::Rule::compile_all(
            rules,
            &format!("{at}.x-kubernetes-validations"),
            v,
            errs,
        );
    }
    for forbidden in [
        "$ref",
        "definitions",
        "dependencies",
        "patternProperties",
        "additionalItems",
    ] {
        if m.contains_key(forbidden) {
            errs.push(FieldError::forbidden(
                format!("{at}.{forbidden}"),
                format!("{forbidden} is not supported"),
            ));
        }
    }
    if s.unique_items {
        errs.push(FieldError::forbidden(
            format!("{at}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    s.list_type = str_of("x-kubernetes-list-type");
    s.list_map_keys = strings_of("x-kubernetes-list-map-keys");
    s.list = match s.list_type.as_deref() {
        Some("map") if !s.list_map_keys.is_empty() => {
            crate::strategic::ListStrategy::MergeBy(crate::strategic::intern_keys(&s.list_map_keys))
        }
        Some("set") => crate::strategic::ListStrategy::Set,
        _ => crate::strategic::ListStrategy::Replace,
    };
    s.map_atomic = str_of("x-kubernetes-map-type").as_deref() == Some("atomic");
    if s.list_type.as_deref() == Some("map") && s.list_map_keys.is_empty() {
        errs.push(FieldError::required_msg(
            format!("{at}.x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
    s.any_rules = !s.rules.is_empty()
        || s.properties.values().any(|p| p.any_rules)
        || s.additional.as_ref().is_some_and(|a| a.any_rules)
        || s.items.as_ref().is_some_and(|i| i.any_rules);
    // Structural: every node states its type, unless it is int-or-string or preserves
    // unknown fields (kube's "must not be empty for specified ... properties").
    if s.type_.is_none() && !s.int_or_string && !s.preserve_unknown && is_value_node(at) {
        errs.push(FieldError::required_msg(
            format!("{at}.type"),
            "must not be empty for specified object fields",
        ));
    }
    s
}

/// Whether a node at `at` describes a value: not in a branch of allOf/anyOf/oneOf/not,
/// kube's value validations, which state no types in a structural schema.
fn is_value_node(at: &str) -> bool {
    !(at.contains(".allOf[")
        || at.contains(".anyOf[")
        || at.contains(".oneOf[")
        || at.contains(".not.")
        || at.ends_with(".not"))
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => {
            v.is_i64()
                || v.is_u64()
                || v.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && v.is_f64() && f.abs() < 9.0e15)
        }
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The formats kube-openapi checks (others are accepted as strings).
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "int32" | "int64" | "float" | "double" | "byte" | "password" | "" => true,
        "date-time" | "datetime" => api::meta::Time::parse(s).is_ok(),
        "date" => {
            let b = s.as_bytes();
            b.len() == 10
                && b[4] == b'-'
                && b[7] == b'-'
                && s.split('-').all(|p| p.bytes().all(|c| c.is_ascii_digit()))
        }
        "uuid" => {
            s.len() == 36
                && s.char_indices().all(|(i, c)| {
                    if matches!(i, 8 | 13 | 18 | 23) {
                        c == '-'
                    } else {
                        c.is_ascii_hexdigit()
                    }
                })
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "hostname" => api::validation::dns1123_subdomain(s).is_ok(),
        _ => true,
    }
}

/// How Go prints a JSON value in a field error (`%#v`-like: strings quoted, numbers bare).
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

fn go_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

/// kube's `field.Duplicate`, the value as Go prints it.
fn duplicate(at: &str, shown: String) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate".into(),
        field: at.into(),
        message: format!("Duplicate value: {shown}"),
    }
}

/// kube's `field.Invalid` for a schema failure: the value as Go prints it.
fn invalid(at: &str, v: &Value, why: String) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid".into(),
        field: at.into(),
        message: format!("Invalid value: {}: {why}", go_value(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::compile(
            &json!({"type": "object", "properties": {
                "spec": {"type": "object", "required": ["cronSpec"], "properties": {
                    "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                    "color": {"type": "string", "enum": ["red", "green"]},
                    "port": {"x-kubernetes-int-or-string": true},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 3}}
                }},
                "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            }}),
            "openAPIV3Schema",
        )
        .unwrap()
    }

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn errors(v: Value) -> Vec<String> {
        let mut errs = Vec::new();
        schema().validate_body(&body(v), &mut errs);
        errs.into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn validates_with_kube_messages() {
        assert_eq!(
            errors(json!({"spec": {"cronSpec": "* * * *", "replicas": 15}})),
            [
                r#"spec.cronSpec: Invalid value: "* * * *": spec.cronSpec in body should match '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'"#,
                "spec.replicas: Invalid value: 15: spec.replicas in body should be less than or equal to 10",
            ]
        );
        assert_eq!(
            errors(json!({"spec": {"replicas": "two", "color": "blue", "port": true}})),
            [
                "spec.cronSpec: Required value",
                r#"spec.color: Unsupported value: "blue": supported values: "red", "green""#,
                r#"spec.port: Invalid value: true: spec.port in body must be of type integer,string: "boolean""#,
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            ]
        );
        assert_eq!(
            errors(json!({"spec": {"cronSpec": "* * * * *", "tags": ["a", "bbbb", "c"]}})),
            [
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tags[1]: Too long: must have at most 3 bytes",
            ]
        );
        assert!(errors(json!({"spec": {"cronSpec": "* * * * */5", "port": "http"}})).is_empty());
    }

    #[test]
    fn prunes_unknown_fields_and_fills_defaults() {
        let s = schema();
        let mut b = body(
            json!({"spec": {"cronSpec": "x", "extra": 1, "free": {"any": {"thing": 1}}}, "junk": true}),
        );
        s.prune_body(&mut b);
        s.default_body(&mut b);
        assert_eq!(
            Value::Object(b),
            json!({"spec": {"cronSpec": "x", "free": {"any": {"thing": 1}}, "replicas": 1}})
        );
    }

    #[test]
    fn cel_rules_with_messages_reasons_and_transitions() {
        let s = Schema::compile(
            &json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas",
                 "message": "replicas should be less than or equal to maxReplicas"},
                {"rule": "!has(self.name) || self.name.startsWith('x-')",
                 "messageExpression": "'name ' + self.name + ' must start with x-'",
                 "reason": "FieldValueForbidden", "fieldPath": ".name"},
                {"rule": "self.replicas >= oldSelf.replicas", "message": "may not shrink"}
            ],
            "properties": {
                "replicas": {"type": "integer"},
                "maxReplicas": {"type": "integer"},
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"},
                         "x-kubernetes-validations": [{"rule": "self.all(t, t.lowerAscii() == t)"}]}
            }}}}),
            "openAPIV3Schema",
        )
        .unwrap();
        let check = |v: Value| {
            let mut errs = Vec::new();
            s.validate_body(&body(v), &mut errs);
            errs.into_iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            check(
                json!({"spec": {"replicas": 5, "maxReplicas": 3, "name": "y", "tags": ["a", "B"]}})
            ),
            [
                r#"spec: Invalid value: "object": replicas should be less than or equal to maxReplicas"#,
                "spec.name: Forbidden: name y must start with x-",
                r#"spec.tags: Invalid value: "array": failed rule: self.all(t, t.lowerAscii() == t)"#,
            ]
        );
        assert!(check(
            json!({"spec": {"replicas": 1, "maxReplicas": 3, "name": "x-a", "tags": ["a"]}})
        )
        .is_empty());
        let mut errs = Vec::new();
        s.validate_transitions_body(
            &body(json!({"spec": {"replicas": 1, "maxReplicas": 3}})),
            &body(json!({"spec": {"replicas": 2, "maxReplicas": 3}})),
            &mut errs,
        );
        let text: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(text, [r#"spec: Invalid value: "object": may not shrink"#]);
        // A rule that does not compile is refused with the definition.
        let errs = Schema::compile(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==="}]}),
            "openAPIV3Schema",
        )
        .unwrap_err();
        assert!(
            errs[0].field.ends_with("x-kubernetes-validations[0].rule"),
            "{errs:?}"
        );
        assert!(errs[0].message.contains("compilation failed"), "{errs:?}");
    }

    #[test]
    fn refuses_schemas_that_are_not_structural() {
        let errs = Schema::compile(
            &json!({"type": "object", "properties": {"a": {"properties": {}}, "b": {"type": "strin"}}}),
            "spec.validation.openAPIV3Schema",
        )
        .unwrap_err();
        let text: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            text,
            [
                "spec.validation.openAPIV3Schema.properties[a].type: Required value: must not be empty for specified object fields",
                r#"spec.validation.openAPIV3Schema.properties[b].type: Unsupported value: "strin": supported values: "array", "boolean", "integer", "number", "object", "string""#,
            ]
        );
    }
}
