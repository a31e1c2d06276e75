"""Replay's page names (``PageIds(order="fresh")``): one run per allocation, ids never
reused, capacity counted, double frees refused; and replay's results do not depend on
which ids its allocator hands out."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache.config import CacheConfig
from hicache.replay.engine import L3Set, ReplayCache, replay
from hicache.runtime.handles import PageRun
from hicache.runtime.page_ids import PageIds
from hicache.tree.allocator import OutOfPages, PageAllocator
from hicache.workload.request import Request


def test_fresh_ids_are_one_run_each_and_never_reused() -> None:
    a = PageAllocator(6, order="fresh")
    x, y, z = a.alloc(2), a.alloc(2), a.alloc(2)
    for e in (x, z, y):  # out of order: a reusing allocator would hand out 3 runs
        a.free(e)
    assert a.free_pages == 6 and a.used_pages == 0
    e = a.alloc(6)
    assert e.page_runs == (PageRun(6, 6),)  # new names past capacity, one run
    with pytest.raises(OutOfPages):
        a.alloc(1)
    with pytest.raises(ValueError, match="page 0 of L1/full freed twice"):
        a.free(x)  # retired ids stay freed
    a.free(e.slice(2, 4))
    assert a.free_pages == 2
    a._ids.check()


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), max_size=60))
def test_fresh_counts_free_pages_as_any_order_does(ops: list[tuple[bool, int]]) -> None:
    fresh, fifo = PageIds(12, "fresh"), PageIds(12, "fifo")
    held: list[tuple[list, list]] = []
    for take, n in ops:
        if take and n <= fresh.free:
            held.append((fresh.take_runs(n), fifo.take_runs(n)))
        elif not take and held:
            a, b = held.pop(n % len(held))
            fresh.give_runs(a)
            fifo.give_runs(b)
        assert fresh.free == fifo.free
        fresh.check()
    assert all(len(a) == 1 for a, _ in held)


def _requests(seed: int) -> list[Request]:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(50) for _ in range(rng.randrange(8, 40))] for _ in range(4)]
    out = []
    for rid in range(120):
        tokens = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(1, 30))]
        out.append(Request(rid=rid, arrival=float(rid), tokens=tokens, output_len=3))
    return out


@pytest.mark.parametrize("l2", [False, True])
def test_replay_results_do_not_depend_on_the_page_names(monkeypatch, l2: bool) -> None:
    cfg = CacheConfig(page_size=4, device_tokens=96, enable_hierarchical_cache=l2,
                      hicache_write_policy="write_back" if l2 else "write_through")
    reqs = _requests(7)

    def run() -> list:
        cache = ReplayCache(cfg, host_tokens=160 if l2 else None,
                            l3=L3Set(64) if l2 else None)
        return replay(reqs, cache)

    fresh = run()
    original = PageAllocator.__init__

    def reusing(self, *args, **kwargs) -> None:  # noqa: ANN001
        kwargs["order"] = "fifo"
        original(self, *args, **kwargs)

    monkeypatch.setattr(PageAllocator, "__init__", reusing)
    assert run() == fresh
    assert sum(r.cached_tokens for r in fresh) > 0
