//! The example manifests of the Kubernetes documentation (and objects as `kubectl get -o
//! yaml` prints them) decode into the typed model, keep every field through JSON and postcard,
//! and validate clean after defaulting.

use std::path::{Path, PathBuf};

use api::codec::{from_json, parse_manifests, to_json, type_of, write_json, MAP_FIELDS};
use api::meta::Time;
use api::Resource;
use base64::Engine as _;
use serde_json::Value;

fn manifest_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("manifest dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 12, "manifests missing from {dir:?}");
    files
}

/// Whether JSON scalars are the same value as Kubernetes sees it: `cpu: 1` comes back as
/// `"1"` (a Quantity), a MicroTime comes back to the second.
fn same_scalar(want: &Value, got: &Value) -> bool {
    if want == got {
        return true;
    }
    match (want, got) {
        (Value::Number(n), Value::String(s)) => n.to_string() == *s,
        (Value::String(a), Value::String(b)) => match (Time::parse(a), Time::parse(b)) {
            (Ok(x), Ok(y)) => x == y && a.contains('.'),
            _ => false,
        },
        _ => false,
    }
}

/// Every field of `want` is in `got` with the same value (`got` may have more: defaults).
/// Empty objects, empty arrays and nulls in `want` need not be in `got`.
fn assert_subset(want: &Value, got: &Value, path: &str) {
    match (want, got) {
        (Value::Object(w), _) => {
            let g = got.as_object();
            for (k, wv) in w {
                let here = format!("{path}.{k}");
                let gv = g.and_then(|g| g.get(k));
                match gv {
                    Some(gv) => assert_subset(wv, gv, &here),
                    None => assert!(
                        is_empty(wv),
                        "{here}: {wv} was lost (got {})",
                        serde_json::to_string(got).unwrap_or_default()
                    ),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            assert_eq!(w.len(), g.len(), "{path}: array length");
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                assert_subset(wv, gv, &format!("{path}[{i}]"));
            }
        }
        _ => assert!(same_scalar(want, got), "{path}: want {want}, got {got}"),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
        _ => false,
    }
}

/// What defaulting does to a Secret's JSON: `stringData` moves into `data`, base64-encoded.
fn expected_after_defaults(doc: &Value) -> Value {
    let mut want = doc.clone();
    if doc.get("kind").and_then(Value::as_str) == Some("Secret") {
        if let Some(Value::Object(sd)) = want.as_object_mut().and_then(|m| m.remove("stringData")) {
            let data = want
                .as_object_mut()
                .expect("object")
                .entry("data")
                .or_insert_with(|| Value::Object(Default::default()));
            for (k, v) in sd {
                let s = v.as_str().expect("stringData values are strings");
                data[k.as_str()] =
                    Value::String(base64::engine::general_purpose::STANDARD.encode(s));
            }
        }
    }
    want
}

fn round_trip<K: Resource + Default>(doc: &Value, origin: &str) {
    let mut obj: K = from_json(doc.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));

    // Defaulting is idempotent and leaves a valid object.
    obj.set_defaults();
    let mut twice = obj.clone();
    twice.set_defaults();
    assert_eq!(twice, obj, "{origin}: defaulting is not idempotent");
    let errs = obj.validate();
    assert!(errs.is_empty(), "{origin}: {errs:#?}");

    // JSON: nothing lost, and a fixed point after one trip.
    let json = to_json(&obj);
    assert_subset(&expected_after_defaults(doc), &json, origin);
    assert_eq!(json["kind"], doc["kind"], "{origin}");
    assert_eq!(json["apiVersion"], doc["apiVersion"], "{origin}");
    let again: K = from_json(json.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));
    assert_eq!(again, obj, "{origin}: JSON round trip");
    assert_eq!(to_json(&again), json, "{origin}");
    // The one-pass writer prints the same document as the pruned value.
    assert_eq!(json, pruned_value(&obj), "{origin}: one-pass omission");
    let mut written = Vec::new();
    write_json(&obj, &mut written);
    let parsed: Value = serde_json::from_slice(&written).expect("written JSON parses");
    assert_eq!(parsed, json, "{origin}: write_json");
    let mut any_written = Vec::new();
    obj.clone().into_any().write_json(&mut any_written);
    assert_eq!(any_written, written, "{origin}: AnyObject::write_json");
    // Plain serde_json (nulls and all) round-trips too.
    let raw = serde_json::to_value(&obj).expect("serialize");
    let direct: K = serde_json::from_value(raw).unwrap_or_else(|e| panic!("{origin}: {e}"));
    assert_eq!(direct, obj, "{origin}: serde_json round trip");

    // postcard, typed and as AnyObject.
    let bytes = postcard::to_allocvec(&obj).expect("postcard encode");
    let back: K = postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("{origin}: {e}"));
    assert_eq!(back, obj, "{origin}: postcard round trip");
    let any = obj.clone().into_any();
    let bytes = postcard::to_allocvec(&any).expect("postcard encode");
    let back: api::AnyObject =
        postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("{origin}: {e}"));
    assert_eq!(back, any, "{origin}: AnyObject postcard round trip");

    // Tables render a cell per column.
    assert_eq!(
        api::table::cells(&any).len(),
        api::table::columns(K::KIND).len(),
        "{origin}"
    );
}

