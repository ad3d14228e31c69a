//! Services against a real `skiff server`: ClusterIP and NodePort allocation (with the 422s
//! Kubernetes answers), headless Services, and the Endpoints controller with pods whose status
//! the test sets (no agent runs here).

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{json, Value};

const SVCS: &str = "/api/v1/namespaces/default/services";

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn svc(name: &str, extra: Value) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80}]}
    });
    if let (Some(spec), Some(extra)) = (s["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    s
}

fn create(s: &TestServer, body: Value) -> (u16, Value) {
    s.json("POST", SVCS, &body)
}

fn cause(v: &Value) -> (String, String) {
    let c = &v["details"]["causes"][0];
    (
        c["field"].as_str().unwrap_or("").to_string(),
        c["message"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn cluster_ips_and_node_ports_are_allocated_and_checked() {
    let s = TestServer::start_with(&[
        "--service-cidr",
        "10.96.0.0/24",
        "--service-node-port-range",
        "30000-30009",
    ]);
    let (code, a) = create(&s, svc("a", json!({})));
    assert_eq!(code, 201, "{a}");
    let ip = a["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_string();
    assert!(ip.starts_with("10.96.0."), "{ip}");
    assert_eq!(a["spec"]["clusterIPs"], json!([ip]));
    assert_eq!(a["spec"]["ipFamilies"], json!(["IPv4"]));

    let (code, b) = create(&s, svc("b", json!({"clusterIP": "10.96.0.10"})));
    assert_eq!(code, 201, "{b}");
    assert_eq!(b["spec"]["clusterIP"], "10.96.0.10");

    let (code, dup) = create(&s, svc("dup", json!({"clusterIP": "10.96.0.10"})));
    assert_eq!(code, 422, "{dup}");
    let (field, msg) = cause(&dup);
    assert_eq!(field, "spec.clusterIPs");
    assert!(msg.contains("provided IP is already allocated"), "{msg}");

    let (code, out) = create(&s, svc("out", json!({"clusterIP": "10.43.0.10"})));
    assert_eq!(code, 422, "{out}");
    assert!(
        cause(&out).1.contains(
            "provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/24"
        ),
        "{out}"
    );

    let (code, h) = create(&s, svc("headless", json!({"clusterIP": "None"})));
    assert_eq!(code, 201, "{h}");
    assert_eq!(h["spec"]["clusterIP"], "None");

    // NodePorts: an explicit one, an allocated one, a conflict, one out of range.
    let (code, np) = create(
        &s,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "np"},
               "spec": {"type": "NodePort", "ports": [
                   {"name": "a", "port": 80, "nodePort": 30003},
                   {"name": "b", "port": 81}]}}),
    );
    assert_eq!(code, 201, "{np}");
    assert_eq!(np["spec"]["ports"][0]["nodePort"], 30003);
    let second = np["spec"]["ports"][1]["nodePort"]
        .as_i64()
        .expect("allocated");
    assert!((30000..=30009).contains(&second) && second != 30003);
    let (code, clash) = create(
        &s,
        svc(
            "clash",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30003}]}),
        ),
    );
    assert_eq!(code, 422, "{clash}");
    let (field, msg) = cause(&clash);
    assert_eq!(field, "spec.ports[0].nodePort");
    assert!(msg.contains("provided port is already allocated"), "{msg}");
    let (code, far) = create(
        &s,
        svc(
            "far",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30500}]}),
        ),
    );
    assert_eq!(code, 422, "{far}");
    assert!(cause(&far).1.contains("30000-30009"), "{far}");

    // A PUT without clusterIP keeps the allocated one; changing it is refused.
    let mut put = svc("a", json!({}));
    put["metadata"]["resourceVersion"] = a["metadata"]["resourceVersion"].clone();
    let (code, kept) = s.json("PUT", &format!("{SVCS}/a"), &put);
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["clusterIP"], json!(ip));
    // Another address than the allocated one (allocation is random within the range).
    let other = if ip == "10.96.0.99" {
        "10.96.0.98"
    } else {
        "10.96.0.99"
    };
    let mut put = svc("a", json!({"clusterIP": other}));
    put["metadata"]["resourceVersion"] = kept["metadata"]["resourceVersion"].clone();
    let (code, changed) = s.json("PUT", &format!("{SVCS}/a"), &put);
    assert_eq!(code, 422, "{changed}");
    // Updating the NodePort Service keeps its ports.
    let (code, np2) = s.json(
        "PUT",
        &format!("{SVCS}/np"),
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "np"},
                "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}}),
    );
    assert_eq!(code, 200, "{np2}");
    assert_eq!(np2["spec"]["ports"], np["spec"]["ports"]);

    // Deleting releases: the address and the port can be taken again.
    let (code, _) = s.json("DELETE", &format!("{SVCS}/b"), &json!({}));
    assert_eq!(code, 200);
    let (code, _) = s.json("DELETE", &format!("{SVCS}/np"), &json!({}));
    assert_eq!(code, 200);
    let (code, again) = create(
        &s,
        svc(
            "again",
            json!({"clusterIP": "10.96.0.10", "type": "NodePort", "ports": [{"port": 80, "nodePort": 30003}]}),
        ),
    );
    assert_eq!(code, 201, "{again}");

    // Concurrent creates never share an address: fill the rest of the /24 in parallel.
    let client = s.client();
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let c = client.clone();
            std::thread::spawn(move || {
                let body = serde_json::to_vec(&svc(&format!("many-{i}"), json!({}))).expect("json");
                let r = smol::block_on(c.request(
                    "POST",
                    SVCS,
                    Some(("application/json", body)),
                    "application/json",
                ))
                .expect("request");
                assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
                let v: Value = serde_json::from_slice(&r.body).expect("json");
                v["spec"]["clusterIP"].as_str().expect("ip").to_string()
            })
        })
        .collect();
    let ips: std::collections::BTreeSet<String> = tasks
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(ips.len(), 40);
}

