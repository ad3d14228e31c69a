//! Persistent volumes with the real `kubectl` against `skiff server` with its own node and
//! real busybox containers: the default `local-path` StorageClass, a claim defaulted to it
//! and bound on first consumer, a provisioned directory under the agent's data dir, data that
//! survives the pod's deletion and a restart of the server and its agent, a pod whose claim
//! does not exist staying Pending with kube-scheduler's message, pvc-protection, and the
//! Delete reclaim removing the directory; and a StatefulSet of 3 with volumeClaimTemplates
//! that is deleted and re-created and finds its pods' data, its pods' DNS names published
//! through the headless Service's endpoints, `kubectl rollout status` and `restart`. Needs
//! root, /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use api::client::Client;
use api::core::Pod;
use api::storage::{PersistentVolume, PersistentVolumeClaim};
use common::{free_port, wait_for};

const IMAGE: &str = "skiff.test/storage:v1";

use common::NodeServer as Server;

impl Server {
    fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        common::run_kubectl(&self.kubeconfig(), args, stdin)
    }

    /// kubectl that must succeed; its stdout.
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

fn spawn_server(
    dir: &Path,
    run: &Path,
    port: u16,
    node: &str,
    cgroup_parent: &str,
) -> std::process::Child {
    common::node_server_command(dir, run, port, node, cgroup_parent)
        .spawn()
        .expect("start skiff server")
}

fn start(node: &str, port: u16, tag: &str) -> (Server, Client) {
    image_util::require_root_and_busybox();
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    image_util::write_busybox_archive(&archive, IMAGE, "storage");
    common::import_image(&archive, &dir.path().join("agent"));
    let cgroup_parent = format!("skiff-{tag}-{}", std::process::id());
    let child = spawn_server(dir.path(), run.path(), port, node, &cgroup_parent);
    let server = Server {
        child,
        dir,
        run,
        cgroup_parent,
    };
    let client = common::wait_for_own_node(&server.kubeconfig(), node);
    (server, client)
}

fn pod_manifest(name: &str, claim: &str, command: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {command:?}]
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: {claim}
"#
    )
}

const CLAIM: &str = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 64Mi
"#;

fn get_pod(client: &Client, name: &str) -> Option<Pod> {
    smol::block_on(client.get::<Pod>("default", name)).ok()
}

fn get_claim(client: &Client, name: &str) -> Option<PersistentVolumeClaim> {
    smol::block_on(client.get::<PersistentVolumeClaim>("default", name)).ok()
}

fn wait_succeeded(client: &Client, name: &str) {
    wait_for(
        &format!("pod {name} to succeed"),
        Duration::from_secs(90),
        || {
            let p = get_pod(client, name)?;
            let phase = p.status.phase.as_deref().unwrap_or("");
            assert_ne!(phase, "Failed", "{name} failed: {:#?}", p.status);
            (phase == "Succeeded").then_some(())
        },
    );
}

fn delete_pod(server: &Server, client: &Client, name: &str) {
    server.ok(&["delete", "pod", name, "--wait=false"], None);
    wait_for(
        &format!("pod {name} to go"),
        Duration::from_secs(60),
        || get_pod(client, name).is_none().then_some(()),
    );
}

