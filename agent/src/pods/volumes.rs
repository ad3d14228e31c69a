//! Pod volumes, set up the way the kubelet does: emptyDir, hostPath, configMap, secret and
//! projected (ServiceAccount tokens, ConfigMaps, Secrets and pod fields in one directory),
//! persistentVolumeClaim (the claim's bound hostPath or local volume), and the bind mounts of
//! each container's `volumeMounts` (readOnly, subPath).
//!
//! ```text
//! check_spec(&pod.spec)?                                   // once: unsupported => rejected
//! let sources = fetch(&client, &pod).await;               // ConfigMaps, Secrets, tokens
//! let prepared = set_up(&pod_dir, &pod.spec.volumes, &sources)?;  // idempotent, blocking
//! let mounts = mounts(&prepared, &container)?;             // Vec<MountSpec>, blocking
//! refresh(&pod_dir, &pod.spec.volumes, &sources);          // running pod: new contents
//! tear_down(&pod_dir);                                     // unmount tmpfs volumes
//! ```
//!
//! Layout under the pod directory (`<data-dir>/pods/<uid>`), named like the kubelet's so that
//! a volume can never collide with a container's own directory:
//! `volumes/kubernetes.io~empty-dir/<name>`, `volumes/kubernetes.io~configmap/<name>`,
//! `volumes/kubernetes.io~secret/<name>`, `volumes/kubernetes.io~projected/<name>`. hostPath
//! volumes have no directory of their own.
//! Secret and projected volumes and `medium: Memory` emptyDirs are tmpfs mounts (secrets never reach the
//! SD card); [`tear_down`] unmounts them.
//!
//! ConfigMap, Secret and projected volumes are written with [`write_atomic`]: the files go into a fresh
//! hidden directory `..<timestamp>`, the `..data` symlink is swapped to it with one
//! `rename(2)`, and each top-level entry is a symlink through `..data`. A container that
//! mounts the whole volume therefore sees either the old or the new set of files, never a
//! mix. A container that mounts one file with `subPath` gets the file as it was at start
//! (the bind mount resolves the symlinks), as in Kubernetes.
//!
//! Updates: the pod's worker calls [`fetch`] and [`refresh`] every [`SYNC_EVERY`] while the
//! pod runs, and only for pods that have ConfigMap, Secret or projected volumes. A projected
//! ServiceAccount token comes from [`super::tokens`], which asks the API for a new one only
//! when the one it holds is due for renewal. That is one small GET
//! per referenced object per period: an edge node runs few pods, a GET needs no connection
//! held open (a watch per object would hold one each, a shared watch of every ConfigMap and
//! Secret would send the node objects it has no business seeing), and a write happens only
//! when the contents differ from what is on disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use api::client::Client;
use api::core::{
    ConfigMap, Container, DownwardApiVolumeFile, KeyToPath, Pod, PodSpec, Secret, Volume,
};
use api::storage::{PersistentVolume, PersistentVolumeClaim};

use crate::runtime::{MountKind, MountSpec};

/// How often a running pod's ConfigMap and Secret volumes are compared with the API.
pub const SYNC_EVERY: Duration = Duration::from_secs(5);
/// The subdirectory of the pod directory that holds volumes.
pub const VOLUMES_DIR: &str = "volumes";
/// The symlink to the current data directory of a ConfigMap or Secret volume.
pub const DATA_LINK: &str = "..data";
const DATA_LINK_TMP: &str = "..data_tmp";
/// Secrets are at most 1 MiB; two generations live side by side during an update.
const SECRET_TMPFS_OPTIONS: &str = "size=4m,mode=0755";
const DEFAULT_FILE_MODE: i32 = 0o644;

/// Why a volume or a mount cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The pod asks for something skiff cannot do at all: the pod is rejected.
    #[error("{0}")]
    Invalid(String),
    /// A volume cannot be set up yet (Kubernetes' FailedMount): the pod waits and retries.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {detail}")]
    SetUp { volume: String, detail: String },
    /// A container's mount cannot be made (bad subPath and the like).
    #[error("{0}")]
    Mount(String),
}

fn set_up_err(volume: &str, detail: impl Into<String>) -> VolumeError {
    VolumeError::SetUp {
        volume: volume.to_string(),
        detail: detail.into(),
    }
}

/// What kind of volume a prepared volume is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeKind {
    EmptyDir,
    /// `dir`: whether the host path is a directory (subPaths may be created in it).
    HostPath {
        dir: bool,
    },
    ConfigMap,
    Secret,
    Projected,
    /// A persistent volume through its claim; `read_only` from the pod's claim source.
    Claim {
        read_only: bool,
    },
}

/// A volume ready to be bind-mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedVolume {
    pub name: String,
    /// Where it is on the host.
    pub path: PathBuf,
    pub kind: VolumeKind,
}

/// One file of a ConfigMap or Secret volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileData {
    pub data: Vec<u8>,
    /// Permission bits (`& 0o777`).
    pub mode: u32,
}

/// Relative file path (validated) to contents: what a ConfigMap or Secret volume holds.
pub type Payload = BTreeMap<PathBuf, FileData>;

/// An object as read from the API: `Ok(None)` when it does not exist, `Err` when it could
/// not be read (the server is unreachable, say).
pub type Fetched<T> = Result<Option<T>, String>;

/// The ConfigMaps and Secrets a pod's volumes reference.
#[derive(Debug, Default)]
pub struct Sources {
    pub config_maps: HashMap<String, Fetched<ConfigMap>>,
    pub secrets: HashMap<String, Fetched<Secret>>,
    /// ServiceAccount tokens by audience and lifetime.
    pub tokens: HashMap<(String, i64), Fetched<String>>,
    /// The pod, for the downward API items of projected volumes.
    pub pod: Option<Pod>,
    /// By claim name: where its bound volume is on this node, or why it cannot be used yet.
    pub claims: HashMap<String, Result<ClaimVolume, String>>,
}

/// Where a claim's persistent volume is on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimVolume {
    pub path: PathBuf,
    /// The hostPath type to check ("Directory" for local volumes).
    pub type_: String,
    /// A local-path volume: its directory is made (mode 0777, as k3s' provisioner makes it)
    /// when missing.
    pub provisioned: bool,
}

/// Where `pv` is on the node, if skiff can mount it.
pub fn claim_volume(pv: &PersistentVolume) -> Result<ClaimVolume, String> {
    let provisioned = pv
        .metadata
        .annotations
        .get(api::storage::PROVISIONED_BY_ANNOTATION)
        .is_some_and(|p| p == api::storage::LOCAL_PATH_PROVISIONER);
    if let Some(h) = &pv.spec.host_path {
        return Ok(ClaimVolume {
            path: PathBuf::from(&h.path),
            type_: h.type_.clone().unwrap_or_default(),
            provisioned,
        });
    }
    if let Some(l) = &pv.spec.local {
        return Ok(ClaimVolume {
            path: PathBuf::from(&l.path),
            type_: "Directory".into(),
            provisioned,
        });
    }
    Err(format!(
        "persistent volume {:?}: only hostPath and local volumes are supported by skiff",
        pv.metadata.name
    ))
}

