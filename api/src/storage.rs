//! Storage: core/v1 PersistentVolume and PersistentVolumeClaim, storage.k8s.io/v1
//! StorageClass, and the matching rules the PV binder and the scheduler share.
//!
//! skiff provisions volumes itself, as k3s does with its bundled local-path provisioner: the
//! default StorageClass `local-path` names the provisioner `rancher.io/local-path` and binds
//! on first consumer; a provisioned volume is a directory under the data directory of the
//! node the claim's first pod was scheduled to.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{
    omit_empty, spec_and_status, HostPathVolumeSource, NodeSelector, ObjectReference,
};
use crate::meta::{LabelSelector, ObjectMeta, Opaque, Quantity, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of StorageClass.
pub const GROUP: &str = "storage.k8s.io";

/// The provisioner name of skiff's built-in provisioner (k3s' local-path provisioner's).
pub const LOCAL_PATH_PROVISIONER: &str = "rancher.io/local-path";
/// The name of the default StorageClass the server creates at start.
pub const LOCAL_PATH_CLASS: &str = "local-path";
/// Marks the default StorageClass (value "true").
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// The node the scheduler chose for a WaitForFirstConsumer claim's first pod.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The provisioner asked to provision a claim (and its beta spelling).
pub const STORAGE_PROVISIONER_ANNOTATION: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER_ANNOTATION: &str =
    "volume.beta.kubernetes.io/storage-provisioner";
/// The provisioner that made a volume.
pub const PROVISIONED_BY_ANNOTATION: &str = "pv.kubernetes.io/provisioned-by";
/// Set on a claim once the binder completed its binding.
pub const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim and a volume the binder (not the user) bound.
pub const BOUND_BY_CONTROLLER_ANNOTATION: &str = "pv.kubernetes.io/bound-by-controller";
/// Kept on a claim while a pod uses it.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// Kept on a volume while it is bound.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";
/// Kept on a provisioned local-path volume until its node's agent removed the directory
/// (the role external provisioners' `external-provisioner.volume.kubernetes.io/finalizer`
/// plays for their deleters).
pub const LOCAL_PATH_CLEANUP_FINALIZER: &str = "storage.skiff.io/local-path-cleanup";
/// The annotation of a Node naming the directory its agent keeps local-path volumes in.
pub const NODE_LOCAL_PATH_ANNOTATION: &str = "storage.skiff.io/local-path-dir";

pub const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

// ---------------------------------------------------------------------------------------
// PersistentVolume

/// core/v1 PersistentVolume.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolume")]
#[schemars(
    description = "PersistentVolume (PV) is a storage resource provisioned by an administrator. It is analogous to a node."
)]
pub struct PersistentVolume {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The volume's capacity, access modes and source.
    pub spec: PersistentVolumeSpec,
    /// What the binder last observed of the volume.
    pub status: PersistentVolumeStatus,
}

/// core/v1 PersistentVolumeSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolumeSpec")]
#[schemars(description = "PersistentVolumeSpec is the specification of a persistent volume.")]
pub struct PersistentVolumeSpec {
    /// The volume's resources, `storage` among them.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub capacity: BTreeMap<String, Quantity>,
    /// A directory of the node.
    pub host_path: Option<HostPathVolumeSource>,
    /// A local disk or directory of one node (node affinity required).
    pub local: Option<LocalVolumeSource>,
    /// An NFS share. Kept, not acted on.
    pub nfs: Option<Opaque>,
    /// A CSI volume. Kept, not acted on.
    pub csi: Option<Opaque>,
    /// ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod.
    pub access_modes: Vec<String>,
    /// The claim bound to this volume (or reserved for it).
    pub claim_ref: Option<ObjectReference>,
    /// What happens to the volume when its claim is released: Retain (default for
    /// manually created volumes), Delete (default for provisioned ones) or Recycle.
    pub persistent_volume_reclaim_policy: Option<String>,
    /// The StorageClass this volume belongs to; empty means no class.
    pub storage_class_name: Option<String>,
    /// Mount options. Kept, not acted on.
    pub mount_options: Vec<String>,
    /// Filesystem (default) or Block.
    pub volume_mode: Option<String>,
    /// The nodes this volume can be used from.
    pub node_affinity: Option<VolumeNodeAffinity>,
    /// VolumeAttributesClass. Kept, not acted on.
    pub volume_attributes_class_name: Option<String>,
}

