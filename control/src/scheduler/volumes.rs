//! The volume filters, as kube-scheduler's VolumeBinding and VolumeRestrictions plugins do
//! them: a pod's claims must exist and not be in deletion, immediate claims must be bound,
//! a bound volume's node affinity must admit the node, a claim that waits for its first
//! consumer must be satisfiable on the node (a matching available volume there, or a class
//! that provisions), and a ReadWriteOncePod claim must not be in use by another pod.
//!
//! Checks that do not depend on the node ([`VolumeCheck::build`]) fail the whole pod with
//! kube-scheduler's PreFilter message; the per-node ones give a [`Reason`]. Once a node is
//! chosen, the unbound WaitForFirstConsumer claims get the `volume.kubernetes.io/selected-node`
//! annotation ([`VolumeCheck::delayed_claims`]), from which the PV controller binds or
//! provisions.

use api::core::{Node, Pod};
use api::storage::{self as st, PersistentVolume, PersistentVolumeClaim, StorageClass};

use super::filter::Reason;
use crate::controllers::volume::{claim_names, volume_fits_node};

/// What the scheduler reads of the cluster's storage (the informer cache in the server).
pub trait VolumeLister {
    fn claim(&self, ns: &str, name: &str) -> Option<PersistentVolumeClaim>;
    fn volume(&self, name: &str) -> Option<PersistentVolume>;
    fn class(&self, name: &str) -> Option<StorageClass>;
    fn volumes(&self) -> Vec<PersistentVolume>;
    /// The pods of a namespace (for ReadWriteOncePod).
    fn pods(&self, ns: &str) -> Vec<Pod>;
}

/// A pod's volume constraints, found once per scheduling attempt.
#[derive(Debug, Default)]
pub struct VolumeCheck {
    /// Volumes bound to the pod's claims: the node must satisfy their node affinity.
    bound: Vec<PersistentVolume>,
    /// Unbound WaitForFirstConsumer claims, whether their class provisions, and the volumes
    /// that could be bound to them.
    delayed: Vec<(PersistentVolumeClaim, bool, Vec<PersistentVolume>)>,
}

