#!/usr/bin/env bash
# Install the Debian packages the fleet tests start as real servers on loopback: an SSH server
# (openssh-server), a one-node Slurm cluster (slurm-wlm: slurmctld + slurmd + the client
# commands, and munge for its authentication), a headless browser (chromium) that renders
# the fleet report, and a registry (docker-registry) that SSH hosts pull an image from by digest;
# iproute2 (ip, ss: the tests check that every server listens on 127.0.0.1 only) and iptables
# (a host that drops SYNs, inside a network namespace the test makes). Idempotent: packages
# already present are not reinstalled. Nothing is started or enabled here: each test starts its
# own server on 127.0.0.1 (slurm.conf: CommunicationParameters=NoCtldInAddrAny,NoInAddrAny) and stops it.
# Run as root; used by CI (.ci/run) and by developers who want the fleet tests to run, not skip.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "install-test-servers: run as root (it installs Debian packages)" >&2
    exit 1
fi

need=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)

if [ ${#need[@]} -eq 0 ]; then
    echo "install-test-servers: openssh-server, slurm-wlm, munge, chromium, docker-registry, iproute2 and iptables already installed"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d: Debian's maintainer scripts must not start sshd/munge/slurm as services here;
# the tests start their own on loopback. Removed again on exit (only if we made it).
made_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
fi
trap 'if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "install-test-servers: installed ${need[*]}"
