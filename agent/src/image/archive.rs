//! Imports of image archives for air-gapped sites: OCI image layout tars (`oci-layout`,
//! `index.json`, `blobs/sha256/..`, as `skopeo copy ... oci-archive:` or `docker buildx
//! --output type=oci` write) and `docker save` tars (`manifest.json` with `Config`,
//! `RepoTags`, `Layers`). The archive itself may be gzipped; layers may be gzipped or plain.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::{ImageError, IoContext};
use super::layer::{open_maybe_gzip, sha256_file, sniff};
use super::oci::{self, Platform};
use super::{parse_config, reference, remove_path, sha256_bytes, ImageInfo, ImageStore};

/// Removes the extraction directory when done.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = remove_path(&self.0);
    }
}

pub(crate) fn import(store: &ImageStore, file: &Path) -> Result<Vec<ImageInfo>, ImageError> {
    let bad = |detail: String| ImageError::BadArchive {
        file: file.display().to_string(),
        detail,
    };
    let dir = TempDir(store.temp_path("import"));
    fs::create_dir(&dir.0).ctx(|| format!("cannot create {}", dir.0.display()))?;
    let (reader, _) = open_maybe_gzip(file).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    archive
        .unpack(&dir.0)
        .map_err(|e| bad(format!("not a readable tar archive: {e}")))?;
    let root = &dir.0;
    let stem = file
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("image")
        .split('.')
        .next()
        .unwrap_or("image")
        .to_ascii_lowercase();
    if root.join("index.json").is_file() && root.join("oci-layout").is_file() {
        import_oci(store, root, &stem, &bad)
    } else if root.join("manifest.json").is_file() {
        import_docker(store, root, &bad)
    } else {
        Err(bad(
            "neither an OCI image layout (index.json, oci-layout) nor a `docker save` archive (manifest.json)".into(),
        ))
    }
}

/// Reads `blobs/sha256/<hex>` of an OCI layout, verifying its digest.
fn read_blob(
    root: &Path,
    digest: &str,
    bad: &dyn Fn(String) -> ImageError,
) -> Result<Vec<u8>, ImageError> {
    reference::check_digest(digest).map_err(bad)?;
    let path = blob_path(root, digest);
    let data = fs::read(&path).map_err(|e| bad(format!("blob {digest} is missing: {e}")))?;
    let actual = sha256_bytes(&data);
    if actual != digest {
        return Err(ImageError::DigestMismatch {
            what: format!("blob {digest} in the archive"),
            expected: digest.into(),
            actual,
        });
    }
    Ok(data)
}

fn blob_path(root: &Path, digest: &str) -> PathBuf {
    root.join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap_or(digest))
}

