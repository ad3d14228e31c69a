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

/// A layer of busybox `applets` (links to /bin/busybox in /bin), a /tmp and a /proc: what a
/// test pod's commands need on top of [`busybox_image`]'s layer.
pub fn applets_layer(applets: &[&str]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for applet in applets {
        add_symlink(&mut b, &format!("bin/{applet}"), "busybox");
    }
    for (dir, mode) in [("tmp/", 0o1777), ("proc/", 0o555)] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_size(0);
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, dir, std::io::empty()).unwrap();
    }
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
/// The busybox test image (command `sh`; `marker` tells one test's image from another's)
/// written as an OCI archive to `path` under `ref_name`.
pub fn write_busybox_archive(path: &Path, ref_name: &str, marker: &str) {
    let image = build_image(
        vec![lower_layer_tar(), upper_layer_tar(marker)],
        host_arch(),
        &["sh"],
    );
    write_oci_archive(path, &image, ref_name);
}

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

// ---------------------------------------------------------------------------------------
// A real registry (apt `docker-registry`) on 127.0.0.1 over TLS, and a small push client.

use agent::image::http::{self as http, tls_config, Url};
use api::transport::Transport;
use base64::Engine;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// A `docker-registry` process; killed on drop.
pub struct Registry {
    child: Child,
    /// The address it listens on (127.0.0.1 unless started with [`Registry::start_on`]).
    pub ip: String,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub ca_file: PathBuf,
    pub ca_pem: Vec<u8>,
    pub log: PathBuf,
    /// `user:password` accepted by htpasswd auth, if enabled.
    pub basic: Option<(String, String)>,
    /// A token used by the push client (token auth).
    pub push_token: Option<String>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    /// Starts the registry with TLS (self-signed for 127.0.0.1) and, if `basic` is given,
    /// htpasswd authentication.
    pub fn start(basic: Option<(&str, &str)>) -> Registry {
        Registry::start_with(basic, None)
    }

    /// Like [`Registry::start`]; with `token` = (realm URL, path of the PEM certificate
    /// whose key signs the tokens), the registry uses token (Bearer) authentication.
    pub fn start_with(basic: Option<(&str, &str)>, token: Option<(&str, &Path)>) -> Registry {
        Registry::start_full(basic, token, "127.0.0.1")
    }

    /// An anonymous registry listening on `ip` (in the calling thread's network namespace),
    /// its certificate for that address.
    pub fn start_on(ip: &str) -> Registry {
        Registry::start_full(None, None, ip)
    }

