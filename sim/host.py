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
- every device-lane op starts ``op_gap_s`` after the lane could start it (CPU worker
  hand-off; about 0 on CUDA); with ``device_waits_for_host`` (the CPU runtime: lane
  threads need the driver thread's GIL) an op that becomes ready while the driver thread
  is busy starts ``handoff_s`` after it goes idle instead, and device-lane ops run one at
  a time (:meth:`HostLane.acquire`: the lanes' Python between torch calls holds the GIL,
  so small ops on different lanes serialize in the order they became ready);
- the scheduler's own step (``scheduler_step_s``, charged by ``sim.driver`` through
  :meth:`HostLane.run`) is driver-thread time too, so it queues on this lane; a batch
  that prefills adds ``admit_step_s`` of scheduler work (admission, prefix match) just
  before its prepare.
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

from sim.batch import BatchState, paired_runs
from sim.streams import Stream

if TYPE_CHECKING:
    from hicache.timeline import Timeline
    from sim.cost import CostModel
    from sim.hardware.profile import HardwareProfile

Proc = Generator[simpy.Event, Any, None]


def host_runs(pages: Sequence[int]) -> int:
    return paired_runs(list(pages), list(pages))


def copy_calls(backend: str, mechanism: str, layout: str, src: Sequence[int],
               dst: Sequence[int], host: Sequence[int], layers: int, all_layers: bool,
               legacy: bool = False) -> int:
    """Copy calls one op issues (module doc); ``legacy``: the old count (one per run and
    layer for direct, one per op for kernel)."""
    if not src or not layers:
        return 0
    if legacy:
        return paired_runs(list(src), list(dst)) * layers if backend == "direct" else 1
    if backend == "direct":
        per = paired_runs(list(src), list(dst)) if layout == "layer_first" else len(src)
        return 2 * per * layers
    if mechanism == "sm_zero_copy":
        return 1
    h = host_runs(host)
    if layout == "layer_first":
        return 2 * h * layers
    return 2 * h if all_layers else 2 * len(src)


class HostLane:
    """Lane ``cpu``: the runtime calls' host time, and the events they release."""

    def __init__(self, env: simpy.Environment, profile: HardwareProfile, cost: CostModel,
                 timeline: Timeline) -> None:
        h, ab = profile.host_cpu, profile.ablate
        on = "host_lane" not in ab
        self.env, self.cost, self.timeline = env, cost, timeline
        self.submit = h.op_submit_s if on else 0.0
        self.gap = h.op_gap_s if on and "op_gap" not in ab else 0.0
        self.launch = h.layer_launch_s if on else 0.0
        self.issue = h.copy_issue_s if on else 0.0
        self.pipelined = "pipelined_issue" not in ab
        self.legacy_calls = "copy_calls" in ab
        self.exclusive = on and h.device_waits_for_host
        self.admit = h.admit_step_s if on and "scheduler_step" not in ab else 0.0
        self.handoff = h.handoff_s if on else 0.0
        self.active = on and (self.submit > 0 or self.gap > 0 or self.launch > 0
                              or self.issue > 0 or self.exclusive or self.admit > 0
                              or cost.setup_fit is not None or cost.prepare_fit is not None)
        self.stream = Stream(env, "cpu")
        self.interpreter = simpy.Resource(env, capacity=1) if self.exclusive else None

    def acquire(self) -> simpy.Event | None:
        """The one-at-a-time slot of a device-lane op (None: lanes run concurrently)."""
        return None if self.interpreter is None else self.interpreter.request()

    def release(self, req: simpy.Event | None) -> None:
        if req is not None and self.interpreter is not None:
            self.interpreter.release(req)

    def run(self, seconds: float) -> simpy.Event:
        """``seconds`` of other driver-thread work (the scheduler's step), in lane order."""
        if not self.active:
            return self.env.timeout(seconds)

        def body() -> Proc:
            yield self.env.timeout(seconds)
        return self.stream.submit(body)

    def before_device_op(self) -> Proc:
        """What a device-lane op waits for before it starts (module doc)."""
        if self.exclusive and not self.stream.idle():
            while not self.stream.idle():
                yield self.stream.tail
            if self.handoff:
                yield self.env.timeout(self.handoff)
        elif self.gap:
            yield self.env.timeout(self.gap)

    def prepare(self, st: BatchState, requests: int, load_calls: Sequence[int],
                admits: bool = False) -> None:
        """Queue prepare_batch's host work (after the scheduler's admission work when the
        batch ``admits``); ``st.load_issued[g]`` fires when load op g's first call is
        issued (``st.load_issue_end[g]``: when its last one is)."""
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
            yield env.timeout(self.admit)
        t0 = env.now
        reqs = [(n, c) for n, c in st.prefills] + [(1, c) for c in st.decodes]
        yield env.timeout(self.cost.prepare_time(requests, sum(n for n, _ in reqs)))
        for g, calls in enumerate(load_calls):
            first = self.issue if self.pipelined else calls * self.issue
            yield env.timeout(self.submit + first)
            rest = 0.0 if not self.pipelined else max(0, calls - 1) * self.issue
            st.load_issue_end[g] = env.now + rest
            st.load_issued[g].succeed()
            if rest:
                yield env.timeout(rest)
        self.timeline.record("cpu", "prepare", t0, env.now, batch=st.plan.batch_id)

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
            yield env.timeout(self.cost.setup_time(st.prefills, st.decodes))
        for ev in st.launched or ():
            yield env.timeout(self.submit + self.launch)
            ev.succeed()
        if backup_calls:
            yield env.timeout(self.submit + backup_calls * self.issue)
        self.timeline.record("cpu", "execute", t0, env.now, batch=st.plan.batch_id)
