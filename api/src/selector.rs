//! Label selectors (`app=web,tier in (a,b),!canary`) and field selectors
//! (`spec.nodeName=n1,status.phase!=Failed`), parsed from query strings and from
//! `metav1.LabelSelector`, matched against objects and printed back.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::meta::LabelSelector;
use crate::object::{AnyObject, Kind};
use crate::validation::{label_value, qualified_name};

#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Syntax(String),
    #[error("invalid label key {key:?}: {why}")]
    InvalidKey { key: String, why: String },
    #[error("invalid label value: {value:?}: {why}")]
    InvalidValue { value: String, why: String },
    #[error("{0:?} is not a valid label selector operator")]
    InvalidOperator(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// A label requirement's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `a=b`
    Equals,
    /// `a==b`
    DoubleEquals,
    /// `a!=b`
    NotEquals,
    /// `a in (x,y)`
    In,
    /// `a notin (x,y)`
    NotIn,
    /// `a`
    Exists,
    /// `!a`
    DoesNotExist,
    /// `a>1` (node affinity's Gt)
    GreaterThan,
    /// `a<1` (node affinity's Lt)
    LessThan,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Sorted and without duplicates; one value for the equality and comparison operators,
    /// none for Exists/DoesNotExist.
    pub values: Vec<String>,
}

impl Requirement {
    /// Checks the key and values and normalizes the values.
    pub fn new(
        key: &str,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        qualified_name(key).map_err(|why| SelectorError::InvalidKey {
            key: key.into(),
            why,
        })?;
        let mut values = values;
        match operator {
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    return Err(SelectorError::Syntax(
                        "exact-match compatibility requires one single value".into(),
                    ));
                }
            }
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(SelectorError::Syntax(
                        "for 'in', 'notin' operators, values set can't be empty".into(),
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(SelectorError::Syntax(
                        "values set must be empty for exists and does not exist".into(),
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 || values[0].parse::<i64>().is_err() {
                    return Err(SelectorError::Syntax(
                        "for 'Gt', 'Lt' operators, exactly one integer value is required".into(),
                    ));
                }
                return Ok(Requirement {
                    key: key.into(),
                    operator,
                    values,
                });
            }
        }
        for v in &values {
            label_value(v).map_err(|why| SelectorError::InvalidValue {
                value: v.clone(),
                why,
            })?;
        }
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.into(),
            operator,
            values,
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let got = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                got.is_some_and(|v| self.values.contains(v))
            }
            Operator::NotEquals | Operator::NotIn => got.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(want)) = (
                    got.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        let first = self.values.first().map(String::as_str).unwrap_or("");
        match self.operator {
            Operator::Equals => write!(f, "{k}={first}"),
            Operator::DoubleEquals => write!(f, "{k}=={first}"),
            Operator::NotEquals => write!(f, "{k}!={first}"),
            Operator::In => write!(f, "{k} in ({})", self.values.join(",")),
            Operator::NotIn => write!(f, "{k} notin ({})", self.values.join(",")),
            Operator::Exists => write!(f, "{k}"),
            Operator::DoesNotExist => write!(f, "!{k}"),
            Operator::GreaterThan => write!(f, "{k}>{first}"),
            Operator::LessThan => write!(f, "{k}<{first}"),
        }
    }
}

/// A label selector: all requirements must hold. The empty selector matches everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// A selector from requirements (sorted by key, as Kubernetes prints them).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Selector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Selector { requirements }
    }

    /// `key=value` for every pair (Kubernetes' SelectorFromSet).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Result<Selector, SelectorError> {
        let reqs = labels
            .iter()
            .map(|(k, v)| Requirement::new(k, Operator::Equals, vec![v.clone()]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Selector::from_requirements(reqs))
    }

    /// A `metav1.LabelSelector` (matchLabels and matchExpressions, ANDed).
    pub fn from_label_selector(ls: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in &ls.match_labels {
            reqs.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for e in &ls.match_expressions {
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(SelectorError::InvalidOperator(other.into())),
            };
            reqs.push(Requirement::new(&e.key, op, e.values.clone())?);
        }
        Ok(Selector::from_requirements(reqs))
    }

    /// Parses the query-string syntax.
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Selector::everything());
        }
        for term in split_terms(s)? {
            reqs.push(parse_requirement(term.trim())?);
        }
        Ok(Selector::from_requirements(reqs))
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Selector, SelectorError> {
        Selector::parse(s)
    }
}

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => {
                if depth > 0 {
                    return Err(SelectorError::Syntax(format!(
                        "nested parentheses in {s:?}"
                    )));
                }
                depth += 1;
            }
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| SelectorError::Syntax(format!("unbalanced ')' in {s:?}")))?;
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Syntax(format!("missing ')' in {s:?}")));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn is_key_char(c: char) -> bool {
    !(c.is_whitespace() || "!=<>(),".contains(c))
}

