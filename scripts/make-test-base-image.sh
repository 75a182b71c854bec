#!/usr/bin/env bash
# Build the small local base images the Docker tests use instead of nvidia/cuda (no registry is
# reachable from CI), imported into Docker under fixed names and reused when already present:
#
#   scripts/make-test-base-image.sh [--bare] [IMAGE_NAME]
#
#   (default)  gpuenv-test-base:bookworm       debootstrapped Debian bookworm with Python 3.11:
#              tests the path where the base image already has the stack's Python.
#   --bare     gpuenv-test-base:bookworm-bare  ca-certificates only: no python3, no curl, no wget,
#              as bare as the real nvidia/cuda and ubuntu bases (checked below).
set -euo pipefail

BARE=0
if [ "${1:-}" = "--bare" ]; then
    BARE=1
    shift
fi
if [ "$BARE" = 1 ]; then
    NAME=${1:-${GPUENV_TEST_BARE_BASE_IMAGE:-gpuenv-test-base:bookworm-bare}}
    INCLUDE=ca-certificates
else
    NAME=${1:-${GPUENV_TEST_BASE_IMAGE:-gpuenv-test-base:bookworm}}
    INCLUDE=python3,python3-venv,ca-certificates
fi
MIRROR=${GPUENV_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$NAME" >/dev/null 2>&1; then
    echo "make-test-base-image: $NAME already present, reusing it"
    exit 0
fi
command -v debootstrap >/dev/null 2>&1 || {
    echo "make-test-base-image: debootstrap is missing: run scripts/install-docker.sh (it installs it)" >&2
    exit 1
}

ROOT=$(mktemp -d /tmp/gpuenv-base.XXXXXX)
trap 'rm -rf "$ROOT" "$ROOT.log"' EXIT
debootstrap --variant=minbase --include="$INCLUDE" bookworm "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
    echo "make-test-base-image: debootstrap failed; last lines of $ROOT.log:" >&2
    tail -n 20 "$ROOT.log" >&2
    exit 1
}
if [ "$BARE" = 1 ]; then
    # A bare test base that had a downloader would hide the failures real bases cause.
    for tool in python3 curl wget; do
        if chroot "$ROOT" /bin/sh -c "command -v $tool" >/dev/null 2>&1; then
            echo "make-test-base-image: $tool is in the bare base image; it must not be" >&2
            exit 1
        fi
    done
fi
# apt lists and caches are not needed in a base image; keep it small.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb
tar -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$NAME" >/dev/null
echo "make-test-base-image: built $NAME"
