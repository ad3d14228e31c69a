//! Certificate lifetimes end to end: a real `skiff server` whose node certificates last
//! 40 s and whose serving certificate lasts 30 s, and a real `skiff-agent`. The agent renews
//! its certificate through a CertificateSigningRequest (no token), keeps talking to the API
//! after its first certificate expired, serves its endpoint with the renewed one, and comes
//! back after a restart with it; the expired first certificate gets 401. The server renews
//! its serving certificate live. A user certificate past its lifetime gets 401 from the
//! real kubectl. `skiff certs check` lists it all. Needs root (the agent) and kubectl.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use api::certificates::CertificateSigningRequest;
use api::client::{Client, ClientConfig};
use common::{skiff_bin, wait_for, TestAgent, TestServer};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

fn not_after(pem: &str) -> SystemTime {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("parse");
    UNIX_EPOCH + Duration::from_secs(cert.validity().not_after.timestamp() as u64)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The certificate the server presents on a new TLS connection, DER.
fn served_certificate(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("connection");
    let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("handshake");
    }
    conn.peer_certificates().expect("a certificate")[0].to_vec()
}

/// The last heartbeat of node `name`: its Lease's renewTime in kube-node-lease (unix
/// seconds).
fn heartbeat(c: &Client, name: &str) -> Option<i64> {
    let lease: api::coordination::Lease = smol::block_on(c.get("kube-node-lease", name)).ok()?;
    lease.spec.renew_time.map(|t| t.0 / 1_000_000)
}

/// Waits for a heartbeat later than `after` (unix seconds).
fn wait_heartbeat_after(c: &Client, name: &str, after: i64, why: &str) -> i64 {
    wait_for(why, Duration::from_secs(20), || {
        heartbeat(c, name).filter(|t| *t > after)
    })
}

fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .expect("run kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn certs_check(dir: &Path) -> String {
    let out = Command::new(skiff_bin())
        .args(["certs", "check", "--data-dir"])
        .arg(dir)
        .output()
        .expect("skiff certs check");
    assert!(
        out.status.success(),
        "certs check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn agents_renew_their_certificates_before_expiry_and_the_server_its_own() {
    let server = TestServer::start_with(&["--node-cert-ttl", "40s", "--serving-cert-ttl", "30s"]);
    let admin = server.client();
    let pki = server.dir.path().join("pki");
    let ca_pem = read(&pki.join("ca.crt"));
    let first_serving = read(&pki.join("server.crt"));
    assert_eq!(
        served_certificate(server.addr, &ca_pem),
        CertificateDer::from_pem_slice(first_serving.as_bytes())
            .unwrap()
            .to_vec()
    );

    // A user whose certificate lasts 15 s: known to kubectl, then refused with 401.
    let user_kc = server.dir.path().join("alice.kubeconfig");
    let out = Command::new(skiff_bin())
        .args(["user", "create", "alice", "--ttl", "15s", "-o"])
        .arg(&user_kc)
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .output()
        .expect("skiff user create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, stdout, stderr) = kubectl(&user_kc, server.dir.path(), &["auth", "whoami"]);
    assert!(ok && stdout.contains("alice"), "{stdout}{stderr}");

    let mut agent = TestAgent::new(&server);
    let node = agent.node_name.clone();
    agent.start(Some(&server.join_token()));
    let joined = agent.data_dir().join("node.crt");
    wait_for("the agent to join", Duration::from_secs(30), || {
        joined.exists().then_some(())
    });
    let first_cert = read(&joined);
    let first_key = read(&agent.data_dir().join("node.key"));
    let first_expiry = not_after(&first_cert);
    let first_heartbeat =
        wait_heartbeat_after(&admin, &node, 0, "the node to register and heartbeat");

    // Renewed at 70-90% of 44 s (40 s and 4 s backdating), through an approved CSR.
    let current = agent
        .data_dir()
        .join(agent::node::credentials::CURRENT_PAIR);
    wait_for(
        "the node certificate to be renewed",
        Duration::from_secs(45),
        || current.exists().then_some(()),
    );
    let renewed_at = SystemTime::now();
    assert!(
        renewed_at < first_expiry,
        "renewed before the first certificate expired"
    );
    let renewed = agent::node::Credentials::load(agent.data_dir())
        .unwrap()
        .unwrap();
    assert_ne!(renewed.cert_pem, first_cert);
    assert!(not_after(&renewed.cert_pem) > first_expiry);
    let meta = std::fs::symlink_metadata(&current).unwrap();
    assert!(meta.file_type().is_symlink());
    use std::os::unix::fs::PermissionsExt as _;
    let pair = std::fs::metadata(&current).unwrap();
    assert_eq!(pair.permissions().mode() & 0o777, 0o600);
    assert!(
        joined.exists(),
        "the joined pair stays beside the renewed one"
    );
    let (csrs, _) = smol::block_on(admin.list::<CertificateSigningRequest>(None, None, None))
        .expect("list CSRs");
    let mine: Vec<_> = csrs
        .iter()
        .filter(|c| c.spec.username.as_deref() == Some(&format!("system:node:{node}")))
        .collect();
    assert!(!mine.is_empty(), "{csrs:?}");
    for csr in &mine {
        assert_eq!(
            csr.spec.signer_name,
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert!(csr.spec.groups.iter().any(|g| g == "system:nodes"));
        let approved = csr
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Approved")
            .expect("approved");
        assert_eq!(approved.reason.as_deref(), Some("AutoApproved"));
    }
    let (ok, table, _) = kubectl(&server.kubeconfig(), server.dir.path(), &["get", "csr"]);
    assert!(ok && table.contains("Approved,Issued"), "{table}");

    // The user's 15 s are over by now: 401 from the API, as kubectl reports it.
    let (ok, stdout, stderr) = kubectl(&user_kc, server.dir.path(), &["auth", "whoami"]);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("Unauthorized"), "{stderr}");

    // The serving certificate (30 s) was renewed at 80% and is served to new connections.
    wait_for(
        "the serving certificate to be renewed",
        Duration::from_secs(20),
        || (read(&pki.join("server.crt")) != first_serving).then_some(()),
    );
    let second_serving = read(&pki.join("server.crt"));
    assert_eq!(
        served_certificate(server.addr, &ca_pem),
        CertificateDer::from_pem_slice(second_serving.as_bytes())
            .unwrap()
            .to_vec()
    );

    // Past the first certificate's end the agent goes on with the renewed one.
    let wait = first_expiry
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    std::thread::sleep(wait + Duration::from_secs(2));
    let after_expiry = unix_now();
    wait_heartbeat_after(
        &admin,
        &node,
        after_expiry,
        "a heartbeat after the first certificate expired",
    );
    assert!(heartbeat(&admin, &node).unwrap() > first_heartbeat);
    // The server reaches the agent's endpoint, which now serves the renewed certificate.
    let r = smol::block_on(admin.request(
        "GET",
        &format!("/apis/metrics.k8s.io/v1beta1/nodes/{node}"),
        None,
        "application/json",
    ))
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // The expired first certificate is refused (401), so it cannot ask for a renewal.
    let kc = api::kubeconfig::Kubeconfig::load(&server.kubeconfig()).unwrap();
    let mut cfg = ClientConfig::from_kubeconfig(&kc, None).unwrap();
    cfg.token = None;
    cfg.client_cert_pem = Some(first_cert.clone());
    cfg.client_key_pem = Some(first_key);
    let expired = Client::new(cfg).unwrap();
    let r = smol::block_on(expired.request(
        "GET",
        &format!("/api/v1/nodes/{node}"),
        None,
        "application/json",
    ))
    .unwrap();
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    let csr = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {"request": "", "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"]}});
    let r = smol::block_on(expired.request(
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        Some(("application/json", serde_json::to_vec(&csr).unwrap())),
        "application/json",
    ))
    .unwrap();
    assert_eq!(r.status, 401);

    // A restarted agent (no token) comes back with the renewed certificate.
    agent.kill9();
    let before_restart = unix_now();
    agent.start(None);
    wait_heartbeat_after(
        &admin,
        &node,
        before_restart + 1,
        "a heartbeat after the restart",
    );

    // `skiff certs check`: every certificate with its subject, expiry and status.
    let table = certs_check(server.dir.path());
    for want in [
        "pki/ca.crt",
        "CN=skiff-ca",
        "pki/server.crt",
        "CN=skiff-server",
        "pki/apiserver-client.crt",
        "RESIDUAL TIME",
    ] {
        assert!(table.contains(want), "{want} in\n{table}");
    }
    let ca_row = table.lines().find(|l| l.starts_with("pki/ca.crt")).unwrap();
    assert!(ca_row.contains("9y") && ca_row.ends_with("OK"), "{ca_row}");
    let table = certs_check(agent.data_dir());
    let node_row = table
        .lines()
        .find(|l| l.starts_with("node-current.pem -> node-"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        node_row.contains(&format!("CN=system:node:{node}")),
        "{node_row}"
    );
    assert!(
        node_row.ends_with("OK") || node_row.ends_with("WARNING"),
        "{node_row}"
    );
    agent.clean_up();
}
