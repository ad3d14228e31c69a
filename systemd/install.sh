#!/usr/bin/env bash
# Installs skiff from release binaries (cross/build.sh's dist/) and the systemd units beside
# this script. No network is needed.
#
#   install.sh server [--listen ADDR:PORT] [--tls-san NAME]... [--no-pods]
#   install.sh agent --server URL --token TOKEN [--node-name NAME] [--node-label K=V]...
#   install.sh upgrade                  replace the installed binaries, restart the units
#   install.sh uninstall [--keep-data]  stop, remove binaries, units, config and state
#
# Common options:
#   --from DIR   the binaries skiff-<target>, skiff-agent-<target> and SHA256SUMS
#                (default: ../dist next to this script, else this script's directory)
#   --root DIR   work on a mounted root filesystem (a board's SD card) instead of this
#                machine: nothing is started, units are enabled by their wants symlink
#   --arch ARCH  the board's architecture (default: this machine's, or with --root the
#                root filesystem's): x86_64, aarch64 or armv7
#
# The server and agent read /etc/skiff/server.toml and /etc/skiff/agent.toml; their state
# is in /var/lib/skiff. Run as root.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN_DIR=/usr/local/bin
UNIT_DIR=/etc/systemd/system
CONF_DIR=/etc/skiff
STATE_DIR=/var/lib/skiff

die() {
    echo "install.sh: $*" >&2
    exit 1
}
usage() {
    sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# ---- arguments -----------------------------------------------------------------------------
[ "$#" -gt 0 ] || {
    usage >&2
    die "missing command: server, agent, upgrade or uninstall"
}
cmd="$1"
shift
case "$cmd" in
server | agent | upgrade | uninstall) ;;
-h | --help | help)
    usage
    exit 0
    ;;
*) die "unknown command '$cmd' (use server, agent, upgrade or uninstall)" ;;
esac

root="" from="" arch="" server="" token="" node_name="" listen="" no_pods=0 keep_data=0
labels=() sans=()
need_value() {
    if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi
}
while [ "$#" -gt 0 ]; do
    case "$1" in
    --root) need_value "$@"; root="$2"; shift 2 ;;
    --from) need_value "$@"; from="$2"; shift 2 ;;
    --arch) need_value "$@"; arch="$2"; shift 2 ;;
    --server) need_value "$@"; server="$2"; shift 2 ;;
    --token) need_value "$@"; token="$2"; shift 2 ;;
    --node-name) need_value "$@"; node_name="$2"; shift 2 ;;
    --node-label) need_value "$@"; labels+=("$2"); shift 2 ;;
    --listen) need_value "$@"; listen="$2"; shift 2 ;;
    --tls-san) need_value "$@"; sans+=("$2"); shift 2 ;;
    --no-pods) no_pods=1; shift ;;
    --keep-data) keep_data=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' for '$cmd' (see install.sh --help)" ;;
    esac
done

if [ "$cmd" = agent ]; then
    [ -n "$server" ] || die "agent: missing --server URL (e.g. --server https://10.0.0.1:6443)"
    [ -n "$token" ] || die "agent: missing --token TOKEN (from 'skiff token create' on the server)"
    case "$server" in
    https://*) ;;
    *) die "agent: --server must be an https:// URL, not '$server'" ;;
    esac
fi
if [ -n "$root" ]; then
    [ -d "$root" ] || die "--root $root is not a directory"
    root="$(cd "$root" && pwd)"
    [ "$root" != / ] || root=""
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo $0 $cmd ...)"

# ---- architecture --------------------------------------------------------------------------
# The architecture of an ELF file, from its header: e_machine at byte 18.
elf_arch() {
    local machine
    machine="$(od -An -t x1 -j 18 -N 2 "$1" 2>/dev/null | tr -d ' \n')"
    case "$machine" in
    3e00) echo x86_64 ;;
    b700) echo aarch64 ;;
    2800) echo armv7 ;;
    *) echo "unknown-elf-$machine" ;;
    esac
}
if [ "$cmd" = uninstall ]; then
    arch=none
elif [ -z "$arch" ]; then
    if [ -n "$root" ]; then
        probe=""
        for f in usr/bin/env bin/env usr/bin/ls bin/ls; do
            if [ -f "$root/$f" ] && [ ! -L "$root/$f" ]; then
                probe="$root/$f"
                break
            fi
        done
        [ -n "$probe" ] || die "cannot tell the architecture of $root (no usr/bin/env): pass --arch"
        arch="$(elf_arch "$probe")"
    else
        arch="$(uname -m)"
    fi
