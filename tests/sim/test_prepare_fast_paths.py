"""The shortcuts of plan validation and placement give what the general code gives: a
release whose keep is the request's first own pages (``_after_prefix``), a capacity check
that skips later slices, the one-pass duplicate check, and the in-line placement of a
plan of later slices only."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as hs
from simtoys import host_copy_of_prefill, make_runtime, split_pages, toy_profile

from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, StaleHandleError, Tier
from hicache.runtime.interface import (
    BackupIntent,
    BatchPlan,
    LoadIntent,
    Phase,
    Release,
    RequestSlice,
)
from hicache.runtime.page_ids import runs_minus
from sim.pools import CapacityError, PagePool
from sim.validate import _after_prefix, check_plan

PAGE = 16


def _pages(runs) -> list[int]:
    return [p for s, n in runs for p in range(s, s + n)]




own_pages = hs.lists(hs.integers(0, 60), unique=True, max_size=24)


@given(own_pages, hs.data())
def test_a_prefix_keep_leaves_what_runs_minus_leaves(pages, data) -> None:
    own = split_pages(pages)
    k = data.draw(hs.integers(0, len(pages)))
    cuts = data.draw(hs.lists(hs.integers(0, max(k - 1, 0)), max_size=4))
    keep = split_pages(pages[:k], cuts)
    rest = _after_prefix(own, keep)
    assert rest == runs_minus(own, keep)
    assert _pages(rest) == pages[k:]


@given(own_pages, hs.lists(hs.integers(0, 60), unique=True, max_size=12), hs.data())
def test_any_other_keep_is_left_to_the_general_check(pages, kept, data) -> None:
    """None unless keep is exactly the first own pages in order (a wrong shortcut would
    skip the check that keep holds own pages only, or free the wrong pages)."""
    own = split_pages(pages)
    cuts = data.draw(hs.lists(hs.integers(0, max(len(kept) - 1, 0)), max_size=4))
    keep = split_pages(kept, cuts)
    rest = _after_prefix(own, keep)
    if kept == pages[:len(kept)]:
        assert rest is not None and _pages(rest) == pages[len(kept):]
    else:
        assert rest is None


def test_a_release_keeping_a_non_prefix_frees_the_rest(env, profile, model) -> None:
    """A keep of own pages out of order or with a hole takes the general path."""
    rt = make_runtime(env, profile, model)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 4 * PAGE),)))
    rt.execute_batch(h)
    env.run()
    kv = h.slices[0].kv
    pages = list(kv.pages())
    keep = kv.with_pages([pages[1], pages[3]])
    used = rt.device[Kind.FULL].used_count
    h2 = rt.prepare_batch(BatchPlan(2, releases=(Release(h.slices[0].request, keep=keep),)))
    rt.execute_batch(h2)
    env.run()
    assert rt.device[Kind.FULL].used_count == used - 2
    assert [rt.device[Kind.FULL].is_allocated(p) for p in pages] == [False, True, False, True]


def test_a_request_twice_in_a_plan_is_refused(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    with pytest.raises(ValueError, match="request 7 appears twice in batch 1"):
        rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(7, Phase.PREFILL, 0, PAGE),
                                              RequestSlice(8, Phase.PREFILL, 0, PAGE),
                                              RequestSlice(7, Phase.PREFILL, 0, PAGE))))
    assert not rt.rows


def test_capacity_counts_a_first_slices_loads_beside_later_slices(env, profile, model) -> None:
    """Later slices need only new pages; a first slice in the same plan still counts its
    loads (skipping the slice loop for every plan would pass this plan and fail later)."""
    rt = make_runtime(env, profile, model, device_pages={Kind.FULL: 8})
    host = host_copy_of_prefill(rt, env, rid=1, tokens=4 * PAGE, batch_id=0)
    h = rt.prepare_batch(BatchPlan(10, slices=(RequestSlice(2, Phase.PREFILL, 0, 3 * PAGE),)))
    rt.execute_batch(h)
    env.run()
    later = RequestSlice(2, Phase.DECODE, 3 * PAGE, 1, request=h.slices[0].request)
    first = RequestSlice(3, Phase.PREFILL, 4 * PAGE, PAGE, loads=(LoadIntent(host),))
    with pytest.raises(CapacityError, match="needs 6 L1 pages of pool 'full', 5 free"):
        rt.prepare_batch(BatchPlan(11, slices=(later, first)))


def _two_open_requests(env, profile, model):
    rt = make_runtime(env, profile, model)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, PAGE),
                                              RequestSlice(2, Phase.PREFILL, 0, PAGE - 1))))
    rt.execute_batch(h)
    env.run()
    return rt, [s.request for s in h.slices]


def test_a_plan_of_later_slices_is_placed_as_in_a_mixed_plan(profile, model) -> None:
    """The in-line path for plans of later slices only (decode steps) places pages,
    returns slices and records shapes as the per-slice path of a mixed plan does."""
    def later(one, two):
        return (RequestSlice(1, Phase.DECODE, PAGE, 1, request=one),  # a new page
                RequestSlice(2, Phase.PREFILL, PAGE - 1, 2 * PAGE, request=two))

    env_a, env_b = simpy.Environment(), simpy.Environment()
    a, (a1, a2) = _two_open_requests(env_a, profile, model)
    b, (b1, b2) = _two_open_requests(env_b, profile, model)
    ha = a.prepare_batch(BatchPlan(2, slices=later(a1, a2)))
    hb = b.prepare_batch(BatchPlan(2, slices=(*later(b1, b2),
                                              RequestSlice(3, Phase.PREFILL, 0, PAGE))))
    assert [list(s.kv.pages()) for s in ha.slices] == [list(s.kv.pages())
                                                       for s in hb.slices[:2]]
    assert [s.kv.num_pages for s in ha.slices] == [2, 3]
    st_a, st_b = a._prepared[2], b._prepared[2]
    assert (st_a.prefills, st_a.decodes) == ([(2 * PAGE, PAGE - 1)], [PAGE])
    assert (st_b.prefills, st_b.decodes) == ([(2 * PAGE, PAGE - 1), (PAGE, 0)], [PAGE])
    assert a.batch_shapes[2] == {"requests": 2, "tokens": 2 * PAGE + 1,
                                 "context_tokens": 2 * PAGE - 1, "load_bytes": 0}


def _cached(env, profile, model, pages: int = 4):
    """A runtime with one request's ``pages`` own L1 pages, released to the cache."""
    rt = make_runtime(env, profile, model)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, pages * PAGE),)))
    rt.execute_batch(h)
    env.run()
    kv = h.slices[0].kv
    h2 = rt.prepare_batch(BatchPlan(2, releases=(Release(h.slices[0].request, keep=kv),)))
    rt.execute_batch(h2)
    env.run()
    return rt, kv


