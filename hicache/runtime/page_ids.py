"""Page ids of one pool, accounted rather than materialised.

    0 ........ fresh ........................ capacity
    [ used or freed ]  [ never handed out: a counter, no memory ]

Freed pages wait as runs ``[start, length]``; memory grows with the pages ever handed out
(one byte each), never with ``capacity``, so any size a user can type is cheap.

``order="fifo"``: fresh pages first (lowest first), then freed pages in the order they were
freed (a replay allocator). ``order="lifo"``: the most recently freed pages first, then
fresh pages (a runtime's free list: hot pages are reused). ``order="lowest"``: the lowest
free id first (the torch runtime's heap, and SGLang's paged allocator once it sorts its
free list), so a fragmented pool still hands out the longest runs it can; freed pages
wait in a heap. :meth:`give` checks every page before it changes anything.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from typing import Literal


class PageIds:
    def __init__(self, capacity: int, order: Literal["fifo", "lifo", "lowest"]) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an integer >= 0, got {capacity!r}")
        self.capacity, self.order = capacity, order
        self._fresh = 0  # pages 0.._fresh-1 were handed out at least once
        self._runs: deque[list[int]] = deque()  # freed runs [start, length]
        self._n_runs = 0
        self._used = bytearray()  # of pages below _fresh: 1 = handed out
        self._heap: list[int] = []  # order "lowest": freed pages (all below _fresh)

    @property
    def free(self) -> int:
        return self.capacity - self._fresh + self._n_runs

    def is_used(self, page: int) -> bool:
        return 0 <= page < self._fresh and bool(self._used[page])

    def take(self, n: int) -> list[int]:
        """``n`` free page ids (the caller checked ``n <= free``)."""
        pages: list[int] = []
        if self.order == "lowest":
            k = min(n, len(self._heap))
            pages = [heapq.heappop(self._heap) for _ in range(k)]
            self._n_runs -= k
        elif self.order == "fifo":
            self._take_fresh(pages, n)
        while self._runs and len(pages) < n:
            run = self._runs[0] if self.order == "fifo" else self._runs[-1]
            k = min(run[1], n - len(pages))
            pages.extend(range(run[0], run[0] + k))
            run[0] += k
            run[1] -= k
            self._n_runs -= k
            if not run[1]:
                self._runs.popleft() if self.order == "fifo" else self._runs.pop()
        self._take_fresh(pages, n)
        for p in pages:
            self._used[p] = 1
        return pages

    def _take_fresh(self, pages: list[int], n: int) -> None:
        k = min(n - len(pages), self.capacity - self._fresh)
        if k <= 0:
            return
        pages.extend(range(self._fresh, self._fresh + k))
        self._fresh += k
        if len(self._used) < self._fresh:  # grow geometrically, up to what is used
            self._used.extend(bytes(max(self._fresh - len(self._used), len(self._used))))

    def bad(self, pages: Sequence[int]) -> int | None:
        """The first page of ``pages`` that is not handed out (or repeats), else None."""
        seen: set[int] = set()
        for p in pages:
            if not self.is_used(p) or p in seen:
                return p
            seen.add(p)
        return None

    def give(self, pages: Sequence[int]) -> None:
        """Return ``pages`` (all checked first: see :meth:`bad`)."""
        p = self.bad(pages)
        if p is not None:
            raise ValueError(f"page {p} is not handed out")
        for p in pages:
            self._used[p] = 0
        if self.order == "lowest":
            for p in pages:
                heapq.heappush(self._heap, p)
        elif self.order == "fifo":
            for p in pages:
                last = self._runs[-1] if self._runs else None
                if last is not None and last[0] + last[1] == p:
                    last[1] += 1
                else:
                    self._runs.append([p, 1])
        else:
            for p in reversed(pages):  # the first page given ends on top
                top = self._runs[-1] if self._runs else None
                if top is not None and top[0] == p + 1:
                    top[0] = p
                    top[1] += 1
                else:
                    self._runs.append([p, 1])
        self._n_runs += len(pages)

    def check(self) -> None:
        """Raise AssertionError when the free runs (or heap) and the used map disagree: a freed page
        still marked used, a page free twice or beyond the fresh mark, or counts that do
        not add up (O(pages ever handed out): for tests and soak runs)."""
        free: set[int] = set()
        for start, length in self._runs:
            if length <= 0:
                raise AssertionError(f"an empty free run at page {start}")
        singles = ((p, 1) for p in self._heap)  # order "lowest" keeps freed pages in a heap
        for start, length in (*self._runs, *singles):
            for p in range(start, start + length):
                if p >= self._fresh or self._used[p] or p in free:
                    raise AssertionError(f"page {p} is free but also used, repeated or "
                                         f"never handed out")
                free.add(p)
        used = sum(self._used[:self._fresh])
        if len(free) != self._n_runs or used + self._n_runs != self._fresh:
            raise AssertionError(f"{used} used + {self._n_runs} free != {self._fresh} handed out "
                                 f"({len(free)} in the runs)")
