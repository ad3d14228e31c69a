//! Invalid objects are refused with Kubernetes' field paths and reasons.

use api::apps::{DaemonSet, Deployment, ReplicaSet};
use api::codec::{from_json, from_json_as_traced, DecodeError};
use api::core::{ConfigMap, Endpoints, Namespace, Node, Pod, Secret, Service};
use api::validation::{validate_meta, FieldError};
use api::{Kind, Resource};
use serde_json::{json, Value};

fn nginx_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2",
                                          "ports": [{"containerPort": 80}]}]}
            }
        }
    })
}

fn pod(spec: Value) -> Pod {
    from_json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}))
        .expect("decode")
}

/// Validates after defaulting, as the server does.
fn errors<K: Resource>(mut obj: K) -> Vec<FieldError> {
    obj.set_defaults();
    obj.validate()
}

fn has(errs: &[FieldError], field: &str, reason: &str) -> bool {
    errs.iter().any(|e| e.field == field && e.reason == reason)
}

#[track_caller]
fn assert_has(errs: &[FieldError], field: &str, reason: &str) {
    assert!(
        has(errs, field, reason),
        "no {reason} at {field} in {errs:#?}"
    );
}

#[test]
fn valid_baseline() {
    let d: Deployment = from_json(nginx_deployment()).expect("decode");
    assert_eq!(errors(d), vec![]);
}

#[test]
fn bad_names() {
    let mut v = nginx_deployment();
    v["metadata"]["name"] = json!("Nginx_Deployment");
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "metadata.name", "FieldValueInvalid");
    assert!(errs[0].message.contains("RFC 1123 subdomain"), "{errs:?}");

    // Dots are fine in most names, not in namespaces and services.
    let mut ok = nginx_deployment();
    ok["metadata"]["name"] = json!("nginx.v2");
    assert_eq!(errors(from_json::<Deployment>(ok).expect("decode")), vec![]);
    let mut ns = Namespace::default();
    ns.metadata.name = "team.a".into();
    assert_has(&errors(ns), "metadata.name", "FieldValueInvalid");
    let mut svc: Service = from_json(json!({"metadata": {"name": "1web"},
        "spec": {"ports": [{"port": 80}]}}))
    .expect("decode");
    assert_has(&errors(svc.clone()), "metadata.name", "FieldValueInvalid");
    svc.metadata.name = "web".into();
    assert_eq!(errors(svc), vec![]);

    // Name or generateName is required.
    let mut p = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
    p.metadata.name.clear();
    let errs = errors(p.clone());
    assert_has(&errs, "metadata.name", "FieldValueRequired");
    p.metadata.generate_name = Some("web-".into());
    assert_eq!(errors(p), vec![]);

    let mut n = Node::default();
    n.metadata.name = "Node_1".into();
    assert_has(&errors(n), "metadata.name", "FieldValueInvalid");
}

#[test]
fn meta_labels_annotations_namespace() {
    let mut p = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
    p.metadata.labels.insert("bad key!".into(), "v".into());
    p.metadata.labels.insert("ok".into(), "-bad-value".into());
    p.metadata
        .labels
        .insert("example.com/ok".into(), "x".repeat(64));
    p.metadata.namespace = Some("Bad_NS".into());
    p.metadata
        .annotations
        .insert("huge".into(), "x".repeat(300 * 1024));
    let errs = validate_meta(&p.metadata, Kind::Pod);
    assert_eq!(
        errs.iter().filter(|e| e.field == "metadata.labels").count(),
        3,
        "{errs:#?}"
    );
    assert_has(&errs, "metadata.namespace", "FieldValueInvalid");
    assert_has(&errs, "metadata.annotations", "FieldValueTooLong");
}

#[test]
fn pod_without_containers() {
    let errs = errors(pod(json!({})));
    assert_has(&errs, "spec.containers", "FieldValueRequired");
    assert_eq!(errs[0].message, "Required value");
}

