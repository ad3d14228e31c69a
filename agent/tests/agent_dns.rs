//! Cluster DNS against a real `skiff server`: Services and Endpoints created through the
//! API are answered by a real DNS server on 127.0.0.77, queried over UDP and TCP; names
//! outside the cluster go to a stand-in upstream that the test runs on 127.0.0.78 (no query
//! ever leaves loopback). The pod test (root, busybox) checks a real container's
//! /etc/resolv.conf and /etc/hosts, and the agent binary's own DNS server.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::dns::{DnsServer, DnsSettings};
use api::client::Client;
use api::core::{
    Container, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace, Pod,
    PodDnsConfig, PodSpec, Service, ServicePort, ServiceSpec,
};
use api::meta::{DeleteOptions, ObjectMeta};
use common::{wait_for, TestAgent, TestServer};
use simple_dns::rdata::{RData, A};
use simple_dns::{Name, Packet, PacketFlag, Question, ResourceRecord, CLASS, RCODE, TYPE};

/// The fixed answer of the stand-in upstream.
const UPSTREAM_ANSWER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 53);

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.into(),
        namespace: Some(ns.into()),
        ..Default::default()
    }
}

fn service(ns: &str, name: &str, cluster_ip: &str) -> Service {
    Service {
        metadata: meta(ns, name),
        spec: ServiceSpec {
            cluster_ip: Some(cluster_ip.into()),
            ports: vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn endpoints(ns: &str, name: &str, ips: &[(&str, Option<&str>)]) -> Endpoints {
    Endpoints {
        metadata: meta(ns, name),
        subsets: vec![EndpointSubset {
            addresses: ips
                .iter()
                .map(|(ip, host)| EndpointAddress {
                    ip: ip.to_string(),
                    hostname: host.map(str::to_string),
                    ..Default::default()
                })
                .collect(),
            ports: vec![EndpointPort {
                name: Some("http".into()),
                port: 8080,
                protocol: Some("TCP".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn query(name: &str, qtype: TYPE, id: u16) -> Vec<u8> {
    let mut p = Packet::new_query(id);
    p.set_flags(PacketFlag::RECURSION_DESIRED);
    p.questions.push(Question::new(
        Name::new_unchecked(name),
        qtype.into(),
        CLASS::IN.into(),
        false,
    ));
    p.build_bytes_vec().expect("query")
}

/// Asks over UDP; answers the raw reply.
fn ask_udp_raw(server: SocketAddr, name: &str, qtype: TYPE) -> Vec<u8> {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("client socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let id = 0x4242;
    socket
        .send_to(&query(name, qtype, id), server)
        .expect("send query");
    let mut buf = vec![0u8; 4096];
    let n = socket.recv(&mut buf).expect("an answer");
    buf.truncate(n);
    assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), id);
    buf
}

fn ask_tcp_raw(server: SocketAddr, name: &str, qtype: TYPE) -> Vec<u8> {
    let mut s = TcpStream::connect(server).expect("connect over TCP");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let q = query(name, qtype, 7);
    let mut msg = (q.len() as u16).to_be_bytes().to_vec();
    msg.extend_from_slice(&q);
    s.write_all(&msg).unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).expect("answer length");
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut answer).expect("answer");
    answer
}

/// The rcode, the A addresses of the answer section, and the record types of the authority
/// section.
struct Answer {
    rcode: RCODE,
    truncated: bool,
    authoritative: bool,
    ips: BTreeSet<Ipv4Addr>,
    answer_count: usize,
    authority: Vec<TYPE>,
    srv: Vec<(u16, String)>,
}

fn read(raw: &[u8]) -> Answer {
    let p = Packet::parse(raw).expect("a well-formed answer");
    assert!(p.has_flags(PacketFlag::RESPONSE));
    let ips = p
        .answers
        .iter()
        .filter_map(|r| match &r.rdata {
            RData::A(a) => Some(Ipv4Addr::from(a.address)),
            _ => None,
        })
        .collect();
    let srv = p
        .answers
        .iter()
        .filter_map(|r| match &r.rdata {
            RData::SRV(s) => Some((s.port, s.target.to_string())),
            _ => None,
        })
        .collect();
    Answer {
        rcode: p.rcode(),
        truncated: p.has_flags(PacketFlag::TRUNCATION),
        authoritative: p.has_flags(PacketFlag::AUTHORITATIVE_ANSWER),
        ips,
        answer_count: p.answers.len(),
        authority: p.name_servers.iter().map(|r| r.rdata.type_code()).collect(),
        srv,
    }
}

fn ask(server: SocketAddr, name: &str, qtype: TYPE) -> Answer {
    read(&ask_udp_raw(server, name, qtype))
}

fn ips(list: &[[u8; 4]]) -> BTreeSet<Ipv4Addr> {
    list.iter().map(|o| Ipv4Addr::from(*o)).collect()
}

/// A stand-in upstream resolver on 127.0.0.78 (UDP and TCP, one port): answers every A
/// question with [`UPSTREAM_ANSWER`] and counts the questions.
struct Upstream {
    addr: SocketAddr,
    asked: Arc<AtomicUsize>,
}

fn upstream_answer(msg: &[u8]) -> Option<Vec<u8>> {
    let q = Packet::parse(msg).ok()?;
    let mut reply = Packet::new_reply(q.id());
    reply.set_flags(PacketFlag::RECURSION_AVAILABLE | PacketFlag::RECURSION_DESIRED);
    for question in &q.questions {
        reply.questions.push(question.clone());
        reply.answers.push(ResourceRecord::new(
            question.qname.clone(),
            CLASS::IN,
            60,
            RData::A(A::from(UPSTREAM_ANSWER)),
        ));
    }
    reply.build_bytes_vec().ok()
}

impl Upstream {
    fn start() -> Upstream {
        let udp = UdpSocket::bind("127.0.0.78:0").expect("bind the stand-in upstream");
        let addr = udp.local_addr().unwrap();
        let tcp = std::net::TcpListener::bind(addr).expect("bind the stand-in upstream (tcp)");
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok((n, from)) = udp.recv_from(&mut buf) {
                counter.fetch_add(1, Ordering::SeqCst);
                if let Some(answer) = upstream_answer(&buf[..n]) {
                    let _ = udp.send_to(&answer, from);
                }
            }
        });
        let counter = asked.clone();
        std::thread::spawn(move || {
            for mut s in tcp.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut len = [0u8; 2];
                if s.read_exact(&mut len).is_err() {
                    continue;
                }
                let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if s.read_exact(&mut msg).is_err() {
                    continue;
                }
                if let Some(answer) = upstream_answer(&msg) {
                    let mut out = (answer.len() as u16).to_be_bytes().to_vec();
                    out.extend_from_slice(&answer);
                    let _ = s.write_all(&out);
                }
            }
        });
        Upstream { addr, asked }
    }
}

/// A loopback address where nothing listens (UDP and TCP).
fn dead_address(ip: &str) -> SocketAddr {
    let s = UdpSocket::bind(format!("{ip}:0")).unwrap();
    s.local_addr().unwrap()
}

fn start_dns(client: &Client, upstreams: Vec<SocketAddr>) -> DnsServer {
    let dir = tempfile::tempdir().unwrap();
    let settings = DnsSettings {
        listen: Some("127.0.0.77:0".parse().unwrap()),
        upstreams,
        // Never the machine's own resolv.conf.
        host_resolv_conf: dir.path().join("absent"),
        upstream_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let server = smol::block_on(agent::dns::serve(&settings, client.clone())).expect("serve");
    wait_for("the zone to sync", Duration::from_secs(10), || {
        server
            .zone
            .read()
            .ok()
            .filter(|z| z.is_synced())
            .map(|_| ())
    });
    server
}

/// Polls until the answer for `name` satisfies `ok`; answers how long that took.
fn until(server: SocketAddr, name: &str, ok: impl Fn(&Answer) -> bool) -> Duration {
    let start = Instant::now();
    wait_for(name, Duration::from_secs(5), || {
        ok(&ask(server, name, TYPE::A)).then_some(())
    });
    start.elapsed()
}

#[test]
fn dns_answers_services_and_forwards_the_rest() {
    let server = TestServer::start();
    let client = server.client();
    smol::block_on(async {
        let mut db = Namespace::default();
        db.metadata.name = "db".into();
        client.create(&db).await?;
        client
            .create(&service("default", "web", "10.43.0.10"))
            .await?;
        client
            .create(&endpoints("default", "web", &[("10.42.0.5", None)]))
            .await?;
        client.create(&service("db", "pg", "None")).await?;
        client
            .create(&endpoints(
                "db",
                "pg",
                &[("10.42.0.7", Some("pg-0")), ("10.42.1.3", None)],
            ))
            .await?;
        let many: Vec<String> = (1..=60).map(|i| format!("10.42.3.{i}")).collect();
        let many: Vec<(&str, Option<&str>)> = many.iter().map(|s| (s.as_str(), None)).collect();
        client.create(&service("db", "big", "None")).await?;
        client.create(&endpoints("db", "big", &many)).await?;
        Ok::<_, api::client::ClientError>(())
    })
    .expect("create the services");

    let upstream = Upstream::start();
    let dns = start_dns(&client, vec![upstream.addr]);
    let addr = dns.addr;
    assert_eq!(addr.ip().to_string(), "127.0.0.77");

    // A ClusterIP Service.
    let a = ask(addr, "web.default.svc.cluster.local", TYPE::A);
    assert_eq!(a.rcode, RCODE::NoError);
    assert!(a.authoritative);
    assert_eq!(a.ips, ips(&[[10, 43, 0, 10]]));
    // AAAA of a cluster name: NOERROR, no records, the SOA as authority.
    let aaaa = ask(addr, "web.default.svc.cluster.local", TYPE::AAAA);
    assert_eq!((aaaa.rcode, aaaa.answer_count), (RCODE::NoError, 0));
    assert_eq!(aaaa.authority, vec![TYPE::SOA]);
    // SRV of a named port.
    let srv = ask(addr, "_http._tcp.web.default.svc.cluster.local", TYPE::SRV);
    assert_eq!(
        srv.srv,
        vec![(80, "web.default.svc.cluster.local".to_string())]
    );

    // A headless Service: its ready endpoints; an endpoint by hostname.
    let pg = ask(addr, "pg.db.svc.cluster.local", TYPE::A);
    assert_eq!(pg.ips, ips(&[[10, 42, 0, 7], [10, 42, 1, 3]]));
    let pg0 = ask(addr, "pg-0.pg.db.svc.cluster.local", TYPE::A);
    assert_eq!(pg0.ips, ips(&[[10, 42, 0, 7]]));

    // Unknown cluster names: NXDOMAIN with the SOA; the upstream is not asked.
    let before = upstream.asked.load(Ordering::SeqCst);
    for name in [
        "nope.default.svc.cluster.local",
        "web.other.svc.cluster.local",
        "example.com.default.svc.cluster.local",
    ] {
        let nx = ask(addr, name, TYPE::A);
        assert_eq!(nx.rcode, RCODE::NameError, "{name}");
        assert!(nx.authoritative);
        assert_eq!(nx.authority, vec![TYPE::SOA], "{name}");
    }
    assert_eq!(upstream.asked.load(Ordering::SeqCst), before);

    // Everything else goes to the upstream, over UDP and over TCP.
    let fwd = ask(addr, "example.com", TYPE::A);
    assert_eq!(
        (fwd.rcode, fwd.ips.clone()),
        (RCODE::NoError, ips(&[[192, 0, 2, 53]]))
    );
    assert!(upstream.asked.load(Ordering::SeqCst) > before);
    let fwd = read(&ask_tcp_raw(addr, "example.org", TYPE::A));
    assert_eq!(fwd.ips, ips(&[[192, 0, 2, 53]]));

    // Too many records for UDP: truncated, and complete over TCP.
    let big = ask(addr, "big.db.svc.cluster.local", TYPE::A);
    assert!(big.truncated);
    assert_eq!(big.answer_count, 0);
    let big = read(&ask_tcp_raw(addr, "big.db.svc.cluster.local", TYPE::A));
    assert!(!big.truncated);
    assert_eq!(big.ips.len(), 60);

    // Changes are answered within a second.
    smol::block_on(client.create(&service("default", "late", "10.43.0.99"))).expect("create");
    let took = until(addr, "late.default.svc.cluster.local", |a| {
        a.ips == ips(&[[10, 43, 0, 99]])
    });
    assert!(took < Duration::from_secs(1), "a new Service took {took:?}");
    let mut eps = smol::block_on(client.get::<Endpoints>("db", "pg")).expect("get endpoints");
    eps.subsets[0].addresses[1].ip = "10.42.1.4".into();
    smol::block_on(client.replace(&eps)).expect("replace endpoints");
    let took = until(addr, "pg.db.svc.cluster.local", |a| {
        a.ips == ips(&[[10, 42, 0, 7], [10, 42, 1, 4]])
    });
    assert!(
        took < Duration::from_secs(1),
        "an Endpoints change took {took:?}"
    );
    smol::block_on(client.delete::<Service>("default", "late", &DeleteOptions::default()))
        .expect("delete");
    let took = until(addr, "late.default.svc.cluster.local", |a| {
        a.rcode == RCODE::NameError
    });
    assert!(took < Duration::from_secs(1), "a deletion took {took:?}");

    // With its upstream dead, a forwarded name answers SERVFAIL (cluster names still work).
    let lonely = start_dns(&client, vec![dead_address("127.0.0.78")]);
    let fail = ask(lonely.addr, "example.com", TYPE::A);
    assert_eq!(fail.rcode, RCODE::ServerFailure);
    let ok = ask(lonely.addr, "web.default.svc.cluster.local", TYPE::A);
    assert_eq!(ok.ips, ips(&[[10, 43, 0, 10]]));
}

fn busybox_pod(name: &str, node: &str, script: &str) -> Pod {
    Pod {
        metadata: meta("default", name),
        spec: PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(2),
            containers: vec![Container {
                name: "main".into(),
                image: Some(IMAGE.into()),
                args: vec!["sh".into(), "-c".into(), script.into()],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

const IMAGE: &str = "skiff.test/testbox:v1";

/// The first log of a finished pod's container.
fn finished_log(client: &Client, agent: &TestAgent, name: &str) -> String {
    let pod = wait_for(
        &format!("pod {name} to finish"),
        Duration::from_secs(60),
        || {
            smol::block_on(client.get::<Pod>("default", name))
                .ok()
                .filter(|p| matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed")))
        },
    );
    assert_eq!(pod.status.phase.as_deref(), Some("Succeeded"), "{pod:?}");
    let log = agent
        .data_dir()
        .join("pods")
        .join(&pod.metadata.uid)
        .join("logs/main/0.log");
    std::fs::read_to_string(&log).expect("the container's log")
}

#[test]
fn pods_get_the_cluster_dns_and_the_agent_serves_it() {
    use std::os::unix::process::CommandExt;
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();
    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("hello"), IMAGE);
    agent.import(&archive);

    // Port 53, so that pods (whose resolv.conf has no port) can use it.
    let dns_addr: SocketAddr = "127.0.0.79:53".parse().unwrap();
    assert!(
        UdpSocket::bind(dns_addr).is_ok() && std::net::TcpListener::bind(dns_addr).is_ok(),
        "{dns_addr} is taken: a resolver listening on 0.0.0.0:53 blocks this test"
    );
    let upstream = Upstream::start();
    let child = agent
        .command(Some(&token))
        .args(["--cluster-dns-address", &dns_addr.to_string()])
        .args(["--dns-upstream", &upstream.addr.to_string()])
        .args(["--cluster-domain", "edge.test"])
        .process_group(0)
        .spawn()
        .expect("start skiff-agent");
    agent.groups.push(child.id() as i32);
    agent.child = Some(child);
    let node = agent.node_name.clone();

    // The agent's own DNS server answers from the API, with the node's credentials.
    smol::block_on(client.create(&service("default", "web", "10.43.0.10"))).expect("service");
    wait_for("the agent's DNS server", Duration::from_secs(30), || {
        let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .ok()?;
        socket
            .send_to(&query("web.default.svc.edge.test", TYPE::A, 9), dns_addr)
            .ok()?;
        let mut buf = [0u8; 1024];
        let n = socket.recv(&mut buf).ok()?;
        (read(&buf[..n]).ips == ips(&[[10, 43, 0, 10]])).then_some(())
    });
    assert_eq!(
        ask(dns_addr, "example.com", TYPE::A).ips,
        ips(&[[192, 0, 2, 53]])
    );

    // ClusterFirst (the default policy): the cluster DNS, the cluster's search path, ndots:5.
    let script = "cat /etc/resolv.conf; echo ---; cat /etc/hosts";
    smol::block_on(client.create(&busybox_pod("first", &node, script))).expect("create pod");
    let mut none = busybox_pod("none", &node, "cat /etc/resolv.conf");
    none.spec.dns_policy = Some("None".into());
    none.spec.dns_config = Some(PodDnsConfig {
        nameservers: vec!["127.0.0.80".into()],
        searches: vec!["corp.test".into()],
        options: vec![],
    });
    smol::block_on(client.create(&none)).expect("create pod");
    // On the host network, with ClusterFirstWithHostNet: a short name resolves through the
    // search path, and other names through the upstream (busybox's own resolver).
    let mut hostnet = busybox_pod(
        "hostnet",
        &node,
        "nslookup -type=a web; echo ---; nslookup -type=a example.com; echo ---; cat /etc/resolv.conf",
    );
    hostnet.spec.host_network = Some(true);
    hostnet.spec.dns_policy = Some("ClusterFirstWithHostNet".into());
    smol::block_on(client.create(&hostnet)).expect("create pod");

    let text = finished_log(&client, &agent, "first");
    let (resolv, hosts) = text.split_once("---\n").expect("both files");
    let lines: Vec<&str> = resolv.lines().collect();
    assert!(
        lines[0].starts_with("search default.svc.edge.test svc.edge.test edge.test"),
        "{resolv}"
    );
    assert!(
        lines.contains(&format!("nameserver {}", dns_addr.ip()).as_str()),
        "{resolv}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("nameserver")).count(),
        1
    );
    assert!(lines.contains(&"options ndots:5"), "{resolv}");
    assert!(hosts.contains("127.0.0.1\tlocalhost\n"), "{hosts}");
    assert!(hosts.contains("\tfirst\n"), "{hosts}");

    let text = finished_log(&client, &agent, "none");
    assert_eq!(text, "search corp.test\nnameserver 127.0.0.80\n");

    let text = finished_log(&client, &agent, "hostnet");
    let parts: Vec<&str> = text.split("---\n").collect();
    assert_eq!(parts.len(), 3, "{text}");
    assert!(
        parts[0].contains("Name:\tweb.default.svc.edge.test\nAddress: 10.43.0.10\n"),
        "{text}"
    );
    assert!(
        parts[1].contains("Name:\texample.com\nAddress: 192.0.2.53\n"),
        "{text}"
    );
    assert!(parts[2].contains("nameserver 127.0.0.79\n"), "{text}");
    agent.clean_up();
}
