#!/usr/bin/env bash
# The main job: start a skiff server on this machine, deploy the bundled example app
# (examples/hello), and show it through skiff's own CLI and the real kubectl.
# Run as root on Debian 12. Leaves the server running; stop it with: kill $(cat /tmp/skiff-demo/server.pid)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo build --release -q -p skiff-control
SKIFF="$PWD/target/release/skiff"
DATA=${SKIFF_DEMO_DIR:-/tmp/skiff-demo}
PORT=${SKIFF_DEMO_PORT:-6443}

if [ -f "$DATA/server.pid" ] && kill -0 "$(cat "$DATA/server.pid")" 2>/dev/null; then
    kill "$(cat "$DATA/server.pid")"; sleep 1
fi
mkdir -p "$DATA"
SKIFF_LOG=info "$SKIFF" server --data-dir "$DATA/server" --listen "127.0.0.1:$PORT" >"$DATA/server.log" 2>&1 &
echo $! >"$DATA/server.pid"
export KUBECONFIG="$DATA/server/admin.kubeconfig"
for _ in $(seq 1 100); do
    [ -s "$KUBECONFIG" ] && "$SKIFF" get ns >/dev/null 2>&1 && break
    sleep 0.1
done

echo "== skiff server is up (log: $DATA/server.log, kubeconfig: $KUBECONFIG)"
"$SKIFF" get nodes || true
echo "== deploying examples/hello"
"$SKIFF" apply -f examples/hello/app.yaml
echo "== skiff get all"
"$SKIFF" get all
echo "== the real kubectl sees the same"
kubectl get deploy,svc,cm -o wide
echo "== not yet: the Deployment's pods are created by the controllers and scheduler (issue 4),"
echo "   and the Service answers once pod networking and the service proxy exist (issue 5)."
echo "   Stop the server with: kill \$(cat $DATA/server.pid)"
