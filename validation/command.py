"""``hicache-lab validate SCENARIO --profile P.yaml``: predicted versus measured, one variant.

Runs the scenario (its first variant, or ``--variant``) on the TorchRuntime and in the
simulator with the given hardware profile and the same model shape, then writes to --out:
comparison.json (every field of :func:`validation.compare.compare` plus run info),
comparison.csv (flat table), steps.csv (per-batch step times), overlay.png, and both
timelines as parquet. Prints a short table. torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas loads when the command runs: --help must start fast
    import pandas as pd


DESCRIPTION = """\
Run one variant of a scenario on the real torch runtime (CUDA streams, or one worker thread
per stream on CPU) and in the simulator with the given hardware profile, then compare them
batch by batch: step times, TTFT, the fraction of loads hidden behind compute, and whether
both made the same decisions. Writes comparison.json/.csv, steps.csv, both timelines and
overlay.png into --out.

example:
  hicache-lab validate scenarios/validation/cpu_loop.yaml --profile results/cpu.yaml \\
      --device cpu --out results/validate
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    from hicache.cli_common import HelpFormatter

    p = sub.add_parser("validate", help="compare the simulator's prediction with a torch run",
                       description=DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("scenario", type=Path)
    p.add_argument("--profile", type=Path, required=True, help="hardware profile YAML")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    p.add_argument("--out", type=Path, default=None, help="output folder "
                   "(default results/validate/<scenario name>)")
    p.add_argument("--variant", default=None, help="variant to run (default: the first)")
    p.add_argument("--torch-trace", type=Path, default=None, metavar="PATH",
                   help="write a torch.profiler Chrome trace of the measured run to PATH "
                   "(as the scenario key run.torch_profiler)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario key, e.g. seed=3")
    p.set_defaults(func=run)


def pick_variant(d, variant: str | None, source: str):  # noqa: ANN001, ANN201 - Scenario
    variants = d.expand()
    if variant is None:
        return variants[0]
    for name, body in variants:
        if name == variant:
            return name, body
    raise ValueError(f"--variant: unknown {variant!r}; scenario has "
                     f"{[n for n, _ in variants]}")


def _clean(x):
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def headline(cmp: dict) -> pd.DataFrame:
    """The printed table: quantity x (predicted, measured, rel_error)."""
    import pandas as pd

    st, lh = cmp["step_time"], cmp["load_hidden_fraction"]
    rows = {
        "step_time_median_s": (st["predicted_median_s"], st["measured_median_s"],
                               st["median_abs_rel_error"]),
        "ttft_p50_s": tuple(cmp["ttft"]["p50"].values()),
        "ttft_p90_s": tuple(cmp["ttft"]["p90"].values()),
        "load_hidden_fraction": (lh["predicted"], lh["measured"], None),
        "batches(matched)": (cmp["batches"]["predicted"], cmp["batches"]["measured"],
                             cmp["batches"]["matched"]),
        "decisions_equal": (cmp["decisions"]["predicted"], cmp["decisions"]["measured"],
                            float(cmp["decisions_equal"])),
    }
    df = pd.DataFrame.from_dict(rows, orient="index",
                                columns=["predicted", "measured", "rel_err|matched"])
    df.index.name = "quantity"
    return df.astype(float)


def write(v, out: Path, meta: dict) -> dict:
    """Write the validation's files into ``out``; return the JSON record."""
    from hicache.report.frames import write_timeline_parquet
    from hicache.report.plots import plot_overlay
    from validation.compare import comparison_rows, match_steps

    out.mkdir(parents=True, exist_ok=True)
    record = _clean({**meta, **v.info, **v.comparison})
    (out / "comparison.json").write_text(json.dumps(record, indent=2))
    comparison_rows(v.comparison).to_csv(out / "comparison.csv", index=False)
    match_steps(v.pred_tl, v.meas_tl).to_csv(out / "steps.csv", index=False)
    write_timeline_parquet(v.pred_tl, out / "predicted_timeline.parquet")
    write_timeline_parquet(v.meas_tl, out / "measured_timeline.parquet")
    plot_overlay(v.pred_tl, v.meas_tl, out / "overlay.png")
    return record


def run(args: argparse.Namespace) -> int:
    from hicache.scenario import load_scenario

    if not args.profile.is_file():
        raise FileNotFoundError(f"--profile: no such file {args.profile}")
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    d = load_scenario(args.scenario, args.overrides)
    name, body = pick_variant(d, args.variant, str(args.scenario))
    from validation.runner import validate

    print(f"[{d.name}/{name}] running on {device} and simulating ...", flush=True)
    v = validate(body, args.profile, device=device, name=name, source=str(args.scenario),
                 torch_trace=args.torch_trace)
    from hicache.report.outputs import safe_name

    out = args.out or Path("results") / "validate" / safe_name(str(d.name))
    write(v, out, {"scenario": str(args.scenario), "name": d.name, "variant": name})
    from hicache.report.compare import format_table

    print(format_table(headline(v.comparison), units=False))
    print(f"-> {out}")
    incomplete = 0
    for side, res in (("measured", v.measured), ("predicted", v.predicted)):
        if res.rejected:
            print(f"[{side}] {len(res.rejected)} request(s) rejected: "
                  f"{sorted(set(r.split(':', 1)[0] for r in res.rejected.values()))}")
        for rid, why in sorted(res.unfinished.items())[:8]:
            print(f"[{side}] ERROR: request {rid} did not finish: {why}", file=sys.stderr)
        incomplete += len(res.unfinished)
    return 1 if incomplete else 0
