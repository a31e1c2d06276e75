"""Sweep executors: the same table from every executor, failed points recorded, resume."""

from __future__ import annotations

import copy
import importlib.util

import pandas as pd
import pytest
from test_sweep import TINY

from sim.sweep import sweep_table, tasks_for
from sim.sweep_exec import PointStore, Task, execute

GRID = {"workload.num_clients": [2, 3]}


def _table(executor: str, **kw) -> pd.DataFrame:
    tasks = tasks_for(TINY, GRID, seeds=[0, 1])
    rows, walls = execute(tasks, executor, **kw)
    assert set(walls) == {t.index for t in tasks}
    return sweep_table(rows, GRID)


def test_rows_come_per_point_variant_and_seed_and_seeds_really_differ() -> None:
    df = _table("serial")
    assert list(zip(df["workload.num_clients"], df["variant"], df["seed"], strict=True)) == [
        (2, "L1", 0), (2, "L1", 1), (2, "L1+L2", 0), (2, "L1+L2", 1),
        (3, "L1", 0), (3, "L1", 1), (3, "L1+L2", 0), (3, "L1+L2", 1)]
    assert df["error"].isna().all() and (df["n_finished"] == df["n_requests"]).all()
    by_seed = df[df["workload.num_clients"] == 3].groupby("seed")["ttft_mean_s"].sum()
    assert by_seed[0] != by_seed[1]  # the seed reaches the workload


def test_local_processes_give_the_serial_table_exactly() -> None:
    pd.testing.assert_frame_equal(_table("local", workers=2), _table("serial"))


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_a_local_ray_instance_gives_the_serial_table_exactly() -> None:
    pd.testing.assert_frame_equal(_table("ray"), _table("serial"))


def _broken(index: int) -> Task:
    bad = copy.deepcopy(tasks_for(TINY, GRID, variants=["L1"])[0].scenario)  # resolved
    bad["workload"]["request_length"] = -5  # fails inside the run, not in the grid check
    return Task(index, {"workload.num_clients": 9}, "L1", 0, bad)


def test_a_failing_point_is_recorded_with_its_error_and_the_others_still_run() -> None:
    tasks = [*tasks_for(TINY, GRID, variants=["L1"])]
    tasks.insert(1, _broken(99))
    tasks = [Task(i, t.point, t.variant, t.seed, t.scenario) for i, t in enumerate(tasks)]
    rows, _ = execute(tasks, "serial")
    df = sweep_table(rows, GRID)
    assert df["error"].notna().tolist() == [False, True, False]
    assert "request_length" in df["error"][1] and pd.isna(df["hit_rate"][1])
    assert df["hit_rate"][[0, 2]].notna().all()


def test_resume_skips_finished_points_and_retries_failed_ones(tmp_path) -> None:
    tasks = [*tasks_for(TINY, GRID, variants=["L1"]), _broken(2)]
    store = PointStore(tmp_path)
    ran: list[int] = []

    def report(task, row, wall, done, total):  # noqa: ANN001, ANN202
        ran.append(task.index)

    first, _ = execute(tasks, "serial", store=store, report=report)
    assert ran == [0, 1, 2]
    ran.clear()
    again, walls = execute(tasks, "serial", store=store, report=report)
    assert ran == [2] and set(walls) == {2}  # only the failed point runs again
    assert again == first
