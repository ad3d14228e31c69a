#!/usr/bin/env bash
# Writes control/order/skiff-x86_64-unknown-linux-gnu.txt.gz: the functions the release server
# runs, in the order its link places them first (see build/control.rs).
#
# The server runs under bench/texttrace.c (a breakpoint on each function's first byte, taken
# once, records each function it runs) through start-up, 2,000 creates with 20 watchers open,
# status writes, scheduling them and 500 more onto 50 simulated nodes, kubectl's everyday reads,
# and a minute of its control loops. Every function that ran goes into the list, in the order
# the traced binary had them.
# Run it again after large changes: a function the list does not name is placed after the
# listed ones, so the list only ages.
# SKIFF=path traces that release binary instead of building one.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
need cc gcc
need nm binutils
TARGET=x86_64-unknown-linux-gnu
OUT="$ROOT/control/order/skiff-$TARGET.txt.gz"
if [ -z "${SKIFF:-}" ]; then
    # The command the demo and the benchmarks build the server with.
    (cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent)
    SKIFF="$ROOT/target/release/skiff"
fi
(cd "$ROOT" && cargo build --release -q -p skiff-agent -p skiff-bench)
AGENT="$ROOT/target/release/skiff-agent"
BENCH="$ROOT/target/release/skiff-bench"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -o "$work/texttrace.so" "$ROOT/bench/texttrace.c" -ldl
traced="$SKIFF"
cat >"$work/skiff" <<EOS
#!/bin/sh
LD_PRELOAD="$work/texttrace.so" exec "$traced" "\$@"
EOS
chmod +x "$work/skiff"
SKIFF="$work/skiff"
export SMOL_THREADS=2
port=$(free_port)
start_skiff "$work/server" "$port"
export KUBECONFIG="$work/server/admin.kubeconfig"
"$BENCH" watchers --watchers 20 >/dev/null 2>&1 &
"$BENCH" fill --pods 2000 --concurrency 32 | tail -1
"$BENCH" status-writes --pods 1000 --writes 3000 --concurrency 16 | tail -1
SKIFF_LOG=warn "$AGENT" --simulate 50 --kubeconfig "$KUBECONFIG" >/dev/null 2>&1 &
"$BENCH" schedule --nodes 50 --pods 500 --burst 250 --concurrency 16 | tail -1
if command -v kubectl >/dev/null 2>&1; then
    for args in "get pods -A" "get nodes -o wide" "describe node sim-0" "get events -A" \
        "get deployments,replicasets,services -A" "api-resources"; do
        # shellcheck disable=SC2086 # word splitting wanted
        kubectl $args >/dev/null 2>&1 || true
    done
fi
sleep 60
python3 - "$traced" "$SKIFF_PID" "$OUT" <<'EOP'
import gzip, subprocess, sys
binary, pid, out = sys.argv[1:4]
# The program's code mapping (made writable by the tracer), and where its file offset lies.
for line in open(f"/proc/{pid}/maps"):
    f = line.split()
    if len(f) >= 6 and f[5] == binary and "x" in f[1]:
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        map_off = int(f[2], 16)
loads = []
for line in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f and f[0] == "LOAD":
        loads.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))  # offset, vaddr, filesz
# The segment mapped there: its first page's file offset is the mapping's.
bias = next(lo - (va & ~4095) for off, va, sz in loads if off & ~4095 == map_off)
with open(f"/proc/{pid}/mem", "rb") as mem:
    mem.seek(lo)
    code = mem.read(hi - lo)
nm = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
syms = sorted((int(f[0], 16), int(f[1], 16), f[3]) for f in (l.split() for l in nm.splitlines()) if len(f) == 4 and f[2] in "tTwW")
names, size, armed, seen = [], 0, 0, set()
for va, sz, name in syms:
    at = bias + va - lo
    if not 0 <= at < len(code) or sz == 0 or name in seen:
        continue
    armed += 1
    # The tracer put 0xCC on every function's first byte; a function that ran has its own back.
    if code[at] != 0xCC:
        names.append(name); seen.add(name); size += sz
with gzip.open(out, "wt", compresslevel=9) as f:
    f.write("\n".join(names) + "\n")
print(f"text-order: the server ran {len(names)} of {armed} functions "
      f"({size / 2**20:.1f} MiB of code), written to {out}")
EOP
