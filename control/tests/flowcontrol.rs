//! API Priority and Fairness on a real server (issue 33 part 4): a user flooding the API
//! gets 429s while a node's heartbeats (its Lease and its status, as an agent writes them)
//! and an admin's kubectl keep their latency; kubectl shows the bootstrap configuration the
//! server keeps; answers carry the classification's headers; the debug dumps.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::client::{Client, ClientConfig};
use api::kubeconfig::Kubeconfig;
use common::{eventually, kubectl, TestServer};
use serde_json::{json, Value};

const FC: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";
/// Concurrent clients of the flooding user.
const FLOOD_CLIENTS: usize = 128;
/// ConfigMaps in the namespace the flood lists (each list takes a while).
const FLOOD_CONFIGMAPS: usize = 300;
/// Rounds of the node's heartbeat and of the admin's requests measured.
const ROUNDS: usize = 40;

fn client_with_token(s: &TestServer, token: &str) -> Client {
    let kc = Kubeconfig::load(&s.kubeconfig()).expect("kubeconfig");
    let mut config = ClientConfig::from_kubeconfig(&kc, None).expect("config");
    config.token = Some(token.into());
    config.client_cert_pem = None;
    config.client_key_pem = None;
    Client::new(config).expect("client")
}

fn request(c: &Client, method: &str, path: &str, body: Option<Value>) -> api::client::Response {
    let body = body.map(|b| {
        let ct = if method == "PATCH" {
            "application/strategic-merge-patch+json"
        } else {
            "application/json"
        };
        (ct, serde_json::to_vec(&b).expect("json"))
    });
    smol::block_on(c.request(method, path, body, "application/json")).expect("request")
}

/// The 99th percentile (nearest rank).
fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let rank = (v.len() * 99).div_ceil(100).max(1);
    v[rank - 1]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Waits until the server keeps its bootstrap configuration and its filter uses it.
fn bootstrap_in_force(s: &TestServer) {
    eventually(60, "the bootstrap configuration", || {
        let (code, fs) = s.http("GET", &format!("{FC}/flowschemas"), None);
        let (pcode, pl) = s.http("GET", &format!("{FC}/prioritylevelconfigurations"), None);
        let n = fs["items"].as_array().map_or(0, Vec::len);
        let p = pl["items"].as_array().map_or(0, Vec::len);
        (code == 200 && pcode == 200 && n >= 13 && p >= 8).then_some(())
    });
    // The filter has digested them: an admin's answer names the stored exempt schema.
    let (_, exempt) = s.http("GET", &format!("{FC}/flowschemas/exempt"), None);
    let uid = exempt["metadata"]["uid"].as_str().expect("uid").to_string();
    let c = s.client();
    eventually(30, "the stored objects in force", || {
        let r = smol::block_on(c.request("GET", "/api/v1/namespaces", None, "application/json"))
            .ok()?;
        (r.header("X-Kubernetes-PF-FlowSchema-UID") == Some(uid.as_str())).then_some(())
    });
}

/// One heartbeat of node pi1, as its agent sends it: the Lease renewed, the status patched.
fn heartbeat(node: &Client, latencies: &mut Vec<Duration>, codes: &mut Vec<u16>) {
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/pi1";
    let now = api::meta::MicroTime::now();
    let started = Instant::now();
    let r = request(node, "GET", lease_path, None);
    codes.push(r.status);
    let mut lease: Value = r.json().unwrap_or(Value::Null);
    lease["spec"]["renewTime"] = json!(now);
    let r = request(node, "PUT", lease_path, Some(lease));
    codes.push(r.status);
    latencies.push(started.elapsed());
    let started = Instant::now();
    let stamp = api::meta::Time::now();
    let r = request(
        node,
        "PATCH",
        "/api/v1/nodes/pi1/status",
        Some(
            json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
            "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}}),
        ),
    );
    codes.push(r.status);
    latencies.push(started.elapsed());
}

/// What an admin and a node see over `rounds`.
struct Measured {
    node: Vec<Duration>,
    node_codes: Vec<u16>,
    admin: Vec<Duration>,
    admin_codes: Vec<u16>,
    kubectl: Vec<Duration>,
}

