//! The node's image store: content-addressed blobs, unpacked layers shared between images,
//! imports of OCI / `docker save` archives, pulls from registries, and overlay root
//! filesystems for containers.
//!
//! On-disk layout under the store root (e.g. `<agent-data>/images`):
//!
//! ```text
//! index.json                  name -> ImageInfo (JSON, replaced atomically by rename)
//! blobs/sha256/<hex>          manifests and image configs, verified against their digest
//! layers/sha256/<hex>/        one unpacked layer per diff id (overlayfs lower dir; whiteouts
//!                             as 0:0 char devices, opaque dirs with trusted.overlay.opaque=y)
//! index.lock                  flock held while index.json is changed (several processes,
//!                             e.g. the agent and `skiff-agent image import`, share a store)
//! gc.lock                     shared flock held by pulls/imports, exclusive by garbage collection
//! tmp/                        downloads and unpacks in progress (`<what>-<pid>-..`; entries of
//!                             dead processes are removed on open)
//! ```
//!
//! Compressed layer blobs are not kept once unpacked: the unpacked directory, named by its
//! diff id (the sha256 of the uncompressed tar, checked while unpacking), is the layer. A
//! node that shares images with its site (`--share-images`, [`peers`]) keeps them in
//! `blobs/` too, to serve them; they go with the last image whose manifest names them.
//! Layers shared by images are stored once. Unpacking and mounting need root.

mod archive;
pub mod cli;
mod error;
pub mod http;
mod layer;
pub mod mirrors;
mod mount;
pub mod oci;
pub mod peers;
pub mod reference;
mod registry;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

pub use error::ImageError;
use error::IoContext;
/// Public for the fuzz targets (fuzz/), which feed it arbitrary layer blobs.
pub use layer::unpack_layer;
pub use layer::{sha256_bytes, sha256_file};
pub use mount::{unmount_rootfs, RootfsMount};
pub use oci::Platform;
pub use reference::Reference;
pub use registry::{PullOptions, RegistryAuth, RegistryConfig, RegistryHost};

/// What a container needs from its image's config (the `config` object of an OCI image
/// config). Postcard-safe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value` entries.
    pub env: Vec<String>,
    pub working_dir: String,
    pub user: String,
    /// `80/tcp` style.
    pub exposed_ports: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub stop_signal: String,
    pub os: String,
    pub architecture: String,
}

/// An image present in the store. Postcard-safe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// Normalised reference (`docker.io/library/busybox:latest`, `host:5000/app@sha256:..`),
    /// or the manifest digest for an untagged import.
    pub reference: String,
    /// The digest the reference resolved to in the registry (an index / manifest list for a
    /// multi-platform image): the repo digest Kubernetes reports in `imageID`.
    pub digest: String,
    /// The digest of the platform-specific manifest (equal to `digest` for single-platform
    /// images).
    pub manifest_digest: String,
    /// The config digest: the image ID that `crictl images` shows.
    pub id: String,
    pub config: ImageConfig,
    /// Layer diff ids, bottom first.
    pub layers: Vec<String>,
    /// Size of the config and the (compressed) layer blobs, in bytes.
    pub size: u64,
}

impl ImageInfo {
    /// `registry/repository@digest`, as Kubernetes shows in `containerStatuses[].imageID`.
    pub fn repo_digest(&self) -> String {
        match Reference::parse(&self.reference) {
            Ok(r) => format!("{}@{}", r.name(), self.digest),
            Err(_) => self.digest.clone(),
        }
    }
}

