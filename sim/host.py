"""The driver thread's share of a batch (lane ``cpu``) and the copy calls it issues.

What the torch runtime does on the thread that calls prepare_batch / execute_batch, and
so what a real engine's scheduler thread does without CUDA graphs::

    cpu      [prepare | issue load 0 | load 1 ..][execute: setup | L0 | L1 | .. | sample]
    h2d                 [load 0 .......]  [load 1 ..]     a load starts once its first
    compute                                      [L0][L1]..   call is issued; a layer once
                                                              it is launched

- prepare: ``prepare_time(requests, tokens)``; then per load op ``op_submit_s`` and one
  ``copy_issue_s`` per copy call (CUDA; on CPU the lane's worker issues its own copies);
- execute: batch setup (index build and move), then per layer and for the sampling op
  ``op_submit_s + layer_launch_s``, then the backup's submit and copy issue;
- every device-lane op starts ``op_gap_s`` after the lane could start it (the worker's
  hand-off between two queued ops; about 0 on CUDA);
- the scheduler's own step (``scheduler_step_s``, charged by ``sim.driver`` through
  :meth:`HostLane.run`) is driver-thread time too, so it queues on this lane; a batch
  that prefills adds ``admit_step_s`` of scheduler work (admission, prefix match) just
  before its prepare; the step after a prefill batch completed ``insert_step_s`` and per
  request that finished ``finish_step_s`` (:meth:`HostLane.completed`);
- the CPU runtime (``cpu.interpreter``, :mod:`sim.interpreter`): its lanes are Python
  threads under the driver's interpreter lock, so all of this is fluid work sharing the
  lock with the lanes' ops, of kind ``python`` (scheduler, prepare, submits) or ``torch``
  (the batch setup: index tensors); and threads sleep when they wait (ablation
  ``wakeup``): the driver wakes ``wakeup_s`` after the completion it waited for (before
  its step; ``interpreter.wake_s`` more if a lane's thread holds the lock then), a
  lane's worker ``wake_s`` after its op became ready when it had to wait for it; a
  lane's op ready while the driver runs python work starts ``wake_s`` after that work
  ends (:meth:`HostLane.before_device_op`), and lanes it stalled mid-op resume
  ``wake_s`` after the driver blocks (:meth:`HostLane.went_idle`).
Issue is pipelined with the copy engine: the engine moves call k while the host issues
call k+1, so a copy ends no earlier than its last call's issue plus one call's transfer
(:mod:`sim.copy_engine`). Datasheet profiles measure none of this: the lane is inactive
and costs nothing. Ablation switches (``profile.ablate``): ``host_lane`` (all of it off),
``op_gap``, ``pipelined_issue`` (a copy starts after all its calls are issued),
``copy_calls`` (count one call per run and layer, K and V together, as the simulator did
before).

Copy calls per op (mirrors :mod:`gpu_backend.io`), ``nl`` layers, R runs contiguous on
both sides, H runs contiguous on the host, P pages:
- direct, layer_first: 2 x R x nl;  direct, page_first: 2 x P x nl;
- kernel as ``gather_dma``: layer_first 2 x H x nl; page_first 2 x H (all layers) or
  2 x P (a page's layers are contiguous); plus one device gather/scatter;
- kernel as ``sm_zero_copy`` (SGLang's kernel): one launch.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from hicache.runtime.page_ids import Run
from sim.batch import BatchState
from sim.fluid import FluidJob, FluidServer
from sim.interpreter import DRIVER, INTERPRETER, PYTHON
from sim.streams import Stream, timer

if TYPE_CHECKING:
    from hicache.timeline import Timeline
    from sim.cost import CostModel
    from sim.hardware.profile import HardwareProfile

Proc = Generator[simpy.Event, Any, None]
HANDOFF = frozenset({PYTHON, "handoff"})  # lanes wake up after the driver blocked


def interpreter_on(profile: HardwareProfile) -> bool:
    """The profile models the CPU runtime's interpreter lock (:mod:`sim.interpreter`)."""
    return (profile.host_cpu.interpreter is not None and "interpreter" not in profile.ablate
            and "host_lane" not in profile.ablate)


def _starts(runs: Sequence[Run]) -> set[int]:
    """The offsets (in pages) at which ``runs``' pages stop being consecutive: where a
    run starts that does not continue the one before (offset 0 always)."""
    out: set[int] = set()
    off, end = 0, -1
    for s, n in runs:
        if s != end:
            out.add(off)
        off += n
        end = s + n
    return out


