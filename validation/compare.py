"""Predicted (simulator) versus measured (torch runtime) runs of one scenario, as numbers.

Pure functions of timeline and request frames (:mod:`hicache.report.frames`); no runtime.

Definitions (relative error is always ``(predicted - measured) / measured``, undefined when
the measured value is 0 or missing):
- runs are scored only when both control planes made the same decisions: batch ids and
  request ids then name the same work on both sides. :func:`compare` raises
  :class:`DecisionsDiffer` otherwise (joining by id would compare different batches);
- step time of a batch = its last ``compute`` row end minus the moment it could start:
  the later of its first own row (a compute row, a ``load`` on ``h2d`` or a ``cpu`` row:
  a load that must land before compute is part of the step) and the end of the batch
  before it on the compute lane (time spent waiting for that batch is not this step's)::

      h2d      [load 7 ]            (layerwise off: compute waits for every layer)
      compute            [L0][L1][L2][L3]
                ^ start                 ^ end     step(7) = end - start

- per operation: a batch's duration of (lane, op) is the sum of its rows there;
- TTFT is matched per request id;
- every error set is summarised by :func:`error_stats`: the signed median (bias), the
  median and the 90th percentile of |error|, and the count;
- load_hidden_fraction as :func:`hicache.report.metrics.summarize`.

With several measured runs of one scenario the reference is, item by item (batch,
request, op), the median over the runs that decided exactly like the prediction (a run
whose timing flipped a race decided other work; it is counted, not scored): one run
disturbed by another process on the machine then moves the reference less. Comparing one
measured run with another is the noise floor (:func:`noise_floor`): the error a perfect
predictor would still show against a single run.

Invariant: :func:`compare` never raises on empty inputs; every field is always present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hicache.report.metrics import summarize

SUMMARY_KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_mean_s", "itl_mean_s",
                "load_hidden_fraction", "load_time_s", "h2d_bytes", "d2h_bytes", "n_finished")
STEP_LANES = ("compute", "h2d", "cpu")  # rows that can open a batch's step


@dataclass(frozen=True)
class Run:
    """One run's frames: timeline, requests and decision log."""

    timeline: pd.DataFrame
    requests: pd.DataFrame
    decisions: list[tuple]


class DecisionsDiffer(ValueError):
    """The two runs' control planes decided differently: their batches are not the same
    work, so no per-batch or per-request error means anything."""


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """``(predicted - measured) / measured``; None when undefined."""
    if predicted is None or measured is None or measured == 0:
        return None
    if not (math.isfinite(predicted) and math.isfinite(measured)):
        return None
    return (float(predicted) - float(measured)) / float(measured)


def error_stats(rel: pd.Series | np.ndarray | list[float]) -> dict:
    """Signed median, median |error|, p90 |error| and count of relative errors (NaN
    dropped); the statistics are None when there is no error to summarise."""
    x = pd.Series(rel, dtype=np.float64).dropna().to_numpy()
    if not x.size:
        return {"n": 0, "median_rel_error": None, "median_abs_rel_error": None,
                "p90_abs_rel_error": None}
    a = np.abs(x)
    return {"n": int(x.size), "median_rel_error": float(np.median(x)),
            "median_abs_rel_error": float(np.median(a)),
            "p90_abs_rel_error": float(np.percentile(a, 90))}


def _rel(p: pd.Series, m: pd.Series) -> pd.Series:
    return (p - m) / m.where(m > 0)


