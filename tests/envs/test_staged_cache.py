"""The conda environment staged in the build cache (condalock.stage_for_image) is checked
against its manifest before it is reused: before, one that lost a file failed every later build
of that lock and staging again never repaired it, and one that lost a package built an image
without it."""

from __future__ import annotations

import hashlib
import io
import json
import stat
from pathlib import Path

import pytest
import yaml
from lockcases import TORCH_CPU

from gpuenv.envs import condalock, lockdir
from gpuenv.envs import install as installer
from gpuenv.envs.locking import ensure_lock
from gpuenv.images import context


def test_a_lost_added_or_changed_entry_is_named(tmp_path):
    staged = tmp_path / "abc-linux-64"
    (staged / "conda-meta").mkdir(parents=True)
    (staged / "conda-meta" / "zlib-1.3-0.json").write_text("{}")
    (staged / "bin").mkdir()
    (staged / "bin" / "python").write_text("#!")
    (staged / "bin" / "python3").symlink_to("python")
    manifest = tmp_path / "abc-linux-64.manifest.json"
    manifest.write_text(json.dumps(condalock.tree_manifest(staged)))
    assert condalock.staged_damage(staged, manifest) is None
    (staged / "conda-meta" / "zlib-1.3-0.json").unlink()
    assert condalock.staged_damage(staged, manifest) == "conda-meta/zlib-1.3-0.json is missing"
    (staged / "conda-meta" / "zlib-1.3-0.json").write_text("{} ")
    assert condalock.staged_damage(staged, manifest) == "conda-meta/zlib-1.3-0.json changed"
    (staged / "conda-meta" / "zlib-1.3-0.json").write_text("{}")
    (staged / "stray").write_text("x")
    assert condalock.staged_damage(staged, manifest) == "stray was added"
    manifest.unlink()
    assert condalock.staged_damage(staged, manifest).startswith(
        "its manifest abc-linux-64.manifest.json: it does not exist"
    )


@pytest.fixture
def staged_lock(conda_channel, standin_wheels, locks_dir, pypi, tmp_path):
    team = tmp_path / "team.yml"
    team.write_text(yaml.safe_dump({"conda": ["gpuenv-probe", "gpuenv-hello"], "pip": []}))
    mirrors = {"https://conda.anaconda.org/conda-forge": conda_channel.as_uri()}
    lock = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors={"conda-forge": conda_channel.as_uri()},
        team_file=team,
    )
    path = lock.directory / condalock.CONDA_LOCK_FILE
    return path, lockdir.file_sha256(path), mirrors, standin_wheels


def stage_in(staged_lock, cache_root: Path, said: list[str]) -> Path:
    lock_path, lock_sha256, mirrors, wheels = staged_lock
    return condalock.stage_for_image(
        lock_path,
        stack=TORCH_CPU,
        lock_sha256=lock_sha256,
        platform="linux-64",
        target="the base image",
        mirrors=mirrors,
        wheelhouse=wheels,
        offline=False,
        cache_root=cache_root,
        say=said.append,
    )


@pytest.mark.parametrize("damage", ["lost-file", "lost-package"])
def test_a_damaged_staged_environment_is_staged_again(staged_lock, tmp_path, private_cache, damage):
    said: list[str] = []

    def stage() -> Path:
        return stage_in(staged_lock, tmp_path / "cache", said)

    staged = stage()
    whole = condalock.tree_manifest(staged)
    meta = sorted((staged / "conda-meta").glob("gpuenv-hello-*.json"))
    assert meta, "the lock's gpuenv-hello package is staged"
    if damage == "lost-file":
        (staged / "bin" / "python").unlink()
    else:  # the package's files and its record, as a cleaner would remove them
        for entry in json.loads(meta[0].read_text())["files"]:
            (staged / entry).unlink(missing_ok=True)
        meta[0].unlink()
    said.clear()
    assert stage() == staged
    assert any("is damaged" in line and "staging it again" in line for line in said), said
    assert condalock.tree_manifest(staged) == whole, "staged again whole"
    said.clear()
    stage()
    assert any("is staged already" in line for line in said), said
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")], (
        "nothing left beside it"
    )


# ---------------------------------------------------------------- copied from the host's prefix


def install_into(staged_lock, prefix: Path) -> Path:
    lock_path, _, mirrors, wheels = staged_lock
    plan = installer.plan_install(
        TORCH_CPU, lock_path.parent, prefix, wheelhouse=wheels, mirrors=mirrors
    )
    installer.install(plan, say=lambda _m: None, output=lambda _m: None)
    return plan.folder


def layer_sha256(staged: Path) -> str:
    """The sha256 of the environment's tar as the image build sends it: the layer's bytes."""
    out = io.BytesIO()
    context.write_env_archive(context.EnvArchive(staged, "opt/gpuenv/env", 0), out)
    return hashlib.sha256(out.getvalue()).hexdigest()


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    """gpuenv's cache of this test alone: no other test's prefix is remembered in it."""
    monkeypatch.setenv("GPUENV_CACHE_DIR", str(tmp_path / "gpuenv-cache"))
    return tmp_path / "gpuenv-cache"


#: Install paths whose files the copy rewrites: short; with blanks and 110 characters long, for
#: which rattler and uv write /bin/sh trampolines instead of #! lines.
WHERE = ("p", "team envs/torch 2.13", "a-path-too-long-for-a-plain-interpreter-line/" * 2 + "p")


