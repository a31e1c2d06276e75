"""Matching, splitting and inserting happen at page granularity (docs/SOURCES.md §1).

A page key holds ``page_size`` token ids (packed, hicache.tree.pagekeys); a trailing partial
page is never cached.
Insert hands back duplicates as free actions, except when the caller passes the tree's own
pages (a request re-inserting the prefix it borrowed).
"""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.tree.actions import FreeDevice
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.pagekeys import key_tokens
from hicache.tree.radix import page_keys

FULL_ONLY = TreeSpec(page_size=4)
HYBRID = TreeSpec.hybrid(4, swa_window=8, mamba=True)


def test_page_keys_drop_the_partial_trailing_page() -> None:
    assert [list(key_tokens(k)) for k in page_keys([1, 2, 3, 4, 5, 6], 4)] == [[1, 2, 3, 4]]
    assert [list(key_tokens(k)) for k in page_keys([7, 8], 1)] == [[7], [8]]
    assert page_keys([1, 2, 3, 4], 4) == page_keys([1, 2, 3, 4, 9], 4)  # equal iff tokens are
    assert page_keys([1, 2, 3, 4], 4) != page_keys([1, 2, 3, 5], 4)


def test_match_counts_whole_pages_only() -> None:
    h = Harness(FULL_ONLY)
    h.insert(h.pages([1, 2, 3]))
    tokens = h.tokens([1, 2]) + [3000, 3001, 77]  # third page differs in its last token
    m = h.tree.match(page_keys(tokens, 4))
    assert (m.matched_pages, m.device_tokens, m.host_tokens) == (2, 8, 0)


def test_a_divergent_match_splits_the_node_at_the_page() -> None:
    h = Harness(FULL_ONLY)
    leaf = h.insert(h.pages([1, 2, 3, 4])).node
    m = h.tree.match(h.pages([1, 2, 9]))
    assert m.matched_pages == 2
    head = m.last_node
    assert head is not leaf and head.num_pages == 2 and leaf.num_pages == 2
    assert leaf.parent is head and head.parent is h.tree.root
    # the FULL extent was split in order: head keeps the first two pages
    pages = list(head.device[Kind.FULL].pages()) + list(leaf.device[Kind.FULL].pages())
    assert pages == [0, 1, 2, 3]
    h.check_accounting()


def test_insert_of_a_branch_shares_the_common_prefix() -> None:
    h = Harness(FULL_ONLY)
    h.insert(h.pages([1, 2, 3]))
    res = h.insert(h.pages([1, 2, 5, 6]))
    assert res.existing_pages == 2
    assert h.tree.pages_in(Tier.DEVICE) == 5  # 1,2 shared + 3 + 5,6
    assert sorted(n.num_pages for n in h.tree.nodes.values()) == [1, 2, 2]
    h.check_accounting()


def test_insert_returns_duplicate_pages_as_free_actions() -> None:
    h = Harness(HYBRID)
    pages = h.pages([1, 2, 3])
    h.insert(pages)
    again = h.fresh_values(3)
    res = h.tree.insert(pages, again)
    assert res.existing_pages == 3
    freed: dict = {}
    for a in res.actions:
        assert isinstance(a, FreeDevice)
        freed.setdefault(a.kind, []).extend(a.extent.pages())
    assert freed == {k: list(e.pages()) for k, e in again.items()}  # all of every component
    h.execute(res.actions)
    h.check_accounting()


def test_insert_of_the_very_same_pages_frees_nothing() -> None:
    h = Harness(FULL_ONLY)
    pages = h.pages([1, 2, 3])
    h.insert(pages)
    borrowed = h.tree.match(pages).path
    own = CacheExtentRef.concat(n.device[Kind.FULL] for n in borrowed)
    new = h.take(Tier.DEVICE, Kind.FULL, 2)
    res = h.tree.insert(h.pages([1, 2, 3, 4, 5]), {Kind.FULL: CacheExtentRef.concat([own, new])})
    assert res.actions == ()
    assert res.existing_pages == 3 and res.node.num_pages == 2
    h.check_accounting()


def test_a_partial_overlap_frees_only_the_overlapping_part() -> None:
    h = Harness(FULL_ONLY)
    h.insert(h.pages([1, 2]))
    values = h.fresh_values(4)
    res = h.tree.insert(h.pages([1, 2, 3, 4]), values)
    dup = [a.extent for a in res.actions]
    assert [list(e.pages()) for e in dup] == [list(values[Kind.FULL].pages())[:2]]
    h.execute(res.actions)
    h.check_accounting()


def test_swa_extent_covers_a_suffix_and_earlier_nodes_get_tombstones() -> None:
    h = Harness(HYBRID)
    res = h.insert(h.pages([1, 2, 3, 4, 5]), swa_pages=2)
    tail = res.node
    assert tail.num_pages == 2 and Kind.SWA in tail.device and Kind.MAMBA in tail.device
    head = tail.parent
    assert head.num_pages == 3 and Kind.FULL in head.device and Kind.SWA not in head.device
    assert h.tree.held_pages(Tier.DEVICE, Kind.SWA) == 2
    h.check_accounting()


def test_insert_rejects_a_full_extent_of_the_wrong_length() -> None:
    h = Harness(FULL_ONLY)
    with pytest.raises(ValueError, match="FULL extent"):
        h.tree.insert(h.pages([1, 2]), {Kind.FULL: h.take(Tier.DEVICE, Kind.FULL, 3)})
