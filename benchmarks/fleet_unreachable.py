"""Print how long `validate --hosts` takes for hosts that drop every SYN (down, or firewalled).

Issue 20 measured 540 s for 30 such hosts at --parallel 8: paramiko's connect had no timeout, so
each host waited out the kernel's SYN retries (~130 s). Now each host ends at the connect timeout
(gpuenv.engine.CONNECT_TIMEOUT, 20 s), so 30 hosts in waves of 8 should take about 4 x 20 s.

Runs in a network namespace of its own (unshare --net, root) whose loopback drops SYNs to
127.0.0.1:40000-40099 (iptables): nothing leaves the machine, nothing else is touched.
Run: sudo .venv/bin/python benchmarks/fleet_unreachable.py [HOSTS] [PARALLEL] [CONNECT_TIMEOUT_S]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

INSIDE = """
import json, subprocess, sys, time
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(
    ["iptables", "-A", "INPUT", "-i", "lo", "-p", "tcp", "--dport", "40000:40099", "--syn",
     "-j", "DROP"],
    check=True,
)
from gpuenv.fleet.sshhosts import SuiteRun, validate_hosts
count, parallel, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
hosts = [f"ssh://root@127.0.0.1:{40000 + n}" for n in range(count)]
started = time.monotonic()
run = SuiteRun(image="x", gpus="none", connect_timeout_s=timeout)
outcomes = validate_hosts(hosts, run, parallel=parallel)
print(json.dumps({"seconds": time.monotonic() - started,
                  "statuses": sorted({o.status for o in outcomes}),
                  "reason": outcomes[0].reason}))
"""


def main() -> int:
    count, parallel = (
        int(sys.argv[1]) if len(sys.argv) > 1 else 30,
        int(sys.argv[2]) if len(sys.argv) > 2 else 8,
    )
    sys.path.insert(0, str(ROOT))
    from gpuenv.engine import CONNECT_TIMEOUT

    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else float(CONNECT_TIMEOUT)
    if os.geteuid() != 0:
        print("needs root (unshare --net and iptables in that namespace)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as home:
        script = Path(home) / "inside.py"
        script.write_text(INSIDE)
        proc = subprocess.run(
            [
                "unshare",
                "--net",
                sys.executable,
                str(script),
                str(count),
                str(parallel),
                str(timeout),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": home},
        )
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return 1
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    waves = -(-count // parallel)
    print(
        f"{count} hosts dropping SYNs, --parallel {parallel}, connect timeout {timeout:.0f}s: "
        f"{result['seconds']:.1f}s ({waves} wave(s); bound {waves * timeout:.0f}s; before: 540s "
        "for 30 at --parallel 8)"
    )
    print(f"statuses: {', '.join(result['statuses'])}; first reason: {result['reason']}")
    print(f"stderr lines: {len(proc.stderr.splitlines())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
