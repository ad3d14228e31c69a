//! Endpoints controller: for every Service with a selector, an Endpoints object of the same
//! name that lists the matching pods' IPs (ready pods under `addresses`, the others under
//! `notReadyAddresses`) with the Service's ports resolved per pod (a named `targetPort` is
//! looked up in the pod's container ports, so pods that number the same name differently land
//! in different subsets). Services without a selector keep hand-written Endpoints; the
//! Endpoints of a deleted Service go with it.

use std::collections::BTreeMap;

use api::core::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use api::meta::{DeleteOptions, IntOrString, ObjectMeta};
use api::object::Resource;
use api::selector::Selector;
use api::Kind;

use super::workload;
use crate::error::ApiError;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, key_of, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

/// The label Kubernetes puts on the Endpoints of a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

pub fn start(ctx: &Context) {
    let queue =
        fed_queue::<Service, _>(ctx, &[Kind::Service, Kind::Pod, Kind::Endpoints], keys_for);
    let ctx = ctx.clone();
    spawn_workers(
        "endpoints",
        ctx.informers.clone(),
        queue,
        2,
        move |key, mut s| {
            let ctx = ctx.clone();
            async move {
                let r = sync(&ctx, &key, &mut s).await;
                (s, r)
            }
        },
    );
}

/// The Services a change concerns.
pub(crate) fn keys_for(ctx: &Context, change: &Change) -> Vec<Key> {
    let Some(obj) = change.object() else {
        return ctx
            .informers
            .cache()
            .list::<Service>(None)
            .iter()
            .map(key_of)
            .collect();
    };
    if let Some(s) = Service::from_any_ref(obj) {
        return vec![key_of(s)];
    }
    if let Some(e) = Endpoints::from_any_ref(obj) {
        return vec![key_of(e)];
    }
    let mut keys = Vec::new();
    let Some(pod) = Pod::from_any_ref(obj) else {
        return keys;
    };
    // The Services that select the pod before or after the change (labels only).
    let old = change.old_meta();
    let cache = ctx.informers.cache().read();
    for meta in std::iter::once(&pod.metadata).chain(old.as_ref()) {
        let ns = meta.namespace();
        for s in cache.iter::<Service>(Some(ns)) {
            if selector_of(&s).is_some_and(|sel| sel.matches(&meta.labels)) {
                keys.push(key_of(&s));
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The Service's pod selector; None for Services whose Endpoints are written by hand.
pub(crate) fn selector_of(s: &Service) -> Option<Selector> {
    if s.spec.selector.is_empty() || s.spec.type_or_default() == "ExternalName" {
        return None;
    }
    Selector::from_labels(&s.spec.selector).ok()
}

async fn sync(ctx: &Context, (ns, name): &Key, s: &mut Synced) -> Result<(), ApiError> {
    let service = ctx.informers.cache().get::<Service>(ns, name);
    let existing = ctx.informers.cache().get::<Endpoints>(ns, name);
    let Some(service) = service else {
        if existing.is_some() {
            let r = ctx
                .registry
                .delete::<Endpoints>(ns, name, DeleteOptions::default())
                .await;
            if let Some((e, _)) = ignore_not_found(r)? {
                s.wrote(&e);
            }
        }
        return Ok(());
    };
    let Some(selector) = selector_of(&service) else {
        return Ok(());
    };
    if service.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let subsets = {
        let cache = ctx.informers.cache().read();
        let pods: Vec<Pod> = cache
            .iter_where::<Pod>(Some(ns), |m| selector.matches(&m.labels))
            .collect();
        let pods: Vec<&Pod> = pods.iter().collect();
        build_subsets(&service, &pods)
    };
    let labels = endpoints_labels(&service);
    match existing {
        Some(e) if e.subsets == subsets && e.metadata.labels == labels => Ok(()),
        Some(_) => {
            let r = ctx
                .registry
                .mutate::<Endpoints>(ns, name, Part::Main, move |e| {
                    e.subsets = subsets.clone();
                    e.metadata.labels = labels.clone();
                    Ok(())
                })
                .await;
            if let Some(e) = ignore_not_found(r)? {
                s.wrote(&e);
            }
            Ok(())
        }
        None => {
            let e = Endpoints {
                metadata: ObjectMeta {
                    name: name.clone(),
                    namespace: Some(ns.clone()),
                    labels,
                    ..Default::default()
                },
                subsets,
            };
            match ctx.registry.create(e, None).await {
                Ok(e) => {
                    s.wrote(&e);
                    Ok(())
                }
                // On a conflict (someone wrote it meanwhile) the retry updates it.
                Err(e) => Err(e),
            }
        }
    }
}

/// The Service's labels, plus the headless marker and, as Kubernetes' Endpoints controller
/// marks its own, the label that keeps the mirroring controller off them.
fn endpoints_labels(s: &Service) -> BTreeMap<String, String> {
    let mut labels = s.metadata.labels.clone();
    labels.insert(api::discovery::SKIP_MIRROR_LABEL.into(), "true".into());
    if s.spec.is_headless() {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

/// The port a Service port reaches on `pod`: a number as is, a name looked up among the pod's
/// container ports of the same protocol. None when the pod has no such named port.
pub fn resolve_target_port(port: &api::core::ServicePort, pod: &Pod) -> Option<i32> {
    let proto = port.protocol.as_deref().unwrap_or("TCP");
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => pod
            .spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .find(|cp| {
                cp.name.as_deref() == Some(name.as_str())
                    && cp.protocol.as_deref().unwrap_or("TCP") == proto
            })
            .map(|cp| cp.container_port),
    }
}

/// Whether a pod belongs in the Endpoints at all: it has an IP, has not finished, and is not
/// terminating (unless the Service publishes not-ready addresses).
fn eligible(pod: &Pod, publish_not_ready: bool) -> bool {
    if pod.status.pod_ip.as_deref().unwrap_or("").is_empty() {
        return false;
    }
    if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    pod.metadata.deletion_timestamp.is_none() || publish_not_ready
}

/// The pod's hostname as an endpoint of `service` (Kubernetes' ShouldSetHostname): set when
/// the pod names the Service as its subdomain.
pub(crate) fn endpoint_hostname(pod: &Pod, service: &Service) -> Option<String> {
    match (&pod.spec.hostname, &pod.spec.subdomain) {
        (Some(h), Some(sub)) if !h.is_empty() && *sub == service.metadata.name => Some(h.clone()),
        _ => None,
    }
}

fn address_of(pod: &Pod, service: &Service) -> EndpointAddress {
    let hostname = endpoint_hostname(pod, service);
    EndpointAddress {
        ip: pod.status.pod_ip.clone().unwrap_or_default(),
        hostname,
        node_name: pod.spec.node_name.clone().filter(|n| !n.is_empty()),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: Some(pod.metadata.name.clone()),
            uid: Some(pod.metadata.uid.clone()),
            ..Default::default()
        }),
    }
}

/// The subsets of a Service's Endpoints from the pods its selector matches. Pods whose
/// resolved ports are the same share a subset; subsets, their ports and addresses come in a
/// stable order so an unchanged world gives an identical object.
pub fn build_subsets(service: &Service, pods: &[&Pod]) -> Vec<EndpointSubset> {
    let publish = service.spec.publish_not_ready_addresses == Some(true);
    // ports of a subset -> (ready, not ready)
    type Group = (Vec<EndpointAddress>, Vec<EndpointAddress>);
    let mut groups: BTreeMap<Vec<(String, i32, String)>, Group> = BTreeMap::new();
    for pod in pods.iter().filter(|p| eligible(p, publish)) {
        let mut ports: Vec<(String, i32, String)> = service
            .spec
            .ports
            .iter()
            .filter_map(|sp| {
                resolve_target_port(sp, pod).map(|n| {
                    (
                        sp.name.clone().unwrap_or_default(),
                        n,
                        sp.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    )
                })
            })
            .collect();
        if ports.is_empty() && !service.spec.ports.is_empty() {
            // None of the Service's ports exists on this pod.
            continue;
        }
        ports.sort();
        let group = groups.entry(ports).or_default();
        let address = address_of(pod, service);
        if publish || workload::pod_ready(pod) {
            group.0.push(address);
        } else {
            group.1.push(address);
        }
    }
    let app_protocols: BTreeMap<String, Option<String>> = service
        .spec
        .ports
        .iter()
        .map(|p| (p.name.clone().unwrap_or_default(), p.app_protocol.clone()))
        .collect();
    let by_ip = |a: &EndpointAddress, b: &EndpointAddress| {
        let key = |x: &EndpointAddress| {
            (
                x.ip.parse::<std::net::IpAddr>().ok(),
                x.ip.clone(),
                x.target_ref.as_ref().and_then(|r| r.uid.clone()),
            )
        };
        key(a).cmp(&key(b))
    };
    groups
        .into_iter()
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by(by_ip);
            not_ready.sort_by(by_ip);
            EndpointSubset {
                addresses: ready,
                not_ready_addresses: not_ready,
                ports: ports
                    .into_iter()
                    .map(|(name, port, protocol)| EndpointPort {
                        app_protocol: app_protocols.get(&name).cloned().flatten(),
                        name: (!name.is_empty()).then_some(name),
                        port,
                        protocol: Some(protocol),
                    })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{Container, ContainerPort, PodCondition, ServicePort};
    use api::meta::Time;

    fn service(ports: Vec<ServicePort>) -> Service {
        let mut s = Service::default();
        s.metadata.name = "web".into();
        s.metadata.namespace = Some("default".into());
        s.spec.selector.insert("app".into(), "web".into());
        s.spec.ports = ports;
        s.set_defaults();
        s
    }

    fn port(name: &str, port: i32, target: IntOrString) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port,
            target_port: Some(target),
            ..Default::default()
        }
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool, named: &[(&str, i32)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = format!("uid-{name}");
        p.metadata.labels.insert("app".into(), "web".into());
        p.spec.node_name = Some("n1".into());
        p.spec.containers.push(Container {
            name: "c".into(),
            ports: named
                .iter()
                .map(|(n, port)| ContainerPort {
                    name: Some(n.to_string()),
                    container_port: *port,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        p.status.phase = Some("Running".into());
        p.status.pod_ip = ip.map(str::to_string);
        p.status.conditions.push(PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        });
        p
    }

    fn ips(a: &[EndpointAddress]) -> Vec<&str> {
        a.iter().map(|a| a.ip.as_str()).collect()
    }

    #[test]
    fn ready_and_not_ready_pods() {
        let s = service(vec![port("http", 80, IntOrString::Int(8080))]);
        let pods = [
            pod("b", Some("10.42.0.12"), true, &[]),
            pod("a", Some("10.42.0.9"), true, &[]),
            pod("c", Some("10.42.0.3"), false, &[]),
            pod("noip", None, true, &[]),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let subsets = build_subsets(&s, &refs);
        assert_eq!(subsets.len(), 1);
        let sub = &subsets[0];
        assert_eq!(ips(&sub.addresses), ["10.42.0.9", "10.42.0.12"]);
        assert_eq!(ips(&sub.not_ready_addresses), ["10.42.0.3"]);
        assert_eq!(
            sub.ports,
            vec![EndpointPort {
                name: Some("http".into()),
                port: 8080,
                protocol: Some("TCP".into()),
                app_protocol: None
            }]
        );
        let a = &sub.addresses[0];
        assert_eq!(a.node_name.as_deref(), Some("n1"));
        let r = a.target_ref.as_ref().expect("targetRef");
        assert_eq!(r.name.as_deref(), Some("a"));
        assert_eq!(r.uid.as_deref(), Some("uid-a"));
        assert_eq!(r.kind.as_deref(), Some("Pod"));
    }

    #[test]
    fn terminating_and_finished_pods_are_left_out() {
        let s = service(vec![port("http", 80, IntOrString::Int(80))]);
        let mut gone = pod("gone", Some("10.42.0.5"), true, &[]);
        gone.metadata.deletion_timestamp = Some(Time::now());
        let mut done = pod("done", Some("10.42.0.6"), false, &[]);
        done.status.phase = Some("Succeeded".into());
        let keep = pod("keep", Some("10.42.0.7"), true, &[]);
        let subsets = build_subsets(&s, &[&gone, &done, &keep]);
        assert_eq!(subsets.len(), 1);
        assert_eq!(ips(&subsets[0].addresses), ["10.42.0.7"]);
        assert!(subsets[0].not_ready_addresses.is_empty());
        // Nothing eligible: no subsets at all.
        assert!(build_subsets(&s, &[&gone, &done]).is_empty());
    }

    #[test]
    fn named_target_ports_resolve_per_pod() {
        let s = service(vec![
            port("http", 80, IntOrString::String("web".into())),
            port("metrics", 9090, IntOrString::Int(9100)),
        ]);
        let a = pod("a", Some("10.42.0.1"), true, &[("web", 8080)]);
        let b = pod("b", Some("10.42.0.2"), true, &[("web", 8080)]);
        let c = pod("c", Some("10.42.0.3"), false, &[("web", 9000)]);
        // No port named "web": only the numeric port.
        let d = pod("d", Some("10.42.0.4"), true, &[("other", 1)]);
        let subsets = build_subsets(&s, &[&c, &b, &a, &d]);
        assert_eq!(subsets.len(), 3, "{subsets:#?}");
        let find = |port: i32| {
            subsets.iter().find(|s| {
                s.ports
                    .iter()
                    .any(|p| p.name.as_deref() == Some("http") && p.port == port)
            })
        };
        let s8080 = find(8080).expect("8080 subset");
        assert_eq!(ips(&s8080.addresses), ["10.42.0.1", "10.42.0.2"]);
        assert_eq!(s8080.ports.len(), 2);
        let s9000 = find(9000).expect("9000 subset");
        assert!(s9000.addresses.is_empty());
        assert_eq!(ips(&s9000.not_ready_addresses), ["10.42.0.3"]);
        let only_metrics = subsets
            .iter()
            .find(|s| s.ports.len() == 1)
            .expect("metrics-only subset");
        assert_eq!(only_metrics.ports[0].port, 9100);
        assert_eq!(ips(&only_metrics.addresses), ["10.42.0.4"]);
        // Stable: the same pods in another order give the same subsets.
        assert_eq!(subsets, build_subsets(&s, &[&d, &a, &b, &c]));
    }

    #[test]
    fn publish_not_ready_and_headless_hostnames() {
        let mut s = service(vec![port("http", 80, IntOrString::Int(80))]);
        s.spec.publish_not_ready_addresses = Some(true);
        s.spec.cluster_ip = Some("None".into());
        let mut p = pod("a", Some("10.42.0.1"), false, &[]);
        p.spec.hostname = Some("a0".into());
        p.spec.subdomain = Some("web".into());
        let subsets = build_subsets(&s, &[&p]);
        assert_eq!(ips(&subsets[0].addresses), ["10.42.0.1"]);
        assert_eq!(subsets[0].addresses[0].hostname.as_deref(), Some("a0"));
        assert_eq!(
            endpoints_labels(&s).get(HEADLESS_LABEL).map(String::as_str),
            Some("")
        );
        // A headless Service without ports lists the addresses alone.
        s.spec.ports.clear();
        let subsets = build_subsets(&s, &[&p]);
        assert_eq!(subsets.len(), 1);
        assert!(subsets[0].ports.is_empty());
    }
}
