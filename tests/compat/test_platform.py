"""Grace servers (GH200, GB200, GB300, GB10) are aarch64: the plan is for that platform's own builds
(envs/compat.yaml's aarch64 section), from a capture, --platform or this host; an x86_64 plan is
the one it always was. Real captures in tests/validate/captures/ (the GH200 one is a synthetic
variant of the real GB200 capture, as its README says)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuenv.compat.matrix import load_matrix, parse_matrix
from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.frameworks import platform_variants
from gpuenv.compat.rules.request import Request
from gpuenv.errors import BadInput, DataError, NoCompatibleStack
from gpuenv.stack import LINUX_64, LINUX_AARCH64, Stack, check_engine_platform, lock_platforms

CAPTURES = Path(__file__).resolve().parents[1] / "validate" / "captures" / "nvidia-smi-xml"
GB200 = CAPTURES / "gb200x4-arm64.xml"
GH200 = CAPTURES / "SYNTH-gh200-from-gb200-arm64.xml"
H100 = CAPTURES / "h100x8-580.105.08.xml"


def _ok(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _aarch64_build(stack: dict) -> object:
    """The aarch64 data's entry for the build a stack names (None when the data has none)."""
    matrix = load_matrix()
    release = next(r for r in matrix.torch_releases if stack["framework_version"] in r.patches)
    builds = platform_variants(matrix, release, LINUX_AARCH64)
    return next((v for v in builds if v.name == stack["wheel_variant"]), None)


@pytest.mark.parametrize(
    "capture, product", [(GB200, "NVIDIA GB200"), (GH200, "NVIDIA GH200 480GB")]
)
def test_a_grace_capture_plans_an_aarch64_build_that_exists(invoke_cli, capture, product):
    stack = _ok(invoke_cli("resolve", "--host", str(capture), "--json"))
    assert stack["platform"] == LINUX_AARCH64 and stack["stack_id"].endswith("-aarch64")
    build = _aarch64_build(stack)
    assert build is not None, f"{stack['stack_id']} is not an aarch64 build in the data"
    assert tuple(stack["gpu_archs"]) == build.archs  # the aarch64 list, not the x86_64 build's
    # no +local tag on aarch64
    assert stack["pip_requirement"] == f"torch=={stack['framework_version']}"
    if build.pypi:
        assert stack["index_url"] is None
    else:
        assert stack["index_url"] == f"https://download.pytorch.org/whl/{build.name}"
    reasons = "\n".join(stack["reasons"])
    assert f"inferred from the GPU: {product}" in reasons and "only made with Grace" in reasons
    assert "the first aarch64 build with SASS for sm_" in reasons
    # The driver floor is the x86_64 table's, and the reasons say that is not confirmed for arm64.
    assert f"min driver on linux-aarch64: CUDA {build.cuda}'s Linux floor, unconfirmed" in reasons


def test_the_gh200_on_r570_gets_the_cu128_index_build_and_says_why(invoke_cli):
    stack = _ok(invoke_cli("resolve", "--host", str(GH200), "--json"))
    # driver 570.133.20 runs no CUDA 13 build: the newest aarch64 CUDA 12 build is 2.11's cu128
    assert (stack["framework_version"], stack["wheel_variant"]) == ("2.11.0", "cu128")
    assert "cu126: the first aarch64 build with SASS for sm_90 (PyTorch 2.6)" in stack["reasons"]
    assert any("PyPI's aarch64 torch 2.11.0 is its cu130 build" in r for r in stack["reasons"])


def test_an_x86_64_capture_plans_what_it_always_did(invoke_cli):
    stack = _ok(invoke_cli("resolve", "--host", str(H100), "--json"))
    assert stack["platform"] == LINUX_64 and not stack["stack_id"].endswith("-aarch64")
    old = resolve_stack(
        Request(driver="580.105.08", gpu_archs=("9.0",), driver_source=f"read from {H100}")
    )
    assert stack["stack_id"] == old.stack_id and stack["pip_requirement"] == old.pip_requirement
    assert stack["reasons"] == list(old.reasons)  # no platform line on linux-64


def test_platform_option_wins_and_a_bad_value_is_one_line(invoke_cli):
    arm = _ok(
        invoke_cli(
            "resolve",
            "--platform",
            "linux-aarch64",
            "--gpu-arch",
            "10.0",
            "--driver",
            "580.65.06",
            "--json",
        )
    )
    assert arm["platform"] == LINUX_AARCH64 and any("(--platform)" in r for r in arm["reasons"])
    x86 = _ok(invoke_cli("resolve", "--host", str(GB200), "--platform", "linux-64", "--json"))
    assert x86["platform"] == LINUX_64  # the user's word over the GPU's inference
    for task in ("resolve", "doctor", "build", "install"):
        bad = invoke_cli(task, "--platform", "sparc64")
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        expected = "--platform: unknown platform 'sparc64': use one of linux-64, linux-aarch64"
        assert expected in bad.stderr


