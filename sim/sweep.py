"""``hicache-lab sweep SCENARIO --grid KEY=V1,V2 ...``: a scenario over a grid of overrides.

The capacity planner's question ("how much L2/L3 for N users at a TTFT target?") as a table:
one row per grid point x variant, in a fixed order (the cartesian product of the grids with
the first ``--grid`` outermost, the scenario's variants innermost), each row the grid values
and the run's summary metrics (:func:`hicache.report.metrics.summarize`). With a target such
as ``ttft_p90_s<=2.0`` each row gets ``meets_target`` and :func:`answer` gives, for every
value of the first key (and variant), the smallest value of the second key that meets it.

Invariants: grid values are parsed with ``yaml.safe_load``; every point is validated before
any is simulated, and an error names the grid key (and variant) at fault; the same inputs
give the same rows in the same order.
"""

from __future__ import annotations

import argparse
import itertools
import math
import operator
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import simpy
import yaml

from hicache.report.frames import requests_frame
from hicache.report.metrics import METRIC_UNITS, summarize
from hicache.scenario import Scenario, as_scenario, load_scenario
from sim.command import timeline_of
from sim.driver import build, simulate
from sim.sweep_plots import fmt, plot_sweep

METRICS = ["hit_rate", "device_hit_rate", "host_hit_rate", "l3_hit_rate", "ttft_mean_s",
           "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "request_throughput_rps",
           "output_throughput_tps", "effective_input_throughput_tps", "gpu_busy_fraction",
           "load_hidden_fraction", "n_requests", "n_finished", "sim_time_s", "wall_s"]
TABLE_METRICS = ["hit_rate", "l3_hit_rate", "ttft_mean_s", "ttft_p90_s", "ttft_p99_s",
                 "effective_input_throughput_tps", "gpu_busy_fraction"]
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


def _variants_of(d: Scenario, only: Sequence[str] | None,
                 source: str) -> list[tuple[str, Scenario]]:
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
        variants = _variants_of(pt, only, source)
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


def run_sweep(d: Scenario | Mapping[str, Any], grid: Mapping[str, Sequence[Any]], *,
              variants: Sequence[str] | None = None, target: Target | None = None,
              source: str = "<scenario>", log: TextIO | bool | None = True) -> pd.DataFrame:
    """One row per point x variant: grid keys, ``variant``, :data:`METRICS` (and the target
    metric, ``meets_target``). Every point is checked first (each key alone, then the point),
    so a bad key fails before any simulation. ``log``: a stream for one progress line per run,
    True for the current ``sys.stderr``, None/False for none."""
    log = sys.stderr if log is True else (log or None)
    d = as_scenario(d, source=source)
    empty = [k for k, vs in grid.items() if not len(vs)] or ([] if grid else ["(none)"])
    if empty:
        raise SweepError(f"--grid {empty[0]}: no values")
    for key, values in grid.items():
        for v in values:
            _check(d, {key: v}, variants, source)
    points = expand_grid(grid)
    checked = [(p, _check(d, p, variants, source)) for p in points]
    total = sum(len(vs) for _, vs in checked)
    metrics = METRICS + ([target.metric] if target and target.metric not in METRICS else [])
    rows = []
    for p, vs in checked:
        for name, vd in vs:
            t0 = time.perf_counter()
            res = simulate(vd, name=name, source=source, progress=False)
            s = summarize(requests_frame(res.records), timeline_of(res))
            s.update(sim_time_s=res.sim_time, wall_s=round(time.perf_counter() - t0, 3))
            row = {**p, "variant": name, **{m: s.get(m) for m in metrics}}
            if target:
                row["meets_target"] = target.meets(s.get(target.metric))
            rows.append(row)
            if log is not None:
                shown = target.metric if target else "ttft_p90_s"
                print(f"[{len(rows)}/{total}] " + " ".join(f"{k}={v}" for k, v in p.items())
                      + f" {name}: {shown}={fmt(s.get(shown))} ({s['wall_s']:.2f} s)",
                      file=log, flush=True)
    df = pd.DataFrame(rows).astype({m: "Int64" if m.startswith("n_") else "float64"
                                    for m in metrics})
    for key in grid:  # keep the values as given (2 stays 2 next to 1.5)
        df[key] = pd.Series([r[key] for r in rows], dtype=object)
    return df


