#!/usr/bin/env bash
# Builds skiff and skiff-agent for aarch64-unknown-linux-musl (quick profile) and runs them
# under qemu-aarch64-static: versions and the agent's offline self-check.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
T=aarch64-unknown-linux-musl
command -v file >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq file >/dev/null
}
command -v qemu-aarch64-static >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
}
if ! command -v cargo-zigbuild >/dev/null 2>&1 || ! python3 -m ziglang version >/dev/null 2>&1; then
    python3 -m pip install -q ziglang cargo-zigbuild
fi
rustup target list --installed | grep -qx "$T" || rustup target add "$T"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/cross}"
cargo zigbuild --profile cross-smoke --target "$T" -p skiff-control -p skiff-agent
out="$CARGO_TARGET_DIR/$T/cross-smoke"
file "$out/skiff" "$out/skiff-agent" | grep -q "ARM aarch64" || { echo "smoke: not aarch64 binaries" >&2; exit 1; }
qemu-aarch64-static "$out/skiff" version --client
qemu-aarch64-static "$out/skiff-agent" --version
qemu-aarch64-static "$out/skiff-agent" self-check
echo "smoke: aarch64 binaries run under qemu"
