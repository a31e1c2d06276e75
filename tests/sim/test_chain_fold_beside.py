"""Load chains folded beside a backup's d2h copy kernel (sim.chain_fold: ``Beside``): the
run is the unfolded one bit for bit (``run.fold_layers``), and the run that never folds
beside a copy (``chain_fold.BESIDE_COPY``), on small multiturn runs whose L2 backups
overlap prefix loads: with the bidirectional cap scaling both copies at every kernel's
join and landing (as shipped, and tighter), with it not binding, and with a throttled
copy; over random such settings too. Every way such a fold ends is taken: at the copy's
finish, at the chain's last landing with the copy still copying, and materialised early
by an outside entry; L3 changes beside the copy are absorbed; and every job's floats at
each L3 or d2h job's join and leave are the unfolded run's."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.chain_fold as chain_fold
from hicache.scenario import load_scenario
from sim.streams import call_at
from tests.sim.test_chain_fold import ROOT, _assert_same, _entries, _run

# 24 clients whose 2,048-token turns outgrow a small L1: prefixes load back layer by
# layer while the last batch's backups copy to L2
BASE = ["run.layerwise=true", "workload.num_rounds=8", "workload.num_clients=24",
        "cache.device_tokens=30000", "workload.request_length=2048"]
CASES = {
    "shipped": [],  # h100-sxm: 55 + 55 GB/s over a bidirectional 83
    "tight": ["hardware.pcie.bidirectional_bytes_per_s=6e10",
              "run.backup_throttle_bytes_per_s=2e10"],
    "unbound": ["hardware.pcie.bidirectional_bytes_per_s=2e11"],  # no scaling
}


def _variants(sets: list[str]) -> list[tuple[str, object]]:
    """The hierarchical variants (L2 backups; with L3 or not) of the small run."""
    sc = load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", BASE + sets)
    return [(name, vsc) for name, vsc in sc.expand() if name != "L1"]


def _watch(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How folds beside a copy ended, and the L3 changes they absorbed."""
    seen: Counter[str] = Counter()
    materialise, absorb = chain_fold.ChainFold.materialise, chain_fold.ChainFold.absorb

    def recorded(self: chain_fold.ChainFold, at_end: bool = False) -> None:
        if self.d is not None:
            seen["at the copy's finish" if at_end and self.final_d
                 else "at its end, the copy on" if at_end else "materialised early"] += 1
        materialise(self, at_end)

    def absorbed(self: chain_fold.ChainFold, job: object) -> bool:
        ok = absorb(self, job)  # type: ignore[arg-type]
        seen["absorbed"] += ok and self.d is not None
        return ok

    monkeypatch.setattr(chain_fold.ChainFold, "materialise", recorded)
    monkeypatch.setattr(chain_fold.ChainFold, "absorb", absorbed)
    return seen


def _check(name: str, sc: object, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Folded (beside copies too) == unfolded == folded with no fold beside a copy, and
    the first has fewer events than the last when it folded beside one."""
    folded, stats = _run(sc, name, True)
    plain, _ = _run(sc, name, False)
    _assert_same(folded, plain)
    with monkeypatch.context() as m:
        m.setattr(chain_fold, "BESIDE_COPY", False)
        apart, apart_stats = _run(sc, name, True)
    _assert_same(folded, apart)
    assert not apart_stats["chain_beside_copy"]
    if stats["chain_beside_copy"]:
        assert folded.events < apart.events
    return stats


def test_folds_beside_a_copy_are_the_unfolded_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _watch(monkeypatch)
    total: Counter[str] = Counter()
    for sets in CASES.values():
        for name, sc in _variants(sets):
            total.update(_check(name, sc, monkeypatch))
    assert total["chain_beside_copy"] > 50
    for end in ("at the copy's finish", "at its end, the copy on", "absorbed"):
        assert seen[end] > 10, end


def test_folds_beside_a_copy_materialised_midway(monkeypatch: pytest.MonkeyPatch) -> None:
    """An outside entry within a fold beside a copy (here: one between two of its
    transitions, in the middle, that materialises it; in the runs above entries seldom
    come then) puts the copy back with the unfolded run's floats, timer and place."""
    seen = _watch(monkeypatch)
    begin = chain_fold.ChainFold.begin

    def cut(self: chain_fold.ChainFold) -> None:
        begin(self)
        times = self.times
        if self.d is None or len(times) < 2:
            return
        i = len(times) // 2
        at = (times[i - 1] + times[i]) / 2
        if times[i - 1] < at < times[i]:  # (no tie with a transition)
            call_at(self.chain.rt.env, at,
                    lambda _ev: self.materialise() if self.fluid.folded is self else None)

    monkeypatch.setattr(chain_fold.ChainFold, "begin", cut)
    total: Counter[str] = Counter()
    for sets in (CASES["shipped"], CASES["tight"]):
        for name, sc in _variants(sets):
            folded, stats = _run(sc, name, True)
            plain, _ = _run(sc, name, False)
            _assert_same(folded, plain)
            total.update(stats)
    assert seen["materialised early"] > 20


def test_beside_a_copy_outside_entries_see_the_unfolded_floats(
        monkeypatch: pytest.MonkeyPatch) -> None:
    (name, sc), *_ = [(n, s) for n, s in _variants(CASES["tight"]) if n == "L1+L2+L3"]
    folded = _entries(sc, name, True, monkeypatch)
    plain = _entries(sc, name, False, monkeypatch)
    assert sum(1 for e in folded if any(j[0] == "d2h" for j in e[2])) > 50
    assert folded == plain


@settings(max_examples=8, deadline=None)
@given(bidirectional=st.floats(4e10, 1.2e11), throttle=st.none() | st.floats(3e9, 6e10),
       length=st.sampled_from([512, 1536, 3072]), tokens=st.integers(20_000, 60_000),
       seed=st.integers(0, 3))
def test_folds_beside_a_copy_over_random_links_and_sizes(
        bidirectional: float, throttle: float | None, length: int, tokens: int,
        seed: int) -> None:
    """Random bidirectional caps (binding or not), copy caps and turn lengths (so layer
    sizes, copy sizes and which loads meet which backups): the run that folds chains
    beside copies is the unfolded one. (It found a fold's end timer one ulp early where
    no delay from the fold's start lands on its end: tests/sim/test_fold_exact_end.py.)"""
    sets = [f"hardware.pcie.bidirectional_bytes_per_s={bidirectional!r}",
            f"workload.request_length={length}", f"cache.device_tokens={tokens}",
            f"seed={seed}"]
    if throttle is not None:
        sets.append(f"run.backup_throttle_bytes_per_s={throttle!r}")
    for name, sc in _variants(sets):
        folded, _ = _run(sc, name, True)
        plain, _ = _run(sc, name, False)
        _assert_same(folded, plain)
