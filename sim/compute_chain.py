"""A batch's compute as a chain of callbacks, not a process (no host lane modelled).

:func:`sim.ops.compute_op` waits, per layer, for the layer's load event and then runs the
layer as a fluid job (or the whole forward as one job), then sampling, then posts the
batch's completion. With no host lane (no launch events, no hand-off gaps, no
interpreter lock) every wait is on an event the process would have waited on, so the
same steps run here as callbacks on those events::

    [loads landed, layerwise=False] -> layer 0: [layer landed] -> job -> row -> layer 1
      ... -> sample job -> row -> completion -> ``done`` (the compute stream's tail)

Invariant: the same float operations at the same simulated times as the process, so
every time is bit-identical. A layer waits for its loads' event (loads run by
:func:`sim.ops.load_op`) or is started by the load chain itself (:class:`sim.load_chain.
Landed`), and a job's continuation runs in its finish, not one ``done`` event later:
that changes only the order among events at exactly the same simulated time
(``benchmarks/sim_fingerprint.py`` checks every shipped scenario stays the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from sim import tail_fold
from sim.batch import BatchState, build_completion
from sim.fluid import compute_job
from sim.streams import after, fire

if TYPE_CHECKING:
    from sim.runtime import SimRuntime

Step = Callable[[simpy.Event], None]


def chain_possible(rt: SimRuntime) -> bool:
    """Compute ops wait for nothing the host lane or the interpreter lock decides."""
    return not rt.host_lane.active and not rt.interpreter


class ComputeChain:
    """Runs ``st``'s compute; ``done`` fires as compute_op's process would have ended."""

    __slots__ = ("rt", "st", "done", "times", "op", "layer", "t0", "start_t")

    def __init__(self, rt: SimRuntime, st: BatchState, done: simpy.Event) -> None:
        self.rt, self.st, self.done = rt, st, done
        self.times: tuple[float, ...] = ()
        self.op = ""
        self.layer = 0
        self.t0 = self.start_t = 0.0

    def start(self, _ev: object = None) -> None:
        rt, st = self.rt, self.st
        self.start_t = rt.env._now
        if not (st.prefills or st.decodes):
            self._after_loads(self._complete)  # a plan without slices: after its loads
            return
        times = rt.cost.batch_layer_times(st.prefills, st.decodes)
        if st.extra_s:  # HBM copies of recurrent state, charged before the first layer
            times = (times[0] + st.extra_s, *times[1:])
        self.times = times
        self.op = "prefill" if st.prefills else "decode"
        if not rt.layerwise:
            self._after_loads(self._forward)  # every load lands before layer 0
        else:
            self._forward(None)

    def _after_loads(self, step: Step) -> None:
        """``step`` once all the batch's loads landed (now, if it loads nothing)."""
        st = self.st
        if st.landed is not None:
            st.landed.wait(self.rt.model.num_layers - 1, lambda: step(None))
        elif st.loads_done is not None:
            after(st.loads_done, step)
        else:
            step(None)

    def _forward(self, _ev: object) -> None:
        rt, st = self.rt, self.st
        loads = st.layer_events is not None or st.landed is not None
        if rt.trace_layers or (loads and rt.layerwise):
            self.layer = 0
            self._layer_ready(None)
            return
        self.t0 = rt.env._now
        work = sum(self.times)
        if rt.fold_layers and tail_fold.try_fold_forward(self, work):
            return  # the forward and its sample run folded (sim.tail_fold)
        self._job(work, self._forward_done)

    def _job(self, seconds: float, then: Callable[[], None], thread: str = "") -> None:
        """A compute job of ``seconds``; ``then()`` runs in its finish."""
        self.rt.fluid.then_submit(compute_job(seconds, thread), then)

    def _forward_done(self, _ev: object = None) -> None:
        rt = self.rt
        rt.timeline.record("compute", self.op, self.t0, rt.env._now, batch=self.st.plan.batch_id)
        self.start_t = self.t0
        self._sample()

    def _layer_ready(self, _ev: object) -> None:
        """Layer ``self.layer`` may start once its load landed (its event processed)."""
        st = self.st
        if st.landed is not None and self.rt.layerwise:
            st.landed.wait(self.layer, self._layer_start)
            return
        if st.layer_events is not None and self.rt.layerwise:
            after(st.layer_events[self.layer], self._layer_start)
            return
        self._layer_start(None)

    def _layer_start(self, _ev: object = None) -> None:
        self.t0 = self.rt.env._now
        if self.layer == 0:
            self.start_t = self.t0
        if self.rt.fold_layers and tail_fold.try_fold(self):
            return  # the rest runs folded (sim.tail_fold)
        self._job(self.times[self.layer], self._layer_done, "compute")

    def _layer_done(self, _ev: object = None) -> None:
        rt = self.rt
        rt.timeline.record("compute", self.op, self.t0, rt.env._now,
                           batch=self.st.plan.batch_id, layer=self.layer)
        self.layer += 1
        if self.layer < len(self.times):
            self._layer_ready(None)
        else:
            self._sample()

    def sample_seconds(self) -> float:
        """The batch's sample (one token per request in it) at rate 1."""
        st = self.st
        return self.rt.cost.sample_time(len(st.prefills) + len(st.decodes))

    def _sample(self) -> None:
        sample = self.sample_seconds()
        if sample > 0:
            self.t0 = self.rt.env._now
            self._job(sample, self._sampled, "compute")
        else:
            self._complete(None)

    def _sampled(self, _ev: object = None) -> None:
        rt = self.rt
        rt.timeline.record("compute", "sample", self.t0, rt.env._now,
                           batch=self.st.plan.batch_id, layer=-1)
        self._complete(None)

    def _complete(self, _ev: object) -> None:
        """Post the completion and end the op. ``done`` is scheduled first: what waits on
        it (the stream's next op, a backup) runs before the driver wakes, so a cache-only
        plan right behind completes in the same wake-up (sim.driver)."""
        rt, st = self.rt, self.st
        fire(rt.env, self.done)  # (made pending by execute_batch, fired only here)
        if st.generation == rt.generation:
            rt.complete(build_completion(st.plan.batch_id, self.start_t, rt.env._now,
                                         st.finished))
