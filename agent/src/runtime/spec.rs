//! Building the OCI runtime spec (`config.json`) for one container.
//!
//! The spec follows Docker's defaults: Docker's default capability set, runc's masked and
//! read-only `/proc` paths, `/dev`, `/dev/pts`, `/dev/shm`, `/dev/mqueue` and a read-only
//! `/sys`; new mount and pid namespaces; the pod's ipc, uts and (unless host networking) net
//! namespaces joined by path. There is no seccomp profile: libcontainer is built without its
//! `libseccomp` feature, so containers run unconfined by seccomp (as `--privileged` would).

use std::path::Path;

use libcontainer::oci_spec::runtime::{get_default_maskedpaths, get_default_readonly_paths, Spec};
use serde_json::{json, Value};

use super::{ContainerSpec, MountKind, RuntimeError, Sandbox};

/// Every capability the kernel knows, by OCI name.
pub const ALL_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// Docker's (and containerd's) default capability set.
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Normalises a Kubernetes capability name ("NET_ADMIN", "net_admin", "CAP_NET_ADMIN") to the
/// OCI form; "ALL" stays "ALL".
pub fn normalize_capability(name: &str) -> Result<String, RuntimeError> {
    let upper = name.trim().to_ascii_uppercase();
    if upper == "ALL" {
        return Ok(upper);
    }
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    if ALL_CAPABILITIES.contains(&full.as_str()) {
        Ok(full)
    } else {
        Err(RuntimeError::InvalidSpec(format!(
            "unknown capability {name:?}"
        )))
    }
}

fn capability_bit(cap: &str) -> u64 {
    // ALL_CAPABILITIES is in kernel numbering order.
    ALL_CAPABILITIES
        .iter()
        .position(|c| *c == cap)
        .map_or(0, |n| 1u64 << n)
}

/// Every capability in the mask `available` (bit n = capability n).
fn all_available(available: u64) -> Vec<String> {
    ALL_CAPABILITIES
        .iter()
        .filter(|c| capability_bit(c) & available != 0)
        .map(|c| c.to_string())
        .collect()
}

/// The effective capability set: the default set (or all, if privileged), minus `drop`, plus
/// `add`; "ALL" in either list means every capability. Drops are applied before adds, as in
/// Docker, so `drop: [ALL], add: [NET_BIND_SERVICE]` keeps exactly one. A container can only
/// get capabilities the agent has itself (`available`, its bounding set): "all" means all of
/// those, and naming one the agent lacks is an error.
pub fn capability_set(
    privileged: bool,
    add: &[String],
    drop: &[String],
    available: u64,
) -> Result<Vec<String>, RuntimeError> {
    let mut caps: Vec<String> = if privileged {
        all_available(available)
    } else {
        DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect()
    };
    for name in drop {
        let cap = normalize_capability(name)?;
        if cap == "ALL" {
            caps.clear();
        } else {
            caps.retain(|c| *c != cap);
        }
    }
    for name in add {
        let cap = normalize_capability(name)?;
        if cap == "ALL" {
            caps = all_available(available);
        } else if capability_bit(&cap) & available == 0 {
            return Err(RuntimeError::Refused(format!(
                "capability {cap} is not in the agent's own bounding set"
            )));
        } else if !caps.contains(&cap) {
            caps.push(cap);
        }
    }
    caps.retain(|c| capability_bit(c) & available != 0);
    Ok(caps)
}

/// Builds and validates the spec, then writes it to `<bundle>/config.json`.
pub fn write_bundle(
    bundle: &Path,
    sandbox: &Sandbox,
    spec: &ContainerSpec,
    cgroup_path: &str,
    available_caps: u64,
) -> Result<(), RuntimeError> {
    let value = build(sandbox, spec, cgroup_path, available_caps)?;
    let oci: Spec = serde_json::from_value(value)
        .map_err(|e| RuntimeError::InvalidSpec(format!("generated OCI spec is invalid: {e}")))?;
    std::fs::create_dir_all(bundle)
        .map_err(|e| RuntimeError::io("create bundle dir", bundle, e))?;
    oci.save(bundle.join("config.json"))
        .map_err(|e| RuntimeError::InvalidSpec(format!("writing config.json: {e}")))?;
    Ok(())
}

