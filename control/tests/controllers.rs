//! The controllers inside a real `skiff server`. No scheduler or agent runs here: a small
//! simulated cluster ([`Sim`]) binds pods to fake nodes, reports them Running (and Ready
//! unless told otherwise), confirms their graceful deletion and heartbeats its nodes.

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::client::{Client, ACCEPT_JSON};
use common::{kubectl, skiff_bin, TestServer};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// A simulated cluster

#[derive(Default)]
struct SimState {
    nodes: Vec<String>,
    /// Nodes that neither heartbeat nor touch their pods.
    down: HashSet<String>,
    /// Whether new pods stay unready (pods already ready keep their state).
    not_ready: bool,
    /// Whether bound pods being deleted are confirmed.
    hold_deletions: bool,
}

struct Sim {
    state: Arc<Mutex<SimState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn req(c: &Client, method: &str, path: &str, ct: &str, body: &Value) -> Result<Value, String> {
    let b = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let r = smol::block_on(c.request(method, path, Some((ct, b)), ACCEPT_JSON))
        .map_err(|e| e.to_string())?;
    if !(200..300).contains(&r.status) {
        return Err(format!(
            "{method} {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
    }
    serde_json::from_slice(&r.body).map_err(|e| e.to_string())
}

fn get(c: &Client, path: &str) -> Value {
    smol::block_on(c.request_json("GET", path, None, ACCEPT_JSON)).unwrap_or(Value::Null)
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn create_node(c: &Client, name: &str, labels: Value) {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now()}]}
    });
    req(c, "POST", "/api/v1/nodes", "application/json", &node).expect("create node");
}

