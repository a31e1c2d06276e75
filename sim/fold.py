"""Decode folding: several steps of a steady decode pipeline as one simulated event.

Most batches of a long run are decode steps of the same requests, one after another; each
costs a dozen SimPy events and a scheduler step, though nothing happens in between that
could change the next decision. When a replica is in that state the driver hands the
pipeline to :class:`DecodeFolder`, which computes the steps' times exactly as the
unfolded simulation would (the same cost-model calls, the same float additions in the
same order), waits once, and then brings scheduler and runtime to the state the unfolded
run reaches at that moment::

    d_A: step -> plan C      (B runs; A completed)     entry: Scheduler.steady_decode(C)
    cpu yield (as unfolded)  -> C would be prepared here; an arrival: prepare C, go on
    wait for B's completion  -> an arrival first: prepare C, go on
    d_B: virtual steps C = b+1 .. b+n, each one
         c_k = (s_k + sum(layer times)) + sample      s_{k+1} = d_k
         d_k = max(c_k, d_{k-1} + cpu)                (the driver takes completion k)
    R = d_{b+n} < the next known arrival: Scheduler.fold_decode(n), pages placed in the
         order unfolded prepares place them, batch b+n+1 prepared and started at R,
         batch b+n's completion delivered: the driver goes on as if unfolded.

What could interrupt a fold, and why none does: arrivals (the fold ends before the next
one the feed knows; workloads whose arrivals depend on other replicas' finishes are not
folded); transfer completions, prefetch deadlines, backups and their throttle, L3 I/O
(a fold needs no copy in flight and nothing waiting: Scheduler.steady_decode); other
replicas sharing an L3 (a folded replica does no L3 I/O); the host lane's per-op costs
(a profile that models them is not folded; the scheduler's own CPU time is in d_k);
``run.max_sim_time`` (a fold ends before it). Folded batches leave one timeline row per
contiguous run of steps, with ``steps`` set (``run.timeline_steps``: the rows each step
would have had), and their ``batch_shapes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    PreparedBatchHandle,
    PreparedSlice,
)

if TYPE_CHECKING:
    from hicache.scheduler.scheduler import Scheduler
    from sim.runtime import SimRuntime

MIN_STEPS = 2  # fewer is no fold: Scheduler.fold_decode's minimum


@dataclass(frozen=True, slots=True)
class FoldedStep:
    """One decode batch of a fold: compute from ``start`` to ``compute_end``, sampling to
    ``end``; the driver takes its completion at ``taken`` (>= end: its CPU may be busy)."""

    start: float
    compute_end: float
    end: float
    taken: float


def exact_delay(now: float, at: float) -> float:
    """A delay ``d`` with ``now + d == at`` exactly (SimPy adds delays to ``now``)."""
    d = at - now
    while now + d < at:
        d = math.nextafter(d, math.inf)
    while now + d > at:
        d = math.nextafter(d, -math.inf)
    return d


class DecodeFolder:
    """Folds one replica's steady decode steps (module doc). ``horizon()``: the time of
    the next event from outside the replica that the driver knows of (inf: none)."""

    def __init__(self, env: simpy.Environment, sched: Scheduler, rt: SimRuntime, cpu: float,
                 horizon: Callable[[], float], per_step_rows: bool = False) -> None:
        self.env, self.sched, self.rt, self.cpu = env, sched, rt, cpu
        self.horizon = horizon
        self.per_step_rows = per_step_rows
        # what the unfolded compute op does per decode batch must be this simple
        self.possible = not (rt.host_lane.active or rt.trace_layers or rt.state.active)
        self.folds = self.folded_steps = 0

    def steps_allowed(self, plans: tuple[BatchPlan, ...]) -> int:
        """How many steps a fold starting with ``plans`` may take (0: not now)."""
        if not self.possible or len(plans) != 1:
            return 0
        steps = self.sched.steady_decode(plans[0])
        return steps if steps >= MIN_STEPS else 0

    def run(self, plan: BatchPlan, limit: int, inbox: Callable[[], bool],
            kick: Callable[[], simpy.Event]) -> Generator[simpy.Event, Any, None]:
        """Driver-process body for a fold that starts with ``plan`` (at most ``limit``
        steps). Returns with the driver due to take its next completion or arrivals (the
        top of its loop). ``inbox()``: arrivals are waiting; ``kick()``: a fresh event
        an arrival fires."""
        env, rt = self.env, self.rt
        if self.cpu > 0:
            yield rt.host_lane.run(self.cpu)
        if not inbox():
            yield env.any_of([rt.completion_event(), kick()])
        if inbox() or not self._quiet():
            self._start(plan)  # as unfolded, where it was prepared at the cpu yield's end
            return
        steps = self._schedule(plan, limit)
        if len(steps) < MIN_STEPS:
            self._start(plan)
            return
        end = steps[-1].taken
        yield env.timeout(exact_delay(env.now, end))
        self._land(plan, steps)

    # -- internals --------------------------------------------------------------------
    def _start(self, plan: BatchPlan) -> None:
        handle = self.rt.prepare_batch(plan)
        self.sched.prepared(handle)
        self.rt.execute_batch(handle)

    def _quiet(self) -> bool:
        """The older batch completed and nothing else of this replica is running."""
        rt = self.rt
        done = rt._completions
        return (len(done) == 1 and isinstance(done[0], BatchCompletion)
                and not done[0].finished and not rt._prepared and not rt._pending
                and not rt.fluid.jobs and all(s.idle() for s in rt.streams.values()))

    def _schedule(self, plan: BatchPlan, limit: int) -> list[FoldedStep]:
        """The fold's steps: at most ``limit``, the last taken before the horizon."""
        env, rt, cpu = self.env, self.rt, self.cpu
        horizon = self.horizon()
        contexts = [s.context_tokens for s in plan.slices]
        sample = rt.cost.sample_time(len(contexts))
        taken = env.now  # the driver takes batch b's completion now; b+1 starts
        prepared = taken + cpu if cpu > 0 else taken  # b+2, planned now, is prepared then
        out: list[FoldedStep] = []
        for k in range(limit):
            work = sum(rt.cost.batch_layer_times([], [c + k for c in contexts]))
            start = taken
            compute_end = start + work if work > 0 else start  # a fluid job at rate 1
            end = compute_end + sample if sample > 0 else compute_end
            taken = end if end >= prepared else prepared
            if taken >= horizon:
                break
            out.append(FoldedStep(start, compute_end, end, taken))
            prepared = taken + cpu if cpu > 0 else taken
        return out

    def _land(self, plan: BatchPlan, steps: list[FoldedStep]) -> None:
        """At the last step's taking: the state the unfolded run has there (module doc)."""
        sched, rt = self.sched, self.rt
        n = len(steps)
        (older,) = rt.poll()  # batch b: its completion is part of the fold
        assert isinstance(older, BatchCompletion) and older.batch_id == plan.batch_id - 1
        self._place_pages(plan, n)
        last, newer = sched.fold_decode(n)
        assert last.batch_id == plan.batch_id + n - 1
        sched.prepared(self._handle(last))
        if newer is not None:
            self._start(newer)
        self._record(plan, steps)
        finished = tuple(s.rid for s in last.slices if s.finishes)
        rt.complete(BatchCompletion(last.batch_id, steps[-1].start, steps[-1].end, finished))
        self.folds += 1
        self.folded_steps += n

    def _place_pages(self, plan: BatchPlan, n: int) -> None:
        """Allocate the pages decode steps 0..n-1 of ``plan``'s requests need, in the
        order their unfolded prepares would (step by step, slice by slice)."""
        rt = self.rt
        page = rt.page_size
        need: list[tuple[int, int]] = []  # (step, slice index) of each new page
        rows = [rt.rows[s.request.slot_id] for s in plan.slices]  # type: ignore[union-attr]
        for i, (s, row) in enumerate(zip(plan.slices, rows, strict=True)):
            # step k needs ceil((context + k + 1) / page) pages: one more each time the
            # context passes the pages the row holds, then every ``page`` steps
            first = len(row.pages) * page - s.context_tokens
            assert first >= 0, f"request {s.rid}: its pages do not hold its context"
            need.extend((k, i) for k in range(first, n, page))
        if not need:
            return
        need.sort()
        pool = rt.device["full"]
        for _, i in need:
            rows[i].append(pool.allocate(1), own=True)

    def _handle(self, plan: BatchPlan) -> PreparedBatchHandle:
        """The handle the unfolded prepare of ``plan`` would have returned."""
        rt = self.rt
        slices = []
        for s in plan.slices:
            row = rt.rows[s.request.slot_id]  # type: ignore[union-attr]
            slices.append(PreparedSlice(s.rid, row.handle, row.extent(), ()))
        return PreparedBatchHandle(rt.runtime_id, rt.generation, plan.batch_id, tuple(slices),
                                   ())

    def _record(self, plan: BatchPlan, steps: list[FoldedStep]) -> None:
        """Timeline rows and batch shapes of the folded batches."""
        rt, tl = self.rt, self.rt.timeline
        bid0 = plan.batch_id
        contexts = [s.context_tokens for s in plan.slices]
        n_req, ctx0 = len(contexts), sum(contexts)
        for k in range(len(steps)):
            rt.batch_shapes[bid0 + k] = {"requests": n_req, "tokens": n_req,
                                         "context_tokens": ctx0 + k * n_req, "load_bytes": 0}
        if self.per_step_rows:  # the rows compute_op writes for each batch
            sampled = rt.cost.sample_time(n_req) > 0
            for k, st in enumerate(steps):
                tl.record("compute", "decode", st.start, st.compute_end, batch=bid0 + k)
                if sampled:
                    tl.record("compute", "sample", st.compute_end, st.end, batch=bid0 + k)
            return
        first = 0
        for k in range(1, len(steps) + 1):  # one row per run of back-to-back steps
            if k == len(steps) or steps[k].start != steps[k - 1].end:
                tl.record("compute", "decode", steps[first].start, steps[k - 1].end,
                          batch=bid0 + first, steps=k - first)
                first = k
