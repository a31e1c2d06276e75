"""The per-batch SimPy shortcuts of :mod:`sim.streams` (``timer``, ``pending``, ``fire``)
run a program exactly as ``env.timeout``, ``env.event`` and ``succeed`` do: random
programs of processes that wait on timers and on events others fire, twinned with the
shortcuts on and off, log the same steps at the same times in the same order (the
queue's order at equal times) and schedule as many events (the same ids)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.streams import fire, pending, timer

# a process's steps: ("t", delay) waits a timer, ("w", k) waits event k (made by the
# first process to name it), ("f", k) fires event k if it is still pending
steps = st.lists(st.one_of(
    st.tuples(st.just("t"), st.sampled_from([0.0, 0.25, 0.5, 1.0, 1e-9])),
    st.tuples(st.just("w"), st.integers(0, 3)),
    st.tuples(st.just("f"), st.integers(0, 3))), max_size=8)


def _run(shortcut: bool, programs: list[list[tuple[str, float]]]) -> tuple:
    env = simpy.Environment()
    log: list = []
    events: dict[int, simpy.Event] = {}

    def event(k: int) -> simpy.Event:
        if k not in events:
            events[k] = pending(env) if shortcut else env.event()
        return events[k]

    def proc(name: int, program: list[tuple[str, float]]):  # noqa: ANN202
        for i, (op, arg) in enumerate(program):
            if op == "t":
                value = yield (timer(env, arg) if shortcut else env.timeout(arg))
            elif op == "w":
                value = yield event(int(arg))
            else:
                ev = event(int(arg))
                if not ev.triggered:
                    fire(env, ev) if shortcut else ev.succeed()
                value = "fired"
            log.append((name, i, env.now, value))

    for name, program in enumerate(programs):
        env.process(proc(name, program))
    env.run()
    # events nobody fired: fire them now, so every waiter ends (then run again)
    for ev in events.values():
        if not ev.triggered:
            fire(env, ev) if shortcut else ev.succeed()
    env.run()
    return log, next(env._eid), env.now


@settings(max_examples=200, deadline=None)
@given(programs=st.lists(steps, min_size=1, max_size=5))
def test_shortcuts_run_a_program_as_simpy_does(programs) -> None:
    assert _run(True, programs) == _run(False, programs)


def test_a_timer_is_a_timeout_in_the_queue() -> None:
    """Queued where ``env.timeout`` queues (time, priority, next id), triggered ok with
    value None; a negative delay is refused as Timeout refuses it."""
    env = simpy.Environment()
    env.timeout(0.5)
    ev = timer(env, 0.25)
    key = env._queue[-1] if env._queue[-1][3] is ev else env._queue[0]
    assert key[:3] == (0.25, 1, 1) and ev.triggered and ev.ok and ev.value is None
    with pytest.raises(ValueError, match="Negative delay"):
        timer(env, -1.0)
    made = pending(env)
    assert not made.triggered and made.callbacks == [] and made.env is env
    fire(env, made)
    assert made.triggered and made.ok and env._queue[0][:3] == (0.0, 1, 2)
