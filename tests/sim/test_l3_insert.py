"""L3Store.insert places a batch of keys as one key at a time would: the same keys on the
same nodes in the same order, the same evictions, bytes and next node (its batch path
skips the per-key loop only where no key's turn evicts)."""

from __future__ import annotations

from collections import OrderedDict

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.hardware.profile import MooncakeSpec
from sim.l3 import L3Store


class Reference:
    """The store's contents, placed and evicted key by key (its documented rules)."""

    def __init__(self, capacity: float, nodes: int) -> None:
        self.keys: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self.capacity, self.nodes = capacity, nodes
        self.used = self.evictions = self.next = self.written = 0

    def insert(self, keys: list[str], size: int, down: set[int]) -> int:
        new = [k for k in dict.fromkeys(keys) if k not in self.keys]
        capacity = self.capacity / self.nodes * (self.nodes - len(down))
        if size > self.capacity / self.nodes:
            return 0
        for key in new:
            while self.used > capacity - size and self.keys:
                _, (old, _) = self.keys.popitem(last=False)
                self.used -= old
                self.evictions += 1
            while self.next % self.nodes in down:
                self.next += 1
            self.keys[key] = (size, self.next % self.nodes)
            self.next += 1
            self.used += size
        self.written += len(new) * size
        return len(new)


calls = st.lists(st.tuples(st.lists(st.integers(0, 30), max_size=12),
                           st.sampled_from([1, 3, 10, 40])), max_size=25)


@settings(max_examples=200, deadline=None)
@given(calls=calls, nodes=st.integers(1, 4), capacity=st.integers(1, 300),
       down=st.booleans(), lost=st.booleans())
def test_batch_insert_equals_key_by_key(calls, nodes, capacity, down, lost):
    store = L3Store.mooncake(simpy.Environment(),
                             MooncakeSpec(1e-3, 0.0, float(capacity), 1e9, 1e9, nodes))
    ref = Reference(float(capacity), nodes)
    off = {0} if down and nodes > 1 else set()
    store.down_nodes |= off
    if lost:
        store.lost.update({f"k{i}": 0 for i in range(0, 30, 3)})
    for ids, size in calls:
        keys = [f"k{i}" for i in ids]
        assert store.insert(keys, size) == ref.insert(keys, size, off)
        assert list(store.keys.items()) == list(ref.keys.items())
        assert (store.used, store.evictions, store.bytes_written) == \
            (ref.used, ref.evictions, ref.written)
        assert store._next_node == ref.next
        assert not set(store.lost) & set(store.keys)  # a key written is no longer lost
