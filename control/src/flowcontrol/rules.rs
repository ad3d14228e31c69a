//! Whether a FlowSchema matches a request (kube's `flowcontrol/rule.go`): a rule matches when
//! one of its subjects is the requester and one of its resource rules (a resource request)
//! or non-resource rules (any other) matches what is asked.

use api::flowcontrol::{
    FlowSchema, NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule, Subject, ALL,
    SUBJECT_GROUP, SUBJECT_SERVICE_ACCOUNT, SUBJECT_USER,
};

/// What classification needs of a request (kube's RequestDigest: the user and RequestInfo).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDigest {
    pub user: String,
    pub groups: Vec<String>,
    /// get, list, watch, create, ...; a non-resource request's lower-case method.
    pub verb: String,
    /// None for a non-resource request.
    pub resource: Option<ResourceInfo>,
    /// The URL path.
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    /// "" when the request names no namespace.
    pub namespace: String,
    pub name: String,
}

impl RequestDigest {
    /// The namespace, "" for a cluster-scoped or non-resource request.
    pub fn namespace(&self) -> &str {
        self.resource.as_ref().map_or("", |r| r.namespace.as_str())
    }
}

/// Whether one of the schema's rules matches.
pub fn matches(fs: &FlowSchema, r: &RequestDigest) -> bool {
    fs.spec.rules.iter().any(|rule| matches_rule(rule, r))
}

fn matches_rule(rule: &PolicyRulesWithSubjects, r: &RequestDigest) -> bool {
    if !rule.subjects.iter().any(|s| matches_subject(s, r)) {
        return false;
    }
    match &r.resource {
        Some(info) => rule
            .resource_rules
            .iter()
            .any(|rr| matches_resource_rule(rr, &r.verb, info)),
        None => rule
            .non_resource_rules
            .iter()
            .any(|nr| matches_non_resource_rule(nr, &r.verb, &r.path)),
    }
}

fn matches_subject(s: &Subject, r: &RequestDigest) -> bool {
    match s.kind.as_str() {
        SUBJECT_USER => s
            .user
            .as_ref()
            .is_some_and(|u| u.name == ALL || u.name == r.user),
        SUBJECT_GROUP => s
            .group
            .as_ref()
            .is_some_and(|g| g.name == ALL || r.groups.contains(&g.name)),
        SUBJECT_SERVICE_ACCOUNT => s.service_account.as_ref().is_some_and(|sa| {
            let Some(rest) = r.user.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            let Some(name) = rest
                .strip_prefix(sa.namespace.as_str())
                .and_then(|n| n.strip_prefix(':'))
            else {
                return false;
            };
            sa.name == ALL || sa.name == name
        }),
        _ => false,
    }
}

/// kube's containsString: `x` is in the list, or the list is the wildcard alone.
fn contains(list: &[String], x: &str) -> bool {
    (list.len() == 1 && list[0] == ALL) || list.iter().any(|y| y == x)
}

fn matches_resource_rule(rule: &ResourcePolicyRule, verb: &str, r: &ResourceInfo) -> bool {
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    if !contains(&rule.verbs, verb)
        || !contains(&rule.resources, &resource)
        || !contains(&rule.api_groups, &r.group)
    {
        return false;
    }
    if r.namespace.is_empty() {
        rule.cluster_scope()
    } else {
        contains(&rule.namespaces, &r.namespace)
    }
}

fn matches_non_resource_rule(rule: &NonResourcePolicyRule, verb: &str, path: &str) -> bool {
    contains(&rule.verbs, verb) && rule.non_resource_urls.iter().any(|u| url_matches(u, path))
}

/// A rule's URL: `*`, the path itself, or a prefix (`/healthz/*`, and `/healthz` covers
/// `/healthz/...` too).
fn url_matches(rule: &str, path: &str) -> bool {
    if rule == ALL || rule == path {
        return true;
    }
    let mut prefix = rule.strip_suffix('*').unwrap_or(rule).to_string();
    if !prefix.ends_with('/') {
        prefix.push('/');
    }
    path.starts_with(&prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::flowcontrol::bootstrap;

    fn schema(name: &str) -> FlowSchema {
        bootstrap::mandatory_flow_schemas()
            .into_iter()
            .chain(bootstrap::suggested_flow_schemas())
            .find(|f| f.metadata.name == name)
            .expect("a bootstrap schema")
    }

    fn user(name: &str, groups: &[&str]) -> RequestDigest {
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        groups.push("system:authenticated".into());
        RequestDigest {
            user: name.into(),
            groups,
            ..Default::default()
        }
    }

    fn resource(
        mut d: RequestDigest,
        verb: &str,
        group: &str,
        res: &str,
        ns: &str,
    ) -> RequestDigest {
        let (resource, subresource) = res.split_once('/').unwrap_or((res, ""));
        d.verb = verb.into();
        d.resource = Some(ResourceInfo {
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: ns.into(),
            ..Default::default()
        });
        d
    }

    #[test]
    fn subjects_and_rules() {
        let node = user("system:node:pi1", &["system:nodes"]);
        let lease = resource(
            node.clone(),
            "update",
            "coordination.k8s.io",
            "leases",
            "kube-node-lease",
        );
        assert!(matches(&schema("system-node-high"), &lease));
        let status = resource(node.clone(), "patch", "", "nodes/status", "");
        assert!(matches(&schema("system-node-high"), &status));
        let pods = resource(node.clone(), "list", "", "pods", "");
        assert!(!matches(&schema("system-node-high"), &pods));
        assert!(matches(&schema("system-nodes"), &pods));

        let admin = resource(
            user("admin", &["system:masters"]),
            "delete",
            "apps",
            "deployments",
            "web",
        );
        assert!(matches(&schema("exempt"), &admin));
        assert!(!matches(&schema("exempt"), &pods));

        // ServiceAccounts by namespace and name.
        let sa = resource(
            user("system:serviceaccount:kube-system:endpoint-controller", &[]),
            "update",
            "",
            "endpoints",
            "default",
        );
        assert!(matches(&schema("endpoint-controller"), &sa));
        assert!(matches(&schema("kube-system-service-accounts"), &sa));
        let elsewhere = resource(
            user(
                "system:serviceaccount:kube-systemx:endpoint-controller",
                &[],
            ),
            "update",
            "",
            "endpoints",
            "default",
        );
        assert!(!matches(
            &schema("kube-system-service-accounts"),
            &elsewhere
        ));

        // clusterScope and namespaces: the leader-election rules name namespaces only.
        let cluster_lease = resource(
            user("system:kube-scheduler", &[]),
            "get",
            "coordination.k8s.io",
            "leases",
            "",
        );
        assert!(!matches(&schema("system-leader-election"), &cluster_lease));
    }

    #[test]
    fn non_resource_urls() {
        let mut probe = user("kubelet", &[]);
        probe.verb = "get".into();
        probe.path = "/readyz".into();
        assert!(matches(&schema("probes"), &probe));
        probe.path = "/readyz/etcd".into();
        assert!(
            matches(&schema("probes"), &probe),
            "a URL covers its subpaths"
        );
        probe.path = "/readyzz".into();
        assert!(!matches(&schema("probes"), &probe));
        probe.verb = "post".into();
        probe.path = "/readyz".into();
        assert!(!matches(&schema("probes"), &probe));
        assert!(url_matches("/healthz/*", "/healthz/etcd"));
        assert!(!url_matches("/healthz/*", "/healthz"));
        assert!(url_matches("/apis/", "/apis/apps"));
        assert!(url_matches("*", "/anything"));
    }
}
