"""`invoke install` against hostile prefixes and moments (issue 21, item 4): as strict and atomic
as `build`.

- Prefixes refused in one line before any slow work: the kernel's folders, names no file system
  takes, dangling links, files, mount points (real tmpfs mounts), folders holding a mount, and
  read-only and noexec file systems. These need no lock: the prefix is checked first.
- A lock is verified against the stack: a torch lock copied under a TensorFlow stack's name is
  refused by install and push.
- Real installs of the CPU lock (the wheelhouse, uv's cache): under `umask 077` through a
  symbolic link, the link is kept, its folder replaced, and the team can read it; SIGTERM sent
  while the old prefix is being removed lets the swap finish and says so; a full tmpfs while the
  suite is copied is one line with "No space left on device" and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from teamcases import CPU_STACK_ARGS, ROOT, WHEELHOUSE, run_invoke

TF_STACK_ARGS = (
    "--cuda",
    "cpu",
    "--framework",
    "tensorflow",
    "--tensorflow",
    "2.21.0",
    "--python",
    "3.11",
)
TF_STACK_ID = "tensorflow2.21.0-cpu-py3.11"
RECORD = "gpuenv-prefix.json"


def install_args(prefix: Path | str, *extra: str) -> tuple[str, ...]:
    return (
        "install",
        *CPU_STACK_ARGS,
        "--prefix",
        str(prefix),
        "--wheelhouse",
        str(WHEELHOUSE),
        *extra,
    )


def one_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    return proc.stderr.strip()


@pytest.fixture
def mount(tmp_path):
    """mount(folder, options): a tmpfs the test makes; every one is unmounted at the end."""
    made: list[Path] = []

    def make(folder: Path, options: str = "size=1m") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(
                f"cannot mount a tmpfs here (root and CAP_SYS_ADMIN needed): {done.stderr.strip()}"
            )
        made.append(folder)
        return folder

    yield make
    for folder in reversed(made):
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


# ---------------------------------------------------------------- prefixes refused up front


def test_prefixes_that_cannot_be_installed_into_are_one_line_in_dry_and_real_runs(tmp_path, mount):
    locks = tmp_path / "locks"  # empty: the prefix is refused before the lock is even looked for
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "a-file").write_text("x")
    mount(tmp_path / "mnt")
    (tmp_path / "outer").mkdir()
    (tmp_path / "outer" / RECORD).write_text("{}")  # a gpuenv prefix, but a mount inside it
    mount(tmp_path / "outer" / "data")
    mount(tmp_path / "ro", "size=1m,ro")
    mount(tmp_path / "noexec", "size=1m,noexec")
    cases = {
        "/proc/gpuenv-env": "it is under /proc, which the kernel provides",
        "/sys/fs/gpuenv": "it is under /sys, which the kernel provides",
        str(tmp_path / ("x" * 300)): "is 300 bytes long; a file or folder name is at most 255",
        str(
            tmp_path / ("y" * 240)
        ): "the folder name is 240 bytes; with the temporary names gpuenv makes beside it, it "
        "may be 233 at most",
        str(
            tmp_path / "dangling"
        ): f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist",
        str(tmp_path / "a-file"): "is a file",
        str(tmp_path / "a-file" / "env"): f"{tmp_path / 'a-file'} is a file, not a folder",
        str(tmp_path / "mnt"): "is a mount point, which cannot be replaced by a rename",
        str(tmp_path / "outer"): f"holds the mount point {tmp_path / 'outer' / 'data'}",
        str(tmp_path / "ro" / "env"): f"{tmp_path / 'ro'} is on a read-only file system",
        str(
            tmp_path / "noexec" / "env"
        ): f"{tmp_path / 'noexec'} is on a file system mounted noexec",
        # one line, the escape made inert
        "/proc/a\nb\x1b[31m": "--prefix /proc/a\\nb\\x1b[31m: it is under /proc",
    }
    before = sorted(p.name for p in tmp_path.iterdir())
    for prefix, words in cases.items():
        for dry in ((), ("--dry",)):
            started = time.monotonic()
            line = one_line(
                run_invoke(
                    *dry, *install_args(prefix), env={"GPUENV_LOCKS_DIR": str(locks)}, timeout=120
                )
            )
            assert line.startswith("gpuenv: --prefix ") and words in line, (prefix, line)
            assert len(line) < 400, "a 300-byte name is shortened in the message"
            assert time.monotonic() - started < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing was made"
    assert not locks.exists() and all(
        os.listdir(tmp_path / name) == [] for name in ("mnt", "ro", "noexec")
    )


# ---------------------------------------------------------------- the lock belongs to the stack


def _tf_locks_holding_the_torch_lock(cpu_uv_lock, where: Path, *, rewrite_metadata: bool) -> Path:
    """The CPU torch lock copied under the TensorFlow stack's name (and, when asked, its metadata
    rewritten to claim the TensorFlow stack, as a hand edit would)."""
    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request

    locks = where / "locks"
    lock_dir = locks / TF_STACK_ID
    shutil.copytree(cpu_uv_lock.directory, lock_dir)
    if rewrite_metadata:
        tf = resolve_stack(
            Request(cuda="cpu", framework="tensorflow", tensorflow="2.21.0", python="3.11")
        )
        assert tf.stack_id == TF_STACK_ID
        meta = json.loads((lock_dir / "stack.json").read_text())
        meta.update(tf.to_dict())
        (lock_dir / "stack.json").write_text(json.dumps(meta))
    return locks


@pytest.mark.network
@pytest.mark.parametrize(
    "rewrite, words",
    [
        (False, f"is the lock of torch2.13.0-cpu-py3.11, not of {TF_STACK_ID}"),
        (True, f"does not hold the stack {TF_STACK_ID}: tensorflow-cpu is not in it"),
    ],
)
def test_a_torch_lock_under_a_tensorflow_stacks_name_is_refused_by_install_and_push(
    cpu_uv_lock, tmp_path, rewrite, words
):
    locks = _tf_locks_holding_the_torch_lock(cpu_uv_lock, tmp_path, rewrite_metadata=rewrite)
    env = {"GPUENV_LOCKS_DIR": str(locks)}
    prefix = tmp_path / "envs" / "tf"
    for args in (
        ("install", *TF_STACK_ARGS, "--prefix", str(prefix), "--wheelhouse", str(WHEELHOUSE)),
        ("--dry", "install", *TF_STACK_ARGS, "--prefix", str(prefix)),
        ("push", *TF_STACK_ARGS, "--registry", "127.0.0.1:1"),
        ("--dry", "push", *TF_STACK_ARGS, "--registry", "127.0.0.1:1"),
    ):
        line = one_line(run_invoke(*args, env=env, timeout=120), code=1)
        assert words in line and "relock" in line, (args, line)
    assert not (tmp_path / "envs").exists()


# ---------------------------------------------------------------- real installs


@pytest.fixture(scope="module")
def shared_folder():
    """A folder other users can reach (pytest's own tmp folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="gpuenv-shared-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def linked_install(cpu_uv_lock, locks_dir, shared_folder):
    """The CPU lock installed under `umask 077` through a symbolic link: shared/torch ->
    shared/real/torch-1."""
    real = shared_folder / "real" / "torch-1"
    real.parent.mkdir()
    real.parent.chmod(0o755)
    real.mkdir()  # an empty folder: gpuenv may fill it
    link = shared_folder / "torch"
    link.symlink_to(Path("real") / "torch-1")  # relative, as people make them
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *install_args(link)],
        cwd=ROOT,
        env={**os.environ, "GPUENV_LOCKS_DIR": str(locks_dir)},
        capture_output=True,
        text=True,
        timeout=1200,
        preexec_fn=lambda: os.umask(0o077),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return link, real, proc


