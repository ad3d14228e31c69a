//! kubectl's generator commands (`kubectl create deployment|configmap|secret|service|namespace`,
//! `kubectl run`, `kubectl expose`) against a real server. The typed ones send protobuf bodies
//! and ask for protobuf answers. Each stored object must be what kube-apiserver 1.32 stores for
//! the same command: kubectl's object plus Kubernetes' defaults (pkg/apis/*/v1/defaults.go).
//! Only what the server assigns (uid, resourceVersion, creationTimestamp, addresses and node
//! ports) is compared by shape rather than by value.

mod common;

use base64::Engine as _;
use common::{kubectl, TestServer};
use serde_json::{json, Value};

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The stored object, with what the server assigns checked and removed.
fn stored(s: &TestServer, path: &str) -> Value {
    let (code, mut v) = s.http("GET", path, None);
    assert_eq!(code, 200, "GET {path}: {v}");
    let meta = v["metadata"].as_object_mut().expect("metadata");
    for field in ["uid", "resourceVersion", "creationTimestamp"] {
        let value = meta.remove(field);
        assert!(
            value
                .as_ref()
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty()),
            "{path}: metadata.{field} is {value:?}"
        );
    }
    // As kube-apiserver does, the create is recorded for kubectl's manager (kubectl-create,
    // kubectl-run, kubectl-expose), beside the controllers' and the scheduler's own writes:
    // checked, then removed (their times are the server's).
    if let Some(entries) = meta.remove("managedFields") {
        let entries = entries.as_array().cloned().unwrap_or_default();
        let manager = |e: &Value| e["manager"].as_str().unwrap_or("").to_string();
        let kubectl: Vec<_> = entries
            .iter()
            .filter(|e| manager(e).starts_with("kubectl-"))
            .collect();
        assert_eq!(kubectl.len(), 1, "{path}: {entries:?}");
        for e in &entries {
            assert!(
                matches!(
                    manager(e).as_str(),
                    "kube-controller-manager" | "kube-scheduler"
                ) || manager(e).starts_with("kubectl-"),
                "{path}: {e}"
            );
            assert!(
                e["operation"] == "Update"
                    && e["fieldsType"] == "FieldsV1"
                    && e["fieldsV1"].is_object()
                    && e["time"].is_string(),
                "{path}: {e}"
            );
        }
    }
    // skiff sets metadata.generation on every kind; Kubernetes only on the kinds whose spec
    // it tracks (workloads). Known difference, left to the registry: checked, then ignored.
    if !matches!(
        v["kind"].as_str(),
        Some("Deployment" | "ReplicaSet" | "DaemonSet")
    ) {
        let meta = v["metadata"].as_object_mut().expect("metadata");
        assert_eq!(meta.remove("generation"), Some(json!(1)), "{path}");
    }
    if v["kind"] == "Service" {
        let spec = v["spec"].as_object_mut().expect("spec");
        let ip = spec.remove("clusterIP").expect("clusterIP");
        assert!(ip
            .as_str()
            .is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok()));
        assert_eq!(spec.remove("clusterIPs"), Some(json!([ip])));
    }
    v
}

/// Removes and returns a node port that the server allocated.
fn take_node_port(service: &mut Value, index: usize) -> i64 {
    let port = service["spec"]["ports"][index]
        .as_object_mut()
        .and_then(|p| p.remove("nodePort"))
        .and_then(|p| p.as_i64())
        .expect("nodePort");
    assert!((30000..=32767).contains(&port), "nodePort {port}");
    port
}

/// The defaults Kubernetes gives every container of a pod spec.
fn container(name: &str, image: &str, pull: &str, extra: Value) -> Value {
    let mut c = json!({
        "name": name,
        "image": image,
        "imagePullPolicy": pull,
        "resources": {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    });
    if let Value::Object(extra) = extra {
        c.as_object_mut().unwrap().extend(extra);
    }
    c
}

/// The defaults Kubernetes gives a pod template's spec (SetDefaults_PodSpec).
fn template_spec(containers: Value) -> Value {
    json!({
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
    })
}

fn deployment_spec(name: &str, replicas: i64, container: Value) -> Value {
    json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": template_spec(json!([container])),
        },
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
        },
        "revisionHistoryLimit": 10,
        "progressDeadlineSeconds": 600,
    })
}

