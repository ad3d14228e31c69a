#!/usr/bin/env bash
# Pod start latency on one node, image present: skiff (API create -> Running seen on a
# watch, through `skiff server` with its in-process agent) beside `podman run -d` and
# `runc run -d` of the same busybox image. Also prints the agent's share: the server's RSS
# with 20 pods running, and its idle CPU.
# usage: bench/pod-start.sh [SEQUENTIAL [CONCURRENT]]   (root)
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
SEQ=${1:-100}
CONC=${2:-20}
need podman podman
need runc runc

machine
(cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent -p skiff-bench)
REL="$ROOT/target/release"
SKIFF="$REL/skiff"
BENCH="$REL/skiff-bench"
WORK=$(mktemp -d /tmp/skiff-podstart.XXXXXX)
IMAGE=skiff.local/busybox:latest
python3 "$ROOT/scripts/busybox-image.py" "$WORK/busybox.tar" "$IMAGE" --rootfs "$WORK/bundle/rootfs" >/dev/null

cleanup() {
    [ -n "${AGENT_PID:-}" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
    [ -n "${SKIFF_PID:-}" ] && kill "$SKIFF_PID" 2>/dev/null && wait "$SKIFF_PID" 2>/dev/null
    runc list -q 2>/dev/null | grep "^bench-" | while read -r id; do runc delete -f "$id" >/dev/null 2>&1 || true; done
    podman rm -f -a >/dev/null 2>&1 || true
    if [ -d "$WORK/run" ]; then
        awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r | while read -r m; do
            umount -l "$m" 2>/dev/null || true
        done
    fi
    rm -rf "$WORK" 2>/dev/null || true
}
trap cleanup EXIT

if [ -z "${PEERS_ONLY:-}" ]; then
echo "== skiff: server with its own agent, busybox imported, $SEQ pods one by one and $CONC at once"
"$REL/skiff-agent" image import "$WORK/busybox.tar" --data-dir "$WORK/server/agent" >/dev/null
PORT=$(free_port)
SKIFF_LOG=warn "$SKIFF" server --data-dir "$WORK/server" --listen "127.0.0.1:$PORT" \
    --node-name bench-node --node-ip 127.0.0.1 --agent-run-dir "$WORK/run" \
    --cgroup-parent skiff-bench --agent-port 0 --disable-proxy &
SKIFF_PID=$!
wait_port "$PORT"
export KUBECONFIG="$WORK/server/admin.kubeconfig"
for _ in $(seq 1 100); do "$SKIFF" get node bench-node >/dev/null 2>&1 && break; sleep 0.2; done
"$BENCH" pod-start --image "$IMAGE" --sequential "$SEQ" --concurrent "$CONC"
if [ "${BOUND:-}" = 1 ]; then
    echo "-- pods bound to the node directly (no scheduler)"
    "$BENCH" pod-start --node bench-node --image "$IMAGE" --sequential "$SEQ" --concurrent "$CONC"
fi

kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true; SKIFF_PID=
fi

# The standalone agent with 20 idle pods: resident memory and CPU. Measured for the static
# musl binary that ships (cross/build.sh) and for the glibc build of this machine.
idle_agent() {  # idle_agent LABEL AGENT-BINARY
    local label=$1 agent=$2 dir="$WORK/idle-$1"
    echo "== skiff-agent ($label, standalone process) with 20 pods running: memory and idle CPU"
    PORT=$(free_port)
    SKIFF_LOG=warn "$SKIFF" server --data-dir "$dir/server" --listen "127.0.0.1:$PORT" --disable-agent &
    SKIFF_PID=$!
    wait_port "$PORT"
    export KUBECONFIG="$dir/server/admin.kubeconfig"
    for _ in $(seq 1 100); do [ -s "$KUBECONFIG" ] && "$SKIFF" get ns >/dev/null 2>&1 && break; sleep 0.1; done
    TOKEN=$("$SKIFF" token create)
    "$agent" image import "$WORK/busybox.tar" --data-dir "$dir/agent" >/dev/null
    SKIFF_LOG=warn "$agent" --server "https://127.0.0.1:$PORT" --token "$TOKEN" \
        --data-dir "$dir/agent" --run-dir "$WORK/run-$label" --node-name "bench-$label" \
        --node-ip 127.0.0.1 --cgroup-parent "skiff-bench-$label" --port 0 --disable-proxy &
    AGENT_PID=$!
    for _ in $(seq 1 100); do "$SKIFF" get node "bench-$label" >/dev/null 2>&1 && break; sleep 0.2; done
    for i in $(seq 1 20); do
        "$SKIFF" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: idle-$i, labels: {skiff-bench: podstart}}
spec:
  nodeName: bench-$label
  terminationGracePeriodSeconds: 2
  containers: [{name: main, image: $IMAGE, imagePullPolicy: IfNotPresent, command: [sh, -c, "trap 'exit 0' TERM; sleep 3600 & wait"]}]
EOF
    done
    for _ in $(seq 1 100); do
        [ "$("$SKIFF" get pods -o name --field-selector status.phase=Running | wc -l)" -ge 20 ] && break
        sleep 0.3
    done
    echo "running pods: $("$SKIFF" get pods -o name --field-selector status.phase=Running | wc -l)"
    sleep 15
    "$BENCH" proc --pid "$AGENT_PID" --seconds 60
    grep -E '^(RssAnon|RssFile|Threads)' "/proc/$AGENT_PID/status" | tr -s ' \t' ' ' | paste -sd ' '
    kubectl delete pods -l skiff-bench=podstart --wait=false >/dev/null
    for _ in $(seq 1 100); do [ -z "$("$SKIFF" get pods -o name)" ] && break; sleep 0.3; done
    kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true; AGENT_PID=
    kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true; SKIFF_PID=
}

if [ -z "${PEERS_ONLY:-}" ]; then
    # The static build has its own target directory (cross/build.sh's default).
    bash "$ROOT/cross/build.sh" x86_64-unknown-linux-musl >/dev/null
    idle_agent static "$ROOT/dist/skiff-agent-x86_64-unknown-linux-musl"
    idle_agent glibc "$REL/skiff-agent"
fi

echo "== podman run -d (runc, no network), same image"
podman load -q -i "$WORK/busybox.tar" >/dev/null
podman rm -f -a >/dev/null 2>&1 || true
podman run --rm --runtime runc --network=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    "$IMAGE" true >/dev/null # warm up
"$BENCH" command-latency --label "podman run -d" --sequential "$SEQ" --concurrent "$CONC" -- \
    podman run -d --name "bench-{}" --runtime runc --network=none \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$IMAGE" sleep 3600
podman rm -f -a -t 0 >/dev/null 2>&1 || true

echo "== runc run -d, same root filesystem"
(cd "$WORK/bundle" && runc spec && python3 - <<'EOF'
import json
c = json.load(open("config.json"))
c["process"]["terminal"] = False
c["process"]["args"] = ["sleep", "3600"]
c["root"]["readonly"] = False
json.dump(c, open("config.json", "w"))
EOF
)
"$BENCH" command-latency --label "runc run -d" --sequential "$SEQ" --concurrent "$CONC" -- \
    runc run -d --bundle "$WORK/bundle" "bench-{}"