/// core/v1 LocalVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LocalVolumeSource")]
#[schemars(description = "Local represents directly-attached storage with node affinity")]
pub struct LocalVolumeSource {
    /// The full path to the volume on the node.
    pub path: String,
    /// Filesystem type. Kept, not acted on.
    pub fs_type: Option<String>,
}

/// core/v1 VolumeNodeAffinity.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.VolumeNodeAffinity")]
#[schemars(
    description = "VolumeNodeAffinity defines constraints that limit what nodes this volume can be accessed from."
)]
pub struct VolumeNodeAffinity {
    /// The nodes the volume must be used from.
    pub required: Option<NodeSelector>,
}

/// core/v1 PersistentVolumeStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolumeStatus")]
#[schemars(description = "PersistentVolumeStatus is the current status of a persistent volume.")]
pub struct PersistentVolumeStatus {
    /// Pending, Available, Bound, Released or Failed.
    pub phase: Option<String>,
    /// Why the volume failed, human-readable.
    pub message: Option<String>,
    /// Why the volume failed, CamelCase.
    pub reason: Option<String>,
    /// When the phase last changed.
    pub last_phase_transition_time: Option<Time>,
}

impl Resource for PersistentVolume {
    const KIND: Kind = Kind::PersistentVolume;
    crate::resource_basics!(PersistentVolume);
    spec_and_status!();

    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        s.persistent_volume_reclaim_policy
            .get_or_insert_with(|| "Retain".into());
        s.volume_mode.get_or_insert_with(|| "Filesystem".into());
        if let Some(h) = &mut s.host_path {
            h.type_.get_or_insert_with(String::new);
        }
        self.status.phase.get_or_insert_with(|| "Pending".into());
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::PersistentVolume);
        let s = &self.spec;
        if s.access_modes.is_empty() {
            errs.push(FieldError::required("spec.accessModes"));
        }
        errs.extend(validate_access_modes(&s.access_modes, "spec.accessModes"));
        match s.capacity.get("storage") {
            None => errs.push(FieldError::required("spec.capacity")),
            Some(q) if q.value().is_err() => errs.push(FieldError::invalid(
                "spec.capacity[storage]",
                q,
                "must be a valid quantity",
            )),
            Some(_) => {}
        }
        if s.capacity.keys().any(|k| k != "storage") {
            let bad: Vec<&str> = s
                .capacity
                .keys()
                .filter(|k| *k != "storage")
                .map(|k| k.as_str())
                .collect();
            errs.push(FieldError::not_supported(
                "spec.capacity",
                bad.join(","),
                &["storage"],
            ));
        }
        let sources = [
            s.host_path.is_some(),
            s.local.is_some(),
            s.nfs.is_some(),
            s.csi.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if sources == 0 {
            errs.push(FieldError::required_msg(
                "spec",
                "must specify a volume type",
            ));
        } else if sources > 1 {
            errs.push(FieldError::forbidden(
                "spec",
                "may not specify more than 1 volume type",
            ));
        }
        if let Some(h) = &s.host_path {
            if h.path.is_empty() {
                errs.push(FieldError::required("spec.hostPath.path"));
            }
        }
        if let Some(l) = &s.local {
            if l.path.is_empty() {
                errs.push(FieldError::required("spec.local.path"));
            }
            if s.node_affinity
                .as_ref()
                .and_then(|a| a.required.as_ref())
                .is_none()
            {
                errs.push(FieldError::required_msg(
                    "spec.nodeAffinity",
                    "Local volume requires node affinity",
                ));
            }
        }
        if let Some(p) = &s.persistent_volume_reclaim_policy {
            if !["Delete", "Recycle", "Retain"].contains(&p.as_str()) {
                errs.push(FieldError::not_supported(
                    "spec.persistentVolumeReclaimPolicy",
                    p,
                    &["Delete", "Recycle", "Retain"],
                ));
            }
        }
        if let Some(m) = &s.volume_mode {
            if m != "Block" && m != "Filesystem" {
                errs.push(FieldError::not_supported(
                    "spec.volumeMode",
                    m,
                    &["Block", "Filesystem"],
                ));
            }
        }
        if let Some(c) = s.storage_class_name.as_deref().filter(|c| !c.is_empty()) {
            if let Err(m) = validation::dns1123_subdomain(c) {
                errs.push(FieldError::invalid("spec.storageClassName", c, m));
            }
        }
        if let Some(terms) = s
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
            .map(|r| &r.node_selector_terms)
        {
            if terms.is_empty() {
                errs.push(FieldError::required_msg(
                    "spec.nodeAffinity.required.nodeSelectorTerms",
                    "must have at least one node selector term",
                ));
            }
        }
        errs
    }
}