/// The kubelet's check of a claim: it exists and is bound, and its volume exists.
async fn fetch_claim(client: &Client, namespace: &str, name: &str) -> Result<ClaimVolume, String> {
    let claim = match client.get::<PersistentVolumeClaim>(namespace, name).await {
        Ok(c) => c,
        Err(e) => {
            return Err(format!(
                "error processing PVC {namespace}/{name}: failed to fetch PVC from API server: {e}"
            ))
        }
    };
    let volume = claim.spec.volume_name.as_deref().unwrap_or("");
    if volume.is_empty() || claim.status.phase.as_deref() != Some("Bound") {
        return Err(format!(
            "error processing PVC {namespace}/{name}: PVC is not bound"
        ));
    }
    let pv = client
        .get::<PersistentVolume>("", volume)
        .await
        .map_err(|e| format!("error processing PVC {namespace}/{name}: {e}"))?;
    if pv
        .spec
        .claim_ref
        .as_ref()
        .and_then(|r| r.uid.as_deref())
        .is_some_and(|u| u != claim.metadata.uid)
    {
        return Err(format!(
            "error processing PVC {namespace}/{name}: volume {volume} is bound to another claim"
        ));
    }
    claim_volume(&pv)
}

// ---- the pod spec ------------------------------------------------------------------------

/// The ConfigMaps a volume reads (its own, or its projected sources').
fn config_map_names(v: &Volume) -> Vec<&str> {
    let own = v
        .config_map
        .as_ref()
        .map(|c| c.name.as_deref().unwrap_or(""));
    let projected = v.projected.iter().flat_map(|p| &p.sources).filter_map(|s| {
        s.config_map
            .as_ref()
            .map(|c| c.name.as_deref().unwrap_or(""))
    });
    own.into_iter().chain(projected).collect()
}

/// The Secrets a volume reads (its own, or its projected sources').
fn secret_names(v: &Volume) -> Vec<&str> {
    let own = v
        .secret
        .as_ref()
        .map(|s| s.secret_name.as_deref().unwrap_or(""));
    let projected = v
        .projected
        .iter()
        .flat_map(|p| &p.sources)
        .filter_map(|s| s.secret.as_ref().map(|c| c.name.as_deref().unwrap_or("")));
    own.into_iter().chain(projected).collect()
}

/// Whether a volume's contents follow API objects (ConfigMap, Secret, token).
fn is_updatable(v: &Volume) -> bool {
    v.config_map.is_some() || v.secret.is_some() || v.projected.is_some()
}

/// Whether any volume has contents that follow API objects.
pub fn has_updatable(volumes: &[Volume]) -> bool {
    volumes.iter().any(is_updatable)
}

/// How long until the pod's ConfigMap and Secret volumes are due to be compared with the API
/// again (`None` if it has none), given when that was last done.
pub fn next_sync(volumes: &[Volume], last: Option<Instant>) -> Option<Duration> {
    if !has_updatable(volumes) {
        return None;
    }
    Some(last.map_or(Duration::ZERO, |at| SYNC_EVERY.saturating_sub(at.elapsed())))
}

/// Checks a subPath: relative, without `..`; answers it normalised (no `.` or empty parts).
pub fn check_sub_path(sub: &str) -> Result<PathBuf, String> {
    let p = Path::new(sub);
    if p.is_absolute() {
        return Err(format!("subPath {sub:?} must be a relative path"));
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!("subPath {sub:?} must not contain '..'"));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("subPath {sub:?} must be a relative path"));
            }
        }
    }
    Ok(out)
}

/// Checks the path of a ConfigMap/Secret item: relative, no `..` part, not starting with
/// `..` (those names are the volume's own), not empty.
pub fn check_item_path(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if path.is_empty() {
        return Err("an item path must not be empty".into());
    }
    if p.is_absolute() {
        return Err(format!("item path {path:?} must be relative"));
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(format!("item path {path:?} must not contain '..'")),
        }
    }
    match out.components().next() {
        None => Err(format!("item path {path:?} names no file")),
        Some(first) if first.as_os_str().to_string_lossy().starts_with("..") => {
            Err(format!("item path {path:?} must not start with '..'"))
        }
        Some(_) => Ok(out),
    }
}

/// What skiff cannot run in a pod's volumes and mounts (checked before anything is done;
/// the API validates most of it too, but pods also come from the local cache).
pub fn check_spec(spec: &PodSpec) -> Result<(), VolumeError> {
    let invalid = |m: String| Err(VolumeError::Invalid(m));
    let mut names = BTreeSet::new();
    for v in &spec.volumes {
        if !names.insert(v.name.as_str()) {
            return invalid(format!("volume {:?} is defined twice", v.name));
        }
        let sources = v.source_names();
        match sources.as_slice() {
            ["hostPath"]
            | ["emptyDir"]
            | ["configMap"]
            | ["secret"]
            | ["projected"]
            | ["persistentVolumeClaim"] => {}
            [one] => {
                return invalid(format!(
                    "volume {:?}: {one} volumes are not supported by skiff",
                    v.name
                ))
            }
            _ => return invalid(format!("volume {:?} must have exactly one source", v.name)),
        }
        if let Some(e) = &v.empty_dir {
            match e.medium.as_deref().unwrap_or("") {
                "" | "Memory" => {}
                m => {
                    return invalid(format!(
                        "volume {:?}: emptyDir medium {m:?} is not supported by skiff",
                        v.name
                    ))
                }
            }
            if let Some(q) = &e.size_limit {
                if q.value().is_err() {
                    return invalid(format!("volume {:?}: bad sizeLimit {q}", v.name));
                }
            }
        }
        if let Some(h) = &v.host_path {
            if !Path::new(&h.path).is_absolute() {
                return invalid(format!(
                    "volume {:?}: hostPath {:?} must be absolute",
                    v.name, h.path
                ));
            }
        }
        let items = v
            .config_map
            .as_ref()
            .map(|c| &c.items)
            .or(v.secret.as_ref().map(|s| &s.items));
        for item in items.into_iter().flatten() {
            check_item_path(&item.path)
                .map_err(|e| VolumeError::Invalid(format!("volume {:?}: {e}", v.name)))?;
        }
        if let Some(p) = &v.projected {
            check_projected(p)
                .map_err(|e| VolumeError::Invalid(format!("volume {:?}: {e}", v.name)))?;
        }
    }
    for c in spec.init_containers.iter().chain(&spec.containers) {
        for m in &c.volume_mounts {
            let at = format!("container {:?}, volumeMount {:?}", c.name, m.mount_path);
            if !names.contains(m.name.as_str()) {
                return invalid(format!("{at}: no volume named {:?} in the pod", m.name));
            }
            if !Path::new(&m.mount_path).is_absolute() {
                return invalid(format!("{at}: mountPath must be absolute"));
            }
            if let Some(sp) = &m.sub_path {
                check_sub_path(sp).map_err(|e| VolumeError::Invalid(format!("{at}: {e}")))?;
            }
            if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                return invalid(format!("{at}: subPathExpr is not supported by skiff"));
            }
            match m.mount_propagation.as_deref().unwrap_or("None") {
                "None" => {}
                p => {
                    return invalid(format!(
                        "{at}: mountPropagation {p} is not supported by skiff"
                    ))
                }
            }
        }
    }
    Ok(())
}

