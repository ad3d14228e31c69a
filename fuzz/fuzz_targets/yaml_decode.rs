//! YAML request bodies (`application/yaml`) and manifest files (`skiff apply -f`), then the
//! model decode of each document.
#![no_main]

use api::with_kind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = api::codec::parse_yaml(data) {
        if let Ok(kind) = api::codec::type_of(&v) {
            with_kind!(kind, K, {
                let _ = control::registry::decode::<K>(v);
            });
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(docs) = api::codec::parse_manifests(text) {
            for d in &docs {
                let _ = api::codec::to_yaml(d);
            }
        }
    }
});
