#!/usr/bin/env bash
# Install the locked environment into /opt/gpuenv/env during `docker build` (stage `install`).
#
#   install-env.sh BUILD_DIR
#
# BUILD_DIR holds lock/ (the lock file), ca/ca-bundle.crt (optional extra CA bundle, may be
# empty) and wheels/ (optional local wheelhouse, may be empty). The lock decides the installer:
#   conda-lock.yml        -> micromamba (pinned, checksum verified) creates the prefix,
#                            pip entries of the lock included
#   requirements.lock.txt -> pip (or uv) installs with --require-hashes: every byte is pinned
# Pins come from build arguments (MICROMAMBA_*, UV_*, PYTHON_VERSION) declared in the Dockerfile.
set -euo pipefail

BUILD_DIR=${1:?usage: install-env.sh BUILD_DIR}
PREFIX=/opt/gpuenv
ENV_DIR=$PREFIX/env
LOCK_DIR=$BUILD_DIR/lock
WHEELS=$BUILD_DIR/wheels
CA=$BUILD_DIR/ca/ca-bundle.crt
TOOLS=$(mktemp -d)
trap 'rm -rf "$TOOLS"' EXIT

say() { echo "gpuenv-install: $*"; }
die() { echo "gpuenv-install: error: $*" >&2; exit 1; }

# A CA bundle for corporate proxies: visible to every downloader of this RUN only. It lives in
# BUILD_DIR, which the Dockerfile removes in the same RUN and never copies to the final stage.
if [ -s "$CA" ]; then
    say "using the extra CA bundle for HTTPS"
    export SSL_CERT_FILE=$CA REQUESTS_CA_BUNDLE=$CA PIP_CERT=$CA CURL_CA_BUNDLE=$CA
fi

find_links=()
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    say "local wheelhouse: $(find "$WHEELS" -name '*.whl' | wc -l) wheels"
    find_links=(--find-links "$WHEELS")
fi

# Download URL to FILE with whatever the base image has: curl, wget, or Python.
fetch() {
    local url=$1 out=$2
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$out" "$url"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$out" "$url"
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$out"
    else
        die "no curl, wget or python3 in the base image to download $url"
    fi
}

verify() {
    local file=$1 sha=$2
    echo "$sha  $file" | sha256sum --check --status \
        || die "checksum mismatch for $(basename "$file"): expected sha256 $sha"
}

install_conda_lock() {
    : "${MICROMAMBA_VERSION:?}" "${MICROMAMBA_SHA256:?}"
    local url="https://github.com/mamba-org/micromamba-releases/releases/download/${MICROMAMBA_VERSION}/micromamba-linux-64"
    say "micromamba $MICROMAMBA_VERSION from $url"
    fetch "$url" "$TOOLS/micromamba"
    verify "$TOOLS/micromamba" "$MICROMAMBA_SHA256"
    chmod +x "$TOOLS/micromamba"
    export MAMBA_ROOT_PREFIX=$TOOLS/mamba-root
    if [ ${#find_links[@]} -gt 0 ]; then
        export PIP_FIND_LINKS=$WHEELS
    fi
    # micromamba reads conda-lock's unified lockfile (name must end in -lock.yml) for the
    # platform it runs on, conda and pip entries alike, each with its hash.
    "$TOOLS/micromamba" create --yes --prefix "$ENV_DIR" --file "$LOCK_DIR/conda-lock.yml"
    "$TOOLS/micromamba" clean --all --yes
    rm -rf "$ENV_DIR/pkgs" "$MAMBA_ROOT_PREFIX"
}

# The base image's python3 when its X.Y is the stack's Python, else a uv-managed Python.
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

fetch_uv() {
    : "${UV_WHEEL_URL:?}" "${UV_WHEEL_SHA256:?}"
    say "uv $UV_VERSION from $UV_WHEEL_URL"
    fetch "$UV_WHEEL_URL" "$TOOLS/uv.whl"
    verify "$TOOLS/uv.whl" "$UV_WHEEL_SHA256"
    # A wheel is a zip; the binary sits under uv-<version>.data/scripts/.
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$TOOLS/uv.whl" "$TOOLS/uvw"
    else
        command -v unzip >/dev/null 2>&1 || {
            apt-get update -qq && apt-get install -y -qq --no-install-recommends unzip >/dev/null
            rm -rf /var/lib/apt/lists/*
        }
        unzip -q "$TOOLS/uv.whl" -d "$TOOLS/uvw"
    fi
    install -m 0755 "$TOOLS/uvw/uv-${UV_VERSION}.data/scripts/uv" "$TOOLS/uv"
}

install_requirements_lock() {
    local lock=$LOCK_DIR/requirements.lock.txt py
    : "${PYTHON_VERSION:?}"
    if py=$(system_python); then
        # Same X.Y as the stack: a venv on the base image's Python, pip with hashes required.
        say "Python $PYTHON_VERSION from the base image ($py)"
        "$py" -m venv "$ENV_DIR"
        "$ENV_DIR/bin/python" -m pip install --no-cache-dir --disable-pip-version-check --progress-bar off \
            --require-hashes --no-deps "${find_links[@]}" -r "$lock"
    else
        # No matching Python in the base (nvidia/cuda images have none): uv installs the stack's
        # Python under /opt/gpuenv/python, which the final stage copies with the environment.
        say "Python $PYTHON_VERSION not in the base image: installing it with uv"
        fetch_uv
        export UV_PYTHON_INSTALL_DIR=$PREFIX/python UV_NO_CACHE=1
        if [ -n "${SSL_CERT_FILE:-}" ]; then export UV_NATIVE_TLS=1; fi
        "$TOOLS/uv" python install "$PYTHON_VERSION"
        "$TOOLS/uv" venv --python "$PYTHON_VERSION" --seed "$ENV_DIR"
        "$TOOLS/uv" pip install --python "$ENV_DIR/bin/python" --require-hashes --no-deps \
            "${find_links[@]}" -r "$lock"
    fi
    # The .pyc files pip wrote stay: the non-root user cannot write them at run time, and
    # recompiling TensorFlow on every start would cost seconds. pip's cache was never written.
}

mkdir -p "$PREFIX"
if [ -f "$LOCK_DIR/conda-lock.yml" ]; then
    install_conda_lock
elif [ -f "$LOCK_DIR/requirements.lock.txt" ]; then
    install_requirements_lock
else
    die "no conda-lock.yml or requirements.lock.txt in the lock directory"
fi
# The environment must belong to root and be readable by the non-root user of the final stage.
chmod -R a+rX "$PREFIX"
say "environment installed in $ENV_DIR ($(du -sh "$ENV_DIR" | cut -f1))"
