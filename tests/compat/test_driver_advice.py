"""`doctor` names the driver to install: on a server whose GPUs are on the PCI bus without a
driver (a fake sysfs tree), the branch of the stack it would pick and the oldest that serves
them; on a driver too old for every build (a SYNTHETIC 418 variant of a real capture), that
driver as the blocker. The suite's copy of the driver floors (validate/judge/driver_floor.yaml)
is held equal to what the resolver decides from envs/compat.yaml."""

from __future__ import annotations

from pathlib import Path

import pci_variants as v
import pytest
from suiteruns import no_nvml_here
from sysfs_trees import hgx_h100

from gpuenv.cli import doctor
from gpuenv.compat.driver_advice import oldest_serving_driver
from gpuenv.compat.host import HostSource, request_for_host
from gpuenv.compat.matrix import load_matrix, version_key
from validate.judge.driver_floor import load_floors


def test_the_suites_framework_floor_is_the_resolvers():
    matrix = load_matrix()
    oldest = [oldest_serving_driver((), fw, matrix) for fw in ("torch", "tensorflow")]
    floor = min((s.min_driver for s in oldest if s is not None), key=version_key)
    assert load_floors().framework_driver == floor


def test_the_suites_first_branches_are_compat_yamls():
    expected = {
        cc: b.branch for b in load_matrix().driver_branches for cc in b.compute_capabilities
    }
    assert load_floors().branches == expected


def test_doctor_names_driver_418_as_the_blocker_and_the_oldest_branch(tmp_path):
    capture = tmp_path / "gtx1660-418.txt"
    capture.write_text(v.text_driver418_gtx1660(), encoding="utf-8")
    nvml = doctor.probe_nvml(str(capture))
    advice = doctor.probe_driver_advice(nvml, doctor.probe_pci(nvml, str(capture)))
    assert advice["lines"] == [
        "driver 418.67 is the blocker: no supported PyTorch or TensorFlow build runs on it; "
        "the oldest branch that serves these GPUs is R450 "
        "(>= 450.80.02, for torch2.7.1-cu118-py3.13)"
    ]
    assert nvml["gpus"][0]["compute_capability"] == "7.5", (
        "identity by PCI id, not 'unknown compute capability'"
    )


@no_nvml_here
def test_doctor_names_the_gpus_on_the_bus_and_the_branch_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("VALIDATE_SYSFS_ROOT", str(hgx_h100(tmp_path)))
    nvml = doctor.probe_nvml()
    pci = doctor.probe_pci(nvml)
    assert [(g["address"], g["product"], g["compute_capability"]) for g in pci["gpus"]] == [
        ("0000:18:00.0", "H100 SXM5 80GB (PCI 10de:2330)", "9.0"),
        ("0000:2a:00.0", "H100 SXM5 80GB (PCI 10de:2330)", "9.0"),
    ]
    [line] = doctor.probe_driver_advice(nvml, pci)["lines"]
    assert (
        line.startswith("not installed: install R") and "for the stack doctor picks, torch" in line
    )
    assert line.endswith(
        "the oldest branch that serves these GPUs is R520 (>= 520.0, for torch2.7.1-cu118-py3.13)"
    )
    request = request_for_host(framework="torch")
    assert request.gpu_archs == ("9.0",) and "PCI bus" in dict(request.origins)["gpu_archs"]


def test_a_working_driver_gets_no_advice():
    nvml = {
        "available": True,
        "driver_version": "580.105.08",
        "gpus": [{"compute_capability": "9.0"}],
    }
    assert doctor.probe_driver_advice(nvml, {"gpus": []})["lines"] == []


@pytest.fixture(autouse=True)
def _no_real_sysfs_when_nvml_works(monkeypatch, tmp_path):
    """Every test reads a fake root unless it sets its own: this machine's bus is not the case."""
    monkeypatch.setenv("VALIDATE_SYSFS_ROOT", str(Path(tmp_path) / "empty-root"))


def test_an_unknown_gpu_on_driver_418_still_names_the_driver(tmp_path):
    """SYNTHETIC: the A100 capture as driver 418.67 printing a name nothing knows and no PCI id:
    the compute capability is unknown, but the driver is the blocker whatever the GPU is."""
    capture = tmp_path / "mystery-418.xml"
    capture.write_text(v.xml_gpu("Graphics Device", None, "418.67", "10.1"), encoding="utf-8")
    nvml = doctor.probe_nvml(str(capture))
    assert nvml["gpus"][0]["compute_capability"] is None
    [line] = doctor.probe_driver_advice(nvml, doctor.probe_pci(nvml, str(capture)))["lines"]
    assert line.startswith("driver 418.67 is the blocker") and "R450 (>= 450.80.02" in line


def _no_engine():
    """The Docker row is not what this test reads: the engine is not asked."""
    from gpuenv.errors import ToolError

    raise ToolError("not asked by this test")


def test_doctor_names_a_generic_gpu_by_its_pci_id(tmp_path):
    capture = tmp_path / "gtx1660-418.txt"
    capture.write_text(v.text_driver418_gtx1660(), encoding="utf-8")
    text = doctor.format_report(doctor.collect_report(_no_engine, HostSource(str(capture))))
    assert "Graphics Device (GeForce GTX 1660 (PCI 10de:2184))" in text
    assert "driver 418.67 is the blocker" in text
