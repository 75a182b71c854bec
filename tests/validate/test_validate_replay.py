"""Real captures of real servers replayed through the suite (`python -m validate --replay`), with
the verdict an operator would give; fault variants made from them; gpuenv's own recording made
through the replay seam and replayed again (same verdicts). The captures and their licences are
in tests/validate/captures/ (README there says where each came from)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from suiteruns import validate_in_process

from validate.host import nvml
from validate.host.capture import CaptureError, compute_capability_for, load_capture, parse_capture
from validate.host.masking import normalise_pci_bus_id
from validate.host.replay import RecordingNvml, ReplayNvml

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).parent / "captures"
XML = CAPTURES / "nvidia-smi-xml"
TEXT = CAPTURES / "nvidia-smi-text"
ALL = sorted(p for p in [*XML.glob("*.xml"), *TEXT.glob("*.txt")])
HEALTHY = [p for p in ALL if "gpu-lost" not in p.name]
H100 = XML / "h100x8-580.105.08.xml"


def host_of(path: Path) -> nvml.HostInfo:
    return nvml.read_host(ReplayNvml(load_capture(path)))


# --- the parser, in process -------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_capture_reads_every_gpu(path):
    host = host_of(path)
    assert (
        host.error is None and host.driver_version and re.match(r"^\d+\.\d+", host.driver_version)
    )
    assert host.replayed_from and path.name in host.replayed_from
    for gpu in host.gpus:
        assert gpu.uuid.startswith("GPU-") and gpu.name.startswith(("NVIDIA", "Tesla"))
        assert gpu.memory_total_bytes and gpu.power_limit_watts and gpu.pcie_link_gen_max
        assert gpu.compute_capability, f"{gpu.name} is in validate/host/gpu_archs.yaml"


def test_counts_and_fields_of_real_hosts():
    assert len(host_of(XML / "b200x8-580.105.08.xml").gpus) == 8
    assert all(g.persistence_mode is False for g in host_of(XML / "b200x8-580.105.08.xml").gpus)
    gb200 = host_of(XML / "gb200x4-arm64.xml").gpus
    assert [(g.pcie_link_gen, g.pcie_link_gen_gpu_max) for g in gb200] == [(5, 6)] * 4
    a100 = host_of(XML / "a100-sxm4-40gb-570.148.08.xml").gpus[0]
    assert (a100.compute_capability, a100.remapped_rows_pending, a100.applications_clocks_mhz) == (
        "8.0",
        False,
        (1095, 1215),
    )


def test_mig_instances_come_with_their_uuids_and_sm_counts():
    """The text capture's MIG devices take their UUIDs from the `nvidia-smi -L` section."""
    gpu = host_of(TEXT / "linux-x86_64__nvidia-h100-mig__590.48.01.txt").gpus[0]
    assert gpu.mig_enabled
    assert [(m.uuid, m.multiprocessor_count) for m in gpu.mig_devices] == [
        ("MIG-00000000-0000-0000-0000-000000000000", 60),
        ("MIG-00000001-0000-0000-0000-000000000001", 32),
        ("MIG-00000002-0000-0000-0000-000000000002", 16),
        ("MIG-00000003-0000-0000-0000-000000000003", 16),
    ]


