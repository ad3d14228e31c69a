#!/usr/bin/env bash
# Durable create throughput over TLS with 32 keep-alive clients and ~1 KiB Pod objects:
# skiff (POST pods) beside etcd 3.4 (JSON gateway POST /v3/kv/put) in one run, same client
# (wrk), same value, both over TLS, both durable (fsync before the answer). The scheduler
# and controllers run as in production.
#
#   RUNS=5          runs, each skiff then etcd back to back; the ratio of each and their spread
#   NODES=100       skiff gets NODES simulated nodes (`skiff-agent --simulate`, room for every
#                   pod), so each created pod is also scheduled, bound and reported Running;
#                   0 (the default): no nodes, each pod gets FailedScheduling
#   ETCD_BACKEND=1  also skiff on the etcd datastore (issue 19), once, after the runs
#   SKIFF=PATH      a prebuilt server (and AGENT=PATH a prebuilt agent)
#   PIN=both        (the default) each run twice: with the servers and wrk sharing both CPUs,
#                   and pinned, each server (all its threads) on CPU 1 and wrk (and the
#                   simulated nodes) on CPU 0, so the load generator takes nothing from the
#                   server. The pinned ratio is the figure of record. PIN=0 or PIN=1: one mode.
# Each run also prints the CPU time each server (/proc/PID/stat) and wrk spent per answered
# request.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
RUNS=${RUNS:-1}
NODES=${NODES:-0}
PIN=${PIN:-both}
case "$PIN" in
    0) MODES=(shared) ;;
    1) MODES=(pinned) ;;
    both) MODES=(shared pinned) ;;
    *) echo "api-throughput: PIN must be 0, 1 or both" >&2; exit 2 ;;
esac
if [ "$PIN" != 0 ] && [ "$(nproc)" -lt 2 ]; then
    echo "api-throughput: PIN=$PIN needs two CPUs" >&2; exit 1
