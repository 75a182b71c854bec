"""The compatibility data as tables for people (`invoke matrix`)."""

from __future__ import annotations

from gpuenv.compat import Matrix, version_key as V
from validate.tables import format_table


def format_matrix(m: Matrix) -> str:
    parts = [f"Compatibility data: {m.path}", ""]
    parts.append("CUDA releases")
    rows = []
    for c in sorted(m.cuda_releases, key=lambda c: V(c.minor)):
        image = m.image(c.latest_patch)
        ubuntu = ", ".join(image.ubuntu) if image else "-"
        cudnn = image.cudnn.tag if image and image.cudnn else "-"
        rows.append((c.minor, c.latest_patch, c.min_driver, ubuntu, cudnn))
    parts.append(format_table(("cuda", "image", "min driver", "ubuntu", "cudnn tag"), rows))
    parts.append("")
    parts.append("Minor-version compatibility")
    parts.append(format_table(("major", "min driver", "limits"), [(m_.major, m_.minor_compat_min_driver, m_.limits) for m_ in m.cuda_majors]))
    parts.append("")
    parts.append("PyTorch")
    rows = []
    for t in sorted(m.torch_releases, key=lambda t: V(t.series), reverse=True):
        variants = " ".join(v.name for v in t.variants)
        rows.append((t.series, " ".join(t.patches), " ".join(t.python), t.pypi_default_cuda or "-", variants))
    parts.append(format_table(("series", "patches", "python", "pypi cuda", "wheel variants"), rows))
    parts.append("")
    parts.append("TensorFlow")
    rows = [(t.series, " ".join(t.patches), t.cuda, t.cudnn, " ".join(t.python)) for t in sorted(m.tensorflow_releases, key=lambda t: V(t.series), reverse=True)]
    parts.append(format_table(("series", "patches", "cuda", "cudnn", "python"), rows))
    parts.append("")
    parts.append("GPU architectures")
    rows = [(a.name, " ".join(a.compute_capabilities), a.first_cuda, a.last_cuda or "-") for a in m.gpu_architectures]
    parts.append(format_table(("family", "compute capability", "first cuda", "last cuda"), rows))
    return "\n".join(parts)
