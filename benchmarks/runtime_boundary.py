"""The RuntimeInterface boundary: in process, out of process, shared by two schedulers.

Run: ``python benchmarks/runtime_boundary.py [--json] [--reps N]`` (torch on CPU; about a
minute here; writes results/bench_runtime_boundary.json).

1. Crossing cost: decode plans of 1 to 256 requests through a runtime that does no work
   (:mod:`ipc.echo`), in process and out of process; the difference per crossing is what
   the process split adds. Printed as the ``cpu:`` keys of a hardware profile
   (``ipc_crossing_s``, ``ipc_prepare_s``), which the simulator charges
   (``run.runtime_process``), and compared with what the repository's profile predicts.
2. One scenario (multi-turn chat, L1+L2 under pressure, torch CPU runtime, tiny shape)
   in process and out of process: are the decisions identical, how many crossings per
   batch, what the boundary cost per crossing on that run (round trips less the runtime
   process's time inside runtime methods: pickling, the socket, waking up; on 2 busy
   cores the runtime's own lane threads compete with its server thread for the GIL).
3. The same workload with two schedulers sharing one torch runtime (one allocator, one
   KV pool, a shared pool with per-scheduler minimums). ``requests_finished`` and
   ``requests_total`` count all three runs.
4. Cross-batch overlap on the torch runtime: ``scenarios/cross_batch_overlap.yaml`` with
   a CPU shape whose batches outlast a scheduler step (8 layers, hidden 512): the share
   of H2D load time that ran under an earlier batch's compute (hicache.report.overlap).
Timings here are on 2 shared, noisy cores: medians, and CPU time where it is the honest
measure; read the ratios, not the last digit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_backend.driver import run_scenario  # noqa: E402
from gpu_backend.shapes import ModelShape  # noqa: E402
from hicache.report.frames import timeline_frame  # noqa: E402
from hicache.report.overlap import cross_batch_overlap  # noqa: E402
from hicache.scenario import load_scenario  # noqa: E402
from ipc.echo import measure_crossings  # noqa: E402
from sim.boundary import CrossingCost  # noqa: E402
from sim.hardware.profile import load_profile  # noqa: E402

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def scenario(shared: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "runtime_boundary", "seed": 7, "model": "llama-3-8b", "hardware": "h100-sxm",
        "cache": {"page_size": 4, "device_tokens": 512, "enable_hierarchical_cache": True,
                  "hicache_ratio": 4.0, "hicache_write_policy": "write_through",
                  "hicache_storage_prefetch_policy": "wait_complete",
                  "load_back_threshold": 4},
        "scheduler": {"overlap": False, "max_running_requests": 4,
                      "chunked_prefill_size": 256},
        "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 3,
                     "request_length": [16, 40], "output_length": [4, 8],
                     "request_rate": math.inf, "max_parallel": 8,
                     "system_prompt_length": 16},
    }
    if shared:
        d["replicas"] = 2
        d["sharing"] = {"pool": "shared", "fractions": [0.25, 0.25]}
    return d


def crossing_table(reps: int) -> dict[str, Any]:
    costs = measure_crossings(SIZES, reps)
    small = statistics.median(c.small_s for c in costs)
    profile = load_profile("h100-sxm")
    predicted = CrossingCost(profile, True) if profile.ipc_prepare_s else None
    rows = [{"requests": c.requests, "prepare_s": c.prepare_s, "small_s": c.small_s,
             "ipc_s_per_crossing": c.ipc_s_per_crossing, "cpu_s_per_batch": c.cpu_s,
             "bytes_per_batch": c.bytes,
             "predicted_batch_s": (predicted.plan(c.requests) + predicted.wakeup()
                                   if predicted else math.nan),
             "measured_batch_s": c.prepare_s + 2 * c.small_s} for c in costs]
    return {"rows": rows, "ipc_crossing_s": small,
            "ipc_prepare_s": [[c.requests, c.prepare_s] for c in costs]}


def scenario_runs() -> dict[str, Any]:
    local = run_scenario(scenario())
    remote = run_scenario(scenario(), process=True)
    c = remote.extra["crossings"]
    plans = c["prepare_batch"]
    crossings = sum(c.values())
    out = {
        "decisions_equal": local.decisions == remote.decisions,
        "decisions": len(remote.decisions),
        "batches": plans,
        "crossings": c,
        "crossings_per_batch": crossings / plans,
        "ipc_s_per_crossing": remote.extra["ipc_overhead_s"] / crossings,
        "wall_s": {"in_process": local.wall_time, "out_of_process": remote.wall_time},
        "runs": {name: {"requests_finished": sum(r["finish"] is not None for r in res.records),
                        "requests_total": len(res.records)}
                 for name, res in (("in_process", local), ("out_of_process", remote))},
    }
    cpu_shape = ModelShape(num_layers=8, num_heads=8, num_kv_heads=4, head_dim=64,
                           hidden_size=512, ffn_size=2048, dtype_bytes=4, name="small-cpu")
    overlap = run_scenario(load_scenario("cross_batch_overlap"), shape=cpu_shape)
    out["cross_batch_overlap"] = cross_batch_overlap(timeline_frame(overlap.timeline))
    shared = run_scenario(scenario(shared=True))
    out["schedulers_sharing_runtime"] = shared.extra["schedulers"]
    out["runs"]["shared_runtime"] = {
        "requests_finished": sum(r["finish"] is not None for r in shared.records),
        "requests_total": len(shared.records), "placed_pages": shared.extra["placed_pages"]}
    out["requests_finished"] = sum(r["requests_finished"] for r in out["runs"].values())
    out["requests_total"] = sum(r["requests_total"] for r in out["runs"].values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--reps", type=int, default=200, help="batches timed per plan size")
    args = ap.parse_args()
    table = crossing_table(args.reps)
    result = {**scenario_runs(), "crossing_cost": table}
    out = ROOT / "results" / "bench_runtime_boundary.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result))
        return
    print("per batch (prepare + execute + poll), out of process minus in process:")
    print(f"{'requests':>8} {'prepare us':>10} {'small us':>9} {'per crossing us':>15} "
          f"{'CPU us/batch':>12} {'bytes/batch':>11} {'batch us':>9} {'predicted us':>12}")
    for r in table["rows"]:
        print(f"{r['requests']:>8} {r['prepare_s'] * 1e6:>10.1f} {r['small_s'] * 1e6:>9.1f} "
              f"{r['ipc_s_per_crossing'] * 1e6:>15.1f} {r['cpu_s_per_batch'] * 1e6:>12.0f} "
              f"{r['bytes_per_batch']:>11} {r['measured_batch_s'] * 1e6:>9.1f} "
              f"{r['predicted_batch_s'] * 1e6:>12.1f}")
    print("\nhardware profile keys (cpu:):")
    print(f"  ipc_crossing_s: {table['ipc_crossing_s']:.2e}")
    print("  ipc_prepare_s: [" + ", ".join(f"[{n}, {s:.2e}]" for n, s in
                                           table["ipc_prepare_s"]) + "]")
    keys = ("decisions_equal", "crossings_per_batch", "ipc_s_per_crossing",
            "schedulers_sharing_runtime", "requests_finished", "requests_total",
            "cross_batch_overlap")
    print("\n" + "\n".join(f"{k}: {result[k]}" for k in keys))


if __name__ == "__main__":
    main()
