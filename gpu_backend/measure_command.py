"""``hicache-lab measure``: run scenarios on the torch runtime into a measured folder that
``hicache-lab validate --measured`` predicts on any machine (torch only, never simpy).

The work is in :mod:`gpu_backend.measure`; torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hicache.cli_common import HelpFormatter

DESCRIPTION = """\
Run scenarios on the torch runtime (CUDA streams, or one worker thread per stream on CPU)
and keep everything a later prediction needs in one folder: the calibrated hardware
profile, every run's timeline, per-request records and decisions, and the environment.
Needs torch only, so it runs where the hardware is; predict the folder anywhere with
hicache-lab validate --measured DIR.

examples:
  hicache-lab measure scenarios/validation/cpu_loop.yaml --device cpu --out results/m
  hicache-lab measure A.yaml B.yaml --device cuda --profile p.yaml --out results/m
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("measure", help="run scenarios on the torch runtime into a folder "
                       "that validate --measured predicts anywhere", description=DESCRIPTION,
                       formatter_class=HelpFormatter)
    m.add_argument("scenarios", nargs="+", type=Path, metavar="SCENARIO")
    m.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    m.add_argument("--out", type=Path, required=True, help="the measured folder to write")
    m.add_argument("--repeats", type=int, default=3,
                   help="runs per scenario, taken round the scenarios (the reference is "
                   "their median; runs after the first give the noise floor)")
    m.add_argument("--profile", type=Path, default=None,
                   help="keep this hardware profile instead of calibrating")
    m.add_argument("--no-calibrate", action="store_true",
                   help="write no profile (validate --measured then needs --profile)")
    m.add_argument("--append", action="store_true",
                   help="add scenarios to an existing measured folder (keeps its profile)")
    m.add_argument("--overwrite", action="store_true",
                   help="replace an existing measured folder")
    m.add_argument("--variant", default=None, help="variant to run (default: the first)")
    m.add_argument("--priority", choices=("fifo", "nice", "none"), default="none",
                   help="calibrate and measure at real-time (SCHED_FIFO 10) or nice -15 "
                   "priority, falling back when not permitted: on a shared box other jobs "
                   "then disturb the timing less (needs root or CAP_SYS_NICE)")
    m.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default on cpu: 1)")
    m.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario key, e.g. seed=3")
    m.set_defaults(func=run, interrupted="the runs finished so far are kept; the folder is "
                   "marked unfinished (validate --measured needs --partial for it)")


def run(args: argparse.Namespace) -> int:
    from gpu_backend.measure import run_args

    return run_args(args)
