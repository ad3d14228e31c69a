//! Node IPAM: every Node gets a podCIDR, a `/24` of `--cluster-cidr`, that no other Node
//! has. The assignment is written into the Node (`spec.podCIDR` and `spec.podCIDRs`), so it
//! is as durable as the Node and survives server restarts; the used set is the informer
//! cache's podCIDRs plus this controller's own assignments that the cache has not seen yet.
//! One task does every assignment, so two Nodes can never be handed the same range, and the
//! write itself leaves a podCIDR that appeared meanwhile alone.

use std::collections::BTreeMap;

use api::cidr::Ipv4Cidr;
use api::core::Node;
use api::{Kind, Resource};

use futures_lite::FutureExt;

use crate::error::ApiError;
use crate::machinery::informer::Change;
use crate::machinery::Context;
use crate::registry::Part;

/// The size of each node's range.
pub const NODE_CIDR_PREFIX: u8 = 24;

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

/// Which range each node in `nodes` lacking one gets, given `pending` assignments the
/// nodes do not show yet: the lowest free `/prefix` subnets of `cluster`, in name order.
/// Nodes for which no range is left are not in the answer.
pub fn plan(
    cluster: Ipv4Cidr,
    prefix: u8,
    nodes: &[Node],
    pending: &BTreeMap<String, Ipv4Cidr>,
) -> BTreeMap<String, Ipv4Cidr> {
    let mut used: Vec<Ipv4Cidr> = nodes
        .iter()
        .filter_map(|n| n.spec.pod_cidr.as_deref())
        .filter_map(|c| c.parse().ok())
        .collect();
    used.extend(pending.values().copied());
    let mut lacking: Vec<&str> = nodes
        .iter()
        .filter(|n| n.spec.pod_cidr.as_deref().unwrap_or("").is_empty())
        .filter(|n| !pending.contains_key(&n.metadata.name))
        .map(|n| n.metadata.name.as_str())
        .collect();
    lacking.sort();
    let mut out = BTreeMap::new();
    for name in lacking {
        let Some(cidr) = cluster.first_free_subnet(prefix, &used) else {
            break;
        };
        used.push(cidr);
        out.insert(name.to_string(), cidr);
    }
    out
}

async fn run(ctx: Context) {
    let cluster = ctx.config.cluster_cidr;
    let prefix = NODE_CIDR_PREFIX.max(cluster.prefix());
    let changes = ctx.informers.subscribe(&[Kind::Node]);
    // Assignments written but maybe not yet in the cache.
    let mut pending: BTreeMap<String, Ipv4Cidr> = BTreeMap::new();
    let mut exhausted_logged = false;
    loop {
        let nodes: Vec<Node> = ctx.informers.cache().list(None);
        pending.retain(|name, _| {
            nodes.iter().any(|n| {
                &n.metadata.name == name && n.spec.pod_cidr.as_deref().unwrap_or("").is_empty()
            })
        });
        let lacking = nodes
            .iter()
            .filter(|n| n.spec.pod_cidr.as_deref().unwrap_or("").is_empty())
            .count();
        let plan = plan(cluster, prefix, &nodes, &pending);
        let exhausted = plan.len() < lacking.saturating_sub(pending.len());
        if exhausted && !exhausted_logged {
            tracing::warn!(%cluster, "no podCIDR left for some nodes: the cluster CIDR is full");
            exhausted_logged = true;
        }
        let mut failed = false;
        for (name, cidr) in plan {
            match assign(&ctx, &name, cidr).await {
                Ok(Some(n)) => {
                    tracing::info!(node = %name, pod_cidr = %cidr, "assigned the node's podCIDR");
                    ctx.informers.wait_for(revision_of(&n)).await;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "cannot assign a podCIDR");
                    // Keep it reserved until the cache shows what happened to the node.
                    pending.insert(name, cidr);
                    failed = true;
                }
            }
        }
        // Plan again when a change can alter the plan (not on every status write of every
        // node: each plan decodes all nodes), or after a moment if an assignment failed.
        loop {
            let next = async { Some(changes.recv().await) };
            let change = if failed {
                next.or(async {
                    smol::Timer::after(RETRY_AFTER).await;
                    None
                })
                .await
            } else {
                next.await
            };
            match change {
                None => break,
                Some(Err(_)) => return,
                Some(Ok(c)) if replans(&c, exhausted) => break,
                Some(Ok(_)) => {}
            }
        }
        while changes.try_recv().is_ok() {}
    }
}