#[test]
fn documentation_manifests_round_trip_and_validate() {
    let mut count = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for file in manifest_files() {
        let text = std::fs::read_to_string(&file).expect("read manifest");
        let docs = parse_manifests(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        assert!(!docs.is_empty(), "{file:?} has no documents");
        for (i, doc) in docs.iter().enumerate() {
            let origin = format!(
                "{}#{i} ({})",
                file.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                doc["metadata"]["name"]
            );
            let kind = type_of(doc).unwrap_or_else(|e| panic!("{origin}: {e}"));
            kinds.insert(kind);
            api::with_kind!(kind, K, { round_trip::<K>(doc, &origin) });
            count += 1;
        }
    }
    assert!(count >= 35, "only {count} documents");
    assert_eq!(
        kinds.len(),
        api::Kind::ALL.len(),
        "every kind has an example"
    );
}

fn load(file: &str, index: usize) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/manifests")
        .join(file);
    let text = std::fs::read_to_string(path).expect("read manifest");
    parse_manifests(&text).expect("parse")[index].clone()
}

#[test]
fn deployment_defaults() {
    use api::apps::Deployment;
    use api::meta::IntOrString;
    let mut d: Deployment = from_json(load("nginx-deployment.yaml", 0)).expect("decode");
    d.set_defaults();
    let s = &d.spec;
    assert_eq!(s.replicas, Some(3));
    let strategy = s.strategy.as_ref().expect("strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let ru = strategy.rolling_update.as_ref().expect("rollingUpdate");
    assert_eq!(ru.max_surge, Some(IntOrString::String("25%".into())));
    assert_eq!(ru.max_unavailable, Some(IntOrString::String("25%".into())));
    assert_eq!(s.revision_history_limit, Some(10));
    assert_eq!(s.progress_deadline_seconds, Some(600));
    let pod = &s.template.spec;
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(pod.termination_grace_period_seconds, Some(30));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(pod.scheduler_name.as_deref(), Some("default-scheduler"));
    // Kubernetes defaults enableServiceLinks on pods, not on templates.
    assert_eq!(pod.enable_service_links, None);
    assert!(pod.security_context.is_some());
    let c = &pod.containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(c.ports[0].protocol.as_deref(), Some("TCP"));

    // The JSON kubectl sees carries the defaults as Kubernetes spells them.
    let json = to_json(&d);
    assert_eq!(json["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(
        json["spec"]["template"]["spec"]["securityContext"],
        serde_json::json!({})
    );
    // Empty maps are omitted, as Kubernetes' omitempty does.
    let pod_spec = &json["spec"]["template"]["spec"];
    assert!(pod_spec.get("nodeSelector").is_none(), "{pod_spec}");
    assert!(pod_spec.get("overhead").is_none(), "{pod_spec}");

    // Replicas default to 1 when unset.
    let mut bare: Deployment = from_json(serde_json::json!({
        "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("decode");
    bare.set_defaults();
    assert_eq!(bare.spec.replicas, Some(1));
    assert_eq!(
        bare.spec.template.spec.containers[0]
            .image_pull_policy
            .as_deref(),
        Some("Always")
    );
}

#[test]
fn other_defaults() {
    use api::apps::{DaemonSet, ReplicaSet};
    use api::core::{Namespace, Pod, Secret, Service};
    use api::meta::IntOrString;

    let mut ds: DaemonSet =
        from_json(load("fluentd-elasticsearch-daemonset.yaml", 0)).expect("decode");
    ds.set_defaults();
    let st = ds.spec.update_strategy.as_ref().expect("updateStrategy");
    assert_eq!(st.type_.as_deref(), Some("RollingUpdate"));
    let ru = st.rolling_update.as_ref().expect("rollingUpdate");
    assert_eq!(ru.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(ru.max_surge, Some(IntOrString::Int(0)));
    assert_eq!(ds.spec.revision_history_limit, Some(10));
    // A limit without a request requests the limit.
    let r = ds.spec.template.spec.containers[0]
        .resources
        .as_ref()
        .expect("resources");
    assert_eq!(r.requests["memory"].0, "200Mi");

    let mut rs: ReplicaSet = from_json(serde_json::json!({
        "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("decode");
    rs.set_defaults();
    assert_eq!(rs.spec.replicas, Some(1));

    let mut svc: Service = from_json(load("services.yaml", 0)).expect("decode");
    svc.set_defaults();
    assert_eq!(svc.spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(svc.spec.session_affinity.as_deref(), Some("None"));
    let mut svc: Service = from_json(load("services.yaml", 3)).expect("decode");
    svc.spec.ports[0].target_port = None;
    svc.spec.ports[0].protocol = None;
    svc.set_defaults();
    assert_eq!(svc.spec.ports[0].target_port, Some(IntOrString::Int(80)));
    assert_eq!(svc.spec.ports[0].protocol.as_deref(), Some("TCP"));

    let mut secret: Secret = from_json(load("secrets.yaml", 0)).expect("decode");
    secret.set_defaults();
    assert_eq!(secret.data["username"].0, b"administrator");
    assert!(secret.string_data.is_empty());
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let mut dot: Secret = from_json(load("secrets.yaml", 2)).expect("decode");
    dot.set_defaults();
    assert_eq!(dot.type_.as_deref(), Some("Opaque"));
    assert_eq!(dot.data[".secret-file"].0, b"value-2\r\n\r\n");

    let mut ns: Namespace = from_json(load("namespaces.yaml", 0)).expect("decode");
    ns.set_defaults();
    assert_eq!(ns.spec.finalizers, vec!["kubernetes".to_string()]);
    assert_eq!(ns.status.phase.as_deref(), Some("Active"));

    let mut pod: Pod = from_json(load("probes-pods.yaml", 1)).expect("decode");
    pod.set_defaults();
    let probe = pod.spec.containers[0]
        .liveness_probe
        .as_ref()
        .expect("probe");
    assert_eq!(probe.timeout_seconds, Some(1));
    assert_eq!(probe.period_seconds, Some(3));
    assert_eq!(probe.success_threshold, Some(1));
    assert_eq!(probe.failure_threshold, Some(3));
    let get = probe.http_get.as_ref().expect("httpGet");
    assert_eq!(get.scheme.as_deref(), Some("HTTP"));
    assert_eq!(get.path.as_deref(), Some("/healthz"));
    let mut tcp: Pod = from_json(load("probes-pods.yaml", 2)).expect("decode");
    tcp.set_defaults();
    let ready = tcp.spec.containers[0]
        .readiness_probe
        .as_ref()
        .expect("probe");
    assert_eq!(ready.period_seconds, Some(10));
    assert_eq!(ready.timeout_seconds, Some(1));
}

#[test]
fn image_pull_policy_defaults() {
    use api::core::Container;
    let cases = [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.14.2", "IfNotPresent"),
        ("localhost:5000/nginx", "Always"),
        ("localhost:5000/nginx:1.0", "IfNotPresent"),
        ("localhost:5000/nginx:latest", "Always"),
        (
            "nginx@sha256:0d17b565c37bcbd895e9d92315a05c1c3c9a29f762b011a10c54a66cd53c9b31",
            "IfNotPresent",
        ),
        ("", "Always"),
    ];
    for (image, want) in cases {
        assert_eq!(Container::default_pull_policy(image), want, "{image}");
    }
}

#[test]
fn status_fields_decode_typed() {
    use api::core::{Event, Node, Pod};
    let pod: Pod = from_json(load("pod-with-status.yaml", 0)).expect("decode");
    let cs = &pod.status.container_statuses[0];
    assert!(cs.ready);
    assert_eq!(cs.restart_count, 1);
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("lastState.terminated");
    assert_eq!(last.exit_code, 137);
    assert_eq!(last.reason.as_deref(), Some("OOMKilled"));
    assert_eq!(pod.status.pod_ip.as_deref(), Some("10.42.1.7"));
    assert_eq!(pod.status.host_ips[0].ip, "192.168.1.21");
    assert_eq!(
        pod.meta().controller_ref().map(|o| o.kind.as_str()),
        Some("ReplicaSet")
    );
    let row = api::table::cells(&pod.clone().into_any());
    assert_eq!(row[1], "1/1");
    assert_eq!(row[2], "Running");
    assert!(
        row[3].as_str().is_some_and(|r| r.starts_with("1 (")),
        "{row:?}"
    );

    let node: Node = from_json(load("node-with-status.yaml", 0)).expect("decode");
    assert_eq!(node.status.address("InternalIP"), Some("192.168.1.21"));
    assert_eq!(
        node.status.condition("Ready").map(|c| c.status.as_str()),
        Some("True")
    );
    assert_eq!(node.status.allocatable["memory"].value(), Ok(3884 << 20));
    assert_eq!(node.status.allocatable["cpu"].milli_value(), Ok(4000));
    assert_eq!(
        node.status
            .daemon_endpoints
            .as_ref()
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map(|k| k.port),
        Some(10250)
    );
    assert_eq!(node.spec.taints[0].effect, "NoSchedule");
    let row = api::table::cells(&node.into_any());
    assert_eq!(row[1], "Ready");
    assert_eq!(row[2], "worker");
    assert_eq!(row[4], "v1.29.4");

    let ev: Event = from_json(load("events.yaml", 1)).expect("decode");
    assert_eq!(
        ev.event_time,
        Some(Time::parse("2024-05-01T10:00:00Z").expect("time"))
    );
    assert_eq!(ev.series.as_ref().and_then(|s| s.count), Some(3));
    let any = ev.into_any();
    assert_eq!(any.field("reason").as_deref(), Some("Scheduled"));
    assert_eq!(any.field("involvedObject.name").as_deref(), Some("web-0"));
    assert_eq!(
        any.field("reportingComponent").as_deref(),
        Some("default-scheduler")
    );
}

#[test]
fn spec_fingerprint_ignores_status_and_metadata() {
    use api::core::Pod;
    let pod: Pod = from_json(load("pod-with-status.yaml", 0)).expect("decode");
    let mut other = pod.clone();
    other.status.phase = Some("Failed".into());
    other.metadata.labels.insert("x".into(), "y".into());
    assert_eq!(pod.spec_fingerprint(), other.spec_fingerprint());
    other.spec.containers[0].image = Some("nginx:1.25".into());
    assert_ne!(pod.spec_fingerprint(), other.spec_fingerprint());

    let mut cleared = pod.clone();
    cleared.clear_status();
    assert_eq!(cleared.status, Default::default());
    cleared.copy_status_from(&pod);
    assert_eq!(cleared, pod);
}

/// The reference for Kubernetes' output shape: the whole object as a `serde_json::Value`,
/// pruned afterwards (how the server wrote JSON before it wrote it in one pass).
fn pruned_value<K: Resource>(obj: &K) -> Value {
    fn prune(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, v| {
                    !(v.is_null()
                        || v.as_array().is_some_and(|a| a.is_empty())
                        || (MAP_FIELDS.contains(&k.as_str())
                            && v.as_object().is_some_and(|o| o.is_empty())))
                });
                if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                    meta.retain(|_, v| v.as_str() != Some(""));
                }
                m.values_mut().for_each(prune);
            }
            Value::Array(a) => a.iter_mut().for_each(prune),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(obj).expect("serialize");
    prune(&mut v);
    let m = v.as_object_mut().expect("an object");
    if let Some(Value::Object(meta)) = m.get_mut("metadata") {
        meta.remove("selfLink");
        meta.remove("managedFields");
    }
    let info = K::KIND.info();
    m.insert("apiVersion".into(), Value::String(info.api_version()));
    m.insert("kind".into(), Value::String(info.kind.into()));
    v
}

/// What Kubernetes defaults on pods only (SetDefaults_Pod), and the namespace name label.
#[test]
fn pod_only_defaults_and_namespace_label() {
    use api::core::{Namespace, Pod};

    let mut pod: Pod = from_json(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "100m"}}}]}
    }))
    .expect("decode");
    pod.set_defaults();
    assert_eq!(pod.spec.enable_service_links, Some(true));
    let r = pod.spec.containers[0]
        .resources
        .as_ref()
        .expect("resources");
    let requests: Vec<(String, String)> = r
        .requests
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(
        requests,
        [
            ("cpu".into(), "100m".into()),
            ("memory".into(), "64Mi".into())
        ]
    );

    let mut ns: Namespace = from_json(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "other"}}
    }))
    .expect("decode");
    ns.set_defaults();
    assert_eq!(ns.metadata.labels["kubernetes.io/metadata.name"], "team");
}
