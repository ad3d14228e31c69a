//! Pod Security admission: the `pod-security.kubernetes.io/{enforce,warn,audit}` namespace
//! labels and the checks of the Pod Security Standards (privileged, baseline, restricted),
//! with the reasons and details Kubernetes words, so kubectl users see the same refusals.
//!
//! The checks run on the pod's JSON rather than the typed spec: several fields they read
//! (seccompProfile, appArmorProfile, seLinuxOptions, ephemeral containers) are kept opaque in
//! the API types, and workload templates are found by path whatever their kind.
//!
//! Unlike Kubernetes (whose default is privileged), a namespace without an enforce label is
//! held to baseline, except the system namespaces.

use serde_json::Value;

/// Label prefix of the namespace's policy.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// Namespaces that run the cluster's own pods: privileged unless labelled otherwise.
const SYSTEM_NAMESPACES: &[&str] = &["kube-system"];

/// A level of the Pod Security Standards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// One mode's level and version (`latest` or `v1.N`), as in `"baseline:latest"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelVersion {
    pub level: Level,
    pub version: String,
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.name(), self.version)
    }
}

/// The policy of a namespace: what is enforced and what only warned about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub warn: LevelVersion,
    /// Violations of this level are named in the request's audit event.
    pub audit: LevelVersion,
}

impl Policy {
    /// The policy of namespace `ns` from its labels. A label with a value Kubernetes does not
    /// know fails closed (restricted), as kube-apiserver does.
    pub fn of(ns: &str, labels: &std::collections::BTreeMap<String, String>) -> Policy {
        let default = if SYSTEM_NAMESPACES.contains(&ns) {
            Level::Privileged
        } else {
            Level::Baseline
        };
        let mode = |m: &str, default: Level| {
            let level = match labels.get(&format!("{LABEL_PREFIX}{m}")) {
                None => default,
                Some(v) => Level::parse(v).unwrap_or(Level::Restricted),
            };
            let version = match labels.get(&format!("{LABEL_PREFIX}{m}-version")) {
                Some(v) if valid_version(v) => v.clone(),
                _ => "latest".to_string(),
            };
            LevelVersion { level, version }
        };
        Policy {
            enforce: mode("enforce", default),
            warn: mode("warn", Level::Privileged),
            audit: mode("audit", Level::Privileged),
        }
    }
}

fn valid_version(v: &str) -> bool {
    v == "latest"
        || v.strip_prefix("v1.")
            .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
}

/// One failed check: Kubernetes' reason and detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: &'static str,
    pub detail: String,
}

/// The violations as Kubernetes lists them: `reason (detail), reason (detail)`.
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.to_string()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The warnings Kubernetes gives when a namespace's enforced level changes to `enforce`:
/// one line naming the namespace, then one per distinct set of reasons, naming the first pod
/// that has it and how many others do. `pods` are (name, metadata, spec) in name order.
pub fn existing_pod_warnings(
    ns: &str,
    enforce: &LevelVersion,
    pods: &[(String, Value, Value)],
) -> Vec<String> {
    let mut groups: Vec<(String, String, usize)> = Vec::new();
    for (name, meta, spec) in pods {
        let found = check(enforce.level, meta, spec);
        if found.is_empty() {
            continue;
        }
        let reasons = found
            .iter()
            .map(|v| v.reason)
            .collect::<Vec<_>>()
            .join(", ");
        match groups.iter_mut().find(|g| g.1 == reasons) {
            Some(g) => g.2 += 1,
            None => groups.push((name.clone(), reasons, 0)),
        }
    }
    if groups.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "existing pods in namespace {ns:?} violate the new PodSecurity enforce level \"{enforce}\""
    )];
    for (first, reasons, others) in groups {
        out.push(match others {
            0 => format!("{first}: {reasons}"),
            n => format!(
                "{first} (and {n} other {}): {reasons}",
                pluralize("pod", "pods", n)
            ),
        });
    }
    out
}

/// Whether objects of `kind` carry a pod (or pod template) that the policy judges.
pub fn has_pod_template(kind: &str) -> bool {
    matches!(
        kind,
        "Pod"
            | "PodTemplate"
            | "ReplicationController"
            | "ReplicaSet"
            | "Deployment"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "CronJob"
    )
}

