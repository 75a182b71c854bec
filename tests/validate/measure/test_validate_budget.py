"""The quick suite's process budget (issue 11, Time): processes importing PyTorch or TensorFlow,
counted from the checks' own case lists, and the unset masking case answered without a child."""

from __future__ import annotations

from pathlib import Path

from validate.measure.budget import framework_processes, masking_waves

REPO = Path(__file__).resolve().parents[3]


def test_quick_on_one_gpu_starts_few_framework_processes():
    processes = framework_processes(1, quick=True)
    assert (
        processes["masking probes (torch)"] == 5
    )  # index 0, uuid, "", invalid entry, repeated entry
    assert processes["all-reduce probe and its workers (torch)"] == 0
    assert (
        processes["ddp launcher and its ranks (torch)"] == 0
    )  # one GPU: the multi-GPU check skips
    assert (
        processes["memory probes (tensorflow)"] == 1
    )  # no-growth; growth-env is measured in the info probe
    assert sum(processes.values()) == 14
    # Without sharing (the unset case twice, growth-env once): three more.
    assert sum(framework_processes(1, quick=True, share_work=False).values()) == 17


def test_eight_gpus_add_only_the_all_reduce_workers_in_quick_mode():
    one, eight = framework_processes(1, quick=True), framework_processes(8, quick=True)
    assert eight["masking probes (tensorflow)"] == one["masking probes (tensorflow)"]
    assert eight["all-reduce probe and its workers (torch)"] == 9
    assert (
        eight["ddp launcher and its ranks (torch)"] == 9
        and eight["mirrored strategy probe (tensorflow)"] == 1
    )
    assert (
        eight["dataparallel probe (torch)"] == 1
        and framework_processes(0, quick=True)["dataparallel probe (torch)"] == 0
    )
    # CI: gloo ranks and logical CPU devices instead, in the full suite; --quick skips them there
    cpu = framework_processes(0, quick=False)
    assert (
        cpu["ddp launcher and its ranks (torch)"] == 3
        and cpu["mirrored strategy probe (tensorflow)"] == 1
    )
    cpu_quick = framework_processes(0, quick=True)
    assert (
        cpu_quick["ddp launcher and its ranks (torch)"] == 0
        and cpu_quick["mirrored strategy probe (tensorflow)"] == 0
    )
    assert masking_waves(8, True, cpus=16) == 1 and masking_waves(8, False, cpus=2) > 1


def test_the_task_runs_the_suite_baked_into_the_image():
    """`invoke validate` runs the image's suite by file path, where the Dockerfile copies it."""
    from gpuenv.cli.validation import SUITE_IN_IMAGE
    from gpuenv.images.context import SUITE_PREFIX

    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    folder = SUITE_IN_IMAGE.rsplit("/", 1)[0]  # /opt/gpuenv/validate
    stage_dir, _, name = SUITE_PREFIX.rstrip("/").partition("/")  # the context's image/validate/
    assert f"COPY {stage_dir}/ {folder.rsplit('/', 1)[0]}/" in dockerfile and folder.endswith(
        "/" + name
    )
    assert SUITE_IN_IMAGE.endswith("/__main__.py")


def test_eight_gpu_estimate_scales_per_gpu_checks_not_the_shared_load():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "validate_quick_budget", REPO / "benchmarks" / "validate_quick_budget.py"
    )
    budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(budget)
    report = {
        "host": {
            "checks": [
                {"check": "torch CUDA_VISIBLE_DEVICES=0 (index 0)", "gpu": None, "seconds": 6.0}
            ]
        },
        "GPU-a": {
            "checks": [
                {"check": "matmul bf16 TFLOPS", "gpu": "GPU-a", "seconds": 2.0},
                {
                    "check": "sustained load",
                    "gpu": "GPU-a",
                    "seconds": 10.0,
                },  # all GPUs at once: not scaled
            ]
        },
    }
    guess = budget.estimate(45.0, report, gpus=8, cpus=16)
    assert guess["per-GPU checks x extra GPUs"] == 14.0
    assert guess["all-reduce"] == 12.0  # two child start-ups of 6 s
    assert (
        guess["multi-GPU training (DDP, MirroredStrategy)"] == 18.0
    )  # three child start-ups of 6 s
    assert guess["total"] == 45.0 + 14.0 + 12.0 + 18.0
