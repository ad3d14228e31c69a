//! Kubelet events and resource metrics end to end: a real `skiff server`, a real
//! `skiff-agent`, real containers, and the real `kubectl describe`, `kubectl events` and
//! `kubectl top`. Needs root, /bin/busybox and kubectl on the PATH.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Command;
use std::time::Duration;

use api::client::Client;
use api::core::{ConfigMapVolumeSource, Event, ExecAction, Node, Probe, Volume, VolumeMount};
use common::{pod, wait_for, wait_phase, TestAgent, TestServer, TEST_IMAGE};
use serde_json::Value;

fn kubectl(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", server.dir.path())
        .output()
        .expect("run kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn get_json(c: &Client, path: &str) -> (u16, Value) {
    let r = smol::block_on(c.request("GET", path, None, "application/json")).expect("request");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// The kubelet's events about pod `name`.
fn events_of(c: &Client, name: &str) -> Vec<Event> {
    let (items, _) = smol::block_on(c.list::<Event>(
        Some("default"),
        None,
        Some(&format!("involvedObject.name={name}")),
    ))
    .expect("list events");
    items
        .into_iter()
        .filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("kubelet"))
        .collect()
}

/// A CPU quantity as kubectl top prints it (`250m`, `1`) in millicores.
fn millicores(s: &str) -> u64 {
    match s.strip_suffix('m') {
        Some(m) => m.parse().expect("millicores"),
        None => s.parse::<u64>().expect("cores") * 1000,
    }
}

/// A memory quantity as kubectl top prints it (`12Mi`), in MiB.
fn mebibytes(s: &str) -> u64 {
    s.strip_suffix("Mi").expect("Mi").parse().expect("MiB")
}

/// The whitespace-separated columns of the first line of `out` starting with `first`.
fn row(out: &str, first: &str) -> Option<Vec<String>> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
}

