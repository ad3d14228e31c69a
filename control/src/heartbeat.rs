//! Node heartbeats live in memory: a status write that changes nothing but the conditions'
//! `lastHeartbeatTime` is answered without touching the disk (SD cards last longer), and reads
//! of Nodes show the latest heartbeat. The same holds for the nodes' Leases in
//! `kube-node-lease`: an update that only moves `spec.renewTime` is kept here, and reads show
//! it; their creation and every other change are stored. The node lifecycle controller reads
//! both from here.

use std::collections::HashMap;
use std::sync::Mutex;

use api::coordination::{Lease, NODE_LEASE_NAMESPACE};
use api::core::Node;
use api::meta::{MicroTime, Time};
use api::AnyObject;

#[derive(Default)]
pub struct Heartbeats {
    latest: Mutex<HashMap<String, Time>>,
    /// The latest renewTime of each node Lease (by name), when newer than the stored one.
    renewals: Mutex<HashMap<String, MicroTime>>,
    /// Heartbeats are written through to the store: with a datastore shared by several
    /// servers, an agent's server may not be the one whose controllers judge its node.
    write_through: bool,
}

/// Whether a Lease is a node's heartbeat (in kube-node-lease).
pub fn is_node_lease(lease: &Lease) -> bool {
    lease.metadata.namespace() == NODE_LEASE_NAMESPACE
}

impl Heartbeats {
    /// Heartbeats that are written to the store like any other change (a shared datastore).
    pub fn written_through() -> Heartbeats {
        Heartbeats {
            write_through: true,
            ..Default::default()
        }
    }

    /// Whether heartbeats may be held in memory instead of written.
    pub fn in_memory(&self) -> bool {
        !self.write_through
    }

    pub fn record(&self, node: &str, at: Time) {
        let mut m = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let slot = m.entry(node.to_string()).or_insert(at);
        if at > *slot {
            *slot = at;
        }
    }

    /// The latest heartbeat of `node` held in memory.
    pub fn latest(&self, node: &str) -> Option<Time> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .copied()
    }

    pub fn forget(&self, node: &str) {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }

    /// Records a node Lease's renewal held in memory.
    pub fn record_renewal(&self, lease: &str, at: MicroTime) {
        let mut m = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        let slot = m.entry(lease.to_string()).or_insert(at);
        if at > *slot {
            *slot = at;
        }
    }

    /// The latest renewal of node Lease `lease` held in memory.
    pub fn renewal(&self, lease: &str) -> Option<MicroTime> {
        self.renewals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(lease)
            .copied()
    }

    /// Forgets the renewals of node Lease `lease` (a stored write carries its own).
    pub fn forget_renewal(&self, lease: &str) {
        self.forget_renewal_upto(lease, Some(MicroTime(i64::MAX)));
    }

    /// Forgets the renewal of node Lease `lease` held in memory unless it is newer than
    /// `stored`, the renewTime just written: reads show the newer of the two.
    pub fn forget_renewal_upto(&self, lease: &str, stored: Option<MicroTime>) {
        let mut m = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        if m.get(lease).is_some_and(|at| Some(*at) <= stored) {
            m.remove(lease);
        }
    }

    /// Shows the in-memory renewal on a node Lease read from the store.
    pub fn overlay_lease(&self, lease: &mut Lease) {
        if !is_node_lease(lease) {
            return;
        }
        if let Some(at) = self.renewal(&lease.metadata.name) {
            if lease.spec.renew_time.is_none_or(|t| t < at) {
                lease.spec.renew_time = Some(at);
            }
        }
    }

    /// Shows what is held in memory on an object read from the store (Nodes, node Leases).
    pub fn overlay_any(&self, obj: &mut AnyObject) {
        match obj {
            AnyObject::Node(n) => self.overlay(n),
            AnyObject::Lease(l) => self.overlay_lease(l),
            _ => {}
        }
    }

    /// Shows the in-memory heartbeat on a Node read from the store.
    pub fn overlay(&self, node: &mut Node) {
        if let Some(at) = self.latest(&node.metadata.name) {
            for c in &mut node.status.conditions {
                if c.last_heartbeat_time.is_none_or(|t| t < at) {
                    c.last_heartbeat_time = Some(at);
                }
            }
        }
    }
}