def test_bad_frees_are_named_as_the_run_by_run_check_names_them(env, profile, model) -> None:
    """Frees are checked per pool in one pass over their runs; a bad one is then named
    as before: an unallocated page (whichever free has it) before a page freed twice."""
    rt, kv = _cached(env, profile, model)
    first, second = kv.slice(0, 2), kv.slice(2, 4)
    free = rt.prepare_batch(BatchPlan(-1, frees=(second,)))  # pages 2, 3 leave the pool
    rt.execute_batch(free)
    env.run()
    used = rt.device[Kind.FULL].used_count
    gone = list(second.pages())[0]
    with pytest.raises(ValueError, match=f"free of 2 pages: L1 page {gone} of pool 'full' is "
                                         r"not allocated \(freed before\?\)"):
        rt.prepare_batch(BatchPlan(-2, frees=(first, first, second)))  # twice, and gone
    twice = list(first.pages())[0]
    with pytest.raises(ValueError, match=f"L1 page {twice} of pool 'full' is freed twice "
                                         "in batch -3"):
        rt.prepare_batch(BatchPlan(-3, frees=(first, first.slice(0, 1))))
    assert rt.device[Kind.FULL].used_count == used  # nothing changed


def test_a_plan_allocating_nothing_skips_the_capacity_sums(env, profile, model) -> None:
    """A plan of later slices that need no new page and no copy into L2 allocates nothing:
    no pool can be short, however full; one that needs a page is still refused."""
    rt = make_runtime(env, profile, model, device_pages={Kind.FULL: 2})
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, PAGE + 1),)))
    rt.execute_batch(h)
    env.run()
    assert rt.device[Kind.FULL].free_count == 0
    req = h.slices[0].request
    h2 = rt.prepare_batch(BatchPlan(2, slices=(
        RequestSlice(1, Phase.DECODE, PAGE + 1, 1, request=req),)))  # within page 2
    rt.execute_batch(h2)
    env.run()
    with pytest.raises(CapacityError, match="needs 1 L1 pages of pool 'full', 0 free"):
        rt.prepare_batch(BatchPlan(3, slices=(
            RequestSlice(1, Phase.DECODE, 2 * PAGE, 1, request=req),)))  # a third page


