//! A create or update body as JSON: the fast path straight into the model and the careful
//! path through a JSON tree, as `decode_body` in control/src/http takes them, then the
//! object's validation.
#![no_main]

use api::{with_kind, Resource};
use libfuzzer_sys::fuzz_target;

fn decode_as<K: Resource>(data: &[u8]) {
    let _ = api::codec::from_json_bytes::<K>(data);
    if let Ok(v) = api::codec::parse_json(data) {
        if let Ok(mut obj) = control::registry::decode::<K>(v) {
            obj.set_defaults();
            let _ = obj.validate();
            let _ = api::codec::to_json(&obj);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The kind the body names picks the model type, as the route does on the server; a
    // body naming no known kind is tried as a Pod and a Deployment.
    let named = api::codec::parse_json(data)
        .ok()
        .and_then(|v| api::codec::type_of(&v).ok());
    match named {
        Some(kind) => with_kind!(kind, K, { decode_as::<K>(data) }),
        None => {
            decode_as::<api::core::Pod>(data);
            decode_as::<api::apps::Deployment>(data);
        }
    }
});
