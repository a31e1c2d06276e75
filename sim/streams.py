"""CUDA-stream-like ordered queues in simulated time.

Invariant: ops on one stream run one after another in submission order; an op may also
wait on events of other streams (like cudaStreamWaitEvent) before it starts. An op is a
generator function; its process is the op's completion event. Ops run by callbacks
(:meth:`Stream.submit_chain`) start in the very order a process would start, and
:func:`call_at` queues a timer exactly where ``env.timeout`` would: what runs, when and
in which order is unchanged; only SimPy work is saved (a kick, a Timeout's set-up).
:func:`first_of` (the fold's and the driver's waits) is ``env.any_of`` without the
condition's value, likewise.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from heapq import heappush
from typing import Any

import simpy
from simpy.events import NORMAL, PENDING, URGENT, Condition

from sim.simtime import exact_delay

OpBody = Callable[[], Generator[simpy.Event, Any, Any]]
# submit_chain appends ``start`` to a running op's callbacks at once, when the kick would
# be the next event and append it there (False: always the kick; tests twin the two)
DIRECT = True
_new_event = simpy.Event.__new__


def after(event: simpy.Event, step: Callable[[simpy.Event], None]) -> None:
    """Run ``step(event)`` when ``event`` is processed (now, if it already is): what a
    process's ``yield event`` does, for an op run by callbacks."""
    if event.callbacks is not None:
        event.callbacks.append(step)
    else:
        step(event)


def call_at(env: simpy.Environment, at: float, callback: Callable[[simpy.Event], None]
            ) -> None:
    """``env.timeout(exact_delay(env.now, at)).callbacks.append(callback)``, for about
    two thirds of its cost: an event triggered ok, queued as that timeout is (at ``now +
    delay``: ``at``, or where exact_delay's delay lands when no delay reaches ``at``;
    normal priority; the next id), with ``callback`` its one callback. Nothing else can
    wait on it: it is not returned."""
    event = _new_event(simpy.Event)
    event.callbacks, event._ok, event._value = [callback], True, None
    queue_at(env, at, event)


def call_exactly(env: simpy.Environment, at: float,
                 callback: Callable[[simpy.Event], None]) -> None:
    """:func:`call_at`'s event queued at ``at`` itself, also where no delay from now lands
    on it (``now`` with finer bits than ``at``: every ``now + delay`` near it rounds to
    even, so :func:`queue_time` lands one ulp before). For a fold's own timer, armed long
    before the event it stands for, which the unfolded run has at ``at`` exactly: a job's
    finish at its due (:meth:`sim.fluid.FluidServer._fire` waits on from an early timer),
    a launch a timeout after the landing."""
    if at < env._now:  # type: ignore[attr-defined]
        raise ValueError(f"time {at!r} is before now ({env.now!r})")
    event = _new_event(simpy.Event)
    event.callbacks, event._ok, event._value = [callback], True, None
    heappush(env._queue, (at, NORMAL, next(env._eid), event))  # type: ignore[attr-defined]


def pending(env: simpy.Environment) -> simpy.Event:
    """``env.event()``: a new event, not triggered (its ``env`` and empty ``callbacks``
    set as ``Event.__init__`` sets them; its value is the class's ``PENDING``), without
    the bound class's call and ``__init__``'s."""
    event = _new_event(simpy.Event)
    event.env, event.callbacks = env, []
    return event


def fire(env: simpy.Environment, event: simpy.Event) -> None:
    """``event.succeed()`` of an event its caller knows is pending (made by it, fired only
    here): triggered ok with no value and scheduled now, normal priority, the next id,
    as ``succeed`` schedules it (without its test and ``env.schedule``'s call)."""
    event._ok, event._value = True, None
    heappush(env._queue, (env._now, NORMAL, next(env._eid), event))  # type: ignore[attr-defined]


def timer(env: simpy.Environment, delay: float) -> simpy.Event:
    """What ``env.timeout(delay)`` is to a process that yields it (an event triggered ok,
    value None, queued at ``now + delay``, normal priority, the next id), without the
    Timeout's set-up: a plain event queued as it would be."""
    if delay < 0:
        raise ValueError(f"Negative delay {delay}")
    event = _new_event(simpy.Event)
    event.env, event.callbacks, event._ok, event._value = env, [], True, None
    heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), event))  # type: ignore[attr-defined]
    return event


