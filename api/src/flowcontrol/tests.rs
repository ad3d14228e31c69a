use super::*;
use serde_json::json;

fn fs(v: serde_json::Value) -> FlowSchema {
    let mut f: FlowSchema = crate::codec::from_json(v).expect("a FlowSchema");
    f.set_defaults();
    f
}

fn pl(v: serde_json::Value) -> PriorityLevelConfiguration {
    let mut p: PriorityLevelConfiguration =
        crate::codec::from_json(v).expect("a PriorityLevelConfiguration");
    p.set_defaults();
    p
}

fn messages(errs: Vec<FieldError>) -> Vec<String> {
    errs.into_iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect()
}

#[test]
fn defaults_as_kube() {
    let f = fs(json!({
        "metadata": {"name": "a"},
        "spec": {"priorityLevelConfiguration": {"name": "global-default"},
                 "rules": [{"subjects": [{"kind": "Group", "group": {"name": "devs"}}],
                            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                               "clusterScope": false, "namespaces": ["*"]}]}]}
    }));
    assert_eq!(f.spec.matching_precedence, 1000);
    assert!(
        messages(f.validate()).is_empty(),
        "{:?}",
        messages(f.validate())
    );
    let out = crate::codec::to_json(&f);
    assert_eq!(
        out["spec"]["rules"][0]["resourceRules"][0],
        json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]})
    );
    let p = pl(json!({
        "metadata": {"name": "restricted"},
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}}
    }));
    assert!(
        messages(p.validate()).is_empty(),
        "{:?}",
        messages(p.validate())
    );
    assert_eq!(
        crate::codec::to_json(&p)["spec"],
        json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30,
               "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}},
               "lendablePercent": 0}})
    );
    let e = pl(json!({"metadata": {"name": "exempt"}, "spec": {"type": "Exempt", "exempt": {}}}));
    assert_eq!(
        e.spec.exempt,
        Some(ExemptPriorityLevelConfiguration {
            nominal_concurrency_shares: Some(0),
            lendable_percent: Some(0)
        })
    );
}

#[test]
fn bootstrap_objects_are_defaulted_and_valid() {
    for f in bootstrap::mandatory_flow_schemas()
        .into_iter()
        .chain(bootstrap::suggested_flow_schemas())
    {
        let mut d = f.clone();
        d.set_defaults();
        assert_eq!(d, f, "{} changes when defaulted", f.metadata.name);
        assert!(
            f.validate().is_empty(),
            "{}: {:?}",
            f.metadata.name,
            messages(f.validate())
        );
    }
    for p in bootstrap::mandatory_priority_levels()
        .into_iter()
        .chain(bootstrap::suggested_priority_levels())
    {
        let mut d = p.clone();
        d.set_defaults();
        assert_eq!(d, p, "{} changes when defaulted", p.metadata.name);
        assert!(
            p.validate().is_empty(),
            "{}: {:?}",
            p.metadata.name,
            messages(p.validate())
        );
    }
    assert_eq!(bootstrap::suggested_flow_schemas().len(), 11);
    assert_eq!(bootstrap::suggested_priority_levels().len(), 6);
}

