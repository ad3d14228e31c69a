#!/usr/bin/env bash
# Custom resources beside built-in kinds, in one run of one release server:
#  1. creates/s of a custom resource (a ~1 KiB object checked against a structural schema
#     with a CEL rule) beside ConfigMap creates/s of the same size, same client (wrk, 32
#     keep-alive TLS connections), each for DURATION, alternating RUNS times; target 0.8x;
#  2. the server's memory (RSS, /proc/PID/status) before and after the CRDs of the tests
#     (Gateway API v1.2.1's five, Prometheus Operator's four application kinds) are applied
#     and established; target under +10 MiB;
#   RUNS=3 DURATION=10s SKIFF=PATH
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
RUNS=${RUNS:-3}
need wrk wrk
need kubectl kubectl
build_release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
machine
echo "skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev), $CONNS connections, wrk -t2, $DURATION each, $RUNS run(s)"

rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }
port=$(free_port)
start_skiff "$work/server" "$port"
export KUBECONFIG="$work/server/admin.kubeconfig"
token=$(cat "$work/server/admin-token")
sleep 2
rss_before=$(rss_kib "$SKIFF_PID")

kubectl apply -f - >/dev/null <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: samples.bench.skiff.dev}
spec:
  group: bench.skiff.dev
  scope: Namespaced
  names: {plural: samples, kind: Sample}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          data:
            type: object
            additionalProperties: {type: string, maxLength: 256}
            x-kubernetes-validations:
            - rule: "size(self) <= 16"
EOF
kubectl wait --for=condition=established crd/samples.bench.skiff.dev --timeout=30s >/dev/null

# The same ~1 KiB of data as a ConfigMap and as a custom object.
python3 - "$work" <<'EOF'
import json, sys
data = {f"key{i}": "x" * 100 for i in range(9)}
for name, doc in [("cm", {"apiVersion": "v1", "kind": "ConfigMap"}),
                  ("cr", {"apiVersion": "bench.skiff.dev/v1", "kind": "Sample"})]:
    doc = {**doc, "metadata": {"name": "NAME"}, "data": data}
    open(f"{sys.argv[1]}/{name}.json", "w").write(json.dumps(doc, separators=(",", ":")))
EOF
rate() { awk '/Requests\/sec/{print $2}' "$1"; }
p99() { awk '$1=="99%"{print $2}' "$1"; }
errors() { awk '/Non-2xx/{print $5}' "$1"; }
load() {  # load OUT PATH BODY
    wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
        -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
        "https://127.0.0.1:$port$2" -- skiff "$3" >"$1"
}
ratios=()
for run in $(seq 1 "$RUNS"); do
    # A namespace per run: wrk's names repeat from one run to the next.
    kubectl create namespace "run$run" >/dev/null
    load "$work/cm.$run" "/api/v1/namespaces/run$run/configmaps" "$work/cm.json"
    load "$work/cr.$run" "/apis/bench.skiff.dev/v1/namespaces/run$run/samples" "$work/cr.json"
    cm=$(rate "$work/cm.$run"); cr=$(rate "$work/cr.$run")
    ratio=$(awk -v a="$cr" -v b="$cm" 'BEGIN{printf "%.2f", a / b}')
    ratios+=("$ratio")
    echo "run $run: ConfigMap $cm creates/s (p99 $(p99 "$work/cm.$run"), non-2xx $(errors "$work/cm.$run" || true)), custom $cr creates/s (p99 $(p99 "$work/cr.$run"), non-2xx $(errors "$work/cr.$run" || true)), ratio $ratio"
done
echo "custom/ConfigMap creates/s: ${ratios[*]} (target >= 0.8)"

rss_mid=$(rss_kib "$SKIFF_PID")
for f in "$ROOT"/control/tests/fixtures/gateway-api-v1.2.1/crds/*.yaml \
    "$ROOT"/control/tests/fixtures/prometheus-operator-v0.79.2/crds/*.yaml; do
    kubectl apply --server-side -f "$f" >/dev/null
done
kubectl wait --for=condition=established crd --all --timeout=60s >/dev/null
# Served and used once (OpenAPI built, kinds listed) before memory is read.
kubectl explain httproute.spec.rules >/dev/null
kubectl get httproutes,servicemonitors -A >/dev/null 2>&1
sleep 2
rss_after=$(rss_kib "$SKIFF_PID")
echo "memory: RSS $((rss_before / 1024)) MiB at start, $((rss_mid / 1024)) MiB after the create runs, $((rss_after / 1024)) MiB with the 9 project CRDs installed: +$(((rss_after - rss_mid) / 1024)) MiB (target < 10)"
