"""The suite reads one NVML module per run (Suite.nvml: a replay, a recorder, a plugin's synthetic
host or pynvml), and it reaches each reader as an argument: a call that leaves it out would read
this host's pynvml in the middle of a replay, or leave an answer out of a --record recording."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

from nvml_synthetic import TWO_H100_HOST
from suiteruns import health_run

from validate.host import nvml
from validate.host.capture import load_capture
from validate.host.replay import ReplayNvml
from validate.measure import memory_modes

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).parent / "captures"
#: Every function of the suite that reads NVML, by the name a call site uses; each names its module
#: `nv`.
READERS = {
    "read_host": nvml.read_host,
    "gpu_used_memory": nvml.gpu_used_memory,
    "process_used_memory": nvml.process_used_memory,
    "Sampler": nvml.Sampler,
    "reread_clock_events": nvml.reread_clock_events,
    "outside_measurer": memory_modes.outside_measurer,
}


def calls_without_module(source: str, filename: str = "<planted>") -> list[str]:
    """Each call in `source` of a reader that does not pass `nv`, as 'line: call'."""
    out = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in READERS:
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            continue  # *args or **kwargs: cannot be told here (the suite has none)
        signature = inspect.signature(READERS[name])
        try:
            bound = signature.bind_partial(
                *range(len(node.args)), **{k.arg: None for k in node.keywords if k.arg}
            )
        except TypeError:
            bound = None
        if bound is None or "nv" not in bound.arguments:
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_every_call_of_an_nvml_reader_in_the_suite_passes_its_module():
    found = []
    for path in sorted((ROOT / "validate").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel}:{line}" for line in calls_without_module(path.read_text(), rel)]
    assert found == [], "pass the suite's NVML module (suite.nvml)"


def test_the_check_names_a_call_that_leaves_the_module_out():
    planted = (
        "host = nvml.read_host()\n"
        "nvml.reread_clock_events(gpu.uuid, interval_s=0.3)\n"
        "outside_measurer(gpu.uuid)\n"
        "nvml.Sampler([g.uuid for g in gpus])\n"
        "host = nvml.read_host(suite.nvml)\n"
        "nvml.reread_clock_events(gpu.uuid, suite.nvml, interval_s=0.3)\n"
        "nvml.reread_clock_events(gpu.uuid, nv=suite.nvml)\n"
        "outside_measurer(gpu.uuid, self.nvml)\n"
        "nvml.Sampler(uuids, suite.nvml)\n"
        "nvml.gpu_used_memory(uuid, nv)\n"
    )
    assert [line.split(":")[0] for line in calls_without_module(planted)] == ["1", "2", "3", "4"]


def _suite(tmp_path: Path, *args: str) -> dict:
    """`python -m validate --health-only` on the SYNTHETIC two-H100 host plugin; its JSON report."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return health_run(tmp_path, "synthetic_gpu_host", *args)[1]


def _gpu_sections(report: dict) -> set[str]:
    return {key for key in report if key.startswith("GPU-")}


def test_a_plugins_nvml_module_is_read_recorded_and_given_way_to_by_a_replay(tmp_path):
    """The hook's answer is this host's NVML for the run (the synthetic GPUs are judged), a
    --record run records its answers, and --replay reads the capture without asking it."""
    synthetic = {gpu["uuid"] for gpu in TWO_H100_HOST["gpus"]}
    assert _gpu_sections(_suite(tmp_path / "live", "--record", str(tmp_path / "rec"))) == synthetic
    (recording,) = (tmp_path / "rec").glob("gpuenv-recording-*.json")
    devices = json.loads(recording.read_text())["devices"]
    assert {d.get("nvmlDeviceGetUUID") for d in devices} == synthetic
    capture = CAPTURES / "nvidia-smi-xml" / "h100x8-580.105.08.xml"
    replayed = _gpu_sections(_suite(tmp_path / "replay", f"--replay={capture}"))
    assert replayed == {g.uuid for g in nvml.read_host(ReplayNvml(load_capture(str(capture)))).gpus}
    assert len(replayed) == 8 and not replayed & synthetic
