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


# a writer's operations: ask which keys are missing (kept, with the store's mark), write
# what an earlier answer said was missing, or a node's keys lost (a fault)
ops = st.lists(st.one_of(
    st.tuples(st.just("ask"), st.lists(st.integers(0, 20), max_size=8)),
    st.tuples(st.just("write"), st.integers(0, 40)),
    st.tuples(st.just("drop"), st.integers(0, 1))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=ops, capacity=st.integers(1, 40))
def test_inserts_of_marked_answers_equal_unmarked_ones(ops, capacity):
    """``insert(todo, size, absent_at)`` of a ``missing_marked`` answer checks ``todo``
    only when the store changed since the mark, or not at all when the write fits whole:
    the same contents, evictions, bytes and next node as checking the whole store,
    however other writes, evictions (a small capacity) and lost nodes interleave."""
    marked, plain = (L3Store.mooncake(simpy.Environment(),
                                      MooncakeSpec(1e-3, 0.0, float(capacity), 1e9, 1e9, 2))
                     for _ in range(2))
    answers: list[tuple[list[str], int]] = []
    for op, arg in ops:
        if op == "ask":
            todo, mark = marked.missing_marked([f"k{i}" for i in arg])
            assert todo == plain.missing([f"k{i}" for i in arg])
            answers.append((todo, mark))
        elif op == "write" and answers:
            todo, mark = answers[arg % len(answers)]
            assert marked.insert(todo, 1, mark) == plain.insert(todo, 1)
        elif op == "drop":
            assert marked.drop(0, arg) == plain.drop(0, arg)
        assert list(marked.keys.items()) == list(plain.keys.items())
        assert (marked.used, marked.evictions, marked.bytes_written, marked._next_node) == \
            (plain.used, plain.evictions, plain.bytes_written, plain._next_node)


def _pair(capacity: float = 100.0) -> tuple[L3Store, L3Store]:
    marked, plain = (L3Store.mooncake(simpy.Environment(),
                                      MooncakeSpec(1e-3, 0.0, capacity, 1e9, 1e9, 2))
                     for _ in range(2))
    return marked, plain


def _both(stores: tuple[L3Store, L3Store], todo: list[str], mark: int | None) -> None:
    marked, plain = stores
    assert marked.insert(todo, 1, mark) == plain.insert(todo, 1)
    assert list(marked.keys.items()) == list(plain.keys.items())
    assert marked.bytes_written == plain.bytes_written


def test_a_key_placed_since_the_mark_and_lost_again_is_written() -> None:
    """Placed by another writer after the answer, then lost with its node: absent again,
    so the answer's write places it (in one go, or key by key: a store that evicts)."""
    for capacity in (100.0, 4.0):
        stores = _pair(capacity)
        marked, plain = stores
        _both(stores, ["a", "b"], None)
        todo, mark = marked.missing_marked(["x", "y"])
        _both(stores, ["x"], marked.version)  # another writer places x (on node 0)
        assert marked.drop(0, 0) == plain.drop(0, 0)  # node 0's keys lost: x among them
        _both(stores, todo, mark)
        assert "x" in marked.keys


def test_a_key_placed_since_the_mark_is_not_written_again() -> None:
    """Batches placed since the answer: a key one of them placed is present and not
    written again (in one go, or key by key: a store that evicts)."""
    for capacity in (100.0, 4.0):
        stores = _pair(capacity)
        marked, _ = stores
        todo, mark = marked.missing_marked(["x", "y"])
        _both(stores, ["x"], marked.version)
        _both(stores, ["p"], marked.version)
        _both(stores, todo, mark)
        assert marked.bytes_written == 3  # x once, p, y
        assert marked.version == mark + 3


def test_an_answer_nothing_changed_since_places_a_repeated_key_once() -> None:
    """Nothing placed or removed since the answer: its keys are all absent and placed
    without checking them, a repeated key still once, in one go or key by key (a store
    that must evict for them); the batch counts one change of the contents."""
    for capacity in (100.0, 2.0):
        stores = _pair(capacity)
        marked, _ = stores
        _both(stores, ["a"], None)
        todo, mark = marked.missing_marked(["x", "y", "x", "a"])
        assert todo == ["x", "y", "x"] and mark == marked.version
        _both(stores, todo, mark)
        assert list(marked.keys) == (["a", "x", "y"] if capacity > 2 else ["x", "y"])
        assert marked.bytes_written == 3
        assert marked.version == mark + (1 if capacity > 2 else 2)  # (2: an eviction)


def test_a_one_go_write_skips_present_and_repeated_keys() -> None:
    """A write that fits whole (L3Store._place_all) places each key unless present, with
    no check first: a present key keeps its value and place even when it equals the
    value this write would give it (one node, one size: the keys placed are told by the
    identity of the write's own values), a repeated key is placed once, and the keys
    placed take the nodes in turn as key after key would; a batch that places none
    changes nothing."""
    for nodes in (1, 3):
        store = L3Store.mooncake(simpy.Environment(),
                                 MooncakeSpec(1e-3, 0.0, 100.0, 1e9, 1e9, nodes))
        ref = Reference(100.0, nodes)
        versions = []
        for keys in (["a", "q"], ["b", "a", "b", "c", "q"], ["a", "q"], ["d", "d"]):
            assert store._fits(len(keys), 1)
            assert store.insert(keys, 1) == ref.insert(keys, 1, set())
            assert list(store.keys.items()) == list(ref.keys.items())
            assert (store.used, store.bytes_written, store._next_node) == \
                (ref.used, ref.written, ref.next)
            versions.append(store.version)
        assert list(store.keys) == ["a", "q", "b", "c", "d"]
        assert versions == [1, 2, 2, 3]
