//! EndpointSlice controller and EndpointSlice mirroring (kube-controller-manager's
//! `endpointslice` and `endpointslicemirroring` loops), keyed by Service:
//!
//! * a Service with a selector gets slices of the pods it selects (at most 100 endpoints a
//!   slice, one group of slices per set of resolved ports), each endpoint with its `ready`,
//!   `serving` and `terminating` conditions, node, zone and hostname; a Service that selects
//!   no pod keeps one empty placeholder slice, as Kubernetes does;
//! * a Service without a selector whose Endpoints were written by hand (not labelled
//!   `endpointslice.kubernetes.io/skip-mirror`) gets those Endpoints mirrored into slices;
//! * slices are named `<service>-<random>`, labelled `kubernetes.io/service-name` and
//!   `endpointslice.kubernetes.io/managed-by`, and owned by the Service (mirrored ones by the
//!   Endpoints), so the garbage collector removes them with their owner.
//!
//! Existing slices are reused for the same ports and rewritten only when they differ, so an
//! unchanged world writes nothing.

use std::collections::BTreeMap;

use api::core::{Endpoints, Node, Pod, Service};
use api::discovery::{
    Endpoint, EndpointConditions, EndpointPort, EndpointSlice, CONTROLLER_NAME,
    ENDPOINTS_PER_SLICE, MANAGED_BY_LABEL, MIRRORING_CONTROLLER_NAME, SERVICE_NAME_LABEL,
    SKIP_MIRROR_LABEL,
};
use api::meta::{DeleteOptions, ObjectMeta, OwnerReference};
use api::object::Resource;
use api::Kind;