#[test]
fn local_path_volumes_with_kubectl() {
    let node = format!("storage-{}", std::process::id());
    // The agent stays joined to the server's address: a restart reuses the port.
    let port = free_port();
    let (mut server, client) = start(&node, port, "storage");
    let storage_dir: PathBuf = server.dir.path().join("agent/storage");

    // The default class, as k3s shows it.
    let sc = server.ok(&["get", "sc"], None);
    let row: Vec<&str> = sc
        .lines()
        .nth(1)
        .expect("a class")
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..6],
        [
            "local-path",
            "(default)",
            "rancher.io/local-path",
            "Delete",
            "WaitForFirstConsumer",
            "false"
        ],
        "{sc}"
    );
    let explained = server.ok(&["explain", "pvc.spec.storageClassName"], None);
    assert!(explained.contains("storageClassName"), "{explained}");

    // A claim without a class gets the default one and waits for its first consumer.
    server.ok(&["apply", "-f", "-"], Some(CLAIM.as_bytes()));
    let claim = get_claim(&client, "data").expect("claim");
    assert_eq!(claim.spec.storage_class_name.as_deref(), Some("local-path"));
    assert_eq!(claim.metadata.finalizers, ["kubernetes.io/pvc-protection"]);
    let pending = wait_for("the claim to be Pending", Duration::from_secs(10), || {
        let out = server.ok(&["get", "pvc", "data"], None);
        out.contains("Pending").then_some(out)
    });
    assert!(pending.starts_with("NAME"), "{pending}");
    let events = wait_for(
        "the WaitForFirstConsumer event",
        Duration::from_secs(10),
        || {
            let out = server.ok(
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=data",
                ],
                None,
            );
            out.contains("waiting for first consumer to be created before binding")
                .then_some(out)
        },
    );
    assert!(events.contains("WaitForFirstConsumer"), "{events}");

    // A pod whose claim does not exist stays Pending with kube-scheduler's message.
    server.ok(
        &["apply", "-f", "-"],
        Some(pod_manifest("orphan", "nope", "true").as_bytes()),
    );
    let message = wait_for(
        "the orphan's Unschedulable condition",
        Duration::from_secs(20),
        || {
            let p = get_pod(&client, "orphan")?;
            let c = p
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            c.message.clone()
        },
    );
    assert_eq!(
        message,
        "0/1 nodes are available: persistentvolumeclaim \"nope\" not found."
    );
    assert!(get_pod(&client, "orphan").unwrap().spec.node_name.is_none());

    // The first consumer: the claim is provisioned on its node and bound.
    server.ok(
        &["apply", "-f", "-"],
        Some(pod_manifest("writer", "data", "echo hello from writer > /data/file").as_bytes()),
    );
    wait_succeeded(&client, "writer");
    let claim = get_claim(&client, "data").expect("claim");
    assert_eq!(claim.status.phase.as_deref(), Some("Bound"));
    assert_eq!(
        claim.metadata.annotations["volume.kubernetes.io/selected-node"],
        node
    );
    let pv_name = claim.spec.volume_name.clone().expect("volume name");
    assert_eq!(pv_name, format!("pvc-{}", claim.metadata.uid));
    let pv: PersistentVolume =
        smol::block_on(client.get::<PersistentVolume>("", &pv_name)).expect("pv");
    assert_eq!(pv.status.phase.as_deref(), Some("Bound"));
    assert_eq!(
        pv.spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    let dir = storage_dir.join(format!("{pv_name}_default_data"));
    assert_eq!(
        pv.spec.host_path.as_ref().unwrap().path,
        dir.display().to_string()
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("file")).expect("the file on the node"),
        "hello from writer\n"
    );
    let pvs = server.ok(&["get", "pv"], None);
    assert!(
        pvs.lines().nth(1).is_some_and(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[0] == pv_name
                && f[1] == "64Mi"
                && f[2] == "RWO"
                && f[3] == "Delete"
                && f[4] == "Bound"
                && f[5] == "default/data"
                && f[6] == "local-path"
        }),
        "{pvs}"
    );
    let pvcs = server.ok(&["get", "pvc"], None);
    assert!(
        pvcs.lines().nth(1).is_some_and(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[..6]
                == [
                    "data",
                    "Bound",
                    pv_name.as_str(),
                    "64Mi",
                    "RWO",
                    "local-path",
                ]
        }),
        "{pvcs}"
    );

    // The pod is deleted and another reads the data.
    delete_pod(&server, &client, "writer");
    server.ok(
        &["apply", "-f", "-"],
        Some(pod_manifest("reader", "data", "cat /data/file").as_bytes()),
    );
    wait_succeeded(&client, "reader");
    let logs = server.ok(&["logs", "reader"], None);
    assert_eq!(logs, "hello from writer\n");
    delete_pod(&server, &client, "reader");

    // The server and its agent restart; the data is still there.
    let _ = server.child.kill();
    let _ = server.child.wait();
    server.child = spawn_server(
        server.dir.path(),
        server.run.path(),
        port,
        &node,
        &server.cgroup_parent,
    );
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);
    server.ok(
        &["apply", "-f", "-"],
        Some(pod_manifest("after-restart", "data", "cat /data/file; sleep 3600").as_bytes()),
    );
    wait_for(
        "after-restart to read the file",
        Duration::from_secs(90),
        || {
            let out = server.kubectl(&["logs", "after-restart"], None);
            (text(&out.stdout) == "hello from writer\n").then_some(())
        },
    );

    // pvc-protection: a claim in use stays (Terminating) until its pod is gone.
    server.ok(&["delete", "pvc", "data", "--wait=false"], None);
    std::thread::sleep(Duration::from_secs(2));
    let claim = get_claim(&client, "data").expect("the claim is protected");
    assert!(claim.metadata.deletion_timestamp.is_some());
    let shown = server.ok(&["get", "pvc", "data"], None);
    assert!(shown.contains("Terminating"), "{shown}");
    assert!(dir.join("file").exists());
    delete_pod(&server, &client, "after-restart");
    wait_for("the claim to go", Duration::from_secs(30), || {
        get_claim(&client, "data").is_none().then_some(())
    });

    // Delete reclaim: the volume goes, and the agent removes its directory.
    let gone = (0..60).any(|_| {
        std::thread::sleep(Duration::from_secs(1));
        smol::block_on(client.get::<PersistentVolume>("", &pv_name)).is_err()
    });
    assert!(
        gone,
        "the volume stays: {}",
        text(&server.kubectl(&["get", "pv", "-o", "yaml"], None).stdout)
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());

    // A hostPath volume made by hand, bound at once to a claim of its class (Immediate: the
    // class does not exist), Retain keeping it Released when the claim goes.
    let manual = server.dir.path().join("manual");
    std::fs::create_dir_all(&manual).unwrap();
    std::fs::write(manual.join("file"), "made by hand\n").unwrap();
    let pv = format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: task-pv-volume
