"""The suite's options, declared once: `python -m validate` parses them (validate/cli.py) and
hands them to pytest, whose plugin declares them (validate/conftest.py), and gpuenv's `invoke
validate` builds the suite's command line from the same table. Stdlib only: gpuenv imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class SuiteOption:
    """One option of the suite: `python -m validate` parses it (cli.parse_args) and hands it to
    pytest (cli.pytest_args), the plugin declares it (conftest.pytest_addoption, under
    `plugin_flag`), and gpuenv's `invoke validate` passes it on (command_line)."""

    name: str  # the Python name: args.<name>, and the invoke task's parameter
    help: str
    metavar: str | None = None  # None: a switch
    type: type = str
    #: The pytest plugin's flag when not the same (pytest owns --verbose); "" for none (--junit is
    #: pytest's own --junitxml).
    plugin_flag: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def in_plugin(self) -> str:
        """The flag the pytest plugin declares ("" when pytest's own option serves)."""
        return self.flag if self.plugin_flag is None else self.plugin_flag

    @property
    def dest(self) -> str:
        """The pytest option's name (suite_option reads it)."""
        return "validate_" + self.in_plugin.removeprefix("--").replace("-", "_")


#: The suite's options, in the order a command line lists them.
SUITE_OPTIONS: tuple[SuiteOption, ...] = (
    SuiteOption("expect_gpus", "GPUs this server must show; fewer fails the run", "N", int),
    SuiteOption("json", "write the JSON report (keyed by GPU UUID, plus 'host')", "PATH"),
    SuiteOption("junit", "write JUnit XML (pytest's --junitxml)", "PATH", plugin_flag=""),
    SuiteOption("save_baseline", "save this run's figures as a known-good baseline", "PATH"),
    SuiteOption(
        "baseline", "compare with a baseline from a known-good server of the same GPU model", "PATH"
    ),
    SuiteOption(
        "quick",
        "smaller sizes, fewer cases, a 10 s load: about a minute on one GPU; on a host without "
        "GPUs the multi-GPU training check runs only in the full suite",
    ),
    SuiteOption(
        "replay",
        "judge a recorded host instead of this one: an nvidia-smi -q -x (or -q) capture, or a "
        "file written by --record; checks that need a framework on that host skip",
        "FILE",
    ),
    SuiteOption(
        "verbose",
        "print every row and reason, one row per check and GPU (the default is a one-screen "
        "summary; --json and --junit always keep every row)",
        plugin_flag="--full-report",
    ),
    SuiteOption(
        "record",
        "also write this host's NVML answers, probe results and figures to DIR "
        "(gpuenv-nvml-recording/1 JSON, for a bug report or a later --replay)",
        "DIR",
    ),
    SuiteOption(
        "health_only",
        "judge the GPUs' health alone (NVML: driver, ECC, clocks, ...) when no framework is here "
        "to prove that each GPU computes; without it such a GPU host is 'not validated' and "
        "exits 1",
    ),
)


def add_options(add: Callable[..., Any], plugin: bool = False) -> None:
    """Declare SUITE_OPTIONS through `add` (argparse's add_argument, or the pytest plugin's
    group.addoption when `plugin`: its flags and dest names)."""
    for option in SUITE_OPTIONS:
        flag = option.in_plugin if plugin else option.flag
        if not flag:
            continue
        named = {"dest": option.dest} if plugin else {}
        if option.metavar is None:
            add(flag, action="store_true", default=False, help=option.help, **named)
        else:
            add(
                flag,
                type=option.type,
                default=None,
                metavar=option.metavar,
                help=option.help,
                **named,
            )


def command_line(
    values: Mapping[str, Any], path_for: Callable[[str], str] = lambda p: p
) -> list[str]:
    """The `python -m validate` options for `values` (by SuiteOption.name; None/False: left out);
    `path_for` maps the paths (PATH, FILE, DIR) to the paths the suite will see."""
    out: list[str] = []
    for option in SUITE_OPTIONS:
        value = values.get(option.name)
        if value is None or value is False:
            continue
        if option.metavar is None:
            out.append(option.flag)
        elif option.metavar == "N":
            out += [option.flag, str(value)]
        else:
            out += [option.flag, path_for(str(value))]
    return out


def suite_option(config: Any, name: str) -> Any:
    """The value of the suite option `name` (SuiteOption.name: "quick", "verbose") in a pytest run
    (`config` is pytest's), read under the dest the plugin declared it with."""
    option = next((o for o in SUITE_OPTIONS if o.name == name and o.in_plugin), None)
    if option is None:
        raise KeyError(f"{name!r} is not a suite option the pytest plugin declares")
    return config.getoption(option.dest)