    fn start_full(basic: Option<(&str, &str)>, token: Option<(&str, &Path)>, ip: &str) -> Registry {
        assert!(
            Path::new(REGISTRY_BIN).is_file(),
            "{REGISTRY_BIN} is missing: apt-get install -y docker-registry"
        );
        let dir = tempfile::tempdir().unwrap();
        let cert = rcgen::generate_simple_self_signed(vec![ip.to_string()]).unwrap();
        let ca_pem = cert.cert.pem().into_bytes();
        let ca_file = dir.path().join("cert.pem");
        std::fs::write(&ca_file, &ca_pem).unwrap();
        std::fs::write(dir.path().join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
        let port = free_port();
        let auth = match basic {
            Some((user, password)) => {
                let hash = bcrypt::hash(password, 4).unwrap();
                std::fs::write(dir.path().join("htpasswd"), format!("{user}:{hash}\n")).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: skiff-test\n    path: {}\n",
                    dir.path().join("htpasswd").display()
                )
            }
            None => String::new(),
        };
        let auth = match token {
            Some((realm, bundle)) => format!(
                "auth:\n  token:\n    realm: {realm}\n    service: skiff-registry\n    issuer: skiff-test-issuer\n    rootcertbundle: {}\n",
                bundle.display()
            ),
            None => auth,
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {ip}:{port}\n  secret: skiff-test-secret\n  tls:\n    certificate: {cert}\n    key: {key}\n{auth}",
            data = dir.path().join("data").display(),
            cert = ca_file.display(),
            key = dir.path().join("key.pem").display(),
        );
        let config_file = dir.path().join("config.yml");
        std::fs::write(&config_file, config).unwrap();
        let log = dir.path().join("registry.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .spawn()
            .unwrap();
        let registry = Registry {
            child,
            ip: ip.to_string(),
            port,
            dir,
            ca_file,
            ca_pem,
            log,
            basic: basic.map(|(u, p)| (u.to_string(), p.to_string())),
            push_token: None,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect((ip, port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the registry did not start: {}",
                std::fs::read_to_string(&registry.log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        registry
    }

    pub fn host(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// The registry's own log (stdout and stderr, including the access log).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many `GET` requests for a blob the access log shows.
    pub fn blob_gets(&self, digest: &str) -> usize {
        let needle = "\"GET /v2/";
        self.log_text()
            .lines()
            .filter(|l| l.contains(needle) && l.contains(&format!("/blobs/{digest} ")))
            .count()
    }

    /// Where the registry keeps a blob's bytes.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    fn client(&self) -> Transport {
        http::client(tls_config(Some(&self.ca_pem)).unwrap())
    }

    fn auth_header(&self) -> Option<String> {
        if let Some(t) = &self.push_token {
            return Some(format!("Bearer {t}"));
        }
        self.basic.as_ref().map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        })
    }

    async fn put_blob(&self, http: &Transport, repo: &str, blob: &[u8]) {
        let digest = sha256_bytes(blob);
        let auth = self.auth_header();
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = auth.as_deref() {
            headers.push(("Authorization", a));
        }
        let base = Url::parse(&format!("https://{}/", self.host())).unwrap();
        let start = base.join(&format!("/v2/{repo}/blobs/uploads/")).unwrap();
        let mut resp = http.send("POST", &start, &headers, b"").await.unwrap();
        assert_eq!(resp.status, 202, "start upload: {resp:?}");
        let location = resp.header("location").unwrap().to_string();
        let _ = resp.bytes(1 << 20).await;
        let mut put = base.join(&location).unwrap();
        put.query_pairs_mut().append_pair("digest", &digest);
        let mut h = headers.clone();
        h.push(("Content-Type", "application/octet-stream"));
        let mut resp = http.send("PUT", &put, &h, blob).await.unwrap();
        let body = resp.bytes(1 << 20).await.unwrap();
        assert_eq!(
            resp.status,
            201,
            "put blob: {}",
            String::from_utf8_lossy(&body)
        );
    }

    async fn put_manifest(
        &self,
        http: &Transport,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: &[u8],
    ) {
        let auth = self.auth_header();
        let mut headers: Vec<(&str, &str)> = vec![("Content-Type", media_type)];
        if let Some(a) = auth.as_deref() {
            headers.push(("Authorization", a));
        }
        let url = Url::parse(&format!(
            "https://{}/v2/{repo}/manifests/{reference}",
            self.host()
        ))
        .unwrap();
        let mut resp = http.send("PUT", &url, &headers, body).await.unwrap();
        let text = resp.bytes(1 << 20).await.unwrap();
        assert_eq!(
            resp.status,
            201,
            "put manifest: {}",
            String::from_utf8_lossy(&text)
        );
    }

    /// Pushes an image's blobs and its manifest under `tag`.
    pub fn push(&self, repo: &str, tag: &str, image: &TestImage) {
        smol::block_on(async {
            let http = self.client();
            for (blob, _) in &image.layers {
                self.put_blob(&http, repo, blob).await;
            }
            self.put_blob(&http, repo, &image.config).await;
            self.put_manifest(
                &http,
                repo,
                tag,
                "application/vnd.oci.image.manifest.v1+json",
                &image.manifest,
            )
            .await;
        })
    }

    /// Pushes images (blobs and manifests by digest) and an index of them under `tag`;
    /// returns the index digest.
    pub fn push_index(
        &self,
        repo: &str,
        tag: &str,
        images: &[(&TestImage, &str, Option<&str>)],
    ) -> String {
        let manifests: Vec<serde_json::Value> = images
            .iter()
            .map(|(img, arch, variant)| {
                let mut platform = serde_json::json!({"architecture": arch, "os": "linux"});
                if let Some(v) = variant {
                    platform["variant"] = serde_json::json!(v);
                }
                serde_json::json!({
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": img.manifest_digest(),
                    "size": img.manifest.len(),
                    "platform": platform,
                })
            })
            .collect();
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        }))
        .unwrap();
        smol::block_on(async {
            let http = self.client();
            for (img, _, _) in images {
                for (blob, _) in &img.layers {
                    self.put_blob(&http, repo, blob).await;
                }
                self.put_blob(&http, repo, &img.config).await;
                self.put_manifest(
                    &http,
                    repo,
                    &img.manifest_digest(),
                    "application/vnd.oci.image.manifest.v1+json",
                    &img.manifest,
                )
                .await;
            }
            self.put_manifest(
                &http,
                repo,
                tag,
                "application/vnd.oci.image.index.v1+json",
                &index,
            )
            .await;
        });
        sha256_bytes(&index)
    }

