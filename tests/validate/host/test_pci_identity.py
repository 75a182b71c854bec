"""Identity by PCI device id first, name second (issue 34 item 3), on captures, recordings and
NVML's answers, and a driver too old for every framework build failing the run (item 4), from
SYNTHETIC variants of real captures (tests/validate/pci_variants.py says each edit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pci_variants as v
import pytest

from validate.host import nvml
from validate.host.archs import (
    ARCHS_FILE,
    ArchsFileError,
    chip_families,
    identify,
    identity_text,
    load_archs,
)
from validate.host.capture import parse_capture
from validate.host.pci_ids import PCI_IDS_FILE, device_id_of, load_pci_ids
from validate.host.replay import RecordingNvml, ReplayNvml

REPO = Path(__file__).resolve().parents[3]


def replayed(text: str) -> nvml.HostInfo:
    return nvml.read_host(ReplayNvml(parse_capture(text, "synthetic")))


def test_every_spelling_of_the_combined_id_gives_the_device():
    assert device_id_of("0x233010DE") == 0x2330  # nvidia-smi -q, new XML
    assert device_id_of("20B010DE") == 0x20B0  # older XML
    assert device_id_of(0x218410DE) == 0x2184  # NVML's pciDeviceId
    assert (
        device_id_of("0x12348086") is None
        and device_id_of("N/A") is None
        and device_id_of(None) is None
    )


def test_driver_418_graphics_device_is_a_gtx_1660_by_its_id():
    gpu = replayed(v.text_driver418_gtx1660()).gpus[0]
    assert (gpu.name, gpu.pci_device_id, gpu.compute_capability) == (
        "Graphics Device",
        0x2184,
        "7.5",
    )
    assert identity_text(gpu.name, gpu.compute_capability, pci_device_id=gpu.pci_device_id) == (
        "GeForce GTX 1660 (PCI 10de:2184): Turing, cc 7.5 (unconfirmed)"
    )


@pytest.mark.parametrize(
    "name, device_id, expected",
    [
        ("GRID P4-1Q", "1BB310DE", "Tesla P4 (PCI 10de:1bb3): Pascal, cc 6.1"),
        ("GRID V100D-8C", "1DB610DE", "Tesla V100 PCIe 32GB (PCI 10de:1db6): Volta, cc 7.0"),
        ("NVIDIA RTXA6000-24Q", "223010DE", "RTX A6000 (PCI 10de:2230): Ampere, cc 8.6"),
        ("GRID P4-1Q", None, "vGPU profile of Tesla P4: Pascal, cc 6.1 (unconfirmed)"),
        ("GRID V100D-8C", None, "vGPU profile of Tesla V100: Volta, cc 7.0 (unconfirmed)"),
        (
            "NVIDIA RTXA6000-24Q",
            None,
            "vGPU profile of NVIDIA RTX A6000: Ampere, cc 8.6 (unconfirmed)",
        ),
        ("NVIDIA GeForce GT 1030", "1D0110DE", "Pascal, cc 6.1 (unconfirmed)"),
    ],
)
def test_vgpu_profiles_and_the_gt_1030_replay_with_a_compute_capability(name, device_id, expected):
    gpu = replayed(v.xml_gpu(name, device_id)).gpus[0]
    assert gpu.compute_capability == expected.split("cc ")[1].split()[0]
    assert identity_text(
        gpu.name, gpu.compute_capability, pci_device_id=gpu.pci_device_id
    ).startswith(expected)


def test_the_id_wins_over_a_name_that_names_another_product():
    """A capture whose name and id disagree is identified by the id: the hardware's word."""
    gpu = replayed(v.xml_gpu("NVIDIA A100-SXM4-40GB", "218410DE")).gpus[0]
    assert gpu.compute_capability == "7.5"