#[test]
fn flow_schema_messages() {
    let f = fs(json!({
        "metadata": {"name": "bad"},
        "spec": {"matchingPrecedence": 1, "priorityLevelConfiguration": {"name": ""},
                 "distinguisherMethod": {"type": "ByFoo"},
                 "rules": [
                    {"subjects": []},
                    {"subjects": [{"kind": "User"}, {"kind": "Group", "group": {"name": ""}, "user": {"name": "x"}},
                                  {"kind": "ServiceAccount", "serviceAccount": {"name": "", "namespace": ""}},
                                  {"kind": "Robot"}],
                     "resourceRules": [{"verbs": ["get", "fly"], "apiGroups": ["*", "apps"], "resources": [],
                                        "namespaces": ["-foo"]},
                                       {"verbs": ["*", "get"], "apiGroups": [], "resources": ["*", "pods"]}],
                     "nonResourceRules": [{"verbs": [], "nonResourceURLs": ["/health*", "healthz", "/a//b", "/a b"]},
                                          {"verbs": ["get"], "nonResourceURLs": ["*", "/x"]}]}
                 ]}
    }));
    assert_eq!(
        messages(f.validate()),
        [
            "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1",
            r#"spec.distinguisherMethod.type: Unsupported value: flowcontrol.FlowDistinguisherMethod{Type:"ByFoo"}: supported values: "ByNamespace", "ByUser""#,
            "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
            "spec.rules[0].subjects: Required value: subjects must contain at least one value",
            "spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty",
            "spec.rules[1].subjects[0].user: Required value: user is required when subject kind is 'User'",
            "spec.rules[1].subjects[1].group.name: Required value",
            "spec.rules[1].subjects[1].user: Forbidden: user is forbidden when subject kind is not 'User'",
            "spec.rules[1].subjects[2].serviceAccount.name: Required value",
            "spec.rules[1].subjects[2].serviceAccount.namespace: Required value: must specify namespace for service account",
            r#"spec.rules[1].subjects[3].kind: Unsupported value: "Robot": supported values: "Group", "ServiceAccount", "User""#,
            r#"spec.rules[1].resourceRules[0].verbs: Unsupported value: []string{"get", "fly"}: supported values: "create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch""#,
            r#"spec.rules[1].resourceRules[0].apiGroups: Invalid value: []string{"*", "apps"}: if '*' is present, must not specify other api groups"#,
            "spec.rules[1].resourceRules[0].resources: Required value: resource rules must supply at least one resource",
            "spec.rules[1].resourceRules[0].namespaces[0]: Invalid value: \"-foo\": each member of this list must be '*' or a DNS-1123 label; a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            r#"spec.rules[1].resourceRules[1].verbs: Invalid value: []string{"*", "get"}: if '*' is present, must not specify other verbs"#,
            "spec.rules[1].resourceRules[1].apiGroups: Required value: resource rules must supply at least one api group",
            r#"spec.rules[1].resourceRules[1].resources: Invalid value: []string{"*", "pods"}: if '*' is present, must not specify other resources"#,
            "spec.rules[1].resourceRules[1].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace",
            "spec.rules[1].nonResourceRules[0].verbs: Required value: verbs must contain at least one value",
            "spec.rules[1].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"/health*\": wildcard can only do suffix matching",
            "spec.rules[1].nonResourceRules[0].nonResourceURLs[1]: Invalid value: \"healthz\": must start with slash",
            "spec.rules[1].nonResourceRules[0].nonResourceURLs[2]: Invalid value: \"/a//b\": must not contain double slash",
            "spec.rules[1].nonResourceRules[0].nonResourceURLs[3]: Invalid value: \"/a b\": must not contain white-space",
            r#"spec.rules[1].nonResourceRules[1].nonResourceURLs: Invalid value: []string{"*", "/x"}: if '*' is present, must not specify other non-resource URLs"#,
        ]
    );
    let mut high = fs(
        json!({"metadata": {"name": "x"}, "spec": {"matchingPrecedence": 10001,
        "priorityLevelConfiguration": {"name": "Bad_Name"}}}),
    );
    high.status.conditions = vec![
        FlowSchemaCondition {
            type_: "Dangling".into(),
            ..Default::default()
        },
        FlowSchemaCondition {
            type_: "Dangling".into(),
            ..Default::default()
        },
        FlowSchemaCondition::default(),
    ];
    let m = messages(high.validate());
    assert_eq!(
        m[0],
        "spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000"
    );
    assert!(
        m[1].starts_with("spec.priorityLevelConfiguration.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"),
        "{m:?}"
    );
    assert_eq!(
        &m[2..],
        [
            "status.conditions[1].type: Duplicate value: \"Dangling\"",
            "status.conditions[2].type: Required value: must not be empty"
        ]
    );
}

#[test]
fn mandatory_objects_keep_their_spec() {
    let mut exempt = bootstrap::mandatory_flow_schemas().remove(0);
    assert!(exempt.validate().is_empty());
    exempt.spec.matching_precedence = 2;
    assert_eq!(
        messages(exempt.validate()),
        [
            r#"spec: Invalid value: flowcontrol.FlowSchemaSpec{PriorityLevelConfiguration:flowcontrol.PriorityLevelConfigurationReference{Name:"exempt"}, MatchingPrecedence:2, DistinguisherMethod:(*flowcontrol.FlowDistinguisherMethod)(nil), Rules:[]flowcontrol.PolicyRulesWithSubjects{flowcontrol.PolicyRulesWithSubjects{Subjects:[]flowcontrol.Subject{flowcontrol.Subject{Kind:"Group", User:(*flowcontrol.UserSubject)(nil), Group:(*flowcontrol.GroupSubject)(0xc000000000), ServiceAccount:(*flowcontrol.ServiceAccountSubject)(nil)}}, ResourceRules:[]flowcontrol.ResourcePolicyRule{flowcontrol.ResourcePolicyRule{Verbs:[]string{"*"}, APIGroups:[]string{"*"}, Resources:[]string{"*"}, ClusterScope:true, Namespaces:[]string{"*"}}}, NonResourceRules:[]flowcontrol.NonResourcePolicyRule{flowcontrol.NonResourcePolicyRule{Verbs:[]string{"*"}, NonResourceURLs:[]string{"*"}}}}}}: spec of 'exempt' must equal the fixed value"#
        ]
    );
    // The exempt level's `exempt` section may change; nothing else of it.
    let mut level = bootstrap::mandatory_priority_levels().remove(1);
    level.spec.exempt = Some(ExemptPriorityLevelConfiguration {
        nominal_concurrency_shares: Some(10),
        lendable_percent: Some(20),
    });
    assert!(
        level.validate().is_empty(),
        "{:?}",
        messages(level.validate())
    );
    level.spec.exempt = Some(ExemptPriorityLevelConfiguration {
        nominal_concurrency_shares: Some(-1),
        lendable_percent: Some(101),
    });
    assert_eq!(
        messages(level.validate()),
        [
            "spec.exempt.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
            "spec.exempt.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
        ]
    );
    let catch_all = pl(json!({"metadata": {"name": "catch-all"},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 42, "limitResponse": {"type": "Reject"}}}}));
    assert_eq!(
        messages(catch_all.validate()),
        ["spec: Invalid value: flowcontrol.PriorityLevelConfigurationSpec{Type:\"Limited\", Limited:(*flowcontrol.LimitedPriorityLevelConfiguration)(0xc000000000), Exempt:(*flowcontrol.ExemptPriorityLevelConfiguration)(nil)}: spec of 'catch-all' must equal the fixed value"]
    );
    let repurposed = pl(json!({"metadata": {"name": "exempt"},
        "spec": {"type": "Limited", "exempt": {}, "limited": {"nominalConcurrencyShares": 42, "limitResponse": {"type": "Reject"}}}}));
    assert_eq!(
        messages(repurposed.validate()),
        [
            "spec.type: Invalid value: \"Limited\": type must be 'Exempt' if and only if name is 'exempt'",
            "spec.exempt: Forbidden: must be nil if the type is Limited",
            "spec: Invalid value: flowcontrol.PriorityLevelConfigurationSpec{Type:\"Limited\", Limited:(*flowcontrol.LimitedPriorityLevelConfiguration)(0xc000000000), Exempt:(*flowcontrol.ExemptPriorityLevelConfiguration)(0xc000000000)}: spec of 'exempt' except the 'spec.exempt' field must equal the fixed value",
        ]
    );
}

