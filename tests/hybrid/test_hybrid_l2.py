"""Hybrid models with L2 in the simulated scheduler (``track_components`` + L2).

With an L1 too small to keep anything and an L2 that keeps everything, one request at a
time reuses exactly what an L1 holding everything reuses, from L2 (every component loaded
in the first slice); the replica's invariants hold and every pool balances; under
pressure on both tiers the per-component L2 budgets hold and every request finishes.
"""

from __future__ import annotations

import random

import pytest
import simpy
from hybrid_toys import PAGE, drive, one_at_a_time, tiny_model
from test_hybrid_scheduler import branching_prompts

from hicache.config import CacheConfig
from hicache.runtime.handles import Kind, Tier
from hicache.runtime.state import host_state_pool_sizes
from hicache.scheduler.scheduler import Scheduler, SchedulerConfig
from hicache.tree.invariants import check_tree
from hicache.workload.request import Request
from sim.runtime import SimRuntime


def hybrid_l2_system(model, *, full: int, swa: int, mamba: int, ratio: float,  # noqa: ANN001
                     write: str = "write_through", max_running: int = 1
                     ) -> tuple[simpy.Environment, SimRuntime, Scheduler]:
    env = simpy.Environment()
    device = {Kind.FULL: full, Kind.SWA: swa, Kind.MAMBA: mamba}
    host_full = int(full * ratio)
    rt = SimRuntime(env, profile="h100-sxm", model=model, page_size=PAGE,
                    device_pages=device,
                    host_pages={Kind.FULL: host_full, **host_state_pool_sizes(device, host_full)})
    cache = CacheConfig(page_size=PAGE, device_tokens=full * PAGE, hicache_ratio=ratio,
                        enable_hierarchical_cache=True, hicache_write_policy=write,
                        load_back_threshold=0)
    cfg = SchedulerConfig(max_running_requests=max_running, chunked_prefill_size=64,
                          track_components=True)
    return env, rt, Scheduler(cache, rt.info(), cfg)


def check_pages(sched: Scheduler, rt: SimRuntime) -> None:
    """The tree's invariants, and every page it holds on either tier allocated in the
    runtime's pool of that tier (no use after free)."""
    check_tree(sched.tree)
    for node in sched.tree.nodes.values():
        for attr, tier in (("device", rt.device), ("host", rt.host)):
            for ext in getattr(node, attr).values():
                assert all(tier[ext.pool].is_allocated(p) for p in ext.pages()), (node, ext)


def balanced(rt: SimRuntime, sched: Scheduler) -> bool:
    return all(p.free_count + sched.tree.held_pages(tier.tier, name) == p.size
               for tier in (rt.device, rt.host) for name, p in tier.pools.items())


@pytest.mark.parametrize("seed", [0, 2, 4])
def test_l2_reuses_what_an_l1_holding_everything_reuses(seed: int):
    model = tiny_model()
    prompts = branching_prompts(seed, 24)
    env, rt, big = hybrid_l2_system(model, full=4096, swa=4096, mamba=512, ratio=2)
    drive(env, rt, big, one_at_a_time(*prompts))
    env, rt, small = hybrid_l2_system(model, full=24, swa=24, mamba=6, ratio=200)
    drive(env, rt, small, one_at_a_time(*prompts))
    reused = [r["device_hit"] + r["host_hit"] for r in big.records()]
    assert [r["host_hit"] for r in big.records()] == [0] * len(prompts)
    assert reused == [r["device_hit"] + r["host_hit"] for r in small.records()]
    assert sum(r["host_hit"] for r in small.records()) > 0
    loads = [d for d in small.decisions if d.kind == "load"]
    assert loads and all(d.tokens > 0 for d in loads)
    check_pages(small, rt)
    assert balanced(rt, small)


@pytest.mark.parametrize("write", ["write_through", "write_back"])
def test_state_host_pools_stay_within_budget_under_pressure(write: str):
    """Many requests at once, L1 and L2 both short: every component is evicted on both
    tiers, the runtime never runs out, and every request finishes."""
    rng = random.Random(7)
    prompts = branching_prompts(11, 40)
    reqs = [Request(i, rng.uniform(0, 0.002), p, rng.randint(2, 6))
            for i, p in enumerate(prompts)]
    env, rt, sched = hybrid_l2_system(tiny_model(), full=96, swa=64, mamba=10, ratio=1.5,
                                      write=write, max_running=3)
    drive(env, rt, sched, reqs)
    recs = sched.records()
    assert all(r["finish"] is not None for r in recs)
    assert sum(r["host_hit"] for r in recs) > 0
    check_pages(sched, rt)
    assert balanced(rt, sched)
    for pool in (Kind.SWA, Kind.MAMBA):
        assert sched.kv.budget.host_pool_free(pool) >= 0
        assert sched.tree.held_pages(Tier.HOST, pool) > 0
