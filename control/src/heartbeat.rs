//! Node heartbeats live in memory: a status write that changes nothing but the conditions'
//! `lastHeartbeatTime` is answered without touching the disk (SD cards last longer), and reads
//! of Nodes show the latest heartbeat. The same holds for the nodes' Leases in
//! `kube-node-lease`: an update that only moves `spec.renewTime` is kept here, and reads show
//! it; their creation and every other change are stored. The node lifecycle controller reads
//! both from here.
//!
//! With a datastore shared by several servers (etcd), an agent's server may not be the one
//! whose controllers judge its node. Each server then publishes a digest of the heartbeats it
//! received itself, as one etcd key per server every few seconds ([`share`]), and merges the
//! other servers' digests: one write per server per period instead of one per node every
//! 10 s, and reads through any server show the latest heartbeat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::coordination::{Lease, NODE_LEASE_NAMESPACE};
use api::core::Node;
use api::meta::{MicroTime, Time};
use api::AnyObject;
use serde::{Deserialize, Serialize};

use crate::etcd::{EtcdClient, EtcdError};

/// Where servers publish their digests in etcd (outside the objects' `/registry/`).
pub const DIGEST_PREFIX: &str = "/skiff/heartbeats/";
/// Heartbeats older than this are left out of a digest (their node is long marked unknown).
const DIGEST_HORIZON: Duration = Duration::from_secs(600);

#[derive(Default)]
pub struct Heartbeats {
    latest: Mutex<HashMap<String, Time>>,
    /// The latest renewTime of each node Lease (by name), when newer than the stored one.
    renewals: Mutex<HashMap<String, MicroTime>>,
    /// What this server received itself (not merged from other servers' digests).
    own: Mutex<Digest>,
}

/// The heartbeats one server received itself: (node, unix seconds) of status heartbeats and
/// (node Lease, unix microseconds) of renewals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    pub beats: HashMap<String, i64>,
    pub renewals: HashMap<String, i64>,
}

