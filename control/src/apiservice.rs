//! The `kubernetes` Service in `default`: how pods reach the API. Its ClusterIP is the first
//! address of the service CIDR, its port 443 (`https`) leads to the API server's advertised
//! address and port through an Endpoints object this server keeps (kube-apiserver's
//! endpoint reconciler). Pods reach it through each node's service proxy like any Service.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use api::core::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort};
use api::meta::{IntOrString, ObjectMeta};

use crate::error::ApiError;
use crate::ipalloc::ServiceCidr;
use crate::registry::{Part, Registry};

/// The Service's name and namespace.
pub const NAME: &str = "kubernetes";
pub const NAMESPACE: &str = "default";
/// How often the Service and its Endpoints are checked (kube-apiserver's
/// `--endpoint-reconciler` interval).
const RECONCILE_EVERY: Duration = Duration::from_secs(10);

/// The first usable address of the service CIDR: the `kubernetes` Service's ClusterIP.
pub fn cluster_ip(cidr: ServiceCidr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::from(cidr.0)).wrapping_add(1))
}

/// The address pods reach the API on: `listen`'s address when it names one, else the
/// address of the interface that holds the default route (as kube-apiserver chooses its
/// `--advertise-address`), else loopback.
pub fn advertise_address(listen: SocketAddr) -> IpAddr {
    let ip = listen.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        return ip;
    }
    // A UDP "connection" sends nothing: it only asks the kernel which source address the
    // route to a public address uses.
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The names and addresses the serving certificate must carry so that pods can verify it
/// through the Service.
pub fn serving_names(cidr: ServiceCidr, advertise: IpAddr) -> Vec<String> {
    vec![
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        "kubernetes.default.svc.cluster.local".into(),
        cluster_ip(cidr).to_string(),
        advertise.to_string(),
    ]
}

fn service(cidr: ServiceCidr, port: u16) -> Service {
    let ip = cluster_ip(cidr).to_string();
    let mut s = Service {
        metadata: ObjectMeta {
            name: NAME.into(),
            namespace: Some(NAMESPACE.into()),
            labels: [
                ("component".to_string(), "apiserver".to_string()),
                ("provider".to_string(), "kubernetes".to_string()),
            ]
            .into(),
            ..Default::default()
        },
        ..Default::default()
    };
    s.spec.type_ = Some("ClusterIP".into());
    s.spec.cluster_ip = Some(ip.clone());
    s.spec.cluster_ips = vec![ip];
    s.spec.session_affinity = Some("None".into());
    s.spec.ports = ports(port);
    s
}

fn ports(port: u16) -> Vec<ServicePort> {
    vec![ServicePort {
        name: Some("https".into()),
        protocol: Some("TCP".into()),
        port: 443,
        target_port: Some(IntOrString::Int(i32::from(port))),
        ..Default::default()
    }]
}

fn subsets(address: IpAddr, port: u16) -> Vec<EndpointSubset> {
    vec![EndpointSubset {
        addresses: vec![EndpointAddress {
            ip: address.to_string(),
            ..Default::default()
        }],
        not_ready_addresses: Vec::new(),
        ports: vec![EndpointPort {
            name: Some("https".into()),
            port: i32::from(port),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }],
    }]
}

