"""The project remembers its stack (issue 28): `lock` and `build` record it in
envs/locks/current.json, and `export`, `install`, `push`, `run` and `validate` address it when no
stack option is given;
invoke.yaml pins and stack options still win, and `doctor` says which stack is current and why.

Real tasks in subprocesses, with their own lock folder (GPUENV_LOCKS_DIR).
"""

from __future__ import annotations

import json

import pytest
from teamcases import CPU_STACK_ARGS, WHEELHOUSE, run_gpuenv

pytestmark = pytest.mark.network  # the uv lock asks PyPI for torch's dependencies

STACK = "torch2.13.0-cpu-py3.11"


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """A lock folder in which `gpuenv lock` made the CPU stack (and so recorded it)."""
    if not any(WHEELHOUSE.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip(f"no torch-2.13.0+cpu wheel in {WHEELHOUSE}")
    root = tmp_path_factory.mktemp("remembered-locks")
    done = run_gpuenv(
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "uv",
        "--wheelhouse",
        str(WHEELHOUSE),
        env={"GPUENV_LOCKS_DIR": str(root)},
    )
    if (
        done.returncode != 0
        and "PyPI" in done.stderr + done.stdout
        and "network" in done.stderr + done.stdout
    ):
        pytest.skip(f"cannot lock with uv (PyPI needed): {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"current stack: {STACK}" in done.stdout + done.stderr
    return root


def env_for(root, **extra: str) -> dict[str, str]:
    return {"GPUENV_LOCKS_DIR": str(root), **extra}


def test_lock_records_the_stack_in_current_json(locked):
    data = json.loads((locked / "current.json").read_text())
    assert data["stack_id"] == STACK and data["made_by"] == "lock"
    assert data["lock_file"] == f"{STACK}/requirements.lock.txt"


def test_tasks_without_stack_options_address_the_remembered_stack_and_say_so(locked, tmp_path):
    for args in (
        ["--dry", "export", "--output", str(tmp_path / "environment.yml")],
        ["--dry", "install", "--prefix", str(tmp_path / "p")],
        ["--dry", "push", "--registry", "127.0.0.1:5999"],
    ):
        done = run_gpuenv(*args, env=env_for(locked))
        if args[1] == "push" and done.returncode == 1:
            # push plans from the engine's image of this lock, which this test does not build:
            # whether one is there depends on the other tests, so its refusal is read instead
            # (it still names the remembered stack it addressed)
            assert f"image for stack {STACK}" in done.stderr or (
                f"of stack {STACK} was built from the current lock" in done.stderr
            ), done.stderr
        else:
            assert done.returncode == 0, (args, done.stdout + done.stderr)
            assert STACK in done.stdout, args
        said = [line for line in done.stderr.splitlines() if "remembered" in line]
        assert said == [
            f"stack: {STACK}, remembered from the last `invoke lock` "
            f"({locked / 'current.json'}); stack options choose another"
        ], args


def test_a_real_export_uses_the_remembered_lock(locked, tmp_path):
    done = run_gpuenv("export", "--output", str(tmp_path / "environment.yml"), env=env_for(locked))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch==2.13.0" in (tmp_path / "environment.yml").read_text()


def test_stack_options_and_invoke_yaml_pins_win(locked, tmp_path):
    done = run_gpuenv(
        "--dry",
        "export",
        "--cuda",
        "cpu",
        "--torch",
        "2.12.0",
        "--python",
        "3.11",
        "--output",
        str(tmp_path / "e.yml"),
        env=env_for(locked),
    )
    assert "remembered" not in done.stderr and "torch2.12.0-cpu-py3.11" in done.stdout, (
        done.stdout + done.stderr
    )
    pinned = env_for(
        locked, INVOKE_GPUENV_CUDA="cpu", INVOKE_GPUENV_TORCH="2.12.0", INVOKE_GPUENV_PYTHON="3.11"
    )
    done = run_gpuenv("--dry", "export", "--output", str(tmp_path / "e.yml"), env=pinned)
    assert "remembered" not in done.stderr and "torch2.12.0-cpu-py3.11" in done.stdout, (
        done.stdout + done.stderr
    )
    doctor = run_gpuenv("doctor", env=pinned)
    assert (
        "current   torch2.12.0-cpu-py3.11" in doctor.stdout
        and "pinned (invoke.yaml)" in doctor.stdout
    ), doctor.stdout


def test_doctor_shows_the_remembered_stack_and_why(locked):
    done = run_gpuenv("doctor", env=env_for(locked))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"current   {STACK}" in done.stdout
    assert (
        f"remembered: the last `invoke lock` recorded it in {locked / 'current.json'}"
        in done.stdout
    )
    report = json.loads(run_gpuenv("doctor", "--json", env=env_for(locked)).stdout)
    assert (
        report["team_stack"]["current"] == "remembered"
        and report["team_stack"]["stack_id"] == STACK
    )


def test_without_a_record_the_stack_floats(tmp_path):
    done = run_gpuenv("doctor", env=env_for(tmp_path))
    assert "the stack floats" in done.stdout and "remembered" not in done.stdout


def test_a_damaged_record_is_one_line(tmp_path):
    (tmp_path / "current.json").write_text("{")
    done = run_gpuenv("--dry", "export", "--output", str(tmp_path / "e.yml"), env=env_for(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "current.json is not JSON" in done.stderr, (
        done.stderr
    )


def test_export_lock_hands_over_the_hashed_lock_itself(locked, tmp_path):
    done = run_gpuenv("export", "--lock", env=env_for(locked), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    shared = tmp_path / "requirements.lock.txt"
    assert shared.read_bytes() == (locked / STACK / "requirements.lock.txt").read_bytes()
    assert "--hash=sha256:" in shared.read_text() and "every package with its hash" in done.stdout


def test_lock_file_never_replaces_the_team_lock_without_force(locked, tmp_path):
    """`lock --file` over the team's lock is refused (one line, exit 2, the lock untouched);
    with --force it replaces it and says which lock is now current."""
    received = tmp_path / "shared.yml"
    done = run_gpuenv("export", "--output", str(received), env=env_for(locked))
    assert done.returncode == 0, done.stdout + done.stderr
    before = (locked / STACK / "stack.json").read_bytes()
    args = (
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "uv",
        "--wheelhouse",
        str(WHEELHOUSE),
        "--file",
        str(received),
    )
    done = run_gpuenv(*args, env=env_for(locked))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"gpuenv: {locked / STACK} holds the lock of the team's spec (the stack and "
        f"envs/team.yml); locking {received.resolve()} (invoke lock --file) would replace it: "
        "pass --force to replace it (it becomes the stack's current lock), or keep the current "
        "one"
    ), done.stderr
    assert (locked / STACK / "stack.json").read_bytes() == before
    done = run_gpuenv(*args, "--force", env=env_for(locked))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"current lock of {STACK}: {locked / STACK / 'requirements.lock.txt'}, from {received} "
        "(invoke lock --file)" in done.stdout
    )
    # and the next plain lock does not silently flip it back
    done = run_gpuenv(
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "uv",
        "--wheelhouse",
        str(WHEELHOUSE),
        env=env_for(locked),
    )
    assert (
        done.returncode == 2
        and "holds the lock of" in done.stderr
        and "(invoke lock --file)" in done.stderr
    ), done.stderr
    done = run_gpuenv(
        "lock",
        *CPU_STACK_ARGS,
        "--backend",
        "uv",
        "--wheelhouse",
        str(WHEELHOUSE),
        "--force",
        env=env_for(locked),
    )
    assert done.returncode == 0 and "from the team's spec" in done.stdout, done.stdout + done.stderr


def test_the_team_can_require_gpus_in_invoke_yaml(tmp_path):
    """gpuenv.expect_gpus reaches the suite as --expect-gpus (here seen through --dry); a bad value
    is one line."""
    done = run_gpuenv("--dry", "validate", "--local", env={"INVOKE_GPUENV_EXPECT_GPUS": "8"})
    assert done.returncode == 0 and "-m validate --expect-gpus 8" in done.stdout, (
        done.stdout + done.stderr
    )
    done = run_gpuenv(
        "--dry", "validate", "--local", "--expect-gpus", "2", env={"INVOKE_GPUENV_EXPECT_GPUS": "8"}
    )
    assert "--expect-gpus 2" in done.stdout, "the command line wins"
    done = run_gpuenv("--dry", "validate", "--local", env={"INVOKE_GPUENV_EXPECT_GPUS": "many"})
    assert (
        done.returncode == 2
        and done.stderr.count("\n") == 1
        and "gpuenv.expect_gpus" in done.stderr
    ), done.stderr


@pytest.fixture(scope="module")
def built(team_image, base_image, complete_wheelhouse, locks_dir, tmp_path_factory):
    """A lock folder with the session team image's lock and no record, in which `gpuenv build
    <stack options>` ran. Every image input is the team image's, so the engine reuses it
    (`unchanged: reused`): a real build, seconds long. Returns (folder, the build's output)."""
    import shutil

    from teamcases import team_build_args

    root = tmp_path_factory.mktemp("built-locks")
    shutil.copytree(locks_dir / STACK, root / STACK)
    assert not (root / "current.json").exists()
    done = run_gpuenv(
        *team_build_args(base_image, complete_wheelhouse), env=env_for(root), timeout=1800
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"unchanged: reused {team_image.id}" in done.stdout, done.stdout[-2000:]
    return root, done.stdout + done.stderr


@pytest.mark.docker
def test_build_records_the_stack_it_built(built):
    root, output = built
    data = json.loads((root / "current.json").read_text())
    assert data["stack_id"] == STACK and data["made_by"] == "build", data
    assert data["lock_file"] == f"{STACK}/requirements.lock.txt" and (
        data["cuda"],
        data["release"],
        data["python"],
    ) == ("cpu", "2.13.0", "3.11")
    assert (
        f"current stack: {STACK} (lock {root / STACK / 'requirements.lock.txt'}), recorded in "
        f"{root / 'current.json'}" in output
    )


@pytest.mark.docker  # run and validate look the stack's image up on the engine, even with --dry
def test_run_and_validate_without_stack_options_address_the_built_stack(
    built, team_image, tmp_path
):
    """The two commands a user types right after `invoke build`: with no option they take the
    remembered stack's image, and say where the stack came from."""
    root, _ = built
    for args, says in (
        (["--dry", "run", "--", "python", "-V"], f"would run python -V in {team_image.id} "),
        (["--dry", "validate", "--quick"], f"would validate in {STACK} ("),
    ):
        done = run_gpuenv(*args, env=env_for(root), cwd=tmp_path)
        assert done.returncode == 0, (args, done.stdout + done.stderr)
        said = [line for line in done.stderr.splitlines() if "remembered" in line]
        assert said == [
            f"stack: {STACK}, remembered from the last `invoke build` ({root / 'current.json'}); "
            "stack options choose another"
        ], args
        assert done.stdout.startswith(says), (args, done.stdout)
