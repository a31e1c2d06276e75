"""The SimPy adapter: one process that feeds arrivals and completions to the schedulers.

    loop:  route arrivals -> for each replica: poll runtime, scheduler.step(now, ...),
           prepare/execute every plan it returns -> wait for the first of: a completion on
           any replica, the next arrival, a prefetch deadline

The scheduler is the same object the torch backend's driver uses; this file only moves
messages and time. Replicas have their own L1/L2 (runtime + scheduler) and may share one L3.
The driver receives a validated :class:`hicache.scenario.Scenario` (a mapping is validated
on entry); routing is :mod:`hicache.routing`'s policy.

Liveness: when SimPy runs out of events while requests are neither finished nor rejected,
nothing can ever make progress (a stall): the result names each such request and why
(``SimResult.unfinished``, ``SimResult.stall``) instead of looking like a short run.

Faults (``scenario.faults``, :mod:`sim.faults`): their windows are events too, so such a
run stops once every request ended and every replica is idle, not when events run out;
with ``run.fault_twin`` a fault-free twin is simulated too, for what the faults cost
(``SimResult.extra["fault_twin"]``, :mod:`sim.fault_report`).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from hicache.collector import run_collector
from hicache.config import CacheConfig
from hicache.routing import Router, SchedulerView
from hicache.runtime.handles import Kind
from hicache.runtime.state import host_state_pool_sizes, state_pool_sizes
from hicache.scenario import Scenario, as_scenario
from hicache.scheduler.scheduler import Scheduler
from hicache.tiers.hashing import ChainIds
from hicache.timeline import Timeline
from hicache.workload.factory import make_workload
from hicache.workload.request import Request
from sim.boundary import CrossingCost
from sim.faults import FaultInjector, FaultLedger, check_faults
from sim.fold import DecodeFolder
from sim.hardware.model import ModelPreset
from sim.hardware.profile import HardwareProfile, load_profile
from sim.l3 import L3Store
from sim.runtime import SimRuntime
from sim.shared import SimTenantRuntime, share_runtime
from sim.streams import first_of


@dataclass
class Replica:
    scheduler: Scheduler
    runtime: SimRuntime
    timeline: Timeline
    crossing: CrossingCost | None = None  # what the runtime in a process adds (or None)
    folder: DecodeFolder | None = None  # run.fold_decode: its steady decode steps fold


@dataclass
class SimResult:
    name: str
    replicas: list[Replica]
    records: list[dict]
    decisions: list[tuple]  # (replica, kind, *fields): Decision.row() per replica
    sim_time: float
    requests: int
    extra: dict[str, Any] = field(default_factory=dict)
    unfinished: dict[int, str] = field(default_factory=dict)  # rid -> why it did not finish
    stall: str | None = None  # the diagnosis when the run stalled
    faults: FaultLedger | None = None  # what each injected fault did (sim.faults)
    events: int = 0  # SimPy events scheduled (a cost figure for benchmarks)
    # the modelled engine's batches: compute batches (folded steps included) and cache-only
    # plans, over all replicas (the work a benchmark divides the simulator's cost by)
    batches: int = 0

    @property
    def rejected(self) -> dict[int, str]:
        """rid -> reason, for requests refused on arrival."""
        return {r["rid"]: r["rejected"] for r in self.records if r.get("rejected")}


def _l3(env: simpy.Environment, cache: CacheConfig, hw: HardwareProfile) -> L3Store | None:
    backend = cache.hicache_storage_backend
    if backend is None:
        return None
    spec = hw.mooncake if backend == "mooncake" else hw.file
    if spec is None:
        raise ValueError(f"hardware profile {hw.name!r} has no l3.{backend} section")
    return L3Store.mooncake(env, spec) if backend == "mooncake" else L3Store.file(env, spec)


def build(env: simpy.Environment, scenario: Scenario | dict,
          source: str = "<scenario>") -> tuple[list[Replica], CacheConfig]:
    """One SimRuntime + Scheduler per replica, sized from the (validated) scenario."""
    sc = as_scenario(scenario, source=source)
    cache, run, model = sc.cache, sc.run, sc.model
    hw: HardwareProfile = load_profile(sc.hardware)
    check_faults(sc, hw)
    page = cache.page_size
    device_pages = cache.device_tokens // page
    host_pages = 0
    if cache.enable_hierarchical_cache:
        try:
            host_pages = cache.host_tokens(model.kv_bytes_per_token()) // page
        except ValueError as e:
            raise ValueError(f"{sc.source}: cache: {e}") from None
    l3 = _l3(env, cache, hw)
    pools = {Kind.FULL: device_pages}
    if sc.scheduler.track_components:
        pools.update(_state_pools(model, sc))
    if sc.sharing.pool != "none":
        return _keyed(_shared_replicas(env, sc, hw, pools, host_pages, l3), l3), cache
    replicas = []
    for i in range(sc.replicas):
        tl = Timeline()
        rt = _runtime(env, sc, hw, pools, host_pages, l3, f"sim{i}", tl)
        cfg = sc.scheduler_config(l3=l3 is not None)
        replicas.append(Replica(Scheduler(cache, rt.info(), cfg, replica=i), rt, tl,
                                CrossingCost(hw, run.runtime_process)))
    return _keyed(replicas, l3), cache


# chain64 L3 keys as one run's dense chain ids (False: chain64's hashes; twin tests)
CHAIN_IDS = True
# ... bytes page keys' too (conversations: False, their SHA-256 chains; twin tests)
CHAIN_IDS_BYTES = True


def _keyed(replicas: list[Replica], l3: L3Store | None) -> list[Replica]:
    """The replicas, keying chain64 L3 pages by one :class:`ChainIds` for the run (every
    replica reaches the one store): equal iff chain64's keys are, so every result is the
    same, and dense, so a conversation's keys sit together in the store's tables
    (:class:`hicache.tiers.hashing.ChainIds`). With :data:`CHAIN_IDS_BYTES` the ids key
    bytes page keys (conversations, token lists) too, equal iff their SHA-256 chains
    are: no page is hashed (multiturn 64 x 40: 22,976 SHA-256s, ~21 ms of CPU, ~0.5G
    instructions under valgrind)."""
    if CHAIN_IDS and l3 is not None:
        ids = ChainIds(bytes_keys=CHAIN_IDS_BYTES)
        for r in replicas:
            if r.scheduler.kv.key_scheme == "chain64":
                r.scheduler.kv.use_chain_ids(ids)
    return replicas


def _runtime(env: simpy.Environment, sc: Scenario, hw: HardwareProfile,
             pools: dict[Kind, int], host_pages: int, l3: L3Store | None, runtime_id: str,
             tl: Timeline) -> SimRuntime:
    run = sc.run
    return SimRuntime(env, profile=hw, model=sc.model, page_size=sc.cache.page_size,
                      device_pages=pools,
                      host_pages={Kind.FULL: host_pages,
                                  **host_state_pool_sizes(pools, host_pages)},
                      l3=l3, io_backend=sc.cache.hicache_io_backend,
                      layerwise=run.layerwise, mem_layout=sc.cache.effective_mem_layout,
                      backup_throttle_bytes_per_s=run.backup_throttle_bytes_per_s,
                      runtime_id=runtime_id, timeline=tl, trace_layers=run.trace_layers,
                      writeback=run.writeback, l3_retry=run.l3_retry,
                      fold_layers=run.fold_layers)


def _shared_replicas(env: simpy.Environment, sc: Scenario, hw: HardwareProfile,
                     pools: dict[Kind, int], host_pages: int, l3: L3Store | None
                     ) -> list[Replica]:
    """``sharing.pool`` static or shared: every replica's scheduler on one runtime (one
    GPU: one pool, one compute stream) through its own tenant view. The runtime's
    timeline is replica 0's."""
    if sc.scheduler.track_components:
        raise ValueError(f"{sc.source}: sharing.pool: replicas sharing a runtime track the "
                         f"FULL component only (scheduler.track_components: false)")
    tl = Timeline()
    rt = _runtime(env, sc, hw, pools, host_pages, l3, "sim0", tl)
    try:
        shared, views = share_runtime(rt, sc.sharing, sc.replicas)
    except ValueError as e:
        raise ValueError(f"{sc.source}: {e}") from None
    cfg = sc.scheduler_config(l3=l3 is not None)
    out = []
    for i, view in enumerate(views):
        sched = Scheduler(sc.cache, view.info(), cfg, replica=i)
        shared.attach(view.tenant, sched.kv.budget)
        out.append(Replica(sched, view, tl if i == 0 else Timeline(),  # type: ignore[arg-type]
                           CrossingCost(hw, sc.run.runtime_process)))
    return out


