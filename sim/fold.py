"""Decode folding: several steps of a steady decode pipeline as one simulated event.

Most batches of a long run are decode steps of the same requests, one after another; each
costs a dozen SimPy events and a scheduler step, though nothing in between could change
the next decision. When a replica is in that state the driver hands the pipeline to
:class:`DecodeFolder`, which computes the steps' times as the unfolded simulation would
(the same cost-model calls, the same float additions in the same order), waits once, and
brings scheduler and runtime to the state the unfolded run has at that moment::

    d_A: step -> plan C        (B runs)                 entry: Scheduler.steady_decode(C)
    cpu yield, as unfolded;    then wait for B          an arrival or a completion first:
    (and the cache-only plans queued behind B)          prepare C, back to the driver
    d_B: steps k = 0..n-1 (batch C + k), each           start_k = taken_{k-1} (= d_B)
         end_k = (start_k + sum(layer times)) + sample
         taken_k = max(end_k, taken_{k-1} + cpu)       the driver takes its completion
    t = taken_{n-1} (< the feed's horizon), or an arrival or completion first:
         Scheduler.fold_decode(j + 1) for the j steps taken before t, pages placed in the
         order unfolded prepares place them, step j's batch running as a real op (its
         fluid job adopted where it stands), the next plan prepared when the driver's cpu
         yield ends: the driver goes on as if it had never folded.

The steps are kept column-wise (:class:`FoldedSteps`). A chunk of many steps is timed at
once with numpy (:func:`_steps_at_once`: one accumulate makes the loop's additions in its
order) up to the first step whose driver is late, and ``CostModel.decode_work_column`` adds
a chunk's layer times with one numpy reduction (row after row: the loop's order), whose
column the accumulate reads as it is (a list in between costs more than the rest: trace
3,000 L1+L2+L3, ~74M instructions); with no horizon (several replicas) a fold times its
steps up to its limit in a few long chunks.

Cache-only plans (batch ids < 0: a transfer's completion while two batches were in
flight) may be in flight at the entry. They were executed after B and before C, so the
compute stream reaches them when B's op ends: they complete in B's wake-up
(:mod:`sim.compute_chain`), the runtime has done their completion's bookkeeping (host
lane, ``writeback.step_done`` with their ids) at that time as unfolded, and the scheduler
only pops them (``fold_decode``). The fold starts only if exactly B's and theirs came.

Transfer completions (backups, stores, prefetches: no batch's) that come while the
driver would wait idle, for batch C - 1 or for a step (not in its cpu yield, before the
step's end), are taken in a scheduler step at their time, as unfolded, with the
scheduler as the unfolded run has it then: the steps taken applied (``fold_decode``),
the pages of the prepared ones placed, the newest plan's handle given
(:meth:`DecodeFolder._absorb`). If that step plans and ends nothing and
``Scheduler.steady_decode`` of the newest plan still holds (it asks again whether the
queue stays still: a store's completion unpins an L2 copy, a prefetch's inserts pages),
the fold goes on; else the runtime is brought to that time (below) and the driver goes
on with the step's result. With L3 a backup's completion plans the store of its copy:
the driver takes it (it would end the fold, and costs less there).

A fold that ran to its limit (a request takes its last token in step j) may go on past
the finish (:meth:`DecodeFolder._chain`): at step j's taken time the driver's step is
taken as unfolded (step j + 1 prepared first, the finished request ended as the driver
ends it); when it plans one decode plan C' that may fold (``steps_allowed``, nothing in
flight that could change a step's speed) the fold goes on with a segment whose step 0
is batch j + 1 (placed and handed to the scheduler as a fold's step, never prepared by
the runtime nor executed: its compute job, its completion and the driver's wait for it
folded), the driver's cpu yield for C' taken and C''s frees and releases applied after
it, as ``run`` applies its plan's. Else batch j + 1 is prepared and executed then, as
:meth:`DecodeFolder._materialize` would start it, and the driver goes on with the
step's result. Trace 3,000 L1+L2+L3: 2,314 segments chained, processed events
136,263 -> 122,407; multiturn at 40 rounds hardly chains (a finish there admits a
waiting request: the next plan is a prefill).

What could interrupt a fold: arrivals (with one replica a fold ends before the next one
the feed knows, and one issued meanwhile, by a finish, interrupts it; with several, one
routed to this replica interrupts it, and the router reads nothing a fold changes:
``_Feed.horizon`` in :mod:`sim.driver`); completions of this replica's backups, stores
and prefetches (they interrupt it at their exact time, however their work was paced:
copy calls pipelined on the copy engine, L3 calls on the NIC, the store's shared service
and host memory, :mod:`sim.l3_client`); prefetch deadlines (a fold ends before the queue
head's, ``Scheduler.fold_deadline``: its steps are all taken before any timer the driver
sets for it, :func:`_before`, and its wait for batch C - 1 sets the driver's own timer,
whose firing means no fold); L3 traffic of other replicas (it re-plans this replica's
fluid server, where only L3 and PCIe rates change: compute keeps rate 1); copies that
slow compute (SGLang's copy kernel: a fold starts none; none may be in flight but a
backup's kernel already copying, :meth:`DecodeFolder._copy_kernel`: its rate cannot
rise, so it finishes no earlier than its due, and the fold's steps, timed at the slowed
rate ``1 - compute_slowdown`` as the server times them (``start + work / rate``), all
end before that due, so no step changes rate; the kernel's floats are charged at the
folded compute jobs' changes as the L3 jobs' are, below. With L3 a backup on the d2h
stream that is queued, or whose kernel ends too soon for two steps, means no fold can
start, so none is tried, :meth:`DecodeFolder.steps_allowed`; this replica's L3
transfers, in flight at its start or started during it, run on, charged at the changes
the folded compute jobs would have made, :meth:`sim.fluid.FluidServer.expect`, so their
floats stay the unfolded run's); ``run.max_sim_time`` (a fold ends before it). Fault
windows (:mod:`sim.faults`) need no stop: every kind scales or fails L3, NIC, PCIe or
host-memory work, never a compute rate, and a steady pipeline takes no decision a fault
could change; what the fault does to work in flight surfaces as a completion (above).
Turned off for the whole run: the host lane modelled per op (a profile with op costs,
wake-ups or the CPU runtime's interpreter lock, :mod:`sim.interpreter`: every compute
op's speed then depends on the driver's and the lanes' python work), per-layer traces,
tracked state components, a shared runtime and a runtime in its own process; the
scheduler's own CPU time is in taken_k.

Folded batches leave one timeline row per run of back-to-back steps, with
``steps`` set (``run.timeline_steps``: the rows each step would have had), and their
``batch_shapes``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from itertools import chain, compress, islice
from operator import ne
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy

from hicache.runtime.handles import Kind
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    PreparedBatchHandle,
    TransferKind,
)
from hicache.scheduler.scheduler import StepResult
from sim.batch import build_completion, build_handle
from sim.cost import floats
from sim.fluid import FluidJob
from sim.simtime import exact_delay
from sim.streams import first_of

if TYPE_CHECKING:
    from hicache.scheduler.scheduler import Scheduler
    from sim.runtime import SimRuntime

_BACKUP = TransferKind.BACKUP  # read per absorbed completion (hicache.runtime.interface._DECODE)
MIN_STEPS = 2  # a shorter fold saves nothing
# a fold that ran to its limit (a request's last token) goes on past the finish when the
# next plan may fold too (DecodeFolder._chain; False: it ends there, the tests' twin)
CHAIN = True
# with L3, a fold beside a backup's copy kernel (DecodeFolder._copy_kernel) saves less (it
# ends before the backup's completion, which plans a store, and its L3 jobs are charged
# at its changes): one of 2 steps costs more than it saves (trace 3,000 L1+L2+L3:
# 36.155G -> 36.092G instructions with this floor and _copy_fits' guess to match;
# without L3, 2-step folds pay: trace L1+L2 17.251G with them, 17.377G without)
MIN_STEPS_BESIDE_COPY_L3 = 3
Proc = Generator[simpy.Event, Any, None]


class FoldedStep(NamedTuple):
    """One decode batch of a fold: ``work`` seconds of compute from ``start`` to
    ``compute_end``, sampling to ``end``; the driver takes its completion at ``taken``
    (later than ``end`` when its own CPU time is the bottleneck)."""

    work: float
    start: float
    compute_end: float
    end: float
    taken: float


class FoldedSteps:
    """A fold's steps column-wise, one list per :class:`FoldedStep` field (step k: batch
    C + k): the schedule appends four floats a step, not a tuple built by a Python call,
    and the timeline, the write-back policy and the fluid server read whole columns."""

    __slots__ = ("work", "start", "compute_end", "end", "taken")

    def __init__(self) -> None:
        self.work: list[float] = []
        self.start: list[float] = []
        self.compute_end: list[float] = []
        self.end: list[float] = []
        self.taken: list[float] = []

    def __len__(self) -> int:
        return len(self.taken)

    def __getitem__(self, k: int) -> FoldedStep:
        return FoldedStep(self.work[k], self.start[k], self.compute_end[k], self.end[k],
                          self.taken[k])


_NO_STEPS = FoldedSteps()  # no fold (never appended to)
VECTOR_CHUNK = 32  # a chunk of this many steps is timed with numpy (_steps_at_once)
MAX_CHUNK = 512  # steps timed at once when only the limit ends the fold (no horizon)


def _steps_at_once(out: FoldedSteps, taken: float, works: Sequence[float], sample: float,
                   cpu: float, horizon: float) -> tuple[int, bool]:
    """:meth:`DecodeFolder._schedule`'s loop over ``works`` with numpy, while the steps
    end after the driver's next plan is ready (``end >= taken + cpu``: then each step
    starts as the one before ends): one accumulate adds ``taken``, then each step's
    work and sample in the loop's order (a work of 0 adds 0.0: its start, as the loop
    keeps it). ``works``: a list or a float64 numpy column. Appends the steps to ``out``
    (Python floats) up to the first whose driver is late or that is taken at or after
    ``horizon``; returns (steps appended, horizon reached)."""
    k = len(works)
    m = 2 if sample > 0 else 1  # (work, sample) or (work) per step
    seq = np.empty(1 + m * k)
    seq[0] = taken
    seq[1::m] = works
    if m == 2:
        seq[2::2] = sample
    acc = np.add.accumulate(seq)
    starts, ends = acc[0:-1:m], acc[m::m]
    good = k
    if cpu > 0:
        late = ends < starts + cpu
        first = int(late.argmax())  # the first True (0 when none)
        if late[first]:
            good = first
    ends_list = ends[:good].tolist()
    # the ends never decrease (each adds a work and a sample >= 0 to the one before):
    # the horizon is reached within the good steps iff the last of them reaches it,
    # and the first that does is where bisect puts it
    stop = bool(ends_list) and ends_list[-1] >= horizon
    if stop:
        good = bisect.bisect_left(ends_list, horizon)
        del ends_list[good:]
    if good:  # step k starts as step k - 1 ends (both acc[m * k]), step 0 at acc[0]: taken
        out.start.append(taken)
        out.start += ends_list[:-1]
    out.compute_end += acc[1:m * good + 1:m].tolist()
    out.end += ends_list
    out.taken += ends_list
    return good, stop


def _before(deadline: float | None) -> float:
    """A time before which every timer the unfolded driver sets for ``deadline`` fires
    later (inf: none): it sets one at each wait, at ``w + (deadline - w)`` for its time
    ``w`` before the deadline, which two roundings put within 2 ulps of ``deadline``; a
    fold whose steps are all taken before this never meets one."""
    if deadline is None:
        return math.inf
    return deadline - 4 * math.ulp(deadline)


class DecodeFolder:
    """Folds one replica's steady decode steps (module doc). ``horizon()``: the time a
    fold must end before (the next arrival the driver knows of when it can only come to
    this replica, else the run's stop; inf: none)."""

    _bound = math.inf  # the fold's steps are taken before this (set by run: _before)

    def __init__(self, env: simpy.Environment, sched: Scheduler, rt: SimRuntime, cpu: float,
                 horizon: Callable[[], float], per_step_rows: bool = False) -> None:
        self.env, self.sched, self.rt, self.cpu = env, sched, rt, cpu
        self.horizon = horizon
        self.per_step_rows = per_step_rows
        # what the unfolded compute op does per decode batch must be this simple
        self.possible = not (rt.host_lane.active or rt.trace_layers or rt.state.active)
        # SGLang's copy kernel takes SMs: compute slows while it runs
        self.copies_slow_compute = (rt.copies.io_backend == "kernel" and not rt.copies.gather
                                    and rt.link.slowdown > 0)
        self.folds = self.folded_steps = self.interrupted = 0
        self.beside_l3 = 0  # folds begun with this replica's L3 transfers in flight
        self.beside_cache_only = 0  # folds begun as cache-only plans completed with B
        self.absorbed = 0  # transfer completions a fold took and went on (_absorb)
        self.l3 = sched.kv.l3  # an L3 tier: a backup's completion plans a store
        # a backup on the d2h stream (queued behind its batch's compute, or copying) when a
        # fold would start means none starts unless its kernel is copying and ends late
        # enough (_copy_fits): else its completion comes before batch C - 1's (with L3
        # the entry gives it to the driver, _absorb) or its kernel joins, or ends, too
        # soon (_quiet, _schedule); nothing else puts work on d2h (a decode plan carries
        # no backup, and no plan is executed at the entry)
        self._backup_blocks = bool(self.l3) and self.copies_slow_compute
        self.beside_copy = 0  # folds begun beside a backup's copy kernel (_copy_kernel)
        self._applied = 0  # completions the scheduler has taken in this fold (_advance)
        self.before_deadline = 0  # folds begun while the queue head's prefetch deadline ran
        self.chained = 0  # segments a fold went on with past a finishing step (_chain)
        self._freed: BatchPlan | None = None  # a chained segment's C', frees applied

    def steps_allowed(self, plans: tuple[BatchPlan, ...]) -> int:
        """How many steps a fold starting with ``plans`` may take (0: no fold now)."""
        if not self.possible or len(plans) != 1:
            return 0
        if (self._backup_blocks and not self.rt.streams["d2h"].idle()
                and not self._copy_fits()):
            return 0  # no fold can start (__init__): the driver's own path costs less
        steps = self.sched.steady_decode(plans[0])
        return steps if steps >= MIN_STEPS else 0

    def run(self, plan: BatchPlan, limit: int, inbox: Callable[[], bool],
            wake: Callable[[], simpy.Event], ended: Callable[[int], None] | None = None
            ) -> Proc:
        """Driver-process body for a fold that starts with ``plan`` (at most ``limit``
        steps); returns None with the driver due at the top of its loop, or the result of
        a scheduler step it took at an interruption (:meth:`_absorb`), which the driver
        goes on with as if it had just stepped. ``inbox()``: arrivals wait; ``wake()``: an
        event the next completion or routed arrival fires; ``ended(rid)``: the driver's
        handling of a request that ended (given, a fold that ran to its limit may go on
        past it: :meth:`_chain`)."""
        env, rt, sched = self.env, self.rt, self.sched
        self._freed = None
        self._bound = bound = _before(sched.fold_deadline())
        if self.cpu > 0:
            yield rt.host_lane.run(self.cpu)
        freed = bool(plan.frees or plan.releases)
        if freed:  # here, as unfolded (prepare applies them first); its compute may fold
            rt.apply_frees(plan)
        if env.now >= bound:  # the head's deadline came in the cpu yield: as unfolded,
            self._start(replace(plan, frees=(), releases=()) if freed else plan)
            return sched.step(env.now)  # C is prepared, then the driver's step again
        self._applied = 0  # completions the scheduler has taken (_advance)
        result: StepResult | bool = False
        while not inbox():
            if bound == math.inf:
                yield first_of(env, (wake(),))  # a hop after: the compute stream idles first
            else:  # the driver's own wait, its next prefetch deadline's timer with it (none
                # once an absorbed step ended the head's prefetch, or at its deadline)
                woken = wake()
                deadline = sched.next_deadline(env.now)
                yield first_of(env, (woken,) if deadline is None
                               else (woken, env.timeout(deadline - env.now)))
            result = self._absorb(plan, -1)  # transfers done while B runs: C is prepared
            if result is not True:
                break
        steps = (self._schedule(plan, limit)
                 if result is False and not inbox() and self._quiet(plan) else _NO_STEPS)
        if len(steps) < self._min_steps():  # no fold: C runs as unfolded, prepared later
            self._start(replace(plan, frees=(), releases=()) if freed else plan)
            return result if isinstance(result, StepResult) else None
        done = self._take_completions()  # batch C - 1's (first step), cache-only plans'
        self._count_beside()
        self.beside_cache_only += len(done) > 1
        rt.fluid.expect(self._changes(plan, steps))
        timer = env.timeout(exact_delay(env.now, steps.taken[-1]))
        while True:
            taken, t, got = yield from self._wait(plan, steps, timer, inbox, wake)
            if got is not True:
                result = got
            if t < steps.taken[-1]:
                self.interrupted += 1
            elif (ended is not None and CHAIN and len(steps) == limit and not inbox()
                  and not rt._completions):
                went = yield from self._chain(plan, steps, taken, t, inbox, ended)
                if not isinstance(went, tuple):
                    return went
                plan, steps, limit, timer = went
                continue
            yield from self._materialize(plan, steps, taken, t)
            return result if isinstance(result, StepResult) else None

    def _wait(self, plan: BatchPlan, steps: FoldedSteps, timer: simpy.Event,
              inbox: Callable[[], bool], wake: Callable[[], simpy.Event]
              ) -> Generator[simpy.Event, Any, tuple[int, float, StepResult | bool]]:
        """Wait for the fold's last step (``timer``), taking the transfer completions that
        come meanwhile while the driver would wait idle (:meth:`_absorb`); returns (the
        steps taken, the time, the last absorb's result: True when none ended it). An
        arrival already in the inbox (one routed in a chained segment's cpu yield, which
        nothing woke for) ends it at once."""
        env = self.env
        takens, last = steps.taken, steps.taken[-1]
        result: StepResult | bool = True
        while True:
            if not inbox():
                yield first_of(env, (timer, wake()))
            t = env.now
            taken = bisect.bisect_left(takens, t)  # how many < t: never decrease
            if t >= last or inbox() or taken + 1 >= len(takens):
                return taken, t, result
            prepared = (takens[taken - 1] if taken else steps.start[0]) + self.cpu
            if not prepared <= t < steps.end[taken]:  # the driver busy, or j's completion due
                return taken, t, result
            result = self._absorb(plan, taken)
            if result is not True:
                return taken, t, result

    def _chain(self, plan: BatchPlan, steps: FoldedSteps, j: int, t: float,
               inbox: Callable[[], bool], ended: Callable[[int], None]
               ) -> Generator[simpy.Event, Any, Any]:
        """The fold ran to its limit: a request takes its last token in step ``j``, whose
        completion the driver takes now (``t``), with step j + 1's plan prepared. As the
        unfolded driver: step j + 1's pages placed and its handle given (as its prepare
        did), the completion taken in a scheduler step (the request ends: its releases
        ride on the next plan, C'). If C' is the step's one plan, a fold of it may start
        (``steps_allowed``) and nothing in flight could change a step's speed
        (:meth:`_streams_quiet`), the fold goes on: a segment whose step 0 is batch j + 1
        running from now (never prepared by the runtime nor executed) and C' prepared
        after the driver's cpu yield (taken here, C''s frees applied after it, as ``run``
        applies its plan's); returns (step j + 1's plan, the segment's steps, its limit,
        its timer). Else batch j + 1 is prepared (no page placed again) and executed now,
        as :meth:`_materialize` starts a plan after an absorbed step, and the driver goes
        on with the step's result (None: no token left, nothing to execute)."""
        rt, sched, env = self.rt, self.sched, self.env
        nxt = self._settle(plan, steps, j, t, [])
        if nxt is None:
            rt.fluid.unexpect(t)
            return None
        self._place_pages(nxt, 1)  # step j + 1's rows: plan's, less the finished ones
        sched.prepared(self._handle(nxt))
        result = sched.step(t, (), rt.poll())  # the driver's, at the top of its loop
        plans = result.plans
        limit = self.steps_allowed(plans) if plans and not inbox() else 0
        bid = nxt.batch_id
        if limit:
            nplan = plans[0]
            bound = _before(sched.fold_deadline())
            if not (nplan.batch_id == bid + 1 and t + self.cpu < bound
                    and len(sched.plans.inflight) == 2 and not rt._prepared
                    and not rt._completions and rt.streams["compute"].idle()
                    and self._streams_quiet()):
                limit = 0
        if not limit:  # as _materialize: step j + 1 runs now; the driver takes the rest
            rt.fluid.unexpect(t)
            self._start(nxt)
            return result
        for rid in result.ended:  # as the driver does with a step's result
            ended(rid)
        self._bound = bound
        steps = self._schedule(nxt, limit + 1)  # step 0: batch j + 1, started now
        if len(steps) < 1 + self._min_steps():
            rt.fluid.unexpect(t)
            self._start(nxt)
            return StepResult(plans) if result.ended else result  # ended: told above
        self._applied = 1  # the scheduler took batch j's completion: step 0's C - 1
        self.chained += 1
        self._count_beside()
        rt.fluid.expect_more(self._changes(nxt, steps))
        timer = env.timeout(exact_delay(env.now, steps.taken[-1]))
        if self.cpu > 0:  # the driver's cpu yield for C', as unfolded (and run's)
            yield rt.host_lane.run(self.cpu)
        self._freed = None
        if nplan.frees or nplan.releases:  # as its prepare would, first (run)
            rt.apply_frees(nplan)
            self._freed = nplan  # started without them if it runs unfolded (_start)
        return nxt, steps, limit + 1, timer

    # -- internals --------------------------------------------------------------------
    def _changes(self, plan: BatchPlan, steps: FoldedSteps) -> list[float]:
        """When the unfolded steps' compute jobs would start and end on the fluid server
        (a job of no work is never submitted): the splits of other jobs' progress
        (L3 transfers in flight) the fold must keep (:meth:`sim.fluid.FluidServer.expect`)."""
        sampled = self.rt.cost.sample_time(len(plan.slices)) > 0
        starts, ces, ends = steps.start, steps.compute_end, steps.end
        if min(steps.work) > 0:  # every step's compute job runs (the usual case)
            # the columns interleaved, step by step (start, compute end[, compute end,
            # end]), by strided slice stores: no tuple per step
            if not (len(starts) == len(ces) == len(ends)):
                raise ValueError("a fold's columns differ in length")
            cols = (starts, ces, ces, ends) if sampled else (starts, ces)
            m = len(cols)
            out = [0.0] * (m * len(starts))
            for c, col in enumerate(cols):
                out[c::m] = col
            return out
        out: list[float] = []
        for w, s, ce, e in zip(steps.work, starts, ces, ends, strict=True):
            if w > 0:
                out += (s, ce)
            if sampled:
                out += (ce, e)
        return out

    def _take_completions(self) -> list:
        done = self.rt._completions
        out = done[:]
        done.clear()
        return out

    def _start(self, plan: BatchPlan) -> None:
        if plan is self._freed:  # a chained segment's C', its frees applied (_chain)
            plan = replace(plan, frees=(), releases=())
        handle = self.rt.prepare_batch(plan)
        self.sched.prepared(handle)
        self.rt.execute_batch(handle)

    def _quiet(self, plan: BatchPlan) -> bool:
        """Only the completions of the plans in flight before ``plan`` came (the older
        batch's, and those of the cache-only plans behind it), and nothing that runs on
        (or will start on) this GPU can change the speed of its compute."""
        rt = self.rt
        done = rt._completions
        inflight = self.sched.plans.inflight
        # as many as the plans in flight but plan (steady_decode: one is batch C - 1, the
        # rest cache-only), each one of theirs: so all of theirs, once each
        if not (len(done) == len(inflight) - 1 and not rt._prepared
                and rt.streams["compute"].idle()):
            return False
        for c in done:
            if (not isinstance(c, BatchCompletion) or c.finished or c.batch_id not in inflight
                    or c.batch_id == plan.batch_id):
                return False
        return self._streams_quiet()

    def _min_steps(self) -> int:
        """The fewest steps a fold takes (a chained segment: past its step 0): more with
        L3 beside a backup's kernel on d2h (``_quiet``), whose finish ends it."""
        blocked = self._backup_blocks and self.rt.fluid.kinds.get("d2h", 0)
        return MIN_STEPS_BESIDE_COPY_L3 if blocked else MIN_STEPS

    def _count_beside(self) -> None:
        """Count what a fold (or a chained segment) begins beside: L3 transfers, a
        prefetch deadline bounding it, a copy kernel on d2h."""
        kinds = self.rt.fluid.kinds
        self.beside_l3 += kinds.get("l3", 0) > 0
        self.before_deadline += self._bound < math.inf
        self.beside_copy += kinds.get("d2h", 0) > 0

    def _streams_quiet(self) -> bool:
        """Nothing that runs on (or will start on) this GPU can change the speed of its
        compute (:meth:`_quiet`, less the completions)."""
        rt = self.rt
        if rt.writeback.policy.chunked and not rt.streams["d2h"].idle():
            return False  # its chunks ask the policy, which must have seen every step
        # L3 transfers may run on: they change no compute rate, and the fluid server
        # charges them at the folded steps' changes (FluidServer.expect). The folds their
        # finishes cut short cost about what they save, the longer ones save 5-6% of the
        # trace's L1+L2+L3 variant (3,000 requests: 308,647 -> 273,781 events)
        if not self.copies_slow_compute:
            return True
        if not rt.streams["h2d"].idle():
            return False
        if rt.streams["d2h"].idle():
            return rt.fluid.kinds.get("l3", 0) == len(rt.fluid.jobs)
        # a backup copying: the fold's steps run at 1 - slowdown and end before its
        # kernel can finish (_schedule), so none of them changes rate
        return not rt.fluid.kinds.get("compute", 0) and self._copy_kernel() is not None

    def _copy_kernel(self) -> FluidJob | None:
        """The copy kernel of the backup on the d2h stream when it is on the fluid server
        with nothing but L3 transfers and compute beside it (compute takes no link share;
        a fold starts with none) and its rate cannot rise: it runs at its lone rate (no
        host-memory squeeze lowers it now) and no PCIe fault is in force (a fault's
        factor is at most 1: faults, squeezes and copies joining only slow it). It then
        finishes no earlier than its ``due``, and until then every compute job runs at
        1 - slowdown (:meth:`sim.link.PcieLink.solo_rate`). None: no such kernel."""
        fluid, link = self.rt.fluid, self.rt.link
        kinds = fluid.kinds
        if (fluid.folded is not None or kinds.get("d2h", 0) != 1 or kinds.get("h2d", 0)
                or kinds.get("l3", 0) + kinds.get("compute", 0) + 1 != len(fluid.jobs)
                or link.slowed):
            return None
        for job in fluid.jobs:
            if job.kind == "d2h":
                if ("kernel" in job.tags and job.rate > 0
                        and job.rate == link.lone_rate("d2h", True, job.cap)):
                    return job
                return None
        return None

    def _copy_fits(self) -> bool:
        """With L3 and a backup on the d2h stream (``steps_allowed``): its copy kernel
        runs (:meth:`_copy_kernel`) and finishes late enough that batch C - 1 and the
        steps a fold beside it needs (``MIN_STEPS_BESIDE_COPY_L3``) likely complete
        before it, each as long as the batch that just completed (a guess that only
        spares fold entries that would fail: the entry decides)."""
        kernel = self._copy_kernel()
        if kernel is None:
            return False
        done = self.rt.writeback.last_step()
        if done is None:
            return False
        start, end = done
        return kernel.due > self.env.now + (1 + MIN_STEPS_BESIDE_COPY_L3) * (end - start)

    def _schedule(self, plan: BatchPlan, limit: int) -> FoldedSteps:
        """The fold's steps: at most ``limit``, the last taken before the horizon."""
        env, rt, cpu = self.env, self.rt, self.cpu
        horizon = min(self.horizon(), self._bound)  # the head's deadline (run)
        contexts = [s.context_tokens for s in plan.slices]
        sample = rt.cost.sample_time(len(contexts))
        rate = 1.0  # the compute jobs' (a solo rate)
        if self.copies_slow_compute and rt.fluid.kinds.get("d2h", 0):
            kernel = self._copy_kernel()  # _quiet found it
            assert kernel is not None
            # every step taken before the kernel's due runs slowed from start to end
            horizon = min(horizon, kernel.due)
            rate = 1.0 - rt.link.slowdown
            sample = sample / rate  # the job's delay, as FluidServer._schedule divides
        taken = env.now  # the driver takes batch C - 1's completion now; C starts
        out = FoldedSteps()
        add_start, add_ce = out.start.append, out.compute_end.append
        add_end, add_taken = out.end.append, out.taken.append
        takens, works = out.taken, rt.cost.decode_work_column
        timed, sampled = cpu > 0, sample > 0
        n = 0
        while n < limit:  # in chunks: the horizon often comes first (when there is one)
            chunk = min(limit - n, max(16, n) if horizon < math.inf else MAX_CHUNK)
            # compute_op's sum of layer times, step by step (a numpy column for a long
            # chunk: _steps_at_once takes it as it is, no list converted back)
            column = works(contexts, chunk, n)
            if chunk >= VECTOR_CHUNK:
                # the delay of each step's compute job at ``rate`` (FluidServer._schedule's
                # ``remaining / rate``: numpy divides as Python does; at rate 1 the work)
                got, stop = _steps_at_once(out, taken, column if rate == 1.0 else
                                           np.divide(column, rate), sample, cpu, horizon)
                out.work += floats(column[:got])
                if stop:
                    return out
                if got:
                    taken = takens[-1]
                n = len(takens)
                if got == chunk:
                    continue
                column = column[got:]  # the driver's cpu bounds step got: one by one
            chunk_works = floats(column)
            delays = chunk_works if rate == 1.0 else [w / rate for w in chunk_works]
            for work in delays:
                prepared = taken + cpu if timed else taken  # the next plan, built now
                start = taken
                compute_end = start + work if work > 0 else start  # a fluid job at ``rate``
                end = compute_end + sample if sampled else compute_end
                taken = end if end >= prepared else prepared
                if taken >= horizon:
                    out.work += chunk_works[:len(takens) - n]
                    return out
                add_start(start)
                add_ce(compute_end)
                add_end(end)
                add_taken(taken)
            out.work += chunk_works
            n = len(takens)
        return out

    def _absorb(self, plan: BatchPlan, j: int) -> StepResult | bool:
        """Transfer completions (and nothing else) came now, while the driver waits idle
        for step ``j``'s completion (-1: batch C - 1's, before the fold's first step);
        it has taken the ones before and prepared step j + 1's plan (their pages are
        placed here). Take them in a scheduler step, as the unfolded driver does, with
        the scheduler as it has it then (:meth:`_advance`). True: the step planned and
        ended nothing and the pipeline is still steady (``Scheduler.steady_decode`` of
        step j + 1's plan), so the fold goes on (or may still start): the runtime has
        nothing to do. The step's result otherwise (the caller materializes the
        runtime, then the driver goes on with it); False: no step taken."""
        rt, sched = self.rt, self.sched
        done = rt._completions
        if not done or any(isinstance(c, BatchCompletion)
                           # with L3, a backup's completion plans its store (the step
                           # would end the fold): the driver takes it for less
                           or (c.kind is _BACKUP and self.l3) for c in done):
            return False
        self._place_pages(plan, j + 2)  # steps 0..j + 1: as their prepares placed them
        _, nxt = self._advance(plan, j)
        assert nxt is not None and nxt.batch_id == plan.batch_id + j + 1
        sched.prepared(self._handle(nxt))
        result = sched.step(self.env.now, (), rt.poll())
        if result.plans or result.ended or not sched.steady_decode(nxt):
            return result
        self.absorbed += 1
        return True

    def _advance(self, plan: BatchPlan, j: int) -> tuple[BatchPlan, BatchPlan | None]:
        """The scheduler as unfolded once the driver took ``j + 1`` completions (batch
        C - 1's, steps 0..j-1's): the plans of steps j and j + 1 (None: no token left)."""
        need = j + 1 - self._applied
        if need > 0:
            self._applied = j + 1
            return self.sched.fold_decode(need)
        inflight = self.sched.plans.inflight  # taken already, at an absorbed completion
        return inflight[plan.batch_id + j], inflight.get(plan.batch_id + j + 1)

    def _materialize(self, plan: BatchPlan, steps: FoldedSteps, j: int, t: float
                     ) -> Proc:
        """The unfolded state at ``t``, when the driver has taken the completions of steps
        0..j-1: step j's batch runs (or has just completed), the plan after it is prepared
        once the driver's cpu yield for it ends."""
        marks = self.rt.fluid.unexpect(t)  # the steps after t run as real ops, if at all
        nxt = self._settle(plan, steps, j, t, marks)
        prepared = (steps.taken[j - 1] if j else steps.start[0]) + self.cpu
        if self.cpu > 0 and t < prepared:
            yield self.env.timeout(exact_delay(t, prepared))  # the driver's cpu yield for nxt
        if nxt is not None:
            self._start(nxt)

    def _settle(self, plan: BatchPlan, steps: FoldedSteps, j: int, t: float,
                marks: list[float]) -> BatchPlan | None:
        """:meth:`_materialize` but the driver's cpu yield and the next plan's start:
        scheduler and runtime as unfolded at ``t`` (step j running, or completed now);
        returns the plan after step j's (None: no token left)."""
        sched, rt = self.sched, self.rt
        step = steps[j]
        arrived = self._take_completions()  # those that interrupted the fold: after
        # step j's own (the runtime's queue, not a poll: the driver polls once it is back)
        self._place_pages(plan, j + 1)  # none after those an absorbed completion placed
        running, nxt = self._advance(plan, j)
        assert running.batch_id == plan.batch_id + j
        sched.prepared(self._handle(running))
        finished = tuple(s.rid for s in running.slices if s.finishes)
        done = step.end <= t
        self._record(plan, j + 1, steps, j + 1 if done else j, observed=j)
        rt._decode[running.batch_id] = len(running.slices)  # the write-back policy's view
        if done:
            rt.complete(build_completion(running.batch_id, step.start, step.end, finished))
        else:
            bid, requests = running.batch_id, len(running.slices)
            rt.streams["compute"].submit(
                lambda: self._resumed_op(step, bid, requests, finished, t, marks))
        for c in arrived:
            rt.complete(c)
        self.folds += 1
        self.folded_steps += j + 1
        return nxt

    def _resumed_op(self, step: FoldedStep, bid: int, requests: int,
                    finished: tuple[int, ...], t: float, marks: list[float]) -> Proc:
        """The compute op of the batch a fold stopped in, from where it stands at ``t``
        (its fluid job adopted as if started when the unfolded run started it)."""
        rt, env = self.rt, self.env
        generation = rt.generation
        compute_end = step.compute_end
        if t < compute_end:
            yield rt.fluid.adopt(FluidJob(step.work, "compute"), step.start, marks)
            compute_end = env.now
        rt.timeline.record("compute", "decode", step.start, compute_end, batch=bid)
        sample = rt.cost.sample_time(requests)
        if sample > 0:
            job = FluidJob(sample, "compute")
            yield (rt.fluid.adopt(job, compute_end, marks) if t > compute_end
                   else rt.fluid.submit(job))
            rt.timeline.record("compute", "sample", compute_end, env.now, batch=bid)
        if generation == rt.generation:
            rt.complete(build_completion(bid, step.start, env.now, finished))

    def _place_pages(self, plan: BatchPlan, n: int) -> None:
        """Allocate the pages decode steps 0..n-1 of ``plan``'s requests need, in the
        order their unfolded prepares would (step by step, slice by slice)."""
        rt = self.rt
        page = rt.page_size
        rows = [rt.rows[s.request.slot_id] for s in plan.slices]  # type: ignore[union-attr]
        r = len(rows)
        # each new page as step * r + slice index (sorted: the prepares' order); step k
        # needs ceil((context + k + 1) / page) pages: one more each time the context
        # passes the pages the row holds, then every ``page`` steps
        need: list[int] = []
        firsts: list[tuple[int, int]] = []  # (first step needing a page, slice index)
        for i, (s, row) in enumerate(zip(plan.slices, rows, strict=True)):
            first = row.size * page - s.context_tokens
            assert first >= 0, f"request {s.rid}: its pages do not hold its context"
            if first < n:
                need.extend(range(first * r + i, n * r, page * r))
                firsts.append((first, i))
        if not need:
            return
        need.sort()
        # one allocation of them all hands out the pages that one-page allocations in
        # this order would (no page is freed between them); each row takes its own in
        # order, the rows in the order of their first new page
        pages = rt.device[Kind.FULL].allocate(len(need))
        if len(need) == len(firsts):  # a page each (the usual case: n <= page)
            for v, p in zip(need, pages, strict=True):
                rows[v % r].append_runs(((p, 1),), own=True)
            return
        per_row: list[list[int]] = [[] for _ in range(r)]
        for v, p in zip(need, pages, strict=True):
            per_row[v % r].append(p)
        firsts.sort()
        for _, i in firsts:
            rows[i].append(per_row[i], own=True)

    def _handle(self, plan: BatchPlan) -> PreparedBatchHandle:
        """The handle the unfolded prepare of ``plan`` would have returned."""
        rt = self.rt
        rows = rt.rows
        slices = tuple([rows[s.request.slot_id].prepared_slice()  # type: ignore[union-attr]
                        for s in plan.slices])
        return build_handle(rt.runtime_id, rt.generation, plan.batch_id, slices, ())

    def _record(self, plan: BatchPlan, batches: int, steps: FoldedSteps, n: int,
                observed: int) -> None:
        """Batch shapes of the first ``batches`` folded batches; timeline rows of the
        first ``n`` ``steps`` (those that ran to their end); the first ``observed`` of them
        the write-back policy sees complete, in order, as the runtime shows it every batch
        (the runtime's completion of a later one shows it that one)."""
        rt, tl = self.rt, self.rt.timeline
        bid0 = plan.batch_id
        contexts = [s.context_tokens for s in plan.slices]
        n_req, ctx0 = len(contexts), sum(contexts)
        rt.batch_shapes.add_decode_run(bid0, batches, n_req, ctx0)
        if not n:
            rt.writeback.steps_done(bid0, (), (), n_req)
            return
        starts, ends = steps.start, steps.end  # the first n are recorded
        rt.writeback.steps_done(bid0, starts[:observed], ends[:observed], n_req)
        if self.per_step_rows:  # the rows compute_op writes for each batch
            sampled = rt.cost.sample_time(n_req) > 0
            for k, (st, ce, e) in enumerate(zip(starts[:n], steps.compute_end[:n], ends[:n],
                                                strict=True)):
                tl.record("compute", "decode", st, ce, batch=bid0 + k)
                if sampled:
                    tl.record("compute", "sample", ce, e, batch=bid0 + k)
            return
        # one row per run of back-to-back steps: step k starts a run when it does not
        # start as step k - 1 ends (the driver's cpu came later)
        if starts[1:n] == ends[:n - 1]:  # no such step (times are never NaN): one run
            tl.record("compute", "decode", starts[0], ends[n - 1], batch=bid0, steps=n)
            return
        first = 0
        breaks = compress(range(1, n), map(ne, islice(starts, 1, n), ends))
        for k in chain(breaks, (n,)):
            tl.record("compute", "decode", starts[first], ends[k - 1], batch=bid0 + first,
                      steps=k - first)
            first = k
