//! The `Available` condition of APIServices, as kube-aggregator's availability controllers
//! keep it: a local APIService is always available (`Local`); a non-local one is checked
//! every 30 s and whenever it, its Service or its Endpoints change: the Service must exist
//! (`ServiceNotFound`), a ClusterIP Service must have the port (`ServicePortError`) and
//! Endpoints (`EndpointsNotFound`) with a ready address on that port's name
//! (`MissingEndpoints`), and the backend must answer its discovery (`/apis/GROUP/VERSION`)
//! with a 2xx to one of five requests at once (`FailedDiscoveryCheck`); then `Passed`. The
//! requests name `system:kube-aggregator` in `system:masters` in the front-proxy headers,
//! with the front-proxy client certificate, and do not verify the backend's certificate.
//! The status is written only when it changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::apiregistration::{APIService, APIServiceCondition, ServiceReference};
use api::core::{Endpoints, Service};
use api::transport::{Transport, Url};
use api::Kind;

use super::Aggregator;
use crate::machinery::informer::Change;
use crate::machinery::runner::{self, Key, Synced};
use crate::machinery::Context;
use crate::registry::Part;

/// How long one discovery request of a check may take (kube's client timeout).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often every non-local APIService is checked again (kube's resync).
const RESYNC: Duration = Duration::from_secs(30);
/// Requests of one discovery check, sent at once; one success is enough.
const ATTEMPTS: usize = 5;

/// Starts the controller on the cluster's controllers (the leader).
pub fn start(ctx: &Context, aggregator: Arc<Aggregator>) {
    let probe = match aggregator.probe_transport() {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "the APIService availability checks cannot start");
            return;
        }
    };
    let queue = runner::fed_queue::<APIService, _>(
        ctx,
        &[Kind::APIService, Kind::Service, Kind::Endpoints],
        keys_for,
    );
    let registry = ctx.registry.with_manager("kube-apiserver");
    let cache = ctx.informers.cache().clone();
    runner::spawn_workers(
        "apiservice-availability",
        ctx.informers.clone(),
        queue,
        2,
        move |key: Key, mut synced: Synced| {
            let (registry, cache, probe) = (registry.clone(), cache.clone(), probe.clone());
            let aggregator = aggregator.clone();
            async move {
                let Some(api_service) = cache.get::<APIService>("", &key.1) else {
                    return (synced, Ok(()));
                };
                let condition = match &api_service.spec.service {
                    None => APIServiceCondition::local(),
                    Some(s) => {
                        synced.requeue_after(RESYNC);
                        check(&aggregator, &cache, &probe, &api_service, s).await
                    }
                };
                let mut new = api_service.clone();
                new.set_condition(condition.clone());
                if new.status == api_service.status {
                    return (synced, Ok(()));
                }
                if api_service.is_available() != new.is_available() {
                    tracing::info!(apiservice = %key.1, available = %new.is_available(),
                        reason = condition.reason.as_deref().unwrap_or(""),
                        message = condition.message.as_deref().unwrap_or(""),
                        "changing APIService availability");
                }
                let result = registry
                    .mutate::<APIService>("", &key.1, Part::Status, move |s| {
                        s.set_condition(condition.clone());
                        Ok(())
                    })
                    .await;
                match result {
                    Ok(written) => {
                        synced.wrote(&written);
                        (synced, Ok(()))
                    }
                    Err(e) if e.code() == 404 => (synced, Ok(())),
                    Err(e) => (synced, Err(e)),
                }
            }
        },
    );
}

/// The APIServices a change concerns: the APIService itself, or those served by the
/// Service (or its Endpoints) that changed.
fn keys_for(ctx: &Context, change: &Change) -> Vec<Key> {
    let all = || {
        ctx.informers
            .cache()
            .list::<APIService>(None)
            .into_iter()
            .map(|s| (String::new(), s.metadata.name))
            .collect()
    };
    let Some(obj) = change.object() else {
        return all();
    };
    if obj.kind() == Kind::APIService {
        return vec![(String::new(), obj.meta().name.clone())];
    }
    let (ns, name) = (obj.meta().namespace().to_string(), obj.meta().name.clone());
    ctx.informers
        .cache()
        .list::<APIService>(None)
        .into_iter()
        .filter(|s| {
            s.spec
                .service
                .as_ref()
                .is_some_and(|r| r.namespace == ns && r.name == name)
        })
        .map(|s| (String::new(), s.metadata.name))
        .collect()
}

