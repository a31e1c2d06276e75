"""Fingerprints of every shipped scenario's results, to prove a speed change changes nothing.

    python benchmarks/sim_fingerprint.py record before.json   # on the old commit
    python benchmarks/sim_fingerprint.py record after.json    # on the new one
    python benchmarks/sim_fingerprint.py compare before.json after.json

``record`` runs every variant of every shipped scenario, shrunk as the fold equivalence
test shrinks them (``tests/sim/test_fold.py``: one list, which a test keeps complete),
folded and unfolded (``run.fold_decode`` and ``run.fold_layers`` both on, both off)
with one timeline row per step, and writes a SHA-256 per (variant,
fold, part) of: per-request records, decisions, simulated end time, each replica's sorted
timeline rows, batch shapes, bytes moved, write-back steps and fault costs. Floats are
hashed by ``repr`` (bit-exact). Larger cases follow (``PRESSURE``: folded only):
multiturn_tiers at 64 x 10 rounds, where L1 fills and queue heads wait (the shrunk runs
never block), 2,000 trace requests, and those 2,000 again on an L3 store of 1 TB (its
L1+L2+L3 variant), which evicts (~200k keys: no other case fills the store, whose LRU
order is only read from its first eviction on). ``compare`` lists every part that differs and
exits 1 if any does. ``--only NAME`` limits ``record`` to cases whose file name contains
NAME.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from hicache.scenario import load_scenario  # noqa: E402
from sim.driver import SimResult, simulate  # noqa: E402
from tests.sim.test_fold import SHRUNK, TRACE  # noqa: E402

# (label, scenario file, --set items, variants (None: all)): larger runs, folded only
PRESSURE = [("pressure:multiturn_tiers 64x10", "multiturn_tiers.yaml",
             ["workload.num_rounds=10", "run.layerwise=true"], None),
            ("pressure:mooncake_trace 2000", "mooncake_trace.yaml",
             ["workload.max_requests=2000", "run.layerwise=true"], None),
            ("pressure:mooncake_trace 2000 L3 1TB", "mooncake_trace.yaml",
             ["workload.max_requests=2000", "run.layerwise=true",
              "hardware.l3.mooncake.capacity_bytes=1e12"],
             {"L1+L2+L3"})]


def _digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def parts(res: SimResult) -> dict[str, str]:
    """One hash per comparable part of a run."""
    out = {"records": _digest(res.records), "decisions": _digest(res.decisions),
           "sim_time": repr(res.sim_time), "unfinished": _digest(sorted(res.unfinished.items())),
           "faults": _digest([c.counts for c in res.faults.costs] if res.faults else None)}
    for i, rep in enumerate(res.replicas):
        out[f"r{i}.timeline"] = _digest(sorted(rep.timeline.as_tuples()))
        out[f"r{i}.batch_shapes"] = _digest(sorted(rep.runtime.batch_shapes.items()))
        out[f"r{i}.bytes_moved"] = _digest(rep.runtime.bytes_moved)
        out[f"r{i}.writeback"] = _digest(rep.runtime.writeback.steps)
    return out


def record(only: str | None) -> dict[str, dict[str, str]]:
    runs: dict[str, dict[str, str]] = {}
    cases = [(name, name, sets, None, (True, False)) for name, sets in sorted(SHRUNK.items())]
    cases += [(label, name, sets, only_variants, (True,))
              for label, name, sets, only_variants in PRESSURE]
    for label, name, sets, variants, folds in cases:
        if only and only not in name:
            continue
        if name.startswith("mooncake"):
            if not TRACE.exists():
                print(f"skipping {label}: {TRACE} absent", file=sys.stderr)
                continue
            sets = [*sets, f"workload.path={TRACE}"]
        for variant, sc in load_scenario(ROOT / "scenarios" / name, sets).expand():
            if variants is not None and variant not in variants:
                continue
            for fold in folds:
                vsc = sc.with_overrides([f"run.fold_decode={str(fold).lower()}",
                                         f"run.fold_layers={str(fold).lower()}",
                                         "run.timeline_steps=true"])
                c0 = time.process_time()
                res = simulate(vsc, name=variant, progress=False)
                key = f"{label}/{variant}/{'folded' if fold else 'unfolded'}"
                runs[key] = parts(res)
                print(f"{key}: {time.process_time() - c0:.2f} CPU s", file=sys.stderr)
    return runs


def compare(a: dict[str, dict[str, str]], b: dict[str, dict[str, str]]) -> list[str]:
    diffs = [f"{k}: only in one file" for k in sorted(set(a) ^ set(b))]
    for key in sorted(set(a) & set(b)):
        for part in sorted(set(a[key]) | set(b[key])):
            if a[key].get(part) != b[key].get(part):
                diffs.append(f"{key}: {part} differs")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run every shipped scenario and write fingerprints")
    rec.add_argument("out", type=Path)
    rec.add_argument("--only", default=None, help="scenario files whose name contains this")
    cmp_ = sub.add_parser("compare", help="compare two fingerprint files")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        runs = record(args.only)
        args.out.write_text(json.dumps(runs, indent=1, sort_keys=True))
        print(f"{len(runs)} runs fingerprinted into {args.out}")
        return 0
    diffs = compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
    for line in diffs:
        print(line)
    print(f"{len(diffs)} differences" if diffs else "identical")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
