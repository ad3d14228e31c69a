//! Registry: Kubernetes' write semantics on top of the store. Create, update, patch and
//! delete each run as one closure in a [`Store::guaranteed_write`]: on the request's side,
//! against a snapshot (the read of the current object, admission's reads, defaults,
//! managedFields, validation), after which the writer stores the closure's writes only if
//! nothing it read has changed since, and otherwise the closure runs again on a newer
//! snapshot. So the read, the checks and the write are atomic, as with kube-apiserver's
//! compare-and-swap on etcd, and the single writer thread only checks revisions and stores.
//!
//! Rules kept here (Kubernetes' "strategies"): server-owned metadata (uid, creation time,
//! generation, resourceVersion) is set by the server only; `generation` moves only when the
//! spec changes; writes to the main resource keep the stored status and writes to `status`
//! keep everything else; bound pods are deleted gracefully (the node confirms); finalizers hold
//! deletion; namespaced objects need a live namespace.

use std::any::Any;
use std::sync::atomic::{AtomicI64, Ordering};

use api::codec::{self, DecodeError};
use api::coordination::Lease;
use api::core::{Namespace, Node, Pod, Service};
use api::meta::{DeleteOptions, Time};
use api::networking::Ingress;
use api::object::Resource;
use api::quota::{LimitRange, ResourceQuota};
use api::scheduling::PriorityClass;
use api::storage::PersistentVolumeClaim;
use api::{AnyObject, Kind};
use serde_json::Value;

use crate::admission::dispatch::{self, Admission, Candidates, Request as AdmissionRequest};
use crate::admission::webhooks::Operation;
use crate::error::ApiError;
use crate::fieldmanager::{self, Manager, Managers, Scope};
use crate::heartbeat::{heartbeat_only, is_node_lease, renewal_only, Heartbeats};
use crate::ipalloc::ServiceRanges;
use crate::store::{Committed, Renumber, Store, Txn};

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
    /// A pod's `spec.ephemeralContainers` (the `pods/ephemeralcontainers` subresource): the
    /// rest of the object stays as stored.
    EphemeralContainers,
}

/// Patch flavours accepted on PATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    StrategicMerge,
    /// Server-side apply (`application/apply-patch+yaml`): the applied configuration is
    /// merged like a strategic merge patch, with field ownership ([`crate::fieldmanager`]).
    Apply,
}

/// Namespaces that always exist and may not be deleted.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

#[derive(Clone)]
pub struct Registry {
    pub store: Store,
    pub heartbeats: std::sync::Arc<crate::heartbeat::Heartbeats>,
    /// The tolerationSeconds pods get on create for the not-ready and unreachable NoExecute
    /// taints (Kubernetes' DefaultTolerationSeconds admission); shared by every clone.
    default_toleration_seconds: std::sync::Arc<AtomicI64>,
    /// Where ClusterIPs and NodePorts come from; shared by every clone.
    service_ranges: std::sync::Arc<std::sync::RwLock<std::sync::Arc<ServiceRanges>>>,
    /// Who writes through this handle, as `metadata.managedFields` names it: the
    /// controllers by default; the API gives each request its `fieldManager`.
    manager: std::sync::Arc<str>,
    /// Whether main-resource writes come through the scale subresource.
    via_scale: bool,
    /// Writes are dry runs (`dryRun=All`): checked and answered, never stored.
    dry_run: bool,
    /// Where admission warnings go (the API answers them as `Warning` headers).
    warnings: Warnings,
    /// The kind a generic call with [`api::custom::CustomObject`] acts on
    /// ([`Registry::for_kind`]).
    kind: Option<Kind>,
    /// The admission webhooks in force; shared by every clone.
    admission: std::sync::Arc<Admission>,
}

/// What admission says about a request beside its answer, and the admission that needs to
/// know who sends it.
#[derive(Debug, Default)]
pub struct AdmissionNotes {
    /// Answered as `Warning` headers.
    pub warnings: Vec<String>,
    /// Added to the request's audit event (Kubernetes' audit annotations).
    pub audit_annotations: Vec<(String, String)>,
    /// Checks of this request's updates that ask the authorizer about its user.
    pub requester: Option<std::sync::Arc<dyn RequesterAdmission>>,
    /// Who sends the request (admission webhooks are told); none for the server's own
    /// controllers.
    pub user: Option<crate::auth::User>,
}

/// Admission of an update that depends on who asks (Kubernetes' CertificateApproval and
/// CertificateSigning ask the authorizer whether the requester may `approve` or `sign` for
/// the object's signer). It runs inside the write, on the stored object and the one about to
/// replace it, after the part's own rules have shaped it; it may adjust `new` (a
/// subresource's strategy) and refuses with the API's error.
pub trait RequesterAdmission: Send + Sync + std::fmt::Debug {
    fn admit_update(&self, kind: Kind, old: &dyn Any, new: &mut dyn Any) -> Result<(), ApiError>;
}

/// Warnings and audit annotations collected while a request is handled.
pub type Warnings = std::sync::Arc<std::sync::Mutex<AdmissionNotes>>;

fn lock_warnings(warnings: &Warnings) -> std::sync::MutexGuard<'_, AdmissionNotes> {
    warnings.lock().unwrap_or_else(|e| e.into_inner())
}

/// A written object's committed resourceVersion (see [`Registry::write`]).
fn fix_object<K: Resource>(obj: &mut K, renumber: &Renumber) {
    renumber.fix(obj.meta_mut());
}

/// The same for an answer that is an object and a flag.
fn fix_first<K: Resource, B>(answer: &mut (K, B), renumber: &Renumber) {
    renumber.fix(answer.0.meta_mut());
}

/// An answer without objects.
fn fix_nothing(_: &mut (), _: &Renumber) {}

/// A namespace whose enforced Pod Security level changes: warnings naming the pods already
/// in it that the new level would refuse (Kubernetes evicts none of them).
fn warn_existing_pods(
    txn: &Txn,
    ns: &str,
    old: &std::collections::BTreeMap<String, String>,
    new: &std::collections::BTreeMap<String, String>,
    warnings: &Warnings,
) -> Result<(), ApiError> {
    use crate::podsecurity::{existing_pod_warnings, Level, Policy};
    let enforce = Policy::of(ns, new).enforce;
    if enforce == Policy::of(ns, old).enforce || enforce.level == Level::Privileged {
        return Ok(());
    }
    let pods: Vec<(String, Value, Value)> = txn
        .list(Kind::Pod, Some(ns))?
        .into_iter()
        .map(|p| {
            let mut json = p.to_json();
            let meta = json
                .get_mut("metadata")
                .map(Value::take)
                .unwrap_or_default();
            let spec = json.get_mut("spec").map(Value::take).unwrap_or_default();
            (p.meta().name.clone(), meta, spec)
        })
        .collect();
    lock_warnings(warnings)
        .warnings
        .extend(existing_pod_warnings(ns, &enforce, &pods));
    Ok(())
}

/// Pod Security admission of a write of `obj` (`old` on update): a pod that breaks its
/// namespace's enforced level is refused; templates of workloads only get warnings, as in
/// Kubernetes. An update that leaves the pod spec as it was (other than the binding) is not
/// judged again.
fn admit_pod_security<K: Resource>(
    txn: &Txn,
    obj: &K,
    old: Option<&K>,
    warnings: &Warnings,
) -> Result<(), ApiError> {
    if K::KIND == Kind::Namespace {
        if let Some(old) = old {
            warn_existing_pods(
                txn,
                &old.meta().name,
                &old.meta().labels,
                &obj.meta().labels,
                warnings,
            )?;
        }
        return Ok(());
    }
    enforce_pod_security(txn, obj, judge_pod_security(obj, old).as_ref(), warnings)
}

/// A pod or pod template judged at the two levels that have checks. Judging needs only the
/// object, so a create does it before the write, off the store's single writer thread.
struct PodSecurityFindings {
    baseline: Vec<crate::podsecurity::Violation>,
    restricted: Vec<crate::podsecurity::Violation>,
}

impl PodSecurityFindings {
    fn at(&self, level: crate::podsecurity::Level) -> &[crate::podsecurity::Violation] {
        use crate::podsecurity::Level;
        match level {
            Level::Privileged => &[],
            Level::Baseline => &self.baseline,
            Level::Restricted => &self.restricted,
        }
    }
}

/// The findings for `obj` (`None` when it has no pod template, or when an update leaves the
/// template as it was, other than the binding).
fn judge_pod_security<K: Resource>(obj: &K, old: Option<&K>) -> Option<PodSecurityFindings> {
    use crate::podsecurity::has_pod_template;
    let info = K::KIND.info();
    if !info.namespaced || !has_pod_template(info.kind) {
        return None;
    }
    judge_pod_security_json::<K>(
        &codec::to_json_view(obj, codec::View::Main),
        old.map(|o| codec::to_json_view(o, codec::View::Main))
            .as_ref(),
    )
}

/// [`judge_pod_security`] of the objects' JSON (at least their metadata and spec: a create
/// hands over the JSON its field manager already made).
fn judge_pod_security_json<K: Resource>(
    json: &Value,
    old_json: Option<&Value>,
) -> Option<PodSecurityFindings> {
    use crate::podsecurity::{check, has_pod_template, pod_template, Level};
    let info = K::KIND.info();
    if !info.namespaced || !has_pod_template(info.kind) {
        return None;
    }
    let (meta, spec) = pod_template(info.kind, json)?;
    if let Some(old_json) = old_json {
        let unbound = |s: &Value| {
            let mut s = s.clone();
            if let Some(o) = s.as_object_mut() {
                o.remove("nodeName");
            }
            s
        };
        if let Some((old_meta, old_spec)) = pod_template(info.kind, old_json) {
            if unbound(old_spec) == unbound(spec)
                && old_meta.get("annotations") == meta.get("annotations")
            {
                return None;
            }
        }
    }
    Some(PodSecurityFindings {
        baseline: check(Level::Baseline, meta, spec),
        restricted: check(Level::Restricted, meta, spec),
    })
}

/// Applies the namespace's policy (read inside the write, so a label change and a create
/// are ordered) to findings made earlier.
fn enforce_pod_security<K: Resource>(
    txn: &Txn,
    obj: &K,
    findings: Option<&PodSecurityFindings>,
    warnings: &Warnings,
) -> Result<(), ApiError> {
    use crate::podsecurity::{describe, Policy, LABEL_PREFIX};
    let Some(findings) = findings else {
        return Ok(());
    };
    let ns = obj.meta().namespace().to_string();
    let labels = txn
        .get(Kind::Namespace, "", &ns)?
        .map(|n| n.meta().labels.clone())
        .unwrap_or_default();
    let policy = Policy::of(&ns, &labels);
    let is_pod = K::KIND == Kind::Pod;
    let mut found = Vec::new();
    let enforced = findings.at(policy.enforce.level);
    if !enforced.is_empty() {
        if is_pod {
            return Err(ApiError::forbidden_object(
                K::KIND,
                &obj.meta().name,
                &format!(
                    "violates PodSecurity \"{}\": {}",
                    policy.enforce,
                    describe(enforced)
                ),
            ));
        }
        found.push(format!(
            "would violate PodSecurity \"{}\": {}",
            policy.enforce,
            describe(enforced)
        ));
    }
    if policy.warn != policy.enforce || is_pod {
        let warned = findings.at(policy.warn.level);
        if !warned.is_empty() {
            let w = format!(
                "would violate PodSecurity \"{}\": {}",
                policy.warn,
                describe(warned)
            );
            if !found.contains(&w) {
                found.push(w);
            }
        }
    }
    let mut notes = lock_warnings(warnings);
    notes.warnings.extend(found);
    // The audit mode: the request's audit event names what the audit level would refuse,
    // under Kubernetes' keys.
    if is_pod {
        notes.audit_annotations.push((
            format!("{LABEL_PREFIX}enforce-policy"),
            policy.enforce.to_string(),
        ));
    }
    let audited = findings.at(policy.audit.level);
    if !audited.is_empty() {
        notes.audit_annotations.push((
            format!("{LABEL_PREFIX}audit-violations"),
            format!(
                "would violate PodSecurity \"{}\": {}",
                policy.audit,
                describe(audited)
            ),
        ));
    }
    Ok(())
}

