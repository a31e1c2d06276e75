"""PCIe link (both directions), host memory and SM sharing as one fluid allocation policy.

Rates, recomputed whenever a job starts or ends (see :mod:`sim.fluid`):
- each direction's peak (h2d/d2h_bytes_per_s) is split equally among its active copies;
  a copy kernel (tag ``kernel``) is further capped at io_kernel.bytes_per_s, a throttled
  copy at its ``cap``;
- when both directions are active and their sum exceeds bidirectional_bytes_per_s, both
  are scaled down proportionally to share that cap (55 + 55 -> 41.5 + 41.5 of 83);
- all PCIe traffic together is capped by host memory bandwidth (host-side staging);
- a compute job runs at 1 - io_kernel.compute_slowdown while any copy kernel holds SMs.

Efficiency curve: a lone DMA call of B bytes takes call_overhead_s + B / rate(B) with
rate(B) = peak * B / (B + half_efficiency_bytes). Equivalently the call occupies its copy
engine for call_overhead_s, then moves B + half_efficiency_bytes "effective bytes" at the
link rate (see :mod:`sim.copy_engine`); that form also holds while the link is shared.
"""

from __future__ import annotations

from sim.fluid import FluidJob
from sim.hardware.profile import HardwareProfile

DIRECTIONS = ("h2d", "d2h")


class PcieLink:
    """Allocation policy for one GPU's fluid server; counts payload bytes per direction."""

    def __init__(self, profile: HardwareProfile) -> None:
        pcie = profile.pcie
        self.peak = {"h2d": pcie.h2d_bytes_per_s, "d2h": pcie.d2h_bytes_per_s}
        self.bidirectional = pcie.bidirectional_bytes_per_s
        self.kernel_rate = profile.io_kernel.bytes_per_s
        self.slowdown = profile.io_kernel.compute_slowdown
        self.host = profile.host_memory_bytes_per_s
        self.moved = {"h2d": 0, "d2h": 0}

    def allocate(self, jobs: list[FluidJob]) -> None:
        groups: dict[str, list[FluidJob]] = {"h2d": [], "d2h": []}
        kernels_active = False
        for job in jobs:
            if job.kind in groups:
                groups[job.kind].append(job)
                kernels_active = kernels_active or "kernel" in job.tags
        totals = {}
        for direction, group in groups.items():
            share = self.peak[direction] / len(group) if group else 0.0
            for job in group:
                rate = share
                if "kernel" in job.tags:
                    rate = min(rate, self.kernel_rate)
                if job.cap is not None:
                    rate = min(rate, job.cap)
                job.rate = rate
            totals[direction] = sum(j.rate for j in group)
        scale = 1.0
        both = totals["h2d"] > 0 and totals["d2h"] > 0
        total = totals["h2d"] + totals["d2h"]
        if both and total > self.bidirectional:
            scale = self.bidirectional / total
        if total * scale > self.host:
            scale = self.host / total
        if scale < 1.0:
            for group in groups.values():
                for job in group:
                    job.rate *= scale
        compute_rate = 1.0 - self.slowdown if kernels_active else 1.0
        for job in jobs:
            if job.kind == "compute":
                job.rate = compute_rate
