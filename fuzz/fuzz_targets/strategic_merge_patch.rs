//! Strategic merge patches (`application/strategic-merge-patch+json`, kubectl apply/edit/
//! set/patch) and server-side apply bodies (`application/apply-patch+yaml`), which go through
//! the same merge.
#![no_main]

#[path = "../common/patch.rs"]
mod patch;

use control::registry::PatchType;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    patch::run(data, &[PatchType::StrategicMerge, PatchType::Apply]);
});
