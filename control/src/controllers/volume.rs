//! The persistent volume controllers, as kube-controller-manager runs them: the binder
//! (claims to volumes, with Kubernetes' phases, Immediate and WaitForFirstConsumer binding,
//! Delete and Retain reclaim), the built-in local-path provisioner, and the pvc-protection
//! and pv-protection finalizers' controllers.
//!
//! ```text
//! claim Pending ──(matching Available volume, or provisioned one)──> Bound
//!   │ WaitForFirstConsumer: waits for the scheduler's selected-node annotation
//! volume Available ──(claimRef)──> Bound ──(claim deleted)──> Released
//!   Released + Retain: stays; + Delete: the volume is deleted (local-path: its node's
//!   agent removes the directory and then the cleanup finalizer)
//! ```
//!
//! The local-path provisioner (k3s' `rancher.io/local-path`) only writes objects: the
//! volume is a hostPath `DirectoryOrCreate` under the directory the node's agent advertises
//! in its `storage.skiff.io/local-path-dir` annotation, pinned to the node by node affinity.
//! The agent owns the node's disk: it creates the directory when a pod mounts the volume and
//! removes it when the volume is deleted. k3s runs a helper pod for both; an agent-side
//! mkdir/rm needs no image, no pod and no scheduling, and works on a node cut off from the
//! registry.

use api::core::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, Pod,
};
use api::meta::{DeleteOptions, Preconditions};
use api::object::Resource;
use api::storage::{
    self as st, PersistentVolume, PersistentVolumeClaim, StorageClass, VolumeNodeAffinity,
};
use api::Kind;

use crate::error::ApiError;
use crate::machinery::events::Recorder;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;
use crate::scheduler::filter::term_matches;

/// Where a node's agent keeps local-path volumes when its Node does not say.
pub const DEFAULT_LOCAL_PATH_DIR: &str = "/var/lib/skiff/storage";

pub fn start(ctx: &Context) {
    let recorder = Recorder::start(ctx.registry.clone(), "persistentvolume-controller");
    let claims = fed_queue::<PersistentVolumeClaim, _>(
        ctx,
        &[
            Kind::PersistentVolumeClaim,
            Kind::PersistentVolume,
            Kind::StorageClass,
            Kind::Pod,
        ],
        claim_keys,
    );
    let c = ctx.clone();
    let rec = recorder.clone();
    spawn_workers(
        "pvc",
        ctx.informers.clone(),
        claims,
        2,
        move |key, mut s| {
            let (ctx, rec) = (c.clone(), rec.clone());
            async move {
                let r = sync_claim(&ctx, &rec, &key, &mut s).await;
                (s, r)
            }
        },
    );
    let volumes = fed_queue::<PersistentVolume, _>(
        ctx,
        &[Kind::PersistentVolume, Kind::PersistentVolumeClaim],
        volume_keys,
    );
    let c = ctx.clone();
    spawn_workers(
        "pv",
        ctx.informers.clone(),
        volumes,
        1,
        move |key, mut s| {
            let (ctx, rec) = (c.clone(), recorder.clone());
            async move {
                let r = sync_volume(&ctx, &rec, &key, &mut s).await;
                (s, r)
            }
        },
    );
}

/// The claims a change concerns: the claim; a volume's claim (or every unbound claim, one of
/// which it may now satisfy); the claims of a pod (protection); all for a class or a resync.
fn claim_keys(ctx: &Context, change: &Change) -> Vec<Key> {
    let all_unbound = || {
        ctx.informers
            .cache()
            .list::<PersistentVolumeClaim>(None)
            .iter()
            .filter(|c| c.spec.volume_name.as_deref().unwrap_or("").is_empty())
            .map(key_of)
            .collect::<Vec<_>>()
    };
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<PersistentVolumeClaim>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(c) = PersistentVolumeClaim::from_any_ref(obj) {
        return vec![key_of(c)];
    }
    if let Some(v) = PersistentVolume::from_any_ref(obj) {
        let mut keys = all_unbound();
        if let Some(r) = &v.spec.claim_ref {
            keys.push((
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
            ));
        }
        return keys;
    }
    if StorageClass::from_any_ref(obj).is_some() {
        return all_unbound();
    }
    if let Some(p) = Pod::from_any_ref(obj) {
        let ns = p.metadata.namespace();
        return claim_names(p)
            .map(|n| (ns.to_string(), n.to_string()))
            .collect();
    }
    Vec::new()
}

