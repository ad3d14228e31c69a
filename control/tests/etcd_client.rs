//! The etcd client (`skiff_control::etcd`) against real etcd processes (Debian's etcd-server,
//! installed by `scripts/setup.sh --python`) on loopback ports: reads, writes, transactions on
//! mod_revision, watches with resume and compaction, leases, failover between endpoints, and
//! mutual TLS.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use skiff_control::etcd::{
    prefix_end, Compare, EtcdClient, EtcdConfig, EtcdError, Op, OpResult, WatchEvent,
};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One etcd member of its own single-member cluster, killed on drop.
struct Etcd {
    child: Child,
    client_url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Certificates for `--client-cert-auth` in PEM: (CA, server cert, server key, client cert,
/// client key).
struct Certs {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn certs() -> Certs {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "etcd-test-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |cn: &str, usages: Vec<ExtendedKeyUsagePurpose>| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
        p.extended_key_usages = usages;
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    // etcd's JSON gateway reaches etcd's own gRPC server with the serving certificate, so
    // with --client-cert-auth that certificate must be good for client auth too.
    let (server_cert, server_key) = leaf(
        "etcd",
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let (client_cert, client_key) = leaf("skiff", vec![ExtendedKeyUsagePurpose::ClientAuth]);
    Certs {
        ca: ca_cert.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

fn start_etcd(tls: Option<&Certs>) -> Etcd {
    let dir = tempfile::tempdir().unwrap();
    let (cport, pport) = (free_port(), free_port());
    let scheme = if tls.is_some() { "https" } else { "http" };
    let client_url = format!("{scheme}://127.0.0.1:{cport}");
    let peer_url = format!("http://127.0.0.1:{pport}");
    let mut cmd = Command::new("etcd");
    cmd.args(["--name", "t", "--log-level", "error"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(c) = tls {
        let write = |name: &str, pem: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, pem).unwrap();
            p
        };
        cmd.arg("--cert-file")
            .arg(write("server.crt", &c.server_cert))
            .arg("--key-file")
            .arg(write("server.key", &c.server_key))
            .arg("--trusted-ca-file")
            .arg(write("ca.crt", &c.ca))
            .arg("--client-cert-auth");
    }
    let child = cmd
        .spawn()
        .expect("start etcd (apt install etcd-server; scripts/setup.sh --python does)");
    let etcd = Etcd {
        child,
        client_url,
        _dir: dir,
    };
    wait_listening(cport);
    etcd
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "etcd did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn client(endpoints: &[&str], tls: Option<&Certs>) -> EtcdClient {
    EtcdClient::new(&EtcdConfig {
        endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
        ca_pem: tls.map(|c| c.ca.clone()),
        client_cert_pem: tls.map(|c| c.client_cert.clone()),
        client_key_pem: tls.map(|c| c.client_key.clone()),
    })
    .unwrap()
}

/// Waits until etcd has elected itself and answers.
async fn ready(c: &EtcdClient) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.range(b"/", None, None, 1).await {
            Ok(_) => return,
            Err(_) if Instant::now() < deadline => {
                smol::Timer::after(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("etcd never answered: {e}"),
        }
    }
}

#[test]
fn reads_writes_transactions_and_watches() {
    let etcd = start_etcd(None);
    smol::block_on(async {
        let c = client(&[&etcd.client_url], None);
        ready(&c).await;

        // Put and read back, with the revisions etcd gives.
        let r1 = c.put(b"/registry/pods/default/a", b"one", 0).await.unwrap();
        let kv = c.get(b"/registry/pods/default/a").await.unwrap().unwrap();
        assert_eq!(kv.value, b"one");
        assert_eq!(kv.mod_revision, r1);
        assert_eq!(kv.create_revision, r1);
        assert_eq!(c.get(b"/registry/pods/default/none").await.unwrap(), None);

        // Create-if-absent: the second create fails and reads what is there instead.
        let create = |v: &'static [u8]| {
            let c = c.clone();
            async move {
                c.txn(
                    &[Compare::Absent(b"/registry/pods/default/b".to_vec())],
                    &[Op::Put {
                        key: b"/registry/pods/default/b".to_vec(),
                        value: v.to_vec(),
                        lease: 0,
                    }],
                    &[Op::Get {
                        key: b"/registry/pods/default/b".to_vec(),
                    }],
                )
                .await
                .unwrap()
            }
        };
        let first = create(b"b1").await;
        assert!(first.succeeded);
        assert_eq!(first.results, vec![OpResult::Put]);
        let second = create(b"b2").await;
        assert!(!second.succeeded);
        let OpResult::Get(kvs) = &second.results[0] else {
            panic!("a get: {:?}", second.results)
        };
        assert_eq!(kvs[0].value, b"b1");
        assert_eq!(kvs[0].mod_revision, first.revision);

        // Optimistic concurrency: an update on a stale mod_revision does not apply.
        let stale = c
            .txn(
                &[Compare::ModRevision(
                    b"/registry/pods/default/a".to_vec(),
                    r1 - 1,
                )],
                &[Op::Put {
                    key: b"/registry/pods/default/a".to_vec(),
                    value: b"lost".to_vec(),
                    lease: 0,
                }],
                &[],
            )
            .await
            .unwrap();
        assert!(!stale.succeeded);
        let fresh = c
            .txn(
                &[Compare::ModRevision(
                    b"/registry/pods/default/a".to_vec(),
                    r1,
                )],
                &[Op::Put {
                    key: b"/registry/pods/default/a".to_vec(),
                    value: b"two".to_vec(),
                    lease: 0,
                }],
                &[],
            )
            .await
            .unwrap();
        assert!(fresh.succeeded);
        assert_eq!(
            c.get(b"/registry/pods/default/a")
                .await
                .unwrap()
                .unwrap()
                .value,
            b"two"
        );

        // A prefix range, paged.
        let prefix = b"/registry/pods/";
        let end = prefix_end(prefix);
        let page = c.range(prefix, Some(&end), None, 1).await.unwrap();
        assert_eq!(page.kvs.len(), 1);
        assert!(page.more);
        assert_eq!(page.count, 2);
        let all = c.range(prefix, Some(&end), None, 0).await.unwrap();
        assert_eq!(all.kvs.len(), 2);
        assert_eq!(all.revision, fresh.revision);
        // A serializable read (what write closures read first) of a settled key space
        // answers the same.
        let local = c
            .range_with(prefix, Some(&end), None, 0, true)
            .await
            .unwrap();
        assert_eq!(local.kvs, all.kvs);
        assert_eq!(local.revision, all.revision);

        // A watch from an old revision replays, then goes live; deletes carry the old value.
        let mut w = c.watch(prefix, Some(&end), r1).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let batch = w.next().await.unwrap().expect("the watch goes on");
            seen.extend(batch.events);
        }
        assert_eq!(seen[0].kv().mod_revision, r1);
        assert_eq!(seen[2].kv().value, b"two");
        let deleted = c
            .txn(
                &[],
                &[Op::Delete {
                    key: b"/registry/pods/default/b".to_vec(),
                }],
                &[],
            )
            .await
            .unwrap();
        let batch = w.next().await.unwrap().unwrap();
        match &batch.events[0] {
            WatchEvent::Delete { kv, prev } => {
                assert_eq!(kv.mod_revision, deleted.revision);
                assert_eq!(prev.as_ref().unwrap().value, b"b1");
            }
            other => panic!("a delete: {other:?}"),
        }
        drop(w);

        // After a compaction, old reads and watches are refused as compacted (skiff's 410).
        c.compact(deleted.revision).await.unwrap();
        match c.range(prefix, Some(&end), Some(r1), 0).await {
            Err(EtcdError::Compacted { requested, .. }) => assert_eq!(requested, r1),
            other => panic!("compacted: {other:?}"),
        }
        // etcd confirms the watch, then cancels it: the refusal comes with the first batch.
        let refused = match c.watch(prefix, Some(&end), r1).await {
            Ok(mut w) => w.next().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match refused {
            Err(EtcdError::Compacted { compacted, .. }) => assert_eq!(compacted, deleted.revision),
            other => panic!("a watch from a compacted revision must fail: {other:?}"),
        }

        // Leases: a key on a lease goes when the lease is revoked.
        let lease = c.lease_grant(15).await.unwrap();
        assert!(c.lease_keep_alive(lease).await.unwrap() > 0);
        c.put(b"/registry/leases/kube-node-lease/n1", b"hb", lease)
            .await
            .unwrap();
        let kv = c
            .get(b"/registry/leases/kube-node-lease/n1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kv.lease, lease);
        c.lease_revoke(lease).await.unwrap();
        assert_eq!(
            c.get(b"/registry/leases/kube-node-lease/n1").await.unwrap(),
            None
        );
        assert!(matches!(
            c.lease_revoke(lease).await,
            Err(EtcdError::Status { .. })
        ));
    });
}

#[test]
fn fails_over_to_the_next_endpoint() {
    let etcd = start_etcd(None);
    // Nothing listens on the first endpoint.
    let dead = format!("http://127.0.0.1:{}", free_port());
    smol::block_on(async {
        let c = client(&[&dead, &etcd.client_url], None);
        ready(&c).await;
        let rev = c.put(b"/k", b"v", 0).await.unwrap();
        assert_eq!(c.get(b"/k").await.unwrap().unwrap().mod_revision, rev);
        let mut w = c.watch(b"/k", None, rev).await.unwrap();
        assert_eq!(w.next().await.unwrap().unwrap().events[0].kv().value, b"v");
    });
    assert!(matches!(
        EtcdClient::new(&EtcdConfig::default()),
        Err(EtcdError::NoEndpoint)
    ));
    assert!(matches!(
        EtcdClient::new(&EtcdConfig {
            endpoints: vec!["unix:///run/etcd.sock".into()],
            ..Default::default()
        }),
        Err(EtcdError::Endpoint(_))
    ));
}

/// An endpoint whose connections break under every request, as a member's do when it is
/// killed mid-call: it reads the request, then closes without answering.
fn breaking_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            drop(conn);
        }
    });
    url
}

#[test]
fn reads_move_on_when_a_connection_breaks_but_writes_do_not() {
    let etcd = start_etcd(None);
    smol::block_on(async {
        let direct = client(&[&etcd.client_url], None);
        ready(&direct).await;
        let rev = direct.put(b"/b", b"v", 0).await.unwrap();
        // The breaking endpoint first: it is reached, so only a read may be sent again.
        let c = client(&[&breaking_endpoint(), &etcd.client_url], None);
        let kv = c
            .get(b"/b")
            .await
            .expect("a read goes on to the next endpoint");
        assert_eq!(kv.unwrap().mod_revision, rev);
        let c = client(&[&breaking_endpoint(), &etcd.client_url], None);
        assert!(
            matches!(
                c.put(b"/b", b"w", 0).await,
                Err(EtcdError::Transport { .. })
            ),
            "a write whose answer was lost is not sent twice"
        );
    });
}

#[test]
fn mutual_tls() {
    let certs = certs();
    let etcd = start_etcd(Some(&certs));
    smol::block_on(async {
        let c = client(&[&etcd.client_url], Some(&certs));
        ready(&c).await;
        c.put(b"/tls", b"yes", 0).await.unwrap();
        assert_eq!(c.get(b"/tls").await.unwrap().unwrap().value, b"yes");

        // Without the client certificate etcd refuses the handshake.
        let anonymous = EtcdClient::new(&EtcdConfig {
            endpoints: vec![etcd.client_url.clone()],
            ca_pem: Some(certs.ca.clone()),
            ..Default::default()
        })
        .unwrap();
        assert!(anonymous.get(b"/tls").await.is_err());
    });
}