/// Kubernetes `imagePullPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    /// Parses `Always`, `IfNotPresent`, `Never`; empty means the Kubernetes default for the
    /// reference (`Always` for `:latest` or no tag, else `IfNotPresent`).
    pub fn parse(policy: &str, reference: &str) -> Option<PullPolicy> {
        match policy {
            "Always" => Some(PullPolicy::Always),
            "IfNotPresent" => Some(PullPolicy::IfNotPresent),
            "Never" => Some(PullPolicy::Never),
            "" => Some(PullPolicy::default_for(reference)),
            _ => None,
        }
    }

    /// The Kubernetes default policy for an image reference.
    pub fn default_for(reference: &str) -> PullPolicy {
        match Reference::parse(reference) {
            Ok(r) if r.digest.is_none() && r.tag.as_deref() != Some("latest") => {
                PullPolicy::IfNotPresent
            }
            Ok(r) if r.digest.is_some() => PullPolicy::IfNotPresent,
            _ => PullPolicy::Always,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct IndexFile {
    images: BTreeMap<String, ImageInfo>,
}

/// `index.json` may be changed by another process (`skiff-agent image import` while the
/// agent runs): reads reload it when its (inode, mtime, size) changed, and changes are made
/// under an exclusive `flock` on `index.lock` after reloading.
#[derive(Default)]
struct Cached {
    stamp: Option<(u64, i64, i64, u64)>,
    index: IndexFile,
}

fn stamp_of(path: &Path) -> Option<(u64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
}

fn read_index_file(path: &Path) -> Result<IndexFile, ImageError> {
    match fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            ImageError::io(
                format!("the image index {} is corrupt", path.display()),
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(IndexFile::default()),
        Err(e) => Err(ImageError::io(format!("cannot read {}", path.display()), e)),
    }
}

/// Takes a `flock` on `path` (created if needed); released on drop.
fn flock(
    path: &Path,
    arg: nix::fcntl::FlockArg,
) -> Result<Option<nix::fcntl::Flock<fs::File>>, ImageError> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ctx(|| format!("cannot open {}", path.display()))?;
    match nix::fcntl::Flock::lock(f, arg) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(ImageError::io(
            format!("cannot lock {}", path.display()),
            e.into(),
        )),
    }
}

/// A pull in progress that others wait for: its leader holds the lock until the result is in.
type Flight = smol::lock::Mutex<Option<Result<ImageInfo, ImageError>>>;

/// Removes a finished (or cancelled) pull from the in-flight map.
struct Unregister<'a> {
    store: &'a ImageStore,
    key: &'a str,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        lock(&self.store.inner.inflight).remove(self.key);
    }
}

struct Inner {
    root: PathBuf,
    /// The index as last read from or written to `index.json`, with the file's identity.
    index: Mutex<Cached>,
    inflight: Mutex<HashMap<String, Arc<Flight>>>,
    /// Blob and layer digests that garbage collection must keep (pulls and imports in
    /// progress), with counts.
    pins: Mutex<HashMap<String, usize>>,
    counter: AtomicU64,
}

/// The image store. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ImageStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ImageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageStore")
            .field("root", &self.inner.root)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// Pins digests against garbage collection while alive.
pub(crate) struct Pins {
    inner: Arc<Inner>,
    digests: Vec<String>,
    /// Shared lock on `gc.lock`: other processes' garbage collection waits for this pull.
    _gc: Option<nix::fcntl::Flock<fs::File>>,
}

impl Pins {
    pub(crate) fn add(&mut self, digest: &str) {
        *lock(&self.inner.pins)
            .entry(digest.to_string())
            .or_default() += 1;
        self.digests.push(digest.to_string());
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mut pins = lock(&self.inner.pins);
        for d in &self.digests {
            if let Some(n) = pins.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    pins.remove(d);
                }
            }
        }
    }
}

