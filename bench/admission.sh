#!/usr/bin/env bash
# The cost of admission extensions on the create path, in one run of one release server:
# ConfigMap creates/s (~1 KiB, wrk, 32 keep-alive TLS connections, DURATION each) with
#  - none: no webhook or policy configured;
#  - webhooks: one mutating webhook (adds a label) and one validating webhook (allows), an
#    HTTPS webhook of skiff-bench's on 127.0.0.1 sharing the machine; the webhook's own time
#    per call is printed apart;
#  - policy: one ValidatingAdmissionPolicy (a CEL check of the data's size) bound with Deny;
# alternating RUNS times, each case on a fresh server with an empty store (a store grown by
# the cases before would slow the later ones). Targets: the policy costs less than 10%.
#   RUNS=3 DURATION=10s SKIFF=PATH
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
RUNS=${RUNS:-3}
need wrk wrk
need kubectl kubectl
need openssl openssl
server_bench_start
echo "skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev), $CONNS connections, wrk -t2, $DURATION each, $RUNS run(s)"

# The webhook's CA and serving certificate (for 127.0.0.1).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" \
    -out "$work/ca.crt" -days 1 -subj /CN=bench-webhook-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/hook.key" \
    -out "$work/hook.csr" -subj /CN=bench-webhook 2>/dev/null
openssl x509 -req -in "$work/hook.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
    -days 1 -out "$work/hook.crt" -extfile <(printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n') 2>/dev/null
hook_port=$(free_port)
mkfifo "$work/hook.in"
"$BENCH" webhook --port "$hook_port" --cert "$work/hook.crt" --key "$work/hook.key" <"$work/hook.in" >"$work/hook.out" &
exec 7>"$work/hook.in"
wait_port "$hook_port"
ca=$(base64 -w0 "$work/ca.crt")

# A fresh server (its own empty store) for each case of each run: sets port, token and
# KUBECONFIG.
fresh_server() {  # fresh_server NAME
    port=$(free_port)
    start_skiff "$work/$1" "$port"
    export KUBECONFIG="$work/$1/admin.kubeconfig"
    token=$(cat "$work/$1/admin-token")
    sleep 2
}
stop_server() {
    kill "$SKIFF_PID"
    wait "$SKIFF_PID" 2>/dev/null || true
    rm -rf "${work:?}/$1"
}

python3 - "$work" <<'EOF'
import json, sys
data = {f"key{i}": "x" * 100 for i in range(9)}
doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "NAME"}, "data": data}
open(f"{sys.argv[1]}/cm.json", "w").write(json.dumps(doc, separators=(",", ":")))
EOF
cat >"$work/hooks.yaml" <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: bench-mutate}
webhooks:
- name: mutate.bench.skiff.dev
  clientConfig: {caBundle: $ca, url: "https://127.0.0.1:$hook_port/mutate"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: bench-validate}
webhooks:
- name: validate.bench.skiff.dev
  clientConfig: {caBundle: $ca, url: "https://127.0.0.1:$hook_port/validate"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  sideEffects: None
  admissionReviewVersions: [v1]
EOF

cat >"$work/policy.yaml" <<'EOF'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bench-policy.skiff.dev}
spec:
  matchConstraints:
    resourceRules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  validations:
  - expression: "size(object.data) <= 64 && object.data.all(k, size(object.data[k]) <= 1024)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bench-policy-binding.skiff.dev}
spec:
  policyName: bench-policy.skiff.dev
  validationActions: [Deny]
EOF

rate() { awk '/Requests\/sec/{print $2}' "$1"; }
p99() { awk '$1=="99%"{print $2}' "$1"; }
errors() { awk '/Non-2xx/{print $5}' "$1"; }
load() {  # load OUT NAMESPACE
    wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/create.lua" \
        -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
        "https://127.0.0.1:$port/api/v1/namespaces/$2/configmaps" -- skiff "$work/cm.json" >"$1"
}
show() { echo "$(rate "$1") creates/s (p99 $(p99 "$1"), non-2xx $(errors "$1" || true))"; }
hook_ratios=()
policy_ratios=()
ratio() { awk -v a="$(rate "$1")" -v b="$(rate "$2")" 'BEGIN{printf "%.2f", a / b}'; }
# One case of one run on its fresh server, with CONFIG applied first if given; the caller
# checks what it needs and stops the server.
load_case() {  # load_case CASE RUN [CONFIG]
    fresh_server "$1$2"
    kubectl create namespace bench >/dev/null
    if [ -n "${3:-}" ]; then
        kubectl apply -f "$3" >/dev/null
        sleep 1
    fi
    load "$work/$1.$2" bench
}
for run in $(seq 1 "$RUNS"); do
    load_case none "$run"
    stop_server "none$run"

    load_case hooks "$run" "$work/hooks.yaml"
    # Every ConfigMap created under the webhooks carries their label.
    made=$(kubectl get configmap -n bench -o name | grep -c /bench- || true)
    labelled=$(kubectl get configmap -n bench -l webhooked=yes -o name | grep -c /bench- || true)
    if [ "$made" -eq 0 ] || [ "$made" != "$labelled" ]; then
        echo "admission: $labelled of $made ConfigMaps carry the mutating webhook's label" >&2
        exit 1
    fi
    stop_server "hooks$run"

    load_case policy "$run" "$work/policy.yaml"
    stop_server "policy$run"
    hook_ratios+=("$(ratio "$work/hooks.$run" "$work/none.$run")")
    policy_ratios+=("$(ratio "$work/policy.$run" "$work/none.$run")")
    echo "run $run: none $(show "$work/none.$run"); one mutating + one validating webhook $(show "$work/hooks.$run"); one policy $(show "$work/policy.$run")"
done
echo "with webhooks / none: ${hook_ratios[*]}"
echo "with a policy / none: ${policy_ratios[*]} (target >= 0.90)"
echo >&7
exec 7>&-
wait %1 2>/dev/null || true
cat "$work/hook.out"
