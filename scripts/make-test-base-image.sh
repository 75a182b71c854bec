#!/usr/bin/env bash
# Build the small local base image the Docker tests use instead of nvidia/cuda (no registry is
# reachable from CI): a debootstrapped Debian bookworm with Python 3.11 and CA certificates,
# imported into Docker under a fixed name. Reused when an image of that name already exists.
#
#   scripts/make-test-base-image.sh [IMAGE_NAME]     (default: gpuenv-test-base:bookworm)
set -euo pipefail

NAME=${1:-${GPUENV_TEST_BASE_IMAGE:-gpuenv-test-base:bookworm}}
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
trap 'rm -rf "$ROOT"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
    echo "make-test-base-image: debootstrap failed; last lines of $ROOT.log:" >&2
    tail -n 20 "$ROOT.log" >&2
    exit 1
}
rm -f "$ROOT.log"
# apt lists and caches are not needed in a base image; keep it small.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb
tar -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$NAME" >/dev/null
echo "make-test-base-image: built $NAME"
