"""A small page allocator that the caller owns (replay, tests).

The tree never allocates: whoever drives it owns an allocator per pool and tier. Runtimes
own their own placement; this one serves zero-time replay and tests.
"""

from __future__ import annotations

from collections import deque

from hicache.runtime.handles import CacheExtentRef, Tier, check_generation, coalesce


class OutOfPages(RuntimeError):
    pass


class PageAllocator:
    """Hands out page ids 0..capacity-1 of one (tier, pool); frees must be of its pages."""

    def __init__(self, capacity: int, *, tier: Tier = Tier.DEVICE, pool: str = "full",
                 runtime_id: str = "local", generation: int = 0) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.tier, self.pool = tier, pool
        self.runtime_id, self.generation = runtime_id, generation
        self._free: deque[int] = deque(range(capacity))
        self._used = bytearray(capacity)

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def used_pages(self) -> int:
        return self.capacity - len(self._free)

    def alloc(self, n: int) -> CacheExtentRef:
        if n <= 0:
            raise ValueError(f"alloc of {n} pages")
        if n > len(self._free):
            raise OutOfPages(
                f"{self.tier.value}/{self.pool}: need {n} pages, {len(self._free)} free")
        pages = [self._free.popleft() for _ in range(n)]
        for p in pages:
            self._used[p] = 1
        return CacheExtentRef(
            self.runtime_id, self.generation, self.tier, coalesce(pages), self.pool)

    def free(self, extent: CacheExtentRef) -> None:
        check_generation(extent, self.runtime_id, self.generation, "extent")
        if extent.tier is not self.tier or extent.pool != self.pool:
            raise ValueError(f"extent of {extent.tier.value}/{extent.pool} freed to "
                             f"{self.tier.value}/{self.pool}")
        for p in extent.pages():
            if not self._used[p]:
                raise ValueError(f"page {p} of {self.tier.value}/{self.pool} freed twice")
            self._used[p] = 0
            self._free.append(p)
