"""Per-component eviction: FULL evicts device leaves in strategy-key order; evicting a leaf
drops all its components; session-aware eviction orders by (has refs, refs, base key)."""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.runtime.handles import Tier
from hicache.tree.actions import Deleted, FreeDevice
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.eviction import STRATEGIES, strategy


def three_leaves(policy: str, **kw) -> tuple[Harness, dict]:  # noqa: ANN003
    """Leaves A, B, C (one page each, created in that order) with hits A=2, B=1, C=1
    (an insert counts one, a match none) and last access B < A < C; priorities A=2, B=3,
    C=1."""
    h = Harness(TreeSpec(page_size=4), eviction_policy=policy, **kw)
    leaves = {name: h.insert(h.pages([i])).node for i, name in enumerate("ABC", 1)}
    h.insert(h.pages([1]))  # A's second hit
    h.tree.match(h.pages([1]))
    h.tree.match(h.pages([3]))
    assert [leaves[n].hit_count for n in "ABC"] == [2, 1, 1]
    for name, prio in zip("ABC", (2, 3, 1), strict=True):
        leaves[name].priority = prio
        h.tree.residency.touched(leaves[name])  # its key changed: re-queue it
    return h, leaves


def eviction_order(h: Harness, leaves: dict) -> str:
    names = {n.id: k for k, n in leaves.items()}
    order = ""
    while h.tree.nodes:
        res = h.evict_device(1)
        order += "".join(names[a.node_id] for a in res.actions if isinstance(a, Deleted))
    return order


@pytest.mark.parametrize("policy, expected", [
    ("lru", "BAC"),       # least recently used first
    ("lfu", "BCA"),       # fewest hits first (ties by recency)
    ("fifo", "ABC"),      # oldest insert first
    ("mru", "CAB"),       # most recently used first
    ("filo", "CBA"),      # newest insert first
    ("priority", "CAB"),  # lowest priority first
    ("slru", "BCA"),      # probation (< 2 hits) by LRU, then the protected segment
])
def test_full_eviction_order_per_strategy(policy: str, expected: str) -> None:
    h, leaves = three_leaves(policy)
    assert eviction_order(h, leaves) == expected
    h.check_accounting()


def test_every_documented_strategy_is_covered_and_unknown_names_fail() -> None:
    assert set(STRATEGIES) == {"lru", "lfu", "fifo", "mru", "filo", "priority", "slru"}
    with pytest.raises(ValueError, match="unknown"):
        strategy("random")


def test_only_leaves_are_evicted_and_a_parent_follows_once_it_is_a_leaf() -> None:
    h = Harness(TreeSpec(page_size=4))
    p = h.pages([1, 2, 3])
    h.insert(p[:1])
    h.insert(p)
    h.tree.match(p[:1])  # the internal node is the most recently used: still a leaf first
    first = h.evict_device(1)
    assert [a.tokens for a in first.actions if isinstance(a, Deleted)] == [8]
    second = h.evict_device(1)
    assert [a.tokens for a in second.actions if isinstance(a, Deleted)] == [4]
    h.check_accounting()


def test_evicting_a_leaf_drops_all_its_components() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=8, mamba=True))
    leaf = h.insert(h.pages([1, 2])).node
    res = h.evict_device(1)
    frees = {a.kind: a.extent.num_pages for a in res.actions if isinstance(a, FreeDevice)}
    assert frees == {Kind.FULL: 2, Kind.SWA: 2, Kind.MAMBA: 1}
    assert leaf.id not in h.tree.nodes
    assert all(h.tree.held_pages(Tier.DEVICE, pool) == 0 for pool in Kind)
    h.check_accounting()


def test_session_aware_order_is_has_refs_then_refs_then_lru() -> None:
    h, leaves = three_leaves("lru", session_aware=True)  # plain LRU would say B, A, C
    h.tree.reference_session("s1", leaves["A"])
    h.tree.reference_session("s1", leaves["B"])
    h.tree.reference_session("s2", leaves["B"])
    assert leaves["B"].session_refs == 2
    assert eviction_order(h, leaves) == "CAB"


def test_close_session_drops_its_refs() -> None:
    h, leaves = three_leaves("lru", session_aware=True)
    h.tree.reference_session("s1", leaves["B"])
    h.tree.reference_session("s2", leaves["A"])
    assert h.tree.close_session("s1") == 1
    assert leaves["B"].session_refs == 0
    assert eviction_order(h, leaves) == "BCA"  # B back in LRU order; A still referenced


def test_session_reference_covers_the_whole_path() -> None:
    h = Harness(TreeSpec(page_size=4), session_aware=True)
    p = h.pages([1, 2])
    h.insert(p[:1])
    leaf = h.insert(p).node
    h.tree.reference_session("s", leaf)
    assert [n.sessions for n in h.tree.path_to_root(leaf)] == [{"s": 1}, {"s": 1}]
    assert h.tree.close_session("s") == 2
    assert all(not n.sessions for n in h.tree.nodes.values())


def test_swa_eviction_drains_unreferenced_nodes_first() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=4), session_aware=True)
    p = h.pages([1, 2, 3])
    for i in (1, 2, 3):
        h.insert(p[:i])
    first = h.tree.root.children[p[0]]
    second = first.children[p[1]]
    leaf = second.children[p[2]]
    h.tree.reference_session("s", second)  # refs ``first`` and ``second``
    h.tree.match(p)  # the leaf is the most recently used SWA holder
    res = h.evict_device(1, Kind.SWA)
    # the unreferenced leaf still goes first (a leaf is evicted whole)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [leaf.id]
    res = h.evict_device(1, Kind.SWA)  # then the LRU among referenced ones: a tombstone
    assert [(a.node_id, a.kind) for a in res.actions] == [(first.id, Kind.SWA)]
    h.check_accounting()


def test_a_leaf_eviction_skips_stays_reachable_by_the_evictor() -> None:
    """An L1-only leaf whose L2-only child is pinned (a load or store reads it) cannot be
    deleted now; it must stay in the eviction heap and go once the pin is released."""
    h = Harness(TreeSpec(page_size=4), host_enabled=True)
    p = h.pages([1, 2, 3])
    h.insert(p[:2])  # L1 only (its write-through backup found no L2 room)
    h.tree.insert(p, {Kind.FULL: h.take(Tier.HOST, Kind.FULL, 1)}, tier=Tier.HOST)
    child = h.tree.match(p, touch=False).last_node
    assert child is not None and child.on_host and not child.on_device
    pin = h.tree.locks.lock_host([child])
    assert not h.evict_device(2).actions  # the pinned child keeps its parent
    h.check_accounting()  # the parent is still reachable by the evictor
    h.tree.unlock(pin)
    res = h.evict_device(2)
    assert sum(a.extent.num_pages for a in res.actions if isinstance(a, FreeDevice)) == 2
    assert not h.tree.nodes
    h.check_accounting()