def _order_key(values: Sequence[Any]) -> Callable[[Any], Any]:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return (lambda v: v) if numeric else (lambda v: list(values).index(v))


def answer(df: pd.DataFrame, grid: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Per value of the other grid keys (first key first) and variant: ``smallest``, the
    smallest value of the answer key (the second, or the only one) whose row meets the
    target (None if none does), and ``monotone``: every larger value meets it too."""
    keys = list(grid)
    ans_key = keys[1] if len(keys) > 1 else keys[0]
    by = [k for k in keys if k != ans_key] + ["variant"]
    order = _order_key(grid[ans_key])
    out = []
    for group, g in df.groupby(by, sort=False):
        met = {v: bool(m) for v, m in zip(g[ans_key], g["meets_target"], strict=True)}
        ok = sorted((v for v, m in met.items() if m), key=order)
        best = ok[0] if ok else None
        mono = best is None or all(m for v, m in met.items() if order(v) >= order(best))
        out.append({**dict(zip(by, group, strict=True)), "answer_key": ans_key,
                    "smallest": best, "monotone": mono})
    ans = pd.DataFrame(out)
    ans["smallest"] = pd.Series([r["smallest"] for r in out], dtype=object)
    return ans


def format_answer(ans: pd.DataFrame, target: Target) -> str:
    lines = []
    for r in ans.to_dict("records"):
        where = " ".join(f"{k}={r[k]}" for k in r if k not in
                         ("answer_key", "smallest", "monotone", "variant"))
        what = "none" if r["smallest"] is None else f"{r['answer_key']}={r['smallest']}"
        note = "" if r["monotone"] else "  (some larger value misses the target)"
        lines.append(f"{where} [{r['variant']}]: smallest {what} for {target}{note}".strip())
    return "\n".join(lines)


def format_sweep(df: pd.DataFrame, columns: Sequence[str]) -> str:
    """Aligned text: text columns left-aligned, numbers right-aligned."""
    cols = [c for c in columns if c in df.columns]
    cells = [[fmt(v) for v in df[c]] for c in cols]
    widths = [max([len(c), *map(len, col)]) for c, col in zip(cols, cells, strict=True)]
    left = [df[c].dtype == object and c != "meets_target" for c in cols]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) if lf else v.rjust(w)
                         for v, w, lf in zip(vals, widths, left, strict=True)).rstrip()

    body = [line([col[i] for col in cells]) for i in range(len(df))]
    return "\n".join([line(cols), "  ".join("-" * w for w in widths), *body])


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a scenario over a grid of overrides",
                       description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("scenario", type=Path)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a dotted scenario key and its values (repeatable; first outermost)")
    p.add_argument("--variant", action="append", default=None,
                   help="run only this variant (repeatable); default: all")
    p.add_argument("--target", default=None, help="e.g. ttft_p90_s<=2.0")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="fixed override applied before the grid")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    grid = parse_grid(args.grid)
    target = parse_target(args.target) if args.target else None
    d = load_scenario(args.scenario, args.overrides)
    df = run_sweep(d, grid, variants=args.variant, target=target, source=str(args.scenario))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "sweep.csv", index=False)
    cols = [*grid, "variant", *TABLE_METRICS]
    if target:
        cols += [target.metric, "meets_target"]
    text = format_sweep(df, list(dict.fromkeys(cols)))
    (out / "sweep.txt").write_text(text + "\n")
    print(text)
    plot_sweep(df, grid, out, target)
    if target:
        ans = answer(df, grid)
        ans.to_csv(out / "answer.csv", index=False)
        print("\n" + format_answer(ans, target))
    print(f"-> {out}")
    return 0
