//! discovery.k8s.io/v1 EndpointSlice: a Service's endpoints in slices of at most 100, with
//! each endpoint's readiness, serving and terminating conditions, node and zone. The
//! EndpointSlice controller writes them for Services with a selector, the mirroring
//! controller copies hand-made Endpoints into them, and the agents' Service proxy and DNS read
//! them, as kube-proxy and CoreDNS do.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::ObjectReference;
use crate::meta::ObjectMeta;
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of EndpointSlice.
pub const GROUP: &str = "discovery.k8s.io";

/// The label naming the Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming the controller that manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// `managed-by` of the slices the EndpointSlice controller writes.
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// `managed-by` of the slices the mirroring controller writes.
pub const MIRRORING_CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
/// On an Endpoints object: do not mirror it into slices (the Endpoints controller's own).
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";

/// The address types Kubernetes accepts.
pub const ADDRESS_TYPES: &[&str] = &["FQDN", "IPv4", "IPv6"];
/// The most endpoints one slice may hold.
pub const MAX_ENDPOINTS: usize = 1000;
/// The most addresses one endpoint may hold.
pub const MAX_ADDRESSES: usize = 100;
/// The most ports one slice may hold.
pub const MAX_PORTS: usize = 20000;
/// The most endpoints the controller puts in one slice (`--max-endpoints-per-slice`).
pub const ENDPOINTS_PER_SLICE: usize = 100;

/// discovery.k8s.io/v1 EndpointSlice.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.discovery.v1.EndpointSlice")]
#[schemars(
    description = "EndpointSlice represents a subset of the endpoints that implement a service. For a given service there may be multiple EndpointSlice objects, selected by labels, which must be joined to produce the full set of endpoints."
)]
pub struct EndpointSlice {
    /// Standard object's metadata.
    pub metadata: ObjectMeta,
    /// addressType specifies the type of address carried by this EndpointSlice. All
    /// addresses in this slice must be the same type. This field is immutable after
    /// creation. The following address types are currently supported: * IPv4: Represents an
    /// IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified
    /// Domain Name.
    pub address_type: String,
    /// endpoints is a list of unique endpoints in this slice. Each slice may include a
    /// maximum of 1000 endpoints.
    pub endpoints: Vec<Endpoint>,
    /// ports specifies the list of network ports exposed by each endpoint in this slice.
    /// Each port must have a unique name. When ports is empty, it indicates that there are
    /// no defined ports. When a port is defined with a nil port value, it indicates "all
    /// ports". Each slice may include a maximum of 100 ports.
    pub ports: Vec<EndpointPort>,
}

/// discovery.k8s.io/v1 Endpoint.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.discovery.v1.Endpoint")]
#[schemars(
    description = "Endpoint represents a single logical \"backend\" implementing a service."
)]
pub struct Endpoint {
    /// addresses of this endpoint. The contents of this field are interpreted according to
    /// the corresponding EndpointSlice addressType field. This must contain at least one
    /// address but no more than 100.
    pub addresses: Vec<String>,
    /// conditions contains information about the current status of the endpoint.
    pub conditions: EndpointConditions,
    /// hostname of this endpoint. This field may be used by consumers of endpoints to
    /// distinguish endpoints from each other (e.g. in DNS names).
    pub hostname: Option<String>,
    /// targetRef is a reference to a Kubernetes object that represents this endpoint.
    pub target_ref: Option<ObjectReference>,
    /// deprecatedTopology contains topology information part of the v1beta1 API. While this
    /// field can hold values, it is not writable through the v1 API, and any attempts to
    /// write to it will be silently ignored.
    pub deprecated_topology: BTreeMap<String, String>,
    /// nodeName represents the name of the Node hosting this endpoint.
    pub node_name: Option<String>,
    /// zone is the name of the Zone this endpoint exists in.
    pub zone: Option<String>,
    /// hints contains information associated with how an endpoint should be consumed.
    pub hints: Option<EndpointHints>,
}

/// discovery.k8s.io/v1 EndpointConditions.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.discovery.v1.EndpointConditions")]
#[schemars(description = "EndpointConditions represents the current condition of an endpoint.")]
pub struct EndpointConditions {
    /// ready indicates that this endpoint is prepared to receive traffic. A nil value
    /// indicates an unknown state; consumers should interpret it as ready.
    pub ready: Option<bool>,
    /// serving is identical to ready except that it is set regardless of the terminating
    /// state of endpoints.
    pub serving: Option<bool>,
    /// terminating indicates that this endpoint is terminating.
    pub terminating: Option<bool>,
}

/// discovery.k8s.io/v1 EndpointHints.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.discovery.v1.EndpointHints")]
#[schemars(
    description = "EndpointHints provides hints describing how an endpoint should be consumed."
)]
pub struct EndpointHints {
    /// forZones indicates the zone(s) this endpoint should be consumed by to enable topology
    /// aware routing.
    pub for_zones: Vec<ForZone>,
}

