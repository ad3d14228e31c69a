#!/usr/bin/env bash
# Images shared inside a site (docs/design/site-images.md): 5 real agents, each in its own
# network namespace on one LAN bridge with the server, start pods of one image of about
# 50 MB (a layer of random data beside busybox) at the same moment. The registry (apt
# docker-registry, TLS) sits behind the site's uplink: a link from the LAN's router (the
# server's namespace) to the registry's namespace, shaped to UPLINK_MBIT (tc tbf) in the
# direction of the site. Printed for each round: the bytes of layer blobs the registry
# served and the time from creating the pods to all Running; first with every node pulling
# for itself, then with the same nodes in one zone with --share-images (fresh data dirs
# each round).
# usage: bench/site-images.sh [MB]   (root; MB of the random layer, 50 by default)
#        REL=DIR ...           uses the skiff and skiff-agent in DIR (default:
#                              target/release, built if missing)
#        UPLINK_MBIT=N ...     the uplink's rate, 50 Mbit/s by default; 0: not shaped
# shellcheck source=bench/lib.sh disable=SC1091
source "$(dirname "$0")/lib.sh"
MB=${1:-50}
NODES=5
NET=172.31.219
UPNET=172.31.220
UPLINK_MBIT=${UPLINK_MBIT:-50}
ZONE=bench-site
need kubectl kubectl
need docker-registry docker-registry
need openssl openssl

machine
if [ -z "${REL:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p skiff-control -p skiff-agent)
fi
REL=${REL:-"$ROOT/target/release"}
SKIFF="$REL/skiff"
echo "skiff $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo dev), build: $REL"
WORK=$(mktemp -d /tmp/skiff-site.XXXXXX)
TAG="sib$$"
HUB="$TAG-hub"
UP="$TAG-up"
REGISTRY_PID=
SKIFF_PID=
AGENT_PIDS=()

ns_of() { echo "$TAG-n$1"; }  # ns_of I
# Runs a command in a network namespace only (the host's mounts and cgroups stay visible,
# unlike `ip netns exec`); nsenter execs it, so `nsenter ... &` gives the command's PID.
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

stop_agents() {
    local pid
    for pid in "${AGENT_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${AGENT_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    AGENT_PIDS=()
    for procs in /sys/fs/cgroup/skiff-bench-site-*/*/*/cgroup.procs; do
        if [ -f "$procs" ]; then xargs -r kill -9 <"$procs" 2>/dev/null || true; fi
    done
    awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    for cg in /sys/fs/cgroup/skiff-bench-site-*; do
        if [ -d "$cg" ]; then find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
    done
}
stop_server() {
    if [ -n "$SKIFF_PID" ]; then
        kill "$SKIFF_PID" 2>/dev/null || true
        wait "$SKIFF_PID" 2>/dev/null || true
        SKIFF_PID=
    fi
}
cleanup() {
    stop_agents
    stop_server
    if [ -n "$REGISTRY_PID" ]; then
        kill "$REGISTRY_PID" 2>/dev/null || true
        wait "$REGISTRY_PID" 2>/dev/null || true
    fi
    for i in $(seq 1 "$NODES"); do ip netns del "$(ns_of "$i")" 2>/dev/null || true; done
    ip netns del "$HUB" 2>/dev/null || true
    ip netns del "$UP" 2>/dev/null || true
    rm -rf "$WORK" 2>/dev/null || true
}
trap cleanup EXIT

# The LAN: a bridge in the hub namespace (the server at .1, routing to the uplink), a node
# per namespace; the registry's namespace behind the uplink.
ip netns add "$HUB"
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" addr add "$NET.1/24" dev br0
ip -n "$HUB" link set br0 up
for i in $(seq 1 "$NODES"); do
    ns=$(ns_of "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$HUB" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "p$i" master br0 up
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add "$UPNET.0/30" via "$NET.1"
done
ip netns add "$UP"
ip -n "$UP" link set lo up
ip -n "$HUB" link add up0 type veth peer name eth0 netns "$UP"
ip -n "$HUB" addr add "$UPNET.1/30" dev up0
ip -n "$HUB" link set up0 up
ip -n "$UP" addr add "$UPNET.2/30" dev eth0
ip -n "$UP" link set eth0 up
ip -n "$UP" route add "$NET.0/24" via "$UPNET.1"
in_ns "$HUB" sysctl -qw net.ipv4.ip_forward=1
if [ "$UPLINK_MBIT" != 0 ]; then
    tc -n "$UP" qdisc add dev eth0 root tbf rate "${UPLINK_MBIT}mbit" burst 256kb latency 200ms
fi

# The registry, over TLS with a certificate for its address.
REG="$UPNET.2:5000"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj "/CN=bench-registry" -addext "subjectAltName=IP:$UPNET.2" \
    -addext "basicConstraints=critical,CA:FALSE" -addext "extendedKeyUsage=serverAuth" \
    -keyout "$WORK/registry.key" -out "$WORK/registry.crt" 2>/dev/null
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: false}}
storage: {filesystem: {rootdirectory: $WORK/registry}}
http:
  addr: $REG
  secret: bench
  tls: {certificate: $WORK/registry.crt, key: $WORK/registry.key}
EOF
nsenter --net="/run/netns/$UP" docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
REGISTRY_PID=$!
cat >"$WORK/registries.yaml" <<EOF
configs:
  "$REG":
    tls: {ca_file: $WORK/registry.crt}
EOF

