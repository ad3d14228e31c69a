//! Layer blobs (plain or gzipped tar) unpacked as a pull unpacks them: whiteouts, links,
//! paths that try to leave the layer. Each input unpacks into a fresh directory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let blob = dir.path().join("blob");
    std::fs::write(&blob, data).expect("the blob written");
    let dest = dir.path().join("layer");
    let _ = agent::image::unpack_layer(&blob, &dest, "sha256:fuzz");
    // Nothing may land beside the layer's directory.
    for entry in std::fs::read_dir(dir.path()).expect("the temporary directory") {
        let name = entry.expect("a directory entry").file_name();
        assert!(
            name == "blob" || name == "layer",
            "the layer wrote {name:?} outside itself"
        );
    }
});
