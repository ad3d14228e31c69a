//! The service proxy against the real kernel, inside a network namespace the test creates
//! (needs root, `ip` and `iptables`): three TCP backends on a veth interface, Services in
//! front of them, connections through the ClusterIP and a NodePort, a Service without
//! endpoints refusing at once, an endpoint change applied incrementally, rules removed by hand
//! and repaired. The host's own iptables rules must be the same afterwards.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::proxy::{Applier, Iptables, RuleConfig};
use api::core::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort};
use api::meta::IntOrString;
use api::object::Resource;

struct Netns {
    name: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("skiff-px-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        let n = ns.name.as_str();
        ip(&["-n", n, "link", "set", "lo", "up"]);
        // A veth pair with both ends in the namespace stands in for the node's interface.
        ip(&[
            "-n", n, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ]);
        for a in [
            "10.42.0.1/24",
            "10.42.0.11/24",
            "10.42.0.12/24",
            "10.42.0.13/24",
        ] {
            ip(&["-n", n, "addr", "add", a, "dev", "eth0"]);
        }
        ip(&["-n", n, "link", "set", "eth0", "up"]);
        ip(&["-n", n, "link", "set", "eth1", "up"]);
        // ClusterIPs need a route (any: the DNAT happens before routing decides again).
        ip(&["-n", n, "route", "add", "10.43.0.0/16", "dev", "eth0"]);
        ns
    }

