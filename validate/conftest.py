"""The suite's pytest plugin: options, shared fixtures, per-check records and the final report.

Each check adds records (check, GPU UUID, measured, threshold, verdict, seconds) through the
`record` fixture; skips and unexpected errors become records too. At the end the table is
printed, the JSON report written (`--json`), a baseline saved (`--save-baseline`); JUnit XML
comes from pytest's own `--junitxml`. Teams add checks as `test_*.py` files in `checks/`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from validate.host import nvml
from validate.report.baseline import BaselineError, baseline_value, load_baseline, save_baseline
from validate.host.devices import all_nvml_uuids, compiled_archs, device_for_gpu, torch_gpus, visible_gpus
from validate.host.masking import device_list
from validate.judge.evidence import missing_evidence
from validate.judge.peaks import SUITE_MATMUL_METHODS, PeakTableError, ReferenceFigure, load_peaks, peaks_for
from validate.measure.probe import nccl_version_text
from validate.report.record import Record, build_json, not_judged_note, render_table, shown_path, write_json
from validate.report.summary import fit, host_lines, render_summary
from validate.host.stackfile import read_stack_file
from validate.measure.memory_modes import outside_measurer
from validate.measure.subproc import DEFAULT_TIMEOUT, ProbeResult, run_probe, run_stepped_probe
from validate.host.tfbuild import installed_build_info
from validate.judge.thresholds import (
    FAIL,
    INFO,
    PASS,
    SKIP,
    GpuExpectation,
    Verdict,
    expected_gpus,
    judge_figure,
    mig_share,
    probe_parallelism,
    ptx_only,
)

DEVICE_ORDER = "PCI_BUS_ID"
#: How long TensorFlow's probe may take when it must JIT-compile PTX for a GPU (seconds).
TF_JIT_TIMEOUT = float(os.environ.get("VALIDATE_TF_JIT_TIMEOUT", "1800"))
SUITE = pytest.StashKey["Suite"]()
RECORDS = pytest.StashKey[list[Record]]()
SETUP_SECONDS = pytest.StashKey[float]()


def _cpu_stack() -> bool:
    """Inside a gpuenv image built for a CPU stack (stack.json says cuda "cpu")."""
    return (read_stack_file() or {}).get("cuda") == "cpu"


class Suite:
    """What every check shares for one run: options, NVML's view, expectations, cached probes."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.quick: bool = config.getoption("validate_quick")
        # Before anything initialises CUDA: ordinals in CUDA_VISIBLE_DEVICES then mean NVML's
        # (PCI bus) order, not CUDA's default "fastest first", on mixed-GPU machines too.
        self.device_order_was = os.environ.get("CUDA_DEVICE_ORDER")
        #: The caller's CUDA_VISIBLE_DEVICES: every child probe narrows it, never widens it.
        self.caller_mask: str | None = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_DEVICE_ORDER"] = DEVICE_ORDER
        self.replay: dict[str, Any] | None = None  # the recording judged instead of this host
        self.recorder: Any = None  # records this host's NVML answers (--record)
        self.record_dir: str | None = config.getoption("validate_record")
        self.framework_tests: set[str] = set()  # checks that cannot run on a replayed host
        self._use_nvml(config.getoption("validate_replay"))
        self.host = nvml.read_host()
        in_image = bool(os.environ.get("GPUENV_STACK_FILE"))
        #: No driver, no GPU, no --expect-gpus, outside an image: CPU-only expectations, said once.
        self.cpu_only = not in_image and config.getoption("validate_expect_gpus") is None and nvml.cpu_only_host(self.host)
        nvidia_visible = os.environ.get("NVIDIA_VISIBLE_DEVICES")
        self.expectation: GpuExpectation | None = expected_gpus(
            config.getoption("validate_expect_gpus"),
            nvidia_visible,
            _cpu_stack(),
            in_image=in_image,
            mounted=device_list(nvidia_visible) if (nvidia_visible or "").strip().startswith("/") else None,
            cpu_only_host=self.cpu_only,
        )
        self.records: list[Record] = []
        self.write_errors: list[str] = []
        self.frameworks: dict[str, Any] = {}
        self.json_path: str | None = config.getoption("validate_json")
        self.save_baseline_path: str | None = config.getoption("validate_save_baseline")
        try:
            self.peaks = load_peaks()
        except (OSError, PeakTableError) as err:
            raise pytest.UsageError(f"validate: the GPU peak table cannot be used: {err}") from None
        baseline_path = config.getoption("validate_baseline")
        try:
            self.baseline = load_baseline(baseline_path) if baseline_path else None
        except BaselineError as err:
            raise pytest.UsageError(f"validate: {err}") from None
        self._tf_info: ProbeResult | None = None
        self._tf_memory: tuple[int, ProbeResult] | None = None
        self.health_only: bool = config.getoption("validate_health_only")
        #: Why this run proves no ready host though pytest passed (set at session finish), or None.
        self.not_validated: str | None = None

    def _use_nvml(self, replay_path: str | None) -> None:
        """Replay a capture instead of this host's NVML, and/or record every answer used."""
        from validate.host.capture import CaptureError, load_capture
        from validate.host.replay import RecordingNvml, ReplayNvml

        module: Any = None
        if replay_path:
            try:
                self.replay = load_capture(replay_path)
            except CaptureError as err:
                raise pytest.UsageError(f"validate: --replay: {err}") from None
            module = ReplayNvml(self.replay)
        if self.record_dir:
            if module is None:
                module, error = nvml._import()
                if module is None:
                    raise pytest.UsageError(f"validate: --record: {error}")
            self.recorder = RecordingNvml(module, source=f"python -m validate --record on {platform.node() or 'this host'}")
            module = self.recorder
        nvml.use_module(module)

    @property
    def replayed_from(self) -> str | None:
        return self.host.replayed_from

    @property
    def gpu_names(self) -> dict[str, str]:
        return {gpu.uuid: gpu.name for gpu in self.host.gpus}

    @property
    def nvml_uuids(self) -> list[str]:
        return all_nvml_uuids(self.host.gpus)

    @property
    def selected_mig(self) -> str | None:
        """The MIG instance CUDA_VISIBLE_DEVICES names, when this run validates one."""
        value = (os.environ.get("CUDA_VISIBLE_DEVICES") or "").strip()
        return value.split(",")[0].strip() if value.startswith("MIG-") else None

    def visible_gpus(self) -> list[nvml.GpuInfo]:
        """NVML's GPUs the caller's CUDA_VISIBLE_DEVICES lets this run use, in CUDA's order."""
        return visible_gpus(self.host.gpus, self.caller_mask)

    @property
    def exclusive(self) -> bool:
        return probe_parallelism([g.compute_mode for g in self.host.gpus], 2) == 1

    def no_gpu_reason(self) -> str:
        return self.host.error or "NVML sees no GPU on this host"

    def require_gpus(self) -> None:
        """No GPU: skip with the exact reason. When GPUs are expected, the NVML GPU count check
        fails for it, once; every check that needs a GPU points there instead of repeating it."""
        if self.host.gpus:
            return
        reason = self.no_gpu_reason()
        if self.expectation is not None:
            pytest.skip("no GPU: the NVML GPU count check fails for it")
        pytest.skip(reason)

    def peak(self, gpu_name: str, metric: str) -> float | None:
        entry = peaks_for(gpu_name, self.peaks)
        return entry.peak(metric) if entry else None

    def reference(self, gpu_name: str, metric: str, methods: tuple[str, ...] = SUITE_MATMUL_METHODS) -> ReferenceFigure | None:
        """What healthy GPUs of this model measured (gpu_peaks.yaml), or None: not judged;
        confirmed only by a measurement taken with `methods` (how the judged figure was taken)."""
        entry = peaks_for(gpu_name, self.peaks)
        return entry.reference_for(metric, methods) if entry else None

    def selected_mig_device(self, gpu: nvml.GpuInfo) -> nvml.MigDevice | None:
        """The MIG instance of this GPU that this run validates (CUDA_VISIBLE_DEVICES=MIG-...)."""
        wanted = self.selected_mig
        if not wanted:
            return None
        return next((m for m in gpu.mig_devices if m.uuid.startswith(wanted) or wanted.startswith(m.uuid)), None)

    def judge(
        self, gpu: nvml.GpuInfo, check: str, metric: str, value: float, unit: str, methods: tuple[str, ...] = SUITE_MATMUL_METHODS
    ) -> tuple[str, Verdict]:
        """Measured text and verdict for a higher-is-better figure on this NVML GPU (or the MIG
        instance of it this run validates): --baseline, else 75% of the model's measured
        reference, else not judged. The datasheet share is shown for orientation only."""
        peak = self.peak(gpu.name, metric)
        mig = self.selected_mig_device(gpu) if gpu.mig_enabled else None
        share = mig_share(mig.multiprocessor_count, gpu.multiprocessor_count) if mig is not None else None
        verdict = judge_figure(
            metric, value, self.reference(gpu.name, metric, methods), self.baseline_for(gpu.name, check), mig=mig is not None, share=share
        )
        if mig is not None:
            peak = peak * share if peak and share else None
        measured = f"{value:.1f} {unit}" + (f" ({value / peak:.0%} of datasheet)" if peak else "")
        return measured, verdict

    def baseline_for(self, gpu_name: str | None, check: str) -> float | None:
        return baseline_value(self.baseline, gpu_name, check)

    def recorded_records(self, nodeid: str | None = None) -> list[dict[str, Any]]:
        """The report lines a --record run kept, of checks this replay cannot run (one, or all)."""
        kept = (self.replay or {}).get("records") or []
        wanted = self.framework_tests if nodeid is None else {nodeid}
        # lines a replay wrote were never measured on a host: only a live run's lines count
        return [r for r in kept if isinstance(r, dict) and r.get("test") in wanted and not r.get("replayed")]

    def write_recording(self, exit_status: int) -> str:
        """Write gpuenv's recording of this run into --record DIR; returns its path."""
        from validate.files import path_component, write_text_atomic

        data = self.recorder.recording()
        data["records"] = [r.to_dict() for r in self.records]
        data["frameworks"] = self.frameworks
        data["pytest_exit_status"] = exit_status
        folder = Path(self.record_dir or ".")
        folder.mkdir(parents=True, exist_ok=True)
        host = path_component(platform.node())  # a host name with '/', a newline or ESC stays one safe name
        path = folder / f"gpuenv-recording-{host}-{time.strftime('%Y%m%dT%H%M%S')}.json"
        write_text_atomic(path, json.dumps(data, indent=1, default=str) + "\n")
        return str(path)

    def say_now(self, line: str) -> None:
        """A line on the terminal now, not after the check (pytest captures output meanwhile)."""
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        capture = self.config.pluginmanager.getplugin("capturemanager")
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    def tf_info(self) -> ProbeResult:
        """TensorFlow's build and devices, read once in a child (growth on, so it maps little).

        A build with only PTX for a GPU JIT-compiles at first use, which can take many minutes:
        say so before starting, and give the probe TF_JIT_TIMEOUT instead of the usual timeout."""
        if self._tf_info is None:
            archs = list((installed_build_info() or {}).get("cuda_compute_capabilities") or [])
            jit = [g for g in self.host.gpus if g.compute_capability and archs and ptx_only(g.compute_capability, archs)]
            timeout = DEFAULT_TIMEOUT
            if jit:
                timeout = max(DEFAULT_TIMEOUT, TF_JIT_TIMEOUT)
                names = ", ".join(f"GPU {g.index} (sm_{g.compute_capability.replace('.', '')})" for g in jit)  # type: ignore[union-attr]
                self.say_now(
                    f"validate: warning: TensorFlow ships only PTX for {names}: its first use JIT-compiles the kernels, "
                    f"which can take many minutes; waiting up to {timeout:.0f} s (VALIDATE_TF_JIT_TIMEOUT)"
                )
            env: dict[str, str | None] = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
            # The speed figures come from the same child, after the memory step: one TensorFlow start.
            speed = "--speed-quick" if self.quick else "--speed"
            visible = self.visible_gpus()
            first = visible[0] if visible else None  # TensorFlow's /GPU:0 in the child (which keeps the caller's mask)
            if first is not None and first.memory_total_bytes is not None and not first.mig_enabled:
                # Pause after the small products so the memory check can measure growth-env here.
                before, measure = outside_measurer(first.uuid)
                self._tf_info = run_stepped_probe(["tf-info", "--pause", speed], env, measure, timeout=timeout)
                self._tf_memory = (before, self._tf_info)
            else:
                self._tf_info = run_probe(["tf-info", speed], env, timeout=timeout)
            if self._tf_info.data and not self._tf_info.error:
                self.frameworks["tensorflow"] = {k: v for k, v in self._tf_info.data.items() if k not in ("compute", "speed")}
        return self._tf_info

    def tf_memory_on_the_way(self) -> tuple[int, ProbeResult] | None:
        """(the first visible GPU's used bytes before, the TensorFlow info probe's result with its
        "small" step), when that probe measured that GPU on the way; None otherwise."""
        self.tf_info()
        return self._tf_memory