def queue_at(env: simpy.Environment, at: float, event: Any) -> float:
    """Queue ``event`` (triggered ok: what ``Environment.step`` reads of it, its
    ``callbacks`` and ``_ok``, are set) as ``env.timeout(exact_delay(env.now, at))`` is
    queued (at ``at``, or where exact_delay's delay lands when no delay reaches it; normal
    priority; the next id): :func:`call_at`'s event, or a timer that needs no
    :class:`simpy.Event` (sim.fluid's, which carry their job). Returns the time it is
    queued at (:func:`queue_time`'s, in line: a call less per timer)."""
    now = env._now  # type: ignore[attr-defined]
    key = now + (at - now)  # exact_delay's first try, which it keeps when it lands
    if key != at or at < now:
        key = now + exact_delay(now, at)  # (it raises for a time before now)
    heappush(env._queue, (key, NORMAL, next(env._eid), event))  # type: ignore[attr-defined]
    return key


def queue_time(now: float, at: float) -> float:
    """Where ``env.timeout(exact_delay(now, at))`` lands in the queue at ``now``: ``at``,
    or the time exact_delay's delay reaches when no delay lands on ``at`` exactly."""
    key = now + (at - now)  # exact_delay's first try, which it keeps when it lands
    if key != at or at < now:
        key = now + exact_delay(now, at)  # (it raises for a time before now)
    return key


def first_of(env: simpy.Environment, events: tuple[simpy.Event, ...]) -> simpy.Event:
    """``env.any_of(events)`` without its value (for a wait that never reads it: the
    fold's, the driver's): an event scheduled at the same moment and place in the queue
    (when the first of ``events`` is processed, or at once for one processed already:
    one event scheduled, as the condition), failing as it does, whose processing first
    takes its checks off the other events, as the condition's does, then resumes the
    waiting process. A nested condition among ``events``: ``env.any_of`` itself (its
    checks come off recursively)."""
    for ev in events:
        if isinstance(ev, Condition):
            return env.any_of(list(events))
    out = pending(env)

    def check(ev: simpy.Event) -> None:
        if out._value is not PENDING:  # (``triggered``)
            return
        if ev._ok:
            fire(env, out)
        else:
            ev.defused = True
            out.fail(ev.value)

    def unhook(_: simpy.Event) -> None:
        for ev in events:
            callbacks = ev.callbacks
            if callbacks and check in callbacks:
                callbacks.remove(check)

    for ev in events:
        if ev.callbacks is None:  # processed already
            check(ev)
        else:
            ev.callbacks.append(check)
    out.callbacks.append(unhook)  # type: ignore[union-attr]
    return out


class Stream:
    def __init__(self, env: simpy.Environment, name: str) -> None:
        self.env, self.name = env, name
        self.tail: simpy.Event = env.event().succeed()

    def submit(self, body: OpBody, waits: Iterable[simpy.Event] = ()) -> simpy.Process:
        """Enqueue ``body`` after everything already on this stream and after ``waits``."""
        proc = self.env.process(self._run(self.tail, tuple(waits), body))
        self.tail = proc
        return proc

    def _run(self, prev: simpy.Event, waits: tuple[simpy.Event, ...],
             body: OpBody) -> Generator[simpy.Event, Any, Any]:
        yield prev
        if len(waits) == 1:  # the event itself: one SimPy event less than all_of's
            yield waits[0]
        elif waits:
            yield self.env.all_of(waits)
        return (yield from body())

    def submit_chain(self, start: Callable[[simpy.Event], None], done: simpy.Event
                     ) -> simpy.Event:
        """Enqueue an op run by callbacks: ``start`` is called when a process submitted
        here would start its body (its initialization, then the op before it), and the
        op ends when it fires ``done`` (the new tail). Same event order as :meth:`submit`
        with no ``waits``.

        The kick (what simpy's Initialize is: an urgent event now) only appends ``start``
        to the op before's callbacks when that op is still running. With ``DIRECT`` that
        is done here, with no kick, when nothing can come between: the op before is not
        processed, and no urgent event is queued at this instant, so the kick would be
        the next event processed (an event scheduled later gets a later id; the op
        before, not yet processed, cannot be processed first: only urgent events precede
        the kick and a finished op is scheduled normal). Until then only the submitter's
        own step runs (the driver's process: prepare_batch, execute_batch), and it cannot
        wait on the op before: that event is no longer this stream's tail, and what else
        holds it (a process's ``waits``) appends only when an event resumes it. So
        ``start`` lands at the very place in those callbacks the kick would put it."""
        env, prev = self.env, self.tail
        if DIRECT and prev.callbacks is not None:
            queue = env._queue
            if not queue or queue[0][1] != URGENT or queue[0][0] != env._now:
                prev.callbacks.append(start)
                self.tail = done
                return done
        kick = env.event()  # what simpy's Initialize is: triggered, scheduled urgent
        kick._ok, kick._value = True, None
        env.schedule(kick, URGENT)
        kick.callbacks.append(lambda _ev: after(prev, start))  # type: ignore[union-attr]
        self.tail = done
        return done

    def idle(self) -> bool:
        """The last op submitted ended: its event was processed (``processed``, read as
        that property reads it)."""
        return self.tail.callbacks is None
