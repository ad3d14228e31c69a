#!/usr/bin/env bash
# Discovery of every group with the real kubectl, aggregated (apidiscovery.k8s.io/v2, what
# kubectl 1.32 asks for first) against per-group discovery (the same server binary with
# --disable-aggregated-discovery, as kube-apiserver without its AggregatedDiscoveryEndpoint),
# both with the custom resource definitions of the tests installed (Gateway API v1.2.1,
# Prometheus Operator v0.79.2's application kinds: 4 more groups):
#   `kubectl api-resources` with an empty cache (cold) and again with the cache it left
#   (warm: kubectl revalidates), RUNS times each, alternating; wall time per command and
#   the requests kubectl made (counted from its -v=6 log).
#   RUNS=5 SKIFF=PATH
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
need kubectl kubectl
build_release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
machine
echo "skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev), $(kubectl version --client 2>/dev/null | head -n 1), $RUNS run(s)"

fixtures="$ROOT/control/tests/fixtures"
declare -A port
for mode in aggregated per-group; do
    port[$mode]=$(free_port)
    extra=()
    [ "$mode" = per-group ] && extra=(--disable-aggregated-discovery)
    start_skiff "$work/$mode" "${port[$mode]}" "${extra[@]}"
    export KUBECONFIG="$work/$mode/admin.kubeconfig"
    for f in "$fixtures"/gateway-api-v1.2.1/crds/*.yaml "$fixtures"/prometheus-operator-v0.79.2/crds/*.yaml; do
        kubectl apply --server-side -f "$f" >/dev/null
    done
    kubectl wait --for=condition=established crd --all --timeout=60s >/dev/null
done

now_ms() { date +%s%3N; }
# run MODE CACHE: one `kubectl api-resources`; prints "MS REQUESTS".
run() {
    local start end log
    log="$work/log"
    start=$(now_ms)
    KUBECONFIG="$work/$1/admin.kubeconfig" kubectl api-resources --cache-dir "$2" -v=6 >/dev/null 2>"$log"
    end=$(now_ms)
    echo "$((end - start)) $(grep -c -E '(GET|HEAD) https://' "$log" || true)"
}

declare -A cold warm cold_req warm_req
for i in $(seq 1 "$RUNS"); do
    for mode in aggregated per-group; do
        cache="$work/cache-$mode-$i"
        read -r ms req < <(run "$mode" "$cache")
        cold[$mode]+="$ms "
        cold_req[$mode]=$req
        read -r ms req < <(run "$mode" "$cache")
        warm[$mode]+="$ms "
        warm_req[$mode]=$req
    done
done

spread() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "median %d ms (%d-%d)", a[int((NR+1)/2)], a[1], a[NR]}'; }
groups=$(KUBECONFIG="$work/aggregated/admin.kubeconfig" kubectl api-versions | wc -l)
echo "group versions served: $groups"
for mode in aggregated per-group; do
    echo "$mode: cold $(echo "${cold[$mode]}" | spread), ${cold_req[$mode]} requests; warm $(echo "${warm[$mode]}" | spread), ${warm_req[$mode]} requests"
done