def test_a_text_capture_of_idle_and_load_gives_the_idle_host():
    """The H100 capture's load run has memory hogs on the GPU; the idle run (validated) has none."""
    gpu = host_of(TEXT / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt").gpus[0]
    assert gpu.compute_processes == [] and gpu.utilization_percent == 0


def test_desktop_processes_are_graphics_not_compute():
    gpu = host_of(TEXT / "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt").gpus[0]
    assert gpu.compute_processes == []
    assert "/usr/bin/kwin_wayland" in [
        p.name for p in gpu.graphics_processes
    ]  # type C+G: a compositor


def test_the_mock_lost_gpu_is_unreadable_and_named():
    host = host_of(XML / "MOCK-gb200-gpu-lost.xml")
    assert [g.index for g in host.gpus] == [0] and [u.index for u in host.unreadable] == [1]
    lost = host.unreadable[0]
    assert (
        lost.pci_bus_id == "0000:0B:00.0"
        and "NVMLError_GpuIsLost" in lost.error
        and "reset the GPU" in lost.error
    )


def test_a_gpu_that_needs_a_reset_is_reported_with_the_fix():
    text = variant(
        2, lambda b: b.replace("<used>0 MiB</used>", "<used>[GPU requires reset]</used>", 1)
    )
    host = nvml.read_host(ReplayNvml(parse_capture(text, "reset.xml")))
    assert [u.index for u in host.unreadable] == [2] and len(host.gpus) == 7
    assert (
        "NVMLError_ResetRequired" in host.unreadable[0].error
        and "nvidia-smi -r -i 2" in host.unreadable[0].error
    )


@pytest.mark.parametrize(
    "path",
    [H100, TEXT / "linux-x86_64__nvidia-h100-mig__590.48.01.txt", XML / "MOCK-gb200-gpu-lost.xml"],
    ids=lambda p: p.name,
)
def test_recording_through_the_replay_seam_replays_the_same_host(path):
    """RecordingNvml keeps every answer read_host used; replaying that recording reads the same
    host."""
    recorder = RecordingNvml(ReplayNvml(load_capture(path)), source="test")
    first = nvml.read_host(recorder)
    data = json.loads(json.dumps(recorder.recording()))  # what --record writes: plain JSON
    second = nvml.read_host(ReplayNvml(parse_capture(json.dumps(data), "recording.json")))
    assert second.replayed_from == f"test, replaying {first.replayed_from}"
    first.replayed_from = second.replayed_from = None
    assert first.to_dict() == second.to_dict()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<html></html>", "not nvidia-smi's <nvidia_smi_log>"),
        ("<nvidia_smi_log>", "not well-formed"),
        ('{"format": "something-else/1"}', "not a gpuenv-nvml-recording/1 file"),
        (
            '{"format": "gpuenv-nvml-recording/9", "system": {}, "devices": []}',
            "newer than this suite reads",
        ),
        ("GPU 0: nothing", "no '==NVSMI LOG==' block"),
    ],
)
def test_a_file_that_is_no_capture_says_what_to_give(text, problem):
    with pytest.raises(CaptureError, match=re.escape(problem)):
        parse_capture(text, "host.file")


def test_unknown_product_has_no_compute_capability():
    assert compute_capability_for("NVIDIA H100 80GB HBM3").compute_capability == "9.0"
    assert compute_capability_for("NVIDIA Imaginary 9000") is None


def test_pci_bus_id_unknown_does_not_crash():
    """ "unknown" is what nvml.py gives when the PCI query fails: it matches nothing, never
    raises."""
    assert normalise_pci_bus_id("unknown") == "unknown"
    assert (
        normalise_pci_bus_id("00000000:17:00.0")
        == normalise_pci_bus_id("0000:17:00.0")
        == "0000:17:00.0"
    )


# --- the suite end to end ---------------------------------------------------------------------


def _gpu_block(text: str, index: int) -> tuple[int, int]:
    starts = [m.start() for m in re.finditer(r"<gpu id=", text)]
    return starts[index], text.index("</gpu>", starts[index])


def variant(index: int, edit) -> str:
    """The H100 capture with GPU `index` changed by `edit(block) -> block`."""
    text = H100.read_text(encoding="utf-8")
    start, end = _gpu_block(text, index)
    return text[:start] + edit(text[start:end]) + text[end:]


PROCESS = (
    "<processes>\n<process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>"
    "<pid>4242</pid><type>C</type><process_name>python "
    "train.py</process_name><used_memory>10240 MiB</used_memory></process_info>\n"
)
VARIANTS = {
    "power-cap-half": (
        lambda b: b.replace("<current_power_limit>700.00 W", "<current_power_limit>350.00 W"),
        "power limit",
        "350 W is below the default 700 W",
    ),
    "lost-gpu": (
        lambda b: re.sub(r"(<fb_memory_usage>\s*<total>)[^<]*", r"\1GPU is lost", b),
        "GPU 3 readable",
        "GpuIsLost",
    ),
    "row-remap-pending": (
        lambda b: b.replace("<remapped_row_pending>No", "<remapped_row_pending>Yes"),
        "row remapping",
        "GPU 3 has a row remap pending",
    ),
    "second-process": (
        lambda b: b.replace("<processes>\n", PROCESS, 1),
        "other compute processes",
        "PID 4242 (python train.py) holding 10.00 GiB",
    ),
    "retired-page-pending": (
        lambda b: b.replace("<pending_retirement>N/A", "<pending_retirement>Yes"),
        "retired pages",
        "GPU 3 has retired pages pending",
    ),
    "locked-clocks": (
        lambda b: re.sub(r"(<applications_clocks>\s*<graphics_clock>)[^<]*", r"\g<1>1410 MHz", b),
        "user-set clocks",
        "applications clocks set to 1410/",
    ),
}