/// The defaults of a Service of `type_` (SetDefaults_Service, and the single-stack IPv4
/// cluster that skiff is).
fn service_spec(type_: &str, selector: Value, ports: Value) -> Value {
    let mut spec = json!({
        "ports": ports,
        "selector": selector,
        "type": type_,
        "sessionAffinity": "None",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "internalTrafficPolicy": "Cluster",
    });
    if type_ == "NodePort" {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    spec
}

#[test]
fn create_deployment() {
    let s = TestServer::start();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=80",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "deployment",
            "idle",
            "--image=busybox",
            "--replicas=0",
            "--",
            "sleep",
            "3600",
        ],
    );
    let web = stored(&s, "/apis/apps/v1/namespaces/default/deployments/web");
    assert_eq!(web["apiVersion"], "apps/v1");
    assert_eq!(web["kind"], "Deployment");
    assert_eq!(web["metadata"]["name"], "web");
    assert_eq!(web["metadata"]["namespace"], "default");
    assert_eq!(web["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(web["metadata"]["generation"], 1);
    assert_eq!(
        web["spec"],
        deployment_spec(
            "web",
            2,
            container(
                "nginx",
                "nginx:1.27",
                "IfNotPresent",
                json!({"ports": [{"containerPort": 80, "protocol": "TCP"}]})
            )
        )
    );
    // replicas: 0 is kept (a pointer in Kubernetes' types), and the command follows `--`.
    let idle = stored(&s, "/apis/apps/v1/namespaces/default/deployments/idle");
    assert_eq!(
        idle["spec"],
        deployment_spec(
            "idle",
            0,
            container(
                "busybox",
                "busybox",
                "Always",
                json!({"command": ["sleep", "3600"]})
            )
        )
    );
}

#[test]
fn create_configmaps_and_secrets() {
    let s = TestServer::start();
    let dir = s.data_dir().join("files");
    std::fs::create_dir_all(&dir).unwrap();
    let html = "<h1>hello</h1>\n";
    let blob: Vec<u8> = (0..=255u8).collect();
    std::fs::write(dir.join("index.html"), html).unwrap();
    std::fs::write(dir.join("blob.bin"), &blob).unwrap();
    let key = rcgen::generate_simple_self_signed(vec!["web.example".into()]).unwrap();
    let (cert_pem, key_pem) = (key.cert.pem(), key.signing_key.serialize_pem());
    std::fs::write(dir.join("tls.crt"), &cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &key_pem).unwrap();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();

    ok(
        &s,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
            "--from-literal=empty=",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "configmap",
            "site",
            &format!("--from-file={}", path("index.html")),
            &format!("--from-file=blob={}", path("blob.bin")),
        ],
    );
    ok(
        &s,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=user=admin",
            "--from-literal=password=s3cr3t",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "secret",
            "tls",
            "web-tls",
            &format!("--cert={}", path("tls.crt")),
            &format!("--key={}", path("tls.key")),
        ],
    );
    ok(
        &s,
        &[
            "create",
            "secret",
            "docker-registry",
            "regcred",
            "--docker-server=registry.example:5000",
            "--docker-username=robot",
            "--docker-password=hunter2",
            "--docker-email=robot@example.com",
        ],
    );

    let meta = |name: &str| json!({"name": name, "namespace": "default"});
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/configmaps/settings"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("settings"),
               "data": {"mode": "fast", "empty": ""}})
    );
    // Text from a file is data; bytes that are not UTF-8 are binaryData.
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/configmaps/site"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("site"),
               "data": {"index.html": html}, "binaryData": {"blob": b64(&blob)}})
    );
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/secrets/creds"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("creds"), "type": "Opaque",
               "data": {"user": b64(b"admin"), "password": b64(b"s3cr3t")}})
    );
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/secrets/web-tls"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("web-tls"),
               "type": "kubernetes.io/tls",
               "data": {"tls.crt": b64(cert_pem.as_bytes()), "tls.key": b64(key_pem.as_bytes())}})
    );
    let mut regcred = stored(&s, "/api/v1/namespaces/default/secrets/regcred");
    let config = regcred["data"]
        .as_object_mut()
        .and_then(|d| d.remove(".dockerconfigjson"))
        .and_then(|c| {
            base64::engine::general_purpose::STANDARD
                .decode(c.as_str()?)
                .ok()
        })
        .expect(".dockerconfigjson");
    assert_eq!(
        regcred,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("regcred"),
               "type": "kubernetes.io/dockerconfigjson", "data": {}})
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&config).unwrap(),
        json!({"auths": {"registry.example:5000": {
            "username": "robot", "password": "hunter2", "email": "robot@example.com",
            "auth": b64(b"robot:hunter2")}}})
    );
}

