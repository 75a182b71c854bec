"""SYNTHETIC hosts for issue 34: real captures (tests/validate/captures/, see its README) changed
by one documented edit each, for what no public capture with a licence we may copy shows: a GPU
busy with work no process list names, a desktop whose processes hold most of the memory, vGPU
guests (licensed or not), a vGPU hypervisor, a capture cut short and an excerpt.

The spellings an edit introduces are those nvidia-smi prints, as public pastes show them (cited,
not copied: their licences are unknown):
- "GPU Virtualization Mode / Virtualization Mode : VGPU", "vGPU Software Licensed Product /
  Product Name : NVIDIA RTX Virtual Workstation / License Status : Unlicensed", later
  "Unlicensed (Unrestricted)", of an RTXA6000-24Q guest on driver 535.183.06 (a public README
  on CUDA errors in a vGPU VM); "Licensed (Expiry: 2024-10-19 6:51:17 GMT)" (a university's
  public vGPU how-to); the XML tags `<vgpu_software_licensed_product>`, `<licensed_product_name>`,
  `<license_status>` and `<gpu_virtualization_mode><virtualization_mode>`, `<host_vgpu_mode>`;
- "Virtualization Mode : Host VGPU", "Host VGPU Mode : Non SR-IOV" and "CUDA Version : Not
  Found" of a vGPU host on driver 525.147.01 (akb486/vgpu's README).
"""

from __future__ import annotations

import re
from pathlib import Path

from host_variants import A100_XML, CAPTURES, H100_TEXT, H100_XML, _one, _read

DESKTOP_TEXT = (
    CAPTURES / "nvidia-smi-text" / "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"
)


def foreign_work_xml(
    util: int = 65, used_mib: int = 26624, reserved: bool = True, path: Path = A100_XML
) -> str:
    """The A100 capture (40 GiB, no process) at `util`% with `used_mib` MiB in use and still no
    process listed: another container's or VM's work. Without `reserved`, the "Reserved" line
    is dropped, as drivers that print only NVML's version-1 figures do."""
    text = _one(r"<gpu_util>\d+ %", f"<gpu_util>{util} %", _read(path))
    text = _one(
        r"(<fb_memory_usage>\s*<total>[^<]*</total>\s*(?:<reserved>[^<]*</reserved>\s*)?<used>)[^<]*",
        rf"\g<1>{used_mib} MiB",
        text,
    )
    return text if reserved else _one(r"\s*<reserved>[^<]*</reserved>", "", text)


def foreign_work_text(util: int = 65, used_mib: int = 73728) -> str:
    """The H100 text capture (80 GB, "Processes : None") at `util`% with `used_mib` MiB used."""
    text = _one(
        r"(    Utilization\n        (?:Gpu|GPU) +: )\d+ %", rf"\g<1>{util} %", _read(H100_TEXT)
    )
    return _one(
        r"(    FB Memory Usage\n(?:[^\n]*\n){2}        Used +: )\d+ MiB",
        rf"\g<1>{used_mib} MiB",
        text,
    )


def desktop_full(total_mib: int = 1024, used_mib: int = 807) -> str:
    """The RTX 4080 Super desktop (five compute+graphics and graphics processes listed) as a small
    vGPU desktop profile: `total_mib` MiB of which `used_mib` are in use."""
    text = _one(
        r"(    FB Memory Usage\n        Total +: )\d+ MiB",
        rf"\g<1>{total_mib} MiB",
        _read(DESKTOP_TEXT),
    )
    return _one(
        r"(    FB Memory Usage\n(?:[^\n]*\n){2}        Used +: )\d+ MiB",
        rf"\g<1>{used_mib} MiB",
        text,
    )


def vgpu_guest_text(status: str, product: str = "NVIDIA Virtual Compute Server") -> str:
    """The H100 text capture as a vGPU guest: Virtualization Mode VGPU and the licence section
    nvidia-smi prints under it, with `status` ("Unlicensed (Unrestricted)", "Licensed (Expiry:
    ...)")."""
    text = _one(r"(        Virtualization Mode +: )Pass-Through", r"\g<1>VGPU", _read(H100_TEXT))
    section = (
        "    vGPU Software Licensed Product\n"
        f"        Product Name                                   : {product}\n"
        f"        License Status                                 : {status}\n"
    )
    return _one(r"(        Host VGPU Mode +: N/A\n)", lambda m: m.group(1) + section, text)  # type: ignore[arg-type]


