"""`invoke install --prefix DIR` replaces DIR only when gpuenv's own record proves gpuenv made
it: a record with the lock's hash and the manifest of what gpuenv put there, and nothing else in
the folder. A file of the record's name alone (anyone can `touch` it) proves nothing: before,
such a folder was deleted with the project's src/ inside it."""

from __future__ import annotations

import json

import pytest

from gpuenv.envs import install
from gpuenv.errors import BadInput

LOCK_HASH = "ab" * 32


def _record(folder, **fields) -> None:
    (folder / install.RECORD_FILE).write_text(json.dumps(fields))


def _project(folder) -> None:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "train.py").write_text("print('the project')\n")


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        (lambda f: (f / install.RECORD_FILE).touch(), "is not a record gpuenv wrote"),
        (lambda f: _record(f, lock_sha256=LOCK_HASH), "is not a record gpuenv wrote"),
        (lambda f: _record(f, lock_sha256="x", manifest=["bin"]), "is not a record gpuenv wrote"),
        (
            lambda f: _record(f, lock_sha256=LOCK_HASH, manifest=["bin", "lib"]),
            "it holds src, which gpuenv did not install",
        ),
        (lambda f: None, f"no {install.RECORD_FILE}"),
    ],
    ids=["touched-marker", "no-manifest", "bad-hash", "not-in-manifest", "no-record"],
)
def test_a_folder_whose_only_claim_is_a_marker_is_never_replaced(tmp_path, spoil, words):
    prefix = tmp_path / "env"
    _project(prefix)
    (prefix / "bin").mkdir()
    spoil(prefix)
    with pytest.raises(BadInput) as caught:
        install.check_prefix(prefix)
    line = caught.value.render()
    assert (
        line.startswith(f"--prefix {prefix} is a folder gpuenv did not make (") and words in line
    ), line
    assert "\n" not in line
    assert (prefix / "src" / "train.py").read_text() == "print('the project')\n"


def test_a_prefix_its_record_proves_is_replaceable_and_an_empty_folder_too(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "stack.json").write_text("{}")
    _record(prefix, lock_sha256=LOCK_HASH, manifest=["bin", "stack.json"])
    assert install.check_prefix(prefix) == (prefix, prefix)
    (tmp_path / "empty").mkdir()
    assert install.check_prefix(tmp_path / "empty")[1] == tmp_path / "empty"


def test_names_in_the_refusal_are_terminal_safe(tmp_path):
    prefix = tmp_path / "env"
    prefix.mkdir()
    (prefix / "evil\x1b[2J").mkdir()
    _record(prefix, lock_sha256=LOCK_HASH, manifest=[])
    with pytest.raises(BadInput) as caught:
        install.check_prefix(prefix)
    assert "\x1b" not in caught.value.render() and "evil\\x1b[2J" in caught.value.render()
