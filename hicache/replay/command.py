"""``hicache-lab replay``: hit rates of a request trace for a cache size, per tier.

Top-level imports stay light (``--help`` must start fast); the engine loads on run.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

from hicache.cli_common import HelpFormatter
from hicache.config import EVICTION_POLICIES, WRITE_POLICIES
from hicache.units import size_arg, size_list_arg
from hicache.workload.traces import FORMATS

DESCRIPTION = """\
Replay a request trace through the cache tree and tier policies in zero time (no compute,
no transfer time), in arrival order: what hit rate would a cache of this size get?
Sizes take 4e6, 4M or 4Mi forms.

examples:
  hicache-lab replay --trace trace.jsonl --capacity-tokens 1M
  hicache-lab replay --trace trace.jsonl --capacity-tokens 2e5,1M,4M,16M --json
  hicache-lab replay --trace trace.jsonl --capacity-tokens 1M --l2-tokens 4M --l3
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="hit rate of a trace for a cache size (zero time)",
                       description=DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("--trace", required=True, type=Path, help="trace file (JSONL)")
    p.add_argument("--format", default="auto", choices=FORMATS,
                   help="mooncake: FAST'25 JSONL with hash_ids over 512-token blocks; "
                        "tokens: one JSON request per line (default: from the first line)")
    p.add_argument("--page-size", type=size_arg(1), default=64,
                   help="tokens per page (default 64)")
    p.add_argument("--capacity-tokens", type=size_list_arg(1), default=[1_000_000],
                   metavar="N[,N...]",
                   help="L1 (GPU) size in tokens (default 1M); a comma list replays each "
                        "size and prints one row (or JSON line) per size")
    p.add_argument("--policy", default="lru", choices=EVICTION_POLICIES,
                   help="eviction policy (SGLang's --radix-eviction-policy; default lru)")
    p.add_argument("--l2-tokens", type=size_arg(0), default=0, metavar="N",
                   help="L2 (host) size in tokens; 0 = no L2 (default)")
    p.add_argument("--write-policy", default="write_through", choices=WRITE_POLICIES,
                   help="when L1 pages are copied to L2 (default write_through)")
    p.add_argument("--l3", action="store_true", help="add an L3 (storage) tier, unbounded "
                                                     "unless --l3-tokens")
    p.add_argument("--l3-tokens", type=size_arg(1), default=None, metavar="N",
                   help="bound L3 to N tokens (LRU)")
    p.add_argument("--session-aware", action="store_true",
                   help="evict closed sessions' pages first")
    p.add_argument("--swa-window", type=size_arg(0), default=0, metavar="TOKENS",
                   help="hybrid model: add an SWA component with this window")
    p.add_argument("--swa-tokens", type=size_arg(1), default=None, metavar="N",
                   help="SWA pool size in tokens (default: --capacity-tokens)")
    p.add_argument("--mamba-slots", type=size_arg(0), default=0, metavar="N",
                   help="hybrid model: add a MAMBA component with N checkpoint slots")
    p.add_argument("--max-requests", type=size_arg(1), default=None, metavar="N",
                   help="replay only the first N requests")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write requests.csv and summary.json here (one folder per size with "
                        "several); the folder appears complete, or not at all")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out folder of a previous run")
    p.add_argument("--json", action="store_true", help="print one JSON object per size")
    p.set_defaults(func=run)


def summarize(records: list[Any]) -> dict:
    prompt = sum(r.prompt_tokens for r in records)

    def rate(n: int) -> float:
        return n / prompt if prompt else 0.0

    cached = sum(r.cached_tokens for r in records)
    dev = sum(r.device_hit for r in records)
    host = sum(r.host_hit for r in records)
    l3 = sum(r.l3_hit for r in records)
    return {
        "requests": len(records), "prompt_tokens": prompt, "cached_tokens": cached,
        "hit_rate": rate(cached), "device_hit_rate": rate(dev), "host_hit_rate": rate(host),
        "l3_hit_rate": rate(l3), "device_hit_tokens": dev, "host_hit_tokens": host,
        "l3_hit_tokens": l3,
    }


def _config(**fields: Any):  # noqa: ANN202 - CacheConfig
    """The replay's cache settings. A CacheConfig checks every field on construction; the
    options are typed by argparse already, so no pydantic pass (its import and schema
    build cost more than the rest of start-up). Errors read as ``from_mapping``'s do:
    ``command line: key: problem``."""
    from hicache.config import CacheConfig, ConfigError

    try:
        return CacheConfig(**fields)
    except ValueError as e:
        key, _, problem = str(e).partition(": ")
        raise ConfigError("command line", key, problem) from None


