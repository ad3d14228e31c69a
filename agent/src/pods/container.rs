//! Turning a Kubernetes container (plus its image config) into a runtime [`ContainerSpec`]:
//! command line, environment, user, capabilities, resources. Pure functions; the worker
//! fetches the ConfigMaps and Secrets the environment refers to beforehand.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use api::core::{ConfigMap, Container, Pod, Secret};
use api::meta::Quantity;

use crate::image::ImageConfig;
use crate::runtime::Resources;

/// The command line Kubernetes runs: `command` replaces the image's Entrypoint (and drops
/// its Cmd), `args` replaces Cmd. `$(VAR)` references are expanded with `env`.
pub fn resolve_args(
    container: &Container,
    image: &ImageConfig,
    env: &[(String, String)],
) -> Vec<String> {
    let (entry, cmd): (Vec<String>, Vec<String>) =
        match (container.command.is_empty(), container.args.is_empty()) {
            (true, true) => (image.entrypoint.clone(), image.cmd.clone()),
            (true, false) => (image.entrypoint.clone(), container.args.clone()),
            (false, _) => (container.command.clone(), container.args.clone()),
        };
    let from_spec = !container.command.is_empty() || !container.args.is_empty();
    entry
        .into_iter()
        .chain(cmd)
        .map(|a| if from_spec { expand(&a, env) } else { a })
        .collect()
}

/// Kubernetes variable expansion: `$(NAME)` becomes the value of NAME if defined (else it is
/// left as is), `$$` becomes `$`.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match env.iter().rev().find(|(k, _)| k == name) {
                        Some((_, v)) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The ConfigMaps and Secrets (names) the container's environment refers to.
pub fn env_references(container: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for e in &container.env {
        if let Some(from) = &e.value_from {
            if let Some(r) = &from.config_map_key_ref {
                cms.insert(r.name.clone().unwrap_or_default());
            }
            if let Some(r) = &from.secret_key_ref {
                secrets.insert(r.name.clone().unwrap_or_default());
            }
        }
    }
    for f in &container.env_from {
        if let Some(r) = &f.config_map_ref {
            cms.insert(r.name.clone().unwrap_or_default());
        }
        if let Some(r) = &f.secret_ref {
            secrets.insert(r.name.clone().unwrap_or_default());
        }
    }
    (cms, secrets)
}

/// What the environment may refer to.
#[derive(Debug, Default)]
pub struct EnvSources<'a> {
    pub config_maps: BTreeMap<String, ConfigMap>,
    pub secrets: BTreeMap<String, Secret>,
    pub node_name: &'a str,
    pub host_ip: &'a str,
    pub pod_ip: &'a str,
    /// The Services' variables ([`service_env`]), below `envFrom` and `env`.
    pub services: Vec<(String, String)>,
}

/// A Service name as a variable prefix: upper case, `-` as `_`.
fn env_name(s: &str) -> String {
    s.replace('-', "_").to_ascii_uppercase()
}

/// The variables the kubelet gives every container for `services` (the Services of the
/// pod's namespace when `enableServiceLinks`, and `kubernetes` in `default`):
/// `NAME_SERVICE_HOST`, `NAME_SERVICE_PORT`, `NAME_SERVICE_PORT_PORTNAME`, and the Docker
/// link variables `NAME_PORT`, `NAME_PORT_443_TCP`, `..._PROTO`, `..._PORT`, `..._ADDR`.
/// Services without a ClusterIP (headless, ExternalName) give none.
pub fn service_env(services: &[api::core::Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in services {
        let ip = s.spec.cluster_ip.as_deref().unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let prefix = env_name(&s.metadata.name);
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        if let Some(first) = s.spec.ports.first() {
            out.push((format!("{prefix}_SERVICE_PORT"), first.port.to_string()));
        }
        for p in &s.spec.ports {
            if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{prefix}_SERVICE_PORT_{}", env_name(name)),
                    p.port.to_string(),
                ));
            }
        }
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        for (i, p) in s.spec.ports.iter().enumerate() {
            let proto = p.protocol.as_deref().unwrap_or("TCP");
            let url = format!("{}://{host}:{}", proto.to_ascii_lowercase(), p.port);
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_ascii_uppercase());
            out.push((format!("{pp}_PROTO"), proto.to_ascii_lowercase()));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), ip.to_string()));
            out.push((pp, url));
        }
    }
    out
}

