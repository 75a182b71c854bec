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


def stage_in(staged_lock, cache_root: Path, said: list[str]):
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


def layer_sha256(staged) -> str:
    """The sha256 of the environment's tar as the image build sends it: the layer's bytes (a staged
    folder, or a prefix read for the image)."""
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


def test_the_image_environment_is_read_from_the_installed_prefix_byte_for_byte(
    staged_lock, tmp_path, private_cache
):
    from gpuenv.envs import fromhost
    from gpuenv.images import identity

    said: list[str] = []
    direct = stage_in(staged_lock, tmp_path / "direct", said)
    assert isinstance(direct, Path), said
    assert not any("taking the environment" in line for line in said), said
    layer = layer_sha256(direct)
    archive = context.EnvArchive(direct, "opt/gpuenv/env", 0)
    named = identity.entry_digest(context.ENV_ARCHIVE, archive)
    image = str(condalock.IMAGE_ENV_DIR).encode()
    for number, where in enumerate(WHERE):
        prefix = install_into(staged_lock, tmp_path / where)
        said.clear()
        taken = stage_in(staged_lock, tmp_path / f"taken-{number}", said)
        assert f"taking the environment {prefix} installed for the image" in " ".join(said)
        assert isinstance(taken, fromhost.PrefixForImage), [
            line for line in said if "not taken" in line
        ]
        assert not (tmp_path / f"taken-{number}").exists(), "nothing staged: no copy written"
        assert layer_sha256(taken) == layer, f"{where}: the same environment layer"
        archive = context.EnvArchive(taken, "opt/gpuenv/env", 0)
        assert identity.entry_digest(context.ENV_ARCHIVE, archive) == named, "the same image name"
        # the paths the packages asked for name the image's, in every form the channel has
        for path in ("bin/gpuenv-hello", "bin/gpuenv-hello-py", "share/gpuenv-hello/paths.conf"):
            data = taken.read_bytes(path)
            assert image in data and str(prefix).encode() not in data, (where, path)
        assert taken.read_bytes("bin/pytest").startswith(b"#!" + image + b"/bin/")
    paths = [m.path for m in taken.members]
    for meta in (p for p in paths if p.startswith("conda-meta/") and p.endswith(".json")):
        record = json.loads(taken.read_bytes(meta))  # no temporary folder of an install
        assert record["url"].startswith("https://conda.anaconda.org/conda-forge/"), meta
        assert "extracted_package_dir" not in record and "link" not in record, meta
    assert installer.RECORD_FILE not in paths, "gpuenv's own files stay out"
    assert not [p for p in paths if "/site-packages/validate" in p]


def test_a_file_changed_after_the_check_stops_the_build(staged_lock, tmp_path, private_cache):
    """The image is the judged environment or none: a file of the prefix changed between the
    check and the build's reading of it stops the archive (and so the build), naming it."""
    from gpuenv.envs import fromhost

    prefix = install_into(staged_lock, tmp_path / "prefix")
    taken = stage_in(staged_lock, tmp_path / "cache", [])
    assert isinstance(taken, fromhost.PrefixForImage)
    numpy = next(prefix.glob("lib/python3*/site-packages/numpy/__init__.py"))
    numpy.write_bytes(numpy.read_bytes().replace(b"import", b"imp0rt", 1))
    with pytest.raises(fromhost.Changed, match=f"{numpy} changed after it was checked"):
        layer_sha256(taken)


def test_bytecode_missing_from_the_cache_gives_the_locks_install(
    staged_lock, tmp_path, private_cache
):
    """The image's bytecode comes from the cache the install filled; when it was cleared the lock
    is installed for the image, the reason said, and the layer is the same."""
    import shutil

    said: list[str] = []
    layer = layer_sha256(stage_in(staged_lock, tmp_path / "direct", said))
    prefix = install_into(staged_lock, tmp_path / "prefix")
    shutil.rmtree(private_cache / "bytecode")
    said.clear()
    staged = stage_in(staged_lock, tmp_path / "cache", said)
    refusal = [line for line in said if line.startswith(f"not taken from {prefix}:")]
    assert refusal and "is not in gpuenv's bytecode cache" in refusal[0], said
    assert isinstance(staged, Path) and layer_sha256(staged) == layer


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
        fromhost.for_image(
            prefix,
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
    refusal = [line for line in said if line.startswith(f"not taken from {prefix}:")]
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


def test_the_install_times_of_conda_meta_history_are_dropped():
    """rattler versions that log each transaction write its time there: two installs of one lock
    would differ in it."""
    from gpuenv.envs import fromhost

    history = "==> 2026-11-25 23:41:02 <==\n# cmd: rattler install\n+https://x/zlib-1.3-0.conda\n"
    assert fromhost.without_install_times(history) == (
        "# cmd: rattler install\n+https://x/zlib-1.3-0.conda\n"
    )
