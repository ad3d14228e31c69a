//! NetworkPolicy benchmark (run by `bench/netpol.sh`, as root).
//!
//! `netpol_bench sync [POLICIES] [PODS] [CHANGES] [NODES]` (defaults 1000 1000 20 1): in a
//! fresh network namespace, the enforcer's own code (`rules::build`, `Applier::sync`:
//! iptables-restore --noflush) programs POLICIES NetworkPolicies over PODS pods, one in NODES
//! of them on this node (all by default, the worst case: every pod isolated both ways here),
//! then times a pod starting, a policy changing, a restart over the same rules and a sync with
//! nothing to change. The host's rules are never
//! touched. The cluster (see [`world`]): 10 namespaces of PODS/10 pods; in each a default deny
//! of both directions; every other policy selects one pod and allows ingress from its
//! namespace's clients (1 pod in 10) on 8080 and on the named port `http`, and egress to the
//! next pod on 5432 and to any address on UDP 53.
//!
//! Helper modes for the connection benchmark of `bench/netpol.sh`, run inside its
//! namespaces:
//! `netpol_bench apply none|policy CLIENT_IP SERVER_IP POLICIES PODS` programs, in the
//! current namespace, the pod network's own chains (`net::iptables::apply`) and either no
//! policy or the [`world`] plus two pods: the server, isolated for ingress with a policy
//! allowing the client on 5201-5202, and the client, isolated for egress with one allowing
//! the server; their jumps come last of the top chain.
//! `netpol_bench sink ADDR` reads and drops what every connection sends.
//! `netpol_bench accept ADDR` accepts connections and closes them.
//! `netpol_bench stream ADDR SECONDS` sends as fast as it can on one connection; prints MB/s.
//! `netpol_bench connect ADDR SECONDS THREADS` opens, writes a byte on, and closes
//! connections; prints connections/s (run it where `net.ipv4.tcp_tw_reuse` is 1).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::netpol::rules::{build, Chains, Inputs, NamedPort, PodInfo};
use agent::netpol::Applier;
use agent::proxy::Iptables;
use api::networking::NetworkPolicy;
use serde_json::json;

const NAMESPACES: usize = 10;

fn pod_ip(i: usize) -> Ipv4Addr {
    // 10.246.1.0 onwards: clear of the benchmark's client (.0.2) and server (.0.3).
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 246, 1, 0)) + i as u32)
}

fn policy(ns: &str, name: &str, spec: serde_json::Value) -> NetworkPolicy {
    let mut p: NetworkPolicy = api::codec::from_json(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    }))
    .expect("a policy");
    api::object::Resource::set_defaults(&mut p);
    p
}

/// The pods, the namespaces' labels and the policies of a benchmark cluster.
type World = (
    Vec<PodInfo>,
    BTreeMap<String, BTreeMap<String, String>>,
    Vec<NetworkPolicy>,
);

/// The benchmark's cluster: `pods` pods in 10 namespaces, `policies` policies (see the
/// module documentation), one pod in `nodes` of each namespace on node `here` (all with one
/// node). `bump` adds that many client pods, on `here`, to the first namespace (a pod
/// starting).
fn world(policies: usize, pods: usize, bump: usize, nodes: usize) -> World {
    let ns_name = |i: usize| format!("ns-{}", i % NAMESPACES);
    let mut out = Vec::new();
    for i in 0..pods + bump {
        let ns = if i >= pods { ns_name(0) } else { ns_name(i) };
        let mut labels = BTreeMap::from([("app".to_string(), format!("app-{i}"))]);
        if (i / NAMESPACES).is_multiple_of(10) || i >= pods {
            labels.insert("role".into(), "client".into());
        }
        out.push(PodInfo {
            namespace: ns,
            name: format!("pod-{i}"),
            // One in `nodes` of every namespace's pods (none of its clients but with one node).
            node: if i / NAMESPACES % nodes == 1 % nodes || i >= pods {
                "here".into()
            } else {
                format!("node-{}", i % nodes)
            },
            ip: pod_ip(i),
            labels,
            named_ports: vec![NamedPort {
                name: "http".into(),
                protocol: "TCP".into(),
                port: 8081,
            }],
        });
    }
    let namespaces = (0..NAMESPACES)
        .map(|i| {
            let name = ns_name(i);
            let labels = BTreeMap::from([
                ("kubernetes.io/metadata.name".to_string(), name.clone()),
                (
                    "env".to_string(),
                    if i % 2 == 0 { "prod" } else { "dev" }.to_string(),
                ),
            ]);
            (name, labels)
        })
        .collect();
    let mut list = Vec::new();
    for i in 0..policies.min(NAMESPACES) {
        list.push(policy(
            &ns_name(i),
            "default-deny",
            json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        ));
    }
    for k in 0..policies.saturating_sub(NAMESPACES) {
        let target = k % pods.max(1);
        list.push(policy(
            &ns_name(target),
            &format!("app-{k}"),
            json!({
                "podSelector": {"matchLabels": {"app": format!("app-{target}")}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                             "ports": [{"port": 8080}, {"port": "http"}]}],
                "egress": [
                    {"to": [{"podSelector": {"matchLabels": {"app": format!("app-{}", target + NAMESPACES)}}}],
                     "ports": [{"port": 5432}]},
                    {"ports": [{"protocol": "UDP", "port": 53}]},
                ],
            }),
        ));
    }
    (out, namespaces, list)
}

