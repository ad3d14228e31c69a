//! Kubeconfig files: parsed and resolved to a context as `skiff` and the API client do.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(kc) = api::kubeconfig::Kubeconfig::parse(text) {
        let _ = kc.resolve(None);
        let _ = kc.to_yaml();
    }
});
