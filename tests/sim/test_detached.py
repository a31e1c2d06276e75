"""Ops run by ``sim.detached.spawn`` against the same ops run by ``env.process``: random
programs (ops started at tied instants from timers and from other ops, sleeping, waiting
on events other ops fire or fail, on events processed already, on their own kind of
ops' starts queued just before) log the same steps at the same times in the same order;
each spawned op that ended scheduled one event fewer (its end). Simulated runs with the
runtime's stores and prefetches spawned (``detached.ON``) are the runs with processes,
bit for bit, fault scenarios included."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from simtoys import make_runtime, toy_model, toy_profile, twin_run_events_saved

import sim.detached as detached
from hicache.runtime.interface import (
    BackupIntent,
    BatchPlan,
    Phase,
    RequestSlice,
    StoreIntent,
)
from hicache.scenario import load_scenario
from sim.detached import spawn
from sim.driver import simulate
from sim.l3 import L3Store


class Boom(Exception):
    pass


# one op's steps: ("sleep", d) | ("wait", j) (shared event j) | ("fire", j) | ("fail", j)
# | ("old",) (an event processed already) | ("spawn", k) (start op k later in the program
# now)
_step = st.one_of(
    st.tuples(st.just("sleep"), st.integers(0, 2)),
    st.tuples(st.just("wait"), st.integers(0, 3)),
    st.tuples(st.just("fire"), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    st.tuples(st.just("old")),
    st.tuples(st.just("spawn"), st.integers(0, 5)),
)
# ops: (start time, started by spawn (else env.process), steps); op k may also be
# started by another op's ("spawn", k)
_program = st.lists(st.tuples(st.integers(0, 3), st.booleans(),
                              st.lists(_step, max_size=6)), min_size=1, max_size=6)


def _run(program: list[tuple[int, bool, list[tuple[Any, ...]]]], detach: bool
         ) -> tuple[list[tuple[str, float]], int, int]:
    """Run ``program``; the log of every step with its time, the events scheduled, and
    how many ops started by spawn ended."""
    env = simpy.Environment()
    shared = [env.event() for _ in range(4)]
    old = env.event().succeed("old")
    log: list[tuple[str, float]] = []
    ended = [0]

    def op(k: int, label: str, steps: list[tuple[Any, ...]], spawned: bool
           ) -> Generator[simpy.Event, Any, None]:
        log.append((f"{label} start", env.now))
        for i, s in enumerate(steps):
            kind = s[0]
            if kind == "sleep":
                yield env.timeout(s[1])
            elif kind == "wait":
                try:
                    value = yield shared[s[1]]
                except Boom as e:
                    value = f"caught {e.args[0]}"
                log.append((f"{label}.{i} got {value}", env.now))
            elif kind in ("fire", "fail"):
                ev = shared[s[1]]
                if not ev.triggered:
                    if kind == "fire":
                        ev.succeed(f"{label}.{i}")
                    else:
                        ev.defused = True  # no waiter must not crash the run
                        ev.fail(Boom(f"{label}.{i}"))
            elif kind == "old":
                value = yield old
                log.append((f"{label}.{i} old {value}", env.now))
            elif k + 1 + s[1] < len(program):  # a later op only: no endless spawning
                start(k + 1 + s[1], f"{label}>{k + 1 + s[1]}")
            log.append((f"{label}.{i} {kind}", env.now))
        log.append((f"{label} end", env.now))
        if spawned:
            ended[0] += 1

    def start(k: int, label: str) -> None:
        _, by_spawn, steps = program[k]
        if detach and by_spawn:
            spawn(env, op(k, label, steps, True))
        else:
            env.process(op(k, label, steps, False))

    # a driver-like process beside them: wakes at each start time and logs, so ties
    # between its steps and the ops' starts and ends are in the log too
    def driver() -> Generator[simpy.Event, Any, None]:
        for t in range(5):
            yield env.timeout(1 if t else 0)
            log.append(("driver", env.now))

    env.process(driver())
    for k, (at, _, _) in enumerate(program):
        env.timeout(at).callbacks.append(lambda _ev, k=k: start(k, f"op{k}"))
    env.run(until=50)  # an op waiting on an event nobody fires stays waiting
    return log, next(env._eid), ended[0]  # type: ignore[attr-defined]


@settings(max_examples=400, deadline=None)
@given(program=_program)
def test_spawned_ops_run_every_step_where_processes_run_it(program) -> None:
    spawned, events_spawned, ended = _run(program, True)
    plain, events_plain, _ = _run(program, False)
    assert spawned == plain
    assert events_spawned == events_plain - ended  # each end: one event fewer


def test_a_spawned_op_starts_where_its_initialize_would_be() -> None:
    """Started from a timer's callback, after a normal event queued at the same instant
    and before it: the op's first step runs before that event (its start is urgent)."""
    program = [(0, True, [("sleep", 0)]), (0, True, [("fire", 0)])]
    spawned, _, _ = _run(program, True)
    plain, _, _ = _run(program, False)
    assert spawned == plain
    assert spawned.index(("op0 start", 0)) < spawned.index(("op0.0 sleep", 0))


