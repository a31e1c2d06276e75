"""``hicache-lab run SCENARIO.yaml``: simulate a scenario (and its variants), write reports.

Per variant: summary.json, requests.csv, rounds.csv, decisions.csv, timeline.parquet,
trace.json (Perfetto), hit_rate_by_round.png, ttft_cdf.png, gantt.png. With several
variants each goes to DIR/<variant>/ and DIR gets comparison.csv/.txt and joint plots.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from pathlib import Path

import pandas as pd

from hicache.report.compare import comparison_table, format_table
from hicache.report.frames import requests_frame, timeline_frame, write_timeline_parquet
from hicache.report.metrics import hit_rate_by_round, summarize
from hicache.report.perfetto import write_chrome_trace
from hicache.report.plots import (
    plot_gantt,
    plot_hit_rate_by_round,
    plot_ttft_cdf,
    plot_variant_bars,
)
from hicache.scenario import load_scenario
from sim.baseline import check_baseline, write_baseline
from sim.driver import SimResult, simulate
from sim.hardware.profile import load_profile

TABLE_METRICS = ["hit_rate", "device_hit_rate", "host_hit_rate", "l3_hit_rate", "ttft_mean_s",
                 "ttft_p90_s", "itl_p50_s", "request_throughput_rps",
                 "effective_input_throughput_tps", "gpu_busy_fraction", "load_hidden_fraction",
                 "h2d_gbps", "d2h_gbps"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate a YAML scenario", description=__doc__)
    p.add_argument("scenario", type=Path)
    p.add_argument("--out", type=Path, default=None, help="output folder (results/<name>)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario key, e.g. cache.page_size=32")
    p.add_argument("--variant", action="append", default=None,
                   help="run only this variant (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--baseline", type=Path, default=None,
                   help="compare with this baseline (JSON); exit 1 when a metric drifts")
    p.add_argument("--tolerance", type=float, default=0.01,
                   help="relative drift allowed against --baseline (default 0.01)")
    p.add_argument("--write-baseline", type=Path, default=None,
                   help="write this run's guarded metrics as a baseline (JSON)")
    p.set_defaults(func=run)


def timeline_of(result: SimResult) -> pd.DataFrame:
    frames = []
    for i, rep in enumerate(result.replicas):
        df = timeline_frame(rep.timeline)
        if len(result.replicas) > 1:
            df["replica"] = i
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else timeline_frame([])


def write_variant(result: SimResult, out: Path, wall: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    req = requests_frame(result.records)
    tl = timeline_of(result)
    summary = summarize(req, tl)
    summary.update({"variant": result.name, "sim_time_s": result.sim_time,
                    "wall_s": round(wall, 3), "timeline_rows": len(tl)})
    rt = [rep.runtime for rep in result.replicas]
    summary["h2d_bytes_accounted"] = sum(r.bytes_accounted["h2d"] for r in rt)
    summary["d2h_bytes_accounted"] = sum(r.bytes_accounted["d2h"] for r in rt)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    req.to_csv(out / "requests.csv", index=False)
    hit_rate_by_round(req).to_csv(out / "rounds.csv", index=False)
    with open(out / "decisions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["replica", "decision", "args"])
        for d in result.decisions:
            w.writerow([d[0], d[1], " ".join(map(str, d[2:]))])
    write_timeline_parquet(tl, out / "timeline.parquet")
    write_chrome_trace(tl, out / "trace.json", process_name=result.name)
    plot_hit_rate_by_round({result.name: req}, out / "hit_rate_by_round.png")
    plot_ttft_cdf({result.name: req}, out / "ttft_cdf.png")
    plot_gantt(tl, out / "gantt.png")
    return summary


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def run(args: argparse.Namespace) -> int:
    sc = load_scenario(args.scenario, args.overrides)
    variants = sc.expand()
    if args.variant:
        names = {n for n, _ in variants}
        unknown = set(args.variant) - names
        if unknown:
            raise ValueError(f"--variant: unknown {sorted(unknown)}; scenario has {sorted(names)}")
        variants = [(n, v) for n, v in variants if n in args.variant]
    for _, vd in variants:  # every variant is validated; hardware files checked before runs
        load_profile(vd.hardware)
    out = args.out or Path("results") / _slug(sc.name)
    summaries, requests = {}, {}
    for name, vd in variants:
        print(f"[{name}] simulating ...", flush=True)
        t0 = time.perf_counter()
        res = simulate(vd, name=name, progress=not args.no_progress)
        wall = time.perf_counter() - t0
        folder = out if len(variants) == 1 else out / _slug(name)
        summaries[name] = write_variant(res, folder, wall)
        requests[name] = requests_frame(res.records)
        s = summaries[name]
        print(f"[{name}] {res.requests} requests, {s['sim_time_s']:.1f} s simulated in "
              f"{wall:.1f} s wall -> {folder}")
    table = comparison_table(summaries, [m for m in TABLE_METRICS
                                         if any(m in s for s in summaries.values())])
    text = format_table(table)
    print(text)
    if len(variants) > 1:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "comparison.csv")
        (out / "comparison.txt").write_text(text + "\n")
        plot_hit_rate_by_round(requests, out / "hit_rate_by_round.png")
        plot_ttft_cdf(requests, out / "ttft_cdf.png")
        plot_variant_bars(summaries, "effective_input_throughput_tps",
                          out / "effective_throughput.png")
    if args.write_baseline:
        write_baseline(summaries, args.write_baseline)
        print(f"baseline written: {args.write_baseline}")
    if args.baseline:
        drift = check_baseline(summaries, args.baseline, rel=args.tolerance)
        for line in drift:
            print(f"DRIFT {line}")
        print(f"baseline {args.baseline}: {'drift' if drift else 'ok'} "
              f"({len(drift)} metric(s) beyond {args.tolerance:.1%})")
        return 1 if drift else 0
    return 0
