"""The SimPy adapter: one process that feeds arrivals and completions to the schedulers.

    loop:  route arrivals -> for each replica: poll runtime, scheduler.step(now, ...),
           prepare/execute every plan it returns -> wait for the first of: a completion on
           any replica, the next arrival, a prefetch deadline

The scheduler is the same object the torch backend's driver uses; this file only moves
messages and time. Replicas have their own L1/L2 (runtime + scheduler) and may share one L3.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from hicache.config import CacheConfig
from hicache.scenario import cache_config, check_keys
from hicache.scheduler.scheduler import SCHEDULER_KEYS, Scheduler, SchedulerConfig
from hicache.timeline import Timeline
from hicache.tree.radix import page_keys
from hicache.workload.factory import make_workload
from hicache.workload.request import Request
from sim.hardware.model import ModelPreset, load_model
from sim.hardware.profile import HardwareProfile, load_profile
from sim.l3 import L3Store
from sim.runtime import SimRuntime

RUN_KEYS = {"layerwise", "trace_layers", "backup_throttle_bytes_per_s", "progress",
            "max_sim_time",
            "swa_tokens", "mamba_slots",  # state pools of scheduler.track_components
            "torch_profiler"}  # read by the torch backend's driver; the simulator ignores it
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
    check_keys(sched, SCHEDULER_KEYS, "scheduler", source)
    check_keys(run, RUN_KEYS, "run", source)
    page = cache.page_size
    device_pages = cache.device_tokens // page
    host_pages = 0
    if cache.enable_hierarchical_cache:
        host_pages = cache.host_tokens(model.kv_bytes_per_token()) // page
    l3 = _l3(env, cache, hw)
    pools = {"full": device_pages}
    if sched.get("track_components", False):
        pools.update(_state_pools(model, cache, sched, run))
    replicas = []
    n = int(d.get("replicas", 1))
    if n < 1:
        raise ValueError(f"{source}: replicas: must be >= 1, got {n}")
    for i in range(n):
        tl = Timeline()
        rt = SimRuntime(env, profile=hw, model=model, page_size=page,
                        device_pages=pools, host_pages={"full": host_pages},
                        l3=l3, io_backend=cache.hicache_io_backend,
                        layerwise=bool(run.get("layerwise", True)),
                        backup_throttle_bytes_per_s=run.get("backup_throttle_bytes_per_s"),
                        runtime_id=f"sim{i}", timeline=tl,
                        trace_layers=bool(run.get("trace_layers", False)))
        cfg = SchedulerConfig(**sched, l3=l3 is not None)
        replicas.append(Replica(Scheduler(cache, rt.info(), cfg, replica=i), rt, tl))
    return replicas, cache


def _state_pools(model: ModelPreset, cache: CacheConfig, sched: dict, run: dict
                 ) -> dict[str, int]:
    """L1 pools of a hybrid model's other components (scheduler.track_components):
    ``run.swa_tokens`` (default: cache.device_tokens) sized into SWA pages, and
    ``run.mamba_slots`` (default: 3 x max_running_requests) MAMBA state slots."""
    out = {}
    if model.count("swa"):
        out["swa"] = int(run.get("swa_tokens", cache.device_tokens)) // cache.page_size
    if model.count("mamba"):
        running = int(sched.get("max_running_requests",
                                SchedulerConfig.max_running_requests))
        out["mamba"] = int(run.get("mamba_slots", 3 * running))
    return out


class Router:
    """Spreads arrivals over replicas.

    ``round_robin``; or ``cache_aware``, shaped like SGLang's router: when the replicas'
    loads (running + waiting requests) are imbalanced (max - min > balance_abs_threshold
    and max > min * balance_rel_threshold) send to the least loaded; else, if some
    replica's L1+L2 holds at least ``cache_threshold`` of the prompt, send to the longest
    match; else to the least loaded. The thresholds are scenario keys (hicache-lab's
    defaults below), e.g. ``router: {policy: cache_aware, cache_threshold: 0.5}``.
    """

    DEFAULTS = {"cache_threshold": 0.5, "balance_abs_threshold": 32,
                "balance_rel_threshold": 1.5}

    def __init__(self, spec: str | dict, replicas: list[Replica], page: int) -> None:
        spec = {"policy": spec} if isinstance(spec, str) else dict(spec)
        kind = spec.pop("policy", "round_robin")
        if kind not in ROUTERS:
            raise ValueError(f"router.policy: unknown {kind!r}; allowed: {', '.join(ROUTERS)}")
        for k in spec:
            if k not in self.DEFAULTS:
                raise ValueError(f"router.{k}: unknown key; allowed: policy, "
                                 f"{', '.join(self.DEFAULTS)}")
        self.opts = self.DEFAULTS | spec
        self.kind, self.replicas, self.page, self._next = kind, replicas, page, -1

    def route(self, req: Request) -> int:
        n = len(self.replicas)
        if n == 1:
            return 0
        if self.kind == "round_robin":
            self._next = (self._next + 1) % n
            return self._next
        loads = [len(r.scheduler.running) + len(r.scheduler.waiting) for r in self.replicas]
        least = min(range(n), key=lambda i: (loads[i], i))
        hi, lo = max(loads), min(loads)
        o = self.opts
        if hi - lo > o["balance_abs_threshold"] and hi > lo * o["balance_rel_threshold"]:
            return least
        keys = page_keys(req.tokens, self.page)
        matched = [r.scheduler.tree.match(keys, touch=False).total_tokens
                   for r in self.replicas]
        best = max(range(n), key=lambda i: (matched[i], -loads[i], -i))
        if req.prompt_len and matched[best] / req.prompt_len >= o["cache_threshold"]:
            return best
        return least


def simulate(d: dict, *, name: str = "run", source: str = "<scenario>",
             progress: bool | Callable[[int, int, float], None] | None = None) -> SimResult:
    """Run one (expanded) scenario. ``progress``: a callable ``(done, issued, sim_now)``
    called after each finished request, True for the console's (:mod:`sim.progress`),
    False for none, None to follow the scenario's ``run.progress``."""
    env = simpy.Environment()
    replicas, cache = build(env, d, source)
    workload = make_workload(d["workload"], int(d.get("seed", 0)))
    router = Router(d.get("router", "round_robin"), replicas, cache.page_size)
    run = dict(d.get("run") or {})
    show = run.get("progress", False) if progress is None else progress
    bar = None
    if show is True:
        from sim.progress import Progress, expected_requests

        show = bar = Progress(name, expected_requests(d.get("workload")))
    feed = _Feed(env, workload, router, len(replicas), show or None)
    env.process(feed.route())
    for i, rep in enumerate(replicas):
        env.process(_replica(env, i, rep, feed))
    limit = run.get("max_sim_time")
    env.run(until=None if limit is None else float(limit))
    records = [r for rep in replicas for r in rep.scheduler.records()]
    records.sort(key=lambda r: r["rid"])
    decisions = [(i, *dec) for i, rep in enumerate(replicas) for dec in rep.scheduler.decisions]
    if bar is not None:
        bar.close()
    return SimResult(name, replicas, records, decisions, env.now, feed.issued)


