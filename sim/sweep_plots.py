"""Plots of a sweep: one grid key -> a metric per value and variant; two keys -> a heatmap
of the target metric per variant (cells that meet the target marked ``*``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hicache.report.metrics import metric_label

if TYPE_CHECKING:
    from sim.sweep import Target

def fmt(v: Any) -> str:
    """A number for a table cell or heatmap label."""
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.3e}" if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3) else f"{v:.4g}"
    return "-" if v is None else str(v)


def _figure():  # noqa: ANN202 - a matplotlib (fig, ax) on the Agg canvas, no pyplot
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def plot_lines(df: pd.DataFrame, key: str, values: Sequence[Any], metric: str, path: Path,
               target: Target | None = None) -> Path:
    """``metric`` vs the values of one grid key, one line per variant."""
    fig, ax = _figure()
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    for name, g in df.groupby("variant", sort=False):
        xs = list(g[key]) if numeric else [str(v) for v in g[key]]
        ax.plot(xs, g[metric].to_numpy(float), marker="o", label=name)
    if target and target.metric == metric:
        ax.axhline(target.value, color="k", ls="--", lw=1, label=str(target))
    ax.set(xlabel=key, ylabel=metric_label(metric), title=f"{metric} vs {key}")
    ax.legend()
    fig.savefig(path, dpi=110)
    return path


def plot_heatmap(df: pd.DataFrame, grid: Mapping[str, Sequence[Any]], variant: str,
                 metric: str, path: Path, target: Target | None = None) -> Path:
    """``metric`` of one variant over two grid keys (rows: first key); cells meeting the
    target are marked ``*``."""
    k0, k1 = list(grid)[:2]
    sub = df[df["variant"] == variant]
    mat = sub.pivot(index=k0, columns=k1, values=metric)
    mat = mat.reindex(index=list(grid[k0]), columns=list(grid[k1]))
    fig, ax = _figure()
    im = ax.imshow(mat.to_numpy(float), aspect="auto", cmap="viridis_r")
    fig.colorbar(im, ax=ax, label=metric_label(metric))
    for i, row in enumerate(mat.to_numpy(float)):
        for j, v in enumerate(row):
            mark = " *" if target and target.meets(v) else ""
            dark = not math.isnan(v) and im.norm(v) > 0.5  # viridis_r: high values dark
            ax.text(j, i, fmt(float(v)) + mark, ha="center", va="center", fontsize=8,
                    color="w" if dark else "k")
    ax.set_xticks(range(len(grid[k1])), [str(c) for c in grid[k1]])
    ax.set_yticks(range(len(grid[k0])), [str(i) for i in grid[k0]])
    title = f"{variant}: {metric}" + (f"  (* = {target})" if target else "")
    ax.set(xlabel=k1, ylabel=k0, title=title)
    fig.savefig(path, dpi=110)
    return path


def plot_sweep(df: pd.DataFrame, grid: Mapping[str, Sequence[Any]], out: Path,
               target: Target | None = None) -> list[Path]:
    """One key: ``<metric>.png`` for the target metric (ttft_p90_s without one), hit rate and
    effective throughput. Two keys: ``heatmap_<variant>.png`` of the target metric.
    More keys: no plots."""
    keys = list(grid)
    main = target.metric if target else "ttft_p90_s"
    if len(keys) == 1:
        metrics = list(dict.fromkeys([main, "hit_rate", "effective_input_throughput_tps"]))
        return [plot_lines(df, keys[0], grid[keys[0]], m, out / f"{m}.png", target)
                for m in metrics]
    if len(keys) == 2:
        return [plot_heatmap(df, grid, v, main, out / f"heatmap_{_slug(v)}.png", target)
                for v in dict.fromkeys(df["variant"])]
    return []
