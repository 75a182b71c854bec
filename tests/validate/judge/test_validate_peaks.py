"""The GPU peak table: every entry valid and sourced, matched by NVML name; the suite's tables
read by one reader (validate/simpleyaml.py), which reads them as PyYAML does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from validate.judge.peaks import load_peaks, parse_table, peaks_for
from validate.simpleyaml import TableError, parse_simple_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_table_loads_and_every_entry_has_a_source():
    table = load_peaks()
    assert len(table) >= 10
    for entry in table:
        assert entry.source.startswith("https://")
    # NVIDIA publishes no per-GPU datasheet for AWS's A10G or for one GPU of a GB200 superchip:
    # those figures are null (shown without a datasheet share), every other model has them.
    blank = {e.model for e in table if e.fp32_tflops is None or e.memory_bandwidth_gbs is None}
    assert blank == {"NVIDIA A10G", "NVIDIA GB200"}


@pytest.mark.parametrize(
    "table", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "validate").rglob("*.yaml"))
)
def test_every_table_of_the_suite_reads_as_pyyaml_reads_it(table):
    """The suite reads its tables with the subset reader alone; each is also plain YAML, read
    alike by PyYAML, so a person or another tool sees what the suite sees."""
    text = (ROOT / table).read_text(encoding="utf-8")
    assert parse_simple_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("nvml_name", "model", "bf16"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", 312.0),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5", 989.5),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756.5),
        ("nvidia l4", "NVIDIA L4", 121.0),
        ("Tesla T4", "Tesla T4", None),
    ],
)
def test_match_by_nvml_name(nvml_name, model, bf16):
    entry = peaks_for(nvml_name, load_peaks())
    assert entry is not None and entry.model == model
    assert entry.peak("bf16_tflops") == bf16


def test_unknown_model_has_no_entry():
    assert peaks_for("NVIDIA GeForce GTX 1080", load_peaks()) is None


def _entry(**changes):
    entry = {
        "model": "X",
        "nvml_names": ["X"],
        "fp32_tflops": 1,
        "tf32_tflops": None,
        "bf16_tflops": None,
        "fp16_tflops": None,
        "memory_bandwidth_gbs": 100,
        "source": "https://example.com/x.pdf",
    }
    entry.update(changes)
    return entry


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([_entry(source=None)], "'source' must be an https:// URL"),
        ([_entry(source="http://example.com")], "'source' must be an https:// URL"),
        ([_entry(fp32_tflops=-3)], "fp32_tflops must be a positive number"),
        ([_entry(memory_bandwidth_gbs=0)], "memory_bandwidth_gbs must be a positive number"),
        (
            [{k: v for k, v in _entry().items() if k != "fp32_tflops"}],
            "fp32_tflops is missing (null when NVIDIA publishes",
        ),
        ([_entry(no_reference={"fp64_tflops": "x"})], "no_reference: unknown metric 'fp64_tflops'"),
        ([_entry(no_reference={"bf16_tflops": " "})], "no_reference: bf16_tflops needs the reason"),
        (
            [
                _entry(
                    no_reference={"fp32_tflops": "none found"},
                    measured_fp32_tflops=[
                        {
                            "value": 1,
                            "method": "torch.matmul",
                            "n": 8192,
                            "dtype": "fp32",
                            "source": "https://example.com",
                            "date": "2026",
                        }
                    ],
                )
            ],
            "fp32_tflops is both measured and listed under no_reference",
        ),
        ([_entry(nvml_names=[])], "'nvml_names' must be a non-empty list"),
        ([_entry(), _entry(model="Y")], "NVML name 'X' is also listed by X"),
    ],
)
def test_malformed_tables_are_refused_with_the_entry_named(entries, message):
    with pytest.raises(TableError, match="gpus\\[") as err:
        parse_table({"gpus": entries})
    assert message in str(err.value)


def test_subset_reader_refuses_what_it_does_not_understand():
    with pytest.raises(TableError, match="line 2"):
        parse_simple_yaml("gpus:\n  - model X\n")