def _state_pools(model: ModelPreset, sc: Scenario) -> dict[Kind, int]:
    device = sc.cache.device_tokens
    return state_pool_sizes(model.component_kinds, sc.cache.page_size, device,
                            sc.run.swa_tokens or model.swa_pool_tokens(device),
                            sc.run.mamba_slots,
                            sc.scheduler.max_running_requests)


def simulate(scenario: Scenario | dict, *, name: str = "run", source: str = "<scenario>",
             progress: bool | Callable[[int, int, float], None] | None = None,
             observe: Callable[[int, Replica], None] | None = None) -> SimResult:
    """Simulate one scenario (one variant: ``Scenario.expand()`` gives the others).
    ``progress``: a callable ``(done, issued, sim_now)`` called after each finished
    request, True for the console's (:mod:`sim.progress`), False for none, None to follow
    the scenario's ``run.progress``. ``observe(replica index, replica)`` is called after
    each scheduler step once its plans reached the runtime (invariant checks: the soak)."""
    # fewer collections of a growing heap (hicache.collector) from the workload's loading
    # to the records: the run's growth is scanned at most once, not at each threshold
    with run_collector():
        return _simulate(scenario, name, source, progress, observe)


def _simulate(scenario: Scenario | dict, name: str, source: str,
              progress: bool | Callable[[int, int, float], None] | None,
              observe: Callable[[int, Replica], None] | None) -> SimResult:
    sc = as_scenario(scenario, source=source)
    env = simpy.Environment()
    replicas, _ = build(env, sc)
    injector = None
    if sc.faults:
        runtimes = [r.runtime for r in replicas]
        used = any(r.scheduler.kv.l3 for r in replicas)  # L3 is reached through L2
        injector = FaultInjector(env, sc.faults, runtimes, runtimes[0].l3 if used else None)
    workload = make_workload(sc.workload, sc.seed)
    router = Router(sc.router, [SchedulerView(r.scheduler) for r in replicas])
    show = sc.run.progress if progress is None else progress
    bar = None
    if show is True:
        from sim.progress import Progress, expected_requests

        show = bar = Progress(name, expected_requests(sc.workload))
    feed = _Feed(env, workload, router, len(replicas), show or None, sc.run.max_sim_time)
    env.process(feed.route())
    ledger = injector.ledger if injector is not None else None
    # a shared runtime serves several schedulers, a process split charges each crossing:
    # the fold's pipeline (one scheduler, in-process calls) is neither
    fold = sc.run.fold_decode and sc.sharing.pool == "none" and not sc.run.runtime_process
    for i, rep in enumerate(replicas):
        if fold:
            rep.folder = DecodeFolder(env, rep.scheduler, rep.runtime,
                                      rep.runtime.profile.scheduler_step_s, feed.horizon,
                                      per_step_rows=sc.run.timeline_steps)
        env.process(_replica(env, i, rep, feed, ledger, observe))
    if injector is None:
        env.run(until=sc.run.max_sim_time)
    else:
        _run_until_idle(env, feed, replicas, sc.run.max_sim_time)
        injector.finish(env.now)
    records = [r for rep in replicas for r in rep.scheduler.records()]
    records.sort(key=lambda r: r["rid"])
    decisions = [(i, *dec.row()) for i, rep in enumerate(replicas)
                 for dec in rep.scheduler.decisions]
    if bar is not None:
        bar.close()
    res = SimResult(name, replicas, records, decisions, env.now, feed.issued, faults=ledger,
                    events=events_scheduled(env),
                    batches=sum(sum(rep.scheduler.plans.planned) for rep in replicas))
    if sc.faults and sc.run.fault_twin:
        twin = simulate(dataclasses.replace(sc, faults=()), name=f"{name} (fault-free twin)",
                        progress=False)
        res.extra["fault_twin"] = twin.records
    open_ = [r["rid"] for r in records if r["finish"] is None and not r.get("rejected")]
    if open_:
        limit = sc.run.max_sim_time
        if limit is not None and env.now >= limit:
            why = f"run.max_sim_time ({limit:g} s) reached first"
        else:
            res.stall = "; ".join(f"replica {i}: {rep.scheduler.diagnose()}"
                                  for i, rep in enumerate(replicas) if not rep.scheduler.idle)
            why = f"stalled: nothing could make progress ({res.stall})"
        res.unfinished = dict.fromkeys(open_, why)
    return res


