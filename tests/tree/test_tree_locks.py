"""Lock scopes: FULL locks the whole path to the root, SWA one window back from the lock
point, MAMBA the node itself. Locked data is never evicted; unlock restores every count."""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.tree.actions import Deleted, FreeDevice
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.node import HOST

HYBRID = TreeSpec.hybrid(4, swa_window=8, mamba=True)


def chain(h: Harness, n: int) -> list:
    """A path of ``n`` one-page nodes, each with FULL, SWA and a MAMBA checkpoint."""
    p = h.pages(list(range(1, n + 1)))
    for i in range(1, n + 1):
        h.insert(p[:i])
    node, out = h.tree.root, []
    for key in p:
        node = node.children[key]
        out.append(node)
    return out


def test_lock_scopes_per_component() -> None:
    h = Harness(HYBRID)
    a, b, c, d = chain(h, 4)
    handle = h.tree.lock(d)
    assert [n.locks.get(Kind.FULL, 0) for n in (a, b, c, d)] == [1, 1, 1, 1]
    assert [n.locks.get(Kind.SWA, 0) for n in (a, b, c, d)] == [0, 0, 1, 1]  # 8 tokens
    assert [n.locks.get(Kind.MAMBA, 0) for n in (a, b, c, d)] == [0, 0, 0, 1]
    h.tree.unlock(handle)
    assert all(not n.locks for n in (a, b, c, d))
    with pytest.raises(ValueError, match="twice"):
        h.tree.unlock(handle)


def test_locked_data_is_never_evicted() -> None:
    h = Harness(HYBRID)
    a, b, c, d = chain(h, 4)
    handle = h.tree.lock(d)
    assert h.evict_device(100).actions == []  # the only leaf is FULL-locked
    swa = h.evict_device(100, Kind.SWA)  # outside the window; takes their checkpoints
    assert {(x.node_id, x.kind) for x in swa.actions} == {
        (n.id, k) for n in (a, b) for k in (Kind.SWA, Kind.MAMBA)}
    mamba = h.evict_device(100, Kind.MAMBA)
    assert {x.node_id for x in mamba.actions} == {c.id}
    assert Kind.MAMBA in d.device and Kind.SWA in c.device and Kind.SWA in d.device
    h.tree.unlock(handle)
    res = h.evict_device(100)
    assert {x.node_id for x in res.actions if isinstance(x, Deleted)} == {a.id, b.id, c.id, d.id}
    assert not h.tree.nodes
    h.check_accounting()


def test_lock_of_a_subset_of_components() -> None:
    h = Harness(HYBRID)
    a, b = chain(h, 2)
    handle = h.tree.lock(b, kinds=[Kind.MAMBA])
    assert b.locks == {Kind.MAMBA: 1} and not a.locks
    assert h.evict_device(100).actions == []  # any device lock pins the leaf whole
    h.tree.unlock(handle)


def test_a_split_of_a_locked_node_locks_the_new_head_and_unlock_returns_to_zero() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=16, mamba=True))  # a 4-page leaf: one window
    leaf = h.insert(h.pages([1, 2, 3, 4])).node
    handle = h.tree.lock(leaf)
    h.tree.match(h.pages([1, 2, 7]))  # split while locked
    head = leaf.parent
    assert head.locks.get(Kind.FULL) == 1 and head.locks.get(Kind.SWA) == 1
    assert Kind.MAMBA not in head.locks  # the checkpoint stayed on the tail
    assert h.evict_device(100).actions == [] and h.evict_device(100, Kind.SWA).actions == []
    h.tree.unlock(handle)
    assert not head.locks and not leaf.locks


def test_host_lock_blocks_host_eviction_only_for_its_nodes() -> None:
    h = Harness(TreeSpec(page_size=4), host_enabled=True)
    leaf = h.insert(h.pages([1, 2])).node
    h.complete_backup(h.begin_backup(leaf))
    h.evict_device(100)  # demoted to host-only
    handle = h.tree.locks.lock_host([leaf])
    assert leaf.locks == {HOST: 1}
    assert h.evict_host(100).actions == []
    h.tree.unlock(handle)
    res = h.evict_host(100)
    assert [type(x).__name__ for x in res.actions] == ["FreeHost", "Deleted"]
    assert not h.tree.nodes
    h.check_accounting()


def test_eviction_never_frees_a_locked_component() -> None:
    h = Harness(HYBRID)
    nodes = chain(h, 6)
    handles = [h.tree.lock(nodes[2]), h.tree.lock(nodes[5], kinds=[Kind.FULL])]
    locked = {(n.id, k) for n in nodes for k, v in n.locks.items() if v}
    for kind in (Kind.SWA, Kind.MAMBA, Kind.FULL):
        for a in h.evict_device(100, kind).actions:
            if isinstance(a, FreeDevice):
                assert (a.node_id, a.kind) not in locked
    for handle in handles:
        h.tree.unlock(handle)
    assert all(not n.locks for n in nodes)
    h.check_accounting()


def _full_chain(h: Harness, n: int, *, fork: int | None = None) -> list:
    """A FULL-only path of ``n`` one-page nodes (and, with ``fork``, a sibling branch
    from node ``fork`` on): its nodes, then the fork's leaf."""
    out = chain(h, n)
    if fork is not None:
        h.insert(h.pages(list(range(1, fork + 1)) + [99]))
        out.append(out[fork - 1].children[h.pages([99])[0]])
    return out


@pytest.mark.parametrize("target", ["below", "same", "elsewhere"])
def test_move_holds_what_lock_then_unlock_would(target: str) -> None:
    def run(move: bool) -> tuple[list, list, object]:
        h = Harness(TreeSpec(4))
        *path, side = _full_chain(h, 4, fork=2)
        old = h.tree.lock(path[2])  # side forks off above it, from path[1]
        node = {"below": path[3], "same": path[2], "elsewhere": side}[target]
        if move:
            new = h.tree.locks.move(old, node)
        else:
            new = h.tree.lock(node)
            h.tree.unlock(old)
        counts = [n.locks.get(Kind.FULL, 0) for n in (*path, side)]
        return counts, [(n.id, k) for n, k in new.entries], (new is old, old.released)

    counts, entries, _ = run(False)
    moved_counts, moved_entries, (same_handle, released) = run(True)
    assert moved_counts == counts and moved_entries == entries
    assert same_handle == (target != "elsewhere") and released == (target == "elsewhere")


def test_move_with_hybrid_components_locks_anew() -> None:
    h = Harness(HYBRID)
    a, b, c, d = chain(h, 4)
    old = h.tree.lock(b)
    new = h.tree.locks.move(old, d)
    assert new is not old and old.released
    assert [n.locks.get(Kind.SWA, 0) for n in (a, b, c, d)] == [0, 0, 1, 1]
    h.tree.unlock(new)
    assert all(not n.locks for n in (a, b, c, d))
