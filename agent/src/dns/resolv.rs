//! A pod's `/etc/resolv.conf` and `/etc/hosts`, as the kubelet writes them: the content
//! follows the pod's `dnsPolicy` and `dnsConfig`, and the files are bind-mounted read-only.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use api::core::{PodDnsConfig, PodSpec};

use crate::runtime::{MountKind, MountSpec};

/// The kubelet's limits (glibc reads at most three nameservers).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;

/// What a resolv.conf says (the lines the resolver reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    /// `name` or `name:value`.
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Reads `nameserver`, `search`, `domain` and `options` lines; the last `search` or
    /// `domain` line wins, as in glibc.
    pub fn parse(text: &str) -> ResolvConf {
        let mut rc = ResolvConf::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => rc.nameservers.extend(words.next().map(str::to_string)),
                Some("search") | Some("domain") => {
                    rc.searches = words
                        .map(|w| w.trim_end_matches('.').to_string())
                        .filter(|w| !w.is_empty())
                        .collect();
                }
                Some("options") => rc.options.extend(words.map(str::to_string)),
                _ => {}
            }
        }
        rc
    }

    /// Reads a file; a missing or unreadable file reads as empty (the kubelet does the same).
    pub fn read(path: &Path) -> ResolvConf {
        std::fs::read_to_string(path)
            .map(|t| ResolvConf::parse(&t))
            .unwrap_or_default()
    }

    /// The nameservers as socket addresses on port 53 (scoped IPv6 addresses are skipped).
    pub fn nameserver_addrs(&self) -> Vec<SocketAddr> {
        self.nameservers
            .iter()
            .filter_map(|n| n.parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, 53))
            .collect()
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for n in &self.nameservers {
            out.push_str(&format!("nameserver {n}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// What the node gives every pod's DNS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDns {
    /// The cluster DNS server's address; None: ClusterFirst pods get the node's resolver
    /// (as the kubelet does without `--cluster-dns`).
    pub cluster_dns: Option<IpAddr>,
    /// `cluster.local`.
    pub cluster_domain: String,
    /// The node's resolv.conf (for `Default` and the search domains of `ClusterFirst`).
    pub host_resolv_conf: PathBuf,
    /// The node's hosts file (for hostNetwork pods).
    pub host_hosts: PathBuf,
}

impl Default for PodDns {
    fn default() -> PodDns {
        PodDns {
            cluster_dns: None,
            cluster_domain: super::DEFAULT_CLUSTER_DOMAIN.into(),
            host_resolv_conf: PathBuf::from("/etc/resolv.conf"),
            host_hosts: PathBuf::from("/etc/hosts"),
        }
    }
}

fn push_unique(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for i in items {
        if !list.contains(&i) {
            list.push(i);
        }
    }
}

/// Options of `dnsConfig` replace those of the same name (Kubernetes' mergeDNSOptions).
fn merge_options(existing: &[String], extra: &[api::core::PodDnsConfigOption]) -> Vec<String> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    let mut set = |name: &str, value: Option<String>| match out.iter_mut().find(|(n, _)| n == name)
    {
        Some(slot) => slot.1 = value,
        None => out.push((name.to_string(), value)),
    };
    for o in existing {
        match o.split_once(':') {
            Some((n, v)) => set(n, Some(v.to_string())),
            None => set(o, None),
        }
    }
    for o in extra.iter().filter(|o| !o.name.is_empty()) {
        set(&o.name, o.value.clone());
    }
    out.into_iter()
        .map(|(n, v)| match v {
            Some(v) => format!("{n}:{v}"),
            None => n,
        })
        .collect()
}

/// The effective policy: `ClusterFirst` on the host network behaves as `Default` (unless
/// `ClusterFirstWithHostNet`), and as `Default` when the node has no cluster DNS.
pub fn effective_policy<'a>(spec: &'a PodSpec, dns: &PodDns) -> &'a str {
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let host_network = spec.host_network == Some(true);
    match policy {
        "ClusterFirstWithHostNet" | "ClusterFirst" if dns.cluster_dns.is_none() => "Default",
        "ClusterFirstWithHostNet" => "ClusterFirst",
        "ClusterFirst" if host_network => "Default",
        other => other,
    }
}

