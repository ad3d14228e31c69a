#!/usr/bin/env bash
# Batch throughput (issue 16): JOBS short Jobs (one pod each, restartPolicy Never) on NODES
# simulated nodes (`skiff-agent --simulate`, whose Jobs' pods exit 0 RUN_SECONDS after they
# start). Prints completed Jobs per second (first create to last completion), the create rate,
# and the server's resident memory (now and at its peak) with the load average beside them.
# JOBS (1000), NODES (100), RUN_SECONDS (1), CREATORS (8 kubectl processes creating at once);
# PROFILE=debug uses debug builds; SKIFF=path and AGENT=path use given binaries.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
JOBS=${JOBS:-1000}
NODES=${NODES:-100}
RUN_SECONDS=${RUN_SECONDS:-1}
CREATORS=${CREATORS:-8}
PROFILE=${PROFILE:-release}
if [ -z "${SKIFF:-}" ] || [ -z "${AGENT:-}" ]; then
    if [ "$PROFILE" = release ]; then
        (cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent)
    else
        (cd "$ROOT" && cargo build -q -p skiff-control -p skiff-agent)
    fi
fi
SKIFF=${SKIFF:-$ROOT/target/$PROFILE/skiff}
AGENT=${AGENT:-$ROOT/target/$PROFILE/skiff-agent}
need kubectl kubectl
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
machine
echo "profile: $PROFILE; $JOBS Jobs on $NODES simulated nodes, pods run ${RUN_SECONDS}s, $CREATORS creators"

port=$(free_port)
start_skiff "$work/server" "$port"
export KUBECONFIG="$work/server/admin.kubeconfig" HOME="$work"
SKIFF_LOG=warn "$AGENT" --simulate "$NODES" --kubeconfig "$KUBECONFIG" \
    --sim-complete-seconds "$RUN_SECONDS" &
for _ in $(seq 1 600); do
    ready=$(kubectl get nodes --no-headers 2>/dev/null | grep -c ' Ready ' || true)
    [ "$ready" -ge "$NODES" ] && break
    sleep 0.5
done
echo "nodes ready: $ready"
rss() { awk '/^VmRSS/{printf "%.1f", $2/1024}' "/proc/$SKIFF_PID/status"; }
echo "server before: $(rss) MiB"

# The manifests, split among the creators.
for c in $(seq 0 $((CREATORS - 1))); do : >"$work/jobs-$c.yaml"; done
for i in $(seq 1 "$JOBS"); do
    cat >>"$work/jobs-$((i % CREATORS)).yaml" <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: short-$i
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox
        command: ["true"]
---
EOF
done

completed() {
    kubectl get jobs -o jsonpath='{range .items[*]}{.status.succeeded}{"\n"}{end}' 2>/dev/null |
        grep -c '^1$' || true
}
now() { date +%s.%N; }
start=$(now)
for c in $(seq 0 $((CREATORS - 1))); do
    kubectl create -f "$work/jobs-$c.yaml" >/dev/null &
    creators+=("$!")
done
wait "${creators[@]}"
created=$(now)
done_count=0
while :; do
    done_count=$(completed)
    [ "$done_count" -ge "$JOBS" ] && break
    if awk -v s="$start" -v n="$(now)" 'BEGIN { exit !(n - s > 600) }'; then
        echo "bench: only $done_count of $JOBS Jobs completed in 10 minutes" >&2
        exit 1
    fi
    sleep 0.5
done
finished=$(now)
load=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v s="$start" -v c="$created" -v f="$finished" -v n="$JOBS" 'BEGIN {
    printf "created %d Jobs in %.1f s (%.0f/s)\n", n, c - s, n / (c - s);
    printf "completed %d Jobs in %.1f s: %.1f completed Jobs/s\n", n, f - s, n / (f - s) }'
echo "server after: $(rss) MiB (peak $(awk '/^VmHWM/{printf "%.1f", $2/1024}' "/proc/$SKIFF_PID/status") MiB)"
echo "load average (1, 5, 15 min) at the end: $load"
