"""Tail folding: a batch's compute from a point on, once nothing but its own jobs follow
(all its loads landed, or none), as one simulated event.

When every layer of a batch has landed (:class:`sim.load_chain.Landed`) its compute chain
(:mod:`sim.compute_chain`) runs the rest back to back, one fluid job per layer, then its
sample; a batch without loads (a decode step) runs its whole forward as one job, then its
sample. With no copy on the PCIe link and nothing but L3 transfers on the fluid server,
each of those jobs (a *segment*) runs at rate 1 (a solo rate: it changes no other job's)
and starts as the one before finishes. :class:`TailFold` computes those times with the
server's float operations (a segment of ``w`` seconds starting at ``t`` finishes at
``t + w / 1.0``) and arms ONE timer, at the last segment's finish, whose real finish then
runs (the batch's completion follows)::

    segment s starts (now)  s+1           ...     sample (last)       T_end
    |--------------------|-------------|  ...  |--------------------|  _finish(C)
      every start/finish splits the L3 jobs' progress (caught up as FluidServer.expect's)

    an outside entry (a copy joining or leaving, ...) at t < T_end:
        materialise(t): the rows of the segments done by t, the chain at the segment in
        flight, its job on the server (remaining = its work, split at the L3 changes
        absorbed since its start) with its due and a live timer; the fold is over

    an L3 transfer joining or leaving, or a re-plan (absorb): the segments stay at rate 1
        (no copy kernel beside them); the L3 jobs are charged at the starts up to t and
        the change time is kept

The segments: layers ``first`` .. L-1 (each ``ComputeChain._layer_done`` in its finish),
or the whole forward (``_forward_done``); then the sample (``_sampled``) when it takes
time and :data:`SAMPLE` is on (off: the sample follows unfolded, as before it was folded;
the tests twin the two).

Invariant: after :meth:`TailFold.materialise` at t the server, the compute chain and the
timeline are what the unfolded run has after its events at t, bit for bit; only the order
among events at exactly one time may differ (the fingerprint checks). ``run.fold_layers:
false`` turns it off; ``SimRuntime.fold_counts`` counts ``tail_folded``, ``tail_layers``,
``tail_forwards`` (whole forwards folded), ``tail_samples`` (samples folded) and
``tail_interrupted``.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from sim.fluid import FluidJob, compute_job
from sim.streams import call_exactly

if TYPE_CHECKING:
    from sim.compute_chain import ComputeChain

MIN_LAYERS = 2  # a tail of fewer segments saves no event
# fold the batch's sample into its tail, and a batch's whole forward (no loads) with its
# sample: twinned off in tests/sim/test_tail_sample.py
SAMPLE = True

# what a segment runs (TailFold.kinds)
_LAYER, _FORWARD, _SAMPLE = 0, 1, 2


class TailFold:
    """The segments of ``cc`` from its present one on (module doc); ``starts[i]``: when
    segment i starts, ``works[i]`` its work, ``kinds[i]`` what it runs, ``end`` when the
    last finishes. ``first``: the layer the first layer segment runs."""

    __slots__ = ("cc", "first", "starts", "end", "charged", "changes", "works", "kinds")

    def __init__(self, cc: ComputeChain, starts: list[float], end: float,
                 works: list[float], kinds: list[int]) -> None:
        self.cc, self.first, self.starts, self.end = cc, cc.layer, starts, end
        self.works, self.kinds = works, kinds
        self.charged = 0  # starts the server's jobs were charged at (absorb)
        self.changes: list[float] = []  # when the server's jobs changed (absorb)

    def begin(self) -> None:
        rt = self.cc.rt
        rt.fluid.folded = self
        env = rt.env
        call_exactly(env, self.end, self._ended)
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
        """The unfolded state after the events up to now; at the end, the last segment's
        finish runs here (its real finish)."""
        cc = self.cc
        rt = cc.rt
        fluid = rt.fluid
        fluid.folded = None
        now = rt.env.now
        starts, kinds = self.starts, self.kinds
        k = bisect.bisect_right(starts, now) - 1  # the segment in flight: started by now
        counts = rt.fold_counts
        if not at_end:
            counts["tail_interrupted"] += 1
        # each start is the previous segment's finish: the changes that split the L3 jobs
        fluid.charge_folded(starts[self.charged:k + 1])  # (those before: by absorb)
        record, op, bid = rt.timeline.record, cc.op, cc.st.plan.batch_id
        first = self.first
        layers = 0
        for i in range(k):  # (the sample is last: never done before one in flight)
            if kinds[i] == _LAYER:
                record("compute", op, starts[i], starts[i + 1], batch=bid, layer=first + i)
                layers += 1
            else:  # the whole forward (_forward_done)
                record("compute", op, starts[i], starts[i + 1], batch=bid)
                cc.start_t = starts[i]
                counts["tail_forwards"] += 1
        counts["tail_layers"] += layers
        kind = kinds[k]
        cc.t0 = starts[k]
        if kind == _LAYER:
            cc.layer = first + k
            job = compute_job(self.works[k], "compute")
            job.then = cc._layer_done
        elif kind == _FORWARD:
            job = compute_job(self.works[k])
            job.then = cc._forward_done
        else:
            cc.layer = first + layers  # past the last layer (0: after a whole forward)
            job = compute_job(self.works[k], "compute")
            job.then = cc._sampled
        job.rate = 1.0
        prev = starts[k]
        for t in self.changes:  # its progress split at the changes absorbed since it began
            if t > prev:  # (FluidServer._advance)
                job.remaining -= 1.0 * (t - prev)
                prev = t
        job.due = due = starts[k + 1] if k + 1 < len(starts) else self.end
        fluid._add(job)
        if at_end:
            counts[_COUNTED[kind]] += 1
            fluid._finish(job)
        else:
            fluid._arm(job, due)


_COUNTED = ("tail_layers", "tail_forwards", "tail_samples")


def _steady(cc: ComputeChain) -> bool:
    """The server holds only L3 jobs and takes a compute fold now."""
    fluid = cc.rt.fluid
    return len(fluid.jobs) == fluid.kinds.get("l3", 0) and fluid.fold_possible("compute")


def _sample(cc: ComputeChain) -> float:
    """The batch's sample time when the fold takes it (0: it follows unfolded)."""
    if not SAMPLE:
        return 0.0
    sample = cc.sample_seconds()
    return sample if sample > 0 else 0.0


