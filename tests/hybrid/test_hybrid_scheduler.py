"""The simulated scheduler with ``track_components``: SWA and MAMBA pools of a hybrid model.

With one request at a time and an L1 large enough that nothing is evicted, the
simulator's per-request device hits equal the zero-time hybrid replay's (the reference
for the cache semantics): reuse is bounded by the strictest component at each boundary.
Under memory pressure with several requests running, every pool balances at the end,
locked components are never evicted, and a run is reproducible.
"""

from __future__ import annotations

import random

import pytest
from hybrid_toys import PAGE, drive, hits, one_at_a_time, tiny_model, tiny_system

from hicache.config import CacheConfig
from hicache.replay.engine import ReplayCache
from hicache.runtime.handles import Tier
from hicache.scheduler.scheduler import Scheduler, SchedulerConfig
from hicache.tree.components import Kind
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

A = list(range(16))  # 4 pages of 4 tokens
EXTENDS_A = A + [100, 101, 102, 103]
SHARES_HALF_OF_A = A[:8] + [200, 201, 202, 203]

MODELS = {  # name -> (layers, sliding window in tokens)
    "full+swa+mamba": (("full", "swa", "mamba"), 8),
    "full+swa": (("full", "swa"), 12),
    "full+mamba": (("full", "mamba"), 8),
}


def replay_hits(layers: tuple[str, ...], window: int, prompts: list[list[int]]) -> list[int]:
    cache = ReplayCache(CacheConfig(page_size=PAGE, device_tokens=1 << 16),
                        swa_window=window if "swa" in layers else 0,
                        mamba_slots=1024 if "mamba" in layers else 0)
    return [cache.process(r).device_hit for r in one_at_a_time(*prompts)]


def branching_prompts(seed: int, n: int) -> list[list[int]]:
    """Each prompt: a random prefix of an earlier one (or nothing) + 1-6 fresh pages' worth
    of new tokens (so no prompt repeats another, and page ends are often partial)."""
    rng = random.Random(seed)
    prompts: list[list[int]] = []
    fresh = 10_000
    for _ in range(n):
        base = rng.choice(prompts) if prompts and rng.random() < 0.8 else []
        k = rng.randint(4, 24)
        prompts.append(base[:rng.randint(0, len(base))] + list(range(fresh, fresh + k)))
        fresh += k
    return prompts


def balance(rt, sched) -> dict[str, tuple[int, int]]:  # noqa: ANN001
    """pool -> (free + held by the tree, capacity)."""
    return {p: (rt.device[p].free_count + sched.tree.held_pages(Tier.DEVICE, p),
                rt.device[p].size) for p in rt.device.pools}


def test_mamba_reuses_only_at_a_checkpoint_like_the_replay() -> None:
    env, rt, sched = tiny_system(tiny_model(("full", "swa", "mamba"), window=8))
    drive(env, rt, sched, one_at_a_time(A, EXTENDS_A, SHARES_HALF_OF_A))
    # A left a checkpoint at 16: its continuation reuses all of A; a prompt diverging at 8
    # finds no checkpoint there
    assert hits(sched) == [0, 16, 0]


def test_without_mamba_the_shared_part_is_reused() -> None:
    env, rt, sched = tiny_system(tiny_model(("full", "swa"), window=1000))  # window > prompt
    drive(env, rt, sched, one_at_a_time(A, EXTENDS_A, SHARES_HALF_OF_A))
    assert hits(sched) == [0, 16, 8]


def test_a_short_window_keeps_swa_only_at_the_end_of_each_prompt() -> None:
    env, rt, sched = tiny_system(tiny_model(("full", "swa"), window=4))  # 1 page
    drive(env, rt, sched, one_at_a_time(A, EXTENDS_A, SHARES_HALF_OF_A))
    assert hits(sched) == [0, 16, 0]
    a_pages = [n for n in sched.tree.nodes.values() if n.key[0] == page_keys([0, 1, 2, 3], 4)[0]]
    assert a_pages and Kind.SWA not in a_pages[0].device  # a tombstone before the window


