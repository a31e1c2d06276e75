"""Serving metrics from a requests frame and a timeline frame (see :mod:`frames`).

Definitions (docs/SOURCES.md §3):
- hit rates are ``sum(cached) / sum(prompt)`` (never a mean of per-request ratios), split
  into device (L1), host (L2) and L3 by the same denominator;
- TTFT percentiles use numpy's linear interpolation over finished-prefill requests;
- ITL: ``itl_mean_s`` is exact (gap-weighted mean of per-request means, ``output_tokens - 1``
  gaps each). ``itl_p50_s``/``itl_p99_s`` are an APPROXIMATION: each request's gaps are
  taken to equal its ``itl_mean`` (inverted-CDF percentile weighted by gap count); true
  per-token gaps are not in the record;
- GPU busy = |union of compute-lane rows| / (last compute end - first compute start) in
  :func:`timeline_metrics`; :func:`summarize`, which knows the requests, divides by the run
  (first arrival to last finish) per GPU instead (see there why);
- H2D / D2H bandwidth = bytes on lane ``h2d`` / ``d2h`` over the union of that lane's busy
  time (engine and link lanes repeat the same bytes and are not counted);
- load_hidden_fraction = sum over ``op == 'load'`` rows on lane ``h2d`` of their overlap
  with the compute union, over the sum of their durations;
- with a ``replica`` column the timeline metrics are computed per replica and pooled
  (see :func:`timeline_metrics`); request metrics pool all replicas' requests.

Empty inputs never raise: counts and sums are 0; a ratio or percentile whose denominator
or sample is empty is ``None`` (e.g. no requests -> ttft ``None``; no loads ->
load_hidden_fraction ``None``; no compute rows -> busy/bubble ``None``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hicache.report import intervals as iv
from hicache.report.frames import REQUEST_COLUMNS, requests_frame, timeline_frame

METRIC_UNITS: dict[str, str] = {
    "n_requests": "requests", "n_finished": "requests", "duration_s": "s",
    "ttft_mean_s": "s", "ttft_p50_s": "s", "ttft_p90_s": "s", "ttft_p99_s": "s",
    "itl_mean_s": "s", "itl_p50_s": "s", "itl_p99_s": "s",
    "request_throughput_rps": "req/s", "output_throughput_tps": "tok/s",
    "effective_input_throughput_tps": "tok/s",
    "prompt_tokens": "tokens", "cached_tokens": "tokens",
    "hit_rate": "fraction", "device_hit_rate": "fraction", "host_hit_rate": "fraction",
    "l3_hit_rate": "fraction",
    "compute_span_s": "s", "compute_busy_s": "s",
    "gpu_busy_fraction": "fraction", "gpu_bubble_fraction": "fraction",
    "h2d_bytes": "bytes", "d2h_bytes": "bytes", "h2d_busy_s": "s", "d2h_busy_s": "s",
    "h2d_gbps": "GB/s", "d2h_gbps": "GB/s", "load_time_s": "s", "load_hidden_fraction": "fraction",
    "cliff_round": "round",
}  # fmt: skip
TIERS = ("device", "host", "l3")


def metric_label(metric: str) -> str:
    """Axis / column label with unit, e.g. ``'ttft_p99_s [s]'``."""
    unit = METRIC_UNITS.get(metric)
    return f"{metric} [{unit}]" if unit else metric


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


def _pct(values: np.ndarray, q: float, weights: np.ndarray | None = None) -> float | None:
    if values.size == 0:
        return None
    if weights is None:
        return float(np.percentile(values, q))
    return float(np.percentile(values, q, weights=weights, method="inverted_cdf"))


def request_metrics(req: pd.DataFrame, *, duration: float | None = None) -> dict:
    """Latency, throughput and hit-rate metrics of a requests frame.

    ``duration`` (s) defaults to last finish - first arrival; throughputs count finished
    requests (``finish`` not NaN) and their tokens; prompt tokens count cached ones too.
    """
    finished = req[req["finish"].notna()] if len(req) else req
    if duration is None and len(finished):
        duration = float(finished["finish"].max() - req["arrival"].min())
    dur = duration if duration is not None and duration > 0 else 0.0
    ttft = req["ttft"].dropna().to_numpy(np.float64)
    itl = req[req["itl_mean"].notna() & (req["output_tokens"] > 1)]
    gaps = (itl["output_tokens"] - 1).to_numpy(np.float64)
    itl_v = itl["itl_mean"].to_numpy(np.float64)
    prompt = int(req["prompt_tokens"].sum())
    out: dict = {
        "n_requests": len(req),
        "n_finished": len(finished),
        "duration_s": float(duration) if duration is not None else None,
        "ttft_mean_s": float(ttft.mean()) if ttft.size else None,
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "itl_mean_s": _ratio(float(np.dot(itl_v, gaps)), float(gaps.sum())),
        "itl_p50_s": _pct(itl_v, 50, gaps),
        "itl_p99_s": _pct(itl_v, 99, gaps),
        "request_throughput_rps": _ratio(len(finished), dur),
        "output_throughput_tps": _ratio(int(finished["output_tokens"].sum()), dur),
        "effective_input_throughput_tps": _ratio(int(finished["prompt_tokens"].sum()), dur),
        "prompt_tokens": prompt,
        "cached_tokens": int(req["cached_tokens"].sum()),
        "hit_rate": _ratio(int(req["cached_tokens"].sum()), prompt),
    }
    for t in TIERS:
        out[f"{t}_hit_rate"] = _ratio(int(req[f"{t}_hit"].sum()), prompt)
    return out


def _lane(tl: pd.DataFrame, lane: str) -> pd.DataFrame:
    return tl[tl["lane"] == lane]


def _replica_sums(tl: pd.DataFrame) -> dict[str, float]:
    """Numerators and denominators of the timeline metrics for one replica's rows."""
    comp = _lane(tl, "compute")
    cu = iv.union(comp["start"], comp["end"])
    loads = _lane(tl, "h2d")
    loads = loads[loads["op"] == "load"]
    out = {
        "compute_span_s": float(comp["end"].max() - comp["start"].min()) if len(comp) else 0.0,
        "compute_busy_s": iv.length(cu),
        "load_time_s": float(loads["duration"].sum()),
        "load_hidden_s": float(iv.overlap_each(cu, loads["start"], loads["end"]).sum()),
    }
    for d in ("h2d", "d2h"):
        rows = _lane(tl, d)
        out[f"{d}_bytes"] = int(rows["bytes"].sum())
        out[f"{d}_busy_s"] = iv.length(iv.union(rows["start"], rows["end"]))
    return out


