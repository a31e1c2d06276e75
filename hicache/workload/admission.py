"""Admission queue shared by the closed-loop workloads.

Items wait ordered by (ready time, push order). :meth:`AdmissionQueue.release` admits
items while fewer than ``limit`` are admitted and unfinished; an item admitted at ``now``
arrives at ``max(ready, now)``. Counting an admitted item from its release (possibly
before it arrives) keeps the limit conservative: at no instant are more than ``limit``
admitted items unfinished.
"""

from __future__ import annotations

import heapq
from typing import Generic, TypeVar

T = TypeVar("T")


class AdmissionQueue(Generic[T]):
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"admission limit must be >= 1, got {limit}")
        self.limit = limit
        self.admitted = 0  # admitted and not yet finished
        self._heap: list[tuple[float, int, T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, ready: float, item: T) -> None:
        heapq.heappush(self._heap, (ready, self._seq, item))
        self._seq += 1

    def release(self, now: float) -> list[tuple[float, T]]:
        """Admit waiting items while there is room; returns (arrival, item) pairs."""
        out = []
        while self._heap and self.admitted < self.limit:
            ready, _, item = heapq.heappop(self._heap)
            self.admitted += 1
            out.append((max(ready, now), item))
        return out

    def finished(self) -> None:
        if self.admitted <= 0:
            raise RuntimeError("finished() without an admitted item")
        self.admitted -= 1
