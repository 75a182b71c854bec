"""The suite's pytest plugin: options, shared fixtures, per-check records and the final report.

Each check adds records (check, GPU UUID, measured, threshold, verdict, seconds) through the
`record` fixture; skips and unexpected errors become records too. At the end the table is
printed, the JSON report written (`--json`), a baseline saved (`--save-baseline`); JUnit XML
comes from pytest's own `--junitxml`. Teams add checks as `test_*.py` files in `checks/`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from validate.host import nvml
from validate.host.devices import compiled_archs, device_for_gpu, torch_gpus
from validate.host.masking import DEVICE_ORDER
from validate.judge.evidence import missing_evidence
from validate.judge.verdict import FAIL, PASS, SKIP
from validate.measure.probe import nccl_version_text
from validate.options import (
    add_options,
    suite_option,
)  # declared once, for python -m validate and this plugin
from validate.report.baseline import save_baseline
from validate.report.record import (
    Record,
    build_json,
    not_judged_note,
    render_table,
    shown_path,
    write_json,
)
from validate.report.summary import fit, host_lines, render_summary
from validate.session import RECORDS, Recorder, Suite  # noqa: F401 (the plugin's names)

SUITE = pytest.StashKey["Suite"]()
SETUP_SECONDS = pytest.StashKey[float]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks the suite asks other plugins (pytest_validate_nvml_module)."""
    from validate import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser.getgroup("validate", "gpuenv server validation").addoption, plugin=True)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUITE] = Suite(config)


CPU_ONLY_LINE = (
    "no NVIDIA GPU or driver here: validating as a CPU-only host (--expect-gpus N if this "
    "server must have GPUs)"
)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    suite = session.config.stash.get(SUITE, None)
    if suite is not None and suite.cpu_only:
        suite.say_now(CPU_ONLY_LINE)
    elif suite is not None and suite.driverless:
        expect_none = suite_option(suite.config, "expect_gpus") == 0
        head = "validate: not ready: "
        if expect_none:
            head = "validate: warning: --expect-gpus 0 validates a CPU-only host, but "
        # In full only where no row fails for it (--expect-gpus 0); else the count row has it.
        suite.say_now(head + (suite.driverless if expect_none else suite.no_gpu_reason()))


def exclusive_first(
    items: list[Any],
    isolated: Callable[[Any], bool],
    first: Callable[[Any], bool] = lambda i: False,
) -> list[Any]:
    """The checks that run in child processes first, in their order, then the rest. In
    Exclusive_Process mode a GPU serves one process: once this process has used a GPU (the
    in-process checks), every child would get "device busy". Checks marked `first` (the driver
    gate) stay ahead of everything."""
    head = [i for i in items if first(i)]
    rest = [i for i in items if not first(i)]
    return head + [i for i in rest if isolated(i)] + [i for i in rest if not isolated(i)]


#: Fixtures that need a framework running on the host itself: a replayed host cannot give them.
FRAMEWORK_FIXTURES = frozenset({"torch", "tf_info", "cuda_device"})
#: Checks about this process and machine (its environment, its /dev/shm), not the recorded host.
LOCAL_CHECKS = frozenset(
    {
        "test_device_order",
        "test_shared_memory",
        "test_stack_matches_image_labels",
        "test_environment_intact",
    }
)


def needs_this_host(item: pytest.Item) -> str | None:
    """Why a check cannot run on a replayed host (None: it is NVML-driven and replays)."""
    name = getattr(item, "originalname", item.name)
    if name in LOCAL_CHECKS:
        return "it checks this machine, not the recorded host"
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & FRAMEWORK_FIXTURES or item.get_closest_marker("isolated") is not None:
        return "it runs PyTorch/TensorFlow on the host itself"
    return None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    suite = config.stash[SUITE]
    if suite.replayed_from:
        suite.framework_tests = {item.nodeid for item in items if needs_this_host(item)}
    if config.stash[SUITE].exclusive:
        items[:] = exclusive_first(
            items,
            lambda item: item.get_closest_marker("isolated") is not None,
            lambda item: getattr(item, "originalname", item.name) == "test_driver_gate",
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each per-GPU check once per GPU NVML sees (once with None when there is none)."""
    if "gpu" in metafunc.fixturenames:
        gpus = metafunc.config.stash[SUITE].host.gpus
        params: list[Any] = list(gpus) or [None]
        ids = [f"gpu{g.index}" for g in gpus] or ["no-gpu"]
        metafunc.parametrize("gpu", params, ids=ids, indirect=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a replayed host, checks that need the host itself skip with that reason."""
    suite = item.config.stash[SUITE]
    if suite.replayed_from:
        why = needs_this_host(item)
        if why:
            held = (
                " (the recording's result is under 'recorded measurements')"
                if suite.recorded_records(item.nodeid)
                else ""
            )
            pytest.skip(f"replayed host ({suite.replayed_from}): {why}{held}")


@pytest.fixture(scope="session")
def suite(request: pytest.FixtureRequest) -> Suite:
    return request.config.stash[SUITE]


@pytest.fixture
def gpu(request: pytest.FixtureRequest, suite: Suite) -> nvml.GpuInfo:
    if request.param is None:
        suite.require_gpus()
    return request.param


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node)