/// Whether a Lease is a node's heartbeat (in kube-node-lease).
pub fn is_node_lease(lease: &Lease) -> bool {
    lease.metadata.namespace() == NODE_LEASE_NAMESPACE
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn keep_max<T: Copy + Ord>(m: &mut HashMap<String, T>, key: &str, at: T) -> bool {
    match m.get_mut(key) {
        Some(slot) if *slot >= at => false,
        Some(slot) => {
            *slot = at;
            true
        }
        None => {
            m.insert(key.to_string(), at);
            true
        }
    }
}

impl Heartbeats {
    /// The heartbeats this server received itself within the horizon (older ones are
    /// dropped), for the other servers.
    pub fn digest(&self) -> Digest {
        let now = Time::now().0;
        let horizon = DIGEST_HORIZON.as_secs() as i64;
        let mut own = lock(&self.own);
        own.beats.retain(|_, at| now - *at <= horizon);
        own.renewals
            .retain(|_, at| now - *at / 1_000_000 <= horizon);
        own.clone()
    }

    /// Takes in another server's digest: reads and the node lifecycle controller see the
    /// newer of its heartbeats and this server's.
    pub fn merge(&self, digest: &Digest) {
        {
            let mut m = lock(&self.latest);
            for (node, at) in &digest.beats {
                keep_max(&mut m, node, Time(*at));
            }
        }
        let mut m = lock(&self.renewals);
        for (lease, at) in &digest.renewals {
            keep_max(&mut m, lease, MicroTime(*at));
        }
    }

    pub fn record(&self, node: &str, at: Time) {
        keep_max(&mut lock(&self.latest), node, at);
        keep_max(&mut lock(&self.own).beats, node, at.0);
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
        lock(&self.latest).remove(node);
        lock(&self.own).beats.remove(node);
    }

    /// Records a node Lease's renewal held in memory.
    pub fn record_renewal(&self, lease: &str, at: MicroTime) {
        keep_max(&mut lock(&self.renewals), lease, at);
        keep_max(&mut lock(&self.own).renewals, lease, at.0);
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
        let mut m = lock(&self.renewals);
        if m.get(lease).is_some_and(|at| Some(*at) <= stored) {
            m.remove(lease);
        }
        let mut own = lock(&self.own);
        if own
            .renewals
            .get(lease)
            .is_some_and(|at| Some(MicroTime(*at)) <= stored)
        {
            own.renewals.remove(lease);
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

/// How often a server publishes its digest with the node lifecycle controller's `grace`
/// period: an eighth of it, at most 5 s (Kubernetes' 40 s gives 5 s), at least 250 ms.
pub fn digest_period(grace: Duration) -> Duration {
    (grace / 8).clamp(Duration::from_millis(250), Duration::from_secs(5))
}

/// Shares heartbeats with the other servers on the etcd datastore until the process ends:
/// publishes this server's digest every `period` (when it changed) under
/// [`DIGEST_PREFIX`]`<server>`, on an etcd lease that ends with the server, and merges every
/// other server's digest as it arrives.
pub fn share(client: EtcdClient, beats: Arc<Heartbeats>, server: String, period: Duration) {
    let key = format!("{DIGEST_PREFIX}{server}").into_bytes();
    smol::spawn(publish(client.clone(), beats.clone(), key.clone(), period)).detach();
    smol::spawn(follow(client, beats, key)).detach();
}

async fn publish(client: EtcdClient, beats: Arc<Heartbeats>, key: Vec<u8>, period: Duration) {
    // The key lives as long as the server renews its etcd lease.
    let ttl = (period.as_secs() as i64 * 3).max(10);
    let mut lease = 0i64;
    let mut published: Option<Digest> = None;
    loop {
        smol::Timer::after(period).await;
        let result: Result<(), EtcdError> = async {
            if lease == 0 {
                lease = client.lease_grant(ttl).await?;
                published = None;
            } else if client.lease_keep_alive(lease).await? <= 0 {
                lease = 0;
                return Ok(());
            }
            let digest = beats.digest();
            if published.as_ref() != Some(&digest) {
                let bytes =
                    postcard::to_allocvec(&digest).map_err(|e| EtcdError::Decode(e.to_string()))?;
                client.put(&key, &bytes, lease).await?;
                published = Some(digest);
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "publishing this server's heartbeats failed");
            lease = 0;
        }
    }
}

async fn follow(client: EtcdClient, beats: Arc<Heartbeats>, own: Vec<u8>) {
    let start = DIGEST_PREFIX.as_bytes();
    let end = crate::etcd::prefix_end(start);
    let take = |kv: &crate::etcd::KeyValue| {
        if kv.key == own {
            return;
        }
        match postcard::from_bytes::<Digest>(&kv.value) {
            Ok(d) => beats.merge(&d),
            Err(e) => tracing::warn!(error = %e, "an unreadable heartbeat digest"),
        }
    };
    loop {
        let result: Result<(), EtcdError> = async {
            let now = client.range(start, Some(&end), None, 0).await?;
            now.kvs.iter().for_each(take);
            let mut watch = client.watch(start, Some(&end), now.revision + 1).await?;
            while let Some(batch) = watch.next().await? {
                for event in &batch.events {
                    if let crate::etcd::WatchEvent::Put { kv, .. } = event {
                        take(kv);
                    }
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "following the other servers' heartbeats failed");
        }
        smol::Timer::after(Duration::from_secs(1)).await;
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
    #[test]
    fn a_digest_holds_what_this_server_received_and_merging_keeps_the_newer() {
        let now = Time::now().0;
        let a = Heartbeats::default();
        a.record("n1", Time(now - 5));
        a.record_renewal("n1", MicroTime((now - 3) * 1_000_000));
        // Long stale: left out of the digest (its node is long marked unknown).
        a.record("old", Time(now - 3600));
        let digest = a.digest();
        assert_eq!(digest.beats.get("n1"), Some(&(now - 5)));
        assert_eq!(digest.beats.get("old"), None);
        assert_eq!(digest.renewals.get("n1"), Some(&((now - 3) * 1_000_000)));

        // Another server takes it in, keeps its own newer entries, and does not publish
        // what it merged.
        let b = Heartbeats::default();
        b.record("n2", Time(now));
        b.record_renewal("n1", MicroTime((now - 10) * 1_000_000));
        b.merge(&digest);
        assert_eq!(b.latest("n1"), Some(Time(now - 5)));
        assert_eq!(b.renewal("n1"), Some(MicroTime((now - 3) * 1_000_000)));
        assert_eq!(b.latest("n2"), Some(Time(now)));
        b.merge(&Digest {
            beats: [("n2".to_string(), now - 100)].into(),
            ..Default::default()
        });
        assert_eq!(b.latest("n2"), Some(Time(now)));
        let own = b.digest();
        assert_eq!(own.beats.keys().collect::<Vec<_>>(), ["n2"]);
        assert_eq!(own.renewals.get("n1"), Some(&((now - 10) * 1_000_000)));
        let bytes = postcard::to_allocvec(&own).unwrap();
        assert_eq!(postcard::from_bytes::<Digest>(&bytes).unwrap(), own);
    }
}
