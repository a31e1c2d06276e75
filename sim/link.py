"""PCIe link (both directions), L3 traffic, host memory and SM sharing: one replica's
fluid allocation policy.

Rates, recomputed whenever a job starts or ends (see :mod:`sim.fluid`):
- each direction's peak (h2d/d2h_bytes_per_s) is split equally among its active copies;
  a copy kernel (tag ``kernel``) is further capped at io_kernel.bytes_per_s, a throttled
  copy at its ``cap``;
- when both directions are active and their sum exceeds bidirectional_bytes_per_s, both
  are scaled down proportionally to share that cap (55 + 55 -> 41.5 + 41.5 of 83);
- L3 transfers (kind ``l3``: the store's reads land in host memory, its writes read it)
  get their NIC and store shares from :class:`sim.l3_client.L3Client`;
- host memory bandwidth caps PCIe and L3 traffic together: when their sum exceeds it, all
  of them are scaled down proportionally (DMA from/to pinned host memory);
- a compute job runs at 1 - io_kernel.compute_slowdown while any copy kernel holds SMs.
Faults (:mod:`sim.faults`) scale the PCIe figures (``factor``) and host memory
(``host_factor``) while they last; the injector re-plans the fluid server when they change.

A copy kernel joining or leaving a link it has alone (the layer-wise loads' common case)
changes only its own rate and the compute jobs' unless host memory binds: :meth:`PcieLink.
shift_rate` gives them without re-allocating, re-using the L3 rates the last allocation
left while the store's ``epoch`` (:mod:`sim.l3`) says the L3 split is unchanged.

Efficiency curve: a lone DMA call of B bytes takes call_overhead_s + B / rate(B) with
rate(B) = peak * B / (B + half_efficiency_bytes). Equivalently the call occupies its copy
engine for call_overhead_s, then moves B + half_efficiency_bytes "effective bytes" at the
link rate (see :mod:`sim.copy_engine`); that form also holds while the link is shared.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sim.fluid import FluidJob
from sim.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    from sim.l3_client import L3Client

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
        self.slowed: dict[int, float] = {}  # fault -> PCIe rate factor (sim.faults)
        self.pressed: dict[int, float] = {}  # fault -> host memory bandwidth factor
        self.l3: L3Client | None = None  # this replica's L3 client (rates of ``l3`` jobs)
        # the last allocation's L3 jobs and their total when it left their rates at the
        # client's split (no host-memory squeeze), with the store's epoch then: while
        # the epoch holds, that split is what a re-allocation would set (shift_rate)
        self._steady: tuple[int, list[FluidJob], float] | None = None

    @property
    def factor(self) -> float:
        """The PCIe faults' factors' product (1 with none: ``math.prod`` of nothing)."""
        slowed = self.slowed
        return math.prod(slowed.values()) if slowed else 1

    @property
    def host_factor(self) -> float:
        """The host-memory faults' factors' product (1 with none)."""
        pressed = self.pressed
        return math.prod(pressed.values()) if pressed else 1

    def solo_rate(self, job: FluidJob, jobs: list[FluidJob]) -> float | None:
        """A compute job takes no link, NIC or host-memory share: its joining or leaving
        ``jobs`` changes no other rate, and its own is :meth:`allocate`'s (None for any
        other kind). Valid only while allocate alone sets the rates (no interpreter)."""
        if job.kind != "compute":
            return None
        for other in jobs:
            if other.kind in DIRECTIONS and "kernel" in other.tags:
                return 1.0 - self.slowdown
        return 1.0

    def shift_rate(self, job: FluidJob, jobs: list[FluidJob], kinds: dict[str, int],
                   joined: bool) -> float | None:
        """The compute jobs' rate once ``job``, a PCIe copy, joined (it is in ``jobs``:
        its rate is set here) or left ``jobs`` alone on the link (no other h2d or d2h
        job), as :meth:`allocate` would set it, when that changes no other rate: no
        host-memory squeeze with it, and the L3 jobs' rates are still the split the
        last allocation left them at (:attr:`_steady`, the store's epoch unchanged).
        None otherwise (and for any other kind): re-allocate them all. ``kinds`` counts
        ``jobs`` by kind. The floats are allocate's (a share of the peak over one job,
        a total over one rate, the host check with scale 1.0), and allocate's watch of
        the L3 deadlines runs as it would. Valid while :attr:`l3` listens to the fluid
        server that calls it (its L3 jobs joining or leaving bump the epoch: SimRuntime's
        wiring)."""
        kind = job.kind
        if kind != "h2d" and kind != "d2h":
            return None
        get = kinds.get
        if get("h2d", 0) + get("d2h", 0) != (1 if joined else 0):
            return None  # another copy shares the link (or the bidirectional cap)
        l3_total = 0.0
        steady = None
        moving = get("l3", 0)
        if moving and self.l3 is not None:
            steady = self.steady_l3(moving)
            if steady is None:
                return None  # the L3 split may differ, or it was squeezed: allocate
            l3_total = steady[1]
        elif not joined:
            return 1.0  # compute alone (allocate's early return)
        total = 0
        if joined:
            rate = self.lone_rate(kind, "kernel" in job.tags, job.cap)
            total += rate
        if self.host_binds(total, l3_total):
            return None  # host memory binds: the squeeze changes other rates
        if joined:
            job.rate = rate
        if steady is not None:
            assert self.l3 is not None
            self.l3.watch(steady[0])
        return 1.0 - self.slowdown if joined and "kernel" in job.tags else 1.0

    def lone_rate(self, kind: str, kernel: bool, cap: float | None = None) -> float:
        """A copy's rate alone in its direction ``kind``: allocate's share of the peak over
        one job, capped at the copy kernel's rate (``kernel``) and at ``cap``."""
        rate = self.peak[kind] * self.factor / 1  # _share over one job
        if kernel:
            rate = min(rate, self.kernel_rate)
        if cap is not None:
            rate = min(rate, cap)
        return rate

    def host_binds(self, copies: float, l3_total: float) -> bool:
        """Whether host memory squeezes PCIe copies moving ``copies`` and L3 transfers
        moving ``l3_total`` bytes/s (allocate's check with no bidirectional scale)."""
        return copies * 1.0 + l3_total > self.host * self.host_factor

    def l3_ceiling(self) -> float:
        """A bound no total of L3 rates :meth:`allocate` sets exceeds, whatever the
        jobs and the split: per group the budget one moving replica gets (the store's
        service rate over one, within the NIC), summed (with room for the rounding of
        an equal split's sum); inf without an L3 client (no bound known)."""
        l3 = self.l3
        if l3 is None:
            return math.inf
        store = l3.store
        total = 0.0
        for group in (("io",) if store.duplex_shared else ("read", "write")):
            budget = store.service_rate(group)
            if store.nic is not None:
                budget = min(budget, store.nic * l3.nic_factor)
            total += budget
        return total * (1.0 + 1e-9)

    def steady_l3(self, moving: int) -> tuple[list[FluidJob], float] | None:
        """The L3 jobs and their total rate that the last allocation left at the client's
        split (no host-memory squeeze), while the store's epoch says a re-allocation would
        set the same split and ``moving`` (the L3 jobs on the server now) are those; None
        otherwise (no L3 client, or the split may differ)."""
        steady = self._steady
        if (steady is None or self.l3 is None or steady[0] != self.l3.store.epoch
                or len(steady[1]) != moving):
            return None
        return steady[1], steady[2]

    def allocate(self, jobs: list[FluidJob]) -> None:
        """Set every job's rate (module doc). One pass sorts the jobs; each direction's
        total is summed left to right as ``sum`` would, so the floats are those of the
        plain form (a list per direction, ``sum`` over it)."""
        h2d: list[FluidJob] = []
        d2h: list[FluidJob] = []
        l3_jobs: list = []
        compute: list[FluidJob] = []
        kernels_active = False
        for job in jobs:
            kind = job.kind
            if kind == "compute":
                compute.append(job)
            elif kind == "h2d" or kind == "d2h":
                (h2d if kind == "h2d" else d2h).append(job)
                kernels_active = kernels_active or "kernel" in job.tags
            elif kind == "l3":
                l3_jobs.append(job)
        self._steady = None
        if not (l3_jobs or h2d or d2h):  # compute alone: full speed
            for job in compute:
                job.rate = 1.0
            return
        factor = self.factor
        total_h2d = self._share(h2d, self.peak["h2d"] * factor) if h2d else 0
        total_d2h = self._share(d2h, self.peak["d2h"] * factor) if d2h else 0
        scale = 1.0
        total = total_h2d + total_d2h
        if total_h2d > 0 and total_d2h > 0:
            bidirectional = self.bidirectional * factor
            if total > bidirectional:
                scale = bidirectional / total
        l3_total = 0.0
        l3 = self.l3
        if l3_jobs and l3 is not None:
            l3.allocate(l3_jobs)
            l3_total = sum(job.rate for job in l3_jobs)
        host = self.host * self.host_factor
        squeezed = False
        if total * scale + l3_total > host:
            if not l3_total:
                scale = host / total  # PCIe alone (the form before L3 joined: bit-exact)
            else:
                squeeze = host / (total * scale + l3_total)
                scale *= squeeze
                for job in l3_jobs:
                    job.rate *= squeeze
                squeezed = True
        if scale < 1.0:
            for job in h2d:
                job.rate *= scale
            for job in d2h:
                job.rate *= scale
        if l3_jobs and l3 is not None:
            if not squeezed:
                self._steady = (l3.store.epoch, l3_jobs, l3_total)
            l3.watch(l3_jobs)
        if compute:
            compute_rate = 1.0 - self.slowdown if kernels_active else 1.0
            for job in compute:
                job.rate = compute_rate

    def _share(self, group: list[FluidJob], peak: float) -> float:
        """Split ``peak`` equally among ``group`` (a copy kernel capped at the kernel
        rate, a throttled copy at its cap); their total, summed as ``sum`` sums."""
        share = peak / len(group)
        kernel_rate = self.kernel_rate
        total = 0
        for job in group:
            rate = share
            if "kernel" in job.tags:
                rate = min(rate, kernel_rate)
            if job.cap is not None:
                rate = min(rate, job.cap)
            job.rate = rate
            total += rate
        return total
