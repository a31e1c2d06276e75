"""PagePool.check (the runtime free list's invariant, used by sim.invariants)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from hicache.runtime.handles import Kind, Tier
from sim.pools import PagePool


def test_a_pool_in_use_passes_and_a_corrupted_free_list_is_named() -> None:
    pool = PagePool(Tier.DEVICE, Kind.FULL, 1 << 40)  # accounted, not materialised
    pages = pool.allocate(10)
    pool.free(pages[2:5])
    pool.allocate(1)
    pool.check()
    pool._ids._used[pages[0]] = 0  # noqa: SLF001 - corrupt: a used page no longer marked
    with pytest.raises(AssertionError, match=r"L1 pool 'full': 7 used \+ 2 free != 10"):
        pool.check()


def test_a_page_both_free_and_used_is_caught() -> None:
    pool = PagePool(Tier.HOST, Kind.FULL, 100)
    pages = pool.allocate(4)
    pool.free(pages[:1])
    pool._ids._used[pages[0]] = 1  # noqa: SLF001 - corrupt: freed but marked used
    with pytest.raises(AssertionError, match="is free but also used"):
        pool.check()


@pytest.mark.parametrize("order", ["lifo", "lowest"])
def test_check_sees_freed_pages_in_every_free_list_order(order: str) -> None:
    pool = PagePool(Tier.DEVICE, Kind.FULL, 64, order=order)
    pages = pool.allocate(16)
    pool.free(pages[3:9])
    pool.allocate(2)
    pool.check()  # 12 used + 4 free: the freed pages count wherever the order keeps them
    assert pool.free_count == 64 - 12
    pool._ids._used[pages[0]] = 0  # noqa: SLF001 - corrupt: a used page no longer marked
    with pytest.raises(AssertionError, match=r"11 used \+ 4 free != 16"):
        pool.check()


def _bad_page_by_page(used: set[int], runs: list[tuple[int, int]]) -> int | None:
    """What bad_runs names, page by page: the first page (run order) not handed out,
    else the start of the first run (by start) that begins inside the run before it."""
    for s, n in runs:
        for p in range(s, s + n):
            if p not in used:
                return p
    ordered = sorted(runs)
    for (s0, n0), (s1, _) in zip(ordered, ordered[1:], strict=False):
        if s1 < s0 + n0:
            return s1
    return None


@given(taken=hs.lists(hs.integers(1, 8), min_size=1, max_size=8),
       freed=hs.lists(hs.integers(0, 8), max_size=3), data=hs.data())
def test_bad_runs_names_the_page_a_page_by_page_walk_names(taken, freed, data) -> None:
    """Unallocated pages (freed, never handed out, beyond the fresh mark, negative) and
    pages listed twice, by the runs a free would return: the same page as the walk. Runs
    start mostly at allocated pages, so that many pass the first check."""
    from hicache.runtime.page_ids import PageIds

    ids = PageIds(64, "lowest")
    held = [ids.take(n) for n in taken]
    for i in freed:
        if i < len(held) and held[i]:
            ids.give(held[i])
            held[i] = []
    used = {p for pages in held for p in pages}
    start = hs.sampled_from(sorted(used)) if used else hs.integers(-1, 70)
    runs = data.draw(hs.lists(hs.tuples(hs.one_of(start, start, hs.integers(-1, 70)),
                                        hs.integers(1, 4)), max_size=6))
    assert ids.bad_runs(runs) == _bad_page_by_page(used, runs)