def vgpu_guest_xml(status: str, product: str = "NVIDIA RTX Virtual Workstation") -> str:
    """The A100 capture as a vGPU guest, licence in the XML tags."""
    text = _one(r"<virtualization_mode>Pass-Through", "<virtualization_mode>VGPU", _read(A100_XML))
    section = (
        f"\n\t\t<vgpu_software_licensed_product>\n\t\t\t<licensed_product_name>{product}</licensed_product_name>\n"
        f"\t\t\t<license_status>{status}</license_status>\n\t\t</vgpu_software_licensed_product>"
    )
    return _one(r"(</gpu_virtualization_mode>)", lambda m: m.group(1) + section, text)  # type: ignore[arg-type]


def hypervisor_xml(host_mode: str = "SR-IOV") -> str:
    """The A100 capture as a vGPU hypervisor: Host VGPU mode, and no CUDA ("Not Found")."""
    text = _one(
        r"<virtualization_mode>Pass-Through", "<virtualization_mode>Host VGPU", _read(A100_XML)
    )
    text = _one(r"<host_vgpu_mode>N/A", f"<host_vgpu_mode>{host_mode}", text)
    return _one(r"<cuda_version>[^<]*", "<cuda_version>Not Found", text)


def hypervisor_text(host_mode: str = "Non SR-IOV") -> str:
    """The H100 text capture as a vGPU hypervisor."""
    text = _one(
        r"(        Virtualization Mode +: )Pass-Through", r"\g<1>Host VGPU", _read(H100_TEXT)
    )
    text = _one(r"(        Host VGPU Mode +: )N/A", rf"\g<1>{host_mode}", text)
    return _one(r"(CUDA Version +: )[\d.]+", r"\g<1>Not Found", text)


def cut_short_text(attached: int = 4) -> str:
    """The H100 text capture whose header counts `attached` GPUs; one GPU section follows."""
    return _one(r"(Attached GPUs +: )1", rf"\g<1>{attached}", _read(H100_TEXT))


def cut_short_xml(keep: int = 1, path: Path = H100_XML) -> str:
    """The 8-GPU H100 capture with only its first `keep` GPU sections (header still says 8)."""
    text = _read(path)
    starts = [m.start() for m in re.finditer(r"\t<gpu id=", text)]
    end = text.rindex("</gpu>") + len("</gpu>")
    return text[: starts[keep]] + text[end:]


def excerpt_xml(remap_pending: bool = True) -> str:
    """The A100 capture's `<gpu>` section alone (as pasted into an issue), its row remap pending."""
    text = _read(A100_XML)
    section = text[text.index("<gpu id=") : text.rindex("</gpu>") + len("</gpu>")]
    return (
        section.replace("<remapped_row_pending>No", "<remapped_row_pending>Yes")
        if remap_pending
        else section
    )


def excerpt_text(remap_pending: bool = True, indent: str = "  ") -> str:
    """The H100 text capture's idle GPU section alone, indented as a whole (as pasted into a
    Markdown list), its row remap pending."""
    text = _read(H100_TEXT)
    start = text.index("GPU 00000000:")
    section = text[start : text.index("\n####", start)]
    if remap_pending:
        section = _one(
            r"(    Remapped Rows\n(?:[^\n]*\n){2}        Pending +: )No", r"\g<1>Yes", section
        )
    return "".join(
        indent + line if line.strip() else line for line in section.splitlines(keepends=True)
    )


#: Every variant above by the file name its replay is written to.
CASES = {
    "foreign-xml.xml": foreign_work_xml,
    "foreign-text.txt": foreign_work_text,
    "foreign-no-reserve.xml": lambda: foreign_work_xml(reserved=False),
    "idle-v1-reserve.xml": lambda: foreign_work_xml(util=0, used_mib=518, reserved=False),
    "desktop-full.txt": desktop_full,
    "guest-unlicensed.txt": lambda: vgpu_guest_text("Unlicensed (Unrestricted)"),
    "guest-unlicensed.xml": lambda: vgpu_guest_xml("Unlicensed"),
    "guest-licensed.txt": lambda: vgpu_guest_text("Licensed (Expiry: 2024-10-19 6:51:17 GMT)"),
    "guest-licensed.xml": lambda: vgpu_guest_xml("Licensed (Expiry: 2024-10-19 6:51:17 GMT)"),
    "hypervisor.xml": hypervisor_xml,
    "hypervisor.txt": hypervisor_text,
    "cut-text.txt": cut_short_text,
    "cut-xml.xml": cut_short_xml,
    "excerpt.xml": excerpt_xml,
    "excerpt.txt": excerpt_text,
}
