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
#                            every hash required; then /opt/gpuenv moves to $LAYER/opt/gpuenv, every
#                            time ENV_EPOCH, for the final stage's `COPY --from=install $LAYER/ /`
set -euo pipefail

BUILD_DIR=${1:?usage: install-env.sh BUILD_DIR}
PREFIX=/opt/gpuenv
ENV_DIR=$PREFIX/env
LOCK_DIR=$BUILD_DIR/lock
WHEELS=$BUILD_DIR/wheels
TOOLS=$BUILD_DIR/tools
CA=$BUILD_DIR/ca/ca-bundle.crt
SCRATCH=$(mktemp -d)
# The final stage copies this folder onto / (docker/Dockerfile): it holds opt/gpuenv, every entry
# with the time ENV_EPOCH (the lock's date, gpuenv/images/plan.py: build_args).
LAYER=/opt/gpuenv-layer
EPOCH=${ENV_EPOCH:-0}
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
    # py_compile writes checked-hash .pyc files (PEP 552) when SOURCE_DATE_EPOCH is set, for
    # ensurepip's pip and uv's --compile-bytecode alike: their bytes then hold the source's hash,
    # not the install's time, and Python still checks them against the source at import.
    export SOURCE_DATE_EPOCH=$EPOCH
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
    date_uv_cache_info
}

# uv writes, for each wheel it installs from a local file, <dist-info>/uv_cache.json: the file's
# change time (its key for a later `uv pip install`), which is the build's. Dated ENV_EPOCH
# instead, with the RECORD row that vouches for it rewritten to match (as an installer writes it).
date_uv_cache_info() {
    "$ENV_DIR/bin/python" - "$ENV_DIR" "$EPOCH" <<'PY'
import base64, hashlib, json, pathlib, sys

env, epoch = pathlib.Path(sys.argv[1]), int(sys.argv[2])
for cache in sorted(env.glob("lib/python*/site-packages/*.dist-info/uv_cache.json")):
    info = json.loads(cache.read_text())
    info["timestamp"] = {"secs_since_epoch": epoch, "nanos_since_epoch": 0}
    data = json.dumps(info, separators=(",", ":")).encode()
    cache.write_bytes(data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    name = f"{cache.parent.name}/uv_cache.json"
    record = cache.parent / "RECORD"
    rows = [
        f"{name},sha256={digest},{len(data)}" if row.split(",")[0] == name else row
        for row in record.read_text().splitlines()
    ]
    record.write_text("\n".join(rows) + "\n")
PY
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
# The environment layer then depends on the files alone: the final stage copies $LAYER onto /,
# and a copy keeps the times of what it copies, opt/ and opt/gpuenv/ included (a COPY into
# /opt/gpuenv/ would stamp that folder, and /opt, with the build's time). Measured on Docker
# Engine 20.10.24, BuildKit and the classic builder: the same layer from two --no-cache builds.
mkdir -p "$LAYER/opt"
mv "$PREFIX" "$LAYER/opt/"
find "$LAYER" -exec touch -h -d "@$EPOCH" {} +
say "every file of the environment dated @$EPOCH, for the final stage in $LAYER"
