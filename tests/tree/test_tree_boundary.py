"""Tombstones, SWA leaves cut to one window, MAMBA checkpoints and the reuse boundary.

Seed 003's worked example, through the real tree: 4-token nodes, window 4,
path = [mamba] [-] [swa tombstone, mamba] [-]
  -> reuse 4 tokens with FULL+SWA+MAMBA, 16 without MAMBA, 16 with FULL only.
"""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.runtime.handles import Tier
from hicache.tree.actions import Deleted, FreeDevice
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.options import TreeOptions


def seed_tree_by_inserts(spec: TreeSpec) -> tuple[Harness, list]:
    """Four one-page nodes; MAMBA checkpoints at n1 and n3; n3's SWA slot a tombstone."""
    h = Harness(spec)
    p = h.pages([1, 2, 3, 4])
    h.insert(p, swa_pages=1, mamba=False)  # [1 2 3](SWA tombstone) [4]
    h.insert(p[:1], swa_pages=1, mamba=True)  # split off n1, fill its SWA, checkpoint
    h.insert(p[:2], swa_pages=1, mamba=False)  # split off n2, fill its SWA
    h.insert(p[:3], swa_pages=0, mamba=True)  # n3 keeps the tombstone, gets a checkpoint
    return h, p


@pytest.mark.parametrize("spec, expected", [
    (TreeSpec.hybrid(4, swa_window=4, mamba=True), 4),
    (TreeSpec.hybrid(4, swa_window=4, mamba=False), 16),
    (TreeSpec(page_size=4), 16),
])
def test_seed_003_worked_example_via_inserts(spec: TreeSpec, expected: int) -> None:
    h, p = seed_tree_by_inserts(spec)
    nodes = h.tree.match(p, touch=False)
    path = list(h.tree.path_to_root(h.tree.root.children[p[0]]
                                    .children[p[1]].children[p[2]].children[p[3]]))[::-1]
    assert [n.num_pages for n in path] == [1, 1, 1, 1]
    if spec.get(Kind.SWA):
        assert [Kind.SWA in n.device for n in path] == [True, True, False, True]
    if spec.get(Kind.MAMBA):
        assert [Kind.MAMBA in n.device for n in path] == [True, False, True, False]
    assert nodes.device_tokens == expected and nodes.matched_pages == 4
    h.check_accounting()


def test_seed_003_worked_example_via_swa_eviction() -> None:
    """Same path, but n3's SWA slot is tombstoned by evict_device(kind=SWA) on an internal
    node (the only SWA holder left unlocked) while its FULL pages stay; SWA takes n3's
    checkpoint along (SGLang's cascade: MAMBA is the lower priority)."""
    h = Harness(TreeSpec.hybrid(4, swa_window=4, mamba=True))
    p = h.pages([1, 2, 3, 4])
    h.insert(p[:3], mamba=True)  # [1 2](SWA) [3](SWA, MAMBA): a new leaf keeps one window
    h.insert(p[:1], swa_pages=0, mamba=True)  # splits [1] off, checkpoint there
    h.insert(p, swa_pages=1, mamba=False)
    n1 = h.tree.root.children[p[0]]
    n2 = n1.children[p[1]]
    n3 = n2.children[p[2]]
    n4 = n3.children[p[3]]
    assert h.tree.match(p[:2], touch=False).device_tokens == 4  # no checkpoint at n2
    handles = [h.tree.lock(n, kinds=[Kind.SWA]) for n in (n1, n2, n4)]
    res = h.evict_device(1, Kind.SWA)
    assert [(a.node_id, a.kind) for a in res.actions] == [(n3.id, Kind.SWA),
                                                        (n3.id, Kind.MAMBA)]
    for handle in handles:
        h.tree.unlock(handle)
    assert Kind.FULL in n3.device and n3.parent is not None  # a tombstone, not a delete
    assert h.tree.match(p).device_tokens == 4
    h.check_accounting()


def test_tombstoned_internal_node_still_serves_full_attention_reuse() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=4))
    p = h.pages([1, 2, 3])
    h.insert(p, swa_pages=1)
    assert h.tree.match(p).device_tokens == 12  # the window needs only the last page
    assert h.tree.match(p[:2]).device_tokens == 0  # no live window ends after page 2


def test_a_new_swa_leaf_is_cut_to_one_window_and_an_internal_node_loses_swa_whole() -> None:
    """window 8 tokens = 2 pages of 4: a 6-page insert makes [4 pages][last 2 pages], both
    with SWA (SGLang cuts at insert time so that a lock pins one window). SWA eviction of
    the internal part tombstones all 4 of its pages at once."""
    h = Harness(TreeSpec.hybrid(4, swa_window=8, mamba=True))
    p = h.pages([1, 2, 3, 4, 5, 6])
    leaf = h.insert(p).node
    head = leaf.parent
    assert (head.num_pages, leaf.num_pages) == (4, 2)
    assert Kind.SWA in head.device and Kind.MAMBA not in head.device
    res = h.evict_device(1, Kind.SWA)
    assert res.freed == {Kind.SWA: 4}
    assert Kind.SWA not in head.device and Kind.FULL in head.device
    assert Kind.SWA in leaf.device and Kind.MAMBA in leaf.device
    assert h.tree.match(p).device_tokens == 24  # the leaf's window still serves reuse
    h.check_accounting()


