"""Replays an SGLang recording (scripts/record_sglang_oracle.py) through UnifiedRadixTree.

The replayer owns one PageAllocator per pool and executes every action the tree emits, as
a scheduler does; each operation's results are compared with SGLang's, then the state
after it: evictable and protected sizes per component, and a digest of the whole tree
(node spans, which components each node holds on L1, lock counts). Units are SGLang's:
tokens for FULL and SWA, slots for MAMBA.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.tree.actions import FreeDevice
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.locks import LockHandle
from hicache.tree.node import Node
from hicache.tree.radix import UnifiedRadixTree


@dataclass
class Held:
    handle: LockHandle
    prefix_tokens: int


class Mismatch(AssertionError):
    pass


class Replayer:
    def __init__(self, rec: dict) -> None:
        self.rec = rec
        self.page = rec["page_size"]
        self.kinds = [Kind(c) for c in rec["components"]]
        spec = TreeSpec.hybrid(self.page, swa_window=rec["swa_window"] or 0,
                               mamba=Kind.MAMBA in self.kinds)
        self.tree = UnifiedRadixTree(spec, eviction_policy=rec["policy"])
        pages = 4 * rec["capacity_tokens"] // self.page + 64  # never the limiting factor
        self.pools = {k: PageAllocator(pages, tier=Tier.DEVICE, pool=k)
                      for k in self.kinds}
        self.held: dict[int, Held] = {}
        self.handles = 0

    # -- helpers -------------------------------------------------------------------------
    def pages(self, pids: list[int]) -> list[tuple[int, ...]]:
        p = self.page
        return [tuple(pid * p + j for j in range(p)) for pid in pids]

    def execute(self, actions) -> None:  # noqa: ANN001 - a sequence of tree actions
        for a in actions:
            if isinstance(a, FreeDevice):
                self.pools[a.kind].free(a.extent)

    def insert(self, pids: list[int], prefix_pages: int, swa_from: int | None) -> list:
        n = len(pids)
        values: dict[Kind, CacheExtentRef] = {
            Kind.FULL: self.pools[Kind.FULL].alloc(n - prefix_pages)}
        if Kind.SWA in self.pools and swa_from is not None and swa_from < n:
            values[Kind.SWA] = self.pools[Kind.SWA].alloc(n - max(swa_from, prefix_pages))
        if Kind.MAMBA in self.pools:
            values[Kind.MAMBA] = self.pools[Kind.MAMBA].alloc(1)
        res = self.tree.insert(self.pages(pids), values)
        self.execute(res.actions)
        out: list = [res.existing_pages * self.page]
        if Kind.MAMBA in self.pools:
            out.append(int(any(isinstance(a, FreeDevice) and a.kind is Kind.MAMBA
                               for a in res.actions)))
        else:
            out.append(None)
        return out

    def evict(self, full: int, swa: int, mamba: int) -> list[int]:
        """SGLang's evict: FULL, then SWA, then MAMBA, each until its request is met,
        counting what earlier components' evictions freed of it (asking the tree for 0
        pages when nothing is left to free: it must free nothing then)."""
        freed: dict[Kind, int] = {}
        for kind, want in ((Kind.FULL, full), (Kind.SWA, swa), (Kind.MAMBA, mamba)):
            if kind not in self.pools:
                continue
            need = want if kind is Kind.MAMBA else -(-want // self.page)
            res = self.tree.evict_device(max(need - freed.get(kind, 0), 0), kind)
            self.execute(res.actions)
            for pool, n in res.freed.items():
                freed[pool] = freed.get(pool, 0) + n
        return [freed.get(Kind.FULL, 0) * self.page, freed.get(Kind.SWA, 0) * self.page,
                freed.get(Kind.MAMBA, 0)]

    # -- one recorded operation ----------------------------------------------------------
    def apply(self, op: list) -> tuple[list, list]:
        """Run ``op``; return (what hicache produced, what SGLang recorded)."""
        kind = op[0]
        if kind == "insert":
            _, pids, swa_from, *expected = op
            return self.insert(pids, 0, swa_from), expected
        if kind == "match":
            _, pids, lock, *expected = op
            m = self.tree.match(self.pages(pids))
            if lock:
                self.held[self.handles] = Held(self.tree.lock(m.device_node), m.device_tokens)
                self.handles += 1
            return [m.device_tokens, m.matched_pages * self.page], expected
        if kind == "finish":
            _, h, pids, swa_from, *expected = op
            held = self.held.pop(h)
            got = self.insert(pids, held.prefix_tokens // self.page, swa_from)
            self.tree.unlock(held.handle)
            return got, expected
        if kind == "unlock":
            self.tree.unlock(self.held.pop(op[1]).handle)
            return [], []
        if kind == "evict":
            _, f, s, m, *expected = op
            return self.evict(f, s, m), expected
        raise ValueError(f"unknown recorded operation {kind!r}")

    def sizes(self) -> list[int]:
        out: list[int] = []
        for kind in self.kinds:
            unit = 1 if kind is Kind.MAMBA else self.page
            evictable, protected = self.tree.residency.sizes(kind)
            out += [evictable * unit, protected * unit]
        return out

    def canonical(self) -> str:
        """The text scripts/record_sglang_oracle.py writes for SGLang's tree."""
        def node_text(node: Node) -> str:
            pids = ".".join(str(key[0] // self.page) for key in node.key)
            flags = "".join(f for f, k in (("F", Kind.FULL), ("S", Kind.SWA),
                                            ("M", Kind.MAMBA)) if k in node.device)
            locks = ",".join(str(node.locks.get(k, 0)) for k in self.kinds)
            kids = sorted(node.children.values(), key=lambda c: c.key[0][0])
            return f"({pids}:{flags}:{locks}" + "".join(map(node_text, kids)) + ")"

        kids = sorted(self.tree.root.children.values(), key=lambda c: c.key[0][0])
        return "".join(map(node_text, kids))

    def state(self) -> list:
        return [*self.sizes(), hashlib.sha1(self.canonical().encode()).hexdigest()[:12]]

    def check_allocators(self) -> None:
        """Every allocated page is held by the tree, exactly once (nothing leaked)."""
        for kind, pool in self.pools.items():
            held = self.tree.held_pages(Tier.DEVICE, kind)
            if pool.used_pages != held:
                raise Mismatch(f"{kind.value}: allocator has {pool.used_pages} pages in "
                               f"use, the tree holds {held}")


def replay(rec: dict) -> Replayer:
    """Replay every operation; raise Mismatch at the first difference from SGLang."""
    r = Replayer(rec)
    for i, (op, state) in enumerate(zip(rec["ops"], rec["states"], strict=True)):
        got, expected = r.apply(op)
        if got != expected:
            raise Mismatch(f"{rec['name']} op {i} {op[:3]}: hicache {got}, SGLang {expected}")
        mine = r.state()
        if mine != state:
            raise Mismatch(f"{rec['name']} after op {i} {op[:3]}: hicache state {mine}, "
                           f"SGLang {state}\nhicache tree: {r.canonical()}")
        r.check_allocators()
    if r.canonical() != rec["final_tree"]:
        raise Mismatch(f"{rec['name']}: final trees differ\nhicache: {r.canonical()}\n"
                       f"SGLang:  {rec['final_tree']}")
    return r
