"""Print what the fleet report costs at 1,000, 12,500 and 25,000 hosts x 8 GPUs, per format,
against its goals.

The per-host suite reports are synthetic but written by the suite's own writer
(`validate.report.record.build_json`), with a realistic spread: two GPU models, a few percent of
noise, one slow GPU in about 150, a failed check on one host in 100 and one unreadable file in 500.
They go into a folder, one file per host, and are rendered as `invoke validate --from-reports` does
(`gpuenv.fleet.collected.read_report_folder`, which hands a large folder to worker processes, the
cycle collector paused, JSON and JUnit written host by host), each size in its own subprocess.
The readers' CPU time is counted with the reading, the forked writer's and the plots' with the
files. The peak is the memory of that subprocess and every process it starts (readers, the forked
JSON writer, the plots' process) together, sampled every 0.2 s from here: the sum of their
proportional set sizes (Pss), so that a page a forked process still shares with its parent is
counted once (the renderer's ru_maxrss plus each reader's is printed beside it).
With --chromium, times headless Chromium opening the HTML page (--dump-dom), next to an empty page
opened in the same run (the browser's own start, which a loaded machine stretches).

Goals: at 1,000 hosts every format in under 10 s together, under 500 MB peak, the page under
5 MB; at 12,500 hosts (100,000 GPUs) under 20 s on 2 cores, under 2 GB peak, the page under
10 MB; Chromium opens the page in under 5 s; 25,000 hosts complete within this machine's memory
(the page under 10 MB there too). Each figure is printed with its goal.

--compare DIR measures another checkout (DIR on PYTHONPATH, e.g. `git worktree add /tmp/base main`)
on the same folders in the same run, just before this one, so that a before/after is side by side.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/fleet_report.py [--sizes 1000,12500,25000]
     [--formats table,json,junit,html] [--chromium] [--compare DIR] [--reports-cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = (
    ("NVIDIA H100 80GB HBM3", 700.0, 3000.0, 520.0),
    ("NVIDIA A100-SXM4-80GB", 250.0, 1700.0, 230.0),
)


def host_report(rng: random.Random, host: int, gpus: int = 8) -> dict:
    """One host's suite report through the suite's own writer."""
    from validate.report.record import Record, build_json

    name, bf16, bandwidth, sustained = MODELS[0] if host % 3 else MODELS[1]
    infos = [
        {
            "index": i,
            "name": name,
            "uuid": f"GPU-{host:08x}-{i:04x}-4000-8000-{host:08x}{i:04x}",
            "pci_bus_id": f"00000000:{i + 0x18:02X}:00.0",
            "compute_capability": "9.0" if "H100" in name else "8.0",
            "memory_total_bytes": 85899345920,
            "memory_used_bytes": 0,
        }
        for i in range(gpus)
    ]
    records = [
        Record(
            "driver version",
            None,
            "550.54.15",
            "",
            "info",
            0.0,
            test="checks/test_01_environment.py::test_driver",
        ),
        Record(
            "torch version",
            None,
            "2.3.1",
            "",
            "info",
            0.0,
            test="checks/test_01_environment.py::test_torch_version",
        ),
        Record(
            "cuda visible devices [torch]",
            None,
            "ok",
            "-",
            "pass",
            1.0,
            test="checks/test_04_masking.py::test_cuda_visible_devices[torch]",
        ),
    ]
    failed_host = host % 100 == 37
    for info in infos:
        uuid = info["uuid"]
        slow = 0.55 if (host * gpus + info["index"]) % 149 == 5 else 1.0
        b = bf16 * rng.gauss(1.0, 0.02) * slow
        m = bandwidth * rng.gauss(1.0, 0.015)
        s = sustained * rng.gauss(1.0, 0.03) * slow
        records += [
            Record(
                "gpu health",
                uuid,
                "ok",
                "no XID",
                "pass",
                0.0,
                test="checks/test_01_health.py::test_gpu_health_nvml",
            ),
            Record(
                "torch matmul correct",
                uuid,
                "1.0e-06",
                "relative error <= 0.01",
                "pass",
                0.1,
                test="checks/test_02_visibility.py::test_torch_computes_on_gpu",
            ),
            Record(
                "tensorflow sees gpu",
                uuid,
                "yes",
                "-",
                "pass",
                0.5,
                test="checks/test_02_visibility.py::test_tensorflow_sees_gpu",
            ),
            Record(
                "tensorflow memory growth [growth-env]",
                uuid,
                "0.5 GiB",
                "<= 25%",
                "pass",
                2.0,
                test="checks/test_03_memory.py::test_tensorflow_memory_growth",
            ),
            Record(
                "matmul bf16 TFLOPS",
                uuid,
                f"{b:.1f} TFLOPS",
                ">= 35% of peak",
                "pass",
                1.0,
                value=round(b, 2),
                test="checks/test_05_speed.py::test_matmul_throughput",
            ),
            Record(
                "matmul fp32 TFLOPS",
                uuid,
                f"{b / 14:.1f} TFLOPS",
                "-",
                "not judged",
                1.0,
                value=round(b / 14, 2),
                test="checks/test_05_speed.py::test_matmul_throughput",
            ),
            Record(
                "device memory GB/s",
                uuid,
                f"{m:.1f} GB/s",
                ">= 60% of peak",
                "pass",
                1.0,
                value=round(m, 1),
                test="checks/test_05_speed.py::test_memory_bandwidth",
            ),
            Record(
                "host to device GB/s",
                uuid,
                f"{m / 120:.1f} GB/s",
                "-",
                "info",
                1.0,
                value=round(m / 120, 2),
                test="checks/test_05_speed.py::test_pcie_bandwidth",
            ),
            Record(
                "sustained load",
                uuid,
                f"{s:.0f} bf16 TFLOPS for 30 s",
                "",
                "info",
                30.0,
                value=round(s, 1),
                test="checks/test_06_sustained.py::test_sustained_load",
            ),
            Record(
                "clock events under load",
                uuid,
                "none",
                "",
                "pass",
                0.0,
                test="checks/test_06_sustained.py::test_sustained_load",
            ),
            Record(
                "pcie generation under load",
                uuid,
                "gen5",
                ">= gen5",
                "pass",
                0.0,
                test="checks/test_06_sustained.py::test_sustained_load",
            ),
        ]
    if failed_host:
        records[-2].verdict, records[-2].reason = "fail", "HW_SLOWDOWN during the load"
    host_info = {
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "gpus": infos,
        "error": None,
    }
    fails = sum(r.verdict == "fail" for r in records)
    return build_json(records, host_info, infos, {"torch": {"version": "2.3.1"}}, 1 if fails else 0)


def make_folder(folder: Path, hosts: int, malformed: bool = True) -> None:
    rng = random.Random(hosts)
    folder.mkdir(parents=True, exist_ok=True)
    for host in range(hosts):
        path = folder / f"gpu{host:05d}.json"
        if malformed and host % 500 == 250:
            path.write_text('{"format": "gpuenv-validate-report/1", "host": "not a section"}\n')
            continue
        path.write_text(json.dumps(host_report(rng, host), indent=2) + "\n")


#: hosts -> (seconds for every format, peak MB, page MB): issue 37's goals (docs/decisions.md);
#: None: no goal (25,000 hosts: complete within this machine's memory, MemTotal).
GOALS = {1000: (10.0, 500, 5.0), 12500: (20.0, 2000, 10.0)}
CHROMIUM_GOAL = 5.0


def _memory_mb() -> float:
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def _goal(hosts: int) -> tuple[float | None, float, float]:
    return GOALS.get(hosts) or (None, _memory_mb(), 10.0)


def measure(folder: Path, formats: list[str], out: Path) -> dict:
    """Read the folder, analyse, render each format to `out` as the CLI does: seconds and bytes per
    step."""
    from contextlib import nullcontext

    from gpuenv.fleet.collected import read_report_folder
    from gpuenv.fleet.report import write_reports
    from gpuenv.fleet.report.analysis import analyse
    from gpuenv.fleet.report.terminal import render_table
    from validate.judge.peaks import load_peaks

    try:
        from gpuenv.fleet.report import cycles_uncollected  # as gpuenv/cli/fleet.py does
    except ImportError:  # an older checkout (--compare)
        cycles_uncollected = nullcontext
    result: dict = {}
    start, cpu = time.perf_counter(), time.process_time()
    with cycles_uncollected():
        outcomes = read_report_folder(folder)
    with cycles_uncollected():
        fleet = analyse(outcomes, load_peaks(), None)
        readers = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["read+analyse"] = (
            time.perf_counter() - start,
            None,
            time.process_time() - cpu + _children_cpu(),
        )
        _render(fleet, formats, out, result, render_table, write_reports)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["readers"] = _readers(len(outcomes)) if readers.ru_maxrss else 0
    result["reader_peak_mb"] = readers.ru_maxrss / 1024
    import gpuenv

    result["code"] = str(Path(gpuenv.__file__).parent.parent)  # which checkout was measured
    return result


def _readers(files: int) -> int:
    """How many reader processes read_report_folder started (0 for a checkout without them)."""
    from gpuenv.fleet import collected

    most = getattr(collected, "MAX_READERS", 0)
    if files < getattr(collected, "PARALLEL_FROM", files + 1):
        return 0
    return min(len(os.sched_getaffinity(0)), most)


FILES = {"json": ("json_path", "fleet.json"), "junit": ("junit_path", "fleet.xml")}
FILES["html"] = ("html_path", "fleet.html")


def _render(
    fleet: object,
    formats: list[str],
    out: Path,
    result: dict,
    render_table: object,
    write_reports: object,
) -> None:
    """The table, then the files in one write_reports call, as the command does (so a checkout
    that draws the page's plots while it writes the other files is measured doing so); the
    CPU time of the files counts the processes they started."""
    if "table" in formats:
        start, cpu = time.perf_counter(), time.process_time()
        text = render_table(fleet)  # type: ignore[operator]
        (out / "table.txt").write_text(text)
        result["table"] = (time.perf_counter() - start, len(text), time.process_time() - cpu)
    files = {FILES[f][0]: str(out / FILES[f][1]) for f in formats if f in FILES}
    if files:
        start, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
        write_reports(fleet, **files)  # type: ignore[operator]
        result["files"] = (
            time.perf_counter() - start,
            sum(Path(p).stat().st_size for p in files.values()),
            time.process_time() - cpu + _children_cpu() - children,
        )
    result["sizes"] = {f: (out / FILES[f][1]).stat().st_size for f in formats if f in FILES}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _chromium_empty() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "empty.html"
        page.write_text("<!DOCTYPE html><html><body>empty</body></html>\n")
        return chromium_load(page) or 0.0


def chromium_load(page: Path, repeats: int = 3) -> float | None:
    """Seconds headless Chromium takes to open the page and hand back its DOM: the fastest of
    `repeats` tries (other processes on a shared machine only ever add time)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as profile:
            start = time.perf_counter()
            subprocess.run(
                [
                    browser,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                    f"--user-data-dir={profile}",
                    "--dump-dom",
                    page.as_uri(),
                ],
                capture_output=True,
                timeout=900,
                check=False,
            )
            times.append(time.perf_counter() - start)
    return min(times)


def _vs(figure: float, goal: float | None, unit: str, fmt: str = ".1f") -> str:
    if goal is None:
        return f"{figure:{fmt}} {unit} (no goal)"
    return f"{figure:{fmt}} {unit} {'<' if figure < goal else 'NOT <'} {goal:g} {unit}"


def _goal_words(
    hosts: int, total: float, peak: float, page_mb: float | None, opened: float | None
) -> str:
    """Each figure against its goal at this size (_goal)."""
    seconds, mb, page = _goal(hosts)
    words = [
        f"all formats {_vs(total, seconds, 's')}",
        f"peak {_vs(peak, mb, 'MB', '.0f')}" + ("" if hosts in GOALS else " (this machine)"),
    ]
    if page_mb is not None:
        words.append(f"page {_vs(page_mb, page, 'MB')}")
    if opened is not None:
        words.append(f"Chromium {_vs(opened, CHROMIUM_GOAL, 's')}")
    return "; ".join(words)


def _run_one(code: Path, folder: Path, out: Path, formats: list[str]) -> dict | str:
    env = {**os.environ, "PYTHONPATH": str(code) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        run = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--one",
                str(folder),
                str(out),
                ",".join(formats),
            ],
            stdout=stdout,
            stderr=stderr,
            text=True,
            env=env,
            cwd=code,
        )
        pss = _sample_pss(run)
        stdout.seek(0)
        stderr.seek(0)
        if run.returncode != 0:
            return f"failed: {stderr.read().strip().splitlines()[-1:]}"
        result = json.loads(stdout.read().strip().splitlines()[-1])
    result["tree_pss_mb"] = pss
    return result