/// The pod's resolv.conf, given the node's (`host`).
pub fn pod_resolv_conf(
    spec: &PodSpec,
    namespace: &str,
    dns: &PodDns,
    host: &ResolvConf,
) -> ResolvConf {
    let domain = dns.cluster_domain.trim_matches('.');
    let mut rc = match effective_policy(spec, dns) {
        "ClusterFirst" => {
            let mut searches = vec![
                format!("{namespace}.svc.{domain}"),
                format!("svc.{domain}"),
                domain.to_string(),
            ];
            push_unique(&mut searches, host.searches.iter().cloned());
            ResolvConf {
                nameservers: dns.cluster_dns.iter().map(IpAddr::to_string).collect(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        "None" => ResolvConf::default(),
        // Default, and any policy the API let through that we do not know.
        _ => host.clone(),
    };
    if let Some(PodDnsConfig {
        nameservers,
        searches,
        options,
    }) = &spec.dns_config
    {
        push_unique(&mut rc.nameservers, nameservers.iter().cloned());
        push_unique(&mut rc.searches, searches.iter().cloned());
        rc.options = merge_options(&rc.options, options);
    }
    rc.nameservers.truncate(MAX_NAMESERVERS);
    rc.searches.truncate(MAX_SEARCHES);
    while rc.searches.join(" ").len() > MAX_SEARCH_CHARS {
        rc.searches.pop();
    }
    rc
}

/// The pod's hosts file: localhost, the pod's own name and address, its `hostAliases`.
/// hostNetwork pods get the node's hosts file and their aliases.
pub fn pod_hosts(
    spec: &PodSpec,
    pod_name: &str,
    namespace: &str,
    pod_ip: &str,
    dns: &PodDns,
    host_hosts: &str,
) -> String {
    let mut out = String::from("# Kubernetes-managed hosts file.\n");
    if spec.host_network == Some(true) {
        out = String::from("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(host_hosts);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        out.push_str(
            "127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n",
        );
        let hostname: String = spec
            .hostname
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_name.to_string())
            .chars()
            .take(63)
            .collect();
        if !pod_ip.is_empty() {
            match spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => out.push_str(&format!(
                    "{pod_ip}\t{hostname}.{sub}.{namespace}.svc.{}\t{hostname}\n",
                    dns.cluster_domain.trim_matches('.')
                )),
                None => out.push_str(&format!("{pod_ip}\t{hostname}\n")),
            }
        }
    }
    if !spec.host_aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for alias in &spec.host_aliases {
            out.push_str(&format!("{}\t{}\n", alias.ip, alias.hostnames.join("\t")));
        }
    }
    out
}

