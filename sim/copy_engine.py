"""Copy submission for the two io backends.

``direct``: copy-engine DMA, one cudaMemcpyAsync per coalesced page run per layer. The
engine of a direction serves calls FIFO, even from different streams (stream priority is
ignored), and takes no SMs. Each call has a fixed cost ``c = call_overhead_s +
half_efficiency_bytes / peak`` (submission and setup) and its bytes at the link rate
(:mod:`sim.link`), so a lone call matches the efficiency curve exactly. Copy engines
pipeline the calls queued on them: call k+1 is set up while call k moves, so ``n`` calls
moving ``P`` bytes take::

    c + max(P / rate, (n - 1) * c + P / (n * rate))      (a two-stage flow shop)

submission-bound for small calls (``n * c``), bandwidth-bound for large ones (REFERENCE:
~20 GB/s at 128 KiB per call back to back, ~55 GB/s at 2 MB, on H100 PCIe Gen5). In the
simulator: the first call's ``c``, then ``P`` bytes as one fluid job, and the copy ends no
earlier than ``n`` setups plus the last call's transfer. The CPU runtime has no copy
engine: a lane's thread does each call's work and its memcpy in turn, so there (copy calls
on the interpreter lock, :mod:`sim.interpreter`) the calls run in series, as they do with
ablation ``pipelined_issue``.

``kernel`` depends on ``io_kernel.mechanism``:
- ``sm_zero_copy`` (SGLang's kernel): one copy kernel per op: one call_overhead_s launch,
  then the payload at min(link share, io_kernel.bytes_per_s) while compute slows (tag
  ``kernel``); kernels bypass the copy engines; ops on one stream still serialize;
- ``gather_dma`` (what the torch runtime builds): DMA calls as ``direct`` (their count is
  the caller's, :mod:`sim.host`) plus a device gather/scatter through a staging buffer
  (2 x payload at HBM bandwidth and one kernel launch; ablation ``gather_dma`` models it
  as ``sm_zero_copy`` instead).

Issue pipelining: when the host issues the calls one by one (``issue_end``: when it
issues the last), the engine moves each as it arrives, so the copy also ends no earlier
than ``issue_end`` plus one call.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from hicache.timeline import Timeline
from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import HardwareProfile
from sim.interpreter import INTERPRETER
from sim.link import DIRECTIONS, PcieLink

IO_BACKENDS = ("direct", "kernel")


class CopyEngines:
    """Issues PCIe copies; returns (start of data movement, end) from :meth:`copy`."""

    def __init__(self, env: simpy.Environment, profile: HardwareProfile, link: PcieLink,
                 fluid: FluidServer, io_backend: str, gil_calls: bool = False) -> None:
        if io_backend not in IO_BACKENDS:
            raise ValueError(f"io_backend must be one of {IO_BACKENDS}, got {io_backend!r}")
        self.env, self.link, self.fluid, self.io_backend = env, link, fluid, io_backend
        self.overhead = profile.pcie.call_overhead_s
        self.half = profile.pcie.half_efficiency_bytes
        self.engines = {d: simpy.Resource(env, capacity=1) for d in DIRECTIONS}
        mech = profile.io_kernel.mechanism
        self.gather = (io_backend == "kernel" and mech == "gather_dma"
                       and "gather_dma" not in profile.ablate)
        self.hbm = profile.gpu.hbm_bytes_per_s
        self.launch = profile.gpu.kernel_launch_s
        self.timeline: Timeline | None = None  # set by the runtime that owns the engines
        self.gil_calls = gil_calls  # CPU runtime: a call's overhead is interpreter time
        # copy engines set up call k+1 while call k moves; a CPU lane's thread cannot
        self.pipelined = not gil_calls and "pipelined_issue" not in profile.ablate

    def _calls(self, seconds: float, direction: str) -> simpy.Event:
        """The per-call overhead of a copy, on the lane's thread (:mod:`sim.interpreter`)."""
        if not self.gil_calls or seconds <= 0:
            return self.env.timeout(seconds)
        return self.fluid.submit(FluidJob(seconds, INTERPRETER, gil=1.0, thread=direction))

    def copy(self, direction: str, payload: int, calls: int, cap: float | None = None, *,
             op: str = "copy", batch: int = -1, layer: int = -1,
             issue_end: float | None = None
             ) -> Generator[simpy.Event, Any, tuple[float, float]]:
        """Move ``payload`` bytes in ``calls`` DMA calls (direct, gather_dma) or one kernel
        (sm_zero_copy). A DMA copy holds its direction's engine (FIFO) and is recorded on
        lane ``ce:<direction>`` from the moment it owns the engine."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}")
        gather = self.launch + 2.0 * payload / self.hbm if self.gather else 0.0
        if gather and direction == "d2h":
            yield self.env.timeout(gather)  # gather into the staging buffer first
        if self.io_backend == "kernel" and not self.gather:
            yield self.env.timeout(self.overhead)
            start = self.env._now
            yield self.fluid.submit(FluidJob(payload, direction, cap, frozenset({"kernel"})))
        else:
            with self.engines[direction].request() as slot:
                yield slot
                owned = self.env._now
                if self.pipelined and calls:
                    peak = self.link.peak[direction]
                    c = self.overhead + self.half / peak  # one call's fixed cost
                    yield self.env.timeout(c)
                    start = self.env._now
                    yield self.fluid.submit(FluidJob(payload, direction, cap))
                    setup_end = max(owned + calls * c, (issue_end or 0.0) + c)
                    floor = setup_end + payload / calls / peak  # then the last call moves
                    if self.env._now < floor:
                        yield self.env.timeout(floor - self.env._now)
                else:  # in series: every call's fixed cost, then the bytes
                    yield self._calls(calls * self.overhead, direction)
                    start = self.env._now
                    yield self.fluid.submit(FluidJob(payload + calls * self.half, direction,
                                                     cap))
                    if issue_end is not None and calls:
                        tail = (self.overhead + (payload / calls + self.half)
                                / self.link.peak[direction])
                        if self.env._now < issue_end + tail:
                            yield self.env.timeout(issue_end + tail - self.env._now)
                if self.timeline is not None:
                    self.timeline.record(f"ce:{direction}", op, owned, self.env._now,
                                         batch=batch, layer=layer, nbytes=payload)
        if gather and direction == "h2d":
            yield self.env.timeout(gather)  # scatter from the staging buffer
        self.link.moved[direction] += payload
        return start, self.env._now
