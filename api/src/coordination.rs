//! coordination.k8s.io/v1 Lease: a named, renewable claim. Agents renew one per node in
//! `kube-node-lease` as their heartbeat, and servers sharing a datastore elect the one that
//! runs the controllers with one in `kube-system`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{MicroTime, ObjectMeta};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of Lease.
pub const GROUP: &str = "coordination.k8s.io";

/// The namespace of the nodes' heartbeat Leases (one per node, named after it).
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The strategies of coordinated leader election Kubernetes accepts in `spec.strategy`.
pub const STRATEGIES: &[&str] = &["OldestEmulationVersion"];

/// coordination.k8s.io/v1 Lease.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.coordination.v1.Lease")]
#[schemars(description = "Lease defines a lease concept.")]
pub struct Lease {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// spec contains the specification of the Lease.
    pub spec: LeaseSpec,
}

/// coordination.k8s.io/v1 LeaseSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.coordination.v1.LeaseSpec")]
#[schemars(description = "LeaseSpec is a specification of a Lease.")]
pub struct LeaseSpec {
    /// holderIdentity contains the identity of the holder of a current lease.
    pub holder_identity: Option<String>,
    /// leaseDurationSeconds is a duration that candidates for a lease need to wait to force
    /// acquire it. This is measured against the time of last observed renewTime.
    pub lease_duration_seconds: Option<i32>,
    /// acquireTime is a time when the current lease was acquired.
    pub acquire_time: Option<MicroTime>,
    /// renewTime is a time when the current holder of a lease has last updated the lease.
    pub renew_time: Option<MicroTime>,
    /// leaseTransitions is the number of transitions of a lease between holders.
    pub lease_transitions: Option<i32>,
    /// Strategy indicates the strategy for picking the leader for coordinated leader
    /// election. If the field is not specified, there is no active coordination for this
    /// lease.
    pub strategy: Option<String>,
    /// PreferredHolder signals to a lease holder that the lease has a more optimal holder and
    /// should be given up. This field can only be set if Strategy is also set.
    pub preferred_holder: Option<String>,
}

impl Lease {
    /// The holder, "" when none.
    pub fn holder(&self) -> &str {
        self.spec.holder_identity.as_deref().unwrap_or("")
    }
}

impl Resource for Lease {
    const KIND: Kind = Kind::Lease;
    crate::resource_basics!(Lease);

    /// A Lease's renewals are its spec: Kubernetes keeps no generation for them.
    fn spec_fingerprint(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Kubernetes' ValidateLease: the name a DNS subdomain, then ValidateLeaseSpec.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Lease);
        let spec = &self.spec;
        if let Some(d) = spec.lease_duration_seconds.filter(|d| *d <= 0) {
            errs.push(FieldError::invalid_raw(
                "spec.leaseDurationSeconds",
                d,
                "must be greater than 0",
            ));
        }
        if let Some(t) = spec.lease_transitions.filter(|t| *t < 0) {
            errs.push(FieldError::invalid_raw(
                "spec.leaseTransitions",
                t,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(s) = &spec.strategy {
            if !STRATEGIES.contains(&s.as_str()) {
                errs.push(FieldError::not_supported("spec.strategy", s, STRATEGIES));
            }
        }
        let strategy = spec.strategy.as_deref().unwrap_or("");
        if spec
            .preferred_holder
            .as_deref()
            .is_some_and(|p| !p.is_empty())
            && strategy.is_empty()
        {
            errs.push(FieldError::forbidden(
                "spec.preferredHolder",
                "may only be specified if `strategy` is defined",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_follows_kubernetes() {
        let mut l = Lease::default();
        l.metadata.name = "node-1".into();
        l.spec.lease_duration_seconds = Some(40);
        assert!(l.validate().is_empty());
        l.spec.lease_duration_seconds = Some(0);
        l.spec.lease_transitions = Some(-1);
        l.spec.preferred_holder = Some("b".into());
        let msgs: Vec<String> = l
            .validate()
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            msgs,
            [
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
                "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined",
            ]
        );
        l.spec = LeaseSpec {
            strategy: Some("Newest".into()),
            ..Default::default()
        };
        assert_eq!(l.validate()[0].field, "spec.strategy");
    }

    #[test]
    fn micro_time_round_trips_in_json() {
        let mut l = Lease::default();
        l.metadata.name = "x".into();
        l.spec.renew_time = Some(MicroTime(1_700_000_000_123_456));
        let json = crate::codec::to_json(&l);
        assert_eq!(json["spec"]["renewTime"], "2023-11-14T22:13:20.123456Z");
        let back: Lease = crate::codec::from_json(json).unwrap();
        assert_eq!(back, l);
    }
}
