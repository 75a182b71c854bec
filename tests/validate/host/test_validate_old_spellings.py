"""Old spellings of the ECC and page-retirement fields, replayed from SYNTHETIC variants of the
real captures in tests/validate/captures/ (one documented edit each, made here at test time), so
each spelling the parser supports is proven read, and its absence reads "not reported".

The spellings come from public captures of older drivers:
- XML `<ecc_errors><volatile><double_bit>...<total>` and `<retired_pages><pending_blacklist>`:
  driver 460.73.01's `nvidia-smi -q -x` of eight Tesla V100S-PCIE-32GB, test data of
  GuanceCloud/datakit's nvidiasmi input (`<pending_blacklist>No</pending_blacklist>` beside
  `<pending_retirement>No</pending_retirement>`), and 418.56's of a GeForce GTX 1070;
- text "ECC Errors / Volatile / Double Bit / Total" and "Retired Pages / Pending Page Blacklist":
  driver 535.129.03's `nvidia-smi -q` of a Tesla P40 ("Pending Page Blacklist : No"); the label
  "Pending Page Blacklist" is also in every text capture in tests/validate/captures/ (590.48.01 to
  610.57.04, value N/A there).
"""

from __future__ import annotations

import host_variants as v
import pytest

from validate.host import nvml
from validate.host.capture import parse_capture
from validate.host.replay import ReplayNvml
from validate.judge.health import ecc_verdict, retired_pages_verdict
from validate.judge.verdict import FAIL, PASS, SKIP


def _host(text: str) -> list[nvml.GpuInfo]:
    return nvml.read_host(ReplayNvml(parse_capture(text, "synthetic"))).gpus


# --- ECC: double-bit totals (drivers before ~R510 printed no DRAM/SRAM split) --------------------


def _xml_double_bit(total: str) -> str:
    """A100 capture (570.148.08) with its volatile ECC counters in the old single/double-bit
    form."""
    old = (
        "<volatile><single_bit><device_memory>0</device_memory><register_file>0</register_file>"
        "<total>0</total></single_bit><double_bit><device_memory>{0}</device_memory>"
        "<register_file>0</register_file><total>{0}</total></double_bit></volatile>"
    ).format(total)
    return v._one(r"<volatile>.*?</volatile>", old, v.A100_XML.read_text(encoding="utf-8"))


def _text_double_bit(total: str) -> str:
    """H100 text capture (590.48.01) with every GPU's volatile ECC counters in the old form."""
    block = (
        "        Volatile\n"
        "            Single Bit\n"
        "                Device Memory             : 0\n"
        "                Total                     : 0\n"
        "            Double Bit\n"
        f"                Device Memory             : {total}\n"
        "                Register File             : 0\n"
        f"                Total                     : {total}\n"
    )
    return v._one(
        r"(    ECC Errors\n)        Volatile\n(?:            [^\n]*\n)+",
        lambda m: m.group(1) + block,
        v.H100_TEXT.read_text(encoding="utf-8"),
    )


@pytest.mark.parametrize(
    "make",
    [_xml_double_bit, _text_double_bit],
    ids=["xml-double_bit/total", "text-Double Bit/Total"],
)
def test_double_bit_totals_are_read(make):
    for total, verdict in (("3", FAIL), ("0", PASS)):
        gpus = _host(make(total))
        assert gpus and all(g.ecc_uncorrected_volatile == int(total) for g in gpus), (
            total,
            [g.ecc_uncorrected_volatile for g in gpus],
        )
        assert {ecc_verdict(g.ecc_uncorrected_volatile, g.index).verdict for g in gpus} == {verdict}


@pytest.mark.parametrize("make", [_xml_double_bit, _text_double_bit], ids=["xml", "text"])
def test_a_double_bit_total_nvidia_smi_could_not_read_is_not_reported(make):
    for gpu in _host(make("N/A")):
        verdict = ecc_verdict(gpu.ecc_uncorrected_volatile, gpu.index)
        assert (
            gpu.ecc_uncorrected_volatile is None
            and verdict.verdict == SKIP
            and "not reported" in verdict.reason
        )


def test_a_capture_without_volatile_ecc_counters_is_not_reported():
    gpu = _host(v._one(r"<volatile>.*?</volatile>", "", v.A100_XML.read_text(encoding="utf-8")))[0]
    assert gpu.ecc_uncorrected_volatile is None and ecc_verdict(None, 0).verdict == SKIP


# --- page retirement pending: pending_blacklist (old) and pending_retirement (new) --------------


def _xml_pending(tag: str, value: str) -> str:
    """A100 capture with only `<tag>` left under retired_pages, set to `value`."""
    text = v.A100_XML.read_text(encoding="utf-8")
    other = "pending_retirement" if tag == "pending_blacklist" else "pending_blacklist"
    text = v._one(rf"\s*<{other}>[^<]*</{other}>", "", text)
    return v._one(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", text)


def _text_pending(label: str, value: str) -> str:
    """H100 text capture with every GPU's "Pending Page Blacklist" line relabelled and set."""
    return v._one(
        r"Pending Page Blacklist *: [^\n]*",
        f"{label:<39}: {value}",
        v.H100_TEXT.read_text(encoding="utf-8"),
    )


@pytest.mark.parametrize(
    "make, spelling",
    [
        (_xml_pending, "pending_blacklist"),
        (_xml_pending, "pending_retirement"),
        (_text_pending, "Pending Page Blacklist"),
        (_text_pending, "Pending Page Retirement"),
    ],
)
def test_each_pending_retirement_spelling_is_read(make, spelling):
    for value, pending, verdict in (("Yes", True, FAIL), ("No", False, PASS)):
        gpus = _host(make(spelling, value))
        assert gpus and all(g.retired_pages_pending is pending for g in gpus), (spelling, value)
        assert {retired_pages_verdict(g.index, g.retired_pages_pending).verdict for g in gpus} == {
            verdict
        }


def test_pending_retirement_the_capture_lacks_is_not_reported():
    text = v._one(
        r"\s*<pending_(?:blacklist|retirement)>[^<]*</pending_(?:blacklist|retirement)>",
        "",
        v.A100_XML.read_text(encoding="utf-8"),
    )
    gpu = _host(text)[0]
    verdict = retired_pages_verdict(gpu.index, gpu.retired_pages_pending)
    assert (
        gpu.retired_pages_pending is None
        and verdict.verdict == SKIP
        and "not reported" in verdict.reason
    )


def test_the_real_text_captures_print_n_a_and_read_not_reported():
    """The unedited record: "Pending Page Blacklist : N/A" is absence, not health."""
    for gpu in _host(v.H100_TEXT.read_text(encoding="utf-8")):
        assert gpu.retired_pages_pending is None
        assert "not reported" in retired_pages_verdict(gpu.index, None).reason