#: How often the measured process tree's memory is sampled (seconds).
PSS_EVERY_S = 0.2


def _sample_pss(run: subprocess.Popen) -> float:
    """The largest proportional set size (Pss: each shared page counted once, split between the
    processes that share it) of the process and every process it started (readers, a forked
    writer, the plots' process), summed, sampled every PSS_EVERY_S until it exits, in MB."""
    peak = 0
    while run.poll() is None:
        total = 0
        for pid in _tree(run.pid):
            try:
                with open(f"/proc/{pid}/smaps_rollup") as rollup:
                    total += next(
                        int(line.split()[1]) for line in rollup if line.startswith("Pss:")
                    )
            except (OSError, StopIteration, ValueError):
                continue  # it ended meanwhile
        peak = max(peak, total)
        time.sleep(PSS_EVERY_S)
    return peak / 1024


def _tree(root: int) -> list[int]:
    """root and its descendants, from each thread's /proc/PID/task/TID/children."""
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    todo += [int(child) for child in children.read().split()]
        except OSError:
            continue  # it ended meanwhile
    return tree


def _line(label: str, hosts: int, res: dict, formats: list[str], opened: float | None) -> str:
    steps = [v for k, v in res.items() if k in ("read+analyse", "table", "files")]
    total = sum(v[0] for v in steps)
    total_cpu = sum(v[2] for v in steps)
    cells = []
    for step in ("read+analyse", "table", "files"):
        secs, _, cpu = res.get(step) or (0.0, None, 0.0)
        cells.append(f"{secs:6.2f} ({cpu:6.2f}) s")
    sizes = " ".join(f"{res['sizes'][f] / 1e6:9.2f}" for f in formats if f in FILES)
    page = res["sizes"]["html"] / 1e6 if "html" in res["sizes"] else None
    readers = res.get("readers", 0)
    bound = res["peak_rss_mb"] + readers * res.get("reader_peak_mb", 0)
    peak = res["tree_pss_mb"]
    return (
        f"{label:6} {hosts:>6} "
        + " ".join(f"{c:>17}" for c in cells)
        + f" {sizes} {total:6.1f} ({total_cpu:6.1f}) s {peak:6.0f} MB"
        + (f" {opened:6.1f} s" if opened is not None else "")
        + "\n"
        + " " * 14
        + _goal_words(hosts, total, peak, page, opened)
        + (
            f" [{res['code']}; {readers} readers, each at most {res['reader_peak_mb']:.0f} MB;"
            if readers
            else f" [{res['code']};"
        )
        + f" renderer + readers' RSS {bound:.0f} MB, the files' processes uncounted;"
        + f" load {os.getloadavg()[0]:.1f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,12500,25000")
    parser.add_argument("--formats", default="table,json,junit,html")
    parser.add_argument(
        "--chromium", action="store_true", help="time Chromium opening each HTML page (--dump-dom)"
    )
    parser.add_argument(
        "--no-malformed",
        action="store_true",
        help="no unreadable files (for code that cannot survive one)",
    )
    parser.add_argument(
        "--compare",
        metavar="DIR",
        help="also measure the checkout in DIR, in the same run, just before this one",
    )
    parser.add_argument(
        "--reports-cache",
        metavar="DIR",
        help="keep the generated report folders here and reuse them",
    )
    parser.add_argument(
        "--one", nargs=3, metavar=("FOLDER", "OUT", "FORMATS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        folder, out, formats = args.one
        print(json.dumps(measure(Path(folder), formats.split(","), Path(out))))
        return
    formats = args.formats.split(",")
    codes = ([("before", Path(args.compare).resolve())] if args.compare else []) + [("this", ROOT)]
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; seconds "
        "are wall (CPU) of the process that renders and the processes it starts; 'files' is "
        "JSON, JUnit and HTML written by one write_reports call, as the command does"
    )
    if args.chromium:
        print(
            f"Chromium opening an empty page: {_chromium_empty():.1f} s (its own start, part of "
            "every figure below)"
        )
    print(
        f"{'code':6} {'hosts':>6} {'read+analyse':>17} {'table':>17} {'files':>17} "
        + " ".join(f"{f + ' MB':>9}" for f in formats if f in FILES)
        + f" {'total':>17} {'peak Pss':>9}"
        + (" chromium" if args.chromium else "")
    )
    with tempfile.TemporaryDirectory(prefix="gpuenv-fleet-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            cached = (
                Path(args.reports_cache) / f"reports-{size}{'-clean' if args.no_malformed else ''}"
                if args.reports_cache
                else None
            )
            folder = cached or Path(tmp) / f"reports-{size}"
            if not (cached and (folder / ".complete").is_file()):
                shutil.rmtree(folder, ignore_errors=True)
                make_folder(folder, size, malformed=not args.no_malformed)
                if cached:
                    (folder / ".complete").write_text("")
            for label, code in codes:
                out = Path(tmp) / f"out-{size}-{label}"
                out.mkdir()
                res = _run_one(code, folder, out, formats)
                if isinstance(res, str):
                    print(f"{label:6} {size:>6} {res}", flush=True)
                    continue
                opened = (
                    chromium_load(out / "fleet.html")
                    if args.chromium and "html" in formats
                    else None
                )
                print(_line(label, size, res, formats, opened), flush=True)
                shutil.rmtree(out)
            if not cached:
                shutil.rmtree(folder)


if __name__ == "__main__":
    main()
