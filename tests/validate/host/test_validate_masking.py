"""Masking expectations: which physical GPUs a framework must see for a CUDA_VISIBLE_DEVICES value.

The host below is in the shape NVML reports a 4-GPU server (UUIDs and bus ids as `nvidia-smi -q`
prints them); the expectations follow the CUDA rules: ordinals in PCI order, UUIDs or unique
UUID prefixes, and the first entry naming no GPU ends the list.
"""

from __future__ import annotations

import pytest

from validate.host.masking import (
    VOLUME_MOUNTS_DIR,
    device_list,
    env_for_case,
    expected_visible,
    masking_cases,
    narrows,
    normalise_pci_bus_id,
    quick_cases,
)

HOST = [
    "GPU-2b6f3c1e-7f3a-1b6c-9e1d-0f8c2f5a1a01",
    "GPU-7d1e9a44-03c2-5e8b-bb1f-61c0e2d9b302",
    "GPU-9a0c5f12-88e4-2d7a-a3c9-4c7b91e0c903",
    "GPU-e41b7d90-5a6f-43c1-8f2e-d20a3b6c4f04",
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, HOST),
        ("0", HOST[:1]),
        ("3", HOST[3:]),
        ("2,0", [HOST[2], HOST[0]]),
        ("3,2,1,0", HOST[::-1]),
        ("", []),
        ("-1", []),
        ("0,9,1", HOST[:1]),  # 9 names no GPU: the list ends there
        ("1,-1,2", HOST[1:2]),
        ("abc,0", []),
        (HOST[2], HOST[2:3]),
        (f"{HOST[1]},{HOST[0]}", [HOST[1], HOST[0]]),
        ("GPU-9a0c", HOST[2:3]),  # a unique prefix names one GPU
        ("GPU-", []),  # a prefix of every GPU names none
        ("GPU-ffffffff-0000-0000-0000-000000000000,0", []),
        # A device named twice makes the whole list empty (torch/cuda/__init__.py mirrors CUDA).
        ("0,0", []),
        ("1,2,1", []),
        (f"{HOST[1]},{HOST[1]}", []),
        (f"{HOST[1]},GPU-7d1e", []),  # a prefix naming the same GPU again
        ("1gpu,0", [HOST[1], HOST[0]]),  # read like strtoul: "1gpu" is 1
        (" 2 , 3", [HOST[2], HOST[3]]),
        (f"{HOST[0]},1", HOST[:1]),  # an ordinal after UUIDs ends the list
    ],
)
def test_expected_visible(value, expected):
    assert expected_visible(value, HOST) == expected


MIG = ["MIG-1a2b3c4d-0000-5e6f-7a8b-9c0d1e2f3a4b", "MIG-5e6f7a8b-1111-2c3d-4e5f-6a7b8c9d0e1f"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (MIG[1], MIG[1:]),
        ("MIG-1a2b", MIG[:1]),
        (f"{MIG[0]},{MIG[0]}", []),
        (f"{MIG[0]},0", MIG[:1]),
        ("MIG-", []),  # ambiguous prefix
    ],
)
def test_mig_instances_are_named_by_their_own_uuids(value, expected):
    assert expected_visible(value, HOST, MIG) == expected


def test_repeated_entry_case_is_in_the_suite():
    cases = {case.name: case for case in masking_cases(HOST)}
    assert cases["repeated entry hides every GPU"].visible_devices == "0,0"
    assert cases["repeated entry hides every GPU"].expected_uuids == ()


def test_no_gpus_means_nothing_is_visible():
    assert expected_visible(None, []) == []
    assert expected_visible("0", []) == []


def test_masking_cases_cover_the_issue_list():
    cases = {case.name: case for case in masking_cases(HOST)}
    assert cases["unset, PCI_BUS_ID order"].expected_uuids == tuple(HOST)
    for index, uuid in enumerate(HOST):
        assert cases[f"index {index}"].expected_uuids == (uuid,)
        assert cases[f"uuid of GPU {index}"].visible_devices == uuid
        assert cases[f"uuid of GPU {index}"].expected_uuids == (uuid,)
    assert cases["reversed"].visible_devices == "3,2,1,0"
    assert cases["reversed"].expected_uuids == tuple(HOST[::-1])
    assert cases["empty string"].expected_uuids == ()
    assert cases["-1"].expected_uuids == ()
    assert cases["invalid entry cuts the list"].expected_uuids == (HOST[0],)


def test_single_gpu_host_has_no_reversed_case():
    names = [case.name for case in masking_cases(HOST[:1])]
    assert "reversed" not in names
    assert "index 0" in names