# The image: busybox and a layer of MB random megabytes, pushed with the registry API.
cat >"$WORK/push.py" <<'EOF'
import hashlib, io, json, os, ssl, sys, tarfile, time, urllib.request
reg, ca, repo, mb = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def tar_of(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data, mode in files:
            info = tarfile.TarInfo(name); info.size = len(data); info.mode = mode
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
busybox = open("/bin/busybox", "rb").read()
layers = [tar_of([("bin/busybox", busybox, 0o755)]),
          tar_of([("data/random.bin", os.urandom(mb << 20), 0o644)])]
digest = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()
arch = {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]
config = json.dumps({"architecture": arch, "os": "linux",
    "config": {"Entrypoint": ["/bin/busybox"], "Cmd": ["sleep", "3600"]},
    "rootfs": {"type": "layers", "diff_ids": [digest(l) for l in layers]}}).encode()
ctx = ssl.create_default_context(cafile=ca)
for _ in range(100):
    try:
        urllib.request.urlopen(f"https://{reg}/v2/", context=ctx); break
    except Exception:
        time.sleep(0.1)
def call(method, url, data=b"", headers={}):
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    return urllib.request.urlopen(req, context=ctx)
for blob in layers + [config]:
    loc = call("POST", f"https://{reg}/v2/{repo}/blobs/uploads/").headers["Location"]
    url = loc if loc.startswith("http") else f"https://{reg}{loc}"
    call("PUT", url + ("&" if "?" in url else "?") + "digest=" + digest(blob), blob,
         {"Content-Type": "application/octet-stream"})
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(l), "size": len(l)} for l in layers]}).encode()
call("PUT", f"https://{reg}/v2/{repo}/manifests/v1", manifest,
     {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
print(sum(len(l) for l in layers))
EOF
IMAGE_BYTES=$(in_ns "$UP" python3 "$WORK/push.py" "$REG" "$WORK/registry.crt" bench/site "$MB")
echo "image: $REG/bench/site:v1, layers $IMAGE_BYTES bytes, $NODES nodes, uplink ${UPLINK_MBIT} Mbit/s (0: not shaped)"

# Bytes of layer blobs the registry served since its log had $1 lines.
served() {
    tail -n "+$(($1 + 1))" "$WORK/registry.log" \
        | { grep -oE '"GET /v2/[^"]*/blobs/sha256:[0-9a-f]+ HTTP/[0-9.]+" 200 [0-9]+' || true; } \
        | awk '{s += $NF} END {print s + 0}'
}

round() {  # round LABEL [agent flags...]
    local label=$1 i ns start end before
    shift
    rm -rf "$WORK/server" "$WORK"/agent-* "$WORK"/run-*
    nsenter --net="/run/netns/$HUB" env SKIFF_LOG=warn "$SKIFF" server --data-dir "$WORK/server" --listen "$NET.1:6443" \
        --tls-san "$NET.1" --disable-agent &
    SKIFF_PID=$!
    export KUBECONFIG="$WORK/server/admin.kubeconfig"
    for _ in $(seq 1 300); do
        [ -s "$KUBECONFIG" ] && in_ns "$HUB" bash -c "exec 3<>/dev/tcp/$NET.1/6443" 2>/dev/null && break
        sleep 0.1
    done
    local token
    token=$(in_ns "$HUB" "$SKIFF" token create --ttl 1h --kubeconfig "$KUBECONFIG")
    for i in $(seq 1 "$NODES"); do
        ns=$(ns_of "$i")
        nsenter --net="/run/netns/$ns" env SKIFF_LOG=warn "$REL/skiff-agent" --data-dir "$WORK/agent-$i" \
            --run-dir "$WORK/run-$i" --node-name "$ns" --cgroup-parent "skiff-bench-site-$i" \
            --node-ip "$NET.$((10 + i))" --disable-proxy --disable-ingress \
            --dns-upstream 127.0.0.1:9 --registries-config "$WORK/registries.yaml" \
            --server "https://$NET.1:6443" --token "$token" "$@" &
        AGENT_PIDS+=("$!")
    done
    for _ in $(seq 1 300); do
        [ "$(in_ns "$HUB" kubectl get nodes --no-headers 2>/dev/null | grep -c ' Ready')" = "$NODES" ] && break
        sleep 0.2
    done
    for i in $(seq 1 "$NODES"); do
        cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: site-$i}
spec:
  nodeName: $(ns_of "$i")
  terminationGracePeriodSeconds: 1
  containers: [{name: main, image: "$REG/bench/site:v1", imagePullPolicy: IfNotPresent}]
EOF
    done >"$WORK/pods.yaml"
    before=$(wc -l <"$WORK/registry.log")
    start=$(date +%s.%N)
    in_ns "$HUB" kubectl apply -f "$WORK/pods.yaml" >/dev/null
    while [ "$(in_ns "$HUB" kubectl get pods --no-headers 2>/dev/null | grep -c ' Running ')" != "$NODES" ]; do
        if awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {exit !(n - s > 600)}'; then break; fi
        sleep 0.1
    done
    end=$(date +%s.%N)
    local running bytes
    running=$(in_ns "$HUB" kubectl get pods --no-headers 2>/dev/null | grep -c ' Running ' || true)
    bytes=$(served "$before")
    awk -v l="$label" -v b="$bytes" -v i="$IMAGE_BYTES" -v s="$start" -v e="$end" -v r="$running" -v n="$NODES" \
        'BEGIN {printf "%s: registry served %d bytes of layers (%.2f copies of the image); %d/%d Running after %.1f s\n", l, b, b / i, r, n, e - s}'
    stop_agents
    stop_server
}

round "each node pulls for itself"
LABEL="topology.kubernetes.io/zone=$ZONE"
round "one site, --share-images" --share-images --node-label "$LABEL"
