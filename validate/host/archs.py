"""A GPU's architecture and compute capability by the name NVML or nvidia-smi reports (pure).

Captures do not hold the compute capability, so it comes from gpu_archs.yaml: NVIDIA's table of
CUDA GPUs by product, and exact NVML names the table's names do not cover. A name nothing matches
is unknown, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ARCHS_FILE = Path(__file__).with_name("gpu_archs.yaml")


class ArchsFileError(ValueError):
    """gpu_archs.yaml is malformed; the message names the entry and what it needs."""


@dataclass(frozen=True)
class KnownArch:
    compute_capability: str
    source: str
    architecture: str = ""
    confirmed: bool = True


@dataclass(frozen=True)
class ArchTable:
    """Exact names and product prefixes, both normalised (lower case, no leading "nvidia ")."""

    exact: dict[str, KnownArch]
    products: tuple[tuple[str, KnownArch], ...]  # longest first
    legacy: tuple[tuple[str, tuple[str, ...], str, str], ...] = ()  # (architecture, its ccs, last driver branch, last CUDA)

    def get(self, name: str, default: KnownArch | None = None) -> KnownArch | None:
        return lookup(name, self) or default


def normalise(name: str) -> str:
    """'NVIDIA  A100-SXM4-40GB ' -> 'a100-sxm4-40gb': drivers before ~470 omit "NVIDIA "."""
    text = re.sub(r"\s+", " ", name.strip().lower())
    return text.removeprefix("nvidia ")


def lookup(name: str, table: ArchTable) -> KnownArch | None:
    """The entry for a reported name: an exact NVML name, else the longest product it starts with
    (followed by the end, a space or a hyphen)."""
    key = normalise(name)
    if key in table.exact:
        return table.exact[key]
    for product, known in table.products:
        if key == product or (key.startswith(product) and key[len(product)] in " -"):
            return known
    return None


def _entry(number: int, entry: dict, path: Path) -> tuple[KnownArch, list[str], list[str]]:
    names, products = entry.get("nvml_names", []), entry.get("products", [])
    cc, source, arch = entry.get("compute_capability"), entry.get("source"), entry.get("architecture")
    if not isinstance(names, list) or not isinstance(products, list) or not (names or products):
        raise ArchsFileError(f"{path}: entry {number} needs products or nvml_names (lists)")
    if not isinstance(cc, str) or not re.match(r"^\d+\.\d+$", cc) or not source or not arch:
        raise ArchsFileError(f"{path}: entry {number} needs architecture, compute_capability (\"X.Y\") and source")
    confirmed = entry.get("confirmed", True) not in (False, "false")
    return KnownArch(cc, str(source), str(arch), confirmed), [str(n) for n in names], [str(p) for p in products]


@lru_cache(maxsize=4)
def load_archs(path: Path = ARCHS_FILE) -> ArchTable:
    """gpu_archs.yaml as a lookup table; a name listed twice with two answers is an error."""
    from validate.simpleyaml import parse_simple_yaml

    exact: dict[str, KnownArch] = {}
    products: dict[str, KnownArch] = {}
    data = parse_simple_yaml(path.read_text(encoding="utf-8"))
    for number, entry in enumerate(data.get("gpus", []), start=1):
        known, names, prods = _entry(number, entry, path)
        for store, keys in ((exact, names), (products, prods)):
            for key in map(normalise, keys):
                if key in store and store[key] != known:
                    raise ArchsFileError(f"{path}: {key!r} is listed twice with different answers (entry {number})")
                store[key] = known
    ordered = tuple(sorted(products.items(), key=lambda item: -len(item[0])))
    return ArchTable(exact, ordered, _legacy(data.get("legacy", []), path))


def _legacy(entries: list, path: Path) -> tuple[tuple[str, tuple[str, ...], str, str], ...]:
    """Per compute capability, since one architecture's members lose CUDA at different releases
    (Kepler 3.0 after CUDA 10.2, 3.5 and 3.7 after 11.8)."""
    out = []
    for number, entry in enumerate(entries, start=1):
        arch, branch, cuda = entry.get("architecture"), entry.get("last_driver_branch"), entry.get("last_cuda")
        ccs = entry.get("compute_capabilities")
        if (not arch or not re.match(r"^\d{3}$", str(branch)) or not re.match(r"^\d+\.\d+$", str(cuda)) or not entry.get("source")
                or not isinstance(ccs, list) or not ccs or not all(re.match(r"^\d+\.\d+$", str(c)) for c in ccs)):
            raise ArchsFileError(f"{path}: legacy entry {number} needs architecture, compute_capabilities ([\"3.5\"]), "
                                 "last_driver_branch (\"470\"), last_cuda (\"11.8\") and source")
        out.append((str(arch), tuple(str(c) for c in ccs), str(branch), str(cuda)))
    return tuple(out)


def compute_capability_for(product_name: str, table: ArchTable | None = None) -> KnownArch | None:
    """The compute capability of a product NVML names, or None: unknown, never guessed."""
    return lookup(product_name, table if table is not None else load_archs())


def identity_text(name: str, compute_capability: str | None, table: ArchTable | None = None) -> str:
    """'Hopper, cc 9.0' for the identity row, or what to do when the product is unknown."""
    table = table if table is not None else load_archs()
    known = compute_capability_for(name, table)
    if known is not None:
        note = "" if known.confirmed else " (unconfirmed)"
        cc = compute_capability or known.compute_capability
        legacy = next((f": legacy, last driver branch R{b}, last CUDA {c}" for a, ccs, b, c in table.legacy
                       if a == known.architecture and cc in ccs), "")
        return f"{known.architecture}, cc {cc}{note}{legacy}"
    if compute_capability:
        return f"cc {compute_capability} (product not in validate/host/gpu_archs.yaml)"
    return "unknown product: compute capability not reported; add it to validate/host/gpu_archs.yaml from https://developer.nvidia.com/cuda-gpus"
