"""A runtime that does no work, to time the boundary itself, and the timing.

:class:`EchoRuntime` answers every call as a runtime would (a prepared handle with one
slice per request, its KV extent in ``runs_per_request`` page runs; a BatchCompletion per
executed batch) but moves no data, so timing it in and out of process isolates what one
crossing costs: pickling both ways, the socket, the server's dispatch.

:func:`measure_crossings` times one batch's crossings (prepare, execute, poll) for decode
plans of ``n`` requests, in process and out of process; the difference is what the
process split adds: the hardware profile holds it as ``cpu.ipc_crossing_s`` (a crossing
with O(1) content) and ``cpu.ipc_prepare_s`` (a prepare_batch crossing, by requests in
the plan), which the simulator charges (``sim.boundary``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, RequestRuntimeHandle, Tier
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    Completion,
    Phase,
    PreparedBatchHandle,
    PreparedSlice,
    RequestSlice,
    RuntimeInfo,
)

RID = "echo"


class EchoRuntime:
    """The RuntimeInterface with no work behind it (see the module docstring)."""

    def __init__(self, generation: int = 0, runs_per_request: int = 4) -> None:
        self.generation, self.runs = generation, runs_per_request
        self._done: list[Completion] = []
        self.t = 0.0

    def info(self) -> RuntimeInfo:
        return RuntimeInfo(RID, self.generation, 64, {Kind.FULL: 1 << 20}, {Kind.FULL: 1 << 21})

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        slices = []
        for s in plan.slices:
            req = s.request or RequestRuntimeHandle(RID, s.rid, self.generation)
            runs = tuple(PageRun(s.rid * 1000 + 10 * i, 3) for i in range(self.runs))
            kv = CacheExtentRef(RID, self.generation, Tier.DEVICE, runs)
            slices.append(PreparedSlice(s.rid, req, kv, ()))
        return PreparedBatchHandle(RID, self.generation, plan.batch_id, tuple(slices), ())

    def execute_batch(self, handle: PreparedBatchHandle) -> None:
        self.t += 1e-3
        self._done.append(BatchCompletion(handle.batch_id, self.t - 1e-3, self.t,
                                          tuple(s.rid for s in handle.slices[:1])))

    def poll(self) -> list[Completion]:
        out, self._done = self._done, []
        return out

    def wait(self, timeout: float | None = None) -> list[Completion]:
        return self.poll()

    def now(self) -> float:
        return self.t


def echo_runtime(generation: int) -> EchoRuntime:
    return EchoRuntime(generation)


def decode_plan(batch_id: int, n: int) -> BatchPlan:
    """A decode step of ``n`` running requests (each named by its runtime handle)."""
    return BatchPlan(batch_id, tuple(
        RequestSlice(rid, Phase.DECODE, 1000 + rid, 1,
                     request=RequestRuntimeHandle(RID, rid, 0)) for rid in range(n)))


@dataclass(frozen=True)
class CrossingCost:
    """Medians for decode plans of ``requests`` requests: seconds per call in process
    (``local_*``) and out of process (``remote_*``), scheduler-process CPU seconds per
    batch out of process, and bytes both ways per batch."""

    requests: int
    local_prepare_s: float
    remote_prepare_s: float
    local_small_s: float  # execute_batch and poll (a batch id, a completion)
    remote_small_s: float
    cpu_s: float
    bytes: int

    @property
    def prepare_s(self) -> float:
        """What the process split adds to one prepare_batch crossing."""
        return max(0.0, self.remote_prepare_s - self.local_prepare_s)

    @property
    def small_s(self) -> float:
        """... to one crossing with O(1) content (execute_batch by id, poll, wait)."""
        return max(0.0, self.remote_small_s - self.local_small_s)

    @property
    def ipc_s_per_crossing(self) -> float:
        """Mean over one batch's three crossings (prepare, execute, poll)."""
        return (self.prepare_s + 2 * self.small_s) / 3


def _time_batches(rt: Any, n: int, reps: int) -> tuple[float, float, float]:
    prep, small, cpu = [], [], []
    plans = [decode_plan(i + 1, n) for i in range(reps + 3)]
    for i, plan in enumerate(plans):
        c = time.process_time()
        t0 = time.perf_counter()
        handle = rt.prepare_batch(plan)
        t1 = time.perf_counter()
        rt.execute_batch(handle)
        t2 = time.perf_counter()
        rt.poll()
        t3 = time.perf_counter()
        if i >= 3:  # warm-up
            prep.append(t1 - t0)
            small += [t2 - t1, t3 - t2]
            cpu.append(time.process_time() - c)
    return statistics.median(prep), statistics.median(small), statistics.median(cpu)


def measure_crossings(sizes: Sequence[int] = (1, 4, 16, 64, 256), reps: int = 200
                      ) -> list[CrossingCost]:
    from ipc.client import ProcessGPURuntime

    out = []
    local = EchoRuntime()
    with ProcessGPURuntime(echo_runtime) as remote:
        for n in sizes:
            lp, ls, _ = _time_batches(local, n, reps)
            b0 = remote.bytes_sent + remote.bytes_received
            rp, rs, cpu = _time_batches(remote, n, reps)
            nbytes = (remote.bytes_sent + remote.bytes_received - b0) // (reps + 3)
            out.append(CrossingCost(n, lp, rp, ls, rs, cpu, nbytes))
    return out
