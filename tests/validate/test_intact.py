"""validate/intact.py on small environments written the way installers write them: RECORD paths
that leave site-packages for bin/, a dist-info vendored inside a package (setuptools vendors
wheel's), a conda record with a rewritten prefix, and the same tree read from a tar stream with
a hard link, as the engine hands an image's folder out."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

from verifycases import record_digest

from gpuenv.envs.installed import TarTree, update_record
from validate import intact

SITE = "lib/python3.11/site-packages"
WHEEL_RECORD = b"../../bin/wheel,sha256=AAAA,4\n"


def _write(root, files):
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def _env(root):
    script = b"#!/opt/env/bin/python\nimport tool\n"
    module = b"VALUE = 1\n"
    vendored = b"# a vendored copy\n"
    hello = b"\x7fELF /opt/env rewritten"
    _write(
        root,
        {
            f"{SITE}/tool/__init__.py": module,
            "bin/tool": script,
            # setuptools vendors wheel: its dist-info is one of setuptools' files; its RECORD names
            # a bin/ script the environment does not have
            # as in setuptools 80
            f"{SITE}/setuptools/_vendor/wheel-0.46.3.dist-info/RECORD": WHEEL_RECORD,
            f"{SITE}/setuptools/_vendor/wheel/__init__.py": vendored,
            "bin/hello": hello,
        },
    )
    rows = [
        f"tool/__init__.py,sha256={record_digest(module)},{len(module)}",
        f"../../../bin/tool,sha256={record_digest(script)},{len(script)}",
        "tool-1.0.dist-info/RECORD,,",
    ]
    inner = b"../../bin/wheel,sha256=AAAA,4\n"
    setuptools = [
        "setuptools/_vendor/wheel-0.46.3.dist-info/RECORD,"
        f"sha256={record_digest(inner)},{len(inner)}",
        f"setuptools/_vendor/wheel/__init__.py,sha256={record_digest(vendored)},{len(vendored)}",
        "setuptools-80.0.dist-info/RECORD,,",
    ]
    _write(
        root,
        {
            f"{SITE}/tool-1.0.dist-info/RECORD": ("\n".join(rows) + "\n").encode(),
            f"{SITE}/setuptools-80.0.dist-info/RECORD": ("\n".join(setuptools) + "\n").encode(),
        },
    )
    record = {
        "name": "hello",
        "version": "1.0",
        "build": "h0",
        "paths_data": {
            "paths": [
                {
                    "_path": "bin/hello",
                    "path_type": "hardlink",
                    "sha256": "0" * 64,
                    "sha256_in_prefix": hashlib.sha256(hello).hexdigest(),
                    "size_in_bytes": 7,
                    "file_mode": "binary",
                    "prefix_placeholder": "/placeholder",
                }
            ]
        },
    }
    _write(root, {"conda-meta/hello-1.0-h0.json": json.dumps(record).encode()})


def test_a_folder_written_as_installers_write_it_is_intact(tmp_path):
    _env(tmp_path)
    verdict = intact.check(intact.FolderTree(tmp_path), str(tmp_path))
    assert verdict.ok, [p.line() for p in verdict.problems]
    assert {p.name for p in verdict.packages} == {"tool", "setuptools", "hello"}, (
        "the vendored wheel is no installed package"
    )


def test_a_rewritten_conda_file_is_judged_by_its_digest_after_the_rewrite(tmp_path):
    _env(tmp_path)
    (tmp_path / "bin" / "hello").write_bytes(b"\x7fELF /opt/env rewritteN")
    verdict = intact.check(intact.FolderTree(tmp_path), str(tmp_path))
    assert [(p.kind, p.path) for p in verdict.problems] == [("altered", "bin/hello")]


def test_the_same_tree_from_a_tar_stream_with_a_hard_link(tmp_path):
    _env(tmp_path)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(tmp_path, arcname="env")
        link = tarfile.TarInfo("env/bin/tool-copy")
        link.type, link.linkname = tarfile.LNKTYPE, "env/bin/tool"
        tar.addfile(link)
    data.seek(0)
    tree = TarTree(data, strip="env")
    assert tree.entries()["bin/tool-copy"].kind == intact.FILE
    assert tree.sha256("bin/tool-copy") == tree.sha256("bin/tool")
    verdict = intact.check(tree, "image:/opt/env")
    assert [(p.kind, p.path) for p in verdict.problems] == [("unowned", "bin/tool-copy")]


def test_record_hashes_are_urlsafe_base64_without_padding():
    digest = hashlib.sha256(b"x").digest()
    assert intact.record_hash("sha256=" + record_digest(b"x")) == digest.hex()
    assert intact.record_hash("md5=abc") is None and intact.record_hash("") is None


def test_update_record_follows_a_rewritten_script(tmp_path):
    _env(tmp_path)
    (tmp_path / "bin" / "tool").write_bytes(b"#!/final/bin/python\nimport tool\n")
    assert not intact.check(intact.FolderTree(tmp_path), str(tmp_path)).ok
    rewritten = update_record(tmp_path / SITE, [str(tmp_path / "bin" / "tool")])
    assert rewritten == [os.path.join(tmp_path / SITE, "tool-1.0.dist-info", "RECORD")]
    assert intact.check(intact.FolderTree(tmp_path), str(tmp_path)).ok
