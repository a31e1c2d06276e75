"""Ops nobody waits on (the runtime's L3 stores and prefetches), run as a
:class:`simpy.Process` runs them, less the Process's own events.

:func:`spawn` drives a generator of SimPy events. Its contract, each point what
``env.process(gen)`` does, but the last three:

- the first step runs in an event queued where the Process's ``Initialize`` is queued
  (urgent, now, the next id), so it runs in the same place among all other events;
- each step yields an event; the generator resumes with that event's value (its
  exception thrown in, the event defused, when it failed) from a callback appended to
  the event's callbacks when it yields, in the very place a Process's resume would take;
  an event processed already resumes it at once, in a loop;
- its end schedules nothing. A Process's end schedules the Process (normal, now) and,
  when no callback waits on it and it ended ok, processing it does nothing. Nobody holds
  what :func:`spawn` returns (nothing), so no callback can ever wait on it; dropping that
  event takes one id, the same one, from every event scheduled after it, so the order
  among all other events (time, priority, id) is unchanged;
- a generator that raises raises at once out of the event being processed, where the
  Process's failure would crash the run one event later, at the same simulated time;
- ``env.active_process`` stays None while it runs (nothing these ops call reads it).

Twinned against ``env.process`` on random programs in ``tests/sim/test_detached.py``.
"""

from __future__ import annotations

from collections.abc import Generator
from heapq import heappush
from typing import Any

import simpy
from simpy.events import URGENT

_new_event = simpy.Event.__new__
# the runtime's stores and prefetches run by :func:`spawn` (False: by ``env.process``;
# tests twin the two)
ON = True


def start(env: simpy.Environment, gen: Generator[simpy.Event, Any, Any]) -> None:
    """Start ``gen``, an op nobody waits on: :func:`spawn` when :data:`ON`, else a
    Process."""
    if ON:
        spawn(env, gen)
    else:
        env.process(gen)


def spawn(env: simpy.Environment, gen: Generator[simpy.Event, Any, Any]) -> None:
    """Run ``gen`` as ``env.process(gen)`` would, with no Process (module doc)."""
    first = _new_event(simpy.Event)  # what Initialize is: triggered ok, urgent, now
    first.env, first.callbacks, first._ok, first._value = env, [_Op(gen).resume], True, None
    heappush(env._queue, (env._now, URGENT, next(env._eid), first))  # type: ignore[attr-defined]


class _Op:
    """A spawned generator. No reference cycle (the bound ``resume`` is made per wait, held
    only by the event waited on), so a finished op is freed at once, not by the
    collector."""

    __slots__ = ("gen",)

    def __init__(self, gen: Generator[simpy.Event, Any, Any]) -> None:
        self.gen = gen

    def resume(self, event: Any) -> None:
        """Process._resume's loop, less ``active_process`` and the end's event."""
        gen = self.gen
        while True:
            try:
                if event._ok:
                    event = gen.send(event._value)
                else:  # as Process._resume: an exclusive copy of the failure
                    event._defused = True
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    event = gen.throw(exc)
            except StopIteration:
                return
            callbacks = event.callbacks
            if callbacks is not None:
                callbacks.append(self.resume)
                return