#[test]
fn kubelet_events_and_kubectl_top() {
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();
    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("top"), TEST_IMAGE);
    agent.import(&archive);
    agent.start(Some(&token));
    let node = agent.node_name.clone();
    wait_for("the node to register", Duration::from_secs(30), || {
        smol::block_on(client.get::<Node>("", &node)).ok()
    });

    // A container that burns CPU and holds 8 MB, and one that crashes at once.
    let mut burner = pod(
        "burner",
        &node,
        &[
            "sh",
            "-c",
            "x=$(head -c 8000000 /dev/zero | tr '\\0' a); while :; do :; done",
        ],
        Some("Always"),
    );
    burner
        .metadata
        .labels
        .insert("app".to_string(), "burn".to_string());
    smol::block_on(client.create(&burner)).expect("create burner");
    let crasher = pod("crasher", &node, &["sh", "-c", "exit 3"], Some("Always"));
    smol::block_on(client.create(&crasher)).expect("create crasher");
    // One whose liveness probe always fails, one whose ConfigMap volume is missing, one
    // whose image is absent with the pull policy Never.
    let mut sick = pod("sick", &node, &["sleep", "3600"], Some("Always"));
    sick.spec.containers[0].liveness_probe = Some(Probe {
        exec: Some(ExecAction {
            command: vec!["sh".into(), "-c".into(), "exit 1".into()],
        }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    });
    smol::block_on(client.create(&sick)).expect("create sick");
    let mut unmounted = pod("unmounted", &node, &["sleep", "3600"], Some("Always"));
    unmounted.spec.volumes.push(Volume {
        name: "cfg".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: Some("missing".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    unmounted.spec.containers[0]
        .volume_mounts
        .push(VolumeMount {
            name: "cfg".into(),
            mount_path: "/cfg".into(),
            ..Default::default()
        });
    smol::block_on(client.create(&unmounted)).expect("create unmounted");
    let mut absent = pod("absent", &node, &["true"], Some("Always"));
    absent.spec.containers[0].image = Some("skiff.test/absent:v1".into());
    absent.spec.containers[0].image_pull_policy = Some("Never".into());
    smol::block_on(client.create(&absent)).expect("create absent");
    let running = wait_phase(&client, "burner", "Running", Duration::from_secs(60));

    // Events: the kubelet's, with its source and the container's field path.
    let events = wait_for(
        "the burner's Started event",
        Duration::from_secs(20),
        || {
            let ev = events_of(&client, "burner");
            ev.iter()
                .any(|e| e.reason.as_deref() == Some("Started"))
                .then_some(ev)
        },
    );
    for reason in ["Pulled", "Created", "Started"] {
        let e = events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} event in {events:?}"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.count, Some(1));
        let source = e.source.clone().expect("source");
        assert_eq!(source.host.as_deref(), Some(node.as_str()));
        assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(e.reporting_instance.as_deref(), Some(node.as_str()));
        let o = &e.involved_object;
        assert_eq!(o.field_path.as_deref(), Some("spec.containers{main}"));
        assert_eq!(o.uid.as_deref(), Some(running.metadata.uid.as_str()));
        assert!(e.first_timestamp.is_some() && e.last_timestamp.is_some());
    }
    let pulled = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Pulled"))
        .and_then(|e| e.message.clone());
    assert_eq!(
        pulled.as_deref(),
        Some(format!("Container image \"{TEST_IMAGE}\" already present on machine").as_str())
    );

    let (ok, out, err) = kubectl(&server, &["describe", "pod", "burner"]);
    assert!(ok, "{err}");
    let events_section = out.split("Events:").nth(1).unwrap_or("");
    for want in [
        "Started container main",
        "Created container: main",
        "already present on machine",
        "kubelet",
    ] {
        assert!(events_section.contains(want), "{want} in: {out}");
    }
    let (ok, out, err) = kubectl(&server, &["events", "--for", "pod/burner"]);
    assert!(ok, "{err}");
    for want in ["Started", "Created", "Pulled", "Pod/burner"] {
        assert!(out.contains(want), "{want} in: {out}");
    }

    // The crash loop: BackOff, and repeats coalesced into one Event per series whose count
    // grows (written at most every 30 s per series).
    let crash_events = wait_for(
        "the crasher's events to count a restart",
        Duration::from_secs(90),
        || {
            let ev = events_of(&client, "crasher");
            let started = ev
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Started"))
                .count();
            assert!(started <= 1, "repeats make one Event: {ev:?}");
            let counted = ev
                .iter()
                .any(|e| e.reason.as_deref() == Some("Started") && e.count.unwrap_or(0) >= 2);
            let backoff = ev.iter().any(|e| {
                e.reason.as_deref() == Some("BackOff")
                    && e.type_.as_deref() == Some("Warning")
                    && e.message.as_deref().is_some_and(|m| {
                        m.starts_with(
                            "Back-off restarting failed container main in pod crasher_default(",
                        )
                    })
            });
            (counted && backoff).then_some(ev)
        },
    );
    let (ok, out, err) = kubectl(&server, &["events", "--for", "pod/crasher"]);
    assert!(ok, "{err}");
    assert!(out.contains("BackOff"), "{out}");
    println!("kubectl events --for pod/crasher:\n{out}");
    assert!(crash_events.len() < 10, "{crash_events:?}");

    // Warnings: Unhealthy and Killing for the failing probe, FailedMount, and Failed for
    // the absent image, each with the kubelet's message.
    let has = |pod: &str, type_: &str, reason: &str, message: &str| {
        events_of(&client, pod).iter().any(|e| {
            e.type_.as_deref() == Some(type_)
                && e.reason.as_deref() == Some(reason)
                && e.message.as_deref().is_some_and(|m| m.starts_with(message))
        })
    };
    wait_for("the warnings", Duration::from_secs(30), || {
        let all = [
            has("sick", "Warning", "Unhealthy", "Liveness probe failed"),
            has(
                "sick",
                "Normal",
                "Killing",
                "Container main failed liveness probe, will be restarted",
            ),
            has(
                "unmounted",
                "Warning",
                "FailedMount",
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"missing\" not found",
            ),
            has(
                "absent",
                "Warning",
                "ErrImageNeverPull",
                "Container image \"skiff.test/absent:v1\" is not present with pull policy of Never",
            ),
            has("absent", "Warning", "Failed", "Error: ErrImageNeverPull"),
        ];
        all.iter().all(|ok| *ok).then_some(())
    });
    let (ok, out, err) = kubectl(&server, &["describe", "pod", "unmounted"]);
    assert!(ok, "{err}");
    assert!(out.contains("FailedMount"), "{out}");

    // Discovery lists the metrics API as kubectl top needs it.
    let (ok, out, err) = kubectl(&server, &["api-resources", "--api-group=metrics.k8s.io"]);
    assert!(ok, "{err}");
    assert!(
        row(&out, "nodes").is_some_and(|r| r.contains(&"NodeMetrics".to_string())),
        "{out}"
    );
    assert!(
        row(&out, "pods").is_some_and(|r| r.contains(&"PodMetrics".to_string())),
        "{out}"
    );

    // kubectl top node: the node's CPU and memory, both above zero.
    let (ok, out, err) = kubectl(&server, &["top", "node"]);
    assert!(ok, "{err}");
    println!("kubectl top node:\n{out}");
    let r = row(&out, &node).unwrap_or_else(|| panic!("no row for {node}: {out}"));
    assert!(millicores(&r[1]) > 0, "{out}");
    assert!(mebibytes(&r[3]) > 0, "{out}");

    // kubectl top pod --containers: the burner burns (a busy loop is close to a core; the
    // machine is shared, so more than 50m is asked) and holds its 8 MB.
    let figures = wait_for(
        "the burner's figures in kubectl top",
        Duration::from_secs(30),
        || {
            let (ok, out, _) = kubectl(&server, &["top", "pod", "-l", "app=burn", "--containers"]);
            ok.then(|| row(&out, "burner")).flatten()
        },
    );
    println!("kubectl top pod -l app=burn --containers: {figures:?}");
    assert_eq!(figures[1], "main", "{figures:?}");
    assert!(millicores(&figures[2]) > 50, "{figures:?}");
    assert!(mebibytes(&figures[3]) >= 7, "{figures:?}");
    let (ok, out, err) = kubectl(&server, &["top", "pod", "-A"]);
    assert!(ok, "{err}");
    assert!(
        row(&out, "default").is_some_and(|r| r[1] == "burner"),
        "{out}"
    );
    let (ok, _, err) = kubectl(&server, &["top", "pod", "nope"]);
    assert!(!ok && err.contains("not found"), "{err}");

    // The API itself: shapes, a window, and 404 for what is not there.
    let (code, v) = get_json(
        &client,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burner",
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["kind"], "PodMetrics");
    assert_eq!(v["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(v["metadata"]["labels"]["app"], "burn");
    assert!(
        v["window"].as_str().is_some_and(|w| w.ends_with('s')),
        "{v}"
    );
    assert!(v["containers"][0]["usage"]["cpu"].as_str().is_some(), "{v}");
    let (code, v) = get_json(
        &client,
        &format!("/apis/metrics.k8s.io/v1beta1/nodes/{node}"),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["kind"], "NodeMetrics");
    let (code, v) = get_json(&client, "/apis/metrics.k8s.io/v1beta1/nodes/nope");
    assert_eq!(code, 404, "{v}");
    assert_eq!(v["reason"], "NotFound");
    let (code, v) = get_json(
        &client,
        "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=zone%3Dother",
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["kind"], "NodeMetricsList");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(0), "{v}");
    let (code, v) = get_json(
        &client,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?fieldSelector=metadata.name%3Dburner",
    );
    assert_eq!(code, 200, "{v}");
    let names: Vec<&str> = v["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, ["burner"], "{v}");
    let (code, v) = get_json(
        &client,
        "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=spec.nope%3Dx",
    );
    assert_eq!(code, 400, "{v}");

    // Deleting a running pod records Killing.
    smol::block_on(client.delete::<api::core::Pod>(
        "default",
        "burner",
        &api::meta::DeleteOptions::default(),
    ))
    .expect("delete");
    wait_for("the Killing event", Duration::from_secs(30), || {
        events_of(&client, "burner")
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Killing")
                    && e.message.as_deref() == Some("Stopping container main")
            })
            .then_some(())
    });
}