def test_swa_eviction_of_a_short_leaf_drops_the_whole_leaf() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=8, mamba=True))
    h.insert(h.pages([1, 2]))
    res = h.evict_device(1, Kind.SWA)
    assert res.freed == {Kind.FULL: 2, Kind.SWA: 2, Kind.MAMBA: 1}
    assert any(isinstance(a, Deleted) for a in res.actions) and not h.tree.nodes
    h.check_accounting()


def test_mamba_checkpoint_stays_on_the_tail_when_a_node_splits() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=16, mamba=True))
    p = h.pages([1, 2, 3, 4])
    leaf = h.insert(p).node
    slot = leaf.device[Kind.MAMBA]
    h.tree.match(h.pages([1, 2, 9]))  # diverges inside the node: split after 2 pages
    head = leaf.parent
    assert head.num_pages == 2 and Kind.MAMBA not in head.device
    assert leaf.device[Kind.MAMBA] == slot
    # no checkpoint at the split point, so the prefix cannot be reused with MAMBA
    assert h.tree.match(p[:2]).device_tokens == 0
    assert h.tree.match(p).device_tokens == 16
    h.check_accounting()


def test_mamba_eviction_tombstones_an_internal_node() -> None:
    h = Harness(TreeSpec.hybrid(4, mamba=True))
    p = h.pages([1, 2, 3])
    h.insert(p[:1])
    h.insert(p)
    first = h.tree.root.children[p[0]]
    h.tree.match(p)  # refreshes the matched checkpoint only: ``first`` is least recent
    res = h.evict_device(1, Kind.MAMBA)
    assert [(a.node_id, a.kind) for a in res.actions if isinstance(a, FreeDevice)] == [
        (first.id, Kind.MAMBA)]
    assert Kind.FULL in first.device
    assert h.tree.match(p[:1]).device_tokens == 0 and h.tree.match(p).device_tokens == 12
    assert h.tree.held_pages(Tier.DEVICE, Kind.MAMBA) == 1
    h.check_accounting()


def test_a_full_leaf_with_an_swa_tombstone_stays_until_its_own_turn() -> None:
    """FULL decides whether a node survives (SGLang): evicting the child leaves the
    tombstoned parent as a device leaf; it goes when FULL eviction reaches it."""
    h = Harness(TreeSpec.hybrid(4, swa_window=4))
    leaf = h.insert(h.pages([1, 2, 3]), swa_pages=1).node
    parent = leaf.parent
    assert Kind.SWA not in parent.device
    res = h.evict_device(1)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [leaf.id]
    assert parent.is_device_leaf() and Kind.SWA not in parent.device
    res = h.evict_device(1)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [parent.id]
    h.check_accounting()


def test_option_free_swa_tombstone_leaves_takes_the_parent_along() -> None:
    """It could never end a reuse boundary (no live window ends there)."""
    h = Harness(TreeSpec.hybrid(4, swa_window=4),
                options=TreeOptions(free_swa_tombstone_leaves=True))
    leaf = h.insert(h.pages([1, 2, 3]), swa_pages=1).node
    parent = leaf.parent
    res = h.evict_device(1)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [leaf.id, parent.id]
    assert not h.tree.nodes
    h.check_accounting()


def test_a_locked_device_leaf_keeps_full_but_may_lose_its_swa_slot() -> None:
    """A FULL-only lock pins the pages, not the SWA slot; once unlocked, FULL eviction
    takes the tombstoned nodes in recency order."""
    h = Harness(TreeSpec.hybrid(4, swa_window=4))
    p = h.pages([1, 2, 3])
    for i in (1, 2, 3):
        h.insert(p[:i])
    first = h.tree.root.children[p[0]]
    second = first.children[p[1]]
    leaf = second.children[p[2]]
    handle = h.tree.lock(second, kinds=[Kind.FULL])
    h.tree.match(p[:2])  # first and second are now more recent than the leaf
    res = h.evict_device(1, Kind.SWA)  # the LRU SWA holder is the leaf: it goes whole
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [leaf.id]
    h.evict_device(2, Kind.SWA)  # both remaining nodes lose only their SWA slot
    assert second.is_device_leaf() and Kind.SWA not in second.device
    assert Kind.SWA not in first.device
    assert h.evict_device(100).actions == []  # FULL is locked along the path
    h.tree.unlock(handle)
    res = h.evict_device(100)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [second.id, first.id]
    h.check_accounting()