    /// Pull options trusting this registry's certificate.
    pub fn pull_options(&self) -> agent::image::PullOptions {
        let mut registries = agent::image::RegistryConfig::default();
        registries.registries.insert(
            self.host(),
            agent::image::RegistryHost {
                ca_file: Some(self.ca_file.clone()),
                ..Default::default()
            },
        );
        agent::image::PullOptions {
            registries,
            platform: None,
            site: None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// A token service for registry token auth: ES256 JWTs with an x5c header, on plain HTTP.

pub struct TokenService {
    pub realm: String,
    pub bundle: PathBuf,
    key: ring::signature::EcdsaKeyPair,
    cert_der: Vec<u8>,
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _dir: tempfile::TempDir,
}

fn b64url(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

impl TokenService {
    /// Serves `GET /token?service=..&scope=..` on 127.0.0.1, answering only requests with
    /// Basic `user:password`.
    pub fn start(user: &str, password: &str) -> std::sync::Arc<TokenService> {
        let dir = tempfile::tempdir().unwrap();
        let key_pair = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["skiff-token".to_string()]).unwrap();
        let cert = params.self_signed(&key_pair).unwrap();
        let bundle = dir.path().join("token-ca.pem");
        std::fs::write(&bundle, cert.pem()).unwrap();
        let rng = ring::rand::SystemRandom::new();
        let key = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &key_pair.serialize_der(),
            &rng,
        )
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let svc = std::sync::Arc::new(TokenService {
            realm: format!("http://127.0.0.1:{port}/token"),
            bundle,
            key,
            cert_der: cert.der().to_vec(),
            requests: Default::default(),
            _dir: dir,
        });
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let weak = std::sync::Arc::downgrade(&svc);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Some(svc) = weak.upgrade() else { return };
                let Ok(conn) = conn else { continue };
                svc.serve(conn, &expected);
            }
        });
        svc
    }

    fn serve(&self, mut conn: std::net::TcpStream, expected_auth: &str) {
        use std::io::{BufRead, BufReader};
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut request_line = String::new();
        reader.read_line(&mut request_line).unwrap();
        let mut authorized = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case("authorization") && v.trim() == expected_auth {
                    authorized = true;
                }
            }
        }
        let target = request_line.split(' ').nth(1).unwrap_or("");
        let scope = target
            .split(['?', '&'])
            .find_map(|kv| kv.strip_prefix("scope="))
            .unwrap_or("")
            .replace("%3A", ":")
            .replace("%2F", "/");
        let (status, body) = if !authorized {
            (
                "401 Unauthorized",
                r#"{"details":"bad credentials"}"#.to_string(),
            )
        } else {
            let repo = scope.split(':').nth(1).unwrap_or("").to_string();
            let token = self.token(&repo);
            ("200 OK", serde_json::json!({"token": token}).to_string())
        };
        let _ = conn.write_all(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }

    /// A token granting pull and push on `repo`.
    pub fn token(&self, repo: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let header = serde_json::json!({
            "typ": "JWT",
            "alg": "ES256",
            "x5c": [base64::engine::general_purpose::STANDARD.encode(&self.cert_der)],
        });
        let claims = serde_json::json!({
            "iss": "skiff-test-issuer",
            "sub": "skiff",
            "aud": "skiff-registry",
            "exp": now + 300,
            "nbf": now - 30,
            "iat": now - 30,
            "jti": format!("{now}-{repo}"),
            "access": [{"type": "repository", "name": repo, "actions": ["pull", "push"]}],
        });
        let signing_input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let rng = ring::rand::SystemRandom::new();
        let sig = self.key.sign(&rng, signing_input.as_bytes()).unwrap();
        format!("{signing_input}.{}", b64url(sig.as_ref()))
    }
}