/// discovery.k8s.io/v1 ForZone.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.discovery.v1.ForZone")]
#[schemars(
    description = "ForZone provides information about which zones should consume this endpoint."
)]
pub struct ForZone {
    /// name represents the name of the zone.
    pub name: String,
}

/// discovery.k8s.io/v1 EndpointPort.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.discovery.v1.EndpointPort")]
#[schemars(description = "EndpointPort represents a Port used by an EndpointSlice")]
pub struct EndpointPort {
    /// name represents the name of this port. All ports in an EndpointSlice must have a
    /// unique name. Name must either be an empty string or pass DNS_LABEL validation.
    pub name: Option<String>,
    /// protocol represents the IP protocol for this port. Must be UDP, TCP, or SCTP.
    /// Default is TCP.
    pub protocol: Option<String>,
    /// port represents the port number of the endpoint. If this is not specified, ports are
    /// not restricted and must be interpreted in the context of the specific consumer.
    pub port: Option<i32>,
    /// The application protocol for this port.
    pub app_protocol: Option<String>,
}

impl EndpointSlice {
    /// The Service the slice belongs to (its `kubernetes.io/service-name` label).
    pub fn service_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .get(SERVICE_NAME_LABEL)
            .map(String::as_str)
    }

    /// Who manages the slice (its `endpointslice.kubernetes.io/managed-by` label).
    pub fn managed_by(&self) -> &str {
        self.metadata
            .labels
            .get(MANAGED_BY_LABEL)
            .map_or("", String::as_str)
    }
}

impl EndpointConditions {
    /// Ready as consumers read it: an unknown state counts as ready.
    pub fn is_ready(&self) -> bool {
        self.ready != Some(false)
    }
}

/// The Endpoints form of a Service's slices, as kube-proxy's EndpointSliceCache merges them:
/// each slice a subset with its ports, its ready endpoints (an unknown `ready` counts as
/// ready) as addresses and the others as not-ready addresses. Only IPv4 slices count.
pub fn endpoints_of<'a>(
    namespace: &str,
    service: &str,
    slices: impl Iterator<Item = &'a EndpointSlice>,
) -> crate::core::Endpoints {
    use crate::core::{EndpointAddress, EndpointSubset};
    let mut subsets = Vec::new();
    for slice in slices.filter(|s| s.address_type == "IPv4") {
        let mut subset = EndpointSubset {
            ports: slice
                .ports
                .iter()
                .filter_map(|p| {
                    Some(crate::core::EndpointPort {
                        name: p.name.clone().filter(|n| !n.is_empty()),
                        port: p.port?,
                        protocol: p.protocol.clone(),
                        app_protocol: p.app_protocol.clone(),
                    })
                })
                .collect(),
            ..Default::default()
        };
        for e in &slice.endpoints {
            for ip in &e.addresses {
                let a = EndpointAddress {
                    ip: ip.clone(),
                    hostname: e.hostname.clone(),
                    node_name: e.node_name.clone(),
                    target_ref: e.target_ref.clone(),
                };
                if e.conditions.is_ready() {
                    subset.addresses.push(a);
                } else {
                    subset.not_ready_addresses.push(a);
                }
            }
        }
        if !subset.addresses.is_empty() || !subset.not_ready_addresses.is_empty() {
            subsets.push(subset);
        }
    }
    crate::core::Endpoints {
        metadata: ObjectMeta {
            name: service.into(),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        subsets,
    }
}

/// A watcher's copy of the EndpointSlices, by namespace and slice name, that answers with
/// the Endpoints form of a Service's slices ([`endpoints_of`]).
#[derive(Clone, Debug, Default)]
pub struct SliceIndex {
    slices: BTreeMap<(String, String), EndpointSlice>,
}

/// A Service, by namespace and name.
pub type ServiceKey = (String, String);

impl SliceIndex {
    fn service_of(s: &EndpointSlice) -> Option<ServiceKey> {
        s.service_name()
            .map(|svc| (s.metadata.namespace().to_string(), svc.to_string()))
    }

    /// Replaces every slice (after a list).
    pub fn set_all(&mut self, all: Vec<EndpointSlice>) {
        self.slices = all
            .into_iter()
            .map(|s| {
                (
                    (s.metadata.namespace().to_string(), s.metadata.name.clone()),
                    s,
                )
            })
            .collect();
    }

    /// A slice was added or changed: the Service whose endpoints it changes (also the one it
    /// belonged to before, if its label moved).
    pub fn put(&mut self, slice: EndpointSlice) -> Vec<ServiceKey> {
        let key = (
            slice.metadata.namespace().to_string(),
            slice.metadata.name.clone(),
        );
        let new = Self::service_of(&slice);
        let old = self
            .slices
            .insert(key, slice)
            .and_then(|o| Self::service_of(&o));
        let mut services: Vec<ServiceKey> = new.into_iter().chain(old).collect();
        services.dedup();
        services
    }

    /// A slice was deleted: the Service whose endpoints it changes.
    pub fn remove(&mut self, slice: &EndpointSlice) -> Option<ServiceKey> {
        let key = (
            slice.metadata.namespace().to_string(),
            slice.metadata.name.clone(),
        );
        self.slices.remove(&key).and_then(|o| Self::service_of(&o))
    }

    /// The Endpoints form of a Service's slices; None when it has none.
    pub fn endpoints(&self, (ns, service): &ServiceKey) -> Option<crate::core::Endpoints> {
        let mut slices = self
            .slices
            .range((ns.clone(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, s)| s)
            .filter(|s| s.service_name() == Some(service.as_str()))
            .peekable();
        slices.peek()?;
        Some(endpoints_of(ns, service, slices))
    }

    /// The Endpoints form of every Service's slices.
    pub fn all_endpoints(&self) -> Vec<crate::core::Endpoints> {
        endpoints_by_service(self.slices.values())
    }
}

/// The Endpoints form of every Service's slices among `slices`.
pub fn endpoints_by_service<'a>(
    slices: impl Iterator<Item = &'a EndpointSlice>,
) -> Vec<crate::core::Endpoints> {
    let mut by_service: BTreeMap<ServiceKey, Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if let Some(k) = SliceIndex::service_of(s) {
            by_service.entry(k).or_default().push(s);
        }
    }
    by_service
        .into_iter()
        .map(|((ns, svc), slices)| endpoints_of(&ns, &svc, slices.into_iter()))
        .collect()
}

