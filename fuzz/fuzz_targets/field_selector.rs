//! `fieldSelector=` query parameters: parsed, checked against a kind and matched.
#![no_main]

use api::Resource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = api::selector::FieldSelector::parse(text) {
        let _ = sel.check_kind(api::Kind::Pod);
        let _ = sel.required_value("spec.nodeName");
        let pod: api::core::Pod = api::codec::from_json(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"}
        }))
        .expect("a valid pod");
        let _ = sel.matches(&pod.into_any());
    }
    let _ = api::selector::FieldSelector::parse_for(api::Kind::Event, text);
});
