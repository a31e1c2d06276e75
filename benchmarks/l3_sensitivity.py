"""How much multiturn_tiers' TTFT p90 (its L1+L2+L3 variant) moves with the L3 figures.

    python benchmarks/l3_sensitivity.py [--json] [--quick]

Each row changes one figure of the h100-sxm profile's Mooncake section (or the host memory
its transfers share with PCIe) and simulates the variant; ``vs_default`` is the TTFT p90
change against the profile as shipped. The profile model decides the knobs: with
``nic_bytes_per_s`` (a NIC per replica, docs/SOURCES.md §5) the NIC rate, TCP vs RDMA; with
the old single ``bytes_per_s`` (run against an older checkout, ``PYTHONPATH=...``) that
rate. ``--quick`` runs 16 of the 30 rounds. The simulator is deterministic: the figures do
not depend on the machine (wall time does, and is only printed).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

from hicache.presets import find_preset
from hicache.report.frames import requests_frame
from hicache.scenario import load_scenario
from hicache.schema.yamlio import read_yaml
from sim.driver import simulate
from sim.report import summary_of, timeline_of

GB = 1e9


def knobs(mooncake: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, {dotted profile key: value}) rows for this profile model."""
    if "nic_bytes_per_s" in mooncake:  # a NIC per replica
        return [("default (RDMA, 23.75 GB/s NIC)", {}),
                ("TCP: NIC 5.2 GB/s", {"l3.mooncake.nic_bytes_per_s": 5.2 * GB}),
                ("NIC 10 GB/s", {"l3.mooncake.nic_bytes_per_s": 10 * GB}),
                ("NIC 47.5 GB/s (2 NICs)", {"l3.mooncake.nic_bytes_per_s": 47.5 * GB}),
                ("host memory 50 GB/s", {"host.memory_bytes_per_s": 50 * GB}),
                ("latency_s x10", {"l3.mooncake.latency_s": mooncake["latency_s"] * 10}),
                ("master_rpc_s x10",
                 {"l3.mooncake.master_rpc_s": mooncake["master_rpc_s"] * 10})]
    return [("default (20 GB/s)", {}),  # one global rate: the model before
            ("5 GB/s", {"l3.mooncake.bytes_per_s": 5 * GB}),
            ("10 GB/s", {"l3.mooncake.bytes_per_s": 10 * GB}),
            ("40 GB/s", {"l3.mooncake.bytes_per_s": 40 * GB}),
            ("host memory 50 GB/s", {"host.memory_bytes_per_s": 50 * GB}),
            ("latency_s x10", {"l3.mooncake.latency_s": mooncake["latency_s"] * 10}),
            ("master_rpc_s x10", {"l3.mooncake.master_rpc_s": mooncake["master_rpc_s"] * 10})]


def _set(d: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for k in path:
        d = d[k]
    d[last] = value


def run(quick: bool) -> list[dict[str, Any]]:
    profile = read_yaml(find_preset("hardware", "h100-sxm")).data
    base = load_scenario("multiturn_tiers").variant("L1+L2+L3")
    if quick:
        base = base.with_overrides(["workload.num_rounds=16"])
    rows: list[dict[str, Any]] = []
    for label, change in knobs(profile["l3"]["mooncake"]):
        hw = copy.deepcopy(profile)
        for key, value in change.items():
            _set(hw, key, value)
        sc = base.with_overrides([f"hardware={json.dumps(hw)}"])
        t0 = time.process_time()
        res = simulate(sc, name=label, progress=False)
        s = summary_of(res, requests_frame(res.records), timeline_of(res))
        rows.append({"case": label, "ttft_p90_s": s["ttft_p90_s"],
                     "ttft_mean_s": s["ttft_mean_s"], "l3_hit_rate": s["l3_hit_rate"],
                     "cpu_s": round(time.process_time() - t0, 1)})
    ref = rows[0]["ttft_p90_s"]
    for r in rows:
        r["vs_default"] = r["ttft_p90_s"] / ref - 1
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--quick", action="store_true", help="16 rounds instead of 30")
    args = ap.parse_args()
    rows = run(args.quick)
    if args.json:
        print(json.dumps({"scenario": "multiturn_tiers L1+L2+L3", "quick": args.quick,
                          "rows": rows}))
        return
    print(f"{'case':34} {'TTFT p90 s':>10} {'vs default':>10} {'TTFT mean s':>11} "
          f"{'L3 hit':>7} {'CPU s':>6}")
    for r in rows:
        print(f"{r['case']:34} {r['ttft_p90_s']:10.3f} {r['vs_default']:+10.1%} "
              f"{r['ttft_mean_s']:11.3f} {r['l3_hit_rate']:7.3f} {r['cpu_s']:6.1f}")


if __name__ == "__main__":
    main()
