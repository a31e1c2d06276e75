"""PagePool.check (the runtime free list's invariant, used by sim.invariants)."""

from __future__ import annotations

import pytest

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


def test_a_tier_s_pools_by_kind_and_a_missing_one_named() -> None:
    """TierPools is a dict of its pools (a lookup, no call); a pool it lacks raises
    ValueError naming the tier and the pools it has, and adds nothing."""
    from sim.pools import TierPools

    tier = TierPools(Tier.HOST, {Kind.FULL: 8, Kind.SWA: 4})
    assert tier[Kind.FULL].size == 8 and tier[Kind.SWA].pool is Kind.SWA
    assert tier.pools is tier and tier.free_counts() == {Kind.FULL: 8, Kind.SWA: 4}
    with pytest.raises(ValueError, match=r"L2 has no pool 'mamba' \(pools: \['full', 'swa'\]\)"):
        tier[Kind.MAMBA]
    assert set(tier) == {Kind.FULL, Kind.SWA}
