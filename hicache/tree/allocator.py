"""A small page allocator that the caller owns (replay, tests).

The tree never allocates: whoever drives it owns an allocator per pool and tier. Runtimes
own their own placement; this one serves zero-time replay and tests.

Capacity is accounted, not materialised (:class:`hicache.runtime.page_ids.PageIds`):
memory grows with the pages used, not with ``capacity`` (``1e12`` tokens is fine). Order
(``order="fifo"``), as a FIFO over 0..capacity-1 with frees appended: fresh pages first,
lowest first; then freed pages in the order they were freed. ``order="fresh"`` (replay):
every allocation is one run of ids never used before, freed ids retire; no page of a
zero-time replay is memory, and which ids a request gets decides nothing (budgets count
pages; ids only tell a copy from the very same pages), so extents stay one run.
"""

from __future__ import annotations

from typing import Literal

from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, Tier, check_generation
from hicache.runtime.page_ids import PageIds, merged


class OutOfPages(RuntimeError):
    pass


class PageAllocator:
    """Hands out page ids of one (tier, pool), at most ``capacity`` in use (fifo: ids
    0..capacity-1); frees must be of its pages."""

    def __init__(self, capacity: int, *, tier: Tier = Tier.DEVICE, pool: Kind = Kind.FULL,
                 runtime_id: str = "local", generation: int = 0,
                 order: Literal["fifo", "fresh"] = "fifo") -> None:
        self._ids = PageIds(capacity, order)
        self.capacity = capacity
        self.tier, self.pool = tier, Kind(pool)
        self.runtime_id, self.generation = runtime_id, generation

    @property
    def free_pages(self) -> int:
        return self._ids.free

    @property
    def used_pages(self) -> int:
        return self.capacity - self._ids.free

    def alloc(self, n: int) -> CacheExtentRef:
        if n <= 0:
            raise ValueError(f"alloc of {n} pages")
        if n > self.free_pages:
            raise OutOfPages(
                f"{self.tier.value}/{self.pool}: need {n} pages, {self.free_pages} free")
        runs = tuple(PageRun(s, k) for s, k in merged(self._ids.take_runs(n)))
        return CacheExtentRef(self.runtime_id, self.generation, self.tier, runs, self.pool)

    def free(self, extent: CacheExtentRef) -> None:
        check_generation(extent, self.runtime_id, self.generation, "extent")
        if extent.tier is not self.tier or extent.pool is not self.pool:
            raise ValueError(f"extent of {extent.tier.value}/{extent.pool} freed to "
                             f"{self.tier.value}/{self.pool}")
        runs = extent.runs()
        p = self._ids.bad_runs(runs)
        if p is not None:
            raise ValueError(f"page {p} of {self.tier.value}/{self.pool} freed twice")
        self._ids.give_runs(runs, checked=True)