/// The sources of a projected volume: one kind each, paths that stay inside it.
fn check_projected(p: &api::core::ProjectedVolumeSource) -> Result<(), String> {
    for s in &p.sources {
        let set = [
            s.secret.is_some(),
            s.config_map.is_some(),
            s.downward_api.is_some(),
            s.service_account_token.is_some(),
            s.cluster_trust_bundle.is_some(),
        ];
        if set.iter().filter(|b| **b).count() != 1 {
            return Err("each projected source must have exactly one kind".into());
        }
        if s.cluster_trust_bundle.is_some() {
            return Err("clusterTrustBundle projections are not supported by skiff".into());
        }
        let mut paths: Vec<&str> = Vec::new();
        if let Some(c) = &s.config_map {
            paths.extend(c.items.iter().map(|i| i.path.as_str()));
        }
        if let Some(c) = &s.secret {
            paths.extend(c.items.iter().map(|i| i.path.as_str()));
        }
        if let Some(d) = &s.downward_api {
            paths.extend(d.items.iter().map(|i| i.path.as_str()));
        }
        if let Some(t) = &s.service_account_token {
            paths.push(&t.path);
            if t.expiration_seconds.is_some_and(|e| e < 600) {
                return Err("a serviceAccountToken must live at least 600 seconds".into());
            }
        }
        for path in paths {
            check_item_path(path)?;
        }
    }
    Ok(())
}

// ---- fetching ----------------------------------------------------------------------------

/// Reads the ConfigMaps and Secrets the pod's volumes reference (each once) and the
/// ServiceAccount tokens its projected volumes hold. Never fails as a whole: what could not
/// be read is recorded per object.
pub async fn fetch(client: &Client, pod: &Pod) -> Sources {
    let namespace = pod.metadata.namespace();
    let mut out = Sources {
        pod: Some(pod.clone()),
        ..Default::default()
    };
    for v in &pod.spec.volumes {
        for t in v
            .projected
            .iter()
            .flat_map(|p| &p.sources)
            .filter_map(|s| s.service_account_token.as_ref())
        {
            let key = (
                t.audience.clone().unwrap_or_default(),
                t.expiration_seconds.unwrap_or(3600),
            );
            if let std::collections::hash_map::Entry::Vacant(slot) = out.tokens.entry(key) {
                let (audience, seconds) = slot.key().clone();
                let got = super::tokens::get(client, pod, &audience, seconds)
                    .await
                    .map(Some);
                slot.insert(got);
            }
        }
        for name in config_map_names(v) {
            if !out.config_maps.contains_key(name) {
                let got = match client.get::<ConfigMap>(namespace, name).await {
                    Ok(cm) => Ok(Some(cm)),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(format!("cannot read configmap {name:?}: {e}")),
                };
                out.config_maps.insert(name.to_string(), got);
            }
        }
        if let Some(c) = &v.persistent_volume_claim {
            if !out.claims.contains_key(&c.claim_name) {
                let got = fetch_claim(client, namespace, &c.claim_name).await;
                out.claims.insert(c.claim_name.clone(), got);
            }
        }
        for name in secret_names(v) {
            if !out.secrets.contains_key(name) {
                let got = match client.get::<Secret>(namespace, name).await {
                    Ok(s) => Ok(Some(s)),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(format!("cannot read secret {name:?}: {e}")),
                };
                out.secrets.insert(name.to_string(), got);
            }
        }
    }
    out
}

// ---- payloads ----------------------------------------------------------------------------