fi
CLIENT_CPU=()
# pin MODE: sets the CPU prefixes of the servers and the clients for MODE.
pin() {
    if [ "$1" = pinned ]; then
        SERVER_CPU=(taskset -c 1); CLIENT_CPU=(taskset -c 0)
    else
        SERVER_CPU=(); CLIENT_CPU=()
    fi
}
need wrk wrk
need etcd etcd-server
need openssl openssl
build_release
if [ "$NODES" -gt 0 ] && [ -z "${AGENT:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p skiff-agent)
    AGENT="$ROOT/target/release/skiff-agent"
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT

machine
echo "objects: $(wc -c <"$ROOT/bench/pod.json") byte Pod JSON, $CONNS connections, wrk -t2, $DURATION each, $RUNS run(s), $NODES simulated node(s)"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/etcd.key" \
    -out "$work/etcd.crt" -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null

rate() { awk '/Requests\/sec/{print $2}' "$1"; }
# CPU time of a process so far, in clock ticks (user + system, /proc/PID/stat).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# client_cpu OUT COMMAND...: runs the load generator with its output in OUT, and adds a
# "client-cpu: SECONDS" line (user + system).
client_cpu() {
    local out=$1 TIMEFORMAT='%U %S' t
    shift
    t=$({ time "$@" >"$out"; } 2>&1)
    echo "client-cpu: $(echo "$t" | awk '{print $1 + $2}')" >>"$out"
}
# CPU per answered request over the run, in µs: the server's (from the "cpu:" line, in clock
# ticks) and the client's ("client-cpu:", in seconds).
cpu_per_request() {
    awk -v hz="$(getconf CLK_TCK)" '/ requests in /{n=$1} /^cpu:/{t=$2} END{printf "%.0f", t / hz * 1e6 / n}' "$1"
}
client_cpu_per_request() {
    awk '/ requests in /{n=$1} /^client-cpu:/{t=$2} END{printf "%.0f", t * 1e6 / n}' "$1"
}
errors() { awk '/Non-2xx/{print $5}' "$1"; }
p99() { awk '$1=="99%"{print $2}' "$1"; }

skiff_run() {  # skiff_run OUT DATA_DIR [server args...]
    local out=$1 dir=$2
    shift 2
    local port sim_pid=
    port=$(free_port)
    start_skiff "$dir" "$port" "$@"
    local token
    token=$(cat "$dir/admin-token")
    if [ "$NODES" -gt 0 ]; then
        # Room for every pod the run creates, so that each is scheduled.
        SKIFF_LOG=warn ${CLIENT_CPU[@]+"${CLIENT_CPU[@]}"} "$AGENT" --simulate "$NODES" --kubeconfig "$dir/admin.kubeconfig" \
            --sim-cpu 1000 --sim-memory 1Ti --max-pods 2000 &
        sim_pid=$!
        for _ in $(seq 1 300); do
            [ "$("$SKIFF" get nodes --kubeconfig "$dir/admin.kubeconfig" -o name 2>/dev/null | wc -l)" -ge "$NODES" ] && break
            sleep 0.1
        done
    fi
    local t0
    t0=$(cpu_ticks "$SKIFF_PID")
    client_cpu "$out" ${CLIENT_CPU[@]+"${CLIENT_CPU[@]}"} wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
        -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
        "https://127.0.0.1:$port/api/v1/namespaces/default/pods" -- skiff "$ROOT/bench/pod.json"
    echo "cpu: $(($(cpu_ticks "$SKIFF_PID") - t0))" >>"$out"
    if [ "$NODES" -gt 0 ]; then
        # How many of the created pods the scheduler had bound 5 s after the run.
        sleep 5
        curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$port/api/v1/namespaces/default/pods" |
            python3 -c 'import json,sys; p=json.load(sys.stdin)["items"]; print("bound:", sum(1 for x in p if x["spec"].get("nodeName")), "of", len(p))' >>"$out"
        kill "$sim_pid"; wait "$sim_pid" 2>/dev/null || true
    fi
    kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true
}

etcd_run() {  # etcd_run OUT DATA_DIR
    local out=$1 dir=$2 cport pport etcd_pid
    cport=$(free_port); pport=$(free_port)
    ${SERVER_CPU[@]+"${SERVER_CPU[@]}"} etcd --name bench --data-dir "$dir" --log-level error \
        --listen-client-urls "https://127.0.0.1:$cport" --advertise-client-urls "https://127.0.0.1:$cport" \
        --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "bench=http://127.0.0.1:$pport" --cert-file "$work/etcd.crt" --key-file "$work/etcd.key" &
    etcd_pid=$!
    wait_port "$cport"
    sleep 1
    local t0
    t0=$(cpu_ticks "$etcd_pid")
    client_cpu "$out" ${CLIENT_CPU[@]+"${CLIENT_CPU[@]}"} wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
        -H "Content-Type: application/json" \
        "https://127.0.0.1:$cport/v3/kv/put" -- etcd "$ROOT/bench/pod.json"
    echo "cpu: $(($(cpu_ticks "$etcd_pid") - t0))" >>"$out"
    kill "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true
}

echo "skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev), etcd $(etcd --version | head -1 | awk '{print $3}')"
declare -A ratios
for run in $(seq 1 "$RUNS"); do
    for mode in "${MODES[@]}"; do
        pin "$mode"
        o="$work/$mode-$run"
        skiff_run "$o-skiff.out" "$o-skiff"
        etcd_run "$o-etcd.out" "$o-etcd"
        s=$(rate "$o-skiff.out"); e=$(rate "$o-etcd.out")
        r=$(python3 -c "print(round($s/$e, 2))")
        ratios[$mode]="${ratios[$mode]:-} $r"
        bound=$(awk '/^bound:/{print ", " $2 " of " $4 " pods bound 5 s later"}' "$o-skiff.out")
        echo "run $run ($mode): skiff ${s} creates/s p99 $(p99 "$o-skiff.out") (non-2xx: $(errors "$o-skiff.out" || true))${bound}, etcd ${e} puts/s p99 $(p99 "$o-etcd.out") (non-2xx: $(errors "$o-etcd.out" || true)), ratio ${r}; CPU per request: skiff $(cpu_per_request "$o-skiff.out") µs (wrk $(client_cpu_per_request "$o-skiff.out")), etcd $(cpu_per_request "$o-etcd.out") µs (wrk $(client_cpu_per_request "$o-etcd.out"))"
    done
done

if [ "${ETCD_BACKEND:-0}" = 1 ]; then
    # skiff on the etcd datastore (issue 19): a fresh single-member etcd on loopback, reached
    # over plain HTTP (the server's own etcd traffic; wrk still talks TLS to skiff).
    dport=$(free_port); dpeer=$(free_port)
    etcd --name backend --data-dir "$work/etcd-backend" --log-level error \
        --listen-client-urls "http://127.0.0.1:$dport" --advertise-client-urls "http://127.0.0.1:$dport" \
        --listen-peer-urls "http://127.0.0.1:$dpeer" --initial-advertise-peer-urls "http://127.0.0.1:$dpeer" \
        --initial-cluster "backend=http://127.0.0.1:$dpeer" &
    backend_pid=$!
    wait_port "$dport"
    skiff_run "$work/skiff-etcd.out" "$work/skiff-etcd" --datastore-endpoint "http://127.0.0.1:$dport"
    kill "$backend_pid"; wait "$backend_pid" 2>/dev/null || true
    echo "etcd datastore: skiff $(rate "$work/skiff-etcd.out") creates/s p99 $(p99 "$work/skiff-etcd.out") (non-2xx: $(errors "$work/skiff-etcd.out" || true)), ratio to raw etcd of the last run $(python3 -c "print(round($(rate "$work/skiff-etcd.out")/$e, 2))")"
fi

for mode in "${MODES[@]}"; do
    # shellcheck disable=SC2086 # the ratios are words
    sorted=$(printf '%s\n' ${ratios[$mode]} | sort -n)
    record=""
    [ "$mode" != pinned ] || record=" (the figure of record)"
    echo "=== result ($mode$record): ratio skiff/etcd over $RUNS run(s), $NODES node(s): $(echo "$sorted" | head -1)–$(echo "$sorted" | tail -1), median $(echo "$sorted" | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}') (runs:${ratios[$mode]})"
done
