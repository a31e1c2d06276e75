"""Time the unified tree's operations at long context; prints a table. Not a test.

Run: ``PYTHONPATH=. python benchmarks/tree_ops.py`` (writes results/bench_tree_ops.json).

Workload: 200 contexts of 100k tokens at page size 64 (1562 pages each). Contexts come in
10 families; each shares a prefix of 0, 10k, 50k or 90k tokens with its family's base.
Timed: insert of every context (extents pre-allocated, page keys pre-built), a match of
every context, then FULL eviction of everything one leaf at a time (and, on the hybrid
row, SWA eviction first). Page-key building (token list -> tuples) is timed separately.
"""

from __future__ import annotations

import gc
import json
import random
import time
from pathlib import Path

from hicache.runtime.handles import Tier
from hicache.tree.actions import Deleted
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.radix import UnifiedRadixTree, page_keys

PAGE = 64
CONTEXT = 100_000
CONTEXTS = 200
FAMILIES = 10
SHARED = (0, 10_000, 50_000, 90_000)
SWA_WINDOW = 4096


def contexts(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    bases = [[rng.randrange(128_000) for _ in range(CONTEXT)] for _ in range(FAMILIES)]
    out = []
    for i in range(CONTEXTS):
        shared = rng.choice(SHARED)
        out.append(bases[i % FAMILIES][:shared]
                   + [rng.randrange(128_000) for _ in range(CONTEXT - shared)])
    return out


def run(name: str, spec: TreeSpec, token_lists: list[list[int]]) -> dict:
    t0 = time.perf_counter()
    keys = [page_keys(t, PAGE) for t in token_lists]
    t_keys = time.perf_counter() - t0
    n_pages = sum(len(k) for k in keys)
    allocs = {k: PageAllocator(n_pages, tier=Tier.DEVICE, pool=k.value) for k in spec.kinds}
    swa_pages = -(-SWA_WINDOW // PAGE) + 1
    values = []
    for k in keys:
        v = {Kind.FULL: allocs[Kind.FULL].alloc(len(k))}
        if Kind.SWA in allocs:
            v[Kind.SWA] = allocs[Kind.SWA].alloc(min(len(k), swa_pages))
        if Kind.MAMBA in allocs:
            v[Kind.MAMBA] = allocs[Kind.MAMBA].alloc(1)
        values.append(v)
    tree = UnifiedRadixTree(spec)
    gc.collect()
    gc.freeze()  # the 20M key ints are long-lived, as in a server: keep GC off them

    t0 = time.perf_counter()
    for k, v in zip(keys, values, strict=True):
        tree.insert(k, v)
    t_insert = time.perf_counter() - t0

    t0 = time.perf_counter()
    hit = 0
    for k in keys:
        hit += tree.match(k).device_tokens
    t_match = time.perf_counter() - t0
    assert hit == CONTEXTS * len(keys[0]) * PAGE, "every context must match in full"

    nodes = len(tree.nodes)
    swa_evicted, t_swa = 0, 0.0
    if Kind.SWA in allocs:  # on a copy built the same way: SWA eviction takes leaves whole
        full_tree, tree = tree, UnifiedRadixTree(spec)
        for k, v in zip(keys, values, strict=True):
            tree.insert(k, v)
        t0 = time.perf_counter()
        while True:
            res = tree.evict_device(1, Kind.SWA)
            if not res.actions:
                break
            swa_evicted += 1
        t_swa = time.perf_counter() - t0
        tree = full_tree
    t0 = time.perf_counter()
    leaves = 0
    while tree.nodes:
        res = tree.evict_device(1)
        leaves += sum(isinstance(a, Deleted) for a in res.actions)
    t_evict = time.perf_counter() - t0
    row = {
        "name": name, "contexts": CONTEXTS, "tokens_per_context": CONTEXT, "page_size": PAGE,
        "pages_inserted": n_pages, "nodes": nodes,
        "page_keys_s": t_keys, "insert_s": t_insert, "match_s": t_match,
        "inserts_per_s": CONTEXTS / t_insert, "matches_per_s": CONTEXTS / t_match,
        "leaf_evictions": leaves, "evictions_per_s": leaves / t_evict,
        "swa_evictions": swa_evicted,
        "swa_evictions_per_s": swa_evicted / t_swa if t_swa else None,
    }
    gc.unfreeze()
    return row


def main() -> None:
    token_lists = contexts()
    rows = [
        run("full-only", TreeSpec(page_size=PAGE), token_lists),
        run("full+swa4096+mamba", TreeSpec.hybrid(PAGE, swa_window=SWA_WINDOW, mamba=True),
            token_lists),
    ]
    print(f"{'tree':<20} {'nodes':>6} {'keys ms/ctx':>11} {'insert/s':>9} {'match/s':>9} "
          f"{'evict/s':>9} {'swa evict/s':>11}")
    for r in rows:
        swa = f"{r['swa_evictions_per_s']:>11.0f}" if r["swa_evictions_per_s"] else f"{'-':>11}"
        print(f"{r['name']:<20} {r['nodes']:>6} {r['page_keys_s'] / CONTEXTS * 1e3:>11.2f} "
              f"{r['inserts_per_s']:>9.0f} {r['matches_per_s']:>9.0f} "
              f"{r['evictions_per_s']:>9.0f} {swa}")
    out = Path(__file__).resolve().parent.parent / "results" / "bench_tree_ops.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