impl Sim {
    fn start(s: &TestServer, nodes: &[(&str, Value)]) -> Sim {
        let c = s.client();
        for (n, labels) in nodes {
            create_node(&c, n, labels.clone());
        }
        let state = Arc::new(Mutex::new(SimState {
            nodes: nodes.iter().map(|(n, _)| n.to_string()).collect(),
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut turn = 0usize;
            while !sp.load(Ordering::Relaxed) {
                step(&c, &st, &mut turn);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sim {
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, f: impl FnOnce(&mut SimState)) {
        f(&mut self.state.lock().unwrap());
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn step(c: &Client, st: &Mutex<SimState>, turn: &mut usize) {
    let (nodes, down, not_ready, hold) = {
        let s = st.lock().unwrap();
        (
            s.nodes.clone(),
            s.down.clone(),
            s.not_ready,
            s.hold_deletions,
        )
    };
    let up: Vec<&String> = nodes.iter().filter(|n| !down.contains(*n)).collect();
    for n in &up {
        let beat = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now()}]}});
        let _ = req(
            c,
            "PATCH",
            &format!("/api/v1/nodes/{n}/status"),
            "application/merge-patch+json",
            &beat,
        );
    }
    let pods = get(c, "/api/v1/pods");
    for p in pods["items"].as_array().cloned().unwrap_or_default() {
        let ns = p["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let node = p["spec"]["nodeName"].as_str().map(str::to_string);
        let deleting = p["metadata"]["deletionTimestamp"].is_string();
        match node {
            None if !deleting => {
                let pinned = p.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let target = match pinned {
                    Some(n) => Some(n),
                    None if up.is_empty() => None,
                    None => {
                        *turn += 1;
                        Some(up[*turn % up.len()].clone())
                    }
                };
                if let Some(t) = target.filter(|t| !down.contains(t)) {
                    let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": t}});
                    let _ = req(
                        c,
                        "POST",
                        &format!("{path}/binding"),
                        "application/json",
                        &b,
                    );
                }
            }
            None => {}
            Some(n) if down.contains(&n) => {}
            Some(_) if deleting && hold => {}
            Some(_) if deleting => {
                let _ = req(
                    c,
                    "DELETE",
                    &path,
                    "application/json",
                    &json!({"gracePeriodSeconds": 0}),
                );
            }
            Some(_) => {
                let ready = p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                let running = p["status"]["phase"] == "Running";
                if !running || (!ready && !not_ready) {
                    let status = if not_ready { "False" } else { "True" };
                    let patch = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status, "lastTransitionTime": now()}]}});
                    let _ = req(
                        c,
                        "PATCH",
                        &format!("{path}/status"),
                        "application/merge-patch+json",
                        &patch,
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn apply(s: &TestServer, path: &str, body: Value) -> Value {
    let (code, v) = s.json("POST", path, &body);
    assert!(code == 201, "create {path}: {code} {v}");
    v
}

fn merge(s: &TestServer, path: &str, patch: Value) -> Value {
    let (code, v) = s.http(
        "PATCH",
        path,
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&patch).unwrap(),
        )),
    );
    assert!(code == 200, "patch {path}: {code} {v}");
    v
}

fn items(s: &TestServer, path: &str) -> Vec<Value> {
    let (code, v) = s.http("GET", path, None);
    assert_eq!(code, 200, "{path}: {v}");
    v["items"].as_array().cloned().unwrap_or_default()
}

fn live_pods(s: &TestServer, selector: &str) -> Vec<Value> {
    items(
        s,
        &format!("/api/v1/namespaces/default/pods?labelSelector={selector}"),
    )
    .into_iter()
    .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
    .collect()
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn skiff(s: &TestServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(skiff_bin())
        .args(args)
        .env("KUBECONFIG", s.kubeconfig())
        .output()
        .expect("run skiff");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn template(app: &str, image: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": image}]}})
}

fn replica_set(name: &str, app: &str, replicas: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": template(app, "busybox:1")}})
}

const RS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";

fn owner_uid(p: &Value) -> Option<String> {
    p["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == true)
        .and_then(|o| o["uid"].as_str())
        .map(str::to_string)
}

fn events(s: &TestServer) -> Vec<Value> {
    items(s, "/api/v1/namespaces/default/events")
}

// ---------------------------------------------------------------------------------------
// ReplicaSet

#[test]
fn replicaset_scales_adopts_releases_and_deletes_unready_first() {
    let s = TestServer::start();
    let sim = Sim::start(&s, &[("n1", json!({}))]);
    let rs = apply(&s, RS, replica_set("web", "web", 3));
    let uid = rs["metadata"]["uid"].as_str().unwrap().to_string();
    let pods = wait_for("3 ready pods", Duration::from_secs(15), || {
        let p = live_pods(&s, "app=web");
        (p.len() == 3 && p.iter().all(ready)).then_some(p)
    });
    for p in &pods {
        assert_eq!(owner_uid(p).as_deref(), Some(uid.as_str()));
        assert_eq!(p["metadata"]["generateName"], "web-");
        // Default tolerations for not-ready and unreachable nodes (300 s).
        let tols = p["spec"]["tolerations"].as_array().unwrap();
        assert!(
            tols.iter()
                .any(|t| t["key"] == "node.kubernetes.io/unreachable"
                    && t["tolerationSeconds"] == 300),
            "{tols:?}"
        );
    }
    wait_for("status", Duration::from_secs(10), || {
        let (_, v) = s.http("GET", &format!("{RS}/web"), None);
        (v["status"]["readyReplicas"] == 3
            && v["status"]["availableReplicas"] == 3
            && v["status"]["observedGeneration"] == 1)
            .then_some(())
    });

    // One pod turns unready: scaling down removes it first.
    sim.set(|st| st.not_ready = true);
    let victim = pods[1]["metadata"]["name"].as_str().unwrap().to_string();
    merge(
        &s,
        &format!("/api/v1/namespaces/default/pods/{victim}/status"),
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    // The controller has seen it (its status counts two ready pods) before the scale.
    wait_for("readyReplicas 2", Duration::from_secs(10), || {
        let (_, v) = s.http("GET", &format!("{RS}/web"), None);
        (v["status"]["readyReplicas"] == 2).then_some(())
    });
    let (ok, out, err) = skiff(&s, &["scale", "rs/web", "--replicas", "2"]);
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), "replicaset.apps/web scaled");
    let left = wait_for("2 pods", Duration::from_secs(10), || {
        let p = live_pods(&s, "app=web");
        (p.len() == 2).then_some(p)
    });
    assert!(
        left.iter()
            .all(|p| p["metadata"]["name"] != victim.as_str()),
        "the unready pod went first"
    );
    sim.set(|st| st.not_ready = false);

    // An orphan with matching labels is adopted (and, one too many, deleted: it is the
    // pending one).
    let orphan = apply(
        &s,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}),
    );
    assert!(owner_uid(&orphan).is_none());
    wait_for(
        "adoption then removal of the surplus",
        Duration::from_secs(10),
        || {
            let p = live_pods(&s, "app=web");
            (p.len() == 2 && p.iter().all(|p| p["metadata"]["name"] != "stray")).then_some(())
        },
    );

    // A pod whose labels stop matching is released and replaced.
    let released = left[0]["metadata"]["name"].as_str().unwrap().to_string();
    merge(
        &s,
        &format!("/api/v1/namespaces/default/pods/{released}"),
        json!({"metadata": {"labels": {"app": "debug"}}}),
    );
    wait_for("release and replacement", Duration::from_secs(10), || {
        let (_, p) = s.http(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{released}"),
            None,
        );
        let replaced = live_pods(&s, "app=web").len() == 2;
        (owner_uid(&p).is_none() && replaced).then_some(())
    });

    // Scale up through the scale subresource (what kubectl scale sends).
    let (ok, out, err) = kubectl(&s, &["scale", "rs/web", "--replicas=4"]);
    assert!(ok, "{out}{err}");
    wait_for("4 pods", Duration::from_secs(10), || {
        (live_pods(&s, "app=web").len() == 4).then_some(())
    });

    // Events: what the controller did, with counts and times.
    let ev = events(&s);
    let created: Vec<&Value> = ev
        .iter()
        .filter(|e| e["reason"] == "SuccessfulCreate" && e["involvedObject"]["name"] == "web")
        .collect();
    assert!(created.len() >= 4, "{ev:?}");
    assert!(created.iter().all(|e| e["count"].as_i64() >= Some(1)
        && e["lastTimestamp"].is_string()
        && e["source"]["component"] == "replicaset-controller"));
    assert!(
        ev.iter().any(|e| e["reason"] == "SuccessfulDelete"),
        "{ev:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Deployment

fn deployment(name: &str, replicas: i32, strategy: Value, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "strategy": strategy,
                 "template": template(name, image)}})
}

