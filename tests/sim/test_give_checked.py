"""Frees checked as they are given (``PageIds.give_checked``, what a prepare's frees and
releases use when pools hand out the lowest page first) accept exactly what the check
then give accepted (:meth:`PageIds.bad_runs`, then :meth:`PageIds.give_runs`), leave the
pool as that did, and leave it untouched when they refuse (or when the capacity check
after them refuses the plan: ``take_given``)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as hs
from simtoys import make_runtime

from hicache.runtime.handles import CacheExtentRef, Kind, Tier, extent_of_runs
from hicache.runtime.interface import BatchPlan, CapacityError, Phase, Release, RequestSlice
from hicache.runtime.page_ids import PageIds, Run
from sim.pools import PagePool

PAGE = 16


def _state(ids: PageIds) -> tuple:
    return (list(ids._starts), list(ids._ends), bytes(ids._used[:ids._fresh]), ids._fresh,
            ids._n_runs, ids.free)


def _pool(steps: list[tuple[bool, int]]) -> tuple[PageIds, PageIds, list[Run]]:
    """Two equal pools after ``steps`` (take n, or give back a run held), and the runs
    held."""
    a, b = PageIds(120, "lowest"), PageIds(120, "lowest")
    held: list[Run] = []
    for take, n in steps:
        if take and n <= a.free:
            got = a.take_runs(n)
            assert b.take_runs(n) == got
            held += got
        elif held:
            run = held.pop(n % len(held))
            a.give_runs([run])
            b.give_runs([run])
    return a, b, held


runs_asked = hs.lists(hs.tuples(hs.integers(-2, 125), hs.integers(1, 9)), max_size=12)


@settings(max_examples=400)
@given(hs.lists(hs.tuples(hs.booleans(), hs.integers(1, 30)), max_size=40), hs.data())
def test_give_checked_accepts_what_the_check_accepts_and_gives_the_same(steps, data) -> None:
    """Runs drawn from the pages held (valid, or listing a page twice) or anywhere (pages
    free or never handed out): accepted iff ``bad_runs`` finds nothing, then the pool is
    the twin's after ``give_runs``; refused: the pool as it was. ``take_given`` undoes an
    accepted give."""
    a, b, held = _pool(steps)
    pick = hs.sampled_from(held) if held else hs.nothing()
    mine = data.draw(hs.lists(pick, max_size=8, unique=True)) if held else []
    parts = [(s + k, min(n - k, m)) for (s, n) in mine
             for k, m in [data.draw(hs.tuples(hs.integers(0, n - 1), hs.integers(1, n)))]]
    runs = parts + data.draw(runs_asked if data.draw(hs.booleans()) else hs.just([]))
    if parts and data.draw(hs.booleans()):
        runs.append(data.draw(hs.sampled_from(parts)))  # a page listed twice
    runs = data.draw(hs.permutations(runs))
    before = _state(a)
    ok = a.give_checked(runs)
    assert ok == (b.bad_runs(runs) is None)
    if not ok:
        assert _state(a) == before
        return
    b.give_runs(runs)
    assert _state(a) == _state(b)
    a.check()
    a.take_given(runs)
    assert _state(a) == before
    a.check()


@pytest.fixture
def rt(profile, model):
    return make_runtime(simpy.Environment(), profile, model,
                        device_pages={Kind.FULL: 12}, host_pages={Kind.FULL: 12})


def _pools(rt) -> tuple:
    return tuple(_state(rt.tier(t)[Kind.FULL]._ids) for t in (Tier.DEVICE, Tier.HOST))


def _ext(rt, tier: Tier, runs: list[Run]) -> CacheExtentRef:
    return extent_of_runs(rt.runtime_id, rt.generation, tier, runs, Kind.FULL)


def test_a_refused_free_in_a_later_pool_leaves_the_earlier_pools_untouched(rt) -> None:
    """A plan's frees are given pool by pool: when the L1 pool's pass finds a page freed
    twice after the L2 pool's frees were given, both pools are as they were, and the
    plan is refused with the message the check before giving gave."""
    for tier in (Tier.HOST, Tier.DEVICE):
        rt.tier(tier)[Kind.FULL].allocate_runs(8)
    before = _pools(rt)
    plan = BatchPlan(5, frees=(_ext(rt, Tier.HOST, [(0, 3)]), _ext(rt, Tier.DEVICE, [(2, 2)]),
                               _ext(rt, Tier.DEVICE, [(3, 1)])))
    with pytest.raises(ValueError, match="L1 page 3 of pool 'full' is freed twice in batch 5"):
        rt.prepare_batch(plan)
    assert _pools(rt) == before
    plan = BatchPlan(6, frees=(_ext(rt, Tier.HOST, [(0, 3)]), _ext(rt, Tier.DEVICE, [(6, 4)])))
    with pytest.raises(ValueError, match="L1 page 8 of pool 'full' is not allocated"):
        rt.prepare_batch(plan)
    assert _pools(rt) == before


def test_a_capacity_refusal_takes_the_given_frees_and_releases_back(rt) -> None:
    """The frees and a release's pages are given before the capacity check; when it
    refuses the plan (with the count the pages they return make), every pool is as it
    was and the row is still open; the same plan within capacity is placed."""
    env = rt.env
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 4 * PAGE),
                                              RequestSlice(2, Phase.PREFILL, 0, 4 * PAGE))))
    rt.execute_batch(h)
    env.run()
    one, two = (s.request for s in h.slices)
    rt.host[Kind.FULL].allocate_runs(5)
    before = _pools(rt)
    free = rt.device[Kind.FULL].free_count + 4
    with pytest.raises(CapacityError, match=f"needs {free + 1} L1 pages of pool 'full', "
                                            f"{free} free"):
        rt.prepare_batch(BatchPlan(2, slices=(
            RequestSlice(1, Phase.PREFILL, 4 * PAGE, (free + 1) * PAGE, request=one),),
            releases=(Release(two),), frees=(_ext(rt, Tier.HOST, [(1, 2)]),)))
    assert _pools(rt) == before
    assert sorted(rt.rows) == [one.slot_id, two.slot_id]
    with pytest.raises(CapacityError, match=f"needs 17 L1 pages of pool 'full', {free} free"):
        rt.prepare_batch(BatchPlan(3, slices=(RequestSlice(3, Phase.PREFILL, 0, 17 * PAGE),),
                                   releases=(Release(two),),
                                   frees=(_ext(rt, Tier.HOST, [(1, 2)]),)))  # a first slice
    assert _pools(rt) == before
    h2 = rt.prepare_batch(BatchPlan(4, slices=(
        RequestSlice(1, Phase.PREFILL, 4 * PAGE, free * PAGE, request=one),),
        releases=(Release(two),), frees=(_ext(rt, Tier.HOST, [(1, 2)]),)))
    assert h2.slices[0].kv.num_pages == 4 + free
    assert rt.device[Kind.FULL].free_count == 0 and rt.host[Kind.FULL].free_count == 9


@settings(max_examples=200)
@given(hs.lists(hs.tuples(hs.booleans(), hs.integers(1, 30)), max_size=40), runs_asked,
       hs.booleans())
def test_a_pools_unchecked_free_is_the_check_then_the_give(steps, asked, twice) -> None:
    """``PagePool.free_runs`` of runs no one checked (a prefetch's unused reservation)
    frees them checking as it gives: it refuses what ``bad_runs`` refuses, naming the page
    it names, changing nothing, and else leaves the pool the check-then-give leaves."""
    a, b, held = _pool(steps)
    pool = PagePool(Tier.HOST, Kind.FULL, 120)
    pool._ids = a
    runs = held[:3] + asked + (held[:1] if twice else [])
    before = _state(a)
    bad = b.bad_runs(runs)
    if bad is not None:
        with pytest.raises(ValueError, match=f"L2 pool 'full': page {bad} is not allocated"):
            pool.free_runs(runs)
        assert _state(a) == before
        return
    pool.free_runs(runs)
    b.give_runs(runs)
    assert _state(a) == _state(b)