#[test]
fn priority_level_messages() {
    let p = pl(json!({"metadata": {"name": "system-foo"},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": -1, "lendablePercent": 101,
                 "borrowingLimitPercent": -1,
                 "limitResponse": {"type": "Reject", "queuing": {"queues": 1}}}}}));
    assert_eq!(
        messages(p.validate()),
        [
            "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
            "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited",
            "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
            "spec.limited.borrowingLimitPercent: Invalid value: -1: if specified, must be a non-negative integer",
        ]
    );
    // Zero shares: a "jail", allowed in v1.
    let jail = pl(json!({"metadata": {"name": "jail"},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}}}));
    assert!(jail.validate().is_empty());
    let queuing = |q: serde_json::Value| {
        messages(
            pl(json!({"metadata": {"name": "q"},
            "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": q}}}}))
            .validate(),
        )
    };
    assert_eq!(
        queuing(json!({"queues": -1, "handSize": -1, "queueLengthLimit": -1})),
        [
            "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: -1: must be positive",
            "spec.limited.limitResponse.queuing.queues: Invalid value: -1: must be positive",
            "spec.limited.limitResponse.queuing.handSize: Invalid value: -1: must be positive",
        ]
    );
    assert_eq!(
        queuing(json!({"queues": 7, "handSize": 8})),
        ["spec.limited.limitResponse.queuing.handSize: Invalid value: 8: should not be greater than queues (7)"]
    );
    assert_eq!(
        queuing(json!({"queues": 512, "handSize": 8})),
        ["spec.limited.limitResponse.queuing.handSize: Invalid value: 8: required entropy bits of deckSize 512 and handSize 8 should not be greater than 60"]
    );
    assert_eq!(
        queuing(json!({"queues": 10000001, "handSize": 1})),
        ["spec.limited.limitResponse.queuing.queues: Invalid value: 10000001: must not be greater than 10000000"]
    );
    let missing = pl(
        json!({"metadata": {"name": "m"}, "spec": {"type": "Limited",
        "limited": {"limitResponse": {"type": "Queue"}}}}),
    );
    assert_eq!(
        messages(missing.validate()),
        ["spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is Limited"]
    );
    let empty = pl(json!({"metadata": {"name": "m"}, "spec": {"type": "Limited"}}));
    assert_eq!(
        messages(empty.validate()),
        ["spec.limited: Required value: must not be empty when type is Limited"]
    );
    let bad_type = pl(json!({"metadata": {"name": "m"}, "spec": {"type": "Sometimes"}}));
    assert_eq!(
        messages(bad_type.validate()),
        [r#"spec.type: Unsupported value: "Sometimes": supported values: "Exempt", "Limited""#]
    );
    let exempt_elsewhere = pl(json!({"metadata": {"name": "m"}, "spec": {"type": "Exempt",
        "limited": {"limitResponse": {"type": "Reject"}}}}));
    assert_eq!(
        messages(exempt_elsewhere.validate()),
        [
            "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'",
            "spec.limited: Forbidden: must be nil if the type is not Limited",
        ]
    );
}