def test_nvml_answers_carry_the_id_through_a_recording():
    """Live NVML gives nvmlDeviceGetPciInfo().pciDeviceId; the recorder keeps it, replay reads
    it."""
    recording = {
        "format": "gpuenv-nvml-recording/1",
        "source": "recorded",
        "system": {"nvmlDeviceGetCount": 1},
        "devices": [
            {
                "nvmlDeviceGetName": "Graphics Device",
                "nvmlDeviceGetUUID": "GPU-1",
                "nvmlDeviceGetPciInfo": {"busId": "00000000:01:00.0", "pciDeviceId": 0x218410DE},
            }
        ],
    }
    recorder = RecordingNvml(ReplayNvml(recording))
    gpu = nvml.read_host(recorder).gpus[0]
    assert gpu.pci_device_id == 0x2184 and gpu.pci_bus_id == "00000000:01:00.0"
    again = nvml.read_host(ReplayNvml(recorder.recording())).gpus[0]
    assert again.pci_device_id == 0x2184


def test_the_table_is_cited_licensed_and_covers_the_issue_cases():
    table = load_pci_ids()
    assert table.version == "2026.08.22"
    assert {0x2184, 0x1D01, 0x1BB3, 0x1DB6, 0x2230, 0x2330, 0x2901}.issubset(table.products)
    assert all(
        p.source == f"https://pci-ids.ucw.cz/read/PC/10de/{d:04x}"
        for d, p in table.products.items()
    )
    assert not table.products[
        0x1E30
    ].confirmed  # "Quadro RTX 6000/8000": pci.ids names two products
    notice = (PCI_IDS_FILE.parent / "PCI_IDS_NOTICE").read_text(encoding="utf-8")
    assert "3-clause BSD License" in notice and "GNU General Public License text" not in notice


def test_the_generator_reproduces_the_table_from_pci_ids(tmp_path):
    """scripts/pci_ids.py on a pci.ids excerpt: GPUs kept, audio/NVSwitch/other vendors left out."""
    excerpt = (
        "#\tVersion: 2026.08.22\n#\tDate:    2026-08-22 03:15:01\n"
        "10de  NVIDIA Corporation\n\t10f8  TU104 HD Audio Controller\n"
        "\t2184  TU116 [GeForce GTX 1660]\n"
        "\t22a3  GH100 [H100 NVSwitch]\n\t1e30  TU102GL [Quadro RTX 6000/8000]\n"
        "\t\t10de 129e  Quadro RTX 8000\n"
        "10df  Emulex Corporation\n\t2184  Something [Not NVIDIA]\n"
    )
    (tmp_path / "pci.ids").write_text(excerpt, encoding="utf-8")
    out = tmp_path / "pci_ids.yaml"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "pci_ids.py"),
            str(tmp_path / "pci.ids"),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    table = load_pci_ids(out)
    assert sorted(table.products) == [0x1E30, 0x2184]
    assert (
        table.products[0x2184].name == "GeForce GTX 1660" and not table.products[0x1E30].confirmed
    )


