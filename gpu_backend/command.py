"""``hicache-lab calibrate`` and ``hicache-lab measure``: torch only, never simpy.

``calibrate`` measures this machine (CUDA or CPU) into a hardware profile
(:mod:`gpu_backend.calibrate`); ``measure`` runs scenarios on the torch runtime into a
folder that ``hicache-lab validate --measured`` predicts on any machine
(:mod:`gpu_backend.measure`). torch is imported only when a command runs.
``python -m gpu_backend.calibrate`` takes calibrate's arguments (:func:`add_arguments`).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    p.add_argument("--model", help="model preset: a name in scenarios/models/ or a YAML path "
                                   "(default: the tiny test shape)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--name", default=None)
    p.add_argument("--out", help="write the profile YAML here (default: stdout)")
    p.add_argument("--no-scheduler", action="store_true",
                   help="keep the default cpu.scheduler_step_s (skip the short driver run)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="microbenchmark copies and compute into a profile",
                       description=__doc__)
    add_arguments(p)
    p.set_defaults(func=run)
    m = sub.add_parser("measure", help="run scenarios on the torch runtime into a folder "
                       "that validate --measured predicts anywhere", description=__doc__)
    m.add_argument("scenarios", nargs="+", type=Path, metavar="SCENARIO")
    m.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    m.add_argument("--out", type=Path, required=True, help="the measured folder to write")
    m.add_argument("--repeats", type=int, default=3,
                   help="runs per scenario (the reference is their median; runs after "
                   "the first give the noise floor)")
    m.add_argument("--profile", type=Path, default=None,
                   help="keep this hardware profile instead of calibrating")
    m.add_argument("--no-calibrate", action="store_true",
                   help="write no profile (validate --measured then needs --profile)")
    m.add_argument("--append", action="store_true",
                   help="add scenarios to an existing measured folder (keeps its profile)")
    m.add_argument("--variant", default=None, help="variant to run (default: the first)")
    m.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default on cpu: 1)")
    m.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario key, e.g. seed=3")
    m.set_defaults(func=run_measure)


def run(args: argparse.Namespace) -> int:
    from gpu_backend.calibrate import run_args

    run_args(args)
    return 0


def run_measure(args: argparse.Namespace) -> int:
    from gpu_backend.measure import run_args

    return run_args(args)
