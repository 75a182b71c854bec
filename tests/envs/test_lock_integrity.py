"""A lock is checked against its metadata and the stack every time it is used; bad ones are one
line.

The lock directories here are real files laid out as `invoke lock` leaves them (metadata written
by gpuenv.envs.lockdir, the input hash from the real plan), then damaged the ways people damage
them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hangbound import HANG_BOUND_S
from lockcases import CPU_TORCH_WHEEL, TORCH_CPU, WHEELHOUSE

from gpuenv.envs import lockdir, locking
from gpuenv.envs.export import export_environment
from gpuenv.errors import BadInput, DataError
from gpuenv.images import plan as images

ROOT = Path(__file__).resolve().parents[2]
HASH = "--hash=sha256:" + "a" * 64
CPU_UV_LOCK = f"numpy==2.1.0 \\\n    {HASH}\ntorch==2.13.0+cpu \\\n    {HASH}\n"
CPU_CONDA_LOCK = (
    "version: 1\npackage:\n- {name: python, version: 3.11.9, manager: conda, platform: "
    "linux-64, build: h1_0, hash: {md5: abc}}\n- {name: torch, version: 2.13.0+cpu, manager: "
    "pip, platform: linux-64, hash: {sha256: abc}}\n"
)


def make_lock(
    locks_dir: Path,
    *,
    text: str = CPU_UV_LOCK,
    backend: str = "uv",
    team_file: Path | None = None,
    stack=TORCH_CPU,
) -> Path:
    """A lock directory of `stack` whose metadata matches the inputs `ensure_lock` would plan."""
    if team_file is None:
        team_file = locks_dir.parent / "team.yml"
        team_file.write_text("pip:\n  - six==1.17.0\n")
    plan = locking.plan_lock(stack, backend=backend, team_file=team_file)
    directory = locks_dir / stack.stack_id
    directory.mkdir(parents=True)
    lock_file = directory / lockdir.lock_file_name(backend)
    lock_file.write_text(text)
    (directory / lockdir.SPEC_FILE).write_text(plan.spec_text)
    lockdir.write_metadata(
        directory,
        lockdir.LockMetadata(
            stack=stack,
            backend=backend,
            input_hash=plan.input_hash(),
            lock_sha256=lockdir.file_sha256(lock_file),
            platforms=plan.platforms,
            source=plan.source,
            team_file=str(plan.origin) if plan.team_file_sha256 else None,
            team_file_sha256=plan.team_file_sha256,
        ),
    )
    return directory


def test_a_sound_lock_is_unchanged_pinned_and_buildable(locks_dir, tmp_path):
    directory = make_lock(locks_dir)
    team = locks_dir.parent / "team.yml"
    result = locking.ensure_lock(TORCH_CPU, backend="uv", team_file=team)
    assert result.skipped
    out = export_environment(TORCH_CPU, tmp_path / "env.yml", team_file=team)
    assert out.lock == directory / "requirements.lock.txt"
    assert "torch==2.13.0+cpu" in (tmp_path / "env.yml").read_text()
    assert images.read_lock(directory, TORCH_CPU).path == out.lock


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda p: p.write_text(p.read_text()[:40]), "changed since it was locked"),
        (lambda p: p.write_text(""), "changed since it was locked"),
        (lambda p: p.unlink(), "is missing (the metadata names the uv lock)"),
    ],
    ids=["truncated", "emptied", "deleted"],
)
def test_a_damaged_lock_is_an_error_for_lock_export_and_build(
    locks_dir, tmp_path, damage, fragment
):
    directory = make_lock(locks_dir)
    damage(directory / "requirements.lock.txt")
    team = locks_dir.parent / "team.yml"
    for use in (
        lambda: locking.ensure_lock(TORCH_CPU, backend="uv", team_file=team),
        lambda: export_environment(TORCH_CPU, tmp_path / "env.yml", team_file=team),
        lambda: images.plan_build(TORCH_CPU, directory),
    ):
        with pytest.raises(DataError) as caught:
            use()
        assert fragment in caught.value.render() and "invoke lock --force" in caught.value.render()
        assert "\n" not in caught.value.render()
    assert not (tmp_path / "env.yml").exists()


def test_a_lock_whose_content_is_not_the_stack_is_refused_even_with_a_matching_hash(locks_dir):
    directory = make_lock(locks_dir, text=f"torch==2.1.0 \\\n    {HASH}\n")
    with pytest.raises(
        DataError, match=r"does not hold the stack torch2.13.0-cpu-py3.11: it has torch 2.1.0"
    ):
        images.read_lock(directory, TORCH_CPU)


def test_conda_lock_python_must_be_the_stacks(locks_dir):
    directory = make_lock(
        locks_dir, backend="conda-lock", text=CPU_CONDA_LOCK.replace("3.11.9", "3.12.1")
    )
    with pytest.raises(DataError, match=r"it has Python 3.12.1, the stack wants 3.11"):
        images.read_lock(directory, TORCH_CPU)


def test_a_stray_conda_lock_file_does_not_win_over_the_uv_lock_the_metadata_names(locks_dir):
    directory = make_lock(locks_dir)
    (directory / "conda-lock.yml").write_text(CPU_CONDA_LOCK)
    lock = images.read_lock(directory, TORCH_CPU)
    assert lock.backend == "uv" and lock.path.name == "requirements.lock.txt"


def test_a_lock_file_without_metadata_is_not_trusted(locks_dir):
    directory = locks_dir / TORCH_CPU.stack_id
    directory.mkdir(parents=True)
    (directory / "conda-lock.yml").write_text(CPU_CONDA_LOCK)
    with pytest.raises(DataError, match="has no stack.json beside it"):
        images.read_lock(directory, TORCH_CPU)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"{not json", "stack.json:1: not valid JSON"),
        (b"\xff\xfe\x00binary", "stack.json: UTF-16 with a byte-order mark, but broken at byte 8"),
        (b"\xc3binary", "stack.json: not UTF-8 text (byte 0xc3 on line 1)"),
        (b"[1, 2]", "stack.json: not a JSON object"),
        (b"{}", "stack.json: no lock_format: not a gpuenv lock's metadata"),
        (
            json.dumps({"lock_format": lockdir.LOCK_FORMAT, "backend": "uv"}).encode(),
            "'input_hash' is missing",
        ),
        (
            json.dumps(
                {
                    "lock_format": lockdir.LOCK_FORMAT,
                    "backend": "pip",
                    "input_hash": "x",
                    "lock_sha256": "y",
                    "source": "s",
                    "stack_id": "z",
                }
            ).encode(),
            "unknown backend 'pip'",
        ),
    ],
    ids=[
        "not-json",
        "binary",
        "not-utf8",
        "list",
        "empty-object",
        "missing-key",
        "unknown-backend",
    ],
)
def test_corrupt_metadata_is_one_line_everywhere(locks_dir, tmp_path, content, fragment):
    directory = make_lock(locks_dir)
    (directory / "stack.json").write_bytes(content)
    for use in (
        lambda: locking.ensure_lock(
            TORCH_CPU, backend="uv", team_file=locks_dir.parent / "team.yml"
        ),
        lambda: export_environment(
            TORCH_CPU, tmp_path / "env.yml", team_file=locks_dir.parent / "team.yml"
        ),
        lambda: images.read_lock(directory, TORCH_CPU),
    ):
        with pytest.raises(DataError) as caught:
            use()
        assert fragment in caught.value.render() and "\n" not in caught.value.render()


def test_a_lock_of_an_older_format_is_relocked_by_lock_and_refused_by_build(locks_dir, monkeypatch):
    directory = make_lock(locks_dir)
    meta = json.loads((directory / "stack.json").read_text())
    (directory / "stack.json").write_text(json.dumps({**meta, "lock_format": 1}))
    with pytest.raises(DataError, match="made by another gpuenv"):
        images.read_lock(directory, TORCH_CPU)
    calls = []
    monkeypatch.setattr(
        locking,
        "_lock_into",
        lambda *args: calls.append(args) or (_ for _ in ()).throw(RuntimeError("stop here")),
    )
    with pytest.raises(
        RuntimeError, match="stop here"
    ):  # it went on to lock again instead of refusing
        locking.ensure_lock(TORCH_CPU, backend="uv", team_file=locks_dir.parent / "team.yml")
    assert calls and not any(p.name.endswith(".tmp") for p in locks_dir.iterdir())


def test_metadata_of_another_stack_is_refused(locks_dir):
    directory = make_lock(locks_dir)
    with pytest.raises(
        DataError, match="is the lock of torch2.13.0-cpu-py3.11, not of torch2.5.1-cu121-py3.11"
    ):
        from lockcases import TORCH_CU121

        images.read_lock(directory, TORCH_CU121)


def test_export_notices_a_team_file_that_changed_since_the_lock(locks_dir, tmp_path):
    team = tmp_path / "team.yml"
    team.write_text("pip:\n  - six==1.17.0\n")
    make_lock(locks_dir, team_file=team)
    export_environment(TORCH_CPU, tmp_path / "a.yml", team_file=team)  # unchanged: fine
    team.write_text("pip:\n  - six==1.16.0\n")
    with pytest.raises(
        DataError, match=rf"out of date: {team} changed since the lock: run invoke lock"
    ):
        export_environment(TORCH_CPU, tmp_path / "b.yml", team_file=team)
    other = tmp_path / "other-team.yml"
    other.write_text("pip:\n  - six==1.17.0\n  - rich\n")
    with pytest.raises(DataError, match=rf"it merged {team}, this export reads {other}"):
        export_environment(TORCH_CPU, tmp_path / "b.yml", team_file=other)
    assert not (tmp_path / "b.yml").exists()


# ---------------------------------------------------------------- invoke lock --file against the
# stack


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n    - torch==2.1.0\n",
            "shared.yml:5: 'torch==2.1.0' contradicts the stack torch2.13.0-cpu-py3.11",
        ),
        (
            "dependencies:\n  - python=3.12\n  - pip\n  - pip:\n    - torch==2.13.0\n",
            "shared.yml:2: 'python=3.12' contradicts the stack's Python 3.11",
        ),
        (
            "dependencies:\n  - python>=3.12\n  - pip\n  - pip:\n    - torch\n",
            "shared.yml:2: 'python>=3.12' contradicts the stack's Python 3.11",
        ),
        (
            "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n    - six\n",
            "shared.yml: has no torch requirement",
        ),
        (
            "dependencies:\n  - python=3.11\n  - pytorch=2.13\n  - pip\n  - pip:\n    - "
            "torch==2.13.0\n",
            None,
        ),
    ],
    ids=["torch-pin", "python-pin", "python-range", "no-framework", "conda-pytorch-is-not-torch"],
)
def test_lock_file_is_checked_against_the_stack_before_locking(locks_dir, tmp_path, text, fragment):
    shared = tmp_path / "shared.yml"
    shared.write_text(text)
    if (
        fragment is None
    ):  # conda's pytorch is another package name: not the stack's pip build, not refused here
        locking.plan_lock(TORCH_CPU, backend="conda-lock", env_file=shared)
        return
    with pytest.raises(BadInput) as caught:
        locking.ensure_lock(TORCH_CPU, backend="uv", env_file=shared)
    assert caught.value.render().startswith(str(tmp_path / fragment)), caught.value.render()
    assert not locks_dir.exists() or not any(locks_dir.iterdir())


def test_lock_file_with_another_build_of_the_framework_is_refused(tmp_path):
    from lockcases import TF_CPU

    shared = tmp_path / "shared.yml"
    shared.write_text(
        "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n    - tensorflow==2.15.1\n"
    )
    with pytest.raises(
        BadInput,
        match=r"shared.yml:5: 'tensorflow==2.15.1' is not the stack's build "
        r"\(tensorflow-cpu==2.15.1\)",
    ):
        locking.plan_lock(TF_CPU, backend="uv", env_file=shared)


def test_lock_file_matching_the_stack_passes_the_check(tmp_path):
    shared = tmp_path / "shared.yml"
    shared.write_text(
        "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n    - torch==2.13.0\n    - six\n"
    )
    plan = locking.plan_lock(TORCH_CPU, backend="uv", env_file=shared)
    assert plan.env_file == shared


def run_invoke(
    *args: str, locks: Path, cwd: Path = ROOT, timeout: float = 300, **popen
) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUENV_LOCKS_DIR": str(locks), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **popen,
    )


CPU_ARGS = ("--cuda", "cpu", "--framework", "torch", "--torch", "2.13.0", "--python", "3.11")


def test_invoke_lock_file_with_another_torch_exits_2_in_one_line(tmp_path):
    shared = tmp_path / "shared.yml"
    shared.write_text("dependencies:\n  - python=3.11\n  - pip\n  - pip:\n    - torch==2.1.0\n")
    done = run_invoke(
        "lock", *CPU_ARGS, "--backend", "uv", "--file", str(shared), locks=tmp_path / "locks"
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gpuenv: {shared}:5: 'torch==2.1.0' contradicts the stack torch2.13.0-cpu-py3.11 (torch "
        "2.13.0): lock it with --torch matching the file, or change the pin"
    ]
    assert not (tmp_path / "locks" / "torch2.13.0-cpu-py3.11").exists()


def test_invoke_lock_with_corrupt_metadata_is_one_line(tmp_path):
    locks = tmp_path / "locks"
    directory = locks / "torch2.13.0-cpu-py3.11"
    directory.mkdir(parents=True)
    (directory / "stack.json").write_text("{truncated")
    (directory / "requirements.lock.txt").write_text(CPU_UV_LOCK)
    done = run_invoke("lock", *CPU_ARGS, "--backend", "uv", locks=locks)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "stack.json:1: not valid JSON" in done.stderr and "invoke lock --force" in done.stderr


def test_a_huge_environment_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yml"
    with open(big, "w") as fh:
        fh.write("dependencies:\n  - pip\n  - pip:\n")
        line = "    - package-with-a-long-name-0000000\n"
        fh.write(line * (50 * 2**20 // len(line)))
    started = time.monotonic()
    with pytest.raises(
        BadInput,
        match=r"--file .*big.yml: larger than the 1 MiB an environment file may be \(50.0 MiB\)",
    ):
        locking.plan_lock(TORCH_CPU, backend="uv", env_file=big)
    with pytest.raises(
        BadInput,
        match=r"--team-file .*big.yml: larger than the 1 MiB an environment file may be \(50.0 "
        r"MiB\)",
    ):
        locking.plan_lock(TORCH_CPU, backend="uv", team_file=big)
    with pytest.raises(
        BadInput, match=r"--file /dev/zero: larger than the 1 MiB an environment file may be: "
    ):
        locking.plan_lock(TORCH_CPU, backend="uv", env_file=Path("/dev/zero"))
    with pytest.raises(BadInput, match=r"--team-file /dev/zero: larger than the 1 MiB"):
        locking.plan_lock(TORCH_CPU, backend="uv", team_file=Path("/dev/zero"))
    assert time.monotonic() - started < HANG_BOUND_S


# ---------------------------------------------------------------- leftovers and races


def test_unwritable_lock_folder_is_one_line(tmp_path, monkeypatch):
    view = tmp_path / "ro"
    view.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(view)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"mount -t tmpfs -o ro is not permitted here: {proc.stderr.strip()}")
    try:
        monkeypatch.setenv("GPUENV_LOCKS_DIR", str(view / "locks"))
        done = run_invoke("lock", *CPU_ARGS, "--backend", "uv", locks=view / "locks")
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gpuenv: cannot write the lock under {view / 'locks'}: the file system is read-only: "
        f"make {view / 'locks'} writable (or set GPUENV_LOCKS_DIR to a writable folder); the "
        "previous lock is unchanged"
    ]


def test_stale_temp_folders_of_gone_processes_are_removed(tmp_path):
    root = tmp_path / "locks"
    root.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        stale = root / f".torch2.13.0-cpu-py3.11.{gone.pid}.abc123.tmp"
        stale_old = root / f".torch2.13.0-cpu-py3.11.old-{gone.pid}"
        live = root / f".torch2.13.0-cpu-py3.11.{alive.pid}.def456.tmp"
        reused = (
            root / f".torch2.13.0-cpu-py3.11.{alive.pid}.ghi789.tmp"
        )  # older than the process with that id
        for folder in (stale, stale_old, live, reused):
            folder.mkdir()
            (folder / "requirements.in").write_text("x\n")
        past = time.time() - 3600
        os.utime(reused, (past, past))
        (root / "torch2.13.0-cpu-py3.11").mkdir()  # a lock: never touched
        removed = lockdir.clean_stale(root)
        assert sorted(p.name for p in removed) == sorted([stale.name, stale_old.name, reused.name])
        assert sorted(p.name for p in root.iterdir()) == sorted(
            [live.name, "torch2.13.0-cpu-py3.11"]
        )
    finally:
        alive.kill()
        alive.wait()


_SWAPPER = """
import sys
from pathlib import Path
from gpuenv.envs import lockdir
root, who, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
target = root / "torch2.13.0-cpu-py3.11"
for i in range(rounds):
    work = lockdir.new_work_dir(root, target.name)
    (work / "requirements.lock.txt").write_text(f"{who} {i}\\n" * 50)
    lockdir.replace_directory(work, target)