@pytest.mark.network
def test_a_linked_prefix_under_umask_077_keeps_its_link_and_is_usable_by_others(
    linked_install, cpu_uv_lock
):
    link, real, proc = linked_install
    assert f"installed torch2.13.0-cpu-py3.11 into {link} (a link to {real})" in proc.stdout
    assert link.is_symlink() and os.readlink(link) == "real/torch-1", "the link is kept as it was"
    assert sorted(os.listdir(link.parent)) == ["real", "torch"] and os.listdir(real.parent) == [
        "torch-1"
    ], "nothing left beside"
    assert json.loads((real / RECORD).read_text())["lock_sha256"] == cpu_uv_lock.sha256

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    # The parent is 0755: the prefix follows it, not the installer's umask 077.
    assert (
        mode(real) == 0o755 and mode(real / "bin") == 0o755 and mode(real / "stack.json") == 0o644
    )
    torch_init = next(real.glob("lib/python3.*/site-packages/torch/__init__.py"))
    assert mode(torch_init) == 0o644 and mode(torch_init.parent) == 0o755
    assert mode(real / "bin" / "activate") == 0o644
    if shutil.which("runuser"):
        for path in (real / "stack.json", torch_init):
            done = subprocess.run(
                ["runuser", "-u", "nobody", "--", "cat", str(path)], capture_output=True, text=True
            )
            assert done.returncode == 0, f"another user cannot read {path}: {done.stderr}"
    done = subprocess.run(
        [str(link / "bin" / "python"), "-c", "import torch, sys; print(torch.__version__)"],
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "2.13.0+cpu", done.stderr


@pytest.mark.network
def test_sigterm_while_the_old_prefix_is_removed_lets_the_swap_finish_and_says_so(
    linked_install, locks_dir
):
    link, real, _ = linked_install
    before = json.loads((real / RECORD).read_text())["installed_at"]
    time.sleep(1.1)  # a new installed_at second
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoke",
            "--search-root",
            str(ROOT),
            *install_args(link, "--force"),
        ],
        cwd=ROOT,
        env={**os.environ, "GPUENV_LOCKS_DIR": str(locks_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sent = False
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline and proc.poll() is None:
        if any(
            ".old-" in name for name in os.listdir(real.parent)
        ):  # the old prefix renamed aside: the swap is under way
            proc.send_signal(signal.SIGTERM)
            sent = True
            break
        time.sleep(0.001)
    out, err = proc.communicate(timeout=300)
    assert sent, f"the install ended before the swap was seen:\n{out[-2000:]}{err[-2000:]}"
    line = one_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), code=143)
    assert (
        "SIGTERM arrived while the new prefix was moved into place; the move was finished first"
        in line
    )
    assert "nothing half-written" not in line
    assert os.listdir(real.parent) == ["torch-1"], "an .old or temporary folder was left"
    assert link.is_symlink() and json.loads((real / RECORD).read_text())["installed_at"] != before


