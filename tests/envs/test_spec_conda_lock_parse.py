"""Every spec gpuenv renders parses with conda-lock's own parser, offline (local name mapping)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from lockcases import ALL_STACKS, FIXTURES

from gpuenv.envs import condalock, spec
from gpuenv.envs.locking import MAPPING_FILE


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Parsing must not download anything (conda-lock fetches a name mapping unless given one)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access during an offline parse: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def conda_lock_parse(path: Path, platforms):
    from conda_lock.src_parser import make_lock_spec

    return make_lock_spec(
        src_files=[path], platform_overrides=list(platforms), mapping_url=str(MAPPING_FILE)
    )


def team_basic() -> spec.Packages:
    path = FIXTURES / "team-basic" / "team.yml"
    return spec.parse_team_file(path.read_text(), str(path))


@pytest.mark.parametrize("platforms", [("linux-64",), ("linux-64", "linux-aarch64")])
@pytest.mark.parametrize("with_team", [False, True])
@pytest.mark.parametrize("name", sorted(ALL_STACKS))
def test_rendered_spec_parses_with_conda_lock(tmp_path, name, with_team, platforms):
    stack = ALL_STACKS[name]
    team = team_basic() if with_team else None
    path = tmp_path / "environment.yml"
    path.write_text(spec.render_environment(stack, team, platforms))

    parsed = conda_lock_parse(path, platforms)

    assert sorted(parsed.dependencies) == sorted(platforms)
    for platform in platforms:
        deps = {d.name: d for d in parsed.dependencies[platform]}
        framework = stack.pip_requirement.split("[")[0].split("==")[0]
        assert deps[framework].manager == "pip"
        assert deps[framework].version == "==" + stack.framework_version + (
            f"+{stack.wheel_variant}" if stack.index_url else ""
        )
        assert deps["python"].manager == "conda" and deps["python"].version == "3.11.*"
        if "and-cuda" in stack.pip_requirement:
            assert deps["tensorflow"].extras == ["and-cuda"]
        if with_team:
            assert deps["numpy"].manager == "conda" and deps["transformers"].manager == "pip"
    expected_repos = ([stack.index_url] if stack.index_url else []) + (
        ["https://pypi.example.com/simple"] if with_team else []
    )
    assert [r.url for r in parsed.pip_repositories] == expected_repos
    assert [c.url for c in parsed.channels] == ["conda-forge"]
    # gpuenv's own wrapper around the same parser agrees
    assert set(condalock.parse_spec_with_conda_lock(path, platforms, MAPPING_FILE)) == set(
        platforms
    )


def test_received_file_normalised_for_conda_lock_parses(tmp_path):
    source = FIXTURES / "received" / "environment.yml"
    received = spec.parse_environment_file(source.read_text(), str(source))
    path = tmp_path / "environment.yml"
    path.write_text(spec.render_environment_file(received, ["linux-64"]))
    parsed = conda_lock_parse(path, ["linux-64"])
    names = {d.name: d.version for d in parsed.dependencies["linux-64"]}
    assert names["torchvision"] == "==0.20.1+cu121"
    assert [r.url for r in parsed.pip_repositories] == ["https://download.pytorch.org/whl/cu121"]


def test_received_file_as_is_does_not_parse_which_is_why_it_is_normalised(tmp_path):
    """conda-lock reads `--extra-index-url` in the pip list as a package: the reason for
    pip-repositories."""
    source = FIXTURES / "received" / "environment.yml"
    with pytest.raises(Exception):
        conda_lock_parse(source, ["linux-64"])


@pytest.mark.parametrize("name", sorted(ALL_STACKS))
def test_virtual_packages_file_is_read_by_conda_lock(tmp_path, name):
    from conda_lock.virtual_package import virtual_package_repo_from_specification

    stack = ALL_STACKS[name]
    path = tmp_path / "virtual-packages.yml"
    path.write_text(spec.render_virtual_packages(stack, ["linux-64", "linux-aarch64"]))
    repo = virtual_package_repo_from_specification(path)
    for platform in ("linux-64", "linux-aarch64"):
        names = {
            pkg.name: pkg.version
            for pkg in repo.packages_by_subdir
            if platform in repo.packages_by_subdir[pkg]
        }
        assert names["__glibc"] == "2.35"
        assert names.get("__cuda") == (None if stack.is_cpu else stack.cuda)


def test_the_local_mapping_is_valid_for_conda_lock():
    data = yaml.safe_load(MAPPING_FILE.read_text())
    assert data["torch"]["conda_name"] == "pytorch"
    from conda_lock.lookup import pypi_name_to_conda_name

    assert (
        pypi_name_to_conda_name("typing-extensions", mapping_url=str(MAPPING_FILE))
        == "typing_extensions"
    )


RESOLVER_REQUESTS = [
    dict(cuda="12.1", framework="torch"),
    dict(cuda="11.8", framework="torch"),
    dict(cuda="cpu", framework="torch"),
    dict(cuda="12.2", framework="tensorflow"),
    dict(cuda="cpu", framework="tensorflow"),
]


@pytest.mark.parametrize("wish", RESOLVER_REQUESTS, ids=lambda w: f"{w['framework']}-{w['cuda']}")
def test_specs_of_resolved_stacks_parse_with_conda_lock(tmp_path, wish):
    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request

    stack = resolve_stack(Request(**wish))
    path = tmp_path / "environment.yml"
    path.write_text(spec.render_environment(stack, None, ["linux-64"]))
    deps = {d.name: d for d in conda_lock_parse(path, ["linux-64"]).dependencies["linux-64"]}
    framework = (
        "torch"
        if stack.framework == "torch"
        else stack.pip_requirement.split("[")[0].split("==")[0]
    )
    assert deps[framework].manager == "pip"
    assert stack.framework_version in deps[framework].version
    assert deps["python"].version == f"{stack.python}.*"