def step_times(tl: pd.DataFrame) -> pd.DataFrame:
    """Per batch id with compute rows: ``start``, ``end`` and ``step_s`` (module doc)."""
    own = tl[(tl["batch"] >= 0) & tl["lane"].isin(STEP_LANES)
             & ((tl["lane"] != "h2d") | (tl["op"] == "load"))]
    comp = own[own["lane"] == "compute"]
    if comp.empty:
        return pd.DataFrame({"start": [], "end": [], "step_s": []},
                            index=pd.Index([], name="batch", dtype=np.int64))
    end = comp.groupby("batch")["end"].max()
    first = own[own["batch"].isin(end.index)].groupby("batch")["start"].min()
    df = pd.DataFrame({"first": first, "end": end,
                       "compute_start": comp.groupby("batch")["start"].min()})
    df = df.sort_values(["compute_start", "end"])
    prev_end = df["end"].shift(1).cummax().fillna(-np.inf)
    df["start"] = np.maximum(df["first"], np.minimum(prev_end, df["compute_start"]))
    df["step_s"] = df["end"] - df["start"]
    df.index.name = "batch"
    return df.sort_index()[["start", "end", "step_s"]]


def _median_of(series: list[pd.Series]) -> pd.Series:
    """Item by item, the median over runs of the items every run has."""
    if len(series) == 1:
        return series[0]
    return pd.concat(series, axis=1, join="inner").median(axis=1)


def match_steps(pred_tl: pd.DataFrame, meas_tl: pd.DataFrame | list[pd.DataFrame]
                ) -> pd.DataFrame:
    """One row per batch id present on both sides: predicted_s, measured_s (median over
    the measured timelines given), rel_error."""
    tls = meas_tl if isinstance(meas_tl, list) else [meas_tl]
    p = step_times(pred_tl)["step_s"]
    m = _median_of([step_times(t)["step_s"] for t in tls])
    df = pd.concat([p.rename("predicted_s"), m.rename("measured_s")], axis=1, join="inner")
    df.index.name = "batch"
    df["rel_error"] = _rel(df["predicted_s"], df["measured_s"])
    return df.reset_index()


def match_ttft(pred_req: pd.DataFrame, meas_req: pd.DataFrame | list[pd.DataFrame]
               ) -> pd.DataFrame:
    """One row per request id with a TTFT on both sides: predicted_s, measured_s (median
    over the measured runs given), rel_error, plus the prompt and cached tokens (for
    residual plots)."""
    reqs = meas_req if isinstance(meas_req, list) else [meas_req]
    p = pred_req.set_index("rid")["ttft"].dropna()
    m = _median_of([r.set_index("rid")["ttft"].dropna() for r in reqs])
    info = reqs[0].set_index("rid")[["prompt_tokens", "cached_tokens"]]
    df = pd.concat([p.rename("predicted_s"), m.rename("measured_s")], axis=1, join="inner")
    df = df.join(info, how="left")
    df.index.name = "rid"
    df["rel_error"] = _rel(df["predicted_s"], df["measured_s"])
    return df.reset_index()


def _per_batch(tl: pd.DataFrame, lane: str, op: str) -> pd.Series:
    rows = tl[(tl["lane"] == lane) & (tl["op"] == op) & (tl["batch"] >= 0)]
    return rows.groupby("batch")["duration"].sum()


def op_errors(pred_tl: pd.DataFrame, meas_tl: pd.DataFrame | list[pd.DataFrame]
              ) -> list[dict]:
    """Per (lane, op) on either side: row counts, per-batch duration errors over the
    batches present on both sides (:func:`error_stats`; measured: median over runs),
    medians and totals (of the first measured run)."""
    tls = meas_tl if isinstance(meas_tl, list) else [meas_tl]
    m0 = tls[0]
    out = []
    keys = sorted(set(zip(pred_tl["lane"], pred_tl["op"], strict=True))
                  | set(zip(m0["lane"], m0["op"], strict=True)))
    for lane, op in keys:
        p = pred_tl[(pred_tl["lane"] == lane) & (pred_tl["op"] == op)]
        m = m0[(m0["lane"] == lane) & (m0["op"] == op)]
        pb = _per_batch(pred_tl, lane, op)
        mb = _median_of([_per_batch(t, lane, op) for t in tls])
        both = pd.concat([pb.rename("p"), mb.rename("m")], axis=1, join="inner")
        stats = error_stats(_rel(both["p"], both["m"]))
        pt, mt = float(p["duration"].sum()), float(m["duration"].sum())
        out.append({
            "lane": lane, "op": op, "n_predicted": len(p), "n_measured": len(m),
            "n_matched_batches": stats.pop("n"), **stats,
            "predicted_total_s": pt, "measured_total_s": mt,
            "predicted_median_s": float(pb.median()) if len(pb) else None,
            "measured_median_s": float(mb.median()) if len(mb) else None,
            "total_rel_error": rel_error(pt, mt) if len(p) and len(m) else None,
        })
    return out


