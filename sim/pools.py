"""Per-pool page free lists of one tier (the runtime owns placement).

Invariant: every page id in 0..size-1 is either free or allocated, never both; allocating
beyond the free count raises :class:`CapacityError` before anything changes; freeing a page
that is not allocated raises ValueError. Allocation pops the lowest recently-freed pages
first, so fresh pools hand out contiguous runs.
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
        self._free = list(range(size - 1, -1, -1))  # pop() yields 0, 1, 2, ...
        self._used = bytearray(size)

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def used_count(self) -> int:
        return self.size - len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise CapacityError(
                f"{self.tier.value} pool {self.pool!r}: {n} pages requested, "
                f"{len(self._free)} of {self.size} free (allocation not accounted for)")
        if n <= 0:
            return []
        pages = self._free[-n:][::-1]
        del self._free[-n:]
        for p in pages:
            self._used[p] = 1
        return pages

    def free(self, pages: Iterable[int]) -> None:
        pages = list(pages)
        for p in pages:
            if not 0 <= p < self.size or not self._used[p]:
                raise ValueError(f"{self.tier.value} pool {self.pool!r}: page {p} is not allocated")
            self._used[p] = 0
        self._free.extend(reversed(pages))

    def is_allocated(self, page: int) -> bool:
        return 0 <= page < self.size and bool(self._used[page])


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
