"""`invoke doctor --host FILE` on a vGPU hypervisor's capture (a SYNTHETIC variant of the real A100
capture, tests/validate/vgpu_variants.py): no CUDA stack is planned for it, the reason is named,
and no Python None reaches the screen."""

from __future__ import annotations

import json

import vgpu_variants as v


def test_doctor_plans_no_stack_for_a_vgpu_hypervisor(invoke_cli, tmp_path):
    capture = tmp_path / "hypervisor.xml"
    capture.write_text(v.hypervisor_xml(), encoding="utf-8")
    data = json.loads(invoke_cli("doctor", "--host", str(capture), "--json").stdout)
    for framework in ("torch", "tensorflow"):
        rec = data["recommended"][framework]
        assert (
            not rec["available"]
            and "not a CUDA host for containers" in rec["why"]
            and "Host VGPU" in rec["why"]
        )
    text = invoke_cli("doctor", "--host", str(capture))
    assert text.returncode == 0, text.stderr
    assert "CUDA driver API not reported" in text.stdout and "None" not in text.stdout
    assert "no stack: not a CUDA host for containers" in text.stdout


def test_doctor_still_plans_for_a_licensed_vgpu_guest(invoke_cli, tmp_path):
    capture = tmp_path / "guest.xml"
    capture.write_text(
        v.vgpu_guest_xml("Licensed (Expiry: 2024-10-19 6:51:17 GMT)"), encoding="utf-8"
    )
    data = json.loads(invoke_cli("doctor", "--host", str(capture), "--json").stdout)
    assert data["recommended"]["torch"]["available"], data["recommended"]["torch"]


def test_resolve_refuses_a_vgpu_hypervisor_as_doctor_does(invoke_cli, tmp_path):
    """`invoke resolve --host` plans no stack for it either: one line, the same reason, exit 3."""
    capture = tmp_path / "hypervisor.xml"
    capture.write_text(v.hypervisor_xml(), encoding="utf-8")
    done = invoke_cli("resolve", "--host", str(capture))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "not a CUDA host for containers" in done.stderr and "Host VGPU" in done.stderr
    assert "validate and build inside a VM given a vGPU" in done.stderr


def test_the_library_refuses_it_for_every_task_that_reads_the_host(tmp_path):
    """request_for_host is where every --host task (resolve, lock, build) reads the server."""
    import pytest

    from gpuenv.compat.host import HostSource, request_for_host
    from gpuenv.errors import NoCompatibleStack

    capture = tmp_path / "hypervisor.xml"
    capture.write_text(v.hypervisor_xml(), encoding="utf-8")
    with pytest.raises(NoCompatibleStack, match="not a CUDA host for containers"):
        request_for_host(framework="torch", host=HostSource(str(capture)))
    guest = tmp_path / "guest.xml"
    licensed = v.vgpu_guest_xml("Licensed (Expiry: 2024-10-19 6:51:17 GMT)")
    guest.write_text(licensed, encoding="utf-8")
    assert request_for_host(framework="torch", host=HostSource(str(guest))).driver


def test_doctor_and_planning_ask_one_rule(tmp_path):
    """doctor's "no stack" reason is the planner's refusal itself (compat.host.cuda_host_refusal,
    given the NVML record as doctor's report holds it), word for word; a vGPU guest and an NVML
    that could not be read are refused by neither."""
    import pytest

    from gpuenv.cli import doctor
    from gpuenv.compat.host import HostSource, cuda_host_refusal, read_host, request_for_host
    from gpuenv.errors import NoCompatibleStack

    capture = tmp_path / "hypervisor.xml"
    capture.write_text(v.hypervisor_xml(), encoding="utf-8")
    reason = cuda_host_refusal(read_host(str(capture)).to_dict())
    assert reason is not None and reason.startswith("not a CUDA host for containers: this host")
    assert doctor.cuda_host_blocker(doctor.probe_nvml(str(capture))) == reason
    with pytest.raises(NoCompatibleStack) as refused:
        request_for_host(framework="torch", host=HostSource(str(capture)))
    assert refused.value.message == f"--host {capture}: {reason}"

    guest = tmp_path / "guest.xml"
    guest.write_text(v.vgpu_guest_xml("Licensed (Expiry: 2024-10-19 6:51:17 GMT)"), "utf-8")
    assert cuda_host_refusal(read_host(str(guest)).to_dict()) is None
    assert doctor.cuda_host_blocker(doctor.probe_nvml(str(guest))) is None
    assert doctor.cuda_host_blocker({"available": False, "why": "NVML: not found"}) is None
