#!/usr/bin/env bash
# The agent's tunnel (docs/design/tunnel.md) beside the direct path, on one machine: a
# server without its own agent and one real agent joined to it on 127.0.0.1 with a busybox
# pod; `kubectl exec POD -- true` round trips and bytes through `kubectl port-forward`
# (busybox httpd serving about 80 MB), first with the server dialling the agent's port
# (mutual TLS per request), then with the same agent restarted with `--tunnel` (a yamux
# stream per request in the connection the agent keeps open). Loopback has no NAT: what
# differs is only the path the server takes to the agent.
# usage: bench/tunnel.sh [N]   (root; N exec round trips per side, 50 by default)
#        REL=DIR bench/tunnel.sh   uses the skiff, skiff-agent and skiff-bench in DIR
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
N=${1:-50}
need curl curl
need kubectl kubectl

machine
if [ -z "${REL:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent -p skiff-bench)
fi
REL=${REL:-"$ROOT/target/release"}
SKIFF="$REL/skiff"
BENCH="$REL/skiff-bench"
echo "skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev), build: $REL"
WORK=$(mktemp -d /tmp/skiff-tunnel.XXXXXX)
IMAGE=skiff.local/busybox:latest
python3 "$ROOT/scripts/busybox-image.py" "$WORK/busybox.tar" "$IMAGE" >/dev/null
AGENT_PID=
cleanup() {
    [ -n "${PF_PID:-}" ] && kill "$PF_PID" 2>/dev/null && wait "$PF_PID" 2>/dev/null
    if [ -n "${SKIFF_PID:-}" ]; then
        kubectl delete pod bench-tunnel --grace-period=1 --timeout=30s >/dev/null 2>&1 || true
    fi
    if [ -n "$AGENT_PID" ]; then kill "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; fi
    if [ -n "${SKIFF_PID:-}" ]; then kill "$SKIFF_PID" 2>/dev/null; wait "$SKIFF_PID" 2>/dev/null; fi
    for procs in /sys/fs/cgroup/*/skiff-bench-tunnel/*/*/cgroup.procs /sys/fs/cgroup/skiff-bench-tunnel/*/*/cgroup.procs; do
        [ -f "$procs" ] && xargs -r kill -9 <"$procs" 2>/dev/null
    done
    if [ -d "$WORK/run" ]; then
        awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r | while read -r m; do
            umount -l "$m" 2>/dev/null || true
        done
    fi
    rm -rf "$WORK" 2>/dev/null || true
}
trap cleanup EXIT

PORT=$(free_port)
SKIFF_LOG=warn "$SKIFF" server --data-dir "$WORK/server" --listen "127.0.0.1:$PORT" --disable-agent &
SKIFF_PID=$!
wait_port "$PORT"
export KUBECONFIG="$WORK/server/admin.kubeconfig"
for _ in $(seq 1 100); do [ -s "$KUBECONFIG" ] && break; sleep 0.1; done
TOKEN=$("$SKIFF" token create --ttl 1h --kubeconfig "$KUBECONFIG")
"$REL/skiff-agent" image import "$WORK/busybox.tar" --data-dir "$WORK/agent" >/dev/null

start_agent() {  # start_agent [--tunnel]
    SKIFF_LOG=warn "$REL/skiff-agent" --data-dir "$WORK/agent" --run-dir "$WORK/run" \
        --node-name bench-tunnel-node --cgroup-parent skiff-bench-tunnel --port 0 \
        --node-ip 127.0.0.1 --disable-proxy --disable-dns --disable-ingress \
        --server "https://127.0.0.1:$PORT" --token "$TOKEN" "$@" &
    AGENT_PID=$!
}
stop_agent() {
    kill "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
    AGENT_PID=
}
latency() {  # latency LABEL COMMAND... : N sequential runs, p50/p99
    "$BENCH" command-latency --label "$1" --sequential "$N" --concurrent 0 -- "${@:2}" | grep -v ' 0 at once'
}
fetch() {  # fetch URL -> "BYTES SECONDS"
    curl -s -o /dev/null -w '%{size_download} %{time_total}\n' "$1"
}
forward() {  # forward LABEL: best of 3 transfers through kubectl port-forward
    local lport b=0 line
    lport=$(free_port)
    kubectl port-forward pod/bench-tunnel "$lport:8080" >/dev/null 2>"$WORK/pf.err" &
    PF_PID=$!
    if ! wait_port "$lport"; then
        echo "kubectl port-forward did not listen:"; cat "$WORK/pf.err"; return 1
    fi
    for _ in 1 2 3; do
        line=$(fetch "http://127.0.0.1:$lport/big")
        b=$(awk -v l="$line" -v b="$b" 'BEGIN{split(l,a," "); r=(a[2]>0)?a[1]/a[2]/1e6:0; print (r>b)?r:b}')
    done
    printf '%s: port-forward %s MB/s (%s bytes)\n' "$1" "$b" "${line%% *}"
    kill "$PF_PID" 2>/dev/null; wait "$PF_PID" 2>/dev/null || true; PF_PID=
}
ready() {  # waits until exec answers
    for _ in $(seq 1 150); do
        kubectl exec bench-tunnel -- true >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "tunnel: the pod does not answer exec" >&2; return 1
}

start_agent
for _ in $(seq 1 150); do "$SKIFF" get node bench-tunnel-node >/dev/null 2>&1 && break; sleep 0.2; done
"$SKIFF" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: bench-tunnel}
spec:
  nodeName: bench-tunnel-node
  terminationGracePeriodSeconds: 1
  containers: [{name: main, image: $IMAGE, imagePullPolicy: IfNotPresent, command: [httpd, -f, -p, "8080", -h, /www]}]
EOF
ready
kubectl exec bench-tunnel -- sh -c 'seq 1 10000000 > /www/big'

echo "== direct: the server dials the agent's port"
latency "kubectl exec POD -- true (direct)" kubectl exec bench-tunnel -- true
forward "direct"

echo "== tunnel: the same agent with --tunnel"
stop_agent
start_agent --tunnel
sleep 2
ready
latency "kubectl exec POD -- true (tunnel)" kubectl exec bench-tunnel -- true
forward "tunnel"
