"""The runtime's outbox: completions and timeline rows posted from lane threads.

Invariant: completions come out of :meth:`Outbox.take` in the order lanes posted them
(each lane posts in its own op order); an error raised by any op is re-raised by the
next take, so a failed copy or kernel is never silently dropped.
"""

from __future__ import annotations

import threading

from gpu_backend.streams import LaneEvent
from hicache.runtime.interface import Completion
from hicache.timeline import Timeline


class Outbox:
    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
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
        """Completions so far; with ``timeout`` > 0 (or None) wait for at least one."""
        with self._cond:
            if timeout is None or timeout > 0:
                self._cond.wait_for(lambda: self._items or self._errors, timeout)
            if self._errors:
                err = self._errors.pop(0)
                raise RuntimeError(f"a runtime op failed: {err!r}") from err
            out, self._items = self._items, []
            return out
