"""Zero-time cache replay: each request, in arrival order, through the tree and tier policies.

For every request (one at a time, no compute, no transfer time)::

    match L1 / L2 ──> load the L2 tail (>= load_back_threshold tokens, all or nothing)
          └─ rest >= prefetch_threshold? query L3 by page-hash chain, stop at first miss,
             fetch the hit prefix into L2 (host-only nodes), then load it
    compute the remainder ──> insert into L1 ──> write policy backs nodes up to L2 ──> L3

The replay owns one PageAllocator per tier (the tree owns no memory) and executes the
tree's actions at once. L3 is a set of page-hash keys with optional LRU capacity.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from hicache.config import CacheConfig
from hicache.runtime.handles import Tier
from hicache.tiers.hashing import page_hashes
from hicache.tiers.prefetch import should_query
from hicache.tiers.write_policy import backup_threshold
from hicache.tree.actions import Action, BackupNode, FreeDevice, FreeHost
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.node import Node
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.request import Request


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    rid: int
    arrival: float
    prompt_tokens: int
    device_hit: int
    host_hit: int
    l3_hit: int

    @property
    def cached_tokens(self) -> int:
        return self.device_hit + self.host_hit + self.l3_hit


class L3Set:
    """L3 contents as page-hash keys; ``capacity_pages`` None = unbounded, else LRU."""

    def __init__(self, capacity_pages: int | None = None) -> None:
        self.capacity = capacity_pages
        self._keys: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def hit_prefix(self, keys: list[str], batch_pages: int = 128) -> int:
        """Consecutive hits from the start, queried in batches, stopping at the first miss."""
        hits = 0
        for b in range(0, len(keys), batch_pages):
            for k in keys[b:b + batch_pages]:
                if k not in self._keys:
                    return hits
                self._keys.move_to_end(k)
                hits += 1
        return hits

    def store(self, keys: Iterable[str]) -> None:
        for k in keys:
            if k in self._keys:
                continue
            self._keys[k] = None
            if self.capacity is not None and len(self._keys) > self.capacity:
                self._keys.popitem(last=False)


class ReplayCache:
    """A tiered cache driven in zero time. ``l2`` and ``l3`` follow ``cfg``."""

    def __init__(self, cfg: CacheConfig, *, l3: L3Set | None = None,
                 host_tokens: int | None = None) -> None:
        self.cfg = cfg
        page = cfg.page_size
        self.tree = UnifiedRadixTree(TreeSpec(page), eviction_policy=cfg.radix_eviction_policy,
                                     session_aware=cfg.enable_session_aware_eviction)
        self.l2 = cfg.enable_hierarchical_cache
        host = host_tokens if host_tokens is not None else (cfg.host_tokens() if self.l2 else 0)
        self.device = PageAllocator(cfg.device_tokens // page, tier=Tier.DEVICE)
        self.host = PageAllocator(host // page if self.l2 else 0, tier=Tier.HOST)
        self.tree.residency.host_enabled = self.l2
        self.tree.residency.write_back = cfg.hicache_write_policy == "write_back"
        self.threshold = backup_threshold(cfg.hicache_write_policy)
        self.l3 = l3
        self._hashes: list[str] = []

    # -- executing tree actions ------------------------------------------------------
    def _apply(self, actions: Iterable[Action]) -> None:
        for a in actions:
            if isinstance(a, FreeDevice):
                self.device.free(a.extent)
            elif isinstance(a, FreeHost):
                self.host.free(a.extent)
            elif isinstance(a, BackupNode):
                self._backup(a)

    def _backup(self, a: BackupNode) -> None:
        """Copy a node to L2 at once (zero time); give up if L2 has no room."""
        full = dict(a.extents)[Kind.FULL]
        if not self._make_room(self.host, full.num_pages):
            self.tree.residency.abort_backup(a.node_id)
            return
        nodes = self.tree.residency.complete_backup(
            a.node_id, {Kind.FULL: self.host.alloc(full.num_pages)})
        if self.l3 is not None:
            self.l3.store(self._keys_of(nodes))

    def _make_room(self, alloc: PageAllocator, pages: int) -> bool:
        for _ in range(4):  # write_back evictions back up first, then evict on a retry
            if alloc.free_pages >= pages:
                return True
            need = pages - alloc.free_pages
            res = (self.tree.evict_device(need) if alloc is self.device
                   else self.tree.evict_host(need))
            if not res.actions:
                break
            self._apply(res.actions)
        return alloc.free_pages >= pages

    def _keys_of(self, nodes: list[Node]) -> list[str]:
        keys: list[str] = []
        for node in nodes:
            first, count = self.tree.page_span(node)
            keys.extend(self._hashes[first:first + count])
        return keys

    # -- one request -----------------------------------------------------------------
    def _load(self, nodes: Iterable[Node]) -> bool:
        """L2 -> L1 for host-only nodes; all or nothing."""
        nodes = [n for n in nodes if not n.on_device]
        need = sum(n.num_pages for n in nodes)
        if not need or not self._make_room(self.device, need):
            return not need
        for n in nodes:
            self.tree.residency.put_value(n, "device", Kind.FULL, self.device.alloc(n.num_pages))
            self.tree.residency.touched(n)
        return True

    def process(self, req: Request) -> ReplayRecord:
        page = self.cfg.page_size
        pages = page_keys(req.tokens, page)
        self._hashes = page_hashes(req.tokens, page) if self.l3 is not None else []
        m = self.tree.match(pages)
        dev, host, l3 = m.device_tokens, 0, 0
        handle = self.tree.lock(m.last_node)
        if m.host_tokens >= self.cfg.load_back_threshold and self._load(m.host_tail):
            host = m.host_tokens
        reused = (dev + host) // page
        if self.l3 is not None and should_query(len(req.tokens) - reused * page, self.cfg):
            hits = self.l3.hit_prefix(self._hashes[reused:], self.cfg.prefetch_batch_pages)
            if hits * page >= self.cfg.prefetch_threshold and self.l2:
                l3 = self._fetch_l3(pages, reused, hits, handle)
        reused += l3 // page
        self.tree.unlock(handle)
        handle = self.tree.lock(self.tree.match(pages[:reused], touch=False).last_node)
        new = len(pages) - reused
        if new and self._make_room(self.device, new):
            res = self.tree.insert(pages, {Kind.FULL: self.device.alloc(new)})
            self._apply(res.actions)
        self.tree.unlock(handle)
        if self.threshold is not None:
            self._write_through(pages)
        if req.session_id is not None:  # the finished request's path stays referenced
            self.tree.reference_session(req.session_id,
                                        self.tree.match(pages, touch=False).last_node)
            if req.close_session:
                self.tree.close_session(req.session_id)
        return ReplayRecord(req.rid, req.arrival, len(req.tokens), dev, host, l3)

    def _fetch_l3(self, pages: list, reused: int, hits: int, handle: object) -> int:
        """L3 -> L2 (host-only nodes) -> L1; returns tokens gained."""
        if not self._make_room(self.host, hits):
            hits = min(hits, self.host.free_pages)
        if hits <= 0:
            return 0
        res = self.tree.insert(pages[:reused + hits], {Kind.FULL: self.host.alloc(hits)},
                               tier=Tier.HOST)
        self._apply(res.actions)
        m = self.tree.match(pages[:reused + hits], touch=False)
        if m.total_tokens < (reused + hits) * self.cfg.page_size:
            return 0
        return hits * self.cfg.page_size if self._load(m.path[m.device_nodes:]) else 0

    def _write_through(self, pages: list) -> None:
        m = self.tree.match(pages, touch=False)
        for node in m.path:
            if (node.on_device and not node.on_host and not node.backing_up
                    and node.hit_count + 1 >= (self.threshold or 1)):
                self._backup(self.tree.residency.begin_backup(node))


def replay(requests: Iterable[Request], cache: ReplayCache) -> list[ReplayRecord]:
    return [cache.process(r) for r in requests]
