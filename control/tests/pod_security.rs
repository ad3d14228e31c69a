//! Pod Security admission with the machine's real `kubectl`: the baseline default, a
//! namespace that allows privileged pods, warn mode, restricted, and workload templates.

mod common;

use common::{kubectl, TestServer};

/// `kubectl create -f` of `manifest` (YAML); (success, stdout, stderr).
fn create(s: &TestServer, file: &str, manifest: &str) -> (bool, String, String) {
    let path = s.data_dir().join(file);
    std::fs::write(&path, manifest).unwrap();
    kubectl(s, &["create", "-f", path.to_str().unwrap()])
}

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(success, "kubectl {args:?} failed:\n{out}\n{err}");
    out + &err
}

fn privileged_pod(ns: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: priv
  namespace: {ns}
spec:
  hostNetwork: true
  containers:
  - name: c
    image: busybox
    securityContext:
      privileged: true
"
    )
}

#[test]
fn baseline_is_the_default_and_refuses_privileged_pods() {
    let s = TestServer::start();
    let (success, _, err) = create(&s, "priv.yaml", &privileged_pod("default"));
    assert!(!success, "a privileged pod is refused in default");
    assert!(
        err.contains("Error from server (Forbidden): error when creating \"",)
            && err.contains(
                "pods \"priv\" is forbidden: violates PodSecurity \"baseline:latest\": \
             host namespaces (hostNetwork=true), \
             privileged (container \"c\" must not set securityContext.privileged=true)"
            ),
        "{err}"
    );
    let (found, _, _) = kubectl(&s, &["get", "pod", "priv"]);
    assert!(!found, "nothing was stored");

    // The Status itself, as kube-apiserver answers it.
    let (code, status) = s.json(
        "POST",
        "/api/v1/namespaces/default/pods",
        &serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p2"},
            "spec": {"hostPID": true, "containers": [{"name": "c", "image": "busybox"}]}}),
    );
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden", "{status}");
    assert_eq!(
        status["message"],
        "pods \"p2\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostPID=true)"
    );
    assert_eq!(status["details"]["kind"], "pods", "{status}");
    assert_eq!(status["details"]["name"], "p2", "{status}");

    // An ordinary pod is fine.
    let (success, _, err) = create(
        &s,
        "plain.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: plain\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    assert!(success, "{err}");

    // A namespace labelled privileged takes the same pod.
    ok(&s, &["create", "namespace", "ops"]);
    ok(
        &s,
        &[
            "label",
            "namespace",
            "ops",
            "pod-security.kubernetes.io/enforce=privileged",
        ],
    );
    let (success, _, err) = create(&s, "priv-ops.yaml", &privileged_pod("ops"));
    assert!(success, "{err}");

    // Raising the level names the pods already there that break it, and does not judge the
    // pod again while its spec stays.
    let out = ok(
        &s,
        &[
            "label",
            "--overwrite",
            "namespace",
            "ops",
            "pod-security.kubernetes.io/enforce=baseline",
        ],
    );
    assert!(
        out.contains(
            "Warning: existing pods in namespace \"ops\" violate the new PodSecurity enforce level \"baseline:latest\"\n\
             Warning: priv: host namespaces, privileged"
        ),
        "{out}"
    );
    ok(&s, &["label", "pod", "priv", "-n", "ops", "tier=x"]);

    // A system namespace is privileged without a label.
    let (success, _, err) = create(&s, "priv-sys.yaml", &privileged_pod("kube-system"));
    assert!(success, "{err}");
}

#[test]
fn warn_mode_warns_and_restricted_refuses_a_root_pod() {
    let s = TestServer::start();
    ok(&s, &["create", "namespace", "soft"]);
    ok(
        &s,
        &[
            "label",
            "namespace",
            "soft",
            "pod-security.kubernetes.io/enforce=privileged",
            "pod-security.kubernetes.io/warn=baseline",
            "pod-security.kubernetes.io/warn-version=latest",
        ],
    );
    let (success, _, err) = create(&s, "priv.yaml", &privileged_pod("soft"));
    assert!(success, "{err}");
    assert!(
        err.contains(
            "Warning: would violate PodSecurity \"baseline:latest\": \
             host namespaces (hostNetwork=true), \
             privileged (container \"c\" must not set securityContext.privileged=true)"
        ),
        "{err}"
    );

    ok(&s, &["create", "namespace", "strict"]);
    ok(
        &s,
        &[
            "label",
            "namespace",
            "strict",
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    );
    let root = "apiVersion: v1
kind: Pod
metadata:
  name: root
  namespace: strict
spec:
  securityContext:
    runAsUser: 0
  containers:
  - name: c
    image: busybox
";
    let (success, _, err) = create(&s, "root.yaml", root);
    assert!(!success);
    assert!(
        err.contains(
            "pods \"root\" is forbidden: violates PodSecurity \"restricted:latest\": \
             allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             runAsUser=0 (pod must not set runAsUser=0), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        ),
        "{err}"
    );

    // A hardened pod passes restricted.
    let hardened = "apiVersion: v1
kind: Pod
metadata:
  name: hardened
  namespace: strict
spec:
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: c
    image: busybox
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: [ALL]
";
    let (success, _, err) = create(&s, "hardened.yaml", hardened);
    assert!(success, "{err}");
}

#[test]
fn workload_templates_only_warn() {
    let s = TestServer::start();
    let deploy = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      hostPID: true
      containers:
      - name: c
        image: busybox
";
    let (success, _, err) = create(&s, "deploy.yaml", deploy);
    assert!(success, "{err}");
    assert!(
        err.contains(
            "Warning: would violate PodSecurity \"baseline:latest\": host namespaces (hostPID=true)"
        ),
        "{err}"
    );
    let out = ok(&s, &["get", "deployment", "agent", "-o", "name"]);
    assert!(out.contains("deployment.apps/agent"), "{out}");
}
