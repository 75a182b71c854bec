#!/bin/sh
# gpuenv image entrypoint: a driver gate that holds at every container start, then the command.
#
# NVIDIA_REQUIRE_CUDA is enforced by the legacy NVIDIA runtime hook only: with CDI, which recent
# Docker tries first for --gpus, the toolkit does not check it (nvidia-container-toolkit#1470).
# So the image checks its own floor. GPUENV_MIN_DRIVER is the image's min_driver label (empty for
# CPU images: no gate). The driver version is the kernel module's, which is what NVML reports; a
# container that cannot see it (no NVIDIA driver on the host) is not gated here, and the
# validation suite's first check says the same thing through NVML.
# GPUENV_SKIP_DRIVER_GATE=1 skips it (data-center forward compatibility packages, on purpose).
# For a stack that runs by CUDA minor-version compatibility (a CUDA 11 image on a driver older than
# the image's own floor), GPUENV_MIN_DRIVER is that compatibility floor (450.80.02 for 11.x) and the
# image's NVIDIA_REQUIRE_CUDA says the same (cuda>=11.0,driver>=450.80.02), so the two gates agree.
set -eu

min=${GPUENV_MIN_DRIVER:-}
version_file=${GPUENV_DRIVER_VERSION_FILE:-/proc/driver/nvidia/version}

# True when version $1 is older than $2 (dotted numbers, e.g. 535.104.05 < 550.54.14).
older() {
    [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -t. -k1,1n -k2,2n -k3,3n | head -n 1)" = "$1" ]
}

if [ -n "$min" ] && [ "${GPUENV_SKIP_DRIVER_GATE:-0}" != 1 ] && [ -r "$version_file" ]; then
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." or, for the
    # open modules, "... Open Kernel Module for x86_64  550.54.15  Release Build ...".
    driver=$(awk '/NVRM version/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+[.][0-9]+([.][0-9]+)?$/) { print $i; exit } }' "$version_file")
    if [ -n "$driver" ] && older "$driver" "$min"; then
        hint=""
        for entry in ${GPUENV_CUDA_FLOORS:-}; do
            cuda=${entry%%=*}
            floor=${entry#*=}
            if ! older "$driver" "$floor"; then
                hint=$cuda
                break
            fi
        done
        if [ -n "$hint" ]; then
            echo "gpuenv: driver $driver is older than $min needed by this image: upgrade the driver to >= $min, or build for --cuda $hint" >&2
        else
            echo "gpuenv: driver $driver is older than $min needed by this image: upgrade the driver to >= $min, or build the stack this driver runs (invoke resolve --driver $driver)" >&2
        fi
        exit 1
    fi
fi

exec "$@"