fn set(env: &mut Vec<(String, String)>, name: &str, value: String) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name.to_string(), value)),
    }
}

fn secret_value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| s.string_data.get(key).cloned())
}

/// The container's environment: the image's, then `envFrom`, then `env` (later wins).
/// Errors name the missing ConfigMap/Secret/key (Kubernetes' CreateContainerConfigError).
pub fn build_env(
    pod: &Pod,
    container: &Container,
    image: &ImageConfig,
    src: &EnvSources<'_>,
) -> Result<Vec<(String, String)>, String> {
    let mut env: Vec<(String, String)> = Vec::new();
    for kv in &image.env {
        if let Some((k, v)) = kv.split_once('=') {
            set(&mut env, k, v.to_string());
        }
    }
    for (k, v) in &src.services {
        set(&mut env, k, v.clone());
    }
    for f in &container.env_from {
        let prefix = f.prefix.clone().unwrap_or_default();
        if let Some(r) = &f.config_map_ref {
            let name = r.name.clone().unwrap_or_default();
            match src.config_maps.get(&name) {
                Some(cm) => {
                    for (k, v) in &cm.data {
                        set(&mut env, &format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{name}\" not found")),
            }
        }
        if let Some(r) = &f.secret_ref {
            let name = r.name.clone().unwrap_or_default();
            match src.secrets.get(&name) {
                Some(s) => {
                    let keys: BTreeSet<&String> =
                        s.data.keys().chain(s.string_data.keys()).collect();
                    for k in keys {
                        if let Some(v) = secret_value(s, k) {
                            set(&mut env, &format!("{prefix}{k}"), v);
                        }
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{name}\" not found")),
            }
        }
    }
    for e in &container.env {
        let value = if let Some(from) = &e.value_from {
            if let Some(r) = &from.config_map_key_ref {
                let name = r.name.clone().unwrap_or_default();
                match src
                    .config_maps
                    .get(&name)
                    .and_then(|cm| cm.data.get(&r.key))
                {
                    Some(v) => v.clone(),
                    None if r.optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {}/{name}",
                            r.key,
                            pod.metadata.namespace()
                        ))
                    }
                }
            } else if let Some(r) = &from.secret_key_ref {
                let name = r.name.clone().unwrap_or_default();
                match src.secrets.get(&name).and_then(|s| secret_value(s, &r.key)) {
                    Some(v) => v,
                    None if r.optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in Secret {}/{name}",
                            r.key,
                            pod.metadata.namespace()
                        ))
                    }
                }
            } else if let Some(f) = &from.field_ref {
                field_value(pod, &f.field_path, src)
                    .ok_or_else(|| format!("unsupported fieldRef {:?}", f.field_path))?
            } else if let Some(r) = &from.resource_field_ref {
                resource_value(container, &r.resource)
                    .ok_or_else(|| format!("unsupported resourceFieldRef {:?}", r.resource))?
            } else {
                String::new()
            }
        } else {
            expand(e.value.as_deref().unwrap_or(""), &env)
        };
        set(&mut env, &e.name, value);
    }
    Ok(env)
}

fn field_value(pod: &Pod, path: &str, src: &EnvSources<'_>) -> Option<String> {
    let m = &pod.metadata;
    Some(match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace().to_string(),
        "metadata.uid" => m.uid.clone(),
        "spec.nodeName" => src.node_name.to_string(),
        "spec.serviceAccountName" => pod.spec.service_account_name.clone().unwrap_or_default(),
        "status.hostIP" => src.host_ip.to_string(),
        "status.podIP" => src.pod_ip.to_string(),
        _ => {
            if let Some(key) = path
                .strip_prefix("metadata.labels['")
                .and_then(|r| r.strip_suffix("']"))
            {
                m.labels.get(key).cloned().unwrap_or_default()
            } else if let Some(key) = path
                .strip_prefix("metadata.annotations['")
                .and_then(|r| r.strip_suffix("']"))
            {
                m.annotations.get(key).cloned().unwrap_or_default()
            } else {
                return None;
            }
        }
    })
}

