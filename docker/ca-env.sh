# shellcheck shell=sh
# Sourced with a CA bundle path: point every downloader of the install stage at it.
#
#   . ca-env.sh /path/to/ca-bundle.crt
#
# Each tool reads its own setting, and a missed one fails only behind a TLS-inspecting proxy, so
# all of them are set together here and tests/envs/test_ca_env.py checks each against a
# loopback HTTPS server signed by a private CA.
_gpuenv_ca=${1:?usage: . ca-env.sh CA_BUNDLE}
export SSL_CERT_FILE="$_gpuenv_ca"       # uv (and OpenSSL-based tools, Python's ssl module)
export REQUESTS_CA_BUNDLE="$_gpuenv_ca"  # requests, pip's vendored requests
export PIP_CERT="$_gpuenv_ca"            # pip
export CURL_CA_BUNDLE="$_gpuenv_ca"      # curl
unset _gpuenv_ca
