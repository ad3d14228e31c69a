//! Keeps the [`Zone`] up to date: a list then a watch of Services and of EndpointSlices in every
//! namespace; a watch that ends is resumed from the last resourceVersion seen, and any error
//! (a 410 for a version out of the window, or the server being away) starts over with a
//! list after a short pause.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use api::client::{Client, ClientError, WatchEvent};
use api::core::Service;
use api::discovery::EndpointSlice;
use api::object::Resource;
use futures_lite::StreamExt;

use super::zone::Zone;

/// How a kind's objects go into the zone.
trait ZoneKind: Resource + Send + 'static {
    fn set_all(zone: &mut Zone, all: &[Self]);
    fn put(zone: &mut Zone, object: &Self);
    fn remove(zone: &mut Zone, object: &Self);
}

impl ZoneKind for Service {
    fn set_all(zone: &mut Zone, all: &[Self]) {
        zone.set_services(all);
    }
    fn put(zone: &mut Zone, object: &Self) {
        zone.put_service(object);
    }
    fn remove(zone: &mut Zone, object: &Self) {
        zone.remove_service(object);
    }
}

/// As CoreDNS, the endpoints of a Service come from its EndpointSlices.
impl ZoneKind for EndpointSlice {
    fn set_all(zone: &mut Zone, all: &[Self]) {
        zone.set_slices(all.to_vec());
    }
    fn put(zone: &mut Zone, object: &Self) {
        zone.put_slice(object.clone());
    }
    fn remove(zone: &mut Zone, object: &Self) {
        zone.remove_slice(object);
    }
}

/// Runs forever: keeps `zone` filled from the API.
pub async fn keep_zone(client: Client, zone: Arc<RwLock<Zone>>) {
    futures_lite::future::zip(
        reflect::<Service>(client.clone(), zone.clone()),
        reflect::<EndpointSlice>(client, zone),
    )
    .await;
}

fn write(zone: &RwLock<Zone>) -> std::sync::RwLockWriteGuard<'_, Zone> {
    // A panic while holding the lock leaves a zone that is still consistent enough to serve.
    zone.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn reflect<K: ZoneKind>(client: Client, zone: Arc<RwLock<Zone>>) {
    let kind = K::KIND.info().plural;
    let mut pause = Duration::from_millis(200);
    loop {
        match list_and_watch::<K>(&client, &zone).await {
            Ok(()) => pause = Duration::from_millis(200),
            Err(e) => {
                tracing::warn!("cluster DNS: watching {kind}: {e}; listing again");
                smol::Timer::after(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// One list, then watches from its resourceVersion until an error.
async fn list_and_watch<K: ZoneKind>(
    client: &Client,
    zone: &RwLock<Zone>,
) -> Result<(), ClientError> {
    let (items, mut version) = client.list::<K>(None, None, None).await?;
    K::set_all(&mut write(zone), &items);
    loop {
        let mut events = client
            .watch::<K>(None, &version, None, None, Some(Duration::from_secs(300)))
            .await?;
        while let Some(event) = events.next().await {
            let event = event?;
            if let Some(v) = event
                .object()
                .map(|o| o.meta().resource_version.clone())
                .filter(|v| !v.is_empty())
            {
                version = v;
            }
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => K::put(&mut write(zone), &o),
                WatchEvent::Deleted(o) => K::remove(&mut write(zone), &o),
                WatchEvent::Bookmark { resource_version } => version = resource_version,
            }
        }
    }
}