#[test]
fn container_rules() {
    let errs = errors(pod(json!({
        "containers": [
            {"name": "app", "image": "busybox", "imagePullPolicy": "Sometimes",
             "ports": [{"containerPort": 70000}, {"containerPort": 80, "protocol": "HTTP"}],
             "volumeMounts": [{"name": "missing", "mountPath": "/data"}]},
            {"name": "app", "image": ""},
            {"name": "Bad_Name", "image": "busybox"}
        ],
        "restartPolicy": "Sometimes",
        "dnsPolicy": "Whatever"
    })));
    assert_has(
        &errs,
        "spec.containers[0].imagePullPolicy",
        "FieldValueNotSupported",
    );
    assert_has(
        &errs,
        "spec.containers[0].ports[0].containerPort",
        "FieldValueInvalid",
    );
    assert_has(
        &errs,
        "spec.containers[0].ports[1].protocol",
        "FieldValueNotSupported",
    );
    assert_has(
        &errs,
        "spec.containers[0].volumeMounts[0].name",
        "FieldValueNotFound",
    );
    assert_has(&errs, "spec.containers[1].name", "FieldValueDuplicate");
    assert_has(&errs, "spec.containers[1].image", "FieldValueRequired");
    assert_has(&errs, "spec.containers[2].name", "FieldValueInvalid");
    assert_has(&errs, "spec.restartPolicy", "FieldValueNotSupported");
    assert_has(&errs, "spec.dnsPolicy", "FieldValueNotSupported");
    let msg = &errs
        .iter()
        .find(|e| e.field == "spec.restartPolicy")
        .expect("restartPolicy error")
        .message;
    assert_eq!(
        msg,
        "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
    );
}

/// A uid past 2^31 - 1 would be cut to 32 bits where the pod runs: 4294967296 is root.
#[test]
fn pod_security_context_ids_are_31_bit() {
    let errs = errors(pod(json!({
        "containers": [{"name": "app", "image": "busybox"}],
        "securityContext": {
            "runAsUser": 4294967296_i64, "runAsGroup": -1, "fsGroup": i64::MAX,
            "supplementalGroups": [1000, i64::MIN]
        }
    })));
    for field in [
        "runAsUser",
        "runAsGroup",
        "fsGroup",
        "supplementalGroups[1]",
    ] {
        assert_has(
            &errs,
            &format!("spec.securityContext.{field}"),
            "FieldValueInvalid",
        );
    }
    assert!(!has(
        &errs,
        "spec.securityContext.supplementalGroups[0]",
        "FieldValueInvalid"
    ));
    let ok = errors(pod(json!({
        "containers": [{"name": "app", "image": "busybox"}],
        "securityContext": {"runAsUser": 2147483647, "runAsGroup": 0, "fsGroup": 2000}
    })));
    assert_eq!(ok, vec![]);
}

#[test]
fn volume_rules() {
    let errs = errors(pod(json!({
        "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [
            {"name": "a", "emptyDir": {}},
            {"name": "a", "emptyDir": {}},
            {"name": "b"},
            {"name": "c", "emptyDir": {}, "hostPath": {"path": "/x"}}
        ]
    })));
    assert_has(&errs, "spec.volumes[1].name", "FieldValueDuplicate");
    assert_has(&errs, "spec.volumes[2]", "FieldValueRequired");
    assert_has(&errs, "spec.volumes[3].emptyDir", "FieldValueForbidden");
}

#[test]
fn probe_rules() {
    let errs = errors(pod(json!({
        "containers": [{"name": "c", "image": "busybox",
            "livenessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}},
            "readinessProbe": {"periodSeconds": 5},
            "startupProbe": {"httpGet": {"port": 0}, "successThreshold": 2}}]
    })));
    assert_has(
        &errs,
        "spec.containers[0].livenessProbe.tcpSocket",
        "FieldValueForbidden",
    );
    assert_has(
        &errs,
        "spec.containers[0].readinessProbe",
        "FieldValueRequired",
    );
    assert_has(
        &errs,
        "spec.containers[0].startupProbe.httpGet.port",
        "FieldValueInvalid",
    );
    assert_has(
        &errs,
        "spec.containers[0].startupProbe.successThreshold",
        "FieldValueInvalid",
    );
}

#[test]
fn resource_rules() {
    let errs = errors(pod(json!({
        "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "2", "memory": "1x"}, "limits": {"cpu": "500m"}}}]
    })));
    assert_has(
        &errs,
        "spec.containers[0].resources.requests",
        "FieldValueInvalid",
    );
    assert_has(
        &errs,
        "spec.containers[0].resources.requests[memory]",
        "FieldValueInvalid",
    );
    let msg = errs
        .iter()
        .find(|e| e.field == "spec.containers[0].resources.requests")
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("less than or equal to cpu limit of 500m"),
        "{msg}"
    );
}

