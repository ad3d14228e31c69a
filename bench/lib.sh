# shellcheck shell=bash
# Shared helpers for the benchmark scripts (sourced).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

need() {  # need COMMAND APT-PACKAGE
    command -v "$1" >/dev/null 2>&1 && return
    echo "bench: installing $2"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {  # wait_port PORT
    for _ in $(seq 1 300); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "bench: nothing listens on port $1" >&2
    return 1
}

build_release() {  # SKIFF=path uses that binary instead of building one
    if [ -n "${SKIFF:-}" ]; then return; fi
    (cd "$ROOT" && cargo build --release -q -p skiff-control)
    SKIFF="$ROOT/target/release/skiff"
}

# The server benchmarks' common start: the release server (build_release) and skiff-bench
# built, BENCH, a scratch directory in `work` (removed, with every background job, on exit),
# two executor threads, the highest open-file limit, and the machine line.
server_bench_start() {
    build_release
    (cd "$ROOT" && cargo build --release -q -p skiff-bench)
    # shellcheck disable=SC2034 # read by the scripts that source this file
    BENCH="$ROOT/target/release/skiff-bench"
    export SMOL_THREADS=2
    work=$(mktemp -d)
    trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
    ulimit -n "$(ulimit -Hn)"
    machine
}

# A command prefix for the servers under test (`taskset -c 1` to pin them and all their
# threads to one CPU); empty by default.
SERVER_CPU=()
start_skiff() {  # start_skiff DATA_DIR PORT [extra args...]; sets SKIFF_PID
    local dir=$1 port=$2
    shift 2
    SKIFF_LOG=warn ${SERVER_CPU[@]+"${SERVER_CPU[@]}"} "$SKIFF" server --data-dir "$dir" --listen "127.0.0.1:$port" --disable-agent "$@" &
    # shellcheck disable=SC2034 # read by the scripts that source this file
    SKIFF_PID=$!
    wait_port "$port"
    for _ in $(seq 1 100); do [ -s "$dir/admin-token" ] && break; sleep 0.1; done
}

machine() {
    # shellcheck disable=SC1091 # /etc/os-release is the machine's, not ours
    echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME")"
}
