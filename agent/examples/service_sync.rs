//! Rule-sync benchmark of the service proxy (run by `bench/service-sync.sh`, as root): in a
//! fresh network namespace it creates, programs N Services with E endpoints each through the
//! agent's own code path (`Applier::apply_objects`: build the rules, `iptables-restore
//! --noflush`), then times a change of one endpoint. The host's rules are never touched.
//!
//! `service_sync [SERVICES] [ENDPOINTS] [CHANGES]` (defaults 1000 3 20).

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

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() -> anyhow::Result<()> {
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
        let t = Instant::now();
        let full = applier.apply_objects(&services, &endpoints, &cfg)?;
        let full_time = t.elapsed();
        let rules = applier.applied().map_or(0, |r| r.rule_count());
        let mut times = Vec::new();
        for c in 1..=changes {
            let (services, endpoints) = objects(n, per, c);
            let t = Instant::now();
            let r = applier.apply_objects(&services, &endpoints, &cfg)?;
            times.push(t.elapsed());
            anyhow::ensure!(
                !r.full && r.chains_written == 2,
                "unexpected change sync: {r:?}"
            );
        }
        times.sort();
        let t = Instant::now();
        let built = agent::proxy::rules::build(&services, &endpoints, &cfg);
        let build_time = t.elapsed();
        let t = Instant::now();
        applier.sync(&built)?;
        let tiny_time = t.elapsed();
        // An agent restart: everything rewritten over the existing rules.
        let mut restarted = Applier::new(Iptables::default());
        let t = Instant::now();
        restarted.apply_objects(&services, &endpoints, &cfg)?;
        let restart_time = t.elapsed();
        println!("service rule sync: {n} services x {per} endpoints, {rules} rules, {} chains written, {} KiB restore input", full.chains_written, full.input_bytes / 1024);
        println!("  full sync (empty tables):        {}", ms(full_time));
        println!("  full sync over existing rules:   {}", ms(restart_time));
        println!("  of which building the rules:     {}", ms(build_time));
        println!("  one-chain restore alone:         {}", ms(tiny_time));
        println!(
            "  one endpoint change ({changes} runs):  median {}, max {}",
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1])
        );
        Ok(())
    })();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    result
}