/// The files of a ConfigMap or Secret volume. `entries` is None when the object does not
/// exist; `kind` is "configmap" or "secret" (for messages, as Kubernetes words them).
pub fn payload(
    kind: &str,
    name: &str,
    entries: Option<&BTreeMap<String, Vec<u8>>>,
    items: &[KeyToPath],
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, String> {
    let Some(entries) = entries else {
        return if optional {
            Ok(Payload::new())
        } else {
            Err(format!("{kind} {name:?} not found"))
        };
    };
    let mode = |m: Option<i32>| (m.or(default_mode).unwrap_or(DEFAULT_FILE_MODE) as u32) & 0o777;
    let mut out = Payload::new();
    if items.is_empty() {
        for (k, v) in entries {
            let path = check_item_path(k)?;
            out.insert(
                path,
                FileData {
                    data: v.clone(),
                    mode: mode(None),
                },
            );
        }
        return Ok(out);
    }
    for item in items {
        let Some(v) = entries.get(&item.key) else {
            if optional {
                continue;
            }
            return Err(match kind {
                "secret" => format!("references non-existent secret key: {}", item.key),
                _ => format!("{kind} references non-existent config key: {}", item.key),
            });
        };
        out.insert(
            check_item_path(&item.path)?,
            FileData {
                data: v.clone(),
                mode: mode(item.mode),
            },
        );
    }
    Ok(out)
}

fn config_map_entries(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
        .collect();
    for (k, v) in &cm.binary_data {
        out.insert(k.clone(), v.0.clone());
    }
    out
}

fn secret_entries(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    // Only a Secret that skipped defaulting still has stringData; it wins, as on the API.
    for (k, v) in &s.string_data {
        out.insert(k.clone(), v.as_bytes().to_vec());
    }
    out
}

/// The payload of a ConfigMap or Secret volume from what was fetched; `Ok(None)` when the
/// object could not be read and the volume is to keep what it has.
fn volume_payload(v: &Volume, sources: &Sources) -> Result<Option<Payload>, String> {
    if let Some(c) = &v.config_map {
        let name = c.name.as_deref().unwrap_or("");
        let entries = match sources.config_maps.get(name) {
            Some(Ok(Some(cm))) => Some(config_map_entries(cm)),
            Some(Ok(None)) => None,
            Some(Err(e)) => return Err(e.clone()),
            None => return Ok(None),
        };
        let optional = c.optional == Some(true);
        return payload(
            "configmap",
            name,
            entries.as_ref(),
            &c.items,
            c.default_mode,
            optional,
        )
        .map(Some);
    }
    if let Some(s) = &v.secret {
        let name = s.secret_name.as_deref().unwrap_or("");
        let entries = match sources.secrets.get(name) {
            Some(Ok(Some(sec))) => Some(secret_entries(sec)),
            Some(Ok(None)) => None,
            Some(Err(e)) => return Err(e.clone()),
            None => return Ok(None),
        };
        let optional = s.optional == Some(true);
        return payload(
            "secret",
            name,
            entries.as_ref(),
            &s.items,
            s.default_mode,
            optional,
        )
        .map(Some);
    }
    if let Some(p) = &v.projected {
        return projected_payload(p, sources, false);
    }
    Ok(None)
}

/// The files of a projected volume: every source's, in order. `partial` leaves out the
/// sources that could not be read (the API is unreachable) instead of failing.
fn projected_payload(
    p: &api::core::ProjectedVolumeSource,
    sources: &Sources,
    partial: bool,
) -> Result<Option<Payload>, String> {
    let mut out = Payload::new();
    for src in &p.sources {
        if partial && source_unreadable(src, sources) {
            continue;
        }
        let part = if let Some(c) = &src.config_map {
            let name = c.name.as_deref().unwrap_or("");
            let entries = match sources.config_maps.get(name) {
                Some(Ok(Some(cm))) => Some(config_map_entries(cm)),
                Some(Ok(None)) => None,
                Some(Err(e)) => return Err(e.clone()),
                None => return Ok(None),
            };
            let optional = c.optional == Some(true);
            payload(
                "configmap",
                name,
                entries.as_ref(),
                &c.items,
                p.default_mode,
                optional,
            )?
        } else if let Some(s) = &src.secret {
            let name = s.name.as_deref().unwrap_or("");
            let entries = match sources.secrets.get(name) {
                Some(Ok(Some(sec))) => Some(secret_entries(sec)),
                Some(Ok(None)) => None,
                Some(Err(e)) => return Err(e.clone()),
                None => return Ok(None),
            };
            let optional = s.optional == Some(true);
            payload(
                "secret",
                name,
                entries.as_ref(),
                &s.items,
                p.default_mode,
                optional,
            )?
        } else if let Some(d) = &src.downward_api {
            let Some(pod) = &sources.pod else {
                return Ok(None);
            };
            downward_payload(pod, &d.items, p.default_mode)?
        } else if let Some(t) = &src.service_account_token {
            let key = (
                t.audience.clone().unwrap_or_default(),
                t.expiration_seconds.unwrap_or(3600),
            );
            let token = match sources.tokens.get(&key) {
                Some(Ok(Some(token))) => token.clone(),
                Some(Ok(None)) | None => return Ok(None),
                Some(Err(e)) => return Err(e.clone()),
            };
            let mode = (p.default_mode.unwrap_or(DEFAULT_FILE_MODE) as u32) & 0o777;
            Payload::from([(
                check_item_path(&t.path)?,
                FileData {
                    data: token.into_bytes(),
                    mode,
                },
            )])
        } else {
            Payload::new()
        };
        out.extend(part);
    }
    Ok(Some(out))
}

/// Whether a projected source's object or token could not be read (as opposed to not
/// existing).
fn source_unreadable(src: &api::core::VolumeProjection, sources: &Sources) -> bool {
    if let Some(c) = &src.config_map {
        return matches!(
            sources.config_maps.get(c.name.as_deref().unwrap_or("")),
            Some(Err(_))
        );
    }
    if let Some(s) = &src.secret {
        return matches!(
            sources.secrets.get(s.name.as_deref().unwrap_or("")),
            Some(Err(_))
        );
    }
    if let Some(t) = &src.service_account_token {
        let key = (
            t.audience.clone().unwrap_or_default(),
            t.expiration_seconds.unwrap_or(3600),
        );
        return matches!(sources.tokens.get(&key), Some(Err(_)));
    }
    false
}

/// The files of downward API items: pod fields and container resources.
fn downward_payload(
    pod: &Pod,
    items: &[DownwardApiVolumeFile],
    default_mode: Option<i32>,
) -> Result<Payload, String> {
    // A whole map, as the kubelet writes it: `key="value"` lines in key order.
    let map = |m: &BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = Payload::new();
    for item in items {
        let m = &pod.metadata;
        let value = if let Some(f) = &item.field_ref {
            let path = f.field_path.as_str();
            let one = |prefix: &str, from: &BTreeMap<String, String>| {
                path.strip_prefix(prefix)
                    .and_then(|r| r.strip_suffix("']"))
                    .map(|k| from.get(k).cloned().unwrap_or_default())
            };
            match path {
                "metadata.name" => m.name.clone(),
                "metadata.namespace" => m.namespace().to_string(),
                "metadata.uid" => m.uid.clone(),
                "metadata.labels" => map(&m.labels),
                "metadata.annotations" => map(&m.annotations),
                _ => one("metadata.labels['", &m.labels)
                    .or_else(|| one("metadata.annotations['", &m.annotations))
                    .ok_or_else(|| format!("unsupported fieldRef {path:?} in a volume"))?,
            }
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.as_deref().unwrap_or("");
            let c = pod
                .spec
                .containers
                .iter()
                .chain(&pod.spec.init_containers)
                .find(|c| c.name == name)
                .ok_or_else(|| format!("no container {name:?} for resourceFieldRef"))?;
            super::container::resource_value(c, &r.resource)
                .ok_or_else(|| format!("unsupported resourceFieldRef {:?}", r.resource))?
        } else {
            continue;
        };
        let mode = (item.mode.or(default_mode).unwrap_or(DEFAULT_FILE_MODE) as u32) & 0o777;
        out.insert(
            check_item_path(&item.path)?,
            FileData {
                data: value.into_bytes(),
                mode,
            },
        );
    }
    Ok(out)
}

// ---- the atomic writer -------------------------------------------------------------------

fn set_mode(p: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
}

fn read_tree(root: &Path, rel: &Path, out: &mut Payload) -> io::Result<()> {
    for e in fs::read_dir(root.join(rel))? {
        let e = e?;
        let r = rel.join(e.file_name());
        let t = e.file_type()?;
        if t.is_dir() {
            read_tree(root, &r, out)?;
        } else if t.is_file() {
            let md = e.metadata()?;
            out.insert(
                r.clone(),
                FileData {
                    data: fs::read(root.join(&r))?,
                    mode: md.permissions().mode() & 0o777,
                },
            );
        }
    }
    Ok(())
}

/// What the volume holds now (through `..data`), or None if it was never written.
pub fn read_current(dir: &Path) -> Option<Payload> {
    let target = fs::read_link(dir.join(DATA_LINK)).ok()?;
    let mut out = Payload::new();
    read_tree(&dir.join(target), Path::new(""), &mut out).ok()?;
    Some(out)
}

/// A fresh `..<timestamp>` directory in `dir`; answers its name.
fn new_data_dir(dir: &Path) -> io::Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    for n in 0..1000u32 {
        let name = format!("..{}_{:09}.{n}", now.as_secs(), now.subsec_nanos());
        match fs::create_dir(dir.join(&name)) {
            Ok(()) => return Ok(name),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("cannot name a new data directory"))
}

fn top_level(p: &Path) -> Option<String> {
    p.components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
}

/// Writes `payload` into the ConfigMap/Secret volume directory `dir` atomically (see the
/// module documentation); answers whether anything changed. Leaves `dir` alone when it
/// already holds exactly this payload.
pub fn write_atomic(dir: &Path, payload: &Payload) -> io::Result<bool> {
    for p in payload.keys() {
        let s = p.to_string_lossy();
        check_item_path(&s).map_err(io::Error::other)?;
    }
    if read_current(dir).as_ref() == Some(payload) {
        return Ok(false);
    }
    let name = new_data_dir(dir)?;
    let data_dir = dir.join(&name);
    let written = (|| -> io::Result<()> {
        set_mode(&data_dir, 0o755)?;
        for (rel, file) in payload {
            let path = data_dir.join(rel);
            if let Some(parent) = path.parent() {
                if parent != data_dir {
                    fs::create_dir_all(parent)?;
                    let mut p = parent;
                    while p != data_dir {
                        set_mode(p, 0o755)?;
                        p = match p.parent() {
                            Some(up) => up,
                            None => break,
                        };
                    }
                }
            }
            fs::write(&path, &file.data)?;
            set_mode(&path, file.mode)?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&data_dir);
        return Err(e);
    }
    // The swap: a new symlink renamed over `..data` in one step.
    let tmp = dir.join(DATA_LINK_TMP);
    let _ = fs::remove_file(&tmp);
    symlink(&name, &tmp)?;
    fs::rename(&tmp, dir.join(DATA_LINK))?;
    // User-visible names: a symlink through `..data` for each top-level entry.
    let wanted: BTreeSet<String> = payload.keys().filter_map(|p| top_level(p)).collect();
    for n in &wanted {
        let link = dir.join(n);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_LINK).join(n), &link)?;
        }
    }
    for e in fs::read_dir(dir)?.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let is_link = e.file_type().is_ok_and(|t| t.is_symlink());
        if n.starts_with("..") {
            // Old data directories (normally just the previous one).
            if !is_link && n != name {
                let _ = fs::remove_dir_all(e.path());
            }
        } else if is_link && !wanted.contains(&n) {
            fs::remove_file(e.path())?;
        }
    }
    Ok(true)
}

