#!/usr/bin/env bash
# A Deployment of REPLICAS (1000) replicas on NODES (100) simulated nodes: time from
# `skiff apply` until all replicas are available (status.availableReplicas), through the
# Deployment and ReplicaSet controllers, the scheduler and the simulated nodes.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
NODES=${NODES:-100}
REPLICAS=${REPLICAS:-1000}
(cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent)
SKIFF="$ROOT/target/release/skiff"
AGENT="$ROOT/target/release/skiff-agent"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
machine
port=$(free_port)
start_skiff "$work/server" "$port"
export KUBECONFIG="$work/server/admin.kubeconfig"
SKIFF_LOG=warn "$AGENT" --simulate "$NODES" --kubeconfig "$KUBECONFIG" &
for _ in $(seq 1 200); do
    [ "$("$SKIFF" get nodes -o name 2>/dev/null | wc -l)" -ge "$NODES" ] && break
    sleep 0.1
done
cat >"$work/deploy.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: big}
spec:
  replicas: $REPLICAS
  selector: {matchLabels: {app: big}}
  template:
    metadata: {labels: {app: big}}
    spec:
      containers: [{name: c, image: skiff.local/busybox:latest, resources: {requests: {cpu: 10m, memory: 16Mi}}}]
YAML
start=$(date +%s.%N)
"$SKIFF" apply -f "$work/deploy.yaml" >/dev/null
while :; do
    avail=$("$SKIFF" get deployment big -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"].get("availableReplicas",0))')
    [ "$avail" -ge "$REPLICAS" ] && break
    sleep 0.05
done
end=$(date +%s.%N)
echo "deployment of $REPLICAS replicas on $NODES simulated nodes: all available after $(python3 -c "print(f'{$end-$start:.2f}')") s"
"$SKIFF" get deployment big
