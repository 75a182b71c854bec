"""Print what reading the team's config costs (target: a plain large file well under a second; a
hostile one refused in milliseconds, never worked through).

Cases: a 700 KB invoke.yaml of 15,000 fleet hosts, read by gpuenv's bounded loader and by
`gpuenv resolve` end to end; a ~340-byte YAML alias bomb; 2**30 values from 30 aliases.
Run: .venv/bin/python benchmarks/config_load.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuenv.cli.configfiles import ConfigFileError, load_file  # noqa: E402

BOMB = "".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    + [f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")]
)
DEEP = "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 31))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hosts = "".join(
            f"    - ssh://gpu@node{i:05d}.cluster.example.com:22\n" for i in range(15000)
        )
        big = folder / "invoke.yaml"
        big.write_text("gpuenv:\n  cuda: cpu\n  fleet:\n    hosts:\n" + hosts)
        started = time.perf_counter()
        load_file(str(big))
        print(
            f"plain {big.stat().st_size / 1000:.0f} KB file, loader      "
            f"{time.perf_counter() - started:7.3f} s"
        )
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpuenv.cli.program", "resolve", "--json"],
            cwd=folder,
            check=True,
            capture_output=True,
            env={"PYTHONPATH": str(ROOT), "HOME": tmp, "PATH": "/usr/bin:/bin"},
        )
        print(
            f"plain {big.stat().st_size / 1000:.0f} KB file, gpuenv resolve "
            f"{time.perf_counter() - started:7.3f} s"
        )
        wide = folder / "wide"
        wide.mkdir()
        (wide / "invoke.yaml").write_text(
            "gpuenv:\n  cuda: cpu\nextra:\n"
            + "".join(f"  key{i:06d}: value number {i} with some padding\n" for i in range(14000))
        )
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpuenv.cli.program", "resolve", "--json"],
            cwd=wide,
            check=True,
            capture_output=True,
            env={"PYTHONPATH": str(ROOT), "HOME": tmp, "PATH": "/usr/bin:/bin"},
        )
        size = (wide / "invoke.yaml").stat().st_size / 1000
        print(
            f"{size:.0f} KB file, a 14,000-key section, gpuenv resolve "
            f"{time.perf_counter() - started:7.3f} s  (Invoke's own env crawl: ~12 s)"
        )
        for name, text in (("alias bomb", BOMB), ("2**30 values", DEEP)):
            path = folder / f"{name.replace(' ', '-').replace('*', '')}.yaml"
            path.write_text(text)
            started = time.perf_counter()
            try:
                load_file(str(path))
                verdict = "READ (should be refused)"
            except ConfigFileError as err:
                verdict = f"refused: {err.message}"
            print(f"{name} ({len(text)} bytes) {time.perf_counter() - started:7.4f} s  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