def timeline_metrics(tl: pd.DataFrame) -> dict:
    """GPU busy/bubble, H2D/D2H bytes and GB/s, and the hidden fraction of H2D loads.

    With a ``replica`` column, unions are taken per replica (replicas own separate GPUs and
    links) and the per-replica numerators and denominators are summed; spans and busy
    times are then totals over replicas.
    """
    groups = [g for _, g in tl.groupby("replica", sort=True)] if "replica" in tl else [tl]
    sums: dict[str, float] = {}
    for g in groups or [tl]:
        for k, v in _replica_sums(g).items():
            sums[k] = sums.get(k, 0) + v
    busy = _ratio(sums["compute_busy_s"], sums["compute_span_s"])
    out: dict = {
        "compute_span_s": sums["compute_span_s"],
        "compute_busy_s": sums["compute_busy_s"],
        "gpu_busy_fraction": busy,
        "gpu_bubble_fraction": None if busy is None else 1.0 - busy,
    }
    for d in ("h2d", "d2h"):
        out[f"{d}_bytes"] = int(sums[f"{d}_bytes"])
        out[f"{d}_busy_s"] = sums[f"{d}_busy_s"]
        gbps = _ratio(sums[f"{d}_bytes"], sums[f"{d}_busy_s"])
        out[f"{d}_gbps"] = None if gbps is None else gbps / 1e9
    out["load_time_s"] = sums["load_time_s"]
    out["load_hidden_fraction"] = _ratio(sums["load_hidden_s"], sums["load_time_s"])
    return out


def summarize(
    requests_df: pd.DataFrame, timeline_df: pd.DataFrame, *, duration: float | None = None
) -> dict:
    """All metrics of one run as a flat dict (keys in :data:`METRIC_UNITS`).

    A column-less empty DataFrame (or None) stands for "no requests" / "no timeline rows".
    """
    requests_df = _or_empty(requests_df, REQUEST_COLUMNS, lambda: requests_frame([]))
    timeline_df = _or_empty(timeline_df, ("lane", "duration"), lambda: timeline_frame([]))
    req, tl = request_metrics(requests_df, duration=duration), timeline_metrics(timeline_df)
    span = req["duration_s"]
    if span and tl["gpu_busy_fraction"] is not None:
        # busy over the run (first arrival to last finish) per GPU, not over the compute
        # span: a GPU computing back to back from its first to its last batch reads 1 there
        # whatever the load, so that ratio tells nothing about spare capacity
        comp = timeline_df[timeline_df["lane"] == "compute"]
        gpus = comp["replica"].nunique() if "replica" in comp.columns else 1
        busy = min(1.0, tl["compute_busy_s"] / (span * max(gpus, 1)))
        tl |= {"gpu_busy_fraction": busy, "gpu_bubble_fraction": 1.0 - busy}
    return {**req, **tl}


def _or_empty(df, needed, make_empty) -> pd.DataFrame:
    if df is None or (len(df) == 0 and not set(needed) <= set(df.columns)):
        return make_empty()
    return df


def hit_rate_by_round(requests_df: pd.DataFrame) -> pd.DataFrame:
    """Per round: request count, summed prompt / cached / tier-hit tokens and the hit rates
    ``sum(cached) / sum(prompt)`` (NaN for a round with no prompt tokens), sorted by round."""
    requests_df = _or_empty(requests_df, REQUEST_COLUMNS, lambda: requests_frame([]))
    cols = ["prompt_tokens", "cached_tokens", "device_hit", "host_hit", "l3_hit"]
    g = requests_df.groupby("round", sort=True)
    df = g[cols].sum().astype(np.int64)
    df.insert(0, "n_requests", g.size().astype(np.int64))
    df = df.reset_index()
    den = df["prompt_tokens"].where(df["prompt_tokens"] > 0).astype(np.float64)
    df["hit_rate"] = df["cached_tokens"] / den
    for t in TIERS:
        df[f"{t}_hit_rate"] = df[f"{t}_hit"] / den
    df["round"] = df["round"].astype(np.int64)
    return df


def cliff_round(rounds: pd.DataFrame, below: float = 0.1) -> int | None:
    """The round from which the hit rate (a :func:`hit_rate_by_round` frame) stays below
    ``below`` to the last round, after having been at or above it: where the cache stops
    holding the working set for good. None when it never collapses (or never held)."""
    if not len(rounds):
        return None
    rates = rounds.sort_values("round")
    ok = (rates["hit_rate"].fillna(0.0) >= below).to_numpy()
    if not ok.any() or ok[-1]:
        return None
    last_ok = int(np.flatnonzero(ok)[-1])
    return int(rates["round"].iloc[last_ok + 1])