// ---------------------------------------------------------------------------------------
// PersistentVolumeClaim

/// core/v1 PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolumeClaim")]
#[schemars(
    description = "PersistentVolumeClaim is a user's request for and claim to a persistent volume"
)]
pub struct PersistentVolumeClaim {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the claim asks for.
    pub spec: PersistentVolumeClaimSpec,
    /// What the binder last observed of the claim.
    pub status: PersistentVolumeClaimStatus,
}

/// core/v1 PersistentVolumeClaimSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolumeClaimSpec")]
#[schemars(
    description = "PersistentVolumeClaimSpec describes the common attributes of storage devices and allows a Source for provider-specific attributes"
)]
pub struct PersistentVolumeClaimSpec {
    /// The access modes the volume must offer.
    pub access_modes: Vec<String>,
    /// A label query over volumes to consider for binding.
    pub selector: Option<LabelSelector>,
    /// The storage the claim needs (`requests.storage`).
    pub resources: VolumeResourceRequirements,
    /// The volume bound to this claim (set by the binder, or by the user to pre-bind).
    pub volume_name: Option<String>,
    /// The StorageClass the claim asks for; unset means the default class, empty means none.
    pub storage_class_name: Option<String>,
    /// Filesystem (default) or Block.
    pub volume_mode: Option<String>,
    /// A data source. Kept, not acted on.
    pub data_source: Option<Opaque>,
    /// A data source reference. Kept, not acted on.
    pub data_source_ref: Option<Opaque>,
    /// VolumeAttributesClass. Kept, not acted on.
    pub volume_attributes_class_name: Option<String>,
}

/// core/v1 VolumeResourceRequirements.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.VolumeResourceRequirements")]
#[schemars(
    description = "VolumeResourceRequirements describes the storage resource requirements for a volume."
)]
pub struct VolumeResourceRequirements {
    /// The most storage the claim may use.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub limits: BTreeMap<String, Quantity>,
    /// The least storage the claim needs.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub requests: BTreeMap<String, Quantity>,
}

/// core/v1 PersistentVolumeClaimStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolumeClaimStatus")]
#[schemars(
    description = "PersistentVolumeClaimStatus is the current status of a persistent volume claim."
)]
pub struct PersistentVolumeClaimStatus {
    /// Pending, Bound or Lost.
    pub phase: Option<String>,
    /// The access modes of the bound volume.
    pub access_modes: Vec<String>,
    /// The capacity of the bound volume.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Conditions. Kept.
    pub conditions: Vec<Opaque>,
}

impl Resource for PersistentVolumeClaim {
    const KIND: Kind = Kind::PersistentVolumeClaim;
    crate::resource_basics!(PersistentVolumeClaim);
    spec_and_status!();

    fn set_defaults(&mut self) {
        self.spec
            .volume_mode
            .get_or_insert_with(|| "Filesystem".into());
        self.status.phase.get_or_insert_with(|| "Pending".into());
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::PersistentVolumeClaim);
        let s = &self.spec;
        if s.access_modes.is_empty() {
            errs.push(FieldError::required_msg(
                "spec.accessModes",
                "at least 1 access mode is required",
            ));
        }
        errs.extend(validate_access_modes(&s.access_modes, "spec.accessModes"));
        match s.resources.requests.get("storage") {
            None => errs.push(FieldError::required("spec.resources[storage]")),
            Some(q) => match q.value() {
                Err(_) => errs.push(FieldError::invalid(
                    "spec.resources.requests[storage]",
                    q,
                    "must be a valid quantity",
                )),
                Ok(v) if v <= 0 => errs.push(FieldError::invalid(
                    "spec.resources.requests[storage]",
                    q,
                    "must be greater than zero",
                )),
                Ok(_) => {}
            },
        }
        if let Some(sel) = &s.selector {
            errs.extend(validation::validate_label_selector(sel, "spec.selector"));
        }
        if let Some(c) = s.storage_class_name.as_deref().filter(|c| !c.is_empty()) {
            if let Err(m) = validation::dns1123_subdomain(c) {
                errs.push(FieldError::invalid("spec.storageClassName", c, m));
            }
        }
        if let Some(m) = &s.volume_mode {
            if m != "Block" && m != "Filesystem" {
                errs.push(FieldError::not_supported(
                    "spec.volumeMode",
                    m,
                    &["Block", "Filesystem"],
                ));
            }
        }
        errs
    }
}

