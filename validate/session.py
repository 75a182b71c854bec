"""The suite's state for one run (`Suite`: the host, its GPUs, what is expected of it, the
references and the baseline) and the `record` fixture's `Recorder`; conftest.py wires them
into pytest. Kept apart so the plugin module stays about pytest's hooks."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import pytest

from validate.envvars import seconds
from validate.host import nvml
from validate.host.devices import all_nvml_uuids, visible_gpus
from validate.host.masking import DEVICE_ORDER, device_list
from validate.host.pcibus import in_container, nvidia_gpus
from validate.host.stackfile import read_stack_file
from validate.host.tfbuild import installed_build_info
from validate.judge.driver_floor import driverless_brief, driverless_text
from validate.judge.peaks import (
    SUITE_MATMUL_METHODS,
    ReferenceFigure,
    load_peaks,
    peaks_for,
)
from validate.judge.speed import judge_figure, mig_share
from validate.judge.verdict import FAIL, INFO, Verdict
from validate.judge.visibility import GpuExpectation, expected_gpus, probe_parallelism, ptx_only
from validate.measure.memory_modes import outside_measurer
from validate.measure.subproc import DEFAULT_TIMEOUT, ProbeResult, run_probe, run_stepped_probe
from validate.options import suite_option
from validate.report.baseline import BaselineError, baseline_value, load_baseline
from validate.report.record import Record, current_test
from validate.simpleyaml import TableError

#: How long TensorFlow's probe may take when it must JIT-compile PTX for a GPU (seconds).
TF_JIT_TIMEOUT = seconds("VALIDATE_TF_JIT_TIMEOUT")
RECORDS = pytest.StashKey[list[Record]]()


def _cpu_stack() -> bool:
    """Inside a gpuenv image built for a CPU stack (stack.json says cuda "cpu")."""
    return (read_stack_file() or {}).get("cuda") == "cpu"


class Suite:
    """What every check shares for one run: options, NVML's view, expectations, cached probes."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.quick: bool = suite_option(config, "quick")
        # Before anything initialises CUDA: ordinals in CUDA_VISIBLE_DEVICES then mean NVML's
        # (PCI bus) order, not CUDA's default "fastest first", on mixed-GPU machines too.
        self.device_order_was = os.environ.get("CUDA_DEVICE_ORDER")
        #: The caller's CUDA_VISIBLE_DEVICES: every child probe narrows it, never widens it.
        self.caller_mask: str | None = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_DEVICE_ORDER"] = DEVICE_ORDER
        self.replay: dict[str, Any] | None = None  # the recording judged instead of this host
        self.recorder: Any = None  # records this host's NVML answers (--record)
        self.record_dir: str | None = suite_option(config, "record")
        self.framework_tests: set[str] = set()  # checks that cannot run on a replayed host
        #: The NVML module every reader of this run is given (None: this host's pynvml).
        self.nvml: Any = self._nvml_module(suite_option(config, "replay"))
        self.host = nvml.read_host(self.nvml)
        in_image = bool(os.environ.get("GPUENV_STACK_FILE"))
        option = suite_option(config, "expect_gpus")
        #: NVIDIA GPUs on the PCI bus while NVML sees none (no driver, or a container without
        #: --gpus): a GPU server, never a CPU-only host. Not read for a replayed host.
        self.pci_gpus = [] if self.host.replayed_from or self.host.gpus else nvidia_gpus()
        #: No driver, no GPU on the bus, no --expect-gpus, outside an image: CPU-only, said once.
        self.cpu_only = not in_image and option is None and nvml.cpu_only_host(self.host)
        nvidia_visible = os.environ.get("NVIDIA_VISIBLE_DEVICES")
        self.expectation: GpuExpectation | None = expected_gpus(
            suite_option(config, "expect_gpus"),
            nvidia_visible,
            _cpu_stack(),
            in_image=in_image,
            mounted=device_list(nvidia_visible)
            if (nvidia_visible or "").strip().startswith("/")
            else None,
            cpu_only_host=self.cpu_only,
        )
        #: The line naming the GPUs on the bus and the fix; --expect-gpus 0 still validates as
        #: CPU-only (the user's word, e.g. GPUs held by vfio-pci for VMs), with this as a warning.
        self.driverless: str | None = None
        if self.pci_gpus and not _cpu_stack():
            self.driverless = driverless_text(self.pci_gpus, in_container(), self.host.error)
            if self.expectation is None and option is None:
                on_bus = f"{len(self.pci_gpus)} NVIDIA GPU(s) on the PCI bus"
                self.expectation = GpuExpectation(1, exact=False, source=on_bus)
        self.records: list[Record] = []
        self.write_errors: list[str] = []
        self.frameworks: dict[str, Any] = {}
        self.json_path: str | None = suite_option(config, "json")
        self.save_baseline_path: str | None = suite_option(config, "save_baseline")
        try:
            self.peaks = load_peaks()
        except (OSError, TableError) as err:
            raise pytest.UsageError(f"validate: the GPU peak table cannot be used: {err}") from None
        baseline_path = suite_option(config, "baseline")
        try:
            self.baseline = load_baseline(baseline_path) if baseline_path else None
        except BaselineError as err:
            raise pytest.UsageError(f"validate: {err}") from None
        self._tf_info: ProbeResult | None = None
        self._tf_memory: tuple[int, ProbeResult] | None = None
        self.health_only: bool = suite_option(config, "health_only")
        #: Why this run proves no ready host though pytest passed (set at session finish), or None.
        self.not_validated: str | None = None

    def _nvml_module(self, replay_path: str | None) -> Any:
        """The NVML module this run reads: a replayed capture (--replay), else what a plugin
        answers to pytest_validate_nvml_module, else None (this host's pynvml); wrapped in a
        recorder of every answer used (--record)."""
        from validate.host.capture import CaptureError, load_capture
        from validate.host.replay import RecordingNvml, ReplayNvml

        module: Any = None
        if replay_path:
            try:
                self.replay = load_capture(replay_path)
            except CaptureError as err:
                raise pytest.UsageError(f"validate: --replay: {err}") from None
            module = ReplayNvml(self.replay)
        else:
            module = self.config.hook.pytest_validate_nvml_module(config=self.config)
        if self.record_dir:
            if module is None:
                module, error = nvml.import_pynvml()
                if module is None:
                    raise pytest.UsageError(f"validate: --record: {error}")
            self.recorder = RecordingNvml(
                module, source=f"python -m validate --record on {platform.node() or 'this host'}"
            )
            module = self.recorder
        return module

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
        # In full once, in the failing count row; with --expect-gpus 0 no row fails, and the
        # skips keep it whole (a --json report has no start line).
        if self.driverless and self.config.getoption("validate_expect_gpus") != 0:
            return driverless_brief(self.pci_gpus)
        return self.driverless or self.host.error or "NVML sees no GPU on this host"

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

    def reference(
        self, gpu_name: str, metric: str, methods: tuple[str, ...] = SUITE_MATMUL_METHODS
    ) -> ReferenceFigure | None:
        """What healthy GPUs of this model measured (gpu_peaks.yaml), or None: not judged;
        confirmed only by a measurement taken with `methods` (how the judged figure was taken)."""
        entry = peaks_for(gpu_name, self.peaks)
        return entry.reference_for(metric, methods) if entry else None

    def selected_mig_device(self, gpu: nvml.GpuInfo) -> nvml.MigDevice | None:
        """The MIG instance of this GPU that this run validates (CUDA_VISIBLE_DEVICES=MIG-...)."""
        wanted = self.selected_mig
        if not wanted:
            return None
        return next(
            (m for m in gpu.mig_devices if m.uuid.startswith(wanted) or wanted.startswith(m.uuid)),
            None,
        )

    def judge(
        self,
        gpu: nvml.GpuInfo,
        check: str,
        metric: str,
        value: float,
        unit: str,
        methods: tuple[str, ...] = SUITE_MATMUL_METHODS,
    ) -> tuple[str, Verdict]:
        """Measured text and verdict for a higher-is-better figure on this NVML GPU (or the MIG
        instance of it this run validates): --baseline, else 75% of the model's measured
        reference, else not judged. The datasheet share is shown for orientation only."""
        peak = self.peak(gpu.name, metric)
        mig = self.selected_mig_device(gpu) if gpu.mig_enabled else None
        share = (
            mig_share(mig.multiprocessor_count, gpu.multiprocessor_count)
            if mig is not None
            else None
        )
        verdict = judge_figure(
            metric,
            value,
            self.reference(gpu.name, metric, methods),
            self.baseline_for(gpu.name, check),
            mig=mig is not None,
            share=share,
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
        # lines a replay wrote were never measured on a host: only a live run's lines count; a
        # recording made before a check moved names it by its old node id (MOVED_TESTS)
        return [
            r
            for r in kept
            if isinstance(r, dict)
            and current_test(str(r.get("test") or "")) in wanted
            and not r.get("replayed")
        ]

    def write_recording(self, exit_status: int) -> str:
        """Write gpuenv's recording of this run into --record DIR; returns its path."""
        from validate.writing import path_component, write_text_atomic

        data = self.recorder.recording()
        if isinstance(
            (self.replay or {}).get("capture"), dict
        ):  # a cut capture stays cut when recorded again
            data["capture"] = self.replay["capture"]  # type: ignore[index]
        data["records"] = [r.to_dict() for r in self.records]
        data["frameworks"] = self.frameworks
        data["pytest_exit_status"] = exit_status
        folder = Path(self.record_dir or ".")
        folder.mkdir(parents=True, exist_ok=True)
        host = path_component(
            platform.node()
        )  # a host name with '/', a newline or ESC stays one safe name
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
            jit = [
                g
                for g in self.host.gpus
                if g.compute_capability and archs and ptx_only(g.compute_capability, archs)
            ]
            timeout = DEFAULT_TIMEOUT
            if jit:
                timeout = max(DEFAULT_TIMEOUT, TF_JIT_TIMEOUT)
                names = ", ".join(
                    f"GPU {g.index} (sm_{g.compute_capability.replace('.', '')})" for g in jit
                )  # type: ignore[union-attr]
                self.say_now(
                    f"validate: warning: TensorFlow ships only PTX for {names}: its first use "
                    "JIT-compiles the kernels, which can take many minutes; waiting up to "
                    f"{timeout:.0f} s (VALIDATE_TF_JIT_TIMEOUT)"
                )
            env: dict[str, str | None] = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
            # The speed figures come from the same child, after the memory step: one TensorFlow
            # start.
            speed = "--speed-quick" if self.quick else "--speed"
            visible = self.visible_gpus()
            first = (
                visible[0] if visible else None
            )  # TensorFlow's /GPU:0 in the child (which keeps the caller's mask)
            if first is not None and first.memory_total_bytes is not None and not first.mig_enabled:
                # Pause after the small products so the memory check can measure growth-env here.
                before, measure = outside_measurer(first.uuid, self.nvml)
                self._tf_info = run_stepped_probe(
                    ["tf-info", "--pause", speed], env, measure, timeout=timeout
                )
                self._tf_memory = (before, self._tf_info)
            else:
                self._tf_info = run_probe(["tf-info", speed], env, timeout=timeout)
            if self._tf_info.data and not self._tf_info.error:
                self.frameworks["tensorflow"] = {
                    k: v for k, v in self._tf_info.data.items() if k not in ("compute", "speed")
                }
        return self._tf_info

    def tf_memory_on_the_way(self) -> tuple[int, ProbeResult] | None:
        """(the first visible GPU's used bytes before, the TensorFlow info probe's result with its
        "small" step), when that probe measured that GPU on the way; None otherwise."""
        self.tf_info()
        return self._tf_memory


class Recorder:
    """The `record` fixture: checks add report lines; `finish()` fails the test if any line
    failed."""

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
        fleet_judged: bool = True,
    ) -> Record:
        if isinstance(verdict, Verdict):
            word, threshold, reason = (
                verdict.verdict,
                threshold or verdict.threshold,
                verdict.reason,
            )
        else:
            word, reason = verdict, ""
        if seconds is None:
            seconds = time.perf_counter() - self.started
        self.started = time.perf_counter()
        record = Record(
            check,
            gpu,
            measured,
            threshold,
            word,
            round(seconds, 3),
            reason,
            value,
            self.item.nodeid,
            fleet_judged=fleet_judged,
        )
        self.records.append(record)
        return record

    def finish(self) -> None:
        failed = [r for r in self.records if r.verdict == FAIL]
        if failed:
            pytest.fail(
                "; ".join(f"{r.check}: {r.reason or r.measured}" for r in failed), pytrace=False
            )
