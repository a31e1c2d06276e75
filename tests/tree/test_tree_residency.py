"""HiCache residency: L1 eviction demotes backed-up leaves to host-only and deletes the
rest; write_back backs a leaf up before it may leave L1; L2 eviction removes host-only
unlocked leaves; a split during an in-flight backup spreads the L2 copy over both nodes."""

from __future__ import annotations

from tree_harness import Harness

from hicache.runtime.handles import Tier
from hicache.tree.actions import BackupNode, Deleted, Demoted, FreeDevice, FreeHost
from hicache.tree.components import Kind, TreeSpec

FULL_ONLY = TreeSpec(page_size=4)
HYBRID = TreeSpec.hybrid(4, swa_window=16, mamba=True)  # inserts of <= 4 pages: one node


def kinds(actions: list) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_backed_up_leaf_is_demoted_and_still_matches_from_host() -> None:
    h = Harness(HYBRID, host_enabled=True)
    p = h.pages([1, 2, 3])
    leaf = h.insert(p).node
    job = h.begin_backup(leaf)
    assert leaf.backing_up and h.evict_device(100).actions == []  # locked while copying
    h.complete_backup(job)
    res = h.evict_device(100)
    assert kinds(res.actions) == ["FreeDevice"] * 3 + ["Demoted"]
    assert res.actions[-1] == Demoted(leaf.id, 12)
    assert leaf.id in h.tree.nodes and not leaf.on_device and leaf.on_host
    m = h.tree.match(p)
    assert (m.device_tokens, m.host_tokens) == (0, 12)
    h.check_accounting()


def test_leaf_without_host_copy_is_deleted() -> None:
    h = Harness(FULL_ONLY, host_enabled=True)
    leaf = h.insert(h.pages([1, 2])).node
    res = h.evict_device(1)
    assert kinds(res.actions) == ["FreeDevice", "Deleted"] and leaf.id not in h.tree.nodes
    h.check_accounting()


def test_deleting_a_device_leaf_takes_its_host_only_descendants() -> None:
    h = Harness(FULL_ONLY, host_enabled=True)
    p = h.pages([1, 2])
    h.insert(p[:1])
    child = h.insert(p).node
    h.complete_backup(h.begin_backup(child))
    h.evict_device(1)  # child demoted; its parent is now the device leaf
    res = h.evict_device(1)
    assert sorted(kinds(res.actions)) == ["Deleted", "Deleted", "FreeDevice", "FreeHost"]
    assert not h.tree.nodes
    h.check_accounting()


def test_write_back_backs_up_before_demoting() -> None:
    h = Harness(FULL_ONLY, host_enabled=True, write_back=True)
    leaf = h.insert(h.pages([1, 2])).node
    first = h.evict_device(2)
    assert kinds(first.actions) == ["BackupNode"] and first.freed == {}
    backup = first.actions[0]
    assert isinstance(backup, BackupNode) and backup.node_id == leaf.id and backup.tokens == 8
    assert h.used(Tier.HOST) == 2  # the test allocated the L2 copy
    assert h.evict_device(2).actions == []  # in flight: nothing else to do
    h.complete_backup(backup.node_id)
    second = h.evict_device(2)
    assert kinds(second.actions) == ["FreeDevice", "Demoted"]
    h.check_accounting()


def test_write_back_backs_up_only_the_leaves_the_eviction_needs() -> None:
    """SGLang 0.5.23 (UnifiedRadixCache._evict_components) backs up a write_back victim
    and demotes it before it picks the next, so it copies what the eviction asks for;
    the walk here stops once started backups cover the pages asked (before: it backed up
    every evictable leaf in one call)."""
    h = Harness(FULL_ONLY, host_enabled=True, write_back=True)
    leaves = [h.insert(h.pages([10 * i, 10 * i + 1])).node for i in range(1, 6)]  # 2 pages
    first = h.evict_device(3)  # two 2-page leaves cover 3 pages
    assert [a.node_id for a in first.actions] == [leaves[0].id, leaves[1].id]
    assert kinds(first.actions) == ["BackupNode"] * 2 and first.backing_up == 4
    assert [n.backing_up for n in leaves] == [True, True, False, False, False]
    for a in first.actions:
        h.complete_backup(a.node_id)
    second = h.evict_device(3)  # the copies landed: demote them, LRU first
    assert kinds(second.actions) == ["FreeDevice", "Demoted", "FreeDevice", "Demoted"]
    assert second.freed == {Kind.FULL: 4} and [n.on_device for n in leaves] == [
        False, False, True, True, True]
    h.check_accounting()


def test_evict_host_removes_only_host_only_unlocked_leaves() -> None:
    h = Harness(FULL_ONLY, host_enabled=True)
    demoted, pinned, resident = (h.insert(h.pages([i])).node for i in (1, 2, 3))
    for n in (demoted, pinned, resident):
        h.complete_backup(h.begin_backup(n))
    h.tree.match(h.pages([3]))  # ``resident`` is the most recently used: it stays on L1
    h.evict_device(2)
    assert not demoted.on_device and not pinned.on_device and resident.on_device
    handle = h.tree.locks.lock_host([pinned])
    res = h.evict_host(100)
    assert [(type(a).__name__, a.node_id) for a in res.actions] == [
        ("FreeHost", demoted.id), ("Deleted", demoted.id)]
    assert resident.on_host  # a device node's L2 copy is not a host-only leaf
    h.tree.unlock(handle)
    assert [a.node_id for a in h.evict_host(100).actions if isinstance(a, Deleted)] == [pinned.id]
    h.check_accounting()


