"""``SimResult.batches`` counts the modelled engine's batches (what the speed benchmark divides
the simulator's cost by): every plan a runtime prepares, compute and cache-only, and every
folded decode step as the batch it stands for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hicache.scenario import load_scenario
from sim.driver import SimResult, simulate
from sim.runtime import SimRuntime

ROOT = Path(__file__).resolve().parents[2]


def _run(variant: str, fold: bool, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[SimResult, Counter[str]]:
    sc = load_scenario(ROOT / "scenarios/multiturn_tiers.yaml",
                       ["workload.num_clients=24", "workload.num_rounds=8",
                        f"run.fold_decode={str(fold).lower()}"])
    prepared: Counter[str] = Counter()
    real = SimRuntime.prepare_batch

    def counting(self: SimRuntime, plan: object) -> object:
        prepared["compute" if plan.batch_id > 0 else "cache-only"] += 1  # type: ignore[attr-defined]
        return real(self, plan)

    with monkeypatch.context() as m:
        m.setattr(SimRuntime, "prepare_batch", counting)
        res = simulate(dict(sc.expand())[variant], name=variant, progress=False)
    return res, prepared


@pytest.mark.parametrize("variant", ["L1", "L1+L2+L3"])
def test_batches_are_the_plans_prepared_unfolded_and_the_same_folded(
        variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, prepared = _run(variant, False, monkeypatch)
    assert prepared["compute"] > plain.requests  # every request prefills and decodes
    if variant == "L1+L2+L3":
        assert prepared["cache-only"] > 0  # stores of backed-up copies, among others
    assert plain.batches == prepared["compute"] + prepared["cache-only"]
    folded, fewer = _run(variant, True, monkeypatch)
    assert fewer["compute"] < prepared["compute"]  # steps were folded ...
    assert folded.batches == plain.batches  # ... and count as the batches they stand for
