"""A 200-point sweep on each executor: wall time, and whether the tables are identical.

    python benchmarks/sweep_executors.py [--points 200] [--executors local,ray] [--json]

Each point is the `quick` scenario's L1+L2 variant shrunk to seconds-scale runs (8 clients
x 3 rounds, 512-token turns) over a grid of client counts x L2 ratios x seeds. Prints a
table (or one JSON object per executor with --json) and exits 1 if any two executors'
tables differ. Wall time is what a user waits for, so it is the measure here; CPU time of
the workers is not visible to the parent. Noisy on a shared machine: say so with numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def grid_for(points: int) -> tuple[dict, list[int]]:
    """A grid with ``points`` runs: clients x ratios x seeds (2 seeds)."""
    ratios = [1.5, 2, 3, 4, 6]
    seeds = [0, 1]
    clients = list(range(2, 2 + max(1, points // (len(ratios) * len(seeds)))))
    return {"workload.num_clients": clients, "cache.hicache_ratio": ratios}, seeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from hicache.cli_common import load_scenario_arg
    from sim.sweep import sweep_table, tasks_for
    from sim.sweep_exec import execute

    d = load_scenario_arg(ROOT / "scenarios" / "quick.yaml", [
        "workload.num_rounds=3", "workload.request_length=512", "workload.output_length=16",
        "workload.max_parallel=8"])
    grid, seeds = grid_for(args.points)
    tasks = tasks_for(d, grid, variants=["L1+L2"], seeds=seeds)
    tables, rows = {}, []
    for executor in args.executors.split(","):
        t0 = time.perf_counter()
        out, walls = execute(tasks, executor)
        wall = time.perf_counter() - t0
        tables[executor] = sweep_table(out, grid)
        rows.append({"executor": executor, "points": len(tasks), "cores": os.cpu_count(),
                     "wall_s": round(wall, 2), "sum_task_wall_s": round(sum(walls.values()), 2),
                     "failed": int(tables[executor]["error"].notna().sum())})
    first = next(iter(tables.values()))
    same = all(t.equals(first) for t in tables.values())
    for r in rows:
        r["identical_tables"] = same
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"{'executor':>8}  {'points':>6}  {'cores':>5}  {'wall s':>7}  "
              f"{'sum of task s':>13}  failed  identical")
        for r in rows:
            print(f"{r['executor']:>8}  {r['points']:>6}  {r['cores']:>5}  {r['wall_s']:>7}  "
                  f"{r['sum_task_wall_s']:>13}  {r['failed']:>6}  {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