spec:
  storageClassName: manual
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  hostPath:
    path: {}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: task-pv-claim
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 100Mi
"#,
        manual.display()
    );
    server.ok(&["apply", "-f", "-"], Some(pv.as_bytes()));
    wait_for("the manual claim to bind", Duration::from_secs(20), || {
        let c = get_claim(&client, "task-pv-claim")?;
        (c.status.phase.as_deref() == Some("Bound")).then_some(())
    });
    let c = get_claim(&client, "task-pv-claim").unwrap();
    assert_eq!(c.spec.volume_name.as_deref(), Some("task-pv-volume"));
    assert_eq!(c.status.capacity["storage"].to_string(), "1Gi");
    server.ok(
        &["apply", "-f", "-"],
        Some(pod_manifest("manual-reader", "task-pv-claim", "cat /data/file").as_bytes()),
    );
    wait_succeeded(&client, "manual-reader");
    assert_eq!(
        server.ok(&["logs", "manual-reader"], None),
        "made by hand\n"
    );
    delete_pod(&server, &client, "manual-reader");
    server.ok(&["delete", "pvc", "task-pv-claim"], None);
    wait_for(
        "the manual volume to be Released",
        Duration::from_secs(20),
        || {
            let v = smol::block_on(client.get::<PersistentVolume>("", "task-pv-volume")).ok()?;
            (v.status.phase.as_deref() == Some("Released")).then_some(())
        },
    );
    assert!(manual.join("file").exists(), "Retain keeps the data");
}

const STATEFUL: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: None
  selector:
    app: web
  ports:
  - port: 80
    name: web
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: skiff.test/sts:v1
        command: ["sh", "-c", "if [ -f /data/id ]; then echo found $(cat /data/id); else hostname > /data/id; echo wrote $(hostname); fi; exec sleep 3600"]
        volumeMounts:
        - name: www
          mountPath: /data
  volumeClaimTemplates:
  - metadata:
      name: www
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 16Mi
"#;

fn logs_of(server: &Server, pod: &str) -> String {
    text(&server.kubectl(&["logs", pod], None).stdout)
}

fn wait_logs(server: &Server, pod: &str, want: &str) {
    let mut last = String::new();
    let ok = (0..90).any(|_| {
        last = logs_of(server, pod);
        if last.trim() == want {
            return true;
        }
        std::thread::sleep(Duration::from_secs(1));
        false
    });
    assert!(ok, "{pod} logs {last:?}, want {want:?}");
}