/// The volumes a change concerns: the volume, or the one a claim is bound to.
fn volume_keys(ctx: &Context, change: &Change) -> Vec<Key> {
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<PersistentVolume>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(v) = PersistentVolume::from_any_ref(obj) {
        return vec![key_of(v)];
    }
    if let Some(c) = PersistentVolumeClaim::from_any_ref(obj) {
        let ns = c.metadata.namespace().to_string();
        let name = c.metadata.name.clone();
        // A deleted claim releases whatever volume names it.
        return ctx
            .informers
            .cache()
            .list::<PersistentVolume>(None)
            .iter()
            .filter(|v| {
                v.spec.claim_ref.as_ref().is_some_and(|r| {
                    r.name.as_deref() == Some(name.as_str())
                        && r.namespace.as_deref().unwrap_or("") == ns
                })
            })
            .map(key_of)
            .collect();
    }
    Vec::new()
}

/// The claims a pod's volumes name.
pub fn claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec
        .volumes
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

/// Whether a pod still uses its volumes (the pvc-protection controller's test: a pod that
/// has finished or is gone does not).
fn pod_uses_volumes(p: &Pod) -> bool {
    !matches!(
        p.status.phase.as_deref(),
        Some("Succeeded") | Some("Failed")
    )
}

/// What one pass does to an unbound or bound claim.
#[derive(Debug, Default, PartialEq)]
pub struct ClaimPlan {
    /// Bind to this existing volume.
    pub bind: Option<String>,
    /// Provision a local-path volume on this node.
    pub provision: Option<String>,
    /// The claim's phase to show.
    pub phase: Option<&'static str>,
    /// (warning, reason, message).
    pub event: Option<(bool, &'static str, String)>,
}

/// The binder's decision for `claim` given every volume, the claim's class (None when it
/// names none or one that does not exist) and whether a volume may be used from the
/// selected node.
pub fn plan_claim(
    claim: &PersistentVolumeClaim,
    volumes: &[PersistentVolume],
    class: Option<&StorageClass>,
    node_ok: &dyn Fn(&PersistentVolume) -> bool,
) -> ClaimPlan {
    let mut plan = ClaimPlan::default();
    let bound_before = claim
        .metadata
        .annotations
        .contains_key(st::BIND_COMPLETED_ANNOTATION);
    if let Some(name) = claim.spec.volume_name.as_deref().filter(|n| !n.is_empty()) {
        match volumes.iter().find(|v| v.metadata.name == name) {
            None if bound_before => {
                plan.phase = Some("Lost");
                plan.event = Some((
                    true,
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!".into(),
                ));
            }
            None => plan.phase = Some("Pending"),
            Some(v) if v.spec.claim_ref.is_none() || st::reserved_for(v, claim) => {
                plan.bind = Some(name.to_string());
                plan.phase = Some("Bound");
            }
            Some(_) if bound_before => {
                plan.phase = Some("Lost");
                plan.event = Some((
                    true,
                    "ClaimMisbound",
                    "Two claims are bound to the same volume, this one is bound incorrectly".into(),
                ));
            }
            Some(_) => plan.phase = Some("Pending"),
        }
        return plan;
    }
    plan.phase = Some("Pending");
    let class_name = st::claim_class(claim);
    let wait =
        class.is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"));
    let selected = claim.metadata.annotations.get(st::SELECTED_NODE_ANNOTATION);
    if wait && selected.is_none() {
        plan.event = Some((
            false,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".into(),
        ));
        return plan;
    }
    // Pre-bound volumes first, then the smallest that fits.
    let best = volumes
        .iter()
        .filter(|v| st::volume_matches(v, claim))
        .filter(|v| !wait || node_ok(v))
        .min_by_key(|v| {
            (
                !st::reserved_for(v, claim),
                st::capacity_bytes(v),
                v.metadata.name.clone(),
            )
        });
    if let Some(v) = best {
        plan.bind = Some(v.metadata.name.clone());
        plan.phase = Some("Bound");
        return plan;
    }
    match class {
        Some(c) if c.provisioner == st::LOCAL_PATH_PROVISIONER => match selected {
            Some(node) => plan.provision = Some(node.clone()),
            None => {
                plan.event = Some((
                    true,
                    "ProvisioningFailed",
                    format!(
                        "failed to provision volume with StorageClass \"{}\": configuration error, no node was specified",
                        c.metadata.name
                    ),
                ))
            }
        },
        Some(c) if c.provisioner == "kubernetes.io/no-provisioner" => {
            plan.event = Some((
                false,
                "FailedBinding",
                "no persistent volumes available for this claim".into(),
            ))
        }
        Some(c) => {
            plan.event = Some((
                false,
                "ExternalProvisioning",
                format!(
                    "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
                    c.provisioner
                ),
            ))
        }
        None if class_name.is_empty() => {
            plan.event = Some((
                false,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set"
                    .into(),
            ))
        }
        None => {
            plan.event = Some((
                true,
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
            ))
        }
    }
    plan
}

/// What one pass does to a volume.
#[derive(Debug, Default, PartialEq)]
pub struct VolumePlan {
    pub phase: Option<&'static str>,
    /// Delete the volume (reclaim policy Delete of a released volume).
    pub delete: bool,
    /// (reason, message) of a failed volume.
    pub failed: Option<(&'static str, String)>,
}

/// The binder's decision for `pv` given its claim (by the claimRef's namespace and name).
pub fn plan_volume(pv: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> VolumePlan {
    let mut plan = VolumePlan::default();
    let Some(r) = &pv.spec.claim_ref else {
        plan.phase = Some("Available");
        return plan;
    };
    let uid = r.uid.as_deref().unwrap_or("");
    match claim {
        // Reserved by the user for a claim not bound yet: still available to it.
        _ if uid.is_empty() => plan.phase = Some("Available"),
        Some(c) if c.metadata.uid == uid => plan.phase = Some("Bound"),
        _ => {
            if pv.status.phase.as_deref() == Some("Failed") {
                return plan;
            }
            plan.phase = Some("Released");
            match pv.spec.persistent_volume_reclaim_policy.as_deref() {
                Some("Delete") => {
                    let ours = pv
                        .metadata
                        .annotations
                        .get(st::PROVISIONED_BY_ANNOTATION)
                        .is_some_and(|p| p == st::LOCAL_PATH_PROVISIONER);
                    if ours {
                        plan.delete = true;
                    } else {
                        plan.phase = Some("Failed");
                        plan.failed = Some((
                            "VolumeFailedDelete",
                            format!(
                                "error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched",
                                pv.metadata.name
                            ),
                        ));
                    }
                }
                Some("Recycle") => {
                    plan.phase = Some("Failed");
                    plan.failed = Some((
                        "VolumeFailedRecycle",
                        "No recycler plugin found for the volume!".into(),
                    ));
                }
                _ => {}
            }
        }
    }
    plan
}

/// The local-path volume for `claim` on `node`, its directory under `dir`.
pub fn provisioned_volume(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &str,
    dir: &str,
) -> PersistentVolume {
    let ns = claim.metadata.namespace();
    let name = format!("pvc-{}", claim.metadata.uid);
    let mut pv = PersistentVolume::default();
    pv.metadata.name = name.clone();
    pv.metadata.annotations.insert(
        st::PROVISIONED_BY_ANNOTATION.into(),
        st::LOCAL_PATH_PROVISIONER.into(),
    );
    pv.metadata
        .finalizers
        .push(st::LOCAL_PATH_CLEANUP_FINALIZER.into());
    let s = &mut pv.spec;
    if let Some(q) = claim.spec.resources.requests.get("storage") {
        s.capacity.insert("storage".into(), q.clone());
    }
    s.access_modes = claim.spec.access_modes.clone();
    s.persistent_volume_reclaim_policy = class.reclaim_policy.clone();
    s.storage_class_name = Some(class.metadata.name.clone());
    s.volume_mode = claim.spec.volume_mode.clone();
    s.host_path = Some(HostPathVolumeSource {
        path: format!(
            "{}/{name}_{ns}_{}",
            dir.trim_end_matches('/'),
            claim.metadata.name
        ),
        type_: Some("DirectoryOrCreate".into()),
    });
    s.node_affinity = Some(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: vec![NodeSelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    operator: "In".into(),
                    values: vec![node.to_string()],
                }],
                ..Default::default()
            }],
        }),
    });
    s.claim_ref = Some(claim_ref(claim));
    pv
}

