#!/usr/bin/env bash
# Install Debian's image registry (package docker-registry, the CNCF distribution registry) for
# the team-workflow tests: tests/team starts its binary on 127.0.0.1:<free port> with a storage
# folder of its own and stops it afterwards. The packaged service (port 5000) is disabled where
# systemd runs; in CI containers policy-rc.d keeps it from starting. Idempotent. Used by .ci/run.
set -euo pipefail

if command -v docker-registry >/dev/null 2>&1; then
    echo "install-registry: $(command -v docker-registry) already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-registry: run as root (it installs a Debian package)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
echo "install-registry: installed $(command -v docker-registry)"
