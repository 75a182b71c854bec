"""The compatibility data file: it loads, every entry is sourced and consistent, and bad edits fail
loudly."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpuenv.compat.matrix import COMPAT_FILE, load_matrix, parse_matrix
from gpuenv.compat.matrix import version_key as V
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
    assert torch[0] == "2.0" and V(torch[-1]) >= V("2.15")
    tf = sorted((t.series for t in m.tensorflow_releases), key=V)
    assert tf[0] == "2.12" and V(tf[-1]) >= V("2.21")
    # older servers (Python 3.8, CUDA 11.8) still have builds
    assert any(
        "3.8" in t.python and any(v.cuda == "11.8" for v in t.variants) for t in m.torch_releases
    )
    assert any("3.8" in t.python and t.cuda == "11.8" for t in m.tensorflow_releases)


def test_no_invented_releases():
    # CUDA 12.7 was never released (12.6.3 was followed by 12.8.0): plausible-looking is not enough.
    m = load_matrix()
    assert m.cuda_release("12.7") is None
    assert m.cuda_release("12.6") is not None and m.cuda_release("12.8") is not None


def test_driver_floors_per_update_never_decrease_and_respect_the_major_floor():
    m = load_matrix()
    updates = sorted(
        (u for c in m.cuda_releases for u in c.updates if u.min_driver), key=lambda u: V(u.version)
    )
    for a, b in zip(updates, updates[1:]):
        assert V(b.min_driver) >= V(a.min_driver), (
            f"CUDA {b.version} needs an older driver than {a.version}"
        )
    for c in m.cuda_releases:
        floor = m.cuda_major(c.major)
        assert c.floor is None or V(c.floor) >= V(floor.minor_compat_min_driver), c.minor


@pytest.mark.parametrize(
    "update, driver",
    [
        ("12.8.0", "570.26"),
        ("12.8.1", "570.124.06"),
        ("13.0.0", "580.65.06"),
        ("13.0.2", "580.95.05"),
        ("12.0.0", "525.60.13"),
        ("12.4.0", "550.54.14"),
    ],
)
def test_every_update_keeps_its_own_driver_floor(update, driver):
    # The cases: 12.8.0 needs 570.26 although 12.8.1 needs 570.124.06 (NVIDIA release notes,
    # Table 3).
    release = load_matrix().cuda_release(update.rsplit(".", 1)[0])
    assert release.update(update).min_driver == driver


def test_unknown_facts_are_marked_not_invented():
    m = load_matrix()
    newest = max(m.cuda_releases, key=lambda c: V(c.minor))
    assert V(newest.minor) >= V("13.5"), "CUDA minors up to the newest cuda-toolkit on PyPI"
    for c in m.cuda_releases:
        for u in c.updates:
            if u.min_driver is None:
                assert not u.confirmed and u.note, u.version
    # no image is claimed for a CUDA whose driver floor is unknown
    assert m.images_of("13.4") == [] and m.images_of("13.5") == []


def test_image_tags_are_listed_as_they_exist():
    m = load_matrix()
    tags = {t for i in m.images for t in i.tags()}
    # cuDNN 8 naming up to 12.2.2, cudnn9 on 12.3.2, plain cudnn from 12.4.1.
    assert "12.1.1-cudnn8-runtime-ubuntu22.04" in tags
    assert "11.8.0-base-ubuntu22.04" in tags
    assert not any(t.startswith("12.1.1-cudnn-") for t in tags)
    # 12.5.1's cuDNN images exist for 20.04 and 22.04 only; 13.2.0 has cuDNN images for 22.04/24.04
    assert "12.5.1-base-ubuntu24.04" in tags and "12.5.1-cudnn-runtime-ubuntu24.04" not in tags
    assert "12.5.1-cudnn-runtime-ubuntu22.04" in tags
    assert "13.2.0-cudnn-runtime-ubuntu24.04" in tags
    for image in m.images:
        assert image.require_cuda is None or image.require_cuda.startswith(
            f"cuda>={image.minor}"
        ), image.version
        assert image.require_cuda is not None or not image.confirmed, image.version


def test_python_release_dates_are_sourced():
    m = load_matrix()
    dates = {p.version: p.released.isoformat() for p in m.python_releases}
    assert dates["3.11"] == "2022-10-24" and dates["3.14"] == "2025-10-07"
    assert all(p.source for p in m.python_releases)
    pythons = {py for t in m.torch_releases for py in t.python} | {
        py for t in m.tensorflow_releases for py in t.python
    }
    assert pythons <= set(dates)


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
    # 2.15's PyPI wheel pins cuda-toolkit 13.2.2: a CUDA 13.2 build, so cu132 is a variant
    assert by_series["2.15"].pypi_default_cuda == "13.2"
    assert "cu132" in {v.name for v in by_series["2.15"].variants}


def test_tensorflow_tested_configurations():
    m = load_matrix()
    tf = {t.series: t for t in m.tensorflow_releases}
    assert (tf["2.14"].cuda, tf["2.15"].cuda, tf["2.16"].cuda) == ("11.8", "12.2", "12.3")


def _first_update(d):
    return d["cuda_releases"][0]["updates"][0]


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda d: _first_update(d).pop("source"),
            r"cuda_releases\[0\]\.updates\[0\]: missing key\(s\) source",
        ),
        (
            lambda d: _first_update(d).update(source="docs.nvidia.com"),
            r"cuda_releases\[0\]\.updates\[0\]: source must be a URL",
        ),
        (
            lambda d: _first_update(d).update(min_driver="abc"),
            r"updates\[0\]\.min_driver: 'abc' is not of the form",
        ),
        (
            lambda d: _first_update(d).update(min_driver=None),
            r"min_driver is null but the entry does not say confirmed: false",
        ),
        (
            lambda d: _first_update(d).update(version="12.0.0"),
            r"12.0.0 is not an update of CUDA 11.8",
        ),
        (
            lambda d: d["cuda_releases"][0].update(minor=11.8),
            r"cuda_releases\[0\].minor: expected a non-empty string",
        ),
        (
            lambda d: d["torch_releases"][0]["variants"].update(
                cu999={"cuda": "99.9", "archs": ["8.0"]}
            ),
            r"cu999: CUDA 99.9 is not in cuda_releases",
        ),
        (
            lambda d: d["tensorflow_releases"][0].update(cuda="10.2"),
            r"CUDA 10.2 is not in cuda_releases",
        ),
        (
            lambda d: d["images"][0].update(version="11.8.9"),
            r"11.8.9 is not an update listed under cuda_releases 11.8",
        ),
        (lambda d: d.update(schema=1), r"unsupported schema 1"),
        (lambda d: d.pop("gpu_architectures"), r"missing key\(s\) gpu_architectures"),
        (lambda d: d.update(checked="23.11.2026"), r"checked: '23.11.2026' is not a date"),
        # duplicates
        (
            lambda d: d["cuda_releases"].append(copy.deepcopy(d["cuda_releases"][0])),
            r"CUDA minor 11.8 is listed twice",
        ),
        (
            lambda d: d["images"].append(copy.deepcopy(d["images"][0])),
            r"image version 11.8.0 is listed twice",
        ),
        (
            lambda d: d["torch_releases"].append(copy.deepcopy(d["torch_releases"][0])),
            r"torch_releases: series 2.0 is listed twice",
        ),
        (
            lambda d: d["torch_releases"][0]["patches"].append("2.0.1"),
            r"patch 2.0.1 is listed twice",
        ),
        (
            lambda d: d["python_releases"].append(copy.deepcopy(d["python_releases"][0])),
            r"Python 3.8 is listed twice",
        ),
        (
            lambda d: d["cuda_releases"][1]["updates"].append(
                copy.deepcopy(d["cuda_releases"][1]["updates"][0])
            ),
            r"update 12.0.0 is listed twice",
        ),
        # contradictions
        (
            lambda d: d["gpu_architectures"][0].update(last_cuda="4.0"),
            r"Kepler\): last_cuda 4.0 is before first_cuda 5.0",
        ),
        (
            lambda d: d["gpu_architectures"][1]["compute_capabilities"].append("3.5"),
            r"compute capability 3.5 is listed twice",
        ),
        (
            lambda d: d["cuda_releases"][1]["updates"][1].update(min_driver="500.1"),
            r"update 12.0.1 needs driver 500.1, lower than 12.0.0's 525.60.13",
        ),
        (
            lambda d: _first_update(d).update(min_driver="400.1"),
            r"driver floor 400.1 is below the CUDA 11.x minor-version floor",
        ),
        (
            lambda d: d["torch_releases"][-1]["variants"]["cu132"].update(archs=["7.0"]),
            r"arch 7.0 \(Volta\) is not supported by CUDA 13.2",
        ),
        (
            lambda d: d["torch_releases"][0]["python"].append("3.99"),
            r"Python 3.99 is not in python_releases",
        ),
        # issue 18: TensorFlow kernels, driver branches, Jetson
        (
            lambda d: d["tensorflow_releases"][0].pop("kernels"),
            r"tensorflow_releases\[0\]: missing key\(s\) kernels",
        ),
        (
            lambda d: d["tensorflow_releases"][0]["kernels"].update(archs=["9.9"]),
            r"arch\(s\) 9.9 not in gpu_architectures",
        ),
        (
            lambda d: d["tensorflow_releases"][0]["kernels"].update(cuda="12.2"),
            r"build_info's CUDA 12.2 is not the release's CUDA 11.8",
        ),
        (
            lambda d: d["tensorflow_releases"][0]["kernels"].pop("source"),
            r"kernels: missing key\(s\) source",
        ),
        (
            lambda d: d["driver_branches"][0].update(branch="R410"),
            r"branch must be the driver's leading number",
        ),
        (
            lambda d: d["driver_branches"][0]["compute_capabilities"].append("8.0"),
            r"driver_branches: compute capability 8.0 is listed twice",
        ),
        (
            lambda d: d["integrated_gpus"][0]["compute_capabilities"].append("4.2"),
            r"compute capability 4.2 is not in gpu_architectures",
        ),
        (lambda d: d.pop("jetson_use"), r"missing key\(s\) jetson_use"),
    ],
)
def test_bad_edits_are_named(raw, mutate, expected):
    data = copy.deepcopy(raw)
    mutate(data)
    with pytest.raises(DataError, match=expected):
        parse_matrix(data)


def test_invalid_yaml_names_the_line(tmp_path):
    bad = tmp_path / "compat.yaml"
    bad.write_text("schema: 2\ncuda_releases: [\n  - minor: '12.1'\n")
    with pytest.raises(DataError, match=r"compat.yaml: line \d+ is not valid YAML"):
        load_matrix(bad)


def test_duplicate_keys_are_refused(tmp_path):
    # YAML loaders keep the last of two equal keys silently; a second "cuda_releases:" would hide
    # the first.
    bad = tmp_path / "compat.yaml"
    text = COMPAT_FILE.read_text(encoding="utf-8")
    bad.write_text(text + "\nschema: 2\n", encoding="utf-8")
    with pytest.raises(
        DataError, match=r"compat.yaml: line \d+ is not valid YAML \(duplicate key 'schema'\)"
    ):
        load_matrix(bad)


def test_non_utf8_file_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "compat.yaml"
    bad.write_bytes(COMPAT_FILE.read_bytes().replace(b"# Compatibility", b"# Compatibilit\xe9", 1))
    with pytest.raises(DataError) as err:
        load_matrix(bad)
    assert str(bad) in err.value.render() and "is not UTF-8" in err.value.render()
    assert "\n" not in err.value.render()


def test_second_round_facts():
    m = load_matrix()
    # TensorFlow's kernels (build_info.py): from 2.17 no Maxwell SASS, and Hopper only as PTX
    tf = {t.series: t for t in m.tensorflow_releases}
    assert (
        tf["2.21"].archs == ("6.0", "7.0", "8.0", "8.9")
        and tf["2.21"].ptx == "9.0"
        and tf["2.21"].kernels_cuda == "12.5.1"
    )
    assert "5.0" in tf["2.16"].archs and "5.0" not in tf["2.17"].archs
    assert all(
        t.kernels_source
        and t.kernels_source[0].startswith("https://files.pythonhosted.org/packages/")
        for t in m.tensorflow_releases
    )
    # every GPU family the resolver can place on a driver of the data has a first branch
    assert (
        m.driver_branch("10.0").branch == m.driver_branch("12.0").branch == "570"
        and m.driver_branch("10.0").confirmed
    )
    for cc in ("7.5", "8.0", "8.6", "8.9", "9.0", "10.3", "12.1"):
        assert m.driver_branch(cc) is not None, cc
    # Jetson (NVIDIA's CUDA GPUs list): refused, never placed
    assert {cc for g in m.integrated_gpus for cc in g.compute_capabilities} == {
        "5.3",
        "6.2",
        "7.2",
        "8.7",
        "10.1",
        "11.0",
    }
    # runfile names fill the floors the issue lists; 12.8.0 keeps its release-notes floor and notes
    # the runfile's driver
    floors = {u.version: u.min_driver for c in m.cuda_releases for u in c.updates}
    assert (
        floors["12.8.2"],
        floors["12.9.2"],
        floors["13.0.3"],
        floors["13.1.2"],
        floors["13.2.1"],
        floors["13.2.2"],
    ) == ("570.211.01", "575.57.08", "580.126.20", "590.48.01", "595.58.03", "595.71.05")
    u = m.cuda_release("12.8").update("12.8.0")
    assert (
        u.min_driver == "570.26"
        and "570.86.10" in u.note
        and any("cuda_12.8.0_570.86.10_linux.run" in s for s in u.source)
    )
    # images the issue names
    tags = {t for i in m.images for t in i.tags()}
    assert {
        "13.0.0-cudnn-devel-ubuntu22.04",
        "13.0.0-cudnn-devel-ubuntu24.04",
        "13.2.0-cudnn-devel-ubuntu22.04",
    } <= tags
    assert {"13.0.3-base-ubuntu24.04", "13.1.2-base-ubuntu24.04", "13.2.1-base-ubuntu24.04"} <= tags
    assert "cu129" in {v.name for t in m.torch_releases if t.series == "2.11" for v in t.variants}
