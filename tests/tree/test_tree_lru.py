"""The SWA/MAMBA recency list: MRU pushes, placement just behind a node, removal."""

from __future__ import annotations

from hicache.tree.lru import LruList
from hicache.tree.node import Node


def nodes(n: int) -> list[Node]:
    return [Node(i, None, [(i,)], 0) for i in range(n)]


def test_order_runs_from_least_to_most_recent() -> None:
    a, b, c, d = nodes(4)
    lru = LruList()
    for n in (a, b, c):
        lru.push_mru(n)
    lru.push_mru(a)  # moves to the MRU end
    assert list(lru) == [b, c, a] and lru.lru() is b and lru.newer(c) is a
    lru.insert_after(c, d)  # just behind c: between b and c
    assert list(lru) == [b, d, c, a] and len(lru) == 4
    lru.remove(c)
    lru.discard(c)  # absent: nothing to do
    assert list(lru) == [b, d, a] and c not in lru and d in lru
    assert lru.newer(a) is None
    for n in (b, d, a):
        lru.remove(n)
    assert lru.lru() is None and list(lru) == [] and len(lru) == 0
