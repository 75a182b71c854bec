"""Check 2, GPU visibility: NVML, PyTorch and TensorFlow see the same GPUs, as many as expected;
each GPU computes a correct result; each GPU's architecture is among the build's kernels."""

from __future__ import annotations

import os

import pytest

from validate.host.devices import MAX_RELATIVE_ERROR, compiled_archs, tf_gpu_uuids, torch_gpus
from validate.host.masking import expected_visible
from validate.judge.verdict import FAIL, INFO, PASS, SKIP, WARN, Verdict
from validate.judge.visibility import (
    gpu_count_verdict,
    kernel_image_verdict,
    ptx_only,
    unique_gpus_verdict,
)

CORRECT = f"relative error <= {MAX_RELATIVE_ERROR:g}"


def _expected_for_frameworks(suite) -> list[str]:
    """The NVML GPUs (or the MIG instance) a framework in this process should see, given
    CUDA_VISIBLE_DEVICES."""
    mig = [m.uuid for g in suite.host.gpus for m in g.mig_devices]
    return expected_visible(
        os.environ.get("CUDA_VISIBLE_DEVICES"), [g.uuid for g in suite.host.gpus], mig
    )


def _skip_whole_mig_host(suite) -> None:
    """With a GPU in MIG mode and no instance chosen, CUDA sees instances while PyTorch counts
    parent GPUs and trips its own assert (pytorch#131650): the MIG check says what to run."""
    if suite.host.mig_gpus and not suite.selected_mig:
        pytest.skip(
            "a GPU is in MIG mode: each instance is validated in its own run (see the MIG check)"
        )


def _compare(who: str, seen: list[str], suite, record, build_note: str = "") -> None:
    expected = _expected_for_frameworks(suite)
    if not seen and not expected and suite.expectation is None:
        pytest.skip(f"{suite.no_gpu_reason()}; {who} sees no GPU either{build_note}")
    if not seen and not suite.host.gpus and suite.expectation is not None:
        suite.require_gpus()  # NVML sees none either: the NVML GPU count check fails for it, once
    count = gpu_count_verdict(len(seen), suite.expectation, who)
    if count.verdict != SKIP:
        record.add(f"{who} GPU count", str(len(seen)), count)
    if sorted(seen) == sorted(expected):
        same = Verdict(PASS, f"NVML's {len(expected)} GPU(s)")
    else:
        same = Verdict(
            FAIL,
            f"NVML's {len(expected)} GPU(s)",
            f"{who} sees {seen or 'none'}{build_note}, NVML expects {expected or 'none'}",
        )
    record.add(f"{who} sees NVML's GPUs", ", ".join(u[:12] for u in seen) or "none", same)
    record.finish()


def nvml_devices(gpus) -> list[str]:
    """The devices CUDA can be given: each whole GPU, and each MIG instance in place of its
    MIG-mode parent (NVIDIA_VISIBLE_DEVICES=MIG-... gives a container instances, not GPUs)."""
    return [m.uuid for g in gpus for m in g.mig_devices] + [
        g.uuid for g in gpus if not g.mig_enabled
    ]


def mig_requested(nvidia_visible_devices: str | None) -> bool:
    """NVIDIA_VISIBLE_DEVICES names MIG instances (MIG-<uuid> or GPU:instance): the container
    was given instances, so instances are what it must see."""
    entries = [e.strip() for e in (nvidia_visible_devices or "").split(",") if e.strip()]
    return any(e.upper().startswith("MIG-") or ":" in e for e in entries)


