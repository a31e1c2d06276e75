"""scenarios/hybrid_swa_mamba.yaml's "L1 hybrid-aware" and "L1+L2 hybrid-aware" variants run
clean end to end: every request finishes, every pool balances, checkpoints stay cached;
with L2 the state components are on L2 too and reuse grows."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from hicache.runtime.handles import Kind, Tier
from hicache.scenario import load_scenario
from sim.driver import SimResult, simulate

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "hybrid_swa_mamba.yaml"


@cache
def run(variant: str) -> SimResult:
    return simulate(dict(load_scenario(SCENARIO).expand())[variant], name=variant)


def check_clean(res: SimResult) -> None:
    """Every request finished and every pool of every tier balances (free + tree-held)."""
    (rep,) = res.replicas
    rt, sched = rep.runtime, rep.scheduler
    assert all(r["finish"] is not None for r in res.records) and rt.open_requests() == 0
    for tier in (rt.device, rt.host):
        for pool, p in tier.pools.items():
            assert p.free_count + sched.tree.held_pages(tier.tier, pool) == p.size, pool


def test_hybrid_aware_variant_balances_every_pool() -> None:
    res = run("L1 hybrid-aware")
    check_clean(res)
    (rep,) = res.replicas
    assert set(rep.runtime.device.pools) == {Kind.FULL, Kind.SWA, Kind.MAMBA}
    assert sum(r["device_hit"] for r in res.records) > 0
    assert rep.scheduler.tree.held_pages(Tier.DEVICE, Kind.MAMBA) > 0  # checkpoints stay cached


def test_l1_l2_hybrid_aware_variant_balances_every_pool_on_both_tiers() -> None:
    """L2 pools per component, reuse from L2 (loads of every component), more reuse."""
    res = run("L1+L2 hybrid-aware")
    check_clean(res)
    (rep,) = res.replicas
    assert set(rep.runtime.host.pools) == {Kind.FULL, Kind.SWA, Kind.MAMBA}
    assert rep.scheduler.tree.held_pages(Tier.HOST, Kind.MAMBA) > 0
    assert rep.scheduler.tree.held_pages(Tier.HOST, Kind.SWA) > 0
    reused = [sum(r["device_hit"] + r["host_hit"] for r in x.records)
              for x in (run("L1 hybrid-aware"), res)]
    assert reused[1] > 1.5 * reused[0] and sum(r["host_hit"] for r in res.records) > 0
