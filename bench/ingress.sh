#!/usr/bin/env bash
# Ingress proxy beside nginx: requests/s and latency of HTTP requests through skiff's built-in
# ingress proxy (the agent's own code, `agent::ingress::start`, run alone by the ingress_proxy
# example and fed by a real `skiff server`'s watches: Ingress -> Service -> Endpoints) and
# through nginx configured as a reverse proxy to the same backend, with the same client (wrk)
# in the same run, plus straight to the backend; over HTTP and over HTTPS (TLS ended at the
# proxy with the certificate chosen by SNI, nginx with the same certificate and key). Then
# both proxies' resident memory.
# Everything happens in two network namespaces the script creates and removes:
#   node  10.42.0.1 on veth "pod0": skiff server (127.0.0.1), the ingress proxy on :8081,
#         nginx on :8082, wrk
#   pod   10.42.0.2 on veth "eth0": the backend (a small threaded HTTP responder) on :8080
# Each case runs with keep-alive connections and with a new connection per request (a full
# TLS handshake each over HTTPS: wrk resumes no session). The comparison is kept even: the
# ingress proxy runs its tasks on as many executor threads (SMOL_THREADS) as nginx has
# worker processes, one by default (WORKERS=N to change both).
# Needs root, wrk and nginx (installed with apt if missing); never touches the host's network.
#   bench/ingress.sh [SECONDS] [CONNECTIONS]     (defaults 10 32)
# Last, an open-loop case: new HTTPS connections at a fixed RATE a second (default 1500, below
# what either proxy can take here), one request each, with h2load. In wrk's closed loop the
# proxy that answers more requests/s gets more handshakes to do from a client that shares its
# two cores; at one rate for both, the latency percentiles are the proxies' own.
# The server is only the proxy's source of objects (not on the measured path): SKIFF=PATH
# picks an already built `skiff` instead of building the release one. PROXY=PATH runs
# another build of the ingress_proxy example (to compare two versions back to back), and
# BACKEND=PATH another build of the service_sync example (the backend).
# PIN=1 gives the proxies (the ingress proxy and nginx) CPU 1 to themselves and runs wrk and
# the backend on CPU 0: without it, in a closed loop on two cores, the proxy that serves more
# requests/s also makes wrk busier (with a TLS handshake per request, wrk's own signature
# checks) and wrk's latency figures count that wait as the proxy's.
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 1

SECONDS_RUN=${1:-10}
CONNS=${2:-32}
WORKERS=${WORKERS:-${NGINX_WORKERS:-1}}
[ "$(id -u)" = 0 ] || { echo "ingress: run as root" >&2; exit 1; }
need wrk wrk
need nginx nginx-light
need curl curl
need h2load nghttp2-client

CLIENT_CPU=()
PROXY_CPU=()
if [ "${PIN:-0}" = 1 ]; then
    [ "$(nproc)" -ge 2 ] || { echo "ingress: PIN=1 needs two CPUs" >&2; exit 1; }
    CLIENT_CPU=(taskset -c 0)
    PROXY_CPU=(taskset -c 1)
fi

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -z "${PROXY:-}" ]; then
    cargo build -q --release -p skiff-agent --example ingress_proxy
    PROXY="$TARGET/release/examples/ingress_proxy"
fi
if [ -z "${BACKEND:-}" ]; then
    cargo build -q --release -p skiff-agent --example service_sync
    BACKEND="$TARGET/release/examples/service_sync"
fi
if [ -z "${SKIFF:-}" ]; then
    cargo build -q --release -p skiff-control --bin skiff
    SKIFF="$TARGET/release/skiff"
fi

NODE=skiff-bench-ing-node-$$
POD=skiff-bench-ing-pod-$$
TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip netns del "$NODE" 2>/dev/null || true
    ip netns del "$POD" 2>/dev/null || true
    rm -rf "$TMP" "/etc/netns/$NODE"
}
trap cleanup EXIT

