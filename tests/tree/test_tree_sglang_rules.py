"""Each rule where the tree used to differ from SGLang 0.5.23 (issue 8), on a small tree.

tests/oracle replays SGLang's own results on long streams; these name the rules one by
one, each on an example where the old behaviour gives a different answer.
"""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.tree.actions import Deleted, FreeDevice
from hicache.tree.components import Kind, TreeSpec


def deleted(res) -> list[int]:  # noqa: ANN001
    return [a.node_id for a in res.actions if isinstance(a, Deleted)]


def frees(res) -> list[tuple[int, Kind]]:  # noqa: ANN001
    return [(a.node_id, a.kind) for a in res.actions if isinstance(a, FreeDevice)]


def test_a_split_stamps_both_parts_as_just_used() -> None:
    h = Harness(TreeSpec(page_size=4))
    lower = h.insert(h.pages([1, 2, 3, 4])).node
    other = h.insert(h.pages([5, 6])).node  # used after ``lower``
    h.tree.match(h.pages([1, 2, 9]))  # splits: [1 2] above, ``lower`` keeps [3 4]
    assert lower.num_pages == 2 and lower.last_access > other.last_access
    assert deleted(h.evict_device(1)) == [other.id]  # not the split-off lower part


def test_a_match_refreshes_the_checkpoint_it_reuses_not_the_path() -> None:
    h = Harness(TreeSpec.hybrid(4, mamba=True))
    p = h.pages([1, 2])
    first = h.insert(p[:1]).node
    h.insert(p)
    h.insert(h.pages([7]))  # a newer checkpoint elsewhere
    h.tree.match(p)  # reuses the checkpoint at [2] only: [1]'s stays the least recent
    assert frees(h.evict_device(1, Kind.MAMBA)) == [(first.id, Kind.MAMBA)]
    assert Kind.FULL in first.device  # an internal node: a tombstone


def test_a_match_refreshes_one_swa_window_plus_a_page_not_the_whole_path() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=4))  # window: one page
    p = h.pages([1, 2, 3])
    first = h.insert(p[:1]).node
    h.insert(p[:2])
    h.insert(p)
    h.insert(h.pages([7]))
    h.tree.match(p)  # refreshes [3] and [2] (8 tokens back), not [1]
    assert frees(h.evict_device(1, Kind.SWA)) == [(first.id, Kind.SWA)]


def test_unlock_does_not_refresh() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=4))
    a = h.insert(h.pages([1])).node
    h.insert(h.pages([5]))
    h.tree.unlock(h.tree.lock(a))
    assert deleted(h.evict_device(1, Kind.SWA)) == [a.id]  # still the least recent


def test_a_parent_is_not_refreshed_when_its_child_is_evicted() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=4))
    p = h.pages([1, 2])
    parent = h.insert(p[:1]).node
    child = h.insert(p).node
    h.insert(h.pages([7]))
    assert deleted(h.evict_device(1)) == [child.id]  # FULL: the least recent leaf
    assert deleted(h.evict_device(1, Kind.SWA)) == [parent.id]  # its place is unchanged


def test_a_split_puts_the_upper_part_just_behind_the_lower_one() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=16))  # a 2-page insert stays one node
    lower = h.insert(h.pages([1, 2])).node
    h.insert(h.pages([5]))
    h.tree.match(h.pages([1, 9]), touch=False)  # split only: no refresh
    upper = lower.parent
    assert frees(h.evict_device(1, Kind.SWA)) == [(upper.id, Kind.SWA)]  # then ``lower``


def test_swa_eviction_frees_what_was_asked_including_the_part_after_a_cut() -> None:
    """Window 4, page 1: insert 8 tokens, evict 8 SWA tokens -> 8 SWA and 4 FULL freed
    (SGLang); the tree used to split, free 4 and stop."""
    h = Harness(TreeSpec.hybrid(1, swa_window=4))
    h.insert(h.pages(list(range(1, 9))))
    res = h.evict_device(8, Kind.SWA)
    assert res.freed == {Kind.SWA: 8, Kind.FULL: 4}
    h.check_accounting()


def test_evicting_zero_frees_nothing() -> None:
    h = Harness(TreeSpec.hybrid(4, swa_window=4, mamba=True))
    h.insert(h.pages([1, 2, 3]))
    for kind in (Kind.FULL, Kind.SWA, Kind.MAMBA):
        assert h.evict_device(0, kind).actions == []
    assert len(h.tree.nodes) == 2


def test_hits_are_counted_by_inserts_not_matches() -> None:
    h = Harness(TreeSpec(page_size=4))
    p = h.pages([1, 2])
    leaf = h.insert(p).node
    assert leaf.hit_count == 1
    h.tree.match(p)
    assert leaf.hit_count == 1
    h.insert(p)
    assert leaf.hit_count == 2
    wb = Harness(TreeSpec(page_size=4), host_enabled=True, write_back=True)
    assert wb.insert(p).node.hit_count == 0  # SGLang counts none under write_back


def test_a_request_counts_each_node_once_over_its_inserts() -> None:
    """SGLang's ``inserted_len``: a request's later insert (its output after its prompt)
    counts no hit on the nodes it inserted before; another request's insert does."""
    h = Harness(TreeSpec(page_size=4))
    p = h.pages([1, 2, 3])
    prompt = h.insert(p[:2]).node
    res = h.tree.insert(p, h.fresh_values(1), inserted=2)  # the same request's output
    h.execute(res.actions)
    assert (prompt.hit_count, res.node.hit_count) == (1, 1)
    h.tree.insert(p, {})  # another request through both
    assert (prompt.hit_count, res.node.hit_count) == (2, 2)


def test_an_insert_of_a_cached_key_without_new_pages_counts_its_hits() -> None:
    """A request that reused its whole prompt still inserts it in SGLang (a walk): the
    hit reaches the write-through threshold of its nodes."""
    h = Harness(TreeSpec(page_size=4))
    p = h.pages([1, 2])
    leaf = h.insert(p).node
    assert h.tree.insert(p, {}).actions == () and leaf.hit_count == 2
    with pytest.raises(ValueError, match="holds only the first 2 pages"):
        h.tree.insert(h.pages([1, 2, 3]), {})