@pytest.fixture(scope="session")
def torch(suite: Suite) -> Any:
    """PyTorch, imported in this process (it maps no GPU memory until used); skip when missing."""
    try:
        import torch as torch_module
    except ModuleNotFoundError as err:
        if err.name != "torch":
            pytest.fail(f"PyTorch is installed but its import fails: {err}", pytrace=False)
        pytest.skip(f"PyTorch is not installed here ({err})")
    except (
        ImportError
    ) as err:  # installed but broken (a CUDA library missing, ...): that is a failure
        pytest.fail(f"PyTorch is installed but its import fails: {err}", pytrace=False)
    cudnn = (
        torch_module.backends.cudnn.version()
        if torch_module.backends.cudnn.is_available()
        else None
    )
    try:
        nccl = (
            nccl_version_text(torch_module.cuda.nccl.version())
            if torch_module.version.cuda
            else None
        )
    except Exception as err:  # NCCL missing from the build
        nccl = f"not available: {err}"
    suite.frameworks["torch"] = {
        "version": torch_module.__version__,
        "cuda": torch_module.version.cuda,
        "cudnn": cudnn,
        "nccl": nccl,
        "arch_list": compiled_archs(torch_module),
        "cuda_available": torch_module.cuda.is_available(),
        "device_count": torch_module.cuda.device_count() if torch_module.version.cuda else 0,
    }
    return torch_module


@pytest.fixture
def cuda_device(gpu: nvml.GpuInfo, torch: Any, request: pytest.FixtureRequest) -> Any:
    """'cuda:N' for this NVML GPU in this PyTorch process (matched by UUID); frees the cache
    after."""
    if torch.version.cuda is None:
        pytest.fail(f"PyTorch is a CPU build but NVML sees {gpu.name}", pytrace=False)
    if gpu.mig_enabled and not request.config.stash[SUITE].selected_mig:
        pytest.skip(
            f"GPU {gpu.index} is in MIG mode: its instances are validated one per run (see the "
            "MIG check)"
        )
    if not torch.cuda.is_available():
        pytest.fail(
            f"PyTorch cannot use CUDA although NVML sees {gpu.name} (driver too old for its CUDA?)",
            pytrace=False,
        )
    index = device_for_gpu(gpu, torch_gpus(torch, request.config.stash[SUITE].nvml_uuids))
    if index is None:
        pytest.skip(
            f"GPU {gpu.index} is hidden from this process by "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}"
        )
    yield f"cuda:{index}"
    torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def tf_info(suite: Suite) -> dict[str, Any]:
    """TensorFlow's build and devices from a child process; skip when TensorFlow is missing."""
    result = suite.tf_info()
    if result.error:
        if result.data and result.data.get("missing") == "tensorflow":
            pytest.skip(f"TensorFlow is not installed here ({result.data['error']})")
        pytest.fail(f"TensorFlow probe failed: {result.error}", pytrace=False)
    assert result.data is not None
    return result.data


@pytest.fixture(scope="session")
def tf_speed(tf_info: dict[str, Any]) -> dict[str, Any]:
    """TensorFlow's speed figures (matmuls per GPU, a convolutional training run per GPU and on the
    CPU), measured by the same child as its info."""
    speed = tf_info.get("speed")
    if not isinstance(speed, dict):
        pytest.fail("TensorFlow's probe returned no speed figures", pytrace=False)
    return speed


def _check_name(item: pytest.Item) -> str:
    """'test_tensorflow_memory_growth[growth-env]' -> 'tensorflow memory growth [growth-env]'."""
    name = getattr(item, "originalname", item.name).removeprefix("test_").replace("_", " ")
    callspec = getattr(item, "callspec", None)
    params = [str(v) for k, v in (callspec.params.items() if callspec else []) if k != "gpu"]
    return f"{name} [{', '.join(params)}]" if params else name


