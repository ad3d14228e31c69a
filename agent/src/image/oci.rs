//! The JSON documents of OCI and Docker images (manifests, indexes, configs), as read from
//! registries and archives. These are edge types: JSON only, never stored with postcard.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// What a registry is asked for: both index kinds and both manifest kinds.
pub const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// Largest manifest, index or config accepted.
pub const MAX_DOCUMENT: usize = 8 * 1024 * 1024;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform of this node: `linux/<GOARCH>` (arm64 with variant v8).
    pub fn host() -> Platform {
        let (arch, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Platform {
            architecture: arch.into(),
            os: "linux".into(),
            variant: variant.map(String::from),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// An image manifest (OCI or Docker schema 2).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    #[serde(default)]
    pub media_type: Option<String>,
    pub config: Descriptor,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

/// An image index or Docker manifest list.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

/// The parts of an image config that are used.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ConfigFile {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: Option<ContainerConfig>,
    #[serde(default)]
    pub rootfs: Option<RootFs>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerConfig {
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub stop_signal: Option<String>,
}

/// Whether a media type (or a document's shape) is an index / manifest list.
pub fn is_index(media_type: &str, body: &serde_json::Value) -> bool {
    match media_type {
        OCI_INDEX | DOCKER_LIST => true,
        OCI_MANIFEST | DOCKER_MANIFEST => false,
        _ => body.get("manifests").is_some() && body.get("config").is_none(),
    }
}

/// Picks the descriptor for `want` from an index: exact os/arch, preferring a matching variant
/// (arm64 entries without a variant count as v8).
pub fn select_platform<'a>(index: &'a Index, want: &Platform) -> Option<&'a Descriptor> {
    let candidates: Vec<&Descriptor> = index
        .manifests
        .iter()
        .filter(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == want.os && p.architecture == want.architecture)
        })
        .collect();
    let variant_of = |d: &Descriptor| -> Option<String> {
        let p = d.platform.as_ref()?;
        p.variant
            .clone()
            .or_else(|| (p.architecture == "arm64").then(|| "v8".to_string()))
    };
    let want_variant = want
        .variant
        .clone()
        .or_else(|| (want.architecture == "arm64").then(|| "v8".to_string()));
    candidates
        .iter()
        .find(|d| variant_of(d) == want_variant)
        .or_else(|| candidates.first())
        .copied()
}

/// The platforms an index offers, for error messages.
pub fn platforms(index: &Index) -> String {
    let v: Vec<String> = index
        .manifests
        .iter()
        .filter_map(|d| d.platform.as_ref().map(|p| p.to_string()))
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_are_selected() {
        let idx: Index = serde_json::from_str(
            r#"{"manifests":[
              {"digest":"sha256:a","platform":{"architecture":"amd64","os":"linux"}},
              {"digest":"sha256:b","platform":{"architecture":"arm","os":"linux","variant":"v7"}},
              {"digest":"sha256:c","platform":{"architecture":"arm64","os":"linux","variant":"v8"}},
              {"digest":"sha256:d","platform":{"architecture":"arm64","os":"linux","variant":"v9"}}
            ]}"#,
        )
        .unwrap();
        let p = |a: &str, v: Option<&str>| Platform {
            architecture: a.into(),
            os: "linux".into(),
            variant: v.map(String::from),
        };
        assert_eq!(
            select_platform(&idx, &p("amd64", None)).unwrap().digest,
            "sha256:a"
        );
        assert_eq!(
            select_platform(&idx, &p("arm64", Some("v8")))
                .unwrap()
                .digest,
            "sha256:c"
        );
        assert_eq!(
            select_platform(&idx, &p("arm64", None)).unwrap().digest,
            "sha256:c"
        );
        assert!(select_platform(&idx, &p("s390x", None)).is_none());
        assert!(platforms(&idx).contains("linux/arm/v7"));
    }
}
