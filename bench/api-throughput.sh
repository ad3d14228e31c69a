#!/usr/bin/env bash
# Durable create throughput over TLS with 32 keep-alive clients and ~1 KiB Pod objects:
# skiff (POST pods) beside etcd 3.4 (JSON gateway POST /v3/kv/put) in one run, same client
# (wrk), same value, both over TLS, both durable (fsync before the answer). Also skiff on the
# etcd datastore (issue 19) in the same run (ETCD_BACKEND=0 leaves it out).
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
need wrk wrk
need etcd etcd-server
need openssl openssl
build_release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT

machine
echo "objects: $(wc -c <"$ROOT/bench/pod.json") byte Pod JSON, $CONNS connections, wrk -t2, $DURATION each"

port=$(free_port)
start_skiff "$work/skiff" "$port"
token=$(cat "$work/skiff/admin-token")
echo "--- skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev)"
wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
    -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
    "https://127.0.0.1:$port/api/v1/namespaces/default/pods" -- skiff "$ROOT/bench/pod.json" | tee "$work/skiff.out"
kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/etcd.key" \
    -out "$work/etcd.crt" -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null
cport=$(free_port); pport=$(free_port)
etcd --name bench --data-dir "$work/etcd" --log-level error \
    --listen-client-urls "https://127.0.0.1:$cport" --advertise-client-urls "https://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "bench=http://127.0.0.1:$pport" --cert-file "$work/etcd.crt" --key-file "$work/etcd.key" &
etcd_pid=$!
wait_port "$cport"
sleep 1
echo "--- etcd $(etcd --version | head -1 | awk '{print $3}')"
wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
    -H "Content-Type: application/json" \
    "https://127.0.0.1:$cport/v3/kv/put" -- etcd "$ROOT/bench/pod.json" | tee "$work/etcd.out"
kill "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true

if [ "${ETCD_BACKEND:-1}" = 1 ]; then
    # skiff on the etcd datastore (issue 19): a fresh single-member etcd on loopback, reached
    # over plain HTTP (the server's own etcd traffic; wrk still talks TLS to skiff).
    dport=$(free_port); dpeer=$(free_port)
    etcd --name backend --data-dir "$work/etcd-backend" --log-level error \
        --listen-client-urls "http://127.0.0.1:$dport" --advertise-client-urls "http://127.0.0.1:$dport" \
        --listen-peer-urls "http://127.0.0.1:$dpeer" --initial-advertise-peer-urls "http://127.0.0.1:$dpeer" \
        --initial-cluster "backend=http://127.0.0.1:$dpeer" &
    backend_pid=$!
    wait_port "$dport"
    port=$(free_port)
    start_skiff "$work/skiff-etcd" "$port" --datastore-endpoint "http://127.0.0.1:$dport"
    token=$(cat "$work/skiff-etcd/admin-token")
    echo "--- skiff on the etcd datastore"
    wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
        -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
        "https://127.0.0.1:$port/api/v1/namespaces/default/pods" -- skiff-etcd "$ROOT/bench/pod.json" | tee "$work/skiff-etcd.out"
    kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true
    kill "$backend_pid"; wait "$backend_pid" 2>/dev/null || true
fi

rate() { awk '/Requests\/sec/{print $2}' "$1"; }
errors() { awk '/Non-2xx/{print $5}' "$1"; }
s=$(rate "$work/skiff.out"); e=$(rate "$work/etcd.out")
if [ -s "$work/skiff-etcd.out" ]; then
    se=$(rate "$work/skiff-etcd.out")
    echo "=== etcd datastore: skiff ${se} creates/s (non-2xx: $(errors "$work/skiff-etcd.out" || true)) against ${s} on redb, ratio to raw etcd $(python3 -c "print(round($se/$e, 2))")"
fi
echo "=== result: skiff ${s} creates/s (non-2xx: $(errors "$work/skiff.out" || true)), etcd ${e} puts/s (non-2xx: $(errors "$work/etcd.out" || true)), ratio $(python3 -c "print(round($s/$e, 2))")"
