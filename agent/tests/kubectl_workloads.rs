//! core/v1 ReplicationControllers with the real `kubectl` against `skiff server` with its
//! own node and real busybox containers: an RC keeps its replicas when a pod is deleted,
//! `kubectl scale rc`, get (Kubernetes' columns), describe and explain, and its pods are
//! garbage-collected with it. ResourceQuota and LimitRange: defaults land on pods, a quota
//! refuses the pod over its count with Kubernetes' message and keeps status.used. Needs
//! root, /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Output;
use std::time::Duration;

use api::client::Client;
use api::core::Pod;
use api::replication::ReplicationController;
use common::wait_for;

const IMAGE: &str = "skiff.test/workloads:v1";

/// One server with its own node at a time: each programs the host's bridge, DNS address
/// and ingress ports, and cleans them up when dropped.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// A server with its own node; `tag` keeps the node and cgroup names of tests running at
/// the same time apart.
fn start(tag: &str, extra: &[&str]) -> (Server, Client) {
    image_util::require_root_and_busybox();
    let id = std::process::id();
    common::start_node_server_with_image(
        &format!("wl{tag}-{id}"),
        &format!("skiff-wl{tag}-{id}"),
        extra,
        |archive| image_util::write_busybox_archive(archive, IMAGE, "workloads"),
    )
}

fn pods(client: &Client, selector: &str) -> Vec<Pod> {
    smol::block_on(client.list::<Pod>(Some("default"), Some(selector), None))
        .expect("list pods")
        .0
}

fn running(client: &Client, selector: &str) -> Vec<Pod> {
    pods(client, selector)
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() && p.status.phase.as_deref() == Some("Running")
        })
        .collect()
}

fn rc_manifest(name: &str, replicas: i32) -> String {
    format!(
        r#"apiVersion: v1
kind: ReplicationController
metadata:
  name: {name}
spec:
  replicas: {replicas}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {IMAGE}
        command: ["sh", "-c", "sleep 3600"]
"#
    )
}

#[test]
fn replication_controller_with_kubectl() {
    let _serial = one_at_a_time();
    let (server, client) = start("rc", &[]);
    server.ok(
        &["apply", "-f", "-"],
        Some(rc_manifest("legacy", 2).as_bytes()),
    );
    let sel = "app=legacy";
    let first = wait_for("two running pods", Duration::from_secs(90), || {
        let r = running(&client, sel);
        (r.len() == 2).then_some(r)
    });
    let rc: ReplicationController =
        smol::block_on(client.get("default", "legacy")).expect("get rc");
    // The selector and the object's labels default to the template's labels.
    assert_eq!(
        rc.spec.selector.get("app").map(String::as_str),
        Some("legacy")
    );
    assert_eq!(
        rc.metadata.labels.get("app").map(String::as_str),
        Some("legacy")
    );
    for p in &first {
        let owner = p.metadata.controller_ref().expect("controller ref");
        assert_eq!(
            (owner.kind.as_str(), owner.api_version.as_str()),
            ("ReplicationController", "v1")
        );
        assert_eq!(owner.uid, rc.metadata.uid);
        assert!(
            p.metadata.name.starts_with("legacy-"),
            "{}",
            p.metadata.name
        );
    }

    // A deleted pod is replaced.
    let victim = first[0].metadata.name.clone();
    server.ok(&["delete", "pod", &victim, "--wait=false"], None);
    wait_for("a replacement pod", Duration::from_secs(90), || {
        let r = running(&client, sel);
        (r.len() == 2 && r.iter().all(|p| p.metadata.name != victim)).then_some(())
    });
    let status = wait_for("ready replicas in status", Duration::from_secs(30), || {
        let rc: ReplicationController = smol::block_on(client.get("default", "legacy")).ok()?;
        (rc.status.ready_replicas == Some(2) && rc.status.replicas == 2).then_some(rc.status)
    });
    assert_eq!(status.fully_labeled_replicas, Some(2));
    assert_eq!(status.observed_generation, rc.metadata.generation);

    // Kubernetes' table: the short name, the columns, -o wide's selector.
    let table = server.ok(&["get", "rc", "-o", "wide"], None);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["legacy", "2", "2", "2"], "{table}");
    assert_eq!(&row[5..], ["main", IMAGE, "app=legacy"], "{table}");
    let all = server.ok(&["get", "all"], None);
    assert!(
        all.contains("replicationcontroller/legacy"),
        "get all lists it: {all}"
    );

    // kubectl scale goes through the scale subresource.
    let scaled = server.ok(&["scale", "rc", "legacy", "--replicas=3"], None);
    assert!(
        scaled.contains("replicationcontroller/legacy scaled"),
        "{scaled}"
    );
    wait_for("three running pods", Duration::from_secs(90), || {
        (running(&client, sel).len() == 3).then_some(())
    });
    let scale = server.ok(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/replicationcontrollers/legacy/scale",
        ],
        None,
    );
    let scale: serde_json::Value = serde_json::from_str(&scale).expect("scale json");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=legacy");
    server.ok(&["scale", "rc", "legacy", "--replicas=1"], None);
    wait_for("one pod left", Duration::from_secs(90), || {
        (pods(&client, sel).len() == 1).then_some(())
    });

    let described = server.ok(&["describe", "rc", "legacy"], None);
    assert!(
        described.contains("Selector:     app=legacy"),
        "{described}"
    );
    assert!(described.contains("Replicas:"), "{described}");
    assert!(described.contains("SuccessfulCreate"), "{described}");
    assert!(described.contains("SuccessfulDelete"), "{described}");
    let explained = server.ok(&["explain", "rc.spec.selector"], None);
    assert!(
        explained.contains("KIND:       ReplicationController"),
        "{explained}"
    );
    assert!(explained.contains("map[string]string"), "{explained}");

    // Bad input: a selector that does not match the template's labels.
    let bad = rc_manifest("bad", 1).replace(
        "spec:\n  replicas: 1\n",
        "spec:\n  replicas: 1\n  selector:\n    app: other\n",
    );
    let out = server.kubectl(&["apply", "-f", "-"], Some(bad.as_bytes()));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("ReplicationController \"bad\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"bad\"}: `selector` does not match template `labels`")
            || err.contains("`selector` does not match template `labels`"),
        "{err}"
    );

    // Deleting the RC takes its pods along (ownerReferences, background propagation).
    server.ok(&["delete", "rc", "legacy", "--wait=true"], None);
    wait_for(
        "the pods garbage-collected",
        Duration::from_secs(60),
        || pods(&client, sel).is_empty().then_some(()),
    );
}