fn check_address(errs: &mut Vec<FieldError>, field: String, address: &str, address_type: &str) {
    let why = match address_type {
        "IPv4" if address.parse::<std::net::Ipv4Addr>().is_err() => "must be a valid IPv4 address",
        "IPv6" if address.parse::<std::net::Ipv6Addr>().is_err() => "must be a valid IPv6 address",
        "FQDN" => {
            if let Err(why) = validation::dns1123_subdomain(address) {
                errs.push(FieldError::invalid(field, address, why));
            } else if !address.contains('.') {
                errs.push(FieldError::invalid(
                    field,
                    address,
                    "should be a domain with at least two segments separated by dots",
                ));
            }
            return;
        }
        _ => return,
    };
    errs.push(FieldError::invalid(field, address, why));
}

impl Resource for EndpointSlice {
    const KIND: Kind = Kind::EndpointSlice;
    crate::resource_basics!(EndpointSlice);

    /// Kubernetes' SetDefaults_EndpointPort: a port's name defaults to "" and its protocol to
    /// TCP.
    fn set_defaults(&mut self) {
        for p in &mut self.ports {
            p.name.get_or_insert_with(String::new);
            p.protocol.get_or_insert_with(|| "TCP".into());
        }
    }

    /// Kubernetes counts every change of an EndpointSlice as a new generation.
    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&(&self.address_type, &self.endpoints, &self.ports))
    }

    /// Kubernetes' ValidateEndpointSlice.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::EndpointSlice);
        let address_type = self.address_type.as_str();
        if address_type.is_empty() {
            errs.push(FieldError::required("addressType"));
        } else if !ADDRESS_TYPES.contains(&address_type) {
            errs.push(FieldError::not_supported(
                "addressType",
                address_type,
                ADDRESS_TYPES,
            ));
        }
        if self.endpoints.len() > MAX_ENDPOINTS {
            errs.push(FieldError::too_many(
                "endpoints",
                self.endpoints.len(),
                MAX_ENDPOINTS,
            ));
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            let path = format!("endpoints[{i}]");
            if e.addresses.is_empty() {
                errs.push(FieldError::required_msg(
                    format!("{path}.addresses"),
                    "must contain at least 1 address",
                ));
            } else if e.addresses.len() > MAX_ADDRESSES {
                errs.push(FieldError::too_many(
                    format!("{path}.addresses"),
                    e.addresses.len(),
                    MAX_ADDRESSES,
                ));
            }
            for (j, a) in e.addresses.iter().enumerate() {
                check_address(&mut errs, format!("{path}.addresses[{j}]"), a, address_type);
            }
            if let Some(node) = &e.node_name {
                if let Err(why) = validation::dns1123_subdomain(node) {
                    errs.push(FieldError::invalid(format!("{path}.nodeName"), node, why));
                }
            }
            if let Some(h) = &e.hostname {
                if let Err(why) = validation::dns1123_label(h) {
                    errs.push(FieldError::invalid(format!("{path}.hostname"), h, why));
                }
            }
            if let Some(hints) = &e.hints {
                let mut zones = std::collections::BTreeSet::new();
                for (j, z) in hints.for_zones.iter().enumerate() {
                    if !zones.insert(z.name.as_str()) {
                        errs.push(FieldError::duplicate(
                            format!("{path}.hints.forZones[{j}].name"),
                            &z.name,
                        ));
                    }
                }
                if hints.for_zones.len() > 8 {
                    errs.push(FieldError::too_many(
                        format!("{path}.hints.forZones"),
                        hints.for_zones.len(),
                        8,
                    ));
                }
            }
        }
        if self.ports.len() > MAX_PORTS {
            errs.push(FieldError::too_many("ports", self.ports.len(), MAX_PORTS));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in self.ports.iter().enumerate() {
            let path = format!("ports[{i}]");
            let name = p.name.as_deref().unwrap_or("");
            if !name.is_empty() {
                if let Err(why) = validation::dns1123_label(name) {
                    errs.push(FieldError::invalid(format!("{path}.name"), name, why));
                }
            }
            if !names.insert(name) {
                errs.push(FieldError::duplicate(format!("{path}.name"), name));
            }
            match p.protocol.as_deref() {
                None => errs.push(FieldError::required(format!("{path}.protocol"))),
                Some(proto) if !["SCTP", "TCP", "UDP"].contains(&proto) => {
                    errs.push(FieldError::not_supported(
                        format!("{path}.protocol"),
                        proto,
                        &["SCTP", "TCP", "UDP"],
                    ));
                }
                Some(_) => {}
            }
            if let Some(app) = &p.app_protocol {
                if let Err(why) = validation::qualified_name(app) {
                    errs.push(FieldError::invalid(format!("{path}.appProtocol"), app, why));
                }
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice() -> EndpointSlice {
        let mut s = EndpointSlice::default();
        s.metadata.name = "web-abc".into();
        s.metadata.namespace = Some("default".into());
        s.address_type = "IPv4".into();
        s.endpoints.push(Endpoint {
            addresses: vec!["10.42.0.5".into()],
            conditions: EndpointConditions {
                ready: Some(true),
                ..Default::default()
            },
            node_name: Some("n1".into()),
            ..Default::default()
        });
        s.ports.push(EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            ..Default::default()
        });
        s.set_defaults();
        s
    }

    #[test]
    fn slices_merge_into_endpoints_per_service() {
        let mut index = SliceIndex::default();
        let mut a = slice();
        a.metadata
            .labels
            .insert(SERVICE_NAME_LABEL.into(), "web".into());
        let mut b = a.clone();
        b.metadata.name = "web-def".into();
        b.endpoints[0].addresses = vec!["10.42.1.7".into()];
        b.endpoints[0].conditions.ready = Some(false);
        let key = ("default".to_string(), "web".to_string());
        assert_eq!(index.put(a.clone()), vec![key.clone()]);
        index.put(b.clone());
        let e = index.endpoints(&key).expect("endpoints");
        assert_eq!(e.metadata.name, "web");
        assert_eq!(e.subsets.len(), 2);
        assert_eq!(e.subsets[0].addresses[0].ip, "10.42.0.5");
        assert_eq!(e.subsets[0].addresses[0].node_name.as_deref(), Some("n1"));
        assert_eq!(e.subsets[0].ports[0].port, 8080);
        assert_eq!(e.subsets[0].ports[0].name.as_deref(), Some("http"));
        assert_eq!(e.subsets[1].not_ready_addresses[0].ip, "10.42.1.7");
        assert_eq!(index.all_endpoints().len(), 1);
        assert_eq!(index.remove(&a), Some(key.clone()));
        index.remove(&b);
        assert!(index.endpoints(&key).is_none());
    }

    #[test]
    fn defaults_and_a_valid_slice() {
        let s = slice();
        assert_eq!(s.ports[0].protocol.as_deref(), Some("TCP"));
        assert!(s.validate().is_empty(), "{:?}", s.validate());
    }

    #[test]
    fn validation_follows_kubernetes() {
        let mut s = slice();
        s.address_type = "IPv5".into();
        s.endpoints.push(Endpoint::default());
        s.ports.push(EndpointPort {
            name: Some("http".into()),
            protocol: Some("ICMP".into()),
            ..Default::default()
        });
        let msgs: Vec<String> = s
            .validate()
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            msgs,
            [
                "addressType: Unsupported value: \"IPv5\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
                "endpoints[1].addresses: Required value: must contain at least 1 address",
                "ports[1].name: Duplicate value: \"http\"",
                "ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ]
        );
        let mut s = slice();
        s.endpoints[0].addresses = vec!["fd00::1".into()];
        assert_eq!(
            s.validate()[0].message,
            "Invalid value: \"fd00::1\": must be a valid IPv4 address"
        );
    }
}
