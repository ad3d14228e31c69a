//! In-pod API access with the real `kubectl`, real busybox containers, real RBAC and the
//! node's real iptables service proxy: a pod's ServiceAccount token, CA and namespace are
//! projected at /var/run/secrets/kubernetes.io/serviceaccount, it finds the API through
//! KUBERNETES_SERVICE_HOST/PORT (the `kubernetes` Service in `default`), lists pods as its
//! `view` RoleBinding allows and is refused with 403 beyond it; with
//! `automountServiceAccountToken: false` the directory is absent; the Python `kubernetes`
//! client in a pod lists with `load_incluster_config()` and gets 403 beyond its binding.
//! Needs root, /bin/busybox, kubectl and the test virtual environment first on PATH.
//!
//! The pod's client is the host's `curl` (with the shared libraries `ldd` names, copied into
//! an image layer) verifying the API's certificate with the projected ca.crt: busybox
//! `wget` cannot verify against a CA file, and its TLS client sends no
//! signature_algorithms extension, which rustls requires, so it cannot reach the API at all.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Output;
use std::time::Duration;

use api::client::Client;
use api::core::Pod;
use common::{free_port, wait_for};

const IMAGE: &str = "skiff.test/sa:v1";
/// A service range of its own, so that the Service rules this node programs cannot be
/// mistaken for another server's.
const SERVICE_CIDR: &str = "10.211.0.0/16";
const API_SERVICE_IP: &str = "10.211.0.1";

use common::NodeServer as Server;

impl Server {
    fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        common::run_kubectl(&self.kubeconfig(), args, stdin)
    }

    fn ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A layer with /usr/bin/curl and every shared library it loads, at their host paths.
fn curl_layer() -> Vec<u8> {
    let ldd = std::process::Command::new("ldd")
        .arg("/usr/bin/curl")
        .output()
        .expect("ldd /usr/bin/curl (the test needs the host's curl)");
    assert!(ldd.status.success(), "ldd: {}", text(&ldd.stderr));
    let mut files = vec!["/usr/bin/curl".to_string()];
    for line in text(&ldd.stdout).lines() {
        // `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`
        let path = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        files.extend(path.map(String::from));
    }
    let mut b = tar::Builder::new(Vec::new());
    let mut dirs = std::collections::BTreeSet::new();
    for f in &files {
        let rel = f.trim_start_matches('/');
        let mut parent = std::path::Path::new(rel).parent();
        let mut chain = Vec::new();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            chain.push(p.to_path_buf());
            parent = p.parent();
        }
        for d in chain.into_iter().rev() {
            if dirs.insert(d.clone()) {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                h.set_uid(0);
                h.set_gid(0);
                h.set_mtime(0);
                b.append_data(&mut h, format!("{}/", d.display()), &[][..])
                    .unwrap();
            }
        }
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o755);
        h.set_size(data.len() as u64);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        b.append_data(&mut h, rel, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

fn start() -> (Server, Client) {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![image_util::lower_layer_tar(), curl_layer()],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, IMAGE);
    common::import_image(&archive, &dir.path().join("agent"));
    let node = format!("sa-{}", std::process::id());
    let cgroup_parent = format!("skiff-sa-{}", std::process::id());
    let port = free_port();
    // Listening on every address (pods reach the API through the host's address) and with
    // the service proxy on, unlike the other node servers of the tests.
    let child = std::process::Command::new(common::skiff_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", &format!("0.0.0.0:{port}")])
        .args(["--node-name", &node])
        .args(["--cgroup-parent", &cgroup_parent, "--agent-port", "0"])
        .args(["--service-cidr", SERVICE_CIDR])
        .args(["--disable-dns", "--disable-ingress"])
        .arg("--agent-run-dir")
        .arg(run.path())
        .env("SKIFF_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start skiff server");
    let server = Server {
        child,
        dir,
        run,
        cgroup_parent,
    };
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);
    (server, client)
}

fn wait_finished(client: &Client, ns: &str, name: &str) -> Pod {
    wait_for(
        &format!("pod {ns}/{name} to finish"),
        Duration::from_secs(120),
        || {
            let p: Pod = smol::block_on(client.get(ns, name)).ok()?;
            matches!(
                p.status.phase.as_deref(),
                Some("Succeeded") | Some("Failed")
            )
            .then_some(p)
        },
    )
}