fn quota_used(client: &Client, name: &str) -> std::collections::BTreeMap<String, String> {
    let q: api::quota::ResourceQuota =
        smol::block_on(client.get("default", name)).expect("get quota");
    q.status.used.into_iter().map(|(k, v)| (k, v.0)).collect()
}

fn used_is(client: &Client, name: &str, want: &[(&str, &str)]) -> bool {
    let used = quota_used(client, name);
    want.iter()
        .all(|(k, v)| used.get(*k).map(String::as_str) == Some(*v))
}

#[test]
fn quota_and_limit_range_with_kubectl() {
    let _serial = one_at_a_time();
    let (server, client) = start("quota", &[]);
    server.ok(
        &["apply", "-f", "-"],
        Some(
            br#"apiVersion: v1
kind: LimitRange
metadata:
  name: defaults
spec:
  limits:
  - type: Container
    default:
      cpu: 200m
      memory: 64Mi
    defaultRequest:
      cpu: 100m
    max:
      cpu: "1"
"#,
        ),
    );
    let created = server.ok(
        &[
            "create",
            "quota",
            "small",
            "--hard=pods=2,requests.cpu=1,limits.memory=1Gi",
        ],
        None,
    );
    assert!(created.contains("resourcequota/small created"), "{created}");
    wait_for("the quota's status", Duration::from_secs(20), || {
        used_is(&client, "small", &[("pods", "0"), ("requests.cpu", "0")]).then_some(())
    });

    // The LimitRange's defaults land on a pod that states no resources; the quota's
    // compute rules are then met.
    let run = |name: &str| {
        server.kubectl(
            &[
                "run",
                name,
                &format!("--image={IMAGE}"),
                "--restart=Never",
                "--command",
                "--",
                "sh",
                "-c",
                "sleep 3600",
            ],
            None,
        )
    };
    let out = run("first");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first: Pod = smol::block_on(client.get("default", "first")).expect("get pod");
    let res = first.spec.containers[0]
        .resources
        .as_ref()
        .expect("resources");
    assert_eq!(res.requests["cpu"].0, "100m");
    assert_eq!(res.limits["cpu"].0, "200m");
    assert_eq!(res.limits["memory"].0, "64Mi");
    assert_eq!(res.requests["memory"].0, "64Mi");
    assert_eq!(
        first.metadata.annotations["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container first; cpu, memory limit for container first"
    );
    wait_for("first running", Duration::from_secs(60), || {
        (running(&client, "run=first").len() == 1).then_some(())
    });
    assert!(used_is(
        &client,
        "small",
        &[
            ("pods", "1"),
            ("requests.cpu", "100m"),
            ("limits.memory", "64Mi")
        ]
    ));
    let out = run("second");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(used_is(
        &client,
        "small",
        &[
            ("pods", "2"),
            ("requests.cpu", "200m"),
            ("limits.memory", "128Mi")
        ]
    ));

    // The third pod is over the count.
    let out = run("third");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("Error from server (Forbidden): pods \"third\" is forbidden: exceeded quota: small, requested: pods=1, used: pods=2, limited: pods=2"),
        "{err}"
    );
    // Over the LimitRange's max.
    let out = server.kubectl(
        &[
            "run",
            "big",
            &format!("--image={IMAGE}"),
            "--restart=Never",
            "--overrides={\"spec\":{\"containers\":[{\"name\":\"big\",\"image\":\"skiff.test/workloads:v1\",\"resources\":{\"limits\":{\"cpu\":\"2\"}}}]}}",
        ],
        None,
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{err}"
    );

    // Kubernetes' table and describe.
    let table = server.ok(&["get", "quota"], None);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "REQUEST", "LIMIT"], "{table}");
    assert!(
        table.contains("pods: 2/2, requests.cpu: 200m/1")
            && table.contains("limits.memory: 128Mi/1Gi"),
        "{table}"
    );
    let described = server.ok(&["describe", "quota", "small"], None);
    assert!(described.contains("requests.cpu"), "{described}");
    let limits = server.ok(&["get", "limits"], None);
    assert!(limits.starts_with("NAME"), "{limits}");
    assert!(limits.contains("CREATED AT"), "{limits}");
    let described = server.ok(&["describe", "limits", "defaults"], None);
    assert!(described.contains("Container"), "{described}");
    let explained = server.ok(&["explain", "quota.spec.hard"], None);
    assert!(
        explained.contains("KIND:       ResourceQuota"),
        "{explained}"
    );

    // Deleting a pod gives its share back (the controller's replenishment).
    server.ok(&["delete", "pod", "second", "--wait=false"], None);
    wait_for("used back to one pod", Duration::from_secs(60), || {
        used_is(&client, "small", &[("pods", "1"), ("requests.cpu", "100m")]).then_some(())
    });
    let out = run("third");
    assert!(out.status.success(), "{}", text(&out.stderr));
}
