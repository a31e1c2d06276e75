"""A small page allocator that the caller owns (replay, tests).

The tree never allocates: whoever drives it owns an allocator per pool and tier. Runtimes
own their own placement; this one serves zero-time replay and tests.

Capacity is accounted, not materialised (:class:`hicache.runtime.page_ids.PageIds`):
memory grows with the pages used, not with ``capacity`` (``1e12`` tokens is fine). Order:
the lowest free page first (as the torch runtime and SGLang's sorted free list place
pages), so freed neighbours are handed out again as one run and extents stay in few runs
(every extent operation costs per run). Which ids a request gets decides nothing: the
budgets count pages, and ids are compared only to tell a copy from the very same pages.
"""

from __future__ import annotations

from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, Tier, check_generation
from hicache.runtime.page_ids import PageIds, merged


class OutOfPages(RuntimeError):
    pass


class PageAllocator:
    """Hands out page ids 0..capacity-1 of one (tier, pool); frees must be of its pages."""

    def __init__(self, capacity: int, *, tier: Tier = Tier.DEVICE, pool: Kind = Kind.FULL,
                 runtime_id: str = "local", generation: int = 0) -> None:
        self._ids = PageIds(capacity, "lowest")
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
        runs = [(r.first_page, r.page_count) for r in extent.page_runs]
        p = self._ids.bad_runs(runs)
        if p is not None:
            raise ValueError(f"page {p} of {self.tier.value}/{self.pool} freed twice")
        self._ids.give_runs(runs, checked=True)
