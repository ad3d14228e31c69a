//! The etcd datastore (`skiff server --datastore-endpoint`) against a real 3-member etcd
//! cluster (Debian's etcd-server, installed by `scripts/setup.sh --python`) on loopback ports,
//! with two skiff servers sharing it: a write through one is read and watched through the
//! other, optimistic concurrency holds across them, Secrets sealed by one open on the other,
//! a killed etcd member changes nothing, and the controllers move to the other server within
//! 20 s of a `kill -9` of the leader.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::{eventually, TestServer};
use serde_json::{json, Value};

/// A data dir holding what the servers of one cluster share: the CA, the service-account
/// key, the secrets key and the admin token (what `skiff server --join` fetches; these tests
/// copy it, and server_join.rs tests the join).
fn shared_dir(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pki")).unwrap();
    for f in [
        "secrets.key",
        "admin-token",
        "pki/ca.crt",
        "pki/ca.key",
        "pki/service-account.key",
    ] {
        std::fs::copy(from.join(f), dir.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    dir
}

fn start_pair(cluster: &EtcdCluster, extra: &[&str]) -> (TestServer, TestServer) {
    let eps = cluster.endpoints();
    let mut args = vec!["--datastore-endpoint", eps.as_str()];
    args.extend_from_slice(extra);
    let a = TestServer::start_with(&args);
    let b = TestServer::start_in(shared_dir(a.data_dir()), &[], &args);
    (a, b)
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn two_servers_share_reads_writes_watches_and_conflicts_through_etcd() {
    let mut cluster = EtcdCluster::start(3);
    let (a, b) = start_pair(&cluster, &[]);

    // Created through one server, read through the other with the same resourceVersion.
    let (code, created) = a.json(
        "POST",
        CMS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "shared"}, "data": {"k": "v1"}}),
    );
    assert_eq!(code, 201, "{created}");
    let (code, read) = b.http("GET", &format!("{CMS}/shared"), None);
    assert_eq!(code, 200, "{read}");
    assert_eq!(read["data"]["k"], "v1");
    assert_eq!(rv(&read), rv(&created));

    // Optimistic concurrency across servers: b's update wins, a's stale one gets 409.
    let mut update = read.clone();
    update["data"]["k"] = json!("v2");
    let (code, updated) = b.json("PUT", &format!("{CMS}/shared"), &update);
    assert_eq!(code, 200, "{updated}");
    assert_ne!(rv(&updated), rv(&created));
    let mut stale = created.clone();
    stale["data"]["k"] = json!("v3");
    let (code, refused) = a.json("PUT", &format!("{CMS}/shared"), &stale);
    assert_eq!(code, 409, "{refused}");
    let (_, now) = a.http("GET", &format!("{CMS}/shared"), None);
    assert_eq!(now["data"]["k"], "v2");
    assert_eq!(rv(&now), rv(&updated));

    // A create through b of a name a made: b's first attempt takes the name for free
    // without a read, etcd refuses its transaction, and the second attempt finds the object.
    let (code, dup) = b.json(
        "POST",
        CMS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}}),
    );
    assert_eq!(code, 409, "{dup}");
    assert_eq!(dup["reason"], "AlreadyExists", "{dup}");

    // Admission on b reads namespaces and LimitRanges from the copy its etcd watch keeps; a
    // namespace and a LimitRange made through a a moment before are there, or the copy's
    // lag loses the transaction's compare and the create runs again on etcd's reads.
    for round in 0..5 {
        let ns = format!("fresh-{round}");
        let (code, v) = a.json(
            "POST",
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
        assert_eq!(code, 201, "{v}");
        let (code, v) = a.json(
            "POST",
            &format!("/api/v1/namespaces/{ns}/limitranges"),
            &json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "lr"},
                    "spec": {"limits": [{"type": "Container",
                                         "default": {"memory": "64Mi"}}]}}),
        );
        assert_eq!(code, 201, "{v}");
        let (code, pod) = b.json(
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods"),
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        );
        assert_eq!(code, 201, "{pod}");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"], "64Mi",
            "the LimitRange made through a was not applied by b: {pod}"
        );
    }

    // A custom resource defined through one server is served by the other, and its objects
    // are shared (stored under /registry/<group>/<plural>/, as kube-apiserver lays them out).
    let (code, crd) = a.json(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gadgets.etcd.example.com"},
                "spec": {"group": "etcd.example.com", "scope": "Namespaced",
                         "names": {"plural": "gadgets", "kind": "Gadget"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                             "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                 "spec": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}}]}}),
    );
    assert_eq!(code, 201, "{crd}");
    const GADGETS: &str = "/apis/etcd.example.com/v1/namespaces/default/gadgets";
    eventually(30, "the other server serves the custom resource", || {
        (b.http("GET", GADGETS, None).0 == 200).then_some(())
    });
    let (code, made) = b.json(
        "POST",
        GADGETS,
        &json!({"apiVersion": "etcd.example.com/v1", "kind": "Gadget",
                "metadata": {"name": "g"}, "spec": {"n": 1, "dropped": true}}),
    );
    assert_eq!(code, 201, "{made}");
    let (code, read) = a.http("GET", &format!("{GADGETS}/g"), None);
    assert_eq!(code, 200, "{read}");
    assert_eq!(read["spec"], json!({"n": 1}), "{read}");
    assert_eq!(rv(&read), rv(&made));

    // A Secret sealed by one server opens on the other (they share secrets.key).
    common::etcd::secret_sealed_by_one_opens_on_the_other(&a, &b);

    // A watch on b from its list's revision sees a create made through a.
    let (_, list) = b.http("GET", CMS, None);
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let watcher = {
        let client = b.client();
        std::thread::spawn(move || {
            let path = format!("{CMS}?watch=1&resourceVersion={from}&timeoutSeconds=4");
            let r = smol::block_on(client.request("GET", &path, None, "application/json"))
                .expect("watch");
            String::from_utf8_lossy(&r.body).to_string()
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let (code, _) = a.json(
        "POST",
        CMS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}}),
    );
    assert_eq!(code, 201);
    let events = watcher.join().unwrap();
    let seen: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        seen.iter()
            .any(|e| e["type"] == "ADDED" && e["object"]["metadata"]["name"] == "late"),
        "b's watch did not see a's create: {events}"
    );
    assert!(
        !seen
            .iter()
            .any(|e| e["object"]["metadata"]["name"] == "shared"),
        "the watch replayed events from before its revision: {events}"
    );

    // A node Lease's renewal through one server is seen through the other, without a write
    // to etcd: each server keeps the renewals it receives in memory and publishes them to
    // the others in one digest every few seconds.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = |renew: api::meta::MicroTime| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "n1"},
               "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                        "renewTime": renew}})
    };
    let created_at = api::meta::MicroTime::now();
    let (code, created) = a.json("POST", leases, &lease(created_at));
    assert_eq!(code, 201, "{created}");
    let renewed_at = api::meta::MicroTime(created_at.0 + 10_000_000);
    let (code, v) = a.json("PUT", &format!("{leases}/n1"), &lease(renewed_at));
    assert_eq!(code, 200, "{v}");
    let renewed = json!(renewed_at);
    let seen = eventually(20, "b to show a's renewal", || {
        let (_, v) = b.http("GET", &format!("{leases}/n1"), None);
        (v["spec"]["renewTime"] == renewed).then_some(v)
    });
    assert_eq!(
        seen["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
        "the renewal was written to etcd: {seen}"
    );

    // One etcd member down: writes and reads go on through both servers.
    cluster.kill(0);
    let made = eventually(20, "a create with one etcd member down", || {
        let (code, v) = a.json(
            "POST",
            CMS,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after-kill"}}),
        );
        (code == 201 || code == 409).then_some(v)
    });
    let _ = made;
    eventually(20, "b reads the create with one member down", || {
        let (code, _) = b.http("GET", &format!("{CMS}/after-kill"), None);
        (code == 200).then_some(())
    });
}

