//! What the node reports about itself: capacity, system info, addresses. Readers take the
//! filesystem roots as parameters so tests can use fixtures.

use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// Facts about the machine, gathered once at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub cpus: u32,
    pub memory_kib: u64,
    pub ephemeral_storage_bytes: u64,
    /// Kubernetes architecture name: amd64, arm64, arm, ...
    pub arch: String,
    pub kernel_version: String,
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
}

/// The Kubernetes (GOARCH) name of a Rust/uname architecture.
pub fn kube_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" | "armv7l" | "armv6l" => "arm",
        "x86" | "i686" | "i386" => "386",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in KiB.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `PRETTY_NAME` of an `/etc/os-release` text.
pub fn parse_os_release(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The number of online CPUs.
pub fn cpu_count() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Size of the filesystem holding `path`, in bytes.
// The statvfs field types differ between targets (u32 on some 32-bit ones).
#[allow(clippy::unnecessary_cast)]
pub fn filesystem_size(path: &Path) -> u64 {
    match nix::sys::statvfs::statvfs(path) {
        Ok(s) => (s.blocks() as u64).saturating_mul(s.fragment_size() as u64),
        Err(_) => 0,
    }
}

impl NodeFacts {
    /// Gathers the facts of this machine; `data_dir` is where ephemeral storage lives.
    pub fn gather(data_dir: &Path) -> NodeFacts {
        NodeFacts {
            cpus: cpu_count(),
            memory_kib: parse_meminfo(&read_trim(Path::new("/proc/meminfo"))).unwrap_or(0),
            ephemeral_storage_bytes: filesystem_size(data_dir),
            arch: kube_arch(std::env::consts::ARCH).to_string(),
            kernel_version: read_trim(Path::new("/proc/sys/kernel/osrelease")),
            os_image: parse_os_release(&read_trim(Path::new("/etc/os-release")))
                .unwrap_or_else(|| "Linux".into()),
            machine_id: read_trim(Path::new("/etc/machine-id")),
            boot_id: read_trim(Path::new("/proc/sys/kernel/random/boot_id")),
        }
    }
}

/// The host name of this machine.
pub fn hostname() -> String {
    let h = read_trim(Path::new("/proc/sys/kernel/hostname"));
    if h.is_empty() {
        "localhost".into()
    } else {
        h.to_lowercase()
    }
}

/// `host:port` of an `https://host:port[/...]` URL.
pub fn server_authority(server: &str) -> Option<String> {
    let rest = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))?;
    let authority = rest.split('/').next()?;
    if authority.is_empty() {
        return None;
    }
    if authority.ends_with(']') || !authority.contains(':') {
        Some(format!("{authority}:443"))
    } else {
        Some(authority.to_string())
    }
}

/// The local address this machine uses to reach `server`: the node's InternalIP when not
/// given explicitly.
pub fn local_address_towards(server: &str) -> Option<IpAddr> {
    let authority = server_authority(server)?;
    let addr = authority.to_socket_addrs().ok()?.next()?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream.local_addr().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_and_os_release() {
        let meminfo = "MemTotal:        8049484 kB\nMemFree:  123 kB\n";
        assert_eq!(parse_meminfo(meminfo), Some(8_049_484));
        assert_eq!(parse_meminfo("nothing"), None);
        let os = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            parse_os_release(os).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(kube_arch("x86_64"), "amd64");
        assert_eq!(kube_arch("aarch64"), "arm64");
    }

    #[test]
    fn server_authorities() {
        assert_eq!(
            server_authority("https://10.0.0.1:6443").as_deref(),
            Some("10.0.0.1:6443")
        );
        assert_eq!(
            server_authority("https://example.com/").as_deref(),
            Some("example.com:443")
        );
        assert_eq!(
            server_authority("https://[::1]:6443").as_deref(),
            Some("[::1]:6443")
        );
        assert_eq!(server_authority("ftp://x"), None);
    }

    #[test]
    fn gathers_this_machine() {
        let f = NodeFacts::gather(Path::new("/"));
        assert!(f.cpus >= 1);
        assert!(f.memory_kib > 0);
        assert!(f.ephemeral_storage_bytes > 0);
        assert!(!f.kernel_version.is_empty());
    }
}
