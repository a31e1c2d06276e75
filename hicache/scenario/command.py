"""``hicache-lab scenario check|resolve|schema``: look at a scenario without running it.

Top-level imports stay light (``--help`` must start fast); the loader, and pydantic with
it, loads when a subcommand runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hicache.cli_common import HelpFormatter, add_scenario_args

DESCRIPTION = """\
Check a scenario without simulating it, write it resolved for a machine without pydantic,
or print the JSON Schema that editors use to complete and check scenario files.

  check    validate every section and variant (the same checks run does first) and print
           what each variant resolves to: model, hardware, L1/L2 sizes, workload
  resolve  write the validated scenario as JSON that loads without pydantic (the GPU
           machine's measure half reads these)
  schema   print the JSON Schema (docs/scenario.schema.json is the committed copy)

examples:
  hicache-lab scenario check scenarios/quick.yaml --set cache.hicache_ratio=4
  hicache-lab scenario resolve quick quick.resolved.json
  hicache-lab scenario schema > scenario.schema.json
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenario", help="check, resolve or describe scenarios without "
                       "running them", description=DESCRIPTION,
                       formatter_class=HelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    check = verbs.add_parser("check", help="validate a scenario and summarise its variants",
                             formatter_class=HelpFormatter)
    add_scenario_args(check)
    check.set_defaults(func=run_check)
    resolve = verbs.add_parser("resolve", help="write a scenario resolved, as JSON",
                               formatter_class=HelpFormatter)
    add_scenario_args(resolve)
    resolve.add_argument("out", type=Path, help="the JSON file to write")
    resolve.set_defaults(func=run_resolve)
    schema = verbs.add_parser("schema", help="print the scenario JSON Schema",
                              formatter_class=HelpFormatter)
    schema.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write it here instead of standard output")
    schema.set_defaults(func=run_schema)


def describe(name: str, sc) -> str:  # noqa: ANN001 - a Scenario (pydantic loads lazily)
    """One line per variant: what it will simulate."""
    cache, model = sc.cache, sc.model
    kv = model.kv_bytes_per_token()
    l1 = f"L1 {cache.device_tokens:,} tokens ({cache.device_tokens * kv / 2**30:.1f} GiB)"
    tiers = [l1]
    if cache.enable_hierarchical_cache:
        tiers.append(f"L2 {cache.host_tokens(kv):,} tokens")
    if cache.hicache_storage_backend:
        tiers.append(f"L3 {cache.hicache_storage_backend}")
    hw = sc.hardware if isinstance(sc.hardware, str) else (
        f"{sc.hardware['name']} (inline)" if isinstance(sc.hardware.get("name"), str)
        else "<inline profile>")
    return (f"{name}: {model.name} on {Path(str(hw)).stem} x{sc.replicas}, "
            f"{', '.join(tiers)}, page {cache.page_size}, {sc.workload.kind} workload, "
            f"seed {sc.seed}")


def run_check(args: argparse.Namespace) -> int:
    from hicache.cli_common import load_scenario_arg

    sc = load_scenario_arg(args.scenario, args.overrides)
    for name, variant in sc.expand():
        print(describe(name, variant))
    print(f"{args.scenario}: ok ({len(sc.expand())} variant(s))")
    return 0


def run_resolve(args: argparse.Namespace) -> int:
    from hicache.cli_common import load_scenario_arg
    from hicache.scenario.resolved import write_resolved

    print(write_resolved(load_scenario_arg(args.scenario, args.overrides), args.out))
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from hicache.scenario.validate import json_schema_text

    text = json_schema_text()
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"-> {args.out}")
    return 0
