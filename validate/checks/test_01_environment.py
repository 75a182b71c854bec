"""Check 1, environment: the driver gate (is the driver new enough for this image?), the driver and
every GPU from NVML, the framework builds, and whether the installed builds are the ones the
image's labels claim. Each GPU's health is check 1's other file, test_01_health.py (run after this
one: the driver gate stays first)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from validate import intact
from validate.host import nvml
from validate.host.masking import DEVICE_ORDER
from validate.host.stackfile import read_stack_file
from validate.judge.capture import capture_text, capture_verdict
from validate.judge.claims import claims_verdict, cudnn_version_text, driver_runs_runtime_verdict
from validate.judge.driver_floor import load_floors, too_old_for_frameworks
from validate.judge.driver_gate import driver_too_old
from validate.judge.memory import shm_verdict
from validate.judge.verdict import FAIL, INFO, PASS, Verdict
from validate.judge.visibility import mig_verdict


def test_driver_gate(suite, record):
    """First check: the host's driver is at least the image's min_driver (stack.json). The NVIDIA
    container toolkit skips its own NVIDIA_REQUIRE_CUDA gate when GPUs come through CDI."""
    stack = read_stack_file()
    if stack is None:
        pytest.skip(
            "GPUENV_STACK_FILE is not set or unreadable: not inside a gpuenv image, no "
            "min_driver to compare"
        )
    min_driver = stack.get("min_driver")
    if not min_driver:
        pytest.skip(
            f"the image's stack ({stack.get('stack_id', 'unknown')}) names no min_driver (CPU "
            "stack)"
        )
    if suite.host.driver_version is None:
        suite.require_gpus()
        pytest.skip(f"NVML does not report the driver version: {suite.no_gpu_reason()}")
    problem = driver_too_old(
        suite.host.driver_version, str(min_driver), suite.host.cuda_driver_version
    )
    threshold = f">= {min_driver}"
    record.add(
        "driver gate",
        suite.host.driver_version,
        Verdict(FAIL, threshold, problem) if problem else Verdict(PASS, threshold),
    )
    record.finish()


def test_device_order(suite, record):
    """The suite runs with CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML's order), whatever the caller set:
    otherwise CUDA numbers a mixed-GPU machine fastest first and ordinals in CUDA_VISIBLE_DEVICES
    name other GPUs than NVML's."""
    value = os.environ.get("CUDA_DEVICE_ORDER")
    was = suite.device_order_was
    measured = f"{value}" + (f" (was {was})" if was and was != value else "")
    ok = value == DEVICE_ORDER
    record.add(
        "cuda device order",
        measured,
        Verdict(
            PASS if ok else FAIL,
            DEVICE_ORDER,
            "" if ok else "CUDA_DEVICE_ORDER was not set by the suite",
        ),
    )
    record.finish()


def test_driver(suite, record):
    """NVIDIA driver and the CUDA version it supports; a driver older than every framework build
    gpuenv supports (418 runs CUDA 10.1) fails here, live and replayed, named as the blocker."""
    if suite.host.error:
        suite.require_gpus()  # skips with NVML's reason, or fails when GPUs are expected
    too_old = too_old_for_frameworks(suite.host.driver_version) if suite.host.gpus else None
    floor = f">= {load_floors().framework_driver} (the oldest any supported framework build runs)"
    verdict = Verdict(FAIL, floor, too_old) if too_old else INFO
    record.add("driver version", suite.host.driver_version or "unknown", verdict)
    record.add("CUDA driver version", suite.host.cuda_driver_version or "unknown")
    record.finish()


def test_every_gpu_readable(suite, record):
    """Every GPU NVML counts can be read; a lost GPU fails here while the others are still
    checked."""
    if suite.host.error:
        suite.require_gpus()
        pytest.skip(suite.no_gpu_reason())
    for lost in suite.host.unreadable:
        record.add(
            f"GPU {lost.index} readable", "no", Verdict(FAIL, "readable through NVML", lost.error)
        )
    scope = (suite.replay or {}).get("capture")
    whole = None
    if isinstance(
        scope, dict
    ):  # an nvidia-smi capture: whole (said in the row below), cut short, or an excerpt
        whole = capture_verdict(scope)
        if whole.verdict != PASS:
            record.add("capture holds every GPU", capture_text(scope), whole)
    if not suite.host.unreadable:
        measured = f"{len(suite.host.gpus)} GPU(s)"
        if whole is not None and whole.verdict == PASS:
            measured = f"{len(suite.host.gpus)} of {scope['attached_gpus']} attached GPU(s)"  # type: ignore[index]
        record.add("every GPU readable", measured, Verdict(PASS, "readable through NVML"))
    record.finish()


