#!/usr/bin/env bash
# Exec round trip and port-forward throughput on one node: `kubectl exec POD -- true`
# through `skiff server` (API -> agent over mutual TLS -> libcontainer tenant exec) beside
# `runc exec` and `podman exec` of the same busybox image, measured in the same run, and
# kubectl's own start-up (`kubectl version --client`) for reference. Then bytes through
# `kubectl port-forward` against curl straight to the pod's IP (busybox httpd serving a
# file of about 80 MB).
# usage: bench/exec.sh [N]   (root; N exec round trips per side, 50 by default)
#        PROFILE=debug bench/exec.sh   uses the debug build (quicker to build, slower to run)
#        REL=DIR bench/exec.sh         uses the binaries already in DIR
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
N=${1:-50}
need podman podman
need runc runc
need curl curl
need kubectl kubectl
need /usr/bin/time time

machine
PROFILE=${PROFILE:-release}
if [ -n "${REL:-}" ]; then
    : # REL=DIR: prebuilt skiff, skiff-agent and skiff-bench from DIR
elif [ "$PROFILE" = release ]; then
    (cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent -p skiff-bench)
else
    (cd "$ROOT" && cargo build -q -p skiff-control -p skiff-agent -p skiff-bench)
fi
REL=${REL:-"$ROOT/target/$PROFILE"}
echo "build: $REL"
SKIFF="$REL/skiff"
BENCH="$REL/skiff-bench"
WORK=$(mktemp -d /tmp/skiff-exec.XXXXXX)
IMAGE=skiff.local/busybox:latest
python3 "$ROOT/scripts/busybox-image.py" "$WORK/busybox.tar" "$IMAGE" --rootfs "$WORK/bundle/rootfs" >/dev/null

cleanup() {
    [ -n "${PF_PID:-}" ] && kill "$PF_PID" 2>/dev/null && wait "$PF_PID" 2>/dev/null
    # A pod outlives its agent (as on a real node): delete it through the server first, so that
    # no container keeps its address on skiff0 for the next run or test to collide with.
    if [ -n "${SKIFF_PID:-}" ]; then
        kubectl delete pod bench-exec --grace-period=1 --timeout=30s >/dev/null 2>&1 || true
        kill "$SKIFF_PID" 2>/dev/null && wait "$SKIFF_PID" 2>/dev/null
    fi
    # Whatever still runs in the benchmark's cgroups (a run interrupted mid-way).
    for procs in /sys/fs/cgroup/*/skiff-bench-exec/*/*/cgroup.procs /sys/fs/cgroup/skiff-bench-exec/*/*/cgroup.procs; do
        [ -f "$procs" ] && xargs -r kill -9 <"$procs" 2>/dev/null
    done
    runc delete -f bench-exec >/dev/null 2>&1 || true
    podman rm -f -t 0 bench-exec >/dev/null 2>&1 || true
    if [ -d "$WORK/run" ]; then
        awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r | while read -r m; do
            umount -l "$m" 2>/dev/null || true
        done
    fi
    rm -rf "$WORK" 2>/dev/null || true
}
trap cleanup EXIT

latency() {  # latency LABEL COMMAND... : N sequential runs, p50/p99
    "$BENCH" command-latency --label "$1" --sequential "$N" --concurrent 0 -- "${@:2}" | grep -v ' 0 at once'
}

echo "== skiff: server with its own agent, one busybox pod"
"$REL/skiff-agent" image import "$WORK/busybox.tar" --data-dir "$WORK/server/agent" >/dev/null
PORT=$(free_port)
SKIFF_LOG=warn "$SKIFF" server --data-dir "$WORK/server" --listen "127.0.0.1:$PORT" \
    --node-name bench-node --node-ip 127.0.0.1 --agent-run-dir "$WORK/run" \
    --cgroup-parent skiff-bench-exec --agent-port 0 --disable-proxy &
SKIFF_PID=$!
wait_port "$PORT"
export KUBECONFIG="$WORK/server/admin.kubeconfig"
for _ in $(seq 1 100); do "$SKIFF" get node bench-node >/dev/null 2>&1 && break; sleep 0.2; done
"$SKIFF" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: bench-exec}
spec:
  nodeName: bench-node
  terminationGracePeriodSeconds: 1
  containers: [{name: main, image: $IMAGE, imagePullPolicy: IfNotPresent, command: [httpd, -f, -p, "8080", -h, /www]}]