/// Which of the servers leads the controllers (kube-controller-manager's
/// `leader_election_master_status` gauge).
fn leads(s: &TestServer) -> bool {
    let c = s.client();
    let Ok(r) = smol::block_on(c.request("GET", "/metrics", None, "text/plain")) else {
        return false;
    };
    String::from_utf8_lossy(&r.body)
        .lines()
        .any(|l| l.starts_with("leader_election_master_status") && l.ends_with(" 1"))
}

#[test]
fn the_controllers_move_to_the_other_server_when_the_leader_is_killed() {
    let cluster = EtcdCluster::start(3);
    let (mut a, mut b) = start_pair(&cluster, &[]);
    // Exactly one leads.
    let first = eventually(30, "one server leads", || match (leads(&a), leads(&b)) {
        (true, false) => Some(0),
        (false, true) => Some(1),
        _ => None,
    });
    let (leader, other) = if first == 0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    // The leader's controllers act on a ReplicaSet made through the other server.
    let rs = |name: &str, replicas: u32| {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": name},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    let pods_of = |s: &TestServer, app: &str| -> usize {
        let (_, v) = s.http(
            "GET",
            &format!("/api/v1/namespaces/default/pods?labelSelector=app%3D{app}"),
            None,
        );
        v["items"].as_array().map_or(0, Vec::len)
    };
    let (code, v) = other.json(
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        &rs("before", 2),
    );
    assert_eq!(code, 201, "{v}");
    eventually(
        20,
        "the leader's ReplicaSet controller makes 2 pods",
        || (pods_of(other, "before") == 2).then_some(()),
    );

    // kill -9 the leader: the other server takes the Lease within 20 s and runs the
    // controllers, so a ReplicaSet created afterwards gets its pods.
    let _ = leader.child.kill();
    let _ = leader.child.wait();
    let killed = Instant::now();
    eventually(25, "the other server leads", || leads(other).then_some(()));
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(20), "takeover took {took:?}");
    let (code, v) = other.json(
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        &rs("after", 3),
    );
    assert_eq!(code, 201, "{v}");
    eventually(20, "the new leader's controllers make 3 pods", || {
        (pods_of(other, "after") == 3).then_some(())
    });
    // Nothing acknowledged was lost.
    assert_eq!(pods_of(other, "before"), 2);
    eprintln!("takeover after kill -9 of the leader: {took:?}");
}