def test_recorded_measurements(suite, record):
    """On a replayed gpuenv recording: the figures and verdicts of the checks that ran PyTorch or
    TensorFlow on the recorded host (they cannot run here), shown as recorded."""
    if not suite.replayed_from:
        pytest.skip("not a replay (--replay FILE)")
    kept = suite.recorded_records()
    if not kept:
        pytest.skip(
            "the replayed file holds no measurements (an nvidia-smi capture, or a --record run "
            "without frameworks)"
        )
    for r in kept:
        record.add(
            f"recorded: {r.get('check')}",
            str(r.get("measured", "")),
            Verdict(
                str(r.get("verdict", INFO)), str(r.get("threshold", "")), str(r.get("reason", ""))
            ),
            gpu=r.get("gpu"),
            value=r.get("value"),
            seconds=0,
        )
    record.finish()


def test_mig_mode(gpu: nvml.GpuInfo, suite, record):
    """A GPU in MIG mode: each instance is a device of its own; the GPU fails only with none."""
    if not gpu.mig_enabled:
        pytest.skip(f"GPU {gpu.index} is not in MIG mode")
    uuids = [m.uuid for m in gpu.mig_devices]
    selected = suite.selected_mig if suite.selected_mig in uuids else None
    record.add(
        "mig mode",
        f"{len(uuids)} instance(s)",
        mig_verdict(gpu.index, uuids, selected),
        gpu=gpu.uuid,
    )
    record.finish()


def _shm_bytes() -> int | None:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def test_shared_memory(suite, record):
    """/dev/shm is large enough for NCCL between GPUs and DataLoader workers (containers get 64
    MB)."""
    size = _shm_bytes()
    verdict = shm_verdict(size, len(suite.host.gpus))
    record.add(
        "/dev/shm size", "not mounted" if size is None else f"{size / 2**20:.0f} MiB", verdict
    )
    record.finish()


def test_torch_build(torch, suite, record):
    """PyTorch's version, CUDA, cuDNN, NCCL and compiled architectures; the driver must run its
    CUDA."""
    info: dict[str, Any] = suite.frameworks["torch"]
    record.add("torch version", info["version"])
    record.add(
        "torch CUDA / cuDNN / NCCL",
        f"{info['cuda'] or 'CPU build'} / {info['cudnn'] or '-'} / {info['nccl'] or '-'}",
    )
    record.add("torch architectures", ",".join(info["arch_list"]) or "none (CPU build)")
    if info["cuda"] and not suite.host.error:
        record.add(
            "driver runs torch CUDA",
            f"driver CUDA {suite.host.cuda_driver_version or 'not reported'}",
            driver_runs_runtime_verdict(suite.host.cuda_driver_version, info["cuda"]),
        )
    record.finish()


def test_tensorflow_build(tf_info, suite, record):
    """TensorFlow's version and build info (CUDA, cuDNN, compute capabilities)."""
    record.add("tensorflow version", tf_info["version"])
    record.add(
        "tensorflow CUDA / cuDNN",
        f"{tf_info['cuda_version'] or 'CPU build'} / {tf_info['cudnn_version'] or '-'}"
        if tf_info["is_cuda_build"]
        else "CPU build",
    )
    if tf_info["is_cuda_build"] and not suite.host.error:
        record.add(
            "driver runs tensorflow CUDA",
            f"driver CUDA {suite.host.cuda_driver_version or 'not reported'}",
            driver_runs_runtime_verdict(suite.host.cuda_driver_version, tf_info["cuda_version"]),
        )
    record.finish()