EOF
for _ in $(seq 1 150); do
    [ "$(kubectl get pod bench-exec -o jsonpath='{.status.phase}')" = Running ] && break
    sleep 0.2
done
kubectl exec bench-exec -- true # warm up
latency "kubectl version --client (kubectl start-up)" kubectl version --client
latency "kubectl exec POD -- true" kubectl exec bench-exec -- true

echo "== runc exec, same root filesystem"
(cd "$WORK/bundle" && runc spec && python3 - <<'EOF'
import json
c = json.load(open("config.json"))
c["process"]["terminal"] = False
c["process"]["args"] = ["sleep", "3600"]
c["root"]["readonly"] = False
json.dump(c, open("config.json", "w"))
EOF
)
runc run -d --bundle "$WORK/bundle" bench-exec >/dev/null
latency "runc exec CONTAINER true" runc exec bench-exec true
runc delete -f bench-exec >/dev/null 2>&1 || true

echo "== podman exec (runc, no network), same image"
podman load -q -i "$WORK/busybox.tar" >/dev/null
podman rm -f -t 0 bench-exec >/dev/null 2>&1 || true
podman run -d --name bench-exec --runtime runc --network=none --ulimit nofile=1024:1024 \
    --ulimit nproc=1024:1024 "$IMAGE" sleep 3600 >/dev/null
podman exec bench-exec true # warm up
latency "podman exec CONTAINER true" podman exec bench-exec true
podman rm -f -t 0 bench-exec >/dev/null 2>&1 || true

echo "== port-forward: about 80 MB from the pod's httpd, best of 3"
kubectl exec bench-exec -- sh -c 'seq 1 10000000 > /www/big'
POD_IP=$(kubectl get pod bench-exec -o jsonpath='{.status.podIP}')
fetch() {  # fetch URL -> "BYTES SECONDS"
    curl -s -o /dev/null -w '%{size_download} %{time_total}\n' "$1"
}
best() {  # best LABEL URL
    local b=0 line
    for _ in 1 2 3; do
        line=$(fetch "$2")
        b=$(awk -v l="$line" -v b="$b" 'BEGIN{split(l,a," "); r=(a[2]>0)?a[1]/a[2]/1e6:0; print (r>b)?r:b}')
        [ "${line%% *}" -gt 0 ] || { echo "$1: nothing received"; return 1; }
    done
    printf '%s: %s MB/s (%s bytes)\n' "$1" "$b" "${line%% *}"
}
best "direct to the pod IP ($POD_IP:8080)" "http://$POD_IP:8080/big"
LPORT=$(free_port)
kubectl port-forward pod/bench-exec "$LPORT:8080" >/dev/null 2>"$WORK/pf.err" &
PF_PID=$!
cpu_ticks() {  # cpu_ticks PID: user + system clock ticks of the process, all its threads
    awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
if wait_port "$LPORT"; then
    best "through kubectl port-forward (127.0.0.1:$LPORT)" "http://127.0.0.1:$LPORT/big" ||
        cat "$WORK/pf.err"
    # Where the CPU goes in one more transfer: each process's CPU time per MB moved.
    HTTPD=$(pgrep -f 'httpd -f -p 8080' | head -1)
    k0=$(cpu_ticks "$PF_PID"); s0=$(cpu_ticks "$SKIFF_PID"); h0=$(cpu_ticks "$HTTPD")
    c=$( { /usr/bin/time -f '%U %S' curl -s -o /dev/null -w '%{size_download} %{time_total}\n' \
        "http://127.0.0.1:$LPORT/big"; } 2>&1 | tr '\n' ' ')
    k1=$(cpu_ticks "$PF_PID"); s1=$(cpu_ticks "$SKIFF_PID"); h1=$(cpu_ticks "$HTTPD")
    awk -v c="$c" -v k=$((k1 - k0)) -v s=$((s1 - s0)) -v h=$((h1 - h0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {
        split(c, a, " "); mb = a[1] / 1e6; wall = a[2]; cu = a[3] + a[4]
        printf "CPU per MB through port-forward (%.0f MB in %.2f s): kubectl %.2f ms, skiff %.2f ms, curl %.2f ms, httpd %.2f ms\n",
            mb, wall, k / hz * 1000 / mb, s / hz * 1000 / mb, cu * 1000 / mb, h / hz * 1000 / mb }'
else
    echo "kubectl port-forward did not listen:"; cat "$WORK/pf.err"
fi
kill "$PF_PID" 2>/dev/null; wait "$PF_PID" 2>/dev/null || true; PF_PID=