/// (new RS replicas, sum of the others) for the deployment `app`, by image.
fn rs_sizes(s: &TestServer, app: &str, image: &str) -> (i64, i64, Vec<Value>) {
    let rss = items(s, &format!("{RS}?labelSelector=app={app}"));
    let (mut new, mut old) = (0, 0);
    for rs in &rss {
        let r = rs["spec"]["replicas"].as_i64().unwrap_or(0);
        if rs["spec"]["template"]["spec"]["containers"][0]["image"] == image {
            new += r;
        } else {
            old += r;
        }
    }
    (new, old, rss)
}

#[test]
fn deployment_rolls_within_surge_and_unavailable_and_rolls_back() {
    let s = TestServer::start();
    let _sim = Sim::start(&s, &[("n1", json!({})), ("n2", json!({}))]);
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    apply(&s, DEPLOY, deployment("web", 4, strategy, "busybox:1"));
    let (ok, out, err) = kubectl(
        &s,
        &["rollout", "status", "deployment/web", "--timeout=30s"],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("successfully rolled out"), "{out}");
    let (_, d) = s.http("GET", &format!("{DEPLOY}/web"), None);
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(d["status"]["availableReplicas"], 4);
    assert!(d["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Available" && c["status"] == "True"));
    let (_, _, rss) = rs_sizes(&s, "web", "busybox:1");
    assert_eq!(rss.len(), 1);
    let hash = rss[0]["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rss[0]["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        rss[0]["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash.as_str()
    );

    // Update: watch the ReplicaSet sizes. maxSurge 1 => never more than 5 in all;
    // maxUnavailable 0 => old ones shrink only as new ones become available.
    merge(
        &s,
        &format!("{DEPLOY}/web"),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}}),
    );
    let mut seen = Vec::new();
    wait_for("rollout to busybox:2", Duration::from_secs(30), || {
        let (new, old, _) = rs_sizes(&s, "web", "busybox:2");
        assert!(new + old <= 5, "surge exceeded: new {new} old {old}");
        if seen.last() != Some(&(new, old)) {
            seen.push((new, old));
        }
        (new == 4 && old == 0).then_some(())
    });
    assert!(seen.len() >= 4, "the rollout went in steps: {seen:?}");
    let (ok, out, err) = skiff(
        &s,
        &["rollout", "status", "deployment/web", "--timeout", "30s"],
    );
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("deployment \"web\" successfully rolled out"),
        "{out}"
    );
    let (_, d) = s.http("GET", &format!("{DEPLOY}/web"), None);
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    assert_eq!(d["status"]["updatedReplicas"], 4);
    let ev = events(&s);
    assert!(
        ev.iter().any(|e| e["reason"] == "ScalingReplicaSet"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("Scaled down replica set web-")),
        "{ev:?}"
    );

    // skiff rollout undo: back to busybox:1, which becomes revision 3.
    let (ok, out, err) = skiff(&s, &["rollout", "undo", "deployment/web"]);
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), "deployment.apps/web rolled back");
    wait_for("rollback to busybox:1", Duration::from_secs(30), || {
        let (new, old, _) = rs_sizes(&s, "web", "busybox:1");
        (new == 4 && old == 0).then_some(())
    });
    let (_, _, rss) = rs_sizes(&s, "web", "busybox:1");
    let back = rss
        .iter()
        .find(|r| r["metadata"]["name"] == format!("web-{hash}"))
        .expect("the first ReplicaSet is reused");
    assert_eq!(
        back["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );

    // kubectl rollout undo: to busybox:2 again.
    let (ok, out, err) = kubectl(&s, &["rollout", "undo", "deployment/web"]);
    assert!(ok, "{out}{err}");
    wait_for(
        "kubectl rollback to busybox:2",
        Duration::from_secs(30),
        || {
            let (new, old, _) = rs_sizes(&s, "web", "busybox:2");
            (new == 4 && old == 0).then_some(())
        },
    );
    let (ok, out, err) = kubectl(
        &s,
        &["rollout", "status", "deployment/web", "--timeout=30s"],
    );
    assert!(ok, "{out}{err}");

    // skiff rollout restart makes a new revision.
    let (ok, out, err) = skiff(&s, &["rollout", "restart", "deployment/web"]);
    assert!(ok, "{out}{err}");
    wait_for("restart rollout", Duration::from_secs(30), || {
        let (_, d) = s.http("GET", &format!("{DEPLOY}/web"), None);
        (d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "5"
            && d["status"]["updatedReplicas"] == 4
            && d["status"]["replicas"] == 4)
            .then_some(())
    });
}

#[test]
fn recreate_pause_history_and_progress_deadline() {
    let s = TestServer::start();
    let sim = Sim::start(&s, &[("n1", json!({}))]);
    let mut d = deployment("db", 2, json!({"type": "Recreate"}), "busybox:1");
    d["spec"]["revisionHistoryLimit"] = json!(1);
    apply(&s, DEPLOY, d);
    wait_for("2 ready", Duration::from_secs(20), || {
        let (_, d) = s.http("GET", &format!("{DEPLOY}/db"), None);
        (d["status"]["availableReplicas"] == 2).then_some(())
    });
    // Recreate: the new ReplicaSet gets pods only once no old pod is left.
    merge(
        &s,
        &format!("{DEPLOY}/db"),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}}),
    );
    wait_for("recreated on busybox:2", Duration::from_secs(20), || {
        let (new, old, _) = rs_sizes(&s, "db", "busybox:2");
        if new > 0 {
            let old_pods = live_pods(&s, "app=db")
                .into_iter()
                .filter(|p| p["spec"]["containers"][0]["image"] == "busybox:1")
                .count();
            assert_eq!(old_pods, 0, "new pods while old ones run");
        }
        let pods = live_pods(&s, "app=db");
        (new == 2 && old == 0 && pods.len() == 2 && pods.iter().all(ready)).then_some(())
    });

    // Paused: a template change makes no new ReplicaSet until resumed.
    let (ok, out, err) = skiff(&s, &["rollout", "pause", "deployment/db"]);
    assert!(ok, "{out}{err}");
    merge(
        &s,
        &format!("{DEPLOY}/db"),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:3"}]}}}}),
    );
    wait_for("paused condition", Duration::from_secs(10), || {
        let (_, d) = s.http("GET", &format!("{DEPLOY}/db"), None);
        d["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Progressing" && c["reason"] == "DeploymentPaused")
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(rs_sizes(&s, "db", "busybox:3").0, 0);
    assert!(items(&s, &format!("{RS}?labelSelector=app=db"))
        .iter()
        .all(|r| r["spec"]["template"]["spec"]["containers"][0]["image"] != "busybox:3"));
    let (ok, out, err) = skiff(&s, &["rollout", "undo", "deployment/db"]);
    assert!(!ok && err.contains("paused"), "{out}{err}");
    let (ok, out, err) = skiff(&s, &["rollout", "resume", "deployment/db"]);
    assert!(ok, "{out}{err}");
    wait_for(
        "resumed rollout to busybox:3",
        Duration::from_secs(20),
        || {
            let (new, old, rss) = rs_sizes(&s, "db", "busybox:3");
            // revisionHistoryLimit 1: one old ReplicaSet is kept.
            (new == 2 && old == 0 && rss.len() == 2).then_some(())
        },
    );

    // A rollout that cannot become ready exceeds its progress deadline.
    sim.set(|st| st.not_ready = true);
    let mut d = deployment("stuck", 1, json!({"type": "RollingUpdate"}), "busybox:1");
    d["spec"]["progressDeadlineSeconds"] = json!(2);
    apply(&s, DEPLOY, d);
    wait_for("ProgressDeadlineExceeded", Duration::from_secs(15), || {
        let (_, d) = s.http("GET", &format!("{DEPLOY}/stuck"), None);
        d["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| {
                c["type"] == "Progressing"
                    && c["status"] == "False"
                    && c["reason"] == "ProgressDeadlineExceeded"
            })
            .then_some(())
    });
    let (ok, out, err) = kubectl(
        &s,
        &["rollout", "status", "deployment/stuck", "--timeout=10s"],
    );
    assert!(
        !ok && err.contains("exceeded its progress deadline"),
        "{out}{err}"
    );
}

