"""Masking expectations: which physical GPUs a framework must see for a CUDA_VISIBLE_DEVICES value.

The host below is in the shape NVML reports a 4-GPU server (UUIDs and bus ids as `nvidia-smi -q`
prints them); the expectations follow the CUDA rules: ordinals in PCI order, UUIDs or unique
UUID prefixes, and the first entry naming no GPU ends the list.
"""

from __future__ import annotations

import pytest

from validate.masking import env_for_case, expected_visible, masking_cases, normalise_pci_bus_id

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
