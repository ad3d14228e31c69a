//! The configuration objects kube-apiserver 1.32 keeps: the mandatory ones (`exempt` and
//! `catch-all`, always restored) and the suggested ones (created when missing, kept up to
//! date while their `apf.kubernetes.io/autoupdate-spec` annotation says true). Each object
//! is already in its defaulted form.

use std::collections::BTreeMap;

use super::*;

/// The group of the nodes.
const NODES: &str = "system:nodes";
const MASTERS: &str = "system:masters";
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const KUBE_SCHEDULER: &str = "system:kube-scheduler";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.into(),
        annotations: BTreeMap::from([(AUTO_UPDATE_ANNOTATION.to_string(), "true".to_string())]),
        ..Default::default()
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn limited(
    name: &str,
    shares: i32,
    lendable: i32,
    queuing: Option<(i32, i32, i32)>,
) -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: meta(name),
        spec: PriorityLevelConfigurationSpec {
            type_: TYPE_LIMITED.into(),
            limited: Some(LimitedPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(shares),
                lendable_percent: Some(lendable),
                borrowing_limit_percent: None,
                limit_response: match queuing {
                    None => LimitResponse {
                        type_: RESPONSE_REJECT.into(),
                        queuing: None,
                    },
                    Some((queues, hand_size, queue_length_limit)) => LimitResponse {
                        type_: RESPONSE_QUEUE.into(),
                        queuing: Some(QueuingConfiguration {
                            queues,
                            hand_size,
                            queue_length_limit,
                        }),
                    },
                },
            }),
            exempt: None,
        },
        status: Default::default(),
    }
}

fn groups(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|n| Subject {
            kind: SUBJECT_GROUP.into(),
            group: Some(GroupSubject {
                name: n.to_string(),
            }),
            ..Default::default()
        })
        .collect()
}

fn users(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|n| Subject {
            kind: SUBJECT_USER.into(),
            user: Some(UserSubject {
                name: n.to_string(),
            }),
            ..Default::default()
        })
        .collect()
}

fn kube_system_service_accounts(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|n| Subject {
            kind: SUBJECT_SERVICE_ACCOUNT.into(),
            service_account: Some(ServiceAccountSubject {
                namespace: "kube-system".into(),
                name: n.to_string(),
            }),
            ..Default::default()
        })
        .collect()
}

fn resource_rule(
    verbs: &[&str],
    groups: &[&str],
    resources: &[&str],
    cluster: bool,
) -> ResourcePolicyRule {
    ResourcePolicyRule {
        verbs: strings(verbs),
        api_groups: strings(groups),
        resources: strings(resources),
        cluster_scope: cluster.then_some(true),
        namespaces: strings(&[ALL]),
    }
}

fn non_resource_rule(verbs: &[&str], urls: &[&str]) -> NonResourcePolicyRule {
    NonResourcePolicyRule {
        verbs: strings(verbs),
        non_resource_urls: strings(urls),
    }
}

/// Everything, resources and non-resource URLs.
fn everything(subjects: Vec<Subject>) -> PolicyRulesWithSubjects {
    PolicyRulesWithSubjects {
        subjects,
        resource_rules: vec![resource_rule(&[ALL], &[ALL], &[ALL], true)],
        non_resource_rules: vec![non_resource_rule(&[ALL], &[ALL])],
    }
}

fn flow_schema(
    name: &str,
    level: &str,
    precedence: i32,
    distinguisher: Option<&str>,
    rule: PolicyRulesWithSubjects,
) -> FlowSchema {
    FlowSchema {
        metadata: meta(name),
        spec: FlowSchemaSpec {
            priority_level_configuration: PriorityLevelConfigurationReference {
                name: level.into(),
            },
            matching_precedence: precedence,
            distinguisher_method: distinguisher
                .map(|t| FlowDistinguisherMethod { type_: t.into() }),
            rules: vec![rule],
        },
        status: Default::default(),
    }
}

/// `catch-all` and `exempt`, in kube's order (the exempt level last, so that a crash in a
/// first start leaves the rest created).
pub fn mandatory_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![
        limited(CATCH_ALL, 5, 0, None),
        PriorityLevelConfiguration {
            metadata: meta(EXEMPT),
            spec: PriorityLevelConfigurationSpec {
                type_: TYPE_EXEMPT.into(),
                limited: None,
                exempt: Some(ExemptPriorityLevelConfiguration {
                    nominal_concurrency_shares: Some(0),
                    lendable_percent: Some(0),
                }),
            },
            status: Default::default(),
        },
    ]
}