/// The pod template inside an object of `kind` (as JSON), with the pod itself for a Pod.
pub fn pod_template<'a>(kind: &str, obj: &'a Value) -> Option<(&'a Value, &'a Value)> {
    let template = match kind {
        "Pod" => obj,
        "CronJob" => obj.pointer("/spec/jobTemplate/spec/template")?,
        "PodTemplate" => obj.get("template")?,
        _ => obj.pointer("/spec/template")?,
    };
    let spec = template.get("spec")?;
    let meta = template.get("metadata").unwrap_or(&Value::Null);
    Some((meta, spec))
}

/// The checks of `level` on a pod's metadata and spec, in Kubernetes' order.
pub fn check(level: Level, meta: &Value, spec: &Value) -> Vec<Violation> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let p = Pod::new(meta, spec);
    // Kubernetes registers its checks file by file (alphabetically). At restricted, the
    // restricted checks replace the baseline ones they tighten and come after the rest.
    let out: Vec<Option<Violation>> = if level == Level::Baseline {
        vec![
            p.app_armor(),
            p.capabilities_baseline(),
            p.host_namespaces(),
            p.host_path_volumes(),
            p.host_ports(),
            p.privileged(),
            p.proc_mount(),
            p.se_linux(),
            p.seccomp_baseline(),
            p.sysctls(),
        ]
    } else {
        vec![
            p.app_armor(),
            p.host_namespaces(),
            p.host_ports(),
            p.privileged(),
            p.proc_mount(),
            p.se_linux(),
            p.sysctls(),
            p.allow_privilege_escalation(),
            p.capabilities_restricted(),
            p.restricted_volumes(),
            p.run_as_non_root(),
            p.run_as_user(),
            p.seccomp_restricted(),
        ]
    };
    out.into_iter().flatten().collect()
}