def test_doctor_names_the_platform_and_how_it_is_known(invoke_cli):
    data = _ok(invoke_cli("doctor", "--host", str(GB200), "--json"))
    assert data["platform"]["platform"] == LINUX_AARCH64
    assert "inferred from the GPU" in data["platform"]["why"]
    assert data["recommended"]["torch"]["platform"] == LINUX_AARCH64
    why = data["recommended"]["tensorflow"]["why"]
    assert "no linux-aarch64 GPU build" in why and "nvcr.io/nvidia/tensorflow" in why


@pytest.mark.parametrize("cc", ["9.0", "10.0", "10.3", "12.1"])  # GH200, GB200, GB300, GB10
def test_every_grace_gpu_gets_sass_from_an_aarch64_build(cc):
    stack = resolve_stack(Request(driver="580.65.06", gpu_archs=(cc,), platform=LINUX_AARCH64))
    assert stack.platform == LINUX_AARCH64
    assert any(f"GPU compute capability {cc}:" in r and "has SASS" in r for r in stack.reasons)


def test_tensorflow_on_grace_says_what_is_true_there():
    request = Request(
        driver="580.173.02", gpu_archs=("10.0",), framework="tensorflow", platform=LINUX_AARCH64
    )
    with pytest.raises(NoCompatibleStack) as err:
        resolve_stack(request)
    assert "PyPI's aarch64 tensorflow wheel is a CPU build" in err.value.message
    assert "NGC TensorFlow container" in err.value.message
    assert "compute capability" not in err.value.message  # the x86_64 reason does not hold here
    assert "--cuda cpu (gives TensorFlow" in err.value.fix
    cpu = resolve_stack(replace(request, cuda="cpu"))
    assert cpu.platform == LINUX_AARCH64
    assert cpu.pip_requirement.startswith("tensorflow==")  # there is no aarch64 tensorflow-cpu file
    assert any("NGC TensorFlow container" in r for r in cpu.reasons)


def test_cuda_cpu_on_grace_is_the_aarch64_cpu_build():
    stack = resolve_stack(Request(cuda="cpu", platform=LINUX_AARCH64))
    # PyPI's aarch64 file is the CPU build up to 2.10; later ones are CUDA 13.0 builds
    assert (stack.pip_requirement, stack.index_url) == ("torch==2.10.0", None)
    assert stack.platform == LINUX_AARCH64
    x86 = resolve_stack(Request(cuda="cpu"))
    assert x86.pip_requirement.endswith("+cpu") and x86.platform == LINUX_64


def test_a_release_with_no_aarch64_build_is_refused_naming_those_that_have_one():
    with pytest.raises(NoCompatibleStack) as err:
        resolve_stack(
            Request(torch="2.3", gpu_archs=("9.0",), driver="570.133.20", platform=LINUX_AARCH64)
        )
    assert "PyTorch 2.3 has no linux-aarch64 GPU build" in err.value.message
    assert "2.6" in err.value.message
    assert "drop --torch (gives PyTorch" in err.value.fix


def test_every_aarch64_fact_has_a_source_and_unread_ones_are_unconfirmed():
    data = load_matrix().aarch64
    assert data is not None and data.grace_source and data.tf_source
    for series in data.torch:
        assert series.source
        for v in series.variants:
            if v.cuda and not v.pypi:  # download.pytorch.org is not reachable here: never confirmed
                assert not v.confirmed, (series.series, v.name)


def test_an_aarch64_entry_for_an_unknown_series_is_a_data_error():
    import yaml

    from gpuenv.compat.matrix import COMPAT_FILE

    data = yaml.safe_load(COMPAT_FILE.read_text(encoding="utf-8"))
    data["aarch64"]["torch"][0]["series"] = "1.13"
    with pytest.raises(DataError, match="not a series of torch_releases"):
        parse_matrix(data)


def _arm_stack() -> Stack:
    return resolve_stack(Request(driver="580.65.06", gpu_archs=("10.0",), platform=LINUX_AARCH64))