def events_scheduled(env: simpy.Environment) -> int:
    """How many events ``env`` has scheduled: SimPy numbers them with one counter."""
    counter = getattr(env, "_eid", None)
    return next(counter) if counter is not None else 0


def _run_until_idle(env: simpy.Environment, feed: _Feed, replicas: list[Replica],
                    limit: float | None) -> None:
    """Step until every request ended and every replica is idle (fault windows still
    queued must not stretch the run), events run out, or ``limit`` is reached."""
    end = math.inf if limit is None else limit
    while env.peek() < end:
        if feed.all_ended() and all(r.scheduler.idle for r in replicas):
            return
        env.step()
    if limit is not None and env.now < limit and env.peek() < math.inf:
        env.run(until=limit)  # the clock reaches the limit, as env.run(until=) does


class _Feed:
    """Arrivals in time order, routed into per-replica inboxes (the simulated frontend)."""

    def __init__(self, env: simpy.Environment, workload: Any, router: Router, n: int,
                 show: Callable[[int, int, float], None] | None,
                 until: float | None = None) -> None:
        self.env, self.workload, self.router, self.show = env, workload, router, show
        self.until = math.inf if until is None else until
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

    def all_ended(self) -> bool:
        """Every request issued so far ended, and none is due."""
        return self.done == self.issued and not self.pending

    def ended(self, rid: int, now: float) -> None:
        """A request finished or was rejected: the workload may issue follow-ups."""
        self.done += 1
        self.push(self.workload.on_finished(rid, now))
        if self.show is not None:
            self.show(self.done, self.issued, now)

    def horizon(self) -> float:
        """When a fold must end (sim.fold): with one replica, the next arrival known now
        (it comes to the folding replica), or the run's stop. With several, the run's
        stop: an arrival routed to the folding replica interrupts its fold (its kick),
        and one routed elsewhere reads of it only what a fold leaves as the unfolded run
        has it (running and waiting requests, its tree: hicache.routing.ReplicaView)."""
        if len(self.inbox) > 1 or not self.pending:
            return self.until
        return min(self.pending[0][0], self.until)

    def wake(self, i: int, rt: Any) -> simpy.Event:
        """One event that replica ``i``'s next completion or next routed arrival fires.
        A runtime of its own: the runtime's completion event, which the arrival fires too
        (one SimPy event per wait, not a Condition over two). A runtime shared with other
        replicas: ``any_of`` its completion event and a fresh kick (an arrival wakes only
        the replica it was routed to)."""
        done = rt.completion_event()
        if not isinstance(rt, SimTenantRuntime):
            self.kick[i] = done
            return done
        self.kick[i] = self.env.event()
        return self.env.any_of([done, self.kick[i]])

    def route(self):  # noqa: ANN201 - a simpy process
        env = self.env
        while True:
            while self.pending and self.pending[0][0] <= env._now:
                req = heapq.heappop(self.pending)[2]
                i = self.router.route(req)
                self.inbox[i].append(req)
                if not self.kick[i].triggered:
                    self.kick[i].succeed()
            self.more = env.event()
            yield first_of(env, (self.more, env.timeout(self.pending[0][0] - env._now))
                           if self.pending else (self.more,))