/// One pass: creates the Service and its Endpoints, or puts back their ports and address.
pub async fn reconcile(
    registry: &Registry,
    cidr: ServiceCidr,
    address: IpAddr,
    port: u16,
) -> Result<(), ApiError> {
    match registry.get::<Service>(NAMESPACE, NAME).await {
        Ok(s) if s.spec.ports == ports(port) => {}
        Ok(_) => {
            registry
                .mutate::<Service>(NAMESPACE, NAME, Part::Main, move |s| {
                    s.spec.ports = ports(port);
                    Ok(())
                })
                .await?;
        }
        Err(e) if e.code() == 404 => match registry.create(service(cidr, port), None).await {
            Ok(_) => tracing::info!(service = NAME, "created"),
            Err(e) if e.code() == 409 => {}
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    }
    let wanted = subsets(address, port);
    reconcile_slice(registry, &wanted).await?;
    match registry.get::<Endpoints>(NAMESPACE, NAME).await {
        Ok(e) if e.subsets == wanted => Ok(()),
        Ok(_) => registry
            .mutate::<Endpoints>(NAMESPACE, NAME, Part::Main, move |e| {
                e.subsets = wanted.clone();
                Ok(())
            })
            .await
            .map(drop),
        Err(e) if e.code() == 404 => {
            let e = Endpoints {
                metadata: ObjectMeta {
                    name: NAME.into(),
                    namespace: Some(NAMESPACE.into()),
                    // Kubernetes' mark: the EndpointSlice mirroring controller leaves it be.
                    labels: [(
                        "endpointslice.kubernetes.io/skip-mirror".to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                    ..Default::default()
                },
                subsets: wanted,
            };
            match registry.create(e, None).await {
                Ok(_) => Ok(()),
                Err(e) if e.code() == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// The Service's EndpointSlice, written beside its Endpoints as kube-apiserver's endpoints
/// adapter does (named after the Service; the mirroring controller leaves the Endpoints be).
async fn reconcile_slice(registry: &Registry, subsets: &[EndpointSubset]) -> Result<(), ApiError> {
    use api::discovery::{Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice};
    let subset = subsets.first().cloned().unwrap_or_default();
    let ports: Vec<SlicePort> = subset
        .ports
        .iter()
        .map(|p| SlicePort {
            name: Some(p.name.clone().unwrap_or_default()),
            protocol: p.protocol.clone(),
            port: Some(p.port),
            app_protocol: None,
        })
        .collect();
    let endpoints: Vec<Endpoint> = [
        (&subset.addresses, true),
        (&subset.not_ready_addresses, false),
    ]
    .into_iter()
    .flat_map(|(addresses, ready)| {
        addresses.iter().map(move |a| Endpoint {
            addresses: vec![a.ip.clone()],
            conditions: EndpointConditions {
                ready: Some(ready),
                ..Default::default()
            },
            ..Default::default()
        })
    })
    .collect();
    match registry.get::<EndpointSlice>(NAMESPACE, NAME).await {
        Ok(e) if e.endpoints == endpoints && e.ports == ports => Ok(()),
        Ok(_) => registry
            .mutate::<EndpointSlice>(NAMESPACE, NAME, Part::Main, move |e| {
                e.endpoints = endpoints.clone();
                e.ports = ports.clone();
                Ok(())
            })
            .await
            .map(drop),
        Err(e) if e.code() == 404 => {
            let slice = EndpointSlice {
                metadata: ObjectMeta {
                    name: NAME.into(),
                    namespace: Some(NAMESPACE.into()),
                    labels: [(
                        api::discovery::SERVICE_NAME_LABEL.to_string(),
                        NAME.to_string(),
                    )]
                    .into(),
                    ..Default::default()
                },
                address_type: if !endpoints.is_empty()
                    && endpoints
                        .iter()
                        .all(|e| e.addresses[0].parse::<std::net::Ipv6Addr>().is_ok())
                {
                    "IPv6".into()
                } else {
                    "IPv4".into()
                },
                endpoints,
                ports,
            };
            match registry.create(slice, None).await {
                Ok(_) => Ok(()),
                Err(e) if e.code() == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Keeps the Service and its Endpoints in place for as long as the server runs.
pub fn start(registry: &Registry, cidr: ServiceCidr, address: IpAddr, port: u16) {
    let registry = registry.with_manager("kube-apiserver");
    smol::spawn(async move {
        loop {
            if let Err(e) = reconcile(&registry, cidr, address, port).await {
                tracing::warn!("keeping the kubernetes Service: {e}");
            }
            smol::Timer::after(RECONCILE_EVERY).await;
        }
    })
    .detach();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_ip_is_the_first_address_of_the_range() {
        let cidr = crate::ipalloc::parse_service_cidr("10.43.0.0/16").unwrap();
        assert_eq!(cluster_ip(cidr), Ipv4Addr::new(10, 43, 0, 1));
        let listen: SocketAddr = "192.0.2.7:6443".parse().unwrap();
        assert_eq!(advertise_address(listen), listen.ip());
        assert!(serving_names(cidr, listen.ip()).contains(&"10.43.0.1".to_string()));
    }
}
