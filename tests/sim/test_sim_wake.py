"""The runtime's completion event, which a driver may also fire for an arrival
(sim.driver ``_Feed.wake``): one event per replica wait, never a stale fired one."""

from __future__ import annotations

import sys

import pytest
import simpy

from hicache.runtime.interface import TransferCompletion, TransferKind
from hicache.scenario import load_scenario
from sim.driver import simulate
from sim.shared import SimTenantRuntime
from sim.streams import first_of
from tests.sim.simtoys import make_runtime, toy_model, toy_profile


def _runtime() -> tuple[simpy.Environment, object]:
    env = simpy.Environment()
    return env, make_runtime(env, toy_profile(), toy_model())


def test_a_fired_completion_event_is_replaced():
    _env, rt = _runtime()
    first = rt.completion_event()
    assert rt.completion_event() is first  # nothing fired it: waits share it
    first.succeed()  # an arrival woke the replica
    fresh = rt.completion_event()
    assert fresh is not first and not fresh.triggered  # the next wait blocks again


def test_a_completion_after_an_arrival_fired_the_event_is_queued_and_wakes_the_next_wait():
    env, rt = _runtime()
    rt.completion_event().succeed()  # fired by an arrival before any completion
    done = TransferCompletion(job_id=7, kind=TransferKind.BACKUP, end=0.0, pages=1)
    rt.complete(done)  # must not fire the fired event again
    assert rt.poll() == [done]
    waiting = rt.completion_event()
    rt.complete(done)
    assert waiting.triggered
    assert rt.completion_event().triggered  # one queued: a wait returns at once
    env.run()


def test_a_completion_no_one_waits_for_schedules_nothing():
    """A wake-up exists only once a driver asked for one: a completion before that
    schedules no event (none could be read), and a wait asked for then still blocks
    until the next completion fires it."""
    env, rt = _runtime()
    env.run()  # the streams' initial tails
    done = TransferCompletion(job_id=7, kind=TransferKind.BACKUP, end=0.0, pages=1)
    rt.complete(done)
    assert env.peek() == float("inf")  # nothing scheduled
    assert rt.poll() == [done]
    waiting = rt.completion_event()
    assert not waiting.triggered and rt.completion_event() is waiting
    rt.complete(done)
    assert waiting.triggered and env.peek() == 0.0  # the one wait's wake-up, scheduled
    env.run()
    rt.complete(done)  # no one asked again: nothing more scheduled
    assert env.peek() == float("inf")
    assert rt.completion_event().triggered  # two queued: a wait returns at once


def test_replicas_sharing_a_runtime_each_wake_for_their_own_arrivals():
    """Two replicas on one shared runtime: an arrival kicks only its replica (any_of of the
    shared completion event and its own kick); every request ends."""
    sc = load_scenario("scenarios/multiturn_tiers.yaml",
                       ["workload.num_clients=4", "workload.num_rounds=3", "replicas=2",
                        "sharing.pool=shared"])
    for name, vsc in sc.expand():
        res = simulate(vsc, name=name, progress=False)
        assert isinstance(res.replicas[1].runtime, SimTenantRuntime), name
        assert res.requests == 12 and res.stall is None and not res.unfinished, name
        assert all(r["finish"] is not None for r in res.records), name


def test_host_ready_drops_only_the_pages_its_backup_still_holds():
    """A fired backup's L2 pages wait for nothing any more; a page another backup holds
    now keeps that one's event (the all-pages-its-own case and the page-by-page one)."""
    from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, Tier
    from sim.pending import PendingPages

    env, rt = _runtime()
    a, b = env.event(), env.event()

    def ext(first: int, n: int) -> CacheExtentRef:
        return CacheExtentRef(rt.runtime_id, rt.generation, Tier.HOST, (PageRun(first, n),))

    waits = rt._pending[Kind.FULL] = PendingPages()  # noqa: SLF001
    waits.add([(1, 3), (7, 2)], a)
    waits.add([(3, 1)], b)  # b's backup took page 3 over
    assert waits.pages() == {1: a, 2: a, 3: b, 7: a, 8: a}
    rt.host_ready(ext(1, 3), a)
    assert waits.pages() == {3: b, 7: a, 8: a}
    rt.host_ready(ext(7, 2), a)
    assert waits.pages() == {3: b}
    rt.host_ready(ext(3, 1), a)  # not its page any more
    assert waits.pages() == {3: b}
    assert rt.pending_events(ext(1, 3)) == [b]


@pytest.mark.parametrize(("name", "sets", "waits"), [
    # four replicas with L3: the feed waits on its next arrival's timer or a pushed one;
    # the replicas' waits take prefetch deadlines
    ("mooncake_trace.yaml", [], {("route", False), ("_replica", False)}),
    # two replicas on one shared runtime: each wait with a deadline holds a condition
    # already (the runtime's completion or the replica's kick): ``env.any_of`` itself
    ("mooncake_trace.yaml", ["replicas=2", "sharing.pool=shared"],
     {("route", False), ("_replica", True)}),
    # one replica: follow-ups push arrivals (the feed's wait on the pushed event alone)
    ("multiturn_tiers.yaml", ["workload.num_clients=8", "workload.num_rounds=4"],
     {("route", False)}),
])
def test_driver_waits_by_first_of_run_as_by_any_of(monkeypatch: pytest.MonkeyPatch, name: str,
                                                  sets: list[str], waits: set) -> None:
    """The driver's waits (``sim.streams.first_of``) against ``env.any_of`` in their
    place (L1+L2+L3): the same records, rows, decisions, time and SimPy events."""
    from sim import driver
    from tests.sim.test_fold import TRACE

    if name == "mooncake_trace.yaml":
        if not TRACE.exists():
            pytest.skip("shared traces absent")
        sets = [*sets, "workload.max_requests=120", f"workload.path={TRACE}"]
    seen: set[tuple[str, bool]] = set()

    def counted(env: simpy.Environment, events: tuple) -> simpy.Event:
        nested = any(isinstance(e, simpy.events.Condition) for e in events)
        seen.add((sys._getframe(1).f_code.co_name, nested))  # noqa: SLF001
        return first_of(env, events)

    vsc = dict(load_scenario(f"scenarios/{name}", sets).expand())["L1+L2+L3"]
    runs = []
    for wait in (lambda env, events: env.any_of(list(events)), counted):
        monkeypatch.setattr(driver, "first_of", wait)
        res = simulate(vsc, progress=False)
        assert res.stall is None and not res.unfinished
        rows = [repr(sorted(rep.timeline.as_tuples())) for rep in res.replicas]
        runs.append((repr(res.records), rows, repr(res.decisions), repr(res.sim_time),
                     res.events))
    assert runs[0] == runs[1]
    assert seen == waits  # each kind of wait ran
