//! Image archives (`skiff-agent image import`): OCI layout tars and `docker save` tars,
//! imported into a fresh image store.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("image.tar");
    std::fs::write(&file, data).expect("the archive written");
    let store = agent::image::ImageStore::open(&dir.path().join("store")).expect("an image store");
    let _ = store.import_archive(&file);
    for entry in std::fs::read_dir(dir.path()).expect("the temporary directory") {
        let name = entry.expect("a directory entry").file_name();
        assert!(
            name == "image.tar" || name == "store",
            "the import wrote {name:?} outside the store"
        );
    }
});
