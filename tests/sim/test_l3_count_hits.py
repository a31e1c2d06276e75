"""L3Store.count_hits answers what asking every key from the first would answer, though it
starts after a prefix an earlier tuple query found present (``_hits``) while none of it
left the store since (L3Store.held); likewise ``missing_marked`` (its all-absent
shortcut) and insert."""

from __future__ import annotations

from itertools import takewhile

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.l3
from sim.hardware.profile import MooncakeSpec
from sim.l3 import L3Store

# a store's life: queries (a tuple or a list of keys), inserts of missing keys (small
# capacity: some evict), LRU touches of a query's hits, a node's keys dropped (a fault)
keys = st.lists(st.integers(0, 24), max_size=10)
ops = st.lists(st.one_of(
    st.tuples(st.just("ask"), keys, st.booleans()),
    st.tuples(st.just("put"), keys, st.booleans()),
    st.tuples(st.just("touch"), keys, st.booleans()),
    st.tuples(st.just("drop"), st.integers(0, 1), st.booleans())), max_size=60)


def store(capacity: int) -> L3Store:
    return L3Store.mooncake(simpy.Environment(),
                            MooncakeSpec(1e-3, 0.0, float(capacity), 1e9, 1e9, 2))


def asked(st_: L3Store, ks: list[str]) -> int:
    """The plain answer: every key asked from the first."""
    return len(list(takewhile(st_.keys.__contains__, ks)))


@settings(max_examples=400, deadline=None)
@given(ops=ops, capacity=st.integers(1, 30), prefix=st.integers(0, 6),
       gone=st.sampled_from([0, 4, 1 << 16]))
def test_count_hits_equals_asking_every_key(ops, capacity, prefix, gone):
    """Queries share prefixes (the chains' starts), so the shortcut is taken often; its
    answers, and the store's contents and LRU order after each step, are the plain
    ones (a twin store that never remembers, whose count_hits asks every key)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim.l3, "GONE_MAX", gone)  # small: the evicted keys forgotten often
        twins(ops, capacity, prefix)


def twins(ops: list, capacity: int, prefix: int) -> None:
    fast, plain = store(capacity), store(capacity)
    for op, arg, as_tuple in ops:
        if op == "drop":
            assert fast.drop(0, arg) == plain.drop(0, arg)
            continue
        ks = [f"k{i}" for i in range(prefix)] + [f"k{i}" for i in arg]
        seq = tuple(ks) if as_tuple else ks
        if op == "ask":
            assert fast.count_hits(seq) == asked(plain, ks)
        elif op == "put":
            (todo, mark), (ptodo, pmark) = fast.missing_marked(seq), plain.missing_marked(ks)
            assert list(todo) == ptodo == [k for k in ks if k not in plain.keys]
            assert fast.insert(todo, 3, mark) == plain.insert(ptodo, 3, pmark)
        else:  # a get's touch of the hits it found
            hits = fast.count_hits(seq)
            assert hits == asked(plain, ks)
            fast.touch(seq[:hits])
            plain.touch(ks[:hits])
        assert list(fast.keys.items()) == list(plain.keys.items())
        assert (fast.version, fast.evictions) == (plain.version, plain.evictions)


def test_a_remembered_prefix_is_not_trusted_once_a_key_left():
    """A query's hits are remembered; after an eviction the same query asks again."""
    s = store(9)  # three keys of 3 bytes
    s.insert(["a", "b", "c"], 3)
    assert s.count_hits(("a", "b", "c")) == 3
    s.insert(["d"], 3)  # evicts a
    assert s.count_hits(("a", "b", "c")) == 0
    assert s.count_hits(("b", "c", "d")) == 3


def test_a_remembered_prefix_counts_only_equal_keys():
    """Another chain from the same first key starts after the equal keys only."""
    s = store(30)
    s.insert(["a", "b", "c"], 3)
    assert s.count_hits(("a", "b", "c")) == 3
    assert s.count_hits(("a", "x", "c")) == 1
    assert s.count_hits(("a", "b")) == 2
    assert s.count_hits(("a", "b", "c", "x")) == 3