/// The newest heartbeat in `new` if it differs from `old` only in heartbeat times.
pub fn heartbeat_only(old: &Node, new: &Node) -> Option<Time> {
    let strip = |n: &Node| {
        let mut n = n.clone();
        for c in &mut n.status.conditions {
            c.last_heartbeat_time = None;
        }
        n
    };
    if strip(old) != strip(new) {
        return None;
    }
    new.status
        .conditions
        .iter()
        .filter_map(|c| c.last_heartbeat_time)
        .max()
}

/// The new renewTime if `new` differs from the stored `old` node Lease only by a later
/// `spec.renewTime`.
pub fn renewal_only(old: &Lease, new: &Lease) -> Option<MicroTime> {
    if !is_node_lease(old) {
        return None;
    }
    let at = new.spec.renew_time?;
    if old.spec.renew_time.is_some_and(|t| t >= at) {
        return None;
    }
    let mut stripped = new.clone();
    stripped.spec.renew_time = old.spec.renew_time;
    (stripped == *old).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::NodeCondition;

    fn lease(ns: &str, holder: &str, renew: i64) -> Lease {
        let mut l = Lease::default();
        l.metadata.name = "n".into();
        l.metadata.namespace = Some(ns.into());
        l.spec.holder_identity = Some(holder.into());
        l.spec.renew_time = Some(MicroTime(renew));
        l
    }

    #[test]
    fn only_renewals_of_node_leases_stay_in_memory() {
        let old = lease(NODE_LEASE_NAMESPACE, "n", 10);
        assert_eq!(
            renewal_only(&old, &lease(NODE_LEASE_NAMESPACE, "n", 20)),
            Some(MicroTime(20))
        );
        // Another holder, an older renewal, or a Lease elsewhere: stored.
        assert_eq!(
            renewal_only(&old, &lease(NODE_LEASE_NAMESPACE, "m", 20)),
            None
        );
        assert_eq!(
            renewal_only(&old, &lease(NODE_LEASE_NAMESPACE, "n", 5)),
            None
        );
        let elsewhere = lease("kube-system", "n", 10);
        assert_eq!(
            renewal_only(&elsewhere, &lease("kube-system", "n", 20)),
            None
        );
        let beats = Heartbeats::default();
        beats.record_renewal("n", MicroTime(20));
        beats.record_renewal("n", MicroTime(15));
        let mut shown = AnyObject::Lease(old.clone());
        beats.overlay_any(&mut shown);
        let AnyObject::Lease(shown) = shown else {
            unreachable!()
        };
        assert_eq!(shown.spec.renew_time, Some(MicroTime(20)));
        let mut other = elsewhere.clone();
        beats.overlay_lease(&mut other);
        assert_eq!(other, elsewhere);
        beats.forget_renewal("n");
        assert_eq!(beats.renewal("n"), None);
    }

    fn node(beat: i64, status: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = "n".into();
        n.status.conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_heartbeat_time: Some(Time(beat)),
            ..Default::default()
        });
        n
    }

    #[test]
    fn only_heartbeat_changes_are_recognised_and_overlaid() {
        assert_eq!(
            heartbeat_only(&node(1, "True"), &node(5, "True")),
            Some(Time(5))
        );
        assert_eq!(heartbeat_only(&node(1, "True"), &node(5, "False")), None);
        let beats = Heartbeats::default();
        beats.record("n", Time(9));
        beats.record("n", Time(7));
        let mut n = node(1, "True");
        beats.overlay(&mut n);
        assert_eq!(n.status.conditions[0].last_heartbeat_time, Some(Time(9)));
    }
}
