#!/usr/bin/env bash
# Install Debian's Docker engine (docker.io) and debootstrap, start dockerd in the background and
# wait until its socket answers. Idempotent: a running engine is left alone, installed packages are
# not reinstalled. Used by CI (.ci/run) and by the README set-up on a fresh server.
#
#   scripts/install-docker.sh [--with-test-servers]
#
# --with-test-servers also installs the Debian packages the tests start as servers on loopback
# (scripts/install-test-servers.sh): a development or CI machine, not a GPU server.
#
# Why these dockerd flags: CI and sandbox machines often run inside a container or micro-VM where
# overlayfs-on-overlayfs and iptables are not available. GPUENV_DOCKERD_FLAGS overrides them on a
# real server (set it to "" to use the defaults).
set -euo pipefail

if [ "${1:-}" = "--with-test-servers" ]; then
    bash "$(dirname "$0")/install-test-servers.sh"
elif [ -n "${1:-}" ]; then
    echo "install-docker: unknown option $1 (the only one is --with-test-servers)" >&2
    exit 2
fi

SOCKET=/var/run/docker.sock
LOG=${GPUENV_DOCKERD_LOG:-/var/log/gpuenv-dockerd.log}
WAIT_S=${GPUENV_DOCKERD_WAIT_S:-60}

engine_answers() {
    # The Python SDK is what gpuenv uses, so ask through it when it is importable; otherwise curl.
    if [ -S "$SOCKET" ]; then
        curl -fsS --unix-socket "$SOCKET" http://localhost/_ping >/dev/null 2>&1
    else
        return 1
    fi
}

if engine_answers; then
    echo "install-docker: engine already answering on $SOCKET"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-docker: run as root (it installs packages and starts dockerd)" >&2
    exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

pick_flags() {
    if [ -n "${GPUENV_DOCKERD_FLAGS+set}" ]; then
        echo "$GPUENV_DOCKERD_FLAGS"
        return
    fi
    local flags=""
    # overlay2 needs a filesystem that supports it under /var/lib/docker; fall back to vfs.
    local fstype
    fstype=$(stat -f -c %T /var/lib 2>/dev/null || echo unknown)
    if [ "$fstype" = "overlayfs" ] || ! grep -qw overlay /proc/filesystems 2>/dev/null; then
        flags+=" --storage-driver=vfs"
    fi
    # Without a working iptables (no netfilter modules in the sandbox), dockerd refuses to start.
    if ! iptables -L >/dev/null 2>&1; then
        flags+=" --iptables=false --ip6tables=false"
    fi
    echo "$flags"
}

if ! pgrep -x dockerd >/dev/null 2>&1; then
    flags=$(pick_flags)
    echo "install-docker: starting dockerd$flags (log: $LOG)"
    # shellcheck disable=SC2086  # word splitting of the flag list is intended
    nohup dockerd $flags >"$LOG" 2>&1 &
fi

for _ in $(seq 1 "$WAIT_S"); do
    if engine_answers; then
        echo "install-docker: engine ready on $SOCKET"
        exit 0
    fi
    sleep 1
done
echo "install-docker: dockerd did not answer on $SOCKET within ${WAIT_S}s; last log lines:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
