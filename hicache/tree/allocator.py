"""A small page allocator that the caller owns (replay, tests).

The tree never allocates: whoever drives it owns an allocator per pool and tier. Runtimes
own their own placement; this one serves zero-time replay and tests.

Capacity is accounted, not materialised: pages never handed out are a counter
(``_fresh``, the high-water mark), freed pages a queue of runs, so memory grows with the
pages used, not with ``capacity`` (``1e12`` tokens is fine)::

    0 ........ _fresh ........................ capacity
    [ used or freed ]  [ never handed out: no memory ]

Order (as a FIFO over 0..capacity-1 with frees appended): fresh pages first, lowest
first; then freed pages in the order they were freed.
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
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an integer >= 0, got {capacity!r}")
        self.capacity = capacity
        self.tier, self.pool = tier, pool
        self.runtime_id, self.generation = runtime_id, generation
        self._fresh = 0  # pages 0.._fresh-1 were handed out at least once
        self._freed: deque[list[int]] = deque()  # runs [start, length] in free order
        self._n_freed = 0
        self._used = bytearray()  # of pages below _fresh: 1 = allocated

    @property
    def free_pages(self) -> int:
        return self.capacity - self._fresh + self._n_freed

    @property
    def used_pages(self) -> int:
        return self.capacity - self.free_pages

    def alloc(self, n: int) -> CacheExtentRef:
        if n <= 0:
            raise ValueError(f"alloc of {n} pages")
        if n > self.free_pages:
            raise OutOfPages(
                f"{self.tier.value}/{self.pool}: need {n} pages, {self.free_pages} free")
        pages: list[int] = []
        take = min(n, self.capacity - self._fresh)
        if take:
            pages.extend(range(self._fresh, self._fresh + take))
            self._fresh += take
            if len(self._used) < self._fresh:
                self._used.extend(bytes(max(self._fresh - len(self._used), len(self._used))))
        while len(pages) < n:
            run = self._freed[0]
            k = min(run[1], n - len(pages))
            pages.extend(range(run[0], run[0] + k))
            run[0] += k
            run[1] -= k
            if not run[1]:
                self._freed.popleft()
        self._n_freed -= n - take
        for p in pages:
            self._used[p] = 1
        return CacheExtentRef(
            self.runtime_id, self.generation, self.tier, coalesce(pages), self.pool)

    def free(self, extent: CacheExtentRef) -> None:
        check_generation(extent, self.runtime_id, self.generation, "extent")
        if extent.tier is not self.tier or extent.pool != self.pool:
            raise ValueError(f"extent of {extent.tier.value}/{extent.pool} freed to "
                             f"{self.tier.value}/{self.pool}")
        pages = list(extent.pages())
        bad = [p for p in pages if not 0 <= p < self._fresh or not self._used[p]]
        if bad or len(set(pages)) != len(pages):
            p = bad[0] if bad else next(q for q in pages if pages.count(q) > 1)
            raise ValueError(f"page {p} of {self.tier.value}/{self.pool} freed twice")
        for p in pages:
            self._used[p] = 0
            last = self._freed[-1] if self._freed else None
            if last is not None and last[0] + last[1] == p:
                last[1] += 1
            else:
                self._freed.append([p, 1])
        self._n_freed += len(pages)