def test_the_image_environment_is_copied_from_the_installed_prefix_byte_for_byte(
    staged_lock, tmp_path, private_cache
):
    said: list[str] = []
    direct = stage_in(staged_lock, tmp_path / "direct", said)
    assert not any("copying the environment" in line for line in said), said
    layer = layer_sha256(direct)
    image = str(condalock.IMAGE_ENV_DIR).encode()
    for number, where in enumerate(WHERE):
        prefix = install_into(staged_lock, tmp_path / where)
        said.clear()
        copied = stage_in(staged_lock, tmp_path / f"copied-{number}", said)
        assert f"copying the environment {prefix} installed for the image" in " ".join(said)
        assert not any(line.startswith("linking") for line in said), [
            line for line in said if "not copied" in line
        ]
        assert layer_sha256(copied) == layer, f"{where}: the same environment layer"
        # the paths the packages asked for name the image's, in every form the channel has
        for path in ("bin/gpuenv-hello", "bin/gpuenv-hello-py", "share/gpuenv-hello/paths.conf"):
            data = (copied / path).read_bytes()
            assert image in data and str(prefix).encode() not in data, (where, path)
        assert (copied / "bin" / "pytest").read_bytes().startswith(b"#!" + image + b"/bin/")
    for meta in (copied / "conda-meta").glob("*.json"):  # no temporary folder of an install
        record = json.loads(meta.read_text())
        assert record["url"].startswith("https://conda.anaconda.org/conda-forge/"), meta.name
        assert "extracted_package_dir" not in record and "link" not in record, meta.name
    assert not (copied / installer.RECORD_FILE).exists(), "gpuenv's own files stay out"
    assert not list(copied.glob("lib/python3*/site-packages/validate"))


def test_a_prefix_changed_since_its_install_is_not_copied(staged_lock, tmp_path, private_cache):
    """Each change is met by the copy's checks (the change undone before the next one); the
    prefix as installed is then copied."""
    from gpuenv.envs import fromhost
    from gpuenv.envs.verify import expected_from_lock

    lock_path, lock_sha256, _, _ = staged_lock
    compared = expected_from_lock(lock_path.parent, None)
    prefix = install_into(staged_lock, tmp_path / "prefix")
    site = next(prefix.glob("lib/python3*/site-packages"))
    edits = {
        "edited placeholder file": (prefix / "share/gpuenv-hello/paths.conf", "extra=1\n"),
        "edited entry point": (prefix / "bin/gpuenv-probe", "print('changed')\n"),
        "edited pip script": (prefix / "bin/pytest", "print('x')\n"),
        "added module": (site / "sneaky.py", "import os\n"),
    }

    def copy(number: int) -> None:
        fromhost.copy_for_image(
            prefix,
            tmp_path / f"copy-{number}",
            final_prefix=condalock.IMAGE_ENV_DIR,
            lock_sha256=lock_sha256,
            expected=compared.expected,
            expected_from=compared.what,
        )

    for number, (damage, (path, extra)) in enumerate(edits.items()):
        before = path.read_bytes() if path.exists() else None
        path.write_bytes((before or b"") + extra.encode())
        with pytest.raises(fromhost.NotCopied, match="is not what its lock installed"):
            copy(number)
        if before is None:
            path.unlink()
        else:
            path.write_bytes(before)
    # unchanged, but a team member could change it and its record together
    shared = site / "numpy" / "__init__.py"
    mode = shared.stat().st_mode
    shared.chmod(mode | stat.S_IWGRP)
    with pytest.raises(fromhost.NotCopied, match="can be changed by another user"):
        copy(len(edits))
    shared.chmod(mode)
    copy(len(edits) + 1)  # as installed: copied


def test_a_changed_prefix_gives_the_image_the_locks_bytes(staged_lock, tmp_path, private_cache):
    prefix = install_into(staged_lock, tmp_path / "prefix")
    script = prefix / "bin" / "gpuenv-probe"
    script.write_text(script.read_text() + "print('changed')\n")
    said: list[str] = []
    staged = stage_in(staged_lock, tmp_path / "cache", said)
    refusal = [line for line in said if line.startswith(f"not copied from {prefix}:")]
    assert refusal and "is not what its lock installed" in refusal[0], said
    assert any(line.startswith("linking") for line in said), "installed from the lock instead"
    assert b"changed" not in (staged / "bin" / "gpuenv-probe").read_bytes()


def test_the_prefixes_remembered_are_read_safely(private_cache):
    from gpuenv.envs import fromhost

    assert fromhost.remembered("ab" * 32, "linux-64") == []
    for n in range(fromhost.KEEP + 2):
        fromhost.remember(Path(f"/p/{n}"), "ab" * 32, "linux-64")
    fromhost.remember(Path("/p/2"), "ab" * 32, "linux-64")
    assert fromhost.remembered("ab" * 32, "linux-64")[:2] == [Path("/p/2"), Path("/p/5")]
    assert len(fromhost.remembered("ab" * 32, "linux-64")) == fromhost.KEEP
    fromhost.registry_file("ab" * 32, "linux-64").write_text('{"not": "a list"}')
    assert fromhost.remembered("ab" * 32, "linux-64") == []
    fromhost.registry_file("ab" * 32, "linux-64").write_text('["relative/path", "/abs"]')
    assert fromhost.remembered("ab" * 32, "linux-64") == [Path("/abs")]
