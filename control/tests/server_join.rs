//! Servers joining a cluster (`skiff token create --server`, `skiff server --join URL
//! --token`) and agents failing over between servers, against a real 3-member etcd cluster
//! (Debian's etcd-server) on loopback ports:
//!
//! - a second server joins with an empty data dir and ends up with the first's CA (its own
//!   serving certificate), so a Secret sealed by one opens on the other and a ServiceAccount
//!   token issued by one is accepted by the other; a node token, a wrong CA pin, plain HTTP,
//!   an unreachable server, a missing --datastore-endpoint and a server on the embedded
//!   store are each refused with one line and leave the data dir empty;
//! - a real agent given both servers keeps its node Ready through `kill -9` of the leading
//!   server (its Lease renewed through the other), a pod created through the survivor runs,
//!   and with one etcd member killed too, every create acknowledged by either server during
//!   all this is still there.
//!
//! The second test needs root, cgroups and /bin/busybox (it runs a real container).

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::{agent_bin, eventually, free_port, skiff_bin, TestServer};
use serde_json::json;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
/// The pod range of these servers and agent: apart from the other tests' on this host.
const CLUSTER_CIDR: &str = "10.217.0.0/16";

fn url(s: &TestServer) -> String {
    format!("https://{}", s.addr)
}

