"""Tail folding: a layer-wise batch's remaining layers, once all its loads landed, as one
simulated event.

When every layer of a batch has landed (:class:`sim.load_chain.Landed`) its compute chain
(:mod:`sim.compute_chain`) runs the rest back to back, one fluid job per layer; with no
copy on the PCIe link and nothing but L3 transfers on the fluid server, each layer runs at
rate 1 (a solo rate: it changes no other job's) and starts as the one before finishes.
:class:`TailFold` computes those times with the server's float operations (a layer of
``w`` seconds starting at ``t`` finishes at ``t + w / 1.0``) and arms ONE timer, at the
last layer's finish, whose real finish then runs (the batch's sample follows, unfolded)::

    layer l starts (now)   l+1            ...            L-1          T_end
    |--------------------|-------------|  ...  |--------------------|  _finish(C)
      every start/finish splits the L3 jobs' progress (caught up as FluidServer.expect's)

    an outside entry (a copy joining or leaving, ...) at t < T_end:
        materialise(t): the rows of the layers done by t, the chain at the layer in
        flight, its job on the server (remaining = its work, split at the L3 changes
        absorbed since its start) with its due and a live timer; the fold is over

    an L3 transfer joining or leaving, or a re-plan (absorb): the layers stay at rate 1
        (no copy kernel beside them); the L3 jobs are charged at the starts up to t and
        the change time is kept

Invariant: after :meth:`TailFold.materialise` at t the server, the compute chain and the
timeline are what the unfolded run has after its events at t, bit for bit; only the order
among events at exactly one time may differ (the fingerprint checks). ``run.fold_layers:
false`` turns it off; ``SimRuntime.fold_counts`` counts ``tail_folded``, ``tail_layers`` and
``tail_interrupted``.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from sim.fluid import FluidJob
from sim.streams import call_at

if TYPE_CHECKING:
    from sim.compute_chain import ComputeChain

MIN_LAYERS = 2  # a shorter tail saves no event


class TailFold:
    """The layers of ``cc`` from its present one on (module doc); ``starts[i]``: when
    layer ``cc.layer + i`` starts, ``end`` when the last finishes."""

    __slots__ = ("cc", "first", "starts", "end", "charged", "changes")

    def __init__(self, cc: ComputeChain, starts: list[float], end: float) -> None:
        self.cc, self.first, self.starts, self.end = cc, cc.layer, starts, end
        self.charged = 0  # starts the server's jobs were charged at (absorb)
        self.changes: list[float] = []  # when the server's jobs changed (absorb)

    def begin(self) -> None:
        rt = self.cc.rt
        rt.fluid.folded = self
        env = rt.env
        call_at(env, self.end, self._ended)
        rt.fold_counts["tail_folded"] += 1

    def _ended(self, _ev: object) -> None:
        if self.cc.rt.fluid.folded is self:
            self.materialise(at_end=True)

    def absorb(self, job: FluidJob | None) -> bool:
        """An L3 transfer joining or leaving (or a re-plan: ``job`` None) leaves the
        layers at rate 1 (no copy kernel on the server: compute takes nothing an
        allocation shares), but splits the layer in flight's progress: the server's jobs
        (all L3 transfers) are charged at the starts up to now and the change is kept
        for :meth:`materialise`."""
        if job is not None and job.kind != "l3":
            return False
        rt = self.cc.rt
        now = rt.env.now
        if not now < self.end:
            return False
        n = bisect.bisect_right(self.starts, now)
        if n > self.charged:
            rt.fluid.charge_folded(self.starts[self.charged:n])
            self.charged = n
        self.changes.append(now)
        rt.fold_counts["tail_absorbed"] += 1
        return True

    def holds(self) -> bool:
        return True

    def materialise(self, at_end: bool = False) -> None:
        """The unfolded state after the events up to now; at the end, the last layer's
        finish runs here (its real finish)."""
        cc = self.cc
        rt = cc.rt
        fluid = rt.fluid
        fluid.folded = None
        now = rt.env.now
        starts = self.starts
        k = bisect.bisect_right(starts, now) - 1  # the layer in flight: started by now
        if not at_end:
            rt.fold_counts["tail_interrupted"] += 1
        # each start is the previous layer's finish: the changes that split the L3 jobs
        fluid.charge_folded(starts[self.charged:k + 1])  # (those before: by absorb)
        record, op, bid = rt.timeline.record, cc.op, cc.st.plan.batch_id
        first = self.first
        for i in range(k):
            record("compute", op, starts[i], starts[i + 1], batch=bid, layer=first + i)
        rt.fold_counts["tail_layers"] += k
        layer = first + k
        cc.layer = layer
        cc.t0 = starts[k]
        job = FluidJob(cc.times[layer], "compute", thread="compute")
        job.then = cc._layer_done
        job.rate = 1.0
        prev = starts[k]
        for t in self.changes:  # its progress split at the changes absorbed since it began
            if t > prev:  # (FluidServer._advance)
                job.remaining -= 1.0 * (t - prev)
                prev = t
        job.due = due = starts[k + 1] if k + 1 < len(starts) else self.end
        fluid._add(job)
        if at_end:
            rt.fold_counts["tail_layers"] += 1
            fluid._finish(job)
        else:
            fluid._arm(job, due)


def try_fold(cc: ComputeChain) -> bool:
    """Fold ``cc``'s layers from ``cc.layer`` on (its start: t0 set, no job yet) when
    all have landed and the server holds only L3 jobs (module doc)."""
    st = cc.st
    landed = st.landed
    times = cc.times
    n = len(times)
    layer = cc.layer
    if landed is None or landed.count < n or n - layer < MIN_LAYERS:
        return False
    rt = cc.rt
    fluid = rt.fluid
    if not fluid.fold_possible("compute"):
        return False
    if len(fluid.jobs) != fluid.kinds.get("l3", 0):
        return False  # a copy (or another compute job) on the server
    t = rt.env.now
    starts = [t]
    for i in range(layer, n):
        work = times[i]
        if not work > 0:
            return False  # a job of no work is never submitted: not this form
        t = t + work / 1.0  # its due at rate 1 (FluidServer._schedule)
        starts.append(t)
    end = starts.pop()
    TailFold(cc, starts, end).begin()
    return True
