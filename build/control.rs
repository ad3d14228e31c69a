//! The server's build script: what build/version.rs records, and how the release `skiff`
//! binary is linked (its relocations packed, its functions in the order they run).
//!
//! `control/order/skiff-<target>.txt.gz` lists the functions the server runs (at start-up, on
//! creates, watches, status writes and scheduling), as `bench/text-order.sh` found them. The
//! linker (rust-lld, the default for x86_64-unknown-linux-gnu since Rust 1.90) places them
//! first and together, so the code the server runs fills a few MiB of pages instead of being
//! spread over all 27 MiB of its text: the kernel maps code in 64 KiB windows around each
//! fault, and with the order the server's resident code pages fall from about 22 MiB to
//! what docs/benchmarks.md records. Only the release profile's symbol names match the list;
//! a symbol it names that a build lacks (renamed, or another toolchain) is skipped.
//! `SKIFF_NO_ORDER_FILE=1` builds without it (for a linker other than lld).

#[path = "version.rs"]
mod version;

use std::io::Read;
use std::path::Path;

fn main() {
    version::record();
    release_link();
}

/// A build script's environment variable, "" when unset.
fn var(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

/// Whether the binary is linked by rust-lld for x86_64-unknown-linux-gnu, the target the
/// release link options below are for: another linker set through the environment may not
/// know them.
fn default_gnu_link() -> bool {
    let target = var("TARGET");
    let other_linker = !var(&format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    ))
    .is_empty()
        || var("CARGO_ENCODED_RUSTFLAGS").contains("linker");
    target == "x86_64-unknown-linux-gnu" && !other_linker
}

/// The release server's link options: packed relocations and the function order.
fn release_link() {
    println!("cargo:rerun-if-changed=../build/control.rs");
    println!("cargo:rerun-if-env-changed=SKIFF_NO_ORDER_FILE");
    let target = var("TARGET");
    if !default_gnu_link() || var("PROFILE") != "release" {
        return;
    }
    // Relative relocations packed (DT_RELR, glibc 2.36 and later): the loader reads a few KiB
    // at start instead of the 1.6 MiB of 24-byte entries that fill the data's addresses in,
    // and those pages stayed resident.
    println!("cargo:rustc-link-arg-bin=skiff=-Wl,-z,pack-relative-relocs");
    let dir = format!("{}/order", var("CARGO_MANIFEST_DIR"));
    let list = format!("{dir}/skiff-{target}.txt.gz");
    // The directory, so that a list added later is seen too.
    if Path::new(&dir).exists() {
        println!("cargo:rerun-if-changed={dir}");
    }
    if !var("SKIFF_NO_ORDER_FILE").is_empty() || !Path::new(&list).exists() {
        return;
    }
    let mut text = String::new();
    let read = std::fs::File::open(&list)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            flate2::read::GzDecoder::new(f)
                .read_to_string(&mut text)
                .map_err(|e| e.to_string())
        });
    if let Err(e) = read {
        println!("cargo:warning=reading {list}: {e}; linking without a function order");
        return;
    }
    let out = Path::new(&var("OUT_DIR")).join("skiff.order");
    if let Err(e) = std::fs::write(&out, text) {
        println!("cargo:warning=writing {}: {e}", out.display());
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=skiff=-Wl,--symbol-ordering-file={}",
        out.display()
    );
    println!("cargo:rustc-link-arg-bin=skiff=-Wl,--no-warn-symbol-ordering");
}
