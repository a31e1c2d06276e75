"""L3Store's logged LRU (a plain dict and the moves logged until the first eviction, the
log applied less the runs a later run starts with) keeps the order, contents and
evictions an OrderedDict refreshed at once keeps (the store before the log: its contents
made an OrderedDict from the start)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.l3
from sim.hardware.profile import MooncakeSpec
from sim.l3 import L3Store, NoLiveNode

# chains of keys that share starts (as conversations' prefixes do, and branches of one):
# a run is a start of one of a few chains, or any keys
trunk = [f"k{i}" for i in range(12)]
chains = [trunk, trunk[:4] + [f"b{i}" for i in range(8)],
          trunk[:1] + [f"d{i}" for i in range(11)]]
run = st.one_of(
    st.tuples(st.integers(0, 2), st.integers(0, 12)).map(lambda t: chains[t[0]][:t[1]]),
    st.lists(st.sampled_from(sorted({k for c in chains for k in c})), max_size=8))
# (puts and gets the most; a node going down or coming back, rarely: after either, or
# the first eviction, the order is kept in an OrderedDict)
# (drop and down: the node is the run's length's parity)
ops = st.lists(st.tuples(
    st.sampled_from(["put"] * 6 + ["get"] * 8 + ["read"] * 2 + ["drop"] * 2 + ["down"]), run),
    max_size=50)


def store(capacity: int, eager: bool) -> L3Store:
    s = L3Store.mooncake(simpy.Environment(),
                         MooncakeSpec(1e-3, 0.0, float(capacity), 1e9, 1e9, 2))
    if eager:
        s._keys = OrderedDict()  # refreshed at once from the start
    return s


@settings(max_examples=400, deadline=None)
@given(ops=ops, capacity=st.one_of(st.integers(6, 60), st.integers(100, 400)),
       slack=st.integers(0, 12), size=st.sampled_from([1, 3]))
def test_logged_lru_equals_an_ordered_dict_refreshed_at_once(ops, capacity, slack, size):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim.l3, "LOG_SLACK", slack)  # small: the log is applied often
        mp.setattr(sim.l3, "LOG_FACTOR", 1)
        twins(ops, capacity, size)


def twins(ops: list, capacity: int, size: int) -> None:
    lazy, eager = store(capacity, False), store(capacity, True)
    down: set[int] = set()
    for op, arg in ops:
        for s in (lazy, eager):
            if op == "put":  # missing_marked, then insert (may evict)
                todo, mark = s.missing_marked(tuple(arg))
                try:
                    s.insert(todo, size, mark)
                except NoLiveNode:
                    assert not s.live_nodes
            elif op == "get":  # count_hits, then touch the hits
                s.touch(tuple(arg)[:s.count_hits(tuple(arg))])
            elif op == "drop":
                s.drop(0, len(arg) % 2)
            elif op == "down":
                s.node_down(len(arg) % 2, len(arg) % 2 not in down)
        if op == "down":
            down ^= {len(arg) % 2}
        if op == "read":  # (applies the log)
            assert list(lazy.keys.items()) == list(eager.keys.items())
        assert set(lazy._keys) == set(eager._keys)  # (the contents: no order read)
        assert (lazy.used, lazy.evictions, lazy.version, lazy.lost) == \
            (eager.used, eager.evictions, eager.version, eager.lost)
    assert list(lazy.keys.items()) == list(eager.keys.items())


def test_the_log_is_applied_less_runs_a_later_run_starts_with():
    s = store(100, False)
    s.insert(["a", "b", "c", "d"], 1)
    s.touch(("a", "b"))
    s.touch(("c",))
    s.touch(("a", "b", "c"))  # a and b move again, and c
    assert type(s._keys) is dict and len(s._log) == 3
    assert list(s.keys) == ["d", "a", "b", "c"]
    assert s._log == []


def test_a_later_run_from_the_same_key_on_another_branch_leaves_a_run_to_move():
    s = store(100, False)
    s.insert(["a", "b", "c", "d", "x"], 1)
    s.touch(("a", "b"))
    s.touch(("c",))
    s.touch(("a", "x"))  # the same first key, as long: b still moved by the first run
    assert list(s.keys) == ["d", "b", "c", "a", "x"]


def test_the_first_eviction_keeps_the_order_in_an_ordered_dict():
    s = store(4, False)
    s.insert(["a", "b", "c"], 1)
    s.touch(("a",))
    s.insert(["d"], 1)  # placed after a's move (logged too): b is the least recent
    assert type(s._keys) is dict and len(s._log) == 2
    s.insert(["e"], 1)  # evicts b
    assert type(s._keys) is OrderedDict and list(s.keys) == ["c", "a", "d", "e"]
    with pytest.raises(KeyError):
        s.touch(("b",))  # evicted: moved at once now, and absent
