//! The default ClusterRoles and ClusterRoleBindings, made at server start as
//! kube-apiserver's bootstrap policy makes them (the rules follow Kubernetes' bootstrap
//! policy, restricted to what the user-facing roles name). A default role someone changed
//! gets back any rule it lost, unless annotated `rbac.authorization.k8s.io/autoupdate:
//! "false"`, as in Kubernetes.

use std::collections::BTreeMap;

use api::meta::LabelSelector;
use api::rbac::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject, GROUP,
};

use crate::error::ApiError;
use crate::registry::Registry;

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

const AUTOUPDATE: &str = "rbac.authorization.k8s.io/autoupdate";
const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";

fn aggregate_label(to: &str) -> String {
    format!("rbac.authorization.k8s.io/aggregate-to-{to}")
}

fn role(name: &str, labels: &[(String, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
    let mut r = ClusterRole::default();
    r.metadata.name = name.into();
    r.metadata.labels = labels
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .chain([(BOOTSTRAPPING.to_string(), "rbac-defaults".to_string())])
        .collect();
    r.metadata
        .annotations
        .insert(AUTOUPDATE.into(), "true".into());
    r.rules = rules;
    r
}

fn aggregated(name: &str, labels: &[(String, &str)], from: &str) -> ClusterRole {
    let mut r = role(name, labels, Vec::new());
    r.aggregation_rule = Some(AggregationRule {
        cluster_role_selectors: vec![LabelSelector {
            match_labels: BTreeMap::from([(aggregate_label(from), "true".into())]),
            ..Default::default()
        }],
    });
    r
}

fn res(verbs: &[&str], group: &str, resources: &[&str]) -> PolicyRule {
    PolicyRule::resources(verbs, &[group], resources)
}

/// The default ClusterRoles, the aggregated ones (admin, edit, view) with their rules
/// already aggregated, so a fresh server does not rewrite them right after starting.
pub fn cluster_roles() -> Vec<ClusterRole> {
    let mut roles = unaggregated_roles();
    // view feeds edit, which feeds admin: three rounds settle the chain.
    for _ in 0..3 {
        for i in 0..roles.len() {
            if let Some(rules) = super::aggregation::aggregate(&roles[i], roles.clone()) {
                roles[i].rules = rules;
            }
        }
    }
    roles
}

fn unaggregated_roles() -> Vec<ClusterRole> {
    let t = "true";
    vec![
        role(
            "cluster-admin",
            &[],
            vec![
                PolicyRule::resources(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ],
        ),
        role(
            "system:discovery",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        role(
            "system:basic-user",
            &[],
            vec![
                res(
                    &["create"],
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                ),
                res(
                    &["create"],
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
            ],
        ),
        role(
            "system:public-info-viewer",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        // admin aggregates edit, which aggregates view: each names the next in its labels.
        aggregated("admin", &[], "admin"),
        aggregated("edit", &[(aggregate_label("admin"), t)], "edit"),
        aggregated("view", &[(aggregate_label("edit"), t)], "view"),
        role(
            "system:aggregate-to-admin",
            &[(aggregate_label("admin"), t)],
            vec![
                res(
                    &["create"],
                    "authorization.k8s.io",
                    &["localsubjectaccessreviews"],
                ),
                res(READ_WRITE, GROUP, &["rolebindings", "roles"]),
            ],
        ),
        role(
            "system:aggregate-to-edit",
            &[(aggregate_label("edit"), t)],
            vec![
                // Reading what lets one act as the pod or read its secrets is edit, not view.
                res(
                    READ,
                    "",
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                res(&["impersonate"], "", &["serviceaccounts"]),
                res(
                    WRITE,
                    "",
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                ),
                res(&["create"], "", &["pods/eviction"]),
                res(
                    WRITE,
                    "",
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                res(&["create"], "", &["serviceaccounts/token"]),
                res(
                    WRITE,
                    "apps",
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                res(WRITE, "autoscaling", &["horizontalpodautoscalers"]),
                res(WRITE, "batch", &["cronjobs", "jobs"]),
                res(WRITE, "policy", &["poddisruptionbudgets"]),
                res(
                    WRITE,
                    "networking.k8s.io",
                    &["ingresses", "networkpolicies"],
                ),
                res(READ_WRITE, "coordination.k8s.io", &["leases"]),
            ],
        ),
        role(
            "system:aggregate-to-view",
            &[(aggregate_label("view"), t)],
            vec![
                res(
                    READ,
                    "",
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                res(
                    READ,
                    "",
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                // Reading namespaces at namespace scope means reading *this* namespace.
                res(READ, "", &["namespaces"]),
                res(READ, "discovery.k8s.io", &["endpointslices"]),
                res(
                    READ,
                    "apps",
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                res(
                    READ,
                    "autoscaling",
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                res(
                    READ,
                    "batch",
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                res(
                    READ,
                    "policy",
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                res(
                    READ,
                    "networking.k8s.io",
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
        ),
    ]
}

fn binding(name: &str, groups: &[&str]) -> ClusterRoleBinding {
    let mut b = ClusterRoleBinding::default();
    b.metadata.name = name.into();
    b.metadata.labels = BTreeMap::from([(BOOTSTRAPPING.into(), "rbac-defaults".into())]);
    b.metadata
        .annotations
        .insert(AUTOUPDATE.into(), "true".into());
    b.role_ref = RoleRef {
        api_group: GROUP.into(),
        kind: "ClusterRole".into(),
        name: name.into(),
    };
    b.subjects = groups
        .iter()
        .map(|g| Subject {
            kind: "Group".into(),
            api_group: Some(GROUP.into()),
            name: g.to_string(),
            namespace: None,
        })
        .collect();
    b
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}

fn autoupdate(meta: &api::meta::ObjectMeta) -> bool {
    meta.annotations.get(AUTOUPDATE).map(String::as_str) != Some("false")
}

/// Creates the default roles and bindings that are missing and puts back the rules and
/// subjects the existing ones lost.
pub async fn ensure(registry: &Registry) -> Result<(), ApiError> {
    let registry = registry.with_manager("skiff-rbac-bootstrap");
    for want in cluster_roles() {
        match registry.get::<ClusterRole>("", &want.metadata.name).await {
            Ok(mut have) => {
                // Aggregated roles' rules belong to the aggregation controller.
                let missing: Vec<PolicyRule> = want
                    .rules
                    .iter()
                    .filter(|r| !have.rules.contains(r))
                    .cloned()
                    .collect();
                let agg_lost = want.aggregation_rule.is_some() && have.aggregation_rule.is_none();
                if autoupdate(&have.metadata) && (!missing.is_empty() || agg_lost) {
                    have.rules.extend(missing);
                    if agg_lost {
                        have.aggregation_rule = want.aggregation_rule.clone();
                    }
                    let name = have.metadata.name.clone();
                    registry
                        .update(have, None, &name, crate::registry::Part::Main)
                        .await?;
                }
            }
            Err(e) if e.code() == 404 => {
                registry.create(want, None).await?;
            }
            Err(e) => return Err(e),
        }
    }
    for want in cluster_role_bindings() {
        match registry
            .get::<ClusterRoleBinding>("", &want.metadata.name)
            .await
        {
            Ok(mut have) => {
                let missing: Vec<Subject> = want
                    .subjects
                    .iter()
                    .filter(|s| !have.subjects.contains(s))
                    .cloned()
                    .collect();
                if autoupdate(&have.metadata) && !missing.is_empty() {
                    have.subjects.extend(missing);
                    let name = have.metadata.name.clone();
                    registry
                        .update(have, None, &name, crate::registry::Part::Main)
                        .await?;
                }
            }
            Err(e) if e.code() == 404 => {
                registry.create(want, None).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::object::Resource;

    #[test]
    fn admin_edit_and_view_come_aggregated() {
        let roles = cluster_roles();
        let rules = |name: &str| {
            roles
                .iter()
                .find(|r| r.metadata.name == name)
                .unwrap()
                .rules
                .clone()
        };
        let view = rules("view");
        assert_eq!(view, rules("system:aggregate-to-view"));
        let edit = rules("edit");
        assert!(view.iter().all(|r| edit.contains(r)));
        assert!(rules("system:aggregate-to-edit")
            .iter()
            .all(|r| edit.contains(r)));
        let admin = rules("admin");
        assert!(edit.iter().all(|r| admin.contains(r)));
        assert!(admin.len() > edit.len() && edit.len() > view.len());
    }

    #[test]
    fn the_defaults_are_valid() {
        for r in cluster_roles() {
            assert!(
                r.validate().is_empty(),
                "{}: {:?}",
                r.metadata.name,
                r.validate()
            );
        }
        for mut b in cluster_role_bindings() {
            b.set_defaults();
            assert!(
                b.validate().is_empty(),
                "{}: {:?}",
                b.metadata.name,
                b.validate()
            );
        }
    }
}
