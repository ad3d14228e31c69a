//! `labelSelector=` query parameters, matched against a few label sets.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = api::selector::Selector::parse(text) {
        let mut labels = BTreeMap::new();
        let _ = sel.matches(&labels);
        labels.insert("app".to_string(), "web".to_string());
        labels.insert("tier".to_string(), "1".to_string());
        let _ = sel.matches(&labels);
        for r in sel.requirements() {
            labels.insert(r.key.clone(), r.values.first().cloned().unwrap_or_default());
        }
        let _ = sel.matches(&labels);
        let _ = sel.to_string();
    }
});
