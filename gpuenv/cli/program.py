"""The `gpuenv` console command: gpuenv's tasks from any folder, through Invoke's own Program.

`gpuenv build --cuda 12.1` is `invoke build --cuda 12.1` without needing tasks.py in the current
folder. The project config (invoke.yaml with the team's `gpuenv:` section) is the nearest one in
this folder or above it, else the one beside the gpuenv checkout.
"""

from __future__ import annotations

from pathlib import Path

from invoke import Program

from gpuenv import PROJECT_ROOT, __version__

CONFIG_NAMES = ("invoke.yaml", "invoke.yml", "invoke.json")


def project_dir(start: Path) -> Path | None:
    """The nearest folder, from `start` up, holding an Invoke project config; else gpuenv's checkout."""
    for folder in (start, *start.parents):
        if any((folder / name).is_file() for name in CONFIG_NAMES):
            return folder
    if any((PROJECT_ROOT / name).is_file() for name in CONFIG_NAMES):
        return PROJECT_ROOT
    return None


class GpuenvProgram(Program):
    """Invoke's Program over gpuenv's namespace that also loads the team's invoke.yaml."""

    def parse_collection(self) -> None:
        super().parse_collection()
        folder = project_dir(Path.cwd())
        if folder is not None:
            self.config.set_project_location(str(folder))
            self.config.load_project()


def config_file_problem(err: BaseException) -> str | None:
    """One line for a config file Invoke could not load (bad YAML, a value where a section goes)."""
    from invoke.config import AmbiguousMergeError

    mark = getattr(err, "problem_mark", None)
    if mark is not None and hasattr(err, "problem"):  # yaml.MarkedYAMLError, Invoke's vendored copy or not
        return f"{mark.name}:{mark.line + 1}: not valid YAML ({err.problem}): fix the file (see the committed invoke.yaml)"
    if isinstance(err, AmbiguousMergeError):
        return ("a config file sets a section (`gpuenv:`, `gpuenv.fleet:` or `gpuenv.fleet.slurm:`) to a single value: "
                "write it as indented `key: value` lines (see the committed invoke.yaml)")
    return None


def main() -> None:
    import os
    import sys

    from gpuenv.cli import namespace

    try:
        GpuenvProgram(name="gpuenv", binary="gpuenv", version=__version__, namespace=namespace()).run()
    except Exception as err:
        problem = config_file_problem(err)
        if problem is None:
            raise
        print(f"gpuenv: {problem}", file=sys.stderr)
        sys.exit(2)  # bad input, as every task's one-line errors
    except BrokenPipeError:
        # `gpuenv --list | head`: the reader went away; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":
    main()
