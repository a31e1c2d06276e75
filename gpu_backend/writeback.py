"""The torch runtime's write-back under a policy (:mod:`hicache.runtime.writeback`).

    compute N done ──> writeback lane (a host thread): gate -> submit chunk to d2h ->
                       wait for it -> gate -> ... -> the batch's TransferCompletions

The gates run on their own host lane, so neither the driver thread nor the compute lane
ever sleeps for them, on CPU threads or CUDA streams alike (on CUDA the chunk is enqueued
on the d2h stream from that thread). The lane is one of the runtime's lanes, so fences
and ``drain`` cover backups still waiting at a gate. ``none`` keeps one all-layer copy
per batch (:meth:`gpu_backend.runtime.TorchRuntime.execute_batch`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gpu_backend.completions import Outbox
from gpu_backend.io import Mover
from gpu_backend.streams import LaneEvent, Lanes
from hicache.runtime.interface import TransferCompletion, TransferKind
from hicache.runtime.writeback import ChunkLog, WritebackPolicy


class TorchWriteback:
    """Chunked, gated backups and the steps they ran beside."""

    def __init__(self, policy: WritebackPolicy, lanes: Lanes, mover: Mover, outbox: Outbox,
                 bytes_per_page: int, layers: range,
                 record: Callable[[LaneEvent, str, int, int], None]) -> None:
        self.policy, self.lanes, self.mover, self.outbox = policy, lanes, mover, outbox
        self.bytes_per_page, self.layers, self.record = bytes_per_page, layers, record
        self.chunks = ChunkLog()
        self.steps: list[tuple[float, float, int]] = []  # (start, end, decode batch or 0)
        self.ends: dict[int, float] = {}  # batch id -> when its compute completed
        self._lock = threading.Lock()  # the policy is read by this lane and the compute lane

    def submit(self, batch: int, backups: list[tuple[int, list[int], list[int]]],
               compute_done: LaneEvent) -> LaneEvent:
        """Queue the batch's backups; the event is done when every chunk has copied."""
        return self.lanes["writeback"].submit(
            partial(self._run, batch, backups, compute_done), [compute_done],
            [self.outbox.check])

    def step_done(self, batch: int, start: float, end: float, decode_batch: int) -> None:
        with self._lock:
            self.steps.append((start, end, decode_batch))
            self.ends[batch] = end
            self.policy.observe_step(end, decode_batch, end - start,
                                     self.chunks.overlap(start, end))

    def _run(self, batch: int, backups: list[tuple[int, list[int], list[int]]],
             compute_done: LaneEvent) -> None:
        clock, timeout = self.lanes.clock, self.lanes.wait_timeout_s
        ready = compute_done.end
        dev = [p for _, d, _ in backups for p in d]
        host = [p for _, _, h in backups for p in h]
        per = max(1, self.policy.cfg.chunk_bytes // self.bytes_per_page)
        end = ready
        for i in range(0, len(dev), per):
            h2d = self.lanes["h2d"].last
            with self._lock:
                gate = self.policy.gate(clock.now(), ready, h2d is not None
                                        and not h2d.is_done())
            if gate.wait_s > 0:
                time.sleep(gate.wait_s)
            if gate.after_loads and h2d is not None:
                h2d.wait(min(timeout, gate.loads_s))  # bounded: loads or the lag bound
            d, h = dev[i:i + per], host[i:i + per]
            with self._lock:
                self.chunks.started(clock.now())
            ev = self.lanes["d2h"].submit(
                partial(self.mover.d2h, d, h, self.layers), [],
                [partial(self.record, op="backup", batch=batch,
                         nbytes=len(d) * self.bytes_per_page), self.outbox.check])
            if not ev.wait(timeout):
                raise TimeoutError(f"a backup chunk of batch {batch} took over {timeout:g} s")
            if ev.error is not None:
                raise ev.error
            with self._lock:
                self.chunks.ended(ev.start, ev.end)
                self.policy.chunk_done(ev.end, len(d) * self.bytes_per_page, ev.end - ev.start)
            end = ev.end
        for job, d, _ in backups:
            self.outbox.post(TransferCompletion(job, TransferKind.BACKUP, end, len(d)))

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return self.policy.describe()
