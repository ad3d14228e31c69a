#!/usr/bin/env bash
# Builds skiff and skiff-agent for aarch64-unknown-linux-musl (quick profile) and runs them
# under qemu-aarch64-static: versions, the agent's offline self-check, then a real cluster:
# `skiff server` starts, `skiff-agent` joins it with a token and registers its Node (no
# containers run under qemu). Run as root (the agent sets up its runtime).
#   cross/smoke.sh [--build-only]    --build-only: build the binaries, run nothing
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
[ "${1:-}" != --build-only ] || exit 0
file "$out/skiff" "$out/skiff-agent" | grep -q "ARM aarch64" || { echo "smoke: not aarch64 binaries" >&2; exit 1; }
qemu-aarch64-static "$out/skiff" version --client
# The server's jemalloc must be built for 64 KiB pages (.cargo/config.toml): one built for
# 4 KiB pages refuses to start on a 16 KiB-page kernel such as the Raspberry Pi 5's.
page=$(_RJEM_MALLOC_CONF=stats_print:true qemu-aarch64-static "$out/skiff" version --client 2>&1 |
    awk '/^Page size:/ {print $3}')
[ "$page" = 65536 ] || { echo "smoke: the aarch64 server's jemalloc uses ${page:-no} page size, not 65536" >&2; exit 1; }
qemu-aarch64-static "$out/skiff-agent" --version
qemu-aarch64-static "$out/skiff-agent" self-check
echo "smoke: aarch64 binaries run under qemu"

# A server and a joined agent, both emulated.
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
node="smoke-$$"
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    qemu-aarch64-static "$out/skiff-agent" --data-dir "$work/agent" --run-dir "$work/run" \
        --cgroup-parent "$node" reset >/dev/null 2>&1 || true
    ip link del sksmoke 2>/dev/null || true
    ip route del unreachable 10.199.0.0/16 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
SKIFF_LOG=warn qemu-aarch64-static "$out/skiff" server --data-dir "$work/server" \
    --listen "127.0.0.1:$port" --disable-agent --cluster-cidr 10.199.0.0/16 >"$work/server.log" 2>&1 &
pids+=("$!")
kc="$work/server/admin.kubeconfig"
sk() { qemu-aarch64-static "$out/skiff" --kubeconfig "$kc" "$@"; }
for _ in $(seq 120); do
    if [ -f "$kc" ] && sk get namespaces >/dev/null 2>&1; then break; fi
    sleep 0.5
done
sk get namespaces >/dev/null || { cat "$work/server.log" >&2; echo "smoke: the server did not start" >&2; exit 1; }
echo "smoke: skiff server serves under qemu"
token="$(sk token create --ttl 10m)"
SKIFF_LOG=info qemu-aarch64-static "$out/skiff-agent" --server "https://127.0.0.1:$port" \
    --token "$token" --data-dir "$work/agent" --run-dir "$work/run" --node-name "$node" \
    --node-ip 127.0.0.1 --cgroup-parent "$node" --port 0 --disable-proxy --disable-dns \
    --cluster-cidr 10.199.0.0/16 --bridge-name sksmoke >"$work/agent.log" 2>&1 &
pids+=("$!")
# The join is real: the emulated agent proves the server's CA against the token, sends its
# CSR and stores the signed certificate.
for _ in $(seq 120); do
    if [ -s "$work/agent/node.crt" ] || sk get node "$node" >/dev/null 2>&1; then break; fi
    sleep 0.5
done
[ -s "$work/agent/node.crt" ] || {
    tail -20 "$work/agent.log" >&2
    echo "smoke: the agent did not join" >&2
    exit 1
}
echo "smoke: skiff-agent joined under qemu"
# The real agent registers its Node and keeps it Ready. (qemu-user does not implement
# PR_SET_CHILD_SUBREAPER; the agent says so and goes on, as containers need not run here.)
for _ in $(seq 120); do
    if sk get node "$node" 2>/dev/null | grep -q " Ready"; then break; fi
    if ! kill -0 "${pids[1]}" 2>/dev/null; then break; fi
    sleep 0.5
done
sk get node "$node" | grep " Ready" || {
    tail -20 "$work/agent.log" >&2
    echo "smoke: the emulated agent did not register a Ready node" >&2
    exit 1
}
echo "smoke: skiff-agent registered node $node under qemu"
