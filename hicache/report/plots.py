"""PNG plots of runs and variants (matplotlib object API on the Agg canvas; no pyplot,
no global backend switch). Every function writes ``path`` (parents created), returns it,
and draws a "no data" figure instead of raising on empty input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hicache.report.frames import timeline_frame
from hicache.report.metrics import hit_rate_by_round, metric_label
from hicache.report.perfetto import lane_order
from hicache.report.window import busiest_window


def _figure(width: float = 8.0, height: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def _tl(df: pd.DataFrame | None) -> pd.DataFrame:
    """Treat None or a column-less empty frame as an empty timeline."""
    if df is None or (len(df) == 0 and "lane" not in df.columns):
        return timeline_frame([])
    return df


def _no_data(ax) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def _rate_lines(curves: dict[str, tuple], path, *, title: str, xlabel: str,
                integer_x: bool = False) -> Path:
    """Hit rate [%] against ``x``, one line per variant (``{name: (x, rate)}``)."""
    fig, ax = _figure()
    drawn = False
    for name, (x, rate) in curves.items():
        if len(x):
            ax.plot(x, 100 * rate, marker="o", ms=3, label=name)
            drawn = True
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=title, xlabel=xlabel, ylabel="hit rate [% of prompt tokens]",
           ylim=(0, 100))  # fmt: skip
    if drawn:
        ax.legend()
    else:
        _no_data(ax)
    return _save(fig, path)


def plot_hit_rate_by_round(frames_by_variant: dict[str, pd.DataFrame], path) -> Path:
    """Hit rate (sum cached / sum prompt, %) per round, one line per variant. Each frame is a
    requests frame or an already computed :func:`hit_rate_by_round` table."""
    curves = {}
    for name, df in frames_by_variant.items():
        by_round = df if "hit_rate" in df.columns else hit_rate_by_round(df)
        curves[name] = (by_round["round"], by_round["hit_rate"])
    return _rate_lines(curves, path, title="Prefix-cache hit rate by round", xlabel="round",
                       integer_x=True)


def has_rounds(requests_df: pd.DataFrame) -> bool:
    """Whether requests carry conversation rounds (multi-turn, agent) rather than being
    trace or open-loop requests (round -1)."""
    return bool(len(requests_df)) and bool((requests_df["round"] >= 0).any())


def hit_rate_over_time(requests_df: pd.DataFrame, bins: int = 40) -> pd.DataFrame:
    """Hit rate ``sum(cached) / sum(prompt)`` of the requests arriving in each of ``bins``
    equal arrival-time bins: ``t_start``, ``t_end``, ``n_requests``, ``hit_rate``."""
    if not len(requests_df):
        return pd.DataFrame(columns=["t_start", "t_end", "n_requests", "hit_rate"])
    arrival = requests_df["arrival"].to_numpy(np.float64)
    lo, hi = float(arrival.min()), float(arrival.max())
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    idx = np.clip(np.searchsorted(edges, arrival, side="right") - 1, 0, bins - 1)
    prompt = np.bincount(idx, requests_df["prompt_tokens"].to_numpy(np.float64), bins)
    cached = np.bincount(idx, requests_df["cached_tokens"].to_numpy(np.float64), bins)
    count = np.bincount(idx, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(prompt > 0, cached / prompt, np.nan)
    return pd.DataFrame({"t_start": edges[:-1], "t_end": edges[1:], "n_requests": count,
                         "hit_rate": rate})


def plot_hit_rate_over_time(requests_by_variant: dict[str, pd.DataFrame], path,
                            bins: int = 40) -> Path:
    """Hit rate of the requests arriving in each time bin, one line per variant (for
    workloads without rounds, such as traces)."""
    curves = {}
    for name, df in requests_by_variant.items():
        h = hit_rate_over_time(df, bins)
        curves[name] = ((h["t_start"] + h["t_end"]) / 2, h["hit_rate"])
    return _rate_lines(curves, path, title="Prefix-cache hit rate over time (by arrival)",
                       xlabel="arrival time [s]")


def plot_hit_rate(requests_by_variant: dict[str, pd.DataFrame], folder: Path) -> Path:
    """The hit-rate plot that fits the workload: by round when requests have rounds
    (``hit_rate_by_round.png``), else over time (``hit_rate_over_time.png``)."""
    if any(has_rounds(df) for df in requests_by_variant.values()):
        return plot_hit_rate_by_round(requests_by_variant, Path(folder) / "hit_rate_by_round.png")
    return plot_hit_rate_over_time(requests_by_variant, Path(folder) / "hit_rate_over_time.png")


def plot_ttft_cdf(requests_by_variant: dict[str, pd.DataFrame], path) -> Path:
    """Empirical CDF of TTFT per variant (log x axis when TTFT spans over two decades)."""
    fig, ax = _figure()
    all_v = []
    for name, df in requests_by_variant.items():
        v = np.sort(df["ttft"].dropna().to_numpy(np.float64)) if "ttft" in df else np.empty(0)
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
            all_v.append(v)
    ax.set(title="Time to first token (CDF)", xlabel="TTFT [s]",
           ylabel="fraction of requests", ylim=(0, 1.02))  # fmt: skip
    if all_v:
        v = np.concatenate(all_v)
        pos = v[v > 0]
        if pos.size and pos.max() / pos.min() > 100:
            ax.set_xscale("log")
        ax.legend(loc="lower right")
    else:
        _no_data(ax)
    return _save(fig, path)


def _clip(df: pd.DataFrame, window) -> pd.DataFrame:
    if window is None or len(df) == 0:
        return df
    a, b = window
    df = df[(df["start"] < b) & (df["end"] > a)].copy()
    df["start"] = df["start"].clip(lower=a)
    df["end"] = df["end"].clip(upper=b)
    return df


def _bars(ax, df: pd.DataFrame, y: float, color, height: float = 0.8) -> None:
    ranges = list(zip(df["start"] * 1e3, (df["end"] - df["start"]) * 1e3, strict=True))
    if ranges:
        ax.broken_barh(ranges, (y - height / 2, height), facecolors=color, linewidth=0)


def _gantt_rows(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Row label -> rows: one row per lane, or per (replica, lane) labelled
    ``replica<N> · lane`` when the timeline holds several replicas."""
    if not len(df):
        return {}
    if "replica" not in df.columns or df["replica"].nunique() < 2:
        return {lane: df[df["lane"] == lane] for lane in lane_order(df["lane"])}
    out = {}
    for replica, g in df.groupby("replica", sort=True):
        for lane in lane_order(g["lane"]):
            out[f"replica{replica} · {lane}"] = g[g["lane"] == lane]
    return out