// ---------------------------------------------------------------------------------------
// DaemonSet

#[test]
fn daemonset_runs_one_pod_per_matching_node_and_rolls() {
    let s = TestServer::start();
    let sim = Sim::start(
        &s,
        &[
            ("e1", json!({"edge": "true"})),
            ("e2", json!({"edge": "true"})),
            ("core", json!({})),
        ],
    );
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": {"edge": "true"}, "containers": [{"name": "c", "image": "agent:1"}]}}}});
    apply(&s, "/apis/apps/v1/namespaces/default/daemonsets", ds);
    let pods = wait_for("a pod on e1 and e2", Duration::from_secs(15), || {
        let p = live_pods(&s, "app=agent");
        (p.len() == 2 && p.iter().all(ready)).then_some(p)
    });
    let mut nodes: Vec<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["e1", "e2"]);
    for p in &pods {
        let term = &p["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
        assert_eq!(term["matchFields"][0]["key"], "metadata.name");
        assert_eq!(term["matchFields"][0]["values"][0], p["spec"]["nodeName"]);
        let tols = p["spec"]["tolerations"].as_array().unwrap();
        assert!(
            tols.iter()
                .any(|t| t["key"] == "node.kubernetes.io/unreachable"
                    && t["effect"] == "NoExecute"
                    && t["tolerationSeconds"].is_null()),
            "{tols:?}"
        );
        assert!(tols
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unschedulable"));
    }
    // A node that joins gets its pod.
    create_node(&s.client(), "e3", json!({"edge": "true"}));
    sim.set(|st| st.nodes.push("e3".into()));
    wait_for("a pod on e3", Duration::from_secs(15), || {
        live_pods(&s, "app=agent")
            .iter()
            .any(|p| p["spec"]["nodeName"] == "e3")
            .then_some(())
    });
    let (ok, out, err) = kubectl(&s, &["rollout", "status", "ds/agent", "--timeout=20s"]);
    assert!(ok, "{out}{err}");
    let (_, d) = s.http(
        "GET",
        "/apis/apps/v1/namespaces/default/daemonsets/agent",
        None,
    );
    assert_eq!(d["status"]["desiredNumberScheduled"], 3, "{d}");
    assert_eq!(d["status"]["numberReady"], 3, "{d}");

    // A template change rolls out node by node (maxUnavailable 1): never two nodes without
    // an available pod, never two pods on a node.
    merge(
        &s,
        "/apis/apps/v1/namespaces/default/daemonsets/agent",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "agent:2"}]}}}}),
    );
    wait_for("agent:2 everywhere", Duration::from_secs(30), || {
        let all = items(
            &s,
            "/api/v1/namespaces/default/pods?labelSelector=app=agent",
        );
        let mut per_node = std::collections::HashMap::new();
        for p in all
            .iter()
            .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        {
            *per_node
                .entry(p["spec"]["nodeName"].as_str().unwrap_or("").to_string())
                .or_insert(0) += 1;
        }
        assert!(
            per_node.values().all(|n| *n <= 1),
            "two pods on a node: {per_node:?}"
        );
        let live = live_pods(&s, "app=agent");
        let unavailable = 3 - live.iter().filter(|p| ready(p)).count();
        assert!(
            unavailable <= 1 || live.len() < 3,
            "more than maxUnavailable down"
        );
        (live.len() == 3
            && live
                .iter()
                .all(|p| p["spec"]["containers"][0]["image"] == "agent:2" && ready(p)))
        .then_some(())
    });
    let (ok, out, err) = skiff(&s, &["rollout", "status", "ds/agent", "--timeout", "20s"]);
    assert!(ok && out.contains("successfully rolled out"), "{out}{err}");
}

