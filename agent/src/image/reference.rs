//! Image references, normalised as Docker does:
//! `busybox` -> `docker.io/library/busybox:latest`, `host:port/repo:tag`, `repo@sha256:...`.

use std::fmt;

/// The registry that unqualified names belong to.
pub const DEFAULT_REGISTRY: &str = "docker.io";
/// Where the Docker Hub registry API really is.
pub const DOCKER_HUB_API_HOST: &str = "registry-1.docker.io";

/// A parsed, normalised image reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    /// Registry host with optional port: `docker.io`, `127.0.0.1:5000`.
    pub registry: String,
    /// Repository path: `library/busybox`.
    pub repository: String,
    /// The tag; `latest` when neither tag nor digest was given.
    pub tag: Option<String>,
    /// `sha256:<hex>` when pinned by digest.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses and normalises a reference. Errors are sentences for the user.
    pub fn parse(s: &str) -> Result<Reference, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("the image name is empty".into());
        }
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => {
                check_digest(d)?;
                (n, Some(d.to_string()))
            }
            None => (s, None),
        };
        let (name, tag) = match name.rfind(':') {
            Some(i) if !name[i + 1..].contains('/') => {
                let t = &name[i + 1..];
                if t.is_empty()
                    || t.len() > 128
                    || !t
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                    || t.starts_with(['.', '-'])
                {
                    return Err(format!("invalid tag {t:?}"));
                }
                (&name[..i], Some(t.to_string()))
            }
            _ => (name, None),
        };
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DEFAULT_REGISTRY.to_string(), name.to_string()),
        };
        let registry = if registry == "index.docker.io" || registry == "registry-1.docker.io" {
            DEFAULT_REGISTRY.to_string()
        } else {
            registry
        };
        let repository = if registry == DEFAULT_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if repository.is_empty()
            || repository.split('/').any(|c| {
                c.is_empty()
                    || !c.chars().all(|ch| {
                        ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch)
                    })
                    || !c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
            })
        {
            return Err(format!(
                "invalid repository name {repository:?}: use lowercase letters, digits and . _ - separated by /"
            ));
        }
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository` without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The tag or the digest, as used in `/v2/<name>/manifests/<reference>`.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The host (and port) to talk to for this registry.
    pub fn api_host(&self) -> &str {
        if self.registry == DEFAULT_REGISTRY {
            DOCKER_HUB_API_HOST
        } else {
            &self.registry
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Checks `sha256:<64 lowercase hex>`.
pub fn check_digest(d: &str) -> Result<(), String> {
    match d.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "invalid digest {d:?}: expected sha256:<64 hex digits>"
        )),
    }
}

/// Normalises a reference for lookups; an invalid one is returned unchanged.
pub fn normalize(s: &str) -> String {
    Reference::parse(s).map_or_else(|_| s.to_string(), |r| r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> String {
        Reference::parse(s).unwrap().to_string()
    }

    #[test]
    fn references_normalise_like_docker() {
        assert_eq!(n("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(n("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(n("user/app"), "docker.io/user/app:latest");
        assert_eq!(n("index.docker.io/library/x"), "docker.io/library/x:latest");
        assert_eq!(n("127.0.0.1:5000/a/b:v1"), "127.0.0.1:5000/a/b:v1");
        assert_eq!(n("localhost/app"), "localhost/app:latest");
        assert_eq!(n("ghcr.io/o/r"), "ghcr.io/o/r:latest");
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            n(&format!("busybox@{d}")),
            format!("docker.io/library/busybox@{d}")
        );
        let r = Reference::parse(&format!("h:5000/x:t@{d}")).unwrap();
        assert_eq!(r.manifest_ref(), d);
        assert_eq!(r.tag.as_deref(), Some("t"));
        assert_eq!(r.api_host(), "h:5000");
        assert_eq!(
            Reference::parse("busybox").unwrap().api_host(),
            DOCKER_HUB_API_HOST
        );
    }

    #[test]
    fn bad_references_are_refused() {
        assert!(Reference::parse("").is_err());
        assert!(Reference::parse("BusyBox").is_err());
        assert!(Reference::parse("busybox@sha256:xyz").is_err());
        assert!(Reference::parse("busybox:").is_err());
        assert!(Reference::parse("a//b").is_err());
    }
}
