"""Replicas that share one SimRuntime (``sharing.pool``: static or shared).

:class:`hicache.runtime.shared.SharedGPURuntime` does the sharing; this adds what a SimPy
driver needs of each tenant's view: a completion event. Every replica process waits on
the runtime's one wake-up event; whichever polls first routes all completions to their
tenants' queues, and a view with completions queued answers with an event that has
already fired, so no replica misses its own.
"""

from __future__ import annotations

import simpy

from hicache.runtime.handles import Kind
from hicache.runtime.shared import SharedGPURuntime, TenantRuntime
from hicache.runtime.sharing import SharingConfig
from sim.runtime import SimRuntime


class SimTenantRuntime(TenantRuntime):
    """A tenant's view of a shared SimRuntime, for a SimPy process."""

    def completion_event(self) -> simpy.Event:
        rt: SimRuntime = self.shared.rt  # type: ignore[assignment]
        if not self.queue:
            self.shared.poll_all()
        if self.queue:
            return rt.env.event().succeed()
        return rt.completion_event()

    @property
    def base_runtime(self) -> SimRuntime:
        return self.shared.rt  # type: ignore[return-value]


def share_runtime(rt: SimRuntime, sharing: SharingConfig, replicas: int
                  ) -> tuple[SharedGPURuntime, list[SimTenantRuntime]]:
    """One view per replica ("r0", "r1", ...) onto ``rt`` under ``sharing``'s policy."""
    tenants = [f"r{i}" for i in range(replicas)]
    policy = sharing.policy(rt.device_sizes[Kind.FULL], tenants)
    shared = SharedGPURuntime(rt, policy, free_pages=lambda: rt.device[Kind.FULL].free_count)
    return shared, [shared.tenant(t, SimTenantRuntime) for t in tenants]  # type: ignore[misc]
