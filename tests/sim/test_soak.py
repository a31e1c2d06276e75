"""The soak benchmark's reduced form (benchmarks/soak.py): two simulated minutes of
multi-turn chat on two replicas with every kind of fault, the tree and pool invariants
checked every 25 scheduler steps (sim.invariants.check_replica raises when one breaks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from hicache.runtime.handles import Kind, Tier
from hicache.scenario.faults import FAULT_KINDS
from sim.driver import simulate
from sim.invariants import check_replica

ROOT = Path(__file__).resolve().parents[2]


def _soak():  # noqa: ANN202 - the benchmark module
    spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_simulated_minutes_keep_every_invariant_under_every_fault() -> None:
    soak = _soak()
    out = soak.run(minutes=2.0, every=25)
    assert {k for k, *_ in soak.FAULTS} == set(FAULT_KINDS)  # every kind is in the schedule
    assert out["invariant_checks"] >= 100 and out["tree_ops"] >= 10_000
    assert out["finished"] >= 500 and out["simulated_s"] == pytest.approx(120.0)
    effects = out["fault_effects"]
    assert effects["keys_lost"] > 0 and effects["l3_timeouts"] > 0 and effects["l3_errors"] > 0


def test_the_replica_check_catches_a_page_the_runtime_freed_under_the_tree() -> None:
    soak = _soak()
    sc = soak.soak_scenario(0.5).with_overrides(["faults=[]"])
    res = simulate(sc, progress=False)
    rep = res.replicas[0]
    check_replica(rep.scheduler, rep.runtime)
    node = next(n for n in rep.scheduler.tree.nodes.values() if n.on_device)
    rep.runtime.tier(Tier.DEVICE)[Kind.FULL].free(list(node.device[next(iter(node.device))]
                                                     .pages()))
    with pytest.raises(AssertionError, match="in the tree but free in the runtime"):
        check_replica(rep.scheduler, rep.runtime)