/// `skiff token create [--server]` against `s`.
fn token(s: &TestServer, server: bool) -> String {
    let out = Command::new(skiff_bin())
        .args(["token", "create", "--kubeconfig"])
        .arg(s.kubeconfig())
        .args(server.then_some("--server"))
        .output()
        .expect("skiff token create");
    assert!(
        out.status.success(),
        "token create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `skiff server` with `args` on `data_dir`, expecting it to fail at once: its stderr.
fn refused_start(data_dir: &Path, args: &[&str]) -> String {
    let mut child = Command::new(skiff_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--disable-agent")
        .args(args)
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start skiff server");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("skiff server {args:?} did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "skiff server {args:?} succeeded: {err}");
    err
}

/// The data dir holds nothing (a refused join wrote nothing into it).
fn assert_empty(dir: &Path, what: &str) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{what} left {left:?} in the data dir");
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The flags every server of these tests shares.
fn server_args(eps: &str) -> Vec<String> {
    [
        "--datastore-endpoint",
        eps,
        "--cluster-cidr",
        CLUSTER_CIDR,
        // A quick election, so the takeover fits in the test's time.
        "--leader-elect-lease-duration",
        "6s",
        "--leader-elect-renew-deadline",
        "4s",
        "--leader-elect-retry-period",
        "1s",
    ]
    .map(str::to_string)
    .to_vec()
}

fn start_server(dir: tempfile::TempDir, args: &[String]) -> TestServer {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestServer::start_in(dir, &[], &args)
}

/// A server that joins `first` with a fresh server token, on an empty data dir.
fn join(first: &TestServer, args: &[String]) -> TestServer {
    let mut args = args.to_vec();
    args.extend([
        "--join".into(),
        url(first),
        "--token".into(),
        token(first, true),
    ]);
    start_server(tempfile::tempdir().unwrap(), &args)
}

#[test]
fn a_joined_server_shares_the_ca_the_secrets_key_and_service_account_tokens() {
    let cluster = EtcdCluster::start(3);
    let eps = cluster.endpoints();
    let args = server_args(&eps);
    let a = start_server(tempfile::tempdir().unwrap(), &args);

    // What a join may not do, each refused with one line and nothing written.
    let server_token = token(&a, true);
    let node_token = token(&a, false);
    assert_ne!(server_token, node_token);
    let empty = tempfile::tempdir().unwrap();
    let b_dir = empty.path().join("b");
    let attempt = |extra: &[&str]| {
        let mut all = vec!["--datastore-endpoint", eps.as_str()];
        all.extend_from_slice(extra);
        let err = refused_start(&b_dir, &all);
        assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
        assert_empty(&b_dir, &format!("{extra:?}"));
        err
    };
    let a_url = url(&a);
    let err = attempt(&["--join", &a_url, "--token", &node_token]);
    assert!(err.contains("joins nodes only"), "{err}");
    let parsed = api::join::JoinToken::parse(&server_token).unwrap();
    let wrong_pin = api::join::JoinToken {
        ca_hash: "0".repeat(64),
        ..parsed.clone()
    }
    .to_string();
    let err = attempt(&["--join", &a_url, "--token", &wrong_pin]);
    assert!(err.contains("does not match the join token's pin"), "{err}");
    let wrong_secret = api::join::JoinToken {
        secret: "0000000000000000".into(),
        ..parsed
    }
    .to_string();
    let err = attempt(&["--join", &a_url, "--token", &wrong_secret]);
    assert!(err.contains("refused the join token"), "{err}");
    let plain = format!("http://{}", a.addr);
    let err = attempt(&["--join", &plain, "--token", &server_token]);
    assert!(err.contains("https://"), "{err}");
    let nobody = format!("https://127.0.0.1:{}", free_port());
    let err = attempt(&["--join", &nobody, "--token", &server_token]);
    assert!(err.contains("cannot reach"), "{err}");
    let err = refused_start(&b_dir, &["--join", &a_url, "--token", &server_token]);
    assert!(err.contains("--join needs --datastore-endpoint"), "{err}");
    assert_empty(&b_dir, "a join without --datastore-endpoint");

    // The endpoint itself: a node token gets 403, an unknown one 401.
    let post = |credential: &str| {
        a.json(
            "POST",
            api::join::SERVER_JOIN_PATH,
            &json!({ "token": credential }),
        )
    };
    let node = api::join::JoinToken::parse(&node_token).unwrap();
    let (code, v) = post(&node.credential());
    assert_eq!(code, 403, "{v}");
    let (code, v) = post("abcdef.0123456789abcdef");
    assert_eq!(code, 401, "{v}");

    // A server on its own embedded store cannot be joined: it has nothing to share.
    let lone = TestServer::start();
    let err = attempt(&["--join", &url(&lone), "--token", &token(&lone, true)]);
    assert!(err.contains("embedded store"), "{err}");
    drop(lone);

    // The join: B starts on an empty data dir with A's CA and keys, its own serving
    // certificate, and the modes of a PKI made by the server itself.
    let mut b = join(&a, &args);
    let (ad, bd) = (a.data_dir(), b.data_dir());
    for shared in [
        "pki/ca.crt",
        "pki/ca.key",
        "pki/service-account.key",
        "secrets.key",
        "admin-token",
    ] {
        assert_eq!(read(&ad.join(shared)), read(&bd.join(shared)), "{shared}");
        assert_eq!(mode(&ad.join(shared)), mode(&bd.join(shared)), "{shared}");
    }
    for key in [
        "pki/ca.key",
        "pki/service-account.key",
        "secrets.key",
        "admin-token",
        "pki/server.key",
    ] {
        assert_eq!(mode(&bd.join(key)), 0o600, "{key}");
    }
    assert_eq!(mode(bd), 0o700);
    assert_eq!(mode(&bd.join("pki")), 0o700);
    assert_ne!(
        read(&ad.join("pki/server.crt")),
        read(&bd.join("pki/server.crt")),
        "B serves with its own certificate"
    );

    // A Secret sealed by A opens on B.
    common::etcd::secret_sealed_by_one_opens_on_the_other(&a, &b);

    // A ServiceAccount token issued by A is accepted by B.
    let (code, v) = a.json(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "joiner"}}),
    );
    assert_eq!(code, 201, "{v}");
    let (code, v) = a.json(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/joiner/token",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 600}}),
    );
    assert_eq!(code, 201, "{v}");
    let sa_token = v["status"]["token"].as_str().unwrap().to_string();
    let review = eventually(10, "B reviews A's ServiceAccount token", || {
        let (code, review) = b.json(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": sa_token}}),
        );
        (code == 201 && review["status"]["authenticated"] == true).then_some(review)
    });
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:joiner"
    );
    // As a credential: authenticated by B (403 from RBAC, not 401).
    let as_sa = api::client::Client::new(api::client::ClientConfig {
        server: url(&b),
        ca_pem: Some(read(&bd.join("pki/ca.crt"))),
        token: Some(sa_token),
        ..Default::default()
    })
    .unwrap();
    let r = smol::block_on(as_sa.request("GET", CMS, None, "application/json")).unwrap();
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));

    // Restarted with --join still given (as a unit file keeps it), B joins nothing again.
    let serving = read(&bd.join("pki/server.crt"));
    b.kill_and_restart();
    let bd = b.data_dir();
    assert_eq!(read(&bd.join("pki/ca.crt")), read(&ad.join("pki/ca.crt")));
    assert_eq!(read(&bd.join("pki/server.crt")), serving);
    let (code, _) = b.http("GET", "/api/v1/namespaces/default/secrets/pw", None);
    assert_eq!(code, 200);
    // A data dir of another cluster is refused, not overwritten.
    let other = tempfile::tempdir().unwrap();
    skiff_control::pki::Pki::load_or_create(other.path(), &[], "https://127.0.0.1:1").unwrap();
    let other_ca = read(&other.path().join("pki/ca.crt"));
    let err = refused_start(
        other.path(),
        &[
            "--datastore-endpoint",
            &eps,
            "--join",
            &a_url,
            "--token",
            &server_token,
        ],
    );
    assert!(err.contains("belongs to another cluster"), "{err}");
    assert_eq!(read(&other.path().join("pki/ca.crt")), other_ca);
}