ip netns add "$NODE"
ip netns add "$POD"
ip -n "$NODE" link set lo up
ip -n "$POD" link set lo up
ip -n "$NODE" link add pod0 type veth peer name eth0 netns "$POD"
ip -n "$NODE" addr add 10.42.0.1/24 dev pod0
ip -n "$POD" addr add 10.42.0.2/24 dev eth0
ip -n "$NODE" link set pod0 up
ip -n "$POD" link set eth0 up
ip -n "$POD" route add default via 10.42.0.1

# The name the HTTPS cases ask for (wrk and curl send it as SNI): `ip netns exec` mounts
# /etc/netns/NAME/hosts over /etc/hosts for the commands it runs.
TLS_HOST=bench.example
mkdir -p "/etc/netns/$NODE"
echo "10.42.0.1 $TLS_HOST" >"/etc/netns/$NODE/hosts"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=$TLS_HOST" -addext "subjectAltName=DNS:$TLS_HOST" \
    -keyout "$TMP/tls.key" -out "$TMP/tls.crt" 2>/dev/null

in_node() { ip netns exec "$NODE" "$@"; }
wait_in_node() {  # wait_in_node HOST PORT
    for _ in $(seq 1 300); do
        in_node bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "ingress: nothing listens on $1:$2" >&2
    return 1
}

ip netns exec "$POD" "${CLIENT_CPU[@]}" "$BACKEND" serve 10.42.0.2:8080 &
PIDS+=($!)
wait_in_node 10.42.0.2 8080

mkdir -p "$TMP/server"
# Started with `ip netns exec` itself (not a shell function), which execs its command: $! is
# the process's own pid, to stop it and to read its memory.
ip netns exec "$NODE" env SKIFF_LOG=warn "$SKIFF" server --data-dir "$TMP/server" --listen 127.0.0.1:6443 \
    --disable-agent &
PIDS+=($!)
wait_in_node 127.0.0.1 6443
KC="$TMP/server/admin.kubeconfig"
for _ in $(seq 1 100); do [ -s "$KC" ] && break; sleep 0.1; done
for _ in $(seq 1 100); do
    in_node kubectl --kubeconfig "$KC" create secret tls bench-tls --cert "$TMP/tls.crt" \
        --key "$TMP/tls.key" >/dev/null 2>&1 && break
    sleep 0.2
done
for _ in $(seq 1 100); do
    in_node kubectl --kubeconfig "$KC" apply -f - >/dev/null 2>&1 <<'EOF' && break
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: web, namespace: default}
subsets:
- addresses: [{ip: 10.42.0.2}]
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: default}
spec:
  ingressClassName: skiff
  tls:
  - {hosts: [bench.example], secretName: bench-tls}
  rules:
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
EOF
    sleep 0.2
done

ip netns exec "$NODE" "${PROXY_CPU[@]}" env SMOL_THREADS="$WORKERS" "$PROXY" "$KC" 10.42.0.1:8081 10.42.0.1:8443 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")

mkdir -p "$TMP/nginx"
cat >"$TMP/nginx.conf" <<EOF
daemon off;
user root;
worker_processes $WORKERS;
pid $TMP/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    upstream backend {
        server 10.42.0.2:8080;
        keepalive 64;
    }
    server {
        listen 10.42.0.1:8082;
        listen 10.42.0.1:8444 ssl;
        server_name $TLS_HOST;
        ssl_certificate $TMP/tls.crt;
        ssl_certificate_key $TMP/tls.key;
        # nginx 1.22 offers only up to TLS 1.2 by default; the proxy (rustls) offers 1.3.
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
            proxy_set_header X-Forwarded-Host \$host;
        }
    }
}
EOF
ip netns exec "$NODE" "${PROXY_CPU[@]}" nginx -c "$TMP/nginx.conf" -p "$TMP/nginx" &
NGINX_PID=$!
PIDS+=("$NGINX_PID")

