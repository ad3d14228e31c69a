//! Ingress status: every Ingress of a class that skiff's built-in proxy serves (controller
//! `skiff.io/ingress`) gets, as `status.loadBalancer.ingress`, the addresses of the Ready
//! nodes whose agent runs the proxy (they carry the `ingress.skiff.io/proxy` label), the way k3s'
//! ServiceLB reports the nodes that serve a LoadBalancer Service.

use std::collections::BTreeMap;

use api::core::Node;
use api::networking::{
    Ingress, IngressClass, IngressLoadBalancerIngress, IngressLoadBalancerStatus, SKIFF_CONTROLLER,
};
use api::Kind;

use crate::machinery::informer::{beyond_heartbeat, Informers};
use crate::machinery::Context;
use crate::registry::Part;

use api::networking::PROXY_NODE_LABEL as PROXY_LABEL;

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

/// The sorted, distinct InternalIPs of the Ready nodes that run the proxy.
pub fn serving_addresses(nodes: &[Node]) -> Vec<String> {
    let mut ips: Vec<String> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .get(PROXY_LABEL)
                .is_some_and(|v| v == "true")
        })
        .filter(|n| {
            n.status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
        .flat_map(|n| &n.status.addresses)
        .filter(|a| a.type_ == "InternalIP" && !a.address.is_empty())
        .map(|a| a.address.clone())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// The status skiff gives an Ingress of one of its classes.
fn desired(addresses: &[String]) -> IngressLoadBalancerStatus {
    IngressLoadBalancerStatus {
        ingress: addresses
            .iter()
            .map(|ip| IngressLoadBalancerIngress {
                ip: Some(ip.clone()),
                ..Default::default()
            })
            .collect(),
    }
}

async fn run(ctx: Context) {
    let changes = ctx
        .informers
        .subscribe(&[Kind::Node, Kind::Ingress, Kind::IngressClass]);
    loop {
        let nodes: Vec<Node> = ctx.informers.cache().list(None);
        let classes = ctx.informers.cache().list::<IngressClass>(None);
        // An Ingress without a class (made before any default class existed) belongs to the
        // default class, as the proxy sees it.
        let default_is_ours = classes.iter().any(|c| {
            api::networking::is_default_class(c)
                && c.spec.controller.as_deref() == Some(SKIFF_CONTROLLER)
        });
        let ours: BTreeMap<String, bool> = classes
            .into_iter()
            .map(|c| {
                let skiff = c.spec.controller.as_deref() == Some(SKIFF_CONTROLLER);
                (c.metadata.name, skiff)
            })
            .collect();
        let want = desired(&serving_addresses(&nodes));
        for ing in ctx.informers.cache().list::<Ingress>(None) {
            let served = match api::networking::class_of(&ing) {
                Some(c) => ours.get(c).copied().unwrap_or(false),
                None => default_is_ours,
            };
            if !served {
                continue;
            }
            if ing.status.load_balancer.as_ref() == Some(&want) {
                continue;
            }
            let (ns, name, uid) = (
                ing.metadata.namespace().to_string(),
                ing.metadata.name.clone(),
                ing.metadata.uid.clone(),
            );
            let status = want.clone();
            let r = ctx
                .registry
                .mutate::<Ingress>(&ns, &name, Part::Status, move |i| {
                    if i.metadata.uid == uid {
                        i.status.load_balancer = Some(status.clone());
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = r {
                if e.code() != 404 && e.code() != 409 {
                    tracing::warn!(ingress = %name, namespace = %ns, error = %e, "cannot write the Ingress status");
                }
            }
        }
        // Wait for a change that is more than a heartbeat (nodes are re-read whole), taking
        // every change queued meanwhile in one pass.
        if !Informers::next_that_matters(&changes, beyond_heartbeat).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{NodeAddress, NodeCondition};

    fn node(name: &str, ip: &str, proxy: bool, ready: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        if proxy {
            n.metadata.labels.insert(PROXY_LABEL.into(), "true".into());
        }
        n.status.addresses = vec![NodeAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        }];
        n.status.conditions = vec![NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        }];
        n
    }

    #[test]
    fn only_ready_proxy_nodes_serve() {
        let nodes = [
            node("b", "10.0.0.2", true, true),
            node("a", "10.0.0.1", true, true),
            node("c", "10.0.0.3", false, true),
            node("d", "10.0.0.4", true, false),
        ];
        assert_eq!(serving_addresses(&nodes), vec!["10.0.0.1", "10.0.0.2"]);
    }
}