/// Which server leads the controllers (`leader_election_master_status`).
fn leads(s: &TestServer) -> bool {
    let c = s.client();
    let Ok(r) = smol::block_on(c.request("GET", "/metrics", None, "text/plain")) else {
        return false;
    };
    String::from_utf8_lossy(&r.body)
        .lines()
        .any(|l| l.starts_with("leader_election_master_status") && l.ends_with(" 1"))
}

/// A real `skiff-agent` in its own process group; on drop it is killed with everything it
/// started, and its containers, cgroups, pod directories and bridge are removed.
struct Agent {
    child: Option<Child>,
    data: tempfile::TempDir,
    run: tempfile::TempDir,
    cgroup_parent: String,
    bridge: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = c.wait();
        }
        let mut cfg =
            agent::runtime::RuntimeConfig::new(self.run.path(), self.cgroup_parent.clone());
        cfg.allow_privileged = true;
        if let Ok(rt) = agent::runtime::Runtime::new(cfg) {
            for uid in rt.list_sandboxes().unwrap_or_default() {
                let _ = rt.remove_sandbox(&uid);
            }
            for id in rt.list().unwrap_or_default() {
                let _ = rt.remove(&id);
            }
            let _ = rt.remove_cgroup_parent();
        }
        if let Ok(rd) = std::fs::read_dir(self.data.path().join("pods")) {
            for e in rd.flatten() {
                agent::pods::worker::cleanup_pod_dir(&e.path());
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
    }
}

const NODE: &str = "join-node";
const IMAGE: &str = "skiff.test/join:v1";
const BUSYBOX: &str = "/bin/busybox";

fn require_root_and_busybox() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs a real agent and container: run it as root"
    );
    assert!(
        Path::new(BUSYBOX).is_file(),
        "{BUSYBOX} is missing: apt-get install -y busybox-static"
    );
}