def test_env_for_case_sets_pci_order_and_unsets_when_asked():
    unset = masking_cases(HOST)[0]
    assert env_for_case(unset) == {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    empty = next(c for c in masking_cases(HOST) if c.name == "empty string")
    assert env_for_case(empty)["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    ("bus_id", "normal"),
    [
        ("00000000:17:00.0", "0000:17:00.0"),  # NVML
        ("0000:17:00.0", "0000:17:00.0"),  # TensorFlow's physical_device_desc
        ("00000001:B1:00.0", "0001:b1:00.0"),
        ("17:00.0", "0000:17:00.0"),
    ],
)
def test_normalise_pci_bus_id(bus_id, normal):
    assert normalise_pci_bus_id(bus_id) == normal


# Probes respect the caller's mask (issue 17 item 6): a run started with CUDA_VISIBLE_DEVICES=1,3
# (or a container given GPUs 1 and 3) checks those GPUs, and no child ever sees another one.


@pytest.mark.parametrize("caller", [None, "1,3", "3,1", f"{HOST[2]}", "2", "0,1,2,3", "1,9,2", ""])
def test_every_masking_case_narrows_the_callers_mask(caller):
    cases = masking_cases(HOST, caller)
    allowed = set(expected_visible(caller, HOST))
    for case in cases:
        value = None if case.visible_devices == "<unset>" else case.visible_devices
        assert narrows(value, caller, HOST), (caller, case)
        assert set(case.expected_uuids) <= allowed, (caller, case)


def test_masking_cases_inside_gpus_1_and_3():
    cases = {case.name: case for case in masking_cases(HOST, "1,3")}
    assert "unset, PCI_BUS_ID order" not in cases  # unsetting would widen to all four GPUs
    assert cases["as the caller set it"].visible_devices == "1,3"
    assert cases["as the caller set it"].expected_uuids == (HOST[1], HOST[3])
    assert set(n for n in cases if n.startswith("index ")) == {"index 1", "index 3"}
    assert cases["index 3"].expected_uuids == (HOST[3],)
    assert cases["uuid of GPU 1"].visible_devices == HOST[1]
    assert cases["reversed"].visible_devices == "3,1" and cases["reversed"].expected_uuids == (
        HOST[3],
        HOST[1],
    )
    assert cases["invalid entry cuts the list"].visible_devices == "1,11,3"
    assert cases["invalid entry cuts the list"].expected_uuids == (HOST[1],)
    assert cases["repeated entry hides every GPU"].visible_devices == "1,1"
    quick = [case.name for case in quick_cases(list(cases.values()), HOST)]
    assert quick == [
        "as the caller set it",
        "index 1",
        "uuid of GPU 3",
        "empty string",
        "invalid entry cuts the list",
        "repeated entry hides every GPU",
    ]


def test_old_behaviour_would_have_widened_the_mask():
    """Before: the cases were built for every NVML GPU and the unset case removed the variable."""
    for case in masking_cases(HOST):  # caller unset: the old cases, unchanged
        assert narrows(
            None if case.visible_devices == "<unset>" else case.visible_devices, None, HOST
        )
    assert not narrows(None, "1,3", HOST)  # unset in the child: all four GPUs
    assert not narrows("0", "1,3", HOST)


def test_volume_mounted_device_list_is_read_from_the_folder():
    listing = {VOLUME_MOUNTS_DIR: [HOST[3], HOST[1], ".hidden"]}

    def listdir(path):
        if path not in listing:
            raise FileNotFoundError(path)
        return listing[path]

    assert device_list(VOLUME_MOUNTS_DIR, listdir) == sorted([HOST[1], HOST[3]])
    assert device_list("/var/run/elsewhere", listdir) is None  # unreadable: the caller says so
    assert device_list("0,2", listdir) == ["0", "2"]
    assert device_list("void", listdir) is None and device_list(None, listdir) is None


def test_volume_mounts_count_the_mounted_devices_not_one(tmp_path):
    from validate.judge.visibility import expected_gpus

    folder = tmp_path / "nvidia-container-devices"
    folder.mkdir()
    for name in (HOST[0], HOST[2]):
        (folder / name).touch()
    value = str(folder)
    mounted = device_list(value)  # the real folder, read with os.listdir
    expectation = expected_gpus(None, value, mounted=mounted)
    assert (
        expectation.count == 2
        and expectation.exact
        and "2 device(s) mounted there" in expectation.source
    )
    unreadable = expected_gpus(
        None,
        "/var/run/nvidia-container-devices-missing",
        mounted=device_list("/var/run/nvidia-container-devices-missing"),
    )
    assert (
        unreadable.count == 1 and not unreadable.exact and "could not be read" in unreadable.source
    )
    assert expected_gpus(None, value, mounted=["all"]).exact is False
    assert expected_gpus(None, value, mounted=[]) is None


def test_mixed_mig_host_checks_its_whole_gpus_by_uuid():
    """MIG on GPU 0 only: GPUs 1-3 keep the masking check, named by UUID (CUDA numbers MIG
    instances among the GPUs, so ordinals cannot be predicted), and GPU 0 is never named."""
    cases = {case.name: case for case in masking_cases(HOST, None, only=HOST[1:])}
    assert "unset, PCI_BUS_ID order" not in cases and not any(n.startswith("index ") for n in cases)
    assert cases["uuid of GPU 2"].expected_uuids == (HOST[2],)
    assert cases["reversed"].visible_devices == ",".join(HOST[:0:-1])
    assert (
        cases["invalid entry cuts the list"]
        .visible_devices.split(",")[1]
        .startswith("GPU-ffffffff")
    )
    assert cases["invalid entry cuts the list"].expected_uuids == (HOST[1],)
    assert cases["repeated entry hides every GPU"].expected_uuids == ()
    assert all(HOST[0] not in case.visible_devices for case in cases.values())
    inside = masking_cases(HOST, "0,3", only=HOST[1:])  # the caller's mask still applies
    assert {c.name for c in inside if c.name.startswith("uuid")} == {"uuid of GPU 3"}


def test_visible_gpus_follow_the_callers_mask_in_cuda_order():
    from validate.host.devices import visible_gpus
    from validate.host.nvml import GpuInfo, MigDevice

    mig = "MIG-1a2b3c4d-0000-5e6f-7a8b-9c0d1e2f3a4b"
    gpus = [
        GpuInfo(i, "NVIDIA H100 80GB HBM3", uuid, f"00000000:{i:02x}:00.0", "9.0", None, None)
        for i, uuid in enumerate(HOST)
    ]
    gpus[0].mig_enabled, gpus[0].mig_devices = True, [MigDevice(0, mig)]
    assert [g.index for g in visible_gpus(gpus, None)] == [0, 1, 2, 3]
    assert [g.index for g in visible_gpus(gpus, "3,1")] == [3, 1]  # the child's device 0 is GPU 3
    assert [g.index for g in visible_gpus(gpus, mig)] == [0]  # a MIG instance counts as its GPU
    assert visible_gpus(gpus, "-1") == []


def test_mirrored_strategy_runs_on_the_same_whole_gpus_as_ddp_on_a_mig_host(monkeypatch):
    """MIG on GPU 0: the TensorFlow probe's CUDA_VISIBLE_DEVICES is DDP's (GPUs 1-3 by UUID), so
    MirroredStrategy never meets a MIG instance, across which NCCL does not run."""
    from types import SimpleNamespace

    from validate.checks import test_07_multigpu as check
    from validate.checks.world import whole_gpus
    from validate.host.devices import visible_gpus
    from validate.host.nvml import GpuInfo, MigDevice
    from validate.measure.subproc import ProbeResult

    gpus = [
        GpuInfo(i, "NVIDIA H100 80GB HBM3", uuid, f"00000000:{i:02x}:00.0", "9.0", None, None)
        for i, uuid in enumerate(HOST)
    ]
    gpus[0].mig_enabled, gpus[0].mig_devices = (
        True,
        [MigDevice(0, "MIG-1a2b3c4d-0000-5e6f-7a8b-9c0d1e2f3a4b")],
    )
    host = SimpleNamespace(gpus=gpus, mig_gpus=[gpus[0]])
    suite = SimpleNamespace(host=host, quick=False, visible_gpus=lambda: visible_gpus(gpus, None))
    asked = []

    def probe(args, env=None, timeout=None):  # the probe's answer on a host without TensorFlow
        asked.append(env)
        return ProbeResult(
            {"error": "no tensorflow", "missing": "tensorflow"}, "no tensorflow", 0.0
        )

    monkeypatch.setattr(check, "run_probe", probe)
    with pytest.raises(pytest.skip.Exception):
        check.test_tensorflow_mirrored(suite, None)
    _, ddp_env, _ = whole_gpus(suite, None, "DDP training")
    assert asked == [ddp_env] and ddp_env["CUDA_VISIBLE_DEVICES"] == ",".join(HOST[1:])