def test_later_slices_beyond_the_free_pages_count_what_the_plan_returns(
        env, profile, model) -> None:
    """A plan of later slices alone needs only new L1 pages: when the pool's free pages
    fall short, the pages its releases and frees return first still count (they apply
    before the allocation), and past them the plan is refused, changing nothing."""
    rt = make_runtime(env, profile, model, device_pages={Kind.FULL: 4})
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 2 * PAGE),
                                              RequestSlice(2, Phase.PREFILL, 0, PAGE))))
    rt.execute_batch(h)
    env.run()
    one, two = (s.request for s in h.slices)
    assert rt.device[Kind.FULL].free_count == 1

    def grow(tokens: int) -> RequestSlice:  # request 1's next chunk
        return RequestSlice(1, Phase.PREFILL, 2 * PAGE, tokens, request=one)

    with pytest.raises(CapacityError, match="needs 3 L1 pages of pool 'full', 2 free"):
        rt.prepare_batch(BatchPlan(2, slices=(grow(2 * PAGE + 1),),
                                   releases=(Release(two),)))
    assert sorted(rt.rows) == [one.slot_id, two.slot_id]  # nothing changed
    assert rt.device[Kind.FULL].free_count == 1
    h2 = rt.prepare_batch(BatchPlan(2, slices=(grow(2 * PAGE),), releases=(Release(two),)))
    assert h2.slices[0].kv.num_pages == 4 and rt.device[Kind.FULL].free_count == 0


def test_later_slices_count_the_l1_pages_a_free_returns(env, profile, model) -> None:
    """The same count with a free of cached L1 pages instead of a release."""
    rt, kv = _cached(env, profile, model, pages=2)
    h = rt.prepare_batch(BatchPlan(3, slices=(RequestSlice(2, Phase.PREFILL, 0, PAGE),)))
    rt.execute_batch(h)
    env.run()
    free = rt.device[Kind.FULL].free_count
    req = h.slices[0].request

    def grow(pages: int) -> RequestSlice:
        return RequestSlice(2, Phase.PREFILL, PAGE, pages * PAGE, request=req)

    with pytest.raises(CapacityError, match=f"needs {free + 3} L1 pages of pool 'full', "
                                            f"{free + 2} free"):
        rt.prepare_batch(BatchPlan(4, slices=(grow(free + 3),), frees=(kv,)))
    h2 = rt.prepare_batch(BatchPlan(4, slices=(grow(free + 2),), frees=(kv,)))
    assert h2.slices[0].kv.num_pages == free + 3
    assert rt.device[Kind.FULL].free_count == 0


@pytest.mark.parametrize("order", ["lowest", "lifo"])
def test_a_plans_frees_leave_each_pool_as_frees_extent_by_extent_do(env, model, order) -> None:
    """A prepare frees each pool's runs of the plan's frees in one call when the pools
    hand out the lowest page first (heap pushes in the same order: the same pool); with
    ``page_order`` ablated (lifo) each extent's first page must end on top, extent by
    extent, as a twin pool freeing them one at a time shows (and the next pages taken)."""
    profile = replace(toy_profile(), ablate=frozenset({"page_order"}) if order == "lifo"
                      else frozenset())
    rt = make_runtime(env, profile, model, device_pages={Kind.FULL: 40},
                      host_pages={Kind.FULL: 40})
    twins = {tier: PagePool(tier, Kind.FULL, 40, order) for tier in (Tier.DEVICE, Tier.HOST)}
    for tier in twins:
        assert rt.tier(tier)[Kind.FULL].allocate(30) == twins[tier].allocate(30)

    def ext(tier: Tier, runs: list[tuple[int, int]]) -> CacheExtentRef:
        return CacheExtentRef(rt.runtime_id, rt.generation, tier,
                              tuple(PageRun(s, n) for s, n in runs), Kind.FULL)

    frees = (ext(Tier.DEVICE, [(0, 2), (5, 1)]), ext(Tier.HOST, [(3, 4)]),
             ext(Tier.DEVICE, [(10, 2), (2, 1)]), ext(Tier.HOST, [(20, 1), (8, 2)]),
             ext(Tier.DEVICE, [(25, 3)]))
    rt.execute_batch(rt.prepare_batch(BatchPlan(-1, frees=frees)))
    for e in frees:
        twins[e.tier].free_runs([(r.first_page, r.page_count) for r in e.page_runs])
    for tier, twin in twins.items():
        pool = rt.tier(tier)[Kind.FULL]
        assert pool.free_count == twin.free_count
        assert [pool.allocate(1) for _ in range(pool.free_count)] == \
            [twin.allocate(1) for _ in range(twin.free_count)]


def test_execute_checks_a_handle_that_is_not_the_one_prepare_returned(env, profile,
                                                                       model) -> None:
    """The very handle prepare returned executes without its generation re-read; a copy
    is checked: one of another runtime or generation is stale (while its batch waits,
    prepared), an equal one by value executes the batch."""
    rt = make_runtime(env, profile, model)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, PAGE),)))
    for stale in (replace(h, runtime_id="another"), replace(h, generation=h.generation + 1)):
        with pytest.raises(StaleHandleError):
            rt.execute_batch(stale)
    rt.execute_batch(replace(h))  # equal, not identical
    with pytest.raises(ValueError, match="not prepared"):
        rt.execute_batch(h)
    env.run()
    assert [c.batch_id for c in rt.poll()] == [1]


