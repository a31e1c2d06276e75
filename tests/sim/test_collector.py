"""The run's collector thresholds (hicache.collector): set for the run, restored after it,
also when the run raises; a run changes no global collector setting."""

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
