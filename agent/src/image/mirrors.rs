//! Registry mirrors and rewrites, read from a file in k3s's `registries.yaml` format:
//!
//! ```yaml
//! mirrors:
//!   docker.io:                       # or "*" for every registry
//!     endpoint:
//!       - "https://mirror.site.lan:5000"
//!     rewrite:
//!       "^library/(.*)": "hub/$1"
//! configs:
//!   "mirror.site.lan:5000":
//!     auth: {username: u, password: p}   # or auth: base64(u:p), or identity_token
//!     tls: {ca_file: /etc/ssl/site-ca.pem}
//! ```
//!
//! A pull of an image of a mirrored registry asks each endpoint in turn (the repository
//! rewritten by the first matching rule), then the registry itself, as k3s does. An
//! `http://` endpoint is spoken to in plain HTTP. What skiff's pulls cannot honour (client
//! certificates, skipping TLS verification) is refused when the file is read, so that a site
//! never believes it configured something that is ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use super::error::ImageError;
use super::registry::{RegistryConfig, RegistryHost};
use super::Reference;

/// Where the agent reads its registries.yaml unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/skiff/registries.yaml";

/// One mirrored registry: its endpoints, in order, and its repository rewrites.
#[derive(Clone, Debug, Default)]
pub struct Mirror {
    /// Registry hosts (`host:port`), as configured under `configs`.
    pub endpoints: Vec<String>,
    /// (pattern, replacement), applied in the file's key order; the first match wins.
    pub rewrites: Vec<(regex::Regex, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    mirrors: BTreeMap<String, MirrorEntry>,
    #[serde(default)]
    configs: BTreeMap<String, ConfigEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MirrorEntry {
    #[serde(default)]
    endpoint: Vec<String>,
    #[serde(default)]
    rewrite: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigEntry {
    #[serde(default)]
    auth: Option<AuthEntry>,
    #[serde(default)]
    tls: Option<TlsEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthEntry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    identity_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsEntry {
    #[serde(default)]
    ca_file: Option<PathBuf>,
    #[serde(default)]
    cert_file: Option<PathBuf>,
    #[serde(default)]
    key_file: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_verify: Option<bool>,
}

/// `https://host:port` (or `host:port`) as (host, plain HTTP?).
fn endpoint_host(file: &str, registry: &str, endpoint: &str) -> Result<(String, bool), ImageError> {
    let bad = |why: &str| {
        ImageError::Config(format!(
            "{file}: mirrors.{registry:?}.endpoint {endpoint:?}: {why}"
        ))
    };
    let (plain, rest) = if let Some(r) = endpoint.strip_prefix("http://") {
        (true, r)
    } else if let Some(r) = endpoint.strip_prefix("https://") {
        (false, r)
    } else if endpoint.contains("://") {
        return Err(bad("only http:// and https:// endpoints are served"));
    } else {
        (false, endpoint)
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !matches!(path.trim_end_matches('/'), "" | "v2") {
        return Err(bad("an endpoint with a path is not served"));
    }
    Ok((host.to_string(), plain))
}

impl RegistryConfig {
    /// Reads a k3s `registries.yaml` into a configuration (hosts' TLS and credentials,
    /// mirrors and rewrites). A missing file is an empty configuration.
    pub fn load_yaml(path: &Path) -> Result<RegistryConfig, ImageError> {
        match std::fs::read_to_string(path) {
            Ok(text) => RegistryConfig::from_yaml(&path.display().to_string(), &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RegistryConfig::default()),
            Err(e) => Err(ImageError::Config(format!("{}: {e}", path.display()))),
        }
    }

    /// Parses a k3s `registries.yaml` document; `name` names it in errors.
    pub fn from_yaml(name: &str, text: &str) -> Result<RegistryConfig, ImageError> {
        let file: File = if text.trim().is_empty() {
            File {
                mirrors: BTreeMap::new(),
                configs: BTreeMap::new(),
            }
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| ImageError::Config(format!("{name}: {e}")))?
        };
        let mut cfg = RegistryConfig::default();
        for (host, c) in file.configs {
            let mut h = RegistryHost::default();
            if let Some(tls) = c.tls {
                let refused = [
                    (tls.cert_file.is_some(), "cert_file"),
                    (tls.key_file.is_some(), "key_file"),
                    (
                        tls.insecure_skip_verify == Some(true),
                        "insecure_skip_verify",
                    ),
                ];
                if let Some((_, key)) = refused.iter().find(|(set, _)| *set) {
                    return Err(ImageError::Config(format!(
                        "{name}: configs.{host:?}.tls.{key} is not supported (give the registry's CA in ca_file)"
                    )));
                }
                h.ca_file = tls.ca_file;
            }
            if let Some(a) = c.auth {
                match (a.username, a.password, a.auth, a.identity_token) {
                    (Some(u), Some(p), _, _) => {
                        h.username = Some(u);
                        h.password = Some(p);
                    }
                    (_, _, Some(encoded), _) => {
                        let raw = base64::engine::general_purpose::STANDARD
                            .decode(encoded.trim())
                            .ok()
                            .and_then(|b| String::from_utf8(b).ok());
                        let Some((u, p)) = raw.as_deref().and_then(|s| s.split_once(':')) else {
                            return Err(ImageError::Config(format!(
                                "{name}: configs.{host:?}.auth.auth is not base64 of user:password"
                            )));
                        };
                        h.username = Some(u.into());
                        h.password = Some(p.into());
                    }
                    (_, _, _, Some(token)) => h.identity_token = Some(token),
                    _ => {
                        return Err(ImageError::Config(format!(
                            "{name}: configs.{host:?}.auth needs username and password, auth or identity_token"
                        )))
                    }
                }
            }
            cfg.registries.insert(host, h);
        }
        for (registry, m) in file.mirrors {
            let mut mirror = Mirror::default();
            for e in &m.endpoint {
                let (host, plain) = endpoint_host(name, &registry, e)?;
                if plain {
                    cfg.registries
                        .entry(host.clone())
                        .or_default()
                        .insecure_http = true;
                }
                mirror.endpoints.push(host);
            }
            for (pattern, to) in m.rewrite {
                let re = regex::Regex::new(&pattern).map_err(|e| {
                    ImageError::Config(format!(
                        "{name}: mirrors.{registry:?}.rewrite {pattern:?}: {e}"
                    ))
                })?;
                mirror.rewrites.push((re, to));
            }
            cfg.mirrors.insert(registry, mirror);
        }
        Ok(cfg)
    }

    /// Adds a registries.yaml's hosts and mirrors (its hosts win over ours).
    pub fn merge_yaml(&mut self, yaml: RegistryConfig) {
        self.registries.extend(yaml.registries);
        self.mirrors = yaml.mirrors;
    }

    /// Where to ask for `r`, in order: each mirror endpoint of its registry (or of `*`),
    /// the repository rewritten, then the registry itself.
    pub fn candidates(&self, r: &Reference) -> Vec<Reference> {
        let mut out = Vec::new();
        if let Some(m) = self
            .mirrors
            .get(&r.registry)
            .or_else(|| self.mirrors.get("*"))
        {
            let repository = m
                .rewrites
                .iter()
                .find(|(re, _)| re.is_match(&r.repository))
                .map_or_else(
                    || r.repository.clone(),
                    |(re, to)| re.replace(&r.repository, to.as_str()).into_owned(),
                );
            for host in &m.endpoints {
                if *host == r.registry && repository == r.repository {
                    continue;
                }
                out.push(Reference {
                    registry: host.clone(),
                    repository: repository.clone(),
                    tag: r.tag.clone(),
                    digest: r.digest.clone(),
                });
            }
        }
        out.push(r.clone());
        out
    }
}

impl PartialEq for Mirror {
    fn eq(&self, other: &Mirror) -> bool {
        self.endpoints == other.endpoints
            && self.rewrites.len() == other.rewrites.len()
            && self
                .rewrites
                .iter()
                .zip(&other.rewrites)
                .all(|((a, x), (b, y))| a.as_str() == b.as_str() && x == y)
    }
}

impl Eq for Mirror {}

#[cfg(test)]
mod tests {
    use super::*;

    const K3S: &str = r#"
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.site.lan:5000"
      - "http://10.0.0.5:5000/v2"
    rewrite:
      "^library/(.*)": "hub/$1"
  "*":
    endpoint: ["https://all.site.lan"]
configs:
  "mirror.site.lan:5000":
    auth:
      auth: dXNlcjpwYXNz
    tls:
      ca_file: /etc/ssl/site-ca.pem
  "quay.io":
    auth:
      username: robot
      password: secret
"#;

    #[test]
    fn k3s_files_are_read() {
        let cfg = RegistryConfig::from_yaml("registries.yaml", K3S).expect("parses");
        let m = &cfg.registries["mirror.site.lan:5000"];
        assert_eq!(m.username.as_deref(), Some("user"));
        assert_eq!(m.password.as_deref(), Some("pass"));
        assert_eq!(
            m.ca_file.as_deref(),
            Some(Path::new("/etc/ssl/site-ca.pem"))
        );
        assert!(cfg.registries["10.0.0.5:5000"].insecure_http);
        assert_eq!(cfg.registries["quay.io"].username.as_deref(), Some("robot"));
        let r = Reference::parse("busybox:1.36").expect("ref");
        let c: Vec<String> = cfg.candidates(&r).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            c,
            [
                "mirror.site.lan:5000/hub/busybox:1.36",
                "10.0.0.5:5000/hub/busybox:1.36",
                "docker.io/library/busybox:1.36"
            ]
        );
        // Other registries go through the "*" mirror, without rewrites.
        let r = Reference::parse("ghcr.io/org/app@sha256:0123456789012345678901234567890123456789012345678901234567890123").expect("ref");
        let c: Vec<String> = cfg.candidates(&r).iter().map(|c| c.to_string()).collect();
        assert_eq!(c.len(), 2);
        assert!(c[0].starts_with("all.site.lan/org/app@sha256:"), "{c:?}");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused() {
        for (text, want) in [
            (
                "configs:\n  r:\n    tls:\n      insecure_skip_verify: true\n",
                "configs.\"r\".tls.insecure_skip_verify is not supported",
            ),
            (
                "mirrors:\n  r:\n    endpoint: [\"ftp://x\"]\n",
                "only http:// and https:// endpoints",
            ),
            (
                "mirrors:\n  r:\n    rewrite:\n      \"(\": x\n",
                "rewrite \"(\"",
            ),
            ("mirror:\n  r: {}\n", "unknown field `mirror`"),
        ] {
            let e = RegistryConfig::from_yaml("f", text).expect_err(text);
            assert!(e.to_string().contains(want), "{e}");
        }
    }
}