/// How soon a failed assignment is tried again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether `change` can alter the plan: a node came or went (a range may be free), the cache
/// was rebuilt, or a node lacks a range while ranges are left.
fn replans(change: &Change, exhausted: bool) -> bool {
    match change {
        Change::Modified { new, .. } => {
            !exhausted
                && Node::from_any_ref(new)
                    .is_some_and(|n| n.spec.pod_cidr.as_deref().unwrap_or("").is_empty())
        }
        _ => true,
    }
}

fn revision_of(n: &Node) -> u64 {
    n.metadata.resource_version.parse().unwrap_or(0)
}

/// Writes `cidr` into the node unless it has a podCIDR by now; answers the node if written.
async fn assign(ctx: &Context, name: &str, cidr: Ipv4Cidr) -> Result<Option<Node>, ApiError> {
    let value = cidr.to_string();
    let wanted = value.clone();
    let r = ctx
        .registry
        .mutate::<Node>("", name, Part::Main, move |n| {
            if n.spec.pod_cidr.as_deref().unwrap_or("").is_empty() {
                n.spec.pod_cidr = Some(value.clone());
                n.spec.pod_cidrs = vec![value.clone()];
            }
            Ok(())
        })
        .await;
    match r {
        Ok(n) if n.spec.pod_cidr.as_deref() == Some(wanted.as_str()) => Ok(Some(n)),
        Ok(_) => Ok(None),
        Err(e) if e.code() == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::meta::ObjectMeta;

    fn node(name: &str, cidr: Option<&str>) -> Node {
        let mut n = Node {
            metadata: ObjectMeta {
                name: name.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        n.spec.pod_cidr = cidr.map(str::to_string);
        n
    }

    fn c(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn gives_each_node_its_own_range() {
        let nodes = vec![
            node("b", None),
            node("a", None),
            node("old", Some("10.42.0.0/24")),
        ];
        let p = plan(c("10.42.0.0/16"), 24, &nodes, &BTreeMap::new());
        assert_eq!(p.len(), 2);
        assert_eq!(p["a"], c("10.42.1.0/24"));
        assert_eq!(p["b"], c("10.42.2.0/24"));
    }

    #[test]
    fn pending_assignments_are_not_handed_out_again() {
        let nodes = vec![node("a", None), node("b", None)];
        let pending = BTreeMap::from([("a".to_string(), c("10.42.0.0/24"))]);
        let p = plan(c("10.42.0.0/16"), 24, &nodes, &pending);
        assert_eq!(p.len(), 1, "a is already being assigned");
        assert_eq!(p["b"], c("10.42.1.0/24"));
    }

    #[test]
    fn a_full_range_leaves_nodes_without() {
        let nodes = vec![node("a", None), node("b", None), node("c", None)];
        let p = plan(c("10.42.0.0/23"), 24, &nodes, &BTreeMap::new());
        assert_eq!(p.len(), 2);
        assert!(!p.contains_key("c"));
        // A released range (its node deleted) is free again.
        let nodes = vec![node("c", None), node("b", Some("10.42.1.0/24"))];
        let p = plan(c("10.42.0.0/23"), 24, &nodes, &BTreeMap::new());
        assert_eq!(p["c"], c("10.42.0.0/24"));
    }

    #[test]
    fn only_changes_that_can_alter_the_plan_replan() {
        use crate::machinery::informer::Packed;
        use std::sync::Arc;
        let modified = |cidr: Option<&str>| {
            let n = node("a", cidr).into_any();
            Change::Modified {
                key: Default::default(),
                old: Packed::pack(&n),
                packed: Packed::pack(&n),
                new: Arc::new(n),
            }
        };
        // A status write of a node that has its range, or of one that cannot get one.
        assert!(!replans(&modified(Some("10.42.0.0/24")), false));
        assert!(!replans(&modified(None), true));
        assert!(replans(&modified(None), false));
        let n = Arc::new(node("b", None).into_any());
        assert!(replans(&Change::Deleted(n.clone()), true));
        assert!(replans(
            &Change::Added {
                key: Default::default(),
                packed: Packed::pack(&n),
                new: n
            },
            true
        ));
        assert!(replans(&Change::Resync, true));
    }
}