const READER_SCRIPT: &str = r#"
D=/var/run/secrets/kubernetes.io/serviceaccount
NS=$(cat $D/namespace)
echo "FILES $(ls $D | tr '\n' ' ')"
echo "NAMESPACE $NS"
echo "HOST $KUBERNETES_SERVICE_HOST PORT $KUBERNETES_SERVICE_PORT HTTPS $KUBERNETES_SERVICE_PORT_HTTPS LINK $KUBERNETES_PORT_443_TCP"
API=https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
get() { /usr/bin/curl -sS --cacert $D/ca.crt -H "Authorization: Bearer $1" "$API$2"; }
code() { /usr/bin/curl -sS -o /dev/null -w '%{http_code}' --cacert $D/ca.crt -H "Authorization: Bearer $1" "$API$2"; }
T=$(cat $D/token)
echo "LIST-PODS $(code $T /api/v1/namespaces/$NS/pods) $(get $T /api/v1/namespaces/$NS/pods | grep -o '"name":"reader"' | head -1)"
echo "SECRETS $(code $T /api/v1/namespaces/$NS/secrets)"
echo "OTHER-NS $(code $T /api/v1/namespaces/default/pods)"
echo "FORGED $(code forged /api/v1/namespaces/$NS/pods)"
echo "MESSAGE $(get $T /api/v1/namespaces/$NS/secrets | grep -o '"message":"[^,]*')"
"#;

/// The Python `kubernetes` client in a pod: `load_incluster_config()` finds the API through
/// the projected token and CA and the KUBERNETES_SERVICE_* variables.
const PYTHON_SCRIPT: &str = r#"
import json
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_incluster_config()
v1 = client.CoreV1Api()
ns = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
print("PY-HOST", client.Configuration.get_default_copy().host)
print("PY-LIST", ",".join(sorted(p.metadata.name for p in v1.list_namespaced_pod(ns).items)))
for what, call in (("SECRETS", lambda: v1.list_namespaced_secret(ns)),
                   ("OTHER-NS", lambda: v1.list_namespaced_pod("default"))):
    try:
        call()
        print("PY-" + what, "allowed")
    except ApiException as e:
        print("PY-" + what, e.status, json.loads(e.body)["message"])
"#;

/// The virtual environment with the Python `kubernetes` client that scripts/test.sh puts
/// first on PATH (its `bin/python3` next to a `pyvenv.cfg`).
fn python_venv() -> std::path::PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .filter(|d| d.join("python3").exists())
        .filter_map(|d| d.parent().map(std::path::Path::to_path_buf))
        .find(|v| v.join("pyvenv.cfg").exists())
        .expect("a virtual environment with the Python kubernetes client first on PATH (scripts/setup.sh --python makes it)")
}

#[test]
fn pods_reach_the_api_with_their_service_account_token() {
    let (server, client) = start();
    let ns = "sa-test";
    server.ok(&["create", "namespace", ns], None);
    server.ok(&["create", "serviceaccount", "reader", "-n", ns], None);
    server.ok(
        &[
            "create",
            "rolebinding",
            "reader-view",
            "--clusterrole=view",
            "--serviceaccount=sa-test:reader",
            "-n",
            ns,
        ],
        None,
    );
    // The kubernetes Service and the CA ConfigMap the pods need.
    let svc = server.ok(
        &[
            "get",
            "service",
            "kubernetes",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.clusterIP} {.spec.ports[0].port} {.spec.ports[0].targetPort}",
        ],
        None,
    );
    assert!(svc.starts_with(&format!("{API_SERVICE_IP} 443 ")), "{svc}");
    wait_for(
        "kube-root-ca.crt in sa-test",
        Duration::from_secs(60),
        || {
            server
                .kubectl(&["get", "configmap", "kube-root-ca.crt", "-n", ns], None)
                .status
                .success()
                .then_some(())
        },
    );

    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: reader
  namespace: {ns}
