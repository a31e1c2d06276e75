"""A fold's own timer lands on the very time the unfolded run's event has.

SimPy queues a timeout at ``now + delay``; from some ``now`` no delay lands on a given
time (``now`` has finer bits than the time, and every sum rounds to even past it), so
``call_at`` lands one ulp before it. The unfolded run never finishes a job there: a fluid
timer that fires before its job's due waits on (:meth:`sim.fluid.FluidServer._fire`), and
a launch is a timeout from the landing, which reaches it. A fold arms its end long before
(at the fold's start), so it must queue at the time itself (:func:`sim.streams.call_exactly`).
Found by a property test of the chain fold beside a copy (stop 35): the tail fold of a
prefill's forward and sample ended one ulp early, and rid 1's first token with it.
"""

from __future__ import annotations

import simpy

from hicache.scenario import load_scenario
from sim.driver import simulate
from sim.streams import call_at, call_exactly, queue_time
from tests.sim.test_chain_fold import _assert_same

# the fold's start and end that found it (a prefill's forward from 0.0826, its sample)
NOW, END = 0.0826407627323008, 0.23603531732793695


def test_no_delay_from_now_lands_on_the_end() -> None:
    assert queue_time(NOW, END) < END  # the case: call_at would fire one ulp early
    assert queue_time(0.23566783368655764, END) == END  # the sample's own start does


def _fired(queue: object) -> float:
    env = simpy.Environment(initial_time=NOW)
    seen: list[float] = []
    queue(env, END, lambda _ev: seen.append(env.now))  # type: ignore[operator]
    env.run()
    return seen[0]


def test_call_exactly_fires_at_the_time_itself() -> None:
    assert _fired(call_at) < END
    assert _fired(call_exactly) == END


def test_call_exactly_refuses_a_time_before_now() -> None:
    env = simpy.Environment(initial_time=1.0)
    try:
        call_exactly(env, 0.5, lambda _ev: None)
    except ValueError as err:
        assert "0.5" in str(err)
    else:
        raise AssertionError("a time before now was queued")


def test_folded_run_equals_unfolded_where_the_end_is_unreachable() -> None:
    """The run that found it: L1+L2, a bidirectional cap below the two directions' sum."""
    sc = load_scenario("scenarios/multiturn_tiers.yaml", [
        "run.layerwise=true", "workload.num_rounds=8", "workload.num_clients=24",
        "hardware.pcie.bidirectional_bytes_per_s=4e10", "workload.request_length=3072",
        "cache.device_tokens=20000", "seed=3"])
    v = dict(sc.expand())["L1+L2"]
    folded = simulate(v.with_overrides(["run.fold_layers=true"]), name="f", progress=False)
    plain = simulate(v.with_overrides(["run.fold_layers=false"]), name="p", progress=False)
    _assert_same(folded, plain)
    assert folded.events < plain.events  # it did fold
