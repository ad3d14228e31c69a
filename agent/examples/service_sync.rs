//! Rule-sync benchmark of the service proxy (run by `bench/service-sync.sh`, as root): in a
//! fresh network namespace it creates, programs N Services with E endpoints each through the
//! agent's own code path (`Applier::apply_objects`: build the rules, `iptables-restore
//! --noflush`), then times a change of one endpoint. The host's rules are never touched.
//!
//! `service_sync [SERVICES] [ENDPOINTS] [CHANGES]` (defaults 1000 3 20).
//!
//! Two helper modes for `bench/service-conn.sh`, run inside its namespaces:
//! `service_sync apply EXTRA CLUSTER_IP:PORT ENDPOINT_IP:PORT...` programs one Service (after
//! EXTRA other Services with 3 endpoints each, so the Service's rule is last of EXTRA + 1 in
//! the top chain) into the current network namespace and exits; the rules stay.
//! `service_sync input [SERVICES] [ENDPOINTS]` prints the first sync's `iptables-restore`
//! input (to time the tool by hand).
//! `service_sync serve ADDR` answers every HTTP/1.1 request with `200 ok` (keep-alive unless
//! the request says `Connection: close`), a thread per connection.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::proxy::{Applier, Iptables, RuleConfig};
use api::core::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort};
use api::object::Resource;

fn objects(n: usize, per: usize, bump: usize) -> (Vec<Service>, Vec<Endpoints>) {
    let (mut services, mut endpoints) = (Vec::new(), Vec::new());
    for i in 0..n {
        let mut s = Service::default();
        s.metadata.name = format!("svc-{i}");
        s.metadata.namespace = Some("bench".into());
        s.spec.cluster_ip = Some(format!("10.43.{}.{}", i / 250, i % 250 + 1));
        s.spec.ports = vec![ServicePort {
            name: Some("http".into()),
            port: 80,
            ..Default::default()
        }];
        s.set_defaults();
        services.push(s);
        let mut e = Endpoints::default();
        e.metadata.name = format!("svc-{i}");
        e.metadata.namespace = Some("bench".into());
        e.subsets = vec![EndpointSubset {
            addresses: (0..per)
                .map(|j| {
                    let ip = if i == n / 2 && j == 0 && bump > 0 {
                        // Endpoint 0 of the middle Service moves with each change.
                        format!("10.41.{}.{}", bump / 250, bump % 250 + 1)
                    } else {
                        let k = i * per + j;
                        format!("10.42.{}.{}", k / 250 % 250, k % 250 + 1)
                    };
                    EndpointAddress {
                        ip,
                        ..Default::default()
                    }
                })
                .collect(),
            ports: vec![EndpointPort {
                name: Some("http".into()),
                port: 8080,
                protocol: Some("TCP".into()),
                ..Default::default()
            }],
            ..Default::default()
        }];
        endpoints.push(e);
    }
    (services, endpoints)
}

