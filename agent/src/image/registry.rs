//! Pulling from registries (Docker Registry HTTP API v2 / OCI distribution).
//!
//! `GET /v2/<name>/manifests/<ref>` with an Accept header for OCI indexes and manifests and
//! Docker manifest lists and schema-2 manifests; an index is resolved to the node's platform;
//! the config and layer blobs are fetched (following redirects, without sending credentials
//! to other hosts), every digest is verified while streaming to a temp file, then the layers
//! are unpacked. A `401` with `WWW-Authenticate: Bearer realm=..,service=..,scope=..` fetches
//! a token from the realm (anonymously or with basic credentials) and retries; a `Basic`
//! challenge retries with basic auth.
//!
//! TLS trusts the Mozilla roots (`webpki-roots`) plus a per-registry CA file; plain HTTP only
//! for registries marked `insecure_http`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use futures_lite::io::AsyncWriteExt;
use ring::digest;
use serde::{Deserialize, Serialize};

use super::error::ImageError;
use super::http::{self, HttpError, Response, Url};
use super::layer::digest_string;
use super::oci::{self, Platform};
use super::{parse_config, sha256_bytes, ImageInfo, ImageStore, Reference};
use api::transport::Transport;

const MAX_REDIRECTS: usize = 5;

/// How to reach one registry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryHost {
    /// Extra CA certificates (PEM) trusted for this registry, besides the webpki roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Talk plain HTTP to this registry (never the default).
    #[serde(default)]
    pub insecure_http: bool,
    /// Credentials used when a pull gives none.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// A bearer token used when a pull gives no credentials (registries.yaml's
    /// `identity_token`).
    #[serde(default)]
    pub identity_token: Option<String>,
}

/// The node's registry configuration: registry host (`host` or `host:port`, as written in
/// image references; `docker.io` for Docker Hub) -> settings. Unlisted registries use HTTPS
/// with the webpki roots and anonymous access.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryConfig {
    #[serde(default)]
    pub registries: BTreeMap<String, RegistryHost>,
    /// Mirrors by registry (`*` for all), from a k3s `registries.yaml`
    /// ([`RegistryConfig::load_yaml`]).
    #[serde(skip)]
    pub mirrors: BTreeMap<String, super::mirrors::Mirror>,
}

impl RegistryConfig {
    /// Reads a JSON file `{"registries": {"host:port": {"ca_file": .., "insecure_http": ..,
    /// "username": .., "password": ..}}}`; a missing file is an empty configuration.
    pub fn load(path: &Path) -> Result<RegistryConfig, ImageError> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| ImageError::Config(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RegistryConfig::default()),
            Err(e) => Err(ImageError::Config(format!("{}: {e}", path.display()))),
        }
    }
}

/// Credentials for one pull (from a pod's imagePullSecrets); `Anonymous` falls back to the
/// registry configuration's credentials, if any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RegistryAuth {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
    /// A ready bearer token (`registrytoken` / `identitytoken` style).
    Bearer(String),
}

impl RegistryAuth {
    /// Credentials for `registry` from a `.dockerconfigjson` document
    /// (`{"auths": {"host": {"auth": base64(user:pass)} | {"username", "password"}}}`).
    pub fn from_docker_config(json: &[u8], registry: &str) -> Option<RegistryAuth> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            auths: BTreeMap<String, Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            #[serde(default)]
            auth: Option<String>,
            #[serde(default)]
            username: Option<String>,
            #[serde(default)]
            password: Option<String>,
            #[serde(default)]
            registrytoken: Option<String>,
        }
        let f: File = serde_json::from_slice(json).ok()?;
        let host_of = |k: &str| {
            let k = k
                .trim_start_matches("https://")
                .trim_start_matches("http://");
            let k = k.split('/').next().unwrap_or(k);
            match k {
                "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
                other => other.to_string(),
            }
        };
        let e = f.auths.iter().find(|(k, _)| host_of(k) == registry)?.1;
        if let Some(t) = &e.registrytoken {
            return Some(RegistryAuth::Bearer(t.clone()));
        }
        if let (Some(u), Some(p)) = (&e.username, &e.password) {
            return Some(RegistryAuth::Basic {
                username: u.clone(),
                password: p.clone(),
            });
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(e.auth.as_ref()?.trim())
            .ok()?;
        let s = String::from_utf8(raw).ok()?;
        let (u, p) = s.split_once(':')?;
        Some(RegistryAuth::Basic {
            username: u.into(),
            password: p.into(),
        })
    }
}