/// The manager of the server's own control loops, as Kubernetes names them.
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// How a write records field ownership.
#[derive(Clone)]
enum Ownership {
    /// Leave `managedFields` as they are (Kubernetes' binding does not record a manager).
    Keep,
    /// A non-apply write: the manager takes the fields it changed.
    Update(Manager),
    /// A server-side apply, already worked out.
    Applied(Managers),
}

fn scope_of(part: Part) -> Scope {
    match part {
        Part::Main => Scope::Main,
        Part::Status => Scope::Status,
        Part::EphemeralContainers => Scope::EphemeralContainers,
    }
}

/// The managers stored on an object (none when they cannot be read).
fn managers_of<K: Resource>(obj: &K) -> Managers {
    Managers::decode(obj.meta().managed_fields.as_ref()).unwrap_or_default()
}

/// The finalizer of a foreground deletion: the owner stays until its blocking dependents
/// are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The finalizer of an orphaning deletion: the owner stays until its dependents no longer
/// name it.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The taints a pod tolerates for the default seconds unless it says otherwise.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// What a DELETE asks to happen to the object's dependents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    /// `propagationPolicy`, else the deprecated `orphanDependents`, else Background (the
    /// default of apps/v1 and of every client skiff is driven by).
    pub fn of(opts: &DeleteOptions) -> Result<Propagation, String> {
        match (opts.propagation_policy.as_deref(), opts.orphan_dependents) {
            (Some(_), Some(_)) => {
                Err("orphanDependents and propagationPolicy cannot both be set".into())
            }
            (Some("Background"), _) | (None, None) | (None, Some(false)) => {
                Ok(Propagation::Background)
            }
            (Some("Foreground"), _) => Ok(Propagation::Foreground),
            (Some("Orphan"), _) | (None, Some(true)) => Ok(Propagation::Orphan),
            (Some(other), _) => Err(format!(
                "Unsupported value: {other:?}: supported values: \"Orphan\", \"Background\", \"Foreground\""
            )),
        }
    }
}

/// Adds the NoExecute tolerations for not-ready and unreachable nodes a pod lacks.
pub fn add_default_tolerations(pod: &mut Pod, seconds: i64) {
    for key in [NOT_READY_TAINT, UNREACHABLE_TAINT] {
        let covered = pod.spec.tolerations.iter().any(|t| {
            t.key.as_deref().is_none_or(|k| k.is_empty() || k == key)
                && t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "NoExecute")
        });
        if !covered {
            pod.spec.tolerations.push(api::core::Toleration {
                key: Some(key.to_string()),
                operator: Some("Exists".into()),
                value: None,
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(seconds),
            });
        }
    }
}

fn decode_error(e: DecodeError) -> ApiError {
    match e {
        DecodeError::Field { path, message } if message.starts_with("unknown field") => {
            ApiError::bad_request(format!("strict decoding error: {message} at {path}"))
        }
        DecodeError::Field { path, message } => {
            ApiError::bad_request(format!("error decoding {path}: {message}"))
        }
        other => ApiError::bad_request(other.to_string()),
    }
}

/// Decodes a request body into `K`. A body of another or an unknown kind is an invalid
/// object (422 with the `kind` field as its cause).
pub fn decode<K: Resource>(body: Value) -> Result<K, ApiError> {
    decode_as(K::KIND, body)
}

/// [`decode`] of an object of `kind` (a custom object's kind is the request's).
pub fn decode_as<K: Resource>(kind: Kind, body: Value) -> Result<K, ApiError> {
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    codec::from_json_as_traced::<K>(kind, body).map_err(|e| match e {
        DecodeError::WrongKind { expected, found } => ApiError::invalid(
            kind,
            &name,
            vec![api::validation::FieldError::not_supported(
                "kind",
                found,
                &[&expected],
            )],
        ),
        other => decode_error(other),
    })
}

fn as_pod_mut<K: Resource>(obj: &mut K) -> Option<&mut Pod> {
    (obj as &mut dyn Any).downcast_mut::<Pod>()
}

fn as_pod<K: Resource>(obj: &K) -> Option<&Pod> {
    (obj as &dyn Any).downcast_ref::<Pod>()
}

fn as_service_mut<K: Resource>(obj: &mut K) -> Option<&mut Service> {
    (obj as &mut dyn Any).downcast_mut::<Service>()
}

fn as_ingress_mut<K: Resource>(obj: &mut K) -> Option<&mut Ingress> {
    (obj as &mut dyn Any).downcast_mut::<Ingress>()
}

/// Kubernetes' ServiceAccount admission, on create only (the field is immutable after): a
/// pod without a ServiceAccount runs as its namespace's `default` one, and the deprecated
/// `serviceAccount` field mirrors the name, as kube-apiserver shows it.
fn default_service_account(pod: &mut Pod) {
    let spec = &mut pod.spec;
    let name = spec
        .service_account_name
        .get_or_insert_with(|| crate::serviceaccount::DEFAULT.into())
        .clone();
    spec.service_account.get_or_insert(name);
}

