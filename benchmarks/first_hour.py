"""A new user's first hour, timed: each step of README.md's quickstart after the set-up, run as
written through `invoke` in this checkout, on this machine (docs/decisions.md, issue 28).

The commands are read from README.md ("## Quickstart": its second block, the main job here), so
the benchmark times whatever the README says. The steps:

1. build, cold-ish: the README's build with `--no-cache` (every step of the image runs again;
   the local base image and the wheelhouse are on disk, as after the set-up);
2. build, warm: the README's build again, as written (the same inputs: the image is reused);
3. validate: the README's `invoke validate --quick`;
4. run: `invoke run -- python -c ...` with no stack option (the remembered stack's image);
5. run, no option at all: `invoke run` (the image's command: the full suite).

    .venv/bin/python benchmarks/first_hour.py [--skip run-bare] [--json times.json]

Needs the set-up's wheelhouse (`GPUENV_SETUP_STEPS=wheelhouse bash scripts/setup.sh`) and the
local base image. The load average is printed beside each time: on a shared machine wall time
grows with the other load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_COMMAND = ["python", "-c", "import torch; print('torch', torch.__version__)"]


def main_job(readme: Path) -> tuple[list[str], list[str]]:
    """The build and the validate command of the README's quickstart (its second bash block)."""
    section = readme.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    if len(blocks) < 2:
        raise SystemExit(
            f"{readme}: the quickstart has no main-job block (expected the second ```bash block)"
        )
    commands = [shlex.split(part) for part in blocks[1].strip().split("&&")]
    build = next((c for c in commands if c[:2] == ["invoke", "build"]), None)
    validate = next((c for c in commands if c[:2] == ["invoke", "validate"]), None)
    if build is None or validate is None:
        raise SystemExit(
            f"{readme}: the main job has no `invoke build` and `invoke validate`: "
            f"{blocks[1].strip()}"
        )
    return build, validate


def timed(name: str, argv: list[str], cwd: Path) -> dict:
    """Run `invoke ARGS` (argv[0] is "invoke") with this Python, as the user's shell would."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(cwd),
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "invoke", *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    out = done.stdout + done.stderr
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    step = {
        "step": name,
        "command": shlex.join(argv),
        "seconds": round(seconds, 1),
        "exit": done.returncode,
        "load": load,
    }
    steps = re.findall(r"^Step \d+/(\d+)", out, flags=re.M)
    if steps:
        step["builder steps"] = int(steps[-1])
    for key, pattern in (("builder", r"^builder: (\S+)"), ("size", r"^size: (.+)$")):
        found = re.search(pattern, out, flags=re.M)
        if found:
            step[key] = found.group(1)
    if done.returncode != 0:
        step["tail"] = out[-1500:]
    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkout", default=str(REPO), help="the checkout to run in (default: this one)"
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["build-cold", "build-warm", "validate", "run", "run-bare"],
        help="leave a step out (repeatable)",
    )
    parser.add_argument("--json", help="write the times here")
    args = parser.parse_args()
    checkout = Path(args.checkout).resolve()
    build, validate = main_job(checkout / "README.md")
    wheelhouse = build[build.index("--wheelhouse") + 1] if "--wheelhouse" in build else None
    if wheelhouse and not any((checkout / wheelhouse).glob("*.whl")):
        print(
            f"{checkout / wheelhouse} holds no wheels: run the set-up's wheelhouse step first "
            "(GPUENV_SETUP_STEPS=wheelhouse bash scripts/setup.sh)",
            file=sys.stderr,
        )
        return 2
    plan = [
        ("build-cold", "build, cold-ish (--no-cache)", [*build, "--no-cache", "--verbose"]),
        ("build-warm", "build, warm (as written)", build),
        ("validate", "validate --quick (as written)", validate),
        ("run", "run, no stack option", ["invoke", "run", "--", *RUN_COMMAND]),
        ("run-bare", "run, no option (the image's command: the full suite)", ["invoke", "run"]),
    ]
    print(
        f"README.md: {len((checkout / 'README.md').read_text().splitlines())} lines; "
        f"{os.cpu_count()} CPUs"
    )
    results = []
    for key, name, argv in plan:
        if key in args.skip:
            continue
        step = timed(name, argv, checkout)
        results.append(step)
        extra = "".join(
            f", {k} {step[k]}" for k in ("builder", "builder steps", "size") if k in step
        )
        print(
            f"{step['seconds']:7.1f}s  {name}: exit {step['exit']}{extra}; load average "
            f"{step['load']}",
            flush=True,
        )
        if "tail" in step:
            print("    " + step["tail"].replace("\n", "\n    "))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(s["exit"] == 0 for s in results) else 1


if __name__ == "__main__":
    sys.exit(main())