// ---------------------------------------------------------------------------------------
// Node lifecycle

#[test]
fn unreachable_node_is_tainted_and_its_pods_replaced() {
    let s = TestServer::start_with(&[
        "--node-monitor-grace-period",
        "2s",
        "--default-toleration-seconds",
        "2",
    ]);
    let sim = Sim::start(&s, &[("n1", json!({})), ("n2", json!({}))]);
    apply(&s, RS, replica_set("web", "web", 2));
    let pods = wait_for("2 ready pods", Duration::from_secs(15), || {
        let p = live_pods(&s, "app=web");
        (p.len() == 2 && p.iter().all(ready)).then_some(p)
    });
    assert!(pods.iter().all(|p| p["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["tolerationSeconds"] == 2)));
    let on_n1: Vec<String> = pods
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "n1")
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(on_n1.len(), 1, "round robin puts one pod on each node");
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent", "agent:1")}});
    apply(&s, "/apis/apps/v1/namespaces/default/daemonsets", ds);
    wait_for("daemon pods running", Duration::from_secs(15), || {
        let p = live_pods(&s, "app=agent");
        (p.len() == 2 && p.iter().all(ready)).then_some(())
    });

    sim.set(|st| {
        st.down.insert("n1".into());
    });
    wait_for("n1 Unknown and tainted", Duration::from_secs(10), || {
        let (_, n) = s.http("GET", "/api/v1/nodes/n1", None);
        let unknown = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "Unknown");
        let tainted = n["spec"]["taints"]
            .as_array()?
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute");
        (unknown && tainted).then_some(())
    });
    // After the toleration, the pod is evicted (Terminating: its node cannot confirm) and
    // replaced on n2; the daemon pod stays.
    wait_for("eviction and replacement", Duration::from_secs(15), || {
        let (_, p) = s.http(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{}", on_n1[0]),
            None,
        );
        let terminating = p["metadata"]["deletionTimestamp"].is_string();
        let live = live_pods(&s, "app=web");
        (terminating
            && live.len() == 2
            && live
                .iter()
                .all(|p| p["spec"]["nodeName"] == "n2" && ready(p)))
        .then_some(())
    });
    assert!(
        live_pods(&s, "app=agent")
            .iter()
            .any(|p| p["spec"]["nodeName"] == "n1"),
        "daemon pods tolerate unreachable"
    );
    assert!(events(&s)
        .iter()
        .any(|e| e["reason"] == "TaintManagerEviction"));

    // n1 comes back: it confirms the deletion, so one copy of each pod remains.
    sim.set(|st| {
        st.down.clear();
    });
    wait_for(
        "n1 back, old pod gone, taint removed",
        Duration::from_secs(15),
        || {
            let all = items(&s, "/api/v1/namespaces/default/pods?labelSelector=app=web");
            let (_, n) = s.http("GET", "/api/v1/nodes/n1", None);
            let untainted = n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty());
            (all.len() == 2 && untainted).then_some(())
        },
    );
    assert_eq!(
        live_pods(&s, "app=agent").len(),
        2,
        "no duplicate daemon pods"
    );
}

