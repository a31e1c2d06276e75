"""Session references counted as SGLang's FULL component counts them (PR 29173): one per end
of a session's paths at or below a node. A path that continues the session's last one
moves its end; a fork (the next prompt does not carry the last output) adds an end, so the
trunk the branches share holds more references than the branches themselves."""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.tree.actions import FreeDevice
from hicache.tree.components import TreeSpec
from hicache.tree.invariants import TreeInvariantError


def chain(h: Harness, page_ids: list[int]):  # noqa: ANN201 - the deepest node
    """Insert the prefixes of ``page_ids`` one page apart: one node per page."""
    p = h.pages(page_ids)
    node = None
    for i in range(1, len(p) + 1):
        node = h.insert(p[:i]).node
    return node


def page_id(h: Harness, node) -> int:  # noqa: ANN001
    """The page id (as given to ``h.pages``) of ``node``'s first page."""
    return next(i for i in range(1, 20) if h.pages([i])[0] == node.key[0])


def counts(h: Harness, sid: str) -> dict[tuple[int, ...], int]:
    """Page id of each referenced node (one page each here) -> its count from ``sid``."""
    return {(page_id(h, n),): n.sessions[sid]
            for n in h.tree.nodes.values() if sid in n.sessions}


def test_a_continued_path_holds_one_reference_per_node() -> None:
    h = Harness(TreeSpec(page_size=4), session_aware=True)
    h.tree.reference_session("s", chain(h, [1, 2]))
    h.tree.reference_session("s", chain(h, [1, 2, 3]))  # the next turn extends the last
    assert counts(h, "s") == {(1,): 1, (2,): 1, (3,): 1}
    assert [page_id(h, n) for n in h.tree.session_leaves["s"]] == [3]
    h.check_accounting()


def test_a_fork_adds_an_end_and_the_shared_trunk_a_reference() -> None:
    h = Harness(TreeSpec(page_size=4), session_aware=True)
    h.tree.reference_session("s", chain(h, [1, 2, 9]))  # turn 1: prompt 1 2, output 9
    h.tree.reference_session("s", chain(h, [1, 2, 3, 8]))  # turn 2 does not carry 9
    assert counts(h, "s") == {(1,): 2, (2,): 2, (9,): 1, (3,): 1, (8,): 1}
    h.tree.reference_session("s", chain(h, [1, 2, 3, 4]))  # and forks again after 3
    assert counts(h, "s") == {(1,): 3, (2,): 3, (9,): 1, (3,): 2, (8,): 1, (4,): 1}
    assert len(h.tree.session_leaves["s"]) == 3
    h.check_accounting()
    assert h.tree.close_session("s") == 6
    assert counts(h, "s") == {} and "s" not in h.tree.session_leaves
    h.check_accounting()


def test_session_aware_eviction_keeps_a_forked_trunk_over_newer_single_references() -> None:
    """Plain LRU evicts a forked session's trunk before a newer session's path; counted
    references (the trunk holds 2: two ends below it) keep it until every node holding 1,
    however recent, is gone. A per-session flag (1 on every node) would order as LRU."""
    order = {}
    for aware in (False, True):
        h = Harness(TreeSpec(page_size=4), session_aware=aware, host_enabled=True)
        h.tree.reference_session("s", chain(h, [1, 9]))  # trunk 1, output 9
        h.tree.reference_session("s", chain(h, [1, 3]))  # forks at 1: trunk 1 counts 2
        h.tree.reference_session("t", chain(h, [5, 6]))  # another session, newest
        names = {n.id: page_id(h, n) for n in h.tree.nodes.values()}
        for node in list(h.tree.nodes.values()):  # on L2 too (write-through): L1 evictions
            h.complete_backup(h.begin_backup(node))  # keep every node, so every end stays
        got = []
        while len(got) < len(names):
            res = h.evict_device(1)
            got += [names[a.node_id] for a in res.actions if isinstance(a, FreeDevice)]
        order[aware] = got
        h.check_accounting()
    assert order[False] == [9, 3, 1, 6, 5]  # least recently used first
    assert order[True] == [9, 3, 6, 5, 1]   # every 1-reference node first, then the trunk


def test_an_end_that_is_removed_falls_back_to_its_parent() -> None:
    h = Harness(TreeSpec(page_size=4), session_aware=True)
    h.tree.reference_session("s", chain(h, [1, 2]))
    h.evict_device(1)  # the end (2) goes; its parent becomes the end, counts unchanged
    assert counts(h, "s") == {(1,): 1}
    assert [page_id(h, n) for n in h.tree.session_leaves["s"]] == [1]
    h.check_accounting()


def test_a_removed_end_whose_parent_is_an_end_too_takes_its_reference_with_it() -> None:
    h = Harness(TreeSpec(page_size=4), session_aware=True)
    h.tree.reference_session("s", chain(h, [1, 9]))
    h.tree.reference_session("s", chain(h, [1]))  # an end at 1 itself: 1 counts 2
    assert counts(h, "s") == {(1,): 2, (9,): 1}
    h.evict_device(1)  # 9 goes; 1 is already an end: the reference 9 carried goes
    assert counts(h, "s") == {(1,): 1}
    h.check_accounting()


def test_the_invariant_check_catches_a_wrong_count() -> None:
    h = Harness(TreeSpec(page_size=4), session_aware=True)
    h.tree.reference_session("s", chain(h, [1, 9]))
    h.tree.reference_session("s", chain(h, [1, 3]))
    trunk = next(n for n in h.tree.nodes.values() if page_id(h, n) == 1)
    trunk.sessions["s"] = 1  # the per-session flag rule: what SGLang's count is not
    with pytest.raises(TreeInvariantError, match="count 1, 2 ends"):
        h.check_accounting()
