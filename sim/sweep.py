"""``hicache-lab sweep SCENARIO --grid KEY=V1,V2 ...``: a scenario over a grid of overrides.

The capacity planner's question ("how much L2/L3 for N users at a TTFT target?") as a table:
one row per grid point x variant x seed, in a fixed order (the cartesian product of the
grids with the first ``--grid`` outermost, then the scenario's variants, then the seeds),
each row the grid values and the run's summary metrics (:func:`sim.report.summary_of`).
With a target such as ``ttft_p90_s<=2.0`` each row gets ``meets_target`` and
:func:`answer` gives, for every value of the first key (and variant), the smallest value of
the second key that meets it, in GiB of host memory and L3 too. The points run as
independent tasks (:mod:`sim.sweep_exec`): here, in local processes, or on Ray.

Invariants: grid values are parsed with ``yaml.safe_load``; every point is validated before
any is simulated, and an error names the grid key (and variant) at fault; the same inputs
give the same rows in the same order.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import pandas as pd
import simpy
import yaml

from hicache.report.metrics import METRIC_UNITS
from hicache.scenario import Scenario, as_scenario
from sim.driver import build
from sim.sweep_exec import PointStore, Task, execute
from sim.sweep_plots import fmt

# Columns every table has (a failed point leaves them empty); the Parquet table has every
# summary metric besides. Wall time is not among them: it differs from run to run.
METRICS = ["hit_rate", "device_hit_rate", "host_hit_rate", "l3_hit_rate", "ttft_mean_s",
           "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "request_throughput_rps",
           "output_throughput_tps", "effective_input_throughput_tps",
           "load_hidden_fraction", "n_requests", "n_finished", "sim_time_s",
           "l1_gib", "l2_gib", "l3_stored_gib", "l2_tokens"]
TABLE_METRICS = ["hit_rate", "l3_hit_rate", "ttft_p90_s", "effective_input_throughput_tps",
                 "l2_gib"]
COUNT_COLUMNS = {"n_requests", "n_finished", "prompt_tokens", "cached_tokens", "h2d_bytes",
                 "d2h_bytes", "replicas", "timeline_rows", "h2d_bytes_accounted",
                 "d2h_bytes_accounted", "l1_tokens", "l2_tokens", "kv_bytes_per_token"}
TEXT_COLUMNS = {"error", "variant"}
OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
Grid = dict[str, list[Any]]


class SweepError(ValueError):
    """A bad grid, target or variant; the message names the key."""


@dataclass(frozen=True)
class Target:
    """``metric op value``; an undefined metric (None / NaN) never meets it."""

    metric: str
    op: str
    value: float

    def meets(self, x: Any) -> bool:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return False
        return OPS[self.op](float(x), self.value)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse_target(spec: str) -> Target:
    """``'ttft_p90_s<=2.0'`` -> Target; the metric must be a summary metric."""
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(<=|>=|<|>)\s*(\S+)\s*", spec)
    if not m:
        raise SweepError(f"--target {spec!r}: expected METRIC<=VALUE (or >=, <, >)")
    metric, op, raw = m.groups()
    if metric not in METRIC_UNITS:
        raise SweepError(f"--target {spec!r}: unknown metric {metric!r}; allowed: "
                         f"{', '.join(METRIC_UNITS)}")
    try:
        value = float(raw)
    except ValueError:
        raise SweepError(f"--target {spec!r}: {raw!r} is not a number") from None
    return Target(metric, op, value)


def parse_grid(items: Iterable[str]) -> Grid:
    """``['a.b=1,2', 'c.d=x']`` -> ``{'a.b': [1, 2], 'c.d': ['x']}`` (values by yaml.safe_load;
    keys keep their order; a repeated key or value is an error)."""
    grid: Grid = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SweepError(f"--grid {item!r}: expected KEY=V1,V2,...")
        if key in grid:
            raise SweepError(f"--grid {key}: given twice")
        values = []
        for part in raw.split(","):
            try:
                values.append(yaml.safe_load(part))
            except yaml.YAMLError as e:
                raise SweepError(f"--grid {key}: bad value {part!r} ({e})") from None
        if any(v is None and p.strip() == "" for v, p in zip(values, raw.split(","),
                                                              strict=True)):
            raise SweepError(f"--grid {key}: empty value in {raw!r}")
        if len({repr(v) for v in values}) != len(values):
            raise SweepError(f"--grid {key}: repeated value in {raw!r}")
        grid[key] = values
    if not grid:
        raise SweepError("--grid: at least one KEY=V1,V2,... is needed")
    return grid


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The cartesian product, first key outermost: ``{a: [1, 2], b: [x, y]}`` ->
    a=1,b=x; a=1,b=y; a=2,b=x; a=2,b=y."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def _yaml_text(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return text.removesuffix("\n...\n").strip()


def apply_point(d: Scenario, point: Mapping[str, Any], *,
                source: str = "<sweep>") -> Scenario:
    """Scenario ``d`` with each grid key set to its value (validated again)."""
    return d.with_overrides([f"{k}={_yaml_text(v)}" for k, v in point.items()],
                            flag="--grid")


def _variants_of(d: Scenario, only: Sequence[str] | None) -> list[tuple[str, Scenario]]:
    variants = d.expand()
    if only:
        unknown = sorted(set(only) - {n for n, _ in variants})
        if unknown:
            raise SweepError(f"--variant: unknown {unknown}; scenario has "
                             f"{[n for n, _ in variants]}")
        variants = [(n, v) for n, v in variants if n in only]
    return variants


def _check(d: Scenario, point: Mapping[str, Any], only: Sequence[str] | None,
           source: str) -> list[tuple[str, Scenario]]:
    """Validate one point for every selected variant (every section, then the runtime)."""
    what = " ".join(f"{k}={v!r}" for k, v in point.items())
    try:
        pt = apply_point(d, point, source=source)
        variants = _variants_of(pt, only)
        for _, vd in variants:
            build(simpy.Environment(), vd)
    except SweepError:
        raise
    except ValueError as e:
        raise SweepError(f"--grid {what}: {e}") from None
    for key in point:
        for name, vd in variants:
            got = _get(vd.to_mapping(), key)
            if got != _get(pt.to_mapping(), key):
                raise SweepError(f"--grid {key}: variant {name!r} sets it to "
                                 f"{got!r}, overriding the grid; drop the key or "
                                 "pick other variants with --variant")
    return variants


def _get(d: Mapping[str, Any], dotted: str) -> Any:
    node: Any = d
    for p in dotted.split("."):
        node = node.get(p) if isinstance(node, Mapping) else None
    return node


def tasks_for(d: Scenario | Mapping[str, Any], grid: Mapping[str, Sequence[Any]], *,
              variants: Sequence[str] | None = None, seeds: Sequence[int] | None = None,
              source: str = "<scenario>") -> list[Task]:
    """Every (point, variant, seed) as a :class:`Task`, in table order: the grid's
    cartesian product (first key outermost), then the variants, then the seeds. Every
    point is checked first (each key alone, then the point): a bad key fails before any
    simulation."""
    d = as_scenario(d, source=source)
    empty = [k for k, vs in grid.items() if not len(vs)] or ([] if grid else ["(none)"])
    if empty:
        raise SweepError(f"--grid {empty[0]}: no values")
    for key, values in grid.items():
        for v in values:
            _check(d, {key: v}, variants, source)
    base_seed = d.seed
    seeds = list(seeds) if seeds else [base_seed]
    tasks: list[Task] = []
    for p in expand_grid(grid):
        for name, vd in _check(d, p, variants, source):
            for seed in seeds:
                tasks.append(Task(len(tasks), dict(p), name, int(seed),
                                  {**vd.to_mapping(), "seed": int(seed)}))
    return tasks


def sweep_table(rows: Sequence[Mapping[str, Any]], grid: Mapping[str, Sequence[Any]],
                target: Target | None = None) -> pd.DataFrame:
    """Rows -> the sweep's table: grid keys (values as given), ``variant``, ``seed``,
    ``error``, every metric a column (float; counts Int64), ``meets_target``."""
    df = pd.DataFrame(list(rows))
    for col in ("seed", "error", *METRICS):
        if col not in df.columns:
            df[col] = None
    front = [*grid, "variant", "seed", "error"]
    metric_cols = [c for c in df.columns if c not in front]
    df = df[front + metric_cols]
    for c in metric_cols:
        if c in TEXT_COLUMNS:
            continue
        df[c] = pd.to_numeric(df[c], errors="coerce")
        df[c] = df[c].astype("Int64" if c in COUNT_COLUMNS else "float64")
    df["error"] = df["error"].astype(object).where(df["error"].notna(), None)
    if target:
        df["meets_target"] = [target.meets(v) for v in df[target.metric]]
    for key in grid:  # keep the values as given (2 stays 2 next to 1.5)
        df[key] = pd.Series([r[key] for r in rows], dtype=object)
    return df


def run_sweep(d: Scenario | Mapping[str, Any], grid: Mapping[str, Sequence[Any]], *,
              variants: Sequence[str] | None = None, target: Target | None = None,
              source: str = "<scenario>", log: TextIO | bool | None = True,
              seeds: Sequence[int] | None = None, executor: str = "serial",
              store: PointStore | None = None, address: str | None = None,
              timings: dict[int, float] | None = None,
              tasks: Sequence[Task] | None = None) -> pd.DataFrame:
    """One row per point x variant x seed (see :func:`tasks_for`, :func:`sweep_table`).
    ``log``: a stream for one line per finished run, True for ``sys.stderr``, None/False
    for none. ``executor``: serial (this process), local (processes) or ray. ``tasks``:
    from :func:`tasks_for` when the caller checked the grid already."""
    log = sys.stderr if log is True else (log or None)
    if tasks is None:
        tasks = tasks_for(d, grid, variants=variants, seeds=seeds, source=source)
    shown = target.metric if target else "ttft_p90_s"

    def report(task: Task, row: dict, wall: float, done: int, total: int) -> None:
        if log is None:
            return
        what = row["error"] or f"{shown}={fmt(row.get(shown))}"
        seed = f" seed={task.seed}" if seeds and len(seeds) > 1 else ""
        print(f"[{done}/{total}] " + " ".join(f"{k}={v}" for k, v in task.point.items())
              + f" {task.variant}{seed}: {what} ({wall:.2f} s)", file=log, flush=True)

    rows, walls = execute(tasks, executor, store=store, address=address, report=report)
    if timings is not None:
        timings.update(walls)
    return sweep_table(rows, grid, target)


def _order_key(values: Sequence[Any]) -> Callable[[Any], Any]:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return (lambda v: v) if numeric else (lambda v: list(values).index(v))


L2_KEYS = ("cache.hicache_ratio", "cache.hicache_size")


def answer(df: pd.DataFrame, grid: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Per value of the other grid keys (first key first) and variant: ``smallest``, the
    smallest value of the answer key (the second, or the only one) whose rows (every seed)
    meet the target (None if none does); ``monotone``: every larger value meets it too;
    ``edge``: ``lower`` when the smallest grid value already meets it (smaller ones are
    untested), ``beyond`` when no value does; ``applies``: False when the answer key sizes
    L2 and the variant has none; ``l2_gib`` / ``l3_stored_gib`` at the answer."""
    keys = list(grid)
    ans_key = keys[1] if len(keys) > 1 else keys[0]
    by = [k for k in keys if k != ans_key] + ["variant"]
    order = _order_key(grid[ans_key])
    lowest = min(grid[ans_key], key=order)
    out = []
    for group, g in df.groupby(by, sort=False):
        met: dict[Any, bool] = {}
        for v, m in zip(g[ans_key], g["meets_target"], strict=True):
            met[v] = met.get(v, True) and bool(m)
        ok = sorted((v for v, m in met.items() if m), key=order)
        best = ok[0] if ok else None
        mono = best is None or all(m for v, m in met.items() if order(v) >= order(best))
        applies = not (ans_key in L2_KEYS and "l2_tokens" in g and (g["l2_tokens"] == 0).all())
        at = g[g[ans_key].map(lambda v, b=best: v == b)] if best is not None else g.iloc[:0]
        out.append({**dict(zip(by, group, strict=True)), "answer_key": ans_key,
                    "smallest": best if applies else None, "monotone": mono,
                    "edge": None if not applies else ("beyond" if best is None else
                                                      "lower" if best == lowest else None),
                    "applies": applies,
                    "l2_gib": _mean(at, "l2_gib"), "l3_stored_gib": _mean(at, "l3_stored_gib")})
    ans = pd.DataFrame(out)
    ans["smallest"] = pd.Series([r["smallest"] for r in out], dtype=object)
    return ans


