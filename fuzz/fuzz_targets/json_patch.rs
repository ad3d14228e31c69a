//! JSON patches (`application/json-patch+json`, `kubectl patch --type=json`) and JSON merge
//! patches (`application/merge-patch+json`, `kubectl label|annotate|scale`).
#![no_main]

#[path = "../common/patch.rs"]
mod patch;

use control::registry::PatchType;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    patch::run(data, &[PatchType::Json, PatchType::Merge]);
});
