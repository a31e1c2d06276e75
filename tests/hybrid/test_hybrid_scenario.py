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


def test_l1_l2_hybrid_aware_variant_balances_every_pool_on_both_tiers() -> None:
    """The "L1+L2 hybrid-aware" variant: L2 pools per component, reuse from L2 (loads of
    every component), every pool of both tiers balanced at the end, more reuse than L1."""
    variants = dict(load_scenario(SCENARIO).expand())
    res = simulate(variants["L1+L2 hybrid-aware"], name="L1+L2 hybrid-aware")
    (rep,) = res.replicas
    rt, sched = rep.runtime, rep.scheduler
    assert set(rt.host.pools) == {"full", "swa", "mamba"}
    assert all(r["finish"] is not None for r in res.records) and rt.open_requests() == 0
    for tier in (rt.device, rt.host):
        for pool, p in tier.pools.items():
            assert p.free_count + sched.tree.held_pages(tier.tier, pool) == p.size, pool
    assert sched.tree.held_pages(Tier.HOST, "mamba") > 0
    assert sched.tree.held_pages(Tier.HOST, "swa") > 0
    l1 = simulate(variants["L1 hybrid-aware"], name="L1 hybrid-aware")
    reused = [sum(r["device_hit"] + r["host_hit"] for r in x.records) for x in (l1, res)]
    assert reused[1] > 1.5 * reused[0] and sum(r["host_hit"] for r in res.records) > 0
