#!/usr/bin/env bash
# The RBAC authorizer's cost per request: durable Pod create throughput over TLS (wrk, 32
# keep-alive clients, ~1 KiB Pods) as the admin (system:masters, which the authorizer allows
# at once: RBAC "off") and as a token-file user allowed by a RoleBinding to `edit` among
# 1,200 other bindings (RBAC evaluated on every request). Each run gets a fresh server with
# the same bindings.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
need wrk wrk
need kubectl kubectl
# SKIFF_BIN: an already built release binary (skips the build).
if [ -n "${SKIFF_BIN:-}" ]; then
    SKIFF=$SKIFF_BIN
else
    (cd "$ROOT" && cargo build --release -q -p skiff-control)
    SKIFF="${CARGO_TARGET_DIR:-$ROOT/target}/release/skiff"
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT

machine
echo "objects: $(wc -c <"$ROOT/bench/pod.json") byte Pod JSON, $CONNS connections, wrk -t2, $DURATION each"
echo 'bench-token-of-bob,bob,1001,"ops"' >"$work/tokens.csv"

# 10 namespaces x 100 RoleBindings and 200 ClusterRoleBindings for other subjects, and bob's
# group bound to edit in default.
bindings() {
    local ns i
    for ns in $(seq 0 9); do
        printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: ns%s}\n---\n' "$ns"
        for i in $(seq 0 99); do
            printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: rb%s, namespace: ns%s}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}\nsubjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: user%s}, {kind: Group, apiGroup: rbac.authorization.k8s.io, name: group%s}]\n---\n' "$i" "$ns" "$i" "$i"
        done
    done
    for i in $(seq 0 199); do
        printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: crb%s}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: cuser%s}]\n---\n' "$i" "$i"
    done
    printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: ops-edit, namespace: default}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}\nsubjects: [{kind: Group, apiGroup: rbac.authorization.k8s.io, name: ops}]\n'
}
bindings >"$work/bindings.yaml"

run() {  # run LABEL TOKEN-OR-EMPTY
    local label=$1 token=$2 port dir
    port=$(free_port)
    dir="$work/$label"
    start_skiff "$dir" "$port" --token-auth-file "$work/tokens.csv"
    KUBECONFIG="$dir/admin.kubeconfig" kubectl apply -f "$work/bindings.yaml" >/dev/null
    [ -n "$token" ] || token=$(cat "$dir/admin-token")
    echo "--- $label"
    wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
        -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
        "https://127.0.0.1:$port/api/v1/namespaces/default/pods" -- skiff "$ROOT/bench/pod.json" | tee "$work/$label.out"
    kill "$SKIFF_PID"; wait "$SKIFF_PID" 2>/dev/null || true
    if grep -q "Non-2xx" "$work/$label.out"; then
        echo "error: $label got refusals; the figures would mean nothing" >&2
        exit 1
    fi
}
run admin ""
run rbac-user bench-token-of-bob
off=$(awk '/Requests\/sec/{print $2}' "$work/admin.out")
on=$(awk '/Requests\/sec/{print $2}' "$work/rbac-user.out")
awk -v off="$off" -v on="$on" 'BEGIN {
    d = (off - on) / off * 100
    word = "loss"
    if (d < 0) { d = -d; word = "gain" }
    printf "creates/s: admin (RBAC skipped) %.0f, RBAC user %.0f: %.1f%% %s\n", off, on, d, word
}'
