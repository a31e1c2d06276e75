"""Every shipped hardware profile loads, and every figure in it names its source."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.hardware.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "scenarios" / "hardware").glob("*.yaml"))
SOURCE = re.compile(r"(SOURCES|REF4|DS\b|DGX B200|assumption|as h100-sxm|as h2d|same assumptions"
                    r"|brief default)", re.I)


def test_the_four_new_gpus_are_there() -> None:
    names = {p.stem for p in PROFILES}
    assert {"a100-80gb-sxm", "h100-pcie", "b200", "l40s", "h100-sxm", "h200-sxm"} <= names


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_a_profile_loads_and_cites_a_source_for_every_figure(path: Path) -> None:
    profile = load_profile(path)
    assert profile.name == path.stem
    text = path.read_text()
    assert "/work/" not in text and "REFERENCE.md" not in text
    for line in text.splitlines():
        number = re.match(r"\s*\w+:\s*[-+0-9.]", line)
        if number:
            assert SOURCE.search(line), f"{path.name}: no source for: {line.strip()}"
    if "memory_bytes:" in text:  # what --from-sglang --mem-fraction-static needs
        assert "https://www.nvidia.com/" in text


def test_peak_figures_order_the_gpus_as_their_datasheets_do() -> None:
    flops = {p.stem: load_profile(p).gpu.bf16_flops for p in PROFILES}
    assert flops["b200"] > flops["h100-sxm"] > flops["h100-pcie"] > flops["l40s"] \
        > flops["a100-80gb-sxm"]
    link = {p.stem: load_profile(p).pcie.h2d_bytes_per_s for p in PROFILES}
    assert link["a100-80gb-sxm"] == link["l40s"] < link["h100-pcie"] == link["h100-sxm"]
