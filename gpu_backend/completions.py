"""The runtime's outbox: completions and timeline rows posted from lane threads.

Invariant: completions come out of :meth:`Outbox.take` in the order lanes posted them
(each lane posts in its own op order); an error raised by any op is re-raised by the
next take, so a failed copy or kernel is never silently dropped. A take never waits
without bound: ``timeout=None`` means at most ``max_wait_s``, then a TimeoutError.
"""

from __future__ import annotations

import threading

from gpu_backend.streams import LaneEvent
from hicache.runtime.interface import Completion
from hicache.timeline import Timeline


class Outbox:
    def __init__(self, timeline: Timeline, max_wait_s: float = 120.0) -> None:
        self.timeline = timeline
        self.max_wait_s = max_wait_s
        self._items: list[Completion] = []
        self._errors: list[BaseException] = []
        self._cond = threading.Condition()

    def post(self, c: Completion) -> None:
        with self._cond:
            self._items.append(c)
            self._cond.notify_all()

    def record(self, ev: LaneEvent, op: str, *, batch: int = -1, layer: int = -1,
               nbytes: int = 0) -> None:
        with self._cond:
            self.timeline.record(ev.lane, op, ev.start, ev.end, batch=batch, layer=layer,
                                 nbytes=nbytes)

    def record_span(self, lane: str, op: str, start: float, end: float, batch: int) -> None:
        """A row for host work done on the calling thread (the driver's ``cpu`` lane)."""
        with self._cond:
            self.timeline.record(lane, op, start, max(start, end), batch=batch)

    def check(self, ev: LaneEvent) -> None:
        """Last callback of every op: keep its error for the next take."""
        if ev.error is not None:
            with self._cond:
                self._errors.append(ev.error)
                self._cond.notify_all()

    def take(self, timeout: float | None = 0.0) -> list[Completion]:
        """Completions so far; with ``timeout`` > 0 wait up to that long for at least one
        (None: up to ``max_wait_s``, and a TimeoutError if none came)."""
        with self._cond:
            if timeout is None or timeout > 0:
                limit = self.max_wait_s if timeout is None else timeout
                got = self._cond.wait_for(lambda: self._items or self._errors, limit)
                if not got and timeout is None:
                    raise TimeoutError(f"no completion and no error for {limit:.3g} s: "
                                       f"an op on some lane is stuck")
            if self._errors:
                err = self._errors.pop(0)
                raise RuntimeError(f"a runtime op failed: {err!r}") from err
            out, self._items = self._items, []
            return out