def test_nvml_gpu_count(suite, record):
    """NVML sees as many GPUs as expected (--expect-gpus or NVIDIA_VISIBLE_DEVICES); when the
    container was given MIG instances (NVIDIA_VISIBLE_DEVICES=MIG-...), its instances are the
    devices counted."""
    devices = nvml_devices(suite.host.gpus)
    seen = (
        len(devices)
        if mig_requested(os.environ.get("NVIDIA_VISIBLE_DEVICES"))
        else len(suite.host.gpus)
    )
    verdict = gpu_count_verdict(seen, suite.expectation, "NVML")
    if verdict.verdict == SKIP:
        pytest.skip(suite.no_gpu_reason())
    if verdict.verdict == FAIL and (suite.driverless or suite.host.error):
        why = suite.driverless or suite.host.error
        verdict = Verdict(FAIL, verdict.threshold, f"{verdict.reason}: {why}")
    elif verdict.verdict == FAIL and suite.host.unreadable:
        verdict = Verdict(
            FAIL,
            verdict.threshold,
            f"{verdict.reason}: " + "; ".join(u.error for u in suite.host.unreadable),
        )
    verdict = unique_gpus_verdict(verdict, [g.uuid for g in suite.host.gpus])
    mig = sum(len(g.mig_devices) for g in suite.host.mig_gpus)
    whole = len(suite.host.gpus) - len(suite.host.mig_gpus)
    measured = str(seen) + (
        f" ({whole} whole GPU(s), {len(suite.host.mig_gpus)} in MIG mode with {mig} instance(s))"
        if suite.host.mig_gpus
        else ""
    )
    record.add("NVML GPU count", measured, verdict)
    record.finish()


def test_visible_devices(suite, record):
    """The devices this run validates: CUDA_VISIBLE_DEVICES applied to NVML's GPUs and MIG
    instances (by index or UUID, as CUDA reads it). A value that names no device fails: a typo
    in a MIG UUID would otherwise validate nothing and read as skipped."""
    if not suite.host.gpus:
        pytest.skip(suite.no_gpu_reason())
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        devices = nvml_devices(suite.host.gpus)
        record.add(
            "visible devices",
            f"{len(devices)}: " + ", ".join(u[:12] for u in devices),
            Verdict(INFO, "CUDA_VISIBLE_DEVICES unset: every device"),
        )
        return record.finish()
    devices = _expected_for_frameworks(suite)
    shown = ", ".join(u[:12] for u in devices) or "none"
    threshold = f"CUDA_VISIBLE_DEVICES={value}"
    if devices or suite.expectation is None:
        record.add("visible devices", shown, Verdict(PASS if devices else INFO, threshold))
    else:
        known = ", ".join(nvml_devices(suite.host.gpus))
        record.add(
            "visible devices",
            shown,
            Verdict(
                FAIL,
                threshold,
                f"CUDA_VISIBLE_DEVICES={value!r} names no device NVML lists ({known}): use an "
                "index or a UUID from nvidia-smi -L",
            ),
        )
    record.finish()


def test_torch_sees_gpus(torch, suite, record):
    """PyTorch sees exactly the GPUs NVML lists (after CUDA_VISIBLE_DEVICES), by UUID."""
    _skip_whole_mig_host(suite)
    note = " (PyTorch is a CPU build)" if torch.version.cuda is None else ""
    _compare("PyTorch", torch_gpus(torch, suite.nvml_uuids), suite, record, note)


def test_tensorflow_sees_gpus(tf_info, suite, record):
    """TensorFlow sees exactly the GPUs NVML lists, matched by PCI bus id."""
    _skip_whole_mig_host(suite)
    note = "" if tf_info["is_cuda_build"] else " (TensorFlow is a CPU build)"
    _compare("TensorFlow", tf_gpu_uuids(tf_info["gpus"], suite.host.gpus), suite, record, note)