def _replica(env: simpy.Environment, i: int, rep: Replica, feed: _Feed,  # noqa: ANN202
             ledger: FaultLedger | None = None,
             observe: Callable[[int, Replica], None] | None = None):
    """One replica's scheduler loop: step on arrivals and completions; each step that
    plans work costs ``scheduler_step_s`` of CPU *before* its batch reaches the runtime
    (with overlap on, that time hides behind the batch already running), and with the
    runtime in its own process each wake-up's poll and each plan's crossings cost what
    :class:`sim.boundary.CrossingCost` says. With faults, the ledger learns which request
    each L3 prefetch serves. Steady decode steps go to the replica's folder
    (:mod:`sim.fold`), which returns at this loop's top (its plans carry no prefetch), or
    with the result of a scheduler step it took, which this loop goes on with."""
    sched, rt, folder = rep.scheduler, rep.runtime, rep.folder
    cpu = rt.profile.scheduler_step_s
    # a fold may go on past a request's finish, ending it as this loop does (sim.fold
    # _chain); not where each of this loop's wake-ups is observed
    ended = (lambda rid: feed.ended(rid, env.now)) if observe is None else None
    ipc = rep.crossing or CrossingCost(rt.profile, False)
    while True:
        if ipc.process:  # the poll that brings the completions crosses too
            yield rt.host_lane.run(ipc.wakeup())
        arrivals, feed.inbox[i] = feed.inbox[i], []
        step = sched.step(env._now, arrivals, rt.poll())
        folded = False
        while True:
            if step.finished or step.rejected:
                for rid in step.ended:
                    feed.ended(rid, env._now)
            if not step.plans:
                break
            limit = folder.steps_allowed(step.plans) if folder is not None else 0
            if limit:
                took = yield from folder.run(step.plans[0], limit, lambda: bool(feed.inbox[i]),
                                             lambda: feed.wake(i, rt), ended)
                if took is None:
                    folded = True
                    break
                step = took  # the fold stepped at an interruption: on from there, unfolded
                continue
            cost = (cpu + sum(ipc.plan(len(p.slices)) for p in step.plans) if ipc.process
                    else cpu)  # a plan's crossings cost nothing in process (0.0 each)
            if cost > 0:  # driver-thread time: in line with the runtime calls' (sim.host)
                yield rt.host_lane.run(cost)
            for plan in step.plans:
                handle = rt.prepare_batch(plan)
                sched.prepared(handle)
                rt.execute_batch(handle)
                if ledger is not None and plan.prefetches and sched.l3 is not None:
                    for pf in plan.prefetches:
                        ledger.owners[(rt.runtime_id, pf.job_id)] = sched.l3.jobs[pf.job_id].rid
            step = sched.step(env._now)
        if observe is not None:
            observe(i, rep)
        if folded or feed.inbox[i]:
            continue
        wake = feed.wake(i, rt)
        deadline = sched.next_deadline(env._now)
        if deadline is not None:
            wake = first_of(env, (wake, env.timeout(deadline - env._now)))
        yield wake