fn parse_requirement(term: &str) -> Result<Requirement, SelectorError> {
    let syntax = || SelectorError::Syntax(format!("{term:?}"));
    if term.is_empty() {
        return Err(SelectorError::Syntax(
            "found '', expected: identifier".into(),
        ));
    }
    if let Some(rest) = term.strip_prefix('!') {
        let key = rest.trim();
        if key.is_empty() || !key.chars().all(is_key_char) {
            return Err(syntax());
        }
        return Requirement::new(key, Operator::DoesNotExist, Vec::new());
    }
    let key_end = term.find(|c| !is_key_char(c)).unwrap_or(term.len());
    let key = &term[..key_end];
    if key.is_empty() {
        return Err(syntax());
    }
    let rest = term[key_end..].trim_start();
    if rest.is_empty() {
        return Requirement::new(key, Operator::Exists, Vec::new());
    }
    let (op, value) = if let Some(v) = rest.strip_prefix("!=") {
        (Operator::NotEquals, v)
    } else if let Some(v) = rest.strip_prefix("==") {
        (Operator::DoubleEquals, v)
    } else if let Some(v) = rest.strip_prefix('=') {
        (Operator::Equals, v)
    } else if let Some(v) = rest.strip_prefix('>') {
        (Operator::GreaterThan, v)
    } else if let Some(v) = rest.strip_prefix('<') {
        (Operator::LessThan, v)
    } else {
        let word_end = rest
            .find(|c: char| c.is_whitespace() || c == '(')
            .unwrap_or(rest.len());
        let op = match &rest[..word_end] {
            "in" => Operator::In,
            "notin" => Operator::NotIn,
            _ => return Err(syntax()),
        };
        let set = rest[word_end..].trim();
        let inner = set
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(syntax)?;
        let values: Vec<String> = if inner.trim().is_empty() {
            Vec::new()
        } else {
            inner.split(',').map(|v| v.trim().to_string()).collect()
        };
        if values.iter().any(|v| !v.chars().all(is_key_char)) {
            return Err(syntax());
        }
        return Requirement::new(key, op, values);
    };
    let value = value.trim();
    if !value.chars().all(is_key_char) {
        return Err(syntax());
    }
    Requirement::new(key, op, vec![value.to_string()])
}

// ---------------------------------------------------------------------------------------
// Field selectors

/// The fields a kind can be selected by (besides none: every kind has these two first).
pub fn supported_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Pod => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        Kind::Node => &["metadata.name", "metadata.namespace", "spec.unschedulable"],
        Kind::Namespace => &["metadata.name", "metadata.namespace", "status.phase"],
        Kind::Secret => &["metadata.name", "metadata.namespace", "type"],
        Kind::Event => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        Kind::ReplicaSet | Kind::ReplicationController => {
            &["metadata.name", "metadata.namespace", "status.replicas"]
        }
        Kind::Job => &["metadata.name", "metadata.namespace", "status.successful"],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

/// A field requirement's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    DoubleEquals,
    NotEquals,
}

/// One `field=value` term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

/// A field selector: all terms must hold. The empty selector matches everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

fn escape_field_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits at unescaped commas, keeping escapes.
fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