/// The OCI spec as JSON (kept as a function of its inputs so it can be unit-tested).
pub fn build(
    sandbox: &Sandbox,
    spec: &ContainerSpec,
    cgroup_path: &str,
    available_caps: u64,
) -> Result<Value, RuntimeError> {
    let caps = capability_set(
        spec.privileged,
        &spec.caps_add,
        &spec.caps_drop,
        available_caps,
    )?;

    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !spec.env.iter().any(|(k, _)| k == "PATH") {
        env.insert(0, DEFAULT_PATH.to_string());
    }
    if !spec.env.iter().any(|(k, _)| k == "HOSTNAME") {
        env.push(format!("HOSTNAME={}", sandbox.config.hostname));
    }
    if spec.tty && !spec.env.iter().any(|(k, _)| k == "TERM") {
        // As containerd and Docker for a container with a terminal.
        env.push("TERM=xterm".to_string());
    }
    let (uid, gid) = spec.user.unwrap_or((0, 0));
    let cwd = if spec.cwd.is_empty() {
        "/"
    } else {
        spec.cwd.as_str()
    };
    if !cwd.starts_with('/') {
        return Err(RuntimeError::InvalidSpec(format!(
            "workingDir {cwd:?} is not absolute"
        )));
    }
    if spec.args.is_empty() {
        return Err(RuntimeError::InvalidSpec("no command to run".into()));
    }

    let sys_options = if spec.privileged {
        json!(["nosuid", "noexec", "nodev"])
    } else {
        json!(["nosuid", "noexec", "nodev", "ro"])
    };
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": sys_options}),
    ];
    for m in &spec.mounts {
        if !m.destination.is_absolute() {
            return Err(RuntimeError::InvalidSpec(format!(
                "mount destination {:?} is not absolute",
                m.destination
            )));
        }
        let mount = match m.kind {
            MountKind::Bind => {
                let mut options = vec!["rbind", "rprivate"];
                if m.readonly {
                    options.push("ro");
                }
                json!({"destination": m.destination, "type": "bind", "source": m.source,
                       "options": options})
            }
            MountKind::Tmpfs => {
                let mut options = vec!["nosuid", "nodev", "mode=1777"];
                if m.readonly {
                    options.push("ro");
                }
                json!({"destination": m.destination, "type": "tmpfs", "source": "tmpfs",
                       "options": options})
            }
        };
        mounts.push(mount);
    }

    let mut namespaces = vec![json!({"type": "mount"})];
    if let Some(pid) = spec.pid_ns.as_ref().filter(|_| !sandbox.config.host_pid) {
        namespaces.push(json!({"type": "pid", "path": pid}));
    } else if !sandbox.config.host_pid {
        namespaces.push(json!({"type": "pid"}));
    }
    namespaces.push(json!({"type": "ipc", "path": sandbox.ipc_ns_path()}));
    namespaces.push(json!({"type": "uts", "path": sandbox.uts_ns_path()}));
    if let Some(net) = sandbox.net_ns_path() {
        namespaces.push(json!({"type": "network", "path": net}));
    }

    let mut resources = serde_json::Map::new();
    let devices = if spec.privileged {
        json!([{"allow": true, "access": "rwm"}])
    } else {
        json!([{"allow": false, "access": "rwm"}])
    };
    resources.insert("devices".into(), devices);
    let r = &spec.resources;
    let mut cpu = serde_json::Map::new();
    if let Some(shares) = r.cpu_shares {
        cpu.insert("shares".into(), json!(shares));
    }
    if let Some(quota) = r.cpu_quota {
        cpu.insert("quota".into(), json!(quota));
        cpu.insert("period".into(), json!(r.cpu_period.unwrap_or(100_000)));
    } else if let Some(period) = r.cpu_period {
        cpu.insert("period".into(), json!(period));
    }
    if !cpu.is_empty() {
        resources.insert("cpu".into(), Value::Object(cpu));
    }
    if let Some(limit) = r.memory_limit {
        // swap == limit: memory+swap may not exceed the limit, i.e. no swap (as the kubelet).
        resources.insert("memory".into(), json!({"limit": limit, "swap": limit}));
    }

    let (masked, readonly): (Vec<String>, Vec<String>) = if spec.privileged {
        (Vec::new(), Vec::new())
    } else {
        (get_default_maskedpaths(), get_default_readonly_paths())
    };

    Ok(json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": uid, "gid": gid},
            "args": spec.args,
            "env": env,
            "cwd": cwd,
            "capabilities": {
                "bounding": caps,
                "effective": caps,
                "permitted": caps,
            },
            "noNewPrivileges": false,
        },
        "root": {"path": spec.rootfs, "readonly": spec.readonly_rootfs},
        "mounts": mounts,
        "linux": {
            "cgroupsPath": cgroup_path,
            "namespaces": namespaces,
            "resources": Value::Object(resources),
            "maskedPaths": masked,
            "readonlyPaths": readonly,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{MountSpec, SandboxConfig};
    use std::path::PathBuf;

    fn sandbox(host_network: bool) -> Sandbox {
        Sandbox {
            pod_uid: "p1".into(),
            dir: PathBuf::from("/run/skiff/sandboxes/p1"),
            config: SandboxConfig {
                hostname: "web-0".into(),
                host_network,
                host_pid: false,
                share_pid: false,
            },
        }
    }

    #[test]
    fn spec_joins_pod_namespaces_and_sets_limits() {
        let mut spec = ContainerSpec::new("web", "/images/x/rootfs", &["httpd", "-f"], "/l");
        spec.resources.cpu_quota = Some(20_000);
        spec.resources.memory_limit = Some(1 << 20);
        spec.mounts.push(MountSpec {
            source: "/data".into(),
            destination: "/srv".into(),
            readonly: true,
            kind: MountKind::Bind,
        });
        let v = build(&sandbox(false), &spec, "/skiff/p1/web", u64::MAX).expect("spec");
        let oci: Spec = serde_json::from_value(v.clone()).expect("valid OCI spec");
        assert_eq!(v["linux"]["cgroupsPath"], "/skiff/p1/web");
        let ns = v["linux"]["namespaces"].as_array().expect("namespaces");
        let types: Vec<&str> = ns.iter().filter_map(|n| n["type"].as_str()).collect();
        assert_eq!(types, ["mount", "pid", "ipc", "uts", "network"]);
        assert_eq!(ns[4]["path"], "/run/skiff/sandboxes/p1/ns/net");
        assert_eq!(v["linux"]["resources"]["cpu"]["period"], 100_000);
        assert_eq!(v["linux"]["resources"]["memory"]["swap"], 1 << 20);
        assert!(v["process"]["env"]
            .as_array()
            .expect("env")
            .contains(&json!("HOSTNAME=web-0")));
        let srv = oci
            .mounts()
            .as_ref()
            .and_then(|m| {
                m.iter()
                    .find(|m| m.destination() == Path::new("/srv"))
                    .cloned()
            })
            .expect("bind mount");
        assert!(srv
            .options()
            .as_ref()
            .expect("options")
            .contains(&"ro".to_string()));
        assert!(!v["linux"]["maskedPaths"]
            .as_array()
            .expect("masked")
            .is_empty());

        let v = build(&sandbox(true), &spec, "/skiff/p1/web", u64::MAX).expect("spec");
        let ns = v["linux"]["namespaces"].as_array().expect("namespaces");
        assert!(!ns.iter().any(|n| n["type"] == "network"), "host network");

        spec.args.clear();
        assert!(build(&sandbox(false), &spec, "/x", u64::MAX).is_err());
    }

    #[test]
    fn capabilities_follow_docker_rules() {
        let none: Vec<String> = Vec::new();
        let all = u64::MAX;
        let set = capability_set(false, &none, &["chown".into()], all).expect("caps");
        assert!(!set.contains(&"CAP_CHOWN".to_string()));
        assert!(set.contains(&"CAP_KILL".to_string()));
        let set = capability_set(false, &["NET_BIND_SERVICE".into()], &["ALL".into()], all)
            .expect("caps");
        assert_eq!(set, vec!["CAP_NET_BIND_SERVICE".to_string()]);
        let set = capability_set(false, &["NET_ADMIN".into()], &none, all).expect("caps");
        assert!(set.contains(&"CAP_NET_ADMIN".to_string()));
        assert!(capability_set(false, &["NOT_A_CAP".into()], &none, all).is_err());
        assert_eq!(
            capability_set(true, &none, &none, all).expect("caps").len(),
            ALL_CAPABILITIES.len()
        );
        // Without CAP_SYS_RESOURCE (24) in the agent's bounding set.
        let limited = all & !(1 << 24);
        let set = capability_set(true, &none, &none, limited).expect("caps");
        assert_eq!(set.len(), ALL_CAPABILITIES.len() - 1);
        assert!(!set.contains(&"CAP_SYS_RESOURCE".to_string()));
        assert!(capability_set(false, &["SYS_RESOURCE".into()], &none, limited).is_err());
        assert_eq!(capability_bit("CAP_CHECKPOINT_RESTORE"), 1 << 40);
    }
}