/// Options of a pull.
#[derive(Clone, Debug, Default)]
pub struct PullOptions {
    pub registries: RegistryConfig,
    /// The platform to pick from multi-platform images; default: this node's.
    pub platform: Option<Platform>,
    /// The node's site, when it shares images with its peers (`--share-images`): layer
    /// blobs are then asked of their home node first, and kept (docs/design/site-images.md).
    pub site: Option<Arc<super::peers::Site>>,
}

/// A session with one repository of one registry.
struct Session<'a> {
    http: Transport,
    base: Url,
    reference: &'a Reference,
    registry: String,
    creds: Option<(String, String)>,
    /// `Authorization` value once a challenge was answered (or a token was given).
    authorization: Option<String>,
    challenged: bool,
}

/// A `Location` or path that does not make a URL.
fn url_err(registry: &str, e: impl std::fmt::Display) -> ImageError {
    ImageError::Network {
        registry: registry.to_string(),
        detail: format!("bad URL: {e}"),
    }
}

fn net_err(registry: &str, e: HttpError) -> ImageError {
    ImageError::Network {
        registry: registry.to_string(),
        detail: e.to_string(),
    }
}

/// Splits `Bearer realm="x",service="y"` into the scheme and its parameters.
pub(crate) fn parse_challenge(h: &str) -> (String, BTreeMap<String, String>) {
    let h = h.trim();
    let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let Some((k, after)) = rest.split_once('=') else {
            break;
        };
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (v, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"').unwrap_or(q.len());
            (q[..end].to_string(), q.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        params.insert(k, v);
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    (scheme.to_ascii_lowercase(), params)
}

/// The `message`s of a registry error body (`{"errors":[{"code","message"}]}`).
fn error_detail(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Errors {
        #[serde(default)]
        errors: Vec<ErrEntry>,
    }
    #[derive(Deserialize)]
    struct ErrEntry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Errors>(body) {
        Ok(e) if !e.errors.is_empty() => e
            .errors
            .iter()
            .map(|x| format!("{} ({})", x.message, x.code))
            .collect::<Vec<_>>()
            .join("; "),
        _ => String::from_utf8_lossy(&body[..body.len().min(300)])
            .trim()
            .to_string(),
    }
}

impl<'a> Session<'a> {
    fn new(
        reference: &'a Reference,
        auth: &RegistryAuth,
        opts: &PullOptions,
    ) -> Result<Session<'a>, ImageError> {
        let host = opts
            .registries
            .registries
            .get(&reference.registry)
            .cloned()
            .unwrap_or_default();
        let ca = match &host.ca_file {
            Some(p) => Some(http::read_ca_file(p).map_err(|e| ImageError::Config(e.to_string()))?),
            None => None,
        };
        let tls = http::tls_config(ca.as_deref()).map_err(|e| ImageError::Config(e.to_string()))?;
        let scheme = if host.insecure_http { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{}/", reference.api_host())).map_err(|e| {
            ImageError::InvalidReference {
                reference: reference.to_string(),
                reason: e.to_string(),
            }
        })?;
        let (creds, authorization) = match auth {
            RegistryAuth::Basic { username, password } => {
                (Some((username.clone(), password.clone())), None)
            }
            RegistryAuth::Bearer(t) => (None, Some(format!("Bearer {t}"))),
            RegistryAuth::Anonymous => (
                host.username.clone().zip(host.password.clone()),
                host.identity_token.as_ref().map(|t| format!("Bearer {t}")),
            ),
        };
        Ok(Session {
            http: http::client(tls),
            base,
            reference,
            registry: reference.registry.clone(),
            creds,
            authorization,
            challenged: false,
        })
    }

    fn basic(&self) -> Option<String> {
        self.creds.as_ref().map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        })
    }

    fn unauthorized(&self, detail: String) -> ImageError {
        let detail = if self.creds.is_none() && self.authorization.is_none() {
            format!(
                "{detail} (pull access denied: the repository does not exist or needs credentials)"
            )
        } else {
            detail
        };
        ImageError::Unauthorized {
            reference: self.reference.to_string(),
            registry: self.registry.clone(),
            detail,
        }
    }

    /// GET `path` (under /v2/<repo>/), answering auth challenges and following redirects.
    /// Non-2xx answers become errors.
    async fn get(
        &mut self,
        path: &str,
        accept: Option<&str>,
        what: &str,
    ) -> Result<Response, ImageError> {
        let mut url = self
            .base
            .join(&format!("/v2/{}/{path}", self.reference.repository))
            .map_err(|e| url_err(&self.registry, e))?;
        let mut redirects = 0;
        loop {
            let same_host = url.origin() == self.base.origin();
            let mut headers: Vec<(&str, &str)> = Vec::new();
            if let Some(a) = accept {
                headers.push(("Accept", a));
            }
            let authz = self.authorization.clone();
            if let (true, Some(a)) = (same_host, authz.as_deref()) {
                headers.push(("Authorization", a));
            }
            let mut resp = self
                .http
                .send("GET", &url, &headers, b"")
                .await
                .map_err(|e| net_err(&self.registry, e))?;
            match resp.status {
                200..=299 => return Ok(resp),
                301 | 302 | 303 | 307 | 308 => {
                    redirects += 1;
                    let loc = resp.header("location").unwrap_or_default().to_string();
                    if redirects > MAX_REDIRECTS || loc.is_empty() {
                        return Err(ImageError::Registry {
                            registry: self.registry.clone(),
                            status: resp.status,
                            what: what.into(),
                            detail: "too many redirects or a redirect without Location".into(),
                        });
                    }
                    url = url.join(&loc).map_err(|e| url_err(&self.registry, e))?;
                }
                401 if same_host && !self.challenged => {
                    self.challenged = true;
                    let challenge = resp
                        .header("www-authenticate")
                        .unwrap_or_default()
                        .to_string();
                    let body = resp.bytes(64 * 1024).await.unwrap_or_default();
                    self.answer_challenge(&challenge, &body).await?;
                }
                status => {
                    let body = resp.bytes(64 * 1024).await.unwrap_or_default();
                    let detail = error_detail(&body);
                    return Err(match status {
                        401 | 403 => self.unauthorized(detail),
                        404 => ImageError::NotFound {
                            reference: self.reference.to_string(),
                            detail: format!("{what}: {detail}"),
                        },
                        _ => ImageError::Registry {
                            registry: self.registry.clone(),
                            status,
                            what: what.into(),
                            detail,
                        },
                    });
                }
            }
        }
    }

    async fn answer_challenge(&mut self, challenge: &str, body: &[u8]) -> Result<(), ImageError> {
        let (scheme, params) = parse_challenge(challenge);
        match scheme.as_str() {
            "basic" => match self.basic() {
                Some(b) => {
                    self.authorization = Some(b);
                    Ok(())
                }
                None => Err(self.unauthorized(format!(
                    "the registry wants a username and password ({})",
                    error_detail(body)
                ))),
            },
            "bearer" => {
                let realm = params.get("realm").cloned().unwrap_or_default();
                let mut url = Url::parse(&realm).map_err(|_| {
                    self.unauthorized(format!("bad token realm {realm:?} in the challenge"))
                })?;
                let scope = params
                    .get("scope")
                    .cloned()
                    .unwrap_or_else(|| format!("repository:{}:pull", self.reference.repository));
                {
                    let mut query = url.query_pairs_mut();
                    if let Some(s) = params.get("service") {
                        query.append_pair("service", s);
                    }
                    query.append_pair("scope", &scope);
                }
                let token_host = url.host_str().unwrap_or_default().to_string();
                let basic = self.basic();
                let mut headers: Vec<(&str, &str)> = Vec::new();
                if let Some(b) = basic.as_deref() {
                    headers.push(("Authorization", b));
                }
                let mut resp = self
                    .http
                    .send("GET", &url, &headers, b"")
                    .await
                    .map_err(|e| net_err(&token_host, e))?;
                let body = resp
                    .bytes(1024 * 1024)
                    .await
                    .map_err(|e| net_err(&token_host, e))?;
                if resp.status == 401 || resp.status == 403 {
                    return Err(self.unauthorized(format!(
                        "the token service refused the credentials: {}",
                        error_detail(&body)
                    )));
                }
                if !(200..300).contains(&resp.status) {
                    return Err(ImageError::Registry {
                        registry: token_host.clone(),
                        status: resp.status,
                        what: "a token".into(),
                        detail: error_detail(&body),
                    });
                }
                #[derive(Deserialize)]
                struct Token {
                    #[serde(default)]
                    token: Option<String>,
                    #[serde(default)]
                    access_token: Option<String>,
                }
                let t: Token = serde_json::from_slice(&body).map_err(|e| {
                    self.unauthorized(format!("the token service answered no token: {e}"))
                })?;
                let token = t
                    .token
                    .or(t.access_token)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        self.unauthorized("the token service answered no token".into())
                    })?;
                self.authorization = Some(format!("Bearer {token}"));
                Ok(())
            }
            _ => Err(self.unauthorized(format!(
                "unsupported authentication challenge {challenge:?}"
            ))),
        }
    }

    /// Fetches a manifest or index; returns (media type, body, digest), the digest checked
    /// against `expected` and the registry's `Docker-Content-Digest`.
    async fn manifest(
        &mut self,
        reference: &str,
        expected: Option<&str>,
    ) -> Result<(String, Vec<u8>, String), ImageError> {
        let what = format!("manifest {reference}");
        let mut resp = self
            .get(
                &format!("manifests/{reference}"),
                Some(oci::ACCEPT_MANIFESTS),
                &what,
            )
            .await?;
        let media_type = resp
            .header("content-type")
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let header_digest = resp.header("docker-content-digest").map(String::from);
        let body = resp
            .bytes(oci::MAX_DOCUMENT)
            .await
            .map_err(|e| net_err(&self.registry, e))?;
        let digest = sha256_bytes(&body);
        for exp in expected.into_iter().chain(
            header_digest
                .as_deref()
                .filter(|d| d.starts_with("sha256:")),
        ) {
            if exp != digest {
                return Err(ImageError::DigestMismatch {
                    what,
                    expected: exp.to_string(),
                    actual: digest,
                });
            }
        }
        Ok((media_type, body, digest))
    }

    /// Fetches a small blob into memory, verifying it.
    async fn small_blob(&mut self, d: &oci::Descriptor) -> Result<Vec<u8>, ImageError> {
        let what = format!("blob {}", d.digest);
        let mut resp = self
            .get(&format!("blobs/{}", d.digest), None, &what)
            .await?;
        let body = resp
            .bytes(oci::MAX_DOCUMENT)
            .await
            .map_err(|e| net_err(&self.registry, e))?;
        let actual = sha256_bytes(&body);
        if actual != d.digest {
            return Err(ImageError::DigestMismatch {
                what,
                expected: d.digest.clone(),
                actual,
            });
        }
        Ok(body)
    }

    /// Streams a blob to `dest`, verifying size and digest.
    async fn blob_to_file(&mut self, d: &oci::Descriptor, dest: &Path) -> Result<(), ImageError> {
        let what = format!("layer {}", d.digest);
        let mut resp = self
            .get(&format!("blobs/{}", d.digest), None, &what)
            .await?;
        write_verified(&mut resp, d, dest, &self.registry).await
    }
}

