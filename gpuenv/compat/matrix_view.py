"""The compatibility data as tables for people (`invoke matrix`), and the drift report
(`--check`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.matrix import version_key as V
from validate.report.tables import format_table

if TYPE_CHECKING:
    from gpuenv.compat.drift import DriftReport

#: How a value that primary sources did not confirm is marked in the tables.
UNCONFIRMED = " (unconfirmed)"


def format_matrix(m: Matrix) -> str:
    parts = [f"Compatibility data: {m.path} (checked against upstream {m.checked})", ""]
    parts.append(
        "CUDA releases (every update and its driver floor; images are the nvidia/cuda tags "
        "listed in the data)"
    )
    rows = []
    for c in sorted(m.cuda_releases, key=lambda c: V(c.minor)):
        for u in c.updates:
            image = m.image(u.version)
            ubuntu = ", ".join(image.ubuntu) if image else "-"
            cudnn = "-"
            if image and image.cudnn:
                cudnn = f"{image.cudnn.tag} ({', '.join(image.cudnn.ubuntu or image.ubuntu)})" + (
                    "" if image.cudnn.confirmed else UNCONFIRMED
                )
            driver = (u.min_driver or "unknown") + ("" if u.confirmed else UNCONFIRMED)
            rows.append(
                (
                    c.minor,
                    u.version,
                    driver,
                    ubuntu + ("" if not image or image.confirmed else UNCONFIRMED),
                    cudnn,
                )
            )
    parts.append(
        format_table(("cuda", "update", "min driver", "image ubuntu", "cudnn images"), rows)
    )
    parts.append("")
    parts.append("Minor-version compatibility")
    parts.append(
        format_table(
            ("major", "min driver", "limits"),
            [(m_.major, m_.minor_compat_min_driver, m_.limits) for m_ in m.cuda_majors],
        )
    )
    parts.append("")
    parts.append("PyTorch")
    rows = []
    for t in sorted(m.torch_releases, key=lambda t: V(t.series), reverse=True):
        variants = " ".join(v.name + ("?" if not v.confirmed else "") for v in t.variants)
        rows.append(
            (
                t.series,
                " ".join(t.patches),
                " ".join(t.python),
                t.pypi_default_cuda or "-",
                variants,
            )
        )
    parts.append(
        format_table(
            ("series", "patches", "python", "pypi cuda", "wheel variants (? unconfirmed)"), rows
        )
    )
    parts.append("")
    parts.append("TensorFlow")
    rows = [
        (
            t.series,
            " ".join(t.patches),
            t.cuda,
            t.cudnn,
            "and-cuda extra" if t.and_cuda else "cudnn image",
            " ".join("sm_" + a.replace(".", "") for a in t.archs),
            "compute_" + t.ptx.replace(".", "") if t.ptx else "-",
            " ".join(t.python),
        )
        for t in sorted(m.tensorflow_releases, key=lambda t: V(t.series), reverse=True)
    ]
    parts.append(
        format_table(
            (
                "series",
                "patches",
                "cuda",
                "cudnn",
                "cuda libraries from",
                "sass (build_info.py)",
                "ptx",
                "python",
            ),
            rows,
        )
    )
    parts += _aarch64_lines(m)
    parts.append("")
    parts.append("GPU architectures")
    rows = [
        (a.name, " ".join(a.compute_capabilities), a.first_cuda, a.last_cuda or "-")
        for a in m.gpu_architectures
    ]
    parts.append(format_table(("family", "compute capability", "first cuda", "last cuda"), rows))
    parts.append("")
    parts.append(
        "First driver branch per GPU (minor-version compatibility cannot make a driver run a "
        "GPU it predates)"
    )
    rows = [
        (
            b.name,
            " ".join(b.compute_capabilities),
            "R" + b.branch + ("" if b.confirmed else UNCONFIRMED),
        )
        for b in m.driver_branches
    ]
    parts.append(format_table(("gpus", "compute capability", "first branch"), rows))
    parts.append("")
    parts.append(f"Integrated GPUs (refused: use {m.jetson_use})")
    parts.append(
        format_table(
            ("module", "compute capability"),
            [(g.name, " ".join(g.compute_capabilities)) for g in m.integrated_gpus],
        )
    )
    parts.append("")
    parts.append("Python releases (the default Python's X.Y.0 is at least six months old)")
    rows = [
        (p.version, p.released.isoformat() + ("" if p.confirmed else UNCONFIRMED))
        for p in m.python_releases
    ]
    parts.append(format_table(("python", "x.y.0 released"), rows))
    return "\n".join(parts)


def _aarch64_lines(m: Matrix) -> list[str]:
    """The linux-aarch64 (Grace) builds: each torch series' own variants with their SASS, and
    TensorFlow's answer there."""
    a = m.aarch64
    if a is None:
        return []
    rows = []
    for t in sorted(a.torch, key=lambda t: V(t.series), reverse=True):
        for v in t.variants:
            sass = " ".join("sm_" + c.replace(".", "") for c in v.archs) or "-"
            where = "PyPI" if v.pypi else f"download.pytorch.org/whl/{v.name}"
            rows.append((t.series, v.name + ("" if v.confirmed else "?"), where, sass))
    return [
        "",
        f"PyTorch on {a.platform} (Grace: {', '.join(a.grace_products)})",
        format_table(("series", "build (? unconfirmed)", "from", "sass"), rows),
        f"TensorFlow on {a.platform}: {a.tf_cpu_requirement} {', '.join(a.tf_series)} (CPU "
        f"builds); GPUs: {a.tf_gpu_use}",
    ]


def format_drift(report: "DriftReport") -> str:
    """The drift report for people: what PyPI knows that the data does not, each with its source
    URL."""
    lines = [f"Compared {report.data_path} (checked {report.checked}) with {report.index}"]
    if report.findings:
        rows = [(f.kind, f.subject, f.data or "-", f.upstream, f.source) for f in report.findings]
        lines.append(format_table(("fact", "subject", "data says", "PyPI says", "source"), rows))
    else:
        lines.append("current: every fact PyPI can give agrees with the data")
    lines.append("")
    lines.append("PyPI cannot give these; they need a curated update when the above changes:")
    lines += [f"  - {item}" for item in report.curated]
    if report.pending:
        lines.append("")
        lines.append(
            f"Open in the data ({len(report.pending)}): facts no primary source confirmed yet"
        )
        rows = [item.split(": ", 1) if ": " in item else (item, "") for item in report.pending]
        lines.append(format_table(("fact", "state"), rows))
    for note in report.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