fn claim_ref(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(claim.metadata.namespace().to_string()),
        name: Some(claim.metadata.name.clone()),
        uid: Some(claim.metadata.uid.clone()),
        api_version: Some("v1".into()),
        resource_version: Some(claim.metadata.resource_version.clone()),
        field_path: None,
    }
}

/// The node of a local-path volume skiff provisioned.
pub fn local_path_node(pv: &PersistentVolume) -> Option<&str> {
    let ours = pv
        .metadata
        .annotations
        .get(st::PROVISIONED_BY_ANNOTATION)
        .is_some_and(|p| p == st::LOCAL_PATH_PROVISIONER);
    if !ours {
        return None;
    }
    let terms = &pv
        .spec
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    match terms.as_slice() {
        [t] => match t.match_expressions.as_slice() {
            [e] if e.key == "kubernetes.io/hostname"
                && e.operator == "In"
                && e.values.len() == 1 =>
            {
                Some(e.values[0].as_str())
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether `pv` may be used from `node` (no node affinity: from anywhere).
pub fn volume_fits_node(pv: &PersistentVolume, node: &Node) -> bool {
    match pv
        .spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
    {
        None => true,
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node)),
    }
}

async fn sync_claim(
    ctx: &Context,
    rec: &Recorder,
    (ns, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let cache = ctx.informers.cache();
    let Some(claim) = cache.get::<PersistentVolumeClaim>(ns, name) else {
        return Ok(());
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return protect_claim(ctx, &claim, s).await;
    }
    let volumes = cache.list::<PersistentVolume>(None);
    let class_name = st::claim_class(&claim).to_string();
    let class = (!class_name.is_empty())
        .then(|| cache.get::<StorageClass>("", &class_name))
        .flatten();
    let selected = claim
        .metadata
        .annotations
        .get(st::SELECTED_NODE_ANNOTATION)
        .and_then(|n| cache.get::<Node>("", n));
    let node_ok = |v: &PersistentVolume| selected.as_ref().is_some_and(|n| volume_fits_node(v, n));
    let plan = plan_claim(&claim, &volumes, class.as_ref(), &node_ok);
    if let Some((warning, reason, message)) = &plan.event {
        if *warning {
            rec.warning(&claim, reason, message.clone());
        } else {
            rec.normal(&claim, reason, message.clone());
        }
    }
    if let Some(node) = &plan.provision {
        let class = class.expect("a provisioning plan has a class");
        let dir = cache
            .get::<Node>("", node)
            .and_then(|n| {
                n.metadata
                    .annotations
                    .get(st::NODE_LOCAL_PATH_ANNOTATION)
                    .cloned()
            })
            .unwrap_or_else(|| DEFAULT_LOCAL_PATH_DIR.to_string());
        let pv = provisioned_volume(&claim, &class, node, &dir);
        let pv_name = pv.metadata.name.clone();
        // The provisioner's annotations on the claim, as external-provisioner writes them.
        let uid = claim.metadata.uid.clone();
        let r = ctx
            .registry
            .mutate::<PersistentVolumeClaim>(ns, name, Part::Main, move |c| {
                if c.metadata.uid == uid {
                    for a in [
                        st::STORAGE_PROVISIONER_ANNOTATION,
                        st::BETA_STORAGE_PROVISIONER_ANNOTATION,
                    ] {
                        c.metadata
                            .annotations
                            .insert(a.into(), st::LOCAL_PATH_PROVISIONER.into());
                    }
                }
                Ok(())
            })
            .await;
        if let Some(c) = ignore_not_found(r)? {
            s.wrote(&c);
        }
        rec.normal(
            &claim,
            "Provisioning",
            format!("External provisioner is provisioning volume for claim \"{ns}/{name}\""),
        );
        match ctx.registry.create(pv, None).await {
            Ok(v) => {
                s.wrote(&v);
                rec.normal(
                    &claim,
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {pv_name}"),
                );
            }
            Err(e) if e.code() == 409 => {}
            Err(e) => {
                rec.warning(
                    &claim,
                    "ProvisioningFailed",
                    format!("failed to provision volume with StorageClass \"{class_name}\": {e}"),
                );
                return Err(e);
            }
        }
        // The new volume's change brings the claim back to bind it.
        return Ok(());
    }
    if let Some(pv_name) = &plan.bind {
        return bind(ctx, &claim, pv_name, s).await;
    }
    if let Some(phase) = plan.phase {
        if claim.status.phase.as_deref() != Some(phase) {
            let uid = claim.metadata.uid.clone();
            let r = ctx
                .registry
                .mutate::<PersistentVolumeClaim>(ns, name, Part::Status, move |c| {
                    if c.metadata.uid == uid {
                        c.status.phase = Some(phase.into());
                    }
                    Ok(())
                })
                .await;
            if let Some(c) = ignore_not_found(r)? {
                s.wrote(&c);
            }
        }
    }
    Ok(())
}

/// Binds `claim` and the volume `pv_name` both ways (the volume first, as Kubernetes' binder
/// does, so a crash in between leaves a volume reserved for the claim, not a claim pointing
/// at a volume another claim may take).
async fn bind(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    pv_name: &str,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let (ns, name) = (
        claim.metadata.namespace().to_string(),
        claim.metadata.name.clone(),
    );
    let reference = claim_ref(claim);
    let want_uid = claim.metadata.uid.clone();
    let r = ctx
        .registry
        .mutate::<PersistentVolume>("", pv_name, Part::Main, move |v| {
            let same = v
                .spec
                .claim_ref
                .as_ref()
                .is_some_and(|r| r.uid.as_deref() == Some(want_uid.as_str()));
            if !same {
                if v.spec.claim_ref.as_ref().is_some_and(|r| {
                    r.uid
                        .as_deref()
                        .is_some_and(|u| !u.is_empty() && u != want_uid)
                }) {
                    return Err(ApiError::conflict(
                        Kind::PersistentVolume,
                        &v.metadata.name,
                        "the volume is bound to another claim",
                    ));
                }
                if v.spec.claim_ref.is_none() {
                    v.metadata
                        .annotations
                        .insert(st::BOUND_BY_CONTROLLER_ANNOTATION.into(), "yes".into());
                }
                v.spec.claim_ref = Some(reference.clone());
            }
            Ok(())
        })
        .await;
    let Some(pv) = ignore_not_found(r)? else {
        return Ok(());
    };
    s.wrote(&pv);
    if pv.status.phase.as_deref() != Some("Bound") {
        let r = ctx
            .registry
            .mutate::<PersistentVolume>("", pv_name, Part::Status, |v| {
                set_volume_phase(v, "Bound");
                Ok(())
            })
            .await;
        if let Some(v) = ignore_not_found(r)? {
            s.wrote(&v);
        }
    }
    let uid = claim.metadata.uid.clone();
    let pv_name_c = pv_name.to_string();
    let by_us = claim.spec.volume_name.as_deref().unwrap_or("").is_empty();
    let needs_main = by_us
        || !claim
            .metadata
            .annotations
            .contains_key(st::BIND_COMPLETED_ANNOTATION);
    if needs_main {
        let r = ctx
            .registry
            .mutate::<PersistentVolumeClaim>(&ns, &name, Part::Main, move |c| {
                if c.metadata.uid == uid {
                    c.spec.volume_name = Some(pv_name_c.clone());
                    c.metadata
                        .annotations
                        .insert(st::BIND_COMPLETED_ANNOTATION.into(), "yes".into());
                    if by_us {
                        c.metadata
                            .annotations
                            .insert(st::BOUND_BY_CONTROLLER_ANNOTATION.into(), "yes".into());
                    }
                }
                Ok(())
            })
            .await;
        if let Some(c) = ignore_not_found(r)? {
            s.wrote(&c);
        }
    }
    let (modes, capacity) = (pv.spec.access_modes.clone(), pv.spec.capacity.clone());
    let current = &claim.status;
    if current.phase.as_deref() != Some("Bound")
        || current.access_modes != modes
        || current.capacity != capacity
    {
        let uid = claim.metadata.uid.clone();
        let r = ctx
            .registry
            .mutate::<PersistentVolumeClaim>(&ns, &name, Part::Status, move |c| {
                if c.metadata.uid == uid {
                    c.status.phase = Some("Bound".into());
                    c.status.access_modes = modes.clone();
                    c.status.capacity = capacity.clone();
                }
                Ok(())
            })
            .await;
        if let Some(c) = ignore_not_found(r)? {
            s.wrote(&c);
        }
    }
    Ok(())
}

fn set_volume_phase(v: &mut PersistentVolume, phase: &str) {
    if v.status.phase.as_deref() != Some(phase) {
        v.status.phase = Some(phase.into());
        v.status.last_phase_transition_time = Some(api::meta::Time::now());
        if phase != "Failed" {
            v.status.reason = None;
            v.status.message = None;
        }
    }
}

/// pvc-protection: a deleted claim keeps its finalizer while a pod that has not finished uses
/// it.
async fn protect_claim(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    s: &mut Synced,
) -> Result<(), ApiError> {
    if !claim
        .metadata
        .finalizers
        .iter()
        .any(|f| f == st::PVC_PROTECTION_FINALIZER)
    {
        return Ok(());
    }
    let ns = claim.metadata.namespace();
    let in_use = ctx
        .informers
        .cache()
        .list::<Pod>(Some(ns))
        .iter()
        .any(|p| pod_uses_volumes(p) && claim_names(p).any(|n| n == claim.metadata.name));
    if in_use {
        return Ok(());
    }
    remove_finalizer::<PersistentVolumeClaim>(
        ctx,
        ns,
        &claim.metadata.name,
        &claim.metadata.uid,
        st::PVC_PROTECTION_FINALIZER,
        s,
    )
    .await
}

async fn remove_finalizer<K: Resource>(
    ctx: &Context,
    ns: &str,
    name: &str,
    uid: &str,
    finalizer: &'static str,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let uid = uid.to_string();
    let r = ctx
        .registry
        .mutate::<K>(ns, name, Part::Main, move |o| {
            if o.meta().uid == uid {
                o.meta_mut().finalizers.retain(|f| f != finalizer);
            }
            Ok(())
        })
        .await;
    if let Some(o) = ignore_not_found(r)? {
        s.wrote(&o);
    }
    Ok(())
}

async fn sync_volume(
    ctx: &Context,
    rec: &Recorder,
    (_, name): &Key,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let cache = ctx.informers.cache();
    let Some(pv) = cache.get::<PersistentVolume>("", name) else {
        return Ok(());
    };
    if pv.metadata.deletion_timestamp.is_some() {
        // pv-protection: the finalizer goes once the volume is no longer bound.
        let protected = pv
            .metadata
            .finalizers
            .iter()
            .any(|f| f == st::PV_PROTECTION_FINALIZER);
        if protected && pv.status.phase.as_deref() != Some("Bound") {
            return remove_finalizer::<PersistentVolume>(
                ctx,
                "",
                name,
                &pv.metadata.uid,
                st::PV_PROTECTION_FINALIZER,
                s,
            )
            .await;
        }
        if pv.status.phase.as_deref() != Some("Bound") {
            return Ok(());
        }
    }
    let claim = pv.spec.claim_ref.as_ref().and_then(|r| {
        cache.get::<PersistentVolumeClaim>(
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or(""),
        )
    });
    let plan = plan_volume(&pv, claim.as_ref());
    if let Some(phase) = plan.phase {
        let failed = plan.failed.clone();
        let stale = pv.status.phase.as_deref() != Some(phase)
            || failed.as_ref().map(|f| f.0) != pv.status.reason.as_deref();
        if stale {
            if let Some((reason, message)) = &failed {
                rec.warning(&pv, reason, message.clone());
            }
            let uid = pv.metadata.uid.clone();
            let r = ctx
                .registry
                .mutate::<PersistentVolume>("", name, Part::Status, move |v| {
                    if v.metadata.uid == uid {
                        set_volume_phase(v, phase);
                        if let Some((reason, message)) = failed.clone() {
                            v.status.reason = Some(reason.into());
                            v.status.message = Some(message);
                        }
                    }
                    Ok(())
                })
                .await;
            if let Some(v) = ignore_not_found(r)? {
                s.wrote(&v);
            }
        }
    }
    if plan.delete && pv.metadata.deletion_timestamp.is_none() {
        let opts = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(pv.metadata.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Some((v, _)) = ignore_not_found(
            ctx.registry
                .delete::<PersistentVolume>("", name, opts)
                .await,
        )? {
            s.wrote(&v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::meta::Quantity;

    fn claim(class: &str, size: &str) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        c.metadata.name = "data".into();
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = "c1".into();
        c.spec.storage_class_name = Some(class.into());
        c.spec.access_modes = vec!["ReadWriteOnce".into()];
        c.spec
            .resources
            .requests
            .insert("storage".into(), Quantity(size.into()));
        c.set_defaults();
        c
    }

    fn class(name: &str, provisioner: &str, mode: &str) -> StorageClass {
        let mut c = StorageClass::default();
        c.metadata.name = name.into();
        c.provisioner = provisioner.into();
        c.volume_binding_mode = Some(mode.into());
        c.set_defaults();
        c
    }

    fn volume(name: &str, class: &str, size: &str) -> PersistentVolume {
        let mut v = PersistentVolume::default();
        v.metadata.name = name.into();
        v.spec.storage_class_name = Some(class.into());
        v.spec.access_modes = vec!["ReadWriteOnce".into()];
        v.spec
            .capacity
            .insert("storage".into(), Quantity(size.into()));
        v.spec.host_path = Some(HostPathVolumeSource {
            path: "/mnt/data".into(),
            type_: None,
        });
        v.set_defaults();
        v
    }

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        n.metadata
            .labels
            .insert("kubernetes.io/hostname".into(), name.into());
        n
    }

    const ANY: &dyn Fn(&PersistentVolume) -> bool = &|_| true;

    #[test]
    fn immediate_binds_the_smallest_matching_volume() {
        let c = claim("manual", "1Gi");
        let sc = class("manual", "kubernetes.io/no-provisioner", "Immediate");
        let vols = [
            volume("big", "manual", "10Gi"),
            volume("small", "manual", "2Gi"),
            volume("tiny", "manual", "100Mi"),
            volume("other", "fast", "1Gi"),
        ];
        let p = plan_claim(&c, &vols, Some(&sc), ANY);
        assert_eq!(p.bind.as_deref(), Some("small"));
        assert_eq!(p.phase, Some("Bound"));
        let p = plan_claim(&c, &vols[2..], Some(&sc), ANY);
        assert_eq!(p.bind, None);
        assert_eq!(p.phase, Some("Pending"));
        assert_eq!(p.event.unwrap().1, "FailedBinding");
    }

    #[test]
    fn wait_for_first_consumer_then_provision_on_the_selected_node() {
        let mut c = claim("local-path", "1Gi");
        let sc = st::local_path_class();
        let p = plan_claim(&c, &[], Some(&sc), ANY);
        assert_eq!(p.phase, Some("Pending"));
        assert_eq!(p.event.as_ref().unwrap().1, "WaitForFirstConsumer");
        assert_eq!(
            p.event.unwrap().2,
            "waiting for first consumer to be created before binding"
        );
        c.metadata
            .annotations
            .insert(st::SELECTED_NODE_ANNOTATION.into(), "pi-1".into());
        let p = plan_claim(&c, &[], Some(&sc), ANY);
        assert_eq!(p.provision.as_deref(), Some("pi-1"));

        let pv = provisioned_volume(&c, &sc, "pi-1", "/data/storage/");
        assert_eq!(pv.metadata.name, "pvc-c1");
        assert_eq!(
            pv.spec.host_path.as_ref().unwrap().path,
            "/data/storage/pvc-c1_default_data"
        );
        assert_eq!(
            pv.spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        assert!(volume_fits_node(&pv, &node("pi-1")));
        assert!(!volume_fits_node(&pv, &node("pi-2")));
        assert!(st::reserved_for(&pv, &c));
        // The provisioned volume, reserved for the claim, is what the next pass binds.
        let only_pi1 = |v: &PersistentVolume| volume_fits_node(v, &node("pi-1"));
        let p = plan_claim(&c, std::slice::from_ref(&pv), Some(&sc), &only_pi1);
        assert_eq!(p.bind.as_deref(), Some("pvc-c1"));
    }

    #[test]
    fn wait_for_first_consumer_only_binds_volumes_of_the_selected_node() {
        let mut c = claim("local-storage", "1Gi");
        c.metadata
            .annotations
            .insert(st::SELECTED_NODE_ANNOTATION.into(), "pi-2".into());
        let sc = class(
            "local-storage",
            "kubernetes.io/no-provisioner",
            "WaitForFirstConsumer",
        );
        let mut on1 = volume("on1", "local-storage", "1Gi");
        on1.spec.node_affinity = provisioned_volume(&c, &sc, "pi-1", "/d").spec.node_affinity;
        let mut on2 = on1.clone();
        on2.metadata.name = "on2".into();
        on2.spec.node_affinity = provisioned_volume(&c, &sc, "pi-2", "/d").spec.node_affinity;
        let fits = |v: &PersistentVolume| volume_fits_node(v, &node("pi-2"));
        let p = plan_claim(&c, &[on1.clone(), on2], Some(&sc), &fits);
        assert_eq!(p.bind.as_deref(), Some("on2"));
        let p = plan_claim(&c, &[on1], Some(&sc), &fits);
        assert_eq!(p.bind, None);
    }

    #[test]
    fn missing_class_and_lost_volume() {
        let c = claim("nope", "1Gi");
        let p = plan_claim(&c, &[], None, ANY);
        assert_eq!(
            p.event.unwrap().2,
            "storageclass.storage.k8s.io \"nope\" not found"
        );
        let mut bound = claim("manual", "1Gi");
        bound.spec.volume_name = Some("gone".into());
        bound
            .metadata
            .annotations
            .insert(st::BIND_COMPLETED_ANNOTATION.into(), "yes".into());
        assert_eq!(plan_claim(&bound, &[], None, ANY).phase, Some("Lost"));
    }

    #[test]
    fn volume_phases_and_reclaim() {
        let c = claim("local-path", "1Gi");
        let sc = st::local_path_class();
        let mut pv = provisioned_volume(&c, &sc, "pi-1", "/d");
        pv.set_defaults();
        assert_eq!(plan_volume(&pv, Some(&c)).phase, Some("Bound"));
        // Claim deleted: released, and the provisioned volume with Delete goes.
        let p = plan_volume(&pv, None);
        assert_eq!((p.phase, p.delete), (Some("Released"), true));
        // A new claim of the same name is not the old one.
        let mut other = c.clone();
        other.metadata.uid = "c2".into();
        assert_eq!(plan_volume(&pv, Some(&other)).phase, Some("Released"));
        // Retain keeps it released.
        pv.spec.persistent_volume_reclaim_policy = Some("Retain".into());
        assert_eq!(
            plan_volume(&pv, None),
            VolumePlan {
                phase: Some("Released"),
                ..Default::default()
            }
        );
        // A manual volume cannot be deleted by skiff: Failed, as Kubernetes without a deleter.
        let mut manual = volume("manual", "x", "1Gi");
        manual.spec.persistent_volume_reclaim_policy = Some("Delete".into());
        manual.spec.claim_ref = Some(claim_ref(&c));
        let p = plan_volume(&manual, None);
        assert_eq!(p.phase, Some("Failed"));
        assert!(!p.delete);
        manual.spec.claim_ref = None;
        assert_eq!(plan_volume(&manual, None).phase, Some("Available"));
    }
}
