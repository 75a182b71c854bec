#!/usr/bin/env bash
# The README's set-up, on a fresh Debian/Ubuntu machine, as root. Idempotent: each step reuses what
# is already there, so a second run takes seconds.
#
#   scripts/setup.sh [--with-test-servers]
#
#   docker     Debian's Docker engine and debootstrap (scripts/install-docker.sh; a running engine
#              is left alone). --with-test-servers adds the servers the tests start on 127.0.0.1.
#   images     the two local base images (scripts/make-test-base-image.sh): gpuenv-test-base:bookworm
#              (Debian with Python 3.11: the quickstart's base, and the tests') and its --bare twin.
#              No registry is needed: they are debootstrapped from Debian's mirror.
#   venv       .venv with exactly requirements/dev.lock.txt (gpuenv's dependencies and dev tools, the
#              CPU builds of PyTorch and TensorFlow for the tests and `invoke validate --local`), every
#              file checked against the lock's sha256 (scripts/install_lock.py), then gpuenv itself,
#              editable. scripts/relock_own.py makes the lock.
#   testtools  what the tests' local conda channel is built with (tests/condachannel/build.py): a C
#              compiler (Debian gcc, libc6-dev) and pip's wheel (python3-pip-whl); then it writes
#              .venv/gpuenv-test-tools, so that the tests fail, not skip, when either goes missing.
#   wheelhouse wheelhouse/: every wheel of the quickstart's lock (envs/locks/torch2.13.0-cpu-py3.11,
#              committed), so the quickstart's build asks no index and needs no network.
#
# GPUENV_SETUP_STEPS="images wheelhouse" runs only those steps (tests, or a machine already set up).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

STEPS=${GPUENV_SETUP_STEPS:-docker images venv testtools wheelhouse}
QUICKSTART_LOCK=envs/locks/torch2.13.0-cpu-py3.11/requirements.lock.txt
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
if [ -n "${1:-}" ] && [ "$1" != "--with-test-servers" ]; then
    echo "setup: unknown option $1 (the only one is --with-test-servers)" >&2
    exit 2
fi
wants() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
started=$SECONDS
say() { echo "setup [$((SECONDS - started))s]: $*"; }

if wants docker; then
    say "Docker engine (Debian docker.io) and debootstrap"
    bash scripts/install-docker.sh ${1:+"$1"}
fi
if wants images; then
    say "local base images (debootstrapped Debian, cached by name)"
    bash scripts/make-test-base-image.sh          # with python3: the quickstart's base
    bash scripts/make-test-base-image.sh --bare   # no python3, curl or wget, like nvidia/cuda
fi
if wants venv; then
    say ".venv: requirements/dev.lock.txt (hashed), then gpuenv (editable)"
    python3 -m venv .venv
    python3 scripts/install_lock.py --python .venv/bin/python --lock requirements/dev.lock.txt
    # the lock holds the build backend: nothing is fetched to build gpuenv, nothing unlocked comes in
    .venv/bin/pip install -q --no-deps --no-build-isolation -e .
fi
if wants testtools; then
    say "the test channel's tools: a C compiler and pip's wheel"
    python=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )
    # the tests' own check (tests/condachannel/build.py: standin_problem): one line, exit 1 if not
    if ! "$python" tests/condachannel/build.py --check 2>/dev/null || [ ! -e /usr/include/stdio.h ]; then
        need=()
        command -v cc >/dev/null 2>&1 || need+=(gcc)
        [ -e /usr/include/stdio.h ] || need+=(libc6-dev)
        ls /usr/share/python-wheels/pip-*.whl >/dev/null 2>&1 || need+=(python3-pip-whl)
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup: step testtools needs root to install ${need[*]} (Debian packages)" >&2
            exit 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
        "$python" tests/condachannel/build.py --check
    fi
    mkdir -p .venv
    echo "scripts/setup.sh (step testtools) installed the conda test channel's C compiler and pip wheel" \
        > .venv/gpuenv-test-tools
fi
if wants wheelhouse; then
    say "wheelhouse/: the wheels of $QUICKSTART_LOCK (Python 3.11)"
    python=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )
    download() {
        "$python" -m pip download -q --no-deps --require-hashes --only-binary :all: --python-version 3.11 \
            --dest wheelhouse -r "$QUICKSTART_LOCK" "$@"
    }
    # pip's own index and find-links first (a mirror, or a folder holding the CPU torch wheel); the
    # CPU torch wheel is not on PyPI, so then PyTorch's CPU index.
    download 2>/dev/null || { say "not all found through pip's configuration: adding $TORCH_CPU_INDEX"; download --extra-index-url "$TORCH_CPU_INDEX"; }
fi
say "done"