def paired_runs(src: Sequence[Run], dst: Sequence[Run]) -> int:
    """Copy calls needed when both source and destination runs must be contiguous: the
    pieces the two lists of runs (the same pages' count) cut each other into."""
    return len(_starts(src) | _starts(dst))


def copy_calls(backend: str, mechanism: str, layout: str, pages: int, src: Sequence[Run],
               dst: Sequence[Run], host: Sequence[Run], layers: int, all_layers: bool,
               legacy: bool = False) -> int:
    """Copy calls one op issues (module doc) moving ``pages`` pages from the runs ``src``
    to the runs ``dst`` (``host``: whichever of them lives in L2); ``legacy``: the old
    count (one per run and layer for direct, one per op for kernel). Runs are
    ``(start, length)``, in page order, adjacent ones possibly apart: counted per run."""
    if not pages or not layers:
        return 0
    if legacy:
        return paired_runs(src, dst) * layers if backend == "direct" else 1
    if backend == "direct":
        per = paired_runs(src, dst) if layout == "layer_first" else pages
        return 2 * per * layers
    if mechanism == "sm_zero_copy":
        return 1
    h = len(_starts(host))
    if layout == "layer_first":
        return 2 * h * layers
    return 2 * h if all_layers else 2 * pages


class HostLane:
    """Lane ``cpu``: the runtime calls' host time, and the events they release."""

    def __init__(self, env: simpy.Environment, profile: HardwareProfile, cost: CostModel,
                 timeline: Timeline, fluid: FluidServer | None = None) -> None:
        h, ab = profile.host_cpu, profile.ablate
        on = "host_lane" not in ab
        self.env, self.cost, self.timeline = env, cost, timeline
        # the interpreter lock is modelled (sim.interpreter): driver work is fluid work
        self.fluid = fluid if on and interpreter_on(profile) else None
        self.submit = h.op_submit_s if on else 0.0
        self.gap = h.op_gap_s if on and "op_gap" not in ab else 0.0
        self.launch = h.layer_launch_s if on else 0.0
        self.issue = h.copy_issue_s if on else 0.0
        self.pipelined = "pipelined_issue" not in ab
        self.legacy_calls = "copy_calls" in ab
        steps = on and "scheduler_step" not in ab
        self.admit = h.admit_step_s if steps else 0.0
        self.insert = h.insert_step_s if steps else 0.0
        self.finish = h.finish_step_s if steps else 0.0
        self.owed = 0.0  # step work the completions since the last step left (completed)
        waking = on and "wakeup" not in ab
        self.driver_wake = h.wakeup_s if waking else 0.0
        self.wake = h.interpreter.wake_s if waking and h.interpreter is not None else 0.0
        self.active = on and (self.submit > 0 or self.gap > 0 or self.launch > 0
                              or self.issue > 0 or self.admit > 0 or self.driver_wake > 0
                              or self.insert > 0 or self.finish > 0
                              or self.fluid is not None
                              or cost.setup_fit is not None or cost.prepare_fit is not None)
        self.stream = Stream(env, "cpu")

    def completed(self, prefilled: bool, finished: int) -> None:
        """A batch completed: the next step also inserts its prompts (``prefilled``) and
        releases the ``finished`` requests."""
        self.owed += self.insert * prefilled + self.finish * finished

    def run(self, seconds: float) -> simpy.Event:
        """``seconds`` of other driver-thread work (the scheduler's step, plus what the
        completions it handles owe: :meth:`completed`), in lane order; a driver that was
        waiting (nothing queued here) wakes up first."""
        if not self.active:
            return timer(self.env, seconds)  # (env.timeout's event, without a Timeout)
        woke = self.stream.tail.triggered  # nothing queued here: the driver was waiting
        seconds, self.owed = seconds + self.owed, 0.0

        def body() -> Proc:
            if woke and self.driver_wake:
                yield self.env.timeout(self.driver_wake)
            if woke and self.wake and self.lanes_busy():
                # a busy lane's thread holds the lock: the driver gets it a wake-up later
                yield self.env.timeout(self.wake)
            yield self.busy(seconds)
            self.went_idle()
        return self.stream.submit(body)

    def lanes_busy(self) -> bool:
        """Some lane's thread is running an op that needs the interpreter lock."""
        return self.fluid is not None and any(j.gil > 0 and j.thread != DRIVER
                                              for j in self.fluid.jobs)

    def went_idle(self) -> None:
        """At the end of a driver-lane body: if no more driver work is queued, the driver
        blocks, and lane ops its python work stalled resume once their threads woke up
        (``wake_s`` more of a stalled lane, :mod:`sim.interpreter`)."""
        if self.fluid is None or not self.wake or self.env.active_process is not self.stream.tail:
            return
        if self.lanes_busy():
            self.fluid.submit(FluidJob(self.wake, INTERPRETER, tags=HANDOFF, gil=1.0,
                                       thread=DRIVER))

    def _python_job(self) -> FluidJob | None:
        """The driver's python work in progress (not a hand-off), if any."""
        if self.fluid is None:
            return None
        return next((j for j in self.fluid.jobs if j.thread == DRIVER and PYTHON in j.tags
                     and "handoff" not in j.tags), None)

    def busy(self, seconds: float, kind: str = PYTHON) -> simpy.Event:
        """``seconds`` of the driver thread's own work (of ``kind``: python or torch)."""
        if self.fluid is None or seconds <= 0:
            return self.env.timeout(seconds)
        return self.fluid.submit(FluidJob(seconds, INTERPRETER, tags=frozenset({kind}), gil=1.0,
                                          thread=DRIVER))

    def before_device_op(self, asleep: bool) -> Proc:
        """What a device-lane op waits for once it is ready (module doc): its lane's
        worker wakes up if it had to wait (``asleep``), else the hand-off gap; and on the
        CPU runtime a worker cannot start while the driver runs python work (it holds the
        lock until it blocks or calls torch): it starts a wake-up after that ends."""
        delay = self.wake if asleep and self.wake else self.gap
        if delay:
            yield self.env.timeout(delay)
        if (job := self._python_job()) is None:
            return
        while job is not None:
            assert job.done is not None
            yield job.done
            job = self._python_job()
        if self.wake:
            yield self.env.timeout(self.wake)

    def prepare(self, st: BatchState, requests: int, load_calls: Sequence[int],
                admits: bool = False) -> None:
        """Queue prepare_batch's host work (after the scheduler's admission work when the
        batch ``admits``); ``st.load_issued[g]`` fires when load op g's first call is
        issued (``st.load_issue_end[g]``: when its last one is). An inactive lane with
        no loads leaves ``st`` as it is (both empty)."""
        if not load_calls and not self.active:
            return
        st.load_issue_end = [0.0] * len(load_calls)
        if not self.active:
            st.load_issued = [None] * len(load_calls)  # issued at once: nothing to wait on
            return
        st.load_issued = [self.env.event() for _ in load_calls]
        self.stream.submit(lambda: self._prepare(st, requests, load_calls, admits))

    def _prepare(self, st: BatchState, requests: int, load_calls: Sequence[int],
                 admits: bool) -> Proc:
        env = self.env
        if admits and self.admit:
            yield self.busy(self.admit)
        t0 = env.now
        reqs = [(n, c) for n, c in st.prefills] + [(1, c) for c in st.decodes]
        yield self.busy(self.cost.prepare_time(requests, sum(n for n, _ in reqs)))
        for g, calls in enumerate(load_calls):
            first = self.issue if self.pipelined else calls * self.issue
            yield self.busy(self.submit + first)
            rest = 0.0 if not self.pipelined else max(0, calls - 1) * self.issue
            st.load_issue_end[g] = env.now + rest
            st.load_issued[g].succeed()
            if rest:
                yield self.busy(rest)
        self.timeline.record("cpu", "prepare", t0, env.now, batch=st.plan.batch_id)
        self.went_idle()

    def execute(self, st: BatchState, ops: int, backup_calls: int) -> None:
        """Queue execute_batch's host work: setup, then ``ops`` compute launches
        (``st.launched[i]``), then the backup's submit and issue."""
        st.launched = None
        if not self.active:
            return
        st.launched = [self.env.event() for _ in range(ops)]
        self.stream.submit(lambda: self._execute(st, backup_calls))

    def _execute(self, st: BatchState, backup_calls: int) -> Proc:
        env, t0 = self.env, self.env.now
        if st.prefills or st.decodes:
            yield self.busy(self.cost.setup_time(st.prefills, st.decodes), "torch")
        for ev in st.launched or ():
            yield self.busy(self.submit + self.launch)
            ev.succeed()
        if backup_calls:
            yield self.busy(self.submit + backup_calls * self.issue)
        self.timeline.record("cpu", "execute", t0, env.now, batch=st.plan.batch_id)
        self.went_idle()