def test_evict_host_never_removes_a_host_only_node_with_children() -> None:
    h = Harness(FULL_ONLY, host_enabled=True)
    p = h.pages([1, 2])
    h.insert(p[:1])
    leaf = h.insert(p).node
    parent = leaf.parent
    h.complete_backup(h.begin_backup(parent))
    h.complete_backup(h.begin_backup(leaf))
    h.evict_device(1)
    h.evict_device(1)  # both host-only now
    res = h.evict_host(1)
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [leaf.id]
    assert [a.node_id for a in h.evict_host(1).actions if isinstance(a, Deleted)] == [parent.id]
    h.check_accounting()


def test_split_during_backup_spreads_the_host_copy_over_both_nodes() -> None:
    h = Harness(HYBRID, host_enabled=True)
    leaf = h.insert(h.pages([1, 2, 3, 4])).node
    job = h.begin_backup(leaf)
    host = h.pending[job]
    h.tree.match(h.pages([1, 9]))  # split after page 1 while the copy is in flight
    head = leaf.parent
    assert head.backing_up and leaf.backing_up
    nodes = h.complete_backup(job)
    assert nodes == [head, leaf] and not head.backing_up and not leaf.backing_up
    for kind in (Kind.FULL, Kind.SWA):
        whole = list(host[kind].pages())
        assert list(head.host[kind].pages()) == whole[:1]
        assert list(leaf.host[kind].pages()) == whole[1:]
    assert Kind.MAMBA not in head.host and leaf.host[Kind.MAMBA] == host[Kind.MAMBA]
    h.check_accounting()
    # both halves demote and free exactly what they hold
    res = h.evict_device(100)
    frees = sum(a.extent.num_pages for a in res.actions if isinstance(a, FreeDevice)
                and a.kind is Kind.FULL)
    assert frees == 4 and not head.on_device and head.on_host
    host_frees = h.evict_host(100).actions
    assert sum(a.extent.num_pages for a in host_frees if isinstance(a, FreeHost)
               and a.kind is Kind.FULL) == 4
    assert not h.tree.nodes
    h.check_accounting()


def test_held_pages_match_the_allocators_through_a_mixed_sequence() -> None:
    h = Harness(HYBRID, host_enabled=True)
    for ids in ([1, 2, 3], [1, 2, 4, 5], [1, 6], [1, 2, 3, 7, 8, 9]):
        h.insert(h.pages(ids))
        h.check_accounting()
    h.complete_backup(h.begin_backup(h.tree.match(h.pages([1, 6])).last_node))
    for kind in (Kind.SWA, Kind.MAMBA, Kind.FULL):
        h.evict_device(3, kind)
        h.check_accounting()
    h.evict_host(100)
    h.check_accounting()
    assert h.tree.held_pages(Tier.DEVICE) == h.used(Tier.DEVICE)


def test_a_host_insert_during_a_backup_returns_its_copy_as_a_duplicate() -> None:
    """An L2 insert (e.g. an L3 prefetch) over a node whose backup is in flight: the
    backup brings the L2 copy, so the inserted one is freed, and no page leaks."""
    h = Harness(HYBRID, host_enabled=True)
    p = h.pages([1, 2, 3])
    leaf = h.insert(p).node
    job = h.begin_backup(leaf)
    host = {Kind.FULL: h.take(Tier.HOST, Kind.FULL, 3),
            Kind.MAMBA: h.take(Tier.HOST, Kind.MAMBA, 1)}
    res = h.tree.insert(p, host, tier=Tier.HOST)
    assert {(a.kind, a.extent) for a in res.actions} == set(host.items())
    assert all(isinstance(a, FreeHost) for a in res.actions)
    h.execute(res.actions)
    h.complete_backup(job)
    assert leaf.host[Kind.FULL] != host[Kind.FULL] and Kind.SWA in leaf.host
    h.check_accounting()


def test_a_host_insert_fills_what_the_backup_does_not_copy() -> None:
    h = Harness(HYBRID, host_enabled=True)
    p = h.pages([1, 2, 3])
    leaf = h.insert(p).node
    h.evict_device(1, Kind.MAMBA)  # a leaf goes whole under MAMBA eviction: re-insert
    leaf = h.insert(p, mamba=False).node
    job = h.begin_backup(leaf)  # copies FULL and SWA; there is no checkpoint to copy
    slot = h.take(Tier.HOST, Kind.MAMBA, 1)
    full = h.take(Tier.HOST, Kind.FULL, 3)
    res = h.tree.insert(p, {Kind.FULL: full, Kind.MAMBA: slot}, tier=Tier.HOST)
    assert [(a.kind, a.extent) for a in res.actions] == [(Kind.FULL, full)]
    h.execute(res.actions)
    assert leaf.host[Kind.MAMBA] == slot
    h.complete_backup(job)
    h.check_accounting()