class Recorder:
    """The `record` fixture: checks add report lines; `finish()` fails the test if any line failed."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.started = time.perf_counter()
        item.stash[RECORDS] = []

    @property
    def records(self) -> list[Record]:
        return self.item.stash[RECORDS]

    def add(
        self,
        check: str,
        measured: str,
        verdict: Verdict | str = INFO,
        gpu: str | None = None,
        value: float | None = None,
        seconds: float | None = None,
        threshold: str = "",
    ) -> Record:
        if isinstance(verdict, Verdict):
            word, threshold, reason = verdict.verdict, threshold or verdict.threshold, verdict.reason
        else:
            word, reason = verdict, ""
        if seconds is None:
            seconds = time.perf_counter() - self.started
        self.started = time.perf_counter()
        record = Record(check, gpu, measured, threshold, word, round(seconds, 3), reason, value, self.item.nodeid)
        self.records.append(record)
        return record

    def finish(self) -> None:
        failed = [r for r in self.records if r.verdict == FAIL]
        if failed:
            pytest.fail("; ".join(f"{r.check}: {r.reason or r.measured}" for r in failed), pytrace=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("validate", "gpuenv server validation")
    group.addoption("--expect-gpus", dest="validate_expect_gpus", type=int, default=None,
                    help="number of GPUs this server must show; fewer (or none) fails the run")
    group.addoption("--json", dest="validate_json", default=None, metavar="PATH",
                    help="write the JSON report (keyed by GPU UUID, plus 'host') to PATH")
    group.addoption("--quick", dest="validate_quick", action="store_true", default=False,
                    help="smaller sizes and fewer cases, to finish within about a minute")
    group.addoption("--save-baseline", dest="validate_save_baseline", default=None, metavar="PATH",
                    help="save this run's figures as the known-good baseline for its GPU model")
    group.addoption("--baseline", dest="validate_baseline", default=None, metavar="PATH",
                    help="compare figures with a baseline saved on a known-good server of the same model")
    group.addoption("--replay", dest="validate_replay", default=None, metavar="FILE",
                    help="judge a recorded host (nvidia-smi -q -x or -q capture, or a --record file) instead of this one")
    group.addoption("--full-report", dest="validate_full_report", action="store_true", default=False,
                    help="print every row and reason (one row per check and GPU) instead of the one-screen summary")
    group.addoption("--record", dest="validate_record", default=None, metavar="DIR",
                    help="write this host's NVML answers, probe results and figures to DIR (gpuenv-nvml-recording/1)")
    group.addoption("--health-only", dest="validate_health_only", action="store_true", default=False,
                    help="judge the GPUs' health alone: no framework has to prove that each GPU computes")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUITE] = Suite(config)


CPU_ONLY_LINE = "no NVIDIA GPU or driver here: validating as a CPU-only host (--expect-gpus N if this server must have GPUs)"


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    suite = session.config.stash.get(SUITE, None)
    if suite is not None and suite.cpu_only:
        suite.say_now(CPU_ONLY_LINE)


def exclusive_first(items: list[Any], isolated: Callable[[Any], bool], first: Callable[[Any], bool] = lambda i: False) -> list[Any]:
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
LOCAL_CHECKS = frozenset({"test_device_order", "test_shared_memory", "test_stack_matches_image_labels"})


def needs_this_host(item: pytest.Item) -> str | None:
    """Why a check cannot run on a replayed host (None: it is NVML-driven and replays)."""
    name = getattr(item, "originalname", item.name)
    if name in LOCAL_CHECKS:
        return "it checks this machine, not the recorded host"
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & FRAMEWORK_FIXTURES or item.get_closest_marker("isolated") is not None:
        return "it runs PyTorch/TensorFlow on the host itself"
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
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
            held = " (the recording's result is under 'recorded measurements')" if suite.recorded_records(item.nodeid) else ""
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
    except ImportError as err:  # installed but broken (a CUDA library missing, ...): that is a failure
        pytest.fail(f"PyTorch is installed but its import fails: {err}", pytrace=False)
    cudnn = torch_module.backends.cudnn.version() if torch_module.backends.cudnn.is_available() else None
    try:
        nccl = nccl_version_text(torch_module.cuda.nccl.version()) if torch_module.version.cuda else None
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
    """'cuda:N' for this NVML GPU in this PyTorch process (matched by UUID); frees the cache after."""
    if torch.version.cuda is None:
        pytest.fail(f"PyTorch is a CPU build but NVML sees {gpu.name}", pytrace=False)
    if gpu.mig_enabled and not request.config.stash[SUITE].selected_mig:
        pytest.skip(f"GPU {gpu.index} is in MIG mode: its instances are validated one per run (see the MIG check)")
    if not torch.cuda.is_available():
        pytest.fail(f"PyTorch cannot use CUDA although NVML sees {gpu.name} (driver too old for its CUDA?)", pytrace=False)
    index = device_for_gpu(gpu, torch_gpus(torch, request.config.stash[SUITE].nvml_uuids))
    if index is None:
        pytest.skip(f"GPU {gpu.index} is hidden from this process by CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}")
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
            item.user_properties.append((f"{r.check} [{r.gpu or 'host'}]", f"{r.measured} | {r.threshold} | {r.verdict}"))
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
        extra.append(Record(check, gpu, "-", "-", SKIP, round(report.duration, 3), _skip_reason(report), None, item.nodeid))
    elif report.failed and not any(r.verdict == FAIL for r in records):
        extra.append(Record(check, gpu, "-", "-", FAIL, round(report.duration, 3), _failure_reason(call), None, item.nodeid))
    elif report.passed and not records:
        extra.append(Record(check, gpu, "ok", "-", PASS, round(report.duration, 3), "", None, item.nodeid))
    if suite.replayed_from:
        for r in records + extra:
            r.replayed = True
    suite.records.extend(records + extra)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run that passed without evidence (no GPU computed, say) fails: see validate/judge/evidence.py."""
    suite = session.config.stash.get(SUITE, None)
    if suite is None or exitstatus != 0 or suite.replayed_from or not suite.host.gpus:
        return  # a replay judges recorded NVML answers only; a host with no GPU proves none
    labels = {g.uuid: f"GPU {g.index} ({g.name})" for g in suite.visible_gpus()}
    # Installed, not imported: a run whose framework checks were deselected (-k) still has them.
    frameworks = [name for name in ("torch", "tensorflow") if name in suite.frameworks or importlib.util.find_spec(name)]
    suite.not_validated = missing_evidence([r.to_dict() for r in suite.records], labels, frameworks=frameworks,
                                           exit_status=0, health_only=suite.health_only)
    if suite.not_validated:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    suite = config.stash[SUITE]
    index = {gpu.uuid: gpu.index for gpu in suite.host.gpus}
    terminalreporter.section("gpuenv validation report")
    if suite.replayed_from:
        for line in fit(f"REPLAYED: every line judges the recorded host {suite.replayed_from}, not this machine"):
            terminalreporter.write_line(line)
    full = bool(config.getoption("validate_full_report"))
    for line in host_lines(suite.host.driver_version, suite.host.cuda_driver_version, suite.host.gpus, suite.no_gpu_reason, full):
        terminalreporter.write_line(line)
    for lost in suite.host.unreadable:
        terminalreporter.write_line(lost.error)
    for line in fit(f"suite: {Path(__file__).resolve().parent}, CUDA_DEVICE_ORDER={DEVICE_ORDER}"):
        terminalreporter.write_line(line)
    if full:
        terminalreporter.write_line(render_table(suite.records, index))
    else:
        terminalreporter.write_line(render_summary(suite.records, index, replayed=bool(suite.replayed_from)))
    note = not_judged_note(suite.records, suite.gpu_names)
    if note:
        terminalreporter.write_line(note)
    if suite.json_path:
        data = build_json(
            suite.records, suite.host.to_dict(), [g.to_dict() for g in suite.host.gpus], suite.frameworks, int(exitstatus),
            not_validated=suite.not_validated, health_only=suite.health_only,
        )
        try:
            write_json(suite.json_path, data)
            terminalreporter.write_line(f"JSON report: {shown_path(suite.json_path)}")
        except OSError as err:  # atomic: the old report (or none) stays, never half of one
            suite.write_errors.append(f"cannot write the JSON report {suite.json_path}: {err.strerror or err}")
    if suite.save_baseline_path:
        try:
            save_baseline(suite.save_baseline_path, suite.records, suite.gpu_names)
            terminalreporter.write_line(f"baseline saved: {shown_path(suite.save_baseline_path)}")
        except OSError as err:
            suite.write_errors.append(f"cannot write the baseline {suite.save_baseline_path}: {err.strerror or err}")
    if suite.recorder is not None:
        try:
            terminalreporter.write_line(f"recording: {suite.write_recording(int(exitstatus))}")
        except OSError as err:
            suite.write_errors.append(f"cannot write the recording into {suite.record_dir}: {err.strerror or err}")
    for problem in suite.write_errors:
        terminalreporter.write_line(f"validate: {problem}")