#[test]
fn negative_replicas() {
    let mut v = nginx_deployment();
    v["spec"]["replicas"] = json!(-1);
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "spec.replicas", "FieldValueInvalid");
    assert_eq!(
        errs.iter()
            .find(|e| e.field == "spec.replicas")
            .map(|e| e.message.as_str()),
        Some("Invalid value: \"-1\": must be greater than or equal to 0")
    );
    let mut rs: ReplicaSet = from_json(json!({
        "metadata": {"name": "rs"},
        "spec": {"replicas": -2, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .expect("decode");
    assert_has(&errors(rs.clone()), "spec.replicas", "FieldValueInvalid");
    rs.spec.replicas = Some(0);
    assert_eq!(errors(rs), vec![]);
}

#[test]
fn selector_must_match_template() {
    let mut v = nginx_deployment();
    v["spec"]["template"]["metadata"]["labels"] = json!({"app": "web"});
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    let e = errs
        .iter()
        .find(|e| e.field == "spec.template.metadata.labels")
        .expect("selector mismatch error");
    assert_eq!(e.reason, "FieldValueInvalid");
    assert_eq!(
        e.message,
        "Invalid value: \"map[app:web]\": `selector` does not match template `labels`"
    );

    // Missing and empty selectors.
    let mut v = nginx_deployment();
    v["spec"].as_object_mut().expect("spec").remove("selector");
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "spec.selector", "FieldValueRequired");
    let mut v = nginx_deployment();
    v["spec"]["selector"] = json!({});
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "spec.selector", "FieldValueInvalid");

    // matchExpressions take part in matching.
    let mut v = nginx_deployment();
    v["spec"]["selector"]["matchExpressions"] =
        json!([{"key": "tier", "operator": "In", "values": ["web"]}]);
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "spec.template.metadata.labels", "FieldValueInvalid");
    let mut v = nginx_deployment();
    v["spec"]["selector"]["matchExpressions"] =
        json!([{"key": "tier", "operator": "Exists", "values": ["x"]}]);
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(
        &errs,
        "spec.selector.matchExpressions[0].values",
        "FieldValueForbidden",
    );
}

#[test]
fn template_is_validated_with_its_prefix() {
    let mut v = nginx_deployment();
    v["spec"]["template"]["spec"]["containers"][0]["name"] = json!("");
    v["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(
        &errs,
        "spec.template.spec.containers[0].name",
        "FieldValueRequired",
    );
    assert_has(
        &errs,
        "spec.template.spec.restartPolicy",
        "FieldValueNotSupported",
    );

    let mut ds: DaemonSet = from_json(json!({
        "metadata": {"name": "ds"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": []}}}
    }))
    .expect("decode");
    assert_has(
        &errors(ds.clone()),
        "spec.template.spec.containers",
        "FieldValueRequired",
    );
    ds.spec.update_strategy = Some(api::apps::DaemonSetUpdateStrategy {
        type_: Some("Sometimes".into()),
        rolling_update: None,
    });
    assert_has(
        &errors(ds),
        "spec.updateStrategy.type",
        "FieldValueNotSupported",
    );
}

#[test]
fn strategy_rules() {
    let mut v = nginx_deployment();
    v["spec"]["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}});
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(
        &errs,
        "spec.strategy.rollingUpdate.maxUnavailable",
        "FieldValueInvalid",
    );

    let mut v = nginx_deployment();
    v["spec"]["strategy"] = json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}});
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "spec.strategy.rollingUpdate", "FieldValueForbidden");

    let mut v = nginx_deployment();
    v["spec"]["strategy"] = json!({"type": "BlueGreen"});
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(&errs, "spec.strategy.type", "FieldValueNotSupported");

    let mut v = nginx_deployment();
    v["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": "150%", "maxUnavailable": "x"}});
    let errs = errors(from_json::<Deployment>(v).expect("decode"));
    assert_has(
        &errs,
        "spec.strategy.rollingUpdate.maxSurge",
        "FieldValueInvalid",
    );
    assert_has(
        &errs,
        "spec.strategy.rollingUpdate.maxUnavailable",
        "FieldValueInvalid",
    );
}