// ---------------------------------------------------------------------------------------
// Garbage collection

#[test]
fn garbage_collection_background_foreground_orphan() {
    let s = TestServer::start();
    let sim = Sim::start(&s, &[("n1", json!({}))]);

    // Background (the default): a Deployment takes its ReplicaSet and pods along.
    apply(
        &s,
        DEPLOY,
        deployment("bg", 2, json!({"type": "RollingUpdate"}), "busybox:1"),
    );
    wait_for("bg pods", Duration::from_secs(15), || {
        (live_pods(&s, "app=bg").len() == 2).then_some(())
    });
    let (code, _) = s.http("DELETE", &format!("{DEPLOY}/bg"), None);
    assert_eq!(code, 200);
    wait_for("bg cascade", Duration::from_secs(15), || {
        let rs = items(&s, &format!("{RS}?labelSelector=app=bg"));
        let pods = items(&s, "/api/v1/namespaces/default/pods?labelSelector=app=bg");
        (rs.is_empty() && pods.is_empty()).then_some(())
    });

    // Foreground: the owner stays (with the finalizer) until its pods are gone.
    sim.set(|st| st.hold_deletions = true);
    apply(&s, RS, replica_set("fg", "fg", 2));
    wait_for("fg pods", Duration::from_secs(15), || {
        (live_pods(&s, "app=fg").iter().filter(|p| ready(p)).count() == 2).then_some(())
    });
    let (code, v) = s.json(
        "DELETE",
        &format!("{RS}/fg"),
        &json!({"propagationPolicy": "Foreground"}),
    );
    assert_eq!(code, 200, "{v}");
    assert!(
        v["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "foregroundDeletion"),
        "{v}"
    );
    wait_for("pods terminating", Duration::from_secs(10), || {
        let pods = items(&s, "/api/v1/namespaces/default/pods?labelSelector=app=fg");
        (pods.len() == 2
            && pods
                .iter()
                .all(|p| p["metadata"]["deletionTimestamp"].is_string()))
        .then_some(())
    });
    let (code, _) = s.http("GET", &format!("{RS}/fg"), None);
    assert_eq!(code, 200, "the owner waits for its dependents");
    sim.set(|st| st.hold_deletions = false);
    wait_for("fg gone", Duration::from_secs(10), || {
        let (code, _) = s.http("GET", &format!("{RS}/fg"), None);
        (code == 404
            && items(&s, "/api/v1/namespaces/default/pods?labelSelector=app=fg").is_empty())
        .then_some(())
    });

    // Orphan: the owner goes, its pods stay without an owner reference.
    apply(&s, RS, replica_set("or", "or", 2));
    wait_for("or pods", Duration::from_secs(15), || {
        (live_pods(&s, "app=or").len() == 2).then_some(())
    });
    let (ok, out, err) = kubectl(&s, &["delete", "rs", "or", "--cascade=orphan"]);
    assert!(ok, "{out}{err}");
    wait_for("or gone, pods orphaned", Duration::from_secs(10), || {
        let (code, _) = s.http("GET", &format!("{RS}/or"), None);
        let pods = live_pods(&s, "app=or");
        (code == 404
            && pods.len() == 2
            && pods.iter().all(|p| {
                p["metadata"]["ownerReferences"]
                    .as_array()
                    .is_none_or(|o| o.is_empty())
            }))
        .then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        live_pods(&s, "app=or").len(),
        2,
        "orphans are not collected"
    );

    // A pod naming an owner that does not exist is collected.
    apply(
        &s,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dangling", "labels": {"x": "y"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "0000"}]}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}),
    );
    let cm = apply(
        &s,
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
    );
    apply(
        &s,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "owned", "labels": {"x": "y"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": cm["metadata"]["uid"]}]}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}),
    );
    let (code, _) = s.http(
        "DELETE",
        "/api/v1/namespaces/default/configmaps/owner",
        None,
    );
    assert_eq!(code, 200);
    wait_for(
        "pods of missing owners collected",
        Duration::from_secs(10),
        || {
            let (a, _) = s.http("GET", "/api/v1/namespaces/default/pods/owned", None);
            let (b, _) = s.http("GET", "/api/v1/namespaces/default/pods/dangling", None);
            (a == 404 && b == 404).then_some(())
        },
    );
}

// ---------------------------------------------------------------------------------------
// Pod garbage collection

#[test]
fn pods_of_a_node_that_does_not_exist_are_collected() {
    let s = TestServer::start_with(&["--node-monitor-grace-period", "2s"]);
    let c = s.client();
    // A node object that exists but never reports: its pods wait for it, as in Kubernetes.
    create_node(&c, "quiet", json!({}));
    let pod = |name: &str, node: &str| {
        // The Kubernetes docs' pod-nginx-specific-node.yaml, bound by hand.
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "nginx", "image": "nginx"}]}})
    };
    const PODS: &str = "/api/v1/namespaces/default/pods";
    apply(&s, PODS, pod("deleted", "foo-node"));
    apply(&s, PODS, pod("left", "foo-node"));
    apply(&s, PODS, pod("waits", "quiet"));
    for name in ["deleted", "waits"] {
        let (code, body) = s.http("DELETE", &format!("{PODS}/{name}"), None);
        assert_eq!(code, 200, "{body}");
        assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    }
    // Both pods of the missing node go: the deleted one and the one nobody deleted (marked
    // Failed first, as Kubernetes' pod GC does).
    let started = Instant::now();
    wait_for(
        "the missing node's pods to go",
        Duration::from_secs(30),
        || {
            let names: Vec<String> = items(&s, PODS)
                .iter()
                .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect();
            (names == ["waits"]).then_some(())
        },
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before the quarantine"
    );
    // The pod of the node that exists stays Terminating until its node confirms.
    std::thread::sleep(Duration::from_secs(3));
    let (code, waits) = s.http("GET", &format!("{PODS}/waits"), None);
    assert_eq!(code, 200, "{waits}");
    assert!(waits["metadata"]["deletionTimestamp"].is_string());
    // A namespace holding such a pod finishes deleting.
    let (code, _) = s.json(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}),
    );
    assert_eq!(code, 201);
    apply(
        &s,
        "/api/v1/namespaces/gone/pods",
        pod("stuck", "another-missing-node"),
    );
    let (code, _) = s.http("DELETE", "/api/v1/namespaces/gone", None);
    assert_eq!(code, 200);
    wait_for("namespace gone to finish", Duration::from_secs(30), || {
        (s.http("GET", "/api/v1/namespaces/gone", None).0 == 404).then_some(())
    });
}