fi
case "$arch" in
x86_64 | amd64) target=x86_64-unknown-linux-musl ;;
aarch64 | arm64) target=aarch64-unknown-linux-musl ;;
armv7 | armv7l | armv7hf | armhf) target=armv7-unknown-linux-gnueabihf ;;
none) target=none ;;
*) die "unknown architecture '$arch': skiff is built for x86_64, aarch64 and armv7" ;;
esac
if [ "$cmd" = agent ] && [ "$target" = armv7-unknown-linux-gnueabihf ]; then
    die "skiff-agent does not run on 32-bit ARM (libcontainer needs a 64-bit OS): install a 64-bit OS image, or run 'install.sh server --no-pods' there"
fi

# ---- binaries ------------------------------------------------------------------------------
if [ -z "$from" ]; then
    if [ -f "$HERE/../dist/SHA256SUMS" ]; then from="$HERE/../dist"; else from="$HERE"; fi
fi
# Checks dist/<name> against SHA256SUMS; prints its path.
checked() {
    local name="$1" sum want
    [ -f "$from/$name" ] || die "$from/$name not found (build it with cross/build.sh, or pass --from DIR)"
    [ -f "$from/SHA256SUMS" ] || die "$from/SHA256SUMS not found"
    want="$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1 }' "$from/SHA256SUMS")"
    [ -n "$want" ] || die "$name is not listed in $from/SHA256SUMS"
    sum="$(sha256sum "$from/$name" | awk '{ print $1 }')"
    [ "$sum" = "$want" ] || die "$from/$name does not match its checksum in SHA256SUMS"
    echo "$from/$name"
}
install_bin() { # name
    local src
    src="$(checked "$1-$target")"
    install -D -m 0755 "$src" "$root$BIN_DIR/$1"
    echo "installed $root$BIN_DIR/$1 ($target)"
}

# ---- systemd -------------------------------------------------------------------------------
systemd_version() {
    local lib
    if [ -z "$root" ]; then
        systemctl --version 2>/dev/null | awk 'NR == 1 { print $2 }'
        return
    fi
    for lib in "$root"/usr/lib/systemd/libsystemd-shared-*.so "$root"/lib/systemd/libsystemd-shared-*.so; do
        if [ -f "$lib" ]; then
            lib="${lib##*libsystemd-shared-}"
            echo "${lib%%[!0-9]*}"
            return
        fi
    done
}
install_unit() { # unit
    local unit="$1" v
    install -D -m 0644 "$HERE/$unit.service" "$root$UNIT_DIR/$unit.service"
    v="$(systemd_version)"
    if [ -n "$v" ] && [ "$v" -ge 254 ]; then
        install -D -m 0644 "$HERE/skiff-backoff.conf" "$root$UNIT_DIR/$unit.service.d/backoff.conf"
    fi
}
enable_unit() { # unit
    local unit="$1"
    if [ -n "$root" ]; then
        mkdir -p "$root$UNIT_DIR/multi-user.target.wants"
        ln -sfn "$UNIT_DIR/$unit.service" "$root$UNIT_DIR/multi-user.target.wants/$unit.service"
        echo "enabled $unit (starts on the board's first boot)"
    else
        systemctl daemon-reload
        # The agent may wait for its server: do not block on it.
        if [ "$unit" = skiff-agent ]; then
            systemctl enable --now --no-block "$unit.service"
        else
            systemctl enable --now "$unit.service"
        fi
        echo "started $unit (logs: journalctl -u $unit)"
    fi
}

# A TOML basic string.
toml_str() {
    local s="$1"
    s="${s//\\/\\\\}"
    s="${s//\"/\\\"}"
    printf '"%s"' "$s"
}
toml_list() {
    local out="" v
    for v in "$@"; do out="$out${out:+, }$(toml_str "$v")"; done
    printf '[%s]' "$out"
}
write_config() { # file, then lines on stdin
    local file="$root$CONF_DIR/$1" tmp
    install -d -m 0755 "$root$CONF_DIR"
    tmp="$(mktemp "$file.XXXXXX")"
    cat >"$tmp"
    chmod 0600 "$tmp"
    mv -f "$tmp" "$file"
    echo "wrote $file"
}