// ---- setting up --------------------------------------------------------------------------

fn plugin_dir(v: &Volume) -> Option<&'static str> {
    if v.empty_dir.is_some() {
        Some("kubernetes.io~empty-dir")
    } else if v.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if v.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if v.projected.is_some() {
        Some("kubernetes.io~projected")
    } else {
        None
    }
}

/// Where a volume's directory is under the pod directory (None for hostPath volumes).
pub fn volume_dir(pod_dir: &Path, v: &Volume) -> Option<PathBuf> {
    plugin_dir(v).map(|p| pod_dir.join(VOLUMES_DIR).join(p).join(&v.name))
}

/// Whether `dir` is itself a mount point (from /proc/self/mountinfo).
fn is_mount_point(dir: &Path) -> bool {
    let Ok(canon) = fs::canonicalize(dir) else {
        return false;
    };
    crate::sys::mounts_under(Path::new("/proc"), &canon)
        .map(|m| m.contains(&canon))
        .unwrap_or(false)
}

fn mount_tmpfs(dir: &Path, options: &str) -> Result<(), String> {
    use nix::mount::{mount, MsFlags};
    if is_mount_point(dir) {
        return Ok(());
    }
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options),
    )
    .map_err(|e| format!("cannot mount a tmpfs on {}: {e}", dir.display()))
}

fn create_dir(dir: &Path, mode: u32) -> Result<(), String> {
    fs::create_dir_all(dir)
        .and_then(|()| set_mode(dir, mode))
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// Checks (and for the *OrCreate types makes) a hostPath; answers whether it is a directory.
pub fn check_host_path(path: &Path, type_: &str) -> Result<bool, String> {
    let shown = path.display();
    let failed = |what: &str| format!("hostPath type check failed: {shown} {what}");
    let md = fs::metadata(path);
    match type_ {
        "" => match md {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Docker's old behaviour, which `type: ""` stands for: make a directory.
                create_dir(path, 0o755)?;
                Ok(true)
            }
            Err(e) => Err(format!("cannot stat {shown}: {e}")),
        },
        "DirectoryOrCreate" => match md {
            Ok(m) if m.is_dir() => Ok(true),
            Ok(_) => Err(failed("is not a directory")),
            Err(_) => {
                create_dir(path, 0o755)?;
                Ok(true)
            }
        },
        "Directory" => match md {
            Ok(m) if m.is_dir() => Ok(true),
            Ok(_) => Err(failed("is not a directory")),
            Err(_) => Err(failed("does not exist (type Directory)")),
        },
        "FileOrCreate" => match md {
            Ok(m) if m.is_file() => Ok(false),
            Ok(_) => Err(failed("is not a file")),
            Err(_) => {
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .and_then(|_| set_mode(path, 0o644))
                    .map_err(|e| format!("cannot create {shown}: {e}"))?;
                Ok(false)
            }
        },
        "File" => match md {
            Ok(m) if m.is_file() => Ok(false),
            Ok(_) => Err(failed("is not a file")),
            Err(_) => Err(failed("does not exist (type File)")),
        },
        "Socket" | "CharDevice" | "BlockDevice" => {
            let Ok(m) = md else {
                return Err(failed(&format!("does not exist (type {type_})")));
            };
            let t = m.file_type();
            let ok = match type_ {
                "Socket" => t.is_socket(),
                "CharDevice" => t.is_char_device(),
                _ => t.is_block_device(),
            };
            if ok {
                Ok(false)
            } else {
                Err(failed(match type_ {
                    "Socket" => "is not a socket file",
                    "CharDevice" => "is not a character device",
                    _ => "is not a block device",
                }))
            }
        }
        other => Err(format!("unknown hostPath type {other:?}")),
    }
}

