//! RBAC (rbac.authorization.k8s.io/v1): the authorizer every request passes, the default
//! roles and bindings ([`bootstrap`]) and the ClusterRole aggregation controller
//! ([`aggregation`]).
//!
//! The authorizer runs on every request, so it never reads the store: an index of the
//! bindings by subject, with each binding's role already resolved to its rules, is rebuilt
//! from the shared informer cache whenever a Role, ClusterRole or binding changes (rare),
//! and a request costs a few hash lookups and a scan of the rules of the user's own bindings.

pub mod aggregation;
pub mod bootstrap;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use api::meta::{Status, StatusDetails};
use api::rbac::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use api::Kind;

use crate::auth::User;
use crate::error::ApiError;
use crate::machinery::informer::{Informers, Objects};

/// The RBAC kinds, which the informer cache holds for the authorizer.
pub const KINDS: &[Kind] = &[
    Kind::Role,
    Kind::ClusterRole,
    Kind::RoleBinding,
    Kind::ClusterRoleBinding,
];

/// What a request asks to do: Kubernetes' authorizer.Attributes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Attributes {
    /// get, list, watch, create, update, patch, delete, deletecollection (resources); the
    /// lower-case HTTP method (non-resource URLs).
    pub verb: String,
    /// None for a non-resource request.
    pub resource: Option<ResourceAttributes>,
    /// The URL path (non-resource requests).
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl Attributes {
    pub fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                group: group.into(),
                resource: resource.into(),
                subresource: subresource.into(),
                namespace: namespace.into(),
                name: name.into(),
            }),
            path: String::new(),
        }
    }

    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource: None,
            path: path.into(),
        }
    }
}

/// Whether `rule` allows the request (Kubernetes' RuleAllows).
pub fn rule_allows(rule: &PolicyRule, a: &Attributes) -> bool {
    if !has(&rule.verbs, &a.verb) {
        return false;
    }
    match &a.resource {
        Some(r) => {
            has(&rule.api_groups, &r.group)
                && resource_matches(rule, r)
                && (rule.resource_names.is_empty() || rule.resource_names.contains(&r.name))
        }
        None => rule
            .non_resource_urls
            .iter()
            .any(|u| url_matches(u, &a.path)),
    }
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == "*" || v == wanted)
}

fn resource_matches(rule: &PolicyRule, r: &ResourceAttributes) -> bool {
    let combined = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    rule.resources.iter().any(|res| {
        res == "*"
            || *res == combined
            || (!r.subresource.is_empty() && res.strip_prefix("*/") == Some(r.subresource.as_str()))
    })
}

fn url_matches(rule_url: &str, path: &str) -> bool {
    rule_url == "*"
        || rule_url == path
        || rule_url
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// One binding of a subject to a role's rules.
#[derive(Clone, Debug)]
struct Grant {
    rules: Arc<Vec<PolicyRule>>,
    /// `ClusterRoleBinding "x" of ClusterRole "y"`, for review answers.
    by: Arc<str>,
}

/// Grants by user name and by group.
#[derive(Default, Debug)]
struct Subjects {
    users: HashMap<String, Vec<Grant>>,
    groups: HashMap<String, Vec<Grant>>,
}

impl Subjects {
    fn add(&mut self, subject: &Subject, binding_ns: &str, grant: &Grant) {
        let (map, key) = match subject.kind.as_str() {
            "User" => (&mut self.users, subject.name.clone()),
            "Group" => (&mut self.groups, subject.name.clone()),
            "ServiceAccount" => {
                let ns = match subject.namespace.as_deref() {
                    Some(ns) if !ns.is_empty() => ns,
                    _ => binding_ns,
                };
                (
                    &mut self.users,
                    format!("system:serviceaccount:{ns}:{}", subject.name),
                )
            }
            _ => return,
        };
        map.entry(key).or_default().push(grant.clone());
    }

    /// The grants that apply to `user`, with the subject they matched.
    fn of<'a>(&'a self, user: &'a User) -> impl Iterator<Item = (&'a Grant, String)> + 'a {
        let by_name = self
            .users
            .get(&user.name)
            .into_iter()
            .flatten()
            .map(move |g| (g, format!("User {:?}", user.name)));
        let by_group = user.groups.iter().flat_map(move |group| {
            self.groups
                .get(group)
                .into_iter()
                .flatten()
                .map(move |g| (g, format!("Group {group:?}")))
        });
        by_name.chain(by_group)
    }
}

/// The bindings by subject, roles resolved.
#[derive(Default, Debug)]
struct Index {
    cluster: Subjects,
    namespaces: HashMap<String, Subjects>,
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    roles: HashMap<(String, String), Arc<Vec<PolicyRule>>>,
}