# ---- commands ------------------------------------------------------------------------------
do_server() {
    install_bin skiff
    if [ -f "$from/skiff-agent-$target" ]; then install_bin skiff-agent; fi
    {
        echo "# skiff server settings, written by install.sh. Keys are the flags of"
        echo "# 'skiff server --help'; flags and SKIFF_* variables override them."
        echo "data-dir = $(toml_str "$STATE_DIR/server")"
        echo "listen = $(toml_str "${listen:-0.0.0.0:6443}")"
        if [ "${#sans[@]}" -gt 0 ]; then echo "tls-san = $(toml_list "${sans[@]}")"; fi
        if [ "$no_pods" = 1 ] || [ "$target" = armv7-unknown-linux-gnueabihf ]; then
            echo "disable-agent = true"
        fi
    } | write_config server.toml
    install -d -m 0700 "$root$STATE_DIR"
    install_unit skiff-server
    if [ "$no_pods" = 1 ] || [ "$target" = armv7-unknown-linux-gnueabihf ]; then
        install -D -m 0644 "$HERE/skiff-server-hardening.conf" \
            "$root$UNIT_DIR/skiff-server.service.d/hardening.conf"
    fi
    enable_unit skiff-server
    if [ -z "$root" ]; then
        echo "admin kubeconfig: $STATE_DIR/server/admin.kubeconfig"
        echo "join a node: skiff --kubeconfig $STATE_DIR/server/admin.kubeconfig token create"
    fi
}

do_agent() {
    install_bin skiff-agent
    {
        echo "# skiff-agent settings, written by install.sh. Keys are the flags of"
        echo "# 'skiff-agent --help'; flags and SKIFF_AGENT_* variables override them."
        echo "# The token is used once, for the first join."
        echo "server = $(toml_str "$server")"
        echo "token = $(toml_str "$token")"
        echo "data-dir = $(toml_str "$STATE_DIR/agent")"
        if [ -n "$node_name" ]; then echo "node-name = $(toml_str "$node_name")"; fi
        if [ "${#labels[@]}" -gt 0 ]; then echo "node-label = $(toml_list "${labels[@]}")"; fi
    } | write_config agent.toml
    install -d -m 0700 "$root$STATE_DIR"
    install_unit skiff-agent
    enable_unit skiff-agent
}

do_upgrade() {
    local unit bin found=0
    for bin in skiff skiff-agent; do
        if [ -f "$root$BIN_DIR/$bin" ]; then
            install_bin "$bin"
            found=1
        fi
    done
    [ "$found" = 1 ] || die "nothing to upgrade: no skiff in $root$BIN_DIR"
    for unit in skiff-server skiff-agent; do
        if [ -f "$root$UNIT_DIR/$unit.service" ]; then
            install_unit "$unit"
            if [ -z "$root" ]; then
                systemctl daemon-reload
                # KillMode=process: the pods keep running; the new process re-adopts them.
                systemctl try-restart "$unit.service"
                echo "restarted $unit"
            fi
        fi
    done
}

do_uninstall() {
    local unit reset_flags=()
    [ "$keep_data" = 0 ] || reset_flags=(--keep-pod-data)
    if [ -z "$root" ]; then
        for unit in skiff-agent skiff-server; do
            if [ -f "$UNIT_DIR/$unit.service" ]; then
                systemctl disable --now "$unit.service" || true
            fi
        done
        # The units stop only the agents (KillMode=process): remove the pods' containers.
        if [ -x "$BIN_DIR/skiff-agent" ]; then
            [ ! -d "$STATE_DIR/agent" ] ||
                "$BIN_DIR/skiff-agent" --data-dir "$STATE_DIR/agent" --run-dir /run/skiff/agent \
                    reset "${reset_flags[@]}" || true
            [ ! -d "$STATE_DIR/server/agent" ] ||
                "$BIN_DIR/skiff-agent" --data-dir "$STATE_DIR/server/agent" \
                    --run-dir /run/skiff/server-agent reset "${reset_flags[@]}" || true
        fi
    fi
    for unit in skiff-agent skiff-server; do
        rm -f "$root$UNIT_DIR/multi-user.target.wants/$unit.service" "$root$UNIT_DIR/$unit.service"
        rm -rf "$root$UNIT_DIR/$unit.service.d"
    done
    rm -f "$root$BIN_DIR/skiff" "$root$BIN_DIR/skiff-agent"
    rm -f "$root$CONF_DIR/server.toml" "$root$CONF_DIR/agent.toml"
    rmdir "$root$CONF_DIR" 2>/dev/null || true
    if [ "$keep_data" = 1 ]; then
        echo "kept $root$STATE_DIR (the cluster state, credentials, images and pods' data)"
    else
        rm -rf "$root$STATE_DIR"
    fi
    [ -n "$root" ] || systemctl daemon-reload
    echo "skiff removed"
}

case "$cmd" in
server) do_server ;;
agent) do_agent ;;
upgrade) do_upgrade ;;
uninstall) do_uninstall ;;
esac
