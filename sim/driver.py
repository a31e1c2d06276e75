"""The SimPy adapter: one process that feeds arrivals and completions to the schedulers.

    loop:  route arrivals -> for each replica: poll runtime, scheduler.step(now, ...),
           prepare/execute every plan it returns -> wait for the first of: a completion on
           any replica, the next arrival, a prefetch deadline

The scheduler is the same object the torch backend's driver uses; this file only moves
messages and time. Replicas have their own L1/L2 (runtime + scheduler) and may share one L3.
"""

from __future__ import annotations

import heapq
import math
import sys
from dataclasses import dataclass, field
from typing import Any

import simpy

from hicache.config import CacheConfig
from hicache.scenario import cache_config
from hicache.scheduler.scheduler import Scheduler, SchedulerConfig
from hicache.timeline import Timeline
from hicache.tree.radix import page_keys
from hicache.workload.factory import make_workload
from hicache.workload.request import Request
from sim.hardware.model import ModelPreset, load_model
from sim.hardware.profile import HardwareProfile, load_profile
from sim.l3 import L3Store
from sim.runtime import SimRuntime

SCHEDULER_KEYS = {"max_running_requests", "chunked_prefill_size", "overlap",
                  "requery_lost_prefix"}
RUN_KEYS = {"layerwise", "trace_layers", "backup_throttle_bytes_per_s", "progress",
            "max_sim_time"}
ROUTERS = ("round_robin", "cache_aware")


@dataclass
class Replica:
    scheduler: Scheduler
    runtime: SimRuntime
    timeline: Timeline


@dataclass
class SimResult:
    name: str
    replicas: list[Replica]
    records: list[dict]
    decisions: list[tuple]
    sim_time: float
    requests: int
    extra: dict[str, Any] = field(default_factory=dict)


def _check_keys(section: dict, allowed: set[str], where: str, source: str) -> None:
    for k in section:
        if k not in allowed:
            raise ValueError(f"{source}: {where}.{k}: unknown key; allowed: "
                             f"{', '.join(sorted(allowed))}")


def _l3(env: simpy.Environment, cache: CacheConfig, hw: HardwareProfile) -> L3Store | None:
    backend = cache.hicache_storage_backend
    if backend is None:
        return None
    spec = hw.mooncake if backend == "mooncake" else hw.file
    if spec is None:
        raise ValueError(f"hardware profile {hw.name!r} has no l3.{backend} section")
    return L3Store.mooncake(env, spec) if backend == "mooncake" else L3Store.file(env, spec)


def build(env: simpy.Environment, d: dict, source: str) -> tuple[list[Replica], CacheConfig]:
    cache = cache_config(d, source=source)
    hw: HardwareProfile = load_profile(d.get("hardware", "h100-sxm"))
    model: ModelPreset = load_model(d.get("model", "llama-3-8b"))
    sched = dict(d.get("scheduler") or {})
    run = dict(d.get("run") or {})
    _check_keys(sched, SCHEDULER_KEYS, "scheduler", source)
    _check_keys(run, RUN_KEYS, "run", source)
    page = cache.page_size
    device_pages = cache.device_tokens // page
    host_pages = 0
    if cache.enable_hierarchical_cache:
        host_pages = cache.host_tokens(model.kv_bytes_per_token()) // page
    l3 = _l3(env, cache, hw)
    replicas = []
    n = int(d.get("replicas", 1))
    if n < 1:
        raise ValueError(f"{source}: replicas: must be >= 1, got {n}")
    for i in range(n):
        tl = Timeline()
        rt = SimRuntime(env, profile=hw, model=model, page_size=page,
                        device_pages={"full": device_pages}, host_pages={"full": host_pages},
                        l3=l3, io_backend=cache.hicache_io_backend,
                        layerwise=bool(run.get("layerwise", True)),
                        backup_throttle_bytes_per_s=run.get("backup_throttle_bytes_per_s"),
                        runtime_id=f"sim{i}", timeline=tl,
                        trace_layers=bool(run.get("trace_layers", False)))
        cfg = SchedulerConfig(**sched, l3=l3 is not None)
        replicas.append(Replica(Scheduler(cache, rt.info(), cfg, replica=i), rt, tl))
    return replicas, cache