@pytest.mark.parametrize("name", list(MODELS))
def test_one_at_a_time_hits_equal_the_hybrid_replay(name: str) -> None:
    layers, window = MODELS[name]
    prompts = branching_prompts(1, 40)
    env, rt, sched = tiny_system(tiny_model(layers, window), full=4096, swa=4096, mamba=512)
    drive(env, rt, sched, one_at_a_time(*prompts))
    expected = replay_hits(layers, window, prompts)
    assert sum(expected) > 0
    assert hits(sched) == expected


def test_checkpoint_copies_cost_compute_time() -> None:
    env, rt, sched = tiny_system(tiny_model(("full", "mamba")), overlap=False)
    drive(env, rt, sched, one_at_a_time(A, EXTENDS_A))
    env2, rt2, sched2 = tiny_system(tiny_model(("full", "mamba")), overlap=False, track=False)
    drive(env2, rt2, sched2, one_at_a_time(A, EXTENDS_A))
    first = [r for r in rt.timeline.rows if r.lane == "compute"][0]
    plain = [r for r in rt2.timeline.rows if r.lane == "compute"][0]
    copy_s = rt.model.mamba_state_bytes_per_request() / rt.profile.gpu.hbm_bytes_per_s
    assert first.end - first.start == pytest.approx(plain.end - plain.start + copy_s)


def pressure_run(name: str, overlap: bool = True, seed: int = 2):  # noqa: ANN201
    layers, window = MODELS[name]
    env, rt, sched = tiny_system(tiny_model(layers, window), full=48, swa=40, mamba=9,
                                 max_running=3, overlap=overlap)
    violations: list[str] = []
    evict = sched.tree.residency.evict_device

    def checked_evict(kind, pages):  # noqa: ANN001, ANN202
        res = evict(kind, pages)
        for node in sched.tree.nodes.values():
            for k in (Kind.FULL, Kind.SWA, Kind.MAMBA):
                if node.locked(k) and k not in node.device:
                    violations.append(f"{node} lost locked {k.value}")
        return res

    sched.tree.residency.evict_device = checked_evict
    reqs = [Request(i, 0.0005 * i, p, 5) for i, p in enumerate(branching_prompts(seed, 200))]
    drive(env, rt, sched, reqs)
    return rt, sched, violations


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
@pytest.mark.parametrize("name", list(MODELS))
def test_memory_pressure_conserves_every_pool(name: str, overlap: bool) -> None:
    rt, sched, violations = pressure_run(name, overlap)
    assert len(sched.finished) == 200 and rt.open_requests() == 0
    assert any(d.kind == "evict" for d in sched.decisions), "no pressure: nothing evicted"
    assert sum(hits(sched)) > 0
    for pool, (accounted, capacity) in balance(rt, sched).items():
        assert accounted == capacity, f"{pool}: free + tree-held {accounted} != {capacity}"
    assert violations == []
    assert sched.components.own == {Kind.SWA: 0, Kind.MAMBA: 0}


def test_a_run_is_reproducible() -> None:
    a = pressure_run("full+swa+mamba")[1]
    b = pressure_run("full+swa+mamba")[1]
    assert a.records() == b.records() and a.decisions == b.decisions


def test_tracking_refuses_l3_saying_why() -> None:
    """L1 and L2 only: SWA windows and MAMBA checkpoints have no L3 path (hybrid_tiers.py)."""
    model = tiny_model()
    env, rt, _ = tiny_system(model)
    with pytest.raises(ValueError, match="track_components: L1 and L2 only"):
        Scheduler(CacheConfig(page_size=PAGE, device_tokens=1024, enable_hierarchical_cache=True,
                              hicache_storage_backend="file"),
                  rt.info(), SchedulerConfig(track_components=True, l3=True))


def test_a_request_the_state_pools_can_never_hold_is_rejected_not_stranded() -> None:
    """An SWA pool smaller than one request's window + chunk bound: rejected on arrival."""
    env, rt, sched = tiny_system(tiny_model(("full", "swa")), swa=4)
    ok, big = Request(0, 0.0, list(range(6)), 2), Request(1, 0.0, list(range(100, 200)), 2)
    drive(env, rt, sched, [ok, big])
    recs = {r["rid"]: r for r in sched.records()}
    assert recs[0]["finish"] is not None and recs[0]["rejected"] is None
    assert recs[1]["finish"] is None and recs[1]["rejected"].startswith("exceeds_swa_pool")