@pytest.mark.parametrize("layerwise", [True, False])
def test_a_batchs_load_bytes_are_its_load_groups_bytes(env, profile, model,
                                                       layerwise) -> None:
    """The shape's ``load_bytes`` (the bytes the prepare accounted for its loads) are
    what its load groups hold, summed over the layers, for two loads in one batch; a
    batch without loads records none."""
    rt = make_runtime(env, profile, model, layerwise=layerwise)
    one = host_copy_of_prefill(rt, env, rid=1, tokens=3 * PAGE, batch_id=0)
    two = host_copy_of_prefill(rt, env, rid=2, tokens=2 * PAGE, batch_id=1)
    h2d = rt.bytes_accounted["h2d"]
    rt.prepare_batch(BatchPlan(2, slices=(
        RequestSlice(3, Phase.PREFILL, 3 * PAGE, 1, loads=(LoadIntent(one),)),
        RequestSlice(4, Phase.PREFILL, 2 * PAGE, 1, loads=(LoadIntent(two),)))))
    groups = rt._prepared[2].load_groups  # noqa: SLF001
    assert len(groups) == (model.num_layers if layerwise else 1)
    shape = rt.batch_shapes[2]
    assert shape["load_bytes"] == sum(g.nbytes for g in groups) == \
        rt.bytes_accounted["h2d"] - h2d > 0
    assert shape == {"requests": 2, "tokens": 2, "context_tokens": 5 * PAGE,
                     "load_bytes": shape["load_bytes"]}
    assert rt.batch_shapes[0]["load_bytes"] == 0


def test_frees_that_the_plans_own_backups_read_are_refused(env, profile, model) -> None:
    """A plan whose frees (extents of any runs, in any order) hold a page that one of its
    backups reads is refused, naming the free and the page, whatever the runs look like;
    any other such plan passes. Checked against the pages themselves, plan by plan
    (a check that missed a shared page, or saw one where there is none, would show)."""
    rt, kv = _cached(env, profile, model, pages=12)
    pages = list(kv.pages())
    rng = random.Random(7)
    seen = Counter()
    for _ in range(400):
        order = rng.sample(pages, rng.randint(1, len(pages)))
        cuts = sorted(rng.sample(range(1, len(order)), min(len(order) - 1, rng.randint(0, 3))))
        frees = tuple(kv.with_pages(order[a:b])
                      for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True))
        reads = [kv.with_pages(rng.sample(pages, rng.randint(1, 4)))
                 for _ in range(rng.randint(1, 2))]
        plan = BatchPlan(9, frees=frees, backups=tuple(BackupIntent(r, job_id=i)
                                                       for i, r in enumerate(reads)))
        read = {p for r in reads for p in r.pages()}
        hit = [(i, p) for i, e in enumerate(frees) for p in e.pages() if p in read]
        if hit:
            i, p = min(hit, key=lambda h: (h[0], list(frees[h[0]].pages()).index(h[1])))
            with pytest.raises(ValueError, match=f"free of {frees[i].num_pages} pages: plan "
                                                 "frees L1 page"):
                check_plan(rt.memory, plan, False)
            seen["refused"] += 1
        else:
            check_plan(rt.memory, plan, False)
            seen["passed"] += 1
    assert seen["refused"] > 50 and seen["passed"] > 50
    assert rt.device[Kind.FULL].used_count == 12  # a check changes nothing


def test_a_release_whose_freed_pages_a_backup_reads_is_refused(env, profile, model) -> None:
    """The pages a release frees (its own pages the cache did not keep) count among the
    plan's frees: a backup of them in the same plan is refused, naming the release."""
    rt = make_runtime(env, profile, model)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(7, Phase.PREFILL, 0, 4 * PAGE),)))
    rt.execute_batch(h)
    env.run()
    kv, req = h.slices[0].kv, h.slices[0].request
    keep = kv.slice(0, 2)
    for read, refused in ((kv.slice(1, 3), True), (kv.slice(0, 2), False),
                          (kv.slice(3, 4), True)):
        plan = BatchPlan(2, releases=(Release(req, keep=keep),),
                         backups=(BackupIntent(read, job_id=1),))
        if refused:
            with pytest.raises(ValueError, match="release of request 7: plan frees L1 page"):
                check_plan(rt.memory, plan, False)
        else:
            check_plan(rt.memory, plan, False)
    h2 = rt.prepare_batch(BatchPlan(2, releases=(Release(req, keep=keep),),
                                    backups=(BackupIntent(keep, job_id=1),)))
    assert h2.backups[0].num_pages == 2
