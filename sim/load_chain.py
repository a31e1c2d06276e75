"""A batch's layer-wise loads as a chain of callbacks, not a process (the common case).

:func:`sim.ops.load_op` runs a batch's load groups one after another on the h2d stream,
each a copy kernel (``call_overhead_s``, then its bytes as a fluid job) followed by its
layers' events. With no host lane modelled and SGLang's copy kernel (``sm_zero_copy``)
nothing can make a group wait but its own copy, so the same steps run here as callbacks
on the very events the process would have waited on::

    group g:  [overhead timeout] -> submit the fluid job -> job finishes: rows, its
              layers landed (:class:`Landed`: the waiting compute goes on at once),
              group g + 1                            ...     last group: ``done``

Invariant: the same float operations at the same simulated times as the process, so
every time is bit-identical. Two steps run in the finish itself rather than one event
later (the job's ``done`` event, then each layer's event): what is saved is two SimPy
events and two generator resumptions per layer. That changes only the order among
events at exactly the same simulated time; ``benchmarks/sim_fingerprint.py`` checks
that every shipped scenario's results stay the same.

Before a group's layers land, the next kernel's launch (now + the overhead, the very
time its timer gets) is promised to the fluid server (:meth:`sim.fluid.FluidServer.
promise`): the compute layer the landing starts needs no timer of its own until that
launch slows it (:mod:`sim.fluid`, planned compute timers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from sim import chain_fold
from sim.batch import BatchState
from sim.fluid import FluidJob
from sim.streams import call_at

if TYPE_CHECKING:
    from sim.runtime import SimRuntime

KERNEL = frozenset({"kernel"})


def chain_possible(rt: SimRuntime) -> bool:
    """No host lane (a group never waits for its issue) and loads as one copy kernel."""
    return (not rt.host_lane.active and rt.copies.io_backend == "kernel"
            and not rt.copies.gather)


class Landed:
    """How many of a batch's layers its loads have put on the device (the chained form of
    ``BatchState.layer_events``: groups land in layer order). One waiter at a time: the
    batch's compute, waiting for the next layer it needs."""

    __slots__ = ("count", "at", "waiter", "fold")

    def __init__(self) -> None:
        self.count = 0
        self.at = -1
        self.waiter: Callable[[], None] | None = None
        self.fold: chain_fold.ChainFold | None = None  # folded: count is behind

    def wait(self, layer: int, then: Callable[[], None]) -> None:
        """Call ``then()`` once layer ``layer`` landed (now, if it has)."""
        if self.fold is not None:
            self.fold.materialise()
        if layer < self.count:
            then()
        else:
            self.at, self.waiter = layer, then

    def land(self, upto: int) -> None:
        """Layers below ``upto`` are on the device: wake the waiter if it waits for one."""
        self.count = upto
        if self.waiter is not None and self.at < upto:
            then, self.waiter = self.waiter, None
            then()


class LoadChain:
    """Runs ``st``'s load groups; ``done`` (the h2d stream's tail) fires as the load
    process would have ended. Start it with :meth:`start` once the stream lets it."""

    __slots__ = ("rt", "st", "done", "g", "t0", "start_t")

    def __init__(self, rt: SimRuntime, st: BatchState, done: simpy.Event) -> None:
        self.rt, self.st, self.done = rt, st, done
        self.g = 0
        self.t0 = self.start_t = 0.0

    def start(self, _ev: object = None) -> None:
        self._next()

    def _next(self) -> None:
        """Groups without bytes release their layers at once; the first with bytes
        starts its kernel's launch overhead; after the last, ``done``."""
        rt, st = self.rt, self.st
        groups = st.load_groups
        landed = st.landed
        assert landed is not None
        while self.g < len(groups):
            group = groups[self.g]
            if group.nbytes:
                self.t0 = rt.env.now
                if rt.fold_layers and chain_fold.try_fold(self):
                    return  # the fold runs its groups (sim.chain_fold)
                env = rt.env
                call_at(env, env.now + rt.copies.overhead, self._launched)  # timeout's
                return
            landed.land(group.layers.stop)
            self.g += 1
        self.done.succeed()

    def _launched(self, _ev: simpy.Event) -> None:
        rt = self.rt
        self.start_t = rt.env.now
        rt.fluid.kept()
        group = self.st.load_groups[self.g]
        rt.fluid.then_submit(FluidJob(group.nbytes, "h2d", None, KERNEL), self._moved)

    def _moved(self) -> None:
        rt, st = self.rt, self.st
        group = st.load_groups[self.g]
        rt.link.moved["h2d"] += group.nbytes
        end = rt.env.now
        bid = st.plan.batch_id
        layer = group.layers.start if len(group.layers) == 1 else -1
        rt.timeline.record("h2d", "load", self.t0, end, batch=bid, layer=layer,
                           nbytes=group.nbytes)
        rt.timeline.record("pcie:h2d", "load", self.start_t, end, batch=bid, layer=layer,
                           nbytes=group.nbytes)
        assert st.landed is not None
        self.g += 1
        assert st.load_steps is not None  # (prepare sets it with load_groups)
        if self.g <= st.load_steps[2]:  # a next launch
            rt.fluid.promise(end + rt.copies.overhead, 1.0 - rt.link.slowdown)
        st.landed.land(group.layers.stop)  # the batch's compute may go on at once
        self._next()