def plot_gantt(timeline_df: pd.DataFrame, path, window=None, *, max_rows: int = 400) -> Path:
    """Lanes as rows (per replica, labelled, when there are several), operations as bars
    coloured by op, in ``window`` (start, end seconds); by default the window with most
    H2D time overlapping compute (:func:`busiest_window`)."""
    from matplotlib.patches import Patch

    df = _tl(timeline_df)
    window = window if window is not None else busiest_window(df, max_rows=max_rows)
    df = _clip(df, window)
    rows_of = _gantt_rows(df)
    lanes = list(rows_of)
    fig, ax = _figure(10.0, 1.0 + 0.45 * max(len(lanes), 3))
    ops = sorted(set(df["op"])) if len(df) else []
    colors = {op: f"C{i % 10}" for i, op in enumerate(ops)}
    for y, (_, rows) in enumerate(rows_of.items()):
        for op, g in rows.groupby("op", sort=True):
            _bars(ax, g, y, colors[op])
    title = "Timeline"
    if window is not None:
        title += f" {window[0] * 1e3:.3f}–{window[1] * 1e3:.3f} ms ({len(df)} rows)"
    ax.set(title=title, xlabel="time since run start [ms]", ylabel="lane")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    if ops:
        ax.legend(handles=[Patch(color=colors[o], label=o) for o in ops], title="op",
                  loc="upper left", bbox_to_anchor=(1.0, 1.0))  # fmt: skip
    else:
        _no_data(ax)
    return _save(fig, path)


def plot_overlay(predicted_df: pd.DataFrame, measured_df: pd.DataFrame, path,
                 window=None) -> Path:  # fmt: skip
    """Predicted (simulator) vs measured (runtime) rows, one row pair per lane."""
    from matplotlib.patches import Patch

    pred, meas = _clip(_tl(predicted_df), window), _clip(_tl(measured_df), window)
    lanes = lane_order([*pred["lane"], *meas["lane"]])
    fig, ax = _figure(10.0, 1.0 + 0.5 * max(2 * len(lanes), 3))
    ticks, labels = [], []
    for i, lane in enumerate(lanes):
        for k, (src, df, color) in enumerate((("predicted", pred, "C0"),
                                              ("measured", meas, "C1"))):  # fmt: skip
            y = 2 * i + k
            _bars(ax, df[df["lane"] == lane], y, color)
            ticks.append(y)
            labels.append(f"{lane} · {src}")
    ax.set(title="Predicted vs measured timeline", xlabel="time since run start [ms]",
           ylabel="lane · source")  # fmt: skip
    ax.set_yticks(ticks, labels)
    ax.invert_yaxis()
    if lanes:
        ax.legend(handles=[Patch(color="C0", label="predicted"),
                           Patch(color="C1", label="measured")],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0))  # fmt: skip
    else:
        _no_data(ax)
    return _save(fig, path)


def plot_variant_bars(summary_by_variant: dict[str, dict], metric: str, path) -> Path:
    """One bar per variant for ``metric`` of :func:`summarize`; undefined values read 'n/a'."""
    fig, ax = _figure()
    names = list(summary_by_variant)
    vals = [summary_by_variant[n].get(metric) for n in names]
    heights = [np.nan if v is None else float(v) for v in vals]
    x = np.arange(len(names))
    bars = ax.bar(x, heights, color=[f"C{i % 10}" for i in range(len(names))])
    ax.set_xticks(x, names)
    for bar, v in zip(bars, vals, strict=True):
        text = "n/a" if v is None else f"{v:.3g}"
        h = 0.0 if v is None or not np.isfinite(v) else bar.get_height()
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, h), ha="center", va="bottom")
    ax.set(title=f"{metric} by variant", xlabel="variant", ylabel=metric_label(metric))
    if all(h != h for h in heights):  # nothing defined: keep a sensible y range
        ax.set_ylim(0, 1)
    if not names:
        _no_data(ax)
    return _save(fig, path)
