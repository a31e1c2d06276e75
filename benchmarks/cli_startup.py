"""CLI start-up: wall time of ``hicache-lab COMMAND --help`` (target: well under 0.5 s).

    python benchmarks/cli_startup.py [--repeat 5] [--json]

Median of ``--repeat`` runs per command, each a fresh interpreter (what a user waits for).
Noisy on a shared machine: the minimum is printed beside the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET_S = 0.5
COMMANDS = ["replay", "run", "sweep", "calibrate", "validate"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for command in COMMANDS:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hicache.cli", command, "--help"],
                           check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rows.append({"command": f"{command} --help", "median_s": round(med, 3),
                     "min_s": round(min(times), 3), "target_s": TARGET_S,
                     "meets": med < TARGET_S})
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"{'command':<18} {'median s':>8} {'min s':>6}  target")
        for r in rows:
            print(f"{r['command']:<18} {r['median_s']:>8} {r['min_s']:>6}  "
                  f"{'<' if r['meets'] else '>='} {TARGET_S}")
    return 0 if all(r["meets"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
