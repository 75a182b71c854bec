"""How many processes a run starts that import PyTorch or TensorFlow, and what the quick suite
should cost on N GPUs: each such process pays the framework import and a CUDA start-up (seconds),
so they are the budget's unit. Counted from the same case lists the checks use. The quick suite's
budgets (one GPU, no GPU) are here too; benchmarks/validate_quick_budget.py measures against
them."""

from __future__ import annotations

import math

from validate.host.masking import UNSET_CASE, masking_cases, quick_cases
from validate.judge.visibility import probe_parallelism
from validate.measure.memory_modes import QUICK_MODES, SHARED_TF_MODE, TF_MODES, TORCH_MODES

#: Ranks the DDP check starts on a host without GPUs (validate/checks/test_07_multigpu.py).
CPU_RANKS = 2

#: Wall seconds `python -m validate --quick` may take on a server with one GPU: the budget the
#: quick suite was given (docs/decisions.md, issue 11).
QUICK_BUDGET_SECONDS_ONE_GPU = 60.0

#: Wall seconds `--quick` may take on a host without GPUs (the quickstart's last step, CI's
#: smoke run). Half the one-GPU budget: such a host has no GPU to measure, so the quick run only
#: proves that the frameworks import, see the host and train (the pytest process, TensorFlow's
#: info probe, one short CPU training run: 13 s of 44 s measured, docs/validation-results.md),
#: with room for a slower two-core runner (not for a host busy with other work: see there). The
#: multi-GPU check on the CPU costs four framework process starts (31.1 s of those 44 s) and does
#: not fit, so --quick skips it on such a host with QUICK_CPU_MULTIGPU_SKIP, and the full suite runs
#: it.
QUICK_BUDGET_SECONDS_CPU = 30.0

#: The skip reason of the multi-GPU checks in --quick on a host without GPUs: where they do run.
QUICK_CPU_MULTIGPU_SKIP = (
    "--quick on a host without GPUs: multi-GPU training on the CPU (DDP with gloo, "
    "DataParallel, MirroredStrategy) runs in the full suite (python -m validate, or invoke "
    "validate, without --quick); its process starts alone exceed --quick's CPU budget of "
    f"{QUICK_BUDGET_SECONDS_CPU:.0f} s"
)


def multigpu_runs(gpus: int, quick: bool) -> bool:
    """Whether the multi-GPU training check runs: on 2 or more GPUs, and on a host without GPUs
    (gloo ranks, logical CPU devices) in the full suite only. One GPU: nothing to train together."""
    return gpus >= 2 or (gpus == 0 and not quick)


def framework_processes(gpus: int, quick: bool, share_work: bool = True) -> dict[str, int]:
    """Processes importing torch or tensorflow in one run on `gpus` GPUs (both frameworks
    installed). `share_work`: the unset masking case and TensorFlow's growth-env memory figure
    come from processes that run anyway (the pytest process, the TensorFlow info probe)."""
    uuids = [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(gpus)]
    cases = masking_cases(uuids)
    if quick:
        cases = quick_cases(cases, uuids)
    per_framework = (
        len([c for c in cases if not (share_work and c.name == UNSET_CASE)]) if gpus else 0
    )

    def modes(names: dict) -> int:
        kept = [
            m
            for m in names
            if (not quick or m in QUICK_MODES) and not (share_work and m == SHARED_TF_MODE)
        ]
        return len(kept) if gpus else 0

    return {
        "pytest process (torch)": 1,
        "tensorflow info probe": 1,
        "memory probes (tensorflow)": modes(TF_MODES),
        "memory probes (torch)": modes(TORCH_MODES),
        "masking probes (torch)": per_framework,
        "masking probes (tensorflow)": per_framework,
        "all-reduce probe and its workers (torch)": 1 + gpus if gpus >= 2 else 0,
        # The multi-GPU check: a rank per GPU, or CPU_RANKS gloo ranks on a host without GPUs.
        "ddp launcher and its ranks (torch)": 1 + (gpus if gpus >= 2 else CPU_RANKS)
        if multigpu_runs(gpus, quick)
        else 0,
        # DataParallel in a probe of its own, so its hang or crash cannot take DDP's result with it.
        "dataparallel probe (torch)": 1 if multigpu_runs(gpus, quick) else 0,
        "mirrored strategy probe (tensorflow)": 1 if multigpu_runs(gpus, quick) else 0,
    }


def masking_waves(gpus: int, quick: bool, cpus: int) -> int:
    """Rounds of parallel masking children per framework (they run `probe_parallelism` at a
    time)."""
    count = framework_processes(gpus, quick)["masking probes (torch)"]
    return math.ceil(count / probe_parallelism(["Default"], cpus)) if count else 0
