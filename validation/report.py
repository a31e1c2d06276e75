"""Files and tables of a validation: per scenario folder, one summary over all scenarios,
residual plots (relative error against tokens, context and bytes).

Invariant: every number printed or written comes from the comparison records
(:mod:`validation.compare`); nothing here computes an error of its own except the pooled
summary, which pools per-batch and per-request errors over scenarios.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from validation.compare import error_stats, match_steps, match_ttft


def clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def batch_features(pred) -> pd.DataFrame:  # noqa: ANN001 - sim.driver.SimResult
    """Per batch id: prefill tokens, decode requests, context tokens, load bytes (from the
    simulator's record of what each batch held; decisions are equal, so they are the
    measured batches too)."""
    shapes = dict(getattr(pred.replicas[0].runtime, "batch_shapes", {}))
    df = pd.DataFrame.from_dict(shapes, orient="index")
    df.index.name = "batch"
    return df


def write_scenario(v, out: Path) -> dict:  # noqa: ANN001 - validation.runner.Validation
    """Write one scenario's files into ``out``; return its JSON record."""
    from hicache.report.frames import write_timeline_parquet
    from hicache.report.plots import plot_overlay
    from validation.compare import comparison_rows

    out.mkdir(parents=True, exist_ok=True)
    record = clean({**v.info, **v.comparison})
    (out / "comparison.json").write_text(json.dumps(record, indent=2))
    write_timeline_parquet(v.pred_tl, out / "predicted_timeline.parquet")
    write_timeline_parquet(v.meas_tl, out / "measured_timeline.parquet")
    plot_overlay(v.pred_tl, v.meas_tl, out / "overlay.png")
    if not v.comparison.get("scored"):
        return record
    comparison_rows(v.comparison).to_csv(out / "comparison.csv", index=False)
    ref_tl, ref_req = ([r.timeline for r in v.reference] or [v.meas_tl],
                       [r.requests for r in v.reference] or [v.meas_req])
    steps = match_steps(v.pred_tl, ref_tl).set_index("batch").join(
        batch_features(v.predicted)).reset_index()
    steps.to_csv(out / "steps.csv", index=False)
    ttft = match_ttft(v.pred_req, ref_req)
    ttft.to_csv(out / "ttft.csv", index=False)
    plot_residuals(steps, ttft, v.pred_tl, v.meas_tl, out / "residuals.png")
    return record


