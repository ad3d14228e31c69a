#!/usr/bin/env bash
# A three-node skiff cluster on this one machine, for trying things by hand (run as root):
# the server in network namespace skiff-hub (which holds the LAN's bridge, 172.31.215.0/24),
# three agents in skiff-n1..skiff-n3 (each its own data dir, run dir and cgroup parent) and
# an empty client namespace skiff-client on the same LAN. No namespace has a route off the
# machine and the agents' DNS upstream is a dead loopback port, so nothing leaves it.
#
#   scripts/cluster.sh up      build what is missing, start everything, print how to use it
#   scripts/cluster.sh status  the processes and nodes
#   scripts/cluster.sh down    stop everything and remove every trace (namespaces, pods,
#                              cgroups, the state directory)
#
# Uses the debug binaries in target/debug. Environment: SKIFF_CLUSTER_DIR (state, default
# /tmp/skiff-cluster).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${SKIFF_CLUSTER_DIR:-/tmp/skiff-cluster}
BIN="$PWD/target/debug"
SKIFF="$BIN/skiff"
AGENT="$BIN/skiff-agent"
LAN=172.31.215
HUB=skiff-hub
CLIENT=skiff-client
NODES=(skiff-n1 skiff-n2 skiff-n3)
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.43.0.0/16
IMAGE=skiff.local/busybox:latest
KUBECONFIG_PATH="$DIR/server/admin.kubeconfig"

# Runs a command inside a named network namespace, keeping the host's mount namespace
# (unlike `ip netns exec`), so the agents' mounts are visible to `skiff-agent reset`.
in_ns() {
    local ns=$1
    shift
    nsenter --net="/run/netns/$ns" "$@"
}

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "run as root" >&2
        exit 1
    fi
}