#[test]
fn service_rules() {
    let svc = |spec: Value| -> Service {
        from_json(json!({"metadata": {"name": "svc"}, "spec": spec})).expect("decode")
    };
    assert_has(&errors(svc(json!({}))), "spec.ports", "FieldValueRequired");
    assert_eq!(errors(svc(json!({"clusterIP": "None"}))), vec![]);
    assert_eq!(
        errors(svc(
            json!({"type": "ExternalName", "externalName": "db.example.com"})
        )),
        vec![]
    );
    assert_has(
        &errors(svc(json!({"type": "ExternalName"}))),
        "spec.externalName",
        "FieldValueRequired",
    );
    let errs = errors(svc(json!({
        "type": "NodePort",
        "ports": [{"port": 0}, {"name": "a", "port": 80, "nodePort": 80},
                  {"name": "a", "port": 81, "targetPort": "Not_Valid"}]
    })));
    assert_has(&errs, "spec.ports[0].port", "FieldValueInvalid");
    assert_has(&errs, "spec.ports[0].name", "FieldValueRequired");
    assert_has(&errs, "spec.ports[1].nodePort", "FieldValueInvalid");
    assert_has(&errs, "spec.ports[2].name", "FieldValueDuplicate");
    assert_has(&errs, "spec.ports[2].targetPort", "FieldValueInvalid");
    let errs = errors(svc(json!({"type": "Balanced", "ports": [{"port": 80}]})));
    assert_has(&errs, "spec.type", "FieldValueNotSupported");
    let errs = errors(svc(json!({"ports": [{"port": 80, "nodePort": 30001}]})));
    assert_has(&errs, "spec.ports[0].nodePort", "FieldValueForbidden");
    let errs = errors(svc(
        json!({"clusterIP": "10.0.0.300", "ports": [{"port": 80}]}),
    ));
    assert_has(&errs, "spec.clusterIPs[0]", "FieldValueInvalid");
}

#[test]
fn config_and_secret_keys() {
    let cm: ConfigMap = from_json(json!({"metadata": {"name": "c"},
        "data": {"good.key": "1", "bad/key": "2"}, "binaryData": {"good.key": "AA=="}}))
    .expect("decode");
    let errs = errors(cm);
    assert_has(&errs, "data[bad/key]", "FieldValueInvalid");
    assert_has(&errs, "data[good.key]", "FieldValueDuplicate");

    let s: Secret =
        from_json(json!({"metadata": {"name": "s"}, "stringData": {"..": "x"}})).expect("decode");
    assert_has(&errors(s), "data[..]", "FieldValueInvalid");

    let tls: Secret =
        from_json(json!({"metadata": {"name": "t"}, "type": "kubernetes.io/tls"})).expect("decode");
    assert_has(&errors(tls), "data[tls.crt]", "FieldValueRequired");
}

#[test]
fn node_and_endpoints_rules() {
    let n: Node = from_json(json!({"metadata": {"name": "n1"},
        "spec": {"podCIDR": "10.42.0.0/33x", "taints": [{"key": "k", "effect": "Sometimes"}]}}))
    .expect("decode");
    let errs = errors(n);
    assert_has(&errs, "spec.podCIDR", "FieldValueInvalid");
    assert_has(&errs, "spec.taints[0].effect", "FieldValueNotSupported");

    let e: Endpoints = from_json(json!({"metadata": {"name": "e"},
        "subsets": [{"addresses": [{"ip": "not-an-ip"}], "ports": [{"port": 99999}]}]}))
    .expect("decode");
    let errs = errors(e);
    assert_has(&errs, "subsets[0].addresses[0].ip", "FieldValueInvalid");
    assert_has(&errs, "subsets[0].ports[0].port", "FieldValueInvalid");
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    // The API server's decoder names the path; the client's and the agent's give serde's
    // message alone.
    fn traced<K: Resource>(v: Value) -> Result<K, DecodeError> {
        from_json_as_traced::<K>(K::KIND, v)
    }
    let mut v = nginx_deployment();
    v["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = json!("Always");
    match from_json::<Deployment>(v.clone()) {
        Err(DecodeError::Syntax(message)) => {
            assert!(
                message.contains("unknown field `imagePullPolicyy`"),
                "{message}"
            )
        }
        other => panic!("expected serde's error, got {other:?}"),
    }
    match traced::<Deployment>(v) {
        Err(DecodeError::Field { path, message }) => {
            assert_eq!(path, "spec.template.spec.containers[0].imagePullPolicyy");
            assert!(
                message.contains("unknown field `imagePullPolicyy`"),
                "{message}"
            );
        }
        other => panic!("expected a field error, got {other:?}"),
    }

    let mut v = nginx_deployment();
    v["spec"]["replicas"] = json!("three");
    match traced::<Deployment>(v) {
        Err(DecodeError::Field { path, .. }) => assert_eq!(path, "spec.replicas"),
        other => panic!("expected a field error, got {other:?}"),
    }

    // Secret data must be base64.
    let bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                     "data": {"password": "not base64!"}});
    match traced::<Secret>(bad) {
        Err(DecodeError::Field { path, message }) => {
            assert_eq!(path, "data.password");
            assert!(message.contains("illegal base64 data"), "{message}");
        }
        other => panic!("expected a field error, got {other:?}"),
    }

    // Kind mismatch.
    assert!(matches!(
        from_json::<Pod>(nginx_deployment()),
        Err(DecodeError::WrongKind { .. })
    ));
    assert!(matches!(
        traced::<Pod>(nginx_deployment()),
        Err(DecodeError::WrongKind { .. })
    ));
}