/// `exempt` (system:masters, precedence 1) and `catch-all` (everyone, 10000).
pub fn mandatory_flow_schemas() -> Vec<FlowSchema> {
    vec![
        flow_schema(EXEMPT, EXEMPT, 1, None, everything(groups(&[MASTERS]))),
        flow_schema(
            CATCH_ALL,
            CATCH_ALL,
            MAX_MATCHING_PRECEDENCE,
            Some(BY_USER),
            everything(groups(&[UNAUTHENTICATED, AUTHENTICATED])),
        ),
    ]
}

/// kube 1.32's suggested priority levels.
pub fn suggested_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![
        limited("system", 30, 33, Some((64, 6, 50))),
        limited("node-high", 40, 25, Some((64, 6, 50))),
        limited("leader-election", 10, 0, Some((16, 4, 50))),
        limited("workload-high", 40, 50, Some((128, 6, 50))),
        limited("workload-low", 100, 90, Some((128, 6, 50))),
        limited("global-default", 20, 50, Some((128, 6, 50))),
    ]
}

/// kube 1.32's suggested FlowSchemas, in kube's order.
pub fn suggested_flow_schemas() -> Vec<FlowSchema> {
    let leases =
        |verbs: &[&str]| resource_rule(verbs, &["coordination.k8s.io"], &["leases"], false);
    let mut leader_election_subjects = users(&[KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER]);
    leader_election_subjects.extend(kube_system_service_accounts(&[ALL]));
    let mut endpoint_controller_subjects = users(&[KUBE_CONTROLLER_MANAGER]);
    endpoint_controller_subjects.extend(kube_system_service_accounts(&[
        "endpoint-controller",
        "endpointslicemirroring-controller",
    ]));
    vec![
        flow_schema(
            "system-nodes",
            "system",
            500,
            Some(BY_USER),
            everything(groups(&[NODES])),
        ),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some(BY_USER),
            PolicyRulesWithSubjects {
                subjects: groups(&[NODES]),
                resource_rules: vec![
                    resource_rule(&[ALL], &[""], &["nodes", "nodes/status"], true),
                    leases(&[ALL]),
                ],
                non_resource_rules: Vec::new(),
            },
        ),
        flow_schema(
            "probes",
            EXEMPT,
            2,
            None,
            PolicyRulesWithSubjects {
                subjects: groups(&[UNAUTHENTICATED, AUTHENTICATED]),
                resource_rules: Vec::new(),
                non_resource_rules: vec![non_resource_rule(
                    &["get"],
                    &["/healthz", "/readyz", "/livez"],
                )],
            },
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some(BY_USER),
            PolicyRulesWithSubjects {
                subjects: leader_election_subjects,
                resource_rules: vec![leases(&["get", "create", "update"])],
                non_resource_rules: Vec::new(),
            },
        ),
        flow_schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some(BY_USER),
            PolicyRulesWithSubjects {
                subjects: kube_system_service_accounts(&[ALL]),
                resource_rules: vec![
                    resource_rule(
                        &["get", "create", "update"],
                        &[""],
                        &["endpoints", "configmaps"],
                        false,
                    ),
                    leases(&["get", "create", "update"]),
                ],
                non_resource_rules: Vec::new(),
            },
        ),
        flow_schema(
            "endpoint-controller",
            "workload-high",
            150,
            Some(BY_USER),
            PolicyRulesWithSubjects {
                subjects: endpoint_controller_subjects,
                resource_rules: vec![resource_rule(
                    &["get", "create", "update"],
                    &[""],
                    &["endpoints"],
                    false,
                )],
                non_resource_rules: Vec::new(),
            },
        ),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some(BY_NAMESPACE),
            everything(users(&[KUBE_CONTROLLER_MANAGER])),
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some(BY_NAMESPACE),
            everything(users(&[KUBE_SCHEDULER])),
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some(BY_NAMESPACE),
            everything(kube_system_service_accounts(&[ALL])),
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some(BY_USER),
            everything(groups(&[SERVICE_ACCOUNTS])),
        ),
        flow_schema(
            "global-default",
            "global-default",
            9900,
            Some(BY_USER),
            everything(groups(&[UNAUTHENTICATED, AUTHENTICATED])),
        ),
    ]
}
