"""The multi-GPU check's figures in the fleet report: each host's DDP rows (filed under the GPU of
rank 0, as validate/checks/test_07_multigpu.py files them) meet the fleet median of hosts with the
same GPU model, and a host far below it is DEGRADED with the row named. Reports are written by the
suite's own writer (build_json); the figures are inputs chosen for the case, not results."""

from __future__ import annotations

import json

from suitecases import H100, gpu

from gpuenv.fleet.outcome import DEGRADED, READY, HostOutcome
from gpuenv.fleet.report import analysis, jsonreport, terminal
from validate.report.record import Record, build_json

EFFICIENCY = "ddp scaling efficiency (2 ranks, nccl)"
RATE = "ddp samples/s (2 ranks, nccl)"


def ddp_host(host: int, efficiency: float, rate: float) -> HostOutcome:
    """A two-GPU host whose DDP job passed every check it judges; its figures under GPU 0."""
    gpus = [gpu(0, H100, host), gpu(1, H100, host)]
    lead = gpus[0]["uuid"]
    test = "checks/test_07_multigpu.py::test_ddp_training"
    records = [
        Record(
            "ddp parameters identical (2 ranks, nccl)",
            None,
            "sha256 0123456789ab... on 2 ranks",
            "one sha256",
            "pass",
            0.0,
            test=test,
        ),
        Record(
            RATE,
            lead,
            f"{rate:.0f} samples/s",
            "no --baseline",
            "not judged",
            0.0,
            value=rate,
            test=test,
            fleet_judged=False,
        ),
        Record(
            EFFICIENCY,
            lead,
            f"{efficiency:.2f} (speedup {2 * efficiency:.2f} on 2; over nvlink)",
            ">= 0.75 x reference",
            "pass",
            0.0,
            value=efficiency,
            test=test,
        ),
    ]
    report = build_json(
        records,
        {"driver_version": "550.54.15", "gpus": gpus, "error": None},
        gpus,
        {"torch": {"version": "2.5.1"}},
        0,
    )
    return HostOutcome(f"ssh://ops@gpu{host}", READY, "", report=report)


def test_a_host_whose_ddp_efficiency_is_far_below_the_fleet_median_is_degraded_and_named():
    hosts = [ddp_host(1, 0.95, 5000.0), ddp_host(2, 0.94, 5010.0), ddp_host(3, 0.50, 4990.0)]
    fleet = analysis.analyse(hosts)
    status = {o.host: o for o in fleet.outcomes}
    assert status["ssh://ops@gpu1"].status == READY and status["ssh://ops@gpu2"].status == READY
    slow = status["ssh://ops@gpu3"]
    assert slow.status == DEGRADED and not fleet.ready
    # the median of 0.95, 0.94 and 0.50 is 0.94; 0.50 is 53% of it, below the 90% floor
    assert f"GPU 0 {EFFICIENCY} 0.5 is 53% of the fleet median 0.9 of {H100}" in slow.reason
    assert [(row.host, name) for row, name, _ in fleet.outliers] == [("ssh://ops@gpu3", EFFICIENCY)]
    text = terminal.render_table(fleet)
    assert "degraded: ssh://ops@gpu3" in text and EFFICIENCY in text
    host = json.loads(jsonreport.render_json(fleet))["hosts"]["ssh://ops@gpu3"]
    assert host["status"] == DEGRADED


def test_the_outlier_floor_decides_and_a_rate_the_suite_does_not_judge_stays_out():
    """The suite marks the DDP rate not fleet-judged (its --baseline judges it; other hosts' CPUs
    differ): it is shown, but 60% low it never makes the host degraded; the efficiency does."""
    hosts = [ddp_host(1, 0.95, 5000.0), ddp_host(2, 0.94, 5010.0), ddp_host(3, 0.50, 2000.0)]
    lenient = analysis.analyse(hosts, outlier_floor=0.3)  # 53% is above a 30% floor
    assert [o.status for o in lenient.outcomes] == [READY, READY, READY]
    strict = analysis.analyse(hosts)
    names = sorted(name for row, name, _ in strict.outliers if row.host == "ssh://ops@gpu3")
    assert names == [EFFICIENCY]
    rate = next(
        row for row in strict.rows if row.host == "ssh://ops@gpu3" and RATE in row.figures
    ).figures[RATE]
    assert rate.value == 2000.0 and rate.median is None and not rate.outlier


DATAPARALLEL = "dataparallel samples/s (2 GPUs, one process)"


def dataparallel_only_host(host: int, rate: float) -> HostOutcome:
    """A two-GPU host whose only figure is the information-only DataParallel row."""
    gpus = [gpu(0, H100, host), gpu(1, H100, host)]
    test = "checks/test_07_multigpu.py::test_ddp_training"
    records = [
        Record(
            DATAPARALLEL,
            gpus[0]["uuid"],
            f"{rate:.0f} samples/s",
            "reported beside DDP, never judged",
            "info",
            0.0,
            value=rate,
            test=test,
        )
    ]  # as reports before the fleet_judged marker wrote it: the verdict decides
    report = build_json(
        records,
        {"driver_version": "550.54.15", "gpus": gpus, "error": None},
        gpus,
        {"torch": {"version": "2.5.1"}},
        0,
    )
    return HostOutcome(f"ssh://ops@gpu{host}", READY, "", report=report)


def test_an_information_only_dataparallel_figure_never_makes_a_host_degraded():
    """The review's reproduction: three H100 hosts at 3000, 3050 and 2600 samples/s (87% of the
    median) made the third DEGRADED and the fleet not ready."""
    fleet = analysis.analyse(
        [
            dataparallel_only_host(1, 3000.0),
            dataparallel_only_host(2, 3050.0),
            dataparallel_only_host(3, 2600.0),
        ]
    )
    assert (
        [o.status for o in fleet.outcomes] == [READY, READY, READY]
        and fleet.ready
        and not fleet.outliers
    )