def _cache(args: argparse.Namespace, capacity: int):  # noqa: ANN202 - ReplayCache
    from hicache.replay.engine import L3Set, ReplayCache

    hybrid = {"swa_window": args.swa_window, "swa_tokens": args.swa_tokens,
              "mamba_slots": args.mamba_slots}
    if (args.swa_window or args.mamba_slots) and args.l3:  # hybrid_tiers.py says why
        raise ValueError("--swa-window/--mamba-slots replay L1 and L2 (--l2-tokens); "
                         "SWA windows and MAMBA checkpoints have no L3 path: drop --l3")
    cfg = _config(page_size=args.page_size, device_tokens=capacity,
                  radix_eviction_policy=args.policy, hicache_write_policy=args.write_policy,
                  enable_hierarchical_cache=args.l2_tokens > 0 or args.l3,
                  enable_session_aware_eviction=args.session_aware)
    l3 = None
    if args.l3:
        l3 = L3Set(None if args.l3_tokens is None else args.l3_tokens // args.page_size)
    # L3 fetches land in L2; with --l3 and no --l2-tokens, L2 is a staging buffer of L1's size
    host = args.l2_tokens if args.l2_tokens > 0 else (capacity if args.l3 else 0)
    return ReplayCache(cfg, l3=l3, host_tokens=host, **hybrid)


def run(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from hicache.collector import run_collector
    from hicache.replay.engine import in_arrival_order
    from hicache.report.outputs import RunFolder
    from hicache.workload.traces import load_trace

    capacities = list(dict.fromkeys(args.capacity_tokens))
    # --out is checked (not a previous run unless --overwrite, writable) before any work
    folder = RunFolder(args.out, overwrite=args.overwrite) if args.out else None
    with folder or nullcontext(), run_collector():  # few collections of a growing heap
        requests = in_arrival_order(load_trace(args.trace, args.format, args.max_requests))
        for capacity in capacities:
            out = None if folder is None else (folder.path if len(capacities) == 1 else
                                               folder.path / f"capacity_{capacity}")
            _replay_one(args, capacity, requests, out, header=capacity == capacities[0],
                        table=len(capacities) > 1)
        if folder is not None:
            folder.commit({"command": "replay", "trace": str(args.trace),
                           "argv": sys.argv[1:], "capacity_tokens": capacities})
    sys.stdout.flush()
    return 0


def _replay_one(args: argparse.Namespace, capacity: int, requests: list, out: Path | None, *,
                header: bool, table: bool) -> None:
    cache = _cache(args, capacity)
    host = getattr(getattr(cache, "host", None), "capacity", 0) * args.page_size
    t0 = time.perf_counter()
    records = [cache.process(r) for r in requests]
    wall = time.perf_counter() - t0
    summary = summarize(records) | {
        "trace": str(args.trace), "page_size": args.page_size,
        "capacity_tokens": capacity, "l2_tokens": host, "l3": args.l3,
        "policy": args.policy, "wall_s": round(wall, 3)}
    if out:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "requests.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["rid", "arrival", "prompt_tokens", "cached_tokens", "device_hit",
                        "host_hit", "l3_hit"])
            for r in records:
                w.writerow([r.rid, r.arrival, r.prompt_tokens, r.cached_tokens, r.device_hit,
                            r.host_hit, r.l3_hit])
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if args.json:
        print(json.dumps(summary))
    elif table:
        if header:
            print(f"{summary['requests']} requests, {summary['prompt_tokens']} prompt tokens")
            print(f"{'L1 tokens':>12}  {'hit rate':>8}  {'L1':>6}  {'L2':>6}  {'L3':>6}  wall")
        print(f"{capacity:>12,}  {summary['hit_rate']:>8.4f}  "
              f"{summary['device_hit_rate']:>6.4f}  {summary['host_hit_rate']:>6.4f}  "
              f"{summary['l3_hit_rate']:>6.4f}  {wall:.1f} s")
    else:
        print(f"{summary['requests']} requests, {summary['prompt_tokens']} prompt tokens "
              f"in {wall:.1f} s; L1 capacity {capacity:,} tokens, page {args.page_size}"
              + (f", L2 {host:,} tokens" if host else "") + (", L3" if args.l3 else ""))
        print(f"hit rate {summary['hit_rate']:.4f}  (L1 {summary['device_hit_rate']:.4f}, "
              f"L2 {summary['host_hit_rate']:.4f}, L3 {summary['l3_hit_rate']:.4f})")