def first_mismatch(a: list[tuple], b: list[tuple]) -> int | None:
    """Index of the first differing decision (the shorter length if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_decisions(pred: list[tuple], meas: list[tuple], what: str = "predicted") -> dict:
    """The ``decisions`` record; raises :class:`DecisionsDiffer` naming the first
    difference when the logs differ."""
    i = first_mismatch(pred, meas)
    rec = {"predicted": len(pred), "measured": len(meas), "first_mismatch": i}
    if i is not None:
        a = pred[i] if i < len(pred) else "<end of log>"
        b = meas[i] if i < len(meas) else "<end of log>"
        raise DecisionsDiffer(
            f"not scored: the {what} and measured decision logs differ at decision {i} "
            f"of {len(pred)}/{len(meas)} ({what} {a!r}, measured {b!r}); batch and request "
            f"ids would name different work. Keep one batch in flight and no L3, or "
            f"change the scenario so both runtimes decide alike")
    return rec


def hidden(p: float | None, m: float | None) -> dict:
    return {"predicted": p, "measured": m,
            "abs_diff": None if p is None or m is None else abs(p - m)}


def compare(pred: Run, meas: Run | list[Run], *, what: str = "predicted") -> dict:
    """The comparison record (JSON-ready dict) of one predicted run and one or more
    measured runs of the same scenario. The reference is the measured runs that decided
    exactly as the prediction did (``runs``: how many of how many); raises
    :class:`DecisionsDiffer`, naming the first difference with the first run, when none
    did."""
    runs = meas if isinstance(meas, list) else [meas]
    same = [r for r in runs if r.decisions == pred.decisions]
    decisions = check_decisions(pred.decisions, (same or runs)[0].decisions, what)
    tls, reqs = [r.timeline for r in same], [r.requests for r in same]
    steps = match_steps(pred.timeline, tls)
    ttft = match_ttft(pred.requests, reqs)
    ps = summarize(pred.requests, pred.timeline)
    ms = [summarize(r, t) for r, t in zip(reqs, tls, strict=True)]

    def med(key: str) -> float | None:
        vals = [m[key] for m in ms if m[key] is not None]
        return float(np.median(vals)) if vals else None

    pct = {}
    for q in ("p50", "p90"):
        a, b = ps[f"ttft_{q}_s"], med(f"ttft_{q}_s")
        pct[q] = {"predicted_s": a, "measured_s": b, "rel_error": rel_error(a, b)}
    return {
        "scored": True,
        "decisions_equal": True,
        "decisions": decisions,
        "runs": {"measured": len(runs), "reference": len(same),
                 "all_decided_alike": len(same) == len(runs)},
        "batches": {"predicted": int(len(step_times(pred.timeline))),
                    "measured": int(len(step_times(tls[0]))), "matched": len(steps)},
        "step_time": {
            **error_stats(steps["rel_error"]),
            "predicted_median_s": float(steps["predicted_s"].median()) if len(steps) else None,
            "measured_median_s": float(steps["measured_s"].median()) if len(steps) else None,
            "predicted_total_s": float(steps["predicted_s"].sum()),
            "measured_total_s": float(steps["measured_s"].sum()),
        },
        "ttft": {"per_request": error_stats(ttft["rel_error"]), **pct},
        "ops": op_errors(pred.timeline, tls),
        "load_hidden_fraction": hidden(ps["load_hidden_fraction"], med("load_hidden_fraction")),
        "summary": {"predicted": {k: ps[k] for k in SUMMARY_KEYS},
                    "measured": {k: ms[0][k] for k in SUMMARY_KEYS}},
    }


def noise_floor(runs: list[Run]) -> dict:
    """Each later measured run compared with the first as if it predicted it, the
    statistics' medians over those pairs: the error no model can beat against a single
    run on this machine. ``{"scored": False, "reason": ...}`` without a second run that
    decided like the first."""
    pairs, reason = [], ""
    for r in runs[1:]:
        try:
            pairs.append(compare(r, runs[0], what="second measured"))
        except DecisionsDiffer as e:
            reason = str(e)
    if not pairs:
        return {"scored": False, "reason": reason if len(runs) > 1 else
                "one measured run: no noise floor"}

    def med(get) -> float | None:  # noqa: ANN001
        vals = [v for v in (get(c) for c in pairs) if v is not None]
        return float(np.median(vals)) if vals else None

    keys = ("median_rel_error", "median_abs_rel_error", "p90_abs_rel_error")
    ops = {(o["lane"], o["op"]) for c in pairs for o in c["ops"]}
    return {
        "scored": True, "pairs": len(pairs),
        "step_time": {k: med(lambda c, k=k: c["step_time"][k]) for k in keys},
        "ttft": {"per_request": {k: med(lambda c, k=k: c["ttft"]["per_request"][k])
                                 for k in keys}},
        "ops": [{"lane": lane, "op": op, **{k: med(
            lambda c, k=k, lo=(lane, op): next((o[k] for o in c["ops"]
                                                if (o["lane"], o["op"]) == lo), None))
            for k in keys}} for lane, op in sorted(ops)],
        "load_hidden_fraction": {"abs_diff": med(
            lambda c: c["load_hidden_fraction"]["abs_diff"])},
    }


def comparison_rows(cmp: dict) -> pd.DataFrame:
    """The flat table of comparison.csv: quantity, lane, op, n, predicted, measured,
    signed median, median |error|, p90 |error| and the noise floor's median |error|."""
    noise = cmp.get("noise") or {}
    nops = {(o["lane"], o["op"]): o for o in noise.get("ops", [])}

    def nfloor(*path) -> float | None:
        d = noise
        for k in path:
            d = (d or {}).get(k)
        return d

    st, tt = cmp["step_time"], cmp["ttft"]
    rows = [
        ("step_time", "compute", "", st["n"], st["predicted_median_s"],
         st["measured_median_s"], st["median_rel_error"], st["median_abs_rel_error"],
         st["p90_abs_rel_error"], nfloor("step_time", "median_abs_rel_error")),
        ("ttft_per_request", "", "", tt["per_request"]["n"], tt["p50"]["predicted_s"],
         tt["p50"]["measured_s"], tt["per_request"]["median_rel_error"],
         tt["per_request"]["median_abs_rel_error"], tt["per_request"]["p90_abs_rel_error"],
         nfloor("ttft", "per_request", "median_abs_rel_error")),
    ]
    lh = cmp["load_hidden_fraction"]
    rows.append(("load_hidden_fraction", "h2d", "load", None, lh["predicted"],
                 lh["measured"], None, lh["abs_diff"], None,
                 nfloor("load_hidden_fraction", "abs_diff")))
    for o in cmp["ops"]:
        n = nops.get((o["lane"], o["op"]), {})
        rows.append(("op_duration", o["lane"], o["op"], o["n_matched_batches"],
                     o["predicted_median_s"], o["measured_median_s"], o["median_rel_error"],
                     o["median_abs_rel_error"], o["p90_abs_rel_error"],
                     n.get("median_abs_rel_error")))
    cols = ["quantity", "lane", "op", "n", "predicted", "measured", "median_rel_error",
            "median_abs_rel_error", "p90_abs_rel_error", "noise_median_abs_rel_error"]
    df = pd.DataFrame(rows, columns=cols)
    df["n"] = df["n"].astype("Int64")
    return df