fn unescape(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => {
                    return Err(SelectorError::Syntax(format!(
                        "invalid field selector: invalid escape sequence: \\{e}"
                    )))
                }
                None => {
                    return Err(SelectorError::Syntax(
                        "invalid field selector: unterminated escape sequence".into(),
                    ))
                }
            }
        } else if c == '=' {
            return Err(SelectorError::Syntax(
                "invalid field selector: unescaped '=' in value".into(),
            ));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// Parses `f=v,f==v,f!=v`; values may escape `\,`, `\=` and `\\`.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector::everything());
        }
        for term in split_unescaped(s, ',') {
            let term = term.trim();
            let (field, operator, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, FieldOperator::NotEquals, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, FieldOperator::DoubleEquals, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, FieldOperator::Equals, v)
            } else {
                return Err(SelectorError::Syntax(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if field.is_empty() || field.contains('\\') {
                return Err(SelectorError::Syntax(format!("invalid selector: '{term}'")));
            }
            requirements.push(FieldRequirement {
                field: field.to_string(),
                operator,
                value: unescape(value)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Parses and checks that every field is supported for `kind`.
    pub fn parse_for(kind: Kind, s: &str) -> Result<FieldSelector, SelectorError> {
        let sel = FieldSelector::parse(s)?;
        sel.check_kind(kind)?;
        Ok(sel)
    }

    /// `field label not supported: <field>` for the first field `kind` lacks.
    pub fn check_kind(&self, kind: Kind) -> Result<(), SelectorError> {
        let supported = supported_fields(kind);
        // A custom resource's: its definition's selectableFields.
        let selectable = kind
            .custom_rules()
            .map(|r| r.selectable_fields())
            .unwrap_or_default();
        match self
            .requirements
            .iter()
            .find(|r| !supported.contains(&r.field.as_str()) && !selectable.contains(&r.field))
        {
            Some(r) => Err(SelectorError::UnsupportedField(r.field.clone())),
            None => Ok(()),
        }
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value `field` must equal, if a term says so (`spec.nodeName=n1` -> `n1`):
    /// lets callers narrow a scan.
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator != FieldOperator::NotEquals)
            .map(|r| r.value.as_str())
    }

    /// Whether `obj` satisfies every term. An unsupported field never equals anything.
    pub fn matches(&self, obj: &AnyObject) -> bool {
        self.requirements.iter().all(|r| {
            let got = obj.field(&r.field);
            match r.operator {
                FieldOperator::Equals | FieldOperator::DoubleEquals => {
                    got.as_deref() == Some(r.value.as_str())
                }
                FieldOperator::NotEquals => got.as_deref() != Some(r.value.as_str()),
            }
        })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match r.operator {
                FieldOperator::Equals => "=",
                FieldOperator::DoubleEquals => "==",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{op}{}", r.field, escape_field_value(&r.value))?;
        }
        Ok(())
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<FieldSelector, SelectorError> {
        FieldSelector::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Event, Node, Pod, Secret};
    use crate::meta::LabelSelectorRequirement;
    use crate::Resource;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let s = Selector::parse("a=b, c==d,e!=f,g in (x, y),h notin (z),i,!j").unwrap();
        let ops: Vec<_> = s.requirements().iter().map(|r| r.operator).collect();
        assert_eq!(
            ops,
            vec![
                Operator::Equals,
                Operator::DoubleEquals,
                Operator::NotEquals,
                Operator::In,
                Operator::NotIn,
                Operator::Exists,
                Operator::DoesNotExist
            ]
        );
        assert_eq!(s.to_string(), "a=b,c==d,e!=f,g in (x,y),h notin (z),i,!j");
    }

    #[test]
    fn display_sorts_by_key_and_round_trips() {
        let s = Selector::parse("tier in (web,cache),app=nginx,!canary").unwrap();
        assert_eq!(s.to_string(), "app=nginx,!canary,tier in (cache,web)");
        assert_eq!(Selector::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = Selector::parse("").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("a", "b")])));
        assert_eq!(s.to_string(), "");
    }

    #[test]
    fn matching_semantics() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "missing!=x",
            "tier in (front,back)",
            "tier notin (back)",
            "missing notin (x)",
            "app",
            "!missing",
            "n>4",
            "n<6",
            "app=web,tier=front",
            "app in(web)",
        ];
        for s in yes {
            assert!(Selector::parse(s).unwrap().matches(&l), "{s} should match");
        }
        let no = [
            "app=db",
            "app!=web",
            "missing=x",
            "tier in (back)",
            "missing in (x)",
            "tier notin (front)",
            "missing",
            "!app",
            "n>5",
            "n<5",
            "app>1",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(
                !Selector::parse(s).unwrap().matches(&l),
                "{s} should not match"
            );
        }
    }

    #[test]
    fn empty_value_is_allowed() {
        let s = Selector::parse("a=").unwrap();
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn syntax_errors() {
        for s in [
            "a=b,",
            ",a",
            "a in (x",
            "a in x",
            "a notin ()",
            "a b",
            "=b",
            "!",
            "a=b=c",
            "a in (x,(y))",
            "a)",
            "a foo (x)",
            "a!b",
        ] {
            assert!(Selector::parse(s).is_err(), "{s:?} parsed");
        }
    }

    #[test]
    fn invalid_keys_and_values() {
        assert!(matches!(
            Selector::parse("-a=b"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            Selector::parse("a=-b"),
            Err(SelectorError::InvalidValue { .. })
        ));
        let long = "x".repeat(64);
        assert!(Selector::parse(&format!("a={long}")).is_err());
        assert!(Selector::parse("example.com/app=web").is_ok());
        assert!(Selector::parse("a>x").is_err());
    }

    #[test]
    fn from_label_selector() {
        let ls = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: vec!["b".into(), "a".into()],
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: vec![],
                },
                LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "Exists".into(),
                    values: vec![],
                },
                LabelSelectorRequirement {
                    key: "zone".into(),
                    operator: "NotIn".into(),
                    values: vec!["z".into()],
                },
            ],
        };
        let s = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(
            s.to_string(),
            "app=web,!canary,env,tier in (a,b),zone notin (z)"
        );
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a"), ("env", "p")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("env", "p"),
            ("canary", "1")
        ])));

        let bad_op = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: vec!["1".into()],
            }],
            ..Default::default()
        };
        assert_eq!(
            Selector::from_label_selector(&bad_op),
            Err(SelectorError::InvalidOperator("Gt".into()))
        );
        let no_values = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "In".into(),
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(Selector::from_label_selector(&no_values).is_err());
        assert!(Selector::from_label_selector(&LabelSelector::default())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn from_labels_set() {
        let s = Selector::from_labels(&labels(&[("b", "2"), ("a", "1")])).unwrap();
        assert_eq!(s.to_string(), "a=1,b=2");
    }

    fn pod(name: &str, node: Option<&str>, phase: &str) -> AnyObject {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.spec.node_name = node.map(str::to_string);
        p.status.phase = Some(phase.into());
        p.into_any()
    }

    #[test]
    fn field_selector_parse_and_display() {
        let s = FieldSelector::parse("spec.nodeName=n1, status.phase!=Failed,metadata.name==a")
            .unwrap();
        assert_eq!(s.requirements().len(), 3);
        assert_eq!(
            s.to_string(),
            "spec.nodeName=n1,status.phase!=Failed,metadata.name==a"
        );
        assert_eq!(s.required_value("spec.nodeName"), Some("n1"));
        assert_eq!(s.required_value("status.phase"), None);
        let esc = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert_eq!(esc.requirements()[0].value, r"a,b=c\d");
        assert_eq!(esc.to_string(), r"metadata.name=a\,b\=c\\d");
        assert!(FieldSelector::parse("").unwrap().is_empty());
        for bad in ["foo", "=x", "a=b=c", r"a=b\x", r"a=b\"] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn field_selector_matches_pods() {
        let scheduled = pod("a", Some("n1"), "Running");
        let pending = pod("b", None, "Pending");
        let on_n1 = FieldSelector::parse("spec.nodeName=n1").unwrap();
        assert!(on_n1.matches(&scheduled));
        assert!(!on_n1.matches(&pending));
        let unscheduled = FieldSelector::parse("spec.nodeName=").unwrap();
        assert!(unscheduled.matches(&pending));
        assert!(!unscheduled.matches(&scheduled));
        let not_done =
            FieldSelector::parse("status.phase!=Succeeded,status.phase!=Failed").unwrap();
        assert!(not_done.matches(&scheduled));
        let by_name = FieldSelector::parse("metadata.name=b,metadata.namespace=default").unwrap();
        assert!(by_name.matches(&pending));
        assert!(!by_name.matches(&scheduled));
        assert!(FieldSelector::everything().matches(&pending));
    }

    #[test]
    fn field_selector_other_kinds() {
        let mut n = Node::default();
        n.metadata.name = "n1".into();
        n.spec.unschedulable = Some(true);
        let n = n.into_any();
        assert!(FieldSelector::parse("spec.unschedulable=true")
            .unwrap()
            .matches(&n));
        assert!(FieldSelector::parse("spec.unschedulable!=false")
            .unwrap()
            .matches(&n));

        let s = Secret {
            type_: Some("kubernetes.io/tls".into()),
            ..Default::default()
        }
        .into_any();
        assert!(FieldSelector::parse("type=kubernetes.io/tls")
            .unwrap()
            .matches(&s));

        let mut e = Event::default();
        e.involved_object.kind = Some("Pod".into());
        e.involved_object.name = Some("web".into());
        e.involved_object.uid = Some("u1".into());
        e.reason = Some("Scheduled".into());
        let e = e.into_any();
        let sel = FieldSelector::parse_for(
            Kind::Event,
            "involvedObject.kind=Pod,involvedObject.name=web,involvedObject.uid=u1,reason=Scheduled",
        )
        .unwrap();
        assert!(sel.matches(&e));
    }

    fn default_object(kind: Kind) -> AnyObject {
        use crate::{apps, core};
        match kind {
            Kind::Namespace => core::Namespace::default().into_any(),
            Kind::Node => core::Node::default().into_any(),
            Kind::Pod => core::Pod::default().into_any(),
            Kind::Service => core::Service::default().into_any(),
            Kind::Endpoints => core::Endpoints::default().into_any(),
            Kind::ConfigMap => core::ConfigMap::default().into_any(),
            Kind::Secret => core::Secret::default().into_any(),
            Kind::Event => core::Event::default().into_any(),
            Kind::Deployment => apps::Deployment::default().into_any(),
            Kind::ReplicaSet => apps::ReplicaSet::default().into_any(),
            Kind::DaemonSet => apps::DaemonSet::default().into_any(),
            Kind::Ingress => crate::networking::Ingress::default().into_any(),
            Kind::IngressClass => crate::networking::IngressClass::default().into_any(),
            Kind::Role => crate::rbac::Role::default().into_any(),
            Kind::ClusterRole => crate::rbac::ClusterRole::default().into_any(),
            Kind::RoleBinding => crate::rbac::RoleBinding::default().into_any(),
            Kind::ClusterRoleBinding => crate::rbac::ClusterRoleBinding::default().into_any(),
            Kind::CertificateSigningRequest => {
                crate::certificates::CertificateSigningRequest::default().into_any()
            }
            Kind::Job => crate::batch::Job::default().into_any(),
            Kind::CronJob => crate::batch::CronJob::default().into_any(),
            Kind::PodDisruptionBudget => crate::policy::PodDisruptionBudget::default().into_any(),
            Kind::ReplicationController => {
                crate::replication::ReplicationController::default().into_any()
            }
            Kind::PriorityClass => crate::scheduling::PriorityClass::default().into_any(),
            Kind::ResourceQuota => crate::quota::ResourceQuota::default().into_any(),
            Kind::LimitRange => crate::quota::LimitRange::default().into_any(),
            Kind::ServiceAccount => core::ServiceAccount::default().into_any(),
            Kind::PersistentVolume => crate::storage::PersistentVolume::default().into_any(),
            Kind::PersistentVolumeClaim => {
                crate::storage::PersistentVolumeClaim::default().into_any()
            }
            Kind::StorageClass => crate::storage::StorageClass::default().into_any(),
            Kind::Lease => crate::coordination::Lease::default().into_any(),
            Kind::EndpointSlice => crate::discovery::EndpointSlice::default().into_any(),
            Kind::RuntimeClass => crate::node::RuntimeClass::default().into_any(),
            Kind::NetworkPolicy => crate::networking::NetworkPolicy::default().into_any(),
            Kind::MutatingWebhookConfiguration => {
                crate::admissionregistration::MutatingWebhookConfiguration::default().into_any()
            }
            Kind::ValidatingWebhookConfiguration => {
                crate::admissionregistration::ValidatingWebhookConfiguration::default().into_any()
            }
            Kind::ValidatingAdmissionPolicy => {
                crate::admissionpolicy::ValidatingAdmissionPolicy::default().into_any()
            }
            Kind::ValidatingAdmissionPolicyBinding => {
                crate::admissionpolicy::ValidatingAdmissionPolicyBinding::default().into_any()
            }
            Kind::APIService => crate::apiregistration::APIService::default().into_any(),
            Kind::FlowSchema => crate::flowcontrol::FlowSchema::default().into_any(),
            Kind::PriorityLevelConfiguration => {
                crate::flowcontrol::PriorityLevelConfiguration::default().into_any()
            }
            Kind::StatefulSet => apps::StatefulSet::default().into_any(),
            Kind::ControllerRevision => apps::ControllerRevision::default().into_any(),
            Kind::HorizontalPodAutoscaler => {
                crate::autoscaling::HorizontalPodAutoscaler::default().into_any()
            }
            Kind::CustomResourceDefinition => {
                crate::apiextensions::CustomResourceDefinition::default().into_any()
            }
            other => unreachable!("{other:?} is not a built-in kind"),
        }
    }

    #[test]
    fn unsupported_fields_are_refused() {
        assert_eq!(
            FieldSelector::parse_for(Kind::Pod, "foo=bar"),
            Err(SelectorError::UnsupportedField("foo".into()))
        );
        assert_eq!(
            FieldSelector::parse_for(Kind::Node, "spec.nodeName=x")
                .unwrap_err()
                .to_string(),
            "field label not supported: spec.nodeName"
        );
        assert!(FieldSelector::parse_for(Kind::ConfigMap, "metadata.name=x").is_ok());
        // Every advertised field is answered by the kind's `field`.
        for kind in Kind::ALL {
            let obj = default_object(*kind);
            for f in supported_fields(*kind) {
                assert!(obj.field(f).is_some(), "{kind:?} lacks {f}");
            }
        }
    }
}