/// Where a pod's ServiceAccount token, CA and namespace are mounted.
pub const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the name of the volume that holds them.
const API_ACCESS_PREFIX: &str = "kube-api-access-";
/// The annotation that marks a mirror pod (a static pod's image in the API).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The rest of Kubernetes' ServiceAccount admission on create: the pod's ServiceAccount
/// must exist, and unless the pod or its ServiceAccount says
/// `automountServiceAccountToken: false`, the pod gets the `kube-api-access-xxxxx`
/// projected volume (a bound token renewed by the node, the cluster CA from the
/// `kube-root-ca.crt` ConfigMap, the namespace) mounted read-only at
/// [`SERVICE_ACCOUNT_MOUNT_PATH`] in every container that mounts nothing there itself.
///
/// The `default` ServiceAccount may be missing for a moment after its namespace is made
/// (the controller creates it asynchronously); such a pod is admitted as if it existed,
/// where kube-apiserver refuses it until the controller catches up.
fn mount_service_account_token(txn: &Txn, pod: &mut Pod) -> Result<(), ApiError> {
    use api::core::{
        ConfigMapProjection, DownwardApiProjection, DownwardApiVolumeFile, KeyToPath,
        ObjectFieldSelector, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume,
        VolumeMount, VolumeProjection,
    };
    if pod.metadata.annotations.contains_key(MIRROR_ANNOTATION) {
        return Ok(());
    }
    let ns = pod.metadata.namespace().to_string();
    let name = pod.spec.service_account_name.clone().unwrap_or_default();
    let sa = match txn.get(Kind::ServiceAccount, &ns, &name)? {
        Some(AnyObject::ServiceAccount(sa)) => Some(sa),
        _ if name == crate::serviceaccount::DEFAULT => None,
        _ => {
            return Err(ApiError::forbidden_object(
                Kind::Pod,
                &pod.metadata.name,
                &format!(
                "error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
            ),
            ))
        }
    };
    let automount = pod
        .spec
        .automount_service_account_token
        .or(sa.and_then(|s| s.automount_service_account_token))
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let spec = &mut pod.spec;
    let volume = match spec
        .volumes
        .iter()
        .find(|v| v.name.starts_with(API_ACCESS_PREFIX) && v.projected.is_some())
    {
        Some(v) => v.name.clone(),
        None => {
            let mut name = generated_name(API_ACCESS_PREFIX);
            while spec.volumes.iter().any(|v| v.name == name) {
                name = generated_name(API_ACCESS_PREFIX);
            }
            spec.volumes.push(Volume {
                name: name.clone(),
                projected: Some(ProjectedVolumeSource {
                    sources: vec![
                        VolumeProjection {
                            service_account_token: Some(ServiceAccountTokenProjection {
                                audience: None,
                                // An hour and seven seconds: the odd figure marks tokens
                                // of this volume, as in Kubernetes.
                                expiration_seconds: Some(3607),
                                path: "token".into(),
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            config_map: Some(ConfigMapProjection {
                                name: Some(crate::serviceaccount::ROOT_CA_CONFIG_MAP.into()),
                                items: vec![KeyToPath {
                                    key: "ca.crt".into(),
                                    path: "ca.crt".into(),
                                    mode: None,
                                }],
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
                }),
                ..Default::default()
            });
            name
        }
    };
    for c in spec
        .init_containers
        .iter_mut()
        .chain(spec.containers.iter_mut())
    {
        if c.volume_mounts
            .iter()
            .any(|m| m.mount_path == SERVICE_ACCOUNT_MOUNT_PATH)
        {
            continue;
        }
        c.volume_mounts.push(VolumeMount {
            name: volume.clone(),
            read_only: Some(true),
            mount_path: SERVICE_ACCOUNT_MOUNT_PATH.into(),
            ..Default::default()
        });
    }
    Ok(())
}

/// Kubernetes' Priority admission of a pod being created: `spec.priority` (and the preemption
/// policy) from its PriorityClass, or from the global default class when it names none.
fn admit_priority(txn: &Txn, pod: &mut Pod) -> Result<(), ApiError> {
    let classes = api::scheduling::classes_of(txn.list(Kind::PriorityClass, None)?);
    api::scheduling::admit_pod(pod, &classes)
        .map_err(|why| ApiError::forbidden_object(Kind::Pod, &pod.metadata.name, &why))
}

/// Kubernetes' LimitRanger admission of a pod being created: the namespace's LimitRange
/// defaults fill what its containers leave out, then their min, max and ratios are checked.
fn admit_limit_ranges(txn: &Txn, pod: &mut Pod) -> Result<(), ApiError> {
    let ns = pod.metadata.namespace().to_string();
    let ranges: Vec<LimitRange> = txn
        .list(Kind::LimitRange, Some(&ns))?
        .into_iter()
        .filter_map(LimitRange::from_any)
        .collect();
    if ranges.is_empty() {
        return Ok(());
    }
    api::quota::apply_defaults(pod, &ranges);
    api::quota::validate_pod(pod, &ranges)
        .map_err(|why| ApiError::forbidden_object(Kind::Pod, &shown_name(&pod.metadata), &why))
}

/// The name an admission refusal shows: the generateName prefix while no name is drawn.
fn shown_name(meta: &api::meta::ObjectMeta) -> String {
    if meta.name.is_empty() {
        meta.generate_name.clone().unwrap_or_default()
    } else {
        meta.name.clone()
    }
}

/// Kubernetes' RuntimeClass admission of a pod being created: the class it names must exist;
/// the class's overhead becomes the pod's (a pod that sets another, or an overhead without a
/// class that defines one, is refused); the class's node selector is merged into the pod's
/// (a conflicting value is refused) and its tolerations are added.
fn admit_runtime_class(txn: &Txn, pod: &mut Pod) -> Result<(), ApiError> {
    let refuse = |pod: &Pod, why: String| {
        ApiError::forbidden_object(Kind::Pod, &shown_name(&pod.metadata), &why)
    };
    let class = match pod.spec.runtime_class_name.as_deref() {
        Some(name) if !name.is_empty() => {
            match txn
                .get(Kind::RuntimeClass, "", name)?
                .and_then(api::node::RuntimeClass::from_any)
            {
                Some(c) => Some(c),
                None => {
                    return Err(refuse(
                        pod,
                        format!("pod rejected: RuntimeClass {name:?} not found"),
                    ))
                }
            }
        }
        _ => None,
    };
    match class.as_ref().and_then(|c| c.overhead.as_ref()) {
        Some(o) => {
            if !pod.spec.overhead.is_empty() && pod.spec.overhead != o.pod_fixed {
                return Err(refuse(
                    pod,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ));
            }
            pod.spec.overhead = o.pod_fixed.clone();
        }
        None if !pod.spec.overhead.is_empty() => {
            return Err(refuse(
                pod,
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
                    .into(),
            ));
        }
        None => {}
    }
    if let Some(scheduling) = class.and_then(|c| c.scheduling) {
        for (k, v) in &scheduling.node_selector {
            match pod.spec.node_selector.get(k) {
                Some(have) if have != v => {
                    return Err(refuse(
                        pod,
                        format!(
                            "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {v}; pod.spec.nodeSelector[{k}] = {have}"
                        ),
                    ))
                }
                _ => {
                    pod.spec.node_selector.insert(k.clone(), v.clone());
                }
            }
        }
        for t in scheduling.tolerations {
            if !pod.spec.tolerations.contains(&t) {
                pod.spec.tolerations.push(t);
            }
        }
    }
    Ok(())
}

/// What a namespace uses of `quota`, read inside the write.
fn quota_usage(
    txn: &Txn,
    quota: &ResourceQuota,
    ns: &str,
) -> Result<std::collections::BTreeMap<String, i128>, ApiError> {
    let mut objs = Vec::new();
    for k in api::quota::counted_kinds(&quota.spec.hard) {
        objs.extend(txn.list(k, Some(ns))?);
    }
    Ok(api::quota::used_by(quota, objs.iter()))
}

/// Kubernetes' ResourceQuota admission of a create: each quota of the namespace that counts
/// the object must have room for it (compute quotas also need every container to state the
/// resource); the quotas' `status.used` is raised in the same write, as Kubernetes does.
fn admit_quota(txn: &mut Txn, obj: &AnyObject) -> Result<(), ApiError> {
    admit_quota_delta(txn, obj, api::quota::usage(obj), true)
}

/// The ResourceQuota admission of an update: what the update adds (a Service turned NodePort
/// or LoadBalancer, a claim's larger storage request) must fit, as on create.
fn admit_quota_update(txn: &mut Txn, old: &AnyObject, new: &AnyObject) -> Result<(), ApiError> {
    let before = api::quota::usage(old);
    let mut delta = api::quota::usage(new);
    delta.retain(|k, v| {
        *v -= before.get(k).copied().unwrap_or(0);
        *v > 0
    });
    if delta.is_empty() {
        return Ok(());
    }
    admit_quota_delta(txn, new, delta, false)
}

/// [`admit_quota`] of `delta` (thousandths) for `obj`; `create`: the pod's constraints are
/// checked too.
fn admit_quota_delta(
    txn: &mut Txn,
    obj: &AnyObject,
    delta: std::collections::BTreeMap<String, i128>,
    create: bool,
) -> Result<(), ApiError> {
    if !obj.kind().info().namespaced || obj.kind() == Kind::Event {
        return Ok(());
    }
    let ns = obj.meta().namespace().to_string();
    let quotas: Vec<ResourceQuota> = txn
        .list(Kind::ResourceQuota, Some(&ns))?
        .into_iter()
        .filter_map(ResourceQuota::from_any)
        .filter(|q| q.metadata.deletion_timestamp.is_none())
        .collect();
    if quotas.is_empty() {
        return Ok(());
    }
    let forbid =
        |why: String| ApiError::forbidden_object(obj.kind(), &shown_name(obj.meta()), &why);
    let mut raised = Vec::new();
    for q in quotas {
        if !api::quota::in_scope(&q.spec, obj) {
            continue;
        }
        if let AnyObject::Pod(p) = obj {
            if create && api::quota::pod_counts(p) {
                api::quota::pod_constraints(p, &q.spec.hard)
                    .map_err(|e| forbid(format!("failed quota: {}: {e}", q.metadata.name)))?;
            }
        }
        if !delta.keys().any(|k| q.spec.hard.contains_key(k)) {
            continue;
        }
        let used = quota_usage(txn, &q, &ns)?;
        let new_used = api::quota::admit(&q, &used, &delta).map_err(forbid)?;
        raised.push((q, new_used));
    }
    for (mut q, used) in raised {
        q.status.hard = q.spec.hard.clone();
        q.status.used = used;
        txn.put(q.into_any())?;
    }
    Ok(())
}

/// Only one PriorityClass may be the global default (the Priority admission's rule).
fn check_one_global_default(txn: &Txn, pc: &PriorityClass, create: bool) -> Result<(), ApiError> {
    if !pc.is_global_default() {
        return Ok(());
    }
    let classes = api::scheduling::classes_of(txn.list(Kind::PriorityClass, None)?);
    if let Some(other) = classes
        .iter()
        .find(|c| c.is_global_default() && (create || c.metadata.name != pc.metadata.name))
    {
        return Err(ApiError::forbidden_object(
            Kind::PriorityClass,
            &pc.metadata.name,
            &format!(
                "PriorityClass {} is already marked as default. Only one default can exist",
                other.metadata.name
            ),
        ));
    }
    Ok(())
}

/// Kubernetes' DefaultIngressClass admission: an Ingress created without a class (neither
/// `spec.ingressClassName` nor the deprecated annotation) gets the default IngressClass, the
/// newest one if several carry the default annotation.
fn default_ingress_class(txn: &Txn, ing: &mut Ingress) -> Result<(), ApiError> {
    if api::networking::class_of(ing).is_some() {
        return Ok(());
    }
    let default = txn
        .list(Kind::IngressClass, None)?
        .into_iter()
        .filter_map(|o| match o {
            AnyObject::IngressClass(c) if api::networking::is_default_class(&c) => Some(c),
            _ => None,
        })
        .max_by_key(|c| (c.metadata.creation_timestamp, c.metadata.name.clone()));
    if let Some(c) = default {
        ing.spec.ingress_class_name = Some(c.metadata.name);
    }
    Ok(())
}

/// Kubernetes' DefaultStorageClass admission: a claim created without
/// `spec.storageClassName` gets the default StorageClass, the newest one if several carry the
/// default annotation (an empty name asks for no class and is left alone).
fn default_storage_class(txn: &Txn, claim: &mut PersistentVolumeClaim) -> Result<(), ApiError> {
    if claim.spec.storage_class_name.is_some() {
        return Ok(());
    }
    let default = txn
        .list(Kind::StorageClass, None)?
        .into_iter()
        .filter_map(|o| match o {
            AnyObject::StorageClass(c) if api::storage::is_default_class(&c) => Some(c),
            _ => None,
        })
        .max_by_key(|c| (c.metadata.creation_timestamp, c.metadata.name.clone()));
    if let Some(c) = default {
        claim.spec.storage_class_name = Some(c.metadata.name);
    }
    Ok(())
}

/// Kubernetes' LimitRanger for claims: the storage request within the min and max of the
/// namespace's `PersistentVolumeClaim` limits.
fn admit_claim_limits(txn: &Txn, claim: &PersistentVolumeClaim) -> Result<(), ApiError> {
    let ns = claim.metadata.namespace().to_string();
    let ranges: Vec<LimitRange> = txn
        .list(Kind::LimitRange, Some(&ns))?
        .into_iter()
        .filter_map(LimitRange::from_any)
        .collect();
    api::quota::validate_claim(claim, &ranges).map_err(|why| {
        ApiError::forbidden_object(
            Kind::PersistentVolumeClaim,
            &shown_name(&claim.metadata),
            &why,
        )
    })
}

/// Kubernetes' PersistentVolumeClaimResize admission: a bound claim's storage request may
/// grow only when its StorageClass allows volume expansion (skiff's local-path volumes are
/// plain directories: its default class does not).
fn admit_claim_resize(
    txn: &Txn,
    old: &PersistentVolumeClaim,
    new: &PersistentVolumeClaim,
) -> Result<(), ApiError> {
    let size = |c: &PersistentVolumeClaim| {
        c.spec
            .resources
            .requests
            .get("storage")
            .map(|q| api::quantity::parse_quantity_milli(&q.0).unwrap_or(0))
            .unwrap_or(0)
    };
    if size(new) <= size(old) {
        return Ok(());
    }
    let class = new.spec.storage_class_name.as_deref().unwrap_or("");
    let expandable = !class.is_empty()
        && txn
            .get(Kind::StorageClass, "", class)?
            .and_then(api::storage::StorageClass::from_any)
            .is_some_and(|c| c.allow_volume_expansion == Some(true));
    if expandable {
        return Ok(());
    }
    Err(ApiError::forbidden_object(
        Kind::PersistentVolumeClaim,
        &old.metadata.name,
        "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
    ))
}

/// Kubernetes' StorageObjectInUseProtection admission: claims and volumes are created with
/// the finalizer the protection controllers remove once nothing uses them.
fn add_protection_finalizer<K: Resource>(obj: &mut K) {
    let finalizer = match K::KIND {
        Kind::PersistentVolumeClaim => api::storage::PVC_PROTECTION_FINALIZER,
        Kind::PersistentVolume => api::storage::PV_PROTECTION_FINALIZER,
        // Held until the definition's objects are gone (the CRD finalizer controller).
        Kind::CustomResourceDefinition => api::apiextensions::CLEANUP_FINALIZER,
        _ => return,
    };
    let finalizers = &mut obj.meta_mut().finalizers;
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(finalizer.to_string());
    }
}

fn as_node<K: Resource>(obj: &K) -> Option<&Node> {
    (obj as &dyn Any).downcast_ref::<Node>()
}

fn as_lease<K: Resource>(obj: &K) -> Option<&Lease> {
    (obj as &dyn Any).downcast_ref::<Lease>()
}

fn as_namespace_mut<K: Resource>(obj: &mut K) -> Option<&mut Namespace> {
    (obj as &mut dyn Any).downcast_mut::<Namespace>()
}

fn typed<K: Resource>(obj: AnyObject) -> Result<K, ApiError> {
    K::from_any(obj).ok_or_else(|| ApiError::internal("stored object has the wrong kind"))
}

/// The stored object, or NotFound.
fn get_existing<K: Resource>(txn: &Txn, kind: Kind, ns: &str, name: &str) -> Result<K, ApiError> {
    match txn.get(kind, ns, name)? {
        Some(o) => typed(o),
        None => Err(ApiError::not_found(kind, name)),
    }
}

/// Namespaced objects may only be created in a namespace that exists and is not terminating.
fn check_namespace_open(txn: &Txn, ns: &str) -> Result<(), ApiError> {
    match txn.get(Kind::Namespace, "", ns)? {
        None => Err(ApiError::not_found(Kind::Namespace, ns)),
        Some(n) if n.meta().deletion_timestamp.is_some() => Err(ApiError::forbidden(format!(
            "unable to create new content in namespace {ns} because it is being terminated"
        ))),
        Some(_) => Ok(()),
    }
}

/// Settles the namespace of an object against the request path.
fn settle_namespace<K: Resource>(obj: &mut K, path_ns: Option<&str>) -> Result<(), ApiError> {
    let info = obj.kind_of().info();
    let meta = obj.meta_mut();
    if !info.namespaced {
        meta.namespace = None;
        return Ok(());
    }
    let body_ns = meta.namespace.clone().filter(|s| !s.is_empty());
    match (body_ns, path_ns) {
        (Some(b), Some(p)) if b != p => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        (_, Some(p)) => {
            meta.namespace = Some(p.to_string());
            Ok(())
        }
        (Some(_), None) => Ok(()),
        (None, None) => {
            meta.namespace = Some("default".into());
            Ok(())
        }
    }
}

fn validate<K: Resource>(obj: &K) -> Result<(), ApiError> {
    validate_part(obj, Part::Main)
}

/// Validates what a write of `part` can change: a status write kept the stored spec and
/// metadata, which were valid, so only its status is checked (as Kubernetes' status
/// strategies validate the status alone).
fn validate_part<K: Resource>(obj: &K, part: Part) -> Result<(), ApiError> {
    let errors = match part {
        Part::Main => {
            let mut errors = api::validation::validate_meta(obj.meta(), obj.kind_of());
            errors.extend(obj.validate());
            if let Some(crd) =
                (obj as &dyn Any).downcast_ref::<api::apiextensions::CustomResourceDefinition>()
            {
                errors.extend(crate::crd::validate_schemas(crd));
            }
            errors
        }
        Part::Status => obj.validate_status(),
        // The whole pod, now with its new ephemeral containers (ValidatePodEphemeralContainersUpdate
        // validates the pod's metadata and spec first).
        Part::EphemeralContainers => {
            let mut errors = api::validation::validate_meta(obj.meta(), obj.kind_of());
            errors.extend(obj.validate());
            errors
        }
    };
    if errors.is_empty() {
        Ok(())
    } else {
        let name = obj.meta().name.clone();
        Err(ApiError::invalid(obj.kind_of(), &name, errors))
    }
}

/// What create does to the status: pods start Pending, namespaces Active, nodes keep what
/// the registering kubelet sent, everything else starts empty.
fn prepare_for_create<K: Resource>(obj: &mut K) {
    match K::KIND {
        Kind::Node => {}
        Kind::Pod => {
            obj.clear_status();
            if let Some(pod) = as_pod_mut(obj) {
                pod.status.phase = Some("Pending".into());
            }
        }
        Kind::Namespace => {
            obj.clear_status();
            if let Some(ns) = as_namespace_mut(obj) {
                ns.status.phase = Some("Active".into());
            }
        }
        _ => obj.clear_status(),
    }
}

const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generated_name(prefix: &str) -> String {
    let mut bytes = [0u8; 5];
    getrandom_fill(&mut bytes);
    let suffix: String = bytes
        .iter()
        .map(|b| GENERATE_ALPHABET[*b as usize % GENERATE_ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

fn getrandom_fill(buf: &mut [u8]) {
    use ring::rand::SecureRandom;
    let rng = ring::rand::SystemRandom::new();
    if rng.fill(buf).is_err() {
        // Fall back to the clock: names only need to be unlikely to collide, and a collision
        // is retried.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> (i * 8)) as u8;
        }
    }
}

/// Whether a terminating object may leave the store now.
fn ready_to_remove<K: Resource>(obj: &K) -> bool {
    let meta = obj.meta();
    if meta.deletion_timestamp.is_none() || !meta.finalizers.is_empty() {
        return false;
    }
    match K::KIND {
        // A bound pod waits for its node to confirm (a delete with grace period 0).
        Kind::Pod => meta.deletion_grace_period_seconds == Some(0) || !is_bound(obj),
        // The namespace controller removes namespaces once they are empty.
        Kind::Namespace => false,
        _ => true,
    }
}

fn is_bound<K: Resource>(obj: &K) -> bool {
    as_pod(obj).is_some_and(|p| p.spec.node_name.as_deref().is_some_and(|n| !n.is_empty()))
}

/// A create's work inside the write: the namespace is open, a Service gets its addresses,
/// and the name is free (a generated one is drawn again if not).
/// The commit of a write that admission takes ([`Registry::admitted`]): the stored object
/// from the one admitted, in the write's transaction; run once as a dry run first when
/// webhooks validate.
type Commit<K> = std::sync::Arc<dyn Fn(&mut Txn<'_, '_>, K) -> Result<K, ApiError> + Send + Sync>;

/// An update's new object made from the stored one, with who owns what it set
/// ([`Registry::admitted_update`]).
type Compute<K> = dyn FnMut(&K) -> Result<(K, Ownership), ApiError> + Send;

/// A controller's change to an object ([`Registry::mutate`]), boxed.
type Change<K> = Box<dyn FnMut(&mut K) -> Result<(), ApiError> + Send>;

/// Whether [`create_in`] changes an object of `kind` (the built-in admission it runs in the
/// write: a Pod's service account, limits and priority, a Service's IPs, an Ingress's or a
/// claim's class, a protection finalizer). Other kinds are stored as they come, but for a
/// generated name that collided. Keep in step with `create_in`.
fn changed_in_create(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Pod
            | Kind::Service
            | Kind::Ingress
            | Kind::PersistentVolumeClaim
            | Kind::PersistentVolume
            | Kind::CustomResourceDefinition
    )
}

fn create_in<K: Resource>(
    txn: &mut Txn,
    ranges: &ServiceRanges,
    mut obj: K,
    generate: bool,
    findings: Option<&PodSecurityFindings>,
    warnings: &Warnings,
) -> Result<K, ApiError> {
    let ns = obj.meta().namespace().to_string();
    let kind = obj.kind_of();
    if kind.info().namespaced {
        check_namespace_open(txn, &ns)?;
    }
    if let Some(pod) = as_pod_mut(&mut obj) {
        default_service_account(pod);
        mount_service_account_token(txn, pod)?;
    }
    // The findings were made before the token volume was added: projected volumes pass at
    // every level, as in Kubernetes, where this admission runs before Pod Security.
    enforce_pod_security(txn, &obj, findings, warnings)?;
    if let Some(svc) = as_service_mut(&mut obj) {
        crate::ipalloc::assign_in_txn(txn, ranges, svc, None)?;
    }
    if let Some(ing) = as_ingress_mut(&mut obj) {
        default_ingress_class(txn, ing)?;
    }
    if let Some(pod) = as_pod_mut(&mut obj) {
        admit_runtime_class(txn, pod)?;
        admit_limit_ranges(txn, pod)?;
        admit_priority(txn, pod)?;
    }
    if let Some(pc) = (&obj as &dyn Any).downcast_ref::<PriorityClass>() {
        check_one_global_default(txn, pc, true)?;
    }
    if let Some(claim) = (&mut obj as &mut dyn Any).downcast_mut::<PersistentVolumeClaim>() {
        default_storage_class(txn, claim)?;
        admit_claim_limits(txn, claim)?;
    }
    add_protection_finalizer(&mut obj);
    for attempt in 0..8 {
        let name = obj.meta().name.clone();
        if txn.absent(kind, &ns, &name)? {
            // Last, as Kubernetes' ResourceQuota admission: it counts what the others made.
            let any = obj.into_any();
            admit_quota(txn, &any)?;
            return typed(txn.put(any)?);
        }
        if !generate || attempt == 7 {
            return Err(ApiError::already_exists(kind, &name));
        }
        let prefix = obj.meta().generate_name.clone().unwrap_or_default();
        obj.meta_mut().name = generated_name(&prefix);
    }
    unreachable!("the loop returns on its last attempt")
}

/// The update rules shared by PUT, PATCH and internal writers; runs inside the transaction.
#[allow(clippy::too_many_arguments)]
fn apply_update<K: Resource>(
    txn: &mut Txn,
    beats: &Heartbeats,
    ranges: &ServiceRanges,
    old: K,
    new: K,
    part: Part,
    ownership: Ownership,
    warnings: &Warnings,
) -> Result<K, ApiError> {
    apply_update_checked(
        txn, beats, ranges, old, new, part, true, ownership, warnings,
    )
}

/// [`apply_update`], optionally without the immutable-field rules (binding sets the otherwise
/// immutable `spec.nodeName`).
#[allow(clippy::too_many_arguments)]
fn apply_update_checked<K: Resource>(
    txn: &mut Txn,
    beats: &Heartbeats,
    ranges: &ServiceRanges,
    old: K,
    mut new: K,
    part: Part,
    check_immutable: bool,
    ownership: Ownership,
    warnings: &Warnings,
) -> Result<K, ApiError> {
    let name = old.meta().name.clone();
    let kind = old.kind_of();
    let rv = new.meta().resource_version.clone();
    if !rv.is_empty() && rv != old.meta().resource_version {
        return Err(ApiError::stale(kind, &name));
    }
    if !new.meta().uid.is_empty() && new.meta().uid != old.meta().uid {
        return Err(ApiError::conflict(
            kind,
            &name,
            &format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                new.meta().uid,
                old.meta().uid
            ),
        ));
    }
    match part {
        Part::Status => new.copy_all_but_status_from(&old),
        Part::EphemeralContainers => {
            // Kubernetes' dropNonEphemeralContainerUpdates: only spec.ephemeralContainers
            // comes from the request (metadata as a status write keeps it).
            let (Some(o), Some(n)) = (as_pod(&old), as_pod_mut(&mut new)) else {
                return Err(ApiError::path_not_found());
            };
            let mut ephemeral = std::mem::take(&mut n.spec.ephemeral_containers);
            for c in &mut ephemeral {
                c.set_defaults();
            }
            let managed = n.metadata.managed_fields.take();
            *n = o.clone();
            n.spec.ephemeral_containers = ephemeral;
            n.metadata.managed_fields = managed;
        }
        Part::Main => {
            if kind.info().has_status {
                new.copy_status_from(&old);
            }
            new.set_defaults();
            // The Priority admission set these on create; an update that leaves them out
            // keeps them, as Kubernetes' does.
            if let (Some(o), Some(n)) = (as_pod(&old), as_pod_mut(&mut new)) {
                if n.spec.priority.is_none() {
                    n.spec.priority = o.spec.priority;
                }
                if n.spec.preemption_policy.is_none() {
                    n.spec.preemption_policy = o.spec.preemption_policy.clone();
                }
            }
            if let Some(pc) = (&new as &dyn Any).downcast_ref::<PriorityClass>() {
                check_one_global_default(txn, pc, false)?;
            }

            if let (Some(o), Some(n)) = (
                (&old as &dyn Any).downcast_ref::<Service>(),
                as_service_mut(&mut new),
            ) {
                crate::ipalloc::assign_in_txn(txn, ranges, n, Some(o))?;
            }
        }
    }
    {
        let (o, n) = (old.meta(), new.meta_mut());
        n.uid = o.uid.clone();
        n.namespace = o.namespace.clone();
        n.creation_timestamp = o.creation_timestamp;
        n.deletion_timestamp = o.deletion_timestamp;
        n.deletion_grace_period_seconds = o.deletion_grace_period_seconds;
        n.generate_name = o.generate_name.clone();
        n.resource_version = o.resource_version.clone();
        n.generation = o.generation;
        n.self_link = None;
    }
    // Managers a writer sends along replace the stored ones when they are well formed (as
    // in Kubernetes); an apply brings its own; otherwise they stay.
    let base = match ownership {
        Ownership::Applied(ref m) if m.same_but_times(&managers_of(&old)) => None,
        Ownership::Applied(ref m) => Some(m.encode()),
        _ => new
            .meta()
            .managed_fields
            .clone()
            .filter(|v| Managers::decode(Some(v)).is_some_and(|m| !m.0.is_empty()))
            .map(Some),
    };
    new.meta_mut().managed_fields = match base {
        Some(m) => m,
        None => old.meta().managed_fields.clone(),
    };
    let requester = lock_warnings(warnings).requester.clone();
    if let Some(r) = requester {
        r.admit_update(kind, &old, &mut new)?;
    }
    // A status write kept the stored spec, so only a main write (or new ephemeral containers)
    // can change the generation.
    if part != Part::Status && new.spec_fingerprint() != old.spec_fingerprint() {
        new.meta_mut().generation = Some(old.meta().generation.unwrap_or(1) + 1);
    }
    validate_part(&new, part)?;
    if part == Part::EphemeralContainers {
        if let (Some(o), Some(n)) = (as_pod(&old), as_pod(&new)) {
            let errors = api::validation::validate_ephemeral_containers_update(n, o);
            if !errors.is_empty() {
                return Err(ApiError::invalid(kind, &name, errors));
            }
        }
    }
    if part != Part::Status {
        admit_pod_security(txn, &new, Some(&old), warnings)?;
    }
    if check_immutable && part == Part::Main {
        let errors =
            api::validation::validate_update(&new.clone().into_any(), &old.clone().into_any());
        if !errors.is_empty() {
            return Err(ApiError::invalid(kind, &name, errors));
        }
    }
    if let (Some(o), Some(n)) = (
        (&old as &dyn Any).downcast_ref::<PersistentVolumeClaim>(),
        (&new as &dyn Any).downcast_ref::<PersistentVolumeClaim>(),
    ) {
        if part == Part::Main {
            admit_claim_resize(txn, o, n)?;
        }
    }
    // Updates that can raise what a quota counts.
    if part == Part::Main && matches!(K::KIND, Kind::Service | Kind::PersistentVolumeClaim) {
        admit_quota_update(txn, &old.clone().into_any(), &new.clone().into_any())?;
    }
    if new == old {
        return Ok(old);
    }
    // A heartbeat alone stays in memory: no disk write, no event.
    if part == Part::Status {
        if let (Some(o), Some(n)) = (as_node(&old), as_node(&new)) {
            if let Some(at) = heartbeat_only(o, n) {
                beats.record(&name, at);
                let mut shown = new;
                shown.meta_mut().resource_version = old.meta().resource_version.clone();
                return Ok(shown);
            }
        }
    }
    // So does a node Lease's renewal.
    if part == Part::Main {
        if let (Some(o), Some(n)) = (as_lease(&old), as_lease(&new)) {
            if let Some(at) = renewal_only(o, n) {
                beats.record_renewal(&name, at);
                let mut shown = new;
                shown.meta_mut().resource_version = old.meta().resource_version.clone();
                return Ok(shown);
            }
            if is_node_lease(n) {
                beats.forget_renewal_upto(&name, n.spec.renew_time);
            }
        }
    }
    if let Ownership::Update(who) = &ownership {
        // Only the part the manager's scope can own is compared, so only that is written
        // out (this runs on the store's single writer thread).
        let view = fields_view(who);
        let mut managers = managers_of(&new);
        managers.update(
            Some(&codec::to_json_view(&old, view)),
            &codec::to_json_view(&new, view),
            who,
            &kind.info().api_version(),
            Time::now(),
        );
        new.meta_mut().managed_fields = managers.encode();
    }
    let ns = new.meta().namespace().to_string();
    if ready_to_remove(&new) {
        return typed(txn.delete(kind, &ns, &name)?);
    }
    typed(txn.put(new.into_any())?)
}

/// A write that only moves a heartbeat (a Node status' heartbeat times, a node Lease's
/// renewTime), decided against `old` as read outside the store's writer: recorded in memory
/// and answered as [`apply_update`] would answer it, without queueing a transaction (even an
/// empty one is a commit, which reaches the disk). None when the write is anything else; it
/// then takes the ordinary path, which decides again under the write lock.
fn heartbeat_write<K: Resource>(beats: &Heartbeats, old: &K, new: &K, part: Part) -> Option<K> {
    let rv = &new.meta().resource_version;
    if !rv.is_empty() && *rv != old.meta().resource_version {
        return None;
    }
    if !new.meta().uid.is_empty() && new.meta().uid != old.meta().uid {
        return None;
    }
    let mut merged = new.clone();
    match part {
        Part::Status => merged.copy_all_but_status_from(old),
        Part::Main => {
            if K::KIND.info().has_status {
                merged.copy_status_from(old);
            }
            merged.set_defaults();
        }
        Part::EphemeralContainers => return None,
    }
    {
        let (o, n) = (old.meta(), merged.meta_mut());
        n.uid = o.uid.clone();
        n.namespace = o.namespace.clone();
        n.creation_timestamp = o.creation_timestamp;
        n.deletion_timestamp = o.deletion_timestamp;
        n.deletion_grace_period_seconds = o.deletion_grace_period_seconds;
        n.generate_name = o.generate_name.clone();
        n.resource_version = o.resource_version.clone();
        n.generation = o.generation;
        n.self_link = None;
        if n.managed_fields.is_none() {
            n.managed_fields = o.managed_fields.clone();
        }
    }
    let name = &old.meta().name;
    match part {
        Part::Status => {
            let at = heartbeat_only(as_node(old)?, as_node(&merged)?)?;
            beats.record(name, at);
        }
        Part::Main => {
            let at = renewal_only(as_lease(old)?, as_lease(&merged)?)?;
            beats.record_renewal(name, at);
        }
        Part::EphemeralContainers => return None,
    }
    Some(merged)
}

/// Whether writes of `K` to `part` may be heartbeats ([`heartbeat_write`]).
fn may_be_heartbeat<K: Resource>(part: Part) -> bool {
    matches!(
        (K::KIND, part),
        (Kind::Node, Part::Status) | (Kind::Lease, Part::Main)
    )
}

/// The object a PATCH makes of `old` (as reads show it).
fn patched<K: Resource>(
    beats: &Heartbeats,
    old: &K,
    ns: &str,
    name: &str,
    patch_type: PatchType,
    patch: &[u8],
) -> Result<K, ApiError> {
    // The patch applies to the object as reads show it (a node Lease's renewal).
    let mut current = old.clone();
    if let Some(l) = (&mut current as &mut dyn Any).downcast_mut::<Lease>() {
        beats.overlay_lease(l);
    }
    let current = codec::to_json(&current);
    let patched = apply_patch(current, patch_type, patch)?;
    let mut new: K = decode_as(old.kind_of(), patched)?;
    if new.meta().name != name {
        return Err(ApiError::bad_request(
            "metadata.name may not be changed by a patch",
        ));
    }
    if old.kind_of().info().namespaced && new.meta().namespace() != ns {
        return Err(ApiError::bad_request(
            "metadata.namespace may not be changed by a patch",
        ));
    }
    // A patch that names a resourceVersion makes it a precondition; otherwise the read is
    // the base.
    if new.meta().resource_version.is_empty() {
        new.meta_mut().resource_version = old.meta().resource_version.clone();
    }
    Ok(new)
}

/// The part of an object whose ownership `who` can take.
fn fields_view(who: &Manager) -> codec::View {
    match who.scope {
        Scope::Status => codec::View::Status,
        Scope::Main | Scope::Scale | Scope::EphemeralContainers => codec::View::Main,
    }
}

/// kube-apiserver's answer to an apply that would take fields from other managers.
fn conflict_error(c: &fieldmanager::Conflicts) -> ApiError {
    ApiError::from_status(
        api::meta::Status::failure(409, "Conflict", c.message()).with_details(
            api::meta::StatusDetails {
                causes: c.causes(),
                ..Default::default()
            },
        ),
    )
}

/// The most operations a JSON patch may have (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// How many bytes of JSON the `copy` operations of one JSON patch may add in all
/// (kube-apiserver's `JSONPatchMaxCopyBytes`, its request body limit). Without a limit each
/// copy of what an earlier copy made doubles the object: forty such operations, a 4 KiB body,
/// ask for terabytes, inside the store's write.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = crate::http::MAX_BODY_BYTES;

/// Applies a JSON patch operation by operation, refusing one with too many operations or
/// whose copies add more than [`MAX_JSON_PATCH_COPY_BYTES`]. On an error `doc` is half
/// patched: the caller drops it.
pub(crate) fn apply_json_patch(
    doc: &mut Value,
    ops: &[json_patch::PatchOperation],
) -> Result<(), ApiError> {
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::from_status(api::meta::Status::failure(
            413,
            "RequestEntityTooLarge",
            format!(
                "the allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                ops.len()
            ),
        )));
    }
    let invalid = |message: String| {
        ApiError::from_status(api::meta::Status::failure(422, "Invalid", message))
    };
    let mut copied = 0usize;
    for (i, op) in ops.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(c) = op {
            if let Some(source) = doc.pointer(c.from.as_str()) {
                copied += json_len_up_to(source, MAX_JSON_PATCH_COPY_BYTES - copied + 1);
                if copied > MAX_JSON_PATCH_COPY_BYTES {
                    return Err(invalid(format!(
                        "the JSON patch could not be applied: operation '/{i}' copies more than \
                         the {MAX_JSON_PATCH_COPY_BYTES} bytes all copies of a patch may add"
                    )));
                }
            }
        }
        if let json_patch::PatchOperation::Test(t) = op {
            if t.value.is_null() && absent_member(doc, t.path.as_str()) {
                continue;
            }
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|mut e| {
            e.operation = i;
            invalid(format!("the JSON patch could not be applied: {e}"))
        })?;
    }
    Ok(())
}

/// Whether `pointer` names a member that an object of `doc` lacks. kube-apiserver's JSON
/// patch takes such a member as null, so a `test` for null passes there: kube-rs's finalizer
/// helper adds an object's first finalizer after testing that `/metadata/finalizers` is null.
/// (A missing object on the way, or an index past an array's end, still fails the test.)
fn absent_member(doc: &Value, pointer: &str) -> bool {
    let Some((parent, _)) = pointer.rsplit_once('/') else {
        return false;
    };
    doc.pointer(parent).is_some_and(Value::is_object) && doc.pointer(pointer).is_none()
}

/// The length of `v` as JSON, or `limit` if it is `limit` bytes or more (found without
/// writing more than that).
fn json_len_up_to(v: &Value, limit: usize) -> usize {
    struct Count {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n >= self.limit {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { n: 0, limit };
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.n,
        Err(_) => limit,
    }
}

/// Applies a PATCH body of `patch_type` to the current object's JSON. Public for the fuzz
/// targets (fuzz/), which feed it the bodies a client could send.
pub fn apply_patch(current: Value, patch_type: PatchType, patch: &[u8]) -> Result<Value, ApiError> {
    match patch_type {
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
            let mut doc = current;
            json_patch::merge(&mut doc, &p);
            Ok(doc)
        }
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            let mut doc = current;
            apply_json_patch(&mut doc, &p)?;
            Ok(doc)
        }
        PatchType::Apply => {
            let p = codec::parse_yaml(patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut doc = current;
            crate::strategic::merge(&mut doc, &p).map_err(ApiError::bad_request)?;
            Ok(doc)
        }
        PatchType::StrategicMerge => {
            let p: Value = serde_json::from_slice(patch).map_err(|e| {
                ApiError::bad_request(format!("invalid strategic merge patch: {e}"))
            })?;
            let mut doc = current;
            crate::strategic::merge(&mut doc, &p).map_err(ApiError::bad_request)?;
            Ok(doc)
        }
    }
}

impl Registry {
    pub fn new(store: Store) -> Registry {
        Registry {
            store,
            heartbeats: Default::default(),
            default_toleration_seconds: std::sync::Arc::new(AtomicI64::new(300)),
            service_ranges: Default::default(),
            manager: CONTROLLER_MANAGER.into(),
            via_scale: false,
            dry_run: false,
            warnings: Default::default(),
            kind: None,
            admission: Default::default(),
        }
    }

    /// The admission webhooks in force (the server installs the stored configurations).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// This registry with its writes as dry runs (`dryRun=All`) if `dry_run`.
    pub fn dry_run(&self, dry_run: bool) -> Registry {
        Registry {
            dry_run,
            ..self.clone()
        }
    }

    /// Runs a write closure as the store's guaranteed write (read, checks and changes on a
    /// snapshot, then a compare-and-swap in the writer, run again on a newer snapshot if it
    /// lost a race): stored, or only checked in a dry run. `fix` gives the answer the
    /// resourceVersions it was committed at.
    async fn write<T, F>(
        &self,
        mut f: F,
        fix: impl FnOnce(&mut T, &Renumber),
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnMut(&mut Txn<'_, '_>) -> Result<T, ApiError> + Send + 'static,
    {
        let warnings = self.warnings.clone();
        let before = {
            let notes = lock_warnings(&warnings);
            (notes.warnings.len(), notes.audit_annotations.len())
        };
        let mut ran = false;
        let once = move |txn: &mut Txn<'_, '_>| {
            if std::mem::replace(&mut ran, true) {
                // The run that lost its race gave its warnings already.
                let mut notes = lock_warnings(&warnings);
                notes.warnings.truncate(before.0);
                notes.audit_annotations.truncate(before.1);
            }
            f(txn)
        };
        let Committed {
            mut value,
            renumber,
        } = self.store.guaranteed_write(once, self.dry_run).await?;
        fix(&mut value, &renumber);
        Ok(value)
    }

    /// This registry with its admission warnings going to `sink`.
    pub fn with_warnings(&self, sink: Warnings) -> Registry {
        Registry {
            warnings: sink,
            ..self.clone()
        }
    }

    /// This registry writing as `manager` (the `fieldManager` of `metadata.managedFields`).
    pub fn with_manager(&self, manager: &str) -> Registry {
        Registry {
            manager: manager.into(),
            ..self.clone()
        }
    }

    /// This registry writing through the scale subresource (its writes are recorded as
    /// `subresource: scale`).
    pub fn via_scale(&self) -> Registry {
        Registry {
            via_scale: true,
            ..self.clone()
        }
    }

    fn manager(&self, part: Part) -> Manager {
        let scope = match scope_of(part) {
            Scope::Main if self.via_scale => Scope::Scale,
            other => other,
        };
        Manager::new(&*self.manager, scope)
    }

    /// Sets where ClusterIPs and NodePorts come from (`--service-cidr`,
    /// `--service-node-port-range`).
    pub fn set_service_ranges(&self, ranges: ServiceRanges) {
        if let Ok(mut r) = self.service_ranges.write() {
            *r = std::sync::Arc::new(ranges);
        }
    }

    fn service_ranges(&self) -> std::sync::Arc<ServiceRanges> {
        self.service_ranges
            .read()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Sets the tolerationSeconds new pods get for not-ready and unreachable nodes.
    pub fn set_default_toleration_seconds(&self, seconds: i64) {
        self.default_toleration_seconds
            .store(seconds, Ordering::Relaxed);
    }

    pub async fn get<K: Resource>(&self, ns: &str, name: &str) -> Result<K, ApiError> {
        let obj = self.store.get(self.kind::<K>(), ns, name).await?;
        typed(obj)
    }

    /// This registry for objects of `kind`: what the generic methods act on when `K` is
    /// [`api::custom::CustomObject`] (a built-in type names its kind itself).
    pub fn for_kind(&self, kind: Kind) -> Registry {
        Registry {
            kind: Some(kind),
            ..self.clone()
        }
    }

    /// The kind `K` stands for here.
    fn kind<K: Resource>(&self) -> Kind {
        match self.kind {
            Some(kind) if K::KIND == Kind::ANY_CUSTOM => kind,
            _ => K::KIND,
        }
    }

    /// Creates `obj` in `path_ns` (the namespace of the request path, if any).
    pub async fn create<K: Resource>(&self, obj: K, path_ns: Option<&str>) -> Result<K, ApiError> {
        let (obj, generate, json) = self.prepare_create(obj, path_ns)?;
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        let created = if let Some(hooks) = self.webhooks::<K>(Operation::Create, Part::Main) {
            drop(json);
            Box::pin(self.admitted_create(&hooks, obj, generate)).await?
        } else {
            let findings = judge_pod_security_json::<K>(&json, None);
            drop(json);
            self.write(
                move |txn| {
                    create_in(
                        txn,
                        &ranges,
                        obj.clone(),
                        generate,
                        findings.as_ref(),
                        &warnings,
                    )
                },
                fix_object,
            )
            .await?
        };
        // A node Lease made anew carries its own renewal.
        if let Some(l) = as_lease(&created).filter(|l| is_node_lease(l)) {
            self.heartbeats
                .forget_renewal_upto(&l.metadata.name, l.spec.renew_time);
        }
        Ok(created)
    }

    /// A create's work before the write: namespace, defaults, identity, validation, and the
    /// creator's ownership of every field it set. Answers the object and whether its name is
    /// generated.
    fn prepare_create<K: Resource>(
        &self,
        obj: K,
        path_ns: Option<&str>,
    ) -> Result<(K, bool, Value), ApiError> {
        let (mut obj, generate) = self.prepare_create_unowned(obj, path_ns)?;
        let mut managers = Managers::default();
        let json = codec::to_json_view(&obj, codec::View::Main);
        managers.update(
            None,
            &json,
            &self.manager(Part::Main),
            &obj.kind_of().info().api_version(),
            Time::now(),
        );
        obj.meta_mut().managed_fields = managers.encode();
        Ok((obj, generate, json))
    }

    /// [`Registry::prepare_create`] without managers.
    fn prepare_create_unowned<K: Resource>(
        &self,
        mut obj: K,
        path_ns: Option<&str>,
    ) -> Result<(K, bool), ApiError> {
        settle_namespace(&mut obj, path_ns)?;
        if !obj.meta().resource_version.is_empty() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        obj.set_defaults();
        prepare_for_create(&mut obj);
        if let Some(pod) = as_pod_mut(&mut obj) {
            add_default_tolerations(pod, self.default_toleration_seconds.load(Ordering::Relaxed));
        }
        {
            let meta = obj.meta_mut();
            meta.uid = uuid::Uuid::new_v4().to_string();
            meta.creation_timestamp = Some(Time::now());
            meta.deletion_timestamp = None;
            meta.deletion_grace_period_seconds = None;
            meta.generation = Some(1);
            meta.self_link = None;
            meta.managed_fields = None;
        }
        let generate = obj.meta().name.is_empty()
            && obj
                .meta()
                .generate_name
                .as_deref()
                .is_some_and(|g| !g.is_empty());
        if generate {
            // Validate with a placeholder suffix so a bad prefix is reported as such.
            let prefix = obj.meta().generate_name.clone().unwrap_or_default();
            obj.meta_mut().name = generated_name(&prefix);
        }
        // A Job's generated selector names its uid, and its name known only now (as Kubernetes' job
        // strategy generates it after the uid is set).
        if let Some(job) = (&mut obj as &mut dyn Any).downcast_mut::<api::batch::Job>() {
            api::batch::generate_job_selector(job);
        }
        validate(&obj)?;
        // Kubernetes' ValidatePodCreate: ephemeral containers come only through their
        // subresource, once the pod exists.
        if let Some(p) = as_pod(&obj).filter(|p| !p.spec.ephemeral_containers.is_empty()) {
            let forbidden = api::validation::FieldError::forbidden(
                "spec.ephemeralContainers",
                "cannot be set on create",
            );
            return Err(ApiError::invalid(
                Kind::Pod,
                &p.metadata.name,
                vec![forbidden],
            ));
        }
        Ok((obj, generate))
    }

    /// PUT: replaces the object (or its status). A non-empty resourceVersion is a precondition.
    pub async fn update<K: Resource>(
        &self,
        mut obj: K,
        path_ns: Option<&str>,
        name: &str,
        part: Part,
    ) -> Result<K, ApiError> {
        settle_namespace(&mut obj, path_ns)?;
        if obj.meta().name.is_empty() {
            obj.meta_mut().name = name.to_string();
        }
        if obj.meta().name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                obj.meta().name
            )));
        }
        let name = name.to_string();
        if let Some(hooks) = self.webhooks::<K>(Operation::Update, part) {
            let who = Ownership::Update(self.manager(part));
            let ns = obj.meta().namespace().to_string();
            return Box::pin(self.admitted_update(
                hooks,
                part,
                &ns,
                &name,
                "UpdateOptions",
                &mut move |_: &K| Ok((obj.clone(), who.clone())),
            ))
            .await;
        }
        if may_be_heartbeat::<K>(part) && !self.dry_run {
            if let Ok(old) = self.get::<K>(obj.meta().namespace(), &name).await {
                if let Some(shown) = heartbeat_write(&self.heartbeats, &old, &obj, part) {
                    return Ok(shown);
                }
            }
        }
        let beats = self.heartbeats.clone();
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        let who = Ownership::Update(self.manager(part));
        let kind = obj.kind_of();
        self.write(
            move |txn| {
                let ns = obj.meta().namespace().to_string();
                let old: K = get_existing(txn, kind, &ns, &name)?;
                apply_update(
                    txn,
                    &beats,
                    &ranges,
                    old,
                    obj.clone(),
                    part,
                    who.clone(),
                    &warnings,
                )
            },
            fix_object,
        )
        .await
    }

    /// PATCH: applies the patch to the current object inside the transaction.
    pub async fn patch<K: Resource>(
        &self,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        patch: Vec<u8>,
        part: Part,
    ) -> Result<K, ApiError> {
        if patch_type == PatchType::Apply {
            return self
                .apply(ns, name, &patch, false, part)
                .await
                .map(|(obj, _)| obj);
        }
        let (ns, name) = (ns.to_string(), name.to_string());
        let beats = self.heartbeats.clone();
        if let Some(hooks) = self.webhooks::<K>(Operation::Update, part) {
            let who = Ownership::Update(self.manager(part));
            let (n, m) = (ns.clone(), name.clone());
            return Box::pin(self.admitted_update(
                hooks,
                part,
                &ns,
                &name,
                "PatchOptions",
                &mut move |old: &K| {
                    Ok((
                        patched(&beats, old, &n, &m, patch_type, &patch)?,
                        who.clone(),
                    ))
                },
            ))
            .await;
        }
        if may_be_heartbeat::<K>(part) && !self.dry_run {
            if let Ok(old) = self.get::<K>(&ns, &name).await {
                let new = patched(&beats, &old, &ns, &name, patch_type, &patch);
                if let Some(shown) = new
                    .ok()
                    .and_then(|new| heartbeat_write(&beats, &old, &new, part))
                {
                    return Ok(shown);
                }
            }
        }
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        let who = Ownership::Update(self.manager(part));
        let kind = self.kind::<K>();
        self.write(
            move |txn| {
                let old: K = get_existing(txn, kind, &ns, &name)?;
                let new: K = patched(&beats, &old, &ns, &name, patch_type, &patch)?;
                apply_update(txn, &beats, &ranges, old, new, part, who.clone(), &warnings)
            },
            fix_object,
        )
        .await
    }

    /// Server-side apply of `body` (YAML or JSON) by this registry's manager: creates the
    /// object from the applied configuration when it does not exist (main resource only),
    /// otherwise merges it in with field ownership; a change to a field another manager owns
    /// is a conflict unless `force`. Answers the object and whether it was created.
    pub async fn apply<K: Resource>(
        &self,
        ns: &str,
        name: &str,
        body: &[u8],
        force: bool,
        part: Part,
    ) -> Result<(K, bool), ApiError> {
        let mut config =
            codec::parse_yaml(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let Some(meta) = config
            .as_object_mut()
            .map(|o| {
                o.entry("metadata")
                    .or_insert_with(|| Value::Object(Default::default()))
            })
            .and_then(Value::as_object_mut)
        else {
            return Err(ApiError::bad_request(
                "the applied configuration must be an object with an object metadata",
            ));
        };
        if meta.get("managedFields").is_some_and(|v| !v.is_null()) {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        match meta.get("name").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("name".into(), Value::String(name.to_string()));
            }
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )))
            }
            Some(_) => {}
        }
        let who = self.manager(part);
        let kind = self.kind::<K>();
        let api_version = kind.info().api_version();
        if part == Part::Main && matches!(self.get::<K>(ns, name).await, Err(e) if e.code() == 404)
        {
            let obj: K = decode_as(kind, config.clone())?;
            let path_ns = Some(ns).filter(|n| !n.is_empty());
            let (mut obj, _) = self.prepare_create_unowned(obj, path_ns)?;
            let mut managers = Managers::default();
            let empty = Value::Object(Default::default());
            managers
                .apply(
                    &empty,
                    &config,
                    config.clone(),
                    &who,
                    &api_version,
                    force,
                    Time::now(),
                )
                .map_err(|c| conflict_error(&c))?;
            obj.meta_mut().managed_fields = managers.encode();
            if let Some(hooks) = self.webhooks::<K>(Operation::Create, Part::Main) {
                let created = Box::pin(self.admitted_create(&hooks, obj, false)).await?;
                return Ok((created, true));
            }
            let ranges = self.service_ranges();
            let warnings = self.warnings.clone();
            let findings = judge_pod_security(&obj, None);
            let created = self
                .write(
                    move |txn| {
                        create_in(
                            txn,
                            &ranges,
                            obj.clone(),
                            false,
                            findings.as_ref(),
                            &warnings,
                        )
                    },
                    fix_object,
                )
                .await?;
            return Ok((created, true));
        }
        let (ns, name) = (ns.to_string(), name.to_string());
        let mut merge = {
            let ns = ns.clone();
            move |old: &K| applied(old, &config, &who, &api_version, force, kind, &ns)
        };
        if let Some(hooks) = self.webhooks::<K>(Operation::Update, part) {
            return Box::pin(self.admitted_update(
                hooks,
                part,
                &ns,
                &name,
                "PatchOptions",
                &mut merge,
            ))
            .await
            .map(|o| (o, false));
        }
        let beats = self.heartbeats.clone();
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        self.write(
            move |txn| {
                let old: K = get_existing(txn, kind, &ns, &name)?;
                let (new, ownership) = merge(&old)?;
                apply_update(txn, &beats, &ranges, old, new, part, ownership, &warnings)
                    .map(|o| (o, false))
            },
            fix_first,
        )
        .await
    }

    /// A read-modify-write by the server's own controllers.
    pub async fn mutate<K: Resource>(
        &self,
        ns: &str,
        name: &str,
        part: Part,
        f: impl FnMut(&mut K) -> Result<(), ApiError> + Send + 'static,
    ) -> Result<K, ApiError> {
        self.mutate_boxed(ns, name, part, Box::new(f)).await
    }

    /// [`Registry::mutate`] with the change boxed: compiled once per kind, not once per
    /// kind and caller (the controllers have many).
    async fn mutate_boxed<K: Resource>(
        &self,
        ns: &str,
        name: &str,
        part: Part,
        mut f: Change<K>,
    ) -> Result<K, ApiError> {
        let (ns, name) = (ns.to_string(), name.to_string());
        let who = Ownership::Update(self.manager(part));
        if let Some(hooks) = self.webhooks::<K>(Operation::Update, part) {
            return Box::pin(self.admitted_update(
                hooks,
                part,
                &ns,
                &name,
                "UpdateOptions",
                &mut move |old: &K| {
                    let mut new = old.clone();
                    f(&mut new)?;
                    Ok((new, who.clone()))
                },
            ))
            .await;
        }
        let beats = self.heartbeats.clone();
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        let kind = self.kind::<K>();
        self.write(
            move |txn| {
                let old: K = get_existing(txn, kind, &ns, &name)?;
                let mut new = old.clone();
                f(&mut new)?;
                apply_update(txn, &beats, &ranges, old, new, part, who.clone(), &warnings)
            },
            fix_object,
        )
        .await
    }

    /// Binds a pending pod to a node (the `binding` subresource).
    /// Recomputes a ResourceQuota's `status` (hard and used) from its namespace's objects,
    /// in one write, so it cannot race the admission that raises it.
    pub async fn sync_quota(&self, ns: &str, name: &str) -> Result<(), ApiError> {
        let (ns, name) = (ns.to_string(), name.to_string());
        self.write(
            move |txn| {
                let Some(AnyObject::ResourceQuota(mut q)) =
                    txn.get(Kind::ResourceQuota, &ns, &name)?
                else {
                    return Ok(());
                };
                if q.metadata.deletion_timestamp.is_some() {
                    return Ok(());
                }
                let used = quota_usage(txn, &q, &ns)?;
                let status = api::quota::status_for(&q, &used);
                if status != q.status {
                    q.status = status;
                    txn.put(q.into_any())?;
                }
                Ok(())
            },
            fix_nothing,
        )
        .await
    }

    pub async fn bind(&self, ns: &str, name: &str, node: String) -> Result<(), ApiError> {
        self.bind_recording(ns, name, node, None).await
    }

    /// [`Registry::bind`], creating `event` (the scheduler's Scheduled event) in the same
    /// write when the binding succeeds. An event that cannot be created does not fail the
    /// binding.
    pub async fn bind_recording(
        &self,
        ns: &str,
        name: &str,
        node: String,
        event: Option<api::core::Event>,
    ) -> Result<(), ApiError> {
        let event = event.and_then(|e| {
            self.prepare_create(e, Some(ns))
                .map(|(e, generate, _)| (e, generate))
                .inspect_err(|e| tracing::debug!(error = %e, "an event for a binding is invalid"))
                .ok()
        });
        let (ns, name) = (ns.to_string(), name.to_string());
        let beats = self.heartbeats.clone();
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        self.write(
            move |txn| {
                let old: Pod = get_existing(txn, Kind::Pod, &ns, &name)?;
                if old.metadata.deletion_timestamp.is_some() {
                    return Err(ApiError::conflict(
                        Kind::Pod,
                        &name,
                        "the pod is being deleted",
                    ));
                }
                if let Some(current) = old.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                    return Err(ApiError::conflict(
                        Kind::Pod,
                        &name,
                        &format!("pod {name} is already assigned to node \"{current}\""),
                    ));
                }
                // As kube-apiserver's binding does, the same write says PodScheduled=True
                // (the status is carried over from `base` by the main-part update).
                let mut base = old;
                crate::scheduler::set_scheduled_condition(&mut base.status, "True", None, None);
                let mut new = base.clone();
                new.spec.node_name = Some(node.clone());
                apply_update_checked(
                    txn,
                    &beats,
                    &ranges,
                    base,
                    new,
                    Part::Main,
                    false,
                    Ownership::Keep,
                    &warnings,
                )?;
                if let Some((event, generate)) = event.clone() {
                    // Nothing of a failed create reaches the transaction.
                    if let Err(e) = create_in(txn, &ranges, event, generate, None, &warnings) {
                        tracing::debug!(error = %e, "recording a binding's event failed");
                    }
                }
                Ok(())
            },
            fix_nothing,
        )
        .await
    }

    /// DELETE. Returns the object as it stands after the call: gone (with its final
    /// resourceVersion) or marked for deletion.
    pub async fn delete<K: Resource>(
        &self,
        ns: &str,
        name: &str,
        opts: DeleteOptions,
    ) -> Result<(K, bool), ApiError> {
        let kind = self.kind::<K>();
        if K::KIND == Kind::Namespace && SYSTEM_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        if K::KIND == Kind::PriorityClass
            && api::scheduling::SYSTEM_CLASSES.iter().any(|c| c.0 == name)
        {
            return Err(ApiError::forbidden_object(
                kind,
                name,
                "this is a system priority class and cannot be deleted",
            ));
        }
        let propagation = Propagation::of(&opts).map_err(|m| {
            ApiError::invalid(
                kind,
                name,
                vec![api::validation::FieldError::invalid(
                    "propagationPolicy",
                    opts.propagation_policy.clone().unwrap_or_default(),
                    &m,
                )],
            )
        })?;
        if let Some(hooks) = self.webhooks::<K>(Operation::Delete, Part::Main) {
            return Box::pin(self.admitted_delete(hooks, ns, name, opts, propagation)).await;
        }
        self.delete_now(ns, name, opts, propagation).await
    }

    /// DELETE, its checks done.
    async fn delete_now<K: Resource>(
        &self,
        ns: &str,
        name: &str,
        opts: DeleteOptions,
        propagation: Propagation,
    ) -> Result<(K, bool), ApiError> {
        let kind = self.kind::<K>();
        let (ns, name) = (ns.to_string(), name.to_string());
        self.write(move |txn| {
                let mut obj: K = get_existing(txn, kind, &ns, &name)?;
                if let Some(pre) = &opts.preconditions {
                    if let Some(uid) = pre.uid.as_deref().filter(|u| *u != obj.meta().uid) {
                        return Err(ApiError::conflict(
                            kind,
                            &name,
                            &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", obj.meta().uid),
                        ));
                    }
                    if let Some(rv) = pre.resource_version.as_deref().filter(|r| *r != obj.meta().resource_version) {
                        return Err(ApiError::conflict(
                            kind,
                            &name,
                            &format!(
                                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                                obj.meta().resource_version
                            ),
                        ));
                    }
                }
                let grace = grace_period(&obj, &opts);
                let terminating = obj.meta().deletion_timestamp.is_some();
                let mut marked = obj.clone();
                {
                    let meta = marked.meta_mut();
                    if !terminating || grace < meta.deletion_grace_period_seconds.unwrap_or(i64::MAX) {
                        // Any int64 grace period is taken (as kube-apiserver takes it);
                        // the time saturates at the last one RFC 3339 can write.
                        meta.deletion_timestamp = Some(Time::now().plus_seconds(grace));
                        meta.deletion_grace_period_seconds = Some(grace);
                    }
                }
                if K::KIND != Kind::Namespace {
                    let finalizers = &mut marked.meta_mut().finalizers;
                    let (add, drop) = match propagation {
                        Propagation::Background => (None, None),
                        Propagation::Foreground => (Some(FOREGROUND_FINALIZER), Some(ORPHAN_FINALIZER)),
                        Propagation::Orphan => (Some(ORPHAN_FINALIZER), Some(FOREGROUND_FINALIZER)),
                    };
                    if let Some(add) = add {
                        finalizers.retain(|f| Some(f.as_str()) != drop);
                        if !finalizers.iter().any(|f| f == add) {
                            finalizers.push(add.to_string());
                        }
                    }
                }
                if K::KIND == Kind::Namespace {
                    if let Some(n) = as_namespace_mut(&mut marked) {
                        n.status.phase = Some("Terminating".into());
                    }
                }
                if ready_to_remove(&marked) || (K::KIND != Kind::Namespace && grace == 0 && marked.meta().finalizers.is_empty()) {
                    let gone = typed(txn.delete(kind, &ns, &name)?)?;
                    return Ok((gone, true));
                }
                if marked == obj {
                    return Ok((obj, false));
                }
                obj = typed(txn.put(marked.into_any())?)?;
                Ok((obj, false))
            }, fix_first)
            .await
    }
}

