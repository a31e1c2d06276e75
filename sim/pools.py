"""Per-pool page free lists of one tier (the runtime owns placement).

Invariant: every page id in 0..size-1 is either free or allocated, never both; allocating
beyond the free count raises :class:`CapacityError` before anything changes; freeing a page
that is not allocated raises ValueError. Allocation hands out the lowest free ids first,
as the torch runtime's allocator does (so both issue the same copy calls for the same
plans: a run of pages contiguous on both sides is one call), and fresh pools hand out
contiguous runs.

Capacity is accounted, not materialised (:class:`hicache.runtime.page_ids.PageIds`,
``lowest``): memory grows with the pages used, not with ``size``. Ablation ``page_order``
hands out the most recently freed pages first instead (``lifo``, the simulator's order
before it followed the torch runtime).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from hicache.runtime.handles import Kind, Tier
from hicache.runtime.interface import CapacityError  # one type for every runtime
from hicache.runtime.page_ids import PageIds, Run, pages_of, runs_of

__all__ = ["CapacityError", "PagePool", "TierPools"]


class PagePool:
    def __init__(self, tier: Tier, pool: Kind, size: int,
                 order: Literal["lowest", "lifo"] = "lowest") -> None:
        if size < 0:
            raise ValueError(f"pool '{pool}' size must be >= 0")
        self.tier, self.pool, self.size = tier, pool, size
        self._ids = PageIds(size, order)
        self._lowest = order == "lowest"  # (free_runs: checked as given)
        self.takes = 0  # allocations so far (sim.steady: pages placed since a count)

    @property
    def free_count(self) -> int:
        return self._ids.free

    @property
    def used_count(self) -> int:
        return self.size - self._ids.free

    def allocate(self, n: int) -> list[int]:
        return pages_of(self.allocate_runs(n))

    def allocate_runs(self, n: int) -> list[Run]:
        """:meth:`allocate`'s pages as runs ``(start, length)`` in hand-out order,
        coalesced (:meth:`PageIds.take_runs`)."""
        if n > self._ids.free:
            raise CapacityError(
                f"{self.tier.value} pool '{self.pool}': {n} pages requested, "
                f"{self.free_count} of {self.size} free (allocation not accounted for)")
        self.takes += 1
        return self._ids.take_runs(n) if n > 0 else []

    def free(self, pages: Iterable[int]) -> None:
        """Free ``pages``, all or none: each must be allocated and listed once."""
        self.free_runs(runs_of(pages))

    def free_runs(self, runs: Sequence[Run], *, checked: bool = False) -> None:
        """Free the pages of ``runs`` ``(start, length)``, all or none. ``checked``: the
        caller proved every page allocated and listed once (a prepare's plan check,
        :func:`sim.validate.check_plan`), so they are not checked twice."""
        ids = self._ids
        if checked:
            ids.give_runs(runs, checked=True)
            return
        if self._lowest and ids.give_checked(runs):
            return  # each page checked as it was given: one pass
        p = ids.bad_runs(runs)  # (a refusal changed nothing)
        if p is not None:
            raise ValueError(f"{self.tier.value} pool '{self.pool}': page {p} is not "
                             "allocated")
        ids.give_runs(runs, checked=True)  # bad_runs found nothing

    def give_checked(self, runs: Sequence[Run]) -> bool:
        """Free ``runs`` checking each as it is freed (``lowest`` pools only): True when
        every page was allocated and listed once; else False and nothing changed
        (:meth:`PageIds.give_checked`)."""
        return self._ids.give_checked(runs)

    def take_given(self, runs: Sequence[Run]) -> None:
        """Undo a :meth:`give_checked` of ``runs`` that returned True."""
        self._ids.take_given(runs)

    def bad_runs(self, runs: Sequence[Run]) -> int | None:
        """A page of ``runs`` ``(start, length)`` that is not allocated or is listed twice,
        else None (what :meth:`free_runs` refuses)."""
        return self._ids.bad_runs(runs)

    def unallocated_in(self, start: int, n: int) -> int | None:
        """The first page of ``start .. start + n - 1`` that is not allocated, else None."""
        return self._ids.unused_in(start, n)

    def is_allocated(self, page: int) -> bool:
        return self._ids.is_used(page)

    def check(self) -> None:
        """The free list's invariant (module doc); AssertionError naming the pool."""
        try:
            self._ids.check()
        except AssertionError as e:
            raise AssertionError(f"{self.tier.value} pool '{self.pool}': {e}") from None


class TierPools(dict[Kind, PagePool]):
    """The pools of one tier, by component: a dict (``pools[kind]`` is a dict lookup, no
    call: every placement and check reads one), whose missing pool raises ValueError
    naming the tier's pools. ``pools``: the same mapping (itself)."""

    def __init__(self, tier: Tier, sizes: dict[Kind, int],
                 order: Literal["lowest", "lifo"] = "lowest") -> None:
        super().__init__((kind, PagePool(tier, kind, n, order)) for kind, n in sizes.items())
        self.tier = tier

    @property
    def pools(self) -> dict[Kind, PagePool]:
        return self

    def __missing__(self, pool: Kind) -> PagePool:
        raise ValueError(f"{self.tier.value} has no pool '{pool}' "
                         f"(pools: {sorted(map(str, self))})")

    def free_counts(self) -> dict[Kind, int]:
        return {name: p.free_count for name, p in self.pools.items()}