fn chains_of(
    pods: &[PodInfo],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    policies: &[NetworkPolicy],
) -> Chains {
    build(&Inputs {
        node: "here",
        pods,
        namespaces,
        policies,
    })
}

/// CPU time of this process and its finished children (the iptables tools), user and system.
fn cpu() -> Duration {
    let mut total = Duration::ZERO;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: an all-zero rusage is a valid value, and getrusage only writes into it.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: u is a valid, writable rusage.
        if unsafe { libc::getrusage(who, &mut u) } == 0 {
            for tv in [u.ru_utime, u.ru_stime] {
                total += Duration::from_secs(tv.tv_sec as u64)
                    + Duration::from_micros(tv.tv_usec as u64);
            }
        }
    }
    total
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<(Duration, Duration)>) -> ((Duration, Duration), Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() - 1].0)
}

fn sync(policies: usize, pods: usize, changes: usize, nodes: usize) -> anyhow::Result<()> {
    let ns = format!("skiff-bench-netpol-{}", std::process::id());
    anyhow::ensure!(
        Command::new("ip")
            .args(["netns", "add", &ns])
            .status()?
            .success(),
        "ip netns add {ns} failed (root needed)"
    );
    let result = (|| -> anyhow::Result<()> {
        let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
        // SAFETY: setns with a valid netns fd changes only this thread's network namespace;
        // the program runs everything on this one thread and its child processes.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        anyhow::ensure!(rc == 0, "setns: {}", std::io::Error::last_os_error());
        let (p, n, l) = world(policies, pods, 0, nodes);
        let t = Instant::now();
        let desired = chains_of(&p, &n, &l);
        let build_time = t.elapsed();
        let rules: usize = desired.values().map(Vec::len).sum();
        let chains = desired.len();
        let mut applier = Applier::new(Iptables::default());
        let (t, c) = (Instant::now(), cpu());
        let full = applier.sync(desired.clone())?;
        let full_time = (t.elapsed(), cpu() - c);
        anyhow::ensure!(full.chains_written == chains, "full sync: {full:?}");
        // A client pod starts (and then goes, so each run starts from the same rules): every
        // policy of its namespace allows it; it is isolated itself by the default deny.
        let mut starts = Vec::new();
        let mut start_chains = 0;
        for _ in 0..changes {
            let (t, c) = (Instant::now(), cpu());
            let (p, n, l) = world(policies, pods, 1, nodes);
            let r = applier.sync(chains_of(&p, &n, &l))?;
            starts.push((t.elapsed(), cpu() - c));
            start_chains = r.chains_written;
            applier.sync(desired.clone())?;
        }
        // One policy's port changes (and back).
        let mut edits = Vec::new();
        // The policies whose pod is on this node.
        let local: Vec<usize> = (NAMESPACES..l.len())
            .filter(|k| {
                let app = l[*k].spec.pod_selector.match_labels.get("app");
                p.iter()
                    .any(|pod| pod.node == "here" && pod.labels.get("app") == app)
            })
            .collect();
        anyhow::ensure!(!local.is_empty(), "no policy selects a pod of this node");
        for i in 0..changes {
            let mut l2 = l.clone();
            if let Some(p) = l2.get_mut(local[i % local.len()]) {
                p.spec.ingress[0].ports[0].port = Some(api::meta::IntOrString::Int(8443));
            }
            let (t, c) = (Instant::now(), cpu());
            let r = applier.sync(chains_of(&p, &n, &l2))?;
            edits.push((t.elapsed(), cpu() - c));
            anyhow::ensure!(r.chains_written == 1, "one policy changed: {r:?}");
            applier.sync(desired.clone())?;
        }
        let t = Instant::now();
        let same = applier.sync(chains_of(&p, &n, &l))?;
        let same_time = t.elapsed();
        anyhow::ensure!(same.input_bytes == 0, "nothing changed, yet: {same:?}");
        let mut restarted = Applier::new(Iptables::default());
        let (t, c) = (Instant::now(), cpu());
        let r = restarted.sync(chains_of(&p, &n, &l))?;
        let restart_time = (t.elapsed(), cpu() - c);
        anyhow::ensure!(r.full && r.input_bytes == 0, "restart wrote: {r:?}");
        println!(
            "network policy sync: {policies} policies, {pods} pods ({} on this node), {rules} rules in {chains} chains, {} KiB restore input",
            pods.div_ceil(nodes),
            full.input_bytes / 1024
        );
        let show = |(wall, cpu): (Duration, Duration)| format!("{} (cpu {})", ms(wall), ms(cpu));
        println!("  full sync (empty table):           {}", show(full_time));
        let (m, max) = median(starts);
        println!(
            "  a client pod starts ({changes} runs):     median {}, max {} ({start_chains} chains rewritten)",
            show(m),
            ms(max)
        );
        let (m, max) = median(edits);
        println!(
            "  a policy changes ({changes} runs):        median {}, max {}",
            show(m),
            ms(max)
        );
        println!(
            "  restart over the same rules:        {} (reads back, writes nothing)",
            show(restart_time)
        );
        println!("  building the rules:                 {}", ms(build_time));
        println!("  sync with nothing to change:        {}", ms(same_time));
        Ok(())
    })();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    result
}

