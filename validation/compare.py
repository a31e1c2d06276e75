"""Predicted (simulator) versus measured (torch runtime) runs of one scenario, as numbers.

Pure functions of timeline and request frames (:mod:`hicache.report.frames`); no runtime.

Definitions (relative error is always ``(predicted - measured) / measured``, ``None`` when
the measured value is 0 or missing):
- step time of a batch = last ``compute`` row end - first ``compute`` row start of that
  batch id (the simulator writes one row per batch, the runtime one per layer); batches
  are matched by id, which both runtimes share when their decision logs are equal;
- per-operation duration of (lane, op) in a batch = the sum of that batch's row durations
  on that lane and op; its error is the median absolute relative error over the batches
  present on both sides (and ``total_rel_error`` compares sums over all rows);
- TTFT p50/p90 and load_hidden_fraction as :func:`hicache.report.metrics.summarize`.

Invariant: :func:`compare` never raises on empty inputs; every field is always present.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hicache.report.metrics import summarize

SUMMARY_KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_mean_s", "itl_mean_s", "gpu_busy_fraction",
                "load_hidden_fraction", "load_time_s", "h2d_bytes", "d2h_bytes", "n_finished")


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """``(predicted - measured) / measured``; None when undefined."""
    if predicted is None or measured is None or measured == 0:
        return None
    if not (math.isfinite(predicted) and math.isfinite(measured)):
        return None
    return (float(predicted) - float(measured)) / float(measured)


def step_times(tl: pd.DataFrame) -> pd.Series:
    """Batch id -> step time (s) from the compute rows of a timeline frame."""
    comp = tl[(tl["lane"] == "compute") & (tl["batch"] >= 0)]
    g = comp.groupby("batch", sort=True)
    return (g["end"].max() - g["start"].min()).rename("step_s")


def match_steps(pred_tl: pd.DataFrame, meas_tl: pd.DataFrame) -> pd.DataFrame:
    """One row per batch id present on both sides: predicted_s, measured_s, rel_error."""
    p, m = step_times(pred_tl), step_times(meas_tl)
    df = pd.concat([p.rename("predicted_s"), m.rename("measured_s")], axis=1, join="inner")
    df.index.name = "batch"
    df["rel_error"] = (df["predicted_s"] - df["measured_s"]) / df["measured_s"].where(
        df["measured_s"] > 0)
    return df.reset_index()


def _median_abs(x: pd.Series) -> float | None:
    x = x.dropna()
    return float(np.median(np.abs(x.to_numpy(np.float64)))) if len(x) else None


def op_errors(pred_tl: pd.DataFrame, meas_tl: pd.DataFrame) -> list[dict]:
    """Per (lane, op) on either side: row counts, total and median per-batch durations,
    median absolute relative error over matched batches and the error of the totals."""
    out = []
    keys = sorted(set(zip(pred_tl["lane"], pred_tl["op"], strict=True))
                  | set(zip(meas_tl["lane"], meas_tl["op"], strict=True)))
    for lane, op in keys:
        p = pred_tl[(pred_tl["lane"] == lane) & (pred_tl["op"] == op)]
        m = meas_tl[(meas_tl["lane"] == lane) & (meas_tl["op"] == op)]
        pb = p[p["batch"] >= 0].groupby("batch")["duration"].sum()
        mb = m[m["batch"] >= 0].groupby("batch")["duration"].sum()
        both = pd.concat([pb.rename("p"), mb.rename("m")], axis=1, join="inner")
        both = both[both["m"] > 0]
        errs = (both["p"] - both["m"]) / both["m"]
        pt, mt = float(p["duration"].sum()), float(m["duration"].sum())
        out.append({
            "lane": lane, "op": op, "n_predicted": len(p), "n_measured": len(m),
            "n_matched_batches": len(both),
            "predicted_total_s": pt, "measured_total_s": mt,
            "predicted_median_s": float(pb.median()) if len(pb) else None,
            "measured_median_s": float(mb.median()) if len(mb) else None,
            "median_abs_rel_error": _median_abs(errs),
            "total_rel_error": rel_error(pt, mt) if len(p) and len(m) else None,
        })
    return out


def first_mismatch(a: list[tuple], b: list[tuple]) -> int | None:
    """Index of the first differing decision (the shorter length if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(pred_tl: pd.DataFrame, meas_tl: pd.DataFrame, pred_req: pd.DataFrame,
            meas_req: pd.DataFrame, pred_decisions: list[tuple],
            meas_decisions: list[tuple]) -> dict:
    """The comparison record (JSON-ready dict) of one predicted and one measured run."""
    steps = match_steps(pred_tl, meas_tl)
    ps, ms = summarize(pred_req, pred_tl), summarize(meas_req, meas_tl)
    mismatch = first_mismatch(pred_decisions, meas_decisions)
    ttft = {}
    for q in ("p50", "p90"):
        a, b = ps[f"ttft_{q}_s"], ms[f"ttft_{q}_s"]
        ttft[q] = {"predicted_s": a, "measured_s": b, "rel_error": rel_error(a, b)}
    return {
        "decisions_equal": mismatch is None,
        "decisions": {"predicted": len(pred_decisions), "measured": len(meas_decisions),
                      "first_mismatch": mismatch},
        "batches": {"predicted": int(step_times(pred_tl).size),
                    "measured": int(step_times(meas_tl).size), "matched": len(steps)},
        "step_time": {
            "median_abs_rel_error": _median_abs(steps["rel_error"]),
            "median_rel_error": (float(steps["rel_error"].dropna().median())
                                 if steps["rel_error"].notna().any() else None),
            "predicted_median_s": float(steps["predicted_s"].median()) if len(steps) else None,
            "measured_median_s": float(steps["measured_s"].median()) if len(steps) else None,
            "predicted_total_s": float(steps["predicted_s"].sum()),
            "measured_total_s": float(steps["measured_s"].sum()),
        },
        "ops": op_errors(pred_tl, meas_tl),
        "ttft": ttft,
        "load_hidden_fraction": {"predicted": ps["load_hidden_fraction"],
                                 "measured": ms["load_hidden_fraction"]},
        "summary": {"predicted": {k: ps[k] for k in SUMMARY_KEYS},
                    "measured": {k: ms[k] for k in SUMMARY_KEYS}},
    }


def comparison_rows(cmp: dict) -> pd.DataFrame:
    """The flat table of comparison.csv: quantity, lane, op, n, predicted, measured,
    rel_error (one row per headline quantity, then one per (lane, op))."""
    st = cmp["step_time"]
    rows = [
        ("step_time_median_s", "compute", "", cmp["batches"]["matched"],
         st["predicted_median_s"], st["measured_median_s"],
         rel_error(st["predicted_median_s"], st["measured_median_s"])),
        ("step_time_median_abs_rel_error", "compute", "", cmp["batches"]["matched"],
         None, None, st["median_abs_rel_error"]),
    ]
    for q, v in cmp["ttft"].items():
        rows.append((f"ttft_{q}_s", "", "", None, v["predicted_s"], v["measured_s"],
                     v["rel_error"]))
    lh = cmp["load_hidden_fraction"]
    rows.append(("load_hidden_fraction", "h2d", "load", None, lh["predicted"], lh["measured"],
                 rel_error(lh["predicted"], lh["measured"])))
    rows.append(("decisions_equal", "", "", cmp["decisions"]["predicted"],
                 float(cmp["decisions_equal"]), None, None))
    for o in cmp["ops"]:
        rows.append(("op_duration_median_abs_rel_error", o["lane"], o["op"],
                     o["n_matched_batches"], o["predicted_median_s"], o["measured_median_s"],
                     o["median_abs_rel_error"]))
    cols = ["quantity", "lane", "op", "n", "predicted", "measured", "rel_error"]
    df = pd.DataFrame(rows, columns=cols)
    df["n"] = df["n"].astype("Int64")
    return df