/// Writes an OCI image layout tar of a one-layer image holding the host's static busybox
/// (entrypoint /bin/busybox), named `name`, for `skiff-agent image import`.
fn write_busybox_archive(path: &Path, name: &str) {
    use agent::image::sha256_bytes;
    fn entry(
        b: &mut tar::Builder<Vec<u8>>,
        path: &str,
        kind: tar::EntryType,
        mode: u32,
        data: &[u8],
    ) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, path, data).unwrap();
    }
    let mut layer = tar::Builder::new(Vec::new());
    entry(&mut layer, "bin/", tar::EntryType::Directory, 0o755, b"");
    let busybox = std::fs::read(BUSYBOX).unwrap();
    entry(
        &mut layer,
        "bin/busybox",
        tar::EntryType::Regular,
        0o755,
        &busybox,
    );
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_mode(0o777);
    h.set_size(0);
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    layer.append_link(&mut h, "bin/sh", "busybox").unwrap();
    let layer = layer.into_inner().unwrap();
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    };
    let config = serde_json::to_vec(&json!({
        "architecture": arch, "os": "linux",
        "config": {"Entrypoint": ["/bin/busybox"], "Cmd": ["sh"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256_bytes(&layer)]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256_bytes(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": sha256_bytes(&layer), "size": layer.len()}],
    }))
    .unwrap();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": sha256_bytes(&manifest), "size": manifest.len(),
                       "annotations": {"org.opencontainers.image.ref.name": name}}],
    }))
    .unwrap();
    let blob = |d: String| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let mut out = tar::Builder::new(Vec::new());
    let regular = tar::EntryType::Regular;
    entry(
        &mut out,
        "oci-layout",
        regular,
        0o644,
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    );
    entry(&mut out, "index.json", regular, 0o644, &index);
    entry(
        &mut out,
        &blob(sha256_bytes(&manifest)),
        regular,
        0o644,
        &manifest,
    );
    entry(
        &mut out,
        &blob(sha256_bytes(&config)),
        regular,
        0o644,
        &config,
    );
    entry(
        &mut out,
        &blob(sha256_bytes(&layer)),
        regular,
        0o644,
        &layer,
    );
    std::fs::write(path, out.into_inner().unwrap()).unwrap();
}

