"""The real driver: the scheduler over a TorchRuntime, on wall-clock time.

    loop:  arrivals due by the runtime clock + completions polled -> scheduler.step(now),
           prepare/execute every plan it returns (step again until none) -> block in
           runtime.wait(timeout) until a completion, the next arrival or a prefetch deadline

A thin adapter like ``sim/driver.py`` (same Scheduler, same message order), but it must
not import ``sim`` (no simpy on the GPU machine). Invariant: the scheduler sees one clock,
the runtime's (``TorchRuntime.now``); workload times are relative to the loop's start
``t0`` and are shifted onto that clock, so records and timeline rows share it.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import tempfile
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_backend.l3_protocol import L3Store
from gpu_backend.process import batch_specs_of, log_l3_faults, scenario_runtime
from gpu_backend.runtime import TorchRuntime
from gpu_backend.shapes import ModelShape
from gpu_backend.trace import add_lanes, torch_profiler, wall_epoch
from hicache.config import CacheConfig
from hicache.modelspec import load_model_spec
from hicache.runtime.handles import Kind
from hicache.runtime.interface import BatchCompletion, Completion
from hicache.runtime.state import host_state_pool_sizes, state_pool_sizes
from hicache.scenario import Scenario, as_scenario
from hicache.scheduler.scheduler import Scheduler
from hicache.timeline import Timeline
from hicache.workload.factory import make_workload
from hicache.workload.request import Request
from ipc.errors import RuntimeProcessDied

if TYPE_CHECKING:
    from ipc.client import ProcessGPURuntime

# one scenario drives both runtimes: max_sim_time bounds the run's wall time here, the
# simulator-only run keys are ignored, torch_profiler is read here only


@dataclass
class TorchResult:
    name: str
    records: list[dict]
    decisions: list[tuple]  # (replica, *decision), as sim.driver.SimResult
    timeline: Timeline
    wall_time: float  # seconds from the loop's start to its end
    requests: int
    t0: float  # the loop's start on the runtime clock (records and timeline use it)
    extra: dict[str, Any] = field(default_factory=dict)
    unfinished: dict[int, str] = field(default_factory=dict)  # rid -> why it did not finish
    stall: str | None = None  # the diagnosis when the run stalled

    @property
    def rejected(self) -> dict[int, str]:
        """rid -> reason, for requests refused on arrival."""
        return {r["rid"]: r["rejected"] for r in self.records if r.get("rejected")}


def load_shape(name: str | Path) -> ModelShape:
    """The ModelShape of a model preset name (``scenarios/models/NAME.yaml``) or path."""
    return load_model_spec(name)



def real_store_cache(cache: CacheConfig) -> CacheConfig:
    """``cache`` with SGLang's L3 keys (``l3_key_scheme: sha256``): the torch runtime's
    stores are real (a file store, a Mooncake shared with SGLang), so its schedulers key
    pages as SGLang does whatever the scenario says (the simulator's ``chain64`` default
    only suits a store that compares keys); decisions do not depend on the scheme."""
    if cache.l3_key_scheme == "sha256":
        return cache
    return dataclasses.replace(cache, l3_key_scheme="sha256")


def make_l3(cache: CacheConfig, directory: str) -> L3Store | None:
    """The L3 client the cache config names: a FileL3 under ``directory`` or Mooncake."""
    backend = cache.hicache_storage_backend
    if backend is None:
        return None
    if backend == "mooncake":
        from gpu_backend.l3.mooncake import MooncakeL3

        return MooncakeL3.from_extra_config(cache.hicache_storage_backend_extra_config)
    from gpu_backend.l3.file import FileL3

    return FileL3(directory)


def build_runtime(sc: Scenario, cache: CacheConfig, shape: ModelShape, device: str,
                  l3: L3Store | None, generation: int = 0) -> TorchRuntime:
    """One replica's TorchRuntime sized as sim/driver.py sizes its SimRuntime."""
    page = cache.page_size
    host_pages = 0
    if cache.enable_hierarchical_cache:
        host_pages = cache.host_tokens(shape.kv_bytes_per_token()) // page
    layout = cache.effective_mem_layout
    if layout == "page_first_direct":  # page_first host layout, per-page direct copies
        layout = "page_first"
    pools = {Kind.FULL: cache.device_tokens // page}
    if sc.scheduler.track_components:  # SWA / MAMBA pools, sized as the simulator sizes them
        pools.update(state_pool_sizes(shape.layer_kinds, page, cache.device_tokens,
                                      sc.run.swa_tokens, sc.run.mamba_slots,
                                      sc.scheduler.max_running_requests))
    return TorchRuntime(shape, page_size=page, device_pages=pools,
                        host_pages={Kind.FULL: host_pages,
                                    **host_state_pool_sizes(pools, host_pages)}, device=device,
                        io_backend=cache.hicache_io_backend, mem_layout=layout,
                        layerwise=sc.run.layerwise, l3=l3,
                        runtime_id="torch0", seed=sc.seed, generation=generation,
                        writeback=sc.run.writeback, l3_policy=sc.run.l3_retry)


def run_scenario(scenario: Scenario | dict, *, device: str = "cpu", shape: ModelShape | None = None,
                 name: str = "run", source: str = "<scenario>",
                 stall_timeout: float = 120.0, torch_trace: str | Path | None = None,
                 process: bool | None = None) -> TorchResult:
    """Run scenario ``d`` (one replica, or with ``sharing.pool`` several schedulers on
    one runtime: :mod:`gpu_backend.shared_driver`) on a TorchRuntime. ``shape`` defaults to
    ModelShape.tiny() on CPU and to the scenario's model preset elsewhere. ``torch_trace``
    (or the scenario's ``run.torch_profiler``) writes a torch.profiler Chrome trace there
    (:mod:`gpu_backend.trace`). ``process`` (default: ``run.runtime_process``) runs the
    runtime in its own process behind :class:`ipc.ProcessGPURuntime`; if that process
    dies, the requests not finished are reported unfinished with the reason."""
    sc = as_scenario(scenario, source=source)
    source = sc.source
    if sc.replicas != 1 and sc.sharing.pool == "none":
        raise ValueError(f"{source}: replicas: the torch driver runs exactly 1 replica per "
                         f"runtime, got {sc.replicas} (sharing.pool: static or shared runs "
                         f"them as schedulers sharing one runtime)")
    cache, run = sc.cache, sc.run
    if sc.faults:
        raise ValueError(f"{source}: faults: injected by the simulator only; the torch "
                         f"runtime meets real L3 faults (gpu_backend.l3): remove the section")
    if shape is None:
        shape = ModelShape.tiny() if device == "cpu" else sc.model
    trace = torch_trace if torch_trace is not None else run.torch_profiler
    process = run.runtime_process if process is None else process
    if sc.sharing.pool != "none":
        if process or trace:
            raise ValueError(f"{source}: sharing.pool: schedulers sharing one runtime run "
                             f"in its process (run.runtime_process and run.torch_profiler "
                             f"are not supported with it yet)")
        from gpu_backend.shared_driver import run_shared

        with tempfile.TemporaryDirectory(prefix="hicache-l3-") as l3_dir:
            return run_shared(sc, shape, device, l3_dir, name, stall_timeout)
    if process and trace:
        raise ValueError(f"{source}: run.torch_profiler: profile the runtime in-process "
                         f"(run.runtime_process: false); the profiler would run in the "
                         f"scheduler's process, not the runtime's")
    with tempfile.TemporaryDirectory(prefix="hicache-l3-") as l3_dir:
        l3 = None if process else make_l3(cache, l3_dir)
        has_l3 = cache.hicache_storage_backend is not None
        try:
            rt = (open_process_runtime(sc, shape, device, l3_dir, call_timeout_s=stall_timeout)
                  if process else build_runtime(sc, cache, shape, device, l3))
            with rt:
                scheduler = Scheduler(real_store_cache(cache), rt.info(),
                                      sc.scheduler_config(l3=has_l3),
                                      replica=0)
                workload = make_workload(sc.workload, sc.seed)
                limit = run.max_sim_time if run.max_sim_time is not None else math.inf
                loop = _Loop(rt, scheduler, workload, limit, stall_timeout)
                with (torch_profiler(trace, rt.lanes.cuda) if trace else nullcontext()):
                    wall0 = wall_epoch(rt.now())
                    loop.run()
                    if loop.died is None and not rt.drain(stall_timeout):
                        raise TimeoutError(f"ops still running {stall_timeout} s after the "
                                           f"last request finished")
                if trace:
                    add_lanes(trace, rt.timeline, wall0)
                l3_faults = {} if loop.died else rt.l3_faults()
                if any(l3_faults.values()):  # name on the console what the counters hold
                    if process:
                        rt.apply(log_l3_faults)
                    else:
                        log_l3_faults(rt)
                specs = ({} if loop.died else rt.apply(batch_specs_of) if process
                         else batch_specs_of(rt))
        finally:
            close = getattr(l3, "close", None)
            if close is not None:
                close()
    records = scheduler.records()
    open_ = [r["rid"] for r in records if r["finish"] is None and not r.get("rejected")]
    why = (f"runtime_died: {loop.died}" if loop.died else f"stalled: {loop.stall}"
           if loop.stall else f"run.max_sim_time ({loop.limit:g} s of wall time) reached first")
    boundary = _boundary_stats(rt) if process else {}
    return TorchResult(name, records, [(0, *d.row()) for d in scheduler.decisions],
                       rt.timeline, loop.end - loop.t0, loop.n, loop.t0,
                       {"scheduler_s": loop.sched_s, "steps": loop.steps,
                        "step_s": loop.step_s, "work_step_s": loop.work_step_s,
                        "batch_specs": specs,  # (new, context) per slice
                        "device": device, "shape": shape.name, "l3_faults": l3_faults,
                        **boundary,
                        **({"torch_trace": str(trace)} if trace else {})},
                       unfinished=dict.fromkeys(open_, why), stall=loop.stall)


def open_process_runtime(sc: Scenario, shape: ModelShape, device: str, l3_dir: str,
                         **kwargs: Any) -> ProcessGPURuntime:
    """The runtime :func:`build_runtime` builds, in a process of its own (needs pyzmq,
    imported here only: the GPU machine's measure path does not)."""
    from ipc.client import ProcessGPURuntime

    factory = partial(scenario_runtime, sc=sc, shape=shape, device=device, l3_dir=l3_dir)
    return ProcessGPURuntime(factory, wall_clock=True, **kwargs)


def _boundary_stats(rt: ProcessGPURuntime) -> dict[str, Any]:
    return {"crossings": dict(rt.crossings), "ipc_rpc_s": rt.rpc_s,
            "ipc_overhead_s": rt.ipc_overhead_s() if rt.final_stats else math.nan,
            "ipc_bytes": rt.bytes_sent + rt.bytes_received}


class _Loop:
    """The wall-clock loop. Events (arrivals due by ``now``, polled completions) are
    delivered in timestamp order, one scheduler step per distinct time, as the simulator
    would have woken for each; a finished request's follow-ups are timed at its
    completion's ``end``, so they slot into the same order."""

    def __init__(self, rt: TorchRuntime, scheduler: Scheduler, workload: Any, limit: float,
                 stall_timeout: float) -> None:
        self.rt, self.scheduler, self.workload = rt, scheduler, workload
        self.limit, self.stall_timeout = limit, stall_timeout
        self.pending: list[tuple[float, int, Request]] = []
        self.n = self.steps = 0
        self.sched_s = 0.0
        self.step_s: list[float] = []  # wall time of every step
        self.work_step_s: list[float] = []  # of the steps that submitted a plan
        self.t0 = self.end = 0.0
        self.stall: str | None = None  # why the loop stopped with work left, if it did
        self.died: str | None = None  # the runtime process died: why
        self.queue: deque[int] = deque()  # executed, uncompleted batches (compute-lane order)
        self.empty: set[int] = set()  # of those, plans without slices (no compute)

    def push(self, reqs: list[Request]) -> None:
        for r in reqs:  # workload time -> runtime clock
            r = dataclasses.replace(r, arrival=r.arrival + self.t0)
            heapq.heappush(self.pending, (r.arrival, r.rid, r))
            self.n += 1

    def step(self, now: float, at: float, arrivals: list[Request],
             completions: list[Completion]) -> None:
        """One scheduler step for the events of time ``at`` (<= ``now``)."""
        t = time.perf_counter()
        sch, rt = self.scheduler, self.rt
        a = rt.now()
        step = sch.step(now, arrivals, completions)
        self.span(a)
        for rid in step.ended:
            self.push(self.workload.on_finished(rid, at - self.t0))
        worked = bool(step.plans)
        while step.plans:
            for plan in step.plans:
                handle = rt.prepare_batch(plan)
                sch.prepared(handle)
                rt.execute_batch(handle)
                self.queue.append(plan.batch_id)
                if not plan.slices:
                    self.empty.add(plan.batch_id)
            a = rt.now()
            step = sch.step(now)
            self.span(a)
            for rid in step.ended:
                self.push(self.workload.on_finished(rid, at - self.t0))
        dt = time.perf_counter() - t
        self.steps += 1
        self.sched_s += dt
        self.step_s.append(dt)
        if worked:
            self.work_step_s.append(dt)

    def span(self, start: float) -> None:
        """A ``cpu`` / ``schedule`` timeline row for a scheduler step from ``start`` to now
        (the driver thread's own work between runtime calls; in-process runtimes only)."""
        record = getattr(self.rt, "record_host", None)
        if record is not None:
            record("schedule", start, self.rt.now())

    def coalesce(self, comps: list[Completion]) -> dict[int, float]:
        """Plans without slices compute nothing: as in the simulator, a run of them queued
        behind a batch completes *with* it. Waits the instant their completions take to
        arrive (appending them to ``comps``); returns batch id -> the time to deliver at."""
        got = {c.batch_id: c for c in comps if isinstance(c, BatchCompletion)}
        at: dict[int, float] = {}
        prev: float | None = None
        while self.queue:
            bid = self.queue[0]
            if bid not in got:
                if prev is None or bid not in self.empty:
                    break
                more = self.rt.wait(self.stall_timeout)
                if not more:
                    raise TimeoutError(f"empty batch {bid} did not complete")
                comps += more
                got.update((c.batch_id, c) for c in more if isinstance(c, BatchCompletion))
                continue
            self.queue.popleft()
            if bid in self.empty and prev is not None:
                at[bid] = prev
            else:
                prev = got[bid].end
            self.empty.discard(bid)
        return at

    def deliver(self, now: float, completions: list[Completion]) -> bool:
        """Step through the arrivals due by ``now`` and ``completions`` in time order
        (stable: equal times keep poll order); step once if there are none. True if any."""
        at_of = self.coalesce(completions)

        def when(c: Completion) -> float:
            return at_of.get(c.batch_id, c.end) if isinstance(c, BatchCompletion) else c.end

        comps = sorted(completions, key=when)
        i, any_event = 0, False
        while True:
            t_arr = self.pending[0][0] if self.pending and self.pending[0][0] <= now \
                else math.inf
            t_done = when(comps[i]) if i < len(comps) else math.inf
            at = min(t_arr, t_done)
            if at == math.inf:
                break
            arrivals = []
            while self.pending and self.pending[0][0] <= at:
                arrivals.append(heapq.heappop(self.pending)[2])
            j = i
            while j < len(comps) and when(comps[j]) <= at:
                j += 1
            self.step(now, at, arrivals, comps[i:j])
            i, any_event = j, True
        if not any_event:
            self.step(now, now, [], [])
        return any_event

    def run(self) -> None:
        try:
            self._run()
        except RuntimeProcessDied as e:
            self.died = str(e)
            self.end = self.rt.now()

    def _run(self) -> None:
        rt, sch = self.rt, self.scheduler
        self.t0 = rt.now()
        self.push(self.workload.start())
        completions: list[Completion] = []
        last_progress = self.t0
        while True:
            now = rt.now()
            if self.deliver(now, completions + rt.poll()):
                last_progress = now
            if not self.pending and sch.idle:
                break
            if now - self.t0 >= self.limit:
                break
            wake = [t for t in (self.pending[0][0] if self.pending else None,
                                sch.next_deadline(now)) if t is not None]
            if not wake and not sch.awaiting_runtime:
                self.stall = f"nothing can make progress: {sch.diagnose()}"
                break
            if not wake and rt.now() - last_progress > self.stall_timeout:
                self.stall = (f"no completion for {self.stall_timeout:g} s while the runtime "
                              f"holds work: {sch.diagnose()}")
                break
            cap = min([self.stall_timeout, *(t - rt.now() for t in wake)])
            completions = rt.wait(cap) if cap > 0 else []
        self.end = rt.now()
