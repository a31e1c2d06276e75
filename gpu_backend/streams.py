"""Lanes: one abstraction over CUDA streams and CPU worker threads.

``lane.submit(fn, wait_for=[events])`` queues ``fn`` after the listed events and returns
a :class:`LaneEvent`. Invariants:
- A lane runs its ops in submission order (a CUDA stream / one worker thread).
- An op starts only after every event in ``wait_for`` completed (CUDA: ``wait_event`` on
  the device, no host block; an event from a host lane blocks the submitter instead).
- ``LaneEvent.start``/``end`` are seconds since the :class:`Clock`'s t0, measured with
  CUDA timing events on CUDA lanes and ``time.perf_counter`` on host lanes; they are set
  before the event is marked done and before ``on_done`` callbacks run.

On CUDA ``fn`` runs in the submitting thread inside ``torch.cuda.stream(lane.stream)``
(it *enqueues* work); a watcher thread per lane synchronizes the end events in order.
On CPU ``fn`` runs on the lane's worker thread (torch releases the GIL in copies and
matmuls, so lanes overlap for real).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

Callback = Callable[["LaneEvent"], None]


class Clock:
    """Runtime time zero; on CUDA also a timing event recorded at t0."""

    def __init__(self, cuda: bool) -> None:
        self.cuda_t0: Any = None
        if cuda:
            self.cuda_t0 = torch.cuda.Event(enable_timing=True)
            self.cuda_t0.record()
            self.cuda_t0.synchronize()
        self.host_t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.host_t0

    def of_cuda(self, ev: Any) -> float:
        return self.cuda_t0.elapsed_time(ev) / 1e3


class LaneEvent:
    """Completion of one op on one lane."""

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self.start = math.nan
        self.end = math.nan
        self.error: BaseException | None = None
        self.cuda_event: Any = None  # end event, for device-side waits
        self._done = threading.Event()

    def is_done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def _finish(self, start: float, end: float, callbacks: Sequence[Callback]) -> None:
        self.start, self.end = start, max(start, end)
        for cb in callbacks:
            try:
                cb(self)
            except BaseException as e:  # noqa: BLE001 - reported through the event
                self.error = self.error or e
        self._done.set()


class Lane:
    """Base class: a FIFO of ops with a ``last`` event (the lane's fence)."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.last: LaneEvent | None = None
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"lane-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], wait_for: Sequence[LaneEvent | None] = (),
               on_done: Sequence[Callback] = ()) -> LaneEvent:
        raise NotImplementedError

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()

    def _loop(self) -> None:
        raise NotImplementedError


class HostLane(Lane):
    """A worker thread; ops run there, timed with ``perf_counter``."""

    def submit(self, fn: Callable[[], Any], wait_for: Sequence[LaneEvent | None] = (),
               on_done: Sequence[Callback] = ()) -> LaneEvent:
        ev = LaneEvent(self.name)
        self._q.put((fn, [w for w in wait_for if w is not None], ev, list(on_done)))
        self.last = ev
        return ev

    def _loop(self) -> None:
        while (item := self._q.get()) is not None:
            fn, waits, ev, callbacks = item
            for w in waits:
                w.wait()
            start = self.clock.now()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - surfaced by the runtime's poll
                ev.error = e
            ev._finish(start, self.clock.now(), callbacks)


class CudaLane(Lane):
    """A CUDA stream; ``fn`` enqueues on it between two timing events."""

    def __init__(self, name: str, clock: Clock, priority: int = 0) -> None:
        self.stream = torch.cuda.Stream(priority=priority)
        super().__init__(name, clock)

    def submit(self, fn: Callable[[], Any], wait_for: Sequence[LaneEvent | None] = (),
               on_done: Sequence[Callback] = ()) -> LaneEvent:
        ev = LaneEvent(self.name)
        with torch.cuda.stream(self.stream):
            for w in wait_for:
                if w is None:
                    continue
                if w.cuda_event is not None:
                    self.stream.wait_event(w.cuda_event)
                else:
                    w.wait()  # produced by a host lane: block until its data is there
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            try:
                fn()
            except BaseException as e:  # noqa: BLE001
                ev.error = e
            end.record(self.stream)
        ev.cuda_event = end
        self._q.put((start, end, ev, list(on_done)))
        self.last = ev
        return ev

    def _loop(self) -> None:
        while (item := self._q.get()) is not None:
            start, end, ev, callbacks = item
            end.synchronize()
            ev._finish(self.clock.of_cuda(start), self.clock.of_cuda(end), callbacks)


LANES = ("compute", "h2d", "d2h", "l3")


class Lanes:
    """compute, h2d, d2h (CUDA streams on CUDA, else threads) and l3 (always a thread)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but torch.cuda.is_available() is False")
        self.clock = Clock(self.cuda)
        self.lanes: dict[str, Lane] = {}
        for name in LANES:
            if self.cuda and name != "l3":
                prio = -1 if name == "compute" else 0
                self.lanes[name] = CudaLane(name, self.clock, priority=prio)
            else:
                self.lanes[name] = HostLane(name, self.clock)

    def __getitem__(self, name: str) -> Lane:
        return self.lanes[name]

    def fence(self) -> list[LaneEvent]:
        """The last op of every lane: once all are done, everything queued so far is."""
        return [lane.last for lane in self.lanes.values() if lane.last is not None]

    def drain(self, timeout: float | None = None) -> bool:
        return all(ev.wait(timeout) for ev in self.fence())

    def close(self) -> None:
        for lane in self.lanes.values():
            lane.close()
