#!/usr/bin/env bash
# The server's resident memory with 10,000 stored Pods and 100 open watches (issue 4's
# scenario, issue 14's target of 40 MiB), split into its anonymous pages (heap, stacks,
# relocated data) and its file pages (the binary's code and read-only data), from
# /proc/PID/status 8 s after the watchers opened.
# SKIFF=path (or several, space-separated, alternated run by run) measures those binaries;
# RUNS (default 2) runs each; SMAPS=DIR keeps each run's /proc/PID/smaps there.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-2}
server_bench_start
binaries=$SKIFF
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$SKIFF_PID/status"; }
for run in $(seq 1 "$RUNS"); do
    for SKIFF in $binaries; do
        port=$(free_port)
        rm -rf "$work/data"
        start_skiff "$work/data" "$port"
        export KUBECONFIG="$work/data/admin.kubeconfig"
        rate=$("$BENCH" fill --pods 10000 --concurrency 32 | tail -1)
        "$BENCH" watchers --watchers 100 >/dev/null 2>&1 &
        watchers=$!
        sleep 8
        rss=$(kib VmRSS) anon=$(kib RssAnon) file=$(kib RssFile)
        if [ -n "${SMAPS:-}" ]; then
            mkdir -p "$SMAPS"
            cp "/proc/$SKIFF_PID/smaps" "$SMAPS/run$run-$(basename "$SKIFF").smaps"
        fi
        kill "$watchers" "$SKIFF_PID"
        wait "$watchers" "$SKIFF_PID" 2>/dev/null || true
        awk -v r="$run" -v b="$SKIFF" -v rss="$rss" -v a="$anon" -v f="$file" -v rate="$rate" 'BEGIN {
            printf "run %d %s: RSS %.1f MiB (anonymous %.1f, file %.1f); fill: %s\n",
                r, b, rss / 1024, a / 1024, f / 1024, rate }'
    done
done