#[test]
fn create_services_namespace_run_and_expose() {
    let s = TestServer::start();
    ok(
        &s,
        &[
            "create",
            "service",
            "clusterip",
            "api",
            "--tcp=80:8080",
            "--tcp=443:8443",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "service",
            "nodeport",
            "edge",
            "--tcp=80:8080",
            "--node-port=30080",
        ],
    );
    ok(&s, &["create", "service", "nodeport", "any", "--tcp=81"]);
    ok(&s, &["create", "namespace", "team-a"]);
    ok(
        &s,
        &[
            "run",
            "shell",
            "--image=busybox",
            "--env=GREETING=hi",
            "--port=8080",
            "--restart=Never",
            "--",
            "sleep",
            "3600",
        ],
    );
    ok(&s, &["create", "deployment", "web", "--image=nginx:1.27"]);
    ok(
        &s,
        &[
            "expose",
            "deployment",
            "web",
            "--port=8080",
            "--target-port=80",
            "--name=web-svc",
        ],
    );

    let service = |name: &str, labels: Value, spec: Value| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "default", "labels": labels},
               "spec": spec, "status": {"loadBalancer": {}}})
    };
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/services/api"),
        service(
            "api",
            json!({"app": "api"}),
            service_spec(
                "ClusterIP",
                json!({"app": "api"}),
                json!([
                    {"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080},
                    {"name": "443-8443", "port": 443, "protocol": "TCP", "targetPort": 8443},
                ])
            )
        )
    );
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/services/edge"),
        service(
            "edge",
            json!({"app": "edge"}),
            service_spec(
                "NodePort",
                json!({"app": "edge"}),
                json!([{"name": "80-8080", "nodePort": 30080, "port": 80, "protocol": "TCP",
                        "targetPort": 8080}])
            )
        )
    );
    // Without --node-port the server allocates one; the target port defaults to the port.
    let mut any = stored(&s, "/api/v1/namespaces/default/services/any");
    take_node_port(&mut any, 0);
    assert_eq!(
        any,
        service(
            "any",
            json!({"app": "any"}),
            service_spec(
                "NodePort",
                json!({"app": "any"}),
                json!([{"name": "81", "port": 81, "protocol": "TCP", "targetPort": 81}])
            )
        )
    );
    // `kubectl expose` copies the deployment's labels and uses its selector.
    assert_eq!(
        stored(&s, "/api/v1/namespaces/default/services/web-svc"),
        service(
            "web-svc",
            json!({"app": "web"}),
            service_spec(
                "ClusterIP",
                json!({"app": "web"}),
                json!([{"port": 8080, "protocol": "TCP", "targetPort": 80}])
            )
        )
    );

    assert_eq!(
        stored(&s, "/api/v1/namespaces/team-a"),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    );

    // `kubectl run`: a pod labelled run=<name>. Besides SetDefaults_Pod and SetDefaults_PodSpec,
    // kube-apiserver's DefaultTolerationSeconds admission adds the two tolerations.
    let mut pod = stored(&s, "/api/v1/namespaces/default/pods/shell");
    // The ServiceAccount admission's API access volume, mounted where Kubernetes mounts it.
    let volumes = pod["spec"]
        .as_object_mut()
        .unwrap()
        .remove("volumes")
        .unwrap();
    let access = volumes[0]["name"].as_str().unwrap().to_string();
    assert!(access.starts_with("kube-api-access-"), "{volumes}");
    assert_eq!(
        volumes[0]["projected"]["sources"][0]["serviceAccountToken"],
        json!({"expirationSeconds": 3607, "path": "token"})
    );
    let mounts = pod["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("volumeMounts")
        .unwrap();
    assert_eq!(
        mounts,
        json!([{"name": access, "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );
    assert_eq!(
        pod["metadata"],
        json!({"name": "shell", "namespace": "default", "labels": {"run": "shell"}})
    );
    let mut want = template_spec(json!([container(
        "shell",
        "busybox",
        "Always",
        json!({"args": ["sleep", "3600"], "env": [{"name": "GREETING", "value": "hi"}],
               "ports": [{"containerPort": 8080, "protocol": "TCP"}]})
    )]));
    want["restartPolicy"] = json!("Never");
    want["enableServiceLinks"] = json!(true);
    // The ServiceAccount admission's default, under both names as kube-apiserver shows it.
    want["serviceAccountName"] = json!("default");
    want["serviceAccount"] = json!("default");
    // The Priority admission's values when no PriorityClass is the global default.
    want["priority"] = json!(0);
    want["preemptionPolicy"] = json!("PreemptLowerPriority");
    want["tolerations"] = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ]);
    assert_eq!(pod["spec"], want);
}