/// The benchmark's Service for `apply`, with its endpoints.
fn one_service(
    name: &str,
    cluster: &str,
    endpoints: &[String],
) -> anyhow::Result<(Service, Endpoints)> {
    let (ip, port) = cluster
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("{cluster}: want IP:PORT"))?;
    let mut s = Service::default();
    s.metadata.name = name.into();
    s.metadata.namespace = Some("bench".into());
    s.spec.cluster_ip = Some(ip.into());
    s.spec.ports = vec![ServicePort {
        name: Some("http".into()),
        port: port.parse()?,
        ..Default::default()
    }];
    s.set_defaults();
    let mut e = Endpoints::default();
    e.metadata.name = name.into();
    e.metadata.namespace = Some("bench".into());
    for ep in endpoints {
        let (ip, port) = ep
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("{ep}: want IP:PORT"))?;
        e.subsets.push(EndpointSubset {
            addresses: vec![EndpointAddress {
                ip: ip.into(),
                ..Default::default()
            }],
            ports: vec![EndpointPort {
                name: Some("http".into()),
                port: port.parse()?,
                protocol: Some("TCP".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    Ok((s, e))
}

fn apply(args: &[String]) -> anyhow::Result<()> {
    let [extra, cluster, endpoints @ ..] = args else {
        anyhow::bail!("usage: service_sync apply EXTRA CLUSTER_IP:PORT ENDPOINT_IP:PORT...");
    };
    let (mut services, mut eps) = objects(extra.parse()?, 3, 0);
    let (s, e) = one_service("zz-measured", cluster, endpoints)?;
    services.push(s);
    eps.push(e);
    let mut applier = Applier::new(Iptables::default());
    let r = applier.apply_objects(&services, &eps, &RuleConfig::default())?;
    let rules = applier.applied().map_or(0, |r| r.rule_count());
    println!(
        "service rules applied: {} services, {rules} rules, {} chains written",
        services.len(),
        r.chains_written
    );
    Ok(())
}

fn serve(addr: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)?;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        std::thread::spawn(move || answer(conn));
    }
    Ok(())
}

/// Answers the requests on one connection until the peer closes it or asks to.
fn answer(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let close = head.contains("connection: close");
            buf.drain(..end + 4);
            let reply: &[u8] = if close {
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
            } else {
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
            };
            if conn.write_all(reply).is_err() || close {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
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

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        Some("apply") => return apply(&argv[1..]),
        Some("serve") => return serve(argv.get(1).map_or("0.0.0.0:8080", String::as_str)),
        Some("input") => {
            // The first sync's iptables-restore input, for timing the tool by hand.
            let n = argv.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
            let per = argv.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
            let (services, endpoints) = objects(n, per, 0);
            let built = agent::proxy::rules::build(&services, &endpoints, &RuleConfig::default());
            let none = std::collections::BTreeMap::new();
            print!(
                "{}",
                agent::proxy::rules::restore_input(&built, &none, agent::proxy::rules::JUMPS)
            );
            return Ok(());
        }
        _ => {}
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(1000);
    let per = args.get(1).copied().unwrap_or(3);
    let changes = args.get(2).copied().unwrap_or(20).max(1);
    let ns = format!("skiff-bench-sync-{}", std::process::id());
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
        let cfg = RuleConfig::default();
        let (services, endpoints) = objects(n, per, 0);
        let mut applier = Applier::new(Iptables::default());
        let (t, c) = (Instant::now(), cpu());
        let full = applier.apply_objects(&services, &endpoints, &cfg)?;
        let full_time = (t.elapsed(), cpu() - c);
        let rules = applier.applied().map_or(0, |r| r.rule_count());
        let mut times = Vec::new();
        for i in 1..=changes {
            let (services, endpoints) = objects(n, per, i);
            let (t, c) = (Instant::now(), cpu());
            let r = applier.apply_objects(&services, &endpoints, &cfg)?;
            times.push((t.elapsed(), cpu() - c));
            anyhow::ensure!(
                !r.full && r.chains_written == 2 && r.chains_deleted == 1,
                "unexpected change sync: {r:?}"
            );
        }
        times.sort();
        let (services, endpoints) = objects(n, per, changes);
        let t = Instant::now();
        let built = agent::proxy::rules::build(&services, &endpoints, &cfg);
        let build_time = t.elapsed();
        let t = Instant::now();
        let same = applier.sync(&built)?;
        let same_time = t.elapsed();
        anyhow::ensure!(
            same.input_bytes == 0,
            "a sync without changes wrote: {same:?}"
        );
        // An agent restart: the rules are read back, and nothing differs.
        let mut restarted = Applier::new(Iptables::default());
        let (t, c) = (Instant::now(), cpu());
        let r = restarted.apply_objects(&services, &endpoints, &cfg)?;
        let restart_time = (t.elapsed(), cpu() - c);
        anyhow::ensure!(r.full && r.input_bytes == 0, "restart wrote: {r:?}");
        println!("service rule sync: {n} services x {per} endpoints, {rules} rules, {} chains written, {} KiB restore input", full.chains_written, full.input_bytes / 1024);
        let show = |(wall, cpu): (Duration, Duration)| format!("{} (cpu {})", ms(wall), ms(cpu));
        println!("  full sync (empty tables):        {}", show(full_time));
        println!(
            "  one endpoint change ({changes} runs):  median {}, max {}",
            show(times[times.len() / 2]),
            ms(times[times.len() - 1].0)
        );
        println!(
            "  restart over the same rules:     {} (reads back, writes nothing)",
            show(restart_time)
        );
        println!("  building the rules:              {}", ms(build_time));
        println!("  sync with nothing to change:     {}", ms(same_time));
        Ok(())
    })();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    result
}
