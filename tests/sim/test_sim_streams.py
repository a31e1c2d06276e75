"""Stream ordering (the L3 store and its clients: tests/sim/test_sim_l3.py)."""

from __future__ import annotations

import pytest
import simpy
from simpy.events import AnyOf

from sim.streams import Stream, first_of


def _logging_op(env, log):  # noqa: ANN001, ANN202
    """op(name, dt): a body that takes ``dt`` and logs (name, its end)."""
    def op(name, dt):  # noqa: ANN001, ANN202
        def body():  # noqa: ANN202
            yield env.timeout(dt)
            log.append((name, env.now))
        return body
    return op


def test_stream_ops_run_in_order_and_can_wait_on_other_streams(env) -> None:
    compute, d2h = Stream(env, "compute"), Stream(env, "d2h")
    log = []
    op = _logging_op(env, log)
    c1 = compute.submit(op("c1", 3))
    compute.submit(op("c2", 1))
    d2h.submit(op("backup", 1), waits=(c1,))  # like cudaStreamWaitEvent on c1's event
    env.run()
    assert log == [("c1", 3), ("c2", 4), ("backup", 4)]
    assert compute.idle() and d2h.idle()


def test_an_op_waits_for_every_event_it_names(env) -> None:
    """One wait or several (all of them), fired before the op's turn or after."""
    a, b, c = Stream(env, "a"), Stream(env, "b"), Stream(env, "c")
    log = []
    op = _logging_op(env, log)
    a1 = a.submit(op("a1", 2))
    b1 = b.submit(op("b1", 5))
    c.submit(op("c1", 6))
    c.submit(op("both", 1), waits=(a1, b1))  # c1 ends last: both fired before its turn
    c.submit(op("one", 1), waits=(b.submit(op("b2", 4)),))  # b2 ends at 9, after "both"
    env.run()
    assert sorted(log, key=lambda x: (x[1], x[0])) == [
        ("a1", 2), ("b1", 5), ("c1", 6), ("both", 7), ("b2", 9), ("one", 10)]


def _wait_order(shortcut: bool, pattern: list[tuple[str, float]]) -> list:
    """A process waits on the first of a timer and a plain event, or on the event alone
    (``first_of`` with ``shortcut``, else ``env.any_of``), beside other processes that act
    at the same moments; returns the log of who ran when (the queue's order at equal times), the
    events' callbacks left after each wait and the run's event count."""
    env = simpy.Environment()
    log: list = []
    gate = env.event()

    def waiter():  # noqa: ANN202
        for kind, at in pattern:
            timer = env.timeout(at)
            ev = gate if kind.startswith("gate") else env.event()
            if kind == "done":  # processed already when the wait begins
                ev.succeed()
                yield env.timeout(0)
            events = (ev,) if kind == "gate1" else (timer, ev)
            yield first_of(env, events) if shortcut else env.any_of(list(events))
            log.append(("waiter", env.now, [len(e.callbacks or ()) for e in events]))

    def other(name: str, at: float):  # noqa: ANN202
        yield env.timeout(at)
        log.append((name, env.now))
        if name == "opener" and not gate.triggered:
            gate.succeed()
        yield env.timeout(0)
        log.append((name + "+0", env.now))

    env.process(waiter())
    for name, at in (("opener", 0.5), ("a", 0.5), ("b", 1.0), ("c", 1.5)):
        env.process(other(name, at))
    env.run()
    return [log, next(env._eid)]


@pytest.mark.parametrize("pattern", [
    [("gate", 1.0), ("plain", 0.5)],  # the gate opens before the timer, then a timer alone
    [("plain", 0.5), ("gate", 0.5)],  # the gate opens with the timer due at once
    [("done", 1.0), ("plain", 0.0)],  # processed already; a timer of 0
    [("gate1", 0.0), ("plain", 0.2)],  # the gate alone (a hop after it), then a timer
])
def test_first_of_resumes_as_any_of_does(pattern: list[tuple[str, float]]) -> None:
    """``first_of`` (the fold's and the driver's waits) resumes the process at the same
    moment and place in the queue as ``env.any_of`` (one event scheduled, when the first
    is processed), and leaves the other events' callbacks as the condition does (its
    checks taken off)."""
    assert _wait_order(True, pattern) == _wait_order(False, pattern)


def test_first_of_fails_as_any_of_does() -> None:
    for shortcut in (True, False):
        env = simpy.Environment()
        bad = env.event()
        caught = []

        def waiter():  # noqa: ANN202
            try:
                yield (first_of(env, (env.timeout(1), bad)) if shortcut  # noqa: B023
                       else env.any_of([env.timeout(1), bad]))  # noqa: B023
            except KeyError as e:
                caught.append((env.now, e.args))  # noqa: B023

        env.process(waiter())
        bad.fail(KeyError("x"))
        env.run()
        assert caught == [(0, ("x",))]



def test_first_of_a_condition_is_any_of(env: simpy.Environment) -> None:
    """A condition among the events (the driver's wait on a shared runtime): the
    condition itself, whose processing takes the nested checks off too."""
    inner = env.any_of([env.event(), env.event()])
    wait = first_of(env, (inner, env.timeout(1)))
    assert isinstance(wait, AnyOf)
    env.run()
    assert wait.processed and not inner.triggered
    assert all(not e.callbacks for e in inner._events)  # noqa: SLF001
