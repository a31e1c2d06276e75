"""The run's collector (hicache.collector): thresholds set for the run, restored after it,
also when the run raises; what the run made promoted to the oldest generation unscanned; a
run changes no global collector setting and leaves the permanent generation as it was."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from hicache.collector import RUN_THRESHOLDS, run_collector
from hicache.scenario import load_scenario
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[2]


def test_thresholds_apply_inside_and_come_back_after() -> None:
    before = gc.get_threshold()
    assert before != RUN_THRESHOLDS
    with run_collector():
        assert gc.get_threshold() == RUN_THRESHOLDS
        with run_collector((1000, 5, 5)):  # nested: each level restores its own
            assert gc.get_threshold() == (1000, 5, 5)
        assert gc.get_threshold() == RUN_THRESHOLDS
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), run_collector():
        raise RuntimeError("a failing run")
    assert gc.get_threshold() == before


def test_a_simulation_runs_under_the_run_thresholds(monkeypatch) -> None:
    seen: list[tuple[int, int, int]] = []
    import sim.driver as driver

    real = driver._replica

    def spying(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(gc.get_threshold())
        return (yield from real(*args, **kwargs))

    monkeypatch.setattr(driver, "_replica", spying)
    before = gc.get_threshold()
    res = simulate(load_scenario(ROOT / "scenarios/quick.yaml"), progress=False)
    assert res.requests > 0 and seen and set(seen) == {RUN_THRESHOLDS}
    assert gc.get_threshold() == before


def test_the_run_promotes_what_it_made_to_the_oldest_generation_unscanned() -> None:
    """At the block's end every tracked object moves to the oldest generation (no
    collection of a generation the run grew right after the thresholds come back), the
    young generation is empty, and nothing stays frozen."""
    gc.collect()
    seen: list[str] = []

    def spy(phase: str, info: dict) -> None:
        seen.append(phase)

    gc.callbacks.append(spy)
    try:
        with run_collector():
            made = [[i] for i in range(1000)]  # tracked, reachable: survives any collection
            assert gc.get_count()[0] >= 1000
        assert seen == []  # the promotion is no collection
    finally:
        gc.callbacks.remove(spy)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in made) and id(made) in oldest
    assert gc.get_freeze_count() == 0


def test_a_callers_frozen_objects_stay_frozen() -> None:
    """With objects frozen before the run, the block promotes nothing (an unfreeze would
    release the caller's objects too) and leaves the permanent generation as it was."""
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        res = simulate(load_scenario(ROOT / "scenarios/quick.yaml"), progress=False)
        assert res.requests > 0 and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_simulation_leaves_the_permanent_generation_as_it_was() -> None:
    before = gc.get_freeze_count()
    res = simulate(load_scenario(ROOT / "scenarios/quick.yaml"), progress=False)
    assert res.requests > 0 and gc.get_freeze_count() == before == 0


def test_cyclic_garbage_of_the_run_is_still_collected() -> None:
    """What the promotion moved to the oldest generation a full collection still frees."""
    gc.collect()
    with run_collector():
        a: list = []
        a.append(a)
        del a
    assert gc.collect() >= 1


def test_results_do_not_depend_on_the_collector(monkeypatch) -> None:
    """Twin runs: the run's thresholds and promotion against CPython's defaults with a
    collection at every young step (results never depend on when the collector runs)."""
    import sim.driver as driver

    sc = load_scenario(ROOT / "scenarios/quick.yaml")
    ours = simulate(sc, progress=False)
    monkeypatch.setattr(driver, "run_collector", lambda: run_collector((1, 1, 1)))
    eager = simulate(sc, progress=False)
    assert ours.records == eager.records and ours.decisions == eager.decisions
    assert ours.events == eager.events and ours.sim_time == eager.sim_time


class _Cyclic:
    """A node of a reference cycle: only the collector frees it."""

    __slots__ = ("other", "payload")


def _live_cyclic() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is _Cyclic)


def test_back_to_back_runs_hold_the_garbage_of_few_runs() -> None:
    """Runs whose results become cyclic garbage once dropped (as a simulation's do), one
    after another in one process: the runs' ends collect fully often enough that the
    garbage of at most a few runs is alive at once (without that rule, none of it would
    be collected: a freeze's promotion is not counted towards a full collection)."""
    gc.collect()
    per_run, most = 20_000, 0
    for _ in range(12):
        with run_collector():
            pairs = [_Cyclic() for _ in range(2 * per_run)]
            for a, b in zip(pairs[::2], pairs[1::2], strict=True):
                a.other, b.other = b, a
                a.payload = b.payload = [0]  # tracked: what a run grows is mostly tracked
            del pairs, a, b
        most = max(most, _live_cyclic())
    assert most <= 4 * 2 * per_run
    gc.collect()
    assert _live_cyclic() == 0
