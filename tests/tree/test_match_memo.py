"""match(memo=True) reuses the last walk of the same page list while the tree's shape is
unchanged: two trees driven by the same operations, one matching with the memo and one
without, give the same match results and end the same (node ids, clock, values), and
the memo does skip walks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hicache.runtime.handles import Tier
from hicache.tree.components import Kind, TreeSpec
from tests.tree.tree_harness import Harness

# sequences share prefixes so that matches split nodes and evictions drop shared parts
seqs = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=5)
ops = st.lists(st.tuples(st.sampled_from(["match", "peek", "insert", "evict", "backup",
                                          "evict_host"]),
                         st.integers(0, 4), st.integers(1, 6)), max_size=40)



def _summary(m) -> tuple:  # noqa: ANN001
    return (m.device_tokens, m.host_tokens, m.matched_pages, m.device_nodes,
            tuple(n.id for n in m.path))


@given(seqs, ops)
def test_memo_matches_equal_fresh_walks(sequences: list[list[int]], script: list) -> None:
    # L2 on: evictions demote backed-up nodes (values out, nodes stay)
    trees = [Harness(TreeSpec(2), device_pages=40, host_enabled=True) for _ in range(2)]
    lists = [[h.pages(s) for s in sequences] for h in trees]  # one list per sequence, kept
    for op, i, n in script:
        results = []
        for h, pages, memo in zip(trees, lists, (True, False), strict=True):
            p = pages[i % len(pages)]
            if op in ("match", "peek"):
                results.append(_summary(h.tree.match(p, touch=op == "match", memo=memo)))
            else:
                h.change(op, p, n)
        assert results[:1] == results[1:]
    assert trees[0].state() == trees[1].state()


def test_a_repeat_skips_the_walk_until_the_shape_changes(monkeypatch) -> None:
    h = Harness(TreeSpec(2))
    a, b = h.pages([1, 2, 3]), h.pages([1, 2, 4])
    h.insert(a)
    walks = []
    read = type(h.tree)._read
    monkeypatch.setattr(type(h.tree), "_read",
                        lambda tree, pages: walks.append(1) or read(tree, pages))
    first = h.tree.match(b, touch=False, memo=True)  # splits [1 2 3] at 2
    assert h.tree.match(b, memo=True) is first and len(walks) == 1  # stamps, no walk
    assert h.tree.match(list(b), memo=True) == first and len(walks) == 2  # another list
    h.insert(b)  # a new node: the shape changed
    assert h.tree.match(b, touch=False, memo=True).device_tokens == 6 and len(walks) == 3


def test_values_moving_between_tiers_change_the_shape() -> None:
    """A demotion (L1 value out) and a load-back (L1 value in) leave every node in place;
    a repeated match sees each all the same."""
    h = Harness(TreeSpec(2), host_enabled=True)
    a = h.pages([1, 2, 3])
    h.insert(a)
    for node in h.tree.match(a, touch=False).path:
        h.complete_backup(h.begin_backup(node))
    assert h.tree.match(a, touch=False, memo=True).device_tokens == 6
    h.evict_device(3)  # demoted: on L2 only
    demoted = h.tree.match(a, touch=False, memo=True)
    assert (demoted.device_tokens, demoted.host_tokens) == (0, 6)
    (node,) = demoted.path
    h.tree.residency.put_value(node, Tier.DEVICE, Kind.FULL, h.take(Tier.DEVICE, Kind.FULL, 3))
    assert h.tree.match(a, touch=False, memo=True).device_tokens == 6


@given(seqs, ops)
def test_every_lists_memo_follows_changes_elsewhere(sequences: list[list[int]],
                                                    script: list) -> None:
    """After each operation every list is matched again (unstamped), with the memo in one
    tree and fresh walks in its twin: a memoised walk must read what a fresh walk reads
    after any change elsewhere (splits of its nodes by a shorter list's walk, new children
    at its path's end, demotions, backups and evictions)."""
    trees = [Harness(TreeSpec(2), device_pages=40, host_enabled=True) for _ in range(2)]
    lists = [[h.pages(s) for s in sequences] for h in trees]
    for op, i, n in script:
        results: list[list] = [[], []]
        for h, pages, memo, seen in zip(trees, lists, (True, False), results, strict=True):
            p = pages[i % len(pages)]
            if op in ("match", "peek"):  # a prefix of a list: it may split a node of others
                seen.append(_summary(h.tree.match(p[:n], touch=op == "match")))
            else:
                h.change(op, p, n)
            seen.extend(_summary(h.tree.match(q, touch=False, memo=memo)) for q in pages)
        assert results[0] == results[1]
    assert trees[0].state() == trees[1].state()
