"""The docs say only what the code does (review D20): every invoke.yaml key a user-facing page
names as `gpuenv.KEY` is one the config knows (gpuenv/cli/config.py, the keys Invoke reads), so
"set them once in invoke.yaml (`gpuenv.fleet.env`)" can be followed. Module paths (`gpuenv.cli`)
are told apart by importing them. docs/fleet-backends.md is left out: it designs a backend not
built yet (`gpuenv.fleet.kube`)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from gpuenv.cli.config import KNOWN_KEYS

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/multi-gpu.md", "docs/fleet.md", "docs/suite.md", "docs/tasks.md"]
NAMED = re.compile(r"`gpuenv\.([a-z_][a-z_.]*[a-z_])`")


def _module(path: str) -> bool:
    """Whether gpuenv.PATH is a module, or a name in one (gpuenv.cli.output.show)."""
    name = f"gpuenv.{path}"
    try:
        if importlib.util.find_spec(name) is not None:
            return True
    except ModuleNotFoundError:
        pass
    parent, _, attribute = name.rpartition(".")
    try:
        return hasattr(importlib.import_module(parent), attribute)
    except ImportError:
        return False


def named_keys(text: str) -> list[str]:
    return [key for key in NAMED.findall(text) if not _module(key)]


@pytest.mark.parametrize("page", PAGES)
def test_every_invoke_yaml_key_a_page_names_exists(page):
    sections = {key.rsplit(".", 1)[0] for key in KNOWN_KEYS if "." in key}
    unknown = [
        key
        for key in named_keys((ROOT / page).read_text(encoding="utf-8"))
        if key not in KNOWN_KEYS and key not in sections
    ]
    assert unknown == [], f"{page} names invoke.yaml keys the config does not know: {unknown}"


def test_the_nccl_settings_page_names_the_fleet_env_key():
    """docs/multi-gpu.md sends fleet users to invoke.yaml for NCCL/gloo settings, not docker -e."""
    assert "fleet.env" in named_keys((ROOT / "docs/multi-gpu.md").read_text(encoding="utf-8"))
    assert "fleet.env" in KNOWN_KEYS


def test_a_key_the_config_does_not_know_is_found():
    assert named_keys("set `gpuenv.fleet.nccl_env` or `gpuenv.cli.output`") == ["fleet.nccl_env"]


def test_the_ddp_join_reasons_the_page_quotes_are_the_codes():
    """docs/multi-gpu.md quotes the two reasons a rank is blamed at the join bound: they are
    validate.measure.ddp.missing_ranks's words (review D20, D10)."""
    from validate.measure.ddp import missing_ranks

    page = " ".join((ROOT / "docs/multi-gpu.md").read_text(encoding="utf-8").split())
    never, _ = missing_ranks(2, arrived={0}, joined=set())
    stuck, _ = missing_ranks(2, arrived={0, 1}, joined={0})
    assert never == "never reached the rendezvous"
    assert "never reached the rendezvous within 90 s" in page
    assert f"`{stuck}`" in page
