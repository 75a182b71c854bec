"""Each way the engine can fail to give GPUs to a container gets its own fix (issue 17, item 9):
the pure mapping gpuenv.engine.gpu_runtime_problem, fed the engine errors recorded from public
reports in nvidia_container_errors.yaml (each entry names its source)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuenv.engine import GPU_RUNTIME_CAUSES, gpu_runtime_problem

FIXTURES = yaml.safe_load((Path(__file__).parent / "nvidia_container_errors.yaml").read_text())
TOOLKIT = "install the NVIDIA Container Toolkit"


@pytest.mark.parametrize(
    "case",
    FIXTURES,
    ids=lambda c: f"{c['cause']}:{c['source'].rsplit('/', 3)[-3]}#{c['source'].rsplit('/', 1)[-1]}",
)
def test_each_recorded_error_gets_its_cause(case):
    found = gpu_runtime_problem(case["text"])
    assert found is not None, case["text"]
    cause, fix = found
    assert cause == case["cause"]
    # only a missing runtime is answered with "install the toolkit"
    assert (TOOLKIT in fix) is (cause == "no gpu runtime"), fix


def test_every_cause_has_a_recorded_error_and_its_own_fix():
    causes = [entry.cause for entry in GPU_RUNTIME_CAUSES]
    assert len(set(causes)) == len(causes)
    assert set(causes) == {case["cause"] for case in FIXTURES}
    fixes = [entry.fix for entry in GPU_RUNTIME_CAUSES]
    assert len(set(fixes)) == len(fixes)


def test_every_fixture_cites_a_public_source_and_unconfirmed_ones_say_so():
    for case in FIXTURES:
        assert case["source"].startswith("https://github.com/"), case
        if case.get("recorded") is False:
            assert case["note"].startswith("unconfirmed:"), case


@pytest.mark.parametrize(
    "text",
    [
        "pull access denied for x, repository does not exist",
        "No such image: gpuenv:latest",
        'exec: "python": executable file not found in $PATH',
    ],
)
def test_other_engine_errors_are_not_gpu_problems(text):
    assert gpu_runtime_problem(text) is None