fn import_oci(
    store: &ImageStore,
    root: &Path,
    stem: &str,
    bad: &dyn Fn(String) -> ImageError,
) -> Result<Vec<ImageInfo>, ImageError> {
    let index: oci::Index = serde_json::from_slice(
        &fs::read(root.join("index.json")).map_err(|e| bad(format!("index.json: {e}")))?,
    )
    .map_err(|e| bad(format!("index.json: {e}")))?;
    let mut out = Vec::new();
    for desc in &index.manifests {
        let annotations = desc.annotations.clone().unwrap_or_default();
        let name = annotations
            .get("io.containerd.image.name")
            .cloned()
            .or_else(|| {
                annotations
                    .get("org.opencontainers.image.ref.name")
                    .map(|n| {
                        if n.contains('/') || n.contains(':') {
                            n.clone()
                        } else {
                            format!("{stem}:{n}")
                        }
                    })
            });
        let repo_digest = desc.digest.clone();
        let mut data = read_blob(root, &desc.digest, bad)?;
        let mut manifest_digest = desc.digest.clone();
        // Resolve nested indexes to this node's platform.
        for _ in 0..4 {
            let v: serde_json::Value = serde_json::from_slice(&data)
                .map_err(|e| bad(format!("manifest {manifest_digest}: {e}")))?;
            let mt = v
                .get("mediaType")
                .and_then(|m| m.as_str())
                .unwrap_or(&desc.media_type)
                .to_string();
            if !oci::is_index(&mt, &v) {
                break;
            }
            let idx: oci::Index = serde_json::from_value(v)
                .map_err(|e| bad(format!("index {manifest_digest}: {e}")))?;
            let want = Platform::host();
            let d = oci::select_platform(&idx, &want)
                .or_else(|| (idx.manifests.len() == 1).then(|| &idx.manifests[0]))
                .ok_or_else(|| ImageError::NoMatchingPlatform {
                    reference: name.clone().unwrap_or_else(|| repo_digest.clone()),
                    platform: want.to_string(),
                    available: oci::platforms(&idx),
                })?;
            manifest_digest = d.digest.clone();
            data = read_blob(root, &manifest_digest, bad)?;
        }
        let manifest: oci::Manifest = serde_json::from_slice(&data)
            .map_err(|e| bad(format!("manifest {manifest_digest}: {e}")))?;
        let layer_files: Vec<(PathBuf, String)> = manifest
            .layers
            .iter()
            .map(|l| (blob_path(root, &l.digest), l.digest.clone()))
            .collect();
        let config = read_blob(root, &manifest.config.digest, bad)?;
        out.push(finish(
            store,
            name.as_deref(),
            &repo_digest,
            &manifest_digest,
            &data,
            &manifest,
            &config,
            &layer_files,
            bad,
        )?);
    }
    if out.is_empty() {
        return Err(bad("index.json lists no image".into()));
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    #[serde(default)]
    layers: Vec<String>,
}

fn import_docker(
    store: &ImageStore,
    root: &Path,
    bad: &dyn Fn(String) -> ImageError,
) -> Result<Vec<ImageInfo>, ImageError> {
    let entries: Vec<DockerEntry> = serde_json::from_slice(
        &fs::read(root.join("manifest.json")).map_err(|e| bad(format!("manifest.json: {e}")))?,
    )
    .map_err(|e| bad(format!("manifest.json: {e}")))?;
    let mut out = Vec::new();
    let inside = |p: &str| -> Result<PathBuf, ImageError> {
        if p.split('/').any(|c| c == "..") || p.starts_with('/') {
            return Err(bad(format!("unsafe path {p:?} in manifest.json")));
        }
        Ok(root.join(p))
    };
    for e in &entries {
        let config = fs::read(inside(&e.config)?)
            .map_err(|err| bad(format!("config {}: {err}", e.config)))?;
        let config_digest = sha256_bytes(&config);
        let mut layers = Vec::new();
        let mut layer_files = Vec::new();
        for l in &e.layers {
            let path = inside(l)?;
            let (digest, size) =
                sha256_file(&path).map_err(|err| bad(format!("layer {l}: {err}")))?;
            let mut head = [0u8; 4];
            let n = {
                use std::io::Read;
                let mut f =
                    fs::File::open(&path).map_err(|err| bad(format!("layer {l}: {err}")))?;
                f.read(&mut head).unwrap_or(0)
            };
            let media_type = match sniff(&head[..n]) {
                super::layer::Compression::Gzip => oci::OCI_LAYER_GZIP,
                _ => oci::OCI_LAYER_TAR,
            };
            layers
                .push(serde_json::json!({"mediaType": media_type, "digest": digest, "size": size}));
            layer_files.push((path, digest));
        }
        // docker save has no manifest: write the equivalent OCI manifest.
        let manifest_json = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": oci::OCI_MANIFEST,
            "config": {"mediaType": oci::OCI_CONFIG, "digest": config_digest, "size": config.len()},
            "layers": layers,
        });
        let manifest_bytes = serde_json::to_vec(&manifest_json)
            .map_err(|err| bad(format!("cannot encode a manifest: {err}")))?;
        let manifest_digest = sha256_bytes(&manifest_bytes);
        let manifest: oci::Manifest = serde_json::from_value(manifest_json)
            .map_err(|err| bad(format!("cannot encode a manifest: {err}")))?;
        let tags = e.repo_tags.clone().unwrap_or_default();
        if tags.is_empty() {
            out.push(finish(
                store,
                None,
                &manifest_digest,
                &manifest_digest,
                &manifest_bytes,
                &manifest,
                &config,
                &layer_files,
                bad,
            )?);
        }
        for tag in &tags {
            out.push(finish(
                store,
                Some(tag),
                &manifest_digest,
                &manifest_digest,
                &manifest_bytes,
                &manifest,
                &config,
                &layer_files,
                bad,
            )?);
        }
    }
    if out.is_empty() {
        return Err(bad("manifest.json lists no image".into()));
    }
    Ok(out)
}

/// Unpacks the layers, stores manifest and config, records the image.
#[allow(clippy::too_many_arguments)]
fn finish(
    store: &ImageStore,
    name: Option<&str>,
    repo_digest: &str,
    manifest_digest: &str,
    manifest_bytes: &[u8],
    manifest: &oci::Manifest,
    config_bytes: &[u8],
    layer_files: &[(PathBuf, String)],
    bad: &dyn Fn(String) -> ImageError,
) -> Result<ImageInfo, ImageError> {
    let reference = match name {
        Some(n) => reference::Reference::parse(n)
            .map_err(|e| bad(format!("image name {n:?}: {e}")))?
            .to_string(),
        None => manifest_digest.to_string(),
    };
    let (config, diff_ids) = parse_config(&reference, config_bytes)?;
    if diff_ids.len() != layer_files.len() {
        return Err(bad(format!(
            "{reference}: the manifest has {} layers but the config {} diff ids",
            layer_files.len(),
            diff_ids.len()
        )));
    }
    let mut pins = store.pins();
    for ((path, digest), diff_id) in layer_files.iter().zip(&diff_ids) {
        pins.add(diff_id);
        if store.has_layer(diff_id) {
            continue;
        }
        let (actual, _) = sha256_file(path).map_err(|e| bad(format!("layer {digest}: {e}")))?;
        if &actual != digest {
            return Err(ImageError::DigestMismatch {
                what: format!("layer {digest} in the archive"),
                expected: digest.clone(),
                actual,
            });
        }
        store.add_layer(path, digest, diff_id)?;
    }
    let id = sha256_bytes(config_bytes);
    store.put_blob(manifest_digest, manifest_bytes)?;
    store.put_blob(&id, config_bytes)?;
    let size = config_bytes.len() as u64 + manifest.layers.iter().map(|l| l.size).sum::<u64>();
    let info = ImageInfo {
        reference,
        digest: repo_digest.to_string(),
        manifest_digest: manifest_digest.to_string(),
        id,
        config,
        layers: diff_ids,
        size,
    };
    store.commit(&info)?;
    Ok(info)
}
