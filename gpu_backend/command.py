"""``hicache-lab calibrate``: measure this machine (CUDA or CPU) into a hardware profile.

The work is in :mod:`gpu_backend.calibrate`; torch is imported only when the command runs.
``python -m gpu_backend.calibrate`` takes the same arguments (:func:`add_arguments`).
(``hicache-lab measure`` is :mod:`gpu_backend.measure_command`.)
"""

from __future__ import annotations

import argparse

from hicache.cli_common import HelpFormatter
from hicache.units import size_arg

DESCRIPTION = """\
Measure this machine into a hardware profile the simulator can load in place of a
datasheet one: copies per size and io backend (both directions alone and at once, per
call), compute per layer (prefill by tokens, decode by batch), compute slowdown under
copies, and the scheduler's step time; with --mooncake-master or --mooncake-local, a
Mooncake store's call latency and throughput against concurrency (the l3.mooncake
section). Prints the measured figures and sanity checks.

examples:
  hicache-lab calibrate --device cpu --out results/cpu_profile.yaml
  hicache-lab calibrate --model llama-3-8b --out results/h100_profile.yaml
  hicache-lab calibrate --device cpu --mooncake-local --out results/cpu_mooncake.yaml
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    p.add_argument("--model", help="model preset: a name in scenarios/models/ or a YAML path "
                                   "(default: the tiny test shape)")
    p.add_argument("--page-size", type=size_arg(1), default=16,
                   help="tokens per page of the copies measured (default 16)")
    p.add_argument("--name", default=None,
                   help="the profile's name (default: calibrated-<device>)")
    p.add_argument("--out", help="write the profile YAML here (default: stdout); checked "
                                 "before measuring, written whole or not at all")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file")
    p.add_argument("--no-scheduler", action="store_true",
                   help="keep the default cpu.scheduler_step_s (skip the short driver run)")
    l3 = p.add_mutually_exclusive_group()
    l3.add_argument("--mooncake-master", metavar="HOST:PORT", default=None,
                    help="also measure the Mooncake store at this master (latency and "
                         "throughput against concurrency) into the l3.mooncake section")
    l3.add_argument("--mooncake-local", action="store_true",
                    help="as --mooncake-master, on a store started here for the purpose "
                         "(mooncake_master + one storage process on loopback)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="microbenchmark copies and compute into a profile",
                       description=DESCRIPTION, formatter_class=HelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpu_backend.calibrate import run_args

    run_args(args)
    if args.out:  # with no --out the profile itself went to stdout: keep stdout clean
        import yaml

        from hicache.report.profile_summary import format_profile_summary

        with open(args.out) as f:
            text, _ = format_profile_summary(yaml.safe_load(f))
        print(text)
        print(f"-> {args.out}")
    return 0
