//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`, kubectl's typed clients):
//! decoded into the JSON tree, and what decodes is encoded back as an answer would be.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = control::http::protobuf::decode(data) {
        let _ = control::http::protobuf::encode(&v);
    }
});
