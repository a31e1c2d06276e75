"""L2 <-> L3 through the runtime: stores skip present keys, prefetch stops at a miss."""

from __future__ import annotations

from gpu_backend.l3.checksum import unseal
from gpu_backend.l3_protocol import L3Store, MemoryL3
from hicache.runtime.interface import (
    BatchPlan,
    PrefetchIntent,
    StoreIntent,
    TransferCompletion,
    TransferKind,
)
from tests.gpu_backend.builders import cached_prefix, collect, jobs_done, make_runtime, run


def transfers(got):
    return {c.job_id: c for c in got if isinstance(c, TransferCompletion)}


def test_memory_l3_implements_the_protocol():
    assert isinstance(MemoryL3(), L3Store)


def test_store_then_prefetch_returns_the_same_page_bytes():
    l3 = MemoryL3()
    with make_runtime(l3=l3) as rt:
        _, host = cached_prefix(rt)  # 4 pages in L2
        keys = tuple(f"h{i}" for i in range(4))
        original = [rt.host.page_bytes(p) for p in host.pages()]
        run(rt, BatchPlan(60, stores=(StoreIntent(host, keys, job_id=1),)))
        store = transfers(collect(rt, jobs_done(1)))[1]
        assert store.kind is TransferKind.STORE and store.pages == 4
        assert [bytes(unseal(k, l3.data[k])) for k in keys] == original  # stored checksummed
        run(rt, BatchPlan(61, stores=(StoreIntent(host, keys, job_id=2),), frees=()))
        assert transfers(collect(rt, jobs_done(2)))[2].pages == 0  # already in L3
        run(rt, BatchPlan(62, frees=(host,)))
        chain = (*keys[:3], "missing", keys[3])
        run(rt, BatchPlan(63, prefetches=(PrefetchIntent(chain, 8, 1, job_id=3, batch_pages=2),)))
        pf = transfers(collect(rt, jobs_done(3)))[3]
        assert pf.kind is TransferKind.PREFETCH and pf.hit_pages == 3 and pf.pages == 3
        assert [rt.host.page_bytes(p) for p in pf.extent.pages()] == original[:3]
        assert rt.host_alloc.num_allocated == 3  # the 5 unused reserved pages came back
        ops = [(r.lane, r.op) for r in rt.timeline.rows if r.lane == "l3"]
        assert ops == [("l3", "store"), ("l3", "store"), ("l3", "prefetch")]


def test_prefetch_below_min_hits_is_revoked_and_frees_its_reservation():
    l3 = MemoryL3()
    l3.batch_set(["a", "b"], [b"x", b"y"])
    with make_runtime(l3=l3) as rt:
        run(rt, BatchPlan(1, prefetches=(PrefetchIntent(("a", "b", "c"), 4, 3, job_id=9),)))
        pf = transfers(collect(rt, jobs_done(9)))[9]
        assert (pf.hit_pages, pf.pages, pf.extent) == (2, 0, None)
        rt.drain()
        assert rt.host_alloc.num_allocated == 0


def test_prefetch_fetches_at_most_max_pages_of_the_hit_prefix():
    l3 = MemoryL3()
    with make_runtime(l3=l3) as rt:
        _, host = cached_prefix(rt)
        keys = ("k0", "k1", "k2", "k3")
        run(rt, BatchPlan(2, stores=(StoreIntent(host, keys, job_id=1),)))
        collect(rt, jobs_done(1))
        run(rt, BatchPlan(3, prefetches=(PrefetchIntent(keys, 2, 1, job_id=2),)))
        pf = transfers(collect(rt, jobs_done(2)))[2]
        assert (pf.hit_pages, pf.pages, pf.extent.num_pages) == (4, 2, 2)
