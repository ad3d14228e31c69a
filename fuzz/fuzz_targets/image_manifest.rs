//! Registry documents as an image pull reads them: a manifest or an index (platform
//! selection), and an image config with its diff ids. Image references too.
#![no_main]

use agent::image::oci;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(r) = agent::image::Reference::parse(text.trim()) {
            let _ = (r.name(), r.manifest_ref(), r.api_host(), r.to_string());
        }
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let media_type = value
            .get("mediaType")
            .and_then(|m| m.as_str())
            .unwrap_or_default()
            .to_string();
        if oci::is_index(&media_type, &value) {
            if let Ok(index) = serde_json::from_value::<oci::Index>(value) {
                let _ = oci::select_platform(&index, &oci::Platform::host());
                let _ = oci::platforms(&index);
            }
        }
    }
    let _ = serde_json::from_slice::<oci::Manifest>(data);
    let _ = agent::image::parse_config("fuzz/image:latest", data);
});