@pytest.mark.network
def test_a_full_disk_while_copying_the_suite_is_one_line_and_leaves_nothing(
    linked_install, cpu_uv_lock, cpu_stack, tmp_path, mount
):
    """A tmpfs with room for the environment but not for the suite (padded with 16 MiB): the copy
    fails.

    The room is measured from the real prefix the module installed, counted as tmpfs counts
    (whole pages per file)."""
    from gpuenv import VALIDATE_DIR
    from gpuenv.envs import install as installer
    from gpuenv.errors import ToolError

    _, real, _ = linked_install
    page = os.sysconf("SC_PAGE_SIZE")
    used = 0
    for folder, _dirs, files in os.walk(real):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                used += -(-os.path.getsize(path) // page) * page
    suite = tmp_path / "suite"
    shutil.copytree(VALIDATE_DIR, suite, ignore=shutil.ignore_patterns("__pycache__"))
    (suite / "padding.bin").write_bytes(os.urandom(16 << 20))
    disk = mount(
        tmp_path / "disk", f"size={used + (8 << 20)}"
    )  # the environment fits; the padded suite does not
    plan = installer.plan_install(
        cpu_stack, cpu_uv_lock.directory, disk / "env", wheelhouse=WHEELHOUSE, validate_dir=suite
    )
    said: list[str] = []
    with pytest.raises(ToolError) as caught:
        installer.install(plan, say=said.append, output=lambda _line: None)
    text = caught.value.render()
    assert "copying the validation suite into the prefix" in said, (
        f"it failed before the suite: {text}"
    )
    assert (
        f"install into {disk / 'env'} failed while copying the validation suite: No space left "
        "on device" in text
    )
    assert "\n" not in text and "nothing was left beside it" in text
    assert os.listdir(disk) == [], "a temporary folder was left on the full disk"


@pytest.mark.network
def test_a_full_disk_while_uv_installs_is_one_line_with_the_systems_words_and_leaves_nothing(
    cpu_uv_lock, locks_dir, tmp_path, mount
):
    disk = mount(tmp_path / "disk", "size=2m")
    line = one_line(
        run_invoke(
            *install_args(disk / "env"), env={"GPUENV_LOCKS_DIR": str(locks_dir)}, timeout=600
        ),
        code=1,
    )
    assert (
        line.startswith("gpuenv: uv pip install could not install")
        and "No space left on device (os error 28)" in line
    ), line
    assert os.listdir(disk) == [], "a temporary folder was left on the full disk"


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: os.mkfifo(p),
        lambda p: p.symlink_to("/dev/zero"),
        lambda p: p.write_text('{"stack": ' + "9" * 5000 + "}"),
        lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    ],
    ids=["fifo", "dev-zero", "digits", "deep"],
)
def test_a_hostile_prefix_record_reads_as_no_record(tmp_path, spoil):
    """A shared prefix's gpuenv-prefix.json goes through the bounded reader: before, a FIFO hung the
    read, /dev/zero filled memory, and deep or long-number JSON was a traceback. Unreadable means
    "not a gpuenv prefix", as a damaged record always did."""
    from gpuenv.envs.install import read_record

    spoil(tmp_path / RECORD)
    assert read_record(tmp_path) is None
    (tmp_path / RECORD).unlink()
    (tmp_path / RECORD).write_text('{"stack": "torch2.13.0-cpu-py3.11"}')
    assert read_record(tmp_path) == {"stack": "torch2.13.0-cpu-py3.11"}