impl Index {
    fn build(objects: &Objects) -> Index {
        let mut index = Index::default();
        for r in objects.iter::<ClusterRole>(None) {
            index
                .cluster_roles
                .insert(r.metadata.name.clone(), Arc::new(r.rules));
        }
        for r in objects.iter::<Role>(None) {
            let key = (r.metadata.namespace().to_string(), r.metadata.name.clone());
            index.roles.insert(key, Arc::new(r.rules));
        }
        for b in objects.iter::<ClusterRoleBinding>(None) {
            if b.role_ref.kind != "ClusterRole" {
                continue;
            }
            let Some(rules) = index.cluster_roles.get(&b.role_ref.name) else {
                continue;
            };
            let grant = Grant {
                rules: rules.clone(),
                by: format!(
                    "ClusterRoleBinding {:?} of ClusterRole {:?}",
                    b.metadata.name, b.role_ref.name
                )
                .into(),
            };
            for s in &b.subjects {
                index.cluster.add(s, "", &grant);
            }
        }
        for b in objects.iter::<RoleBinding>(None) {
            let ns = b.metadata.namespace().to_string();
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => index.cluster_roles.get(&b.role_ref.name),
                "Role" => index.roles.get(&(ns.clone(), b.role_ref.name.clone())),
                _ => None,
            };
            let Some(rules) = rules else { continue };
            let grant = Grant {
                rules: rules.clone(),
                by: format!(
                    "RoleBinding {:?} of {} {:?}",
                    format!("{}/{ns}", b.metadata.name),
                    b.role_ref.kind,
                    b.role_ref.name
                )
                .into(),
            };
            let subjects = index.namespaces.entry(ns.clone()).or_default();
            for s in &b.subjects {
                subjects.add(s, &ns, &grant);
            }
        }
        index
    }

    /// The grants of `user` that apply in `namespace` (cluster-wide ones included).
    fn grants<'a>(
        &'a self,
        user: &'a User,
        namespace: &str,
    ) -> impl Iterator<Item = (&'a Grant, String)> + 'a {
        let local = (!namespace.is_empty())
            .then(|| self.namespaces.get(namespace))
            .flatten();
        self.cluster
            .of(user)
            .chain(local.into_iter().flat_map(move |s| s.of(user)))
    }
}

/// A decision and, when allowed, why (as Kubernetes' RBAC authorizer words it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// The RBAC authorizer.
#[derive(Default, Debug)]
pub struct Authorizer {
    index: RwLock<Arc<Index>>,
}

impl Authorizer {
    pub fn new() -> Arc<Authorizer> {
        Arc::new(Authorizer::default())
    }

    /// Builds the index from the informer cache and keeps it current. The cache must hold
    /// [`KINDS`].
    pub fn start(self: &Arc<Self>, informers: &Arc<Informers>) {
        let changes = informers.subscribe(KINDS);
        self.rebuild(&informers.cache().read());
        let this = self.clone();
        let informers = informers.clone();
        smol::spawn(async move {
            while let Ok(_first) = changes.recv().await {
                // One rebuild for every change that is already waiting.
                while changes.try_recv().is_ok() {}
                this.rebuild(&informers.cache().read());
            }
        })
        .detach();
    }

    fn rebuild(&self, objects: &Objects) {
        let index = Arc::new(Index::build(objects));
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = index;
    }

    fn index(&self) -> Arc<Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `user` may do `a`; system:masters may do anything.
    pub fn authorize(&self, user: &User, a: &Attributes) -> Decision {
        if user.is_master() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let index = self.index();
        let ns = a.resource.as_ref().map_or("", |r| r.namespace.as_str());
        let found = index
            .grants(user, ns)
            .find(|(g, _)| g.rules.iter().any(|r| rule_allows(r, a)));
        match found {
            Some((g, subject)) => Decision {
                allowed: true,
                reason: format!("RBAC: allowed by {} to {subject}", g.by),
            },
            None => Decision {
                allowed: false,
                reason: String::new(),
            },
        }
    }

    /// Allows `a` or answers Kubernetes' 403.
    pub fn check(&self, user: &User, a: &Attributes) -> Result<(), ApiError> {
        if self.authorize(user, a).allowed {
            Ok(())
        } else {
            Err(forbidden(user, a))
        }
    }

