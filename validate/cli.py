"""Command line of the suite: translate our options into a pytest run and its exit status.

pytest's "no tests collected" (5) and "interrupted" (2) must never read as success, so
every status other than 0 becomes non-zero here with a line saying why.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parent

EXIT_MEANING = {
    1: "some checks failed",
    2: "the run was interrupted",
    3: "pytest hit an internal error",
    4: "pytest was called wrongly",
    5: "no checks were collected",
}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m validate",
        description="Check that this server is ready for the team's PyTorch and TensorFlow images. "
        "Other arguments are passed to pytest (e.g. -k masking, -x).",
    )
    parser.add_argument("--expect-gpus", type=int, metavar="N", help="GPUs this server must show; fewer fails the run")
    parser.add_argument("--json", metavar="PATH", help="write the JSON report (keyed by GPU UUID, plus 'host')")
    parser.add_argument("--junit", metavar="PATH", help="write JUnit XML (pytest's --junitxml)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer cases: about a minute on one GPU")
    parser.add_argument("--save-baseline", metavar="PATH", help="save this run's figures as a known-good baseline")
    parser.add_argument("--baseline", metavar="PATH", help="compare with a baseline from a known-good server of the same GPU model")
    return parser.parse_known_args(argv)


def pytest_args(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The pytest command line for these options (pure, so it is tested directly)."""
    out = [str(SUITE_DIR), "--rootdir", str(SUITE_DIR), "-c", str(SUITE_DIR / "pytest.ini"), "-q", "-rN", "--tb=no"]
    if args.expect_gpus is not None:
        out += ["--expect-gpus", str(args.expect_gpus)]
    if args.json:
        out += ["--json", args.json]
    if args.junit:
        out += [f"--junitxml={args.junit}"]
    if args.quick:
        out += ["--quick"]
    if args.save_baseline:
        out += ["--save-baseline", args.save_baseline]
    if args.baseline:
        out += ["--baseline", args.baseline]
    return out + extra


def main(argv: list[str]) -> int:
    args, extra = parse_args(argv)
    if args.expect_gpus is not None and args.expect_gpus < 0:
        print(f"validate: --expect-gpus must be 0 or more, got {args.expect_gpus}")
        return 2
    try:
        import pytest
    except ImportError:
        print("validate: pytest is not installed in this Python environment: pip install pytest nvidia-ml-py")
        return 1

    status = int(pytest.main(pytest_args(args, extra)))
    if status == 0:
        print("validate: every check passed (or skipped with its reason)")
        return 0
    print(f"validate: NOT READY: {EXIT_MEANING.get(status, f'pytest exit status {status}')}")
    return status if status in (1, 2, 3, 4) else 1
