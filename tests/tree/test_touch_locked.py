"""``Residency.touched`` pushes no heap entry for a leaf its evictor refuses by a lock.

Such an entry could never be yielded (the unlock touches the node again first), so the
heaps answer every eviction as they did when every touch pushed (the twin runs are in
tests/scheduler/test_touch_twin.py). The host lock does not protect L1 data, so an L1
leaf that holds only it is still pushed (a shortcut that skipped it would leave the leaf
unevictable).
"""

from __future__ import annotations

from collections.abc import Callable

from tree_harness import Harness

from hicache.tree.actions import Deleted, Demoted
from hicache.tree.components import TreeSpec
from hicache.tree.eviction import LazyHeap
from hicache.tree.node import Node
from hicache.tree.residency import EvictResult


def _leaf(h: Harness, pages: list) -> Node:
    node = h.tree.match(pages, touch=False).last_node
    assert node is not None
    return node


def _back_at_unlock(h: Harness, leaf: Node, heap: LazyHeap, lock: object,
                    evict: Callable[[int], EvictResult]) -> None:
    """``leaf``, held by ``lock`` against ``heap``'s evictor (``evict``), is touched and
    gets no entry; the unlock pushes it again, and the next eviction deletes it."""
    h.tree.residency.touched(leaf)
    assert leaf.id not in heap.live()  # locked: nothing the evictor could yield
    assert not evict(1).actions
    h.tree.unlock(lock)
    assert leaf.id in heap.live()  # the unlock pushed it again
    res = evict(1)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [leaf.id]
    h.check_accounting()


def test_a_device_locked_leaf_gets_its_entry_back_at_unlock() -> None:
    h = Harness(TreeSpec(page_size=4))
    p = h.pages([1, 2])
    h.insert(p)
    leaf = _leaf(h, p)
    _back_at_unlock(h, leaf, h.tree.residency.device_heap, h.tree.lock(leaf), h.evict_device)


def test_a_host_lock_does_not_keep_an_l1_leaf_out_of_the_heap() -> None:
    h = Harness(TreeSpec(page_size=4), host_enabled=True)
    p = h.pages([1, 2])
    h.insert(p)
    h.backup_l1(p)
    leaf = _leaf(h, p)
    pin = h.tree.locks.lock_host([leaf])  # a store reads its L2 copy
    h.tree.residency.touched(leaf)
    assert leaf.id in h.tree.residency.device_heap.live()
    res = h.evict_device(1)  # its L1 copy may go (demoted: the L2 copy stays)
    assert [a.node_id for a in res.actions if isinstance(a, Demoted)] == [leaf.id]
    h.tree.unlock(pin)
    h.check_accounting()


def test_a_host_locked_l2_leaf_gets_its_entry_back_at_unlock() -> None:
    h = Harness(TreeSpec(page_size=4), host_enabled=True)
    p = h.pages([1, 2])
    h.insert(p)
    h.backup_l1(p)
    h.evict_device(2)  # both demoted: L2 only
    leaf = _leaf(h, p)
    assert leaf.on_host and not leaf.on_device
    _back_at_unlock(h, leaf, h.tree.residency.host_heap, h.tree.locks.lock_host([leaf]),
                    h.evict_host)
