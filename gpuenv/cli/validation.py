"""The `validate` task: run the validation suite on this host (--local) or inside a stack's image.

The suite itself is `validate/` (`python -m validate`); this task only builds its command line,
and for the in-image path resolves the stack, finds its image and runs the suite there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from invoke.exceptions import Exit

from gpuenv.cli.common import OUTPUT_HELP, STACK_HELP, is_dry, reporter, resolve, stack_request, task, user_errors
from gpuenv.engine import WORKDIR_IN_CONTAINER  # cheap: engine imports the Docker SDK lazily
from gpuenv.errors import BadInput


_HELP = {
    "local": "run the suite on this host with this Python (`python -m validate`) instead of inside an image",
    "cuda": STACK_HELP["cuda"] + "; picks the image to validate in (default without --local: the stack resolved for this host)",
    "framework": STACK_HELP["framework"],
    "torch": STACK_HELP["torch"],
    "tensorflow": STACK_HELP["tensorflow"],
    "python": STACK_HELP["python"],
    "image": "validate in this image instead of the stack's, e.g. HOST/gpuenv/<stack>@sha256:... as invoke push printed it; pulled (by digest) when missing",
    "gpus": "GPUs given to the container, as `docker run --gpus`: all, none, or 0,1 / GPU UUIDs (default: all; none for a CPU stack)",
    "expect_gpus": "number of GPUs the server must show; fewer (or none) fails the run",
    "json": "write the JSON report (keyed by GPU UUID, plus 'host') to this file",
    "junit": "write JUnit XML to this file (for CI dashboards)",
    "quick": "smaller sizes and fewer cases: about a minute on a one-GPU server",
    "save_baseline": "save this run's figures as the known-good baseline for this GPU model",
    "baseline": "compare figures with a baseline saved on a known-good server of the same GPU model",
    **OUTPUT_HELP,
}


def suite_arguments(
    expect_gpus: int | str | None,
    json: str | None,
    junit: str | None,
    quick: bool,
    save_baseline: str | None,
    baseline: str | None,
    path_for=lambda p: p,
) -> list[str]:
    """`python -m validate` options; `path_for` maps host paths to the paths the suite will see."""
    args: list[str] = []
    if expect_gpus is not None:
        try:
            count = int(expect_gpus)
        except ValueError:
            raise BadInput(f"--expect-gpus {expect_gpus!r} is not a number", fix="give the number of GPUs, e.g. --expect-gpus 8") from None
        if count < 0:
            raise BadInput(f"--expect-gpus {count} is negative", fix="give 0 or more")
        args += ["--expect-gpus", str(count)]
    for flag, value in (("--json", json), ("--junit", junit), ("--save-baseline", save_baseline), ("--baseline", baseline)):
        if value:
            args += [flag, path_for(value)]
    if quick:
        args.append("--quick")
    return args


def container_path(path: str, workdir: Path) -> str:
    """A host path under the current folder, as the container sees it (under /workspace)."""
    resolved = Path(path).resolve()
    try:
        relative = resolved.relative_to(workdir.resolve())
    except ValueError:
        raise BadInput(
            f"{path} is outside the current folder, which is the only folder the container sees",
            fix=f"give a path under {workdir} (it is mounted at {WORKDIR_IN_CONTAINER})",
        ) from None
    return f"{WORKDIR_IN_CONTAINER}/{relative.as_posix()}"


def run_local(args: list[str]) -> int:
    """Run the suite on this host with this interpreter; its output goes straight to the terminal."""
    return subprocess.run([sys.executable, "-m", "validate", *args], check=False).returncode


@task(help=_HELP)
@user_errors
def validate(
    c, local=False, cuda=None, framework=None, torch=None, tensorflow=None, python=None, image=None, gpus=None,
    expect_gpus=None, json=None, junit=None, quick=False, save_baseline=None, baseline=None, verbose=False, quiet=False,
):
    """Tell whether this server is ready for the team's images, and why not (exit 0 only when ready)."""
    if local:
        if any(v is not None for v in (cuda, framework, torch, tensorflow, python, gpus, image)):
            raise BadInput("--local runs on this host's Python, so a stack option makes no sense with it",
                           fix="drop --cuda/--framework/--torch/--tensorflow/--python/--image/--gpus, or drop --local")
        args = suite_arguments(expect_gpus, json, junit, quick, save_baseline, baseline)
        if is_dry(c):
            print(f"would run {sys.executable} -m validate {' '.join(args)}; nothing run (--dry)".replace("  ", " "))
            return
        code = run_local(args)
    else:
        from gpuenv import engine, images, share

        workdir = Path.cwd()
        args = suite_arguments(expect_gpus, json, junit, quick, save_baseline, baseline,
                               path_for=lambda p: container_path(p, workdir))
        if image:
            given = [f"--{k}" for k, v in (("cuda", cuda), ("framework", framework), ("torch", torch), ("tensorflow", tensorflow), ("python", python)) if v]
            if given:
                raise BadInput(f"--image names the image, so {', '.join(given)} cannot choose one", fix="drop " + " ".join(given) + " or --image")
            ref = share.parse_image_ref(image)
            if is_dry(c):
                print(f"would validate in {ref} (pulled by digest if missing); nothing run (--dry)")
                return
            report = reporter(verbose, quiet)
            with report:
                info = share.ensure_image(ref, progress=report.layer, say=report.phase)
            image, name = ref, ref
            stack = images.stack_from_labels(info.labels)
            cpu = stack.is_cpu if stack else False
        else:
            stack = resolve(stack_request(c, cuda=cuda, framework=framework, torch=torch, tensorflow=tensorflow, python=python))
            image = images.image_for_stack(stack)
            name, cpu = f"{stack.stack_id} ({image[:19]})", stack.is_cpu
            if is_dry(c):
                print(f"would validate in {name}; nothing run (--dry)")
                return
        gpus = gpus or ("none" if cpu else "all")
        print(f"validating in {name}, GPUs: {gpus}", flush=True)
        code = engine.run_container(image, ["python", "-m", "validate", *args], gpus=gpus, workdir_mount=workdir)
    if code != 0:
        raise Exit(code=code)
