"""LazyHeap enters the LRU key ``(last_access,)`` as its bare int (one tuple fewer per
push, flat comparisons per sift step): twin heaps, one flat (``key is lru``) and one
with the same key through a wrapper (so keyed as tuples), fed the same pushes, re-stamps
and pops, yield the same nodes in the same order and hold the same entries in the same
heap layout (ties of last access included: the push sequence decides, as before)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.tree.eviction import LazyHeap, lru


class _Node:
    def __init__(self, nid: int) -> None:
        self.id, self.last_access, self.stamp = nid, 0, 0


ops = st.lists(st.tuples(st.sampled_from(["push", "touch", "pop"]), st.integers(0, 11),
                         st.integers(0, 6)), max_size=120)


@settings(max_examples=200)
@given(ops)
def test_flat_lru_entries_pop_as_tuple_keys_do(script: list) -> None:
    heaps = [LazyHeap(lru), LazyHeap(lambda n: lru(n))]
    assert heaps[0]._flat and not heaps[1]._flat
    nodes = [[_Node(i) for i in range(12)] for _ in heaps]
    popped: list[list[int]] = [[], []]
    for op, i, n in script:
        for heap, ns, out in zip(heaps, nodes, popped, strict=True):
            node = ns[i]
            if op == "touch":  # a new stamp (older entries stale); few values: ties
                node.stamp += 1
                node.last_access = n
                heap.push(node)
            elif op == "push":
                heap.push(node)
            else:  # pop up to n live nodes whose id is even (live odd ones are dropped)
                for m in heap.pop_valid(lambda x: x.id % 2 == 0):
                    out.append(m.id)
                    if len(out) % (n + 1) == 0:
                        break
        assert popped[0] == popped[1]
        layout = [[(e[1], e[2], e[3], e[4].id) for e in h._heap] for h in heaps]
        assert layout[0] == layout[1]
        assert [e[0] for e in heaps[0]._heap] == [e[0][0] for e in heaps[1]._heap]
