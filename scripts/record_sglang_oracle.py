"""Record what SGLang's radix caches decide, for the differential tests in tests/oracle/.

SGLang 0.5.23's ``UnifiedRadixCache`` (FULL, FULL+SWA, FULL+MAMBA) runs on a CPU with the
oracle environment of ``shared/tools/sglang-oracle`` (its README installs it). This script
drives it with seeded streams of inserts, matches (with locks), request finishes, unlocks
and evictions under memory pressure, and writes every result to a small JSON file; the
tests replay each file through ``UnifiedRadixTree`` without SGLang installed.

    python scripts/record_sglang_oracle.py --python ORACLE_VENV/bin/python \\
        --stubs PATH/TO/sglang-oracle            # all streams -> tests/oracle/recordings
    python scripts/record_sglang_oracle.py ... --only swa_p1_w4
    python scripts/record_sglang_oracle.py ... --trace mooncake_synthetic_trace.jsonl \\
        --page-size 512 --capacity-tokens 1000000   # SGLang RadixCache hit rate of a trace

``--python`` / ``SGLANG_ORACLE_PYTHON``: the oracle venv's python (the script re-runs
itself with it); ``--stubs`` / ``SGLANG_ORACLE_STUBS``: the folder holding
``sgl_cpu_stubs.py``. The recording format is described in tests/oracle/README.md.
This file imports nothing from hicache: the oracle side stays independent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORMAT = 1



@dataclass(frozen=True)
class Stream:
    """One recording. Capacities are small so that evictions happen under pressure."""

    name: str
    page_size: int
    components: tuple[str, ...]
    capacity_tokens: int  # FULL (and SWA) pool
    seed: int
    ops: int
    swa_window: int | None = None  # tokens
    mamba_slots: int | None = None
    policy: str = "lru"


STREAMS = [
    Stream("full_p1", 1, ("full",), 96, 11, 420),
    Stream("full_p16", 16, ("full",), 1024, 12, 380),
    Stream("full_p1_lfu", 1, ("full",), 96, 20, 300, policy="lfu"),
    Stream("full_p4_fifo", 4, ("full",), 256, 21, 240, policy="fifo"),
    Stream("swa_p1_w1", 1, ("full", "swa"), 96, 13, 380, swa_window=1),
    Stream("swa_p1_w4", 1, ("full", "swa"), 96, 14, 420, swa_window=4),
    Stream("swa_p1_w7", 1, ("full", "swa"), 128, 15, 420, swa_window=7),
    Stream("swa_p4_w6", 4, ("full", "swa"), 256, 16, 380, swa_window=6),
    Stream("swa_p4_w16", 4, ("full", "swa"), 320, 17, 380, swa_window=16),
    Stream("mamba_p1", 1, ("full", "mamba"), 96, 18, 420, mamba_slots=12),
    Stream("mamba_p4", 4, ("full", "mamba"), 256, 19, 380, mamba_slots=10),
    Stream("swa_mamba_p1_w4", 1, ("full", "swa", "mamba"), 96, 22, 300, swa_window=4,
           mamba_slots=12),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=os.environ.get("SGLANG_ORACLE_PYTHON"),
                   help="the oracle venv's python (default: this interpreter)")
    p.add_argument("--stubs", default=os.environ.get("SGLANG_ORACLE_STUBS"),
                   help="folder with sgl_cpu_stubs.py (shared/tools/sglang-oracle)")
    p.add_argument("--out", type=Path, default=REPO / "tests" / "oracle" / "recordings")
    p.add_argument("--only", action="append", help="record only these streams")
    p.add_argument("--trace", type=Path, help="Mooncake trace: print RadixCache hit rates")
    p.add_argument("--page-size", type=int, default=512)
    p.add_argument("--capacity-tokens", default="1000000")
    p.add_argument("--max-requests", type=int, default=None)
    p.add_argument("--cache", default="legacy", choices=("legacy", "unified"),
                   help="with --trace: RadixCache (legacy) or UnifiedRadixCache (FULL)")
    p.add_argument("--trace-out", type=Path, default=None,
                   help="with --trace: also write the results here as one JSON document")
    p.add_argument("--swa-window", type=int, default=0,
                   help="with --trace: a hybrid UnifiedRadixCache with this SWA window")
    p.add_argument("--swa-tokens", type=int, default=None,
                   help="with --swa-window: SWA pool tokens (default: --capacity-tokens)")
    p.add_argument("--mamba-slots", type=int, default=0,
                   help="with --trace: a hybrid UnifiedRadixCache with MAMBA slots")
    args = p.parse_args(argv)
    if args.python and not os.environ.get("_SGLANG_ORACLE_CHILD"):
        env = dict(os.environ, _SGLANG_ORACLE_CHILD="1")
        return subprocess.call([args.python, __file__, *(argv or sys.argv[1:])], env=env)
    if not args.stubs:
        p.error("--stubs (or SGLANG_ORACLE_STUBS) is required: the sglang-oracle folder")
    oracle = _import_sglang(args.stubs)
    if args.trace is not None:
        results = []
        for cap in (int(float(c)) for c in args.capacity_tokens.split(",")):
            if args.swa_window or args.mamba_slots:
                results.append(hybrid_trace_hit_rate(
                    oracle, args.trace, args.page_size, cap, args.max_requests,
                    args.swa_window, args.swa_tokens, args.mamba_slots))
            else:
                results.append(trace_hit_rate(oracle, args.trace, args.page_size, cap,
                                              args.max_requests, args.cache))
            print(json.dumps(results[-1]), flush=True)
        if args.trace_out is not None:
            args.trace_out.write_text(json.dumps(results, indent=1) + "\n")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for stream in STREAMS:
        if args.only and stream.name not in args.only:
            continue
        rec = record(oracle, stream)
        path = args.out / f"{stream.name}.json"
        path.write_text(json.dumps(rec, separators=(",", ":")) + "\n")
        print(f"{path.name}: {len(rec['ops'])} ops, {path.stat().st_size / 1024:.1f} KiB, "
              f"{rec['summary']}")
    return 0


def _import_sglang(stubs: str):  # noqa: ANN202 - a namespace of SGLang names
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    sys.path.insert(0, stubs)
    import sgl_cpu_stubs
    sgl_cpu_stubs.install()  # before any sglang import
    import sglang
    import sglang.test.kits.unified_radix_cache.fixtures as fx
    import torch
    from sglang.srt.mem_cache import base_prefix_cache as bpc
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.test.kits.unified_radix_cache.config import CacheConfig
    torch.set_num_threads(1)
    fx.get_device = lambda *a, **k: "cpu"  # the kit asks for a GPU otherwise
    return argparse.Namespace(
        torch=torch, version=sglang.__version__, fx=fx, CacheConfig=CacheConfig,
        CT=ComponentType, RadixKey=RadixKey, RadixCache=RadixCache,
        CacheInitParams=CacheInitParams, TokenAllocator=TokenToKVPoolAllocator,
        InsertParams=bpc.InsertParams, MatchPrefixParams=bpc.MatchPrefixParams,
        EvictParams=bpc.EvictParams)


class SglangCache:
    """One UnifiedRadixCache on CPU pools, driven like a scheduler drives it."""

    def __init__(self, o, s: Stream) -> None:  # noqa: ANN001
        self.o, self.page = o, s.page_size
        self.kinds = [getattr(o.CT, c.upper()) for c in s.components]
        self.swa = o.CT.SWA in self.kinds
        self.mamba = o.CT.MAMBA in self.kinds
        kw = {"sliding_window_size": s.swa_window} if s.swa_window else {}
        if self.mamba:
            kw.update(mamba_cache_size=s.mamba_slots, enable_mamba_extra_buffer=s.page_size > 1)
        cfg = o.CacheConfig(page_size=s.page_size, components=tuple(self.kinds),
                            kv_size=s.capacity_tokens, max_context_len=4096,
                            eviction_policy=s.policy, **kw)
        # SGLang's Python tree core: canonical() reads its nodes
        self.cache, self.alloc, self.req_pool = o.fx.build_fixture(cfg,
                                                                   tree_core_backend="python")
        self.core = self.cache.tree_core

    def key(self, pids: list[int]):  # noqa: ANN201
        from array import array
        return self.o.RadixKey(array("q", [p * self.page + j for p in pids
                                           for j in range(self.page)]))

    # -- pools ---------------------------------------------------------------------------
    def free_full(self) -> int:
        return (self.alloc.full_available_size() if self.swa
                else self.alloc.available_size())

    def free_swa(self) -> int:
        return self.alloc.swa_available_size() if self.swa else 1 << 30

    def free_mamba(self) -> int:
        return self.req_pool.mamba_allocator.available_size() if self.mamba else 1 << 30

    def take(self, n: int):  # noqa: ANN201 - fresh FULL (+SWA) slots for n tokens
        if not (self.swa and self.page > 1):
            return self.alloc.alloc(n)
        full = self.alloc.full_attn_allocator.alloc(n)  # the kit's alloc_extend stand-in
        swa = self.alloc.swa_attn_allocator.alloc(n)
        self.alloc.full_to_swa_index_mapping[full] = swa
        return full

    # -- operations ----------------------------------------------------------------------
    def insert(self, pids: list[int], prefix_node, prefix: int, swa_from: int | None,  # noqa: ANN001
               ) -> tuple[int, int | None]:
        """Insert ``pids``: the first ``prefix`` tokens are the tree's own (locked at
        ``prefix_node``), the rest fresh; SWA of the fresh part before ``swa_from`` pages
        was already freed (out of the window). -> (prefix_len, mamba_exist)."""
        o, torch = self.o, self.o.torch
        n = len(pids) * self.page
        fresh = self.take(n - prefix)
        value = fresh if not prefix else torch.cat(
            [self.cache.path_device_indices(prefix_node)[:prefix], fresh])
        params = o.InsertParams(key=self.key(pids), value=value.to(torch.int64),
                                prev_prefix_len=prefix)
        if self.swa:
            es = max(swa_from * self.page, prefix)
            if es > prefix:
                self.alloc.free_swa_segment(value[prefix:es], start_pos=0)
            params.set_evicted_seqlen(o.CT.SWA, es)
        slot = None
        if self.mamba:
            slot = self.req_pool.mamba_allocator.alloc(1)
            params.mamba_value = slot
        r = self.cache.insert(params)
        if self.mamba and r.mamba_exist:
            self.req_pool.mamba_allocator.free(slot)
        return int(r.prefix_len), (int(r.mamba_exist) if self.mamba else None)

    def match(self, pids: list[int]):  # noqa: ANN201
        r = self.cache.match_prefix(self.o.MatchPrefixParams(key=self.key(pids)))
        return r

    def evict(self, full: int, swa: int, mamba: int) -> list[int]:
        r = self.cache.evict(self.o.EvictParams(num_tokens=full, swa_num_tokens=swa,
                                                mamba_num=mamba))
        return [int(r.num_tokens_evicted), int(r.swa_num_tokens_evicted),
                int(r.mamba_num_evicted)]

    def sizes(self) -> list[int]:
        out = []
        for kind in self.kinds:
            out += [int(self.core.component_evictable_size_[kind]),
                    int(self.core.component_protected_size_[kind])]
        return out

    def canonical(self) -> str:
        """The tree as text: per node (children by first page id) its page ids, which
        components it holds on L1 (F, S, M) and its lock counts. tests/oracle/replay.py
        writes the same text for hicache's tree."""
        ct = self.o.CT

        def node_text(node) -> str:  # noqa: ANN001
            toks = node.key.token_ids
            pids = [toks[i] // self.page for i in range(0, len(toks), self.page)]
            flags = "".join(f for f, k in (("F", ct.FULL), ("S", ct.SWA), ("M", ct.MAMBA))
                            if k in self.kinds and node.component_data[k].value is not None)
            locks = ",".join(str(node.component_data[k].lock_ref) for k in self.kinds)
            kids = sorted(node.children.values(), key=lambda c: c.key.token_ids[0])
            return (f"({'.'.join(map(str, pids))}:{flags}:{locks}"
                    + "".join(node_text(c) for c in kids) + ")")

        root = self.core.root_node
        kids = sorted(root.children.values(), key=lambda c: c.key.token_ids[0])
        return "".join(node_text(c) for c in kids)


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class Generator:
    """Seeded operations shaped like a scheduler's: prompts that share prefixes, requests
    that match, lock, and later insert their prompt plus new pages and unlock, plain
    inserts, and evictions (explicit ones, and those an allocation needs)."""

    def __init__(self, cache: SglangCache, seed: int, window: int | None) -> None:
        self.c, self.rng = cache, random.Random(seed)
        self.window_pages = -(-window // cache.page) if window else 0
        self.max_pages = max(8, 32 // cache.page)
        self.prompts: list[list[int]] = []
        self.next_pid = 1
        self.live: dict[int, tuple] = {}  # handle -> (lock, match node, prefix tokens, pids)
        self.handles = 0
        self.ops: list[list] = []
        self.states: list[list] = []

    def prompt(self) -> list[int]:
        rng = self.rng
        base: list[int] = []
        if self.prompts and rng.random() < 0.75:
            src = rng.choice(self.prompts)  # a shared prefix, or a conversation's next turn
            base = src[:rng.randint(0, len(src))] if rng.random() < 0.6 else list(src)
        extra = rng.randint(0 if base else 1, max(1, self.max_pages - len(base)))
        for _ in range(extra):
            if rng.random() < 0.15:
                base.append(rng.randint(1, 6))  # a small alphabet: coincidental sharing
            else:
                self.next_pid += 1
                base.append(100 + self.next_pid)
        return base[:self.max_pages] or [self.next_pid + 100]

    def emit(self, op: list) -> None:
        self.ops.append(op)
        self.states.append([*self.c.sizes(), digest(self.c.canonical())])

    def room(self, tokens: int) -> bool:
        """Evict what an allocation of ``tokens`` (+ one MAMBA slot) lacks."""
        c = self.c
        need = [max(0, tokens - c.free_full()), max(0, tokens - c.free_swa()) if c.swa else 0,
                max(0, 1 - c.free_mamba()) if c.mamba else 0]
        if any(need):
            self.emit(["evict", *need, *c.evict(*need)])
        return (c.free_full() >= tokens and c.free_swa() >= tokens
                and c.free_mamba() >= 1)

    def swa_from(self, n: int, prefix_pages: int) -> int | None:
        if not self.c.swa:
            return None
        if self.rng.random() < 0.7:  # a request keeps its last window plus a page
            return max(prefix_pages, n - self.window_pages - 1)
        return self.rng.randint(prefix_pages, n)

    def step(self) -> None:
        rng, c = self.rng, self.c
        r = rng.random()
        if r < 0.25:
            pids = self.prompt()
            if self.room(len(pids) * c.page):
                self.prompts.append(pids)
                swa_from = self.swa_from(len(pids), 0)
                self.emit(["insert", pids, swa_from, *c.insert(pids, None, 0, swa_from)])
        elif r < 0.55 or not self.live:
            pids = self.prompt()
            m = c.match(pids)
            hit, full_hit = int(m.device_prefix_len), int(m.full_kv_hit_length)
            lock = rng.random() < 0.6 and len(self.live) < 4
            if lock:
                self.live[self.handles] = (c.cache.lock(m.last_device_node),
                                           m.last_device_node, hit, pids)
                self.handles += 1
            self.emit(["match", pids, int(lock), hit, full_hit])
        elif r < 0.75:
            h = rng.choice(sorted(self.live))
            lock, node, hit, pids = self.live[h]
            pids = pids[:max(hit // c.page, rng.randint(0, len(pids)))]
            pids += self.prompt()[:rng.randint(0, 4)]
            n, prefix_pages = len(pids), hit // c.page
            if n > prefix_pages and self.room((n - prefix_pages) * c.page):
                self.prompts.append(pids)
                swa_from = self.swa_from(n, prefix_pages)
                res = c.insert(pids, node, hit, swa_from)
                c.cache.unlock(lock)
                del self.live[h]
                self.emit(["finish", h, pids, swa_from, *res])
        elif r < 0.85:
            h = rng.choice(sorted(self.live))
            c.cache.unlock(self.live.pop(h)[0])
            self.emit(["unlock", h])
        else:
            self.emit(["evict", *(want := self.eviction()), *c.evict(*want)])

    def eviction(self) -> list[int]:
        """An explicit eviction request: mostly of one component (hybrid streams favour
        SWA or MAMBA, whose recency lists FULL pressure never walks)."""
        rng, c = self.rng, self.c
        amount = rng.randint(1, 8 * c.page)
        r = rng.random()
        if c.swa:
            full, swa = ((0, amount) if r < 0.6 else (amount, 0) if r < 0.8
                         else (amount, rng.randint(1, 8 * c.page)))
            return [full, swa, rng.choice((0, 0, 1)) if c.mamba else 0]
        if c.mamba:
            mamba = rng.randint(1, 3)
            return [0, 0, mamba] if r < 0.6 else [amount, 0, 0] if r < 0.8 \
                else [amount, 0, mamba]
        return [rng.choice((0, amount)), 0, 0]


def record(o, s: Stream) -> dict:  # noqa: ANN001
    cache = SglangCache(o, s)
    gen = Generator(cache, s.seed, s.swa_window)
    while len(gen.ops) < s.ops:
        gen.step()
    for h in sorted(gen.live):  # release what is still locked, as requests end
        cache.cache.unlock(gen.live.pop(h)[0])
        gen.emit(["unlock", h])
    kinds = [op[0] for op in gen.ops]
    evicted = [sum(op[4 + k] for op in gen.ops if op[0] == "evict") for k in range(3)]
    return {
        "format": FORMAT, "sglang": o.version, "core": "python", "name": s.name,
        "seed": s.seed,
        "page_size": s.page_size, "components": list(s.components),
        "swa_window": s.swa_window, "capacity_tokens": s.capacity_tokens,
        "mamba_slots": s.mamba_slots, "policy": s.policy,
        "summary": {k: kinds.count(k) for k in sorted(set(kinds))}
        | {"evicted_full_swa_mamba": evicted},
        "ops": gen.ops, "states": gen.states, "final_tree": cache.canonical(),
    }


def trace_hit_rate(o, path: Path, page: int, capacity: int,  # noqa: ANN001
                   max_requests: int | None, kind: str = "legacy") -> dict:
    """SGLang's RadixCache (or UnifiedRadixCache) on a Mooncake trace in arrival order:
    match, lock, evict what the new pages need, insert the prompt (the tree's own KV for
    the matched prefix), unlock: what ``hicache-lab replay`` does with L1 only."""
    torch = o.torch
    alloc = o.TokenAllocator(size=capacity, dtype=torch.bfloat16, device="cpu",
                             kvcache=None, need_sort=False)
    if kind == "legacy":
        cache = o.RadixCache(o.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc,
            page_size=page))
        lock, unlock = cache.inc_lock_ref, cache.dec_lock_ref
    else:
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        rp = ReqToTokenPool(size=4, max_context_len=4096, device="cpu",
                            enable_memory_saver=False)
        cache = UnifiedRadixCache(o.CacheInitParams(
            disable=False, req_to_token_pool=rp, token_to_kv_pool_allocator=alloc,
            page_size=page, tree_components=(o.CT.FULL,), tree_core_backend="python"))
        lock, unlock = cache.lock, cache.unlock

    def admit(n: int, key, m) -> None:  # noqa: ANN001
        got = int(m.device_prefix_len)
        aligned = n // page * page
        new = aligned - got
        node = m.last_device_node
        held = lock(node)
        if new > 0:
            if alloc.available_size() < new:
                cache.evict(o.EvictParams(num_tokens=new - alloc.available_size()))
            if alloc.available_size() >= new:
                fresh = alloc.alloc(new)
                value = torch.cat([cache.path_device_indices(node)[:got], fresh]) \
                    if got else fresh
                cache.insert(o.InsertParams(key=key[:aligned], value=value.to(torch.int64),
                                            prev_prefix_len=got))
        unlock(node if kind == "legacy" else held)

    return {"cache": kind, "page_size": page, "capacity_tokens": capacity} | _replay_trace(
        o, cache, path, max_requests, admit)


def _replay_trace(o, cache, path: Path, max_requests: int | None, admit) -> dict:  # noqa: ANN001
    """Match each request of the trace in arrival order, count its L1 hit, then let
    ``admit(prompt length, key, match)`` cache it; the counts as a result row."""
    prompt = hit = requests = 0
    for n, key in _trace_keys(o, path, max_requests):
        m = cache.match_prefix(o.MatchPrefixParams(key=key))
        requests, prompt, hit = requests + 1, prompt + n, hit + int(m.device_prefix_len)
        admit(n, key, m)
    return {"trace": path.name, "requests": requests, "prompt_tokens": prompt,
            "cached_tokens": hit, "hit_rate": hit / prompt if prompt else 0.0,
            "sglang": o.version}


def _trace_keys(o, path: Path, max_requests: int | None):  # noqa: ANN001, ANN202
    """(prompt length, RadixKey) per request of a Mooncake trace, in arrival order; token
    ``h * 512 + j`` is token j of the block with hash id h (hicache's BlockTokens)."""
    from array import array

    import numpy as np
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = rows[:max_requests] if max_requests else rows
    rows.sort(key=lambda r: r["timestamp"])  # stable: file order breaks ties
    block = 512
    offsets = np.arange(block, dtype=np.int64)
    for row in rows:
        n = row["input_length"]
        toks = (np.asarray(row["hash_ids"], dtype=np.int64)[:, None] * block
                + offsets).ravel()[:n]
        yield n, o.RadixKey(array("q", toks.tobytes()))


def hybrid_trace_hit_rate(o, path: Path, page: int, capacity: int,  # noqa: ANN001
                          max_requests: int | None, window: int, swa_tokens: int | None,
                          mamba_slots: int) -> dict:
    """A FULL+SWA and/or MAMBA UnifiedRadixCache on a Mooncake trace, driven as
    ``hicache-lab replay --swa-window/--mamba-slots`` drives hicache's tree: reuse up to
    the device boundary, then the new pages get FULL, the last window SWA, the end a
    checkpoint; what they lack is evicted first (tiny KV rows: only indices matter)."""
    torch, ct = o.torch, o.CT
    comps = [ct.FULL] + ([ct.SWA] if window else []) + ([ct.MAMBA] if mamba_slots else [])
    kw = {"sliding_window_size": window} if window else {}
    if mamba_slots:
        kw.update(mamba_cache_size=mamba_slots, enable_mamba_extra_buffer=page > 1)
    cfg = o.CacheConfig(page_size=page, components=tuple(comps), kv_size=capacity,
                        max_context_len=4096, head_num=1, head_dim=8, num_layers=2,
                        full_attention_layer_ids=(1,), **kw)
    if window and swa_tokens is not None and swa_tokens != capacity:
        raise SystemExit("--swa-tokens: the SGLang test kit sizes the SWA pool as FULL's")
    cache, alloc, req_pool = o.fx.build_fixture(cfg, tree_core_backend="python")
    window_pages = -(-window // page) if window else 0

    def free(kind) -> int:  # noqa: ANN001
        if kind is ct.MAMBA:
            return req_pool.mamba_allocator.available_size()
        if kind is ct.SWA:
            return alloc.swa_available_size()
        return alloc.full_available_size() if window else alloc.available_size()

    def admit(n: int, key, m) -> None:  # noqa: ANN001
        got = int(m.device_prefix_len)
        node = m.last_device_node
        held = cache.lock(node)
        aligned = n // page * page
        new = (aligned - got) // page
        needs = {ct.FULL: new * page}
        if window:
            needs[ct.SWA] = min(new, window_pages) * page
        if mamba_slots:
            needs[ct.MAMBA] = 1
        if new:
            short = {k: max(0, v - free(k)) for k, v in needs.items()}
            if any(short.values()):
                cache.evict(o.EvictParams(num_tokens=short[ct.FULL],
                                          swa_num_tokens=short.get(ct.SWA, 0),
                                          mamba_num=short.get(ct.MAMBA, 0)))
        if new and all(free(k) >= v for k, v in needs.items()):
            if window:
                fresh = alloc.full_attn_allocator.alloc(new * page)
                swa = alloc.swa_attn_allocator.alloc(needs[ct.SWA])
                alloc.full_to_swa_index_mapping[fresh[len(fresh) - len(swa):]] = swa
            else:
                fresh = alloc.alloc(new * page)
            value = torch.cat([cache.path_device_indices(node)[:got], fresh]) if got \
                else fresh
            params = o.InsertParams(key=key[:aligned], value=value.to(torch.int64),
                                    prev_prefix_len=got)
            if window:
                params.set_evicted_seqlen(ct.SWA, aligned - needs[ct.SWA])
            if mamba_slots:
                params.mamba_value = req_pool.mamba_allocator.alloc(1)
            r = cache.insert(params)
            if mamba_slots and r.mamba_exist:
                req_pool.mamba_allocator.free(params.mamba_value)
        cache.unlock(held)

    return {"cache": "unified", "page_size": page, "capacity_tokens": capacity,
            "swa_window": window, "mamba_slots": mamba_slots} | _replay_trace(
        o, cache, path, max_requests, admit)


if __name__ == "__main__":
    sys.exit(main())