fn pod(name: &str, port: i32) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": "web"}},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
                    "ports": [{"name": "http", "containerPort": port}]}]}})
}

fn set_status(s: &TestServer, name: &str, ip: &str, ready: bool) {
    let (code, v) = s.http(
        "PATCH",
        &format!("/api/v1/namespaces/default/pods/{name}/status"),
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&json!({"status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
            .expect("json"),
        )),
    );
    assert_eq!(code, 200, "{v}");
}

fn endpoints(s: &TestServer, name: &str) -> Option<Value> {
    let (code, v) = s.http(
        "GET",
        &format!("/api/v1/namespaces/default/endpoints/{name}"),
        None,
    );
    (code == 200).then_some(v)
}

/// (port -> (ready IPs, not-ready IPs)) of an Endpoints object.
fn summary(e: &Value) -> Vec<(i64, Vec<String>, Vec<String>)> {
    let ips = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["ip"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: Vec<_> = e["subsets"]
        .as_array()
        .map(|subs| {
            subs.iter()
                .map(|sub| {
                    (
                        sub["ports"][0]["port"].as_i64().unwrap_or(0),
                        ips(&sub["addresses"]),
                        ips(&sub["notReadyAddresses"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn endpoints_follow_pods() {
    let s = TestServer::start();
    let (code, web) = create(
        &s,
        svc(
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
        ),
    );
    assert_eq!(code, 201, "{web}");
    assert!(web["spec"]["clusterIP"]
        .as_str()
        .expect("ip")
        .starts_with("10.43."));
    // Endpoints exist (empty) as soon as the Service does.
    wait_for("empty endpoints", Duration::from_secs(10), || {
        endpoints(&s, "web")
    });

    for (name, port) in [("a", 8080), ("b", 8080), ("c", 9090), ("d", 8080)] {
        let (code, v) = s.json("POST", "/api/v1/namespaces/default/pods", &pod(name, port));
        assert_eq!(code, 201, "{v}");
    }
    set_status(&s, "a", "10.42.0.5", true);
    set_status(&s, "b", "10.42.0.6", false);
    set_status(&s, "c", "10.42.0.7", true);
    // d has no IP yet: not listed.
    let want = vec![
        (
            8080,
            vec!["10.42.0.5".to_string()],
            vec!["10.42.0.6".to_string()],
        ),
        (9090, vec!["10.42.0.7".to_string()], vec![]),
    ];
    let e = wait_for("endpoints of a, b, c", Duration::from_secs(10), || {
        endpoints(&s, "web").filter(|e| summary(e) == want)
    });
    let sub = &e["subsets"][0];
    assert_eq!(sub["ports"][0]["name"], "http");
    assert_eq!(sub["ports"][0]["protocol"], "TCP");
    assert_eq!(sub["addresses"][0]["nodeName"], "n1");
    assert_eq!(sub["addresses"][0]["targetRef"]["kind"], "Pod");
    assert_eq!(sub["addresses"][0]["targetRef"]["name"], "a");

    // b becomes ready; a is deleted (bound, so it terminates gracefully: out of the Endpoints at once).
    set_status(&s, "b", "10.42.0.6", true);
    let (code, _) = s.json("DELETE", "/api/v1/namespaces/default/pods/a", &json!({}));
    assert_eq!(code, 200);
    let want = vec![
        (8080, vec!["10.42.0.6".to_string()], vec![]),
        (9090, vec!["10.42.0.7".to_string()], vec![]),
    ];
    wait_for("b ready, a gone", Duration::from_secs(10), || {
        endpoints(&s, "web").filter(|e| summary(e) == want)
    });

    // A Service without a selector keeps the Endpoints written by hand.
    let (code, _) = create(&s, svc("manual", json!({})));
    assert_eq!(code, 201);
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/endpoints",
        &json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
                "subsets": [{"addresses": [{"ip": "192.0.2.1"}], "ports": [{"name": "http", "port": 80}]}]}),
    );
    assert_eq!(code, 201, "{v}");
    std::thread::sleep(Duration::from_millis(500));
    let manual = endpoints(&s, "manual").expect("manual endpoints");
    assert_eq!(manual["subsets"][0]["addresses"][0]["ip"], "192.0.2.1");

    // The Endpoints go with their Service.
    let (code, _) = s.json("DELETE", &format!("{SVCS}/web"), &json!({}));
    assert_eq!(code, 200);
    wait_for("endpoints removed", Duration::from_secs(10), || {
        endpoints(&s, "web").is_none().then_some(())
    });
}

/// Per slice: its ports, and (address, ready, serving, terminating) per endpoint.
type SliceSummary = Vec<(Vec<i64>, Vec<(String, bool, bool, bool)>)>;

/// The EndpointSlices of Service `name`: (ports, [(address, ready, serving, terminating)]) per
/// slice, sorted, and the slices themselves.
fn slices(s: &TestServer, name: &str) -> (SliceSummary, Vec<Value>) {
    let (code, v) = s.http(
        "GET",
        &format!(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name%3D{name}"
        ),
        None,
    );
    assert_eq!(code, 200, "{v}");
    let items = v["items"].as_array().cloned().unwrap_or_default();
    let flag = |c: &Value, k: &str| c[k].as_bool().unwrap_or(false);
    let mut out: Vec<_> = items
        .iter()
        .map(|e| {
            let ports = e["ports"]
                .as_array()
                .map(|p| p.iter().filter_map(|p| p["port"].as_i64()).collect())
                .unwrap_or_default();
            let eps = e["endpoints"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|ep| {
                            let c = &ep["conditions"];
                            (
                                ep["addresses"][0].as_str().unwrap_or("").to_string(),
                                flag(c, "ready"),
                                flag(c, "serving"),
                                flag(c, "terminating"),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (ports, eps)
        })
        .collect();
    out.sort();
    (out, items)
}

#[test]
fn endpoint_slices_follow_pods_and_mirror_hand_made_endpoints() {
    let s = TestServer::start();
    // The API's own Service has its slice from the server, as kube-apiserver writes it.
    let (kube, _) = wait_for("the kubernetes slice", Duration::from_secs(10), || {
        let got = slices(&s, "kubernetes");
        (!got.0.is_empty()).then_some(got)
    });
    assert_eq!(kube[0].1.len(), 1);
    assert!(kube[0].1[0].1, "ready");
    let (code, web) = create(
        &s,
        svc(
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
        ),
    );
    assert_eq!(code, 201, "{web}");
    // A Service that selects no pod yet has one empty placeholder slice.
    let (_, items) = wait_for("the placeholder slice", Duration::from_secs(10), || {
        let got = slices(&s, "web");
        (got.0 == vec![(vec![], vec![])]).then_some(got)
    });
    let slice = &items[0];
    assert_eq!(slice["addressType"], "IPv4");
    assert!(slice["metadata"]["name"]
        .as_str()
        .expect("name")
        .starts_with("web-"));
    let labels = &slice["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/service-name"], "web");
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    let owner = &slice["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Service"), Some(true))
    );
    assert_eq!(owner["uid"], web["metadata"]["uid"]);

    for (name, port) in [("a", 8080), ("b", 8080), ("c", 9090)] {
        let (code, v) = s.json("POST", "/api/v1/namespaces/default/pods", &pod(name, port));
        assert_eq!(code, 201, "{v}");
    }
    set_status(&s, "a", "10.42.0.5", true);
    set_status(&s, "b", "10.42.0.6", false);
    set_status(&s, "c", "10.42.0.7", true);
    let t = |ip: &str, r, sv, term| (ip.to_string(), r, sv, term);
    let want = vec![
        (
            vec![8080],
            vec![
                t("10.42.0.5", true, true, false),
                t("10.42.0.6", false, false, false),
            ],
        ),
        (vec![9090], vec![t("10.42.0.7", true, true, false)]),
    ];
    let (_, items) = wait_for("slices of a, b, c", Duration::from_secs(10), || {
        let got = slices(&s, "web");
        (got.0 == want).then_some(got)
    });
    let a = items
        .iter()
        .flat_map(|i| i["endpoints"].as_array().cloned().unwrap_or_default())
        .find(|e| e["addresses"][0] == "10.42.0.5")
        .expect("a's endpoint");
    assert_eq!(a["nodeName"], "n1");
    assert_eq!(a["targetRef"]["kind"], "Pod");
    assert_eq!(a["targetRef"]["name"], "a");
    // The Endpoints controller's own Endpoints are not mirrored.
    let e = endpoints(&s, "web").expect("endpoints");
    assert_eq!(
        e["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );

    // kubectl reads them as it prints them.
    let (ok, out, err) = common::kubectl(
        &s,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ],
    );
    assert!(ok, "{err}");
    let header = out.lines().next().unwrap_or("");
    assert!(
        header.starts_with("NAME") && header.contains("ADDRESSTYPE   PORTS   ENDPOINTS"),
        "{out}"
    );
    assert!(
        out.contains("IPv4          8080    10.42.0.5,10.42.0.6"),
        "{out}"
    );

    // A Service without a selector gets its hand-made Endpoints mirrored.
    let (code, _) = create(&s, svc("manual", json!({})));
    assert_eq!(code, 201);
    let (code, v) = s.json(
        "POST",
        "/api/v1/namespaces/default/endpoints",
        &json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
                "subsets": [{"addresses": [{"ip": "192.0.2.1"}], "notReadyAddresses": [{"ip": "192.0.2.2"}],
                             "ports": [{"name": "http", "port": 80}]}]}),
    );
    assert_eq!(code, 201, "{v}");
    let want = vec![(
        vec![80],
        vec![
            t("192.0.2.1", true, false, false),
            t("192.0.2.2", false, false, false),
        ],
    )];
    let (_, items) = wait_for("the mirrored slice", Duration::from_secs(10), || {
        let got = slices(&s, "manual");
        (got.0 == want).then_some(got)
    });
    assert_eq!(
        items[0]["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslicemirroring-controller.k8s.io"
    );
    assert_eq!(
        items[0]["metadata"]["ownerReferences"][0]["kind"],
        "Endpoints"
    );

    // The slices go with their Service.
    let (code, _) = s.json("DELETE", &format!("{SVCS}/web"), &json!({}));
    assert_eq!(code, 200);
    wait_for("slices removed", Duration::from_secs(10), || {
        slices(&s, "web").1.is_empty().then_some(())
    });
}
