//! The horizontal pod autoscaler end to end: `skiff server` with its own node, real busybox
//! containers that burn CPU, the server's own resource metrics, and the real kubectl
//! (`autoscale`, which writes autoscaling/v1, then `get`, `describe`, `explain` and `patch`
//! at autoscaling/v2). The deployment scales up while its pods burn and back down when they
//! stop. Needs root, /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Output;
use std::time::Duration;

use api::apps::Deployment;
use api::autoscaling::HorizontalPodAutoscaler;
use api::client::Client;
use api::core::Pod;
use common::{wait_for, NodeServer as Server};

const IMAGE: &str = "skiff.test/hpa:v1";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn kubectl(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> Output {
    common::run_kubectl(&server.kubeconfig(), args, stdin)
}

/// kubectl that must succeed; its stdout.
fn ok(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = kubectl(server, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn start(extra: &[&str]) -> (Server, Client) {
    image_util::require_root_and_busybox();
    let id = std::process::id();
    common::start_node_server_with_image(
        &format!("hpa-{id}"),
        &format!("skiff-hpa-{id}"),
        extra,
        |archive| image_util::write_busybox_archive(archive, IMAGE, "hpa"),
    )
}

/// Pods that burn CPU until /data/stop exists, then idle; each asks for 20m of CPU.
fn burner() -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: burn
spec:
  replicas: 1
  selector:
    matchLabels:
      app: burn
  template:
    metadata:
      labels:
        app: burn
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {IMAGE}
        command: ["sh", "-c", "while [ ! -f /data/stop ]; do :; done; exec sleep 3600"]
        resources:
          requests:
            cpu: 20m
        volumeMounts:
        - name: data
          mountPath: /data
      volumes:
      - name: data
        emptyDir: {{}}
"#
    )
}

/// A custom resource whose scale subresource an autoscaler can drive.
const BURNER_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: burners.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: burners, singular: burner, kind: Burner}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
"#;

fn replicas(client: &Client) -> i32 {
    smol::block_on(client.get::<Deployment>("default", "burn"))
        .expect("get deployment")
        .spec
        .replicas
        .unwrap_or(1)
}

fn running(client: &Client) -> Vec<Pod> {
    smol::block_on(client.list::<Pod>(Some("default"), Some("app=burn"), None))
        .expect("list pods")
        .0
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() && p.status.phase.as_deref() == Some("Running")
        })
        .collect()
}

fn hpa(client: &Client, name: &str) -> HorizontalPodAutoscaler {
    smol::block_on(client.get("default", name)).expect("get hpa")
}