def _mean(df: pd.DataFrame, col: str) -> float | None:
    if col not in df or not len(df) or df[col].isna().all():
        return None
    return float(df[col].mean())


def format_answer(ans: pd.DataFrame, target: Target) -> str:
    lines = []
    skip = ("answer_key", "smallest", "monotone", "variant", "edge", "applies", "l2_gib",
            "l3_stored_gib")
    for r in ans.to_dict("records"):
        where = " ".join(f"{k}={r[k]}" for k in r if k not in skip)
        if not r["applies"]:
            lines.append(f"{where} [{r['variant']}]: {r['answer_key']} does not apply "
                         "(this variant has no L2)".strip())
            continue
        if r["smallest"] is None:
            what = f"none in the grid (every {r['answer_key']} tried misses it)"
        else:
            what = f"{r['answer_key']}={r['smallest']}"
            sizes = [f"{label} {r[col]:.1f} GiB" for col, label in
                     (("l2_gib", "L2 host memory"), ("l3_stored_gib", "L3 holds"))
                     if r.get(col) is not None and r[col] > 0]
            if sizes:
                what += f" ({', '.join(sizes)} per GPU)" if len(sizes) == 1 else \
                    f" ({sizes[0]} per GPU, {sizes[1]})"
        notes = []
        if r["edge"] == "lower":
            notes.append("at the grid's lower edge: smaller values were not tried")
        if not r["monotone"]:
            notes.append("some larger value misses the target")
        note = f"  ({'; '.join(notes)})" if notes else ""
        lines.append(f"{where} [{r['variant']}]: smallest {what} for {target}{note}".strip())
    return "\n".join(lines)


def format_sweep(df: pd.DataFrame, columns: Sequence[str]) -> str:
    """Aligned text: text columns left-aligned, numbers right-aligned; an L2 size key
    (``cache.hicache_ratio``) reads ``n/a`` in rows without L2."""
    cols = [c for c in columns if c in df.columns]
    no_l2 = (df["l2_tokens"] == 0).fillna(False).tolist() if "l2_tokens" in df else \
        [False] * len(df)
    cells = [["n/a" if c in L2_KEYS and skip else fmt(v) for v, skip in zip(df[c], no_l2,
                                                                          strict=True)]
             for c in cols]
    widths = [max([len(c), *map(len, col)]) for c, col in zip(cols, cells, strict=True)]
    left = [not pd.api.types.is_numeric_dtype(df[c]) and c != "meets_target"
            and not all(isinstance(v, int | float) for v in df[c] if v is not None)
            for c in cols]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) if lf else v.rjust(w)
                         for v, w, lf in zip(vals, widths, left, strict=True)).rstrip()

    body = [line([col[i] for col in cells]) for i in range(len(df))]
    return "\n".join([line(cols), "  ".join("-" * w for w in widths), *body])
