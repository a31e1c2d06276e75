"""A blocked queue head is refused at once while nothing admission reads has changed
(KVCacheManager.admit remembers its last refusal): the same decisions, records and
timelines as attempting every time, with many attempts spared."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache.kvcache.manager import KVCacheManager
from hicache.scenario import load_scenario
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[2]


def _run(sc, name: str) -> tuple:
    # one timeline row per step: a remembered refusal also lets decode steps fold while
    # the head waits (Scheduler._queue_still), which only merges rows
    res = simulate(sc.with_overrides(["run.timeline_steps=true"]), name=name, progress=False)
    rows = [sorted(rep.timeline.as_tuples()) for rep in res.replicas]
    return res.decisions, res.records, res.sim_time, rows


@pytest.mark.parametrize("variant", ["L1", "L1+L2", "L1+L2+L3"])
def test_remembered_refusals_change_nothing(monkeypatch, variant) -> None:
    sc = dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml",
                            ["workload.num_rounds=10"]).expand())[variant]  # L1 fills up
    spared = []
    admit = KVCacheManager.admit

    def counting(self, st):  # noqa: ANN001, ANN202
        spared.append(self._refused is not None and self._refused == self._admission_reads(st))
        return admit(self, st)

    monkeypatch.setattr(KVCacheManager, "admit", counting)
    remembered = _run(sc, variant)
    assert sum(spared) > 0, "no refusal was remembered: the test shows nothing"
    monkeypatch.setattr(KVCacheManager, "_admission_reads", lambda self, st: object())
    assert _run(sc, variant) == remembered  # every attempt made in full