/// Programs the pod network's chains and, with `policy`, the world plus the measured pair.
fn apply(args: &[String]) -> anyhow::Result<()> {
    let [mode, client, server, policies, pods] = args else {
        anyhow::bail!("usage: netpol_bench apply none|policy CLIENT_IP SERVER_IP POLICIES PODS");
    };
    let cluster: api::cidr::Ipv4Cidr = "10.246.0.0/16".parse()?;
    agent::net::iptables::apply(cluster, &[])?;
    let mut applier = Applier::new(Iptables::default());
    if mode == "none" {
        agent::netpol::clear(&Iptables::default())?;
        println!("no network policy");
        return Ok(());
    }
    let (mut p, n, mut l) = world(policies.parse()?, pods.parse()?, 0, 1);
    // The measured pair sorts last by address: their jumps end the top chain.
    for (name, ip, app) in [
        ("client", client, "bench-client"),
        ("server", server, "bench-server"),
    ] {
        p.push(PodInfo {
            namespace: "ns-0".into(),
            name: name.into(),
            node: "here".into(),
            ip: ip.parse()?,
            labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            named_ports: Vec::new(),
        });
    }
    l.push(policy(
        "ns-0",
        "bench-server",
        json!({"podSelector": {"matchLabels": {"app": "bench-server"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "bench-client"}}}],
                         "ports": [{"port": 5201, "endPort": 5202}]}]}),
    ));
    l.push(policy(
        "ns-0",
        "bench-client",
        json!({"podSelector": {"matchLabels": {"app": "bench-client"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "bench-server"}}}],
                        "ports": [{"port": 5201, "endPort": 5202}]}]}),
    ));
    let desired = chains_of(&p, &n, &l);
    let rules: usize = desired.values().map(Vec::len).sum();
    let top = desired[agent::netpol::rules::TOP_CHAIN].len();
    applier.sync(desired)?;
    println!(
        "{} policies over {} pods: {rules} rules, {top} in the top chain",
        l.len(),
        p.len()
    );
    Ok(())
}

fn sink(addr: &str) -> anyhow::Result<()> {
    let listener = listen(addr)?;
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
        });
    }
    Ok(())
}

/// A listener with a long accept queue: a full queue drops SYNs, which costs the client a
/// second (its first retransmission) and would measure the scheduler, not the rules.
fn listen(addr: &str) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    // SAFETY: listen(2) on a socket this function owns; calling it again only resizes the
    // queue.
    let rc = unsafe { libc::listen(listener.as_raw_fd(), 4096) };
    anyhow::ensure!(rc == 0, "listen: {}", std::io::Error::last_os_error());
    Ok(listener)
}

/// Accepts connections one after another on one thread, reads each to its end and closes
/// it (the client closes first, so the TIME_WAIT states are the client's).
fn accept(addr: &str) -> anyhow::Result<()> {
    let listener = listen(addr)?;
    let mut buf = [0u8; 64];
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    }
    Ok(())
}

fn stream(addr: &str, secs: u64) -> anyhow::Result<()> {
    let mut conn = TcpStream::connect(addr)?;
    let buf = vec![0x5au8; 1 << 16];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        conn.write_all(&buf)?;
        sent += buf.len() as u64;
    }
    let rate = sent as f64 / start.elapsed().as_secs_f64() / 1e6;
    println!("{rate:.0}");
    Ok(())
}

fn connect(addr: &str, secs: u64, threads: usize) -> anyhow::Result<()> {
    let addr: std::net::SocketAddr = addr.parse()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    if let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                        let _ = c.write_all(b"x");
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    println!("{:.0}", total as f64 / start.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| argv.get(i).map(String::as_str);
    let num = |i: usize, default: usize| arg(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    match arg(0) {
        Some("apply") => apply(&argv[1..]),
        Some("sink") => sink(arg(1).unwrap_or("0.0.0.0:5201")),
        Some("accept") => accept(arg(1).unwrap_or("0.0.0.0:5202")),
        Some("stream") => stream(arg(1).unwrap_or("127.0.0.1:5201"), num(2, 5) as u64),
        Some("connect") => connect(
            arg(1).unwrap_or("127.0.0.1:5201"),
            num(2, 5) as u64,
            num(3, 4),
        ),
        Some("sync") | None => sync(
            num(1, 1000),
            num(2, 1000),
            num(3, 20).max(1),
            num(4, 1).max(1),
        ),
        Some(other) => anyhow::bail!("unknown mode {other}"),
    }
}
