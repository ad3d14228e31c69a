#!/usr/bin/env bash
# Scheduling throughput: a release server, NODES simulated nodes (`skiff-agent --simulate`),
# PODS pods created in bursts of BURST; prints bound pods/s, p50/p99 create->bound, the time
# until all are Running, and the server's resident memory at the end.
# NODES (1000), PODS (30000), BURST (1000), CONCURRENCY (32); PROFILE=debug uses debug builds;
# SKIFF=path runs that server binary.
# BACKLOG=1: create the pods before any node exists, then start the nodes, and report how fast
# the scheduler binds the backlog (its own rate, not the rate of durable creates).
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
NODES=${NODES:-1000}
PODS=${PODS:-30000}
BURST=${BURST:-1000}
CONCURRENCY=${CONCURRENCY:-32}
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
    (cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent -p skiff-bench)
else
    (cd "$ROOT" && cargo build -q -p skiff-control -p skiff-agent -p skiff-bench)
fi
# shellcheck disable=SC2034 # used by start_skiff in lib.sh
SKIFF=${SKIFF:-"$ROOT/target/$PROFILE/skiff"}
AGENT="$ROOT/target/$PROFILE/skiff-agent"
BENCH="$ROOT/target/$PROFILE/skiff-bench"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
machine
echo "profile: $PROFILE; $NODES nodes, $PODS pods in bursts of $BURST ($CONCURRENCY concurrent creates)"

port=$(free_port)
start_skiff "$work/server" "$port"
export KUBECONFIG="$work/server/admin.kubeconfig"
if [ -n "${BACKLOG:-}" ]; then
    # The pods first, then the nodes: how fast the scheduler works through a backlog.
    SKIFF_LOG=warn "$BENCH" schedule --nodes "$NODES" --pods "$PODS" --burst "$BURST" \
        --concurrency "$CONCURRENCY" -- "$AGENT" --simulate "$NODES" --kubeconfig "$KUBECONFIG"
else
    SKIFF_LOG=warn "$AGENT" --simulate "$NODES" --kubeconfig "$KUBECONFIG" &
    "$BENCH" schedule --nodes "$NODES" --pods "$PODS" --burst "$BURST" --concurrency "$CONCURRENCY"
fi
echo "--- server with $NODES nodes and $PODS pods"
"$BENCH" proc --pid "$SKIFF_PID" --seconds 5
# CPU the scheduler thread spent deciding (the binds themselves run on the server's executor).
tck=$(getconf CLK_TCK)
for t in /proc/"$SKIFF_PID"/task/*; do
    if [ "$(cat "$t/comm" 2>/dev/null)" = skiff-scheduler ]; then
        awk -v tck="$tck" -v pods="$PODS" '{ s = ($14 + $15) / tck;
            printf "scheduler thread: %.2f s cpu for %d pods (%.0f decisions per cpu-second)\n", s, pods, (s > 0 ? pods / s : 0) }' "$t/stat"
    fi
done