/// Streams the body of `resp` (from `source`, a registry or a peer) to `dest`, verifying
/// its size and digest against `d` as it goes.
pub(crate) async fn write_verified(
    resp: &mut Response,
    d: &oci::Descriptor,
    dest: &Path,
    source: &str,
) -> Result<(), ImageError> {
    let what = format!("layer {}", d.digest);
    let mut file = smol::fs::File::create(dest)
        .await
        .map_err(|e| ImageError::io(format!("cannot create {}", dest.display()), e))?;
    let mut ctx = digest::Context::new(&digest::SHA256);
    let mut count = 0u64;
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        let n = resp.read(&mut buf).await.map_err(|e| net_err(source, e))?;
        if n == 0 {
            break;
        }
        count += n as u64;
        if d.size > 0 && count > d.size {
            return Err(ImageError::DigestMismatch {
                what: format!("{what} (larger than its declared {} bytes)", d.size),
                expected: d.digest.clone(),
                actual: "(longer content)".into(),
            });
        }
        ctx.update(&buf[..n]);
        file.write_all(&buf[..n])
            .await
            .map_err(|e| ImageError::io(format!("cannot write {}", dest.display()), e))?;
    }
    file.flush()
        .await
        .map_err(|e| ImageError::io(format!("cannot write {}", dest.display()), e))?;
    let actual = digest_string(ctx.finish());
    if actual != d.digest {
        return Err(ImageError::DigestMismatch {
            what,
            expected: d.digest.clone(),
            actual,
        });
    }
    Ok(())
}