/// A server-side apply of `config` by `who` merged into `old`: the new object and its
/// managers, or the conflict with other managers (unless `force`).
fn applied<K: Resource>(
    old: &K,
    config: &Value,
    who: &Manager,
    api_version: &str,
    force: bool,
    kind: Kind,
    ns: &str,
) -> Result<(K, Ownership), ApiError> {
    let live = codec::to_json(old);
    let mut merged = live.clone();
    crate::strategic::merge(&mut merged, config).map_err(ApiError::bad_request)?;
    let before = managers_of(old);
    let mut managers = before.clone();
    let now = Time::now();
    let mut merged =
        match managers.apply(&live, config, merged.clone(), who, api_version, force, now) {
            Ok(m) => m,
            // kubectl's server-side apply takes over what it applied client-side.
            Err(c)
                if who.name == fieldmanager::KUBECTL_APPLY
                    && fieldmanager::last_applied_fields(&live, who.scope)
                        .is_some_and(|allowed| c.within(&allowed)) =>
            {
                managers = before;
                managers
                    .apply(&live, config, merged, who, api_version, true, now)
                    .map_err(|c| conflict_error(&c))?
            }
            Err(c) => return Err(conflict_error(&c)),
        };
    if who.name == fieldmanager::KUBECTL_APPLY {
        fieldmanager::sync_last_applied(&mut merged, config);
    }
    let mut new: K = decode_as(kind, merged)?;
    if kind.info().namespaced && new.meta().namespace() != ns {
        return Err(ApiError::bad_request(
            "metadata.namespace may not be changed by a patch",
        ));
    }
    if new.meta().resource_version.is_empty() {
        new.meta_mut().resource_version = old.meta().resource_version.clone();
    }
    Ok((new, Ownership::Applied(managers)))
}

