"""Check 4, CUDA_VISIBLE_DEVICES masking: each case in a fresh process per framework, the GPUs
it reports compared by UUID with what the CUDA rules (validate.host.masking) say it must see."""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from validate.host.devices import nvml_uuid, tf_gpu_uuids, torch_gpus
from validate.host.masking import UNSET_CASE, MaskCase, env_for_case, masking_cases, quick_cases
from validate.judge.verdict import FAIL, PASS, Verdict
from validate.judge.visibility import probe_parallelism
from validate.measure.subproc import ProbeResult, run_probe

PROBES = {"torch": ["torch-devices"], "tensorflow": ["tf-info", "--no-compute"]}


def _short(uuids: list[str] | tuple[str, ...]) -> str:
    return ",".join(u[:12] for u in uuids) or "none"


@pytest.mark.isolated
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_cuda_visible_devices(framework, suite, record, request):
    """Every masking case maps to the expected physical GPUs, in order, for this framework."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed here (no module named {framework!r})")
    suite.require_gpus()
    uuids = [g.uuid for g in suite.host.gpus]
    # On a host with some GPUs in MIG mode the whole GPUs keep the check, named by UUID (CUDA
    # numbers MIG instances among them, so ordinals cannot be predicted there).
    whole = [g.uuid for g in suite.host.gpus if not g.mig_enabled] if suite.host.mig_gpus else None
    if whole is not None and not whole:
        pytest.skip(
            "every GPU is in MIG mode: masking is checked on whole GPUs (each instance is "
            "validated on its own)"
        )
    # Cases inside the caller's CUDA_VISIBLE_DEVICES: a container or job given GPUs 1,3 is
    # checked on GPUs 1 and 3 only, and no child ever sees a GPU the caller hid.
    cases = masking_cases(uuids, suite.caller_mask, only=whole)
    if not any(case.expected_uuids for case in cases):
        pytest.skip(
            f"CUDA_VISIBLE_DEVICES={suite.caller_mask!r} hides every GPU NVML lists: no masking "
            "case can show a GPU"
        )
    if suite.quick:
        cases = quick_cases(cases, uuids)
    # Shared work: with CUDA_VISIBLE_DEVICES unset here, the unset case is what this process's
    # PyTorch and the TensorFlow info probe already see; no new child for it (except under
    # Exclusive_Process, where this process must not touch the GPUs before the children).
    unset: ProbeResult | None = None
    if os.environ.get("CUDA_VISIBLE_DEVICES") is None and not suite.exclusive:
        if framework == "torch":
            seen = torch_gpus(request.getfixturevalue("torch"), suite.nvml_uuids)
            unset = ProbeResult({"gpus": [{"uuid": u} for u in seen]}, None, 0.0)
        else:
            unset = suite.tf_info()

    def run(case: MaskCase) -> ProbeResult:
        if unset is not None and case.name == UNSET_CASE:
            return unset
        env = {**env_for_case(case), "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
        return run_probe(PROBES[framework], env)

    # Exclusive_Process mode takes one process per GPU: parallel probes would all get "busy".
    workers = probe_parallelism([g.compute_mode for g in suite.host.gpus], os.cpu_count() or 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(run, cases))
    for case, result in zip(cases, results):
        check = f"{framework} CUDA_VISIBLE_DEVICES={case.visible_devices!s} ({case.name})"
        if result.error or result.data is None:
            record.add(
                check,
                "-",
                Verdict(FAIL, _short(case.expected_uuids), result.error or "no result"),
                seconds=result.seconds,
            )
            continue
        if framework == "torch":
            seen = [nvml_uuid(g["uuid"], suite.nvml_uuids) for g in result.data["gpus"]]
        else:
            seen = tf_gpu_uuids(result.data["gpus"], suite.host.gpus)
        ok = tuple(seen) == case.expected_uuids
        reason = "" if ok else f"saw {_short(seen)}, expected {_short(case.expected_uuids)}"
        record.add(
            check,
            _short(seen),
            Verdict(PASS if ok else FAIL, _short(case.expected_uuids), reason),
            seconds=result.seconds,
        )
    record.finish()
