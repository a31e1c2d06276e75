"""Two requests load the same L2 node back (both admitted before either load lands).

The seed study's stall (DeepSeek-V4-Pro, batch 256, session-aware eviction): the second
load replaced the node's L1 copy, so the first copy's pages were never freed and the
tree's page count (``residency.held``, which the L1 budget reads) kept them forever;
L1 looked full with nothing left to evict and 119 requests waited for good. The second
copy must stay the request's own and be freed when it finishes.
"""

from __future__ import annotations

from hicache.config import CacheConfig
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.plans import PlanBuilder
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, Tier
from hicache.runtime.interface import RuntimeInfo
from hicache.tree.invariants import check_tree
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

PAGE = 4
SHARED = 4  # pages of the shared prefix, on L2 only


def extent(tier: Tier, first: int, count: int) -> CacheExtentRef:
    return CacheExtentRef("r", 0, tier, (PageRun(first, count),))


def manager() -> KVCacheManager:
    cache = CacheConfig(page_size=PAGE, device_tokens=64 * PAGE,
                        enable_hierarchical_cache=True, hicache_ratio=2,
                        load_back_threshold=0)
    info = RuntimeInfo("r", 0, PAGE, {Kind.FULL: 64}, {Kind.FULL: 128})
    kv = KVCacheManager(cache, info, PlanBuilder())
    prefix = list(range(SHARED * PAGE))
    kv.tree.insert(page_keys(prefix, PAGE), {Kind.FULL: extent(Tier.HOST, 0, SHARED)},
                   tier=Tier.HOST)
    return kv


def request(kv: KVCacheManager, rid: int) -> RequestState:
    tokens = list(range(SHARED * PAGE)) + [1000 * rid + i for i in range(2 * PAGE)]
    req = Request(rid, 0.0, tokens, 1)
    return RequestState(req, page_keys(tokens, PAGE))


def test_a_node_loaded_twice_keeps_one_copy_and_frees_the_other_at_finish() -> None:
    kv = manager()
    a, b = request(kv, 1), request(kv, 2)
    assert kv.admit(a) and kv.admit(b)
    (node,) = a.load_nodes
    assert b.load_nodes == [node] and kv.budget.loads_pending == 2 * SHARED
    kv.loaded(a, [extent(Tier.DEVICE, 0, SHARED)])
    kv.loaded(b, [extent(Tier.DEVICE, 10, SHARED)])
    check_tree(kv.tree)  # held counts each page the nodes hold once
    assert node.device[Kind.FULL].page_runs == (PageRun(0, SHARED),)
    assert kv.tree.held_pages(Tier.DEVICE) == SHARED and kv.budget.loads_pending == 0
    for st in (a, b):
        kv.loads_read(st)
        kv.finish(st)
    assert kv.sink._frees == [extent(Tier.DEVICE, 10, SHARED)]  # b's copy, once
    assert kv.budget.own == 0
    assert kv.budget.device_free() == 64 - SHARED  # only the tree's copy is held
    assert kv.tree.evict_device(SHARED).freed == {Kind.FULL: SHARED}
    check_tree(kv.tree)


def test_a_load_landing_on_a_node_a_request_computed_meanwhile_is_freed() -> None:
    """The other path: b computed the shared pages and inserted them before a's load."""
    kv = manager()
    a = request(kv, 1)
    assert kv.admit(a)
    (node,) = a.load_nodes
    kv.tree.residency.put_value(node, Tier.DEVICE, Kind.FULL, extent(Tier.DEVICE, 20, SHARED))
    kv.loaded(a, [extent(Tier.DEVICE, 0, SHARED)])
    check_tree(kv.tree)
    assert kv.tree.held_pages(Tier.DEVICE) == SHARED
    kv.loads_read(a)
    kv.finish(a)
    assert kv.sink._frees == [extent(Tier.DEVICE, 0, SHARED)] and kv.budget.own == 0
