"""The multi-GPU training check's pure parts: the scaling table, the verdicts (identical
parameters, slowest rank, efficiency by the speed floors' rules), the job summary and which rank
a failed rendezvous blames. The real runs are in test_validate_multigpu_run.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from validate.judge.scaling import (
    ScalingReference,
    dataparallel_verdict,
    efficiency_verdict,
    identical_verdict,
    load_scaling,
    no_p2p_text,
    parse_scaling,
    rank_labels,
    slowest_rank_verdict,
)
from validate.judge.thresholds import FAIL, INFO, NOT_JUDGED, PASS, WARN
from validate.measure.ddp import missing_ranks, summarise
from validate.simpleyaml import PeakTableError, parse_simple_yaml

NVLINK_OTHER = ScalingReference("nvlink", 8, 0.97, "ResNet-50", False, "https://example.org/a")
NVLINK_LIKE = ScalingReference("nvlink", 8, 0.9, "the suite's DDP job", True, "https://example.org/b")


def test_the_shipped_table_loads_with_and_without_pyyaml():
    rows = load_scaling()
    assert rows and all(r.source.startswith("https://") for r in rows)
    from validate.judge.scaling import SCALING_FILE

    assert parse_scaling(parse_simple_yaml(SCALING_FILE.read_text())) == rows


@pytest.mark.parametrize("row, fragment", [
    ({"interconnect": "token-ring", "gpus": 8, "efficiency": 0.9, "workload": "x", "like_suite": False, "source": "https://a"}, "interconnect"),
    ({"interconnect": "pcie", "gpus": 8, "efficiency": 1.5, "workload": "x", "like_suite": False, "source": "https://a"}, "efficiency"),
    ({"interconnect": "pcie", "gpus": 1, "efficiency": 0.9, "workload": "x", "like_suite": False, "source": "https://a"}, "gpus"),
    ({"interconnect": "pcie", "gpus": 8, "efficiency": 0.9, "workload": "x", "like_suite": False, "source": "a blog"}, "source"),
    ({"interconnect": "pcie", "gpus": 8, "efficiency": 0.9, "workload": "x", "source": "https://a"}, "like_suite"),
])
def test_a_row_without_its_facts_is_refused(row, fragment):
    with pytest.raises(PeakTableError, match=fragment):
        parse_scaling({"scaling": [row]})


def test_identical_parameters_pass_and_a_differing_rank_is_named():
    labels = ["rank 0 (GPU 0 GPU-aaaa)", "rank 1 (GPU 1 GPU-bbbb)", "rank 2 (GPU 2 GPU-cccc)"]
    assert identical_verdict(["x", "x", "x"], labels).verdict == PASS
    verdict = identical_verdict(["x", "x", "y"], labels)
    assert verdict.verdict == FAIL and "rank 2 (GPU 2 GPU-cccc)" in verdict.reason and "rank 1" not in verdict.reason


def test_the_slowest_rank_is_named_below_the_peers_share_on_gpus_and_half_on_a_cpu():
    labels = ["rank 0 (GPU 0)", "rank 1 (GPU 1)", "rank 2 (GPU 2)", "rank 3 (GPU 3)"]
    measured, verdict = slowest_rank_verdict([1000, 1010, 800, 990], labels, on_cpu=False)
    assert verdict.verdict == FAIL and "rank 2 (GPU 2)" in verdict.reason and "rank 2 (GPU 2) 800" in measured
    assert slowest_rank_verdict([1000, 1010, 900, 990], labels, on_cpu=False)[1].verdict == PASS
    assert slowest_rank_verdict([1000, 300], labels[:2], on_cpu=True)[1].verdict == PASS  # shared cores: noise
    assert slowest_rank_verdict([1000, 100], labels[:2], on_cpu=True)[1].verdict == FAIL


def test_efficiency_follows_the_speed_floors_rules():
    # --baseline wins, within its tolerance
    assert efficiency_verdict(0.5, "nvlink", 8, [NVLINK_LIKE], baseline=0.9).verdict == FAIL
    assert efficiency_verdict(0.85, "nvlink", 8, [NVLINK_LIKE], baseline=0.9).verdict == PASS
    # a like-for-like reference fails below 0.75 of it
    assert efficiency_verdict(0.6, "nvlink", 8, [NVLINK_LIKE]).verdict == FAIL
    assert efficiency_verdict(0.7, "nvlink", 8, [NVLINK_LIKE]).verdict == PASS
    # another workload's figure only warns, and says so
    other = efficiency_verdict(0.3, "nvlink", 8, [NVLINK_OTHER])
    assert other.verdict == WARN and "another model" in other.reason and "https://example.org/a" in other.threshold
    # no reference for the interconnect, or ranks on a CPU: not judged
    assert efficiency_verdict(0.3, "pcie", 8, [NVLINK_LIKE]).verdict == NOT_JUDGED
    assert efficiency_verdict(0.3, None, 2, [NVLINK_LIKE]).verdict == NOT_JUDGED



def test_the_shipped_table_judges_pcie_and_nvlink_hosts_warn_only():
    """Both shipped rows are other workloads' figures (ResNet-50), so a low efficiency on either
    interconnect warns, citing its source, and never fails; a PCIe host is judged at all."""
    rows = load_scaling()
    for kind in ("nvlink", "pcie"):
        row = next(r for r in rows if r.interconnect == kind)
        assert not row.like_suite
        low = efficiency_verdict(0.5 * row.efficiency, kind, row.gpus, rows)
        assert low.verdict == WARN and row.source in low.threshold and "another model" in low.reason
        assert efficiency_verdict(row.efficiency, kind, row.gpus, rows).verdict == PASS
    # fabrics between nodes have no row: the multi-node job's efficiency is not judged by a reference
    assert not [r for r in rows if r.interconnect in ("infiniband", "ethernet")]

def test_a_pcie_host_without_p2p_is_named_not_failed():
    pcie = ScalingReference("pcie", 4, 0.9, "the suite's DDP job", True, "https://example.org/c")
    assert efficiency_verdict(0.5, "pcie", 4, [pcie]).verdict == FAIL
    verdict = efficiency_verdict(0.5, "pcie", 4, [pcie], no_p2p=True)
    assert verdict.verdict == WARN and "without peer-to-peer" in verdict.reason


def test_dataparallel_is_reported_with_the_gap_and_never_fails():
    measured, verdict = dataparallel_verdict(250.0, 1000.0)
    assert verdict.verdict == INFO and "4.00x" in measured
    assert dataparallel_verdict(None, 1000.0, "RuntimeError: boom")[1].verdict == WARN


def test_summary_takes_the_slowest_rank_for_the_job_and_the_median_for_one_gpu():
    ranks = [
        {"batch": 32, "timed_steps": 10, "ddp_seconds": 1.0, "local_seconds": 0.5, "checksum": "a", "first_loss": 2.3, "last_loss": 0.1},
        {"batch": 32, "timed_steps": 10, "ddp_seconds": 2.0, "local_seconds": 0.5, "checksum": "a", "first_loss": 2.3, "last_loss": 0.2},
    ]
    out = summarise(ranks)
    assert out["samples_per_s"] == 10 * 32 * 2 / 2.0  # the slow rank sets the pace
    assert out["single_samples_per_s"] == 640.0
    assert out["speedup"] == 0.5 and out["efficiency"] == 0.25


def test_a_failed_rendezvous_blames_the_ranks_that_never_came_first():
    assert missing_ranks(4, arrived={0, 1, 3}, joined=set()) == ("never reached the rendezvous", [2])
    why, ranks = missing_ranks(2, arrived={0, 1}, joined={0})
    assert ranks == [1] and "first collective" in why


def test_rank_labels_name_the_nvml_gpu_by_uuid():
    gpus = [SimpleNamespace(index=0, uuid="GPU-aaaaaaaa-0000"), SimpleNamespace(index=1, uuid="GPU-bbbbbbbb-0000")]
    # CUDA_VISIBLE_DEVICES may reorder: rank 0 runs on NVML's GPU 1
    assert rank_labels(["bbbbbbbb-0000", "aaaaaaaa-0000"], gpus) == ["rank 0 (GPU 1 GPU-bbbbbbbb)", "rank 1 (GPU 0 GPU-aaaaaaaa)"]
    assert rank_labels([None, None], []) == ["rank 0 (cpu)", "rank 1 (cpu)"]


def test_a_pcie_host_without_peer_access_is_named_from_the_pairs():
    assert no_p2p_text({"0-1": False, "1-0": False}, "pcie") == "PCIe without P2P between 0-1, 1-0"
    assert no_p2p_text({"0-1": True, "1-0": True}, "pcie") is None
    assert no_p2p_text({"0-1": False}, "nvlink") is None and no_p2p_text(None, "pcie") is None