/// The subresource a write of `part` is, as admission names it.
fn subresource_of(part: Part, via_scale: bool) -> &'static str {
    match part {
        Part::Main if via_scale => "scale",
        Part::Main => "",
        Part::Status => "status",
        Part::EphemeralContainers => "ephemeralcontainers",
    }
}

/// Admission webhooks (docs/design/admission.md §2): a write that a webhook's rules take is
/// done in two phases. Outside any transaction the object is worked out from the stored one
/// read first, passed through the mutating webhooks, committed as a dry run (so the
/// validating webhooks see what would be stored, after validation and the built-in
/// admission), and passed to the validating webhooks; then it is committed on the condition
/// that the stored object is still the one read, or all of it is done again.
impl Registry {
    /// The webhooks a write of this registry's kind may go to (`None`: the one-transaction
    /// path).
    fn webhooks<K: Resource>(&self, operation: Operation, part: Part) -> Option<Candidates> {
        let sub = subresource_of(part, self.via_scale);
        self.admission.candidates(self.kind::<K>(), sub, operation)
    }

    /// A write as the webhooks are told of it; its Namespace read only when `hooks` select
    /// by its labels or read it.
    async fn admission_request<K: Resource>(
        &self,
        hooks: &Candidates,
        operation: Operation,
        part: Part,
        ns: &str,
        name: &str,
        options: &str,
    ) -> Result<AdmissionRequest, ApiError> {
        let kind = self.kind::<K>();
        let namespace = if kind.info().namespaced && !ns.is_empty() && hooks.needs_namespace() {
            match self.store.get(Kind::Namespace, "", ns).await {
                Ok(n) => Some(n),
                Err(crate::store::StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        let user = lock_warnings(&self.warnings).user.clone();
        Ok(AdmissionRequest {
            kind,
            subresource: subresource_of(part, self.via_scale).into(),
            operation,
            name: name.into(),
            namespace: ns.into(),
            user_info: dispatch::user_info(user.as_ref()),
            dry_run: self.dry_run,
            options: dispatch::options(options, &self.manager, self.dry_run),
            namespace_labels: namespace.as_ref().map(|n| n.meta().labels.clone()),
            namespace_object: namespace
                .map(|n| crate::admission::conditions::namespace_object(&n.to_json())),
        })
    }

    /// `input` through the mutating webhooks (`reshape` makes the changed object a request
    /// again: defaults, and for a create its checks), `commit` as a dry run, the validating
    /// webhooks on its answer, then `commit` for real.
    ///
    /// Generic over the kind only: the write's closures come boxed, so that this (large)
    /// function is compiled once per kind, not once per kind and caller.
    async fn admitted<K: Resource>(
        &self,
        hooks: &Candidates,
        request: &AdmissionRequest,
        old: Option<&K>,
        mut input: K,
        reshape: fn(K, &K) -> Result<K, ApiError>,
        commit: Commit<K>,
    ) -> Result<K, ApiError> {
        let kind = self.kind::<K>();
        let old_json = old.map(codec::to_json);
        if hooks.policies_only() {
            // No webhook to wait for: the policies run on the object about to be stored, in
            // the write's one commit (a denial leaves no trace of it).
            let object = codec::to_json(&input);
            let Some(policies) = hooks
                .prepare_policies(self, request, Some(&object), old_json.as_ref())
                .await
            else {
                return self
                    .write(move |txn| commit(txn, input.clone()), fix_object)
                    .await;
            };
            let notes = self.warnings.clone();
            // A create the write stores as it is: the policies run here, not on the store's
            // one writer (where every write waits for them); again there only if a
            // generated name collided and was made anew. A denial is left to the write, so
            // that its own refusals (no such namespace, ...) come first, as in kube.
            if old.is_none() && !changed_in_create(kind) && policies.allow(&notes, &object) {
                let name = input.meta().name.clone();
                return self
                    .write(
                        move |txn| {
                            let stored = commit(txn, input.clone())?;
                            if stored.meta().name != name {
                                policies.run(&notes, Some(&codec::to_json(&stored)), None)?;
                            }
                            Ok(stored)
                        },
                        fix_object,
                    )
                    .await;
            }
            return self
                .write(
                    move |txn| {
                        let stored = commit(txn, input.clone())?;
                        policies.run(&notes, Some(&codec::to_json(&stored)), old_json.as_ref())?;
                        Ok(stored)
                    },
                    fix_object,
                )
                .await;
        }
        if hooks.mutates() {
            let before = codec::to_json(&input);
            let mut object = Some(before.clone());
            hooks
                .mutate(
                    self,
                    request,
                    &self.warnings,
                    &mut object,
                    old_json.as_ref(),
                )
                .await?;
            if let Some(after) = object.filter(|a| *a != before) {
                let mutated: K = decode_as(kind, after)?;
                input = reshape(mutated, &input)?;
            }
        }
        let noted = {
            let n = lock_warnings(&self.warnings);
            (n.warnings.len(), n.audit_annotations.len())
        };
        let (trial, tried) = (commit.clone(), input.clone());
        let shown = self
            .dry_run(true)
            .write(move |txn| trial(txn, tried.clone()), fix_object)
            .await?;
        if self.dry_run {
            hooks
                .validate(
                    self,
                    request,
                    &self.warnings,
                    Some(&codec::to_json(&shown)),
                    old_json.as_ref(),
                )
                .await?;
            return Ok(shown);
        }
        {
            // The commit below says it all again.
            let mut n = lock_warnings(&self.warnings);
            n.warnings.truncate(noted.0);
            n.audit_annotations.truncate(noted.1);
        }
        hooks
            .validate(
                self,
                request,
                &self.warnings,
                Some(&codec::to_json(&shown)),
                old_json.as_ref(),
            )
            .await?;
        self.write(move |txn| commit(txn, input.clone()), fix_object)
            .await
    }

    /// A create that webhooks take.
    async fn admitted_create<K: Resource>(
        &self,
        hooks: &Candidates,
        obj: K,
        generate: bool,
    ) -> Result<K, ApiError> {
        let request = self
            .admission_request::<K>(
                hooks,
                Operation::Create,
                Part::Main,
                obj.meta().namespace(),
                &obj.meta().name,
                "CreateOptions",
            )
            .await?;
        let ranges = self.service_ranges();
        let warnings = self.warnings.clone();
        let commit: Commit<K> = std::sync::Arc::new(move |txn: &mut Txn<'_, '_>, obj: K| {
            let findings = judge_pod_security(&obj, None);
            create_in(txn, &ranges, obj, generate, findings.as_ref(), &warnings)
        });
        // What the webhooks changed is checked as the request was; the server's own fields
        // stay (kube sets them after the mutating webhooks).
        let reshape = |mut new: K, before: &K| {
            {
                let (b, n) = (before.meta(), new.meta_mut());
                n.uid = b.uid.clone();
                n.creation_timestamp = b.creation_timestamp;
                n.generation = b.generation;
                n.resource_version.clear();
                n.deletion_timestamp = None;
                n.deletion_grace_period_seconds = None;
                if n.namespace != b.namespace {
                    return Err(ApiError::bad_request(
                        "metadata.namespace may not be changed by an admission webhook",
                    ));
                }
            }
            new.set_defaults();
            prepare_for_create(&mut new);
            validate(&new)?;
            Ok(new)
        };
        self.admitted(hooks, &request, None, obj, reshape, commit)
            .await
    }

    /// An update (PUT, PATCH, apply, a controller's change) that webhooks take: `compute`
    /// makes the new object from the stored one, again after a race.
    async fn admitted_update<K: Resource>(
        &self,
        hooks: Candidates,
        part: Part,
        ns: &str,
        name: &str,
        options: &str,
        // Borrowed as `dyn`: one copy of this loop per kind, not per kind and caller.
        compute: &mut Compute<K>,
    ) -> Result<K, ApiError> {
        let kind = self.kind::<K>();
        let request = self
            .admission_request::<K>(&hooks, Operation::Update, part, ns, name, options)
            .await?;
        let mut tries = 0;
        loop {
            let old: K = self.get(ns, name).await?;
            let (mut new, who) = compute(&old)?;
            // Committed only over the object the webhooks were shown.
            let ours = new.meta().resource_version.is_empty();
            if ours {
                new.meta_mut().resource_version = old.meta().resource_version.clone();
            }
            let (beats, ranges, warnings) = (
                self.heartbeats.clone(),
                self.service_ranges(),
                self.warnings.clone(),
            );
            let (n, m) = (ns.to_string(), name.to_string());
            let commit: Commit<K> = std::sync::Arc::new(move |txn: &mut Txn<'_, '_>, new: K| {
                let current: K = get_existing(txn, kind, &n, &m)?;
                apply_update(
                    txn,
                    &beats,
                    &ranges,
                    current,
                    new,
                    part,
                    who.clone(),
                    &warnings,
                )
            });
            let reshape = |mut new: K, _: &K| {
                new.set_defaults();
                Ok(new)
            };
            match self
                .admitted(&hooks, &request, Some(&old), new, reshape, commit)
                .await
            {
                Err(e) if e.code() == 409 && ours && tries < 4 && self.changed(&old).await => {
                    tries += 1;
                }
                answer => return answer,
            }
        }
    }

    /// Whether the stored object is no longer `old`.
    async fn changed<K: Resource>(&self, old: &K) -> bool {
        let m = old.meta();
        match self
            .store
            .get(self.kind::<K>(), m.namespace(), &m.name)
            .await
        {
            Ok(now) => now.meta().resource_version != m.resource_version,
            Err(_) => true,
        }
    }

    /// A delete that webhooks take: they see the stored object (`oldObject`), and it is
    /// deleted only as they saw it.
    async fn admitted_delete<K: Resource>(
        &self,
        hooks: Candidates,
        ns: &str,
        name: &str,
        opts: DeleteOptions,
        propagation: Propagation,
    ) -> Result<(K, bool), ApiError> {
        let request = self
            .admission_request::<K>(
                &hooks,
                Operation::Delete,
                Part::Main,
                ns,
                name,
                "DeleteOptions",
            )
            .await?;
        let mut tries = 0;
        loop {
            let old: K = self.get(ns, name).await?;
            let old_json = codec::to_json(&old);
            let mut none = None;
            hooks
                .mutate(self, &request, &self.warnings, &mut none, Some(&old_json))
                .await?;
            hooks
                .validate(self, &request, &self.warnings, None, Some(&old_json))
                .await?;
            let mut opts = opts.clone();
            let ours = opts.preconditions.is_none();
            if ours {
                opts.preconditions = Some(api::meta::Preconditions {
                    uid: Some(old.meta().uid.clone()),
                    resource_version: Some(old.meta().resource_version.clone()),
                });
            }
            match self.delete_now(ns, name, opts, propagation).await {
                Err(e) if e.code() == 409 && ours && tries < 4 => tries += 1,
                answer => return answer,
            }
        }
    }
}

/// The grace period a delete gets: pods default to their spec's, and unbound or finished
/// pods go at once; other kinds have none.
fn grace_period<K: Resource>(obj: &K, opts: &DeleteOptions) -> i64 {
    let Some(pod) = as_pod(obj) else { return 0 };
    let unbound = pod.spec.node_name.as_deref().unwrap_or("").is_empty();
    let phase = pod.status.phase.as_deref().unwrap_or("");
    if unbound || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    opts.grace_period_seconds
        .or(pod.spec.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1}
        })
    }