    /// Every rule that applies to `user` in `namespace` (SelfSubjectRulesReview, the
    /// escalation check). system:masters get cluster-admin's rules.
    pub fn rules_for(&self, user: &User, namespace: &str) -> Vec<PolicyRule> {
        if user.is_master() {
            return vec![
                PolicyRule::resources(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ];
        }
        let index = self.index();
        let mut rules: Vec<PolicyRule> = Vec::new();
        for (g, _) in index.grants(user, namespace) {
            for r in g.rules.iter() {
                if !rules.contains(r) {
                    rules.push(r.clone());
                }
            }
        }
        rules
    }

    /// The rules of a binding's role (None when it does not exist).
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
        let index = self.index();
        let rules = match kind {
            "ClusterRole" => index.cluster_roles.get(name),
            "Role" => index.roles.get(&(namespace.to_string(), name.to_string())),
            _ => None,
        };
        rules.map(|r| r.as_ref().clone())
    }
}

/// Kubernetes' 403 for a denied request: `pods is forbidden: User "alice" cannot list
/// resource "pods" in API group "" in the namespace "default"`.
pub fn forbidden(user: &User, a: &Attributes) -> ApiError {
    let Some(r) = &a.resource else {
        let msg = format!(
            "forbidden: User {:?} cannot {} path {:?}",
            user.name, a.verb, a.path
        );
        return ApiError::from_status(Status::failure(403, "Forbidden", msg).with_details(
            StatusDetails {
                ..Default::default()
            },
        ));
    };
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let why = if r.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            user.name, a.verb, r.group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            user.name, a.verb, r.group, r.namespace
        )
    };
    let qualified = if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    let msg = if r.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", r.name)
    };
    ApiError::from_status(
        Status::failure(403, "Forbidden", msg).with_details(StatusDetails {
            name: r.name.clone(),
            group: r.group.clone(),
            kind: r.resource.clone(),
            ..Default::default()
        }),
    )
}

/// Whether `owner` rules allow everything `wanted` rules do (Kubernetes' Covers): each
/// wanted rule is broken into single verb/group/resource/name (or verb/URL) requests, and
/// each of those must be allowed by an owner rule. A wildcard in a wanted rule is covered
/// only by the same wildcard.
pub fn covers(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut missing = Vec::new();
    for rule in wanted {
        for verb in &rule.verbs {
            for url in &rule.non_resource_urls {
                let a = Attributes::non_resource(verb, url);
                if !owner.iter().any(|o| rule_allows_literal(o, &a)) {
                    missing.push(PolicyRule::urls(&[verb], &[url]));
                }
            }
            for group in &rule.api_groups {
                for resource in &rule.resources {
                    let (res, sub) = resource.split_once('/').unwrap_or((resource, ""));
                    let names: Vec<&str> = if rule.resource_names.is_empty() {
                        vec![""]
                    } else {
                        rule.resource_names.iter().map(String::as_str).collect()
                    };
                    for name in names {
                        let a = Attributes::resource(verb, group, res, sub, "", name);
                        if !owner.iter().any(|o| rule_allows_literal(o, &a)) {
                            let mut m = PolicyRule::resources(&[verb], &[group], &[resource]);
                            if !name.is_empty() {
                                m.resource_names.push(name.to_string());
                            }
                            missing.push(m);
                        }
                    }
                }
            }
        }
    }
    missing
}

