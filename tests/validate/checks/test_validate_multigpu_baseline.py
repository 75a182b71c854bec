"""The DDP check's figures through --save-baseline and --baseline, end to end through the suite's
entry point (`python -m validate`) on this machine's CPU (gloo): the saved file holds every DDP
figure under the host key (no GPU, as the CPU training's figures), and a later run is judged
against it, row by row, in both directions."""

from __future__ import annotations

import json

import pytest
from suiteruns import MISSING, run_suite

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif("torch" in MISSING, reason="needs PyTorch; not importable here"),
]


def _ddp_rows(rows: dict[str, dict]) -> dict[str, dict]:
    return {
        name: row
        for name, row in rows.items()
        if name.startswith(("ddp samples/s (", "ddp scaling efficiency ("))
    }


def test_ddp_rows_are_saved_as_a_baseline_then_judged_by_it(tmp_path):
    baseline = tmp_path / "baseline.json"
    saved = run_suite(
        tmp_path / "save",
        "-k",
        "ddp",
        "--expect-gpus",
        "0",
        "--save-baseline",
        str(baseline),
        quick=False,
    )  # --quick on a CPU skips the check: the full suite runs it
    assert saved["status"] == 0, saved["out"][-3000:]
    figures = {name: row["value"] for name, row in _ddp_rows(saved["rows"]).items()}
    rate = next(
        name
        for name in figures
        if name.startswith("ddp samples/s (") and "(per GPU without all-reduce" not in name
    )
    single = next(name for name in figures if "(per GPU without all-reduce" in name)
    efficiency = next(name for name in figures if name.startswith("ddp scaling efficiency ("))
    host = json.loads(baseline.read_text())["models"]["host"]
    assert {
        name: host[name] for name in figures
    } == figures  # every DDP figure, as the report measured it
    assert all(value > 0 for value in figures.values())
    # A baseline far below any real rate passes the job's rate; one far above fails the efficiency
    # (and the run exits 1): the verdicts follow the file, not this machine's load.
    data = json.loads(baseline.read_text())
    data["models"]["host"][rate] = 1e-6
    data["models"]["host"][efficiency] = 1e6
    del data["models"]["host"][single]
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