/// Kubernetes' update rule for claims: the spec is immutable except the storage request and
/// the volume name of a claim not yet bound (the binder sets it).
pub fn validate_claim_update(
    new: &PersistentVolumeClaim,
    old: &PersistentVolumeClaim,
) -> Vec<FieldError> {
    let mut a = new.spec.clone();
    let b = &old.spec;
    let bound = old.status.phase.as_deref() == Some("Bound");
    // Only a bound claim's request may change (a resize), and not below what it was.
    if bound {
        let storage = |c: &PersistentVolumeClaim| {
            c.spec
                .resources
                .requests
                .get("storage")
                .and_then(|q| crate::quantity::parse_quantity_milli(&q.0).ok())
        };
        if let (Some(n), Some(o)) = (storage(new), storage(old)) {
            if n < o {
                return vec![FieldError::forbidden(
                    "spec.resources.requests.storage",
                    "field can not be less than previous value",
                )];
            }
        }
        a.resources = b.resources.clone();
    }
    a.volume_attributes_class_name = b.volume_attributes_class_name.clone();
    if b.volume_name.as_deref().unwrap_or("").is_empty() {
        a.volume_name = b.volume_name.clone();
    }
    // The default class set on an old claim created before a default existed.
    if b.storage_class_name.is_none() {
        a.storage_class_name = None;
    }
    if &a != b {
        return vec![FieldError::forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        )];
    }
    Vec::new()
}

fn validate_access_modes(modes: &[String], field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for m in modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            errs.push(FieldError::not_supported(field, m, ACCESS_MODES));
        }
    }
    if modes.iter().any(|m| m == "ReadWriteOncePod") && modes.len() > 1 {
        errs.push(FieldError::forbidden(
            field,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------
// StorageClass

/// storage.k8s.io/v1 StorageClass.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.storage.v1.StorageClass")]
#[schemars(
    description = "StorageClass describes the parameters for a class of storage for which PersistentVolumes can be dynamically provisioned."
)]
pub struct StorageClass {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The provisioner of this class's volumes.
    pub provisioner: String,
    /// Parameters for the provisioner.
    pub parameters: BTreeMap<String, String>,
    /// The reclaim policy of provisioned volumes: Delete (default) or Retain.
    pub reclaim_policy: Option<String>,
    /// Mount options of provisioned volumes. Kept, not acted on.
    pub mount_options: Vec<String>,
    /// Whether claims may be expanded. Kept, not acted on.
    pub allow_volume_expansion: Option<bool>,
    /// Immediate (default) or WaitForFirstConsumer.
    pub volume_binding_mode: Option<String>,
    /// Topologies volumes may be provisioned in. Kept.
    pub allowed_topologies: Vec<Opaque>,
}

impl Resource for StorageClass {
    const KIND: Kind = Kind::StorageClass;
    crate::resource_basics!(StorageClass);

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&(
            &self.provisioner,
            &self.parameters,
            &self.reclaim_policy,
            &self.volume_binding_mode,
        ))
    }

    fn set_defaults(&mut self) {
        self.reclaim_policy.get_or_insert_with(|| "Delete".into());
        self.volume_binding_mode
            .get_or_insert_with(|| "Immediate".into());
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::StorageClass);
        if self.provisioner.is_empty() {
            errs.push(FieldError::required("provisioner"));
        } else if let Err(m) = validation::qualified_name(&self.provisioner) {
            errs.push(FieldError::invalid("provisioner", &self.provisioner, m));
        }
        if let Some(p) = &self.reclaim_policy {
            if p != "Delete" && p != "Retain" {
                errs.push(FieldError::not_supported(
                    "reclaimPolicy",
                    p,
                    &["Delete", "Retain"],
                ));
            }
        }
        match self.volume_binding_mode.as_deref() {
            None => errs.push(FieldError::required("volumeBindingMode")),
            Some("Immediate" | "WaitForFirstConsumer") => {}
            Some(m) => errs.push(FieldError::not_supported(
                "volumeBindingMode",
                m,
                &["Immediate", "WaitForFirstConsumer"],
            )),
        }
        errs
    }
}

