//! `imagePullSecrets`: registry credentials from `kubernetes.io/dockerconfigjson` (and the
//! older `kubernetes.io/dockercfg`) Secrets, matched to an image's registry as the kubelet
//! does. The first secret with an entry for the registry wins; without one, the pull uses
//! the node's registry configuration or goes anonymously.

use api::core::Secret;
use base64::Engine as _;
use serde::Deserialize;

use crate::image::reference::Reference;
use crate::image::RegistryAuth;

#[derive(Debug, Default, Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, AuthEntry>,
}

#[derive(Debug, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// base64 of `username:password`.
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// The registry part of a `.dockerconfigjson` key: keys may be bare hosts, URLs, or
/// `host/path` prefixes (`https://index.docker.io/v1/` for Docker Hub).
fn key_host(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = k.split('/').next().unwrap_or(k);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    }
}

fn entry_auth(e: &AuthEntry) -> Option<RegistryAuth> {
    if let Some(t) = e.registrytoken.as_ref().or(e.identitytoken.as_ref()) {
        if !t.is_empty() {
            return Some(RegistryAuth::Bearer(t.clone()));
        }
    }
    if let (Some(u), Some(p)) = (&e.username, &e.password) {
        return Some(RegistryAuth::Basic {
            username: u.clone(),
            password: p.clone(),
        });
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(e.auth.as_deref()?.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (u, p) = text.split_once(':')?;
    Some(RegistryAuth::Basic {
        username: u.to_string(),
        password: p.to_string(),
    })
}

/// The entries of one pull secret, by registry host.
fn entries(secret: &Secret) -> Vec<(String, AuthEntry)> {
    let parsed: Option<DockerConfig> = match secret.type_.as_deref() {
        Some("kubernetes.io/dockerconfigjson") => secret
            .data
            .get(".dockerconfigjson")
            .and_then(|b| serde_json::from_slice(&b.0).ok()),
        Some("kubernetes.io/dockercfg") => secret
            .data
            .get(".dockercfg")
            .and_then(|b| serde_json::from_slice(&b.0).ok())
            .map(|auths| DockerConfig { auths }),
        _ => None,
    };
    parsed
        .map(|c| c.auths.into_iter().collect())
        .unwrap_or_default()
}

/// The credentials for `image` from `secrets` (in the pod's order), if any applies.
pub fn auth_for(image: &str, secrets: &[Secret]) -> Option<RegistryAuth> {
    let reference = Reference::parse(image).ok()?;
    secrets.iter().find_map(|s| {
        entries(s)
            .iter()
            .filter(|(k, _)| key_host(k) == reference.registry)
            .find_map(|(_, e)| entry_auth(e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::ByteString;

    fn secret(type_: &str, key: &str, json: &str) -> Secret {
        let mut s = Secret {
            type_: Some(type_.into()),
            ..Default::default()
        };
        s.data
            .insert(key.into(), ByteString(json.as_bytes().to_vec()));
        s
    }

    #[test]
    fn matches_the_registry_and_decodes_each_form() {
        let auth = base64::engine::general_purpose::STANDARD.encode("ann:pw1");
        let one = secret(
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            &format!(
                r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{auth}"}},"https://index.docker.io/v1/":{{"username":"bob","password":"pw2"}}}}}}"#
            ),
        );
        let two = secret(
            "kubernetes.io/dockercfg",
            ".dockercfg",
            r#"{"registry.local":{"identitytoken":"tok"}}"#,
        );
        let both = [one, two];
        assert_eq!(
            auth_for("127.0.0.1:5000/app:1", &both),
            Some(RegistryAuth::Basic {
                username: "ann".into(),
                password: "pw1".into()
            })
        );
        assert_eq!(
            auth_for("busybox", &both),
            Some(RegistryAuth::Basic {
                username: "bob".into(),
                password: "pw2".into()
            })
        );
        assert_eq!(
            auth_for("registry.local/x/y@sha256:".to_string().as_str(), &both),
            None,
            "an invalid reference gets nothing"
        );
        assert_eq!(
            auth_for("registry.local/x/y:2", &both),
            Some(RegistryAuth::Bearer("tok".into()))
        );
        assert_eq!(auth_for("other.example/x:1", &both), None);
        // Opaque secrets are not pull secrets.
        let opaque = secret("Opaque", ".dockerconfigjson", r#"{"auths":{}}"#);
        assert_eq!(auth_for("busybox", &[opaque]), None);
    }
}