#[test]
fn updates_keep_immutable_fields() {
    use api::validation::validate_update;

    // Pods: images may change, other spec fields may not.
    let mut old = pod(json!({"containers": [{"name": "c", "image": "nginx:1"}],
                             "tolerations": [{"key": "a", "operator": "Exists"}]}));
    old.set_defaults();
    let mut new = old.clone();
    new.spec.containers[0].image = Some("nginx:2".into());
    new.spec.tolerations.push(api::core::Toleration {
        key: Some("b".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    });
    new.spec.active_deadline_seconds = Some(60);
    new.metadata.labels.insert("x".into(), "y".into());
    assert_eq!(
        validate_update(&new.clone().into_any(), &old.clone().into_any()),
        vec![]
    );
    new.spec.containers[0].args = vec!["-v".into()];
    let errs = validate_update(&new.into_any(), &old.clone().into_any());
    assert_has(&errs, "spec", "FieldValueForbidden");
    let mut renamed = old.clone();
    renamed.metadata.name = "other".into();
    assert_has(
        &validate_update(&renamed.into_any(), &old.into_any()),
        "metadata.name",
        "FieldValueInvalid",
    );

    // Workload selectors are immutable.
    let old: Deployment = from_json(nginx_deployment()).expect("decode");
    let mut new = old.clone();
    new.spec.replicas = Some(5);
    assert_eq!(
        validate_update(&new.clone().into_any(), &old.clone().into_any()),
        vec![]
    );
    new.spec
        .selector
        .as_mut()
        .expect("selector")
        .match_labels
        .insert("tier".into(), "web".into());
    let errs = validate_update(&new.into_any(), &old.into_any());
    assert_has(&errs, "spec.selector", "FieldValueInvalid");

    // Immutable ConfigMaps and Secrets.
    let old: ConfigMap =
        from_json(json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "immutable": true}))
            .expect("decode");
    let mut new = old.clone();
    new.data.insert("a".into(), "2".into());
    new.immutable = None;
    let errs = validate_update(&new.into_any(), &old.into_any());
    assert_has(&errs, "data", "FieldValueForbidden");
    assert_has(&errs, "immutable", "FieldValueForbidden");
    let old: Secret =
        from_json(json!({"metadata": {"name": "s"}, "type": "Opaque"})).expect("decode");
    let mut new = old.clone();
    new.type_ = Some("kubernetes.io/tls".into());
    assert_has(
        &validate_update(&new.into_any(), &old.into_any()),
        "type",
        "FieldValueInvalid",
    );

    // Cluster IPs and pod CIDRs do not move once set.
    let old: Service = from_json(json!({"metadata": {"name": "s"},
        "spec": {"clusterIP": "10.43.0.10", "ports": [{"port": 80}]}}))
    .expect("decode");
    let mut new = old.clone();
    new.spec.cluster_ip = Some("10.43.0.11".into());
    assert_has(
        &validate_update(&new.into_any(), &old.into_any()),
        "spec.clusterIPs[0]",
        "FieldValueInvalid",
    );
    let mut old = Node::default();
    old.metadata.name = "n".into();
    let mut new = old.clone();
    new.spec.pod_cidr = Some("10.42.1.0/24".into());
    assert_eq!(
        validate_update(&new.clone().into_any(), &old.into_any()),
        vec![]
    );
    let mut newer = new.clone();
    newer.spec.pod_cidr = Some("10.42.2.0/24".into());
    assert_has(
        &validate_update(&newer.into_any(), &new.into_any()),
        "spec.podCIDR",
        "FieldValueForbidden",
    );
}
