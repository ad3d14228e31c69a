#!/usr/bin/env bash
# Builds static, stripped release binaries of `skiff` and `skiff-agent` for
# x86_64-unknown-linux-musl and aarch64-unknown-linux-musl with zig as the cross linker
# (cargo-zigbuild from PyPI), and writes dist/SHA256SUMS.
# Usage: cross/build.sh [TARGET...]   (default: both targets)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)

if ! command -v cargo-zigbuild >/dev/null 2>&1 || ! python3 -m ziglang version >/dev/null 2>&1; then
    python3 -m pip install -q ziglang cargo-zigbuild
fi
for t in "${targets[@]}"; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/cross}"
mkdir -p dist
for t in "${targets[@]}"; do
    cargo zigbuild --release --target "$t" -p skiff-control -p skiff-agent
    for bin in skiff skiff-agent; do
        cp "$CARGO_TARGET_DIR/$t/release/$bin" "dist/$bin-$t"
    done
done
(cd dist && sha256sum skiff-* > SHA256SUMS)
ls -l dist
