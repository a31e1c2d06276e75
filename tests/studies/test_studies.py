"""Guarded studies: the shapes the seeds describe, and drift against committed baselines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hicache.cli import main
from hicache.report.frames import requests_frame
from hicache.report.metrics import hit_rate_by_round
from hicache.scenario import load_scenario
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[2]


def test_quick_matches_its_committed_baseline(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = main(["run", str(ROOT / "scenarios/quick.yaml"), "--out", str(tmp_path),
               "--no-progress", "--baseline", str(ROOT / "scenarios/baselines/quick.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ok (0 metric(s)" in out


def test_a_changed_cache_size_is_reported_as_drift(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = main(["run", str(ROOT / "scenarios/quick.yaml"), "--out", str(tmp_path),
               "--no-progress", "--variant", "L1", "--set", "cache.device_tokens=80000",
               "--baseline", str(ROOT / "scenarios/baselines/quick.json")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "DRIFT L1: hit_rate" in out
    assert "L1+L2: in the baseline but not run" in out


def test_multiturn_tiers_reproduces_the_seed_collapse() -> None:
    """Seed 003: L1 and L1+L2 hit rates collapse to ~0 once long conversations outgrow them;
    L3 keeps serving ~97%. Here L1 is gone by round 10, L1+L2 by round 22, L3 stays > 90%.
    (The last rounds are excluded: as clients finish, the stragglers' working set fits
    again and L1+L2 recovers, a drain effect, not steady state.)"""
    d = load_scenario(ROOT / "scenarios/multiturn_tiers.yaml")
    rounds: dict[str, pd.DataFrame] = {}
    for name, vd in d.expand():
        rounds[name] = hit_rate_by_round(requests_frame(simulate(vd).records)).set_index("round")
    idx = rounds["L1"].index
    late = (idx >= 22) & (idx <= 27)
    assert (rounds["L1"]["hit_rate"][rounds["L1"].index >= 10] < 0.05).all()
    assert (rounds["L1+L2"]["hit_rate"][late] < 0.15).all()
    assert (rounds["L1+L2+L3"]["hit_rate"][late] > 0.9).all()
    assert (rounds["L1+L2+L3"]["l3_hit_rate"][late] > 0.9).all()


def test_a_bad_workload_key_fails_before_anything_runs(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = main(["run", str(ROOT / "scenarios/quick.yaml"), "--out", str(tmp_path / "o"),
               "--set", "workload.num_clientz=3"])
    cap = capsys.readouterr()
    assert rc == 2
    assert "simulating" not in cap.out
    assert ("quick.yaml (--set workload.num_clientz=3): workload.num_clientz: unknown key "
            "(did you mean 'num_clients'?)") in cap.err
    assert not (tmp_path / "o").exists()
