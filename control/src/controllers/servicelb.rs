//! The service load balancer (k3s ServiceLB's model, without its helper pods): every
//! LoadBalancer Service that skiff serves (no `loadBalancerClass`, or skiff's own) gets, as
//! `status.loadBalancer.ingress`, the addresses of the nodes that serve its ports, and every
//! such node's service proxy forwards those ports on its address (see `agent::proxy`).
//!
//! A node serves LoadBalancer Services when it is Ready, its proxy runs (it keeps the
//! [`SERVICE_LB_PORTS_IN_USE`] annotation on its Node) and, when some node carries k3s'
//! `svccontroller.k3s.cattle.io/enablelb=true` label, it carries it too. On each node the
//! Services are taken oldest first: one whose port (protocol and number) a host process holds
//! there (the annotation says so) or an older Service already serves there is left out on
//! that node, and a Warning event on the Service says where and why.

use std::collections::{BTreeMap, BTreeSet};

use api::core::{
    LoadBalancerIngress, LoadBalancerStatus, Node, Service, SERVICE_LB_NODE_LABEL,
    SERVICE_LB_PORTS_IN_USE,
};
use api::Kind;

use crate::machinery::events::Recorder;
use crate::machinery::informer::{beyond_heartbeat, Informers};
use crate::machinery::Context;
use crate::registry::Part;

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

/// What the load balancer decided for one Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The addresses of the nodes that serve it, sorted.
    pub addresses: Vec<String>,
    /// Why it is left out on some nodes, one sentence per node, sorted by node.
    pub conflicts: Vec<String>,
}

fn ready(n: &Node) -> bool {
    n.status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The address a node serves on: its ExternalIP if it has one, else its InternalIP.
fn node_address(n: &Node) -> Option<String> {
    n.status
        .address("ExternalIP")
        .or_else(|| n.status.address("InternalIP"))
        .filter(|a| !a.is_empty())
        .map(str::to_string)
}

/// The nodes that may serve LoadBalancer Services, by name, with their address and the ports
/// a host process holds there.
fn serving_nodes(nodes: &[Node]) -> Vec<(&Node, String, BTreeSet<&str>)> {
    let labelled = nodes.iter().any(|n| {
        n.metadata
            .labels
            .get(SERVICE_LB_NODE_LABEL)
            .is_some_and(|v| v == "true")
    });
    let mut out: Vec<_> = nodes
        .iter()
        .filter(|n| ready(n))
        .filter(|n| {
            !labelled
                || n.metadata
                    .labels
                    .get(SERVICE_LB_NODE_LABEL)
                    .is_some_and(|v| v == "true")
        })
        .filter_map(|n| {
            let in_use = n.metadata.annotations.get(SERVICE_LB_PORTS_IN_USE)?;
            let addr = node_address(n)?;
            let ports = in_use.split(',').filter(|p| !p.is_empty()).collect();
            Some((n, addr, ports))
        })
        .collect();
    out.sort_by(|a, b| a.0.metadata.name.cmp(&b.0.metadata.name));
    out
}

/// Decides which nodes serve which of `services` (only those skiff serves are answered).
pub fn assign(services: &[Service], nodes: &[Node]) -> BTreeMap<(String, String), Outcome> {
    let mut ours: Vec<&Service> = services
        .iter()
        .filter(|s| s.spec.is_skiff_load_balancer())
        .collect();
    // Oldest first: a Service keeps the ports it was given when a newer one asks for them.
    ours.sort_by(|a, b| {
        let t = |s: &Service| s.metadata.creation_timestamp.map(|t| t.0);
        t(a).cmp(&t(b))
            .then_with(|| a.metadata.namespace().cmp(b.metadata.namespace()))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut out: BTreeMap<(String, String), Outcome> = ours
        .iter()
        .map(|s| {
            (
                (s.metadata.namespace().to_string(), s.metadata.name.clone()),
                Outcome::default(),
            )
        })
        .collect();
    for (node, addr, in_use) in serving_nodes(nodes) {
        // PROTOCOL/port -> the Service that has it on this node.
        let mut taken: BTreeMap<String, String> = BTreeMap::new();
        for s in &ours {
            let id = format!("{}/{}", s.metadata.namespace(), s.metadata.name);
            let ports = s.spec.load_balancer_ports();
            let host = ports.iter().find(|p| in_use.contains(p.as_str()));
            let other = ports.iter().find_map(|p| taken.get(p).map(|o| (p, o)));
            let conflict = match (host, other) {
                (Some(p), _) => Some(format!(
                    "port {p} is in use by a host process on node {}",
                    node.metadata.name
                )),
                (None, Some((p, o))) => Some(format!(
                    "port {p} on node {} is taken by LoadBalancer Service {o}",
                    node.metadata.name
                )),
                (None, None) => None,
            };
            let key = (s.metadata.namespace().to_string(), s.metadata.name.clone());
            let Some(o) = out.get_mut(&key) else { continue };
            match conflict {
                Some(c) => o.conflicts.push(c),
                None => {
                    for p in ports {
                        taken.insert(p, id.clone());
                    }
                    o.addresses.push(addr.clone());
                }
            }
        }
    }
    for o in out.values_mut() {
        o.addresses.sort();
        o.addresses.dedup();
    }
    out
}

fn status_of(addresses: &[String]) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: addresses
            .iter()
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip.clone()),
                // The node forwards packets for its own address: the address is a VIP in
                // Kubernetes' sense (traffic to it is delivered to the Service by the node).
                ip_mode: Some("VIP".into()),
                ..Default::default()
            })
            .collect(),
    }
}

