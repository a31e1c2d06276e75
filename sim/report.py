"""The files of a simulated run: one folder per variant, joint files in the run folder.

    OUT/run.json                      manifest, written last (see hicache.report.outputs)
    OUT/scenario.yaml                 the resolved scenario (after --set / --from-sglang)
    OUT/comparison.csv, .txt          one column per variant
    OUT/hit_rate_*.png, ttft_cdf.png, effective_throughput.png
    OUT/<variant>/summary.json, requests.csv, decisions.csv, timeline.parquet,
                  scenario.yaml (this variant's resolved scenario), rounds.csv (workloads
                  with rounds), trace.json (unless --no-trace), *.png (unless --no-plots)

Invariant: ``timeline.parquet`` always has a ``replica`` column; nothing here reads a
wall clock except what the caller passes in (``wall``).
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from hicache.report.frames import requests_frame, timeline_frame, write_timeline_parquet
from hicache.report.metrics import cliff_round, hit_rate_by_round, summarize
from hicache.report.plots import has_rounds
from hicache.runtime.handles import Kind
from sim.driver import SimResult
from sim.fault_report import fault_costs


@dataclass(frozen=True)
class ReportOptions:
    """What a run writes besides its tables: plots and the Perfetto trace (``window`` in
    simulated seconds keeps only the rows overlapping it)."""

    plots: bool = True
    trace: bool = True
    trace_window: tuple[float, float] | None = None


def timeline_of(result: SimResult) -> pd.DataFrame:
    """Every replica's timeline in one frame, with a ``replica`` column (always)."""
    frames = []
    for i, rep in enumerate(result.replicas):
        df = timeline_frame(rep.timeline)
        df["replica"] = i
        frames.append(df)
    if not frames:
        return timeline_frame([]).assign(replica=pd.Series(dtype="int64"))
    return pd.concat(frames, ignore_index=True)


def summary_of(result: SimResult, req: pd.DataFrame, tl: pd.DataFrame,
               wall: float | None = None) -> dict[str, Any]:
    """The flat summary of a run: :func:`summarize` plus run facts (JSON-safe values)."""
    s = summarize(req, tl)
    rt = runtimes_of(result)
    s.update({"variant": result.name, "replicas": len(result.replicas),
              "sim_time_s": result.sim_time, "timeline_rows": len(tl),
              "h2d_bytes_accounted": sum(r.bytes_accounted["h2d"] for r in rt),
              "d2h_bytes_accounted": sum(r.bytes_accounted["d2h"] for r in rt),
              "l3_write_bytes": sum(r.l3_bytes["write"] for r in rt),  # L2 -> L3 stores
              "l3_read_bytes": sum(r.l3_bytes["read"] for r in rt),  # L3 -> L2 prefetches
              # liveness: refused on arrival (by reason code), and never finished
              "n_rejected": len(result.rejected),
              "rejected_by_reason": dict(Counter(r.split(":", 1)[0]
                                                 for r in result.rejected.values())),
              "n_unfinished": len(result.unfinished)})
    if result.stall:
        s["stall"] = result.stall
    if has_rounds(req):
        s["cliff_round"] = cliff_round(hit_rate_by_round(req))
    clients = [r.l3_client for r in rt if r.l3_client is not None]
    if clients:  # the torch runtime's counter names (hicache.tiers.l3_guard.COUNTERS)
        s["l3_faults"] = {k: sum(c.counts[k] for c in clients) for k in clients[0].counts}
    if result.faults is not None:
        faults, totals = fault_costs(result.faults, result.records, rt[0].page_size,
                                     result.extra.get("fault_twin"))
        s["faults"] = faults
        s.update(totals)
    s.update(capacity_of(result))
    if wall is not None:
        s["wall_s"] = round(wall, 3)
    return {k: _json_safe(v) for k, v in s.items()}


def runtimes_of(result: SimResult) -> list[Any]:
    """The distinct runtimes under the replicas (replicas may share one)."""
    out = {}
    for rep in result.replicas:
        rt = getattr(rep.runtime, "base_runtime", rep.runtime)
        out[id(rt)] = rt
    return list(out.values())


def capacity_of(result: SimResult) -> dict[str, Any]:
    """Cache sizes per GPU, in tokens and GiB (KV of all layers on one TP rank), and the
    bytes the L3 store held at the end (an L3 shared by replicas counted once)."""
    rt = runtimes_of(result)[0] if result.replicas else None
    if rt is None:
        return {}
    page, kv = rt.page_size, rt.model.kv_bytes_per_token()
    l1 = rt.device_sizes.get(Kind.FULL, 0) * page
    l2 = rt.host_sizes.get(Kind.FULL, 0) * page
    stores = {id(r.runtime.l3): r.runtime.l3 for r in result.replicas if r.runtime.l3}
    return {"l1_tokens": l1, "l2_tokens": l2, "kv_bytes_per_token": kv,
            "l1_gib": l1 * kv / 2**30, "l2_gib": l2 * kv / 2**30,
            "l3_stored_gib": sum(s.used for s in stores.values()) / 2**30}


def _json_safe(v: Any) -> Any:
    if hasattr(v, "item") and not isinstance(v, str | bytes):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def dump_scenario(d: Any, path: Path) -> Path:
    """The resolved scenario as YAML (a Scenario, or a plain mapping)."""
    data = d.to_mapping() if hasattr(d, "to_mapping") else dict(d)
    path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    return path


def write_variant(result: SimResult, folder: Path, scenario: Any, *,
                  wall: float | None = None, options: ReportOptions = ReportOptions()
                  ) -> tuple[dict[str, Any], pd.DataFrame]:
    """Write one variant's files into ``folder``; return its summary and requests frame."""
    folder.mkdir(parents=True, exist_ok=True)
    req = requests_frame(result.records)
    tl = timeline_of(result)
    summary = summary_of(result, req, tl, wall)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    dump_scenario(scenario, folder / "scenario.yaml")
    req.to_csv(folder / "requests.csv", index=False)
    if has_rounds(req):
        hit_rate_by_round(req).to_csv(folder / "rounds.csv", index=False)
    with open(folder / "decisions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["replica", "decision", "args"])
        for d in result.decisions:
            w.writerow([d[0], d[1], " ".join(map(str, d[2:]))])
    write_timeline_parquet(tl, folder / "timeline.parquet")
    if options.trace:
        from hicache.report.perfetto import write_chrome_trace

        write_chrome_trace(tl, folder / "trace.json", process_name=result.name,
                           window=options.trace_window)
    if options.plots:
        from hicache.report.plots import plot_gantt, plot_hit_rate, plot_ttft_cdf

        plot_hit_rate({result.name: req}, folder)
        plot_ttft_cdf({result.name: req}, folder / "ttft_cdf.png")
        plot_gantt(tl, folder / "gantt.png")
    return summary, req


def write_joint(folder: Path, summaries: Mapping[str, dict], requests: Mapping[str, Any],
                table: pd.DataFrame, text: str, *, plots: bool = True) -> None:
    """The run folder's comparison files (and joint plots) over all variants."""
    table.T.to_csv(folder / "comparison.csv")
    (folder / "comparison.txt").write_text(text + "\n")
    if plots and len(summaries) > 1:
        from hicache.report.plots import plot_hit_rate, plot_ttft_cdf, plot_variant_bars

        plot_hit_rate(dict(requests), folder)
        plot_ttft_cdf(dict(requests), folder / "ttft_cdf.png")
        plot_variant_bars(dict(summaries), "effective_input_throughput_tps",
                          folder / "effective_throughput.png")
