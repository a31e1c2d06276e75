"""The seed study's shapes (issue 13), at 1/8 of the study's token sizes so a run takes a
minute: L1 and per-round question divided by 8 keep every cliff where it was (they depend
on L1 / (clients x growth)). The full study: ``python -m sim.seed_study``
(results/seed_study/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache.report.frames import requests_frame
from hicache.scenario import load_scenario
from sim.driver import simulate
from sim.seed_study.analysis import multipliers, run_metrics

ROOT = Path(__file__).resolve().parents[2]
DSV4 = ROOT / "scenarios/seed_study/multiturn_dsv4_flash.yaml"
SCALED = ["cache.device_tokens=1525000", "workload.request_length=1019"]

pytestmark = pytest.mark.slow


def _run(path: Path, variant: str, *sets: str) -> dict:
    sc = load_scenario(path).variant(variant).with_overrides([*SCALED, *sets])
    return run_metrics(requests_frame(simulate(sc, progress=False).records))


@pytest.fixture(scope="module")
def tiers() -> dict[str, dict]:
    """The three tiers with the seed's flags, and L1+L2+L3 once more with prefetches that
    run to completion (the assumption section 3.2 of the report sweeps)."""
    out = {v: _run(DSV4, v) for v in ("L1", "L1+L2", "L1+L2+L3")}
    out["L3 wait_complete"] = _run(DSV4, "L1+L2+L3",
                                   "cache.hicache_storage_prefetch_policy=wait_complete")
    return out


def test_the_cliffs_fall_where_the_published_curves_put_them(tiers) -> None:
    """Calibrated: L1+L2 starts falling in rounds 35-40 (published: both curves ~0 after
    35-40); L1 collapses for good at about half that round (--hicache-ratio 2: L1+L2 holds
    twice L1)."""
    assert 35 <= tiers["L1+L2"]["onset_round"] <= 41
    assert 17 <= tiers["L1"]["cliff_round"] <= 22
    assert tiers["L1"]["late_hit_rate"] < 0.02
    assert tiers["L1+L2"]["late_hit_rate"] < 0.9 * tiers["L1+L2"]["hit_rate"] + 0.1


def test_l2_then_l3_raise_effective_input_throughput_when_prefetches_complete(tiers) -> None:
    x = multipliers({k: v for k, v in tiers.items() if k != "L1+L2+L3"})
    assert x["L1+L2"] > 1.3
    assert x["L3 wait_complete"] > x["L1+L2"]
    assert tiers["L3 wait_complete"]["late_hit_rate"] > 0.9  # published: ~98%


def test_the_timeout_policy_is_what_costs_l3_its_late_rounds(tiers) -> None:
    """The seed's `timeout` prefetch policy with every client asking at once: requests
    queue past their timeout and lose L3 (report section 3.2)."""
    timeout, complete = tiers["L1+L2+L3"], tiers["L3 wait_complete"]
    assert timeout["late_hit_rate"] < complete["late_hit_rate"] - 0.2
    assert timeout["input_tps"] < complete["input_tps"]
