"""``hicache-lab validate``: predict measured runs with the simulator and score the result.

Two forms:
  validate --measured DIR [--profile P] [--out OUT]
      predict the scenarios of a measured folder (``hicache-lab measure``, any machine,
      no torch needed); the profile defaults to the one calibrated into DIR.
  validate SCENARIO --profile P [--device cpu|cuda] [--out OUT]
      measure here first (into OUT/measured, torch needed), then the same.

OUT is written as ``run`` writes (:class:`hicache.report.outputs.RunFolder`): into a hidden
temporary folder renamed into place when complete (``run.json`` last), never mixed with an
existing folder (``--overwrite`` replaces a previous output), checked for writability
before anything is measured or simulated. Per scenario OUT/<safe name>/ gets
comparison.json (every field of :func:`validation.compare.compare` plus run info and the
noise floor), comparison.csv,
steps.csv (per-batch errors with the batch's tokens and context), ttft.csv (per request),
both timelines as parquet, overlay.png and residuals.png; OUT/validation.json pools them.
Scenarios whose decision logs differ are NOT scored (the reason is printed and recorded)
and the command then exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DESCRIPTION = """\
Predict measured runs with the simulator and score the prediction: per batch step time,
per request TTFT, per operation durations (signed median, median and p90 of the relative
error), the fraction of loads hidden behind compute, each beside a noise floor (one
measured run against another). Scenarios whose two control planes decided differently
are not scored (the reason is printed) and the command exits 1.