fn pluralize(one: &'static str, many: &'static str, n: usize) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `"a", "b"`, as Kubernetes quotes names in details.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("{:?}", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

fn sorted_unique(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

struct Pod<'a> {
    meta: &'a Value,
    spec: &'a Value,
}

impl<'a> Pod<'a> {
    fn new(meta: &'a Value, spec: &'a Value) -> Self {
        Pod { meta, spec }
    }

    /// Every container: init, app and ephemeral, in that order (Kubernetes' visit order).
    fn containers(&self) -> impl Iterator<Item = &'a Value> {
        let spec = self.spec;
        ["initContainers", "containers", "ephemeralContainers"]
            .into_iter()
            .flat_map(move |f| spec.get(f).and_then(Value::as_array).into_iter().flatten())
    }

    fn pod_sc(&self, field: &str) -> Option<&'a Value> {
        self.spec
            .get("securityContext")
            .and_then(|s| s.get(field))
            .filter(|v| !v.is_null())
    }

    fn flag(&self, field: &str) -> bool {
        self.spec.get(field).and_then(Value::as_bool) == Some(true)
    }

    /// Containers (names) for which `bad` holds on their securityContext field.
    fn bad_containers(&self, mut bad: impl FnMut(&Value) -> bool) -> Vec<String> {
        self.containers()
            .filter(|c| bad(c))
            .map(|c| name(c).to_string())
            .collect()
    }

    fn privileged(&self) -> Option<Violation> {
        let bad =
            self.bad_containers(|c| sc(c, "privileged").and_then(Value::as_bool) == Some(true));
        (!bad.is_empty()).then(|| Violation {
            reason: "privileged",
            detail: format!(
                "{} must not set securityContext.privileged=true",
                containers(&bad)
            ),
        })
    }

    fn host_namespaces(&self) -> Option<Violation> {
        let set: Vec<&str> = [
            ("hostNetwork", "hostNetwork=true"),
            ("hostPID", "hostPID=true"),
            ("hostIPC", "hostIPC=true"),
        ]
        .into_iter()
        .filter(|(f, _)| self.flag(f))
        .map(|(_, s)| s)
        .collect();
        (!set.is_empty()).then(|| Violation {
            reason: "host namespaces",
            detail: set.join(", "),
        })
    }

    fn host_ports(&self) -> Option<Violation> {
        let mut ports = Vec::new();
        let bad = self.bad_containers(|c| {
            let used: Vec<i64> = c
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
                .filter(|p| *p != 0)
                .collect();
            let any = !used.is_empty();
            ports.extend(used.into_iter().map(|p| p.to_string()));
            any
        });
        let ports = sorted_unique(ports);
        (!bad.is_empty()).then(|| Violation {
            reason: "hostPort",
            detail: format!(
                "{} {} {} {}",
                containers(&bad),
                pluralize("uses", "use", bad.len()),
                pluralize("hostPort", "hostPorts", ports.len()),
                ports.join(", ")
            ),
        })
    }

    fn volumes(&self) -> impl Iterator<Item = &'a Value> {
        self.spec
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    }

    fn host_path_volumes(&self) -> Option<Violation> {
        let bad: Vec<String> = self
            .volumes()
            .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
            .map(|v| name(v).to_string())
            .collect();
        (!bad.is_empty()).then(|| Violation {
            reason: "hostPath volumes",
            detail: format!(
                "{} {}",
                pluralize("volume", "volumes", bad.len()),
                join_quote(&bad)
            ),
        })
    }

    fn restricted_volumes(&self) -> Option<Violation> {
        const ALLOWED: &[&str] = &[
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        ];
        let bad = sorted_unique(
            self.volumes()
                .filter(|v| {
                    !v.as_object().is_some_and(|o| {
                        o.iter()
                            .any(|(k, val)| ALLOWED.contains(&k.as_str()) && !val.is_null())
                    })
                })
                .map(|v| name(v).to_string())
                .collect(),
        );
        // Go's %q of a string slice: ["a" "b"].
        (!bad.is_empty()).then(|| Violation {
            reason: "restricted volume types",
            detail: format!(
                "volumes [{}] have restricted types",
                bad.iter()
                    .map(|b| format!("{b:?}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        })
    }

    fn capabilities_baseline(&self) -> Option<Violation> {
        const ALLOWED: &[&str] = &[
            "AUDIT_WRITE",
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "MKNOD",
            "NET_BIND_SERVICE",
            "SETFCAP",
            "SETGID",
            "SETPCAP",
            "SETUID",
            "SYS_CHROOT",
        ];
        let mut caps = Vec::new();
        let bad = self.bad_containers(|c| {
            let extra: Vec<String> = added(c)
                .into_iter()
                .filter(|a| !ALLOWED.contains(&a.as_str()))
                .collect();
            let any = !extra.is_empty();
            caps.extend(extra);
            any
        });
        (!bad.is_empty()).then(|| Violation {
            reason: "non-default capabilities",
            detail: format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers(&bad),
                join_quote(&sorted_unique(caps))
            ),
        })
    }

    fn capabilities_restricted(&self) -> Option<Violation> {
        let missing_drop = self.bad_containers(|c| {
            !sc(c, "capabilities")
                .and_then(|k| k.get("drop"))
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("ALL")))
        });
        let mut caps = Vec::new();
        let adding = self.bad_containers(|c| {
            let extra: Vec<String> = added(c)
                .into_iter()
                .filter(|a| a != "NET_BIND_SERVICE")
                .collect();
            let any = !extra.is_empty();
            caps.extend(extra);
            any
        });
        let mut details = Vec::new();
        if !missing_drop.is_empty() {
            details.push(format!(
                "{} must set securityContext.capabilities.drop=[\"ALL\"]",
                containers(&missing_drop)
            ));
        }
        if !adding.is_empty() {
            details.push(format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers(&adding),
                join_quote(&sorted_unique(caps))
            ));
        }
        (!details.is_empty()).then(|| Violation {
            reason: "unrestricted capabilities",
            detail: details.join("; "),
        })
    }

    fn allow_privilege_escalation(&self) -> Option<Violation> {
        let bad = self.bad_containers(|c| {
            sc(c, "allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false)
        });
        (!bad.is_empty()).then(|| Violation {
            reason: "allowPrivilegeEscalation != false",
            detail: format!(
                "{} must set securityContext.allowPrivilegeEscalation=false",
                containers(&bad)
            ),
        })
    }

    fn run_as_non_root(&self) -> Option<Violation> {
        let mut setters = Vec::new();
        let pod_value = self.pod_sc("runAsNonRoot").and_then(Value::as_bool);
        if pod_value == Some(false) {
            setters.push("pod".to_string());
        }
        let explicit =
            self.bad_containers(|c| sc(c, "runAsNonRoot").and_then(Value::as_bool) == Some(false));
        let implicit =
            self.bad_containers(|c| sc(c, "runAsNonRoot").is_none() && pod_value != Some(true));
        if !explicit.is_empty() {
            setters.push(containers(&explicit));
        }
        if !setters.is_empty() {
            return Some(Violation {
                reason: "runAsNonRoot != true",
                detail: format!(
                    "{} must not set securityContext.runAsNonRoot=false",
                    setters.join(" and ")
                ),
            });
        }
        (!implicit.is_empty()).then(|| Violation {
            reason: "runAsNonRoot != true",
            detail: format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers(&implicit)
            ),
        })
    }

    fn run_as_user(&self) -> Option<Violation> {
        let mut setters = Vec::new();
        if self.pod_sc("runAsUser").and_then(Value::as_i64) == Some(0) {
            setters.push("pod".to_string());
        }
        let bad = self.bad_containers(|c| sc(c, "runAsUser").and_then(Value::as_i64) == Some(0));
        if !bad.is_empty() {
            setters.push(containers(&bad));
        }
        (!setters.is_empty()).then(|| Violation {
            reason: "runAsUser=0",
            detail: format!("{} must not set runAsUser=0", setters.join(" and ")),
        })
    }

    /// The seccomp check of both levels: `ok` says which types are allowed; the restricted
    /// level also requires a type to be set.
    fn seccomp(&self, ok: fn(&str) -> bool, required: bool) -> Option<Violation> {
        let kind = |v: &Value| {
            v.get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut setters = Vec::new();
        let mut values = Vec::new();
        let mut pod_set = false;
        if let Some(p) = self.pod_sc("seccompProfile") {
            if ok(&kind(p)) {
                pod_set = true;
            } else {
                setters.push("pod".to_string());
                values.push(kind(p));
            }
        }
        let mut implicit = Vec::new();
        let mut explicit = Vec::new();
        for c in self.containers() {
            match sc(c, "seccompProfile") {
                Some(p) if !ok(&kind(p)) => {
                    explicit.push(name(c).to_string());
                    values.push(kind(p));
                }
                Some(_) => {}
                None if !pod_set => implicit.push(name(c).to_string()),
                None => {}
            }
        }
        if !explicit.is_empty() {
            setters.push(containers(&explicit));
        }
        if !setters.is_empty() {
            return Some(Violation {
                reason: "seccompProfile",
                detail: format!(
                    "{} must not set securityContext.seccompProfile.type to {}",
                    setters.join(" and "),
                    join_quote(&sorted_unique(values))
                ),
            });
        }
        (required && !implicit.is_empty()).then(|| Violation {
            reason: "seccompProfile",
            detail: format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers(&implicit)
            ),
        })
    }

    fn seccomp_baseline(&self) -> Option<Violation> {
        self.seccomp(|t| t != "Unconfined", false)
    }

    fn seccomp_restricted(&self) -> Option<Violation> {
        self.seccomp(|t| t == "RuntimeDefault" || t == "Localhost", true)
    }

    fn app_armor(&self) -> Option<Violation> {
        let unconfined = |v: &Value| v.get("type").and_then(Value::as_str) == Some("Unconfined");
        let mut setters = Vec::new();
        if self.pod_sc("appArmorProfile").is_some_and(unconfined) {
            setters.push("pod".to_string());
        }
        let bad = self.bad_containers(|c| sc(c, "appArmorProfile").is_some_and(unconfined));
        if !bad.is_empty() {
            setters.push(containers(&bad));
        }
        if !setters.is_empty() {
            return Some(Violation {
                reason: "appArmorProfile",
                detail: format!(
                    "{} must not set appArmorProfile.type to \"Unconfined\"",
                    setters.join(" and ")
                ),
            });
        }
        // The annotations that came before the field.
        let annotations = self.meta.get("annotations").and_then(Value::as_object);
        let bad: Vec<String> = annotations
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("container.apparmor.security.beta.kubernetes.io/"))
            .filter_map(|(k, v)| {
                let v = v.as_str().unwrap_or_default();
                (!v.is_empty() && v != "runtime/default" && !v.starts_with("localhost/"))
                    .then(|| format!("{k}={v:?}"))
            })
            .collect();
        (!bad.is_empty()).then(|| Violation {
            reason: "forbidden AppArmor profile",
            detail: sorted_unique(bad).join(", "),
        })
    }

    fn se_linux(&self) -> Option<Violation> {
        const TYPES: &[&str] = &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ];
        let mut setters = Vec::new();
        let mut types = Vec::new();
        let mut user = false;
        let mut role = false;
        let mut judge = |o: &Value| {
            let field = |f: &str| o.get(f).and_then(Value::as_str).unwrap_or_default();
            let mut bad = false;
            if !TYPES.contains(&field("type")) {
                types.push(field("type").to_string());
                bad = true;
            }
            if !field("user").is_empty() {
                user = true;
                bad = true;
            }
            if !field("role").is_empty() {
                role = true;
                bad = true;
            }
            bad
        };
        if self.pod_sc("seLinuxOptions").is_some_and(&mut judge) {
            setters.push("pod".to_string());
        }
        let bad: Vec<String> = self
            .containers()
            .filter(|c| sc(c, "seLinuxOptions").is_some_and(&mut judge))
            .map(|c| name(c).to_string())
            .collect();
        if !bad.is_empty() {
            setters.push(containers(&bad));
        }
        if setters.is_empty() {
            return None;
        }
        let mut what = Vec::new();
        let types = sorted_unique(types);
        if !types.is_empty() {
            what.push(format!(
                "{} {}",
                pluralize("type", "types", types.len()),
                join_quote(&types)
            ));
        }
        if user {
            what.push("user may not be set".to_string());
        }
        if role {
            what.push("role may not be set".to_string());
        }
        Some(Violation {
            reason: "seLinuxOptions",
            detail: format!(
                "{} set forbidden securityContext.seLinuxOptions: {}",
                setters.join(" and "),
                what.join("; ")
            ),
        })
    }

    fn proc_mount(&self) -> Option<Violation> {
        let mut values = Vec::new();
        let bad = self.bad_containers(|c| match sc(c, "procMount").and_then(Value::as_str) {
            Some(v) if v != "Default" => {
                values.push(v.to_string());
                true
            }
            _ => false,
        });
        (!bad.is_empty()).then(|| Violation {
            reason: "procMount",
            detail: format!(
                "{} must not set securityContext.procMount to {}",
                containers(&bad),
                join_quote(&sorted_unique(values))
            ),
        })
    }

    fn sysctls(&self) -> Option<Violation> {
        const SAFE: &[&str] = &[
            "kernel.shm_rmid_forced",
            "net.ipv4.ip_local_port_range",
            "net.ipv4.ip_unprivileged_port_start",
            "net.ipv4.tcp_syncookies",
            "net.ipv4.ping_group_range",
            "net.ipv4.ip_local_reserved_ports",
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
            "net.ipv4.tcp_rmem",
            "net.ipv4.tcp_wmem",
        ];
        let bad: Vec<String> = self
            .pod_sc("sysctls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|s| name(s).to_string())
            .filter(|n| !SAFE.contains(&n.as_str()))
            .collect();
        (!bad.is_empty()).then(|| Violation {
            reason: "forbidden sysctls",
            detail: bad.join(", "),
        })
    }
}

