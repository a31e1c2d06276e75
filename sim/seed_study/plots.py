"""The seed study's figures (matplotlib's object API on the Agg canvas, as
:mod:`hicache.report.plots`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from hicache.report.plots import _save


def _figure(width: float, height: float):  # noqa: ANN202 - a matplotlib Figure
    """An empty figure on the Agg canvas (subplots are the caller's)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


COLORS = {"L1": "tab:red", "L1+L2": "tab:orange", "L1+L2+L3": "tab:green",
          "L1+L2+L3 wait_complete": "tab:purple",
          "lru": "tab:gray", "session": "tab:blue"}


def multiturn(rounds: Mapping[str, pd.DataFrame], cliff: tuple[float, float], title: str,
              path: Path) -> Path:
    """Hit rate and effective input throughput per round, one line per tier; the published
    cliff range shaded."""
    fig = _figure(11.0, 4.2)
    hit, tps = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for name, r in rounds.items():
        hit.plot(r["round"] + 1, r["hit_rate"], label=name, color=COLORS.get(name))
        tps.plot(r["round"] + 1, r["input_tps"] / 1e3, label=name, color=COLORS.get(name))
    for ax in (hit, tps):
        ax.axvspan(*cliff, color="0.85", zorder=0, label="published cliff")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    hit.set_ylabel("hit rate (cached / prompt tokens)")
    hit.set_ylim(0, 1.02)
    tps.set_ylabel("effective input throughput [K tok/s]")
    hit.legend(loc="lower left", fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def session(rows: pd.DataFrame, published: Mapping[str, Mapping[int, float]], path: Path
            ) -> Path:
    """Session-aware against LRU per batch size: the mean TTFT change and the device hit
    rates; published points as black markers."""
    fig = _figure(11.0, 4.2)
    ttft, dev = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for (model, g), marker in zip(rows.groupby("model", sort=False), "os^", strict=False):
        g = g.sort_values("batch")
        ttft.plot(g["batch"], g["ttft_change_pct"], marker=marker, label=f"{model} (ours)")
        dev.plot(g["batch"], g["device_lru"], marker=marker, ls="--",
                 label=f"{model} LRU", color=COLORS["lru"])
        dev.plot(g["batch"], g["device_session"], marker=marker,
                 label=f"{model} session", color=COLORS["session"])
        for b, v in published.get(model, {}).items():
            ttft.scatter([b], [v], marker=marker, color="black", zorder=3)
    ttft.scatter([], [], marker="o", color="black", label="published")
    for ax in (ttft, dev):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (sessions in flight)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ttft.axhline(0, color="0.5", lw=0.8)
    ttft.set_ylabel("mean TTFT, session-aware vs LRU [%]")
    dev.set_ylabel("device (L1) hit rate")
    dev.set_ylim(0, 1)
    return _save(fig, path)


def sweep_lines(df: pd.DataFrame, x: str, ys: Sequence[str], title: str, path: Path,
                *, xlabel: str | None = None) -> Path:
    """One subplot per metric in ``ys`` against the grid key ``x``, a line per variant."""
    fig = _figure(4.0 * len(ys) + 1.0, 3.6)
    numeric = pd.to_numeric(df[x], errors="coerce")
    labels = list(dict.fromkeys(df[x].astype(str)))  # categories (preset names) in order
    pos = numeric if numeric.notna().all() else df[x].astype(str).map(labels.index)
    for i, y in enumerate(ys):
        ax = fig.add_subplot(1, len(ys), i + 1)
        for name, g in df.assign(_x=pos).groupby("variant", sort=False):
            g = g.sort_values("_x")
            ax.plot(g["_x"], g[y], marker="o", label=name, color=COLORS.get(name))
        if numeric.isna().any():
            ax.set_xticks(range(len(labels)), labels, rotation=10, fontsize=7)
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return _save(fig, path)