fn measure(s: &TestServer, node: &Client, admin: &Client, rounds: usize) -> Measured {
    let mut m = Measured {
        node: Vec::new(),
        node_codes: Vec::new(),
        admin: Vec::new(),
        admin_codes: Vec::new(),
        kubectl: Vec::new(),
    };
    for i in 0..rounds {
        heartbeat(node, &mut m.node, &mut m.node_codes);
        let started = Instant::now();
        let r = request(
            admin,
            "GET",
            "/api/v1/namespaces/flood/configmaps?limit=50",
            None,
        );
        m.admin.push(started.elapsed());
        m.admin_codes.push(r.status);
        if i % 8 == 0 {
            let started = Instant::now();
            let (ok, out, err) =
                kubectl(s, &["get", "configmaps", "-n", "flood", "--chunk-size=50"]);
            assert!(ok, "admin's kubectl: {out}{err}");
            m.kubectl.push(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    m
}

#[derive(Default)]
struct Flood {
    ok: usize,
    too_many: usize,
    other: Vec<u16>,
    latencies: Vec<Duration>,
    /// One 429 answer, whole.
    sample: Option<api::client::Response>,
}

/// With `SKIFF_FLOOD_FIGURES=1` the same flood also runs on a server without priority and
/// fairness, for the figures beside (nothing is asserted of it):
/// `SKIFF_FLOOD_FIGURES=1 cargo test --test flowcontrol -- --nocapture`.
#[test]
fn a_flooding_user_gets_429s_while_nodes_and_admins_keep_their_latency() {
    flood_scenario(true);
    if std::env::var_os("SKIFF_FLOOD_FIGURES").is_some() {
        flood_scenario(false);
    }
}

fn flood_scenario(apf: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "flood-token,flooder,1001,\nnode-token,system:node:pi1,1002,\"system:nodes\"\n",
    )
    .expect("token file");
    // Six seats in all: global-default (the flooder's) has 1 of them, node-high 1.
    let s = TestServer::start_with(&[
        "--token-auth-file",
        tokens.to_str().expect("path"),
        "--max-requests-inflight",
        "4",
        "--max-mutating-requests-inflight",
        "2",
        if apf {
            "--enable-priority-and-fairness=true"
        } else {
            "--enable-priority-and-fairness=false"
        },
    ]);
    if apf {
        bootstrap_in_force(&s);
    }
    let admin = s.client();
    let flooder = client_with_token(&s, "flood-token");
    let node = client_with_token(&s, "node-token");

    // The flooder may read ConfigMaps; the flood namespace has many.
    for (path, body) in [
        ("/api/v1/namespaces", json!({"metadata": {"name": "flood"}})),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({"metadata": {"name": "flooder-view"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "flooder"}]}),
        ),
        ("/api/v1/nodes", json!({"metadata": {"name": "pi1"}})),
        (
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            json!({"metadata": {"name": "pi1"},
                   "spec": {"holderIdentity": "pi1", "leaseDurationSeconds": 40}}),
        ),
    ] {
        let (code, v) = s.json("POST", path, &body);
        assert_eq!(code, 201, "{path}: {v}");
    }
    let data = "x".repeat(2048);
    std::thread::scope(|scope| {
        for part in 0..4 {
            let admin = admin.clone();
            let data = data.clone();
            scope.spawn(move || {
                for i in (part..FLOOD_CONFIGMAPS).step_by(4) {
                    let r = request(
                        &admin,
                        "POST",
                        "/api/v1/namespaces/flood/configmaps",
                        Some(json!({"metadata": {"name": format!("cm-{i}")}, "data": {"d": data}})),
                    );
                    assert_eq!(r.status, 201);
                }
            });
        }
    });

    // Without the flood.
    let quiet = measure(&s, &node, &admin, ROUNDS);

    // The flood: every client lists the namespace over and over, with kubectl's
    // `--request-timeout=1s` (a request waits at most a quarter of it in its queue).
    let stop = Arc::new(AtomicBool::new(false));
    let flood = Arc::new(Mutex::new(Flood::default()));
    let flooding = {
        let (stop, flood, flooder) = (stop.clone(), flood.clone(), flooder.clone());
        std::thread::spawn(move || {
            smol::block_on(async {
                let tasks: Vec<smol::Task<()>> = (0..FLOOD_CLIENTS)
                    .map(|_| {
                        let (stop, flood, c) = (stop.clone(), flood.clone(), flooder.clone());
                        smol::spawn(async move {
                            let deadline = Instant::now() + Duration::from_secs(120);
                            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                                let started = Instant::now();
                                let r = c
                                    .request(
                                        "GET",
                                        "/api/v1/namespaces/flood/configmaps?timeout=1s",
                                        None,
                                        "application/json",
                                    )
                                    .await;
                                let took = started.elapsed();
                                let mut f = flood.lock().expect("flood");
                                f.latencies.push(took);
                                match r {
                                    Ok(r) if r.status == 200 => f.ok += 1,
                                    Ok(r) if r.status == 429 => {
                                        f.too_many += 1;
                                        f.sample.get_or_insert(r);
                                    }
                                    Ok(r) => f.other.push(r.status),
                                    Err(_) => f.other.push(0),
                                }
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await;
                }
            })
        })
    };
    if apf {
        eventually(60, "the flooder turned away", || {
            (flood.lock().expect("flood").too_many > 0).then_some(())
        });
    } else {
        std::thread::sleep(Duration::from_secs(3));
    }
    let flooded = measure(&s, &node, &admin, ROUNDS);
    let (code, levels) = {
        let r = request(
            &admin,
            "GET",
            "/debug/api_priority_and_fairness/dump_priority_levels",
            None,
        );
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    let (queues_code, queues) = {
        let r = request(
            &admin,
            "GET",
            "/debug/api_priority_and_fairness/dump_queues",
            None,
        );
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    let denied = request(
        &flooder,
        "GET",
        "/debug/api_priority_and_fairness/dump_requests",
        None,
    );
    stop.store(true, Ordering::SeqCst);
    flooding.join().expect("the flood ends");
    let f = flood.lock().expect("flood");

    println!(
        "priority and fairness {}; flooder: {} served, {} turned away (429), median {:?}, p99 {:?}",
        if apf { "on" } else { "off" },
        f.ok,
        f.too_many,
        median(f.latencies.clone()),
        p99(f.latencies.clone())
    );
    for (what, quiet, flooded) in [
        ("node heartbeat requests", &quiet.node, &flooded.node),
        ("admin's lists", &quiet.admin, &flooded.admin),
        ("admin's kubectl runs", &quiet.kubectl, &flooded.kubectl),
    ] {
        println!(
            "{what}: without the flood median {:?} p99 {:?}; during it median {:?} p99 {:?}",
            median(quiet.clone()),
            p99(quiet.clone()),
            median(flooded.clone()),
            p99(flooded.clone())
        );
    }

    if !apf {
        return;
    }
    // The flooder was served and turned away; others never.
    assert!(f.ok > 0, "the flooder was served too");
    assert!(f.too_many > 0);
    assert!(f.other.is_empty(), "{:?}", f.other);
    for c in quiet.node_codes.iter().chain(&flooded.node_codes) {
        assert!((200..300).contains(c), "the node's heartbeat answered {c}");
    }
    for c in quiet.admin_codes.iter().chain(&flooded.admin_codes) {
        assert_eq!(*c, 200, "the admin's list answered {c}");
    }
    // Their latency stays bounded: queued behind nobody, they share only the CPU.
    assert!(
        p99(flooded.node.clone()) < Duration::from_secs(2),
        "node heartbeats p99 {:?}",
        p99(flooded.node.clone())
    );
    assert!(
        p99(flooded.admin.clone()) < Duration::from_secs(2),
        "admin p99 {:?}",
        p99(flooded.admin.clone())
    );
    assert!(flooded.kubectl.iter().all(|d| *d < Duration::from_secs(10)));

    // A 429 as kube-apiserver writes it.
    let sample = f.sample.as_ref().expect("a 429");
    assert_eq!(
        String::from_utf8_lossy(&sample.body),
        "Too many requests, please try again later.\n"
    );
    assert_eq!(
        sample.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let retry: u64 = sample
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=32).contains(&retry));
    let (_, gd_level) = s.http(
        "GET",
        &format!("{FC}/prioritylevelconfigurations/global-default"),
        None,
    );
    let (_, gd_schema) = s.http("GET", &format!("{FC}/flowschemas/global-default"), None);
    assert_eq!(
        sample.header("x-kubernetes-pf-prioritylevel-uid"),
        gd_level["metadata"]["uid"].as_str()
    );
    assert_eq!(
        sample.header("x-kubernetes-pf-flowschema-uid"),
        gd_schema["metadata"]["uid"].as_str()
    );

    // The dumps: the flooder's level rejected requests; only those allowed read them.
    assert_eq!(code, 200, "{levels}");
    let line = levels
        .lines()
        .find(|l| l.starts_with("global-default,"))
        .expect("global-default in the dump");
    let cells: Vec<&str> = line.split(',').map(str::trim).collect();
    assert!(cells[7].parse::<u64>().expect("rejected") > 0, "{levels}");
    assert_eq!(queues_code, 200);
    assert!(
        queues
            .lines()
            .filter(|l| l.starts_with("global-default,"))
            .count()
            == 128,
        "{queues}"
    );
    assert_eq!(denied.status, 403);
}

#[test]
fn kubectl_shows_the_configuration_the_server_keeps() {
    let s = TestServer::start();
    bootstrap_in_force(&s);
    // The conditions are written: no schema is missing its level.
    eventually(30, "the Dangling conditions", || {
        let (_, list) = s.http("GET", &format!("{FC}/flowschemas"), None);
        list["items"]
            .as_array()?
            .iter()
            .all(|f| f["status"]["conditions"][0]["status"] == "False")
            .then_some(())
    });
    let (ok, out, err) = kubectl(&s, &["get", "flowschemas"]);
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "PRIORITYLEVEL",
            "MATCHINGPRECEDENCE",
            "DISTINGUISHERMETHOD",
            "AGE",
            "MISSINGPL"
        ]
    );
    let names: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "exempt",
            "probes",
            "system-leader-election",
            "endpoint-controller",
            "workload-leader-election",
            "system-node-high",
            "system-nodes",
            "kube-controller-manager",
            "kube-scheduler",
            "kube-system-service-accounts",
            "service-accounts",
            "global-default",
            "catch-all",
        ],
        "{out}"
    );
    let row = |name: &str| rows.iter().find(|r| r[0] == name).cloned().expect(name);
    let exempt = row("exempt");
    assert_eq!(
        [exempt[1], exempt[2], exempt[3], exempt[5]],
        ["exempt", "1", "<none>", "False"]
    );
    let kcm = row("kube-controller-manager");
    assert_eq!(
        [kcm[1], kcm[2], kcm[3]],
        ["workload-high", "800", "ByNamespace"]
    );

    let (ok, out, err) = kubectl(&s, &["get", "prioritylevelconfigurations"]);
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "TYPE",
            "NOMINALCONCURRENCYSHARES",
            "QUEUES",
            "HANDSIZE",
            "QUEUELENGTHLIMIT",
            "AGE"
        ]
    );
    let row = |name: &str| rows.iter().find(|r| r[0] == name).cloned().expect(name);
    assert_eq!(
        &row("exempt")[1..6],
        ["Exempt", "<none>", "<none>", "<none>", "<none>"]
    );
    assert_eq!(
        &row("catch-all")[1..6],
        ["Limited", "5", "<none>", "<none>", "<none>"]
    );
    assert_eq!(
        &row("global-default")[1..6],
        ["Limited", "20", "128", "6", "50"]
    );
    assert_eq!(
        &row("leader-election")[1..6],
        ["Limited", "10", "16", "4", "50"]
    );
    assert_eq!(rows.len(), 9, "{out}");

    // A mandatory object's spec is fixed; deleted, it comes back.
    let (code, v) = s.http(
        "PATCH",
        &format!("{FC}/flowschemas/exempt"),
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&json!({"spec": {"matchingPrecedence": 2}})).expect("json"),
        )),
    );
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec of 'exempt' must equal the fixed value")),
        "{v}"
    );
    let (ok, _, err) = kubectl(&s, &["delete", "flowschema", "catch-all"]);
    assert!(ok, "{err}");
    eventually(30, "catch-all recreated", || {
        (s.http("GET", &format!("{FC}/flowschemas/catch-all"), None)
            .0
            == 200)
            .then_some(())
    });

    // A suggested object: kept as its admin set it while annotated false, put back when
    // true again.
    let path = format!("{FC}/prioritylevelconfigurations/global-default");
    let tuned = json!({"metadata": {"annotations": {"apf.kubernetes.io/autoupdate-spec": "false"}},
                       "spec": {"limited": {"nominalConcurrencyShares": 60}}});
    let (code, v) = s.http(
        "PATCH",
        &path,
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&tuned).expect("json"),
        )),
    );
    assert_eq!(code, 200, "{v}");
    std::thread::sleep(Duration::from_secs(2));
    let (_, v) = s.http("GET", &path, None);
    assert_eq!(v["spec"]["limited"]["nominalConcurrencyShares"], 60);
    let back = json!({"metadata": {"annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}}});
    let (code, _) = s.http(
        "PATCH",
        &path,
        Some((
            "application/merge-patch+json",
            serde_json::to_vec(&back).expect("json"),
        )),
    );
    assert_eq!(code, 200);
    eventually(30, "global-default put back", || {
        let (_, v) = s.http("GET", &path, None);
        (v["spec"]["limited"]["nominalConcurrencyShares"] == 20).then_some(())
    });

    // A schema naming a level that does not exist dangles.
    let (ok, _, err) = kubectl_apply(
        &s,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata:\n  name: orphan\nspec:\n  priorityLevelConfiguration:\n    name: nowhere\n  rules:\n  - subjects:\n    - kind: User\n      user:\n        name: nobody\n    nonResourceRules:\n    - verbs: [\"get\"]\n      nonResourceURLs: [\"/version\"]\n",
    );
    assert!(ok, "{err}");
    eventually(30, "orphan dangling", || {
        let (ok, out, _) = kubectl(&s, &["get", "flowschema", "orphan", "--no-headers"]);
        (ok && out.split_whitespace().last() == Some("True")).then_some(())
    });
    let (_, v) = s.http("GET", &format!("{FC}/flowschemas/orphan"), None);
    assert_eq!(
        v["status"]["conditions"][0]["message"],
        "This FlowSchema references the PriorityLevelConfiguration object named \"nowhere\" but there is no such object"
    );
    assert_eq!(v["status"]["conditions"][0]["reason"], "NotFound");
}

/// `kubectl apply -f -` with `yaml` on its input.
fn kubectl_apply(s: &TestServer, yaml: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", s.data_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
