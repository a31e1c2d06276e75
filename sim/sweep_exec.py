"""Sweep points as independent tasks, run in this process, in local processes, or on Ray.

    tasks = [Task(index, point, variant, seed, scenario)]      # pure data, picklable
    run_task(task) -> row                                      # the same on every executor
    execute(tasks, executor, store) -> rows in task order      # skips what ``store`` holds

Invariants:
- a row is a function of its task alone (the simulator is deterministic for a scenario and
  seed), so every executor gives the same rows; the order of the table is the task order,
  never the order of completion;
- a task that raises gives a row with ``error`` set ("Type: message") and no metrics; the
  others go on;
- wall time is not part of a row (it would make tables differ between runs): it is
  returned beside the rows;
- :class:`PointStore` keeps one small JSON file per finished task, written atomically, so
  an interrupted sweep resumes where it stopped; failed tasks are run again on resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXECUTORS = ("serial", "local", "ray")


@dataclass(frozen=True)
class Task:
    """One simulation of a sweep: grid point x variant x seed, with its full scenario."""

    index: int
    point: dict[str, Any]
    variant: str
    seed: int
    scenario: dict[str, Any]

    @property
    def key(self) -> str:
        """A stable name for the task's result: a hash of everything it depends on."""
        text = json.dumps([self.point, self.variant, self.seed, self.scenario],
                          sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:16]


def run_task(task: Task) -> tuple[dict[str, Any], float]:
    """(row, wall seconds): the point's keys, ``variant``, ``seed``, ``error`` and every
    summary metric (:func:`sim.report.summary_of`)."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {**task.point, "variant": task.variant, "seed": task.seed,
                           "error": None}
    try:
        from hicache.report.frames import requests_frame
        from hicache.scenario.resolved import load_resolved
        from sim.driver import simulate
        from sim.report import summary_of, timeline_of

        # validated when the tasks were made: rebuilt here without validating again
        res = simulate(load_resolved(task.scenario), name=task.variant, progress=False)
        summary = summary_of(res, requests_frame(res.records), timeline_of(res))
        summary.pop("variant", None)
        summary.pop("faults", None)  # one row per point: the per-fault list stays out
        row.update(summary)
    except Exception as e:  # noqa: BLE001 - a failed point is recorded, the sweep goes on
        row["error"] = f"{type(e).__name__}: {e}"
    return row, time.perf_counter() - t0


class PointStore:
    """Finished tasks' rows as ``DIR/points/<key>.json`` (written via rename)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder) / "points"
        self.folder.mkdir(parents=True, exist_ok=True)

    def get(self, task: Task) -> dict[str, Any] | None:
        path = self.folder / f"{task.key}.json"
        try:
            row = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return None if row.get("error") else row  # failed points run again

    def put(self, task: Task, row: dict[str, Any]) -> None:
        path = self.folder / f"{task.key}.json"
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(row, default=str))
        os.replace(tmp, path)


Report = Callable[[Task, dict[str, Any], float, int, int], None]


def execute(tasks: Sequence[Task], executor: str = "serial", *,
            store: PointStore | None = None, address: str | None = None,
            workers: int | None = None, report: Report | None = None
            ) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Rows in task order and wall seconds per task index (only for tasks run now).
    ``report(task, row, wall, done, total)`` is called as each task finishes."""
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: allowed: {', '.join(EXECUTORS)}")
    rows: dict[int, dict[str, Any]] = {}
    todo = []
    for t in tasks:
        cached = store.get(t) if store is not None else None
        if cached is None:
            todo.append(t)
        else:
            rows[t.index] = cached
    walls: dict[int, float] = {}
    done = len(rows)

    def finish(task: Task, row: dict[str, Any], wall: float) -> None:
        nonlocal done
        rows[task.index], walls[task.index] = row, wall
        if store is not None:
            store.put(task, row)
        done += 1
        if report is not None:
            report(task, row, wall, done, len(tasks))

    runner = {"serial": _serial, "local": _local, "ray": _ray}[executor]
    runner(todo, finish, address=address, workers=workers)
    return [rows[t.index] for t in tasks], walls


Finish = Callable[[Task, dict[str, Any], float], None]


def _serial(todo: Iterable[Task], finish: Finish, **_: Any) -> None:
    for t in todo:
        finish(t, *run_task(t))


def _local(todo: Sequence[Task], finish: Finish, *, workers: int | None = None,
           **_: Any) -> None:
    """Separate processes (spawned: no state inherited), one per core by default."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if not todo:
        return
    n = min(workers or os.cpu_count() or 1, len(todo))
    with ProcessPoolExecutor(n, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_task, t): t for t in todo}
        try:
            for f in as_completed(futures):
                finish(futures[f], *f.result())
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def _ray(todo: Sequence[Task], finish: Finish, *, address: str | None = None,
         **_: Any) -> None:
    """Tasks on a Ray cluster (``address``) or a local Ray instance started here."""
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError("No module named 'ray'", name="ray") from None
    if not todo:
        return
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, logging_level="ERROR",
                 log_to_driver=False, runtime_env=_runtime_env())
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        pending = {remote.remote(t): t for t in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                finish(pending.pop(ref), *ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def _runtime_env() -> dict[str, Any]:
    """Workers import this checkout's packages: put its root on their PYTHONPATH (an
    installed hicache-lab needs nothing; a cluster needs the package on every node)."""
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}
