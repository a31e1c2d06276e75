"""Zero-time replay for hybrid models (FULL + SWA and/or MAMBA components), L1 or L1+L2.

Each request, in arrival order::

    match -> reuse up to the safe boundary every component accepts (with L2: the L1+L2
             boundary, loading what is on L2 only: FULL, the SWA window, the checkpoint)
          -> compute the rest -> insert FULL for the new pages, SWA for the last window,
             a MAMBA checkpoint at the end of the prompt -> write policy (L2 copies of
             every component)

so a researcher sees what seed 003 describes on a real trace: reuse is bounded by the
strictest component at each boundary (a MAMBA checkpoint exists only where some request
ended; SWA needs a live window). Each component has its own pool on each tier, the L2
pools in the L2:L1 ratio of FULL; running short of one evicts that component alone
(tombstones; on L2, that component's copies), running short of FULL evicts leaves
(demoted to L2 when backed up; write_back backs them up first, at once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from hicache.replay.engine import ReplayRecord
from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.state import host_state_pool_sizes
from hicache.tiers.write_policy import WritePolicy
from hicache.tree.actions import Action, BackupNode, FreeDevice, FreeHost
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.loadback import plan_loads
from hicache.tree.node import Node
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.request import Request

_ORDER = (Kind.FULL, Kind.SWA, Kind.MAMBA)


class HybridReplayCache:
    def __init__(self, *, page_size: int, full_tokens: int, swa_window: int = 0,
                 swa_tokens: int | None = None, mamba_slots: int = 0,
                 policy: str = "lru", host_tokens: int = 0,
                 write_policy: str = "write_through", load_back_threshold: int = 10) -> None:
        if not swa_window and not mamba_slots:
            raise ValueError("a hybrid replay needs --swa-window and/or --mamba-slots")
        self.page = page_size
        self.spec = TreeSpec.hybrid(page_size, swa_window=swa_window, mamba=mamba_slots > 0)
        self.tree = UnifiedRadixTree(self.spec, eviction_policy=policy)
        sizes = {"full": full_tokens // page_size}
        if swa_window:
            sizes["swa"] = (swa_tokens if swa_tokens is not None else full_tokens) // page_size
        if mamba_slots:
            sizes["mamba"] = mamba_slots
        self.pools = {Kind(p): PageAllocator(n, tier=Tier.DEVICE, pool=p)
                      for p, n in sizes.items()}
        host_full = host_tokens // page_size
        host = {"full": host_full, **host_state_pool_sizes(sizes, host_full)} if host_full \
            else {}
        self.host_pools = {Kind(p): PageAllocator(n, tier=Tier.HOST, pool=p)
                           for p, n in host.items()}
        self.host = self.host_pools.get(Kind.FULL)  # L2 FULL pages (what reports size)
        self.write = WritePolicy.named(write_policy)
        self.threshold = load_back_threshold
        self.tree.residency.host_enabled = bool(self.host_pools)
        self.tree.residency.write_back = bool(self.host_pools) and self.write.backup_on_eviction
        self.window_pages = math.ceil(swa_window / page_size) if swa_window else 0

    def _apply(self, actions: Iterable[Action]) -> None:
        for a in actions:
            if isinstance(a, FreeDevice):
                self.pools[a.kind].free(a.extent)
            elif isinstance(a, FreeHost):
                self.host_pools[a.kind].free(a.extent)
            elif isinstance(a, BackupNode):
                self._backup(a)

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

    def _host_room(self, kind: Kind, pages: int) -> bool:
        pool = self.host_pools.get(kind)
        if pool is None or pool.capacity < pages:
            return False
        if pool.free_pages < pages:
            deficit = pages - pool.free_pages
            res = (self.tree.evict_host(deficit) if kind is Kind.FULL else
                   self.tree.residency.evict_host_component(kind, deficit))
            self._apply(res.actions)
        return pool.free_pages >= pages

    def _backup(self, a: BackupNode, kinds: frozenset[Kind] | None = None) -> None:
        """An L2 copy of the node's L1 data (``kinds`` only), made at once; FULL (when
        copied) needs room, the other components go where their pool has room."""
        want = dict(a.extents)
        hosts: dict[Kind, CacheExtentRef] = {}
        for kind in _ORDER:
            ext = want.get(kind)
            if ext is None or (kinds is not None and kind not in kinds):
                continue
            if self._host_room(kind, ext.num_pages):
                hosts[kind] = self.host_pools[kind].alloc(ext.num_pages)
            elif kind is Kind.FULL:
                break
        if not hosts or (Kind.FULL in want and (kinds is None or Kind.FULL in kinds)
                         and Kind.FULL not in hosts):
            for kind, ext in hosts.items():
                self.host_pools[kind].free(ext)
            self.tree.residency.abort_backup(a.node_id)
            return
        self.tree.residency.narrow_backup(a.node_id, frozenset(hosts))
        self.tree.residency.complete_backup(a.node_id, hosts)

    def _write_through(self, node: Node | None) -> None:
        """The write policy over the inserted path (the parts an insert cuts above its
        leaf count its hit, as in the scheduler: hicache.kvcache.hybrid_tiers)."""
        if node is None or not self.host_pools or self.write.threshold is None:
            return
        for n in reversed(list(self.tree.path_to_root(node))):
            missing = frozenset(k for k in n.device if k not in n.host)
            if (n.on_device and missing and not n.backing_up
                    and self.write.backup_on_hit(max(n.hit_count, 1))):
                self._backup(self.tree.residency.begin_backup(n),
                             missing if n.on_host else None)

    def _load(self, m) -> tuple[Node | None, int]:  # noqa: ANN001 - a MatchResult
        """Reuse up to the L1+L2 boundary when its L2 part is worth loading: place each
        load on L1 (the tree owns it); (the node reuse ends at, tokens)."""
        if not self.host_pools or m.host_tokens <= 0 or m.host_tokens < self.threshold:
            return m.device_node, m.device_tokens
        loads = plan_loads(self.tree, m)
        lock = self.tree.lock(loads.path[-1])
        pin = self.tree.locks.lock_host(loads.sources)
        targets = ([(n, Kind.FULL) for n in loads.full] + [(n, Kind.SWA) for n in loads.swa]
                   + ([(loads.mamba, Kind.MAMBA)] if loads.mamba is not None else []))
        ok = all(self._room(k, loads.pages(k)) for k in _ORDER if loads.pages(k))
        if ok:
            for node, kind in targets:
                ext = self.pools[kind].alloc(node.host[kind].num_pages)
                self.tree.residency.put_value(node, "device", kind, ext)
                self.tree.residency.touched(node)
        self.tree.unlock(pin)
        self.tree.unlock(lock)
        return (loads.path[-1], loads.tokens) if ok else (m.device_node, m.device_tokens)

    def process(self, req: Request) -> ReplayRecord:
        pages = page_keys(req.tokens, self.page)
        m = self.tree.match(pages)
        node, hit = self._load(m)
        reused = hit // self.page
        lock = self.tree.lock(node)
        new = len(pages) - reused
        values = {}
        needs = {Kind.FULL: new}
        if Kind.SWA in self.pools:  # only the last window stays; earlier pages: tombstones
            needs[Kind.SWA] = min(new, self.window_pages)
        if Kind.MAMBA in self.pools and new:
            needs[Kind.MAMBA] = 1
        leaf = None
        if new and all(self._room(k, n) for k, n in needs.items() if n):
            for kind, n in needs.items():
                if n:
                    values[kind] = self.pools[kind].alloc(n)
            res = self.tree.insert(pages, values)
            self._apply(res.actions)
            leaf = res.node
        self.tree.unlock(lock)
        self._write_through(leaf)
        device = min(hit, m.device_tokens)
        return ReplayRecord(req.rid, req.arrival, len(req.tokens), device, hit - device, 0)