def test_an_aarch64_stack_locks_for_aarch64_alone():
    arm = _arm_stack()
    assert lock_platforms(arm, ()) == [LINUX_AARCH64]
    with pytest.raises(BadInput, match="cannot be locked for linux-64"):
        lock_platforms(arm, (LINUX_64, LINUX_AARCH64))
    x86 = resolve_stack(Request(cuda="cpu"))
    assert lock_platforms(x86, ()) == [LINUX_64]
    with pytest.raises(BadInput, match="cannot be locked for linux-aarch64"):
        lock_platforms(x86, (LINUX_AARCH64,))


def test_an_engine_of_another_architecture_is_refused_before_the_build():
    arm = _arm_stack()
    with pytest.raises(BadInput, match="the Docker engine builds x86_64 images"):
        check_engine_platform(arm, "x86_64")
    check_engine_platform(arm, "aarch64")
    check_engine_platform(resolve_stack(Request(cuda="cpu")), "x86_64")


def test_a_stack_record_without_a_platform_is_linux_64():
    data = resolve_stack(Request(cuda="cpu")).to_dict()
    del data["platform"]
    assert Stack.from_dict(data).platform == LINUX_64


def test_matrix_shows_the_aarch64_builds_and_marks_the_unread_ones(invoke_cli):
    result = invoke_cli("matrix")
    assert result.returncode == 0, result.stderr
    section = result.stdout.split("PyTorch on linux-aarch64", 1)[1].split("GPU architectures", 1)[0]
    assert "cu128?" in section and "download.pytorch.org/whl/cu128" in section
    assert "tensorflow 2.16" in section and "nvcr.io/nvidia/tensorflow" in section


def test_the_unconfirmed_aarch64_builds_are_open_items_of_the_data():
    from gpuenv.compat.drift import pending_curation

    items = pending_curation(load_matrix())
    assert "torch 2.11 cu128 on linux-aarch64: unconfirmed" in items
    assert not any("2.10 cpu on linux-aarch64" in item for item in items)  # read from PyPI


def test_this_host_platform_is_what_platform_machine_says():
    """live_platform reads os.uname() where there is one (platform's module compiles regexes at
    import): the same value and the same words as platform.machine()."""
    import platform

    from gpuenv.compat.host import live_platform
    from gpuenv.stack import platform_of_machine

    machine = platform.machine()
    assert live_platform() == (
        platform_of_machine(machine),
        f"this host: platform.machine() is {machine}",
    )


def test_an_image_of_another_architecture_is_refused_in_one_line():
    """`invoke run --image` / `validate --image` of an arm64 image on an x86_64 engine: refused
    before a container starts (it would end in 'exec format error')."""
    from gpuenv.stack import check_image_platform

    with pytest.raises(BadInput, match=r"r:1 is a linux-aarch64 image \(arm64\), but the Docker"):
        check_image_platform("r:1", "arm64", "x86_64")
    check_image_platform("r:1", "amd64", "x86_64")
    check_image_platform("r:1", "arm64", "aarch64")
    check_image_platform("r:1", "", "x86_64")  # an image that names no architecture: not judged


def _arm64_image_archive(ref: str) -> bytes:
    """A `docker save` archive of one arm64 image (an empty layer, a label to find it by), as a
    registry's arm64 image loads; `docker import --platform` is ignored by older engines."""
    import hashlib
    import io
    import json
    import tarfile

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("empty"), io.BytesIO(b""))
    layer_bytes = layer.getvalue()
    config = json.dumps(
        {
            "architecture": "arm64",
            "os": "linux",
            "config": {"Labels": {"io.gpuenv.test": "platform"}, "Cmd": ["true"]},
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()],
            },
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [ref], "Layers": ["layer/layer.tar"]}]
    ).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (
            (config_name, config),
            ("layer/layer.tar", layer_bytes),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.docker
def test_run_with_an_arm64_image_on_this_engine_is_one_line(docker_engine, invoke_cli):
    """End to end through the engine: an arm64 image given to `invoke run --image` on this x86_64
    engine."""
    import platform
    import uuid

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"this engine is {platform.machine()}; the case is an arm64 image on x86_64")
    client = docker_engine
    ref = f"gpuenv-test-arm64:{uuid.uuid4().hex[:12]}"
    client.images.load(_arm64_image_archive(ref))
    try:
        assert client.images.get(ref).attrs.get("Architecture") == "arm64"
        done = invoke_cli("run", "--image", ref, "--gpus", "none", "--", "true")
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"{ref} is a linux-aarch64 image (arm64), but the Docker engine runs" in done.stderr
    finally:
        client.images.remove(ref, force=True)
