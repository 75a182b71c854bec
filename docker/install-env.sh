#!/usr/bin/env bash
# Install the locked environment into /opt/gpuenv/env during `docker build` (stage `install`).
#
#   install-env.sh BUILD_DIR
#
# BUILD_DIR holds lock/ (the lock file), tools/ (installers the host supplied), ca/ca-bundle.crt
# (optional extra CA bundle, may be empty) and wheels/ (optional local wheelhouse, may be empty).
# Nothing is downloaded here but the lock's packages: real base images (nvidia/cuda, ubuntu) have
# no curl, wget or python3, so the host supplies every installer (gpuenv/envs/buildtools.py):
#   conda-lock.yml        -> nothing: the host installed the environment (py-rattler, every
#                            package checked against the lock's sha256) and the final stage ADDs it
#                            from env/environment.tar; BuildKit skips this stage, the classic
#                            builder runs it and this says so
#   requirements.lock.txt -> a venv on the base's python3 of the stack's X.Y, or on the
#                            standalone CPython in tools/python; tools/uv installs the lock with
#                            every hash required
set -euo pipefail

BUILD_DIR=${1:?usage: install-env.sh BUILD_DIR}
PREFIX=/opt/gpuenv
ENV_DIR=$PREFIX/env
LOCK_DIR=$BUILD_DIR/lock
WHEELS=$BUILD_DIR/wheels
TOOLS=$BUILD_DIR/tools
CA=$BUILD_DIR/ca/ca-bundle.crt
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

say() { echo "gpuenv-install: $*"; }
die() { echo "gpuenv-install: error: $*" >&2; exit 1; }

# A CA bundle for corporate proxies, for every downloader of this RUN. It lives in BUILD_DIR, which the Dockerfile removes in the
# same RUN and never copies to the final stage.
if [ -s "$CA" ]; then
    say "using the extra CA bundle for HTTPS"
    # shellcheck source=/dev/null  # docker/ca-env.sh, copied beside this script
    . "$BUILD_DIR/ca-env.sh" "$CA"
fi

find_links=()
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    say "local wheelhouse: $(find "$WHEELS" -name '*.whl' | wc -l) wheels"
    find_links=(--find-links "$WHEELS")
fi
# The host checked that the wheelhouse holds every wheel of the lock (gpuenv/envs/wheelhouse.py): ask
# no index at all (the lock's --index-url lines included); the build runs without network.
index=(--index-strategy unsafe-best-match)
if [ -f "$WHEELS/.no-index" ]; then
    say "the wheelhouse holds every wheel of the lock: no index is asked"
    index=(--no-index --offline)
fi


# The base image's python of the stack's X.Y that can make a venv, if any.
system_python() {
    local py
    for py in "python${PYTHON_VERSION}" python3; do
        if command -v "$py" >/dev/null 2>&1 \
            && [ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$PYTHON_VERSION" ] \
            && "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            command -v "$py"
            return 0
        fi
    done
    return 1
}

stack_python() {
    if [ -x "$TOOLS/python/bin/python$PYTHON_VERSION" ]; then
        # Relocatable (python-build-standalone): it lives on in the image, beside the env.
        mv "$TOOLS/python" "$PREFIX/python"
        say "Python $PYTHON_VERSION: the standalone CPython the host supplied ($PREFIX/python)" >&2
        echo "$PREFIX/python/bin/python$PYTHON_VERSION"
    elif system_python; then
        say "Python $PYTHON_VERSION from the base image" >&2
    else
        die "the base image has no Python $PYTHON_VERSION and the host supplied none in tools/python"
    fi
}

install_requirements_lock() {
    local lock=$LOCK_DIR/requirements.lock.txt py
    : "${PYTHON_VERSION:?}"
    [ -x "$TOOLS/uv" ] || die "tools/uv is missing from the build context (gpuenv supplies it)"
    py=$(stack_python)
    # ensurepip puts pip into the venv offline, so users can still `pip install` extras.
    "$py" -m venv "$ENV_DIR"
    # Every file must match a hash of the lock, so the order uv asks the lock's indexes in cannot
    # change what is installed; best-match lets a package come from whichever index the lock
    # found it on (uv's first-index default would stop at the framework index).
    UV_NO_CACHE=1 UV_NO_PROGRESS=1 "$TOOLS/uv" pip install --python "$ENV_DIR/bin/python" \
        --require-hashes --no-deps "${index[@]}" --compile-bytecode \
        "${find_links[@]}" -r "$lock"
    # The .pyc files stay: the non-root user cannot write them at run time, and recompiling
    # TensorFlow on every start would cost seconds.
}

mkdir -p "$PREFIX"
if [ -f "$LOCK_DIR/conda-lock.yml" ]; then
    say "a conda lock: the environment installed on the host comes in the final stage (env/environment.tar)"
    exit 0
elif [ -f "$LOCK_DIR/requirements.lock.txt" ]; then
    install_requirements_lock
else
    die "no conda-lock.yml or requirements.lock.txt in the lock directory"
fi
# The environment must belong to root and be readable by the non-root user of the final stage.
chmod -R a+rX "$PREFIX"
say "environment installed in $ENV_DIR ($(du -sh "$ENV_DIR" | cut -f1))"
