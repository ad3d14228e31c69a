//! DNS messages as the cluster DNS receives them over UDP and TCP, answered from a zone with
//! a ClusterIP and a headless Service; names outside the zone go to a forwarder with no
//! upstreams (so nothing leaves the machine), which answers SERVFAIL.
#![no_main]

use std::sync::{Arc, RwLock};
use std::time::Duration;

use agent::dns::forward::Forwarder;
use agent::dns::server::{Resolver, Transport};
use agent::dns::Zone;
use libfuzzer_sys::fuzz_target;

fn resolver() -> Resolver {
    let services = serde_json::json!([
        {"metadata": {"name": "web", "namespace": "default"},
         "spec": {"clusterIP": "10.43.0.10", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
        {"metadata": {"name": "db", "namespace": "prod"},
         "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}
    ]);
    let endpoints = serde_json::json!([
        {"metadata": {"name": "db", "namespace": "prod"},
         "subsets": [{"addresses": [{"ip": "10.42.0.5", "hostname": "db-0"}, {"ip": "fd00::5"}],
                      "ports": [{"name": "pg", "port": 5432}]}]}
    ]);
    let services: Vec<api::core::Service> =
        serde_json::from_value::<Vec<serde_json::Value>>(services)
            .expect("a list")
            .into_iter()
            .map(|s| api::codec::from_json(s).expect("a valid Service"))
            .collect();
    let endpoints: Vec<api::core::Endpoints> =
        serde_json::from_value::<Vec<serde_json::Value>>(endpoints)
            .expect("a list")
            .into_iter()
            .map(|e| api::codec::from_json(e).expect("valid Endpoints"))
            .collect();
    let mut zone = Zone::new("cluster.local");
    zone.set_services(&services);
    zone.set_endpoints(&endpoints);
    Resolver {
        zone: Arc::new(RwLock::new(zone)),
        forwarder: Forwarder::new(Vec::new(), &[], Duration::from_millis(1)),
    }
}

thread_local! {
    static RESOLVER: Resolver = resolver();
}

fuzz_target!(|data: &[u8]| {
    let _ = agent::dns::wire::message_id(data);
    RESOLVER.with(|r| {
        smol::block_on(async {
            let _ = r.answer(data, Transport::Udp).await;
            let _ = r.answer(data, Transport::Tcp).await;
        })
    });
});
