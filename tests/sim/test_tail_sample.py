"""Folded forwards and samples (sim.tail_fold.SAMPLE): a batch's whole forward (no loads)
with its sample, and a layer-wise tail with its sample, folded as one event, give the run
with the sample unfolded (SAMPLE off) bit for bit, on multiturn runs with L3 (layer-wise
and not) and on seeded L3 variations with faults; the folds are interrupted there in
every segment kind (a forward, a layer, a sample in flight), so each materialise is
exercised; and every job's floats at each outside entry are the unfolded run's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import sim.tail_fold as tail_fold
from hicache.scenario import load_scenario
from sim.cost import CostModel
from sim.driver import SimResult, simulate
from tests.sim.test_chain_fold import _assert_same, _case, _entries

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("layer", "forward", "sample")


def _run(sc: object, name: str, sample: bool, monkeypatch: pytest.MonkeyPatch,
         cut: Counter[str] | None = None) -> tuple[SimResult, Counter[str]]:
    """One run with SAMPLE on or off; the fold counts over its replicas. ``cut`` counts
    the folds materialised early by the kind of the segment in flight."""
    materialise = tail_fold.TailFold.materialise

    def counted(self: tail_fold.TailFold, at_end: bool = False) -> None:
        if cut is not None and not at_end:
            now = self.cc.rt.env.now
            k = sum(1 for s in self.starts if s <= now) - 1
            kind = KINDS[self.kinds[k]]
            cut[kind] += 1
            if any(t > self.starts[k] for t in self.changes):
                cut[kind + " split"] += 1  # L3 changes split it before the cut
        materialise(self, at_end)

    with monkeypatch.context() as m:
        m.setattr(tail_fold, "SAMPLE", sample)
        m.setattr(tail_fold.TailFold, "materialise", counted)
        res = simulate(sc, name=name, progress=False)
    counts: Counter[str] = Counter()
    for rep in res.replicas:
        counts.update(rep.runtime.fold_counts)
    if not sample:
        assert not counts["tail_samples"] and not counts["tail_forwards"]  # off means off
    return res, counts


def _twin(sc: object, name: str, monkeypatch: pytest.MonkeyPatch,
          cut: Counter[str] | None = None) -> Counter[str]:
    folded, stats = _run(sc, name, True, monkeypatch, cut)
    plain, _ = _run(sc, name, False, monkeypatch)
    _assert_same(folded, plain)
    stats["events folded"] += folded.events
    stats["events plain"] += plain.events
    return stats


def _multiturn(layerwise: bool) -> list[tuple[str, object]]:
    sets = ["workload.num_clients=24", "workload.num_rounds=8", "cache.device_tokens=40000",
            f"run.layerwise={str(layerwise).lower()}"]
    return list(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", sets).expand())


@pytest.mark.parametrize("layerwise", [True, False])
def test_folded_samples_equal_unfolded_on_multiturn(layerwise: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    total: Counter[str] = Counter()
    for variant, sc in _multiturn(layerwise):
        total.update(_twin(sc, variant, monkeypatch))
    assert total["tail_forwards"] > 100 and total["tail_samples"] > 100
    assert total["events folded"] < total["events plain"] * 0.95
    if layerwise:  # tails of layers that end in their sample
        assert total["tail_samples"] > total["tail_forwards"]


def test_folded_samples_equal_unfolded_on_seeded_variations_with_l3(
        monkeypatch: pytest.MonkeyPatch) -> None:
    total: Counter[str] = Counter()
    cut: Counter[str] = Counter()
    for seed in [None, *range(12)]:
        variant, vsc = _case(seed)
        total.update(_twin(vsc, variant, monkeypatch, cut))
    assert total["tail_forwards"] > 100 and total["tail_samples"] > 100
    assert total["tail_absorbed"] > 20  # L3 changes inside folded segments
    assert all(cut[k] > 0 for k in KINDS), cut  # each segment kind materialised early


@pytest.mark.parametrize("seed", [None, 5])
def test_outside_entries_see_the_unfolded_floats(seed: int | None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    variant, vsc = _case(seed)
    with monkeypatch.context() as m:
        m.setattr(tail_fold, "SAMPLE", False)
        plain = _entries(vsc, variant, True, monkeypatch)
    folded = _entries(vsc, variant, True, monkeypatch)
    assert len(folded) > 100
    assert folded == plain


@pytest.fixture
def long_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples 40 times as long, in both twins: folds get cut while a sample runs, after
    L3 changes split its progress (rare at the real length)."""
    sample_time = CostModel._sample_time
    monkeypatch.setattr(CostModel, "_sample_time",
                        lambda self, requests: 40 * sample_time(self, requests))


def test_samples_cut_after_l3_changes_materialise_exactly(
        long_samples: None, monkeypatch: pytest.MonkeyPatch) -> None:
    cut: Counter[str] = Counter()
    for seed in (None, 0, 1, 6):
        variant, vsc = _case(seed)
        _twin(vsc, variant, monkeypatch, cut)
    assert cut["sample split"] > 0 and cut["sample"] > 10, cut
    variant, vsc = _case(0)  # (one such cut)
    with monkeypatch.context() as m:
        m.setattr(tail_fold, "SAMPLE", False)
        plain = _entries(vsc, variant, True, monkeypatch)
    assert _entries(vsc, variant, True, monkeypatch) == plain
