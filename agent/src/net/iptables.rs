//! iptables, the shared way: skiff's rules live only in chains named `SKIFF-*`, each written
//! whole with `iptables-restore --noflush` (a `:CHAIN` line empties just that chain, atomically
//! with the new rules; every other chain and rule on the machine is left alone), and reached
//! through one jump rule from a built-in chain, added once with [`ensure_jump`].
//!
//! ```text
//! restore(payload)                                     // iptables-restore --noflush -w
//! ensure_jump(table, from_chain, to_chain, &matches)   // -N to_chain; -C or -I from_chain 1
//! ```
//!
//! The pod network owns `nat/SKIFF-POSTROUTING` (masquerade), `nat/SKIFF-HOSTPORTS` (hostPort
//! DNAT, from PREROUTING and OUTPUT) and `filter/SKIFF-FORWARD`, whose first rule jumps to the
//! NetworkPolicy enforcer's `SKIFF-NETPOL` (created here when missing, filled by
//! [`crate::netpol`]); the Service proxy uses its own `SKIFF-*` chains with the same two
//! helpers.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use api::cidr::Ipv4Cidr;

pub const POSTROUTING_CHAIN: &str = "SKIFF-POSTROUTING";
pub const HOSTPORTS_CHAIN: &str = "SKIFF-HOSTPORTS";
pub const FORWARD_CHAIN: &str = "SKIFF-FORWARD";
/// The NetworkPolicy enforcer's chain, jumped to first from [`FORWARD_CHAIN`].
pub const NETPOL_CHAIN: &str = crate::netpol::rules::TOP_CHAIN;

/// An iptables command failed.
#[derive(Debug, thiserror::Error)]
pub enum IptablesError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: &'static str,
        source: std::io::Error,
    },
    #[error("{program} failed: {stderr}")]
    Failed {
        program: &'static str,
        stderr: String,
    },
}

