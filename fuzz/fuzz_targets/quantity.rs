//! Resource quantities (`500m`, `1Gi`, `2e3`): every parse, and comparisons.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = api::quantity::parse_quantity_milli(text);
    let _ = api::quantity::parse_quantity_value(text);
    let _ = api::quantity::parse_quantity_bytes(text);
    let (a, b) = text.split_once(' ').unwrap_or((text, "1"));
    let _ = api::quantity::compare_quantities(a, b);
});
