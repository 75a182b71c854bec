"""Legacy GPUs in `doctor` and the resolver: the last driver branch and CUDA line from
envs/compat.yaml, or that none serves the GPU (pure, on the real compatibility data)."""

from __future__ import annotations

import pytest

from gpuenv.compat.legacy import last_served, legacy_lines
from gpuenv.compat.matrix import load_matrix
from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request
from gpuenv.errors import NoCompatibleStack


def test_kepler_on_its_last_branch_is_told_to_stay():
    (line,) = legacy_lines(
        [{"name": "Tesla K80", "compute_capability": "3.7"}], "470.256.02", load_matrix()
    )
    assert line.startswith("Tesla K80: Kepler (cc 3.7)") and "stay on R470 and CUDA 11.8" in line


def test_pascal_and_volta_end_with_r580():
    lines = legacy_lines(
        [
            {"name": "Tesla P100-PCIE-16GB", "compute_capability": "6.0"},
            {"name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"},
        ],
        "535.104.05",
        load_matrix(),
    )
    assert len(lines) == 2 and all(
        "R580" in line and "12.9" in line and "older: install an R580 driver" in line
        for line in lines
    )


def test_current_gpus_get_no_line_and_unknown_ones_say_what_to_do():
    matrix = load_matrix()
    assert (
        legacy_lines(
            [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}] * 8,
            "580.105.08",
            matrix,
        )
        == []
    )
    (unknown,) = legacy_lines(
        [{"name": "NVIDIA Imaginary 9000", "compute_capability": None}], "580.105.08", matrix
    )
    assert "unknown product" in unknown and "--gpu-arch" in unknown
    (none,) = legacy_lines(
        [{"name": "NVIDIA Imaginary 1000", "compute_capability": "1.3"}], "470.256.02", matrix
    )
    assert "no driver branch or CUDA release line gpuenv knows serves it" in none


def test_a_cc_3_0_kepler_ends_with_cuda_10_2_in_doctor_and_in_replay():
    """CUDA 11.0 dropped sm_30: a Tesla K10 (cc 3.0) still runs on R470, but its last CUDA is 10.2,
    not the 11.8 of Kepler's 3.5 and 3.7. `doctor --host` (legacy.py) and the replay's identity row
    (validate/host/archs.py) say the same."""
    from validate.host.archs import identity_text

    (line,) = legacy_lines(
        [{"name": "Tesla K10.G1.8GB", "compute_capability": "3.0"}], "470.256.02", load_matrix()
    )
    assert (
        "(cc 3.0): the last driver branch that runs it is R470, the last CUDA that builds for "
        "it 10.2" in line
    ), line
    assert "stay on R470 and CUDA 10.2 or older (--cuda 10.2)" in line, line
    assert (
        identity_text("Tesla K10.G1.8GB", "3.0")
        == "Kepler, cc 3.0: legacy, last driver branch R470, last CUDA 10.2"
    )
    assert identity_text("Tesla K80", "3.7").endswith("last driver branch R470, last CUDA 11.8")


def test_the_suites_legacy_table_agrees_with_the_compatibility_data():
    """validate/host/gpu_archs.yaml repeats envs/compat.yaml's last driver branch and CUDA per
    legacy compute capability (images carry only validate/): the two must say the same."""
    from validate.host.archs import load_archs

    suite = {cc: (branch, cuda) for _, ccs, branch, cuda in load_archs().legacy for cc in ccs}
    data = {
        cc: (a.last_driver_branch, a.last_cuda)
        for a in load_matrix().gpu_architectures
        if a.last_driver_branch
        for cc in a.compute_capabilities
    }
    assert suite == data and suite["3.0"] == ("470", "10.2") and suite["3.5"] == ("470", "11.8")
    assert {cc for cc in suite if suite[cc][0] == "580"} == {
        "5.0",
        "5.2",
        "5.3",
        "6.0",
        "6.1",
        "6.2",
        "7.0",
        "7.2",
    }


def test_the_resolver_refuses_legacy_gpus_in_doctors_words():
    """The resolver's refusal for a Kepler 3.5 GPU, which no PyTorch release has kernels for, reuses
    legacy.py's line (R470, CUDA 11.8) whatever the driver and the pin."""
    kepler = load_matrix().architecture_of("3.5")
    for driver in ("340.24", "470.256.02", "580.105.08"):
        with pytest.raises(NoCompatibleStack) as err:
            resolve_stack(Request(driver=driver, gpu_archs=("3.5",), torch="2.7"))
        text = err.value.render()
        assert (
            last_served(kepler, "3.5") in text
            and "no PyTorch stack gpuenv knows runs on it" in text
        ), text
        assert "--framework tensorflow" not in text, (
            "a --torch pin is not changed into another framework"
        )


def test_a_maxwell_gpu_on_an_old_driver_is_still_told_to_upgrade():
    """Maxwell's last branch (R580) runs current builds: the ordinary driver refusal stands."""
    with pytest.raises(NoCompatibleStack) as err:
        resolve_stack(Request(driver="390.157", gpu_archs=("5.2",)))
    assert (
        "upgrade the driver to >= 520.61.05" in err.value.render()
        and "R580" not in err.value.render()
    )
