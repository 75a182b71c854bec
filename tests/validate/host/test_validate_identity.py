"""Every name in validate/host/gpu_archs.yaml identifies its own entry, and products that were
missing (GeForce GTX 16xx, RTX A5500/A4500/A1000/A400, Tesla M10/M6/M4) replay with their compute
capability from SYNTHETIC variants of the real A100 capture (only the product name changes)."""

from __future__ import annotations

import host_variants as v
import pytest

from validate.host import nvml
from validate.host.archs import ARCHS_FILE, compute_capability_for, identity_text
from validate.host.capture import parse_capture
from validate.host.replay import ReplayNvml
from validate.simpleyaml import parse_simple_yaml

ENTRIES = parse_simple_yaml(ARCHS_FILE.read_text(encoding="utf-8"))["gpus"]
NAMES = [
    (name, entry)
    for entry in ENTRIES
    for name in [*entry.get("products", []), *entry.get("nvml_names", [])]
]


@pytest.mark.parametrize("name, entry", NAMES, ids=[name for name, _ in NAMES])
def test_every_name_in_the_data_round_trips_to_its_entry(name, entry):
    """As listed, and as a driver would print it (drivers from ~470 add "NVIDIA ", older ones omit
    it)."""
    spellings = {name, name.removeprefix("NVIDIA "), "NVIDIA " + name.removeprefix("NVIDIA ")}
    for spelling in spellings:
        known = compute_capability_for(spelling)
        assert known is not None, spelling
        assert (known.architecture, known.compute_capability) == (
            entry["architecture"],
            entry["compute_capability"],
        ), spelling
        text = identity_text(spelling, None)
        assert (
            text.startswith(f"{entry['architecture']}, cc {entry['compute_capability']}")
            and "None" not in text
        ), text


def test_the_data_spans_kepler_to_blackwell_ultra_and_every_entry_cites_a_page():
    """A guard against a bad edit dropping a generation: the issue asks for Kepler to Blackwell
    Ultra."""
    assert {entry["architecture"] for entry in ENTRIES} == {
        "Kepler",
        "Maxwell",
        "Pascal",
        "Volta",
        "Turing",
        "Ampere",
        "Ada Lovelace",
        "Hopper",
        "Blackwell",
        "Blackwell Ultra",
    }
    assert all("http" in entry["source"] for entry in ENTRIES)


def _replayed(name: str) -> nvml.GpuInfo:
    """The A100 capture renamed (and its PCI device id, the A100's, taken out)."""
    return nvml.read_host(ReplayNvml(parse_capture(v.renamed(v.A100_XML, name), "synthetic"))).gpus[
        0
    ]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NVIDIA GeForce GTX 1660 SUPER", "Turing, cc 7.5 (unconfirmed)"),
        ("NVIDIA GeForce GTX 1660 Ti", "Turing, cc 7.5 (unconfirmed)"),
        ("NVIDIA GeForce GTX 1660", "Turing, cc 7.5 (unconfirmed)"),
        ("NVIDIA GeForce GTX 1650", "Turing, cc 7.5 (unconfirmed)"),
        ("GeForce GTX 1650 SUPER", "Turing, cc 7.5 (unconfirmed)"),
        ("NVIDIA RTX A5500", "Ampere, cc 8.6 (unconfirmed)"),
        ("NVIDIA RTX A4500", "Ampere, cc 8.6 (unconfirmed)"),
        ("NVIDIA RTX A1000", "Ampere, cc 8.6 (unconfirmed)"),
        ("NVIDIA RTX A400", "Ampere, cc 8.6 (unconfirmed)"),
        ("NVIDIA RTX A4000", "Ampere, cc 8.6"),
        (
            "Tesla M10",
            "Maxwell, cc 5.0 (unconfirmed): legacy, last driver branch R580, last CUDA 12.9",
        ),
        (
            "Tesla M4",
            "Maxwell, cc 5.2 (unconfirmed): legacy, last driver branch R580, last CUDA 12.9",
        ),
        ("Tesla K10.G1.8GB", "Kepler, cc 3.0: legacy, last driver branch R470, last CUDA 10.2"),
        ("GeForce GTX 680", "Kepler, cc 3.0: legacy, last driver branch R470, last CUDA 10.2"),
        ("NVIDIA RTX PRO 4500 Blackwell Server Edition", "Blackwell, cc 12.0"),
    ],
)
def test_added_products_replay_with_their_compute_capability(name, expected):
    gpu = _replayed(name)
    assert gpu.name == name and gpu.compute_capability == expected.split("cc ")[1].split()[
        0
    ].rstrip(":")
    assert identity_text(gpu.name, gpu.compute_capability) == expected


def test_a_longer_product_is_not_taken_for_a_shorter_one():
    """ "RTX A400" is a prefix of "RTX A4000" as text but not as a name: each keeps its own
    entry."""
    assert compute_capability_for("NVIDIA RTX A4000").confirmed
    assert not compute_capability_for("NVIDIA RTX A400").confirmed
