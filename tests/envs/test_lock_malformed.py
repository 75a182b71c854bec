"""Malformed inputs end in one line naming the file and line, and leave no partial files.

One folder per case under fixtures/malformed/: the input file and expected.yml (which option
takes it and the start of the message).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from lockcases import FIXTURES, TORCH_CPU, TORCH_CU121

from gpuenv.envs.locking import ensure_lock
from gpuenv.errors import BadInput

CASES = sorted(p for p in (FIXTURES / "malformed").iterdir() if p.is_dir())


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` with its content hash, to prove nothing changed."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def previous_lock(locks_dir: Path) -> Path:
    """A lock directory as an earlier `invoke lock` left it (content is irrelevant, only that it
    survives)."""
    directory = locks_dir / TORCH_CU121.stack_id
    directory.mkdir(parents=True)
    (directory / "stack.json").write_text('{"backend": "conda-lock", "input_hash": "earlier"}\n')
    (directory / "conda-lock.yml").write_text("version: 1\npackage: []\n")
    return directory


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("backend", ["conda-lock", "uv"])
def test_malformed_input_is_one_line_with_file_and_line_and_writes_nothing(
    case, backend, locks_dir, previous_lock
):
    expected = yaml.safe_load((case / "expected.yml").read_text())
    source = next(p for p in case.iterdir() if p.name != "expected.yml")
    before = snapshot(locks_dir)

    with pytest.raises(BadInput) as err:
        ensure_lock(TORCH_CU121, backend=backend, **{expected["option"]: source})

    message = err.value.render()
    assert "\n" not in message
    assert message.startswith(
        f"{case / expected['message'].split(':', 1)[0]}:{expected['message'].split(':', 1)[1]}"
    ), message
    assert snapshot(locks_dir) == before
    assert sorted(p.name for p in locks_dir.iterdir()) == [TORCH_CU121.stack_id], (
        "no temporary folders left"
    )


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(platforms=["linux-64", "linux-32"]), "unknown platform 'linux-32'"),
        (dict(backend="pip-tools"), "--backend 'pip-tools' is not known"),
        (
            dict(backend="uv", wheelhouse=Path("/nonexistent/wheels")),
            "--wheelhouse /nonexistent/wheels: no such folder",
        ),
        (
            dict(team_file=Path("/nonexistent/team.yml")),
            "--team-file /nonexistent/team.yml: no such file",
        ),
        (dict(env_file=Path("/nonexistent/env.yml")), "--file /nonexistent/env.yml: no such file"),
        (
            dict(backend="uv", team_file=FIXTURES / "team-basic" / "team.yml"),
            "the uv backend is pip-only and cannot lock conda packages: numpy >=1.26,<3, "
            "jupyterlab=4.2",
        ),
    ],
)
def test_bad_options_are_one_line_errors_that_write_nothing(
    kwargs, fragment, locks_dir, previous_lock
):
    before = snapshot(locks_dir)
    with pytest.raises(BadInput) as err:
        ensure_lock(TORCH_CPU if kwargs.get("backend") == "uv" else TORCH_CU121, **kwargs)
    assert fragment in err.value.render()
    assert "\n" not in err.value.render()
    assert snapshot(locks_dir) == before