/// The Available condition of a non-local APIService.
async fn check(
    aggregator: &Aggregator,
    cache: &crate::machinery::informer::Cache,
    probe: &Transport,
    api_service: &APIService,
    reference: &ServiceReference,
) -> APIServiceCondition {
    let (ns, name, port) = (&reference.namespace, &reference.name, reference.port());
    let fail =
        |reason: &str, message: String| APIServiceCondition::available("False", reason, &message);
    let Some(service) = cache.get::<Service>(ns, name) else {
        return fail(
            "ServiceNotFound",
            format!("service/{name} in {ns:?} is not present"),
        );
    };
    let cluster_ip = matches!(service.spec.type_.as_deref(), None | Some("ClusterIP"));
    if cluster_ip {
        let Some(service_port) = service.spec.ports.iter().find(|p| p.port == port) else {
            return fail(
                "ServicePortError",
                format!("service/{name} in {ns:?} is not listening on port {port}"),
            );
        };
        let port_name = service_port.name.clone().unwrap_or_default();
        let Some(endpoints) = cache.get::<Endpoints>(ns, name) else {
            return fail(
                "EndpointsNotFound",
                format!("cannot find endpoints for service/{name} in {ns:?}"),
            );
        };
        let active = endpoints.subsets.iter().any(|s| {
            !s.addresses.is_empty()
                && s.ports
                    .iter()
                    .any(|p| p.name.as_deref().unwrap_or("") == port_name)
        });
        if !active {
            return fail(
                "MissingEndpoints",
                format!(
                    "endpoints for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
                ),
            );
        }
    }
    let path = if api_service.metadata.name == "v1." {
        format!("/api/{}", api_service.version())
    } else {
        format!("/apis/{}/{}", api_service.group(), api_service.version())
    };
    let mut attempts = Vec::new();
    for _ in 0..ATTEMPTS {
        let (registry, probe, reference, path) = (
            aggregator.registry().clone(),
            probe.clone(),
            reference.clone(),
            path.clone(),
        );
        attempts.push(smol::spawn(async move {
            discovery_check(&registry, &probe, &reference, &path).await
        }));
    }
    let mut last = None;
    for a in attempts {
        match a.await {
            Ok(()) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => fail("FailedDiscoveryCheck", e),
        None => APIServiceCondition::available("True", "Passed", "all checks passed"),
    }
}

/// One discovery request to a ready endpoint, with kube's error texts.
async fn discovery_check(
    registry: &crate::registry::Registry,
    probe: &Transport,
    reference: &ServiceReference,
    path: &str,
) -> Result<(), String> {
    let (host, port) = crate::webhook::resolve(
        registry,
        &reference.namespace,
        &reference.name,
        reference.port(),
    )
    .await?;
    let url = format!("{}{path}", super::endpoint_origin(&host, port));
    let parsed = Url::parse(&url).map_err(|e| e.to_string())?;
    let headers = super::front_proxy_headers(
        super::AGGREGATOR_USER,
        &[crate::auth::MASTERS_GROUP.to_string()],
        &BTreeMap::new(),
    );
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let get = async {
        let mut answer = probe
            .send("GET", &parsed, &headers, &[])
            .await
            .map_err(|e| format!("Get {url:?}: {}", super::go_error(&e)))?;
        // The body is not read (kube closes it unread).
        let status = answer.status;
        let _ = answer.bytes(1 << 20).await;
        if !(200..300).contains(&status) {
            return Err(format!("bad status from {url}: {status}"));
        }
        Ok(())
    };
    let timed = futures_lite::future::or(get, async {
        smol::Timer::after(CHECK_TIMEOUT).await;
        Err(format!(
            "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        ))
    });
    timed
        .await
        .map_err(|e| format!("failing or missing response from {url}: {e}"))
}