# Both proxies answer 200 before anything is measured (the ingress route comes by watch).
for port in 8081 8082; do
    for _ in $(seq 1 300); do
        [ "$(in_node curl -s -o /dev/null -w '%{http_code}' "http://10.42.0.1:$port/")" = 200 ] && break
        sleep 0.1
    done
    [ "$(in_node curl -s -o /dev/null -w '%{http_code}' "http://10.42.0.1:$port/")" = 200 ] ||
        { echo "ingress: the proxy on :$port does not answer 200" >&2; exit 1; }
done
# HTTPS: the proxy has its certificate once the Secret's watch event came.
for port in 8443 8444; do
    for _ in $(seq 1 300); do
        [ "$(in_node curl -sk -o /dev/null -w '%{http_code}' "https://$TLS_HOST:$port/")" = 200 ] && break
        sleep 0.1
    done
    [ "$(in_node curl -sk -o /dev/null -w '%{http_code}' "https://$TLS_HOST:$port/")" = 200 ] ||
        { echo "ingress: the proxy on :$port does not answer 200 over HTTPS" >&2; exit 1; }
done

machine
echo "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "nginx: $(nginx -v 2>&1 | sed 's/.*: //'), $WORKERS worker process(es); ingress proxy: $WORKERS executor thread(s)"
tls_of() {  # tls_of PORT: the protocol and cipher a TLS client gets
    in_node openssl s_client -connect "$TLS_HOST:$1" -servername "$TLS_HOST" </dev/null 2>/dev/null |
        awk '/^New, /{print $2, $5}' | head -1
}
echo "TLS (ECDSA P-256 certificate): ingress proxy $(tls_of 8443), nginx $(tls_of 8444)"
echo "wrk: 2 threads, $CONNS connections, ${SECONDS_RUN}s per case; the machine may be shared"
[ "${PIN:-0}" != 1 ] || echo "pinned: the proxies on CPU 1, wrk and the backend on CPU 0"

# to_us 1.23ms|850.00us|1.02s -> microseconds
to_us() { awk -v v="$1" 'BEGIN{n=v+0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n*1000; else if (v ~ /s$/) print n*1000000; else print n}'; }

# Clock ticks of CPU (user and system) the processes PIDS used so far, summed.
ticks() {
    local t=0 p
    for p in "$@"; do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)
NGINX_ALL="$NGINX_PID $(pgrep -d ' ' -P "$NGINX_PID" || true)"

declare -A RPS P99
# run KEY LABEL URL [wrk args...]: prints requests/s, the latency percentiles and, through a
# proxy, its CPU time per request (all its processes and threads).
run() {
    local key=$1 label=$2 url=$3
    shift 3
    local out rps p50 p99 errors pids=() t0 cpu=""
    # shellcheck disable=SC2206 # NGINX_ALL is a list of pids
    case $key in
        ingress-*) pids=("$PROXY_PID") ;;
        nginx-*) pids=($NGINX_ALL) ;;
    esac
    t0=$(ticks "${pids[@]}")
    out=$(in_node "${CLIENT_CPU[@]}" wrk -t2 -c"$CONNS" -d"${SECONDS_RUN}s" --latency "$@" "$url")
    rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
    p50=$(awk '$1=="50%"{print $2}' <<<"$out")
    p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    errors=$(awk '/Socket errors|Non-2xx/{printf "%s ", $0}' <<<"$out")
    RPS[$key]=$rps
    P99[$key]=$(to_us "$p99")
    if [ "${#pids[@]}" -gt 0 ]; then
        cpu=$(awk -v t="$(($(ticks "${pids[@]}") - t0))" -v hz="$HZ" -v r="$rps" -v s="$SECONDS_RUN" \
            'BEGIN{printf "CPU %5.1f us/req", t / hz * 1e6 / (r * s)}')
    fi
    printf '  %-32s %10s req/s   p50 %8s   p99 %8s  %s%s\n' "$label" "$rps" "$p50" "$p99" "$cpu" "$errors"
}

ratio() {  # ratio KEY: the ingress proxy against nginx
    awk -v a="${RPS[ingress-$1]}" -v b="${RPS[nginx-$1]}" -v pa="${P99[ingress-$1]}" -v pb="${P99[nginx-$1]}" \
        'BEGIN{printf "  ingress/nginx: requests/s x%.2f, p99 x%.2f (below 1 is better for p99)\n", a/b, pa/pb}'
}

echo "keep-alive connections:"
run direct-ka "direct to the backend" http://10.42.0.2:8080/
run ingress-ka "through the ingress proxy" http://10.42.0.1:8081/
run nginx-ka "through nginx" http://10.42.0.1:8082/
ratio ka
echo "a new connection per request:"
run direct-new "direct to the backend" http://10.42.0.2:8080/ -H "Connection: close"
run ingress-new "through the ingress proxy" http://10.42.0.1:8081/ -H "Connection: close"
run nginx-new "through nginx" http://10.42.0.1:8082/ -H "Connection: close"
ratio new
echo "HTTPS, keep-alive connections:"
run ingress-tls-ka "through the ingress proxy" "https://$TLS_HOST:8443/"
run nginx-tls-ka "through nginx" "https://$TLS_HOST:8444/"
ratio tls-ka
echo "HTTPS, a new connection (and handshake) per request:"
run ingress-tls-new "through the ingress proxy" "https://$TLS_HOST:8443/" -H "Connection: close"
run nginx-tls-new "through nginx" "https://$TLS_HOST:8444/" -H "Connection: close"
ratio tls-new
RATE=${RATE:-1500}
# open_loop LABEL URL: RATE new connections a second for SECONDS_RUN, one request each; prints
# the percentiles of the time from each request's start (after its TLS handshake) to its
# answer's end, from h2load's per-request log.
open_loop() {
    local label=$1 url=$2 log n
    log=$(mktemp -p "$TMP")
    n=$((RATE * SECONDS_RUN))
    in_node "${CLIENT_CPU[@]}" h2load --h1 -t2 -c"$n" -n"$n" -r$((RATE / 100)) --rate-period=10ms \
        --log-file="$log" "$url" >"$log.out" 2>&1 ||
        { cat "$log.out" >&2; echo "ingress: h2load failed" >&2; exit 1; }
    sort -n -k3,3 "$log" | awk -v label="$label" '
        { t[NR] = $3; if ($2 != 200) bad++ }
        END {
            if (NR == 0) { printf "  %-32s no requests answered\n", label; exit }
            printf "  %-32s %6d requests   p50 %6.2fms   p90 %6.2fms   p99 %6.2fms   max %6.2fms%s\n",
                label, NR, t[int(NR*0.5)+1]/1000, t[int(NR*0.9)+1]/1000, t[int(NR*0.99)+1]/1000,
                t[NR]/1000, bad ? sprintf("   %d not 200", bad) : ""
        }'
}
echo "HTTPS, a new connection per request at $RATE connections/s (h2load, open loop):"
open_loop "through the ingress proxy" "https://$TLS_HOST:8443/"
open_loop "through nginx" "https://$TLS_HOST:8444/"
echo "load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"

# kB of VmRSS (now) and VmHWM (peak) of PIDs, summed.
mem() {
    local rss=0 hwm=0 p
    for p in "$@"; do
        rss=$((rss + $(awk '/^VmRSS/{print $2}' "/proc/$p/status")))
        hwm=$((hwm + $(awk '/^VmHWM/{print $2}' "/proc/$p/status")))
    done
    echo "$((rss / 1024)) MiB resident after the runs, peak $((hwm / 1024)) MiB"
}
echo "memory:"
echo "  ingress proxy (1 process):  $(mem "$PROXY_PID")"
# shellcheck disable=SC2086 # a list of pids
echo "  nginx (master + workers):   $(mem $NGINX_ALL)"
