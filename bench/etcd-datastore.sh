#!/usr/bin/env bash
# The etcd datastore (issue 19) beside the redb default, in one run on one machine:
#   1. watch latency: 100 watchers on pods, 50 writes one at a time; per write, the time from
#      the write's acknowledgement to the last watcher having the event (skiff-bench
#      watch-fanout), on redb and on etcd;
#   2. scheduling throughput with NODES (1,000) simulated nodes on the etcd datastore (and on
#      redb beside it): PODS pods created in bursts, bound pods/s and create->bound latency;
#   3. failover: two servers on the same etcd, the leader killed with SIGKILL; the time until
#      the other server holds the controller Lease, and until a Deployment scaled up through it
#      has its new pods bound.
# Create throughput on both backends is bench/api-throughput.sh (same run, with raw etcd).
# etcd is a 3-member cluster on loopback (MEMBERS=1 for one member), reached over plain HTTP.
# NODES (1000), PODS (10000), WATCHERS (100), WRITES (50).
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
NODES=${NODES:-1000}
PODS=${PODS:-10000}
WATCHERS=${WATCHERS:-100}
WRITES=${WRITES:-50}
MEMBERS=${MEMBERS:-3}
need etcd etcd-server
(cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent -p skiff-bench)
# shellcheck disable=SC2034 # used by start_skiff in lib.sh
SKIFF="$ROOT/target/release/skiff"
AGENT="$ROOT/target/release/skiff-agent"
BENCH="$ROOT/target/release/skiff-bench"
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
machine
echo "etcd $(etcd --version | head -1 | awk '{print $3}'), $MEMBERS member(s) on loopback"

# A fresh etcd cluster; sets ETCD_URLS and ETCD_PIDS.
start_etcd() {  # start_etcd NAME
    local name=$1 i cluster="" peers=() clients=()
    ETCD_PIDS=()
    for i in $(seq 1 "$MEMBERS"); do
        peers+=("$(free_port)")
        clients+=("$(free_port)")
        cluster+="${cluster:+,}$name$i=http://127.0.0.1:${peers[-1]}"
    done
    ETCD_URLS=""
    for i in $(seq 1 "$MEMBERS"); do
        local c=${clients[$((i - 1))]} p=${peers[$((i - 1))]}
        etcd --name "$name$i" --data-dir "$work/$name$i" --log-level error \
            --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
            --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
            --initial-cluster "$cluster" --initial-cluster-state new \
            --initial-cluster-token "$name" >"$work/$name$i.log" 2>&1 &
        ETCD_PIDS+=("$!")
        ETCD_URLS+="${ETCD_URLS:+,}http://127.0.0.1:$c"
    done
    for c in "${clients[@]}"; do wait_port "$c"; done
    local first=${ETCD_URLS%%,*}
    for _ in $(seq 1 100); do
        curl -sf "$first/health" | grep -q '"health":"true"' && return 0
        sleep 0.1
    done
    echo "bench: etcd did not become healthy" >&2
    return 1
}

stop() { kill "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }

# Whether the server on PORT (with the admin token in DIR) holds the controller Lease.
leads() {  # leads DIR PORT
    curl -sk -H "Authorization: Bearer $(cat "$1/admin-token")" "https://127.0.0.1:$2/metrics" |
        grep -q '^leader_election_master_status{name="skiff-controller-manager"} 1'
}

for backend in redb etcd; do
    args=()
    if [ "$backend" = etcd ]; then
        start_etcd "watch"
        args=(--datastore-endpoint "$ETCD_URLS")
    fi
    port=$(free_port)
    start_skiff "$work/watch-$backend" "$port" "${args[@]}"
    echo "--- watch latency, $backend datastore ($WATCHERS watchers, $WRITES writes)"
    KUBECONFIG="$work/watch-$backend/admin.kubeconfig" "$BENCH" watch-fanout \
        --watchers "$WATCHERS" --writes "$WRITES"
    stop "$SKIFF_PID"
    [ "$backend" = redb ] || stop "${ETCD_PIDS[@]}"
done

for backend in redb etcd; do
    args=()
    if [ "$backend" = etcd ]; then
        start_etcd "sched"
        args=(--datastore-endpoint "$ETCD_URLS")
    fi
    port=$(free_port)
    start_skiff "$work/sched-$backend" "$port" "${args[@]}"
    export KUBECONFIG="$work/sched-$backend/admin.kubeconfig"
    echo "--- scheduling, $backend datastore ($NODES simulated nodes, $PODS pods)"
    SKIFF_LOG=warn "$AGENT" --simulate "$NODES" --kubeconfig "$KUBECONFIG" &
    sim=$!
    "$BENCH" schedule --nodes "$NODES" --pods "$PODS" --burst 1000 --concurrency 32
    "$BENCH" proc --pid "$SKIFF_PID" --seconds 1
    stop "$sim" "$SKIFF_PID"
    [ "$backend" = redb ] || stop "${ETCD_PIDS[@]}"
done
unset KUBECONFIG

echo "--- failover: two servers on one etcd, the leader killed with SIGKILL"
start_etcd "failover"
pa=$(free_port); pb=$(free_port)
start_skiff "$work/a" "$pa" --datastore-endpoint "$ETCD_URLS"
a=$SKIFF_PID
for _ in $(seq 1 300); do leads "$work/a" "$pa" && break; sleep 0.1; done
leads "$work/a" "$pa" || { echo "bench: the first server never led" >&2; exit 1; }
# The second server joins the first (`skiff server --join`, an empty data dir).
jt=$("$SKIFF" --kubeconfig "$work/a/admin.kubeconfig" token create --server)
start_skiff "$work/b" "$pb" --datastore-endpoint "$ETCD_URLS" --join "https://127.0.0.1:$pa" --token "$jt"
b=$SKIFF_PID
export KUBECONFIG="$work/b/admin.kubeconfig"
SKIFF_LOG=warn "$AGENT" --simulate 10 --kubeconfig "$KUBECONFIG" &
kubectl create deployment web --image=skiff.local/busybox:latest --replicas=1 >/dev/null
kubectl rollout status deployment/web --timeout=60s >/dev/null
t0=$(date +%s.%N)
kill -9 "$a"
until leads "$work/b" "$pb"; do sleep 0.05; done
t1=$(date +%s.%N)
kubectl scale deployment web --replicas=20 >/dev/null
until [ "$(kubectl get pods -l app=web -o jsonpath='{range .items[?(@.spec.nodeName)]}x{end}' | wc -c)" -ge 20 ]; do
    sleep 0.05
done
t2=$(date +%s.%N)
python3 -c "print(f'failover: the other server led {$t1 - $t0:.1f} s after the SIGKILL; a scale-up to 20 made then was bound {$t2 - $t1:.1f} s later (lease 15 s, renew deadline 10 s, retry 2 s)')"
stop "$b"
stop "${ETCD_PIDS[@]}"
