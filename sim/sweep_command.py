"""``hicache-lab sweep``: the command (arguments, output folder); the work is in
:mod:`sim.sweep` and :mod:`sim.sweep_exec`, imported when the command runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hicache.cli_common import HelpFormatter, add_scenario_args, load_scenario_arg

DESCRIPTION = """\
Run a scenario over a grid of overrides: every combination of the --grid values (first key
outermost) x the scenario's variants x --seeds. With --target, prints for each value of the
first key the smallest value of the second that meets it, in GiB of host memory and L3 too.

Writes into --out: sweep.parquet (one row per point and seed, every summary metric a
column; identical whichever executor ran it), sweep.csv, sweep.txt, answer.csv, plots,
timings.csv (wall time per point) and points/ (one file per finished point: an interrupted
sweep continues with --resume). A point that fails is recorded with its error and the
sweep goes on; the command then exits 1.

examples:
  hicache-lab sweep scenarios/quick.yaml --grid workload.num_clients=16,24,32 \\
      --grid cache.hicache_ratio=1.5,2,3,4 --target 'ttft_p90_s<=2.0' --out results/sweep
  hicache-lab sweep scenarios/quick.yaml --grid cache.device_tokens=2e4,4e4 --seeds 0,1,2 \\
      --executor ray --address auto --out results/sweep-ray
"""


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 0,1,2, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected distinct integers >= 0, got {text!r}")
    return seeds


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a scenario over a grid; answer a capacity target",
                       description=DESCRIPTION, formatter_class=HelpFormatter)
    add_scenario_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a dotted scenario key and its values (repeatable; first outermost)")
    p.add_argument("--variant", action="append", default=None, metavar="NAME",
                   help="run only this variant (repeatable; default: all)")
    p.add_argument("--seeds", type=_seeds, default=None, metavar="S1,S2,...",
                   help="run every point with each seed (default: the scenario's seed)")
    p.add_argument("--target", default=None, metavar="METRIC<=VALUE",
                   help="e.g. 'ttft_p90_s<=2.0' (also >=, <, >); a point meets it when "
                        "every seed does")
    p.add_argument("--executor", choices=("local", "ray", "serial"), default="local",
                   help="local: separate processes on all cores (default); ray: a Ray "
                        "cluster (--address) or a local Ray instance; serial: this process")
    p.add_argument("--address", default=None,
                   help="Ray cluster address (e.g. auto, or ray://head:10001)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep in --out: points already done are skipped")
    p.add_argument("--overwrite", action="store_true", help="start --out afresh")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run, interrupted="the points finished so far are kept in --out "
                   "(no .complete marker); --resume continues the sweep")


def _open_folder(out: Path, spec: dict[str, Any], *, resume: bool, overwrite: bool) -> None:
    """Create ``out`` for this sweep, or reuse it for ``--resume`` of the same sweep."""
    import shutil

    from hicache.report.outputs import OutputError

    manifest = out / "sweep.json"
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if overwrite:
            if not manifest.exists():
                raise OutputError(f"--out {out}: not a hicache-lab sweep (no sweep.json); "
                                  "refusing to replace it even with --overwrite")
            shutil.rmtree(out)
        elif not resume:
            raise OutputError(f"--out {out}: already holds "
                              f"{'a sweep' if manifest.exists() else 'other files'}; pass "
                              "--resume to continue it, --overwrite to start afresh, or "
                              "choose another --out")
        elif not manifest.exists():
            raise OutputError(f"--out {out}: no sweep.json here, nothing to resume")
        elif json.loads(manifest.read_text()) != json.loads(json.dumps(spec, default=str)):
            raise OutputError(f"--out {out}: holds a different sweep (scenario, grid, "
                              "variants or seeds differ); --resume needs the same command")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".complete").unlink(missing_ok=True)  # written last, when all is done
        manifest.write_text(json.dumps(spec, indent=2, default=str) + "\n")
    except OSError as e:
        raise OutputError(f"--out {out}: cannot write there ({e.strerror or e})") from None


def run(args: argparse.Namespace) -> int:
    from sim.sweep import (
        TABLE_METRICS,
        answer,
        format_answer,
        format_sweep,
        parse_grid,
        parse_target,
        run_sweep,
        tasks_for,
    )
    from sim.sweep_exec import PointStore

    grid = parse_grid(args.grid)
    target = parse_target(args.target) if args.target else None
    d = load_scenario_arg(args.scenario, args.overrides)
    spec = {"scenario": d.to_mapping(), "grid": grid, "variants": args.variant,
            "seeds": args.seeds}
    tasks = tasks_for(d, grid, variants=args.variant, seeds=args.seeds,
                      source=str(args.scenario))  # every point checked before --out exists
    out: Path = args.out
    _open_folder(out, spec, resume=args.resume, overwrite=args.overwrite)
    timings: dict[int, float] = {}
    df = run_sweep(d, grid, variants=args.variant, target=target, source=str(args.scenario),
                   seeds=args.seeds, executor=args.executor, address=args.address,
                   store=PointStore(out), timings=timings, tasks=tasks)
    with open(out / "timings.csv", "a") as f:  # appended across --resume
        f.writelines(f"{i},{wall:.3f}\n" for i, wall in sorted(timings.items()))
    write_table(df, out / "sweep.parquet")
    df.to_csv(out / "sweep.csv", index=False)
    cols = [*grid, "variant", *(["seed"] if args.seeds else []), *TABLE_METRICS]
    if target:
        cols += [target.metric, "meets_target"]
    text = format_sweep(df, list(dict.fromkeys(cols)))
    (out / "sweep.txt").write_text(text + "\n")
    print(text)
    if not args.no_plots:
        from sim.sweep_plots import plot_sweep

        plot_sweep(df[df["error"].isna()], grid, out, target)
    if target:
        ans = answer(df, grid)
        ans.to_csv(out / "answer.csv", index=False)
        print("\n" + format_answer(ans, target))
    failed = df[df["error"].notna()]
    for r in failed.to_dict("records"):
        where = " ".join(f"{k}={r[k]}" for k in grid)
        print(f"FAILED {where} [{r['variant']}] seed {r['seed']}: {r['error']}", file=sys.stderr)
    (out / ".complete").write_text("")
    print(f"-> {out}" + (f"  ({len(failed)} of {len(df)} runs failed)" if len(failed) else ""))
    return 1 if len(failed) else 0


def write_table(df: Any, path: Path) -> Path:
    """The sweep table as Parquet: grid columns of mixed types are stored as text."""
    import pandas as pd

    table = df.copy()
    for c in table.columns:
        if table[c].dtype == object and c not in ("variant", "error"):
            values = [v for v in table[c] if v is not None]
            numeric = all(isinstance(v, int | float) and not isinstance(v, bool)
                          for v in values)
            table[c] = (pd.to_numeric(table[c]) if numeric and values else
                        table[c].map(lambda v: None if v is None else str(v)))
    table.to_parquet(path, index=False)
    return path
