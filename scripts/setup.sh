#!/usr/bin/env bash
# Installs what skiff's build, demo and tests need on a fresh Debian 12 machine (as root).
# Idempotent: what is already present is not installed again.
#
#   scripts/setup.sh            Debian packages, and a check of the Rust toolchain
#   scripts/setup.sh --python   also the Python kubernetes client and pytest, in a virtual
#                               environment of skiff's own (Debian's python3 refuses a global
#                               pip install: PEP 668), and chromium and libnss3-tools for
#                               the dashboard tests;
#                               prints its python's path last
set -euo pipefail
cd "$(dirname "$0")/.."

with_python=
for arg in "$@"; do
    case "$arg" in
        --python) with_python=1 ;;
        *) echo "setup: unknown argument $arg (usage: scripts/setup.sh [--python])" >&2; exit 2 ;;
    esac
done

have() { command -v "$1" >/dev/null 2>&1; }

# The Rust toolchain: the workspace's rust-version or newer, from rustup.
need_rust=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
if ! have cargo || ! have rustc; then
    cat >&2 <<EOF
setup: skiff needs a Rust toolchain (rustc and cargo $need_rust or newer), and none is on PATH.
setup: install it with rustup (see rustup.rs), as root:
setup:     curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
setup:     . "\$HOME/.cargo/env"
setup: then run this command again.
EOF
    exit 1
fi
have_rust=$(rustc --version | awk '{print $2}')
if ! version_ge "${have_rust%%-*}" "$need_rust"; then
    cat >&2 <<EOF
setup: skiff needs Rust $need_rust or newer; this machine has rustc $have_rust.
setup: update it with rustup:   rustup update stable && rustup default stable
setup: then run this command again.
EOF
    exit 1
fi

need_apt=()
have iptables || need_apt+=(iptables)
have busybox || [ -x /bin/busybox ] || need_apt+=(busybox-static)
have kubectl || need_apt+=(kubernetes-client)
have ip || need_apt+=(iproute2)
have python3 || need_apt+=(python3)
have nsenter || need_apt+=(util-linux)
[ -x /usr/bin/docker-registry ] || need_apt+=(docker-registry)
# The ops tests: shellcheck on the scripts, systemd-analyze verify on the units, qemu for the
# aarch64 smoke test of the cross builds.
have shellcheck || need_apt+=(shellcheck)
have systemd-analyze || need_apt+=(systemd)
have qemu-aarch64-static || need_apt+=(qemu-user-static)
have setpriv || need_apt+=(util-linux)
# scripts/fuzz.sh: libFuzzer, which the fuzz targets link, is built from C++.
have g++ || need_apt+=(g++)
if [ -n "$with_python" ]; then
    /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
    # The dashboard's tests drive a real headless browser, and give it a client certificate
    # in an NSS database of its own (certutil, pk12util; the PKCS#12 file from openssl).
    [ -x /usr/bin/chromium ] || need_apt+=(chromium)
    have certutil && have pk12util || need_apt+=(libnss3-tools)
    have openssl || need_apt+=(openssl)
    # The etcd datastore's tests run real etcd members.
    have etcd || need_apt+=(etcd-server)
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ -n "$with_python" ]; then
    # Outside the work tree, so a fresh clone on the same machine reuses it.
    venv=${SKIFF_PYENV:-${XDG_CACHE_HOME:-$HOME/.cache}/skiff/pyenv}
    if ! "$venv/bin/python" -c 'import kubernetes, pytest, kopf' >/dev/null 2>&1; then
        echo "setup: installing the Python kubernetes client, kopf and pytest into $venv" >&2
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        # Debian's own python3: the one every Debian 12 has.
        /usr/bin/python3 -m venv "$venv"
        # kopf: the operator framework the custom resource tests run a controller with.
        "$venv/bin/python" -m pip install -q --disable-pip-version-check kubernetes pytest kopf >&2
    fi
    echo "$venv/bin/python"
fi
