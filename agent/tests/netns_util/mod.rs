//! Network namespaces for multi-node tests: `ip netns` for the plumbing (tests only; the
//! product uses netlink), commands started inside a namespace with `setns` before `exec`
//! (the host's mount namespace is kept, unlike `ip netns exec`, so the usual clean-up of
//! sandboxes and mounts works), and a thread that runs test code inside a namespace.
#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// Runs `ip ARGS`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ip ARGS` output.
pub fn ip_output(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    pub fn new(name: &str) -> NetNs {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        ip(&["netns", "add", name]);
        ip(&["-n", name, "link", "set", "lo", "up"]);
        NetNs { name: name.into() }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    }

    pub fn ip_output(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip_output(&all)
    }

    /// Makes `cmd` start inside this namespace.
    pub fn enter_on_exec(&self, cmd: &mut Command) {
        let file = std::fs::File::open(self.path()).expect("open the netns file");
        // SAFETY: the closure runs in the forked child before exec and only calls setns(2),
        // which is async-signal-safe, on a descriptor the parent keeps open (moved into the
        // closure, which the Command owns until spawn returns).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Runs `f` on a thread inside this namespace (sockets it opens live there).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file = std::fs::File::open(self.path()).expect("open the netns file");
        let handle = std::thread::spawn(move || {
            // SAFETY: setns on a descriptor we own, for this thread only.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        });
        match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl NetNs {
    /// Like `run`, but answers at once with the thread's handle.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let file = std::fs::File::open(self.path()).expect("open the netns file");
        std::thread::spawn(move || {
            // SAFETY: setns on a descriptor we own, for this thread only.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A test LAN: a bridge in its own namespace, and hosts (each its own namespace) whose
/// `eth0` is plugged into it with an address of `prefix.N/24`. No namespace gets a default
/// route: nothing here can reach beyond the machine.
pub struct Lan {
    pub hub: NetNs,
    pub hosts: Vec<NetNs>,
    prefix: String,
}

impl Lan {
    /// `prefix` is the first three octets, e.g. `172.31.213`; the hub is `.1`.
    pub fn new(tag: &str, prefix: &str) -> Lan {
        let hub = NetNs::new(&format!("{tag}-hub"));
        hub.ip(&["link", "add", "br0", "type", "bridge"]);
        hub.ip(&["addr", "add", &format!("{prefix}.1/24"), "dev", "br0"]);
        hub.ip(&["link", "set", "br0", "up"]);
        Lan {
            hub,
            hosts: Vec::new(),
            prefix: prefix.into(),
        }
    }

    pub fn hub_addr(&self) -> String {
        format!("{}.1", self.prefix)
    }

    /// Adds host `name` with address `prefix.n`; answers that address.
    pub fn add_host(&mut self, name: &str, n: u8) -> String {
        let ns = NetNs::new(name);
        let port = format!("p{n}");
        self.hub.ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
        ]);
        self.hub.ip(&["link", "set", &port, "master", "br0", "up"]);
        let addr = format!("{}.{n}", self.prefix);
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        self.hosts.push(ns);
        addr
    }

    pub fn host(&self, name: &str) -> &NetNs {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .expect("a host of the LAN")
    }
}