use super::endpoints::{resolve_target_port, HEADLESS_LABEL};
use super::workload;
use crate::error::ApiError;
use crate::machinery::informer::Change;
use crate::machinery::runner::{fed_queue, ignore_not_found, spawn_workers, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

/// The node label naming its zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

pub fn start(ctx: &Context) {
    let queue = fed_queue::<Service, _>(
        ctx,
        &[
            Kind::Service,
            Kind::Pod,
            Kind::Endpoints,
            Kind::EndpointSlice,
        ],
        keys_for,
    );
    let ctx = ctx.clone();
    spawn_workers(
        "endpointslice",
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
fn keys_for(ctx: &Context, change: &Change) -> Vec<Key> {
    if let Some(slice) = change.object().and_then(|o| EndpointSlice::from_any_ref(o)) {
        return slice
            .service_name()
            .map(|svc| (slice.metadata.namespace().to_string(), svc.to_string()))
            .into_iter()
            .collect();
    }
    super::endpoints::keys_for(ctx, change)
}

/// What the slices of a Service should hold: (ports, endpoints) per slice, and who manages
/// them.
struct Desired {
    managed_by: &'static str,
    owner: OwnerReference,
    labels: BTreeMap<String, String>,
    address_type: String,
    slices: Vec<(Vec<EndpointPort>, Vec<Endpoint>)>,
}

async fn sync(ctx: &Context, (ns, name): &Key, s: &mut Synced) -> Result<(), ApiError> {
    let (desired, existing) = {
        let cache = ctx.informers.cache().read();
        let service = cache.get::<Service>(ns, name);
        let existing: Vec<EndpointSlice> = cache
            .iter_where::<EndpointSlice>(Some(ns), |m| {
                m.labels.get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name.as_str())
            })
            .filter(|e| [CONTROLLER_NAME, MIRRORING_CONTROLLER_NAME].contains(&e.managed_by()))
            .collect();
        let desired = match service {
            Some(svc) if svc.metadata.deletion_timestamp.is_some() => return Ok(()),
            Some(svc) => match super::endpoints::selector_of(&svc) {
                Some(selector) => {
                    let pods: Vec<Pod> = cache
                        .iter_where::<Pod>(Some(ns), |m| selector.matches(&m.labels))
                        .collect();
                    let zone = |node: &str| {
                        cache
                            .get::<Node>("", node)
                            .and_then(|n| n.metadata.labels.get(ZONE_LABEL).cloned())
                    };
                    Some(desired_for_pods(&svc, &pods, zone))
                }
                None if svc.spec.type_or_default() != "ExternalName" => cache
                    .get::<Endpoints>(ns, name)
                    .filter(|e| {
                        e.metadata.labels.get(SKIP_MIRROR_LABEL).map(String::as_str) != Some("true")
                    })
                    .map(|e| desired_for_endpoints(&e)),
                None => None,
            },
            None => None,
        };
        (desired, existing)
    };
    reconcile(ctx, ns, name, desired, existing, s).await
}

/// Writes the difference between `desired` and the slices there are.
async fn reconcile(
    ctx: &Context,
    ns: &str,
    service: &str,
    desired: Option<Desired>,
    existing: Vec<EndpointSlice>,
    s: &mut Synced,
) -> Result<(), ApiError> {
    let managed_by = desired.as_ref().map_or("", |d| d.managed_by);
    // Slices of the other manager (the Service gained or lost its selector) go.
    let (mut ours, others): (Vec<EndpointSlice>, Vec<EndpointSlice>) = existing
        .into_iter()
        .partition(|e| e.managed_by() == managed_by);
    ours.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut stale = others;
    if let Some(d) = desired {
        for (ports, endpoints) in d.slices {
            // Reuse a slice for the same ports (the first that is left), else make one.
            let reuse = ours.iter().position(|e| e.ports == ports);
            let mut want = EndpointSlice {
                metadata: ObjectMeta {
                    namespace: Some(ns.to_string()),
                    labels: d.labels.clone(),
                    owner_references: vec![d.owner.clone()],
                    ..Default::default()
                },
                address_type: d.address_type.clone(),
                endpoints,
                ports,
            };
            if let Some(i) = reuse {
                let have = ours.remove(i);
                let same = have.endpoints == want.endpoints
                    && have.address_type == want.address_type
                    && have.metadata.labels == want.metadata.labels
                    && have.metadata.owner_references == want.metadata.owner_references;
                if same {
                    continue;
                }
                if have.address_type != want.address_type {
                    // addressType is immutable: replace the slice.
                    stale.push(have);
                } else {
                    let r = ctx
                        .registry
                        .mutate::<EndpointSlice>(ns, &have.metadata.name, Part::Main, move |e| {
                            e.endpoints = want.endpoints.clone();
                            e.ports = want.ports.clone();
                            e.metadata.labels = want.metadata.labels.clone();
                            e.metadata.owner_references = want.metadata.owner_references.clone();
                            Ok(())
                        })
                        .await;
                    if let Some(e) = ignore_not_found(r)? {
                        s.wrote(&e);
                    }
                    continue;
                }
            }
            want.metadata.generate_name = Some(format!("{service}-"));
            let created = ctx.registry.create(want, None).await?;
            s.wrote(&created);
        }
    }
    stale.extend(ours);
    for e in stale {
        let r = ctx
            .registry
            .delete::<EndpointSlice>(ns, &e.metadata.name, DeleteOptions::default())
            .await;
        if let Some((e, _)) = ignore_not_found(r)? {
            s.wrote(&e);
        }
    }
    Ok(())
}

/// Kubernetes' setEndpointSliceLabels: the Service's labels, the headless marker, the
/// Service's name and the manager.
fn slice_labels(
    base: &BTreeMap<String, String>,
    service: &str,
    headless: bool,
    managed_by: &str,
) -> BTreeMap<String, String> {
    let mut labels = base.clone();
    labels.remove(HEADLESS_LABEL);
    if headless {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels.insert(SERVICE_NAME_LABEL.into(), service.into());
    labels.insert(MANAGED_BY_LABEL.into(), managed_by.into());
    labels
}

fn owner(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Splits endpoints grouped by ports into slices of at most [`ENDPOINTS_PER_SLICE`]; a
/// Service with no endpoint at all keeps one empty placeholder slice.
fn chunk(
    groups: BTreeMap<Vec<EndpointPort>, Vec<Endpoint>>,
) -> Vec<(Vec<EndpointPort>, Vec<Endpoint>)> {
    let mut slices = Vec::new();
    for (ports, endpoints) in groups {
        for part in endpoints.chunks(ENDPOINTS_PER_SLICE) {
            slices.push((ports.clone(), part.to_vec()));
        }
    }
    if slices.is_empty() {
        slices.push((Vec::new(), Vec::new()));
    }
    slices
}

/// The slices of a Service with a selector, from the pods it selects.
fn desired_for_pods(
    service: &Service,
    pods: &[Pod],
    zone: impl Fn(&str) -> Option<String>,
) -> Desired {
    let publish = service.spec.publish_not_ready_addresses == Some(true);
    let mut groups: BTreeMap<Vec<EndpointPort>, Vec<Endpoint>> = BTreeMap::new();
    for pod in pods {
        let ip = pod.status.pod_ip.as_deref().unwrap_or("");
        if ip.is_empty() || ip.parse::<std::net::Ipv4Addr>().is_err() {
            continue;
        }
        if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            continue;
        }
        let mut ports: Vec<EndpointPort> = service
            .spec
            .ports
            .iter()
            .filter_map(|sp| {
                resolve_target_port(sp, pod).map(|n| EndpointPort {
                    name: Some(sp.name.clone().unwrap_or_default()),
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    port: Some(n),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        if ports.is_empty() && !service.spec.ports.is_empty() {
            continue;
        }
        ports.sort_by(|a, b| (&a.name, &a.protocol, a.port).cmp(&(&b.name, &b.protocol, b.port)));
        let serving = workload::pod_ready(pod);
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let node = pod.spec.node_name.clone().filter(|n| !n.is_empty());
        let hostname = super::endpoints::endpoint_hostname(pod, service);
        groups.entry(ports).or_default().push(Endpoint {
            addresses: vec![ip.to_string()],
            conditions: EndpointConditions {
                ready: Some(publish || (serving && !terminating)),
                serving: Some(serving),
                terminating: Some(terminating),
            },
            hostname,
            target_ref: Some(api::core::ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: Some(pod.metadata.name.clone()),
                uid: Some(pod.metadata.uid.clone()),
                ..Default::default()
            }),
            zone: node.as_deref().and_then(&zone),
            node_name: node,
            ..Default::default()
        });
    }
    for endpoints in groups.values_mut() {
        sort_endpoints(endpoints);
    }
    Desired {
        managed_by: CONTROLLER_NAME,
        owner: owner("v1", "Service", &service.metadata),
        labels: slice_labels(
            &service.metadata.labels,
            &service.metadata.name,
            service.spec.is_headless(),
            CONTROLLER_NAME,
        ),
        address_type: "IPv4".into(),
        slices: chunk(groups),
    }
}

/// The slices mirroring hand-made Endpoints (the endpointslicemirroring controller).
fn desired_for_endpoints(e: &Endpoints) -> Desired {
    let mut groups: BTreeMap<Vec<EndpointPort>, Vec<Endpoint>> = BTreeMap::new();
    for subset in &e.subsets {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                port: Some(p.port),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let group = groups.entry(ports).or_default();
        for (addresses, ready) in [
            (&subset.addresses, true),
            (&subset.not_ready_addresses, false),
        ] {
            for a in addresses {
                if a.ip.parse::<std::net::Ipv4Addr>().is_err() {
                    continue;
                }
                group.push(Endpoint {
                    addresses: vec![a.ip.clone()],
                    conditions: EndpointConditions {
                        ready: Some(ready),
                        ..Default::default()
                    },
                    hostname: a.hostname.clone().filter(|h| !h.is_empty()),
                    target_ref: a.target_ref.clone(),
                    node_name: a.node_name.clone(),
                    ..Default::default()
                });
            }
        }
    }
    for endpoints in groups.values_mut() {
        sort_endpoints(endpoints);
    }
    let mut labels = e.metadata.labels.clone();
    labels.remove(SKIP_MIRROR_LABEL);
    let headless = labels.contains_key(HEADLESS_LABEL);
    Desired {
        managed_by: MIRRORING_CONTROLLER_NAME,
        owner: owner("v1", "Endpoints", &e.metadata),
        labels: slice_labels(
            &labels,
            &e.metadata.name,
            headless,
            MIRRORING_CONTROLLER_NAME,
        ),
        address_type: "IPv4".into(),
        slices: chunk(groups),
    }
}

/// A stable order (by address, then pod), so an unchanged world gives identical slices.
fn sort_endpoints(endpoints: &mut [Endpoint]) {
    endpoints.sort_by(|a, b| {
        let key = |e: &Endpoint| {
            (
                e.addresses
                    .first()
                    .and_then(|a| a.parse::<std::net::Ipv4Addr>().ok()),
                e.target_ref.as_ref().and_then(|r| r.uid.clone()),
            )
        };
        key(a).cmp(&key(b))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{
        Container, ContainerPort, EndpointAddress, EndpointSubset, PodCondition, ServicePort,
    };
    use api::meta::{IntOrString, Time};

    fn service() -> Service {
        let mut s = Service::default();
        s.metadata.name = "web".into();
        s.metadata.namespace = Some("default".into());
        s.metadata.uid = "svc-uid".into();
        s.metadata.labels.insert("app".into(), "web".into());
        s.spec.selector.insert("app".into(), "web".into());
        s.spec.ports = vec![ServicePort {
            name: Some("http".into()),
            port: 80,
            target_port: Some(IntOrString::String("web".into())),
            ..Default::default()
        }];
        s.set_defaults();
        s
    }

    fn pod(name: &str, ip: &str, ready: bool, port: i32) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = format!("uid-{name}");
        p.spec.node_name = Some("n1".into());
        p.spec.containers.push(Container {
            name: "c".into(),
            ports: vec![ContainerPort {
                name: Some("web".into()),
                container_port: port,
                ..Default::default()
            }],
            ..Default::default()
        });
        p.status.phase = Some("Running".into());
        p.status.pod_ip = Some(ip.into());
        p.status.conditions.push(PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pods_become_endpoints_with_their_conditions() {
        let s = service();
        let mut gone = pod("gone", "10.42.0.4", true, 8080);
        gone.metadata.deletion_timestamp = Some(Time::now());
        let pods = [
            pod("b", "10.42.0.12", true, 8080),
            pod("a", "10.42.0.9", false, 8080),
            gone,
            pod("other", "10.42.0.7", true, 9090),
        ];
        let d = desired_for_pods(&s, &pods, |n| (n == "n1").then(|| "zone-a".to_string()));
        assert_eq!(d.managed_by, CONTROLLER_NAME);
        assert_eq!(d.labels[SERVICE_NAME_LABEL], "web");
        assert_eq!(d.labels["app"], "web");
        assert_eq!(d.owner.kind, "Service");
        assert_eq!(d.owner.uid, "svc-uid");
        assert_eq!(d.slices.len(), 2, "one slice per resolved port");
        let (ports, eps) = &d.slices[0];
        assert_eq!(ports[0].port, Some(8080));
        assert_eq!(ports[0].name.as_deref(), Some("http"));
        let ips: Vec<&str> = eps.iter().map(|e| e.addresses[0].as_str()).collect();
        assert_eq!(ips, ["10.42.0.4", "10.42.0.9", "10.42.0.12"]);
        let c = |i: usize| {
            let c = &eps[i].conditions;
            (c.ready, c.serving, c.terminating)
        };
        assert_eq!(c(0), (Some(false), Some(true), Some(true)), "terminating");
        assert_eq!(c(1), (Some(false), Some(false), Some(false)), "not ready");
        assert_eq!(c(2), (Some(true), Some(true), Some(false)), "ready");
        assert_eq!(eps[2].zone.as_deref(), Some("zone-a"));
        assert_eq!(eps[2].node_name.as_deref(), Some("n1"));
        assert_eq!(
            eps[2].target_ref.as_ref().and_then(|r| r.name.as_deref()),
            Some("b")
        );
    }

    #[test]
    fn large_services_are_split_and_empty_ones_keep_a_placeholder() {
        let s = service();
        let pods: Vec<Pod> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.42.{}.{}", i / 200, i % 200 + 1),
                    true,
                    8080,
                )
            })
            .collect();
        let d = desired_for_pods(&s, &pods, |_| None);
        let sizes: Vec<usize> = d.slices.iter().map(|(_, e)| e.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        let d = desired_for_pods(&s, &[], |_| None);
        assert_eq!(d.slices, vec![(Vec::new(), Vec::new())]);
    }

    #[test]
    fn hand_made_endpoints_are_mirrored() {
        let mut e = Endpoints::default();
        e.metadata.name = "external".into();
        e.metadata.namespace = Some("default".into());
        e.metadata.uid = "ep-uid".into();
        e.subsets = vec![EndpointSubset {
            addresses: vec![EndpointAddress {
                ip: "192.0.2.10".into(),
                ..Default::default()
            }],
            not_ready_addresses: vec![EndpointAddress {
                ip: "192.0.2.11".into(),
                ..Default::default()
            }],
            ports: vec![api::core::EndpointPort {
                name: None,
                port: 5432,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }],
        }];
        let d = desired_for_endpoints(&e);
        assert_eq!(d.managed_by, MIRRORING_CONTROLLER_NAME);
        assert_eq!(d.owner.kind, "Endpoints");
        assert_eq!(d.labels[SERVICE_NAME_LABEL], "external");
        let (ports, eps) = &d.slices[0];
        assert_eq!(ports[0].port, Some(5432));
        assert_eq!(ports[0].name.as_deref(), Some(""));
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0].conditions.ready, Some(true));
        assert_eq!(eps[1].conditions.ready, Some(false));
    }
}
