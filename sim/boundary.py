"""What the runtime in its own process costs the scheduler (``run.runtime_process``).

    per plan      prepare_batch crossing: interp(cpu.ipc_prepare_s, requests in the plan)
                  execute_batch crossing: cpu.ipc_crossing_s (the handle goes by id)
    per wake-up   the poll that brings completions: cpu.ipc_crossing_s

Both are charged on the scheduler's timeline before the plan reaches the runtime (after
``scheduler_step_s``), so with overlap on they hide behind the batch in flight and with it
off they add to TTFT and ITL, as the process split does (``ipc.ProcessGPURuntime``).
Figures come from the hardware profile (measured by ``benchmarks/runtime_boundary.py``);
interpolation is log-log in requests, as the cost model's tables.
"""

from __future__ import annotations

from sim.cost import interp_loglog
from sim.hardware.profile import HardwareProfile


class CrossingCost:
    """Seconds the process split adds; zero for an in-process runtime."""

    def __init__(self, profile: HardwareProfile, process: bool) -> None:
        self.process = process
        if process and (profile.ipc_crossing_s is None or not profile.ipc_prepare_s):
            raise ValueError(f"run.runtime_process: hardware profile {profile.name!r} has no "
                             f"cpu.ipc_crossing_s / cpu.ipc_prepare_s (measure them with "
                             f"benchmarks/runtime_boundary.py)")
        self.small = profile.ipc_crossing_s or 0.0
        self.prepare_table = profile.ipc_prepare_s

    def plan(self, requests: int) -> float:
        """A plan's two crossings: prepare (``requests`` slices) and execute."""
        if not self.process:
            return 0.0
        return interp_loglog(self.prepare_table, max(1, requests)) + self.small

    def wakeup(self) -> float:
        return self.small if self.process else 0.0