print("done", who)
"""


def test_two_writers_swapping_at_once_both_finish_and_leave_one_whole_lock(tmp_path):
    root = tmp_path / "locks"
    root.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _SWAPPER, str(root), who, "300"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("a", "b")
    ]
    results = [w.communicate(timeout=120) for w in writers]
    for writer, (out, err) in zip(writers, results):
        assert writer.returncode == 0, err[-2000:]
    assert sorted(p.name for p in root.iterdir()) == ["torch2.13.0-cpu-py3.11"], (
        "leftover temp or old folders"
    )
    lines = (root / "torch2.13.0-cpu-py3.11" / "requirements.lock.txt").read_text().splitlines()
    assert len(lines) == 50 and len(set(lines)) == 1 and lines[0].endswith(" 299")


@pytest.mark.network
def test_sigterm_during_lock_exits_cleanly_and_leaves_no_temp_folder(pypi, tmp_path):
    if not CPU_TORCH_WHEEL.is_file():
        pytest.skip(f"the CPU PyTorch wheel {CPU_TORCH_WHEEL} is not on this machine")
    locks = tmp_path / "locks"
    env = {
        **os.environ,
        "GPUENV_LOCKS_DIR": str(locks),
        "PYTHONPATH": str(ROOT),
        "UV_NO_CACHE": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "invoke",
        "--search-root",
        str(ROOT),
        "lock",
        *CPU_ARGS,
        "--backend",
        "uv",
        "--wheelhouse",
        str(WHEELHOUSE),
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if locks.is_dir() and any(p.name.endswith(".tmp") for p in locks.iterdir()):
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the lock finished before a temporary folder was seen"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("gpuenv: terminated")
    assert [p.name for p in locks.iterdir()] == [], "a temporary lock folder was left behind"
