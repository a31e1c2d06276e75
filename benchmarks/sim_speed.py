"""Simulator speed: wall time and simulated requests per second per scenario variant.

    python benchmarks/sim_speed.py [--quick]   # table; writes results/bench_sim_speed.json

Targets (issue 3): the 64-client multi-turn study (multiturn_tiers.yaml, layer-wise overlap
on) in under 60 s on 2 cores; the Mooncake conversation trace as fast as possible.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hicache.scenario import load_scenario
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("multiturn_tiers", "scenarios/multiturn_tiers.yaml", ["run.layerwise=true"]),
    ("mooncake_trace", "scenarios/mooncake_trace.yaml", []),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="scenarios/quick.yaml only")
    args = ap.parse_args()
    cases = [("quick", "scenarios/quick.yaml", [])] if args.quick else CASES
    rows = []
    for label, path, sets in cases:
        d = load_scenario(ROOT / path, sets)
        total = 0.0
        for name, vd in d.expand():
            t0 = time.perf_counter()
            res = simulate(vd, name=name, progress=False)
            wall = time.perf_counter() - t0
            total += wall
            rows.append({"scenario": label, "variant": name, "requests": res.requests,
                         "simulated_s": round(res.sim_time, 1), "wall_s": round(wall, 2),
                         "sim_requests_per_wall_s": round(res.requests / wall, 1)})
        rows.append({"scenario": label, "variant": "(all)", "requests": "",
                     "simulated_s": "", "wall_s": round(total, 2),
                     "sim_requests_per_wall_s": ""})
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))
    out = ROOT / "results" / "bench_sim_speed.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