def try_fold(cc: ComputeChain) -> bool:
    """Fold ``cc``'s layers from ``cc.layer`` on (its start: t0 set, no job yet), and its
    sample, when all have landed and the server holds only L3 jobs (module doc)."""
    st = cc.st
    landed = st.landed
    times = cc.times
    n = len(times)
    layer = cc.layer
    if landed is None or landed.count < n or not _steady(cc):
        return False
    sample = _sample(cc)
    if n - layer + (sample > 0) < MIN_LAYERS:
        return False
    t = cc.rt.env.now
    starts = [t]
    for i in range(layer, n):
        work = times[i]
        if not work > 0:
            return False  # a job of no work is never submitted: not this form
        t = t + work / 1.0  # its due at rate 1 (FluidServer._schedule)
        starts.append(t)
    works = list(times[layer:])
    kinds = [_LAYER] * (n - layer)
    if sample > 0:
        t = t + sample / 1.0
        starts.append(t)
        works.append(sample)
        kinds.append(_SAMPLE)
    end = starts.pop()
    TailFold(cc, starts, end, works, kinds).begin()
    return True


def try_fold_forward(cc: ComputeChain, work: float) -> bool:
    """Fold a batch's whole forward (``work`` seconds from now: a batch with no loads,
    ``cc.t0`` set, no job yet) and its sample when the server holds only L3 jobs."""
    if not work > 0:
        return False  # a job of no work is never submitted: not this form
    rt = cc.rt
    if not cc.st.backups and not rt.streams["d2h"].idle():
        return False  # an earlier batch's backup starts now: its kernel would end the fold
    sample = _sample(cc)
    if not sample > 0 or not _steady(cc):
        return False
    t = rt.env.now
    mid = t + work / 1.0  # the forward's due at rate 1 (FluidServer._schedule)
    TailFold(cc, [t, mid], mid + sample / 1.0, [work, sample], [_FORWARD, _SAMPLE]).begin()
    return True
