"""Several schedulers on one TorchRuntime (``sharing.pool``: static or shared).

    one TorchRuntime ── SharedGPURuntime ── TenantRuntime r0 ── Scheduler 0
    (one allocator,                      └─ TenantRuntime r1 ── Scheduler 1
     one KV pool, one set of lanes)          (router: round_robin / cache_aware)

    loop:  route arrivals (and follow-ups) -> for each scheduler: its completions and
           arrivals in time order (``gpu_backend.driver._Loop.deliver``) -> block until
           the runtime's next completion, arrival or prefetch deadline

The same per-scheduler delivery as the one-replica driver, one clock (the runtime's),
one wait for all: whichever scheduler's completion arrives, the shared runtime routes it.
"""

from __future__ import annotations

import math
from typing import Any

from gpu_backend.driver import TorchResult, _Loop, build_runtime, make_l3, real_store_cache
from gpu_backend.shapes import ModelShape
from hicache.routing import Router, SchedulerView
from hicache.runtime.handles import Kind
from hicache.runtime.shared import SharedGPURuntime, TenantRuntime
from hicache.scenario import Scenario
from hicache.scheduler.scheduler import Scheduler
from hicache.workload.factory import make_workload
from hicache.workload.request import Request


class _Tenant(_Loop):
    """One scheduler's delivery; new requests go through the router."""

    def __init__(self, *args: Any, route: Any) -> None:
        super().__init__(*args)
        self.route = route

    def push(self, reqs: list[Request]) -> None:
        self.route(reqs)

    def enqueue(self, r: Request) -> None:
        super().push([r])


def run_shared(sc: Scenario, shape: ModelShape, device: str, l3_dir: str, name: str,
               stall_timeout: float) -> TorchResult:
    """Run ``sc``'s replicas as schedulers sharing one TorchRuntime."""
    if sc.scheduler.track_components:
        raise ValueError(f"{sc.source}: sharing.pool: replicas sharing a runtime track the "
                         f"FULL component only (scheduler.track_components: false)")
    l3 = make_l3(sc.cache, l3_dir)
    has_l3 = l3 is not None
    rt = build_runtime(sc, sc.cache, shape, device, l3)
    try:
        tenants = [f"r{i}" for i in range(sc.replicas)]
        try:
            policy = sc.sharing.policy(rt.info().device_pages[Kind.FULL], tenants)
        except ValueError as e:
            raise ValueError(f"{sc.source}: {e}") from None
        shared = SharedGPURuntime(rt, policy, free_pages=lambda: rt.dev_alloc.num_free)
        workload = make_workload(sc.workload, sc.seed)
        limit = sc.run.max_sim_time if sc.run.max_sim_time is not None else math.inf
        loops: list[_Tenant] = []
        schedulers = []
        for i, t in enumerate(tenants):
            view: TenantRuntime = shared.tenant(t)
            sched = Scheduler(real_store_cache(sc.cache), view.info(),
                              sc.scheduler_config(l3=has_l3),
                              replica=i)
            shared.attach(t, sched.kv.budget)
            schedulers.append(sched)
        router = Router(sc.router, [SchedulerView(s) for s in schedulers])

        def route(reqs: list[Request]) -> None:
            for r in reqs:
                loops[router.route(r)].enqueue(r)

        for i, sched in enumerate(schedulers):
            loops.append(_Tenant(shared.views[tenants[i]], sched, workload, limit,
                                 stall_timeout, route=route))
        outer = _Outer(rt, shared, loops, workload, limit, stall_timeout)
        outer.run()
        if not rt.drain(stall_timeout):
            raise TimeoutError(f"ops still running {stall_timeout} s after the last request "
                               f"finished")
    finally:
        rt.close()
        close = getattr(l3, "close", None)
        if close is not None:
            close()
    records = sorted((r for s in schedulers for r in s.records()), key=lambda r: r["rid"])
    open_ = [r["rid"] for r in records if r["finish"] is None and not r.get("rejected")]
    why = (f"stalled: {outer.stall}" if outer.stall else
           f"run.max_sim_time ({limit:g} s of wall time) reached first")
    steps = [x for lp in loops for x in lp.step_s]
    return TorchResult(name, records, [(i, *d.row()) for i, s in enumerate(schedulers)
                                       for d in s.decisions],
                       rt.timeline, outer.end - outer.t0, sum(lp.n for lp in loops),
                       outer.t0,
                       {"scheduler_s": sum(lp.sched_s for lp in loops), "step_s": steps,
                        "steps": len(steps), "device": device, "shape": shape.name,
                        "schedulers": len(schedulers), "sharing": policy.kind,
                        "placed_pages": {t: shared.placed(t) for t in tenants}},
                       unfinished=dict.fromkeys(open_, why), stall=outer.stall)


class _Outer:
    """The wall-clock loop over every scheduler (see the module docstring)."""

    def __init__(self, rt: Any, shared: SharedGPURuntime, loops: list[_Tenant],
                 workload: Any, limit: float, stall_timeout: float) -> None:
        self.rt, self.shared, self.loops, self.workload = rt, shared, loops, workload
        self.limit, self.stall_timeout = limit, stall_timeout
        self.stall: str | None = None
        self.t0 = self.end = 0.0

    def run(self) -> None:
        rt, loops = self.rt, self.loops
        self.t0 = rt.now()
        for lp in loops:
            lp.t0 = self.t0
        loops[0].push(self.workload.start())  # routed to every scheduler
        last = self.t0
        while True:
            now = rt.now()
            self.shared.poll_all()
            if any([lp.deliver(now, lp.rt.poll()) for lp in loops]):
                last = now
            if all(not lp.pending and lp.scheduler.idle for lp in loops):
                break
            if now - self.t0 >= self.limit:
                break
            wake = [t for lp in loops for t in (
                lp.pending[0][0] if lp.pending else None,
                lp.scheduler.next_deadline(now)) if t is not None]
            busy = any(lp.scheduler.awaiting_runtime for lp in loops)
            if not wake and not busy:
                self.stall = "nothing can make progress: " + "; ".join(
                    f"scheduler {i}: {lp.scheduler.diagnose()}" for i, lp in enumerate(loops)
                    if not lp.scheduler.idle)
                break
            if not wake and rt.now() - last > self.stall_timeout:
                self.stall = f"no completion for {self.stall_timeout:g} s"
                break
            cap = min([self.stall_timeout, *(t - rt.now() for t in wake)])
            if cap > 0:
                self.shared.wait_all(cap)
        self.end = rt.now()
