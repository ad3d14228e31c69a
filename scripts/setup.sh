#!/usr/bin/env bash
# Installs what skiff's build, demo and tests need on a fresh Debian 12 machine (as root).
# Idempotent: a package already present is not installed again.
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have iptables || need_apt+=(iptables)
have busybox || [ -x /bin/busybox ] || need_apt+=(busybox-static)
have kubectl || need_apt+=(kubernetes-client)
have ip || need_apt+=(iproute2)
[ -x /usr/bin/docker-registry ] || need_apt+=(docker-registry)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
# The ops tests: shellcheck on the scripts, systemd-analyze verify on the units, qemu for the
# aarch64 smoke test of the cross builds.
have shellcheck || need_apt+=(shellcheck)
have systemd-analyze || need_apt+=(systemd)
have qemu-aarch64-static || need_apt+=(qemu-user-static)
have setpriv || need_apt+=(util-linux)
if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! python3 -c 'import kubernetes, pytest' >/dev/null 2>&1; then
    echo "setup: installing the Python kubernetes client and pytest"
    python3 -m pip install -q kubernetes pytest
fi