#[test]
fn statefulset_keeps_its_data_across_re_creation() {
    image_util::require_root_and_busybox();
    let node = format!("sts-{}", std::process::id());
    let dir = tempfile::tempdir().expect("data dir");
    let run = tempfile::tempdir().expect("run dir");
    let archive = dir.path().join("image.tar");
    let image = image_util::build_image(
        vec![
            image_util::lower_layer_tar(),
            image_util::upper_layer_tar("sts"),
        ],
        image_util::host_arch(),
        &["sh"],
    );
    image_util::write_oci_archive(&archive, &image, "skiff.test/sts:v1");
    common::import_image(&archive, &dir.path().join("agent"));
    let cgroup_parent = format!("skiff-sts-{}", std::process::id());
    let child = spawn_server(dir.path(), run.path(), free_port(), &node, &cgroup_parent);
    let server = Server {
        child,
        dir,
        run,
        cgroup_parent,
    };
    let client = common::wait_for_own_node(&server.kubeconfig(), &node);

    server.ok(&["apply", "-f", "-"], Some(STATEFUL.as_bytes()));
    server.ok(&["rollout", "status", "sts/web", "--timeout=120s"], None);
    for i in 0..3 {
        wait_logs(&server, &format!("web-{i}"), &format!("wrote web-{i}"));
    }
    let table = server.ok(&["get", "sts"], None);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..2], ["web", "3/3"], "{table}");
    let pod = get_pod(&client, "web-1").expect("web-1");
    assert_eq!(
        pod.metadata.labels["statefulset.kubernetes.io/pod-name"],
        "web-1"
    );
    assert_eq!(pod.metadata.labels["apps.kubernetes.io/pod-index"], "1");
    assert!(pod.metadata.labels["controller-revision-hash"].starts_with("web-"));
    assert_eq!(pod.spec.hostname.as_deref(), Some("web-1"));
    assert_eq!(pod.spec.subdomain.as_deref(), Some("web"));
    for i in 0..3 {
        let c = get_claim(&client, &format!("www-web-{i}")).expect("claim");
        assert_eq!(c.status.phase.as_deref(), Some("Bound"), "www-web-{i}");
    }
    // The names the cluster DNS serves (web-0.web.default.svc.cluster.local): the headless
    // Service's endpoints carry each pod's hostname.
    let hostnames = wait_for("the endpoints' hostnames", Duration::from_secs(30), || {
        let ep = smol::block_on(client.get::<api::core::Endpoints>("default", "web")).ok()?;
        let mut names: Vec<String> = ep
            .subsets
            .iter()
            .flat_map(|s| &s.addresses)
            .filter_map(|a| a.hostname.clone())
            .collect();
        names.sort();
        (names.len() == 3).then_some(names)
    });
    assert_eq!(hostnames, ["web-0", "web-1", "web-2"]);

    // Deleted (its pods go, the claims stay) and re-created: each pod finds its own data.
    server.ok(&["delete", "sts", "web"], None);
    wait_for("the set's pods to go", Duration::from_secs(60), || {
        (0..3)
            .all(|i| get_pod(&client, &format!("web-{i}")).is_none())
            .then_some(())
    });
    let claims = server.ok(&["get", "pvc"], None);
    assert_eq!(claims.lines().count(), 4, "{claims}");
    server.ok(&["apply", "-f", "-"], Some(STATEFUL.as_bytes()));
    server.ok(&["rollout", "status", "sts/web", "--timeout=120s"], None);
    for i in 0..3 {
        wait_logs(&server, &format!("web-{i}"), &format!("found web-{i}"));
    }

    // A restart rolls the pods, highest ordinal first, onto the new revision.
    let before = get_pod(&client, "web-0").unwrap().metadata.uid;
    server.ok(&["rollout", "restart", "sts/web"], None);
    let status = server.ok(&["rollout", "status", "sts/web", "--timeout=180s"], None);
    // With the partition Kubernetes defaults (0), kubectl reports a partitioned roll out.
    assert!(
        status.contains("partitioned roll out complete: 3 new pods have been updated"),
        "{status}"
    );
    let after = get_pod(&client, "web-0").unwrap();
    assert_ne!(after.metadata.uid, before);
    wait_logs(&server, "web-0", "found web-0");
    let set = smol::block_on(client.get::<api::apps::StatefulSet>("default", "web")).unwrap();
    assert_eq!(set.status.current_revision, set.status.update_revision);
    assert_eq!(
        after.metadata.labels["controller-revision-hash"],
        set.status.update_revision.clone().unwrap()
    );
    let restarted = set.status.update_revision.clone().unwrap();

    // History and undo through the ControllerRevisions.
    let history = server.ok(&["rollout", "history", "sts/web"], None);
    let numbers: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(numbers, ["1", "2"], "{history}");
    let revisions = server.ok(&["get", "controllerrevisions"], None);
    assert!(revisions.contains("statefulset.apps/web"), "{revisions}");
    server.ok(&["rollout", "undo", "sts/web"], None);
    server.ok(&["rollout", "status", "sts/web", "--timeout=180s"], None);
    let set = smol::block_on(client.get::<api::apps::StatefulSet>("default", "web")).unwrap();
    let undone = set.status.update_revision.clone().unwrap();
    assert_ne!(undone, restarted);
    assert_eq!(
        set.status.current_revision.as_deref(),
        Some(undone.as_str())
    );
    assert!(!set
        .spec
        .template
        .metadata
        .annotations
        .contains_key("kubectl.kubernetes.io/restartedAt"));
    let history = server.ok(&["rollout", "history", "sts/web"], None);
    assert!(history.lines().any(|l| l.starts_with("3 ")), "{history}");
    wait_logs(&server, "web-0", "found web-0");

    // A scale-down removes the highest ordinal and keeps its claim (whenScaled: Retain).
    server.ok(&["scale", "sts", "web", "--replicas=2"], None);
    wait_for("web-2 to go", Duration::from_secs(60), || {
        get_pod(&client, "web-2").is_none().then_some(())
    });
    assert!(get_pod(&client, "web-1").is_some());
    assert!(get_claim(&client, "www-web-2").is_some());

    server.ok(&["delete", "sts", "web"], None);
    wait_for("the set's pods to go", Duration::from_secs(60), || {
        (0..3)
            .all(|i| get_pod(&client, &format!("web-{i}")).is_none())
            .then_some(())
    });
}