/// [`rule_allows`] where an empty name means "every name", which only a rule without
/// resourceNames grants, and where the requested values may themselves be wildcards.
fn rule_allows_literal(rule: &PolicyRule, a: &Attributes) -> bool {
    if !has(&rule.verbs, &a.verb) {
        return false;
    }
    match &a.resource {
        Some(r) => {
            has(&rule.api_groups, &r.group)
                && resource_matches(rule, r)
                && (rule.resource_names.is_empty()
                    || (!r.name.is_empty() && rule.resource_names.contains(&r.name)))
        }
        None => rule
            .non_resource_urls
            .iter()
            .any(|u| url_matches(u, &a.path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::object::Resource;
    use api::rbac::{RoleRef, GROUP};

    fn subject(kind: &str, name: &str) -> Subject {
        Subject {
            kind: kind.into(),
            api_group: Some(GROUP.into()),
            name: name.into(),
            namespace: None,
        }
    }

    fn index() -> Index {
        let mut o = Objects::default();
        let mut view = ClusterRole::default();
        view.metadata.name = "view".into();
        view.rules = vec![
            PolicyRule::resources(&["get", "list", "watch"], &[""], &["pods", "pods/log"]),
            PolicyRule::urls(&["get"], &["/healthz", "/api/*"]),
        ];
        o.insert_for_test(view.into_any());
        let mut b = RoleBinding::default();
        b.metadata.name = "alice-view".into();
        b.metadata.namespace = Some("dev".into());
        b.role_ref = RoleRef {
            api_group: GROUP.into(),
            kind: "ClusterRole".into(),
            name: "view".into(),
        };
        b.subjects = vec![subject("User", "alice"), subject("Group", "ops")];
        o.insert_for_test(b.into_any());
        Index::build(&o)
    }

    fn authorizer() -> Authorizer {
        let a = Authorizer::default();
        *a.index.write().unwrap() = Arc::new(index());
        a
    }

    #[test]
    fn a_role_binding_allows_its_rules_in_its_namespace_only() {
        let az = authorizer();
        let alice = User::new("alice", "", vec![]);
        let list = |ns: &str| Attributes::resource("list", "", "pods", "", ns, "");
        let d = az.authorize(&alice, &list("dev"));
        assert!(d.allowed);
        assert_eq!(
            d.reason,
            "RBAC: allowed by RoleBinding \"alice-view/dev\" of ClusterRole \"view\" to User \"alice\""
        );
        assert!(!az.authorize(&alice, &list("prod")).allowed);
        assert!(!az.authorize(&alice, &list("")).allowed);
        let delete = Attributes::resource("delete", "", "pods", "", "dev", "p");
        assert!(!az.authorize(&alice, &delete).allowed);
        let log = Attributes::resource("get", "", "pods", "log", "dev", "p");
        assert!(az.authorize(&alice, &log).allowed);
        let exec = Attributes::resource("create", "", "pods", "exec", "dev", "p");
        assert!(!az.authorize(&alice, &exec).allowed);
        let bob_in_ops = User::new("bob", "", vec!["ops".into()]);
        assert!(az.authorize(&bob_in_ops, &list("dev")).allowed);
        assert!(az.authorize(&User::admin(), &list("prod")).allowed);
    }

    #[test]
    fn denials_are_worded_as_kubernetes_words_them() {
        let alice = User::new("alice", "", vec![]);
        let e = forbidden(
            &alice,
            &Attributes::resource("list", "", "pods", "", "default", ""),
        );
        assert_eq!(e.0.message, "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"");
        let e = forbidden(
            &alice,
            &Attributes::resource("delete", "apps", "deployments", "", "", "web"),
        );
        assert_eq!(e.0.message, "deployments.apps \"web\" is forbidden: User \"alice\" cannot delete resource \"deployments\" in API group \"apps\" at the cluster scope");
        assert_eq!(e.code(), 403);
        let e = forbidden(&alice, &Attributes::non_resource("get", "/metrics"));
        assert_eq!(
            e.0.message,
            "forbidden: User \"alice\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn wildcards_subresources_names_and_urls_match_as_in_kubernetes() {
        let mut r = PolicyRule::resources(&["get"], &["*"], &["*/scale"]);
        let scale = Attributes::resource("get", "apps", "deployments", "scale", "d", "web");
        assert!(rule_allows(&r, &scale));
        let main = Attributes::resource("get", "apps", "deployments", "", "d", "web");
        assert!(!rule_allows(&r, &main));
        r.resources = vec!["deployments".into()];
        r.resource_names = vec!["web".into()];
        assert!(rule_allows(&r, &main));
        let other = Attributes::resource("get", "apps", "deployments", "", "d", "db");
        assert!(!rule_allows(&r, &other));
        let urls = PolicyRule::urls(&["get"], &["/api/*"]);
        assert!(rule_allows(
            &urls,
            &Attributes::non_resource("get", "/api/v1")
        ));
        assert!(!rule_allows(
            &urls,
            &Attributes::non_resource("get", "/apis")
        ));
    }

    #[test]
    fn covers_finds_what_the_owner_lacks() {
        let owner = vec![PolicyRule::resources(
            &["get", "list"],
            &[""],
            &["pods", "configmaps"],
        )];
        assert!(covers(&owner, &[PolicyRule::resources(&["get"], &[""], &["pods"])]).is_empty());
        let missing = covers(
            &owner,
            &[PolicyRule::resources(&["get", "delete"], &[""], &["pods"])],
        );
        assert_eq!(
            missing,
            [PolicyRule::resources(&["delete"], &[""], &["pods"])]
        );
        assert_eq!(
            covers(
                &owner,
                &[PolicyRule::resources(&["get"], &["*"], &["pods"])]
            )
            .len(),
            1
        );
        let admin = vec![PolicyRule::resources(&["*"], &["*"], &["*"])];
        assert!(covers(&admin, &[PolicyRule::resources(&["*"], &["*"], &["*"])]).is_empty());
    }
}
