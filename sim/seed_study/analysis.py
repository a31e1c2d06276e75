"""The seed study's numbers from run folders: per-round tables, cliffs, multipliers, and
the session-aware deltas (pure pandas over ``requests.csv`` frames; no simulation here).

Definitions (seed 003, SGLang's benchmark; docs/SOURCES.md §3):
- hit rate of a round = its cached prompt tokens / its prompt tokens (summed, never a mean
  of per-request ratios); device / host / L3 split by the same denominator;
- effective input throughput of a round = its prompt tokens (cached included) / the round's
  span, first arrival to last finish (rounds do not overlap under a round barrier); of a
  run = all prompt tokens / (last finish - first arrival);
- the cliff = :func:`hicache.report.metrics.cliff_round` (the round from which the hit rate
  stays below 10% to the end); the onset = the first round after the peak below 90% of the
  peak (where the decline starts); both counted from 1, as the seed counts rounds (records
  count from 0);
- a multiplier = one variant's run throughput over another's;
- a session-aware delta = (session - lru) / lru of the mean TTFT, in percent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hicache.report.metrics import cliff_round, hit_rate_by_round, request_metrics


def rounds_table(req: pd.DataFrame) -> pd.DataFrame:
    """Per round: hit rates (:func:`hit_rate_by_round`), span, effective input throughput
    and mean TTFT."""
    hits = hit_rate_by_round(req).set_index("round")
    g = req[req["round"] >= 0].groupby("round")
    span = g["finish"].max() - g["arrival"].min()
    hits["span_s"] = span
    hits["input_tps"] = hits["prompt_tokens"] / span.where(span > 0)
    hits["ttft_mean_s"] = g["ttft"].mean()
    return hits.reset_index()


def run_metrics(req: pd.DataFrame, late: int = 5) -> dict:
    """A variant's headline numbers: run throughput, mean TTFT, hit rates, cliff round and
    the hit rate of its last ``late`` rounds (and of the very last one)."""
    m = request_metrics(req)
    r = rounds_table(req)
    tail = r.tail(late)
    den = tail["prompt_tokens"].sum()
    return {
        "input_tps": m["effective_input_throughput_tps"],
        "ttft_mean_s": m["ttft_mean_s"],
        # of it, the mean wait from arrival to admission (prefetch waits and the queue)
        "queue_mean_s": float((req["admitted"] - req["arrival"]).mean()),
        "hit_rate": m["hit_rate"],
        "device_hit_rate": m["device_hit_rate"],
        "host_hit_rate": m["host_hit_rate"],
        "l3_hit_rate": m["l3_hit_rate"],
        "cliff_round": _one_based(cliff_round(r)),
        "onset_round": _one_based(onset_round(r)),
        "late_hit_rate": float(tail["cached_tokens"].sum() / den) if den else None,
        "last_round_hit_rate": float(r["hit_rate"].iloc[-1]) if len(r) else None,
        "rounds": int(r["round"].max()) + 1 if len(r) else 0,
    }


def _one_based(r: int | None) -> int | None:
    """Records count rounds from 0; the seed's figures (and the report) from 1."""
    return None if r is None else r + 1


def onset_round(rounds: pd.DataFrame, fall: float = 0.9) -> int | None:
    """The first round after the hit rate's peak where it is below ``fall`` x the peak (a
    :func:`rounds_table` frame): where the decline starts. None if it never falls."""
    if not len(rounds):
        return None
    rates = rounds["hit_rate"].fillna(0.0).to_numpy()
    top = int(np.argmax(rates))
    below = np.flatnonzero(rates[top:] < fall * rates[top])
    return int(rounds["round"].iloc[top + below[0]]) if len(below) else None


def multipliers(metrics: dict[str, dict], base: str = "L1") -> dict[str, float | None]:
    """Each variant's run throughput over ``base``'s."""
    b = metrics[base]["input_tps"]
    return {name: (m["input_tps"] / b if b else None) for name, m in metrics.items()}


def session_delta(lru: dict, session: dict) -> dict:
    """Session-aware against LRU: mean TTFT change in percent and the hit rates of both."""
    def pct(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else 100.0 * (a - b) / b

    return {
        "ttft_change_pct": pct(session["ttft_mean_s"], lru["ttft_mean_s"]),
        "ttft_lru_s": lru["ttft_mean_s"], "ttft_session_s": session["ttft_mean_s"],
        "device_lru": lru["device_hit_rate"], "device_session": session["device_hit_rate"],
        "device_host_lru": _sum(lru, "device_hit_rate", "host_hit_rate"),
        "device_host_session": _sum(session, "device_hit_rate", "host_hit_rate"),
    }


def _sum(m: dict, *keys: str) -> float | None:
    vals = [m.get(k) for k in keys]
    return None if any(v is None or np.isnan(v) for v in vals) else float(sum(vals))


def relative_gap(ours: float | None, published: float | None) -> float | None:
    """|ours - published| / |published| (None when either is missing or published is 0)."""
    if ours is None or published is None or published == 0:
        return None
    return abs(ours - published) / abs(published)


def l3_evidence(folder: Path, from_round: int, nic_bytes_per_s: float) -> dict:
    """What became of a run's L3 prefetches from round ``from_round`` (counted from 1) on:
    how many were stopped by the timeout (``decisions.csv``), and the share of the NIC's
    bandwidth they used over that stretch (``timeline.parquet``)."""
    req = pd.read_csv(folder / "requests.csv")
    start = float(req.loc[req["round"] >= from_round - 1, "arrival"].min())
    end = float(req["finish"].max())
    dec = pd.read_csv(folder / "decisions.csv")
    stops = dec.loc[dec["decision"] == "prefetch_stop", "args"].str.split().str[1]
    tl = pd.read_parquet(folder / "timeline.parquet", columns=["lane", "op", "start", "bytes"])
    read = tl.loc[(tl["op"] == "prefetch") & (tl["start"] >= start), "bytes"].sum()
    return {"prefetches": int(len(stops)), "timeouts": int((stops == "timeout").sum()),
            "nic_busy": float(read / ((end - start) * nic_bytes_per_s)) if end > start else 0.0}


def lru_session_pairs(df: pd.DataFrame, key: str) -> list[tuple[object, pd.Series, pd.Series]]:
    """``(value of key, lru row, session row)`` for each point of a session sweep's table
    that ran both variants."""
    out = []
    for value, g in df.groupby(key, sort=False):
        v = g.set_index("variant")
        if {"lru", "session"} <= set(v.index):
            out.append((value, v.loc["lru"], v.loc["session"]))
    return out
