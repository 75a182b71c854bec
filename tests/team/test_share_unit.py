"""Sharing images, the pure parts: registry names, image references, the engine's registry
errors."""

from __future__ import annotations

import pytest
from stackcases import TORCH_CPU

from gpuenv.errors import BadInput
from gpuenv.images import share


def test_remote_names_and_the_digest_reference():
    repo = share.remote_repository("127.0.0.1:5000", TORCH_CPU)
    assert repo == "127.0.0.1:5000/gpuenv/torch2.13.0-cpu-py3.11"
    assert share.digest_reference(repo, "sha256:" + "a" * 64) == repo + "@sha256:" + "a" * 64


@pytest.mark.parametrize(
    "ref",
    [
        "127.0.0.1:5000/gpuenv/torch2.13.0-cpu-py3.11@sha256:" + "0" * 64,
        "registry.example.com/gpuenv/torch2.13.0-cpu-py3.11:0123456789ab",
        "gpuenv/torch2.13.0-cpu-py3.11:latest",
        "ubuntu",
    ],
)
def test_good_image_references(ref):
    assert share.parse_image_ref(ref) == ref


@pytest.mark.parametrize(
    "ref", ["", "Upper/case", "a b", "r.io/x@sha256:abc", "r.io/x@md5:" + "0" * 32, "r.io/x:"]
)
def test_bad_image_references(ref):
    with pytest.raises(BadInput, match="is not an image reference"):
        share.parse_image_ref(ref)


# ---------------------------------------------------------------- the engine's registry errors, as
# recorded


def test_registry_errors_map_to_one_cause_and_fix():
    from gpuenv.engine import registry_problem

    cases = {
        'Get "https://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused': (
            "does not answer",
            "start it",
        ),
        'Get "https://reg.invalid/v2/": dial tcp: lookup reg.invalid on 10.0.0.2:53: no such '
        "host": (
            "is unknown",
            "spelling",
        ),
        'Get "https://10.1.2.3:5000/v2/": http: server gave HTTP response to HTTPS client': (
            "plain HTTP",
            "insecure-registries",
        ),
        "unauthorized: authentication required": (
            "refused the credentials",
            "docker login reg.example.com",
        ),
        "denied: requested access to the resource is denied": (
            "refused the credentials",
            "docker login",
        ),
        "manifest for reg.example.com/gpuenv/x@sha256:abc not found: manifest unknown": (
            "no such image",
            "invoke push printed",
        ),
    }
    for reason, (what, fix) in cases.items():
        got_what, got_fix = registry_problem(reason, "reg.example.com")
        assert what in got_what and fix in got_fix, (reason, got_what, got_fix)


@pytest.mark.parametrize(
    "ref, words",
    [
        ("r.io/" + "x" * 300 + ":1", "the name is 305 characters, the limit is 255"),
        (
            "r.io/" + "x" * 300 + "@sha256:" + "0" * 64,
            "the name is 305 characters, the limit is 255",
        ),
        ("Ubuntu:22.04", "'Ubuntu:22.04' is not an image reference"),
        ("x y", "'x y' is not an image reference"),
    ],
)
def test_image_references_use_the_tag_grammar_and_its_length_limit(ref, words):
    """One grammar for --tag, --image and --base-image (gpuenv/images/reference.py)."""
    with pytest.raises(BadInput) as caught:
        share.parse_image_ref(ref)
    assert words in caught.value.message and "\n" not in caught.value.render()
    assert len(caught.value.render()) < 400, "a 300-character name is shortened in the message"