def test_a_driver_older_than_every_framework_build_fails_the_replay(tmp_path):
    capture = tmp_path / "gtx1660-418.txt"
    capture.write_text(v.text_driver418_gtx1660(), encoding="utf-8")
    env = {
        k: val
        for k, val in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            str(capture),
            "-k",
            "test_driver or identity",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout[-3000:]
    assert (
        "FAIL driver version [host]: 418.67 driver 418.67 runs no PyTorch or TensorFlow build "
        "gpuenv supports" in out
    )
    assert "the oldest that does is 450.80.02" in out
    assert "unknown product" not in out


@pytest.mark.parametrize(
    "device_id, cc",
    [
        (0x2329, "9.0"),  # H20: a GH100, as the H100 NVIDIA's table lists
        (0x20F5, "8.0"),  # A800 80GB PCIe: GA100
        (0x26B7, "8.9"),  # L20: AD102
        (0x1BB4, "6.1"),  # Tesla P6: GP104
    ],
)
def test_a_product_nvidias_table_omits_takes_its_dies_compute_capability_unconfirmed(device_id, cc):
    known = identify("Graphics Device", device_id).known
    assert (known.compute_capability, known.confirmed) == (cc, False)
    assert known.source.startswith("derived: the ")


def test_the_rtx_3050_a_laptop_gpu_is_ada_by_its_dies_not_ampere_by_its_name():
    """pci.ids puts "GeForce RTX 3050 A Laptop GPU" on AD106M and AD107M, Ada dies: its own entry
    (8.9, unconfirmed: NVIDIA's table lists no such product) wins over the "GeForce RTX 3050"
    prefix of NVIDIA's 8.6 row, which the Ampere parts keep."""
    for device_id in (0x2822, 0x28A3, 0x28E3):
        known = identify("", device_id).known
        assert (known.compute_capability, known.confirmed) == ("8.9", False), hex(device_id)
        assert "AD106M" in known.source
    assert identify("NVIDIA GeForce RTX 3050 A Laptop GPU").known.compute_capability == "8.9"
    ampere = identify("NVIDIA GeForce RTX 3050 Laptop GPU").known
    assert (ampere.compute_capability, ampere.confirmed) == ("8.6", True)
    assert chip_families(load_archs())["AD106"].compute_capability == "8.9"


def test_a_die_carrying_two_compute_capabilities_settles_nothing(tmp_path):
    """Without that entry the name reads as Ampere 8.6 on an Ada die: the die then carries two
    compute capabilities, so nothing is derived from it and the name's answer is unconfirmed."""
    text = ARCHS_FILE.read_text()
    start = text.index('    nvml_names: ["NVIDIA GeForce RTX 3050 A Laptop GPU"]')
    start = text.rindex("  - architecture:", 0, start)
    end = text.index("  - architecture:", start + 1)
    without = tmp_path / "gpu_archs.yaml"
    without.write_text(text[:start] + text[end:])
    table = load_archs(without)
    known = identify("", 0x2822, table=table).known
    assert (known.compute_capability, known.confirmed) == ("8.6", False)
    assert "also carries another compute capability" in known.source
    assert chip_families(table)["AD106"] is None
    assert identify("", 0x2330, table=table).known.confirmed  # H100 SXM5: NVIDIA's table lists it


#: The ids from Maxwell on that stay unknown, each with why: none is a product a server or a
#: workstation holds. Any other unknown id fails the guard below, and so does one of these once
#: it is identified (then it leaves this list).
UNKNOWN_NON_PRODUCTS = {
    0x2186: 'TU116 "PG160 SKU18": a board and SKU code, no product name',
    0x2980: 'GB102 "Reserved Dev ID A": a reserved engineering id',
    0x29C0: 'GB102 "Reserved Dev ID B": a reserved engineering id',
    0x29BB: 'GB102 "DRIVE P2021": NVIDIA DRIVE, an automotive computer, not a card in a server'
    " (https://developer.nvidia.com/drive)",
}


def test_every_nvidia_gpu_id_from_maxwell_on_is_identified_but_the_listed_non_products():
    """A guard on coverage: every consumer, workstation and data-center product in the PCI table
    has a compute capability (cited, or derived and unconfirmed); the unknown ids are exactly
    the listed engineering ids and embedded modules."""
    table = load_pci_ids()
    modern = [d for d, p in table.products.items() if not p.chip.startswith("GK")]
    unknown = {d: table.products[d].name for d in modern if identify("", d).known is None}
    unexpected = {f"{d:04x}": name for d, name in unknown.items() if d not in UNKNOWN_NON_PRODUCTS}
    assert not unexpected, f"products with no compute capability: {unexpected}"
    assert set(unknown) == set(UNKNOWN_NON_PRODUCTS), "identified now: drop from the list"


@pytest.mark.parametrize(
    "device_id, cc, confirmed",
    [
        (0x2838, "8.9", False),  # RTX 3000 Ada Generation Laptop GPU (AD106GLM): not on the table
        (0x2878, "8.9", False),  # RTX 3000 Ada Generation Embedded GPU (AD106GLM)
        (0x28B9, "8.9", False),  # RTX 1000 Ada Generation Laptop GPU (AD107GLM)
        (0x28BA, "8.9", False),  # RTX 500 Ada Generation Laptop GPU (AD107GLM)
        (0x28BB, "8.9", False),  # the same product's second id
        (0x28B0, "8.9", False),  # "RTX 2000 / 2000E Ada Generation": by its pci_names alias
        (0x29BC, "10.0", False),  # B100 (GB102): not on the table, B200's 10.0
        (0x2189, "7.5", False),  # CMP 30HX (TU116): Turing, the GTX 1660's die
        (0x2B00, "11.0", True),  # Jetson AGX Thor: its T5000 module is on the table
    ],
)
def test_ada_laptop_parts_b100_cmp_30hx_and_thor_are_identified_by_their_id(
    device_id, cc, confirmed
):
    """Workstation laptops and embedded boards, a data-center GPU and a mining card: no longer
    "unknown product"; where NVIDIA's table omits them, derived from the die and unconfirmed."""
    known = identify("Graphics Device", device_id).known
    assert known is not None and (known.compute_capability, known.confirmed) == (cc, confirmed)
    assert "https://" in known.source


def test_a_pci_name_alias_is_exact():
    """pci_names is an explicit list, not a fuzzy match: only the whole pci.ids name matches."""
    table = load_archs()
    assert table.get("RTX 2000 / 2000E Ada Generation").compute_capability == "8.9"
    assert table.get("RTX 2000 / 2000E") is None
    assert table.get("RTX 2000 / 2000E Ada Generation Laptop GPU") is None


def test_an_alias_that_is_not_a_list_is_refused_naming_the_entry(tmp_path):
    bad = tmp_path / "gpu_archs.yaml"
    bad.write_text(
        'gpus:\n  - architecture: Ada Lovelace\n    compute_capability: "8.9"\n'
        '    products: []\n    nvml_names: []\n    pci_names: "RTX 2000 / 2000E Ada Generation"\n'
        "    source: https://developer.nvidia.com/cuda-gpus\n",
        encoding="utf-8",
    )
    with pytest.raises(ArchsFileError, match="entry 1: pci_names must be a list"):
        load_archs(bad)


@pytest.mark.parametrize(
    "device_id, cc, confirmed",
    [
        (0x1347, "5.0", True),  # GeForce 940M (GM108M): on NVIDIA's legacy table
        (0x139B, "5.0", True),  # GeForce GTX 960M (GM107M)
        (0x13D7, "5.2", True),  # GeForce GTX 980M (GM204M)
        (0x134B, "5.0", False),  # GeForce 940MX: not on the table, its die GM108 as the 940M
        (0x174D, "5.0", False),  # GeForce MX130 (GM108M), the same
    ],
)
def test_maxwell_notebook_gpus_are_identified_by_their_id(device_id, cc, confirmed):
    """A laptop's GPU (a consumer product) is no longer "unknown product"."""
    known = identify("Graphics Device", device_id).known
    assert known is not None and (known.compute_capability, known.confirmed) == (cc, confirmed)


CAPTURES = sorted((REPO / "tests" / "validate" / "captures").glob("nvidia-smi-*/*.*[lt]"))


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_on_every_real_capture_the_id_and_the_name_agree(path):
    """Real captures name their GPUs well: identity by id must give what the name gives."""
    from validate.host.archs import compute_capability_for

    for gpu in nvml.read_host(
        ReplayNvml(parse_capture(path.read_text(encoding="utf-8"), path.name))
    ).gpus:
        assert gpu.pci_device_id is not None, gpu.name
        assert gpu.compute_capability == compute_capability_for(gpu.name).compute_capability
