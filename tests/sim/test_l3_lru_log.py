"""L3Store's LRU (a plain dict and the moves logged until the first eviction, keys placed
meanwhile logged as their count, the log applied less the touched runs a later run starts
with; then a deque of keys whose last entry is a key's place, each key once plus once per
touch, stale entries skipped by count; a put's evictions made for its last key first)
keeps the order, contents, evictions and lost keys of a reference store on an OrderedDict
refreshed at once, evicting key by key (the store before the log)."""

from __future__ import annotations

from collections import Counter, OrderedDict
from itertools import takewhile

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
    st.sampled_from(["put"] * 6 + ["get"] * 6 + ["uget"] * 2 + ["read"] * 2 + ["drop"] * 2
                    + ["down"]), run),
    max_size=50)


class Reference:
    """The store's documented rules on an OrderedDict whose order is refreshed at once:
    keys placed key by key on live nodes in turn (evicting least recently used keys
    first), a touch moves its keys to the end, a drop loses a node's keys in LRU order."""

    def __init__(self, capacity: int, nodes: int = 2) -> None:
        self.keys: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self.node_capacity, self.nodes = capacity / nodes, nodes
        self.down: set[int] = set()
        self.used = self.evictions = self.next = self.version = 0
        self.lost: dict[str, int] = {}

    def evict(self, limit: float) -> bool:
        """Evict least recently used keys until ``used <= limit``; whether any went."""
        evicted = self.used > limit and bool(self.keys)
        while self.used > limit and self.keys:
            _, (old, _) = self.keys.popitem(last=False)
            self.used -= old
            self.evictions += 1
        return evicted

    def put(self, keys: tuple[str, ...], size: int) -> None:
        new = [k for k in dict.fromkeys(keys) if k not in self.keys]
        if new and len(self.down) == self.nodes:
            raise NoLiveNode("all down")
        if size > self.node_capacity:
            return
        limit = self.node_capacity * (self.nodes - len(self.down)) - size
        evicted = False  # (a put's evictions: one change of the contents)
        for key in new:
            evicted |= self.evict(limit)
            while self.next % self.nodes in self.down:
                self.next += 1
            self.keys[key] = (size, self.next % self.nodes)
            self.next += 1
            self.used += size
            self.lost.pop(key, None)
        self.version += evicted
        self.version += bool(new)

    def get(self, keys: tuple[str, ...]) -> None:
        for key in takewhile(self.keys.__contains__, keys):
            self.keys.move_to_end(key)

    def drop(self, fault: int, node: int) -> None:
        gone = [k for k, (_, n) in self.keys.items() if n == node]
        self.version += bool(gone)
        for key in gone:
            self.used -= self.keys.pop(key)[0]
            self.lost[key] = fault

    def node_down(self, node: int, on: bool) -> None:
        if on:
            self.down.add(node)
            self.version += self.evict(self.node_capacity * (self.nodes - len(self.down)))
        else:
            self.down.discard(node)


def store(capacity: int) -> L3Store:
    return L3Store.mooncake(simpy.Environment(),
                            MooncakeSpec(1e-3, 0.0, float(capacity), 1e9, 1e9, 2))


@settings(max_examples=400, deadline=None)
@given(ops=ops, capacity=st.one_of(st.integers(6, 60), st.integers(100, 400)),
       slack=st.integers(0, 12), size=st.sampled_from([1, 3]),
       gone=st.sampled_from([0, 3, 1 << 16]))
def test_logged_lru_equals_an_ordered_dict_refreshed_at_once(ops, capacity, slack, size, gone):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim.l3, "LOG_SLACK", slack)  # small: the log is applied often
        mp.setattr(sim.l3, "LOG_FACTOR", 1)
        mp.setattr(sim.l3, "GONE_MAX", gone)  # small: the evicted keys are forgotten often
        twins(ops, capacity, size)


def twins(ops: list, capacity: int, size: int) -> None:
    lazy, ref = store(capacity), Reference(capacity)
    found: list[tuple[tuple[str, ...], int]] = []  # hits found, and the version then
    for op, arg in ops:
        node = len(arg) % 2
        if op == "put":  # missing_marked, then insert (may evict)
            todo, mark = lazy.missing_marked(tuple(arg))
            try:
                lazy.insert(todo, size, mark)
            except NoLiveNode:
                assert not lazy.live_nodes
                with pytest.raises(NoLiveNode):
                    ref.put(tuple(arg), size)
            else:
                ref.put(tuple(arg), size)
        elif op in ("get", "uget"):  # count_hits, then touch the hits (proved present,
            # as L3Client._got touches them, or asked again)
            hits = tuple(arg)[:lazy.count_hits(tuple(arg))]
            found.append((hits, lazy.version))
            lazy.touch(hits, checked=op == "get")
            ref.get(tuple(arg))
        elif op == "drop":
            lazy.drop(0, node)
            ref.drop(0, node)
        elif op == "down":
            lazy.node_down(node, node not in ref.down)
            ref.node_down(node, node not in ref.down)
        elif op == "read":  # (applies the log, or keeps last entries only)
            assert list(lazy.keys.items()) == list(ref.keys.items())
        assert lazy._keys == ref.keys  # (the contents: no order read)
        assert (lazy.used, lazy.evictions, lazy.version, lazy.lost) == \
            (ref.used, ref.evictions, ref.version, ref.lost)
        for hits, mark in found:  # held: all present still (a get trusts it, not asking)
            assert not lazy.held(hits, mark) or all(k in ref.keys for k in hits)
        if lazy._order is not None:  # every key's entries counted, the last one its place
            assert Counter(lazy._order) == {k: 1 + lazy._extra.get(k, 0) for k in ref.keys}
            assert 0 not in lazy._extra.values()
    assert list(lazy.keys.items()) == list(ref.keys.items())


