#!/usr/bin/env bash
# Builds static, stripped release binaries with zig as the cross linker (cargo-zigbuild from
# PyPI) into dist/, and writes dist/SHA256SUMS:
#
#   skiff-<target>, skiff-agent-<target>  x86_64-unknown-linux-musl, aarch64-unknown-linux-musl
#   skiff-armv7-unknown-linux-gnueabihf   32-bit ARM: the server only, without its embedded
#                                         agent (libcontainer 0.7 assumes 64-bit rlimit,
#                                         statfs and inode types), linked against glibc 2.17
#                                         (the armv7 musl std is not installable here), so
#                                         it runs on any 32-bit Raspberry Pi OS / Debian armhf
#
# Usage: cross/build.sh [TARGET...]   (default: all three)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
ARMV7=armv7-unknown-linux-gnueabihf
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl "$ARMV7")

if ! command -v cargo-zigbuild >/dev/null 2>&1 || ! python3 -m ziglang version >/dev/null 2>&1; then
    python3 -m pip install -q ziglang cargo-zigbuild
fi
for t in "${targets[@]}"; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/cross}"
# The release profile keeps symbols for the x86_64 server's function order; these are shipped.
export CARGO_PROFILE_RELEASE_STRIP=true
# The commit goes into `skiff version` (build.rs reads git; this also covers a copy without .git).
SKIFF_GIT_COMMIT="${SKIFF_GIT_COMMIT:-$(git rev-parse --short=10 HEAD 2>/dev/null || echo unknown)}"
export SKIFF_GIT_COMMIT
mkdir -p dist
for t in "${targets[@]}"; do
    if [ "$t" = "$ARMV7" ]; then
        # glibc 2.17 symbols only (zig's target suffix); no embedded agent.
        cargo zigbuild --release --target "$t.2.17" -p skiff-control --no-default-features --features jemalloc
        cp "$CARGO_TARGET_DIR/$t/release/skiff" "dist/skiff-$t"
        continue
    fi
    cargo zigbuild --release --target "$t" -p skiff-control -p skiff-agent
    for bin in skiff skiff-agent; do
        cp "$CARGO_TARGET_DIR/$t/release/$bin" "dist/$bin-$t"
    done
done
(cd dist && sha256sum skiff-* >SHA256SUMS)
ls -l dist