/// Runs `skiff migrate`; panics with its output when it fails.
fn migrate(from: &str, to: &str) -> String {
    let out = Command::new(common::skiff_bin())
        .args(["migrate", "--from", from, "--to", to])
        .output()
        .expect("run skiff migrate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "skiff migrate {from} {to}: {text}");
    text
}

#[test]
fn migrate_copies_a_cluster_from_redb_to_etcd_and_back() {
    let cluster = EtcdCluster::start(1);
    let eps = cluster.endpoints();
    // A cluster on the embedded store, with a ConfigMap and a sealed Secret.
    let mut first = TestServer::start();
    let (code, cm) = first.json(
        "POST",
        CMS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kept", "labels": {"a": "b"}}, "data": {"k": "v"}}),
    );
    assert_eq!(code, 201, "{cm}");
    let (code, _) = first.json(
        "POST",
        "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "pw"}, "data": {"p": "aHVudGVyMg=="}}),
    );
    assert_eq!(code, 201);
    // And a custom resource with an object.
    let (code, crd) = first.json(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "movers.migrate.example.com"},
                "spec": {"group": "migrate.example.com", "scope": "Namespaced",
                         "names": {"plural": "movers", "kind": "Mover"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                             "schema": {"openAPIV3Schema": {"type": "object",
                                 "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    );
    assert_eq!(code, 201, "{crd}");
    const MOVERS: &str = "/apis/migrate.example.com/v1/namespaces/default/movers";
    let made = eventually(30, "the custom resource is served", || {
        let (code, v) = first.json(
            "POST",
            MOVERS,
            &json!({"apiVersion": "migrate.example.com/v1", "kind": "Mover",
                    "metadata": {"name": "m"}, "spec": {"n": 1}}),
        );
        (code == 201).then_some(v)
    });
    assert!(first.terminate().success());
    let redb = format!("redb:{}", first.data_dir().display());
    let out = migrate(&redb, &format!("etcd:{eps}"));
    assert!(out.contains("configmaps"), "{out}");
    // A second migration into the now full etcd is refused, and changes nothing.
    let again = Command::new(common::skiff_bin())
        .args(["migrate", "--from", &redb, "--to", &format!("etcd:{eps}")])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds"));

    // A server on etcd with the first one's keys serves what was copied.
    let on_etcd = TestServer::start_in(
        shared_dir(first.data_dir()),
        &[],
        &["--datastore-endpoint", &eps],
    );
    let (code, got) = on_etcd.http("GET", &format!("{CMS}/kept"), None);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["data"]["k"], "v");
    assert_eq!(got["metadata"]["uid"], cm["metadata"]["uid"]);
    assert_eq!(got["metadata"]["labels"]["a"], "b");
    let (code, s) = on_etcd.http("GET", "/api/v1/namespaces/default/secrets/pw", None);
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["data"]["p"], "aHVudGVyMg==");
    let mover = eventually(30, "the copied custom object is served on etcd", || {
        let (code, v) = on_etcd.http("GET", &format!("{MOVERS}/m"), None);
        (code == 200).then_some(v)
    });
    assert_eq!(mover["metadata"]["uid"], made["metadata"]["uid"]);
    assert_eq!(mover["spec"]["n"], 1);
    // A change made on etcd comes back with the reverse migration.
    let (code, _) = on_etcd.json(
        "POST",
        CMS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made-on-etcd"}}),
    );
    assert_eq!(code, 201);
    drop(on_etcd);
    let back = shared_dir(first.data_dir());
    migrate(
        &format!("etcd:{eps}"),
        &format!("redb:{}", back.path().display()),
    );
    let on_redb = TestServer::start_in(back, &[], &[]);
    for name in ["kept", "made-on-etcd"] {
        let (code, v) = on_redb.http("GET", &format!("{CMS}/{name}"), None);
        assert_eq!(code, 200, "{name}: {v}");
    }
    eventually(30, "the custom object came back to redb", || {
        (on_redb.http("GET", &format!("{MOVERS}/m"), None).0 == 200).then_some(())
    });
    let (code, s) = on_redb.http("GET", "/api/v1/namespaces/default/secrets/pw", None);
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["data"]["p"], "aHVudGVyMg==");
}