def test_the_log_is_applied_less_runs_a_later_run_starts_with():
    s = store(100)
    s.insert(["a", "b", "c", "d"], 1)
    s.touch(("a", "b"))
    s.touch(("c",))
    s.touch(("a", "b", "c"))  # a and b move again, and c
    assert type(s._keys) is dict and len(s._log) == 3
    assert list(s.keys) == ["d", "a", "b", "c"]
    assert s._log == []


def test_a_later_run_from_the_same_key_on_another_branch_leaves_a_run_to_move():
    s = store(100)
    s.insert(["a", "b", "c", "d", "x"], 1)
    s.touch(("a", "b"))
    s.touch(("c",))
    s.touch(("a", "x"))  # the same first key, as long: b still moved by the first run
    assert list(s.keys) == ["d", "b", "c", "a", "x"]


def test_the_first_eviction_keeps_the_order_in_a_deque_of_last_entries():
    s = store(4)
    s.insert(["a", "b", "c"], 1)
    s.touch(("a",))
    s.insert(["d"], 1)  # placed after a's move (logged too): b is the least recent
    assert s._order is None and s._log == [("a",), 1]  # (d: its count)
    s.insert(["e"], 1)  # evicts b
    # the keys present when the log began (a, b, c), then its runs: a's move, d placed
    # (once: not in the dict's order as well), and a's first entry popped stale
    assert list(s._order) == ["c", "a", "d", "e"] and not s._extra
    assert type(s._keys) is dict and list(s.keys) == ["c", "a", "d", "e"]
    with pytest.raises(KeyError):
        s.touch(("b",))  # evicted: absent, and nothing moved
    s.touch(("c", "a", "c"))  # stale entries: c's first two, a's first
    assert list(s._order) == ["c", "a", "d", "e", "c", "a", "c"]
    assert s._extra == {"c": 2, "a": 1}  # (entries beyond one)
    s.insert(["f"], 1)  # pops c and a (stale) and evicts d, at its only entry
    assert list(s._order) == ["e", "c", "a", "c", "f"] and s._extra == {"c": 1}
    assert list(s.keys) == ["e", "a", "c", "f"]  # (last entries only kept)
    assert list(s._order) == ["e", "a", "c", "f"] and not s._extra


def test_a_put_makes_room_for_all_its_keys_first_one_change():
    s = store(4)
    s.insert(["a", "b", "c", "d"], 1)
    s.touch(("a",))
    v = s.version
    todo, mark = s.missing_marked(("e", "f", "a"))
    assert s.insert(todo, 1, mark) == 2  # b and c evicted, as turn by turn, once
    assert list(s.keys) == ["d", "a", "e", "f"] and s.evictions == 2
    assert s.version == v + 2 and s._removed_at == v + 1  # evictions, then the keys placed
    assert not s.kept_since(mark) and s.kept_since(s.version)


def test_a_touch_not_proved_present_is_asked_a_proved_one_is_not():
    """Unproved touches of an absent key are KeyErrors, logged (when the first eviction
    orders the log) or not; a proved touch (``checked``: L3Client._got's) is not asked."""
    s = store(3)
    s.insert(["a", "b", "c"], 1)
    s.touch(("a", "x"))  # logged: asked when the order is kept from the first eviction
    with pytest.raises(KeyError):
        s.insert(["d"], 1)
    s = store(3)
    s.insert(["a", "b", "c"], 1)
    s.touch(("a",), checked=True)
    s.touch(("x",), checked=True)  # (a wrong claim: not asked, so nothing raises)
    s.insert(["d"], 1)  # evicts b; the logged touches were not asked
    assert s._order is not None and "b" not in s._keys
    s.touch(("a",))  # asked: present
    with pytest.raises(KeyError):
        s.touch(("b",))  # evicted: asked, absent, nothing moved
    s.touch(("b",), checked=True)  # (not asked)
    assert list(s._order)[-1] == "b"


def test_hits_are_held_across_an_eviction_of_other_keys_only():
    """A query's hits, and a get's, stay trusted through an eviction that took none of
    them (the evicted keys are remembered), not through one that took one, nor a drop."""
    s = store(4)
    s.insert(["a", "b", "c", "d"], 1)
    assert s.count_hits(("c", "d")) == 2
    mark = s.version
    s.insert(["e"], 1)  # evicts a
    assert not s.kept_since(mark) and s.held(("c", "d"), mark)
    assert not s.held(("a",), mark)
    del s._keys["c"]  # (behind the store's back: the remembered prefix is not asked)
    assert s.count_hits(("c", "d")) == 2 and s.count_hits(("c", "d", "e")) == 3
    s._keys["c"] = (1, 0)
    s.insert(["f"], 1)  # evicts b
    s.insert(["g"], 1)  # evicts c: the prefix is asked again
    assert not s.held(("c", "d"), mark) and s.count_hits(("c", "d")) == 0
    assert s.count_hits(("d", "e")) == 2
    mark = s.version
    assert s.drop(0, 1) and not s.held(("d", "e"), mark)  # (drops are not remembered)


def test_evicted_keys_are_forgotten_past_the_bound_and_hits_before_are_not_trusted():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim.l3, "GONE_MAX", 1)
        s = store(4)
        s.insert(["a", "b", "c", "d"], 1)
        mark = s.version
        s.insert(["e", "f"], 1)  # evicts a and b: two remembered
        assert s._gone == {"a", "b"} and s.held(("c", "d"), mark)
        s.insert(["g"], 1)  # more than GONE_MAX: forgotten before c is evicted
        assert s._gone == {"c"} and s._gone_from > mark
        assert not s.held(("d",), mark) and s.held(("d",), s._gone_from)
