"""``hicache-lab run``: simulate a scenario (and its variants) and write the reports.

Top-level imports stay light (argparse, pathlib): ``--help`` must start fast; the
simulator, pandas and matplotlib load when the command runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hicache.cli_common import (
    HelpFormatter,
    add_output_args,
    add_scenario_args,
    load_scenario_arg,
    scenario_source,
)

if TYPE_CHECKING:  # pydantic loads with the scenario, when the command runs
    from hicache.scenario import Scenario

DESCRIPTION = """\
Simulate a scenario: every variant it defines (or those picked with --variant) runs on the
SimPy model of the GPU's streams, PCIe links, host memory and L3 store, driven by the same
scheduler and cache tree as the real runtime. Prints a comparison table and writes, into
one folder per variant: summary.json, requests.csv, decisions.csv, timeline.parquet,
scenario.yaml (the resolved scenario), trace.json (open in https://ui.perfetto.dev) and
plots. The run folder appears only when the run is complete (run.json is its marker).

examples:
  hicache-lab run scenarios/quick.yaml
  hicache-lab run scenarios/quick.yaml --variant L1+L2 --set cache.hicache_ratio=3
  hicache-lab run --from-sglang "python -m sglang.launch_server --model-path \\
      meta-llama/Meta-Llama-3-8B-Instruct --enable-hierarchical-cache --hicache-ratio 2"
  hicache-lab run scenarios/quick.yaml --baseline scenarios/baselines/quick.json
"""

TABLE_METRICS = ["hit_rate", "device_hit_rate", "host_hit_rate", "l3_hit_rate", "ttft_mean_s",
                 "ttft_p90_s", "itl_p50_s", "request_throughput_rps",
                 "effective_input_throughput_tps", "load_hidden_fraction",
                 "h2d_gbps", "d2h_gbps"]


def _window(text: str) -> tuple[float, float]:
    a, sep, b = text.partition(":")
    try:
        lo, hi = float(a), float(b)
    except ValueError:
        lo = hi = float("nan")
    if not sep or not (0 <= lo < hi < float("inf")):
        raise argparse.ArgumentTypeError(f"expected START:END in simulated seconds with "
                                         f"0 <= START < END, got {text!r}")
    return lo, hi


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate a scenario and write reports",
                       description=DESCRIPTION, formatter_class=HelpFormatter)
    add_scenario_args(p, optional=True)
    p.add_argument("--variant", action="append", default=None, metavar="NAME",
                   help="run only this variant (repeatable; default: all)")
    from hicache.sglang.command import add_sglang_args

    add_sglang_args(p)
    add_output_args(p, "results/<scenario name>")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar or progress lines on stderr")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-trace", action="store_true",
                   help="skip trace.json (it can be tens of MB for long traces)")
    p.add_argument("--trace-window", type=_window, default=None, metavar="START:END",
                   help="write only the trace rows overlapping this window of simulated "
                        "seconds, e.g. 10:12")
    p.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="compare the guarded metrics with this baseline; exit 1 on drift")
    p.add_argument("--tolerance", type=float, default=0.01,
                   help="relative drift allowed against --baseline (default 0.01 = 1%%)")
    p.add_argument("--write-baseline", type=Path, default=None, metavar="FILE",
                   help="record this run's guarded metrics as a baseline")
    p.set_defaults(func=run)


def scenario_of(args: argparse.Namespace) -> Scenario:
    """The scenario to run: a file, an SGLang launch command over a base, or both."""
    if getattr(args, "from_sglang", None):
        from sim.from_sglang import scenario_from_args

        return scenario_from_args(args)
    if args.scenario is None:
        raise ValueError("run: give a SCENARIO file or --from-sglang COMMAND")
    return load_scenario_arg(args.scenario, args.overrides)


def select_variants(sc: Scenario, only: list[str] | None) -> list[tuple[str, Scenario]]:
    variants = sc.expand()
    if only:
        names = [n for n, _ in variants]
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise ValueError(f"--variant: unknown {unknown}; scenario has {names}")
        variants = [(n, v) for n, v in variants if n in only]
    return variants


def check_variants(variants: list[tuple[str, Scenario]]) -> None:
    """Every variant's hardware profile, before anything runs (the scenario itself was
    validated when it loaded; a profile's contents are the simulator's to check)."""
    from sim.hardware.profile import load_profile

    for _, vd in variants:
        try:
            load_profile(vd.hardware)
        except ValueError as e:  # name the scenario (and variant) that gave the profile
            raise ValueError(f"{vd.source}: hardware: {e}") from None


def run(args: argparse.Namespace) -> int:
    from hicache.report.outputs import RunFolder, safe_name, safe_names
    from sim.report import ReportOptions

    sc = scenario_of(args)
    source = scenario_source(args)
    variants = select_variants(sc, args.variant)
    check_variants(variants)
    if args.baseline:  # a missing, malformed or other scenario's baseline fails now
        from sim.baseline import read_baseline

        read_baseline(args.baseline, sc.name)
    if args.write_baseline:  # so does a baseline file that cannot be written
        from hicache.report.outputs import OutputFile

        OutputFile(args.write_baseline, overwrite=True, flag="--write-baseline")
    out = args.out or Path("results") / safe_name(sc.name)
    options = ReportOptions(plots=not args.no_plots, trace=not args.no_trace,
                            trace_window=args.trace_window)
    with RunFolder(out, overwrite=args.overwrite) as folder:  # checked before simulating
        summaries, requests = simulate_variants(variants, folder.path, source, options,
                                                progress=not args.no_progress)
        text = write_run_files(folder.path, sc, summaries, requests, options)
        folder.commit({"command": "run", "scenario": sc.name, "source": source,
                       "argv": sys.argv[1:], "variants": safe_names(summaries)})
    print(text)
    print(f"-> {out}")
    drift = _baselines(args, sc.name, summaries)
    incomplete = sum(s.get("n_unfinished", 0) for s in summaries.values())
    return 1 if drift or incomplete else 0  # requests that did not finish: never exit 0


def simulate_variants(variants: list[tuple[str, Scenario]], root: Path, source: str,
                      options: Any, *, progress: bool) -> tuple[dict[str, dict], dict]:
    """Simulate each variant into ``root/<safe name>``; (summaries, requests frames)."""
    from hicache.report.outputs import safe_names
    from sim.driver import simulate
    from sim.report import write_variant

    folders = safe_names(n for n, _ in variants)
    summaries: dict[str, dict] = {}
    requests: dict[str, Any] = {}
    for name, vd in variants:
        print(f"[{name}] simulating ...", flush=True)
        t0 = time.perf_counter()
        res = simulate(vd, name=name, source=source, progress=progress)
        wall = time.perf_counter() - t0
        summaries[name], requests[name] = write_variant(res, root / folders[name], vd,
                                                        wall=wall, options=options)
        s = summaries[name]
        print(f"[{name}] {s['n_finished']}/{res.requests} requests finished, "
              f"{s['sim_time_s']:.1f} s simulated in {wall:.1f} s wall")
        report_liveness(name, res)
        report_faults(name, s)
    return summaries, requests


def report_faults(name: str, summary: dict) -> None:
    """One line per injected fault: what it touched and cost (sim.fault_report)."""
    for f in summary.get("faults", ()):
        where = f"[{f['start']:g}, {f['end']:g}) s"
        if not f["applies"]:
            print(f"[{name}] fault {f['index']} {f['kind']} {where}: not applicable here")
            continue
        cost = (f"{f['requests_exposed']} request(s) exposed, {f['requests_lost_hits']} lost "
                f"L3 hits (+{f['extra_recompute_tokens']} recomputed tokens)")
        if "ttft_delta_mean_s" in f:
            cost += (f", TTFT {f['ttft_delta_mean_s']:+.3f} s on average vs the fault-free "
                     f"twin ({f['requests_slower']} slower)")
        print(f"[{name}] fault {f['index']} {f['kind']} {where}: {cost}")


def report_liveness(name: str, res: Any) -> None:
    """Name rejected requests (stdout) and unfinished ones (stderr)."""
    by_code: dict[str, list[tuple[int, str]]] = {}
    for rid, reason in sorted(res.rejected.items()):
        by_code.setdefault(reason.split(":", 1)[0], []).append((rid, reason))
    for code, items in by_code.items():
        rids = [rid for rid, _ in items]
        print(f"[{name}] {len(rids)} request(s) rejected, {code} (rid {_rids(rids)}); "
              f"first: rid {items[0][0]} {items[0][1].split(':', 1)[-1].strip()}")
    whys: dict[str, list[int]] = {}
    for rid, why in sorted(res.unfinished.items()):
        whys.setdefault(why, []).append(rid)
    for why, rids in whys.items():
        print(f"[{name}] ERROR: {len(rids)} request(s) did not finish (rid {_rids(rids)}): "
              f"{why}", file=sys.stderr)


def _rids(rids: list[int], show: int = 8) -> str:
    head = ", ".join(map(str, rids[:show]))
    return head + (f", ... {len(rids) - show} more" if len(rids) > show else "")


def write_run_files(root: Path, sc: Scenario, summaries: dict[str, dict], requests: dict,
                    options: Any) -> str:
    """The run folder's own files; returns the comparison table's text."""
    from hicache.report.compare import comparison_table, format_comparison
    from sim.report import dump_scenario, write_joint

    dump_scenario(sc.to_mapping(), root / "scenario.yaml")
    metrics = [m for m in TABLE_METRICS if any(s.get(m) is not None
                                               for s in summaries.values())]
    table = comparison_table(summaries, metrics)
    text = format_comparison(table)
    write_joint(root, summaries, requests, table, text, plots=options.plots)
    return text


def _baselines(args: argparse.Namespace, scenario: str, summaries: dict[str, dict]) -> int:
    from sim.baseline import check_baseline, write_baseline

    if args.write_baseline:
        write_baseline(summaries, args.write_baseline, scenario=scenario)
        print(f"baseline written: {args.write_baseline}")
    if args.baseline:
        drift = check_baseline(summaries, args.baseline, scenario=scenario,
                               rel=args.tolerance)
        for line in drift:
            print(f"DRIFT {line}")
        print(f"baseline {args.baseline}: {'drift' if drift else 'ok'} "
              f"({len(drift)} metric(s) beyond {args.tolerance:.1%})")
        return 1 if drift else 0
    return 0
