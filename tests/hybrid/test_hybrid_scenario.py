"""scenarios/hybrid_swa_mamba.yaml's "L1 hybrid-aware" variant runs clean end to end."""

from __future__ import annotations

from pathlib import Path

from hicache.runtime.handles import Tier
from hicache.scenario import load_scenario
from sim.driver import simulate

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "hybrid_swa_mamba.yaml"


def test_hybrid_aware_variant_balances_every_pool() -> None:
    variants = dict(load_scenario(SCENARIO).expand())
    res = simulate(variants["L1 hybrid-aware"], name="L1 hybrid-aware")
    (rep,) = res.replicas
    rt, sched = rep.runtime, rep.scheduler
    assert set(rt.device.pools) == {"full", "swa", "mamba"}
    assert all(r["finish"] is not None for r in res.records) and rt.open_requests() == 0
    assert sum(r["device_hit"] for r in res.records) > 0
    for pool, p in rt.device.pools.items():
        assert p.free_count + sched.tree.held_pages(Tier.DEVICE, pool) == p.size, pool
    assert sched.tree.held_pages(Tier.DEVICE, "mamba") > 0  # checkpoints stay cached