fn set_up_one(pod_dir: &Path, v: &Volume, sources: &Sources) -> Result<PreparedVolume, String> {
    let dir = volume_dir(pod_dir, v);
    if let Some(h) = &v.host_path {
        let path = PathBuf::from(&h.path);
        let dir = check_host_path(&path, h.type_.as_deref().unwrap_or(""))?;
        return Ok(PreparedVolume {
            name: v.name.clone(),
            path,
            kind: VolumeKind::HostPath { dir },
        });
    }
    if let Some(c) = &v.persistent_volume_claim {
        let cv = match sources.claims.get(&c.claim_name) {
            Some(Ok(cv)) => cv,
            Some(Err(e)) => return Err(e.clone()),
            None => return Err(format!("claim {:?} was not looked up", c.claim_name)),
        };
        if cv.provisioned && fs::metadata(&cv.path).is_err() {
            create_dir(&cv.path, 0o777)?;
        }
        check_host_path(&cv.path, &cv.type_)?;
        return Ok(PreparedVolume {
            name: v.name.clone(),
            path: cv.path.clone(),
            kind: VolumeKind::Claim {
                read_only: c.read_only == Some(true),
            },
        });
    }
    let Some(dir) = dir else {
        return Err("volume type not supported by skiff".into());
    };
    if let Some(e) = &v.empty_dir {
        // Anyone in the pod may write (as the kubelet makes them).
        create_dir(&dir, 0o777)?;
        if e.medium.as_deref() == Some("Memory") {
            let mut opts = String::from("mode=0777");
            if let Some(q) = &e.size_limit {
                let bytes = q.value().map_err(|e| format!("bad sizeLimit {q}: {e}"))?;
                opts.push_str(&format!(",size={}", bytes.max(4096)));
            }
            mount_tmpfs(&dir, &opts)?;
        }
        return Ok(PreparedVolume {
            name: v.name.clone(),
            path: dir,
            kind: VolumeKind::EmptyDir,
        });
    }
    let kind = if v.secret.is_some() {
        VolumeKind::Secret
    } else if v.projected.is_some() {
        VolumeKind::Projected
    } else {
        VolumeKind::ConfigMap
    };
    create_dir(&dir, 0o755)?;
    // A projected volume may hold a token or a Secret's keys: kept off the disk too.
    if matches!(kind, VolumeKind::Secret | VolumeKind::Projected) {
        mount_tmpfs(&dir, SECRET_TMPFS_OPTIONS)?;
    }
    match volume_payload(v, sources) {
        Ok(Some(p)) => {
            write_atomic(&dir, &p).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
        }
        // Unknown to `sources`: not fetched, keep what is there.
        Ok(None) => {}
        // Not readable (or gone) now: what was written before will do, as in Kubernetes.
        Err(e) if read_current(&dir).is_some() => {
            tracing::warn!(volume = %v.name, "{e}; keeping the current contents");
        }
        // A pod restarted while the API is unreachable (a node rebooted offline) still
        // starts: its projected volume holds what could be had (the pod's fields), and
        // the token and CA follow once the API answers ([`refresh`]).
        Err(e) if kind == VolumeKind::Projected => {
            let Some(p) = &v.projected else {
                return Err(e);
            };
            match projected_payload(p, sources, true) {
                Ok(Some(partial)) => {
                    tracing::warn!(volume = %v.name, "{e}; starting without the sources that cannot be read");
                    write_atomic(&dir, &partial)
                        .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
                }
                _ => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    if read_current(&dir).is_none() {
        return Err("the volume's contents are not known yet".into());
    }
    Ok(PreparedVolume {
        name: v.name.clone(),
        path: dir,
        kind,
    })
}

/// Prepares every volume of the pod under `pod_dir` (idempotent: a volume already set up is
/// left alone, a ConfigMap/Secret volume is rewritten only if its contents changed).
/// Blocking.
pub fn set_up(
    pod_dir: &Path,
    volumes: &[Volume],
    sources: &Sources,
) -> Result<Vec<PreparedVolume>, VolumeError> {
    volumes
        .iter()
        .map(|v| set_up_one(pod_dir, v, sources).map_err(|d| set_up_err(&v.name, d)))
        .collect()
}

/// What [`refresh`] did.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// Volumes whose files were rewritten.
    pub updated: Vec<String>,
    /// Volumes that could not be refreshed (they keep their contents).
    pub errors: Vec<VolumeError>,
}

/// Brings the ConfigMap and Secret volumes already set up under `pod_dir` up to date with
/// `sources`. A volume whose object is gone or unreadable keeps its files (as in
/// Kubernetes), unless it is optional. Blocking.
pub fn refresh(pod_dir: &Path, volumes: &[Volume], sources: &Sources) -> Refreshed {
    let mut out = Refreshed::default();
    for v in volumes.iter().filter(|v| is_updatable(v)) {
        let Some(dir) = volume_dir(pod_dir, v) else {
            continue;
        };
        if read_current(&dir).is_none() {
            continue;
        }
        match volume_payload(v, sources) {
            Ok(Some(p)) => match write_atomic(&dir, &p) {
                Ok(true) => out.updated.push(v.name.clone()),
                Ok(false) => {}
                Err(e) => out.errors.push(set_up_err(
                    &v.name,
                    format!("cannot write {}: {e}", dir.display()),
                )),
            },
            Ok(None) => {}
            Err(e) => out.errors.push(set_up_err(&v.name, e)),
        }
    }
    out
}

// ---- container mounts --------------------------------------------------------------------

/// Resolves `sub` inside the volume at `base`, never leaving it (symlinks are followed and
/// checked); creates missing directories when `create` says so (0o777 for emptyDir, as its
/// root). Answers the real path to bind.
fn resolve_sub_path(base: &Path, sub: &Path, create: Option<u32>) -> Result<PathBuf, String> {
    let root = fs::canonicalize(base).map_err(|e| format!("{}: {e}", base.display()))?;
    let outside = || format!("subPath {:?} leads outside its volume", sub.display());
    let mut cur = root.clone();
    for c in sub.components() {
        let next = cur.join(c);
        match fs::symlink_metadata(&next) {
            Ok(_) => {
                let real =
                    fs::canonicalize(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                if !real.starts_with(&root) {
                    return Err(outside());
                }
                cur = real;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(mode) = create else {
                    return Err(format!(
                        "subPath {:?} does not exist in the volume",
                        sub.display()
                    ));
                };
                match fs::create_dir(&next) {
                    Ok(()) => set_mode(&next, mode)
                        .map_err(|e| format!("cannot create {}: {e}", next.display()))?,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("cannot create {}: {e}", next.display())),
                }
                let real =
                    fs::canonicalize(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                if !real.starts_with(&root) {
                    return Err(outside());
                }
                cur = real;
            }
            Err(e) => return Err(format!("{}: {e}", next.display())),
        }
    }
    Ok(cur)
}

/// The bind mounts of a container's volumeMounts, parents before children. ConfigMap and
/// Secret volumes are always read-only, as in Kubernetes. Blocking (subPath directories
/// may be created).
pub fn mounts(
    prepared: &[PreparedVolume],
    container: &Container,
) -> Result<Vec<MountSpec>, VolumeError> {
    let mut out = Vec::new();
    for m in &container.volume_mounts {
        let at = format!(
            "volumeMount {:?} of container {:?}",
            m.mount_path, container.name
        );
        let Some(v) = prepared.iter().find(|v| v.name == m.name) else {
            return Err(VolumeError::Invalid(format!(
                "{at}: no volume named {:?} in the pod",
                m.name
            )));
        };
        let readonly = m.read_only == Some(true)
            || matches!(
                v.kind,
                VolumeKind::ConfigMap
                    | VolumeKind::Secret
                    | VolumeKind::Projected
                    | VolumeKind::Claim { read_only: true }
            );
        let sub = m.sub_path.as_deref().unwrap_or("");
        let source = if sub.is_empty() {
            v.path.clone()
        } else {
            let rel = check_sub_path(sub).map_err(|e| VolumeError::Mount(format!("{at}: {e}")))?;
            let create = match v.kind {
                VolumeKind::EmptyDir => Some(0o777),
                VolumeKind::HostPath { dir: true } | VolumeKind::Claim { .. } => Some(0o755),
                _ => None,
            };
            resolve_sub_path(&v.path, &rel, create)
                .map_err(|e| VolumeError::Mount(format!("{at}: volume {:?}: {e}", v.name)))?
        };
        out.push(MountSpec {
            source,
            destination: PathBuf::from(&m.mount_path),
            readonly,
            kind: MountKind::Bind,
        });
    }
    out.sort_by_key(|m| m.destination.components().count());
    Ok(out)
}

// ---- teardown ----------------------------------------------------------------------------

/// Unmounts every mount under `<pod_dir>/volumes` (tmpfs volumes), deepest first; answers
/// whether nothing is left mounted there (only then may the directory be removed).
pub fn tear_down(pod_dir: &Path) -> bool {
    let dir = pod_dir.join(VOLUMES_DIR);
    let Ok(canon) = fs::canonicalize(&dir) else {
        return true;
    };
    let proc_root = Path::new("/proc");
    let Ok(mut mounted) = crate::sys::mounts_under(proc_root, &canon) else {
        return false;
    };
    mounted.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    mounted.dedup();
    for m in &mounted {
        if let Err(e) = crate::sys::unmount_detach(m) {
            tracing::warn!("cannot unmount {}: {e}", m.display());
        }
    }
    crate::sys::mounts_under(proc_root, &canon).is_ok_and(|m| m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{ConfigMapVolumeSource, EmptyDirVolumeSource, VolumeMount};

    fn key(k: &str, p: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: k.into(),
            path: p.into(),
            mode,
        }
    }

    fn entries(kv: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    fn file(data: &str, mode: u32) -> FileData {
        FileData {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    #[test]
    fn sub_paths() {
        assert_eq!(check_sub_path("a/./b//c").unwrap(), PathBuf::from("a/b/c"));
        assert_eq!(
            check_sub_path("file.conf").unwrap(),
            PathBuf::from("file.conf")
        );
        let e = check_sub_path("/etc/passwd").unwrap_err();
        assert!(e.contains("relative"), "{e}");
        let e = check_sub_path("a/../../b").unwrap_err();
        assert!(e.contains("'..'"), "{e}");
        assert!(check_sub_path("..").is_err());
        // A name that merely starts with dots is fine.
        assert!(check_sub_path("..foo/x").is_ok());
    }

    #[test]
    fn item_paths() {
        assert!(check_item_path("a/b").is_ok());
        assert!(check_item_path("").is_err());
        assert!(check_item_path("/abs").is_err());
        assert!(check_item_path("a/../b").is_err());
        assert!(check_item_path("..data").is_err());
        assert!(check_item_path("..2020").is_err());
    }

    #[test]
    fn payload_maps_keys_items_and_modes() {
        let e = entries(&[("a", "1"), ("b", "2")]);
        // All keys, defaultMode.
        let p = payload("configmap", "cm", Some(&e), &[], Some(0o400), false).unwrap();
        assert_eq!(p[Path::new("a")], file("1", 0o400));
        assert_eq!(p[Path::new("b")], file("2", 0o400));
        // No defaultMode: 0644; modes are masked to permission bits.
        let p = payload("configmap", "cm", Some(&e), &[], None, false).unwrap();
        assert_eq!(p[Path::new("a")].mode, 0o644);
        let p = payload("configmap", "cm", Some(&e), &[], Some(0o4755), false).unwrap();
        assert_eq!(p[Path::new("a")].mode, 0o755);
        // Items: only those keys, at their paths, with their modes.
        let items = [key("b", "sub/dir/b.txt", Some(0o600)), key("a", "x", None)];
        let p = payload("configmap", "cm", Some(&e), &items, Some(0o440), false).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[Path::new("sub/dir/b.txt")], file("2", 0o600));
        assert_eq!(p[Path::new("x")], file("1", 0o440));
        // A missing key: an error, unless optional.
        let items = [key("zzz", "z", None)];
        let err = payload("configmap", "cm", Some(&e), &items, None, false).unwrap_err();
        assert_eq!(err, "configmap references non-existent config key: zzz");
        let err = payload("secret", "s", Some(&e), &items, None, false).unwrap_err();
        assert_eq!(err, "references non-existent secret key: zzz");
        assert!(payload("configmap", "cm", Some(&e), &items, None, true)
            .unwrap()
            .is_empty());
        // A missing object.
        let err = payload("configmap", "cm", None, &[], None, false).unwrap_err();
        assert_eq!(err, "configmap \"cm\" not found");
        assert!(payload("secret", "s", None, &[], None, true)
            .unwrap()
            .is_empty());
        // A bad item path.
        let items = [key("a", "../evil", None)];
        assert!(payload("configmap", "cm", Some(&e), &items, None, false).is_err());
    }

    fn names(dir: &Path) -> BTreeSet<String> {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn atomic_writer_swaps_and_cleans_up() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut p1 = Payload::new();
        p1.insert("a".into(), file("one", 0o644));
        p1.insert("sub/b".into(), file("two", 0o600));
        assert!(write_atomic(dir, &p1).unwrap());
        assert_eq!(read_current(dir).as_ref(), Some(&p1));
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "one");
        assert_eq!(fs::read_to_string(dir.join("sub/b")).unwrap(), "two");
        assert!(fs::symlink_metadata(dir.join("a")).unwrap().is_symlink());
        assert_eq!(fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        let mode = fs::metadata(dir.join("sub/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let first = fs::read_link(dir.join(DATA_LINK)).unwrap();
        assert!(first.to_string_lossy().starts_with(".."));

        // Same payload: nothing is written.
        assert!(!write_atomic(dir, &p1).unwrap());
        assert_eq!(fs::read_link(dir.join(DATA_LINK)).unwrap(), first);

        // An open handle on the old file keeps the old contents; the name gets the new ones.
        let mut p2 = Payload::new();
        p2.insert("a".into(), file("ONE", 0o644));
        p2.insert("c".into(), file("three", 0o644));
        assert!(write_atomic(dir, &p2).unwrap());
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "ONE");
        assert_eq!(fs::read_to_string(dir.join("c")).unwrap(), "three");
        // `sub` is gone (no longer in the payload), and so is the old data directory.
        assert!(fs::symlink_metadata(dir.join("sub")).is_err());
        let second = fs::read_link(dir.join(DATA_LINK)).unwrap();
        assert_ne!(second, first);
        let want: BTreeSet<String> = ["..data", "a", "c"]
            .iter()
            .map(|s| s.to_string())
            .chain([second.to_string_lossy().into_owned()])
            .collect();
        assert_eq!(names(dir), want);

        // An empty payload leaves only `..data` and its (empty) directory.
        assert!(write_atomic(dir, &Payload::new()).unwrap());
        assert_eq!(names(dir).len(), 2);
        assert_eq!(read_current(dir), Some(Payload::new()));

        // Paths that would escape are refused before anything is written.
        let mut bad = Payload::new();
        bad.insert("../x".into(), file("x", 0o644));
        assert!(write_atomic(dir, &bad).is_err());
    }

    #[test]
    fn sub_path_resolution_stays_in_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        fs::create_dir(&vol).unwrap();
        fs::write(tmp.path().join("outside"), "x").unwrap();
        symlink(tmp.path(), vol.join("escape")).unwrap();
        symlink("inner", vol.join("alias")).unwrap();
        fs::create_dir(vol.join("inner")).unwrap();

        // Created on demand, with the given mode.
        let got = resolve_sub_path(&vol, Path::new("a/b"), Some(0o777)).unwrap();
        assert_eq!(got, fs::canonicalize(vol.join("a/b")).unwrap());
        let mode = fs::metadata(&got).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o777);
        // Not created when the volume does not allow it.
        let e = resolve_sub_path(&vol, Path::new("missing"), None).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        // Symlinks inside the volume are fine; out of it are not.
        let got = resolve_sub_path(&vol, Path::new("alias"), None).unwrap();
        assert_eq!(got, fs::canonicalize(vol.join("inner")).unwrap());
        let e = resolve_sub_path(&vol, Path::new("escape/outside"), None).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        let e = resolve_sub_path(&vol, Path::new("escape/newdir"), Some(0o755)).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        assert!(!tmp.path().join("newdir").exists());
    }

    fn pod_with(volumes: Vec<Volume>, mounts: Vec<VolumeMount>) -> PodSpec {
        PodSpec {
            volumes,
            containers: vec![Container {
                name: "c".into(),
                volume_mounts: mounts,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn vm(name: &str, path: &str, sub: Option<&str>, ro: bool) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            sub_path: sub.map(str::to_string),
            read_only: ro.then_some(true),
            ..Default::default()
        }
    }

    fn empty_dir(name: &str) -> Volume {
        Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }
    }

    #[test]
    fn spec_checks() {
        let ok = pod_with(
            vec![empty_dir("a")],
            vec![vm("a", "/a", Some("x/y"), false)],
        );
        assert!(check_spec(&ok).is_ok());
        let unknown = pod_with(vec![empty_dir("a")], vec![vm("b", "/b", None, false)]);
        let e = check_spec(&unknown).unwrap_err().to_string();
        assert!(e.contains("no volume named \"b\""), "{e}");
        let up = pod_with(
            vec![empty_dir("a")],
            vec![vm("a", "/a", Some("../x"), false)],
        );
        let e = check_spec(&up).unwrap_err().to_string();
        assert!(e.contains("'..'"), "{e}");
        let abs = pod_with(vec![empty_dir("a")], vec![vm("a", "/a", Some("/x"), false)]);
        assert!(check_spec(&abs).is_err());
        let nfs = pod_with(
            vec![Volume {
                name: "n".into(),
                nfs: Some(Default::default()),
                ..Default::default()
            }],
            vec![],
        );
        let e = check_spec(&nfs).unwrap_err().to_string();
        assert!(e.contains("nfs volumes are not supported"), "{e}");
        let bad_item = pod_with(
            vec![Volume {
                name: "c".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: Some("cm".into()),
                    items: vec![key("k", "../../etc/x", None)],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            vec![],
        );
        assert!(check_spec(&bad_item).is_err());
    }

    #[test]
    fn mounts_are_read_only_where_needed_and_ordered() {
        let tmp = tempfile::tempdir().unwrap();
        let ed = tmp.path().join("ed");
        let cm = tmp.path().join("cm");
        fs::create_dir(&ed).unwrap();
        fs::create_dir(&cm).unwrap();
        let mut p = Payload::new();
        p.insert("k".into(), file("v", 0o644));
        write_atomic(&cm, &p).unwrap();
        let prepared = vec![
            PreparedVolume {
                name: "ed".into(),
                path: ed.clone(),
                kind: VolumeKind::EmptyDir,
            },
            PreparedVolume {
                name: "cm".into(),
                path: cm.clone(),
                kind: VolumeKind::ConfigMap,
            },
        ];
        let c = Container {
            name: "c".into(),
            volume_mounts: vec![
                vm("ed", "/data/sub", Some("nested"), false),
                vm("cm", "/etc/k", Some("k"), false),
                vm("ed", "/data", None, true),
            ],
            ..Default::default()
        };
        let m = mounts(&prepared, &c).unwrap();
        let dests: Vec<_> = m.iter().map(|m| m.destination.clone()).collect();
        assert_eq!(
            dests,
            [
                PathBuf::from("/data"),
                PathBuf::from("/data/sub"),
                PathBuf::from("/etc/k")
            ]
        );
        assert!(m[0].readonly);
        assert!(!m[1].readonly);
        assert!(m[2].readonly, "configMap mounts are always read-only");
        assert_eq!(m[1].source, fs::canonicalize(ed.join("nested")).unwrap());
        // The configMap file resolves to the file in the current data directory.
        let data = fs::read_link(cm.join(DATA_LINK)).unwrap();
        assert_eq!(
            m[2].source,
            fs::canonicalize(cm.join(data).join("k")).unwrap()
        );
        // A subPath missing from a configMap volume is not created.
        let c = Container {
            name: "c".into(),
            volume_mounts: vec![vm("cm", "/x", Some("nope"), false)],
            ..Default::default()
        };
        let e = mounts(&prepared, &c).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(!cm.join("nope").exists());
    }

    #[test]
    fn host_path_types() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fs::write(d.join("f"), "x").unwrap();
        assert_eq!(check_host_path(d, "Directory"), Ok(true));
        assert_eq!(check_host_path(&d.join("f"), "File"), Ok(false));
        let e = check_host_path(&d.join("f"), "Directory").unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
        let e = check_host_path(&d.join("missing"), "File").unwrap_err();
        assert!(e.starts_with("hostPath type check failed"), "{e}");
        assert!(e.contains("missing"), "{e}");
        let e = check_host_path(d, "File").unwrap_err();
        assert!(e.contains("is not a file"), "{e}");
        assert!(check_host_path(&d.join("f"), "Socket").is_err());
        assert!(check_host_path(&d.join("f"), "BlockDevice").is_err());
        assert_eq!(
            check_host_path(Path::new("/dev/null"), "CharDevice"),
            Ok(false)
        );
        assert_eq!(
            check_host_path(&d.join("new/dir"), "DirectoryOrCreate"),
            Ok(true)
        );
        assert!(d.join("new/dir").is_dir());
        assert_eq!(
            check_host_path(&d.join("newfile"), "FileOrCreate"),
            Ok(false)
        );
        assert!(d.join("newfile").is_file());
        assert_eq!(check_host_path(&d.join("any"), ""), Ok(true));
    }

    /// The volume the ServiceAccount admission adds.
    fn api_access() -> api::core::ProjectedVolumeSource {
        use api::core::{
            ConfigMapProjection, DownwardApiProjection, DownwardApiVolumeFile, ObjectFieldSelector,
            ServiceAccountTokenProjection, VolumeProjection,
        };
        api::core::ProjectedVolumeSource {
            sources: vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: None,
                        expiration_seconds: Some(3607),
                        path: "token".into(),
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: Some("kube-root-ca.crt".into()),
                        items: vec![key("ca.crt", "ca.crt", None)],
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardApiProjection {
                        items: vec![DownwardApiVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".into()),
                                field_path: "metadata.namespace".into(),
                            }),
                            resource_field_ref: None,
                            mode: None,
                        }],
                    }),
                    ..Default::default()
                },
            ],
            default_mode: Some(0o644),
        }
    }

    #[test]
    fn projected_payloads_gather_every_source() {
        let p = api_access();
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("shop".into());
        let mut cm = ConfigMap::default();
        cm.data.insert("ca.crt".into(), "PEM".into());
        let mut sources = Sources {
            pod: Some(pod),
            ..Default::default()
        };
        sources
            .config_maps
            .insert("kube-root-ca.crt".into(), Ok(Some(cm)));
        sources
            .tokens
            .insert((String::new(), 3607), Ok(Some("jwt".into())));
        let got = projected_payload(&p, &sources, false).unwrap().unwrap();
        let want: Payload = [
            ("token", file("jwt", 0o644)),
            ("ca.crt", file("PEM", 0o644)),
            ("namespace", file("shop", 0o644)),
        ]
        .into_iter()
        .map(|(k, v)| (PathBuf::from(k), v))
        .collect();
        assert_eq!(got, want);
        // The API unreachable: an error, or (to start a pod offline) the readable part.
        sources
            .tokens
            .insert((String::new(), 3607), Err("unreachable".into()));
        assert!(projected_payload(&p, &sources, false).is_err());
        let partial = projected_payload(&p, &sources, true).unwrap().unwrap();
        assert_eq!(
            partial.keys().collect::<Vec<_>>(),
            [Path::new("ca.crt"), Path::new("namespace")]
        );
        assert!(check_projected(&p).is_ok());
    }
}