fn has_ingress(s: &Service) -> bool {
    s.status
        .load_balancer
        .as_ref()
        .is_some_and(|lb| !lb.ingress.is_empty())
}

async fn run(ctx: Context) {
    let changes = ctx.informers.subscribe(&[Kind::Node, Kind::Service]);
    let recorder = Recorder::start(ctx.registry.clone(), "service-lb-controller");
    // The conflicts last reported per Service (by uid): an event is written when they change.
    let mut reported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    loop {
        let nodes: Vec<Node> = ctx.informers.cache().list(None);
        let services: Vec<Service> = ctx.informers.cache().list(None);
        let outcomes = assign(&services, &nodes);
        let mut live = BTreeSet::new();
        for s in &services {
            let key = (s.metadata.namespace().to_string(), s.metadata.name.clone());
            let want = match outcomes.get(&key) {
                Some(o) => {
                    live.insert(s.metadata.uid.clone());
                    if o.conflicts.is_empty() {
                        reported.remove(&s.metadata.uid);
                    } else if reported.get(&s.metadata.uid) != Some(&o.conflicts) {
                        recorder.warning(
                            s,
                            "PortInUse",
                            format!(
                                "not served on {} node(s): {}",
                                o.conflicts.len(),
                                o.conflicts.join("; ")
                            ),
                        );
                        reported.insert(s.metadata.uid.clone(), o.conflicts.clone());
                    }
                    status_of(&o.addresses)
                }
                // No longer a LoadBalancer (Kubernetes clears the status then); a Service of
                // another loadBalancerClass is left alone.
                None if s.spec.type_or_default() != "LoadBalancer" && has_ingress(s) => {
                    LoadBalancerStatus::default()
                }
                None => continue,
            };
            let current = s.status.load_balancer.clone().unwrap_or_default();
            if current == want {
                continue;
            }
            let (ns, name, uid) = (key.0.clone(), key.1.clone(), s.metadata.uid.clone());
            let r = ctx
                .registry
                .mutate::<Service>(&ns, &name, Part::Status, move |svc| {
                    if svc.metadata.uid == uid {
                        svc.status.load_balancer = Some(want.clone());
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = r {
                if e.code() != 404 && e.code() != 409 {
                    tracing::warn!(service = %name, namespace = %ns, error = %e, "cannot write the Service's load balancer status");
                }
            }
        }
        reported.retain(|uid, _| live.contains(uid));
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
    use api::core::{NodeAddress, NodeCondition, ServicePort};
    use api::meta::Time;

    fn node(name: &str, ip: &str, in_use: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = name.into();
        if let Some(p) = in_use {
            n.metadata
                .annotations
                .insert(SERVICE_LB_PORTS_IN_USE.into(), p.into());
        }
        n.status.addresses = vec![NodeAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        }];
        n.status.conditions = vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }];
        n
    }

    fn lb(name: &str, created: i64, port: i32, class: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.name = name.into();
        s.metadata.namespace = Some("default".into());
        s.metadata.creation_timestamp = Some(Time(created));
        s.spec.type_ = Some("LoadBalancer".into());
        s.spec.load_balancer_class = class.map(str::to_string);
        s.spec.ports = vec![ServicePort {
            port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }];
        s
    }

    fn key(name: &str) -> (String, String) {
        ("default".into(), name.into())
    }

    #[test]
    fn oldest_service_keeps_the_port_and_host_ports_exclude_a_node() {
        let mut n2 = node("n2", "10.0.0.2", Some("TCP/443"));
        n2.status.addresses.push(NodeAddress {
            type_: "ExternalIP".into(),
            address: "203.0.113.2".into(),
        });
        let nodes = [
            node("n1", "10.0.0.1", Some("")),
            n2,
            // No annotation: its proxy does not run.
            node("n3", "10.0.0.3", None),
        ];
        let services = [
            lb("newer", 20, 80, None),
            lb("older", 10, 80, None),
            lb("tls", 30, 443, Some(api::core::SERVICE_LB_CLASS)),
            lb("metallb", 5, 80, Some("metallb.io/metallb")),
        ];
        let out = assign(&services, &nodes);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out[&key("older")].addresses, ["10.0.0.1", "203.0.113.2"]);
        assert!(out[&key("older")].conflicts.is_empty());
        assert!(out[&key("newer")].addresses.is_empty());
        assert_eq!(out[&key("newer")].conflicts.len(), 2);
        assert!(out[&key("newer")].conflicts[0]
            .contains("port TCP/80 on node n1 is taken by LoadBalancer Service default/older"));
        assert_eq!(out[&key("tls")].addresses, ["10.0.0.1"]);
        assert_eq!(
            out[&key("tls")].conflicts,
            ["port TCP/443 is in use by a host process on node n2"]
        );
    }

    #[test]
    fn enablelb_label_restricts_the_nodes() {
        let mut n1 = node("n1", "10.0.0.1", Some(""));
        n1.metadata
            .labels
            .insert(SERVICE_LB_NODE_LABEL.into(), "true".into());
        let nodes = [n1, node("n2", "10.0.0.2", Some(""))];
        let out = assign(&[lb("web", 1, 8080, None)], &nodes);
        assert_eq!(out[&key("web")].addresses, ["10.0.0.1"]);
    }
}