def _stack_claims() -> dict[str, Any]:
    path = os.environ.get("GPUENV_STACK_FILE")
    if not path:
        pytest.skip("GPUENV_STACK_FILE is not set: not inside a gpuenv image, no claims to compare")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError) as err:
        pytest.fail(f"GPUENV_STACK_FILE={path} cannot be read: {err}", pytrace=False)


def test_stack_matches_image_labels(suite, record, request):
    """The framework build installed is the one the image's labels (stack.json) claim."""
    stack = _stack_claims()
    framework = stack.get("framework")
    # the build's CUDA (framework_cuda) can differ from the image's (`cuda`): older by the CUDA
    # rule, or newer within the major by minor-version compatibility; stack.json files without it
    # predate that
    build_cuda = stack.get("framework_cuda") or stack.get("cuda")
    claimed = {
        "framework_version": stack.get("framework_version"),
        "cuda": build_cuda,
        "cudnn": stack.get("cudnn"),
    }
    if framework == "torch":
        info = request.getfixturevalue("torch") and suite.frameworks["torch"]
        installed = {
            "framework_version": info["version"],
            "cuda": info["cuda"],
            "cudnn": cudnn_version_text(info["cudnn"]),
        }
    elif framework == "tensorflow":
        tf = request.getfixturevalue("tf_info")
        installed = {
            "framework_version": tf["version"],
            "cuda": tf["cuda_version"],
            "cudnn": tf["cudnn_version"],
        }
    else:
        pytest.fail(
            f"stack file names framework {framework!r}, expected torch or tensorflow", pytrace=False
        )
    measured = ", ".join(f"{k}={v}" for k, v in installed.items() if v)
    verdict: Verdict = claims_verdict(claimed, installed)
    record.add(f"{framework} build vs {stack.get('stack_id', 'image labels')}", measured, verdict)
    record.finish()


#: With --quick, files larger than this are checked by size only (the .so files of a framework,
#: most of its bytes); every smaller file (all Python code, scripts, metadata) is hashed.
QUICK_HASH_LIMIT = 1024 * 1024
#: At most this many problems are named in the row; `invoke verify` names every one.
SHOWN_PROBLEMS = 3


def gpuenv_environment(prefix: str, environ: dict[str, str]) -> bool:
    """Whether `prefix` is an environment gpuenv made: an image's /opt/gpuenv/env, or a prefix
    `invoke install` made (its gpuenv-prefix.json). Any other Python is not judged."""
    if os.path.isfile(os.path.join(prefix, intact.GPUENV_RECORD)):
        return True
    return bool(environ.get("GPUENV_STACK_FILE")) and os.path.realpath(prefix) == "/opt/gpuenv/env"


def test_environment_intact(suite, record):
    """The running environment is exactly what its packages installed: every file against its
    conda-meta record or RECORD (validate/intact.py, the judge of `invoke verify`); an edited,
    removed or added file fails. With --quick, files over 1 MiB are checked by size only."""
    prefix = sys.prefix
    if not gpuenv_environment(prefix, dict(os.environ)):
        pytest.skip(
            f"{prefix} is not an environment gpuenv made (an image's /opt/gpuenv/env or an "
            "installed prefix)"
        )
    limit = QUICK_HASH_LIMIT if suite.quick else None
    try:
        verdict = intact.check(intact.FolderTree(prefix), prefix, hash_limit=limit)
    except (OSError, intact.TreeError) as err:
        pytest.fail(f"{prefix} cannot be read: {err}", pytrace=False)
    measured = f"{verdict.files_checked} files of {len(verdict.packages)} packages" + (
        f" ({verdict.sampled})" if verdict.sampled else ""
    )
    threshold = "every file as its package declares"
    if verdict.ok:
        record.add("environment intact", measured, Verdict(PASS, threshold))
    else:
        named = "; ".join(p.line() for p in verdict.problems[:SHOWN_PROBLEMS])
        more = len(verdict.problems) - SHOWN_PROBLEMS
        reason = (
            named + (f"; and {more} more" if more > 0 else "") + " (invoke verify names every one)"
        )
        record.add("environment intact", measured, Verdict(FAIL, threshold, reason))
    record.finish()
