"""The multi-GPU training check run for real through the suite's entry point (`python -m validate`,
the full suite): on this machine without GPUs, DDP with gloo over two processes and
MirroredStrategy over two logical CPU devices, the same code as NCCL on GPUs. Two fault runs make
rank 1 absent or slow (VALIDATE_DDP_FAULT) and expect the failure naming it, within the join
bound. `--quick` on a host without GPUs skips the check, naming the full suite; a replayed host
skips it with the reason. The healthy run saves its figures with --save-baseline, and a later run
is judged against that file, row by row, in both directions.

One module holds these tests: the healthy run (about 40 CPU-seconds) serves both the training
tests and the baseline test, and a module is the unit the test command hands to a worker."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from suiteruns import MISSING, no_gpu_only, run_suite

REPO = Path(__file__).resolve().parents[3]
B200 = REPO / "tests" / "validate" / "captures" / "nvidia-smi-xml" / "b200x8-580.105.08.xml"
#: The join bound the absent-rank run is given: long enough for rank 0's framework import on a
#: busy two-core machine, short enough for a test.
JOIN_BOUND = 30
#: The bound the hanging DataParallel run is given: its probe's Python start and torch import fit.
DATAPARALLEL_BOUND = 25
#: The file name of the baseline the healthy run saves, in its output folder.
BASELINE = "baseline.json"

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs PyTorch and TensorFlow; not importable here: {', '.join(MISSING)}",
    ),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """The healthy run (saving its figures as a baseline, to BASELINE in its folder) and the two
    fault runs of the full suite, the hanging DataParallel run and a --quick run, two at a time
    (each is a suite run of its own)."""
    tmp = tmp_path_factory.mktemp("multigpu")
    jobs = {
        "healthy": (
            *("-k", "ddp or mirrored", "--expect-gpus", "0"),
            *("--save-baseline", str(tmp / "healthy" / BASELINE)),
        ),
        "absent": ("-k", "ddp", "--expect-gpus", "0"),
        "slow": ("-k", "ddp", "--expect-gpus", "0"),
        "quick": ("-k", "ddp or mirrored", "--expect-gpus", "0"),
        "dataparallel-hangs": ("-k", "ddp", "--expect-gpus", "0"),
    }
    faults = {
        "absent": {"VALIDATE_DDP_FAULT": "absent:1", "VALIDATE_DDP_JOIN_TIMEOUT": str(JOIN_BOUND)},
        "slow": {"VALIDATE_DDP_FAULT": "slow:1"},
        "dataparallel-hangs": {
            "VALIDATE_DATAPARALLEL_FAULT": "hang",
            "VALIDATE_DATAPARALLEL_TIMEOUT": str(DATAPARALLEL_BOUND),
        },
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(
            lambda key: (
                key,
                run_suite(tmp / key, *jobs[key], env=faults.get(key), quick=key == "quick"),
            ),
            jobs,
        )
        return dict(done)


@no_gpu_only
def test_ddp_and_mirrored_train_on_the_cpu_and_pass(runs):
    run = runs["healthy"]
    rows = run["rows"]
    assert run["status"] == 0, run["out"][-3000:]
    for name in (
        "ddp ranks joined (2 ranks, gloo)",
        "ddp parameters identical (2 ranks, gloo)",
        "ddp training loss (2 ranks, gloo)",
        "ddp slowest rank (2 ranks, gloo)",
        "tensorflow mirrored variables identical (2 replicas, reduction to one device)",
        "tensorflow mirrored training loss (2 replicas, reduction to one device)",
    ):
        assert rows[name]["verdict"] == "pass", rows[name]
    for name in (
        "ddp samples/s (2 ranks, gloo)",
        "ddp samples/s (per GPU without all-reduce, median of 2, gloo)",
        "ddp scaling efficiency (2 ranks, gloo)",
        "tensorflow mirrored scaling efficiency (2 replicas, reduction to one device)",
    ):
        assert rows[name]["verdict"] == "not judged" and rows[name]["value"] > 0, rows[
            name
        ]  # no reference for a CPU
    dataparallel = rows["dataparallel samples/s (0 GPUs, one process)"]
    assert (
        dataparallel["verdict"] == "info"
        and dataparallel["value"] > 0
        and "DDP's" in dataparallel["measured"]
    )
    # the rates a --baseline judges and DataParallel stay out of the fleet median; the efficiency
    # meets it
    assert [
        rows[n]["fleet_judged"]
        for n in (
            "ddp samples/s (2 ranks, gloo)",
            "ddp samples/s (per GPU without all-reduce, median of 2, gloo)",
        )
    ] == [False, False]
    assert (
        dataparallel["fleet_judged"] is False
        and rows["ddp scaling efficiency (2 ranks, gloo)"]["fleet_judged"] is True
    )
    properties = {p.get("name") for p in run["junit"].iter("property")}
    assert "ddp scaling efficiency (2 ranks, gloo) [host]" in properties


def _ddp_rows(rows: dict[str, dict]) -> dict[str, dict]:
    return {
        name: row
        for name, row in rows.items()
        if name.startswith(("ddp samples/s (", "ddp scaling efficiency ("))
    }


def test_ddp_rows_are_saved_as_a_baseline_then_judged_by_it(runs, tmp_path):
    """The saved file holds every DDP figure under the host key (no GPU, as the CPU training's
    figures), and a later run is judged against it, row by row, in both directions."""
    saved = runs["healthy"]  # the full suite: --quick on a CPU skips the check
    assert saved["status"] == 0, saved["out"][-3000:]
    figures = {name: row["value"] for name, row in _ddp_rows(saved["rows"]).items()}
    rate = next(
        name
        for name in figures
        if name.startswith("ddp samples/s (") and "(per GPU without all-reduce" not in name
    )
    single = next(name for name in figures if "(per GPU without all-reduce" in name)
    efficiency = next(name for name in figures if name.startswith("ddp scaling efficiency ("))
    data = json.loads((saved["folder"] / BASELINE).read_text())
    host = data["models"]["host"]
    assert {
        name: host[name] for name in figures
    } == figures  # every DDP figure, as the report measured it
    assert all(value > 0 for value in figures.values())
    # A baseline far below any real rate passes the job's rate; one far above fails the efficiency
    # (and the run exits 1): the verdicts follow the file, not this machine's load.
    host[rate] = 1e-6
    host[efficiency] = 1e6
    del host[single]
    baseline = tmp_path / BASELINE  # a copy: the healthy run's own file stays as it saved it
    baseline.write_text(json.dumps(data))
    used = run_suite(
        tmp_path / "use",
        "-k",
        "ddp",
        "--expect-gpus",
        "0",
        "--baseline",
        str(baseline),
        quick=False,
    )
    rows = used["rows"]
    assert (
        rows[rate]["threshold"].startswith(">= 0.85 x baseline") and rows[rate]["verdict"] == "pass"
    )
    assert (
        rows[efficiency]["threshold"].startswith(">= 0.85 x baseline")
        and rows[efficiency]["verdict"] == "fail"
    )
    assert rows[single]["verdict"] == "not judged"  # no figure of it in the file
    assert used["status"] == 1, used["out"][-3000:]


@no_gpu_only
def test_an_absent_rank_fails_named_within_the_join_bound(runs):
    run = runs["absent"]
    row = run["rows"]["ddp ranks joined (2 ranks, gloo)"]
    assert run["status"] != 0
    assert row["verdict"] == "fail" and row["threshold"] == f"every rank within {JOIN_BOUND} s"
    assert row["reason"] == f"rank 1 (cpu) never reached the rendezvous within {JOIN_BOUND} s", row
    # the bound, plus the pytest process's and the launcher's framework imports: never a hang
    assert row["seconds"] < JOIN_BOUND + 60, row


@no_gpu_only
def test_a_slow_rank_fails_named(runs):
    run = runs["slow"]
    row = run["rows"]["ddp slowest rank (2 ranks, gloo)"]
    assert run["status"] != 0
    assert (
        row["verdict"] == "fail"
        and row["measured"].startswith("rank 1 (cpu)")
        and "rank 1 (cpu) trains at" in row["reason"]
    ), row
    assert (
        run["rows"]["ddp parameters identical (2 ranks, gloo)"]["verdict"] == "pass"
    )  # slow, not wrong


@no_gpu_only
def test_a_hanging_dataparallel_warns_and_the_ddp_rows_stand(runs):
    """DataParallel runs in a probe of its own with its own bound: its hang is a warning."""
    run = runs["dataparallel-hangs"]
    rows = run["rows"]
    assert run["status"] == 0, run["out"][-3000:]
    for name in (
        "ddp ranks joined (2 ranks, gloo)",
        "ddp parameters identical (2 ranks, gloo)",
        "ddp slowest rank (2 ranks, gloo)",
    ):
        assert rows[name]["verdict"] == "pass", rows[name]
    assert rows["ddp samples/s (2 ranks, gloo)"]["value"] > 0
    dataparallel = rows["dataparallel samples/s (0 GPUs, one process)"]
    assert (
        dataparallel["verdict"] == "warn"
        and f"did not finish within {DATAPARALLEL_BOUND}s" in dataparallel["reason"]
    ), dataparallel


def test_a_dataparallel_that_dies_without_a_result_is_an_error_of_its_own_probe():
    from validate.measure.subproc import run_probe

    result = run_probe(
        ["dataparallel", "2", "quick"], {"VALIDATE_DATAPARALLEL_FAULT": "abort"}, timeout=120
    )
    assert (
        result.data is None and "exited" in result.error and "without a result" in result.error
    ), result


@no_gpu_only
def test_quick_on_a_host_without_gpus_skips_the_check_naming_the_full_suite(runs):
    from validate.measure.budget import QUICK_CPU_MULTIGPU_SKIP

    run = runs["quick"]
    assert run["status"] == 0, run["out"][-3000:]
    for name in ("ddp training", "tensorflow mirrored"):
        row = run["rows"][name]
        assert row["verdict"] == "skip" and row["reason"] == QUICK_CPU_MULTIGPU_SKIP, row
    assert (
        "runs in the full suite (python -m validate, or invoke validate, without --quick)"
        in QUICK_CPU_MULTIGPU_SKIP
    )
    assert not [
        name
        for name in run["rows"]
        if name.startswith(("ddp ranks", "tensorflow mirrored variables"))
    ]


def test_a_replayed_host_skips_the_multigpu_checks_with_the_reason(tmp_path):
    run = run_suite(tmp_path / "replay", "--replay", str(B200), "-k", "ddp or mirrored")
    for name in ("ddp training", "tensorflow mirrored"):
        row = run["rows"][name]
        assert row["verdict"] == "skip" and row["replayed"], row
        assert (
            row["reason"].startswith("replayed host")
            and "runs PyTorch/TensorFlow on the host itself" in row["reason"]
        ), row
    skipped = [
        case.get("name")
        for case in run["junit"].iter("testcase")
        if case.find("skipped") is not None
    ]
    assert sorted(skipped) == ["test_ddp_training", "test_tensorflow_mirrored"]
