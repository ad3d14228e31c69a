#!/usr/bin/env bash
# NetworkPolicy: the rule sync time with POLICIES policies over PODS pods (the agent's own code
# into a fresh network namespace, every pod on that node), and the throughput of a connection
# through a policy beside none. Everything happens in network namespaces the script creates
# and removes:
#   node    the bridge skiff0 10.246.0.1/16 with the pod network's own chains
#           (net::iptables::apply) and, per case, no policy or the POLICIES policies over
#           PODS pods plus the measured pair (bridged pod traffic passes FORWARD, as on a node)
#   client  10.246.255.2, isolated for egress by a policy that allows the server on 5201-5202
#   server  10.246.255.3, isolated for ingress by a policy that allows the client there:
#           5201 takes one bulk connection (MB/s), 5202 accepts and closes (connections/s)
# The pair's jumps come last of the top chain (2,000 or so rules), so a new connection walks
# all of it. Cases alternate, ROUNDS times each; the medians are printed. Needs root; never
# touches the host's network or rules.
#   bench/netpol.sh [POLICIES] [PODS] [SECONDS] [ROUNDS]      (defaults 1000 1000 5 3)
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 1

POLICIES=${1:-1000}
PODS=${2:-1000}
SECONDS_RUN=${3:-5}
ROUNDS=${4:-3}
[ "$(id -u)" = 0 ] || { echo "netpol: run as root" >&2; exit 1; }

NODE=skiff-bench-np-node-$$
CLIENT=skiff-bench-np-client-$$
SERVER=skiff-bench-np-server-$$
SINK_PID=
ACCEPT_PID=
cleanup() {
    for pid in $SINK_PID $ACCEPT_PID; do kill "$pid" 2>/dev/null || true; done
    for ns in "$NODE" "$CLIENT" "$SERVER"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT

cargo build -q --release -p skiff-agent --example netpol_bench
TOOL="$ROOT/target/release/examples/netpol_bench"

machine
echo "iptables: $(iptables -V)"
echo
"$TOOL" sync "$POLICIES" "$PODS" 20
echo
echo "the same cluster on 10 nodes, as one of them sees it:"
"$TOOL" sync "$POLICIES" "$PODS" 20 10
echo

[ -e /proc/sys/net/bridge ] || modprobe br_netfilter
ip netns add "$NODE"
ip -n "$NODE" link set lo up
ip -n "$NODE" link add skiff0 type bridge
ip -n "$NODE" addr add 10.246.0.1/16 dev skiff0
ip -n "$NODE" link set skiff0 up
# nsenter, not `ip netns exec`: it keeps the host's /sys (and so /proc/sys/net/bridge).
nsenter --net="/run/netns/$NODE" sysctl -qw net.bridge.bridge-nf-call-iptables=1
for pod in client:"$CLIENT":10.246.255.2 server:"$SERVER":10.246.255.3; do
    IFS=: read -r name ns addr <<<"$pod"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$NODE" link add "v$name" type veth peer name eth0 netns "$ns"
    ip -n "$NODE" link set "v$name" master skiff0 up
    ip -n "$ns" addr add "$addr/16" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via 10.246.0.1
done
# The connection-rate client closes first: its TIME_WAIT ports are reused.
ip netns exec "$CLIENT" sysctl -qw net.ipv4.tcp_tw_reuse=1 net.ipv4.ip_local_port_range="1024 65000"

ip netns exec "$SERVER" "$TOOL" sink 10.246.255.3:5201 &
SINK_PID=$!
ip netns exec "$SERVER" "$TOOL" accept 10.246.255.3:5202 &
ACCEPT_PID=$!
for _ in $(seq 1 100); do
    ip netns exec "$CLIENT" bash -c 'exec 3<>/dev/tcp/10.246.255.3/5201' 2>/dev/null && break
    sleep 0.1
done

echo "a connection from the client pod to the server pod, ${SECONDS_RUN}s per case, $ROUNDS rounds:"
declare -A STREAM CONNS
for round in $(seq 1 "$ROUNDS"); do
    for mode in none policy; do
        what=$(nsenter --net="/run/netns/$NODE" "$TOOL" apply "$mode" 10.246.255.2 10.246.255.3 "$POLICIES" "$PODS")
        if [ "$mode" = policy ]; then
            # The policy is in force: another port of the server is dropped.
            if ip netns exec "$CLIENT" timeout 2 bash -c 'exec 3<>/dev/tcp/10.246.255.3/5203' 2>/dev/null; then
                echo "netpol: the policy let port 5203 through" >&2
                exit 1
            fi
        fi
        s=$(ip netns exec "$CLIENT" "$TOOL" stream 10.246.255.3:5201 "$SECONDS_RUN")
        c=$(ip netns exec "$CLIENT" "$TOOL" connect 10.246.255.3:5202 "$SECONDS_RUN" 2)
        STREAM[$mode]+="$s "
        CONNS[$mode]+="$c "
        printf '  round %s %-7s %7s MB/s on one connection, %7s new connections/s   (%s)\n' "$round" "$mode" "$s" "$c" "$what"
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
s_none=$(median <<<"${STREAM[none]}")
s_pol=$(median <<<"${STREAM[policy]}")
c_none=$(median <<<"${CONNS[none]}")
c_pol=$(median <<<"${CONNS[policy]}")
echo "medians:"
awk -v a="$s_none" -v b="$s_pol" 'BEGIN { printf "  one connection: %s MB/s without a policy, %s MB/s through one (%+.1f%%)\n", a, b, (b - a) * 100 / a }'
awk -v a="$c_none" -v b="$c_pol" 'BEGIN { printf "  new connections: %s/s without a policy, %s/s through one (%+.1f%%)\n", a, b, (b - a) * 100 / a }'
