"""Per-pool page free lists of one tier (the runtime owns placement).

Invariant: every page id in 0..size-1 is either free or allocated, never both; allocating
beyond the free count raises :class:`CapacityError` before anything changes; freeing a page
that is not allocated raises ValueError. Allocation pops the most recently freed pages
first (a stack), then fresh pages lowest first, so fresh pools hand out contiguous runs.

Capacity is accounted, not materialised: never-used pages are a counter (``_fresh``) and
freed pages a stack of runs, so memory grows with the pages used, not with ``size``.
"""

from __future__ import annotations

from collections.abc import Iterable

from hicache.runtime.handles import Tier


class CapacityError(RuntimeError):
    """An allocation the control side did not account for (pool exhausted)."""


class PagePool:
    def __init__(self, tier: Tier, pool: str, size: int) -> None:
        if size < 0:
            raise ValueError(f"pool {pool!r} size must be >= 0")
        self.tier, self.pool, self.size = tier, pool, size
        self._fresh = 0  # pages 0.._fresh-1 were handed out at least once
        self._stack: list[list[int]] = []  # freed runs [start, length]; top pops first
        self._n_stacked = 0
        self._used = bytearray()  # of pages below _fresh: 1 = allocated

    @property
    def free_count(self) -> int:
        return self.size - self._fresh + self._n_stacked

    @property
    def used_count(self) -> int:
        return self.size - self.free_count

    def allocate(self, n: int) -> list[int]:
        if n > self.free_count:
            raise CapacityError(
                f"{self.tier.value} pool {self.pool!r}: {n} pages requested, "
                f"{self.free_count} of {self.size} free (allocation not accounted for)")
        if n <= 0:
            return []
        pages: list[int] = []
        while self._stack and len(pages) < n:
            run = self._stack[-1]
            k = min(run[1], n - len(pages))
            pages.extend(range(run[0], run[0] + k))
            run[0] += k
            run[1] -= k
            if not run[1]:
                self._stack.pop()
        self._n_stacked -= len(pages)
        fresh = n - len(pages)
        if fresh:
            pages.extend(range(self._fresh, self._fresh + fresh))
            self._fresh += fresh
            if len(self._used) < self._fresh:
                self._used.extend(bytes(max(self._fresh - len(self._used), len(self._used))))
        for p in pages:
            self._used[p] = 1
        return pages

    def free(self, pages: Iterable[int]) -> None:
        pages = list(pages)
        seen: set[int] = set()
        for p in pages:  # check all before changing anything
            if not 0 <= p < self._fresh or not self._used[p] or p in seen:
                raise ValueError(f"{self.tier.value} pool {self.pool!r}: page {p} is not allocated")
            seen.add(p)
        for p in pages:
            self._used[p] = 0
        for p in reversed(pages):  # the first freed page ends on top
            top = self._stack[-1] if self._stack else None
            if top is not None and top[0] == p + 1:
                top[0] = p
                top[1] += 1
            else:
                self._stack.append([p, 1])
        self._n_stacked += len(pages)

    def is_allocated(self, page: int) -> bool:
        return 0 <= page < self._fresh and bool(self._used[page])


class TierPools:
    """The pools of one tier, by name."""

    def __init__(self, tier: Tier, sizes: dict[str, int]) -> None:
        self.tier = tier
        self.pools = {name: PagePool(tier, name, n) for name, n in sizes.items()}

    def __getitem__(self, pool: str) -> PagePool:
        try:
            return self.pools[pool]
        except KeyError:
            raise ValueError(f"{self.tier.value} has no pool {pool!r} "
                             f"(pools: {sorted(self.pools)})") from None

    def free_counts(self) -> dict[str, int]:
        return {name: p.free_count for name, p in self.pools.items()}