fn name(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// A container's securityContext field, if set.
fn sc<'a>(c: &'a Value, field: &str) -> Option<&'a Value> {
    c.get("securityContext")
        .and_then(|s| s.get(field))
        .filter(|v| !v.is_null())
}

fn added(c: &Value) -> Vec<String> {
    sc(c, "capabilities")
        .and_then(|k| k.get("add"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(level: Level, spec: Value) -> String {
        describe(&check(level, &json!({}), &spec))
    }

    #[test]
    fn privileged_level_allows_everything() {
        let spec = json!({"hostNetwork": true, "containers": [
            {"name": "c", "securityContext": {"privileged": true}}]});
        assert_eq!(run(Level::Privileged, spec), "");
    }

    #[test]
    fn baseline_words_each_check_as_kubernetes() {
        let spec = json!({
        "hostNetwork": true, "hostPID": true,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}],
        "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                        {"name": "net.ipv4.tcp_syncookies", "value": "1"}],
                            "seccompProfile": {"type": "Unconfined"}},
        "containers": [
            {"name": "a", "securityContext": {"privileged": true,
                "capabilities": {"add": ["NET_ADMIN", "CHOWN", "SYS_ADMIN"]}},
             "ports": [{"containerPort": 80, "hostPort": 8080}]},
            {"name": "b", "securityContext": {"privileged": true, "procMount": "Unmasked"}}
        ]});
        assert_eq!(
            run(Level::Baseline, spec),
            "non-default capabilities (container \"a\" must not include \"NET_ADMIN\", \"SYS_ADMIN\" in securityContext.capabilities.add), \
             host namespaces (hostNetwork=true, hostPID=true), \
             hostPath volumes (volume \"h\"), \
             hostPort (container \"a\" uses hostPort 8080), \
             privileged (containers \"a\", \"b\" must not set securityContext.privileged=true), \
             procMount (container \"b\" must not set securityContext.procMount to \"Unmasked\"), \
             seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\"), \
             forbidden sysctls (kernel.msgmax)"
        );
    }

    #[test]
    fn baseline_allows_an_ordinary_pod() {
        let spec = json!({"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]},
                                "seLinuxOptions": {"type": "container_t"}}}],
            "volumes": [{"name": "s", "secret": {"secretName": "x"}}]});
        assert_eq!(run(Level::Baseline, spec), "");
    }

    #[test]
    fn restricted_refuses_a_root_pod() {
        let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        assert_eq!(
            run(Level::Restricted, spec),
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
    }

    #[test]
    fn restricted_allows_a_hardened_pod_and_names_explicit_setters() {
        let good = json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "c", "configMap": {"name": "x"}}],
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]});
        assert_eq!(run(Level::Restricted, good.clone()), "");
        let mut bad = good;
        bad["securityContext"]["runAsUser"] = json!(0);
        bad["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
        bad["volumes"] = json!([{"name": "n", "nfs": {}}]);
        assert_eq!(
            run(Level::Restricted, bad),
            "restricted volume types (volumes [\"n\"] have restricted types), \
             runAsNonRoot != true (container \"c\" must not set securityContext.runAsNonRoot=false), \
             runAsUser=0 (pod must not set runAsUser=0)"
        );
    }

    #[test]
    fn policy_defaults_and_labels() {
        let none = Default::default();
        let p = Policy::of("default", &none);
        assert_eq!(p.enforce.to_string(), "baseline:latest");
        assert_eq!(p.warn.level, Level::Privileged);
        assert_eq!(p.audit.level, Level::Privileged);
        assert_eq!(
            Policy::of("kube-system", &none).enforce.level,
            Level::Privileged
        );
        let labels = [
            ("pod-security.kubernetes.io/enforce", "restricted"),
            ("pod-security.kubernetes.io/enforce-version", "v1.30"),
            ("pod-security.kubernetes.io/warn", "nonsense"),
            ("pod-security.kubernetes.io/audit", "baseline"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let p = Policy::of("default", &labels);
        assert_eq!(p.enforce.to_string(), "restricted:v1.30");
        assert_eq!(p.warn.level, Level::Restricted, "fails closed");
        assert_eq!(p.audit.to_string(), "baseline:latest");
    }

    #[test]
    fn relabelling_names_the_existing_pods_that_break_the_new_level() {
        let pod = |n: &str, spec: Value| (n.to_string(), json!({}), spec);
        let hostnet = json!({"hostNetwork": true, "containers": [{"name": "c"}]});
        let pods = [
            pod("a", hostnet.clone()),
            pod("b", json!({"containers": [{"name": "c"}]})),
            pod("c", hostnet.clone()),
            pod("d", hostnet),
            pod(
                "e",
                json!({"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}),
            ),
        ];
        let level = LevelVersion {
            level: Level::Baseline,
            version: "latest".into(),
        };
        assert_eq!(
            existing_pod_warnings("ops", &level, &pods),
            [
                "existing pods in namespace \"ops\" violate the new PodSecurity enforce level \"baseline:latest\"",
                "a (and 2 other pods): host namespaces",
                "e: hostPath volumes",
            ]
        );
        assert!(existing_pod_warnings("ops", &level, &pods[1..2]).is_empty());
    }

    #[test]
    fn templates_are_found_by_kind() {
        let deploy = json!({"spec": {"template": {"metadata": {}, "spec": {"hostPID": true}}}});
        let cron =
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostIPC": true}}}}}});
        let (_, s) = pod_template("Deployment", &deploy).unwrap();
        assert_eq!(s["hostPID"], true);
        let (_, s) = pod_template("CronJob", &cron).unwrap();
        assert_eq!(s["hostIPC"], true);
        assert!(pod_template("ConfigMap", &json!({"data": {}})).is_none());
    }
}