    /// Runs `f` on a thread inside the namespace (and so are the iptables tools it runs).
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open the netns");
            // SAFETY: setns on a valid namespace fd only changes this thread's network
            // namespace; the thread is ours and ends with `f`.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("the netns thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// The host's rules without counters and time stamps.
fn host_rules() -> String {
    let out = Command::new("iptables-save")
        .output()
        .expect("iptables-save");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.find(" [") {
            Some(i) if l.starts_with(':') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn service(name: &str, ip: &str, ty: &str, node_port: Option<i32>) -> Service {
    let mut s = Service::default();
    s.metadata.name = name.into();
    s.metadata.namespace = Some("default".into());
    s.spec.cluster_ip = Some(ip.into());
    s.spec.type_ = Some(ty.into());
    s.spec.ports = vec![ServicePort {
        name: Some("http".into()),
        port: 80,
        target_port: Some(IntOrString::String("web".into())),
        node_port,
        ..Default::default()
    }];
    s.set_defaults();
    s
}

fn endpoints(name: &str, ips: &[&str]) -> Endpoints {
    let mut e = Endpoints::default();
    e.metadata.name = name.into();
    e.metadata.namespace = Some("default".into());
    if !ips.is_empty() {
        e.subsets = vec![EndpointSubset {
            addresses: ips
                .iter()
                .map(|ip| EndpointAddress {
                    ip: ip.to_string(),
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
        }];
    }
    e
}

/// A backend that answers each connection with its name.
fn backend(addr: &str, name: &'static str) {
    let l = TcpListener::bind(addr).expect("bind a backend");
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(name.as_bytes());
        }
    });
}

fn ask(addr: &str) -> std::io::Result<String> {
    let addr: SocketAddr = addr.parse().expect("address");
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut s = String::new();
    c.read_to_string(&mut s)?;
    Ok(s)
}

fn iptables(args: &[&str]) {
    let out = Command::new("iptables")
        .args(args)
        .output()
        .expect("iptables");
    assert!(
        out.status.success(),
        "iptables {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn services_are_proxied_inside_a_network_namespace() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (network namespaces and iptables)"
    );
    let before = host_rules();
    let ns = Netns::new("svc");
    ns.run(|| {
        backend("10.42.0.11:8080", "b1");
        backend("10.42.0.12:8080", "b2");
        backend("10.42.0.13:8080", "b3");
        let mut sticky = service("sticky", "10.43.0.30", "ClusterIP", None);
        sticky.spec.session_affinity = Some("ClientIP".into());
        sticky.set_defaults();
        let services = vec![
            service("web", "10.43.0.10", "ClusterIP", None),
            service("empty", "10.43.0.20", "ClusterIP", None),
            service("np", "10.43.0.21", "NodePort", Some(30080)),
            sticky,
        ];
        let all = ["10.42.0.11", "10.42.0.12", "10.42.0.13"];
        let mut eps = vec![
            endpoints("web", &all),
            endpoints("empty", &[]),
            endpoints("np", &["10.42.0.12"]),
            endpoints("sticky", &all),
        ];
        let cfg = RuleConfig::default();
        let mut applier = Applier::new(Iptables::default());
        let first = applier
            .apply_objects(&services, &eps, &cfg)
            .expect("first sync");
        assert!(first.full);
        assert_eq!(first.jumps_inserted, 6);
        assert!(applier.in_place().expect("check"));

        // Balanced over all three backends.
        let seen: BTreeSet<String> = (0..60)
            .map(|_| ask("10.43.0.10:80").expect("through the ClusterIP"))
            .collect();
        assert_eq!(seen, ["b1", "b2", "b3"].map(String::from).into());

        // No endpoints: refused at once, not left hanging.
        let started = Instant::now();
        let e = ask("10.43.0.20:80").expect_err("no endpoints");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        assert!(started.elapsed() < Duration::from_secs(1));

        // A NodePort on a local address.
        assert_eq!(ask("10.42.0.1:30080").expect("node port"), "b2");

        // ClientIP affinity: one client, one backend.
        let sticky: BTreeSet<String> = (0..20)
            .map(|_| ask("10.43.0.30:80").expect("sticky"))
            .collect();
        assert_eq!(sticky.len(), 1, "{sticky:?}");

        // One endpoint goes: only its chains change.
        eps[0] = endpoints("web", &["10.42.0.11", "10.42.0.13"]);
        let change = applier
            .apply_objects(&services, &eps, &cfg)
            .expect("change");
        assert!(!change.full);
        assert_eq!(
            (change.chains_written, change.chains_deleted),
            (1, 1),
            "{change:?}"
        );
        let seen: BTreeSet<String> = (0..30)
            .map(|_| ask("10.43.0.10:80").expect("after the change"))
            .collect();
        assert_eq!(seen, ["b1", "b3"].map(String::from).into());
        // Nothing changed: nothing is run.
        let none = applier
            .apply_objects(&services, &eps, &cfg)
            .expect("no change");
        assert_eq!(none.input_bytes, 0);

        // Someone removes the rules: the check notices and the repair restores them.
        iptables(&["-t", "nat", "-F", "SKIFF-SERVICES"]);
        iptables(&[
            "-t",
            "nat",
            "-D",
            "OUTPUT",
            "-m",
            "comment",
            "--comment",
            "skiff service portals",
            "-j",
            "SKIFF-SERVICES",
        ]);
        assert!(ask("10.43.0.10:80").is_err());
        assert!(!applier.in_place().expect("check"));
        let repaired = applier
            .repair()
            .expect("repair")
            .expect("a repair was needed");
        // Only what was removed is written again.
        assert!(
            repaired.full && repaired.jumps_inserted == 1 && repaired.chains_written == 1,
            "{repaired:?}"
        );
        assert!(applier.in_place().expect("check"));
        assert!(applier.repair().expect("repair").is_none());
        assert!(ask("10.43.0.10:80").is_ok());

        // The rules read back are exactly the rules written (iptables-save's spelling): a
        // fresh applier (an agent restart) over the same Services writes nothing at all.
        let mut same = Applier::new(Iptables::default());
        let r = same
            .apply_objects(&services, &eps, &cfg)
            .expect("restart over the same rules");
        assert!(r.full && r.input_bytes == 0, "{r:?}");
        assert!(same.in_place().expect("check"));

        // A fresh applier (an agent restart) removes chains of Services that went away.
        let mut restarted = Applier::new(Iptables::default());
        let r = restarted
            .apply_objects(&services[..1], &eps[..1], &cfg)
            .expect("restart sync");
        assert!(
            r.full && r.chains_deleted > 0 && r.jumps_inserted == 0,
            "{r:?}"
        );
        let e = ask("10.43.0.30:80").expect_err("sticky is gone");
        assert_ne!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(ask("10.43.0.10:80").is_ok());
    });
    drop(ns);
    assert_eq!(host_rules(), before, "the host's iptables rules changed");
}
