"""Like for like, or unconfirmed: TensorFlow's matmul figures are judged against PyTorch's measured
references only under the unconfirmed rule (warn below 75%, fail below 55%), unless a
TensorFlow-measured reference exists in gpu_peaks.yaml."""

from __future__ import annotations

import dataclasses

import pytest

from validate.judge.peaks import (
    SUITE_MATMUL_METHODS,
    SUITE_TF_MATMUL_METHODS,
    Measurement,
    load_peaks,
)
from validate.judge.speed import judge_figure
from validate.judge.verdict import FAIL, PASS, WARN

PEAKS = load_peaks()
#: (model, metric) of every reference the table confirms for PyTorch's own matmul.
CONFIRMED = [(e, m.metric) for e in PEAKS for m in e.measured if m.matches_suite]


def test_the_table_holds_torch_confirmed_references_to_check_against():
    assert len(CONFIRMED) >= 5


@pytest.mark.parametrize("entry,metric", CONFIRMED, ids=[f"{e.model}-{m}" for e, m in CONFIRMED])
def test_tensorflow_figures_against_torch_references_are_unconfirmed(entry, metric):
    torch_ref = entry.reference_for(metric)
    tf_ref = entry.reference_for(metric, SUITE_TF_MATMUL_METHODS)
    assert torch_ref.confirmed and not tf_ref.confirmed
    assert tf_ref.describe().startswith("unconfirmed: ")
    slow = (
        0.70 * tf_ref.value
    )  # below 75%, above 55%: a confirmed floor fails it, an unconfirmed one warns
    assert judge_figure(metric, slow, torch_ref).verdict == FAIL
    assert judge_figure(metric, slow, tf_ref).verdict == WARN
    assert judge_figure(metric, 0.50 * tf_ref.value, tf_ref).verdict == FAIL


def test_a_tensorflow_measured_reference_confirms_tensorflow_figures_only():
    entry, metric = CONFIRMED[0]
    dtype = metric.removesuffix("_tflops")
    tf_measured = Measurement(
        metric, 500.0, "tf.matmul", 8192, dtype, "https://example.invalid/tf", "2026-01-01"
    )
    with_tf = dataclasses.replace(entry, measured=entry.measured + (tf_measured,))
    tf_ref = with_tf.reference_for(metric, SUITE_TF_MATMUL_METHODS)
    assert tf_ref.confirmed and tf_ref.value == 500.0
    assert judge_figure(metric, 0.70 * 500.0, tf_ref).verdict == FAIL
    assert judge_figure(metric, 0.80 * 500.0, tf_ref).verdict == PASS
    # PyTorch's floor still comes from the torch.matmul figures, never from TensorFlow's.
    assert with_tf.reference_for(metric, SUITE_MATMUL_METHODS) == entry.reference_for(metric)
    # A tf.matmul figure at another size is no like-for-like reference either.
    other_n = dataclasses.replace(tf_measured, n=4096)
    assert (
        not dataclasses.replace(entry, measured=entry.measured + (other_n,))
        .reference_for(metric, SUITE_TF_MATMUL_METHODS)
        .confirmed
    )
