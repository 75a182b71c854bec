"""Rendering the specs is pure: these tests read the rendered text back as YAML and check it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from lockcases import FIXTURES, TF_CPU, TF_CUDA, TORCH_CPU, TORCH_CU121

from gpuenv.envs import spec
from gpuenv.errors import BadInput

#: the validation suite's own needs, in every environment so `python -m validate` runs in every
#: image
SUITE = [
    "numpy",
    "pytest>=7",
    "nvidia-ml-py>=12.535",
]  # numpy: the framework companion, then the suite's needs


def team_basic() -> spec.Packages:
    path = FIXTURES / "team-basic" / "team.yml"
    return spec.parse_team_file(path.read_text(), str(path))


def pip_section(data: dict) -> list[str]:
    return next(d["pip"] for d in data["dependencies"] if isinstance(d, dict))


def test_torch_gpu_stack_pins_cuda_build_from_pytorch_index_as_pip_repository():
    data = yaml.safe_load(spec.render_environment(TORCH_CU121))
    assert data["channels"] == ["conda-forge", "nodefaults"]
    assert data["pip-repositories"] == ["https://download.pytorch.org/whl/cu121"]
    assert data["dependencies"][:2] == ["python=3.11", "pip"]
    assert pip_section(data) == ["torch==2.5.1+cu121", *SUITE]
    assert not any(line.startswith("-") for line in pip_section(data)), (
        "no pip options: conda-lock cannot parse them"
    )


def test_cpu_stack_uses_cpu_build_and_cpu_index():
    data = yaml.safe_load(spec.render_environment(TORCH_CPU))
    assert pip_section(data) == ["torch==2.13.0+cpu", *SUITE]
    assert data["pip-repositories"] == ["https://download.pytorch.org/whl/cpu"]


def test_tensorflow_gpu_is_and_cuda_from_pypi_without_extra_index():
    data = yaml.safe_load(spec.render_environment(TF_CUDA))
    assert pip_section(data) == ["tensorflow[and-cuda]==2.15.1", *SUITE]
    assert "pip-repositories" not in data


def test_tensorflow_cpu_stack_uses_tensorflow_cpu():
    data = yaml.safe_load(spec.render_environment(TF_CPU))
    assert pip_section(data) == ["tensorflow-cpu==2.15.1", *SUITE]


def test_team_packages_are_merged_after_the_stack_pins():
    data = yaml.safe_load(
        spec.render_environment(TORCH_CU121, team_basic(), ["linux-64", "linux-aarch64"])
    )
    assert data["platforms"] == ["linux-64", "linux-aarch64"]
    assert data["dependencies"][:4] == ["python=3.11", "pip", "numpy >=1.26,<3", "jupyterlab=4.2"]
    # the team's conda numpy wins: no second numpy from pip
    assert pip_section(data) == [
        "torch==2.5.1+cu121",
        *SUITE[1:],
        "transformers==4.44.2",
        "accelerate>=0.33 ; sys_platform == 'linux'",
    ]
    assert data["pip-repositories"] == [
        "https://download.pytorch.org/whl/cu121",
        "https://pypi.example.com/simple",
    ]


def test_render_is_pure_same_inputs_same_text():
    assert spec.render_environment(TORCH_CU121, team_basic()) == spec.render_environment(
        TORCH_CU121, team_basic()
    )
    other = dataclasses.replace(TORCH_CU121, python="3.10")
    assert spec.render_environment(other) != spec.render_environment(TORCH_CU121)


@pytest.mark.parametrize(
    "team, fragment",
    [
        (spec.Packages(conda=("python=3.12",)), "pins python"),
        (spec.Packages(pip=("torch==2.4.0",)), "torch==2.4.0"),
        (spec.Packages(pip=("torch>=2",)), "torch>=2"),
    ],
)
def test_team_may_not_repin_what_the_stack_decides(team, fragment):
    with pytest.raises(BadInput) as err:
        spec.render_environment(TORCH_CU121, team)
    assert fragment in err.value.render()


def test_virtual_packages_carry_cuda_of_gpu_stack_and_base_image_glibc():
    data = yaml.safe_load(spec.render_virtual_packages(TORCH_CU121, ["linux-64", "linux-aarch64"]))
    x86 = data["subdirs"]["linux-64"]["packages"]
    assert x86["__cuda"] == "12.1"
    assert x86["__glibc"] == "2.35"  # nvidia/cuda:...-ubuntu22.04
    assert data["subdirs"]["linux-aarch64"]["packages"]["__archspec"] == "1 aarch64"


def test_virtual_packages_of_cpu_stack_have_no_cuda():
    data = yaml.safe_load(spec.render_virtual_packages(TORCH_CPU, ["linux-64"]))
    assert "__cuda" not in data["subdirs"]["linux-64"]["packages"]


def test_export_puts_the_index_into_the_pip_section_for_conda():
    text = spec.render_export(TORCH_CU121, spec.merge_packages(TORCH_CU121, team_basic()))
    data = yaml.safe_load(text)
    assert "pip-repositories" not in data  # conda ignores that key
    assert pip_section(data)[:2] == [
        "--extra-index-url https://download.pytorch.org/whl/cu121",
        "--extra-index-url https://pypi.example.com/simple",
    ]
    assert "torch==2.5.1+cu121" in pip_section(data)
    assert "not pinned" in text.splitlines()[0]


def test_export_pinned_from_lock_uses_the_pins():
    pinned = spec.Pinned(
        conda=("python=3.11.9=hab00c5b_0_cpython", "pip=24.2=pyh8b19718_1"),
        pip=("torch==2.5.1+cu121", "filelock==3.16.1"),
    )
    data = yaml.safe_load(spec.render_export(TORCH_CU121, spec.merge_packages(TORCH_CU121), pinned))
    assert data["dependencies"][:2] == ["python=3.11.9=hab00c5b_0_cpython", "pip=24.2=pyh8b19718_1"]
    assert pip_section(data) == [
        "--extra-index-url https://download.pytorch.org/whl/cu121",
        "torch==2.5.1+cu121",
        "filelock==3.16.1",
    ]


def test_received_file_index_option_becomes_pip_repository():
    path = FIXTURES / "received" / "environment.yml"
    received = spec.parse_environment_file(path.read_text(), str(path))
    assert received.packages.pip_repositories == ("https://download.pytorch.org/whl/cu121",)
    assert received.packages.pip == ("torch==2.5.1+cu121", "torchvision==0.20.1+cu121")
    assert received.channels == ("conda-forge",)
    data = yaml.safe_load(spec.render_environment_file(received, ["linux-64"]))
    assert data["pip-repositories"] == ["https://download.pytorch.org/whl/cu121"]
    assert all(not line.startswith("-") for line in pip_section(data))


def test_export_round_trips_through_the_received_file_parser():
    text = spec.render_export(TORCH_CU121, spec.merge_packages(TORCH_CU121, team_basic()))
    received = spec.parse_environment_file(text, "exported.yml")
    assert received.packages == spec.merge_packages(TORCH_CU121, team_basic())


def test_unknown_platform_option_names_the_choices():
    with pytest.raises(BadInput, match="unknown platform 'win-64'.*linux-64, linux-aarch64"):
        spec.check_platforms(["linux-64", "win-64"])
    assert spec.check_platforms([]) == ("linux-64",)


def test_empty_team_file_is_no_extra_packages():
    assert spec.parse_team_file("# nothing yet\n", "team.yml") == spec.Packages()
    shipped = spec.parse_team_file(
        (FIXTURES.parents[2] / "envs" / "team.yml").read_text(), "envs/team.yml"
    )
    assert shipped == spec.Packages()


def test_tensorflow_stack_refuses_team_tensorflow_builds_but_not_other_frameworks():
    with pytest.raises(BadInput, match="tensorflow-cpu"):
        spec.render_environment(TF_CUDA, spec.Packages(pip=("tensorflow-cpu==2.15.1",)))
    data = yaml.safe_load(
        spec.render_environment(TF_CUDA, spec.Packages(pip=("keras-nlp==0.12.1",)))
    )
    assert pip_section(data) == ["tensorflow[and-cuda]==2.15.1", *SUITE, "keras-nlp==0.12.1"]
