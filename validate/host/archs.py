"""A GPU's architecture and compute capability by its PCI device id first, then the name NVML or
nvidia-smi reports (pure).

Captures do not hold the compute capability, so it comes from gpu_archs.yaml: NVIDIA's table of
CUDA GPUs by product, and exact NVML names the table's names do not cover. The product comes from
the PCI device id where there is one (pci_ids.yaml): a driver may call a GTX 1660 "Graphics
Device", a vGPU guest names its profile ("GRID P4-1Q"). A vGPU profile without an id maps to its
physical GPU by the profile's board (gpu_archs.yaml's vgpu_boards). Nothing matched is unknown,
never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

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
    legacy: tuple[
        tuple[str, tuple[str, ...], str, str], ...
    ] = ()  # (architecture, its ccs, last driver branch, last CUDA)
    vgpu_boards: tuple[tuple[str, str, str], ...] = ()  # (board, product, source), board normalised

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
    """One gpus entry: its answer, its exact names (nvml_names, and pci_names: how pci.ids names
    a product whose name no product prefix matches, "RTX 2000 / 2000E Ada Generation"), and
    its product prefixes."""
    names, products = entry.get("nvml_names", []), entry.get("products", [])
    pci_names = entry.get("pci_names", [])
    if not isinstance(pci_names, list):
        raise ArchsFileError(f"{path}: entry {number}: pci_names must be a list")
    cc, source, arch = (
        entry.get("compute_capability"),
        entry.get("source"),
        entry.get("architecture"),
    )
    if (
        not isinstance(names, list)
        or not isinstance(products, list)
        or not (names or products or pci_names)
    ):
        raise ArchsFileError(
            f"{path}: entry {number} needs products, nvml_names or pci_names (lists)"
        )
    if not isinstance(cc, str) or not re.match(r"^\d+\.\d+$", cc) or not source or not arch:
        raise ArchsFileError(
            f'{path}: entry {number} needs architecture, compute_capability ("X.Y") and source'
        )
    confirmed = entry.get("confirmed", True) not in (False, "false")
    return (
        KnownArch(cc, str(source), str(arch), confirmed),
        [str(n) for n in names + pci_names],
        [str(p) for p in products],
    )


@lru_cache(maxsize=4)
def load_archs(path: Path = ARCHS_FILE) -> ArchTable:
    """gpu_archs.yaml as a lookup table; a name listed twice with two answers is an error."""
    from validate.simpleyaml import load_table

    exact: dict[str, KnownArch] = {}
    products: dict[str, KnownArch] = {}
    data = load_table(path)
    for number, entry in enumerate(data.get("gpus", []), start=1):
        known, names, prods = _entry(number, entry, path)
        for store, keys in ((exact, names), (products, prods)):
            for key in map(normalise, keys):
                if key in store and store[key] != known:
                    raise ArchsFileError(
                        f"{path}: {key!r} is listed twice with different answers (entry {number})"
                    )
                store[key] = known
    ordered = tuple(sorted(products.items(), key=lambda item: -len(item[0])))
    legacy = _legacy(data.get("legacy", []), path)
    return ArchTable(exact, ordered, legacy, _boards(data.get("vgpu_boards", []), path))


def _boards(entries: list, path: Path) -> tuple[tuple[str, str, str], ...]:
    out = []
    for number, entry in enumerate(entries, start=1):
        board, product, source = entry.get("board"), entry.get("product"), entry.get("source")
        if not board or not product or not source:
            raise ArchsFileError(
                f"{path}: vgpu_boards entry {number} needs board, product and source"
            )
        out.append((str(board).lower(), str(product), str(source)))
    return tuple(out)


def _legacy(entries: list, path: Path) -> tuple[tuple[str, tuple[str, ...], str, str], ...]:
    """Per compute capability, since one architecture's members lose CUDA at different releases
    (Kepler 3.0 after CUDA 10.2, 3.5 and 3.7 after 11.8)."""
    out = []
    for number, entry in enumerate(entries, start=1):
        arch, branch, cuda = (
            entry.get("architecture"),
            entry.get("last_driver_branch"),
            entry.get("last_cuda"),
        )
        ccs = entry.get("compute_capabilities")
        if (
            not arch
            or not re.match(r"^\d{3}$", str(branch))
            or not re.match(r"^\d+\.\d+$", str(cuda))
            or not entry.get("source")
            or not isinstance(ccs, list)
            or not ccs
            or not all(re.match(r"^\d+\.\d+$", str(c)) for c in ccs)
        ):
            raise ArchsFileError(
                f"{path}: legacy entry {number} needs architecture, compute_capabilities "
                '(["3.5"]), last_driver_branch ("470"), last_cuda ("11.8") and source'
            )
        out.append((str(arch), tuple(str(c) for c in ccs), str(branch), str(cuda)))
    return tuple(out)


def compute_capability_for(product_name: str, table: ArchTable | None = None) -> KnownArch | None:
    """The compute capability of a product NVML names, or None: unknown, never guessed."""
    return lookup(product_name, table if table is not None else load_archs())


#: A vGPU profile name: "grid p4-1q", "v100d-8c", "rtxa6000-24q" (normalised), board first.
_VGPU_PROFILE = re.compile(r"^(?:grid )?(?:rtx )?(?P<board>[a-z0-9]+)-\d+[a-z]\d*$")


@dataclass(frozen=True)
class Identity:
    """What a GPU is: its entry in gpu_archs.yaml (None: unknown) and, when the reported name did
    not give it, the product that did and how ("PCI 10de:2184", "vGPU profile of Tesla P4")."""

    known: KnownArch | None
    product: str | None = None
    how: str = "name"  # "pci id", "vgpu profile" or "name"


def vgpu_board(name: str, table: ArchTable) -> tuple[str, str] | None:
    """(physical product, source) of a vGPU profile name, or None when it is not one we know."""
    match = _VGPU_PROFILE.match(normalise(name))
    if match is None:
        return None
    wanted = match.group("board")
    return next(((p, source) for board, p, source in table.vgpu_boards if board == wanted), None)


def chip_family(chip: str) -> str:
    """The die a pci.ids chip name is a variant of: 'GA102GL' (workstation), 'GP107M' (mobile),
    'GP104BM', 'GK110BGL' -> 'GA102', 'GP107', 'GP104', 'GK110'; 'GA10B' (a die of its own)
    stays."""
    return re.sub(r"(BGL|GLM|GL|BM|M)$", "", chip)


#: chip_families' answers, computed once per (gpu_archs, pci_ids) table pair.
_FAMILIES: list[tuple[ArchTable, Any, dict[str, KnownArch | None]]] = []


def chip_families(table: ArchTable, pci: Any = None) -> dict[str, KnownArch | None]:
    """Per die, the compute capability of the products NVIDIA's table lists on it (confirmed
    entries only, and only where they all agree): a product of the same die that the table
    does not list ("H800 PCIe" on GH100) has it too, marked unconfirmed with that derivation.
    None for a die whose listed products disagree: nothing is derived from it."""
    from validate.host.pci_ids import load_pci_ids

    for kept_table, kept_pci, families in _FAMILIES:
        if kept_table is table and kept_pci is pci:
            return families
    seen: dict[str, set[tuple[str, str]]] = {}
    example: dict[str, str] = {}
    for product in (pci or load_pci_ids()).products.values():
        known = lookup(product.name, table)
        if known is None or not known.confirmed or not product.confirmed:
            continue
        family = chip_family(product.chip)
        seen.setdefault(family, set()).add((known.compute_capability, known.architecture))
        example.setdefault(family, f"{product.name} ({known.source.split(' ')[0]})")
    out: dict[str, KnownArch | None] = {}
    for family, answers in seen.items():
        out[family] = None
        if len(answers) == 1:
            cc, arch = next(iter(answers))
            source = f"derived: the {family} die, as {example[family]}; pci.ids names the die"
            out[family] = KnownArch(cc, source, arch, confirmed=False)
    _FAMILIES[:] = _FAMILIES[-3:] + [(table, pci, out)]
    return out


def identify(
    name: str, pci_device_id: int | None = None, table: ArchTable | None = None, pci: Any = None
) -> Identity:
    """The PCI device id first (pci_ids.yaml's product, then its compute capability by that
    product's name), then a vGPU profile's board, then the reported name."""
    from validate.host.pci_ids import product_for

    table = table if table is not None else load_archs()
    product = product_for(pci_device_id, pci)
    if product is not None:
        known = lookup(product.name, table)
        if known is not None and not product.confirmed:
            known = KnownArch(known.compute_capability, known.source, known.architecture, False)
        by_name = lookup(name, table)
        if known is None and by_name is not None:  # pci.ids names a product gpu_archs.yaml lacks
            return Identity(by_name)
        family = chip_family(product.chip)
        families = chip_families(table, pci)
        if known is None:
            known = families.get(family)
        elif family in families and families[family] is None and known.confirmed:
            # The die carries products of two compute capabilities ("GeForce RTX 3050 A Laptop
            # GPU" is an AD106, an Ada die): the name alone does not settle this one.
            note = f"{known.source}; but the {family} die also carries another compute capability"
            known = KnownArch(known.compute_capability, note, known.architecture, confirmed=False)
        return Identity(known, product.label, "pci id")
    board = vgpu_board(name, table)
    if board is not None:
        known = lookup(board[0], table)
        if known is not None:
            source = f"{known.source}; vGPU board: {board[1]}"
            known = KnownArch(known.compute_capability, source, known.architecture, False)
        return Identity(known, f"vGPU profile of {board[0]}", "vgpu profile")
    return Identity(lookup(name, table))


def identity_text(
    name: str,
    compute_capability: str | None,
    table: ArchTable | None = None,
    pci_device_id: int | None = None,
) -> str:
    """'Hopper, cc 9.0' for the identity row (with the product when the PCI id or a vGPU profile
    named it), or what to do when the product is unknown."""
    table = table if table is not None else load_archs()
    found = identify(name, pci_device_id, table)
    known = found.known
    # The product is named only where the reported name alone does not identify the GPU.
    named = f"{found.product}: " if found.product and lookup(name, table) is None else ""
    if known is not None:
        note = "" if known.confirmed else " (unconfirmed)"
        cc = compute_capability or known.compute_capability
        legacy = next(
            (
                f": legacy, last driver branch R{b}, last CUDA {c}"
                for a, ccs, b, c in table.legacy
                if a == known.architecture and cc in ccs
            ),
            "",
        )
        return f"{named}{known.architecture}, cc {cc}{note}{legacy}"
    if compute_capability:
        return f"{named}cc {compute_capability} (product not in validate/host/gpu_archs.yaml)"
    if found.product:
        return (
            f"{found.product}: compute capability not in validate/host/gpu_archs.yaml; "
            "add the product there from https://developer.nvidia.com/cuda-gpus"
        )
    return (
        "unknown product: compute capability not reported; add it to "
        "validate/host/gpu_archs.yaml from https://developer.nvidia.com/cuda-gpus"
    )
