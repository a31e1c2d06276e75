"""``hicache-lab calibrate``: measure this machine (CUDA or CPU) into a hardware profile.

The work is in :mod:`gpu_backend.calibrate`; torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="microbenchmark copies and compute into a profile",
                       description=__doc__)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    p.add_argument("--model", help="model preset YAML (default: the tiny test shape)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--name", default=None)
    p.add_argument("--out", help="write the profile YAML here (default: stdout)")
    p.add_argument("--no-scheduler", action="store_true",
                   help="keep the default cpu.scheduler_step_s (skip the short driver run)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpu_backend.calibrate import main

    argv = ["--page-size", str(args.page_size)]
    for flag in ("device", "model", "name", "out"):
        value = getattr(args, flag)
        if value is not None:
            argv += [f"--{flag}", str(value)]
    if args.no_scheduler:
        argv.append("--no-scheduler")
    main(argv)
    return 0