#[test]
fn autoscaler_scales_a_cpu_burning_deployment_up_and_down() {
    let (server, client) = start(&["--horizontal-pod-autoscaler-sync-period", "2s"]);
    ok(&server, &["apply", "-f", "-"], Some(burner().as_bytes()));
    wait_for("the first burner to run", Duration::from_secs(90), || {
        (running(&client).len() == 1).then_some(())
    });

    // kubectl 1.32 writes autoscaling/v1 (in protobuf): the CPU target becomes a v2
    // Resource metric. Scaling down at once (no stabilisation) keeps the test short.
    let out = ok(
        &server,
        &[
            "autoscale",
            "deployment",
            "burn",
            "--cpu-percent=50",
            "--min=1",
            "--max=3",
        ],
        None,
    );
    assert!(
        out.contains("horizontalpodautoscaler.autoscaling/burn autoscaled"),
        "{out}"
    );
    ok(
        &server,
        &[
            "patch",
            "hpa",
            "burn",
            "--type=merge",
            "-p",
            r#"{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0}}}}"#,
        ],
        None,
    );
    let h = hpa(&client, "burn");
    assert_eq!(
        h.spec.metrics,
        vec![api::autoscaling::cpu_utilization_metric(50)]
    );
    let down = h
        .spec
        .behavior
        .clone()
        .and_then(|b| b.scale_down)
        .expect("scaleDown");
    assert_eq!(down.stabilization_window_seconds, Some(0));
    // Defaulted as Kubernetes: the rest of the rules filled in.
    assert_eq!(down.select_policy.as_deref(), Some("Max"));
    assert_eq!(
        h.spec
            .behavior
            .and_then(|b| b.scale_up)
            .map(|u| u.policies.len()),
        Some(2)
    );

    // Burning far above 50% of 20m: up to the maximum. The autoscaler writes the target's
    // scale first and its own status after (as Kubernetes does): wait for both.
    let h = wait_for(
        "the autoscaler to scale up to 3",
        Duration::from_secs(120),
        || {
            if replicas(&client) != 3 {
                return None;
            }
            let h = hpa(&client, "burn");
            (h.status.desired_replicas == 3).then_some(h)
        },
    );
    let status = &h.status;
    assert_eq!(status.desired_replicas, 3, "{status:?}");
    assert!(status.last_scale_time.is_some(), "{status:?}");
    let cpu = status.current_metrics[0]
        .resource
        .as_ref()
        .expect("cpu status");
    assert!(
        cpu.current.average_utilization.unwrap_or(0) > 50,
        "{status:?}"
    );
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        ["AbleToScale", "ScalingActive", "ScalingLimited"],
        "{status:?}"
    );
    let get = ok(&server, &["get", "hpa"], None);
    let header: Vec<&str> = get
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ],
        "{get}"
    );
    let row = get.lines().nth(1).unwrap_or("");
    assert!(row.starts_with("burn"), "{get}");
    assert!(row.contains("Deployment/burn"), "{get}");
    assert!(row.contains("cpu: ") && row.contains("%/50%"), "{get}");
    let describe = ok(&server, &["describe", "hpa", "burn"], None);
    for want in [
        "Reference:",
        "Deployment/burn",
        "resource cpu on pods  (as a percentage of request)",
        "Min replicas:",
        "SuccessfulRescale",
        "cpu resource utilization (percentage of request) above target",
        "ValidMetricFound",
    ] {
        assert!(describe.contains(want), "{want} in:\n{describe}");
    }

    // autoscaling/v1 shows the same object: the CPU target as a field, the rest in
    // annotations.
    let v1: serde_json::Value = serde_json::from_str(&ok(
        &server,
        &[
            "get",
            "--raw",
            "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/burn",
        ],
        None,
    ))
    .expect("v1 json");
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(v1["status"]["desiredReplicas"], 3);
    let annotations = &v1["metadata"]["annotations"];
    for key in [
        "autoscaling.alpha.kubernetes.io/behavior",
        "autoscaling.alpha.kubernetes.io/conditions",
        "autoscaling.alpha.kubernetes.io/current-metrics",
    ] {
        assert!(annotations[key].is_string(), "{key} in {v1}");
    }

    let pods = wait_for("three burners running", Duration::from_secs(90), || {
        let r = running(&client);
        (r.len() == 3).then_some(r)
    });

    // A custom resource with a scale subresource, its selector naming the same burning
    // pods (as an operator's resource names the pods it runs): the autoscaler scales it
    // through the definition's replica path, as it scales a Deployment.
    ok(&server, &["apply", "-f", "-"], Some(BURNER_CRD.as_bytes()));
    wait_for(
        "the Burner kind to be served",
        Duration::from_secs(30),
        || {
            kubectl(&server, &["get", "burners"], None)
                .status
                .success()
                .then_some(())
        },
    );
    ok(
        &server,
        &["apply", "-f", "-"],
        Some(b"apiVersion: example.com/v1\nkind: Burner\nmetadata: {name: crb}\nspec: {replicas: 1}\n"),
    );
    ok(
        &server,
        &[
            "patch",
            "burner",
            "crb",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":3,"selector":"app=burn"}}"#,
        ],
        None,
    );
    let out = ok(
        &server,
        &[
            "autoscale",
            "burner",
            "crb",
            "--cpu-percent=50",
            "--min=1",
            "--max=5",
        ],
        None,
    );
    assert!(out.contains("autoscaled"), "{out}");
    let cr_replicas = || {
        let out = ok(
            &server,
            &["get", "burner", "crb", "-o", "jsonpath={.spec.replicas}"],
            None,
        );
        out.trim().parse::<i32>().unwrap_or(0)
    };
    wait_for(
        "the autoscaler to scale the custom resource up",
        Duration::from_secs(60),
        || (cr_replicas() == 5 && hpa(&client, "crb").status.desired_replicas == 5).then_some(()),
    );
    let get = ok(&server, &["get", "hpa", "crb"], None);
    assert!(get.contains("Burner/crb") && get.contains("%/50%"), "{get}");
    let describe = ok(&server, &["describe", "hpa", "crb"], None);
    assert!(describe.contains("New size: 5"), "{describe}");
    ok(&server, &["delete", "hpa", "crb"], None);

    // Stop every burner: the usage falls and the deployment goes back to one pod.
    for p in &pods {
        ok(
            &server,
            &["exec", &p.metadata.name, "--", "sh", "-c", ": > /data/stop"],
            None,
        );
    }
    wait_for(
        "the autoscaler to scale down to 1",
        Duration::from_secs(120),
        || (replicas(&client) == 1).then_some(()),
    );
    // The event follows the scale: give it a moment.
    wait_for("the scale-down event", Duration::from_secs(10), || {
        let describe = ok(&server, &["describe", "hpa", "burn"], None);
        describe
            .contains("New size: 1; reason: All metrics below target")
            .then_some(())
    });

    // A metric type this server has no source for: ScalingActive False, and no scaling.
    ok(
        &server,
        &["apply", "-f", "-"],
        Some(
            br#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: custom
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: burn}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Pods
    pods:
      metric: {name: requests_per_second}
      target: {type: AverageValue, averageValue: "10"}
"#,
        ),
    );
    let c = wait_for(
        "the custom metric's condition",
        Duration::from_secs(30),
        || {
            hpa(&client, "custom")
                .status
                .conditions
                .into_iter()
                .find(|c| c.type_ == "ScalingActive")
        },
    );
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some("FailedGetPodsMetric"));
    assert!(
        c.message
            .as_deref()
            .unwrap_or("")
            .contains("unable to get metric requests_per_second"),
        "{c:?}"
    );

    // explain and validation as Kubernetes.
    let explain = ok(&server, &["explain", "hpa.spec"], None);
    for want in [
        "GROUP:      autoscaling",
        "VERSION:    v2",
        "scaleTargetRef",
        "behavior",
    ] {
        assert!(explain.contains(want), "{want} in:\n{explain}");
    }
    let bad = kubectl(
        &server,
        &["create", "-f", "-"],
        Some(
            br#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: bad}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: burn}
  maxReplicas: 0
"#,
        ),
    );
    assert!(!bad.status.success());
    let err = text(&bad.stderr);
    assert!(
        err.contains("The HorizontalPodAutoscaler \"bad\" is invalid")
            && err.contains("spec.maxReplicas")
            && err.contains("must be greater than 0"),
        "{err}"
    );
}