/// Kubernetes' update rule for StorageClasses: the provisioner, parameters, reclaim policy
/// and binding mode are immutable.
pub fn validate_class_update(new: &StorageClass, old: &StorageClass) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if new.parameters != old.parameters {
        errs.push(FieldError::forbidden(
            "parameters",
            "updates to parameters are forbidden.",
        ));
    }
    if new.provisioner != old.provisioner {
        errs.push(FieldError::forbidden(
            "provisioner",
            "updates to provisioner are forbidden.",
        ));
    }
    if new.reclaim_policy != old.reclaim_policy {
        errs.push(FieldError::forbidden(
            "reclaimPolicy",
            "updates to reclaimPolicy are forbidden.",
        ));
    }
    if new.volume_binding_mode != old.volume_binding_mode {
        errs.push(FieldError::forbidden(
            "volumeBindingMode",
            "field is immutable",
        ));
    }
    errs
}

/// Whether `class` carries the default-class annotation.
pub fn is_default_class(class: &StorageClass) -> bool {
    class
        .metadata
        .annotations
        .get(DEFAULT_CLASS_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The StorageClass the server creates at start: `local-path`, the default.
pub fn local_path_class() -> StorageClass {
    let mut c = StorageClass::default();
    c.metadata.name = LOCAL_PATH_CLASS.into();
    c.metadata
        .annotations
        .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
    c.provisioner = LOCAL_PATH_PROVISIONER.into();
    c.reclaim_policy = Some("Delete".into());
    c.volume_binding_mode = Some("WaitForFirstConsumer".into());
    c
}

// ---------------------------------------------------------------------------------------
// Shared rules

/// The class a claim asks for ("" for none).
pub fn claim_class(c: &PersistentVolumeClaim) -> &str {
    c.spec.storage_class_name.as_deref().unwrap_or("")
}

/// The class a volume belongs to ("" for none).
pub fn volume_class(v: &PersistentVolume) -> &str {
    v.spec.storage_class_name.as_deref().unwrap_or("")
}

/// The storage a claim requests, in bytes (0 when absent or bad).
pub fn requested_bytes(c: &PersistentVolumeClaim) -> i64 {
    c.spec
        .resources
        .requests
        .get("storage")
        .and_then(|q| q.value().ok())
        .unwrap_or(0)
}

/// The storage a volume offers, in bytes (0 when absent or bad).
pub fn capacity_bytes(v: &PersistentVolume) -> i64 {
    v.spec
        .capacity
        .get("storage")
        .and_then(|q| q.value().ok())
        .unwrap_or(0)
}

/// Whether `pv`'s claimRef names `claim` (by uid when the reference has one).
pub fn reserved_for(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = &pv.spec.claim_ref else {
        return false;
    };
    r.name.as_deref() == Some(claim.metadata.name.as_str())
        && r.namespace.as_deref().unwrap_or("") == claim.metadata.namespace()
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || u == claim.metadata.uid)
}

/// Whether `pv` could be bound to `claim` (ignoring node affinity): not bound elsewhere, in
/// phase Available (or reserved for this claim), same class and volume mode, offering every
/// access mode asked for, at least the storage asked for, and matching the claim's selector.
pub fn volume_matches(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    if pv.metadata.deletion_timestamp.is_some() {
        return false;
    }
    match &pv.spec.claim_ref {
        Some(_) if !reserved_for(pv, claim) => return false,
        _ => {}
    }
    if volume_class(pv) != claim_class(claim) {
        return false;
    }
    let mode = |m: &Option<String>| m.clone().unwrap_or_else(|| "Filesystem".into());
    if mode(&pv.spec.volume_mode) != mode(&claim.spec.volume_mode) {
        return false;
    }
    if !claim
        .spec
        .access_modes
        .iter()
        .all(|m| pv.spec.access_modes.contains(m))
    {
        return false;
    }
    if capacity_bytes(pv) < requested_bytes(claim) {
        return false;
    }
    if let Some(sel) = &claim.spec.selector {
        match crate::selector::Selector::from_label_selector(sel) {
            Ok(s) if s.matches(&pv.metadata.labels) => {}
            _ => return false,
        }
    }
    true
}

/// The access modes as kubectl abbreviates them: `RWO,ROX,RWX,RWOP`.
pub fn access_modes_text(modes: &[String]) -> String {
    let mut out = Vec::new();
    for (full, short) in [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ] {
        if modes.iter().any(|m| m == full) {
            out.push(short);
        }
    }
    out.join(",")
}

/// The directory of a local-path or hostPath volume on its node.
pub fn volume_path(pv: &PersistentVolume) -> Option<&str> {
    pv.spec.host_path.as_ref().map(|h| h.path.as_str()).or(pv
        .spec
        .local
        .as_ref()
        .map(|l| l.path.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(class: Option<&str>, size: &str, modes: &[&str]) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        c.metadata.name = "data".into();
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = "u1".into();
        c.spec.storage_class_name = class.map(Into::into);
        c.spec.access_modes = modes.iter().map(|m| m.to_string()).collect();
        c.spec
            .resources
            .requests
            .insert("storage".into(), Quantity(size.into()));
        c.set_defaults();
        c
    }

    fn volume(class: &str, size: &str, modes: &[&str]) -> PersistentVolume {
        let mut v = PersistentVolume::default();
        v.metadata.name = "pv1".into();
        v.spec.storage_class_name = Some(class.into());
        v.spec.access_modes = modes.iter().map(|m| m.to_string()).collect();
        v.spec
            .capacity
            .insert("storage".into(), Quantity(size.into()));
        v.spec.host_path = Some(HostPathVolumeSource {
            path: "/data".into(),
            type_: None,
        });
        v.set_defaults();
        v
    }

    #[test]
    fn defaults_and_validation_messages() {
        let v = volume("", "1Gi", &["ReadWriteOnce"]);
        assert_eq!(
            v.spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        assert!(v.validate().is_empty(), "{:?}", v.validate());
        let mut bad = v.clone();
        bad.spec.host_path = None;
        bad.spec.capacity.clear();
        bad.spec.access_modes = vec!["ReadWriteSometimes".into()];
        let msgs: Vec<String> = bad
            .validate()
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert!(
            msgs.contains(&"spec.capacity: Required value".to_string()),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"spec: Required value: must specify a volume type".to_string()));
        assert!(msgs.iter().any(|m| m.starts_with(
            "spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\""
        )));

        let c = claim(None, "1Gi", &[]);
        let msgs: Vec<String> = c
            .validate()
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            msgs,
            ["spec.accessModes: Required value: at least 1 access mode is required"]
        );
        let mut c = claim(None, "1Gi", &["ReadWriteOnce"]);
        c.spec.resources.requests.clear();
        assert_eq!(c.validate()[0].field, "spec.resources[storage]");

        let mut sc = local_path_class();
        sc.set_defaults();
        assert!(sc.validate().is_empty());
        sc.volume_binding_mode = Some("Later".into());
        assert_eq!(sc.validate()[0].field, "volumeBindingMode");
    }

    #[test]
    fn claim_spec_is_immutable_but_for_the_binding() {
        let old = claim(Some("local-path"), "1Gi", &["ReadWriteOnce"]);
        let mut new = old.clone();
        new.spec.volume_name = Some("pv1".into());
        assert!(validate_claim_update(&new, &old).is_empty());
        let mut changed = new.clone();
        changed.spec.access_modes = vec!["ReadWriteMany".into()];
        assert_eq!(validate_claim_update(&changed, &new).len(), 1);
        let mut rebound = new.clone();
        rebound.spec.volume_name = Some("pv2".into());
        assert_eq!(validate_claim_update(&rebound, &new).len(), 1);
    }

    #[test]
    fn matching_volumes() {
        let c = claim(Some("manual"), "1Gi", &["ReadWriteOnce"]);
        assert!(volume_matches(
            &volume("manual", "2Gi", &["ReadWriteOnce", "ReadOnlyMany"]),
            &c
        ));
        assert!(!volume_matches(
            &volume("manual", "500Mi", &["ReadWriteOnce"]),
            &c
        ));
        assert!(!volume_matches(
            &volume("other", "2Gi", &["ReadWriteOnce"]),
            &c
        ));
        assert!(!volume_matches(
            &volume("manual", "2Gi", &["ReadOnlyMany"]),
            &c
        ));
        let mut taken = volume("manual", "2Gi", &["ReadWriteOnce"]);
        taken.spec.claim_ref = Some(ObjectReference {
            name: Some("other".into()),
            namespace: Some("default".into()),
            ..Default::default()
        });
        assert!(!volume_matches(&taken, &c));
        taken.spec.claim_ref.as_mut().unwrap().name = Some("data".into());
        assert!(volume_matches(&taken, &c), "pre-bound to this claim");
        assert_eq!(
            access_modes_text(&["ReadWriteOncePod".into(), "ReadWriteOnce".into()]),
            "RWO,RWOP"
        );
    }
}