    /// Each copy of the map that holds the earlier copies doubles it: forty of them, 3 KiB of
    /// patch, asked for terabytes (the fuzz input is fuzz/corpus/json_patch/copy-doubling).
    #[test]
    fn a_json_patch_whose_copies_double_the_object_is_refused() {
        let mut ops = vec![serde_json::json!(
            {"op": "add", "path": "/metadata/annotations", "value": {"a": "x".repeat(100)}}
        )];
        for i in 0..40 {
            ops.push(serde_json::json!({
                "op": "copy", "from": "/metadata/annotations", "path": format!("/metadata/annotations/a{i}")
            }));
        }
        let body = serde_json::to_vec(&ops).unwrap();
        let started = std::time::Instant::now();
        let err = apply_patch(deployment(), PatchType::Json, &body).unwrap_err();
        assert_eq!(err.code(), 422);
        assert!(err.to_string().contains("copies more than"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Copies within the limit are applied.
        let body = serde_json::to_vec(&ops[..10]).unwrap();
        let patched = apply_patch(deployment(), PatchType::Json, &body).unwrap();
        assert!(patched
            .pointer("/metadata/annotations/a8/a7/a6/a")
            .is_some());
    }

    #[test]
    fn a_failed_json_patch_names_its_failed_operation() {
        let ops = serde_json::json!([
            {"op": "copy", "from": "/spec/replicas", "path": "/spec/minReadySeconds"},
            {"op": "test", "path": "/spec/minReadySeconds", "value": 1},
            {"op": "remove", "path": "/spec/paused"}
        ]);
        let body = serde_json::to_vec(&ops).unwrap();
        let err = apply_patch(deployment(), PatchType::Json, &body).unwrap_err();
        assert_eq!(err.code(), 422);
        assert!(err.to_string().contains("operation '/2'"), "{err}");
        let body = serde_json::to_vec(&ops.as_array().unwrap()[..2]).unwrap();
        let patched = apply_patch(deployment(), PatchType::Json, &body).unwrap();
        assert_eq!(patched["spec"]["minReadySeconds"], 1);
    }

    /// Any int64 grace period is taken; the deletion time saturates at the last time RFC
    /// 3339 can write (now + i64::MAX seconds overflowed: a panic, or in a release build a
    /// time before 1970 that then panicked when the pod was written as JSON).
    #[test]
    fn a_pod_deleted_with_the_largest_grace_period_is_marked_at_the_last_writable_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::store::Store::open(crate::store::StoreConfig::in_dir(dir.path()))
            .expect("store");
        let registry = Registry::new(store);
        smol::block_on(async {
            let mut ns = api::core::Namespace::default();
            ns.metadata.name = "default".into();
            registry.create(ns, None).await.expect("namespace");
            for (name, spec_grace, asked) in [
                ("asked", None, Some(i64::MAX)),
                ("spec", Some(i64::MAX), None),
                ("negative", None, Some(i64::MIN)),
            ] {
                let mut pod: Pod = api::codec::from_json(serde_json::json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": spec_grace,
                             "containers": [{"name": "c", "image": "busybox"}]}
                }))
                .expect("pod");
                pod.spec.termination_grace_period_seconds = spec_grace;
                registry.create(pod, None).await.expect("create");
                let opts = DeleteOptions {
                    grace_period_seconds: asked,
                    ..Default::default()
                };
                let (marked, gone) = registry
                    .delete::<Pod>("default", name, opts)
                    .await
                    .expect("delete");
                if name == "negative" {
                    assert!(gone, "a negative grace period deletes at once");
                    continue;
                }
                assert!(!gone);
                assert_eq!(
                    marked.metadata.deletion_timestamp,
                    Some(Time::MAX),
                    "{name}"
                );
                assert_eq!(
                    marked.metadata.deletion_grace_period_seconds,
                    Some(i64::MAX)
                );
                let json = serde_json::to_value(api::codec::json(&marked)).expect("json");
                assert_eq!(
                    json["metadata"]["deletionTimestamp"],
                    "9999-12-31T23:59:59Z"
                );
            }
        });
    }

    #[test]
    fn a_json_patch_of_more_than_ten_thousand_operations_is_refused() {
        let op = serde_json::json!({"op": "test", "path": "/spec/replicas", "value": 1});
        let ops = vec![op; MAX_JSON_PATCH_OPERATIONS + 1];
        let body = serde_json::to_vec(&ops).unwrap();
        let err = apply_patch(deployment(), PatchType::Json, &body).unwrap_err();
        assert_eq!(err.code(), 413);
        let ok = serde_json::to_vec(&ops[1..]).unwrap();
        apply_patch(deployment(), PatchType::Json, &ok).unwrap();
    }
}