def run_suite(*args: str, env_extra: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    env.update(env_extra or {})
    done = subprocess.run(
        [sys.executable, "-m", "validate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {"status": done.returncode, "out": done.stdout + done.stderr}


def replay_suite(*args: str, env_extra: dict[str, str] | None = None) -> dict:
    """run_suite's result, the suite run in this process (suiteruns.validate_in_process): for the
    tests that judge a replay's verdicts and reports; the command's own process is proven by
    test_replay_runs_with_only_the_validate_folder and the bad-input tests."""
    status, stdout, stderr = validate_in_process(
        list(args),
        env=env_extra,
        unset=("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
    )
    return {"status": status, "out": stdout + stderr}


@pytest.fixture(scope="module")
def replays(tmp_path_factory) -> dict[str, dict]:
    """Every capture, every variant, and each recording round trip, run through the suite (in this
    process, one after another)."""
    tmp = tmp_path_factory.mktemp("replays")
    jobs: dict[str, Path] = {p.name: p for p in ALL}
    for name, (edit, _, _) in VARIANTS.items():
        path = tmp / f"h100-{name}.xml"
        path.write_text(variant(3, edit), encoding="utf-8")
        jobs[f"variant:{name}"] = path

    def run(item: tuple[str, Path]) -> tuple[str, dict]:
        key, path = item
        out = tmp / re.sub(r"[^\w.-]", "_", key)
        out.mkdir()
        result = replay_suite(
            "--replay",
            str(path),
            "--json",
            str(out / "report.json"),
            "--junit",
            str(out / "junit.xml"),
            "--record",
            str(out / "rec"),
        )
        result["json"] = json.loads((out / "report.json").read_text(encoding="utf-8"))
        result["junit"] = (out / "junit.xml").read_text(encoding="utf-8")
        recordings = sorted((out / "rec").glob("gpuenv-recording-*.json"))
        result["recording"] = recordings[0] if recordings else None
        return key, result

    results = dict(run(item) for item in jobs.items())
    again = {f"again:{k}": v["recording"] for k, v in results.items() if k in ROUND_TRIP}
    results.update(run(item) for item in again.items())
    return results


ROUND_TRIP = (
    "b200x8-580.105.08.xml",
    "MOCK-gb200-gpu-lost.xml",
    "linux-x86_64__nvidia-h100-mig__590.48.01.txt",
)


def checks(report: dict) -> list[dict]:
    return [
        c
        for key, section in report.items()
        if isinstance(section, dict) and "checks" in section
        for c in section["checks"]
    ]


def verdicts(report: dict) -> dict[tuple[str, str | None], str]:
    return {(c["check"], c["gpu"]): c["verdict"] for c in checks(report)}


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.name)
def test_a_healthy_real_host_reads_ready(path, replays):
    result = replays[path.name]
    report = result["json"]
    assert result["status"] == 0, result["out"][-3000:]
    assert report["summary"]["failed"] == 0 and report["summary"]["ok"]
    assert report["host"]["nvml"]["replayed_from"].startswith(str(path))
    assert all(c["replayed"] for c in checks(report)), "every row says it was replayed"
    assert "REPLAYED" in result["out"] and "(replayed)" in result["out"]
    assert 'name="replayed"' in result["junit"]
    ET.fromstring(result["junit"])  # well-formed JUnit
    gpus = [s for k, s in report.items() if k.startswith("GPU-")]
    assert gpus, "per-GPU sections"
    for section in gpus:  # the NVML-driven checks ran on every GPU
        ran = {c["check"]: c["verdict"] for c in section["checks"]}
        for check in ("power limit", "persistence mode", "pcie generation"):
            assert ran[check] != "skip", (check, ran)
        # Each of these captures lists its processes and its default clocks, so these rows are
        # judged; a capture without them skips (test_validate_host_variants.py).
        assert (ran["other compute processes"], ran["user-set clocks"]) == ("pass", "pass"), ran
        assert ran["torch computes on gpu"] == "skip"
    skipped = [c for c in checks(report) if c["check"] == "matmul throughput"]
    assert skipped and all(
        "replayed host" in c["reason"] and "PyTorch/TensorFlow" in c["reason"] for c in skipped
    )


def test_persistence_off_is_information_on_the_b200(replays):
    rows = [
        c
        for c in checks(replays["b200x8-580.105.08.xml"]["json"])
        if c["check"] == "persistence mode"
    ]
    assert len(rows) == 8 and all(
        c["verdict"] == "info" and "persistence mode is off" in c["reason"] for c in rows
    )


def test_gb200_gen5_of_device_max_6_is_as_built(replays):
    rows = [
        c for c in checks(replays["gb200x4-arm64.xml"]["json"]) if c["check"] == "pcie generation"
    ]
    assert len(rows) == 4 and all(
        c["verdict"] == "info" and "as built" in c["reason"] and "gen6" in c["reason"] for c in rows
    )


def test_a_busy_capture_is_judged_under_load(replays):
    """The L40S capture was taken at 100% utilisation: its link (gen4 x16) is judged, and passes."""
    rows = {
        c["check"]: c
        for c in checks(replays["linux-x86_64__nvidia-l40s__595.80.txt"]["json"])
        if c["gpu"]
    }
    assert rows["pcie generation"]["verdict"] == "pass" and rows["pcie generation"]["value"] == 4
    assert rows["pcie link width"]["verdict"] == "pass" and rows["pcie link width"]["value"] == 16


def test_a_workstation_desktop_warns(replays):
    rows = [
        c
        for c in checks(
            replays["linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"]["json"]
        )
        if c["check"] == "graphics processes"
    ]
    assert rows[0]["verdict"] == "warn" and "kwin_wayland" in rows[0]["reason"]


@pytest.mark.parametrize(
    "name",
    [
        "linux-x86_64__nvidia-h100-mig__590.48.01.txt",
        "linux-x86_64__nvidia-h200-mig__590.48.01.txt",
    ],
)
def test_a_mig_host_reads_ready_with_its_instances_as_devices(name, replays):
    report = replays[name]["json"]
    rows = {c["check"]: c for c in checks(report)}
    assert rows["mig mode"]["verdict"] == "pass"
    assert (
        rows["NVML GPU count"]["verdict"] == "pass"
        and "in MIG mode with" in rows["NVML GPU count"]["measured"]
    )
    gpu = report["host"]["nvml"]["gpus"][0]
    assert gpu["mig_enabled"] and all(m["multiprocessor_count"] for m in gpu["mig_devices"])


def test_the_mock_lost_gpu_fails_naming_it(replays):
    result = replays["MOCK-gb200-gpu-lost.xml"]
    assert result["status"] == 1 and "NOT READY" in result["out"]
    failed = {
        (c["check"], c["gpu"]): c["reason"]
        for c in checks(result["json"])
        if c["verdict"] == "fail"
    }
    assert (
        "0000:0B:00.0" in failed[("GPU 1 readable", None)]
        and "GpuIsLost" in failed[("GPU 1 readable", None)]
    )
    gpu0 = "GPU-b200b200-0000-0000-0000-000000000000"
    assert "GPU 0: 5 uncorrected ECC errors" in failed[("ecc uncorrected errors", gpu0)]
    assert "GPU 0 failed to remap a memory row" in failed[("row remapping", gpu0)]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_fault_made_from_a_real_capture_fails_naming_the_gpu(name, replays):
    _, check, reason = VARIANTS[name]
    result = replays[f"variant:{name}"]
    assert result["status"] == 1, result["out"][-2000:]
    failed = [c for c in checks(result["json"]) if c["verdict"] == "fail"]
    assert [c["check"] for c in failed] == [check], failed
    gpu3 = "GPU-00000003-0000-0000-0000-000000000003"
    assert failed[0]["gpu"] == (None if name == "lost-gpu" else gpu3)
    assert reason in failed[0]["reason"] and "GPU 3" in failed[0]["reason"]
    if name == "power-cap-half":
        assert "nvidia-smi -i 3 -pl 700" in failed[0]["reason"]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_a_recording_made_through_the_replay_seam_replays_to_the_same_verdicts(name, replays):
    """--record while replaying a capture writes gpuenv-nvml-recording/1; replaying that file gives
    the same verdict on every NVML-driven check (a real round trip through files, no mock)."""
    first, second = replays[name], replays[f"again:{name}"]
    recording = json.loads(first["recording"].read_text(encoding="utf-8"))
    assert recording["format"] == "gpuenv-nvml-recording/1" and recording["records"]
    before = {k: v for k, v in verdicts(first["json"]).items() if v != "skip"}
    after = {k: v for k, v in verdicts(second["json"]).items() if v != "skip"}
    assert before == after and before
    assert first["status"] == second["status"]


MIG_TEXT = TEXT / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
MIG_UUIDS = [f"MIG-0000000{i}-0000-0000-0000-00000000000{i}" for i in range(4)]


@pytest.mark.parametrize(
    ("env", "status", "expected"),
    [
        ({"NVIDIA_VISIBLE_DEVICES": ",".join(MIG_UUIDS)}, 0, ("NVML GPU count", "pass")),
        ({"NVIDIA_VISIBLE_DEVICES": ",".join(MIG_UUIDS[:2])}, 1, ("NVML GPU count", "fail")),
        ({"CUDA_VISIBLE_DEVICES": MIG_UUIDS[2]}, 0, ("visible devices", "pass")),
        ({"CUDA_VISIBLE_DEVICES": "MIG-11111111-typo"}, 1, ("visible devices", "fail")),
    ],
    ids=["all-instances-given", "two-of-four-given", "one-instance-selected", "typo-in-mig-uuid"],
)
def test_mig_instances_are_the_devices_expected(env, status, expected, tmp_path):
    """A container given MIG instances (NVIDIA_VISIBLE_DEVICES=MIG-...) must see them as its
    devices; CUDA_VISIBLE_DEVICES naming an instance validates that one, and a typo fails."""
    result = replay_suite(
        "--replay", str(MIG_TEXT), "--json", str(tmp_path / "r.json"), env_extra=env
    )
    assert result["status"] == status, result["out"][-2000:]
    rows = {
        c["check"]: c for c in checks(json.loads((tmp_path / "r.json").read_text(encoding="utf-8")))
    }
    check, verdict = expected
    assert rows[check]["verdict"] == verdict, rows[check]


def test_replay_runs_with_only_the_validate_folder(tmp_path):
    """Images and bare servers get only validate/: the replay needs nothing else (stdlib XML,
    no PyYAML, no nvidia-ml-py: the replay answers NVML's calls itself)."""
    import shutil

    shutil.copytree(
        ROOT / "validate", tmp_path / "validate", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("PYTHONPATH", "GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            str(XML / "MOCK-gb200-gpu-lost.xml"),
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"suite: {tmp_path / 'validate'}" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert any(c["check"] == "GPU 1 readable" and c["verdict"] == "fail" for c in checks(report))


def test_a_recording_holds_the_framework_measurements_of_its_host(tmp_path):
    """--record on this machine (no GPU: NVML's start-up failure is recorded too) keeps what
    PyTorch measured; --replay of it shows that measurement as recorded instead of skipping."""
    pytest.importorskip("torch")
    recorded = run_suite(
        "--record",
        str(tmp_path / "rec"),
        "--expect-gpus",
        "0",
        "-k",
        "torch_computes_on_cpu or test_driver",
    )
    assert recorded["status"] == 0, recorded["out"][-2000:]
    path = next((tmp_path / "rec").glob("gpuenv-recording-*.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    assert "nvmlInit" in data["system"]
    replayed = run_suite(
        "--replay",
        str(path),
        "--expect-gpus",
        "0",
        "--json",
        str(tmp_path / "r.json"),
        "-k",
        "torch_computes_on_cpu or recorded or test_driver",
    )
    assert replayed["status"] == 0, replayed["out"][-2000:]
    rows = {
        c["check"]: c for c in checks(json.loads((tmp_path / "r.json").read_text(encoding="utf-8")))
    }
    assert rows["recorded: torch matmul correct (cpu)"]["verdict"] == "pass"
    assert (
        rows["torch computes on cpu"]["verdict"] == "skip"
        and "recorded measurements" in rows["torch computes on cpu"]["reason"]
    )
    nvml_error = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["host"]["nvml"][
        "error"
    ]
    live = nvml.read_host()
    assert nvml_error == live.error  # the recorded host's NVML state, replayed


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--replay", "/nonexistent/server.xml"],
            "--replay: /nonexistent/server.xml: it does not exist",
        ),
        (["--replay", str(CAPTURES / "README.md")], "no '==NVSMI LOG==' block"),
        (["--record", str(H100)], "is a file: give a folder for the recording"),
    ],
)
def test_bad_replay_or_record_is_one_line_before_any_check(args, said):
    result = run_suite(*args)
    assert result["status"] == 2 and said in result["out"]
    assert result["out"].strip().count("\n") == 0 and "Traceback" not in result["out"]


def test_older_driver_element_names_are_read():
    """Drivers before the 'clocks event' rename print clocks_throttle_reasons and power_readings
    (with enforced_power_limit): the same answers come out."""
    text = (XML / "a100-sxm4-40gb-570.148.08.xml").read_text(encoding="utf-8")
    old = (
        text.replace("clocks_event_reason", "clocks_throttle_reason")
        .replace("<gpu_power_readings>", "<power_readings>")
        .replace("</gpu_power_readings>", "</power_readings>")
        .replace("current_power_limit>", "enforced_power_limit>")
        .replace(
            "<clocks_throttle_reason_sw_power_cap>Not Active",
            "<clocks_throttle_reason_sw_power_cap>Active",
        )
    )
    new_gpu = nvml.read_host(ReplayNvml(parse_capture(text, "new.xml"))).gpus[0]
    old_gpu = nvml.read_host(ReplayNvml(parse_capture(old, "old.xml"))).gpus[0]
    assert old_gpu.power_limit_watts == new_gpu.power_limit_watts == 400.0
    assert old_gpu.throttle_reasons == [
        "gpu_idle",
        "sw_power_cap",
    ] and new_gpu.throttle_reasons == ["gpu_idle"]


def test_xml_mig_devices_with_and_without_uuids():
    """An XML capture of a MIG GPU: instances keep the UUID the driver printed; a driver that
    prints none gives a name that says so, never an invented UUID."""
    mig = (
        "<mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>"
        "<mig_devices><mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id>"
        "<compute_instance_id>0</compute_instance_id>"
        "<uuid>MIG-aaaaaaaa-0000-0000-0000-000000000000</uuid>"
        "<device_attributes><shared><multiprocessor_count>42</multiprocessor_count></shared>"
        "</device_attributes><fb_memory_usage><total>19968 MiB</total><used>13 MiB</used>"
        "</fb_memory_usage></mig_device><mig_device><index>1</index>"
        "<fb_memory_usage><total>9728 MiB</total><used>0 MiB</used></fb_memory_usage></mig_device>"
        "</mig_devices>"
    )
    text = (XML / "a100-sxm4-40gb-570.148.08.xml").read_text(encoding="utf-8")
    text = re.sub(r"<mig_mode>.*?</mig_devices>", mig, text, count=1, flags=re.S)
    gpu = nvml.read_host(ReplayNvml(parse_capture(text, "mig.xml"))).gpus[0]
    assert gpu.mig_enabled
    assert [(m.uuid, m.multiprocessor_count, m.memory_total_bytes) for m in gpu.mig_devices] == [
        ("MIG-aaaaaaaa-0000-0000-0000-000000000000", 42, 19968 * 2**20),
        ("MIG-unrecorded-gpu0-instance1", None, 9728 * 2**20),
    ]


def test_a_replayed_capture_is_parsed_once(monkeypatch, tmp_path):
    """`python -m validate --replay` checks the capture before pytest starts, then the session
    judges it: one parse, handed over once; a later load, or a changed file, parses again."""
    from validate import cli
    from validate.host import capture

    parsed: list[str] = []
    real = capture.parse_capture
    monkeypatch.setattr(
        capture,
        "parse_capture",
        lambda text, source="capture": parsed.append(source) or real(text, source),
    )
    args, _ = cli.parse_args(["--replay", str(H100)])
    assert cli.preflight(args) is None and parsed == [str(H100)]
    first = load_capture(str(H100))  # as the session loads it
    assert parsed == [str(H100)] and len(first["devices"]) == 8
    assert load_capture(str(H100)) is not first and len(parsed) == 2  # no second reader shares it

    copy = tmp_path / "h100.xml"
    copy.write_bytes(H100.read_bytes())
    load_capture(str(copy), keep=True)
    copy.write_text(H100.read_text().replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", 1))
    assert (
        load_capture(str(copy))["devices"][0]["nvmlDeviceGetName"] == "NVIDIA H100 PCIe"
        and len(parsed) == 4
    )
