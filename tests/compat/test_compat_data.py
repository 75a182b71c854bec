"""The compatibility data file: it loads, every entry is sourced and consistent, and bad edits fail loudly."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpuenv.compat import COMPAT_FILE, load_matrix, parse_matrix, version_key as V
from gpuenv.errors import DataError


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load(COMPAT_FILE.read_text())


def test_real_file_loads_and_spans_the_required_ranges():
    m = load_matrix()
    minors = sorted((c.minor for c in m.cuda_releases), key=V)
    assert minors[0] == "11.8", "CUDA data must start at 11.8"
    assert V(minors[-1]) >= V("12.8")
    assert {"11", "12"} <= {str(x.major) for x in m.cuda_majors}
    torch = sorted((t.series for t in m.torch_releases), key=V)
    assert torch[0] == "2.1" and V(torch[-1]) >= V("2.9")
    tf = sorted((t.series for t in m.tensorflow_releases), key=V)
    assert tf[0] == "2.14" and V(tf[-1]) >= V("2.18")


def test_no_invented_releases():
    # CUDA 12.7 was never released (12.6.3 was followed by 12.8.0): plausible-looking is not enough.
    m = load_matrix()
    assert m.cuda_release("12.7") is None
    assert m.cuda_release("12.6") is not None and m.cuda_release("12.8") is not None


def test_min_driver_never_decreases_with_cuda():
    m = load_matrix()
    rels = sorted(m.cuda_releases, key=lambda c: V(c.minor))
    for a, b in zip(rels, rels[1:]):
        assert V(b.min_driver) >= V(a.min_driver), f"CUDA {b.minor} needs an older driver than {a.minor}"
    for c in rels:
        floor = m.cuda_major(c.major)
        assert V(c.min_driver) >= V(floor.minor_compat_min_driver), c.minor


def test_image_tags_have_the_known_shapes():
    m = load_matrix()
    tags = {t for i in m.images for t in i.tags()}
    # Facts from the nvidia/cuda supported-tags list: cuDNN 8 naming up to 12.3, plain cudnn (9) from 12.4.1.
    assert "12.1.1-cudnn8-runtime-ubuntu22.04" in tags
    assert "11.8.0-base-ubuntu22.04" in tags
    assert not any(t.startswith("12.1.1-cudnn-") for t in tags)
    for image in m.images:
        assert image.require_cuda.startswith(f"cuda>={image.minor}"), image.version


def test_torch_variants_are_named_for_their_cuda_and_have_archs():
    m = load_matrix()
    for t in m.torch_releases:
        names = {v.name for v in t.variants}
        assert "cpu" in names, t.series
        for v in t.variants:
            if v.cuda:
                assert v.archs, f"{t.series} {v.name} lists no archs"
    by_series = {t.series: t for t in m.torch_releases}
    assert {v.name for v in by_series["2.1"].variants} == {"cu118", "cu121", "cpu"}


def test_tensorflow_tested_configurations():
    m = load_matrix()
    tf = {t.series: t for t in m.tensorflow_releases}
    assert (tf["2.14"].cuda, tf["2.15"].cuda, tf["2.16"].cuda) == ("11.8", "12.2", "12.3")


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["cuda_releases"][0].pop("source"), r"cuda_releases\[0\]: missing key\(s\) source"),
        (lambda d: d["cuda_releases"][0].update(source="docs.nvidia.com"), r"cuda_releases\[0\]: source must be a URL"),
        (lambda d: d["cuda_releases"][0].update(min_driver="abc"), r"cuda_releases\[0\].min_driver: 'abc' is not of the form"),
        (lambda d: d["cuda_releases"][0].update(minor=11.8), r"cuda_releases\[0\].minor: expected a non-empty string"),
        (lambda d: d["torch_releases"][0]["variants"].update(cu999={"cuda": "99.9", "archs": ["8.0"]}), r"cu999: CUDA 99.9 is not in cuda_releases"),
        (lambda d: d["tensorflow_releases"][0].update(cuda="10.2"), r"CUDA 10.2 is not in cuda_releases"),
        (lambda d: d["images"].pop(0), r"no images entry for its latest_patch|is not in cuda_releases"),
        (lambda d: d.update(schema=2), r"unsupported schema 2"),
        (lambda d: d.pop("gpu_architectures"), r"missing key\(s\) gpu_architectures"),
    ],
)
def test_bad_edits_are_named(raw, mutate, expected):
    data = copy.deepcopy(raw)
    mutate(data)
    with pytest.raises(DataError, match=expected):
        parse_matrix(data)


def test_invalid_yaml_names_the_line(tmp_path):
    bad = tmp_path / "compat.yaml"
    bad.write_text("schema: 1\ncuda_releases: [\n  - minor: '12.1'\n")
    with pytest.raises(DataError, match=r"compat.yaml: line \d+ is not valid YAML"):
        load_matrix(bad)
