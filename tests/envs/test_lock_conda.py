"""The conda path for real: py-rattler solves and installs against the local test channel
(tests/condachannel), read as a mirror of conda-forge; the lock keeps conda-forge's URLs.

The framework wheel is a STAND-IN (tests/conftest.py: standin_wheels); numpy, pytest and
nvidia-ml-py come from PyPI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from lockcases import TORCH_CPU, TORCH_CU121

from gpuenv.envs import conda, condalock, lockdir
from gpuenv.envs import install as installer
from gpuenv.envs.locking import ensure_lock, read_conda_lock
from gpuenv.errors import BadInput, DataError, ToolError

CONDA_FORGE = "https://conda.anaconda.org/conda-forge"


#: The lock's pip part asks PyPI (the `pypi` fixture): `network`, as in test_lock_uv.py.
needs_pypi = pytest.mark.network


def mirror_of(channel: Path) -> dict[str, str]:
    return {"conda-forge": channel.as_uri()}


def team_file(tmp_path: Path, *conda_specs: str) -> Path:
    path = tmp_path / "team.yml"
    path.write_text(yaml.safe_dump({"conda": list(conda_specs), "pip": []}))
    return path


@pytest.mark.parametrize(
    ("cuda", "build"), [(None, "cpu_0"), ("12.1", "cuda118_100"), ("12.6", "cuda124_200")]
)
def test_the_solver_picks_the_build_the_cuda_virtual_package_allows(conda_channel, cuda, build):
    found = conda.solve(
        channels=[conda_channel.as_uri()],
        specs=["gpuenv-accel"],
        platform="linux-64",
        virtual=conda.virtual_packages(cuda=cuda, glibc="2.35", arch="x86_64"),
    )
    assert [(p.name, p.build) for p in found] == [("gpuenv-accel", build)]


@needs_pypi
def test_lock_through_a_mirror_keeps_conda_forge_urls_and_conda_lock_reads_it(
    conda_channel, standin_wheels, locks_dir, pypi, tmp_path
):
    from conda_lock.lockfile import parse_conda_lock_file

    result = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors=mirror_of(conda_channel),
        team_file=team_file(tmp_path, "gpuenv-probe", "gpuenv-hello", "gpuenv-accel"),
    )
    assert result.files.name == "conda-lock.yml" and not result.skipped
    lock = parse_conda_lock_file(result.files)  # conda-lock's own parser
    conda_entries = {d.name: d for d in lock.package if d.manager == "conda"}
    assert set(conda_entries) == {"python", "pip", "gpuenv-probe", "gpuenv-hello", "gpuenv-accel"}
    assert all(
        d.url.startswith(CONDA_FORGE + "/") and len(d.hash.sha256 or "") == 64
        for d in conda_entries.values()
    )
    assert conda_entries["gpuenv-accel"].build == "cpu_0"  # a CPU stack: no __cuda, the cpu build
    pip = {d.name: d for d in lock.package if d.manager == "pip"}
    assert pip["torch"].version == "2.13.0+cpu" and "numpy" in pip and "pytest" in pip
    assert [c.url for c in lock.metadata.channels] == [CONDA_FORGE]
    assert {(p.manager, p.name) for p in read_conda_lock(result.files)} >= {
        ("conda", "python"),
        ("pip", "torch"),
    }

    again = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors=mirror_of(conda_channel),
        team_file=team_file(tmp_path, "gpuenv-probe", "gpuenv-hello", "gpuenv-accel"),
    )
    assert again.skipped and again.files.read_bytes() == result.files.read_bytes()


@needs_pypi
def test_a_gpu_stack_locks_the_cuda_build(conda_channel, standin_wheels, locks_dir, pypi, tmp_path):
    result = ensure_lock(
        TORCH_CU121,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors=mirror_of(conda_channel),
        team_file=team_file(tmp_path, "gpuenv-accel"),
    )
    builds = {p.name: p.build for p in read_conda_lock(result.files) if p.manager == "conda"}
    assert builds["gpuenv-accel"] == "cuda118_100"


def lock_error(channel: Path, wheels: Path, team: Path) -> str:
    """The one-line error of locking the CPU stack with `team` from the test channel."""
    with pytest.raises(ToolError) as err:
        ensure_lock(
            TORCH_CPU,
            backend="conda-lock",
            wheelhouse=wheels,
            mirrors=mirror_of(channel),
            team_file=team,
        )
    return err.value.render()


def test_an_unknown_package_is_one_line_naming_it_and_the_channel(
    conda_channel, standin_wheels, locks_dir, tmp_path
):
    text = lock_error(conda_channel, standin_wheels, team_file(tmp_path, "no-such-package"))
    assert (
        "no-such-package" in text
        and CONDA_FORGE in text
        and conda_channel.as_uri() in text
        and "\n" not in text
    )
    assert not (locks_dir / TORCH_CPU.stack_id).exists()


def test_a_conflict_is_one_line_naming_the_packages_and_the_channel(
    conda_channel, standin_wheels, locks_dir, tmp_path
):
    """Two wishes no build satisfies together: the solver's reason, in one line, with the
    channel."""
    text = lock_error(
        conda_channel, standin_wheels, team_file(tmp_path, "gpuenv-hello>=1.0", "gpuenv-hello<1.0")
    )
    assert "gpuenv-hello" in text and CONDA_FORGE in text and "\n" not in text, text
    assert not (locks_dir / TORCH_CPU.stack_id).exists()


def _team_with_pip(tmp_path: Path, conda_specs: list[str], pip: list[str]) -> Path:
    path = tmp_path / "team.yml"
    path.write_text(yaml.safe_dump({"conda": conda_specs, "pip": pip}))
    return path


@needs_pypi
def test_a_pip_part_uv_cannot_lock_is_its_one_line_error_when_the_conda_part_solves(
    conda_channel, standin_wheels, locks_dir, pypi, tmp_path
):
    """uv locks the pip part while the solve runs (locking._lock_with_rattler): its failure is
    still the error, and nothing is written."""
    text = lock_error(
        conda_channel,
        standin_wheels,
        _team_with_pip(tmp_path, ["gpuenv-hello"], ["gpuenv-no-such-project==1.0"]),
    )
    assert text.startswith("uv could not lock") and "gpuenv-no-such-project" in text, text
    assert "\n" not in text
    assert not (locks_dir / TORCH_CPU.stack_id).exists()


@needs_pypi
def test_when_both_parts_fail_the_solve_is_the_error_said(
    conda_channel, standin_wheels, locks_dir, pypi, tmp_path
):
    """As when the solve ran first and uv after it: the conda part's error, not uv's."""
    text = lock_error(
        conda_channel,
        standin_wheels,
        _team_with_pip(tmp_path, ["no-such-package"], ["gpuenv-no-such-project==1.0"]),
    )
    assert "no-such-package" in text and CONDA_FORGE in text, text
    assert "gpuenv-no-such-project" not in text and "\n" not in text
    assert not (locks_dir / TORCH_CPU.stack_id).exists()


def test_an_unreachable_channel_is_one_line(standin_wheels, locks_dir, tmp_path):
    with pytest.raises(ToolError) as err:
        ensure_lock(
            TORCH_CPU,
            backend="conda-lock",
            wheelhouse=standin_wheels,
            mirrors={"conda-forge": "http://127.0.0.1:9/conda-forge"},
        )
    text = err.value.render()
    assert (
        text.startswith(f"cannot read the conda channel {CONDA_FORGE}")
        and "127.0.0.1:9" in text
        and "\n" not in text
    )


@pytest.fixture
def cpu_lock(conda_channel, standin_wheels, locks_dir, pypi, tmp_path):
    return ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors=mirror_of(conda_channel),
        team_file=team_file(tmp_path, "gpuenv-probe", "gpuenv-hello"),
    )


def _install(lock, prefix: Path, mirrors: dict[str, str], wheels: Path) -> installer.InstallResult:
    plan = installer.plan_install(
        TORCH_CPU, lock.directory, prefix, wheelhouse=wheels, mirrors=mirrors
    )
    return installer.install(plan, say=lambda _m: None, output=lambda _m: None)


@needs_pypi
def test_the_linked_packages_are_gone_from_the_download_folder_when_the_install_returns(
    cpu_lock, conda_channel, standin_wheels, tmp_path
):
    """condalock.install removes the archives and rattler's unpacked copies of them while uv and
    the bytecode step work (the caller then removes the folder), not after them."""
    downloads = tmp_path / "downloads"
    condalock.install(
        cpu_lock.files,
        into=tmp_path / "env",
        final_prefix=tmp_path / "env",
        platform="linux-64",
        have={"__cuda": None, "__glibc": "2.28"},
        target="this host",
        mirrors=conda.check_mirrors(mirror_of(conda_channel)),
        wheelhouse=standin_wheels,
        cache=downloads,
        say=lambda _m: None,
        output=lambda _m: None,
    )
    assert sorted(p.name for p in downloads.iterdir()) == ["pip-requirements.txt"]
    assert (tmp_path / "env" / "conda-meta" / "history").is_file()


@needs_pypi
def test_install_into_a_prefix_rewrites_the_prefix_and_runs_the_entry_point(
    cpu_lock, conda_channel, standin_wheels, tmp_path
):
    prefix = tmp_path / "envs" / "torch-cpu"
    result = _install(cpu_lock, prefix, mirror_of(conda_channel), standin_wheels)
    assert not result.skipped
    assert (
        subprocess.run(
            [prefix / "bin" / "gpuenv-probe"], capture_output=True, text=True, check=True
        ).stdout
        == f"gpuenv-probe ok {prefix}\n"
    )
    assert (
        subprocess.run(
            [prefix / "bin" / "gpuenv-hello"], capture_output=True, text=True, check=True
        ).stdout
        == f"hello from {prefix}\n"
    )
    torch = subprocess.run(
        [
            prefix / "bin" / "python",
            "-c",
            "import torch, numpy; print(torch.__version__, torch.STANDIN)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert torch.stdout == "2.13.0+cpu True\n"
    pytest_script = (prefix / "bin" / "pytest").read_text().splitlines()[0]
    assert pytest_script == f"#!{prefix}/bin/python", (
        "uv's scripts name the final prefix, not the build folder"
    )
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["torch-cpu"]
    assert _install(cpu_lock, prefix, mirror_of(conda_channel), standin_wheels).skipped


@needs_pypi
def test_a_tampered_package_is_refused_by_its_hash_and_nothing_is_left(
    cpu_lock, conda_channel, standin_wheels, tmp_path
):
    copy = tmp_path / "mirror"
    shutil.copytree(conda_channel, copy)
    victim = next((copy / "linux-64").glob("gpuenv-hello-*.conda"))
    victim.write_bytes(victim.read_bytes() + b"tampered")
    prefix = tmp_path / "envs" / "torch-cpu"
    with pytest.raises(DataError) as err:
        _install(cpu_lock, prefix, mirror_of(copy), standin_wheels)
    text = err.value.render()
    assert (
        text.startswith("gpuenv-hello 1.0 from file://") and "sha256" in text and "\n" not in text
    )
    assert not (tmp_path / "envs").exists(), "the folders made for the prefix are removed too"


@needs_pypi
def test_the_channel_served_over_http_locks_and_installs_as_a_mirror(
    conda_channel_http, standin_wheels, locks_dir, pypi, tmp_path
):
    mirrors = {"conda-forge": conda_channel_http}
    lock = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors=mirrors,
        team_file=team_file(tmp_path, "gpuenv-probe"),
    )
    assert all(
        p.url.startswith(CONDA_FORGE) for p in condalock.read_lock(lock.files, "linux-64").conda
    )
    prefix = tmp_path / "envs" / "http"
    _install(lock, prefix, mirrors, standin_wheels)
    assert (
        subprocess.run(
            [prefix / "bin" / "gpuenv-probe"], capture_output=True, text=True, check=True
        ).returncode
        == 0
    )


@needs_pypi
def test_a_lock_that_needs_cuda_is_refused_on_a_host_without_it(
    conda_channel, standin_wheels, locks_dir, pypi, tmp_path, monkeypatch
):
    lock = ensure_lock(
        TORCH_CU121,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors=mirror_of(conda_channel),
        team_file=team_file(tmp_path, "gpuenv-accel"),
    )
    prefix = tmp_path / "envs" / "gpu"
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "")  # conda's own stand-in for "no driver"
    plan = installer.plan_install(
        TORCH_CU121,
        lock.directory,
        prefix,
        wheelhouse=standin_wheels,
        mirrors=mirror_of(conda_channel),
    )
    with pytest.raises(BadInput) as err:
        installer.install(plan, say=lambda _m: None, output=lambda _m: None)
    assert err.value.render().startswith(
        "conda-lock.yml cannot run on this host: gpuenv-accel 1.0 (cuda118_100) needs __cuda "
        ">=11.8, and there is no __cuda here"
    )
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "11.4")
    with pytest.raises(BadInput, match=r"needs __cuda >=11.8, and this has 11.4"):
        installer.install(plan, say=lambda _m: None, output=lambda _m: None)
    assert not prefix.exists()
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "12.1")
    installer.install(plan, say=lambda _m: None, output=lambda _m: None)
    assert (prefix / "share" / "gpuenv-accel" / "variant").read_text().strip() == "cuda118"


@pytest.mark.parametrize(
    ("have", "needs", "unmet"),
    [
        ("12.1", "__cuda >=11.8", False),
        ("11.4", "__cuda >=11.8", True),
        ("12.6", "__cuda >=12,<13", False),
        ("13.0", "__cuda >=12,<13", True),
        ("2.35", "__glibc >=2.17", False),
        ("2.31", "__glibc >=2.34", True),
    ],
)
def test_virtual_package_requirements_are_compared_as_versions(have, needs, unmet):
    name = needs.split(" ")[0]
    package = conda.CondaPackage("x", "1", "b", 0, "linux-64", "u", "0" * 64, "", (needs,), "")
    assert (condalock.unmet_virtual([package], {name: have}) is not None) is unmet


@needs_pypi
def test_export_is_pinned_from_the_conda_lock_and_locks_again_as_a_received_file(
    cpu_lock, conda_channel, standin_wheels, tmp_path, monkeypatch
):
    from gpuenv.envs.export import export_environment

    locked = {(p.manager, p.name, p.version, p.build) for p in read_conda_lock(cpu_lock.files)}
    out = tmp_path / "environment.yml"
    assert (
        export_environment(TORCH_CPU, out, team_file=tmp_path / "team.yml").lock == cpu_lock.files
    )
    data = yaml.safe_load(out.read_text())
    conda_pins = [d for d in data["dependencies"] if isinstance(d, str)]
    assert {f"{n}={v}={b}" for m, n, v, b in locked if m == "conda"} == set(conda_pins)

    # a colleague receives it and locks it (`invoke lock --file environment.yml`), here into another
    # folder
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path / "colleague-locks"))
    again = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        env_file=out,
        mirrors=mirror_of(conda_channel),
    )
    assert {(p.manager, p.name, p.version, p.build) for p in read_conda_lock(again.files)} == locked


@needs_pypi
def test_the_teams_channels_replace_the_environments_and_enter_the_input_hash(
    conda_channel, standin_wheels, locks_dir, pypi, tmp_path
):
    from gpuenv.envs.locking import plan_lock

    default = plan_lock(TORCH_CPU, backend="conda-lock", wheelhouse=standin_wheels)
    own = plan_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        conda_channels=[conda_channel.as_uri()],
    )
    assert default.channels == ("conda-forge",) and own.channels == (conda_channel.as_uri(),)
    assert default.input_hash() != own.input_hash()
    result = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        conda_channels=[conda_channel.as_uri()],
    )
    urls = {p.url for p in condalock.read_lock(result.files, "linux-64").conda}
    assert urls and all(u.startswith(conda_channel.as_uri() + "/") for u in urls)


@needs_pypi
def test_an_aarch64_lock_holds_aarch64_wheels_and_the_linux_64_part_x86_64_ones(
    conda_channel, standin_wheels_both_arches, locks_dir, pypi, tmp_path
):
    """Each platform's pip part is locked by uv for that platform: the STAND-IN torch from a
    wheelhouse holding both architectures, numpy (a compiled wheel) from PyPI. The conda part for
    linux-aarch64 comes from the channel's metadata-only aarch64 python and its noarch packages."""
    from packaging.utils import parse_wheel_filename

    wheels = standin_wheels_both_arches
    result = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        platforms=["linux-64", "linux-aarch64"],
        wheelhouse=wheels,
        mirrors=mirror_of(conda_channel),
        team_file=team_file(tmp_path, "gpuenv-probe"),
    )
    for platform, arch, other in (
        ("linux-64", "x86_64", "aarch64"),
        ("linux-aarch64", "aarch64", "x86_64"),
    ):
        part = condalock.read_lock(result.files, platform)
        assert {p.name for p in part.conda} == {"python", "pip", "gpuenv-probe"}
        assert {p.subdir for p in part.conda} == {platform, "noarch"}
        pins = {p.name: p for p in part.pip}
        assert {"torch", "numpy", "pytest"} <= set(pins)
        assert all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) for p in part.pip), [
            p.sha256 for p in part.pip
        ]
        assert pins["torch"].url.endswith(f"torch-2.13.0+cpu-py3-none-manylinux_2_17_{arch}.whl")
        assert pins["torch"].sha256 == lockdir.file_sha256(
            wheels / pins["torch"].url.rsplit("/", 1)[-1]
        )
        numpy_tags = parse_wheel_filename(pins["numpy"].url.rsplit("/", 1)[-1])[3]
        assert all(tag.platform.endswith(arch) for tag in numpy_tags), pins["numpy"].url
        assert not any(other in p.url.rsplit("/", 1)[-1] for p in part.pip), [
            p.url for p in part.pip
        ]
