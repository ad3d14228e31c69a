#!/usr/bin/env bash
# Service connection rate and latency: HTTP requests through a ClusterIP (the service proxy's
# iptables rules, programmed by the agent's own code) beside the same requests sent straight to
# the pod's IP. Everything happens in two network namespaces the script creates and removes:
#   node  10.42.0.1 on veth "pod0": runs wrk and holds the Service rules (nat OUTPUT path)
#   pod   10.42.0.2 on veth "eth0": the backend (a small threaded HTTP responder)
# The Service 10.43.0.10:80 -> 10.42.0.2:8080 is the last of EXTRA+1 Services in the top chain,
# so a new connection walks EXTRA ClusterIP rules before it matches. Each case is measured with
# keep-alive connections (NAT only at connection setup) and with a new connection per request
# (the connection rate). Needs root and wrk; never touches the host's network or rules.
#   bench/service-conn.sh [SECONDS] [CONNECTIONS] [EXTRA]     (defaults 10 32 1000)
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 1

SECONDS_RUN=${1:-10}
CONNS=${2:-32}
EXTRA=${3:-1000}
[ "$(id -u)" = 0 ] || { echo "service-conn: run as root" >&2; exit 1; }
need wrk wrk

NODE=skiff-bench-conn-node-$$
POD=skiff-bench-conn-pod-$$
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    ip netns del "$NODE" 2>/dev/null || true
    ip netns del "$POD" 2>/dev/null || true
}
trap cleanup EXIT

cargo build -q --release -p skiff-agent --example service_sync
TOOL="$ROOT/target/release/examples/service_sync"

ip netns add "$NODE"
ip netns add "$POD"
ip -n "$NODE" link set lo up
ip -n "$POD" link set lo up
ip -n "$NODE" link add pod0 type veth peer name eth0 netns "$POD"
ip -n "$NODE" addr add 10.42.0.1/24 dev pod0
ip -n "$POD" addr add 10.42.0.2/24 dev eth0
ip -n "$NODE" link set pod0 up
ip -n "$POD" link set eth0 up
ip -n "$POD" route add default via 10.42.0.1
# ClusterIPs need a route for the first routing decision; the DNAT then picks the pod.
ip -n "$NODE" route add 10.43.0.0/16 dev pod0

ip netns exec "$POD" "$TOOL" serve 10.42.0.2:8080 &
SERVER_PID=$!
for _ in $(seq 1 100); do
    ip netns exec "$NODE" bash -c 'exec 3<>/dev/tcp/10.42.0.2/8080' 2>/dev/null && break
    sleep 0.1
done
ip netns exec "$NODE" "$TOOL" apply "$EXTRA" 10.43.0.10:80 10.42.0.2:8080

machine
echo "iptables: $(iptables -V); wrk: 2 threads, $CONNS connections, ${SECONDS_RUN}s per case"

# run LABEL URL [wrk args...]: prints requests/s and the latency percentiles.
run() {
    local label=$1 url=$2
    shift 2
    local out
    out=$(ip netns exec "$NODE" wrk -t2 -c"$CONNS" -d"${SECONDS_RUN}s" --latency "$@" "$url")
    local rps p50 p99 errors
    rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
    p50=$(awk '$1=="50%"{print $2}' <<<"$out")
    p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    errors=$(awk '/Socket errors|Non-2xx/{printf "%s ", $0}' <<<"$out")
    printf '  %-34s %10s req/s   p50 %8s   p99 %8s  %s\n' "$label" "$rps" "$p50" "$p99" "$errors"
}

echo "keep-alive connections:"
run "direct to the pod 10.42.0.2:8080" http://10.42.0.2:8080/
run "through ClusterIP 10.43.0.10:80" http://10.43.0.10:80/
echo "a new connection per request:"
run "direct to the pod 10.42.0.2:8080" http://10.42.0.2:8080/ -H "Connection: close"
run "through ClusterIP 10.43.0.10:80" http://10.43.0.10:80/ -H "Connection: close"
