#!/usr/bin/env bash
# The main job: start a skiff server with its own node (the in-process agent) on this machine,
# deploy the bundled example app (examples/hello: busybox httpd behind a Service, its page from
# a ConfigMap), and show it answering. Run as root on Debian 12.
# Leaves the server and the app running; stop with: scripts/demo.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${SKIFF_DEMO_DIR:-/tmp/skiff-demo}
PORT=${SKIFF_DEMO_PORT:-6443}
REL="$PWD/target/release"
SKIFF="$REL/skiff"
export KUBECONFIG="$DATA/server/admin.kubeconfig"

# GET a URL (python3 is on every Debian; busybox-static's wget cannot resolve or is absent).
fetch() {
    python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode().strip())' "$1" 2>/dev/null
}

stop_server() {
    if [ -f "$DATA/server.pid" ] && kill -0 "$(cat "$DATA/server.pid")" 2>/dev/null; then
        kill "$(cat "$DATA/server.pid")"
        for _ in $(seq 1 50); do kill -0 "$(cat "$DATA/server.pid")" 2>/dev/null || break; sleep 0.1; done
    fi
}

if [ "${1:-}" = stop ]; then
    if [ -x "$SKIFF" ] && [ -s "$KUBECONFIG" ]; then
        "$SKIFF" delete -f examples/hello/app.yaml >/dev/null 2>&1 || true
        # The server's own agent stops the pods; let it finish before the server goes.
        for _ in $(seq 1 120); do
            [ -z "$("$SKIFF" get pods -o name 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    stop_server
    echo "stopped"
    exit 0
fi

scripts/setup.sh
echo "== building skiff and skiff-agent (release)"
cargo build --release -q -p skiff-control -p skiff-agent
mkdir -p "$DATA"

echo "== the example image (busybox from busybox-static), imported into the local node's store"
python3 scripts/busybox-image.py "$DATA/busybox.tar" skiff.local/busybox:latest
"$REL/skiff-agent" image import "$DATA/busybox.tar" --data-dir "$DATA/server/agent"

stop_server
SKIFF_LOG=info "$SKIFF" server --data-dir "$DATA/server" --listen "127.0.0.1:$PORT" \
    --node-name skiff-demo >"$DATA/server.log" 2>&1 &
echo $! >"$DATA/server.pid"
for _ in $(seq 1 100); do
    [ -s "$KUBECONFIG" ] && "$SKIFF" get node skiff-demo >/dev/null 2>&1 && break
    sleep 0.2
done
echo "== skiff server is up with its own node (log: $DATA/server.log, kubeconfig: $KUBECONFIG)"
"$SKIFF" get nodes -o wide

echo "== deploying examples/hello"
"$SKIFF" apply -f examples/hello/app.yaml
timeout 120 "$SKIFF" rollout status deployment/hello
"$SKIFF" get all -o wide
echo "== the real kubectl sees the same"
kubectl get deploy,rs,pods,svc,endpoints -o wide 2>/dev/null || kubectl get deploy,rs,pods,svc -o wide

POD=$("$SKIFF" get pods -l app=hello -o name | head -1)
POD=${POD#pod/}
echo "== it answers (pod $POD)"
IP=$("$SKIFF" get pod "$POD" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"].get("podIP",""))')
CLUSTER_IP=$("$SKIFF" get service hello -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"].get("clusterIP",""))')
answered=
if [ -n "$CLUSTER_IP" ] && [ "$CLUSTER_IP" != None ]; then
    for _ in $(seq 1 20); do
        if out=$(fetch "http://$CLUSTER_IP/"); then
            echo "GET http://$CLUSTER_IP/ (Service hello) -> $out"; answered=1; break
        fi
        sleep 0.5
    done
fi
if [ -z "$answered" ] && [ -n "$IP" ] && out=$(fetch "http://$IP:8080/"); then
    echo "GET http://$IP:8080/ (pod $POD) -> $out"; answered=1
fi
if [ -z "$answered" ]; then
    # Without pod networking the pod has only its loopback: ask from inside its namespace.
    UID_=$("$SKIFF" get pod "$POD" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])')
    NS=/run/skiff/server-agent/sandboxes/$UID_/ns/net
    out=$(nsenter --net="$NS" python3 -c 'import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:8080/", timeout=3).read().decode().strip())')
    echo "GET http://127.0.0.1:8080/ inside pod $POD -> $out"
fi
echo "== kubectl exec: a command inside the pod"
# shellcheck disable=SC2016 # expanded inside the pod, not here
kubectl exec "$POD" -- sh -c 'echo "hello from $(hostname)"; ls /www'
echo "== kubectl cp: a file into the pod and back"
echo "copied at $(date -u +%H:%M:%S)" >"$DATA/note.txt"
kubectl cp "$DATA/note.txt" "$POD:/tmp/note.txt"
kubectl exec "$POD" -- cat /tmp/note.txt
kubectl cp "$POD:/tmp/note.txt" "$DATA/note-back.txt"
cmp "$DATA/note.txt" "$DATA/note-back.txt" && echo "the file came back unchanged"
echo "== its log"
"$SKIFF" logs "$POD" --tail 5 || true
echo "== done. Try: export KUBECONFIG=$KUBECONFIG; kubectl get pods; skiff logs -f $POD"
echo "   Stop everything with: scripts/demo.sh stop"