def _gpu_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    gpu = callspec.params.get("gpu") if callspec else None
    return gpu.uuid if isinstance(gpu, nvml.GpuInfo) else None


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _failure_reason(call: pytest.CallInfo[None]) -> str:
    if call.excinfo is None:
        return "failed"
    text = call.excinfo.exconly().strip()
    return text.removeprefix("Failed: ").splitlines()[0] if text else "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Turn a check's records (and its skip or error) into report lines and JUnit properties."""
    records = item.stash.get(RECORDS, [])
    if call.when == "setup" and item.config.stash[SUITE].replayed_from:
        item.user_properties.append(("replayed", str(item.config.stash[SUITE].replayed_from)))
    if call.when == "call":
        if records and records[0].seconds is not None:  # session probes started in setup count too
            records[0].seconds = round(records[0].seconds + item.stash.get(SETUP_SECONDS, 0.0), 3)
        for r in records:
            item.user_properties.append(
                (f"{r.check} [{r.gpu or 'host'}]", f"{r.measured} | {r.threshold} | {r.verdict}")
            )
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when == "setup":
        item.stash[SETUP_SECONDS] = report.duration
    if call.when == "teardown" or (call.when == "setup" and report.passed):
        return
    suite = item.config.stash[SUITE]
    extra: list[Record] = []
    check, gpu = _check_name(item), _gpu_of(item)
    if report.skipped:
        extra.append(
            Record(
                check,
                gpu,
                "-",
                "-",
                SKIP,
                round(report.duration, 3),
                _skip_reason(report),
                None,
                item.nodeid,
            )
        )
    elif report.failed and not any(r.verdict == FAIL for r in records):
        extra.append(
            Record(
                check,
                gpu,
                "-",
                "-",
                FAIL,
                round(report.duration, 3),
                _failure_reason(call),
                None,
                item.nodeid,
            )
        )
    elif report.passed and not records:
        extra.append(
            Record(check, gpu, "ok", "-", PASS, round(report.duration, 3), "", None, item.nodeid)
        )
    if suite.replayed_from:
        for r in records + extra:
            r.replayed = True
    suite.records.extend(records + extra)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run that passed without evidence (no GPU computed, say) fails: see
    validate/judge/evidence.py."""
    suite = session.config.stash.get(SUITE, None)
    if suite is None or exitstatus != 0 or suite.replayed_from or not suite.host.gpus:
        return  # a replay judges recorded NVML answers only; a host with no GPU proves none
    labels = {g.uuid: f"GPU {g.index} ({g.name})" for g in suite.visible_gpus()}
    # Installed, not imported: a run whose framework checks were deselected (-k) still has them.
    frameworks = [
        name
        for name in ("torch", "tensorflow")
        if name in suite.frameworks or importlib.util.find_spec(name)
    ]
    suite.not_validated = missing_evidence(
        [r.to_dict() for r in suite.records],
        labels,
        frameworks=frameworks,
        exit_status=0,
        health_only=suite.health_only,
    )
    if suite.not_validated:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The report after the checks: what was judged, the verdicts, then the files the options
    asked for; a file that cannot be written is named last, never a traceback."""
    suite = config.stash[SUITE]
    write = terminalreporter.write_line
    full = bool(suite_option(config, "verbose"))
    terminalreporter.section("gpuenv validation report")
    for line in _judged_lines(suite, full):
        write(line)
    index = {gpu.uuid: gpu.index for gpu in suite.host.gpus}
    if full:
        write(render_table(suite.records, index))
    else:
        write(render_summary(suite.records, index, replayed=bool(suite.replayed_from)))
    note = not_judged_note(suite.records, suite.gpu_names)
    if note:
        write(note)
    _write_files(suite, int(exitstatus), write)
    for problem in suite.write_errors:
        write(f"validate: {problem}")


def _judged_lines(suite: Suite, full: bool) -> list[str]:
    """What the verdicts judge: the host (a replayed one said first), its GPUs, the GPUs NVML
    could not read, and the suite that judged them."""
    lines: list[str] = []
    if suite.replayed_from:
        lines += fit(
            f"REPLAYED: every line judges the recorded host {suite.replayed_from}, not this machine"
        )
    host = suite.host
    lines += host_lines(
        host.driver_version, host.cuda_driver_version, host.gpus, suite.no_gpu_reason, full
    )
    for lost in host.unreadable:  # wrapped: the error names the GPU, its bus id, UUID and the fix
        lines += fit(lost.error)
    lines += fit(f"suite: {Path(__file__).resolve().parent}, CUDA_DEVICE_ORDER={DEVICE_ORDER}")
    return lines


def _write_files(suite: Suite, exitstatus: int, write: Callable[[str], None]) -> None:
    """Write the JSON report, the baseline and the recording the options asked for, and say where;
    one that cannot be written goes into suite.write_errors (the JSON report is written atomically:
    the old report, or none, stays, never half of one)."""
    if suite.json_path:
        data = build_json(
            suite.records,
            suite.host.to_dict(),
            [g.to_dict() for g in suite.host.gpus],
            suite.frameworks,
            exitstatus,
            not_validated=suite.not_validated,
            health_only=suite.health_only,
        )
        try:
            write_json(suite.json_path, data)
            write(f"JSON report: {shown_path(suite.json_path)}")
        except OSError as err:
            suite.write_errors.append(
                f"cannot write the JSON report {suite.json_path}: {err.strerror or err}"
            )
    if suite.save_baseline_path:
        try:
            save_baseline(suite.save_baseline_path, suite.records, suite.gpu_names)
            write(f"baseline saved: {shown_path(suite.save_baseline_path)}")
        except OSError as err:
            suite.write_errors.append(
                f"cannot write the baseline {suite.save_baseline_path}: {err.strerror or err}"
            )
    if suite.recorder is not None:
        try:
            write(f"recording: {suite.write_recording(exitstatus)}")
        except OSError as err:
            suite.write_errors.append(
                f"cannot write the recording into {suite.record_dir}: {err.strerror or err}"
            )
