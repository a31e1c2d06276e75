"""buffer_only: host memory only stages GPU <-> L3 transfers; it is no cache tier."""

from __future__ import annotations

from scheduler_scenarios import decisions, page_balance, scenario

from sim.driver import simulate

BUFFER_ONLY = {"hicache_storage_backend": "mooncake", "hicache_buffer_only": True,
               "hicache_storage_prefetch_policy": "wait_complete"}


def test_buffer_only_serves_reuse_from_l3_never_from_a_resident_l2() -> None:
    res = simulate(scenario(cache=BUFFER_ONLY))
    recs = res.records
    assert all(r["finish"] is not None for r in recs)
    assert sum(r["l3_hit"] for r in recs) > 0
    assert sum(r["host_hit"] for r in recs) == 0  # L2 holds nothing between requests
    # L1 evictions delete (the KV is in L3), they never demote to L2
    assert {d[3] for d in decisions(res, "evict")} == {"delete"}


def test_buffer_only_leaks_no_page_and_ends_with_staging_drained() -> None:
    res = simulate(scenario(cache=BUFFER_ONLY))
    for bal in page_balance(res):
        for tier, (free, held, capacity) in bal.items():
            assert free + held == capacity, tier
    rep = res.replicas[0]
    assert rep.runtime.open_requests() == 0
    # what is left on L2 is only host copies of L3 prefetches nobody loaded; with every
    # request admitted after its prefetch, none of them stay on a node that is on L1
    tree = rep.scheduler.tree
    assert not [n for n in tree.nodes.values() if n.on_device and n.on_host]
