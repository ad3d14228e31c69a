//! Admission plugins of kube-apiserver that guard a site's storage and runtime, against a real
//! server (see docs/admission.md): RuntimeClass (the class, its overhead and scheduling), LimitRanger and ResourceQuota for claims,
//! ResourceQuota on updates, PersistentVolumeClaimResize.

mod common;

use common::TestServer;
use serde_json::{json, Value};

const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";

fn claim(name: &str, size: &str, class: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}});
    if let Some(class) = class {
        c["spec"]["storageClassName"] = json!(class);
    }
    c
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

fn merge(s: &TestServer, path: &str, patch: Value) -> (u16, Value) {
    s.http(
        "PATCH",
        path,
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&patch).unwrap(),
        )),
    )
}

#[test]
fn a_pod_asking_for_a_runtime_class_that_does_not_exist_is_refused() {
    let s = TestServer::start();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sandboxed"},
        "spec": {"runtimeClassName": "gvisor", "schedulerName": "none",
            "containers": [{"name": "c", "image": "busybox"}]}});
    let (code, body) = s.json("POST", "/api/v1/namespaces/default/pods", &pod);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "pods \"sandboxed\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found"
    );
}

#[test]
fn runtime_classes_give_pods_their_overhead_and_scheduling() {
    let s = TestServer::start();
    const CLASSES: &str = "/apis/node.k8s.io/v1/runtimeclasses";
    let class = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "kata"}, "handler": "kata-fc",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
        "scheduling": {"nodeSelector": {"runtime": "kata"},
            "tolerations": [{"key": "runtime", "operator": "Equal", "value": "kata", "effect": "NoSchedule"}]}});
    let (code, body) = s.json("POST", CLASSES, &class);
    assert_eq!(code, 201, "{body}");
    let pod = |name: &str, extra: Value| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"runtimeClassName": "kata", "schedulerName": "none",
                "containers": [{"name": "c", "image": "busybox"}]}});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            p["spec"][k] = v;
        }
        p
    };
    let (code, body) = s.json(
        "POST",
        "/api/v1/namespaces/default/pods",
        &pod("admitted", json!({"nodeSelector": {"disk": "ssd"}})),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["spec"]["overhead"],
        json!({"cpu": "250m", "memory": "120Mi"})
    );
    assert_eq!(
        body["spec"]["nodeSelector"],
        json!({"disk": "ssd", "runtime": "kata"})
    );
    let tolerations = body["spec"]["tolerations"].as_array().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "runtime" && t["value"] == "kata"),
        "{body}"
    );
    for (name, extra, why) in [
        (
            "conflict",
            json!({"nodeSelector": {"runtime": "runc"}}),
            "conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; pod.spec.nodeSelector[runtime] = runc",
        ),
        (
            "other-overhead",
            json!({"overhead": {"cpu": "1"}}),
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
    ] {
        let (code, body) = s.json("POST", "/api/v1/namespaces/default/pods", &pod(name, extra));
        assert_eq!(code, 403, "{body}");
        assert_eq!(message(&body), format!("pods \"{name}\" is forbidden: {why}"));
    }
    let mut bare = pod("no-class", json!({"overhead": {"cpu": "1"}}));
    bare["spec"]
        .as_object_mut()
        .unwrap()
        .remove("runtimeClassName");
    let (code, body) = s.json("POST", "/api/v1/namespaces/default/pods", &bare);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "pods \"no-class\" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    );
    // The handler is immutable; a handler must be a DNS label.
    let (code, body) = merge(&s, &format!("{CLASSES}/kata"), json!({"handler": "runsc"}));
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("handler: Invalid value: \"runsc\": field is immutable"),
        "{body}"
    );
    let mut bad = class.clone();
    bad["metadata"]["name"] = json!("bad");
    bad["handler"] = json!("Not_A_Label");
    let (code, body) = s.json("POST", CLASSES, &bad);
    assert_eq!(code, 422, "{body}");
    // kubectl lists them with their handler.
    let (ok, out, err) = common::kubectl(&s, &["get", "runtimeclasses"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("NAME   HANDLER   AGE") && out.contains("kata   kata-fc"),
        "{out}"
    );
}

