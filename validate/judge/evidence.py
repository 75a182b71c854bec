"""What a "ready" verdict must rest on: the GPUs computed, the exit status agrees, every word is
known.

A run whose checks all skipped passes pytest, yet proves nothing: a GPU server without PyTorch or
TensorFlow would read "every check passed" with no GPU exercised. So readiness needs evidence, and
the same rule judges a live run (validate/conftest.py) and a node's report read by the fleet
(gpuenv/fleet/outcome.py):
- every GPU the run validates has a passing "matmul correct" row (a product computed on that GPU
  matched float64): the checks that prove the GPU ran;
- the verdict of every row is one the suite writes;
- the exit status agrees with the rows (no failing row in a run that exited 0, and the reverse).
Health-only validation (`--health-only`) waives the first rule, and says so, only when asked by
name.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from validate.judge.verdict import FAIL, INFO, NOT_JUDGED_WORDS, PASS, SKIP, WARN

#: Every verdict word the suite writes into a row; any other word is not evidence of anything.
KNOWN_VERDICTS = frozenset({PASS, FAIL, SKIP, INFO, WARN, *NOT_JUDGED_WORDS})
#: Rows whose pass proves a GPU computed correctly: PyTorch's per-GPU product, or TensorFlow's
#: product on one of its /GPU devices (validate/checks/test_02_visibility.py).
PROOF_CHECKS = ("torch matmul correct", "tensorflow matmul correct (/GPU:")
NO_FRAMEWORK = "not validated: no framework in this environment"
HEALTH_ONLY_FLAG = "--health-only"


def proves_gpu(check: str, verdict: str) -> bool:
    """A passing row of a check that computes on the GPU."""
    return verdict == PASS and (check == PROOF_CHECKS[0] or check.startswith(PROOF_CHECKS[1]))


def unknown_verdicts(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """'check: verdict' for each row whose verdict is no word the suite writes ("error", "FAILED"
    ...)."""
    return [
        f"{row.get('check')}: {row.get('verdict')!r}"
        for row in rows
        if row.get("verdict") not in KNOWN_VERDICTS
    ]


def unproven_gpus(rows: Iterable[Mapping[str, Any]], gpus: Iterable[str]) -> list[str]:
    """The GPU UUIDs (of `gpus`, in order) that no passing compute row proves."""
    proven = {
        row.get("gpu") for row in rows if proves_gpu(str(row.get("check")), str(row.get("verdict")))
    }
    return [uuid for uuid in gpus if uuid not in proven]


def missing_evidence(
    rows: list[Mapping[str, Any]],
    gpus: Mapping[str, str],
    *,
    frameworks: Iterable[str],
    exit_status: int,
    health_only: bool = False,
) -> str | None:
    """Why this run (or report) is not proof of a ready host, or None when it is.

    `rows` are the report's rows (check, gpu, verdict); `gpus` maps each GPU UUID the run was
    meant to validate to a label for people ("GPU 0 NVIDIA H100 80GB HBM3"); `frameworks` names
    the frameworks that were found (PyTorch, TensorFlow).
    """
    if not rows:
        return "not validated: no check ran"
    unknown = unknown_verdicts(rows)
    if unknown:
        return (
            f"not validated: {len(unknown)} row(s) with a verdict the suite never writes: "
            f"{', '.join(unknown[:3])}"
        )
    failing = sum(row.get("verdict") == FAIL for row in rows)
    if exit_status == 0 and failing:
        return f"the exit status 0 disagrees with its rows: {failing} failed"
    if exit_status != 0 and not failing:
        return f"the suite exited with {exit_status} although no row failed"
    if health_only or exit_status != 0:
        return None
    missing = unproven_gpus(rows, gpus)
    if not missing:
        return None
    if not list(frameworks):
        return f"{NO_FRAMEWORK} (neither PyTorch nor TensorFlow is installed, so no GPU computed)"
    names = ", ".join(gpus[uuid] for uuid in missing[:4]) + (" ..." if len(missing) > 4 else "")
    return f"not validated: no check proved that {names} computes (no passing 'matmul correct' row)"


def local_fix(reason: str) -> str:
    """The fix to print under a live run's reason."""
    if reason.startswith(NO_FRAMEWORK):
        return (
            "run in the team's image (invoke validate --image ...) or install the stack (invoke "
            f"install); {HEALTH_ONLY_FLAG} validates the GPUs' health alone"
        )
    return f"see the rows above; {HEALTH_ONLY_FLAG} validates the GPUs' health alone"