fn start_agent(servers: &[&TestServer], token: &str) -> Agent {
    let pid = std::process::id();
    let mut agent = Agent {
        child: None,
        data: tempfile::tempdir().unwrap(),
        run: tempfile::tempdir().unwrap(),
        cgroup_parent: format!("skiff-join-{pid}"),
        bridge: format!("skj{}", pid % 100_000),
    };
    let archive = agent.data.path().join("image.tar");
    write_busybox_archive(&archive, IMAGE);
    let out = Command::new(agent_bin())
        .args(["image", "import"])
        .arg(&archive)
        .arg("--data-dir")
        .arg(agent.data.path())
        .output()
        .expect("skiff-agent image import");
    assert!(
        out.status.success(),
        "import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<String> = servers.iter().map(|s| url(s)).collect();
    let child = Command::new(agent_bin())
        .arg("--data-dir")
        .arg(agent.data.path())
        .arg("--run-dir")
        .arg(agent.run.path())
        .args(["--server", &list.join(","), "--token", token])
        .args(["--node-name", NODE, "--node-ip", "127.0.0.1"])
        .args(["--cgroup-parent", &agent.cgroup_parent])
        .args(["--heartbeat-seconds", "1", "--port", "0"])
        .args([
            "--cluster-cidr",
            CLUSTER_CIDR,
            "--bridge-name",
            &agent.bridge,
        ])
        // Nothing of the host's Services, DNS or ports 80/443.
        .args(["--disable-proxy", "--disable-dns", "--disable-ingress"])
        .env(
            "SKIFF_LOG",
            std::env::var("AGENT_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start skiff-agent");
    agent.child = Some(child);
    agent
}

fn node_ready(s: &TestServer) -> Option<bool> {
    let (code, n) = s.http("GET", &format!("/api/v1/nodes/{NODE}"), None);
    if code != 200 {
        return None;
    }
    n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["status"] == "True")
}

fn lease_renewed(s: &TestServer) -> Option<String> {
    let (code, l) = s.http(
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"),
        None,
    );
    (code == 200).then(|| l["spec"]["renewTime"].as_str().unwrap_or("").to_string())
}

/// Creates ConfigMaps `<prefix>-<n>` through `s` until told to stop; remembers which ones
/// the server acknowledged (201), and when.
fn writer(
    s: &TestServer,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(String, Instant)>> {
    let client = s.client();
    std::thread::spawn(move || {
        let mut acked = Vec::new();
        let mut n = 0u32;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            let name = format!("{prefix}-{n}");
            let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": {"n": n.to_string()}}))
            .unwrap();
            match smol::block_on(client.request(
                "POST",
                CMS,
                Some(("application/json", body)),
                "application/json",
            )) {
                Ok(r) if r.status == 201 => acked.push((name, Instant::now())),
                // Refused or cut off: not acknowledged, so it may or may not be there.
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        acked
    })
}

#[test]
fn the_agent_fails_over_and_no_acknowledged_write_is_lost_when_the_leader_and_an_etcd_member_die() {
    require_root_and_busybox();
    let mut cluster = EtcdCluster::start(3);
    let mut args = server_args(&cluster.endpoints());
    // A node whose heartbeats stopped would be NotReady within the test's time.
    args.extend(["--node-monitor-grace-period".into(), "8s".into()]);
    let mut a = start_server(tempfile::tempdir().unwrap(), &args);
    eventually(30, "A leads", || leads(&a).then_some(()));
    let b = join(&a, &args);

    let _agent = start_agent(&[&a, &b], &token(&a, false));
    eventually(30, "the node is Ready", || {
        (node_ready(&b) == Some(true)).then_some(())
    });

    // Writers through both servers, then kill -9 of the leader and of an etcd member.
    let stop = Arc::new(AtomicBool::new(false));
    let writers = [
        writer(&a, "via-a", stop.clone()),
        writer(&b, "via-b", stop.clone()),
    ];
    std::thread::sleep(Duration::from_secs(1));
    let _ = a.child.kill();
    let _ = a.child.wait();
    cluster.kill(0);
    let killed = Instant::now();

    // The node stays Ready through B: its Lease keeps being renewed, and B's node
    // lifecycle controller (once B leads) never marks it otherwise.
    let not_ready = Arc::new(Mutex::new(Vec::new()));
    let first = eventually(10, "the node Lease read through B", || lease_renewed(&b));
    eventually(10, "the node Lease renewed through B", || {
        lease_renewed(&b).filter(|t| *t > first)
    });
    let (code, v) = b.json(
        "POST",
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-failover"},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": IMAGE,
                                         "args": ["sleep", "3600"]}]}}),
    );
    assert_eq!(code, 201, "{v}");
    eventually(40, "the pod created through B runs", || {
        if node_ready(&b) != Some(true) {
            not_ready.lock().unwrap().push(killed.elapsed());
        }
        let (_, p) = b.http(
            "GET",
            "/api/v1/namespaces/default/pods/after-failover",
            None,
        );
        (p["status"]["phase"] == "Running").then_some(())
    });
    assert!(leads(&b), "B took over the controllers");
    // Long enough after the kill for B's node lifecycle controller to have judged the node
    // on its own (the grace period after B took over).
    while killed.elapsed() < Duration::from_secs(20) {
        assert_eq!(
            node_ready(&b),
            Some(true),
            "at {:?} after the kill",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let renewed = lease_renewed(&b).unwrap();
    eventually(10, "the node Lease still renewed", || {
        lease_renewed(&b).filter(|t| *t > renewed)
    });
    assert_eq!(node_ready(&b), Some(true));
    let not_ready = not_ready.lock().unwrap().clone();
    assert!(
        not_ready.is_empty(),
        "the node was not Ready at {not_ready:?} after the kill"
    );

    // No acknowledged write is lost.
    stop.store(true, Ordering::SeqCst);
    let acked: Vec<(String, Instant)> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let after_kill = acked.iter().filter(|(_, at)| *at > killed).count();
    assert!(after_kill > 0, "no create was acknowledged after the kills");
    let (code, list) = b.http("GET", CMS, None);
    assert_eq!(code, 200, "{list}");
    let present: std::collections::HashSet<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    let lost: Vec<&str> = acked
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !present.contains(n))
        .collect();
    assert!(lost.is_empty(), "acknowledged creates lost: {lost:?}");
    eprintln!(
        "{} creates acknowledged ({} after the kills), none lost; node Ready throughout the {:?} after the kills",
        acked.len(),
        after_kill,
        killed.elapsed()
    );
}
