"""Copy submission for the two io backends.

``direct``: copy-engine DMA, one cudaMemcpyAsync per coalesced page run per layer. The
engine of a direction serves calls FIFO, even from different streams (stream priority is
ignored), and takes no SMs. A group of ``calls`` calls moving ``payload`` bytes holds the
engine for calls * call_overhead_s, then moves payload + calls * half_efficiency_bytes at
the link rate (:mod:`sim.link`), so a lone single call matches the efficiency curve exactly;
for several calls it treats their overheads as back to back (no overlap of submission and
transfer), a pessimistic simplification.

``kernel`` depends on ``io_kernel.mechanism``:
- ``sm_zero_copy`` (SGLang's kernel): one copy kernel per op: one call_overhead_s launch,
  then the payload at min(link share, io_kernel.bytes_per_s) while compute slows (tag
  ``kernel``); kernels bypass the copy engines; ops on one stream still serialize;
- ``gather_dma`` (what the torch runtime builds): DMA calls as ``direct`` (their count is
  the caller's, :mod:`sim.host`) plus a device gather/scatter through a staging buffer
  (2 x payload at HBM bandwidth and one kernel launch; ablation ``gather_dma`` models it
  as ``sm_zero_copy`` instead).

Issue pipelining: when the host issues the calls one by one (``issue_end``: when it
issues the last), the engine moves each as it arrives, so the copy ends no earlier than
``issue_end`` plus one call's transfer.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from hicache.timeline import Timeline
from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import HardwareProfile
from sim.link import DIRECTIONS, PcieLink

IO_BACKENDS = ("direct", "kernel")


class CopyEngines:
    """Issues PCIe copies; returns (start of data movement, end) from :meth:`copy`."""

    def __init__(self, env: simpy.Environment, profile: HardwareProfile, link: PcieLink,
                 fluid: FluidServer, io_backend: str) -> None:
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
            start = self.env.now
            yield self.fluid.submit(FluidJob(payload, direction, cap, frozenset({"kernel"})))
        else:
            with self.engines[direction].request() as slot:
                yield slot
                owned = self.env.now
                yield self.env.timeout(calls * self.overhead)
                start = self.env.now
                yield self.fluid.submit(FluidJob(payload + calls * self.half, direction, cap))
                if issue_end is not None and calls:
                    tail = self.overhead + (payload / calls + self.half) / self.link.peak[direction]
                    if self.env.now < issue_end + tail:
                        yield self.env.timeout(issue_end + tail - self.env.now)
                if self.timeline is not None:
                    self.timeline.record(f"ce:{direction}", op, owned, self.env.now,
                                         batch=batch, layer=layer, nbytes=payload)
        if gather and direction == "h2d":
            yield self.env.timeout(gather)  # scatter from the staging buffer
        self.link.moved[direction] += payload
        return start, self.env.now