impl VolumeCheck {
    /// The node-independent checks (kube-scheduler's PreFilter); `Err` is the message.
    pub fn build(pod: &Pod, lister: &dyn VolumeLister) -> Result<VolumeCheck, String> {
        let mut check = VolumeCheck::default();
        let ns = pod.metadata.namespace();
        let mut all_volumes: Option<Vec<PersistentVolume>> = None;
        for name in claim_names(pod) {
            let Some(claim) = lister.claim(ns, name) else {
                return Err(format!("persistentvolumeclaim \"{name}\" not found"));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(format!("persistentvolumeclaim \"{name}\" is being deleted"));
            }
            if claim
                .spec
                .access_modes
                .iter()
                .any(|m| m == "ReadWriteOncePod")
            {
                let used = lister.pods(ns).iter().any(|p| {
                    p.metadata.uid != pod.metadata.uid
                        && p.spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
                        && !matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed"))
                        && claim_names(p).any(|n| n == name)
                });
                if used {
                    return Err("node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode".into());
                }
            }
            match claim.spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                Some(v) => match lister.volume(v) {
                    Some(pv) => check.bound.push(pv),
                    None => return Err(format!("persistentvolume \"{v}\" not found")),
                },
                None => {
                    let class = lister.class(st::claim_class(&claim));
                    let delayed = class.as_ref().is_some_and(|c| {
                        c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
                    });
                    if !delayed {
                        return Err("pod has unbound immediate PersistentVolumeClaims".into());
                    }
                    let provisions = class
                        .as_ref()
                        .is_some_and(|c| c.provisioner != "kubernetes.io/no-provisioner");
                    let all = all_volumes.get_or_insert_with(|| lister.volumes());
                    let candidates = all
                        .iter()
                        .filter(|v| st::volume_matches(v, &claim))
                        .cloned()
                        .collect();
                    check.delayed.push((claim, provisions, candidates));
                }
            }
        }
        Ok(check)
    }

    pub fn is_empty(&self) -> bool {
        self.bound.is_empty() && self.delayed.is_empty()
    }

    /// The per-node checks (kube-scheduler's VolumeBinding Filter).
    pub fn check(&self, node: &Node) -> Result<(), Reason> {
        if !self.bound.iter().all(|v| volume_fits_node(v, node)) {
            return Err(Reason::VolumeNodeAffinity);
        }
        for (_, provisions, candidates) in &self.delayed {
            if !provisions && !candidates.iter().any(|v| volume_fits_node(v, node)) {
                return Err(Reason::VolumeBind);
            }
        }
        Ok(())
    }

    /// The unbound WaitForFirstConsumer claims that do not yet name `node` as selected.
    pub fn delayed_claims(&self, node: &str) -> Vec<(String, String)> {
        self.delayed
            .iter()
            .filter(|(c, _, _)| {
                c.metadata
                    .annotations
                    .get(st::SELECTED_NODE_ANNOTATION)
                    .is_none_or(|n| n != node)
            })
            .map(|(c, _, _)| (c.metadata.namespace().to_string(), c.metadata.name.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::volume::provisioned_volume;
    use api::core::{PersistentVolumeClaimVolumeSource, Volume};
    use api::meta::Quantity;
    use api::object::Resource;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Fake {
        claims: BTreeMap<String, PersistentVolumeClaim>,
        volumes: Vec<PersistentVolume>,
        classes: Vec<StorageClass>,
        pods: Vec<Pod>,
    }

    impl VolumeLister for Fake {
        fn claim(&self, _: &str, name: &str) -> Option<PersistentVolumeClaim> {
            self.claims.get(name).cloned()
        }
        fn volume(&self, name: &str) -> Option<PersistentVolume> {
            self.volumes
                .iter()
                .find(|v| v.metadata.name == name)
                .cloned()
        }
        fn class(&self, name: &str) -> Option<StorageClass> {
            self.classes
                .iter()
                .find(|c| c.metadata.name == name)
                .cloned()
        }
        fn volumes(&self) -> Vec<PersistentVolume> {
            self.volumes.clone()
        }
        fn pods(&self, _: &str) -> Vec<Pod> {
            self.pods.clone()
        }
    }

    fn claim(name: &str, class: &str, mode: &str) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        c.metadata.name = name.into();
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = format!("uid-{name}");
        c.spec.storage_class_name = Some(class.into());
        c.spec.access_modes = vec![mode.into()];
        c.spec
            .resources
            .requests
            .insert("storage".into(), Quantity("1Gi".into()));
        c.set_defaults();
        c
    }

    fn pod_with(name: &str, claims: &[&str]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = format!("uid-{name}");
        p.spec.volumes = claims
            .iter()
            .map(|c| Volume {
                name: c.to_string(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: c.to_string(),
                    read_only: None,
                }),
                ..Default::default()
            })
            .collect();
        p
    }

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        n.metadata
            .labels
            .insert("kubernetes.io/hostname".into(), name.into());
        n
    }

    #[test]
    fn missing_deleting_and_immediate_claims_fail_the_pod() {
        let mut f = Fake::default();
        let p = pod_with("web", &["data"]);
        assert_eq!(
            VolumeCheck::build(&p, &f).unwrap_err(),
            "persistentvolumeclaim \"data\" not found"
        );
        let mut immediate = st::local_path_class();
        immediate.metadata.name = "fast".into();
        immediate.volume_binding_mode = Some("Immediate".into());
        f.classes = vec![st::local_path_class(), immediate];
        f.claims
            .insert("data".into(), claim("data", "fast", "ReadWriteOnce"));
        assert_eq!(
            VolumeCheck::build(&p, &f).unwrap_err(),
            "pod has unbound immediate PersistentVolumeClaims"
        );
        let mut c = claim("data", "local-path", "ReadWriteOnce");
        c.metadata.deletion_timestamp = Some(api::meta::Time::now());
        f.claims.insert("data".into(), c);
        assert_eq!(
            VolumeCheck::build(&p, &f).unwrap_err(),
            "persistentvolumeclaim \"data\" is being deleted"
        );
    }

    #[test]
    fn bound_volumes_pin_the_pod_and_delayed_claims_get_the_node() {
        let mut f = Fake {
            classes: vec![st::local_path_class()],
            ..Default::default()
        };
        let c = claim("data", "local-path", "ReadWriteOnce");
        f.claims.insert("data".into(), c.clone());
        let p = pod_with("web", &["data"]);
        let check = VolumeCheck::build(&p, &f).unwrap();
        assert!(
            check.check(&node("a")).is_ok(),
            "local-path provisions anywhere"
        );
        assert_eq!(
            check.delayed_claims("a"),
            [("default".to_string(), "data".to_string())]
        );

        let pv = provisioned_volume(&c, &st::local_path_class(), "a", "/d");
        let mut bound = c.clone();
        bound.spec.volume_name = Some(pv.metadata.name.clone());
        f.claims.insert("data".into(), bound);
        f.volumes = vec![pv];
        let check = VolumeCheck::build(&p, &f).unwrap();
        assert!(check.check(&node("a")).is_ok());
        let r = check.check(&node("b")).unwrap_err();
        assert_eq!(r.to_string(), "node(s) had volume node affinity conflict");
        assert!(check.delayed_claims("a").is_empty());
    }

    #[test]
    fn no_provisioner_needs_a_volume_on_the_node() {
        let mut f = Fake::default();
        let mut sc = st::local_path_class();
        sc.metadata.name = "local-storage".into();
        sc.provisioner = "kubernetes.io/no-provisioner".into();
        f.classes = vec![sc.clone()];
        let c = claim("data", "local-storage", "ReadWriteOnce");
        f.claims.insert("data".into(), c.clone());
        let mut pv = provisioned_volume(&c, &sc, "a", "/d");
        pv.spec.claim_ref = None;
        f.volumes = vec![pv];
        let check = VolumeCheck::build(&pod_with("web", &["data"]), &f).unwrap();
        assert!(check.check(&node("a")).is_ok());
        assert_eq!(
            check.check(&node("b")).unwrap_err().to_string(),
            "node(s) didn't find available persistent volumes to bind"
        );
    }

    #[test]
    fn read_write_once_pod_conflicts() {
        let mut f = Fake {
            classes: vec![st::local_path_class()],
            ..Default::default()
        };
        f.claims.insert(
            "data".into(),
            claim("data", "local-path", "ReadWriteOncePod"),
        );
        let mut other = pod_with("other", &["data"]);
        f.pods = vec![other.clone()];
        // Not yet scheduled: no conflict.
        assert!(VolumeCheck::build(&pod_with("web", &["data"]), &f).is_ok());
        other.spec.node_name = Some("a".into());
        f.pods = vec![other];
        assert_eq!(
            VolumeCheck::build(&pod_with("web", &["data"]), &f).unwrap_err(),
            "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
        );
    }
}