impl ImageStore {
    /// Opens (creating if needed) the store at `root`, and empties its `tmp/`.
    pub fn open(root: &Path) -> Result<ImageStore, ImageError> {
        for d in ["blobs/sha256", "layers/sha256", "tmp"] {
            let p = root.join(d);
            fs::create_dir_all(&p).ctx(|| format!("cannot create {}", p.display()))?;
        }
        let tmp = root.join("tmp");
        if let Ok(rd) = fs::read_dir(&tmp) {
            for e in rd.flatten() {
                // Names are `<what>-<pid>-..`: leave other live processes' work alone.
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
                let alive = pid.is_some_and(|p| {
                    p != std::process::id() && Path::new(&format!("/proc/{p}")).exists()
                });
                if !alive {
                    let _ = remove_path(&e.path());
                }
            }
        }
        let index_path = root.join("index.json");
        let cached = Cached {
            stamp: stamp_of(&index_path),
            index: read_index_file(&index_path)?,
        };
        Ok(ImageStore {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                index: Mutex::new(cached),
                inflight: Mutex::new(HashMap::new()),
                pins: Mutex::new(HashMap::new()),
                counter: AtomicU64::new(0),
            }),
        })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    pub(crate) fn blob_path(&self, digest: &str) -> PathBuf {
        self.inner.root.join("blobs/sha256").join(hex_of(digest))
    }

    /// The unpacked directory of a layer (by diff id).
    pub fn layer_path(&self, diff_id: &str) -> PathBuf {
        self.inner.root.join("layers/sha256").join(hex_of(diff_id))
    }

    /// A fresh path under `tmp/`.
    pub(crate) fn temp_path(&self, what: &str) -> PathBuf {
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        self.inner
            .root
            .join("tmp")
            .join(format!("{what}-{}-{n}-{nanos}", std::process::id()))
    }

    pub(crate) fn pins(&self) -> Pins {
        // Blocking only while a collection runs, which is short.
        let gc = flock(
            &self.inner.root.join("gc.lock"),
            nix::fcntl::FlockArg::LockShared,
        )
        .ok()
        .flatten();
        Pins {
            inner: self.inner.clone(),
            digests: Vec::new(),
            _gc: gc,
        }
    }

    /// Writes a verified blob (manifest, config) into `blobs/`.
    pub(crate) fn put_blob(&self, digest: &str, data: &[u8]) -> Result<(), ImageError> {
        let actual = sha256_bytes(data);
        if actual != digest {
            return Err(ImageError::DigestMismatch {
                what: "blob".into(),
                expected: digest.into(),
                actual,
            });
        }
        let path = self.blob_path(digest);
        if path.exists() {
            return Ok(());
        }
        let tmp = self.temp_path("blob");
        fs::write(&tmp, data).ctx(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, &path).ctx(|| format!("cannot write {}", path.display()))
    }

    pub(crate) fn has_layer(&self, diff_id: &str) -> bool {
        self.layer_path(diff_id).is_dir()
    }

    /// Unpacks a layer blob into `layers/` unless that diff id is already there; checks the
    /// diff id. Blocking.
    pub(crate) fn add_layer(
        &self,
        blob: &Path,
        blob_digest: &str,
        diff_id: &str,
    ) -> Result<(), ImageError> {
        if self.has_layer(diff_id) {
            return Ok(());
        }
        let tmp = self.temp_path("layer");
        let result = layer::unpack_layer(blob, &tmp, blob_digest);
        let (actual, _) = match result {
            Ok(r) => r,
            Err(e) => {
                let _ = remove_path(&tmp);
                return Err(e);
            }
        };
        if actual != diff_id {
            let _ = remove_path(&tmp);
            return Err(ImageError::DigestMismatch {
                what: format!("uncompressed layer {blob_digest} (diff id)"),
                expected: diff_id.into(),
                actual,
            });
        }
        let dest = self.layer_path(diff_id);
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = remove_path(&tmp);
            if !dest.is_dir() {
                return Err(ImageError::io(
                    format!("cannot move layer to {}", dest.display()),
                    e,
                ));
            }
        }
        Ok(())
    }

    /// Records an image under its reference (replacing what the name pointed to).
    pub(crate) fn commit(&self, info: &ImageInfo) -> Result<(), ImageError> {
        self.modify_index(|index| {
            index.images.insert(info.reference.clone(), info.clone());
            Ok(())
        })
    }

    /// The current index (reloaded if another process changed it).
    fn current(&self) -> MutexGuard<'_, Cached> {
        let mut cached = lock(&self.inner.index);
        let path = self.inner.root.join("index.json");
        let stamp = stamp_of(&path);
        if stamp != cached.stamp {
            if let Ok(index) = read_index_file(&path) {
                cached.index = index;
                cached.stamp = stamp;
            }
        }
        cached
    }

    /// Changes the index under the cross-process lock, after reloading it.
    fn modify_index<R>(
        &self,
        f: impl FnOnce(&mut IndexFile) -> Result<R, ImageError>,
    ) -> Result<R, ImageError> {
        let mut cached = lock(&self.inner.index);
        let _lock = flock(
            &self.inner.root.join("index.lock"),
            nix::fcntl::FlockArg::LockExclusive,
        )?;
        let path = self.inner.root.join("index.json");
        let mut index = read_index_file(&path)?;
        let r = f(&mut index)?;
        let data = serde_json::to_vec_pretty(&index)
            .map_err(|e| ImageError::io("cannot encode the image index", e.into()))?;
        let tmp = self.temp_path("index");
        fs::write(&tmp, data).ctx(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, &path).ctx(|| format!("cannot write {}", path.display()))?;
        cached.stamp = stamp_of(&path);
        cached.index = index;
        Ok(r)
    }

    /// The local image a reference names, if present with all its layers. Accepts names
    /// (normalised as Docker does), `name@sha256:..`, and bare manifest / config digests or
    /// their unique prefixes of at least 12 hex digits (as `crictl` shows IDs).
    pub fn resolve(&self, reference: &str) -> Option<ImageInfo> {
        let found = Self::lookup(&self.current().index, reference)?;
        found
            .layers
            .iter()
            .all(|l| self.has_layer(l))
            .then_some(found)
    }

    fn lookup(index: &IndexFile, reference: &str) -> Option<ImageInfo> {
        let reference = reference.trim();
        let bare = reference.strip_prefix("sha256:").unwrap_or(reference);
        if bare.len() >= 12 && bare.chars().all(|c| c.is_ascii_hexdigit()) {
            let mut hits = index.images.values().filter(|i| {
                hex_of(&i.id).starts_with(bare)
                    || hex_of(&i.digest).starts_with(bare)
                    || hex_of(&i.manifest_digest).starts_with(bare)
            });
            let first = hits.next()?;
            let same = |i: &ImageInfo| i.id == first.id;
            return hits.all(same).then(|| first.clone());
        }
        let r = Reference::parse(reference).ok()?;
        if let Some(i) = index.images.get(&r.to_string()) {
            return Some(i.clone());
        }
        let digest = r.digest.as_ref()?;
        index
            .images
            .values()
            .find(|i| {
                Reference::parse(&i.reference).is_ok_and(|ir| ir.name() == r.name())
                    && (&i.digest == digest || &i.manifest_digest == digest)
            })
            .cloned()
    }

    /// Every image in the store, by reference.
    pub fn list(&self) -> Vec<ImageInfo> {
        self.current().index.images.values().cloned().collect()
    }

    /// Removes a reference (or every reference of an image given by ID/digest) and frees
    /// the blobs and layers no other image uses. Layers that are lower dirs of a live overlay
    /// mount are kept. Returns the removed entries.
    pub fn remove(&self, reference: &str) -> Result<Vec<ImageInfo>, ImageError> {
        let removed = self.modify_index(|index| {
            let Some(found) = Self::lookup(index, reference) else {
                return Err(ImageError::NotPresent {
                    reference: reference.to_string(),
                });
            };
            let by_id = reference
                .trim()
                .strip_prefix("sha256:")
                .unwrap_or(reference.trim());
            let whole_image = by_id.len() >= 12 && by_id.chars().all(|c| c.is_ascii_hexdigit());
            let keys: Vec<String> = index
                .images
                .iter()
                .filter(|(k, i)| {
                    if whole_image {
                        i.id == found.id
                    } else {
                        **k == found.reference
                    }
                })
                .map(|(k, _)| k.clone())
                .collect();
            Ok(keys
                .iter()
                .filter_map(|k| index.images.remove(k))
                .collect::<Vec<ImageInfo>>())
        })?;
        self.collect_garbage();
        Ok(removed)
    }

    /// Removes every image whose manifest digest, repo digest, ID or reference is not in
    /// `in_use`, then frees unused blobs and layers. Returns the bytes freed.
    pub fn prune(&self, in_use: &HashSet<String>) -> Result<u64, ImageError> {
        // References are compared normalised (`busybox` = `docker.io/library/busybox:latest`).
        let names: HashSet<String> = in_use.iter().map(|r| reference::normalize(r)).collect();
        // An image whose layers all sit under a live root filesystem is in use by a container
        // even if the caller did not name it: keep it, so the container can restart from it.
        let mounted = mount::mounted_lower_dirs();
        let live = |i: &ImageInfo| {
            !i.layers.is_empty()
                && i.layers
                    .iter()
                    .all(|l| mounted.contains(&self.layer_path(l)))
        };
        self.modify_index(|index| {
            index.images.retain(|k, i| {
                live(i)
                    || names.contains(k)
                    || in_use.contains(&i.digest)
                    || in_use.contains(&i.manifest_digest)
                    || in_use.contains(&i.id)
                    || names.contains(&i.repo_digest())
            });
            Ok(())
        })?;
        Ok(self.collect_garbage())
    }

    /// Deletes blobs and layers that no image, pull or import in progress (in any process)
    /// or live overlay mount uses. Returns the bytes freed (0 if another process is pulling:
    /// the next collection frees the space).
    pub fn collect_garbage(&self) -> u64 {
        let Ok(Some(_gc)) = flock(
            &self.inner.root.join("gc.lock"),
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        ) else {
            return 0;
        };
        let cached = self.current();
        let index = &cached.index;
        let pins = lock(&self.inner.pins);
        let mounted = mount::mounted_lower_dirs();
        let mut keep: HashSet<String> = pins.keys().map(|d| hex_of(d).to_string()).collect();
        for i in index.images.values() {
            keep.insert(hex_of(&i.id).to_string());
            keep.insert(hex_of(&i.manifest_digest).to_string());
            keep.insert(hex_of(&i.digest).to_string());
            keep.extend(i.layers.iter().map(|l| hex_of(l).to_string()));
            keep.extend(self.layer_blobs(&i.manifest_digest));
        }
        let mut freed = 0;
        for dir in ["blobs/sha256", "layers/sha256"] {
            let Ok(rd) = fs::read_dir(self.inner.root.join(dir)) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let path = e.path();
                if keep.contains(&name) || mounted.contains(&path) {
                    continue;
                }
                let size = layer::disk_usage(&path);
                if remove_path(&path).is_ok() {
                    freed += size;
                }
            }
        }
        freed
    }

    /// The hex digests of the compressed layers a stored manifest names: kept while the
    /// image is, for the images shared with a site's peers ([`peers`]).
    fn layer_blobs(&self, manifest_digest: &str) -> Vec<String> {
        let Ok(bytes) = fs::read(self.blob_path(manifest_digest)) else {
            return Vec::new();
        };
        serde_json::from_slice::<oci::Manifest>(&bytes)
            .map(|m| {
                m.layers
                    .iter()
                    .map(|l| hex_of(&l.digest).to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Pulls an image from its registry (see [`registry`] for the protocol). Concurrent pulls
    /// of the same reference share one download and one result.
    pub async fn pull(
        &self,
        reference: &str,
        auth: &RegistryAuth,
        opts: &PullOptions,
    ) -> Result<ImageInfo, ImageError> {
        let r = Reference::parse(reference).map_err(|reason| ImageError::InvalidReference {
            reference: reference.to_string(),
            reason,
        })?;
        // Pulls share a download only when they also share credentials: a pod without the
        // right to an image must not get it by joining another pod's pull.
        let key = format!("{r}#{}", auth_fingerprint(auth));
        loop {
            let (flight, leader) = {
                let mut inflight = lock(&self.inner.inflight);
                match inflight.get(&key) {
                    Some(f) => (f.clone(), None),
                    None => {
                        let f: Arc<Flight> = Arc::new(smol::lock::Mutex::new(None));
                        // A new mutex is free: the leader holds it until the result is in.
                        let guard = f.try_lock_arc();
                        if guard.is_some() {
                            inflight.insert(key.clone(), f.clone());
                        }
                        (f, guard)
                    }
                }
            };
            match leader {
                None => {
                    let slot = flight.lock().await;
                    if let Some(r) = slot.as_ref() {
                        return r.clone();
                    }
                    // The leader was cancelled: try again (maybe as the leader).
                    drop(slot);
                    smol::future::yield_now().await;
                }
                Some(mut slot) => {
                    let _unregister = Unregister {
                        store: self,
                        key: &key,
                    };
                    // Boxed: a pull is a large future (debug builds overflow the executor
                    // threads' stacks polling it inline in a pod worker's).
                    let result = Box::pin(registry::pull(self, &r, auth, opts)).await;
                    *slot = Some(result.clone());
                    return result;
                }
            }
        }
    }

    /// Makes sure the image is present according to the pull policy: `Never` only looks
    /// locally (`ErrImageNeverPull` if absent), `IfNotPresent` pulls when absent, `Always`
    /// asks the registry each time (layers already present are not downloaded again).
    pub async fn ensure(
        &self,
        reference: &str,
        policy: PullPolicy,
        auth: &RegistryAuth,
        opts: &PullOptions,
    ) -> Result<ImageInfo, ImageError> {
        if let Err(reason) = Reference::parse(reference) {
            if self.resolve(reference).is_none() {
                return Err(ImageError::InvalidReference {
                    reference: reference.to_string(),
                    reason,
                });
            }
        }
        match policy {
            PullPolicy::Never => self
                .resolve(reference)
                .ok_or_else(|| ImageError::NeverPull {
                    reference: reference.to_string(),
                }),
            PullPolicy::IfNotPresent => match self.resolve(reference) {
                Some(i) => Ok(i),
                None => self.pull(reference, auth, opts).await,
            },
            PullPolicy::Always => self.pull(reference, auth, opts).await,
        }
    }

    /// Imports every image of an OCI image layout tar (`index.json` + `oci-layout`) or a
    /// `docker save` tar (`manifest.json`); the archive and its layers may be gzipped.
    /// Blocking: call it from a thread or `smol::unblock` in async code.
    pub fn import_archive(&self, file: &Path) -> Result<Vec<ImageInfo>, ImageError> {
        archive::import(self, file)
    }

    /// Prepares a container root filesystem: an overlay mount at `target` whose lower dirs
    /// are the image's layers (top first) and whose upper and work dirs are created in
    /// `scratch`. The handle unmounts (lazily if busy) and removes `scratch`.
    pub fn mount_rootfs(
        &self,
        image: &ImageInfo,
        scratch: &Path,
        target: &Path,
    ) -> Result<RootfsMount, ImageError> {
        let lowers: Vec<PathBuf> = image
            .layers
            .iter()
            .rev()
            .map(|l| self.layer_path(l))
            .collect();
        for l in &lowers {
            if !l.is_dir() {
                return Err(ImageError::NotPresent {
                    reference: format!("{} (layer {} is missing)", image.reference, l.display()),
                });
            }
        }
        mount::mount_overlay(&lowers, scratch, target)
    }
}

/// A short digest identifying `auth` (never shown; it only tells pulls apart).
fn auth_fingerprint(auth: &RegistryAuth) -> String {
    let text = match auth {
        RegistryAuth::Anonymous => return "anonymous".into(),
        RegistryAuth::Basic { username, password } => format!("basic\0{username}\0{password}"),
        RegistryAuth::Bearer(t) => format!("bearer\0{t}"),
    };
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn remove_path(p: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Turns an image config document into an [`ImageConfig`] and its diff ids. Public for the
/// fuzz targets (fuzz/).
pub fn parse_config(
    reference: &str,
    data: &[u8],
) -> Result<(ImageConfig, Vec<String>), ImageError> {
    let c: oci::ConfigFile = serde_json::from_slice(data).map_err(|e| ImageError::BadManifest {
        reference: reference.to_string(),
        detail: format!("image config: {e}"),
    })?;
    let cc = c.config.unwrap_or_default();
    let config = ImageConfig {
        entrypoint: cc.entrypoint.unwrap_or_default(),
        cmd: cc.cmd.unwrap_or_default(),
        env: cc.env.unwrap_or_default(),
        working_dir: cc.working_dir.unwrap_or_default(),
        user: cc.user.unwrap_or_default(),
        exposed_ports: cc.exposed_ports.unwrap_or_default().into_keys().collect(),
        labels: cc.labels.unwrap_or_default(),
        stop_signal: cc.stop_signal.unwrap_or_default(),
        os: c.os,
        architecture: c.architecture,
    };
    let diff_ids = c.rootfs.map(|r| r.diff_ids).unwrap_or_default();
    for d in &diff_ids {
        reference::check_digest(d).map_err(|detail| ImageError::BadManifest {
            reference: reference.to_string(),
            detail: format!("image config diff id: {detail}"),
        })?;
    }
    Ok((config, diff_ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pull_policy_follows_kubernetes() {
        assert_eq!(PullPolicy::default_for("busybox"), PullPolicy::Always);
        assert_eq!(
            PullPolicy::default_for("busybox:latest"),
            PullPolicy::Always
        );
        assert_eq!(
            PullPolicy::default_for("busybox:1.36"),
            PullPolicy::IfNotPresent
        );
        let d = format!("busybox@sha256:{}", "0".repeat(64));
        assert_eq!(PullPolicy::default_for(&d), PullPolicy::IfNotPresent);
        assert_eq!(PullPolicy::parse("", "x:1"), Some(PullPolicy::IfNotPresent));
        assert_eq!(PullPolicy::parse("Bogus", "x"), None);
    }

    #[test]
    fn kept_layer_blobs_go_with_their_image() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        let layer = b"a compressed layer";
        let layer_digest = sha256_bytes(layer);
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "config": {"digest": sha256_bytes(b"{}"), "size": 2},
            "layers": [{"digest": layer_digest, "size": layer.len()}],
        }))
        .unwrap();
        let manifest_digest = sha256_bytes(&manifest);
        store.put_blob(&manifest_digest, &manifest).unwrap();
        store.put_blob(&sha256_bytes(b"{}"), b"{}").unwrap();
        store.put_blob(&layer_digest, layer).unwrap();
        let stray = sha256_bytes(b"fetched for a peer only");
        store.put_blob(&stray, b"fetched for a peer only").unwrap();
        store
            .commit(&ImageInfo {
                reference: "example.test/app:v1".into(),
                digest: manifest_digest.clone(),
                manifest_digest,
                id: sha256_bytes(b"{}"),
                config: ImageConfig::default(),
                layers: Vec::new(),
                size: 0,
            })
            .unwrap();
        store.collect_garbage();
        assert!(
            store.blob_path(&layer_digest).is_file(),
            "kept with its image"
        );
        assert!(!store.blob_path(&stray).exists(), "no image names it");
        store.remove("example.test/app:v1").unwrap();
        assert!(
            !store.blob_path(&layer_digest).exists(),
            "gone with its image"
        );
    }

    #[test]
    fn configs_are_parsed() {
        let (c, d) = parse_config(
            "x",
            br#"{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/bin/sh"],"Cmd":null,
               "Env":["A=1"],"WorkingDir":"/w","ExposedPorts":{"80/tcp":{}}},
               "rootfs":{"type":"layers","diff_ids":["sha256:0000000000000000000000000000000000000000000000000000000000000000"]}}"#,
        )
        .unwrap();
        assert_eq!(c.entrypoint, vec!["/bin/sh"]);
        assert!(c.cmd.is_empty());
        assert_eq!(c.exposed_ports, vec!["80/tcp"]);
        assert_eq!(c.working_dir, "/w");
        assert_eq!(d.len(), 1);
        assert!(parse_config("x", b"{\"rootfs\":{\"diff_ids\":[\"md5:1\"]}}").is_err());
    }
}