#[test]
fn claims_are_held_to_limit_ranges_and_storage_quotas() {
    let s = TestServer::start();
    let range = json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "claims"},
        "spec": {"limits": [{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]}});
    assert_eq!(
        s.json("POST", "/api/v1/namespaces/default/limitranges", &range)
            .0,
        201
    );
    let (code, body) = s.json("POST", CLAIMS, &claim("tiny", "500Mi", None));
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "persistentvolumeclaims \"tiny\" is forbidden: minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
    );
    let (code, body) = s.json("POST", CLAIMS, &claim("huge", "20Gi", None));
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "persistentvolumeclaims \"huge\" is forbidden: maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"
    );
    // Storage quotas: all classes, and the default class's own.
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "disk"},
        "spec": {"hard": {"requests.storage": "8Gi",
            "local-path.storageclass.storage.k8s.io/persistentvolumeclaims": "2"}}});
    assert_eq!(
        s.json("POST", "/api/v1/namespaces/default/resourcequotas", &quota)
            .0,
        201
    );
    assert_eq!(s.json("POST", CLAIMS, &claim("a", "5Gi", None)).0, 201);
    let (code, body) = s.json("POST", CLAIMS, &claim("b", "4Gi", None));
    assert_eq!(code, 403, "{body}");
    assert!(
        message(&body).contains("exceeded quota: disk, requested: requests.storage=4Gi, used: requests.storage=5Gi, limited: requests.storage=8Gi"),
        "{body}"
    );
    assert_eq!(s.json("POST", CLAIMS, &claim("b", "2Gi", None)).0, 201);
    let (code, body) = s.json("POST", CLAIMS, &claim("c", "1Gi", None));
    assert_eq!(code, 403, "{body}");
    assert!(
        message(&body).contains("local-path.storageclass.storage.k8s.io/persistentvolumeclaims"),
        "{body}"
    );
}

#[test]
fn updates_are_held_to_quotas_and_claims_grow_only_where_their_class_allows() {
    let s = TestServer::start();
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "ports"},
        "spec": {"hard": {"services.nodeports": "0", "services.loadbalancers": "0"}}});
    assert_eq!(
        s.json("POST", "/api/v1/namespaces/default/resourcequotas", &quota)
            .0,
        201
    );
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    assert_eq!(
        s.json("POST", "/api/v1/namespaces/default/services", &svc)
            .0,
        201
    );
    let (code, body) = merge(
        &s,
        "/api/v1/namespaces/default/services/web",
        json!({"spec": {"type": "NodePort"}}),
    );
    assert_eq!(code, 403, "{body}");
    assert!(
        message(&body).starts_with("services \"web\" is forbidden: exceeded quota: ports"),
        "{body}"
    );

    // A bound claim: growing needs allowVolumeExpansion; shrinking is refused; an unbound
    // claim's request is fixed.
    let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "growable"}, "provisioner": "example.com/none", "allowVolumeExpansion": true});
    assert_eq!(
        s.json("POST", "/apis/storage.k8s.io/v1/storageclasses", &class)
            .0,
        201
    );
    assert_eq!(
        s.json("POST", CLAIMS, &claim("pending", "1Gi", Some("local-path")))
            .0,
        201
    );
    let (code, body) = merge(
        &s,
        &format!("{CLAIMS}/pending"),
        json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
    );
    assert_eq!(code, 422, "an unbound claim's request is fixed: {body}");
    // Claims bound to volumes made by hand (the binder binds them).
    for (name, class) in [("fixed", "local-path"), ("grows", "growable")] {
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("pv-{name}")},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": class, "hostPath": {"path": format!("/tmp/skiff-test-{name}")},
                "claimRef": {"namespace": "default", "name": name}}});
        assert_eq!(s.json("POST", "/api/v1/persistentvolumes", &pv).0, 201);
        let mut c = claim(name, "1Gi", Some(class));
        c["spec"]["volumeName"] = json!(format!("pv-{name}"));
        assert_eq!(s.json("POST", CLAIMS, &c).0, 201);
    }
    common::eventually(20, "the claims to be bound", || {
        ["fixed", "grows"]
            .iter()
            .all(|n| s.http("GET", &format!("{CLAIMS}/{n}"), None).1["status"]["phase"] == "Bound")
            .then_some(())
    });
    let (code, body) = merge(
        &s,
        &format!("{CLAIMS}/fixed"),
        json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "persistentvolumeclaims \"fixed\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
    );
    let (code, body) = merge(
        &s,
        &format!("{CLAIMS}/grows"),
        json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = merge(
        &s,
        &format!("{CLAIMS}/grows"),
        json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("field can not be less than previous value"),
        "{body}"
    );
}
