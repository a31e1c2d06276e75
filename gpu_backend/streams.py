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
No wait is unbounded: an op whose ``wait_for`` event is not done after ``wait_timeout_s``
fails with a TimeoutError naming both lanes (host lanes; on CUDA the submitter raises it),
and ``close`` gives up on a lane busy past that time. The only untimed waits left are a
worker idle on its own queue (it has nothing to wait *for*; ``close`` wakes it) and the
CUDA watcher's ``synchronize`` on an event already queued on the device (the driver's
stall timer bounds it; a device that never completes is not a case to recover from).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

Callback = Callable[["LaneEvent"], None]
log = logging.getLogger(__name__)
WAIT_TIMEOUT_S = 120.0  # default bound of every wait on another op (the driver's stall timer)


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

    def __init__(self, name: str, clock: Clock, wait_timeout_s: float = WAIT_TIMEOUT_S) -> None:
        self.name = name
        self.clock = clock
        self.wait_timeout_s = wait_timeout_s
        self.last: LaneEvent | None = None
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"lane-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], wait_for: Sequence[LaneEvent | None] = (),
               on_done: Sequence[Callback] = ()) -> LaneEvent:
        raise NotImplementedError

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(self.wait_timeout_s)
        if self._thread.is_alive():
            log.warning("lane %r still busy %.3g s after close(); its daemon thread is "
                        "abandoned", self.name, self.wait_timeout_s)

    def _loop(self) -> None:
        raise NotImplementedError

    def _wait_error(self, w: LaneEvent) -> TimeoutError:
        return TimeoutError(f"lane {self.name!r}: an op waited {self.wait_timeout_s:.3g} s "
                            f"for an op on lane {w.lane!r} that did not complete")


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
            late = next((w for w in waits if not w.wait(self.wait_timeout_s)), None)
            start = self.clock.now()
            try:
                if late is not None:
                    raise self._wait_error(late)
                fn()
            except BaseException as e:  # noqa: BLE001 - surfaced by the runtime's poll
                ev.error = e
            ev._finish(start, self.clock.now(), callbacks)


class CudaLane(Lane):
    """A CUDA stream; ``fn`` enqueues on it between two timing events."""

    def __init__(self, name: str, clock: Clock, priority: int = 0,
                 wait_timeout_s: float = WAIT_TIMEOUT_S) -> None:
        self.stream = torch.cuda.Stream(priority=priority)
        super().__init__(name, clock, wait_timeout_s)

    def submit(self, fn: Callable[[], Any], wait_for: Sequence[LaneEvent | None] = (),
               on_done: Sequence[Callback] = ()) -> LaneEvent:
        ev = LaneEvent(self.name)
        with torch.cuda.stream(self.stream):
            for w in wait_for:
                if w is None:
                    continue
                if w.cuda_event is not None:
                    self.stream.wait_event(w.cuda_event)
                elif not w.wait(self.wait_timeout_s):  # a host lane's: block until it is done
                    raise self._wait_error(w)
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


# "writeback" (a host thread) gates paced backup chunks onto d2h (gpu_backend.writeback)
LANES = ("compute", "h2d", "d2h", "l3", "writeback")
DEVICE_LANES = ("compute", "h2d", "d2h", "writeback")  # lanes that touch device (L1) pages
HOST_LANES = ("h2d", "d2h", "l3", "writeback")  # the lanes that touch host (L2) pages


class Lanes:
    """compute, h2d, d2h (CUDA streams on CUDA, else threads) and l3 (always a thread)."""

    def __init__(self, device: str, wait_timeout_s: float = WAIT_TIMEOUT_S) -> None:
        if not (wait_timeout_s > 0 and math.isfinite(wait_timeout_s)):
            raise ValueError(f"wait_timeout_s must be a positive finite number of seconds, "
                             f"got {wait_timeout_s!r}")
        self.wait_timeout_s = wait_timeout_s
        self.cuda = device.startswith("cuda")
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but torch.cuda.is_available() is False")
        self.clock = Clock(self.cuda)
        self.lanes: dict[str, Lane] = {}
        for name in LANES:
            if self.cuda and name in ("compute", "h2d", "d2h"):
                prio = -1 if name == "compute" else 0
                self.lanes[name] = CudaLane(name, self.clock, prio, wait_timeout_s)
            else:
                self.lanes[name] = HostLane(name, self.clock, wait_timeout_s)

    def __getitem__(self, name: str) -> Lane:
        return self.lanes[name]

    def fence(self, names: Sequence[str] = LANES) -> list[LaneEvent]:
        """The last op of the ``names`` lanes (default: all): once all are done,
        everything queued on them so far is."""
        return [lane.last for n in names if (lane := self.lanes[n]).last is not None]

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for everything queued so far, at most ``timeout`` (default: the lanes'
        wait_timeout_s) in all; False if something was still running then."""
        deadline = time.monotonic() + (self.wait_timeout_s if timeout is None else timeout)
        return all(ev.wait(max(0.0, deadline - time.monotonic())) for ev in self.fence())

    def close(self) -> None:
        for lane in self.lanes.values():
            lane.close()