def plot_residuals(steps: pd.DataFrame, ttft: pd.DataFrame, pred_tl: pd.DataFrame,
                   meas_tl: pd.DataFrame, path: Path) -> Path:
    """Relative error against: step tokens, step context, load bytes per layer, prompt
    tokens (TTFT). A model that misses an effect shows a trend, not a cloud about 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12.0, 7.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    panels = [
        (axes[0, 0], steps, "tokens", "step: tokens in the batch"),
        (axes[0, 1], steps, "context_tokens", "step: context tokens read"),
        (axes[1, 0], _load_errors(pred_tl, meas_tl), "bytes", "h2d load: bytes per row"),
        (axes[1, 1], ttft, "prompt_tokens", "TTFT per request: prompt tokens"),
    ]
    for ax, df, col, title in panels:
        if len(df) and col in df and df["rel_error"].notna().any():
            ax.scatter(df[col], df["rel_error"], s=10, alpha=0.6)
            if (df[col] > 0).all() and df[col].max() > 20 * max(df[col].min(), 1e-30):
                ax.set_xscale("log")
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set(title=title, xlabel=col, ylabel="(pred - meas) / meas")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _load_errors(pred_tl: pd.DataFrame, meas_tl: pd.DataFrame) -> pd.DataFrame:
    key = ["batch", "layer"]
    p = pred_tl[(pred_tl["lane"] == "h2d") & (pred_tl["op"] == "load")]
    m = meas_tl[(meas_tl["lane"] == "h2d") & (meas_tl["op"] == "load")]
    j = p.groupby(key)[["duration", "bytes"]].sum().join(
        m.groupby(key)["duration"].sum().rename("measured"), how="inner")
    j["rel_error"] = (j["duration"] - j["measured"]) / j["measured"].where(j["measured"] > 0)
    return j.reset_index()


def pooled(validations: list) -> dict:  # noqa: ANN001 - list of Validation
    """Errors pooled over every scored scenario (per batch, per request, per op), beside
    the pooled noise floor. The benchmark's and the targets' headline numbers."""
    scored = [v for v in validations if v.comparison.get("scored")]
    steps = [match_steps(v.pred_tl, [r.timeline for r in v.reference])["rel_error"]
             for v in scored]
    ttft = [match_ttft(v.pred_req, [r.requests for r in v.reference])["rel_error"]
            for v in scored]

    def cat(xs: list[pd.Series]) -> pd.Series:
        return pd.concat(xs, ignore_index=True) if xs else pd.Series([], dtype=float)

    noise_steps = [v.comparison["noise"]["step_time"]["median_abs_rel_error"]
                   for v in scored if v.comparison.get("noise", {}).get("scored")]
    noise_ttft = [v.comparison["noise"]["ttft"]["per_request"]["median_abs_rel_error"]
                  for v in scored if v.comparison.get("noise", {}).get("scored")]
    hid = [v.comparison["load_hidden_fraction"]["abs_diff"] for v in scored
           if v.comparison["load_hidden_fraction"]["abs_diff"] is not None]
    alike = sum(v.comparison["runs"]["reference"] for v in scored)
    runs = sum(v.comparison["runs"]["measured"] for v in scored)
    return {
        "scenarios": [v.name for v in validations],
        "scored": [v.name for v in scored],
        "decisions_equal": len(scored) == len(validations) and bool(validations),
        "runs_decided_alike": f"{alike}/{runs}",
        "step": error_stats(cat(steps)),
        "ttft_per_request": error_stats(cat(ttft)),
        "hidden_fraction_abs_diff_max": max(hid) if hid else None,
        "noise_floor_step_median": float(np.median(noise_steps)) if noise_steps else None,
        "noise_floor_ttft_median": float(np.median(noise_ttft)) if noise_ttft else None,
    }


def _f(v: Any, spec: str = "+.3f") -> str:
    return "-" if v is None else format(v, spec)


def table(records: list[dict]) -> str:
    """One line per scenario: decisions, batches, step and TTFT errors with noise floors,
    hidden fractions; ``NOT SCORED`` lines carry the reason."""
    head = (f"{'scenario':22} {'dec=':>4} {'batches':>7} {'step bias':>9} {'|step|':>6} "
            f"{'p90':>6} {'noise':>6} {'ttft|e|':>7} {'noise':>6} {'hidden p/m':>11}")
    lines = [head, "-" * len(head)]
    for r in records:
        name = str(r.get("name"))[:22]
        if not r.get("scored"):
            lines.append(f"{name:22} NOT SCORED: {r.get('reason', '?')}")
            continue
        st, tt, lh = r["step_time"], r["ttft"]["per_request"], r["load_hidden_fraction"]
        nz = r.get("noise") or {}
        ns = (nz.get("step_time") or {}).get("median_abs_rel_error")
        nt = ((nz.get("ttft") or {}).get("per_request") or {}).get("median_abs_rel_error")
        ok = f"{r['runs']['reference']}/{r['runs']['measured']}"
        lines.append(
            f"{name:22} {ok:>4} {r['batches']['matched']:>7} "
            f"{_f(st['median_rel_error']):>9} {_f(st['median_abs_rel_error'], '.3f'):>6} "
            f"{_f(st['p90_abs_rel_error'], '.3f'):>6} {_f(ns, '.3f'):>6} "
            f"{_f(tt['median_abs_rel_error'], '.3f'):>7} {_f(nt, '.3f'):>6} "
            f"{_f(lh['predicted'], '.2f'):>5}/{_f(lh['measured'], '.2f'):<5}")
    lines.append("dec=: measured runs that decided as the prediction did (the reference); "
                 "errors: (predicted - measured) / measured,\nstep per batch, TTFT per "
                 "request; noise: a second measured run against the first")
    return "\n".join(lines)


def op_table(records: list[dict]) -> str:
    """Per scenario and (lane, op): signed median, median and p90 |error|, noise floor."""
    head = (f"{'scenario':22} {'lane:op':20} {'n':>5} {'bias':>7} {'|err|':>6} {'p90':>6} "
            f"{'noise':>6}")
    lines = [head, "-" * len(head)]
    for r in records:
        if not r.get("scored"):
            continue
        noise = {(o["lane"], o["op"]): o for o in (r.get("noise") or {}).get("ops", [])}
        for o in r["ops"]:
            if not o["n_matched_batches"]:
                continue
            n = noise.get((o["lane"], o["op"]), {})
            lines.append(
                f"{str(r['name'])[:22]:22} {o['lane'] + ':' + o['op']:20} "
                f"{o['n_matched_batches']:>5} {_f(o['median_rel_error']):>7} "
                f"{_f(o['median_abs_rel_error'], '.3f'):>6} "
                f"{_f(o['p90_abs_rel_error'], '.3f'):>6} "
                f"{_f(n.get('median_abs_rel_error'), '.3f'):>6}")
    return "\n".join(lines)