class _Feed:
    """Arrivals in time order, routed into per-replica inboxes (the simulated frontend)."""

    def __init__(self, env: simpy.Environment, workload: Any, router: Router, n: int,
                 show: Callable[[int, int, float], None] | None) -> None:
        self.env, self.workload, self.router, self.show = env, workload, router, show
        self.pending: list[tuple[float, int, Request]] = []
        self.inbox: list[list[Request]] = [[] for _ in range(n)]
        self.kick = [env.event() for _ in range(n)]
        self.more = env.event()
        self.issued = self.done = 0
        self.push(workload.start())

    def push(self, reqs: list[Request]) -> None:
        for r in reqs:
            heapq.heappush(self.pending, (r.arrival, r.rid, r))
            self.issued += 1
        if reqs and not self.more.triggered:
            self.more.succeed()

    def finished(self, rid: int, now: float) -> None:
        self.done += 1
        self.push(self.workload.on_finished(rid, now))
        if self.show is not None:
            self.show(self.done, self.issued, now)

    def route(self):  # noqa: ANN201 - a simpy process
        env = self.env
        while True:
            while self.pending and self.pending[0][0] <= env.now:
                req = heapq.heappop(self.pending)[2]
                i = self.router.route(req)
                self.inbox[i].append(req)
                if not self.kick[i].triggered:
                    self.kick[i].succeed()
            self.more = env.event()
            waits = [self.more]
            if self.pending:
                waits.append(env.timeout(self.pending[0][0] - env.now))
            yield env.any_of(waits)


def _replica(env: simpy.Environment, i: int, rep: Replica, feed: _Feed):  # noqa: ANN202
    """One replica's scheduler loop: step on arrivals and completions; each step that
    plans work costs ``scheduler_step_s`` of CPU *before* its batch reaches the runtime
    (with overlap on, that time hides behind the batch already running)."""
    sched, rt = rep.scheduler, rep.runtime
    cpu = rt.profile.scheduler_step_s
    while True:
        arrivals, feed.inbox[i] = feed.inbox[i], []
        plans = sched.step(env.now, arrivals, rt.poll())
        while True:
            for rid in sched.just_finished:
                feed.finished(rid, env.now)
            if not plans:
                break
            if cpu > 0:
                yield env.timeout(cpu)
            for plan in plans:
                handle = rt.prepare_batch(plan)
                sched.prepared(handle)
                rt.execute_batch(handle)
            plans = sched.step(env.now)
        if feed.inbox[i]:
            continue
        feed.kick[i] = env.event()
        waits = [rt.wakeup(), feed.kick[i]]
        deadline = sched.next_deadline(env.now)
        if deadline is not None:
            waits.append(env.timeout(deadline - env.now))
        yield env.any_of(waits)