pub(crate) fn resource_value(container: &Container, resource: &str) -> Option<String> {
    let res = container.resources.as_ref();
    let (map, name) = match resource.split_once('.') {
        Some(("limits", n)) => (res.map(|r| &r.limits), n),
        Some(("requests", n)) => (res.map(|r| &r.requests), n),
        _ => return None,
    };
    let q = map.and_then(|m| m.get(name))?;
    if name == "cpu" {
        // Whole cores, rounded up (Go's math.Ceil of the float): m + 999 overflowed.
        q.milli_value()
            .ok()
            .map(|m| (m / 1000 + i64::from(m % 1000 > 0)).to_string())
    } else {
        q.value().ok().map(|v| v.to_string())
    }
}

/// The kubelet's bounds of cgroup cpu shares.
const MIN_SHARES: i128 = 2;
const MAX_SHARES: i128 = 262_144;

/// Cgroup settings from requests and limits: shares from `requests.cpu` (or `limits.cpu`),
/// quota from `limits.cpu`, memory limit from `limits.memory`.
pub fn resources(container: &Container) -> Result<Resources, String> {
    let mut out = Resources::default();
    let Some(r) = &container.resources else {
        return Ok(out);
    };
    let milli = |q: &Quantity| {
        q.milli_value()
            .map_err(|e| format!("bad cpu quantity {q}: {e}"))
    };
    let cpu_request = r.requests.get("cpu").or_else(|| r.limits.get("cpu"));
    // The kubelet's MilliCPUToShares (2 to 262144) and MilliCPUToQuota (at least 1 ms of
    // the 100 ms period): a request or limit is any quantity, and m * 1024 overflowed.
    if let Some(q) = cpu_request {
        let m = i128::from(milli(q)?);
        out.cpu_shares = Some((m * 1024 / 1000).clamp(MIN_SHARES, MAX_SHARES) as u64);
    }
    if let Some(q) = r.limits.get("cpu") {
        let m = milli(q)?;
        out.cpu_period = Some(100_000);
        out.cpu_quota = Some(m.saturating_mul(100).max(1000));
    }
    if let Some(q) = r.limits.get("memory") {
        out.memory_limit = Some(
            q.value()
                .map_err(|e| format!("bad memory quantity {q}: {e}"))?,
        );
    }
    Ok(out)
}

/// (uid, gid) the container runs as: securityContext (container, then pod), then the
/// image's `User` (numeric, or a name looked up in the rootfs' /etc/passwd and /etc/group).
pub fn run_as(
    pod: &Pod,
    container: &Container,
    image: &ImageConfig,
    rootfs: &Path,
) -> Result<Option<(u32, u32)>, String> {
    let sc = container.security_context.as_ref();
    let psc = pod.spec.security_context.as_ref();
    let uid = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    let gid = sc
        .and_then(|s| s.run_as_group)
        .or_else(|| psc.and_then(|s| s.run_as_group));
    let (img_uid, img_gid) = image_user(&image.user, rootfs)?;
    // Ids are int64 in the API: one past 2^32 - 1 was cut to 32 bits (4294967296 is root).
    // The server refuses them (past 2^31 - 1); a pod from elsewhere is refused here.
    let id = |v: i64, what: &str| {
        u32::try_from(v).map_err(|_| format!("{what} {v} is not a valid id (0 to 4294967295)"))
    };
    let uid = uid.map(|u| id(u, "runAsUser")).transpose()?.or(img_uid);
    let gid = gid.map(|g| id(g, "runAsGroup")).transpose()?.or(img_gid);
    if sc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root))
        == Some(true)
        && uid.unwrap_or(0) == 0
    {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    Ok(match (uid, gid) {
        (None, None) => None,
        (u, g) => Some((u.unwrap_or(0), g.unwrap_or(0))),
    })
}

fn lookup(file: &Path, name: &str, field: usize) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let parts: Vec<&str> = l.split(':').collect();
        (parts.first() == Some(&name))
            .then(|| parts.get(field).and_then(|v| v.parse().ok()))
            .flatten()
    })
}

fn image_user(user: &str, rootfs: &Path) -> Result<(Option<u32>, Option<u32>), String> {
    if user.is_empty() {
        return Ok((None, None));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = rootfs.join("etc/passwd");
    let uid = match u.parse::<u32>() {
        Ok(n) => n,
        Err(_) => lookup(&passwd, u, 2).ok_or_else(|| format!("unknown image user {u:?}"))?,
    };
    let gid = match g {
        Some(g) => match g.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => Some(
                lookup(&rootfs.join("etc/group"), g, 2)
                    .ok_or_else(|| format!("unknown image group {g:?}"))?,
            ),
        },
        None => lookup(&passwd, u, 3).or(Some(0)),
    };
    Ok((Some(uid), gid))
}

