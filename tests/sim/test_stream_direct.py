"""Chained ops without their kick (sim.streams ``DIRECT``): ``submit_chain`` appends the
op's start to the op before at once when the kick would be the next event. Random stream
programs (chained ops, processes waiting on other streams, processes started at the same
instant, ends at tied times) log the same steps in the same order with and without; so do
simulated runs, bit for bit, with fewer SimPy events. ``call_at`` queues its event where
``env.timeout(exact_delay(now, at))`` queues the timeout, so callbacks run in the same
order at the same times."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from simtoys import twin_run_events_saved

import sim.streams as streams
from sim.simtime import exact_delay
from sim.streams import Stream, call_at, queue_at

NAMES = ("compute", "h2d", "d2h")

# one op: (kind, stream, duration, the stream a process waits on (-1: none), what a
# chained op's end starts beside)
_action = st.tuples(st.sampled_from(["chain", "chain", "proc", "spawn"]),
                    st.integers(0, 2), st.integers(0, 2), st.integers(-1, 2),
                    st.sampled_from(["none", "spawn", "timeout"]))
# steps at few distinct times, so that many fall on the same instant
_program = st.lists(st.tuples(st.integers(0, 3), st.lists(_action, min_size=1, max_size=4)),
                    min_size=1, max_size=8)


def _run(program: list[tuple[int, list[tuple[str, int, int, int, str]]]], direct: bool,
         monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, float]], int]:
    """Run ``program`` (steps at times, each submitting ops); the log of every op's start
    and end with its time, in the order they ran, and the events scheduled."""
    monkeypatch.setattr(streams, "DIRECT", direct)
    env = simpy.Environment()
    lanes = {name: Stream(env, name) for name in NAMES}
    log: list[tuple[str, float]] = []

    def chain(label: str, lane: Stream, d: int, extra: str) -> None:
        done = env.event()

        def end(_ev: object) -> None:
            log.append((f"end {label}", env.now))
            done.succeed()
            if extra == "spawn":  # an urgent event now, behind done
                env.process(_spawned(f"{label}+", 0))
            elif extra == "timeout":  # a normal one now
                env.timeout(0).callbacks.append(lambda _e: log.append((f"tick {label}",
                                                                       env.now)))

        def start(_ev: object) -> None:
            log.append((f"start {label}", env.now))
            env.timeout(d).callbacks.append(end)
        lane.submit_chain(start, done)

    def _spawned(label: str, d: int) -> Generator[simpy.Event, Any, None]:
        log.append((f"spawn {label}", env.now))
        yield env.timeout(d)
        log.append((f"spawned {label}", env.now))

    def proc(label: str, lane: Stream, d: int, wait: int) -> None:
        def body() -> Generator[simpy.Event, Any, None]:
            log.append((f"start {label}", env.now))
            yield env.timeout(d)
            log.append((f"end {label}", env.now))
        waits = (lanes[NAMES[wait]].tail,) if wait >= 0 else ()
        lane.submit(body, waits)

    def step(i: int, actions: list[tuple[str, int, int, int, str]]) -> None:
        for j, (kind, s, d, w, extra) in enumerate(actions):
            label = f"{i}.{j}"
            if kind == "chain":
                chain(label, lanes[NAMES[s]], d, extra)
            elif kind == "proc":
                proc(label, lanes[NAMES[s]], d, w)
            else:
                env.process(_spawned(label, d))

    for i, (at, actions) in enumerate(program):
        env.timeout(at).callbacks.append(lambda _ev, i=i, a=actions: step(i, a))
    env.run()
    assert all(lane.idle() for lane in lanes.values())
    return log, streams_events(env)


def streams_events(env: simpy.Environment) -> int:
    return next(env._eid)  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(program=_program)
def test_direct_chains_run_every_step_in_the_order_of_their_events(program) -> None:
    with pytest.MonkeyPatch.context() as mp:
        direct, events_direct = _run(program, True, mp)
        plain, events_plain = _run(program, False, mp)
    assert direct == plain
    assert events_direct <= events_plain


def test_a_chain_behind_a_running_op_needs_no_kick(monkeypatch) -> None:
    """The common case: the op before still runs and nothing urgent is queued."""
    program = [(0, [("chain", 0, 2, -1, "none")]), (1, [("chain", 0, 1, 0, "none")])]
    direct, events_direct = _run(program, True, monkeypatch)
    plain, events_plain = _run(program, False, monkeypatch)
    assert direct == plain == [("start 0.0", 0), ("end 0.0", 2), ("start 1.0", 2),
                               ("end 1.0", 3)]
    assert events_direct == events_plain - 1  # the second chain's kick


def test_a_process_waiting_on_the_op_before_keeps_its_place(monkeypatch) -> None:
    """A backup-like process started just before (its initialisation queued, urgent) waits
    on the compute op before: it resumes before the chain behind it starts, as with the
    kick (so the chain is kicked)."""
    program = [(0, [("chain", 0, 2, -1, "none")]),
               (1, [("proc", 2, 0, 0, "none"), ("chain", 0, 1, -1, "none")])]
    direct, _ = _run(program, True, monkeypatch)
    plain, _ = _run(program, False, monkeypatch)
    assert direct == plain
    assert [e for e, _ in direct].index("start 1.0") < [e for e, _ in direct].index("start 1.1")


VARIANTS = [
    ("multiturn_tiers.yaml", "L1+L2+L3", ["workload.num_clients=16", "workload.num_rounds=6",
                                          "run.layerwise=true", "cache.device_tokens=20000",
                                          "cache.hicache_ratio=1.5"]),
    ("multiturn_tiers.yaml", "L1+L2", ["workload.num_clients=16", "workload.num_rounds=6"]),
    ("faults.yaml", None, ["run.layerwise=true"]),
]


@pytest.mark.parametrize(("name", "variant", "overrides"), VARIANTS)
def test_a_run_with_direct_chains_is_the_run_with_their_events(
        monkeypatch, name: str, variant: str | None, overrides: list[str]) -> None:
    assert twin_run_events_saved(monkeypatch, streams, "DIRECT", name, variant, overrides) > 0


_times = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)


class _Tick:
    """The least an event in SimPy's queue needs (what sim.fluid's timers have)."""

    __slots__ = ("callbacks", "_ok")


def _tick_at(env: simpy.Environment, at: float, cb: Any) -> None:
    tick = _Tick()
    tick.callbacks, tick._ok = [cb], True
    queue_at(env, at, tick)


@pytest.mark.parametrize("fast_timer", [call_at, _tick_at], ids=["call_at", "queue_at"])
@settings(max_examples=300, deadline=None)
@given(now=_times, ats=st.lists(st.tuples(_times, st.booleans()), min_size=1, max_size=12))
def test_fast_timers_queue_as_the_timeout_they_replace(fast_timer, now, ats) -> None:
    """Timers at random times from now on (some tied, at now too), some by call_at (or
    queue_at, for an object that is no Event: sim.fluid's timers) and some as the timeout,
    in one queue: the same keys and the same firing order and times as all as timeouts."""
    def run(fast: bool) -> tuple[list[tuple[float, int]], list[tuple[int, float]]]:
        env = simpy.Environment(initial_time=now)
        fired: list[tuple[int, float]] = []
        for i, (x, use) in enumerate(ats):
            at = x if x >= now else now  # ties at now too
            def cb(_ev: object, i: int = i) -> None:
                fired.append((i, env.now))
            if fast and use:
                fast_timer(env, at, cb)
            else:
                env.timeout(exact_delay(env.now, at)).callbacks.append(cb)
        keys = [(t, p) for t, p, _, _ in sorted(env._queue)]  # type: ignore[attr-defined]
        env.run()
        return keys, fired
    assert run(True) == run(False)


def test_call_at_refuses_a_time_before_now() -> None:
    env = simpy.Environment(initial_time=2.0)
    with pytest.raises(ValueError):
        call_at(env, 1.0, lambda _ev: None)
