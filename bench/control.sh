#!/usr/bin/env bash
# Control-plane figures: watch fan-out latency with 1,000 watchers, resident memory with
# 10,000 stored Pods and 100 watchers, and idle CPU and disk writes.
# IDLE_SECONDS (default 600) sets the idle window.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
IDLE_SECONDS=${IDLE_SECONDS:-600}
server_bench_start

port=$(free_port)
start_skiff "$work/fanout" "$port"
export KUBECONFIG="$work/fanout/admin.kubeconfig"
echo "--- watch fan-out"
"$BENCH" watch-fanout --watchers 1000 --writes 50
kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true

port=$(free_port)
start_skiff "$work/memory" "$port"
export KUBECONFIG="$work/memory/admin.kubeconfig"
echo "--- memory with 10,000 pods and 100 watchers"
"$BENCH" fill --pods 10000 --concurrency 32
"$BENCH" watchers --watchers 100 &
watchers_pid=$!
sleep 5
"$BENCH" proc --pid "$SKIFF_PID" --seconds 5
kill "$watchers_pid"; wait "$watchers_pid" 2>/dev/null || true
sleep 2
echo "--- idle for $IDLE_SECONDS s (10,000 pods stored, no clients)"
"$BENCH" proc --pid "$SKIFF_PID" --seconds "$IDLE_SECONDS"
