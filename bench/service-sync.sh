#!/bin/sh
# Service proxy rule sync: 1,000 Services x 3 endpoints programmed with iptables-restore
# (the agent's own code path) into a fresh network namespace; prints the full sync time and
# the time to apply one endpoint change. Needs root; never touches the host's rules.
#   bench/service-sync.sh [SERVICES] [ENDPOINTS] [CHANGES]
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "service-sync: run as root" >&2; exit 1; }
cargo build -q --release -p skiff-agent --example service_sync
echo "iptables: $(iptables -V)"
exec target/release/examples/service_sync "${1:-1000}" "${2:-3}" "${3:-20}"
