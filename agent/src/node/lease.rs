//! The node's heartbeat Lease, as the kubelet's node lease controller keeps it: a Lease named
//! after the node in `kube-node-lease`, held by the node, 40 s long, owned by the Node (so it
//! goes with it), renewed every 10 s. The server keeps renewals in memory (nothing is written
//! to disk for them), and its node lifecycle controller counts them as heartbeats.

use std::time::Duration;

use api::client::{Client, ClientError};
use api::coordination::{Lease, NODE_LEASE_NAMESPACE};
use api::core::Node;
use api::meta::{MicroTime, ObjectMeta, OwnerReference};

/// The kubelet's default `nodeLeaseDurationSeconds`.
pub const LEASE_DURATION_SECONDS: i32 = 40;

/// How often the kubelet renews: a quarter of the lease's duration.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(LEASE_DURATION_SECONDS as u64 / 4);

/// The Lease of one node, with the last version the server answered (renewals update it, so
/// no read is needed between them).
pub struct NodeLease {
    node: String,
    latest: Option<Lease>,
}

impl NodeLease {
    pub fn new(node: &str) -> NodeLease {
        NodeLease {
            node: node.to_string(),
            latest: None,
        }
    }

    /// The Lease as first made: held by the node, owned by its Node.
    fn fresh(&self, owner: Option<&Node>) -> Lease {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: self.node.clone(),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Some(node) = owner.filter(|n| !n.metadata.uid.is_empty()) {
            lease.metadata.owner_references.push(OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.metadata.name.clone(),
                uid: node.metadata.uid.clone(),
                ..Default::default()
            });
        }
        self.renewed(lease)
    }

    /// `lease` held by this node, renewed now.
    fn renewed(&self, mut lease: Lease) -> Lease {
        lease.spec.holder_identity = Some(self.node.clone());
        lease.spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
        lease.spec.renew_time = Some(MicroTime::now());
        lease
    }

    /// Renews the Lease, making it first if it does not exist (the kubelet's ensure, then
    /// update). `owner` is the node's Node, for a Lease made anew. A conflict or a Lease gone
    /// in between is read again once.
    pub async fn renew(
        &mut self,
        client: &Client,
        owner: Option<&Node>,
    ) -> Result<(), ClientError> {
        for _ in 0..2 {
            let current = match self.latest.take() {
                Some(l) => l,
                None => match client.get::<Lease>(NODE_LEASE_NAMESPACE, &self.node).await {
                    Ok(l) => l,
                    Err(e) if e.is_not_found() => match client.create(&self.fresh(owner)).await {
                        Ok(made) => {
                            self.latest = Some(made);
                            return Ok(());
                        }
                        Err(e) if e.code() == Some(409) => continue,
                        Err(e) => return Err(e),
                    },
                    Err(e) => return Err(e),
                },
            };
            match client.replace(&self.renewed(current)).await {
                Ok(l) => {
                    self.latest = Some(l);
                    return Ok(());
                }
                Err(e) if e.is_conflict() || e.is_not_found() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ClientError::Protocol(format!(
            "lease {NODE_LEASE_NAMESPACE}/{} kept changing while renewing",
            self.node
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_shape() {
        let mut node = Node::default();
        node.metadata.name = "pi-1".into();
        node.metadata.uid = "u-1".into();
        let l = NodeLease::new("pi-1").fresh(Some(&node));
        assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
        assert_eq!(l.metadata.name, "pi-1");
        assert_eq!(l.spec.holder_identity.as_deref(), Some("pi-1"));
        assert_eq!(l.spec.lease_duration_seconds, Some(40));
        assert!(l.spec.renew_time.is_some());
        assert_eq!(l.metadata.owner_references[0].uid, "u-1");
        assert_eq!(RENEW_INTERVAL, Duration::from_secs(10));
    }
}