examples:
  hicache-lab validate --measured results/m                 predict a measured folder
  hicache-lab validate --measured results/m --ablate context   one modelled effect off
  hicache-lab validate cpu_loop.yaml --profile cpu.yaml --device cpu   measure, predict
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    from hicache.cli_common import HelpFormatter

    p = sub.add_parser("validate", help="compare the simulator's prediction with torch runs",
                       description=DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("scenario", type=Path, nargs="?", default=None,
                   help="a scenario to measure here first (else --measured)")
    p.add_argument("--measured", type=Path, default=None, metavar="DIR",
                   help="a folder written by hicache-lab measure")
    p.add_argument("--profile", type=Path, default=None,
                   help="hardware profile YAML (default with --measured: DIR/profile.yaml)")
    p.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="with --measured: predict only this scenario folder (repeatable)")
    p.add_argument("--ablate", default=None, metavar="EFFECT",
                   help="switch one modelled effect off in the profile: context, knee, "
                        "lm_head, embed, in_situ, host_lane, op_gap, copy_calls, "
                        "pipelined_issue, scheduler_step, gather_dma")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="SCENARIO form: where to measure (default: cuda when available)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: "
                   "DIR/validation, or results/validate/<scenario name>); written whole "
                   "when complete, never into an existing folder")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output folder of a previous validation")
    p.add_argument("--partial", action="store_true",
                   help="with --measured: score a measurement that did not finish (killed "
                        "or failed), from the runs it saved")
    p.add_argument("--variant", default=None, help="SCENARIO form: variant to run")
    p.add_argument("--repeats", type=int, default=3,
                   help="SCENARIO form: measured runs (median reference, noise floor)")
    p.add_argument("--torch-trace", type=Path, default=None, metavar="PATH",
                   help="SCENARIO form: torch.profiler Chrome trace of the first measured "
                   "run (as the scenario key run.torch_profiler)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="SCENARIO form: override a scenario key")
    p.set_defaults(func=run)


def measure_here(args: argparse.Namespace, out: Path) -> Path:
    """The SCENARIO form's measurement, into ``out`` (torch imported only here)."""
    import torch

    from gpu_backend.measure import load_for_measure, measure

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    scenarios = load_for_measure([args.scenario], args.overrides, args.variant)
    print(f"[{scenarios[0][0]}] measuring on {device} ...", flush=True)
    return measure(scenarios, device, out, repeats=args.repeats, profile=args.profile,
                   torch_trace=args.torch_trace)


def run(args: argparse.Namespace) -> int:
    from hicache.report.outputs import RunFolder, safe_name

    if (args.scenario is None) == (args.measured is None):
        raise ValueError("validate: give either a SCENARIO (measured here) or --measured DIR")
    if args.profile is not None and not args.profile.is_file():
        raise FileNotFoundError(f"--profile: no such file {args.profile}")
    if args.scenario is not None:
        if args.profile is None:
            raise ValueError("validate SCENARIO: --profile is required (calibrate first, or "
                             "use hicache-lab measure, which calibrates)")
        from hicache.scenario import load_scenario

        name = safe_name(str(load_scenario(args.scenario, args.overrides).name))
        out = args.out or Path("results") / "validate" / name
    else:
        from validation.runner import check_measured

        check_measured(args.measured, partial=args.partial)  # before anything is written
        out = args.out or args.measured / "validation"
    with RunFolder(out, overwrite=args.overwrite) as folder:  # checked before working
        if args.scenario is None:
            measured = args.measured
        else:
            from gpu_backend.measure import IncompleteRun

            try:
                measured = measure_here(args, folder.path / "measured")
            except IncompleteRun as e:  # nothing to validate: no output, exit 1 (as run)
                print(f"hicache-lab validate: error: {e}", file=sys.stderr)
                return 1
        summary, records, incomplete = _validate(args, measured, folder.path)
        folder.commit({"command": "validate", "measured": str(measured),
                       "argv": sys.argv[1:], "scenarios": {
                           r.get("dir", ""): r.get("folder", "") for r in records}})
    from validation.report import op_table, table

    print(table(records))
    print(op_table(records))
    print(f"-> {out}")
    return 0 if summary["decisions_equal"] and not incomplete else 1


def _validate(args: argparse.Namespace, measured: Path, out: Path
              ) -> tuple[dict, list[dict], int]:
    """Predict and score ``measured`` into ``out``: (summary, per-scenario records, number
    of requests some side did not finish)."""
    from hicache.report.outputs import safe_names
    from validation.ablation import ablated_profile
    from validation.report import clean, pooled, write_scenario
    from validation.runner import load_measured, validate_scenario

    mset = load_measured(measured, args.only)
    profile = args.profile or mset.profile
    if profile is None:
        raise ValueError(f"--measured {measured}: holds no profile.yaml; give --profile")
    prof = ablated_profile(profile, args.ablate) if args.ablate else str(profile)
    folders = safe_names(ms.dir for ms in mset.scenarios)
    validations, records = [], []
    for ms in mset.scenarios:
        print(f"[{ms.dir}] simulating ({len(ms.runs)} measured runs) ...", flush=True)
        v = validate_scenario(ms, prof, mset.shape)
        validations.append(v)
        record = write_scenario(v, out / folders[ms.dir])
        records.append({**record, "dir": ms.dir, "folder": folders[ms.dir]})
    summary = {"measured": str(measured), "profile": str(profile), "ablate": args.ablate,
               "device": mset.device, "environment": mset.environment,
               "measurement_complete": mset.complete,
               **pooled(validations), "per_scenario": records}
    (out / "validation.json").write_text(json.dumps(clean(summary), indent=2))
    incomplete = 0
    for v, ms in zip(validations, mset.scenarios, strict=True):
        sides = [("predicted", v.predicted.rejected, v.predicted.unfinished)]
        sides += [(f"measured run{k}", r.info.get("rejected") or {},
                   r.info.get("unfinished") or {}) for k, r in enumerate(ms.runs)]
        for side, rejected, unfinished in sides:
            if rejected:
                print(f"[{ms.dir} {side}] {len(rejected)} request(s) rejected: "
                      f"{sorted({str(r).split(':', 1)[0] for r in rejected.values()})}")
            for rid, why in sorted(unfinished.items())[:8]:
                print(f"[{ms.dir} {side}] ERROR: request {rid} did not finish: {why}",
                      file=sys.stderr)
            incomplete += len(unfinished)
    return summary, records, incomplete