spec:
  serviceAccountName: reader
  restartPolicy: Never
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {script:?}]
---
apiVersion: v1
kind: Pod
metadata:
  name: no-token
  namespace: {ns}
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "ls /var/run/secrets/kubernetes.io/serviceaccount || echo ABSENT"]
"#,
        script = READER_SCRIPT
    );
    server.ok(&["apply", "-f", "-"], Some(manifest.as_bytes()));

    // The admission's volume and mount, as Kubernetes adds them.
    let vol = server.ok(
        &[
            "get",
            "pod",
            "reader",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.volumes[0].name}|{.spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds}|{.spec.volumes[0].projected.sources[1].configMap.name}|{.spec.volumes[0].projected.sources[2].downwardAPI.items[0].fieldRef.fieldPath}|{.spec.containers[0].volumeMounts[0].mountPath}",
        ],
        None,
    );
    assert!(vol.starts_with("kube-api-access-"), "{vol}");
    assert!(
        vol.ends_with("|3607|kube-root-ca.crt|metadata.namespace|/var/run/secrets/kubernetes.io/serviceaccount"),
        "{vol}"
    );
    let none = server.ok(
        &[
            "get",
            "pod",
            "no-token",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.volumes}",
        ],
        None,
    );
    assert_eq!(none.trim(), "", "no volume without automount");

    let reader = wait_finished(&client, ns, "reader");
    let logs = server.ok(&["logs", "reader", "-n", ns], None);
    assert_eq!(reader.status.phase.as_deref(), Some("Succeeded"), "{logs}");
    assert!(logs.contains("FILES ca.crt namespace token"), "{logs}");
    assert!(logs.contains("NAMESPACE sa-test"), "{logs}");
    assert!(
        logs.contains(&format!(
            "HOST {API_SERVICE_IP} PORT 443 HTTPS 443 LINK tcp://{API_SERVICE_IP}:443"
        )),
        "{logs}"
    );
    assert!(logs.contains("LIST-PODS 200 \"name\":\"reader\""), "{logs}");
    assert!(logs.contains("SECRETS 403"), "{logs}");
    assert!(logs.contains("OTHER-NS 403"), "{logs}");
    assert!(logs.contains("FORGED 401"), "{logs}");
    assert!(
        logs.contains(r#"secrets is forbidden: User \"system:serviceaccount:sa-test:reader\" cannot list resource \"secrets\" in API group \"\" in the namespace \"sa-test\""#),
        "{logs}"
    );

    let no_token = wait_finished(&client, ns, "no-token");
    let logs = server.ok(&["logs", "no-token", "-n", ns], None);
    assert_eq!(
        no_token.status.phase.as_deref(),
        Some("Succeeded"),
        "{logs}"
    );
    assert!(logs.contains("ABSENT"), "{logs}");

    // The Python client inside a pod. The image has no Python: the host's /usr (Debian's
    // python3 and its standard library) and the test's virtual environment are mounted
    // read-only, which needs hostPath and so a namespace that Pod Security lets have it.
    let venv = python_venv();
    let venv = venv.display();
    let py_ns = "sa-python";
    server.ok(&["create", "namespace", py_ns], None);
    server.ok(
        &[
            "label",
            "namespace",
            py_ns,
            "pod-security.kubernetes.io/enforce=privileged",
        ],
        None,
    );
    server.ok(&["create", "serviceaccount", "py", "-n", py_ns], None);
    server.ok(
        &[
            "create",
            "rolebinding",
            "py-view",
            "--clusterrole=view",
            "--serviceaccount=sa-python:py",
            "-n",
            py_ns,
        ],
        None,
    );
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: python
  namespace: {py_ns}
spec:
  serviceAccountName: py
  restartPolicy: Never
  containers:
  - name: main
    image: {IMAGE}
    command: ["{venv}/bin/python3", "-c", {script:?}]
    volumeMounts:
    - {{name: usr, mountPath: /usr, readOnly: true}}
    - {{name: lib, mountPath: /lib, readOnly: true}}
    - {{name: lib64, mountPath: /lib64, readOnly: true}}
    - {{name: venv, mountPath: "{venv}", readOnly: true}}
  volumes:
  - {{name: usr, hostPath: {{path: /usr, type: Directory}}}}
  - {{name: lib, hostPath: {{path: /lib}}}}
  - {{name: lib64, hostPath: {{path: /lib64}}}}
  - {{name: venv, hostPath: {{path: "{venv}", type: Directory}}}}
"#,
        script = PYTHON_SCRIPT
    );
    server.ok(&["apply", "-f", "-"], Some(manifest.as_bytes()));
    let python = wait_finished(&client, py_ns, "python");
    let logs = server.ok(&["logs", "python", "-n", py_ns], None);
    assert_eq!(python.status.phase.as_deref(), Some("Succeeded"), "{logs}");
    assert!(
        logs.contains(&format!("PY-HOST https://{API_SERVICE_IP}:443")),
        "{logs}"
    );
    assert!(logs.contains("PY-LIST python\n"), "{logs}");
    assert!(
        logs.contains(r#"PY-SECRETS 403 secrets is forbidden: User "system:serviceaccount:sa-python:py" cannot list resource "secrets" in API group "" in the namespace "sa-python""#),
        "{logs}"
    );
    assert!(
        logs.contains(r#"PY-OTHER-NS 403 pods is forbidden: User "system:serviceaccount:sa-python:py" cannot list resource "pods" in API group "" in the namespace "default""#),
        "{logs}"
    );
}
