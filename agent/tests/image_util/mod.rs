//! Shared helpers of the image tests: a two-layer busybox test image built with the `tar`
//! crate (gzipped lower layer, plain upper layer with a whiteout and an opaque directory),
//! written as an OCI layout tar or a `docker save` tar.

#![allow(dead_code)]

use std::io::Write;
use std::path::Path;

use agent::image::sha256_bytes;

pub const BUSYBOX: &str = "/bin/busybox";

/// Fails with a useful message unless the test can really run.
pub fn require_root_and_busybox() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the image tests unpack layers and mount overlays: run them as root"
    );
    assert!(
        Path::new(BUSYBOX).is_file(),
        "{BUSYBOX} is missing: apt-get install -y busybox-static"
    );
}

fn add_dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

fn add_file(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(mode);
    h.set_size(data.len() as u64);
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    b.append_data(&mut h, path, data).unwrap();
}

fn add_symlink(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_mode(0o777);
    h.set_size(0);
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    b.append_link(&mut h, path, target).unwrap();
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Lower layer: busybox, /bin/sh, /etc/passwd, /etc/removed, /data/old.
pub fn lower_layer_tar() -> Vec<u8> {
    let busybox = std::fs::read(BUSYBOX).expect("read /bin/busybox");
    let mut b = tar::Builder::new(Vec::new());
    add_dir(&mut b, "bin/");
    add_file(&mut b, "bin/busybox", 0o755, &busybox);
    add_symlink(&mut b, "bin/sh", "busybox");
    add_dir(&mut b, "etc/");
    add_file(
        &mut b,
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\n",
    );
    add_file(&mut b, "etc/removed", 0o644, b"gone in the upper layer\n");
    add_dir(&mut b, "data/");
    add_file(&mut b, "data/old", 0o644, b"hidden by the opaque dir\n");
    b.into_inner().unwrap()
}

/// Upper layer: deletes /etc/removed, makes /data opaque with /data/new, adds /hello.txt.
pub fn upper_layer_tar(hello: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    add_dir(&mut b, "etc/");
    add_file(&mut b, "etc/.wh.removed", 0o644, b"");
    add_dir(&mut b, "data/");
    add_file(&mut b, "data/.wh..wh..opq", 0o644, b"");
    add_file(&mut b, "data/new", 0o644, b"new data\n");
    add_file(&mut b, "hello.txt", 0o644, hello.as_bytes());
    b.into_inner().unwrap()
}

/// One layer holding a single file.
pub fn single_file_layer(name: &str, data: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    add_file(&mut b, name, 0o644, data);
    b.into_inner().unwrap()
}

/// A test image: layer blobs (as stored/pushed), diff ids, config, manifest.
#[derive(Clone, Debug)]
pub struct TestImage {
    /// (blob bytes, media type)
    pub layers: Vec<(Vec<u8>, &'static str)>,
    pub diff_ids: Vec<String>,
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
}

impl TestImage {
    pub fn manifest_digest(&self) -> String {
        sha256_bytes(&self.manifest)
    }
    pub fn config_digest(&self) -> String {
        sha256_bytes(&self.config)
    }
    pub fn layer_digests(&self) -> Vec<String> {
        self.layers.iter().map(|(b, _)| sha256_bytes(b)).collect()
    }
}

pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// Builds an image from uncompressed layer tars (the first one gzipped).
pub fn build_image(tars: Vec<Vec<u8>>, arch: &str, cmd: &[&str]) -> TestImage {
    let diff_ids: Vec<String> = tars.iter().map(|t| sha256_bytes(t)).collect();
    let layers: Vec<(Vec<u8>, &'static str)> = tars
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            if i == 0 {
                (gzip(&t), OCI_LAYER_GZIP)
            } else {
                (t, OCI_LAYER_TAR)
            }
        })
        .collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/busybox"],
            "Cmd": cmd,
            "Env": ["PATH=/bin", "GREETING=hi"],
            "WorkingDir": "/data",
            "ExposedPorts": {"8080/tcp": {}},
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256_bytes(&config),
            "size": config.len(),
        },
        "layers": layers.iter().map(|(b, mt)| serde_json::json!({
            "mediaType": mt, "digest": sha256_bytes(b), "size": b.len(),
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    TestImage {
        layers,
        diff_ids,
        config,
        manifest,
    }
}

/// The standard two-layer busybox test image.
pub fn busybox_image(hello: &str) -> TestImage {
    build_image(
        vec![lower_layer_tar(), upper_layer_tar(hello)],
        host_arch(),
        &["sh"],
    )
}

pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        "x86_64" => "amd64",
        other => panic!("unsupported test architecture {other}"),
    }
}

fn append_bytes(b: &mut tar::Builder<std::fs::File>, path: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    b.append_data(&mut h, path, data).unwrap();
}

fn blob_name(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.strip_prefix("sha256:").unwrap())
}

/// Writes an OCI image layout tar holding `image`, named by the `ref.name` annotation.
pub fn write_oci_archive(path: &Path, image: &TestImage, ref_name: &str) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    append_bytes(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": image.manifest_digest(),
            "size": image.manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": ref_name},
        }],
    });
    append_bytes(&mut b, "index.json", &serde_json::to_vec(&index).unwrap());
    append_bytes(
        &mut b,
        &blob_name(&image.manifest_digest()),
        &image.manifest,
    );
    append_bytes(&mut b, &blob_name(&image.config_digest()), &image.config);
    for (blob, _) in &image.layers {
        append_bytes(&mut b, &blob_name(&sha256_bytes(blob)), blob);
    }
    b.finish().unwrap();
}

/// Writes a `docker save` style tar (`manifest.json`, `<id>.json`, `<n>/layer.tar`).
pub fn write_docker_archive(path: &Path, image: &TestImage, repo_tags: &[&str]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    let config_name = format!(
        "{}.json",
        image.config_digest().strip_prefix("sha256:").unwrap()
    );
    let mut layer_names = Vec::new();
    for (i, (blob, _)) in image.layers.iter().enumerate() {
        let name = format!("layer{i}/layer.tar");
        append_bytes(&mut b, &name, blob);
        layer_names.push(name);
    }
    append_bytes(&mut b, &config_name, &image.config);
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": repo_tags,
        "Layers": layer_names,
    }]);
    append_bytes(
        &mut b,
        "manifest.json",
        &serde_json::to_vec(&manifest).unwrap(),
    );
    b.finish().unwrap();
}

/// Whether `p` is an overlayfs whiteout (char device 0:0).
pub fn is_whiteout(p: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    std::fs::symlink_metadata(p)
        .map(|m| m.file_type().is_char_device() && m.rdev() == 0)
        .unwrap_or(false)
}

pub fn is_mount_point(p: &Path) -> bool {
    let canon = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| Path::new(mp) == canon)
}