/// Fetches one blob of `r` to `dest` (verified) with the node's own registry configuration
/// and credentials: from each mirror of its registry in turn, then from the registry. What
/// a site's home node does for a peer (see [`super::peers`]).
pub(crate) async fn fetch_blob(
    r: &Reference,
    d: &oci::Descriptor,
    opts: &PullOptions,
    dest: &Path,
) -> Result<(), ImageError> {
    let mut last = None;
    for from in opts.registries.candidates(r) {
        let fetched = match Session::new(&from, &RegistryAuth::Anonymous, opts) {
            Ok(mut s) => s.blob_to_file(d, dest).await,
            Err(e) => Err(e),
        };
        match fetched {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::debug!(image = %r, from = %from, digest = %d.digest, "blob fetch failed: {e}");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| ImageError::NotFound {
        reference: r.to_string(),
        detail: format!("blob {}: no registry to ask", d.digest),
    }))
}

fn bad_manifest(r: &Reference, detail: impl std::fmt::Display) -> ImageError {
    ImageError::BadManifest {
        reference: r.to_string(),
        detail: detail.to_string(),
    }
}

/// Pulls `r` into `store` (no deduplication here: see [`ImageStore::pull`]): from each of
/// its registry's mirrors in turn (with the node's credentials for the mirror), then from the
/// registry itself (with the pull's).
pub(crate) async fn pull(
    store: &ImageStore,
    r: &Reference,
    auth: &RegistryAuth,
    opts: &PullOptions,
) -> Result<ImageInfo, ImageError> {
    let candidates = opts.registries.candidates(r);
    let (upstream, mirrors) = candidates
        .split_last()
        .expect("the registry itself is last");
    for m in mirrors {
        match pull_from(store, m, r, &RegistryAuth::Anonymous, opts).await {
            Ok(info) => return Ok(info),
            // What the content says is wrong is wrong everywhere.
            Err(e @ ImageError::DigestMismatch { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(image = %r, mirror = %m, "mirror failed, trying the next: {e}")
            }
        }
    }
    pull_from(store, upstream, r, auth, opts).await
}

/// Pulls `from` (the image `r`, or its copy on a mirror) into `store` under `r`'s name.
async fn pull_from(
    store: &ImageStore,
    from: &Reference,
    r: &Reference,
    auth: &RegistryAuth,
    opts: &PullOptions,
) -> Result<ImageInfo, ImageError> {
    let mut s = Session::new(from, auth, opts)?;
    let (media_type, body, repo_digest) = s.manifest(r.manifest_ref(), r.digest.as_deref()).await?;
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| bad_manifest(r, e))?;
    let media_type = if media_type.is_empty() || media_type == "application/json" {
        value
            .get("mediaType")
            .and_then(|m| m.as_str())
            .unwrap_or_default()
            .to_string()
    } else {
        media_type
    };
    let (manifest_bytes, manifest_digest) = if oci::is_index(&media_type, &value) {
        let index: oci::Index = serde_json::from_value(value).map_err(|e| bad_manifest(r, e))?;
        let want = opts.platform.clone().unwrap_or_else(Platform::host);
        let d =
            oci::select_platform(&index, &want).ok_or_else(|| ImageError::NoMatchingPlatform {
                reference: r.to_string(),
                platform: want.to_string(),
                available: oci::platforms(&index),
            })?;
        let digest = d.digest.clone();
        let (_, b, md) = s.manifest(&digest, Some(&digest)).await?;
        (b, md)
    } else {
        (body, repo_digest.clone())
    };
    let manifest: oci::Manifest =
        serde_json::from_slice(&manifest_bytes).map_err(|e| bad_manifest(r, e))?;
    let mut pins = store.pins();
    pins.add(&manifest_digest);
    pins.add(&repo_digest);
    pins.add(&manifest.config.digest);
    let config_bytes = s.small_blob(&manifest.config).await?;
    let (config, diff_ids) = parse_config(&r.to_string(), &config_bytes)?;
    if diff_ids.len() != manifest.layers.len() {
        return Err(bad_manifest(
            r,
            format!(
                "the manifest has {} layers but the config {} diff ids",
                manifest.layers.len(),
                diff_ids.len()
            ),
        ));
    }
    for (d, diff_id) in manifest.layers.iter().zip(&diff_ids) {
        pins.add(diff_id);
        if store.has_layer(diff_id) {
            continue;
        }
        if let Some(site) = &opts.site {
            pins.add(&d.digest);
            // The download from the registry runs only if no peer has the layer.
            let tmp = store.temp_path("download");
            let download = Box::pin(s.blob_to_file(d, &tmp));
            let shared = Box::pin(site.layer_blob(r, d, &tmp, download)).await?;
            if let Some(blob) = shared {
                let (st, digest, diff) = (store.clone(), d.digest.clone(), diff_id.clone());
                smol::unblock(move || st.add_layer(&blob, &digest, &diff)).await?;
                continue;
            }
        }
        let tmp = store.temp_path("download");
        let fetched = s.blob_to_file(d, &tmp).await;
        if let Err(e) = fetched {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let (st, tmp2, digest, diff) = (
            store.clone(),
            tmp.clone(),
            d.digest.clone(),
            diff_id.clone(),
        );
        let unpacked = smol::unblock(move || st.add_layer(&tmp2, &digest, &diff)).await;
        let _ = std::fs::remove_file(&tmp);
        unpacked?;
    }
    let size = manifest.config.size.max(config_bytes.len() as u64)
        + manifest.layers.iter().map(|l| l.size).sum::<u64>();
    let info = ImageInfo {
        reference: r.to_string(),
        digest: repo_digest,
        manifest_digest: manifest_digest.clone(),
        id: manifest.config.digest.clone(),
        config,
        layers: diff_ids,
        size,
    };
    let st = store.clone();
    let info2 = info.clone();
    smol::unblock(move || {
        st.put_blob(&info2.manifest_digest, &manifest_bytes)?;
        st.put_blob(&info2.id, &config_bytes)?;
        st.commit(&info2)
    })
    .await?;
    drop(pins);
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_parsed() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#,
        );
        assert_eq!(s, "bearer");
        assert_eq!(p["realm"], "https://auth.docker.io/token");
        assert_eq!(p["service"], "registry.docker.io");
        assert_eq!(p["scope"], "repository:library/busybox:pull");
        let (s, p) = parse_challenge(r#"Basic realm="Registry Realm""#);
        assert_eq!(s, "basic");
        assert_eq!(p["realm"], "Registry Realm");
    }

    #[test]
    fn docker_config_credentials_are_read() {
        let json = br#"{"auths":{"https://index.docker.io/v1/":{"auth":"dTpw"},"h:5000":{"username":"a","password":"b"}}}"#;
        assert_eq!(
            RegistryAuth::from_docker_config(json, "docker.io"),
            Some(RegistryAuth::Basic {
                username: "u".into(),
                password: "p".into()
            })
        );
        assert_eq!(
            RegistryAuth::from_docker_config(json, "h:5000"),
            Some(RegistryAuth::Basic {
                username: "a".into(),
                password: "b".into()
            })
        );
        assert_eq!(RegistryAuth::from_docker_config(json, "other"), None);
    }

    #[test]
    fn registry_errors_are_summarised() {
        assert_eq!(
            error_detail(
                br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#
            ),
            "manifest unknown (MANIFEST_UNKNOWN)"
        );
        assert_eq!(error_detail(b"nope"), "nope");
    }
}
