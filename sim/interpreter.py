"""The CPU runtime's interpreter lock (the GIL) as a fluid contention between threads.

On the torch runtime's CPU device the driver thread and each lane's worker thread are
Python threads under one interpreter lock. An op's solo time splits into *interpreter*
time (Python and the argument handling of small torch calls: the part that needs the
lock) and *native* time (kernels, memcpy: the lock released, the other core free). Every
fluid job that runs on such a thread carries its interpreter share ``gil`` (driver work:
1; a layer: its fit's per-op constant over its time; a copy's per-call part: 1) and its
``thread``. While two threads are busy at once their interpreter parts slow down by the
speeds calibration measured (:mod:`gpu_backend.calib_gil`)::

    lane op beside the driver doing k-work:  interpreter speed s = lane[k]
    lane op beside another lane's op j:      s *= 1 - phi_j * (1 - lanes)
    the driver beside lane op j:             s *= 1 - phi_j * (1 - driver[k])
    a job's rate = 1 / (gil / s + 1 - gil)   (native time runs at full speed)

``phi_j`` is the share of op j's time spent in its interpreter part when slowed the same
way, ``(g/s)/(g/s + 1 - g)``: a layer of long kernels (small ``gil``) seldom holds the
lock and slows the driver little, a decode layer of small calls as much as a thread of
small calls does. ``k`` is the driver's kind: ``python`` (the scheduler, prepare's
bookkeeping, submits: keeps the lock until it blocks, so a lane beside it nearly stops)
or ``torch`` (execute's index building: the lock changes hands at every call and both
threads crawl). Invariant: with one busy thread every rate is its solo rate; rates never
grow under contention.
"""

from __future__ import annotations

from sim.fluid import Allocator, FluidJob
from sim.hardware.profile import InterpreterSpec

DRIVER = "cpu"  # the driver thread's lane name (sim.host)
INTERPRETER = "interpreter"  # kind of a job that is thread time alone (solo rate 1)
PYTHON = "python"  # tag of driver work that is pure interpreter work (else torch calls)


def _phase_share(gil: float, speed: float) -> float:
    """Share of a job's time in its interpreter part when that part runs at ``speed``."""
    if gil <= 0:
        return 0.0
    slow = gil / speed
    return slow / (slow + 1.0 - gil)


class Interpreter:
    """Wraps a fluid allocation (:class:`sim.link.PcieLink`) with the lock's slowdowns;
    jobs of kind ``interpreter`` (thread time: driver work, a copy's calls) get a solo rate
    of 1 first."""

    def __init__(self, spec: InterpreterSpec, base: Allocator) -> None:
        self.spec, self.base = spec, base

    def _kind(self, job: FluidJob) -> str:
        return PYTHON if PYTHON in job.tags else "torch"

    def allocate(self, jobs: list[FluidJob]) -> None:
        for job in jobs:
            if job.kind == INTERPRETER:
                job.rate = 1.0
        self.base(jobs)
        users = [j for j in jobs if j.gil > 0]
        if len({j.thread for j in users}) < 2:
            return
        sp = self.spec
        drivers = [j for j in users if j.thread == DRIVER]
        lanes = [j for j in users if j.thread != DRIVER]
        # the driver thread's kind: torch while any of its jobs makes torch calls
        k = PYTHON if drivers and all(self._kind(j) == PYTHON for j in drivers) else "torch"
        lane_speed = sp.lane_python if k == PYTHON else sp.lane_torch
        driver_speed = sp.driver_python if k == PYTHON else sp.driver_torch
        speed: dict[int, float] = {}
        for j in lanes:
            s = lane_speed if drivers else 1.0
            for o in lanes:
                if o.thread != j.thread:
                    s *= 1.0 - _phase_share(o.gil, sp.lanes) * (1.0 - sp.lanes)
            speed[id(j)] = s
        s = 1.0
        for o in lanes:
            s *= 1.0 - _phase_share(o.gil, lane_speed) * (1.0 - driver_speed)
        for j in drivers:
            speed[id(j)] = s
        for j in users:
            s = speed[id(j)]
            if s < 1.0:
                j.rate /= j.gil / s + 1.0 - j.gil
