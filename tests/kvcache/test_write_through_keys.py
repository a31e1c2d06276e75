"""Write-through backs up each node of a cached prompt's L1 path with the L3 keys of its
own pages (KVCacheManager.write_through counts the pages before a node along the path
from the root): a prefix node gets the first keys, the node the prompt added the next."""

from __future__ import annotations

from hicache.config import CacheConfig
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.plans import PlanBuilder
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, Tier
from hicache.runtime.interface import RuntimeInfo
from hicache.tiers.hashing import page_hashes
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

PAGE = 4


def _extent(first: int, count: int) -> CacheExtentRef:
    return CacheExtentRef("r", 0, Tier.DEVICE, (PageRun(first, count),))


def test_each_backup_carries_its_own_pages_keys() -> None:
    cache = CacheConfig(page_size=PAGE, device_tokens=64 * PAGE,
                        enable_hierarchical_cache=True, hicache_ratio=2,
                        hicache_write_policy="write_through")
    kv = KVCacheManager(cache, RuntimeInfo("r", 0, PAGE, {Kind.FULL: 64}, {Kind.FULL: 128}),
                        PlanBuilder(), l3=True)
    prefix = list(range(3 * PAGE))
    kv.tree.insert(page_keys(prefix, PAGE), {Kind.FULL: _extent(0, 3)})  # nobody's yet
    tokens = prefix + [100 + i for i in range(4 * PAGE)] + [7]  # 7 full pages and a token
    st = RequestState(Request(1, 0.0, tokens, 2), page_keys(tokens, PAGE))
    st.hashes = page_hashes(tokens, PAGE)
    assert kv.admit(st) and st.prefix_tokens == 3 * PAGE
    st.kv = _extent(10, 8)  # its row: the 3 attached pages' slots, then its own
    kv.cache_prompt(st)
    spans = sorted((kv.tree.page_span(kv.tree.nodes[b.node_id]), b.keys)
                   for b in kv._backups.values())
    assert spans == [((0, 3), tuple(st.hashes[0:3])), ((3, 4), tuple(st.hashes[3:7]))]