def test_torch_computes_on_cpu(torch, record):
    """A small float32 product on the CPU matches float64."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 64, generator=generator), torch.randn(64, 32, generator=generator)
    expected = a.double() @ b.double()
    error = float((a @ b).double().sub(expected).abs().max() / expected.abs().max())
    record.add(
        "torch matmul correct (cpu)",
        f"{error:.2e}",
        Verdict(
            PASS if error <= MAX_RELATIVE_ERROR else FAIL,
            CORRECT,
            "" if error <= MAX_RELATIVE_ERROR else "wrong product on CPU",
        ),
    )
    record.finish()


def test_torch_computes_on_gpu(gpu, torch, cuda_device, record):
    """A small product on this GPU matches float64 on the CPU."""
    device = cuda_device
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 64, generator=generator), torch.randn(64, 32, generator=generator)
    expected = a.double() @ b.double()
    product = (a.to(device) @ b.to(device)).cpu()
    error = float(product.double().sub(expected).abs().max() / expected.abs().max())
    ok = error <= MAX_RELATIVE_ERROR
    record.add(
        "torch matmul correct",
        f"{error:.2e}",
        Verdict(PASS if ok else FAIL, CORRECT, "" if ok else "wrong product on this GPU"),
        gpu=gpu.uuid,
    )
    record.finish()


def test_tensorflow_computes(tf_info, suite, record):
    """A small product on TensorFlow's CPU and on each of its GPUs matches float64."""
    gpu_uuids = tf_gpu_uuids(tf_info["gpus"], suite.host.gpus)
    for result in tf_info["compute"]:
        device = result["device"]
        uuid = gpu_uuids[int(device.rsplit(":", 1)[1])] if device.startswith("/GPU") else None
        ok = result["relative_error"] <= MAX_RELATIVE_ERROR
        record.add(
            f"tensorflow matmul correct ({device})",
            f"{result['relative_error']:.2e}",
            Verdict(PASS if ok else FAIL, CORRECT, "" if ok else f"wrong product on {device}"),
            gpu=uuid if uuid and uuid.startswith("GPU-") else None,
        )
    record.finish()


def test_torch_kernel_image(gpu, torch, record):
    """This GPU's compute capability is among PyTorch's compiled architectures."""
    if torch.version.cuda is None:
        pytest.skip(
            "PyTorch is a CPU build: it has no CUDA kernels (the visibility check reports it)"
        )
    verdict = kernel_image_verdict(gpu.compute_capability or "0.0", compiled_archs(torch))
    record.add(
        "torch kernel image",
        f"sm_{(gpu.compute_capability or '?').replace('.', '')}",
        verdict,
        gpu=gpu.uuid,
    )
    record.finish()


def test_tensorflow_kernel_image(gpu, tf_info, suite, record):
    """This GPU's compute capability is among TensorFlow's compiled architectures. Only PTX for it
    works but is JIT-compiled at first use (it can take half an hour): warned, with the first op
    timed."""
    archs = tf_info.get("compute_capabilities")
    if not archs:
        pytest.skip("TensorFlow's build info lists no CUDA compute capabilities (CPU build)")
    capability = gpu.compute_capability or "0.0"
    verdict = kernel_image_verdict(capability, list(archs))
    sm = f"sm_{capability.replace('.', '')}"
    record.add("tensorflow kernel image", sm, verdict, gpu=gpu.uuid)
    if verdict.verdict == PASS and ptx_only(capability, list(archs)):
        uuids = tf_gpu_uuids(tf_info["gpus"], suite.host.gpus)
        first = next(
            (
                r.get("first_op_seconds")
                for r in tf_info.get("compute", [])
                if r["device"].startswith("/GPU")
                and uuids[int(r["device"].rsplit(":", 1)[1])] == gpu.uuid
            ),
            None,
        )
        timed = f"first op took {first:.1f} s" if first is not None else "first op not timed"
        record.add(
            "tensorflow PTX JIT",
            timed,
            Verdict(
                WARN,
                "a cubin for this GPU",
                f"TensorFlow ships only PTX for {sm}: every new process JIT-compiles its kernels "
                f"({timed}); raise CUDA_CACHE_MAXSIZE to keep them, or use a TensorFlow build "
                f"with {sm} kernels",
            ),
            gpu=gpu.uuid,
        )
    record.finish()
