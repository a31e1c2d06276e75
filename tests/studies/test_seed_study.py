"""The seed study's shapes (issue 13) on the study's own scenarios, at full scale (a few
minutes with decode folding): each bound comes from a published figure (seed 003) or from
the one divergence the report explains and measures (results/seed_study/README.md). The
full study: ``python -m sim.seed_study``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache.report.frames import requests_frame
from hicache.scenario import load_scenario
from sim.driver import simulate
from sim.seed_study.analysis import multipliers, run_metrics, session_delta
from sim.seed_study.spec import SESSIONS, session_sets

ROOT = Path(__file__).resolve().parents[2]
DSV4 = ROOT / "scenarios/seed_study/multiturn_dsv4_flash.yaml"
WAIT = "cache.hicache_storage_prefetch_policy=wait_complete"

pytestmark = pytest.mark.slow


def _run(path: Path, variant: str, *sets: str) -> dict:
    sc = load_scenario(path).variant(variant).with_overrides(list(sets))
    return run_metrics(requests_frame(simulate(sc, progress=False).records))


@pytest.fixture(scope="module")
def tiers() -> dict[str, dict]:
    """DeepSeek-V4-Flash's three tiers with the seed's flags, and L1+L2+L3 once more with
    prefetches that run to completion (the report's prefetch-policy sweep)."""
    out = {v: _run(DSV4, v) for v in ("L1", "L1+L2", "L1+L2+L3")}
    out["L3 wait_complete"] = _run(DSV4, "L1+L2+L3", WAIT)
    return out


def test_the_cliffs_fall_where_the_published_curves_put_them(tiers) -> None:
    """Published: both curves ~0 after rounds 35-40. Calibrated: L1+L2 starts falling in
    that range; predicted: L1 collapses for good at about half that round
    (--hicache-ratio 2: L1+L2 holds twice L1)."""
    assert 35 <= tiers["L1+L2"]["onset_round"] <= 41
    assert 17 <= tiers["L1"]["cliff_round"] <= 22
    assert tiers["L1"]["late_hit_rate"] < 0.02


def test_l3_keeps_the_late_rounds_and_multiplies_throughput_when_prefetches_complete(
        tiers) -> None:
    """Published: ~98% hit in late rounds, 15.5x L1's effective input throughput (here:
    within a factor of 2), mean TTFT under 9 s, L2 alone ~1.5x (ours is larger: L2 carries
    the rounds between our L1 and L1+L2 cliffs alone, report section 4)."""
    complete = tiers["L3 wait_complete"]
    x = multipliers({k: v for k, v in tiers.items() if k != "L1+L2+L3"})
    assert complete["late_hit_rate"] > 0.93
    assert complete["ttft_mean_s"] < 9.0
    assert 1.3 < x["L1+L2"] < x["L3 wait_complete"]
    assert 15.5 / 2 < x["L3 wait_complete"] < 15.5 * 2


def test_the_timeout_policy_loses_l3_once_l2_overflows(tiers) -> None:
    """Our divergence from the published curve (report section 4): with the seed's
    `timeout` policy, once L2 overflows the queue outlasts the 30 s cap and prefetches
    are cut before they fetch; the late rounds then hit little more than L1 holds."""
    timeout, complete = tiers["L1+L2+L3"], tiers["L3 wait_complete"]
    assert timeout["late_hit_rate"] < complete["late_hit_rate"] - 0.3
    assert timeout["onset_round"] is not None and 35 <= timeout["onset_round"] <= 41


def _session(key: str, batch: int) -> dict:
    st = next(s for s in SESSIONS if s.key == key)
    path = ROOT / st.scenario
    lru, ses = (_run(path, v, *session_sets(st, batch)) for v in ("lru", "session"))
    return session_delta(lru, ses)


def test_session_aware_eviction_lowers_qwen_ttft_at_batch_32() -> None:
    """Published: Qwen3.5-397B-A17B TP8 at batch 32, TTFT -13.5% against LRU (here: within
    a factor of 2; seeds 1 and 2 give -13.0% and -5.0%, the report's seed 0 -12.8%)."""
    d = _session("qwen3_5", 32)
    assert -13.5 * 2 < d["ttft_change_pct"] < -13.5 / 2
    assert d["device_session"] >= d["device_lru"]