stop_pid() {
    local file=$1
    [ -f "$file" ] || return 0
    local pid
    pid=$(cat "$file")
    # Each process leads its own process group (setsid): stop the group, so that no child
    # of it outlives it.
    if kill -0 "$pid" 2>/dev/null; then
        kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

agent_args() {
    local node=$1
    echo --data-dir "$DIR/$node/data" --run-dir "$DIR/$node/run" \
        --cgroup-parent "skiff-cluster-$node"
}

down() {
    need_root
    for node in "${NODES[@]}"; do
        stop_pid "$DIR/$node.pid"
        if [ -d "$DIR/$node" ]; then
            # shellcheck disable=SC2046 # agent_args is a list of words without spaces
            "$AGENT" $(agent_args "$node") reset >/dev/null 2>&1 || true
        fi
    done
    stop_pid "$DIR/server.pid"
    for ns in "${NODES[@]}" "$CLIENT" "$HUB"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    # The state directory may hold mounts if a reset failed: never delete through them.
    if [ -d "$DIR" ] && ! grep -q " $DIR/" /proc/self/mounts; then
        rm -rf "$DIR"
    elif [ -d "$DIR" ]; then
        echo "mounts remain under $DIR: not removed" >&2
    fi
    echo "cluster down"
}

wait_until() {
    local what=$1
    shift
    for _ in $(seq 1 300); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    echo "timed out waiting for $what" >&2
    return 1
}

add_host() {
    local ns=$1 n=$2
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$HUB" link add "p$n" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "p$n" master br0 up
    ip -n "$ns" addr add "$LAN.$n/24" dev eth0
    ip -n "$ns" link set eth0 up
}

up() {
    need_root
    if ip netns list | grep -qw "$HUB"; then
        echo "already up (scripts/cluster.sh down first)" >&2
        exit 1
    fi
    if [ ! -x "$SKIFF" ] || [ ! -x "$AGENT" ]; then
        echo "== building skiff and skiff-agent (debug)"
        cargo build -q -p skiff-control --bin skiff -p skiff-agent --bin skiff-agent
    fi
    mkdir -p "$DIR"
    python3 scripts/busybox-image.py "$DIR/busybox.tar" "$IMAGE" >/dev/null

    echo "== network namespaces: $HUB (bridge $LAN.1), ${NODES[*]}, $CLIENT"
    ip netns add "$HUB"
    ip -n "$HUB" link set lo up
    ip -n "$HUB" link add br0 type bridge
    ip -n "$HUB" addr add "$LAN.1/24" dev br0
    ip -n "$HUB" link set br0 up
    local n=11
    for node in "${NODES[@]}"; do
        add_host "$node" "$n"
        # Service addresses leave the node (before the proxy's DNAT) towards the hub, which
        # forwards nothing.
        ip -n "$node" route add "$SERVICE_CIDR" via "$LAN.1" dev eth0
        n=$((n + 1))
    done
    add_host "$CLIENT" 50

    echo "== server on $LAN.1:6443"
    # Started directly (not through a function, which would run in a subshell) so that $! is
    # the server itself; setsid makes it the leader of its own process group.
    nsenter --net="/run/netns/$HUB" setsid "$SKIFF" server --data-dir "$DIR/server" --listen "$LAN.1:6443" \
        --tls-san "$LAN.1" --cluster-cidr "$CLUSTER_CIDR" --service-cidr "$SERVICE_CIDR" \
        --node-monitor-grace-period 4s --default-toleration-seconds 3 --disable-agent \
        >"$DIR/server.log" 2>&1 &
    echo $! >"$DIR/server.pid"
    wait_until "the server" test -s "$KUBECONFIG_PATH"
    wait_until "the server to answer" in_ns "$HUB" "$SKIFF" --kubeconfig "$KUBECONFIG_PATH" get nodes
    local token
    token=$(in_ns "$HUB" "$SKIFF" token create --ttl 1h --kubeconfig "$KUBECONFIG_PATH")

    n=11
    for node in "${NODES[@]}"; do
        echo "== agent $node on $LAN.$n"
        mkdir -p "$DIR/$node/data" "$DIR/$node/run"
        "$AGENT" image import "$DIR/busybox.tar" --data-dir "$DIR/$node/data" >/dev/null
        # shellcheck disable=SC2046 # agent_args is a list of words without spaces
        nsenter --net="/run/netns/$node" setsid "$AGENT" $(agent_args "$node") --node-name "$node" \
            --node-ip "$LAN.$n" --cluster-cidr "$CLUSTER_CIDR" --heartbeat-seconds 1 \
            --dns-upstream 127.0.0.1:9 --server "https://$LAN.1:6443" --token "$token" \
            >"$DIR/$node.log" 2>&1 &
        echo $! >"$DIR/$node.pid"
        n=$((n + 1))
    done
    for node in "${NODES[@]}"; do
        wait_until "node $node" node_ready "$node"
    done
    in_ns "$HUB" "$SKIFF" --kubeconfig "$KUBECONFIG_PATH" get nodes
    cat <<EOF

The cluster is up. The API server is reachable only inside the namespaces:

  ip netns exec $HUB $SKIFF --kubeconfig $KUBECONFIG_PATH get nodes

Image $IMAGE (busybox) is in every node's store (use imagePullPolicy: IfNotPresent).
A shell on a node:         ip netns exec skiff-n1 bash
A client on the LAN:       ip netns exec $CLIENT bash   (NodePorts at $LAN.11-13)
Logs:                      $DIR/server.log, $DIR/skiff-n*.log
Tear it all down:          scripts/cluster.sh down
EOF
}

node_ready() {
    in_ns "$HUB" "$SKIFF" --kubeconfig "$KUBECONFIG_PATH" get nodes "$1" | grep -qw Ready
}

status() {
    for p in server "${NODES[@]}"; do
        if [ -f "$DIR/$p.pid" ] && kill -0 "$(cat "$DIR/$p.pid")" 2>/dev/null; then
            echo "$p: running (pid $(cat "$DIR/$p.pid"))"
        else
            echo "$p: not running"
        fi
    done
    if [ -s "$KUBECONFIG_PATH" ]; then
        in_ns "$HUB" "$SKIFF" --kubeconfig "$KUBECONFIG_PATH" get nodes || true
    fi
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
*)
    echo "usage: $0 up|status|down" >&2
    exit 2
    ;;
esac