class Router:
    def __init__(self, kind: str, replicas: list[Replica], page: int) -> None:
        if kind not in ROUTERS:
            raise ValueError(f"router: unknown {kind!r}; allowed: {', '.join(ROUTERS)}")
        self.kind, self.replicas, self.page, self._next = kind, replicas, page, 0

    def route(self, req: Request) -> int:
        if len(self.replicas) == 1:
            return 0
        if self.kind == "round_robin":
            self._next = (self._next + 1) % len(self.replicas)
            return self._next
        keys = page_keys(req.tokens, self.page)

        def score(i: int) -> tuple:
            s = self.replicas[i].scheduler
            m = s.tree.match(keys, touch=False)
            return (-m.total_tokens, len(s.running) + len(s.waiting), i)

        return min(range(len(self.replicas)), key=score)


def simulate(d: dict, *, name: str = "run", source: str = "<scenario>",
             progress: bool | None = None) -> SimResult:
    env = simpy.Environment()
    replicas, cache = build(env, d, source)
    workload = make_workload(d["workload"], int(d.get("seed", 0)))
    router = Router(d.get("router", "round_robin"), replicas, cache.page_size)
    run = dict(d.get("run") or {})
    show = run.get("progress", False) if progress is None else progress
    limit = float(run.get("max_sim_time", math.inf))
    state = {"n": 0, "done": 0}
    env.process(_loop(env, replicas, workload, router, state, show, limit))
    env.run()
    records = [r for rep in replicas for r in rep.scheduler.records()]
    records.sort(key=lambda r: r["rid"])
    decisions = [(i, *dec) for i, rep in enumerate(replicas) for dec in rep.scheduler.decisions]
    if show:
        print(file=sys.stderr)
    return SimResult(name, replicas, records, decisions, env.now, state["n"])


def _loop(env: simpy.Environment, replicas: list[Replica], workload: Any, router: Router,
          state: dict, show: bool, limit: float):  # noqa: ANN202 - a simpy process
    pending: list[tuple[float, int, Request]] = []

    def push(reqs: list[Request]) -> None:
        for r in reqs:
            heapq.heappush(pending, (r.arrival, r.rid, r))
            state["n"] += 1

    push(workload.start())
    cpu = replicas[0].runtime.profile.scheduler_step_s
    while True:
        now = env.now
        routed: list[list[Request]] = [[] for _ in replicas]
        while pending and pending[0][0] <= now:
            req = heapq.heappop(pending)[2]
            routed[router.route(req)].append(req)
        worked = False
        for rep, arrivals in zip(replicas, routed, strict=True):
            plans = rep.scheduler.step(now, arrivals, rep.runtime.poll())
            for rid in rep.scheduler.just_finished:
                push(workload.on_finished(rid, now))
                state["done"] += 1
            while plans:
                worked = True
                for plan in plans:
                    handle = rep.runtime.prepare_batch(plan)
                    rep.scheduler.prepared(handle)
                    rep.runtime.execute_batch(handle)
                plans = rep.scheduler.step(now)
        if show and state["done"] % 50 == 0:
            print(f"\r  t={now:9.2f}s  requests {state['done']}/{state['n']}", end="",
                  file=sys.stderr)
        if pending and pending[0][0] <= now:
            continue
        if not pending and all(rep.scheduler.idle for rep in replicas):
            return
        if now >= limit:
            return
        events = [rep.runtime.wakeup() for rep in replicas]
        if pending:
            events.append(env.timeout(pending[0][0] - now))
        deadlines = [t for rep in replicas if (t := rep.scheduler.next_deadline(now))]
        if deadlines:
            events.append(env.timeout(min(deadlines) - now))
        if worked and cpu > 0:
            yield env.timeout(cpu)  # the scheduler's own CPU time per step
        yield env.any_of(events)