/// Whether the pod needs privileges the agent may refuse: a privileged container or hostPID.
pub fn needs_privilege(pod: &Pod) -> Option<String> {
    if pod.spec.host_pid == Some(true) {
        return Some("hostPID".into());
    }
    pod.spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .find(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        })
        .map(|c| format!("privileged container {:?}", c.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{EnvVar, EnvVarSource, KeySelector, ObjectFieldSelector, ResourceRequirements};

    fn image() -> ImageConfig {
        ImageConfig {
            entrypoint: vec!["/entry".into()],
            cmd: vec!["serve".into()],
            env: vec!["PATH=/bin".into(), "MODE=img".into()],
            ..Default::default()
        }
    }

    #[test]
    fn args_follow_kubernetes_rules() {
        let img = image();
        let mut c = Container::default();
        assert_eq!(resolve_args(&c, &img, &[]), vec!["/entry", "serve"]);
        c.args = vec!["--x=$(A)".into()];
        let env = vec![("A".to_string(), "1".to_string())];
        assert_eq!(resolve_args(&c, &img, &env), vec!["/entry", "--x=1"]);
        c.command = vec!["sh".into(), "-c".into()];
        c.args = vec!["echo $$HOME $(B)".into()];
        assert_eq!(
            resolve_args(&c, &img, &env),
            vec!["sh", "-c", "echo $HOME $(B)"]
        );
    }

    #[test]
    fn env_from_everywhere() {
        let mut pod = Pod::default();
        pod.metadata.name = "p".into();
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = "u".into();
        let mut cm = ConfigMap::default();
        cm.data.insert("k".into(), "from-cm".into());
        let mut secret = Secret::default();
        secret
            .data
            .insert("s".into(), api::core::ByteString(b"hidden".to_vec()));
        let src = EnvSources {
            config_maps: [("cm".to_string(), cm)].into(),
            secrets: [("sec".to_string(), secret)].into(),
            node_name: "n1",
            host_ip: "10.0.0.1",
            pod_ip: "10.0.0.1",
            services: Vec::new(),
        };
        let var = |name: &str, from: EnvVarSource| EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(from),
        };
        let c = Container {
            env: vec![
                EnvVar {
                    name: "MODE".into(),
                    value: Some("spec-$(PATH)".into()),
                    value_from: None,
                },
                var(
                    "CM",
                    EnvVarSource {
                        config_map_key_ref: Some(KeySelector {
                            name: Some("cm".into()),
                            key: "k".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                var(
                    "SEC",
                    EnvVarSource {
                        secret_key_ref: Some(KeySelector {
                            name: Some("sec".into()),
                            key: "s".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                var(
                    "NAME",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            api_version: None,
                            field_path: "metadata.name".into(),
                        }),
                        ..Default::default()
                    },
                ),
                var(
                    "NODE",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            api_version: None,
                            field_path: "spec.nodeName".into(),
                        }),
                        ..Default::default()
                    },
                ),
            ],
            ..Default::default()
        };
        let env = build_env(&pod, &c, &image(), &src).expect("env");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MODE"), Some("spec-/bin"));
        assert_eq!(get("CM"), Some("from-cm"));
        assert_eq!(get("SEC"), Some("hidden"));
        assert_eq!(get("NAME"), Some("p"));
        assert_eq!(get("NODE"), Some("n1"));

        let mut missing = c.clone();
        missing.env[1]
            .value_from
            .as_mut()
            .and_then(|f| f.config_map_key_ref.as_mut())
            .expect("ref")
            .key = "nope".into();
        assert!(build_env(&pod, &missing, &image(), &src)
            .unwrap_err()
            .contains("nope"));
    }

    #[test]
    fn resources_to_cgroups() {
        let mut c = Container::default();
        let mut r = ResourceRequirements::default();
        r.requests.insert("cpu".into(), Quantity("250m".into()));
        r.limits.insert("cpu".into(), Quantity("1500m".into()));
        r.limits.insert("memory".into(), Quantity("64Mi".into()));
        c.resources = Some(r);
        let res = resources(&c).expect("resources");
        assert_eq!(res.cpu_shares, Some(256));
        assert_eq!(res.cpu_quota, Some(150_000));
        assert_eq!(res.cpu_period, Some(100_000));
        assert_eq!(res.memory_limit, Some(64 << 20));
    }

    /// Requests and limits are any quantity: shares and quota overflowed i64, and whole
    /// cores for the downward API overflowed rounding up.
    #[test]
    fn the_largest_cpu_quantities() {
        let with = |request: &str, limit: &str| {
            let mut r = ResourceRequirements::default();
            r.requests.insert("cpu".into(), Quantity(request.into()));
            r.limits.insert("cpu".into(), Quantity(limit.into()));
            Container {
                resources: Some(r),
                ..Default::default()
            }
        };
        let huge = with("9223372036854775807m", "9223372036854775807m");
        let res = resources(&huge).expect("resources");
        assert_eq!(res.cpu_shares, Some(262_144));
        assert_eq!(res.cpu_quota, Some(i64::MAX));
        assert_eq!(
            resource_value(&huge, "limits.cpu").as_deref(),
            Some("9223372036854776")
        );
        let tiny = with("1m", "-9223372036854775807m");
        let res = resources(&tiny).expect("resources");
        assert_eq!(res.cpu_shares, Some(2));
        assert_eq!(res.cpu_quota, Some(1000));
        assert_eq!(resource_value(&tiny, "requests.cpu").as_deref(), Some("1"));
        assert_eq!(
            resource_value(&tiny, "limits.cpu").as_deref(),
            Some("-9223372036854775")
        );
        assert_eq!(
            resource_value(&with("1500m", "2"), "requests.cpu").as_deref(),
            Some("2")
        );
        assert_eq!(
            resource_value(&with("2", "2"), "requests.cpu").as_deref(),
            Some("2")
        );
    }

    /// A runAsUser past 32 bits was cut to them: 4294967296 ran as root.
    #[test]
    fn ids_past_32_bits_are_refused_not_truncated() {
        let dir = tempfile::tempdir().expect("dir");
        let mut pod = Pod::default();
        let mut c = Container::default();
        for (user, group, want) in [
            (Some(4_294_967_296), None, None),
            (Some(i64::MAX), None, None),
            (None, Some(-1), None),
            (Some(i64::MIN), Some(0), None),
            (Some(4_294_967_295), Some(7), Some((u32::MAX, 7))),
            (Some(1000), None, Some((1000, 0))),
        ] {
            c.security_context = Some(api::core::SecurityContext {
                run_as_user: user,
                run_as_group: group,
                ..Default::default()
            });
            let got = run_as(&pod, &c, &ImageConfig::default(), dir.path());
            match want {
                Some(w) => assert_eq!(got, Ok(Some(w)), "{user:?} {group:?}"),
                None => assert!(got.is_err(), "{user:?} {group:?}: {got:?}"),
            }
        }
        c.security_context = None;
        pod.spec.security_context = Some(api::core::PodSecurityContext {
            run_as_user: Some(4_294_967_296),
            ..Default::default()
        });
        assert!(run_as(&pod, &c, &ImageConfig::default(), dir.path()).is_err());
    }

    #[test]
    fn users_from_numbers_and_passwd() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("etc")).expect("etc");
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nwww:x:33:34::/var/www:/bin/sh\n",
        )
        .expect("passwd");
        assert_eq!(image_user("", dir.path()).unwrap(), (None, None));
        assert_eq!(
            image_user("1000:5", dir.path()).unwrap(),
            (Some(1000), Some(5))
        );
        assert_eq!(image_user("www", dir.path()).unwrap(), (Some(33), Some(34)));
        assert!(image_user("ghost", dir.path()).is_err());
    }

    #[test]
    fn service_variables_are_the_kubelets() {
        let mut svc = api::core::Service::default();
        svc.metadata.name = "kubernetes".into();
        svc.spec.cluster_ip = Some("10.43.0.1".into());
        svc.spec.ports = vec![api::core::ServicePort {
            name: Some("https".into()),
            protocol: Some("TCP".into()),
            port: 443,
            ..Default::default()
        }];
        let mut headless = api::core::Service::default();
        headless.metadata.name = "my-db".into();
        headless.spec.cluster_ip = Some("None".into());
        let env: BTreeMap<String, String> = service_env(&[svc, headless]).into_iter().collect();
        let want: BTreeMap<String, String> = [
            ("KUBERNETES_SERVICE_HOST", "10.43.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.43.0.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, want);
    }
}
