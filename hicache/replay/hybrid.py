"""Zero-time replay for hybrid models (FULL + SWA and/or MAMBA components), L1 only.

Each request, in arrival order::

    match -> reuse up to the safe boundary every component accepts
          -> compute the rest -> insert FULL for the new pages, SWA for the last window,
             a MAMBA checkpoint at the end of the prompt

so a researcher sees what seed 003 describes on a real trace: reuse is bounded by the
strictest component at each boundary (a MAMBA checkpoint exists only where some request
ended; SWA needs a live window). Each component has its own pool; running short of one
evicts that component alone (tombstones), running short of FULL evicts leaves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from hicache.replay.engine import ReplayRecord
from hicache.runtime.handles import Tier
from hicache.tree.actions import Action, FreeDevice
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.request import Request


class HybridReplayCache:
    def __init__(self, *, page_size: int, full_tokens: int, swa_window: int = 0,
                 swa_tokens: int | None = None, mamba_slots: int = 0,
                 policy: str = "lru") -> None:
        if not swa_window and not mamba_slots:
            raise ValueError("a hybrid replay needs --swa-window and/or --mamba-slots")
        self.page = page_size
        self.spec = TreeSpec.hybrid(page_size, swa_window=swa_window, mamba=mamba_slots > 0)
        self.tree = UnifiedRadixTree(self.spec, eviction_policy=policy)
        self.pools: dict[Kind, PageAllocator] = {
            Kind.FULL: PageAllocator(full_tokens // page_size, tier=Tier.DEVICE, pool="full")}
        if swa_window:
            swa = swa_tokens if swa_tokens is not None else full_tokens
            self.pools[Kind.SWA] = PageAllocator(swa // page_size, tier=Tier.DEVICE, pool="swa")
        if mamba_slots:
            self.pools[Kind.MAMBA] = PageAllocator(mamba_slots, tier=Tier.DEVICE, pool="mamba")
        self.window_pages = math.ceil(swa_window / page_size) if swa_window else 0

    def _apply(self, actions: Iterable[Action]) -> None:
        for a in actions:
            if isinstance(a, FreeDevice):
                self.pools[a.kind].free(a.extent)

    def _room(self, kind: Kind, pages: int) -> bool:
        pool = self.pools[kind]
        for _ in range(64):
            if pool.free_pages >= pages:
                return True
            res = self.tree.evict_device(pages - pool.free_pages, kind)
            if not res.actions:
                break
            self._apply(res.actions)
        return pool.free_pages >= pages

    def process(self, req: Request) -> ReplayRecord:
        pages = page_keys(req.tokens, self.page)
        m = self.tree.match(pages)
        hit = m.device_tokens
        reused = hit // self.page
        lock = self.tree.lock(m.device_node)
        new = len(pages) - reused
        values = {}
        needs = {Kind.FULL: new}
        if Kind.SWA in self.pools:  # only the last window stays; earlier pages: tombstones
            needs[Kind.SWA] = min(new, self.window_pages)
        if Kind.MAMBA in self.pools and new:
            needs[Kind.MAMBA] = 1
        if new and all(self._room(k, n) for k, n in needs.items() if n):
            for kind, n in needs.items():
                if n:
                    values[kind] = self.pools[kind].alloc(n)
            self._apply(self.tree.insert(pages, values).actions)
        self.tree.unlock(lock)
        return ReplayRecord(req.rid, req.arrival, len(req.tokens), hit, 0, 0)