/// Feeds `payload` (iptables-save format) to `iptables-restore --noflush --wait`.
pub fn restore(payload: &str) -> Result<(), IptablesError> {
    let program = "iptables-restore";
    let mut child = Command::new(program)
        .args(["--noflush", "--wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| IptablesError::Spawn { program, source })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(payload.as_bytes())
            .map_err(|source| IptablesError::Spawn { program, source })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| IptablesError::Spawn { program, source })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(IptablesError::Failed {
            program,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn iptables(args: &[&str]) -> Result<bool, IptablesError> {
    let program = "iptables";
    let out = Command::new(program)
        .arg("--wait")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| IptablesError::Spawn { program, source })?;
    match out.status.code() {
        Some(0) => Ok(true),
        // 1: the rule checked for is not there / the chain already exists.
        Some(1) => Ok(false),
        _ => Err(IptablesError::Failed {
            program,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }),
    }
}

/// Makes sure `to_chain` exists in `table` and that `from_chain` jumps to it (with the extra
/// `matches`, e.g. `["-m", "addrtype", "--dst-type", "LOCAL"]`); the jump is inserted first in
/// `from_chain` when missing and left alone when present. Safe to call again at any time.
pub fn ensure_jump(
    table: &str,
    from_chain: &str,
    to_chain: &str,
    matches: &[&str],
) -> Result<(), IptablesError> {
    // Creating a chain that exists answers 1, which is fine.
    iptables(&["-t", table, "-N", to_chain])?;
    let mut rule: Vec<&str> = vec!["-t", table, "-C", from_chain];
    rule.extend_from_slice(matches);
    rule.extend_from_slice(&["-j", to_chain]);
    if iptables(&rule)? {
        return Ok(());
    }
    rule[2] = "-I";
    rule.insert(4, "1");
    if iptables(&rule)? {
        Ok(())
    } else {
        Err(IptablesError::Failed {
            program: "iptables",
            stderr: format!("cannot add the jump from {table}/{from_chain} to {to_chain}"),
        })
    }
}

/// One hostPort: traffic to `host_ip:host_port` goes to `pod_ip:container_port`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    pub host_ip: Ipv4Addr,
    pub host_port: u16,
    pub pod_ip: Ipv4Addr,
    pub container_port: u16,
}

/// The pod network's chains, whole: masquerade for pod traffic leaving the cluster range,
/// forwarding of pod traffic, and the hostPort DNAT rules.
pub fn render(cluster: Ipv4Cidr, host_ports: &[HostPort]) -> String {
    let mut s = String::new();
    s.push_str("*nat\n");
    s.push_str(&format!(
        ":{POSTROUTING_CHAIN} - [0:0]\n:{HOSTPORTS_CHAIN} - [0:0]\n"
    ));
    s.push_str(&format!(
        "-A {POSTROUTING_CHAIN} -s {cluster} ! -d {cluster} -m comment --comment \"skiff: pod traffic leaving the cluster\" -j MASQUERADE\n"
    ));
    for hp in host_ports {
        s.push_str(&format!(
            "-A {HOSTPORTS_CHAIN} -d {}/32 -p {} -m {} --dport {} -j DNAT --to-destination {}:{}\n",
            hp.host_ip, hp.protocol, hp.protocol, hp.host_port, hp.pod_ip, hp.container_port
        ));
    }
    s.push_str("COMMIT\n*filter\n");
    s.push_str(&format!(":{FORWARD_CHAIN} - [0:0]\n"));
    // NetworkPolicies first: their chain drops what no policy allows (see crate::netpol).
    s.push_str(&format!("-A {FORWARD_CHAIN} -j {NETPOL_CHAIN}\n"));
    s.push_str(&format!("-A {FORWARD_CHAIN} -s {cluster} -j ACCEPT\n"));
    s.push_str(&format!("-A {FORWARD_CHAIN} -d {cluster} -j ACCEPT\n"));
    s.push_str("COMMIT\n");
    s
}

/// Writes the pod network's chains and makes sure the built-in chains jump to them.
pub fn apply(cluster: Ipv4Cidr, host_ports: &[HostPort]) -> Result<(), IptablesError> {
    // The NetworkPolicy enforcer fills its chain; it must exist for the jump to it. Creating
    // a chain that exists answers 1, which is fine.
    iptables(&["-t", "filter", "-N", NETPOL_CHAIN])?;
    restore(&render(cluster, host_ports))?;
    ensure_jump("nat", "POSTROUTING", POSTROUTING_CHAIN, &[])?;
    ensure_jump("nat", "PREROUTING", HOSTPORTS_CHAIN, &[])?;
    ensure_jump("nat", "OUTPUT", HOSTPORTS_CHAIN, &[])?;
    ensure_jump("filter", "FORWARD", FORWARD_CHAIN, &[])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_masquerade_forward_and_host_ports() {
        let hp = HostPort {
            protocol: "tcp".into(),
            host_ip: "172.31.213.11".parse().unwrap(),
            host_port: 8080,
            pod_ip: "10.42.0.5".parse().unwrap(),
            container_port: 80,
        };
        let s = render("10.42.0.0/16".parse().unwrap(), &[hp]);
        assert!(s.starts_with("*nat\n:SKIFF-POSTROUTING - [0:0]\n:SKIFF-HOSTPORTS - [0:0]\n"));
        assert!(s.contains("-A SKIFF-POSTROUTING -s 10.42.0.0/16 ! -d 10.42.0.0/16 "));
        assert!(s.contains(
            "-A SKIFF-HOSTPORTS -d 172.31.213.11/32 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.42.0.5:80\n"
        ));
        assert!(s.contains("*filter\n:SKIFF-FORWARD - [0:0]\n-A SKIFF-FORWARD -j SKIFF-NETPOL\n"));
        assert_eq!(s.matches("COMMIT\n").count(), 2);
    }
}