/// Writes `<pod_dir>/resolv.conf` and `<pod_dir>/etc.hosts` and answers their read-only mounts
/// at /etc/resolv.conf and /etc/hosts, leaving out those `taken` (a volume the user mounts
/// there wins, as in Kubernetes). Blocking: call from `smol::unblock`.
pub fn write_pod_files(
    dir: &Path,
    spec: &PodSpec,
    pod_name: &str,
    namespace: &str,
    pod_ip: &str,
    dns: &PodDns,
    taken: &[PathBuf],
) -> std::io::Result<Vec<MountSpec>> {
    std::fs::create_dir_all(dir)?;
    let host = ResolvConf::read(&dns.host_resolv_conf);
    let host_hosts = std::fs::read_to_string(&dns.host_hosts).unwrap_or_default();
    let files = [
        (
            "resolv.conf",
            "/etc/resolv.conf",
            pod_resolv_conf(spec, namespace, dns, &host).render(),
        ),
        (
            // Not `hosts`: container directories beside it are named after containers.
            "etc.hosts",
            "/etc/hosts",
            pod_hosts(spec, pod_name, namespace, pod_ip, dns, &host_hosts),
        ),
    ];
    let mut mounts = Vec::new();
    for (file, destination, content) in files {
        let destination = PathBuf::from(destination);
        if taken.contains(&destination) {
            continue;
        }
        let path = dir.join(file);
        // Written beside and renamed, so that a running container never reads half a file.
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, content)?;
        std::fs::rename(&tmp, &path)?;
        mounts.push(MountSpec {
            source: path,
            destination,
            readonly: true,
            kind: MountKind::Bind,
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{HostAlias, PodDnsConfigOption};

    const HOST: &str = "# generated\nnameserver 192.168.1.1\nnameserver 192.168.1.2 # two\n\
                        search lan example.org\noptions edns0 timeout:2\n";

    fn dns() -> PodDns {
        PodDns {
            cluster_dns: Some("10.42.0.1".parse().unwrap()),
            ..Default::default()
        }
    }

    fn spec(policy: Option<&str>, host_network: bool) -> PodSpec {
        PodSpec {
            dns_policy: policy.map(str::to_string),
            host_network: host_network.then_some(true),
            ..Default::default()
        }
    }

    #[test]
    fn parses_the_node_resolv_conf() {
        let rc = ResolvConf::parse(HOST);
        assert_eq!(rc.nameservers, vec!["192.168.1.1", "192.168.1.2"]);
        assert_eq!(rc.searches, vec!["lan", "example.org"]);
        assert_eq!(rc.options, vec!["edns0", "timeout:2"]);
        assert_eq!(
            rc.nameserver_addrs(),
            vec![
                "192.168.1.1:53".parse().unwrap(),
                "192.168.1.2:53".parse().unwrap()
            ]
        );
        assert_eq!(ResolvConf::parse("domain corp.\n").searches, vec!["corp"]);
    }

    #[test]
    fn cluster_first_points_at_the_cluster_dns() {
        let host = ResolvConf::parse(HOST);
        let rc = pod_resolv_conf(&spec(Some("ClusterFirst"), false), "shop", &dns(), &host);
        assert_eq!(
            rc.render(),
            "search shop.svc.cluster.local svc.cluster.local cluster.local lan example.org\n\
             nameserver 10.42.0.1\n\
             options ndots:5\n"
        );
        // The default policy is ClusterFirst.
        assert_eq!(
            pod_resolv_conf(&spec(None, false), "shop", &dns(), &host),
            rc
        );
    }

    #[test]
    fn default_copies_the_node() {
        let host = ResolvConf::parse(HOST);
        let rc = pod_resolv_conf(&spec(Some("Default"), false), "shop", &dns(), &host);
        assert_eq!(rc, host);
        // Without a cluster DNS, ClusterFirst is Default (the kubelet's fallback).
        let none = PodDns::default();
        let rc = pod_resolv_conf(&spec(Some("ClusterFirst"), false), "shop", &none, &host);
        assert_eq!(rc, host);
    }

    #[test]
    fn host_network_pods_use_the_node_unless_asked() {
        let host = ResolvConf::parse(HOST);
        let rc = pod_resolv_conf(&spec(Some("ClusterFirst"), true), "shop", &dns(), &host);
        assert_eq!(rc, host);
        let rc = pod_resolv_conf(
            &spec(Some("ClusterFirstWithHostNet"), true),
            "shop",
            &dns(),
            &host,
        );
        assert_eq!(rc.nameservers, vec!["10.42.0.1"]);
        assert_eq!(rc.searches[0], "shop.svc.cluster.local");
    }

    #[test]
    fn none_takes_only_dns_config_and_dns_config_merges() {
        let host = ResolvConf::parse(HOST);
        let mut s = spec(Some("None"), false);
        s.dns_config = Some(PodDnsConfig {
            nameservers: vec!["1.1.1.1".into()],
            searches: vec!["corp.example".into()],
            options: vec![PodDnsConfigOption {
                name: "ndots".into(),
                value: Some("2".into()),
            }],
        });
        let rc = pod_resolv_conf(&s, "shop", &dns(), &host);
        assert_eq!(
            rc.render(),
            "search corp.example\nnameserver 1.1.1.1\noptions ndots:2\n"
        );

        // On ClusterFirst: nameservers appended, searches appended without duplicates,
        // options replace those of the same name.
        s.dns_policy = Some("ClusterFirst".into());
        let cfg = s.dns_config.as_mut().unwrap();
        cfg.searches.push("svc.cluster.local".into());
        cfg.options.push(PodDnsConfigOption {
            name: "edns0".into(),
            value: None,
        });
        let rc = pod_resolv_conf(&s, "shop", &dns(), &host);
        assert_eq!(rc.nameservers, vec!["10.42.0.1", "1.1.1.1"]);
        assert_eq!(
            rc.searches,
            vec![
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "lan",
                "example.org",
                "corp.example"
            ]
        );
        assert_eq!(rc.options, vec!["ndots:2", "edns0"]);
    }

    #[test]
    fn limits_nameservers_and_searches() {
        let mut s = spec(Some("None"), false);
        s.dns_config = Some(PodDnsConfig {
            nameservers: (1..=5).map(|i| format!("10.0.0.{i}")).collect(),
            searches: (0..40).map(|i| format!("d{i}.example")).collect(),
            options: vec![],
        });
        let rc = pod_resolv_conf(&s, "shop", &dns(), &ResolvConf::default());
        assert_eq!(rc.nameservers.len(), 3);
        assert_eq!(rc.searches.len(), 32);
    }

    #[test]
    fn hosts_file_names_the_pod() {
        let mut s = spec(None, false);
        s.hostname = Some("db-0".into());
        s.subdomain = Some("db".into());
        s.host_aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: vec!["foo.local".into(), "bar.local".into()],
        }];
        let text = pod_hosts(&s, "db-0-pod", "shop", "10.42.0.9", &dns(), "");
        assert!(text.contains("127.0.0.1\tlocalhost\n"), "{text}");
        assert!(
            text.contains("10.42.0.9\tdb-0.db.shop.svc.cluster.local\tdb-0\n"),
            "{text}"
        );
        assert!(text.contains("10.1.2.3\tfoo.local\tbar.local\n"), "{text}");
        let plain = pod_hosts(&spec(None, false), "web", "shop", "10.42.0.4", &dns(), "");
        assert!(plain.contains("10.42.0.4\tweb\n"), "{plain}");
        let host = pod_hosts(
            &spec(None, true),
            "web",
            "shop",
            "",
            &dns(),
            "127.0.0.1 node1\n",
        );
        assert!(host.contains("127.0.0.1 node1\n"), "{host}");
        assert!(!host.contains("ip6-allnodes"), "{host}");
    }

    #[test]
    fn writes_files_and_mounts_them_read_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("host-resolv"), HOST).unwrap();
        let dns = PodDns {
            host_resolv_conf: dir.path().join("host-resolv"),
            host_hosts: dir.path().join("absent"),
            ..dns()
        };
        let pod_dir = dir.path().join("pod");
        let mounts = write_pod_files(
            &pod_dir,
            &spec(None, false),
            "web",
            "shop",
            "10.42.0.4",
            &dns,
            &[],
        )
        .unwrap();
        assert_eq!(mounts.len(), 2);
        assert!(mounts
            .iter()
            .all(|m| m.readonly && m.kind == MountKind::Bind));
        assert_eq!(mounts[0].destination, Path::new("/etc/resolv.conf"));
        let text = std::fs::read_to_string(&mounts[0].source).unwrap();
        assert!(text.contains("nameserver 10.42.0.1\n"), "{text}");
        // A volume at /etc/hosts wins.
        let mounts = write_pod_files(
            &pod_dir,
            &spec(None, false),
            "web",
            "shop",
            "10.42.0.4",
            &dns,
            &[PathBuf::from("/etc/hosts")],
        )
        .unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].destination, Path::new("/etc/resolv.conf"));
    }
}
