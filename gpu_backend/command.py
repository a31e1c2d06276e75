"""``hicache-lab calibrate``: measure this machine (CUDA or CPU) into a hardware profile.

The work is in :mod:`gpu_backend.calibrate`; torch is imported only when the command runs.
``python -m gpu_backend.calibrate`` takes the same arguments (:func:`add_arguments`).
"""

from __future__ import annotations

import argparse

from hicache.schema.cli_args import count


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    p.add_argument("--model", help="model preset: a name in scenarios/models/ or a YAML path "
                                   "(default: the tiny test shape)")
    p.add_argument("--page-size", type=count(1), default=16)
    p.add_argument("--name", default=None)
    p.add_argument("--out", help="write the profile YAML here (default: stdout)")
    p.add_argument("--no-scheduler", action="store_true",
                   help="keep the default cpu.scheduler_step_s (skip the short driver run)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="microbenchmark copies and compute into a profile",
                       description=__doc__)
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpu_backend.calibrate import run_args

    run_args(args)
    return 0
