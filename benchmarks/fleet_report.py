"""Print what the fleet report costs at 10, 100, 1,000 and 4,000 hosts x 8 GPUs, per format.

The per-host suite reports are synthetic but written by the suite's own writer
(`validate.report.record.build_json`), with a realistic spread: two GPU models, a few percent of noise,
one slow GPU in about 150, a failed check on one host in 100 and one unreadable file in 500. They
go into a folder, one file per host, and are rendered through the `--from-reports` path
(`gpuenv.fleet.collected.read_report_folder`), each size in its own subprocess so that its peak
memory (ru_maxrss) is its own. Optionally times Chromium loading the HTML page.

Goals at 1,000 hosts: every format in under 10 s together, under 500 MB peak, the HTML under 5 MB
and loaded by Chromium in under 5 s; at 4,000 hosts under 40 s.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/fleet_report.py [--sizes 10,100,1000,4000]
     [--formats table,json,junit,html] [--chromium]
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
MODELS = (("NVIDIA H100 80GB HBM3", 700.0, 3000.0, 520.0), ("NVIDIA A100-SXM4-80GB", 250.0, 1700.0, 230.0))


def host_report(rng: random.Random, host: int, gpus: int = 8) -> dict:
    """One host's suite report through the suite's own writer."""
    from validate.report.record import Record, build_json

    name, bf16, bandwidth, sustained = MODELS[0] if host % 3 else MODELS[1]
    infos = [{
        "index": i, "name": name, "uuid": f"GPU-{host:08x}-{i:04x}-4000-8000-{host:08x}{i:04x}",
        "pci_bus_id": f"00000000:{i + 0x18:02X}:00.0", "compute_capability": "9.0" if "H100" in name else "8.0",
        "memory_total_bytes": 85899345920, "memory_used_bytes": 0,
    } for i in range(gpus)]
    records = [
        Record("driver version", None, "550.54.15", "", "info", 0.0, test="checks/test_01_environment.py::test_driver"),
        Record("torch version", None, "2.3.1", "", "info", 0.0, test="checks/test_01_environment.py::test_torch_version"),
        Record("cuda visible devices [torch]", None, "ok", "-", "pass", 1.0, test="checks/test_04_masking.py::test_cuda_visible_devices[torch]"),
    ]
    failed_host = host % 100 == 37
    for info in infos:
        uuid = info["uuid"]
        slow = 0.55 if (host * gpus + info["index"]) % 149 == 5 else 1.0
        b = bf16 * rng.gauss(1.0, 0.02) * slow
        m = bandwidth * rng.gauss(1.0, 0.015)
        s = sustained * rng.gauss(1.0, 0.03) * slow
        records += [
            Record("gpu health", uuid, "ok", "no XID", "pass", 0.0, test="checks/test_01_environment.py::test_gpu_health"),
            Record("torch matmul correct", uuid, "1.0e-06", "relative error <= 0.01", "pass", 0.1, test="checks/test_02_visibility.py::test_torch_computes_on_gpu"),
            Record("tensorflow sees gpu", uuid, "yes", "-", "pass", 0.5, test="checks/test_02_visibility.py::test_tensorflow_sees_gpu"),
            Record("tensorflow memory growth [growth-env]", uuid, "0.5 GiB", "<= 25%", "pass", 2.0, test="checks/test_03_memory.py::test_tensorflow_memory_growth"),
            Record("matmul bf16 TFLOPS", uuid, f"{b:.1f} TFLOPS", ">= 35% of peak", "pass", 1.0, value=round(b, 2), test="checks/test_05_speed.py::test_matmul_throughput"),
            Record("matmul fp32 TFLOPS", uuid, f"{b / 14:.1f} TFLOPS", "-", "not judged", 1.0, value=round(b / 14, 2), test="checks/test_05_speed.py::test_matmul_throughput"),
            Record("device memory GB/s", uuid, f"{m:.1f} GB/s", ">= 60% of peak", "pass", 1.0, value=round(m, 1), test="checks/test_05_speed.py::test_memory_bandwidth"),
            Record("host to device GB/s", uuid, f"{m / 120:.1f} GB/s", "-", "info", 1.0, value=round(m / 120, 2), test="checks/test_05_speed.py::test_pcie_bandwidth"),
            Record("sustained load", uuid, f"{s:.0f} bf16 TFLOPS for 30 s", "", "info", 30.0, value=round(s, 1), test="checks/test_06_sustained.py::test_sustained_load"),
            Record("clock events under load", uuid, "none", "", "pass", 0.0, test="checks/test_06_sustained.py::test_sustained_load"),
            Record("pcie generation under load", uuid, "gen5", ">= gen5", "pass", 0.0, test="checks/test_06_sustained.py::test_sustained_load"),
        ]
    if failed_host:
        records[-2].verdict, records[-2].reason = "fail", "HW_SLOWDOWN during the load"
    host_info = {"driver_version": "550.54.15", "cuda_driver_version": "12.4", "gpus": infos, "error": None}
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


def measure(folder: Path, formats: list[str], out: Path) -> dict:
    """Read the folder, analyse, render each format to `out`: seconds and bytes per step."""
    from gpuenv.fleet.collected import read_report_folder
    from gpuenv.fleet.report import write_reports
    from gpuenv.fleet.report.analysis import analyse
    from gpuenv.fleet.report.terminal import render_table
    from validate.judge.peaks import load_peaks

    result: dict = {}
    start, cpu = time.perf_counter(), time.process_time()
    outcomes = read_report_folder(folder)
    fleet = analyse(outcomes, load_peaks(), None)
    result["read+analyse"] = (time.perf_counter() - start, None, time.process_time() - cpu)
    for fmt in formats:
        start, cpu = time.perf_counter(), time.process_time()
        if fmt == "table":
            path = out / "table.txt"
            text = render_table(fleet)
            path.write_text(text)
        elif fmt == "json":
            path = out / "fleet.json"
            write_reports(fleet, json_path=str(path))
        elif fmt == "junit":
            path = out / "fleet.xml"
            write_reports(fleet, junit_path=str(path))
        else:
            path = out / "fleet.html"
            write_reports(fleet, html_path=str(path))
        result[fmt] = (time.perf_counter() - start, path.stat().st_size, time.process_time() - cpu)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def chromium_load(page: Path) -> float | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                        "--dump-dom", page.as_uri()], capture_output=True, timeout=900, check=False)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,4000")
    parser.add_argument("--formats", default="table,json,junit,html")
    parser.add_argument("--chromium", action="store_true", help="time Chromium loading each HTML page (--dump-dom)")
    parser.add_argument("--no-malformed", action="store_true", help="no unreadable files (for code that cannot survive one)")
    parser.add_argument("--one", nargs=3, metavar=("FOLDER", "OUT", "FORMATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        folder, out, formats = args.one
        print(json.dumps(measure(Path(folder), formats.split(","), Path(out))))
        return
    formats = args.formats.split(",")
    print("seconds are wall (CPU) of this process; the machine may be shared, so CPU time is the fairer figure")
    print(f"{'hosts':>6} {'read+analyse':>15} " + " ".join(f"{f:>26}" for f in formats) + f" {'total':>16} {'peak RSS':>9}"
          + (" chromium" if args.chromium else ""))
    with tempfile.TemporaryDirectory(prefix="gpuenv-fleet-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            folder, out = Path(tmp) / f"reports-{size}", Path(tmp) / f"out-{size}"
            out.mkdir()
            make_folder(folder, size, malformed=not args.no_malformed)
            env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            run = subprocess.run([sys.executable, __file__, "--one", str(folder), str(out), ",".join(formats)],
                                 capture_output=True, text=True, env=env, check=False)
            if run.returncode != 0:
                print(f"{size:>6} failed: {run.stderr.strip().splitlines()[-1:]}")
                continue
            res = json.loads(run.stdout.strip().splitlines()[-1])
            total = sum(v[0] for k, v in res.items() if k != "peak_rss_mb")
            total_cpu = sum(v[2] for k, v in res.items() if k != "peak_rss_mb")
            cells = []
            for fmt in formats:
                secs, size_b, cpu = res[fmt]
                cells.append(f"{secs:6.2f} ({cpu:6.2f}) s {size_b / 1e6:7.2f} MB")
            read = res["read+analyse"]
            line = (f"{size:>6} {read[0]:5.2f} ({read[2]:5.2f}) s " + " ".join(f"{c:>26}" for c in cells)
                    + f" {total:6.1f} ({total_cpu:6.1f}) s {res['peak_rss_mb']:6.0f} MB")
            if args.chromium and "html" in formats:
                load = chromium_load(out / "fleet.html")
                line += f" {load:6.1f} s" if load is not None else "   (no chromium)"
            print(line, flush=True)
            shutil.rmtree(folder)
            shutil.rmtree(out)


if __name__ == "__main__":
    main()