def test_an_op_that_raises_raises_out_of_the_run() -> None:
    env = simpy.Environment()

    def bad() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1)
        raise Boom("x")

    spawn(env, bad())
    with pytest.raises(Boom):
        env.run()
    assert env.now == 1


VARIANTS = [
    ("multiturn_tiers.yaml", "L1+L2+L3", ["workload.num_clients=16", "workload.num_rounds=6",
                                          "run.layerwise=true", "cache.device_tokens=20000",
                                          "cache.hicache_ratio=1.5"]),
    ("faults.yaml", None, ["run.layerwise=true"]),
]


@pytest.mark.parametrize(("name", "variant", "overrides"), VARIANTS)
def test_a_run_with_spawned_l3_ops_is_the_run_with_processes(
        monkeypatch, name: str, variant: str | None, overrides: list[str]) -> None:
    assert twin_run_events_saved(monkeypatch, detached, "ON", name, variant, overrides) > 0


def _store_behind_backup(wait: bool, detach: bool, monkeypatch: pytest.MonkeyPatch
                         ) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """A prefill, then its backup; the store of the backup's host copy is executed before
    the backup ran (``wait``: the store waits on the backup's ``done``) or after it
    completed. The completions, timeline rows and events scheduled."""
    monkeypatch.setattr(detached, "ON", detach)
    env = simpy.Environment()
    profile = toy_profile()
    rt = make_runtime(env, profile, toy_model(), l3=L3Store.mooncake(env, profile.mooncake))
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 64),)))
    rt.execute_batch(h)
    env.run()
    h = rt.prepare_batch(BatchPlan(2, backups=(BackupIntent(h.slices[0].kv, job_id=3),)))
    rt.execute_batch(h)
    if not wait:
        env.run()
    store = rt.prepare_batch(BatchPlan(4, stores=(StoreIntent(h.backups[0], ("a", "b", "c",
                                                                             "d"), 5),)))
    rt.execute_batch(store)
    env.run()
    done = [repr(c) for c in rt.poll()]
    return done, rt.timeline.as_tuples(), next(env._eid)  # type: ignore[attr-defined]


@pytest.mark.parametrize("wait", [True, False])
def test_a_spawned_store_waits_on_its_pages_backup_as_a_process_does(monkeypatch,
                                                                     wait: bool) -> None:
    """A store executed behind its pages' backup waits on the backup's ``done`` (an
    all_of); one executed after it waits for nothing. Same completions and rows spawned
    and as a process, one event fewer (the store's end)."""
    base = _store_behind_backup(wait, False, monkeypatch)
    run = _store_behind_backup(wait, True, monkeypatch)
    assert run[:2] == base[:2]
    assert run[2] == base[2] - 1
    stores = [c for c in base[0] if "STORE" in c]
    assert len(stores) == 1 and "pages=4" in stores[0]
    ends = {r[1]: r[6] for r in base[1] if r[0] in ("d2h", "l3")}
    starts = {r[1]: r[5] for r in base[1] if r[0] in ("d2h", "l3")}
    assert starts["store"] == ends["backup"]  # (waiting: it went on once the copy ended)


def test_l3_ops_leave_no_cyclic_garbage() -> None:
    """A spawned op and an L3 transfer's job hold no reference cycle (the op's resume is
    bound per wait; the job drops its bound ``arrived`` when the transfer ends), so
    refcounting frees them as they end, and the collector never has to."""
    sc = load_scenario("scenarios/multiturn_tiers.yaml", VARIANTS[0][2])
    vsc = next(v for n, v in sc.expand() if n == "L1+L2+L3")
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what the collection finds, to look at it
    try:
        res = simulate(vsc, name="L1+L2+L3", progress=False)
        gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert res.replicas[0].runtime.l3_bytes["write"] > 0  # stores ran
    assert kinds["L3Job"] == 0 and kinds["_Op"] == 0, kinds.most_common(5)
